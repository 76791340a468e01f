"""The grouped expert GEMMs' rate on a B200 against the published FP8 / MXFP8 GEMM figures at or
near the MoE rows' shapes (issue 30; benchmarks/validate_fp8.py MOE_LOCAL_EXPERT_CHECKS, the
entry 'Nor the experts' GEMM rate'). The published rates are worked out here from the sources'
own times or TFLOP/s; the model's rates by hand from its constants, tiles and waves."""

from __future__ import annotations

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import constant, grouped_gemm_s, kloop_fixed_blocks
from gpuplan.hardware import get_gpu

DEVICE = device_from_gpu(get_gpu("B200-SXM-180GB"))
PEAK = DEVICE.peak("fp8")
FP8_CS = PEAK * default_efficiency(DEVICE).matmul_fraction("fp8")
MXFP8 = FP8_CS * constant("gemm_mxfp8_vs_fp8")  # as speed.block_scaled_efficiency scales it
FIXED = kloop_fixed_blocks(DEVICE.architecture, PEAK, PEAK)

# pytorch/ao torchao/prototype/moe_training/README.md at 0b1bb117, "MXFP8 Kernel Breakdown by
# Pass" (NVIDIA B200, torch 2.11.0.dev20251216+cu128, torchao 0.15.0+gitd1305bc78):
# DeepSeek-V3's experts, 131,072 rows over 8 groups, dim 7,168, hidden 2,048;
# torch._scaled_grouped_mm 2D-3D forward and dgrad 1,838.1 us each, 2D-2D wgrad 2,412.4 us
TORCHAO_ROWS, TORCHAO_GROUPS, DIM, HIDDEN = 131072, 8, 7168, 2048
TORCHAO_US = {"forward": 1838.1, "dgrad": 1838.1, "wgrad": 2412.4}
# vllm-project/vllm pull request #19566 (SM100 FP8 CUTLASS tunings; the series' B200, #18778),
# benchmarks/kernels/bench_fp8_gemm.py, N = K = 4,096, CUDA-graphed, no quantize:
# M -> (per-tensor, per-channel) TFLOP/s
VLLM_N_K_4096 = {512: (1832.046345, 1906.160681), 1024: (2076.664305, 2354.263940)}


