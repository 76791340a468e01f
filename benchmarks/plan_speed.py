"""How fast the analytic planner answers (issue 2's speed requirements).

1. In-process: the median time of ``gpuplan.plan(Job(model=NAME))`` for every catalog model, on
   the default GPU shortlist (verdicts, the ZeRO-3 and tensor-parallel GPU-count searches
   included; the speed section left out, as the library's default). The first call per model,
   which reads the catalog file and builds the activation profile, is reported apart.
2. The whole command: ``gpuplan fit llama-3.1-8b --json`` (speed section included) against
   ``python -c "import torch"``, with ``python -c "import gpuplan"`` and the bare interpreter
   (``python -c pass``) beside them, run alternately in every round so all see the same machine
   load; the medians, and the ratio of the torch and fit medians of this one run.

Run:  PYTHONPATH=src python benchmarks/plan_speed.py   (writes benchmarks/plan_speed_results.md)
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def in_process(repeats: int = 30) -> list[tuple[str, float, float]]:
    import gpuplan
    from gpuplan.models import catalog_names

    rows = []
    for name in catalog_names():
        t0 = time.perf_counter()
        gpuplan.plan(gpuplan.Job(model=name))
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            gpuplan.plan(gpuplan.Job(model=name))
            times.append(time.perf_counter() - t0)
        rows.append((name, first, statistics.median(times)))
    return rows


#: What the second part runs (each ``python ...``), in the order of every round.
COMMANDS = {
    "fit": ["-m", "gpuplan", "fit", "llama-3.1-8b", "--json"],
    "torch": ["-c", "import torch"],
    "gpuplan": ["-c", "import gpuplan"],
    "python": ["-c", "pass"],
}


def commands(rounds: int = 9) -> dict[str, float]:
    """The median wall time of each of :data:`COMMANDS` over ``rounds`` alternating rounds."""
    # bytecode caches as an installed package has them: one warm-up run writes them
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    cmds = {k: [sys.executable, *argv] for k, argv in COMMANDS.items()}
    for cmd in cmds.values():
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(rounds):
        for k, cmd in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    rows = in_process()
    load = os.getloadavg()[0]
    med = commands()
    load_end = os.getloadavg()[0]
    fit_s, torch_s = med["fit"], med["torch"]
    worst = max(rows, key=lambda r: r[2])
    lines = [
        "# Planner speed",
        "",
        f"Regenerate: `PYTHONPATH=src python benchmarks/plan_speed.py` "
        f"({datetime.date.today()}; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; a shared machine, load average "
        f"{load:.1f} when the commands started, {load_end:.1f} when they ended).",
        "",
        "## `gpuplan.plan(Job(model=NAME))`, default GPU shortlist, in-process",
        "",
        f"Median over 30 calls per model: worst {worst[2] * 1e3:.2f} ms ({worst[0]}); "
        "requirement: under 5 ms.",
        "",
        "| model | first call (ms) | median (ms) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {n} | {f * 1e3:.1f} | {m * 1e3:.2f} |" for n, f, m in rows]
    lines += [
        "",
        "## The whole command",
        "",
        "| command | median of 9 (s) |",
        "|---|---:|",
        f"| `gpuplan fit llama-3.1-8b --json` | {fit_s:.3f} |",
        f"| `python -c \"import torch\"` | {torch_s:.3f} |",
        f"| `python -c \"import gpuplan\"` | {med['gpuplan']:.3f} |",
        f"| `python -c pass` (the interpreter alone) | {med['python']:.3f} |",
        "",
        f"`import torch` takes **{torch_s / fit_s:.1f}x** as long as the whole fit command, both "
        "measured in this run (requirement: at least 10x): nothing on the fit path imports torch, "
        "transformers or numpy (tests/unit/test_import_cost.py checks it). `import gpuplan` "
        "imports only its version string (every public name loads on first use): "
        f"{med['gpuplan']:.3f} s against {med['python']:.3f} s for the bare interpreter.",
        "",
    ]
    text = "\n".join(lines)
    (HERE / "plan_speed_results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
