"""FSDP2 under the fake process group (see :mod:`gpuplan.trace.distributed`); imports torch."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import torch
import torch.distributed as dist
from torch import nn

from ..errors import UnsupportedError
from ._recorder import Recorder
from ._result import TraceResult
from ._run import _default_seq, _notes, _result
from ._spec import resolve
from ._step import StepConfig, check_config, run
from ._limits import SHARDED_RECIPES


@contextlib.contextmanager
def fake_world(gpus: int):
    """A fake process group of ``gpus`` ranks (this process is rank 0) and its 1-D mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UnsupportedError("the sharded trace needs its own (fake) process group and one "
                               "is already initialized in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=gpus)
    try:
        yield init_device_mesh("cpu", (gpus,))
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def follow_resizes(rec: Recorder):
    """FSDP2 frees and re-allocates gathered parameters with ``UntypedStorage.resize_``, which
    no dispatch mode sees: record each resize as a free and an allocation."""
    original = torch.UntypedStorage.resize_

    def resize_(st, size):
        out = original(st, size)
        rec.track_storage(st)
        return out

    torch.UntypedStorage.resize_ = resize_
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original


def blocks(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks: the longest ``nn.ModuleList`` of the model."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise UnsupportedError(f"{type(model).__name__} has no list of blocks to shard")
    return max(lists, key=len)


def gathered_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Every FSDP2 parameter's all-gather outputs and unsharded parameter (private FSDP2 state:
    ``FSDPParam.all_gather_outputs``, ``_unsharded_param``)."""
    from torch.distributed.fsdp import FSDPModule

    out = []
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        group = m._get_fsdp_state()._fsdp_param_group
        for fp in getattr(group, "fsdp_params", ()) if group is not None else ():
            out += list(getattr(fp, "all_gather_outputs", ()) or ())
            if getattr(fp, "_unsharded_param", None) is not None:
                out.append(fp._unsharded_param)
    return out


def _sharder(mesh, *, zero: int, precision: str, holder: dict):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if precision == "mixed-bf16" else MixedPrecisionPolicy())

    def prepare(model: nn.Module) -> list[str]:
        holder["model"] = model
        units = blocks(model)
        for block in units:
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return [f"FSDP2 over {mesh.size()} ranks (fake process group; rank 0 traced): "
                f"fully_shard on each of {len(units)} blocks and the root, "
                f"reshard_after_forward={zero == 3}"
                + ("; MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32 sharded "
                   "parameters are the master copy" if precision == "mixed-bf16" else "")]
    return prepare


def trace(model, *, gpus, zero, batch, seq, precision, optimizer, optimizer_impl,
          checkpointing, attention) -> TraceResult:
    source = resolve(model)
    cfg = StepConfig(mode="train", batch=batch, seq=seq or _default_seq(source),
                     precision=SHARDED_RECIPES[precision], optimizer=optimizer,
                     optimizer_impl=optimizer_impl, checkpointing=checkpointing,
                     attention=attention)
    check_config(cfg)
    rec, holder = Recorder(), {}
    t0 = time.perf_counter()
    with fake_world(gpus) as mesh, follow_resizes(rec):
        out = run(source, cfg, fake=True, recorder=rec,
                  prepare=_sharder(mesh, zero=zero, precision=precision, holder=holder),
                  between=lambda: rec.classify(gathered_tensors(holder["model"]),
                                               "gathered_params"))
    notes = _notes(out, cfg, real_cpu=False)
    result = _result(source.name, cfg, out, measured=None, notes=notes,
                     seconds=time.perf_counter() - t0)
    return dataclasses.replace(result, precision=precision)

