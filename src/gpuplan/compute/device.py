"""What a device can really do: peak rates from the catalog (GPU) or the CPU estimate, and the
*achievable* fractions of them, stated with their basis and replaced by this machine's measured
numbers (``gpuplan bench``) when a stored run exists."""

from __future__ import annotations

from dataclasses import field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Mapping

from .._record import record
from ..errors import InputError, UnsupportedError
from ..hardware import GPU, get_gpu, gpu_from_device_name
from .efficiency import (CONSTANTS, MEASURED_MATMUL, OLDER_TENSOR_CORES, TRAINING_SHAPE_GEMM,
                         constant)
from .measured import RunUse, run_use

if TYPE_CHECKING:  # pragma: no cover
    from ..hardware.cpu import CPU

__all__ = [
    "Device", "Efficiency", "device_from_gpu", "device_from_cpu", "default_efficiency",
    "apply_measured", "measured_apply", "DEFAULT_BASIS", "ASSUMED_CPU_MEMORY_BANDWIDTH",
    "POWER_SIBLINGS", "MEASURED_POWER_CURVES", "MEASURED_STREAM", "STREAM_ANCHOR",
    "stream_share", "MEASURED_CLOCK_CURVES", "power_clock_fraction",
    "at_power_limit", "measured_training_share",
]

#: CPU memory bandwidth assumed when nothing was measured: two channels of DDR4-3200
#: (2 x 8 bytes x 3.2 GT/s = 51.2 GB/s). Stated as an assumption wherever it is used.
ASSUMED_CPU_MEMORY_BANDWIDTH = 51.2e9

#: Where each default fraction comes from.
DEFAULT_BASIS: dict[str, str] = {
    "matmul_nvidia": (
        "0.80 of the dense peak: the best-shape bf16 matmul reaches 80.3% on H100 SXM (794.5 of "
        "989 TFLOP/s) and 86.9% on A100 SXM (271.2 of 312) in S. Bekman's Maximum Achievable "
        "Matmul FLOPS table (ml-engineering, compute/accelerator); the lower figure is used"),
    "matmul_amd": (
        "0.60 of the dense peak: MI300X reaches 60.1% (781.9 of 1300 TFLOP/s) in the same MAMF "
        "table"),
    "matmul_other": "0.70 of the dense peak: assumed (no published measurement for this vendor)",
    "matmul_cpu": (
        "0.80 of the estimated peak: PyTorch's fp32 matmul reached 86% of it (286 of 333 "
        "GFLOP/s, 4000 x 4000) on this project's 2-core AVX-512 Xeon, 93% on one core "
        "(benchmarks/speed_cpu_matmul.md); the estimate's clock and FMA pipes are assumptions"),
    "attention_gpu": (
        "0.50 of the dense peak for a fused (Flash) attention kernel: FlashAttention-2 reaches "
        "50-73% of A100's peak forward and less backward (Dao 2023), and about 35% of H100's "
        "(FlashAttention-3 paper, Shah et al. 2024, which reaches up to 75%)"),
    "memory_gpu": (
        "0.85 of the datasheet memory bandwidth: streaming copy kernels reach 84-93% (e.g. H100 "
        "PCIe memcpy 1.86 of 2.0 TB/s; coalesced loads on H100 SXM 2.8 of 3.35 TB/s)"),
    "memory_cpu": "0.70 of the DRAM bandwidth: STREAM-like copies typically reach 60-80%",
    "launch_gpu": (
        "5 us per kernel launch, added to the step: CUDA's driver and runtime take about 4-6 us "
        "per launch, and eager PyTorch adds its dispatch on top (NVIDIA, Getting Started with CUDA "
        "Graphs); CUDA graphs or torch.compile reduce it"),
    "launch_cpu": ("2 us per op: eager PyTorch's dispatch of a tiny CPU op measured 1.97 us "
                   "(benchmarks/speed_cpu_matmul.md)"),
    "pcie_pinned": (
        "0.80 of the PCIe link: pinned (page-locked) memory is copied by DMA; packet overhead "
        "leaves 75-85% of the signalling rate (NVIDIA's CUDA FAQ: 6.0 of 8.0 GB/s on PCIe 2.0 "
        "x16)"),
    "pcie_pageable": (
        "0.40 of the PCIe link: pageable memory is first copied into a pinned staging buffer by "
        "the CPU, which roughly halves the rate of a pinned copy (assumed; measure with gpuplan "
        "bench)"),
    "comm": (
        "0.80 of the per-direction link bandwidth for a ring all-reduce's bus bandwidth: NCCL "
        "reaches about 80% of NVLink's per-direction rate (e.g. ~240 of 300 GB/s on A100 NVLink 3)"),
}


#: The SKU whose achievable streaming share the default (``memory_default``, 0.85) stands for:
#: the default's basis is H100 measurements (``DEFAULT_BASIS["memory_gpu"]``: H100 PCIe's
#: memcpy, H100 SXM's coalesced loads), and this harness's H100 SXM Copy reads 0.866 of it.
STREAM_ANCHOR = "H100-SXM-80GB"

_AZURE_BABELSTREAM = (
    "Azure/AI-benchmarking-guide@8fd0c6e1bd0f853ef8f0500a3640a7d80a2a92ef (2024-09-27; both "
    "files last changed 2024-09-24), Azure_Results/ND_H100_v5_results.md and "
    "ND_H200_v5_results.md, 'HBM Bandwidth': BabelStream's CUDA build "
    "(Benchmarks/HBMBandwidth.py), on VMs with the same host CPU (Xeon Platinum 8480C), CUDA "
    "12.6, PyTorch 2.4.0 and VBIOS 96.00.9D.00.02")

