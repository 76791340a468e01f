"""Optimizers as a GPU training step runs them, and the ``mixed-*`` recipes' master-weight wrapper.

``torch.optim`` picks ``foreach=True`` by default only when every parameter is a CUDA tensor; on the
CPU it falls back to a per-tensor loop with different temporaries. The trace therefore passes the
implementation explicitly: ``foreach`` (CUDA's default), ``fused`` or ``for-loop``.

Two optimizers torch does not ship are emulated for their memory, not their values:

- ``lion``: lucidrains/lion-pytorch's ``update_fn`` (the reference implementation), one momentum
  buffer in the parameter dtype; per parameter the update is ``exp_avg.clone().mul_(beta1)
  .add(grad, alpha=1 - beta1).sign_()``, i.e. two full-size temporaries of one tensor at a time.
- ``adamw-8bit``: bitsandbytes ``AdamW8bit`` (blockwise, block 256): two uint8 states plus one fp32
  absmax per 256-element block for tensors of at least 4096 elements, two fp32 states below that,
  and the 256-entry fp32 dynamic quantization map shared by all parameters. Its fused CUDA kernel
  updates in place and allocates nothing; an in-place SGD-like update stands in for it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from ..errors import UnsupportedError

OptimizerImpl = Literal["foreach", "fused", "for-loop"]

_LR = 1e-4


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023) written as lion-pytorch's reference ``update_fn``."""

    def __init__(self, params, lr: float = _LR, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        return None


class AdamW8bitMemory(torch.optim.Optimizer):
    """bitsandbytes AdamW8bit's state layout with an in-place stand-in update."""

    BLOCK = 256
    MIN_8BIT_SIZE = 4096

    def __init__(self, params, lr: float = _LR):
        super().__init__(params, dict(lr=lr))
        self._qmap: torch.Tensor | None = None

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    n = p.numel()
                    if n >= self.MIN_8BIT_SIZE:
                        if self._qmap is None:
                            self._qmap = torch.zeros(256, dtype=torch.float32, device=p.device)
                        blocks = math.ceil(n / self.BLOCK)
                        state["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                        state["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                        state["qmap1"] = self._qmap
                        state["qmap2"] = self._qmap
                    else:
                        state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                p.add_(p.grad, alpha=-group["lr"])
        return None


def make_optimizer(name: str, params, impl: OptimizerImpl):
    """The optimizer ``name`` (gpuplan.formats names) over ``params`` with implementation ``impl``."""
    kw: dict = {}
    if impl == "fused":
        kw["fused"] = True
    elif impl == "foreach":
        kw["foreach"] = True
    else:
        kw["foreach"] = False
    if name == "adamw":
        return torch.optim.AdamW(params, lr=_LR, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=_LR, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=_LR, momentum=0.0, **kw)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=_LR, momentum=0.9, **kw)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2, **kw)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=_LR, **kw)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=_LR, **kw)
    if name == "lion":
        return Lion(params)
    if name == "adamw-8bit":
        return AdamW8bitMemory(params)
    raise UnsupportedError(f"not traceable: optimizer {name!r} has no implementation the trace can "
                           "run")


def host_step_counters(opt: torch.optim.Optimizer, impl: OptimizerImpl) -> list[torch.Tensor]:
    """The ``state['step']`` tensors a CUDA run keeps on the host: torch.optim puts them on the CPU
    unless the optimizer is fused or capturable."""
    out = []
    for group in opt.param_groups:
        on_device = impl == "fused" or group.get("capturable", False)
        if on_device:
            continue
        for p in group["params"]:
            st = opt.state.get(p, {})
            s = st.get("step") if isinstance(st, dict) else None
            if isinstance(s, torch.Tensor):
                out.append(s)
    return out


def state_tensors(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]


class MixedPrecision:
    """The ``mixed-bf16`` / ``mixed-fp16`` recipe: 16-bit model parameters and gradients, an fp32
    master copy the optimizer steps on.

    The layout of the seed's table and of DeepSpeed's fp16/bf16 optimizers: the master copy is
    made once (``param.detach().clone().float()``); at the step each 16-bit gradient is copied into
    an fp32 master gradient (``main_param.grad = model_param.grad.float()``) while the 16-bit
    gradients stay allocated until ``zero_grad``; the optimizer steps the master weights; they are
    copied back into the 16-bit parameters in place; ``zero_grad`` drops both gradients. With fp16
    the loss is scaled and the master gradients unscaled in place. (Megatron-LM's
    ``Float16OptimizerWithFloat16Params`` frees each 16-bit gradient right after its copy, which
    peaks 2 bytes per parameter lower at the step; docs/trace.md.)
    """

    def __init__(self, params, make_inner, *, scale: float | None) -> None:
        self.params = [p for p in params if p.requires_grad]
        with torch.no_grad():
            self.masters = [p.detach().clone().float() for p in self.params]
        self.inner = make_inner(self.masters)
        self.scale = scale
        self.on_master_grads = None  # callback(list of tensors), set by the step

    def step(self) -> None:
        grads = []
        for p, m in zip(self.params, self.masters):
            if p.grad is not None:
                m.grad = p.grad.float()
                grads.append(m.grad)
        if self.on_master_grads is not None:
            self.on_master_grads(grads)
        if self.scale is not None and grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters):
                p.copy_(m)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)
        for p in self.params:
            p.grad = None

    @property
    def state(self):
        return self.inner.state

    @property
    def param_groups(self):
        return self.inner.param_groups
