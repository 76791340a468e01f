"""gpuplan's speed estimate against the published measured runs (benchmarks/published/runs.json).

Every speed-kind run (train_throughput, train_mfu, decode, serving) is either expressed as a gpuplan
job -- its model, GPU, job fields and runtime, each mapped from the run's own fields, with the
assumptions stated per row -- and predicted, or listed with the reason gpuplan cannot express it
(tensor/pipeline parallelism, a server's continuous batching). The calibrate and holdout splits are
summarized separately: the median and worst |predicted / measured - 1|. Nothing here is tuned: the
estimate runs with its stated defaults and no stored bench run (``measured=None``).

Run:  PYTHONPATH=src python benchmarks/validate_speed.py [--write]
(--write regenerates benchmarks/validate_speed.md and benchmarks/validate_speed_residuals.json)
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import Topology, topology_for
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.models._types import Architecture

HERE = Path(__file__).resolve().parent
RUNS = HERE / "published" / "runs.json"
OUT_MD = HERE / "validate_speed.md"
#: p10-p90 of predicted/measured on the calibrate split, read by gpuplan.compute.residuals
OUT_RESIDUALS = HERE.parent / "src" / "gpuplan" / "compute" / "speed_residuals.json"
COMMAND = "PYTHONPATH=src python benchmarks/validate_speed.py --write"

SPEED_KINDS = ("train_throughput", "train_mfu", "decode", "serving")


@dataclass(frozen=True)
class Row:
    run: dict
    predicted: float | None
    measured: float
    unit: str
    config: str
    why_not: str = ""
    assumptions: tuple[str, ...] = ()

    @property
    def ratio(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.measured


# --------------------------------------------------------------------------------------------------
# Mapping a run onto a gpuplan job


def _shape_arch(model: dict) -> Architecture:
    s = model["shape"]
    gated = s.get("mlp") == "gated"
    rope = s.get("position") in ("rope", "rotary")
    return Architecture(
        name=model["name"], family="llama" if gated else "mpt", kind="decoder",
        hidden_size=s["hidden"], num_layers=s["layers"], num_heads=s["heads"],
        num_kv_heads=s["kv_heads"], head_dim=s["hidden"] // s["heads"],
        intermediate_size=s["ffn"], vocab_size=s["vocab"], max_position_embeddings=s["seq"],
        tie_word_embeddings=bool(s.get("tied_embeddings", True)), mlp="gated" if gated else "gelu",
        activation="silu" if gated else "gelu", norm=s.get("norm", "layernorm"),
        position="rotary" if rope else "learned")


_PRECISION = {"amp_bf16": "mixed-bf16", "amp-fp16": "amp-fp16", "fp32": "fp32"}
_OPTIMIZER = {"PagedAdamW8bit": "adamw-8bit", "Adam8bit": "adamw-8bit", "adafactor": "adafactor"}


def _precision(job: dict, runtime: str) -> tuple[str, list[str]]:
    p = str(job.get("precision") or "")
    notes = []
    if p == "amp-fp16" and "APEX" in runtime:
        # apex amp.initialize(opt_level="O2") (DLE run_squad.py / run_pretraining.py at the pinned
        # commit): fp16 weights and gradients, fp32 master weights in the optimizer, dynamic loss
        # scaling -- no autocast, no per-step weight casts (apex docs, "opt_level O2")
        out = "mixed-fp16"
        notes.append("APEX AMP O2 = mixed-fp16 (fp16 weights, fp32 master; no autocast)")
    elif p in _PRECISION:
        out = _PRECISION[p]
    elif p == "bf16" and "composer" in runtime:
        out = "mixed-bf16"  # FSDP PURE: bf16 params in compute, fp32 sharded master
        notes.append("Composer FSDP PURE bf16 = mixed-bf16 (fp32 sharded master)")
    elif p == "bf16":
        out = "bf16"
    elif "fp16" in p:
        out = "mixed-fp16"
    else:
        out = "mixed-bf16"
        notes.append(f"precision {p!r} read as mixed-bf16")
    return out, notes


def _optimizer(job: dict) -> tuple[str, list[str]]:
    o = str(job.get("optimizer") or "")
    for key, name in _OPTIMIZER.items():
        if key in o:
            return name, []
    if "LAMB" in o:
        return "lamb", []
    return "adamw", []


def _optimizer_impl(run: dict, precision: str, notes: list[str]) -> str | None:
    """How the run's optimizer step runs, where its source's code says (None: torch's default,
    foreach on a GPU). transformers' AdamW (``adamw_hf``) is a per-parameter Python loop
    (transformers/optimization.py, AdamW.step); Megatron-LM's Adam is apex FusedAdam
    (megatron/optimizer: ``from apex.optimizers import FusedAdam as Adam``); NVIDIA DLE BERT
    (run_squad.py / run_pretraining.py at the pinned commit) steps apex FusedAdam under --fp16
    and FusedLAMB in pretraining, BertAdam (optimization.py: a per-parameter loop) otherwise."""
    j = run["job"]
    opt, rt = str(j.get("optimizer") or ""), str(j.get("runtime") or "")
    if "adamw_hf" in opt:
        notes.append("adamw_hf: transformers AdamW, a per-parameter loop (for-loop)")
        return "for-loop"
    if "Megatron" in rt:
        notes.append("Megatron's Adam is apex FusedAdam (fused)")
        return "fused"
    if "APEX" in rt:
        if "LAMB" in opt or precision != "fp32":
            notes.append("DLE: apex FusedAdam / FusedLAMB (fused)")
            return "fused"
        notes.append("DLE fp32 fine-tuning: BertAdam, a per-parameter loop (for-loop)")
        return "for-loop"
    return None


def _runtime(text: str) -> str:
    t = text.lower()
    if "without torch.compile" in t or t.startswith("eager"):
        return "eager"
    if "cuda graphs" in t or "tensorrt" in t:
        return "cudagraphs"
    if "compile" in t:
        return "compile"
    return "eager"


def _not_expressible(run: dict) -> str:
    job, kind = run["job"], run["kind"]
    if kind == "serving":
        return ("a server's continuous batching under unbounded concurrency: the batch is the "
                "engine's choice (no serving model in gpuplan)")
    for key in ("tp", "pp", "cp"):
        if (job.get(key) or 1) > 1:
            return f"{key.upper()} {job[key]}: tensor/pipeline/context parallelism is not modeled"
    if job.get("tp") is None and kind == "train_mfu" and run["hardware"]["count"] > 64:
        return "layout (TP/PP) not transcribed, and not modeled"
    if "FSDP + Megatron" in str(job.get("runtime")):
        return "tensor parallelism inside FSDP is not modeled"
    return ""


def _model_of(run: dict, notes: list[str]):
    """The run's model: the catalog entry -- with the head of the task the source fine-tuned (HF
    AutoModelForSequenceClassification, DLE run_squad.py's BertForQuestionAnswering: a 2-way
    output layer, not the checkpoint's MLM head over the vocabulary) -- or an architecture from
    the run's shape."""
    m = run["model"]
    if not m.get("catalog"):
        return _shape_arch(m)
    model = load_model(m["catalog"])
    task = f"{run['job'].get('task') or ''} {m.get('name') or ''}".lower()
    if model.architecture.kind == "encoder" and ("fine-tuning" in task
                                                 or "classification" in task):
        notes.append("fine-tuned: a 2-way classifier head, not the checkpoint's MLM head")
        return replace(model.architecture, hf_class="BertForSequenceClassification", num_labels=2)
    return model