#: Achievable memory bandwidth measured by one harness on the anchor and its same-die siblings
#: (the same GH100 with 132 SMs at the same clocks; only the HBM differs): SKU -> (bytes/s,
#: source). BabelStream's Copy kernel (one read, one write a byte: the streaming copy that
#: ``memory_default``'s basis names). Both tables' five kernels, TB/s, H100 SXM (3.35 TB/s) /
#: H200 SXM (4.8 TB/s): Copy 2.90 / 4.01, Mul 2.90 / 4.00, Add 2.97 / 4.15, Triad 2.97 / 4.15,
#: Dot 3.18 / 4.48 -- the H200 reaching 0.963 (Mul) to 0.983 (Dot, read only) of the H100's
#: share of its datasheet. Only a ratio within one harness is read: another card's
#: measurement by another tool says nothing against the anchor's.
MEASURED_STREAM: Mapping[str, tuple[float, str]] = MappingProxyType({
    "H100-SXM-80GB": (2.90e12, _AZURE_BABELSTREAM + ": Copy 2.90 TB/s (ND H100 v5)"),
    "H200-SXM-141GB": (4.01e12, _AZURE_BABELSTREAM + ": Copy 4.01 TB/s (ND H200 v5)"),
})


def stream_share(name: str, memory_bandwidth: float) -> tuple[float, str] | None:
    """The streaming share of the datasheet ``memory_bandwidth`` that the GPU ``name`` reaches,
    where :data:`MEASURED_STREAM` holds it beside :data:`STREAM_ANCHOR`, and its basis: the
    anchor's share (``memory_default``) times this SKU's measured share over the anchor's, so
    the default is not moved and only the measured difference between the siblings is added.
    None for the anchor and for a SKU not measured (the default stands).

    H200 SXM by hand: (4.01 / 4.8) / (2.90 / 3.35) = 0.83542 / 0.86567 = 0.96505, x 0.85 =
    0.8203; the GEMV share it scales (time.py ``_bandwidth``: x memory / memory_default) is
    0.685 x 0.96505 = 0.6611."""
    if name == STREAM_ANCHOR or name not in MEASURED_STREAM:
        return None
    measured, source = MEASURED_STREAM[name]
    anchor_measured, anchor_source = MEASURED_STREAM[STREAM_ANCHOR]
    anchor_datasheet = get_gpu(STREAM_ANCHOR).memory_bandwidth
    ratio = (measured / memory_bandwidth) / (anchor_measured / anchor_datasheet)
    share = constant("memory_default") * ratio
    return share, (f"{share:.3f} of the datasheet memory bandwidth: the default "
                   f"{constant('memory_default')} (the {STREAM_ANCHOR}'s) x {ratio:.4f}, this "
                   f"SKU's measured streaming share over the {STREAM_ANCHOR}'s in one harness "
                   f"({source}; {anchor_source.rsplit(': ', 1)[-1]})")


@record
class Device:
    """A device as the speed model sees it: peaks, bandwidth, parallelism, links."""

    name: str
    kind: Literal["gpu", "cpu"]
    vendor: str = ""
    peak_flops: Mapping[str, float]
    """Dense peak FLOP/s of the matrix units per dtype (a CPU: the *estimated* peak)."""
    vector_flops: float
    """Peak FP32 FLOP/s of the vector units (CUDA cores / SIMD), for elementwise ops."""
    memory_bandwidth: float
    """Device-memory (or host DRAM) bandwidth, bytes/s."""
    parallel_slots: int
    """Independent outputs the device keeps in flight: resident threads (SMs x threads per SM),
    or cores x FP32 SIMD lanes on a CPU."""
    host_link_bandwidth: float | None = None
    """Theoretical one-direction host link (PCIe) bandwidth, bytes/s; None on a CPU."""
    host_link: str = ""
    """``PCIe 5.0 x16`` ..."""
    interconnect: str | None = None
    interconnect_bandwidth: float | None = None
    """GPU-to-GPU bandwidth, both directions summed (as vendors quote it)."""
    sm_count: int = 0
    architecture: str = ""
    """Chip generation (``Ampere``, ``Hopper`` ...): picks the attention kernels' fractions."""
    source: str = ""
    peak_basis: str = ""
    """How the peak was obtained (catalog dense figure, or the CPU estimate's arithmetic)."""
    l2_resident_bytes: int = 0
    """The largest footprint a kernel sweeping it again and again was measured to read from the
    L2 at the L2's rate (the catalog's ``l2_cache``); 0: no measurement, no L2 reuse timed."""
    l2_bandwidth: float = 0.0
    """Bytes/s that measurement moved from the L2 (an achieved rate, not a peak); 0: none."""
    memory_latency_s: float = 0.0
    """Seconds one dependent load from device memory takes (the catalog's ``memory_latency``: a
    pointer chase, cycles at the SM clock over that clock); 0: no measurement, no kernel timed by
    its chain of loads (:func:`~.efficiency.single_query_attention_s`)."""
    issue_rate: float = 0.0
    """Thread instructions a second the SMs can issue (:func:`issue_rate_of`); 0: the chip's FP32
    lanes per SM are not on record, and no kernel is timed by its instruction count."""
    compute_capability: str = ""
    """The catalog's compute capability ("9.0", "12.0"; AMD's LLVM target): what Transformer
    Engine's TN-only FP8 test reads (:func:`gpuplan.fp8.non_tn_fp8_gemm`); "": not known (a CPU,
    a custom GPU without one), the architecture name decides."""

    def supports(self, dtype: str) -> bool:
        return dtype in self.peak_flops

    def peak(self, dtype: str) -> float:
        """Dense peak for ``dtype``; a one-line error naming the alternatives when absent."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            have = [d for d in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
                    if d in self.peak_flops]
            raise UnsupportedError(
                f"{self.name} has no {dtype} peak (it supports {', '.join(have) or 'none'})"
            ) from None


def device_from_gpu(gpu: GPU) -> Device:
    """The speed model's view of a catalog GPU."""
    # A number the catalog or a custom: spec does not give is never filled in: the speed model
    # refuses (UnsupportedError, so a plan reports it per GPU and goes on).
    custom = gpu.vendor == "custom"
    missing = [what + (f" ({hint})" if custom else "") for what, hint, absent in (
        ("an fp32 peak", "fp32=...TF", "fp32" not in gpu.peak_flops),
        ("a memory bandwidth", "bw=...GB/s", gpu.memory_bandwidth is None),
        ("SM and thread counts", "sms=N,threads=N", gpu.resident_threads is None),
        ("a PCIe host link", "pcie=4x16", gpu.pcie_bandwidth is None)) if absent]
    if missing:
        where = "its spec" if custom else "the catalog"
        raise UnsupportedError(f"{gpu.name}: no speed estimate without {', '.join(missing)}, "
                               f"which {where} does not give")
    pcie = gpu.pcie_bandwidth
    return Device(
        name=gpu.name, kind="gpu", vendor=gpu.vendor, peak_flops=gpu.peak_flops,
        vector_flops=gpu.peak_flops["fp32"], memory_bandwidth=gpu.memory_bandwidth,
        parallel_slots=gpu.resident_threads, host_link_bandwidth=pcie,
        host_link="" if pcie is None else f"PCIe {gpu.pcie_gen}.0 x{gpu.pcie_lanes}",
        interconnect=gpu.interconnect,
        interconnect_bandwidth=gpu.interconnect_bandwidth, sm_count=gpu.sm_count,
        architecture=gpu.architecture, source=gpu.source, peak_basis=f"catalog dense peak ({gpu.name})",
        issue_rate=issue_rate_of(gpu.compute_capability, gpu.peak_flops["fp32"], gpu.sm_count),
        compute_capability=gpu.compute_capability or "",
        **_l2_of(gpu), **_latency_of(gpu))


