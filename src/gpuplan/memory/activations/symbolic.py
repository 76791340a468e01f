"""A symbolic autograd: what a training step allocates, saves and frees, as formulas in batch and
sequence length.

The activation model is not a closed-form guess. Each model family's forward pass is written out
op by op (:mod:`.blocks` and :mod:`.heads`, mirroring the transformers code it describes), and
this module replays it the way PyTorch would on a CUDA device:

* every op allocates its outputs, saves for backward exactly the tensors its autograd formula
  saves (``linear`` its input, ``silu`` its input, ``softmax`` its output, ``mul`` each operand
  whose partner requires grad, ...), and non-saved tensors are freed after their last use;
* ``torch.autocast`` is applied by CUDA's op lists: matmuls in 16-bit with a cached 16-bit copy of
  each weight, ``layer_norm``/``pow``/``rsqrt``/``softmax``/``log_softmax`` in fp32, everything
  else in the dtype type promotion gives;
* the backward pass walks the ops in reverse: gradients of inputs are allocated, the gradient of an
  op's output is freed when the op has run, saved tensors are freed when their last user has run,
  parameter gradients stay.

Sizes are :class:`Form` values -- integer coefficients of the monomials ``b*s``, ``b*s^2``, ``s``,
``s^2``, ``b`` and ``1`` -- so one replay of one layer serves every batch and sequence length, and
the planner (and the solver, thousands of times per second) only evaluates a few dot products.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable

from ..._record import record

__all__ = ["Form", "ZERO", "BS", "BSS", "S", "SS", "B", "ONE", "Regime", "Graph", "Tensor",
           "LayerProfile", "simulate", "prune"]


class Form(tuple):
    """Integer coefficients of (b*s, b*s^2, s, s^2, b, 1)."""

    __slots__ = ()

    def __new__(cls, bs=0, bss=0, s=0, ss=0, b=0, one=0):
        return tuple.__new__(cls, (bs, bss, s, ss, b, one))

    def __add__(self, o: "Form") -> "Form":  # type: ignore[override]
        a0, a1, a2, a3, a4, a5 = self
        b0, b1, b2, b3, b4, b5 = o
        return tuple.__new__(Form, (a0 + b0, a1 + b1, a2 + b2, a3 + b3, a4 + b4, a5 + b5))

    def __sub__(self, o: "Form") -> "Form":
        a0, a1, a2, a3, a4, a5 = self
        b0, b1, b2, b3, b4, b5 = o
        return tuple.__new__(Form, (a0 - b0, a1 - b1, a2 - b2, a3 - b3, a4 - b4, a5 - b5))

    def __mul__(self, k: int) -> "Form":  # type: ignore[override]
        a0, a1, a2, a3, a4, a5 = self
        out = (a0 * k, a1 * k, a2 * k, a3 * k, a4 * k, a5 * k)
        if k.__class__ is not int or a0.__class__ is not int:
            # a sequence-parallel shard's rows (b*s/t): keep whole coefficients ints (the rows
            # times a width divisible by t, and every zero), so that the replay adds ints
            # (Fraction arithmetic is ~20x slower); the values are the same
            out = tuple(c.numerator if c.__class__ is Fraction and c.denominator == 1 else c
                        for c in out)
        return tuple.__new__(Form, out)

    __rmul__ = __mul__

    def __call__(self, b: int, s: int) -> int:
        bs, bss, s1, ss, b1, one = self
        return (bs + bss * s) * b * s + (s1 + ss * s) * s + b1 * b + one

    def dominates(self, o: "Form") -> bool:
        a0, a1, a2, a3, a4, a5 = self
        b0, b1, b2, b3, b4, b5 = o
        return a0 >= b0 and a1 >= b1 and a2 >= b2 and a3 >= b3 and a4 >= b4 and a5 >= b5


ZERO = Form()
BS = Form(bs=1)
BSS = Form(bss=1)
S = Form(s=1)
SS = Form(ss=1)
B = Form(b=1)
ONE = Form(one=1)


@record(kw_only=False)
class Regime:
    """How dtypes flow in a recipe: parameter bytes, and the autocast compute bytes (0 = none)."""

    param: int
    """Bytes of a parameter element and of the residual stream (4 or 2)."""
    autocast: int = 0
    """torch.autocast's lower-precision bytes (2), or 0 when autocast is off."""
    fp16: bool = False
    """The 16-bit type is float16 (not bfloat16): CUDA fuses softmax(fp16 -> fp32)."""

    @property
    def compute(self) -> int:
        """Bytes of a matmul output."""
        return self.autocast or self.param


class _Storage:
    __slots__ = ("nbytes", "cat", "saved_by", "held", "name", "small")

    def __init__(self, nbytes: Form, cat: str, name: str) -> None:
        self.nbytes = nbytes
        self.cat = cat
        self.saved_by: list[int] = []
        self.held = False
        self.name = name
        self.small = False
        """A reduction's output (a mean, LayerNorm's mean and rstd): torch.compile's partitioner
        never recomputes it (``ban_recompute_reductions``) and always materializes it."""


class Tensor:
    """A symbolic tensor: a view of a storage, with a dtype size and a requires-grad flag."""

    __slots__ = ("numel", "dt", "grad", "st", "param", "name", "view_of", "gathered_from")

    def __init__(self, numel: Form, dt: int, grad: bool, st: _Storage | None, *, param: bool = False,
                 name: str = "", view_of: "Tensor | None" = None) -> None:
        self.numel = numel
        self.dt = dt
        self.grad = grad
        self.st = st
        self.param = param
        self.name = name
        self.view_of = view_of
        self.gathered_from: Tensor | None = None
        """Sequence parallelism: the sequence shard this tensor was all-gathered from (a
        column-parallel linear saves the shard and gathers it again in backward)."""

    @property
    def nbytes(self) -> Form:
        return self.numel * self.dt


