"""The MLA latent KV cache in fp8 under each serving engine (no torch): 1 byte per element of
``kv_lora_rank + qk_rope_head_dim``, the per-layer fp32 K and V scales, each sequence in the
engine's whole blocks (vLLM 16 tokens, SGLang pages of 1, TensorRT-LLM 32:
gpuplan/engines/budget.py, with their sources)."""

from __future__ import annotations

import pytest

from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import kv_budget
from gpuplan.memory.kv import kv_cache_bytes
from gpuplan.models import load_model


@pytest.fixture(scope="module")
def v3():
    m = load_model("deepseek-v3")
    a = m.architecture
    # DeepSeek-V3's config.json (catalog): 61 layers, kv_lora_rank 512, qk_rope_head_dim 64
    assert (a.num_layers, a.mla.kv_lora_rank, a.mla.qk_rope_head_dim) == (61, 512, 64)
    return m


@pytest.mark.parametrize("engine,tokens", [
    ("vllm", 4112),      # 4,097 tokens -> 257 blocks of 16
    ("sglang", 4097),    # pages of 1 token
    ("trt-llm", 4128),   # 129 blocks of 32
    ("transformers", 4097),
])
def test_fp8_latent_is_one_byte_per_element_in_whole_blocks(v3, engine, tokens):
    job = Job(model=v3, mode="infer", engine=engine, kv_dtype="fp8", batch=2, seq=4097)
    # 2 sequences x tokens x 61 layers x 576 elements x 1 B, + 8 B of scales per layer
    assert kv_cache_bytes(v3, job, kv_dtype="fp8") == 2 * tokens * 61 * 576 + 8 * 61
    bf16 = kv_cache_bytes(v3, job, kv_dtype="bf16")
    assert bf16 == 2 * tokens * 61 * 576 * 2


def test_fp8_latent_in_vllms_budget(v3):
    job = Job(model=v3, mode="infer", engine="vllm", kv_dtype="fp8", tp=8, gpus=8,
              infer_precision="fp8-block")
    b = kv_budget(v3, get_gpu("H200-SXM-141GB"), job)
    assert b.kv_bytes_per_token == 61 * 576  # every rank holds the whole latent
    assert b.block_size == 16
