"""The traced step: build the model, run the real training (or inference) step twice under the
recorder and the CUDA emulations, and turn the recorded events into a :class:`TraceResult`."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from ..errors import GpuplanError, InputError, UnsupportedError, opt, shown
from ..formats import get_optimizer, get_recipe, get_weight_format
from . import _attention
from ._emulate import cuda_emulation, grouped_mm_override, unpacked_batch_mask
from ._optim import MixedPrecision, host_step_counters, make_optimizer, state_tensors
from ._recorder import Recorder
from ._result import Emulation
from ._spec import Built, ModelSource, build

#: Optimizers torch.optim implements (the others are emulated for their memory; see ``_optim``).
TORCH_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adagrad", "rmsprop")
FUSED_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adagrad")

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_LOSS_SCALE = 65536.0


@dataclass
class StepConfig:
    mode: str
    batch: int
    seq: int
    precision: str
    optimizer: str | None
    optimizer_impl: str
    checkpointing: str
    attention: str


@dataclass
class RunOutput:
    """What one run (fake or real) produced."""

    replay: object
    params: int
    flops: dict[str, float]
    counts: Counter
    notes: list[str]
    recorder: Recorder = field(repr=False)


def _fake_errors() -> tuple[type[BaseException], ...]:
    from torch._subclasses import fake_tensor as ft

    errs: list[type[BaseException]] = [ft.DataDependentOutputException,
                                       ft.DynamicOutputShapeException,
                                       ft.UnsupportedOperatorException,
                                       ft.UnsupportedFakeTensorException]
    try:
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
        errs.append(GuardOnDataDependentSymNode)
    except ImportError:  # pragma: no cover - older torch
        pass
    return tuple(errs)


def _model_dtype(cfg: StepConfig) -> torch.dtype:
    if cfg.mode == "infer":
        return _DTYPES[cfg.precision]
    recipe = get_recipe(cfg.precision)
    if recipe.weight_bytes == 4:
        return torch.float32
    return torch.float16 if recipe.compute_dtype == "fp16" else torch.bfloat16


def _unique_params(model) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


# --------------------------------------------------------------------------------------------------
# Checkpointing


@contextlib.contextmanager
def _selective(model, counts: Counter):
    """Megatron-LM's "selective" recomputation (Korthikanti et al. 2022): the attention core
    (scores, softmax, dropout, weighted sum) is checkpointed and recomputed in backward; everything
    else is saved. Done by wrapping transformers' attention functions for the duration."""
    from torch.utils.checkpoint import checkpoint
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def wrap(fn):
        def core(module, query, key, value, attention_mask, *args, **kwargs):
            if not (torch.is_grad_enabled() and module.training):
                return fn(module, query, key, value, attention_mask, *args, **kwargs)
            counts["selective-recompute"] += 1
            return checkpoint(fn, module, query, key, value, attention_mask, *args,
                              use_reentrant=False, **kwargs)
        return core

    patched: list[tuple[object, str, object]] = []
    mods = {type(m).__module__ for m in model.modules()}
    for name in mods:
        mod = sys.modules.get(name)
        fn = getattr(mod, "eager_attention_forward", None) if mod else None
        if callable(fn):
            patched.append((mod, "eager_attention_forward", fn))
            setattr(mod, "eager_attention_forward", wrap(fn))
    mapping = ALL_ATTENTION_FUNCTIONS._global_mapping
    sdpa = mapping.get("sdpa")
    if sdpa is not None:
        mapping["sdpa"] = wrap(sdpa)
    try:
        yield
    finally:
        for mod, attr, fn in patched:
            setattr(mod, attr, fn)
        if sdpa is not None:
            mapping["sdpa"] = sdpa


# --------------------------------------------------------------------------------------------------
# The run


@contextlib.contextmanager
def _quiet_transformers():
    """transformers logs config advice while building; the trace prints its own output."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield
        return
    prev = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(prev)


def _call(model, batch):
    """Call a model on its batch: keyword arguments, positional arguments, or one input."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def _forward_loss(built: Built, model, batch):
    if built.task == "custom":
        out = _call(model, batch)
        loss = getattr(out, "loss", None)
        if loss is None:
            if isinstance(out, (list, tuple)):
                out = out[0]
            loss = out if out.numel() == 1 else out.sum()
        return loss
    kwargs = dict(batch)
    if built.has_cache:
        kwargs["use_cache"] = False
    return model(**kwargs).loss


