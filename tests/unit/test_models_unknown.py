"""An unlisted ``model_type`` (issue 28, part 2): a decoder config planned as its nearest family
with one note naming every assumption; encoder-decoders, encoders and state-space models refused
with one line; a model directory read from its safetensors headers where the config is not
understood; the CLI's ``fit`` and ``models`` on both.

The configs are the published config.json shapes of each model (the Hub repository named beside
each). The counts asserted here are hand formulas, independent of the code; the comparison with
transformers' own classes on the meta device is tests/integration/test_models_unknown_oracle.py.
"""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import ModelFileError
from gpuplan.models import build_architecture, load_model

#: internlm/internlm2_5-7b (InternLM2ForCausalLM, remote code: not in transformers).
INTERNLM2_5_7B = dict(
    model_type="internlm2", architectures=["InternLM2ForCausalLM"], hidden_size=4096,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
    vocab_size=92544, max_position_embeddings=32768, bias=False, rms_norm_eps=1e-5,
    rope_theta=1000000, rope_scaling={"type": "dynamic", "factor": 2.0}, hidden_act="silu",
    tie_word_embeddings=False, torch_dtype="bfloat16",
    auto_map={"AutoConfig": "configuration_internlm2.InternLM2Config"}, attn_implementation="eager")

#: ibm-granite/granite-3.0-2b-base
GRANITE_3_2B = dict(
    model_type="granite", hidden_size=2048, num_hidden_layers=40, num_attention_heads=32,
    num_key_value_heads=8, intermediate_size=8192, vocab_size=49155,
    max_position_embeddings=4096, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
    embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625,
    logits_scaling=8.0, hidden_act="silu")

#: LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct: its own key names (num_layers, activation_function).
EXAONE_3_8B = dict(
    model_type="exaone", hidden_size=4096, num_layers=32, num_attention_heads=32,
    num_key_value_heads=8, intermediate_size=14336, vocab_size=102400,
    max_position_embeddings=4096, activation_function="silu", layer_norm_epsilon=1e-5,
    tie_word_embeddings=False, rope_theta=500000.0)

#: microsoft/phi-2: a two-matrix gelu_new MLP, biased, MHA.
PHI_2 = dict(
    model_type="phi", hidden_size=2560, num_hidden_layers=32, num_attention_heads=32,
    intermediate_size=10240, vocab_size=51200, max_position_embeddings=2048,
    hidden_act="gelu_new", partial_rotary_factor=0.4, qk_layernorm=False,
    tie_word_embeddings=False, layer_norm_eps=1e-5)

#: bigcode/starcoder2-3b: two-matrix MLP, GQA (2 KV heads), biases, a 4,096 window.
STARCODER2_3B = dict(
    model_type="starcoder2", hidden_size=3072, num_hidden_layers=30, num_attention_heads=24,
    num_key_value_heads=2, intermediate_size=12288, vocab_size=49152,
    max_position_embeddings=16384, sliding_window=4096, use_bias=True,
    hidden_act="gelu_pytorch_tanh", norm_epsilon=1e-5, tie_word_embeddings=True)


def _gqa_llama(H, L, NH, KV, hd, I, V, tie, *, attn_bias=False):
    """LlamaForCausalLM's parameters by hand: embeddings, q/k/v/o, gate/up/down, two RMSNorms per
    layer, the final norm, the head unless tied."""
    attn = 2 * H * NH * hd + 2 * H * KV * hd + (NH * hd + 2 * KV * hd + H if attn_bias else 0)
    return V * H + L * (attn + 3 * H * I + 2 * H) + H + (0 if tie else V * H)


def _plan(cfg):
    arch, notes = build_architecture(cfg, name=cfg["model_type"])
    return arch, notes, sum(t.total for t in arch.tensors)


def test_internlm2_plans_as_llama_exactly_and_says_so_in_one_line():
    arch, notes, total = _plan(INTERNLM2_5_7B)
    assert arch.family == "llama" and arch.hf_class == "LlamaForCausalLM"
    # wqkv fused holds (32 + 2 x 8) x 128 rows: the same elements as separate q/k/v
    assert total == _gqa_llama(4096, 32, 32, 8, 128, 14336, 92544, False) == 7_737_708_544
    assert (arch.num_kv_heads, arch.head_dim, arch.max_position_embeddings) == (8, 128, 32768)
    assert arch.torch_dtype == "bfloat16"
    [note] = notes
    assert "\n" not in note
    assert note.startswith("model_type 'internlm2' is not supported: planned as its nearest "
                           "family, llama (LlamaForCausalLM)")
    assert "head_dim = 128 (hidden / heads)" in note
    # a key it has no use for is named; the rope, eps and remote-code keys change no size
    assert "not understood, so ignored: attn_implementation;" in note
    assert "auto_map" not in note and "rope_scaling" not in note


