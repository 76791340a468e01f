"""The speed estimate of whole jobs: its JSON, prefill vs decode, MFU/HFU, recompute, LoRA, gradient
accumulation, the CPU verdict, the batch sweep, and bad input."""

from __future__ import annotations


import dataclasses
import json

import pytest
from hypothesis import given, settings, strategies as st

from gpuplan.compute import (
    batch_sweep, default_efficiency, device_from_gpu, estimate_cpu_speed, estimate_speed,
    estimate_speed_for_job, flops_breakdown,
)
from gpuplan.errors import InputError, UnknownNameError, UnsupportedError
from gpuplan.hardware import get_gpu
from gpuplan.models import from_param_count
from gpuplan.models._types import Architecture, Model, ParamCounts
from gpuplan.job import Job


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)

H100 = get_gpu("H100-SXM-80GB")
A100 = get_gpu("A100-SXM-80GB")

# Llama-2-7B (config.json of meta-llama/Llama-2-7b-hf): 32 layers, hidden 4096, 32 heads,
# intermediate 11008, vocab 32000, untied head; 6,738,415,616 parameters.
LLAMA2_7B = Architecture(
    name="llama-2-7b", family="llama", kind="decoder", hidden_size=4096, num_layers=32,
    num_heads=32, num_kv_heads=32, head_dim=128, intermediate_size=11008, vocab_size=32000,
    max_position_embeddings=4096, tie_word_embeddings=False, mlp="gated", activation="silu",
    norm="rmsnorm", position="rotary")
LLAMA2_7B_PARAMS = 6_738_415_616

# GPT-2 small (config.json of openai-community/gpt2): 12 layers, 768 hidden, 12 heads, 1024
# positions, vocab 50257, tied head; 124,439,808 parameters.
GPT2 = Architecture(
    name="gpt2", family="gpt2", kind="decoder", hidden_size=768, num_layers=12, num_heads=12,
    num_kv_heads=12, head_dim=64, intermediate_size=3072, vocab_size=50257,
    max_position_embeddings=1024, tie_word_embeddings=True, mlp="gelu", activation="gelu_new",
    norm="layernorm", position="learned")


def model(arch: Architecture, n: int) -> Model:
    return Model(name=arch.name, params=ParamCounts(total=n, by_component={"other": n}, active=n,
                                                    embedding=0), architecture=arch)


NO_LAUNCH = dict(measured=None)


def test_json_has_the_required_fields():
    e = estimate_speed(model(LLAMA2_7B, LLAMA2_7B_PARAMS), H100, J(batch=4, seq=2048),
                       measured=None)
    d = json.loads(json.dumps(e.to_dict()))
    for k in ("flops_per_step", "model_flops_per_token", "step_time_s", "tokens_per_s", "mfu",
              "bound"):
        assert k in d
    assert d["bound"] in ("compute", "memory")
    assert d["tokens_per_s"] == pytest.approx(4 * 2048 / d["step_time_s"])
    assert d["mfu"] == pytest.approx(d["model_flops_per_step"]
                                     / (d["step_time_s"] * H100.peak("bf16")))
    # the per-op classes the roofline names
    classes = {c["class"] for c in d["step"]["classes"]}
    assert {"attention", "mlp", "norm_elementwise", "embedding", "logits",
            "optimizer"} <= classes


def test_training_flops_and_mfu_agree_with_the_counting():
    e = estimate_speed(LLAMA2_7B, H100, J(batch=2, seq=1024), measured=None)
    fb = flops_breakdown(LLAMA2_7B, J(batch=2, seq=1024))
    assert e.flops_per_step == pytest.approx(fb.hardware_flops)
    assert e.model_flops_per_token == pytest.approx(fb.model_flops_per_token)
    # 6N + 12 L s h (N = the weights a token meets: 6.74B - the 131M input embedding table)
    n = LLAMA2_7B_PARAMS - 32000 * 4096
    assert e.model_flops_per_token == pytest.approx(6 * n + 12 * 32 * 1024 * 4096, rel=1e-3)
    # with a fused AdamW the matmuls set the pace; torch's default foreach step (78 B per
    # parameter) outweighs the matmuls of 2 x 1024 tokens
    fused = estimate_speed(LLAMA2_7B, H100, J(batch=2, seq=1024, fused_optimizer=True),
                           measured=None)
    assert fused.bound == "compute" and e.bound == "memory"
    assert 0.3 < fused.mfu < 0.8  # bounded by the 80% matmul fraction


