"""The layout time model (compute/parallel.py), the topology (hardware/topology.py) and the
cluster search: hand-computed values from NCCL's formulas and the pipeline-bubble fractions."""

from __future__ import annotations

import json
import math

import pytest

from gpuplan.cli import main
from gpuplan.cluster import cluster_search
from gpuplan.compute import estimate_speed
from gpuplan.engines.zero3 import SERIAL_GATHER_BUS_BPS
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import (collective_protocol, collective_time, parse_inter_node,
                                       topology_for)
from gpuplan.job import Job
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")


@pytest.mark.parametrize("text,gbit", [("ib-400", 400), ("roce-200", 200), ("eth-100", 100),
                                       ("100Gb/s", 100), ("50GB/s", 400), ("400", 400)])
def test_inter_node_rates(text, gbit):
    assert parse_inter_node(text).bandwidth == pytest.approx(gbit / 8 * 1e9)


@pytest.mark.parametrize("bad", ["ib-", "fast", "ib-0", "-5Gb/s"])
def test_bad_inter_node_is_one_line(bad):
    with pytest.raises(InputError, match="inter_node"):
        parse_inter_node(bad)


def test_default_topology_is_stated():
    t = topology_for(H100)
    assert t.gpus_per_node == 8 and t.intra.bandwidth == 450e9  # 900 GB/s both ways / 2
    assert "400 Gb/s" in t.stated and "assumed" in t.stated
    assert "assumed" not in topology_for(H100, inter_node="ib-400").stated


def test_ring_all_reduce_in_a_node_by_hand():
    # NCCL tuning.cc: base 8.4 us + 2(n-1) NVLink hops x 3.4 us; bytes x 2(n-1)/n / bus bandwidth
    t = topology_for(H100)
    want = 8.4e-6 + 14 * 3.4e-6 + 1e9 * 2 * 7 / 8 / 450e9
    assert collective_time("all-reduce", 1e9, 8, t) == pytest.approx(want)


def test_small_all_reduce_rides_ll_as_nccl_picks_it():
    # NCCL's tuner times every protocol and runs the fastest. A TP decode step's all-reduce of
    # 8 kB on 8 NVLink GPUs: LL = 6.6 us + 14 x 0.6 us + 8 kB x 7/4 at half the bus bandwidth;
    # Simple would be 8.4 + 14 x 3.4 = 56 us of latency alone
    t = topology_for(H100)
    bus = 450e9
    ll = 6.6e-6 + 14 * 0.6e-6 + 8192 * 2 * 7 / 8 / (bus * 0.5)
    simple = 8.4e-6 + 14 * 3.4e-6 + 8192 * 2 * 7 / 8 / bus
    assert collective_time("all-reduce", 8192, 8, t) == pytest.approx(ll)
    assert collective_protocol("all-reduce", 8192, 8, t) == "ring/LL"
    assert simple / ll > 3.5
    # 16 MB: LL128 (14 us + 14 x 1.9 us, 0.92 of the bandwidth) beats LL and Simple
    ll128 = 14e-6 + 14 * 1.9e-6 + 16e6 * 2 * 7 / 8 / (bus * 0.92)
    assert collective_time("all-reduce", 16e6, 8, t) == pytest.approx(ll128)
    assert collective_protocol("all-reduce", 16e6, 8, t) == "ring/LL128"
    # 1 GB: Simple (the test above, by hand); a PCIe node never runs LL128
    assert collective_protocol("all-reduce", 1e9, 8, t) == "ring/Simple"
    pcie = topology_for(get_gpu("L4"))
    assert pcie.intra.hop == "pcie"
    assert {collective_protocol("all-reduce", n, 8, pcie) for n in (8192, 16e6, 1e9)} \
        <= {"ring/LL", "ring/Simple"}


