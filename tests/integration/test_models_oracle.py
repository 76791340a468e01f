"""Oracle: every catalog model's parameter list equals what transformers builds from the same
config.json on the meta device (no weights, no Hub access).

* the total equals ``sum(p.numel() for p in model.parameters())`` -- ``parameters()`` yields a
  tied embedding/head once, as gpuplan counts it;
* the tensor list equals the checkpoint layout transformers itself writes: ``named_parameters()``
  passed through ``revert_weight_conversion`` (what ``save_pretrained`` does), which turns
  transformers 5's fused MoE experts and renamed ViT modules back into the published names.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.models import (catalog_config, catalog_entry, catalog_names,  # noqa: E402
                            load_model)


def _build(name: str):
    cfg = catalog_config(name)
    model_type = cfg.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **cfg)
    cls = getattr(transformers, catalog_entry(name).hf_class)
    with torch.device("meta"):
        return cls(hf_config)


def _expand(model) -> dict[str, tuple[int, ...]]:
    """gpuplan's tensor patterns -> concrete checkpoint names and shapes."""
    arch = model.architecture
    out: dict[str, tuple[int, ...]] = {}
    for t in model.tensors:
        names = [t.name]
        if "{i}" in t.name:
            layers = arch.moe_layers if "{e}" in t.name else range(arch.num_layers)
            names = [n.replace("{i}", str(i)) for n in names for i in layers]
        if "{e}" in t.name:
            names = [n.replace("{e}", str(e)) for n in names for e in range(arch.num_experts)]
        assert len(names) == t.count, t
        for n in names:
            assert n not in out, n
            out[n] = t.shape
    return out


@pytest.mark.parametrize("name", catalog_names())
def test_catalog_model_matches_transformers_on_meta(name):
    from transformers.core_model_loading import revert_weight_conversion

    entry = catalog_entry(name)
    # The class counted is the one the published config.json names.
    assert entry.hf_class in catalog_config(name)["architectures"]
    hf = _build(name)
    ours = load_model(name)
    assert ours.architecture.hf_class == type(hf).__name__ == entry.hf_class

    total = sum(p.numel() for p in hf.parameters())
    assert ours.params.total == total

    params = dict(hf.named_parameters())
    saved = revert_weight_conversion(hf, params)
    expected = {k: tuple(v.shape) for k, v in saved.items()}
    assert sum(torch.Size(s).numel() for s in expected.values()) == total
    got = _expand(ours)
    assert sorted(got) == sorted(expected)
    assert got == expected


