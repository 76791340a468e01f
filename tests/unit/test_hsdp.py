"""Hybrid sharding (HSDP, the Job's ``dp_shard``): FSDP1's HYBRID_SHARD / FSDP2's 2-D mesh --
the states sharded over a group (a node), replicated across groups; the weights gathered and the
gradients reduce-scattered inside the group, each gradient shard all-reduced across replicas.

The collective times are checked against the ring formula done by hand (nccl-tests
doc/PERFORMANCE.md's factors: all-gather / reduce-scatter (n-1)/n, all-reduce 2(n-1)/n of the
buffer over the bus bandwidth), on sizes where the latency is under 0.2% of the time."""

from __future__ import annotations

import pytest

from gpuplan import Job
from gpuplan.compute import estimate_speed
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import overlap_sm_share
from gpuplan.compute.parallel import BUCKET_BYTES, _dp_comm, fsdp_edge_share
from gpuplan.errors import InputError
from gpuplan.export import export_plan
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import collective_time, topology_for
from gpuplan.memory import train_memory
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout

H100 = get_gpu("H100-SXM-80GB")
# 12 nodes of 8 H100 at 100 Gb/s a GPU: the IBM FSDP post's H100 cluster (800 Gb/s a node)
TOPO = topology_for(H100, gpus_per_node=8, inter_node="100Gb/s")
EFF = default_efficiency(device_from_gpu(H100))
P = 6_738_415_616  # Llama-2-7B's parameters (its config.json: 32 layers of 4096, vocab 32000)


def _job(**kw) -> Job:
    base = dict(model="llama-2-7b", mode="train", engine="fsdp2", precision="mixed-bf16",
                gpus=96, zero=3, batch=2, seq=4096)
    return Job(**{**base, **kw})


def test_states_shard_over_the_group_not_every_rank():
    # HYBRID_SHARD keeps one whole copy of the states in each group of 8: a rank holds 1/8 of
    # the fp32 master and of Adam's two fp32 moments, as full sharding over 8 GPUs does
    model = load_model("llama-2-7b")
    hsdp = train_memory(model, _job(dp_shard=8))
    node = train_memory(model, _job(gpus=8))
    full = train_memory(model, _job())
    assert hsdp.optimizer_bytes == node.optimizer_bytes
    assert hsdp.master_weights_bytes == node.master_weights_bytes
    assert hsdp.optimizer_bytes == pytest.approx(8 * P / 8, rel=1e-3)  # m and v, 4 B each
    # over 96 ranks FSDP2 pads each tensor's dim 0 to a multiple of 96 (Llama's 4096 rows
    # take 4128 / 96 = 43 a rank): up to 1% over P / 96
    assert full.optimizer_bytes == pytest.approx(8 * P / 96, rel=1e-2)
    assert full.optimizer_bytes < hsdp.optimizer_bytes / 11


def test_hsdp_traffic_by_hand():
    grad = 2 * P  # bf16 gradients, bf16 weights gathered
    lay = Layout(dp=96, zero=3, sharding="fsdp2", dp_shard=8, batch=2, seq=4096)
    assert (lay.zero_group, lay.replicas) == (8, 12)
    nv = 450e9 * EFF.comm  # NVLink 4: 900 GB/s both ways, per direction
    net = 12.5e9 * EFF.comm  # one GPU of each node: its own NIC
    ag = grad * 7 / 8 / nv
    ar = 2 * 11 / 12 * (grad / 8) / net
    share = overlap_sm_share(H100.sm_count, vendor=H100.vendor, interconnect=H100.interconnect)
    assert share == pytest.approx(24 / 132)
    full, exposed = _dp_comm(grad, lay, TOPO, EFF, window_s=10.0, backward_s=10.0,
                             sm_share=share)
    assert full == pytest.approx(2 * ag + ag + ar, rel=2e-3)  # two gathers, one RS, one AR
    # hidden but the last bucket's all-reduce; the rest costs its SMs' share
    last = collective_time("all-reduce", BUCKET_BYTES, 12, TOPO, stride=8,
                           efficiency=EFF.comm)
    assert exposed == pytest.approx(last + share * (full - last), rel=1e-9)
    # the replicas' all-reduce hides in the backward only: a short backward leaves it exposed
    _, short = _dp_comm(grad, lay, TOPO, EFF, window_s=10.0, backward_s=0.1, sm_share=share)
    assert short == pytest.approx((ar - 0.1) + share * (full - (ar - 0.1)), rel=2e-3)


