"""vLLM: the ``vllm serve MODEL ...`` command of an inference plan.

Options from vLLM's engine arguments (https://docs.vllm.ai/en/latest/configuration/engine_args.html,
``vllm/engine/arg_utils.py``): ``--tensor-parallel-size``, ``--pipeline-parallel-size``,
``--data-parallel-size``, ``--max-model-len`` (the context), ``--max-num-seqs`` (the concurrent
sequences: the plan's batch), ``--dtype``, ``--quantization``, ``--kv-cache-dtype``,
``--enforce-eager``, ``--enable-expert-parallel`` (experts over the TP x DP ranks).
"""

from __future__ import annotations

import shlex

from ..job import Job, default_seq
from ..models import Model
from ._common import INFER_FIELDS, check_expressed, hub_repo, infer_only, refuse

ENGINE = "vllm"
_EXPRESSED = frozenset({"kv_dtype", "tp", "pp", "ep", "runtime"})
#: weight format -> (--dtype, --quantization)
_WEIGHTS = {"bf16": ("bfloat16", None), "fp16": ("float16", None), "fp32": ("float32", None),
            "fp8": ("bfloat16", "fp8"), "nf4": ("bfloat16", "bitsandbytes"),
            "gptq-4bit": ("float16", "gptq"), "awq-4bit": ("float16", "awq")}


def _kv(job: Job, dtype: str) -> list[str]:
    kv = job.kv_dtype
    if kv is None or {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(kv) == dtype:
        return []
    if kv == "fp8":
        return ["--kv-cache-dtype", "fp8"]
    raise refuse(ENGINE, f"--kv-dtype {kv}: vLLM's KV cache is the model dtype ({dtype}) or "
                 "fp8; use one of them")


def export(job: Job, model: Model) -> str:
    """The ``vllm serve`` command of ``job``'s inference."""
    infer_only(job, ENGINE)
    check_expressed(job, ENGINE, INFER_FIELDS, _EXPRESSED)
    if job.infer_precision not in _WEIGHTS:
        raise refuse(ENGINE, f"--precision {job.infer_precision} has no vLLM setting for an "
                     f"unquantized checkpoint; use one of {', '.join(_WEIGHTS)}")
    repo = hub_repo(job, model)
    if repo is None:
        raise refuse(ENGINE, f"{model.name}: vllm serve needs a Hugging Face repository or a "
                     "model directory; name one instead of a bare parameter count")
    dtype, quant = _WEIGHTS[job.infer_precision]
    context = job.context or job.seq or default_seq(model.architecture)
    args = ["vllm", "serve", repo, "--tensor-parallel-size", str(job.tp),
            "--pipeline-parallel-size", str(job.pp), "--max-model-len", str(context),
            "--max-num-seqs", str(job.batch), "--dtype", dtype]
    if job.dp > 1:
        args += ["--data-parallel-size", str(job.dp)]
    if job.tp * job.pp > job.gpus_per_node:
        # a replica spans nodes: vLLM runs its workers on a Ray cluster started on them (its
        # engine args: "ray" is the default past one host, and it fails without Ray): say so
        args += ["--distributed-executor-backend", "ray"]
    if quant:
        args += ["--quantization", quant]
    args += _kv(job, dtype)
    if job.ep > 1:
        if job.ep != job.tp * job.dp:
            raise refuse(ENGINE, f"--ep {job.ep}: vLLM spreads experts over all tp x dp = "
                         f"{job.tp * job.dp} ranks; use --ep {job.tp * job.dp}")
        args.append("--enable-expert-parallel")
    if job.runtime == "eager":
        args.append("--enforce-eager")
    elif job.runtime == "compile":
        raise refuse(ENGINE, "--runtime compile: vLLM compiles and captures CUDA graphs by "
                     "default (auto); --runtime eager is --enforce-eager")
    return " ".join(shlex.quote(a) for a in args) + "\n"
