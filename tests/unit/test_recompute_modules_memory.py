"""--recompute-modules in the memory plan: what each Megatron-Core module stops keeping, counted
by hand per token per layer, and the plan and the speed model naming the same modules.

Megatron-Core at NVIDIA/Megatron-LM@d98e8a64: ``mlp``, ``core_attn`` and ``shared_experts``
run under ``tensor_parallel.checkpoint`` (only the module's inputs are kept); ``layernorm``,
``moe_act`` and ``mla_up_proj`` under ``CheckpointWithoutOutput`` (their outputs discarded too,
recomputed when a later gradient arrives: transformer_layer.py, moe/experts.py,
multi_latent_attention.py). The engine runs each layer under torch.compile (its runtime), so the
bytes kept are those of AOTAutograd's partition of the layer (memory/activations/symbolic.py).
"""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import activations as A
from gpuplan.memory import train_memory
from gpuplan.models import Architecture, Model, ParamCounts, load_model

H, HEADS, KV, INTER = 512, 8, 4, 1536
B, S = 2, 256


def _model(arch: Architecture) -> Model:
    return Model(name=arch.name, architecture=arch,
                 params=ParamCounts(total=1, by_component={"other": 1}, active=1, embedding=0))


def _llama(**kw) -> Model:
    return _model(Architecture(
        name="small-llama", family="llama", kind="decoder", hidden_size=H, num_layers=2,
        num_heads=HEADS, num_kv_heads=KV, head_dim=H // HEADS, intermediate_size=INTER,
        vocab_size=1000, max_position_embeddings=4096, tie_word_embeddings=False, mlp="gated",
        activation="silu", norm="rmsnorm", position="rotary", **kw))


def _job(m: Model, modules=None) -> Job:
    return Job(model=m, mode="train", engine="megatron", precision="mixed-bf16",
               attention="sdpa", batch=B, seq=S, checkpointing="selective",
               recompute_modules=modules)


def _layer(m: Model, modules=None, which: int = 0):
    return A.step_profile(m, _job(m, modules)).layers[which][1]


def _saved_per_token(m: Model, modules=None, which: int = 0) -> float:
    return _layer(m, modules, which).saved(B, S) / (B * S)


def _saving(m: Model, module: str, *more: str) -> float:
    """Bytes per token one layer stops keeping when ``module`` (and ``more``) is recomputed
    besides the attention core (core_attn alone: plain selective)."""
    return (_saved_per_token(m, ("core_attn",))
            - _saved_per_token(m, ("core_attn", module, *more)))


def test_mlp_keeps_only_its_input():
    # SwiGLU under the compiled layer: without recompute the MLP keeps its input (the norm's
    # output, 2h: a matmul input), gate and up (matmul outputs, 2I each) and silu(gate)*up (the
    # down projection's input, 2I); with mlp recomputed only the input: 3 x 2I bytes fewer
    m = _llama()
    assert _saving(m, "mlp") == 3 * 2 * INTER
    # the recompute re-runs the module (tensor_parallel.checkpoint): for one layer at a time
    # its backward holds again what eager autograd saves of it, gate, up, silu(gate) and the
    # product (4 x 2I), with what the compiled partition recomputes there
    parts = dict(_layer(m, ("mlp",)).region_parts)
    (inst,) = parts
    assert inst.startswith("mlp#") and parts[inst](B, S) >= 4 * 2 * INTER * B * S


def test_layernorm_discards_each_norm_output():
    # each RMSNorm keeps its bf16 output (2h: the next projections' input) and its fp32 mean
    # per row (4: a reduction, never recomputed); its input (the residual stream) is kept
    # either way. With layernorm recomputed both go, for the two norms: 2 x (2h + 4)
    m = _llama()
    assert _saving(m, "layernorm") == 2 * (2 * H + 4)
    assert len(_layer(m, ("layernorm",)).region_parts) == 2  # one recompute per norm


