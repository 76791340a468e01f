"""Fit Volta's and Turing's Tensor Core GEMM model to DeepBench's published cuBLAS times.

Reads ``benchmarks/published/deepbench_gemm_fp16.json`` (DeepBench's training GEMM sheets, fp16
inputs with fp32 accumulation, copied row by row with their source) and, per GPU, searches the
two numbers of gpuplan's model of a tiled GEMM on these generations (``compute/efficiency.py``:
the matmul fraction and the fixed cost of a split-K GEMM):

    time = max(2 M N K / (peak x fraction x wave efficiency) + fixed (when split over K),
               (M K + K N + M N) x 2 B / (bandwidth x 0.85))

with the wave efficiency and the split-K rule of ``gemm_wave_efficiency`` / ``splitk_fixed_s``
themselves. Rows of M or N below one tile (GEMVs, which gpuplan times by bandwidth) and rows under
20 us (DeepBench prints times to 1 us) are left out. The fit minimises the mean squared log error.

    PYTHONPATH=src python benchmarks/fit_volta_turing_gemm.py

prints, per GPU, the fitted pair, the median and worst |error| of the fit and of what gpuplan
ships. T4's pair is shipped (``matmul_turing_fp16``, ``splitk_fixed_turing_s``; ``--check``
exits 1 when they are not the fit's to its grid). V100's fraction (0.815) is not: gpuplan keeps
Markidis's 0.664 (``matmul_volta_fp16`` says why) with split-K's fixed cost at that fraction,
the median over the split-K rows of measured time minus work (``splitk_fixed_volta_s``, which
``efficiency._volta_splitk_fixed_s`` computes from its copy of those rows; ``--check`` exits 1
when it is not this file's figure from the JSON). Each split-K row's excess is printed.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from gpuplan.compute.efficiency import GEMM_TILE, constant, gemm_wave_efficiency
from gpuplan.hardware import get_gpu

DATA = Path(__file__).resolve().parent / "published" / "deepbench_gemm_fp16.json"
#: GPU -> (architecture, the fraction's constant, the split-K constant)
GPUS = {"V100": ("volta", "matmul_volta_fp16", "splitk_fixed_volta_s"),
        "T4": ("turing", "matmul_turing_fp16", "splitk_fixed_turing_s")}


def rows_of(data: dict, key: str) -> list[dict]:
    return [r for r in data["rows"][key]
            if min(r["m"], r["n"]) >= GEMM_TILE[0] and r["ms"] >= 0.02]


def predict_s(r: dict, fraction: float, fixed_s: float, *, peak: float, bandwidth: float,
              sms: int, arch: str) -> float:
    m, n, k = r["m"], r["n"], r["k"]
    wave = gemm_wave_efficiency(1, m, n, sms, k)
    tiles = math.ceil(m / GEMM_TILE[0]) * math.ceil(n / GEMM_TILE[1])
    split = fixed_s if tiles < sms else 0.0  # splitk_fixed_s's rule
    compute = 2 * m * n * k / (peak * fraction * wave) + split
    memory = 2 * (m * k + k * n + m * n) / (bandwidth * constant("memory_default"))
    return max(compute, memory)


def is_split(r: dict, sms: int) -> bool:
    return math.ceil(r["m"] / GEMM_TILE[0]) * math.ceil(r["n"] / GEMM_TILE[1]) < sms


def splitk_excess_s(rows, fraction, *, peak: float, sms: int, **_) -> list[float]:
    """Measured time minus the work at ``fraction``, for each split-K row."""
    return [r["ms"] * 1e-3 - 2 * r["m"] * r["n"] * r["k"]
            / (peak * fraction * gemm_wave_efficiency(1, r["m"], r["n"], sms, r["k"]))
            for r in rows if is_split(r, sms)]


def errors(rows, fraction, fixed_s, **gpu) -> list[float]:
    return sorted(abs(math.log(predict_s(r, fraction, fixed_s, **gpu) / (r["ms"] * 1e-3)))
                  for r in rows)


def fit(rows, **gpu) -> tuple[float, float]:
    best = None
    for f in range(500, 1000, 5):  # fraction in steps of 0.005
        for t in range(0, 41):     # fixed cost in steps of 1 us
            e = errors(rows, f / 1000, t * 1e-6, **gpu)
            score = sum(x * x for x in e) / len(e)
            if best is None or score < best[0]:
                best = (score, f / 1000, t * 1e-6)
    return best[1], best[2]


def main(argv: list[str]) -> int:
    data = json.loads(DATA.read_text())
    ok = True
    for key, (arch, frac_name, fixed_name) in GPUS.items():
        g = get_gpu(data["sources"][key]["gpu"])
        gpu = dict(peak=g.peak("fp16"), bandwidth=g.memory_bandwidth, sms=g.sm_count, arch=arch)
        rows = rows_of(data, key)
        f, t = fit(rows, **gpu)
        shipped = (constant(frac_name), constant(fixed_name) if fixed_name else 0.0)
        for label, (ff, tt) in (("fit", (f, t)), ("shipped", shipped)):
            e = errors(rows, ff, tt, **gpu)
            print(f"{key} {label}: fraction {ff:.3f}, split-K fixed {tt * 1e6:.0f} us -- "
                  f"{len(rows)} GEMMs, median |error| {100 * (math.exp(e[len(e) // 2]) - 1):.1f}%, "
                  f"worst {100 * (math.exp(e[-1]) - 1):.1f}%")
        if key == "V100":  # the shipped fraction's split-K cost: the rows' median excess
            excess = splitk_excess_s(rows, shipped[0], **gpu)
            print(f"{key} split-K rows' excess at {shipped[0]:.3f}, us: "
                  + ", ".join(f"{x * 1e6:.1f}" for x in excess)
                  + f"; median {statistics.median(excess) * 1e6:.2f}")
            ok &= abs(shipped[1] - round(statistics.median(excess), 7)) < 1e-12
        else:
            ok &= abs(shipped[0] - f) < 1e-9 and abs(shipped[1] - t) < 1e-9
    if "--check" in argv and not ok:
        print("the shipped constants are not the fit's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
