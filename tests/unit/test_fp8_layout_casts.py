"""What a narrow recipe's casts cost under a TP/PP layout (compute/parallel.py): the weight casts
once per step, not once per micro-batch (Transformer Engine's ``is_first_microbatch``), and the
per-GEMM amax all-reduces of current scaling under sequence parallelism -- hand-computed from
NCCL's LL latency (hardware/topology.py) and the layer's four TP GEMMs."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.parallel import amax_reduces_per_layer, micro_costs
from gpuplan.compute.step import train_precision
from gpuplan.fp8 import (NARROW_RECIPES, columnwise_bytes_per_element, fp8_weight_bytes,
                         gathers_rowwise_only)
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")
MODEL = load_model("llama-3.1-8b")  # 32 layers


def _layout(**kw):
    base = dict(model="llama-3.1-8b", mode="train", engine="megatron", precision="fp8-current",
                gpus=8, tp=4, batch=1, seq=4096, grad_accum=4, sequence_parallel=True)
    job = Job(**{**base, **kw})
    return estimate_speed(MODEL, H100, job, measured=None, link="nvlink").layout


@pytest.mark.parametrize("checkpointing, per_layer", [("none", 4), ("full", 6)])
def test_current_scaling_reduces_four_amaxes_a_layer_over_tp(checkpointing, per_layer):
    """TE all-reduces (MAX) the amax of QKV's and fc1's inputs in the forward and of the
    attention projection's and fc2's output gradients in the backward over the TP group, each
    a 4-byte LL ring all-reduce: 6.6 us + 2 (4 - 1) x 0.6 us NVLink hops = 10.2 us; a full
    recompute quantizes the two inputs again. Delayed scaling (the same TP traffic otherwise)
    reduces none of them per GEMM, only its one autocast region's amaxes twice a micro-batch
    (1.5 and 1 KB: LL's bandwidth adds ~0.01 us to the 10.2)."""
    cur = _layout(checkpointing=checkpointing)
    delayed = _layout(checkpointing=checkpointing, precision="fp8-delayed")
    one = 6.6e-6 + 6 * 0.6e-6  # the 4 bytes' share of LL's bandwidth is ~1e-11 s
    want = 4 * (32 * per_layer - 2) * one  # micro-batches x (layers x reductions - regions)
    assert cur.tp_comm_s - delayed.tp_comm_s == pytest.approx(want, rel=1e-4)


def test_no_amax_reduction_without_sequence_parallelism_or_tp():
    """Without sequence parallelism nothing is gathered before a GEMM, so current scaling's
    quantizers get no amax reduction group; delayed scaling still reduces its region's amaxes
    over TP at the forward's exit and in the backward (2 x 10.2 us a micro-batch, 4 of them);
    at TP 1 there is no group for either."""
    cur, delayed = _layout(sequence_parallel=False), _layout(precision="fp8-delayed",
                                                             sequence_parallel=False)
    assert delayed.tp_comm_s - cur.tp_comm_s == pytest.approx(4 * 2 * 10.2e-6, rel=2e-3)
    kw = dict(tp=1, pp=2, sequence_parallel=False)
    cur, delayed = _layout(**kw), _layout(precision="fp8-delayed", **kw)
    assert cur.tp_comm_s == pytest.approx(delayed.tp_comm_s, rel=1e-12)


@pytest.mark.parametrize("precision, want", [("fp8-current", 4.0), ("nvfp4", 4.0),
                                             ("fp8-delayed", 0.0), ("mxfp8", 0.0),
                                             ("fp8-blockwise", 0.0), ("mixed-bf16", 0.0)])
def test_which_recipes_reduce_amax_per_gemm(precision, want):
    """Per-tensor current scaling and NVFP4's per-tensor second-level scale reduce per GEMM;
    delayed scaling takes past amaxes and block / MX scales their own block's."""
    gpu = get_gpu("B200-SXM-180GB") if precision in ("mxfp8", "nvfp4") else H100
    dev = device_from_gpu(gpu)
    prec = train_precision(precision, dev, False)
    cost = micro_costs(MODEL.architecture, dev, default_efficiency(dev), prec, tp=2, cp=1,
                       batch=1, seq=2048, attention="sdpa", engine="megatron")["none"]
    assert cost.amax_reduces == pytest.approx(want)
    assert amax_reduces_per_layer([], 32, prec) == 0.0


def test_weight_casts_once_per_step_not_per_micro_batch():
    """TE casts the weights in the first micro-batch only (is_first_microbatch, set once a step
    by Megatron-Core's forward_step): the stage's compute is affine in the micro-batches, its
    intercept the casts -- one pass over the rank's narrow weights (read 2 B, amax read 2 B,
    write 1 B and the Hopper transpose 1 B: 6 B an element) at the memory rate; none in BF16."""
    arch = MODEL.architecture
    lin = arch.num_layers * (arch.hidden_size * (arch.num_heads + 2 * arch.num_kv_heads)
                             * arch.head_dim + arch.num_heads * arch.head_dim * arch.hidden_size
                             + 3 * arch.hidden_size * arch.intermediate_size)
    est = estimate_speed(MODEL, H100, Job(model="llama-3.1-8b", mode="train", engine="megatron",
                                          precision="fp8-current", gpus=8, tp=4, batch=1,
                                          seq=4096, grad_accum=4, sequence_parallel=True),
                         measured=None, link="nvlink")
    c4 = est.layout.compute_s
    c8 = _layout(grad_accum=8).compute_s
    t_mb = (c8 - c4) / 4
    casts = c4 - 4 * t_mb
    rate = H100.memory_bandwidth * est.efficiency.memory
    assert casts == pytest.approx(lin / 4 * 6 / rate, rel=0.05)
    b4, b8 = (_layout(precision="mixed-bf16", grad_accum=g).compute_s for g in (4, 8))
    assert b4 - 4 * (b8 - b4) / 4 == pytest.approx(0.0, abs=1e-9)


def test_torchao_casts_its_weights_in_every_micro_batch():
    """torchao's Float8Linear keeps no narrow weight (caches_weight False): it casts in every
    forward and again in the backward, so its casts stay in the micro-batch and the compute is
    proportional to the micro-batches, with no per-step intercept."""
    def compute(ga):
        job = Job(model="llama-3.1-8b", mode="train", engine="torchtitan",
                  precision="fp8-tensorwise", gpus=8, tp=4, batch=1, seq=4096, grad_accum=ga)
        return estimate_speed(MODEL, H100, job, measured=None, link="nvlink").layout.compute_s
    c4, c8 = compute(4), compute(8)
    assert c8 == pytest.approx(2 * c4, rel=1e-9)


@pytest.mark.parametrize("recipe, arch, want", [
    ("fp8-delayed", "Hopper", 1.0), ("fp8-current", "Hopper", 1.0),
    ("fp8-current", "Blackwell", 0.0), ("fp8-blockwise", "Hopper", 1.0 + 4 / 128),
    ("fp8-blockwise", "Blackwell", 1.0 + 4 / 128), ("fp8-delayed", "Blackwell", 0.0),
    ("mxfp8", "Blackwell", 1.0 + 1 / 32), ("nvfp4", "Blackwell", 0.5 + 1 / 16),
    ("fp8-tensorwise", "Hopper", 0.0)])
def test_the_columnwise_copy_of_an_activation(recipe, arch, want):
    """Hopper's FP8 GEMM is TN-only: TE's cast_transpose writes a transposed FP8 copy (1 byte,
    plus a 1 x 128 block's fp32 scale share for blockwise); Blackwell's per-tensor FP8 needs none;
    MX and NVFP4 write a columnwise copy everywhere, with its own scales (an e8m0 byte per 32
    values down a column for MX, an e4m3 byte per 16 for NVFP4: TE v2.9 quantizer.cpp
    get_scale_shape); torchao none."""
    assert columnwise_bytes_per_element(NARROW_RECIPES[recipe], arch) == pytest.approx(want)
    assert gathers_rowwise_only(NARROW_RECIPES[recipe]) == (recipe in ("fp8-delayed",
                                                                       "fp8-current"))


@pytest.mark.parametrize("precision, tensors, saved", [("fp8-delayed", 2, 4 - (3 / 4 + 2)),
                                                       ("fp8-current", 4, 6 - (5 / 4 + 2))])
def test_sequence_parallelism_quantizes_the_gathered_tensors_on_the_shard(precision, tensors,
                                                                          saved):
    """Under SP the gathered tensors of a layer (QKV's and fc1's inputs, the attention
    projection's and fc2's output gradients: T x H elements each at T = 4096, H = 4096) are
    quantized rowwise on the 1/4 shard and transposed after the gather (2 B an element) instead
    of cast and transposed whole: delayed 3 + 1 -> 3/4 + 2 bytes an element, current (its amax
    pass) 5 + 1 -> 5/4 + 2; at the quantize kernel's memory rate, 32 layers, 4 micro-batches.
    Under delayed scaling QKV's and fc1's inputs are the fused norm's own FP8 output (no cast
    to move onto the shard, the transpose after the gather either way), so 2 tensors move, not
    4."""
    on, off = _layout(precision=precision), _layout(precision=precision, sequence_parallel=False)
    eff = estimate_speed(MODEL, H100, Job(model="llama-3.1-8b", mode="train", precision=precision,
                                          engine="megatron"), measured=None).efficiency
    rate = H100.memory_bandwidth * eff.memory
    want = tensors * 32 * 4 * 4096 * 4096 * saved / rate
    assert off.compute_s - on.compute_s == pytest.approx(want, rel=0.02)


def test_delayed_scaling_reduces_once_a_region_over_tp_and_cp():
    """Megatron-Core opens one fp8_autocast region per model chunk; TE reduces the region's
    amaxes at its forward's exit and once in its backward over TP x CP (core_r0.8.0's group):
    TP 2 x CP 2 = 4 NVLink ranks, 10.2 us each (as above), interleaved:2 (2 chunks a stage),
    4 micro-batches: 4 x 2 x 2 reductions. Current scaling without sequence parallelism has no
    per-GEMM reduction, so the difference is delayed's alone."""
    kw = dict(tp=2, cp=2, pp=2, pp_schedule="interleaved:2", sequence_parallel=False)
    cur, delayed = _layout(**kw), _layout(precision="fp8-delayed", **kw)
    assert delayed.tp_comm_s - cur.tp_comm_s == pytest.approx(4 * 2 * 2 * 10.2e-6, rel=2e-3)


# The blocks' linear weights of Llama 3.1 8B, 7 per layer: 32 x (4096 x 6144 + 4096^2 +
# 3 x 4096 x 14336).
_LLAMA8B_LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)


