"""DeepSeek-V2's reader (no torch): the routing keys DeepseekV2TopkRouter reads (transformers
5.25, models/deepseek_v2/modeling_deepseek_v2.py), the MLA latent cache, and bad routing keys
as one-line errors. The parameter counts equal transformers on the meta device
(tests/integration/test_models_oracle.py, deepseek-v2-*)."""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import ModelFileError
from gpuplan.job import Job
from gpuplan.memory.kv import kv_cache_bytes
from gpuplan.models import load_model

SMALL = dict(model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"], hidden_size=64,
             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, vocab_size=500,
             intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8,
             n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=1,
             q_lora_rank=None, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
             v_head_dim=16, max_position_embeddings=4096)


def _load(tmp_path, **over):
    (tmp_path / "config.json").write_text(json.dumps(dict(SMALL, **over)))
    return load_model(str(tmp_path / "config.json"))


def test_greedy_routes_over_every_expert(tmp_path):
    a = _load(tmp_path, topk_method="greedy", n_group=4, topk_group=2).architecture
    assert a.router == "softmax" and a.router_groups == (1, 1)  # n_group is not read by greedy
    assert a.moe_layers == (1, 2) and (a.num_experts, a.experts_per_token) == (8, 2)
    assert a.buffer_bytes == 0  # no e_score_correction_bias in V2 (V3 keeps one per MoE layer)


def test_group_limited_greedy_reads_its_groups(tmp_path):
    a = _load(tmp_path, topk_method="group_limited_greedy", n_group=4, topk_group=2).architecture
    assert a.router_groups == (4, 2)


@pytest.mark.parametrize("over,match", [
    (dict(topk_method="noaux_tc"), "topk_method"),
    (dict(topk_method="group_limited_greedy"), "n_group"),
    (dict(topk_method="group_limited_greedy", n_group=3, topk_group=1), "n_group"),
    (dict(topk_method="group_limited_greedy", n_group=2, topk_group=4), "topk_group"),
])
def test_bad_routing_is_one_line(tmp_path, over, match):
    with pytest.raises(ModelFileError, match=match) as e:
        _load(tmp_path, **over)
    assert "\n" not in str(e.value)


def test_mla_caches_the_latent_and_the_rotary_key(tmp_path):
    # per token and layer: kv_lora_rank + qk_rope_head_dim = 32 + 8 = 40 elements (no heads);
    # 3 layers, batch 2, 100 tokens, bf16: 40 * 3 * 2 * 100 * 2 B
    m = _load(tmp_path)
    job = Job(model=m, mode="infer", batch=2, seq=100)
    assert kv_cache_bytes(m, job, kv_dtype="bf16") == 40 * 3 * 2 * 100 * 2
