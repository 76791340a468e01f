"""The GPUs of 2025-2026 (issue 30 part 3) against the figures their cited sheets print, and what
the topology model makes of them: an NVL72 rack as one NVLink domain, the H800's cut NVLink.

Every number asserted here is the sheet's own (per 8 GPUs or per 72-GPU rack, with sparsity where
the sheet says so), divided by hand in the test -- not read back from the catalog.
"""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.hardware import DTYPES, get_gpu
from gpuplan.hardware.topology import collective_time, nvlink_domain, topology_for

T = 1e12


def test_b200_gains_fp4_and_fp6_from_the_dgx_b200_sheet():
    b200 = get_gpu("b200")
    # DGX B200 (8 GPUs), with sparsity: FP4 144 PF, FP8/FP6 72 PF
    assert b200.peak("fp4") == pytest.approx(144e15 / 8 / 2)
    assert b200.peak("fp6") == pytest.approx(72e15 / 8 / 2)
    assert b200.peak("fp4") / b200.peak("fp8") == pytest.approx(2.0)
    assert b200.peak("fp6") == b200.peak("fp8")
    assert b200.peak("fp8") / b200.peak("bf16") == pytest.approx(2.0)
    # NVIDIA GB200 NVL72 page, HGX B200 column, per GPU (copied on zdszero.github.io, read 2026-12-06):
    # FP4 18 PF and FP8/FP6 9 PF with sparsity, FP32 75 TF, FP64/FP64 Tensor 37 TF
    assert b200.peak("fp4") == pytest.approx(18e15 / 2) and b200.peak("fp6") == pytest.approx(9e15 / 2)
    assert b200.peak("fp32") == pytest.approx(75 * T) and b200.peak("fp64") == pytest.approx(37 * T)
    # NVIDIA HGX page, HGX B200 (8 GPUs): FP32 600 TF, FP64 296 TF -- the same per-GPU figures
    assert b200.peak("fp32") == pytest.approx(600 * T / 8) and b200.peak("fp64") == pytest.approx(296 * T / 8)


def test_blackwell_ultra_fp4_is_the_printed_dense_figure_not_half_the_sparse():
    # NVIDIA HGX page, HGX B300 (8 GPUs), as copied on fibermall.com (read 2026-12-06): FP4 144 PF
    # sparse | 105 PF dense; glennklockwood.com's per-GPU table of the same sheet: 13,125
    b300 = get_gpu("b300")
    assert b300.peak("fp4") == pytest.approx(105e15 / 8) == pytest.approx(13125 * T)
    assert b300.peak("fp4") != pytest.approx(144e15 / 8 / 2)
    assert b300.peak("fp8") == pytest.approx(72e15 / 8 / 2)  # FP8/FP6 72 PF with sparsity
    assert b300.peak("bf16") == pytest.approx(36e15 / 8 / 2)
    assert b300.peak("fp32") == pytest.approx(600 * T / 8)
    assert b300.peak("fp64") == pytest.approx(10 * T / 8)  # FP64 cut from B200's 40
    assert not b300.supports("int8")  # cut, and the published readings disagree: absent
    assert "fp4" not in b300.extra["sparse_tflops"]
    # NVIDIA GB300 NVL72 table (72 GPUs), as quoted on vendordeep.com: FP4 1,440 PF sparse | 1,080 PF
    # dense; NVIDIA's Blackwell Ultra blog (developer.nvidia.com, Aug 2025): 15 PF dense NVFP4 per GPU
    gb300 = get_gpu("gb300")
    assert gb300.peak("fp4") == pytest.approx(1080e15 / 72) == pytest.approx(15e15)
    assert gb300.peak("fp8") == pytest.approx(720e15 / 72 / 2)
    assert gb300.peak("fp4") / gb300.peak("fp8") == pytest.approx(3.0)  # Ultra: 3x, not 2x
    assert gb300.memory_bandwidth == 576e12 / 72  # 576 TB/s per rack; the blog: 8 TB/s per GPU
    assert gb300.memory_label.startswith("288 GB") and gb300.tdp_watts == 1400


