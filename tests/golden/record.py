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


#: The CPU the golden set was recorded on (the project's AMD EPYC build machine, 2 threads on one
#: core, as its /proc/cpuinfo read): the CPU-vs-GPU rows of ``flops matmul`` depend on the host, so
#: every recording and every comparison sees this CPU, not the machine the tests happen to run on.
RECORDED_CPUINFO = "".join(
    f"processor\t: {i}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
    "physical id\t: 0\ncore id\t: 0\ncpu cores\t: 1\nsiblings\t: 2\n"
    "cpu MHz\t\t: 3992.498\nflags\t\t: fpu sse sse2 avx fma avx2\n\n" for i in range(2))


@contextlib.contextmanager
def recorded_cpu():
    """``detect_cpu`` answers the recorded CPU while the block runs."""
    from gpuplan.hardware import cpu as hw_cpu

    def fixed(**kw):
        return hw_cpu.cpu_from_cpuinfo(RECORDED_CPUINFO, machine="x86_64", **kw)

    saved = hw_cpu.detect_cpu
    hw_cpu.detect_cpu = fixed
    try:
        yield
    finally:
        hw_cpu.detect_cpu = saved


def run_json(argv: list[str]) -> object:
    """One command's parsed JSON output (the CLI in-process, on the recorded CPU)."""
    from gpuplan.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), recorded_cpu():
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