#: FP32 lanes (CUDA cores) per SM by compute capability, as NVIDIA's architecture whitepapers
#: state them: 8.0 (GA100) 64, "NVIDIA A100 Tensor Core GPU Architecture" (2020); 8.6/8.7 (GA10x)
#: 128, "NVIDIA Ampere GA102 GPU Architecture" (2021: two FP32 datapaths per partition, one of
#: them shared with INT32); 8.9 (AD10x) 128, "NVIDIA Ada GPU Architecture" (2023); 9.0 (GH100)
#: 128, "NVIDIA H100 Tensor Core GPU Architecture" (2022). Each of those SMs is four partitions
#: with one warp scheduler and one dispatch unit each, one 32-thread instruction a clock (the
#: GA102 whitepaper's partition, as quoted in the offline index: "one warp scheduler, one
#: dispatch unit"; its SM diagram labels both "32 thread/clk"): 128 thread instructions a clock
#: per SM. These figures were read from the whitepapers' well-known SM descriptions, not
#: re-checked against the PDFs this session (the offline index does not hold them).
_FP32_LANES_PER_SM = {"8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128}
_ISSUE_PER_SM_CLOCK = 4 * 32


def issue_rate_of(compute_capability: str | None, fp32_flops: float, sm_count: int) -> float:
    """Thread instructions a second ``sm_count`` SMs issue: 128 a clock each (four schedulers of
    one 32-thread instruction), at the clock the dense FP32 peak implies (``fp32_flops`` /
    (2 FLOPs x FP32 lanes x SMs); RTX 4090: 82.6e12 / (2 x 128 x 128) = 2.52 GHz, its rated
    boost); 0 for a chip whose lanes per SM are not in :data:`_FP32_LANES_PER_SM`."""
    lanes = _FP32_LANES_PER_SM.get(compute_capability or "")
    if not lanes or sm_count <= 0 or fp32_flops <= 0:
        return 0.0
    clock = fp32_flops / (2 * lanes * sm_count)
    return _ISSUE_PER_SM_CLOCK * sm_count * clock


def _l2_of(gpu: GPU) -> dict:
    """The catalog record's measured L2 (``l2_cache``: ``resident_bytes``, ``read_GBps``, each
    with its source) as :class:`Device` fields; none when the record gives no measurement."""
    rec = gpu.extra.get("l2_cache")
    if not isinstance(rec, Mapping):
        return {}
    size, rate = rec.get("resident_bytes"), rec.get("read_GBps")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 \
            or isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
        raise ValueError(f"{gpu.name}: l2_cache needs a positive resident_bytes and read_GBps")
    return {"l2_resident_bytes": size, "l2_bandwidth": float(rate) * 1e9}


def _latency_of(gpu: GPU) -> dict:
    """The catalog record's measured memory latency (``memory_latency``: ``cycles`` of the SM
    clock at ``clock_MHz``, each with its source) as :attr:`Device.memory_latency_s`; none when
    the record gives no measurement."""
    rec = gpu.extra.get("memory_latency")
    if not isinstance(rec, Mapping):
        return {}
    cycles, mhz = rec.get("cycles"), rec.get("clock_MHz")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0
           for v in (cycles, mhz)):
        raise ValueError(f"{gpu.name}: memory_latency needs a positive cycles and clock_MHz")
    return {"memory_latency_s": float(cycles) / (float(mhz) * 1e6)}


#: A power-capped SKU's sibling: the same die with the same SM count, rated by its vendor at a
#: lower board power. The vendor's dense tensor peak is the clock the part sustains at its rated
#: power (H100 datasheet, nvidia.com/en-us/data-center/h100, read 2026-12-06: H100 SXM 989.4
#: TFLOP/s BF16 at up to 700 W, H100 NVL 835.5 at 350-400 W, both the full 132-SM GH100:
#: 1.830 and 1.545 GHz x 132 x 4,096 FLOP a clock). torchtitan's docs/performance.md
#: (@eaea6f6, footnote 2) says of its 500 W HBM2e SXM H100 that "the actual peak TFLOPs number
#: is between SXM and NVL". A SKU without a sibling here keeps its TDP peaks under a cap, and
#: the estimate says so. A measured curve (MEASURED_CLOCK_CURVES, MEASURED_POWER_CURVES) is read
#: before this line: H100-SXM-96GB has one.
POWER_SIBLINGS: Mapping[str, str] = MappingProxyType({
    "H100-SXM-80GB": "H100-NVL-94GB",
    "H100-SXM-96GB": "H100-NVL-94GB",
})


