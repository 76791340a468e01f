"""DeepSpeed ZeRO-3's gathered parameters (gpuplan.engines.zero3), against hand calculations from
the coordinator's rules (deepspeed/runtime/zero/partitioned_param_coordinator.py, 0.19.8):
prefetch while fewer than min(max_live - available, bucket) elements are chosen, release unless
used again within the reuse distance, never release parameters of at most the persistence
threshold."""

from __future__ import annotations

import json
import pytest

from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.memory.states import train_states
from gpuplan.engines.zero3 import MAX_LIVE, PERSISTENCE, deepspeed_gathered
from gpuplan.models import load_model, model_from_config_bytes


def _gpt(h: int, layers: int, vocab: int = 51200, seq: int = 2048):
    config = {"model_type": "gpt2", "n_embd": h, "n_layer": layers, "n_head": 128,
              "n_inner": 4 * h, "vocab_size": vocab, "n_positions": seq,
              "activation_function": "gelu_new", "tie_word_embeddings": False}
    return model_from_config_bytes(json.dumps(config).encode(), name=f"gpt-h{h}")


def test_530b_gathers_a_projection_and_the_prefetched_fc1():
    """Narayanan et al. 2021's 530B (h 20,480, 105 layers): every Linear is past the live cap
    but the attention output projection (h^2 = 419,430,400 < 1e9). So the coordinator prefetches
    only while that one is gathered -- the next parameter it pops is fc1's (4h^2): h^2 + 4h^2 =
    2,097,152,000 at most. Persisted: each layer's two LayerNorms (2 x 2h) and four biases
    (3h + h + 4h + h), the final LayerNorm (2h): 13h x 105 + 2h = 27,996,160."""
    h = 20480
    g = deepspeed_gathered(_gpt(h, 105), full_checkpointing=True)
    assert g.live == h * h + 4 * h * h
    assert g.persisted == 13 * h * 105 + 2 * h
    assert "c_proj" in g.where and "c_fc" in g.where


def test_530b_weight_traffic_per_step():
    """What the coordinator all-gathers in one step of the 530B (the speed model's ZeRO-3
    traffic). Partitioned (freed after use): 12h^2 a layer (c_attn 3h^2, attention c_proj h^2,
    c_fc 4h^2, MLP c_proj 4h^2; biases and norms persist), the word and position embeddings and
    the untied head. Without checkpointing each is fetched for its forward and again for its
    backward, except the head, whose backward follows its forward at once (within the 1e9
    reuse distance): 2 x partitioned - head. With full checkpointing a layer is fetched again
    for its recompute, and its backward then re-fetches all but the MLP's c_proj -- used right
    after its recompute, while c_fc's next use lies past the 1.68e9 elements of that c_proj:
    per layer 12h^2 + 12h^2 + 8h^2."""
    h, layers, vocab, seq = 20480, 105, 51200, 2048
    emb, pos, head = vocab * h, seq * h, vocab * h
    partitioned = layers * 12 * h * h + emb + pos + head
    plain = deepspeed_gathered(_gpt(h, layers), full_checkpointing=False)
    assert plain.partitioned == partitioned
    assert plain.fetched == 2 * partitioned - head
    full = deepspeed_gathered(_gpt(h, layers), full_checkpointing=True)
    assert full.fetched == layers * 32 * h * h + 2 * emb + 2 * pos + head
    assert full.gathers == pytest.approx(2.662, abs=1e-3)


def test_a_model_under_the_reuse_distance_stays_gathered():
    """gpt2's 124,439,808 parameters are fewer than stage3_max_reuse_distance (1e9): every
    parameter is used again within it, nothing is released, all of it stays gathered."""
    m = load_model("gpt2")
    for full in (False, True):
        g = deepspeed_gathered(m, full)
        assert g.live + g.persisted == m.params.total == 124_439_808
        assert g.fetched == g.live and g.gathers == 1.0  # one all-gather a step, no more


def test_prefetch_runs_ahead_to_the_live_cap():
    """A model of Linears far below the bucket and the cap: the prefetch adds at least a bucket
    (5e7) at each submodule while fewer than 1e9 are gathered, so the gathered set grows to the
    cap and then overshoots it by at most one parameter. Here h 4096: the largest Linear is fc
    (4h^2 = 67,108,864): 1e9 < live < 1e9 + 4h^2."""
    h = 4096
    g = deepspeed_gathered(_gpt(h, 48, vocab=8192), full_checkpointing=True)
    assert MAX_LIVE < g.live < MAX_LIVE + 4 * h * h