def run(source: ModelSource, cfg: StepConfig, *, fake: bool, device: str = "cpu",
        emulate: bool = True, between=None, recorder: Recorder | None = None,
        prepare=None) -> RunOutput:
    """Build and step the model once for warm-up and once recorded.

    ``fake``: under FakeTensorMode; else real tensors on ``device``. ``emulate``: install the CUDA
    emulations (off for a real CUDA run, which needs none). ``between()`` is called after the warm-up
    iteration (a CUDA run resets its peak statistics there). ``prepare(model)`` runs on the built
    model before its parameters are tracked and returns notes (the sharded trace applies FSDP2
    there); ``recorder``: the one to record with (default: a new one).

    A failure inside an operator (a fake kernel that needs values, a shape or dtype check) becomes
    one line naming the model and the operator.
    """
    rec = recorder if recorder is not None else Recorder()
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)  # it logs a traceback for every failing meta kernel
    try:
        return _run(source, cfg, rec, fake=fake, device=device, emulate=emulate,
                    between=between, prepare=prepare)
    except _fake_errors() as e:
        func = getattr(e, "func", None) or rec.in_flight
        what = f"operator {func}" if func is not None else type(e).__name__
        raise UnsupportedError(
            f"not traceable under fake tensors: {source.name} calls {what}, whose output depends "
            f"on tensor values; trace a small config with {opt('device')} cpu "
            f"{opt('real')}") from None
    except (RuntimeError, TypeError, ValueError, NotImplementedError, IndexError) as e:
        if rec.in_flight is None or isinstance(e, GpuplanError) or (
                not fake and "out of memory" in str(e).lower()):
            raise
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise UnsupportedError(
            f"not traceable: {source.name} failed in operator {rec.in_flight} "
            f"({type(e).__name__}: {first})") from None
    finally:
        fake_log.setLevel(level)


def _run(source: ModelSource, cfg: StepConfig, rec: Recorder, *, fake: bool, device: str,
         emulate: bool, between, prepare=None) -> RunOutput:
    counts: Counter = Counter()
    flops: dict[str, float] = {}
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    custom_flops = _attention.flop_formulas()

    def counter() -> FlopCounterMode:
        return FlopCounterMode(display=False, custom_mapping=custom_flops)

    with warnings.catch_warnings(), _quiet_transformers(), fake_mode, \
            contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        built = build(source, dtype=_model_dtype(cfg), attention=cfg.attention, batch=cfg.batch,
                      seq=cfg.seq, device=device, skip_init=fake)
        notes = list(built.notes)
        if prepare is not None:
            notes += prepare(built.model)
        params = _unique_params(built.model)
        n_params = sum(p.numel() for p in params)
        _prepare_model(built, cfg, stack, counts)
        _track_weights(rec, built.model, params)
        step = None
        if cfg.mode == "train":
            step = _TrainStep(built, params, cfg, rec, counts, flops, counter, fake=fake,
                              device=device)
        emu = _install_emulations(stack, rec, counts, fake=fake) if emulate else _NoEmulation()
        if step is not None:
            step.emu = emu
            rec.autocast_active = step.autocast_dtype is not None
        stack.enter_context(rec)
        start, base = _iterations(
            step, lambda: _infer(built, built.model, rec, flops, counter, notes), rec, counts,
            between)
        replay = rec.replay(start)
    return RunOutput(replay=replay, params=n_params, flops=flops,
                     counts=_reported_counts(counts, base, rec), notes=notes, recorder=rec)


def _prepare_model(built: Built, cfg: StepConfig, stack: contextlib.ExitStack,
                   counts: Counter) -> None:
    """Training or inference mode, and the activation checkpointing the config asks for."""
    model = built.model
    train = cfg.mode == "train"
    model.train(train)
    if train and cfg.checkpointing == "full":
        if not hasattr(model, "gradient_checkpointing_enable"):
            raise UnsupportedError(f"{opt('checkpointing')} full needs a transformers model "
                                   "(gradient_checkpointing_enable)")
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    if train and cfg.checkpointing == "selective":
        if getattr(getattr(model, "config", None), "model_type", "") == "bloom":
            raise UnsupportedError(f"{opt('checkpointing')} selective: BLOOM's attention core is "
                                   "written inline in BloomAttention.forward, which the trace "
                                   f"cannot wrap; trace {opt('checkpointing')} none or full")
        if built.task == "custom":
            raise UnsupportedError(f"{opt('checkpointing')} selective needs a transformers model "
                                   "(its attention functions are wrapped)")
        stack.enter_context(_selective(model, counts))


