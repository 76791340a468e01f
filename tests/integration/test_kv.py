"""The KV cache and the inference working set, against hand calculations and real transformers
caches."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.formats import WEIGHT_FORMATS
from gpuplan.job import Job
from gpuplan.memory import infer_memory
from gpuplan.memory.activations import infer_activations
from gpuplan.memory.kv import kv_cache_bytes
from gpuplan.models import load_model


def kv(name, **kw):
    m = load_model(name)
    job = Job(model=m, mode="infer", **kw)
    return m, job, kv_cache_bytes(m, job, kv_dtype=kw.get("kv_dtype") or "bf16")


def test_llama31_8b_gqa_128kib_per_token():
    # 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131,072 bytes per token
    _, _, b = kv("llama-3.1-8b", batch=1, seq=4096)
    assert b == 2 * 32 * 8 * 128 * 2 * 4096


def test_llama2_7b_mha_half_a_megabyte_per_token():
    _, _, b = kv("llama-2-7b", batch=3, seq=1000)
    assert b == 2 * 32 * 32 * 128 * 2 * 1000 * 3


def test_mistral_sliding_window_caps_every_layer():
    # Mistral-7B v0.1: sliding_window 4096 on every layer: a 16k context caches the last 4095
    # tokens in transformers 5 (DynamicSlidingWindowLayer keeps ``sliding_window - 1``), the
    # whole window in the paged serving engines
    m = load_model("mistral-7b")
    assert m.architecture.sliding_window == 4096
    _, _, b = kv("mistral-7b", batch=1, seq=1024, context=16384)
    assert b == 2 * 32 * 8 * 128 * 2 * 4095
    _, _, v = kv("mistral-7b", batch=1, seq=1024, context=16384, engine="vllm")
    assert v == 2 * 32 * 8 * 128 * 2 * 4096


def test_gemma2_alternating_layers():
    # Gemma-2-9B: 42 layers, every other one slides over 4096 tokens; 8 KV heads of 256 dims
    _, _, b = kv("gemma-2-9b", batch=1, seq=8192)
    per_tok_layer = 2 * 8 * 256 * 2
    assert b == per_tok_layer * (21 * 8192 + 21 * 4095)


def _hf_cache_bytes(model_type, cfg, prompt):
    """The bytes of the tensors transformers 5's own cache holds after a prompt (tiny random
    model, CPU, bf16)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    cls = getattr(transformers, cfg["architectures"][0])
    torch.manual_seed(0)
    model = cls(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, cfg["vocab_size"], (2, prompt))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
    total = 0
    for layer in out.past_key_values.layers:
        for t in (layer.keys, layer.values):
            total += t.numel() * t.element_size()
    return total


_TINY = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=101,
             intermediate_size=96, max_position_embeddings=256)
CACHES = {
    "deepseek-v3-latent": ("deepseek_v3", dict(
        _TINY, architectures=["DeepseekV3ForCausalLM"], moe_intermediate_size=32,
        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
        q_lora_rank=32, kv_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16,
        v_head_dim=16, n_group=1, topk_group=1)),
    "gpt-oss-sliding-sinks": ("gpt_oss", dict(
        _TINY, architectures=["GptOssForCausalLM"], num_key_value_heads=2, head_dim=16,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=8)),
    "gemma3-five-to-one": ("gemma3_text", dict(
        _TINY, architectures=["Gemma3ForCausalLM"], num_hidden_layers=7, num_key_value_heads=2,
        head_dim=16, sliding_window=8)),
    "llama4-chunked": ("llama4_text", dict(
        _TINY, architectures=["Llama4ForCausalLM"], num_key_value_heads=2, head_dim=16,
        intermediate_size_mlp=96, num_local_experts=2, num_experts_per_tok=1,
        attention_chunk_size=8)),
    "qwen3-qk-norm": ("qwen3", dict(_TINY, architectures=["Qwen3ForCausalLM"],
                                    num_key_value_heads=2, head_dim=16)),
}


