"""The job's vocabulary: every choice and default, defined once (the CLI's help, the web page's
selectors and the OpenAPI schema read them from here and from the Job's field docs)."""

from __future__ import annotations

from typing import Literal

from ..errors import InputError, opt
from ..models import Architecture
from ..parallel.checks import PP_SCHEDULES

__all__ = ["Mode", "Checkpointing", "Attention", "Runtime", "ModelCode", "Sharding",
           "PP_SCHEDULES", "KV_DTYPES", "DEFAULT_TRAIN_PRECISION", "DEFAULT_INFER_PRECISION",
           "DEFAULT_MODEL_PARAMS", "DEFAULT_SEQ", "seq_limit", "default_seq", "check_positions",
           "ENGINE_LONG_CONTEXT_OVERRIDE", "serving_engine", "ZERO_STAGES",
           "OptimizerStates", "MasterWeights", "GradDtype", "PrefillLogits", "MoeDispatcher",
           "ActivationStorage"]

Mode = Literal["train", "infer", "both"]
Checkpointing = Literal["none", "selective", "full"]
Attention = Literal["eager", "sdpa"]
Runtime = Literal["auto", "eager", "compile", "cudagraphs"]
ModelCode = Literal["transformers", "torchtune", "fms"]
#: Which engine shards the model states under ZeRO: DeepSpeed's ZeRO (the default) or PyTorch's
#: FSDP2 (``fully_shard``); they hold different copies (docs/memory.md, "FSDP2").
Sharding = Literal["deepspeed", "fsdp2"]
#: Megatron-Core's MoE token dispatcher: ``alltoall`` (MoEAlltoAllTokenDispatcher), or the flex
#: dispatcher over DeepEP's or HybridEP's fused kernels (``--moe-token-dispatcher-type flex
#: --moe-flex-dispatcher-backend deepep|hybridep``).
MoeDispatcher = Literal["alltoall", "deepep", "hybridep"]

#: KV-cache element formats and their bytes.
KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

#: The default training recipe and inference weight format (the seed's case), defined once.
DEFAULT_TRAIN_PRECISION = "mixed-bf16"
#: ``auto``: the checkpoint's shipped format where the engine and GPU load it as such, else bf16
#: (:func:`gpuplan.formats.resolve_infer_precision`); bf16 for a model with no quantization_config.
DEFAULT_INFER_PRECISION = "auto"

#: With no model named, a job (``gpuplan fit``, :meth:`Job.from_dict`) plans the source document's
#: example: a bare 7B-parameter model.
DEFAULT_MODEL_PARAMS = 7_000_000_000

#: Sequence length used when none is given and the architecture allows it.
DEFAULT_SEQ = 2048


def seq_limit(arch: Architecture) -> int:
    """The longest sequence the architecture runs: its position limit, or for a vision model its
    patches + the class token."""
    if arch.kind == "vision" and arch.patch_size:
        return arch.num_patches + 1
    return arch.max_position_embeddings


#: Serving engines that refuse a context past the model's by default, and the variable that lets
#: them start anyway (after a warning). vLLM: ``_get_and_verify_max_len``, vllm/config/model.py at
#: vllm-project/vllm@0052a5b818980ce8a0477706aaf9f75bd5af72cd ("User-specified max_model_len (...)
#: is greater than the derived max_model_len ... To allow overriding this maximum, set the env var
#: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"); SGLang: ``ModelConfig._derive_context_length``,
#: python/sglang/srt/configs/model_config.py at
#: sgl-project/sglang@001adf564fd332c285397a46a034ee2f93ba7515 (the same refusal, overridden by
#: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1).
ENGINE_LONG_CONTEXT_OVERRIDE = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
                                "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"}


def serving_engine(engine: str | None) -> str | None:
    """``engine`` where it is a serving engine whose start-up check refuses a context past the
    model's (:data:`ENGINE_LONG_CONTEXT_OVERRIDE`), else None: the engine to pass
    :func:`check_positions` for a serving job."""
    return engine if engine in ENGINE_LONG_CONTEXT_OVERRIDE else None


def check_positions(arch: Architecture, value: int | None, name: str = "seq", *,
                    model: str | None = None, engine: str | None = None) -> str | None:
    """The one rule every command (fit, speed, cluster, capacity, the web API, the library)
    applies to a sequence or context of ``value`` tokens (the option ``name``): None within the
    model's positions (:func:`seq_limit`); past them, a note to show beside the plan, or an
    InputError where the job cannot run at all.

    - Rotary (RoPE), ALiBi and position-free models run past their trained context: the job is
      planned (torchtitan trained Llama 3.1 8B at seq 262,144 > its 131,072,
      benchmarks/published/runs.json) and the note says the length is past the trained context
      (the model's quality there is not planned).
    - Learned absolute positions (GPT-2, OPT, BERT, GPTBigCode) and a vision model's patch table
      have no row past the limit: the lookup fails, so it is refused.
    - ``engine`` (vllm, sglang): the serving engine's own start-up check, which refuses any
      ``max_model_len`` past the config's context unless its override variable is set
      (:data:`ENGINE_LONG_CONTEXT_OVERRIDE`); refused, naming it. Another ``engine`` (capacity's
      trt-llm, whose rule past the context has no source here) is refused as before, without a
      claim about that engine; :func:`serving_engine` passes only vLLM and SGLang for a job."""
    limit = seq_limit(arch)
    if value is None or value <= limit:
        return None
    who = model or arch.name
    if arch.kind == "vision" and arch.patch_size:
        raise InputError(f"{opt(name)} {value}: {who} supports at most {limit} tokens per image "
                         f"(patches + class token); use {opt(name)} {limit} or less", field=name,
                         value=value, accepted=f"at most {limit}", fix={name: limit})
    if arch.position == "learned":
        raise InputError(f"{opt(name)} {value}: {who} supports at most {limit} positions "
                         f"(max_position_embeddings: a learned position table has no row past "
                         f"it); use {opt(name)} {limit} or less", field=name, value=value,
                         accepted=f"at most {limit}", fix={name: limit})
    if engine is not None:
        override = ENGINE_LONG_CONTEXT_OVERRIDE.get(engine)
        how = f", which {engine} refuses unless {override} is set" if override else ""
        raise InputError(f"{opt(name)} {value:,} is longer than the model's context ({limit:,})"
                         f"{how}; give at most that", field=name, value=value,
                         accepted=f"at most {limit}", fix={name: limit})
    return (f"{name} {value:,} is past {who}'s trained context of {limit:,} positions "
            f"(max_position_embeddings): planned, since {arch.position} positions extend past "
            "it; output quality there is not modeled")


def default_seq(arch: Architecture | None) -> int:
    """The sequence length every analysis uses when none is given: the architecture's limit capped
    at :data:`DEFAULT_SEQ` (a vision model: its patches + [CLS]); DEFAULT_SEQ when unknown."""
    if arch is None:
        return DEFAULT_SEQ
    if arch.kind == "vision":
        return seq_limit(arch)
    return min(DEFAULT_SEQ, arch.max_position_embeddings or DEFAULT_SEQ)

#: ZeRO stages.
ZERO_STAGES = (0, 1, 2, 3)
OptimizerStates = Literal["auto", "fp32", "bf16"]
MasterWeights = Literal["auto", "fp32", "bf16", "remainder", "none"]
ActivationStorage = Literal["engine", "deepseek-v3"]
PrefillLogits = Literal["all", "last"]
GradDtype = Literal["auto", "fp32", "bf16"]
