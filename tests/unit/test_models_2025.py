"""The models of issue 28 against their publishers' own figures (no torch).

Each figure is the model card's or the release's, at its own precision; the parameter counts
themselves equal transformers on the meta device (tests/integration/test_models_oracle.py). The
cards do not share one convention for "active": Qwen and Meta count the input embedding,
DeepSeek, Kimi, OpenAI and Zhipu do not -- each test names the reading its card uses.
"""

from __future__ import annotations

import pytest

from gpuplan.formats import WEIGHT_FORMATS, weights_bytes_in_format
from gpuplan.job import Job
from gpuplan.memory.kv import kv_cache_bytes
from gpuplan.models import load_model

GIB = 2**30


def _b(n: int, decimals: int) -> float:
    return round(n / 1e9, decimals)


@pytest.mark.parametrize("name,total,active,decimals,embedding_counted", [
    ("deepseek-v3", 671, 37, 0, False),       # DeepSeek-V3 report: 671B total, 37B activated
    ("deepseek-r1", 671, 37, 0, False),
    ("kimi-k2", 1026, 32, 0, False),          # card: "1T total, 32B activated"
    ("qwen3-235b-a22b", 235, 22, 0, True),    # Qwen3 report table 1
    ("qwen3-30b-a3b", 30.5, 3.4, 1, True),    # card 30.5B / 3.3B (3.353B, truncated by Qwen)
    ("gpt-oss-120b", 116.8, 5.1, 1, False),   # gpt-oss card: 116.83B / 5.13B
    ("gpt-oss-20b", 20.9, 3.6, 1, False),     # 20.91B / 3.61B
    ("glm-4.5-air", 106.9, 12.8, 1, False),   # card 106B / 12B (106.85B / 12.80B w/o embedding)
    ("llama-4-maverick", 401, 17, 0, True),   # Meta: 400B / 17B active (text model 400.7B)
])
def test_total_and_active_parameters_read_as_the_card_states_them(name, total, active, decimals,
                                                                   embedding_counted):
    p = load_model(name).params
    assert _b(p.total, decimals) == total
    act = p.active if embedding_counted else p.active - p.embedding
    assert _b(act, decimals) == active


def test_deepseek_v3_with_its_mtp_module_is_the_685b_on_the_hub():
    m = load_model("deepseek-v3")
    a = m.architecture
    assert a.mtp_layers == 1
    # "685B total = 671B main model + 14B multi-token-prediction module" (the Hub's README)
    assert _b(m.params.total + a.mtp_params, 0) == 684  # 684.49B: the README rounds up
    assert 13.4e9 < a.mtp_params < 14.0e9
    assert any("multi-token-prediction" in n for n in m.notes)


def test_deepseek_v3_mla_caches_the_latent_and_the_rotary_key():
    # kv_lora_rank 512 + qk_rope_head_dim 64 per token and layer, 61 layers, bf16: 70,272 bytes
    # a token, where 128 heads of K (192) and V (128) would be 5 MB
    m = load_model("deepseek-v3")
    job = Job(model=m, mode="infer", batch=2, seq=1000)
    assert kv_cache_bytes(m, job, kv_dtype="bf16") == 2 * 1000 * 61 * (512 + 64) * 2
    assert m.architecture.kv_elements_per_token == 61 * 576


def test_gpt_oss_mxfp4_checkpoint_is_the_size_openai_publishes():
    # gpt-oss model card, table 1: checkpoint size 60.8 GiB (120b) and 12.8 GiB (20b): MXFP4
    # experts (4.25 bits) beside bf16 attention, router, embeddings and head
    for name, gib in (("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)):
        m = load_model(name)
        assert m.architecture.checkpoint_format == "mxfp4"
        b = weights_bytes_in_format(WEIGHT_FORMATS["mxfp4"], m.tensors, m.architecture,
                                    m.params.total)
        assert round(b / GIB, 1) == gib


def test_gpt_oss_alternates_sliding_and_full_layers_with_sinks():
    a = load_model("gpt-oss-120b").architecture
    assert a.sliding_window == 128
    assert a.sliding_window_layers == tuple(range(0, 36, 2))
    assert a.attention_sinks and a.expert_bias
    assert (a.num_experts, a.experts_per_token) == (128, 4)


def test_gemma3_five_local_layers_to_one_global():
    a = load_model("gemma-3-27b").architecture
    assert a.num_layers == 62 and a.sliding_window == 1024
    full = [i for i in range(62) if i not in a.sliding_window_layers]
    assert full == list(range(5, 62, 6))
    assert a.qk_norm == "rmsnorm" and a.tie_word_embeddings and a.vocab_size == 262208


def test_llama4_scout_chunked_rope_layers_and_nope_globals():
    a = load_model("llama-4-scout").architecture
    assert a.attention_chunk == 8192
    assert a.nope_layers == tuple(range(3, 48, 4))          # every fourth layer is global NoPE
    assert set(a.chunked_layers) == set(range(48)) - set(a.nope_layers)
    assert a.moe_layers == tuple(range(48)) and a.num_experts == 16 and a.experts_per_token == 1
    assert a.qk_norm == "l2"


def test_maverick_interleaves_dense_and_moe_layers():
    a = load_model("llama-4-maverick").architecture
    assert a.moe_layers == tuple(range(1, 48, 2)) and a.num_experts == 128


def test_qwen3_moe_routes_128_experts_top_8_without_a_shared_expert():
    a = load_model("qwen3-30b-a3b").architecture
    assert (a.num_experts, a.experts_per_token, a.shared_expert_intermediate_size) == (128, 8, 0)
    assert a.qk_norm == "rmsnorm" and a.head_dim == 128


def test_glm45_air_first_layer_dense_and_partial_rotary():
    a = load_model("glm-4.5-air").architecture
    assert a.moe_layers == tuple(range(1, 46)) and a.rotary_fraction == 0.5
    assert a.router == "sigmoid" and a.shared_expert_intermediate_size == 1408


def test_prefill_holds_the_whole_prompt_of_sliding_layers_under_transformers():
    # gpt-oss-120b: 36 layers, 8 KV heads x 64, 18 sliding layers of window 128. A 1,000-token
    # prompt in bf16: 2 (K, V) * 8 * 64 * 2 B = 2,048 B per token and layer. transformers'
    # DynamicSlidingWindowLayer keeps a view of the prompt's torch.cat (cache_utils.py,
    # transformers 5.25), so right after the prefill every layer holds 1,000 tokens; from the
    # first decode step the sliding ones hold window - 1 = 127. vLLM writes whole blocks of 16:
    # 1,000 tokens -> 63 blocks (1,008 tokens), the window's 128 -> 8 blocks.
    m = load_model("gpt-oss-120b")
    per = 2 * 8 * 64 * 2
    hf = Job(model=m, mode="infer", batch=1, seq=1000)
    assert kv_cache_bytes(m, hf, kv_dtype="bf16", prefill=True) == per * 36 * 1000
    assert kv_cache_bytes(m, hf, kv_dtype="bf16") == per * (18 * 1000 + 18 * 127)
    vllm = Job(model=m, mode="infer", batch=1, seq=1000, engine="vllm")
    assert kv_cache_bytes(m, vllm, kv_dtype="bf16", prefill=True) == per * (18 * 1008 + 18 * 128)
