"""Emulate CUDA's dispatch on CPU tensors, so a CPU trace allocates what a GPU run allocates.

A CPU-only torch runs fake tensors on the CPU device, and the CPU dispatcher does not do what CUDA
does (DESIGN.md, "Tracing on a CPU-only machine"). Each difference that changes memory is one named,
counted emulation here, active only inside :func:`cuda_emulation`:

``autocast-op-lists``
    torch.autocast's per-op cast policy for CUDA replaces the CPU one. CUDA runs softmax,
    log_softmax, layer_norm, pow, exp, sum, the losses ... in fp32; the CPU policy leaves most of
    them in bf16 and casts a few CPU-only entries (cross_entropy_loss, cat, stack ...) that CUDA
    leaves alone. Policies are from ``aten/src/ATen/autocast_mode.h`` (``AT_FORALL_LOWER_PRECISION_FP``,
    ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``, the ``norm`` append-dtype overloads) and
    ``autocast_mode.cpp`` (the CUDA ``promote`` list, the ``binary_cross_entropy`` ban); the set of
    ops is checked against the ops this torch registers an ``AutocastCUDA`` kernel for.
``fused-dropout``
    ``aten::dropout`` uses the fused kernel on CUDA (a 1-byte bool mask); on CPU it multiplies by a
    noise tensor in the activation dtype (2-4 bytes per element).
``softmax-half-to-float``
    CUDA's softmax / log_softmax of an fp16 tensor with ``dtype=float32`` reads fp16 and writes fp32
    without a converted copy (``at::_softmax(x, dim, half_to_float=True)``). Fake tensors only: the
    CPU kernel refuses ``half_to_float``.
``sdpa-cuda-backend``
    ``scaled_dot_product_attention`` picks the backend CUDA would (flash, memory-efficient, math), and
    the fused kernels are emulated with their real allocations (see ``_attention``): the output, an
    O(s) logsumexp, and the backward workspaces, never the s x s matrix.

The 512-byte rounding of the caching allocator, the host-side optimizer step counters and the
optimizer's ``foreach`` default are emulated where the step and the recorder run (``_step``,
``_recorder``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Iterator

import torch
from torch.utils._pytree import tree_map

from . import _attention

# --------------------------------------------------------------------------------------------------
# CUDA autocast policies (torch 2.x, aten/src/ATen/autocast_mode.h and autocast_mode.cpp).

_LOWER = (
    "_convolution", "_convolution.deprecated", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu",
    "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    "cudnn_convolution", "cudnn_convolution_transpose",
)
_FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
_FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname",
    "log_softmax.int", "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum",
    "cumsum.dimname", "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord",
    "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)
#: registered overload -> the dtype-taking overload it redispatches to.
_FP32_APPEND_DTYPE = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}
_PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
)
_BANNED = ("binary_cross_entropy",)

#: Ops both CPU and CUDA autocast run in the lower precision: the CPU C++ kernel (with its weight
#: cache) already does what CUDA does, so it is kept.
_CPU_LOWER_SAME = frozenset({
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm",
    "linear", "_convolution.deprecated", "matmul", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "prelu", "scaled_dot_product_attention",
})
#: CUDA-only kernels that never run on a CPU tensor.
_CUDA_ONLY = frozenset({"cudnn_convolution", "cudnn_convolution_transpose"})


def cuda_policy_table() -> dict[str, str]:
    """Op overload name (without ``aten::``) -> CUDA autocast policy."""
    table: dict[str, str] = {}
    for names, policy in ((_LOWER, "lower_precision_fp"), (_FP32, "fp32"),
                          (_FP32_SET_OPT_DTYPE, "fp32_set_opt_dtype"), (_PROMOTE, "promote"),
                          (_BANNED, "banned")):
        for n in names:
            table[n] = policy
    for n in _FP32_APPEND_DTYPE:
        table[n] = "fp32_append_dtype"
    return table


def _registered(key: str) -> set[str]:
    return {n[len("aten::"):] for n in torch._C._dispatch_get_all_op_names()
            if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}


def autocast_cuda_ops() -> set[str]:
    """The ops this torch registers an ``AutocastCUDA`` kernel for (compiled in even on CPU-only
    builds): the oracle the emulated table is checked against."""
    return _registered("AutocastCUDA")


def _overload(name: str):
    base, _, ov = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, ov or "default", None)


# --------------------------------------------------------------------------------------------------
# Kernels


_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _eligible(t: object) -> bool:
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
            and t.device.type == "cpu")


class _State:
    """What the emulation kernels share: counts and a cast cache for lower-precision ops that CPU
    autocast does not handle (CUDA caches casts of fp32 leaf tensors that require grad)."""

    def __init__(self, counts: Counter, fake: bool) -> None:
        self.counts = counts
        self.fake = fake
        self.cast_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def clear_cache(self) -> None:
        self.cast_cache.clear()


def _make_autocast_kernel(state: _State, op, policy: str, append_target=None):
    """The ``AutocastCPU`` kernel that runs ``op`` as CUDA autocast's ``policy`` does."""
    make = _POLICY_CALLS.get(policy, _banned_call)
    call = make(state, op, append_target)

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
            return call(*args, **kwargs)

    return kernel


