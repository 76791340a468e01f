"""How quick is ``gpuplan capacity``? Wall time of one simulation of 2,000 and 10,000 requests
(Llama-3.1-70B on 4 x H100, vLLM 0.11 defaults, 2000 in / 256 out at 5 req/s), cold (the step
cost cache empty: its speed-model calls included) and warm (the cache filled, as in a rate
search), and of the SLO search for that workload over up to 64 GPUs (issue 29's example).

    PYTHONPATH=src python benchmarks/capacity_speed.py [--runs 3]

Prints a Markdown table; the recorded results are in capacity_speed.md. Targets (issue 29):
10,000 requests under 2 s, the 70B search under 10 s on this machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from gpuplan import Job, get_gpu, load_model
from gpuplan.capacity import SLO, Deployment, Dist, make_workload
from gpuplan.capacity._search import search, solve


def _wl(n: int):
    return make_workload(input=Dist("fixed", 2000), output=Dist("fixed", 256), rate=5.0,
                         requests=n, seed=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    model, gpu = load_model("llama-3.1-70b"), get_gpu("h100")
    job = Job(model="x", mode="infer", tp=4, gpus=4)
    rows = []
    for n in (2000, 10000):
        cold, warm, cpu = [], [], []
        for _ in range(args.runs):
            dep = Deployment(model, gpu, job, max_model_len=8192)
            wl = _wl(n)
            t = time.perf_counter()
            r = dep.run(wl)
            cold.append(time.perf_counter() - t)
            t, c = time.perf_counter(), time.process_time()
            dep.run(wl)
            warm.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        rows.append((f"simulate {n} requests", statistics.median(cold), statistics.median(warm),
                     f"{r.steps} steps, {dep.cost.calls} speed-model calls; warm CPU time "
                     f"{statistics.median(cpu):.2f} s"))
    times, cpu = [], []
    for _ in range(args.runs):
        t, c = time.perf_counter(), time.process_time()
        best, cands = search(model, gpu, Job(model="x", mode="infer"), _wl(2000),
                             SLO(ttft_s=2.0, tpot_s=0.05), max_gpus=64)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    rows.append(("search <= 64 GPUs, 2000 requests", statistics.median(times), None,
                 f"best TP {best.layout['tp']} x {best.layout['replicas']} = {best.gpus} GPUs, "
                 f"{len(cands)} candidates (layouts, then KV dtype / token budget variants "
                 f"for fewer replicas); CPU time {statistics.median(cpu):.2f} s"))
    times, cpu = [], []
    for _ in range(args.runs):
        t, c = time.perf_counter(), time.process_time()
        out = solve(model, gpu, Job(model="x", mode="infer"), _wl(2000),
                    SLO(ttft_s=2.0, tpot_s=0.05), max_gpus=64, disaggregated=True)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    dis = out["disaggregated"]
    rows.append(("--disaggregated search <= 64 GPUs (with the aggregated one)",
                 statistics.median(times), None,
                 f"prefill {dis['prefill']['replicas']} x TP {dis['prefill']['tp']} + decode "
                 f"{dis['decode']['replicas']} x TP {dis['decode']['tp']} = {dis['gpus']} GPUs; "
                 f"CPU time {statistics.median(cpu):.2f} s"))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; median "
          f"of {args.runs} runs\n")
    print("| what | cold (s) | warm (s) | detail |\n|---|---:|---:|---|")
    for what, c, w, d in rows:
        print(f"| {what} | {c:.2f} | {'-' if w is None else f'{w:.2f}'} | {d} |")


if __name__ == "__main__":
    main()
