"""The ``gpuplan`` command line: a thin layer that parses arguments, calls the library and renders.

Each subcommand lives in its own module (``gpuplan.cli.<name>``) exposing ``register(subparsers)``
and ``run(args) -> int``. A command imports only its own module (``gpuplan --help`` lists every
command from the static :data:`HELP` table, importing none); anything heavy (torch, matplotlib)
is imported inside ``run``. Every :class:`~gpuplan.errors.InputError` becomes one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from types import ModuleType

from .._version import __version__
from ..errors import GpuplanError, GpuplanWarning, InputError, closest, printable, shown

__all__ = ["main", "build_parser", "CliError"]

#: The subcommands, in the order of ``gpuplan --help``.
COMMANDS = ("fit", "gpus", "models", "speed", "cluster", "capacity", "flops", "trace", "bench",
            "profile", "serve", "doctor")

#: Each command's one-line help, as ``gpuplan --help`` lists it: written out here so that listing
#: the commands imports none of their modules (tests/unit/test_cli_help.py holds each line equal
#: to the help its module registers).
HELP = {
    "fit": "memory per GPU for training and inference, and a verdict per GPU",
    "gpus": "list the GPU catalog (dense peaks, memory, links, sources) or show one GPU",
    "models": "list the model catalog, or show one model's exact parameters by component and "
              "tensor",
    "speed": "how fast a model trains or serves on a GPU, and why",
    "cluster": "the best parallel layout (TP/PP/CP/EP/DP, ZeRO) of a job on N GPUs",
    "capacity": "TTFT/TPOT percentiles at a request rate, and the fewest GPUs that meet an SLO",
    "flops": "exact multiplies and additions of a matmul, and the work it gives a GPU",
    "trace": "run a model's real training or inference step under fake tensors and record its "
             "memory",
    "bench": "measure this machine: CPU vs GPU matmul, bandwidth, transfers (needs torch)",
    "profile": "run a training script and say what bounds it: data loading, transfer, host or "
               "compute",
    "serve": "the planner as a web page on this machine (http://127.0.0.1:8000)",
    "doctor": "show what this machine has: Python, torch and CUDA, GPUs, driver, bench database, "
              "extras",
}


def command_module(name: str) -> ModuleType:
    """The module of one subcommand, imported only when that command is built (a plan's
    start-up never pays for the bench, the profiler or the web server)."""
    if name == "fit":
        from . import fit as m
    elif name == "gpus":
        from . import gpus as m
    elif name == "models":
        from . import models as m
    elif name == "speed":
        from . import speed as m
    elif name == "cluster":
        from . import cluster as m
    elif name == "capacity":
        from . import capacity as m
    elif name == "flops":
        from . import flops as m
    elif name == "trace":
        from . import trace as m
    elif name == "bench":
        from . import bench as m
    elif name == "profile":
        from . import profile as m
    elif name == "serve":
        from . import serve as m
    elif name == "doctor":
        from . import doctor as m
    else:
        raise KeyError(name)
    return m


class CliError(InputError):
    """Bad command-line usage (argparse's complaint, on one line)."""


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` reads it ($COLUMNS, then stdout's
    terminal, then 80), without importing shutil (and bz2 and lzma) on every command."""
    try:
        cols = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            cols = 0
    return cols if cols > 0 else 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout at the terminal's width (argparse would import shutil for it)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    """argparse with gpuplan's manners: an option is spelled out in full (``--sequence`` is an
    error, never a silent ``--sequence-parallel``), a wrong option or command gets one line with
    "did you mean", and every complaint is one line and exit 2 (:class:`CliError`)."""

    def __init__(self, *args, formatter_class=None, allow_abbrev: bool = False, **kwargs) -> None:
        super().__init__(*args, formatter_class=formatter_class or _Formatter,
                         allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise CliError(f"{message} (see `{self.prog} --help`)")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            _command_parser(self, parsed)._unrecognized(extras)
        return parsed

    def _unrecognized(self, extras: list[str]) -> None:
        """The complaint about arguments no option took, raised by the (sub)command's parser
        whose options they missed, with the closest of its options for the first one."""
        options = [a.split("=", 1)[0] for a in extras if a.startswith("-") and a != "-"]
        if not options:
            self.error(f"unrecognized arguments: {printable(' '.join(extras), 200)}")
        known = [o for o in self._option_string_actions if o.startswith("--")]
        hits = closest(options[0], known)
        msg = f"unknown option {shown(options[0])}"
        if hits:
            msg += "; did you mean " + ", ".join(hits) + "?"
        self.error(msg)

    def _check_value(self, action, value) -> None:
        """A value outside an option's (or the command's) choices: the closest choices named."""
        if action.choices is None or value in action.choices:
            return
        choices = [str(c) for c in action.choices]
        hits = closest(str(value), choices)
        mean = "; did you mean " + ", ".join(repr(h) for h in hits) + "?" if hits else ""
        if isinstance(action, argparse._SubParsersAction):  # "gpuplan fitt"
            raise argparse.ArgumentError(None, f"unknown command {shown(value)}{mean} (commands: "
                                               f"{', '.join(choices)})")
        raise argparse.ArgumentError(action, f"invalid choice {shown(value)}{mean} (choose from "
                                             f"{', '.join(choices)})")


def _command_parser(parser: argparse.ArgumentParser,
                    parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command parser ``parsed`` went through (``gpuplan flops model``'s for
    ``flops model ...``), whose options an unknown one is compared with."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(parsed, subs[0].dest, None) if subs else None
        if not subs or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``only`` (what ``gpuplan fit ...`` needs: the other commands' modules are
    never imported, which keeps a plan's start-up short), or, with ``only=None``, the top-level
    parser that lists every command from :data:`HELP` (``gpuplan --help``, a misspelt command),
    importing no command module."""
    parser = _Parser(
        prog="gpuplan",
        description="Will this model fit on this GPU, how fast will it run, and what do I change?",
    )
    parser.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        if only is None:
            sub.add_parser(name, help=HELP[name], add_help=False)  # listed; parsed by _main
        elif name == only:
            command_module(name).register(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr (``gpuplan: warning: ...``), control characters escaped."""
    print(f"gpuplan: warning: {printable(message)}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("always", GpuplanWarning)
        warnings.showwarning = _one_line_warning
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except GpuplanError as e:
        # a library check names a job field ("tp 3: ..."); on the command line, its option
        from ._job_options import cli_spelling
        text = e.render(cli_spelling) if isinstance(e, InputError) else str(e)
        print(f"gpuplan: error: {printable(text)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpuplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