@pytest.mark.parametrize("case", sorted(CACHES))
@pytest.mark.parametrize("prompt", [5, 24])
def test_kv_cache_equals_the_cache_transformers_builds(case, prompt):
    # the MLA latent (kv_lora_rank + qk_rope_head_dim per token and layer), sliding and chunked
    # layers holding window - 1 tokens past the window, sinks cached nowhere
    from gpuplan.models import architecture_from_config, count_params
    from gpuplan.models._types import Model

    model_type, cfg = CACHES[case]
    arch = architecture_from_config({"model_type": model_type, **cfg}, name=case)
    m = Model(name=case, params=count_params(arch.tensors, arch), tensors=arch.tensors,
              architecture=arch, source="config")
    job = Job(model=m, mode="infer", batch=2, seq=prompt)
    assert kv_cache_bytes(m, job, kv_dtype="bf16") == _hf_cache_bytes(model_type, cfg, prompt)


@pytest.mark.parametrize("dtype,per_elem", [("fp16", 2), ("fp8", 1), ("fp32", 4)])
def test_kv_dtypes(dtype, per_elem):
    _, _, b = kv("llama-3.1-8b", batch=2, seq=1024, kv_dtype=dtype)
    extra = 8 * 32 if dtype == "fp8" else 0  # one fp32 scale for K and one for V per layer
    assert b == 2 * 32 * 8 * 128 * per_elem * 1024 * 2 + extra


def test_int8_kv_keeps_a_scale_and_zero_point_per_head_and_token():
    # 1 byte per element + an fp16 scale and fp16 zero point per (head, token): 4 bytes / 128
    _, _, b = kv("llama-3.1-8b", batch=1, seq=1024, kv_dtype="int8")
    assert b == 2 * 32 * 8 * 1024 * (128 + 4)


def test_batch_one_vs_a_large_batch():
    # the seed: inference can run at batch 1 or a large batch -- the cache grows with the batch
    m = load_model("llama-3.1-8b")
    one = infer_memory(m, Job(model=m, mode="infer", batch=1, seq=2048))
    big = infer_memory(m, Job(model=m, mode="infer", batch=64, seq=2048))
    assert big.kv_cache_bytes == 64 * one.kv_cache_bytes
    assert big.weights_bytes == one.weights_bytes
    assert big.total_bytes > one.total_bytes + 63 * one.kv_cache_bytes


def test_decode_holds_the_whole_context_prefill_the_prompt():
    m = load_model("llama-3.1-8b")
    i = infer_memory(m, Job(model=m, mode="infer", batch=8, seq=512, context=8192))
    assert i.peak_phase == "decode"
    assert i.kv_cache_bytes == 2 * 32 * 8 * 128 * 2 * 8192 * 8 == i.kv_cache_full_bytes


def test_prefill_logits_for_every_position_or_the_last():
    # a plain forward over a 4096-token prompt without labels makes b*s*V logits in the model
    # dtype (no fp32 copy: transformers upcasts only inside the loss); its peak is those logits
    # beside the final norm's output they are computed from. generate() and vLLM compute only
    # the last position's.
    m = load_model("llama-3.1-8b")
    bf16 = WEIGHT_FORMATS["bf16"]
    last = infer_activations(m, Job(model=m, mode="infer", batch=4, seq=4096), bf16)
    allp = infer_activations(m, Job(model=m, mode="infer", batch=4, seq=4096,
                                      prefill_logits="all"), bf16)
    b, s, V, h = 4, 4096, 128256, 4096
    assert allp.prefill_bytes == b * s * V * 2 + b * s * h * 2
    assert last.prefill_bytes < allp.prefill_bytes / 2


