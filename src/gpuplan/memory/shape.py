"""The job's shape as the accounting reads it: the sequence length it runs at, and the check that
the architecture supports it."""

from __future__ import annotations

from ..job import Job, check_positions, default_seq, serving_engine
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


def check_seq(model: Model, job: Job, *, serving: bool = False) -> tuple[str, ...]:
    """The job's sequence and context against the model's positions, by the one rule every
    command shares (:func:`gpuplan.job.check_positions`): an InputError where the model cannot run
    that long (a learned position table, a vision model's patches; ``serving`` on vLLM or
    SGLang, whose start-up check refuses it), else the notes to show where the length is past
    the trained context (empty within it)."""
    arch = model.architecture
    if arch is None:
        return ()
    engine = serving_engine(job.engine) if serving else None
    notes = (check_positions(arch, v, name, model=model.name, engine=engine)
             for name, v in (("seq", job.seq), ("context", job.context)))
    return tuple(n for n in notes if n)
