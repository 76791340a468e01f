"""FLOP counting against independent oracles: the source documents' worked examples, Megatron-LM's
per-iteration formula, published MFU figures recomputed from reported throughput, and PyTorch's
own FLOP counter on real Hugging Face models of every architecture family."""

from __future__ import annotations


import pytest

from gpuplan.compute import (
    causal_score_elements, count_matmul, flops_breakdown, time_to_train,
)
from gpuplan.errors import InputError
from gpuplan.models._types import Architecture
from gpuplan.job import Job


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)



def gpt(l: int, h: int, heads: int, *, V: int = 51200, s: int = 2048, tie: bool = True,
        name: str = "gpt") -> Architecture:
    """A GPT-2/GPT-3 style decoder: learned positions, LayerNorm, GELU MLP of 4h, MHA."""
    return Architecture(
        name=name, family="gpt2", kind="decoder", hidden_size=h, num_layers=l, num_heads=heads,
        num_kv_heads=heads, head_dim=h // heads, intermediate_size=4 * h, vocab_size=V,
        max_position_embeddings=s, tie_word_embeddings=tie, mlp="gelu", activation="gelu_new",
        norm="layernorm", position="learned")


# --------------------------------------------------------------------------------------------------
# The source documents' figures


def test_seed_one_by_three_times_three_by_two_is_six_multiplies_and_four_additions():
    # seed 003: output_1 = 1*w11 + 2*w21 + 3*w31, output_2 = 1*w12 + 2*w22 + 3*w32:
    # two outputs, three products each (6 multiplies), two additions each (4 additions).
    mm = count_matmul(1, 3, 2)
    assert mm.multiplies == 2 * 3
    assert mm.additions == 2 * 2
    assert mm.output_elements == 2
    assert mm.flops == 12  # the 2*M*K*N convention counts one add per multiply
    assert mm.exact_flops == 10


def test_seed_512_by_512_layer_is_262144_multiply_adds_per_example():
    # seed 003: "512 inputs and 512 outputs needs 512 by 512 multiplications and additions ...
    # for one example": one example is one row of the input.
    one = count_matmul(1, 512, 512)
    assert one.multiply_adds == 512 * 512 == 262_144
    # with the bias, the additions are 512 per output too (511 to sum 512 products + 1 bias)
    assert count_matmul(1, 512, 512, bias=True).additions == 262_144
    # a batch of 256 examples is 256 times that, each row independent
    assert count_matmul(256, 512, 512).multiply_adds == 256 * 262_144


def test_seed_batch_256_of_1024_by_1024_layers():
    # seed 003: "a batch of 256 examples, a layer with 1024 inputs and 1024 outputs, and 50 such
    # layers" -- 256 * 1024 * 1024 * 50 = 13,421,772,800 multiplies per forward pass.
    per_layer = count_matmul(256, 1024, 1024)
    assert per_layer.multiplies * 50 == 13_421_772_800


@pytest.mark.parametrize("bad", [(0, 3, 2), (1, 0, 2), (1, 3, -2), (1.5, 3, 2), (True, 3, 2)])
def test_matmul_sizes_must_be_positive_integers(bad):
    with pytest.raises(InputError, match="expected a whole number >= 1"):
        count_matmul(*bad)


# --------------------------------------------------------------------------------------------------
# Megatron-LM (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
# Using Megatron-LM", eq. 3 and Table 1): F = 96 B s l h^2 (1 + s/6h + V/16lh) per iteration with
# full activation recomputation, V = 51,200, s = 2048.

MEGATRON_TABLE1 = [
    # params (B), heads, hidden, layers, batch  -- Table 1 of the paper
    (1.7, 24, 2304, 24, 512),
    (3.6, 32, 3072, 30, 512),
    (7.5, 32, 4096, 36, 512),
    (18.4, 48, 6144, 40, 1024),
    (39.1, 64, 8192, 48, 1536),
    (76.1, 80, 10240, 60, 1792),
    (145.6, 96, 12288, 80, 2304),
    (310.1, 128, 16384, 96, 2160),
    (529.6, 128, 20480, 105, 2520),
    (1008.0, 160, 25600, 128, 3072),
]


