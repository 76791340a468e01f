"""How long `gpuplan cluster` takes to search (issue 11: a 405B model over 16,384 GPUs in under
5 s). Not a timed test: run it and record the figures in cluster_speed.md.

Run:  PYTHONPATH=src python benchmarks/cluster_speed.py
"""

from __future__ import annotations

import time

from gpuplan.cluster import cluster_search
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

CASES = [
    ("llama-3.1-405b", "H100-SXM-80GB", 16384, 8192, 2048, "train"),
    # issue 27's must-hold: the same search under Megatron-Core (its layouts only), exported
    ("llama-3.1-405b", "H100-SXM-80GB", 16384, 8192, 2048, "train", "megatron"),
    ("llama-3.1-70b", "H100-SXM-80GB", 1024, 4096, 1024, "train"),
    ("llama-3.1-8b", "H100-SXM-80GB", 64, 4096, 512, "train"),
    # every fast layout overflows: the search must reach the ones that fit
    ("llama-3.1-70b", "H100-SXM-80GB", 64, 8192, 512, "train"),
    # nothing fits at all: the whole budget of memory checks is spent
    ("llama-3.1-70b", "A100-SXM-40GB", 32, 4096, 256, "train"),
    ("llama-3.1-70b", "H100-SXM-80GB", 16, 8192, 64, "infer"),
]


def main() -> None:
    print("| model | GPUs | mode | layouts timed | memory checked | best | seconds (best of 3) |")
    t = time.perf_counter()  # the must-hold command end to end: search, pick and export
    from gpuplan.cli import main as cli
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        rc = cli(["cluster", "llama-3.1-405b", "--gpu", "H100-SXM-80GB", "--gpus", "16384",
                  "--seq", "8192", "--global-batch", "2048", "--engine", "megatron",
                  "--export", "megatron"])
    export_s = time.perf_counter() - t
    print("|---|---|---|---|---|---|---|")
    for name, gpu, n, seq, batch, mode, *engine in CASES:
        model = load_model(name)
        job = Job(model=model, mode=mode, gpus=n, seq=seq, context=seq if mode == "infer" else None,
                  engine=engine[0] if engine else "auto")
        kw = {"global_batch": batch} if mode == "train" else {"concurrency": batch}
        times = []
        for _ in range(3):
            t = time.perf_counter()
            plan = cluster_search(model, get_gpu(gpu), job, **kw)
            times.append(time.perf_counter() - t)
        best = plan.best[0].layout.label() if plan.best else "none fits (memory: see notes)"
        said = f" --engine {engine[0]}" if engine else ""
        print(f"| {name}{said} | {n} | {mode} | {plan.enumerated} | {len(plan.tried)} | {best} "
              f"| {min(times):.2f} |")
    print(f"\n`gpuplan cluster llama-3.1-405b ... --engine megatron --export megatron`: exit {rc}, "
          f"{export_s:.2f} s in-process (search, pick, export)")


if __name__ == "__main__":
    main()