def test_full_recompute_costs_one_more_forward_of_the_layers():
    job = J(batch=2, seq=1024)
    base = estimate_speed(LLAMA2_7B, H100, job, measured=None)
    full = estimate_speed(LLAMA2_7B, H100, job.with_(checkpointing="full"), measured=None)
    fb = flops_breakdown(LLAMA2_7B, job)
    layers_fwd = sum(l.forward_flops * l.count for l in fb.layers)
    assert full.flops_per_step - base.flops_per_step == pytest.approx(layers_fwd)
    assert full.model_flops_per_step == base.model_flops_per_step  # MFU ignores recompute
    assert full.step_time_s > base.step_time_s
    assert full.hfu > full.mfu
    # selective recompute: nothing extra with sdpa attention (the core is never stored), the
    # attention core's forward with eager attention
    sel = estimate_speed(LLAMA2_7B, H100, job.with_(checkpointing="selective"), measured=None)
    assert sel.flops_per_step == base.flops_per_step
    eager = estimate_speed(LLAMA2_7B, H100, job.with_(attention="eager"), measured=None)
    sel_e = estimate_speed(LLAMA2_7B, H100, job.with_(attention="eager", checkpointing="selective"),
                           measured=None)
    assert sel_e.flops_per_step - eager.flops_per_step == pytest.approx(
        32 * 4 * 2 * 1024 * 1024 * 4096)


def test_decode_is_memory_bound_at_batch_one():
    # Decoding one token reads every weight once: 6.74e9 x 2 bytes = 13.5 GB, through GEMV kernels
    # at 68.5% of 3.35 TB/s (gpt-fast's measured bf16 rate, efficiency.gemv_bw_16bit) and the KV
    # cache at the streaming 85%: >= 5.9 ms, so batch-1 decode is < 170 tokens/s however fast the
    # tensor cores. Under CUDA graphs (no host dispatch) that is the step, within the launch gaps.
    e = estimate_speed(model(LLAMA2_7B, LLAMA2_7B_PARAMS), H100,
                       J(mode="infer", batch=1, seq=512, runtime="cudagraphs"), new_tokens=2,
                       measured=None)
    weights = LLAMA2_7B_PARAMS * 2
    t_floor = weights / (3.35e12 * 0.85)
    kv = 2 * 32 * 4096 * 2 * 513  # K and V, 32 layers, 513 cached tokens, bf16
    assert e.step.bound == "memory"
    assert e.step_time_s >= t_floor
    assert e.step_time_s == pytest.approx(weights / (3.35e12 * 0.685) + kv / (3.35e12 * 0.85),
                                          rel=0.03)
    assert e.prefill.bound == "compute"  # 512 prompt tokens at once: compute-bound
    assert e.request_time_s == pytest.approx(e.prefill.time_s + e.prefill_transfer.exposed_s
                                             + 2 * e.step_time_s)


@settings(max_examples=25, deadline=None)
@given(b1=st.integers(1, 128), b2=st.integers(1, 512), ctx=st.sampled_from([128, 1024, 4096]),
       gpu=st.sampled_from(["H100-SXM-80GB", "A100-SXM-80GB", "L4", "T4"]))
def test_decode_throughput_grows_with_batch_and_never_exceeds_the_compute_bound(b1, b2, ctx,
                                                                                 gpu):
    g = get_gpu(gpu)
    prec = "fp16" if not g.supports("bf16") else "bf16"
    lo, hi = sorted((b1, b2 if b2 <= 128 else b1 + (b2 - 129) % (129 - b1)))  # both in one tile
    job = J(mode="infer", seq=ctx, context=ctx, precision=prec)
    e_lo = estimate_speed(LLAMA2_7B, g, job.with_(batch=lo), measured=None)
    e_hi = estimate_speed(LLAMA2_7B, g, job.with_(batch=hi), measured=None)
    # Throughput grows with the batch while the batch stays inside one 128-row matmul tile (the
    # same tiles and waves, more useful rows). Past it, tile and wave quantization over the SMs
    # (compute/efficiency.py) can make a larger batch a little slower per token once
    # compute-bound (A100: 385 rows pad to 512, 257 too), as cuBLAS does: no monotonic claim there.
    assert hi <= 128
    assert e_hi.tokens_per_s >= e_lo.tokens_per_s * (1 - 1e-12)
    e_big = estimate_speed(LLAMA2_7B, g, job.with_(batch=b2), measured=None)
    for e in (e_lo, e_hi, e_big):
        # the compute bound: achievable peak / executed FLOPs per generated token
        bound = g.peak(prec) * e.efficiency.matmul / (e.step.flops / e.step.tokens)
        assert e.tokens_per_s <= bound


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 64), db=st.integers(0, 64), s=st.integers(1, 4096), ds=st.integers(0, 512),
       mode=st.sampled_from(["train", "infer"]), attention=st.sampled_from(["sdpa", "eager"]))
