"""The speed model's keyword arguments checked before any work (issue 32, part 3): each is of
its type, in its :mod:`gpuplan.bounds` range and finite, or an InputError names it (``field``),
so an estimate is finite or refused (``input_bytes=10**309`` overflowed a float, a price of
1e308 made an infinite cost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InputError, opt, shown
from ..hardware.topology import Topology
from ..job import (MAX_NEW_TOKENS, cpu_arg, flag_arg, gpu_arg, int_arg, job_arg,
                   model_arg, number_arg)
from .device import Efficiency
from .efficiency import DECODE_ATTENTION_KERNELS, TRAIN_ATTENTION_KERNELS

__all__ = ["speed_args", "common_args", "MAX_LINK_GBPS"]

#: Fastest gradient link given as a number, in GB/s per GPU (bounds.py's ``bandwidth``, 10^16 B/s).
MAX_LINK_GBPS = 1e7

#: The switches of :func:`~gpuplan.compute.estimate_speed` (True or False).
_FLAGS = ("overlap_comm", "pinned", "tf32", "tp_overlap", "gather_overlap", "use_noisy_bench",
          "host_sync_per_step")


def common_args(model: object, job: object, new_tokens: object, trainable_params: object,
                measured: object) -> None:
    """What the GPU and the CPU estimates both take."""
    model_arg(model, architecture=True)
    job_arg(job)
    int_arg(new_tokens, "new_tokens", high=MAX_NEW_TOKENS)
    int_arg(trainable_params, "trainable_params", "params", optional=True)
    # measured: "auto", None or a run (duck-typed: a stand-in with its rates), read where used


def speed_args(model: object, gpu: object, job: object, kw: dict[str, Any]) -> None:
    """:func:`~gpuplan.compute.estimate_speed`'s arguments (``kw``: its keywords by name)."""
    common_args(model, job, kw["new_tokens"], kw["trainable_params"], kw["measured"])
    gpu_arg(gpu)
    for name in _FLAGS:
        flag_arg(kw[name], name)
    flag_arg(kw["overlap_transfer"], "overlap_transfer", optional=True)
    flag_arg(kw["p2p_overlap"], "p2p_overlap", optional=True)
    flag_arg(kw["sdpa_repeat_kv"], "sdpa_repeat_kv", optional=True)
    flag_arg(kw["pp_reduce_after_backward"], "pp_reduce_after_backward", optional=True)
    int_arg(kw["input_bytes"], "input_bytes", "bytes", low=1, optional=True)
    int_arg(kw["paged_host_bytes"], "paged_host_bytes", "bytes", low=0)
    for name in ("train_tokens", "train_samples"):
        number_arg(kw[name], name, "count", optional=True)
    number_arg(kw["epochs"], "epochs", "epochs")
    number_arg(kw["price_per_gpu_hour"], "price_per_gpu_hour", "price", optional=True)
    # optimizer_impl and grad_clip_impl: checked where they are read (.efficiency)
    cpu_arg(kw["cpu"])
    _of_type(kw["efficiency"], "efficiency", Efficiency)
    _of_type(kw["topology"], "topology", Topology)
    _link(kw["link"])
    _kernel(kw["decode_attention"], "decode_attention", DECODE_ATTENTION_KERNELS)
    _kernel(kw["train_attention"], "train_attention", TRAIN_ATTENTION_KERNELS)


def _kernel(value: object, field: str, kernels: Mapping[str, str]) -> None:
    """None or one of ``kernels`` (an attention kernel's name, .efficiency's table)."""
    if value is not None and value not in kernels:
        raise InputError(f"{opt(field)} {shown(value)}: expected one of "
                         f"{', '.join(kernels)} or None",
                         field=field, value=value, accepted=", ".join(kernels))


def _of_type(value: object, field: str, cls: type) -> None:
    if value is not None and not isinstance(value, cls):
        raise InputError(f"{opt(field)} {shown(value)}: expected a {cls.__name__} or None "
                         f"(got {type(value).__name__})", field=field, value=value)


def _link(link: object) -> None:
    """None, a name (``nvlink``, ``pcie``, ``"50GB/s"``: parsed where it is used) or a number
    of GB/s in (0, :data:`MAX_LINK_GBPS`]."""
    if link is None or (isinstance(link, str) and 0 < len(link) <= 64):
        return
    if isinstance(link, (int, float)) and not isinstance(link, bool):
        small = isinstance(link, float) or abs(link) <= 10**20  # no float() overflow
        if small and 0 < float(link) <= MAX_LINK_GBPS:
            return
    raise InputError(f"{opt('link')} {shown(link)}: expected nvlink, pcie, a speed such as "
                     f"'50GB/s' or a number of GB/s > 0 and <= {MAX_LINK_GBPS:.0e}",
                     field="link", value=link)
