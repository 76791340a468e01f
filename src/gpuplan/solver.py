"""What to change to make a job fit: a search over the knobs people actually turn.

:func:`suggest` tries one, two and three changes at a time -- micro-batch with gradient
accumulation (global batch kept), checkpointing, attention implementation, fused optimizer,
8-bit Adam / Adafactor / SGD, pure bf16, LoRA / QLoRA, ZeRO stage and GPU count, optimizer
offload, a shorter sequence, a bigger GPU from the catalog; for inference the weight format, the
KV-cache dtype, the context, the number of concurrent sequences, tensor parallelism, last-position
prefill logits and a bigger GPU -- and returns the cheapest few that fit, each re-planned with the
full accounting and carrying its cost in plain words: the extra compute of recompute (from the
speed model's FLOP count), more GPUs, PCIe traffic, or the quality and convergence trade-off.

:func:`max_batch` and :func:`max_seq` answer the direct queries by bisection (memory never
decreases with batch or sequence: a property the tests hold the planner to).
"""

from __future__ import annotations

import itertools
import math
import time

from operator import attrgetter
from typing import Literal

from ._record import record
from .compute import flops_breakdown
from .errors import GpuplanError, InputError, opt
from .formats import INFER_AUTO, OPTIMIZERS, WEIGHT_FORMATS, get_recipe, get_weight_format
from .hardware import GPU, SOLVER_GPUS, get_gpu
from .job import (FLAT_FIELDS, MAX_CHANGES, MAX_TOP, Job, choice_arg, default_seq, gpu_arg,
                  int_arg, pp_chunks, seq_limit)
from .memory import DEFAULT_LORA_TARGETS, infer_memory, train_memory
from .memory.train import gpu_non_tn_fp8
from .memory.fewest import (MAX_TP, LayoutFit, fewest_tp, fewest_zero3, infer_layout,
                            serving_tp_degrees, shared_memo,
                            train_layout)
from .models import Model
from .memory.overhead import OverheadLevel, memory_args
from .engines.zero3 import MAX_LIVE, count_text
from .units import format_bytes

__all__ = ["Change", "Suggestion", "Suggestions", "suggest", "max_batch", "max_seq",
           "DEFAULT_TOP"]

#: How many suggestions are shown.
DEFAULT_TOP = 3

Mode = Literal["train", "infer"]

# Cost tiers: what a change costs the user, cheapest first.
_FREE, _THROUGHPUT, _HARDWARE, _QUALITY = 0, 1, 2, 3
_TIER_NAMES = {_FREE: "free", _THROUGHPUT: "slower step", _HARDWARE: "more or other hardware",
               _QUALITY: "changes the result"}

#: Quality notes for inference weight formats (the papers' own findings).
_FORMAT_TRADEOFF = {
    "fp8": "fp8 weights: near 16-bit quality on H100-class GPUs (Micikevicius et al. 2022)",
    "int8": "LLM.int8(): no degradation up to 175B in the authors' tests (Dettmers et al. 2022); "
            "slower matmuls",
    "q8_0": "8.5-bit GGUF: near 16-bit perplexity (llama.cpp's quantize tables)",
    "gptq-4bit": "4-bit GPTQ: small perplexity increase, larger on small models (Frantar et al. "
                 "2023)",
    "awq-4bit": "4-bit AWQ: small perplexity increase (Lin et al. 2024)",
    "nf4": "4-bit NF4: small quality loss; dequantized per matmul, slower (Dettmers et al. 2023)",
    "nf4-dq": "4-bit NF4 with double quantization: as nf4, 0.37 bits/param less (Dettmers et "
              "al. 2023)",
    "q4_k_m": "4.8-bit GGUF k-quant: small perplexity increase (llama.cpp's quantize tables)",
    "q4_0": "4.5-bit GGUF: larger perplexity increase than k-quants (llama.cpp's tables)",
    "fp8-block": "the checkpoint's own fp8 block-scaled weights (DeepSeek-V3 trains and ships "
                 "in it)",
    "mxfp4": "the checkpoint's own MXFP4 experts (gpt-oss was post-trained and ships in it)",
}


@record
class Change:
    """One knob turned."""

    knob: str
    """Job field (``checkpointing``, ``optimizer`` ...) or ``gpu``/``micro_batch``/``lora``."""
    value: object
    text: str
    """What to do, as a command-line user would say it."""
    tier: int
    cost: str
    """What it costs, in plain words."""
    extra_compute: float = 0.0
    """Fraction of extra step work: recompute FLOPs, or a longer pipeline bubble."""