def test_more_work_never_takes_less_time(b, db, s, ds, mode, attention):
    # GPT-2's block with a position table long enough for every drawn length (GPT-2's own 1,024
    # rows refuse a longer sequence: gpuplan.job.check_positions)
    gpt2 = dataclasses.replace(GPT2, max_position_embeddings=4096 + 512)
    small = estimate_speed(gpt2, H100, J(mode=mode, attention=attention, batch=b, seq=s),
                           measured=None)
    big = estimate_speed(gpt2, H100, J(mode=mode, attention=attention, batch=b + db, seq=s + ds),
                         measured=None)
    assert big.step.flops >= small.step.flops
    t_small = small.request_time_s if mode == "infer" else small.step_time_s
    t_big = big.request_time_s if mode == "infer" else big.step_time_s
    assert t_big >= t_small * (1 - 1e-12)


def test_decode_saturates_as_the_kv_cache_dominates():
    tps = [estimate_speed(LLAMA2_7B, H100, J(mode="infer", batch=b, seq=1024, context=1024),
                          measured=None).tokens_per_s for b in (1, 4, 16, 64, 256)]
    gains = [b / a for a, b in zip(tps, tps[1:])]
    assert all(g > 1 for g in gains)
    assert gains[-1] < gains[0]  # diminishing returns


def test_encoder_and_vision_inference_is_one_forward():
    bert = Architecture(
        name="bert-base", family="bert", kind="encoder", hidden_size=768, num_layers=12,
        num_heads=12, num_kv_heads=12, head_dim=64, intermediate_size=3072, vocab_size=30522,
        max_position_embeddings=512, tie_word_embeddings=True, mlp="gelu", activation="gelu",
        norm="layernorm", position="learned", hf_class="BertModel")
    e = estimate_speed(bert, H100, J(mode="infer", batch=32, seq=128), measured=None)
    assert e.step.name == "forward" and e.prefill is None and e.request_time_s is None
    assert e.samples_per_s == pytest.approx(32 / e.step_time_s)
    vit = Architecture(
        name="vit-base", family="vit", kind="vision", hidden_size=768, num_layers=12,
        num_heads=12, num_kv_heads=12, head_dim=64, intermediate_size=3072, vocab_size=0,
        max_position_embeddings=197, tie_word_embeddings=False, mlp="gelu", activation="gelu",
        norm="layernorm", position="learned", image_size=224, patch_size=16, num_channels=3,
        num_labels=1000, hf_class="ViTForImageClassification")
    e = estimate_speed(vit, H100, J(mode="train", batch=64, seq=100), measured=None)
    assert e.seq == 197 and any("patches" in n for n in e.notes)
    # past the patch table (196 patches + [CLS]): refused, as fit and cluster refuse it
    with pytest.raises(InputError, match="at most 197 tokens per image"):
        estimate_speed(vit, H100, J(mode="train", batch=64, seq=999), measured=None)
    # a batch of 64 fp32 224x224 images + labels crosses PCIe each step
    assert e.transfer.bytes_per_step == 64 * (3 * 224 * 224 * 4 + 8)


def test_lora_and_gradient_accumulation():
    job = J(batch=4, seq=1024)
    full = estimate_speed(LLAMA2_7B, H100, job, measured=None)
    lora = estimate_speed(LLAMA2_7B, H100, job.with_(lora_rank=16), trainable_params=4_194_304,
                          measured=None)
    fb = flops_breakdown(LLAMA2_7B, job)
    head_and_layers_weight_grads = fb.forward_flops - sum(
        l.attention_flops * l.count for l in fb.layers)
    # a frozen base computes no weight gradients: one forward's worth of weight-matmul FLOPs less
    assert full.model_flops_per_step - lora.model_flops_per_step == pytest.approx(
        head_and_layers_weight_grads)
    assert lora.trainable_params == 4_194_304
    assert lora.step_time_s < full.step_time_s
    acc = estimate_speed(LLAMA2_7B, H100, job.with_(grad_accum=4), measured=None)
    assert acc.step.tokens == 4 * full.step.tokens
    opt = [t for t in acc.step.ops if t.op.phase == "optimizer"]
    assert len(opt) == 1 and opt[0].op.count == 1  # the optimizer steps once per 4 micro-batches
    assert acc.tokens_per_s > full.tokens_per_s