@pytest.mark.parametrize("params_b,heads,h,l,B", MEGATRON_TABLE1)
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_megatron_per_iteration_flops(params_b, heads, h, l, B, attention):
    s, V = 2048, 51200
    megatron = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    fb = flops_breakdown(gpt(l, h, heads),
                         J(batch=B, seq=s, checkpointing="full", attention=attention))
    assert fb.hardware_flops == pytest.approx(megatron, rel=1e-9)
    # without recompute: 3x forward = 72 B s l h^2 (1 + s/6h + V/12lh) (Korthikanti et al. 2022)
    assert fb.model_flops == pytest.approx(
        72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h)), rel=1e-9)
    # the parameter count in the table's first column (their eq. 2 counts the embeddings)
    params = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert params / 1e9 == pytest.approx(params_b, abs=0.051)
    assert fb.matmul_params == 12 * l * h**2 + V * h  # the weights a token is multiplied by


def test_megatron_time_to_train_estimates():
    # Narayanan et al. 2021, sec. 5.1: end-to-end time ~= 8 T P / (n X): GPT-3 (P = 175B) on
    # T = 300B tokens with n = 1024 A100s at X = 140 TFLOP/s per GPU takes 34 days; the 1T model
    # on 450B tokens, 3072 GPUs at 163 TFLOP/s: 84 days.
    for P, T, n, X, days in ((175e9, 300e9, 1024, 140e12, 34), (1e12, 450e9, 3072, 163e12, 84)):
        rate = n * X / (8 * P)  # tokens/s at 8P FLOPs per token (recompute included)
        tt = time_to_train(work=T, rate_per_s=rate, gpus=n, price_per_gpu_hour=2.0)
        assert tt.days == pytest.approx(days, abs=1.0)
        assert tt.gpu_hours == pytest.approx(tt.seconds * n / 3600)
        assert tt.cost == pytest.approx(tt.gpu_hours * 2.0)
    # The 8P figure (P = 12 l h^2, the layers' weights) neglects attention and logits: for GPT-3
    # (96 layers, h = 12288, 96 heads, s = 2048, V = 51,200) they add s/6h + V/16lh = 3.0%.
    fb = flops_breakdown(gpt(96, 12288, 96), J(batch=1, seq=2048, checkpointing="full"))
    per_token = fb.hardware_flops / 2048
    assert per_token / (8 * 12 * 96 * 12288**2) == pytest.approx(
        1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288), rel=1e-12)


# --------------------------------------------------------------------------------------------------
# Published MFU recomputed from reported throughput


def test_palm_540b_mfu_from_reported_throughput():
    # Chowdhery et al. 2022 (PaLM), sec. 4 and Table 3 / appendix B: PaLM 540B trained at 238.3K
    # tokens/s on 6144 TPU v4 chips (275 TFLOP/s bf16 peak each) = 46.2% MFU, with model FLOPs
    # per token 6N + 12LHQT. Architecture (Table 1 and sec. 2): 118 layers, d_model 18432, 48
    # heads of size 256, multi-query attention, SwiGLU with d_ff = 4 d_model, parallel layers,
    # shared input/output embeddings, 256k vocabulary, sequence 2048.
    palm = Architecture(
        name="palm-540b", family="palm", kind="decoder", hidden_size=18432, num_layers=118,
        num_heads=48, num_kv_heads=1, head_dim=256, intermediate_size=4 * 18432,
        vocab_size=256_000, max_position_embeddings=2048, tie_word_embeddings=True, mlp="gated",
        activation="swish", norm="layernorm", position="rotary", parallel_attn_mlp=True)
    fb = flops_breakdown(palm, J(batch=1, seq=2048))
    assert fb.matmul_params / 1e9 == pytest.approx(540.35, abs=0.01)  # "540.35B" in Table 1
    mfu = 238.3e3 * fb.model_flops_per_token / (6144 * 275e12)
    assert mfu == pytest.approx(0.462, rel=0.01)


# MosaicML llm-foundry, scripts/train/benchmarking/README.md ("MPT Training Benchmarks", H100 80GB
# BF16 table): throughput in tokens/s, MFU and HFU, computed with H100 SXM's 989.5 TFLOP/s dense
# bf16 (composer GPU_AVAILABLE_FLOPS = 1.979e15 / 2). Model shapes from the same repository's
# scripts/train/yamls/pretrain/mpt-*.yaml: expansion_ratio 4, vocab 50368.
MPT = {"7b": (4096, 32, 32), "30b": (7168, 56, 48), "70b": (8192, 64, 80)}
MPT_ROWS = [
    # model, seq, gpus, MFU %, HFU %, tokens/s, activation checkpointing
    ("7b", 2048, 8, 46.44, 46.44, 85144, False),
    ("7b", 1024, 8, 42.83, 57.11, 81628, True),
    ("30b", 2048, 32, 43.92, 58.57, 73860, True),
    ("70b", 2048, 64, 42.57, 56.76, 66523, True),
]


