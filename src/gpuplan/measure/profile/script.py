"""Run an unmodified training script under the profiler (``gpuplan profile script.py ...``).

The script runs as ``__main__`` (``runpy.run_path``) with ``sys.argv`` set to its own arguments
and its directory first on ``sys.path``, exactly as ``python script.py args...`` would run it.
The instrumentation is installed by patching for the duration (see ``hooks``), including
every DataLoader iterator.

After ``steps`` measured steps the script is either stopped (``then='stop'``: a
:class:`StopProfiling` -- a BaseException, so ``except Exception`` in the script does not catch it
-- is raised at the next step boundary; ``finally`` blocks run) or left to finish at full speed
with the instrumentation removed (``then='continue'``).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Literal

from ..._record import record
from ...errors import InputError, shown
from . import Profiler
from .analysis import NoStepsError
from .distributed import DistEnv, gather_reports
from .recorder import StopProfiling
from .types import ProfileReport

__all__ = ["ScriptRun", "ScriptProfile", "run_script", "collect", "check_script", "user_traceback"]

Then = Literal["stop", "continue"]


@record
class ScriptRun:
    """How a profiled script ended, and what was measured."""

    report: ProfileReport | None
    """None when no step was measured (``no_steps`` says why)."""
    no_steps: str | None
    status: str
    """``complete``, ``stopped``, ``error`` or ``interrupted``."""
    exit_code: int
    """The status ``python script.py`` would have exited with (0 when stopped by the profiler)."""
    traceback_text: str | None
    """The script's own traceback (gpuplan's frames removed) when it raised."""


_OWN_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the gpuplan package
)
_RUNPY = os.path.abspath(runpy.__file__)


def _is_ours(filename: str) -> bool:
    if filename == "<frozen runpy>":  # runpy frozen into the interpreter (3.11+)
        return True
    f = os.path.abspath(filename)
    return f == _RUNPY or any(f.startswith(d + os.sep) for d in _OWN_DIRS)


def user_traceback(exc: BaseException) -> str:
    """The traceback Python would print for ``exc``, without gpuplan's and runpy's frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if not _is_ours(f.filename)])
        for nxt in (t.__cause__, t.__context__):
            if nxt is not None:
                todo.append(nxt)
    return "".join(te.format())


def check_script(path: str) -> Path:
    p = Path(path)
    try:
        p.stat()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:  # a name over 255 bytes, a NUL byte
        raise InputError(f"script {shown(path)}: {getattr(e, 'strerror', None) or e}; give the "
                         "path of a Python training script") from None
    if not p.exists():
        raise InputError(f"script {path!r}: no such file; give the path of a Python training script")
    if not p.is_file():
        raise InputError(f"script {path!r}: is not a file; give the path of a Python training script")
    if not os.access(p, os.R_OK):
        raise InputError(f"script {path!r}: is not readable")
    return p


def run_script(
    path: str,
    argv: list[str],
    *,
    steps: int,
    warmup: int,
    then: Then = "stop",
    tokens_per_sample: int | None = None,
    expected_step_time_s: float | None = None,
    device: str | None = None,
    plan_model: str | None = None,
    gpu: str | None = None,
    precision: str | None = None,
    estimate: bool = True,
) -> ScriptRun:
    """Run the script under the profiler and say how it ended and what was measured."""
    script = check_script(path)

    def on_limit() -> None:
        if then == "stop":
            raise StopProfiling()

    prof = Profiler(None, None, warmup=warmup, steps=steps, device=device,
                    tokens_per_sample=tokens_per_sample, expected_step_time_s=expected_step_time_s,
                    plan_model=plan_model, gpu=gpu, precision=precision, estimate=estimate,
                    _patch_loaders=True, _on_limit=on_limit)
    status, code, tb = _run_as_main(script, argv, prof)
    prof.mark_status(status)
    try:
        report: ProfileReport | None = prof.report()
        why = None
    except NoStepsError as e:
        report, why = None, str(e)
    return ScriptRun(report=report, no_steps=why, status=status, exit_code=code, traceback_text=tb)


def _run_as_main(script: Path, argv: list[str], prof: Profiler) -> tuple[str, int, str | None]:
    """Run ``script`` as ``python script.py argv...`` would, inside ``prof``: (status, exit code,
    the script's own traceback or None)."""
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.resolve().parent))
    status, code, tb = "complete", 0, None
    try:
        with prof:
            runpy.run_path(str(script), run_name="__main__")
    except StopProfiling:
        status = "stopped"
    except SystemExit as e:
        if e.code is None or e.code == 0:
            status, code = "complete", 0
        else:
            status = "error"
            code = e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        status, code = "interrupted", 130
    except BaseException as e:  # noqa: BLE001 - the script's own failure, shown as its traceback
        status, code = "error", 1
        tb = user_traceback(e)
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path
    return status, code, tb


@record
class ScriptProfile:
    """What ``gpuplan profile`` shows for one process once the script ran (and ranks gathered)."""

    report: ProfileReport | None
    """The report to print; None when this process prints none (``failure`` says why, or it is a
    rank other than 0)."""
    exit_code: int
    failure: str | None = None
    """One line for stderr when no step was measured."""
    partial: bool = False
    """The script raised or was interrupted: the report holds the steps completed before."""


_ENDED_BEFORE = {"error": "the script raised before", "interrupted": "the script was interrupted before",
                 "stopped": "the script was stopped before"}


def collect(run: ScriptRun, env: DistEnv | None, *, gather_timeout_s: float) -> ScriptProfile:
    """The report this process prints, from its own run and, under ``torchrun``, every rank's
    (gathered to rank 0; the other ranks print nothing)."""
    report = run.report
    if env is not None:
        try:
            report = gather_reports(run.report, failure=run.no_steps, timeout_s=gather_timeout_s,
                                    env=env)
        except NoStepsError as e:
            return ScriptProfile(report=None, exit_code=run.exit_code or 1,
                                 failure=f"no rank measured a step: {e}")
        if env.rank != 0:
            return ScriptProfile(report=None, exit_code=run.exit_code)
    if report is None:
        how = _ENDED_BEFORE.get(run.status, "the script ended before")
        return ScriptProfile(report=None, exit_code=run.exit_code or 1,
                             failure=f"no step measured: {how} completing a training step after "
                                     f"the warm-up ({run.no_steps})")
    return ScriptProfile(report=report, exit_code=run.exit_code,
                         partial=run.status in ("error", "interrupted"))
