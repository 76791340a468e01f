"""Rendering of the GPU catalog: the ``gpuplan gpus`` table, one GPU in detail, and the JSON form.

Pure presentation over :mod:`gpuplan.hardware`; numbers are formatted here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..hardware import DTYPES, GPU
from ..units import ByteUnits, format_bytes, format_rate

if TYPE_CHECKING:  # rich is a dependency, but only imported when something is rendered
    from rich.console import RenderableType
    from rich.table import Table

__all__ = ["catalog_json", "gpu_json", "gpus_table", "gpu_detail", "TABLE_DTYPES"]

#: The peak columns of the catalog table, in order.
TABLE_DTYPES = ("bf16", "fp16", "fp8", "fp32")

_ABSENT = "—"


def catalog_json(gpus: Sequence[GPU]) -> dict[str, object]:
    """``gpuplan gpus --json``: every record in SI units (bytes, bytes/s, FLOP/s) with its sources."""
    return {
        "units": {"memory": "bytes", "bandwidth": "bytes/s", "peak_flops": "FLOP/s (int8: op/s), dense"},
        "gpus": [g.as_dict() for g in gpus],
    }


def gpu_json(gpu: GPU, *, query: str, note: str | None) -> dict[str, object]:
    """``gpuplan gpus NAME --json``: the record, the name asked for, and the alias note if any."""
    return {
        "query": query,
        "alias_of": gpu.name if note else None,
        "note": note,
        "units": {"memory": "bytes", "bandwidth": "bytes/s", "peak_flops": "FLOP/s (int8: op/s), dense"},
        "gpu": gpu.as_dict(),
    }


def _tflops(gpu: GPU, dtype: str) -> str:
    value = gpu.peak_flops.get(dtype)
    return _ABSENT if value is None else f"{value / 1e12:,.1f}"


def _num(x: float) -> str:
    """``900 -> '900'``, ``112.5 -> '112.5'``, ``3350 -> '3,350'``."""
    return f"{x:,.1f}".removesuffix(".0")


def _bandwidth(rate: float | None, units: ByteUnits) -> str:
    """Bytes/s in the chosen byte unit (``3,350 GB/s`` or ``3,120 GiB/s``); absent when unknown."""
    if rate is None:
        return _ABSENT
    if units == "GiB":
        return f"{_num(rate / 2**30)} GiB/s"
    return f"{_num(rate / 1e9)} GB/s"


def _peak(gpu: GPU, dtype: str) -> str:
    return f"{gpu.peak_flops[dtype] / 1e12:,.1f} " + ("TOPS" if dtype == "int8" else "TFLOP/s")


def _pcie(gpu: GPU) -> str:
    if gpu.pcie_gen is None:
        return "none" if gpu.memory_kind == "unified" else _ABSENT
    return f"Gen{gpu.pcie_gen} x{gpu.pcie_lanes}"


def _units(gpu: GPU) -> str:
    """What the SM column counts: SMs, AMD compute units, or Apple GPU cores."""
    return {"AMD": "CU", "Apple": "GPU core"}.get(gpu.vendor, "SM")


def _count(value: int | None) -> str:
    return _ABSENT if value is None else f"{value:,}"


def _interconnect(gpu: GPU, units: ByteUnits) -> str:
    if gpu.interconnect is None or gpu.interconnect_bandwidth is None:
        return "none"
    return f"{gpu.interconnect} {_bandwidth(gpu.interconnect_bandwidth, units)}"


def gpus_table(gpus: Sequence[GPU], *, units: ByteUnits = "GB", sources: bool = False) -> Table:
    """The catalog as one rich table: memory, bandwidth, dense peaks, SMs, PCIe, interconnect."""
    from rich.table import Table

    table = Table(
        title="GPU catalog — dense peak TFLOP/s, never the 2:4-sparse figures",
        caption=f"memory: the vendor's label, and the total the device reports (CUDA/ROCm; the nominal "
                f"capacity where no record exists, and all of an Apple chip's unified memory) in {units} "
                f"({'10^9' if units == 'GB' else '2^30'} bytes); {_ABSENT} = no such path or no published "
                "figure (`gpuplan gpus NAME` says which)",
        title_justify="left", caption_justify="left",
    )
    table.add_column("GPU", no_wrap=True)
    table.add_column("aliases")
    table.add_column("memory", no_wrap=True)
    table.add_column(f"reported ({units})", justify="right", no_wrap=True)
    table.add_column("bandwidth", justify="right", no_wrap=True)
    for d in TABLE_DTYPES:
        table.add_column(d, justify="right", no_wrap=True)
    table.add_column("SMs", justify="right")
    table.add_column("PCIe", no_wrap=True)
    table.add_column("interconnect")
    if sources:
        table.add_column("source", no_wrap=True)
    for g in gpus:
        row = [
            g.name,
            ", ".join(g.aliases),
            g.memory_label,
            format_bytes(g.memory_bytes, units),
            _bandwidth(g.memory_bandwidth, units),
            *(_tflops(g, d) for d in TABLE_DTYPES),
            _ABSENT if g.sm_count is None else f"{g.sm_count}" + {"AMD": " CUs", "Apple": " cores"}.get(g.vendor, ""),
            _pcie(g),
            _interconnect(g, units),
        ]
        if sources:
            row.append("\n".join(g.sources))
        table.add_row(*row)
    return table


def _detail_rows(gpu: GPU, units: ByteUnits) -> list[tuple[str, str]]:
    """The field/value rows of ``gpuplan gpus NAME``; an unknown number shows as absent."""
    sm = _units(gpu)
    threads = gpu.resident_threads
    pcie = gpu.pcie_bandwidth
    return [
        ("memory", f"{format_bytes(gpu.memory_bytes, units, digits=2)} ({gpu.memory_bytes:,} bytes; "
                   f"vendor label {gpu.memory_label})"
                   + ("; unified: shared with the CPU" if gpu.memory_kind == "unified" else "")),
        ("memory bandwidth", _bandwidth(gpu.memory_bandwidth, units)),
        (f"{sm}s", _count(gpu.sm_count)),
        (f"max threads per {sm}", _count(gpu.max_threads_per_sm)),
        ("resident threads", _ABSENT if threads is None
         else f"{threads:,} ({gpu.sm_count} x {gpu.max_threads_per_sm})"),
        ("compute capability", gpu.compute_capability or _ABSENT),
        ("PCIe", _pcie(gpu) if pcie is None
         else f"{_pcie(gpu)}: {format_rate(pcie, 'B/s')} per direction"),
        ("plans", "training and inference" if gpu.training
         else "inference (see notes: not planned as a training device)"),
        ("interconnect", _interconnect(gpu, units) + (" (both directions, per GPU)"
                                                       if gpu.interconnect else "")),
        ("TDP", _ABSENT if gpu.tdp_watts is None else f"{gpu.tdp_watts:g} W"),
        ("torch device names", ", ".join(gpu.device_names) or "none recorded (see notes)"),
        ("aliases", ", ".join(gpu.aliases) or _ABSENT),
    ]


def gpu_detail(gpu: GPU, *, units: ByteUnits = "GB", note: str | None = None) -> list[RenderableType]:
    """One GPU in full: every dtype's peak and ridge point, threads, links, sources and notes."""
    from rich.table import Table
    from rich.text import Text

    out: list[RenderableType] = []
    if note:
        out.append(Text(note))
    info = Table(title=f"{gpu.name} ({gpu.vendor} {gpu.architecture})", show_header=False,
                 title_justify="left")
    info.add_column("field", style="bold", no_wrap=True)
    info.add_column("value", overflow="fold")
    rows = _detail_rows(gpu, units)
    for k, v in rows:
        info.add_row(k, v)
    out.append(info)

    peaks = Table(title="dense peaks", title_justify="left")
    peaks.add_column("dtype", no_wrap=True)
    peaks.add_column("peak", justify="right", no_wrap=True)
    peaks.add_column("ridge point (FLOP/byte)", justify="right", no_wrap=True)
    for d in DTYPES:
        if d in gpu.peak_flops:
            ridge = _ABSENT if gpu.memory_bandwidth is None else f"{gpu.ridge_point(d):,.0f}"
            peaks.add_row(d, _peak(gpu, d), ridge)
        else:
            peaks.add_row(d, _ABSENT, _ABSENT)
    out.append(peaks)

    record = gpu.extra.get("memory_record")
    tail = Table(show_header=False, box=None)
    tail.add_column("field", style="bold", no_wrap=True)
    tail.add_column("value", overflow="fold")
    tail.add_row("sources", "\n".join(gpu.sources))
    if record:
        tail.add_row("memory record", str(record))
    tail.add_row("notes", gpu.notes)
    out.append(tail)
    return out
