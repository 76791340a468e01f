"""``gpuplan doctor``: what this machine has, in one screen -- the first thing to paste into a bug
report.

Python and the platform; torch, its CUDA build and the devices it sees (only when torch is
installed, and never failing when it is broken); the GPUs ``nvidia-smi`` lists, with the driver
and each one's catalog SKU; the bench database and its last run; and which optional extras are
installed (read from package metadata: nothing heavy is imported to find out).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, field

from ._record import record
from ._version import __version__
from ._extras import extras_status, installed_version
from .errors import GpuplanError
from .hardware import gpu_from_device_name
from .measure import default_db_path, list_runs

__all__ = ["SeenGPU", "TorchInfo", "BenchDbInfo", "DoctorReport", "diagnose"]

#: Seconds nvidia-smi may take before doctor gives up on it (a hung driver must not hang doctor).
NVIDIA_SMI_TIMEOUT_S = 10

_MIB = 1 << 20


@record
class SeenGPU:
    """A GPU this machine shows."""

    name: str
    """The device name as the driver reports it (``NVIDIA H100 80GB HBM3``)."""
    memory_bytes: int | None
    seen_by: str
    """``nvidia-smi`` or ``torch``."""
    catalog: str | None
    """The catalog SKU with exactly this device name (``gpuplan gpus``), else None."""


@record
class TorchInfo:
    """torch as this Python sees it (absent when not installed)."""

    version: str | None
    cuda_build: str | None
    """``torch.version.cuda``: the CUDA the wheel was built for (None: a CPU-only build)."""
    cuda_available: bool
    device_count: int
    error: str | None = None
    """Why torch could not be imported or queried, when it could not."""


@record
class BenchDbInfo:
    path: str
    exists: bool
    runs: int
    last_run_id: int | None = None
    last_run_utc: str | None = None
    last_run_machine: str | None = None
    error: str | None = None


@record
class DoctorReport:
    gpuplan: str
    python: str
    executable: str
    platform: str
    torch: TorchInfo | None
    gpus: tuple[SeenGPU, ...]
    driver: str | None
    nvidia_smi: str
    """``found``, ``not found`` (no NVIDIA driver tools on the path) or what went wrong."""
    bench_db: BenchDbInfo
    extras: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @property
    def extras_installed(self) -> tuple[str, ...]:
        return tuple(e for e, dists in self.extras.items() if all(dists.values()))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["extras_installed"] = list(self.extras_installed)
        return d


def _nvidia_smi() -> tuple[list[SeenGPU], str | None, str]:
    """GPUs and the driver version from ``nvidia-smi`` (none when it is not installed)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [], None, "not found"
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], None, f"failed: {type(e).__name__}"
    if out.returncode != 0:
        first = (out.stderr or out.stdout).strip().splitlines()[:1]
        return [], None, f"exit {out.returncode}" + (f": {first[0]}" if first else "")
    gpus, driver = [], None
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        name, mem, driver = parts
        match = gpu_from_device_name(name)
        gpus.append(SeenGPU(name=name, memory_bytes=int(mem) * _MIB if mem.isdigit() else None,
                            seen_by="nvidia-smi", catalog=match.name if match else None))
    return gpus, driver, "found"


def _torch() -> tuple[TorchInfo | None, list[SeenGPU]]:
    """torch's build and its CUDA devices; None when torch is not installed."""
    version = installed_version("torch")
    if version is None:
        return None, []
    try:
        import torch  # the torch boundary: doctor reports on it
    except Exception as e:  # noqa: BLE001 -- a broken install is what doctor is for
        return TorchInfo(version=version, cuda_build=None, cuda_available=False, device_count=0,
                         error=f"import failed: {type(e).__name__}: {str(e)[:160]}"), []
    cuda_build = getattr(torch.version, "cuda", None)
    try:
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count()) if available else 0
        names = [torch.cuda.get_device_name(i) for i in range(count)]
        mems = [int(torch.cuda.get_device_properties(i).total_memory) for i in range(count)]
    except Exception as e:  # noqa: BLE001 -- a CUDA init failure is reported, not raised
        return TorchInfo(version=torch.__version__, cuda_build=cuda_build, cuda_available=False,
                         device_count=0, error=f"CUDA query failed: {str(e)[:160]}"), []
    seen = []
    for name, mem in zip(names, mems):
        match = gpu_from_device_name(name)
        seen.append(SeenGPU(name=name, memory_bytes=mem, seen_by="torch",
                            catalog=match.name if match else None))
    return TorchInfo(version=torch.__version__, cuda_build=cuda_build, cuda_available=available,
                     device_count=count), seen


def _bench_db() -> BenchDbInfo:
    path = default_db_path()
    if not path.exists():
        return BenchDbInfo(path=str(path), exists=False, runs=0)
    try:
        runs = list_runs()
    except GpuplanError as e:  # StoreError (unreadable, locked, newer schema): shown, not raised
        return BenchDbInfo(path=str(path), exists=True, runs=0, error=str(e)[:200])
    if not runs:
        return BenchDbInfo(path=str(path), exists=True, runs=0)
    last = runs[0]
    return BenchDbInfo(path=str(path), exists=True, runs=len(runs), last_run_id=last.run_id,
                       last_run_utc=last.created_utc, last_run_machine=last.machine.hostname)


def diagnose() -> DoctorReport:
    """What this machine has (see the module docstring)."""
    smi_gpus, driver, smi = _nvidia_smi()
    torch_info, torch_gpus = _torch()
    return DoctorReport(
        gpuplan=__version__, python=platform.python_version(), executable=sys.executable,
        platform=platform.platform(), torch=torch_info,
        # nvidia-smi sees every GPU the driver has; torch only those CUDA_VISIBLE_DEVICES leaves
        gpus=tuple(smi_gpus or torch_gpus), driver=driver, nvidia_smi=smi, bench_db=_bench_db(),
        extras=extras_status())