@record
class Suggestion:
    """A set of changes, re-planned: the job it makes, its peak, and what it costs."""

    mode: Mode
    changes: tuple[Change, ...]
    job: Job
    gpu: str
    gpu_count: int
    peak_bytes: int
    usable_bytes: int
    fits: bool
    extra_compute: float
    """Fraction of extra step FLOPs (activation recompute), 0 when none."""
    tier: int
    score: float

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.peak_bytes

    @property
    def summary(self) -> str:
        return " + ".join(c.text for c in self.changes)

    @property
    def costs(self) -> tuple[str, ...]:
        return tuple(c.cost for c in self.changes)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode, "gpu": self.gpu, "gpus": self.gpu_count,
            "changes": [{"knob": c.knob, "value": c.value, "text": c.text, "cost": c.cost,
                         "cost_kind": _TIER_NAMES[c.tier]} for c in self.changes],
            "summary": self.summary, "peak_bytes": self.peak_bytes,
            "usable_bytes": self.usable_bytes, "headroom_bytes": self.headroom_bytes,
            "fits": self.fits, "extra_compute_fraction": round(self.extra_compute, 4),
            "cost_kind": _TIER_NAMES[self.tier],
            "job": self.job.to_dict(),  # the changed job, whole: what applying it means
        }


@record
class Suggestions:
    """The answer of :func:`suggest` for one GPU and one mode."""

    mode: Mode
    gpu: str
    usable_bytes: int
    current_peak_bytes: int
    fits_already: bool
    suggestions: tuple[Suggestion, ...]
    closest_miss: Suggestion | None
    """When nothing fits: the candidate that came closest."""
    evaluated: int
    """Candidate configurations evaluated (a job on a GPU)."""
    planned: int = 0
    """Distinct jobs run through the full accounting (the rest reuse a result)."""
    seconds: float
    message: str

    def to_dict(self) -> dict:
        return {
            "mode": self.mode, "gpu": self.gpu, "usable_bytes": self.usable_bytes,
            "current_peak_bytes": self.current_peak_bytes, "fits_already": self.fits_already,
            "suggestions": [s.to_dict() for s in self.suggestions],
            "closest_miss": self.closest_miss.to_dict() if self.closest_miss else None,
            "evaluated": self.evaluated, "planned": self.planned, "message": self.message,
        }


# --------------------------------------------------------------------------------------------------
# Evaluation


#: A job's fields but the model, as one tuple: the planner's cache key (one C call per candidate).
_JOB_KEY = attrgetter(*(f for f in FLAT_FIELDS if f != "model"))


class _Planner:
    """Plans candidate jobs (the full accounting) on ``gpu`` (the GPU asked about; a candidate
    on another names its own), counting them."""

    def __init__(self, model: Model, level: OverheadLevel, overrides,
                 gpu: GPU | None = None) -> None:
        self.model = model
        self.level = level
        self.overrides = overrides
        self.gpu = gpu
        self.evaluated = 0
        self._cache: dict = {}

    def peak(self, mode: Mode, job: Job, gpu: GPU | None = None) -> int | None:
        gpu = gpu or self.gpu
        key = (mode, mode == "train" and gpu_non_tn_fp8(gpu, job)) + _JOB_KEY(job)
        hit = self._cache.get(key)
        if hit is not None or key in self._cache:
            return hit
        self.evaluated += 1
        try:
            if mode == "train":
                v = train_memory(self.model, job, overhead_level=self.level,
                                 overhead_overrides=self.overrides, gpu=gpu).total_bytes
            else:
                v = infer_memory(self.model, job, overhead_level=self.level,
                                 overhead_overrides=self.overrides).total_bytes
        except InputError:
            v = None  # a combination the job cannot express (e.g. seq past the limit)
        self._cache[key] = v
        return v


def _recompute_fraction(model: Model, job: Job, checkpointing: str, seq: int) -> float:
    """Extra step FLOPs of activation recompute, from the speed model's counted FLOPs
    (full checkpointing re-runs each layer's forward: about a third more)."""
    arch = model.architecture
    if arch is None:
        return 1 / 3 if checkpointing == "full" else 0.0
    try:
        fb = flops_breakdown(arch, job.with_(mode="train", seq=seq, checkpointing=checkpointing))
    except GpuplanError:  # an architecture the FLOP counter does not cover: the rule of thumb
        return 1 / 3 if checkpointing == "full" else 0.05
    return fb.recompute_flops / fb.model_flops if fb.model_flops else 0.0


# --------------------------------------------------------------------------------------------------
# Knobs


def _factor(n: int, into: dict[int, int]) -> None:
    """Add the prime factorization of ``n`` to ``into`` (trial division to sqrt(n): at most
    ~46,000 steps for the 2^31 a Job allows, whatever the value)."""
    d = 2
    while d * d <= n:
        while n % d == 0:
            into[d] = into.get(d, 0) + 1
            n //= d
        d += 1 if d == 2 else 2
    if n > 1:
        into[n] = into.get(n, 0) + 1


def _divisors(*factors: int) -> list[int]:
    """Every divisor of the product of ``factors``, from their prime factorizations (never by
    enumerating up to the product: batch x grad-accum may be 2^62)."""
    primes: dict[int, int] = {}
    for f in factors:
        _factor(f, primes)
    out = [1]
    for p, k in primes.items():
        out = [d * p**e for d in out for e in range(k + 1)]
    return sorted(out)


def _train_knobs(model: Model, job: Job, gpu: GPU, seq: int,
                 planner: _Planner) -> list[list[tuple[Change, dict]]]:
    """Groups of alternatives; a candidate takes at most one change from each group."""
    return [*_train_knobs_software(model, job, gpu, seq), _parallel_knobs(job, gpu, planner)]


