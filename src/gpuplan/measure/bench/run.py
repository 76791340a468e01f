"""Measure this machine: CPU vs GPU matmul, memory and transfer bandwidth, launch overhead.

The source document's experiment -- a 4000 x 4000 matmul on the CPU and on the GPU with
``torch.cuda.synchronize()`` around the GPU timing -- done so the numbers can be trusted and
compared: warm-up, synchronized blocks, adaptive repetitions, median and IQR (see
:mod:`gpuplan.measure.bench.timing`), the achieved FLOP/s against the catalog's *dense* peak, and the
size from which the GPU wins, with and without the copies to and from the device.

torch is imported when a measurement runs, never at import time.

Every device tensor is made by ``host_tensor.to(device)`` and every device-to-host copy is
``tensor.cpu()``: there is one way in and one way out, which keeps the copies visible (the tests
fake the device by routing those calls to host tensors and check that the copies are inside the
end-to-end timings).
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, get_args

from ..._record import record
from ..._extras import require
from ...errors import InputError, UnsupportedError, opt, shown
from ...hardware.cpu import CPU, available_memory_bytes, detect_cpu
from ...units import MiB, format_bytes
from . import timing
from .machine import machine_fingerprint
from .types import (
    ELEMENT_BYTES, BandwidthResult, BenchDtype, BenchRun, MatmulResult, OverheadResult,
)

__all__ = [
    "BenchConfig", "run_bench", "SWEEP_SIZES", "DEFAULT_SIZE", "DEFAULT_BUDGET_S",
    "DEFAULT_COPY_BYTES", "BENCH_DTYPES", "import_torch", "max_size_for",
]

#: The seed's experiment: one 4000 x 4000 matmul.
DEFAULT_SIZE = 4000
#: ``--sweep`` sizes: powers of two from 64 to 8192, and the seed's 4000.
SWEEP_SIZES = (64, 128, 256, 512, 1024, 2048, 4000, 4096, 8192)
#: Seconds of repetitions per measurement (``--budget``).
DEFAULT_BUDGET_S = 1.0
#: Buffer size of the bandwidth copies.
DEFAULT_COPY_BYTES = 256 * MiB
BENCH_DTYPES: tuple[str, ...] = get_args(BenchDtype)

#: What each matmul call is, stated in the settings of every run.
MATMUL_CALL = "torch.matmul(a, b, out=c) with a, b, c N x N on the device"
END_TO_END_CALL = ("a.to(dev), b.to(dev) from pageable host memory, c = a @ b, c.cpu() "
                   "(copies in and out included)")


def import_torch(feature: str = "gpuplan bench"):
    """torch, or a one-line error saying how to install it (:func:`gpuplan._extras.require`)."""
    return require("torch", feature=feature)


def no_cuda_reason(torch) -> str:
    """Why torch sees no CUDA device, in a few words: a CPU-only build, or no device/driver."""
    built = getattr(torch.version, "cuda", None)
    if not built:
        return f"this torch ({torch.__version__}) is a CPU-only build, it sees no CUDA device"
    return (f"torch {torch.__version__} (built for CUDA {built}) sees no CUDA device "
            "(torch.cuda.is_available() is False: no GPU, or no driver)")


@record
class BenchConfig:
    """What ``gpuplan bench`` measures."""

    sizes: tuple[int, ...] | None = None
    """Matmul sizes N; None: the seed's 4000, or :data:`SWEEP_SIZES` with ``sweep``. Sizes given
    here must fit in memory (an error otherwise); default sizes that do not fit are skipped."""
    dtypes: tuple[str, ...] | None = None
    """Matmul dtypes; None: fp32, or with ``sweep`` every dtype each device runs natively."""
    sweep: bool = False
    """Sweep sizes and dtypes instead of the single seed case."""
    device: str = "all"
    """``cpu``, ``cuda`` (every CUDA device), ``cuda:N`` or ``all`` (the CPU and every CUDA device)."""
    budget_s: float = DEFAULT_BUDGET_S
    """Seconds of repetitions per measurement before giving up on a 10% spread."""
    threads: int | None = None
    """CPU threads for torch; None: every CPU this process may run on."""
    bandwidth: bool = True
    """Also measure copy bandwidths and launch overhead."""
    copy_bytes: int = DEFAULT_COPY_BYTES
    """Buffer size of the bandwidth copies."""
    end_to_end: bool = True
    """Also time GPU matmuls with the copies in and out."""

    def __post_init__(self) -> None:
        if self.sizes is not None:
            if not self.sizes:
                raise InputError(f"{opt('size')}: give at least one size")
            for n in self.sizes:
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise InputError(f"{opt('size')} {shown(n)}: expected a whole number >= 1 "
                                     "(the matrices are N x N)")
        if self.dtypes is not None:
            for d in self.dtypes:
                if d not in BENCH_DTYPES:
                    raise InputError(f"{opt('dtype')} {shown(d)}: expected one of "
                                     f"{', '.join(BENCH_DTYPES)}")
        if self.device not in ("all", "cpu", "cuda") and not _is_cuda_index(self.device):
            raise InputError(f"{opt('device')} {shown(self.device)}: expected cpu, cuda, cuda:N or all")
        if not (isinstance(self.budget_s, (int, float)) and math.isfinite(self.budget_s)
                and 0 < self.budget_s <= 3600):
            raise InputError(f"{opt('budget')} {shown(self.budget_s)}: expected seconds per "
                             "measurement, "
                             "more than 0 and at most 3600")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise InputError(f"{opt('threads')} {shown(self.threads)}: expected a whole number >= 1")
        if not isinstance(self.copy_bytes, int) or self.copy_bytes < 1024:
            raise InputError(f"{opt('copy_size')} {shown(self.copy_bytes)}: expected at least 1 KiB")


def _is_cuda_index(s: str) -> bool:
    return s.startswith("cuda:") and s[5:].isdigit()


def max_size_for(free_bytes: int, dtype: str) -> int:
    """Largest N whose three N x N matrices (a, b, c) fit in ``free_bytes``."""
    return math.isqrt(max(0, free_bytes) // (3 * ELEMENT_BYTES[dtype]))


# --- devices -------------------------------------------------------------------------------------

def _torch_device(torch, spec: str):
    """The torch.device for ``cpu`` / ``cuda:N`` (the single place the tests re-route)."""
    return torch.device(spec)


@dataclass(kw_only=True)
class _Device:
    name: str
    """``cpu`` / ``cuda:N``."""
    label: str
    index: int | None
    tdev: object
    cc: tuple[int, int] | None = None
    catalog: object | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def is_cuda(self) -> bool:
        return self.index is not None


def _native_dtypes(dev: _Device, cpu: CPU) -> tuple[str, ...]:
    if not dev.is_cuda:
        return cpu.native_matmul_dtypes
    major, minor = dev.cc or (0, 0)
    out = ["fp32"]
    if major >= 8:
        out += ["tf32", "bf16"]
    if (major, minor) >= (5, 3):
        out.append("fp16")
    return tuple(out)


def _cuda_devices(torch, config: BenchConfig, notes: list[str], warnings: list[str]) -> list[_Device]:
    from ...hardware import gpu_from_device_name

    if config.device == "cpu":
        return []
    if not torch.cuda.is_available():
        if config.device != "all":  # asked for by name: an error, never a CPU run instead
            raise InputError(f"{opt('device')} {config.device}: {no_cuda_reason(torch)}; "
                             f"use {opt('device')} cpu (or all), or run on a machine with a CUDA "
                             "GPU")
        notes.append("No CUDA device found (torch.cuda.is_available() is False): CPU-only results.")
        return []
    count = torch.cuda.device_count()
    if _is_cuda_index(config.device):
        idx = int(config.device[5:])
        if idx >= count:
            raise InputError(f"{opt('device')} {config.device}: this machine has {count} CUDA "
                             "device(s), "
                             f"cuda:0 .. cuda:{count - 1}")
        indices = [idx]
    else:
        indices = list(range(count))
    devs = []
    for i in indices:
        name = torch.cuda.get_device_name(i)
        cat = gpu_from_device_name(name)
        if cat is None:
            warnings.append(f"GPU {name!r} (cuda:{i}) is not in gpuplan's catalog: measured numbers "
                            "only, no percent of peak (a peak is never guessed)")
        devs.append(_Device(name=f"cuda:{i}", label=name, index=i,
                            tdev=_torch_device(torch, f"cuda:{i}"),
                            cc=tuple(torch.cuda.get_device_capability(i)), catalog=cat))
    return devs


def _free_bytes(torch, dev: _Device) -> int | None:
    if dev.is_cuda:
        return int(torch.cuda.mem_get_info(dev.index)[0])
    return available_memory_bytes()


def _peak(dev: _Device, dtype: str, cpu: CPU, threads: int) -> tuple[float | None, str | None]:
    if dev.is_cuda:
        if dev.catalog is None:
            return None, None
        try:
            return dev.catalog.peak(dtype), f"catalog dense {dev.catalog.name}"
        except UnsupportedError:
            return None, None
    peak = cpu.peak(dtype)
    if not peak:
        return None, None
    used = min(threads, cpu.physical_cores)
    if used < cpu.physical_cores:  # fewer threads than cores: the peak of the cores in use
        return (peak * used / cpu.physical_cores,
                f"{cpu.peak_basis}; scaled to the {used} of {cpu.physical_cores} cores used")
    return peak, cpu.peak_basis


@contextmanager
def _tf32(torch, on: bool) -> Iterator[None]:
    """Allow (or forbid) TF32 for fp32 matmuls, restoring the user's setting afterwards."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):  # torch >= 2.9; do not mix with the legacy flag
        old = m.fp32_precision
        m.fp32_precision = "tf32" if on else "ieee"
        try:
            yield
        finally:
            m.fp32_precision = old
    else:
        old = m.allow_tf32
        m.allow_tf32 = on
        try:
            yield
        finally:
            m.allow_tf32 = old


