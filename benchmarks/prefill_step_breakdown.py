"""What one compute-bound TensorRT-LLM step costs in gpuplan's speed model, piece by piece, beside
what the published runs measured (issues 29 and 31: "the prompt-bound 467/16 QPS-INF rows").

For each of TensorRT-LLM 0.14's online rows at 467 in / 16 out, "QPS INF" (benchmarks/published/
serving_runs.json, BF16, Llama-3.1-70B TP4 and 8B TP1 on H100 and H200) this prints:

* the steady step the simulation settles into (``gpuplan.capacity`` at the row's load): its
  decodes and prompts, and its time split as the step cost (capacity/_cost.py) splits it;
* the speed model's 8,192-token prompt (TRT-LLM's default max_num_tokens) op by op: each GEMM's
  rate, attention, the memory-bound kernels, the LM head (last token only), launches and the TP
  all-reduces;
* the measured figures the step can be read against: the mean ITL at QPS INF (every decode gap
  of a request is one mixed step) and the request throughput.

With ``--fp8`` it also runs ``gpuplan capacity`` on TRT-LLM's FP8 max-throughput rows with long
prompts (perf-overview.md, "All data in the table below was generated using version 0.17",
output tokens/s; NVIDIA/TensorRT-LLM @258c7540c03517def55d9a5aadfa9288af474e1b): those runs
used trtllm-bench's tuned build and chunked context, so the simulation's 0.14 defaults are not
their scheduler -- a cross-check of the FP8 prefill's direction, not a validation row.

    PYTHONPATH=src python benchmarks/prefill_step_breakdown.py [--fp8]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from gpuplan.capacity import _cost, capacity  # noqa: E402
from gpuplan.compute import estimate_speed  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402
from gpuplan.job import Job  # noqa: E402
from gpuplan.models import load_model  # noqa: E402

RUNS = HERE / "published" / "serving_runs.json"
TOKENS = 8192  # TensorRT-LLM 0.14's max_num_tokens default (capacity/_engines.py)
GEMMS = ("attn.qkv", "attn.out", "mlp.gate_up", "mlp.down")

#: perf-overview.md @258c7540, "Throughput Measurements" (v0.17, FP8, output tokens/s)
FP8_ROWS = (("llama-3.1-70b", "H100-SXM-80GB", 4, 2048, 128, 1302.6),
            ("llama-3.1-70b", "H200-SXM-141GB", 4, 2048, 128, 1358.06),
            ("llama-3.1-8b", "H100-SXM-80GB", 1, 2048, 128, 3556.73),
            ("llama-3.1-8b", "H200-SXM-141GB", 1, 2048, 128, 3794.14),
            ("llama-3.1-70b", "H100-SXM-80GB", 4, 5000, 500, 1602.78),
            ("llama-3.1-8b", "H100-SXM-80GB", 1, 5000, 500, 3559.36))


def _job(run: dict) -> Job:
    return Job(model=run["model"], mode="infer", engine="trt-llm", tp=run["tp"], gpus=run["tp"],
               infer_precision=run["precision"])


def simulate_steps(run: dict) -> tuple[object, list[tuple[int, int, int, float]]]:
    """The row at its load, every step's (decodes, prompt tokens, prompts, seconds) recorded."""
    log: list[tuple[int, int, int, float]] = []
    orig = _cost.StepCost.step_s

    def step_s(self, decodes, context_sum, chunks):
        t = orig(self, decodes, context_sum, chunks)
        log.append((decodes, sum(n for n, _ in chunks), len(chunks), t))
        return t

    _cost.StepCost.step_s = step_s
    try:
        n = run["num_requests"]
        res = capacity(load_model(run["model"]), get_gpu(run["gpu"]), job=_job(run),
                       engine="trt-llm", engine_version="0.14", input=run["input_len"],
                       output=run["output_len"], requests=n, seed=0, concurrency=n)
    finally:
        _cost.StepCost.step_s = orig
    return res, log


def steady(log: list[tuple[int, int, int, float]]) -> tuple[int, int, int, float]:
    """The most common full step (the most prompt tokens, then the most decodes)."""
    full = [s for s in log if s[1] and s[0] + s[1] > 0.9 * TOKENS]
    return statistics.mode((d, p, k, round(t, 4)) for d, p, k, t in full)