def _micro_batch_knobs(job: Job) -> list[tuple[Change, dict]]:
    per_gpu = job.batch * job.grad_accum
    mb = []
    for b in sorted(_divisors(job.batch, job.grad_accum), reverse=True):
        if b >= job.batch:
            continue
        ga = per_gpu // b
        mb.append((Change(knob="micro_batch", value=b, tier=_THROUGHPUT,
                          text=f"--batch {b} --grad-accum {ga}",
                          cost=f"same global batch ({b} x {ga} per GPU); same FLOPs in smaller "
                               "matmuls: lower GPU utilization"),
                   {"batch": b, "grad_accum": ga}))
    return mb[:6]


def _checkpointing_knobs(model: Model, job: Job, seq: int) -> list[tuple[Change, dict]]:
    order = ("none", "selective", "full")
    ck = []
    for level in order[order.index(job.checkpointing) + 1:]:
        frac = _recompute_fraction(model, job, level, seq)
        what = ("recomputes the attention core" if level == "selective"
                else "recomputes every layer's forward")
        ck.append((Change(knob="checkpointing", value=level, tier=_THROUGHPUT,
                          text=f"--checkpointing {level}", extra_compute=frac,
                          cost=f"{what}: +{100 * frac:.0f}% step FLOPs"),
                   {"checkpointing": level}))
    return ck


def _schedule_knobs(job: Job) -> list[tuple[Change, dict]]:
    """An interleaved pipeline keeps more in flight on its early stages than 1F1B: stage i holds
    2 (p - i - 1) + (v - 1) p + 1 chunk micro-batches against p - i whole ones (Narayanan et al.
    2021; :func:`gpuplan.parallel.layout.in_flight`), so 1F1B gives memory back for a bubble of
    (p - 1) / m instead of (p - 1) / (v m) -- its cost, as a share of the step."""
    name, v = pp_chunks(job.pp_schedule)
    if job.pp < 2 or name != "interleaved":
        return []
    p, m = job.pp, job.micro_batches or job.grad_accum
    extra = (p - 1) / m - (p - 1) / (v * m)
    return [(Change(knob="pp_schedule", value="1f1b", tier=_THROUGHPUT,
                    text="--pp-schedule 1f1b", extra_compute=extra,
                    cost=f"pipeline bubble {p - 1}/{m} of the compute instead of {p - 1}/"
                         f"({v} x {m}): +{100 * extra:.0f}% step time"),
             {"pp_schedule": "1f1b"})]


def _zero3_knobs(job: Job) -> list[tuple[Change, dict]]:
    """DeepSpeed ZeRO-3 prefetches until stage3_max_live_parameters (1e9 by default) are
    gathered (:mod:`gpuplan.engines.zero3`): a tenth of that gives back ~1.8 GB of 16-bit
    parameters on any model past a billion, for less of the all-gather hidden behind compute."""
    if job.zero != 3 or job.sharding != "deepspeed" or job.gpus < 2:
        return []
    cap = job.stage3_max_live_parameters or MAX_LIVE
    if cap <= _SMALL_LIVE:
        return []
    return [(Change(knob="stage3_max_live_parameters", value=_SMALL_LIVE, tier=_THROUGHPUT,
                    text=f"--stage3-max-live-parameters {count_text(_SMALL_LIVE)}",
                    cost=f"DeepSpeed prefetches {count_text(_SMALL_LIVE)} parameters ahead "
                         f"instead of {count_text(cap)}: less of the weight all-gather overlaps "
                         "compute (not timed here)"),
             {"stage3_max_live_parameters": _SMALL_LIVE})]


#: What the solver offers for stage3_max_live_parameters: a tenth of DeepSpeed's default.
_SMALL_LIVE = 100_000_000


def _attention_knobs(job: Job) -> list[tuple[Change, dict]]:
    if job.attention != "eager":
        return []
    return [(Change(knob="attention", value="sdpa", tier=_FREE, text="--attention sdpa",
                    cost="none (flash/memory-efficient kernels are also faster)"),
             {"attention": "sdpa"})]


#: Optimizers whose torch.optim step has a fused CUDA kernel (``fused=True``).
_FUSABLE = ("adam", "adamw", "adagrad", "rmsprop")


def _optimizer_knobs(job: Job) -> list[tuple[Change, dict]]:
    alts = []
    if job.optimizer in _FUSABLE and not job.fused_optimizer and not job.offload_optimizer:
        alts.append((Change(knob="fused_optimizer", value=True, tier=_FREE,
                            text="--fused-optimizer",
                            cost="none (the same update, one fused kernel, no full-size "
                                 "temporary)"),
                     {"fused_optimizer": True}))
    for name in ("adamw-8bit", "adafactor", "sgd"):
        if name != job.optimizer and job.lora_rank is None:
            alts.append((Change(knob="optimizer", value=name, tier=_QUALITY,
                                text=f"--optimizer {name}", cost=OPTIMIZERS[name].tradeoff),
                         {"optimizer": name, "fused_optimizer": False,
                          "offload_optimizer": False}))
    return alts