def _tf32_default(torch) -> str:
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        return f"torch.backends.cuda.matmul.fp32_precision={m.fp32_precision!r}"
    return f"torch.backends.cuda.matmul.allow_tf32={m.allow_tf32!r}"


_TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


# --- the plan --------------------------------------------------------------------------------------

@record(kw_only=False)
class _Case:
    dev: str
    what: str  # "matmul" | bandwidth kind | overhead kind
    dtype: str = ""
    size: int = 0

    @property
    def label(self) -> str:
        if self.what == "matmul":
            return f"{self.dev} {self.dtype} {self.size}x{self.size} matmul"
        return f"{self.dev} {self.what.replace('_', ' ')}"


def _plan(torch, config: BenchConfig, cpu: CPU, devices: list[_Device],
          notes: list[str]) -> list[_Case]:
    """Every measurement to run, in order; memory is checked here, before anything runs."""
    cases: list[_Case] = []
    host_free = available_memory_bytes()
    sizes = config.sizes or (SWEEP_SIZES if config.sweep else (DEFAULT_SIZE,))
    strict = config.sizes is not None
    for dev in devices:
        native = _native_dtypes(dev, cpu)
        if config.dtypes is None:
            dtypes = native if config.sweep else ("fp32",)
        else:
            dtypes = []
            for d in config.dtypes:
                if not dev.is_cuda and d == "tf32":
                    if config.device == "cpu":
                        raise UnsupportedError(f"{opt('dtype')} tf32: TF32 is a GPU tensor-core "
                                               "mode and "
                                               f"the CPU has none; use {opt('dtype')} fp32")
                    if "fp32" not in config.dtypes:
                        notes.append("CPU measured in fp32, the counterpart of the GPUs' tf32.")
                        dtypes.append("fp32")
                    continue
                if dev.is_cuda and d not in native:
                    cc = ".".join(map(str, dev.cc or ()))
                    offer = next((o for o in ("bf16", "fp16", "fp32") if o in native and o != d))
                    msg = (f"{dev.name} ({dev.label}, compute capability {cc}) has no native {d} "
                           f"matmul")
                    if config.device.startswith("cuda"):
                        raise UnsupportedError(f"{opt('dtype')} {d}: {msg}; use {opt('dtype')} "
                                               f"{offer}")
                    notes.append(f"{msg}: skipped there.")
                    continue
                if not dev.is_cuda and d not in native:
                    notes.append(f"This CPU has no native {d} path (no matching feature flag): "
                                 "torch emulates it, so expect it to be slow.")
                dtypes.append(d)
        free = _free_bytes(torch, dev)
        for d in dict.fromkeys(dtypes):
            for n in sizes:
                need = 3 * n * n * ELEMENT_BYTES[d]
                short = [(where, f) for where, f in ((dev.name, free), ("the host", host_free))
                         if f is not None and need > f]
                if short:
                    where, f = short[0]
                    limit = max_size_for(f, d)
                    msg = (f"a {n}x{n} {d} matmul needs 3 x N^2 x {ELEMENT_BYTES[d]} B = "
                           f"{format_bytes(need)} on {where}, but {format_bytes(f)} is free")
                    if strict:
                        raise InputError(f"{opt('size')} {n}: {msg}; the largest that fits is "
                                         f"{opt('size')} {limit}")
                    notes.append(f"Skipped: {msg}.")
                    continue
                cases.append(_Case(dev.name, "matmul", d, n))
        if config.bandwidth:
            need = 3 * config.copy_bytes
            if (free is not None and need > free) or (host_free is not None and need > host_free):
                raise InputError(f"{opt('copy_size')} {format_bytes(config.copy_bytes)}: the "
                                 "bandwidth "
                                 f"copies need 3 x that = {format_bytes(need)} on {dev.name}; "
                                 f"give a smaller {opt('copy_size')}")
            kinds = (["device_copy", "h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned",
                      "kernel_launch"] if dev.is_cuda else ["host_copy", "op_dispatch"])
            cases += [_Case(dev.name, k) for k in kinds]
    return cases


