"""GPU specifications as sourced data.

One data file (``gpus.json``), one entry per exact SKU: an H100-SXM-80GB is not an
H100-PCIe-80GB. Peaks are *dense* (never the 2:4-sparse figures vendors print beside them); a dtype
is absent, never zero, where the chip has no such path or no vendor (or measured) figure exists, and
the entry's notes say which. Every entry carries its source. Aliases such as ``h100`` resolve to one
named SKU and the resolution is reported; an unknown name is an error that lists the closest SKUs --
never a silent substitute. ``docs/gpus.md`` documents the schema and the rules.

A card that is not in the catalog is named by its numbers: ``custom:24GB,bw=1000GB/s,bf16=165TF``
(:func:`parse_custom_gpu`); memory alone is enough for a fit, and what is not given stays absent.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import field
from functools import cache
import os
from types import MappingProxyType
from typing import Mapping

from .._record import record
from ..bounds import MAX_ARG_CHARS, check_int, check_number
from ..errors import InputError, UnknownNameError, UnsupportedError, opt, shown
from ..units import parse_bandwidth, parse_bytes, parse_flops, parse_positive_int

__all__ = [
    "GPU", "DTYPES", "get_gpu", "resolve_gpu", "all_gpus", "gpu_from_device_name",
    "gpu_aliases", "UnknownGPUError", "DEFAULT_SHORTLIST", "SOLVER_GPUS", "pcie_bandwidth",
    "parse_custom_gpu", "custom_spec",
    "CUSTOM_PREFIX",
]

#: The dtypes a peak may be given for, in display order. ``fp6`` and ``fp4`` are the tensor cores'
#: narrow floats (Blackwell, CDNA 4): NVFP4/MXFP4/MXFP6 GEMMs run there (docs/formats.md).
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4")

#: The GPUs ``gpuplan fit`` reports on when none is named: one of each class people rent or own.
DEFAULT_SHORTLIST = ("H200-SXM-141GB", "H100-SXM-80GB", "A100-SXM-80GB", "A100-SXM-40GB",
                     "L40S", "RTX-4090", "T4")

#: The GPUs the solver may propose as a ``--gpu`` change, in catalog order: the datacenter parts
#: people rent and the flagship consumer cards. A fixed list, so that adding a catalog entry (or a
#: ``custom:`` card) never changes a suggestion; an Apple device is never proposed for a job.
SOLVER_GPUS = ("H200-SXM-141GB", "H100-SXM-80GB", "H100-PCIe-80GB", "A100-SXM-40GB", "A100-SXM-80GB",
               "A100-PCIe-40GB", "A100-PCIe-80GB", "L40S", "L4", "RTX-4090", "A10", "A10G", "A40",
               "RTX-3090", "T4", "V100-SXM2-16GB", "V100-SXM2-32GB", "MI300X")

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


@record
class GPU:
    """One exact GPU SKU. Bytes are bytes, rates are per second, FLOPs are dense."""

    name: str
    """Exact SKU key, e.g. ``H100-SXM-80GB``."""
    vendor: str
    """``NVIDIA``, ``AMD``, ``Apple``, or ``custom`` for a card given by its numbers."""
    architecture: str
    """Chip generation, e.g. ``Hopper``."""
    memory_bytes: int
    """Total device memory as the device reports it (CUDA ``totalGlobalMem``, i.e. torch's
    ``total_memory``) in a public record, quoted in ``extra["memory_record"]``; it varies by a few
    hundred MiB with driver and ECC, and is less than the vendor's label (80 GB -> ~79.2 GiB)."""
    memory_label: str
    """The vendor's wording, e.g. ``80 GB HBM3``."""
    memory_bandwidth: float | None
    """Peak device-memory bandwidth, bytes/s (None only for a ``custom:`` card given without
    ``bw=``)."""
    peak_flops: Mapping[str, float]
    """Dense peak FLOP/s (int8: op/s) per dtype. Absent where the chip has no such path or no
    vendor/measured figure exists (``notes`` says which). fp32 is the non-tensor rate; fp16/bf16/fp8
    use FP32 accumulate; fp64 is the highest FP64 rate (tensor/matrix cores where present)."""
    sm_count: int | None
    """Streaming multiprocessors (NVIDIA), compute units (AMD) or GPU cores (Apple); None when not
    given (a ``custom:`` card without ``sms=``)."""
    max_threads_per_sm: int | None
    """Maximum resident threads per SM/CU; None where no vendor figure exists (Apple)."""
    pcie_gen: int | None
    """Host link PCIe generation (3 ... 6); None where there is no host link (unified memory) or
    it is not given."""
    pcie_lanes: int | None
    """Host link width (16 for most cards; 8 on the RTX 4060 Ti); None with ``pcie_gen``."""
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
    memory_kind: str = "device"
    """``device`` (the GPU's own memory) or ``unified`` (shared with the CPU: Apple silicon)."""
    training: bool = True
    """False for devices gpuplan treats as inference devices (Apple silicon: no published matmul
    peak, no multi-device collectives); the entry's notes say why."""

    def __post_init__(self) -> None:
        _check_gpu(self)  # issue 32: no NaN memory, no zero bandwidth reaches a plan

    @property
    def resident_threads(self) -> int | None:
        """Threads the whole chip keeps resident: SMs x max threads per SM (None when unknown)."""
        if self.sm_count is None or self.max_threads_per_sm is None:
            return None
        return self.sm_count * self.max_threads_per_sm

    @property
    def pcie_bandwidth(self) -> float | None:
        """Theoretical host link bandwidth, one direction, bytes/s (None without a host link)."""
        if self.pcie_gen is None or self.pcie_lanes is None:
            return None
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
            hint = f"; use {opt('dtype')} {offer}" if offer else ""
            if self.vendor == "custom":
                hint += f" (or give it: {self.name},{dtype}=...TF)"
            where = "in its spec" if self.vendor == "custom" else "in the catalog"
            raise UnsupportedError(
                f"{self.name} has no {dtype} peak {where} (recorded: {', '.join(have) or 'none'}){hint}",
                field="dtype", value=dtype, fix={"dtype": offer} if offer else None,
            ) from None

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        if self.memory_bandwidth is None:
            raise UnsupportedError(f"{self.name} has no memory bandwidth (add bw=...GB/s)")
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
            "memory_kind": self.memory_kind,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth,
            "peak_flops": {d: self.peak_flops[d] for d in DTYPES if d in self.peak_flops},
            "sm_count": self.sm_count,
            "max_threads_per_sm": self.max_threads_per_sm,
            "resident_threads": self.resident_threads,
            "pcie_gen": self.pcie_gen,
            "pcie_lanes": self.pcie_lanes,
            "pcie_bandwidth_bytes_per_s": self.pcie_bandwidth,
            "training": self.training,
            "interconnect": self.interconnect,
            "interconnect_bytes_per_s": self.interconnect_bandwidth,
            "tdp_watts": self.tdp_watts,
            "device_names": list(self.device_names),
            "aliases": list(self.aliases),
            "source": list(self.sources) or ([self.source] if self.source else []),
            "notes": self.notes,
            "memory_record": self.extra.get("memory_record"),
        }


