"""The SMs an overlapped NCCL collective holds: a hidden data-parallel collective still costs the
step the share of the SMs its kernels take for as long as it runs (issue 31). Hand-computed:
24 CTAs (the H100 FSDP all-gather of the NVIDIA forum profile, efficiency.CONSTANTS
``nccl_overlap_ctas``) of H100's 132 SMs = 18.2%."""

from __future__ import annotations

import math

import pytest

from gpuplan.compute import data_parallel_scaling, default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import CONSTANTS, overlap_sm_share
from gpuplan.hardware import get_gpu

H100 = get_gpu("H100-SXM-80GB")
SHARE = 24 / 132  # by hand: 24 CTAs resident, one SM each, of H100 SXM's 132 SMs


def test_share_of_the_sms_by_hand():
    assert CONSTANTS["nccl_overlap_ctas"].value == 24
    assert "forums.developer.nvidia.com" in CONSTANTS["nccl_overlap_ctas"].source
    nv = dict(vendor="NVIDIA", interconnect="NVLink 4")
    assert overlap_sm_share(132, **nv) == pytest.approx(0.18182, abs=1e-5)
    # A100: the same CTAs (assumed), fewer SMs
    assert overlap_sm_share(108, vendor="NVIDIA", interconnect="NVLink 3") == pytest.approx(24 / 108)
    assert overlap_sm_share(0, **nv) == 0.0  # SM count unknown: no guess
    assert overlap_sm_share(12, **nv) == 1.0  # never more than every SM
    # not measured there: RCCL, PCIe-only boards (L4), a bridged NVLink pair (H100 PCIe)
    assert overlap_sm_share(304, vendor="AMD", interconnect="Infinity Fabric") == 0.0
    assert overlap_sm_share(58, vendor="NVIDIA", interconnect=None) == 0.0
    assert overlap_sm_share(114, vendor="NVIDIA", interconnect="NVLink 4 (bridge)") == 0.0


def _scaling(backward_s: float, share: float):
    eff = default_efficiency(device_from_gpu(H100))
    return eff, data_parallel_scaling(
        step_s=1.0, backward_s=backward_s, gradient_bytes=14_000_000_000, gpus=8,
        link="100 Gb/s", link_bandwidth=12.5e9, eff=eff, tokens_per_step=16384,
        overlap_sm_share=share)


def test_fully_hidden_all_reduce_costs_the_share_of_its_time():
    """Backward longer than the all-reduce: only the last 25 MiB bucket is exposed, and the
    rest, hidden, slows the backward by 18.2% of its duration."""
    eff, t = _scaling(100.0, SHARE)
    row = t.rows[-1]  # 8 GPUs
    bus = 12.5e9 * 0.8
    ar = 2 * 7 / 8 * 14e9 / bus + math.ceil(14e9 / (25 * 2**20)) * eff.launch_s
    last = 2 * 7 / 8 * 25 * 2**20 / bus + eff.launch_s
    assert row.allreduce_s == pytest.approx(ar)
    assert row.exposed_comm_s == pytest.approx(last + SHARE * (ar - last))
    # 2 x 7/8 x 14 GB at 10 GB/s = 2.45 s of ring (+ 535 bucket launches of 5 us), its last
    # bucket 0.0046 s: 0.0046 + 0.182 x 2.45 = 0.450 s
    assert row.exposed_comm_s == pytest.approx(0.450, abs=0.001)


def test_partly_hidden_all_reduce_contends_over_the_backward_only():
    eff, t = _scaling(1.0, SHARE)
    row = t.rows[-1]
    bus = 12.5e9 * 0.8
    ar = 2 * 7 / 8 * 14e9 / bus + math.ceil(14e9 / (25 * 2**20)) * eff.launch_s
    assert row.exposed_comm_s == pytest.approx((ar - 1.0) + SHARE * 1.0)
    _, none = _scaling(1.0, 0.0)
    assert none.rows[-1].exposed_comm_s == pytest.approx(ar - 1.0)


def test_layout_path_adds_the_share_of_the_hidden_data_parallel_time(monkeypatch):
    """An FSDP job on a topology (gpuplan.compute.parallel): the exposed data-parallel time
    grows by 24/132 of the part of the collectives that was hidden."""
    import gpuplan.compute.parallel as P
    from gpuplan.compute import estimate_speed
    from gpuplan.hardware.topology import topology_for
    from gpuplan.job import Job
    from gpuplan.models import load_model

    model = load_model("llama-2-7b")
    job = Job(model="llama-2-7b", mode="train", batch=2, seq=4096, gpus=96, zero=3,
              sharding="fsdp2", attention="sdpa")
    topo = topology_for(H100, gpus_per_node=8)

    def est():
        return estimate_speed(model, H100, job, measured=None, topology=topo).layout

    with_share = est()
    monkeypatch.setattr(P, "overlap_sm_share", lambda sms, **kw: 0.0)
    without = est()
    assert with_share.dp_comm_s == pytest.approx(without.dp_comm_s)
    hidden = without.dp_comm_s - without.dp_exposed_s
    assert hidden > 0
    assert with_share.dp_exposed_s == pytest.approx(without.dp_exposed_s + SHARE * hidden)
