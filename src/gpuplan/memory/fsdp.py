"""FSDP2 (PyTorch's ``fully_shard``) as the accounting reads it: ``--sharding fsdp2``.

FSDP2 is wrapped per transformer block and on the root (what torchtitan and ``gpuplan trace --gpus
N`` do); each wrapped module is one unit whose parameters are all-gathered together. What one rank
holds, from ``torch/distributed/fsdp/_fully_shard`` (torch 2.13):

* **At rest** the parameters, their gradients and the optimizer states are sharded ``1 / N`` in the
  parameters' original dtype. Under ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``
  the fp32 shard *is* the master copy (no 16-bit shard beside it, unlike DeepSpeed), gradients are
  reduced in fp32 and stay fp32 (``foreach_reduce``: ``_to_dtype_if_needed(reduce_output,
  orig_dtype)``).
* **The root unit** (embeddings, final norm, head: everything outside the blocks) is unsharded at
  the root's pre-forward and never resharded after forward (``FSDPState._lazy_init`` sets the
  root's ``post_forward_mesh_info = None``), so it stays gathered from the start of forward to the
  root's post-backward at the very end of backward; its unsharded gradients (the head's, then the
  embedding's) live from where backward makes them to that final reduce-scatter.
* **A block** is all-gathered into a flat buffer (``foreach_all_gather``) and copied out into its
  unsharded parameters (``wait_for_unshard``). In forward the flat buffer is kept until the next
  block's copy-out ("implicit prefetching", ``comm_ctx.all_gather_state``): a block runs with two
  units' bytes, and the last block's buffer is still held through the head and the loss (freed in
  the root's post-forward). With ``reshard_after_forward=True`` (ZeRO-3) a block is resharded after
  its forward; with ``False`` (ZeRO-2) it stays gathered until its post-backward.
* **In backward** each block's pre-backward prefetches the previous block (``_backward_prefetch``):
  its flat buffer is alive while the current block runs (the root's pre-backward prefetches the
  last block, so the buffer is there from the loss's gradient on). A block's post-backward
  reshards it, then copies its unsharded gradients into a reduce-scatter input in the reduce dtype
  (``foreach_reduce``); that input is kept until the next block's post-backward
  (``reduce_scatter_states``, ``reduce_scatter_max_input_buffers = 1``).
"""

from __future__ import annotations

from fractions import Fraction

from .._record import record
from ..formats import TrainingRecipe
from ..models import Model

__all__ = ["FsdpUnits", "fsdp_units", "unit_params", "last_params", "shard_elements"]


@record(kw_only=False)
class FsdpUnits:
    """The sizes the FSDP2 schedule needs, in bytes of one rank."""

    root: int
    """The root unit's gathered (unsharded) parameters, in the compute dtype."""
    unit: int
    """The largest block's gathered parameters (= its flat all-gather buffer), compute dtype."""
    layers: int
    """Blocks (FSDP units besides the root)."""
    reduce: Fraction
    """Bytes of the reduce-scatter input per byte of unsharded gradient (reduce / compute dtype)."""
    shard: Fraction
    """Bytes of a sharded gradient per byte of unsharded gradient (original / compute dtype / N)."""
    reshard_after_forward: bool
    """ZeRO-3 (True) or ZeRO-2 (False)."""
    elem: int
    """Bytes of an element of the sharded parameters and gradients (the original dtype)."""
    root_last: int = 0
    """The root unit's last parameter's gradient, compute dtype: ``foreach_reduce``'s loop
    variable still holds it when the reduce-scatter output is allocated (the other unsharded
    gradients were freed by ``unsharded_grads.clear()``) -- an untied ``lm_head``."""
    unit_last: int = 0
    """The same for a block (usually a norm or a bias: small)."""


def last_params(model: Model) -> tuple[int, int]:
    """(parameters of the root unit's last tensor, of a block's last tensor), in registration
    order (the catalog lists tensors in the checkpoint's order, which is the modules')."""
    arch = model.architecture
    root_last = unit_last = 0
    for t in model.tensors:
        if t.layer is None and "{i}" not in t.name:
            root_last = t.total // max(1, t.count)
        elif arch is not None and arch.num_layers:
            unit_last = t.total // max(1, t.count)
    return root_last, unit_last


def unit_params(model: Model) -> tuple[int, int]:
    """(parameters of the root unit, parameters of the largest block) when every block is one
    FSDP unit: a tensor named per layer (``{i}``, or with its layer index) belongs to the blocks,
    every other tensor (embeddings, final norm, head, pooler) to the root."""
    arch = model.architecture
    if arch is None or not model.tensors or not arch.num_layers:
        # Unknown layout: 1/32 of the model per block (a 32-layer model) and nothing outside.
        per = -(-model.params.total // 32)
        return 0, per
    layers: dict[int, int] = {}
    shared = 0
    root = 0
    for t in model.tensors:
        if t.layer is not None:
            layers[t.layer] = layers.get(t.layer, 0) + t.total
        elif "{i}" in t.name:
            shared += t.total
        else:
            root += t.total
    per_layer = max((shared // arch.num_layers + v for v in layers.values()),
                    default=shared // arch.num_layers)
    return root, per_layer


def shard_elements(model: Model, gpus: int) -> int:
    """Elements of one rank's shards: FSDP2 shards every parameter on dim 0, padded to a multiple
    of the ranks (``_get_dim0_padded_size``; ``FSDPParam._init_sharded_param`` chunks the padded
    tensor), so a tensor of ``d0`` rows leaves ``ceil(d0 / N)`` rows on each rank -- a (1, 197, 768)
    position embedding stays whole on every rank."""
    if not model.tensors:
        return -(-model.params.total // gpus)
    total = 0
    for t in model.tensors:
        if not t.shape:
            total += t.count
            continue
        rest = t.total // (t.count * t.shape[0]) if t.shape[0] else 0
        total += t.count * -(-t.shape[0] // gpus) * rest
    return total


def fsdp_units(model: Model, recipe: TrainingRecipe, *, gpus: int, zero: int) -> FsdpUnits:
    """FSDP2's unit sizes for ``model`` under ``recipe`` over ``gpus`` ranks. The compute dtype is
    the recipe's weight dtype (``param_dtype``); the original dtype fp32 when the recipe keeps a
    master copy (the sharded fp32 parameters are that copy), else the weight dtype; gradients are
    reduced in the original dtype (``reduce_dtype=fp32`` under mixed precision, as torchtitan
    and ``gpuplan trace --gpus`` run it)."""
    root, unit = unit_params(model)
    e = recipe.weight_bytes
    orig = 4 if recipe.master_bytes else e
    arch = model.architecture
    root_last, unit_last = last_params(model)
    return FsdpUnits(root=root * e, unit=unit * e,
                     layers=arch.num_layers if arch is not None and arch.num_layers else 32,
                     reduce=Fraction(orig, e), shard=Fraction(orig, e * gpus),
                     reshard_after_forward=zero >= 3, elem=orig, root_last=root_last * e,
                     unit_last=unit_last * e)
