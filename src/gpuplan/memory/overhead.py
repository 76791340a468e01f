"""Runtime overhead: memory a GPU process holds beyond its tensors, as an explicit, sourced line.

Never folded silently into other lines. Each item has a low / expected / high figure and the basis
of that figure; the planner uses the band named by ``level`` (default ``expected``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from .._record import record
from ..bounds import check_number
from ..errors import InputError, shown
from ..job import job_arg, model_arg
from ..units import MiB, parse_bytes

__all__ = ["OverheadItem", "Overhead", "OverheadLevel", "runtime_overhead", "LEVELS",
           "OVERRIDABLE", "check_level", "memory_args"]

OverheadLevel = Literal["low", "expected", "high"]
LEVELS = ("low", "expected", "high")


@record
class OverheadItem:
    name: str
    low: int
    expected: int
    high: int
    basis: str

    def at(self, level: OverheadLevel) -> int:
        return getattr(self, level)


@record
class Overhead:
    """The overhead items of one job and the level used."""

    items: tuple[OverheadItem, ...]
    level: OverheadLevel

    @property
    def bytes(self) -> int:
        return sum(i.at(self.level) for i in self.items)

    def band(self) -> tuple[int, int, int]:
        return (sum(i.low for i in self.items), sum(i.expected for i in self.items),
                sum(i.high for i in self.items))

    def to_dict(self) -> dict:
        low, exp, high = self.band()
        return {
            "level": self.level, "bytes": self.bytes,
            "low_bytes": low, "expected_bytes": exp, "high_bytes": high,
            "items": [{"name": i.name, "low_bytes": i.low, "expected_bytes": i.expected,
                       "high_bytes": i.high, "basis": i.basis} for i in self.items],
        }


#: CUDA context with lazy module loading (PyTorch's default since 1.13 with CUDA >= 11.7):
#: 287,047,680 bytes after one small tensor op, measured in pytorch/pytorch PR #86509 (and
#: 666,632,192 bytes with eager module loading, CUDA_MODULE_LOADING=DEFAULT then); "around
#: 400MB" on first use (ptrblck, pytorch/pytorch#109888). A training step loads many more kernels
#: than that one-op probe, so the expected figure sits between the two measurements.
_CONTEXT = OverheadItem(
    name="CUDA context",
    low=287_047_680, expected=450 * MiB, high=666_632_192 + 256 * MiB,
    basis="driver state + kernels loaded on use: 287,047,680 B after one op with lazy loading, "
          "666,632,192 B with eager loading (pytorch/pytorch PR #86509); ~400 MB "
          "(pytorch/pytorch#109888); high = eager loading + 256 MiB of further modules "
          "(assumption)",
)

#: cuBLAS workspace: PyTorch's default CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8" = 2 x 4 MiB +
#: 8 x 16 KiB = 8.125 MiB per handle and stream, 32 MiB on Hopper (pytorch/pytorch PR #89027,
#: CublasHandlePool.cpp parseChosenWorkspaceSize); cuBLASLt 1 MiB raised to the cuBLAS
#: recommendation, 32 MiB on Hopper (PR #120925; cuBLAS docs, cublasSetWorkspace). Both are
#: allocated through the caching allocator the first time a matmul runs on a stream.
_WORKSPACE = OverheadItem(
    name="cuBLAS/cuBLASLt workspaces",
    low=8 * MiB + 128 * 1024, expected=64 * MiB, high=128 * MiB,
    basis="cuBLAS :4096:2:16:8 = 8.125 MiB (32 MiB on Hopper) + cuBLASLt up to 32 MiB, per "
          "stream (pytorch/pytorch PRs #89027, #120925; cuBLAS docs: cublasSetWorkspace); "
          "high: a second stream (e.g. a communication-overlap stream) with its own",
)


def _nccl(gpus: int) -> OverheadItem:
    # NCCL_BUFFSIZE defaults to 4 MiB (4194304 B) per channel and peer connection (NCCL docs,
    # Environment Variables: NCCL_BUFFSIZE); a ring/tree communicator uses up to 32 channels
    # (NCCL_MAX_NCHANNELS), each with its send/receive buffers; NVLS (NVLink SHARP, Hopper)
    # adds multicast buffers. 16 channels x 2 peers x 4 MiB x 4 (send/recv, ring+tree) = 512 MiB.
    return OverheadItem(
        name="NCCL buffers",
        low=64 * MiB, expected=512 * MiB, high=2048 * MiB,
        basis=f"{gpus} GPUs: NCCL_BUFFSIZE 4 MiB per channel and peer connection (NCCL docs); "
              "expected 16 channels x 2 peers x send/recv x ring+tree = 512 MiB; low 4 channels; "
              "high 32 channels with NVLS buffers (assumption within those documented sizes)",
    )


def _ddp_buckets(grad_bytes: int) -> OverheadItem:
    # torch DDP copies gradients into flat bucket buffers unless gradient_as_bucket_view=True.
    return OverheadItem(
        name="DDP gradient buckets",
        low=0, expected=grad_bytes, high=grad_bytes,
        basis="torch DistributedDataParallel keeps flat bucket buffers the size of the gradients "
              "(gradient_as_bucket_view=False by default; True makes this 0)",
    )


def _zero_buckets(elem_bytes: int, stage: int) -> OverheadItem:
    # DeepSpeed defaults: reduce_bucket_size = allgather_bucket_size = 5e8 elements. Stage 3
    # allocates its gradient bucket at reduce_bucket_size too, once, with contiguous_gradients
    # (its default): deepspeed/runtime/zero/stage3.py, ``bucket.buffer =
    # torch.empty(self.reduce_bucket_size, ...)`` (0.19.8); its gathered parameters are a line
    # of their own (engines/zero3.py).
    n = 500_000_000
    size = n * elem_bytes
    return OverheadItem(
        name="ZeRO communication buckets",
        low=size // 4, expected=size, high=2 * size,
        basis=f"DeepSpeed defaults: reduce_bucket_size {n:.0e} elements x {elem_bytes} B "
              + ("(allgather bucket the same size)" if stage in (1, 2) else
                 "(stage 3's contiguous gradient bucket)") + "; configurable in ds_config",
    )


# Megatron's buffers. Megatron-Core keeps no gradient-communication buffer beyond the gradients:
# ``_ParamAndGradBuffer.__init__`` allocates one contiguous ``grad_data``
# (``torch.zeros(self.numel, dtype=self.grad_dtype)``) that each ``param.main_grad`` is a view of,
# and under the distributed optimizer one ``param_data`` in the param dtype that every
# ``param.data`` is re-pointed into (``param.data = new_param_data``; the old storage deleted) --
# the 16-bit weights themselves, not a gather buffer beside them (megatron/core/distributed/
# param_and_grad_buffer.py lines 496-534 at NVIDIA/Megatron-LM core_r0.9.0, 1afee592, NeMo
# 24.07's; lines 795-810 at b0cc2706, the Megatron-Bridge v0.3.0 pin, and lines 1184-1195 at
# d98e8a64, where MXFP8 parameters with the distributed optimizer share one buffer with the
# gradients, ``self.param_data = self.shared_buffer``, lines 779-793 @b0cc2706). The buckets are
# views into it: the grad reduce-scatter writes the rank's shard in place (``local_data_view =
# shard_buffer(bucket.grad_data, ...)[rank]; _reduce_scatter_base(local_data_view, bucket.
# grad_data)``, lines 256-264 @1afee592), the DDP all-reduce (no distributed optimizer) runs on
# ``bucket.grad_data`` itself, and the parameter all-gather fills ``bucket.param_data`` from its
# own shard (lines 173-181). The one allocation beyond is the distributed optimizer's fp32 copy of
# the gradient shard for the step (distrib_optimizer.py line 1691 @1afee592,
# ``shard_main_param.grad = shard_model_grad.float()``), already a step temporary
# (:func:`gpuplan.memory.optimizer.optimizer_step_temporaries`). Apex's DistributedFusedAdam
# (NeMo's ``distributed_fused_adam``) likewise keeps its contiguous grad buffer as the gradients
# (``_init_grad_buffer``; apex/contrib/optimizers/distributed_fused_adam.py @f8e60c47); its
# reduce-scatter outputs (``sync_grads_shard``, lines 1853-1860) are allocated from each bucket's
# grad sync, after the activations the bucket's layers kept are freed, and held to the next step's
# ``zero_grad`` (line 1498): not at the step's peak.


def _fragmentation(dynamic: int) -> OverheadItem:
    return OverheadItem(
        name="allocator fragmentation",
        low=0, expected=dynamic * 5 // 100, high=dynamic * 15 // 100,
        basis="PyTorch caching allocator: tensors freed and re-allocated every step (activations, "
              "gradients, temporaries, a growing KV cache) leave unused tails in its 2 MiB / "
              "20 MiB+ segments; 5% of those bytes expected, 15% high (assumption; "
              "expandable_segments=True lowers it). Long-lived states allocated once are not "
              "counted",
    )


#: Items a user may set to an exact figure (``--cuda-context 0.5GB``, ``--fragmentation 0.1``).
OVERRIDABLE = ("cuda_context", "workspaces", "nccl", "fragmentation")


def _fixed(item: OverheadItem, value: int, how: str) -> OverheadItem:
    return OverheadItem(name=item.name, low=value, expected=value, high=value,
                        basis=f"set by the user ({how}); default basis: {item.basis}")


def check_level(level: object) -> str:
    """``level`` if it is one of :data:`LEVELS`, else an InputError naming ``overhead_level``."""
    if not isinstance(level, str) or level not in LEVELS:
        raise InputError(f"overhead level {shown(level)}: expected one of {', '.join(LEVELS)}",
                         field="overhead_level", value=level)
    return level


def memory_args(model: object, job: object, level: object, overrides: object) -> None:
    """The arguments every memory function takes, checked before any work (issue 32): a
    :class:`Model` (not its name), a Job, an overhead level and overrides."""
    model_arg(model)
    job_arg(job)
    check_level(level)
    check_overrides(overrides)


def check_overrides(overrides: object) -> dict:
    """``overrides`` checked: a mapping of :data:`OVERRIDABLE` names to bytes (a whole number or
    a size such as ``"0.5GB"``, 0 .. 2^60) or, for ``fragmentation``, a fraction in [0, 1)."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise InputError(f"overhead overrides {shown(overrides)}: expected a mapping such as "
                         "{'cuda_context': 500_000_000}", field="overhead_overrides",
                         value=overrides)
    out: dict = {}
    for k, v in overrides.items():
        if k not in OVERRIDABLE:
            raise InputError(f"overhead item {shown(k)}: expected one of "
                             f"{', '.join(OVERRIDABLE)}", field="overhead_overrides", value=k)
        if k == "fragmentation":
            out[k] = check_number(v, "fraction", what="fragmentation")
        else:
            out[k] = parse_bytes(v, what=f"overhead {k}")
    return out


