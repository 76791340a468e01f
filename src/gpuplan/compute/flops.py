"""FLOP and byte counting: exact matmul counts, and the operations of one training or inference step
for every architecture family :class:`~gpuplan.models.Architecture` describes.

Conventions (stated once, used everywhere):

* A matmul of an M x K by a K x N matrix performs exactly ``M*K*N`` multiplies and ``M*(K-1)*N``
  additions (``M*K*N`` with a bias). FLOP totals use the usual ``2*M*K*N`` (one multiply and one add
  per multiply-accumulate), as Megatron-LM, PaLM and every MFU figure do.
* **Counted FLOPs** (model and hardware FLOPs, MFU and HFU) are matmul FLOPs only -- norms,
  activations, softmax and residuals are excluded (Narayanan et al. 2021; PaLM appendix B; MosaicML's
  MFU). The attention score and value products are counted over the *full* s x s square even for a
  causal decoder: that is Megatron's 96BslH^2(1 + s/6h + V/16lh) and PaLM's 6N + 12LHQT.
* **Executed FLOPs** are what the kernels do, and are what the step time uses: a causal fused
  attention kernel (``sdpa``: PyTorch's flash / memory-efficient kernels) skips key blocks that are
  entirely masked (about half the square; Dao 2023, FlashAttention-2 sec. 3.1.1), an eager
  (materialized) attention computes the whole square and then masks it, and a fused backward
  recomputes the scores (2.5x the forward's FLOPs, the figure the flash-attn benchmarks use).
* Backward = 2x forward for every matmul (dX and dW); activation recompute adds one forward of every
  layer ("full") or of the attention core only ("selective", Korthikanti et al. 2022).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal, Sequence, get_args

from .._record import record
from ..bounds import BOUNDS
from ..errors import InputError, opt, shown
from ..job import Attention, Checkpointing, Job, default_seq
from ..models._types import Architecture, attention_for

__all__ = [
    "MatmulCount", "count_matmul", "Op", "OpClass", "OP_CLASSES", "StepShape", "build_forward_ops",
    "backward_ops", "recompute_ops", "optimizer_op", "lora_adapter_ops", "is_layer_op", "default_seq",
    "FlopsBreakdown", "LayerFlops", "flops_breakdown", "FLASH_BLOCK", "causal_score_elements",
]

OpClass = Literal["attention", "mlp", "norm_elementwise", "embedding", "logits", "optimizer"]
#: Op classes in display order (the roofline groups ops by these).
OP_CLASSES: tuple[str, ...] = ("attention", "mlp", "norm_elementwise", "embedding", "logits",
                               "optimizer")
OpKind = Literal["matmul", "attention", "elementwise"]
Phase = Literal["forward", "backward", "recompute", "optimizer"]

#: Key/query block size of a FlashAttention kernel: a key block is skipped only when every one of
#: its keys is masked for every query of the query block (FlashAttention-2 uses 64-128; 128 stated).
FLASH_BLOCK = 128

# Executed FLOPs per element of the non-matmul ops (stated approximations; these ops are
# memory-bound on every device, so the constants only place them on the roofline).
_NORM_FLOPS = {"layernorm": 7, "rmsnorm": 4}
_ACT_FLOPS = {"gelu": 8, "relu": 1, "silu": 4}
_SOFTMAX_FLOPS = 5


def positive_int(value: object, what: str, maximum: int | None = None) -> int:
    """``value`` when it is an int >= 1 (not a bool, not a string) and at most ``maximum``; else a
    one-line :class:`InputError` naming ``what`` and the value. The speed model's one check of a
    whole-number argument (the CLI parses text with :func:`gpuplan.units.parse_positive_int`).
    ``maximum`` defaults to the ``dim`` range of :mod:`gpuplan.bounds` (2^31)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{what} {shown(value)}: expected a whole number >= 1")
    hi = int(BOUNDS["dim"].high) if maximum is None else maximum
    if value > hi:
        raise InputError(f"{what} {shown(value)}: at most {hi} is supported")
    return value


# --------------------------------------------------------------------------------------------------
# One matmul, exactly


@record
class MatmulCount:
    """Exact arithmetic of ``batch`` products of an M x K by a K x N matrix."""

    m: int
    k: int
    n: int
    batch: int = 1
    """Independent products (examples, or batch x heads for attention)."""
    bias: bool = False
    """A bias vector is added to each output (one more addition per output element)."""

    @property
    def output_elements(self) -> int:
        """Independent dot products: every one can be computed at the same time."""
        return self.batch * self.m * self.n

    @property
    def multiplies(self) -> int:
        """One multiply per (row, inner, column) triple: ``M*K*N``."""
        return self.batch * self.m * self.k * self.n

    @property
    def additions(self) -> int:
        """Summing K products takes K-1 additions per output (plus one for a bias)."""
        per_output = self.k - 1 + (1 if self.bias else 0)
        return self.batch * self.m * self.n * per_output

    @property
    def multiply_adds(self) -> int:
        """Multiply-accumulate steps, the unit of "512 by 512 multiplications and additions"."""
        return self.multiplies

    @property
    def flops(self) -> int:
        """The ``2*M*K*N`` convention (exact when a bias is added)."""
        return 2 * self.multiplies

    @property
    def exact_flops(self) -> int:
        """Multiplies + additions, exactly."""
        return self.multiplies + self.additions

    def to_dict(self) -> dict:
        return {"m": self.m, "k": self.k, "n": self.n, "batch": self.batch, "bias": self.bias,
                "multiplies": self.multiplies, "additions": self.additions,
                "multiply_adds": self.multiply_adds, "exact_flops": self.exact_flops,
                "flops": self.flops, "output_elements": self.output_elements}


