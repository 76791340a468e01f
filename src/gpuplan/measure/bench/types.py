"""The bench's result values (torch-free): what was measured, on which machine, and what it means.

These are what the store saves and loads and what the renderers draw; they hold numbers in base
units (seconds, bytes, FLOP/s), never formatted strings.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal, Mapping

from ..._record import record

__all__ = [
    "BenchDtype", "BANDWIDTH_KINDS", "OVERHEAD_KINDS", "GPUInfo", "Machine", "MatmulResult",
    "BandwidthResult", "OverheadResult", "Crossover", "BenchRun", "ELEMENT_BYTES",
    "matmul_flops", "crossovers",
]

BenchDtype = Literal["fp32", "tf32", "bf16", "fp16"]

#: Bytes per element of each matmul dtype (tf32 = fp32 tensors multiplied on TF32 tensor cores).
ELEMENT_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}

#: What each bandwidth kind moves. ``*_copy`` count bytes read + bytes written (2x the buffer),
#: the STREAM "copy" convention comparable with a memory bandwidth spec; transfers count the buffer.
BANDWIDTH_KINDS: dict[str, str] = {
    "host_copy": "host memory copy (read + write counted)",
    "device_copy": "device memory copy (read + write counted)",
    "h2d_pinned": "host-to-device, pinned host memory",
    "h2d_pageable": "host-to-device, pageable host memory",
    "d2h_pinned": "device-to-host, pinned host memory",
    "d2h_pageable": "device-to-host, pageable host memory",
}

#: Fixed per-operation costs measured with a one-element in-place add.
OVERHEAD_KINDS: dict[str, str] = {
    "kernel_launch": "GPU kernel launch (one tiny kernel, launched back to back)",
    "op_dispatch": "CPU op dispatch (one tiny torch op)",
}


def matmul_flops(size: int) -> float:
    """FLOPs of an N x N by N x N matmul by the 2*M*K*N convention (one multiply + one add per MAC)."""
    return 2.0 * size**3


@record
class GPUInfo:
    """One CUDA device as torch reports it."""

    index: int
    """CUDA ordinal."""
    name: str
    """``torch.cuda.get_device_name`` (matched exactly against the catalog)."""
    memory_bytes: int
    """Total device memory."""
    compute_capability: str
    """``major.minor``."""
    sm_count: int | None = None
    """Streaming multiprocessors."""
    catalog_name: str | None = None
    """The catalog SKU the name matched, None when unknown."""


@record
class Machine:
    """The fingerprint a run is stored under. ``key`` is what "this machine" matches on."""

    key: str
    """``hostname|cpu model|cores`` -- torch-free and stable, so the speed model can match it."""
    hostname: str
    os: str
    """``platform.platform()``."""
    python: str
    cpu_model: str
    physical_cores: int
    logical_cores: int
    memory_bytes: int | None
    """Installed host memory."""
    cpu_peak_fp32_flops: float | None
    """The *estimated* CPU peak (see :mod:`gpuplan.hardware.cpu`)."""
    cpu_peak_basis: str
    gpus: tuple[GPUInfo, ...] = ()
    """CUDA devices (empty when none, or when torch was not consulted)."""
    driver: str | None = None
    """NVIDIA kernel driver version (``/proc/driver/nvidia/version``)."""
    torch: str | None = None
    """``torch.__version__``."""
    cuda: str | None = None
    """CUDA version torch was built with (``torch.version.cuda``)."""
    gpuplan: str = ""


@record
class MatmulResult:
    """One N x N @ N x N matmul case on one device and dtype."""

    device: str
    """``cpu`` or ``cuda:N``."""
    device_name: str
    """CPU model or GPU name."""
    dtype: BenchDtype
    size: int
    """N."""
    median_s: float
    """Median seconds per matmul (compute only: inputs already on the device)."""
    iqr_s: float
    min_s: float
    samples: int
    inner: int
    """Matmuls per timed block."""
    noisy: bool
    """The spread stayed above the target within the budget."""
    threads: int | None = None
    """CPU threads torch used (CPU cases)."""
    tf32: bool = False
    """TF32 tensor-core math was allowed for this fp32-tensor case."""
    peak_flops: float | None = None
    """The peak the percentage is of: catalog dense peak (GPU) or estimated peak (CPU fp32)."""
    peak_source: str | None = None
    """``catalog dense <SKU>`` or ``estimate: ...``; None when the peak is unknown."""
    end_to_end_median_s: float | None = None
    """GPU only: host inputs copied to the device, the matmul, the result copied back."""
    end_to_end_iqr_s: float | None = None
    device_median_s: float | None = None
    """GPU only: per-matmul time by CUDA events (device busy time)."""

    @property
    def flops(self) -> float:
        return matmul_flops(self.size)

    @property
    def achieved_flops(self) -> float:
        """Achieved FLOP/s (2 N^3 / median)."""
        return self.flops / self.median_s

    @property
    def tflops(self) -> float:
        return self.achieved_flops / 1e12

    @property
    def percent_of_peak(self) -> float | None:
        return None if not self.peak_flops else 100.0 * self.achieved_flops / self.peak_flops


@record
class BandwidthResult:
    """One copy measurement."""

    device: str
    """The device the copy runs on or to/from (``cpu`` for host copies)."""
    kind: str
    """One of :data:`BANDWIDTH_KINDS`."""
    nbytes: int
    """Buffer size."""
    median_s: float
    iqr_s: float
    noisy: bool

    @property
    def bytes_moved(self) -> int:
        return 2 * self.nbytes if self.kind.endswith("_copy") else self.nbytes

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.median_s


@record
class OverheadResult:
    """A fixed per-operation cost."""

    device: str
    kind: str
    """One of :data:`OVERHEAD_KINDS`."""
    median_s: float
    iqr_s: float
    noisy: bool


@record
class Crossover:
    """CPU against one GPU for one dtype, size by size: where the GPU starts to win."""

    gpu: str
    """``cuda:N``."""
    dtype: BenchDtype
    """The GPU case's dtype (tf32 is compared with the CPU's fp32)."""
    sizes: tuple[int, ...]
    cpu_s: tuple[float, ...]
    gpu_s: tuple[float, ...]
    """Compute only."""
    gpu_end_to_end_s: tuple[float | None, ...]
    """Copies in and out included."""
    compute_crossover: int | None
    """Smallest measured size from which the GPU is faster at every larger measured size."""
    end_to_end_crossover: int | None
    """The same, counting the copies."""


def _crossover(sizes: tuple[int, ...], cpu: tuple[float, ...],
               gpu: tuple[float | None, ...]) -> int | None:
    best = None
    for n, c, g in reversed(list(zip(sizes, cpu, gpu))):
        if g is None or not g < c:
            break
        best = n
    return best


def crossovers(matmul: tuple[MatmulResult, ...] | list[MatmulResult]) -> tuple[Crossover, ...]:
    """Pair each GPU case with the CPU case of the same size and dtype (tf32 with fp32)."""
    cpu = {(m.dtype, m.size): m for m in matmul if m.device == "cpu"}
    groups: dict[tuple[str, str], list[MatmulResult]] = {}
    for m in matmul:
        if m.device != "cpu":
            groups.setdefault((m.device, m.dtype), []).append(m)
    out = []
    for (dev, dtype), ms in groups.items():
        cdt = "fp32" if dtype == "tf32" else dtype
        pairs = sorted((m.size, cpu[(cdt, m.size)], m) for m in ms if (cdt, m.size) in cpu)
        if not pairs:
            continue
        sizes = tuple(p[0] for p in pairs)
        cs = tuple(p[1].median_s for p in pairs)
        gs = tuple(p[2].median_s for p in pairs)
        es = tuple(p[2].end_to_end_median_s for p in pairs)
        out.append(Crossover(
            gpu=dev, dtype=dtype, sizes=sizes, cpu_s=cs, gpu_s=gs, gpu_end_to_end_s=es,
            compute_crossover=_crossover(sizes, cs, gs),
            end_to_end_crossover=_crossover(sizes, cs, es),
        ))
    return tuple(out)


@record
class BenchRun:
    """Everything one ``gpuplan bench`` run measured."""

    created_utc: str
    """ISO 8601, seconds, UTC."""
    machine: Machine
    matmul: tuple[MatmulResult, ...] = ()
    bandwidth: tuple[BandwidthResult, ...] = ()
    overhead: tuple[OverheadResult, ...] = ()
    settings: Mapping[str, object] = field(default_factory=dict)
    """Threads, TF32 defaults, budget, target spread, sizes, dtypes, devices (JSON-serializable)."""
    notes: tuple[str, ...] = ()
    """Plain facts about the run (no GPU, dtypes skipped ...)."""
    warnings: tuple[str, ...] = ()
    """Things that make numbers less trustworthy (noisy, unknown GPU ...)."""
    run_id: int | None = None
    """Set once the run is stored."""

    @property
    def crossovers(self) -> tuple[Crossover, ...]:
        return crossovers(self.matmul)
