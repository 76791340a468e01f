"""Memory per GPU under a parallel layout (issue 11): TP/SP, PP, CP, EP, each against a hand
calculation or a published closed form, plus properties.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv 2205.05198), Table 2: activation bytes per layer of a GPT layer (16-bit activations,
1-byte dropout masks, no flash attention)

    no parallelism    s b h (34 + 5 a s / h)
    TP t              s b h (10 + 24 / t + 5 a s / (h t))
    TP t + SP         s b h / t (34 + 5 a s / h)
    selective recompute drops the 5 a s / h term.

gpuplan shards its per-tensor replay (heads and MLP width per rank; the residual stream at 1/t of
the rows under SP) and must give these exactly, plus the LayerNorms' fp32 statistics the forms
leave out (16 s b; 16 s b / t under SP).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.memory import activations as A
from gpuplan.memory import infer_memory, train_memory
from gpuplan.memory.activations.profile import Shard
from gpuplan.parallel import check_layout, in_flight, rank_model, stage_layers
from gpuplan.models import load_model, model_from_config_bytes
from test_activations import _model, gpt_layer, ln_stats


def _layer_saved(m, t, sp, checkpointing="none", b=1, s=2048):
    job = Job(model=m, attention="eager", batch=b, seq=s, tp=t, gpus=t, sequence_parallel=sp,
              checkpointing=checkpointing)
    rank = rank_model(m, job, 0)
    rjob = job.with_(tp=1, gpus=1, sequence_parallel=False)
    prof = A.step_profile(rank, rjob, shard=Shard(sp=t if sp else 1))
    return prof.layers[0][1].saved(b, s)


@pytest.mark.parametrize("h,a,s,b", [(1024, 16, 2048, 1), (4096, 32, 2048, 4),
                                     (12288, 96, 2048, 1)])
@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_parallel(h, a, s, b, t):
    m = _model(gpt_layer(h=h, a=a))
    assert _layer_saved(m, t, False, b=b, s=s) * t == (
        s * b * h * (10 * t + 24) + 5 * a * s * s * b + ln_stats(s, b) * t)


@pytest.mark.parametrize("h,a,s,b", [(1024, 16, 2048, 1), (4096, 32, 2048, 4),
                                     (12288, 96, 2048, 1)])
@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_sequence_parallel(h, a, s, b, t):
    m = _model(gpt_layer(h=h, a=a))
    assert _layer_saved(m, t, True, b=b, s=s) * t == (
        34 * s * b * h + 5 * a * s * s * b + ln_stats(s, b))


@pytest.mark.parametrize("t,sp", [(2, False), (8, False), (2, True), (8, True)])
def test_korthikanti_selective_recompute_drops_the_s2_term(t, sp):
    h, a, s, b = 1024, 16, 2048, 1
    m = _model(gpt_layer(h=h, a=a))
    got = _layer_saved(m, t, sp, checkpointing="selective")
    want = (34 * s * b * h + ln_stats(s, b)) if sp else \
        (s * b * h * (10 * t + 24) + ln_stats(s, b) * t)
    assert got * t == want


# ---- TP: parameters per rank --------------------------------------------------------------

@pytest.mark.parametrize("t", [2, 4, 8])
def test_llama_layer_weights_per_tp_rank(t):
    m = load_model("llama-3.1-8b")
    rank = rank_model(m, Job(model=m, tp=t, gpus=t), 0)
    per_layer = sum(x.numel for x in rank.tensors if "{i}" in x.name)
    # q, o 4096 x 4096; k, v 1024 x 4096 (8 K/V heads); gate, up, down 14336 x 4096: split by t.
    # the two RMSNorm weights (4096 each) are replicated.
    sharded = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096
    assert per_layer == sharded // t + 2 * 4096
    emb = next(x for x in rank.tensors if x.component == "embeddings")
    assert emb.shape == (128256 // t, 4096)  # vocab-parallel (Megatron's default)


def test_kv_heads_replicated_beyond_their_count():
    m = load_model("llama-3.1-70b")  # 8 K/V heads
    rank = rank_model(m, Job(model=m, tp=16, gpus=16), 0)
    k = next(x for x in rank.tensors if x.module == "k_proj")
    assert k.shape == (128, 8192)  # one whole head of 128 per rank
    assert rank.architecture.num_kv_heads == 1


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tp_shards_times_degree_give_back_the_whole(t):
    m = load_model("llama-3.1-8b")
    rank = rank_model(m, Job(model=m, tp=t, gpus=t), 0)
    replicated = sum(x.total for x in rank.tensors if x.component == "norms")
    assert (rank.params.total - replicated) * t + replicated == m.params.total


# ---- PP ---------------------------------------------------------------------------------

def test_stage_split_rules():
    assert [len(s) for s in stage_layers(32, 4)] == [8, 8, 8, 8]
    # uneven: the first layers % stages stages take one more (DeepSpeed partition_uniform)
    assert [len(s) for s in stage_layers(30, 4)] == [8, 8, 7, 7]
    assert stage_layers(30, 4)[2] == tuple(range(16, 23))
    # interleaved, 2 chunks: stage 0 holds parts 0 and 2 of 4
    assert stage_layers(16, 2, 2) == (tuple(range(0, 4)) + tuple(range(8, 12)),
                                      tuple(range(4, 8)) + tuple(range(12, 16)))


def test_stage_params_sum_to_the_model():
    m = load_model("llama-3.1-8b")  # untied: embedding on stage 0, head on the last
    job = Job(model=m, pp=4, gpus=4)
    assert sum(rank_model(m, job, i).params.total for i in range(4)) == m.params.total
    assert rank_model(m, job, 0).params.by_component.get("head", 0) == 0
    assert rank_model(m, job, 3).params.by_component.get("embeddings", 0) == 0


def test_in_flight_micro_batches_per_schedule():
    p, m = 4, 8
    assert [in_flight("gpipe", p, i, m) for i in range(p)] == [8, 8, 8, 8]
    assert [in_flight("1f1b", p, i, m) for i in range(p)] == [4, 3, 2, 1]
    assert in_flight("1f1b", p, 0, 2) == 2  # fewer micro-batches than stages
    # interleaved, v chunks: first stage p v + p - 1 chunks = L (1 + (p - 1) / (p v)) layers
    # of activations (Korthikanti et al. 2022 sec. 4.2.3)
    v = 2
    assert in_flight("interleaved", p, 0, m, v) == p * v + p - 1
    assert in_flight("interleaved", p, p - 1, m, v) == (v - 1) * p + 1


def test_pp_first_stage_holds_p_micro_batches():
    """1F1B: stage 0 keeps p micro-batches of its layers (plus its one micro-batch's peak)."""
    m = load_model("llama-3.2-1b")
    base = dict(model=m, mode="train", batch=2, seq=1024, checkpointing="full", micro_batches=8)
    r = train_memory(m, Job(**base, pp=4, gpus=4))
    assert r.layout["pp"] == 4 and r.stage["stages"] == 4
    assert len(r.stage["stage_totals_bytes"]) == 4
    assert r.total_bytes == max(r.stage["stage_totals_bytes"])
    one = train_memory(m, Job(**base, pp=4, gpus=4, pp_schedule="gpipe"))
    assert one.activations_bytes > r.activations_bytes  # GPipe keeps all 8 micro-batches


# ---- CP, EP ------------------------------------------------------------------------------

def test_cp_shards_the_sequence_and_adds_two_kv_blocks():
    m = load_model("llama-3.1-8b")
    s, cp = 8192, 4
    job = Job(model=m, mode="train", batch=1, seq=s, cp=cp, gpus=cp, zero=1)
    r = train_memory(m, job)
    # the timeline at s / cp tokens, plus two K/V blocks (b x s/cp x 8 heads x 128 x 2 B, K and
    # V) in forward, four (with dK/dV) in backward
    kv_block = 2 * 1 * (s // cp) * 8 * 128 * 2
    ref = A.train_activations(rank_model(m, job, 0), job.with_(cp=1, gpus=cp),
                              grad_bytes=r.gradients_bytes, seq=s // cp)
    assert r.phases["backward"] - r.phases["optimizer"] == (
        ref.backward_peak + ref.backward_temporaries + ref.backward_grads + 4 * kv_block
        - r.gradients_bytes - _opt_step_tmp(r))


def _opt_step_tmp(r):
    return next((l.bytes for l in r.lines if l.key == "temporaries"), 0) \
        if r.peak_phase == "optimizer" else 0


def test_ep_experts_per_rank():
    m = load_model("mixtral-8x7b")
    rank = rank_model(m, Job(model=m, ep=4, gpus=4), 0)
    w1 = next(x for x in rank.tensors if x.module == "w1")
    assert w1.count == 32 * 8 // 4 and w1.shape == (14336, 4096)
    rank = rank_model(m, Job(model=m, ep=4, tp=2, gpus=8), 0)
    w2 = next(x for x in rank.tensors if x.module == "w2")
    assert w2.count == 64 and w2.shape == (4096, 14336 // 2)


def test_ep_zero_shards_experts_over_the_expert_data_parallel_group():
    m = load_model("mixtral-8x7b")
    r = train_memory(m, Job(model=m, mode="train", ep=4, gpus=8, zero=1, seq=512))
    rank = rank_model(m, Job(model=m, ep=4, gpus=8), 0)
    experts = sum(x.total for x in rank.tensors if x.component == "experts")
    dense = rank.params.total - experts
    # Adam states 8 B/param: dense over dp 8, experts (2 per rank) over dp / ep = 2
    assert abs(r.optimizer_bytes - (8 * dense // 8 + 8 * experts // 2)) <= 8


# ---- checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,msg", [
    (dict(tp=3, gpus=3), "tp 3: llama-3.1-8b has 32 attention heads, not divisible by 3; use "
                         "tp 1 (or 2 or 4 with gpus a multiple of it)"),
    (dict(tp=3, gpus=12), "not divisible by 3; use tp 2 or 4"),  # 12 GPUs take either
    (dict(tp=3, pp=2, gpus=6), "use tp 1 (or 2 or 4 with gpus a multiple of it x 2)"),
    (dict(pp=64, gpus=64), "pp 64: llama-3.1-8b has 32 layers"),
    (dict(ep=2, gpus=2), "ep 2: llama-3.1-8b has no experts"),
    (dict(cp=2, gpus=2, attention="eager"), "use attention sdpa"),
    (dict(cp=2, gpus=2, seq=1026), "seq 1026"),
])
def test_layout_errors_name_the_value_and_the_way_out(kw, msg):
    m = load_model("llama-3.1-8b")
    with pytest.raises(InputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        train_memory(m, Job(model=m, mode="train", **kw))


def test_experts_not_divisible_by_ep():
    m = load_model("mixtral-8x7b")
    with pytest.raises(InputError, match="ep 3: .* 8 experts, not divisible by 3; use ep 2 or 4"):
        check_layout(m.architecture, Job(model=m, ep=3, gpus=3))


# ---- properties --------------------------------------------------------------------------

_SMALL = ["llama-3.2-1b", "qwen2.5-0.5b", "gpt2"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_SMALL), b=st.integers(1, 4), s=st.sampled_from([256, 1024]),
       zero=st.sampled_from([0, 1, 2, 3]), ck=st.sampled_from(["none", "full"]))
def test_memory_per_gpu_never_grows_with_tp_or_cp(name, b, s, zero, ck):
    """At a fixed number of GPUs (8), more TP or CP (and so less DP) never needs more memory per
    GPU: the ZeRO group dp x cp keeps its size under CP, TP splits what it does not replicate."""
    m = load_model(name)
    base = dict(model=m, mode="train", batch=b, seq=s, zero=zero, checkpointing=ck, gpus=8)
    heads = m.architecture.num_heads
    tps = [t for t in (1, 2, 4) if heads % t == 0 and m.architecture.num_kv_heads % t == 0]
    totals = [train_memory(m, Job(**base, tp=t)).total_bytes for t in tps]
    assert totals == sorted(totals, reverse=True)
    totals = [train_memory(m, Job(**base, cp=c)).total_bytes for c in (1, 2, 4)]
    assert totals == sorted(totals, reverse=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_SMALL), b=st.integers(1, 4), zero=st.sampled_from([0, 1]))
def test_model_states_never_grow_with_pp(name, b, zero):
    """Each stage's model states shrink with more stages (1F1B keeps the first stage's
    activations about level: p micro-batches of L / p layers)."""
    m = load_model(name)
    base = dict(model=m, mode="train", batch=b, seq=512, zero=zero, micro_batches=8)
    states = [train_memory(m, Job(**base, pp=p, gpus=p * 2)).model_states_bytes
              for p in (1, 2, 4)]
    assert states == sorted(states, reverse=True)


# ---- inference ---------------------------------------------------------------------------

@pytest.mark.parametrize("t", [2, 4, 8])
def test_serving_kv_cache_per_tp_rank(t):
    m = load_model("llama-3.1-70b")
    job = Job(model=m, mode="infer", batch=4, seq=1024, context=4096)
    whole = infer_memory(m, job)
    r = infer_memory(m, job.with_(tp=t, gpus=t))
    assert r.kv_cache_bytes * t == whole.kv_cache_bytes  # 8 K/V heads split over t <= 8
    assert r.layout["tp"] == t


def test_serving_pipeline_stages_split_the_cache_by_layers():
    m = load_model("llama-3.1-8b")  # 32 layers
    job = Job(model=m, mode="infer", batch=4, seq=1024, context=4096)
    r = infer_memory(m, job.with_(pp=4, gpus=4))
    assert r.kv_cache_full_bytes * 4 == infer_memory(m, job).kv_cache_full_bytes


# ---- published layouts -------------------------------------------------------------------

def test_bloom_176b_layout_fits_in_80gb():
    """BLOOM-176B trained with TP 4 x PP 12 x DP 8 on 384 A100-80GB, micro-batch 2, global batch
    2048, full recompute, bf16 with fp32 master and Adam sharded over DP (BigScience
    tr11-176B-ml README and slurm script, bigscience-workshop/bigscience@e726b15; runs.json
    "bloom176b-a100-x384-iter85376"). gpuplan's GPT-style replay of that shape (ALiBi instead of
    learned positions: no parameters either way) must fit on 80 GB, the memory it ran in.
    Megatron-DeepSpeed's BF16_Optimizer also keeps an unsharded fp32 gradient buffer (+4 B per
    rank parameter, ~18.5 GB here) that the mixed-bf16 recipe does not; with it the run still
    fits (the README's ~60 GB per GPU is approximate and not asserted). The job is the run's
    one Job (benchmarks/validate_speed.py's job_of: engine megatron, the embedding and the head
    as pipeline parts, as its speed check times it)."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    from validate_speed import job_of

    run = next(r for r in json.loads((root / "benchmarks/published/runs.json").read_text())["runs"]
               if r["id"] == "bloom176b-a100-x384-iter85376")
    cfg = {"model_type": "gpt2", "n_embd": 14336, "n_layer": 70, "n_head": 112,
           "n_inner": 57344, "vocab_size": 250880, "n_positions": 2048,
           "activation_function": "gelu", "tie_word_embeddings": True}
    m = model_from_config_bytes(json.dumps(cfg).encode(), name="bloom-176b-shape")
    assert round(m.params.total / 1e9) == 176
    job = job_of(run)
    assert (job.tp, job.pp, job.gpus, job.batch, job.grad_accum, job.zero, job.checkpointing) == (
        4, 12, 384, 2, 2048 // (2 * 8), 1, "full")
    r = train_memory(m, job)
    rank_params = r.stage["params_per_rank"]
    assert r.total_bytes + 4 * rank_params < 80e9
    assert r.stage["index"] == 0  # the embedding stage with 12 micro-batches in flight


def test_distributed_checkpoints_keep_a_tp_share_of_each_layer_input():
    """Megatron's --distribute-saved-activations: full checkpointing keeps 1/t of each layer's
    input on a TP rank. At the end of the forward (all 80 inputs kept) the saving is exactly
    80 x (b s h x 2 bytes) x (1 - 1/8); and the plan says so."""
    from gpuplan.job import Job
    from gpuplan.memory import train_memory
    from gpuplan.models import load_model

    m = load_model("llama-3.1-70b")
    base = dict(model=m, mode="train", gpus=8, tp=8, batch=2, seq=4096, checkpointing="full")
    whole = train_memory(m, Job(**base)).to_dict()["phases"]
    split = train_memory(m, Job(**base, distribute_checkpoints=True))
    layer_input = 2 * 4096 * 8192 * 2
    assert whole["forward"] - split.to_dict()["phases"]["forward"] == 80 * layer_input * 7 // 8
    act = next(x for x in split.to_dict()["lines"] if x["key"] == "activations")
    assert "split over 8 TP ranks" in act["note"]


@pytest.mark.parametrize("kw,needle", [
    (dict(gpus=1, checkpointing="full"), "add tp N"),
    (dict(gpus=8, tp=8, checkpointing="selective"), "add checkpointing full"),
    (dict(gpus=8, tp=8, checkpointing="full", sequence_parallel=True), "already split"),
])
def test_distributed_checkpoints_need_tp_and_full_checkpointing(kw, needle):
    from gpuplan.errors import InputError
    from gpuplan.job import Job

    with pytest.raises(InputError, match=needle):
        Job(model="llama-3.1-8b", mode="train", distribute_checkpoints=True, **kw)
