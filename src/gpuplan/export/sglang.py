"""SGLang: the ``python -m sglang.launch_server ...`` command(s) of an inference plan, one per
replica, and the ``sglang_router`` line that spreads requests over them.

Flag names from SGLang's ``python/sglang/srt/server_args.py`` at commit
001067fffe33427bee0ed2f007fb7551a1d76b44 (sgl-project/sglang; each ``ServerArgs`` field ``x_y`` is
the flag ``--x-y``): ``--model-path``, ``--tp-size``, ``--pp-size``, ``--ep-size``, ``--dtype``,
``--quantization``, ``--kv-cache-dtype`` (``auto``, ``fp8_e5m2``, ``fp8_e4m3``, ``bf16``, ...),
``--context-length``, ``--mem-fraction-static`` (the share of the card for the weights and the
KV pool), ``--max-running-requests``, ``--chunked-prefill-size`` (the tokens of one prefill
chunk), ``--page-size`` (tokens per KV page), ``--host``, ``--port``, ``--base-gpu-id``. The
router's from ``sgl-router/py_src/sglang_router/router_args.py`` at commit
e46dcd87adca58ec70831ad7cb01a3892b2c9e50: ``--worker-urls``, ``--host``, ``--port``, ``--policy``
(``round_robin``: how ``gpuplan capacity`` deals requests to its replicas).

Weights as for vLLM (export/vllm.py): 16-bit formats set ``--dtype`` only; fp8 is SGLang's online
FP8 (``--quantization fp8``, "MOE + linear online quantization" in its QUANTIZATION_CHOICES); nf4
is ``--quantization bitsandbytes``; GPTQ/AWQ/FP8-block/MXFP4 need a checkpoint packed so, whose
``quant_method`` SGLang reads from its config.json. An fp8 KV cache is ``fp8_e4m3``.

Every knob is written, so the command states what the plan assumed: without the plan's own
scheduler numbers (``gpuplan capacity --export sglang`` passes those it simulated) the plan's
batch is ``--max-running-requests`` and SGLang's own defaults for an 80 GB card are written for
the rest (chunked_prefill_size 8192 -- the named card's own when ``gpuplan fit`` names one --,
page_size 1; docs/engine_budget.md). The memory fraction is
the plan's (:func:`~gpuplan.memory.budget.planned_fraction`; it was a constant 0.88, 0.4's TP-1
default, beside the 0.5 rule the plan sized the cache by), left out only where that default is a
card's and no single card is named.
"""

from __future__ import annotations

import shlex

from ..errors import opt
from ..engines.budget import sglang_settings
from ..hardware import GPU
from ..job import Job, default_seq
from ..memory.budget import planned_fraction
from ..models import Model
from ._common import (INFER_FIELDS, check_expressed, fp8_attention_by_kv, hub_repo,
                      infer_only, refuse)
from .vllm import _PACKED, _WEIGHTS, _config_quant_method

__all__ = ["export", "SERVER_FLAGS", "ROUTER_FLAGS", "BASE_PORT", "ROUTER_PORT"]

ENGINE = "sglang"
_EXPRESSED = frozenset({"kv_dtype", "tp", "pp", "ep", "runtime", "fp8_attention"})
#: The flags this writer may emit, with where SGLang defines them (tests check against them).
SERVER_FLAGS = ("--model-path", "--tp-size", "--pp-size", "--ep-size", "--dtype",
                "--quantization", "--kv-cache-dtype", "--context-length",
                "--mem-fraction-static", "--max-running-requests", "--chunked-prefill-size",
                "--page-size", "--host", "--port", "--base-gpu-id")
ROUTER_FLAGS = ("--worker-urls", "--host", "--port", "--policy")
#: server_args.py: port 30000 by default; replicas take the next ports; the router listens on
#: 8000 so that it never collides with a replica's port.
BASE_PORT = 30000
ROUTER_PORT = 8000
#: SGLang's defaults on an 80 GB card when the plan gives none (server_args.py
#: _handle_gpu_memory_settings: chunked_prefill_size 8192; page_size 1).
DEFAULT_CHUNK = 8192
DEFAULT_PAGE = 1


def _weights(job: Job, model: Model) -> tuple[str, str, str | None]:
    # auto: the checkpoint's own format, its quantization passed on as the engine loads it
    fmt = job.resolve_infer(model.architecture).infer_precision
    if fmt not in _WEIGHTS:
        raise refuse(ENGINE, f"{opt('precision')} {fmt} has no SGLang setting; use one of "
                     f"{', '.join(_WEIGHTS)}", field="precision", value=fmt)
    dtype, quant = _WEIGHTS[fmt]
    own = hub_repo(job, model)
    if own is None:
        raise refuse(ENGINE, f"{model.name}: sglang.launch_server needs a Hugging Face "
                     "repository or a model directory; name one instead of a bare parameter "
                     "count", field="model")
    if fmt in _PACKED and _config_quant_method(model) != _PACKED[fmt]:
        raise refuse(ENGINE, f"{opt('precision')} {fmt} serves a checkpoint quantized by "
                     f"{_PACKED[fmt].upper()} and {own} holds unquantized weights; plan the "
                     "quantized checkpoint's own repository", field="precision", value=fmt)
    return own, dtype, quant


