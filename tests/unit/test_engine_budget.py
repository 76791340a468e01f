"""The serving engines' start-up KV budget (issue 29 part 3): hand calculations of each rule,
the version switches, the per-rank KV bytes (GQA replication, MLA), the hybrid sliding-window
allocator, bad input, and the published start-up logs as a bar."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gpuplan.engines.budget import (CUDA_GRAPH_POOL_BYTES, DEFAULT_VERSIONS, GIB, MIB,
                                    NON_TORCH_BYTES, NON_TORCH_GROWTH_BYTES, SGLANG_INIT_BYTES, TRT_CONTEXT_BYTES,
                                    FUSED_SAMPLER_BYTES, V0_SORT_SAMPLER_BYTES, budget_rule,
                                    sglang_default_fraction)
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import KVBudget, kv_budget
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")  # 85,028,896,768 bytes: the 79.19 GiB vLLM logs print
LLAMA8B_WEIGHTS = 8_030_261_248 * 2  # bf16, no buffers
LLAMA8B_KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x layers x kv heads x head_dim x bf16
#: The rotary cos/sin table loaded beside the weights: 131,072 positions x 128 (cos and sin of
#: 64 frequencies), bf16 under vLLM (RotaryEmbedding casts it to the model dtype), fp32 under
#: SGLang (kept in fp32 on CUDA).
LLAMA8B_ROPE_VLLM = 131_072 * 128 * 2
LLAMA8B_ROPE_SGLANG = 131_072 * 128 * 4


def _job(model: str, engine: str, **kw) -> Job:
    tp = kw.pop("tp", 1)
    return Job(model=model, mode="infer", engine=engine, tp=tp, gpus=tp, **kw)


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b")


def test_vllm_default_rule_by_hand(llama8b):
    """vLLM 0.21 on an H100: 0.92 of 85,028,896,768 bytes, less the weights, the profile run's
    peak at 8,192 tokens and 1,024 sequences, the non-torch growth and the graph pool; 2 MiB
    blocks of 16 tokens x 32 layers x 4 KiB. At 1,024 sequences the peak is the sampler's, over
    1,024 x 128,256 logits (14 bytes each: 0.21's FlashInfer top-k/top-p sampler, no sort --
    the bf16 logits, their fp32 copy, the top-k-masked logits and their softmax) beside the
    8,192 hidden states, not the forward's MLP (the sampler runs after it)."""
    b = kv_budget(llama8b, H100, _job("llama-3.1-8b", "vllm"), max_model_len=8192)
    assert (b.engine, b.version, b.block_size, b.fraction) == ("vllm", "0.21", 16, 0.92)
    t, h = 8192, 4096
    forward = (3 * t * h * 2                  # residual, normed input, down_proj output
               + t * 3 * 14336 * 2)           # gate/up output (2 x 14,336) and SwiGLU output
    sort = 1024 * 128_256 * (2 + 4 + 4 + 4) + t * h * 2
    assert sort > forward
    assert b.parts["weights"] == LLAMA8B_WEIGHTS
    assert b.parts["activation_peak"] == sort
    assert b.parts["non_torch"] == NON_TORCH_GROWTH_BYTES
    assert b.parts["rope_cache"] == LLAMA8B_ROPE_VLLM
    avail = int(85_028_896_768 * 0.92) - LLAMA8B_WEIGHTS - LLAMA8B_ROPE_VLLM - sort \
        - NON_TORCH_GROWTH_BYTES - CUDA_GRAPH_POOL_BYTES
    assert b.available_kv_bytes == avail
    assert b.kv_blocks == avail // (16 * LLAMA8B_KV_PER_TOKEN)
    assert b.kv_tokens == b.kv_blocks * 16
    assert b.max_concurrency == pytest.approx(b.kv_tokens / 8192)
    assert b.kv_bytes_per_token == LLAMA8B_KV_PER_TOKEN


