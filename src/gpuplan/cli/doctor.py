"""``gpuplan doctor``: what this machine has (Python, torch and CUDA, GPUs, driver, the bench
database, extras) in one screen -- paste it into a bug report."""

from __future__ import annotations

import argparse

from ..doctor import diagnose
from ..report.doctor import doctor_json, render_doctor

HELP = "show what this machine has: Python, torch and CUDA, GPUs, driver, bench database, extras"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("doctor", help=HELP, description=HELP + ".")
    p.add_argument("--json", action="store_true", help="print it as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    report = diagnose()
    if args.json:
        print(doctor_json(report))
    else:
        render_doctor(report)
    return 0
