"""DualPipe (DeepSeek-V3 report, arXiv 2412.19437, sec. 3.2.1 and Table 2; the table of
github.com/deepseek-ai/DualPipe's README at 3da1bbea53606543d7f5f232338fc58096db30e3) and the
multi-token-prediction module (sec. 2.2; Megatron-Core's --mtp-num-layers): hand-computed bubble,
parameters, activations in flight, MTP parameters and FLOPs of a small config, and the refusals."""

from __future__ import annotations

import json

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import MicroCost, _busiest_stage, dualpipe_bubble_s, \
    mtp_flops_per_token
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory.parallel import stage_plans
from gpuplan.models import load_model, model_from_config_bytes
from gpuplan.parallel import in_flight, mtp_active_params, mtp_params
from gpuplan.parallel.layout import Layout

H100 = get_gpu("H100-SXM-80GB")


def test_dualpipe_bubble_at_pp16_by_hand():
    # F = 1, B = 2, W = 1 (half the backward), F&B = F + B = 3 (compute, communication hidden):
    # DualPipe (PP/2 - 1)(F&B + B - 3W) = 7 x (3 + 2 - 3) = 14; 1F1B (PP - 1)(F + B) = 45
    assert dualpipe_bubble_s(16, 3.0, 2.0, 1.0) == pytest.approx(14.0)
    assert dualpipe_bubble_s(16, 3.0, 2.0, 1.0) < 15 * (1.0 + 2.0)
    assert dualpipe_bubble_s(2, 3.0, 2.0, 1.0) == 0.0  # PP/2 - 1 = 0


def _cost(other=0.5, emb=0.2) -> MicroCost:
    return MicroCost(layers=32, layer_fwd_s=1.0, layer_bwd_s=2.0, attn_fwd_s=0.0, attn_bwd_s=0.0,
                     other_s=other, hardware_flops=0.0, embedding_s=emb, wgrad_s=0.75)


def test_dualpipe_rank_runs_the_mean_of_its_two_stages():
    arch = load_model("llama-3.1-8b").architecture  # 32 layers: 8 a stage over PP 4
    one = Layout(pp=4, micro_batches=8)
    dual = Layout(pp=4, micro_batches=8, schedule="dualpipe")
    # 1F1B's last stage: 8 x 3 + head 0.3 + (embedding 0.2 counted with other_s) = 24.5
    assert _busiest_stage(arch, _cost(), one)[:2] == (8, pytest.approx(24.5))
    # DualPipe: rank 0 = stage 0 (24 + 0.2) and stage 3 (24 + 0.3): (24.2 + 24.3) / 2
    assert _busiest_stage(arch, _cost(), dual)[:2] == (8, pytest.approx(24.25))
    # MTP depth 1 on the last stage: one more layer (3) and the head and loss again (0.3)
    mtp = Layout(pp=4, micro_batches=8, schedule="dualpipe", mtp_layers=1)
    n, t = _busiest_stage(arch, _cost(), mtp)[:2]
    assert t == pytest.approx((24.2 + 24.3 + 3.3) / 2) and n == 9  # ceil((8 + 9) / 2)


def test_dualpipe_step_bubble_is_the_formula_on_the_stage():
    m = load_model("llama-3.1-8b")
    base = dict(model=m, mode="train", engine="megatron", seq=2048, gpus=16, pp=16,
                grad_accum=32)
    a = estimate_speed(m, H100, Job(**base), measured=None).layout
    d = estimate_speed(m, H100, Job(**base, pp_schedule="dualpipe"), measured=None).layout
    per_mb = d.compute_s / 32  # no TP/CP/EP: the stage's compute alone
    # F&B = per_mb; B <= per_mb and W <= B / 2 (the wgrad half of the backward GEMMs), so
    # F&B + B - 3W lies between per_mb - B/2 >= per_mb / 2 and per_mb + B <= 2 per_mb; a
    # matmul-bound layer (B = 2F, W = F) gives 2F = 2/3 per_mb, below 1F1B's per_mb
    assert 7 * per_mb / 2 <= d.bubble_s <= 7 * 2 * per_mb
    assert d.bubble_s < 7 * per_mb
    assert a.bubble_s == pytest.approx(15 * a.compute_s / 32)  # 1F1B (p-1) micro-batches
    assert d.pp_comm_s == 0.0 and a.pp_comm_s > 0.0  # the sends beside the paired chunk