def count_matmul(m: int, k: int, n: int, *, batch: int = 1, bias: bool = False) -> MatmulCount:
    """Exact counts of an (M x K) @ (K x N) product; every size must be a whole number >= 1."""
    return MatmulCount(m=positive_int(m, "M"), k=positive_int(k, "K"), n=positive_int(n, "N"),
                       batch=positive_int(batch, "batch"), bias=bool(bias))


# --------------------------------------------------------------------------------------------------
# Operations of a step


@record
class Op:
    """One operation of a step, ``count`` times (e.g. once per layer). Sizes are per instance."""

    name: str
    """``attn.qkv``, ``mlp.down``, ``logits.loss`` ...; backward/recompute ops share the name."""
    op_class: OpClass
    kind: OpKind
    """``matmul`` (tensor cores, weights or activations), ``attention`` (a fused attention kernel),
    ``elementwise`` (vector units: norms, activations, softmax, residuals, gathers, the optimizer)."""
    phase: Phase
    count: int
    """Instances per step (layers x ...)."""
    flops: float
    """FLOPs the kernels execute, per instance (what the step time uses)."""
    counted_flops: float
    """Matmul FLOPs by the Megatron/PaLM convention, per instance (0 for elementwise ops)."""
    bytes: float
    """Bytes read from and written to device memory, per instance (each operand once)."""
    parallel_work: int
    """Independent outputs the kernel can spread over the device (for small-work occupancy)."""
    kernels: int
    """Kernel launches per instance."""
    weight_elements: int = 0
    """Elements of the weight matrix this matmul multiplies by (0 for activation products)."""
    shape: tuple[int, int, int, int] | None = None
    """(batch, M, K, N) of a matmul."""
    group: str = ""
    """``embedding``, ``head``, or the layer group: ``dense``, ``moe``, ``sliding-window dense`` ..."""
    host_s: float | None = None
    """Host time to issue each kernel when it is not the runtime's per-phase cost (a Python loop
    issuing one tensor op at a time, a multi-tensor pass issued from C++)."""

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, executed FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else math.inf


@record
class StepShape:
    """What one pass processes: ``batch`` sequences of ``q_len`` new tokens attending to ``kv_len``
    keys each (prefill and training: q_len = kv_len = seq; decode: q_len = 1, kv_len = context)."""

    batch: int
    q_len: int
    kv_len: int
    decode: bool = False
    logits_tokens: int | None = None
    """Tokens whose logits are computed (None: every token; prefill keeps only the last)."""
    train: bool = False


@record
class _Bytes:
    act: int
    """Bytes of an activation element (2 for 16-bit compute, 4 for fp32)."""
    weight: float
    """Bytes per weight element of the transformer blocks' matmuls."""
    head: float
    """Bytes per element of the output head / tied embedding as the matmul reads it."""
    embed: float
    """Bytes per element of the input embedding table."""
    kv: int
    """Bytes per cached key/value element."""
    grad: int
    """Bytes per weight-gradient element."""


def _mm(name: str, cls: OpClass, *, b: int, m: int, k: int, n: int, act: int, w: float | None,
        kernels: int = 1, counted: bool = True, input_reads: int = 1) -> Op:
    """A forward matmul; ``w`` is the weight element size (None: both operands are activations)."""
    f = 2.0 * b * m * k * n
    rhs = k * n * w if w is not None else b * k * n * act
    return Op(name=name, op_class=cls, kind="matmul", phase="forward", count=1, flops=f,
              counted_flops=f if counted else 0.0,
              bytes=input_reads * b * m * k * act + rhs + b * m * n * act,
              parallel_work=b * m * n, kernels=kernels,
              weight_elements=k * n if w is not None else 0, shape=(b, m, k, n))


def _ew(name: str, cls: OpClass, *, elements: int, nbytes: float, flops_per: float,
        kernels: int = 1) -> Op:
    return Op(name=name, op_class=cls, kind="elementwise", phase="forward", count=1,
              flops=float(flops_per * elements), counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, int(elements)), kernels=kernels)


