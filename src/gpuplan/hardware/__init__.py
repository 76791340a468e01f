"""GPU specifications as sourced data.

One data file (``gpus.json``), one entry per exact SKU: an H100-SXM-80GB is not an
H100-PCIe-80GB. Peaks are *dense* (never the 2:4-sparse figures vendors print beside them); a dtype
is absent, never zero, where the chip has no such path or no vendor (or measured) figure exists, and
the entry's notes say which. Every entry carries its source. Aliases such as ``h100`` resolve to one
named SKU and the resolution is reported; an unknown name is an error that lists the closest SKUs --
never a silent substitute. ``docs/gpus.md`` documents the schema and the rules.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
import os
from types import MappingProxyType
from typing import Mapping

from ..errors import InputError, UnknownNameError, UnsupportedError

__all__ = [
    "GPU", "DTYPES", "get_gpu", "resolve_gpu", "all_gpus", "gpu_from_device_name",
    "gpu_aliases", "UnknownGPUError", "DEFAULT_SHORTLIST", "pcie_bandwidth",
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
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
        raise InputError(f"PCIe lanes {lanes!r}: expected a whole number such as 16")
    gts, eff = _PCIE[gen]
    return gts * 1e9 * eff * lanes / 8


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One exact GPU SKU. Bytes are bytes, rates are per second, FLOPs are dense."""

    name: str
    """Exact SKU key, e.g. ``H100-SXM-80GB``."""
    vendor: str
    """``NVIDIA`` or ``AMD``."""
    architecture: str
    """Chip generation, e.g. ``Hopper``."""
    memory_bytes: int
    """Total device memory as the device reports it (CUDA ``totalGlobalMem``, i.e. torch's
    ``total_memory``) in a public record, quoted in ``extra["memory_record"]``; it varies by a few
    hundred MiB with driver and ECC, and is less than the vendor's label (80 GB -> ~79.2 GiB)."""
    memory_label: str
    """The vendor's wording, e.g. ``80 GB HBM3``."""
    memory_bandwidth: float
    """Peak device-memory bandwidth, bytes/s."""
    peak_flops: Mapping[str, float]
    """Dense peak FLOP/s (int8: op/s) per dtype. Absent where the chip has no such path or no
    vendor/measured figure exists (``notes`` says which). fp32 is the non-tensor rate; fp16/bf16/fp8
    use FP32 accumulate; fp64 is the highest FP64 rate (tensor/matrix cores where present)."""
    sm_count: int
    """Streaming multiprocessors (NVIDIA) or compute units (AMD)."""
    max_threads_per_sm: int
    """Maximum resident threads per SM/CU."""
    pcie_gen: int
    """Host link PCIe generation (3, 4, 5)."""
    pcie_lanes: int
    """Host link width (16 for every card here)."""
    interconnect: str | None
    """GPU-to-GPU link name (``NVLink 4``, ``Infinity Fabric``), None when the card has none."""
    interconnect_bandwidth: float | None
    """Total GPU-to-GPU bandwidth per GPU, bytes/s, both directions summed as vendors quote it."""
    tdp_watts: float | None = None
    """Board power (TDP/TBP) in watts as the vendor states it."""
    compute_capability: str | None = None
    """CUDA compute capability (``9.0``), or the LLVM target on AMD (``gfx942``)."""
    device_names: tuple[str, ...] = ()
    """Names ``torch.cuda.get_device_name`` returns for this SKU (exact match only)."""
    aliases: tuple[str, ...] = ()
    """Lower-case short names that resolve to this SKU (each alias names exactly one SKU)."""
    source: str = ""
    """The datasheet/whitepaper URL(s) the numbers come from, joined by " ; "."""
    notes: str = ""
    """How the numbers were read: dense vs sparse, accumulate mode, what is omitted and why."""
    sources: tuple[str, ...] = ()
    """The same URLs as ``source``, one per item."""
    extra: Mapping[str, object] = field(default_factory=dict)
    """Record keys the dataclass does not model (``sparse_tflops``, ``memory_record``)."""

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
        """Dense peak FLOP/s for ``dtype``; a clear error naming the recorded dtypes when absent."""
        if dtype not in DTYPES:
            raise InputError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        try:
            return self.peak_flops[dtype]
        except KeyError:
            have = [d for d in DTYPES if d in self.peak_flops]
            offer = next((d for d in ("bf16", "fp16", "tf32", "fp32") if d in have and d != dtype), None)
            hint = f"; use --dtype {offer}" if offer else ""
            raise UnsupportedError(
                f"{self.name} has no {dtype} peak in the catalog (recorded: {', '.join(have)}){hint}"
            ) from None

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        return self.peak(dtype) / self.memory_bandwidth

    def as_dict(self) -> dict[str, object]:
        """The full record in SI units (bytes, bytes/s, FLOP/s): the ``--json`` serialization."""
        return {
            "name": self.name,
            "vendor": self.vendor,
            "architecture": self.architecture,
            "compute_capability": self.compute_capability,
            "memory_label": self.memory_label,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth,
            "peak_flops": {d: self.peak_flops[d] for d in DTYPES if d in self.peak_flops},
            "sm_count": self.sm_count,
            "max_threads_per_sm": self.max_threads_per_sm,
            "resident_threads": self.resident_threads,
            "pcie_gen": self.pcie_gen,
            "pcie_lanes": self.pcie_lanes,
            "pcie_bandwidth_bytes_per_s": self.pcie_bandwidth,
            "interconnect": self.interconnect,
            "interconnect_bytes_per_s": self.interconnect_bandwidth,
            "tdp_watts": self.tdp_watts,
            "device_names": list(self.device_names),
            "aliases": list(self.aliases),
            "source": list(self.sources) or ([self.source] if self.source else []),
            "notes": self.notes,
            "memory_record": self.extra.get("memory_record"),
        }


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: {value!r} is not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what}: {value!r} is not a positive finite number")
    return float(value)