def test_dualpipe_holds_two_stages_params_and_pp_plus_one_micro_batches():
    m = load_model("llama-3.2-1b")  # 16 layers over PP 4
    base = dict(model=m, mode="train", engine="megatron", seq=1024, gpus=4, pp=4,
                micro_batches=8)
    one = stage_plans(m, Job(**base))
    dual = stage_plans(m, Job(**base, pp_schedule="dualpipe"))
    for i in range(4):  # rank i holds stage i and stage 3 - i: 2x the parameters
        for f in ("weights_trainable", "grads", "master", "opt"):
            assert getattr(dual[i].states, f) == getattr(one[i].states, f) \
                + getattr(one[3 - i].states, f), (i, f)
        assert dual[i].in_flight == 5  # PP + 1 on every rank
    assert [in_flight("dualpipe", 16, i, 32) for i in (0, 15)] == [17, 17]
    assert in_flight("dualpipe", 16, 0, 6) == 6  # at most the micro-batches


@pytest.mark.parametrize("kw,field", [(dict(pp=3, gpus=3, grad_accum=8), "pp"),
                                      (dict(pp=4, gpus=4, grad_accum=7), "micro_batches"),
                                      # DualPipe@3da1bbe line 333: num_chunks >= num_ranks * 2
                                      (dict(pp=4, gpus=4, grad_accum=6), "micro_batches")])
def test_dualpipe_needs_even_stages_and_micro_batches(kw, field):
    m = load_model("llama-3.2-1b")
    with pytest.raises(InputError) as e:
        estimate_speed(m, H100, Job(model=m, mode="train", pp_schedule="dualpipe", **kw),
                       measured=None)
    assert e.value.field == field and "\n" not in str(e.value) and "dualpipe" in str(e.value)


def _small_deepseek():
    """A DeepSeek-V3 config shrunk: H 64, 3 layers (the first dense), 4 routed experts of width
    32 (top-2) and one shared, 4 MLA heads (q_lora 32, kv_lora 16, nope 16, rope 8, v 16),
    vocabulary 100, one MTP layer."""
    c = json.loads(json.dumps(load_model("deepseek-v3").architecture.config, default=dict))
    c.pop("quantization_config", None)
    c.update(hidden_size=64, num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=4,
             num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=128,
             vocab_size=100, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
             kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
             n_shared_experts=1, n_group=1, topk_group=1, num_nextn_predict_layers=1)
    return model_from_config_bytes(json.dumps(c).encode()).architecture


def test_mtp_params_and_flops_of_a_small_config_by_hand():
    a = _small_deepseek()
    H, V = 64, 100
    # the MTP block, a copy of the last (MoE) layer: two RMSNorms 2H; MLA: q_a H x 32, its norm
    # 32, q_b 32 x 4 x (16 + 8), kv_a H x (16 + 8), its norm 16, kv_b 16 x 4 x (16 + 16), o 4 x 16
    # x H; router 4 x H (transformers keeps e_score_correction_bias as a buffer); 4 routed
    # experts and 1 shared, 3 x H x 32 each
    attn = 64 * 32 + 32 + 32 * 4 * 24 + 64 * 24 + 16 + 16 * 4 * 32 + 4 * 16 * 64
    block = 2 * H + attn + 4 * H + 5 * 3 * H * 32
    # + enorm, hnorm, shared_head.norm (3H) + eh_proj (2H x H); embedding and head shared
    assert mtp_params(a, 1) == block + 3 * H + 2 * H * H == 52336
    assert a.mtp_params == mtp_params(a, 1) + 2 * V * H  # the checkpoint's own copies
    active = mtp_params(a, 1) - 2 * 3 * H * 32  # 2 of 4 routed experts idle for a token
    assert mtp_active_params(a, 1) == active
    s = 8  # forward: 2 x active + head 2 H V + causal scores 2 x 4 x (24 + 16) x (s + 1) / 2
    assert mtp_flops_per_token(a, s, 1) == pytest.approx(
        3 * (2 * active + 2 * H * V + 2 * 4 * 40 * (s + 1) / 2))
    assert mtp_flops_per_token(a, s, 0) == 0.0