def causal_score_elements(q_len: int, window: int | None = None, block: int = FLASH_BLOCK) -> int:
    """Score elements a causal block-skipping attention kernel computes for one sequence and head.

    Query block i covers rows [i*b, min((i+1)*b, s)); it processes every key block from the first
    one holding a visible key up to its own diagonal block. With a sliding ``window`` a query sees
    the ``window`` most recent keys (itself included).
    """
    s, b = q_len, block
    # Closed form (bounded whatever q_len is; issue 14): full query block i spans key blocks
    # max(0, i - c) .. i, where c = ceil((window - 1) / b) (no limit without a window), so it
    # computes b * b * min(i + 1, c + 1) elements; the partial last block computes rem rows.
    m, rem = divmod(s, b)
    c = None if window is None else -(-(window - 1) // b)
    ramp = m if c is None else min(m, c + 1)
    total = b * b * (ramp * (ramp + 1) // 2 + (m - ramp) * (0 if c is None else c + 1))
    if rem:
        lo = 0 if c is None else max(0, m - c) * b
        total += rem * (s - lo)
    return total


def _attention_counts(shape: StepShape, window: int | None, causal: bool,
                      attention: str) -> tuple[float, float]:
    """(executed, counted) score elements per (sequence, head)."""
    q, kv = shape.q_len, shape.kv_len
    if shape.decode:
        keys = kv if window is None else min(kv, window)
        return float(q * keys), float(q * keys)
    keys_counted = kv if window is None else min(kv, window)
    counted = float(q * keys_counted)
    if not causal or attention == "eager":
        return float(q * kv), counted  # eager computes the whole square, then masks it
    return float(causal_score_elements(q, window)), counted


def _is_fused_qkv(arch: Architecture) -> bool:
    return arch.family in ("gpt2", "gpt_bigcode", "gpt_neox", "falcon", "phi3", "bloom", "mpt",
                           "gptj")


def _mlp_act(arch: Architecture) -> str:
    a = (arch.activation or "").lower()
    if "relu" in a:
        return "relu"
    if "silu" in a or "swish" in a:
        return "silu"
    return "gelu"


def _moe_layers(arch: Architecture) -> int:
    """Layers whose MLP is a mixture of experts (all, unless the config says otherwise)."""
    if not arch.is_moe:
        return 0
    cfg = arch.config or {}
    n = arch.num_layers
    dense_first = int(cfg.get("first_k_dense_replace") or 0)
    only_mlp = set(cfg.get("mlp_only_layers") or ())
    step = int(cfg.get("decoder_sparse_step") or 1)
    return sum(1 for i in range(n)
               if i >= dense_first and i not in only_mlp and (i + 1) % step == 0)


def _norms_per_layer(arch: Architecture) -> int:
    if arch.family == "falcon" and arch.parallel_attn_mlp and not (arch.config or {}).get(
            "new_decoder_architecture"):
        return 1  # Falcon-7B: one LayerNorm feeds both branches
    return 2


def _layer_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *, attention: Attention,
               window: int | None, moe: bool) -> list[Op]:
    """One transformer layer's forward: norm, attention, residual, (norm), MLP or experts,
    residual."""
    T = shape.batch * shape.q_len
    h, a = arch.hidden_size, nb.act
    nflops = _NORM_FLOPS.get(arch.norm, 7)

    def norm(name: str) -> Op:
        return _ew(name, "norm_elementwise", elements=T * h, nbytes=2 * T * h * a, flops_per=nflops)

    def dropout(name: str) -> list[Op]:
        # training with hidden dropout: the fused CUDA dropout reads the branch's output, writes
        # it and a 1-byte keep mask (as the memory model's activations keep it)
        if not (shape.train and arch.hidden_dropout > 0):
            return []
        return [_ew(name, "norm_elementwise", elements=T * h, nbytes=T * h * (2 * a + 1),
                    flops_per=1)]

    ops = [norm("attn.norm"), *_attention_ops(arch, shape, nb, attention=attention, window=window)]
    ops.extend(dropout("attn.dropout"))
    ops.append(_ew("attn.residual", "norm_elementwise", elements=T * h, nbytes=3 * T * h * a,
                   flops_per=1))
    if _norms_per_layer(arch) == 2:
        ops.append(norm("mlp.norm"))
    ops.extend(_moe_ops(arch, T, nb) if moe else _mlp_ops(arch, T, nb))
    ops.extend(dropout("mlp.dropout"))
    ops.append(_ew("mlp.residual", "norm_elementwise", elements=T * h, nbytes=3 * T * h * a,
                   flops_per=1))
    return ops


def _attention_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *, attention: Attention,
                   window: int | None) -> list[Op]:
    """The QKV projection, rotary, the attention core (fused, or eager scores/softmax/values) and
    the output projection."""
    B, T = shape.batch, shape.batch * shape.q_len
    h, d = arch.hidden_size, arch.head_dim
    H, Hkv = arch.num_heads, arch.num_kv_heads
    nq, nkv = H * d, Hkv * d
    a, w = nb.act, nb.weight
    fused = _is_fused_qkv(arch)
    ops = [_mm("attn.qkv", "attention", b=1, m=T, k=h, n=nq + 2 * nkv, act=a, w=w,
               kernels=1 if fused else 3, input_reads=1 if fused else 3)]
    if arch.position == "rotary":
        ops.append(_ew("attn.rotary", "norm_elementwise", elements=T * (nq + nkv),
                       nbytes=2 * T * (nq + nkv) * a, flops_per=3, kernels=2))
    executed, counted = _attention_counts(shape, window, arch.kind == "decoder", attention)
    kv_src = nb.kv if shape.decode else a  # decode reads the cache; prefill the fresh K and V
    kv_read = B * shape.kv_len * 2 * nkv * kv_src
    kv_write = B * shape.q_len * 2 * nkv * nb.kv if not shape.train else 0  # inference fills a cache
    if attention == "sdpa":
        f_exec = 4.0 * B * H * executed * d
        ops.append(Op(name="attn.core", op_class="attention", kind="attention", phase="forward",
                      count=1, flops=f_exec, counted_flops=4.0 * B * H * counted * d,
                      bytes=2 * T * nq * a + kv_read + kv_write + (B * H * shape.q_len * 4
                                                                   if shape.train else 0),
                      parallel_work=max(1, int(B * H * executed)), kernels=1,
                      shape=(B * H, shape.q_len, d, shape.kv_len)))
    else:
        ops.extend(_eager_core_ops(arch, shape, nb, executed=executed, counted=counted,
                                   kv_read=kv_read, kv_write=kv_write))
    ops.append(_mm("attn.out", "attention", b=1, m=T, k=nq, n=h, act=a, w=w))
    return ops


