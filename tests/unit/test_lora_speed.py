"""LoRA's own passes in the speed model: the adapter products, the scale-and-add, their backward,
counted by hand from ``out = base(x) + s * B(A(x))``; the adapted modules shared with the memory
accounting; a routed expert's share of the tokens; ZeRO-3 gathering a frozen base."""

from __future__ import annotations

import math

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.flops import lora_adapter_ops
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import lora_tensors
from gpuplan.models import load_model

A100 = get_gpu("A100-SXM-80GB")


def _by(ops, name, phase):
    return [o for o in ops if o.name == name and o.phase == phase]


def test_adapter_ops_counted_by_hand():
    # one adapted linear, in 4096 -> out 1024, 2 instances, 100 tokens, rank 8, 16-bit activations
    i, o, T, r, a = 4096, 1024, 100, 8, 2
    eager = lora_adapter_ops([(i, o, 2, T)], rank=r, act_bytes=a, fused=False)
    (fa,) = _by(eager, "lora.A", "forward")
    assert fa.shape == (1, T, i, r) and fa.count == 2
    assert fa.flops == 2 * T * i * r
    assert fa.bytes == a * (T * i + i * r + T * r)  # read x and A, write x @ A
    (fb,) = _by(eager, "lora.B", "forward")
    assert fb.bytes == a * (T * r + r * o + T * o)
    (sa,) = _by(eager, "lora.scale_add", "forward")
    # mul: read + write the adapter output; add: read it and the base output, write the sum
    assert sa.bytes == a * (2 + 3) * T * o and sa.kernels == 2
    bwd = [op for op in eager if op.phase == "backward"]
    # dB, dH, dA and the adapter's dX: four products of the forward's two shapes' FLOPs
    assert sum(op.flops for op in bwd if op.kind == "matmul") == 2 * (fa.flops + fb.flops)
    (dx,) = _by(eager, "lora.dx_add", "backward")
    assert dx.bytes == 3 * a * T * i and dx.kernels == 1
    assert sum(op.kernels for op in eager if op.phase == "forward") == 4
    assert sum(op.kernels for op in bwd) == 6
    assert not [op for op in eager if op.phase == "recompute"]

    fused = lora_adapter_ops([(i, o, 2, T)], rank=r, act_bytes=a, fused=True, dropout=True,
                             recompute=True)
    (sa,) = _by(fused, "lora.scale_add", "forward")
    assert sa.bytes == 3 * a * T * o and sa.kernels == 1  # one kernel: read both, write
    (dx,) = _by(fused, "lora.dx_add", "backward")
    assert dx.bytes == a * T * i and dx.kernels == 0  # folded into dX's consumer
    (dr,) = _by(fused, "lora.dropout", "forward")
    assert dr.bytes == 2 * a * T * i + T * i  # read x, write the dropped copy and a 1-byte mask
    fwd = [op for op in fused if op.phase == "forward"]
    rec = [op for op in fused if op.phase == "recompute"]
    assert [(op.name, op.bytes) for op in rec] == [(op.name, op.bytes) for op in fwd]