def _precision_knobs(job: Job) -> list[tuple[Change, dict]]:
    """Pure bf16, and pure bf16 with the fused step (its foreach temporary is as large as a
    state: often the difference between fitting and not)."""
    if job.precision not in ("mixed-bf16", "amp-bf16", "fp32", "mixed-fp16", "amp-fp16"):
        return []
    cost = ("pure bf16: no fp32 master weights, updates below bf16's resolution round away "
            "(needs e.g. stochastic rounding)")
    out = [(Change(knob="precision", value="bf16", tier=_QUALITY, text="--precision bf16",
                   cost=cost), {"precision": "bf16"})]
    if job.optimizer in _FUSABLE and not job.fused_optimizer and not job.offload_optimizer:
        out.append((Change(knob="precision", value="bf16+fused", tier=_QUALITY,
                           text="--precision bf16 --fused-optimizer",
                           cost=cost + "; the fused step keeps no full-size temporary"),
                    {"precision": "bf16", "fused_optimizer": True}))
    return out


def _lora_knobs(model: Model, job: Job) -> list[tuple[Change, dict]]:
    if job.lora_rank is not None or not model.tensors or model.architecture is None \
            or model.architecture.family not in DEFAULT_LORA_TARGETS:
        return []
    return [
        (Change(knob="lora", value=16, tier=_QUALITY, text="--lora-rank 16",
                cost="trains rank-16 adapters on a frozen base: a fine-tune, not full "
                     "training (Hu et al. 2021)"),
         {"lora_rank": 16}),
        (Change(knob="lora", value="qlora", tier=_QUALITY, text="--lora-rank 16 --lora-base nf4",
                cost="QLoRA: rank-16 adapters on an NF4 base, dequantized per matmul (slower); "
                     "matched 16-bit fine-tuning in Dettmers et al. 2023"),
         {"lora_rank": 16, "lora_base": "nf4"}),
    ]


def _offload_knobs(model: Model, job: Job, gpu: GPU) -> list[tuple[Change, dict]]:
    if job.offload_optimizer or job.optimizer == "sgd" or gpu.pcie_bandwidth is None:
        return []
    recipe = get_recipe(job.precision)
    pcie = gpu.pcie_bandwidth
    traffic = model.params.total * (recipe.grad_bytes + recipe.weight_bytes)
    return [(Change(knob="offload_optimizer", value=True, tier=_THROUGHPUT,
                    text="--offload-optimizer",
                    cost=f"optimizer step on the CPU: {format_bytes(traffic)} of gradients and "
                         f"weights cross PCIe each step (~{traffic / pcie:.1f} s at "
                         f"{pcie / 1e9:.0f} GB/s) and host memory for the states"),
             {"offload_optimizer": True, "fused_optimizer": False})]


#: Most data-parallel GPUs the solver offers.
_MAX_SOLVER_GPUS = 512
_ZERO_TEXT = {1: "shards optimizer states", 2: "shards states and gradients",
              3: "shards everything, gathers weights every layer"}


def _fewest_gpus(job: Job, zero: int, usable: int, planner: _Planner) -> int | None:
    """The fewest GPUs (more than the job has) with ZeRO-``zero`` on which the job fits: the
    same search as ``gpuplan fit``'s "ZeRO-3 GPUs" column, so the two always agree. Per-GPU
    memory does not grow with the GPU count, so a bisection finds it."""
    def fits(n: int) -> bool:
        peak = planner.peak("train", job._evolve(gpus=n, zero=zero))
        return peak is not None and peak <= usable

    lo, hi = max(2, job.gpus + 1), _MAX_SOLVER_GPUS
    if lo > hi or not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        hi, lo = (mid, lo) if fits(mid) else (hi, mid + 1)
    return lo


def _parallel_knobs(job: Job, gpu: GPU, planner: _Planner) -> list[tuple[Change, dict]]:
    """More GPUs with each ZeRO stage from the job's up: the fewest that fit, never more; and
    the TP x PP layout where it needs fewer GPUs than ZeRO-3 alone (the search behind ``fit``'s
    layout column, so the two agree)."""
    par = []
    stages = job.engine_profile.zero_stages if job.engine != "auto" else (0, 1, 2, 3)
    for z in (1, 2, 3):
        if z not in stages or (z == 1 and job.sharding == "fsdp2"):
            continue  # a stage the engine does not run (FSDP2 has no optimizer-only ZeRO)
        n = _fewest_gpus(job, z, gpu.memory_bytes, planner) if z >= job.zero else None
        if n is None:
            continue
        ga = job.grad_accum
        keep = ga * job.gpus % n == 0
        new_ga = ga * job.gpus // n if keep else ga
        par.append((Change(knob="zero", value=(n, z), tier=_HARDWARE,
                           text=f"--gpus {n} --zero {z}"
                                + (f" --grad-accum {new_ga}" if new_ga != ga else ""),
                           cost=f"{n} GPUs instead of {job.gpus}; ZeRO-{z} {_ZERO_TEXT[z]}"
                                + ("" if keep else "; the global batch grows")),
                    {"gpus": n, "zero": z, "grad_accum": new_ga}))
    model, level, over = planner.model, planner.level, planner.overrides
    memo = shared_memo(model, job, level, over, gpu)
    n3 = fewest_zero3(model, job, gpu.memory_bytes, level, over, memo, gpu)
    lay = train_layout(model, job, gpu.memory_bytes, level, over, memo, below=n3, gpu=gpu)
    if lay is not None:
        par.append(_layout_change(job, lay, f"ZeRO-3 alone needs {n3 or 'more than 4096'}"))
    return par


