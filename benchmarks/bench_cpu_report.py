"""Write benchmarks/bench_cpu_results.md from `gpuplan bench --json` files (see bench_cpu_record.sh).

    python benchmarks/bench_cpu_report.py ALL_THREADS.json ONE_THREAD.json > bench_cpu_results.md
"""

from __future__ import annotations

import json
import sys


def _t(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def _section(doc: dict, title: str) -> list[str]:
    st, mc = doc["settings"], doc["machine"]
    out = [
        f"## {title}",
        "",
        f"Run {doc['run_id']} at {doc['created_utc']}: {st['threads']} torch thread(s) "
        f"({st['threads_basis']}), budget {st['budget_s']} s per measurement, target spread "
        f"{100 * st['target_spread']:.0f}%. 1-minute load average: "
        f"{st.get('load_average_1min_start')} at the start, {st.get('load_average_1min_end')} at "
        f"the end, on {mc['logical_cores']} CPUs.",
        "",
        "| dtype | N | median | IQR | TFLOP/s | % of est. peak | samples x calls | noisy |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in doc["matmul"]:
        pct = r.get("percent_of_peak")
        out.append(
            f"| {r['dtype']} | {r['size']} | {_t(r['median_s'])} | {_t(r['iqr_s'])} | "
            f"{r['tflops']:.3f} | {'-' if pct is None else f'{pct:.0f}%'} | "
            f"{r['samples']} x {r['inner']} | {'yes' if r['noisy'] else ''} |")
    if doc["bandwidth"] or doc["launch_overhead"]:
        out += ["", "| measurement | result | median time | IQR |", "|---|---:|---:|---:|"]
        for b in doc["bandwidth"]:
            out.append(f"| {b['description']}, {b['bytes'] / 2**20:.0f} MiB | "
                       f"{b['gb_per_s']:.1f} GB/s | {_t(b['median_s'])} | {_t(b['iqr_s'])} |")
        for o in doc["launch_overhead"]:
            out.append(f"| {o['description']} | {_t(o['median_s'])} per op | | {_t(o['iqr_s'])} |")
    best = {}
    for r in doc["matmul"]:
        if r["dtype"] not in best or r["tflops"] > best[r["dtype"]]["tflops"]:
            best[r["dtype"]] = r
    out += ["", "Best per dtype: " + "; ".join(
        f"{d} {r['tflops']:.3f} TFLOP/s at N={r['size']}"
        + (f" ({r['percent_of_peak']:.0f}% of the estimated peak of the cores used)"
           if r.get("percent_of_peak") is not None else "")
        for d, r in best.items()) + "."]
    noisy = sum(r["noisy"] for r in doc["matmul"])
    out += ["", f"Warnings ({len(doc['warnings'])}; {noisy} of {len(doc['matmul'])} matmul cases "
            "noisy):", ""]
    out += [f"- {w}" for w in doc["warnings"]] or ["- none"]
    return out + [""]


def main() -> int:
    all_threads, one_thread = (json.load(open(p)) for p in sys.argv[1:3])
    mc = all_threads["machine"]
    lines = [
        "# `gpuplan bench` on the development machine (CPU only)",
        "",
        f"Machine: {mc['cpu_model']} ({mc['physical_cores']} cores / {mc['logical_cores']} "
        f"threads, KVM guest), {mc['memory_bytes'] / 1e9:.1f} GB RAM, torch {mc['torch']}, "
        f"Python {mc['python']}. No GPU: every run says so in one line and reports the CPU only.",
        "",
        f"CPU peak (an ESTIMATE, not a measurement) -- {mc['cpu_peak_basis']}.",
        "No peak is estimated for bf16/fp16 (AMX and AVX-512 BF16/FP16 units are not modelled), so",
        "those rows have no percentage.",
        "",
    ]
    loads = [d["settings"].get("load_average_1min_start") or 0 for d in (all_threads, one_thread)]
    if max(loads) > 0.75 * mc["logical_cores"]:
        lines += [
            f"**The machine was shared** with other jobs (1-minute load average up to "
            f"{max(loads):.1f} on {mc['logical_cores']} CPUs): wall-clock medians of",
            "multi-threaded matmuls then include waiting for a descheduled thread at every barrier,",
            "which shows up as 8-20 ms for matmuls that take microseconds on an idle machine (with",
            "a *small* spread, so only the load and crowding warnings flag it), and large matmuls",
            "get roughly one core's worth of throughput. The single-thread sweep is the",
            "trustworthy one here; the timer itself is checked against torch.utils.benchmark in",
            "`bench_timing_vs_torch_*.md`.",
            "",
        ]
    lines += [
        "Reproduce: `bash benchmarks/bench_cpu_record.sh` (runs the two commands below and this",
        "report script).",
        "",
        "```",
        "PYTHONPATH=src python -m gpuplan bench --sweep --json --plot benchmarks/bench_cpu_sweep.png"
        " > benchmarks/bench_cpu_results.json",
        "PYTHONPATH=src python -m gpuplan bench --sweep --threads 1 --dtype fp32 --dtype bf16 "
        "--size 64 --size 128 --size 256 --size 512 --size 1024 --size 2048 --size 4000 "
        "--size 4096 --json --plot benchmarks/bench_cpu_sweep_1thread.png "
        "> benchmarks/bench_cpu_results_1thread.json",
        "```",
        "",
        "Charts: `bench_cpu_sweep.png` (every thread), `bench_cpu_sweep_1thread.png` (one thread).",
        "",
    ]
    lines += _section(all_threads, "Sweep, every thread (the default)")
    lines += _section(one_thread, "Sweep, one thread (fp32, bf16, N <= 4096)")
    sys.stdout.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
