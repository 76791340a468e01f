"""Terminal rendering of a :class:`~gpuplan.fit.Plan`: the seed's table, totals, verdicts."""

from __future__ import annotations

from typing import IO

from ..engines.profiles import engine_notes
from ..errors import library_spelling, spell_text
from ..fit import Plan
from ..memory import InferMemory, TrainMemory
from ..units import ByteUnits, format_bytes, format_count

__all__ = ["render_plan"]

_VERDICT_STYLE = {"fits": "green", "tight": "yellow", "does not fit": "red"}


def _bpp(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x else "0"


def _lines_table(title: str, mem: TrainMemory | InferMemory, units: ByteUnits, *,
                 skip_empty: bool = False):
    """The seed's shape: one row per line item, bytes per parameter, bytes per GPU, the peak.
    ``skip_empty``: leave out empty, unexplained activation/temporary rows."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_footer=True)
    table.add_column("line item", footer=f"total (peak, {mem.peak_phase})")
    table.add_column("bytes per parameter", justify="right")
    table.add_column("per GPU", justify="right", footer=format_bytes(mem.total_bytes, units))
    for line in mem.lines:
        if skip_empty and line.key in ("activations", "temporaries") and not line.bytes \
                and not line.note:
            continue
        table.add_row(*_line_cells(line, units))
    return table


def _line_cells(line, units: ByteUnits) -> tuple[str, str, str]:
    """One row: a line that holds nothing at the peak says where its bytes are instead of
    "0 GB" beside a bytes-per-parameter figure; one that holds part of them says so."""
    notes = [line.note] if line.note else []
    amount = format_bytes(line.bytes, units)
    if line.at_peak and line.bytes == 0:
        amount = f"[italic]{line.at_peak}[/italic]"
    elif line.at_peak:
        notes.append(line.at_peak)
    label = line.label + (f" [dim]({'; '.join(notes)})[/dim]" if notes else "")
    return label, _bpp(line.bytes_per_param), amount


def _train_table(t: TrainMemory, units: ByteUnits):
    table = _lines_table(f"Training: {t.precision}, {t.optimizer}", t, units, skip_empty=True)
    table.add_section()
    table.add_row("[bold]model states[/bold] (weights + gradients + master + optimizer)",
                  _bpp(t.model_states_bytes / t.params), format_bytes(t.model_states_bytes, units))
    if t.phases:
        table.add_row("[dim]phases (tensors, no overhead): "
                      + ", ".join(f"{k} {format_bytes(v, units)}" for k, v in t.phases.items())
                      + "[/dim]", "", "")
    return table


def _infer_table(i: InferMemory, units: ByteUnits):
    return _lines_table(f"Inference: {i.precision}", i, units)


def _context_line(i: InferMemory, seq_given: bool) -> str | None:
    """When the cached context and the prompt differ, say which phase is sized by which: the
    prefill by the prompt (--seq), the KV cache and the decode by the context (--context)."""
    prompt, context = i.prompt_tokens, i.context_tokens
    if not prompt or not context or prompt == context or not i.kv_cache_full_bytes:
        return None
    seq = "--seq" if seq_given else "the default --seq"
    if context > prompt:
        return (f"prefill: a {prompt:,}-token prompt ({seq}); the KV cache and the decode are "
                f"sized for {context:,} tokens (--context: the prompt + {context - prompt:,} "
                f"generated). For a {context:,}-token prompt give --seq {context}.")
    return (f"the prompt ({prompt:,} tokens, {seq}) is longer than --context {context:,}: the "
            f"prefill is planned at {prompt:,} tokens, the cache at {context:,}; give --seq "
            f"{context} or less for a prompt that fits the context.")


def _engine_table(p: Plan, units: ByteUnits):
    """The serving engine's start-up KV budget per GPU, as its log would print it."""
    from rich.table import Table

    b0 = p.engine_budgets[0][1]
    table = Table(title=f"KV cache as {b0.engine} {b0.version}+ allocates it "
                        f"(max_model_len {b0.max_model_len:,})", title_justify="left")
    for col in ("GPU", "fraction", "weights", "activations", "CUDA graphs", "non-torch",
                "available KV", "blocks", "KV tokens", "max concurrency"):
        table.add_column(col, justify="left" if col == "GPU" else "right")
    for name, b in p.engine_budgets:
        loaded = b.parts["weights"] + b.parts.get("rope_cache", 0)  # as the engine's log counts
        parts = [format_bytes(v, units) for v in
                 (loaded, *(b.parts[k] for k in ("activation_peak", "cuda_graph_pool",
                                                 "non_torch")))]
        table.add_row(name, f"{b.fraction:g}", *parts, format_bytes(b.available_kv_bytes, units),
                      f"{b.kv_blocks:,} x {b.block_size}", f"{b.kv_tokens:,}",
                      f"{b.max_concurrency:.2f}x")
    return table


def _print_refusals(console, p: Plan, spell) -> None:
    """The engine's start-up check: one line per GPU where it refuses to start."""
    for name, b in p.engine_budgets:
        if b.refusal:
            console.print(f"{name}: {spell_text(b.refusal, spell)}", style="bold red",
                          highlight=False, markup=False, soft_wrap=True)


def _verdict_table(p: Plan, units: ByteUnits):
    from rich.table import Table

    table = Table(title="Per GPU", title_justify="left")
    table.add_column("GPU")
    table.add_column("memory", justify="right")
    if p.train is not None:
        table.add_column("train", justify="center")
        table.add_column("headroom", justify="right")
        table.add_column("ZeRO-3 GPUs", justify="right")
    if p.infer is not None:
        table.add_column("infer", justify="center")
        table.add_column("headroom", justify="right")
        table.add_column("TP GPUs", justify="right")
    per_format = len({g.infer_precision for g in p.gpus}) > 1
    if per_format:
        table.add_column("infer format")
    layouts = [m for m in ("train", "infer") if any(getattr(g, f"{m}_layout") for g in p.gpus)]
    for m in layouts:
        table.add_column(f"TP x PP ({m})", justify="right")
    queries = [k for k in ("train_max_batch", "train_max_seq", "infer_max_batch", "infer_max_seq")
               if any(getattr(g, k) is not None for g in p.gpus)]
    titles = {"train_max_batch": "max batch (train)", "train_max_seq": "max seq (train)",
              "infer_max_batch": "max sequences (infer)", "infer_max_seq": "max context (infer)"}
    for k in queries:
        table.add_column(titles[k], justify="right")
    for g in p.gpus:
        row = [g.name, format_bytes(g.usable_bytes, units)]
        if p.train is not None:
            style = _VERDICT_STYLE[g.train_verdict]
            row += [f"[{style}]{g.train_verdict}[/{style}]",
                    format_bytes(g.train_headroom_bytes, units),
                    "> 4096" if g.train_min_gpus is None else str(g.train_min_gpus)]
        if p.infer is not None:
            style = _VERDICT_STYLE[g.infer_verdict]
            row += [f"[{style}]{g.infer_verdict}[/{style}]",
                    format_bytes(g.infer_headroom_bytes, units),
                    "> 64" if g.infer_min_gpus is None else str(g.infer_min_gpus)]
        if per_format:
            row.append(g.infer_precision or "-")
        for m in layouts:
            lay = getattr(g, f"{m}_layout")
            row.append("-" if lay is None else f"{lay.gpus} ({lay.label()})")
        for k in queries:
            v = getattr(g, k)
            row.append("-" if v is None else ("none fits" if v == 0 else f"{v:,}"))
        table.add_row(*row)
    if layouts:
        table.caption = (
            "TP x PP: the fewest of that GPU under a tensor x pipeline parallel layout -- TP "
            "within a node (sequence parallel when training), pipeline stages, ZeRO over the "
            "data-parallel rest -- shown for training where it is fewer than ZeRO-3 alone, for "
            "serving where TP within one node is not enough; --suggest gives the options")
        table.caption_justify = "left"
    return table


def _solver_tables(p: Plan, units: ByteUnits):
    from rich.table import Table

    out = []
    for r in p.solver:
        title = f"What to change ({r.mode}, {r.gpu}): {r.message}"
        if not r.suggestions:
            out.append(title)
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("change")
        table.add_column("peak", justify="right")
        table.add_column("headroom", justify="right")
        table.add_column("what it costs")
        for i, s in enumerate(r.suggestions, 1):
            gpus = (f" on {s.gpu_count} GPUs" if s.gpu_count > 1 and "GPUs" not in s.summary
                    and "--gpus" not in s.summary else "")
            table.add_row(str(i), s.summary + gpus, format_bytes(s.peak_bytes, units),
                          format_bytes(s.headroom_bytes, units), "; ".join(s.costs))
        out.append(table)
    return out


def _speed_table(p: Plan, spell=library_spelling):
    """The speed model's headline per GPU (``plan.speed``), when it was asked for."""
    from rich.table import Table

    from ..units import format_per_s, format_seconds

    if p.speed is None:
        return None
    sec = p.speed.to_dict()
    table = Table(title="Speed (estimate; `gpuplan speed MODEL --gpu G` explains it)",
                  title_justify="left")
    table.add_column("GPU")
    if p.train is not None:
        for c in ("train step", "tokens/s", "MFU", "bound"):
            table.add_column(c, justify="right")
    if p.infer is not None:
        for c in ("prefill tok/s", "decode tok/s"):
            table.add_column(c, justify="right")
    errors = []
    for row, r in zip(sec["gpus"], p.speed.rows):
        cells = [row["gpu"]]
        if "error" in row:
            n = (4 if p.train is not None else 0) + (2 if p.infer is not None else 0)
            table.add_row(*cells, *["—"] * n)
            errors.append(f"{row['gpu']}: {spell_text(r.error_marked or row['error'], spell)}")
            continue
        if p.train is not None:
            t = row["train"]
            lo, hi = t.get("tokens_per_s_range") or (None, None)
            rng = f" ({format_per_s(lo)}-{format_per_s(hi)})" if lo is not None else ""
            cells += [format_seconds(t["step_time_s"]), f"{format_per_s(t['tokens_per_s'])}{rng}",
                      f"{100 * t['mfu']:.0f}%", t["bound"]]
        if p.infer is not None:
            i = row["infer"]
            if "prefill_tokens_per_s" in i:
                cells += [format_per_s(i['prefill_tokens_per_s']),
                          format_per_s(i.get('decode_tokens_per_s', i['tokens_per_s']))]
            else:  # an encoder (BERT, ViT): one forward over the input, nothing decoded
                cells += [format_per_s(i['tokens_per_s']), "— (encoder)"]
        table.add_row(*cells)
        errors += [f"{row['gpu']} {mode}: {c}" for mode in ("train", "infer")
                   for c in (row.get(mode) or {}).get("caveats", ())]
    if errors:
        table.caption = "; ".join(errors)
        table.caption_justify = "left"
    return table


def _measured_run_line(run: dict) -> str:
    """One stored bench run the speed table read (``measured_runs``): which, its quality, used or
    left out (the note RunUse.line wrote)."""
    return run["note"] if run["used"] else f"note: {run['note']}"


def _trace_table(comparisons, units: ByteUnits):
    """``fit --trace``: analytic and traced bytes side by side, difference in percent."""
    from rich.table import Table

    out = []
    for c in comparisons:
        if c.skipped:
            out.append(f"[dim]{c.mode}: not traced: {c.skipped}[/dim]")
            continue
        table = Table(title=f"{c.mode.capitalize()}: analytic vs traced (fake tensors, "
                            f"{c.trace_seconds:.1f} s)", title_justify="left")
        table.add_column("per GPU")
        table.add_column("analytic", justify="right")
        table.add_column("traced", justify="right")
        table.add_column("difference", justify="right")
        for k in c.analytic:
            a, t, d = c.analytic[k], c.traced[k], c.difference_percent[k]
            if k != "total_bytes" and a == 0 and t == 0:
                continue
            label = ("total (peak, runtime overhead excluded)" if k == "total_bytes"
                     else k.removesuffix("_bytes").replace("_", " "))
            diff = "—" if d is None else f"{d:+.1f}%"
            if k == "total_bytes":
                table.add_section()
            table.add_row(label, format_bytes(a, units), format_bytes(t, units), diff)
        out.append(table)
        out.append(f"[dim]peak phase: analytic {c.analytic_phase}, traced {c.traced_phase} "
                   f"({c.traced_module}). The totals are what is validated; the two split "
                   "transient bytes between activations, temporaries and gradients by different "
                   "conventions (docs/memory.md, docs/trace.md).[/dim]")
    return out


def _print_infer(console, p: Plan, units: ByteUnits) -> None:
    """The inference table, its context line, and a table per other format a mixed GPU list's
    GPUs were planned in (``infer_precision`` auto resolved per GPU)."""
    console.print(_infer_table(p.infer, units))
    ctx = _context_line(p.infer, p.job.seq is not None)
    if ctx:
        console.print(f"[dim]{ctx}[/dim]")
    for fmt, mem in p.infer_by_precision:
        if fmt != p.infer.precision:
            console.print(_infer_table(mem, units))


def render_plan(p: Plan, *, units: ByteUnits = "GB", file: IO[str] | None = None,
                trace=None, spell=library_spelling) -> None:
    """The plan as tables; ``spell`` names the options its notes mention in the front end's
    spelling (the CLI passes its own)."""
    from ._console import console_for

    console = console_for(file, width=160)
    m = p.model
    src = {"catalog": "catalog", "config": "config.json", "safetensors": "safetensors headers",
           "gguf": "GGUF header", "count": "parameter count"}[m.source]
    head = f"[bold]{m.name}[/bold]: {format_count(m.params.total)} parameters ({m.params.total:,}; {src})"
    if m.params.active != m.params.total:
        head += f", {format_count(m.params.active)} active per token"
    console.print(head)
    j = p.job
    shape = f"batch {j.batch}" + (f" x seq {j.seq}" if j.seq else "")
    par = f", {j.gpus} GPUs, ZeRO-{j.zero}" if j.gpus > 1 or j.zero else ""
    console.print(f"[dim]{shape}{par}; units: {units} "
                  f"({'10^9' if units == 'GB' else '2^30'} bytes)[/dim]")
    for g in p.gpus:
        if g.alias_note:
            console.print(f"[dim]{g.alias_note}[/dim]")
    if p.train is not None:
        console.print(_train_table(p.train, units))
    if p.infer is not None:
        _print_infer(console, p, units)
    ratio = p.train_to_infer_ratio
    if ratio is not None:
        console.print(
            f"Training needs [bold]{ratio:.1f}x[/bold] the memory of inference "
            f"(model states {format_bytes(p.train.model_states_bytes, units)} vs "
            f"{p.infer.precision} weights {format_bytes(p.infer.weights_bytes, units)}).")
    console.print(_verdict_table(p, units))
    if p.engine_budgets:
        console.print(_engine_table(p, units))
        _print_refusals(console, p, spell)
    speed = _speed_table(p, spell)
    if speed is not None:
        console.print(speed)
        for run in p.speed.measured_runs:
            console.print(_measured_run_line(run), highlight=False, markup=False,
                          soft_wrap=True)
    if trace is not None:
        for part in _trace_table(trace, units):
            console.print(part)
    for t in _solver_tables(p, units):
        console.print(t)
    notes = []  # the engine first: it decides the runtime, kernels and layouts planned
    for mode in [m for m in ("train", "infer") if getattr(p, m) is not None]:
        notes += [n for n in engine_notes(p.job, mode) if n not in notes]
    notes += list(p.notes)
    if p.train is not None:
        notes += list(p.train.notes)
    if p.infer is not None:
        notes += [n for n in p.infer.notes if n not in notes]
    if p.engine_budgets:
        notes += [n for n in p.engine_budgets[0][1].notes if n not in notes]
    for n in notes:
        console.print(f"[dim]note: {n}[/dim]")