@dataclass
class _Op:
    name: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    saved: list[_Storage]
    bwd_temp: Form = ZERO
    """Extra bytes a backward kernel allocates internally while it runs (flash's dq accumulator)."""
    split_grad: bool = False
    """Backward allocates one full-size gradient of the (single) input from per-output pieces."""
    fwd_temp: Form = ZERO
    """Extra bytes the forward kernel allocates internally while it runs."""
    region: str = ""
    """Name of the recompute region the op belongs to (selective checkpointing)."""
    live: tuple = ()
    """Tensors referenced until the op returns without being its autograd inputs (the argument
    of a function that converts it first)."""
    promotes: bool = False
    """An elementwise product whose backward computes an operand's gradient in the (wider)
    output dtype before casting it down (type promotion)."""
    kind: str = "pointwise"
    """What torch.compile's partitioner sees: ``extern`` (a matmul or attention kernel, never
    recomputed, its inputs materialized), ``random`` (dropout: never recomputed), ``reduction``,
    or ``pointwise`` (elementwise, views, casts, copies, softmax: recomputable and fusible)."""
    compiled: bool = False
    """Recorded inside a torch.compile region (a compiled layer, the compiled loss)."""


class Graph:
    """Records the forward ops of one block (a layer, or the embeddings, or the head and loss)."""

    def __init__(self, regime: Regime) -> None:
        self.r = regime
        self.ops: list[_Op] = []
        self.storages: list[_Storage] = []
        self.weight_copies: dict[int, Tensor] = {}
        self.region = ""
        self.triggers: dict[str, int] = {}
        """Region instance -> the op whose backward starts its recompute, where that is not the
        region's own last op (Megatron's ``discard_output_and_register_recompute`` hooks the
        recompute on a later tensor's gradient)."""
        self.kept: set[int] = set()
        self.compiling = False
        """Ops recorded while set belong to a torch.compile region."""
        self._ln_stats: dict[int, tuple[Tensor, Tensor]] = {}

    # ---- tensor creation -------------------------------------------------------------------

    def _new(self, numel: Form, dt: int, grad: bool, cat: str = "act", name: str = "") -> Tensor:
        st = _Storage(numel * dt, cat, name)
        self.storages.append(st)
        return Tensor(numel, dt, grad, st, name=name)

    def input(self, numel: Form, dt: int, *, grad: bool = True, name: str = "x") -> Tensor:
        """A tensor that exists before the block (its bytes belong to whoever saves it first)."""
        return self._new(numel, dt, grad, "input", name)

    def constant(self, numel: Form, dt: int, name: str = "const") -> Tensor:
        """A tensor alive for the whole step that needs no gradient (cos/sin tables, masks, ids)."""
        t = self._new(numel, dt, False, "const", name)
        t.st.held = True
        return t

    def param(self, numel: int, name: str = "w", *, trainable: bool = True) -> Tensor:
        return Tensor(ONE * numel, self.r.param, trainable, None, param=True, name=name)

    def view(self, x: Tensor, numel: Form | None = None) -> Tensor:
        return Tensor(x.numel if numel is None else numel, x.dt, x.grad, x.st, param=x.param,
                      name=x.name + "'", view_of=x)

    def keep(self, x: Tensor) -> None:
        """Keep ``x`` alive until the end of this block (a local variable of the layer's
        forward, such as the attention weights it unpacks and ignores)."""
        self.kept.add(id(x.st))

    def recompute_at_last_op(self, region: str) -> None:
        """The recompute of ``region`` (an instance name) starts when the backward reaches the
        op recorded last (the hook on that op's output gradient)."""
        self.triggers[region] = len(self.ops) - 1

    def hold(self, x: Tensor) -> None:
        """Keep ``x`` alive until the end of the block's forward (a Python reference or a cache)."""
        if x.st is not None:
            x.st.held = True

    # ---- recording -------------------------------------------------------------------------

    def _op(self, name: str, inputs: Iterable[Tensor], outputs: list[Tensor],
            saved: Iterable[Tensor] = (), bwd_temp: Form = ZERO, split_grad: bool = False,
            fwd_temp: Form = ZERO, kind: str = "pointwise") -> None:
        i = len(self.ops)
        inputs = list(inputs)
        sv: list[_Storage] = []
        for t in saved:
            if t.st is not None and t.st not in sv:
                sv.append(t.st)
                t.st.saved_by.append(i)
        self.ops.append(_Op(name, inputs, outputs, sv, bwd_temp, split_grad, fwd_temp, self.region,
                            kind=kind, compiled=self.compiling))

    def _cast(self, x: Tensor, dt: int) -> Tensor:
        """``x.to(dt)``: the same tensor when the size already matches (a no-op), else a copy.
        Under autocast a parameter's cast is cached (one copy per weight per step)."""
        if x.dt == dt:
            return x
        if x.param:
            key = id(x)
            if key not in self.weight_copies:
                y = self._new(x.numel, dt, True, "autocast", x.name + ".cast")
                self._op("cast_w", [x], [y])
                self.weight_copies[key] = y
            return self.weight_copies[key]
        y = self._new(x.numel, dt, x.grad, "act", x.name + ".to")
        self._op("to", [x], [y])
        return y

    def to(self, x: Tensor, dt: int) -> Tensor:
        return self._cast(x, dt)

    @staticmethod
    def _promote(*xs: Tensor) -> int:
        return max(x.dt for x in xs)

    # ---- ops (each mirrors its autograd formula's saved tensors) ---------------------------

    def linear(self, x: Tensor, w: Tensor, out: Form, *, name: str = "linear",
               quantized: int = 0, autocast: bool = True) -> Tensor:
        """nn.Linear / Conv1D / addmm: saves the input when the weight needs a gradient and the
        weight when the input does (parameters are not activations). ``quantized`` > 0 is a
        frozen 4-bit base weight of that many 16-bit bytes (bitsandbytes MatMul4Bit): the input
        is saved whenever it needs a gradient, and a dequantized copy of the weight exists while
        the matmul runs, forward and backward."""
        if self.r.autocast and autocast:
            x = self._cast(x, self.r.autocast)
            if not quantized:
                w = self._cast(w, self.r.autocast)
        y = self._new(out, self._promote(x, w) if not quantized else x.dt, x.grad or w.grad,
                      "act", name)
        saved = []
        bwd_temp = ONE * quantized
        if w.grad or (quantized and x.grad):
            if x.gathered_from is not None:
                # Megatron SP: the shard is saved, backward all-gathers it again for the
                # weight gradient (a full-size buffer while the op's backward runs)
                saved.append(x.gathered_from)
                bwd_temp = bwd_temp + x.nbytes
            else:
                saved.append(x)
        if x.grad and not w.param and not quantized:
            saved.append(w)
        self._op(name, [x, w], [y], saved=saved, bwd_temp=bwd_temp, fwd_temp=ONE * quantized,
                 kind="extern")
        return y

    def quantize(self, x: Tensor, dt: object) -> Tensor:
        """A quantize kernel's narrow copy of ``x`` (DeepSeek-V3's cached FP8 SwiGLU inputs): an
        extern kernel, so a compiled layer keeps the copy it saves rather than recomputing it
        from ``x`` as it would a cast."""
        if x.dt == dt:
            return x
        y = self._new(x.numel, dt, x.grad, "act", x.name + ".quantized")
        self._op("quantize", [x], [y], kind="extern")
        return y

    def sp_gather(self, x: Tensor, full: Form, name: str = "sp.all_gather") -> Tensor:
        """Sequence parallelism: all-gather the sequence shard ``x`` into the full sequence (a
        buffer alive until its last reader; backward reduce-scatters its gradient)."""
        y = self._new(full, x.dt, x.grad, "act", name)
        y.gathered_from = x
        self._op(name, [x], [y], kind="extern")
        return y

    def sp_scatter(self, x: Tensor, part: Form, name: str = "sp.reduce_scatter") -> Tensor:
        """Sequence parallelism: reduce-scatter a row-parallel output to this rank's shard
        (backward all-gathers the gradient)."""
        y = self._new(part, x.dt, x.grad, "act", name)
        self._op(name, [x], [y], kind="extern")
        return y

    def matmul(self, a: Tensor, b: Tensor, out: Form, name: str = "matmul", *,
               autocast: bool = True) -> Tensor:
        """torch.matmul of two activations (attention): saves both operands. ``autocast=False``
        for matmuls inside a kernel (SDPA's math path), which autocast does not see."""
        if self.r.autocast and autocast:
            a = self._cast(a, self.r.autocast)
            b = self._cast(b, self.r.autocast)
        y = self._new(out, self._promote(a, b), a.grad or b.grad, "act", name)
        self._op(name, [a, b], [y], saved=[a, b], kind="extern")
        return y

    def contiguous(self, x: Tensor, name: str = "copy") -> Tensor:
        """A copy (reshape of a non-contiguous view, ``.contiguous()``): saves nothing."""
        y = self._new(x.numel, x.dt, x.grad, "act", name)
        self._op(name, [x], [y])
        return y

    def expand_copy(self, x: Tensor, numel: Form, name: str = "expand") -> Tensor:
        """``x`` broadcast to more heads and copied (repeat_kv's expand + reshape)."""
        y = self._new(numel, x.dt, x.grad, "act", name)
        self._op(name, [x], [y])
        return y

    def cat(self, xs: list[Tensor], name: str = "cat") -> Tensor:
        numel = ZERO
        for x in xs:
            numel = numel + x.numel
        y = self._new(numel, self._promote(*xs), any(x.grad for x in xs), "act", name)
        self._op(name, xs, [y])
        return y

    def split(self, x: Tensor, parts: list[Form]) -> list[Tensor]:
        """chunk / split: views of one storage; backward concatenates a full-size gradient."""
        outs = [Tensor(p, x.dt, x.grad, x.st, name=f"{x.name}[{i}]") for i, p in enumerate(parts)]
        self._op("split", [x], outs, split_grad=True)
        return outs

    def add(self, a: Tensor, b: Tensor, name: str = "add") -> Tensor:
        y = self._new(a.numel, self._promote(a, b), a.grad or b.grad, "act", name)
        self._op(name, [a, b], [y])
        return y

    def scale(self, x: Tensor, name: str = "scale") -> Tensor:
        """Multiply or divide by a Python number: saves nothing."""
        y = self._new(x.numel, x.dt, x.grad, "act", name)
        self._op(name, [x], [y])
        return y

    def mul(self, a: Tensor, b: Tensor, out: Form | None = None, name: str = "mul") -> Tensor:
        """Elementwise product: saves b when a needs a gradient and a when b does."""
        saved = ([b] if a.grad else []) + ([a] if b.grad else [])
        y = self._new(out if out is not None else a.numel, self._promote(a, b), a.grad or b.grad,
                      "act", name)
        self._op(name, [a, b], [y], saved=saved)
        self.ops[-1].promotes = True
        return y

    def unary_saves_input(self, x: Tensor, name: str, fp32: bool = False, *,
                          temps: tuple[int, int] = (0, 0)) -> Tensor:
        """silu, gelu (exact or tanh-approximate), pow(x, n): the input is saved. ``temps``:
        (forward, backward) temporaries of the input's size a composite function allocates
        while it runs (an autograd.Function written in elementwise ops)."""
        if fp32 and self.r.autocast:
            x = self._cast(x, 4)
        y = self._new(x.numel, x.dt, x.grad, "act", name)
        self._op(name, [x], [y], saved=[x], fwd_temp=x.nbytes * temps[0],
                 bwd_temp=x.nbytes * temps[1])
        return y

    def unary_saves_output(self, x: Tensor, name: str, fp32: bool = False) -> Tensor:
        """tanh, sigmoid, relu, rsqrt: the output is saved."""
        if fp32 and self.r.autocast:
            x = self._cast(x, 4)
        y = self._new(x.numel, x.dt, x.grad, "act", name)
        self._op(name, [x], [y], saved=[y])
        return y

    def reduce(self, x: Tensor, out: Form, name: str = "mean") -> Tensor:
        """mean / sum over the last dimension: saves nothing (only the shape)."""
        y = self._new(out, x.dt, x.grad, "act", name)
        y.st.small = True
        self._op(name, [x], [y], kind="reduction")
        return y

    def softmax(self, x: Tensor, dt: int | None = None, *, log: bool = False,
                name: str = "softmax") -> Tensor:
        """softmax / log_softmax: saves the output. ``dt`` is an explicit dtype argument; under
        autocast a softmax without one runs in fp32 (CUDA's fp32_set_opt_dtype list)."""
        out_dt = dt if dt is not None else (4 if self.r.autocast else x.dt)
        orig = x
        if out_dt != x.dt and not (self.r.fp16 and not log):
            # at::softmax converts the input first (input.toType(dtype)); only a CUDA float16
            # input takes the fused half-to-float kernel
            x = self._cast(x, out_dt)
        y = self._new(x.numel, out_dt, x.grad, "act", name)
        self._op(name, [x], [y], saved=[y])
        if orig is not x:
            self.ops[-1].live = (orig,)
        return y

    def layer_norm(self, x: Tensor, rows: Form, w: Tensor | None, name: str = "layer_norm") -> Tensor:
        """native_layer_norm: saves the input and fp32 mean and rstd per row (CUDA's accumulate
        type); autocast runs it in fp32."""
        if self.r.autocast:
            x = self._cast(x, 4)
        stats = self._ln_stats.get(id(x.st)) if self.compiling else None
        if stats is None:
            mean = self._new(rows, 4, False, "act", name + ".mean")
            rstd = self._new(rows, 4, False, "act", name + ".rstd")
            mean.st.small = rstd.st.small = True
            stats = self._ln_stats[id(x.st)] = (mean, rstd)
        # a compiled graph computes the statistics of one input once (AOTAutograd's CSE: two
        # LayerNorms of the same tensor, GPT-NeoX's parallel residual, share them)
        mean, rstd = stats
        y = self._new(x.numel, x.dt, x.grad or (w is not None and w.grad), "act", name)
        self._op(name, [x] + ([w] if w is not None else []), [y, mean, rstd], saved=[x, mean, rstd])
        return y

    def dropout(self, x: Tensor, p: float, name: str = "dropout") -> Tensor:
        """CUDA's fused native_dropout: a 1-byte bool mask is saved; p == 0 is a no-op."""
        if p <= 0:
            return x
        mask = self._new(x.numel, 1, False, "act", name + ".mask")
        y = self._new(x.numel, x.dt, x.grad, "act", name)
        self._op(name, [x], [y, mask], saved=[mask], kind="random")
        return y

    def embedding(self, ids: Tensor, w: Tensor, out: Form, name: str = "embedding") -> Tensor:
        """Saves the indices (an input tensor that exists anyway)."""
        y = self._new(out, w.dt, True, "act", name)
        self._op(name, [w], [y], saved=[ids])
        return y

    def saved_const(self, numel: Form, dt: int, name: str) -> Tensor:
        """An index tensor made in the forward (no gradient) that a later op saves."""
        return self._new(numel, dt, False, "act", name)

    def index(self, x: Tensor, out: Form, idx: Tensor | None = None, name: str = "index") -> Tensor:
        """x[idx] (a gather of rows): saves the indices; backward scatters into a full-size gradient."""
        y = self._new(out, x.dt, x.grad, "act", name)
        self._op(name, [x], [y], saved=[idx] if idx is not None else [])
        return y

    def sdpa_flash(self, q: Tensor, k: Tensor, v: Tensor, heads: int, head_dim: int, *,
                   kv_heads: int, out_copy_layout: bool, name: str = "sdpa",
                   extra_saved: list[Tensor] = ()) -> Tensor:
        """FlashAttention-2 (CUDA, 16-bit): saves q, k, v, the output and an fp32 logsumexp of
        b*heads*s. Its backward allocates an fp32 dq accumulator (b*s*heads*head_dim) and, for
        GQA, dk/dv expanded to every query head (flash_api.cpp mha_bwd)."""
        if self.r.autocast:
            q, k, v = (self._cast(t, self.r.autocast) for t in (q, k, v))
        out = self._new(BS * (heads * head_dim), q.dt, True, "act", name)
        lse = self._new(BS * heads, 4, False, "act", name + ".lse")
        temp = BS * (4 * heads * head_dim) + BS * (4 * heads)
        if kv_heads != heads:
            temp = temp + BS * (2 * q.dt * heads * head_dim)
        self._op(name, [q, k, v], [out, lse], saved=[q, k, v, out, lse, *extra_saved],
                 bwd_temp=temp, kind="extern")
        return out

    def sdpa_efficient(self, q: Tensor, k: Tensor, v: Tensor, heads: int, v_dim: int, *,
                       name: str = "sdpa", out_dt: object = None) -> Tensor:
        """CUDA's memory-efficient kernel (xformers' cutlass FMHA), which SDPA runs when flash
        cannot (here: the value's head size differs from the query's, ``sdp_utils.cpp``
        check_head_dim_size_flash): saves q, k, v, the output and an fp32 logsumexp of
        b*heads*s (padded to 32 queries: not modelled). The output is allocated
        (b, s, heads, v_dim) and returned transposed, so the caller's ``transpose(1, 2)
        .contiguous()`` copies nothing. Its backward allocates dq, dk, dv and an fp32 ``delta``
        of b*heads*s, no dq accumulator (``_efficient_attention_backward`` in PyTorch's
        ``attention_backward.cu``; its workspace for fp32 gradient accumulators is not modelled,
        as gpuplan's trace does not emulate it: trace/_attention.py). ``out_dt``: the output
        stored at that many bytes an element (DeepSeek-V3's E5M6, 3/2); None: q's dtype."""
        if self.r.autocast:
            q, k, v = (self._cast(t, self.r.autocast) for t in (q, k, v))
        out = self._new(BS * (heads * v_dim), out_dt or q.dt, True, "act", name)
        lse = self._new(BS * heads, 4, False, "act", name + ".lse")
        self._op(name, [q, k, v], [out, lse], saved=[q, k, v, out, lse],
                 bwd_temp=BS * (4 * heads), kind="extern")
        return out

    def cross_entropy(self, logits: Tensor, rows: Form, vocab: int, name: str = "loss") -> Tensor:
        """F.cross_entropy = log_softmax(x, dtype=x.dtype) (output saved) + nll_loss (saves its
        input). autocast leaves the explicit dtype alone but runs nll_loss in fp32 (CUDA's fp32
        list): a 16-bit input's log-probabilities are copied to fp32 and that copy is saved too."""
        lsm = self.softmax(logits, dt=logits.dt, log=True, name=name + ".log_softmax")
        saved = [lsm]
        if self.compiling:
            # compiled, log_softmax is recomputed in the backward from the logits and the row
            # statistics its decomposition saves: amax and log(sum(exp)), fp32 per row
            stats = self._new(rows, 8, False, "act", name + ".stats")
            stats.st.small = True
            self.ops[-1].outputs.append(stats)
            saved.append(stats)
        x = self._cast(lsm, 4) if self.r.autocast else lsm
        saved[0] = x
        loss = self._new(ONE, x.dt, True, "act", name)
        self._op(name + ".nll", [x], [loss], saved=saved)
        return loss

    def touch(self, *xs: Tensor) -> None:
        """A Python reference keeps ``xs`` alive until this point (a local variable of the
        function that is still running)."""
        self._op("touch", [], [])
        self.ops[-1].live = tuple(xs)


