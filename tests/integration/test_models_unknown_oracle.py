"""Oracle for an unlisted ``model_type`` (issue 28, part 2): the nearest-family count against
transformers' own class for that model_type, built from the same config.json on the meta device;
and real checkpoints written by ``save_pretrained`` whose config.json is renamed to a model_type
gpuplan does not know, read back from their safetensors headers.

The nearest family's count need not be the model's: each case below states the difference
measured with transformers 5.24 and the tensors it comes from, and asserts exactly that
difference (so a change in either the reader or the choice of family shows here), and that it
stays within the stated bound.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.models import build_architecture, load_model  # noqa: E402

# Published config.json shapes (the Hub repository named), as dicts.
GRANITE_3_2B = dict(  # ibm-granite/granite-3.0-2b-base
    hidden_size=2048, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8,
    intermediate_size=8192, vocab_size=49155, max_position_embeddings=4096,
    tie_word_embeddings=True, attention_bias=False, mlp_bias=False, embedding_multiplier=12.0,
    residual_multiplier=0.22, attention_multiplier=0.015625, logits_scaling=8.0,
    hidden_act="silu")
COMMAND_R = dict(  # CohereForAI/c4ai-command-r-v01
    hidden_size=8192, num_hidden_layers=40, num_attention_heads=64, num_key_value_heads=64,
    intermediate_size=22528, vocab_size=256000, max_position_embeddings=8192,
    tie_word_embeddings=True, use_qk_norm=False, logit_scale=0.0625, hidden_act="silu",
    layer_norm_eps=1e-5)
EXAONE_3_8B = dict(  # LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct
    hidden_size=4096, num_layers=32, num_attention_heads=32, num_key_value_heads=8,
    intermediate_size=14336, vocab_size=102400, max_position_embeddings=4096,
    activation_function="silu", layer_norm_epsilon=1e-5, tie_word_embeddings=False,
    rope_theta=500000.0)
STARCODER2_3B = dict(  # bigcode/starcoder2-3b
    hidden_size=3072, num_hidden_layers=30, num_attention_heads=24, num_key_value_heads=2,
    intermediate_size=12288, vocab_size=49152, max_position_embeddings=16384,
    sliding_window=4096, use_bias=True, hidden_act="gelu_pytorch_tanh", norm_epsilon=1e-5,
    tie_word_embeddings=True)
PHI_2 = dict(  # microsoft/phi-2
    hidden_size=2560, num_hidden_layers=32, num_attention_heads=32, intermediate_size=10240,
    vocab_size=51200, max_position_embeddings=2048, hidden_act="gelu_new",
    partial_rotary_factor=0.4, qk_layernorm=False, tie_word_embeddings=False,
    layer_norm_eps=1e-5)
MINISTRAL_8B = dict(  # mistralai/Ministral-8B-Instruct-2410, as transformers' "ministral"
    hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, intermediate_size=12288, vocab_size=131072, max_position_embeddings=32768,
    sliding_window=32768, tie_word_embeddings=False, hidden_act="silu")
OLMOE_1B_7B = dict(  # allenai/OLMoE-1B-7B-0924
    hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
    intermediate_size=1024, vocab_size=50304, num_experts=64, num_experts_per_tok=8,
    max_position_embeddings=4096, tie_word_embeddings=False, clip_qkv=None,
    norm_topk_prob=False)
GRANITE_MOE_1B = dict(  # ibm-granite/granite-3.0-1b-a400m-base
    hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=8,
    intermediate_size=512, vocab_size=49155, num_local_experts=32, num_experts_per_tok=8,
    max_position_embeddings=4096, tie_word_embeddings=True, embedding_multiplier=12.0,
    logits_scaling=6.0)
DEEPSEEK_V32 = dict(  # deepseek-ai/DeepSeek-V3.2-Exp
    hidden_size=7168, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
    vocab_size=129280, intermediate_size=18432, moe_intermediate_size=2048,
    n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1, first_k_dense_replace=3,
    q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
    v_head_dim=128, n_group=8, topk_group=4, index_n_heads=64, index_head_dim=128,
    index_topk=2048, max_position_embeddings=163840, tie_word_embeddings=False)
DOTS1 = dict(  # rednote-hilab/dots.llm1.base
    hidden_size=4096, num_hidden_layers=62, num_attention_heads=32, num_key_value_heads=32,
    head_dim=128, intermediate_size=10944, moe_intermediate_size=1408, n_routed_experts=128,
    num_experts_per_tok=6, n_shared_experts=2, first_k_dense_replace=1, vocab_size=152064,
    tie_word_embeddings=False, max_position_embeddings=32768)
ERNIE45_21B = dict(  # baidu/ERNIE-4.5-21B-A3B-PT: its own expert key names
    hidden_size=2560, num_hidden_layers=28, num_attention_heads=20, num_key_value_heads=4,
    head_dim=128, intermediate_size=12288, moe_intermediate_size=1536, moe_num_experts=64,
    moe_k=6, moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_interval=1,
    vocab_size=103424, tie_word_embeddings=True, use_bias=False, max_position_embeddings=131072)

#: model_type -> (config, nearest family, gpuplan - transformers as measured, what it is)
#: (olmo2 left these cases when it got its own reader, families43: planned as llama it was
#: -32 x (4096 + 4096) for OLMo-2-7B, llama lacking its q_norm / k_norm; the mystery_olmo2
#: checkpoints below still take the nearest-family path)
CASES = {
    "granite": (GRANITE_3_2B, "llama", 0, "the multipliers hold no parameter"),
    "cohere": (COMMAND_R, "llama", 40 * 8192,
               "llama's second norm per layer: Cohere has one (parallel attention and MLP)"),
    "exaone": (EXAONE_3_8B, "llama", 0, "the same tensors under other names"),
    "starcoder2": (STARCODER2_3B, "falcon", 0, "falcon's biased GQA decoder is the same shape"),
    "phi": (PHI_2, "gpt_neox", 32 * 2 * 2560 - 51200,
            "gpt_neox's second biased LayerNorm per layer, less phi's lm_head bias"),
    "ministral": (MINISTRAL_8B, "mistral", 0, "mistral's tensors"),
    "olmoe": (OLMOE_1B_7B, "mixtral", -16 * (2048 + 2048), "OLMoE's q_norm / k_norm"),
    "granitemoe": (GRANITE_MOE_1B, "mixtral", 0, "mixtral's tensors"),
    "deepseek_v32": (DEEPSEEK_V32, "deepseek_v3",
                     -61 * (64 * 128 * 1536 + 128 * 7168 + 2 * 128 + 64 * 7168),
                     "the lightning indexer (wq_b, wk, k_norm, weights_proj) per layer"),
    "dots1": (DOTS1, "glm4_moe", -62 * 2 * 128, "dots1's per-head q_norm / k_norm"),
    "ernie4_5_moe": (ERNIE45_21B, "glm4_moe", -27 * 64,
                     "ERNIE's e_score_correction_bias is a parameter (glm4_moe's a buffer)"),
}

#: The largest relative difference any case above shows (DeepSeek-V3.2's indexer: 0.127%).
BOUND = 0.0013


def _hf_total(model_type: str, cfg: dict) -> int:
    hc = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hc)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_nearest_family_count_against_transformers(model_type):
    cfg, family, delta, _what = CASES[model_type]
    arch, notes = build_architecture(dict(cfg, model_type=model_type), name=model_type)
    assert arch.family == family
    assert f"model_type {model_type!r} is not supported: planned as its nearest family, " \
           f"{family}" in notes[0]
    ours = sum(t.total for t in arch.tensors)
    theirs = _hf_total(model_type, cfg)
    assert ours - theirs == delta
    assert abs(delta) / theirs <= BOUND


def test_mistral3_text_part_against_its_language_model():
    # Mistral3Config ties the head unless the top level says otherwise (transformers 5.24)
    text = dict(MINISTRAL_8B, model_type="mistral")
    arch, notes = build_architecture(dict(model_type="mistral3", text_config=text,
                                          tie_word_embeddings=False,
                                          vision_config={"hidden_size": 1024}), name="m3")
    hc = transformers.AutoConfig.for_model("mistral3", text_config=text,
                                           tie_word_embeddings=False)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hc)
    lm = sum(p.numel() for n, p in model.named_parameters()
             if n.startswith(("model.language_model.", "lm_head.")))
    assert sum(t.total for t in arch.tensors) == lm
    assert "vision/audio towers and the projector are not counted" in notes[0]


# ---- real checkpoints of an unknown model_type ------------------------------------------------

TINY = {
    "starcoder2": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=128, vocab_size=101,
                       use_bias=True, sliding_window=32, tie_word_embeddings=True),
    "olmo2": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, vocab_size=101,
                  tie_word_embeddings=False),
    "olmoe": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=32, vocab_size=101, num_experts=4,
                  num_experts_per_tok=2, tie_word_embeddings=False),
    "deepseek_v32": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         vocab_size=101, intermediate_size=96, moe_intermediate_size=32,
                         n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                         first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
                         qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                         topk_group=1, index_n_heads=2, index_head_dim=16, index_topk=4,
                         tie_word_embeddings=False),
}


def _checkpoint(tmp_path, model_type):
    hc = transformers.AutoConfig.for_model(model_type, **TINY[model_type])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hc).to(torch.bfloat16)
    d = tmp_path / model_type
    model.save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = f"mystery_{model_type}"
    (d / "config.json").write_text(json.dumps(cfg))
    return d, sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type,family", [("starcoder2", "falcon"), ("olmo2", "llama"),
                                               ("olmoe", "mixtral"),
                                               ("deepseek_v32", "deepseek_v3")])
def test_unknown_checkpoint_weights_come_from_its_headers(tmp_path, model_type, family):
    d, total = _checkpoint(tmp_path, model_type)
    m = load_model(str(d))
    assert m.source == "safetensors" and m.checkpoint_dtype == "BF16"
    assert not any("not understood:" in n for n in m.notes)
    # exact: the headers, whatever the nearest family implies; DeepSeek-V3.2 also writes its
    # e_score_correction_bias buffer (one per expert and MoE layer: 4 here)
    total += 4 if model_type == "deepseek_v32" else 0
    assert m.params.total == total
    assert {t.dtype for t in m.tensors} == {"BF16"}
    arch = m.architecture
    assert arch.family == family
    implied = sum(t.total for t in arch.tensors)
    [said] = [n for n in m.notes if n.startswith(f"the weights of this mystery_{model_type}")]
    assert f"{total:,} parameters" in said and f"implies {implied:,} ({total - implied:+,})" \
        in said
    if family == "deepseek_v3":  # the MLA cache comes from the config's ranks
        assert arch.kv_elements_per_layer == 16 + 8


def test_fit_and_models_on_an_unknown_checkpoint_directory(tmp_path, cli):
    d, total = _checkpoint(tmp_path, "olmo2")
    code, out, err = cli("models", str(d))
    flat = " ".join(out.split())
    assert code == 0 and f"{total:,}" in flat
    assert "note: model_type 'mystery_olmo2' is not supported: planned as its nearest family, " \
           "llama" in flat
    code, out, err = cli("fit", str(d), "--gpu", "h100", "--no-speed")
    flat = " ".join(out.split())
    assert code == 0 and "safetensors headers" in flat
    assert "planned as its nearest family, llama" in flat
