"""Record the golden outputs: ``python tests/golden/record.py [fit speed flops trace]``.

Runs every command of ``cases.py`` in-process with an empty bench database (so no measured run of
this machine leaks into a prediction) and writes ``golden_<group>.json``: command line -> parsed
JSON output. Re-record only for a change that moves a number on purpose, and say which and why.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases import all_cases  # noqa: E402


def run_json(argv: list[str]) -> object:
    """One command's parsed JSON output (the CLI in-process)."""
    from gpuplan.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {rc}")
    return json.loads(out.getvalue())


def record(groups: list[str]) -> None:
    cases = all_cases()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GPUPLAN_BENCH_DB"] = str(Path(tmp) / "empty.sqlite")
        for group in groups:
            golden = {" ".join(argv): run_json(argv) for argv in cases[group]}
            path = HERE / f"golden_{group}.json"
            path.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
            print(f"{path.name}: {len(golden)} outputs")


if __name__ == "__main__":
    record(sys.argv[1:] or list(all_cases()))