#: A measured curve of training throughput against the power limit (``nvidia-smi -pl``): the
#: SKU, then the source and (watts, seconds per iteration, or per token) pairs as published,
#: the first at the SKU's TDP. The share of the TDP throughput at a limit is t(TDP) / t(limit), read linearly
#: between the measured limits. It is end-to-end throughput, so the memory-bound kernels and
#: the pipeline's communication (which a cap slows less) are in it: the tensor clock's share is
#: at most this, and the curve is an upper bound on it.
#:
#: A100-PCIe-80GB: Perseus (Chung et al., SOSP 2024) artifact, github.com/ml-energy/zeus @
#: 38cb3f90c30d9041d4b141cfe5c922dba55baa45, sosp24_data/zeus/csv/A100/zeus_global.csv, the
#: "ZeusGlobal" baseline (one power limit set on all four GPUs), row gpt3-xl (Merak, 4-stage
#: pipeline, batch 1024, 128 microbatches of 8); the README there names the nodes: 4x NVIDIA
#: A100-80G PCIe (300 W TDP). The GPT-3 row is the transformer LM of the five models measured
#: (the others, BERT-huge, BLOOM-3B, T5-3B, Wide-ResNet, read 0.90-0.94 at 250 W against its
#: 0.924).
#:
#: H100-SXM-96GB: Mayr et al., "AI Application Benchmarking: Power-Aware Performance Analysis for
#: Vision and Language Models", arXiv:2603.16164 (2026), Table 4, row "Pre-training / H100":
#: tokens/s of LLaMA 3 8B continued pre-training (LitGPT, bf16-true, FSDP over 4 GPUs of one
#: node, micro-batch 4 x 512 tokens: RRZE-HPC/hpc-ai-perf-bench@52d1f50 llm/training/configs/
#: llama3_8b_4gpu.yaml and slurm_scripts/powercap_training_4x.sh, the caps 200-700 W) on an H100
#: SXM of 94 GB HBM2e, 700 W (the HBM2e part of this SKU's 2.4 TB/s; the same part is an
#: assumption). The table was read here as transcribed in connorlagana/flexcompute-microgrid
#: @5c8dbb0 src/flexcompute/gpu.py (the paper's HTML could not be opened from this sandbox);
#: the ratios are used, not the absolute rate (6 x 8.03e9 x 30,271 tokens/s is above one H100's
#: dense peak, so the rate is the node's, not a GPU's as that transcription labels it). Stored
#: as seconds per token, 1 / tokens/s. :data:`MEASURED_CLOCK_CURVES` holds a measured clock for
#: this SKU and is read first: this curve bounds it (0.915 at 500 W against the clock's 0.879).
MEASURED_POWER_CURVES: Mapping[str, tuple[str, tuple[tuple[float, float], ...]]] = \
    MappingProxyType({
        "A100-PCIe-80GB": (
            "Perseus SOSP'24 artifact, ml-energy/zeus@38cb3f9 zeus_global.csv, GPT-3 XL",
            ((300.0, 60.095173279444374), (275.0, 62.02395955721537),
             (250.0, 65.02246014277141), (225.0, 73.32878303527832),
             (200.0, 87.91865595181783), (175.0, 106.298974831899))),
        "H100-SXM-96GB": (
            "Mayr et al. arXiv:2603.16164 Table 4, LLaMA 3 8B pre-training on H100 94 GB HBM2e",
            ((700.0, 1 / 30271.0), (600.0, 1 / 29250.0), (500.0, 1 / 27705.3),
             (400.0, 1 / 24853.4), (300.0, 1 / 17982.3), (200.0, 1 / 9699.3))),
    })


# At the TDP itself no clock factor is applied, for training or serving (issue 31, searched
# 2026-12-07). The idea tested: a full training load (tensor cores, HBM, NVLink and NIC together)
# holds the 700 W H100 SXM at a lower SM clock than the GEMM-only loop its matmul share comes
# from (the MAMF table). No published figure was found that gives the H100's SM clock or power
# during LLM training set against a GEMM loop's. What was found points the other way:
# Ujeniya et al.'s dense TF32 load (below) draws 647 W under the 700 W cap at 1,969 MHz, so the
# cap does not bind there. Mayr et al.'s LLaMA 3 8B pre-training keeps 0.966 of its 700 W
# throughput at 600 W (MEASURED_POWER_CURVES). Horace He (thonking.ai, "Strangely, Matrix
# Multiplications on GPUs Run Faster When Given 'Predictable' Data!", read 2026-12-07) finds
# H100 matmuls power-limited in a plain GEMM loop, so a back-to-back GEMM loop such as the
# MAMF table's is where the cap binds hardest; training mixes in lower-power phases. A trial
# with the H100-SXM-80GB's peaks scaled by 0.84 (the IBM FSDP H100/A100 twin ratio; not
# shipped) moved Llama 3 405B's 700 W rows from 0.93/0.93/1.01 to 0.84/0.84/0.89,
# Megatron-Core's 16B-462B rows from 0.84-1.04 to 0.77-0.93, and Megatron-Bridge's Llama 3 70B
# FP8 rows from 0.97 to 0.84. A power-clock effect would hit the largest, most GEMM-heavy
# models hardest, and those are the rows that fit now.

