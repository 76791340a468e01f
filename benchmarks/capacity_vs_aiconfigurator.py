"""``gpuplan capacity`` side by side with NVIDIA's AIConfigurator (issue 29, "must hold").

For each case below (a model, a GPU, a TP degree, a concurrency, fixed input/output lengths, one
precision, TensorRT-LLM) this prints gpuplan's mean TTFT, mean TPOT and output tokens/s per GPU
next to AIConfigurator's "agg" estimate of the same serving point, and their ratios.

gpuplan runs here through the library (``gpuplan.capacity``: a closed loop of ``concurrency``
clients, TensorRT-LLM 1.0's scheduler defaults). AIConfigurator's numbers are read from the
recorded ``capacity_vs_aiconfigurator.json``; ``--aic`` regenerates that file by running
AIConfigurator (``pip install aiconfigurator`` into its own venv, default /tmp/aic_venv; it runs
offline on its bundled per-GPU kernel database) through its Python API ``cli_estimate``. Only
AIConfigurator's outputs are kept, none of its code or data.

    PYTHONPATH=src python benchmarks/capacity_vs_aiconfigurator.py            # print the table
    PYTHONPATH=src python benchmarks/capacity_vs_aiconfigurator.py --write    # and rewrite the .md
    PYTHONPATH=src python benchmarks/capacity_vs_aiconfigurator.py --aic [--aic-python PY]

tests/integration/test_capacity_vs_aic.py checks that the .md's gpuplan columns are what gpuplan
computes now.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
JSON_PATH = HERE / "capacity_vs_aiconfigurator.json"
MD_PATH = HERE / "capacity_vs_aiconfigurator.md"
BEGIN, END = "<!-- table:begin -->", "<!-- table:end -->"
# The prose blocks whose figures summarise the table: computed from the same rows (``prose``).
AGREES = ("<!-- agrees:begin -->", "<!-- agrees:end -->")
PUB_NOTE = ("<!-- pub-note:begin -->", "<!-- pub-note:end -->")
MOE_NOW = ("<!-- moe-now:begin -->", "<!-- moe-now:end -->")

# id, gpuplan catalog name, AIConfigurator model (its Hugging Face id), gpuplan GPU, AIC system,
# TP, concurrency, input, output, weight format ("bf16" or "fp8"; the KV cache follows AIC's
# resolved kvcache mode, recorded in the JSON).
CASES = [
    dict(id="l8-h100-tp1-c1", model="llama-3.1-8b", aic_model="meta-llama/Meta-Llama-3.1-8B",
         gpu="h100", system="h100_sxm", tp=1, concurrency=1, input=1024, output=128,
         weights="bf16"),
    dict(id="l8-h100-tp1-c8", model="llama-3.1-8b", aic_model="meta-llama/Meta-Llama-3.1-8B",
         gpu="h100", system="h100_sxm", tp=1, concurrency=8, input=1024, output=128,
         weights="bf16"),
    dict(id="l8-h100-tp1-c64", model="llama-3.1-8b", aic_model="meta-llama/Meta-Llama-3.1-8B",
         gpu="h100", system="h100_sxm", tp=1, concurrency=64, input=2048, output=256,
         weights="bf16"),
    dict(id="l8-h200-tp1-c32", model="llama-3.1-8b", aic_model="meta-llama/Meta-Llama-3.1-8B",
         gpu="h200", system="h200_sxm", tp=1, concurrency=32, input=4096, output=512,
         weights="bf16"),
    dict(id="l70-h100-tp8-c1", model="llama-3.1-70b", aic_model="meta-llama/Meta-Llama-3.1-70B",
         gpu="h100", system="h100_sxm", tp=8, concurrency=1, input=1024, output=128,
         weights="bf16"),
    dict(id="l70fp8-h100-tp4-c16", model="llama-3.1-70b",
         aic_model="nvidia/Llama-3.1-70B-Instruct-FP8", gpu="h100", system="h100_sxm", tp=4,
         concurrency=16, input=2048, output=256, weights="fp8"),
    dict(id="l70-h200-tp8-c32", model="llama-3.1-70b", aic_model="meta-llama/Meta-Llama-3.1-70B",
         gpu="h200", system="h200_sxm", tp=8, concurrency=32, input=4096, output=512,
         weights="bf16"),
    dict(id="q32-h200-tp2-c16", model="qwen3-32b", aic_model="Qwen/Qwen3-32B", gpu="h200",
         system="h200_sxm", tp=2, concurrency=16, input=2048, output=256, weights="bf16"),
    dict(id="q32fp8-h100-tp1-c8", model="qwen3-32b", aic_model="Qwen/Qwen3-32B-FP8", gpu="h100",
         system="h100_sxm", tp=1, concurrency=8, input=1024, output=128, weights="fp8"),
    dict(id="q30a3-h100-tp1-c32", model="qwen3-30b-a3b", aic_model="Qwen/Qwen3-30B-A3B",
         gpu="h100", system="h100_sxm", tp=1, concurrency=32, input=1024, output=128,
         weights="bf16"),
    # The two points of TensorRT-LLM's published "Online Serving Measurements" (v0.14.0, QPS 2,
    # 467 in / 256 out, bf16; benchmarks/published/runs.json): gpuplan at the published rate
    # (Poisson), AIConfigurator at the concurrency that rate holds by Little's law with the
    # published latencies (2/s x (TTFT + 255 ITL): 8B 2 x 2.06 s = 4; 70B 2 x 5.42 s = 11).
    dict(id="pub-l8-h100-tp1-qps2", model="llama-3.1-8b", aic_model="meta-llama/Meta-Llama-3.1-8B",
         gpu="h100", system="h100_sxm", tp=1, concurrency=4, rate=2.0, input=467, output=256,
         weights="bf16", published="trtllm-online-llama31-8b-h100-bf16-qps2-467-256"),
    dict(id="pub-l70-h100-tp4-qps2", model="llama-3.1-70b",
         aic_model="meta-llama/Meta-Llama-3.1-70B", gpu="h100", system="h100_sxm", tp=4,
         concurrency=11, rate=2.0, input=467, output=256, weights="bf16",
         published="trtllm-online-llama31-70b-h100-bf16-tp4-qps2-467-256"),
]

# Runs inside AIConfigurator's venv: one estimate per case, printed as JSON.
_AIC_SCRIPT = r"""
import json, sys, importlib.metadata as md
from aiconfigurator.cli.api import cli_estimate
cases = json.loads(sys.stdin.read())
out = {"aiconfigurator_version": md.version("aiconfigurator"),
       "aiconfigurator_core_version": md.version("aiconfigurator-core"), "cases": {}}
