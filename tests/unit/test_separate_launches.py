"""compute/efficiency.separate_launches_s: a matmul run as separate GEMM launches over N (unfused
Q/K/V projections, gate and up) tiles and waves over the SMs launch by launch -- by hand."""

from __future__ import annotations

import pytest

from gpuplan.compute.efficiency import separate_launches_s
from gpuplan.compute.flops import StepShape, build_forward_ops, run_form
from gpuplan.models import load_model


def test_one_launch_is_the_whole_product():
    # 2048 x 4096 output on 132 SMs: 16 x 32 = 512 tiles, 4 waves of 132 = 528: 512 / 528 busy
    flops, rate = 2.0 * 2048 * 4096 * 4096, 1e15
    work, fixed = separate_launches_s(flops, (1, 2048, 4096, 4096), (), rate,
                                      architecture="hopper", dtype="bf16", sm_count=132)
    assert work == pytest.approx(flops / (rate * 512 / 528), rel=1e-12) and fixed == 0.0


def test_gqa_projections_each_tile_on_their_own():
    # Llama-3-8B's q (4096), k (1024), v (1024) over 1024 tokens on 132 SMs: q is 8 x 32 = 256
    # tiles (2 waves: 256 / 264 busy); k and v are 8 x 8 = 64 tiles each, under one wave, so
    # split over K = 4096 into min(132 // 64, 4096 // 256) = 2 slices: 128 of 132 busy
    n, m, k = 6144, 1024, 4096
    flops, rate = 2.0 * m * k * n, 1e15
    work, _ = separate_launches_s(flops, (1, m, k, n), (4096 / n, 1024 / n, 1024 / n), rate,
                                  architecture="hopper", dtype="bf16", sm_count=132)
    q = flops * 4096 / n / (rate * 256 / 264)
    kv = 2 * flops * 1024 / n / (rate * 128 / 132)
    assert work == pytest.approx(q + kv, rel=1e-12)
    # fused, the 8 x 48 = 384 tiles take 3 waves of 132 = 396: busy 384 / 396 = 32 / 33, as
    # each launch above (256 / 264, 128 / 132) -- at this size the split costs nothing
    fused, _ = separate_launches_s(flops, (1, m, k, n), (), rate, architecture="hopper",
                                   dtype="bf16", sm_count=132)
    assert fused == pytest.approx(flops / (rate * 384 / 396), rel=1e-12)
    assert fused == pytest.approx(work, rel=1e-12)


def test_each_split_k_launch_pays_turings_fixed_cost():
    # T4 (40 SMs): two 512 x 1024 launches of 4 x 8 = 32 tiles each, under one wave: split-K,
    # 16 us each (efficiency.splitk_fixed_turing_s, DeepBench's T4 fit); fused, 4 x 16 = 64 tiles
    # fill the SMs and pay none
    flops = 2.0 * 512 * 1024 * 2048
    _, fixed = separate_launches_s(flops, (1, 512, 1024, 2048), (0.5, 0.5), 65e12 * 0.61,
                                   architecture="turing", dtype="fp16", sm_count=40)
    assert fixed == pytest.approx(2 * 16e-6)
    _, fused = separate_launches_s(flops, (1, 512, 1024, 2048), (), 65e12 * 0.61,
                                   architecture="turing", dtype="fp16", sm_count=40)
    assert fused == 0.0


@pytest.mark.parametrize("engine,split", [("transformers", True), ("torchtitan", True),
                                          ("megatron", False), ("vllm", False)])
def test_the_engine_decides_whether_projections_are_separate(engine, split):
    # Llama-3.2-1B: 32 query heads, 8 KV heads of 64 -- q 2048, k and v 512 of 3072; transformers
    # and torchtitan keep q/k/v and gate/up as separate nn.Linear, Megatron-Core (linear_qkv,
    # linear_fc1) and vLLM (QKVParallelLinear, MergedColumnParallelLinear) fuse them
    arch = load_model("llama-3.2-1b").architecture
    ops = build_forward_ops(arch, StepShape(batch=1, q_len=512, kv_len=512, train=False),
                            act_bytes=2, weight_bytes=2,
                            form=run_form(arch, engine, decode=False))
    qkv = next(o for o in ops if o.name == "attn.qkv")
    gate_up = next(o for o in ops if o.name == "mlp.gate_up")
    # the launch count: Megatron-Core's linear_qkv / linear_fc1 are one GEMM each, reading the
    # input once (ONE_LAUNCH_PROJECTIONS); the other engines keep the architecture's count
    one = engine == "megatron"
    assert (qkv.kernels, gate_up.kernels) == ((1, 1) if one else (3, 2))
    # bytes: the input (512 x 2048 x 2 B) read 3 / 2 times, or once
    reads = 512 * 2048 * 2
    assert qkv.bytes == (1 if one else 3) * reads + 2048 * 3072 * 2 + 512 * 3072 * 2
    assert gate_up.bytes == (1 if one else 2) * reads + 2048 * 16384 * 2 + 512 * 16384 * 2
    assert qkv.launch_shares == ((2048 / 3072, 512 / 3072, 512 / 3072) if split else ())
    assert gate_up.launch_shares == ((0.5, 0.5) if split else ())