@pytest.mark.parametrize("model,seq,gpus,mfu,hfu,tps,ckpt", MPT_ROWS)
def test_mpt_mfu_and_hfu_from_reported_throughput(model, seq, gpus, mfu, hfu, tps, ckpt):
    h, heads, l = MPT[model]
    arch = gpt(l, h, heads, V=50368, s=seq, name=f"mpt-{model}")
    fb = flops_breakdown(arch, J(batch=1, seq=seq, checkpointing="full" if ckpt else "none"))
    peak = 1.979e15 / 2
    assert tps * fb.model_flops_per_token / (gpus * peak) == pytest.approx(mfu / 100, rel=0.01)
    hw_per_token = fb.hardware_flops / fb.tokens
    assert tps * hw_per_token / (gpus * peak) == pytest.approx(hfu / 100, rel=0.01)


# --------------------------------------------------------------------------------------------------
# Causal masking convention


def test_counted_flops_use_the_full_square_and_flash_executes_about_half():
    arch = gpt(2, 256, 4, V=1000, s=8192)
    s = 8192
    full = flops_breakdown(arch, J(batch=1, seq=s, attention="eager"))
    flash = flops_breakdown(arch, J(batch=1, seq=s, attention="sdpa"))
    # the convention does not depend on the kernel
    assert full.model_flops == flash.model_flops
    # per layer, the s^2 term is QK^T and AV: 2 * 2 * s^2 * h
    assert full.layers[0].attention_flops == 4 * s * s * 256
    # the kernel skips fully masked 128 x 128 blocks: 64 blocks per side -> 64 * 65 / 2 computed
    assert causal_score_elements(s) == 128 * 128 * 64 * 65 // 2
    assert causal_score_elements(s) / s**2 == pytest.approx(0.5 + 0.5 / 64)
    # a sliding window of 1024 keys
    assert causal_score_elements(4096, window=1024) < causal_score_elements(4096) // 2