def test_multi_gpu_and_time_to_train():
    e = estimate_speed(LLAMA2_7B, H100, J(batch=8, seq=2048, gpus=8), link="100Gb/s",
                       train_tokens=1e9, price_per_gpu_hour=3.0, measured=None)
    assert [r.gpus for r in e.scaling.rows] == list(range(1, 9))
    row8 = e.scaling.rows[-1]
    assert e.step_time_s == pytest.approx(row8.step_time_s)
    assert e.tokens_per_s == pytest.approx(8 * 8 * 2048 / e.step_time_s)
    assert row8.efficiency < 1
    tt = e.training_time
    assert tt.seconds == pytest.approx(1e9 / e.tokens_per_s)
    assert tt.cost == pytest.approx(tt.seconds / 3600 * 8 * 3.0)
    z3 = estimate_speed(LLAMA2_7B, H100, J(batch=8, seq=2048, gpus=8, zero=3), link="100Gb/s",
                        measured=None, overlap_comm=False)
    z0 = estimate_speed(LLAMA2_7B, H100, J(batch=8, seq=2048, gpus=8, zero=0), link="100Gb/s",
                        measured=None, overlap_comm=False)
    assert z3.scaling.gradient_bytes == pytest.approx(1.5 * z0.scaling.gradient_bytes, rel=1e-9)


class FakeCPU:
    """The fields of gpuplan.hardware.cpu.CPU the speed model reads (2 cores, AVX2, 3 GHz)."""

    model_name, vendor, physical_cores, simd_bits = "Test CPU", "GenuineIntel", 2, 256
    peak_fp32_flops = 2 * 3e9 * 8 * 2 * 2  # cores x clock x lanes x FMA units x 2
    peak_fp64_flops = peak_fp32_flops / 2
    peak_basis = "estimate: 2 cores x 3.00 GHz x 8 fp32 lanes x 2 FMA units x 2"


def test_cpu_verdict_small_job_needs_no_gpu_large_job_does():
    tiny = Architecture(
        name="tiny", family="gpt2", kind="decoder", hidden_size=64, num_layers=2, num_heads=4,
        num_kv_heads=4, head_dim=16, intermediate_size=256, vocab_size=500,
        max_position_embeddings=64, tie_word_embeddings=True, mlp="gelu", activation="gelu_new",
        norm="layernorm", position="learned")
    small = estimate_speed(tiny, H100, J(batch=1, seq=32), cpu=FakeCPU(), measured=None)
    assert not small.cpu.needs_gpu
    assert small.cpu.verdict.startswith("No GPU needed")
    big = estimate_speed(LLAMA2_7B, H100, J(batch=8, seq=2048), cpu=FakeCPU(), measured=None)
    assert big.cpu.needs_gpu and big.cpu.speedup > 100
    assert big.cpu.verdict.startswith("A GPU pays off")
    # a short whole job: the CPU finishes in minutes even if the GPU is faster per step
    short = estimate_speed(GPT2, H100, J(batch=1, seq=64), cpu=FakeCPU(), train_tokens=64 * 20,
                           measured=None)
    assert short.cpu.cpu_job_s < 600 and not short.cpu.needs_gpu



class CpuBench:
    """A stored bench run of this CPU (the interface of gpuplan.measure.store.Measured)."""

    run_id, created_utc, device_names = 3, "2025-01-01T00:00:00Z", {"cpu": "Test CPU"}

    def flops(self, device, dtype):
        return 150e9 if (device, dtype) == ("cpu", "fp32") else None

    def bandwidth_of(self, device, kind):
        return 20e9 if (device, kind) == ("cpu", "host_copy") else None

    def overhead_of(self, device, kind):
        return 3e-6 if (device, kind) == ("cpu", "op_dispatch") else None


