"""PyTorch's AsyncTP and context parallel as torchtitan runs them (compute/parallel.py):
hand-computed exposures and byte counts from the mechanisms' own code (issue 31)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import (MicroCost, async_tp_exposed_s, sdpa_kv_heads,
                                      torch_cp_exposed_s, torch_cp_merge_bytes,
                                      torch_cp_traced)
from gpuplan.engines.profiles import get_engine
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import collective_time, topology_for
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout

H100 = get_gpu("H100-SXM-80GB")
TOPO = topology_for(H100)


class _Eff:  # only the link share is read by the exposure functions
    comm = 0.8


def _cost(fwd=(), bwd=(), attn_fwd=0.0, attn_bwd=0.0) -> MicroCost:
    return MicroCost(layers=1, layer_fwd_s=1.0, layer_bwd_s=2.0, attn_fwd_s=attn_fwd,
                     attn_bwd_s=attn_bwd, other_s=0.0, hardware_flops=0.0,
                     tp_gemm_fwd_s=fwd, tp_gemm_bwd_s=bwd)


def test_async_tp_hides_each_collective_under_its_own_gemm_only():
    lay = Layout(tp=8, sequence_parallel=True, batch=1, seq=8192)
    nbytes = 1 * 8192 * 8192 * 2
    ag = collective_time("all-gather", nbytes, 8, TOPO, efficiency=0.8)
    rs = collective_time("reduce-scatter", nbytes, 8, TOPO, efficiency=0.8)
    # windows: none; 8/7 of the RS (hides it all); half the AG x 8/7 (hides half); huge
    fwd = (0.0, rs * 8 / 7, ag * 8 / 7 / 2, 10.0)
    # exposed = max(0, c - g 7/8): ag + 0 + ag/2 + 0
    want_pass = ag + ag / 2
    got = async_tp_exposed_s(_cost(fwd=fwd, bwd=fwd), lay, TOPO, _Eff(), nbytes)
    assert got == pytest.approx(2 * want_pass)  # forward + backward, no recompute
    full = Layout(tp=8, sequence_parallel=True, batch=1, seq=8192, checkpointing="full")
    assert async_tp_exposed_s(_cost(fwd=fwd, bwd=fwd), full, TOPO, _Eff(), nbytes) == \
        pytest.approx(3 * want_pass)  # the recompute repeats the forward's four
    # no GEMMs beside them: every collective exposed, = two all-reduces' worth per pass
    assert async_tp_exposed_s(_cost(), lay, TOPO, _Eff(), nbytes) == pytest.approx(
        2 * (2 * ag + 2 * rs))


def test_torch_cp_allgather_hides_under_step_zero_only():
    lay = Layout(cp=4, batch=1, seq=4 * 8192)
    kv = 1 * 8192 * 2 * 8 * 128 * 2
    gather = collective_time("all-gather", 4 * kv, 4, TOPO, efficiency=0.8)
    dkv = collective_time("send-recv", kv * 2, 2, TOPO, efficiency=0.8)  # fp32 grads: 2x bf16
    # attention: forward 4 steps of gather/2 each; backward 4 steps of 2 dkv each
    cost = _cost(attn_fwd=4 * gather / 2, attn_bwd=4 * 2 * dkv)
    # forward: gather - gather/2; backward: gather hidden iff 2 dkv >= gather, the 3 middle
    # dKV passes hidden (dkv < 2 dkv), the last exposed
    want = gather / 2 + max(0.0, gather - 2 * dkv) + dkv
    assert torch_cp_exposed_s(cost, lay, TOPO, _Eff(), kv, 2) == pytest.approx(want)


def test_torch_cp_merge_bytes_by_hand():
    arch = load_model("llama-3.1-8b").architecture  # 32 heads, 8 KV heads, head dim 128
    assert (arch.num_heads, arch.num_kv_heads, arch.head_dim) == (32, 8, 128)
    e = 32 * 1024 * 128       # output elements: heads x tokens x head dim
    k = 2 * 8 * 1024 * 128    # K and V elements
    fwd, bwd = torch_cp_merge_bytes(arch, 1, 1024, 4, 2)
    # forward: the merges' 126 B/E; K and V made contiguous (read 2 + write 2) and cat for the
    # rotater before each of the 3 later steps (4 each): 16 B/K
    assert fwd == pytest.approx(e * (6 + 3 * 38 + 6) + k * (4 + 3 * 4))
    # backward: K and V made contiguous again (4 B/K) before the accumulators' 4 + 10 + 75 + 6;
    # each of the 3 later flash backward calls reads dO and O (2 + 2), clears the fp32 dQ
    # accumulator (4), reads it back (4) and writes dQ (2): 14 B/E more a step
    assert bwd == pytest.approx(e * (4 + 10 + 3 * (10 + 14) + 6)
                                + k * (4 + 4 + 10 + 3 * 25 + 6))
    # K and V repeated to the 32 query heads (torchtitan's repeat_kv): 4x the K/V terms only
    k32 = 2 * 32 * 1024 * 128
    fwd32, bwd32 = torch_cp_merge_bytes(arch, 1, 1024, 4, 2, kv_heads=32)
    assert fwd32 - fwd == pytest.approx((k32 - k) * 16)
    assert bwd32 - bwd == pytest.approx((k32 - k) * 99)


def test_sdpa_kv_heads_follow_the_profile():
    arch = load_model("llama-3.1-8b").architecture
    assert sdpa_kv_heads(arch, "megatron") == 8
    # torchtitan@9dec370 models/llama/model.py: keys = repeat_kv(xk, n_rep) before SDPA, so
    # its context parallel sees the 32 query heads of K and V, not the 8 KV heads
    assert get_engine("torchtitan").sdpa_repeat_kv
    assert sdpa_kv_heads(arch, "torchtitan") == 32
    # a job's own code says otherwise either way
    assert sdpa_kv_heads(arch, "torchtitan", False) == 8
    assert sdpa_kv_heads(arch, "megatron", True) == 32


def test_repeated_kv_moves_the_merges_kv_terms_and_the_copy():
    # one micro-batch of Llama 3.1 8B at CP 4 under torchtitan (s_local 8192): the merges'
    # bytes on K and V (torch_cp_merge_bytes: forward 4 B/K x CP, backward 24 + 25 (CP - 1)
    # B/K with 16-bit K and V) grow with the 32 repeated heads against the 8 KV heads; the
    # recompute under full checkpointing merges the forward's once more. The repeat itself is a
    # copy (compute.step.expands_kv): read 8 heads, write 32, of K and V, 2 kernels; its
    # backward the sum over the repeats, the same bytes in 2 kernels; recomputed under full
    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.compute.efficiency import constant
    from gpuplan.compute.parallel import micro_costs
    from gpuplan.compute.step import train_precision

    arch = load_model("llama-3.1-8b").architecture
    device = device_from_gpu(H100)
    eff = default_efficiency(device)
    prec = train_precision("mixed-bf16", device, False)
    kw = dict(tp=1, cp=4, batch=1, seq=4 * 8192, attention="sdpa", engine="torchtitan")
    rep, gqa = micro_costs(arch, device, eff, prec, **kw), micro_costs(
        arch, device, eff, prec, **kw, repeat_kv=False)
    dk = 1 * 2 * (32 - 8) * 8192 * 128  # K and V elements more, a layer
    rate = device.memory_bandwidth * eff.memory
    fwd_b, bwd_b = 4 * 4 * dk, (24 + 25 * 3) * dk
    copy_b, gap = 2 * 8192 * 128 * (32 + 8) * 2, constant("stream_gap_s")
    copy_s = copy_b / rate + 2 * gap
    for level in ("none", "full"):
        assert rep[level].layer_fwd_s - gqa[level].layer_fwd_s == pytest.approx(
            fwd_b / rate + copy_s)
        again = fwd_b / rate + copy_s if level == "full" else 0.0
        assert rep[level].layer_bwd_s - gqa[level].layer_bwd_s == pytest.approx(
            bwd_b / rate + copy_s + again)
        assert rep[level].attn_fwd_s == gqa[level].attn_fwd_s  # the kernels' work is the same


def test_repeated_kv_gathers_the_query_heads_kv():
    # Llama 3.1 405B at TP 8 (16 query heads, 1 KV head a rank), CP 8 over the nodes (the CP
    # group strides the 8 TP ranks of a node): torchtitan's all-gather moves 8 x 16 heads of
    # K and V, the 8B-to-405B rows' gap; the Llama 3 paper's GQA all-gather 8 x 1
    from gpuplan.compute.parallel import _comm_per_micro_batch

    arch = load_model("llama-3.1-405b").architecture
    lay = Layout(tp=8, cp=8, batch=1, seq=8 * 32768, sequence_parallel=True,
                 checkpointing="full")
    cost = _cost(attn_fwd=0.1, attn_bwd=0.4)
    kv16 = 1 * 32768 * 2 * (128 // 8) * 128 * 2  # 268 MB a rank
    kv1 = 1 * 32768 * 2 * (8 // 8) * 128 * 2
    for repeat, kv in ((True, kv16), (False, kv1)):
        _, cp, _ = _comm_per_micro_batch(arch, cost, lay, TOPO, _Eff(), 2, 1,
                                          tp_overlap=False, cp_rotate="allgather",
                                          repeat_kv=repeat)
        assert cp == pytest.approx(torch_cp_exposed_s(cost, lay, TOPO, _Eff(), kv, 2))
    # over the 50 GB/s network the 16-head gather outlasts one of the 8 forward steps
    gather = collective_time("all-gather", 8 * kv16, 8, TOPO, stride=8, efficiency=0.8)
    assert gather > 0.1 / 8


def test_engines_name_their_mechanisms():
    assert get_engine("torchtitan").tp_overlap_kind == "async-tp"
    assert get_engine("torchtitan").cp_rotate == "allgather"
    assert get_engine("megatron").tp_overlap_kind == "userbuffers"
    assert get_engine("megatron").cp_rotate == "p2p"


def test_async_tp_gains_less_than_userbuffers_on_a_70b_layout():
    # the same TP8 layout: Megatron's overlap hides (nearly) all of TP; AsyncTP only what each
    # collective's GEMM covers, so its step is longer but shorter than no overlap at all
    model = load_model("llama-3.1-70b")
    job = dict(model="llama-3.1-70b", mode="train", tp=8, sequence_parallel=True, batch=2,
               seq=8192, precision="mixed-bf16", checkpointing="full", gpus=8)
    t = {}
    for engine in ("torchtitan", "megatron"):
        for ov in (False, True):
            est = estimate_speed(model, H100, Job(**job, engine=engine), tp_overlap=ov)
            t[engine, ov] = est.step_time_s
    assert t["torchtitan", False] > t["torchtitan", True] > t["megatron", True] * 0.999


def test_float8_tp_gathers_one_byte_reduce_scatters_two():
    # torchao's Float8 TP styles (torchtitan 9dec370 apply_tp with float8 on): the all-gather
    # moves e4m3 / e5m2 (1 B), the reduce-scatter bf16 (2 B). Llama 3.1 70B's layer input at
    # TP 8: 16 x 8192 tokens x 8192 hidden x 2 B = 2.15 GB
    from gpuplan.compute.parallel import engine_layout_options, tp_collectives_s
    nbytes = 16 * 8192 * 8192 * 2
    ag = collective_time("all-gather", nbytes, 8, TOPO, efficiency=0.8)
    rs = collective_time("reduce-scatter", nbytes, 8, TOPO, efficiency=0.8)
    ag8 = collective_time("all-gather", nbytes / 2, 8, TOPO, efficiency=0.8)
    # as before without narrow gathers: one all-reduce
    assert tp_collectives_s(nbytes, 8, TOPO, _Eff()) == pytest.approx(
        collective_time("all-reduce", nbytes, 8, TOPO, efficiency=0.8))
    assert tp_collectives_s(nbytes, 8, TOPO, _Eff(), nbytes / 2) == pytest.approx(rs + ag8)
    # a 2 GB ring is bandwidth-bound: half the bytes, half the time (to 1%), so the pair reads
    # (1 + 1/2) / 2 = 0.75 of the bf16 pair
    assert ag8 == pytest.approx(ag / 2, rel=0.01)
    assert (rs + ag8) / (rs + ag) == pytest.approx(0.75, rel=0.01)
    # AsyncTP with no GEMM beside them: forward (ag8, rs, ag8, rs), backward (rs, ag8, rs, ag8)
    lay = Layout(tp=8, sequence_parallel=True, batch=16, seq=8192)
    assert async_tp_exposed_s(_cost(), lay, TOPO, _Eff(), nbytes, nbytes / 2) == pytest.approx(
        2 * (2 * ag8 + 2 * rs))
    # backward windows: only the dgrad beside an all-gather (index 1, 3) hides it
    bwd = (0.0, ag8 * 8 / 7, 0.0, ag8 * 8 / 7)
    assert async_tp_exposed_s(_cost(bwd=bwd), lay, TOPO, _Eff(), nbytes, nbytes / 2) == \
        pytest.approx((2 * ag8 + 2 * rs) + 2 * rs)
    # the profile's fact: torchtitan under its tensor-wise Float8 only
    assert engine_layout_options("torchtitan", "fp8-tensorwise")["tp_gather_bytes"] == 1.0
    assert engine_layout_options("torchtitan", "mixed-bf16")["tp_gather_bytes"] is None
    assert engine_layout_options("megatron", "fp8-tensorwise")["tp_gather_bytes"] is None


def test_torch_cp_traced_only_under_torchtitans_compiled_blocks():
    # torchtitan@9dec370 apply_compile: torch.compile(transformer_block, fullgraph=True), the
    # SDPA (the ring under context_parallel) inside; eager runs it outside any graph
    assert torch_cp_traced("torchtitan", "compile")
    assert not torch_cp_traced("torchtitan", "eager")
    assert not torch_cp_traced("megatron", "compile")  # Transformer Engine's P2P ring


def test_traced_torch_cp_waits_for_every_exchange():
    # traced, each functional collective is waited for where it is issued: the forward's,
    # the recompute's and the backward's all-gathers and all 4 K/V-gradient exchanges exposed,
    # however long the attention beside them
    lay = Layout(cp=4, batch=1, seq=4 * 8192, checkpointing="full")
    kv = 1 * 8192 * 2 * 8 * 128 * 2
    gather = collective_time("all-gather", 4 * kv, 4, TOPO, efficiency=0.8)
    dkv = collective_time("send-recv", kv * 2, 2, TOPO, efficiency=0.8)
    cost = replace(_cost(attn_fwd=10.0, attn_bwd=20.0), cp_traced=True)
    assert torch_cp_exposed_s(cost, lay, TOPO, _Eff(), kv, 2) == pytest.approx(
        3 * gather + 4 * dkv)
    eager = torch_cp_exposed_s(replace(cost, cp_traced=False), lay, TOPO, _Eff(), kv, 2)
    assert eager == pytest.approx(dkv)  # all hidden but the last gradient exchange
    none = Layout(cp=4, batch=1, seq=4 * 8192)
    assert torch_cp_exposed_s(cost, none, TOPO, _Eff(), kv, 2) == pytest.approx(
        2 * gather + 4 * dkv)


def test_traced_torch_cp_merge_bytes_by_hand():
    arch = load_model("llama-3.1-8b").architecture
    e = 32 * 1024 * 128
    k = 2 * 8 * 1024 * 128
    fwd, bwd = torch_cp_merge_bytes(arch, 1, 1024, 4, 2, traced=True)
    # forward: 3 fused merges, each reading out (4) and the step's output (2) and writing out
    # (4), the first reading step 0's bf16 output (2, not 4), the last writing bf16 (2, not 4):
    # 30 - 4 = 26 B/E; K and V: contiguous (4) and the one live cat before the all-gather (4)
    assert fwd == pytest.approx(e * 26 + k * 8)
    # backward, E: step 0's gradient into fresh fp32 accumulators (2 + 4), 3 later steps' dQ
    # adds (10) and flash passes (14), the cast back (6); K: contiguous (4), step 0's (6),
    # 3 later fused update-and-cat kernels (4 + 1 + 4), the one live rotater cat (4), the
    # cast back (6)
    assert bwd == pytest.approx(e * (6 + 3 * (10 + 14) + 6) + k * (4 + 6 + 3 * 9 + 4 + 6))
    _, eager_bwd = torch_cp_merge_bytes(arch, 1, 1024, 4, 2)
    assert bwd < eager_bwd
    # CP 2: one fused merge reading two bf16 outputs and writing bf16: 6 B/E
    fwd2, _ = torch_cp_merge_bytes(arch, 1, 1024, 2, 2, traced=True)
    assert fwd2 == pytest.approx(e * 6 + k * 8)


def test_compiled_torchtitan_micro_costs_carry_the_traced_ring():
    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.compute.parallel import micro_costs
    from gpuplan.compute.step import train_precision

    arch = load_model("llama-3.1-8b").architecture
    device = device_from_gpu(H100)
    eff = default_efficiency(device)
    prec = train_precision("mixed-bf16", device, False)
    kw = dict(tp=1, cp=4, batch=1, seq=4 * 8192, attention="sdpa", engine="torchtitan")
    assert micro_costs(arch, device, eff, prec, runtime="compile", **kw)["full"].cp_traced
    assert not micro_costs(arch, device, eff, prec, runtime="eager", **kw)["full"].cp_traced