def _lora(job: dict, notes: list[str]) -> dict:
    lora = job.get("lora")
    if not lora:
        return {}
    rank = lora.get("rank")
    if rank is None:
        rank = 8
        notes.append("LoRA rank not stated: 8 assumed")
    out = {"lora_rank": rank}
    if lora.get("base_dtype") == "nf4":
        out["lora_base"] = "nf4"
    return out


#: The first fused exact-attention kernel for training, FlashAttention (Dao et al. 2022, arXiv
#: 2205.14135), appeared in 2022; PyTorch's SDPA in 2.0 (2023). A source from before 2022 that does
#: not name its attention ran the scores, the softmax and the values as separate kernels -- as its
#: own code shows where it is published: NVIDIA DLE BERT ``modeling.py`` (torch.matmul, / sqrt(d),
#: + mask, softmax, dropout, torch.matmul), Megatron-LM 2021 (baddbmm, FusedScaleMaskSoftmax,
#: dropout, bmm).
FUSED_ATTENTION_YEAR = 2022


def _attention(run: dict, notes: list[str]) -> str:
    stated = str(run["job"].get("attention") or "")
    if "eager" in stated:
        return "eager"
    if not stated and (run["source"].get("year") or FUSED_ATTENTION_YEAR) < FUSED_ATTENTION_YEAR:
        notes.append(f"attention not stated; a {run['source']['year']} source predates fused "
                     "attention kernels (FlashAttention, 2022): unfused (eager)")
        if "Megatron" in str(run["job"].get("runtime")):
            notes.append("Megatron fuses scale and mask into its softmax: the eager chain "
                         "counts two passes over the scores more")
        return "eager"
    return "sdpa"