# Variants the catalog does not exercise, as small configs (the same check, on meta).
_SMALL = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, vocab_size=97)
VARIANTS = {
    "llama-biases": ("llama", "LlamaForCausalLM",
                     dict(_SMALL, intermediate_size=96, num_key_value_heads=2,
                          attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    "llama-head-dim": ("llama", "LlamaForCausalLM",
                       dict(_SMALL, intermediate_size=96, num_key_value_heads=1, head_dim=24)),
    "mistral-no-window": ("mistral", "MistralForCausalLM",
                          dict(_SMALL, intermediate_size=96, num_key_value_heads=2,
                               sliding_window=None)),
    "qwen2-tied": ("qwen2", "Qwen2ForCausalLM",
                   dict(_SMALL, intermediate_size=96, num_key_value_heads=2,
                        tie_word_embeddings=True, use_sliding_window=True, sliding_window=16,
                        max_window_layers=1)),
    "qwen2-moe-sparse-step": ("qwen2_moe", "Qwen2MoeForCausalLM",
                              dict(_SMALL, num_hidden_layers=4, intermediate_size=96,
                                   moe_intermediate_size=32, shared_expert_intermediate_size=48,
                                   num_experts=5, num_experts_per_tok=2, decoder_sparse_step=2,
                                   num_key_value_heads=2,
                                   mlp_only_layers=[3], qkv_bias=False)),
    "mixtral-4-experts": ("mixtral", "MixtralForCausalLM",
                          dict(_SMALL, intermediate_size=48, num_key_value_heads=2,
                               num_local_experts=4, num_experts_per_tok=1)),
    "gemma2-untied": ("gemma2", "Gemma2ForCausalLM",
                      dict(_SMALL, intermediate_size=96, num_key_value_heads=2, head_dim=32,
                           tie_word_embeddings=False)),
    "phi3-gqa": ("phi3", "Phi3ForCausalLM",
                 dict(_SMALL, intermediate_size=96, num_key_value_heads=2, pad_token_id=0,
                      eos_token_id=1, bos_token_id=1)),
    "gpt2-untied-n_inner": ("gpt2", "GPT2LMHeadModel",
                            dict(n_embd=64, n_layer=2, n_head=4, vocab_size=97, n_positions=40,
                                 n_inner=100, tie_word_embeddings=False, bos_token_id=0,
                                 eos_token_id=0)),
    "starcoder-shape-mqa": ("gpt_bigcode", "GPTBigCodeForCausalLM",
                            dict(n_embd=64, n_layer=3, n_head=4, n_inner=96, n_positions=40,
                                 vocab_size=97, multi_query=True)),
    "santacoder-mha-untied": ("gpt_bigcode", "GPTBigCodeForCausalLM",
                              dict(n_embd=64, n_layer=2, n_head=4, n_positions=24,
                                   vocab_size=97, multi_query=False,
                                   tie_word_embeddings=False)),
    "neox-no-bias-tied": ("gpt_neox", "GPTNeoXForCausalLM",
                          dict(_SMALL, intermediate_size=96, attention_bias=False,
                               tie_word_embeddings=True)),
    "opt-proj-no-final-ln": ("opt", "OPTForCausalLM",
                             dict(_SMALL, ffn_dim=96, word_embed_proj_dim=32,
                                  _remove_final_layer_norm=True, max_position_embeddings=50,
                                  bos_token_id=2, eos_token_id=2, pad_token_id=1)),
    "opt-no-affine-no-bias": ("opt", "OPTForCausalLM",
                              dict(_SMALL, ffn_dim=96, layer_norm_elementwise_affine=False,
                                   enable_bias=False, tie_word_embeddings=False,
                                   bos_token_id=2, eos_token_id=2, pad_token_id=1)),
    "falcon-new-arch": ("falcon", "FalconForCausalLM",
                        dict(_SMALL, new_decoder_architecture=True, num_kv_heads=2,
                             bias=False, bos_token_id=1, eos_token_id=1)),
    "falcon-mha-sequential-bias": ("falcon", "FalconForCausalLM",
                                   dict(_SMALL, multi_query=False, parallel_attn=False,
                                        bias=True, alibi=True, ffn_hidden_size=80,
                                        tie_word_embeddings=False, bos_token_id=1,
                                        eos_token_id=1)),
    "bloom-post-ln-untied": ("bloom", "BloomForCausalLM",
                             dict(hidden_size=64, n_layer=3, n_head=4, vocab_size=97,
                                  apply_residual_connection_post_layernorm=True,
                                  tie_word_embeddings=False)),
    "bloom-legacy-n_embed": ("bloom", "BloomForCausalLM",
                             dict(n_embed=48, n_layer=2, n_head=4, vocab_size=50)),
    "bert-untied-3-types": ("bert", "BertForMaskedLM",
                            dict(_SMALL, intermediate_size=96, type_vocab_size=3,
                                 tie_word_embeddings=False)),
    "vit-no-qkv-bias-384": ("vit", "ViTForImageClassification",
                            dict(_SMALL, intermediate_size=96, image_size=48, patch_size=8,
                                 num_channels=1, qkv_bias=False, num_labels=7)),
    "vit-no-classifier": ("vit", "ViTForImageClassification",
                          dict(_SMALL, intermediate_size=96, image_size=32, patch_size=16,
                               num_labels=0)),
    # the families of issue 28, each in the shapes its config keys allow
    "qwen3-gqa-bias-sliding": ("qwen3", "Qwen3ForCausalLM",
                               dict(_SMALL, intermediate_size=96, num_key_value_heads=2,
                                    head_dim=24, attention_bias=True, use_sliding_window=True,
                                    sliding_window=16, max_window_layers=1)),
    "qwen3-tied": ("qwen3", "Qwen3ForCausalLM",
                   dict(_SMALL, intermediate_size=96, num_key_value_heads=4, head_dim=16,
                        tie_word_embeddings=True)),
    "qwen3-moe-mlp-only": ("qwen3_moe", "Qwen3MoeForCausalLM",
                           dict(_SMALL, num_hidden_layers=4, intermediate_size=96,
                                moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
                                num_key_value_heads=2, head_dim=32, mlp_only_layers=[0],
                                decoder_sparse_step=1, norm_topk_prob=True)),
    "qwen3-moe-sparse-step": ("qwen3_moe", "Qwen3MoeForCausalLM",
                              dict(_SMALL, num_hidden_layers=4, intermediate_size=96,
                                   moe_intermediate_size=32, num_experts=4,
                                   num_experts_per_tok=2, num_key_value_heads=2,
                                   decoder_sparse_step=2)),
    "deepseek-v3-mla-moe": ("deepseek_v3", "DeepseekV3ForCausalLM",
                            dict(_SMALL, num_hidden_layers=4, intermediate_size=96,
                                 moe_intermediate_size=32, n_routed_experts=8,
                                 n_shared_experts=1, num_experts_per_tok=2,
                                 first_k_dense_replace=1, q_lora_rank=48, kv_lora_rank=32,
                                 qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=24,
                                 n_group=2, topk_group=1)),
    "deepseek-v3-biased-2-shared": ("deepseek_v3", "DeepseekV3ForCausalLM",
                                    dict(_SMALL, intermediate_size=96, moe_intermediate_size=16,
                                         n_routed_experts=4, n_shared_experts=2,
                                         num_experts_per_tok=1, first_k_dense_replace=0,
                                         q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=4,
                                         qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                                         topk_group=1, attention_bias=True)),
    "deepseek-v2-lite-no-q-lora": ("deepseek_v2", "DeepseekV2ForCausalLM",
                                   dict(_SMALL, num_hidden_layers=3, intermediate_size=96,
                                        moe_intermediate_size=32, n_routed_experts=8,
                                        n_shared_experts=2, num_experts_per_tok=2,
                                        first_k_dense_replace=1, q_lora_rank=None,
                                        kv_lora_rank=32, qk_rope_head_dim=8,
                                        qk_nope_head_dim=16, v_head_dim=16)),
    "deepseek-v2-group-limited": ("deepseek_v2", "DeepseekV2ForCausalLM",
                                  dict(_SMALL, num_hidden_layers=3, intermediate_size=96,
                                       moe_intermediate_size=32, n_routed_experts=8,
                                       n_shared_experts=2, num_experts_per_tok=2,
                                       first_k_dense_replace=1, q_lora_rank=24,
                                       kv_lora_rank=32, qk_rope_head_dim=8,
                                       qk_nope_head_dim=16, v_head_dim=16,
                                       topk_method="group_limited_greedy", n_group=4,
                                       topk_group=2, routed_scaling_factor=16.0)),
    "glm4-moe-qk-norm-bias": ("glm4_moe", "Glm4MoeForCausalLM",
                              dict(_SMALL, num_hidden_layers=3, intermediate_size=96,
                                   num_key_value_heads=2, head_dim=32, moe_intermediate_size=32,
                                   n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                                   first_k_dense_replace=1, attention_bias=True,
                                   use_qk_norm=True, partial_rotary_factor=0.5)),
    "gpt-oss-alternating": ("gpt_oss", "GptOssForCausalLM",
                            dict(_SMALL, num_hidden_layers=4, intermediate_size=48,
                                 num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                 num_experts_per_tok=2, sliding_window=8)),
    "gpt-oss-layer-types": ("gpt_oss", "GptOssForCausalLM",
                            dict(_SMALL, intermediate_size=32, num_key_value_heads=1,
                                 head_dim=16, num_local_experts=3, num_experts_per_tok=1,
                                 layer_types=["full_attention", "sliding_attention",
                                              "full_attention"], attention_bias=False)),
    "gemma3-text-1b-shape": ("gemma3_text", "Gemma3ForCausalLM",
                             dict(_SMALL, num_hidden_layers=7, intermediate_size=96,
                                  num_key_value_heads=1, head_dim=32, sliding_window=16)),
    "gemma3-text-untied": ("gemma3_text", "Gemma3ForCausalLM",
                           dict(_SMALL, intermediate_size=96, num_key_value_heads=2,
                                head_dim=16, tie_word_embeddings=False)),
    # OLMo 2: q_norm / k_norm over the whole projections (heads x head_dim, kv x head_dim),
    # post-attention and post-feedforward norms, no input norm
    "olmo2-gqa-bias-head-dim": ("olmo2", "Olmo2ForCausalLM",
                                dict(_SMALL, intermediate_size=96, num_key_value_heads=2,
                                     head_dim=24, attention_bias=True)),
    "olmo2-tied": ("olmo2", "Olmo2ForCausalLM",
                   dict(_SMALL, intermediate_size=96, tie_word_embeddings=True)),
    "llama4-interleaved": ("llama4_text", "Llama4ForCausalLM",
                           dict(_SMALL, num_hidden_layers=4, intermediate_size=48,
                                intermediate_size_mlp=96, num_key_value_heads=2, head_dim=16,
                                num_local_experts=4, num_experts_per_tok=1,
                                interleave_moe_layer_step=2, attention_chunk_size=8)),
    "llama4-every-layer-moe": ("llama4_text", "Llama4ForCausalLM",
                               dict(_SMALL, intermediate_size=48, intermediate_size_mlp=96,
                                    num_key_value_heads=4, head_dim=16, num_local_experts=3,
                                    num_experts_per_tok=1, interleave_moe_layer_step=1,
                                    use_qk_norm=False)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_config_variants_match_transformers_on_meta(variant):
    from transformers.core_model_loading import revert_weight_conversion

    from gpuplan.models import architecture_from_config, count_params
    from gpuplan.models._types import Model

    model_type, cls_name, cfg = VARIANTS[variant]
    hf_config = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        hf = getattr(transformers, cls_name)(hf_config)
    arch = architecture_from_config({"model_type": model_type, **cfg}, name=variant)
    assert arch.hf_class == cls_name
    ours = Model(name=variant, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                 architecture=arch, source="config")
    assert ours.params.total == sum(p.numel() for p in hf.parameters())
    saved = revert_weight_conversion(hf, dict(hf.named_parameters()))
    assert _expand(ours) == {k: tuple(v.shape) for k, v in saved.items()}


def test_gpt_bigcode_buffer_is_the_causal_mask_transformers_registers():
    """GPTBigCodeModel keeps an (n_positions, n_positions) bool mask as a non-persistent buffer:
    on the device with the weights, not among the parameters."""
    from gpuplan.models import architecture_from_config

    cfg = dict(n_embd=64, n_layer=2, n_head=4, n_positions=48, vocab_size=97)
    with torch.device("meta"):
        hf = transformers.GPTBigCodeForCausalLM(
            transformers.AutoConfig.for_model("gpt_bigcode", **cfg))
    buffers = sum(b.numel() * b.element_size() for b in hf.buffers())
    arch = architecture_from_config({"model_type": "gpt_bigcode", **cfg}, name="b")
    assert arch.buffer_bytes == buffers == 48 * 48


# Real checkpoints written by transformers (tiny random models, CPU): the headers give the same
# counts as the model, sharded or not, including transformers 5's per-expert MoE layout on disk.
CHECKPOINTS = {
    "mixtral-sharded": ("mixtral", "MixtralForCausalLM",
                        dict(_SMALL, intermediate_size=48, num_key_value_heads=2,
                             num_local_experts=3, num_experts_per_tok=2), "20KB"),
    "gpt2-tied": ("gpt2", "GPT2LMHeadModel",
                  dict(n_embd=32, n_layer=2, n_head=4, vocab_size=97, n_positions=16,
                       bos_token_id=0, eos_token_id=0), None),
    "qwen2-moe-bf16": ("qwen2_moe", "Qwen2MoeForCausalLM",
                       dict(_SMALL, intermediate_size=48, moe_intermediate_size=16,
                            shared_expert_intermediate_size=24, num_experts=4,
                            num_experts_per_tok=2, num_key_value_heads=2), "30KB"),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINTS))
def test_saved_checkpoints_read_back_exactly(tmp_path, case):
    model_type, cls_name, cfg, shard = CHECKPOINTS[case]
    torch.manual_seed(0)
    hf = getattr(transformers, cls_name)(transformers.AutoConfig.for_model(model_type, **cfg))
    if case.endswith("bf16"):
        hf = hf.to(torch.bfloat16)
    kwargs = {"max_shard_size": shard} if shard else {}
    hf.save_pretrained(tmp_path, **kwargs)
    assert (tmp_path / "model.safetensors.index.json").exists() == bool(shard)
    m = load_model(str(tmp_path))
    assert m.source == "safetensors" and m.architecture is not None
    assert m.params.total == sum(p.numel() for p in hf.parameters())
    assert m.checkpoint_dtype == ("BF16" if case.endswith("bf16") else "F32")
    assert not [n for n in m.notes if "not in the checkpoint" in n or "not parameters" in n]
    # The checkpoint's tensors fall on the architecture's patterns, with the same components.
    arch_names = {t.name: t.component for t in m.architecture.tensors}
    assert {t.name: t.component for t in m.tensors} == arch_names


# Random small configs of every family, against the same oracle (hypothesis).
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@st.composite
def _random_config(draw, family):
    heads = draw(st.sampled_from([1, 2, 4]))
    hd = draw(st.sampled_from([4, 8]))
    H = heads * hd
    kv = draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0]))
    L = draw(st.integers(1, 3))
    V = draw(st.integers(5, 40))
    I = draw(st.integers(4, 40))
    tie = draw(st.booleans())
    ids = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if family in ("llama", "mistral", "qwen2", "phi3", "gemma2", "mixtral", "qwen2_moe"):
        cfg = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads,
                   num_key_value_heads=kv, vocab_size=V, intermediate_size=I,
                   tie_word_embeddings=tie, **ids)
        if family == "llama":
            cfg.update(attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
        if family == "gemma2":
            cfg.update(head_dim=draw(st.sampled_from([4, 8, 16])))
        if family == "mixtral":
            E = draw(st.integers(1, 4))
            cfg.update(num_local_experts=E, num_experts_per_tok=draw(st.integers(1, E)))
        if family == "qwen2_moe":
            E = draw(st.integers(1, 4))
            cfg.update(num_experts=E, num_experts_per_tok=draw(st.integers(1, E)),
                       moe_intermediate_size=draw(st.integers(2, 20)),
                       shared_expert_intermediate_size=draw(st.integers(2, 20)),
                       decoder_sparse_step=draw(st.integers(1, 2)),
                       mlp_only_layers=draw(st.lists(st.integers(0, L - 1), max_size=2,
                                                     unique=True)))
    elif family == "gpt2":
        cfg = dict(n_embd=H, n_layer=L, n_head=heads, vocab_size=V,
                   n_positions=draw(st.integers(4, 30)), n_inner=draw(st.one_of(st.none(),
                                                                              st.integers(4, 40))),
                   tie_word_embeddings=tie, **ids)
    elif family == "gpt_bigcode":
        cfg = dict(n_embd=H, n_layer=L, n_head=heads, vocab_size=V,
                   n_positions=draw(st.integers(4, 30)), n_inner=draw(st.one_of(st.none(),
                                                                              st.integers(4, 40))),
                   multi_query=draw(st.booleans()), tie_word_embeddings=tie, **ids)
    elif family == "gpt_neox":
        cfg = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads, vocab_size=V,
                   intermediate_size=I, attention_bias=draw(st.booleans()),
                   tie_word_embeddings=tie, **ids)
    elif family == "opt":
        cfg = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads, vocab_size=V,
                   ffn_dim=I, word_embed_proj_dim=draw(st.sampled_from([H, 4, 12])),
                   do_layer_norm_before=draw(st.booleans()), enable_bias=draw(st.booleans()),
                   layer_norm_elementwise_affine=draw(st.booleans()),
                   max_position_embeddings=draw(st.integers(4, 30)), tie_word_embeddings=tie,
                   bos_token_id=0, eos_token_id=0, pad_token_id=1)
    elif family == "falcon":
        new = draw(st.booleans())
        cfg = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads, vocab_size=V,
                   new_decoder_architecture=new, multi_query=draw(st.booleans()),
                   num_kv_heads=kv, parallel_attn=draw(st.booleans()), bias=draw(st.booleans()),
                   ffn_hidden_size=I, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
    elif family == "bloom":
        cfg = dict(hidden_size=H, n_layer=L, n_head=heads, vocab_size=V,
                   apply_residual_connection_post_layernorm=draw(st.booleans()),
                   tie_word_embeddings=tie)
    elif family == "bert":
        cfg = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads, vocab_size=V,
                   intermediate_size=I, type_vocab_size=draw(st.integers(1, 3)),
                   max_position_embeddings=draw(st.integers(4, 30)), tie_word_embeddings=tie)
    else:
        patch = draw(st.sampled_from([4, 8]))
        cfg = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads,
                   intermediate_size=I, patch_size=patch, image_size=patch * draw(st.integers(1, 3)),
                   num_channels=draw(st.integers(1, 3)), qkv_bias=draw(st.booleans()),
                   num_labels=draw(st.integers(0, 5)))
    return cfg