# --- the measurements ------------------------------------------------------------------------------

def _timer(torch, dev: _Device, budget_s: float) -> Callable[[Callable[[], object]], timing.Timing]:
    if not dev.is_cuda:
        return lambda fn: timing.measure(fn, budget_s=budget_s)
    i = dev.index
    return lambda fn: timing.measure(
        fn, budget_s=budget_s, sync=lambda: torch.cuda.synchronize(i),
        event=lambda: torch.cuda.Event(enable_timing=True),
    )


def _matmul(torch, dev: _Device, dtype: str, n: int, config: BenchConfig, cpu: CPU,
            threads: int) -> tuple[MatmulResult, tuple[timing.Timing, timing.Timing | None]]:
    tdt = getattr(torch, _TORCH_DTYPES[dtype])
    gen = torch.Generator().manual_seed(n)
    a_h = torch.randn(n, n, generator=gen, dtype=tdt)
    b_h = torch.randn(n, n, generator=gen, dtype=tdt)
    timer = _timer(torch, dev, config.budget_s)
    e2e = None
    with _tf32(torch, dtype == "tf32") if dev.is_cuda else nullcontext():
        if dev.is_cuda:
            a, b = a_h.to(dev.tdev), b_h.to(dev.tdev)
        else:
            a, b = a_h, b_h
        c = torch.empty_like(a)
        t = timer(lambda: torch.matmul(a, b, out=c))
        del a, b, c
        if dev.is_cuda and config.end_to_end:
            def end_to_end():
                a_d = a_h.to(dev.tdev)
                b_d = b_h.to(dev.tdev)
                return torch.matmul(a_d, b_d).cpu()
            e2e = timer(end_to_end)
    peak, source = _peak(dev, dtype, cpu, threads)
    return MatmulResult(
        device=dev.name, device_name=dev.label, dtype=dtype, size=n, median_s=t.median_s,
        iqr_s=t.iqr_s, min_s=t.min_s, samples=t.samples, inner=t.inner, noisy=t.noisy,
        threads=None if dev.is_cuda else threads, tf32=dtype == "tf32",
        peak_flops=peak, peak_source=source,
        end_to_end_median_s=e2e.median_s if e2e else None,
        end_to_end_iqr_s=e2e.iqr_s if e2e else None,
        device_median_s=t.device_median_s,
    ), (t, e2e)


