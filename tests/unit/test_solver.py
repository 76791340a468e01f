"""The solver: every suggestion, re-planned independently, fits; the direct queries are exact."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import InputError
from gpuplan.fit import plan
from gpuplan.hardware import get_gpu
from gpuplan.job import Job


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)

from gpuplan.memory import infer_memory, train_memory
from gpuplan.models import load_model
from gpuplan.solver import max_batch, max_seq, suggest

_MODELS = {n: load_model(n) for n in ("gpt2", "llama-3.2-1b", "llama-3.1-8b", "mistral-7b",
                                      "qwen2.5-7b", "phi-3-mini")}


def _replan(s):
    """The suggestion's job planned from scratch by the public front door."""
    if s.mode == "train":
        p = plan(s.job.with_(mode="train"), [s.gpu], search_gpu_counts=False, suggest=False)
        return p.train.total_bytes, p.gpus[0].usable_bytes
    i = infer_memory(load_model(s.job.model.name) if not isinstance(s.job.model, str)
                     else load_model(s.job.model), s.job, tensor_parallel=s.gpu_count)
    return i.total_bytes, get_gpu(s.gpu).memory_bytes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(_MODELS)),
       gpu=st.sampled_from(["T4", "RTX-4090", "A100-SXM-40GB", "H100-SXM-80GB", "L4"]),
       batch=st.sampled_from([1, 2, 4, 8]), seq=st.sampled_from([256, 1024, 2048]),
       precision=st.sampled_from(["mixed-bf16", "amp-bf16", "fp32"]),
       attention=st.sampled_from(["eager", "sdpa"]), mode=st.sampled_from(["train", "infer"]))
def test_every_suggestion_replanned_fits(name, gpu, batch, seq, precision, attention, mode):
    m = _MODELS[name]
    seq = min(seq, m.architecture.max_position_embeddings)
    job = Job(model=m, mode=mode, batch=batch, seq=seq, attention=attention,
              **({"precision": precision} if mode == "train" else {}))
    r = suggest(m, job, get_gpu(gpu), mode=mode)
    for s in r.suggestions:
        total, usable = _replan(s)
        assert total == s.peak_bytes
        assert total <= usable
    if r.suggestions:
        assert r.closest_miss is None
    else:
        assert "no change" in r.message


def test_a_free_fix_ranks_first_when_it_is_enough():
    # amp-bf16 Llama-3.1-8B at a small batch peaks in the foreach AdamW step (20 B/param on
    # H200's 150 GB: 160.6 GB); AdamW(fused=True) drops the 4 B/param temporary and costs nothing
    m = _MODELS["llama-3.1-8b"]
    r = suggest(m, Job(model=m, precision="amp-bf16", batch=1, seq=512),
                get_gpu("H200-SXM-141GB"))
    assert not r.fits_already
    first = r.suggestions[0]
    assert [c.knob for c in first.changes] == ["fused_optimizer"]
    assert first.peak_bytes <= get_gpu("H200-SXM-141GB").memory_bytes


def test_micro_batch_keeps_the_global_batch():
    m = _MODELS["gpt2"]
    job = Job(model=m, batch=32, seq=1024, grad_accum=2)
    r = suggest(m, job, get_gpu("T4"), top=10)
    mb = [s for s in r.suggestions if [c.knob for c in s.changes] == ["micro_batch"]]
    assert mb, r.message
    for s in mb:
        assert s.job.batch * s.job.grad_accum == 64


def test_checkpointing_cost_is_the_speed_models_recompute_share():
    from gpuplan.compute import flops_breakdown

    m = _MODELS["llama-3.2-1b"]
    job = Job(model=m, batch=16, seq=2048)
    r = suggest(m, job, get_gpu("A100-SXM-40GB"), top=10)
    full = [c for s in r.suggestions for c in s.changes if c.knob == "checkpointing"
            and c.value == "full"]
    assert full, r.message
    fb = flops_breakdown(m.architecture, J(batch=16, seq=2048, checkpointing="full"))
    assert full[0].extra_compute == pytest.approx(fb.recompute_flops / fb.model_flops)
    assert 0.25 < full[0].extra_compute < 0.40  # about one more forward: ~1/3 of the step


