"""Blackwell's block-scaled recipes (issue 30, the dense Blackwell rows): MXFP8's GEMMs beside
per-tensor FP8's, NVFP4's global amax pass and its GEMM share -- each by hand from its source."""

from __future__ import annotations

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.flops import Op
from gpuplan.compute.speed import block_scaled_efficiency
from gpuplan.compute.time import time_ops
from gpuplan.fp8 import NARROW_RECIPES, cast_bytes_per_element
from gpuplan.hardware import get_gpu


# Blackwell's FP8 best shape at training shapes (TE's GEMM profiling guide, B300 6.812 ms over
# H200 NVL 16.785 ms at their peaks, over the MAMF table's 76.3% / 73.4%: test_fp8_recipes)
TS_FP8 = (16.785 / 6.812) * (1670 / 4500) / (0.763 / 0.734)
TS_BF16 = (31.968 / 13.102) * (836 / 2250) / (0.776 / 0.803)


def _b200():
    device = device_from_gpu(get_gpu("B200-SXM-180GB"))
    return device, default_efficiency(device)


def _gemm(m: int, k: int, n: int) -> Op:
    return Op(name="mlp.up", op_class="matmul", kind="matmul", phase="forward", count=1,
              flops=2.0 * m * k * n, counted_flops=2.0 * m * k * n,
              bytes=float(m * k + k * n + 2 * m * n), parallel_work=m * n, kernels=1,
              weight_elements=k * n, shape=(1, m, k, n), group="dense")


def test_mxfp8_gemm_at_te_measured_share_of_per_tensor_fp8():
    # TE's GEMM profiling guide, kernel-only (pre-quantized) per-layer GEMM time on Blackwell:
    # FP8 CurrentScaling 6.812 ms, MXFP8 7.161 ms
    device, eff = _b200()
    notes: list[str] = []
    mx = block_scaled_efficiency(eff, "mxfp8", notes)
    assert mx.matmul_fraction("fp8") == pytest.approx(3432.5 / 4500 * TS_FP8 * 6.812 / 7.161,
                                                     abs=5e-4)
    assert mx.matmul_fraction("bf16") == eff.matmul_fraction("bf16")
    assert notes and "mxfp8" in notes[0] and "gemm_profiling" in mx.basis["matmul_fp8"]
    # a compute-bound 16k^3 FP8 GEMM takes 7.161 / 6.812 as long under MXFP8
    op = _gemm(16384, 16384, 16384)
    plain = time_ops([op], device, eff, "fp8")[0].time_s
    block = time_ops([op], device, mx, "fp8")[0].time_s
    assert block / plain == pytest.approx(7.161 / 6.812, rel=2e-3)
    # per-tensor recipes and NVFP4 (its share is measured block-scaled already) keep theirs
    for name in ("fp8-current", "fp8-delayed", "nvfp4", "mixed-bf16"):
        assert block_scaled_efficiency(eff, name, []) is eff


def test_nvfp4_cast_reads_the_tensor_twice():
    # TE NVFP4Quantizer::quantize_impl: an amax kernel over the 16-bit tensor (2 B), then the
    # quantize kernel reads it again (2 B) and writes e2m1 (0.5 B) + an e4m3 scale per 16 (1/16 B)
    assert cast_bytes_per_element(NARROW_RECIPES["nvfp4"]) == pytest.approx(2 + 2 + 0.5 + 1 / 16)
    # MXFP8's e8m0 scales come from each block's own amax inside the one kernel: 2 + 1 + 1/32
    assert cast_bytes_per_element(NARROW_RECIPES["mxfp8"]) == pytest.approx(2 + 1 + 1 / 32)
    # per-tensor current scaling: amax pass + read + 1 B write
    assert cast_bytes_per_element(NARROW_RECIPES["fp8-current"]) == pytest.approx(2 + 2 + 1)
    assert cast_bytes_per_element(NARROW_RECIPES["fp8-delayed"]) == pytest.approx(2 + 1)


def test_nvfp4_gemm_share_below_fp8_share_on_b200():
    # B200: BF16 best shape 1,745 of 2,250 (MAMF) x TS_BF16 x NVFP4/BF16 0.946 (torchao #2427),
    # under the FP8 share it took before: a compute-bound NVFP4 GEMM runs at 9,000 x that
    device, eff = _b200()
    op = _gemm(16384, 16384, 16384)
    t = time_ops([op], device, eff, "fp4")[0]
    assert op.flops / t.compute_s / 1e12 == pytest.approx(9000 * 1745 / 2250 * TS_BF16 * 0.946,
                                                             rel=0.02)