def test_gb200_is_a_72th_of_the_nvl72_rack():
    gb200 = get_gpu("gb200")
    # NVIDIA GB200 NVL72 page (copied on zdszero.github.io, read 2026-12-06), with sparsity: FP4
    # 1,440 PF, FP8 720 PF, BF16 360 PF, TF32 180 PF; 576 TB/s; per GPU FP32 80 TF, FP64 40 TF, 186 GB
    for dtype, rack in (("fp4", 1440e15), ("fp8", 720e15), ("bf16", 360e15), ("tf32", 180e15),
                        ("int8", 720e15)):
        assert gb200.peak(dtype) == pytest.approx(rack / 72 / 2), dtype
    assert gb200.peak("fp32") == pytest.approx(5760 * T / 72) == pytest.approx(80 * T)
    assert gb200.peak("fp64") == pytest.approx(40 * T) and gb200.memory_label.startswith("186 GB")
    per_gpu = {"fp4": 20e15, "fp8": 10e15, "int8": 10e15, "bf16": 5e15, "tf32": 2.5e15}  # same table
    for dtype, sparse in per_gpu.items():
        assert gb200.peak(dtype) == pytest.approx(sparse / 2), dtype
    assert gb200.memory_bandwidth == pytest.approx(576e12 / 72)
    assert gb200.interconnect_bandwidth == pytest.approx(130e12 / 72, rel=0.01)  # 1.8 TB/s
    # GB200 clocks higher than an HGX B200: every tensor rate is 10/9 of it
    assert gb200.peak("bf16") / get_gpu("b200").peak("bf16") == pytest.approx(2500 / 2250)
    assert nvlink_domain(gb200) == 72 and nvlink_domain(get_gpu("b200")) is None


def test_h800_and_h20():
    # no vendor sheet for either could be found (2026-12-06): the figures are trade pages' (philisun.com
    # and aiwiki.ai for the H800's cuts; willitrunai.com and zangshuxian.com for the H20), and the notes
    # say so
    h800, h100 = get_gpu("h800"), get_gpu("h100")
    assert "not a vendor datasheet" in h800.notes and "not a vendor datasheet" in get_gpu("h20").notes
    assert h800.interconnect_bandwidth == 400e9 and h100.interconnect_bandwidth == 900e9
    assert dict(h800.peak_flops, fp64=None) == dict(h100.peak_flops, fp64=None)  # same GH100
    assert h800.peak("fp64") == 1 * T
    h20 = get_gpu("h20")
    assert h20.memory_bandwidth == 4.0e12 and h20.peak("bf16") == 148 * T
    assert h20.peak("fp8") / h20.peak("bf16") == pytest.approx(2.0)


@pytest.mark.parametrize("name, ghz, watts", [("MI355X", 2.4, 1400), ("MI350X", 2.2, 1000)])
def test_cdna4_peaks_are_256_cus_times_their_rate_per_clock(name, ghz, watts):
    g = get_gpu(name)
    cus = 256
    # FLOP per CU per clock: FP16 4,096, FP8 8,192 (AMD at ISSCC 2026, as world-today-news.com reports
    # it), MXFP4 16,384, FP32 vector 256; clocks and board power from AMD's Hot Chips 2025 talk as
    # wccftech.com reports it; 256 CUs from AMD's ROCm GPU specifications table
    assert g.sm_count == cus and g.tdp_watts == watts
    for dtype, per_clock in (("bf16", 4096), ("fp8", 8192), ("fp4", 16384), ("fp6", 16384),
                             ("fp32", 256)):
        assert g.peak(dtype) == pytest.approx(cus * per_clock * ghz * 1e9, rel=1e-3), dtype
    assert g.memory_bandwidth == 8e12 and g.memory_label.startswith("288 GB")
    assert not g.supports("tf32")  # ROCm Compute Profiler's CDNA table: TF32 GEMM unsupported on CDNA 4


