"""The catalog entries of late 2026 (catalog43) against figures computed without gpuplan.

Their parameter lists equal transformers on the meta device like every catalog entry
(tests/integration/test_models_oracle.py runs over the whole catalog). Here each total is held
to a published figure or to a hand calculation from the config.json values the entry's notes
cite; no expected value below is gpuplan's own output.
"""

from __future__ import annotations

import pytest

from gpuplan.models import catalog_config, catalog_entry, load_model
from gpuplan.models._catalog import resolve_catalog_name


def _dense(cfg: dict, *, qkv_bias: bool) -> int:
    """A llama-style decoder by hand: embedding (+ untied head), per layer q/k/v/o (+ q/k/v
    biases), a gated MLP (gate, up, down) and two RMSNorms, and the final norm."""
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh, kv, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or H // nh
    attn = H * nh * hd + 2 * H * kv * hd + nh * hd * H
    if qkv_bias:
        attn += nh * hd + 2 * kv * hd
    per_layer = attn + 3 * H * inter + 2 * H
    head = 0 if cfg.get("tie_word_embeddings") else V * H
    return V * H + head + L * per_layer + H


@pytest.mark.parametrize("name,qkv_bias", [
    ("qwen2.5-14b", True), ("qwen2.5-32b", True), ("qwen2.5-coder-32b", True),
    ("mistral-nemo-12b", False),
    # head_dim 128, not 5120 / 32 = 160: the file's explicit head_dim is what is built
    ("mistral-small-3.1-24b", False),
])
def test_dense_totals_by_hand_from_the_cited_config(name, qkv_bias):
    assert load_model(name).params.total == _dense(catalog_config(name), qkv_bias=qkv_bias)


def test_phi_4_by_hand_fused_qkv_and_gate_up():
    # Phi3ForCausalLM stores qkv_proj (q 40x128 + k, v 10x128 each) and gate_up_proj (2 x 17920)
    # fused; the count is the same as separate projections: no biases, untied head
    H, L, V, I = 5120, 40, 100352, 17920
    qkv = H * (40 * 128 + 2 * 10 * 128)
    per_layer = qkv + 40 * 128 * H + 2 * H * I + I * H + 2 * H
    assert load_model("phi-4").params.total == 2 * V * H + L * per_layer + H


@pytest.mark.parametrize("name,non_embedding", [
    # Gemma 2 report (arXiv 2408.00118), table 2, "Non-embedding Parameters" (as summarized at
    # aili.app/share/4zAAqmDNDHyxQWyJrjAdk4): 2,024,517,888 / 8,324,201,984 / 26,047,480,320
    ("gemma-2-2b", 2_024_517_888),
    ("gemma-2-9b", 8_324_201_984),
    ("gemma-2-27b", 26_047_480_320),
])
def test_gemma_2_non_embedding_counts_are_the_reports_to_the_parameter(name, non_embedding):
    p = load_model(name).params
    assert p.by_component["head"] == 0  # tied: the embedding is the head
    assert p.total - p.embedding == non_embedding


def _b(n: int, decimals: int = 0) -> float:
    return round(n / 1e9, decimals)


@pytest.mark.parametrize("name,total,active", [
    ("mixtral-8x22b", 141, 39),            # mistral.ai: 141B total, 39B active (140.6 / 39.2)
    ("qwen3-coder-480b-a35b", 480, 35),    # card: 480B total, 35B active, embedding counted
])
def test_moe_totals_and_active_read_as_the_cards_state_them(name, total, active):
    p = load_model(name).params
    assert (_b(p.total), _b(p.active)) == (total, active)


def test_deepseek_v2_lite_is_the_15_7b_with_2_4b_activated():
    # DeepSeek-V2 report (arXiv 2405.04434), appendix B: 15.7B total, 2.4B activated per token;
    # as for V3, DeepSeek's "activated" leaves the input embedding out (2.45B here: "2.4B")
    p = load_model("deepseek-v2-lite").params
    assert _b(p.total, 1) == 15.7
    assert 2.4e9 <= p.active - p.embedding < 2.5e9
    a = load_model("deepseek-v2-lite").architecture
    assert a.mla is not None and a.mla.q_lora_rank == 0 and a.mla.kv_lora_rank == 512
    assert a.moe_layers == tuple(range(1, 27))  # layer 0 dense (first_k_dense_replace 1)
    assert (a.num_experts, a.experts_per_token, a.num_layers) == (64, 6, 27)


def test_glm_4_5_reads_as_the_report_counts_it():
    """GLM-4.5's 355B total / 32B active: the report counts neither the embedding nor the output
    layer, and its total includes the one MTP layer transformers does not build."""
    p = load_model("glm-4.5").params
    H, NH, KV, hd, E, I = 5120, 96, 8, 128, 160, 1536
    # one MTP layer by hand: a MoE decoder layer (q/k/v with bias, o, per-head q/k norms; router
    # + score bias, 160 experts, a shared expert; two norms), eh_proj (2H -> H), enorm, hnorm and
    # the shared head's norm
    attn = H * NH * hd + NH * hd + 2 * (H * KV * hd + KV * hd) + NH * hd * H + 2 * hd
    moe = E * H + E + E * 3 * H * I + 3 * H * I
    mtp = attn + moe + 2 * H + 2 * H * H + 3 * H
    emb_and_head = p.by_component["embeddings"] + p.by_component["head"]
    assert _b(p.total - emb_and_head + mtp) == 355
    assert _b(p.active - emb_and_head) == 32
    assert load_model("glm-4.5").architecture.mtp_layers == 1


def test_mistral_small_3_1_is_its_text_model():
    entry = catalog_entry("mistral-small-3.1-24b")
    cfg = catalog_config("mistral-small-3.1-24b")
    assert entry.family == "mistral" and cfg["architectures"] == ["MistralForCausalLM"]
    assert "vision tower" in entry.notes and "text_config" in entry.notes


# The Llama 3.2 Instruct files have the base models' architecture (docs/models.md cites the copies
# read) and differ in eos_token_id only: an alias, not an entry of its own.
@pytest.mark.parametrize("alias,name", [
    ("llama-3.2-1b-instruct", "llama-3.2-1b"), ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
    ("llama-3.2-3b-instruct", "llama-3.2-3b"), ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("Qwen/Qwen2.5-14B", "qwen2.5-14b"), ("mistralai/Mistral-Nemo-Base-2407", "mistral-nemo-12b"),
])
def test_aliases_resolve(alias, name):
    assert resolve_catalog_name(alias) == name
