"""DeepSeek-V3's own pre-training memory (arXiv 2412.19437 v2, secs. 3.2.1, 3.2.3, 3.3.3) and
DualPipe's per-rank accounting (deepseek-ai/DualPipe@3da1bbe dualpipe/dualpipe.py ``step``),
each figure computed by hand from the report's sentences and the architecture's sizes
(hidden 7168, 128 heads of value size 128, 256 routed experts of width 2048, 8 a token, one
shared expert)."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.memory.activations.profile import step_profile
from gpuplan.memory.parallel import stage_plans
from gpuplan.parallel import dual_in_flight
from gpuplan.models import load_model

M = load_model("deepseek-v3")
H, HEADS, VD, I_MOE, TOP_K = 7168, 128, 128, 2048, 8
RECOMPUTE = dict(checkpointing="selective", recompute_modules=("layernorm", "mla_up_proj",
                                                              "moe_act"))


def _dualpipe_peaks(pp: int, chunks: int, rank: int) -> tuple[int, int]:
    """The peak of each phase's forwards not yet backwarded, replaying the order of
    ``DualPipe.step`` (steps 1-8, dualpipe.py@3da1bbe): a forward-backward pair counts its
    forward first."""
    half, h = pp // 2, min(rank, pp - 1 - rank)
    live, peak = [0, 0], [0, 0]

    def f(p):
        live[p] += 1
        peak[p] = max(peak[p], live[p])

    def b(p):
        live[p] -= 1
    for _ in range((half - h - 1) * 2):
        f(0)
    for _ in range(h + 1):
        f(0), f(1)
    for _ in range(half - h - 1):
        b(1), f(1)
    for _ in range(chunks // 2 - pp + h + 1):
        f(0), b(1), f(1), b(0)
    for _ in range(half - h - 1):
        b(1), f(1), b(0)
    for _ in range(h + 1):
        b(1), b(0)
    for _ in range(half - h - 1):
        b(0)
    assert live == [0, 0]
    # phase 0 is the forward direction (stage ``rank``) on the first half of the ranks, the
    # reverse one (stage ``pp - 1 - rank``) on the second
    return (peak[0], peak[1]) if rank < half else (peak[1], peak[0])


@pytest.mark.parametrize("pp,chunks", [(16, 120), (8, 20), (4, 8)])
def test_dual_in_flight_is_the_dualpipe_schedules_own(pp, chunks):
    for r in range(pp):
        assert dual_in_flight(pp, r) == _dualpipe_peaks(pp, chunks, r)
        assert sum(dual_in_flight(pp, r)) == pp + 1  # the report's Table 2


def _job(**kw):
    return Job(model=M, mode="train", engine="megatron", precision="fp8-blockwise", seq=4096,
               gpus=2048, pp=16, ep=64, zero=1, micro_batches=120, pp_first_stage_layers=4,
               pp_last_stage_layers=1, mtp_layers=1, **kw)


def test_a_dualpipe_rank_holds_both_of_its_stages_states_and_the_mtp_once():
    one = stage_plans(M, _job())
    dual = stage_plans(M, _job(pp_schedule="dualpipe"))
    for f in ("trainable", "weights_trainable", "grads", "master", "opt", "fp8"):
        # rank 0 = 1F1B's stage 0 + its stage 15 (with the MTP module): the same shard groups
        assert getattr(dual[0].states, f) == getattr(one[0].states, f) + getattr(
            one[15].states, f), f
        assert getattr(dual[15].states, f) == getattr(dual[0].states, f), f
        assert getattr(dual[1].states, f) == getattr(one[1].states, f) + getattr(
            one[14].states, f), f


def test_a_dualpipe_rank_keeps_each_stage_at_its_own_count():
    # rank i keeps 16 - i micro-batches of stage i, as 1F1B's stage i does, and i + 1 of its
    # twin 15 - i: the difference from 1F1B's stage i is i + 1 of the twin's micro-batches
    # (the last stage's with its MTP module's share: one layer's, its only layer's)
    dual = stage_plans(M, _job(pp_schedule="dualpipe", **RECOMPUTE))
    one = stage_plans(M, _job(**RECOMPUTE))
    kept = [p.activations().kept_bytes for p in one]
    peak = [p.activations().backward_peak for p in one]
    assert dual[1].activations().backward_peak - peak[1] == 2 * kept[14]
    assert dual[0].activations().backward_peak - peak[0] == 1 * (kept[15] + kept[15])
    assert dual[15].activations().backward_peak - peak[15] == 16 * kept[0]


def _layer_saved(job: Job, moe: bool) -> int:
    """Bytes a token keeps for backward in one dense (layer 0) or MoE (layer 3) layer, at one
    micro-batch of 4096 tokens."""
    prof = step_profile(M, job._evolve(gpus=32, pp=1, ep=1, zero=1, micro_batches=None,
                                       pp_first_stage_layers=None, pp_last_stage_layers=None,
                                       mtp_layers=None, pp_schedule="1f1b"))
    runs = [p for n, p in prof.layers for _ in range(n)]
    return runs[3 if moe else 0].saved(1, 4096) // 4096


def test_deepseek_storage_moves_what_the_report_says_by_hand():
    engine = _job(**RECOMPUTE)
    ds = _job(**RECOMPUTE, activation_storage="deepseek-v3")
    # sec. 3.3.3 (1): the attention output (heads x v_head_dim) kept once in E5M6, 1.5 B not 2;
    # sec. 3.2.3: the two pre-norms' FP8 copies (h bytes each) recomputed with the norms
    attn = HEADS * VD * (2 - 1.5) + 2 * H * 1
    assert _layer_saved(engine, False) - _layer_saved(ds, False) == attn
    # sec. 3.3.3 (2): the MoE SwiGLU inputs (gate and up, 2 x width) in FP8, not BF16: the 8
    # routed copies and the shared expert
    swiglu = TOP_K * 2 * I_MOE * (2 - 1) + 2 * I_MOE * (2 - 1)
    assert _layer_saved(engine, True) - _layer_saved(ds, True) == attn + swiglu


def test_fp32_grads_are_4_bytes_a_trainable_parameter():
    a = train_memory(M, _job(pp_schedule="dualpipe"))
    b = train_memory(M, _job(pp_schedule="dualpipe", grad_dtype="fp32"))
    assert b.gradients_bytes == 2 * a.gradients_bytes
    assert any(line.label == "gradients, 32-bit" for line in b.lines)


def test_deepseek_storage_is_an_fp8_megatron_setting():
    with pytest.raises(InputError) as e:
        Job(model=M, mode="train", precision="mixed-bf16", engine="megatron",
            activation_storage="deepseek-v3")
    assert e.value.field == "activation_storage" and "\n" not in str(e.value)
