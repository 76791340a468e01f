"""accelerate: the YAML ``accelerate launch --config_file`` reads (``accelerate config``'s file).

Top-level keys are accelerate's ``ClusterConfig`` fields; ``fsdp_config`` / ``deepspeed_config``
/ ``parallelism_config`` keys are its launch options without the dashes
(``accelerate/commands/launch.py``). ZeRO-3 is FSDP2 (``fsdp_version: 2``); ZeRO-2 is FSDP2
without resharding after forward; ZeRO-1 and optimizer offload go through DeepSpeed. The
micro-batch and accumulation are the training script's (DataLoader, ``Accelerator``) and are
written as comments.

Past one node (``num_machines`` > 1) every node runs ``accelerate launch`` with the same file but
its own ``machine_rank``, and all of them meet at ``main_process_ip:main_process_port``, the
address of the rank-0 node (accelerate's ``ClusterConfig`` keys; ``rdzv_backend: static``, torch's
static rendezvous, needs both). Without them the nodes never find each other and the launch
hangs, so the file carries them: ``main_process_ip: "MAIN_NODE_IP"`` (a placeholder the user
replaces with that address), ``main_process_port: 29500`` (torch.distributed's default master
port; any port free on the main node) and ``machine_rank: 0``, each with a comment saying how to
fill it; ``accelerate launch --machine_rank R --main_process_ip IP`` overrides them per node.
"""

from __future__ import annotations

from ..errors import opt
from ..job import Job
from ..models import Model
from ._common import (TRAIN_FIELDS, accumulation, check_expressed, num_machines, refuse,
                      train_only, write_yaml)

ENGINE = "accelerate"
_EXPRESSED = frozenset({"zero", "offload_optimizer", "checkpointing", "tp", "cp", "dp_shard"})
_MIXED = {"mixed-bf16": "bf16", "amp-bf16": "bf16", "mixed-fp16": "fp16", "amp-fp16": "fp16",
          "fp32": "no"}


def _backend(job: Job) -> str:
    if job.offload_optimizer and job.zero == 0:
        raise refuse(ENGINE, f"{opt('offload_optimizer')} needs ZeRO: add {opt('zero')} 1, 2 "
                     "or 3", field="offload_optimizer", value=True, fix={"zero": 1})
    if job.offload_optimizer or job.zero == 1:
        if job.tp * job.cp > 1:
            raise refuse(ENGINE, f"{opt('tp')}/{opt('cp')} with DeepSpeed ({opt('zero')} 1 or "
                         f"{opt('offload_optimizer')}): accelerate's parallelism config runs on "
                         f"FSDP2; use {opt('zero')} 2 or 3", field="zero", value=job.zero,
                         fix={"zero": 2})
        return "DEEPSPEED"
    if job.zero >= 2 or job.tp * job.cp > 1:
        return "FSDP"
    return "MULTI_GPU" if job.gpus > 1 else "NO"


def _fsdp(job: Job) -> dict:
    if job.zero == 0:
        raise refuse(ENGINE, f"{opt('tp')}/{opt('cp')} without sharded data parallel: "
                     f"accelerate runs them on FSDP2; add {opt('zero')} 3", field="zero",
                     value=job.zero, fix={"zero": 3})
    return {"fsdp_version": 2, "fsdp_reshard_after_forward": job.zero == 3,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_offload_params": False,
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": job.checkpointing == "full"}


def _deepspeed(job: Job, accum: int) -> dict:
    return {"zero_stage": job.zero,
            "offload_optimizer_device": "cpu" if job.offload_optimizer else "none",
            "offload_param_device": "none", "gradient_accumulation_steps": accum,
            "zero3_init_flag": job.zero == 3}


def _parallelism(job: Job) -> dict:
    shard = job.dp if job.dp_shard is None else job.dp_shard  # HSDP: replicas of the shards
    return {"parallelism_config_dp_replicate_size": job.dp // shard,
            "parallelism_config_dp_shard_size": shard,
            "parallelism_config_tp_size": job.tp, "parallelism_config_cp_size": job.cp}


#: Placeholder of the main node's address (replaced by the user; a string, so the file loads).
MAIN_NODE_IP = "MAIN_NODE_IP"
#: torch.distributed's default master port (``MASTER_PORT`` of torchrun's docs: 29500).
MAIN_PROCESS_PORT = 29500


def _nodes(machines: int) -> dict:
    """The keys every node's copy needs to find the others (``num_machines`` > 1)."""
    others = "1 on the other" if machines == 2 else f"1 to {machines - 1} on the others"
    return {
        f"# {machines} nodes: every node runs `accelerate launch --config_file THIS_FILE ...`; "
        "set main_process_ip to the address of the machine_rank 0 node that the other nodes "
        "reach": None,
        "main_process_ip": MAIN_NODE_IP,
        "# main_process_port: a port free on the main node, the same on every node": None,
        "main_process_port": MAIN_PROCESS_PORT,
        f"# machine_rank: 0 on the main node, {others} (edit each node's copy, or pass "
        "`accelerate launch --machine_rank R` on each node)": None,
        "machine_rank": 0,
    }


def export(job: Job, model: Model) -> str:
    """The accelerate config YAML of ``job``."""
    train_only(job, ENGINE)
    check_expressed(job, ENGINE, TRAIN_FIELDS, _EXPRESSED)
    if job.precision not in _MIXED:
        raise refuse(ENGINE, f"{opt('precision')} {job.precision}: accelerate's mixed_precision "
                     "is autocast over fp32 weights (amp-*, mixed-*) or no; a bf16 model is your "
                     "script's dtype: use mixed-bf16", field="precision", value=job.precision,
                     fix={"precision": "mixed-bf16"})
    accum = accumulation(job, ENGINE)
    backend = _backend(job)
    if job.checkpointing == "selective" or (job.checkpointing == "full" and backend != "FSDP"):
        raise refuse(ENGINE, f"{opt('checkpointing')} {job.checkpointing} has no accelerate "
                     "setting with this layout (fsdp_activation_checkpointing is full, under "
                     f"FSDP: {opt('zero')} 2 or 3)", field="checkpointing",
                     value=job.checkpointing)
    cfg: dict = {
        f"# gpuplan plan of {model.name}: micro-batch {job.batch} per GPU (your DataLoader's "
        f"batch_size), {accum} accumulation step(s) (Accelerator(gradient_accumulation_steps="
        f"{accum})), global batch {job.batch * accum * job.dp}": None,
        "compute_environment": "LOCAL_MACHINE", "distributed_type": backend,
        "mixed_precision": _MIXED[job.precision], "num_machines": num_machines(job),
        "num_processes": job.gpus, "machine_rank": 0, "main_training_function": "main",
        "rdzv_backend": "static", "same_network": True, "use_cpu": False,
    }
    if cfg["num_machines"] > 1:
        del cfg["machine_rank"]  # written again below its comment
        cfg.update(_nodes(cfg["num_machines"]))
    if backend == "FSDP":
        cfg["fsdp_config"] = _fsdp(job)
        if job.tp * job.cp > 1 or (job.dp_shard is not None and job.dp_shard < job.dp):
            cfg["parallelism_config"] = _parallelism(job)  # HSDP: its dp_replicate_size
    elif backend == "DEEPSPEED":
        cfg["deepspeed_config"] = _deepspeed(job, accum)
    return write_yaml(cfg)
