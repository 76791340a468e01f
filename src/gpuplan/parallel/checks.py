"""The layout checks of a job against its architecture (heads over TP, layers over the pipeline's
parts, experts over EP, ring attention's chunks) and the pipeline's split: the one check behind
fit, speed, trace and cluster."""

from __future__ import annotations

import math

from functools import lru_cache

from ..engines.profiles import check_engine_split, get_engine
from ..errors import InputError, opt
from ..models import Architecture

#: Pipeline schedules; ``interleaved:V`` (V model chunks per stage) is spelled with its V.
#: ``dualpipe``: DeepSeek-V3's bidirectional schedule (arXiv 2412.19437 sec. 3.2.1;
#: github.com/deepseek-ai/DualPipe): each rank holds two stages (``i`` and ``pp - 1 - i``).
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved", "dualpipe")

__all__ = ["PP_SCHEDULES", "pp_chunks", "pipeline_fix", "divisors", "nearest", "tp_fix", "part_layers",
           "uneven_parts", "check_layout"]


def pp_chunks(schedule: object) -> tuple[str, int]:
    """(schedule, model chunks per stage) of a ``pp_schedule`` spelling; 1 chunk unless
    ``interleaved:V``."""
    text = str(schedule).strip().lower()
    name, _, v = text.partition(":")
    if name not in PP_SCHEDULES or (v and name != "interleaved"):
        raise InputError(f"{opt('pp_schedule')} {schedule!r:.40}: expected gpipe, 1f1b, "
                         "dualpipe or interleaved:V (V model chunks per stage, e.g. "
                         "interleaved:2)",
                         field="pp_schedule", value=schedule)
    if name != "interleaved":
        return name, 1
    if not (v.isascii() and v.isdigit()) or not 2 <= int(v) <= 64:
        raise InputError(f"{opt('pp_schedule')} {schedule!r:.40}: interleaved needs its chunks "
                         "per stage, 2 to 64, e.g. interleaved:2", field="pp_schedule",
                         value=schedule, fix={"pp_schedule": "interleaved:2"})
    return name, int(v)


