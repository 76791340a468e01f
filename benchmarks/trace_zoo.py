"""Validation zoo: traced peaks of real catalog models next to the analytic planner's.

Every family the catalog ships a transformers class for (GPT-2, BERT, Llama-2, Llama-3, Mistral,
Qwen2.5 with tied embeddings, Mixtral MoE, OPT, Falcon, ViT), each traced at full size:
training at two batch/sequence settings with and without full checkpointing, and inference at
both settings. The "analytic" columns call ``gpuplan.fit.plan`` for the same job (its total minus
the runtime-overhead line, which a trace does not have) when it is importable.

Regenerate (about 10 minutes on a 2-core machine):

    PYTHONPATH=src python benchmarks/trace_zoo.py            # writes trace_zoo_results.{md,json}
    PYTHONPATH=src python benchmarks/trace_zoo.py --quick    # 12 cases, not written
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (catalog name, setting A, setting B): (batch, seq) pairs; B at a longer context or larger batch.
FAMILIES = [
    ("gpt2", (1, 512), (4, 1024)),
    ("bert-base-uncased", (1, 512), (8, 512)),
    ("llama-2-7b", (1, 512), (4, 2048)),
    ("llama-3.1-8b", (1, 512), (4, 2048)),
    ("mistral-7b", (1, 512), (4, 2048)),
    ("qwen2.5-0.5b", (1, 512), (4, 2048)),
    ("mixtral-8x7b", (1, 512), (4, 2048)),
    ("opt-125m", (1, 512), (4, 2048)),
    ("falcon-7b", (1, 512), (4, 2048)),
    ("vit-base-patch16-224", (1, 197), (32, 197)),
]


def cases(quick: bool):
    out = []
    for name, a, b in FAMILIES:
        if quick:
            out.append((name, "train", a, "none"))
            if name in ("llama-3.1-8b", "gpt2"):
                out.append((name, "infer", b, "none"))
            continue
        for (batch, seq) in (a, b):
            for ck in ("none", "full"):
                out.append((name, "train", (batch, seq), ck))
        for (batch, seq) in (a, b):
            out.append((name, "infer", (batch, seq), "none"))
    return out


def analytic(name: str, mode: str, batch: int, seq: int, ck: str):
    """The analytic planner's peak for the same job, without its runtime-overhead line."""
    try:
        from gpuplan.fit import plan
        from gpuplan.job import Job
    except ImportError:
        return None, None
    try:
        if mode == "train":
            job = Job(model=name, mode="train", precision="amp-bf16", optimizer="adamw",
                      batch=batch, seq=seq, checkpointing=ck, attention="sdpa")
            mem = plan(job).train
        else:
            job = Job(model=name, mode="infer", infer_precision="bf16", batch=batch, seq=seq,
                      attention="sdpa")
            mem = plan(job).infer
    except Exception as e:  # noqa: BLE001 - a planner gap is reported, not fatal
        return None, f"{type(e).__name__}: {e}"
    return mem.total_bytes - mem.overhead_bytes, mem.peak_phase


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="12 cases, results not written")
    args = ap.parse_args()

    import torch
    import transformers

    from gpuplan.trace import trace_step

    rows = []
    for name, mode, (batch, seq), ck in cases(args.quick):
        t0 = time.perf_counter()
        rec = {"model": name, "mode": mode, "batch": batch, "seq": seq, "checkpointing": ck}
        try:
            r = trace_step(name, mode=mode, batch=batch, seq=seq, checkpointing=ck,
                           precision="amp-bf16" if mode == "train" else "bf16")
            rec.update(traced_bytes=r.total_bytes, peak_phase=r.peak_phase,
                       peak_module=r.peak_module, params=r.params, per_gpu=dict(r.per_gpu),
                       trace_s=round(time.perf_counter() - t0, 1), error=None)
        except Exception as e:  # noqa: BLE001 - the zoo records failures
            rec.update(traced_bytes=None, error=f"{type(e).__name__}: {e}",
                       trace_s=round(time.perf_counter() - t0, 1))
        a, a_phase = analytic(name, mode, batch, seq, ck)
        rec["analytic_bytes"] = a
        rec["analytic_phase"] = a_phase if a is not None else None
        if a is None and a_phase:
            rec["analytic_error"] = a_phase
        if a is not None and rec["traced_bytes"]:
            rec["error_pct"] = round(100.0 * (a - rec["traced_bytes"]) / rec["traced_bytes"], 1)
        rows.append(rec)
        print(_row(rec), flush=True)

    if args.quick:
        return 0
    meta = {
        "command": "PYTHONPATH=src python benchmarks/trace_zoo.py",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
                   f"{torch.get_num_threads()} torch threads",
        "python": sys.version.split()[0], "torch": torch.__version__,
        "transformers": transformers.__version__,
        "recipe": "train: amp-bf16 + AdamW (foreach), sdpa; infer: bf16 weights, sdpa, "
                  "DynamicCache, prefill + one decode step",
    }
    (HERE / "trace_zoo_results.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                            indent=1) + "\n")
    (HERE / "trace_zoo_results.md").write_text(_markdown(meta, rows))
    return 0


def _gb(n) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB"


def _row(r) -> str:
    err = r.get("error_pct")
    return (f"{r['model']:22s} {r['mode']:5s} {r['batch']:>3d}x{r['seq']:<5d} {r['checkpointing']:5s} "
            f"traced {_gb(r['traced_bytes']):>11s} ({r.get('peak_phase') or r.get('error')}) "
            f"{r['trace_s']:6.1f}s analytic {_gb(r['analytic_bytes']):>11s} "
            f"{'' if err is None else f'{err:+.1f}%'}")


def _markdown(meta, rows) -> str:
    lines = [
        "# Trace validation zoo",
        "",
        f"Regenerate with `{meta['command']}` ({meta['date']}; {meta['machine']}; Python "
        f"{meta['python']}, torch {meta['torch']}, transformers {meta['transformers']}).",
        "",
        f"Recipe: {meta['recipe']}. Every model is the catalog's full-size config. Traced peak: "
        "the fake-tensor trace (512-byte allocator rounding, CUDA dispatch emulated). Analytic: "
        "`gpuplan.fit.plan` for the same job, total minus its runtime-overhead line (a trace has "
        "none); error = (analytic - traced) / traced.",
        "",
        "| model | mode | batch x seq | checkpointing | traced peak | phase | trace time | "
        "analytic peak | analytic phase | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        traced = _gb(r["traced_bytes"]) if r["traced_bytes"] else f"FAILED: {r['error']}"
        err = r.get("error_pct")
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['batch']} x {r['seq']} | {r['checkpointing']} | "
            f"{traced} | {r.get('peak_phase') or '-'} | {r['trace_s']:.1f} s | "
            f"{_gb(r['analytic_bytes']) if r['analytic_bytes'] is not None else 'n/a'} | "
            f"{r.get('analytic_phase') or '-'} | {'n/a' if err is None else f'{err:+.1f}%'} |")
    failed = [r for r in rows if not r["traced_bytes"]]
    lines += ["", f"{len(rows)} cases, {len(failed)} failed to trace."]
    if any(r.get("analytic_error") for r in rows):
        lines.append("Analytic planner errors: " + "; ".join(
            f"{r['model']} {r['mode']}: {r['analytic_error']}" for r in rows
            if r.get("analytic_error")))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
