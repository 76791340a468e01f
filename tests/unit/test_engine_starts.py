"""small43: a KV cache short of one request of max_model_len is an engine that does not start.

vLLM's start-up check (V1 ``check_enough_kv_cache_memory``, vllm/v1/core/kv_cache_utils.py @
vllm-project/vllm@001cabc1be16) sums, over every full-attention layer, cdiv(max_model_len,
block_size) pages of block_size x 2 x kv_heads x head_dim x bytes, and raises when the sum is more
than the bytes available for the cache. The cases below recompute that sum by hand from
Llama-3.1-8B's config.json (32 layers, 8 KV heads, head_dim 128) and compare it with the budget's
verdict, and hold `fit`, the library, the web API's fit, the vLLM export and `capacity` to the one
verdict."""

from __future__ import annotations

import json

import pytest

from gpuplan.fit import plan
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import kv_budget
from gpuplan.models import load_model
from gpuplan.web._service import fit as web_fit

LAYERS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16
FP8 = 1  # bytes per cached element
PAGE = BLOCK * 2 * KV_HEADS * HEAD_DIM * FP8  # one layer's block: 32,768 bytes
L4_FP8 = ["llama-3.1-8b", "--gpu", "L4", "--mode", "infer", "--engine", "vllm",
          "--kv-dtype", "fp8"]


def _job(engine: str = "vllm") -> Job:
    return Job(model="llama-3.1-8b", mode="infer", engine=engine, kv_dtype="fp8")


def _vllm_needs(max_model_len: int) -> int:
    """vLLM's ``max_memory_usage_bytes`` summed over the layers: one request of
    ``max_model_len`` tokens (FullAttentionSpec: cdiv(max_model_len, block_size) pages)."""
    return LAYERS * -(-max_model_len // BLOCK) * PAGE


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


def test_the_start_up_check_by_hand_both_ways(llama):
    l4 = get_gpu("L4")
    first = kv_budget(llama, l4, _job())
    avail = first.available_kv_bytes
    blocks = avail // (LAYERS * PAGE)
    assert first.kv_blocks == blocks and first.kv_tokens == blocks * BLOCK
    assert first.longest_max_model_len == blocks * BLOCK  # vLLM's "estimated maximum model length"
    for L in (blocks * BLOCK - 5, blocks * BLOCK, blocks * BLOCK + 1, 131_072):
        b = kv_budget(llama, l4, _job(), max_model_len=L)
        assert b.available_kv_bytes == avail  # V1: the profile run does not depend on L
        starts = _vllm_needs(L) <= avail
        assert b.engine_starts is starts, L
        assert (b.refusal == "") is starts
        assert b.to_dict()["engine_starts"] is starts
    assert _vllm_needs(131_072) > avail and _vllm_needs(blocks * BLOCK + 1) > avail
    refused = kv_budget(llama, l4, _job(), max_model_len=131_072)
    text = refused.to_dict()["refusal"]
    assert "\n" not in text and "131,072" in text
    assert f"lower max_model_len to {blocks * BLOCK:,}" in text
    assert "kv_dtype fp8" not in text  # the cache is fp8 already
    assert f"({blocks * BLOCK / 131_072:.2f}x)" in text


def test_sglang_has_no_such_check_and_starts(llama):
    """SGLang refuses only an empty pool; it then serves requests of at most
    max_total_num_tokens - 1 tokens (tp_worker.py max_req_len), which a note says."""
    b = kv_budget(llama, get_gpu("L4"), _job("sglang"))
    assert 0 < b.kv_tokens < b.max_model_len
    assert b.engine_starts and b.refusal == ""
    assert any(f"at most {b.kv_tokens - 1:,} tokens" in n for n in b.notes)


def test_fit_the_library_and_the_web_read_one_verdict(cli, llama):
    rc, out, _ = cli("fit", *L4_FP8, "--json", "--no-speed")
    assert rc == 0
    cli_d = json.loads(out)
    lib = plan(_job(), ["L4"]).to_dict()
    web = web_fit({"model": "llama-3.1-8b", "gpu": ["L4"], "mode": "infer", "engine": "vllm",
                   "kv_dtype": "fp8", "speed": False})
    want = kv_budget(llama, get_gpu("L4"), _job())
    for d in (cli_d, lib, web):
        eng, gpu = d["infer"]["engine"], d["gpus"][0]
        assert eng["engine_starts"] is False
        assert eng["longest_max_model_len"] == want.longest_max_model_len
        assert eng["refusal"] == want.to_dict()["refusal"]
        assert (gpu["infer_fits"], gpu["infer_verdict"]) == (False, "does not fit")
        assert gpu["infer_engine_refusal"] == eng["refusal"]
    rc, out, _ = cli("fit", *L4_FP8, "--json", "--no-speed", "--max-model-len",
                     str(want.longest_max_model_len))
    d = json.loads(out)
    assert d["infer"]["engine"]["engine_starts"] is True and d["infer"]["engine"]["refusal"] is None
    assert d["gpus"][0]["infer_fits"] is True and "infer_engine_refusal" not in d["gpus"][0]


def test_the_export_and_capacity_refuse_in_fit_s_words(cli, llama):
    longest = kv_budget(llama, get_gpu("L4"), _job()).longest_max_model_len
    rc, out, _ = cli("fit", *L4_FP8, "--no-speed")
    line = next(x for x in out.splitlines() if x.startswith("L4: vllm"))
    refusal = line.removeprefix("L4: ")
    assert "--max-model-len" in refusal  # the CLI's spelling
    rc, out, err = cli("fit", *L4_FP8, "--export", "vllm")
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.strip().endswith(refusal)
    rc, out, err = cli("fit", *L4_FP8, "--export", "vllm", "--max-model-len", str(longest + 1))
    assert rc == 2 and "refuses to start" in err
    rc, out, _ = cli("fit", *L4_FP8, "--export", "vllm", "--max-model-len", str(longest))
    words = out.split()
    assert rc == 0 and words[words.index("--max-model-len") + 1] == str(longest)
    rc, _, err = cli("capacity", *L4_FP8, "--tp", "1", "--rate", "1", "--requests", "4",
                     "--input", "2048", "--output", "128", "--max-model-len", "131072")
    assert rc == 2 and err.strip().endswith(refusal)