def prune(forms: list[tuple[Form, ...]]) -> list[tuple[Form, ...]]:
    """Drop candidate points whose total form is dominated by another's (never the peak): a
    skyline, built in one pass against the points kept so far."""
    kept: list[tuple[Form, tuple]] = []
    for f in forms:
        t = ZERO
        for x in f:
            t = t + x
        if any(k.dominates(t) for k, _ in kept):
            continue
        kept = [(k, g) for k, g in kept if not t.dominates(k)]
        kept.append((t, f))
    return [f for _, f in kept]


@dataclass
class LayerProfile:
    """What one block does to memory, as forms in (b, s).

    Candidate points are (activations, temporaries, gradients) triples relative to the state
    before the block; the peak inside the block is the largest total among them.
    """

    saved: Form = ZERO
    """Bytes saved for backward by the block and alive after its forward."""
    autocast_copies: Form = ZERO
    """16-bit weight copies autocast made in the block (alive until its backward)."""
    held: Form = ZERO
    """Tensors the block keeps alive until the end of the whole forward (KV cache, masks)."""
    fwd_points: list = field(default_factory=list)
    """Forward candidates (act, temp): saved-so-far and non-saved live tensors."""
    bwd_points: list = field(default_factory=list)
    """Backward candidates (act, temp, grads) relative to the state before the block's backward
    (its saved tensors and the incoming gradient counted in that state)."""
    bwd_points_acc: list = field(default_factory=list)
    """The same, for a micro-step whose parameter gradients already exist: each new parameter
    gradient is a temporary summed into ``.grad`` (gradient accumulation, tied weights)."""
    bwd_points_inflight: list = field(default_factory=list)
    """``bwd_points`` with each new parameter gradient also counted whole as a temporary: under
    DeepSpeed ZeRO-2/3 autograd makes it full-size and the reduce hook then copies it into the
    gradient bucket and frees it (the kept gradients, ``grads``, are the rank's shard)."""
    grad_out: Form = ZERO
    """The gradient that flows out of the block to the previous one."""
    param_grads: Form = ZERO
    """Parameter-gradient bytes the block's backward leaves behind."""
    region_saved: Form = ZERO
    """Saved bytes inside the recompute region (dropped by selective checkpointing)."""
    region_parts: tuple = ()
    """(region instance, its dropped saved bytes) per dropped region instance, in forward order
    (Megatron-Core's ``--recompute-modules``: one re-run of each in backward)."""
    largest_param: int = 0
    """Elements of the largest trainable parameter the block's backward makes a gradient for."""
    fwd_points_nosave: list = field(default_factory=list)
    """Forward candidates when nothing is kept (a checkpointed layer's forward: the pack hook
    drops what would be saved, so tensors die after their last use)."""