def runtime_overhead(*, gpus: int, zero: int, grad_bytes: int, grad_elem_bytes: int,
                     dynamic: int, level: OverheadLevel = "expected",
                     training: bool = True, overrides=None,
                     data_parallel: int | None = None,
                     sharding: str = "deepspeed", graph_buffers: int = 0,
                     engine: str = "auto") -> Overhead:
    """The overhead of one GPU process of a job; ``dynamic`` is the bytes of tensors freed and
    re-allocated each step (the fragmentation basis). ``overrides`` maps names in
    :data:`OVERRIDABLE` to bytes (``fragmentation``: a fraction of the dynamic bytes).
    ``data_parallel``: ranks the gradients are reduced over (default ``gpus``); gradient buckets
    exist only when it is > 1 (a pure TP/PP job reduces no gradients). ``sharding``: the ZeRO
    engine; DeepSpeed's buckets are its own (FSDP2's all-gather and reduce-scatter buffers are
    placed along the step by the timeline, :mod:`.fsdp`). ``graph_buffers``: the static
    buffers of Megatron-Core's whole-layer CUDA graphs (:func:`graph_buffer_bytes`).
    ``engine`` ``megatron``: Megatron-Core's own gradient buffers, which are the gradients
    (the note on Megatron's buffers above :func:`_fragmentation`): neither torch DDP's bucket
    copies nor DeepSpeed's ZeRO buckets."""
    check_level(level)
    over = check_overrides(overrides)
    ctx = _CONTEXT if "cuda_context" not in over else _fixed(
        _CONTEXT, int(over["cuda_context"]), f"{int(over['cuda_context']):,} B")
    ws = _WORKSPACE if "workspaces" not in over else _fixed(
        _WORKSPACE, int(over["workspaces"]), f"{int(over['workspaces']):,} B")
    items = [ctx, ws]
    if gpus > 1:
        nccl = _nccl(gpus)
        if "nccl" in over:
            nccl = _fixed(nccl, int(over["nccl"]), f"{int(over['nccl']):,} B")
        items.append(nccl)
        reduced = (data_parallel or gpus) > 1 and engine != "megatron"
        if training and reduced and zero == 0:
            items.append(_ddp_buckets(grad_bytes))
        elif training and reduced and sharding == "deepspeed":
            items.append(_zero_buckets(grad_elem_bytes, zero))
    if graph_buffers:
        items.append(OverheadItem(
            name="CUDA graph static buffers", low=graph_buffers, expected=graph_buffers,
            high=graph_buffers, basis="Megatron-Core's whole-layer graphs: a chunk's input copy "
            "and the backward's two alternating gradient buffers, per graphed micro-batch"))
    frag = _fragmentation(dynamic)
    if "fragmentation" in over:
        f = over["fragmentation"]
        frag = _fixed(frag, int(dynamic * f), f"{f:g} of the {dynamic:,} B freed and "
                                               "re-allocated each step")
    items.append(frag)
    return Overhead(items=tuple(items), level=level)