def test_knobs_scale_the_answer():
    """Halving the live cap halves where the run-ahead stops (same model as above)."""
    h = 4096
    m = _gpt(h, 48, vocab=8192)
    half = deepspeed_gathered(m, True, max_live=MAX_LIVE // 2)
    assert MAX_LIVE // 2 < half.live < MAX_LIVE // 2 + 4 * h * h
    # a persistence threshold above every bias (4h = 16,384) but below any matrix
    assert deepspeed_gathered(m, True, persistence=4 * h).persisted == 13 * h * 48 + 2 * h
    assert deepspeed_gathered(m, True, persistence=4 * h - 1).persisted == 13 * h * 48 + 2 * h - 4 * h * 48
    assert PERSISTENCE == 100_000


def test_the_plan_uses_the_replay_under_deepspeed_only():
    """--sharding deepspeed plans the replay (16-bit: 2 bytes an element), and the optimizer
    step holds only the persisted ones (FSDP's units: test_fsdp_memory)."""
    m = _gpt(20480, 105)
    job = Job(model=m, mode="train", gpus=640, zero=3, batch=1, seq=2048, checkpointing="full",
              precision="mixed-fp16")
    st = train_states(m, job)
    assert st.gathered == (5 * 20480 ** 2 + 13 * 20480 * 105 + 2 * 20480) * 2
    assert st.gathered_kept == (13 * 20480 * 105 + 2 * 20480) * 2
    mem = train_memory(m, job)
    line = next(ln for ln in mem.lines if ln.key == "gathered_params")
    assert line.label == "gathered ZeRO-3 parameters" and "stage3_max_live_parameters" in line.note


@pytest.mark.parametrize("name", ["mixtral-8x7b", "llama-3.1-405b", "qwen2.5-0.5b"])
def test_every_catalog_shape_replays(name):
    """Experts, untied heads and tied ones replay without error, and the answer is bounded:
    more than the largest single parameter that is not persisted, at most the whole model."""
    m = load_model(name)
    g = deepspeed_gathered(m, True)
    largest = max(t.numel for t in m.tensors)
    assert largest <= g.live + g.persisted <= m.params.total


def test_stage3_gradient_bucket_is_reduce_bucket_size():
    """DeepSpeed stage 3 allocates its contiguous gradient bucket at reduce_bucket_size (5e8
    elements, stage3.py: ``torch.empty(self.reduce_bucket_size, ...)``): 1 GB of 16-bit
    gradients. FSDP2 has no such bucket: its reduce-scatter buffers are on the timeline."""
    m = load_model("qwen2.5-0.5b")
    for sharding, expected in (("deepspeed", 500_000_000 * 2), ("fsdp2", None)):
        mem = train_memory(m, Job(model=m, mode="train", gpus=8, zero=3, sharding=sharding))
        got = {it.name: it.expected for it in mem.overhead.items}.get("ZeRO communication buckets")
        assert got == expected


def test_a_whole_gradient_is_in_flight_under_deepspeed_zero2(monkeypatch):
    """Under DeepSpeed ZeRO-2/3 the kept gradients are the rank's shard, but autograd makes each
    one whole before the reduce hook copies it into the bucket and frees it: the backward peak
    carries at most one parameter's whole gradient more than the shard alone -- here, with its
    peak inside the layers (full checkpointing, a small vocabulary), a layer's largest: fc1,
    h x 4h at 16 bits -- and more than nothing."""
    from gpuplan.memory.activations import timeline

    h = 4096
    m = _gpt(h, 8, vocab=8192)
    job = Job(model=m, mode="train", gpus=8, zero=2, batch=1, seq=2048, checkpointing="full")
    assert train_memory(m, job).activation_detail["backward_peak_at"] == (
        "backward through the layers")
    in_flight = train_memory(m, job).phases["backward"]
    loop = timeline._Loop
    # the timeline cache is keyed by the loop, so the plan below is computed afresh
    monkeypatch.setattr(timeline, "_Loop", lambda **kw: loop(**{**kw, "grads_in_flight": False}))
    shard_only = train_memory(m, job).phases["backward"]
    assert 0 < in_flight - shard_only <= 4 * h * h * 2


def test_the_stage3_settings_plan_the_gathering():
    """--stage3-max-live-parameters lowers where the prefetch stops (8B: its largest parameter,
    the head's 128,256 x 4,096, can still be the one that crosses the cap); it is a DeepSpeed
    ZeRO-3 setting, refused in one line elsewhere."""
    from gpuplan.errors import InputError

    m = load_model("llama-3.1-8b")
    base = Job(model=m, mode="train", gpus=8, zero=3)
    low = Job(model=m, mode="train", gpus=8, zero=3, stage3_max_live_parameters=200_000_000)
    g_base, g_low = train_states(m, base), train_states(m, low)
    head = 128256 * 4096
    assert g_low.gathered < g_base.gathered
    assert 200_000_000 * 2 < g_low.gathered - g_low.gathered_kept <= (200_000_000 + head) * 2
    for kw in (dict(zero=2), dict(zero=3, sharding="fsdp2")):
        with pytest.raises(InputError, match="DeepSpeed ZeRO-3 setting") as e:
            Job(model=m, mode="train", gpus=8, stage3_prefetch_bucket_size=1000, **kw)
        assert "\n" not in str(e.value)


def test_the_solver_offers_a_lower_live_cap():
    """On a GPU where DeepSpeed ZeRO-3 is ~2 GB short, fit's "What to change" offers
    --stage3-max-live-parameters 1e8, planned in full: its peak is the plan of that job."""
    from gpuplan.hardware import get_gpu
    from gpuplan.solver import suggest

    m = load_model("llama-3.1-8b")
    job = Job(model=m, mode="train", gpus=16, zero=3)
    got = suggest(m, job, get_gpu("A100-40GB"))
    hit = [s for s in got.suggestions if [c.knob for c in s.changes]
           == ["stage3_max_live_parameters"]]
    assert hit and hit[0].job.stage3_max_live_parameters == 100_000_000
    lower = train_memory(m, Job(model=m, mode="train", gpus=16, zero=3,
                                stage3_max_live_parameters=100_000_000))
    assert hit[0].peak_bytes == lower.total_bytes < got.current_peak_bytes
    # nothing to offer where ZeRO-3 is not DeepSpeed's
    fsdp = suggest(m, Job(model=m, mode="train", gpus=16, zero=3, sharding="fsdp2"),
                   get_gpu("A100-40GB"))
    assert not any(c.knob == "stage3_max_live_parameters" for s in fsdp.suggestions
                   for c in s.changes)


def test_experts_whose_names_meet_for_one_expert_share_its_module():
    """The experts' uses come from one template split at {e}, unless two module names could
    spell one for some expert: here "a.0.{e}.b.1.c" and "a.0.1.b.{e}.c" are both "a.0.1.b.1.c"
    for expert 1, which is one module using one parameter twice (12 experts: 2 x 12 - 1 uses),
    as formatting each expert's names gives."""
    from gpuplan.engines.zero3 import _expert_uses
    from gpuplan.models import ParamTensor

    ts = [(ParamTensor(name=n, shape=(5000, 64), count=12, component="mlp", module="x",
                       linear=True), 12) for n in ("a.{i}.{e}.b.1.c.w", "a.{i}.1.b.{e}.c.w")]
    uses = _expert_uses(ts, 0, 100_000)
    assert len(uses) == 23
    assert uses[2] == ("a.0.1.b.1.c", (("a.0.1.b.1.c.w", 320_000),) * 2, 640_000, 1)
    assert uses[:2] == [("a.0.0.b.1.c", (("a.0.0.b.1.c.w", 320_000),), 320_000, 1),
                        ("a.0.1.b.0.c", (("a.0.1.b.0.c.w", 320_000),), 320_000, 1)]
    # one fused matrix an expert: one use each, named by the expert
    fused = [(ParamTensor(name="m.{i}.experts.{e}.gate_up", shape=(5000, 64), count=3,
                          component="mlp", module="x", linear=True), 3)]
    assert _expert_uses(fused, 7, 100_000) == [
        (f"m.7.experts.{e}", ((f"m.7.experts.{e}.gate_up", 320_000),), 320_000, 1)
        for e in range(3)]
