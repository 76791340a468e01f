"""The families of issue 28 on small configs: analytic plan (overhead excluded) vs the trace.

    PYTHONPATH=src python benchmarks/modern_agreement.py [family,family...]   # ~30 s

``compare`` is what tests/integration/test_modern_exact.py asserts within 3%.
"""
import json, os, sys, tempfile, time
from gpuplan.trace import trace_step
from gpuplan.models import load_model
from gpuplan.job import Job
from gpuplan.memory import train_memory, infer_memory
from gpuplan.memory.activations import infer_activations
from gpuplan.formats import get_weight_format
S = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000, intermediate_size=512, num_key_value_heads=2, max_position_embeddings=4096)
CASES = {
 "qwen3": ("Qwen3ForCausalLM", dict(S, head_dim=64)),
 "gemma3_text": ("Gemma3ForCausalLM", dict(S, head_dim=64, sliding_window=128, num_hidden_layers=6)),
 "qwen3_moe": ("Qwen3MoeForCausalLM", dict(S, head_dim=64, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2)),
 # MLA has no KV heads of its own: DeepseekV3Config's num_key_value_heads equals the heads
 "deepseek_v3": ("DeepseekV3ForCausalLM", dict(S, num_key_value_heads=4, moe_intermediate_size=128, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, n_group=2, topk_group=1)),
 # DeepSeek-V2 (group-limited greedy, 2 groups, the best 1 kept) and V2-Lite (greedy, no q_lora)
 "deepseek_v2": ("DeepseekV2ForCausalLM", dict(S, num_key_value_heads=4, moe_intermediate_size=128, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, topk_method="group_limited_greedy", n_group=2, topk_group=1, routed_scaling_factor=16.0)),
 "deepseek_v2:lite": ("DeepseekV2ForCausalLM", dict(S, num_key_value_heads=4, moe_intermediate_size=128, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, topk_method="greedy")),
 # dense MLA (issue 28, item 1): no MoE layer (first_k_dense_replace = the layers), 8 heads;
 # the value's head size (32, or 64) differs from the query's (32 + 16): CUDA runs SDPA's
 # memory-efficient kernel. "dense_flash": v = nope + rope, so flash runs
 "deepseek_v3:dense": ("DeepseekV3ForCausalLM", dict(S, num_attention_heads=8, num_key_value_heads=8, first_k_dense_replace=2, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, n_group=2, topk_group=1)),
 "deepseek_v3:dense_q": ("DeepseekV3ForCausalLM", dict(S, num_attention_heads=8, num_key_value_heads=8, first_k_dense_replace=2, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=64, n_group=2, topk_group=1)),
 "deepseek_v3:dense_flash": ("DeepseekV3ForCausalLM", dict(S, num_attention_heads=8, num_key_value_heads=8, first_k_dense_replace=2, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=48, n_group=2, topk_group=1)),
 "deepseek_v2:dense": ("DeepseekV2ForCausalLM", dict(S, num_attention_heads=8, num_key_value_heads=8, first_k_dense_replace=2, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, n_shared_experts=2, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, topk_method="greedy")),
 "glm4_moe": ("Glm4MoeForCausalLM", dict(S, head_dim=64, moe_intermediate_size=128, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, partial_rotary_factor=0.5, attention_bias=True)),
 "gpt_oss": ("GptOssForCausalLM", dict(S, head_dim=64, intermediate_size=256, num_local_experts=8, num_experts_per_tok=2, sliding_window=128)),
 "llama4_text": ("Llama4ForCausalLM", dict(S, head_dim=64, intermediate_size=256, intermediate_size_mlp=512, num_local_experts=4, num_experts_per_tok=1, attention_chunk_size=128, num_hidden_layers=4)),
 # Nemotron (NeMo GPT-3 successor): LayerNorm1P, relu2 two-matrix MLP, half-rotary heads, GQA
 "nemotron": ("NemotronForCausalLM", dict(S, partial_rotary_factor=0.5)),
 # OLMo 2: post-norm (no input norm), QK-norm over the whole q / k projections, GQA here
 "olmo2": ("Olmo2ForCausalLM", dict(S)),
}


