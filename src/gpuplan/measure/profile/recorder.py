"""The profiler's online state: phase marks, step boundaries, warm-up, and the device timers.

The hooks (``hooks``) call into a :class:`StepRecorder`; it keeps a stack of open phases,
takes a *mark* whenever the innermost phase changes, cuts the mark stream into steps, and keeps
the measured ones. Attribution happens later (``timeline.attribute``).

Step boundaries, in order of preference:
1. a batch fetch (``prof.wrap(loader)`` or, under the CLI, any DataLoader iterator): a step runs
   from one fetch to the next;
2. without any fetch: the start of a root forward that follows an optimizer step (gradient
   accumulation stays inside one step); before any optimizer step was seen, a forward after a
   backward; before any backward, a forward of the same root module (inference loops).

Steps with neither a backward nor an optimizer step (evaluation loops) are left out once training
was seen. The first ``warmup`` counted steps are left out.
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from .timeline import attribute
from .types import LoaderInfo, StepRecord

__all__ = ["StepRecorder", "HostTimer", "CudaTimer", "StopProfiling", "batch_sizes"]

perf_counter = time.perf_counter

#: Closed CUDA steps waiting for their events; beyond this the oldest is waited for.
MAX_PENDING_STEPS = 64


class StopProfiling(BaseException):
    """Raised at a step boundary to stop a profiled script after the requested steps.

    A BaseException so that a script's ``except Exception`` does not swallow it.
    """


# -- timers ------------------------------------------------------------------------------------

class HostTimer:
    """CPU: marks are host clock readings only."""

    kind = "cpu"

    def mark(self) -> None:
        return None

    def finish(self) -> None:
        pass


class CudaTimer:
    """CUDA: a timing event per mark, recorded on one stream; no synchronization per step.

    One synchronization anchors the GPU clock to the host clock when the timer starts (the GPU is
    then idle, so the anchor event completes when it is recorded), one more at :meth:`finish`
    corrects for drift between the two clocks.
    """

    kind = "cuda"

    def __init__(self, cuda: Any, device_index: int) -> None:
        self._cuda = cuda
        self._Event = cuda.Event
        self.device_index = device_index
        self._stream = cuda.current_stream(device_index)
        cuda.synchronize(device_index)
        self.t_anchor = perf_counter()
        self.e_anchor = self.mark()
        self.scale = 1.0
        self.finished = False

    def mark(self) -> Any:
        e = self._Event(enable_timing=True)
        e.record(self._stream)
        return e

    @staticmethod
    def done(e: Any) -> bool:
        return bool(e.query())

    @staticmethod
    def wait(e: Any) -> None:
        e.synchronize()

    def since_anchor_s(self, e: Any) -> float:
        return self.e_anchor.elapsed_time(e) / 1e3

    @staticmethod
    def between_s(a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1e3

    def finish(self) -> None:
        if self.finished:
            return
        self._cuda.synchronize(self.device_index)
        t_end = perf_counter()
        e_end = self.mark()
        e_end.synchronize()
        span = self.since_anchor_s(e_end)
        if span > 0 and t_end > self.t_anchor:
            self.scale = (t_end - self.t_anchor) / span
        self.finished = True

    def to_host(self, base_s: float, off_s: float) -> float:
        return self.t_anchor + self.scale * (base_s + off_s)


# -- batches -----------------------------------------------------------------------------------

def _tensor_items(batch: Any, torch: Any) -> list[tuple[str, Any]]:
    if isinstance(batch, torch.Tensor):
        return [("batch", batch)]
    items: list[tuple[str, Any]] = []
    if isinstance(batch, collections.abc.Mapping):
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                items.append((f"batch[{k!r}]", v))
    elif isinstance(batch, (list, tuple)):
        for i, v in enumerate(batch):
            if isinstance(v, torch.Tensor):
                items.append((f"batch[{i}]", v))
            elif isinstance(v, (list, tuple, collections.abc.Mapping)) and not items:
                items.extend((f"batch[{i}]{n[5:]}", t) for n, t in _tensor_items(v, torch))
    return items


def batch_sizes(batch: Any, tokens_per_sample: int | None) -> tuple[int | None, int | None, str | None]:
    """(samples, tokens, how tokens were counted) of one batch; None where unknown.

    Samples: the first dimension of the first tensor. Tokens: ``tokens_per_sample`` x samples when
    given; else ``batch['input_ids']`` (non-padding positions when an ``attention_mask`` on the CPU
    is present, else all positions); else the first integer tensor of shape (B, S).
    """
    import torch

    items = _tensor_items(batch, torch)
    samples = next((int(t.shape[0]) for _, t in items if t.dim() >= 1), None)
    if samples is None:
        return None, None, None
    if tokens_per_sample:
        return samples, samples * tokens_per_sample, f"tokens_per_sample={tokens_per_sample}"
    by_name = dict(items)
    ids = by_name.get("batch['input_ids']")
    if ids is not None and ids.dim() == 2:
        mask = by_name.get("batch['attention_mask']")
        if mask is not None and mask.shape == ids.shape and mask.device.type == "cpu":
            return samples, int(mask.sum()), "batch['input_ids'] non-padding positions (attention_mask)"
        return samples, int(ids.numel()), "batch['input_ids'] (B, S), padded positions"
    for name, t in items:
        if t.dim() == 2 and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
            return samples, int(t.numel()), f"{name}: integer (B, S) tensor, padded positions"
    return samples, None, None


class BatchSizer:
    """:func:`batch_sizes`, with the places of the tensors remembered from the first batch so a
    steady stream of same-shaped batches costs a lookup, not a search."""

    def __init__(self, tokens_per_sample: int | None) -> None:
        self.tps = tokens_per_sample
        self._type: type | None = None
        self._samples_at: Any = None
        self._tokens_at: Any = None
        self._mask_at: Any = None
        self._pos_at: Any = None
        self.source: str | None = None

    @staticmethod
    def _get(batch: Any, at: Any) -> Any:
        return batch if at is _SELF else batch[at]

    def __call__(self, batch: Any) -> tuple[int | None, int | None, int | None]:
        """(samples, tokens, positions): positions count padding (what the model computes on)."""
        if type(batch) is self._type and self._samples_at is not None:
            try:
                samples = int(self._get(batch, self._samples_at).shape[0])
                tokens = None
                if self.tps:
                    tokens = samples * self.tps
                elif self._mask_at is not None:
                    tokens = int(self._get(batch, self._mask_at).sum())
                elif self._tokens_at is not None:
                    tokens = int(self._get(batch, self._tokens_at).numel())
                return samples, tokens, self._positions(batch, samples)
            except Exception:  # noqa: BLE001 - the structure changed: search again
                pass
        samples, tokens, source = batch_sizes(batch, self.tps)
        self._learn(batch)
        if source and self.source is None:
            self.source = source
        positions = None
        if samples is not None:
            try:
                positions = self._positions(batch, samples)
            except Exception:  # noqa: BLE001
                positions = None
        return samples, tokens, positions

    def _positions(self, batch: Any, samples: int) -> int | None:
        if self.tps:
            return samples * self.tps
        if self._pos_at is None:
            return None
        return int(self._get(batch, self._pos_at).numel())

    def _learn(self, batch: Any) -> None:
        import torch

        self._type, self._samples_at, self._tokens_at, self._mask_at = type(batch), None, None, None
        self._pos_at = None
        if isinstance(batch, torch.Tensor):
            places = [(_SELF, batch)]
        elif isinstance(batch, (list, tuple)):
            places = [(i, v) for i, v in enumerate(batch) if isinstance(v, torch.Tensor)]
        elif isinstance(batch, collections.abc.Mapping):
            places = [(k, v) for k, v in batch.items() if isinstance(v, torch.Tensor)]
        else:
            return
        self._samples_at = next((at for at, t in places if t.dim() >= 1), None)
        if self._samples_at is None or self.tps:
            return
        by_key = dict(places)
        ids = by_key.get("input_ids")
        if ids is not None and ids.dim() == 2:
            mask = by_key.get("attention_mask")
            if mask is not None and mask.shape == ids.shape and mask.device.type == "cpu":
                self._mask_at = "attention_mask"
            else:
                self._tokens_at = "input_ids"
            self._pos_at = "input_ids"
            return
        for at, t in places:
            if t.dim() == 2 and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
                self._tokens_at = self._pos_at = at
                return


_SELF = object()


def loader_info(obj: Any) -> LoaderInfo:
    from torch.utils.data import DataLoader

    if isinstance(obj, DataLoader):
        return LoaderInfo(
            kind="DataLoader",
            num_workers=int(obj.num_workers),
            prefetch_factor=obj.prefetch_factor,
            pin_memory=bool(obj.pin_memory),
            persistent_workers=bool(obj.persistent_workers),
            batch_size=obj.batch_size,
        )
    return LoaderInfo(kind=type(obj).__name__)


# -- the recorder ------------------------------------------------------------------------------

@dataclass(slots=True)
class _Step:
    index: int
    t: list
    h: list
    labels: list
    ovh_start: float
    samples: int | None = None
    tokens: int | None = None
    positions: int | None = None
    h2d: int = 0
    d2h: int = 0
    pageable: int = 0
    nonblocking: int = 0
    copies: int = 0
    has_fwd: bool = False
    has_bwd: bool = False
    has_opt: bool = False
    first_root: Any = None
    loader: LoaderInfo | None = None
    # filled when closed
    overhead: float = 0.0
    base_s: float | None = None
    offs: list | None = None


def _effective(stack: list[str]) -> str:
    if not stack:
        return "other"
    top = stack[-1]
    if top == "forward" and "backward" in stack:
        return "backward"  # recomputation inside backward belongs to backward
    return top


class StepRecorder:
    """Marks, steps and the measured steps of one profile."""

    def __init__(
        self,
        *,
        warmup: int,
        max_steps: int | None,
        device: str | None,
        tokens_per_sample: int | None = None,
        on_limit: Callable[[], None] | None = None,
    ) -> None:
        self.warmup = warmup
        self.max_steps = max_steps
        self.device_pref = device
        self.tokens_per_sample = tokens_per_sample
        self.sizer = BatchSizer(tokens_per_sample)
        self.on_limit = on_limit
        self.timer: HostTimer | CudaTimer | None = None
        self._cuda_initialized: Callable[[], bool] | None = None
        self.active = True
        self.stack: list[str] = []
        self.cur: _Step | None = None
        self.overhead = 0.0
        self.n_seen = 0
        self.counted = 0
        self.measured: list[_Step] = []
        self.pending: collections.deque[_Step] = collections.deque()
        self.saw_fetch = False
        self.saw_bwd = False
        self.saw_opt = False
        self.saw_training = False
        self.counted_inference = False
        self.dropped_eval = 0
        self.tokens_source: str | None = None
        self.param_dtype: str | None = None
        self.autocast = False
        self.autocast_dtype: str | None = None
        """dtype of the first autocast region seen around a root forward (``bfloat16`` ...)."""
        self.tf32: bool | None = None
        """TF32 matmuls allowed (``torch.backends.cuda.matmul.allow_tf32`` or a float32 matmul
        precision below ``highest``) at the first root forward."""
        self.optimizers: dict[int, Any] = {}
        """The optimizers whose ``step()`` was observed, by id (their types name the estimate's
        optimizer)."""
        self.notes: list[str] = []
        self._loader_counts: dict[int, list] = {}  # id(LoaderInfo) -> [info, steps]
        self.gpu_memory: tuple[int | None, int | None, int | None] = (None, None, None)
        self.device_name = "cpu"
        self.limit_reached = False
        self.detached: _Step | None = None
        self.finished = False
        #: Called once, when the first step is counted (the hooks then narrow to root modules).
        self.on_first_count: Callable[[], None] | None = None

    # -- timer choice
    def _ensure_timer(self) -> None:
        if self.timer is not None and (self.timer.kind == "cuda" or self.device_pref == "cpu"):
            return
        want_cuda = False
        if self.device_pref == "cuda":
            want_cuda = True
        elif self.device_pref is None:
            if self._cuda_initialized is None:
                import torch

                self._cuda_initialized = torch.cuda.is_initialized
            want_cuda = bool(self._cuda_initialized())  # a flag; True only where CUDA works
        if not want_cuda:
            if self.timer is None:
                self.timer = HostTimer()
                self.device_name = _cpu_name()
            return
        import torch

        cuda = torch.cuda
        idx = int(cuda.current_device())
        if self.timer is not None:
            if self.measured or self.counted:
                self.notes.append(f"CUDA was first used at step {self.n_seen}; the {self.counted} steps "
                                  "before it were timed on the host and are left out")
            self.measured.clear()
            self.counted = 0
            self.cur = None  # host-timed marks cannot be mixed with events
            self.detached = None
        try:
            cuda.reset_peak_memory_stats(idx)
        except Exception as e:  # noqa: BLE001 - statistics are optional; say so
            self.notes.append(f"peak memory statistics unavailable: {e}")
        self.timer = CudaTimer(cuda, idx)
        self.device_name = str(cuda.get_device_name(idx))

    @property
    def main_loader(self) -> LoaderInfo | None:
        """The data source that fed the most measured steps."""
        if not self._loader_counts:
            return None
        return max(self._loader_counts.values(), key=lambda e: e[1])[0]

    @property
    def device(self) -> str:
        if isinstance(self.timer, CudaTimer):
            return f"cuda:{self.timer.device_index}"
        return "cpu"

    # -- marks
    def _mark(self, now: float, label: str) -> None:
        st = self.cur
        if st is None:
            return
        if st.labels and st.labels[-1] == label:
            return
        if st.t[-1] == now:
            st.labels[-1] = label  # same instant: relabel instead of a zero-length interval
            return
        st.t.append(now)
        st.h.append(self.timer.mark() if self.timer is not None else None)
        st.labels.append(label)

    def push(self, kind: str, now: float) -> None:
        self.stack.append(kind)
        if self.cur is not None:
            self._mark(now, _effective(self.stack))

    def pop(self, kind: str, now: float) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] == kind:
                del self.stack[i]
                break
        st = self.cur
        if st is not None:
            if kind == "backward" and "backward" not in self.stack:
                st.has_bwd = True
                self.saw_bwd = True
            elif kind == "optimizer" and "optimizer" not in self.stack:
                st.has_opt = True
                self.saw_opt = True
            elif kind == "forward":
                st.has_fwd = True
            self._mark(now, _effective(self.stack))

    def copy_done(self, *, h2d: bool, nbytes: int, pinned: bool, non_blocking: bool) -> None:
        st = self.cur
        if st is None:
            return
        st.copies += 1
        if h2d:
            st.h2d += nbytes
            if not pinned:
                st.pageable += nbytes
            if non_blocking:
                st.nonblocking += nbytes
        else:
            st.d2h += nbytes

    # -- boundaries
    def _boundary(self, now: float, label: str) -> None:
        """Close the open step at ``now`` and open the next one."""
        self._ensure_timer()
        h = self.timer.mark() if self.timer is not None else None
        self.stack.clear()
        prev = self.cur
        self.cur = _Step(index=self.n_seen, t=[now], h=[h], labels=[label], ovh_start=self.overhead)
        self.n_seen += 1
        if prev is not None:
            prev.t.append(now)
            prev.h.append(h)
            self._close(prev)
        if label == "data_wait":
            self.stack.append(label)  # popped by end_fetch; a forward boundary is pushed by its hook

    def _close(self, st: _Step) -> None:
        st.overhead = self.overhead - st.ovh_start
        training = st.has_bwd or st.has_opt
        if training:
            if self.counted_inference and not self.saw_training:
                self.notes.append(f"{self.counted} forward-only step(s) before training were left out")
                self.measured.clear()
                self.pending.clear()
                self.counted = 0
            self.saw_training = True
        elif self.saw_training or not st.has_fwd:
            self.dropped_eval += 1
            return
        else:
            self.counted_inference = True
        self.counted += 1
        if self.on_first_count is not None:
            callback, self.on_first_count = self.on_first_count, None
            callback()
        if self.counted <= self.warmup:
            return
        if self.limit_reached:
            return
        self.measured.append(st)
        if st.loader is not None:
            entry = self._loader_counts.get(id(st.loader))
            if entry is None:
                self._loader_counts[id(st.loader)] = [st.loader, 1]
            else:
                entry[1] += 1
        if isinstance(self.timer, CudaTimer):
            self.pending.append(st)
            self._drain(block=False)
        if self.max_steps is not None and len(self.measured) >= self.max_steps:
            self.limit_reached = True
            if self.on_limit is not None:
                self.on_limit()

    def _drain(self, *, block: bool) -> None:
        timer = self.timer
        assert isinstance(timer, CudaTimer)
        while self.pending:
            st = self.pending[0]
            last = st.h[-1]
            if not timer.done(last):
                if not block and len(self.pending) <= MAX_PENDING_STEPS:
                    return
                timer.wait(last)
            first = st.h[0]
            st.base_s = timer.since_anchor_s(first)
            st.offs = [0.0] + [timer.between_s(first, e) for e in st.h[1:]]
            st.h = []  # release the events
            self.pending.popleft()

    # -- events from the hooks
    def begin_fetch(self, now: float) -> None:
        self.close_detached()  # a loop left with `break` was followed by more fetches: it counts
        if not self.saw_fetch:
            self.saw_fetch = True
            if self.measured or self.counted:
                self.notes.append(f"{self.counted} step(s) before the first batch fetch were left out")
                self.measured.clear()
                self.pending.clear()
                self.counted = 0
            self.cur = None
        self._boundary(now, "data_wait")

    def end_fetch(self, now: float, batch: Any, loader: LoaderInfo | None) -> None:
        st = self.cur
        if st is None:
            return
        if self.stack and self.stack[-1] == "data_wait":
            self.stack.pop()
        self._mark(now, _effective(self.stack))
        st.loader = loader
        try:
            st.samples, st.tokens, st.positions = self.sizer(batch)
        except Exception:  # noqa: BLE001 - an exotic batch type: sizes stay unknown
            st.samples, st.tokens, st.positions = None, None, None
        if self.tokens_source is None and self.sizer.source:
            self.tokens_source = self.sizer.source

    def fetch_exhausted(self) -> None:
        """The iterator raised StopIteration: the open step only held the failed fetch."""
        self.cur = None
        self.stack.clear()

    def abort_open_step(self) -> None:
        self.cur = None
        self.stack.clear()

    def detach_open_step(self, now: float) -> None:
        """The wrapped loop was left (``break`` or an exception): end the open step now, and
        decide later whether it counts (:meth:`close_detached` / :meth:`drop_detached`)."""
        st = self.cur
        if st is None:
            return
        st.t.append(now)
        st.h.append(self.timer.mark() if self.timer is not None else None)
        st.overhead = self.overhead - st.ovh_start
        self.detached = st
        self.cur = None
        self.stack.clear()

    def close_detached(self) -> None:
        st, self.detached = self.detached, None
        if st is not None:
            ovh = st.overhead
            self._close(st)
            st.overhead = ovh

    def drop_detached(self) -> None:
        self.detached = None

    def root_forward_begin(self, module: Any, args: tuple, kwargs: dict | None, now: float, torch: Any) -> None:
        st = self.cur
        if not self.saw_fetch:
            boundary = (
                st is None
                or st.has_opt
                or (not self.saw_opt and st.has_bwd)
                or (not self.saw_bwd and not self.saw_opt and st.has_fwd and st.first_root is module)
            )
            if boundary:
                self._boundary(now, "forward")
                st = self.cur
                samples = _first_dim(args, kwargs, torch)
                st.samples = samples
                if samples is not None and self.tokens_per_sample:
                    st.tokens = samples * self.tokens_per_sample
                    st.positions = st.tokens
                    self.tokens_source = f"tokens_per_sample={self.tokens_per_sample}"
                elif samples is not None:
                    st.positions = _int_positions(args, kwargs, torch, samples)
        if st is not None and st.first_root is None:
            st.first_root = module
        if self.param_dtype is None:
            p = next(iter(module.parameters()), None) if hasattr(module, "parameters") else None
            if p is not None:
                self.param_dtype = str(p.dtype).removeprefix("torch.")
        if self.tf32 is None:
            self.tf32 = _tf32_allowed(torch)
        if not self.autocast:
            dev = "cuda" if self.timer is not None and self.timer.kind == "cuda" else "cpu"
            self.autocast = bool(torch.is_autocast_enabled(dev))
            if self.autocast:
                self.autocast_dtype = _autocast_dtype(torch, dev)
        self.push("forward", now)

    # -- the end
    def finish(self) -> None:
        """Leave out an unfinished step, wait for the device, read the memory statistics."""
        if self.finished:
            return
        self.finished = True
        if self.cur is not None:
            if not self.saw_fetch and (self.cur.has_bwd or self.cur.has_opt):
                self.notes.append("the last step was not followed by another forward and is left out")
            self.cur = None
        self.stack.clear()
        if isinstance(self.timer, CudaTimer):
            self.timer.finish()
            self._drain(block=True)
            import torch

            idx = self.timer.device_index
            total = peak_a = peak_r = None
            try:
                total = int(torch.cuda.get_device_properties(idx).total_memory)
                peak_a = int(torch.cuda.max_memory_allocated(idx))
                peak_r = int(torch.cuda.max_memory_reserved(idx))
            except Exception as e:  # noqa: BLE001
                self.notes.append(f"memory statistics unavailable: {e}")
            self.gpu_memory = (total, peak_a, peak_r)
        elif self.timer is not None:
            self.timer.finish()

    def records(self) -> list[StepRecord]:
        out = []
        timer = self.timer
        for st in self.measured:
            if isinstance(timer, CudaTimer):
                if st.offs is None:  # not resolved yet (report asked for inside the profile)
                    continue
                g = [timer.to_host(st.base_s, o) for o in st.offs]
                a = attribute(st.t, st.labels, g)
            else:
                a = attribute(st.t, st.labels)
            out.append(StepRecord(
                index=st.index, duration_s=a.duration_s, parts_s=a.parts_s,
                samples=st.samples, tokens=st.tokens, positions=st.positions,
                h2d_bytes=st.h2d, d2h_bytes=st.d2h,
                pageable_bytes=st.pageable, non_blocking_bytes=st.nonblocking, copies=st.copies,
                overhead_s=st.overhead, gpu_busy_min_s=a.gpu_busy_min_s,
                gpu_busy_max_s=a.gpu_busy_max_s, host_paced_s=a.host_paced_s,
                other_gpu_busy_s=a.other_gpu_busy_s,
            ))
        return out


def _first_dim(args: tuple, kwargs: dict | None, torch: Any) -> int | None:
    for v in (*args, *((kwargs or {}).values())):
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            return int(v.shape[0])
    return None


def _int_positions(args: tuple, kwargs: dict | None, torch: Any, samples: int) -> int | None:
    """B x S of the first integer (B, S) tensor among a root forward's arguments (token ids)."""
    values = (*args, *((kwargs or {}).values()))
    for v in values:
        if (isinstance(v, torch.Tensor) and v.dim() == 2 and int(v.shape[0]) == samples
                and not v.is_floating_point() and not v.is_complex() and v.dtype != torch.bool):
            return int(v.numel())
    return None


def _tf32_allowed(torch: Any) -> bool:
    try:
        if torch.backends.cuda.matmul.allow_tf32:
            return True
    except Exception:  # noqa: BLE001 - a build without the CUDA backend flags
        pass
    try:
        return torch.get_float32_matmul_precision() != "highest"
    except Exception:  # noqa: BLE001
        return False


def _autocast_dtype(torch: Any, dev: str) -> str | None:
    try:
        dt = torch.get_autocast_dtype(dev)  # torch >= 2.4
    except Exception:  # noqa: BLE001
        try:
            dt = torch.get_autocast_gpu_dtype() if dev == "cuda" else torch.get_autocast_cpu_dtype()
        except Exception:  # noqa: BLE001
            return None
    return str(dt).removeprefix("torch.")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", "rb") as f:
            head = f.read(64 * 1024).decode("utf-8", "replace")
        for line in head.splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def cpu_count() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
