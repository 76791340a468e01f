"""One MoE layer's expert-parallel exchange on one rank: the all-to-all buffers of dispatch and
combine, and the expert capacity (token dropping and padding).

Read from the engines' code (the oracle here: transformers runs MoE on one GPU, so its trace
cannot check EP):

* **Megatron-Core**, ``MoEAlltoAllTokenDispatcher`` (megatron/core/transformer/moe/
  token_dispatcher.py @d98e8a64, NVIDIA/Megatron-LM): ``dispatch_preprocess`` permutes the
  rank's tokens into ``[T x top-k, h]`` rows by expert (``moe_utils.permute``:
  ``tokens.index_select(0, sorted_indices)``, whose backward keeps only the int64 indices);
  ``token_dispatch`` sends them with ``all_to_all`` (``_AllToAll`` in tensor_parallel/
  mappings.py keeps only the group and the split sizes) into a received buffer of the rows of
  this rank's experts; with several local experts ``sort_chunks_by_idxs`` copies them into
  expert order (``torch.cat`` of splits: no saved tensor) and the expert MLP's first GEMM saves
  that copy -- the experts' saved input, which the single-GPU graph already has (its gathered
  rows). On the way back the expert output is unsorted, sent back by a second ``all_to_all``
  into a ``[T x top-k, h]`` buffer and ``unpermute`` scatter-adds it into ``[T, h]``
  (``scatter_add_``: only the indices saved). So dispatch and combine keep **no hidden-sized
  tensor for backward** beyond the experts' own; what they add is transient: each all-to-all has
  its send and receive buffers alive at once, ``2 x rows x h`` elements.
* **torchtitan** (torchtitan/models/common/token_dispatcher.py @b5bcd76c, pytorch/torchtitan):
  the same shape -- ``all_to_all_single`` of the routed rows, then ``routed_input[permuted_
  indices, :]`` into expert-major order (index backward: the indices only), and in ``combine``
  the unpermute (``new_empty`` + indexed assignment) before the return all-to-all.

Rows: with uniform, balanced routing every rank receives as many (token, expert) rows as it
sends, ``T x top-k`` (dropless). No load-imbalance model with a published source is used: the
figures are the balanced ones (the expected max over ranks is larger, not modelled).

Capacity factor (Megatron's ``--moe-expert-capacity-factor`` with
``--moe-pad-expert-input-to-capacity``): each expert takes ``capacity = ceil(T x top-k / E x
cf)`` rows of the rank's ``T`` tokens (``moe_utils.get_capacity(num_tokens=T * topk,
num_experts=E, capacity_factor=cf)``, ``min_capacity`` None), the rest dropped (drop policy
``probs``: the experts keep their highest-probability tokens) and the short experts padded, so
every rank sends and receives ``E x capacity`` rows and the experts' GEMMs run that many.
"""

from __future__ import annotations

import math

from .._record import record

__all__ = ["EpExchange", "expert_capacity", "ep_exchange", "dropped_fraction_balanced",
           "dropped_fraction_uniform"]


def expert_capacity(tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """Megatron-Core's ``get_capacity(num_tokens=tokens * top_k, num_experts, capacity_factor)``:
    ``ceil(tokens x top_k / experts x capacity_factor)`` rows per expert."""
    return math.ceil((tokens * top_k / experts) * capacity_factor)


def dropped_fraction_balanced(tokens: int, experts: int, top_k: int,
                              capacity_factor: float) -> float:
    """Share of the ``tokens x top_k`` assignments dropped when routing is perfectly balanced
    (each expert asked for ``tokens x top_k / experts`` rows): ``max(0, 1 - capacity / demand)``.
    """
    demand = tokens * top_k / experts
    cap = expert_capacity(tokens, experts, top_k, capacity_factor)
    return max(0.0, 1.0 - cap / demand) if demand else 0.0


def dropped_fraction_uniform(tokens: int, experts: int, top_k: int,
                             capacity_factor: float) -> float:
    """Expected share of the assignments dropped when each token picks ``top_k`` distinct
    experts uniformly at random: an expert's demand is Binomial(``tokens``, ``top_k /
    experts``) and it drops ``E[(X - capacity)+]`` of it (summed exactly over the tail)."""
    T, p = tokens, top_k / experts
    cap = expert_capacity(tokens, experts, top_k, capacity_factor)
    if cap >= T or p <= 0:
        return 0.0
    if p >= 1:
        return (T - cap) / T
    mean, sd = T * p, math.sqrt(T * p * (1 - p))
    if cap < mean - 30 * sd:  # the lower tail below the capacity is nil: E[X] - capacity
        return (mean - cap) / mean
    x = cap + 1
    log_pmf = (math.lgamma(T + 1) - math.lgamma(x + 1) - math.lgamma(T - x + 1)
               + x * math.log(p) + (T - x) * math.log1p(-p))
    pmf, excess = math.exp(log_pmf), 0.0
    ratio = p / (1 - p)
    while x <= T:
        excess += (x - cap) * pmf
        if x > T * p and (x - cap) * pmf < 1e-18 * max(excess, 1e-300):
            break
        pmf *= (T - x) / (x + 1) * ratio
        x += 1
    return excess / (T * p)


@record(kw_only=False)
class EpExchange:
    """One MoE layer's exchange on one rank (rows of ``hidden`` elements, bytes at ``dtype``)."""

    rows: int
    """(token, expert) rows the rank sends in dispatch -- and, balanced, receives; the expert
    GEMMs run as many. Dropless: ``T x top-k``; with a capacity factor: ``E x capacity``."""
    capacity: int | None
    """Rows per expert under a capacity factor (None: dropless)."""
    hidden: int
    dtype: int
    ep: int

    @property
    def buffer_bytes(self) -> int:
        """One all-to-all buffer (the send or the receive one), bytes."""
        return self.rows * self.hidden * self.dtype

    @property
    def transient_bytes(self) -> int:
        """An all-to-all's peak: its send and receive buffers alive at once."""
        return 2 * self.buffer_bytes if self.ep > 1 else 0

    @property
    def saved_bytes(self) -> int:
        """Hidden-sized tensors dispatch and combine keep for backward: none (index_select,
        the all-to-all and scatter_add save indices and split sizes only)."""
        return 0

    @property
    def index_bytes(self) -> int:
        """The int64 permutation indices the permute keeps for the unpermute (``[rows]``)."""
        return 8 * self.rows


def ep_exchange(tokens: int, experts: int, top_k: int, hidden: int, dtype: int, ep: int,
                capacity_factor: float | None = None) -> EpExchange:
    """The exchange of a rank holding ``tokens`` tokens of one MoE layer of ``experts`` experts
    (top-``top_k`` routing) spread over ``ep`` ranks: balanced routing, dropless unless
    ``capacity_factor`` (then padded to the capacity, Megatron's drop-and-pad)."""
    k = max(1, top_k)
    if capacity_factor is None:
        return EpExchange(rows=tokens * k, capacity=None, hidden=hidden, dtype=dtype, ep=ep)
    cap = expert_capacity(tokens, experts, k, capacity_factor)
    return EpExchange(rows=experts * cap, capacity=cap, hidden=hidden, dtype=dtype, ep=ep)