def write_config(fam, workdir):
    cls, cfg = CASES[fam]
    d = os.path.join(workdir, f"fcfg_{fam.replace(':', '_')}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:  # "family:variant" keys: one family
        json.dump(dict(cfg, model_type=fam.split(":")[0], architectures=[cls]), f)
    return os.path.join(d, "config.json")


def analytic(path, mode, batch, seq, prec="amp-bf16", ck="none"):
    m = load_model(path)
    if mode == "train":
        t = train_memory(m, Job(model=m, mode="train", precision=prec, optimizer="adamw", batch=batch, seq=seq, attention="sdpa", checkpointing=ck))
    else:
        t = infer_memory(m, Job(model=m, mode="infer", infer_precision="bf16", batch=batch, seq=seq, attention="sdpa"))
    return t.total_bytes - t.overhead_bytes, t.peak_phase


def compare(fam, mode, batch, seq, prec="amp-bf16", ck="none", workdir=None):
    """(traced bytes, analytic bytes) of one small config."""
    path = write_config(fam, workdir or tempfile.gettempdir())
    a, _ = analytic(path, mode, batch, seq, prec, ck)
    r = trace_step(path, mode=mode, batch=batch, seq=seq, precision=prec if mode == "train" else "bf16", checkpointing=ck)
    return r.total_bytes, a


def _block(n):
    """The CUDA caching allocator's 512-byte rounding, as the trace applies it."""
    return -(-n // 512) * 512


def decode_compare(fam, batch, ctx, attention="sdpa", engine="auto", workdir=None):
    """(traced, analytic) working set of the decode step beyond the weights and the KV cache, bf16.

    The trace runs a prefill of ``ctx`` tokens, then one decode token: the step attends over
    ctx + 1 cached positions, so the plan is asked for ``context`` = ctx + 1. The trace's cache
    at the decode peak (the last layer's attention, every layer's cache already extended) is
    counted by hand from the config: per layer the (b, 1, ctx + 1, kv_lora_rank) latent and the
    (b, 1, ctx + 1, qk_rope_head_dim) rotary key that transformers' DynamicCache keeps for MLA.
    """
    path = write_config(fam, workdir or tempfile.gettempdir())
    cfg = CASES[fam][1]
    m = load_model(path)
    job = Job(model=m, mode="infer", infer_precision="bf16", batch=batch, seq=ctx,
              context=ctx + 1, attention=attention, engine=engine)
    plan = infer_activations(m, job, get_weight_format("bf16"))
    r = trace_step(path, mode="infer", batch=batch, seq=ctx, precision="bf16", attention=attention)
    tok = batch * (ctx + 1) * 2
    kv = cfg["num_hidden_layers"] * (_block(tok * cfg["kv_lora_rank"])
                                     + _block(tok * cfg["qk_rope_head_dim"]))
    traced = r.phase_peaks["decode"] - r.per_gpu["weights_bytes"] - kv
    return traced, plan.decode_bytes


def case(fam, mode, batch, seq, prec="amp-bf16", ck="none"):
    path = write_config(fam, tempfile.gettempdir())
    try:
        a, ap = analytic(path, mode, batch, seq, prec, ck)
    except Exception as e:
        a, ap = None, repr(e)[:80]
    t0 = time.time()
    try:
        r = trace_step(path, mode=mode, batch=batch, seq=seq, precision=prec if mode=="train" else "bf16", checkpointing=ck)
        tb, tp = r.total_bytes, r.peak_phase
    except Exception as e:
        tb, tp = None, repr(e)[:120]
    err = f"{(a-tb)/tb:+.2%}" if a and tb else "-"
    print(f"{fam:12s} {mode} {batch}x{seq} {prec} {ck}: trace {tb} {tp} analytic {a} {ap} {err} ({time.time()-t0:.1f}s)", flush=True)


def decode_cases():
    """The MLA decode step (tests/integration/test_mla_decode.py), sdpa and eager."""
    for fam in ("deepseek_v3", "deepseek_v2", "deepseek_v2:lite", "deepseek_v3:dense_q",
                "deepseek_v3:dense_flash"):
        for att in ("sdpa", "eager"):
            for b, ctx in ((1, 256), (4, 256), (1, 1024), (4, 1024)):
                t, a = decode_compare(fam, b, ctx, att)
                print(f"{fam:24s} decode {att:5s} {b}x{ctx}: trace {t} analytic {a} "
                      f"{(a - t) / t:+.2%}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["decode"]:  # PYTHONPATH=src python benchmarks/modern_agreement.py decode
        decode_cases()
        sys.exit()
    fams = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    for f in fams:
        case(f, "train", 2, 256)
        case(f, "infer", 2, 256, "bf16")
