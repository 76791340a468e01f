"""HybridEP's exchange on an NVL72 rack (compute/parallel.py ``hybridep_*``): the rows a rank
receives when each token goes once to each rank holding one of its experts, HybridEP's measured
GB200 rates (deepseek-ai/DeepEP hybrid-ep docs/README_Hybrid-EP.md, 32 SMs), and where the
layout time takes them -- checked against hand-computed values."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import (HYBRIDEP_GB200, hybridep_applies, hybridep_exchange_s,
                                      hybridep_rows)
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.parallel.layout import layout_of

GB200 = get_gpu("GB200-NVL72")


def test_rows_count_each_destination_rank_once():
    # E 4, k 2, EP 2 (2 experts a rank): a token misses a rank only when both its experts sit
    # on the other one, C(2,2)/C(4,2) = 1/6, so it reaches 2 x 5/6 = 5/3 ranks on average
    assert hybridep_rows(3, 4, 2, 2) == pytest.approx(3 * 5 / 3)
    # top-1: every token reaches exactly one rank
    assert hybridep_rows(100, 8, 1, 4) == pytest.approx(100)
    # one expert a rank: no two of a token's experts share a rank, k rows a token
    assert hybridep_rows(10, 16, 4, 16) == pytest.approx(40)
    # DeepSeek-V3 (256 experts, top 8): C(248,8)/C(256,8) = 3198325171041/4138017124000 misses
    # at EP 32 (8 a rank); C(252,8)/C(256,8) = 15382913/17479264 at EP 64 (4 a rank)
    assert hybridep_rows(1, 256, 8, 32) == pytest.approx(32 * (1 - 3198325171041 / 4138017124000))
    assert hybridep_rows(1, 256, 8, 64) == pytest.approx(64 * (1 - 15382913 / 17479264))
    assert 7.26 < hybridep_rows(1, 256, 8, 32) < 7.27 < 7.67 < hybridep_rows(1, 256, 8, 64) < 7.68


def test_exchange_is_the_mean_of_the_measured_dispatch_and_combine():
    # the README's own case: 4096 tokens, hidden 7168, top 8, 8 local experts at EP 32 (256
    # experts): rows x 7168 x 2 bytes at 484.22 GB/s (dispatch, BF16) and 464.54 (combine)
    nbytes = 4096 * 32 * (1 - 3198325171041 / 4138017124000) * 7168 * 2
    assert nbytes == pytest.approx(426.708e6, rel=1e-5)
    want = 0.5 * (nbytes / 484.22e9 + nbytes / 464.54e9)
    assert hybridep_exchange_s(4096, 256, 8, 32, 7168) == pytest.approx(want)
    assert want == pytest.approx(0.9000e-3, rel=1e-3)  # 0.88 ms dispatch, 0.92 ms combine


def test_rates_interpolate_between_and_hold_past_the_measured_ranks():
    rows = 1e6 / (7168 * 2)  # a million bytes of rows, so seconds = 0.5e6 (1/d + 1/c)
    d24, c24 = HYBRIDEP_GB200[24]
    d32, c32 = HYBRIDEP_GB200[32]
    d36, c36 = HYBRIDEP_GB200[36]

    def per_byte(ep: int) -> float:
        return hybridep_exchange_s(rows, ep * 8, 1, ep, 7168) / 1e6  # top-1: rows = tokens

    assert per_byte(28) == pytest.approx(0.5 * (2 / (d24 + d32) + 2 / (c24 + c32)))
    # EP 64 is not measured: the 36-rank rates, held
    assert per_byte(64) == pytest.approx(0.5 * (1 / d36 + 1 / c36))
    assert per_byte(72) == pytest.approx(per_byte(64))
    assert hybridep_exchange_s(4096, 256, 8, 1, 7168) == 0.0


def _deepseek_job(**kw) -> Job:
    base = dict(model="deepseek-v3", mode="train", engine="megatron", precision="mixed-bf16",
                batch=1, grad_accum=64, seq=4096, gpus=256, tp=1, pp=4, ep=64, zero=1,
                pp_schedule="interleaved:4", gpus_per_node=72, moe_dispatcher="hybridep",
                pp_first_stage_layers=15, pp_last_stage_layers=14)
    return Job(**{**base, **kw})


def test_it_applies_to_hybridep_inside_an_nvl72_rack_only():
    topo = topology_for(GB200, gpus_per_node=72)
    assert hybridep_applies("hybridep", layout_of(_deepseek_job()), topo)
    assert not hybridep_applies("alltoall", layout_of(_deepseek_job()), topo)
    assert not hybridep_applies("deepep", layout_of(_deepseek_job()), topo)
    # eight GPUs a node (an NVL8 system): not the rack the rates were measured on
    h100 = topology_for(get_gpu("H100-SXM-80GB"), gpus_per_node=8)
    assert not hybridep_applies("hybridep", layout_of(_deepseek_job(gpus_per_node=8)), h100)


def test_the_layout_time_takes_the_measured_exchange():
    """The 25.11 GB200 BF16 DeepSeek-V3 layout: its busiest stage's EP time is 64 micro-batches
    x 16 layers x 58/61 (the MoE layers' share) x 4 exchanges (forward dispatch and combine,
    their gradients back) of :func:`hybridep_exchange_s` at 4096 tokens over EP 64."""
    model, topo = load_model("deepseek-v3"), topology_for(GB200, gpus_per_node=72)
    job = _deepseek_job()
    est = estimate_speed(model, GB200, job, measured=None, topology=topo)
    one = hybridep_exchange_s(4096, 256, 8, 64, 7168)
    assert est.layout.stage_layers == 16
    assert est.layout.ep_comm_s == pytest.approx(64 * 16 * 58 / 61 * 4 * one, rel=1e-9)
    nccl = estimate_speed(model, GB200, _deepseek_job(moe_dispatcher="alltoall"),
                          measured=None, topology=topo)
    assert nccl.layout.ep_comm_s != pytest.approx(est.layout.ep_comm_s, rel=1e-3)
