"""The machine fingerprint a bench run is stored under (torch-free unless torch is already loaded).

``key`` (host name, CPU model, cores) identifies "this machine" without torch, so the speed model
can find this machine's latest run in milliseconds. GPU names, driver and torch/CUDA versions are
recorded beside it when torch is already imported (the bench imports it anyway) or when asked.
"""

from __future__ import annotations

import platform
import sys
from typing import Literal

from ..._version import __version__
from ..._extras import require
from ...hardware.cpu import CPU, detect_cpu, hostname, total_memory_bytes
from ...compute.measured import machine_key  # the key the speed model matches runs on
from .types import GPUInfo, Machine

__all__ = ["machine_fingerprint", "machine_key", "nvidia_driver_version"]


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver version from ``/proc/driver/nvidia/version`` (Linux), else None."""
    try:
        with open("/proc/driver/nvidia/version", "rb") as f:
            first = f.read(4096).decode("utf-8", "replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
    for tok in first.split():
        if tok[:1].isdigit() and "." in tok:
            return tok
    return first.strip() or None


def _torch_gpus(torch) -> tuple[GPUInfo, ...]:
    from ...hardware import gpu_from_device_name

    if not torch.cuda.is_available():
        return ()
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        name = torch.cuda.get_device_name(i)
        cat = gpu_from_device_name(name)
        out.append(GPUInfo(
            index=i, name=name, memory_bytes=int(props.total_memory),
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=getattr(props, "multi_processor_count", None),
            catalog_name=cat.name if cat else None,
        ))
    return tuple(out)


def machine_fingerprint(*, gpus: Literal["auto", "torch", "none"] = "auto",
                        cpu: CPU | None = None) -> Machine:
    """Describe this machine.

    ``gpus="auto"`` asks torch about CUDA devices only when torch is already imported (never
    imports it); ``"torch"`` imports torch to ask; ``"none"`` records no GPUs. The ``key`` never
    depends on this choice.
    """
    cpu = cpu or detect_cpu()
    host = hostname()
    torch = sys.modules.get("torch") if gpus == "auto" else None
    if gpus == "torch":  # explicitly requested: one line with the install command if missing
        torch = require("torch", feature="gpuplan bench (machine fingerprint with GPUs)")
    gpu_list: tuple[GPUInfo, ...] = ()
    torch_version = cuda_version = None
    if torch is not None:
        torch_version = str(torch.__version__)
        cuda_version = getattr(torch.version, "cuda", None)
        gpu_list = _torch_gpus(torch)
    return Machine(
        key=machine_key(host, cpu.model_name, cpu.physical_cores, cpu.logical_cores),
        hostname=host, os=platform.platform(), python=platform.python_version(),
        cpu_model=cpu.model_name, physical_cores=cpu.physical_cores,
        logical_cores=cpu.logical_cores, memory_bytes=total_memory_bytes(),
        cpu_peak_fp32_flops=cpu.peak_fp32_flops, cpu_peak_basis=cpu.peak_basis,
        gpus=gpu_list, driver=nvidia_driver_version() if gpu_list else None,
        torch=torch_version, cuda=cuda_version, gpuplan=__version__,
    )