def _track_weights(rec: Recorder, model, params: list[torch.Tensor]) -> None:
    for p in params:
        rec.param_sids.add(rec.track(p, "parameters"))
    for b in model.buffers():
        rec.track(b, "buffers")


def _install_emulations(stack: contextlib.ExitStack, rec: Recorder, counts: Counter, *,
                        fake: bool):
    """The CUDA emulations, for the rest of the run; returns the state whose cast cache a training
    iteration clears."""
    emu = stack.enter_context(cuda_emulation(counts, fake=fake))
    stack.enter_context(unpacked_batch_mask(counts, rec))
    if fake:
        rec.overrides.update(grouped_mm_override(counts))
    return emu


def _mark(counts: Counter, rec: Recorder) -> tuple[Counter, int, int]:
    return Counter(counts), rec.counts_autocast_cache, rec.item_placeholders


def _iterations(step: _TrainStep | None, infer, rec: Recorder, counts: Counter,
                between) -> tuple[int, tuple[Counter, int, int]]:
    """The warm-up iteration (training only) and the reported one; returns the first event of the
    reported iteration and the counts before it."""
    try:
        if step is not None:
            # FLOPs are counted in the warm-up iteration (the graph is the same), so that the
            # counter's module hooks cannot touch the lifetimes of the reported iteration.
            step.iteration(record_flops=True)
        if between is not None:
            between()
        start, base = len(rec.ev_sid), _mark(counts, rec)
        if step is not None:
            step.iteration(record_flops=False)
        else:
            infer()
    finally:
        rec.autocast_active = False
    return start, base


def _reported_counts(counts: Counter, base: tuple[Counter, int, int], rec: Recorder) -> Counter:
    """Emulation counts of the reported iteration only."""
    reported = counts - base[0]
    if counts.get("host-step-counters"):
        reported["host-step-counters"] = counts["host-step-counters"]
    reported["autocast-weight-cache"] = rec.counts_autocast_cache - base[1]
    reported["optimizer-item-placeholder"] = rec.item_placeholders - base[2]
    return reported


class _NoEmulation:
    def clear_cache(self) -> None:
        pass


class _TrainStep:
    """One training iteration: forward with the loss, backward, ``optimizer.step()``,
    ``zero_grad()``, each allocation filed under its phase."""

    def __init__(self, built: Built, params: list[torch.Tensor], cfg: StepConfig, rec: Recorder,
                 counts: Counter, flops: dict[str, float], counter, *, fake: bool,
                 device: str) -> None:
        recipe = get_recipe(cfg.precision)
        self.built, self.model, self.params = built, built.model, params
        self.cfg, self.rec, self.counts, self.flops = cfg, rec, counts, flops
        self.counter, self.fake = counter, fake
        self.device_type = torch.device(device).type
        self.autocast_dtype = _DTYPES[recipe.compute_dtype] if recipe.autocast else None
        self.scale = _LOSS_SCALE if recipe.compute_dtype == "fp16" else None
        self.emu = _NoEmulation()
        self.opt, self.mixed = self._optimizer(recipe.master_bytes)

    def _optimizer(self, master_bytes: int):
        """The optimizer, wrapped in the fp32 master copy when the recipe keeps one."""
        cfg, rec = self.cfg, self.rec
        trainable = [p for p in self.params if p.requires_grad]
        if not master_bytes:
            return make_optimizer(cfg.optimizer, trainable, cfg.optimizer_impl), None
        mixed = MixedPrecision(
            trainable, lambda ps: make_optimizer(cfg.optimizer, ps, cfg.optimizer_impl),
            scale=self.scale)
        rec.classify(mixed.masters, "master_weights")
        # fp32 master gradients exist only during the step: a step temporary, beside the 16-bit
        # gradients of the "gradients" line (the seed's layout)
        mixed.on_master_grads = lambda gs: rec.classify(gs, "optimizer_temporaries")
        return mixed, mixed

    def iteration(self, record_flops: bool) -> None:
        self.rec.set_phase("forward", "activations")
        batch = self.built.make_batch()
        loss = self._forward(batch, record_flops)
        self._backward(loss, record_flops)
        del loss, batch
        self.emu.clear_cache()
        self._optimizer_step()

    def _forward(self, batch, record_flops: bool):
        fc = self.counter() if record_flops else contextlib.nullcontext()
        amp = (torch.autocast(self.device_type, dtype=self.autocast_dtype)
               if self.autocast_dtype is not None else contextlib.nullcontext())
        with fc, amp:
            loss = _forward_loss(self.built, self.model, batch)
        self.emu.clear_cache()
        if record_flops:
            self.flops["forward"] = float(fc.get_total_flops())
        return loss

    def _backward(self, loss, record_flops: bool) -> None:
        self.rec.set_phase("backward", "backward")
        fc = self.counter() if record_flops else contextlib.nullcontext()
        with fc:
            if self.scale is not None:
                self.counts["grad-scaler"] += 1
                (loss * self.scale).backward()
            else:
                loss.backward()
        if record_flops:
            self.flops["backward"] = float(fc.get_total_flops())

    def _optimizer_step(self) -> None:
        rec, opt, mixed = self.rec, self.opt, self.mixed
        grads = [p.grad for p in self.params if p.grad is not None]
        rec.classify(grads, "gradients")
        rec.set_phase("optimizer", "optimizer_temporaries")
        rec.allow_item_placeholder = self.fake
        inner = opt.inner if mixed else opt
        rec.module_label = f"{type(inner).__name__}.step" + (" (fp32 master)" if mixed else "")
        if self.scale is not None and mixed is None and grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)
        del grads
        opt.step()
        rec.classify(state_tensors(opt), "optimizer_state")
        host = host_step_counters(inner, self.cfg.optimizer_impl)
        rec.classify(host, "host")
        self.counts["host-step-counters"] = len(host)
        opt.zero_grad(set_to_none=True)
        rec.allow_item_placeholder = False
        rec.module_label = None