def test_exaone_own_key_names_are_read_as_the_common_ones():
    arch, notes, total = _plan(EXAONE_3_8B)
    assert (arch.family, arch.num_layers, arch.activation) == ("llama", 32, "silu")
    assert total == _gqa_llama(4096, 32, 32, 8, 128, 14336, 102400, False)
    assert "ignored" not in notes[0]


def test_granite_multipliers_are_named_as_ignored():
    arch, notes, total = _plan(GRANITE_3_2B)
    assert arch.family == "llama" and arch.tie_word_embeddings
    assert total == _gqa_llama(2048, 40, 32, 8, 64, 8192, 49155, True)
    assert ("not understood, so ignored: attention_multiplier, embedding_multiplier, "
            "logits_scaling, residual_multiplier") in notes[0]


def test_a_two_matrix_gelu_mlp_plans_as_gpt_neox_or_falcon():
    phi, notes, total = _plan(PHI_2)
    assert (phi.family, phi.mlp, phi.num_kv_heads) == ("gpt_neox", "gelu", 32)
    H, L, I, V = 2560, 32, 10240, 51200
    # GPT-NeoX: biased fused qkv and dense, biased MLP, two biased LayerNorms, untied head
    assert total == V * H * 2 + L * (4 * H * H + 4 * H + 2 * H * I + I + H + 4 * H) + 2 * H
    assert "num_key_value_heads = 32 (no KV-head count: multi-head attention)" in notes[0]
    sc, notes, total = _plan(STARCODER2_3B)
    assert (sc.family, sc.num_kv_heads, sc.mlp_bias) == ("falcon", 2, True)
    # the window falcon has no place for is said, not silently dropped
    assert sc.sliding_window is None
    assert "sliding_window 4096 not modeled (falcon has none)" in notes[0]


@pytest.mark.parametrize("extra,family,why", [
    (dict(kv_lora_rank=64, q_lora_rank=96, qk_rope_head_dim=16, qk_nope_head_dim=32,
          v_head_dim=32), "deepseek_v3", "Multi-head Latent Attention"),
    (dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
          shared_expert_intermediate_size=96), "qwen2_moe", "a shared-expert width"),
    (dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
          n_shared_experts=1, first_k_dense_replace=1), "glm4_moe", "shared experts"),
    (dict(num_experts=8, top_k=2, qk_layernorm=True), "qwen3_moe", "QK-norm"),
    (dict(num_local_experts=8, num_experts_per_tok=2), "mixtral", "every layer"),
    (dict(use_qk_norm=True), "qwen3", "QK-norm"),
    (dict(sliding_window=64, layer_types=["sliding_attention", "full_attention"]), "qwen3",
     "layer_types"),
    (dict(sliding_window=64), "mistral", "a sliding window"),
    ({}, "llama", "no other distinguishing key"),
])
def test_the_keys_present_choose_the_family(extra, family, why):
    cfg = dict(model_type="novel", d_model=64, n_layer=2, n_head=4, num_kv_heads=2, ffn_dim=96,
               vocab_size=101, head_dim=16, tie_word_embeddings=False,
               max_position_embeddings=512, hidden_act="silu", **extra)
    arch, notes, _ = _plan(cfg)
    assert arch.family == family
    assert f"family, {family} (" in notes[0] and why in notes[0]
    assert len([n for n in notes if "nearest family" in n]) == 1


def test_experts_counts_are_the_config_numbers():
    arch, notes, total = _plan(dict(
        model_type="novel_moe", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
        vocab_size=101, intermediate_size=160, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=48, n_shared_experts=2, first_k_dense_replace=1,
        tie_word_embeddings=True, max_position_embeddings=64))
    assert (arch.family, arch.num_experts, arch.experts_per_token) == ("glm4_moe", 8, 2)
    assert arch.moe_layers == (1, 2) and arch.shared_expert_intermediate_size == 96
    H, V = 64, 101
    attn = 4 * H * H  # MHA with no biases
    dense = 3 * H * 160
    moe = 8 * H + 8 * 3 * H * 48 + 3 * H * 96  # router, routed experts, two shared experts
    assert total == V * H + 3 * (attn + 2 * H) + dense + 2 * moe + H


def test_defaults_taken_are_each_named():
    _, notes, _ = _plan(dict(model_type="bare", hidden_size=64, num_hidden_layers=2,
                             num_attention_heads=4, vocab_size=10))
    for said in ("num_key_value_heads = 4", "head_dim = 16", "intermediate_size = 256 (4 x hidden)",
                 "hidden_act = silu", "max_position_embeddings = 2048",
                 "tie_word_embeddings = false"):
        assert said in notes[0]


