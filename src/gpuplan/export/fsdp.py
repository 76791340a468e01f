"""PyTorch FSDP2: a ``torchrun`` launch line and the ``fully_shard`` part of the training script.

FSDP2's API (``torch.distributed.fsdp``, torch >= 2.6): ``fully_shard(module, mesh=...,
reshard_after_forward=..., mp_policy=MixedPrecisionPolicy(...))``, applied to every transformer
block and then to the root. ZeRO-3 = ``reshard_after_forward=True``; ZeRO-2 = ``False`` (the
parameters stay gathered from forward to backward); ZeRO-1 and ZeRO-0 are not FSDP. The
``mixed-*`` recipes are FSDP2's own mixed precision: fp32 sharded parameters (the master copy),
16-bit compute copies, gradients reduced in fp32.
"""

from __future__ import annotations

from ..errors import opt
from ..job import Job
from ..models import Model
from ._common import (TRAIN_FIELDS, accumulation, check_expressed, num_machines, refuse,
                      train_only)

ENGINE = "fsdp"
_EXPRESSED = frozenset({"zero", "checkpointing", "fused_optimizer", "dp_shard"})
_TORCH_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "sgd-momentum": "SGD",
                     "adagrad": "Adagrad", "rmsprop": "RMSprop", "adafactor": "Adafactor"}


def _mp_policy(job: Job) -> tuple[str, list[str]]:
    """(the mp_policy argument, lines that go around the step) of the recipe."""
    p = job.precision
    if p in ("mixed-bf16", "mixed-fp16"):
        dt = "bfloat16" if p == "mixed-bf16" else "float16"
        extra = ["scaler = torch.amp.GradScaler('cuda')  # fp16: scale the loss"] \
            if dt == "float16" else []
        return (f"MixedPrecisionPolicy(param_dtype=torch.{dt}, reduce_dtype=torch.float32)",
                extra)
    if p in ("amp-bf16", "amp-fp16"):
        dt = "bfloat16" if p == "amp-bf16" else "float16"
        return "MixedPrecisionPolicy()", [f"# run forward under torch.autocast('cuda', "
                                          f"dtype=torch.{dt})"]
    if p == "bf16":
        return "MixedPrecisionPolicy()", ["model.to(torch.bfloat16)  # pure bf16, no fp32 copy"]
    if p != "fp32":  # a narrow recipe (gpuplan.fp8): an engine with FP8 linears writes it
        raise refuse(ENGINE, f"{opt('precision')} {p}: the FSDP2 snippet has no FP8 linear "
                     f"layers; export it with {opt('export')} torchtitan (torchao float8) or "
                     "megatron (Transformer Engine)", field="precision", value=p,
                     fix={"export": "torchtitan"})
    return "MixedPrecisionPolicy()", []


def _optimizer_line(job: Job) -> str:
    name = _TORCH_OPTIMIZERS.get(job.optimizer)
    if name is None or job.optimizer_states != "auto":
        field = "optimizer" if name is None else "optimizer_states"
        raise refuse(ENGINE, f"{opt(field)} {getattr(job, field)} is not a torch.optim setting; "
                     f"use one of {', '.join(_TORCH_OPTIMIZERS)} with {opt('optimizer_states')} "
                     "auto", field=field, value=getattr(job, field),
                     fix={"optimizer_states": "auto"} if name else {})
    kw = ["momentum=0.9"] if job.optimizer == "sgd-momentum" else []
    if job.fused_optimizer:
        if job.optimizer not in ("adam", "adamw", "sgd", "sgd-momentum", "adagrad"):
            raise refuse(ENGINE, f"{opt('fused_optimizer')} with {job.optimizer}: torch has no "
                         f"fused kernel for it; drop {opt('fused_optimizer')}",
                         field="fused_optimizer", value=True, fix={"fused_optimizer": False})
        kw.append("fused=True")
    else:
        kw.append("foreach=True")
    return f"optimizer = torch.optim.{name}(model.parameters(), {', '.join(kw)})"


def _mesh_line(job: Job) -> str:
    """The device mesh: one dimension of every data-parallel rank, or under hybrid sharding
    (``dp_shard``) FSDP2's 2-D mesh, replicas x shard group (fully_shard on a 2-D mesh is HSDP:
    torch/distributed/fsdp/_fully_shard/_fully_shard.py, "a 2D mesh ... hybrid sharded data
    parallel")."""
    if job.dp_shard is None or job.dp_shard == job.dp:
        return f"mesh = init_device_mesh('cuda', ({job.dp},), mesh_dim_names=('dp_shard',))"
    return (f"mesh = init_device_mesh('cuda', ({job.dp // job.dp_shard}, {job.dp_shard}), "
            "mesh_dim_names=('dp_replicate', 'dp_shard'))  # HSDP: replicate x shard")


def export(job: Job, model: Model) -> str:
    """A torchrun command and the FSDP2 lines of the training script for ``job``."""
    train_only(job, ENGINE)
    check_expressed(job, ENGINE, tuple(f for f in TRAIN_FIELDS if f != "optimizer_states"),
                    _EXPRESSED)
    if job.zero < 2:
        raise refuse(ENGINE, f"{opt('zero')} {job.zero} is not FSDP (FSDP2 shards gradients and "
                     f"parameters: {opt('zero')} 2 or 3; ZeRO-1 is {opt('export')} deepspeed)",
                     field="zero", value=job.zero, fix={"zero": 2})
    if job.checkpointing == "selective":
        raise refuse(ENGINE, f"{opt('checkpointing')} selective has no FSDP2 setting; use full",
                     field="checkpointing", value="selective", fix={"checkpointing": "full"})
    accum = accumulation(job, ENGINE)
    nodes = num_machines(job)
    per_node = job.gpus // nodes if job.gpus % nodes == 0 else job.gpus_per_node
    mp, step_lines = _mp_policy(job)
    optim_line = _optimizer_line(job)
    ck = ["model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': "
          "False})  # full checkpointing (transformers); else torch.utils.checkpoint per block"
          ] if job.checkpointing == "full" else []
    lines = [
        f"# gpuplan plan of {model.name}: {job.gpus} GPUs, ZeRO-{job.zero} as FSDP2, "
        f"micro-batch {job.batch} per GPU, {accum} accumulation step(s), global batch "
        f"{job.batch * accum * job.dp}",
        f"# torchrun --nnodes {nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
        "--rdzv-endpoint $MASTER_ADDR:29500 train.py",
        "import torch",
        "from torch.distributed.device_mesh import init_device_mesh",
        "from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard",
        "",
        _mesh_line(job),
        f"mp_policy = {mp}",
        *step_lines,
        *ck,
        "for block in transformer_blocks(model):  # e.g. model.model.layers",
        f"    fully_shard(block, mesh=mesh, mp_policy=mp_policy, "
        f"reshard_after_forward={job.zero == 3})",
        "fully_shard(model, mesh=mesh, mp_policy=mp_policy)",
        optim_line,
        f"# per step: {accum} micro-batch(es) of {job.batch}; on all but the last, "
        "model.set_requires_gradient_sync(False)",
    ]
    return "\n".join(lines) + "\n"