for c in cases:
    kw = dict(mode="agg", backend_name="trtllm", isl=c["input"], osl=c["output"],
              batch_size=c["concurrency"], tp_size=c["tp"])
    if c.get("moe"):
        kw.update(moe_tp_size=c["tp"], moe_ep_size=1)
    r = cli_estimate(c["aic_model"], c["system"], **kw)
    raw = r.raw
    out["cases"][c["id"]] = {
        "backend_version": r.backend_version, "database_mode": "SILICON",
        "ttft_ms": float(r.ttft), "tpot_ms": float(r.tpot),
        "output_tokens_per_s_per_gpu": float(raw["tokens/s/gpu"]),
        "ctx_tokens": int(r.ctx_tokens), "gemm": str(raw["gemm"]), "kvcache": str(raw["kvcache"]),
        "fmha": str(raw["fmha"]), "parallel": str(raw["parallel"])}
print(json.dumps(out))
"""


def _is_moe(case: dict) -> bool:
    return case["model"] == "qwen3-30b-a3b"


def run_aic(python: str) -> dict:
    """AIConfigurator's estimate of every case (needs its venv); returns the JSON's content."""
    cases = [dict(c, moe=_is_moe(c)) for c in CASES]
    proc = subprocess.run([python, "-c", _AIC_SCRIPT], input=json.dumps(cases), text=True,
                          capture_output=True, check=True)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["how"] = ("aiconfigurator.cli.api.cli_estimate(model, system, mode='agg', "
                   "backend_name='trtllm', isl, osl, batch_size=concurrency, tp_size=tp), "
                   "database_mode SILICON (the default), its default backend version")
    return data


def gpuplan_row(case: dict, kvcache: str) -> dict:
    """gpuplan's mean TTFT, mean TPOT (ms) and output tokens/s per GPU for ``case``."""
    from gpuplan import Job, get_gpu, load_model
    from gpuplan.capacity import capacity

    kv = "fp8" if "fp8" in kvcache.lower() else "bf16"
    job = Job(model="x", mode="infer", engine="trt-llm", tp=case["tp"], gpus=case["tp"],
              infer_precision=case["weights"], kv_dtype=kv)
    c, rate = case["concurrency"], case.get("rate")
    load = dict(rate=rate, requests=400) if rate else dict(concurrency=c, requests=max(32, 6 * c))
    r = capacity(load_model(case["model"]), get_gpu(case["gpu"]), job=job, engine="trt-llm",
                 input=case["input"], output=case["output"], max_model_len=8192, **load)
    return {"ttft_ms": r.ttft_s.mean * 1e3, "tpot_ms": r.tpot_s.mean * 1e3,
            "output_tokens_per_s_per_gpu": r.throughput["output_tokens_per_s"] / case["tp"]}


def rows(aic: dict) -> list[dict]:
    out = []
    for case in CASES:
        a = aic["cases"][case["id"]]
        g = gpuplan_row(case, a["kvcache"])
        out.append({"case": case, "aic": a, "gpuplan": g})
    return out


