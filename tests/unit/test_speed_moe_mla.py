"""MLA, MoE, chunked attention and the shipped weight formats in the speed model, against hand
calculations (issue 28, part 4). The FLOPs of every new family are also checked against PyTorch's
FLOP counter over transformers' own modules (tests/integration/test_compute_flops.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuplan.compute import flops_breakdown
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import gemm_wave_efficiency, grouped_gemm_efficiency
from gpuplan.compute.flops import (
    RunForm, StepShape, build_forward_ops, chunked_score_elements, causal_score_elements,
    expert_tokens, grouped_experts, run_form, visible_keys,
)
from gpuplan.compute.parallel import ep_all_to_all_s
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import collective_time, topology_for
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.models._types import MLA, Architecture
from gpuplan.parallel.layout import Layout

# A small MLA + MoE decoder with DeepSeek-V3's shape rules: q through a rank-24 bottleneck, a
# 16-wide latent and an 8-wide rotary key, nope 16 / v 12 per head, 8 experts top-2 + a shared one.
H_, NH, QR, C, DR, DN, DV = 64, 4, 24, 16, 8, 16, 12
E, K, IE = 8, 2, 32


def mla_arch(**kw) -> Architecture:
    d = dict(name="mla", family="deepseek_v3", kind="decoder", hidden_size=H_, num_layers=2,
             num_heads=NH, num_kv_heads=NH, head_dim=DN + DR, intermediate_size=96,
             vocab_size=101, max_position_embeddings=4096, tie_word_embeddings=False,
             mlp="gated", activation="silu", norm="rmsnorm", position="rotary",
             mla=MLA(q_lora_rank=QR, kv_lora_rank=C, qk_rope_head_dim=DR, qk_nope_head_dim=DN,
                     v_head_dim=DV),
             num_experts=E, experts_per_token=K, moe_intermediate_size=IE,
             shared_expert_intermediate_size=IE, moe_layers=(1,), router="sigmoid")
    d.update(kw)
    return Architecture(**d)


def ops_of(arch, shape, form=RunForm(), **kw):
    fwd = build_forward_ops(arch, shape, act_bytes=2, weight_bytes=2, form=form, **kw)
    return {(o.name, o.group): o for o in fwd}


def layer_op(ops, name, group="moe"):
    return ops[(name, group)]


def test_mla_naive_prefill_projections_and_attention_by_hand():
    B, s = 2, 32
    T = B * s
    ops = ops_of(mla_arch(), StepShape(batch=B, q_len=s, kv_len=s), attention="eager")
    assert layer_op(ops, "attn.q_a").counted_flops == 2 * T * H_ * QR
    assert layer_op(ops, "attn.q_b").counted_flops == 2 * T * QR * NH * (DN + DR)
    assert layer_op(ops, "attn.kv_a").counted_flops == 2 * T * H_ * (C + DR)
    # kv_b_proj expands each new token's latent into heads x (nope + v)
    assert layer_op(ops, "attn.kv_b").counted_flops == 2 * T * C * NH * (DN + DV)
    # scores with qk_head_dim = nope + rope, values with v_head_dim (full square)
    assert layer_op(ops, "attn.scores").counted_flops == 2 * B * NH * s * s * (DN + DR)
    assert layer_op(ops, "attn.values").counted_flops == 2 * B * NH * s * s * DV
    assert layer_op(ops, "attn.out").counted_flops == 2 * T * NH * DV * H_
    assert ("attn.qkv", "moe") not in ops  # no GQA projection for MLA


def test_mla_sdpa_core_uses_both_head_dims():
    B, s = 1, 256
    ops = ops_of(mla_arch(), StepShape(batch=B, q_len=s, kv_len=s), attention="sdpa")
    core = layer_op(ops, "attn.core")
    assert core.counted_flops == 2 * B * NH * s * s * ((DN + DR) + DV)
    assert core.flops == 2 * B * NH * causal_score_elements(s) * ((DN + DR) + DV)


def test_mla_absorbed_decode_is_mqa_over_the_latent():
    # decode of B sequences at context L: W_UK absorbed into q (per head nope x kv_lora), scores
    # over the kv_lora + rope latent, values of kv_lora, then W_UV (kv_lora x v) and o_proj
    B, L = 4, 1000
    shape = StepShape(batch=B, q_len=1, kv_len=L, decode=True)
    ops = ops_of(mla_arch(), shape, RunForm(mla="absorbed"), kv_bytes=1)
    assert layer_op(ops, "attn.q_absorb").counted_flops == 2 * B * NH * DN * C
    core = layer_op(ops, "attn.core")
    assert core.counted_flops == 2 * B * NH * L * (C + DR) + 2 * B * NH * L * C
    assert layer_op(ops, "attn.v_up").counted_flops == 2 * B * NH * C * DV
    assert ("attn.kv_b", "moe") not in ops
    # the core reads the latent cache once for all heads: (kv_lora + rope) x L x 1 byte (fp8),
    # not 2 x heads x head_dim; plus q (heads x 24), its output (heads x 16) and the new entry
    assert core.bytes == (B * NH * (C + DR) * 2 + B * L * (C + DR) * 1 + B * (C + DR) * 1
                          + B * NH * C * 2)


def test_mla_transformers_decode_reexpands_the_whole_cache():
    B, L = 2, 500
    shape = StepShape(batch=B, q_len=1, kv_len=L, decode=True)
    ops = ops_of(mla_arch(), shape, run_form(mla_arch(), "transformers", decode=True))
    assert layer_op(ops, "attn.kv_b").counted_flops == 2 * B * L * C * NH * (DN + DV)
    assert layer_op(ops, "attn.core").counted_flops == 2 * B * NH * L * ((DN + DR) + DV)
    # and the serving engines take the absorbed form; prefill is naive everywhere
    assert run_form(mla_arch(), "vllm", decode=True).mla == "absorbed"
    assert run_form(mla_arch(), "sglang", decode=True).mla == "absorbed"
    assert run_form(mla_arch(), "vllm", decode=False).mla == "naive"


def test_moe_flops_are_top_k_routed_plus_shared_plus_router():
    T = 64
    ops = ops_of(mla_arch(), StepShape(batch=1, q_len=T, kv_len=T))
    assert layer_op(ops, "moe.router").counted_flops == 2 * T * H_ * E
    assert layer_op(ops, "moe.up").counted_flops == 2 * T * K * H_ * 2 * IE
    assert layer_op(ops, "moe.down").counted_flops == 2 * T * K * IE * H_
    assert layer_op(ops, "moe.shared_up").counted_flops == 2 * T * H_ * 2 * IE
    assert layer_op(ops, "moe.shared_down").counted_flops == 2 * T * IE * H_
    assert ("moe.shared_gate", "moe") not in ops  # only Qwen2-MoE gates its shared expert
    # the first layer is dense (first_k_dense_replace): its MLP of intermediate_size 96
    assert layer_op(ops, "mlp.down", "dense").counted_flops == 2 * T * 96 * H_


def llama4(**kw) -> Architecture:
    d = dict(name="l4", family="llama4_text", kind="decoder", hidden_size=64, num_layers=4,
             num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96, vocab_size=101,
             max_position_embeddings=4096, tie_word_embeddings=False, mlp="gated",
             activation="silu", norm="rmsnorm", position="rotary", num_experts=16,
             experts_per_token=1, moe_intermediate_size=32, shared_expert_intermediate_size=32,
             moe_layers=(1, 3), router="sigmoid", qk_norm="l2", attention_chunk=128,
             chunked_layers=(0, 1, 2), nope_layers=(3,))
    d.update(kw)
    return Architecture(**d)


def test_llama4_under_transformers_runs_every_expert_and_vllm_routes_top_1():
    s = 64
    job = Job(model="x", mode="infer", prefill_logits="all", batch=1, seq=s)
    hf = flops_breakdown(llama4(), job)
    vl = flops_breakdown(llama4(), job.with_(engine="vllm"))
    # per MoE layer the routed experts' gate/up/down: 2 x rows x 64 x 32 x 3; transformers
    # computes rows = s x 16 experts, vLLM rows = s x top-1
    per_row = 2 * 64 * 32 * 3
    assert hf.forward_flops - vl.forward_flops == 2 * (s * 16 - s * 1) * per_row
    assert any("every one of the 16 experts" in n for n in hf.notes)
    assert not vl.notes
    assert hf.matmul_params - vl.matmul_params == 2 * 15 * 3 * 64 * 32


def test_chunked_layers_count_their_chunk_and_nope_layers_skip_rotary():
    s, c = 300, 128
    # counted: a full square per chunk (2 of 128, one of 44); executed: a causal square each
    assert chunked_score_elements(s, c) == 2 * causal_score_elements(128) + causal_score_elements(44)
    ops = ops_of(llama4(), StepShape(batch=1, q_len=s, kv_len=s))
    core = layer_op(ops, "attn.core", "chunked dense")
    assert core.counted_flops == 4 * 4 * (2 * 128 * 128 + 44 * 44) * 16
    glob = layer_op(ops, "attn.core", "moe (NoPE)")
    assert glob.counted_flops == 4 * 4 * s * s * 16
    assert ("attn.rotary", "moe (NoPE)") not in ops and ("attn.qk_norm", "moe (NoPE)") not in ops
    assert ("attn.rotary", "chunked moe") in ops and ("attn.qk_norm", "chunked moe") in ops
    # decode: the newest token sees its own chunk so far; a window caps the cache it reads
    assert visible_keys(300, None, 128) == 300 - 256
    assert visible_keys(300, 100) == 100
    dec = ops_of(llama4(), StepShape(batch=2, q_len=1, kv_len=300, decode=True))
    k_read = dec[("attn.core", "chunked dense")].bytes - 2 * 2 * 64 * 2 - 2 * 2 * 32 * 2
    assert k_read == 2 * 44 * 2 * 32 * 2


def test_expert_tokens_and_ep():
    arch = mla_arch()
    local, touched, per = expert_tokens(1024, arch, RunForm())
    assert local == 8 and touched == pytest.approx(8 * (1 - (1 - 2 / 8) ** 1024))
    assert per == pytest.approx(1024 * 2 / 8)
    # EP 4: 2 experts per rank, each taking the tokens of all 4 ranks: 4x the rows per expert
    local, touched, per = expert_tokens(1024, arch, RunForm(ep=4))
    assert local == 2 and per == pytest.approx(1024 * 4 * 2 / 8)
    ops = ops_of(arch, StepShape(batch=1, q_len=1024, kv_len=1024), RunForm(ep=4))
    up = layer_op(ops, "moe.up")
    assert up.counted_flops == 2 * 1024 * 2 * 64 * 64  # the rank's rows stay T x top-k
    assert up.groups == 2 and up.weight_elements == 2 * 64 * 64


def test_grouped_gemm_efficiency_at_the_rows_each_expert_gets():
    sms = 132
    # 8 experts of 16 rows x 4096 columns: 16-row tiles, 8 x 32 = 256 tiles on 132 SMs -> 2 waves
    tiles = 8 * 1 * 32
    assert grouped_gemm_efficiency(8, 128, 4096, sms, 4096) == pytest.approx(
        (8 * 16 * 4096 / (16 * 128)) / (math.ceil(tiles / sms) * sms))
    # the same rows as one dense GEMM are busier than 128 experts of one row each
    dense = gemm_wave_efficiency(1, 8192, 4096, sms, 4096)
    assert grouped_gemm_efficiency(64, 8192, 4096, sms, 4096) == pytest.approx(dense)
    assert grouped_gemm_efficiency(128, 1024, 4096, sms, 4096) < dense


def test_gpt_oss_shipped_mxfp4_reads_experts_at_4_25_bits_and_attention_at_16():
    from gpuplan.compute import estimate_speed
    m = load_model("gpt-oss-20b")
    est = estimate_speed(m, get_gpu("h100"), Job(model="gpt-oss-20b", mode="infer", batch=1,
                                                 infer_precision="mxfp4", engine="vllm"))
    ops = {(t.op.name, t.op.group): t.op for t in est.step.ops}
    arch = m.architecture
    qkv = ops[("attn.qkv", "moe")]
    h, d = arch.hidden_size, arch.head_dim
    nqkv = (arch.num_heads + 2 * arch.num_kv_heads) * d
    assert qkv.bytes == pytest.approx(3 * h * 2 + h * nqkv * 2 + nqkv * 2)  # bf16 weights
    up = ops[("moe.up", "moe")]
    assert up.weight_width == pytest.approx(4.25 / 8)
    assert est.dtype == "bf16"  # W4A16: computed at bf16 on Hopper


def test_ep_all_to_all_is_dispatch_and_combine_of_top_k_copies():
    arch = mla_arch()
    gpu = get_gpu("h100")
    topo = topology_for(gpu)
    eff = default_efficiency(device_from_gpu(gpu))
    lay = Layout.of(Job(model="x", mode="infer", gpus=8, ep=8, batch=4), 1024)
    got = ep_all_to_all_s(arch, 4, lay, topo, eff, 2)
    one = collective_time("all-to-all", 4 * K * H_ * 2, 8, topo, stride=lay.tp,
                          efficiency=eff.comm)
    assert got == pytest.approx(2 * 1 * one)  # one MoE layer, dispatch + combine
    assert ep_all_to_all_s(arch, 4, replace(lay, ep=1), topo, eff, 2) == 0.0


def test_grouped_experts_launch_a_fixed_handful_of_kernels_per_layer():
    """The serving engines and Megatron fuse the experts (one grouped GEMM per projection); the
    torch-native engines get torch's grouped GEMM only on Hopper / Blackwell in bf16, else one
    GEMM per expert hit (transformers 5's grouped_mm falls back to one mm per group)."""
    assert grouped_experts("vllm", "Ampere") and grouped_experts("megatron", "Volta")
    assert grouped_experts("transformers", "Hopper") and grouped_experts("torchtitan", "Blackwell")
    assert not grouped_experts("transformers", "Ampere")
    assert not grouped_experts("fsdp2", "Hopper", act_bytes=4)   # fp32: no CUTLASS kernel
    arch = mla_arch(mla=None)
    shape = StepShape(batch=32, q_len=1, kv_len=64, decode=True)
    loop = ops_of(arch, shape, RunForm())
    fused = ops_of(arch, shape, RunForm(grouped_experts=True))
    # 32 tokens x top-2 over 8 experts: every expert is hit (8 x (1 - (6/8)^32) rounds up to 8)
    _, touched, _ = expert_tokens(32, arch, RunForm())
    assert math.ceil(touched) == 8
    assert layer_op(loop, "moe.up").kernels == 8 * 2      # gate and up, per expert hit
    assert layer_op(loop, "moe.down").kernels == 8
    assert layer_op(fused, "moe.up").kernels == 1 and layer_op(fused, "moe.down").kernels == 1
    # the same bytes and FLOPs either way: only the launches differ
    for name in ("moe.up", "moe.down"):
        a, b = layer_op(loop, name), layer_op(fused, name)
        assert (a.bytes, a.counted_flops) == (b.bytes, b.counted_flops)


def test_run_form_picks_grouped_experts_from_the_engine_and_the_chip():
    arch = load_model("qwen3-30b-a3b").architecture
    assert run_form(arch, "transformers", decode=True, gpu_arch="Hopper").grouped_experts
    assert not run_form(arch, "transformers", decode=True, gpu_arch="Ampere").grouped_experts
    assert run_form(arch, "vllm", decode=True, gpu_arch="Ampere").grouped_experts
    dense = load_model("llama-3.1-8b").architecture
    assert not run_form(dense, "vllm", decode=True, gpu_arch="Hopper").grouped_experts
