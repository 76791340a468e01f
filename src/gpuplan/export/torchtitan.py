"""torchtitan: the TOML job config ``torchrun ... -m torchtitan.train --job.config_file FILE``
reads (torchtitan 0.1-0.2, ``torchtitan/config/job_config.py``; torchtitan 0.3 moved to Python
config registries with the same ``--section.key`` names as command-line overrides).

torchtitan trains its own model definitions: the catalog's Llama 3.1, Qwen3 (dense and MoE),
Llama 4, DeepSeek-V3/R1 and gpt-oss models map onto its ``llama3``, ``qwen3``, ``llama4``,
``deepseek_v3`` and ``gpt_oss`` flavors (``MODELS``); anything else is refused in one line. ZeRO-3 is ``data_parallel_shard_degree`` with
``fsdp_reshard_after_forward = "always"``, ZeRO-2 the same with ``"never"``, ZeRO-0 is
``data_parallel_replicate_degree`` (DDP). Its tensor parallel always shards the norms by
sequence (sequence parallel). Local batch = micro-batch x pipeline micro-batches; the gradient
accumulation follows from ``global_batch_size``.
"""

from __future__ import annotations

from ..engines.profiles import runtime_of
from ..errors import opt
from ..job import Job, default_seq, pp_chunks
from ..models import Model
from ._common import (TRAIN_FIELDS, accumulation, check_expressed, hub_repo, refuse,
                      train_only, write_toml)

ENGINE = "torchtitan"
_EXPRESSED = frozenset({"zero", "dp_shard", "checkpointing", "fused_optimizer", "tp", "pp", "cp", "ep",
                        "max_grad_norm", "fp8_param_gather", "fp8_attention",
                        "sequence_parallel", "pp_schedule", "micro_batches", "runtime"})
#: catalog name -> (torchtitan model name, flavor): the flavors of torchtitan 0.2.2's
#: torchtitan/models/<name>/__init__.py (llama3_args, qwen3_args, llama4_args,
#: deepseekv3_args, gptoss_configs) whose dimensions are the catalog model's (held to that
#: source in tests/unit/test_export.py). Llama 4 maps onto the ``_irope`` flavors: NoPE every
#: fourth layer and chunked attention, as the released models; DeepSeek-R1 is DeepSeek-V3's
#: architecture.
MODELS = {"llama-3.1-8b": ("llama3", "8B"), "llama-3.1-70b": ("llama3", "70B"),
          "llama-3.1-405b": ("llama3", "405B"),
          "qwen3-0.6b": ("qwen3", "0.6B"), "qwen3-1.7b": ("qwen3", "1.7B"),
          "qwen3-4b": ("qwen3", "4B"), "qwen3-8b": ("qwen3", "8B"),
          "qwen3-14b": ("qwen3", "14B"), "qwen3-32b": ("qwen3", "32B"),
          "qwen3-30b-a3b": ("qwen3", "30B-A3B"), "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
          "llama-4-scout": ("llama4", "17bx16e_irope"),
          "llama-4-maverick": ("llama4", "17bx128e_irope"),
          "deepseek-v3": ("deepseek_v3", "671B"), "deepseek-r1": ("deepseek_v3", "671B"),
          "gpt-oss-20b": ("gpt_oss", "20b"), "gpt-oss-120b": ("gpt_oss", "120b")}
#: the transformers families torchtitan 0.2 defines a model for
_FAMILIES = {"llama": "llama3", "qwen3": "qwen3", "qwen3_moe": "qwen3", "llama4_text": "llama4",
             "deepseek_v3": "deepseek_v3", "deepseek_v2": "deepseek_v3", "gpt_oss": "gpt_oss"}
_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
_PRECISION = {"mixed-bf16": ("float32", "bfloat16"), "fp32": ("float32", "float32"),
              "bf16": ("bfloat16", "bfloat16"), "fp8-tensorwise": ("float32", "bfloat16"),
              "fp8-rowwise": ("float32", "bfloat16"), "mxfp8": ("float32", "bfloat16")}


def _converters(job: Job) -> tuple[list[str], dict]:
    """torchtitan 0.2's model converters and their sections for a narrow recipe
    (``torchtitan/config/job_config.py``: ``Float8Linear``, ``MXLinear``): torchao's float8
    linear (tensorwise: ``recipe_name`` unset, the FSDP float8 all-gather under
    ``--fp8-param-gather``; rowwise: ``recipe_name = "rowwise"``) or its MXFP8 linear
    (``mxfp8_cublas``), the output head left in BF16 as both recipes here keep it."""
    if job.fp8_attention:
        raise refuse(ENGINE, f"{opt('fp8_attention')}: torchtitan's float8 converters quantize "
                     "the linear layers only", field="fp8_attention", value=True,
                     fix={"fp8_attention": False})
    if job.precision in ("fp8-tensorwise", "fp8-rowwise"):
        sec = {"filter_fqns": ["output"]}
        if job.precision == "fp8-rowwise":
            sec["recipe_name"] = "rowwise"
        elif job.fp8_param_gather:
            sec |= {"enable_fsdp_float8_all_gather": True,
                    "precompute_float8_dynamic_scale_for_fsdp": True}
        return ["quantize.linear.float8"], {"quantize.linear.float8": sec}
    if job.precision == "mxfp8":
        return ["quantize.linear.mx"], {"quantize.linear.mx": {"recipe_name": "mxfp8_cublas",
                                                               "filter_fqns": ["output"]}}
    return [], {}