def _check_gpu(g: "GPU") -> None:
    """Every number of a GPU in range and finite (bounds.py), an InputError naming the field:
    memory > 0 bytes, rates > 0, counts whole, the PCIe generation one of :data:`_PCIE`."""
    if not isinstance(g.name, str) or not 0 < len(g.name) <= MAX_ARG_CHARS:
        raise InputError(f"{opt('name')} {shown(g.name)}: expected a GPU name", field="name",
                         value=g.name)
    check_int(g.memory_bytes, "bytes", low=1, field="memory_bytes")
    if not isinstance(g.peak_flops, Mapping):
        raise InputError(f"{opt('peak_flops')} {shown(g.peak_flops)}: expected a mapping of "
                         "dtype to FLOP/s", field="peak_flops", value=g.peak_flops)
    for dtype, rate in g.peak_flops.items():
        check_number(rate, "flops", what=f"peak_flops[{dtype!r}]", field="peak_flops")
    for name in ("memory_bandwidth", "interconnect_bandwidth"):
        if getattr(g, name) is not None:
            check_number(getattr(g, name), "bandwidth", field=name)
    for name in ("sm_count", "max_threads_per_sm", "pcie_lanes"):
        if getattr(g, name) is not None:
            check_int(getattr(g, name), "dim", field=name)
    if g.pcie_gen is not None and (isinstance(g.pcie_gen, bool) or not isinstance(
            g.pcie_gen, (int, float)) or g.pcie_gen not in _PCIE):  # a list is unhashable
        raise InputError(f"{opt('pcie_gen')} {shown(g.pcie_gen)}: expected one of "
                         f"{sorted(_PCIE)} or None", field="pcie_gen", value=g.pcie_gen)
    if g.tdp_watts is not None:
        check_number(g.tdp_watts, "flops", what="tdp_watts", field="tdp_watts")
    if not isinstance(g.training, bool):
        raise InputError(f"{opt('training')} {shown(g.training)}: expected True or False",
                         field="training", value=g.training)


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: {value!r} is not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what}: {value!r} is not a positive finite number")
    return float(value)