def _score_elements_by_blocks(s: int, window: int | None, b: int) -> int:
    """The definition, one query block at a time (what the closed form must equal)."""
    total = 0
    for r0 in range(0, s, b):
        r1 = min(r0 + b, s)
        lo = 0 if window is None else (max(0, r0 - window + 1) // b) * b
        total += (r1 - r0) * (r1 - lo)
    return total


@pytest.mark.parametrize("b", [1, 3, 64, 128])
def test_causal_score_elements_closed_form_equals_the_block_loop(b):
    for s in [*range(0, 520, 13), 127, 128, 129, 4095, 4096, 4097]:
        for window in [None, 1, 2, 63, 64, 65, 127, 128, 129, 1000, 4096, 10**9]:
            assert causal_score_elements(s, window, b) == _score_elements_by_blocks(s, window, b)


def test_causal_score_elements_is_bounded_for_huge_sequences():
    # issue 14: the loop ran 16.8M blocks for --seq 2^31; the closed form is exact at any size
    s = 2**31
    assert causal_score_elements(s) == 128 * 128 * (s // 128) * (s // 128 + 1) // 2


def test_sliding_window_layers_count_the_window():
    base = dict(name="m", family="mistral", kind="decoder", hidden_size=128, num_layers=4,
                num_heads=4, num_kv_heads=2, head_dim=32, intermediate_size=256, vocab_size=100,
                max_position_embeddings=8192, tie_word_embeddings=False, mlp="gated",
                activation="silu", norm="rmsnorm", position="rotary")
    full = flops_breakdown(Architecture(**base), J(batch=1, seq=4096))
    swa = flops_breakdown(Architecture(**base, sliding_window=1024,
                                       sliding_window_layers=(0, 2)), J(batch=1, seq=4096))
    # two layers attend to 1024 keys per query instead of 4096 (counted s x w, not s x s)
    saved = 2 * 4 * 4096 * (4096 - 1024) * 4 * 32 * 3  # 2 layers, fwd+bwd
    assert full.model_flops - swa.model_flops == saved
    assert {l.kind for l in swa.layers} == {"dense", "sliding-window dense"}


# --------------------------------------------------------------------------------------------------
# PyTorch's FLOP counter on real models of every family (eager attention: explicit matmuls)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

B, S = 2, 16
COMMON = dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=101,
              max_position_embeddings=64)


def _arch(**kw) -> Architecture:
    d = dict(name=kw.get("family", "m"), kind="decoder", num_kv_heads=kw.get("num_heads", 4),
             head_dim=16, tie_word_embeddings=False, mlp="gated", activation="silu",
             norm="rmsnorm", position="rotary", **COMMON)
    d.update(kw)
    return Architecture(**d)


def _hf(cls_name: str, config_name: str, **cfg):
    config = getattr(transformers, config_name)(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(config)


def _families():
    """(family, HF model factory, Architecture) with the same numbers on both sides."""
    lm = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=101,
              max_position_embeddings=64)
    yield "llama", lambda: _hf("LlamaForCausalLM", "LlamaConfig", intermediate_size=96,
                       num_key_value_heads=2, tie_word_embeddings=False, **lm), \
        _arch(family="llama", num_kv_heads=2, intermediate_size=96)
    yield "mistral", lambda: _hf("MistralForCausalLM", "MistralConfig", intermediate_size=96,
                         num_key_value_heads=2, sliding_window=32, **lm), \
        _arch(family="mistral", num_kv_heads=2, intermediate_size=96, sliding_window=32,
              sliding_window_layers=(0, 1))
    yield "gemma2", lambda: _hf("Gemma2ForCausalLM", "Gemma2Config", intermediate_size=96,
                        num_key_value_heads=2, head_dim=32, sliding_window=32, **lm), \
        _arch(family="gemma2", num_kv_heads=2, head_dim=32, intermediate_size=96,
              tie_word_embeddings=True, activation="gelu_pytorch_tanh", sliding_window=32,
              sliding_window_layers=(0,))
    yield "phi3", lambda: _hf("Phi3ForCausalLM", "Phi3Config", intermediate_size=96,
                      num_key_value_heads=2, pad_token_id=0, **lm), \
        _arch(family="phi3", num_kv_heads=2, intermediate_size=96)
    yield "gpt2", lambda: _hf("GPT2LMHeadModel", "GPT2Config", n_embd=64, n_layer=2, n_head=4,
                      vocab_size=101, n_positions=64), \
        _arch(family="gpt2", intermediate_size=256, tie_word_embeddings=True, mlp="gelu",
              activation="gelu_new", norm="layernorm", position="learned")
    yield "gpt_neox", lambda: _hf("GPTNeoXForCausalLM", "GPTNeoXConfig", intermediate_size=256,
                          rotary_pct=0.25, use_parallel_residual=True, **lm), \
        _arch(family="gpt_neox", intermediate_size=256, mlp="gelu", activation="gelu",
              norm="layernorm", parallel_attn_mlp=True)
    yield "opt", lambda: _hf("OPTForCausalLM", "OPTConfig", hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, ffn_dim=256, vocab_size=101,
                     max_position_embeddings=64, word_embed_proj_dim=64), \
        _arch(family="opt", intermediate_size=256, tie_word_embeddings=True, mlp="gelu",
              activation="relu", norm="layernorm", position="learned")
    yield "falcon", lambda: _hf("FalconForCausalLM", "FalconConfig", hidden_size=64,
                        num_hidden_layers=2, num_attention_heads=4, vocab_size=101,
                        new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                        bias=False, alibi=False), \
        _arch(family="falcon", num_kv_heads=1, intermediate_size=256, tie_word_embeddings=True,
              mlp="gelu", activation="gelu", norm="layernorm", parallel_attn_mlp=True)
    yield "bloom", lambda: _hf("BloomForCausalLM", "BloomConfig", hidden_size=64, n_layer=2,
                       n_head=4, vocab_size=101), \
        _arch(family="bloom", intermediate_size=256, tie_word_embeddings=True, mlp="gelu",
              activation="bloom_gelu", norm="layernorm", position="alibi")
    yield "mixtral", lambda: _hf("MixtralForCausalLM", "MixtralConfig", intermediate_size=96,
                         num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                         **lm), \
        _arch(family="mixtral", num_kv_heads=2, intermediate_size=96, num_experts=4,
              experts_per_token=2)
    yield "qwen2_moe", lambda: _hf("Qwen2MoeForCausalLM", "Qwen2MoeConfig", intermediate_size=96,
                           moe_intermediate_size=48, shared_expert_intermediate_size=80,
                           num_experts=4, num_experts_per_tok=2, num_key_value_heads=2,
                           decoder_sparse_step=1, mlp_only_layers=[], **lm), \
        _arch(family="qwen2_moe", num_kv_heads=2, intermediate_size=96, num_experts=4,
              experts_per_token=2, moe_intermediate_size=48, shared_expert_intermediate_size=80)
    yield "bert", lambda: _hf("BertForMaskedLM", "BertConfig", intermediate_size=128, **lm), \
        _arch(family="bert", kind="encoder", intermediate_size=128, tie_word_embeddings=True,
              mlp="gelu", activation="gelu", norm="layernorm", position="learned",
              hf_class="BertForMaskedLM")
    yield "vit", lambda: _hf("ViTForImageClassification", "ViTConfig", hidden_size=64,
                     num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     image_size=32, patch_size=8, num_labels=10), \
        _arch(family="vit", kind="vision", intermediate_size=128, vocab_size=0,
              max_position_embeddings=17, mlp="gelu", activation="gelu", norm="layernorm",
              position="learned", image_size=32, patch_size=8, num_channels=3, num_labels=10,
              hf_class="ViTForImageClassification")


#: Small configs of the 2025-2026 families (issue 28), each with its shape rules: MLA with a q
#: bottleneck and first dense layers (DeepSeek-V3), QK-norm (Qwen3), mlp_only_layers (Qwen3-MoE),
#: shared experts and partial rotary (GLM-4.5), sinks, biased experts and alternating sliding
#: layers (gpt-oss), 1-in-2 local layers (Gemma 3), chunked / NoPE layers and interleaved MoE
#: (Llama 4). Windows and chunks are the sequence (16) so eager's full square is what they count.
_MODERN = {
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(
        intermediate_size=96, num_key_value_heads=2, head_dim=16)),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
        intermediate_size=96, moe_intermediate_size=48, num_experts=4, num_experts_per_tok=2,
        num_key_value_heads=2, head_dim=16, mlp_only_layers=[0])),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "DeepseekV3Config", dict(
        intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, q_lora_rank=24,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
        num_key_value_heads=4)),
    "glm4_moe": ("Glm4MoeForCausalLM", "Glm4MoeConfig", dict(
        intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
        num_key_value_heads=2, head_dim=16, use_qk_norm=True)),
    "gpt_oss": ("GptOssForCausalLM", "GptOssConfig", dict(
        intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, num_key_value_heads=2,
        head_dim=16, sliding_window=16)),
    "gemma3_text": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(
        intermediate_size=96, num_key_value_heads=2, head_dim=16, sliding_window=16,
        sliding_window_pattern=2)),
    "olmo2": ("Olmo2ForCausalLM", "Olmo2Config", dict(
        intermediate_size=96, num_key_value_heads=2, head_dim=16)),
    "llama4_text": ("Llama4ForCausalLM", "Llama4TextConfig", dict(
        intermediate_size=32, intermediate_size_mlp=96, num_local_experts=4,
        num_experts_per_tok=1, num_key_value_heads=2, head_dim=16, attention_chunk_size=16,
        interleave_moe_layer_step=2, no_rope_layer_interval=2)),
}
_MODERN_LM = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=101,
                  max_position_embeddings=64)