def _eager_core_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *, executed: float,
                    counted: float, kv_read: float, kv_write: float) -> list[Op]:
    """Eager attention: the s x s scores are materialized, softmaxed (and dropped out), then
    multiplied by V; K and V are expanded to every query head (repeat_kv) first."""
    B, T, d = shape.batch, shape.batch * shape.q_len, arch.head_dim
    H, Hkv = arch.num_heads, arch.num_kv_heads
    nq, a = H * d, nb.act
    scores = B * H * shape.q_len * shape.kv_len  # materialized s x s per head
    frac = counted / executed if executed else 1.0
    sc = _mm("attn.scores", "attention", b=B * H, m=shape.q_len, k=d, n=shape.kv_len, act=a,
             w=None)
    sc = replace(sc, counted_flops=sc.flops * frac,
                 bytes=T * nq * a + kv_read * H / max(Hkv, 1) / 2 + scores * a + kv_write)
    # transformers' eager attention (BertSelfAttention: / sqrt(d), + attention_mask; Llama's
    # eager_attention_forward: * scaling, + causal_mask) scales and masks the materialized scores
    # in two more kernels, each reading and writing them
    smk = _ew("attn.scale_mask", "norm_elementwise", elements=scores, nbytes=4 * scores * a,
              flops_per=2, kernels=2)
    dropout = shape.train and arch.attention_dropout > 0
    sm = _ew("attn.softmax", "norm_elementwise", elements=scores,
             nbytes=2 * scores * a * (2 if dropout else 1), flops_per=_SOFTMAX_FLOPS,
             kernels=3 if dropout else 2)
    av = _mm("attn.values", "attention", b=B * H, m=shape.q_len, k=shape.kv_len, n=d, act=a,
             w=None)
    av = replace(av, counted_flops=av.flops * frac,
                 bytes=scores * a + kv_read * H / max(Hkv, 1) / 2 + T * nq * a)
    return [sc, smk, sm, av]


def _moe_ops(arch: Architecture, T: int, nb: _Bytes) -> list[Op]:
    """A mixture-of-experts MLP over ``T`` tokens: router, top-k, the experts hit, combine, and a
    shared expert where the model has one."""
    h, a, w = arch.hidden_size, nb.act, nb.weight
    act = _mlp_act(arch)
    gated = arch.mlp == "gated"
    E, k_top = arch.num_experts, max(1, arch.experts_per_token)
    ie = arch.moe_intermediate_size or arch.intermediate_size
    R = T * k_top  # token-expert assignments
    touched = E * (1.0 - (1.0 - k_top / E) ** T)  # expected distinct experts hit (uniform)
    n_up = (2 if gated else 1) * ie
    ops = [_mm("moe.router", "mlp", b=1, m=T, k=h, n=E, act=a, w=w),
           _ew("moe.topk", "norm_elementwise", elements=T * E, nbytes=3 * T * E * 4,
               flops_per=_SOFTMAX_FLOPS, kernels=4)]
    launches = max(1, math.ceil(touched))
    up = _mm("moe.up", "mlp", b=1, m=R, k=h, n=n_up, act=a, w=w)
    ops.append(replace(up, bytes=R * h * a + touched * h * n_up * w + R * n_up * a,
                       weight_elements=E * h * n_up, kernels=launches * (2 if gated else 1)))
    ops.append(_ew("moe.act", "norm_elementwise", elements=R * ie,
                   nbytes=(3 if gated else 2) * R * ie * a,
                   flops_per=_ACT_FLOPS[act] + (1 if gated else 0),
                   kernels=launches * (2 if gated else 1)))
    down = _mm("moe.down", "mlp", b=1, m=R, k=ie, n=h, act=a, w=w)
    ops.append(replace(down, bytes=R * ie * a + touched * ie * h * w + R * h * a,
                       weight_elements=E * ie * h, kernels=launches))
    ops.append(_ew("moe.combine", "norm_elementwise", elements=R * h, nbytes=3 * R * h * a,
                   flops_per=2, kernels=launches * 2))
    si = arch.shared_expert_intermediate_size
    if si:
        ops.append(_mm("moe.shared_up", "mlp", b=1, m=T, k=h, n=2 * si, act=a, w=w,
                       kernels=2, input_reads=2))
        ops.append(_ew("moe.shared_act", "norm_elementwise", elements=T * si,
                       nbytes=3 * T * si * a, flops_per=_ACT_FLOPS[act] + 1, kernels=2))
        ops.append(_mm("moe.shared_down", "mlp", b=1, m=T, k=si, n=h, act=a, w=w))
        ops.append(_mm("moe.shared_gate", "mlp", b=1, m=T, k=h, n=1, act=a, w=w))
    return ops


def _mlp_ops(arch: Architecture, T: int, nb: _Bytes) -> list[Op]:
    """A dense MLP over ``T`` tokens (gated: gate and up projections, the activation times the
    gate, down)."""
    h, i, a, w = arch.hidden_size, arch.intermediate_size, nb.act, nb.weight
    act = _mlp_act(arch)
    if arch.mlp == "gated":
        fused_gu = arch.family == "phi3"
        ops = [_mm("mlp.gate_up", "mlp", b=1, m=T, k=h, n=2 * i, act=a, w=w,
                   kernels=1 if fused_gu else 2, input_reads=1 if fused_gu else 2),
               _ew("mlp.act", "norm_elementwise", elements=T * i, nbytes=3 * T * i * a,
                   flops_per=_ACT_FLOPS[act] + 1, kernels=2)]
    else:
        ops = [_mm("mlp.up", "mlp", b=1, m=T, k=h, n=i, act=a, w=w),
               _ew("mlp.act", "norm_elementwise", elements=T * i, nbytes=2 * T * i * a,
                   flops_per=_ACT_FLOPS[act])]
    ops.append(_mm("mlp.down", "mlp", b=1, m=T, k=i, n=h, act=a, w=w))
    return ops