def _train_job(run: dict, runtime: str, notes: list[str]) -> Job:
    j = run["job"]
    prec, n1 = _precision(j, str(j.get("runtime")))
    opt, n2 = _optimizer(j)
    notes += n1 + n2
    gpus = run["hardware"]["count"]
    mb, accum = j.get("micro_batch"), j.get("grad_accum") or 1
    zero = 3 if "fsdp" in str(j.get("zero") or "").lower() else 0
    if mb is None and "Megatron-Core" in str(j.get("runtime")) and j.get("global_batch"):
        # the README's benchmark command lines: --micro-batch-size 1 and the distributed optimizer
        # (as tests/unit/test_published_layouts.py times the same rows)
        mb, accum, zero = 1, j["global_batch"] // gpus, 1
        notes.append(f"Megatron-Core README commands: micro-batch 1 x {accum} accumulated, "
                     "distributed optimizer (ZeRO-1)")
    elif mb is None:  # Narayanan rows: global batch over the data-parallel GPUs
        gb = j.get("global_batch")
        mb = max(1, (gb or gpus) // gpus)
        notes.append(f"micro-batch {mb} = global batch / data-parallel GPUs (not stated)")
    if j.get("activation_offloading"):
        notes.append("activation offloading not modeled")
    return Job(model=run["model"]["name"], mode="train", precision=prec, optimizer=opt,
               batch=mb, seq=j.get("seq") or 2048, grad_accum=accum,
               gpus=gpus, zero=zero, checkpointing=j.get("checkpointing") or "none",
               attention=_attention(run, notes),
               runtime=runtime, **_lora(j, notes))


_INFER = {"bf16": "bf16", "fp16": "fp16", "int8 weight-only": "int8",
          "int4 weight-only, group 32": "q4_0"}


def _infer_job(run: dict, runtime: str, notes: list[str]) -> tuple[Job, int]:
    j = run["job"]
    p = str(j.get("precision") or "bf16").split(" (")[0]
    fmt = _INFER.get(p, "bf16")
    if fmt == "q4_0":
        notes.append("int4 group-32 weights read as q4_0 (4.5 bits)")
    prompt = j.get("prompt_tokens") or j.get("input_len") or 5
    new = j.get("output_len") or 200  # gpt-fast generate.py's default max_new_tokens
    return Job(model=run["model"]["name"], mode="infer", infer_precision=fmt, batch=1,
               seq=prompt, runtime=runtime, attention="sdpa"), new


def predict(run: dict) -> Row:
    m = run["measured"]
    unit, measured = m["unit"], m["value"]
    if unit.startswith("ms per output token"):  # compared as a rate
        unit, measured = "tokens/s (1000 / ms per output token)", 1000 / measured
    why = _not_expressible(run)
    cfg = json.dumps({k: v for k, v in run["job"].items() if v is not None}, sort_keys=True)
    if why:
        return Row(run, None, measured, unit, cfg, why)
    notes: list[str] = []
    runtime = _runtime(str(run["job"].get("runtime") or ""))
    gpu = get_gpu(run["hardware"]["gpu"])
    model = _model_of(run, notes)
    if run["kind"] == "decode":
        job, new = _infer_job(run, runtime, notes)
        est = estimate_speed(model, gpu, job, new_tokens=new, measured=None)
        value = est.tokens_per_s
    else:
        job = _train_job(run, runtime, notes)
        topo = _topology(run, gpu, notes)
        link = "nvlink" if job.gpus > 1 and topo is None else None
        impl = _optimizer_impl(run, job.precision, notes)
        est = estimate_speed(model, gpu, job, measured=None, link=link, optimizer_impl=impl,
                             topology=topo)
        value = _train_value(est, unit, run)
    return Row(run, value, measured, unit, cfg, assumptions=tuple(notes))


def _inter_node(stated: str | None, per_node: int) -> str | None:
    """The network between nodes as gpuplan's ``inter_node`` reads it, from the run's stated
    interconnect (None: not stated, the topology's 400 Gb/s InfiniBand per GPU default)."""
    m = re.match(r"\s*(\d+)\s*Gbps RoCE between nodes", stated or "")
    return f"roce-{int(m.group(1)) / per_node:g}" if m else None


def _topology(run: dict, gpu, notes: list[str]) -> Topology | None:
    """A run over more than one node: its data-parallel traffic crosses the network, so it is timed
    on the node topology (the node's NVLink, the stated network between nodes)."""
    h = run["hardware"]
    per_node = h.get("gpus_per_node") or 8
    if h["count"] <= per_node:
        return None
    inter = _inter_node(h.get("interconnect"), per_node)
    topo = topology_for(gpu, gpus_per_node=per_node, inter_node=inter)
    notes.append(f"{h['count'] // per_node} nodes of {per_node}: timed on the topology, "
                 f"{topo.inter.name} per GPU between nodes"
                 + (" (not stated: gpuplan's default)" if inter is None else ""))
    return topo


def _train_value(est, unit: str, run: dict) -> float:
    if unit.startswith("tokens/s"):
        return est.tokens_per_s
    if unit.startswith(("sequences/s", "samples/s")):
        return est.samples_per_s
    if unit.startswith("TFLOP/s"):
        hardware = "hardware" in unit or "recompute" in (run.get("notes") or "")
        return (est.hfu if hardware else est.mfu) * est.step.peak_flops / 1e12
    if unit.startswith("MFU"):
        return 100 * est.mfu
    raise ValueError(f"unit {unit!r}")


# --------------------------------------------------------------------------------------------------
# Summary and table


def rows() -> list[Row]:
    runs = json.loads(RUNS.read_text())["runs"]
    return [predict(r) for r in runs if r["kind"] in SPEED_KINDS]


def summary(rs: list[Row], split: str) -> dict:
    errs = [abs(r.ratio - 1) for r in rs if r.ratio is not None and r.run["split"] == split]
    ratios = sorted(r.ratio for r in rs if r.ratio is not None and r.run["split"] == split)
    if not errs:
        return {"n": 0}
    return {"n": len(errs), "median_abs_error": statistics.median(errs), "worst_abs_error": max(errs),
            "within_10pct": sum(e <= 0.10 for e in errs), "within_25pct": sum(e <= 0.25 for e in errs),
            "p10_ratio": _quantile(ratios, 0.10), "p90_ratio": _quantile(ratios, 0.90)}


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, 'linear')."""
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if x < 1000 else f"{x:,.0f}"


def table(rs: list[Row], split: str) -> list[str]:
    out = ["| run | kind | GPU x n | runtime | config | predicted | measured | unit | ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        if r.run["split"] != split or r.ratio is None:
            continue
        hw = r.run["hardware"]
        extra = ("; ".join(r.assumptions)).replace("|", "/")
        out.append(f"| {r.run['id']} | {r.run['kind']} | {hw['gpu']} x {hw['count']} | "
                   f"{_runtime(str(r.run['job'].get('runtime') or ''))} | `{r.config}`"
                   f"{' -- ' + extra if extra else ''} | {_fmt(r.predicted)} | {_fmt(r.measured)} | "
                   f"{r.unit} | {r.ratio:.2f} |")
    return out


def render(rs: list[Row]) -> str:
    lines = ["# Speed: gpuplan against published measured runs", "",
             f"Generated by `{COMMAND}` from `benchmarks/published/runs.json` (sources, "
             "configurations and figures there). ratio = predicted / measured (a rate: above 1 is "
             "optimistic). |error| = |ratio - 1|. Default fractions, no stored bench run.", ""]
    for split in ("calibrate", "holdout"):
        s = summary(rs, split)
        lines += [f"## {split}", ""]
        if s["n"]:
            lines.append(f"{s['n']} runs: median |error| {100 * s['median_abs_error']:.1f}%, worst "
                         f"{100 * s['worst_abs_error']:.1f}%; within 10%: {s['within_10pct']}, "
                         f"within 25%: {s['within_25pct']}; ratio p10-p90 {s['p10_ratio']:.2f}-"
                         f"{s['p90_ratio']:.2f}")
            lines += [""] + table(rs, split) + [""]
    lines += ["## Not expressible in gpuplan (yet)", "", "| run | split | kind | why |", "|---|---|---|---|"]
    lines += [f"| {r.run['id']} | {r.run['split']} | {r.run['kind']} | {r.why_not} |"
              for r in rs if r.ratio is None]
    return "\n".join(lines) + "\n"


def residuals(rs: list[Row]) -> dict:
    s = summary(rs, "calibrate")
    return {"p10_ratio": s["p10_ratio"], "p90_ratio": s["p90_ratio"], "runs": s["n"],
            "split": "calibrate", "command": COMMAND,
            "source": "benchmarks/published/runs.json (calibrate split, speed kinds)"}


def main(argv: list[str]) -> int:
    rs = rows()
    text = render(rs)
    if "--write" in argv:
        OUT_MD.write_text(text)
        OUT_RESIDUALS.write_text(json.dumps(residuals(rs), indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
