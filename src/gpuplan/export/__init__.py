"""Exports: any plan written as the config of the engine that runs it.

``export_plan(job, engine)`` returns the text of one engine's own config for a
:class:`~gpuplan.job.Job` — DeepSpeed JSON, accelerate YAML, a torchrun + FSDP2 snippet,
torchtitan TOML, Megatron-LM arguments, a ``vllm serve`` command, the ``sglang.launch_server``
command(s) — one module per engine. What an
engine cannot express for the job is an :class:`~gpuplan.errors.InputError` naming the option,
never a silently dropped setting (docs/export.md).
"""

from __future__ import annotations

from ..engines.profiles import get_engine
from ..errors import InputError, closest, opt
from ..hardware import GPU
from ..job import Job, check_layout
from ..models import Model, load_model
from . import accelerate, deepspeed, fsdp, megatron, sglang, torchtitan, vllm

__all__ = ["ENGINES", "export_plan"]

_WRITERS = {"deepspeed": deepspeed.export, "accelerate": accelerate.export, "fsdp": fsdp.export,
            "torchtitan": torchtitan.export, "megatron": megatron.export, "vllm": vllm.export,
            "sglang": sglang.export}
#: The engines, in the order ``--export`` lists them.
ENGINES = tuple(_WRITERS)


def export_plan(job: Job, engine: str, *, model: Model | None = None,
                repo: str | None = None, gpu_memory_utilization: float | None = None,
                mem_fraction_static: float | None = None, engine_version: str | None = None,
                gpu: GPU | None = None, budget: dict | None = None) -> str:
    """The config text ``engine`` reads for ``job`` (``model``: the job's model, loaded, if the
    caller has it already; ``repo``: the repository ``vllm serve`` loads when it is not the
    model's own, e.g. an AWQ checkpoint of it -- ``gpuplan fit --export-repo``;
    ``gpu_memory_utilization`` / ``mem_fraction_static`` / ``engine_version`` / ``gpu``: what the
    serving budget was sized with, written into ``vllm serve`` / ``sglang.launch_server`` as the
    plan read them; ``budget``: the KV budget's other knobs -- ``max_model_len``,
    ``max_num_batched_tokens``, ``max_num_seqs`` -- with which ``vllm serve`` on a known
    ``gpu`` is checked to start)."""
    name = str(engine).strip().lower()
    writer = _WRITERS.get(name)
    if writer is None:
        near = closest(str(engine), ENGINES, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InputError(f"{opt('export')} {engine!r:.40}: expected one of {', '.join(ENGINES)}"
                         f"{hint}", field="export", value=str(engine)[:64],
                         accepted=", ".join(ENGINES), fix={"export": near[0]} if near else None)
    _check_engine(job, name)
    if repo is not None and name != "vllm":
        raise InputError(f"{opt('export_repo')} is the repository vllm serve loads; "
                         f"{opt('export')} {name} reads none: drop {opt('export_repo')}",
                         field="export_repo", value=repo)
    if model is None:
        model = job.model if isinstance(job.model, Model) else load_model(job.model)
    if job.ep > 1:  # the layout the plan refuses is not written either
        check_layout(model.architecture, job)
    if name == "vllm":
        return vllm.export(job, model, repo=repo, gpu_memory_utilization=gpu_memory_utilization,
                           engine_version=engine_version, gpu=gpu, budget=budget)
    if name == "sglang":
        return sglang.export(job, model, mem_fraction_static=mem_fraction_static, gpu=gpu,
                             engine_version=engine_version)
    return writer(job, model)


#: Writers an engine launches from beyond its own (HF Trainer / accelerate takes a DeepSpeed
#: config: ``accelerate launch --deepspeed_config_file`` / ``TrainingArguments(deepspeed=...)``).
_ALSO_READS = {"transformers": ("deepspeed", "fsdp"), "torchtune": ("fsdp",)}


def _check_engine(job: Job, writer: str) -> None:
    """A job whose engine is named exports that engine's config: another engine's file would
    launch a different job than the one planned."""
    if job.engine == "auto":
        return
    prof = get_engine(job.engine)
    ok = ((prof.export,) if prof.export else ()) + _ALSO_READS.get(prof.name, ())
    if writer not in ok:
        fix = (f"use {opt('export')} {ok[0]}" if ok else
               f"gpuplan writes no {prof.name} config yet; drop {opt('export')}")
        raise InputError(f"{opt('export')} {writer} under {opt('engine')} {prof.name}: that "
                         f"file launches another engine than the one planned; {fix}, or give "
                         f"{opt('engine')} of that config", field="export", value=writer,
                         fix={"export": ok[0]} if ok else None)
