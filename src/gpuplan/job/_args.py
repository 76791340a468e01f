"""The Python API's own arguments, checked as the CLI checks its options (issue 32, part 3).

A :class:`~gpuplan.job.Job` validates itself; the other arguments of the public functions
(``gpuplan.__all__``) are checked here: the type (a str where a Model, GPU or CPU belongs, a float
where a count belongs), the range (:mod:`gpuplan.bounds`) and finiteness. Each failure is one
:class:`~gpuplan.errors.InputError` whose ``field`` is the argument's name, so a result is finite
or the call refuses.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..bounds import check_int, check_number
from ..errors import InputError, opt, shown
from ..hardware import GPU
from ..hardware.cpu import CPU
from ..models import Architecture, Model
from ._job import Job

__all__ = ["model_arg", "gpu_arg", "cpu_arg", "job_arg", "int_arg", "number_arg", "flag_arg",
           "choice_arg", "MAX_TOP", "MAX_CHANGES", "MAX_NEW_TOKENS"]

#: Most suggestions asked of the solver (``top``): each is a distinct idea; no search has more.
MAX_TOP = 1000

#: Most changes combined in one suggestion (``max_changes``): the solver tries every combination
#: of that many knob groups, so its work grows as (options per group)^k; 4 is past any answer it
#: gives (it stops at pairs once enough software changes fit) and still ends in seconds.
MAX_CHANGES = 4

#: Most tokens generated per sequence in a speed estimate (as ``--new-tokens``).
MAX_NEW_TOKENS = 10**7


def _refuse(field: str, value: object, expected: str, hint: str = "") -> InputError:
    return InputError(f"{opt(field)} {shown(value)}: expected {expected} (got "
                      f"{type(value).__name__}){hint}", field=field, value=value,
                      accepted=expected)


def model_arg(value: object, field: str = "model", *, architecture: bool = False):
    """``value`` if it is a :class:`Model` (or, with ``architecture``, an Architecture)."""
    if isinstance(value, Model) or (architecture and isinstance(value, Architecture)):
        return value
    what = "a gpuplan Model" + (" or Architecture" if architecture else "")
    hint = "; load it first: gpuplan.load_model(name)" if isinstance(value, str) else ""
    raise _refuse(field, value, what, hint)


def gpu_arg(value: object, field: str = "gpu") -> GPU:
    """``value`` if it is a :class:`GPU` (a name is looked up with ``get_gpu``, not here)."""
    if isinstance(value, GPU):
        return value
    hint = "; look it up first: gpuplan.get_gpu(name)" if isinstance(value, str) else ""
    raise _refuse(field, value, "a gpuplan GPU", hint)


def cpu_arg(value: object, field: str = "cpu", *, optional: bool = True) -> CPU | None:
    """``value`` if it is a :class:`~gpuplan.hardware.cpu.CPU` or reads as one (its cores and
    peak: a stand-in a caller builds), or None when ``optional``."""
    if isinstance(value, CPU) or (optional and value is None):
        return value
    if all(hasattr(value, a) for a in ("physical_cores", "peak_fp32_flops")):
        return value
    hint = "; detect it: gpuplan.hardware.cpu.detect_cpu()" if isinstance(value, str) else ""
    raise _refuse(field, value, "a gpuplan CPU" + (" or None" if optional else ""), hint)


def job_arg(value: object, field: str = "job") -> Job:
    if isinstance(value, Job):
        return value
    raise _refuse(field, value, "a gpuplan.Job", "; build one: gpuplan.Job(model=...)"
                  if isinstance(value, (str, dict)) else "")


def int_arg(value: object, field: str, bound: str = "int", *, low: int | None = None,
            high: int | None = None, optional: bool = False) -> int | None:
    """A whole number in the range ``bound`` of :mod:`gpuplan.bounds` (narrowed by ``low`` /
    ``high``); None passes when ``optional``."""
    if optional and value is None:
        return None
    return check_int(value, bound, low=low, high=high, field=field)


def number_arg(value: object, field: str, bound: str, *, optional: bool = False) -> float | None:
    """A finite number in the range ``bound``; None passes when ``optional``."""
    if optional and value is None:
        return None
    return check_number(value, bound, field=field)


def flag_arg(value: object, field: str, *, optional: bool = False) -> bool | None:
    """True or False (None too when ``optional``): 0, 1 or "yes" is not a switch."""
    if isinstance(value, bool) or (optional and value is None):
        return value
    raise _refuse(field, value, "true or false" + (" or None" if optional else ""))


def choice_arg(value: object, field: str, choices: Iterable[str], *,
               optional: bool = False) -> str | None:
    """One of ``choices`` (None too when ``optional``)."""
    choices = tuple(choices)
    if (optional and value is None) or (isinstance(value, str) and value in choices):
        return value
    raise _refuse(field, value, "one of " + ", ".join(map(repr, choices))
                  + (" or None" if optional else ""))
