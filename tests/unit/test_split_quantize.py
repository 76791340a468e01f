"""Transformer Engine's GroupedLinear quantizes its input (forward) and its output gradient
(backward) split by split, one split per local expert (cast.cpp ``split_quantize`` ->
``multi_tensor_quantize_impl``): current scaling launches four kernels a split (zero the amax,
amax, scale, cast), MXFP8 / blocks / NVFP4 one, delayed scaling one fused kernel for them all. These tests
count the launches that adds to a micro-batch by hand for Qwen3-30B-A3B (48 MoE layers, 128
experts) and check that nothing else moves; and the experts' row padding to the quantized
GEMM's alignment that Megatron-Core's TEGroupedMLP runs around them (Fp8Padding)."""

from __future__ import annotations

import pytest

from gpuplan.compute.efficiency import constant
from gpuplan.compute.flops import StepShape, build_forward_ops, run_form
from gpuplan.compute.step import _expert_padding_op, _split_quantize_op
from gpuplan.fp8 import NARROW_RECIPES
from gpuplan.models import load_model

ARCH = load_model("qwen3-30b-a3b").architecture


def _fwd(engine: str, ep: int, gpu_arch: str = "Blackwell"):
    shape = StepShape(batch=1, q_len=4096, kv_len=4096, train=True)
    return build_forward_ops(ARCH, shape, act_bytes=2, weight_bytes=1.0,
                             form=run_form(ARCH, engine, decode=False, ep=ep,
                                           gpu_arch=gpu_arch))


def test_the_architecture_is_the_one_counted():
    assert (ARCH.num_layers, ARCH.num_experts) == (48, 128)


def test_mxfp8_adds_one_launch_per_local_expert_beyond_the_counted_cast():
    # EP 8: 128 / 8 = 16 local experts; two grouped linears (fc1, fc2) a layer, 48 layers, two
    # casts each (input forward, output gradient backward), 16 launches a cast of which one is
    # already _quantize_op's: 2 x 48 x 2 x (16 - 1) = 2880
    op = _split_quantize_op(_fwd("megatron", 8), NARROW_RECIPES["mxfp8"])
    assert op.kernels == 2 * 48 * 2 * 15 == 2880
    assert op.bytes == 0.0 and op.flops == 0.0  # the casts' bytes are _quantize_op's
    assert op.host_s == constant("eager_host_bwd_s") == 4e-6  # launched from TE's C++ loop


def test_current_scaling_launches_four_kernels_a_split():
    # zero the amax, amax, scale from amax, cast for each of the 16 splits (launch_amax_kernel
    # launches zero_amax_kernel before amax_kernel): 64 a cast, 63 beyond the counted one
    op = _split_quantize_op(_fwd("megatron", 8, "Hopper"), NARROW_RECIPES["fp8-current"])
    assert op.kernels == 2 * 48 * 2 * (4 * 16 - 1) == 12096


def test_fewer_local_experts_fewer_launches():
    # EP 32: 4 local experts -> 2 x 48 x 2 x 3
    op = _split_quantize_op(_fwd("megatron", 32), NARROW_RECIPES["mxfp8"])
    assert op.kernels == 2 * 48 * 2 * 3 == 576


@pytest.mark.parametrize("engine,recipe", [
    ("megatron", "fp8-delayed"),   # one fused multi_cast_transpose for every split
    ("torchtitan", "mxfp8"),       # torch's grouped GEMM: one launch, one cast
    ("torchtitan", "fp8-tensorwise"),  # torchao: no split quantize at all
])
def test_no_split_launches_where_one_kernel_quantizes_every_split(engine, recipe):
    assert _split_quantize_op(_fwd(engine, 8), NARROW_RECIPES[recipe]) is None