def test_vllm_021_deducts_graphs_and_raises_the_default(llama8b):
    """0.21 (PR #38284): the graph pool deducted, the default utilization 0.90 -> 0.92, and a
    sampler that no longer sorts (FlashInfer's by default, PR #40376: 14 bytes a logit where
    0.10's CUDA sort holds 38); the difference between the two rules is exactly those terms."""
    job = _job("llama-3.1-8b", "vllm")
    new = kv_budget(llama8b, H100, job, max_model_len=8192)
    old = kv_budget(llama8b, H100, job, max_model_len=8192, engine_version="0.20.2")
    assert old.version == "0.10" and old.fraction == 0.9 and old.parts["cuda_graph_pool"] == 0
    sampler = 1024 * 128_256 * (38 - 14)  # 1,024 x 128,256 logits; the 8,192 hidden states cancel
    assert old.parts["activation_peak"] - new.parts["activation_peak"] == sampler
    diff = int(H100.memory_bytes * 0.92) - int(H100.memory_bytes * 0.9) - CUDA_GRAPH_POOL_BYTES \
        + sampler
    assert new.available_kv_bytes - old.available_kv_bytes == diff
    eager = kv_budget(llama8b, H100, _job("llama-3.1-8b", "vllm", runtime="eager"),
                      max_model_len=8192)
    assert eager.parts["cuda_graph_pool"] == 0  # --enforce-eager captures no graphs


def test_vllm_v0_profiles_the_whole_context(llama8b):
    """V0 without chunked prefill profiles max(max_model_len, 2048) tokens and 256 sequences;
    past 32K it chunks at 512. The 3090 log of vllm#10517 (20,000 tokens, 0.90) printed a
    2.07 GiB activation peak (17.06 - 14.99) and 1,952 blocks; gpuplan's parts by hand."""
    gpu = get_gpu("RTX-3090")
    job = _job("llama-3.1-8b", "vllm")
    b = kv_budget(llama8b, gpu, job, max_model_len=20000, engine_version="0.6.4")
    assert (b.max_num_batched_tokens, b.max_num_seqs) == (20000, 256)
    # the forward's live tensors at the down projection: residual, normed input, gate/up,
    # SwiGLU output, down_proj output (3 x 4,096 + 3 x 14,336 per token, bf16); the sampler's
    # sort of 256 x 128,256 logits (1.16 GiB at V0's 38 bytes) runs after it and is smaller
    assert b.parts["activation_peak"] == 3 * 20000 * (4096 + 14336) * 2
    assert b.parts["activation_peak"] / GIB == pytest.approx(2.07, rel=0.01)
    b29 = kv_budget(llama8b, gpu, job, max_model_len=29000, engine_version="0.6.4")
    assert b29.parts["activation_peak"] / GIB == pytest.approx(2.99, rel=0.01)  # the 29K log
    assert kv_budget(llama8b, gpu, job, max_model_len=35000,
                     engine_version="0.6").max_num_batched_tokens == 512


def test_sglang_rule_by_hand(llama8b):
    """SGLang: mem_fraction_static of the memory free before the weights, less the weights (and
    the fp32 rotary table loaded with them); #tokens = rest // (layers x kv_heads x head_dim x 2
    x bytes), page size 1."""
    b = kv_budget(llama8b, H100, _job("llama-3.1-8b", "sglang"), mem_fraction_static=0.88)
    init = 85_028_896_768 - SGLANG_INIT_BYTES
    rest = int(init * 0.88) - LLAMA8B_WEIGHTS - LLAMA8B_ROPE_SGLANG
    assert b.available_kv_bytes == rest
    assert b.kv_tokens == rest // LLAMA8B_KV_PER_TOKEN
    assert b.block_size == 1 and b.parts["activation_peak"] == 0


def test_sglang_default_fraction_matches_its_server_args():
    """0.5's reserve by card: the CI logs print mem_fraction_static=0.835 on an 80 GB H100
    (nvidia-smi's 81,559 MiB) and 0.907 on a 141 GB card (143,771 MiB); 0.4 by TP size."""
    r05, r04 = budget_rule("sglang", "0.5"), budget_rule("sglang", "0.4")
    assert sglang_default_fraction(r05, 81_559 * MIB, tp=1) == 0.835
    assert sglang_default_fraction(r05, 143_771 * MIB, tp=1) == 0.907
    # TP 8 on the H100: 512 + 1.5 x 8192 + 2 x 512 + 1024 = 14,848 MiB reserved
    assert sglang_default_fraction(r05, 81_559 * MIB, tp=8) == round((81_559 - 14_848) / 81_559, 3)
    assert [sglang_default_fraction(r04, 1, tp=t) for t in (1, 2, 4, 8, 16)] == \
        [0.88, 0.87, 0.85, 0.81, 0.79]