def _vision_patches(arch: Architecture) -> int:
    if not arch.image_size or not arch.patch_size:
        raise InputError(f"{arch.name}: a vision model needs image_size and patch_size")
    return (arch.image_size // arch.patch_size) ** 2


def _embed_width(arch: Architecture) -> int:
    """Width of the word embeddings (OPT's ``word_embed_proj_dim``), else the hidden size."""
    e = (arch.config or {}).get("word_embed_proj_dim")
    return int(e) if isinstance(e, int) and not isinstance(e, bool) and e > 0 else \
        arch.hidden_size


def _embedding_ops(arch: Architecture, shape: StepShape, nb: _Bytes) -> list[Op]:
    B, T, h, a = shape.batch, shape.batch * shape.q_len, arch.hidden_size, nb.act
    ops: list[Op] = []
    if arch.kind == "vision":
        P, p, C = _vision_patches(arch), arch.patch_size, arch.num_channels or 3
        ops.append(_mm("embed.patches", "embedding", b=1, m=B * P, k=C * p * p, n=h, act=a,
                       w=nb.embed))
        ops.append(_ew("embed.positions", "embedding", elements=T * h, nbytes=3 * T * h * a,
                       flops_per=1, kernels=2))
        return ops
    e = _embed_width(arch)
    ops.append(_ew("embed.tokens", "embedding", elements=T * e,
                   nbytes=T * e * (nb.embed + a) + T * 8, flops_per=0))
    if e != h:  # OPT-350m: word embeddings of width e, projected to the hidden size
        ops.append(_mm("embed.project_in", "embedding", b=1, m=T, k=e, n=h, act=a, w=nb.weight))
    if arch.position == "learned":
        ops.append(_ew("embed.positions", "embedding", elements=T * h,
                       nbytes=T * h * (nb.embed + 2 * a), flops_per=1, kernels=2))
    if arch.kind == "encoder":  # token types + embedding LayerNorm (BERT)
        ops.append(_ew("embed.norm", "embedding", elements=T * h, nbytes=4 * T * h * a,
                       flops_per=_NORM_FLOPS.get(arch.norm, 7) + 1, kernels=3))
    elif arch.family == "bloom":  # word_embeddings_layernorm
        ops.append(_ew("embed.norm", "embedding", elements=T * h, nbytes=2 * T * h * a,
                       flops_per=_NORM_FLOPS.get(arch.norm, 7)))
    return ops


def _head_ops(arch: Architecture, shape: StepShape, nb: _Bytes) -> list[Op]:
    B, T, h, a = shape.batch, shape.batch * shape.q_len, arch.hidden_size, nb.act
    ops: list[Op] = []
    hf = arch.hf_class or ""
    nflops = _NORM_FLOPS.get(arch.norm, 7)
    if arch.kind in ("decoder", "vision"):
        ops.append(_ew("final.norm", "norm_elementwise", elements=T * h, nbytes=2 * T * h * a,
                       flops_per=nflops))
    if arch.kind == "decoder":
        if arch.vocab_size:
            L = shape.logits_tokens if shape.logits_tokens is not None else T
            V = arch.vocab_size
            e = _embed_width(arch)
            if e != h:
                ops.append(_mm("logits.project_out", "logits", b=1, m=L, k=h, n=e, act=a,
                               w=nb.weight))
            ops.append(_mm("logits.head", "logits", b=1, m=L, k=e, n=V, act=a, w=nb.head))
            if shape.train:
                # cross-entropy upcasts the logits to fp32: read them, write and read the fp32 copy
                ops.append(_ew("logits.loss", "logits", elements=L * V, nbytes=L * V * (a + 8),
                               flops_per=_SOFTMAX_FLOPS, kernels=3))
        return ops
    labels = arch.num_labels
    if arch.kind == "encoder" and ("MaskedLM" in hf or "PreTraining" in hf) and arch.vocab_size:
        ops.append(_mm("logits.transform", "logits", b=1, m=T, k=h, n=h, act=a, w=nb.weight))
        ops.append(_ew("logits.transform_act", "logits", elements=T * h, nbytes=4 * T * h * a,
                       flops_per=_ACT_FLOPS["gelu"] + nflops, kernels=2))
        ops.append(_mm("logits.head", "logits", b=1, m=T, k=h, n=arch.vocab_size, act=a,
                       w=nb.head))
        if shape.train:
            V = arch.vocab_size
            ops.append(_ew("logits.loss", "logits", elements=T * V, nbytes=T * V * (a + 8),
                           flops_per=_SOFTMAX_FLOPS, kernels=3))
        return ops
    pooled = arch.kind == "encoder" or not labels  # BERT pools [CLS]; ViT classifies [CLS] directly
    if pooled:
        ops.append(_mm("logits.pooler", "logits", b=1, m=B, k=h, n=h, act=a, w=nb.weight))
    if labels:
        ops.append(_mm("logits.classifier", "logits", b=1, m=B, k=h, n=labels, act=a,
                       w=nb.weight))
    return ops


def build_forward_ops(arch: Architecture, shape: StepShape, *, act_bytes: int,
                      weight_bytes: float, head_bytes: float | None = None,
                      embed_bytes: float | None = None, kv_bytes: int | None = None,
                      grad_bytes: int | None = None,
                      attention: Attention = "sdpa") -> tuple[Op, ...]:
    """Every forward operation of one pass, grouped by kind of layer (``count`` = layers).

    Layers with a sliding window, and mixture-of-experts layers, are separate groups because their
    arithmetic differs from the others'. ``attention`` is the job's: ``sdpa`` (a fused kernel that
    skips fully masked blocks and never stores the scores) or ``eager`` (materialized scores).
    """
    if attention not in get_args(Attention):
        raise InputError(f"{opt('attention')} {attention!r}: expected sdpa or eager",
                         field="attention", value=attention)
    nb = _Bytes(act=act_bytes, weight=weight_bytes,
                head=weight_bytes if head_bytes is None else head_bytes,
                embed=weight_bytes if embed_bytes is None else embed_bytes,
                kv=act_bytes if kv_bytes is None else kv_bytes,
                grad=act_bytes if grad_bytes is None else grad_bytes)
    n = arch.num_layers
    sliding = set(arch.sliding_window_layers) if arch.sliding_window else set()
    n_moe = _moe_layers(arch)
    # Layer groups: (sliding?, moe?) -> how many layers. MoE layers are assumed to be the last
    # ones when mixed with dense layers (only the count matters for FLOPs and bytes).
    groups: dict[tuple[bool, bool], int] = {}
    for i in range(n):
        is_moe = i >= n - n_moe
        key = (i in sliding, is_moe)
        groups[key] = groups.get(key, 0) + 1
    ops: list[Op] = [replace(op, group="embedding") for op in _embedding_ops(arch, shape, nb)]
    for (slides, moe), count in sorted(groups.items()):
        window = arch.sliding_window if slides else None
        group = ("sliding-window " if slides else "") + ("moe" if moe else "dense")
        for op in _layer_ops(arch, shape, nb, attention=attention, window=window, moe=moe):
            ops.append(replace(op, count=count, group=group))
    ops.extend(replace(op, group="head") for op in _head_ops(arch, shape, nb))
    return tuple(ops)


def is_layer_op(op: Op) -> bool:
    """True for the ops of the transformer layers (not the embedding, not the head)."""
    return op.group not in ("embedding", "head", "optimizer", "")


def backward_ops(fwd: tuple[Op, ...], *, act_bytes: int, grad_bytes: int,
                 weight_grads: bool = True) -> tuple[Op, ...]:
    """The backward of each forward op: 2x the FLOPs of every matmul (dX and dW), FlashAttention's
    backward at 2.5x its forward (it recomputes the scores), elementwise ops at 2x their bytes.

    ``weight_grads=False`` (a frozen base under LoRA): weight matmuls compute dX only, and the
    embedding needs no backward at all.
    """
    out: list[Op] = []
    a = act_bytes
    for op in fwd:
        if op.kind == "matmul":
            b, m, k, n = op.shape or (1, 1, 1, 1)
            if op.weight_elements and op.name == "embed.patches":
                # a patch embedding's input (the pixels) needs no gradient: dW only
                if weight_grads:
                    out.append(replace(op, phase="backward",
                                       bytes=b * m * k * a + b * m * n * a
                                       + op.weight_elements * grad_bytes))
                continue
            if op.weight_elements:
                w_read = op.bytes - b * m * k * a - b * m * n * a  # as the forward read it
                dx = b * m * n * a + w_read + b * m * k * a
                dw = b * m * k * a + b * m * n * a + op.weight_elements * grad_bytes
                if not weight_grads:
                    out.append(replace(op, phase="backward", bytes=dx))
                    continue
            else:
                dx = b * m * n * a + b * k * n * a + b * m * k * a
                dw = b * m * k * a + b * m * n * a + b * k * n * a
            out.append(replace(op, phase="backward", flops=2 * op.flops,
                               counted_flops=2 * op.counted_flops, bytes=dx + dw,
                               kernels=2 * op.kernels))
        elif op.kind == "attention":
            # reads Q, K, V, O, dO and the log-sum-exp; writes dQ, dK, dV
            out.append(replace(op, phase="backward", flops=2.5 * op.flops,
                               counted_flops=2 * op.counted_flops, bytes=2 * op.bytes,
                               kernels=3))
        elif op.name == "attn.scale_mask":
            # the scale's gradient is one multiply; the mask add passes the gradient through
            out.append(replace(op, phase="backward", flops=op.flops / 2, bytes=op.bytes / 2,
                               kernels=1))
        else:
            if op.group == "embedding" and not weight_grads:
                continue
            out.append(replace(op, phase="backward", flops=2 * op.flops, bytes=2 * op.bytes,
                               kernels=op.kernels + 1))
    return tuple(out)


def recompute_ops(fwd: tuple[Op, ...], checkpointing: Checkpointing,
                  attention: Attention) -> tuple[Op, ...]:
    """The extra forward work of activation checkpointing.

    ``full``: every transformer layer's forward runs again during backward (embedding and head are
    not recomputed). ``selective`` (Korthikanti et al. 2022): only the attention core -- scores,
    softmax, dropout, values -- is recomputed; with a fused (sdpa) kernel that core is never stored
    in the first place (its backward recomputes it, already counted), so selective adds nothing.
    """
    if checkpointing == "none":
        return ()
    if checkpointing not in ("selective", "full"):
        raise InputError(f"{opt('checkpointing')} {checkpointing!r}: expected none, selective "
                         "or full", field="checkpointing", value=checkpointing)
    out = []
    for op in fwd:
        if not is_layer_op(op):
            continue
        if checkpointing == "selective":
            if attention == "sdpa" or op.name not in ("attn.scores", "attn.scale_mask",
                                                       "attn.softmax", "attn.values"):
                continue
        out.append(replace(op, phase="recompute"))
    return tuple(out)


def _lora_mm(name: str, m: int, k: int, n: int, nbytes: float, phase: Phase, count: int) -> Op:
    f = 2.0 * m * k * n
    return Op(name=name, op_class="mlp", kind="matmul", phase=phase, count=count, flops=f,
              counted_flops=f, bytes=float(nbytes), parallel_work=max(1, m * n), kernels=1,
              shape=(1, m, k, n), group="dense")


def _lora_ew(name: str, nbytes: float, elements: int, kernels: int, phase: Phase,
             count: int) -> Op:
    return Op(name=name, op_class="norm_elementwise", kind="elementwise", phase=phase,
              count=count, flops=float(elements), counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, elements), kernels=kernels, group="dense")