def _modern(family: str):
    """(HF model factory, Architecture read by gpuplan from the same config's dict)."""
    from gpuplan.models import architecture_from_config

    cls, cname, kw = _MODERN[family]
    make = lambda: _hf(cls, cname, **kw, **_MODERN_LM)  # noqa: E731
    d = getattr(transformers, cname)(**kw, **_MODERN_LM).to_dict()
    d["model_type"] = family
    if family == "qwen3_moe":  # to_dict writes num_local_experts; the published config.json
        d["num_experts"] = d["num_local_experts"]  # (and gpuplan's reader) says num_experts
    return make, architecture_from_config(d, name=family)


def _all_families():
    yield from _families()
    for family in _MODERN:
        yield (family, *_modern(family))


def _grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    # aten._grouped_mm (the MoE experts' kernel) is not in torch's FLOP registry: each row of the
    # left operand is multiplied by its group's matrix, so the total is 2 * rows * K * N.
    if len(a_shape) == 2 and len(b_shape) == 3:  # (M, K) x (G, K, N)
        return 2 * a_shape[0] * a_shape[1] * b_shape[2]
    if len(a_shape) == 2 and len(b_shape) == 2:  # (K, M) x (M, N) -> (G, K, N), split over M
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    raise AssertionError(f"unexpected grouped_mm shapes {a_shape} x {b_shape}")