def _lower_cast(state: _State, t):
    """``t`` in the autocast dtype; fp32 leaf weights that require grad cast once and cached, as
    CUDA autocast caches them."""
    if not _eligible(t):
        return t
    dt = torch.get_autocast_dtype("cpu")
    if t.dtype == dt:
        return t
    if (t.dtype == torch.float32 and t.requires_grad and t.is_leaf and not t._is_view()
            and torch.is_autocast_cache_enabled()):
        hit = state.cast_cache.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        out = t.to(dt)
        state.cast_cache[id(t)] = (t, out)
        return out
    return t.to(dt)


def _to_fp32(t):
    return t.to(torch.float32) if _eligible(t) and t.dtype != torch.float32 else t


def _lower_call(state: _State, op, _target):
    def call(*args, **kwargs):
        state.counts["autocast-op-lists"] += 1
        args, kwargs = tree_map(lambda t: _lower_cast(state, t), (args, kwargs))
        return op(*args, **kwargs)

    return call


def _fp32_call(state: _State, op, _target):
    def call(*args, **kwargs):
        state.counts["autocast-op-lists"] += 1
        args, kwargs = tree_map(_to_fp32, (args, kwargs))
        return op(*args, **kwargs)

    return call


def _set_opt_dtype_call(state: _State, op, _target):
    """fp32 output unless the call names a dtype (softmax, sum, cumsum ...)."""
    schema_args = [a.name for a in op._schema.arguments]
    dtype_pos = schema_args.index("dtype") if "dtype" in schema_args else None
    kwarg_only = {a.name for a in op._schema.arguments if a.kwarg_only}

    def call(*args, **kwargs):
        if args and _eligible(args[0]):
            state.counts["autocast-op-lists"] += 1
            if "dtype" in kwarg_only:
                if kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            elif dtype_pos is not None:
                if len(args) > dtype_pos:
                    if args[dtype_pos] is None:
                        args = (*args[:dtype_pos], torch.float32, *args[dtype_pos + 1:])
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
        return op(*args, **kwargs)

    return call


def _append_dtype_call(state: _State, _op, target):
    """Redispatch to the dtype-taking overload with an fp32 output (``norm``)."""
    def call(*args, **kwargs):
        state.counts["autocast-op-lists"] += 1
        out_type = torch.float32 if _eligible(args[0]) else args[0].dtype
        return target(*args, **kwargs, dtype=out_type)

    return call


def _promote_call(state: _State, op, _target):
    """Every floating operand in the widest dtype among them (fp32 if any is fp32)."""
    def call(*args, **kwargs):
        state.counts["autocast-op-lists"] += 1
        widest = torch.get_autocast_dtype("cpu")
        for t in torch.utils._pytree.tree_leaves((args, kwargs)):
            if _eligible(t) and t.dtype == torch.float32:
                widest = torch.float32
        args, kwargs = tree_map(
            lambda t: t.to(widest) if _eligible(t) and t.dtype != widest else t, (args, kwargs))
        return op(*args, **kwargs)

    return call


def _banned_call(_state: _State, _op, _target):
    def call(*args, **kwargs):
        raise RuntimeError(
            "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
            "autocast (CUDA autocast refuses them); use binary_cross_entropy_with_logits")

    return call


_POLICY_CALLS = {"lower_precision_fp": _lower_call, "fp32": _fp32_call,
                 "fp32_set_opt_dtype": _set_opt_dtype_call, "fp32_append_dtype": _append_dtype_call,
                 "promote": _promote_call}


def _dropout_kernel(state: _State):
    def dropout(input, p, train):
        # aten::dropout on CUDA: the fused native_dropout (bool mask) when training with 0 < p < 1.
        if train and 0.0 < p < 1.0 and input.numel() > 0:
            state.counts["fused-dropout"] += 1
            return torch.ops.aten.native_dropout.default(input, p, train)[0]
        if p == 0.0 or not train or input.numel() == 0:
            return input
        return input * torch.zeros((), dtype=input.dtype, device=input.device)

    return dropout


def _softmax_kernel(state: _State, log: bool):
    inner = torch.ops.aten._log_softmax.default if log else torch.ops.aten._softmax.default

    def softmax(self, dim, dtype=None):
        if (state.fake and self.dtype == torch.float16 and dtype == torch.float32):
            state.counts["softmax-half-to-float"] += 1
            return inner(self, dim, True)
        converted = self.to(dtype) if dtype is not None else self
        return inner(converted, dim, False)

    return softmax


