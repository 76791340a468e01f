"""The EP exchange gpuplan charges inside one DGX B200 node (EP 8, NCCL's all-to-all at the
B200's NVLink 5 rate) against HybridEP's measured exchange on a B200 node (deepseek-ai/DeepEP
branch hybrid-ep, docs/README_Hybrid-EP.md "B200 Platform" at 94a9f8f6: 8 ranks, 4096 tokens,
hidden 7168, top-8, HybridEP Torch API at 16 SMs, 535.94 GB/s BF16 dispatch and 530.86 GB/s
combine on the rows a rank receives) -- the check benchmarks/validate_fp8.py B200_EP8_CHECKS
reports for the B200 DeepSeek-V3 rows, pinned here from hand-computed values."""

from __future__ import annotations

from math import comb

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.parallel import hybridep_rows
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import collective_time, topology_for

B200 = get_gpu("B200-SXM-180GB")
TOKENS, HIDDEN, TOP_K, EXPERTS, EP = 4096, 7168, 8, 256, 8


def _measured_exchange_s() -> float:
    # a token reaches each rank holding one of its 8 experts (32 a rank) once: it misses a
    # given rank with C(224, 8) / C(256, 8); the mean of the measured dispatch and combine
    rows = TOKENS * EP * (1 - comb(EXPERTS - EXPERTS // EP, TOP_K) / comb(EXPERTS, TOP_K))
    nbytes = rows * HIDDEN * 2
    return 0.5 * (nbytes / 535.94e9 + nbytes / 530.86e9)


def test_rows_a_b200_rank_receives():
    want = TOKENS * EP * (1 - comb(224, 8) / comb(256, 8))
    assert hybridep_rows(TOKENS, EXPERTS, TOP_K, EP) == pytest.approx(want)
    assert 5.29 < want / TOKENS < 5.30  # ranks a token reaches, against the 8 copies sent
    assert _measured_exchange_s() == pytest.approx(0.583e-3, rel=2e-3)


def test_charged_all_to_all_on_a_b200_node_is_the_measured_exchange():
    topo = topology_for(B200, gpus_per_node=8)
    comm = default_efficiency(device_from_gpu(B200)).comm
    copies = TOKENS * TOP_K * HIDDEN * 2  # every (token, expert) pair's row in BF16
    charged = collective_time("all-to-all", copies, EP, topo, efficiency=comm)
    # by hand: 7/8 of the rows leave the rank over 0.8 of 900 GB/s, on NCCL's Simple protocol
    # (8.4 us + 3.4 us an NVLink hop, 7 steps: hardware/topology.py's tuning.cc figures)
    assert comm == pytest.approx(0.80)
    assert charged == pytest.approx(copies * 7 / 8 / (0.80 * 900e9) + 8.4e-6 + 7 * 3.4e-6,
                                    rel=1e-3)
    # NCCL's 8 copies at the modelled rate take what HybridEP's measured 5.3 take: the EP
    # exchange of the B200 rows is charged within 5% of the measurement, not short of it
    assert charged / _measured_exchange_s() == pytest.approx(1.0, abs=0.05)
    assert charged >= _measured_exchange_s()
