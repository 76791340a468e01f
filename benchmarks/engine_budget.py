"""Engine KV budgets against published start-up logs.

For each log in ``benchmarks/published/engine_startup_logs.json`` (a model, a GPU, a layout, the
engine's memory knob and max_model_len, and what the engine printed) gpuplan's
:func:`gpuplan.memory.kv_budget` recomputes the KV tokens and the maximum concurrency under the
engine version's rule; this script writes the per-log error and the median and worst to
``benchmarks/engine_budget.md``.

    PYTHONPATH=src python benchmarks/engine_budget.py            # writes benchmarks/engine_budget.md
    PYTHONPATH=src python benchmarks/engine_budget.py --stdout   # prints it instead
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOGS = HERE / "published" / "engine_startup_logs.json"
OUT = HERE / "engine_budget.md"
GIB = 1 << 30


def load_logs() -> list[dict]:
    return json.loads(LOGS.read_text(encoding="utf-8"))["logs"]


def predict(log: dict):
    """gpuplan's KVBudget for one published log."""
    from gpuplan.hardware import get_gpu
    from gpuplan.job import Job
    from gpuplan.memory import kv_budget
    from gpuplan.models import load_model

    model = load_model(log["model"])
    gpu = get_gpu(log["gpu"])
    if "total_gib" in log:  # the card's memory as the engine measured it
        gpu = replace(gpu, memory_bytes=int(log["total_gib"] * GIB))
    tp = log.get("tp", 1)
    job = Job(model=log["model"], mode="infer", engine=log["engine"],
              infer_precision=log.get("precision", "bf16"), tp=tp, gpus=tp,
              runtime=log.get("runtime", "auto"), kv_dtype=log.get("kv_dtype"))
    knob = "mem_fraction_static" if log["engine"] == "sglang" else "gpu_memory_utilization"
    kw = {knob: log["fraction"]} if "fraction" in log else {}
    # the scheduler budgets where the log states them (else the engine version's defaults)
    kw.update({k: log[k] for k in ("max_num_seqs", "max_num_batched_tokens") if k in log})
    return kv_budget(model, gpu, job, max_model_len=log.get("max_model_len"),
                     engine_version=log["rule"], **kw)


def errors(log: dict, budget) -> dict:
    """Relative errors (predicted / published - 1) of the figures the log prints."""
    pub = log["published"]
    out = {}
    if "kv_tokens" in pub:
        out["kv_tokens"] = budget.kv_tokens / pub["kv_tokens"] - 1
    if "max_concurrency" in pub:
        out["max_concurrency"] = budget.max_concurrency / pub["max_concurrency"] - 1
    if "available_kv_gib" in pub:
        out["available_kv"] = budget.available_kv_bytes / GIB / pub["available_kv_gib"] - 1
    return out


def rows() -> list[dict]:
    out = []
    for log in load_logs():
        b = predict(log)
        out.append({"log": log, "budget": b, "errors": errors(log, b)})
    return out


def summary(results: list[dict]) -> dict:
    """Median and worst absolute error of the KV tokens and of the maximum concurrency, over the
    logs not excluded (each exclusion states why in the JSON and in the report)."""
    results = [r for r in results if "excluded" not in r["log"]]
    tok = [abs(r["errors"]["kv_tokens"]) for r in results if "kv_tokens" in r["errors"]]
    conc = [abs(r["errors"]["max_concurrency"]) for r in results
            if "max_concurrency" in r["errors"]]
    return {"n": len(results), "tokens_n": len(tok), "tokens_median": statistics.median(tok), "tokens_worst": max(tok),
            "concurrency_n": len(conc), "concurrency_median": statistics.median(conc),
            "concurrency_worst": max(conc)}


def _count(x: int | None) -> str:
    return "" if x is None else f"{x:,}"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _fill(note: str, r: dict) -> str:
    """An exclusion note with each ``{name}`` it quotes of the row's own figures filled in from
    the table's values (the note's figures of gpuplan's budget are computed, never typed)."""
    b, pub = r["budget"], r["log"]["published"]
    kv = b.available_kv_bytes / GIB
    figs = {"available_kv_gib": f"{kv:.2f}", "kv_tokens_error": _pct(r["errors"].get("kv_tokens"))}
    if "available_kv_gib" in pub:
        figs["available_kv_gap_gib"] = f"{kv - pub['available_kv_gib']:.2f}"
    return re.sub(r"\{(\w+)\}", lambda m: figs.get(m.group(1), m.group(0)), note)


def report(results: list[dict]) -> str:
    s = summary(results)
    lines = [
        "# Engine KV budgets against published start-up logs",
        "",
        "Command: `PYTHONPATH=src python benchmarks/engine_budget.py` (no GPU needed: the logs are",
        "published; `benchmarks/published/engine_startup_logs.json` holds each with its source and",
        "the quoted lines). gpuplan's `kv_budget` recomputes the KV cache each engine allocated at",
        "start-up under the engine version's rule (`gpuplan.engines.budget`); error = predicted /",
        "published - 1.",
        "",
        f"**{s['n']} logs counted. KV tokens ({s['tokens_n']} logs that print them): median |error| {100 * s['tokens_median']:.1f}%, worst "
        f"{100 * s['tokens_worst']:.1f}%. Maximum concurrency ({s['concurrency_n']} logs that print "
        f"it): median {100 * s['concurrency_median']:.1f}%, worst "
        f"{100 * s['concurrency_worst']:.1f}%.**",
        "",
        "| log | engine (rule) | model | GPU x TP | knob | L | KV tokens: published | gpuplan | error "
        "| concurrency: published | gpuplan | error | available KV (GiB): published | gpuplan |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        log, b, e = r["log"], r["budget"], r["errors"]
        pub = log["published"]
        mark = " (excluded)" if "excluded" in log else ""
        lines.append(
            f"| {log['id']}{mark} | {log['engine']} ({log['rule']}) | {log['model']} "
            f"({log.get('precision', 'bf16')}) | {log['gpu']} x {log.get('tp', 1)} | "
            f"{b.fraction:g} | {b.max_model_len:,} | {_count(pub.get('kv_tokens'))} | "
            f"{b.kv_tokens:,} | {_pct(e.get('kv_tokens'))} | {pub.get('max_concurrency', '')} | "
            f"{b.max_concurrency:.2f} | {_pct(e.get('max_concurrency'))} | "
            f"{pub.get('available_kv_gib', '')} | {b.available_kv_bytes / GIB:.2f} |")
    lines += ["", "Excluded from the median and worst (shown above):", ""]
    lines += [f"* {r['log']['id']}: {_fill(r['log']['excluded'], r)}" for r in results
              if "excluded" in r["log"]]
    lines += ["", "Sources and the quoted log lines: `benchmarks/published/engine_startup_logs.json`.",
              "What each rule deducts, and the fitted constants: `docs/engine_budget.md`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stdout", action="store_true", help="print the report instead of writing it")
    args = p.parse_args(argv)
    text = report(rows())
    if args.stdout:
        sys.stdout.write(text)
    else:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