@pytest.mark.parametrize("recipe, gpu, per", [
    ("fp8-current", "H100-SXM-80GB", 2 + 2 + 1 + 1),   # read, amax read, rowwise, transpose
    ("fp8-current", "B200-SXM-180GB", 2 + 2 + 1),      # sm_100 takes any layout: no transpose
    ("fp8-delayed", "H100-SXM-80GB", 2 + 1 + 1),
    ("fp8-delayed", "B200-SXM-180GB", 2 + 1),
    ("fp8-blockwise", "H100-SXM-80GB", 2 + 2 * (1 + 4 / (128 * 128))),
    ("fp8-blockwise", "B200-SXM-180GB", 2 + 2 * (1 + 4 / (128 * 128))),
    ("mxfp8", "B200-SXM-180GB", 2 + 2 * (1 + 1 / 32)),
    ("nvfp4", "B200-SXM-180GB", 2 + 2 + 2 * (0.5 + 1 / 16))])  # global amax, two FP4 copies
def test_the_weight_cast_writes_the_copies_te_keeps(recipe, gpu, per):
    """One cast of each cached weight per step (TE's first micro-batch) moves the 16-bit read,
    the amax pass where the scale is the current tensor's, and the copies the quantizer keeps:
    module/linear.py sets the weight quantizer to rowwise + columnwise usage in training, and
    quantizer.cpp (TE @70f53666 / @5671fd36) allocates a per-tensor FP8 transpose only where
    nvte_is_non_tn_fp8_gemm_supported() is false (compute capability 9.0 here, 10.0 for B200),
    an FP8 block copy (fp32 scale per 128 x 128 block) down the columns everywhere, MXFP8's
    with an e8m0 byte per 32 values and NVFP4's 0.5-byte one with an e4m3 byte per 16."""
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=512, engine="megatron",
              precision=recipe, gpus=1, grad_accum=4)
    est = estimate_speed(MODEL, get_gpu(gpu), job, measured=None)
    casts = [t.op for t in est.step.ops if t.op.name == "fp8.weight_cast"]
    assert len(casts) == 1 and casts[0].count == 1
    assert casts[0].bytes == pytest.approx(_LLAMA8B_LINEAR * per, rel=1e-12)


def test_te_fp8_blocks_keep_a_columnwise_weight_copy_on_blackwell():
    """Float8BlockQuantizer::create_tensor allocates columnwise_data whenever the quantizer has
    columnwise usage, with no architecture test (TE @70f53666 quantizer.cpp), so a cached
    fp8-blockwise weight is two 1-byte copies with their fp32 128 x 128 block scales on B200 as
    on H100; per-tensor FP8 keeps one copy on B200."""
    n = 128 * 128 * 1000
    for arch in ("Hopper", "Blackwell"):
        kept, _, label = fp8_weight_bytes(NARROW_RECIPES["fp8-blockwise"], n, arch,
                                          param_gather=False)
        assert kept == 2 * (n + 4 * 1000) and "columnwise" in label
        assert columnwise_bytes_per_element(NARROW_RECIPES["fp8-blockwise"], arch) == \
            pytest.approx(1 + 4 / 128)
    assert fp8_weight_bytes(NARROW_RECIPES["fp8-current"], n, "Blackwell",
                            param_gather=False)[0] == n