def test_an_nvlink_bridge_joins_pairs_and_the_rest_rides_pcie():
    # A100 PCIe: its NVLink bridge joins two cards (300 GB/s each way); a group past the pair,
    # or a pair of cards on different bridges, rides PCIe gen4 x16 (31.5 GB/s each way)
    gpu = get_gpu("A100-PCIe-80GB")
    t = topology_for(gpu)
    assert t.bridge == 2 and t.intra.bandwidth == 300e9
    pcie = gpu.pcie_bandwidth
    assert t.link(2)[0] is t.intra and t.link(4)[0] is t.pcie and t.link(2, stride=2)[0] is t.pcie
    assert t.within(8) is t.pcie and t.node_hop(8) == "pcie" and t.node_hop(2) == "nvlink"
    assert "joining pairs" in t.stated and "PCIe gen4 x16 between them" in t.stated
    # a 1 GB all-reduce over 4 of them: Simple over PCIe hops (8.4 + 6 x 5.7 us) at PCIe's rate
    want = 8.4e-6 + 6 * 5.7e-6 + 1e9 * 2 * 3 / 4 / pcie
    assert collective_time("all-reduce", 1e9, 4, t) == pytest.approx(want)
    assert collective_protocol("all-reduce", 8192, 4, t) == "ring/LL"  # no LL128 over PCIe
    # the pair: NVLink
    assert collective_time("all-reduce", 1e9, 2, t) == pytest.approx(
        8.4e-6 + 2 * 3.4e-6 + 1e9 / 300e9)
    # an SXM board's NVSwitch spans the node: no bridge
    assert topology_for(H100).bridge == 0


def test_all_reduce_across_nodes_rides_the_network():
    t = topology_for(H100, inter_node="ib-400")
    # 16 ranks 8 apart: 16 nodes, every hop on the network (50 GB/s per GPU)
    ring = 8.4e-6 + 30 * 9.6e-6 + 1e9 * 2 * 15 / 16 / 50e9
    tree = 2 * (0 * 28e-6 + math.log2(16) * 50e-6) + 2 * 1e9 / 50e9
    assert collective_time("all-reduce", 1e9, 16, t, stride=8) == pytest.approx(min(ring, tree))
    assert collective_time("all-gather", 1e9, 1, t) == 0.0


def _train(model, **kw):
    job = Job(model=model, mode="train", seq=2048, **kw)
    return estimate_speed(model, H100, job, measured=None)


def test_bubble_fractions_by_schedule():
    m = load_model("llama-3.1-8b")
    a = _train(m, gpus=32, tp=2, pp=4, grad_accum=8).layout
    b = _train(m, gpus=32, tp=2, pp=4, grad_accum=8, pp_schedule="interleaved:2").layout
    g = _train(m, gpus=32, tp=2, pp=4, grad_accum=8, pp_schedule="gpipe").layout
    per_mb = a.bubble_s / 3  # (p-1) micro-batch times
    assert a.compute_s + a.tp_comm_s == pytest.approx(8 * per_mb)
    assert b.bubble_s == pytest.approx(a.bubble_s / 2)   # (p-1)/(v m)
    assert g.bubble_s == pytest.approx(a.bubble_s)       # GPipe's bubble is 1F1B's


def test_tp_collectives_by_hand():
    m = load_model("llama-3.1-8b")
    lt = _train(m, gpus=2, tp=2).layout
    act = 1 * 2048 * m.architecture.hidden_size * 2
    one = collective_time("all-reduce", act, 2, lt.topology, efficiency=0.8)
    assert lt.tp_comm_s == pytest.approx(4 * m.architecture.num_layers * one)
    assert lt.bubble_s == 0 and lt.pp_comm_s == 0


def test_distributed_checkpoints_gather_each_layer_input_once_by_hand():
    """Full checkpointing: 6 TP all-reduces a layer (the recompute repeats the forward's two);
    distributed checkpoints add the all-gather of the layer's input before its recompute."""
    m = load_model("llama-3.1-8b")
    kw = dict(gpus=2, tp=2, checkpointing="full")
    lt = _train(m, **kw).layout
    dist = _train(m, **kw, distribute_checkpoints=True).layout
    act = 1 * 2048 * m.architecture.hidden_size * 2
    ar = collective_time("all-reduce", act, 2, lt.topology, efficiency=0.8)
    ag = collective_time("all-gather", act, 2, lt.topology, efficiency=0.8)
    assert lt.tp_comm_s == pytest.approx(6 * m.architecture.num_layers * ar)
    assert dist.tp_comm_s == pytest.approx(m.architecture.num_layers * (6 * ar + ag))


