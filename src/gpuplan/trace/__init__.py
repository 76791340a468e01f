"""The trace: the exact memory timeline and FLOPs of a real PyTorch step, without a GPU.

The model's real training step (forward, loss, backward, ``optimizer.step()``, ``zero_grad()``) or
inference step (prefill + one decode with a KV cache) runs under PyTorch's ``FakeTensorMode``
(shapes and dtypes, no storage); a dispatch mode records every allocation and free, and CUDA's
dispatch is emulated where the CPU's differs (see :mod:`gpuplan.trace._emulate`). The result lines
up with ``gpuplan fit``'s per-GPU breakdown.

Importing this package does not import torch; :func:`trace_step` does.
"""

from __future__ import annotations

from ._api import trace_step
from ._limits import REAL_MAX_PARAMS
from ._result import TIMELINE_CATEGORIES, Emulation, Measurement, TraceResult
from ._spec import check_sequence
from .distributed import trace_sharded, trace_tensor_parallel

__all__ = ["trace_step", "trace_sharded", "trace_tensor_parallel", "TraceResult", "Measurement", "Emulation", "TIMELINE_CATEGORIES",
           "REAL_MAX_PARAMS", "check_sequence"]
