"""fit's TP x PP column and the solver's layout change (issue 11, item 7).

The search (:mod:`gpuplan.memory.fewest`) prunes; every test here checks its answer against
something it does not use: the per-rank bytes by hand from the parameter counts, the activations
against Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv 2205.05198), Table 2, TP + SP row: a GPT layer saves ``s b h (34 + 5 a s / h) / t`` bytes
(16-bit activations, 1-byte dropout masks, eager attention), and minimality against plans of every
smaller layout, made here one by one.
"""

from __future__ import annotations

import json

import pytest

import gpuplan
from gpuplan.errors import InputError
from gpuplan.hardware import resolve_gpu
from gpuplan.job import Job
from gpuplan.memory import infer_memory, train_memory
from gpuplan.memory.fewest import LayoutFit, infer_layout, train_layout
from gpuplan.models import load_model, model_from_config_bytes
from gpuplan.solver import suggest

LEVEL = "expected"


def _usable(name: str) -> int:
    return resolve_gpu(name)[0].memory_bytes


def _fits(model, job: Job, usable: int) -> bool:
    try:
        return train_memory(model, job).total_bytes <= usable
    except gpuplan.InputError:
        return False


def _smaller_layouts_fit(model, job: Job, usable: int, below: int, tps, pps) -> list:
    """Every TP x PP x DP layout (ZeRO-3 over DP: the least memory; pipelines with pp
    micro-batches) on fewer than ``below`` GPUs that fits: planned one by one."""
    found = []
    for t in tps:
        for p in pps:
            for d in range(1, (below - 1) // (t * p) + 1):
                if t * p == 1:
                    continue
                lay = job.with_(tp=t, pp=p, gpus=t * p * d, zero=3 if d > 1 else 0,
                                sequence_parallel=t > 1,
                                micro_batches=max(p, job.grad_accum) if p > 1 else None)
                if _fits(model, lay, usable):
                    found.append((t, p, d))
    return found


# ---- training: TP x PP x ZeRO-1, states by hand ------------------------------------------

def test_tp_pp_zero1_states_per_rank_by_hand():
    """qwen2.5-7b, batch 4, on an RTX 4090: ZeRO-3 alone never fits (the activations of one
    GPU's micro-batch alone are too many); the layout column says tp 4 x pp 2 x dp 2 with
    ZeRO-1 on 16 GPUs. Its first stage's rank, by hand from the config's shapes."""
    m = load_model("qwen2.5-7b")
    usable = _usable("RTX-4090")
    p = gpuplan.plan(Job(model=m, mode="train", batch=4), ["RTX-4090"])
    v = p.gpus[0]
    assert v.train_min_gpus is None
    lay = v.train_layout
    assert (lay.tp, lay.pp, lay.dp, lay.zero, lay.gpus) == (4, 2, 2, 1, 16)
    assert lay.sequence_parallel and lay.micro_batches == 2  # at least pp in flight
    r = train_memory(m, lay.apply(p.job))
    assert r.total_bytes == lay.peak_bytes <= usable
    # Qwen2.5-7B: h 3584, 28 layers, 28 heads, 4 K/V heads of 128, MLP 18944, vocab 152064,
    # untied; q/k/v with biases. Per TP rank (t = 4): q and o a quarter, one whole K/V head
    # (4 heads / 4), gate/up/down a quarter of the MLP width, RMSNorms replicated; the
    # embedding vocab-parallel. Stage 0 of 2: layers 0-13 and the embedding.
    h, t = 3584, 4
    q = (h * h + h) // t
    kv = 2 * (128 * h + 128)
    o = h * h // t
    mlp = 3 * (18944 // t) * h
    norms = 2 * h
    layer = q + kv + o + mlp + norms
    params = 14 * layer + (152064 // t) * h
    assert r.stage["index"] == 0 and r.stage["params_per_rank"] == params == 952_026_880
    # mixed-bf16 AdamW, ZeRO-1 over dp 2: 16-bit weights and gradients whole, the fp32 master
    # copy and the two fp32 Adam states split over the 2 data-parallel ranks
    assert r.weights_bytes == 2 * params
    assert r.phases["optimizer"] >= 2 * params + 2 * params + 4 * params // 2 + 8 * params // 2
    assert r.master_weights_bytes == 4 * params // 2
    assert r.optimizer_bytes == 8 * params // 2


def test_tp_pp_zero1_is_the_fewest():
    """No TP x PP layout on fewer than 16 GPUs fits (each planned here, ZeRO-3 over DP)."""
    m = load_model("qwen2.5-7b")
    job = Job(model=m, mode="train", batch=4)
    found = _smaller_layouts_fit(m, job, _usable("RTX-4090"), 16, (1, 2, 4), (1, 2, 4, 7, 14))
    assert found == []


# ---- training: TP + SP activations against Korthikanti ----------------------------------

def _gpt2_medium_exact_gelu():
    """GPT-2 medium's shapes with the exact (fused) GELU of Korthikanti's layer; the catalog's
    gelu_new is a tanh composition that saves more."""
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 1024,
           "n_head": 16, "n_layer": 24, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257,
           "activation_function": "gelu", "attn_pdrop": 0.1, "resid_pdrop": 0.1,
           "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-5}
    return model_from_config_bytes(json.dumps(cfg).encode(), name="gpt2-medium-gelu")


def test_tp_sp_layout_activations_are_korthikanti_and_weights_by_hand():
    m = _gpt2_medium_exact_gelu()
    s, b, h, a = 1024, 16, 1024, 16
    job = Job(model=m, mode="train", batch=b, seq=s, attention="eager")
    usable = _usable("RTX-4090")
    memo: dict = {}
    lay = train_layout(m, job, usable, LEVEL, memo=memo)
    assert (lay.tp, lay.pp, lay.dp, lay.gpus) == (4, 1, 1, 4)
    r = train_memory(m, lay.apply(job))
    t = lay.tp
    # Korthikanti Table 2, TP t + SP: s b h (34 + 5 a s / h) / t, plus the two LayerNorms'
    # fp32 mean and rstd per row (2 x 2 x 4 s b / t) that the closed form leaves out
    per_layer = (34 * s * b * h + 5 * a * s * s * b + 16 * s * b) // t
    assert r.activation_detail["per_layer_saved_bytes"] == [per_layer]
    # per TP rank: fused QKV (Conv1D 1024 x 3072, bias 3072) and fc (1024 x 4096, bias 4096)
    # split by columns, both c_proj split by rows with their biases replicated, LayerNorms
    # replicated; wte vocab-parallel (50257 rows padded up to 4 x 12565), wpe replicated, the
    # head tied to wte
    layer = ((h * 3 * h + 3 * h) // t + h * h // t + h + (h * 4 * h + 4 * h) // t
             + 4 * h * h // t + h + 4 * h)
    params = 24 * layer + 12565 * h + 1024 * h + 2 * h
    assert r.stage["params_per_rank"] == params == 89_605_120
    # mixed-bf16 AdamW, one data-parallel rank: 2 + 4 + 8 bytes per parameter of the rank
    assert (r.weights_bytes, r.master_weights_bytes, r.optimizer_bytes) == (
        2 * params, 4 * params, 8 * params)
    assert r.total_bytes == lay.peak_bytes <= usable


# ---- fewer GPUs than ZeRO-3 alone: verdict and solver agree ------------------------------

def test_layout_beats_zero3_and_the_solver_offers_the_same():
    m = load_model("llama-3.1-8b")
    usable = _usable("RTX-4090")
    p = gpuplan.plan(Job(model=m, mode="train"), ["RTX-4090"], suggest=True)
    v = p.gpus[0]
    lay = v.train_layout
    assert lay is not None and v.train_min_gpus is not None and lay.gpus < v.train_min_gpus
    # independently: ZeRO-3 alone does not fit on the layout's count, the layout does
    assert not _fits(m, p.job.with_(gpus=lay.gpus, zero=3), usable)
    assert train_memory(m, lay.apply(p.job)).total_bytes == lay.peak_bytes <= usable
    # the solver offers that layout, with the same numbers
    offered = [s for s in p.solver[0].suggestions if s.changes[0].knob == "layout"]
    assert len(offered) == 1
    s = offered[0]
    assert (s.gpu_count, s.peak_bytes) == (lay.gpus, lay.peak_bytes)
    assert s.summary.startswith(f"--tp {lay.tp} --pp {lay.pp} --gpus {lay.gpus}")
    assert s.changes[0].tier == 2  # more hardware: after every software change
    first_hw = next(i for i, x in enumerate(p.solver[0].suggestions)
                    if any(c.tier == 2 for c in x.changes))
    assert all(not any(c.tier == 2 for c in x.changes)
               for x in p.solver[0].suggestions[:first_hw])


def test_the_suggested_options_give_the_same_peak(cli):
    """The solver's text, given back to fit, plans the same job: the same per-GPU peak."""
    m = load_model("llama-3.1-8b")
    lay = train_layout(m, Job(model=m, mode="train"), _usable("RTX-4090"), LEVEL)
    code, out, err = cli("fit", "llama-3.1-8b", "--mode", "train", "--gpu", "RTX-4090",
                         *lay.flags(Job(model=m)).split(), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["train"]["per_gpu"]["total_bytes"] == lay.peak_bytes
    assert d["gpus"][0]["train_fits"] is True


def test_no_layout_where_zero3_alone_is_already_the_fewest():
    """llama-3.1-8b on an H100: ZeRO-3 over 3 GPUs fits; on 2 GPUs nothing does, layout or not
    (the two TP x PP layouts of 2 GPUs planned here) -- no layout is offered."""
    m = load_model("llama-3.1-8b")
    usable = _usable("H100-SXM-80GB")
    p = gpuplan.plan(Job(model=m, mode="train"), ["H100-SXM-80GB"], suggest=True)
    v = p.gpus[0]
    assert v.train_min_gpus == 3 and v.train_layout is None
    assert _smaller_layouts_fit(m, p.job, usable, 3, (1, 2), (1, 2)) == []
    d = v.to_dict()
    assert d["train_min_gpus_layout"] is None and d["train_layout"] is None
    assert all(c.knob != "layout" for s in p.solver[0].suggestions for c in s.changes)


# ---- serving: pipeline stages across nodes ----------------------------------------------

def test_serving_405b_bf16_pipelines_across_nodes():
    m = load_model("llama-3.1-405b")
    usable = _usable("H100-SXM-80GB")
    job = Job(model=m, mode="infer")
    p = gpuplan.plan(job, ["H100-SXM-80GB"])
    v = p.gpus[0]
    # TP within one node (8 GPUs) is not enough: 405B bf16 weights are 810 GB
    assert infer_memory(m, job.with_(tp=8, gpus=8)).total_bytes > usable
    assert v.infer_min_gpus == 16  # tensor parallel alone: across two nodes
    lay = v.infer_layout
    assert (lay.tp, lay.pp, lay.gpus) == (4, 3, 12)
    r = infer_memory(m, lay.apply(job))
    assert r.total_bytes == lay.peak_bytes <= usable
    # the fullest stage's rank holds 42 of 126 layers, split 4 ways, by hand: q and o a quarter
    # of 16384 x 16384, 2 of the 8 K/V heads of 128, a quarter of the 53248-wide MLP, two
    # replicated RMSNorms; the first stage the vocab-parallel embedding, the last the final
    # norm and the head
    h, t = 16384, 4
    layer = 2 * h * h // t + 2 * 256 * h + 3 * (53248 // t) * h + 2 * h
    stage = {0: 42 * layer + (128256 // t) * h, 2: 42 * layer + h + (128256 // t) * h}
    assert r.weights_bytes == 2 * stage[r.stage["index"]]  # bf16
    # and no layout of fewer GPUs serves it (TP within a node x stages dividing 126 layers)
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 3, 6, 7, 9):
            if 1 < tp * pp < 12:
                assert infer_memory(m, job.with_(tp=tp, pp=pp, gpus=tp * pp)).total_bytes \
                    > usable, (tp, pp)


def test_serving_layout_only_where_tp_within_a_node_is_not_enough():
    m = load_model("mixtral-8x7b")
    v = gpuplan.plan(Job(model=m, mode="infer"), ["A100-SXM-80GB"]).gpus[0]
    assert v.infer_min_gpus == 2 and v.infer_layout is None


def test_the_solver_offers_the_serving_layout():
    m = load_model("llama-3.1-405b")
    gpu = resolve_gpu("H100-SXM-80GB")[0]
    job = Job(model=m, mode="infer")
    lay = infer_layout(m, job, gpu.memory_bytes, LEVEL)
    r = suggest(m, job, gpu, mode="infer")
    s = next(s for s in r.suggestions if s.changes[0].knob == "layout")
    assert s.summary == f"--tp {lay.tp} --pp {lay.pp} --gpus {lay.gpus}"
    assert (s.gpu_count, s.peak_bytes) == (lay.gpus, lay.peak_bytes)


# ---- the contract ------------------------------------------------------------------------

def test_json_fields(cli):
    code, out, err = cli("fit", "llama-3.1-8b", "--gpu", "RTX-4090", "--gpu", "H100-SXM-80GB",
                         "--json")
    assert code == 0, err
    gpus = json.loads(out)["gpus"]
    for g in gpus:
        for k in ("train_min_gpus_zero3", "infer_min_gpus_tensor_parallel",
                  "train_min_gpus_layout", "train_layout", "infer_min_gpus_layout",
                  "infer_layout"):
            assert k in g
    g = gpus[0]
    assert g["train_min_gpus_layout"] == g["train_layout"]["gpus"] == 8
    assert set(g["train_layout"]) == {"tp", "pp", "dp", "zero", "gpus", "sequence_parallel",
                                      "micro_batches", "peak_bytes"}
    assert gpus[1]["train_layout"] is None


def test_table_shows_the_layout(cli):
    code, out, err = cli("fit", "llama-3.1-8b", "--gpu", "RTX-4090", "--mode", "train")
    assert code == 0, err
    assert "TP x PP (train)" in out and "8 (tp8 x pp1 x dp1)" in out


def test_layout_flags_and_label():
    lay = LayoutFit(mode="train", gpus=48, tp=8, pp=2, zero=1, sequence_parallel=True,
                    micro_batches=2, peak_bytes=0)
    assert lay.dp == 3
    assert lay.flags(Job(model="llama-3.1-8b")) == (
        "--tp 8 --pp 2 --gpus 48 --zero 1 --sequence-parallel --micro-batches 2")
    assert lay.label() == "tp8 x pp2 x dp3, ZeRO-1"


def test_a_layout_suggestion_counts_micro_batches_where_the_job_does():
    """A job that accumulates with --grad-accum 2 is offered a 4-stage pipeline of 4
    micro-batches as --grad-accum 4 (its own knob), so following the suggestion does not give
    two different counts, which a Job refuses (a pipeline's micro-batches are its accumulation
    steps; the exporters refused them before)."""
    lay = LayoutFit(mode="train", gpus=32, tp=8, pp=4, zero=1, sequence_parallel=True,
                    micro_batches=4, peak_bytes=0)
    job = Job(model="llama-3.1-8b", grad_accum=2)
    assert lay.flags(job) == "--tp 8 --pp 4 --gpus 32 --zero 1 --sequence-parallel --grad-accum 4"
    moved = job.with_(**lay.changes(job))  # validated: one count
    assert (moved.grad_accum, moved.micro_batches) == (4, None)
    with pytest.raises(InputError, match=r"^micro_batches 4 and grad_accum 2 differ: a "
                                         r"pipeline's micro-batches are its accumulation steps"):
        job.with_(tp=8, pp=4, gpus=32, micro_batches=4)
    Job(model="llama-3.1-8b", pp=2, gpus=2, micro_batches=4, grad_accum=4)  # the same count


# ---- the pruned search against planning every layout -------------------------------------

def _fewest_by_planning_everything(model, job: Job, usable: int, below: int | None):
    """The fewest GPUs over every TP (divisor of the heads, <= 8) x PP (divisor of the layers,
    <= 32) x DP layout on fewer than ``below`` GPUs, ZeRO-3 over DP: a bisection over DP per
    pair (memory falls as DP grows), nothing ruled out by a bound."""
    arch = model.architecture
    hi = (below - 1) if below else 4096
    best = None
    for t in [t for t in range(1, 9) if arch.num_heads % t == 0]:
        for p in [p for p in range(1, 33) if arch.num_layers % p == 0]:
            if t * p == 1 or hi // (t * p) < 1:
                continue

            def fits(d, t=t, p=p):
                lay = job.with_(tp=t, pp=p, gpus=t * p * d, zero=3 if d > 1 else 0,
                                sequence_parallel=t > 1,
                                micro_batches=max(p, job.grad_accum) if p > 1 else None)
                return _fits(model, lay, usable)

            top = hi // (t * p)
            if not fits(top):
                continue
            lo = 1
            while lo < top:
                mid = (lo + top) // 2
                lo, top = (lo, mid) if fits(mid) else (mid + 1, top)
            n = t * p * lo
            best = n if best is None else min(best, n)
    return best


@pytest.mark.parametrize("name,kw,gpu", [
    ("llama-3.1-8b", {}, "T4"),
    ("qwen2.5-7b", {"batch": 4}, "RTX-4090"),
    ("mixtral-8x7b", {}, "L40S"),
    ("llama-2-13b", {"checkpointing": "full", "batch": 8}, "A100-SXM-40GB"),
])
def test_the_search_finds_what_planning_every_layout_finds(name, kw, gpu):
    m = load_model(name)
    job = Job(model=m, mode="train", **kw)
    v = gpuplan.plan(job, [gpu]).gpus[0]
    want = _fewest_by_planning_everything(m, job, _usable(gpu), v.train_min_gpus)
    assert (v.train_layout.gpus if v.train_layout else None) == want


def test_the_solver_offers_1f1b_where_interleaving_overflows():
    """Llama 3 405B at the paper's 8,192-GPU layout (TP8 PP16, 32 micro-batches, one-layer
    chunks: interleaved:8) plans past an H100's memory: stage 1 holds 2 x 14 + 7 x 16 + 1 = 141
    one-layer chunks in flight, 1F1B 15 micro-batches of 8 layers = 120. The solver offers the
    schedule change, planned as the same job under 1F1B, at its bubble's cost: (p - 1) / m
    instead of (p - 1) / (v m) = 15/32 - 15/256 of the compute."""
    m = load_model("llama-3.1-405b")
    job = Job(model=m, mode="train", gpus=8192, tp=8, pp=16, batch=1, grad_accum=32, seq=8192,
              zero=2, sequence_parallel=True, pp_schedule="interleaved:8",
              pp_embedding_part=True, pp_loss_part=True, runtime="compile")
    usable = _usable("H100")
    assert train_memory(m, job).total_bytes > usable
    sol = suggest(m, job, resolve_gpu("H100")[0], mode="train")
    offered = [s for s in sol.suggestions if [c.knob for c in s.changes] == ["pp_schedule"]]
    assert len(offered) == 1
    s = offered[0]
    assert s.job.pp_schedule == "1f1b"
    assert s.peak_bytes == train_memory(m, job.with_(pp_schedule="1f1b")).total_bytes <= usable
    assert s.changes[0].extra_compute == pytest.approx(15 / 32 - 15 / 256)
