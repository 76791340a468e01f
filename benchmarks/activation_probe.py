"""Measure what a real transformers training step keeps alive, op by op, on the CPU.

This is the measurement the analytic activation model (``gpuplan.memory.activations``) was derived
from and is checked against (``tests/integration/test_activations_probe.py`` runs a few small cases). It runs a
real Hugging Face model with real tensors and records

* every tensor saved for backward (``torch.autograd.graph.saved_tensors_hooks``), attributed to
  the decoder layer that saved it first, deduplicated by storage;
* the live bytes of every storage over the step (a ``TorchDispatchMode`` with weak references to
  storages, as ``torch.distributed._tools.mem_tracker`` does), by phase: forward, backward,
  optimizer step.

The analytic model describes a CUDA run, so the probe emulates what CUDA does differently from the
CPU dispatcher (DESIGN.md, "Tracing on a CPU-only machine"):

* dropout: CUDA's fused ``native_dropout`` keeps a 1-byte bool mask; the CPU path multiplies by a
  float noise tensor of the input's dtype. The probe routes ``F.dropout`` to ``native_dropout``.
* SDPA with dropout: CUDA's flash / memory-efficient kernels apply dropout inside the kernel (no
  mask kept, only an RNG seed); the CPU falls back to the math kernel. The probe runs the kernel
  without dropout (same saved tensors as CUDA's flash with dropout, minus two 8-byte seeds).
* the caching allocator rounds each block up to 512 bytes.
* torch.optim picks ``foreach=True`` for CUDA tensors; the probe passes it explicitly.
* ``amp`` recipes: CUDA autocast's op lists (softmax, layer_norm, pow ... in fp32; matmuls in
  16-bit) are emulated by :class:`CudaAutocast` (the CPU's autocast lists differ).

It has no command line of its own: ``tests/integration/test_activations_probe.py`` and ``tests/integration/test_kv.py``
import it and run the cases.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from gpuplan.models import HF_CLASSES, Architecture, architecture_from_config

ROUND = 512


def _rounded(n: int) -> int:
    return -(-n // ROUND) * ROUND if n else 0


class LiveTracker(TorchDispatchMode):
    """Live bytes per category, over the ops of a step."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[int, str]] = {}
        self.refs: dict[int, weakref.ref] = {}
        self.phase = "init"
        self.total = 0
        self.peaks: dict[str, int] = {}
        self.peak_cats: dict[str, dict[str, int]] = {}
        self.timeline: list[tuple[str, str, int]] = []
        self.record_timeline = False

    def _free(self, key: int, _ref) -> None:
        nb, _ = self.live.pop(key, (0, ""))
        self.refs.pop(key, None)
        self.total -= nb

    def track(self, t: torch.Tensor, cat: str) -> None:
        st = t.untyped_storage()
        key = id(st)
        if key in self.live:
            return
        nb = _rounded(st.nbytes())
        self.live[key] = (nb, cat)
        self.refs[key] = weakref.ref(st, lambda r, k=key: self._free(k, r))
        self.total += nb

    def recategorize(self, t: torch.Tensor, cat: str) -> None:
        key = id(t.untyped_storage())
        if key in self.live:
            self.live[key] = (self.live[key][0], cat)

    def by_cat(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for nb, cat in self.live.values():
            out[cat] = out.get(cat, 0) + nb
        return out

    def _note(self, name: str) -> None:
        if self.total > self.peaks.get(self.phase, -1):
            self.peaks[self.phase] = self.total
            self.peak_cats[self.phase] = self.by_cat()
        if self.record_timeline:
            self.timeline.append((self.phase, name, self.total))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        cat = {"forward": "act", "backward": "temp", "optimizer": "opt_temp"}.get(self.phase, "other")
        tree_map_only(torch.Tensor, lambda t: self.track(t, cat), out)
        self._note(str(func))
        return out


class CudaDropout(TorchFunctionMode):
    """Route dropout to the fused kernel CUDA uses (bool mask), and run SDPA's dropout in-kernel."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            x = args[0]
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if training and 0 < p < 1:
                return torch.native_dropout(x, p, True)[0]
            return x
        if func is F.scaled_dot_product_attention:
            kwargs = dict(kwargs)
            if len(args) > 4:
                args = args[:4] + (0.0,) + args[5:]
            kwargs["dropout_p"] = 0.0
            return func(*args, **kwargs)
        return func(*args, **kwargs)


# CUDA autocast op lists (aten/src/ATen/autocast_mode.cpp, CUDA registrations).
_LOWER = {F.linear, torch.matmul, torch.bmm, torch.baddbmm, torch.addmm, torch.mm, torch.einsum,
          F.scaled_dot_product_attention, F.conv2d, torch.Tensor.matmul, torch.Tensor.__matmul__,
          torch.conv2d}
_FP32 = {F.layer_norm, torch.layer_norm, F.group_norm, torch.pow, torch.Tensor.pow,
         torch.rsqrt, torch.Tensor.rsqrt, torch.exp, torch.log, F.cross_entropy, F.nll_loss,
         F.mse_loss, torch.Tensor.exp, torch.Tensor.log, torch.logsumexp}
_FP32_OPT_DTYPE = {F.softmax, F.log_softmax, torch.softmax, torch.log_softmax,
                   torch.Tensor.softmax, torch.Tensor.log_softmax, torch.sum, torch.Tensor.sum,
                   torch.cumsum, torch.prod}


def _dtype_given(func, args, kwargs) -> bool:
    if kwargs.get("dtype") is not None:
        return True
    pos = 3 if func in (F.softmax, F.log_softmax) else 2
    return len(args) > pos and args[pos] is not None


class CudaAutocast(TorchFunctionMode):
    """torch.autocast(device_type="cuda") on a CPU: casts per CUDA's op lists, with the weight-cast
    cache (leaf tensors that require grad are cast once per autocast region)."""

    def __init__(self, dtype=torch.bfloat16) -> None:
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, torch.Tensor] = {}

    def _cast(self, x, dtype):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype \
                and x.dtype != torch.float64:
            if x.is_leaf and x.requires_grad:
                k = id(x)
                if k not in self.cache:
                    self.cache[k] = x.to(dtype)
                return self.cache[k]
            return x.to(dtype)
        return x

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _LOWER:
            c = lambda x: self._cast(x, self.dtype)  # noqa: E731
            args = tuple(c(a) for a in args)
            kwargs = {k: c(v) for k, v in kwargs.items()}
        elif func in _FP32:
            c = lambda x: self._cast(x, torch.float32)  # noqa: E731
            args = tuple(c(a) for a in args)
            kwargs = {k: c(v) for k, v in kwargs.items()}
        elif func in _FP32_OPT_DTYPE:
            first = args[0] if args else None
            if (isinstance(first, torch.Tensor) and first.is_floating_point()
                    and not _dtype_given(func, args, kwargs)):
                kwargs = dict(kwargs, dtype=torch.float32)
        return func(*args, **kwargs)

    def __exit__(self, *exc):
        self.cache.clear()  # autocast drops its cast cache when the region ends
        return super().__exit__(*exc)


@dataclass
class StepResult:
    saved_by_layer: list[int]
    """Bytes first saved for backward inside each decoder layer (params excluded)."""
    saved_outside: int
    """Saved bytes outside the layers (embeddings, final norm, head, loss)."""
    saved_detail: list[list[tuple[str, tuple, str, int]]]
    peaks: dict[str, int]
    peak_cats: dict[str, dict[str, int]]
    static: dict[str, int]
    timeline: list = field(default_factory=list)


def _layers(model) -> list[torch.nn.Module]:
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers",
                 "bert.encoder.layer", "vit.encoder.layer", "vit.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return list(obj)
        except AttributeError:
            continue
    raise ValueError("no layer list found")


def _step_now(per_param: dict):
    """A post-accumulate-grad hook: step the parameter's own optimizer and free its gradient."""
    def hook(p) -> None:
        per_param[p].step()
        per_param[p].zero_grad(set_to_none=True)
    return hook


def measure_step(model, batch: dict, *, optimizer: str = "adamw", autocast: bool = False,
                 master_fp32: bool = False, grad_accum: int = 1, timeline: bool = False,
                 checkpointing: bool = False, fused: bool = False,
                 in_backward: bool = False) -> StepResult:
    """Two training iterations (forward, loss, backward, step, zero_grad); the second recorded.
    ``in_backward``: one optimizer per parameter, stepped and zeroed by a post-accumulate-grad
    hook as its gradient is ready (torchtune's register_optim_in_bwd_hooks)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if master_fp32:
        masters = [p.detach().float().requires_grad_(True) for p in params]
        opt_params = masters
    else:
        masters = None
        opt_params = params
    per_param = {}
    if in_backward:
        for p in opt_params:
            per_param[p] = torch.optim.AdamW([p], lr=1e-4, foreach=not fused,
                                             fused=fused or None)
            p.register_post_accumulate_grad_hook(_step_now(per_param))
        opt = None
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(opt_params, lr=1e-4, foreach=not fused, fused=fused or None)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(opt_params, lr=1e-4, foreach=True)
    elif optimizer == "sgd-momentum":
        opt = torch.optim.SGD(opt_params, lr=1e-4, momentum=0.9, foreach=True)
    else:
        raise ValueError(optimizer)
    layers = _layers(model)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    current: list[int | None] = [None]
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i))
        layer.register_forward_hook(lambda m, a, o: current.__setitem__(0, None))

    tracker = LiveTracker()
    param_keys = {id(p.untyped_storage()) for p in model.parameters()}
    seen: dict[int, int | None] = {}
    saved_by_layer = [0] * len(layers)
    detail: list[list] = [[] for _ in layers]
    saved_outside = [0]

    def pack(t: torch.Tensor):
        if tracker.phase != "forward":
            return t
        st = t.untyped_storage()
        k = id(st)
        if k in param_keys or k in seen:
            return t
        seen[k] = current[0]
        nb = _rounded(st.nbytes())
        if current[0] is None:
            saved_outside[0] += nb
        else:
            saved_by_layer[current[0]] += nb
            detail[current[0]].append((str(t.dtype).replace("torch.", ""), tuple(t.shape),
                                       str(t.grad_fn) if t.grad_fn else "leaf", nb))
        return t

    def iteration(record: bool):
        for micro in range(grad_accum):
            tracker.phase = "forward"
            ctx = CudaAutocast() if autocast else contextlib.nullcontext()
            hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if (
                record and micro == grad_accum - 1) else contextlib.nullcontext()
            with ctx, hooks:
                loss = model(**batch).loss
            tracker.phase = "backward"
            # checkpoint recompute re-enters the forward's autocast state (torch.utils.checkpoint)
            rctx = CudaAutocast() if (autocast and checkpointing) else contextlib.nullcontext()
            with rctx:
                loss.backward()
            del loss
        tracker.phase = "optimizer"
        if masters is not None:
            for m, p in zip(masters, params):
                m.grad = p.grad.float()
        if opt is not None:
            opt.step()
        if masters is not None:
            with torch.no_grad():
                for m, p in zip(masters, params):
                    p.copy_(m)
                    m.grad = None
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        tracker.phase = "idle"

    with CudaDropout(), tracker:
        for p in model.parameters():
            tracker.track(p, "param")
        for b in model.buffers():
            tracker.track(b, "buffer")
        if masters:
            for m in masters:
                tracker.track(m, "master")
        for v in batch.values():
            tracker.track(v, "input")
        iteration(False)
        for o in ([opt] if opt is not None else list(per_param.values())):
            for st in o.state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor):
                        tracker.recategorize(v, "opt_state")
        tracker.peaks.clear()
        tracker.peak_cats.clear()
        seen.clear()
        tracker.record_timeline = timeline
        iteration(True)
    static = tracker.by_cat()
    return StepResult(saved_by_layer=saved_by_layer, saved_outside=saved_outside[0],
                      saved_detail=detail, peaks=dict(tracker.peaks),
                      peak_cats=dict(tracker.peak_cats), static=static,
                      timeline=tracker.timeline)


def build(family: str, config: dict, *, dtype=torch.float32, attn: str = "sdpa"):
    """A transformers model of ``family`` (the class gpuplan's tensor lists reproduce,
    :data:`gpuplan.models.HF_CLASSES`) built from ``config`` numbers, in train mode."""
    import transformers

    cfg = hf_config(family, config)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    model = getattr(transformers, HF_CLASSES[family])._from_config(cfg, dtype=dtype,
                                                                   attn_implementation=attn)
    model.train()
    return model


def lm_batch(vocab: int, b: int, s: int) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (b, s), generator=g)
    return {"input_ids": ids, "labels": ids.clone()}


def hf_config(family: str, config: dict):
    import transformers

    return transformers.AutoConfig.for_model(family, **config)


def architecture(family: str, config: dict) -> Architecture:
    """The Architecture gpuplan reads from this model's config.json (transformers' config
    object written out, so its defaults are filled in)."""
    return architecture_from_config(hf_config(family, config).to_dict(), name=family)