def test_cpu_estimate_of_a_training_step_by_hand():
    # N = 100M parameters known by count only, 8 x 512 tokens, plain SGD: 6N FLOPs per token
    # (2N forward + 4N backward) at 0.80 of the CPU's fp32 peak, and the update reads the weight
    # and the gradient and writes the weight (3 x 4 bytes per parameter) at 0.70 of the assumed
    # 51.2 GB/s DRAM; 2 us per op dispatch is left in the tolerance (a few ops in a 16 s step).
    n, tokens = 100_000_000, 8 * 512
    peak = FakeCPU.peak_fp32_flops
    e = estimate_cpu_speed(from_param_count(n), FakeCPU(), J(batch=8, seq=512, optimizer="sgd"),
                           measured=None)
    assert (e.cpu, e.dtype, e.mode, e.batch, e.seq) == ("Test CPU", "fp32", "train", 8, 512)
    assert e.peak_basis == FakeCPU.peak_basis and e.step.peak_flops == peak
    assert e.step.model_flops == 6 * n * tokens
    assert e.step_time_s == pytest.approx(6 * n * tokens / (0.80 * peak)
                                          + 12 * n / (0.70 * 51.2e9), rel=1e-5)
    assert any("parameter count only" in note for note in e.notes)
    # a bench run of this CPU replaces the estimated peak and the assumed bandwidth outright
    m = estimate_cpu_speed(from_param_count(n), FakeCPU(), J(batch=8, seq=512, optimizer="sgd"),
                           measured=CpuBench())
    assert m.step_time_s == pytest.approx(6 * n * tokens / 150e9 + 12 * n / 20e9, rel=1e-5)
    assert m.peak_basis.startswith("measured") and m.efficiency.launch_s == 3e-6
    assert set(m.efficiency.measured) == {"matmul", "memory", "launch_s"}


def test_cpu_side_of_estimate_speed_is_the_cpu_estimate_whatever_the_gpu():
    job = J(batch=2, seq=256, optimizer="sgd-momentum", checkpointing="full",
            attention="eager", grad_accum=3, lora_rank=16)
    alone = estimate_cpu_speed(GPT2, FakeCPU(), job, measured=None)
    for gpu in (H100, A100):
        beside = estimate_speed(GPT2, gpu, job.with_(precision="fp32"), cpu=FakeCPU(),
                                measured=None).cpu
        assert beside.cpu_step_s == alone.step_time_s
        assert (beside.cpu, beside.cpu_dtype) == (alone.cpu, alone.dtype)
    # the job's options reach the CPU step: each one changes it
    for change in (dict(grad_accum=1), dict(checkpointing="none"), dict(attention="sdpa"),
                   dict(lora_rank=None), dict(optimizer="adamw")):
        assert estimate_cpu_speed(GPT2, FakeCPU(), job.with_(**change),
                                  measured=None).step_time_s != alone.step_time_s, change
    # a decoder's inference: prefill, then decode steps over the cache
    inf = estimate_cpu_speed(GPT2, FakeCPU(), J(mode="infer", batch=2, seq=256), new_tokens=16,
                             measured=None)
    assert (inf.step.name, inf.step.q_len, inf.prefill.q_len) == ("decode", 1, 256)
    assert inf.request_time_s == pytest.approx(inf.prefill.time_s + 16 * inf.step.time_s)


@pytest.mark.parametrize("kw, match", [
    (dict(mode="both"), "job mode 'both': a speed estimate is of one mode"),
    (dict(new_tokens=0), "new_tokens 0"), (dict(trainable_params=0), "trainable_params 0"),
])
def test_cpu_estimate_bad_values_are_one_line_errors(kw, match):
    mode = kw.pop("mode", "train")
    with pytest.raises(InputError, match=match) as ei:
        estimate_cpu_speed(GPT2, FakeCPU(), J(mode=mode), measured=None, **kw)
    assert "\n" not in str(ei.value)


def test_batch_sweep_finds_where_throughput_saturates():
    sw = batch_sweep(GPT2, H100, J(mode="train", seq=1024), batches=[1, 2, 4, 8, 16, 32, 64],
                     measured=None)
    tps = [p.tokens_per_s for p in sw.points]
    assert tps == sorted(tps)
    assert sw.saturation_batch in (p.batch for p in sw.points)
    best = max(tps)
    sat = next(p for p in sw.points if p.batch == sw.saturation_batch)
    assert sat.tokens_per_s >= 0.9 * best
    before = [p for p in sw.points if p.batch < sw.saturation_batch]
    assert all(p.tokens_per_s < 0.9 * best for p in before)