def _optional_int(rec: dict, key: str, name: str) -> int | None:
    """A count that is null where no source gives it (Apple's threads per core, its PCIe link)."""
    value = rec.get(key)
    return None if value is None else int(_positive(value, f"{name} {key}"))


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
        max_threads_per_sm=_optional_int(rec, "max_threads_per_sm", name),
        pcie_gen=_optional_int(rec, "pcie_gen", name),
        pcie_lanes=_optional_int(rec, "pcie_lanes", name),
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
        memory_kind=_memory_kind(rec, name),
        training=_training(rec, name),
    )


def _memory_kind(rec: dict, name: str) -> str:
    kind = rec.get("memory_kind", "device")
    if kind not in ("device", "unified"):
        raise ValueError(f"{name}: memory_kind must be 'device' or 'unified', got {kind!r}")
    return kind


def _training(rec: dict, name: str) -> bool:
    value = rec.get("training", True)
    if not isinstance(value, bool):
        raise ValueError(f"{name}: training must be true or false, got {value!r}")
    return value


_KNOWN_KEYS = {
    "name", "vendor", "architecture", "memory_bytes", "memory", "memory_bandwidth_GBps",
    "dense_tflops", "sm_count", "max_threads_per_sm", "pcie_gen", "pcie_lanes", "interconnect",
    "interconnect_GBps", "tdp_watts", "compute_capability", "device_names", "aliases", "source",
    "notes", "memory_kind", "training",
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
    import difflib  # only a misspelt name pays for it (keeps `gpuplan fit` start-up short)

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
        msg = f"unknown GPU {shown(name)}"
        if self.suggestions:
            msg += "; did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        msg += " (`gpuplan gpus` lists them)"
        Exception.__init__(self, msg)


#: The longest GPU name or ``custom:`` spec taken (the longest spec with every part: ~150).
MAX_GPU_NAME = 256


def resolve_gpu(name: str) -> tuple[GPU, str | None]:
    """Look up a GPU by exact SKU (case-insensitive), documented alias, or ``custom:`` spec.

    Returns the GPU and, when an alias was used, a note saying which SKU it stands for.
    """
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"GPU name {shown(name)}: expected an SKU such as H100-SXM-80GB (`gpuplan gpus` lists them)")
    if len(name) > MAX_GPU_NAME:  # no SKU, alias or custom: spec is this long (nor worth a fuzzy match)
        raise InputError(f"GPU name {shown(name)}: longer than {MAX_GPU_NAME} characters; expected "
                         "an SKU such as H100-SXM-80GB or a custom:MEMORY,... spec")
    if name.strip().lower().startswith(CUSTOM_PREFIX):
        return parse_custom_gpu(name), None
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


# --------------------------------------------------------------------------------------------------
# A card that is not in the catalog, named by its numbers

#: What a ``custom:`` spec starts with.
CUSTOM_PREFIX = "custom:"

_CUSTOM_HELP = ("custom:MEMORY[,bw=RATE][,DTYPE=PEAK...][,sms=N,threads=N][,pcie=GENxLANES] "
                "such as custom:24GB,bw=1000GB/s,bf16=165TF")


def _bad_spec(spec: str, problem: str) -> InputError:
    """The one line a bad ``custom:`` spec raises: the ``gpu`` field (:func:`opt`) and the spec,
    then the problem; the field and the spec as data."""
    return InputError(f"{opt('gpu')} {spec!r}: {problem}", field="gpu", value=spec)


def _custom_part(spec: str, key: str, value: str) -> tuple[str, object]:
    """One ``key=value`` of a custom spec, parsed with gpuplan.units."""
    what = f"{opt('gpu')} {spec!r}: {key}="
    if key == "bw":
        return key, parse_bandwidth(value, what=what)
    if key in DTYPES:
        peak = parse_flops(value, what=what)
        if peak < 1e9:  # a bare "165" is 165 FLOP/s: surely a missing unit
            bare = value.strip().replace(".", "", 1).isdigit()
            raise _bad_spec(spec, f"{key}={value} reads as {peak:g} FLOP/s, below any "
                             "GPU; " + (f"give a unit, e.g. {key}={value}TF" if bare else
                                        f"give the peak in TF, e.g. {key}=165TF"))
        return key, peak
    if key in ("sms", "threads"):
        return key, parse_positive_int(value, what=what)
    if key == "pcie":
        gen, x, lanes = value.lower().partition("x")
        if not x or not gen.strip().isdigit() or not lanes.strip().isdigit() \
                or len(gen.strip()) > 2 or len(lanes.strip()) > 3:
            raise _bad_spec(spec, f"pcie={value!r}: expected GENxLANES such as pcie=4x16")
        try:
            pcie_bandwidth(int(gen), int(lanes))  # checks the generation and the lanes
        except InputError as e:
            raise _bad_spec(spec, f"pcie={value!r}: {e}") from None
        return key, (int(gen), int(lanes))
    raise _bad_spec(spec, f"unknown part {key!r}; expected bw=, sms=, threads=, pcie= or a peak "
                     f"per dtype ({', '.join(DTYPES)}): {_CUSTOM_HELP}")


