"""The job's shape as the accounting reads it: the sequence length it runs at, and the check that
the architecture supports it."""

from __future__ import annotations

from ..errors import InputError, opt
from ..job import Job, default_seq, seq_limit
from ..models import Model

__all__ = ["seq_for", "check_seq"]


def seq_for(model: Model, job: Job) -> int | None:
    """The sequence length the job runs at: ``job.seq``, else :func:`gpuplan.job.default_seq`.
    None when no architecture is known."""
    if job.seq is not None:
        return job.seq
    if model.architecture is None:
        return None
    return default_seq(model.architecture)


def check_seq(model: Model, job: Job) -> None:
    """A sequence (or context) longer than the architecture supports is an error naming the limit.

    Not shared with ``gpuplan speed`` (qa42): speed answers past the positions on purpose --
    benchmarks/published/runs.json validates it on torchtitan's Llama 3.1 8B at seq 262,144
    (docs/performance.md Table 2 at pytorch/torchtitan@eaea6f6a, CP 8; torchtitan's own
    max_seq_len, not HF's max_position_embeddings of 131,072), so refusing there would move a
    published row. fit and cluster refuse that same published job: an open inconsistency."""
    arch = model.architecture
    if arch is None:
        return
    limit = seq_limit(arch)
    for name, v in (("seq", job.seq), ("context", job.context)):
        if v is not None and v > limit:
            what = ("tokens per image (patches + class token)" if arch.kind == "vision"
                    else "positions (max_position_embeddings)")
            raise InputError(f"{opt(name)} {v}: {model.name} supports at most {limit} {what}; "
                             f"use {opt(name)} {limit} or less", field=name, value=v,
                             accepted=f"at most {limit}", fix={name: limit})