def _model(job: Job, model: Model) -> dict:
    if model.name not in MODELS:
        family = model.architecture.family if model.architecture else None
        tt = _FAMILIES.get(family or "")
        if tt is None:
            why = (f"torchtitan 0.2 defines no {family} model" if family else
                   "its architecture is unknown")
        else:
            flavors = sorted({f for n, f in MODELS.values() if n == tt})
            why = f"no torchtitan {tt} flavor has its size ({', '.join(flavors)})"
        raise refuse(ENGINE, f"{model.name} is not one of torchtitan's model definitions "
                     f"({why}; it defines llama3, qwen3, llama4, deepseek_v3, gpt_oss); use "
                     f"{opt('export')} fsdp for a transformers model", fix={"export": "fsdp"})
    name, flavor = MODELS[model.name]
    # where torchtitan's scripts/download_hf_assets.py puts the tokenizer: ./assets/hf/<repo>
    repo = (hub_repo(job, model) or model.name).split("/")[-1]
    return {"name": name, "flavor": flavor, "hf_assets_path": f"./assets/hf/{repo}"}


def _parallelism(job: Job, model: Model) -> dict:
    if job.zero == 1:
        raise refuse(ENGINE, f"{opt('zero')} 1 has no torchtitan setting (FSDP shards parameters "
                     f"and gradients too): use {opt('zero')} 2 or 3", field="zero", value=1,
                     fix={"zero": 2})
    if job.tp > 1 and not job.sequence_parallel:
        raise refuse(ENGINE, f"{opt('tp')} {job.tp} without {opt('sequence_parallel')}: "
                     "torchtitan's tensor parallel always shards the norms by sequence; add "
                     f"{opt('sequence_parallel')}", field="sequence_parallel", value=False,
                     fix={"sequence_parallel": True})
    shard = job.dp if job.dp_shard is None else job.dp_shard  # HSDP: replicas of the shards
    out = {"data_parallel_replicate_degree": job.dp if job.zero == 0 else job.dp // shard,
           "data_parallel_shard_degree": 1 if job.zero == 0 else shard,
           "fsdp_reshard_after_forward": "always" if job.zero == 3 else "never",
           "tensor_parallel_degree": job.tp, "context_parallel_degree": job.cp,
           "expert_parallel_degree": job.ep, "pipeline_parallel_degree": job.pp}
    if job.pp > 1:
        name, chunks = pp_chunks(job.pp_schedule)
        out["pipeline_parallel_schedule"] = _SCHEDULES[name]
        out["pipeline_parallel_microbatch_size"] = job.batch
        layers = model.architecture.num_layers if model.architecture else 0
        if chunks > 1:
            if not layers or layers % (job.pp * chunks):
                raise refuse(ENGINE, f"{opt('pp_schedule')} {job.pp_schedule}: {layers} layers do "
                             f"not split into {job.pp} x {chunks} equal chunks",
                             field="pp_schedule", value=job.pp_schedule)
            out["pipeline_parallel_layers_per_stage"] = layers // (job.pp * chunks)
    return out


def export(job: Job, model: Model) -> str:
    """The torchtitan TOML job config of ``job``."""
    train_only(job, ENGINE)
    check_expressed(job, ENGINE, TRAIN_FIELDS, _EXPRESSED)
    if job.precision not in _PRECISION:
        raise refuse(ENGINE, f"{opt('precision')} {job.precision} has no torchtitan setting (FSDP "
                     "mixed precision: mixed-bf16; or fp32, bf16; torchao: fp8-tensorwise, "
                     "fp8-rowwise, mxfp8)", field="precision",
                     value=job.precision, fix={"precision": "mixed-bf16"})
    if job.optimizer not in ("adamw", "adam"):
        raise refuse(ENGINE, f"{opt('optimizer')} {job.optimizer}: torchtitan builds Adam and "
                     "AdamW", field="optimizer", value=job.optimizer, fix={"optimizer": "adamw"})
    if job.checkpointing == "selective":
        raise refuse(ENGINE, f"{opt('checkpointing')} selective (Megatron's attention recompute) "
                     "is not torchtitan's selective (per-op or every n-th layer); use full or "
                     "none", field="checkpointing", value="selective",
                     fix={"checkpointing": "full"})
    accum = accumulation(job, ENGINE)
    if job.runtime == "cudagraphs":
        raise refuse(ENGINE, f"{opt('runtime')} cudagraphs has no torchtitan setting; use "
                     "compile or eager", field="runtime", value="cudagraphs",
                     fix={"runtime": "compile"})
    # with a pipeline the step's micro-batches are one local batch; else torchtitan accumulates
    local = job.batch * (accum if job.pp > 1 else 1)
    dtype, param = _PRECISION[job.precision]
    converters, quantize = _converters(job)
    model_section = _model(job, model) | ({"converters": converters} if converters else {})
    return write_toml({
        f"# gpuplan plan of {model.name}: {job.gpus} GPUs": {},
        "job": {"description": f"gpuplan plan of {model.name}"},
        "model": model_section,
        "optimizer": {"name": "AdamW" if job.optimizer == "adamw" else "Adam",
                      "implementation": "fused" if job.fused_optimizer else "foreach"},
        "training": {"local_batch_size": local,
                     "global_batch_size": job.batch * accum * job.dp,
                     "seq_len": job.seq or default_seq(model.architecture),
                     "dtype": dtype, "mixed_precision_param": param,
                     # torchtitan clips at 1.0 unless told; written only when the plan says
                     **({"max_norm": job.max_grad_norm} if job.max_grad_norm is not None
                        else {})},
        "parallelism": _parallelism(job, model),
        "activation_checkpoint": {"mode": job.checkpointing},
        "compile": {"enable": runtime_of(job.runtime, "train", job.engine) == "compile"},
        **quantize,
    })