def _rate(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12


def test_the_b200_rate_chain_by_hand():
    # 4,500 TFLOP/s x MAMF's 0.763 x the training-shape ratio 0.8797 = 3,020.4 (FP8-CS);
    # x TE's MXFP8 / FP8-CS kernel-only ratio 0.951 = 2,872.4
    assert FP8_CS / 1e12 == pytest.approx(4500 * 0.763 * 0.8797, rel=1e-4)
    assert MXFP8 / 1e12 == pytest.approx(4500 * 0.763 * 0.8797 * 0.951, rel=1e-4)
    assert FIXED == pytest.approx(4.17)


@pytest.mark.parametrize("m", sorted(VLLM_N_K_4096))
def test_one_expert_gemm_beside_vllms_sm100_fp8_rows(m):
    # one 4,096 x 4,096 expert of M rows, FP8-CS: 128 x 128 tiles -- M = 1,024: 256 tiles, 2
    # waves of 148 SMs, 256 / 296 = 0.86486; M = 512: 128 tiles, no second split-K slice
    # (148 // 128 = 1), 128 / 148 = 0.86486 -- times the K share 32 / 36.17 = 0.88471:
    # 3,020.4 x 0.86486 x 0.88471 = 2,311.1 TFLOP/s
    flops = 2.0 * m * 4096 * 4096
    model = _rate(flops, grouped_gemm_s(flops, (1, m, 4096, 4096), 1, FP8_CS, DEVICE.sm_count,
                                        backward=False, fixed_blocks=FIXED))
    assert model == pytest.approx(2311.1, rel=1e-3)
    # the published per-tensor and per-channel rates: 0.79-1.02 of the model, no shape
    # collapse at these rows
    ratios = [p / model for p in VLLM_N_K_4096[m]]
    assert min(ratios) > 0.79 and max(ratios) < 1.02


def test_torchao_grouped_mxfp8_at_deepseek_v3s_expert_shape():
    fwd = 2.0 * TORCHAO_ROWS * DIM * HIDDEN
    measured = {k: _rate(fwd, us * 1e-6) for k, us in TORCHAO_US.items()}
    assert measured["forward"] == pytest.approx(2093.6, rel=1e-4)
    assert measured["wgrad"] == pytest.approx(1595.2, rel=1e-4)
    shape, sms = (1, TORCHAO_ROWS, DIM, HIDDEN), DEVICE.sm_count
    t_fwd = grouped_gemm_s(fwd, shape, TORCHAO_GROUPS, MXFP8, sms, backward=False,
                           fixed_blocks=FIXED)
    t_dgrad = grouped_gemm_s(fwd, shape, TORCHAO_GROUPS, MXFP8, sms, backward=True,
                             fixed_blocks=FIXED)
    t_both = grouped_gemm_s(2 * fwd, shape, TORCHAO_GROUPS, MXFP8, sms, backward=True,
                            fixed_blocks=FIXED)
    model = {"forward": _rate(fwd, t_fwd), "dgrad": _rate(fwd, t_dgrad),
             "wgrad": _rate(fwd, t_both - t_dgrad)}
    # by hand, 16,384 rows a group: forward 8 x 128 x 16 tiles in 111 waves (0.99732) x K
    # share 56 / 60.17; dgrad 8 x 128 x 56 tiles in 388 waves (0.99861) x 16 / 20.17; wgrad
    # 8 x 56 x 16 tiles in 49 waves (0.98842) x 128 / 132.17
    assert model["forward"] == pytest.approx(2872.45 * 0.99732 * 56 / 60.17, rel=1e-3)
    assert model["dgrad"] == pytest.approx(2872.45 * 0.99861 * 16 / 20.17, rel=1e-3)
    assert model["wgrad"] == pytest.approx(2872.45 * 0.98842 * 128 / 132.17, rel=1e-3)
    ratio = {k: measured[k] / model[k] for k in model}
    assert ratio == pytest.approx({"forward": 0.785, "dgrad": 0.920, "wgrad": 0.580}, abs=0.005)


# NVIDIA/TransformerEngine pull request #2045 (merged for TE 2.8), the update's table: TE 2.7,
# CUDA 12.9, general_grouped_gemm over multi-stream cuBLAS (tests/pytorch/test_group_gemm.py at
# 4ac7be85: FP16, 1,000 eager iterations under a wall clock) on an H100: (groups, rows each,
# N, K) -> TFLOP/s
TE_2045_H100 = {(8, 4096, 768, 2048): 627.903, (16, 2048, 768, 2048): 553.945}


@pytest.mark.parametrize("shape", sorted(TE_2045_H100))
def test_tes_multi_stream_grouped_gemm_on_hopper(shape):
    g, m, n, k = shape
    h100 = device_from_gpu(get_gpu("H100-SXM-80GB"))
    peak = h100.peak("fp16")
    rate = peak * default_efficiency(h100).matmul_fraction("fp16")
    fixed = kloop_fixed_blocks(h100.architecture, peak, h100.peak("fp8"))
    flops = 2.0 * g * m * n * k
    t = grouped_gemm_s(flops, (1, g * m, k, n), g, rate, h100.sm_count, backward=False,
                       fixed_blocks=fixed, concurrent=4)
    model = _rate(flops, t)
    # by hand: 989.4 x 0.80 = 791.5; four experts at a time, 4 x 32 x 6 (or 4 x 16 x 6) tiles
    # in 6 (3) waves of 132 SMs: 0.9697; the 16-bit K share 16 / (16 + 4.17 / 2) = 0.8847
    assert model == pytest.approx(791.5 * 0.9697 * 16 / (16 + 4.17 / 2), rel=2e-3)
    # the wall-clocked rates: 0.92 (8 experts) and 0.82 (16) of the model
    assert TE_2045_H100[shape] / model == pytest.approx(
        {8: 0.925, 16: 0.816}[g], abs=0.005)
    # the drop between the two, one shape's work in 8 more GEMMs: 2.7 us a GEMM
    work = 2.0 * 8 * 4096 * 768 * 2048
    extra = work / (TE_2045_H100[(16, 2048, 768, 2048)] * 1e12) - work / (
        TE_2045_H100[(8, 4096, 768, 2048)] * 1e12)
    assert extra / 8 == pytest.approx(2.74e-6, rel=0.01)


# pytorch/ao pull request #2427 (merged 2025-06-23), benchmarks/float8/bench_matmul.py --recipe
# nvfp4 on an NVIDIA B200, square M = K = N: size -> (BF16 torch.mm, NVFP4 torch._scaled_mm) s
AO_2427_B200_S = {1024: (5.08e-6, 5.87e-6), 1536: (7.87e-6, 6.73e-6), 2048: (1.52e-5, 1.02e-5),
                  3072: (3.84e-5, 1.65e-5), 4096: (9.74e-5, 3.08e-5), 6144: (3.19e-4, 8.44e-5),
                  8192: (7.74e-4, 2.05e-4)}


def _one_gemm_s(size: int, dtype: str) -> float:
    peak = DEVICE.peak(dtype)
    rate = peak * default_efficiency(DEVICE).matmul_fraction(dtype)
    fixed = kloop_fixed_blocks(DEVICE.architecture, peak, PEAK)
    flops = 2.0 * size ** 3
    return grouped_gemm_s(flops, (1, size, size, size), 1, rate, DEVICE.sm_count,
                          backward=False, fixed_blocks=fixed)


def test_a_kernels_floor_on_blackwell_beside_torchaos_cublaslt_series():
    bf16 = {s: _one_gemm_s(s, "bf16") / t[0] for s, t in AO_2427_B200_S.items()}
    fp4 = {s: _one_gemm_s(s, "fp4") / t[1] for s, t in AO_2427_B200_S.items()}
    # the model follows the large shapes: BF16 from 2,048, NVFP4 from 4,096 within 10%
    assert all(0.90 <= bf16[s] <= 1.04 for s in (2048, 3072, 4096, 6144, 8192)), bf16
    assert all(0.91 <= fp4[s] <= 1.08 for s in (4096, 6144, 8192)), fp4
    # and misses the small ones by a fixed time, not a share: NVFP4 4.7-5.3 us beyond the
    # model at 1,024-2,048 (its work 0.8-4.9 us there), BF16 2.5-3.2 us at 1,024-1,536
    excess_fp4 = [AO_2427_B200_S[s][1] - _one_gemm_s(s, "fp4") for s in (1024, 1536, 2048)]
    excess_bf16 = [AO_2427_B200_S[s][0] - _one_gemm_s(s, "bf16") for s in (1024, 1536)]
    assert all(4.6e-6 < x < 5.4e-6 for x in excess_fp4), excess_fp4
    assert all(2.4e-6 < x < 3.3e-6 for x in excess_bf16), excess_bf16
