"""How long does the speed model take to answer? (It is arithmetic: it should be milliseconds.)

Run:  PYTHONPATH=src python benchmarks/speed_runtime.py [--write]
(--write regenerates benchmarks/speed_runtime.md)
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path

from gpuplan.compute import batch_sweep, estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

CASES = [
    ("gpt2 train b8 s1024", "gpt2", dict(mode="train", batch=8, seq=1024)),
    ("llama-3.1-8b train b4 s4096 x8 GPUs", "llama-3.1-8b",
     dict(mode="train", batch=4, seq=4096, gpus=8)),
    ("llama-3.1-405b train b1 s8192 x64 GPUs", "llama-3.1-405b",
     dict(mode="train", batch=1, seq=8192, gpus=64, checkpointing="full")),
    ("mixtral-8x7b infer b32 s2048", "mixtral-8x7b", dict(mode="infer", batch=32, seq=2048)),
    ("gemma-2-9b infer b1 s8192", "gemma-2-9b", dict(mode="infer", batch=1, seq=8192)),
]


def timed(fn, repeat: int = 15) -> float:
    fn()  # warm-up (imports, caches)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(write: bool) -> int:
    gpu = get_gpu("H100-SXM-80GB")
    rows = ["| case | median |", "|---|---|"]
    for label, name, kw in CASES:
        m = load_model(name)
        job = Job(model=name, **kw)
        t = timed(lambda: estimate_speed(m, gpu, job, measured=None))
        rows.append(f"| `estimate_speed` {label} | {t * 1e3:.2f} ms |")
    m = load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="train", seq=2048)
    t = timed(lambda: batch_sweep(m, gpu, job, measured=None), repeat=5)
    rows.append(f"| `batch_sweep` llama-3.1-8b, 11 batch sizes | {t * 1e3:.1f} ms |")
    text = "\n".join(rows) + "\n"
    print(text)
    if write:
        out = Path(__file__).with_suffix(".md")
        out.write_text(
            "# Speed model runtime\n\nCommand: `PYTHONPATH=src python benchmarks/speed_runtime.py "
            f"--write`\n\nMachine: {platform.processor() or platform.machine()}, Python "
            f"{platform.python_version()}; medians of 15 calls after one warm-up (5 for the "
            "sweep), shared 2-core machine (noisy).\n\n" + text, encoding="utf-8")
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main("--write" in sys.argv[1:]))