def _layout_change(job: Job, lay: LayoutFit, alone: str) -> tuple[Change, dict]:
    """A TP x PP layout as a change: its options, and what it costs."""
    parts = [f"{lay.gpus} GPUs ({alone})"]
    if lay.tp > 1:
        parts.append(f"tensor parallel {lay.tp} within a node: all-reduces in every layer"
                     + ("; sequence parallel" if lay.sequence_parallel else ""))
    if lay.pp > 1:
        parts.append(f"{lay.pp} pipeline stages" + (
            f", {lay.micro_batches} micro-batches: a bubble of {lay.pp - 1}/{lay.micro_batches} "
            "of the step (1F1B, Narayanan et al. 2021)" if lay.mode == "train"
            else " across nodes: activations pass between stages"))
    if lay.mode == "train" and lay.dp > 1:
        parts.append(f"ZeRO-{lay.zero} over {lay.dp} data-parallel ranks"
                     + ("" if lay.dp == job.gpus else "; the global batch changes"))
    extra = {"_count": lay.gpus} if lay.mode == "infer" else {}
    return (Change(knob="layout", value=(lay.gpus, lay.tp, lay.pp, lay.zero), tier=_HARDWARE,
                   text=lay.flags(job), cost="; ".join(parts)),
            {**lay.changes(job), **extra})


def _infer_knobs(model: Model, job: Job, prompt: int, context: int,
                 layout: list) -> list[list[tuple[Change, dict]]]:
    groups: list[list[tuple[Change, dict]]] = []
    cur_bits = get_weight_format(job.infer_precision).bits
    fmts = []
    shipped = model.architecture.checkpoint_format if model.architecture else None
    names = ("fp8", "int8", "q8_0", "awq-4bit", "gptq-4bit", "q4_k_m", "nf4")
    if shipped in ("fp8-block", "mxfp4"):
        names = (shipped, *names)  # the format the checkpoint ships in, first
    for name in names:
        if WEIGHT_FORMATS[name].bits < cur_bits:
            fmts.append((Change(knob="infer_precision", value=name, tier=_QUALITY,
                                text=f"--precision {name}", cost=_FORMAT_TRADEOFF[name]),
                         {"infer_precision": name}))
    groups.append(fmts)
    arch = model.architecture
    if arch is not None and arch.kind == "decoder":
        kv = []
        cur = job.kv_dtype or "bf16"
        for name, cost in (("fp8", "fp8 KV cache: small accuracy loss (vLLM docs: fp8 e4m3 KV)"),
                           ("int8", "int8 KV cache with per-token scales: small accuracy loss")):
            if name != cur:
                kv.append((Change(knob="kv_dtype", value=name, tier=_QUALITY,
                                  text=f"--kv-dtype {name}", cost=cost), {"kv_dtype": name}))
        groups.append(kv)
        ctxs = []
        c = context // 2
        while c >= 256 and len(ctxs) < 4:
            seq = min(prompt, c)  # the prompt is cut too when it no longer fits the context
            ctxs.append((Change(knob="context", value=c, tier=_QUALITY,
                                text=f"--context {c}" + (f" --seq {seq}" if seq != job.seq
                                                         else ""),
                                cost=f"at most {c} tokens per sequence (prompt + reply)"),
                         {"context": c, "seq": seq}))
            c //= 2
        groups.append(ctxs)
    if job.batch > 1:
        bs = []
        b = job.batch // 2
        while b >= 1 and len(bs) < 4:
            bs.append((Change(knob="batch", value=b, tier=_QUALITY, text=f"--batch {b}",
                              cost=f"serves {b} sequences at once instead of {job.batch}: "
                                   "lower throughput"),
                       {"batch": b}))
            b //= 2
        groups.append(bs)
    if job.attention == "eager":
        groups.append([(Change(knob="attention", value="sdpa", tier=_FREE,
                               text="--attention sdpa", cost="none"), {"attention": "sdpa"})])
    if job.prefill_logits == "all":
        groups.append([(Change(knob="prefill_logits", value="last", tier=_FREE,
                               text="--prefill-logits last",
                               cost="logits for the last prompt position only: none for "
                                    "generation (generate() does this)"),
                        {"prefill_logits": "last"})])
    groups.append(_tp_knobs(model, job) + layout)
    return groups


def _tp_knobs(model: Model, job: Job) -> list[tuple[Change, dict]]:
    """Tensor parallelism within a node, over the degrees ``fit`` accepts for the model and
    its engine (:func:`~gpuplan.memory.fewest.serving_tp_degrees`), planned as the layout
    each is -- one rank of ``--tp N --gpus N``, tensor by tensor."""
    if job.tp * job.pp * job.cp * job.ep > 1 or model.architecture is None:
        return []
    out = []
    for n in serving_tp_degrees(model, job, {}):
        if 1 < n <= job.gpus_per_node:
            out.append((Change(knob="tensor_parallel", value=n, tier=_HARDWARE,
                               text=f"--tp {n} --gpus {n}",
                               cost=f"{n} GPUs; all-reduces in every layer"),
                        {"tp": n, "gpus": n}))
    return out


