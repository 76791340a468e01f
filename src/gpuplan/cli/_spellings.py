"""The job options' old spellings, still accepted: ``--recompute`` (now ``--checkpointing``) and
``--attention flash`` (now ``sdpa``), each with a one-line note on stderr."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError

__all__ = ["add_checkpointing_and_attention", "checkpointing_and_attention"]

_LEVELS = ("none", "selective", "full")


def add_checkpointing_and_attention(p: argparse.ArgumentParser) -> None:
    """``--checkpointing`` (and its old name ``--recompute``) and ``--attention``."""
    p.add_argument("--checkpointing", choices=_LEVELS, default=None,
                   help="activation checkpointing, as in `gpuplan fit` (default none)")
    p.add_argument("--recompute", choices=_LEVELS, default=None,
                   help="the old name of --checkpointing")
    p.add_argument("--attention", choices=("sdpa", "eager", "flash"), default=None,
                   help="sdpa (fused flash/memory-efficient kernels: skip masked blocks, never "
                        "store the scores; the default) or eager (materialized scores); flash is "
                        "the old name of sdpa")


def checkpointing_and_attention(args: argparse.Namespace) -> dict[str, str]:
    """The Job's ``checkpointing`` and ``attention`` from the arguments (unset: not in the dict),
    noting an old spelling on stderr."""
    out: dict[str, str] = {}
    if args.recompute is not None:
        if args.checkpointing is not None and args.checkpointing != args.recompute:
            raise InputError(f"--recompute {args.recompute} and --checkpointing "
                             f"{args.checkpointing} disagree; give --checkpointing only")
        print("gpuplan: note: --recompute is now spelled --checkpointing", file=sys.stderr)
        out["checkpointing"] = args.recompute
    if args.checkpointing is not None:
        out["checkpointing"] = args.checkpointing
    if args.attention == "flash":
        print("gpuplan: note: --attention flash is now spelled sdpa", file=sys.stderr)
        out["attention"] = "sdpa"
    elif args.attention is not None:
        out["attention"] = args.attention
    return out