def graph_buffer_bytes(tokens: int, hidden: int, runners: int, act_bytes: int = 2) -> int:
    """The memory Megatron-Core's whole-layer CUDA graphs hold beyond what the eager step holds
    (transformer/cuda_graphs.py at NVIDIA/Megatron-LM@core_v0.15.0rc6): the layers' forward
    graphs alternate one hidden-state input / output buffer, each layer's output the next one's
    input (lines 215-227, share_cudagraph_io_buffers) -- outputs the eager layer keeps anyway as
    the next layer's saved input -- so the extra is a model chunk's first input, cloned into a
    static buffer (create_fwd_graph's zero_out_tensors, line 649), and the backward graphs' two
    alternating gradient buffers (static_grad_outputs and the input gradient): three
    ``tokens x hidden`` tensors of ``act_bytes`` per runner. ``runners``: the graphed (chunk,
    micro-batch) pairs alive at once -- one without a pipeline, where the graphs are reused
    (lines 1066-1070), else the stage's in-flight model-chunk micro-batches, each with its own
    forward pool (lines 1089-1095, 1146). The graphs' pool itself holds the captured
    activations and temporaries the eager step holds (the graphs are captured in execution
    order into shared pools, lines 189-230): not counted again."""
    return 3 * max(1, runners) * tokens * hidden * act_bytes