def _counted(model, inputs, *, backward: bool) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    mapping = {torch.ops.aten._grouped_mm: _grouped_mm_flops}
    model.train(backward)
    with FlopCounterMode(display=False, custom_mapping=mapping) as fc:
        out = model(**inputs)
        if backward:
            out.loss.backward()
    return fc.get_total_flops()


@pytest.mark.parametrize("family", [f for f, _, _ in _families()] + list(_MODERN))
def test_forward_and_training_flops_match_torch_flop_counter(family):
    name, make, arch = next(x for x in _all_families() if x[0] == family)
    model = make()
    torch.manual_seed(0)
    if arch.kind == "vision":
        inputs = {"pixel_values": torch.randn(B, 3, 32, 32), "labels": torch.randint(0, 10, (B,))}
        seq = 17
    else:
        ids = torch.randint(0, 101, (B, S))
        inputs = {"input_ids": ids, "labels": ids}
        seq = S
    fwd_only = {k: v for k, v in inputs.items() if k != "labels"}
    fb_fwd = flops_breakdown(
        arch, J(mode="infer", prefill_logits="all", batch=B, seq=seq, attention="eager"))
    assert _counted(model, fwd_only, backward=False) == pytest.approx(fb_fwd.forward_flops,
                                                                      rel=1e-12)
    fb = flops_breakdown(arch, J(batch=B, seq=seq, mode="train", attention="eager"))
    assert _counted(model, inputs, backward=True) == pytest.approx(fb.model_flops, rel=1e-12)


def test_moe_counts_only_routed_experts():
    _, _, mixtral = next(x for x in _families() if x[0] == "mixtral")
    dense = Architecture(**{**{f: getattr(mixtral, f) for f in (
        "name", "family", "kind", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
        "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
        "tie_word_embeddings", "mlp", "activation", "norm", "position")}})
    moe = flops_breakdown(mixtral, J(batch=1, seq=64))
    one = flops_breakdown(dense, J(batch=1, seq=64))
    # top-2 of 4 experts: each token runs two expert MLPs (plus the router) instead of one MLP
    mlp = 2 * 64 * 3 * 64 * 96
    router = 2 * 64 * 64 * 4
    assert moe.forward_flops - one.forward_flops == 2 * (mlp + router)


def test_llama4_flops_under_vllm_are_the_routed_share_of_transformers():
    # the same config counted as vLLM runs it (top-1 routed) is below what transformers' code
    # executes (every expert) by exactly the unrouted experts' rows
    make, arch = _modern("llama4_text")
    job = J(mode="infer", prefill_logits="all", batch=B, seq=S, attention="eager")
    hf = flops_breakdown(arch, job).forward_flops
    assert _counted(make(), {"input_ids": torch.randint(0, 101, (B, S))},
                    backward=False) == pytest.approx(hf, rel=1e-12)
    vl = flops_breakdown(arch, job.with_(engine="vllm")).forward_flops
    E, I, H = arch.num_experts, arch.moe_intermediate_size, arch.hidden_size
    assert hf - vl == len(arch.moe_layers) * 2 * B * S * (E - 1) * 3 * H * I


def test_mla_decode_step_matches_torch_flop_counter_over_transformers_cache():
    # one decode step after a 16-token prompt: transformers 5 caches the latent and re-expands
    # the whole cache through kv_b_proj each step (the "expand" form)
    from gpuplan.compute.flops import StepShape, build_forward_ops, run_form

    make, arch = _modern("deepseek_v3")
    model = make().eval()
    ids = torch.randint(0, 101, (B, S))
    with torch.no_grad():
        past = model(input_ids=ids, use_cache=True).past_key_values
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False, custom_mapping={
                torch.ops.aten._grouped_mm: _grouped_mm_flops}) as fc:
            model(input_ids=ids[:, :1], past_key_values=past, use_cache=True)
    shape = StepShape(batch=B, q_len=1, kv_len=S + 1, decode=True)
    ops = build_forward_ops(arch, shape, act_bytes=2, weight_bytes=2, attention="eager",
                            form=run_form(arch, "transformers", decode=True))
    assert fc.get_total_flops() == pytest.approx(sum(o.counted_flops * o.count for o in ops),
                                                 rel=1e-12)