def _copy(torch, dev: _Device, kind: str, nbytes: int, budget_s: float):
    timer = _timer(torch, dev, budget_s)
    u8 = torch.uint8
    if kind == "host_copy":
        src = torch.ones(nbytes, dtype=u8)
        dst = torch.empty_like(src)
        return timer(lambda: dst.copy_(src))
    if kind == "device_copy":
        src = torch.ones(nbytes, dtype=u8).to(dev.tdev)
        dst = torch.empty_like(src)
        return timer(lambda: dst.copy_(src))
    pinned = kind.endswith("pinned")
    host = torch.ones(nbytes, dtype=u8)
    if pinned:
        host = host.pin_memory()
    on_dev = torch.zeros(nbytes, dtype=u8).to(dev.tdev)
    if kind.startswith("h2d"):
        return timer(lambda: on_dev.copy_(host, non_blocking=pinned))
    return timer(lambda: host.copy_(on_dev, non_blocking=pinned))


def _overhead(torch, dev: _Device, budget_s: float):
    x = torch.zeros(1)
    if dev.is_cuda:
        x = x.to(dev.tdev)
    return _timer(torch, dev, budget_s)(lambda: x.add_(1.0))


def _load() -> float | None:
    """The 1-minute load average (Unix), recorded so a noisy run can be understood later."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _runnable() -> int | None:
    """Runnable tasks right now, this process included (``/proc/loadavg``, Linux), else None."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read(256).split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None