def lora_adapter_ops(linears: Sequence[tuple[int, int, int, int]], *, rank: int,
                     act_bytes: int, fused: bool, dropout: bool = False,
                     recompute: bool = False) -> tuple[Op, ...]:
    """The passes LoRA adds beside each adapted frozen linear ``(in, out, count, tokens)`` --
    ``tokens``: what one instance sees, an expert its share under MoE routing -- as PEFT's and
    torchtune's LoRA layers run ``out = base(x) + scale * B(A(dropout(x)))``, and its backward.

    Forward: dropout of x when ``dropout`` (the output and a 1-byte mask), x @ A (M = tokens,
    K = in, N = r), @ B (K = r, N = out), then ``x scale`` and the add to the base output: two
    kernels (mul: 2 accesses per output element, add: 3) in eager, one (3) when ``fused`` (a
    compiled graph). Backward: the scale's gradient (read g, write), dB and dH from it, dA and the
    adapter's dX from dH, and dX added to the base's (3 accesses of each input element in eager;
    compiled, the sum is folded into dX's consumer: one read, no launch), the dropout's gradient
    when there is one. ``recompute``: the forward again (full checkpointing).
    The products are skinny (one side is r), so bytes bound them; their FLOPs are counted."""
    a, r = act_bytes, rank
    out: list[Op] = []
    for i, o, c, T in linears:
        x, y, h = T * i, T * o, T * r
        fwd = [_lora_ew("lora.dropout", 2 * a * x + x, x, 1, "forward", c)] if dropout else []
        fwd += [_lora_mm("lora.A", T, i, r, a * (x + i * r + h), "forward", c),
                _lora_mm("lora.B", T, r, o, a * (h + r * o + y), "forward", c),
                _lora_ew("lora.scale_add", (3 if fused else 5) * a * y, y, 1 if fused else 2,
                         "forward", c)]
        out += fwd
        out += [_lora_ew("lora.scale_add", 2 * a * y, y, 1, "backward", c),
                _lora_mm("lora.B", o, T, r, a * (y + h + o * r), "backward", c),
                _lora_mm("lora.B", T, o, r, a * (y + o * r + h), "backward", c),
                _lora_mm("lora.A", r, T, i, a * (h + x + r * i), "backward", c),
                _lora_mm("lora.A", T, r, i, a * (h + r * i + x), "backward", c),
                # eager adds the adapter's dX to the base's (read both, write); a compiled graph
                # folds the sum into the kernel that consumes dX (one more read, no launch)
                _lora_ew("lora.dx_add", (1 if fused else 3) * a * x, x, 0 if fused else 1,
                         "backward", c)]
        if dropout:
            out.append(_lora_ew("lora.dropout", 2 * a * x + x, x, 1, "backward", c))
        if recompute:
            out += [replace(op, phase="recompute") for op in fwd]
    return tuple(out)