def _root(t: Tensor) -> Tensor:
    while t.view_of is not None:
        t = t.view_of
    return t


def simulate(g: Graph, outputs: list[Tensor], *, param_grad_dt: int,
             drop_region: "str | tuple[str, ...]" = "", recompute: bool = False,
             inference: bool = False, debug: list | None = None,
             discard_outputs: frozenset = frozenset()) -> LayerProfile:
    """Replay the block's forward and backward and return its profile.

    ``outputs`` are the block's results: alive at the end of its forward (the next block, or the
    caller, owns them) and carrying the gradient that starts its backward. ``drop_region`` names
    a region whose saved tensors are not kept in forward (selective checkpointing) and are
    recreated by a recompute when the backward reaches it. ``recompute`` re-runs the whole
    forward just before the backward (full checkpointing): the caller then keeps only the block's
    input. ``drop_region`` may name several regions (the base names of the ops' region
    instances, ``layernorm#1`` -> ``layernorm``); ``discard_outputs``: those of them whose
    outputs are not kept either, even where an op outside saves them (Megatron-Core's
    ``CheckpointWithoutOutput``), and are recomputed with the region.
    """
    prof = LayerProfile()
    drops = _dropped(g.ops, drop_region)
    region_inputs = _region_inputs(g.ops, drops) if drops else set()
    # under torch.inference_mode() nothing is kept for a backward
    keep = set() if inference else _kept_for_backward(g, region_inputs, drops,
                                                       discard_outputs)
    out_st = {id(t.st) for t in outputs if t.st is not None} | g.kept
    fused: set[int] = set()
    if any(op.compiled for op in g.ops):
        if keep:
            keep = _compiled_keep(g, keep)
        fused = _fused_storages(g, keep, out_st)
    inputs_kept = _measure_storages(g, keep, drops, prof)
    fwd = _forward(g, keep, out_st, debug, fused)
    prof.fwd_points = prune(fwd)
    if inference:
        return prof
    back = _Backward(g, outputs, prof, keep, region_inputs, param_grad_dt=param_grad_dt,
                     drop_region=drops, recompute=recompute, debug=debug, fused=fused)
    back.run(g.ops, fwd, inputs_kept)
    return prof