@contextlib.contextmanager
def cuda_emulation(counts: Counter, *, fake: bool) -> Iterator[_State]:
    """Install the CUDA emulations for the duration of the block (process-wide, undone on exit)."""
    state = _State(counts, fake)
    lib = torch.library.Library("aten", "IMPL")
    table = cuda_policy_table()
    cpu_ops = _registered("AutocastCPU")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, policy in table.items():
                if name in _CPU_LOWER_SAME or name in _CUDA_ONLY:
                    continue
                op = _overload(name)
                if op is None:
                    continue
                target = None
                if policy == "fp32_append_dtype":
                    target = _overload(_FP32_APPEND_DTYPE[name])
                    if target is None:
                        continue
                lib.impl(name, _make_autocast_kernel(state, op, policy, target), "AutocastCPU")
            for name in sorted(cpu_ops - set(table)):
                lib.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")
            lib.impl("dropout", _dropout_kernel(state), "CompositeImplicitAutograd")
            lib.impl("softmax.int", _softmax_kernel(state, False), "CompositeImplicitAutograd")
            lib.impl("log_softmax.int", _softmax_kernel(state, True), "CompositeImplicitAutograd")
            lib.impl("scaled_dot_product_attention", _attention.sdpa_kernel(counts, fake),
                     "CompositeImplicitAutograd")
        yield state
    finally:
        lib._destroy()


@contextlib.contextmanager
def unpacked_batch_mask(counts: Counter, recorder) -> Iterator[None]:
    """``causal-mask-skip``: on a GPU, transformers checks whether a training batch packs several
    sequences (``find_packed_sequence_indices``: a few small tensors, then a data-dependent
    ``.all()``); for an unpacked batch the answer is "no", the mask is skipped and SDPA runs with
    ``is_causal``. On fake tensors transformers treats the check as "tracing" and assumes packing,
    building an explicit s x s mask. Here the check runs as on a GPU (same small tensors), and its
    ``.all()`` is answered "true": the traced batch is unpacked (positions 0..s-1)."""
    try:
        from transformers import masking_utils
    except ImportError:  # pragma: no cover - factory models without transformers
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor

    orig = getattr(masking_utils, "find_packed_sequence_indices", None)
    orig_tracing = getattr(masking_utils, "is_tracing", None)
    if orig is None or orig_tracing is None:
        yield
        return

    def is_tracing(tensor=None):
        return orig_tracing(None if isinstance(tensor, FakeTensor) else tensor)

    def find_packed_sequence_indices(position_ids):
        if not isinstance(position_ids, FakeTensor):
            return orig(position_ids)
        counts["causal-mask-skip"] += 1
        masking_utils.is_tracing = is_tracing
        recorder.allow_item_placeholder = True
        try:
            return orig(position_ids)
        finally:
            recorder.allow_item_placeholder = False
            masking_utils.is_tracing = orig_tracing

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = orig


def grouped_mm_override(counts: Counter):
    """``grouped-mm-dtype``: CUDA's ``_grouped_mm`` runs fp32/fp16 operands through its fallback
    (``_grouped_mm_fallback`` in ``aten/src/ATen/native/cuda/Blas.cpp``; bf16 takes the fast path),
    but the meta kernel fake tensors use still insists on bf16 (the older CUDA check). For non-bf16
    fake operands the output is allocated as CUDA does: shape from the bf16 meta, dtype
    ``out_dtype`` or the operands' dtype."""
    from torch._subclasses.fake_tensor import FakeTensor

    def handler(func, args, kwargs):
        a, b = args[0], args[1]
        if not (isinstance(a, FakeTensor) and (a.dtype != torch.bfloat16
                                                or b.dtype != torch.bfloat16)):
            return func(*args, **kwargs)
        counts["grouped-mm-dtype"] += 1
        rest = list(args[2:])
        kw = dict(kwargs)
        if len(rest) >= 2 and isinstance(rest[1], torch.Tensor):  # bias
            rest[1] = rest[1].to(torch.bfloat16)
        if isinstance(kw.get("bias"), torch.Tensor):
            kw["bias"] = kw["bias"].to(torch.bfloat16)
        out_dtype = kw.pop("out_dtype", None)
        if len(rest) >= 3:
            out_dtype = rest[2] if rest[2] is not None else out_dtype
            rest = rest[:2]
        shape_of = func(a.to(torch.bfloat16), b.to(torch.bfloat16), *rest, **kw)
        return torch.empty_strided(shape_of.shape, shape_of.stride(),
                                   dtype=out_dtype or a.dtype, device=a.device)

    return {torch.ops.aten._grouped_mm.default: handler}
