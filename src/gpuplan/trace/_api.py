"""The public entry point, :func:`trace_step`: check the arguments, then run the trace.

Importing this module does not import torch; calling :func:`trace_step` does.
"""

from __future__ import annotations

from typing import Literal

from ..errors import InputError, MissingDependencyError, opt, shown
from ..units import parse_positive_int
from ._result import TraceResult


def trace_step(
    model,
    *,
    mode: Literal["train", "infer"] = "train",
    batch: int = 1,
    seq: int | None = None,
    precision: str | None = None,
    optimizer: str = "adamw",
    optimizer_impl: Literal["foreach", "fused", "for-loop"] = "foreach",
    checkpointing: Literal["none", "selective", "full"] = "none",
    attention: Literal["eager", "sdpa"] = "sdpa",
    device: Literal["cpu", "cuda"] = "cpu",
    real: bool = False,
) -> TraceResult:
    """Trace one step of ``model`` and return what a GPU would hold.

    ``model``: a catalog name, a config.json path or model directory, a raw config dict, a
    :class:`gpuplan.models.Model` with an architecture, or ``path/to/file.py:factory`` (a function returning ``(model, example_batch)``; the user's own
    code, run knowingly). ``seq``: None = the sequence every gpuplan analysis defaults to
    (:func:`gpuplan.job.default_seq`). ``precision``: a training recipe (``mixed-bf16`` default,
    as for ``gpuplan fit``; ``amp-bf16``, ``amp-fp16``, ``bf16``, ``fp32``, ``mixed-fp16``) or, for
    ``mode="infer"``, a weight dtype (``bf16`` default, ``fp16``, ``fp32``). ``device="cuda"`` also runs the step for real on the GPU
    and reports ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` in ``measured``;
    ``device="cpu", real=True`` runs it with real CPU tensors (models up to
    :data:`REAL_MAX_PARAMS` parameters) and reports the measured live bytes.
    """
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        pkg = "transformers" if "transformers" in str(e) else "torch"
        raise MissingDependencyError(pkg, "torch", "gpuplan trace") from None

    from . import _run  # imports torch: the boundary

    if mode not in ("train", "infer"):
        raise InputError(f"{opt('mode')} {shown(mode)}: expected train or infer")
    batch = parse_positive_int(batch, what=opt("batch"), maximum=1 << 20)
    if seq is not None:
        seq = parse_positive_int(seq, what=opt("seq"), maximum=1 << 24)
    return _run.trace(model, mode=mode, batch=batch, seq=seq, precision=precision,
                      optimizer=optimizer, optimizer_impl=optimizer_impl,
                      checkpointing=checkpointing, attention=attention, device=device, real=real)