def _infer_layout_knob(model: Model, job: Job, gpu: GPU, planner: _Planner) -> list:
    """The TP x PP serving layout where TP within one node is not enough (``fit``'s layout
    column, the same search)."""
    level, over = planner.level, planner.overrides
    memo = shared_memo(model, job, level, over)
    n = fewest_tp(model, job, gpu.memory_bytes, level, over, memo)
    lay = infer_layout(model, job, gpu.memory_bytes, level, over, memo, tp_gpus=n)
    if lay is None:
        return []
    if n is not None:
        why = f"tensor parallel alone needs {n}"
    elif serving_tp_degrees(model, job, memo) == (1,):
        why = "no tensor-parallel degree splits its attention heads"
    else:
        why = f"tensor parallel alone needs more than {MAX_TP}"
    return [_layout_change(job, lay, why)]


def _gpu_alternatives(gpu: GPU, model: Model | None = None,
                      given: Job | None = None) -> list[tuple[Change, dict]]:
    """The bigger GPUs. Where the job's inference format is ``auto``, each GPU plans the format
    that GPU resolves it to (a shipped FP8 checkpoint dequantized on one card loads as FP8 on
    another), as ``fit --gpu`` with the printed flags will."""
    out = []
    for g in sorted((get_gpu(n) for n in SOLVER_GPUS), key=lambda g: g.memory_bytes):
        if g.memory_bytes > gpu.memory_bytes:
            fix: dict = {"_gpu": g}
            if given is not None and model is not None and given.infer_precision == INFER_AUTO:
                fix["_auto_infer"] = given.resolve_infer(
                    model.architecture, g.architecture).infer_precision
            out.append((Change(knob="gpu", value=g.name, tier=_HARDWARE, text=f"--gpu {g.name}",
                               cost=f"a {g.name} ({format_bytes(g.memory_bytes)}) instead of a "
                                    f"{gpu.name}"),
                        fix))
    return out


# --------------------------------------------------------------------------------------------------
# Search


#: What each cost tier weighs in a candidate's score. Software knobs (free, a slower step, a
#: different numerical recipe) come before more or other hardware: the ranking sorts on "needs
#: hardware" first, the weights only order candidates within each side.
_TIER_WEIGHT = {_FREE: 0.1, _THROUGHPUT: 1.0, _QUALITY: 2.0, _HARDWARE: 3.0}

#: Knobs a person tries later than their tier says: offload makes every step cross PCIe; LoRA
#: turns training into a fine-tune of adapters (QLoRA also quantizes the base).
_KNOB_PENALTY = {"offload_optimizer": 3.0, "lora": 2.5}


def _score_terms(change: Change, kw: dict) -> tuple[float, float, float]:
    """A change's part of every score it enters, worked out once per change: its tier's weight,
    twice its extra compute, and its knob's own term (0.0 for most knobs)."""
    own = _KNOB_PENALTY.get(change.knob, 0.0)
    if change.knob == "micro_batch":
        own = 0.05 * math.log2(max(1, 64 / max(change.value, 1)))
    elif change.knob == "gpu":
        own = 0.3 * math.log2(1 + kw["_gpu"].memory_bytes / 1e10)
    elif change.knob == "infer_precision":  # fewer bits, more quality risk: the wider format
        own = 0.5 * (16 - WEIGHT_FORMATS[change.value].bits) / 16
    elif change.value == "qlora":
        own += 0.5
    return _TIER_WEIGHT[change.tier], 2 * change.extra_compute, own


def _score(terms: list[tuple[float, float, float]], extra_gpus: int) -> float:
    """Lower is better: the tier weights, the extra compute, a little per extra GPU, then each
    knob's own term (summed in this order)."""
    s = sum(w for w, _, _ in terms)
    s += sum(x for _, x, _ in terms) + 0.05 * math.log2(1 + extra_gpus)
    for _, _, own in terms:
        s += own
    return s


def _rank_key(s: Suggestion) -> tuple:
    """Software before hardware, then the score, fewer changes, the lower peak."""
    hardware = any(c.tier == _HARDWARE for c in s.changes)
    return (hardware, s.score, len(s.changes), s.peak_bytes)


