"""The runtime model (eager / torch.compile / CUDA graphs) and the one efficiency table."""

from __future__ import annotations

from dataclasses import replace as dc_replace
from pathlib import Path

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute import step as step_mod
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import (
    CONSTANTS, DEFAULT_RUNTIME, attention_clock_share, attention_fraction, constant,
    gemm_wave_efficiency, resolve_runtime,
)
from gpuplan.compute.flops import Op
from gpuplan.compute.time import time_ops
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

A100 = get_gpu("A100-SXM-80GB")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "speed.md"


@pytest.fixture(autouse=True)
def _no_bench(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))


def test_every_constant_is_sourced_and_documented():
    text = DOCS.read_text()
    for name, c in CONSTANTS.items():
        assert c.source and c.unit and c.value > 0, name
        assert f"`{name}`" in text, f"docs/speed.md does not list {name}"


def test_runtime_is_validated_and_auto_is_stated():
    with pytest.raises(InputError, match="runtime 'jit'"):
        Job(model="gpt2", runtime="jit")
    assert resolve_runtime("auto", "train") == DEFAULT_RUNTIME["train"] == "eager"
    assert resolve_runtime("auto", "infer") == "eager"  # transformers' generate: eager by default
    assert resolve_runtime("compile", "infer") == "compile"


def _decode(runtime: str):
    m = load_model("llama-2-7b")
    return estimate_speed(m, A100, Job(model="llama-2-7b", mode="infer", batch=1, seq=5,
                                        runtime=runtime), new_tokens=200, measured=None)


def test_eager_decode_is_dispatch_bound_and_graphs_remove_it():
    eager, comp, graphs = (_decode(r) for r in ("eager", "compile", "cudagraphs"))
    # eager: the host's dispatch (kernels x 32 us forward) sets the pace, not the 13.5 GB of weights
    assert eager.step.host_bound
    host = eager.step.kernels * constant("eager_host_fwd_s")
    assert eager.step_time_s == pytest.approx(host, rel=1e-9)
    # compile fuses the eager chains (fewer kernels) and launches them cheaply: device-bound
    assert comp.step.kernels < eager.step.kernels and not comp.step.host_bound
    # CUDA graphs: one replay per step; only the launch gaps remain on top of the kernels
    g = graphs.step
    assert g.time_s == pytest.approx(g.kernel_time_s + g.kernels * constant("graph_gap_s"))
    assert graphs.tokens_per_s > comp.tokens_per_s > 3 * eager.tokens_per_s


def test_wave_quantization_by_hand():
    # 108 SMs, 128 x 128 tiles: 4096 x 4096 = 1024 tiles = 9.48 waves -> 10 rounds
    assert gemm_wave_efficiency(1, 4096, 4096, 108) == pytest.approx(1024 / 1080)
    # a partial edge tile does full work: 130 rows take two tile rows
    assert gemm_wave_efficiency(1, 130, 128 * 108, 108) == pytest.approx(130 / 256)


def test_attention_fraction_by_generation_direction_and_sequence():
    a = attention_fraction("Ampere", 128, 10**9, backward=False, cap=1.0)
    assert a == pytest.approx(0.73, rel=1e-6)
    assert attention_fraction("Ampere", 128, 10**9, backward=True, cap=1.0) == \
        pytest.approx(0.73 * 0.85, rel=1e-6)
    assert attention_fraction("Ampere", 64, 10**9, backward=False, cap=1.0) < a
    assert attention_fraction("Hopper", 128, 10**9, backward=False, cap=1.0) == \
        pytest.approx(0.35, rel=1e-6)
    # at 256 tokens, half the long-sequence rate; never above the matmul fraction
    assert attention_fraction("Ampere", 128, 256, backward=False, cap=1.0) == pytest.approx(0.365)
    assert attention_fraction("Ampere", 128, 10**9, backward=False, cap=0.5) == 0.5


def test_ada_runs_flashattention2s_sm8x_kernels():
    # sm89 is FlashAttention-2's sm8x class with sm86 (flash_fwd_launch_template.h: is_sm8x), and
    # SDPA's flash backend runs on it: Ada reads Ampere's shares (the FA2 paper's 73% forward at
    # head dim 128, x 0.85 backward), as every sm86 card already does
    for arch in ("Ada Lovelace", "ada lovelace"):
        assert attention_fraction(arch, 128, 10**9, backward=False, cap=1.0) == \
            pytest.approx(0.73, rel=1e-6)
        assert attention_fraction(arch, 128, 10**9, backward=True, cap=1.0) == \
            pytest.approx(0.6205, rel=1e-6)
        # 256 tokens: 0.73 x 256 / (256 + 256)
        assert attention_fraction(arch, 128, 256, backward=False, cap=1.0) == pytest.approx(0.365)
    # the generations without FlashAttention-2 keep the memory-efficient kernels' assumed 0.50
    assert attention_fraction("Volta", 128, 10**9, backward=False, cap=1.0) == \
        pytest.approx(0.50, rel=1e-6)
    assert attention_fraction("Turing", 64, 10**9, backward=False, cap=1.0) == \
        pytest.approx(0.50, rel=1e-6)