def test_hsdp_moves_fewer_bytes_across_nodes_than_full_sharding():
    # full sharding over 96: three passes of the model over the node's 8 NICs; HSDP: one
    # all-reduce of an eighth over one NIC a GPU -- 2 x 11/12 / 8 of the model a GPU
    grad = 2 * P
    full_lay = Layout(dp=96, zero=3, sharding="fsdp2", batch=2, seq=4096)
    hsdp_lay = Layout(dp=96, zero=3, sharding="fsdp2", dp_shard=8, batch=2, seq=4096)
    full, _ = _dp_comm(grad, full_lay, TOPO, EFF, window_s=10.0)
    hsdp, _ = _dp_comm(grad, hsdp_lay, TOPO, EFF, window_s=10.0)
    by_hand_full = 1.5 * 2 * 95 / 96 * grad / (8 * 12.5e9 * EFF.comm)
    # a 96-rank ring's 190 steps of latency (~0.8 ms an all-reduce) lie inside 0.5%
    assert full == pytest.approx(by_hand_full, rel=5e-3)
    assert hsdp < full


def test_fp32_reduce_scatter_doubles_its_bytes():
    # torchtitan's reduce_dtype fp32: the reduce-scatter moves 4 B an element, the gathers 2:
    # (4 + 2 x 2) / (2 x 2) = 2 all-reduces of the bf16 gradients instead of 1.5
    grad = 2 * P
    lay = Layout(dp=96, zero=3, sharding="fsdp2", batch=2, seq=4096)
    bf16, _ = _dp_comm(grad, lay, TOPO, EFF, window_s=10.0)
    fp32, _ = _dp_comm(grad, lay, TOPO, EFF, window_s=10.0, reduce_bytes=2 * grad)
    assert fp32 / bf16 == pytest.approx(2 / 1.5, rel=1e-9)


def test_estimate_under_hsdp_runs_on_the_topology():
    model = load_model("llama-2-7b")
    # HSDP alone routes the job onto its topology (its inter_node); full sharding given the same
    est = estimate_speed(model, H100, _job(dp_shard=8, inter_node="100Gb/s"), measured=None)
    full = estimate_speed(model, H100, _job(), measured=None, topology=TOPO)
    assert est.layout.topology == TOPO
    assert est.layout.layout.dp_shard == 8
    assert est.layout.dp_comm_s < full.layout.dp_comm_s
    # the optimizer steps an eighth of the model, not a 96th
    assert est.layout.optimizer_s > full.layout.optimizer_s


@pytest.mark.parametrize("kw, fix", [(dict(zero=2), {"zero": 3, "sharding": "fsdp2"}),
                                     (dict(dp_shard=7), {"dp_shard": 6}),
                                     (dict(engine="deepspeed", sharding="deepspeed"),
                                      {"zero": 3, "sharding": "fsdp2"})])
def test_bad_dp_shard_is_one_line(kw, fix):
    with pytest.raises(InputError) as e:
        _job(**{"dp_shard": 8, **kw})
    assert e.value.field == "dp_shard" and e.value.fix == fix
    assert "\n" not in str(e.value)


def test_exports_write_the_replicas_and_the_shard_group():
    j = dict(model="llama-3.1-8b", mode="train", gpus=32, zero=3, dp_shard=8,
             precision="mixed-bf16", sharding="fsdp2")
    tt = export_plan(Job(engine="torchtitan", **j), "torchtitan")
    assert "data_parallel_replicate_degree = 4" in tt and "data_parallel_shard_degree = 8" in tt
    fsdp = export_plan(Job(engine="fsdp2", **j), "fsdp")
    assert "init_device_mesh('cuda', (4, 8), mesh_dim_names=('dp_replicate', 'dp_shard'))" in fsdp
    acc = export_plan(Job(engine="transformers", **j), "accelerate")
    assert "parallelism_config_dp_replicate_size: 4" in acc
    assert "parallelism_config_dp_shard_size: 8" in acc


def test_cli_option(cli):
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "H100-SXM-80GB", "--mode", "train",
                       "--engine", "fsdp2", "--zero", "3", "--gpus", "16", "--dp-shard", "8",
                       "--json")
    assert rc == 0, err
    rc, _, err = cli("speed", "llama-2-7b", "--gpu", "H100-SXM-80GB", "--mode", "train",
                     "--zero", "2", "--gpus", "16", "--dp-shard", "8")
    assert rc == 2 and "dp_shard" in err.replace("-", "_")


