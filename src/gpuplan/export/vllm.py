"""vLLM: the ``vllm serve MODEL ...`` command of an inference plan.

Options from vLLM's engine arguments (https://docs.vllm.ai/en/latest/configuration/engine_args.html,
``vllm/engine/arg_utils.py``): ``--tensor-parallel-size``, ``--pipeline-parallel-size``,
``--data-parallel-size``, ``--max-model-len`` (the context), ``--max-num-seqs`` (the concurrent
sequences: the plan's batch), ``--dtype``, ``--quantization``, ``--kv-cache-dtype``,
``--enforce-eager``, ``--enable-expert-parallel`` (experts over the TP x DP ranks),
``--gpu-memory-utilization``.

Weights. The repository is the model's own (a catalog entry's Hugging Face repository, or the hub
id or directory the plan names) unless ``repo`` (``gpuplan fit --export-repo``) names another.
A catalog repository holds the published 16-bit weights, so:

* bf16 / fp16 / fp32: ``--dtype`` only; no ``--quantization`` (there is nothing to quantize).
* fp8: ``--quantization fp8`` on a 16-bit repository is vLLM's online FP8 quantization (weights
  cast to FP8 with a per-tensor scale at load; vLLM docs, Quantization / FP8 W8A8: "dynamic
  quantization of an original precision BF16/FP16 model to FP8 ... specifying
  --quantization fp8"). A repository given with ``--export-repo`` is taken as an FP8 checkpoint:
  vLLM reads its method from its config.json (an FP8 checkpoint may be ``compressed-tensors``,
  which ``--quantization fp8`` would contradict), so the flag is left out.
* nf4: ``--quantization bitsandbytes``, which vLLM documents both for in-flight 4-bit
  quantization of a 16-bit repository and for a bitsandbytes checkpoint.
* gptq-4bit / awq-4bit: the weights must already be packed by GPTQ / AutoAWQ; vLLM cannot make
  them from 16-bit weights. The export refuses unless the repository is such a checkpoint: given
  with ``--export-repo``, or a plan model whose config.json carries a matching
  ``quantization_config``. No ``--quantization`` then either: vLLM reads ``quant_method`` from the
  repository and picks its Marlin kernel where the GPU has it, while an explicit
  ``--quantization awq`` / ``gptq`` forces the older, slower kernel (vLLM logs "you specified
  quantization=awq explicitly, so forcing awq").

* mxfp8: ``--quantization mxfp8``, vLLM's online MXFP8 (``Mxfp8Config``: BF16 weights quantized
  at load to e4m3 with an e8m0 scale per 32; compute capability 10.0, Blackwell).
* nvfp4, mxfp4, w4a16, w4a8, fp8-channel: checkpoints a quantizer wrote (vLLM has no online path
  to them), so the repository must be one (``--export-repo``, or a plan model whose config.json
  ``quantization_config`` has the method), and ``--quantization`` names the method vLLM's loader
  resolves that checkpoint to -- the same name, so vLLM's check that the flag matches the
  checkpoint passes: ``modelopt_fp4`` for NVFP4 (a TensorRT Model Optimizer checkpoint, its
  config's ``quant_method`` ``modelopt`` with ``quant_algo`` NVFP4), ``mxfp4`` (gpt-oss's own),
  ``compressed-tensors`` for llm-compressor's W4A16, W4A8 (int4 weights, FP8 activations) and
  FP8_DYNAMIC (per-channel FP8) checkpoints.

The names are vLLM's ``QuantizationMethods`` (``vllm/model_executor/layers/quantization/
__init__.py`` at vllm-project/vllm@05d909563e1d1ada39a13b67e7b9a4cbca1d6a8e) and its
``CacheDType`` (``vllm/config/cache.py`` at c1d86421174a87056edc90a41dc9942391509e84: ``fp8``
is e4m3).

Memory. ``--gpu-memory-utilization`` is written so that the command states the share of each
GPU the plan's KV budget was sized at: the user's (``--gpu-memory-utilization``, or the one
``gpuplan capacity`` simulated), else the default of the vLLM version the plan ran
(:func:`gpuplan.engines.budget.budget_rule`: 0.9 up to 0.20, 0.92 from 0.21, PR
vllm-project/vllm#38284). vLLM takes that fraction of each GPU's memory at start-up and fills what
the weights and the profiled activations leave with KV-cache blocks. (This was a constant 0.9
beside the budget rule's own default: a plan sized at 0.21's 0.92 was exported at 0.9.)
"""

from __future__ import annotations

import re
import shlex

