"""OLMo 2 (olmo2): the catalog entries by hand from their cited config.json values and the model
card, and the reader's shape rules read off transformers' modeling_olmo2.py (5.x). The tensor
lists equal transformers on the meta device in tests/integration/test_models_oracle.py."""

from __future__ import annotations

import pytest

from gpuplan.models import architecture_from_config, catalog_config, load_model


def _olmo2(cfg: dict) -> int:
    """By hand: embedding + untied head; per layer q/k/v/o (no bias), q_norm of heads x head_dim,
    k_norm of kv_heads x head_dim, a gated MLP and the two post-norms (no input norm); the final
    norm."""
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh, kv, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    hd = H // nh
    attn = 2 * H * nh * hd + 2 * H * kv * hd + (nh + kv) * hd
    return 2 * V * H + L * (attn + 3 * H * inter + 2 * H) + H


#: The OLMo 2 model card's table (allenai/OLMo-2-1124-13B README, "Model Details"; vendored at
#: mauer4/Attention-From-Scratch@381a295f1d06 weights/allenai/OLMo-2-1124-13B/README.md): layers,
#: hidden size, attention heads, context length of the 7B and the 13B.
CARD = {"olmo-2-1124-7b": (32, 4096, 32, 4096), "olmo-2-1124-13b": (40, 5120, 40, 4096)}


@pytest.mark.parametrize("name,total", [
    # 7.30B and 13.72B: the cards' "7B" and "13B"
    ("olmo-2-1124-7b", 7_298_617_344), ("olmo-2-1124-13b", 13_716_198_400),
])
def test_catalog_totals_by_hand_and_the_card(name, total):
    cfg = catalog_config(name)
    assert _olmo2(cfg) == total
    m = load_model(name)
    assert m.params.total == total
    a = m.architecture
    assert (a.num_layers, a.hidden_size, a.num_heads, a.max_position_embeddings) == CARD[name]
    assert a.qk_norm == "rmsnorm_full" and not a.tie_word_embeddings


def test_reader_norms_are_post_norms_and_qk_norms_span_the_projection():
    a = architecture_from_config(dict(model_type="olmo2", hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=96, vocab_size=97), name="t")
    shapes = {t.name: t.shape for t in a.tensors}
    assert "model.layers.{i}.input_layernorm.weight" not in shapes
    assert shapes["model.layers.{i}.post_attention_layernorm.weight"] == (64,)
    assert shapes["model.layers.{i}.post_feedforward_layernorm.weight"] == (64,)
    assert shapes["model.layers.{i}.self_attn.q_norm.weight"] == (4 * 16,)
    assert shapes["model.layers.{i}.self_attn.k_norm.weight"] == (2 * 16,)
    # Olmo2Config: num_key_value_heads defaults to the heads, max_position_embeddings to 2048
    b = architecture_from_config(dict(model_type="olmo2", hidden_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=96,
                                      vocab_size=97), name="t")
    assert (b.num_kv_heads, b.max_position_embeddings) == (4, 2048)