def _is_oom(e: BaseException) -> bool:
    text = str(e)
    return (type(e).__name__ == "OutOfMemoryError" or "out of memory" in text.lower()
            or "can't allocate memory" in text)


def _noisy_warning(what: str, t: timing.Timing) -> str:
    return (f"{what}: spread (IQR/median) {100 * t.spread:.0f}% is above "
            f"{100 * t.target_spread:.0f}% after {t.samples} samples ({t.elapsed_s:.1f} s): the "
            "machine was busy; rerun on a quieter machine or raise --budget")


Progress = Callable[[str, int, int], None]


def run_bench(config: BenchConfig | None = None, *, progress: Progress | None = None,
              cpu: CPU | None = None) -> BenchRun:
    """Run the measurements ``config`` asks for and return them (nothing is stored here).

    ``progress(label, done, total)`` is called before each measurement and once at the end.
    """
    config = config or BenchConfig()
    torch = import_torch()
    cpu = cpu or detect_cpu()
    out = _Results()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    devices = _devices(torch, config, cpu, out)
    threads = config.threads or _affinity()
    cases = _plan(torch, config, cpu, devices, out.notes)
    settings = _settings(torch, config, cases, threads)
    busy = settings["load_average_1min_start"]
    if busy is not None and busy > 0.75 * (os.cpu_count() or 1):
        out.warnings.append(
            f"the machine was already busy (1-minute load average {busy:.1f} on "
            f"{os.cpu_count()} CPUs): timings include waiting for other processes, and "
            "multi-threaded CPU matmuls suffer most; rerun when it is idle")
    by_name = {d.name: d for d in devices}
    default_threads = settings["threads_default"]
    torch.set_num_threads(threads)
    try:
        for k, case in enumerate(cases):
            if progress:
                progress(case.label, k, len(cases))
            out.note_crowding(case.label)
            dev = by_name[case.dev]
            with torch.cuda.device(dev.index) if dev.is_cuda else nullcontext():
                _run_case(torch, case, dev, config, cpu, threads, out)
        if progress:
            progress("done", len(cases), len(cases))
    finally:
        torch.set_num_threads(default_threads)
    settings["load_average_1min_end"] = _load()
    settings["crowded_cases"] = len(out.crowded)
    if out.crowded:
        out.warnings.append(_crowded_warning(out.crowded, len(cases)))
    return BenchRun(
        created_utc=created, machine=machine_fingerprint(gpus="torch", cpu=cpu),
        matmul=tuple(out.matmul), bandwidth=tuple(out.bandwidth), overhead=tuple(out.overhead),
        settings=settings, notes=tuple(out.notes), warnings=tuple(out.warnings),
    )


