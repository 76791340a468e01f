"""Uneven pipeline splits (``pp_first_stage_layers`` / ``pp_last_stage_layers``: Megatron-LM's
``--decoder-first/last-pipeline-num-layers``) and expert tensor parallelism with MoE Parallel
Folding (``etp``: Megatron-Core's ``--expert-tensor-parallel-size``, arXiv 2504.14960): the
layout's split by hand, each stage's memory, the slowest stage's pace, the export, the folded
expert shards and EP group, and the one-line refusals (gpuplan issue 30)."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model
from gpuplan.parallel import check_layout, layout_of, part_layers, rank_model, stage_layers

MIXTRAL = "mixtral-8x7b"  # 32 layers, 8 experts of width 14336, hidden 4096


# ---- the split ---------------------------------------------------------------------------

@pytest.mark.parametrize("pp,v,first,last,stages", [
    # Megatron-Bridge deepseek_v3.py layout_map (4, 4): 16 + 16 + 16 + 13 = 61
    (4, 4, 16, 13, (16, 16, 16, 13)),
    # (16, 1): 4 x 15 + 1 = 61
    (16, 1, 4, 1, (4,) * 15 + (1,)),
    # first 9, last 6: 46 left over 6 stages = 8, 8, 8, 8, 7, 7 (partition_uniform)
    (8, 4, 9, 6, (9, 8, 8, 8, 8, 7, 7, 6)),
    # only the last given: 60 over the first three stages = 20 each
    (4, 1, None, 1, (20, 20, 20, 1)),
])
def test_stage_totals_by_hand(pp, v, first, last, stages):
    parts = part_layers(61, pp, v, first=first, last=last)
    assert len(parts) == pp * v and sum(parts) == 61
    assert tuple(sum(parts[s::pp]) for s in range(pp)) == stages


def test_each_stage_cuts_its_layers_over_its_chunks():
    # stage 3 of (4, 4) holds 13 layers over 4 chunks: 4, 3, 3, 3 (the first one longer);
    # the model order interleaves the stages' chunks: part k is chunk k // 4 of stage k % 4
    parts = part_layers(61, 4, 4, first=16, last=13)
    assert parts[3::4] == (4, 3, 3, 3) and parts[0::4] == (4, 4, 4, 4)
    st = stage_layers(61, 4, 4, first=16, last=13)
    assert st[0][:4] == (0, 1, 2, 3) and st[0][4:8] == (16, 17, 18, 19)  # chunk 1 after 4 x 4
    assert sorted(i for s in st for i in s) == list(range(61))


def test_stage_memory_holds_the_stages_layers():
    m = load_model(MIXTRAL)
    job = Job(model=m, mode="train", gpus=4, pp=4, pp_first_stage_layers=5,
              pp_last_stage_layers=11)  # middle: 16 over 2 = 8, 8
    assert layout_of(job).stage_totals(32) == (5, 8, 8, 11)
    ranks = [rank_model(m, job, s) for s in range(4)]
    per_layer = next(t for t in m.tensors if t.module == "w1").count // 32  # 8 experts a layer
    for r, n in zip(ranks, (5, 8, 8, 11)):
        assert r.architecture.num_layers == n
        assert next(t for t in r.tensors if t.module == "w1").count == n * per_layer
    assert sum(r.params.total for r in ranks) == m.params.total
    # the first stage holds 5 of 32 layers and the embedding; the last 11 and the head
    emb = m.params.by_component["embeddings"]
    head = m.params.by_component.get("head", 0)
    layers = m.params.total - emb - head - m.params.by_component.get("norm", 0)
    assert abs(ranks[0].params.total - emb - layers * 5 // 32) <= layers // 32 // 100


def test_the_slowest_stage_sets_the_pace():
    m, g = load_model(MIXTRAL), get_gpu("H100-SXM-80GB")
    kw = dict(model=m, mode="train", engine="megatron", gpus=4, pp=4, zero=1, seq=4096,
              grad_accum=8)
    even = estimate_speed(m, g, Job(**kw), measured=None).to_dict()["layout"]
    uneven = estimate_speed(m, g, Job(pp_first_stage_layers=5, pp_last_stage_layers=11, **kw),
                            measured=None).to_dict()["layout"]
    assert even["stage_layers"] == 8 and uneven["stage_layers"] == 11
    # the busiest stage's compute: 11 layers and the head against 8 and the head
    assert 11 / 8 * 0.9 < uneven["compute_s"] / even["compute_s"] < 11 / 8 * 1.05
    assert uneven["layout"]["pp_first_stage_layers"] == 5
    assert "pp_first_stage_layers" not in even["layout"]  # an even layout's JSON as before


@pytest.mark.parametrize("kw,msg", [
    (dict(pp=4, pp_first_stage_layers=20, pp_last_stage_layers=20),
     "leave -8 of 32 layers for the other 2 stages"),
    (dict(pp=2, pp_first_stage_layers=20, pp_last_stage_layers=20),
     "make them add up to 32"),
    (dict(pp=4, pp_schedule="interleaved:2", pp_first_stage_layers=1),
     "each of the stage's 2 chunks needs a transformer layer"),
    (dict(pp=4, pp_first_stage_layers=5, pp_embedding_part=True), "drop pp_embedding_part"),
])
def test_bad_splits_are_refused_in_one_line(kw, msg):
    job = Job(model=MIXTRAL, mode="train", gpus=kw["pp"], **kw)
    with pytest.raises(InputError, match=msg) as e:
        check_layout(load_model(MIXTRAL).architecture, job)
    assert "\n" not in str(e.value)


def test_a_split_without_a_pipeline_is_refused():
    with pytest.raises(InputError, match="pp_first_stage_layers without pp"):
        Job(model=MIXTRAL, mode="train", pp_first_stage_layers=4).check_pipeline_shaping()


# ---- expert TP and folding -----------------------------------------------------------------

def test_folded_experts_are_whole_on_each_rank():
    m = load_model(MIXTRAL)
    # tp 2 over 8 GPUs: dp 4; expert TP 1 lets EP 8 span tp x dp = 8 ranks, one expert each
    rank = rank_model(m, Job(model=m, tp=2, ep=8, etp=1, gpus=8), 0)
    w1 = next(t for t in rank.tensors if t.module == "w1")
    assert w1.count == 32 * 8 // 8 and w1.shape == (14336, 4096)  # not split
    q = next(t for t in rank.tensors if t.module == "q_proj")
    assert q.shape == (4096 // 2, 4096)  # the attention still TP 2


def test_folded_expert_states_shard_over_tp_dp_cp_over_ep_etp():
    m = load_model(MIXTRAL)
    job = Job(model=m, mode="train", tp=2, ep=4, etp=1, gpus=8, zero=1, seq=512,
              sequence_parallel=True)
    assert layout_of(job).expert_group == 8 and layout_of(job).expert_zero_group == 2
    rank = rank_model(m, job, 0)
    experts = sum(t.total for t in rank.tensors if t.component == "experts")
    dense = rank.params.total - experts
    # Adam 8 B/param under ZeRO-1: dense over dp 4, experts (2 whole per rank) over
    # tp x dp / (ep x etp) = 8 / 4 = 2
    assert experts == 32 * 2 * 3 * 14336 * 4096
    r = train_memory(m, job)
    assert abs(r.optimizer_bytes - (8 * dense // 4 + 8 * experts // 2)) <= 16


def test_ep_wider_than_dp_is_refused_with_the_fold_as_the_way_out():
    job = Job(model=MIXTRAL, mode="train", tp=2, ep=8, gpus=8)
    with pytest.raises(InputError, match=r"\(4 ranks\); use ep 4, or fold the experts with etp 1"):
        check_layout(load_model(MIXTRAL).architecture, job)
    job = Job(model=MIXTRAL, mode="train", tp=2, ep=8, etp=1, gpus=4)
    with pytest.raises(InputError, match="tp x dp x cp / etp = 4 ranks; use ep 4") as e:
        check_layout(load_model(MIXTRAL).architecture, job)
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="etp 3: .* use a divisor of 8"):
        Job(model=MIXTRAL, mode="train", tp=2, ep=4, etp=3, gpus=8)


def test_the_folded_all_to_all_stays_inside_the_node():
    """TP 8 on nodes of 8: unfolded, EP's ranks are 8 apart (past the TP group), on the network;
    folded with expert TP 1 they are neighbours, the 8 of one node on NVLink."""
    m, g = load_model(MIXTRAL), get_gpu("H100-SXM-80GB")
    topo = topology_for(g, gpus_per_node=8)
    kw = dict(model=m, mode="train", engine="megatron", gpus=64, tp=8, ep=8, zero=1,
              sequence_parallel=True, seq=4096)
    plain = estimate_speed(m, g, Job(**kw), measured=None, topology=topo).to_dict()["layout"]
    fold = estimate_speed(m, g, Job(etp=1, **kw), measured=None,
                          topology=topo).to_dict()["layout"]
    assert plain["links"]["ep"] != fold["links"]["ep"] == plain["links"]["tp"]
    assert fold["ep_comm_exposed_s"] < plain["ep_comm_exposed_s"]