def test_adapters_are_the_memory_accountings_and_cost_time():
    model = load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="train", batch=2, seq=2048, lora_rank=8,
              checkpointing="full", runtime="compile")
    qv = estimate_speed(model, A100, job, measured=None)
    every = estimate_speed(model, A100, job.with_(lora_targets=(
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
        measured=None)
    # the trainable count is the adapter tensors the memory accounting adds
    all7 = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for est, targets in ((qv, None), (every, all7)):
        assert est.trainable_params == sum(t.total for t in lora_tensors(model, 8, targets))
    # q_proj and v_proj both read the 4096-wide input: x @ A at M = 4096 tokens, once a layer,
    # and again in the recompute of full checkpointing
    T = 2 * 2048
    qa = [t.op for t in qv.step.ops if t.op.name == "lora.A" and t.op.shape == (1, T, 4096, 8)]
    assert sorted((op.phase, op.count) for op in qa) == [("forward", 32)] * 2 + [
        ("recompute", 32)] * 2
    assert every.step_time_s > qv.step_time_s
    # the adapters of all seven linears move more bytes than the base's step time can hide:
    # at least their bytes over the card's full bandwidth more
    moved = sum(t.op.bytes * t.op.count for t in every.step.ops if t.op.name.startswith("lora."))
    moved_qv = sum(t.op.bytes * t.op.count for t in qv.step.ops if t.op.name.startswith("lora."))
    assert every.step_time_s - qv.step_time_s >= (moved - moved_qv) / A100.memory_bandwidth


def test_a_routed_expert_sees_its_share_of_the_tokens():
    model = load_model("qwen1.5-moe-a2.7b")  # 60 experts, 4 per token
    job = Job(model="qwen1.5-moe-a2.7b", mode="train", batch=1, seq=1000, lora_rank=8,
              lora_targets=("all-linear",))
    est = estimate_speed(model, A100, job, measured=None)
    ms = {t.op.shape[1] for t in est.step.ops
          if t.op.name == "lora.A" and t.op.phase == "forward"}
    assert ms == {1000, math.ceil(1000 * 4 / 60)}


def test_unknown_target_is_refused_as_the_memory_accounting_refuses_it():
    model = load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="train", lora_rank=8, lora_targets=("c_attn",))
    with pytest.raises(InputError, match="c_attn"):
        estimate_speed(model, A100, job, measured=None)


def test_zero3_gathers_a_frozen_base():
    model = load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=2048, gpus=8, zero=3,
              lora_rank=8, precision="bf16")
    est = estimate_speed(model, A100, job, link="nvlink", measured=None)
    n, lora = model.params.total, est.trainable_params
    # reduce-scatter of the adapters' gradients + all-gathers of every 16-bit weight, in
    # all-reduce-equivalent bytes (an all-gather or a reduce-scatter moves half an all-reduce):
    # as many as DeepSpeed's coordinator makes (forward and backward, less those its reuse
    # distance keeps gathered), the frozen base's included
    from gpuplan.engines.zero3 import deepspeed_gathered

    g = deepspeed_gathered(model, False).gathers
    assert 1.85 < g < 2
    assert est.scaling.gradient_bytes == pytest.approx((2 * lora + g * 2 * n) / 2, rel=1e-9)
    full = estimate_speed(model, A100, job.with_(lora_rank=None), link="nvlink", measured=None)
    assert full.scaling.gradient_bytes == pytest.approx((1 + g) / 2 * 2 * n, rel=1e-9)


def test_every_supported_family_has_its_peft_default():
    # PEFT's mapping names a default for every family gpuplan reads (bloom: query_key_value, the
    # fused QKV projection), so --lora-rank alone plans and times the same adapters everywhere
    from gpuplan.models import DEFAULT_LORA_TARGETS, SUPPORTED_FAMILIES
    from gpuplan.models._lora import NO_PEFT_DEFAULT

    # (PEFT 0.21's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has no entry for the
    # families of NO_PEFT_DEFAULT: get_peft_model asks for target_modules, and so does gpuplan)
    assert set(SUPPORTED_FAMILIES) - set(NO_PEFT_DEFAULT) <= set(DEFAULT_LORA_TARGETS)
    assert not set(NO_PEFT_DEFAULT) & set(DEFAULT_LORA_TARGETS)
    model = load_model("bloom-560m")  # 24 layers, hidden 1024: query_key_value is 1024 -> 3072
    est = estimate_speed(model, A100, Job(model="bloom-560m", mode="train", lora_rank=8),
                         measured=None)
    assert est.trainable_params == 24 * 8 * (1024 + 3 * 1024)
    assert est.trainable_params == sum(t.total for t in lora_tensors(model, 8, None))