def optimizer_op(n_params: int, *, state_bytes_total: float, grad_bytes: int, weight_bytes: int,
                 master_bytes: int, tensors: int = 1, param_accesses: float = 2.0,
                 grad_reads: float = 1.0, state_accesses: float = 2.0, scratch_bytes: float = 0.0,
                 kernels: int | None = None, host_s: float | None = None) -> Op:
    """The optimizer step: read the gradients, update master (or weights) and states in place, and
    write the working 16-bit copy when a master copy exists. By default one fused pass (each
    operand once); an unfused implementation gives its accesses per element (see
    :func:`~.efficiency.optimizer_cost`), ``scratch_bytes`` of temporaries per element, its
    ``kernels`` and the host time of each (``host_s``)."""
    upd = master_bytes or weight_bytes
    nbytes = n_params * (grad_reads * grad_bytes + param_accesses * upd
                         + (weight_bytes if master_bytes else 0) + scratch_bytes) \
        + state_accesses * state_bytes_total
    k = kernels if kernels is not None else max(12, 12 * math.ceil(tensors / 256))
    return Op(name="optimizer.step", op_class="optimizer", kind="elementwise", phase="optimizer",
              count=1, flops=12.0 * n_params, counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, n_params), kernels=max(1, k), group="optimizer",
              host_s=host_s)


# --------------------------------------------------------------------------------------------------
# FLOPs by layer and by model


