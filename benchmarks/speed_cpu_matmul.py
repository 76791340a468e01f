"""The CPU side of the speed model against this machine: estimated vs measured square matmuls
(the source document's experiment, up to 4000 x 4000, fp32 as torch.randn makes it), and the cost
of dispatching one tiny op (the CPU's "launch overhead" default).

Needs torch and gpuplan.hardware.cpu (the bench's CPU model).
Run:  PYTHONPATH=src python benchmarks/speed_cpu_matmul.py [--write]
(--write regenerates benchmarks/speed_cpu_matmul.md)
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from gpuplan.compute import count_matmul, default_efficiency, device_from_cpu, time_matmul
from gpuplan.hardware.cpu import detect_cpu


def min_time(fn, repeat: int) -> float:
    """The fastest of ``repeat`` calls after a warm-up: on a shared machine the minimum is the run
    least disturbed by other jobs (the median is reported beside it)."""
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def main(write: bool) -> int:
    cpu = detect_cpu()
    dev = device_from_cpu(cpu)
    eff = default_efficiency(dev)
    lines = [f"CPU: {cpu.model_name}; {cpu.peak_basis}", f"torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads", "",
             f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", "",
             "| N | measured (min) | measured (median) | estimated | estimated / min | "
             "min GFLOP/s |", "|---|---|---|---|---|---|"]
    threads = torch.get_num_threads()
    # all threads against all physical cores, then one thread against one core (a single
    # thread is far less disturbed when other jobs share the machine)
    one = dataclasses.replace(cpu, physical_cores=1,
                              peak_fp32_flops=cpu.peak_fp32_flops / cpu.physical_cores)
    for label, n_threads, c in (("all threads", threads, cpu), ("1 thread", 1, one)):
        torch.set_num_threads(n_threads)
        d = device_from_cpu(c)
        lines.append(f"| {label}: | | | | | |")
        for n in (64, 256, 1024, 2048, 4000):
            a, b = torch.randn(n, n), torch.randn(n, n)
            meas, med = min_time(lambda: a @ b, 7 if n >= 1024 else 50)
            est = time_matmul(count_matmul(n, n, n), d, eff, "fp32").total_s
            lines.append(f"| {n} | {meas * 1e3:.3f} ms | {med * 1e3:.3f} ms | "
                         f"{est * 1e3:.3f} ms | {est / meas:.2f} | "
                         f"{2 * n**3 / meas / 1e9:.1f} |")
    torch.set_num_threads(threads)
    x = torch.zeros(1)

    def thousand_adds():
        for _ in range(1000):
            x.add_(1)

    per_op = min_time(thousand_adds, 20)[0] / 1000
    lines += ["", f"tiny op dispatch (x.add_(1) on one element): {per_op * 1e6:.2f} us "
              f"(default assumed: {eff.launch_s * 1e6:.1f} us)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        out = Path(__file__).with_suffix(".md")
        out.write_text("# CPU matmul: estimate vs measurement\n\nCommand: `PYTHONPATH=src python "
                       "benchmarks/speed_cpu_matmul.py --write`\n\nMachine: "
                       f"{platform.machine()}, shared (other jobs running).\n\n" + text,
                       encoding="utf-8")
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main("--write" in sys.argv[1:]))