# ---- torch.compile -------------------------------------------------------------------------------
#
# What a compiled region keeps for its backward is chosen by AOTAutograd's min-cut partitioner
# (torch/_functorch/partitioners.py, min_cut_rematerialization_partition, with the default
# config: ban_recompute_not_in_allowlist, _reductions, _materialized_backward): a tensor the
# backward needs is saved when it comes out of a matmul or attention kernel, a random op or a
# reduction, or when a matmul/attention backward reads it (it must be materialized then);
# otherwise it is recomputed in the backward from the tensors it was computed from (elementwise
# ops, casts, views, softmax are on the recomputable allowlist), which are then needed instead.
# Inductor fuses the recomputable ops: a tensor they make that no matmul, attention kernel, eager
# op or output reads is never materialized, in the forward or as a gradient in the backward.
# Held to AOTAutograd's own partition of transformers' layers in
# tests/integration/test_compile_partition.py.


def _producers(g: Graph) -> dict[int, int]:
    producer: dict[int, int] = {}
    for i, op in enumerate(g.ops):
        for t in op.outputs:
            if t.st is not None:
                producer.setdefault(id(t.st), i)
    return producer


def _compiled_keep(g: Graph, need: set[int]) -> set[int]:
    """The storages a compiled region keeps for its backward, from those eager autograd would
    keep (``need``): see the comment above."""
    ops = g.ops
    producer = _producers(g)
    by_id = {id(st): st for st in g.storages}
    materialized = {id(st) for op in ops if op.kind == "extern" or not op.compiled
                    for st in op.saved}
    keep: set[int] = set()
    seen: set[int] = set()
    stack = list(need)
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        st = by_id.get(k)
        p = producer.get(k)
        if st is None or p is None or st.cat != "act" or st.small or k in materialized:
            keep.add(k)
            continue
        op = ops[p]
        if not op.compiled or op.kind in ("extern", "random", "reduction"):
            keep.add(k)
            continue
        # recomputed in the backward: what it is computed from is needed instead (constants such
        # as the rotary tables live all step; parameters are free to read)
        stack.extend(id(t.st) for t in op.inputs
                     if t.st is not None and not t.param and t.st.cat in ("act", "input"))
    return keep