def test_trt_llm_rule_by_hand(llama8b):
    """TensorRT-LLM: 0.9 of what is free after the weights and the warm-up; 32-token blocks."""
    b = kv_budget(llama8b, H100, _job("llama-3.1-8b", "trt-llm"), max_model_len=8192)
    free = 85_028_896_768 - TRT_CONTEXT_BYTES - LLAMA8B_WEIGHTS \
        - b.parts["activation_peak"] - NON_TORCH_BYTES
    assert b.available_kv_bytes == int(free * 0.9)
    assert b.block_size == 32 and b.kv_tokens % 32 == 0


def test_kv_bytes_per_rank_gqa_replication_and_mla():
    """Qwen3-235B's 4 K/V heads at TP 8: each rank still holds one (vLLM replicates); MLA
    (DeepSeek-V3) caches 512 + 64 latent elements per layer on every rank."""
    h200 = get_gpu("H200-SXM-141GB")
    q = kv_budget(load_model("qwen3-235b-a22b"), h200,
                  _job("qwen3-235b-a22b", "vllm", tp=8, infer_precision="fp8"))
    assert q.kv_bytes_per_token == 94 * 2 * 1 * 128 * 2
    d = kv_budget(load_model("deepseek-v3"), h200,
                  _job("deepseek-v3", "vllm", tp=8, infer_precision="fp8-block"),
                  max_model_len=32768)
    assert d.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert d.kv_tokens > 0


def test_hybrid_allocator_keeps_windows_apart():
    """Gemma 3 27B under vLLM V1: 52 sliding (1,024) and 10 full layers are grouped by 10; the
    pool's blocks span 10 layers; a 131,072-token request needs 8,192 blocks in the full group
    and cdiv(1,023 + 8,192, 16) + 1 = 577 in each of the 6 sliding groups. V0 caches every
    layer in full, so the same memory holds far fewer requests."""
    model = load_model("gemma-3-27b")
    job = _job("gemma-3-27b", "vllm")
    b = kv_budget(model, H100, job)
    page = 16 * 2 * 16 * 128 * 2
    assert b.kv_blocks == b.available_kv_bytes // (page * 10)
    assert b.max_concurrency == pytest.approx(b.kv_blocks / (8192 + 6 * 577))
    assert b.kv_tokens == int(b.max_concurrency * 131072)
    v0 = kv_budget(model, H100, job, engine_version="0.6", max_num_batched_tokens=8192)
    assert v0.max_concurrency < b.max_concurrency / 3


def test_unknown_versions_and_engines_are_input_errors(llama8b):
    job = _job("llama-3.1-8b", "vllm")
    with pytest.raises(InputError, match="0.6, 0.7, 0.8, 0.10, 0.21"):
        kv_budget(llama8b, H100, job, engine_version="0.4")
    with pytest.raises(InputError, match="expected a version"):
        kv_budget(llama8b, H100, job, engine_version="latest")
    with pytest.raises(InputError, match="no serving memory budget"):
        kv_budget(llama8b, H100, Job(model="llama-3.1-8b", mode="infer"))
    assert DEFAULT_VERSIONS["vllm"] == "0.21" and budget_rule("vllm", "v0.27.1").version == "0.21"


@pytest.mark.parametrize("kw, match", [
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"mem_fraction_static": 0.8}, "not vllm's knob"),
    ({"max_model_len": 200_000}, "longer than the model's context"),
    ({"max_model_len": 0}, "max_model_len"),
])
def test_out_of_range_knobs_are_input_errors(llama8b, kw, match):
    with pytest.raises(InputError, match=match):
        kv_budget(llama8b, H100, _job("llama-3.1-8b", "vllm"), **kw)


