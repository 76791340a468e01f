"""Serving memory per GPU: the weights in their format, the KV cache, the prefill or decode
working set (whichever phase peaks), and the runtime overhead; weights and K/V heads sharded over
the tensor-parallel group."""

from __future__ import annotations

from dataclasses import replace

from .._record import record
from ..errors import UnsupportedError, opt
from ..formats import get_weight_format, weights_bytes_in_format
from ..job import Job, int_arg
from ..models import Architecture, Model
from .activations import InferActivations, infer_activations
from .kv import kv_cache_bytes
from ..parallel import check_layout, layout_notes, layout_of, rank_model
from .overhead import OverheadLevel, memory_args, runtime_overhead
from .results import InferMemory, Line
from .shape import check_seq, seq_for
from .states import shard

__all__ = ["infer_memory"]


def infer_memory(model: Model, job: Job, *, tensor_parallel: int = 1,
                 overhead_level: OverheadLevel = "expected", overhead_overrides=None) -> InferMemory:
    """Per-GPU memory of serving ``model`` in ``job.infer_precision``.

    A job with ``tp``/``pp`` > 1 is planned per rank of each pipeline stage with Megatron/vLLM's
    sharding (:mod:`.layout`: column/row-parallel linears, vocabulary split, K/V heads split and
    replicated when fewer than the TP ranks) and the worst stage is the answer.
    ``tensor_parallel`` > 1 on a data-parallel job is the quick uniform estimate fit's
    "how many GPUs" search and the solver use: every weight and the working set divided by
    ``tensor_parallel``, K/V heads split as above."""
    memory_args(model, job, overhead_level, overhead_overrides)
    int_arg(tensor_parallel, "tensor_parallel", "gpus")
    job = job.resolve_infer(model.architecture)  # no GPU named: auto = the shipped format
    if job.ep > 1:  # a serving layout of TP x PP 1 is trivial, but its EP must still split experts
        check_layout(model.architecture, job)
    if not layout_of(job).trivial:
        return _infer_layout(model, job, overhead_level=overhead_level,
                             overhead_overrides=overhead_overrides)
    return _infer_rank(model, job, tensor_parallel=tensor_parallel, overhead_level=overhead_level,
                       overhead_overrides=overhead_overrides)


def _infer_layout(model: Model, job: Job, **kw) -> InferMemory:
    """Each pipeline stage's rank (its layers, TP-split), the worst one named."""
    lay = layout_of(job)
    if lay.cp > 1:
        raise UnsupportedError("context parallelism for serving is not modeled; plan serving "
                               f"with {opt('tp')} and {opt('pp')}")
    check_layout(model.architecture, job)
    arch = model.architecture
    stages = lay.stages(arch.num_layers)
    # (every stage's working set is replayed with the rank's head: an upper bound for stages
    # before the last, whose largest transient is usually a layer's, not the logits)
    results = [_infer_rank(rank_model(model, job, i), job, gpus=job.gpus, **kw)
               for i in range(lay.pp)]
    worst = max(range(lay.pp), key=lambda i: results[i].total_bytes)
    layers = stages[worst]
    stage = {"index": worst, "stages": lay.pp, "layers": [layers[0], layers[-1]],
             "num_layers": len(layers), "embedding": worst == 0, "head": worst == lay.pp - 1,
             "params_per_rank": rank_model(model, job, worst).params.total,
             "stage_totals_bytes": [r.total_bytes for r in results]}
    mem = results[worst]
    return replace(mem, params=model.params.total, tensor_parallel=lay.tp,
                   layout=lay.degrees_dict(), stage=stage,
                   notes=(*mem.notes, *layout_notes(arch, job)))


def _infer_rank(model: Model, job: Job, *, tensor_parallel: int = 1, gpus: int | None = None,
                overhead_level: OverheadLevel = "expected",
                overhead_overrides=None) -> InferMemory:
    """One GPU's serving memory (``model`` is the whole model, or one rank's part of it)."""
    fmt = get_weight_format(job.resolve_infer(model.architecture).infer_precision)
    n = model.params.total
    notes: list[str] = []
    weights = weights_bytes_in_format(fmt, model.tensors, model.architecture, n, job.engine)
    if not model.tensors and fmt.name not in ("fp32", "bf16", "fp16"):
        notes.append(f"layer shapes unknown: every parameter assumed stored as {fmt.name} "
                     f"({fmt.bits:g} bits)")
    kv_dtype = job.kv_dtype or ("fp32" if fmt.compute_dtype == "fp32" else "bf16")
    notes.extend(check_seq(model, job, serving=True))
    act = infer_activations(model, job, fmt)
    notes.extend(act.notes)
    ph = _phases(model, job, act, kv_dtype, tensor_parallel)
    if tensor_parallel > 1:
        weights = shard(weights, tensor_parallel)
    buffers = model.architecture.buffer_bytes if model.architecture else 0
    weights += buffers
    peak_phase, kv, working = ph.peak(model.architecture)
    overhead = runtime_overhead(gpus=gpus or tensor_parallel, zero=0, grad_bytes=0, grad_elem_bytes=2,
                                dynamic=kv + working, level=overhead_level, training=False,
                                overrides=overhead_overrides)
    lines = (
        Line(key="weights", label=f"weights, {fmt.name}", bytes=weights,
             bytes_per_param=weights / n, note=_weights_note(fmt, model, buffers)),
        Line(key="kv_cache", label=f"KV cache, {kv_dtype}", bytes=kv,
             note=_kv_note(model.architecture, job, ph, kv), at_peak=_kv_at_peak(model, kv)),
        Line(key="activations", label=f"activations ({peak_phase})", bytes=working,
             note=act.summary, at_peak="" if working else "not included"),
        Line(key="overhead", label=f"runtime overhead ({overhead_level})", bytes=overhead.bytes),
    )
    return InferMemory(
        precision=fmt.name, params=n, weights_bytes=weights, kv_cache_bytes=kv,
        activations_bytes=working, overhead_bytes=overhead.bytes,
        total_bytes=weights + kv + working + overhead.bytes,
        peak_phase=peak_phase, kv_dtype=kv_dtype, overhead=overhead, lines=lines,
        notes=tuple(notes), tensor_parallel=tensor_parallel, kv_cache_full_bytes=ph.kv_full,
        prefill_bytes=ph.kv_prompt + ph.prefill, decode_bytes=ph.kv_full + ph.decode,
        prompt_tokens=ph.prompt, context_tokens=ph.context,
    )