#: A measured sustained SM clock against the power limit (``nvidia-smi -pl``) under a
#: compute-bound tensor-core load: the SKU, then the source and (watts, MHz) pairs as published,
#: the first at the SKU's TDP. The share at a limit is f(limit) / f(TDP), read linearly between
#: the measured limits: the clock share :func:`power_clock_fraction` returns, measured rather than
#: bounded by end-to-end throughput (:data:`MEASURED_POWER_CURVES`), so it is read first.
#:
#: H100-SXM-96GB: Ujeniya, Eitzinger, Hager, Wellein, "Architectural Trade-offs in the
#: Energy-Efficient Era: A Comparative Study of power-capping NVIDIA H100 and H200",
#: arXiv:2604.11391v2 (2026), Fig. 6b: the average SM clock of an H100 of 94 GiB HBM2e
#: (2.41 TB/s, 700 W) running ViT-L/16 inference, batch 256, TF32, at caps 200-700 W; the
#: figure's printed annotations as transcribed in connorlagana/flexcompute-microgrid @5c8dbb0
#: src/flexcompute/gpu.py (the paper could not be opened from this sandbox). Its 700 W point
#: is the part's top boost clock (1,969 MHz at 647 W drawn): the cap first binds below it. A
#: TF32 vision load, not BF16/FP8 training: how far a denser load's clock falls at each cap is
#: not measured there. Mayr et al.'s LLaMA pre-training throughput on an H100 of the same
#: memory (MEASURED_POWER_CURVES) reads above this clock at every cap, as an end-to-end bound
#: should.
#:
#: A GEMM-load curve was searched for and not found (issue 31, 2026-12-07): no source read gives
#: dense BF16 or FP8 GEMM throughput, or the SM clock under a GEMM loop, on an H100 SXM at a
#: 500 W limit or over a sweep of limits, so the ViT load above stays the SKU's curve. Read: the
#: same paper's DGEMM (FP64) sweep over 200-700 W, whose values no stored copy holds (abstract and
#: summaries only: arxiv.org/abs/2604.11391, emergentmind.com/papers/2604.11391); Patel et al.,
#: "Characterizing Power Management Opportunities for LLMs in the Cloud" (ASPLOS'24, POLCA,
#: arXiv:2308.12908), whose testbed is DGX A100 (8x A100-80GB); the Perseus SOSP'24 artifact
#: (ml-energy/zeus@38cb3f9 sosp24_data: A100 and A40 runs only); Horace He's matmul power study
#: (thonking.ai, A100 at 400 W); torchtitan docs/performance.md @eaea6f6, whose 500 W is "the
#: default 500W power limit" of Meta's Grand Teton hosts (a fleet setting, no 700 W run beside it);
#: Meta's benchmark scripts, which set H100s to 500 W (pytorch/helion PR 347 run_input_shard.sh,
#: facebookexperimental/triton denoise.sh) while PR facebookexperimental/triton#2023 measures
#: cuBLAS GEMM at 500 W only on a GB300 (~617 against 1,600-2,174 TFLOP/s at 1,400 W);
#: deepseek-ai/DeepGEMM#120, a Hopper SXM's clock falling from 1,980 to 1,575 MHz when FP8 GEMMs
#: overlap communication and the power "exceeded the limit" (a GEMM load does reach its limit; no
#: figure at a lowered cap); huggingface/gpu-fryer's README (an H100 80GB HBM3 BF16 GEMM loop,
#: ~730 TFLOP/s, no limit stated).
#: The cap is ruled out as the torchtitan rows' miss (validate_speed._power_cap_gap computes each
#: row's): the 500 W estimate of torchtitan's Llama 3.1 8B FSDP rows is 0.90-0.92 of the same
#: estimate uncapped, against 0.915 measured end to end for LLaMA 3 8B FSDP pre-training on an
#: H100 of the same HBM2e memory (MEASURED_POWER_CURVES); their four BF16 rows (1.15-1.24) would
#: reach 1.0 only at a clock share of 0.68-0.72 (1,346-1,412 MHz of the 1,969), the curve's
#: 300-400 W range, an end-to-end loss of 20-27% at 500 W (a what-if with the share forced,
#: not shipped).
MEASURED_CLOCK_CURVES: Mapping[str, tuple[str, tuple[tuple[float, float], ...]]] = \
    MappingProxyType({
        "H100-SXM-96GB": (
            "Ujeniya et al. arXiv:2604.11391v2 Fig. 6b, ViT-L/16 TF32 on H100 94 GiB HBM2e",
            ((700.0, 1969.0), (600.0, 1889.0), (500.0, 1731.0), (400.0, 1501.0),
             (300.0, 1132.0), (200.0, 625.0))),
    })


def _read_curve(points: tuple[tuple[float, float], ...], watts: float, *,
                per_time: bool) -> tuple[float, float | None]:
    """The share of the TDP point (the first) read linearly in watts from ``points`` at
    ``watts``, and None; below the lowest limit, that limit's share and its watts. ``per_time``:
    the values are times (share = v(TDP) / v), else rates (share = v / v(TDP))."""
    v_tdp = points[0][1]
    share = (lambda v: v_tdp / v) if per_time else (lambda v: v / v_tdp)
    for (p_hi, v_hi), (p_lo, v_lo) in zip(points, points[1:]):
        if p_lo <= watts <= p_hi:
            return share(v_lo + (v_hi - v_lo) * (watts - p_lo) / (p_hi - p_lo)), None
    return share(points[-1][1]), points[-1][0]


def _measured_fraction(gpu: GPU, watts: float) -> tuple[float, str] | None:
    """The clock share at ``watts`` (at or below the TDP) read from
    :data:`MEASURED_CLOCK_CURVES`, else from :data:`MEASURED_POWER_CURVES`, and how it was
    read; None when neither covers ``gpu``."""
    for name, curves, what, per_time in (
            ("MEASURED_CLOCK_CURVES", MEASURED_CLOCK_CURVES, "sustained SM clock", False),
            ("MEASURED_POWER_CURVES", MEASURED_POWER_CURVES, "training throughput", True)):
        curve = curves.get(gpu.name)
        if curve is None:
            continue
        source, points = curve
        f, p_min = _read_curve(points, watts, per_time=per_time)
        if p_min is None:
            return f, f"read from a measured curve of {what} ({source}); {name}"
        return f, (f"the lowest measured limit's, {p_min:g} W, kept, an upper bound below it "
                   f"({source}); {name}")
    return None


def measured_training_share(gpu: GPU, watts: float) -> tuple[float, str] | None:
    """The share of its TDP throughput the training run on record for ``gpu`` in
    :data:`MEASURED_POWER_CURVES` kept at a ``watts`` limit (t(TDP) / t(limit), read linearly
    between the measured limits), and that curve's source; None when no curve covers ``gpu`` or
    ``watts`` lies outside the measured limits."""
    curve = MEASURED_POWER_CURVES.get(gpu.name)
    if curve is None or not curve[1][-1][0] <= watts <= curve[1][0][0]:
        return None
    f, _ = _read_curve(curve[1], watts, per_time=True)
    return f, curve[0]


