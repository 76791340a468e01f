"""The optimizer: the bytes of one state element, the label of its line, and what its step
allocates on top of the states (foreach temporaries, the fp32 gradient copy of a master step)."""

from __future__ import annotations

from ..formats import OptimizerSpec, TrainingRecipe
from ..job import Job
from ..models import Model

__all__ = ["optimizer_label", "optimizer_step_temporaries"]


def optimizer_label(opt: OptimizerSpec, state_b: int) -> str:
    """The label of the optimizer-states line."""
    if opt.kind == "8bit":
        return f"optimizer states ({opt.name}, 8-bit + block scales)"
    if opt.kind == "factored":
        return f"optimizer states ({opt.name}, factored, {state_b * 8}-bit)"
    if opt.states == 0:
        return f"optimizer states ({opt.name}: none)"
    return f"optimizer states ({opt.name}: {opt.states} x {state_b * 8}-bit)"


def optimizer_step_temporaries(job: Job, recipe: TrainingRecipe, opt: OptimizerSpec,
                               trainable: int, model: Model, *, shard: int = 1) -> tuple[int, str]:
    """Bytes the optimizer step allocates on top of the states, and what they are.

    torch.optim on CUDA defaults to the ``foreach`` implementation, which works on whole lists of
    tensors: Adam/AdamW materialize ``exp_avg_sq.sqrt()`` for every parameter at once (one more
    state-sized buffer; torch/optim/adam.py ``_multi_tensor_adam``), Adagrad and RMSprop likewise
    (``_foreach_sqrt`` of their running sums). ``fused=True`` and bitsandbytes' 8-bit kernels
    update in place. Mixed-precision recipes step an fp32 master copy, which needs the gradients in
    fp32: a 4-byte copy per trainable parameter exists during the step (DeepSpeed/Megatron style).
    A 16-bit master (``master_weights`` bf16: Apex's DistributedFusedAdam, whose step reads the
    gradients in their 16-bit sync dtype) steps on the 16-bit gradients: no copy. ``recipe`` is
    the one the job runs (:attr:`gpuplan.job.Job.train_recipe`: its state, master and gradient
    dtypes).
    """
    n = -(-trainable // shard)
    parts = []
    total = 0
    state_b, master_b = recipe.state_bytes, recipe.master_bytes
    if master_b > recipe.grad_bytes and not job.offload_optimizer:
        total += master_b * n
        parts.append("fp32 gradient copy for the master step")
    if job.offload_optimizer:
        return total, "; ".join(parts) or "optimizer step runs on the host"
    name = opt.name
    if name in ("adam", "adamw", "adagrad", "rmsprop") and not job.fused_optimizer:
        total += state_b * n
        parts.append(f"foreach {name}: a sqrt of the second moment for every parameter")
    elif name == "lion":
        # lion-pytorch's update: exp_avg.clone().mul_(beta1).add(grad, ...).sign_() per tensor
        biggest = max((t.numel for t in model.tensors), default=0) if model.tensors else 0
        total += 2 * state_b * biggest
        parts.append("lion: an update buffer of the largest tensor")
    elif name == "adafactor" and not job.fused_optimizer:
        # torch.optim.Adafactor foreach: the update (grad^2 / row-col factors) per parameter
        total += state_b * n
        parts.append("foreach adafactor: a full-size update buffer")
    return total, "; ".join(parts)