def test_mlp_and_layernorm_add_up():
    # the MLP's input is the pre-MLP norm's output: discarded by layernorm, so the two savings
    # are disjoint and add
    m = _llama()
    assert _saving(m, "layernorm", "mlp") == 3 * 2 * INTER + 2 * (2 * H + 4)


def test_core_attn_is_plain_selective():
    # and leaving it out keeps the flash core's logsumexp (fp32 per head per token)
    m = _llama()
    assert _saved_per_token(m, ("core_attn",)) == _saved_per_token(m)
    assert _saved_per_token(m, ("mlp",)) - _saved_per_token(m, ("core_attn", "mlp")) == 4 * HEADS


def test_moe_act_discards_the_down_projections_input():
    # a Mixtral-style MoE layer: the experts' act(gate)*up rows (top_k per token, 2I_moe each,
    # the down projection's input) are not kept; gate and up, a matmul output, stay
    k, I = 2, 384
    m = _model(Architecture(
        name="small-moe", family="mixtral", kind="decoder", hidden_size=H, num_layers=2,
        num_heads=HEADS, num_kv_heads=KV, head_dim=H // HEADS, intermediate_size=INTER,
        vocab_size=1000, max_position_embeddings=4096, tie_word_embeddings=False, mlp="gated",
        activation="silu", norm="rmsnorm", position="rotary", num_experts=4,
        experts_per_token=k, moe_intermediate_size=I))
    assert _saving(m, "moe_act") == k * 2 * I
    # mlp is Megatron's dense MLP only: an MoE layer has none (transformer_layer.py)
    assert _saved_per_token(m, ("core_attn", "mlp")) == _saved_per_token(m)


def test_backward_peak_holds_one_layers_recompute():
    # the layer's backward passes through a point holding the rematerialized MLP again (the
    # points are relative to the state before the layer's backward, which holds what is kept)
    m = _llama()
    prof = _layer(m, ("mlp",))
    (part,) = dict(prof.region_parts).values()
    assert max(a(B, S) for a, _, _ in prof.bwd_points) >= part(B, S)
    # and the whole step keeps less than plain selective
    assert (train_memory(m, _job(m, ("mlp",))).activations_bytes
            < train_memory(m, _job(m)).activations_bytes)


def test_layernorm_of_other_layouts_is_said_not_modelled():
    m = load_model("gemma-2-9b")
    job = Job(model="gemma-2-9b", mode="train", engine="megatron", batch=1, seq=1024,
              attention="sdpa", checkpointing="selective", recompute_modules=("layernorm",))
    assert any("memory of layernorm recompute not modelled" in n
               for n in A.step_profile(m, job).notes)


_SPEED_AGREES = [("llama-3.1-8b", m) for m in ("mlp", "layernorm", "moe_act", "mla_up_proj",
                                               "shared_experts", "core_attn")] + [
    ("deepseek-v3", "mla_up_proj"), ("deepseek-v3", "moe_act"),
    ("deepseek-v3", "shared_experts"), ("deepseek-v3", "mlp")]


@pytest.mark.parametrize("model, module", _SPEED_AGREES)
def test_fit_and_speed_name_the_same_modules(model, module):
    m = load_model(model)
    job = Job(model=model, mode="train", engine="megatron", batch=1, seq=1024,
              attention="sdpa", checkpointing="selective", recompute_modules=(module,))
    step = estimate_speed(m, get_gpu("H100-SXM-80GB"), job, measured=None).step
    timed = any(t.op.phase == "recompute" for t in step.ops)
    notes = A.step_profile(m, job).notes
    named = any(n.startswith("selective checkpointing recomputes") and module in n
                for n in notes)
    assert named == timed
    # and when it is named, the memory plan keeps less than plain selective (the fused
    # attention core keeps O(s) statistics: not named, nothing timed)
    if named:
        plain = A.step_profile(m, job.with_(recompute_modules=None))
        here = A.step_profile(m, job)
        assert (sum(n * p.saved(1, 1024) for n, p in here.layers)
                < sum(n * p.saved(1, 1024) for n, p in plain.layers))