from ..errors import InputError, opt, shown
from ..job import Job, default_seq
from ..hardware import GPU
from ..memory.budget import deployed_max_model_len, kv_budget, planned_fraction
from ..models import Model
from ._common import (INFER_FIELDS, check_expressed, fp8_attention_by_kv, hub_repo,
                      infer_only, refuse)

ENGINE = "vllm"
_EXPRESSED = frozenset({"kv_dtype", "tp", "pp", "ep", "runtime", "fp8_attention"})
#: weight format -> (--dtype, --quantization on the model's own 16-bit repository)
_WEIGHTS = {"bf16": ("bfloat16", None), "fp16": ("float16", None), "fp32": ("float32", None),
            "fp8": ("bfloat16", "fp8"), "nf4": ("bfloat16", "bitsandbytes"),
            "gptq-4bit": ("float16", None), "awq-4bit": ("float16", None),
            "fp8-block": ("bfloat16", None), "mxfp4": ("bfloat16", "mxfp4"),
            "mxfp8": ("bfloat16", "mxfp8"), "nvfp4": ("bfloat16", "modelopt_fp4"),
            "w4a16": ("bfloat16", "compressed-tensors"),
            "w4a8": ("bfloat16", "compressed-tensors"),
            "fp8-channel": ("bfloat16", "compressed-tensors")}
#: Formats whose weights only a quantized repository holds -> its config.json ``quant_method``
#: (DeepSeek-V3 and gpt-oss publish theirs so: vLLM reads the method from the repository).
_PACKED = {"gptq-4bit": "gptq", "awq-4bit": "awq", "fp8-block": "fp8", "mxfp4": "mxfp4",
           "nvfp4": "modelopt", "w4a16": "compressed-tensors", "w4a8": "compressed-tensors",
           "fp8-channel": "compressed-tensors"}
#: The quantizer that writes each packed format's checkpoints (named in a refusal).
_QUANTIZER = {"nvfp4": "TensorRT Model Optimizer (NVFP4)", "w4a16": "llm-compressor (W4A16)",
              "w4a8": "llm-compressor (W4A8)", "fp8-channel": "llm-compressor (FP8_DYNAMIC)"}
#: What a given repository of each format keeps of the --quantization above (None: vLLM reads
#: the method from the repository's own config.json).
_GIVEN = {"fp8": None, "nf4": "bitsandbytes", "mxfp8": None}


