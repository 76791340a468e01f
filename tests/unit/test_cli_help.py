"""``gpuplan --help`` lists every command from the dispatcher's static table (issue 27: listing
the commands imports none of their modules), and each line of that table is the help the command's
own module registers."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from gpuplan.cli import COMMANDS, HELP, build_parser, main


def _registered_help(name: str) -> str:
    sub = next(a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction))
    (action,) = sub._choices_actions  # only that command was built
    assert action.dest == name
    return action.help


def test_the_table_names_every_command_once():
    assert list(HELP) == list(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_each_line_is_what_the_command_registers(name):
    assert HELP[name] == _registered_help(name)


def test_help_lists_every_command_with_its_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    flat = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    for name in COMMANDS:
        assert f"{name} {' '.join(HELP[name].split())}" in flat, name


def test_help_and_the_bare_command_import_no_command_module():
    code = ("import contextlib, io, json, sys\nfrom gpuplan.cli import main\n"
            "for argv in (['--help'], []):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), "
            "contextlib.redirect_stderr(io.StringIO()):\n"
            "        try:\n            main(argv)\n        except SystemExit:\n            pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gpuplan'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["gpuplan", "gpuplan._version", "gpuplan.cli",
                                      "gpuplan.errors"]


def test_a_misspelt_command_is_one_line_naming_the_choices(capsys):
    assert main(["fitt"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'fitt'; did you mean 'fit'?" in err
    assert "doctor" in err  # the choices, from the static table