def _infer(built: Built, model, rec: Recorder, flops: dict, counter, notes: list[str]) -> None:
    with torch.inference_mode():
        if built.has_cache:
            from transformers import DynamicCache

            rec.set_phase("prefill", "activations")  # the prompt is allocated in the prefill
            batch = built.make_batch()
            ids = batch["input_ids"]
            cache = DynamicCache(config=model.config)
            for phase, key in (("prefill", "forward"), ("decode", "decode")):
                rec.set_phase(phase, "activations")
                fc = counter()
                with fc:
                    out = model(input_ids=ids, past_key_values=cache, use_cache=True,
                                logits_to_keep=1)
                    ids = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(
                        -1, keepdim=True)
                flops[key] = float(fc.get_total_flops())
                del out
                batch = None  # the prompt is freed after the prefill's logits (decode: no-op)
                rec.classify(_cache_tensors(cache), "kv_cache")
            del cache, ids
            notes.append("inference: prefill of the prompt with logits for the last position "
                         "only (as generate() does), then one decode step, DynamicCache")
        else:
            rec.set_phase("forward", "activations")
            batch = built.make_batch()
            batch = {k: v for k, v in batch.items() if k != "labels"} \
                if isinstance(batch, dict) else batch
            fc = counter()
            with fc:
                out = _call(model, batch)
            flops["forward"] = float(fc.get_total_flops())
            del out, batch