def _kv(job: Job, dtype: str) -> str:
    kv = job.kv_dtype
    if kv is None or {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(kv) == dtype:
        return "auto"
    if kv == "fp8":
        return "fp8_e4m3"
    if kv == "bf16":
        return "bf16"
    raise refuse(ENGINE, f"{opt('kv_dtype')} {kv}: SGLang's KV cache is the model dtype, bf16 "
                 "or fp8; use one of them", field="kv_dtype", value=kv, fix={"kv_dtype": "fp8"})


def _budget(job: Job, gpu: GPU | None, version: str | None, fraction: float | None,
            chunk: int | None) -> tuple[float | None, int]:
    """(--mem-fraction-static, --chunked-prefill-size) as the plan's KV budget read them: the
    given ones, else the version's defaults on ``gpu`` (engines/budget.py's buckets, the
    budget's profile run); without a card, no fraction (SGLang's own) and an 80 GB card's chunk."""
    fraction = planned_fraction(ENGINE, job, gpu, engine_version=version,
                                mem_fraction_static=fraction)
    if chunk is None:
        chunk = sglang_settings(gpu.memory_bytes, job.tp)[0] if gpu is not None else DEFAULT_CHUNK
    return fraction, chunk


def export(job: Job, model: Model, *, replicas: int | None = None,
           mem_fraction_static: float | None = None, max_running_requests: int | None = None,
           chunked_prefill_size: int | None = None, page_size: int | None = None,
           context: int | None = None, gpu: GPU | None = None,
           engine_version: str | None = None) -> str:
    """One ``sglang.launch_server`` line per replica (``replicas``, default the plan's data
    parallel size) on ports 30000, 30001, ..., and with more than one a ``sglang_router`` line
    over them. The keyword knobs are the scheduler's (``gpuplan capacity`` passes those it
    simulated); unset, the plan's batch and SGLang's defaults are written. The memory fraction
    is the one the plan's KV budget was sized at (:func:`~gpuplan.memory.budget.planned_fraction`:
    the given one, else ``engine_version``'s default on ``gpu``); with neither a fraction nor a
    ``gpu`` it is left out, so SGLang computes its default on the card it runs on -- the rule the
    plan applies per card."""
    infer_only(job, ENGINE)
    check_expressed(job, ENGINE, INFER_FIELDS, _EXPRESSED)
    fp8_attention_by_kv(job, ENGINE)
    if job.runtime == "eager":
        raise refuse(ENGINE, f"{opt('runtime')} eager: SGLang's disable_cuda_graph is no "
                     "longer a command-line field of its server_args; use the default runtime",
                     field="runtime", value="eager", fix={"runtime": "auto"})
    if job.runtime == "compile":
        raise refuse(ENGINE, f"{opt('runtime')} compile: SGLang captures CUDA graphs by default "
                     f"(auto)", field="runtime", value="compile", fix={"runtime": "auto"})
    served, dtype, quant = _weights(job, model)
    per = job.tp * job.pp
    if per > job.gpus_per_node:
        raise refuse(ENGINE, f"a replica of {opt('tp')} {job.tp} x {opt('pp')} {job.pp} spans "
                     f"nodes of {job.gpus_per_node} GPUs; the export writes one-node replicas: "
                     f"use at most {job.gpus_per_node} GPUs per replica", field="tp", value=job.tp)
    n = replicas if replicas is not None else job.dp
    ctx = context or job.context or job.seq or default_seq(model.architecture)
    fraction, chunk = _budget(job, gpu, engine_version, mem_fraction_static,
                              chunked_prefill_size)
    per_node = max(1, job.gpus_per_node // per)
    lines, urls = [], []
    for i in range(n):
        port = BASE_PORT + i
        args = ["python", "-m", "sglang.launch_server", "--model-path", served,
                "--tp-size", str(job.tp), "--pp-size", str(job.pp)]
        if job.ep > 1:
            args += ["--ep-size", str(job.ep)]
        args += ["--dtype", dtype]
        if quant:
            args += ["--quantization", quant]
        args += ["--kv-cache-dtype", _kv(job, dtype), "--context-length", str(ctx),
                 *(() if fraction is None else ("--mem-fraction-static", f"{fraction:g}")),
                 "--max-running-requests", str(max_running_requests or job.batch),
                 "--chunked-prefill-size", str(chunk),
                 "--page-size", str(page_size or DEFAULT_PAGE),
                 "--host", "0.0.0.0", "--port", str(port),
                 "--base-gpu-id", str((i % per_node) * per)]
        lines.append(" ".join(shlex.quote(a) for a in args))
        node = i // per_node
        urls.append(f"http://{'127.0.0.1' if node == 0 else f'node{node}'}:{port}")
    if n > 1:
        lines.append(" ".join(["python", "-m", "sglang_router.launch_router", "--worker-urls",
                               *urls, "--host", "0.0.0.0", "--port", str(ROUTER_PORT),
                               "--policy", "round_robin"]))
    return "\n".join(lines) + "\n"