def _fused_storages(g: Graph, keep: set[int], out_st: set[int]) -> set[int]:
    """Storages inductor never materializes: made by a compiled elementwise op, read only by
    compiled non-matmul ops, neither kept for the backward nor an output or held."""
    ops = g.ops
    producer = _producers(g)
    read_by_extern: set[int] = set()
    for op in ops:
        if op.kind == "extern" or not op.compiled:
            read_by_extern.update(id(t.st) for t in op.inputs if t.st is not None)
    fused: set[int] = set()
    for st in g.storages:
        k = id(st)
        p = producer.get(k)
        if (p is None or st.cat != "act" or st.small or st.held or k in keep or k in out_st
                or k in read_by_extern):
            continue
        op = ops[p]
        if op.compiled and op.kind in ("pointwise", "random"):
            fused.add(k)
    return fused


def _base(region: str) -> str:
    """A region instance's base name (``layernorm#2`` -> ``layernorm``)."""
    return region.partition("#")[0]


def _dropped(ops: list[_Op], drop_region: "str | tuple[str, ...]") -> frozenset:
    """The region instances of ``ops`` whose base name is dropped."""
    names = {drop_region} if isinstance(drop_region, str) else set(drop_region)
    names.discard("")
    return frozenset(op.region for op in ops if op.region and _base(op.region) in names)


def _region_inputs(ops: list[_Op], regions: frozenset) -> set[int]:
    """Selective recompute keeps the region's inputs (Q, K, V for the attention core) so that the
    region can be re-run: the storages of activations and block inputs that ops of the region
    read and no op of the region made."""
    producer: dict[int, int] = {}
    for i, op in enumerate(ops):
        for t in op.outputs:
            if t.st is not None:
                producer.setdefault(id(t.st), i)
    found: set[int] = set()
    for op in ops:
        if op.region not in regions:
            continue
        for t in op.inputs:
            if t.st is None or t.param:
                continue
            p = producer.get(id(t.st))
            if (p is None or ops[p].region != op.region) and t.st.cat in ("act", "input"):
                found.add(id(t.st))
    return found