def pipeline_fix(units: int, pp: int, chunks: int) -> str:
    """The way out when ``pp x chunks`` pipeline parts outnumber the ``units`` (layers, and the
    embedding / loss parts) to split: fewer chunks when the stages alone fit, else fewer stages."""
    if chunks > 1 and units >= 2 * pp:
        return f"{opt('pp_schedule')} interleaved:{units // pp} or fewer chunks"
    if chunks > 1 and units >= pp:
        return f"{opt('pp_schedule')} 1f1b (one chunk per stage)"
    return f"{opt('pp')} {units} or less"


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in order, by trial division up to its square root (a head count of
    10^7 took 0.7 s a call enumerated to n; the fuzzer's 14 s plan)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def nearest(v: int, valid: list[int]) -> str:
    """The valid values just below and above ``v``, as "A or B"."""
    lo = max((x for x in valid if x < v), default=None)
    hi = min((x for x in valid if x > v), default=None)
    return " or ".join(str(x) for x in (lo, hi) if x is not None) or str(min(valid))


def tp_fix(t: int, valid: list[int], room: int, rest: int) -> str:
    """The TP degrees nearest ``t`` among ``valid`` (:func:`nearest`); those that also divide
    ``room`` (the GPUs per pipeline x context group, 0 when the GPU count is not a multiple of
    ``rest`` = pp x cp) first, so the data-parallel degree comes out whole, the nearest others
    said with the GPU count they need."""
    near = nearest(t, valid)
    whole = [d for d in valid if room and room % d == 0]
    if not whole or nearest(t, whole) == near:
        return near
    return f"{nearest(t, whole)} (or {near} with {opt('gpus')} a multiple of it" \
        + (f" x {rest})" if rest > 1 else ")")


@lru_cache(maxsize=256)
def part_layers(num_layers: int, pp: int, chunks: int = 1, embedding: bool = False,
                loss: bool = False, first: int | None = None,
                last: int | None = None) -> tuple[int, ...]:
    """Transformer layers of each of the ``pp * chunks`` pipeline parts, in model order (part
    ``k`` is chunk ``k // pp`` of stage ``k % pp``). The units split are the layers, plus one for
    the embedding before them (``embedding``) and one for the head and loss after them
    (``loss``), as Megatron-LM's ``--account-for-{embedding,loss}-in-pipeline-split`` count them;
    ``units // parts`` each, the first ``units % parts`` parts one unit longer (DeepSpeed's
    ``partition_uniform``; Megatron refuses a split that does not divide). The embedding's unit is
    the first part's first, the loss's the last part's last: those parts hold one layer fewer.

    With ``first`` / ``last`` (an uneven split: Megatron-LM's ``--decoder-first-pipeline-num-
    layers`` / ``--decoder-last-pipeline-num-layers``) the first / last stage holds that many
    transformer layers, the stages between them the rest (``partition_uniform`` again), and each
    stage's layers are cut over its ``chunks`` the same way (:func:`uneven_parts`).

    Raises :class:`InputError` when a part would hold nothing, or a stage no transformer layer."""
    if (first is not None or last is not None) and pp > 1:
        return uneven_parts(num_layers, pp, chunks, first, last, embedding or loss)
    parts = pp * chunks
    units = num_layers + (int(embedding) + int(loss) if pp > 1 else 0)
    if parts > units:
        what = f"{opt('pp')} {pp}" + (f" x {chunks} chunks" if chunks > 1 else "")
        counted = (" + the embedding" if embedding else "") + (" + the loss" if loss else "")
        raise InputError(f"{what}: {num_layers} layers{counted} are {units} parts of the "
                         f"pipeline split, fewer than its {parts}; use "
                         f"{pipeline_fix(units, pp, chunks)}", field="pp", value=pp)
    base, extra = divmod(units, parts)
    out = [base + (1 if k < extra else 0) for k in range(parts)]
    if pp > 1:
        out[0] -= int(embedding)
        out[-1] -= int(loss)
    empty = [s for s in range(pp) if not any(out[s::pp])]
    if empty:
        raise InputError(f"{opt('pp')} {pp}: stage {empty[0]} would hold only the "
                         f"{'embedding' if empty[0] == 0 else 'head and loss'} and no "
                         f"transformer layer ({num_layers} layers); use {opt('pp')} {pp - 1} or "
                         "less", field="pp", value=pp)
    return tuple(out)


def _uniform(n: int, k: int) -> list[int]:
    """``n`` cut into ``k`` parts, the first ``n % k`` one longer (``partition_uniform``)."""
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def uneven_parts(num_layers: int, pp: int, chunks: int, first: int | None, last: int | None,
                 accounted: bool = False) -> tuple[int, ...]:
    """Transformer layers of each pipeline part (model order, as :func:`part_layers`) when the
    first and/or last stage holds a given number of layers: the other stages split the rest
    evenly, the first ``rest % stages`` one layer longer, and every stage cuts its layers over
    its ``chunks`` the same way (Megatron-LM divides each stage's layers by V and refuses a
    remainder; its ``--pipeline-model-parallel-layout`` places any count per part, which is how
    the export writes a split that does not divide). One :class:`InputError` line when a stage
    or chunk would hold no layer, or with the embedding / loss counted as parts too (Megatron
    refuses the two together)."""
    if accounted:
        raise InputError(f"{opt('pp_first_stage_layers')} / {opt('pp_last_stage_layers')} give "
                         "the stages' layers themselves; drop "
                         f"{opt('pp_embedding_part')} / {opt('pp_loss_part')}",
                         field="pp_first_stage_layers", value=first)
    given = {0: first, pp - 1: last}
    fixed = {s: n for s, n in given.items() if n is not None}
    rest_stages = pp - len(fixed)
    rest = num_layers - sum(fixed.values())
    for s, n in fixed.items():
        name = "pp_first_stage_layers" if s == 0 else "pp_last_stage_layers"
        if n < chunks:
            raise InputError(f"{opt(name)} {n}: each of the stage's {chunks} chunks needs a "
                             f"transformer layer; use {chunks} or more", field=name, value=n)
    if rest < rest_stages * chunks or (rest_stages == 0 and rest != 0):
        name = "pp_first_stage_layers" if first is not None else "pp_last_stage_layers"
        need = rest_stages * chunks
        what = (f"would leave {rest} of {num_layers} layers for the other {rest_stages} stages"
                + (f" x {chunks} chunks" if chunks > 1 else "")
                if rest_stages else f"would hold {num_layers - rest} of {num_layers} layers")
        both = len(fixed) == 2
        fix = (f"give {'them' if both else 'it'} {num_layers - need} layers or fewer"
               + (" together" if both else "") if rest_stages
               else f"make them add up to {num_layers}")
        stages = "the first and last stages" if both else "the " + (
            "first" if first is not None else "last") + " stage"
        raise InputError(f"{opt(name)} {fixed[0 if first is not None else pp - 1]}: {stages} "
                         f"{what}; {fix}", field=name,
                         value=first if first is not None else last)
    middle = iter(_uniform(rest, rest_stages) if rest_stages else [])
    stage_totals = [fixed[s] if s in fixed else next(middle) for s in range(pp)]
    per_stage = [_uniform(n, chunks) for n in stage_totals]
    return tuple(per_stage[k % pp][k // pp] for k in range(pp * chunks))


def check_layout(arch: Architecture | None, job: object, seq: int | None = None) -> None:
    """Raise one :class:`InputError` line (the value and the nearest valid ones) when the job's
    layout does not fit the architecture: heads and MLP widths divisible by TP (K/V heads split
    or replicated evenly), a transformer layer in every pipeline part, experts divisible by EP
    and EP inside the data-parallel x context-parallel group, ring attention's balanced
    chunks. The one check behind fit, speed, trace and cluster (memory and compute both call
    it); ``seq``: the sequence the caller resolved (default ``job.seq``; None skips the
    sequence's checks)."""
    _check_moe_options(arch, job)
    mtp = getattr(job, "mtp_layers", None)
    if mtp and (arch is None or not arch.mtp_params):
        name = arch.name if arch is not None else "the model"
        raise InputError(f"{opt('mtp_layers')} {mtp}: {name}'s config has no "
                         "multi-token-prediction layer (num_nextn_predict_layers) to train; drop "
                         f"{opt('mtp_layers')}", field="mtp_layers", value=mtp)
    if job.tp == job.pp == job.cp == job.ep == 1:
        if mtp:  # the single-GPU accounting has no MTP module: only the per-rank model does
            raise InputError(f"{opt('mtp_layers')} {mtp} is counted on a parallel layout's last "
                             f"stage; give {opt('pp')} or {opt('ep')} 2 or more, or drop "
                             f"{opt('mtp_layers')}", field="mtp_layers", value=mtp)
        return
    if arch is None:
        raise InputError("tp/pp/cp/ep > 1 needs the architecture (a catalog name or a "
                         "config.json), not a bare parameter count")
    seq = job.seq if seq is None else seq
    _check_tp(arch, job, seq)
    _check_pp(arch, job)
    _check_cp_ep(arch, job, seq)


def _check_moe_options(arch: Architecture | None, job: object) -> None:
    """The MoE options against the model: a capacity factor, a dispatcher, the router graphs
    and the whole-layer graph, the shared expert overlap."""
    cf = getattr(job, "moe_capacity_factor", None)
    if cf is not None and arch is not None and not arch.num_experts:
        raise InputError(f"{opt('moe_capacity_factor')} {cf}: {arch.name} has no experts; drop "
                         f"{opt('moe_capacity_factor')}", field="moe_capacity_factor", value=cf)
    disp = getattr(job, "moe_dispatcher", "alltoall")
    if disp != "alltoall" and arch is not None and not arch.num_experts:
        raise InputError(f"{opt('moe_dispatcher')} {disp}: {arch.name} has no experts to "
                         f"dispatch; drop {opt('moe_dispatcher')}", field="moe_dispatcher",
                         value=disp)
    scope = getattr(job, "cuda_graph_scope", None) or ()
    routed = [p for p in scope if p in ("moe_router", "moe_preprocess")]
    if routed and arch is not None and not arch.num_experts:
        # transformer_config.py @b0cc2706: 'moe cuda graph is only supported for MoE.'
        raise InputError(f"{opt('cuda_graph_scope')} {routed[0]}: {arch.name} has no experts to "
                         f"route; keep attn only or drop {opt('cuda_graph_scope')}",
                         field="cuda_graph_scope", value=routed[0])
    if "full" in scope and arch is not None and arch.num_experts and cf is None:
        # NVIDIA/Megatron-LM@core_v0.15.0rc6 megatron/core/transformer/moe/README.md 'CUDA Graph
        # Support': without --moe-expert-capacity-factor and --moe-pad-expert-input-to-capacity
        # 'the resulting dynamic shapes make MoE layers uncapturable'; @0d8e0714
        # transformer_config.py: 'moe cuda graph is only supported with drop-padding MoE.'
        raise InputError(f"{opt('cuda_graph_scope')} full with dropless MoE: {arch.name}'s "
                         "expert splits change shape every step, which a whole-layer graph "
                         f"cannot hold; give {opt('moe_capacity_factor')} (token drop, padded "
                         "to capacity) or graph attn, moe_router only",
                         field="cuda_graph_scope", value="full",
                         fix={"moe_capacity_factor": 1.0})
    if getattr(job, "moe_shared_expert_overlap", False) and arch is not None \
            and not arch.shared_expert_intermediate_size:
        raise InputError(f"{opt('moe_shared_expert_overlap')}: {arch.name} has no shared expert; "
                         f"drop {opt('moe_shared_expert_overlap')}",
                         field="moe_shared_expert_overlap", value=True)


def _check_tp(arch: Architecture, job: object, seq: int | None) -> None:
    t = job.tp
    if t == 1:
        return
    h, kv = arch.num_heads, arch.num_kv_heads
    rest = job.pp * job.cp
    room = job.gpus // rest if job.gpus % rest == 0 else 0

    if h % t:
        raise InputError(f"{opt('tp')} {t}: {arch.name} has {h} attention heads, not divisible by "
                         f"{t}; use {opt('tp')} {tp_fix(t, divisors(h), room, rest)}",
                         field="tp", value=t)
    if kv % t and t % kv:
        ok = [d for d in divisors(h) if kv % d == 0 or d % kv == 0]
        raise InputError(f"{opt('tp')} {t}: {arch.name}'s {kv} K/V heads neither split over {t} "
                         "ranks "
                         f"nor replicate evenly; use {opt('tp')} {tp_fix(t, ok, room, rest)}",
                         field="tp", value=t)
    widths = {arch.intermediate_size, arch.moe_intermediate_size,
              arch.shared_expert_intermediate_size} - {0}
    for w in sorted(widths):
        if w % t:
            raise InputError(f"{opt('tp')} {t}: MLP width {w} is not divisible by {t}; use "
                             f"{opt('tp')} "
                             f"{tp_fix(t, [d for d in divisors(h) if w % d == 0], room, rest)}",
                             field="tp", value=t)
    if job.sequence_parallel and seq is not None and seq % t:
        raise InputError(f"{opt('seq')} {seq}: sequence parallelism splits the sequence over tp "
                         f"{t}; use a multiple of {t}", field="seq", value=seq)


def _check_pp(arch: Architecture, job: object) -> None:
    name, chunks = pp_chunks(job.pp_schedule)
    if name == "dualpipe" and job.pp > 1:
        _check_dualpipe(job)
    parts = job.pp * chunks
    first, last = job.pp_first_stage_layers, job.pp_last_stage_layers
    if first is not None or last is not None:
        if job.pp == 1:
            return
        part_layers(arch.num_layers, job.pp, chunks, job.pp_embedding_part, job.pp_loss_part,
                    first, last)
        return  # Megatron places any per-part count with a layout string (the export's)
    if job.engine != "auto":
        check_engine_split(get_engine(job.engine), arch.num_layers, job.pp, chunks,
                           job.pp_embedding_part, job.pp_loss_part)
    if (job.pp_embedding_part or job.pp_loss_part) and job.pp > 1:
        part_layers(arch.num_layers, job.pp, chunks, job.pp_embedding_part, job.pp_loss_part)
        return
    if parts > arch.num_layers:
        what = f"{opt('pp')} {job.pp}" + (f" x {chunks} chunks" if chunks > 1 else "")
        raise InputError(f"{what}: {arch.name} has {arch.num_layers} layers, fewer than the "
                         f"{parts} pipeline parts; use "
                         f"{pipeline_fix(arch.num_layers, job.pp, chunks)}",
                         field="pp", value=job.pp)


def _check_dualpipe(job: object) -> None:
    """DualPipe feeds micro-batches from both ends of the pipeline, half each way: the stages
    pair up (``i`` with ``pp - 1 - i``) and the micro-batches split in two (DeepSeek-V3 report
    sec. 3.2.1: "both the pipeline stages and micro-batches be divisible by 2";
    deepseek-ai/DualPipe README), and there are at least two a rank (deepseek-ai/DualPipe@3da1bbe
    dualpipe/dualpipe.py line 333: ``num_chunks >= num_ranks * 2``), which the per-rank counts
    of :func:`gpuplan.parallel.dual_in_flight` (``pp + 1`` in all) take."""
    if job.pp % 2:
        raise InputError(f"{opt('pp')} {job.pp}: dualpipe pairs stage i with stage pp-1-i; use "
                         f"an even {opt('pp')} ({job.pp - 1} or {job.pp + 1})", field="pp",
                         value=job.pp)
    m = job.micro_batches or job.grad_accum
    if m % 2:
        raise InputError(f"{opt('micro_batches')} {m}: dualpipe feeds half the micro-batches "
                         f"from each end; use an even count ({m + 1})", field="micro_batches",
                         value=m)
    if m < 2 * job.pp:
        raise InputError(f"{opt('micro_batches')} {m}: dualpipe runs at least two micro-batches "
                         f"a stage (DualPipe asserts num_chunks >= 2 x {job.pp} ranks); use "
                         f"{2 * job.pp} or more", field="micro_batches", value=m)


def _check_cp_ep(arch: Architecture, job: object, seq: int | None) -> None:
    cp, ep = job.cp, job.ep
    if cp > 1:
        if job.attention == "eager":
            raise InputError(f"{opt('cp')} {cp}: context parallelism runs ring attention over "
                             f"flash kernels; use {opt('attention')} sdpa", field="cp", value=cp)
        if seq is not None and seq % (2 * cp):
            raise InputError(f"{opt('seq')} {seq}: context parallel {cp} splits the sequence "
                             f"into {2 * cp} balanced chunks; use a multiple of {2 * cp}",
                             field="seq", value=seq)
    if ep == 1:
        return
    e = arch.num_experts
    if not e:
        raise InputError(f"{opt('ep')} {ep}: {arch.name} has no experts; drop {opt('ep')}",
                         field="ep", value=ep)
    if e % ep:
        raise InputError(f"{opt('ep')} {ep}: {arch.name} has {e} experts, not divisible by "
                         f"{ep}; use {opt('ep')} {nearest(ep, divisors(e))}", field="ep", value=ep)
    etp = job.tp if job.etp is None else job.etp
    if etp == job.tp:
        group = job.dp * cp
        if group % ep:
            raise InputError(f"{opt('ep')} {ep}: experts are spread over the data-parallel x "
                             f"context-parallel group ({group} ranks); use {opt('ep')} "
                             f"{nearest(ep, [d for d in divisors(group) if e % d == 0])}"
                             + (f", or fold the experts with {opt('etp')} 1 (EP over tp x dp x "
                                f"cp = {group * job.tp})" if job.tp > 1
                                and (group * job.tp) % ep == 0 else ""),
                             field="ep", value=ep)
        return
    width = arch.moe_intermediate_size or arch.intermediate_size
    if width % etp:
        raise InputError(f"{opt('etp')} {etp}: expert width {width} is not divisible by {etp}; "
                         f"use {opt('etp')} {nearest(etp, divisors(width))}", field="etp",
                         value=etp)
    group = job.tp * job.dp * cp // etp
    if group % ep:
        raise InputError(f"{opt('ep')} {ep}: with {opt('etp')} {etp} experts are spread over "
                         f"tp x dp x cp / etp = {group} ranks; use {opt('ep')} "
                         f"{nearest(ep, [d for d in divisors(group) if e % d == 0])}",
                         field="ep", value=ep)