def _number(x: float) -> str:
    """``x`` without trailing zeros and without rounding away a recorded digit."""
    return f"{x:.9f}".rstrip("0").rstrip(".")


def custom_spec(gpu: GPU, **more: str) -> str:
    """``gpu``'s own numbers as a ``custom:`` spec (:func:`parse_custom_gpu` reads it back to the
    same memory, bandwidth, peaks, SM/thread counts and host link), with ``more`` (``fp8="PEAK"``)
    appended as given: a refusal can hand the user the card with one figure left to fill in."""
    parts = [f"{CUSTOM_PREFIX}{_number(gpu.memory_bytes / 1e9)}GB"]
    if gpu.memory_bandwidth is not None:
        parts.append(f"bw={_number(gpu.memory_bandwidth / 1e9)}GB/s")
    parts += [f"{d}={_number(gpu.peak_flops[d] / 1e12)}TF" for d in DTYPES
              if d in gpu.peak_flops and d not in more]
    parts += [f"{k}={v}" for k, v in more.items()]
    if gpu.sm_count is not None and gpu.max_threads_per_sm is not None:
        parts.append(f"sms={gpu.sm_count},threads={gpu.max_threads_per_sm}")
    if gpu.pcie_gen is not None and gpu.pcie_lanes is not None:
        parts.append(f"pcie={gpu.pcie_gen}x{gpu.pcie_lanes}")
    return ",".join(parts)


def parse_custom_gpu(spec: str) -> GPU:
    """A GPU from its numbers: ``custom:24GB,bw=1000GB/s,bf16=165TF,fp32=82.6TF,sms=128,threads=1536,pcie=4x16``.

    The memory (``24GB``, ``24GiB``, bytes) comes first and is the usable total a fit compares
    with; ``bw=`` is bytes/s (``1000GB/s``, ``1TB/s``); ``DTYPE=`` is a dense peak in FLOP/s
    (``165TF``, ``1.5PF``, ``165e12``); ``sms=``/``threads=`` are SMs and threads per SM; ``pcie=``
    is the host link (``4x16``: PCIe 4.0, 16 lanes). Anything
    not given is absent, never filled in: a speed estimate that needs it says so.
    """
    text = spec.strip()
    if not text.lower().startswith(CUSTOM_PREFIX):
        raise _bad_spec(spec, f"expected {_CUSTOM_HELP}")
    parts = [p.strip() for p in text[len(CUSTOM_PREFIX):].split(",")]
    if not parts[0] or "=" in parts[0]:
        raise _bad_spec(spec, f"the memory comes first; expected {_CUSTOM_HELP}")
    memory = parse_bytes(parts[0], what=f"{opt('gpu')} {spec!r}: memory")
    if memory <= 0:
        raise _bad_spec(spec, f"memory {parts[0]!r} must be more than 0 bytes, e.g. 24GB")
    given: dict[str, object] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or not key or not value.strip():
            raise _bad_spec(spec, f"part {part!r} is not key=value; expected {_CUSTOM_HELP}")
        if key in given:
            raise _bad_spec(spec, f"{key}= is given twice; give it once")
        given[key] = _custom_part(spec, key, value.strip())[1]
    if ("sms" in given) != ("threads" in given):
        raise _bad_spec(spec, f"give sms= and threads= together (SMs and threads per SM), "
                         "e.g. sms=128,threads=1536")
    return GPU(
        name=text, vendor="custom", architecture="custom", memory_bytes=memory,
        memory_label=f"{parts[0]} (custom)", memory_bandwidth=given.get("bw"),
        peak_flops=MappingProxyType({d: given[d] for d in DTYPES if d in given}),
        sm_count=given.get("sms"), max_threads_per_sm=given.get("threads"),
        pcie_gen=given["pcie"][0] if "pcie" in given else None,
        pcie_lanes=given["pcie"][1] if "pcie" in given else None,
        interconnect=None, interconnect_bandwidth=None,
        notes="A card given by its numbers on the command line: nothing is looked up or filled in.",
    )