def test_a_forward_without_labels_keeps_logits_in_the_model_dtype():
    # torch as the oracle for the convention above: a tiny bf16 Llama, no labels
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 16))
    with torch.inference_mode():
        plain = model(input_ids=ids, use_cache=False)
        scored = model(input_ids=ids, labels=ids, use_cache=False)
    assert plain.logits.dtype == torch.bfloat16 and plain.logits.shape == (2, 16, 256)
    assert scored.loss.dtype == torch.float32  # the upcast happens inside the loss only


def test_tensor_parallel_splits_kv_heads_but_never_below_one_head():
    m = load_model("llama-3.1-70b")  # 8 KV heads
    job = Job(model=m, mode="infer", batch=1, seq=1024)
    full = kv_cache_bytes(m, job, kv_dtype="bf16")
    tp8 = infer_memory(m, job, tensor_parallel=8)
    tp16 = infer_memory(m, job, tensor_parallel=16)
    assert tp8.kv_cache_full_bytes == full // 8
    assert tp16.kv_cache_full_bytes == full // 8  # one whole head per rank, replicated


def test_context_longer_than_the_model_supports():
    # one rule (job.check_positions): a learned position table (GPT-2's 1,024 rows) has no row
    # past its limit, so the context is refused; a rotary model (Llama 2, 4,096 trained
    # positions) runs past them and is planned, its KV cache the longer context's
    m = load_model("gpt2")
    with pytest.raises(InputError, match="1024"):
        infer_memory(m, Job(model=m, mode="infer", context=2048))
    m = load_model("llama-2-7b")
    long = infer_memory(m, Job(model=m, mode="infer", context=8192))
    short = infer_memory(m, Job(model=m, mode="infer", context=4096))
    assert long.kv_cache_full_bytes == 2 * short.kv_cache_full_bytes


def _tiny_mistral(sliding_window):
    """A real 3-layer transformers Mistral (bf16, SDPA, eval mode) and gpuplan's Model of the
    same config; skipped without torch and transformers."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import activation_probe as P
    from gpuplan.models import Model, ParamCounts

    cfg = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=300, max_position_embeddings=512,
               sliding_window=sliding_window)
    model = P.build("mistral", cfg, dtype=torch.bfloat16, attn="sdpa").eval()
    m = Model(name="tiny", architecture=P.architecture("mistral", cfg),
              params=ParamCounts(total=1, by_component={"other": 1}, active=1, embedding=0))
    return torch, model, m


def test_real_transformers_cache_equals_the_formula():
    # DESIGN.md: the KV cache of a real run is 2*layers*kv_heads*head_dim*bytes per token
    torch, model, m = _tiny_mistral(sliding_window=None)
    ids = torch.randint(0, 300, (3, 50))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    real = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    job = Job(model=m, mode="infer", batch=3, seq=50)
    assert real == kv_cache_bytes(m, job, kv_dtype="bf16")


def test_sliding_window_convention_against_transformers():
    # transformers' DynamicSlidingWindowLayer keeps the last sliding_window - 1 tokens, and so
    # does gpuplan for the engines that run it; the paged serving engines (vLLM's block
    # tables) hold the whole window: one token per layer more.
    torch, model, m = _tiny_mistral(sliding_window=16)
    with torch.inference_mode():
        out = model(input_ids=torch.randint(0, 300, (2, 50)), use_cache=True)
    real = sum(layer.keys.nbytes + layer.values.nbytes for layer in out.past_key_values.layers)
    ours = kv_cache_bytes(m, Job(model=m, mode="infer", batch=2, seq=50), kv_dtype="bf16")
    paged = kv_cache_bytes(m, Job(model=m, mode="infer", batch=2, seq=50, engine="vllm"),
                           kv_dtype="bf16")
    one_token_per_layer = 2 * 2 * 32 * 2 * 2 * 3  # K+V x kv heads x dims x bytes x batch x layers
    assert real == ours == 2 * 2 * 32 * 2 * 2 * 15 * 3
    assert paged == ours + one_token_per_layer