_CLASS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
          "qwen2": "Qwen2ForCausalLM", "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
          "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
          "gpt2": "GPT2LMHeadModel", "gpt_bigcode": "GPTBigCodeForCausalLM",
          "gpt_neox": "GPTNeoXForCausalLM", "opt": "OPTForCausalLM",
          "falcon": "FalconForCausalLM", "bloom": "BloomForCausalLM",
          "bert": "BertForMaskedLM", "vit": "ViTForImageClassification"}


@pytest.mark.parametrize("family", sorted(_CLASS))
@hypothesis.settings(max_examples=12, deadline=None, derandomize=True, database=None)
@hypothesis.given(data=st.data())
def test_random_configs_match_transformers_on_meta(family, data):
    from transformers.core_model_loading import revert_weight_conversion

    from gpuplan.models import architecture_from_config, count_params
    from gpuplan.models._types import Model

    cfg = data.draw(_random_config(family))
    hf_config = transformers.AutoConfig.for_model(family, **cfg)
    with torch.device("meta"):
        hf = getattr(transformers, _CLASS[family])(hf_config)
    arch = architecture_from_config({"model_type": family, **cfg}, name="random")
    ours = Model(name="random", params=count_params(arch.tensors, arch), tensors=arch.tensors,
                 architecture=arch, source="config")
    assert ours.params.total == sum(p.numel() for p in hf.parameters())
    saved = revert_weight_conversion(hf, dict(hf.named_parameters()))
    assert _expand(ours) == {k: tuple(v.shape) for k, v in saved.items()}