def _cache_tensors(cache) -> list[torch.Tensor]:
    out = []
    for layer in getattr(cache, "layers", ()):
        for attr in ("keys", "values"):
            t = getattr(layer, attr, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


# --------------------------------------------------------------------------------------------------
# Emulation report

_EMULATION_TEXT = {
    "allocator-rounding-512": "every block rounded up to the CUDA caching allocator's 512 bytes",
    "autocast-op-lists": "op calls cast by CUDA's autocast policy (fp32 for softmax, layer_norm, "
                         "pow, exp, sum, losses ...; CPU-only autocast entries disabled)",
    "autocast-weight-cache": "16-bit copies of fp32 weights made (and cached) by autocast",
    "fused-dropout": "dropout calls given CUDA's fused kernel (1-byte bool mask, not a noise "
                     "tensor in the activation dtype)",
    "softmax-half-to-float": "fp16 softmax/log_softmax to fp32 without a converted copy",
    "sdpa-cuda-backend": "scaled_dot_product_attention calls routed to the backend CUDA picks",
    "grouped-mm-dtype": "fp32/fp16 grouped matmuls (MoE experts) allocated as CUDA's fallback "
                        "kernel does (the fake kernel only accepts bf16)",
    "causal-mask-skip": "transformers' packed-sequence check answered 'not packed' as on a GPU "
                        "(no explicit s x s mask; SDPA runs with is_causal)",
    "optimizer-foreach-default": "optimizer given CUDA's default foreach implementation (CPU "
                                 "tensors default to the per-tensor loop)",
    "host-step-counters": "optimizer step counters kept on the host, as torch.optim does for "
                          "non-fused CUDA optimizers (not counted)",
    "grad-scaler": "fp16 loss scaling: loss scaled, gradients unscaled in place (the inf check's "
                   ".item() sync allocates nothing and is skipped)",
    "optimizer-item-placeholder": "host reads of a number (.item() of step counters and norms in "
                                  "the optimizer step, transformers' packed-batch check) answered "
                                  "with a placeholder under fake tensors; they change no "
                                  "allocation",
    "selective-recompute": "attention cores checkpointed (Megatron selective recomputation)",
    "recompute-under-emulation": "checkpointed layers recomputed in backward under the same "
                                 "emulations",
}


def emulations(out: RunOutput, cfg: StepConfig, blocks: int) -> tuple[Emulation, ...]:
    c = out.counts
    res = [Emulation(name="allocator-rounding-512", count=blocks,
                     detail=_EMULATION_TEXT["allocator-rounding-512"])]
    for key in ("autocast-op-lists", "autocast-weight-cache", "fused-dropout",
                "softmax-half-to-float", "causal-mask-skip", "grouped-mm-dtype"):
        if c.get(key):
            res.append(Emulation(name=key, count=int(c[key]), detail=_EMULATION_TEXT[key]))
    sdpa = {k.split(":", 1)[1]: v for k, v in c.items() if k.startswith("sdpa-cuda-backend:")}
    if sdpa:
        res.append(Emulation(name="sdpa-cuda-backend", count=int(sum(sdpa.values())),
                             detail=_EMULATION_TEXT["sdpa-cuda-backend"] + " ("
                             + ", ".join(f"{k}: {v}" for k, v in sorted(sdpa.items())) + ")"))
    if cfg.mode == "train":
        if cfg.optimizer_impl == "foreach" and cfg.optimizer in TORCH_OPTIMIZERS:
            res.append(Emulation(name="optimizer-foreach-default", count=1,
                                 detail=_EMULATION_TEXT["optimizer-foreach-default"]))
        for key in ("host-step-counters", "grad-scaler", "optimizer-item-placeholder",
                    "selective-recompute"):
            if c.get(key):
                res.append(Emulation(name=key, count=int(c[key]), detail=_EMULATION_TEXT[key]))
        if cfg.checkpointing != "none":
            res.append(Emulation(name="recompute-under-emulation", count=1,
                                 detail=_EMULATION_TEXT["recompute-under-emulation"]))
    return tuple(res)


def check_config(cfg: StepConfig) -> None:
    """Validate names before any work (one-line errors)."""
    if cfg.mode not in ("train", "infer"):
        raise InputError(f"{opt('mode')} {shown(cfg.mode)}: expected train or infer")
    if cfg.checkpointing not in ("none", "selective", "full"):
        raise InputError(f"{opt('checkpointing')} {shown(cfg.checkpointing)}: expected none, selective "
                         "or "
                         "full")
    if cfg.attention not in ("eager", "sdpa"):
        raise InputError(f"{opt('attention')} {shown(cfg.attention)}: expected eager or sdpa")
    if cfg.optimizer_impl not in ("foreach", "fused", "for-loop"):
        raise InputError(f"{opt('optimizer_impl')} {shown(cfg.optimizer_impl)}: expected foreach, fused "
                         "or "
                         "for-loop")
    if cfg.mode == "train":
        get_recipe(cfg.precision)
        get_optimizer(cfg.optimizer or "")
        if cfg.optimizer_impl == "fused" and cfg.optimizer not in FUSED_OPTIMIZERS:
            raise UnsupportedError(
                f"{opt('optimizer_impl')} fused: torch has no fused {cfg.optimizer} (fused: "
                f"{', '.join(FUSED_OPTIMIZERS)}); use foreach or for-loop")
    else:
        fmt = get_weight_format(cfg.precision)
        if fmt.name not in _DTYPES:
            raise UnsupportedError(
                f"not traceable: {opt('precision')} {cfg.precision} is a quantized format; the "
                "trace runs "
                "fp32, bf16 or fp16 weights (gpuplan fit plans quantized formats)")
