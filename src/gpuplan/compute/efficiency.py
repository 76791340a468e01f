"""Achievable efficiency by shape, generation and runtime: every constant the speed model uses
beyond the catalog's peaks, in ONE table (:data:`CONSTANTS`), each with its value, unit and source.

``docs/speed.md`` ("Achievable efficiency") renders the same table; a test checks that every entry
has a source and that the docs list every name. Functions here turn the constants into the
fractions an op runs at:

* :func:`gemm_wave_efficiency` -- tile and wave quantization of a matmul's output over the SMs;
* :func:`attention_fraction` -- a fused attention kernel's share of the dense peak, forward and
  backward separately, by GPU generation, head dimension and sequence length;
* :func:`runtime_overheads` -- per-kernel host (Python dispatch) and device (launch gap) costs of
  eager PyTorch, torch.compile and CUDA graphs.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from .._record import record
from ..engines.profiles import get_engine, runtime_of
from .flops import Op

__all__ = [
    "Constant", "CONSTANTS", "constant", "ATTENTION_CLOCK_SKUS", "attention_clock_share",
    "gemm_wave_efficiency", "splitk_fixed_s", "OLDER_TENSOR_CORES", "MEASURED_MATMUL", "gemv_bandwidth_fraction",
    "TE_TRAINING_LAYERS", "TE_H200NVL_BARS_MS", "te_training_gemms", "te_training_waves",
    "te_h200nvl_shares", "DEEPGEMM_H800_TFLOPS", "grouped_gemm_k_share", "grouped_gemm_s",
    "kloop_fixed_blocks", "KLOOP_FIXED_ARCHS",
    "QuantKernel", "QUANT_KERNELS", "AWQ_GEMV_ISSUE_PER_WEIGHT", "quant_kernel", "attention_fraction", "FA2_SM8X",
    "TRAIN_ATTENTION_KERNELS",
    "FP8_VS_16BIT_KERNELS", "fp8_attention_vs_16bit",
    "RuntimeOverheads", "runtime_overheads", "GEMM_TILE", "DEFAULT_RUNTIME", "resolve_runtime",
    "eager_chains", "speed_residuals", "speed_range",
    "OPTIMIZER_IMPLS", "OptimizerCost", "optimizer_cost", "multi_tensor_launches",
    "GRAD_CLIP_IMPLS", "GradClipCost", "grad_clip_cost", "overlap_sm_share",
    "DECODE_ATTENTION_KERNELS", "single_query_attention_trips", "single_query_attention_s",
]


@record(kw_only=False)
class Constant:
    value: float
    unit: str
    source: str


_FA2 = ("Dao 2023, FlashAttention-2 (arXiv 2307.08691), sec. 4.1 and Fig. 4-6: forward 'up to 73% "
        "of the theoretical maximum' on A100 at head dim 128 and long sequences, 50% and less at "
        "512 tokens; backward lower (up to ~63%)")
_FA3 = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), sec. 1 and 4.1: FlashAttention-2 "
        "reaches ~35% of H100's peak (PyTorch SDPA's flash backend is FlashAttention-2)")

_VLLM_FP8KV_BLOG = ("vLLM blog 'The State of FP8 KV-Cache and Attention Quantization in vLLM' "
                    "(2026-04-22, https://blog.vllm.ai/2026/04/22/fp8-kvcache.html; "
                    "vllm-project/vllm-project.github.io _posts/2026-04-22-fp8-kvcache.md@78672b0)")

_MAMF = ("S. Bekman, ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul "
         "FLOPS comparison table' (stas00/ml-engineering @744d01e1, 2026-08-22): torch.matmul, "
         "best shape of a brute-force search, mean of 100 iterations; the same table as "
         "device.DEFAULT_BASIS matmul_nvidia")

_TE_GEMM = ("NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst @d0067d0d "
            "(last changed 1609c890, 2026-06-01), 'Autocast vs Pre-quantized', B300 SXM6, "
            "hidden 4096, intermediate 16384, 15,872 tokens, CUDA events, 100 timed iterations")
_AO_NVFP4 = ("pytorch/ao pull request #2427 (merged 2025-06-23), benchmarks/float8/bench_matmul.py "
             "--recipe nvfp4 on an NVIDIA B200 (torch._scaled_mm, cuBLASLt; square M=K=N)")

_DEEPBENCH = ("fitted by benchmarks/fit_volta_turing_gemm.py to DeepBench's published cuBLAS "
              "fp16 Tensor Core GEMM times (baidu-research/DeepBench results/train/"
              "DeepBench_NV_V100.xlsx and DeepBench_NV_T4.xlsx at 30c5115, 2019-10-07; copied "
              "into benchmarks/published/deepbench_gemm_fp16.json), time = max(work / (peak x "
              "fraction x wave efficiency) + split-K's fixed cost, bytes / streaming bandwidth)")

_ADAMW_PASSES = ("torch.optim.AdamW's foreach and for-loop implementations (torch/optim/adam.py "
                 "_multi_tensor_adam / _single_tensor_adam, decoupled weight decay): mul_(params), "
                 "lerp_(exp_avg, grad), mul_(exp_avg_sq), addcmul_(exp_avg_sq, grad, grad), "
                 "sqrt(exp_avg_sq), div_, add_(eps), addcdiv_(params, exp_avg, denom): 8 passes")
_ADAFACTOR = ("transformers.optimization.Adafactor.step, a per-parameter Python loop (factored "
              "second moment, no first moment, as the HF Trainer builds it): _rms(p) (norm, div), "
              "grad**2 + eps, row and column means and their moving averages, the rsqrt outer "
              "product, update.mul_(grad), _rms(update) / clip, clamp_, div_, mul_(lr), "
              "p.add_(-update): 24 kernels per matrix")

_LAMB = ("apex.optimizers.FusedLAMB.step and csrc/multi_tensor_lamb.cu (NVIDIA DLE BERT's "
         "optimizer): multi_tensor_l2norm of the gradients (global norm), multi_tensor_l2norm of "
         "the weights, LAMBStage1 (reads gradient, weight, both moments; writes the moments and "
         "the update into the gradient), multi_tensor_l2norm of the update, LAMBStage2 (reads "
         "update and weight, writes the weight): 52 B per fp32 parameter vs fused Adam's 28")

#: DeepBench's V100 fp16 GEMMs (``_DEEPBENCH``; DeepBench_NV_V100.xlsx, sheet GEMM, rows also in
#: benchmarks/published/deepbench_gemm_fp16.json) that cuBLAS runs split-K by gpuplan's rule --
#: fewer 128 x 128 output tiles than the V100's 80 SMs (:func:`splitk_fixed_s`) -- and at least
#: one tile each way and 20 us (the fit's row filter): (M, N, K, ta, tb) -> measured ms. All are
#: N = 128 (one tile column) with K = 1,024-4,096.
DEEPBENCH_V100_SPLITK_MS = {
    (1760, 128, 1760, "N", "N"): 0.031, (2048, 128, 2048, "N", "N"): 0.031,
    (2560, 128, 2560, "N", "N"): 0.036, (4096, 128, 4096, "N", "N"): 0.067,
    (1760, 128, 1760, "T", "N"): 0.029, (2048, 128, 2048, "T", "N"): 0.031,
    (2560, 128, 2560, "T", "N"): 0.049, (4096, 128, 4096, "T", "N"): 0.071,
    (7680, 128, 2560, "N", "N"): 0.074, (7680, 128, 2560, "T", "N"): 0.130,
    (3072, 128, 1024, "N", "N"): 0.024, (3072, 128, 1024, "T", "N"): 0.024,
}
#: The board DeepBench ran them on (its sheet 'Specs': a DGX-1's V100, the catalog's
#: V100-SXM2-16GB): dense fp16 Tensor Core peak, FLOP/s, and SM count.
DEEPBENCH_V100 = {"peak": 125e12, "sms": 80}
#: DeepGEMM's published FP8 GEMM throughput on an H800 SXM5 (132 SMs; dense FP8 peak 1,979
#: TFLOP/s, the H100 SXM's), NVCC 12.8: (M, N, K) -> TFLOP/s, the README's 'Normal GEMMs for
#: dense models' table (deepseek-ai/DeepGEMM README.md at 55ab91f72f76e8a6db0e86282c3169a88d93df1b,
#: 2025-03-25, the last README with the tables). The M = 4096 rows: one output shape at two K
#: (16,384 and 2,048) sets the fixed cost of a tile's K loop (:func:`_kloop_fixed_blocks`); the
#: K = 512 and 1,536 rows are the checks (tests/unit/test_grouped_gemm_k.py).
DEEPGEMM_H800_TFLOPS = {
    (4096, 2112, 7168): 1009, (4096, 24576, 1536): 1125, (4096, 32768, 512): 751,
    (4096, 7168, 16384): 1426, (4096, 4096, 7168): 1265, (4096, 7168, 2048): 1168,
}
#: The pair of :data:`DEEPGEMM_H800_TFLOPS` rows of one output shape (same tiles, same waves)
#: whose K alone differs.
DEEPGEMM_K_PAIR = ((4096, 7168, 16384), (4096, 7168, 2048))
_TILE, _SPLIT_K_MIN = 128, 256  # gemm_tile_m / gemm_tile_n, gemm_split_k_min below
_MARKIDIS_V100 = 83 / 125  # matmul_volta_fp16 below


def _wave_efficiency(batch: int, m: int, n: int, sm_count: int, k: int | None, tm: int,
                     tn: int, split_min: int) -> float:
    """:func:`gemm_wave_efficiency` with its tile and split-K slice given."""
    if sm_count <= 0:
        return 1.0
    tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
    useful = batch * m * n / (tm * tn)  # tiles' worth of real outputs
    if k is not None and tiles < sm_count:
        splits = max(1, min(sm_count // tiles, k // split_min))
        tiles, useful = tiles * splits, useful * splits
    waves = math.ceil(tiles / sm_count)
    return min(1.0, useful / (waves * sm_count))


def _kloop_fixed_blocks() -> float:
    """A GEMM tile's fixed cost (its pipeline's fill, the epilogue's store) in 128-deep K blocks
    of its main loop, from :data:`DEEPGEMM_K_PAIR`: with a tile's time ``(K / 128 + c) x t``
    the throughput at one output shape goes as ``kb / (kb + c)`` (kb = K / 128), so the two
    rows' ratio r = T(kb1) / T(kb2) gives c = kb1 kb2 (r - 1) / (kb1 - r kb2). 1426 / 1168 at
    kb = 128 and 16: c = 4.17 blocks (534 of K)."""
    (m1, n1, k1), (m2, n2, k2) = DEEPGEMM_K_PAIR
    r = DEEPGEMM_H800_TFLOPS[(m1, n1, k1)] / DEEPGEMM_H800_TFLOPS[(m2, n2, k2)]
    kb1, kb2 = k1 / _TILE, k2 / _TILE
    return kb1 * kb2 * (r - 1) / (kb1 - r * kb2)


def _volta_splitk_fixed_s() -> float:
    """Split-K's fixed cost on V100 from DeepBench's split-K rows: the median over
    :data:`DEEPBENCH_V100_SPLITK_MS` of measured time minus the GEMM's work at the shipped Volta
    fraction (Markidis's 83/125) and wave efficiency. The median, not the mean, so that the one
    transposed 7680 x 128 x 2560 row (130 us against its NN twin's 74) does not set it."""
    peak, sms = DEEPBENCH_V100["peak"], DEEPBENCH_V100["sms"]
    excess = sorted(
        ms * 1e-3 - 2 * m * n * k / (peak * _MARKIDIS_V100
                                     * _wave_efficiency(1, m, n, sms, k, _TILE, _TILE, _SPLIT_K_MIN))
        for (m, n, k, _, _), ms in DEEPBENCH_V100_SPLITK_MS.items())
    mid = len(excess) // 2
    return (excess[mid - 1] + excess[mid]) / 2 if len(excess) % 2 == 0 else excess[mid]


#: TE's GEMM profiling guide (``_TE_GEMM``, section "Autocast vs Pre-quantized", kernel-only
#: ``--pre-quantize`` per-layer totals of the 12 GEMMs -- Fprop, Dgrad, Wgrad of QKV 15872 x
#: 4096 x 12288, attention out 15872 x 4096 x 4096, MLP up 15872 x 4096 x 16384, MLP down
#: 15872 x 16384 x 4096 -- on a B300 SXM6 and, "Worked Example: 5B Model on H200", an H200
#: NVL), ms: the same tool at the same training shapes on each generation.
TE_TRAINING_GEMM_MS = {("B300", "bf16"): 13.102, ("B300", "fp8"): 6.812,
                       ("H200 NVL", "bf16"): 31.968, ("H200 NVL", "fp8"): 16.785}
#: Their dense datasheet peaks, TFLOP/s (the catalog's B300-SXM-288GB and H200-NVL-141GB).
TE_TRAINING_GEMM_PEAK = {("B300", "bf16"): 2250.0, ("B300", "fp8"): 4500.0,
                         ("H200 NVL", "bf16"): 836.0, ("H200 NVL", "fp8"): 1670.0}
#: The MAMF table's best-shape shares the same comparison reads against (the constants
#: below: B200's BF16 / FP8; Hopper's BF16 row 80.3% -- "H200 is the same" -- and H200's FP8).
_MAMF_SHARE = {("blackwell", "bf16"): 0.776, ("blackwell", "fp8"): 0.763,
               ("hopper", "bf16"): 0.803, ("hopper", "fp8"): 0.734}


def _training_shape_ratio(dtype: str) -> float:
    """Blackwell's share of its peak at TE's training shapes over Hopper's (one tool, one set
    of shapes), divided by the same ratio at the MAMF table's best shapes: how much further
    below its best-shape figure a Blackwell GEMM runs at a model's shapes than a Hopper one."""
    share = {g: 2 * 3 * 15872 * 4096 * 49152 / (TE_TRAINING_GEMM_MS[(g, dtype)] * 1e-3)
             / (TE_TRAINING_GEMM_PEAK[(g, dtype)] * 1e12) for g in ("B300", "H200 NVL")}
    return (share["B300"] / share["H200 NVL"]) / (_MAMF_SHARE[("blackwell", dtype)]
                                                   / _MAMF_SHARE[("hopper", dtype)])


#: The layers of TE's guide (``_TE_GEMM``, "Forward Summary"): name -> (in, out) features; each
#: runs at M = 15,872 tokens as Fprop (tokens x in x out), Dgrad (tokens x out x in) and Wgrad
#: (in x tokens x out), M x K x N as the guide writes them ("Full Backward Table").
TE_TRAINING_TOKENS = 15872
TE_TRAINING_LAYERS = {"qkv": (4096, 12288), "attn_out": (4096, 4096),
                      "mlp_up": (4096, 16384), "mlp_down": (16384, 4096)}
#: The H200 NVL's kernel-only (``--pre-quantize``) bars per layer and pass, ms, (BF16, FP8
#: CurrentScaling): read off the guide's figure docs/examples/gemm_profiling/img/
#: h200_model_config_speedup_prequant.png (same commit as ``_TE_GEMM``; its text prints the pass
#: sums only) by pixel -- 25.87 px per ms from the gridlines 0-30 ms, so +-0.04 ms a bar. Check
#: against the text: BF16 Fprop + Dgrad 21.379 read (21.379 printed), Wgrad 10.554 (10.530);
#: FP8 11.211 (11.238), 5.567 (5.547).
TE_H200NVL_BARS_MS = {
    ("qkv", "fprop+dgrad"): (5.374, 2.745), ("attn_out", "fprop+dgrad"): (1.778, 0.966),
    ("mlp_up", "fprop+dgrad"): (7.113, 3.789), ("mlp_down", "fprop+dgrad"): (7.114, 3.711),
    ("qkv", "wgrad"): (2.590, 1.392), ("attn_out", "wgrad"): (0.889, 0.425),
    ("mlp_up", "wgrad"): (3.557, 1.856), ("mlp_down", "wgrad"): (3.518, 1.894),
}


def te_training_gemms(layer: str, passes: str = "fprop+dgrad+wgrad") -> tuple[tuple[int, int, int], ...]:
    """The (M, K, N) of ``layer``'s GEMMs in TE's guide for ``passes`` (``+``-joined names)."""
    k, n, t = *TE_TRAINING_LAYERS[layer], TE_TRAINING_TOKENS
    shapes = {"fprop": (t, k, n), "dgrad": (t, n, k), "wgrad": (k, t, n)}
    return tuple(shapes[p] for p in passes.split("+"))


def te_training_waves(sm_count: int, shapes: Sequence[tuple[int, int, int]] | None = None) -> float:
    """Work-weighted wave efficiency (:func:`gemm_wave_efficiency`, split-K included) of TE's
    training GEMMs on ``sm_count`` SMs: their FLOPs over the sum of each one's FLOPs / its
    efficiency, so that fraction x this is the share of peak the model gives the whole set."""
    shapes = shapes or tuple(s for layer in TE_TRAINING_LAYERS for s in te_training_gemms(layer))
    work = [(2 * m * k * n, _wave_efficiency(1, m, n, sm_count, k, _TILE, _TILE, _SPLIT_K_MIN))
            for m, k, n in shapes]
    return sum(f for f, _ in work) / sum(f / w for f, w in work)


def te_h200nvl_shares(dtype: str) -> dict[tuple[str, str], tuple[float, float]]:
    """Per bar of TE's H200 NVL figure (:data:`TE_H200NVL_BARS_MS`): (the measured share of the
    NVL's rated peak, the work-weighted wave efficiency gpuplan gives its GEMMs on 132 SMs).
    The measured share over (best-shape fraction x waves) is the bar's gap to the model."""
    col = {"bf16": 0, "fp8": 1}[dtype]
    peak = TE_TRAINING_GEMM_PEAK[("H200 NVL", dtype)] * 1e12
    out = {}
    for (layer, passes), ms in TE_H200NVL_BARS_MS.items():
        shapes = te_training_gemms(layer, passes)
        flops = sum(2 * m * k * n for m, k, n in shapes)
        out[(layer, passes)] = (flops / (ms[col] * 1e-3) / peak, te_training_waves(132, shapes))
    return out


def _h200nvl_sustained(dtype: str) -> float:
    """The H200 NVL's matmul fraction: its 12-GEMM kernel-only share of its own rated peak in
    TE's guide (TE_TRAINING_GEMM_MS) over the wave efficiency gpuplan gives those GEMMs on its
    132 SMs, so that the model's fraction x waves reproduces the measured total."""
    flops = 2 * 3 * TE_TRAINING_TOKENS * sum(k * n for k, n in TE_TRAINING_LAYERS.values())
    share = flops / (TE_TRAINING_GEMM_MS[("H200 NVL", dtype)] * 1e-3) \
        / (TE_TRAINING_GEMM_PEAK[("H200 NVL", dtype)] * 1e12)
    return share / te_training_waves(132)


CONSTANTS: Mapping[str, Constant] = MappingProxyType({
    # -- matmuls --------------------------------------------------------------------------------
    "gemm_tile_m": Constant(_TILE, "rows", "CUTLASS/cuBLAS default tensor-op tile on Ampere/Hopper "
                            "(NVIDIA Matrix Multiplication Background User's Guide, 'Tile "
                            "quantization')"),
    "gemm_tile_n": Constant(_TILE, "columns", "as gemm_tile_m"),
    "gemm_kloop_fixed_blocks": Constant(
        round(_kloop_fixed_blocks(), 2), "K blocks of 128",
        "a tile's fixed cost beside its K loop: DeepGEMM's FP8 GEMMs on an H800 (README table at "
        "55ab91f7, 2025-03-25) run M = 4096, N = 7168 at 1,426 TFLOP/s with K = 16,384 and 1,168 "
        "with K = 2,048; as kb / (kb + c) of one shape's rate that is c = 4.17 (_kloop_fixed_"
        "blocks). Its K = 512 and 1,536 rows (751, 1,125) then read within 5% of it. Taken for "
        "the grouped expert GEMMs (:func:`grouped_gemm_k_share`); DeepGEMM's 1x128-scaled FP8 "
        "kernel, not cuBLAS's per-tensor one that TE calls on Hopper: a kernel's own fixed cost, "
        "assumed alike"),
    "gemm_split_k_min": Constant(_SPLIT_K_MIN, "K elements per slice", "split-K: when the output tiles "
                                 "fill less than one wave, cuBLAS/CUTLASS split the K loop over "
                                 "more CTAs (CUTLASS split-K and stream-K; Osama et al. 2023, "
                                 "'Stream-K'); slices kept at >= 2 K-blocks of 128"),
    "matmul_volta_fp16": Constant(
        round(_MARKIDIS_V100, 3), "fraction of peak", "Markidis et al. 2018, 'NVIDIA Tensor Core Programmability, "
        "Performance & Precision' (IPDPSW 2018, arXiv 1803.04014), abstract: cuBLAS GEMM on the "
        "Tensor Cores 'can deliver up to 83 Tflops/s in mixed precision on a Tesla V100', of its "
        "125 Tflops/s peak: 83 / 125. Replaces the matmul fraction for fp16 on Volta, as the "
        "Ampere/Hopper best-shape 0.80 (device.DEFAULT_BASIS matmul_nvidia) does there. (Kept: "
        "DeepBench's V100 GEMMs fit 0.815 with 20 us per split-K GEMM, "
        "benchmarks/fit_volta_turing_gemm.py, but taking the fraction moves the V100 fp16 BERT "
        "runs further optimistic -- their gap lies outside the GEMMs -- so it waits for that "
        "mechanism; docs/speed.md. Split-K's fixed cost is shipped: splitk_fixed_volta_s)"),
    "splitk_fixed_volta_s": Constant(
        round(_volta_splitk_fixed_s(), 7), "s per GEMM", _DEEPBENCH + " (V100), computed at "
        "import from DEEPBENCH_V100_SPLITK_MS: the median, over the 12 V100 GEMMs of fewer "
        "128 x 128 output tiles than SMs (all N = 128, K = 1,024-4,096), of the measured time "
        "minus the work at matmul_volta_fp16 and the wave efficiency. A fixed cost, not a "
        "slower rate: at the fit's 0.815 the excess is 14-22 us on 9 of the 12 rows while "
        "their work runs 9-53 us; at 0.664 the 8 rows of under 21 us of work read 13-29 us, median 18 "
        "(the larger ones less: they run above 0.664). Each slice "
        "writes its partial tile to a workspace and a second kernel reduces them (as "
        "splitk_fixed_turing_s; e.g. M=2048 N=128 K=2048: 31 us measured, 13 us of work)"),
    "matmul_turing_fp16": Constant(
        0.61, "fraction of peak", _DEEPBENCH + ": T4 (CUDA 10.1), 88 tiled fp16 GEMMs; large "
        "shapes reach 36-46 of 65 TFLOP/s, the longest ones lowest (the 70 W board's clocks "
        "fall under sustained Tensor Core load). The catalog's one Turing SKU"),
    "splitk_fixed_turing_s": Constant(
        16e-6, "s per GEMM", _DEEPBENCH + " (T4), the same fit: a GEMM of fewer 128 x 128 output "
        "tiles than SMs, which the library splits over K, takes this much longer than its work "
        "at the fraction above -- each slice writes its partial tile to a workspace and a second "
        "kernel reduces them, with no asynchronous copy on Turing to overlap the register-staged "
        "loads of its short K loops (e.g. M=2048 N=128 K=2048: 42 us measured, 34 us of work)"),
    # -- best-shape matmuls measured per SKU and dtype (the MAMF table) -------------------------
    "matmul_h100_fp8": Constant(0.709, "fraction of peak", _MAMF + ": FP8 (float8_e4m3fn), "
                                "H100 SXM 1,402.6 of 1,979 TFLOP/s = 70.9% (torch 2.7.0+cu126; "
                                "its BF16 row, 80.3%, is the default 0.80)"),
    "matmul_h200_fp8": Constant(0.734, "fraction of peak", _MAMF + ": FP8, H200 SXM 1,453.4 of "
                                "1,979 TFLOP/s = 73.4% (torch 2.7.1+cu128; BF16: 'H200 is the "
                                "same' as H100, the default)"),
    "matmul_b200_bf16": Constant(0.776, "fraction of peak", _MAMF + ": BF16, B200 SXM 1,745.0 "
                                 "of 2,250 TFLOP/s = 77.6% (torch 2.7.1+cu128)"),
    "matmul_b200_fp8": Constant(0.763, "fraction of peak", _MAMF + ": FP8, B200 SXM 3,432.5 of "
                                "4,500 TFLOP/s = 76.3% (torch 2.7.1+cu128). Taken for MXFP8's "
                                "block-scaled GEMMs too (no published MXFP8 best-shape figure)"),
    "matmul_gb200_bf16": Constant(0.729, "fraction of peak", _MAMF + ": BF16, GB200 SXM 1,822.0 "
                                  "of 2,500 TFLOP/s = 72.9% (torch 2.10.0.dev20250916+cu130)"),
    "matmul_gb200_fp8": Constant(
        0.723, "fraction of peak", _MAMF + ": FP8, GB200 SXM 3,615.6 of 5,000 TFLOP/s = 72.3% "
        "(same torch); taken for MXFP8 as on B200. GB200 over B200 measured: 1.053 (FP8), 1.044 "
        "(BF16), as the device-reported maximum SM clocks (2,062 / 1,965 MHz = 1.049, same "
        "README's 'Clock speed' table), not the datasheet peaks' 1.111"),
    # -- block-scaled GEMMs beside the per-tensor ones, same chip, same library -----------------
    "gemm_mxfp8_vs_fp8": Constant(
        0.951, "ratio of GEMM rates", _TE_GEMM + ": kernel-only (--pre-quantize) per-layer GEMM "
        "time, FP8 CurrentScaling 6.812 ms, MXFP8 7.161 ms: 6.812 / 7.161 = 0.951 (the MXFP8 "
        "kernel reads its 1x32 e8m0 scales beside the operands; same Blackwell tensor cores and "
        "cuBLASLt as the B200's)"),
    "gemm_training_shapes_blackwell_bf16": Constant(
        round(_training_shape_ratio("bf16"), 4), "ratio of shares of peak",
        _TE_GEMM + " and its H200 NVL worked example (TE_TRAINING_GEMM_MS): BF16 at the 12 "
        "training GEMMs reaches 65.0% of B300's peak and 71.8% of H200 NVL's (0.907), where "
        "the MAMF table's best shapes read B200 77.6% against Hopper's 80.3% (0.966): "
        "Blackwell's GEMMs at a model's shapes fall that much further below their best-shape "
        "share than Hopper's do. B300 (1,100 W) stands for B200 and GB200, whose MAMF rows the "
        "factor scales. Not a shape mechanism on either side (issue 31): gpuplan's waves give "
        "all 12 GEMMs 0.988-0.993 on 148 SMs, yet B300's BF16 Fprop times read 66.3-68.0% for "
        "the 1.1-1.4 ms GEMMs and 77.1% (its MAMF row's 78.6%) for the 0.31 ms attention-out "
        "one; the NVL's bars are flat at 71.6-73.8% of its peak (TE_H200NVL_BARS_MS: its own "
        "sustained clock, matmul_h200nvl_bf16). So the factor reads Blackwell's sustained "
        "GEMM clock under a training stream against the NVL's, each against its best shape; "
        "the Hopper SXM parts take no factor (no sustained SXM figure published), so nothing "
        "is counted twice, and were the SXM's sustained share the NVL's 0.92 of the model, "
        "this factor would be too near 1 by as much"),
    "gemm_training_shapes_blackwell_fp8": Constant(
        round(_training_shape_ratio("fp8"), 4), "ratio of shares of peak",
        _TE_GEMM + " and its H200 NVL worked example (TE_TRAINING_GEMM_MS): FP8 current "
        "scaling, kernel-only, at the 12 training GEMMs reaches 62.5% of B300's peak and 68.4% "
        "of H200 NVL's (0.914), where the MAMF table's best shapes read B200 76.3% against "
        "H200 73.4% (1.040); as the BF16 entry, for B200 and GB200's FP8 (and MXFP8) rows"),
    "matmul_h200nvl_bf16": Constant(
        round(_h200nvl_sustained("bf16"), 3), "fraction of peak",
        _TE_GEMM + ", its 'Worked Example: 5B Model on H200' on an H200 NVL (600 W), kernel-only: "
        "the 12 training GEMMs (19.17 TFLOP) in 31.968 ms = 600 TFLOP/s = 71.8% of the NVL's "
        "own rated 835.5 (not the SXM's 989), over the work-weighted wave efficiency gpuplan "
        "gives them on 132 SMs (0.977, te_training_waves): 0.735, so fraction x waves gives "
        "the measured total. The SKU's sustained clock, not a shape effect: per layer and pass "
        "(TE_H200NVL_BARS_MS, read off the guide's figure) the bars run 71.1-73.8%, the "
        "smallest GEMMs (attention out, N = K = 4,096) at 71.7% as the MLP's, the bars the "
        "wave model gives 0.98 no faster than those at 0.97; 0.92 of the SXM-derived "
        "0.80 x waves at every bar within 3%. No MAMF row measures an NVL (none in "
        "stas00/ml-engineering's history), so its best-shape share cannot be read apart; "
        "for this SKU only (the H100 NVL, 400 W, has the same rating and its own cap)"),
    "matmul_h200nvl_fp8": Constant(
        round(_h200nvl_sustained("fp8"), 3), "fraction of peak",
        _TE_GEMM + ", as matmul_h200nvl_bf16: FP8 CurrentScaling kernel-only 16.785 ms = "
        "1,142 TFLOP/s = 68.4% of the NVL's 1,670.5, over the same waves 0.977: 0.700 (the "
        "SXM H200's best-shape FP8 row, 73.4%, x waves would give 71.7%). Per bar 66.0-75.0%: "
        "FP8's kernel choice varies with the aspect ratio (attention out's Wgrad fastest, its "
        "Fprop + Dgrad slowest), not with the wave efficiency"),
    "matmul_fp4_vs_bf16": Constant(
        0.946, "ratio of shares of peak", _AO_NVFP4 + ": NVFP4 pct_peak over the same run's BF16 "
        "pct_peak at the two largest shapes printed, 6144^3: 0.611 / 0.646 = 0.946, 8192^3: "
        "0.597 / 0.631 = 0.946 (5.37e15 of 9.00e15); taken over the chip's measured BF16 share "
        "(the MAMF table's), as the run's own clocks cancel in the ratio"),
    # -- fused attention, share of the dense peak at long sequences ------------------------------
    "attn_fwd_ampere_d128": Constant(0.73, "fraction of peak", _FA2),
    "attn_fwd_ampere_d64": Constant(0.60, "fraction of peak",
                                    _FA2 + "; head dim 64 peaks lower (Fig. 4: ~190 of 312 TF)"),
    "attn_bwd_over_fwd": Constant(0.85, "ratio", _FA2 + " (63/73 = 0.86)"),
    "attn_fa1_over_fa2": Constant(
        0.5, "ratio", "Dao 2023, FlashAttention-2 (arXiv 2307.08691), abstract: its work "
        "partitioning 'yield[s] around 2x speedup compared to FlashAttention' on A100 "
        "(FlashAttention 'reaching only 25-40% of the theoretical maximum FLOPs/s', "
        "FlashAttention-2 50-73%); FlashAttention v1's rate as a share of FlashAttention-2's at "
        "the same head dim, sequence and direction (an Ampere figure)"),
    "attn_fwd_hopper_fa2": Constant(0.35, "fraction of peak", _FA3),
    "attn_fwd_hopper_fa3": Constant(
        0.75, "fraction of peak", "Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), "
        "abstract: FP16 forward 'reaching up to 740 TFLOPs/s (75% utilization)' on H100 SXM5; "
        "the kernel a serving engine runs on Hopper where it picks FlashAttention 3 "
        "(engines.profiles ATTENTION_16BIT). At Llama's head dim 128 vLLM's own fork measures "
        "BF16 737.22 / 695.77 TFLOP/s non-causal at 2 x 8192 / 1 x 16384 "
        "(vllm-project/flash-attention#122, 2026-02-27, hopper/benchmark_flash_attention_fp8.py), "
        "0.745 / 0.703 of H100-SXM's 989.4, the share x seq / (seq + attn_half_seq) reading "
        "0.727 / 0.738 there; forward only, at head dim >= 128 (head dim 64: "
        "attn_fwd_hopper_fa3_d64)"),
    "attn_fwd_hopper_fa3_d64": Constant(
        0.50, "fraction of peak", "Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), "
        "Figure 5, 'Attention forward speed, head dim 64 (H100 80GB SXM5)': FlashAttention-3 "
        "497 TFLOP/s at 16k without the causal mask (473 with it), the bars' labels as "
        "transcribed at https://subtext.edge.nugit.net/image/66c4bb4bf8b186164a0b56ce0a52fbff577"
        "da65721f65d33cf9e975d7d70b39e and .../9b7cf01f91715dc46b5b50a018fdf4cd6872c4448f44d9c74a"
        "60aa61e56ec6f2 (read 2026-12-07); 497 / 989.4 = 0.502; no figure of vLLM's fork at "
        "head dim 64 was found"),
    "attn_fwd_hopper_fa3_fp8": Constant(
        0.606, "fraction of peak", "Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), "
        "abstract: 'with FP8 reaching close to 1.2 PFLOPs/s' on H100 SXM5 (FP16: 'up to 740 "
        "TFLOPs/s (75% utilization)'), forward only; over H100-SXM-80GB's dense FP8 peak "
        "1,978.9 TFLOP/s (gpus.json): 1.2 / 1.979 = 0.606. Its per-head-dim figures (Fig. 7) "
        "are not in the offline index, so one share for every head dim; the FP8 kernel runs "
        "the forward only (no backward)"),
    "attn_fp8_two_level_vs_16bit_d128": Constant(
        1.0, "ratio of rates (FP8 kernel / 16-bit kernel)", _VLLM_FP8KV_BLOG + ", Llama-3.1-8B "
        "(head dim 128) on one H100, concurrency-1 sweep 256-125k input tokens at v0.19.1: FP8 "
        "'preserving similar TTFT' and 'even with the enabled two-level accumulation we obtain "
        "slight TTFT speedups of FP8 for long contexts' -- no fitted TTFT coefficient is stated "
        "for it, so no gain is taken (1.0). The mechanism: vLLM's FA3 fork writes the FP8 P.V "
        "partial sums into real FP32 registers each step (vllm-project/flash-attention#104, on by "
        "default; vLLM #27889 'Bump FA version for FP8 two-level accumulation', 2025-10-31), "
        "whose register pressure takes back the FP8 MMAs' 2x; vllm-project/flash-attention#122 "
        "(2026-02-27) measures that kernel (hopper/benchmark_flash_attention_fp8.py, its "
        "'baseline' column before #125's tile tuning) at 684.11 / 684.83 TFLOP/s against BF16's "
        "737.22 / 695.77 at head dim 128, non-causal, 2 x 8192 / 1 x 16384 (0.93x / 0.98x), "
        "and causal 172.30 against 331.01 at 32 x 512"),
    "attn_fp8_two_level_vs_16bit_d256": Constant(
        round(6.93e-07 / 1.12e-06, 3), "ratio of rates (FP8 kernel / 16-bit kernel)",
        _VLLM_FP8KV_BLOG + ", gemma-4-E2B (head dim 256) on H100: the fitted TTFT quadratic "
        "coefficient (the attention's L^2 term) rises from 6.93e-07 (BF16) to 1.12e-06 ms/token^2 "
        "(FP8, two-level accumulation on): 6.93 / 11.2 = 0.619 of the 16-bit kernel's rate"),
    "attn_fwd_other": Constant(0.50, "fraction of peak",
                               "assumed for other generations (Volta/Turing: "
                               "memory-efficient kernels; no published fraction)"),
    "attn_half_seq": Constant(256, "tokens", _FA2 + ": at 512 tokens about two thirds of the "
                              "long-sequence rate, i.e. seq / (seq + 256)"),
    # -- skinny (GEMV-like) matmuls: share of the datasheet bandwidth, by weight width ----------
    "gemv_bw_16bit": Constant(
        0.685, "fraction of bandwidth", "calibrate split: gpt-fast README (A100-80GB at 330 W, "
        "CUDA graphs, batch 1): Llama-2-7B bf16 moves 1,397 GB/s = 68.5% of 2,039 GB/s"),
    "gemv_bw_8bit": Constant(
        0.524, "fraction of bandwidth", "same table: int8 weight-only 1,069 GB/s = 52.4% (the "
        "dequantization inside the kernel costs bandwidth)"),
    "gemv_bw_4bit": Constant(
        0.423, "fraction of bandwidth", "same table: int4 group-32 weight-only 863 GB/s = 42.3%"),
    "gemv_bw_awq_gemv": Constant(
        0.702, "fraction of bandwidth", "mit-han-lab/llm-awq tinychat/README.md @1480555 "
        "(2023-09-06, 'Add new implementation of TinyChat'), 4090 Results footnote: LLaMA-2-7B "
        "W4A16 'around 195 tokens / second' with 4 context tokens on an RTX 4090. That TinyChat "
        "runs every decode linear with gemv_forward_cuda (awq/quantize/qmodule.py "
        "WQLinear.forward, tinychat/modules/fused_mlp.py), whose awq/kernels/csrc/quantization/"
        "gemv_cuda.cu is AutoAWQ v0.1.6's but for the stream argument. Its weights by hand: 32 "
        "layers x (4 x 4096^2 + 3 x 4096 x 11008) = 6.476e9 at 4 bits + a 2-byte scale and a "
        "4-bit zero per 128 (0.5195 B) = 3.364 GB, + the fp16 head 32000 x 4096 x 2 B = 0.262 "
        "GB: 3.627 GB in 1/195 s = 707 GB/s, 70.2% of 1,008 GB/s -- the whole step at the "
        "kernel's rate, a lower bound on its own share (the step also runs the head, the "
        "attention, the norms and the host's launches)"),
    "gemv_bw_dequant_hidden": Constant(
        0.685, "fraction of bandwidth", "a 4-bit kernel that dequantizes in registers while its "
        "next loads are in flight reads its packed weights at the 16-bit GEMV's share "
        "(gemv_bw_16bit, not refit): IST-DASLab/marlin README.md (read 2026-12-06 from the offline index; commit not recorded): "
        "Marlin 'can deliver close to ideal (4x) speedups up to batchsizes of 16-32 tokens' "
        "over FP16 -- 4x fewer bytes at the same bandwidth share. Applied to the kernels of "
        "QUANT_KERNELS that name it; see there for which rest on Marlin's figure and which on "
        "the mechanism alone"),
    "gemv_bw_fp8_tensorcore": Constant(
        0.625, "fraction of bandwidth", "an FP8 W8A8 GEMM on FP8 tensor cores (no dequantization: "
        "e4m3 weights and activations go to the MMA as stored, the scales in the epilogue) reads "
        "its 1-byte weights at the 16-bit GEMV's share (gemv_bw_16bit, an end-to-end step's) "
        "times the kernel-level ratio of its share to the BF16 GEMM's at one row. That ratio: "
        "vllm-project/vllm pull request #49363 (HDCharles, 2026-07-21, 'H100 benchmarks for "
        "google/gemma-4-31B-it', benchmark_fp8_gemm.py), batch_size 1.0, TFLOP/s: N=12288 "
        "K=5376 torch-bf16 2.870333, fp8-tensor-w-token-a (vLLM's CUTLASS scaled_mm with the "
        "activation's per-token quantization kernel) 4.733311; N=43008 K=5376 3.072025 and "
        "5.796762. At one row a GEMM's 2NK FLOPs move NK weights (2NK bytes in BF16, NK in "
        "FP8): both shapes together, BF16 594.5 MB in 196.6 us, FP8 297.3 MB in 107.7 us "
        "(2.761 of 3.025 TB/s) = 0.9126 of BF16's share; 0.685 x 0.9126 = 0.625. The "
        "quantization kernel is in it (the GEMM alone, its '-noquant' column, 5.162899 and "
        "6.077129: 0.9665); the PR's bf16 kernel alone reads 0.90 of H100's 3,350 GB/s, FP8 "
        "0.82. Measured on H100 (Hopper) only"),
    "memory_default": Constant(0.85, "fraction of bandwidth",
                               "the default streaming fraction (device.DEFAULT_BASIS memory_gpu)"),
    # -- runtime: host and device cost per kernel -------------------------------------------------
    "eager_host_fwd_s": Constant(
        32e-6, "s per kernel",
        "calibrate split: the PyTorch blog 'Accelerating Generative AI with PyTorch II: GPT, Fast' "
        "measures 25.5 tok/s for eager Llama-2-7B decode on A100 and attributes it to CPU "
        "overhead; 39.2 ms per token over gpuplan's 1,226 eager kernels of that step = 32 us per "
        "kernel. Per kernel, not per torch call: the host also runs the views, splits and "
        "nn.Module calls that launch nothing (about 60 torch calls per layer in that code; "
        "pytorch dev-discuss 'Overhead in nn.Module causing massive slowdowns')"),
    "eager_host_bwd_s": Constant(
        4e-6, "s per kernel",
        "autograd runs backward nodes from C++: the dispatcher alone, ~3.3 us per op in PyTorch's "
        "operator micro-benchmark (pytorch PR #32194, split on CUDA) rounded up"),
    "compile_host_s": Constant(
        4e-6, "s per kernel",
        "Inductor's generated wrapper launches each kernel directly (no module or autograd "
        "Python): the dispatcher-level cost, as eager_host_bwd_s"),
    "graph_replay_s": Constant(
        10e-6, "s per step", "one cudaGraphLaunch of a whole step (NVIDIA, Getting Started with "
        "CUDA Graphs, 2019: graph launch replaces per-kernel launches)"),
    "stream_gap_s": Constant(
        0.9e-6, "s per kernel", "NVIDIA, Getting Started with CUDA Graphs (2019): back-to-back "
        "stream launches of a 2.9 us kernel take 3.8 us each"),
    "graph_gap_s": Constant(0.5e-6, "s per kernel",
                            "same source: 3.4 us each when replayed from a graph"),
    # -- eager, unfused elementwise chains (what torch.compile fuses) -----------------------------
    "eager_rmsnorm_kernels": Constant(
        8, "kernels", "transformers LlamaRMSNorm.forward (transformers 5.24): to(float32), pow(2), "
        "mean(-1), + eps, rsqrt, multiply, to(input dtype), weight x -- one kernel each in eager "
        "(6 on an fp32 input: both casts return the tensor itself)"),
    "eager_rmsnorm_bytes": Constant(
        9.0, "x fused bytes", "the same chain on a 16-bit input, per element: to(fp32) reads 2 B "
        "and writes 4, pow 4 + 4, mean reads 4, the multiply by rsqrt 4 + 4, to(dtype) 4 + 2, the "
        "weight multiply 2 + 2 = 36 B, against 4 B fused (read + write)"),
    "eager_rmsnorm_bytes_fp32": Constant(
        3.5, "x fused bytes", "the same chain on an fp32 input: no casts; pow 8, mean 4, multiply "
        "8, weight multiply 8 = 28 B against 8 B fused"),
    "eager_rotary_kernels": Constant(
        5, "kernels per tensor", "transformers apply_rotary_pos_emb: q*cos, rotate_half (slice, "
        "neg, cat), *sin, add"),
    "eager_rotary_bytes": Constant(
        5.0, "x fused bytes", "the same chain per element of q (or k): q*cos reads and writes it "
        "(2 x), neg reads and writes half of it (1 x), cat reads both halves and writes (2 x), "
        "*sin (2 x), the add reads two and writes one (3 x) = 10 element accesses, against 2 fused "
        "(cos and sin broadcast over the heads, from cache)"),
    "eager_rotary_torchtune_kernels": Constant(
        9, "kernels per tensor", "torchtune's RoPE (torchtune/models/llama3_1/_position_embeddings.py "
        "Llama3ScaledRoPE.forward, as RotaryPositionalEmbeddings; commits 30b8519e8 and "
        "1814feb17): x.float(), four products of a half of it by the cache, their difference "
        "and sum, stack, type_as (7 on an fp32 input: both casts return the tensor itself)"),
    "eager_rotary_torchtune_bytes": Constant(
        12.0, "x fused bytes", "the same chain per element of a 16-bit q (or k): x.float() reads "
        "2 B and writes 4, each product reads and writes a half in fp32 (4 x 4 B), the "
        "difference and the sum read two halves and write one (2 x 6 B), stack 4 + 4, type_as "
        "4 + 2 = 48 B, against 4 B fused (read + write; the cache broadcast over the heads)"),
    "eager_rotary_torchtune_bytes_fp32": Constant(
        4.5, "x fused bytes", "the same chain on an fp32 input: no casts; 16 + 12 + 8 = 36 B "
        "against 8 B fused"),
    "eager_rotary_fms_kernels": Constant(
        4, "kernels per tensor", "IBM FMS's RotaryEmbedding.adjusted_qk (foundation-model-stack/"
        "foundation-model-stack@464c4ca3, 2024-02-29, fms/modules/positions.py): x.float(), the "
        "(..., D/2, 2, 2) product of the cached rotation by x.unsqueeze(-2), its sum over the last "
        "axis, type_as (2 on an fp32 input: both casts return the tensor itself); the per-layer "
        "position_ids and cache lookup not counted"),
    "eager_rotary_fms_bytes": Constant(
        9.0, "x fused bytes", "the same chain per element of a 16-bit q (or k): x.float() reads "
        "2 B and writes 4, the broadcast product reads 4 and writes two fp32 values (8), the sum "
        "reads those 8 and writes 4, type_as 4 + 2 = 36 B, against 4 B fused (read + write; the "
        "rotation cache broadcast over the heads)"),
    "eager_rotary_fms_bytes_fp32": Constant(
        3.0, "x fused bytes", "the same chain on an fp32 input: no casts; product 4 + 8, sum "
        "8 + 4 = 24 B against 8 B fused"),
    "eager_swiglu_bytes": Constant(
        5 / 3, "x fused bytes", "transformers LlamaMLP.forward: act_fn(gate_proj(x)) * "
        "up_proj(x): the activation reads the gate and writes its output (2 accesses), the "
        "product reads it and the up projection and writes (3) = 5 accesses per element of the "
        "intermediate, against 3 fused (read gate and up, write the product)"),
    # -- optimizer step: fused, foreach, for-loop -------------------------------------------------
    "opt_fused_param_accesses": Constant(
        2, "accesses per element", "a fused Adam/AdamW kernel (torch AdamW(fused=True), apex "
        "FusedAdam / FusedLAMB) reads and writes each parameter once, reads the gradient once and "
        "each state once: 2 + 1 + 2 per state"),
    "opt_unfused_kernels": Constant(8, "kernels per tensor (for-loop) or per launch group "
                                    "(foreach)", _ADAMW_PASSES),
    "opt_unfused_param_accesses": Constant(4, "accesses per element",
                                           _ADAMW_PASSES + ": mul_ and addcdiv_ read and write "
                                           "the parameters"),
    "opt_unfused_grad_reads": Constant(2, "accesses per element",
                                       _ADAMW_PASSES + ": lerp_ and addcmul_ read the gradient"),
    "opt_unfused_state_accesses": Constant(
        7, "accesses per element of each state", _ADAMW_PASSES + ": 14 state-sized accesses over "
        "the two states (lerp_ 2, mul_ 2, addcmul_ 2, sqrt 2 into a temporary, div_ 2, add_ 2, "
        "addcdiv_ 2) -- vs 4 in one fused pass: fp32 AdamW moves 80 B per parameter, fused 28"),
    "multi_tensor_max_tensors": Constant(
        36, "tensors per launch", "ATen MultiTensorApply.cuh (CUDA < 13): depth_to_max_tensors "
        "= {110, 64, 48, 36, 30}; an Adam step is depth 4"),
    "multi_tensor_max_elements": Constant(
        320 * 65536, "elements per launch", "same file: depth_to_max_blocks 320 x kChunkSize "
        "65536 elements"),
    "lamb_param_accesses": Constant(
        4, "accesses per element", _LAMB + ": the weight norm reads the weights, stage 1 reads "
        "them (weight decay), stage 2 reads and writes them"),
    "lamb_grad_reads": Constant(2, "accesses per element",
                                _LAMB + ": the global gradient norm and stage 1"),
    "lamb_scratch_accesses": Constant(
        3, "fp32 accesses per element", _LAMB + ": stage 1 writes the update into the gradient's "
        "buffer, the update norm reads it, stage 2 reads it"),
    "lamb_kernels": Constant(
        8, "kernels per launch group", _LAMB + ": three multi_tensor_l2norm (two kernels each: "
        "per-chunk partial norms and the cleanup) and the two stages"),
    "adafactor_kernels": Constant(24, "kernels per tensor", _ADAFACTOR),
    "adafactor_param_accesses": Constant(3, "accesses per element",
                                         _ADAFACTOR + ": _rms(p) reads p; p.add_ reads and writes"),
    "adafactor_grad_reads": Constant(2, "accesses per element",
                                     _ADAFACTOR + ": grad**2 and update.mul_(grad)"),
    "adafactor_scratch_accesses": Constant(
        16, "fp32 accesses per element", _ADAFACTOR + ": the full-size update temporary: "
        "grad**2 and + eps (3), the row and column means (2), the rsqrt outer product (1), "
        "mul_(grad) (2), _rms (1), div_ (2), mul_(lr) (2), neg (2) and add_ (1)"),
    "eager_host_op_s": Constant(
        8e-6, "s per kernel", "one Python-level tensor op that launches one CUDA kernel (a "
        "per-parameter optimizer loop): the Python binding and dispatcher, 3.3 us for an op that "
        "launches nothing (pytorch PR #32194's operator micro-benchmark, split on CUDA), plus the "
        "driver and runtime launch, 4-6 us (NVIDIA, Getting Started with CUDA Graphs; the default "
        "launch overhead of device.DEFAULT_BASIS)"),
    # -- gradient clipping: the global norm of the gradients, then a scale ------------------------
    "clip_grad_accesses": Constant(
        3, "accesses per gradient element", "torch.nn.utils.clip_grad_norm_ (torch/nn/utils/"
        "clip_grad.py): each gradient's norm (1 read), then every gradient multiplied in place by "
        "the clamped coefficient (1 read, 1 write); apex multi_tensor_l2norm + multi_tensor_scale "
        "(NVIDIA DLE BERT run_squad.py GradientClipper, Megatron clip_grad_norm_fp32) move the "
        "same; counted as if the norm is above the threshold (the scale runs)"),
    "clip_grad_total_kernels": Constant(
        4, "kernels", "torch.nn.utils.clip_grad_norm_: stack of the per-tensor norms, the norm of "
        "the stack, the coefficient max_norm / (norm + 1e-6), clamp(max=1)"),
    "host_sync_s": Constant(
        16e-6, "s per host read", "a .item() of a device scalar: the copy is one dispatched op "
        "(eager_host_op_s) and, the device having drained while the host waited, the next op's "
        "issue is not hidden behind device work (one more eager_host_op_s)"),
    # -- fp16 loss scaling: the passes around the optimizer step ----------------------------------
    "gradscaler_unscale_accesses": Constant(
        2, "accesses per element of the fp32 gradients", "torch.amp.GradScaler.unscale_ "
        "(torch/amp/grad_scaler.py _unscale_grads_): torch._amp_foreach_non_finite_check_and_"
        "unscale_ multiplies every fp32 gradient by 1/scale in place and records inf/NaN -- one "
        "multi-tensor pass that reads and writes each gradient, before the optimizer step"),
    "fp16_master_extra_accesses": Constant(
        3, "fp32 accesses per element", "fp16 weights with an fp32 master copy (apex amp O2, "
        "apex/amp/_process_optimizer.py; Megatron-LM Float16OptimizerWithFloat16Params): the "
        "fp16 gradients are unscaled into fp32 master gradients (multi_tensor_scale: read 2 B, "
        "write 4 B), the step reads those fp32 gradients (4 B, not 2), and after it the master "
        "weights are copied into the fp16 ones (_master_params_to_model_params / "
        "_copy_main_params_to_model_params: read 4 B; the 2-B write is the step's): 2 + 4 + 2 + 4 "
        "= 12 B = 3 fp32 accesses more than one fused pass"),
    # -- communication overlapped with compute: the SMs NCCL's kernels hold -----------------------
    "nccl_overlap_ctas": Constant(
        24, "CTAs (one SM each)", "an ncclAllGather overlapped with a GEMM under FSDP's prefetch "
        "on an H100 (132 SMs) launches 24 blocks, each resident on its own SM for the "
        "collective's whole duration, so the concurrent GEMM runs on the other 108 (NVIDIA "
        "Developer Forums, 'Compute-Communication Overlap Causes Severe GEMM Performance "
        "Degradation because of Tail Effect', 2025, the poster's Nsight Systems profile: "
        "https://forums.developer.nvidia.com/t/337991). NCCL runs one CTA per channel; taken for "
        "every overlapped data-parallel collective (all-reduce, all-gather, reduce-scatter) and "
        "the EP all-to-all under Megatron's batch-level overlap (a grouped send/recv, one CTA "
        "a p2p channel: parallel.ep_overlap_sm_share) on "
        "NVIDIA NVLink-switch boards (A100, H100/H200, B200: a measured count on H100 only, the "
        "others assumed alike); none over PCIe, whose NCCL channel count is not published"),
    # -- AMP ---------------------------------------------------------------------------------------
    "autocast_fp32_ops": Constant(
        2.0, "x bytes", "CUDA autocast runs softmax and layer_norm in fp32 (PyTorch AMP op "
        "reference, 'CUDA Ops that can autocast to float32'): their inputs/outputs move 4 B, not 2"),
})


def constant(name: str) -> float:
    return CONSTANTS[name].value


GEMM_TILE = (int(constant("gemm_tile_m")), int(constant("gemm_tile_n")))


def gemm_wave_efficiency(batch: int, m: int, n: int, sm_count: int, k: int | None = None,
                         tile_m: int | None = None) -> float:
    """Busy share of the SM rounds a (batch x) M x N output takes in 128 x 128 tiles: tile
    quantization (partial edge tiles do full work) times wave quantization (the last round of tiles
    leaves SMs idle). With ``k`` given, an output of fewer tiles than SMs is split over its K loop
    into up to SMs / tiles slices of at least ``gemm_split_k_min`` (split-K), as the libraries do
    for such shapes -- without it one more row at M = 128 would double the time. 1.0 when the SM
    count is unknown."""
    tm, tn = GEMM_TILE
    return _wave_efficiency(batch, m, n, sm_count, k, tile_m or tm, tn,
                            int(constant("gemm_split_k_min")))


#: Smallest row tile of a grouped MoE GEMM (vLLM's fused_moe Triton kernel picks BLOCK_SIZE_M
#: 16 for few tokens per expert, up to 64-128 for many: get_default_config; stated).
GROUPED_TILE_MIN = 16


def grouped_gemm_efficiency(groups: int, rows: int, n: int, sm_count: int, k: int,
                            concurrent: int = 0) -> float:
    """Busy share of a grouped (MoE) GEMM: ``rows`` token-expert rows over ``groups`` experts,
    each its own ``rows / groups`` x ``n`` output. The row tile shrinks with the rows each expert
    gets (a power of two from :data:`GROUPED_TILE_MIN` to the dense 128), then tile and wave
    quantization as :func:`gemm_wave_efficiency` (split-K included): few tokens per expert leave
    most of each tile empty and waves idle. Not validated against a measured grouped GEMM.
    ``concurrent``: the experts' products run ``concurrent`` at a time (one launch each over that
    many streams: :data:`~.flops.TE_GEMM_STREAMS`), each set's tiles waving over the SMs
    together and the sets one after another (:func:`grouped_rounds_efficiency`); 0: one kernel
    schedules every expert's tiles."""
    per = max(1, math.ceil(rows / max(1, groups)))
    tile = min(GEMM_TILE[0], max(GROUPED_TILE_MIN, 1 << (per - 1).bit_length()))
    return grouped_rounds_efficiency(groups, concurrent, lambda g: gemm_wave_efficiency(
        g, per, n, sm_count, k, tile_m=tile))


def grouped_rounds_efficiency(groups: int, concurrent: int,
                              share: Callable[[int], float]) -> float:
    """Busy share of ``groups`` equal products run ``concurrent`` at a time, ``share(g)`` the
    busy share of ``g`` of them run together: ``ceil(groups / concurrent)`` rounds, the full
    ones of ``concurrent`` products and the last of the rest, each taking its work over its own
    share, so the whole is ``groups / sum(g_r / share(g_r))``. ``concurrent`` 0 or at least
    ``groups``: one round, ``share(groups)``."""
    groups = max(1, groups)
    if concurrent <= 0 or concurrent >= groups:
        return share(groups)
    full, rest = divmod(groups, concurrent)
    time = full * concurrent / share(concurrent) + (rest / share(rest) if rest else 0.0)
    return groups / time



#: Architectures whose grouped expert GEMMs pay a tile's fixed cost beside the K loop
#: (:func:`kloop_fixed_blocks`): Hopper, where DeepGEMM measured it; Blackwell assumed alike
#: (its TMA-fed, warp-specialized kernels have the same prologue and epilogue; no published
#: short-K table found). Older generations and AMD keep none: no measurement.
KLOOP_FIXED_ARCHS = ("hopper", "blackwell")


def kloop_fixed_blocks(architecture: str, peak: float, fp8_peak: float) -> float:
    """A tile's fixed cost in K blocks of 128 of a GEMM at ``peak`` FLOP/s on an
    ``architecture`` chip whose dense FP8 peak is ``fp8_peak``: :data:`CONSTANTS`
    ``gemm_kloop_fixed_blocks`` (measured in FP8 K blocks) times ``peak / fp8_peak`` -- the
    fixed part is a time (the pipeline's fill, the output tile's store), and a 16-bit K block
    takes twice an 8-bit one at half the peak, so it is half as many 16-bit blocks. 0 outside
    :data:`KLOOP_FIXED_ARCHS` or without an FP8 peak."""
    if (architecture or "").lower() not in KLOOP_FIXED_ARCHS or fp8_peak <= 0 or peak <= 0:
        return 0.0
    return constant("gemm_kloop_fixed_blocks") * peak / fp8_peak


def grouped_gemm_k_share(k: int, fixed_blocks: float) -> float:
    """Share of a tile's time that is its K loop at inner dimension ``k``: ``kb / (kb + c)``,
    kb = K / 128 and c = ``fixed_blocks`` (:func:`kloop_fixed_blocks`: a tile's prologue and
    epilogue as K blocks). A short K -- an MoE expert's down projection (Qwen3-30B-A3B: 768),
    the expert wgrad's K of the rows each expert gets -- spends a larger part of each tile
    outside its main loop: at the FP8 c = 4.17, 0.59 at K = 768, 0.79 at 2,048, 0.97 at
    16,384. The best-shape matmul fractions (MAMF's search) are large-K shapes, where the share
    is ~1."""
    kb = max(1, k) / GEMM_TILE[0]
    return kb / (kb + max(0.0, fixed_blocks))


def grouped_gemm_s(flops: float, shape: tuple[int, int, int, int], groups: int, rate: float,
                   sm_count: int, *, backward: bool, fixed_blocks: float = 0.0,
                   concurrent: int = 0) -> float:
    """Seconds of a grouped expert GEMM of forward ``shape`` (batch, rows, K, N; ``rows`` over
    ``groups`` experts) and ``flops`` at ``rate``: each product at its own tiles and waves
    (:func:`grouped_gemm_efficiency`) and its own K loop's share (:func:`grouped_gemm_k_share`
    with ``fixed_blocks``). A backward is the input gradient (rows x K out, inner N) and, past
    one forward's FLOPs, the weight gradient (K x N out per expert, inner: the rows each expert
    gets), each timed at its own shape. ``concurrent``: the experts' products in flight at once
    (:func:`grouped_gemm_efficiency`), the three GEMMs alike (TE's grouped linear issues its
    forward, dgrad and wgrad through the same multi-stream call)."""
    b, m, k, n = shape
    rows = b * m
    if not backward:
        return flops / (rate * grouped_gemm_efficiency(groups, rows, n, sm_count, k, concurrent)
                        * grouped_gemm_k_share(k, fixed_blocks))
    fwd = 2.0 * rows * k * n
    dgrad = min(flops, fwd)
    t = dgrad / (rate * grouped_gemm_efficiency(groups, rows, k, sm_count, n, concurrent)
                 * grouped_gemm_k_share(n, fixed_blocks))
    if flops > dgrad:
        per = max(1, math.ceil(rows / max(1, groups)))
        wave = grouped_rounds_efficiency(groups, concurrent, lambda g: gemm_wave_efficiency(
            g, k, n, sm_count, per))
        t += (flops - dgrad) / (rate * wave * grouped_gemm_k_share(per, fixed_blocks))
    return t

#: The generations whose own Tensor Core GEMM share gpuplan times: (architecture, dtype) -> (the
#: matmul fraction's constant, split-K's fixed cost's constant, or None). Turing's pair is
#: DeepBench's fit; Volta keeps Markidis's fraction (see ``matmul_volta_fp16``) with the split-K
#: cost DeepBench's V100 rows give at that fraction (``splitk_fixed_volta_s``).
#: Catalog SKUs whose matmul at a dtype was measured apart -- best shapes in the MAMF table,
#: the H200 NVL's sustained training GEMMs in TE's guide: (GPU name, dtype) -> its CONSTANTS
#: entry, replacing the default fraction for that dtype.
MEASURED_MATMUL: Mapping[tuple[str, str], str] = MappingProxyType({
    ("H100-SXM-80GB", "fp8"): "matmul_h100_fp8",
    # Meta's 96 GB HBM2e SXM H100 (torchtitan docs/performance.md @eaea6f6) is the same GH100
    # SXM5 die and Tensor Cores as the MAMF row's H100 SXM, its peaks the SXM5's: the FP8 share
    # of the peak is the die's (cuBLASLt's FP8 kernels), not the memory's, so it carries over
    # (its 500 W cap scales the peak apart: device.at_power_limit)
    ("H100-SXM-96GB", "fp8"): "matmul_h100_fp8",
    ("H200-SXM-141GB", "fp8"): "matmul_h200_fp8",
    # the H200 NVL (600 W) has no MAMF row: its sustained kernel-only share at TE's training
    # GEMMs over their wave efficiency (matmul_h200nvl_*), its own clock under its own cap --
    # not carried to the SXM parts, whose MAMF rows stand (issue 31: the NVL's gap to the SXM
    # shares is flat over the 12 shapes, a clock's, not a shape's)
    ("H200-NVL-141GB", "bf16"): "matmul_h200nvl_bf16",
    ("H200-NVL-141GB", "fp8"): "matmul_h200nvl_fp8",
    ("B200-SXM-180GB", "bf16"): "matmul_b200_bf16",
    ("B200-SXM-180GB", "fp8"): "matmul_b200_fp8",
    ("GB200-NVL72", "bf16"): "matmul_gb200_bf16",
    ("GB200-NVL72", "fp8"): "matmul_gb200_fp8",
})

#: SKUs whose fused attention is the same kernel on the same tensor cores as a sibling SKU's,
#: at another clock: SKU -> (its MAMF best-shape BF16 entry, the sibling's). GB200 is B200's
#: die (148 SMs, the same Blackwell tensor cores) at 1,200 W against 1,000 W; its datasheet
#: peaks are B200's x 1.111 (2,500 / 2,250 BF16), but the MAMF table measures its tensor cores
#: 1.044x B200's (BF16, 1,822.0 / 1,745.0 TFLOP/s; FP8 1.053), as the device-reported maximum SM
#: clocks (2,062 / 1,965 MHz = 1.049, the same README's 'Clock speed' table). The GEMMs take
#: each SKU's own MAMF share (MEASURED_MATMUL); the fused attention took a share of the
#: datasheet peak, so GB200's ran 1.111x B200's. With this its share is scaled by 0.729 / 0.776
#: (:func:`attention_clock_share`): GB200's attention runs B200's x the measured 1.044. B200's
#: own attention share (FlashAttention-2's on an H100, ``attn_fwd_hopper_fa2``, carried to
#: Blackwell's peak) is left as it is: a question of the kernel, not of the clock.
ATTENTION_CLOCK_SKUS: Mapping[str, tuple[str, str]] = MappingProxyType({
    "GB200-NVL72": ("matmul_gb200_bf16", "matmul_b200_bf16"),
})


def attention_clock_share(gpu_name: str) -> float:
    """Factor on the fused attention's share of ``gpu_name``'s peak
    (:data:`ATTENTION_CLOCK_SKUS`): its MAMF best-shape BF16 share over its sibling's, so that
    the two SKUs' attention rates differ by their measured tensor-core rates, not by their
    datasheet peaks; 1.0 for any other SKU. GB200: 0.729 / 0.776 = 0.939."""
    pair = ATTENTION_CLOCK_SKUS.get(gpu_name)
    return 1.0 if pair is None else constant(pair[0]) / constant(pair[1])


#: Recipes whose block-scaled GEMMs run at a measured share of the per-tensor-scaled GEMM rate
#: the dtype's fraction stands for (the MAMF table's FP8 rows are per-tensor torch._scaled_mm):
#: recipe name -> its CONSTANTS ratio. NVFP4's fraction is measured block-scaled already.
BLOCK_SCALED_GEMM: Mapping[str, str] = MappingProxyType({"mxfp8": "gemm_mxfp8_vs_fp8"})

#: Architectures whose MAMF (best-shape) matmul shares are scaled to training shapes, by
#: dtype: how much further below the best shape their GEMMs run in TE's training GEMMs than
#: the H200 NVL's do (:func:`_training_shape_ratio`; a sustained clock's effect rather than a
#: shape's, see the constants). Hopper's SXM shares take none: no sustained SXM figure.
TRAINING_SHAPE_GEMM: Mapping[tuple[str, str], str] = MappingProxyType({
    ("blackwell", "bf16"): "gemm_training_shapes_blackwell_bf16",
    ("blackwell", "fp8"): "gemm_training_shapes_blackwell_fp8",
})

OLDER_TENSOR_CORES: Mapping[tuple[str, str], tuple[str, str | None]] = MappingProxyType({
    ("volta", "fp16"): ("matmul_volta_fp16", "splitk_fixed_volta_s"),
    ("turing", "fp16"): ("matmul_turing_fp16", "splitk_fixed_turing_s"),
})


def splitk_fixed_s(architecture: str, dtype: str, batch: int, m: int, n: int,
                   sm_count: int) -> float:
    """The fixed cost of a split-K GEMM on Volta's and Turing's Tensor Cores: a (batch x) M x N
    output of fewer 128 x 128 tiles than SMs -- the shapes :func:`gemm_wave_efficiency` splits
    over K (``gemm_split_k_min``'s source: CUTLASS split-K, the libraries' rule for outputs under
    one wave) -- pays :data:`CONSTANTS` ``splitk_fixed_volta_s`` / ``splitk_fixed_turing_s``
    beyond its work (the partial tiles' workspace and their reduction); 0 elsewhere, and for
    GEMMs that fill the SMs."""
    names = OLDER_TENSOR_CORES.get(((architecture or "").lower(), dtype))
    if names is None or names[1] is None or sm_count <= 0:
        return 0.0
    tm, tn = GEMM_TILE
    tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
    return constant(names[1]) if tiles < sm_count else 0.0


def separate_launches_s(flops: float, shape: tuple[int, int, int, int],
                        shares: Sequence[float], rate: float, *, architecture: str, dtype: str,
                        sm_count: int) -> tuple[float, float]:
    """(work seconds, fixed seconds) of a tiled GEMM of ``shape`` (batch, M, K, N) and ``flops`` at ``rate`` that runs
    as one launch per entry of ``shares`` (each that share of N and of the work; (): one launch):
    each launch tiles and waves over the SMs on its own (:func:`gemm_wave_efficiency`) and pays
    its own split-K fixed cost (:func:`splitk_fixed_s`). Separate nn.Linear layers are separate
    cuBLAS calls -- NVIDIA DeepLearningExamples BERT modeling.py BertSelfAttention (query, key,
    value), transformers' BERT and Llama (q_proj, k_proj, v_proj; gate_proj, up_proj) -- so BERT-
    large's 1,536 x 1,024 query output is 96 tiles on V100's 80 SMs, two waves 60% busy, where a
    fused 1,536 x 3,072 QKV would be 288 tiles, four waves 90% busy."""
    b, m, k, n = shape
    by_n: dict[int, list[float]] = {}  # launches of one width share one efficiency
    for share in shares or (1.0,):
        by_n.setdefault(max(1, round(n * share)), []).append(share)
    work = fixed = 0.0
    for ni, group in by_n.items():
        share = sum(group) if len(group) > 1 else group[0]
        eff = gemm_wave_efficiency(b, m, ni, sm_count, k)
        work += (flops if share == 1.0 else flops * share) / (rate * eff)
        fixed += len(group) * splitk_fixed_s(architecture, dtype, b, m, ni, sm_count)
    return work, fixed


def overlap_sm_share(sm_count: int, *, vendor: str, interconnect: str | None) -> float:
    """Share of the SMs an overlapped NCCL collective holds while it runs (:data:`CONSTANTS`
    ``nccl_overlap_ctas`` of ``sm_count``): compute that runs beside it runs on the rest, so a
    hidden collective of ``t`` seconds still costs the step ``share x t``. Only on NVIDIA boards
    whose GPUs share an NVLink switch (``interconnect`` ``NVLink ...``, not a bridged pair), where
    the count was measured (H100) -- applied to Ampere and Blackwell boards alike as an
    assumption; 0 elsewhere: NCCL's channel count over PCIe (fewer, slower links) and RCCL's are
    not published, and an unknown SM count gets no guess."""
    link = interconnect or ""
    if (sm_count <= 0 or (vendor or "").lower() != "nvidia" or not link.startswith("NVLink")
            or "bridge" in link):
        return 0.0
    return min(1.0, constant("nccl_overlap_ctas") / sm_count)


@record
class QuantKernel:
    """The kernel an engine runs a quantized weight format's skinny (decode) matmuls with, and
    the share of the datasheet bandwidth it reaches on its packed weights at batch 1."""

    name: str
    engine: str
    """The engine profile that runs it (:mod:`gpuplan.engines.profiles`)."""
    formats: tuple[str, ...]
    """Weight formats (:data:`gpuplan.formats.WEIGHT_FORMATS`) it runs."""
    archs: tuple[str, ...]
    """GPU architectures it is chosen on (the catalog's ``architecture``)."""
    constant: str
    """The :data:`CONSTANTS` entry of its bandwidth share."""
    source: str
    versions: tuple[str, ...] = ()
    """The checkpoint kernels (an AWQ ``quantization_config`` ``version``:
    ``Architecture.checkpoint_kernel``) it is chosen for; a checkpoint naming none counts as
    ``gemm`` (transformers' AwqConfig default); (): any."""
    row_passes: int = 0
    """Decode batches of up to this many rows read the packed weights once per row (one
    launch slice per row, each reloading and dequantizing the whole matrix); larger batches,
    and 0, read them once for the whole batch."""
    splitk_partials: int = 0
    """Each launch writes this many split-K partial outputs (16-bit, rows x out features each)
    that a separate reduction kernel then sums; 0: the kernel writes its output itself."""
    issue_per_weight: float = 0.0
    """Thread instructions its loop issues per weight per row of the batch (unpacking,
    dequantization, the dot product, the loop's own bookkeeping), counted from its compiled
    code; 0: not counted (the kernel timed by its bytes alone)."""


#: AutoAWQ's GEMV kernel (g128), instructions per weight per row. Its loop
#: (casper-hansen/AutoAWQ_kernels@c7b0e88 awq_ext/quantization/gemv_cuda.cu gemv_kernel_g128,
#: the same code as AutoAWQ@0091f1e awq_cuda/quantization/gemv_cuda.cu): each thread of a
#: (32, 4) block takes 32 weights of one output channel an iteration (one float4 of 4 packed
#: int32), and per weight runs ``(float)(w & 0xF)``, ``scale * (w_fp - zero)``,
#: ``psum += dq * __half2float(x)`` and ``w >>= 4``; the batch row is ``blockIdx.z``, so every
#: row repeats all of it. Compiled for sm_89 (nvcc 13.0 V13.0.88, -O3; AutoAWQ_kernels'
#: setup.py builds sm_89 code for an RTX 4090) and disassembled (nvdisasm 13.5), one iteration
#: of its outer loop is 265 SASS instructions: per 32 weights 33 I2FP.F32.U32, 33 HADD2.F32 (the
#: fp16 -> fp32 converts), 32 FADD, 32 FMUL, 32 FFMA, 29 SHF, 29 LOP3, and 45 of address,
#: bound checks, loads and branches (10 IMAD, 8 IADD3, 7 LDG, 5 ISETP, 5 BRA, 4 BSSY,
#: 4 BSYNC, 1 UIADD3, 1 CALL) -- 265 / 32 = 8.28 a weight; the warp reduction and store after
#: the loop (about 30 per output channel) are left out (under 1% at 4,096 inputs). The
#: wheel that ran the autoawq rows may come from another nvcc; its count was not checked. The
#: same count is applied on sm_80 and sm_90 (Ampere and Hopper, an assumption): compiled for
#: sm_80 the convert is I2F (the conversion unit, whose lower rate is not timed) rather than
#: sm_86+'s I2FP, and neither loop was counted on its own.
AWQ_GEMV_ISSUE_PER_WEIGHT = 265 / 32


#: Which kernel runs a quantized format's decode GEMVs, per (engine, format, architecture): the
#: first match wins; a job no entry matches keeps the width-based fraction
#: (:func:`gemv_bandwidth_fraction`: gpt-fast's kernels, the calibrate split). Every kernel here
#: streams its weights once for the whole batch while M is below one GEMM tile (the speed model's
#: skinny regime, time.py ``_bandwidth``): Marlin's README measures that flat to 16-32 rows --
#: except AutoAWQ's GEMV kernel (``row_passes``), which reads them once per row of the batch.
#: Not modelled, for want of a figure: bitsandbytes' nf4 (a GEMV at batch 1, dequantize-then-matmul above: formats.py
#: ``matmul_weight_bytes``), ExLlamaV2, llama.cpp's per-GPU q4 kernels, vLLM's Machete on
#: Hopper, TensorRT-LLM's W4A16 GEMV: they keep the width-based fraction. FP8 W8A8 on Hopper
#: under vLLM, SGLang and TensorRT-LLM runs an FP8 tensor-core GEMM, not a dequantizing GEMV
#: (gemv_bw_fp8_tensorcore); on Ada (TensorRT-LLM's CUDA-core FP8 GEMV below 9 rows, vLLM's sm89
#: CUTLASS kernels, Marlin FP8 on Ampere) and Blackwell no small-M measurement was found, so those
#: keep the width-based fraction (gpt-fast's int8 weight-only kernel's).
QUANT_KERNELS: tuple[QuantKernel, ...] = (
    QuantKernel(
        name="marlin", engine="vllm", formats=("awq-4bit", "gptq-4bit", "w4a16"),
        archs=("Ampere", "Ada Lovelace"), constant="gemv_bw_dequant_hidden",
        source="vLLM awq_marlin / gptq_marlin (vllm/model_executor/layers/quantization/"
               "awq_marlin.py, gptq_marlin.py: chosen for a 4-bit checkpoint on compute "
               "capability >= 8.0); IST-DASLab/marlin README: close to ideal 4x speedup over "
               "FP16 up to batch 16-32, 'Ampere or Ada, not yet optimized for Hopper'"),
    QuantKernel(
        name="autoawq-gemm", engine="transformers", formats=("awq-4bit",),
        archs=("Ampere", "Ada Lovelace", "Hopper"), constant="gemv_bw_dequant_hidden",
        source="transformers AwqConfig(version='gemm') by default loads AutoAWQ's "
               "WQLinear_GEMM (llm-awq's gemm_cuda: tensor-core tiles that dequantize int4 in "
               "registers as the next tile's loads run). The share is the mechanism's (no "
               "published bandwidth figure outside gpuplan's holdout was found); set after the "
               "autoawq holdout rows were read (benchmarks/published/README.md says so). "
               "Its split-K partials: AutoAWQ v0.1.6 (8110e028) awq/modules/linear.py "
               "WQLinear_GEMM.forward calls gemm_forward_cuda(x, qweight, scales, qzeros, 8), "
               "and awq/modules/fused/mlp.py QuantLlamaMLP passes the same 8 ('self.group_size "
               "= 8' for a GEMM down_proj); awq_cuda/quantization/gemm_cuda_gen.cu "
               "gemm_forward_cuda allocates '_out_feats = torch::empty({split_k_iters, "
               "num_in_feats, OC})', the grid's blocks each own one of the 8 K slices, and it "
               "returns '_out_feats.sum(0)': a torch reduction kernel after every launch",
        versions=("gemm",), splitk_partials=8),
    QuantKernel(
        name="autoawq-gemv", engine="transformers", formats=("awq-4bit",),
        archs=("Ampere", "Ada Lovelace", "Hopper"), constant="gemv_bw_awq_gemv",
        versions=("gemv",), row_passes=8, issue_per_weight=AWQ_GEMV_ISSUE_PER_WEIGHT,
        source="its share: TinyChat's Llama-2-7B on an RTX 4090 with the same kernel "
               "(gemv_bw_awq_gemv, a lower bound measured on the 4090 only, applied to Ampere "
               "and Hopper as an assumption). "
               "A checkpoint whose quantization_config names version 'gemv' loads AutoAWQ's "
               "WQLinear_GEMV. casper-hansen/AutoAWQ@027758d (the README of the autoawq rows) "
               "awq/modules/linear.py WQLinear_GEMV.forward: 'if inputs.shape[0] > 8: "
               "gemmv2_forward_cuda' (a split-K GEMM) 'else: gemv_forward_cuda'; "
               "AutoAWQ@0091f1e awq_cuda/quantization/gemv_cuda.cu (the same in "
               "casper-hansen/AutoAWQ_kernels@c7b0e88 awq_ext/quantization/gemv_cuda.cu): "
               "'dim3 num_blocks(1, num_out_channels / 4, num_out_feats)' and in the kernel "
               "'batch_idx = blockIdx.z', whose weight, zero and scale loads do not depend on "
               "batch_idx -- each of up to 8 rows reloads and dequantizes the whole packed "
               "matrix. Row r + 1 re-reads a tile one whole matrix after row r (blockIdx.z is "
               "the slowest index): the re-reads come from the L2 at its measured rate where "
               "one launch's matrix fits the footprint the L2 was measured to keep (the "
               "catalog's l2_cache), else from DRAM at the batch-1 share (time.py "
               "row_rereads). README: 'GEMV (quantized): 20% faster than GEMM, only batch "
               "size 1 (not good for large context)'; its batch-8 GEMV rows carry the "
               "legend's red mark, 'for avoid using'. Its issue: AWQ_GEMV_ISSUE_PER_WEIGHT "
               "instructions per weight per row (its SASS), timed by time.py gemv_issue_s"),
    QuantKernel(
        name="cutlass-fp8-scaled-mm", engine="vllm", formats=("fp8", "fp8-channel"),
        archs=("Hopper",), constant="gemv_bw_fp8_tensorcore",
        source="vLLM's FP8 linear (Fp8LinearOp: cutlass_scaled_mm where cutlass_fp8_supported, "
               "compute capability >= 8.9) quantizes the activation and runs CUTLASS's sm90 FP8 "
               "GEMM with the scales in its epilogue, at every M. Its share: the same kernel's "
               "H100 benchmark at one row (gemv_bw_fp8_tensorcore: vllm pull request #49363)"),
    QuantKernel(
        name="sgl-kernel-fp8-scaled-mm", engine="sglang", formats=("fp8", "fp8-channel"),
        archs=("Hopper",), constant="gemv_bw_fp8_tensorcore",
        source="SGLang python/sglang/srt/layers/quantization/fp8_utils.py apply_fp8_linear "
               "(read from the offline index; commit not recorded): with cutlass_fp8_supported "
               "it quantizes the activation (static_quant_fp8, or per_token_group_quant_fp8 "
               "with one group per row) and calls sgl-kernel's fp8_scaled_mm, a CUTLASS W8A8 "
               "FP8 GEMM ('cutlass w8a8 fp8 sgl-kernel only supports per-channel scale': a "
               "per-tensor scale repeated per channel). Its share is vLLM's CUTLASS kernel's "
               "(gemv_bw_fp8_tensorcore), an assumption: sgl-kernel's own small-M H100 figures "
               "were not found"),
    QuantKernel(
        name="cublaslt-fp8", engine="trt-llm", formats=("fp8",),
        archs=("Hopper",), constant="gemv_bw_fp8_tensorcore",
        source="NVIDIA/TensorRT-LLM@00bbf71e tensorrt_llm/_torch/modules/linear.py "
               "FP8QDQLinearMethod.apply (the PyTorch backend, TensorRT-LLM 1.0's default): the "
               "activation quantized per tensor (static_quantize_e4m3_per_tensor), then "
               "torch.ops.trtllm.cuda_scaled_mm (CUDA cores) where qinput.shape[0] <= 8 and "
               "module.enable_cuda_core -- set only for compute capability 8.9 -- else "
               "torch.ops.trtllm.cublas_scaled_mm, cuBLASLt's FP8 GEMM: on Hopper at every M. "
               "Its share is vLLM's CUTLASS FP8 kernel's (gemv_bw_fp8_tensorcore), an "
               "assumption: cuBLASLt's own small-M FP8 figures were not found. Not for the "
               "TensorRT engines of 2024 (TensorRT-LLM docs/source/blogs/"
               "quantization-in-TRT-LLM.md @2ee99e8: FP8 over FP16 1.51x at batch 1 and 1.40x "
               "at batch 8 on LLaMA-v2-7B, H100, 1024/128, which gpuplan reads at the 1-byte "
               "default 0.524 (1.45x / 1.37x) nearer than at this share (1.68x / 1.51x); "
               "tests/unit/test_quant_kernels.py)"),
)


def quant_kernel(engine: str, weight_format: str, architecture: str,
                 version: str | None = None) -> QuantKernel | None:
    """The kernel of :data:`QUANT_KERNELS` that ``engine`` (``auto``: its profile's name) runs
    ``weight_format``'s decode matmuls with on ``architecture`` for a checkpoint naming kernel
    ``version`` (None: ``gemm``, transformers' AwqConfig default); None: the width-based
    default."""
    name = get_engine(engine).name
    v = (version or "gemm").lower()
    return next((k for k in QUANT_KERNELS if k.engine == name and weight_format in k.formats
                 and architecture in k.archs and (not k.versions or v in k.versions)), None)


def gemv_bandwidth_fraction(weight_bytes: float, kernel: float = 0.0) -> float:
    """Share of the datasheet bandwidth at which a matmul's weight stream, at ``weight_bytes`` per
    element, is read (decode's GEMVs; dequantizing formats attain less): a quantized weight
    (below 1.5 B) at ``kernel``, the share of the job's kernel (:func:`quant_kernel`), when it is
    given (> 0). The same share at every M: :func:`~.time._bandwidth` takes the longer of the
    weights at this share and all the op's bytes at the streaming one, so a weight-bound GEMM's
    time never falls as its rows grow (issues 29/31). The 16-bit share is an end-to-end step's
    (gpt-fast's batch-1 decode: each kernel's ramp and tail and the gaps between kernels are in
    it), not one kernel's; DeepBench's cuBLAS GEMMs (NN) over 25-50 MB of weights at 16 rows read
    0.66-0.82 of V100's and 0.80-0.93 of T4's bandwidth, kernel alone
    (benchmarks/published/deepbench_gemm_fp16.json)."""
    if kernel > 0 and weight_bytes < 1.5:
        return kernel
    if weight_bytes >= 1.5:
        return constant("gemv_bw_16bit")
    if weight_bytes >= 0.75:
        return constant("gemv_bw_8bit")
    return constant("gemv_bw_4bit")


#: The generations whose 16-bit attention is FlashAttention-2's sm8x kernels (A100's shares, the
#: FlashAttention-2 paper's): Ampere (sm80, sm86) and Ada (sm89). PyTorch's SDPA runs its flash
#: backend on sm80 and newer (pytorch/pytorch@001f694a aten/src/ATen/native/transformers/cuda/
#: sdp_utils.cpp, check_flash_attention_hardware_support: "[sm80, sm121]"; "[sm80, sm90]" in the
#: 2.x releases of 2024), and FlashAttention-2 tiles sm86 and sm89 as one class
#: (Dao-AILab/flash-attention@01afd16d csrc/flash_attn/src/flash_fwd_launch_template.h,
#: run_mha_fwd_hdim128: ``is_sm8x = cc_major == 8 && cc_minor > 0``, "For sm86 or sm89, 64 x 64 is
#: the fastest for causal"), so Ada reads what sm86 (RTX 3090, A6000, A10) already reads. No Ada
#: measurement of the kernel is published; the share is Ampere's, over the card's fp32-accumulate
#: tensor peak (the one FlashAttention-2's MMAs run at).
FA2_SM8X = frozenset({"ampere", "ada lovelace"})

#: Training attention kernels of the FlashAttention v1 generation, timed at
#: ``attn_fa1_over_fa2`` of FlashAttention-2's share on Ampere (:func:`attention_fraction`), the
#: only generation the ratio was published for: name -> what runs. ``fa1``: flash-attn 1.x's CUDA
#: kernels, or the Triton port of them (HazyResearch flash-attention@eff9fe6b
#: flash_attn/flash_attn_triton.py, copied into llm-foundry as llmfoundry/models/layers/
#: flash_attn_triton.py: "Overall Triton forward + backward is slightly slower than CUDA forward
#: + backward", so FlashAttention v1's rate bounds the port's from above).
TRAIN_ATTENTION_KERNELS: Mapping[str, str] = MappingProxyType({
    "fa1": "FlashAttention v1 (flash-attn 1.x, or its Triton port: at most v1's rate)",
})


def attention_fraction(architecture: str, head_dim: int, seq: int, *, backward: bool,
                       cap: float, kernel: str = "") -> float:
    """Share of the dense peak a fused (Flash) attention kernel reaches, at most ``cap`` (the
    matmul fraction). ``kernel`` ``fa3-fp8``: FlashAttention-3's FP8 forward on Hopper (its
    share of the FP8 peak); ``fa3``: its 16-bit forward on Hopper (a serving engine's,
    :data:`gpuplan.engines.profiles.ATTENTION_16BIT`); ``fa1``: FlashAttention v1 on Ampere (:data:`TRAIN_ATTENTION_KERNELS`,
    ``attn_fa1_over_fa2`` of FlashAttention-2's share; ValueError on another generation, whose
    ratio is not published); "" the generation's 16-bit kernel."""
    arch = (architecture or "").lower()
    if kernel == "fa1" and arch not in FA2_SM8X:
        raise ValueError(f"attention kernel fa1 on {architecture!r}: FlashAttention v1's rate "
                         "is published against FlashAttention-2's on Ampere only")
    if kernel == "fa3-fp8" and arch == "hopper" and not backward:
        top = constant("attn_fwd_hopper_fa3_fp8")
    elif kernel == "fa3" and arch == "hopper" and not backward:
        top = constant("attn_fwd_hopper_fa3") if head_dim >= 128 else \
            constant("attn_fwd_hopper_fa3_d64")
    elif arch == "hopper" or arch == "blackwell":
        top = constant("attn_fwd_hopper_fa2")
    elif arch in FA2_SM8X:
        top = constant("attn_fwd_ampere_d128") if head_dim >= 128 else \
            constant("attn_fwd_ampere_d64")
    else:
        top = constant("attn_fwd_other")
    if backward:
        top *= constant("attn_bwd_over_fwd")
    if kernel == "fa1":
        top *= constant("attn_fa1_over_fa2")
    s = max(1, seq)
    return min(cap, top * s / (s + constant("attn_half_seq")))


#: FP8 attention kernels that run at a measured ratio of the 16-bit kernel's rate rather than at
#: a share of the FP8 peak: name -> (largest head dim, CONSTANTS entry), by head dim.
#: ``fa3-fp8-two-level``: vLLM's FlashAttention-3 fork with two-level FP32 accumulation of the
#: FP8 products (vllm-project/flash-attention#104, the default since vLLM #27889).
FP8_VS_16BIT_KERNELS: Mapping[str, tuple[tuple[int, str], ...]] = MappingProxyType({
    "fa3-fp8-two-level": ((128, "attn_fp8_two_level_vs_16bit_d128"),
                          (256, "attn_fp8_two_level_vs_16bit_d256")),
})


def fp8_attention_vs_16bit(kernel: str, head_dim: int) -> float:
    """The rate of FP8 attention ``kernel`` over the 16-bit kernel beside it at ``head_dim``
    (:data:`FP8_VS_16BIT_KERNELS`: the first band at or above it, the last above them all);
    0.0 where ``kernel`` is timed by its own share of the FP8 peak (``fa3-fp8``) or is 16-bit."""
    bands = FP8_VS_16BIT_KERNELS.get(kernel)
    if not bands:
        return 0.0
    name = next((c for top, c in bands if head_dim <= top), bands[-1][1])
    return constant(name)


#: Decode attention kernels timed by their own loop rather than the bandwidth alone: name ->
#: what runs. ``ft-mmha``: FasterTransformer's masked multi-head attention (its
#: ``single_query_attention``), which AutoAWQ's fused modules (``fuse_layers=True``) call for
#: every decode step (v0.1.6, 8110e028, awq/modules/fused/attn.py ``QuantAttentionFused.forward``:
#: ``seqlen == 1`` and ``ft_inference_engine`` installed); the only code that runs it, so the
#: name also stands for those modules' decode around it (compute/step.py
#: ``_decode_attention_ops``: the rotary inside the kernel, one fused QKV launch).
DECODE_ATTENTION_KERNELS: Mapping[str, str] = MappingProxyType({
    "ft-mmha": "FasterTransformer v5.2.1 masked multi-head attention, as AutoAWQ v0.1.6 builds it "
               "(awq_cuda/attention/decoder_masked_multihead_attention.cu and _template.hpp)",
})

#: FT's kernel specializes its head dimension to the next of these (``Dh_MAX``:
#: decoder_masked_multihead_attention.cu ``multihead_attention_``: 48 -> 64, 80/96/112 -> 128,
#: 160/192/224 -> 256).
_MMHA_DH_MAX = (32, 64, 128, 256)


def single_query_attention_trips(head_dim: int, keys: int) -> int:
    """Dependent memory round trips one thread block of FT's masked multi-head attention makes
    for one (head, sequence) at ``keys`` cached timesteps (its ``timestep``; AutoAWQ v0.1.6
    awq_cuda/attention/decoder_masked_multihead_attention.cu and its _template.hpp).

    The launcher picks by the timestep: below 32, 4 threads per key and 64 threads a block;
    below 2,048, 2 and 128; from there 1 and 256 (``mmha_launch_kernel``). The key loop
    (``for ti ...; ti += K_PER_ITER``) covers ``threads / threads_per_key`` keys an iteration,
    each thread's loads for its key issued together (an unrolled inner loop) and then reduced
    across the key's threads (``Qk_dot``, shuffles) before the next iteration; the value loop
    covers ``threads / (Dh_MAX x 2 B / 16 B)`` timesteps an iteration, one 16-byte load a
    thread, each folded into the running sum (``out = fma(logit, v, out)``). Neither loop carries
    an unroll pragma, so each iteration is taken to wait one full memory latency (an assumption
    of this model: nvcc's own unrolling of the value loop was not checked, which would overlap
    some of its loads). Two round trips more: the new token's Q and K loads before the key loop,
    its V load after the value loop. The softmax between the loops reads shared memory only and
    is not counted."""
    t = max(1, keys)
    dh_max = next((d for d in _MMHA_DH_MAX if d >= head_dim), _MMHA_DH_MAX[-1])
    per_key, threads = (4, 64) if t < 32 else (2, 128) if t < 2048 else (1, 256)
    per_value = dh_max * 2 // 16  # THREADS_PER_VALUE: 16 B of fp16 each
    k_iters = math.ceil(t / (threads // per_key))
    v_iters = math.ceil(t / max(1, threads // per_value))
    return k_iters + v_iters + 2


def single_query_attention_s(blocks: int, head_dim: int, keys: int, *, sm_count: int,
                             max_threads_per_sm: int, latency_s: float) -> float:
    """Seconds FT's masked multi-head attention takes by its loop: the round trips of one block
    (:func:`single_query_attention_trips`) x the device's memory latency (``latency_s``, the
    catalog's ``memory_latency``), once per wave of its grid of ``blocks`` = heads x sequences
    (``dim3 grid(params.num_heads, params.batch_size)``) over the SMs, as many blocks resident
    per SM as its threads allow (shared memory and registers, which may allow fewer, not
    counted). 0 where the latency is not on record: the bandwidth term alone times it. This is a
    floor under the kernel's bandwidth time, not an addition to it: a batch whose blocks
    together stream more than the bandwidth allows is bandwidth-bound."""
    if latency_s <= 0 or sm_count <= 0 or blocks <= 0:
        return 0.0
    t = max(1, keys)
    threads = 64 if t < 32 else 128 if t < 2048 else 256
    per_sm = max(1, max_threads_per_sm // threads) if max_threads_per_sm > 0 else 1
    waves = math.ceil(blocks / (sm_count * per_sm))
    return waves * single_query_attention_trips(head_dim, keys) * latency_s


#: How an optimizer step runs: one pass of fused multi-tensor kernels (``AdamW(fused=True)``, apex
#: FusedAdam), several multi-tensor passes (``foreach``: torch's default for CUDA tensors), or one
#: kernel per tensor and pass issued from a Python loop (``for-loop``: torch's default on a CPU,
#: transformers' AdamW, a hand-written ``for p in params`` step).
OPTIMIZER_IMPLS = ("foreach", "fused", "for-loop")


@record
class OptimizerCost:
    """What one optimizer step moves and launches, per trainable element and per tensor."""

    impl: str
    """The implementation that runs (Adafactor and 8-bit optimizers have their own)."""
    param_accesses: float
    """Reads + writes of each updated element (the master copy when there is one)."""
    grad_reads: float
    state_accesses: float
    """Reads + writes of each element of each full-size state."""
    scratch_accesses: float = 0.0
    """Reads + writes of full-size fp32 temporaries (Adafactor's update)."""
    kernels: int
    python_loop: bool
    """Each kernel is its own Python-level call (host time ``eager_host_op_s`` each)."""


def multi_tensor_launches(tensors: int, elements: int) -> int:
    """Launches of one multi-tensor pass over ``tensors`` tensors of ``elements`` in all: torch's
    ``_foreach`` / apex chunking caps both per launch (:data:`CONSTANTS`
    ``multi_tensor_max_tensors``, ``multi_tensor_max_elements``)."""
    return max(1, math.ceil(tensors / constant("multi_tensor_max_tensors")),
               math.ceil(elements / constant("multi_tensor_max_elements")))


def optimizer_cost(kind: str, states: int, impl: str, *, tensors: int,
                   elements: int, name: str = "") -> OptimizerCost:
    """The traffic and launches of one step of an optimizer of ``kind`` (``plain``, ``factored``,
    ``8bit``) with ``states`` full-size states over ``tensors`` tensors of ``elements`` in all.

    Adam and AdamW follow torch's code (:data:`CONSTANTS` ``opt_*``); transformers' Adafactor is a
    Python loop whatever ``impl`` says; bitsandbytes' 8-bit optimizers run one fused blockwise
    kernel per tensor from a Python loop; LAMB (``name``) runs apex FusedLAMB's five multi-tensor
    passes whatever ``impl`` says (torch has no LAMB). Other optimizers are given one pass of traffic and one
    kernel per state plus the update (their unfused sequences are not modeled)."""
    if impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"optimizer implementation {impl!r}")
    tensors = max(1, tensors)
    groups = multi_tensor_launches(tensors, elements)
    one_pass = dict(param_accesses=constant("opt_fused_param_accesses"), grad_reads=1.0,
                    state_accesses=2.0)
    if kind == "factored":
        return OptimizerCost(impl="for-loop", param_accesses=constant("adafactor_param_accesses"),
                             grad_reads=constant("adafactor_grad_reads"), state_accesses=2.0,
                             scratch_accesses=constant("adafactor_scratch_accesses"),
                             kernels=int(constant("adafactor_kernels")) * tensors,
                             python_loop=True)
    if kind == "8bit":
        return OptimizerCost(impl="for-loop", kernels=tensors, python_loop=True, **one_pass)
    if name == "lamb":
        return OptimizerCost(impl="fused", param_accesses=constant("lamb_param_accesses"),
                             grad_reads=constant("lamb_grad_reads"), state_accesses=2.0,
                             scratch_accesses=constant("lamb_scratch_accesses"),
                             kernels=int(constant("lamb_kernels")) * groups, python_loop=False)
    if impl == "fused":
        return OptimizerCost(impl=impl, kernels=groups, python_loop=False, **one_pass)
    adam = states == 2
    passes = int(constant("opt_unfused_kernels")) if adam else states + 1
    traffic = dict(param_accesses=constant("opt_unfused_param_accesses"),
                   grad_reads=constant("opt_unfused_grad_reads"),
                   state_accesses=constant("opt_unfused_state_accesses")) if adam else one_pass
    loop = impl == "for-loop"
    return OptimizerCost(impl=impl, kernels=passes * (tensors if loop else groups),
                         python_loop=loop, **traffic)


#: How the gradients' global norm is clipped: ``foreach`` (torch >= 2.0's clip_grad_norm_ on CUDA:
#: _foreach_norm, then _foreach_mul_ -- multi-tensor launches, no host read), ``per-tensor``
#: (torch 1.5-1.13: a norm and a mul per tensor from a Python loop, no host read),
#: ``per-tensor-sync`` (torch <= 1.4, whose loop read each tensor's norm with .item() -- pytorch
#: issue #31474 -- and BertAdam, which clips each parameter with it inside its update loop),
#: ``multi-tensor-sync`` (apex multi_tensor_l2norm, one .item(), multi_tensor_scale: NVIDIA DLE
#: BERT's GradientClipper, Megatron's clip_grad_norm_fp32).
GRAD_CLIP_IMPLS = ("foreach", "per-tensor", "per-tensor-sync", "multi-tensor-sync")


@record
class GradClipCost:
    """What one clip of the gradients' global norm moves, launches and waits for."""

    impl: str
    accesses: float
    """Reads + writes of each gradient element."""
    kernels: int
    python_loop: bool
    """Each kernel is its own Python-level call (host time ``eager_host_op_s`` each)."""
    host_reads: int
    """Host reads of a device scalar (.item()): the host waits for the device at each."""


def grad_clip_cost(impl: str, *, tensors: int, elements: int) -> GradClipCost:
    """The passes of one gradient clip (:data:`GRAD_CLIP_IMPLS`) over ``tensors`` gradient tensors
    of ``elements`` in all (:data:`CONSTANTS` ``clip_grad_*``)."""
    if impl not in GRAD_CLIP_IMPLS:
        raise ValueError(f"gradient clipping implementation {impl!r}")
    tensors = max(1, tensors)
    acc, total = constant("clip_grad_accesses"), int(constant("clip_grad_total_kernels"))
    if impl in ("foreach", "multi-tensor-sync"):
        launches = 2 * multi_tensor_launches(tensors, elements)
        return GradClipCost(impl=impl, accesses=acc, kernels=launches + total, python_loop=False,
                            host_reads=1 if impl == "multi-tensor-sync" else 0)
    return GradClipCost(impl=impl, accesses=acc, kernels=2 * tensors + total, python_loop=True,
                        host_reads=tensors if impl == "per-tensor-sync" else 0)


@record
class RuntimeOverheads:
    """What a runtime costs per launched kernel, on the host and on the device."""

    runtime: str
    host_fwd_s: float
    """Host time per forward (or optimizer) kernel: Python dispatch in eager."""
    host_bwd_s: float
    """Host time per backward kernel (autograd's C++ engine in eager)."""
    host_fixed_s: float
    """Host time per step independent of the kernels (a graph replay)."""
    device_gap_s: float
    """Device idle time between back-to-back kernels."""
    serial: bool = False
    """Host and device are the same processor (a CPU): the costs add instead of overlapping."""

    def to_dict(self) -> dict:
        return {"runtime": self.runtime, "host_fwd_s": self.host_fwd_s,
                "host_bwd_s": self.host_bwd_s, "host_fixed_s": self.host_fixed_s,
                "device_gap_s": self.device_gap_s, "serial": self.serial}


def runtime_overheads(runtime: str, *, eager_host_s: float | None = None) -> RuntimeOverheads:
    """The per-kernel costs of ``runtime`` (eager, compile, cudagraphs). ``eager_host_s`` replaces
    the eager forward host cost (this machine's measured back-to-back launch of a tiny op)."""
    if runtime == "eager":
        fwd = constant("eager_host_fwd_s") if eager_host_s is None else eager_host_s
        return RuntimeOverheads(runtime=runtime, host_fwd_s=fwd,
                                host_bwd_s=min(fwd, constant("eager_host_bwd_s")),
                                host_fixed_s=0.0, device_gap_s=constant("stream_gap_s"))
    if runtime == "compile":
        c = constant("compile_host_s")
        return RuntimeOverheads(runtime=runtime, host_fwd_s=c, host_bwd_s=c, host_fixed_s=0.0,
                                device_gap_s=constant("stream_gap_s"))
    if runtime == "cudagraphs":
        return RuntimeOverheads(runtime=runtime, host_fwd_s=0.0, host_bwd_s=0.0,
                                host_fixed_s=constant("graph_replay_s"),
                                device_gap_s=constant("graph_gap_s"))
    raise ValueError(f"runtime {runtime!r}")


#: What ``runtime="auto"`` means, per mode, under engine auto: what a plain training loop and
#: transformers' ``generate`` do by default (no torch.compile, no CUDA graphs: eager PyTorch).
DEFAULT_RUNTIME: Mapping[str, str] = get_engine("auto").runtime


def resolve_runtime(runtime: str, mode: str, engine: str = "auto") -> str:
    """``runtime`` itself, or for ``auto`` the engine's runtime for ``mode``
    (:func:`gpuplan.engines.profiles.runtime_of`)."""
    return runtime_of(runtime, mode, engine)


_NORMS = ("attn.norm", "mlp.norm", "final.norm")


def eager_chains(ops: tuple[Op, ...], *, norm: str, runtime: str,
                 autocast: bool, gated: bool = False, act_bytes: int = 2,
                 model_code: str = "transformers") -> tuple[Op, ...]:
    """Forward ops as ``runtime`` runs them: in eager, the elementwise chains torch.compile (and
    hand-fused kernels) run as one kernel are separate kernels with intermediates in memory
    (RMSNorm, rotary embedding -- transformers', torchtune's or IBM FMS's, by ``model_code`` --
    a ``gated`` MLP's activation times the up projection); under CUDA autocast softmax and layer
    norm run in fp32. ``act_bytes``: the activations' width (an fp32 input makes the casts no-ops)."""
    out = []
    for op in ops:
        if runtime == "eager" and op.name == "attn.rotary" and model_code == "torchtune":
            fp32 = act_bytes >= 4
            kernels = int(constant("eager_rotary_torchtune_kernels")) - (2 if fp32 else 0)
            op = replace(op, kernels=2 * kernels, bytes=op.bytes * constant(
                "eager_rotary_torchtune_bytes_fp32" if fp32 else "eager_rotary_torchtune_bytes"))
        elif runtime == "eager" and op.name == "attn.rotary" and model_code == "fms":
            fp32 = act_bytes >= 4
            kernels = int(constant("eager_rotary_fms_kernels")) - (2 if fp32 else 0)
            op = replace(op, kernels=2 * kernels, bytes=op.bytes * constant(
                "eager_rotary_fms_bytes_fp32" if fp32 else "eager_rotary_fms_bytes"))
        elif runtime == "eager" and op.name in _NORMS and norm == "rmsnorm":
            fp32 = act_bytes >= 4
            kernels = int(constant("eager_rmsnorm_kernels")) - (2 if fp32 else 0)
            op = replace(op, kernels=kernels, bytes=op.bytes * constant(
                "eager_rmsnorm_bytes_fp32" if fp32 else "eager_rmsnorm_bytes"))
        elif runtime == "eager" and op.name == "attn.rotary":
            op = replace(op, kernels=2 * int(constant("eager_rotary_kernels")),
                         bytes=op.bytes * constant("eager_rotary_bytes"))
        elif runtime == "eager" and op.name == "mlp.act" and gated:
            op = replace(op, bytes=op.bytes * constant("eager_swiglu_bytes"))
        if autocast and (op.name == "attn.softmax" or (op.name in _NORMS and norm == "layernorm")):
            op = replace(op, bytes=op.bytes * constant("autocast_fp32_ops"))
        out.append(op)
    return tuple(out)


_RESIDUALS = Path(__file__).resolve().parent / "speed_residuals.json"


@cache
def speed_residuals() -> Mapping[str, object]:
    """p10 and p90 of predicted / measured over the calibrate split of the published runs, with the
    command that wrote them (``benchmarks/validate_speed.py --write``)."""
    return MappingProxyType(json.loads(_RESIDUALS.read_text()))


def speed_range(rate: float) -> tuple[float, float]:
    """The range a measured rate falls in given the prediction ``rate``: rate / p90 .. rate / p10
    of the validation residuals (the prediction is p10-p90 times the measured rate)."""
    r = speed_residuals()
    return rate / float(r["p90_ratio"]), rate / float(r["p10_ratio"])