def test_rtx_pro_6000_blackwell_from_its_4000_ai_tops():
    g = get_gpu("rtx-pro-6000")
    assert g.name == "RTX-PRO-6000-Blackwell" and "Workstation" in g.notes
    # NVIDIA's figures as quoted by gpu.name / topcpu.net: FP32 125 TF, 4,000 AI TOPS (FP4 with sparsity),
    # 96 GB GDDR7, 512 bits at 28 Gbps
    assert g.peak("fp4") == pytest.approx(4000 * T / 2)
    assert g.peak("fp32") == 125 * T and g.memory_bandwidth == 28e9 * 512 / 8
    assert g.interconnect is None and g.max_threads_per_sm == 1536


def test_fp4_and_fp6_are_catalog_dtypes_and_absent_before_blackwell():
    assert DTYPES[-2:] == ("fp6", "fp4")
    for name in ("H100-SXM-80GB", "H200-SXM-141GB", "MI300X", "A100-SXM-80GB"):
        assert not get_gpu(name).supports("fp4")


def _bandwidth_term(op: str, size: int, topo) -> float:
    """The bytes/bandwidth part of a collective: the latency cancels in a difference."""
    big = 8e9
    return collective_time(op, 2 * big, size, topo) - collective_time(op, big, size, topo)


def test_h800_all_reduce_is_slower_by_the_nvlink_ratio():
    h800 = topology_for(get_gpu("h800"), gpus_per_node=8)
    h100 = topology_for(get_gpu("h100"), gpus_per_node=8)
    # same latencies, same protocol at this size: the bandwidth terms differ by 900/400
    ratio = _bandwidth_term("all-reduce", 8, h800) / _bandwidth_term("all-reduce", 8, h100)
    assert ratio == pytest.approx(900 / 400, rel=1e-9)


def test_an_nvl72_rack_puts_tp_64_inside_one_nvlink_domain():
    gb200 = get_gpu("gb200")
    rack = topology_for(gb200, gpus_per_node=72)
    link, nodes = rack.link(64)
    assert link.kind == "nvlink" and nodes == 1 and link.bandwidth == 900e9
    assert "NVL72 rack's one NVLink domain" in rack.stated
    board = topology_for(gb200, gpus_per_node=8)  # read as 8-GPU nodes: TP 64 crosses 8 of them
    assert "--gpus-per-node 72 times the rack as one" in board.stated
    assert "rack" not in topology_for(get_gpu("b200"), gpus_per_node=8).stated
    assert board.link(64)[0].kind == "infiniband" and board.link(64)[1] == 8
    # an all-reduce over TP 64 on the rack: bus bandwidth 900 GB/s; on 8-GPU boards the ring
    # crosses nodes on the 8 NICs each node's 8 members hold (NCCL: one channel per NIC), 8 x 50
    # GB/s of IB 400 = 400 GB/s, below the board's NVLink
    ratio = _bandwidth_term("all-reduce", 64, board) / _bandwidth_term("all-reduce", 64, rack)
    assert ratio == pytest.approx(900 / (8 * 50), rel=1e-9)
    with pytest.raises(InputError, match="NVLink domain is 72 GPUs"):
        topology_for(gb200, gpus_per_node=144)


def test_the_cluster_search_tries_tp_64_on_an_nvl72_rack():
    from gpuplan import cluster as C
    from gpuplan.job import Job
    from gpuplan.models import load_model

    m = load_model("llama-3.1-70b")  # 64 heads, 8 KV heads
    gb200 = get_gpu("gb200")
    tps = {}
    for per_node in (8, 72):
        job = Job(model=m, mode="train", gpus=64, seq=4096, gpus_per_node=per_node)
        c = C._ctx(m, gb200, job, "train", False)
        tps[per_node] = {cand.layout.tp for cand in C._train_candidates(c, 4096, 64)}
    assert 64 in tps[72] and max(tps[8]) == 8
