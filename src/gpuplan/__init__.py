"""gpuplan: will this model fit on this GPU, how fast will it run, and what do I change?

Importing gpuplan never imports torch; the tracing, benchmarking and profiling features import it
when they are used.
"""

from __future__ import annotations

from ._version import __version__

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
    # serving under load (issue 29)
    "capacity",
    # measuring (need torch, imported on first use)
    "profile",
]


# Every public name is imported on first use (PEP 562), so `import gpuplan` costs its version
# string and a command imports only the parts it runs (issue 27: a plan's start-up). Each group
# names the module it comes from; the import itself is written out in __getattr__ (no import by
# string). The subpackages `import gpuplan` used to load eagerly resolve the same way.
_ERRORS = ("GpuplanError", "InputError", "MissingDependencyError", "ModelFileError",
           "UnknownNameError", "UnsupportedError")
_FIT = ("plan", "Plan", "GpuVerdict")
_HARDWARE = ("GPU", "get_gpu", "all_gpus")
_JOB = ("Job",)
_MEMORY = ("train_memory", "infer_memory", "TrainMemory", "InferMemory")
_MODELS = ("Model", "Architecture", "load_model", "from_param_count")
_SPEED = ("estimate_speed", "SpeedEstimate", "estimate_cpu_speed")
_SOLVER = ("suggest", "Suggestion", "Suggestions", "max_batch", "max_seq")
_SUBPACKAGES = ("errors", "fit", "hardware", "job", "memory", "models")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return _subpackage(name)
    if name == "capacity":  # the package, callable as its capacity() (gpuplan.capacity(...))
        import gpuplan.capacity

        return globals()["capacity"]
    module = _home(name)
    value = getattr(module, name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBPACKAGES))


def _home(name: str):
    """The module a public name lives in, imported now."""
    if name in _ERRORS:
        return _subpackage("errors")
    if name in _FIT:
        return _subpackage("fit")
    if name in _HARDWARE:
        return _subpackage("hardware")
    if name in _JOB:
        return _subpackage("job")
    if name in _MEMORY:
        return _subpackage("memory")
    if name in _MODELS:
        return _subpackage("models")
    if name in _SPEED:
        from . import compute as module
    elif name in _SOLVER:
        from . import solver as module
    elif name == "profile":
        from .measure import profile as module
    else:
        raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")
    return module


def _subpackage(name: str):
    """``gpuplan.models`` and the like, imported now (as ``import gpuplan.models`` binds it here:
    ``from . import models`` would ask this module's ``__getattr__`` for it first)."""
    if name == "errors":
        import gpuplan.errors
    elif name == "fit":
        import gpuplan.fit
    elif name == "hardware":
        import gpuplan.hardware
    elif name == "job":
        import gpuplan.job
    elif name == "memory":
        import gpuplan.memory
    else:
        import gpuplan.models  # noqa: F401
    return globals()[name]