def test_no_feasible_change_says_so_with_the_closest_miss():
    # Llama-3.1-405B serving 64 x 8192 tokens on a T4 (16 GB), one change at a time: neither
    # 8-way tensor parallelism, nor 4-bit weights, nor the biggest GPU in the catalog alone
    m = load_model("llama-3.1-405b")
    r = suggest(m, Job(model=m, mode="infer", batch=64, seq=8192), get_gpu("T4"), mode="infer",
                max_changes=1)
    assert r.suggestions == ()
    assert r.closest_miss is not None and r.closest_miss.peak_bytes > r.usable_bytes
    assert r.message.startswith("no change gpuplan tries makes this infer job fit on T4")
    assert "closest:" in r.message


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_max_batch_is_the_largest_that_fits(mode):
    m = _MODELS["llama-3.2-1b"]
    g = get_gpu("RTX-4090")
    job = Job(model=m, mode=mode, seq=1024, checkpointing="full", fused_optimizer=True)
    b = max_batch(m, job, g, mode=mode)
    fn = train_memory if mode == "train" else infer_memory
    assert fn(m, job.with_(batch=b)).total_bytes <= g.memory_bytes
    assert fn(m, job.with_(batch=b + 1)).total_bytes > g.memory_bytes


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_max_seq_is_the_longest_that_fits(mode):
    m = _MODELS["llama-3.2-1b"]
    g = get_gpu("A100-SXM-40GB" if mode == "train" else "L4")
    job = Job(model=m, mode=mode, batch=8, checkpointing="full", fused_optimizer=True)
    s = max_seq(m, job, g, mode=mode)
    assert s < m.architecture.max_position_embeddings  # memory, not the architecture, limits
    if mode == "train":
        ok, over = job.with_(seq=s), job.with_(seq=s + 1)
        assert train_memory(m, ok).total_bytes <= g.memory_bytes
        assert train_memory(m, over).total_bytes > g.memory_bytes
    else:
        # the context grows, the prompt stays at its default (2048 tokens)
        ok, over = job.with_(context=s), job.with_(context=s + 1)
        assert infer_memory(m, ok).total_bytes <= g.memory_bytes
        assert infer_memory(m, over).total_bytes > g.memory_bytes


def test_max_seq_stops_at_the_architecture_limit():
    m = _MODELS["gpt2"]
    assert max_seq(m, Job(model=m, mode="infer"), get_gpu("H100-SXM-80GB"), mode="infer") == 1024


def test_max_batch_when_nothing_fits_is_an_input_error():
    m = _MODELS["llama-3.1-8b"]
    with pytest.raises(InputError, match="not even batch 1 fits on T4"):
        max_batch(m, Job(model=m, seq=2048), get_gpu("T4"))


def test_plan_carries_suggestions_into_json():
    p = plan(Job(model="llama-3.1-8b", batch=2, seq=1024), ["RTX-4090"])
    d = p.to_dict()
    assert d["suggestions"] and all(s["fits"] for s in d["suggestions"])
    assert d["solver"][0]["gpu"] == "RTX-4090"
    quiet = plan(Job(model="llama-3.1-8b", batch=2, seq=1024), None).to_dict()
    assert quiet["suggestions"] == []  # the default shortlist asks for no suggestions


# --- issue 12: suggestions agree with the other columns and rank software before hardware ----


def _hardware(s) -> bool:
    return any(c.knob in ("gpu", "zero", "tensor_parallel") for c in s.changes)


def test_gpu_count_offered_is_the_one_fit_says_suffices():
    # the repro: llama-3.1-8b mixed-bf16 on an H100 -- fit's "ZeRO-3 GPUs" column says 3, and
    # the suggestions offered "--gpus 4 --zero 3" beside it
    p = plan(Job(model="llama-3.1-8b", mode="train"), ["h100"], suggest=True)
    want = p.gpus[0].train_min_gpus
    assert want == 3
    m = load_model("llama-3.1-8b")
    r = suggest(m, Job(model=m, mode="train"), get_gpu("h100"), top=30)
    offered = {c.value for s in (*r.suggestions, *p.suggestions) for c in s.changes
               if c.knob == "zero"}
    assert offered and all(n <= want for n, z in offered if z == 3)
    assert (want, 3) in offered


def test_software_knobs_rank_before_more_or_other_hardware():
    m = load_model("llama-3.1-8b")
    r = suggest(m, Job(model=m, mode="train"), get_gpu("h100"), top=6)
    kinds = [_hardware(s) for s in r.suggestions]
    assert kinds == sorted(kinds)  # every software suggestion before every hardware one
    assert not kinds[0]


def test_pure_bf16_with_the_fused_step_is_offered():
    # pure bf16 + fused AdamW drops the master copy and the foreach temporary: 8 B/param
    m = load_model("llama-3.1-8b")
    r = suggest(m, Job(model=m, mode="train"), get_gpu("h100"))
    first = r.suggestions[0]
    assert first.job.precision == "bf16" and first.job.fused_optimizer
    assert first.peak_bytes == _replan(first)[0]
