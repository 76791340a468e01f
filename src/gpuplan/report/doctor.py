"""Rendering ``gpuplan doctor``: one screen of plain lines, and JSON."""

from __future__ import annotations

import json
import sys
from typing import IO

from ..doctor import DoctorReport
from ..units import format_bytes

__all__ = ["doctor_json", "doctor_lines", "render_doctor"]


def doctor_json(r: DoctorReport) -> str:
    return json.dumps(r.to_dict(), indent=2)


def _torch_line(r: DoctorReport) -> str:
    t = r.torch
    if t is None:
        return "not installed (trace, bench and profile need it: see `gpuplan trace --help`)"
    if t.error:
        return f"{t.version}: {t.error}"
    build = f"CUDA {t.cuda_build} build" if t.cuda_build else "CPU-only build"
    use = (f"CUDA available, {t.device_count} device(s)" if t.cuda_available
           else "CUDA not available")
    return f"{t.version} ({build}); {use}"


def _gpu_lines(r: DoctorReport) -> list[str]:
    if not r.gpus:
        return [f"  none seen (nvidia-smi: {r.nvidia_smi}; torch: "
                f"{'no CUDA' if r.torch else 'not installed'})"]
    out = []
    for i, g in enumerate(r.gpus):
        mem = format_bytes(g.memory_bytes) if g.memory_bytes else "memory ?"
        cat = (f"catalog {g.catalog}" if g.catalog else
               "not in the catalog (use --gpu with the closest SKU, or measure it: gpuplan bench)")
        out.append(f"  [{i}] {g.name}, {mem}, via {g.seen_by}: {cat}")
    return out


def _db_line(r: DoctorReport) -> str:
    db = r.bench_db
    if db.error:
        return f"{db.path}: {db.error}"
    if not db.exists:
        return f"{db.path} (not created yet: `gpuplan bench` stores runs there)"
    if not db.runs:
        return f"{db.path}: no runs stored"
    return (f"{db.path}: {db.runs} run(s); last #{db.last_run_id} at {db.last_run_utc} on "
            f"{db.last_run_machine}")


def doctor_lines(r: DoctorReport) -> list[str]:
    extras = []
    for extra, dists in r.extras.items():
        have = [f"{d} {v}" for d, v in dists.items() if v]
        missing = [d for d, v in dists.items() if not v]
        state = "yes" if not missing else ("partly" if have else "no")
        detail = ", ".join(have + [f"{d} missing" for d in missing])
        extras.append(f"  {extra:<12} {state:<6} ({detail})")
    return [
        f"gpuplan   {r.gpuplan}",
        f"python    {r.python} ({r.executable})",
        f"platform  {r.platform}",
        f"torch     {_torch_line(r)}",
        f"driver    {r.driver or 'none (nvidia-smi ' + r.nvidia_smi + ')'}",
        "GPUs",
        *_gpu_lines(r),
        f"bench db  {_db_line(r)}",
        "extras    (pip install 'gpuplan[NAME]')",
        *extras,
    ]


def render_doctor(r: DoctorReport, file: IO[str] | None = None) -> None:
    print("\n".join(doctor_lines(r)), file=file or sys.stdout)