def power_clock_fraction(gpu: GPU, watts: float | None) -> tuple[float, str]:
    """The share of ``gpu``'s TDP tensor clock it sustains at a ``watts`` power limit, and the
    note that says how it was read.

    Where :data:`MEASURED_CLOCK_CURVES` has the SKU, the share is read from that measured
    clock; else where :data:`MEASURED_POWER_CURVES` has it, from that measured throughput (an
    upper bound on the clock's share). Otherwise, between the sibling's rated power and the
    TDP, the clock is read linearly between the two vendor ratings (:data:`POWER_SIBLINGS`): an
    interpolation, not a measured curve (no source found gives the HBM3 H100 SXM's sustained
    tensor clock at each cap; a cube law, power ~ f V^2 with V ~ f, gives (500/700)^(1/3) =
    0.894 at 500 W against the line's 0.896; the HBM2e part's measured clock reads 0.879,
    MEASURED_CLOCK_CURVES). Below the sibling's
    power the sibling's clock is kept, an upper bound. Memory-bound kernels are not slowed:
    HBM has its own clock, which a power cap does not lower (arXiv 2605.11999: memory-bound
    decode on an H200 draws 137-300 W and never reaches a cap)."""
    tdp = gpu.tdp_watts
    if watts is None or watts == tdp:
        return 1.0, ""
    if tdp is None:  # a custom card, or a catalog entry whose vendor states no board power
        return 1.0, (f"power limit {watts:g} W: {gpu.name} has no TDP on record, so the clock "
                     "at the limit cannot be read; its peaks kept (an upper bound)")
    if watts > tdp:
        return 1.0, (f"power limit {watts:g} W is above {gpu.name}'s {tdp:g} W TDP, where its "
                     "rated peaks hold: they are kept (the limit changes nothing)")
    measured = _measured_fraction(gpu, watts)
    if measured is not None:
        f, how = measured
        return f, (f"power limit {watts:g} W (TDP {tdp:g} W): tensor and vector peaks at "
                   f"{f:.3f} of the TDP clock ({how}); memory bandwidth unchanged")
    sib_name = POWER_SIBLINGS.get(gpu.name)
    if sib_name is None:
        return 1.0, (f"power limit {watts:g} W, below the {tdp:g} W TDP: no source gives "
                     f"{gpu.name}'s sustained clock at it; the TDP peaks kept (an upper bound)")
    sib = get_gpu(sib_name)
    f_sib = sib.peak_flops["bf16"] / gpu.peak_flops["bf16"]
    p_sib = sib.tdp_watts
    if watts >= p_sib:
        f = f_sib + (1.0 - f_sib) * (watts - p_sib) / (tdp - p_sib)
        how = (f"read between {sib_name}'s rating at {p_sib:g} W ({f_sib:.3f} of the clock) and "
               f"{gpu.name}'s at {tdp:g} W")
    else:
        f = f_sib
        how = f"{sib_name}'s at {p_sib:g} W kept, an upper bound below it"
    return f, (f"power limit {watts:g} W (TDP {tdp:g} W): tensor and vector peaks at {f:.3f} "
               f"of the TDP clock ({how}; POWER_SIBLINGS); memory bandwidth unchanged")


def at_power_limit(device: Device, gpu: GPU, watts: float | None) -> tuple[Device, str]:
    """``device`` (built from ``gpu``) at a ``watts`` power limit: its matrix and vector peaks
    at the clock :func:`power_clock_fraction` reads, its memory and links unchanged; and the
    note (empty when the limit is the TDP or none is given)."""
    f, note = power_clock_fraction(gpu, watts)
    if f == 1.0:
        return device, note
    peaks = MappingProxyType({k: v * f for k, v in device.peak_flops.items()})
    return replace(device, peak_flops=peaks, vector_flops=device.vector_flops * f,
                   peak_basis=f"{device.peak_basis} at {watts:g} W"), note


def device_from_cpu(cpu: CPU, *, memory_bandwidth: float | None = None) -> Device:
    """The speed model's view of this machine's CPU (fp32 and fp64 only: the estimate's dtypes)."""
    if cpu.peak_fp32_flops is None:
        raise InputError(f"CPU {cpu.model_name!r}: no peak estimate ({cpu.peak_basis}); "
                         "run `gpuplan bench` to measure it")
    peaks = {"fp32": cpu.peak_fp32_flops}
    if cpu.peak_fp64_flops:
        peaks["fp64"] = cpu.peak_fp64_flops
    lanes = (cpu.simd_bits or 128) // 32
    return Device(
        name=cpu.model_name, kind="cpu", vendor=cpu.vendor, peak_flops=MappingProxyType(peaks),
        vector_flops=cpu.peak_fp32_flops,
        memory_bandwidth=memory_bandwidth or ASSUMED_CPU_MEMORY_BANDWIDTH,
        parallel_slots=max(1, cpu.physical_cores * lanes), source="this machine",
        peak_basis=cpu.peak_basis)


