"""Delayed scaling's fused norm and cast (gpuplan.fp8.NarrowRecipe.fused_norm_cast): Transformer
Engine's LayerNormLinear normalizes straight into FP8 under DelayedScaling (TE v1.8
layernorm_linear.py ``rmsnorm_fwd_fp8``; at 000b637e normalization.cpp ``FULLY_FUSED`` for the
delayed Float8Quantizer only), so QKV's and fc1's inputs are never cast from 16 bits; on Hopper
the wgrad's transposed copy is made from the FP8 copy (``fp8_transpose``: 1 byte read, 1 written).
Every figure is counted by hand from Llama-3.1-8B's shapes: h = 4096, QKV out 6144 (32 + 2 x 8
heads of 128), MLP 14336 (gate_up 28672), 32 layers, T = 4096 tokens a micro-batch."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

MODEL = load_model("llama-3.1-8b")
T, H, L = 4096, 4096, 32
#: the four linears' inputs (K) and output gradients (N) per token and layer
INPUTS = H + 4096 + H + 14336          # qkv, attn out, gate_up, down
GRADS = 6144 + H + 28672 + H
NORM_FED = 2 * H                       # qkv's and gate_up's inputs


def _op(gpu: str, precision: str, name: str, checkpointing: str = "none") -> dict:
    job = Job(model="llama-3.1-8b", mode="train", engine="megatron", precision=precision,
              batch=1, seq=T, grad_accum=2, checkpointing=checkpointing)
    est = estimate_speed(MODEL, get_gpu(gpu), job, measured=None)
    return next(o for o in est.to_dict()["step"]["ops"] if o["name"] == name)


def test_hopper_delayed_casts_skip_the_norm_fed_inputs():
    """Unfused, each element costs cast 3 (read 2, write 1) + transpose 1 = 4 bytes; a norm-fed
    input instead saves the norm's 16-bit write (1 byte more than FP8's), the cast (3) and reads
    its FP8 copy back for the transpose (-1): 3 bytes less. The launch count is unchanged (the
    cast's launch becomes the transpose's): 2 per linear, 4 linears, 32 layers."""
    op = _op("H100-SXM-80GB", "fp8-delayed", "fp8.quantize")
    assert op["bytes"] == pytest.approx(L * T * (4 * (INPUTS + GRADS) - 3 * NORM_FED))
    assert op["kernels"] == 2 * 4 * L


def test_blackwell_delayed_casts_lose_the_norm_fed_cast_and_its_launch():
    """Blackwell takes either layout: no transposed copy, 3 bytes an unfused element; a norm-fed
    one saves the norm's wider write and the whole cast, 1 + 3 = 4 bytes, and its launch."""
    op = _op("B200-SXM-180GB", "fp8-delayed", "fp8.quantize")
    assert op["bytes"] == pytest.approx(L * T * (3 * (INPUTS + GRADS) - 4 * NORM_FED))
    assert op["kernels"] == 2 * 4 * L - 2 * L


def test_current_scaling_keeps_its_casts():
    """Current scaling's norm writes 16 bits and a quantize follows (FUSED_NORM_AMAX_FP8 at
    000b637e): every element pays read 2 + amax pass 2 + write 1 + transpose 1 = 6 bytes."""
    op = _op("H100-SXM-80GB", "fp8-current", "fp8.quantize")
    assert op["bytes"] == pytest.approx(L * T * 6 * (INPUTS + GRADS))


def test_full_recompute_reruns_the_fused_norm():
    """A full recompute casts each linear's input again (3 bytes, one launch each), except the
    norm-fed ones, whose re-run norm writes FP8 itself: 1 + 3 bytes and a launch less each."""
    op = _op("H100-SXM-80GB", "fp8-delayed", "fp8.recompute_cast", checkpointing="full")
    assert op["bytes"] == pytest.approx(L * T * (3 * INPUTS - 4 * NORM_FED))
    assert op["kernels"] == 4 * L - 2 * L
