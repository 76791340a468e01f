"""What every export shares: the refusal line, the checks of what an engine can express, the batch
arithmetic, and a tiny writer for the YAML/TOML an engine reads (no third-party writer needed).

Rule: an export writes every setting of the :class:`~gpuplan.job.Job` that the engine's config
holds, and refuses — one line naming the option — every setting it cannot hold. Nothing is dropped
silently; what belongs to the user's script rather than the engine's config is written as a comment
where the format has comments.
"""

from __future__ import annotations

import json

from functools import cache

from ..errors import InputError, opt
from ..job import Job, default_job
from ..models import Model

__all__ = ["refuse", "check_expressed", "train_only", "infer_only", "fp8_attention_by_kv", "accumulation", "flag",
           "hub_repo", "num_machines", "write_yaml", "write_toml", "TRAIN_FIELDS", "INFER_FIELDS"]

#: Job fields a training engine must either express or refuse (the rest describe the hardware
#: or another mode: gpus_per_node and inter_node are the cluster's, infer_* the serving side's).
TRAIN_FIELDS = ("optimizer_states", "fused_optimizer", "zero", "offload_optimizer", "lora_rank",
                "lora_targets", "lora_base", "lora_dropout", "checkpointing", "attention", "tp",
                "pp", "cp", "ep", "sequence_parallel", "pp_schedule", "micro_batches", "runtime",
                "use_cache", "pp_embedding_part", "pp_loss_part", "max_grad_norm",
                "distribute_checkpoints", "stage3_max_live_parameters",
                "stage3_prefetch_bucket_size", "fp8_param_gather", "fp8_attention",
                "first_last_layers_bf16", "pp_first_stage_layers", "pp_last_stage_layers",
                "etp", "mtp_layers", "ep_overlap", "recompute_modules", "moe_dispatcher",
                "dp_shard", "cuda_graph_scope", "moe_shared_expert_overlap", "master_weights",
                "grad_dtype", "activation_storage", "fp8_amax_history")
#: The same for a serving engine (the training-only fields of a ``--mode both`` job are the
#: training side's).
INFER_FIELDS = ("kv_dtype", "attention", "tp", "pp", "cp", "ep", "sequence_parallel",
                "prefill_logits", "runtime", "fp8_attention")


def flag(field: str) -> str:
    """A Job field named in an export's message (:func:`gpuplan.errors.opt`): each front end
    spells it (the command line ``--grad-accum``, the web ``grad_accum``)."""
    return opt(field)


def refuse(engine: str, text: str, *, field: str = "export", value: object = None,
           fix: dict | None = None) -> InputError:
    """The one line an export raises (``raise refuse("vllm", "...")``), naming the export; the
    field it is about (default: the export itself) and the fix as data."""
    return InputError(f"{opt('export')} {engine}: {text}", field=field,
                      value=engine if field == "export" and value is None else value, fix=fix)


@cache
def _defaults(engine: str) -> dict[str, object]:
    """Every field as a job left to ``engine`` has it: :func:`gpuplan.job.default_job`, the job
    ``job_flags`` prints a job against, in the engine's own mode."""
    return default_job(engine).to_dict()


def check_expressed(job: Job, engine: str, checked: tuple[str, ...],
                    expressed: frozenset[str]) -> None:
    """Refuse the first of ``checked`` that differs from the Job's default and that the engine's
    config has no setting for."""
    defaults = _defaults(job.engine)
    for name in checked:
        value = _plain(getattr(job, name))
        if name not in expressed and value != defaults[name]:
            shown = value if not isinstance(value, bool) else ""
            raise refuse(engine, f"{flag(name)} {shown}".rstrip() + f" has no {engine} setting; "
                         "drop it to export this plan (or choose another engine)", field=name,
                         value=value, fix={name: defaults[name]})


def train_only(job: Job, engine: str) -> None:
    if not job.trains:
        raise refuse(engine, f"writes a training config and this plan has {opt('mode')} infer; "
                     f"use {opt('export')} vllm for serving, or {opt('mode')} train",
                     field="mode", value=job.mode, fix={"mode": "train"})


def infer_only(job: Job, engine: str) -> None:
    if not job.infers:
        raise refuse(engine, f"writes a serving command and this plan has {opt('mode')} train; "
                     f"use {opt('mode')} infer (or both)", field="mode", value=job.mode,
                     fix={"mode": "infer"})


def fp8_attention_by_kv(job: Job, engine: str) -> None:
    """A serving engine whose FP8 attention is selected by its FP8 KV cache (vLLM's and SGLang's
    FlashAttention-3 backend: :data:`gpuplan.engines.profiles.FP8_ATTENTION` ``kv_selects``)
    expresses the job's ``fp8_attention`` by its ``--kv-cache-dtype fp8`` and has no switch of
    its own: refused with a 16-bit cache rather than dropped."""
    if job.fp8_attention and job.kv_dtype != "fp8":
        raise refuse(engine, f"{opt('fp8_attention')} has no {engine} setting of its own: its "
                     "FP8 attention is selected by the FP8 KV cache; give "
                     f"{opt('kv_dtype')} fp8 too, or drop {opt('fp8_attention')}",
                     field="fp8_attention", value=True, fix={"kv_dtype": "fp8"})


def accumulation(job: Job, engine: str) -> int:
    """Micro-batches per optimizer step on one data-parallel rank: the pipeline's micro-batches
    where given, else the gradient-accumulation steps (the Job's rule; a Job refuses the two
    given different, so an engine's one number is never a choice between them)."""
    return job.micro_batches or job.grad_accum


def hub_repo(job: Job, model: Model) -> str | None:
    """The Hugging Face repository the model comes from (a catalog entry's config.json URL, or
    the hub id or path the job names), None when unknown."""
    src = getattr(model.architecture, "source", None) or ""
    prefix = "https://huggingface.co/"
    if src.startswith(prefix) and "/blob/" in src:
        return src[len(prefix):].split("/blob/")[0]
    if isinstance(job.model, str) and model.source != "catalog":
        return job.model
    return None


def num_machines(job: Job) -> int:
    return -(-job.gpus // job.gpus_per_node)


def _scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):  # a flow sequence: the same in YAML and TOML
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return json.dumps(str(v))  # a double-quoted string reads the same in YAML and TOML


def write_yaml(d: dict, indent: int = 0) -> str:
    """A mapping of scalars and nested mappings as block YAML; ``#`` keys become comments."""
    out = []
    pad = " " * indent
    for k, v in d.items():
        if k.startswith("#"):
            out.append(f"{pad}{k}")
        elif isinstance(v, dict):
            out.append(f"{pad}{k}:")
            out.append(write_yaml(v, indent + 2).rstrip("\n"))
        else:
            out.append(f"{pad}{k}: {_scalar(v)}")
    return "\n".join(out) + "\n"


def write_toml(sections: dict[str, dict]) -> str:
    """Sections of scalars as TOML; ``#`` keys become comments."""
    out = []
    for name, body in sections.items():
        if name.startswith("#"):
            out.append(name)
            continue
        out.append(f"\n[{name}]")
        for k, v in body.items():
            out.append(k if k.startswith("#") else f"{k} = {_scalar(v)}")
    return "\n".join(out).lstrip("\n") + "\n"


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value
