"""Options are spelled out in full, and a wrong option or command gets one "did you mean" line.

argparse accepts any unique prefix by default (``allow_abbrev=True``): ``speed --sequence 4096``
was silently taken as ``--sequence-parallel`` plus a stray ``4096``. Every gpuplan parser turns
that off, and an unknown name is compared with the names the (sub)command really has.
"""

from __future__ import annotations

import argparse

import pytest

from gpuplan.cli import build_parser


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_parser_refuses_abbreviations():
    parsers = list(_parsers(build_parser()))
    assert len(parsers) >= 12  # gpuplan, its 11 commands and flops' two
    assert all(p.allow_abbrev is False for p in parsers)


def test_a_prefix_of_an_option_is_an_error_naming_the_option(cli):
    rc, out, err = cli("speed", "llama-3.1-8b", "--gpu", "h100", "--sequence", "4096")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("gpuplan: error: unknown option '--sequence'; did you mean ")
    assert "--seq," in err or "--seq?" in err
    assert "gpuplan speed --help" in err


def test_a_prefix_that_used_to_be_unique_is_refused(cli):
    # --sequence-parallel is speed's only option starting "--sequence-p": once taken silently
    rc, _, err = cli("speed", "llama-3.1-8b", "--gpu", "h100", "--sequence-p")
    assert rc == 2 and "did you mean --sequence-parallel" in err


def test_the_full_option_and_its_equals_form_still_work(cli):
    rc, out, _ = cli("fit", "gpt2", "--seq=128", "--no-speed", "--json")
    assert rc == 0 and '"seq": 128' in out


def test_a_misspelt_command_suggests_the_command(cli):
    rc, out, err = cli("fitt")
    assert rc == 2 and out == ""
    assert err.startswith("gpuplan: error: unknown command 'fitt'; did you mean 'fit'?")
    assert err.count("\n") == 1


def test_a_nested_command_and_its_options(cli):
    rc, _, err = cli("flops", "modle")
    assert rc == 2 and "unknown command 'modle'; did you mean 'model'?" in err
    rc, _, err = cli("flops", "model", "gpt2", "--sequnce", "3")
    assert rc == 2 and "unknown option '--sequnce'; did you mean --seq" in err
    assert "gpuplan flops model --help" in err


def test_a_misspelt_choice_suggests_the_choice(cli):
    rc, _, err = cli("fit", "gpt2", "--overhead", "hgh")
    assert rc == 2
    assert "argument --overhead: invalid choice 'hgh'; did you mean 'high'?" in err
    assert "(choose from low, expected, high)" in err


@pytest.mark.parametrize("argv, expected", [
    (("--verson",), "unknown option '--verson'; did you mean --version?"),
    (("zzzz",), "unknown command 'zzzz' (commands: fit, gpus,"),  # nothing close: the list
    (("fit", "gpt2", "extra"), "unrecognized arguments: extra"),
])
def test_other_unknowns_are_one_line(cli, argv, expected):
    rc, out, err = cli(*argv)
    assert rc == 2 and out == "" and expected in err and err.count("\n") == 1