class _Search:
    """Plans candidate combinations of changes and keeps those that fit (and help), and the
    closest miss when none does."""

    def __init__(self, planner: _Planner, job: Job, gpu: GPU, mode: Mode, base_peak: int):
        self.planner, self.job, self.gpu, self.mode = planner, job, gpu, mode
        self.base_peak = base_peak
        self.fits_already = base_peak <= gpu.memory_bytes
        self.found: list[Suggestion] = []
        self.best_miss: Suggestion | None = None
        self.candidates = 0

    def evaluate(self, combo: tuple[tuple[Change, dict, tuple], ...]) -> bool:
        """Plan one candidate; keep it when it fits and helps, or when it is the closest miss
        so far (only then is it scored). True when it fits."""
        self.candidates += 1
        kw: dict = {}
        target, count, auto = self.gpu, None, None
        for _, d, _ in combo:
            for k, v in d.items():
                if k == "_count":
                    count = v
                elif k == "_gpu":
                    target = v
                elif k == "_auto_infer":
                    auto = v
                else:
                    kw[k] = v
        if auto is not None:  # another GPU resolves "auto" its own way, unless a format is named
            kw.setdefault("infer_precision", auto)
        job = self.job
        cand = job._evolve(**kw) if kw else job
        peak = self.planner.peak(self.mode, cand, target)
        if peak is None:
            return False
        fits = peak <= target.memory_bytes
        helps = fits and (not self.fits_already or peak < self.base_peak)
        miss = self.best_miss
        if not helps and miss is not None and (
                peak - target.memory_bytes >= miss.peak_bytes - miss.usable_bytes):
            return fits
        changes = tuple(c for c, _, _ in combo)
        train = self.mode == "train"
        if count is None:
            count = cand.gpus if train else cand.tp * cand.pp
        s = Suggestion(mode=self.mode, changes=changes, job=cand, gpu=target.name,
                       gpu_count=count, peak_bytes=peak, usable_bytes=target.memory_bytes,
                       fits=fits, extra_compute=sum(c.extra_compute for c in changes),
                       tier=max(c.tier for c in changes),
                       score=_score([t for _, _, t in combo],
                                    max(0, count - (job.gpus if train else 1))))
        if helps:
            self.found.append(s)
        else:
            self.best_miss = s
        return fits

    def run(self, groups: list, max_changes: int, top: int) -> None:
        """One change, then pairs, then triples from different groups; a combination that
        already contains a fitting sub-combination is not extended (it only costs more)."""
        fitting: list[frozenset] = []
        for k in range(1, max_changes + 1):
            for gs in itertools.combinations(range(len(groups)), k):
                for combo in itertools.product(*(groups[i] for i in gs)):
                    names = frozenset(c.text for c, _, _ in combo)
                    if any(f <= names for f in fitting):
                        continue
                    if self.evaluate(combo):
                        fitting.append(names)
            software = sum(not _rank_key(s)[0] for s in self.found)
            if software >= 4 * top and k >= 2:
                break


def _pick(found: list[Suggestion], top: int) -> list[Suggestion]:
    """The best ``top``, a distinct idea each: not a superset of one already picked, and not
    the same knobs turned further (4 GPUs after 2 already fit)."""
    picked: list[Suggestion] = []
    for s in sorted(found, key=_rank_key):
        texts = {c.text for c in s.changes}
        knobs = {c.knob for c in s.changes}
        if any({c.text for c in p.changes} <= texts or {c.knob for c in p.changes} == knobs
               for p in picked):
            continue
        picked.append(s)
        if len(picked) >= top:
            break
    return picked


def _message(search: _Search, picked: list[Suggestion]) -> str:
    gpu, mode = search.gpu, search.mode
    have = f"{format_bytes(search.base_peak)} of {format_bytes(gpu.memory_bytes)}"
    if picked and search.fits_already:
        return (f"fits on {gpu.name} ({have}); {len(picked)} change(s) that lower the peak "
                "below")
    if picked:
        return f"does not fit on {gpu.name} ({have}); {len(picked)} change(s) that fit below"
    if search.fits_already:
        return f"fits on {gpu.name} ({have}); no change gpuplan tries lowers the peak"
    miss = search.best_miss
    return (f"no change gpuplan tries makes this {mode} job fit on {gpu.name} "
            f"({format_bytes(gpu.memory_bytes)})"
            + (f"; closest: {miss.summary} needs {format_bytes(miss.peak_bytes)}" if miss else ""))


def _knob_groups(model: Model, job: Job, gpu: GPU, mode: Mode, planner: _Planner,
                 fits_already: bool, given: Job | None = None) -> list:
    """The knobs for ``mode`` and the bigger GPUs, each change with its score terms (worked out
    here once rather than per candidate); only software knobs when the job fits already."""
    seq = job.seq or default_seq(model.architecture)
    if mode == "train":
        groups = _train_knobs(model, job, gpu, seq, planner) if not fits_already else \
            _train_knobs_software(model, job, gpu, seq)
    else:
        layout = [] if fits_already else _infer_layout_knob(model, job, gpu, planner)
        groups = _infer_knobs(model, job, seq, job.context or seq, layout)
    groups.append(_gpu_alternatives(gpu, model, given if mode == "infer" else None))
    if fits_already:
        groups = [[(c, d) for c, d in g if c.tier != _HARDWARE] for g in groups]
    return [[(c, d, _score_terms(c, d)) for c, d in g] for g in groups if g]


def _train_knobs_software(model: Model, job: Job, gpu: GPU, seq: int) -> list:
    """The training knobs without more GPUs (no search for a GPU count that is not offered)."""
    return [_micro_batch_knobs(job), _checkpointing_knobs(model, job, seq),
            _schedule_knobs(job), _zero3_knobs(job), _attention_knobs(job), _optimizer_knobs(job),
            _precision_knobs(job), _lora_knobs(model, job), _offload_knobs(model, job, gpu)]


