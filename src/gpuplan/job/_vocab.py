"""The job's vocabulary: every choice and default, defined once (the CLI's help, the web page's
selectors and the OpenAPI schema read them from here and from the Job's field docs)."""

from __future__ import annotations

from typing import Literal

from ..models import Architecture
from ..parallel.checks import PP_SCHEDULES

__all__ = ["Mode", "Checkpointing", "Attention", "Runtime", "ModelCode", "Sharding",
           "PP_SCHEDULES", "KV_DTYPES", "DEFAULT_TRAIN_PRECISION", "DEFAULT_INFER_PRECISION",
           "DEFAULT_MODEL_PARAMS", "DEFAULT_SEQ", "seq_limit", "default_seq", "ZERO_STAGES",
           "OptimizerStates", "MasterWeights", "PrefillLogits", "MoeDispatcher"]

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
MasterWeights = Literal["auto", "fp32", "bf16", "remainder"]
PrefillLogits = Literal["all", "last"]
