"""DeepSpeed: the JSON config ``deepspeed.initialize(config=...)`` reads.

Keys from DeepSpeed's config documentation (https://www.deepspeed.ai/docs/config-json/) and
``deepspeed/runtime/constants.py``: ``train_batch_size`` = micro-batch x accumulation x
data-parallel ranks (DeepSpeed asserts exactly this), ``zero_optimization.stage`` and
``offload_optimizer``, the ``bf16`` / ``fp16`` blocks (both keep an fp32 master copy: the
``mixed-*`` recipes), ``torch_autocast`` (``amp-bf16``), ``tensor_parallel.autotp_size`` (AutoTP
training, ZeRO stages 0-2 only), ``zero_optimization.stage3_max_live_parameters`` and
``stage3_prefetch_bucket_size`` where the plan set them (else DeepSpeed's defaults, which
:mod:`gpuplan.engines.zero3` assumes).
"""

from __future__ import annotations

import json

from ..errors import opt
from ..job import Job
from ..models import Model
from ._common import TRAIN_FIELDS, accumulation, check_expressed, refuse, train_only

ENGINE = "deepspeed"
_EXPRESSED = frozenset({"zero", "offload_optimizer", "fused_optimizer", "tp", "max_grad_norm",
                        "stage3_max_live_parameters", "stage3_prefetch_bucket_size"})

#: gpuplan optimizer -> DeepSpeed ``optimizer.type`` (its own Adam/AdamW/Lion/Adagrad, else a
#: ``torch.optim`` class by name) and params.
_OPTIMIZERS = {
    "adamw": ("AdamW", {}), "adam": ("Adam", {"adam_w_mode": False}), "lion": ("Lion", {}),
    "adagrad": ("Adagrad", {}), "sgd": ("SGD", {"momentum": 0.0}),
    "sgd-momentum": ("SGD", {"momentum": 0.9}), "rmsprop": ("RMSprop", {}),
    "adafactor": ("Adafactor", {}),
}


def _precision(job: Job) -> dict:
    p = job.precision
    if p == "fp32":
        return {}
    if p == "mixed-bf16":
        return {"bf16": {"enabled": True}}
    if p == "mixed-fp16":
        return {"fp16": {"enabled": True, "loss_scale": 0}}  # 0 = dynamic loss scaling
    if p == "amp-bf16":
        return {"torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    raise refuse(ENGINE, f"{opt('precision')} {p} has no DeepSpeed setting (its bf16/fp16 blocks "
                 "keep an fp32 master copy: use mixed-bf16 or mixed-fp16; amp-bf16 is "
                 "torch_autocast)", field="precision", value=p, fix={"precision": "mixed-bf16"})


def _optimizer(job: Job) -> dict:
    if job.optimizer not in _OPTIMIZERS:
        raise refuse(ENGINE, f"{opt('optimizer')} {job.optimizer} has no DeepSpeed optimizer "
                     f"type; use one of {', '.join(_OPTIMIZERS)}", field="optimizer",
                     value=job.optimizer, fix={"optimizer": "adamw"})
    kind, params = _OPTIMIZERS[job.optimizer]
    params = dict(params)
    if job.optimizer in ("adam", "adamw"):
        # DeepSpeed's default Adam is its fused kernel; torch_adam = torch.optim's (foreach)
        params["torch_adam"] = not job.fused_optimizer
    elif job.fused_optimizer:
        raise refuse(ENGINE, f"{opt('fused_optimizer')} with {job.optimizer}: DeepSpeed fuses "
                     f"Adam and AdamW only; drop {opt('fused_optimizer')}",
                     field="fused_optimizer", value=True, fix={"fused_optimizer": False})
    if job.optimizer_states != "auto":
        raise refuse(ENGINE, f"{opt('optimizer_states')} {job.optimizer_states}: DeepSpeed keeps "
                     "its optimizer states in fp32; drop it", field="optimizer_states",
                     value=job.optimizer_states, fix={"optimizer_states": "auto"})
    return {"type": kind, "params": params}


def _zero(job: Job) -> dict:
    zero: dict = {"stage": job.zero}
    # ZeRO-3's gathering, where the plan was made with other than DeepSpeed's defaults
    if job.stage3_max_live_parameters is not None:
        zero["stage3_max_live_parameters"] = job.stage3_max_live_parameters
    if job.stage3_prefetch_bucket_size is not None:
        zero["stage3_prefetch_bucket_size"] = job.stage3_prefetch_bucket_size
    if job.offload_optimizer:
        if job.zero == 0:
            raise refuse(ENGINE, f"{opt('offload_optimizer')} needs ZeRO: add {opt('zero')} 1, 2 "
                         "or 3", field="offload_optimizer", value=True, fix={"zero": 1})
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return zero


def export(job: Job, model: Model) -> str:
    """The DeepSpeed JSON config of ``job``."""
    train_only(job, ENGINE)
    check_expressed(job, ENGINE, tuple(f for f in TRAIN_FIELDS if f != "optimizer_states"),
                    _EXPRESSED)
    accum = accumulation(job, ENGINE)
    cfg: dict = {
        "train_batch_size": job.batch * accum * job.dp,
        "train_micro_batch_size_per_gpu": job.batch,
        "gradient_accumulation_steps": accum,
        **_precision(job),
        "optimizer": _optimizer(job),
        "zero_optimization": _zero(job),
    }
    if job.tp > 1:
        if job.zero == 3:
            raise refuse(ENGINE, f"{opt('tp')} {job.tp} with {opt('zero')} 3: DeepSpeed's AutoTP "
                         f"training runs with ZeRO stages 0-2; use {opt('zero')} 2 or "
                         f"{opt('export')} megatron", field="zero", value=3, fix={"zero": 2})
        cfg["tensor_parallel"] = {"autotp_size": job.tp}
    if job.max_grad_norm is not None:
        cfg["gradient_clipping"] = job.max_grad_norm  # unset: DeepSpeed's own default (1.0)
    return json.dumps(cfg, indent=2) + "\n"