def suggest(model: Model, job: Job, gpu: GPU, *, mode: Mode = "train",
            overhead_level: OverheadLevel = "expected", overhead_overrides=None,
            top: int = DEFAULT_TOP, max_changes: int = 3,
            as_asked: Job | None = None) -> Suggestions:
    """The cheapest changes that make ``job`` fit on ``gpu`` (one GPU of that model per
    process), each re-planned with the full accounting. Software knobs rank before more or
    other hardware; a GPU count offered is the fewest that fits (as ``fit``'s column says).
    ``as_asked``: the job as given when ``job`` is a plan's resolution of it (``fit`` resolves
    an ``auto`` inference format once for its GPUs): a bigger GPU proposed resolves the format
    its own way, as ``fit --gpu`` with the printed flags does."""
    _solver_args(model, job, gpu, mode, overhead_level, overhead_overrides)
    given = as_asked if as_asked is not None else job
    job = job.resolve_infer(model.architecture, gpu.architecture)
    int_arg(top, "top", high=MAX_TOP)
    int_arg(max_changes, "max_changes", high=MAX_CHANGES)
    t0 = time.perf_counter()
    planner = _Planner(model, overhead_level, overhead_overrides, gpu)
    base_peak = planner.peak(mode, job)
    if base_peak is None:
        raise InputError(f"the job cannot be planned as given; check {opt('seq')} and "
                         f"{opt('context')}")
    search = _Search(planner, job, gpu, mode, base_peak)
    groups = _knob_groups(model, job, gpu, mode, planner, search.fits_already, given)
    search.run(groups, max_changes, top)
    picked = _pick(search.found, top)
    fits_already = search.fits_already
    return Suggestions(mode=mode, gpu=gpu.name, usable_bytes=gpu.memory_bytes,
                       current_peak_bytes=base_peak, fits_already=fits_already,
                       suggestions=tuple(picked),
                       closest_miss=None if picked or fits_already else search.best_miss,
                       evaluated=search.candidates, planned=planner.evaluated,
                       seconds=time.perf_counter() - t0, message=_message(search, picked))


def _solver_args(model: object, job: object, gpu: object, mode: object, level: object,
                 overrides: object) -> None:
    """What every solver entry takes, checked before the search (issue 32)."""
    memory_args(model, job, level, overrides)
    gpu_arg(gpu)
    choice_arg(mode, "mode", ("train", "infer"))


# --------------------------------------------------------------------------------------------------
# Direct queries


def _bisect_max(fits, lo: int, hi: int) -> int:
    """Largest x in [lo, hi] with fits(x), given fits(lo) and monotonicity."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_batch(model: Model, job: Job, gpu: GPU, *, mode: Mode = "train",
              overhead_level: OverheadLevel = "expected", overhead_overrides=None,
              limit: int = 1 << 20) -> int:
    """The largest micro-batch (training) or number of concurrent sequences (inference) that
    fits on one ``gpu``; an :class:`InputError` naming the need when not even 1 fits."""
    _solver_args(model, job, gpu, mode, overhead_level, overhead_overrides)
    given, job = job, job.resolve_infer(model.architecture, gpu.architecture)
    int_arg(limit, "limit", "batch")
    planner = _Planner(model, overhead_level, overhead_overrides, gpu)

    def fits(b: int) -> bool:
        p = planner.peak(mode, job.with_(batch=b))
        return p is not None and p <= gpu.memory_bytes

    if not fits(1):
        need = planner.peak(mode, job.with_(batch=1))
        raise InputError(f"not even batch 1 fits on {gpu.name}: it needs "
                         f"{format_bytes(need or 0)} of {format_bytes(gpu.memory_bytes)}; try "
                         f"{opt('suggest')}")
    hi = 1
    while hi < limit and fits(hi * 2):
        hi *= 2
    return _bisect_max(fits, hi, min(hi * 2 - 1, limit))


def max_seq(model: Model, job: Job, gpu: GPU, *, mode: Mode = "train",
            overhead_level: OverheadLevel = "expected", overhead_overrides=None) -> int:
    """The longest sequence (training) or context (inference: prompt + generated tokens) that
    fits on one ``gpu``, up to the architecture's limit."""
    _solver_args(model, job, gpu, mode, overhead_level, overhead_overrides)
    given, job = job, job.resolve_infer(model.architecture, gpu.architecture)
    arch = model.architecture
    if arch is None:
        raise InputError(f"{opt('max_seq')} needs the architecture: give a catalog name or a "
                         "config.json", field="max_seq")
    limit = seq_limit(arch)
    if arch.kind == "vision":
        raise InputError(f"{model.name} is a vision model: its sequence is fixed by the image "
                         f"size ({limit} tokens)")
    planner = _Planner(model, overhead_level, overhead_overrides, gpu)
    prompt = job.seq or default_seq(arch)  # inference: the prompt stays, the context grows

    def fits(s: int) -> bool:
        cand = (job.with_(seq=s, context=None) if mode == "train"
                else job.with_(seq=min(prompt, s), context=s))
        p = planner.peak(mode, cand)
        return p is not None and p <= gpu.memory_bytes

    if not fits(1):
        raise InputError(f"not even a 1-token sequence fits on {gpu.name}; try {opt('suggest')}")
    return _bisect_max(fits, 1, limit)
