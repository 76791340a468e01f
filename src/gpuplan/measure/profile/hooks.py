"""Instrumentation: what the profiler installs for the duration of a profile, and removes after.

- Root module forward: forward pre/post hooks on the given model; without one, PyTorch's global
  module hooks find the top-level module calls during the first counted step, then are swapped
  for hooks on those root modules only (global hooks put every submodule call on the slow path).
- Backward: ``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped
  (``Tensor.backward`` calls the former).
- Optimizer step: ``register_step_pre_hook``/``post_hook`` on the given optimizers, or the global
  ``register_optimizer_step_pre_hook``/``post_hook``.
- Device copies: ``Tensor.to``, ``Tensor.cuda``, ``Tensor.cpu`` and ``Tensor.copy_`` are wrapped;
  only calls that change device are marked. (A TorchFunctionMode would see every torch call and
  costs far more -- see benchmarks/profile_overhead_results.md.)
- DataLoader (CLI only): ``_BaseDataLoaderIter.__next__`` and ``DataLoader.__iter__``.

Every hook measures its own run time into ``StepRecorder.overhead``. Hooks ignore calls from other
threads and code being compiled by torch.compile.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

from .recorder import StepRecorder, loader_info

__all__ = ["Instrumentation"]

perf_counter = time.perf_counter
get_ident = threading.get_ident
_MISSING = object()


def _to_non_blocking(args: tuple, kwargs: dict, Tensor: Any, dtype_t: Any) -> bool:
    """The non_blocking flag of a ``Tensor.to`` call, in any of its three overloads:
    ``to(dtype, non_blocking, copy)``, ``to(device, dtype, non_blocking, copy)``, ``to(other, non_blocking, copy)``."""
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    if not args:
        return False
    if isinstance(args[0], Tensor):
        pos = 1
    elif len(args) > 1 and (args[1] is None or isinstance(args[1], dtype_t)):
        pos = 2
    else:
        pos = 1
    return len(args) > pos and args[pos] is True


class Instrumentation:
    def __init__(
        self,
        rec: StepRecorder,
        *,
        model: Any = None,
        optimizers: tuple = (),
        patch_loaders: bool = False,
    ) -> None:
        import torch

        self.torch = torch
        self.rec = rec
        self.model = model
        self.optimizers = optimizers
        self.patch_loaders = patch_loaders
        self.tid = get_ident()
        self._handles: list[Any] = []
        self._global_module_handles: list[Any] = []
        self._patched: list[tuple[Any, str, Any]] = []  # (owner, name, previous __dict__ entry)
        self._in_root: Any = None
        self._roots: list[Any] = []
        self._roots_hooked = False
        self._swap_pending = False
        self._loader_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.installed = False
        rec.on_first_count = self.request_root_swap
        try:
            from torch.compiler import is_compiling
        except ImportError:  # pragma: no cover - torch < 2.3
            def is_compiling() -> bool:
                return False
        self._compiling: Callable[[], bool] = is_compiling

    # -- patching helpers
    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        prev = owner.__dict__.get(name, _MISSING)
        current = getattr(owner, name)
        setattr(owner, name, make(current))
        self._patched.append((owner, name, prev))

    def install(self) -> None:
        if self.installed:
            return
        torch = self.torch
        self.installed = True
        try:
            self._install_copies()
            self._patch(torch.autograd, "backward", self._wrap_backward)
            self._patch(torch.autograd, "grad", self._wrap_backward)
            self._install_optimizer_hooks()
            if self.model is not None:
                self._hook_roots([self.model])
            else:
                self._install_global_module_hooks()
            if self.patch_loaders:
                self._install_loader_patches()
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        for h in self._handles + self._global_module_handles:
            h.remove()
        self._handles.clear()
        self._global_module_handles.clear()
        for owner, name, prev in reversed(self._patched):
            if prev is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, prev)
        self._patched.clear()
        self.installed = False

    # -- device copies
    def _install_copies(self) -> None:
        torch = self.torch
        T = torch.Tensor
        self._patch(T, "to", self._wrap_to)
        self._patch(T, "cuda", self._wrap_cuda)
        self._patch(T, "cpu", self._wrap_cpu)
        self._patch(T, "copy_", self._wrap_copy_)

    def _observe_copy(self, fn: Any, src_t: Any, args: tuple, kwargs: dict, src: Any, dst: Any,
                      non_blocking: bool, t0: float) -> Any:
        rec = self.rec
        h2d = src.type == "cpu" and dst.type != "cpu"
        pinned = False
        if h2d:
            try:
                pinned = bool(src_t.is_pinned())
            except Exception:  # noqa: BLE001 - no accelerator runtime: nothing is pinned
                pinned = False
        nbytes = src_t.numel() * src_t.element_size()
        t1 = perf_counter()
        rec.push("transfer", t1)
        rec.overhead += perf_counter() - t0
        try:
            return fn(*args, **kwargs)
        finally:
            t2 = perf_counter()
            rec.pop("transfer", t2)
            rec.copy_done(h2d=h2d, nbytes=nbytes, pinned=pinned, non_blocking=non_blocking)
            rec.overhead += perf_counter() - t2

    def _device_of(self, d: Any) -> Any:
        torch = self.torch
        if isinstance(d, torch.device):
            return d
        return torch.device(d)

    def _wrap_to(self, orig: Any) -> Any:
        torch = self.torch
        Tensor, dtype_t, device_t = torch.Tensor, torch.dtype, torch.device
        compiling = self._compiling
        rec = self.rec
        tid = self.tid
        devices: dict[Any, Any] = {}  # "cuda:0" -> torch.device, parsed once

        def to(self_t: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling():
                return orig(self_t, *args, **kwargs)
            t0 = perf_counter()
            if rec.cur is None or not rec.active or get_ident() != tid:
                return orig(self_t, *args, **kwargs)
            d = kwargs.get("device")
            if d is None and args:
                a = args[0]
                if isinstance(a, Tensor):
                    d = a.device
                elif isinstance(a, (str, device_t)) or (isinstance(a, int) and not isinstance(a, bool)):
                    d = a
            if d is None or isinstance(d, dtype_t):
                rec.overhead += perf_counter() - t0
                return orig(self_t, *args, **kwargs)
            if isinstance(d, device_t):
                dst = d
            else:
                dst = devices.get(d)
                if dst is None:
                    dst = devices[d] = device_t(d)
            src = self_t.device
            if dst.type == src.type and (dst.index is None or src.index is None or dst.index == src.index):
                rec.overhead += perf_counter() - t0
                return orig(self_t, *args, **kwargs)
            nb = _to_non_blocking(args, kwargs, Tensor, dtype_t)
            return self._observe_copy(orig, self_t, (self_t, *args), kwargs, src, dst, nb, t0)

        return to

    def _wrap_cuda(self, orig: Any) -> Any:
        torch = self.torch
        compiling = self._compiling
        rec = self.rec
        tid = self.tid

        def cuda(self_t: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
            if compiling():
                return orig(self_t, device, non_blocking, **kwargs)
            t0 = perf_counter()
            if rec.cur is None or not rec.active or get_ident() != tid:
                return orig(self_t, device, non_blocking, **kwargs)
            src = self_t.device
            if device is None:
                dst = torch.device("cuda")
            elif isinstance(device, int):
                dst = torch.device("cuda", device)
            else:
                dst = self._device_of(device)
            if src.type == "cuda" and (dst.index is None or src.index == dst.index):
                rec.overhead += perf_counter() - t0
                return orig(self_t, device, non_blocking, **kwargs)
            return self._observe_copy(orig, self_t, (self_t, device, non_blocking), kwargs, src, dst,
                                      bool(non_blocking), t0)

        return cuda

    def _wrap_cpu(self, orig: Any) -> Any:
        torch = self.torch
        compiling = self._compiling
        rec = self.rec
        tid = self.tid
        cpu_dev = torch.device("cpu")

        def cpu(self_t: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling():
                return orig(self_t, *args, **kwargs)
            t0 = perf_counter()
            if rec.cur is None or not rec.active or get_ident() != tid:
                return orig(self_t, *args, **kwargs)
            src = self_t.device
            if src.type == "cpu":
                rec.overhead += perf_counter() - t0
                return orig(self_t, *args, **kwargs)
            return self._observe_copy(orig, self_t, (self_t, *args), kwargs, src, cpu_dev, False, t0)

        return cpu

    def _wrap_copy_(self, orig: Any) -> Any:
        Tensor = self.torch.Tensor
        compiling = self._compiling
        rec = self.rec
        tid = self.tid

        def copy_(self_t: Any, src_t: Any, non_blocking: bool = False) -> Any:
            if compiling():
                return orig(self_t, src_t, non_blocking)
            t0 = perf_counter()
            if rec.cur is None or not rec.active or get_ident() != tid:
                return orig(self_t, src_t, non_blocking)
            if isinstance(src_t, Tensor):
                src, dst = src_t.device, self_t.device
                if src.type != dst.type or (src.index != dst.index and src.type != "cpu"):
                    return self._observe_copy(orig, src_t, (self_t, src_t, non_blocking), {}, src, dst,
                                              bool(non_blocking), t0)
            rec.overhead += perf_counter() - t0
            return orig(self_t, src_t, non_blocking)

        return copy_

    # -- backward
    def _wrap_backward(self, orig: Any) -> Any:
        compiling = self._compiling
        rec = self.rec
        tid = self.tid

        def backward(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                return orig(*args, **kwargs)
            t0 = perf_counter()
            if rec.cur is None or not rec.active or get_ident() != tid:
                return orig(*args, **kwargs)
            rec.push("backward", t0)
            rec.overhead += perf_counter() - t0
            try:
                return orig(*args, **kwargs)
            finally:
                t1 = perf_counter()
                rec.pop("backward", t1)
                rec.overhead += perf_counter() - t1

        backward.__wrapped__ = orig  # type: ignore[attr-defined]
        backward.__doc__ = getattr(orig, "__doc__", None)
        return backward

    # -- optimizer
    def _opt_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        t0 = perf_counter()
        if get_ident() != self.tid or not self.rec.active:
            return None
        if id(opt) not in self.rec.optimizers:
            self.rec.optimizers[id(opt)] = opt
        self.rec.push("optimizer", t0)
        self.rec.overhead += perf_counter() - t0
        return None

    def _opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        t0 = perf_counter()
        if get_ident() != self.tid or not self.rec.active:
            return None
        self.rec.pop("optimizer", t0)
        self.rec.overhead += perf_counter() - t0
        return None

    def _install_optimizer_hooks(self) -> None:
        if self.optimizers:
            for opt in self.optimizers:
                self._handles.append(opt.register_step_pre_hook(self._opt_pre))
                self._handles.append(opt.register_step_post_hook(self._opt_post))
        else:
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook, register_optimizer_step_pre_hook,
            )

            self._handles.append(register_optimizer_step_pre_hook(self._opt_pre))
            self._handles.append(register_optimizer_step_post_hook(self._opt_post))

    # -- root modules
    def _root_pre(self, module: Any, args: tuple, kwargs: dict | None = None) -> None:
        if self._compiling():
            return None
        t0 = perf_counter()
        if self._in_root is not None or get_ident() != self.tid or not self.rec.active:
            return None
        self._in_root = module
        if not self._roots_hooked and all(m is not module for m in self._roots):
            self._roots.append(module)
        self.rec.root_forward_begin(module, args, kwargs, t0, self.torch)
        self.rec.overhead += perf_counter() - t0
        return None

    def _root_post(self, module: Any, args: Any, *rest: Any) -> None:
        t0 = perf_counter()
        if module is not self._in_root or get_ident() != self.tid:
            return None
        self._in_root = None
        self.rec.pop("forward", t0)
        if self._swap_pending:
            self._swap_to_root_hooks()
        self.rec.overhead += perf_counter() - t0
        return None

    @property
    def roots(self) -> tuple[Any, ...]:
        """The root modules: the given model, or the top-level module calls found so far."""
        return tuple(self._roots)

    def _hook_roots(self, roots: list[Any]) -> None:
        for m in roots:
            self._handles.append(m.register_forward_pre_hook(self._root_pre, prepend=True, with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._root_post, always_call=True))
        self._roots = list(roots)
        self._roots_hooked = True

    def _install_global_module_hooks(self) -> None:
        from torch.nn.modules.module import (
            register_module_forward_hook, register_module_forward_pre_hook,
        )

        self._global_module_handles.append(register_module_forward_pre_hook(self._root_pre))
        self._global_module_handles.append(register_module_forward_hook(self._root_post, always_call=True))

    def request_root_swap(self) -> None:
        """Called once the first step was counted: hook only the root modules seen so far."""
        if self._roots_hooked or not self._global_module_handles:
            return
        if self._in_root is None:
            self._swap_to_root_hooks()
        else:
            self._swap_pending = True

    def _swap_to_root_hooks(self) -> None:
        self._swap_pending = False
        for h in self._global_module_handles:
            h.remove()
        self._global_module_handles.clear()
        self._hook_roots(self._roots)

    # -- DataLoader (CLI)
    def _install_loader_patches(self) -> None:
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        loader_of = self._loader_of

        def make_iter(orig: Any) -> Any:
            def __iter__(loader: Any) -> Any:
                it = orig(loader)
                try:
                    loader_of[it] = loader_info(loader)
                except TypeError:  # not weak-referenceable
                    pass
                return it

            return __iter__

        self._patch(DataLoader, "__iter__", make_iter)
        self._patch(_BaseDataLoaderIter, "__next__", lambda orig: self.make_fetch(orig, loader_of))

    def make_fetch(self, orig_next: Any, loader_of: Any) -> Any:
        rec = self.rec
        tid = self.tid

        def __next__(it: Any) -> Any:
            if get_ident() != tid or not rec.active:
                return orig_next(it)
            self.fetch_begin()
            try:
                batch = orig_next(it)
            except StopIteration:
                rec.fetch_exhausted()
                raise
            except BaseException:
                rec.abort_open_step()
                raise
            self.fetch_end(batch, loader_of.get(it))
            return batch

        return __next__

    def fetch_begin(self) -> None:
        t0 = perf_counter()
        try:
            self.rec.begin_fetch(t0)
        finally:
            self.rec.overhead += perf_counter() - t0

    def fetch_end(self, batch: Any, loader: Any) -> None:
        t0 = perf_counter()
        self.rec.end_fetch(t0, batch, loader)
        self.rec.overhead += perf_counter() - t0
