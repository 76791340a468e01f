"""HybridEP's exchange across nodes (gpuplan.compute.parallel.HYBRIDEP_INTERNODE_H100): RDMA
between peer GPUs, then NVLink inside the node, as DeepEP's internode kernels do, so a token
crosses once to each node its experts lie on -- at the rates HybridEP's README measured on H100
(deepseek-ai/DeepEP hybrid-ep @94a9f8f6 docs/README_Hybrid-EP.md "H100 Platform", Torch API,
16 SMs, Dispatch (BF16) / Combine: 16 ranks 54.47 / 53.35 GB/s, 32 ranks 47.36 / 52.53, 64 ranks
41.24 / 46.57) -- checked against hand-computed values."""

from __future__ import annotations

from math import comb

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import (DEEPEP_INTERNODE_H800, HYBRIDEP_INTERNODE_H100,
                                      deepep_internode_applies, hybridep_applies,
                                      hybridep_internode_applies, internode_exchange_s)
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.parallel.layout import layout_of

H100 = get_gpu("H100-SXM-80GB")


def test_the_rates_are_the_readmes_bf16_torch_api_at_16_sms():
    assert HYBRIDEP_INTERNODE_H100 == {16: (54.47e9, 53.35e9), 32: (47.36e9, 52.53e9),
                                       64: (41.24e9, 46.57e9)}


def test_exchange_is_the_mean_of_the_measured_dispatch_and_combine():
    # 4096 tokens x 2 nodes, hidden 2048, BF16 at EP 16: 33.6 MB at 54.47 and 53.35 GB/s
    nbytes = 4096 * 2 * 2048 * 2
    one = internode_exchange_s(4096 * 2, 16, 2048, HYBRIDEP_INTERNODE_H100)
    assert one == pytest.approx(0.5 * (nbytes / 54.47e9 + nbytes / 53.35e9))
    assert one == pytest.approx(0.6224e-3, rel=1e-3)
    # EP 48: halfway between EP 32's (47.36, 52.53) and EP 64's (41.24, 46.57) GB/s
    assert internode_exchange_s(1000, 48, 7168, HYBRIDEP_INTERNODE_H100) == pytest.approx(
        0.5 * (1000 * 7168 * 2 / 44.30e9 + 1000 * 7168 * 2 / 49.55e9))
    # the DeepEP table through the same function: its EP 16 43 / 43 GB/s
    assert internode_exchange_s(1000, 16, 7168, DEEPEP_INTERNODE_H800) == pytest.approx(
        1000 * 7168 * 2 / 43e9)
    assert internode_exchange_s(1000, 1, 7168, HYBRIDEP_INTERNODE_H100) == 0.0


def _job(**kw) -> Job:
    # Megatron-Bridge's 26.04 H100 Qwen3-30B-A3B config (v0.4.0): EP 16 over two DGX H100s
    base = dict(model="qwen3-30b-a3b", mode="train", engine="megatron", precision="fp8-current",
                batch=1, grad_accum=64, seq=4096, gpus=16, tp=1, pp=1, ep=16, zero=1,
                gpus_per_node=8, moe_dispatcher="hybridep")
    return Job(**{**base, **kw})


def test_it_applies_to_hybridep_over_whole_nodes_on_400g_nics_only():
    topo = topology_for(H100, gpus_per_node=8)
    assert hybridep_internode_applies("hybridep", layout_of(_job()), topo)
    assert not hybridep_applies("hybridep", layout_of(_job()), topo)
    assert not hybridep_internode_applies("deepep", layout_of(_job()), topo)
    assert not hybridep_internode_applies("alltoall", layout_of(_job()), topo)
    assert not deepep_internode_applies("hybridep", layout_of(_job()), topo)
    # EP 8 inside one node: HybridEP's intranode path, not these rates
    assert not hybridep_internode_applies("hybridep", layout_of(_job(ep=8)), topo)
    # TP 2 under EP 16 (32 GPUs): EP's ranks two apart, half of each node
    assert not hybridep_internode_applies("hybridep", layout_of(_job(gpus=32, tp=2)), topo)
    slow = topology_for(H100, gpus_per_node=8, inter_node="200gbps")
    assert not hybridep_internode_applies("hybridep", layout_of(_job()), slow)


def test_the_layout_time_takes_the_measured_exchange():
    """EP 16 over two nodes, no EP overlap: the EP time is 64 micro-batches x 48 MoE layers x 4
    exchanges of 4096 tokens x the nodes each reaches (128 experts, top-8, 64 a node:
    2 x (1 - C(64, 8) / C(128, 8)) = 1.9938) at HybridEP's EP 16 rates -- a quarter of NCCL's
    all-to-all time of the same layout, and under DeepEP's EP 16 rates (43 / 43)."""
    model, topo = load_model("qwen3-30b-a3b"), topology_for(H100, gpus_per_node=8)
    est = estimate_speed(model, H100, _job(), measured=None, topology=topo)
    reached = 2 * (1 - comb(64, 8) / comb(128, 8))
    assert reached == pytest.approx(1.9938, abs=1e-4)
    nbytes = 4096 * reached * 2048 * 2
    one = 0.5 * (nbytes / 54.47e9 + nbytes / 53.35e9)
    assert est.layout.ep_comm_s == pytest.approx(64 * 48 * 4 * one, rel=1e-9)
    nccl = estimate_speed(model, H100, _job(moe_dispatcher="alltoall"), measured=None,
                          topology=topo)
    assert nccl.layout.ep_comm_s > 4 * est.layout.ep_comm_s
    deepep = estimate_speed(model, H100, _job(moe_dispatcher="deepep"), measured=None,
                            topology=topo)
    assert deepep.layout.ep_comm_s == pytest.approx(64 * 48 * 4 * nbytes / 43e9, rel=1e-9)