def _kept_for_backward(g: Graph, region_inputs: set[int], drops: frozenset,
                       discard_outputs: frozenset = frozenset()) -> set[int]:
    """The storages the forward keeps for the backward: saved by an op outside the dropped
    regions, or an input of one of them; less the outputs of a dropped region that discards
    its outputs (recomputed with it)."""
    ops = g.ops
    keep = region_inputs | {
        id(st) for st in g.storages
        if any(ops[i].region not in drops for i in st.saved_by)}
    if discard_outputs:
        producer = _producers(g)
        for st in g.storages:
            p = producer.get(id(st))
            if (p is not None and st.cat == "act" and ops[p].region in drops
                    and _base(ops[p].region) in discard_outputs):
                keep.discard(id(st))
    return keep


def _instance_of(g: Graph, st: _Storage, drops: frozenset, producer: dict[int, int]) -> str:
    """The dropped region instance a dropped saved storage is recomputed by: its producer's,
    else its first saver's, else (a tensor a compiled layer's partition recomputes) the
    instance the backward reaches first, as when there was one region per layer."""
    p = producer.get(id(st))
    if p is not None and g.ops[p].region in drops:
        return g.ops[p].region
    inst = next((g.ops[i].region for i in st.saved_by if g.ops[i].region in drops), "")
    if inst:
        return inst
    return max(drops, key=lambda r: g.triggers.get(r, max(
        i for i, op in enumerate(g.ops) if op.region == r)))


def _measure_storages(g: Graph, keep: set[int], drops: frozenset, prof: LayerProfile) -> Form:
    """Fill the profile's sizes (saved, autocast copies, held, the dropped region's saved bytes);
    return the bytes of the block's inputs among the saved ones."""
    inputs_kept = ZERO
    producer = _producers(g) if drops else {}
    parts: dict[str, Form] = {}
    for st in g.storages:
        if st.cat == "autocast":
            prof.autocast_copies = prof.autocast_copies + st.nbytes
        elif st.cat in ("act", "input") and id(st) in keep:
            prof.saved = prof.saved + st.nbytes
            if st.cat == "input":
                inputs_kept = inputs_kept + st.nbytes
        if drops and st.cat == "act" and st.saved_by and id(st) not in keep:
            prof.region_saved = prof.region_saved + st.nbytes
            inst = _instance_of(g, st, drops, producer)
            parts[inst] = parts.get(inst, ZERO) + st.nbytes
        if st.held and st.cat == "act" and not (st.saved_by and id(st) in keep):
            prof.held = prof.held + st.nbytes
    prof.region_parts = tuple(parts.items())
    return inputs_kept


def _forward(g: Graph, keep: set[int], out_st: set[int],
             debug: list | None, fused: set[int] = frozenset()) -> list[tuple[Form, Form]]:
    """The forward: each op allocates its outputs, then what is neither saved, held, an output of
    the block nor used again is freed. Returns (kept-for-backward, other live) bytes before the
    first op and at each op."""
    ops = g.ops
    last_use: dict[int, int] = {}
    for i, op in enumerate(ops):
        for t in (*op.inputs, *op.live):
            if t.st is not None:
                last_use[id(t.st)] = i
    act = ZERO
    tmp = ZERO
    alive: set[int] = set()
    for st in g.storages:
        if st.cat == "input":
            alive.add(id(st))
            if id(st) in keep:
                act = act + st.nbytes
            else:
                tmp = tmp + st.nbytes
    fwd: list[tuple[Form, Form]] = [(act, tmp)]
    for i, op in enumerate(ops):
        for t in op.outputs:
            st = t.st
            if st is None or id(st) in alive or id(st) in fused:
                continue
            alive.add(id(st))
            if st.cat == "act" and id(st) in keep:
                act = act + st.nbytes
            else:
                tmp = tmp + st.nbytes
        fwd.append((act, tmp + op.fwd_temp))
        if debug is not None:
            debug.append(("F " + op.name, (act, tmp + op.fwd_temp, ZERO, ZERO)))
        for t in (*op.inputs, *op.live, *op.outputs):
            st = t.st
            if st is None or id(st) not in alive or st.held or id(st) in out_st:
                continue
            if st.cat in ("autocast", "const") or id(st) in keep:
                continue
            if last_use.get(id(st), -1) <= i:
                alive.discard(id(st))
                tmp = tmp - st.nbytes
    return fwd


def _promotion_copy(op: _Op) -> Form:
    """Type promotion (a 16-bit operand times an fp32 one): the operand's gradient is computed in
    the output dtype first, then cast down -- both exist for a moment."""
    out_dt = max((t.dt for t in op.outputs if t.grad), default=0)
    promo = ZERO
    if op.promotes:
        for t in op.inputs:
            if t.grad and not t.param and t.dt < out_dt:
                promo = promo + t.numel * out_dt
    return promo