@record
class LayerFlops:
    """Forward FLOPs of one layer of a group of identical layers (counted convention)."""

    kind: str
    """``dense``, ``moe``, ``sliding-window dense`` ..."""
    count: int
    """Layers of this kind."""
    forward_flops: float
    """One layer's forward matmul FLOPs (attention s^2 term counted in full)."""
    attention_flops: float
    """Of which the attention score and value products (the s^2 term)."""
    by_op: tuple[tuple[str, float], ...]
    """Forward counted FLOPs of each matmul of the layer."""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "count": self.count, "forward_flops": self.forward_flops,
                "attention_flops": self.attention_flops, "by_op": dict(self.by_op)}


@record
class FlopsBreakdown:
    """Counted (matmul) FLOPs of one step of ``batch`` sequences of ``seq`` tokens."""

    tokens: int
    layers: tuple[LayerFlops, ...]
    embedding_forward_flops: float
    head_forward_flops: float
    forward_flops: float
    """Whole model, one forward pass."""
    backward_flops: float
    """2x the forward (dX and dW of every matmul), except that a patch embedding needs no dX."""
    recompute_flops: float
    """Extra forward work of activation checkpointing."""
    model_flops: float
    """Forward + backward: the MFU numerator for one step (inference: the forward only)."""
    hardware_flops: float
    """Model FLOPs + recompute: the HFU numerator."""
    model_flops_per_token: float
    matmul_params: int
    """Weight elements multiplied per token (the "N" of 6N, MoE: active experts only)."""

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "layers": [l.to_dict() for l in self.layers],
                "embedding_forward_flops": self.embedding_forward_flops,
                "head_forward_flops": self.head_forward_flops,
                "forward_flops": self.forward_flops, "backward_flops": self.backward_flops,
                "recompute_flops": self.recompute_flops, "model_flops": self.model_flops,
                "hardware_flops": self.hardware_flops,
                "model_flops_per_token": self.model_flops_per_token,
                "matmul_params": self.matmul_params}


def flops_breakdown(arch: Architecture, job: Job) -> FlopsBreakdown:
    """Per-layer and per-model counted FLOPs of one step of ``job`` on ``arch``: a training step
    (``job.mode == "train"``: forward, backward and ``job.checkpointing``'s recompute) or one
    inference forward pass over the prompt (``"infer"``: logits for every position when
    ``job.prefill_logits == "all"``, a scoring pass; for the last one only when ``"last"``).

    ``job.batch`` sequences of ``job.seq`` tokens (None: :func:`default_seq`; a vision model's
    sequence is always its patches + [CLS]).
    """
    if job.mode not in ("train", "infer"):
        raise InputError(f"job mode {job.mode!r}: a FLOP count is of one step; use "
                         "job.with_(mode='train') or job.with_(mode='infer')")
    train = job.mode == "train"
    batch = job.batch
    job = job._evolve(attention=attention_for(arch.family, job.attention))
    seq = default_seq(arch) if job.seq is None or arch.kind == "vision" else job.seq
    logits = None if train or job.prefill_logits == "all" else batch
    shape = StepShape(batch=batch, q_len=seq, kv_len=seq, train=train, logits_tokens=logits)
    fwd = build_forward_ops(arch, shape, act_bytes=2, weight_bytes=2, attention=job.attention)
    forward = sum(op.counted_flops * op.count for op in fwd)
    backward = sum(op.counted_flops * op.count
                   for op in backward_ops(fwd, act_bytes=2, grad_bytes=2)) if train else 0.0
    rec = sum(op.counted_flops * op.count
              for op in recompute_ops(fwd, job.checkpointing, job.attention)) if train else 0.0
    tokens = batch * seq
    model = forward + backward
    return FlopsBreakdown(
        tokens=tokens, layers=_layer_flops(fwd),
        embedding_forward_flops=sum(op.counted_flops * op.count for op in fwd
                                    if op.group == "embedding"),
        head_forward_flops=sum(op.counted_flops * op.count for op in fwd if op.group == "head"),
        forward_flops=forward, backward_flops=backward, recompute_flops=rec, model_flops=model,
        hardware_flops=model + rec, model_flops_per_token=model / tokens,
        matmul_params=_matmul_params(arch, fwd))


def _layer_flops(fwd: tuple[Op, ...]) -> tuple[LayerFlops, ...]:
    """One :class:`LayerFlops` per group of identical layers."""
    layers: dict[str, list[Op]] = {}
    for op in fwd:
        if is_layer_op(op):
            layers.setdefault(op.group, []).append(op)
    groups = []
    for kind, ops in layers.items():
        attn = sum(o.counted_flops for o in ops
                   if o.name in ("attn.core", "attn.scores", "attn.values"))
        groups.append(LayerFlops(
            kind=kind, count=ops[0].count, forward_flops=sum(o.counted_flops for o in ops),
            attention_flops=attn,
            by_op=tuple((o.name, o.counted_flops) for o in ops if o.counted_flops)))
    return tuple(groups)


def _matmul_params(arch: Architecture, fwd: tuple[Op, ...]) -> int:
    """Weight elements multiplied per token (MoE: the experts a token is routed to)."""
    params = sum(op.weight_elements * op.count for op in fwd if op.kind == "matmul"
                 and not op.name.endswith(("moe.up", "moe.down")))
    if arch.is_moe:
        ie = arch.moe_intermediate_size or arch.intermediate_size
        per_expert = (3 if arch.mlp == "gated" else 2) * arch.hidden_size * ie
        params += _moe_layers(arch) * arch.experts_per_token * per_expert
    return int(params)