def _weights_note(fmt, model: Model, buffers: int) -> str:
    """Which tensors stay unquantized, and the non-parameter buffers counted with the weights."""
    note = fmt.convention if model.tensors else ""
    if buffers:
        note += f"{'; ' if note else ''}+ {buffers:,} bytes of buffers (the causal mask)"
    return note


@record(kw_only=False)
class _Phases:
    """Per GPU: the KV cache of the prompt and of the whole context, and the working sets of the
    prefill and of one decode step."""

    kv_prompt: int
    kv_full: int
    prefill: int
    decode: int
    context: int | None
    prompt: int | None = None

    def peak(self, arch: Architecture | None) -> tuple[str, int, int]:
        """The phase that peaks, with its KV cache and working set: the prompt's cache during
        prefill, the whole context's during decode; encoders run one forward and keep none."""
        if arch is not None and arch.kind != "decoder":
            return "forward", 0, self.prefill
        if self.kv_prompt + self.prefill >= self.kv_full + self.decode:
            return "prefill", self.kv_prompt, self.prefill
        return "decode", self.kv_full, self.decode


def _phases(model: Model, job: Job, act: InferActivations, kv_dtype: str,
            tensor_parallel: int) -> _Phases:
    arch = model.architecture
    prompt = seq_for(model, job)
    context = job.context or prompt
    kv_full = kv_cache_bytes(model, job, kv_dtype=kv_dtype, context=context)
    kv_prompt = kv_cache_bytes(model, job, kv_dtype=kv_dtype,
                               context=min(prompt or 0, context or 0), prefill=True)
    ws_scale = 1
    if tensor_parallel > 1:
        # K/V heads are split over the tensor-parallel ranks; with fewer KV heads than ranks
        # each rank still holds a whole head (replicated)
        if arch is not None and arch.kind == "decoder" and arch.mla is None:
            # (MLA's latent cache has no heads: every rank holds all of it)
            per_rank = -(-arch.num_kv_heads // tensor_parallel)
            kv_full = -(-kv_full * per_rank // arch.num_kv_heads)
            kv_prompt = -(-kv_prompt * per_rank // arch.num_kv_heads)
        ws_scale = tensor_parallel
    return _Phases(kv_prompt=kv_prompt, kv_full=kv_full, prefill=-(-act.prefill_bytes // ws_scale),
                   decode=-(-act.decode_bytes // ws_scale), context=context, prompt=prompt)


def _kv_at_peak(model: Model, kv: int) -> str:
    """Why the KV-cache line is empty: an encoder keeps none; an unknown architecture."""
    arch = model.architecture
    if kv:
        return ""
    if arch is None:
        return "not included"
    return "none (an encoder keeps no cache)" if arch.kind != "decoder" else ""


def _kv_note(arch: Architecture | None, job: Job, ph: _Phases, kv: int) -> str:
    """Tokens cached and bytes per token (and, when the peak is the prefill, the whole context's
    cache)."""
    if arch is None or arch.kind != "decoder":
        return ""
    context = ph.context
    per_tok = ph.kv_full / max(1, job.batch * (context or 1))
    note = (f"{job.batch} x {context} tokens, {per_tok / 1e3:.1f} kB per token"
            + (f"; {len(arch.sliding_window_layers)} sliding-window layers capped at "
               f"{arch.sliding_window}" if arch.sliding_window else ""))
    if kv > ph.kv_full:
        note += (f"; the prefill holds the whole prompt's K/V of the capped layers (transformers' "
                 f"cache keeps a view of it), {ph.kv_full:,} bytes from the first decode step")
    elif kv != ph.kv_full:
        note += f"; {ph.kv_full:,} bytes once {context} tokens are cached"
    return note
