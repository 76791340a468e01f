"""gpuplan: will this model fit on this GPU, how fast will it run, and what do I change?

Importing gpuplan never imports torch; the tracing, benchmarking and profiling features import it
when they are used.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import GpuplanError, InputError, MissingDependencyError, ModelFileError, UnknownNameError
from .hardware import GPU, all_gpus, get_gpu

__all__ = [
    "__version__",
    "GpuplanError", "InputError", "MissingDependencyError", "ModelFileError", "UnknownNameError",
    "GPU", "all_gpus", "get_gpu",
]
