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
    print("|---|---|---|---|---|---|---|")
    for name, gpu, n, seq, batch, mode in CASES:
        model = load_model(name)
        job = Job(model=model, mode=mode, gpus=n, seq=seq, context=seq if mode == "infer" else None)
        kw = {"global_batch": batch} if mode == "train" else {"concurrency": batch}
        times = []
        for _ in range(3):
            t = time.perf_counter()
            plan = cluster_search(model, get_gpu(gpu), job, **kw)
            times.append(time.perf_counter() - t)
        best = plan.best[0].layout.label() if plan.best else "none fits (memory: see notes)"
        print(f"| {name} | {n} | {mode} | {plan.enumerated} | {len(plan.tried)} | {best} | "
              f"{min(times):.2f} |")


if __name__ == "__main__":
    main()