@pytest.mark.parametrize("cfg,why", [
    # google-t5/t5-small
    (dict(model_type="t5", d_model=512, num_layers=6, num_heads=8, d_kv=64, d_ff=2048,
          vocab_size=32128, is_encoder_decoder=True), "is_encoder_decoder is true"),
    # openai/whisper-tiny
    (dict(model_type="whisper", d_model=384, encoder_layers=4, decoder_layers=4,
          encoder_attention_heads=6, vocab_size=51865), 'it has "encoder_layers"'),
    # FacebookAI/roberta-base
    (dict(model_type="roberta", architectures=["RobertaForMaskedLM"], hidden_size=768,
          num_hidden_layers=12, num_attention_heads=12, vocab_size=50265),
     "its architectures are RobertaForMaskedLM"),
    # state-spaces/mamba-130m-hf (no attention at all)
    (dict(model_type="mamba", hidden_size=768, num_hidden_layers=24, state_size=16,
          vocab_size=50280), 'state-space or linear-attention layers ("state_size")'),
])
def test_non_decoders_are_refused_in_one_line(cfg, why):
    with pytest.raises(ModelFileError) as e:
        build_architecture(cfg, name="cfg")
    text = str(e.value)
    assert text.startswith(f"cfg: model_type {cfg['model_type']!r} is not supported and is not "
                           "a decoder-only transformer language model")
    assert why in text and "\n" not in text


def test_a_missing_structural_size_is_one_line():
    with pytest.raises(ModelFileError, match=r"^cfg: model_type 'x' is not supported, and "
                                             r'without "vocab_size" or "n_vocab"'):
        build_architecture(dict(model_type="x", hidden_size=64, n_layer=2, n_head=4),
                           name="cfg")


def test_a_multimodal_config_plans_its_text_config():
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503: a mistral text model, a pixtral tower
    cfg = dict(model_type="mistral3", architectures=["Mistral3ForConditionalGeneration"],
               torch_dtype="bfloat16", vision_config=dict(hidden_size=1024),
               text_config=dict(model_type="mistral", hidden_size=5120, num_hidden_layers=40,
                                num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                intermediate_size=32768, vocab_size=131072,
                                max_position_embeddings=131072, sliding_window=None))
    arch, notes, total = _plan(cfg)
    assert arch.family == "mistral" and arch.sliding_window is None
    assert total == _gqa_llama(5120, 40, 32, 8, 128, 32768, 131072, False)
    [note] = notes
    assert "its text_config is planned" in note and "as mistral, its own model_type" in note


# ---- the CLI -------------------------------------------------------------------------------

def test_fit_and_models_show_the_assumptions(tmp_path, cli):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(GRANITE_3_2B))
    code, out, err = cli("models", str(p))
    assert code == 0 and err == ""
    flat = " ".join(out.split())
    assert "note: model_type 'granite' is not supported: planned as its nearest family" in flat
    code, out, err = cli("fit", str(p), "--gpu", "h100", "--no-speed")
    assert code == 0
    assert "planned as its nearest family, llama" in " ".join(out.split())


def test_a_refused_config_writes_nothing_and_exits_2(tmp_path, cli):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(model_type="t5", d_model=512, num_layers=6, num_heads=8,
                                 vocab_size=32128, is_encoder_decoder=True)))
    export = tmp_path / "ds.json"
    code, out, err = cli("fit", str(p), "--gpu", "h100", "--export", "deepspeed",
                         "--export-file", str(export))
    assert code == 2 and out == "" and not export.exists()
    assert err.startswith(f"gpuplan: error: {p}: model_type 't5' is not supported and is not ")
    assert err.count("\n") == 1


# ---- a directory whose config is not understood ----------------------------------------------

def test_a_directory_reads_the_weights_from_headers_when_the_config_is_refused(tmp_path):
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    (tmp_path / "config.json").write_text(json.dumps(dict(
        model_type="mamba", hidden_size=8, num_hidden_layers=1, state_size=4, vocab_size=10)))
    st.save_file({"backbone.embeddings.weight": np.zeros((10, 8), np.float16),
                  "backbone.layers.0.mixer.in_proj.weight": np.zeros((32, 8), np.float16),
                  "backbone.layers.0.mixer.A_log": np.zeros((16, 4), np.float32)},
                 str(tmp_path / "model.safetensors"))
    m = load_model(str(tmp_path))
    assert m.source == "safetensors" and m.architecture is None
    assert m.params.total == 80 + 256 + 64
    assert {t.dtype for t in m.tensors} == {"F16", "F32"}
    assert any(n.startswith("config.json is not understood (model_type 'mamba' is not "
                            "supported and is not a decoder-only") for n in m.notes)
    assert any(n.startswith("the config is not understood: the architecture") for n in m.notes)
    # with no header either, the refusal stands
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ModelFileError, match="is not a decoder-only"):
        load_model(str(tmp_path))


def test_a_model_type_that_is_no_name_is_refused_not_planned():
    cfg = dict(model_type="\x1b[31mllama\n", hidden_size=64, num_hidden_layers=2,
               num_attention_heads=4, vocab_size=10)
    with pytest.raises(ModelFileError) as e:
        build_architecture(cfg, name="cfg")
    assert "nor a model_type name" in str(e.value) and "\x1b" not in str(e.value)
