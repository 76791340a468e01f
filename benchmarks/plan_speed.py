"""How fast the analytic planner answers (issue 2's speed requirements).

1. In-process: the median time of ``gpuplan.plan(Job(model=NAME))`` for every catalog model, on
   the default GPU shortlist (verdicts, the ZeRO-3 and tensor-parallel GPU-count searches
   included; the speed section left out, as the library's default). The first call per model,
   which reads the catalog file and builds the activation profile, is reported apart.
2. The whole command: ``gpuplan fit llama-3.1-8b --json`` (speed section included) against
   ``python -c "import torch"``, run alternately so both see the same machine load; the ratio of
   the medians.

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


def commands(rounds: int = 7) -> tuple[float, float]:
    # bytecode caches as an installed package has them: one warm-up run writes them
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT / "src")
    fit = [sys.executable, "-m", "gpuplan", "fit", "llama-3.1-8b", "--json"]
    torch = [sys.executable, "-c", "import torch"]
    for cmd in (fit, torch):
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    a, b = [], []
    for _ in range(rounds):
        for cmd, out in ((fit, a), (torch, b)):
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            out.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


def main() -> None:
    rows = in_process()
    fit_s, torch_s = commands()
    worst = max(rows, key=lambda r: r[2])
    lines = [
        "# Planner speed",
        "",
        f"Regenerate: `PYTHONPATH=src python benchmarks/plan_speed.py` "
        f"({datetime.date.today()}; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; a shared machine, load average "
        f"{os.getloadavg()[0]:.1f}).",
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
        "| command | median of 7 (s) |",
        "|---|---:|",
        f"| `gpuplan fit llama-3.1-8b --json` | {fit_s:.3f} |",
        f"| `python -c \"import torch\"` | {torch_s:.3f} |",
        "",
        f"`import torch` takes **{torch_s / fit_s:.1f}x** as long as the whole fit command "
        "(requirement: at least 10x): nothing on the fit path imports torch, transformers or "
        "numpy (tests/unit/test_import_cost.py checks it).",
        "",
    ]
    text = "\n".join(lines)
    (HERE / "plan_speed_results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
