"""DeepEP's internode exchange (gpuplan.compute.parallel.DEEPEP_INTERNODE_H800): a token once to
each node its experts lie on, at the rates DeepEP's README measured on H800 with 400 Gb/s CX7
NICs (deepseek-ai/DeepEP@92fe2dea README.md, "Normal kernels with NVLink and RDMA
forwarding": EP 16 43 / 43 GB/s, EP 32 58 / 57, EP 64 51 / 50, dispatch / combine)."""

from __future__ import annotations

from math import comb

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import (deepep_internode_applies, deepep_internode_exchange_s,
                                      deepep_nodes_reached)
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.parallel.layout import layout_of

H100 = get_gpu("H100-SXM-80GB")


def test_nodes_reached_node_limited_and_uniform():
    # DeepSeek-V3's node-limited routing (8 groups, 4 picked) over 8 nodes: at most 4 nodes
    assert deepep_nodes_reached(256, 8, 8, (8, 4)) == 4.0
    # no node limit (Qwen3-235B: 128 experts, top-8) over 4 nodes of 32 experts each:
    # 4 x (1 - C(96, 8) / C(128, 8)), by hand 3.629
    assert deepep_nodes_reached(128, 8, 4) == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)))
    assert deepep_nodes_reached(128, 8, 4) == pytest.approx(3.629, abs=1e-3)
    # groups that are not the EP group's nodes do not bound the nodes reached
    assert deepep_nodes_reached(256, 8, 16, (8, 4)) == pytest.approx(
        16 * (1 - comb(240, 8) / comb(256, 8)))


def test_exchange_is_the_mean_of_the_measured_dispatch_and_combine():
    # 2048 tokens x 4 nodes, hidden 7168, BF16 at EP 64: 117.4 MB at 51 and 50 GB/s
    nbytes = 2048 * 4 * 7168 * 2
    assert deepep_internode_exchange_s(2048 * 4, 64, 7168) == pytest.approx(
        0.5 * (nbytes / 51e9 + nbytes / 50e9))
    assert deepep_internode_exchange_s(2048 * 4, 64, 7168) == pytest.approx(2.326e-3, rel=1e-3)
    # EP 48: halfway between EP 32's (58, 57) and EP 64's (51, 50) GB/s
    assert deepep_internode_exchange_s(1000, 48, 7168) == pytest.approx(
        0.5 * (1000 * 7168 * 2 / 54.5e9 + 1000 * 7168 * 2 / 53.5e9))
    assert deepep_internode_exchange_s(1000, 1, 7168) == 0.0


def _job(**kw) -> Job:
    base = dict(model="deepseek-v3", mode="train", engine="megatron", precision="fp8-current",
                batch=1, grad_accum=128, seq=4096, gpus=1024, tp=2, pp=8, ep=64, etp=1,
                zero=1, sequence_parallel=True, pp_schedule="interleaved:4", gpus_per_node=8,
                moe_dispatcher="deepep", pp_first_stage_layers=7, pp_last_stage_layers=6)
    return Job(**{**base, **kw})


def test_it_applies_to_deepep_over_whole_nodes_on_400g_nics_only():
    topo = topology_for(H100, gpus_per_node=8)
    assert deepep_internode_applies("deepep", layout_of(_job()), topo)
    assert not deepep_internode_applies("alltoall", layout_of(_job()), topo)
    # expert TP 2: EP's ranks two apart, half of each node (not the benchmark's placement)
    assert not deepep_internode_applies("deepep", layout_of(_job(etp=None)), topo)
    # EP 8 inside one node: the intranode kernels, not these rates
    assert not deepep_internode_applies("deepep", layout_of(_job(ep=8)), topo)
    # EP 128 (16 nodes): past the measured 16-64
    assert not deepep_internode_applies("deepep", layout_of(_job(ep=128)), topo)
    slow = topology_for(H100, gpus_per_node=8, inter_node="200gbps")
    assert not deepep_internode_applies("deepep", layout_of(_job()), slow)


def test_the_layout_time_takes_the_measured_exchange():
    """The 25.09 H100 DeepSeek-V3 layout without the EP overlap: a 7-layer stage's EP time is
    128 micro-batches x 7 layers x 58/61 (the MoE layers' share) x 4 exchanges of 2048 tokens
    (the sequence-parallel share) x 4 nodes at DeepEP's EP 64 rates."""
    model, topo = load_model("deepseek-v3"), topology_for(H100, gpus_per_node=8)
    est = estimate_speed(model, H100, _job(), measured=None, topology=topo)
    one = deepep_internode_exchange_s(2048 * 4, 64, 7168)
    layers = est.layout.stage_layers
    assert est.layout.ep_comm_s == pytest.approx(128 * layers * 58 / 61 * 4 * one, rel=1e-9)
    nccl = estimate_speed(model, H100, _job(moe_dispatcher="alltoall"), measured=None,
                          topology=topo)
    assert nccl.layout.ep_comm_s > 2 * est.layout.ep_comm_s
