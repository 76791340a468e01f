"""Profile a training loop: where does each step's time go, what bounds it, and what to change.

```python
with gpuplan.profile(model, optimizer) as prof:
    for batch in prof.wrap(loader):      # times the wait for each batch
        ...                              # the user's own step
print(render_text(prof.report()))   # gpuplan.report.profile.render_text; .to_dict() for JSON
```

Each step (from one batch fetch to the next) is split into ``data_wait``, ``transfer``,
``forward``, ``backward``, ``optimizer`` and ``other`` using hooks on the root module and the
optimizer, a wrapper around ``torch.autograd.backward`` and observation of device copies
(``Tensor.to/.cuda/.cpu/.copy_``). On CUDA, phase boundaries are CUDA events and nothing is
synchronized per step (two synchronizations per profile anchor the GPU clock); on the CPU, wall
clocks. The report gives a verdict (``data-loading``, ``transfer``, ``host-overhead`` or
``compute``), the evidence, throughput, memory and the advice that follows, and states the
profiler's own measured overhead. See docs/profile.md.

Importing this module does not import torch; entering a profile does.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator

from ..._extras import require
from ...errors import InputError, opt
from ..bench.run import no_cuda_reason
from .analysis import NoStepsError, RunInfo, analyze
from .distributed import gather_reports
from .estimate import RunFacts, estimate_step, prepare_estimate
from .hooks import Instrumentation
from .recorder import StepRecorder, StopProfiling, cpu_count, loader_info
from .types import (
    PHASES, EstimateInfo, GpuInfo, LoaderInfo, ProfileReport, RankSummary, StepRecord,
    TransferInfo,
)

__all__ = [
    "profile", "Profiler", "ProfileReport", "StepRecord", "LoaderInfo", "TransferInfo", "GpuInfo",
    "RankSummary", "EstimateInfo", "NoStepsError", "PHASES", "DEFAULT_WARMUP", "DEFAULT_STEPS",
    "check_device",
]

#: Steps left out at the start (lazy initialization, allocator warm-up, autotuning, compilation).
DEFAULT_WARMUP = 3
#: Steps ``gpuplan profile`` measures after the warm-up.
DEFAULT_STEPS = 50

_active: "Profiler | None" = None


def _torch() -> Any:
    """torch, or the one line with the install command (:func:`gpuplan._extras.require`)."""
    return require("torch", feature="gpuplan profile")


def check_device(device: str | None) -> None:
    """A device asked for by name must be there: ``cuda`` without CUDA is one line naming why,
    never a CPU measurement in its place."""
    if device != "cuda":
        return
    torch = _torch()
    if not torch.cuda.is_available():
        raise InputError(f"{opt('device')} cuda: {no_cuda_reason(torch)}; use {opt('device')} "
                         "cpu or auto, or run on a machine with a CUDA GPU", field="device",
                         value="cuda", fix={"device": "cpu"})


def _check_count(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{what}={value!r}: expected a whole number >= {minimum}")
    return value


class Profiler:
    """Profile the training loop run inside the ``with`` block (``gpuplan.profile`` is this class).

    model: the root ``nn.Module`` (None: the top-level module calls are found automatically).
    optimizer: an optimizer or a list of them (None: every optimizer's step is observed).
    warmup: steps left out at the start. steps: stop measuring after this many (None: all).
    device: ``'cpu'`` or ``'cuda'`` timing (None: CUDA events once CUDA is initialized).
    tokens_per_sample: for tokens/s when the batch does not show it (e.g. fixed-length sequences
    produced inside the model).
    expected_step_time_s: your own estimate to compare with (seconds, or a function of the
    measured report); it replaces the speed model's.

    The speed model's estimate (on unless ``estimate=False`` or ``expected_step_time_s`` is given):
    the report says how far the measured step is from gpuplan's estimate for the same batch,
    sequence length and recipe. plan_model: the architecture -- a catalog name
    (``"llama-3.1-8b"``), a config.json path or model directory, a gpuplan ``Model``, or a
    parameter count; None: read from a transformers model's ``config``, else only the module's
    parameter count (a labelled, rough estimate). gpu: the catalog SKU (``"H100-SXM-80GB"``, an
    alias); None: the CUDA device's exact name through the catalog (no estimate for a name the
    catalog lacks -- no peak is guessed); on the CPU the speed model's CPU estimate. precision: the
    training recipe (``amp-bf16``, ``fp32``, ...; weight formats for forward-only loops); None:
    inferred from autocast and the parameter dtype. Names are checked here, before the loop.

    ``wrap(loader)`` times the wait for each batch; :meth:`report` builds the report (after the
    ``with`` block, or inside it for the steps finished so far). ``_patch_loaders`` and
    ``_on_limit`` are for ``gpuplan profile`` (every DataLoader timed; stop after ``steps``).
    """

    def __init__(
        self,
        model: Any = None,
        optimizer: Any = None,
        *,
        warmup: int = DEFAULT_WARMUP,
        steps: int | None = None,
        device: str | None = None,
        tokens_per_sample: int | None = None,
        expected_step_time_s: float | Callable[[ProfileReport], float] | None = None,
        plan_model: Any = None,
        gpu: Any = None,
        precision: str | None = None,
        estimate: bool = True,
        _patch_loaders: bool = False,
        _on_limit: Callable[[], None] | None = None,
    ) -> None:
        self._warmup = _check_count(warmup, "warmup", 0)
        self._steps = None if steps is None else _check_count(steps, "steps", 1)
        if device is not None and device not in ("cpu", "cuda"):
            raise InputError(f"device={device!r}: expected 'cpu', 'cuda' or None (detect)")
        self._device = device
        self._tokens_per_sample = (None if tokens_per_sample is None
                                   else _check_count(tokens_per_sample, "tokens_per_sample", 1))
        if expected_step_time_s is not None and not callable(expected_step_time_s):
            if (isinstance(expected_step_time_s, bool) or not isinstance(expected_step_time_s, (int, float))
                    or not math.isfinite(expected_step_time_s) or expected_step_time_s <= 0):
                raise InputError(f"expected_step_time_s={expected_step_time_s!r}: expected seconds > 0 "
                                 "or a function of the report that returns them")
        self._expected = expected_step_time_s
        if not isinstance(estimate, bool):
            raise InputError(f"estimate={estimate!r}: expected True or False")
        named = [k for k, v in (("plan_model", plan_model), ("gpu", gpu), ("precision", precision))
                 if v is not None]
        if named and expected_step_time_s is not None:
            raise InputError(f"give either expected_step_time_s or {'/'.join(named)} (the speed "
                             "model's estimate), not both")
        if named and not estimate:
            raise InputError(f"{'/'.join(named)} configure the speed model's estimate, which "
                             "estimate=False turns off")
        self._est_req = None
        if estimate and expected_step_time_s is None:
            self._est_req = prepare_estimate(plan_model=plan_model, gpu=gpu, precision=precision)
        self._model = model
        self._optimizer = optimizer
        self._patch_loaders = _patch_loaders
        self._on_limit_extra = _on_limit
        self._rec: Any = None
        self._inst: Any = None
        self._entered = False
        self._exited = False
        self._status = "complete"
        self._finished = False

    # -- context manager
    def __enter__(self) -> "Profiler":
        global _active
        torch = _torch()
        if self._entered:
            raise InputError("this profile was already used; make a new one with gpuplan.profile(...)")
        if _active is not None:
            raise InputError("a gpuplan profile is already active in this process; profiles do not nest")
        model = self._model
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputError(f"model: expected a torch.nn.Module (or None to find it), got {type(model).__name__}")
        opts = self._optimizer
        if opts is None:
            opts = ()
        elif isinstance(opts, torch.optim.Optimizer):
            opts = (opts,)
        else:
            try:
                opts = tuple(opts)
            except TypeError:
                opts = None
            if not opts or not all(isinstance(o, torch.optim.Optimizer) for o in opts):
                raise InputError(f"optimizer: expected a torch.optim.Optimizer, a list of them or None, "
                                 f"got {type(self._optimizer).__name__}")
        check_device(self._device)

        self._rec = StepRecorder(warmup=self._warmup, max_steps=self._steps, device=self._device,
                             tokens_per_sample=self._tokens_per_sample, on_limit=self._limit_reached)
        self._inst = Instrumentation(self._rec, model=model, optimizers=opts,
                                     patch_loaders=self._patch_loaders)
        self._inst.install()
        self._entered = True
        _active = self
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        clean_exit = et is not None and issubclass(et, SystemExit) and getattr(ev, "code", None) in (None, 0)
        if et is None or clean_exit:
            ok = True
        elif issubclass(et, StopProfiling):
            ok = True
            self._status = "stopped"
        else:
            ok = False
            self._status = "interrupted" if issubclass(et, KeyboardInterrupt) else "error"
        self._close(ok)
        return False

    def _close(self, ok: bool) -> None:
        global _active
        if self._exited:
            return
        self._exited = True
        try:
            if self._inst is not None:
                self._inst.uninstall()
        finally:
            if _active is self:
                _active = None
        rec = self._rec
        rec.active = False
        if ok:
            rec.close_detached()
        else:
            if rec.cur is not None or rec.detached is not None:
                rec.notes.append("the step in progress when the loop stopped is left out")
            rec.drop_detached()
        rec.finish()

    def _limit_reached(self) -> None:
        """The requested number of steps was measured: stop observing (full speed from here)."""
        if self._inst is not None:
            self._inst.uninstall()
        self._rec.active = False
        if self._on_limit_extra is not None:
            self._on_limit_extra()

    def mark_status(self, status: str) -> None:
        """Set how the run ended (used by the CLI: ``stopped``, ``error``, ``interrupted``)."""
        self._status = status

    # -- the loader
    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``iterable`` (a DataLoader or any iterable of batches), timing each fetch.

        A step runs from one fetch to the next. Leaving the loop with ``break`` ends the last step
        there; an exception leaves it out.
        """
        if not self._entered or self._exited:
            raise InputError("prof.wrap(loader) must be called inside `with gpuplan.profile(...) as prof:`")
        try:
            info = loader_info(iterable)
        except Exception:  # noqa: BLE001
            info = LoaderInfo(kind=type(iterable).__name__)
        return self._wrapped(iterable, info)

    def _wrapped(self, iterable: Iterable[Any], info: LoaderInfo) -> Iterator[Any]:
        inst, rec = self._inst, self._rec
        first = True
        it: Any = None
        while True:
            if rec.active:
                inst.fetch_begin()
            try:
                if first:
                    it = iter(iterable)  # worker start-up counts as the first step's wait
                    first = False
                batch = next(it)
            except StopIteration:
                if rec.active:
                    rec.fetch_exhausted()
                return
            except BaseException:
                if rec.active:
                    rec.abort_open_step()
                raise
            if rec.active:
                inst.fetch_end(batch, info)
            try:
                yield batch
            except GeneratorExit:
                # `break` (or an exception) left the loop. Keep the step's end; whether it counts
                # is decided when the profile closes (an exception leaves it out).
                if rec.active:
                    rec.detach_open_step(time.perf_counter())
                raise

    # -- results
    @property
    def steps_measured(self) -> int:
        """Steps measured so far (after the warm-up)."""
        return 0 if self._rec is None else len(self._rec.measured)

    def _run_info(self) -> RunInfo:
        rec = self._rec
        torch = _torch()
        cpus = cpu_count()
        try:  # ranks of one node share its CPUs
            local_ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            local_ranks = 1
        if cpus and local_ranks > 1:
            cpus = max(1, cpus // local_ranks)
        loader = rec.main_loader
        total, peak_a, peak_r = rec.gpu_memory
        notes = list(rec.notes)
        if rec.dropped_eval:
            notes.append(f"{rec.dropped_eval} step(s) without backward or optimizer step (evaluation?) "
                         "were left out")
        return RunInfo(
            device=rec.device,
            device_name=rec.device_name,
            warmup_steps=self._warmup,
            data_wait_known=rec.saw_fetch,
            loader=loader,
            status=self._status,  # type: ignore[arg-type]
            tokens_source=rec.tokens_source,
            param_dtype=rec.param_dtype,
            autocast=rec.autocast,
            cpu_count=cpus,
            torch_threads=torch.get_num_threads(),
            gpu_index=getattr(rec.timer, "device_index", 0),
            gpu_total_memory_bytes=total,
            gpu_peak_allocated_bytes=peak_a,
            gpu_peak_reserved_bytes=peak_r,
            expected_step_time_s=self._expected if isinstance(self._expected, (int, float)) else None,
            notes=tuple(notes),
        )

    def _facts(self) -> Any:
        """What the run showed besides the steps, for the speed model's estimate."""
        rec, torch = self._rec, _torch()
        module = self._model
        if module is None and self._inst is not None:
            roots = [m for m in self._inst.roots if hasattr(m, "parameters")]
            if roots:
                module = max(roots, key=lambda m: sum(p.numel() for p in m.parameters()))
        opts = tuple(rec.optimizers.values())
        if not opts and self._inst is not None:
            opts = tuple(self._inst.optimizers)
        try:
            world = max(1, int(os.environ.get("WORLD_SIZE", "1")))
        except ValueError:
            world = 1
        return RunFacts(module=module, training=rec.saw_training, param_dtype=rec.param_dtype,
                        autocast=rec.autocast, autocast_dtype=rec.autocast_dtype,
                        tf32=bool(rec.tf32), optimizers=opts, world_size=world,
                        torch_threads=torch.get_num_threads())

    def report(self) -> ProfileReport:
        """The report of the measured steps. Raises :class:`NoStepsError` when there are none.

        With the speed model's estimate (the default), the report also holds the estimated step
        time, measured / estimated, and the estimate's inputs and basis (``report.estimate``), or
        one line saying why there is none (``report.estimate_unavailable``).
        """
        if self._rec is None:
            raise NoStepsError("the profile was never entered: use `with gpuplan.profile(...) as prof:`")
        run = self._run_info()
        records = self._rec.records()
        report = analyze(records, run)
        if callable(self._expected):
            est = self._expected(report)
            if est is not None:
                if not isinstance(est, (int, float)) or not math.isfinite(est) or est <= 0:
                    raise InputError(f"expected_step_time_s returned {est!r}: expected seconds > 0 or None")
                report = analyze(records, replace(run, expected_step_time_s=float(est)))
                report = replace(report, estimate=EstimateInfo(
                    source="given", step_time_s=float(est), basis="given"))
        elif self._expected is not None:
            report = replace(report, estimate=EstimateInfo(
                source="given", step_time_s=float(self._expected), basis="given"))
        elif self._est_req is not None:
            info, why = estimate_step(report, self._est_req, self._facts())
            if info is not None:
                report = analyze(records, replace(run, expected_step_time_s=info.step_time_s))
                report = replace(report, estimate=info)
            else:
                report = replace(report, estimate_unavailable=why)
        return report

    def gather_report(self, *, timeout_s: float = 300.0) -> ProfileReport:
        """Collective: every rank calls it; rank 0 gets one report with all ranks (others their own).

        Uses torch.distributed when it is initialized, else files in a directory shared by the
        ranks of this ``torchrun`` job (see docs/profile.md).
        """
        try:
            local: ProfileReport | None = self.report()
            failure = None
        except NoStepsError as e:
            local, failure = None, str(e)
        return gather_reports(local, failure=failure, timeout_s=timeout_s)


#: ``with gpuplan.profile(model, optimizer) as prof:`` -- the profiler is its own context manager.
profile = Profiler
