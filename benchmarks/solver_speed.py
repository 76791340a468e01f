"""How many candidate configurations the solver evaluates per second.

A candidate is one (job, GPU) configuration the search scores: a knob setting planned with the
full accounting (``train_memory``/``infer_memory``: every line, the phase timeline, the overhead),
or an earlier result reused when two knob combinations make the same job. For each case the
search runs twice in one process: "first" includes building the symbolic profiles of the
checkpointing/attention/recipe variants it visits (a few ms each, cached for the process), "again"
is the same search with those profiles built.

Regenerate (about a minute on a 2-core machine):

    PYTHONPATH=src python benchmarks/solver_speed.py     # writes solver_speed_results.md
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = [
    ("llama-3.1-8b", "train", dict(batch=4, seq=2048), "RTX-4090"),
    ("llama-3.1-8b", "train", dict(batch=4, seq=2048, precision="amp-bf16"), "H100-SXM-80GB"),
    ("mistral-7b", "train", dict(batch=8, seq=4096, attention="eager"), "A100-SXM-80GB"),
    ("qwen2.5-7b", "train", dict(batch=2, seq=8192), "L40S"),
    ("gemma-2-9b", "train", dict(batch=1, seq=4096), "H200-SXM-141GB"),
    ("mixtral-8x7b", "train", dict(batch=1, seq=2048), "H100-SXM-80GB"),
    ("gpt2-xl", "train", dict(batch=32, seq=1024), "T4"),
    ("llama-3.1-70b", "infer", dict(batch=32, seq=8192), "H100-SXM-80GB"),
    ("llama-3.1-8b", "infer", dict(batch=64, seq=16384), "RTX-4090"),
    ("qwen2.5-72b", "infer", dict(batch=8, seq=4096), "A100-SXM-40GB"),
]


def main() -> int:
    from gpuplan.hardware import get_gpu
    from gpuplan.job import Job
    from gpuplan.models import load_model
    from gpuplan.solver import suggest

    rows = []
    for name, mode, kw, gpu in CASES:
        m = load_model(name)
        job = Job(model=m, mode=mode, **kw)
        g = get_gpu(gpu)
        runs = []
        for _ in range(2):
            t0 = time.perf_counter()
            r = suggest(m, job, g, mode=mode)
            runs.append((time.perf_counter() - t0, r))
        (t_first, r), (t_again, _) = runs
        rows.append(dict(model=name, mode=mode, job=kw, gpu=gpu, candidates=r.evaluated,
                         planned=r.planned, first_s=t_first, again_s=t_again,
                         first_rate=r.evaluated / t_first, again_rate=r.evaluated / t_again,
                         found=len(r.suggestions), best=r.suggestions[0].summary
                         if r.suggestions else r.message))
        print(f"{name:15s} {mode:5s} {gpu:15s} {r.evaluated:5d} candidates "
              f"({r.planned} planned): first {t_first * 1e3:6.0f} ms "
              f"({r.evaluated / t_first:7.0f}/s), again {t_again * 1e3:6.0f} ms "
              f"({r.evaluated / t_again:7.0f}/s)", flush=True)
    total_c = sum(r["candidates"] for r in rows)
    first = total_c / sum(r["first_s"] for r in rows)
    again = total_c / sum(r["again_s"] for r in rows)
    lines = [
        "# Solver speed",
        "",
        f"Regenerate with `PYTHONPATH=src python benchmarks/solver_speed.py` "
        f"({datetime.date.today().isoformat()}; {platform.machine()}, Python "
        f"{sys.version.split()[0]}; a shared 2-core VM, timings are noisy).",
        "",
        "A candidate is one (job, GPU) configuration the search scores, planned with the full "
        "accounting (or reused when two knob combinations make the same job). *first*: the "
        "search in a fresh process, building the symbolic profiles of the variants it visits; "
        "*again*: the same search once they are built.",
        "",
        "| model | mode | job | GPU | candidates | planned | first | again | suggestions | best |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        job = ", ".join(f"{k}={v}" for k, v in r["job"].items())
        lines.append(
            f"| {r['model']} | {r['mode']} | {job} | {r['gpu']} | {r['candidates']} | "
            f"{r['planned']} | {r['first_s'] * 1e3:.0f} ms ({r['first_rate']:.0f}/s) | "
            f"{r['again_s'] * 1e3:.0f} ms ({r['again_rate']:.0f}/s) | {r['found']} | "
            f"{r['best']} |")
    lines += ["", f"All cases: {total_c} candidates; first {first:,.0f} candidates/s, "
                  f"again {again:,.0f} candidates/s (median per case, again: "
                  f"{statistics.median(r['again_rate'] for r in rows):,.0f}/s)."]
    (HERE / "solver_speed_results.md").write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