def test_count_only_model_gets_6n():
    m = Model(name="7B", params=ParamCounts(total=7_000_000_000,
                                            by_component={"other": 7_000_000_000},
                                            active=7_000_000_000, embedding=0))
    e = estimate_speed(m, H100, J(batch=1, seq=2048), measured=None)
    assert e.model_flops_per_token == pytest.approx(6 * 7e9)
    assert any("architecture unknown" in n for n in e.notes)


def test_job_adapter():
    job = Job(model="llama-2-7b", mode="both", batch=2, seq=1024, checkpointing="full",
              attention="sdpa", grad_accum=2)
    out = estimate_speed_for_job(job, H100, model=LLAMA2_7B, measured=None)
    assert set(out) == {"train", "infer"}
    assert out["train"].checkpointing == "full" and out["train"].grad_accum == 2
    assert out["train"].to_dict()["recompute"] == "full"  # the JSON keeps its key
    assert out["infer"].mode == "infer" and out["infer"].precision == "bf16"


def test_speed_section_for_fit_json():
    from gpuplan.compute import speed_section

    job = Job(model="llama-2-7b", mode="both", batch=1, seq=512)
    typed = speed_section(job, [H100, get_gpu("T4")], model=LLAMA2_7B, measured=None)
    assert typed.row("H100-SXM-80GB").train.tokens_per_s > 0  # the estimates themselves
    sec = typed.to_dict()
    json.dumps(sec)
    h100, t4 = sec["gpus"]
    assert h100["gpu"] == "H100-SXM-80GB"
    for k in ("flops_per_step", "model_flops_per_token", "step_time_s", "tokens_per_s", "mfu",
              "bound"):
        assert k in h100["train"] and k in h100["infer"]
    assert h100["infer"]["decode_tokens_per_s"] == h100["infer"]["tokens_per_s"]
    assert "T4 has no bf16" in t4["error"]  # one GPU's dtype does not sink the plan


# --------------------------------------------------------------------------------------------------
# Bad input: one clear error naming the value and the way out


def test_bf16_on_t4_and_v100_offers_fp16():
    with pytest.raises(UnsupportedError, match=r"T4 has no bf16.*mixed-fp16"):
        estimate_speed(GPT2, get_gpu("T4"), J(), measured=None)
    with pytest.raises(UnsupportedError, match=r"V100-SXM2-32GB has no bf16.*precision fp16"):
        estimate_speed(GPT2, get_gpu("V100-SXM2-32GB"), J(mode="infer"), measured=None)
    ok = estimate_speed(GPT2, get_gpu("T4"), J(precision="mixed-fp16"), measured=None)
    assert ok.dtype == "fp16"
    with pytest.raises(UnsupportedError, match=r"A100-SXM-80GB \(Ampere architecture\) has no "
                                               r"FP8 tensor cores; FP8 GEMMs run on Hopper"):
        estimate_speed(GPT2, A100, J(mode="infer", precision="fp8"), measured=None)


@pytest.mark.parametrize("kw,match", [
    (dict(price_per_gpu_hour=2.0), "price per GPU-hour needs"),
    (dict(train_tokens=1e9, train_samples=10), "not both"),
    (dict(new_tokens=0), "new_tokens 0"), (dict(input_bytes=-1), "input_bytes -1"),
    (dict(trainable_params=-5), "trainable_params -5"),
])
def test_bad_values_are_one_line_input_errors(kw, match):
    with pytest.raises(InputError, match=match) as ei:
        estimate_speed(GPT2, H100, J(), measured=None, **kw)
    assert "\n" not in str(ei.value)


def test_the_job_is_validated_once_by_the_job():
    # the Job's own checks stand (estimate_speed does not check its fields again) ...
    for kw, match in ((dict(batch=0), "batch 0"), (dict(checkpointing="some"),
                                                    "checkpointing 'some'"),
                      (dict(attention="flash"), "attention 'flash'"), (dict(zero=4), "zero 4")):
        with pytest.raises(InputError, match=match):
            J(**kw)
    # ... and a job of both modes is two estimates, not one
    with pytest.raises(InputError, match="job mode 'both'"):
        estimate_speed(GPT2, H100, Job(model="gpt2"), measured=None)


def test_unknown_precision_suggests_names():
    with pytest.raises(UnknownNameError, match="did you mean 'mixed-bf16'"):
        estimate_speed(GPT2, H100, J(precision="mixed-bf61"), measured=None)
    with pytest.raises(UnknownNameError, match="training precision 'nf4'"):
        estimate_speed(GPT2, H100, J(precision="nf4"), measured=None)
