"""Transformer Engine's userbuffers TP overlap has a price of its own (issue 30): ring-exchange
GEMMs launched as TP chunks of ``tokens / TP`` rows (CommOverlapP2PBase::split_overlap_ag /
split_overlap_rs), the ring reduce-scatter's reduce kernel and its last chunk's send after the
GEMMs, and TE's default ``pipeline`` reduce-scatter on ``sm_count - 16`` SMs in ``N / 4``
launches; and its P2P context parallelism merges each step's attention output and gradients
(AttnFuncWithCPAndKVP2P). The figures below are tile and byte arithmetic by hand (128 x 128
output tiles)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from gpuplan.compute import parallel
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.parallel import (UB_RING_RS_RECIPES, MicroCost, layout_time, micro_cost,
                                      te_cp_merge_bytes, ub_split_s)
from gpuplan.compute.step import train_precision
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import collective_time, topology_for
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout

H100 = NS(sm_count=132, memory_bandwidth=3.35e12)
EFF = NS(memory=0.8, comm=0.8)
PREC_ACT = 2  # FP8-CS keeps 16-bit activations between the blocks' GEMMs


def _t(name, phase, shape, compute=1e-3, memory=1e-4, count=1):
    op = NS(kind="matmul", name=name, phase=phase, shape=shape, groups=1, count=count)
    return NS(op=op, compute_s=compute, memory_s=memory)


def test_qkv_in_tp_chunks_by_hand():
    # Llama 3.1 405B at TP 8, CP 2: 4,096 tokens, QKV 16,384 -> 2,304 on this rank.
    # whole: 32 x 18 = 576 tiles, 5 waves of 132: 576 / 660 busy; a chunk of 512 rows:
    # 4 x 18 = 72 tiles, one wave: 72 / 132 busy; 1 ms x (576/660) / (72/132) = 1.6 ms
    ops = [_t("attn.qkv", "forward", (1, 4096, 16384, 2304))]
    assert ub_split_s(ops, 1, 8, H100, EFF, 2) == pytest.approx(0.6e-3, rel=1e-9)
    # two layers' worth of the op over two layers: the same per layer
    ops = [_t("attn.qkv", "forward", (1, 4096, 16384, 2304), count=2)]
    assert ub_split_s(ops, 2, 8, H100, EFF, 2) == pytest.approx(0.6e-3, rel=1e-9)
    assert ub_split_s(ops, 2, 1, H100, EFF, 2) == 0.0  # no TP, no ring


def test_ring_reduce_scatter_reduce_kernel_by_hand():
    # attention out 2,048 -> 16,384: whole 32 x 128 = 4,096 tiles in 32 waves, a 512-row chunk
    # 512 tiles in 4 waves: both 4096/4224 busy, so the GEMM costs nothing more; the reduce
    # reads 8 chunks of 512 x 16,384 bf16 and writes one: 9 x 16.78 MB at 3.35 TB/s x 0.8
    ops = [_t("attn.out", "forward", (1, 4096, 2048, 16384))]
    want = 9 * 512 * 16384 * 2 / (3.35e12 * 0.8)
    assert ub_split_s(ops, 1, 8, H100, EFF, 2) == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(56.3e-6, rel=1e-3)


def test_pipeline_reduce_scatter_by_hand():
    # TE's default: 4 launches of 4,096 columns on 116 SMs: 32 x 32 = 1,024 tiles, 9 waves of
    # 116 (1,024 / 1,044 busy) against the whole's 4,096 / 4,224; 1 ms x 0.98864 x 132/116 =
    # 1.125 ms; no reduce kernel
    ops = [_t("attn.out", "forward", (1, 4096, 2048, 16384))]
    assert ub_split_s(ops, 1, 8, H100, EFF, 2, pipeline_rs=True) == \
        pytest.approx(0.125e-3, rel=1e-9)


def test_backward_only_the_ring_dgrads():
    # QKV's backward runs bulk overlaps (whole GEMMs): nothing; MLP down's dgrad (half the op)
    # is a ring all-gather: its output 4,096 x 6,656 (the forward's K), K = 16,384.
    # whole 32 x 52 = 1,664 tiles, 13 waves (1,716): 0.96970; chunk 4 x 52 = 208, 2 waves
    # (264): 0.78788; 0.5 ms x (0.96970 / 0.78788 - 1) = 0.11538 ms
    qkv = [_t("attn.qkv", "backward", (1, 4096, 16384, 2304))]
    assert ub_split_s(qkv, 1, 8, H100, EFF, 2) == 0.0
    down = [_t("mlp.down", "backward", (1, 4096, 6656, 16384))]
    want = 0.5e-3 * ((1664 / 1716) / (208 / 264) - 1)
    assert ub_split_s(down, 1, 8, H100, EFF, 2) == pytest.approx(want, rel=1e-9)


def _cost(**kw):
    return MicroCost(layers=8, layer_fwd_s=0.01, layer_bwd_s=0.02, attn_fwd_s=0.002,
                     attn_bwd_s=0.004, other_s=0.0, hardware_flops=1e12, **kw)


def _tp_comm(cost, tp_overlap=True, sp=True):
    gpu = get_gpu("H100-SXM-80GB")
    device = device_from_gpu(gpu)
    eff = default_efficiency(device)
    prec = train_precision("fp8-current", device, False)
    assert prec.act == PREC_ACT
    lay = Layout(tp=8, sequence_parallel=sp, batch=1, seq=4096, micro_batches=4)
    topo = topology_for(gpu, gpus_per_node=8)
    t = layout_time(load_model("llama-3.1-8b").architecture, cost, lay, topo, device=device, eff=eff,
                    prec=prec, params=8_000_000_000, flops_per_token=1.0,
                    state_bytes_per_param=12.0, tp_overlap=tp_overlap)
    return t, topo, eff


def test_the_layout_charges_it_under_the_overlap_only():
    """Under userbuffers with SP the exposed TP time grows by the layer's ub_split_s and, per
    forward reduce-scatter (2 a layer), the last chunk's send (ring) or the last of 4 chunks'
    reduce-scatter (pipeline); the collectives themselves hide (0.9 of a 30 ms layer)."""
    base, topo, eff = _tp_comm(_cost())
    ring, _, _ = _tp_comm(_cost(ub_split_s=1e-4))
    pipe, _, _ = _tp_comm(_cost(ub_split_s=1e-4, ub_pipeline_rs=True))
    m, layers = 4, base.stage_layers
    # one micro-batch's activations: 1 x 4,096 tokens x 4,096 hidden x the recipe's act bytes
    act_bytes = 4096 * 4096 * PREC_ACT
    send = collective_time("send-recv", act_bytes / 8, 2, topo, efficiency=eff.comm)
    rs = collective_time("reduce-scatter", act_bytes / 4, 8, topo, efficiency=eff.comm)
    assert ring.tp_comm_s - base.tp_comm_s == pytest.approx(m * layers * 1e-4, rel=1e-9)
    assert pipe.tp_comm_s - ring.tp_comm_s == pytest.approx(m * layers * 2 * (rs - send),
                                                            rel=1e-9)
    off, _, _ = _tp_comm(_cost(ub_split_s=1e-4), tp_overlap=False)
    plain, _, _ = _tp_comm(_cost(), tp_overlap=False)
    assert off.tp_comm_s == pytest.approx(plain.tp_comm_s, rel=1e-12)


def test_the_recipes_that_ring_exchange_the_reduce_scatters():
    """Megatron-Bridge's FP8-CS / FP8-MX configs ring-exchange proj_fprop and fc2_fprop; BF16
    (TE's default) and NeMo 24.07's delayed-scaling configs run the pipeline method."""
    assert set(UB_RING_RS_RECIPES) == {"fp8-current", "mxfp8", "nvfp4"}
    gpu = get_gpu("H100-SXM-80GB")
    device = device_from_gpu(gpu)
    eff = default_efficiency(device)
    arch = load_model("llama-3.1-8b").architecture
    for recipe, pipeline in (("fp8-current", False), ("fp8-delayed", True),
                             ("mixed-bf16", True)):
        prec = train_precision(recipe, device, False)
        c = micro_cost(arch, device, eff, prec, tp=8, cp=1, batch=1, seq=4096,
                       checkpointing="none", attention="sdpa", engine="megatron")
        assert c.ub_pipeline_rs is pipeline, recipe
        assert c.ub_split_s > 0, recipe


def test_te_cp_merge_bytes_by_hand():
    """TE's P2P CP merges for Llama 3.1 405B at TP 8, CP 2, 4,096 tokens a rank: 16 query heads
    and 1 K/V head of 128 on the rank. Forward: the first step rescaled (2 x 2 B), the second
    step added on all rows at rank 1 and half the rows at rank 0 (3 x 2 B x 1.5 / 2 mean):
    2 x 2 + 4.5 x 2 = 13 B a query element; backward the same over dQ, dK and dV."""
    arch = NS(num_heads=16, num_kv_heads=1, head_dim=128)
    q, kv = 4096 * 16 * 128, 2 * 4096 * 1 * 128
    fwd, bwd = te_cp_merge_bytes(arch, 1, 4096, 2, 2)
    assert fwd == pytest.approx(13 * q, rel=1e-12)
    assert bwd == pytest.approx(13 * (q + kv), rel=1e-12)
    # CP 4: 4 + 4.5 x 2 x 3 = 31 B; CP 1 would be the first step's 4 B only
    assert te_cp_merge_bytes(arch, 1, 4096, 4, 2)[0] == pytest.approx(31 * q, rel=1e-12)


def test_megatron_cp_step_carries_the_merges(monkeypatch):
    """Under megatron (cp_rotate p2p) a CP 2 micro-batch's layer is longer by exactly the merge
    bytes at the memory rate than the same build with the merges taken out."""
    gpu = get_gpu("H100-SXM-80GB")
    device = device_from_gpu(gpu)
    eff = default_efficiency(device)
    prec = train_precision("fp8-current", device, False)
    arch = load_model("llama-3.1-8b").architecture
    kw = dict(tp=1, cp=2, batch=1, seq=8192, checkpointing="none", attention="sdpa",
              engine="megatron")
    with_cp = micro_cost(arch, device, eff, prec, **kw)
    fwd, bwd = te_cp_merge_bytes(arch, 1, 4096, 2, prec.act)
    monkeypatch.setattr(parallel, "te_cp_merge_bytes", lambda *a: (0.0, 0.0))
    bare = micro_cost(arch, device, eff, prec, **kw)
    rate = device.memory_bandwidth * eff.memory
    assert with_cp.layer_fwd_s - bare.layer_fwd_s == pytest.approx(fwd / rate, rel=1e-9)
    assert with_cp.layer_bwd_s - bare.layer_bwd_s == pytest.approx(bwd / rate, rel=1e-9)
    # Llama 3.1 8B: 32 heads of 128, 8 K/V heads: 13 B x 4,096 x 4,096 forward
    assert fwd == pytest.approx(13 * 4096 * 32 * 128, rel=1e-12)
