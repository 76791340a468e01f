"""FP8 KV cache and FP8 attention in inference (issue 30 part 2), checked by hand.

Figures used (independent of the code): H100-SXM-80GB's datasheet, 3,350 GB/s and 1,978.9 dense
FP8 TFLOP/s; the streaming share 0.85 (efficiency ``memory_default``); FlashAttention-3's FP8
forward "close to 1.2 PFLOPs/s" on H100 SXM5 (Shah et al. 2024, arXiv 2407.08608, abstract);
FlashAttention-3's FP16 forward "up to 740 TFLOPs/s (75% utilization)" (the same abstract);
FlashAttention-2's short-sequence roll-off seq / (seq + 256); Llama-3.1-8B: 32 layers, 32 query
heads, 8 KV heads, head dim 128."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import fp8_attention_vs_16bit
from gpuplan.engines.profiles import FP8_ATTENTION
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")
A100 = get_gpu("A100-SXM-80GB")
MODEL = load_model("llama-3.1-8b")
LAYERS, H, HKV, D = 32, 32, 8, 128
BW = 3350e9 * 0.85
FP8_PEAK = 1978.9e12
FA3_FP8_SHARE = 1.2e15 / FP8_PEAK


def _est(gpu=H100, **kw):
    job = Job(model="llama-3.1-8b", mode="infer", **kw)
    return estimate_speed(MODEL, gpu, job, measured=None)


def _core(phase):
    (t,) = [t for t in phase.ops if t.op.name == "attn.core"]
    return t


def test_decode_attention_reads_an_fp8_cache_at_one_byte_plus_scales():
    ctx, b = 8192, 4
    fp8 = _core(_est(engine="vllm", kv_dtype="fp8", batch=b, seq=8000, context=ctx).step)
    bf16 = _core(_est(engine="vllm", batch=b, seq=8000, context=ctx).step)
    q_and_out = 2 * b * H * D * 2                      # the query read, the output written (bf16)
    kv = b * ctx * 2 * HKV * D                         # K and V of every cached token, 1 B each
    new = b * 1 * 2 * HKV * D                          # the new token's K and V written
    assert fp8.op.bytes == q_and_out + kv + new + 8    # + fp32 k_scale and v_scale
    assert bf16.op.bytes == q_and_out + 2 * (kv + new)
    assert fp8.memory_s == pytest.approx((q_and_out + kv + new + 8) / BW, rel=1e-12)
    assert fp8.time_s == pytest.approx(fp8.memory_s, rel=1e-12)  # memory-bound
    assert bf16.time_s / fp8.time_s == pytest.approx((q_and_out + 2 * (kv + new))
                                                      / (q_and_out + kv + new + 8), rel=1e-12)


def test_prefill_attention_runs_at_the_fp8_peak_times_fa3s_share():
    # SGLang's sgl_kernel FlashAttention-3: FA3's FP8 share (no two-level accumulation read)
    s = 8192
    est = _est(engine="sglang", fp8_attention=True, seq=s)
    core = _core(est.prefill)
    assert core.dtype == "fp8" and core.op.narrow
    rate = FP8_PEAK * FA3_FP8_SHARE * s / (s + 256)
    assert core.compute_s == pytest.approx(core.op.flops / rate, rel=1e-3)
    # the same prompt with 16-bit attention: FlashAttention-2's 0.35 of the bf16 peak
    wide = _core(_est(engine="sglang", seq=s).prefill)
    assert wide.op.flops == core.op.flops
    assert wide.compute_s == pytest.approx(core.op.flops / (989.4e12 * 0.35 * s / (s + 256)),
                                           rel=1e-3)
    assert est.attention_precision.fp8 and est.attention_precision.selected_by == "fp8_attention"
    assert any("FP8" in n and "FlashAttention-3" in n for n in est.notes)
    assert est.to_dict()["attention_precision"]["fp8"] is True


def test_vllm_two_level_fa3_prefills_at_the_16bit_kernels_rate():
    # vLLM's FA3 fork with two-level accumulation (vllm-project/flash-attention#104): the vLLM
    # blog of 2026-04-22 (v0.19.1, Llama-3.1-8B, head dim 128, H100) finds FP8 prefill at
    # "similar TTFT" to BF16, so the FP8 kernel runs at the 16-bit kernel's rate -- vLLM's own
    # on Hopper, FlashAttention-3 (fa_utils.py get_flash_attn_version), 0.75 of the bf16 peak
    # 989.4 TFLOP/s (the FA3 paper's "75% utilization") -- and at head dim 256 at 6.93e-07 /
    # 1.12e-06 of it (gemma-4-E2B's TTFT L^2 coefficients, BF16 over FP8)
    s = 8192
    rate16 = 989.4e12 * 0.75 * s / (s + 256)
    for kw in ({"kv_dtype": "fp8"}, {"fp8_attention": True}):
        est = _est(engine="vllm", seq=s, **kw)
        core = _core(est.prefill)
        assert core.op.narrow and core.op.attention_kernel == "fa3-fp8-two-level"
        assert core.compute_s == pytest.approx(core.op.flops / rate16, rel=1e-3)
        assert any("two-level" in n for n in est.notes)
    bf16 = _core(_est(engine="vllm", seq=s).prefill)
    assert bf16.compute_s == pytest.approx(core.compute_s, rel=1e-9)
    assert fp8_attention_vs_16bit("fa3-fp8-two-level", 64) == 1.0
    assert fp8_attention_vs_16bit("fa3-fp8-two-level", 256) == pytest.approx(6.93 / 11.2,
                                                                              abs=5e-4)
    assert fp8_attention_vs_16bit("fa3-fp8", 128) == 0.0


def test_vllm_prefills_with_fa3_on_hopper_only():
    # vLLM picks FlashAttention 3 on compute capability 9.x (vllm fa_utils.py
    # get_flash_attn_version: "Hopper (SM90): prefer FA3"): its 16-bit prefill attention at the
    # FA3 paper's 75% of the bf16 peak (989.4 TFLOP/s), x s / (s + 256) at s tokens; TensorRT-LLM
    # (no kernel entered) keeps FlashAttention-2's 35%; an 8192-token prompt of Llama-3.1-8B:
    # about 2 x 8192^2 x 4096 causal FLOPs a layer (5.5e11), 32 layers: 1.76e13 -> 24.5 ms at
    # 0.75 x 8192 / 8448 x 989.4 TFLOP/s (FA2's share: 52.5 ms)
    s = 8192
    vllm = _core(_est(engine="vllm", seq=s).prefill)
    assert vllm.op.flops == pytest.approx(2 * s * s * 4096, rel=0.02)
    assert vllm.compute_s == pytest.approx(vllm.op.flops / (989.4e12 * 0.75 * s / (s + 256)),
                                           rel=1e-3)
    assert vllm.total_s == pytest.approx(0.0245, rel=0.03)
    trt = _core(_est(engine="trt-llm", seq=s).prefill)
    assert trt.compute_s == pytest.approx(trt.op.flops / (989.4e12 * 0.35 * s / (s + 256)),
                                          rel=1e-3)
    assert any("FlashAttention-3" in n for n in _est(engine="vllm", seq=s).notes)
    a100 = _core(_est(gpu=A100, engine="vllm", seq=s).prefill)
    # head dim 64 (gpt-oss): the FA3 paper's Figure 5 bar, 497 of 989.4 TFLOP/s -> 0.50
    oss = load_model("gpt-oss-20b")
    est = estimate_speed(oss, H100, Job(model="gpt-oss-20b", mode="infer", engine="vllm",
                                        infer_precision="mxfp4", seq=s), measured=None)
    full = [t for t in est.prefill.ops if t.op.name == "attn.core" and t.op.shape[3] == s]
    assert full
    for t in full:
        assert t.compute_s == pytest.approx(t.op.flops / (989.4e12 * 0.50 * s / (s + 256)),
                                            rel=1e-3)
    # FA2 on Ampere: 0.73 of A100's 312 TFLOP/s (head dim 128), not FA3's share
    assert a100.compute_s == pytest.approx(a100.op.flops / (312e12 * 0.73 * s / (s + 256)),
                                           rel=1e-3)


def test_vllm_fp8_kv_on_hopper_selects_fa3_fp8_and_trt_llm_does_not():
    vllm = _est(engine="vllm", kv_dtype="fp8", seq=4096)
    assert vllm.attention_precision.selected_by == "kv_dtype"
    assert _core(vllm.prefill).dtype == "fp8"
    trt = _est(engine="trt-llm", kv_dtype="fp8", seq=4096)
    assert not trt.attention_precision.fp8 and trt.attention_precision.kv_scale_bytes == 8
    assert _core(trt.prefill).dtype == "bf16"
    asked = _est(engine="trt-llm", kv_dtype="fp8", fp8_attention=True, seq=4096)
    # TRT-LLM's FP8 context FMHA has no published share: the 16-bit kernel's (0.35) of the FP8
    # peak
    c = _core(asked.prefill)
    assert c.compute_s == pytest.approx(c.op.flops / (FP8_PEAK * 0.35 * 4096 / (4096 + 256)),
                                        rel=1e-3)


def test_defaults_stay_bf16():
    est = _est(seq=4096)
    assert not est.attention_precision.fp8 and not est.attention_precision.kv_fp8
    assert _core(est.prefill).dtype == "bf16"
    # transformers' generate reads an fp8 cache at 1 B, with no engine scales
    assert _est(kv_dtype="fp8", seq=4096).attention_precision.kv_scale_bytes == 0


def test_refused_in_one_line_without_fp8_tensor_cores():
    with pytest.raises(InputError) as e:
        _est(gpu=A100, engine="vllm", fp8_attention=True)
    msg = str(e.value)
    assert "\n" not in msg and "A100-SXM-80GB" in msg and "Ampere" in msg
    assert "H100-SXM-80GB" in msg and "A100" not in msg.split("runs on", 1)[1]
    # an fp8 KV cache alone is not refused on A100: dequantized in the kernel, 16-bit products
    assert not _est(gpu=A100, engine="vllm", kv_dtype="fp8").attention_precision.fp8


def test_refused_under_an_engine_without_the_kernel_and_off_its_generation():
    with pytest.raises(InputError, match="no FP8 attention kernel"):
        _est(fp8_attention=True)                        # transformers' generate
    with pytest.raises(InputError, match="Hopper"):
        _est(gpu=get_gpu("L40S"), engine="vllm", fp8_attention=True)  # Ada: FA3 is sm90 only


def test_training_keeps_its_recipe_rule():
    with pytest.raises(InputError, match="FP8 recipe"):
        Job(model="llama-3.1-8b", mode="train", fp8_attention=True)
    Job(model="llama-3.1-8b", mode="infer", fp8_attention=True)


def test_engine_data_names_its_sources_at_a_commit():
    for f in FP8_ATTENTION.values():
        assert f.sources and all("@" in s for s in f.sources)
        assert f.architectures == ("Hopper",)