def _from_record(rec: dict) -> GPU:
    """One JSON record -> GPU, checking every number (the catalog is data, so it is validated)."""
    name = rec["name"]
    tflops = rec["dense_tflops"]
    unknown = set(tflops) - set(DTYPES)
    if unknown:
        raise ValueError(f"{name}: dense_tflops has unknown dtype(s) {sorted(unknown)}")
    peaks = {d: _positive(tflops[d], f"{name} dense_tflops.{d}") * 1e12 for d in DTYPES if d in tflops}
    memory_bytes = rec["memory_bytes"]
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int) or memory_bytes <= 0:
        raise ValueError(f"{name}: memory_bytes must be a positive integer, got {memory_bytes!r}")
    ic = rec.get("interconnect_GBps")
    if (ic is None) != (rec.get("interconnect") is None):
        raise ValueError(f"{name}: interconnect and interconnect_GBps must both be set or both be null")
    src = rec["source"]
    sources = (src,) if isinstance(src, str) else tuple(src)
    if not sources or not all(isinstance(u, str) and u.startswith("https://") for u in sources):
        raise ValueError(f"{name}: source must be one or more https:// URLs")
    aliases = tuple(rec.get("aliases", ()))
    if any(a != a.lower().strip() or not a for a in aliases):
        raise ValueError(f"{name}: aliases must be non-empty lower-case strings, got {aliases}")
    return GPU(
        name=name,
        vendor=rec["vendor"],
        architecture=rec["architecture"],
        memory_bytes=memory_bytes,
        memory_label=rec["memory"],
        memory_bandwidth=_positive(rec["memory_bandwidth_GBps"], f"{name} memory_bandwidth_GBps") * 1e9,
        peak_flops=MappingProxyType(peaks),
        sm_count=int(_positive(rec["sm_count"], f"{name} sm_count")),
        max_threads_per_sm=int(_positive(rec["max_threads_per_sm"], f"{name} max_threads_per_sm")),
        pcie_gen=int(rec["pcie_gen"]),
        pcie_lanes=int(_positive(rec["pcie_lanes"], f"{name} pcie_lanes")),
        interconnect=rec.get("interconnect"),
        interconnect_bandwidth=None if ic is None else _positive(ic, f"{name} interconnect_GBps") * 1e9,
        tdp_watts=rec.get("tdp_watts"),
        compute_capability=rec.get("compute_capability"),
        device_names=tuple(rec.get("device_names", ())),
        aliases=aliases,
        source=" ; ".join(sources),
        sources=sources,
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
    with open(os.path.join(os.path.dirname(__file__), "gpus.json"), encoding="utf-8") as f:
        raw = json.load(f)
    if raw.get("schema") != 1:
        raise ValueError(f"gpus.json: schema {raw.get('schema')!r}, expected 1")
    by_key: dict[str, GPU] = {}
    alias_to: dict[str, str] = {}
    device_owner: dict[str, str] = {}
    for rec in raw["gpus"]:
        gpu = _from_record(rec)
        key = gpu.name.lower()
        if key in by_key:
            raise ValueError(f"gpus.json: duplicate GPU {gpu.name}")
        by_key[key] = gpu
        for dn in gpu.device_names:
            if dn in device_owner:
                raise ValueError(f"gpus.json: device name {dn!r} claimed by {device_owner[dn]} and {gpu.name}")
            device_owner[dn] = gpu.name
    for gpu in by_key.values():
        for a in gpu.aliases:
            if a in by_key or a in alias_to:
                raise ValueError(f"gpus.json: alias {a!r} of {gpu.name} is ambiguous")
            alias_to[a] = gpu.name.lower()
    return by_key, alias_to


def all_gpus() -> tuple[GPU, ...]:
    """Every GPU in the catalog, in file order."""
    return tuple(_catalog()[0].values())


def gpu_aliases() -> dict[str, str]:
    """Every documented alias -> the SKU name it stands for."""
    by_key, alias_to = _catalog()
    return {a: by_key[k].name for a, k in alias_to.items()}


def _suggest(name: str, n: int = 3) -> list[str]:
    """Closest SKU names to ``name``, best first; an alias counts as its SKU (``h10`` -> H100-SXM-80GB).

    Score: difflib's similarity ratio, plus 0.5 when the query is a substring of the candidate, so
    ``H100-SXM`` ranks H100-SXM-80GB above the merely similar H200-SXM-141GB.
    """
    by_key, alias_to = _catalog()
    query = re.sub(r"[\s_]+", "-", name.strip().lower())  # "H100 SXM" reads as "h100-sxm"
    if not query:
        return []
    scored: list[tuple[float, str]] = []
    for cand in [*by_key, *alias_to]:
        score = difflib.SequenceMatcher(None, query, cand).ratio() + (0.5 if query in cand else 0.0)
        if score >= 0.5:
            scored.append((score, by_key[alias_to.get(cand, cand)].name))
    out: list[str] = []
    for _, sku in sorted(scored, key=lambda t: -t[0]):
        if sku not in out:
            out.append(sku)
    return out[:n]


class UnknownGPUError(UnknownNameError):
    """A GPU name that is neither an SKU nor an alias; ``suggestions`` are SKU names, best first."""

    def __init__(self, name: str) -> None:
        self.kind = "GPU"
        self.name = name
        self.suggestions = _suggest(name)
        msg = f"unknown GPU {name!r}"
        if self.suggestions:
            msg += "; did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        msg += " (`gpuplan gpus` lists them)"
        Exception.__init__(self, msg)


def resolve_gpu(name: str) -> tuple[GPU, str | None]:
    """Look up a GPU by exact SKU (case-insensitive) or documented alias.

    Returns the GPU and, when an alias was used, a note saying which SKU it stands for.
    """
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"GPU name {name!r}: expected an SKU such as H100-SXM-80GB (`gpuplan gpus` lists them)")
    by_key, alias_to = _catalog()
    key = name.strip().lower()
    if key in by_key:
        return by_key[key], None
    if key in alias_to:
        gpu = by_key[alias_to[key]]
        return gpu, f"{name.strip()} is an alias of {gpu.name}"
    raise UnknownGPUError(name)


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