def _opt(est):
    return next(t for t in est.step.ops if t.op.phase == "optimizer")


def test_optimizer_implementations_move_what_torch_runs():
    """Bytes of one AdamW step on mixed-bf16 (fp32 master and states, bf16 grads and weights),
    counted by hand from torch/optim/adam.py: the fused kernel reads the master (4), grad (2),
    two states (8) and writes master, states and the bf16 weight copy: 4+2+8 + 4+8+2 = 28 B. The
    foreach / for-loop passes: mul_(params) 8, lerp_(exp_avg, grad) 4+2+4, mul_(exp_avg_sq) 8,
    addcmul_ 4+2+4, sqrt into a temporary 8, div_ 8, add_ 8, addcdiv_(params, exp_avg, denom)
    4+4+4+4, + the bf16 copy 2 = 78 B."""
    m = load_model("llama-2-7b")
    job = Job(model="llama-2-7b", mode="train", batch=1, seq=256, precision="mixed-bf16")
    n = m.params.total
    fused, foreach, loop = (estimate_speed(m, A100, job, measured=None, optimizer_impl=i)
                            for i in ("fused", "foreach", "for-loop"))
    assert _opt(fused).op.bytes == pytest.approx(28 * n)
    assert _opt(foreach).op.bytes == pytest.approx(78 * n) == _opt(loop).op.bytes
    tensors = sum(t.count for t in m.tensors)  # 291 for llama-2-7b
    assert _opt(loop).op.kernels == 8 * tensors
    # one Python call per kernel in the loop; the multi-tensor passes are issued from C++
    assert _opt(loop).op.host_s == constant("eager_host_op_s")
    # foreach launches per 36 tensors or 320 x 65536 elements (ATen MultiTensorApply.cuh): 6.7B
    # elements are 322 launches a pass -- more launches than the loop, each cheaper to issue
    assert _opt(foreach).op.kernels == 8 * -(-n // (320 * 65536))
    assert _opt(foreach).op.host_s == constant("eager_host_bwd_s")
    # job.fused_optimizer is the fused step; torch's default on a GPU is foreach
    on = estimate_speed(m, A100, job.with_(fused_optimizer=True), measured=None)
    assert _opt(on).op.bytes == _opt(fused).op.bytes
    assert _opt(estimate_speed(m, A100, job, measured=None)).op.bytes == _opt(foreach).op.bytes
    with pytest.raises(InputError, match="optimizer_impl 'jit'"):
        estimate_speed(m, A100, job, measured=None, optimizer_impl="jit")


def test_fp16_loss_scaling_exposes_the_optimizer_issue_time():
    """GradScaler reads found_inf on the host before optimizer.step: the loop's issue time is not
    hidden behind the backward (bf16 has no scaler: without another host read, one max over the
    whole step)."""
    m = load_model("bert-large-uncased")
    v100 = get_gpu("V100-SXM2-16GB")
    # transformers' Adafactor: 24 Python-issued kernels per tensor, more host than device time
    job = Job(model="bert-large-uncased", mode="train", batch=4, seq=512, precision="amp-fp16",
              attention="eager", optimizer="adafactor")
    e = estimate_speed(m, v100, job, measured=None).step
    assert e.sync_before_optimizer
    opt = [t for t in e.ops if t.op.phase == "optimizer"]
    rest = [t for t in e.ops if t.op.phase != "optimizer"]
    gap = constant("stream_gap_s")
    dev = [sum(t.total_s + t.op.kernels * t.op.count * gap for t in p) for p in (rest, opt)]
    # the Python loop's kernels, and the loss scaling's multi-tensor launches at their own cost
    assert {t.op.name for t in opt} == {"optimizer.step", "optimizer.loss_scaling"}
    host_opt = sum(t.op.kernels * t.op.count * t.op.host_s for t in opt)
    assert [t.op.host_s for t in opt if t.op.name == "optimizer.step"] == [
        constant("eager_host_op_s")]
    host_rest = e.host_time_s - host_opt
    assert e.time_s == pytest.approx(max(dev[0], host_rest) + max(dev[1], host_opt))
    assert e.time_s > max(e.device_time_s, e.host_time_s)
    # bf16 has no scaler: under a loop with no host read before the step, one max over it all
    a100 = estimate_speed(m, A100, job.with_(precision="mixed-bf16", engine="fsdp2"),
                          measured=None).step
    assert not a100.sync_before_optimizer and not a100.sync_after_backward
    assert a100.time_s == pytest.approx(max(a100.device_time_s, a100.host_time_s))


def test_eager_attention_scales_and_masks_and_hidden_dropout_is_a_kernel():
    """transformers' eager BERT attention: matmul, / sqrt(d), + mask, softmax, dropout, matmul.
    The scale and the mask read and write the B x H x s x s scores (2 B each under fp16): 4 x 2 B
    per score forward, one multiply (2 x 2 B) backward. Hidden dropout (0.1 in bert-large) after
    the attention and MLP outputs: read and write T x h at 2 B plus a 1-byte mask."""
    m = load_model("bert-large-uncased")
    job = Job(model="bert-large-uncased", mode="train", batch=4, seq=384, attention="eager",
              precision="mixed-fp16")
    e = estimate_speed(m, get_gpu("V100-SXM2-16GB"), job, measured=None)
    ops = {(t.op.name, t.op.phase): t.op for t in e.step.ops}
    scores = 4 * 16 * 384 * 384
    fwd, bwd = ops[("attn.scale_mask", "forward")], ops[("attn.scale_mask", "backward")]
    assert (fwd.bytes, fwd.kernels, fwd.count) == (4 * 2 * scores, 2, 24)
    assert (bwd.bytes, bwd.kernels) == (2 * 2 * scores, 1)
    for name in ("attn.dropout", "mlp.dropout"):
        assert ops[(name, "forward")].bytes == 4 * 384 * 1024 * (2 * 2 + 1)
    # sdpa has no materialized scores; no hidden dropout at inference or without it in the config
    sdpa = estimate_speed(m, A100, job.with_(attention="sdpa"), measured=None)
    assert not any(t.op.name == "attn.scale_mask" for t in sdpa.step.ops)
    llama = estimate_speed(load_model("llama-2-7b"), A100, Job(model="llama-2-7b", mode="train",
                           batch=1, seq=128), measured=None)
    assert not any(t.op.name.endswith(".dropout") for t in llama.step.ops)


def test_volta_and_turing_tensor_cores_run_at_their_own_shares():
    """Markidis et al. 2018: cuBLAS on V100's Tensor Cores reaches 83 of 125 TFLOP/s; DeepBench's
    cuBLAS fp16 GEMMs on T4 (benchmarks/published/deepbench_gemm_fp16.json): large shapes 36-46
    of 65 TFLOP/s, fitted 0.61; fp32 and other generations keep the best-shape default."""
    from gpuplan.compute.device import default_efficiency, device_from_gpu

    eff = default_efficiency(device_from_gpu(get_gpu("V100-SXM2-16GB")))
    assert eff.matmul_fraction("fp16") == pytest.approx(83 / 125, abs=1e-3)
    assert eff.matmul_fraction("fp32") == 0.80 and not eff.measured
    assert "Markidis" in eff.basis["matmul_fp16"]
    t4 = default_efficiency(device_from_gpu(get_gpu("T4")))
    assert t4.matmul_fraction("fp16") == 0.61 and "DeepBench" in t4.basis["matmul_fp16"]
    assert default_efficiency(device_from_gpu(A100)).matmul_fraction("fp16") == 0.80


def _gemm(m: int, n: int, k: int):
    from gpuplan.compute.flops import Op
    return Op(name="mlp.up", op_class="matmul", kind="matmul", phase="forward", count=1,
              flops=2.0 * m * k * n, counted_flops=2.0 * m * k * n,
              bytes=2.0 * (m * k + k * n + m * n), parallel_work=m * n, kernels=1,
              weight_elements=k * n, shape=(1, m, k, n), group="dense")


def test_split_k_gemm_on_turing_pays_its_fixed_cost_by_hand():
    """T4 (40 SMs, 65 TFLOP/s, 320 GB/s), M=2048 N=128 K=2048 (a DeepBench row, 42 us measured):
    16 x 1 tiles < 40, split over K into min(40 // 16, 2048 // 256) = 2 slices -> 32 of 40 SMs
    busy (0.8); work 1,073,741,824 FLOP / (65e12 x 0.61 x 0.8) = 33.85 us, + 16 us of split-K =
    49.85 us; the bytes (2048x2048 + 2048x128 + 2048x128) x 2 = 9,437,184 / (320 GB/s x 0.85) =
    34.70 us. M=512 N=1024 (4 x 8 = 32 tiles < 40) pays it, M=1024 N=1024 (64) does not; Ampere
    and bf16 never (Volta's own: tests/unit/test_splitk_volta.py)."""
    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.compute.efficiency import splitk_fixed_s
    from gpuplan.compute.time import time_ops

    dev = device_from_gpu(get_gpu("T4"))
    t = time_ops([_gemm(2048, 128, 2048)], dev, default_efficiency(dev), "fp16")[0]
    assert t.compute_s == pytest.approx(1073741824 / (65e12 * 0.61 * 0.8) + 16e-6, rel=1e-9)
    assert t.memory_s == pytest.approx(9437184 / (320e9 * 0.85), rel=1e-9)
    assert splitk_fixed_s("Turing", "fp16", 1, 512, 1024, 40) == 16e-6
    assert splitk_fixed_s("Turing", "fp16", 1, 1024, 1024, 40) == 0.0
    assert splitk_fixed_s("Ampere", "fp16", 1, 3072, 128, 108) == 0.0
    assert splitk_fixed_s("Turing", "bf16", 1, 2048, 128, 40) == 0.0


def test_turing_gemm_model_matches_deepbench():
    """T4's shipped pair is the fit's (benchmarks/fit_volta_turing_gemm.py --check), and
    gpuplan's own op timing of every stored T4 DeepBench GEMM is within 7% at the median (the
    Ampere/Hopper default 0.80 before: 28%)."""
    import importlib.util
    import json
    import math
    import statistics

    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.compute.time import time_ops

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    spec = importlib.util.spec_from_file_location("fit_vt", root / "fit_volta_turing_gemm.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    assert fit.main(["--check"]) == 0
    data = json.loads(fit.DATA.read_text())
    for key in ("T4",):
        dev = device_from_gpu(get_gpu(data["sources"][key]["gpu"]))
        eff = default_efficiency(dev)
        errs = [abs(math.log(time_ops([_gemm(r["m"], r["n"], r["k"])], dev, eff, "fp16")[0].time_s
                             / (r["ms"] * 1e-3))) for r in fit.rows_of(data, key)]
        assert len(errs) > 80 and math.exp(statistics.median(errs)) - 1 < 0.07, key


def test_fp16_loss_scaling_passes():
    """fp16 weights + fp32 master (apex O2, Megatron): 12 B per trainable element around the step;
    autocast + GradScaler: unscale_ reads and writes the fp32 gradients (8 B); bf16: none."""
    m = load_model("bert-large-uncased")
    v100 = get_gpu("V100-SXM2-16GB")
    job = Job(model="bert-large-uncased", mode="train", batch=4, seq=384, attention="eager",
              precision="mixed-fp16")
    for prec, per in (("mixed-fp16", 12.0), ("amp-fp16", 8.0)):
        e = estimate_speed(m, v100, job.with_(precision=prec), measured=None)
        ls = [t.op for t in e.step.ops if t.op.name == "optimizer.loss_scaling"]
        assert len(ls) == 1 and ls[0].bytes == pytest.approx(per * e.trainable_params, rel=1e-6)
    e = estimate_speed(m, A100, job.with_(precision="mixed-bf16"), measured=None)
    assert not [t for t in e.step.ops if t.op.name == "optimizer.loss_scaling"]


def test_lamb_runs_apex_fused_lamb_passes():
    """apex FusedLAMB: three l2norms and two stages -- 52 B per fp32 parameter (fused Adam: 28),
    eight launches per multi-tensor group; memory as Adam (two states)."""
    from gpuplan.compute.efficiency import optimizer_cost

    c = optimizer_cost("plain", 2, "foreach", tensors=10, elements=1000, name="lamb")
    per = 4 * (c.param_accesses + c.grad_reads + c.scratch_accesses + 2 * c.state_accesses)
    assert per == 52 and c.kernels == 8 and not c.python_loop
    a = optimizer_cost("plain", 2, "fused", tensors=10, elements=1000)
    assert 4 * (a.param_accesses + a.grad_reads + a.scratch_accesses + 2 * a.state_accesses) == 28


def _layer_ops(runtime: str, precision: str = "mixed-bf16", model_code: str = "transformers"):
    m = load_model("llama-3.1-8b")
    est = estimate_speed(m, A100, Job(model="llama-3.1-8b", mode="train", batch=1, seq=512,
                                      precision=precision, runtime=runtime,
                                      model_code=model_code), measured=None)
    return {t.op.name: t.op for t in est.step.ops if t.op.phase == "forward"
            and t.op.group not in ("embedding", "head", "optimizer")}


def test_eager_chains_move_what_transformers_code_moves():
    # Llama-3.1-8B, 512 tokens, bf16 activations: per element, LlamaRMSNorm in eager moves
    # to(fp32) 2+4, pow 4+4, mean 4, x rsqrt 4+4, to(bf16) 4+2, x weight 2+2 = 36 B (8 kernels);
    # fused, 2+2 = 4 B. apply_rotary_pos_emb: q*cos 2, neg of a half 1, cat 2, *sin 2, add 3 =
    # 10 element accesses of 2 B for q (4096 wide) and k (1024); fused 2. SiLU(gate) * up: 5
    # accesses of 2 B per intermediate element (14336 wide), fused 3.
    eager, fused = _layer_ops("eager"), _layer_ops("compile")
    T, h = 512, 4096
    assert fused["attn.norm"].bytes == 4 * T * h
    assert eager["attn.norm"].bytes == pytest.approx(36 * T * h)
    assert eager["attn.norm"].kernels == 8 and fused["attn.norm"].kernels == 1
    assert fused["attn.rotary"].bytes == 4 * T * (4096 + 1024)
    assert eager["attn.rotary"].bytes == pytest.approx(20 * T * (4096 + 1024))
    assert eager["attn.rotary"].kernels == 10  # five for q, five for k
    assert fused["mlp.act"].bytes == 6 * T * 14336
    assert eager["mlp.act"].bytes == pytest.approx(10 * T * 14336)


def test_torchtune_code_moves_what_its_code_moves():
    # torchtune's RoPE on a bf16 q (4096 wide) and k (1024), per element: x.float() 2+4, four
    # products of a half in fp32 4 x (2+2), difference and sum 2 x (4+2), stack 4+4, type_as 4+2
    # = 48 B in 9 kernels (fused: 2+2 = 4 B). K and V expanded from 8 heads to 32 before the
    # kernel (a copy): read 8 heads, write 32, of 128 each, for K and V -- in eager and compiled.
    T = 512
    eager, fused = _layer_ops("eager", model_code="torchtune"), _layer_ops(
        "compile", model_code="torchtune")
    assert eager["attn.rotary"].bytes == pytest.approx(48 * T * (4096 + 1024))
    assert eager["attn.rotary"].kernels == 18
    assert fused["attn.rotary"].bytes == 4 * T * (4096 + 1024)
    for ops in (eager, fused):
        assert ops["attn.kv_expand"].bytes == 2 * T * 128 * (32 + 8) * 2
    assert "attn.kv_expand" not in _layer_ops("eager")  # transformers passes GQA to SDPA
    fp32 = _layer_ops("eager", precision="fp32", model_code="torchtune")
    assert fp32["attn.rotary"].bytes == pytest.approx(36 * T * (4096 + 1024))  # no casts
    assert fp32["attn.rotary"].kernels == 14


def test_fms_code_moves_what_its_rotary_moves():
    # IBM FMS's RotaryEmbedding.adjusted_qk (foundation-model-stack@464c4ca3) on a bf16 q (4096
    # wide) and k (1024), per element: x.float() 2+4, the (..., D/2, 2, 2) broadcast product
    # reads 4 and writes 2 x 4, its sum reads 8 and writes 4, type_as 4+2 = 36 B in 4 kernels
    # (fused 2+2 = 4 B); fp32: no casts, 4+8 + 8+4 = 24 B in 2 (fused 8 B). The rest as
    # transformers' (no K/V expansion)
    T = 512
    eager, fused = _layer_ops("eager", model_code="fms"), _layer_ops("compile", model_code="fms")
    assert eager["attn.rotary"].bytes == pytest.approx(36 * T * (4096 + 1024))
    assert eager["attn.rotary"].kernels == 8
    assert fused["attn.rotary"].bytes == 4 * T * (4096 + 1024)
    assert "attn.kv_expand" not in eager
    assert eager["attn.norm"].bytes == _layer_ops("eager")["attn.norm"].bytes
    fp32 = _layer_ops("eager", precision="fp32", model_code="fms")
    assert fp32["attn.rotary"].bytes == pytest.approx(24 * T * (4096 + 1024))
    assert fp32["attn.rotary"].kernels == 4


def test_eager_rmsnorm_on_fp32_skips_the_casts():
    # fp32 activations: both casts return the tensor itself; pow 8, mean 4, x rsqrt 8, x weight 8
    eager = _layer_ops("eager", precision="fp32")
    assert eager["attn.norm"].bytes == pytest.approx(28 * 512 * 4096)
    assert eager["attn.norm"].kernels == 6


def test_a_layout_is_timed_as_its_runtime_runs():
    # the micro-batch cost under a TP/PP layout (and in the cluster search) was built from a fresh
    # Job that dropped the runtime: --runtime compile and eager timed the same under --tp
    m = load_model("llama-3.1-8b")
    est = {rt: estimate_speed(m, A100, Job(model="llama-3.1-8b", mode="train", batch=1, seq=2048,
                                           tp=2, gpus=2, runtime=rt), measured=None)
           for rt in ("eager", "compile")}
    assert est["compile"].step_time_s < 0.97 * est["eager"].step_time_s


def test_pipelined_stretches_take_the_longest_path():
    """Kernels issued by the host at an even pace and run by the device in order, both idle at
    the start: the time is max over j of (host time before stretch j + device time from j on)."""
    from gpuplan.compute.step import Phase

    # forward host-bound (3 to issue, 1 to run), backward device-bound (1, 4): the device waits
    # for the forward's issue, then runs the backward: 3 + 4
    assert Phase._pipelined_s([(3e-3, 1e-3), (1e-3, 4e-3)]) == pytest.approx(7e-3)
    # both device-bound: the device's own 3 + 4; both host-bound: the host's 3 + 2 (+0)
    assert Phase._pipelined_s([(1e-3, 3e-3), (1e-3, 4e-3)]) == pytest.approx(7e-3)
    assert Phase._pipelined_s([(3e-3, 1e-3), (2e-3, 1e-3)]) == pytest.approx(5e-3)


def test_each_micro_batch_starts_after_the_device_drained():
    """HF Trainer copies each micro-batch's inputs with a blocking .to(device) (torch Copy.cu:
    memcpy_and_sync), so the host cannot issue micro-batch i+1's forward while micro-batch i's
    backward runs. bert-large, amp-fp16, micro-batch 1 x 512, 4 accumulated, full checkpointing
    on a V100 (the HF docs' ga4-gc-fp16 run): the forward's 32 us a kernel outlasts its kernels,
    so each micro-batch costs its forward's issue plus its backward's device time."""
    m = load_model("bert-large-uncased")
    v100 = get_gpu("V100-SXM2-16GB")
    job = Job(model="bert-large-uncased", mode="train", batch=1, seq=512, grad_accum=4,
              checkpointing="full", precision="amp-fp16", attention="eager")
    e = estimate_speed(m, v100, job, measured=None).step
    assert e.sync_per_micro_step and e.sync_before_optimizer and e.micro_steps == 4
    gap = constant("stream_gap_s")

    def dev(ts):
        return sum(t.total_s + t.op.kernels * t.op.count * gap for t in ts)

    fwd = [t for t in e.ops if t.op.phase == "forward"]
    bwd = [t for t in e.ops if t.op.phase in ("backward", "recompute")]
    opt = [t for t in e.ops if t.op.phase == "optimizer"]
    # no forward op has its own issue cost: eager_host_fwd_s per kernel; recompute is Python
    # forward code (eager_host_fwd_s), backward nodes run from C++ (eager_host_bwd_s)
    assert all(t.op.host_s is None for t in fwd + bwd)
    n_f = sum(t.op.kernels * t.op.count for t in fwd) / 4
    n_r = sum(t.op.kernels * t.op.count for t in bwd if t.op.phase == "recompute") / 4
    n_b = sum(t.op.kernels * t.op.count for t in bwd if t.op.phase == "backward") / 4
    h_f = n_f * constant("eager_host_fwd_s")
    h_b = n_r * constant("eager_host_fwd_s") + n_b * constant("eager_host_bwd_s")
    d_f, d_b = dev(fwd) / 4, dev(bwd) / 4
    assert h_f > d_f and d_b > h_b  # host-bound forward, device-bound backward
    host_opt = sum(t.op.kernels * t.op.count * (t.op.host_s or constant("eager_host_fwd_s"))
                   for t in opt)
    micro = max(d_f + d_b, h_f + d_b, h_f + h_b)
    assert micro == pytest.approx(h_f + d_b)
    assert e.time_s == pytest.approx(4 * micro + max(dev(opt), host_opt))
    # the same job without the waits would hide the forward's issue behind the device
    assert e.time_s > max(dev(fwd + bwd), e.host_time_s - host_opt) + max(dev(opt), host_opt)


def _stretches(e):
    """(host, device) time of the forward+backward and of the optimizer stretch of step ``e``,
    by hand from its ops: eager_host_fwd_s per forward kernel, eager_host_bwd_s per backward
    kernel, an op's own issue cost where it has one; kernels plus the stream gap each."""
    gap = constant("stream_gap_s")

    def host(ts):
        return sum(t.op.kernels * t.op.count * (
            t.op.host_s if t.op.host_s is not None else constant(
                "eager_host_bwd_s" if t.op.phase == "backward" else "eager_host_fwd_s"))
            for t in ts)

    def dev(ts):
        return sum(t.total_s + t.op.kernels * t.op.count * gap for t in ts)

    opt = [t for t in e.ops if t.op.phase == "optimizer"]
    rest = [t for t in e.ops if t.op.phase != "optimizer"]
    return (host(rest), dev(rest)), (host(opt), dev(opt))


def test_trainer_reads_the_loss_after_each_backward():
    """HF Trainer's NaN/inf filter (``torch.isnan(tr_loss_step)``, logging_nan_inf_filter=True by
    default) is a host read after every backward: the device drains before the optimizer, so a
    per-parameter Adafactor loop (24 kernels a tensor, 8 us each from Python) whose issue
    outlasts its kernels is no longer hidden behind the backward. bert-large, fp32, batch 4 x 512
    on a V100 (the HF docs' Adafactor run): the step is the device-bound forward+backward, then
    the optimizer's issue."""
    m = load_model("bert-large-uncased")
    v100 = get_gpu("V100-SXM2-16GB")
    job = Job(model="bert-large-uncased", mode="train", batch=4, seq=512, precision="fp32",
              optimizer="adafactor", attention="eager")
    e = estimate_speed(m, v100, job, measured=None).step
    assert e.sync_after_backward and not e.sync_before_optimizer
    (h_r, d_r), (h_o, d_o) = _stretches(e)
    assert h_r < d_r and h_o > d_o  # device-bound forward+backward, host-bound optimizer
    assert e.time_s == pytest.approx(d_r + h_o)
    # without the read the optimizer's issue would overlap the backward: max(device, host)
    assert e.time_s > max(d_r + d_o, h_r + h_o) * 1.05


def test_a_loss_read_that_exposes_nothing_leaves_the_step_unsplit():
    """The same read before a fused optimizer whose kernels outlast their issue costs nothing:
    the step is max(device, host) exactly (the value and rounding it had without the read)."""
    m = load_model("bert-large-uncased")
    v100 = get_gpu("V100-SXM2-16GB")
    job = Job(model="bert-large-uncased", mode="train", batch=4, seq=512, precision="fp32",
              attention="eager")
    e = estimate_speed(m, v100, job, measured=None, optimizer_impl="fused").step
    assert e.sync_after_backward
    (h_r, d_r), (h_o, d_o) = _stretches(e)
    assert h_r < d_r and h_o < d_o
    assert e.time_s == max(e.device_time_s, e.host_time_s)
    assert e.time_s == pytest.approx(d_r + d_o)


def _train(engine: str, runtime: str = "auto", **kw):
    m = load_model("llama-3.1-8b")
    return estimate_speed(m, get_gpu("H100-SXM-80GB"),
                          Job(model="llama-3.1-8b", mode="train", engine=engine, runtime=runtime,
                              batch=1, seq=512, **kw), measured=None)


def test_megatron_issues_compiles_kernels_at_eager_host_cost():
    """Megatron-Core runs its Transformer Engine modules eagerly from Python (no compiler
    wrapper launches them): its kernels are compile's -- fused, the same count -- but each
    forward kernel costs eager's 32 us on the host, and so does each backward one (TE's
    autograd Functions run their backward in Python: ``python_backward``), so the host time is
    (n_fwd + n_bwd) x 32 us, counted here from the ops."""
    mt = _train("megatron")
    o = mt.step.overheads
    assert o.runtime == "compile"  # the label and the kernels stay the runtime's
    assert (o.host_fwd_s, o.host_bwd_s) == (32e-6, 32e-6)
    assert o.device_gap_s == constant("stream_gap_s")
    n_bwd = sum(t.op.kernels * t.op.count for t in mt.step.ops if t.op.phase == "backward"
                and t.op.host_s is None)
    n_rest = sum(t.op.kernels * t.op.count for t in mt.step.ops if t.op.phase != "backward"
                 and t.op.host_s is None)
    own = sum(t.op.kernels * t.op.count * t.op.host_s for t in mt.step.ops
              if t.op.host_s is not None)
    assert n_bwd > 0
    assert mt.step.host_time_s == pytest.approx((n_rest + n_bwd) * 32e-6 + own, rel=1e-12)
    # torchtitan compiled: the same fusion, Inductor's wrapper launches at 4 us each
    tt = _train("torchtitan", "compile").step.overheads
    assert (tt.runtime, tt.host_fwd_s, tt.host_bwd_s) == ("compile", 4e-6, 4e-6)


def test_python_backward_moves_only_the_backward_host_cost(monkeypatch):
    """Without ``python_backward`` the backward kernels cost autograd's 4 us again and the
    forward's stay at 32 us: the host time falls by n_bwd x (32 - 4) us exactly, no kernel and
    no device time moves."""
    mt = _train("megatron")
    real = step_mod.get_engine
    monkeypatch.setattr(step_mod, "get_engine",
                        lambda name: dc_replace(real(name), python_backward=False))
    base = _train("megatron")
    assert (base.step.overheads.host_fwd_s, base.step.overheads.host_bwd_s) == (32e-6, 4e-6)
    n_bwd = sum(t.op.kernels * t.op.count for t in mt.step.ops if t.op.phase == "backward"
                and t.op.host_s is None)
    assert mt.step.kernels == base.step.kernels
    assert mt.step.device_time_s == pytest.approx(base.step.device_time_s, rel=1e-12)
    assert mt.step.host_time_s - base.step.host_time_s == pytest.approx(n_bwd * 28e-6,
                                                                        rel=1e-9)


def test_megatron_host_cost_moves_no_kernel_and_no_device_time(monkeypatch):
    """The host cost is the only change: the same Job's kernels and device time as compile's
    with its 4 us launches (the profile's host_issue cleared)."""
    mt = _train("megatron")
    real = step_mod.get_engine
    monkeypatch.setattr(step_mod, "get_engine", lambda name: dc_replace(real(name), host_issue=""))
    base = _train("megatron")
    assert base.step.overheads.host_fwd_s == base.step.overheads.host_bwd_s == 4e-6
    assert mt.step.kernels == base.step.kernels
    assert mt.step.device_time_s == pytest.approx(base.step.device_time_s, rel=1e-12)
    assert mt.step.host_time_s > base.step.host_time_s


def _torchtitan_ops(runtime: str, checkpointing: str = "none", **kw):
    m = load_model("llama-3.1-8b")
    est = estimate_speed(m, A100, Job(model="llama-3.1-8b", mode="train", batch=1, seq=512,
                                      engine="torchtitan", runtime=runtime,
                                      checkpointing=checkpointing), measured=None, **kw)
    return est.step.ops


def test_torchtitan_llama_copies_k_and_v_to_every_head_before_sdpa():
    # torchtitan@9dec370 models/llama/model.py repeat_kv: unsqueeze, expand to n_rep = 32 / 8
    # = 4, reshape -- a copy. Per layer at 512 tokens: read K and V at 8 heads of 128, write
    # them at 32: 2 x 512 x 128 x (32 + 8) x 2 B = 10,485,760 B, in eager and compiled (SDPA's
    # inputs are materialized); its backward, autograd's sum_to of expand over the 4 repeats,
    # reads the 32 heads' gradient and writes the 8 heads': the same bytes, one kernel each
    T = 512
    for runtime in ("eager", "compile"):
        ops = _torchtitan_ops(runtime)
        fwd = {t.op.name: t.op for t in ops if t.op.phase == "forward"}
        assert fwd["attn.kv_expand"].bytes == 2 * T * 128 * (32 + 8) * 2 == 10_485_760
        assert fwd["attn.kv_expand"].count == 32  # every layer
        bwd = {t.op.name: t.op for t in ops if t.op.phase == "backward"}
        assert bwd["attn.kv_expand"].bytes == 10_485_760 and bwd["attn.kv_expand"].kernels == 2
    # not on the op policy's save list (mm, SDPA, reduce-scatter): recomputed with the block
    rec = [t.op.name for t in _torchtitan_ops("eager", "selective") if t.op.phase == "recompute"]
    assert "attn.kv_expand" in rec
    # a job through the profile whose code passes the GQA heads to SDPA says so
    none = _torchtitan_ops("eager", sdpa_repeat_kv=False)
    assert not any(t.op.name == "attn.kv_expand" for t in none)


def test_torchtitan_compiles_its_blocks_only():
    # parallelize_llama.py apply_compile @9dec370 compiles each of model.layers: the final
    # RMSNorm runs eager (36 B an element in 8 kernels, as transformers' eager LlamaRMSNorm)
    # while the blocks' norms are fused (4 B, 1 kernel); whole-model compile fuses it too
    T, h = 512, 4096
    fwd = {t.op.name: t.op for t in _torchtitan_ops("compile") if t.op.phase == "forward"}
    assert fwd["final.norm"].bytes == pytest.approx(36 * T * h)
    assert fwd["final.norm"].kernels == 8
    assert fwd["attn.norm"].bytes == 4 * T * h and fwd["attn.norm"].kernels == 1
    m = load_model("llama-3.1-8b")
    whole = estimate_speed(m, A100, Job(model="llama-3.1-8b", mode="train", batch=1, seq=512,
                                        runtime="compile"), measured=None)
    final = next(t.op for t in whole.step.ops if t.op.name == "final.norm"
                 and t.op.phase == "forward")
    assert final.bytes == 4 * T * h and final.kernels == 1


def test_torchtitan_loop_copies_its_inputs_blocking():
    # train.py @9dec370: input_ids.to(device_type), no non_blocking -- a stream synchronize
    # at every step's start (Phase.sync_per_micro_step), as transformers' Trainer
    m = load_model("llama-3.1-8b")
    for engine, synced in (("torchtitan", True), ("transformers", True), ("megatron", False)):
        est = estimate_speed(m, A100, Job(model="llama-3.1-8b", mode="train", batch=1, seq=512,
                                          engine=engine), measured=None)
        assert est.step.sync_per_micro_step is synced, engine


def test_float8_all_gathered_weights_are_not_cast_on_the_compute_stream():
    # torchao@eab345c: with enable_fsdp_float8_all_gather each weight shard is cast inside
    # FSDP2's all-gather copy-in (its own stream) and arrives a Float8Tensor, which
    # Float8Linear.cast_weight_to_float8_t passes through (weight.t()): no fp8.weight_cast on
    # the compute stream. Without it, or on one GPU (nothing gathered), every forward casts.
    from gpuplan.compute.parallel import job_micro_options
    from gpuplan.compute.step import narrow_weights_gathered

    m = load_model("llama-3.1-8b")
    H100 = get_gpu("H100-SXM-80GB")

    def casts(**kw):
        job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=512, engine="torchtitan",
                  precision="fp8-tensorwise", runtime="compile", **kw)
        est = estimate_speed(m, H100, job, measured=None, link="nvlink")
        return [t.op for t in est.step.ops if t.op.name == "fp8.weight_cast"], job

    gathered, job = casts(gpus=8, zero=3, fp8_param_gather=True)
    assert gathered == [] and narrow_weights_gathered(job)
    assert job_micro_options(job, 1)["weights_gathered"] is True
    wide, job16 = casts(gpus=8, zero=3)
    assert len(wide) == 1 and not narrow_weights_gathered(job16)
    # the blocks' linear weights, 7 per layer: 32 x (4096 x 6144 + 4096^2 + 3 x 4096 x 14336)
    n = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    assert wide[0].bytes == n * 5  # dynamic tensorwise: amax read 2 + read 2 + write 1
    single, _ = casts(gpus=1, zero=3, fp8_param_gather=True)
    assert len(single) == 1


def test_gb200_attention_runs_at_the_measured_clock_not_the_datasheet_ratio():
    # GB200 is B200's die at a higher clock: ml-engineering's MAMF table measures its BF16
    # tensor cores at 1,822.0 against B200's 1,745.0 TFLOP/s (1.044), where the datasheet peaks
    # read 2,500 / 2,250 (1.111); the fused attention's GB200 / B200 time ratio is the measured one
    assert attention_clock_share("GB200-NVL72") == \
        pytest.approx((1822.0 / 2500) / (1745.0 / 2250), rel=2e-3)
    assert attention_clock_share("B200-SXM-180GB") == 1.0
    assert attention_clock_share("H100-SXM-80GB") == 1.0
    # one causal forward attention at 8,192 tokens, 32 heads of 128 (Llama 3 8B's), bf16
    flops = 2.0 * 32 * 8192 * 8192 * 256 / 2
    op = Op(name="attn.core", op_class="attention", kind="attention", phase="forward", count=1,
            flops=flops, counted_flops=flops, bytes=4 * 8192 * 4096 * 2,
            parallel_work=32 * 8192 * 8192 // 2, kernels=1, shape=(32, 8192, 128, 8192))
    t = {}
    for name in ("B200-SXM-180GB", "GB200-NVL72"):
        dev = device_from_gpu(get_gpu(name))
        (ot,) = time_ops([op], dev, default_efficiency(dev), "bf16")
        t[name] = ot.total_s
    assert t["B200-SXM-180GB"] / t["GB200-NVL72"] == pytest.approx(1822.0 / 1745.0, rel=3e-3)
