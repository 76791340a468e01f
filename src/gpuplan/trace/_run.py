"""Orchestration: validate, resolve, trace under fake tensors, optionally measure a real run, and
assemble the :class:`TraceResult`."""

from __future__ import annotations

import time
from types import MappingProxyType

import torch

from ..errors import InputError, UnsupportedError, opt, shown
from ..formats import get_recipe, resolve_infer_precision
from ..job import DEFAULT_INFER_PRECISION, DEFAULT_SEQ, DEFAULT_TRAIN_PRECISION, default_seq
from ..models import architecture_from_config
from ._limits import REAL_MAX_PARAMS
from ._recorder import BLOCK
from ._result import Measurement, TraceResult
from ._spec import resolve
from ._step import RunOutput, StepConfig, check_config, emulations, run

#: The device a ``--device cuda`` run uses (tests point it at the CPU while faking torch.cuda).
CUDA_DEVICE = "cuda"


def per_gpu(at_peak: dict[str, int], total: int, mode: str) -> dict[str, int]:
    """Map the recorder's fine categories onto ``gpuplan fit``'s per-GPU fields."""
    g = at_peak.get
    weights = g("parameters", 0) + g("buffers", 0)
    if mode == "infer":
        kv = g("kv_cache", 0)
        out = {"weights_bytes": weights, "kv_cache_bytes": kv,
               "activations_bytes": total - weights - kv, "overhead_bytes": 0,
               "total_bytes": total}
        return out
    out = {
        "weights_bytes": weights,
        "gradients_bytes": g("gradients", 0),
        "master_weights_bytes": g("master_weights", 0),
        "optimizer_bytes": g("optimizer_state", 0),
        "activations_bytes": g("activations", 0) + g("backward", 0) + g("kv_cache", 0),
        "temporaries_bytes": g("autocast_cache", 0) + g("optimizer_temporaries", 0)
        + g("other", 0),
        "gathered_params_bytes": g("gathered_params", 0),
        "overhead_bytes": 0,
        "total_bytes": total,
    }
    assert sum(v for k, v in out.items() if k != "total_bytes") == total
    return out


def _timeline(points: list[dict]) -> tuple[MappingProxyType, ...]:
    out = []
    for p in points:
        out.append(MappingProxyType({
            "event": p["event"], "phase": p["phase"],
            "parameters": p["parameters"], "buffers": p["buffers"],
            "master_weights": p["master_weights"], "gradients": p["gradients"],
            "optimizer_state": p["optimizer_state"], "kv_cache": p["kv_cache"],
            "activations": p["activations"] + p["backward"],
            "temporaries": p["autocast_cache"] + p["optimizer_temporaries"] + p["other"],
        }))
    return tuple(out)


def _blocks(out: RunOutput) -> int:
    rec = out.recorder
    return sum(1 for b in rec.nbytes if b % BLOCK)


def _default_seq(source) -> int:
    """The sequence every gpuplan analysis defaults to, for this model's architecture."""
    if source.config is None:  # a user's factory: its example batch sets the shape
        return default_seq(None)
    try:
        return default_seq(architecture_from_config(source.config, name=source.name))
    except InputError:
        # A model_type transformers builds but gpuplan's planner does not know: its own limit.
        limit = source.config.get("max_position_embeddings") or source.config.get("n_positions")
        return min(DEFAULT_SEQ, limit) if isinstance(limit, int) and limit > 0 else DEFAULT_SEQ


def trace(model, *, mode, batch, seq, precision, optimizer, optimizer_impl, checkpointing,
          attention, device, real) -> TraceResult:
    if precision is None:
        precision = DEFAULT_TRAIN_PRECISION if mode == "train" else DEFAULT_INFER_PRECISION
    if mode != "train":
        # the trace builds the model from its config in a 16-bit dtype: auto is bf16 here
        precision = resolve_infer_precision(precision, None)
    source = resolve(model)
    if seq is None:
        seq = _default_seq(source)
    cfg = StepConfig(mode=mode, batch=batch, seq=seq, precision=precision,
                     optimizer=optimizer if mode == "train" else None,
                     optimizer_impl=optimizer_impl, checkpointing=checkpointing,
                     attention=attention)
    check_config(cfg)
    _check_device(device)

    t0 = time.perf_counter()
    fake = run(source, cfg, fake=True)
    seconds = time.perf_counter() - t0
    measured = None
    if device == "cpu" and real:
        measured = _measure_cpu(source, cfg, fake)
    elif device == "cuda":
        measured = _measure_cuda(source, cfg, fake.replay.peak_bytes)
    notes = _notes(fake, cfg, real_cpu=measured is not None and device == "cpu")
    return _result(source.name, cfg, fake, measured=measured, notes=notes, seconds=seconds)


def _check_device(device: str) -> None:
    if device not in ("cpu", "cuda"):
        raise InputError(f"{opt('device')} {shown(device)}: expected cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise UnsupportedError(f"{opt('device')} cuda: torch sees no CUDA GPU on this machine; use "
                               f"{opt('device')} cpu {opt('real')} to check the trace against a "
                               "real CPU run")