class _Backward:
    """The backward walk of one block, relative to the state before it: the block's kept saved
    tensors, its autocast copies and the gradients of its outputs are already counted by the
    caller. Candidate points are (activations, temporaries, parameter gradients, new parameter
    gradients)."""

    def __init__(self, g: Graph, outputs: list[Tensor], prof: LayerProfile, keep: set[int],
                 region_inputs: set[int], *, param_grad_dt: int, drop_region: frozenset,
                 recompute: bool, debug: list | None, fused: set[int] = frozenset()) -> None:
        self.prof, self.keep, self.param_grad_dt = prof, keep, param_grad_dt
        self.drop_region, self.recompute, self.debug = drop_region, recompute, debug
        self.fused = fused
        self.param_done: set[int] = set()
        compiled = any(op.compiled for op in g.ops)
        self.grads: dict[int, Form] = {}
        for t in outputs:
            if t.grad:
                self.grads[id(_root(t))] = t.nbytes
        # saved storages still waiting for their last user's backward
        self.pending: dict[int, int] = {}
        for st in g.storages:
            if st.saved_by and (st.cat == "autocast" or id(st) in keep
                                or (recompute and not compiled)):
                self.pending[id(st)] = len(st.saved_by)
            elif id(st) in region_inputs:
                self.pending[id(st)] = 0
        # a compiled region keeps tensors eager autograd does not save (a matmul's output to
        # recompute an elementwise op from): freed once the backward reaches their producer
        self.release_at: dict[int, list[_Storage]] = {}
        if compiled:
            producer = _producers(g)
            for st in g.storages:
                p = producer.get(id(st))
                if id(st) in keep and not st.saved_by and st.cat == "act" and p is not None:
                    self.release_at.setdefault(p, []).append(st)
        self.act = ZERO
        self.tmp = ZERO
        self.pgrad = ZERO
        self.points: list[tuple[Form, Form, Form, Form]] = []
        # the dropped region instances: where each one's recompute starts (the op whose
        # backward triggers it) and its bytes; its dropped storages wait for their users too
        self.triggers: dict[str, int] = {}
        for i, op in enumerate(g.ops):
            if op.region in drop_region:
                self.triggers[op.region] = g.triggers.get(op.region, i)
        self.parts = dict(prof.region_parts)
        self.recomputed: set[str] = set()
        if drop_region:
            for st in g.storages:
                if st.cat == "act" and st.saved_by and id(st) not in keep:
                    self.pending.setdefault(id(st), len(st.saved_by))

    def run(self, ops: list[_Op], fwd: list[tuple[Form, Form]], inputs_kept: Form) -> None:
        prof = self.prof
        if self.recompute:
            # Full checkpointing: the caller holds only the block input; re-run the forward first.
            for a, t in fwd:
                self.points.append((a - inputs_kept, t, ZERO, ZERO))
            self.act = prof.saved - inputs_kept
            self.tmp = prof.autocast_copies
        for i in range(len(ops) - 1, -1, -1):
            self._gradients(ops[i], i)
            self._release_saved(ops[i])
            for st in self.release_at.get(i, ()):
                self.act = self.act - st.nbytes
        prof.grad_out = ZERO
        for f in self.grads.values():
            prof.grad_out = prof.grad_out + f
        prof.param_grads = self.pgrad
        self.points.append((self.act, self.tmp, self.pgrad, ZERO))
        prof.bwd_points = prune([(a, t, p) for a, t, p, _ in self.points])
        prof.bwd_points_acc = prune([(a, t + n, ZERO) for a, t, _, n in self.points])
        prof.bwd_points_inflight = prune([(a, t + n, p) for a, t, p, n in self.points])

    def _gradients(self, op: _Op, i: int) -> None:
        """The op's backward, when a gradient reaches it: its inputs' gradients are allocated,
        its outputs' gradients freed."""
        grads = self.grads
        out_keys = {id(_root(t)) for t in op.outputs if t.grad}
        if not any(k in grads for k in out_keys):
            return
        for inst, at in self.triggers.items():
            if at >= i and inst not in self.recomputed:
                # the region's forward runs again: its saved tensors exist again, one layer's
                self.recomputed.add(inst)
                self.act = self.act + self.parts.get(inst, ZERO)
                self.points.append((self.act, self.tmp, self.pgrad, ZERO))
        new_keys, accum, new_param = self._input_gradients(op)
        new = ZERO
        for f in new_keys.values():
            new = new + f
        promo = ZERO if op.compiled else _promotion_copy(op)  # inductor fuses the cast
        self.points.append((self.act, self.tmp + new + accum + promo + op.bwd_temp,
                            self.pgrad + new_param, new_param))
        if self.debug is not None:
            self.debug.append((op.name, self.points[-1]))
        grads.update(new_keys)
        self.tmp = self.tmp + new
        self.pgrad = self.pgrad + new_param
        in_keys = {id(_root(t)) for t in op.inputs}
        for k in out_keys:
            if k in grads and k not in in_keys:
                self.tmp = self.tmp - grads.pop(k)

    def _input_gradients(self, op: _Op) -> tuple[dict[int, Form], Form, Form]:
        """New activation gradients by storage, the bytes summed into pending ones (a tensor that
        feeds several ops), and new parameter-gradient bytes."""
        accum = ZERO
        new_param = ZERO
        new_keys: dict[int, Form] = {}
        if op.split_grad:
            k = id(_root(op.inputs[0]))
            if k in self.grads:
                accum = accum + op.inputs[0].nbytes
            else:
                new_keys[k] = op.inputs[0].nbytes
            return new_keys, accum, new_param
        for t in op.inputs:
            if not t.grad:
                continue
            if t.param:
                if id(t) in self.param_done:  # a weight used again (a chunked output
                    accum = accum + t.numel * self.param_grad_dt  # projection): summed in
                else:
                    new_param = new_param + t.numel * self.param_grad_dt
                    self.param_done.add(id(t))
                    self.prof.largest_param = max(self.prof.largest_param, t.numel(0, 0))
                continue
            k = id(_root(t))
            if t.st is not None and id(t.st) in self.fused:
                new_keys.setdefault(k, ZERO)  # a fused op's gradient: never materialized
            elif k in self.grads or k in new_keys:
                accum = accum + t.nbytes
            else:
                new_keys[k] = t.nbytes
        return new_keys, accum, new_param

    def _release_saved(self, op: _Op) -> None:
        """Saved tensors are freed once their last user's backward has run."""
        for st in op.saved:
            k = id(st)
            if k not in self.pending:
                continue
            self.pending[k] -= 1
            if self.pending[k]:
                continue
            del self.pending[k]
            if st.cat == "autocast":
                self.tmp = self.tmp - st.nbytes
            elif st.cat in ("act", "input") and (k in self.keep or self.recomputed
                                                 or self.recompute):
                self.act = self.act - st.nbytes
