"""gpuplan's expert-parallel exchange over NVLink against Hybrid-EP's published measurements
(deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md at
94a9f8f6b146c07d97ec58f67cd6d303296d6098, 2026-07-10: "B200 Platform" and "GB200 Platform"
tables; 4096 tokens, hidden 7168, top-8, random uniform router, 8 local experts a rank, BF16
dispatch and combine, "algorithm bandwidth"). The benchmark (tests/test_hybrid_ep.py at the same
commit, ``nvl_dispatch = dispatched_hidden.numel() * 2``) counts the bytes a rank receives: each
token once per rank holding one of its experts (local rank included), so a rank's bytes are
``T x D x H x 2`` with ``D = EP (1 - C(E - 8, 8) / C(E, 8))`` distinct ranks a token reaches
(``E = 8 EP`` experts, uniform routing). gpuplan charges the dispatcher's ``T x top-k`` rows
(Megatron's alltoall dispatcher, no de-duplication) at NCCL's all-to-all rate; the test holds
its time for one dispatch + combine between Hybrid-EP's kernel-only time (the lower bound: the
exchange alone) and its torch-API time (the kernels, the device-to-device copy and the sync) --
so the NVLink exchange is not where the Blackwell MoE rows of validate_fp8 lose their time."""

from __future__ import annotations

from dataclasses import replace
from math import comb

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.parallel import _moe_layers, ep_all_to_all_s
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout

# (GPU, ranks, SMs, kernel-only (dispatch BF16, combine) GB/s, torch API (dispatch BF16, combine))
HYBRID_EP = [
    ("B200-SXM-180GB", 8, 16, (734.95, 673.84), (535.94, 530.86)),
    ("GB200-NVL72", 8, 32, (764.03, 737.13), (545.71, 568.94)),
    ("GB200-NVL72", 16, 32, (706.95, 666.26), (523.48, 521.55)),
    ("GB200-NVL72", 24, 32, (665.97, 639.80), (507.32, 483.76)),
    ("GB200-NVL72", 32, 32, (642.23, 605.15), (484.22, 464.54)),
    ("GB200-NVL72", 36, 32, (632.31, 596.99), (479.02, 447.89)),
]


def test_distinct_ranks_by_hand():
    # EP 8, 64 experts, top-8: a rank is missed with C(56, 8) / C(64, 8) = 0.3209...
    missed = (56 * 55 * 54 * 53 * 52 * 51 * 50 * 49) / (64 * 63 * 62 * 61 * 60 * 59 * 58 * 57)
    assert 8 * (1 - comb(56, 8) / comb(64, 8)) == pytest.approx(8 * (1 - missed))
    assert 8 * (1 - missed) == pytest.approx(5.433, abs=1e-3)


@pytest.mark.parametrize("gpu_name,ep,sms,kernel,torch_api", HYBRID_EP)
def test_nvlink_exchange_within_hybrid_ep_measured(gpu_name, ep, sms, kernel, torch_api):
    arch = replace(load_model("deepseek-v3").architecture, num_experts=8 * ep)  # hidden 7168
    gpu = get_gpu(gpu_name)
    topo = topology_for(gpu, gpus_per_node=72 if gpu_name.startswith("GB200") else 8)
    eff = default_efficiency(device_from_gpu(gpu))
    model = ep_all_to_all_s(arch, 4096, Layout(ep=ep), topo, eff, 2) / _moe_layers(arch)
    experts = 8 * ep
    received = 4096 * ep * (1 - comb(experts - 8, 8) / comb(experts, 8)) * 7168 * 2
    lower = received / (kernel[0] * 1e9) + received / (kernel[1] * 1e9)
    upper = received / (torch_api[0] * 1e9) + received / (torch_api[1] * 1e9)
    # EP 8 reads up to 5% above the torch-API time (gpuplan sends the top-k rows undeduplicated)
    assert lower < model < 1.06 * upper, (model, lower, upper)
