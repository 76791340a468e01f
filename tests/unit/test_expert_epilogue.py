"""Megatron-Core's eager expert epilogue (compute/flops.py MCORE_EXPERT_EPILOGUE): the clamped
GLU's two clamps and ``torch.cat`` before the fused quick-GeGLU, and the fc2 bias added expert by
expert by ``TEGroupedMLP._apply_bias`` (NVIDIA/Megatron-LM@d7288711 moe/experts.py). The bytes
are counted by hand from gpt-oss-120b's config (hidden 2880, expert FFN 2880, top-4 of 128,
``swiglu_limit`` 7, expert biases) as each torch op reads and writes its tensors."""

from __future__ import annotations

import pytest

from gpuplan.compute.flops import (MODULE_OPS, StepShape, backward_ops, build_forward_ops,
                                   expert_epilogue_ops, run_form)
from gpuplan.models import load_model

T = 4 * 4096  # one micro-batch of the Megatron-Bridge rows: MBS 4 x 4096 tokens


@pytest.fixture(scope="module")
def oss():
    return load_model("gpt-oss-120b").architecture


def test_the_clamps_read_and_write_the_fc1_output_four_times(oss):
    R = T * 4  # top-4 rows
    clamp, _ = expert_epilogue_ops(oss, R, local=16, a=2)
    (op,) = clamp
    n = R * 2 * 2880  # the gate and linear halves of fc1's output
    # x_glu.clamp: read + write its half; x_linear.clamp: the other half; cat: read + write all
    assert op.bytes == 2 * n / 2 * 2 + 2 * n / 2 * 2 + 2 * n * 2
    assert op.kernels == 3
    (back,) = backward_ops((op,), act_bytes=2, grad_bytes=2)
    # clamp_backward (where): grad and input read, grad written, each half; the chunk's grads
    # concatenated: read + write
    assert back.bytes == 3 * n * 2 + 2 * n * 2 and back.kernels == 3


@pytest.mark.parametrize("fp32_probs", [False, True])
def test_the_bias_loop_per_expert(oss, fp32_probs):
    R, local = T * 4, 16
    _, bias = expert_epilogue_ops(oss, R, local=local, a=2, fp32_probs=fp32_probs)
    (op,) = bias
    n = R * 2880
    q = 4 if fp32_probs else 2  # b (bf16) * p: the probabilities' dtype wins
    # b * p: write q; t + bp: read 2 + q, write q; cat: read q, write q; .to(bf16) if q is 4
    fwd = q + (2 + q + q) + 2 * q + ((q + 2) if fp32_probs else 0)
    assert op.bytes == n * fwd
    assert op.kernels == 2 * local + 1 + (1 if fp32_probs else 0)
    (back,) = backward_ops((op,), act_bytes=2, grad_bytes=2)
    # per expert: grad * p and grad * b written then summed (3 passes of q each); the casts
    bwd = 6 * q + ((2 + q) * 2 if fp32_probs else 0)
    assert back.bytes == n * bwd
    assert back.kernels == 4 * local + (2 if fp32_probs else 0)


def test_a_model_without_clamp_or_expert_bias_has_no_epilogue():
    qwen = load_model("qwen3-30b-a3b").architecture
    assert expert_epilogue_ops(qwen, 1024, local=16, a=2) == ([], [])


def _names(arch, engine, dispatcher="alltoall", ep=8):
    form = run_form(arch, engine, decode=False, ep=ep, dispatcher=dispatcher)
    ops = build_forward_ops(arch, StepShape(batch=4, q_len=4096, kv_len=4096), act_bytes=2,
                            weight_bytes=2, attention="sdpa", form=form)
    return [o.name for o in ops if o.name.startswith("moe.")]


def test_megatron_runs_it_around_the_activation_and_fc2(oss):
    names = _names(oss, "megatron")
    i = names.index
    assert i("moe.up") < i("moe.clamp") < i("moe.act") < i("moe.down") < i("moe.bias")
    # the serving engines' fused MoE and torchtitan do not run Megatron-Core's TEGroupedMLP
    for engine in ("vllm", "torchtitan"):
        assert "moe.clamp" not in _names(oss, engine)
        assert "moe.bias" not in _names(oss, engine)


def test_the_flex_dispatchers_hand_float32_probabilities(oss):
    def bias_bytes(dispatcher, ep):
        form = run_form(oss, "megatron", decode=False, ep=ep, dispatcher=dispatcher)
        ops = build_forward_ops(oss, StepShape(batch=4, q_len=4096, kv_len=4096),
                                act_bytes=2, weight_bytes=2, attention="sdpa", form=form)
        return next(o.bytes / o.parallel_work for o in ops if o.name == "moe.bias")

    assert bias_bytes("alltoall", 8) == 12  # 6 passes of bf16
    assert bias_bytes("hybridep", 8) == 28  # 5 x 4 + 2, then .to(bf16): 4 + 2
    assert bias_bytes("hybridep", 1) == 12  # no flex exchange without expert parallelism


def test_moe_act_recompute_reruns_the_clamps():
    # bias_act_func, which selective moe_act recompute checkpoints, holds the clamps
    assert MODULE_OPS["moe_act"] == ("moe.clamp", "moe.act")


def test_megatron_runs_gpt_oss_rope_unfused(oss):
    """Megatron-Bridge turns apply_rope_fusion off for position_embedding_type 'yarn'
    (fusions.validate_rope_fusion_compatibility), which its GPT-OSS bridge sets: Megatron-Core's
    _apply_rotary_pos_emb_bshd, by hand over Q's 64 and K's 8 heads of 64."""
    def rope(arch, engine):
        form = run_form(arch, engine, decode=False)
        ops = build_forward_ops(arch, StepShape(batch=1, q_len=4096, kv_len=4096), act_bytes=2,
                                weight_bytes=2, attention="sdpa", form=form)
        return next(o for o in ops if o.name == "attn.rotary")

    n = 4096 * (64 + 8) * 64
    fused, mcore = rope(oss, "vllm"), rope(oss, "megatron")
    assert fused.bytes == 2 * n * 2  # one read, one write
    # t*cos 2, -x2 1, cat 2, *sin 2, add 3, cat with the empty t_pass 2 passes
    assert mcore.bytes == (2 + 1 + 2 + 2 + 3 + 2) * n * 2 and mcore.kernels == 24
    (back,) = backward_ops((mcore,), act_bytes=2, grad_bytes=2)
    assert back.bytes == (2 + 1 + 2 + 2 + 3) * n * 2 and back.kernels == 10
    llama = load_model("llama-3.1-8b").architecture  # position_embedding_type 'rope': fused
    assert rope(llama, "megatron").bytes == rope(llama, "vllm").bytes
