"""Runtime overhead: memory a GPU process holds beyond its tensors, as an explicit, sourced line.

Never folded silently into other lines. Each item has a low / expected / high figure and the basis
of that figure; the planner uses the band named by ``level`` (default ``expected``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import InputError
from .units import MiB

__all__ = ["OverheadItem", "Overhead", "OverheadLevel", "runtime_overhead", "LEVELS"]

OverheadLevel = Literal["low", "expected", "high"]
LEVELS = ("low", "expected", "high")


@dataclass(frozen=True, kw_only=True)
class OverheadItem:
    name: str
    low: int
    expected: int
    high: int
    basis: str

    def at(self, level: OverheadLevel) -> int:
        return getattr(self, level)


@dataclass(frozen=True, kw_only=True)
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


#: CUDA context with lazy module loading (default since PyTorch 1.13 / CUDA 11.7):
#: 287,047,680 bytes measured in pytorch/pytorch#86509 (666,632,192 with eager loading);
#: "around 400MB" (pytorch/pytorch#109888). A training step loads more kernels than that probe.
_CONTEXT = OverheadItem(
    name="CUDA context",
    low=287_047_680, expected=450 * MiB, high=666_632_192 + 256 * MiB,
    basis="driver + loaded kernels with lazy module loading: 287 MB measured in "
          "pytorch/pytorch#86509 (667 MB with eager loading); ~400 MB (pytorch/pytorch#109888)",
)

#: cuBLAS default workspace ":4096:2:16:8" (8.1 MiB), 32 MiB on Hopper; cuBLASLt up to 32 MiB on
#: Hopper (pytorch/pytorch#89027, #120925; cuBLAS docs, cublasSetWorkspace).
_WORKSPACE = OverheadItem(
    name="cuBLAS/cuBLASLt workspaces",
    low=9 * MiB, expected=64 * MiB, high=128 * MiB,
    basis="cuBLAS 8 MiB (32 MiB on Hopper) + cuBLASLt 1-32 MiB per stream "
          "(pytorch/pytorch#89027, #120925; cuBLAS docs: cublasSetWorkspace)",
)


def _nccl(gpus: int) -> OverheadItem:
    # NCCL_BUFFSIZE defaults to 4 MiB per channel and connection; rings/trees use up to 32
    # channels with send+recv buffers each; NVLS on Hopper adds more.
    return OverheadItem(
        name="NCCL buffers",
        low=64 * MiB, expected=512 * MiB, high=2048 * MiB,
        basis=f"{gpus} GPUs: NCCL_BUFFSIZE 4 MiB per channel and peer connection, up to 32 "
              "channels (NCCL docs, env NCCL_BUFFSIZE); NVLS/NVLink SHARP buffers on Hopper "
              "raise it",
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
    # DeepSpeed defaults: reduce_bucket_size = allgather_bucket_size = 5e8 elements (stages 1-2);
    # stage 3: stage3_prefetch_bucket_size 5e7 (the gathered units are a separate line).
    n = 500_000_000 if stage in (1, 2) else 50_000_000
    size = n * elem_bytes
    return OverheadItem(
        name="ZeRO communication buckets",
        low=size // 4, expected=size, high=2 * size,
        basis=f"DeepSpeed defaults: reduce_bucket_size {n:.0e} elements x {elem_bytes} B "
              "(allgather bucket the same size for stages 1-2); configurable in ds_config",
    )


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


def runtime_overhead(*, gpus: int, zero: int, grad_bytes: int, grad_elem_bytes: int,
                     dynamic: int, level: OverheadLevel = "expected",
                     training: bool = True) -> Overhead:
    """The overhead of one GPU process of a job; ``dynamic`` is the bytes of tensors freed and
    re-allocated each step (the fragmentation basis)."""
    if level not in LEVELS:
        raise InputError(f"overhead level {level!r}: expected one of {', '.join(LEVELS)}")
    items = [_CONTEXT, _WORKSPACE]
    if gpus > 1:
        items.append(_nccl(gpus))
        if training and zero == 0:
            items.append(_ddp_buckets(grad_bytes))
        elif training:
            items.append(_zero_buckets(grad_elem_bytes, zero))
    items.append(_fragmentation(dynamic))
    return Overhead(items=tuple(items), level=level)