def test_deepseek_v3_mtp_trains_the_checkpoints_layer_less_its_embedding_and_head():
    a = load_model("deepseek-v3").architecture
    # the checkpoint's MTP layer (the hub's 685B - 671B) holds its own embedding and head
    assert a.mtp_params == 13_463_426_048
    assert mtp_params(a, 1) == 13_463_426_048 - 2 * 129280 * 7168


def test_mtp_is_megatrons_and_needs_a_model_with_one():
    with pytest.raises(InputError) as e:
        Job(model="deepseek-v3", mode="train", mtp_layers=1)
    assert e.value.field == "mtp_layers" and "megatron" in str(e.value)
    m = load_model("llama-3.2-1b")
    with pytest.raises(InputError) as e:
        estimate_speed(m, H100, Job(model=m, mode="train", engine="megatron", mtp_layers=1),
                       measured=None)
    assert e.value.field == "mtp_layers" and "\n" not in str(e.value)


def test_mtp_adds_its_flops_and_last_stage_time():
    m = load_model("deepseek-v3")
    base = dict(model=m, mode="train", engine="megatron", seq=4096, gpus=64, ep=64,
                grad_accum=8, precision="mixed-bf16")
    a = estimate_speed(m, H100, Job(**base), measured=None).layout
    b = estimate_speed(m, H100, Job(**base, mtp_layers=1), measured=None).layout
    assert b.model_flops_per_token - a.model_flops_per_token == pytest.approx(
        mtp_flops_per_token(m.architecture, 4096, 1))
    assert b.compute_s > a.compute_s


def test_mtp_without_a_layout_is_refused_not_ignored():
    m = load_model("deepseek-v3")
    with pytest.raises(InputError) as e:
        estimate_speed(m, H100, Job(model=m, mode="train", engine="megatron", mtp_layers=1),
                       measured=None)
    assert e.value.field == "mtp_layers" and "\n" not in str(e.value)


def test_mtp_states_and_activations_sit_on_the_last_stage():
    m = load_model("deepseek-v3")
    base = dict(model=m, mode="train", engine="megatron", seq=4096, gpus=1024, ep=64, pp=16,
                micro_batches=32, pp_first_stage_layers=4, pp_last_stage_layers=1, zero=1)
    one = stage_plans(m, Job(**base))
    mtp = stage_plans(m, Job(**base, mtp_layers=1))
    assert mtp[7].states == one[7].states and mtp[7].mtp_kept(10**9) == 0
    last = one[15]
    assert mtp[15].states.grads > last.states.grads
    assert mtp[15].states.trainable - last.states.trainable > 0
    # one layer's share of the last stage's one layer of kept activations, 1 micro-batch in
    # flight on 1F1B's last stage: all of it again
    assert mtp[15].in_flight == 1 and mtp[15].mtp_kept(1000) == 1000
    dual = stage_plans(m, Job(**base, mtp_layers=1, pp_schedule="dualpipe"))
    # DualPipe: the last stage's micro-batches in flight are 1 on either rank that holds it
    # (dual_in_flight); rank 0 holds its one in the twin's share, not as its own stage's
    assert dual[15].mtp_kept(1000) == 1000 and dual[0].mtp_kept(4000) == 0
    assert dual[0].twin_kept == dual[15].kept_per_micro_batch()