def _fmt(x: float) -> str:
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def table(rs: list[dict]) -> str:
    head = ("| case | model | GPU | TP | conc. | in/out | weights/KV | TTFT ms gpuplan "
            "| TTFT ms AIC | ratio | TPOT ms gpuplan | TPOT ms AIC | ratio | tok/s/GPU gpuplan "
            "| tok/s/GPU AIC | ratio |")
    lines = [head, "|" + "---|" * 16]
    for r in rs:
        c, a, g = r["case"], r["aic"], r["gpuplan"]
        kv = "fp8" if "fp8" in a["kvcache"].lower() else "bf16"
        load = f"{c['concurrency']} (gpuplan: {c['rate']:g}/s)" if c.get("rate") else str(
            c["concurrency"])
        cells = [c["id"], c["model"], c["system"], str(c["tp"]), load,
                 f"{c['input']}/{c['output']}", f"{c['weights']}/{kv}"]
        for key in ("ttft_ms", "tpot_ms", "output_tokens_per_s_per_gpu"):
            ratio = g[key] / a[key]
            far = " (>20%)" if abs(ratio - 1) > 0.2 else ""
            cells += [_fmt(g[key]), _fmt(a[key]), f"{ratio:.2f}{far}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratios(rs: list[dict], key: str) -> list[float]:
    return [r["gpuplan"][key] / r["aic"][key] for r in rs]


def _spread(ratios: list[float]) -> str:
    """'within N% (lo-hi, median m)', each figure formatted as the table's ratio cells."""
    worst = max(abs(x - 1) for x in ratios)
    return (f"within {100 * worst:.0f}% ({min(ratios):.2f}-{max(ratios):.2f}, "
            f"median {statistics.median(ratios):.2f})")


def agrees(rs: list[dict]) -> str:
    """The "What agrees" bullets, their ranges and medians taken from the table's rows."""
    dense = [r for r in rs if not _is_moe(r["case"])]
    closed = [r for r in dense if not r["case"].get("rate")]
    moe = [r for r in rs if _is_moe(r["case"])]
    tpot, tok = "tpot_ms", "output_tokens_per_s_per_gpu"
    moe_text = "; ".join(f"`{r['case']['id']}` TPOT {_ratios([r], tpot)[0]:.2f}, tokens/s/GPU "
                         f"{_ratios([r], tok)[0]:.2f}" for r in moe)
    return (f"- **TPOT**: every dense case {_spread(_ratios(dense, tpot))}.\n"
            f"- **Output tokens/s per GPU** in the closed-loop dense cases: "
            f"{_spread(_ratios(closed, tok))}.\n"
            "  Decode is weight- and KV-bandwidth bound; the two tools' step models (gpuplan's "
            "roofline speed\n  model, AIC's measured kernels) agree there.\n"
            "- **The MoE case**, since its experts run as one grouped kernel (case 3 below):\n"
            f"  {moe_text}.")


def pub_note(rs: list[dict]) -> str:
    """The sentence giving the `pub-` rows' gpuplan TTFT today, from the table's rows."""
    pub = [_fmt(r["gpuplan"]["ttft_ms"]) for r in rs if r["case"].get("published")]
    return f"gpuplan's TTFT on the two `pub-` rows is now {' and '.join(pub)} ms"


def moe_now(rs: list[dict]) -> str:
    """Case 3's figures after the grouped-expert fix, as the table gives them today."""
    r = next(r for r in rs if _is_moe(r["case"]))
    g, a = r["gpuplan"], r["aic"]
    per_gpu = g["output_tokens_per_s_per_gpu"] / a["output_tokens_per_s_per_gpu"]
    return (f"TPOT now {_fmt(g['tpot_ms'])} ms, ratio {g['tpot_ms'] / a['tpot_ms']:.2f}, "
            f"tokens/s/GPU {per_gpu:.2f}")


def _replace(text: str, marks: tuple[str, str], body: str, sep: str = "\n") -> str:
    return re.sub(re.escape(marks[0]) + ".*?" + re.escape(marks[1]),
                  lambda _: f"{marks[0]}{sep}{body}{sep}{marks[1]}", text, flags=re.S)


def parse_md_gpuplan(text: str) -> dict[str, tuple[str, str, str]]:
    """The .md table's gpuplan cells (TTFT, TPOT, tokens/s/GPU) by case id, as written."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    got = {}
    for line in block.strip().splitlines()[2:]:
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        got[cells[0]] = (cells[7], cells[10], cells[13])
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aic", action="store_true", help="rerun AIConfigurator, rewrite the JSON")
    ap.add_argument("--aic-python", default="/tmp/aic_venv/bin/python")
    ap.add_argument("--write", action="store_true", help="rewrite the .md's table")
    args = ap.parse_args()
    if args.aic:
        JSON_PATH.write_text(json.dumps(run_aic(args.aic_python), indent=1) + "\n")
    aic = json.loads(JSON_PATH.read_text())
    rs = rows(aic)
    t = table(rs)
    print(f"AIConfigurator {aic['aiconfigurator_version']} (core "
          f"{aic['aiconfigurator_core_version']})\n")
    print(t)
    print(f"\n{agrees(rs)}\n\n{pub_note(rs)}\n\n{moe_now(rs)}")
    if args.write:
        text = _replace(MD_PATH.read_text(), (BEGIN, END), t)
        text = _replace(text, AGREES, agrees(rs))
        text = _replace(text, PUB_NOTE, pub_note(rs), sep="")
        MD_PATH.write_text(_replace(text, MOE_NOW, moe_now(rs), sep=""))


if __name__ == "__main__":
    sys.exit(main())