def test_zero3_layout_traffic_counts_micro_batches_and_deepspeeds_recompute_gather():
    """Under a layout too: ZeRO-3's traffic is 1.5 all-reduces a micro-batch (FSDP); under
    DeepSpeed with full checkpointing (1 + g) / 2, g the all-gathers its coordinator makes (the
    replay, checked against DeepSpeed in tests/integration/test_zero3_deepspeed_oracle.py), and
    2 (a third gather for the recompute) for an architecture without its tensor list."""
    from gpuplan.engines.zero3 import deepspeed_gathered

    m = load_model("llama-3.1-8b")
    kw = dict(gpus=32, tp=2, zero=3, checkpointing="full")
    ds = _train(m, **kw, grad_accum=4).layout
    bare = estimate_speed(m.architecture, H100, Job(model=m, mode="train", seq=2048, **kw,
                                                   grad_accum=4), measured=None).layout
    fs = _train(m, **kw, grad_accum=4, sharding="fsdp2").layout
    one = _train(m, **kw, grad_accum=1, sharding="fsdp2").layout
    g = deepspeed_gathered(m, True).gathers
    assert 1.85 < g < 1.9  # a layer (218M) within the 1e9 reuse distance: recompute -> backward
    assert ds.dp_comm_s == pytest.approx(fs.dp_comm_s * (1 + g) / 3)
    assert bare.dp_comm_s == pytest.approx(fs.dp_comm_s * 2 / 1.5, rel=1e-3)
    assert fs.dp_comm_s == pytest.approx(4 * one.dp_comm_s)


def test_zero3_gathers_waited_for_are_exposed():
    """gather_overlap=False (DeepSpeed before January 2022): the weights' all-gathers -- g of
    the (1 + g) half-all-reduces a micro-batch moves -- are exposed whole, and run no faster
    than that code path's measured ~21 GB/s of bus bandwidth a GPU (DeepSpeed #1174: 7/8 of a
    5.1B model's 10.2 GB of fp16 weights in ~420 ms), here below NVLink's NCCL rate; only the
    gradients' reduce-scatter hides under the step's compute. Checked on the layout's own
    figures, and on the data-parallel table, where serial_bytes carries the same share."""
    from gpuplan.engines.zero3 import deepspeed_gathered

    assert SERIAL_GATHER_BUS_BPS == pytest.approx(0.875 * 10.2e9 / 0.42)
    m = load_model("llama-3.1-8b")
    kw = dict(gpus=8, tp=2, zero=3, checkpointing="full", grad_accum=2, batch=8)
    job = Job(model=m, mode="train", seq=2048, **kw)  # one node: compute outlasts the traffic
    on = estimate_speed(m, H100, job, measured=None).layout
    off = estimate_speed(m, H100, job, measured=None, gather_overlap=False).layout
    g = deepspeed_gathered(m, True).gathers
    # the gathers: g x 2 micro-batches of the stage's bf16 weights, (n-1)/n of them received
    grad_bytes = math.ceil(m.params.total / 2) * 2  # TP 2: half the model a GPU, bf16
    slow = g * 2 * grad_bytes * 3 / 4 / SERIAL_GATHER_BUS_BPS
    nccl = on.dp_comm_s * g / (1 + g)
    assert slow > nccl  # NVLink's NCCL outruns DeepSpeed's 2021 gather path
    rs = on.dp_comm_s - nccl
    assert off.dp_comm_s == pytest.approx(slow + rs, rel=1e-9)
    # overlapped, the traffic hides under the compute but for its last bucket; waited for, the
    # gathers add whole and the reduce-scatter still hides but for that bucket. Hidden, each
    # costs the 24 of 132 SMs NCCL holds while it runs (efficiency.overlap_sm_share): waited
    # for, the gathers no longer contend -- their NCCL time leaves the hidden share
    assert on.dp_comm_s < on.compute_s
    assert off.dp_exposed_s == pytest.approx(slow + on.dp_exposed_s - 24 / 132 * nccl, rel=1e-9)

    dp = Job(model=m, mode="train", seq=2048, batch=8, gpus=8, zero=3, checkpointing="full")
    a = estimate_speed(m, H100, dp, measured=None, link="nvlink").scaling.rows[-1]
    b = estimate_speed(m, H100, dp, measured=None, link="nvlink",
                       gather_overlap=False).scaling.rows[-1]
    slow = g * m.params.total * 2 * 7 / 8 / SERIAL_GATHER_BUS_BPS
    assert slow > g / (1 + g) * a.allreduce_s
    assert b.allreduce_s == pytest.approx(a.allreduce_s / (1 + g) + slow, rel=1e-9)
    # the same contention: the waited-for gathers' NCCL share (g / (1 + g)) no longer hidden
    assert b.exposed_comm_s == pytest.approx(
        slow + a.exposed_comm_s - 24 / 132 * g / (1 + g) * a.allreduce_s, rel=1e-9)