def test_a_dense_model_has_no_split_quantize():
    arch = load_model("llama-3.1-8b").architecture
    shape = StepShape(batch=1, q_len=4096, kv_len=4096, train=True)
    fwd = build_forward_ops(arch, shape, act_bytes=2, weight_bytes=1.0,
                            form=run_form(arch, "megatron", decode=False, gpu_arch="Blackwell"))
    assert _split_quantize_op(fwd, NARROW_RECIPES["mxfp8"]) is None


# -- the experts' row padding (Fp8Padding / Fp8Unpadding around TEGroupedMLP) ------------------

def _fwd_cf(cf: float | None, gpu_arch: str = "Blackwell"):
    shape = StepShape(batch=1, q_len=4096, kv_len=4096, train=True)
    return build_forward_ops(ARCH, shape, act_bytes=2, weight_bytes=1.0,
                             form=run_form(ARCH, "megatron", decode=False, ep=8,
                                           gpu_arch=gpu_arch, capacity_factor=cf))


def test_dropless_experts_pad_and_unpad_their_rows_both_ways():
    # 32768 rows of 2048 (2 B): pad the tokens and unpad the output (read + write each: 4 R h),
    # pad the probabilities (2 R), in the forward and again in the backward: per layer
    # 2 x (4 x 32768 x 2048 + 2 x 32768) x 2 B = 1,074,003,968 B; 48 layers; 3 launches a pass
    op = _expert_padding_op(_fwd("megatron", 8), NARROW_RECIPES["mxfp8"], 2, None)
    assert op.bytes == 48 * 2 * (4 * 32768 * 2048 + 2 * 32768) * 2 == 51_552_190_464
    assert op.kernels == 48 * 6 and op.count == 1


def test_a_capacity_already_aligned_pads_nothing():
    # capacity factor 1.0: ceil(4096 x 8 / 128) = 256 rows from each of 8 ranks = 2048 an
    # expert, a multiple of MXFP8's 32: Fp8Padding returns its input
    assert _expert_padding_op(_fwd_cf(1.0), NARROW_RECIPES["mxfp8"], 2, 1.0) is None


def test_the_alignment_is_the_recipes():
    # capacity factor 1.1: ceil(281.6) = 282 x 8 = 2256 rows an expert: 2256 % 32 = 16 (MXFP8
    # pads), 2256 % 16 = 0 (FP8 current scaling does not)
    assert _expert_padding_op(_fwd_cf(1.1), NARROW_RECIPES["mxfp8"], 2, 1.1) is not None
    assert _expert_padding_op(_fwd_cf(1.1, "Hopper"), NARROW_RECIPES["fp8-current"], 2,
                              1.1) is None


def test_torchao_and_one_kernel_grouped_gemms_pad_nothing():
    assert _expert_padding_op(_fwd("torchtitan", 8), NARROW_RECIPES["mxfp8"], 2, None) is None
    assert _expert_padding_op(_fwd("megatron", 8), NARROW_RECIPES["fp8-tensorwise"], 2,
                              None) is None


def test_hybridep_pads_inside_its_dispatch():
    # _HybridEPManager.dispatch passes pad_multiple, so TEGroupedMLP's Fp8Padding finds every
    # split aligned: no padding op, the split quantize launches stay
    from dataclasses import replace
    from gpuplan.compute.step import StepSpec, _cast_ops
    from gpuplan.job import Job
    job = Job(model="qwen3-30b-a3b", mode="train", engine="megatron", gpus=8, ep=8)
    spec = StepSpec.of(job, mode="train", seq=4096, new_tokens=1, trainable=None)
    fwd = _fwd("megatron", 8)
    names = [o.name for o in _cast_ops(fwd, NARROW_RECIPES["mxfp8"], 2, spec)]
    assert names == ["fp8.quantize", "fp8.split_quantize", "fp8.expert_padding"]
    hyb = replace(spec, moe_dispatcher="hybridep")
    names = [o.name for o in _cast_ops(fwd, NARROW_RECIPES["mxfp8"], 2, hyb)]
    assert names == ["fp8.quantize", "fp8.split_quantize"]