def _notes(fake: RunOutput, cfg: StepConfig, *, real_cpu: bool) -> tuple[str, ...]:
    notes = list(fake.notes)
    if real_cpu and fake.counts.get("softmax-half-to-float"):
        notes.append("the real CPU run cannot read fp16 and write fp32 in one softmax kernel "
                     "(half_to_float): it makes an fp32 copy that the trace, like CUDA, does not")
    if cfg.mode == "train" and cfg.checkpointing == "selective":
        notes.append("selective checkpointing: the attention core (scores, softmax, dropout, "
                      "weighted sum) is recomputed in backward, as in Megatron-LM (Korthikanti "
                      "et al. 2022); with flash attention that saves only the logsumexp")
    if cfg.mode == "train" and get_recipe(cfg.precision).master_bytes:
        notes.append("mixed precision: fp32 master copy stepped by the optimizer; 16-bit grads "
                     "copied to fp32 master grads at the step and kept until zero_grad (the "
                     "seed's layout, as DeepSpeed; Megatron-LM frees them as it copies)")
    return tuple(notes)


def _result(name: str, cfg: StepConfig, fake: RunOutput, *, measured: Measurement | None,
            notes: tuple[str, ...], seconds: float) -> TraceResult:
    rp, mode, train = fake.replay, cfg.mode, cfg.mode == "train"
    return TraceResult(
        model=name, mode=mode, batch=cfg.batch, seq=cfg.seq, precision=cfg.precision,
        optimizer=cfg.optimizer, optimizer_impl=cfg.optimizer_impl if train else None,
        checkpointing=cfg.checkpointing if train else "none", attention=cfg.attention,
        traced_on="fake", params=fake.params,
        per_gpu=MappingProxyType(per_gpu(rp.at_peak, rp.peak_bytes, mode)),
        categories=MappingProxyType(dict(rp.at_peak)),
        peak_phase=rp.peak_phase, peak_module=rp.peak_module, peak_event=rp.peak_event,
        phase_peaks=MappingProxyType(dict(rp.phase_peaks)),
        flops_forward=fake.flops.get("forward", 0.0),
        flops_backward=fake.flops.get("backward", 0.0),
        flops_decode=fake.flops.get("decode", 0.0),
        unrounded_peak_bytes=rp.unrounded_at_peak, timeline=_timeline(rp.timeline),
        emulations=emulations(fake, cfg, _blocks(fake)), notes=notes,
        measured=measured, seconds=seconds)


def _measure_cpu(source, cfg: StepConfig, fake: RunOutput) -> Measurement:
    """Run the same step with real CPU tensors (same recorder and emulations)."""
    if fake.params > REAL_MAX_PARAMS:
        raise UnsupportedError(
            f"{opt('real')} runs the step with real tensors on this CPU: {source.name} has "
            f"{fake.params / 1e9:.2f}B parameters, above the {REAL_MAX_PARAMS / 1e9:.2f}B "
            f"limit; drop {opt('real')} for the fake trace, or trace a smaller config")
    t1 = time.perf_counter()
    r = run(source, cfg, fake=False).replay
    traced = fake.replay.peak_bytes
    return Measurement(
        device="cpu", method="live tensor storages of real CPU tensors (same step, recorder "
                             "and CUDA emulations; 512-byte rounding)",
        peak_bytes=r.peak_bytes, reserved_bytes=None,
        ratio=r.peak_bytes / traced if traced else float("nan"),
        per_gpu=MappingProxyType(per_gpu(r.at_peak, r.peak_bytes, cfg.mode)),
        peak_phase=r.peak_phase, phase_peaks=MappingProxyType(dict(r.phase_peaks)),
        seconds=time.perf_counter() - t1)


def _measure_cuda(source, cfg: StepConfig, traced: int) -> Measurement:
    """Run the same step for real on the GPU (no emulation: it *is* CUDA) and read the caching
    allocator's peak statistics over the second iteration."""
    dev = torch.device(CUDA_DEVICE)

    def between() -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    t0 = time.perf_counter()
    torch.cuda.empty_cache()
    try:
        run(source, cfg, fake=False, device=str(dev), emulate=False, between=between)
    except torch.OutOfMemoryError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "out of memory"
        raise UnsupportedError(
            f"{opt('device')} cuda: the step does not fit on {torch.cuda.get_device_name()} "
            f"({first}); "
            f"the trace says it needs {traced / 1e9:.2f} GB at its peak") from None
    torch.cuda.synchronize()
    allocated = int(torch.cuda.max_memory_allocated())
    reserved = int(torch.cuda.max_memory_reserved())
    name = torch.cuda.get_device_name()
    return Measurement(device=name, method="torch.cuda.max_memory_allocated over the second "
                                           "iteration (max_memory_reserved beside it)",
                       peak_bytes=allocated, reserved_bytes=reserved,
                       ratio=allocated / traced if traced else float("nan"),
                       seconds=time.perf_counter() - t0)
