"""This machine's CPU: model, cores, SIMD width, frequency and an *estimated* peak FLOP/s.

Pure standard library (no torch): the bench and the speed model both use it, and the speed model
must answer without torch. On Linux everything comes from ``/proc/cpuinfo`` and
``/sys/devices/system/cpu``; elsewhere the model name and core count come from :mod:`platform` and
:mod:`os`, and the peak is left unknown rather than guessed.

The peak is an **estimate**, stated as one wherever it is shown::

    peak = physical cores x frequency x (vector bits / element bits) x FMA units x 2 FLOP per FMA

The number of vector FMA pipes per core is not visible to software; the value assumed for each
instruction-set family is in :data:`FMA_UNITS_ASSUMED` with its basis, and callers can override it
(``fma_units=``) as they can the frequency (``frequency_hz=``). Wide-vector code often runs below
the nominal clock (AVX-512 frequency licences), so the estimate is an upper bound, not a promise.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from .._record import record

__all__ = [
    "CPU", "SimdKind", "FMA_UNITS_ASSUMED", "detect_cpu", "cpu_from_cpuinfo",
    "available_memory_bytes", "total_memory_bytes", "hostname",
]

SimdKind = Literal["avx512", "avx2", "avx", "sse2", "sve", "neon", "unknown"]

#: Vector width in bits of each SIMD family as used for FP32/FP64 arithmetic.
_SIMD_BITS: dict[str, int] = {"avx512": 512, "avx2": 256, "avx": 256, "sse2": 128, "sve": 128,
                              "neon": 128}

#: Vector FMA pipes per core assumed for each family (software cannot read this), with the basis.
FMA_UNITS_ASSUMED: dict[str, tuple[int, str]] = {
    "avx512": (2, "Intel Xeon Scalable (Skylake-SP and later, Gold/Platinum) issue two 512-bit FMAs "
                  "per cycle; Xeon Silver/Bronze, client parts and AMD Zen 4 (256-bit datapath) "
                  "effectively one"),
    "avx2": (2, "Intel Haswell and later and AMD Zen 2 and later issue two 256-bit FMAs per cycle"),
    "avx": (1, "no FMA: one 256-bit add and one 256-bit multiply per cycle, counted as one unit "
               "of 2 FLOP per lane"),
    "sse2": (1, "no FMA: one 128-bit add and one 128-bit multiply per cycle"),
    "neon": (2, "Arm Cortex-A76/Neoverse N1 class cores issue two 128-bit NEON FMAs per cycle"),
    "sve": (2, "SVE vector length is not in /proc/cpuinfo: 128-bit vectors and two FMA pipes "
               "assumed (Neoverse V1 has more)"),
}

_ARM_IMPLEMENTERS = {"0x41": "Arm", "0x42": "Broadcom", "0x43": "Cavium", "0x46": "Fujitsu",
                     "0x48": "HiSilicon", "0x4e": "NVIDIA", "0x51": "Qualcomm", "0x61": "Apple",
                     "0xc0": "Ampere"}


@record
class CPU:
    """One machine's CPU as the operating system reports it, with an estimated peak."""

    model_name: str
    """The marketing name from ``/proc/cpuinfo`` (``model name``) or :func:`platform.processor`."""
    vendor: str
    """``GenuineIntel``, ``AuthenticAMD``, an Arm implementer's name, or ``unknown``."""
    machine: str
    """Instruction-set architecture as :func:`platform.machine` names it (``x86_64``, ``aarch64``)."""
    physical_cores: int
    """Cores (not hardware threads) across all sockets."""
    logical_cores: int
    """Hardware threads the OS sees (cores x SMT)."""
    sockets: int
    """Physical packages."""
    simd: SimdKind
    """Widest floating-point SIMD family the flags advertise."""
    simd_bits: int | None
    """Vector width in bits of that family, None when unknown."""
    fma: bool
    """Fused multiply-add instructions are available (``fma`` on x86; always on AArch64)."""
    fma_units: int | None
    """Vector FMA pipes per core *assumed* for the estimate (see :data:`FMA_UNITS_ASSUMED`)."""
    frequency_hz: float | None
    """Clock used for the estimate, Hz."""
    frequency_source: str
    """Where the clock came from: ``given``, cpufreq max, model name, ``cpu MHz``, or ``unknown``."""
    flags: frozenset[str]
    """The CPU feature flags (x86 ``flags`` / Arm ``Features``)."""
    peak_fp32_flops: float | None
    """ESTIMATED peak FP32 FLOP/s of all physical cores; None when any factor is unknown."""
    peak_fp64_flops: float | None
    """ESTIMATED peak FP64 FLOP/s of all physical cores; None when any factor is unknown."""
    peak_basis: str
    """The arithmetic behind the estimate, in words, or why there is none."""

    @property
    def native_matmul_dtypes(self) -> tuple[str, ...]:
        """Matmul dtypes with a native hardware path (fp32 always; bf16/fp16 by feature flag).

        bf16: ``avx512_bf16`` or ``amx_bf16`` (x86), ``bf16`` (Arm). fp16: ``avx512_fp16`` or
        ``amx_fp16`` (x86), ``asimdhp`` (Arm). Other dtypes still run in torch, emulated and slow.
        """
        f = self.flags
        out = ["fp32"]
        if f & {"avx512_bf16", "amx_bf16", "bf16"}:
            out.append("bf16")
        if f & {"avx512_fp16", "amx_fp16", "asimdhp"}:
            out.append("fp16")
        return tuple(out)

    def peak(self, dtype: str) -> float | None:
        """Estimated peak for ``fp32``/``fp64``; None for anything else (never guessed)."""
        return {"fp32": self.peak_fp32_flops, "fp64": self.peak_fp64_flops}.get(dtype)


