"""Does gpuplan's timer agree with ``torch.utils.benchmark.Timer.blocked_autorange``?

Same CPU matmuls (``torch.matmul(a, b, out=c)``, fp32, the same thread count), timed by both,
interleaved round by round so that drift of a shared machine hits both alike. The claim checked:
the medians agree within 5%.

Reproduce (from the repository root)::

    PYTHONPATH=src python benchmarks/bench_timing_vs_torch.py \
        --json benchmarks/bench_timing_vs_torch.json --md benchmarks/bench_timing_vs_torch.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
import torch.utils.benchmark as tb

from gpuplan.hardware.cpu import detect_cpu
from gpuplan.measure.bench import timing as _timing
from gpuplan.measure.bench.timing import measure


CLOCK_WORDS = {
    "wall": "time.perf_counter (wall clock)",
    "thread": "time.thread_time (CPU time of this thread: preemption by other processes is not "
              "counted)",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=1.0,
                    help="gpuplan budget_s and torch min_run_time, seconds")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both timers (default: every CPU this process may use)")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall: time.perf_counter (what users see); thread: time.thread_time, the "
                         "CPU time of this thread only -- immune to preemption by other processes "
                         "on a shared machine (needs --threads 1: the matmul then runs in this "
                         "thread)")
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()

    threads = args.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                               else os.cpu_count())
    if args.clock == "thread" and threads != 1:
        ap.error("--clock thread needs --threads 1 (other threads' work is not this thread's time)")
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    _timing.perf_counter = clock  # the one clock gpuplan's timer reads
    torch.set_num_threads(threads)
    load0 = os.getloadavg()[0]
    rows = []
    for n in args.sizes:
        g = torch.Generator().manual_seed(n)
        a = torch.randn(n, n, generator=g)
        b = torch.randn(n, n, generator=g)
        c = torch.empty(n, n)
        ours, theirs = [], []
        for _ in range(args.rounds):
            t = measure(lambda: torch.matmul(a, b, out=c), budget_s=args.budget)
            ours.append(t.median_s)
            m = tb.Timer("torch.matmul(a, b, out=c)", globals={"torch": torch, "a": a, "b": b,
                                                               "c": c},
                         num_threads=threads, timer=clock).blocked_autorange(
                             min_run_time=args.budget)
            theirs.append(m.median)
        ratios = [o / t for o, t in zip(ours, theirs)]
        ratio = statistics.median(ratios)
        rows.append({
            "size": n, "gpuplan_median_s": statistics.median(ours),
            "torch_median_s": statistics.median(theirs), "ratio": ratio,
            "round_ratios": ratios, "within_tolerance": abs(ratio - 1) <= args.tolerance,
            "gpuplan_tflops": 2 * n**3 / statistics.median(ours) / 1e12,
        })
        print(f"N={n:5d}  gpuplan {statistics.median(ours) * 1e3:9.3f} ms  torch "
              f"{statistics.median(theirs) * 1e3:9.3f} ms  ratio {ratio:.3f}  rounds "
              f"{', '.join(f'{r:.3f}' for r in ratios)}", flush=True)

    cpu = detect_cpu()
    doc = {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "PYTHONPATH=src python " + " ".join(sys.argv),
        "machine": {"cpu": cpu.model_name, "physical_cores": cpu.physical_cores,
                    "logical_cores": cpu.logical_cores, "threads": threads,
                    "torch": torch.__version__, "python": platform.python_version()},
        "clock": args.clock, "budget_s": args.budget, "rounds": args.rounds,
        "tolerance": args.tolerance, "load_average_1min": [load0, os.getloadavg()[0]],
        "rows": rows, "all_within_tolerance": all(r["within_tolerance"] for r in rows),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.md:
        lines = [
            "# gpuplan's timer vs `torch.utils.benchmark.Timer.blocked_autorange`",
            "",
            f"Machine: {cpu.model_name}, {cpu.physical_cores} cores / {cpu.logical_cores} threads, "
            f"torch {torch.__version__}, {threads} thread(s) for both timers, clock: "
            f"{CLOCK_WORDS[args.clock]}. "
            f"Shared machine: 1-minute load average {load0:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end ({cpu.logical_cores} CPUs). Each size is measured in "
            f"{args.rounds} interleaved rounds (gpuplan, torch, gpuplan, torch, ...) and the "
            "median of the per-round ratios is reported.",
            "",
            f"Statement: `torch.matmul(a, b, out=c)`, fp32, N x N. gpuplan `budget_s` = torch "
            f"`min_run_time` = {args.budget} s. Tolerance: {100 * args.tolerance:.0f}%.",
            "",
            "| N | gpuplan median | torch median | ratio (median of rounds) | per-round ratios "
            "| within tolerance |",
            "|---:|---:|---:|---:|---|:---:|",
        ]
        for r in rows:
            lines.append(
                f"| {r['size']} | {r['gpuplan_median_s'] * 1e3:.3f} ms | "
                f"{r['torch_median_s'] * 1e3:.3f} ms | {r['ratio']:.3f} | "
                f"{', '.join(f'{x:.3f}' for x in r['round_ratios'])} | "
                f"{'yes' if r['within_tolerance'] else 'NO'} |")
        lines += ["", f"All within {100 * args.tolerance:.0f}%: "
                  f"{'yes' if doc['all_within_tolerance'] else 'NO'}.", "",
                  "Reproduce:", "", "```", doc["command"], "```", ""]
        with open(args.md, "w") as f:
            f.write("\n".join(lines))
    return 0 if doc["all_within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