def test_data_parallel_only_keeps_the_link_model():
    m = load_model("llama-3.1-8b")
    est = _train(m, gpus=8)
    assert est.layout is None and est.scaling is not None
    assert "layout" not in est.to_dict()


def test_layout_mfu_is_over_all_gpus():
    m = load_model("llama-3.1-8b")
    est = _train(m, gpus=16, tp=2, pp=2, grad_accum=4)
    lt = est.layout
    assert est.tokens_per_s == pytest.approx(lt.tokens_per_step / est.step_time_s)
    assert lt.tokens_per_step == 1 * 4 * 4 * 2048   # micro-batch x M x DP x seq
    assert 0 < est.mfu < 1


def test_bad_layouts_name_the_nearest():
    m = load_model("llama-3.1-8b")  # 32 heads, 8 KV heads, 32 layers
    with pytest.raises(InputError, match=r"tp 1 \(or 2 or 4 with gpus a multiple of it\)$"):
        _train(m, gpus=3, tp=3)  # 3 GPUs: only --tp 1 leaves a whole data-parallel degree
    with pytest.raises(InputError, match="has 32 layers, fewer than the 64 pipeline parts; "
                                         "use pp 32 or less$"):
        _train(m, gpus=64, pp=64)
    with pytest.raises(InputError, match="has no experts; drop ep$"):
        _train(m, gpus=4, tp=2, ep=2)


def test_cluster_search_best_fit_and_rank():
    m = load_model("llama-3.1-8b")
    p = cluster_search(m, H100, Job(model=m, mode="train", gpus=16, seq=4096), global_batch=64)
    assert p.best and all(c.memory_bytes <= H100.memory_bytes for c in p.best)
    rates = [c.tokens_per_s for c in p.best]
    assert rates == sorted(rates, reverse=True)
    assert all(c.layout.gpus == 16 for c in p.tried)
    # nothing faster than the winner was left unchecked: every faster one was tried and failed
    faster = [c for c in p.tried if c.tokens_per_s > p.best[0].tokens_per_s]
    assert all(not c.fits(H100.memory_bytes) for c in faster)
    assert p.why_runner_up_loses.startswith("runner-up")


def test_cluster_search_reaches_the_fits_when_every_fast_layout_overflows():
    """70B on 64 H100s at 8K with 512 sequences a step: the fastest few hundred layouts (no
    checkpointing, big micro-batches) all overflow. The search once ran out of its memory
    checks there and said nothing fits; it must find what checking every layout in speed order
    finds (the exhaustive oracle below), the fastest layout that fits, and a runner-up."""
    from gpuplan import cluster as C

    m = load_model("llama-3.1-70b")
    job = Job(model=m, mode="train", gpus=64, seq=8192)
    p = cluster_search(m, H100, job, global_batch=512)
    c = C._ctx(m, H100, job, "train", False)
    oracle = None
    for cand in sorted(C._train_candidates(c, 8192, 512),
                       key=lambda x: -x.timed.tokens_per_s_per_gpu):
        mem, _ = C._memory(c, cand.layout, "train")
        if mem is not None and mem <= H100.memory_bytes:
            oracle = cand
            break
    assert oracle is not None and len(p.best) == 3
    assert p.best[0].layout.label() == oracle.layout.label()
    assert p.best[0].tokens_per_s == pytest.approx(oracle.tokens_per_s)
    assert len(p.tried) < p.enumerated / 4  # the families that cannot fit were skipped unbuilt


def test_cluster_cli_json_and_bad_input(capsys):
    assert main(["cluster", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--gpus", "8",
                 "--seq", "2048", "--global-batch", "16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["best"] and d["topology"]["default_network"] is True
    assert main(["cluster", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--tp", "2"]) == 2
    assert main(["cluster", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "--global-batch" in err and "Traceback" not in err
    # a context past a learned position table (GPT-2's n_positions 1024) is one line before any
    # search, not "nothing fits"; a rotary model's is planned (tests/unit/test_seq_positions.py)
    assert main(["cluster", "gpt2", "--gpu", "H100", "--gpus", "16", "--mode", "infer",
                 "--concurrency", "5", "--context", "99999999"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "use --context 1024 or less" in err
