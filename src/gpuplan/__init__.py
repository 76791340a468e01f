"""gpuplan: will this model fit on this GPU, how fast will it run, and what do I change?

Importing gpuplan never imports torch; the tracing, benchmarking and profiling features import it
when they are used.
"""

from __future__ import annotations

from ._version import __version__

from .errors import (
    GpuplanError, InputError, MissingDependencyError, ModelFileError, UnknownNameError,
    UnsupportedError,
)
from .fit import GpuVerdict, Plan, plan
from .hardware import GPU, all_gpus, get_gpu
from .job import Job
from .memory import InferMemory, TrainMemory, infer_memory, train_memory
from .models import Architecture, Model, from_param_count, load_model

__all__ = [
    "__version__",
    # errors
    "GpuplanError", "InputError", "MissingDependencyError", "ModelFileError", "UnknownNameError",
    "UnsupportedError",
    # inputs
    "Job", "Model", "Architecture", "load_model", "from_param_count", "GPU", "get_gpu", "all_gpus",
    # the accounting
    "plan", "Plan", "GpuVerdict", "train_memory", "infer_memory", "TrainMemory", "InferMemory",
    # the make-it-fit solver
    "suggest", "Suggestion", "Suggestions", "max_batch", "max_seq",
    # the speed model
    "estimate_speed", "estimate_cpu_speed", "SpeedEstimate",
    # measuring (need torch, imported on first use)
    "profile",
]


# Imported on first use (PEP 562): the speed model and the solver are not needed to plan memory,
# and gpuplan.profile(...) needs torch only when a profile is entered.
_SPEED = ("estimate_speed", "SpeedEstimate", "estimate_cpu_speed")
_SOLVER = ("suggest", "Suggestion", "Suggestions", "max_batch", "max_seq")


def __getattr__(name: str):
    if name in _SPEED:
        from . import compute as module
    elif name in _SOLVER:
        from . import solver as module
    elif name == "profile":
        from .measure import profile as module
    else:
        raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")
    return getattr(module, name)
