"""GPU specifications as sourced data.

One data file (``gpus.json``), one entry per exact SKU: an H100-SXM-80GB is not an
H100-PCIe-80GB. Peaks are *dense* (never the 2:4-sparse figures vendors print beside them) and a
dtype the chip lacks is absent, not zero. Every entry carries its source. Aliases such as ``h100``
resolve to one named SKU and the resolution is reported; an unknown name is an error that lists the
closest names -- never a silent substitute.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Mapping

from ..errors import InputError, UnknownNameError, UnsupportedError

__all__ = [
    "GPU", "DTYPES", "get_gpu", "resolve_gpu", "all_gpus", "gpu_from_device_name",
    "DEFAULT_SHORTLIST", "pcie_bandwidth",
]

#: The dtypes a peak may be given for, in display order.
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

#: The GPUs ``gpuplan fit`` reports on when none is named: one of each class people rent or own.
DEFAULT_SHORTLIST = ("H200-SXM-141GB", "H100-SXM-80GB", "A100-SXM-80GB", "A100-SXM-40GB",
                     "L40S", "RTX-4090", "T4")

# PCIe per-lane signalling rate (GT/s) and line-code efficiency, by generation (PCI-SIG specs).
_PCIE = {3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130), 6: (64.0, 242 / 256)}


def pcie_bandwidth(gen: int, lanes: int) -> float:
    """Theoretical one-direction PCIe bandwidth in bytes/s (gen 4 x16 = 31.5 GB/s)."""
    if gen not in _PCIE:
        raise InputError(f"PCIe generation {gen!r}: expected one of {sorted(_PCIE)}")
    gts, eff = _PCIE[gen]
    return gts * 1e9 * eff * lanes / 8


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One exact GPU SKU. Bytes are bytes, rates are per second, FLOPs are dense."""

    name: str
    """Exact SKU key, e.g. ``H100-SXM-80GB``."""
    vendor: str
    architecture: str
    """Chip generation, e.g. ``Hopper``."""
    memory_bytes: int
    """Total device memory as the device reports it (cudaMemGetInfo total) where known."""
    memory_label: str
    """The vendor's wording, e.g. ``80 GB HBM3``."""
    memory_bandwidth: float
    """Peak device-memory bandwidth, bytes/s."""
    peak_flops: Mapping[str, float]
    """Dense peak FLOP/s (int8: op/s) per dtype; a dtype the chip lacks is absent."""
    sm_count: int
    """Streaming multiprocessors (NVIDIA) or compute units (AMD)."""
    max_threads_per_sm: int
    """Maximum resident threads per SM/CU."""
    pcie_gen: int
    pcie_lanes: int
    interconnect: str | None
    """GPU-to-GPU link name (``NVLink 4``, ``Infinity Fabric``), None when the card has none."""
    interconnect_bandwidth: float | None
    """Total GPU-to-GPU bandwidth per GPU, bytes/s, both directions summed as vendors quote it."""
    tdp_watts: float | None = None
    compute_capability: str | None = None
    device_names: tuple[str, ...] = ()
    """Names ``torch.cuda.get_device_name`` returns for this SKU (exact match only)."""
    aliases: tuple[str, ...] = ()
    source: str = ""
    notes: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def resident_threads(self) -> int:
        """Threads the whole chip keeps resident: SMs x max threads per SM."""
        return self.sm_count * self.max_threads_per_sm

    @property
    def pcie_bandwidth(self) -> float:
        """Theoretical host link bandwidth, one direction, bytes/s."""
        return pcie_bandwidth(self.pcie_gen, self.pcie_lanes)

    def supports(self, dtype: str) -> bool:
        return dtype in self.peak_flops

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; a clear error when the chip has no such path."""
        if dtype not in DTYPES:
            raise InputError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        try:
            return self.peak_flops[dtype]
        except KeyError:
            have = [d for d in DTYPES if d in self.peak_flops]
            offer = next((d for d in ("bf16", "fp16", "tf32", "fp32") if d in have and d != dtype), None)
            hint = f"; use --dtype {offer}" if offer else ""
            raise UnsupportedError(
                f"{self.name} has no {dtype} peak (it supports {', '.join(have)}){hint}"
            ) from None

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        return self.peak(dtype) / self.memory_bandwidth


def _from_record(rec: dict) -> GPU:
    tflops = rec["dense_tflops"]
    peaks = {d: float(tflops[d]) * 1e12 for d in DTYPES if tflops.get(d) is not None}
    ic = rec.get("interconnect_GBps")
    return GPU(
        name=rec["name"],
        vendor=rec["vendor"],
        architecture=rec["architecture"],
        memory_bytes=int(rec["memory_bytes"]),
        memory_label=rec["memory"],
        memory_bandwidth=float(rec["memory_bandwidth_GBps"]) * 1e9,
        peak_flops=MappingProxyType(peaks),
        sm_count=int(rec["sm_count"]),
        max_threads_per_sm=int(rec["max_threads_per_sm"]),
        pcie_gen=int(rec["pcie_gen"]),
        pcie_lanes=int(rec["pcie_lanes"]),
        interconnect=rec.get("interconnect"),
        interconnect_bandwidth=None if ic is None else float(ic) * 1e9,
        tdp_watts=rec.get("tdp_watts"),
        compute_capability=rec.get("compute_capability"),
        device_names=tuple(rec.get("device_names", ())),
        aliases=tuple(rec.get("aliases", ())),
        source=rec["source"],
        notes=rec.get("notes", ""),
        extra=MappingProxyType({k: v for k, v in rec.items() if k not in _KNOWN_KEYS}),
    )


_KNOWN_KEYS = {
    "name", "vendor", "architecture", "memory_bytes", "memory", "memory_bandwidth_GBps",
    "dense_tflops", "sm_count", "max_threads_per_sm", "pcie_gen", "pcie_lanes", "interconnect",
    "interconnect_GBps", "tdp_watts", "compute_capability", "device_names", "aliases", "source",
    "notes",
}


@cache
def _catalog() -> tuple[dict[str, GPU], dict[str, str]]:
    raw = json.loads(resources.files(__package__).joinpath("gpus.json").read_text("utf-8"))
    by_key: dict[str, GPU] = {}
    alias_to: dict[str, str] = {}
    for rec in raw["gpus"]:
        gpu = _from_record(rec)
        key = gpu.name.lower()
        assert key not in by_key, f"duplicate GPU {gpu.name}"
        assert all(v > 0 and math.isfinite(v) for v in gpu.peak_flops.values()), gpu.name
        by_key[key] = gpu
    for gpu in by_key.values():
        for a in gpu.aliases:
            a = a.lower()
            assert a not in by_key and a not in alias_to, f"alias {a} is ambiguous"
            alias_to[a] = gpu.name.lower()
    return by_key, alias_to


def all_gpus() -> tuple[GPU, ...]:
    """Every GPU in the catalog, in file order."""
    return tuple(_catalog()[0].values())


def resolve_gpu(name: str) -> tuple[GPU, str | None]:
    """Look up a GPU by exact SKU (case-insensitive) or documented alias.

    Returns the GPU and, when an alias was used, a note saying which SKU it stands for.
    """
    by_key, alias_to = _catalog()
    key = name.strip().lower()
    if key in by_key:
        return by_key[key], None
    if key in alias_to:
        gpu = by_key[alias_to[key]]
        return gpu, f"{name!r} is an alias of {gpu.name}"
    known = [g.name for g in by_key.values()] + [a for g in by_key.values() for a in g.aliases]
    raise UnknownNameError("GPU", name, known, hint="`gpuplan gpus` lists them")


def get_gpu(name: str) -> GPU:
    """Like :func:`resolve_gpu` without the alias note."""
    return resolve_gpu(name)[0]


def gpu_from_device_name(device_name: str) -> GPU | None:
    """The catalog SKU whose recorded device name is exactly ``device_name``, else None.

    Used for local detection (``torch.cuda.get_device_name``). No substring guessing: an
    unrecognized device gets measured numbers only, never a borrowed peak.
    """
    for gpu in all_gpus():
        if device_name in gpu.device_names:
            return gpu
    return None
