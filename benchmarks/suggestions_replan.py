"""Every proposal re-planned with its own printed flags (issue 27, "what gpuplan proposes runs").

``python benchmarks/suggestions_replan.py [--write]`` plans every catalog model on T4, L4,
A100-40GB and H100 at batch 1, 16 and 64, training and serving, with ``gpuplan fit --suggest
--json``; then re-runs ``gpuplan fit`` with the flags printed beside each proposal -- each
suggestion's changes, and each "how many of this GPU" answer (ZeRO-3 alone, TP alone, the TP x
PP layouts: the verdict's ``flags``) -- and checks that the command is accepted (exit 0), that
the job fits the GPU it names, and that a suggestion's peak is the re-plan's to 0.1%.
``--write`` records the counts in benchmarks/suggestions_replan.md. The CLI runs in-process,
with an empty bench database (no stored run of this machine reaches a number).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GPUS = ("T4", "L4", "A100-SXM-40GB", "H100-SXM-80GB")
BATCHES = (1, 16, 64)
MODES = ("train", "infer")
OUT_MD = HERE / "suggestions_replan.md"


def run(argv: list[str]) -> tuple[int, object, str]:
    """``gpuplan ARGV`` in-process: (exit status, parsed JSON or None, stderr)."""
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    try:
        data = json.loads(out.getvalue()) if rc == 0 else None
    except ValueError:
        data = None
    return rc, data, err.getvalue()


def proposals(base: list[str], plan: dict, mode: str, gpu: str) -> list[tuple[str, str, list,
                                                                              int | None]]:
    """(what, GPU, flags, peak it states) of every proposal of one plan for ``mode``."""
    out = []
    for s in plan.get("suggestions", []):
        if s["mode"] != mode or not s["fits"]:
            continue
        flags = [t for c in s["changes"] for t in shlex.split(c["text"])]
        out.append(("suggestion", s["gpu"], flags, s["peak_bytes"]))
    for g in plan["gpus"]:
        for key, text in g.get("flags", {}).items():
            if key.startswith(mode):
                out.append((key, g["name"], shlex.split(text), None))
    return out


#: Engines re-planned beside auto, per mode: their proposals must be jobs they run.
ENGINES = {"train": ("megatron", "torchtitan", "deepspeed", "fsdp2", "torchtune"),
           "infer": ("vllm",)}


def check_one(model: str, gpu: str, batch: int, mode: str, engine: str = "auto") -> list[dict]:
    """Every proposal of one base plan, re-planned: a record each."""
    eng = [] if engine == "auto" else ["--engine", engine]
    base = ["fit", model, "--gpu", gpu, "--batch", str(batch), "--mode", mode, *eng,
            "--suggest", "--json", "--no-speed"]
    rc, plan, err = run(base)
    if rc != 0:
        return [{"base": " ".join(base), "what": "base plan", "ok": None, "why": err.strip()}]
    records = []
    for what, target, flags, peak in proposals(base, plan, mode, gpu):
        bad = [f for i, f in enumerate(flags)
               if not f.startswith("--") and (i == 0 or not flags[i - 1].startswith("--"))]
        # a suggestion that names a GPU carries its own --gpu
        argv = ["fit", model, "--batch", str(batch), "--mode", mode, *eng, *flags,
                *([] if "--gpu" in flags else ["--gpu", target]), "--json", "--no-speed"]
        rc2, again, err2 = run(argv)
        rec = {"base": " ".join(base), "what": what, "argv": " ".join(argv), "ok": False}
        if bad:
            rec["why"] = f"not flags: {bad}"
        elif rc2 != 0:
            rec["why"] = err2.strip()
        else:
            v = again["gpus"][0]
            total = again[mode]["per_gpu"]["total_bytes"]
            if not v[f"{mode}_fits"]:
                rec["why"] = f"does not fit: {total} > {v['usable_bytes']}"
            elif peak is not None and abs(total - peak) > 1e-3 * peak:
                rec["why"] = f"peak {peak} stated, {total} re-planned"
            else:
                rec["ok"] = True
        records.append(rec)
    return records


def grid(models, gpus=GPUS, batches=BATCHES, modes=MODES, engines: bool = True) -> list[dict]:
    out = []
    for model in models:
        for gpu in gpus:
            for batch in batches:
                for mode in modes:
                    for engine in ("auto", *(ENGINES[mode] if engines else ())):
                        out += check_one(model, gpu, batch, mode, engine)
    return out


def summary(records: list[dict]) -> dict:
    checked = [r for r in records if r["ok"] is not None]
    return {"checked": len(checked), "failed": sum(1 for r in checked if not r["ok"]),
            "base_plans_refused": sum(1 for r in records if r["ok"] is None)}


def refused(records: list[dict]) -> list[str]:
    """The base plans the CLI refused, with why (an engine that cannot run the model's layout
    defaults, a batch past the positions ...)."""
    return [f"{r['base']}: {r['why'][:160]}" for r in records if r["ok"] is None]


def main(argv: list[str]) -> int:
    os.environ["GPUPLAN_BENCH_DB"] = str(Path(tempfile.mkdtemp()) / "empty.sqlite")
    from gpuplan.models import catalog_names

    start = time.perf_counter()
    records = grid(catalog_names())
    s = summary(records)
    elapsed = time.perf_counter() - start
    fails = [r for r in records if r["ok"] is False]
    print(json.dumps(s), f"{elapsed:.0f} s")
    for r in fails[:40]:
        print("FAIL", r["argv"], "--", r["why"][:200])
    if "--write" in argv:
        lines = ["# Every proposal re-planned with its printed flags", "",
                 "`PYTHONPATH=src python benchmarks/suggestions_replan.py --write` (issue 27): "
                 f"every catalog model x {', '.join(GPUS)} x batch {', '.join(map(str, BATCHES))}"
                 " x train and infer, under engine auto and under "
                 + ", ".join(ENGINES["train"]) + " (train) and " + ", ".join(ENGINES["infer"])
                 + " (infer), `gpuplan fit --suggest`; each suggestion and each fewest-GPU "
                 "answer re-run with its own flags and engine.", "",
                 f"- proposals re-planned: {s['checked']}",
                 f"- refused, not fitting, or a peak other than stated: {s['failed']}",
                 f"- base plans the CLI refused (e.g. a batch past the model's positions): "
                 f"{s['base_plans_refused']}",
                 f"- wall time: {elapsed:.0f} s on the shared 2-core machine", ""]
        from collections import Counter

        why = Counter(r["why"].split(";")[0][:120] for r in records if r["ok"] is None)
        lines += ["Base plans refused, by reason:", ""]
        lines += [f"- {n} x {reason}" for reason, n in why.most_common()]
        lines += [""] + [f"- FAIL `{r['argv']}`: {r['why'][:200]}" for r in fails]
        OUT_MD.write_text("\n".join(lines) + "\n")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