@record
class Efficiency:
    """The achievable fractions the step time uses, each with where it came from."""

    matmul: float
    """Fraction of the dense peak a large matmul reaches."""
    attention: float
    """Fraction of the dense peak a fused attention kernel reaches."""
    memory: float
    """Fraction of the memory bandwidth a streaming kernel reaches."""
    launch_s: float
    """Seconds of overhead per kernel launch (per op on a CPU), added to the step."""
    pcie_pinned: float
    """Fraction of the PCIe link a copy from pinned host memory reaches."""
    pcie_pageable: float
    """Fraction of the PCIe link a copy from pageable host memory reaches."""
    comm: float
    """Fraction of the per-direction link bandwidth a ring all-reduce reaches (bus bandwidth)."""
    matmul_by_dtype: Mapping[str, float] = field(default_factory=dict)
    """Measured fractions per dtype, which take precedence over ``matmul``."""
    basis: Mapping[str, str] = field(default_factory=dict)
    """Field name -> where the number comes from (``default: ...`` or ``measured: ...``)."""
    quant_gemv: float = 0.0
    """Share of the datasheet bandwidth the job's quantized-weight kernel reaches in decode's
    skinny matmuls (compute/efficiency.py ``QUANT_KERNELS``); 0: the weight width's default."""
    quant_gemv_rows: int = 0
    """Decode batches of up to this many rows read the quantized weights once per row (the
    kernel's ``row_passes``: AutoAWQ's GEMV); 0: once for the whole batch."""
    quant_weight_bytes: float = 0.0
    """Bytes per element of those quantized weights (the format's bits / 8), what each row's
    re-read moves."""
    quant_splitk: int = 0
    """The quantized kernel writes this many split-K partial outputs, which a separate reduction
    kernel sums after each launch (the kernel's ``splitk_partials``: AutoAWQ's GEMM); 0: none."""
    quant_issue: float = 0.0
    """Thread instructions the quantized kernel issues per weight per row of the batch (its
    unpacking, dequantization and dot product: the kernel's ``issue_per_weight``); 0: not
    counted, the kernel timed by its bytes alone."""
    attention_kernel: str = ""
    """A step's fused 16-bit attention kernel where it is not the generation's: a training
    step's (compute/efficiency.py ``TRAIN_ATTENTION_KERNELS``: ``fa1``, FlashAttention v1) or a
    serving engine's (engines/profiles.py ``ATTENTION_16BIT``: ``fa3``, FlashAttention-3 on
    Hopper under vLLM); "": the generation's (FlashAttention-2 on Ampere and Hopper)."""

    def __post_init__(self) -> None:
        for name in ("matmul", "attention", "memory", "pcie_pinned", "pcie_pageable", "comm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1.5):
                raise InputError(f"efficiency {name}={v!r}: expected a fraction > 0 (at most "
                                 "1.5, for a measured rate above the catalog's peak)")
        if self.launch_s < 0:
            raise InputError(f"launch overhead {self.launch_s!r} s: expected >= 0")

    def matmul_fraction(self, dtype: str) -> float:
        return self.matmul_by_dtype.get(dtype, self.matmul)

    @property
    def measured(self) -> tuple[str, ...]:
        """The fields replaced by measurements."""
        return tuple(k for k, v in self.basis.items() if v.startswith("measured"))

    def to_dict(self) -> dict:
        return {"matmul": self.matmul, "matmul_by_dtype": dict(self.matmul_by_dtype),
                "attention": self.attention,
                "memory": self.memory, "launch_s": self.launch_s,
                "pcie_pinned": self.pcie_pinned, "pcie_pageable": self.pcie_pageable,
                "comm": self.comm, "basis": dict(self.basis), "measured": list(self.measured)}


def default_efficiency(device: Device) -> Efficiency:
    """The stated defaults for a device (see :data:`DEFAULT_BASIS`)."""
    if device.kind == "cpu":
        return Efficiency(
            matmul=0.80, attention=0.80, memory=0.70, launch_s=2e-6, pcie_pinned=0.80,
            pcie_pageable=0.40, comm=0.80,
            basis={"matmul": "default: " + DEFAULT_BASIS["matmul_cpu"],
                   "attention": "default: as the matmuls (a CPU attention is plain GEMMs)",
                   "memory": "default: " + DEFAULT_BASIS["memory_cpu"],
                   "launch_s": "default: " + DEFAULT_BASIS["launch_cpu"]})
    vendor = device.vendor.lower()
    key = "matmul_nvidia" if vendor == "nvidia" else "matmul_amd" if vendor == "amd" \
        else "matmul_other"
    frac = {"matmul_nvidia": 0.80, "matmul_amd": 0.60, "matmul_other": 0.70}[key]
    by_dtype, extra = {}, {}
    older = OLDER_TENSOR_CORES.get((device.architecture.lower(), "fp16"))
    if key == "matmul_nvidia" and older is not None:
        # Volta's and Turing's Tensor Cores reach another share of their peak than Ampere/Hopper's
        # best shapes (DeepBench's cuBLAS GEMMs)
        by_dtype["fp16"] = constant(older[0])
        extra["matmul_fp16"] = "default: " + CONSTANTS[older[0]].source
    if key == "matmul_nvidia":
        # SKUs whose best-shape matmul was measured at a dtype (the MAMF table): Blackwell's
        # BF16 and FP8, Hopper's FP8, each below the H100 BF16 row the default comes from;
        # the H200 NVL's sustained training GEMMs (TE's guide: its own clock at 600 W)
        for (gpu, dtype), name in MEASURED_MATMUL.items():
            if gpu == device.name:
                by_dtype[dtype] = constant(name)
                extra[f"matmul_{dtype}"] = "default: " + CONSTANTS[name].source
                shaped = TRAINING_SHAPE_GEMM.get((device.architecture.lower(), dtype))
                if shaped is not None:  # best shape -> a model's shapes, beside Hopper's
                    by_dtype[dtype] *= constant(shaped)
                    extra[f"matmul_{dtype}"] += (f"; x {constant(shaped)} at training shapes "
                                                 f"({shaped}: " + CONSTANTS[shaped].source + ")")
        if "bf16" in by_dtype and device.supports("fp4"):
            # the MAMF table measures no FP4 (NVFP4) matmul: the chip's BF16 share times NVFP4's
            # share over BF16's measured in one run on a B200 (torchao's bench_matmul)
            by_dtype["fp4"] = by_dtype["bf16"] * constant("matmul_fp4_vs_bf16")
            extra["matmul_fp4"] = ("default: the BF16 share x "
                                   f"{constant('matmul_fp4_vs_bf16')} ("
                                   + CONSTANTS["matmul_fp4_vs_bf16"].source + ") -- "
                                   + extra["matmul_bf16"].removeprefix("default: "))
    memory, memory_basis = stream_share(device.name, device.memory_bandwidth) \
        or (constant("memory_default"), DEFAULT_BASIS["memory_gpu"])
    return Efficiency(
        matmul=frac, attention=min(frac, 0.50), memory=memory, launch_s=5e-6, pcie_pinned=0.80,
        pcie_pageable=0.40, comm=0.80, matmul_by_dtype=MappingProxyType(by_dtype),
        basis={**extra, "matmul": "default: " + DEFAULT_BASIS[key],
               "attention": "default: " + DEFAULT_BASIS["attention_gpu"],
               "memory": "default: " + memory_basis,
               "launch_s": "default: " + DEFAULT_BASIS["launch_gpu"],
               "pcie_pinned": "default: " + DEFAULT_BASIS["pcie_pinned"],
               "pcie_pageable": "default: " + DEFAULT_BASIS["pcie_pageable"],
               "comm": "default: " + DEFAULT_BASIS["comm"]})


def _device_key_for(measured: Any, device: Device) -> str | None:
    """The measured device (``cpu``, ``cuda:N``) that is ``device``, matched exactly."""
    names: Mapping[str, str] = getattr(measured, "device_names", {}) or {}
    if device.kind == "cpu":
        return "cpu" if "cpu" in names else None
    for key, name in names.items():
        if key == "cpu":
            continue
        gpu = gpu_from_device_name(name)
        if (gpu is not None and gpu.name == device.name) or name == device.name:
            return key
    return None


def apply_measured(device: Device, eff: Efficiency, measured: Any) -> tuple[Device, Efficiency]:
    """Replace the defaults by the numbers ``measured`` (a bench ``Measured``) holds for ``device``
    (:func:`measured_apply` without the statement of which run was read)."""
    device, eff, _ = measured_apply(device, eff, measured)
    return device, eff


def measured_apply(device: Device, eff: Efficiency,
                   measured: Any) -> tuple[Device, Efficiency, RunUse | None]:
    """Replace the defaults by the numbers ``measured`` (a bench ``Measured``) holds for
    ``device``, and say which run that was (a :class:`~.measured.RunUse`; None when the run has
    nothing of this device).

    Only a run of *this* device counts: a GPU is matched by its exact device name through the
    catalog. A CPU's measured FP32 matmul rate and memory copy bandwidth replace its estimated
    peak and assumed bandwidth outright (fraction 1.0 of the measured rate). When the
    measurements read are noisy (:func:`~.measured.judge_quality`) and the run is not marked
    ``use_noisy``, the defaults stay and the RunUse says the run was not used.
    """
    if measured is None:
        return device, eff, None
    key = _device_key_for(measured, device)
    if key is None:
        return device, eff, None
    tag = f"measured: gpuplan bench run {getattr(measured, 'run_id', '?')} " \
          f"({getattr(measured, 'created_utc', '?')}) on {key}"
    apply = _apply_cpu if device.kind == "cpu" else _apply_gpu
    new_device, changes, basis, read = apply(device, eff, measured, key, tag)
    if not read:
        return device, eff, None
    use = run_use(measured, key, read)
    if not use.used:
        return device, eff, use
    return new_device, replace(eff, basis={**eff.basis, **basis}, **changes), use


def _apply_cpu(device: Device, eff: Efficiency, measured: Any, key: str, tag: str) -> tuple:
    """The CPU's measured matmul rate, host copy and op dispatch: (device, changes, basis, the
    measurements read)."""
    changes: dict[str, Any] = {}
    basis: dict[str, str] = {}
    read: list[tuple[str, str, str]] = []
    got = measured.flops(key, "fp32")
    if got:
        peaks = dict(device.peak_flops)
        peaks["fp32"] = got
        device = replace(device, peak_flops=MappingProxyType(peaks),
                         peak_basis=f"{tag}: {got / 1e9:.1f} GFLOP/s fp32 matmul")
        changes["matmul"] = 1.0
        basis["matmul"] = f"{tag}: the measured rate is used as the achievable peak"
        read.append(("matmul", key, "fp32"))
    bw = measured.bandwidth_of(key, "host_copy")
    if bw:
        device = replace(device, memory_bandwidth=bw)
        changes["memory"] = 1.0
        basis["memory"] = f"{tag}: host memory copy {bw / 1e9:.1f} GB/s"
        read.append(("bandwidth", key, "host_copy"))
    ov = measured.overhead_of(key, "op_dispatch")
    if ov is not None:
        changes["launch_s"] = ov
        basis["launch_s"] = f"{tag}: op dispatch {ov * 1e6:.1f} us"
        read.append(("overhead", key, "op_dispatch"))
    return device, changes, basis, read


def _apply_gpu(device: Device, eff: Efficiency, measured: Any, key: str, tag: str) -> tuple:
    """A GPU's measured matmul rates (as fractions of the catalog's peaks), device copy, host
    links and kernel launch: (device, changes, basis, the measurements read)."""
    changes: dict[str, Any] = {}
    basis: dict[str, str] = {}
    read: list[tuple[str, str, str]] = []
    by_dtype = dict(eff.matmul_by_dtype)
    for dtype in device.peak_flops:
        got = measured.flops(key, dtype)
        if got:
            by_dtype[dtype] = got / device.peak(dtype)
            basis[f"matmul_{dtype}"] = (f"{tag}: {got / 1e12:.1f} TFLOP/s {dtype} matmul = "
                                        f"{100 * by_dtype[dtype]:.1f}% of the dense peak")
            read.append(("matmul", key, dtype))
    changes["matmul_by_dtype"] = MappingProxyType(by_dtype)
    bw = measured.bandwidth_of(key, "device_copy")
    if bw:
        changes["memory"] = bw / device.memory_bandwidth
        basis["memory"] = f"{tag}: device copy {bw / 1e9:.0f} GB/s"
        read.append(("bandwidth", key, "device_copy"))
    if device.host_link_bandwidth:
        for kind, name in (("h2d_pinned", "pcie_pinned"), ("h2d_pageable", "pcie_pageable")):
            bw = measured.bandwidth_of(key, kind)
            if bw:
                changes[name] = bw / device.host_link_bandwidth
                basis[name] = f"{tag}: {kind} {bw / 1e9:.1f} GB/s"
                read.append(("bandwidth", key, kind))
    ov = measured.overhead_of(key, "kernel_launch")
    if ov is not None:
        changes["launch_s"] = ov
        basis["launch_s"] = f"{tag}: kernel launch {ov * 1e6:.1f} us"
        read.append(("overhead", key, "kernel_launch"))
    return device, changes, basis, read