def test_a_model_that_does_not_fit_leaves_no_cache():
    b = kv_budget(load_model("llama-3.1-70b"), H100, _job("llama-3.1-70b", "vllm"))
    assert (b.available_kv_bytes, b.kv_blocks, b.kv_tokens) == (0, 0, 0)
    assert any("refuses to start" in n for n in b.notes)
    assert isinstance(b, KVBudget) and b.to_dict()["kv_tokens"] == 0


def _benchmark():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_budget.py"
    spec = importlib.util.spec_from_file_location("engine_budget_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_published_startup_logs_stay_within_the_bar():
    """Over the published vLLM and SGLang start-up logs: the median error of the KV tokens and
    of the maximum concurrency within 5% (the issue's bar), the worst within 15%."""
    bench = _benchmark()
    s = bench.summary(bench.rows())
    assert s["n"] >= 16 and s["tokens_n"] >= 15 and s["concurrency_n"] >= 11
    assert s["tokens_median"] < 0.02 and s["concurrency_median"] < 0.02
    assert s["tokens_worst"] < 0.05 and s["concurrency_worst"] < 0.05


def test_every_counted_log_within_five_percent():
    """The issue's must-hold: each counted log's KV tokens and maximum concurrency within 5%
    (it was a strict xfail naming the RTX 5060 Ti, L4 and 70B w8a8 logs until the 5060 Ti's own
    card, V1's in-sort sampler peak and 0.21's sampler without a sort; the 70B w8a8 log, a V1
    run of 0.7 that no rule models, is excluded with its reason)."""
    bench = _benchmark()
    out = {r["log"]["id"]: e for r in bench.rows() if "excluded" not in r["log"]
           for k, e in r["errors"].items() if k != "available_kv" and abs(e) >= 0.05}
    assert not out, out


def test_the_5060ti_log_is_planned_on_its_own_card():
    """The RTX 5060 Ti log runs on the catalog's RTX-5060-Ti-16GB, whose total is what CUDA reports
    on that card (PyTorch: 'a total capacity of 15.48 GiB'), about 460 MiB under nvidia-smi's
    16,311 MiB; the RTX 4060 Ti 16GB it was planned as before has 16,380 MiB in both."""
    bench = _benchmark()
    log = next(x for x in bench.load_logs() if x["id"] == "vllm-5060ti-qwen2.5-7b-awq")
    gpu = get_gpu(log["gpu"])
    assert gpu.name == "RTX-5060-Ti-16GB" and gpu.sm_count == 36
    assert round(gpu.memory_bytes / 2**30, 2) == 15.48
    assert 16311 * 2**20 - gpu.memory_bytes == 459 * 2**20
    # 0.85 x 15.48 GiB less the weights and the profile: the KV cache 0.43 GiB under the 4060 Ti's
    b = bench.predict(log)
    assert b.parts["weights"] == bench.predict({**log, "gpu": "RTX-4060-Ti-16GB"}).parts["weights"]
    drop = (get_gpu("RTX-4060-Ti-16GB").memory_bytes - gpu.memory_bytes) * 0.85
    assert bench.predict({**log, "gpu": "RTX-4060-Ti-16GB"}).available_kv_bytes \
        - b.available_kv_bytes == pytest.approx(drop, abs=2)


def test_vllm_sampler_sort_and_non_torch_by_profiler(llama8b):
    """vLLM's profile sampler sorts the vocabulary: on a T4 at 2,048 tokens and the 192
    sequences unsloth launched it with, Llama 3.2 3B's peak is V0's sort of 192 x 128,256
    logits (38 bytes each) beside the hidden states -- 0.88 GiB, where the log prints 0.90
    (vllm-t4-llama3b-2k) -- not the forward. The non-torch term is the CUDA context under the
    0.6 profiler and only its growth from 0.7."""
    model = load_model("llama-3.2-3b")
    job = _job("llama-3.2-3b", "vllm", infer_precision="fp16")
    t4 = get_gpu("T4")
    b = kv_budget(model, t4, job, engine_version="0.7", max_model_len=2048,
                  gpu_memory_utilization=0.89, max_num_seqs=192)
    assert b.parts["activation_peak"] == 192 * 128_256 * 38 + 2048 * 3072 * 2
    assert b.parts["activation_peak"] / GIB == pytest.approx(0.90, abs=0.02)
    assert b.parts["non_torch"] == NON_TORCH_GROWTH_BYTES
    old = kv_budget(model, t4, job, engine_version="0.6", max_model_len=2048,
                    gpu_memory_utilization=0.89, max_num_seqs=192)
    assert old.parts["non_torch"] == NON_TORCH_BYTES
    assert old.available_kv_bytes - b.available_kv_bytes == NON_TORCH_GROWTH_BYTES - NON_TORCH_BYTES


def test_vllm_v0_sampler_peaks_inside_the_cuda_sort():
    """V0's ``_apply_top_k_top_p`` sorts the fp32 logits while ``execute_model`` still holds the
    model-dtype ones; PyTorch's CUDA sort of 128 rows or more (SortStable.cu
    ``segmented_sort_pairs``) adds int64 reverse indices and cub's third keys and values
    buffers: 2 + 4 + 4 (sorted) + 8 (indices) + 8 + 4 + 8 = 38 bytes per logit; 2 to 127 rows
    take the full sort by (index, segment) int2 pairs: 2 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8 = 50.
    The GGUF log (vllm-4070laptop-llama3b-q8-10k, V0 of 0.8, 10,000 tokens, 256 sequences)
    prints a 1.22 GiB peak: the sort of 256 x 128,256 logits beside 10,000 hidden states. So
    does an 8 GB card's V0 log of vllm#12529 (2025-03-13, a Qwen2-1.5B-shaped model: 151,936 x
    1,536 head, max_model_len 2,000): 1.39 GiB printed. V1's sort of 0.8-0.20 is the same call
    on the same tensors (38), 0.21's sampler does not sort (14), and an AMD card (whose rocPRIM
    sort gpuplan has not read) keeps the post-sort count (28)."""
    model = load_model("llama-3.2-3b")
    gpu = get_gpu("RTX-4070")
    job = _job("llama-3.2-3b", "vllm", infer_precision="q8_0")
    b = kv_budget(model, gpu, job, engine_version="0.7", max_model_len=10_000,
                  gpu_memory_utilization=0.9)
    assert (b.max_num_batched_tokens, b.max_num_seqs) == (10_000, 256)
    sort = 256 * 128_256 * (2 + 4 + 4 + 8 + 8 + 4 + 8) + 10_000 * 3072 * 2
    assert b.parts["activation_peak"] == sort
    assert sort / GIB == pytest.approx(1.22, abs=0.01)
    fp16 = _job("llama-3.2-3b", "vllm", infer_precision="fp16")
    few = kv_budget(model, gpu, fp16, engine_version="0.7", max_model_len=2048,
                    gpu_memory_utilization=0.9, max_num_seqs=100)
    assert few.parts["activation_peak"] == \
        100 * 128_256 * (2 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8) + 2048 * 3072 * 2
    qwen = load_model("qwen2.5-1.5b")
    q = kv_budget(qwen, gpu, _job("qwen2.5-1.5b", "vllm", infer_precision="fp16"),
                  engine_version="0.7", max_model_len=2000, gpu_memory_utilization=0.9)
    assert q.parts["activation_peak"] == 256 * 151_936 * 38 + 2048 * 1536 * 2
    assert q.parts["activation_peak"] / GIB == pytest.approx(1.39, abs=0.01)
    v1 = kv_budget(model, gpu, job, engine_version="0.8", max_model_len=10_000,
                   gpu_memory_utilization=0.9, max_num_batched_tokens=10_000, max_num_seqs=256)
    assert v1.parts["activation_peak"] == 256 * 128_256 * 38 + 10_000 * 3072 * 2
    v21 = kv_budget(model, gpu, fp16, engine_version="0.21", max_model_len=2048,
                    gpu_memory_utilization=0.9)
    assert (v21.max_num_batched_tokens, v21.max_num_seqs) == (2048, 256)
    assert v21.parts["activation_peak"] == 256 * 128_256 * 14 + 2048 * 3072 * 2
    amd = kv_budget(model, get_gpu("MI300X"), job, engine_version="0.7", max_model_len=10_000,
                    gpu_memory_utilization=0.9)
    assert amd.parts["activation_peak"] == 256 * 128_256 * 28 + 10_000 * 3072 * 2


def test_gguf_merged_layers_hold_their_shards_and_the_concatenation():
    """vLLM's GGUF linear method runs gate and up one at a time and concatenates them: at
    10,000 tokens Llama 3.2 3B's MLP peak is the residual and normed input beside both shards and
    their concatenation (2 x 3,072 + 4 x 8,192 fp16 values per token), where the unquantized
    layer's is at the down projection (3 x 3,072 + 3 x 8,192): one intermediate more, one hidden
    less (one sequence, so that the sampler's sort is not the peak)."""
    model = load_model("llama-3.2-3b")
    gpu = get_gpu("RTX-4070")
    kw = dict(engine_version="0.7", max_model_len=10_000, gpu_memory_utilization=0.9,
              max_num_seqs=1)
    q8 = kv_budget(model, gpu, _job("llama-3.2-3b", "vllm", infer_precision="q8_0"), **kw)
    fp16 = kv_budget(model, gpu, _job("llama-3.2-3b", "vllm", infer_precision="fp16"), **kw)
    assert fp16.parts["activation_peak"] == 10_000 * (3 * 3072 + 3 * 8192) * 2
    assert q8.parts["activation_peak"] == 10_000 * (2 * 3072 + 4 * 8192) * 2


def test_fit_json_shows_the_engine_budget(cli, llama8b):
    """`fit --mode infer --engine vllm` carries the same figures under infer.engine (the
    issue's contract), per GPU under infer.engine_by_gpu, and the knobs reach kv_budget."""
    import json

    code, out, err = cli("fit", "llama-3.1-8b", "--mode", "infer", "--engine", "vllm",
                         "--gpu", "H100-SXM-80GB", "--gpu", "L40S", "--max-model-len", "8192",
                         "--gpu-memory-utilization", "0.85", "--engine-version", "0.10.2",
                         "--json", "--no-speed")
    assert code == 0, err
    e = json.loads(out)["infer"]["engine"]
    want = kv_budget(llama8b, H100, _job("llama-3.1-8b", "vllm"), max_model_len=8192,
                     gpu_memory_utilization=0.85, engine_version="0.10.2")
    for k in ("available_kv_bytes", "block_size", "kv_blocks", "kv_tokens", "max_concurrency"):
        assert e[k] == getattr(want, k), k
    assert (e["gpu"], e["version"], e["fraction"]) == ("H100-SXM-80GB", "0.10", 0.85)
    assert set(e["parts"]) == {"weights", "rope_cache", "activation_peak", "cuda_graph_pool",
                               "non_torch", "reserved"}
    assert set(json.loads(out)["infer"]["engine_by_gpu"]) == {"H100-SXM-80GB", "L40S"}


def test_fit_table_and_refusals(cli):
    code, out, _ = cli("fit", "llama-3.1-8b", "--mode", "infer", "--engine", "sglang",
                       "--gpu", "H100-SXM-80GB", "--no-speed")
    assert code == 0 and "KV cache as sglang 0.5+ allocates it" in out
    code, _, err = cli("fit", "llama-3.1-8b", "--gpu-memory-utilization", "0.9")
    assert code == 2 and "--engine vllm" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("fit", "llama-3.1-8b", "--mode", "infer", "--engine", "vllm",
                       "--engine-version", "0.1", "--gpu", "H100-SXM-80GB")
    assert code == 2 and "0.6, 0.7, 0.8, 0.10, 0.21" in err


def test_sglang_running_requests_and_chunk_by_card(llama8b):
    """SGLang's scheduler budgets: max_running_requests from its pool as its logs show it
    (298,447 tokens at 40,960 -> 3,730; a small pool -> 2,048), and the chunked-prefill size of
    the card's bucket (8,192 on an 80 GB card, 2,048 on a 24 GB one)."""
    from gpuplan.memory.budget import sglang_running_requests

    assert sglang_running_requests(298_447, 40_960) == 3730
    assert sglang_running_requests(38_141, 131_072) == 2048
    assert sglang_running_requests(10**9, 1024) == 4096
    job = _job("llama-3.1-8b", "sglang")
    b = kv_budget(llama8b, H100, job)
    assert b.max_num_batched_tokens == 8192
    assert b.max_num_seqs == sglang_running_requests(b.kv_tokens, 131_072)
    assert kv_budget(llama8b, get_gpu("RTX-4090"), job).max_num_batched_tokens == 2048


def test_vllm_v0_long_profile_peaks_in_the_forward_without_the_logits():
    """At 32,768 tokens (vllm-t4-qwen2.5-1.5b-32k: Qwen2.5-1.5B fp16 on a T4, V0) the peak is the
    forward's MLP -- 3 x 1,536 + 3 x 8,960 values per token -- and the sampler, which runs after
    it, is not added on top: 1.92 GiB, where the log prints 2.02 (the summed form gave 2.12)."""
    model = load_model("qwen2.5-1.5b")
    job = _job("qwen2.5-1.5b", "vllm", infer_precision="fp16")
    b = kv_budget(model, get_gpu("T4"), job, engine_version="0.7", max_model_len=32768,
                  gpu_memory_utilization=0.5)
    assert (b.max_num_batched_tokens, b.max_num_seqs) == (32768, 256)
    assert b.parts["activation_peak"] == 32768 * (3 * 1536 + 3 * 8960) * 2
    assert b.parts["activation_peak"] > 256 * 151_936 * 38 + 32768 * 1536 * 2  # the sort
    assert b.parts["activation_peak"] / GIB == pytest.approx(2.02, rel=0.05)


def test_sglang_tp_init_over_nvlink_by_hand():
    """SGLang's "total" is what is free once its distributed group is up. Over NVLink NCCL's
    buffers sit in device memory: the 8 x H100 log (Grok-1, TP 8) shows 79.19 - 77.43 = 1.76
    GiB in use before the weights (SGLANG_INIT_BYTES + SGLANG_INIT_NVLINK_TP_BYTES = 0.4 +
    1.36); the RTX 4090s, without P2P, 23.99 - 23.08 = 0.91 (0.4 + 0.5). Qwen3-235B FP8 at TP 4
    and 0.93 (sglang-4xh100-qwen3-235b-fp8, 8.23 + 8.23 GB of K and V): within 3% of its
    367,404 tokens, where the PCIe figure gave +7.4%."""
    from gpuplan.engines.budget import SGLANG_INIT_NVLINK_TP_BYTES, SGLANG_INIT_TP_BYTES

    assert (SGLANG_INIT_BYTES + SGLANG_INIT_NVLINK_TP_BYTES) / GIB == pytest.approx(1.76, abs=0.01)
    assert (SGLANG_INIT_BYTES + SGLANG_INIT_TP_BYTES) / GIB == pytest.approx(0.91, abs=0.02)
    model = load_model("qwen3-235b-a22b")
    job = _job("qwen3-235b-a22b", "sglang", tp=4, infer_precision="fp8-block")
    b = kv_budget(model, H100, job, mem_fraction_static=0.93, max_model_len=40960,
                  engine_version="0.4")
    init = 85_028_896_768 - SGLANG_INIT_BYTES - SGLANG_INIT_NVLINK_TP_BYTES
    rope = 40_960 * 128 * 4
    rest = int(init * 0.93) - b.parts["weights"] - rope
    assert b.parts["rope_cache"] == rope and b.available_kv_bytes == rest
    per_token = 94 * 1 * 128 * 2 * 2  # 4 K/V heads over TP 4: one per rank
    assert b.kv_tokens == rest // per_token
    assert b.kv_tokens / 367_404 - 1 == pytest.approx(0, abs=0.03)
    pcie = kv_budget(model, get_gpu("RTX-4090"), _job("qwen3-14b", "sglang", tp=4),
                     mem_fraction_static=0.8)
    assert pcie.parts["non_torch"] == SGLANG_INIT_BYTES + SGLANG_INIT_TP_BYTES


def test_rope_table_is_what_the_logs_weights_add_to_the_parameters():
    """vLLM's "model weights take" is the parameters plus the rotary cos/sin table
    (max_position x head_dim in the model dtype): Llama 3.2 3B fp16 on the T4 log prints 6.02
    GiB (parameters 5.98 + 131,072 x 128 x 2 = 32 MiB); Llama 3.1 70B int8 w8a8 prints 67.72
    (67.69 + 32 MiB); Qwen3-14B prints 27.52 (27.51 + 40,960 x 128 x 2 = 10 MiB)."""
    t4 = get_gpu("T4")
    cases = [("llama-3.2-3b", "fp16", t4, 6.02), ("llama-3.1-70b", "int8", H100, 67.72),
             ("qwen3-14b", "bf16", get_gpu("L40S"), 27.52)]
    for name, prec, gpu, logged in cases:
        b = kv_budget(load_model(name), gpu, _job(name, "vllm", infer_precision=prec),
                      max_model_len=2048, engine_version="0.10")
        assert b.parts["rope_cache"] == load_model(name).architecture.max_position_embeddings \
            * 128 * 2
        assert (b.parts["weights"] + b.parts["rope_cache"]) / GIB == \
            pytest.approx(logged, abs=0.006), name
    trt = kv_budget(load_model("llama-3.2-3b"), t4,
                    _job("llama-3.2-3b", "trt-llm", infer_precision="fp16"), max_model_len=2048)
    assert trt.parts["rope_cache"] == 0


def test_v1_sort_count_matches_vllms_own_benchmark_of_the_sort():
    """vLLM PR #32558 (2026-01-18) measured the PyTorch top-k/top-p path at 256 x 131,072 fp32
    logits: "Pyt Mem 1.25 GB". Its harness holds a pristine and a working fp32 copy (4 + 4) and no
    bf16 logits, so the in-sort count less the bf16 logits (2) plus the pristine copy (4) must give
    that figure: 40 bytes a logit, 1.25 GiB."""
    assert V0_SORT_SAMPLER_BYTES == 38 and FUSED_SAMPLER_BYTES == 14
    per_logit = V0_SORT_SAMPLER_BYTES - 2 + 4
    assert 256 * 131_072 * per_logit / GIB == pytest.approx(1.25, abs=0.005)


def test_rtx_5060_ti_peaks_are_sms_times_rate_times_clock():
    """36 SMs at 2,572 MHz boost (NVIDIA's RTX 5060 Ti specifications), 256 FP32 FLOP/clk and
    512 FP16/BF16 tensor FLOP/clk with FP32 accumulate per SM (GeForce Blackwell); 16 GB GDDR7 at
    28 Gbps on 128 bits."""
    g = get_gpu("5060ti-16gb")
    assert g.name == "RTX-5060-Ti-16GB"
    assert g.peak("fp32") / 1e12 == pytest.approx(36 * 256 * 2.572e9 / 1e12, abs=0.05)
    assert g.peak("bf16") / 1e12 == pytest.approx(36 * 512 * 2.572e9 / 1e12, abs=0.05)
    assert g.memory_bandwidth == pytest.approx(28e9 * 128 / 8)


def test_exclusion_notes_quote_the_table():
    # a note's figures of gpuplan's budget are the row's own (benchmarks/engine_budget.py _fill):
    # the LMCache log's gap is the table's available KV, gpuplan's minus the log's, by hand
    bench = _benchmark()
    results = bench.rows()
    text = bench.report(results)
    r = next(x for x in results if x["log"]["id"] == "vllm-4xh100-qwen3-235b-fp8")
    ours = r["budget"].available_kv_bytes / GIB
    theirs = r["log"]["published"]["available_kv_gib"]
    assert f"8.11 GiB is {ours - theirs:.2f} GiB below what the rule leaves ({ours:.2f})" in text
    assert "{" not in "".join(line for line in text.splitlines() if line.startswith("* "))