def test_fsdp_edge_units_by_hand():
    # Llama-2-7B: the root unit holds the embedding and the untied head, 2 x 32000 x 4096, and
    # one of the 32 blocks holds (P - root) / 32: their gather opens the step, their
    # reduce-scatter closes it (the IBM/PyTorch FSDP post: the first and last blocks)
    arch = load_model("llama-2-7b").architecture
    lay = Layout(dp=96, zero=3, sharding="fsdp2", batch=2, seq=4096)
    root = 2 * 32000 * 4096
    share = (root + (P - root) / 32) / P
    assert fsdp_edge_share(arch, lay, 32, P) == pytest.approx(share, rel=1e-12)
    assert share == pytest.approx(0.0689, abs=1e-4)
    # a pipeline stage's one block; DeepSpeed's ZeRO-3 keeps its own prefetch (no edge)
    assert fsdp_edge_share(arch, Layout(dp=12, pp=8, zero=3, sharding="fsdp2"), 4, P) == 0.25
    assert fsdp_edge_share(arch, Layout(dp=96, zero=3, sharding="deepspeed"), 32, P) == 0.0
    grad = 2 * P
    share_sm = 24 / 132
    full, exposed = _dp_comm(grad, lay, TOPO, EFF, window_s=10.0, sm_share=share_sm,
                             edge_share=share)
    # each of the edge all-gather and reduce-scatter: (95/96) of the edge bytes on 8 NICs, plus
    # a 96-rank Simple ring's latency: 8.4 us + 84 NVLink steps x 3.4 us + 11 network steps x
    # 9.6 us (NCCL tuning.cc's figures as hardware/topology.py holds them)
    lat = 8.4e-6 + 84 * 3.4e-6 + 11 * 9.6e-6
    edge = 2 * (grad * share * 95 / 96 / (8 * 12.5e9 * EFF.comm) + lat)
    assert exposed == pytest.approx(edge + share_sm * (full - edge), rel=1e-6)
    _, no_edge = _dp_comm(grad, lay, TOPO, EFF, window_s=10.0, sm_share=share_sm)
    assert exposed > no_edge


def test_layout_says_it_is_hybrid():
    lay = Layout(dp=96, zero=3, sharding="fsdp2", dp_shard=8)
    assert lay.to_dict()["dp_shard"] == 8 and lay.to_dict()["dp_replicas"] == 12
    assert "DP96(HSDP 12x8)" in lay.label()
    plain = Layout(dp=96, zero=3, sharding="fsdp2")
    assert "dp_shard" not in plain.to_dict() and plain.replicas == 1


def test_hsdp_with_tp_inside_the_node():
    # TP 2 x a shard group of 4 fills a node of 8: the gathers ride NVLink (4 ranks 2 apart),
    # each gradient shard is all-reduced over 8 replicas one node apart -- one GPU a node, its
    # own NIC (400 Gb/s: 50 GB/s)
    topo = topology_for(H100, gpus_per_node=8)
    lay = Layout(tp=2, dp=32, zero=3, sharding="fsdp2", dp_shard=4, sequence_parallel=True)
    assert (lay.zero_group, lay.replicas) == (4, 8)
    grad = 2 * 35e9  # a TP rank's half of a 70B model, bf16
    full, _ = _dp_comm(grad, lay, topo, EFF, window_s=100.0)
    ag = grad * 3 / 4 / (450e9 * EFF.comm)
    ar = 2 * 7 / 8 * (grad / 4) / (50e9 * EFF.comm)
    assert full == pytest.approx(3 * ag + ar, rel=2e-3)
    # the states of a TP rank over its shard group of 4: 1/4 of what one TP rank holds
    model = load_model("llama-3.1-70b")
    job = dict(model="llama-3.1-70b", mode="train", engine="torchtitan", gpus=64, tp=2,
               zero=3, sequence_parallel=True, batch=1, seq=8192, checkpointing="full")
    hsdp, full_shard = (train_memory(model, Job(**job, **kw)).optimizer_bytes
                        for kw in ({"dp_shard": 4}, {}))
    assert hsdp == pytest.approx(8 * full_shard, rel=1e-2)  # 32 / 4, up to FSDP2's padding