@dataclass
class _Results:
    """What a run has measured and said so far."""

    matmul: list[MatmulResult] = field(default_factory=list)
    bandwidth: list[BandwidthResult] = field(default_factory=list)
    overhead: list[OverheadResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    crowded: list[tuple[str, int]] = field(default_factory=list)
    """(measurement, runnable tasks) for measurements started with more runnable tasks than CPUs."""

    def note_crowding(self, label: str) -> None:
        runnable = _runnable()
        if runnable is not None and runnable > (os.cpu_count() or 1):
            self.crowded.append((label, runnable))

    def timed(self, label: str, t: timing.Timing | None) -> None:
        if t is not None and t.noisy:
            self.warnings.append(_noisy_warning(label, t))


def _devices(torch, config: BenchConfig, cpu: CPU, out: _Results) -> list[_Device]:
    """The CPU (unless only CUDA devices were asked for and there are some) and the CUDA devices."""
    cuda = _cuda_devices(torch, config, out.notes, out.warnings)
    devices: list[_Device] = []
    if config.device in ("all", "cpu") or not cuda:
        devices.append(_Device(name="cpu", label=cpu.model_name, index=None,
                               tdev=_torch_device(torch, "cpu")))
    return devices + cuda


def _affinity() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _settings(torch, config: BenchConfig, cases: list[_Case], threads: int) -> dict:
    """How the run was made, stored with it."""
    return {
        "threads": threads, "threads_default": torch.get_num_threads(),
        "threads_basis": "--threads" if config.threads else "every CPU this process may run on",
        "tf32_default": _tf32_default(torch), "budget_s": config.budget_s,
        "target_spread": timing.TARGET_SPREAD, "sweep": config.sweep, "device": config.device,
        "sizes": sorted({c.size for c in cases if c.what == "matmul"}),
        "dtypes": list(dict.fromkeys(c.dtype for c in cases if c.what == "matmul")),
        "copy_bytes": config.copy_bytes if config.bandwidth else None,
        "matmul_call": MATMUL_CALL, "end_to_end_call": END_TO_END_CALL if config.end_to_end else None,
        "torch_version": str(torch.__version__),
        "load_average_1min_start": _load(),
    }


def _run_case(torch, case: _Case, dev: _Device, config: BenchConfig, cpu: CPU, threads: int,
              out: _Results) -> None:
    """Measure one case into ``out``."""
    if case.what == "matmul":
        try:
            res, (t, e2e) = _matmul(torch, dev, case.dtype, case.size, config, cpu, threads)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
            if not _is_oom(e):
                raise
            msg = (f"{case.label}: out of memory on {dev.name} although the free "
                   "memory looked sufficient (other processes, fragmentation)")
            if config.sizes is not None:
                raise InputError(f"{opt('size')} {case.size}: {msg}; try a smaller "
                                 f"{opt('size')}", field="size", value=case.size) from None
            out.notes.append(f"Skipped: {msg}.")
            return
        out.matmul.append(res)
        out.timed(case.label, t)
        out.timed(case.label + " end-to-end", e2e)
    elif case.what in ("kernel_launch", "op_dispatch"):
        t = _overhead(torch, dev, config.budget_s)
        out.overhead.append(OverheadResult(device=dev.name, kind=case.what, median_s=t.median_s,
                                           iqr_s=t.iqr_s, noisy=t.noisy))
        out.timed(case.label, t)
    else:
        t = _copy(torch, dev, case.what, config.copy_bytes, config.budget_s)
        out.bandwidth.append(BandwidthResult(device=dev.name, kind=case.what,
                                             nbytes=config.copy_bytes, median_s=t.median_s,
                                             iqr_s=t.iqr_s, noisy=t.noisy))
        out.timed(case.label, t)


def _crowded_warning(crowded: list[tuple[str, int]], total: int) -> str:
    cpus = os.cpu_count() or 1
    worst = max(r for _, r in crowded)
    names = ", ".join(label for label, _ in crowded[:3]) + (", ..." if len(crowded) > 3 else "")
    return (f"{len(crowded)} of {total} measurements started with more runnable tasks than "
            f"CPUs (up to {worst} on {cpus}; {names}): other processes competed for the CPU, so "
            "those CPU timings -- multi-threaded ones most of all -- are inflated; rerun when the "
            "machine is idle")