def prompt_ops(run: dict) -> tuple[dict[str, tuple[float, float]], float, float, float]:
    """The speed model's 8,192-token prompt on the row's layout: {op: (seconds, FLOPs)}, the
    launch time, the TP all-reduces' time and the whole prefill (all per TP rank)."""
    model, gpu = load_model(run["model"]), get_gpu(run["gpu"])
    est = estimate_speed(model, gpu, _job(run).with_(batch=1, seq=TOKENS, context=TOKENS),
                         new_tokens=1, measured=None)
    ops: dict[str, tuple[float, float]] = {}
    for t in est.prefill.ops:
        s, f = ops.get(t.op.name, (0.0, 0.0))
        ops[t.op.name] = (s + t.total_s, f + t.op.flops * t.op.count)
    comm = getattr(est.layout, "prefill_comm_s", 0.0)
    return ops, est.prefill.launch_time_s, comm, est.ttft_s - est.request_host_s


def _split(run: dict, step: tuple[int, int, int, float]) -> str:
    model, gpu = load_model(run["model"]), get_gpu(run["gpu"])
    cost = _cost.StepCost(model, gpu, _job(run), max_len=run["input_len"] + run["output_len"])
    b, tokens, k, _ = step
    ctx = run["input_len"] + run["output_len"] // 2
    dec = cost.decode_s(b, b * ctx)
    lin = cost._linear_s(tokens + b) - cost._linear_s(b)
    attn = k * cost._attn_s(run["input_len"], 0)
    return (f"decode step of the {b} decodes {1e3 * dec:.1f} ms + token-linear part of the "
            f"{tokens} prompt tokens {1e3 * lin:.1f} ms + {k} prompts' attention "
            f"{1e3 * attn:.2f} ms")


def report_row(run: dict) -> list[str]:
    res, log = simulate_steps(run)
    step = steady(log)
    ops, launch, comm, total = prompt_ops(run)
    meas = run["measured"]
    out = [f"## {run['id']} ({run['precision']})", "",
           f"steady step: {step[0]} decodes + {step[2]} prompts ({step[1]} tokens) = "
           f"{1e3 * step[3]:.1f} ms: {_split(run, step)}",
           f"measured mean ITL at QPS INF {meas['itl_ms']['value']:.0f} ms -> measured / "
           f"steady step = {meas['itl_ms']['value'] / 1e3 / step[3]:.3f}",
           f"requests/s: simulated {res.throughput['requests_per_s']:.1f}, measured "
           f"{meas['total_tokens_per_s']['value'] / (run['input_len'] + run['output_len']):.2f}"
           f" (total tok/s / {run['input_len'] + run['output_len']})", "",
           f"the speed model's {TOKENS}-token prompt, per TP rank ({1e3 * total:.1f} ms):", "",
           "| piece | ms | TFLOP/s |", "|---|---:|---:|"]
    for name, (s, f) in sorted(ops.items(), key=lambda kv: -kv[1][0]):
        rate = f"{f / s / 1e12:.0f}" if f and s and name in GEMMS else ""
        out.append(f"| {name} | {1e3 * s:.2f} | {rate} |")
    gemm = sum(ops[n][0] for n in GEMMS if n in ops)
    out += [f"| launches | {1e3 * launch:.2f} | |", f"| TP all-reduces | {1e3 * comm:.2f} | |",
            f"| (GEMMs together) | {1e3 * gemm:.2f} | "
            f"{sum(ops[n][1] for n in GEMMS if n in ops) / gemm / 1e12:.0f} |", ""]
    return out


def report_fp8() -> list[str]:
    out = ["## FP8 max-throughput rows (TRT-LLM v0.17 perf overview), simulated at 0.14's "
           "scheduler defaults", "", "| model | GPU | TP | in/out | measured out tok/s | "
           "simulated | ratio |", "|---|---|---:|---|---:|---:|---:|"]
    for m, g, tp, i, o, meas in FP8_ROWS:
        job = Job(model=m, mode="infer", engine="trt-llm", tp=tp, gpus=tp, infer_precision="fp8")
        res = capacity(load_model(m), get_gpu(g), job=job, engine="trt-llm",
                       engine_version="0.14", input=i, output=o, requests=400, seed=0,
                       concurrency=400)
        p = res.throughput["output_tokens_per_s"]
        out.append(f"| {m} | {g} | {tp} | {i}/{o} | {meas:,.0f} | {p:,.0f} | {p / meas:.2f} |")
    return out


def main(argv: list[str]) -> None:
    runs = [r for r in json.loads(RUNS.read_text())["runs"]
            if r["source_group"] == "tensorrt-llm-online" and r["id"].endswith("467-16-qpsinf")]
    lines = ["# A compute-bound TensorRT-LLM step in gpuplan's speed model", ""]
    for run in runs:
        lines += report_row(run)
    if "--fp8" in argv:
        lines += report_fp8()
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
