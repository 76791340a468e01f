"""The sharded traces: one rank of an FSDP2 (``fully_shard``) training step over N ranks, or of a
DTensor tensor-parallel step over T ranks, traced on this CPU under FakeTensorMode with torch's
fake process group.

The model is built as for :func:`gpuplan.trace.trace_step`; every transformer block and then the
root are wrapped with ``fully_shard`` on a 1-D mesh of N ranks (``init_process_group("fake")``:
collectives return at once with outputs of the right shape, no other rank exists). The same
recorder and CUDA emulations run the same step (forward, loss, backward, ``optimizer.step()``,
``zero_grad()``); a DTensor is counted as its local shard, and FSDP2's gathered parameters —
freed and re-allocated with ``UntypedStorage.resize_`` — are followed through every resize.

Recipes: ``fp32``; ``bf16`` (a bf16 model); ``mixed-bf16`` as FSDP2 runs it —
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: fp32 sharded parameters (the master
copy), bf16 gathered copies for compute, fp32 gradients. ZeRO-3 = ``reshard_after_forward=True``,
ZeRO-2 = ``False``.

Tensor parallel (:func:`trace_tensor_parallel`): every block's linears are split with
``torch.distributed.tensor.parallel`` as Megatron-LM splits them (``ColwiseParallel`` for q/k/v,
gate/up and fc1; ``RowwiseParallel`` for the attention output and down projections), the token
embedding vocab-parallel (``RowwiseParallel`` of the embedding), the head column-parallel with
its logits sharded on the vocabulary under ``loss_parallel`` -- the layout ``gpuplan fit --tp T``
plans. Norms stay replicated. Importing this module does not import torch.
"""

from __future__ import annotations

from ..errors import InputError, MissingDependencyError, UnsupportedError, opt
from ..units import parse_positive_int
from ._limits import SHARDED_RECIPES
from ._result import TraceResult

__all__ = ["trace_sharded", "trace_tensor_parallel", "SHARDED_RECIPES"]



def trace_sharded(model, *, gpus: int, zero: int = 3, batch: int = 1, seq: int | None = None,
                  precision: str = "mixed-bf16", optimizer: str = "adamw",
                  optimizer_impl: str = "foreach", checkpointing: str = "none",
                  attention: str = "sdpa") -> TraceResult:
    """Trace rank 0 of an FSDP2 training step over ``gpus`` ranks; ``total_bytes`` is the
    per-rank peak. ``zero``: 3 (reshard after forward) or 2 (keep the gathered parameters until
    backward). The other arguments are :func:`gpuplan.trace.trace_step`'s."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        pkg = "transformers" if "transformers" in str(e) else "torch"
        raise MissingDependencyError(pkg, "torch", "gpuplan trace --gpus") from None
    gpus = parse_positive_int(gpus, what=opt("gpus"), maximum=1 << 16)
    if gpus < 2 or zero not in (2, 3):
        raise InputError(f"{opt('gpus')} {gpus} {opt('zero')} {zero}: the sharded trace runs FSDP2 "
                         "over 2 or "
                         f"more ranks with {opt('zero')} 2 or 3")
    if precision not in SHARDED_RECIPES:
        raise UnsupportedError(f"{opt('precision')} {precision}: the sharded trace runs "
                               f"{', '.join(SHARDED_RECIPES)} (FSDP2's mixed precision is "
                               "mixed-bf16)")
    batch = parse_positive_int(batch, what=opt("batch"), maximum=1 << 20)
    from . import _fsdp  # imports torch: the boundary

    return _fsdp.trace(model, gpus=gpus, zero=zero, batch=batch, seq=seq, precision=precision,
                       optimizer=optimizer, optimizer_impl=optimizer_impl,
                       checkpointing=checkpointing, attention=attention)


def trace_tensor_parallel(model, *, tp: int, batch: int = 1, seq: int | None = None,
                          precision: str = "mixed-bf16", optimizer: str = "adamw",
                          optimizer_impl: str = "foreach", checkpointing: str = "none",
                          attention: str = "sdpa") -> TraceResult:
    """Trace rank 0 of a tensor-parallel training step over ``tp`` ranks (DTensor, Megatron's
    split); ``total_bytes`` is the per-rank peak. The other arguments are
    :func:`gpuplan.trace.trace_step`'s (a mixed recipe keeps its fp32 master copy of each rank's
    shard, as Megatron does)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        pkg = "transformers" if "transformers" in str(e) else "torch"
        raise MissingDependencyError(pkg, "torch", "gpuplan trace --tp") from None
    tp = parse_positive_int(tp, what=opt("tp"), maximum=1 << 16)
    if tp < 2:
        raise InputError(f"{opt('tp')} {tp}: the tensor-parallel trace runs 2 or more ranks")
    batch = parse_positive_int(batch, what=opt("batch"), maximum=1 << 20)
    from . import _tp  # imports torch: the boundary

    return _tp.trace(model, tp=tp, batch=batch, seq=seq, precision=precision,
                     optimizer=optimizer, optimizer_impl=optimizer_impl,
                     checkpointing=checkpointing, attention=attention)
