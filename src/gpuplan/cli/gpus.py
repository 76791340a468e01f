"""``gpuplan gpus [NAME]``: the GPU catalog, or one GPU in detail."""

from __future__ import annotations

import argparse
import json
import sys

from ..hardware import all_gpus, resolve_gpu
from ..report import gpus as report
from ..report._console import console_for

HELP = "list the GPU catalog (dense peaks, memory, links, sources) or show one GPU"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "gpus", help=HELP,
        description="The GPU catalog: one entry per exact SKU, dense (never 2:4-sparse) peaks, memory as "
                    "the device reports it, host and GPU-to-GPU links, and the source of every number. "
                    "Name one GPU (SKU or alias) to see it in full.",
    )
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="an SKU such as H100-SXM-80GB or an alias such as h100")
    p.add_argument("--json", action="store_true",
                   help="full records in SI units (bytes, bytes/s, FLOP/s) with sources")
    p.add_argument("--units", choices=("GB", "GiB"), default="GB",
                   help="byte units for memory and bandwidth: GB = 10^9 (default) or GiB = 2^30")
    p.add_argument("--sources", action="store_true", help="add the source column to the table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:


    if args.name is not None:
        gpu, note = resolve_gpu(args.name)  # unknown -> UnknownGPUError: one line, exit 2
        if args.json:
            print(json.dumps(report.gpu_json(gpu, query=args.name, note=note), indent=2))
            return 0
        console = console_for(sys.stdout, width=200)
        for part in report.gpu_detail(gpu, units=args.units, note=note):
            console.print(part)
        return 0

    gpus = all_gpus()
    if args.json:
        print(json.dumps(report.catalog_json(gpus), indent=2))
        return 0
    table = report.gpus_table(gpus, units=args.units, sources=args.sources)
    console_for(sys.stdout, width=340 if args.sources else 200).print(table)
    return 0


