"""What the megatron engine's layers keep for backward, counted by hand per token per layer
(issue 30: published FP8 runs planned over the memory of the GPU they ran on).

Megatron-Core at NVIDIA/Megatron-LM@0d8e0714 (the Megatron-Bridge v0.2.0 pin) with Transformer
Engine at NVIDIA/TransformerEngine@70f53666 (v2.9, the 25.11 container):

- the routed experts (moe/experts.py TEGroupedMLP.forward, moe/token_dispatcher.py): the
  permute saves an index map only; GroupedLinear fc1 and fc2 save their inputs (quantized under
  FP8, TE module/grouped_linear.py); the fused weighted SwiGLU saves its input (fc1's output)
  and the probs (fusions/fused_bias_swiglu.py WeightedSwiGLUFunction); nothing saves fc2's
  output (the unpermute takes no probs);
- LayerNormLinear under sequence parallelism saves the norm's input, rsigma and the quantized
  local shard of its output (module/layernorm_linear.py), not a 16-bit output;
- under FP8 other than delayed scaling the attention's linear_proj saves its 16-bit input, the
  core attention's output, which the fused attention keeps already (transformer/attention.py
  set_save_original_input).

The layers run compiled in the model (the engine's runtime), so small per-row tensors (index
maps, the per-token probs) are recomputed, not kept (memory/activations/symbolic.py).
"""

from __future__ import annotations

import pytest

from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.memory.activations.profile import Shard, step_profile
from gpuplan.models import Architecture, Model, ParamCounts

H, HEADS, KV, D, INTER = 512, 8, 4, 64, 1536
I_MOE = 384
B, S = 2, 256


def _model(arch: Architecture) -> Model:
    return Model(name=arch.name, architecture=arch,
                 params=ParamCounts(total=1, by_component={"other": 1}, active=1, embedding=0))


def _arch(family: str = "llama", **kw) -> Model:
    return _model(Architecture(
        name=f"small-{family}", family=family, kind="decoder", hidden_size=H, num_layers=2,
        num_heads=HEADS, num_kv_heads=KV, head_dim=D, intermediate_size=INTER,
        vocab_size=1000, max_position_embeddings=4096, tie_word_embeddings=False, mlp="gated",
        activation="silu", norm="rmsnorm", position="rotary", **kw))


def _moe(k: int) -> Model:
    return _arch("mixtral", num_experts=4, experts_per_token=k, moe_intermediate_size=I_MOE)


def _per_token(m: Model, **job) -> float:
    kw = dict(model=m, mode="train", engine="megatron", precision="mixed-bf16",
              attention="sdpa", batch=B, seq=S)
    kw.update(job)
    mem = train_memory(m, Job(**kw))
    (layer,) = set(mem.activation_detail["per_layer_saved_bytes"])
    return layer / (B * S)


@pytest.mark.parametrize("precision, n", [("mixed-bf16", 2), ("mxfp8", 1), ("fp8-current", 1)])
def test_megatron_experts_keep_inputs_and_the_swiglu_input(precision, n):
    # each routed copy of a token keeps fc1's input (h at n bytes: 16-bit rows, or their
    # quantized copy), fc1's output (gate and up, 2 x I_moe at 2 B: the fused SwiGLU's input)
    # and fc2's input (I_moe at n bytes); nothing of the gathered 16-bit rows or fc2's output
    per_k = _per_token(_moe(2), precision=precision) - _per_token(_moe(1), precision=precision)
    assert per_k == H * n + 2 * I_MOE * 2 + I_MOE * n


def test_transformers_experts_keep_the_gathered_rows_and_the_down_output():
    # transformers' grouped_mm path, the other engines': the gathered rows (2h), gate and up
    # (2 x 2 I_moe), act(gate) * up (2 I_moe) and the down projection's output (2h, for the
    # weighting's gradient), in 16 bits
    per_k = (_per_token(_moe(2), engine="transformers", runtime="compile")
             - _per_token(_moe(1), engine="transformers", runtime="compile"))
    assert per_k == 4 * H + 3 * 2 * I_MOE


def test_moe_act_drops_the_quantized_fc2_input():
    # under moe_act with FP8, linear_fc2 saves the 16-bit input it is given, which the
    # CheckpointWithoutOutput discards (experts.py set_save_original_input(linear_fc2))
    kw = dict(precision="mxfp8", checkpointing="selective")
    keep = _per_token(_moe(2), recompute_modules=("core_attn",), **kw)
    drop = _per_token(_moe(2), recompute_modules=("core_attn", "moe_act"), **kw)
    assert keep - drop == 2 * I_MOE * 1


def test_te_layer_under_sp_by_hand():
    # a dense layer at TP 2 with sequence parallelism under FP8-CS, per token of the sequence:
    # every tensor a rank keeps is 1/tp of the row (the shard) or of the heads / FFN width
    tp = 2
    rank = _model(Architecture(
        name="small-llama-tp2", family="llama", kind="decoder", hidden_size=H, num_layers=2,
        num_heads=HEADS // tp, num_kv_heads=KV // tp, head_dim=D, intermediate_size=INTER // tp,
        vocab_size=1000, max_position_embeddings=4096, tie_word_embeddings=False, mlp="gated",
        activation="silu", norm="rmsnorm", position="rotary"))
    job = Job(model=rank, mode="train", engine="megatron", precision="fp8-current",
              attention="sdpa", batch=B, seq=S)
    prof = step_profile(rank, job, shard=Shard(sp=tp))
    got = prof.layers[0][1].saved(B, S) / (B * S)
    norm = 2 * H + 4 + H          # input (16-bit), rsigma (fp32), quantized output shard
    qkv = 2 * (HEADS + 2 * KV) * D  # q and k after RoPE, v (the fused attention's inputs)
    core = 2 * HEADS * D + 4 * HEADS  # its output (linear_proj's saved input too) and lse
    mlp = 2 * 2 * INTER + INTER   # gate and up (the SwiGLU's input), fc2's quantized input
    assert got == (2 * norm + qkv + core + mlp) / tp