def _kv(job: Job, dtype: str) -> list[str]:
    kv = job.kv_dtype
    if kv is None or {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(kv) == dtype:
        return []
    if kv == "fp8":
        return ["--kv-cache-dtype", "fp8"]
    raise refuse(ENGINE, f"{opt('kv_dtype')} {kv}: vLLM's KV cache is the model dtype ({dtype}) "
                 "or fp8; use one of them", field="kv_dtype", value=kv, fix={"kv_dtype": "fp8"})


def _config_quant_method(model: Model) -> str | None:
    """The ``quant_method`` of the model's config.json ``quantization_config``, as the loader
    states it in the model's notes (models/_load.py), None when it has none."""
    for note in model.notes:
        m = re.search(r"quantization_config \(quant_method '([^']*)'\)", note)
        if m:
            return m.group(1).lower()
    arch = model.architecture
    if arch is not None and arch.checkpoint_format is not None:
        return _PACKED.get(arch.checkpoint_format)
    return None


def check_repo(repo: str | None) -> str | None:
    """``--export-repo``: a Hugging Face id or a directory, one printable word."""
    if repo is None:
        return None
    if not repo or len(repo) > 256 or not repo.isprintable() or any(c.isspace() for c in repo):
        raise InputError(f"{opt('export_repo')} {shown(repo)}: expected a Hugging Face "
                         f"repository id (org/name) or a model directory, e.g. "
                         f"{opt('export_repo')} hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
                         field="export_repo", value=repo,
                         accepted="a Hugging Face repository id (org/name) or a model directory")
    return repo


def _weights(job: Job, model: Model, repo: str | None) -> tuple[str, str, str | None]:
    """(the repository vllm serve loads, --dtype, --quantization or None)."""
    # auto: the checkpoint's own format, its quantization passed on as the engine loads it
    fmt = job.resolve_infer(model.architecture).infer_precision
    if fmt not in _WEIGHTS:
        raise refuse(ENGINE, f"{opt('precision')} {fmt} has no vLLM setting; use one of "
                     f"{', '.join(_WEIGHTS)}", field="precision", value=fmt)
    dtype, quant = _WEIGHTS[fmt]
    if repo is not None:
        return repo, dtype, _GIVEN.get(fmt, quant)
    own = hub_repo(job, model)
    if own is None:
        raise refuse(ENGINE, f"{model.name}: vllm serve needs a Hugging Face repository or a "
                     "model directory; name one instead of a bare parameter count, or give "
                     f"{opt('export_repo')} ORG/NAME", field="export_repo")
    if fmt in _PACKED and _config_quant_method(model) != _PACKED[fmt]:
        method = _QUANTIZER.get(fmt) or _PACKED[fmt].upper()
        raise refuse(ENGINE, f"{opt('precision')} {fmt} serves a checkpoint quantized by "
                     f"{method} and {own} holds unquantized weights; add {opt('export_repo')} with "
                     f"that repository (e.g. {opt('export_repo')} ORG/NAME-"
                     f"{_PACKED[fmt].upper() if fmt not in _QUANTIZER else fmt.upper()})",
                     field="export_repo")
    return own, dtype, quant


def export(job: Job, model: Model, *, repo: str | None = None,
           gpu_memory_utilization: float | None = None, engine_version: str | None = None,
           gpu: GPU | None = None, budget: dict | None = None) -> str:
    """The ``vllm serve`` command of ``job``'s inference; ``repo``: the repository to serve when
    it is not the model's own (a quantized checkpoint of it); ``gpu_memory_utilization``: the
    share the plan's KV budget was sized at (default: ``engine_version``'s default, the budget
    rule's); ``budget``: the budget's other knobs (``max_model_len``, ``max_num_batched_tokens``,
    ``max_num_seqs``). ``--max-model-len`` is the one the plan's budget was sized at
    (:func:`gpuplan.memory.budget.deployed_max_model_len`); with the ``gpu`` known, a command
    vLLM would refuse to start with (its KV cache short of one such request) is not written:
    the refusal is the plan's own line (:attr:`gpuplan.memory.KVBudget.refusal`)."""
    infer_only(job, ENGINE)
    check_expressed(job, ENGINE, INFER_FIELDS, _EXPRESSED)
    fp8_attention_by_kv(job, ENGINE)
    served, dtype, quant = _weights(job, model, check_repo(repo))
    knobs = {k: v for k, v in (budget or {}).items() if v is not None}
    arch = model.architecture
    context = deployed_max_model_len(arch, job, knobs.get("max_model_len")) \
        or getattr(arch, "max_position_embeddings", None) or default_seq(arch)
    if gpu is not None and arch is not None and arch.kind == "decoder":
        _check_starts(job, model, gpu, {**knobs, "max_model_len": context,
                                        "gpu_memory_utilization": gpu_memory_utilization,
                                        "engine_version": engine_version})
    # the share fit's KV budget is sized at (memory/budget.py, the one home)
    fraction = planned_fraction(ENGINE, job, engine_version=engine_version,
                                gpu_memory_utilization=gpu_memory_utilization)
    args = ["vllm", "serve", served, "--tensor-parallel-size", str(job.tp),
            "--pipeline-parallel-size", str(job.pp), "--max-model-len", str(context),
            "--max-num-seqs", str(job.batch), "--dtype", dtype,
            "--gpu-memory-utilization", f"{fraction:g}"]
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
            raise refuse(ENGINE, f"{opt('ep')} {job.ep}: vLLM spreads experts over all tp x dp "
                         f"= {job.tp * job.dp} ranks; use {opt('ep')} {job.tp * job.dp}",
                         field="ep", value=job.ep, fix={"ep": job.tp * job.dp})
        args.append("--enable-expert-parallel")
    if job.runtime == "eager":
        args.append("--enforce-eager")
    elif job.runtime == "compile":
        raise refuse(ENGINE, f"{opt('runtime')} compile: vLLM compiles and captures CUDA graphs "
                     f"by default (auto); {opt('runtime')} eager is --enforce-eager",
                     field="runtime", value="compile", fix={"runtime": "auto"})
    return " ".join(shlex.quote(a) for a in args) + "\n"


def _check_starts(job: Job, model: Model, gpu: GPU, knobs: dict) -> None:
    """Refuse a command vLLM would not start with on ``gpu``: the plan's budget says so."""
    b = kv_budget(model, gpu, job, **{k: v for k, v in knobs.items() if v is not None})
    if not b.engine_starts:
        raise refuse(ENGINE, f"{gpu.name}: {b.refusal}", field="max_model_len",
                     value=b.max_model_len,
                     fix={"max_model_len": b.longest_max_model_len}
                     if b.longest_max_model_len else None)