def _blocks(text: str) -> list[dict[str, str]]:
    """Split /proc/cpuinfo into one dict per ``processor`` block."""
    out: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                out.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            cur[key.strip().lower()] = value.strip()
    if cur:
        out.append(cur)
    return out


def _simd(flags: frozenset[str], machine: str) -> SimdKind:
    if machine in ("aarch64", "arm64"):
        if "sve" in flags:
            return "sve"
        return "neon" if ("asimd" in flags or not flags) else "unknown"
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    if "avx" in flags:
        return "avx"
    if "sse2" in flags:
        return "sse2"
    return "unknown"


def _fma_units(simd: SimdKind, vendor: str, model: str) -> int | None:
    if simd == "unknown":
        return None
    units = FMA_UNITS_ASSUMED[simd][0]
    if simd == "avx512":
        if vendor == "AuthenticAMD" or re.search(r"\b(Silver|Bronze)\b", model):
            units = 1
    return units


def _freq_from_model(model: str) -> float | None:
    m = re.search(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", model)
    return float(m.group(1)) * 1e9 if m else None


def cpu_from_cpuinfo(
    text: str,
    *,
    machine: str = "x86_64",
    cpufreq_max_hz: float | None = None,
    frequency_hz: float | None = None,
    fma_units: int | None = None,
    fallback_model: str = "",
    fallback_logical: int | None = None,
) -> CPU:
    """Build a :class:`CPU` from the text of ``/proc/cpuinfo`` (pure; used by :func:`detect_cpu`).

    ``cpufreq_max_hz`` is ``cpuinfo_max_freq`` from sysfs when the kernel exposes it. The clock
    preference is: ``frequency_hz`` (given) > cpufreq max > ``@ X.XXGHz`` in the model name >
    ``cpu MHz`` (the current clock, which may be idle-scaled).
    """
    blocks = [b for b in _blocks(text) if "processor" in b]
    first = blocks[0] if blocks else {}
    logical = len(blocks) or (fallback_logical or 1)
    model, vendor = _model_and_vendor(first, machine, fallback_model)
    flags = frozenset((first.get("flags") or first.get("features") or "").split())
    physical, sockets = _topology(blocks, first, logical)

    simd = _simd(flags, machine)
    bits = _SIMD_BITS.get(simd)
    fma = "fma" in flags if machine not in ("aarch64", "arm64") else simd != "unknown"
    units = fma_units if fma_units is not None else _fma_units(simd, vendor, model)
    freq, fsrc = _clock(first, model, frequency_hz=frequency_hz, cpufreq_max_hz=cpufreq_max_hz)
    p32, p64, basis = _peaks(physical, freq, fsrc, simd, bits, units, fma=fma)
    return CPU(
        model_name=model, vendor=vendor, machine=machine, physical_cores=physical,
        logical_cores=logical, sockets=sockets, simd=simd, simd_bits=bits, fma=fma,
        fma_units=units, frequency_hz=freq, frequency_source=fsrc, flags=flags,
        peak_fp32_flops=p32, peak_fp64_flops=p64, peak_basis=basis,
    )


def _model_and_vendor(first: dict[str, str], machine: str,
                      fallback_model: str) -> tuple[str, str]:
    """The model name and vendor of the first processor block (Arm: from the implementer id)."""
    model = first.get("model name") or first.get("hardware") or ""
    vendor = first.get("vendor_id", "")
    if machine in ("aarch64", "arm64"):
        impl = first.get("cpu implementer", "").lower()
        vendor = vendor or _ARM_IMPLEMENTERS.get(impl, f"Arm implementer {impl}" if impl else "")
        if not model and impl:
            model = f"{vendor} CPU part {first.get('cpu part', '?')}"
    return model or fallback_model or "unknown CPU", vendor or "unknown"


def _topology(blocks: list[dict[str, str]], first: dict[str, str],
              logical: int) -> tuple[int, int]:
    """(physical cores, sockets)."""
    cores = {(b.get("physical id", "0"), b["core id"]) for b in blocks if "core id" in b}
    sockets = len({b.get("physical id", "0") for b in blocks}) or 1
    if cores:
        return len(cores), sockets
    if "cpu cores" in first:
        return int(first["cpu cores"]) * sockets, sockets
    return logical, sockets  # AArch64 kernels list no SMT topology here; cores = threads


def _clock(first: dict[str, str], model: str, *, frequency_hz: float | None,
           cpufreq_max_hz: float | None) -> tuple[float | None, str]:
    """(clock in Hz, where it came from), in :func:`cpu_from_cpuinfo`'s order of preference."""
    if frequency_hz is not None:
        return frequency_hz, "given"
    if cpufreq_max_hz:
        return cpufreq_max_hz, "cpufreq max (cpuinfo_max_freq)"
    if _freq_from_model(model):
        return _freq_from_model(model), "model name (base clock)"
    if first.get("cpu mhz"):
        return float(first["cpu mhz"]) * 1e6, "cpu MHz in /proc/cpuinfo (current clock)"
    return None, "unknown"


def _peaks(physical: int, freq: float | None, fsrc: str, simd: SimdKind, bits: int | None,
           units: int | None, *, fma: bool) -> tuple[float | None, float | None, str]:
    """(fp32 peak, fp64 peak, how they were estimated); no estimate when a factor is unknown."""
    if bits is None or units is None or freq is None:
        missing = [n for n, v in (("SIMD width", bits), ("FMA units", units), ("clock", freq))
                   if v is None]
        return None, None, f"no estimate: {', '.join(missing)} unknown"
    lanes32, lanes64 = bits // 32, bits // 64
    p32 = physical * freq * lanes32 * units * 2
    p64 = physical * freq * lanes64 * units * 2
    op = "FMA units x 2 FLOP/FMA" if fma else "units x (1 add + 1 multiply)"
    basis = (
        f"estimate: {physical} cores x {freq / 1e9:.2f} GHz ({fsrc}) x {lanes32} fp32 lanes "
        f"({simd.upper()}, {bits}-bit) x {units} {op} = {p32 / 1e9:.1f} GFLOP/s fp32 "
        f"({p64 / 1e9:.1f} fp64); FMA units assumed, wide-vector clocks are often lower"
    )
    return p32, p64, basis


def _read_text(path: str, limit: int = 4 * 1024 * 1024) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def detect_cpu(*, frequency_hz: float | None = None, fma_units: int | None = None) -> CPU:
    """This machine's CPU (reads ``/proc/cpuinfo`` and sysfs on Linux; never imports torch)."""
    import platform  # ~4 ms: only when a CPU is detected, not on every `gpuplan fit`

    machine = platform.machine().lower() or "unknown"
    text = _read_text("/proc/cpuinfo") or ""
    khz = _read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        max_hz = float(khz.strip()) * 1e3 if khz else None
    except ValueError:
        max_hz = None
    return cpu_from_cpuinfo(
        text, machine=machine, cpufreq_max_hz=max_hz, frequency_hz=frequency_hz,
        fma_units=fma_units, fallback_model=platform.processor() or platform.machine(),
        fallback_logical=os.cpu_count(),
    )


def _memory_bytes(meminfo_key: str, sysconf_pages: str) -> int | None:
    """``/proc/meminfo``'s ``meminfo_key``, else ``sysconf_pages`` x the page size; None if unknown."""
    text = _read_text("/proc/meminfo")
    if text:
        m = re.search(rf"^{meminfo_key}:\s+(\d+)\s*kB", text, re.MULTILINE)
        if m:
            return int(m.group(1)) * 1024
    try:
        return os.sysconf(sysconf_pages) * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory_bytes() -> int | None:
    """Host memory available to a new allocation (``MemAvailable``), bytes; None if unknown."""
    return _memory_bytes("MemAvailable", "SC_AVPHYS_PAGES")


def total_memory_bytes() -> int | None:
    """Installed host memory (``MemTotal``), bytes; None if unknown."""
    return _memory_bytes("MemTotal", "SC_PHYS_PAGES")


def hostname() -> str:
    """This machine's host name (``socket.gethostname``)."""
    import socket  # ~4 ms: only when a host name is needed, not on every `gpuplan fit`

    return socket.gethostname()
