"""Split-K's fixed cost on V100 (efficiency.splitk_fixed_volta_s), by hand from DeepBench's
published V100 fp16 GEMM times (baidu-research/DeepBench results/train/DeepBench_NV_V100.xlsx
@30c5115, copied into benchmarks/published/deepbench_gemm_fp16.json)."""

import json
import math
from pathlib import Path

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import (
    DEEPBENCH_V100, DEEPBENCH_V100_SPLITK_MS, _volta_splitk_fixed_s, constant, splitk_fixed_s)
from gpuplan.compute.flops import Op
from gpuplan.compute.time import time_ops
from gpuplan.hardware import get_gpu

PUBLISHED = (Path(__file__).resolve().parents[2] / "benchmarks" / "published"
             / "deepbench_gemm_fp16.json")


def test_the_split_k_rows_are_the_published_ones():
    # every V100 row of >= one 128 x 128 tile each way, >= 20 us, and under 80 output tiles
    rows = json.loads(PUBLISHED.read_text())["rows"]["V100"]
    split = {(r["m"], r["n"], r["k"], r["ta"], r["tb"]): r["ms"] for r in rows
             if min(r["m"], r["n"]) >= 128 and r["ms"] >= 0.02
             and math.ceil(r["m"] / 128) * math.ceil(r["n"] / 128) < 80}
    assert split == DEEPBENCH_V100_SPLITK_MS
    g = get_gpu("V100-SXM2-16GB")
    assert (g.peak("fp16"), g.sm_count) == (DEEPBENCH_V100["peak"], DEEPBENCH_V100["sms"])


def test_volta_split_k_fixed_cost_is_the_rows_median_excess_by_hand():
    """At Markidis's 83/125 of 125 TFLOP/s = 83 TFLOP/s, the 12 rows' excesses (measured - work)
    sort -6.9, 2.3, 6.3, 13.2, 13.2, 15.8, 17.9, 18.1, 18.1, 19.9, 28.8, 49.1 us; the middle
    two:
    2560 x 128 x 2560 NN, 36 us: 20 tiles, split min(80 // 20, 2560 // 256) = 4 -> 80 full
      tiles, efficiency 1; work 2 x 2560 x 128 x 2560 / 83e12 = 20.2135 us; excess 15.7865 us.
    1760 x 128 x 1760 TN, 29 us: 14 tiles, split min(80 // 14, 1760 // 256) = 5 -> 70 tiles of
      13.75 x 5 = 68.75 useful: efficiency 68.75 / 80; work 792,985,600 / (83e12 x 0.859375)
      = 11.1174 us; excess 17.8826 us.
    Median (15.7865 + 17.8826) / 2 = 16.83 us."""
    a = 36e-6 - 2 * 2560 * 128 * 2560 / 83e12
    b = 29e-6 - 2 * 1760 * 128 * 1760 / (83e12 * 68.75 / 80)
    assert a == pytest.approx(15.7865e-6, abs=1e-10)
    assert b == pytest.approx(17.8826e-6, abs=1e-10)
    assert _volta_splitk_fixed_s() == pytest.approx((a + b) / 2, rel=1e-12)
    assert constant("splitk_fixed_volta_s") == 1.68e-05


def test_a_v100_gemm_under_one_wave_pays_it_by_hand():
    """V100 (80 SMs), M=2048 N=128 K=2048 (DeepBench: 31 us): 16 tiles, split min(80 // 16,
    2048 // 256) = 5 -> 80 full tiles, efficiency 1; work 1,073,741,824 / 83e12 = 12.94 us,
    + 16.8 us = 29.74 us. BERT-large at micro-batch 1 x 512 tokens: its 512 x 1,024 query
    (4 x 8 = 32 tiles) pays it; its 512 x 4,096 MLP up (128 tiles) does not; nor bf16."""
    m, k, n = 2048, 2048, 128
    op = Op(name="mlp.up", op_class="matmul", kind="matmul", phase="forward", count=1,
            flops=2.0 * m * k * n, counted_flops=2.0 * m * k * n,
            bytes=2.0 * (m * k + k * n + m * n), parallel_work=m * n, kernels=1,
            weight_elements=k * n, shape=(1, m, k, n), group="dense")
    dev = device_from_gpu(get_gpu("V100-SXM2-16GB"))
    t = time_ops([op], dev, default_efficiency(dev), "fp16")[0]
    assert t.compute_s == pytest.approx(1073741824 / (125e12 * 0.664) + 16.8e-6, rel=1e-9)
    assert splitk_fixed_s("Volta", "fp16", 1, 512, 1024, 80) == 16.8e-6
    assert splitk_fixed_s("Volta", "fp16", 1, 512, 4096, 80) == 0.0
    assert splitk_fixed_s("Volta", "bf16", 1, 512, 1024, 80) == 0.0
