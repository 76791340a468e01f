"""Compare ``gpuplan capacity`` with published serving measurements (issue 29's "must hold":
TTFT, ITL and throughput within a 15% median error).

Each row of benchmarks/published/serving_runs.json runs through :func:`gpuplan.capacity` (the call
behind ``gpuplan capacity``) at the row's engine, layout, precision, fixed input/output lengths and
its stated load -- a request rate (Poisson arrivals: the sources do not state the process), a
closed-loop concurrency, or "INF" (every request at once: a closed loop as wide as the request
count). Nothing here is fitted: the simulation runs with the engine's defaults and what the row
states beyond its table, each with its source in the row: a KV-cache dtype (``kv_dtype``),
the mean input and output lengths served where the row's own figures give them
(``input_len_served``, ``output_len_served``: lengths drawn per request, or generation stopped
at EOS), the server flags its source states (``server_flags``: vLLM's gpu_memory_utilization,
max_model_len, max_num_seqs, max_num_batched_tokens), and where a row states its client's
seeded draws (``drawn``: sglang.bench_serving's random dataset) the very requests that client
sent (:func:`bench_serving_workload`).

    PYTHONPATH=src python benchmarks/validate_capacity.py --write   # rewrites validate_capacity.md
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from gpuplan.capacity import capacity  # noqa: E402
from gpuplan.capacity._engines import SCHEDULERS  # noqa: E402
from gpuplan.capacity._workload import Request, Workload  # noqa: E402
from gpuplan.errors import InputError  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402
from gpuplan.job import Job  # noqa: E402
from gpuplan.models import load_model  # noqa: E402

RUNS = HERE / "published" / "serving_runs.json"
OUT_MD = HERE / "validate_capacity.md"
COMMAND = "PYTHONPATH=src python benchmarks/validate_capacity.py --write"
#: the figures compared: (key in the row's ``measured``, label, how the prediction is read)
FIGURES = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("output_tokens_per_s", "output tok/s"))
BAR = 0.15
SEED = 0


@dataclass
class Row:
    run: dict
    version_run: str
    requests: int
    command: str
    predicted: dict = field(default_factory=dict)
    why_not: str = ""
    ttft_pct_ms: dict = field(default_factory=dict)
    """The simulated TTFT's p50 and p99 in ms (a row's ``spread`` is read against them)."""

    def error(self, key: str) -> float | None:
        m = self.run["measured"].get(key)
        p = self.predicted.get(key)
        if m is None or p is None or not m["value"]:
            return None
        return p / m["value"] - 1.0


def _version(engine: str, stated: str | None) -> str:
    """The engine version the simulation runs: the newest modelled row not above the stated
    one (TensorRT-LLM 0.14.0 runs gpuplan's 0.14 row: trtllm-build's defaults of that
    release), else the oldest modelled row; an unstated version runs the newest."""
    rows = sorted((s.version for s in SCHEDULERS if s.engine == engine),
                  key=lambda v: tuple(int(p) for p in v.split(".")))
    if stated is None:
        return rows[-1]
    key = tuple(int(p) for p in stated.split(".")[:2])
    fits = [v for v in rows if tuple(int(p) for p in v.split(".")) <= key]
    return fits[-1] if fits else rows[0]


def _load(run: dict) -> tuple[dict, int, str]:
    """capacity() keywords for the row's load, the request count and the CLI spelling."""
    load = run["load"]
    n = run.get("num_requests")
    if load.get("concurrency"):
        c = int(load["concurrency"])
        n = n or max(100, 4 * c)
        return {"concurrency": c}, n, f"--concurrency {c}"
    if load.get("request_rate") is None:          # "INF": every request at once
        n = n or 500
        return {"concurrency": n}, n, f"--concurrency {n}"
    r = load["request_rate"]
    n = n or 500
    return {"rate": r}, n, f"--rate {r:g}"


def _output(run: dict) -> int:
    """The output length simulated: the served mean where the row's own columns give one
    (``output_len_served``: generation stopped at EOS before the length asked), else the
    length asked."""
    served = run.get("output_len_served")
    return int(served["run_as"]) if served else int(run["output_len"])


def _input(run: dict) -> int:
    """The prompt length simulated: the served mean where the row's own figures give one
    (``input_len_served``: prompt lengths drawn per request up to the length stated, as
    sglang.bench_serving's random dataset does at random_range_ratio 0), else the length
    stated."""
    served = run.get("input_len_served")
    return int(served["run_as"]) if served else int(run["input_len"])


#: the server flags a row may state (``server_flags``), each a keyword of :func:`gpuplan.capacity`
#: and, spelt with dashes, an option of ``gpuplan capacity``
SERVER_FLAGS = ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens")


def _server_flags(run: dict) -> dict:
    """The engine flags the row's source states for its server (``server_flags``: e.g. vLLM's
    ``--gpu-memory-utilization 0.5 --max-model-len 2048``), else none (the engine's defaults)."""
    stated = run.get("server_flags") or {}
    return {k: stated[k] for k in SERVER_FLAGS if stated.get(k) is not None}


def _prefix_hit(run: dict) -> float:
    """The share of every prompt the row's source shows its prefix cache served
    (``prefix_cache.hit_share``: stated only where the server's own hit-rate lines show that
    every request of the run repeats a prompt already cached), else 0: no hit is assumed."""
    pc = run.get("prefix_cache") or {}
    return float(pc.get("hit_share") or 0.0)


def bench_serving_workload(run: dict) -> Workload | None:
    """The requests sglang.bench_serving sent for a row that states its draws (``drawn``): its
    random dataset's per-request lengths and its Poisson gaps, drawn as the client draws them
    from numpy's global generator seeded with ``--seed`` (sgl-project/sglang
    python/sglang/bench_serving.py: run_benchmark seeds, sample_random_requests draws every
    input length then every output length with ``np.random.randint``, get_request one
    ``np.random.exponential(1 / rate)`` after each request). At random_range_ratio 0 the prompts
    are uniform in 1..L and the outputs in 0..L, so the run is a mix of short and long requests,
    not its means: the mix sets how often a long prompt's prefill stalls the decodes and which
    prompt is the median one. Refused (ValueError) unless the draws sum to the row's own token
    totals, which they do exactly on the five DataCrunch lines. A drawn output of 0 runs as 1
    (the prefill's token; bench_serving counts no first token for it: 3 of the 1,200 requests at
    4 req/s). None for a row without ``drawn``."""
    d = run.get("drawn")
    if not d:
        return None
    import numpy as np  # the client's own generator (MT19937, legacy seeding); benchmarks only

    rng = np.random.RandomState(d["seed"])
    n, ratio = d["num_prompts"], d["random_range_ratio"]
    n_in = rng.randint(max(int(d["random_input_len"] * ratio), 1), d["random_input_len"] + 1,
                       size=n)
    n_out = rng.randint(int(d["random_output_len"] * ratio), d["random_output_len"] + 1, size=n)
    t = run["run_totals"]
    if (int(n_in.sum()), int(n_out.sum())) != (t["total_input_tokens"], t["total_output_tokens"]):
        raise ValueError(f"{run['id']}: the seed-{d['seed']} draws sum to {int(n_in.sum())} / "
                         f"{int(n_out.sum())} tokens, not the line's {t['total_input_tokens']} / "
                         f"{t['total_output_tokens']}")
    gaps = rng.exponential(1.0 / d["request_rate"], size=n)
    arrival, reqs = 0.0, []
    for i in range(n):
        reqs.append(Request(arrival, int(n_in[i]), max(1, int(n_out[i]))))
        arrival += float(gaps[i])
    return Workload(requests=tuple(reqs), rate=d["request_rate"], arrivals="poisson",
                    source=f"{d['client']} {d['dataset']} seed {d['seed']}")


def warm_cache_workload(run: dict, n: int, inp: int, out: int) -> Workload | None:
    """The requests of an "INF" row whose server's prefix cache held its first prompts when the
    run began (``prefix_cache.cached_prompts``: k, read from the server's log lines): vllm
    benchmark_serving.py's seed-0 random prompts are the same prompt i in every run, its initial
    test request sends prompt 0 just before the run, and the runs before on that server left
    prompts 0..k-1 in a pool that holds them (serving_runs.json ``prefix_cache.reading``). So
    requests 0..k-1 hit their prompts' whole blocks (:class:`Workload` ``cached_prefixes``),
    the others none; every request is sent at once (a closed loop as wide as the run). None for
    a row without ``cached_prompts``."""
    k = (run.get("prefix_cache") or {}).get("cached_prompts")
    if not k:
        return None
    ids = tuple(f"prompt-{i}" for i in range(k))
    reqs = tuple(Request(0.0, inp, out, ids[i] if i < k else None, inp if i < k else 0)
                 for i in range(n))
    return Workload(requests=reqs, concurrency=n, arrivals="poisson", cached_prefixes=ids,
                    source=f"{n} at once, prompts 0-{k - 1} cached")


def _stat(stats, run: dict, key: str) -> float:
    """The simulated statistic the row's figure is: its median (p50) where the source quotes
    one (``measured[key]["stat"] == "median"``: sglang.bench_serving's JSON line holds only
    median_ttft_ms and median_itl_ms), else its mean. A prefill-first scheduler (SGLang's:
    a prefill batch runs alone, the decodes wait) puts a few long gaps in every stream, which
    lift the mean ITL well above the median one, so the two are not interchangeable."""
    m = run["measured"].get(key) or {}
    return stats.p50 if m.get("stat") == "median" else stats.mean


def predict(run: dict) -> Row:
    version = _version(run["engine"], run.get("engine_version"))
    kw, n, load_cli = _load(run)
    tp = run["tp"]
    out, inp = _output(run), _input(run)
    kv = run.get("kv_dtype")                 # None: gpuplan's default (the weights' dtype)
    flags = _server_flags(run)
    hit = _prefix_hit(run)
    drawn = bench_serving_workload(run)
    warm = warm_cache_workload(run, n, inp, out) if drawn is None else None
    shape = (f"{load_cli} --requests {n} --input {inp} --output {out} --seed {SEED}"
             + (f" --prefix-hit {hit:g}" if hit else "")
             if drawn is None and warm is None else
             f"--workload {run['id']}.jsonl (warm_cache_workload: prompts 0-"
             f"{run['prefix_cache']['cached_prompts'] - 1} of {n} cached, {inp} in, {out} out)"
             if drawn is None else
             f"--workload {run['id']}.jsonl (bench_serving_workload: the client's seed-"
             f"{run['drawn']['seed']} requests)")
    cmd = (f"gpuplan capacity {run['model']} --gpu {run['gpu']} --engine {run['engine']} "
           f"--engine-version {version} --tp {tp} --infer-precision {run['precision']} "
           + (f"--kv-dtype {kv} " if kv else "")
           + "".join(f"--{k.replace('_', '-')} {v:g} " for k, v in flags.items())
           + shape)
    row = Row(run=run, version_run=version, requests=n, command=cmd)
    try:
        job = Job(model=run["model"], mode="infer", engine=run["engine"], tp=tp, gpus=tp,
                  infer_precision=run["precision"], kv_dtype=kv)
        if drawn is not None or warm is not None:
            kw = {"workload": drawn or warm}
        res = capacity(load_model(run["model"]), get_gpu(run["gpu"]), job=job,
                       engine=run["engine"], engine_version=version, input=inp,
                       output=out, requests=n, seed=SEED,
                       replicas=run.get("replicas") or 1, prefix_hit=hit, **flags, **kw)
    except InputError as e:
        row.why_not = str(e)
        return row
    row.predicted = {"ttft_ms": _stat(res.ttft_s, run, "ttft_ms") * 1e3,
                     "itl_ms": _stat(res.itl_s, run, "itl_ms") * 1e3,
                     "output_tokens_per_s": res.throughput["output_tokens_per_s"]}
    row.ttft_pct_ms = {"p50": res.ttft_s.p50 * 1e3, "p99": res.ttft_s.p99 * 1e3}
    return row


def rows() -> list[Row]:
    runs = json.loads(RUNS.read_text())["runs"]
    return [predict(r) for r in runs]


def summary(rs: list[Row], key: str, group: str | None = None) -> dict:
    errs = [abs(e) for r in rs if (group is None or r.run["source_group"] == group)
            for e in [r.error(key)] if e is not None]
    if not errs:
        return {"n": 0, "median_abs_error": None, "worst_abs_error": None}
    return {"n": len(errs), "median_abs_error": statistics.median(errs),
            "worst_abs_error": max(errs)}


def all_at_once(run: dict, figures: dict) -> dict | None:
    """What an "INF" row's own means say about its workload (every request sent at t=0).

    From the mean TTFT, the mean ITL and the output tok/s of ``figures`` (the measured row's, or
    the prediction's) and the row's request count n and output length o: the makespan
    n * o / (output tok/s); a request's mean latency TTFT + (o - 1) * ITL; their ratio; and by
    Little's law the mean number of requests decoding at once, (output tok/s) * ITL. With
    fixed lengths and every request sent at once, each request ends close to the last (the
    last ones admitted wait for the prompts before theirs, then decode as long as every other),
    so the ratio is near 1; well under 1, some requests ended long after the mean one.
    None for a row that is not "INF" or lacks a figure."""
    if run["load"].get("rate_as_stated") != "INF":
        return None
    try:
        ttft_s = figures["ttft_ms"] / 1e3
        itl_s = figures["itl_ms"] / 1e3
        tok_s = figures["output_tokens_per_s"]
    except (KeyError, TypeError):
        return None
    if not tok_s:
        return None
    n, o = run["num_requests"], _output(run)
    makespan_s = n * o / tok_s
    latency_s = ttft_s + (o - 1) * itl_s
    return {"makespan_s": makespan_s, "latency_s": latency_s,
            "latency_over_makespan": latency_s / makespan_s, "decoding": tok_s * itl_s}


def _measured_means(run: dict) -> dict:
    return {k: m["value"] for k in ("ttft_ms", "itl_ms", "output_tokens_per_s")
            for m in [run["measured"].get(k)] if m is not None}


def _all_at_once_table(rs: list[Row]) -> list[str]:
    out = ["## All at once: what the INF rows' own means say", "",
           "For each \"INF\" row (every request sent at t=0), from its mean TTFT, mean ITL and "
           "output tok/s (`all_at_once`): the makespan (requests x output length / output "
           "tok/s), a request's mean latency (TTFT + (output - 1) x ITL), their ratio, and the "
           "mean number of requests decoding at once by Little's law (output tok/s x ITL). "
           "With fixed lengths sent at once every request ends near the last one: ratio near 1.",
           "", "| id | makespan s meas / pred | mean latency s meas / pred | latency / makespan "
           "meas / pred | decoding meas / pred |", "|---|---|---|---|---|"]
    for r in rs:
        m = all_at_once(r.run, _measured_means(r.run))
        p = all_at_once(r.run, r.predicted)
        if m is None or p is None:
            continue
        out.append(f"| {r.run['id']} | {m['makespan_s']:.1f} / {p['makespan_s']:.1f} | "
                   f"{m['latency_s']:.1f} / {p['latency_s']:.1f} | "
                   f"{m['latency_over_makespan']:.2f} / {p['latency_over_makespan']:.2f} | "
                   f"{m['decoding']:.0f} / {p['decoding']:.0f} |")
    return out + [""]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def render(rs: list[Row]) -> str:
    groups = sorted({r.run["source_group"] for r in rs})
    out = ["# `gpuplan capacity` against published serving measurements (issue 29)", "",
           f"Generated by `{COMMAND}` from `benchmarks/published/serving_runs.json` "
           f"({len(rs)} rows). Each row is simulated by `gpuplan.capacity` at the row's engine "
           "(TensorRT-LLM 0.14.0 runs gpuplan's TensorRT-LLM 0.14 row; an unstated version "
           "as the engine's newest row), layout, "
           "precision, fixed lengths and load: a stated QPS as Poisson arrivals (the sources do "
           "not state the process), a concurrency as a closed loop, \"INF\" as every request "
           f"at once; seed {SEED}, the source's request count (else 500, or 4 x the concurrency "
           "for a closed loop, at least 100). Predicted figures are the simulation's means "
           "where the source quotes means, its medians (p50) where it quotes medians (the "
           "SGLang bench_serving rows); lengths drawn per request run as their served means, "
           "or, where the row states the client's seeded draws, as the requests it drew. "
           "Error = predicted / measured - 1. Issue 29's bar: median "
           f"|error| within {BAR:.0%} for each figure.", "",
           "## Summary", "",
           "| figure | source | rows | median \\|error\\| | worst \\|error\\| | bar met |",
           "|---|---|---:|---:|---:|---|"]
    for key, label in FIGURES:
        for g in groups + [None]:
            s = summary(rs, key, g)
            if not s["n"]:
                continue
            met = "yes" if s["median_abs_error"] <= BAR else "no"
            out.append(f"| {label} | {g or '**all**'} | {s['n']} | "
                       f"{100 * s['median_abs_error']:.1f}% | {100 * s['worst_abs_error']:.1f}% | "
                       f"{met if g is None else ''} |")
    out += ["", "## Rows", "",
            "| id | load | TTFT ms pred / meas (err) | ITL ms pred / meas (err) | "
            "output tok/s pred / meas (err) |", "|---|---|---|---|---|"]
    for r in rs:
        load = r.run["load"]
        ld = (f"C={load['concurrency']}" if load.get("concurrency")
              else f"QPS {load['rate_as_stated']}")
        cells = []
        for key, _ in FIGURES:
            m = r.run["measured"].get(key)
            if m is None:
                cells.append("—")
                continue
            cells.append(f"{_num(r.predicted.get(key))} / {m['as_published']} "
                         f"({_pct(r.error(key))})")
        why = f" ({r.why_not})" if r.why_not else ""
        out.append(f"| {r.run['id']}{why} | {ld} | " + " | ".join(cells) + " |")
    out += [""] + _all_at_once_table(rs)
    out += ["## Reproduce one row", "",
            "Each row's command (the CLI spelling of the library call above):", ""]
    for r in rs:
        out.append(f"- `{r.run['id']}`: `{r.command}`")
    out += ["", fill_mechanisms(MECHANISMS, rs).strip(), ""]
    return "\n".join(out)


def _span(xs: list[float], fmt: str = "{:.0f}", sep: str = "-", unit: str = "") -> str:
    """'lo-hi' of ``xs``, each as ``fmt`` (the prose's ranges, read off the rows)."""
    return f"{fmt.format(min(xs))}{sep}{fmt.format(max(xs))}{unit}"


def _trtllm_figures(rs: list[Row]) -> dict[str, str]:
    """The figures "Reading the misses" quotes of the TensorRT-LLM online rows, from ``rs``."""
    trt = [r for r in rs if r.run["source_group"] == "tensorrt-llm-online"]
    fit = {r.run["id"] for r in trt if r.run["load"].get("rate_as_stated") == "2"}
    outside = [r for r in rs if r.run["id"] not in fit]
    inf = [r for r in trt if r.run["load"].get("rate_as_stated") == "INF"]
    varied = [r for r in inf if (r.run["input_len"], r.run["output_len"]) == (202, 214)]
    fixed = [r for r in inf if r not in varied]
    short = [r for r in fixed if _output(r.run) == 16]          # the prompt-bound 467/16 rows
    long_ = [r for r in fixed if _output(r.run) == 256]
    q16 = next(r for r in trt if r.run["id"].endswith("70b-h100-tp4-467-256-qps16"))
    inf_256 = next(r for r in long_ if r.run["id"].endswith("70b-h100-tp4-467-256-qpsinf"))
    pred_rate = inf_256.predicted["output_tokens_per_s"] / _output(inf_256.run)
    tok = "output_tokens_per_s"

    def means(r, measured):
        return all_at_once(r.run, _measured_means(r.run) if measured else r.predicted)

    return {
        "n_all": str(len(rs)), "n_outside_fit": str(len(outside)),
        "ttft_all": f"{100 * summary(rs, 'ttft_ms')['median_abs_error']:.1f}%",
        "ttft_outside_fit": f"{100 * summary(outside, 'ttft_ms')['median_abs_error']:.1f}%",
        "q16_itl": f"{q16.run['measured']['itl_ms']['value']:g} ms against "
                   f"{q16.predicted['itl_ms']:.1f}",
        "short_meas": " / ".join(f"{r.run['measured'][tok]['value'] / 16:.0f}" for r in short),
        "short_pred": " / ".join(f"{r.predicted[tok] / 16:.1f}" for r in short),
        "short_fast": _span([100 * r.error(tok) for r in short], unit="%"),
        "q16_util": f"{q16.run['load']['request_rate'] / pred_rate:.2f}",
        "q16_errs": f"{100 * q16.error('ttft_ms'):.0f}% TTFT and {100 * q16.error('itl_ms'):.0f}% ITL",
        "inf_tok_fixed": _span([100 * r.error(tok) for r in fixed], "{:+.0f}%", " to "),
        "inf_tok_varied": _span([100 * r.error(tok) for r in varied], "{:+.0f}%", " to "),
        "lat_fixed_meas": _span([means(r, True)["latency_over_makespan"] for r in fixed],
                                "{:.2f}"),
        "lat_fixed_pred": _span([means(r, False)["latency_over_makespan"] for r in fixed],
                                "{:.2f}"),
        "lat_varied_meas": _span([means(r, True)["latency_over_makespan"] for r in varied],
                                 "{:.2f}"),
    }


def _vllm_4090_figures(rs: list[Row]) -> dict[str, str]:
    """The figures quoted of the RTX 4090 vLLM rows (closed loop), from ``rs``."""
    g = "mushfiqrahman-vllm-4090"
    vr = [r for r in rs if r.run["source_group"] == g]
    high = [r for r in vr if r.error("ttft_ms") > 0]
    low = [r for r in vr if r.error("ttft_ms") <= 0]

    def conc(sub):
        return _span([r.run["load"]["concurrency"] for r in sub])

    return {
        "v4090_tok": _span([100 * abs(r.error("output_tokens_per_s")) for r in vr], "{:.1f}",
                           unit="%"),
        "v4090_ttft_high": f"at concurrency {conc(high)} ("
                           + _span([100 * r.error("ttft_ms") for r in high], "{:+.0f}%", " to ")
                           + ")",
        "v4090_low_conc": conc(low),
        "v4090_tok_median": f"{100 * summary(rs, 'output_tokens_per_s', g)['median_abs_error']:.1f}%",
    }


def _vllm19_figures(rs: list[Row]) -> dict[str, str]:
    """The medians quoted of the 19 vLLM rows on datacenter GPUs (issue 29's vLLM source)."""
    groups = ("kvcached-vllm-h100", "vllm-blog-fp8-kv", "dennislee22-vllm-a100")
    vr = [r for r in rs if r.run["source_group"] in groups]
    out = {}
    for name, key in (("ttft", "ttft_ms"), ("itl", "itl_ms"), ("tok", "output_tokens_per_s")):
        errs = [abs(e) for r in vr for e in [r.error(key)] if e is not None]
        out[f"vllm19_{name}"] = f"{100 * statistics.median(errs):.1f}%" if errs else "-"
    return out


def _a100_figures(rs: list[Row]) -> dict[str, str]:
    """The figures quoted of dennislee22's A100 sweep (issue 29's A100 step), from ``rs``."""
    g = "dennislee22-vllm-a100"
    med = [100 * (summary(rs, k, g)["median_abs_error"] or 0.0) for k, _ in FIGURES]
    n1 = [r for r in rs if r.run["source_group"] == g and r.run["num_requests"] == 1
          and r.run["server_flags"].get("gpu_memory_utilization") == 0.5]
    itl = (f"{n1[0].predicted['itl_ms']:.2f} ms" if n1 and n1[0].predicted else "-")
    return {"a100_medians": " / ".join(f"{m:.1f}" for m in med) + "%", "a100_n1_itl": itl}


def _nim_sglang_figures(rs: list[Row]) -> dict[str, str]:
    """The figures quoted of the NIM and the SGLang (DataCrunch H200) rows, from ``rs``."""
    nim = {r.run["load"]["concurrency"]: r for r in rs if r.run["source_group"] == "nvidia-nim"}
    g = "datacrunch-sglang-h200"
    sgl = [r for r in rs if r.run["source_group"] == g]
    worst = next(r for r in sgl if "405b" not in r.run["model"]
                 and r.run["id"].endswith("-rps4"))                  # 70B at 4 req/s
    rest = [abs(r.error("itl_ms")) for r in sgl if r is not worst]

    return {
        "nim_ramp": "; ".join(f"C={c}: {_num(nim[c].predicted['ttft_ms'])} ms, "
                              f"{100 * nim[c].error('ttft_ms'):+.0f}%" for c in (25, 50)),
        "nim_c1_itl": f"{nim[1].predicted['itl_ms']:.1f} ms ({_pct(nim[1].error('itl_ms'))})",
        "nim_c5_itl_err": _pct(nim[5].error("itl_ms")),
        "sgl_ttft_median": f"{100 * summary(rs, 'ttft_ms', g)['median_abs_error']:.1f}%",
        "sgl_itl_within": f"{len(rest)} of {len(sgl)} rows within {100 * max(rest):.0f}%",
        "sgl_itl_worst": f"{-100 * worst.error('itl_ms'):.0f}% low ({worst.predicted['itl_ms']:.1f} "
                         f"ms against {worst.run['measured']['itl_ms']['value']:.1f})",
    }


def fill_mechanisms(text: str, rs: list[Row]) -> str:
    """``text`` with each ``{name}`` of the figures computed from ``rs`` filled in (a figure
    the prose quotes of today's table is computed, never typed); other braces stay as they are."""
    figs = (_trtllm_figures(rs) | _vllm_4090_figures(rs) | _nim_sglang_figures(rs)
            | _vllm19_figures(rs) | _a100_figures(rs))
    return re.sub(r"\{(\w+)\}", lambda m: figs.get(m.group(1), m.group(0)), text)


MECHANISMS = """
## Reading the misses

Written after the rows above were first computed. One constant is fitted to them, and said
here: TensorRT-LLM's per-request time outside the steps (engines/profiles.py, ``ServingHost``).

- **TTFT, TensorRT-LLM table.** Before that cost was counted all 72 rows read low: at 2-8 QPS
  the measured TTFT exceeded the simulated one by 6-9 ms on the 8B (e.g. 202/214 on H100: 19 ms
  against 10.1) and 7-17 ms on the 70B at TP 4, no larger for 467-token prompts than for 202: a
  per-request cost that does not grow with the prompt, the client-timed path through Triton's
  tensorrtllm_backend (HTTP/gRPC streaming front end, tokenisation, the request entering the
  executor at an iteration boundary, the first token's return). No published figure for it was
  found, so it is fitted: 8.3 ms, the median gap over the 12 QPS-2 rows (gaps 6.2-16.9 ms), and
  added to every TensorRT-LLM request's first token. When it was fitted the TTFT median over the
  85 rows then in the file went 35.1% -> 18.3%, over the 73 outside the fit 36.1% -> 21.6%; today
  over all {n_all} rows it is {ttft_all}, over the {n_outside_fit} outside the fit {ttft_outside_fit}. What is left at low load is the
  70B's larger gap (up to 17 ms), which one constant per engine does not follow.
- **vLLM's per-step host work.** Each vLLM step carries its output processing (vllm issue
  #6913: 0.2 ms at batch 1, 3.4 ms at batch 32; under V1 in the API-server process, beside the
  steps) and, since issue 31, the EngineCore's own loop: ``schedule()`` 0.2 ms,
  ``_update_states`` 0.18 ms and ``_prepare_inputs`` 0.05 ms a step (vllm PR #42131,
  2026-05-09, B200) and ``update_from_output`` 1.13 us a sequence (PR #46112, 2026-06-18, 0.142
  / 0.287 ms at batch 128 / 256); nothing fitted. Without async scheduling (vLLM 0.8-0.13:
  capacity's 0.8 and 0.11 rows) it runs between the steps; from 0.14.0 async scheduling is on
  by default (its release notes, PR #27614; not under pipeline parallelism), so the 0.14 row
  runs it beside the step and forms each batch one step ahead, as SGLang's overlap scheduler
  (``run_ahead``). Before / after: the A100 sweep (0.10.1.1, sync) ITL 18.9% -> 16.3% median
  (N = 1: 10.41 -> 10.84 ms against 11.75), tok/s 13.3% -> 9.7%, TTFT 34.4% -> 34.2%; the
  kvcached 0.6B rows (0.19.0, async) ITL unmoved (below), TTFT 88.3% -> 87.4%; the wrong way:
  the vLLM blog's load rows (the newest row: 0.19 where the post names a version) TTFT
  269.9% -> 373.8% median (Llama BF16 +21.2% -> +64.4%, FP8 -17.8% -> +11.0%, gpt-oss
  +518.6/+539.0% -> +683.2/+709.0%; ITL and tok/s unmoved) and the 4090 rows (no version
  stated: the newest row) TTFT 50.0% -> 86.9% (C=16 +37.4% -> +117.9%, C=32 -28.2% -> +15.2%,
  C=48 -50.0% -> -25.6%), tok/s 6.3% -> 7.0%: at 8-48 clients a prompt arriving during step k
  now waits for step k + 2, and k + 1 is often a long prefill chunk (vLLM's
  ``step_with_batch_queue`` schedules batch k + 1 before it blocks on batch k's result; a
  request received meanwhile waits for the next ``schedule()``). Every other row reads as
  before.
- **ITL, TensorRT-LLM table.** At 2 QPS the simulated ITL is 0-1 ms under the measured on the
  8B and up to 4 ms on the 70B, consistent with a per-token streaming cost of the same path. From 16
  QPS the measured ITL rises faster than the simulated (70B H100 467/256 at 16 QPS: {q16_itl}),
  which this simulation, with prompts not chunked as TensorRT-LLM's default, does not explain.
- **TensorRT-LLM under load (QPS 8-32): the saturation rate, not the scheduler.** The table's
  own INF rows say how fast the served engine prefills: with every request admitted at once
  (KV room for all 500 under GUARANTEED_NO_EVICT, in the table as in gpuplan: the 467/256 and
  467/16 INF rows have the same mean TTFT, 9123 and 9126 ms on the 70B H100), the mean TTFT is
  half the time to prefill all 500 (500 / 28 req/s / 2 = 8.9 s against 9.1 measured). The
  467/16 INF rows, prompt-bound, serve {short_meas} req/s (70B H100, 8B H100, 70B H200,
  8B H200); gpuplan's steps serve {short_pred}: its compute-bound step is {short_fast}
  too fast on both models and both cards. At QPS 16 on the 467/256 rows the offered load
  equals the measured INF rate (16 req/s), so the served engine runs at utilisation ~1 where
  gpuplan's runs at ~{q16_util}, and queueing turns a {short_fast} step error into {q16_errs} (70B H100).
  Checked by hand (not committed): scaling only the prompt part of every step by 1.18 moves
  the 28 QPS-16/32 rows' median TTFT error 22.6% -> 13.0% and ITL 26.2% -> 21.5%. The cause
  to find is in the speed model's prefill (GEMM rate at 8k tokens, TP all-reduce), not in
  capacity/; the scheduler (0.14: no context chunking, max_num_tokens 8192, contexts and
  generations in one iteration, every generation waiting on the iteration's whole prefill)
  is as simulated. The ITL deficit at low load on the 8B rows is partly the table's rounding
  to whole milliseconds (6 may be 5.5).
- **vLLM on the RTX 4090: the served output is 100 tokens, not 128 (the rows run 100).** The
  source's own columns give it: Output Tok/s / Req/s = 210/2.09, 377/3.78, 644/6.44, 975/9.73, 1190/11.87 = 100.5,
  99.7, 100.0, 100.2, 100.3 tokens per request. Generation stopped at EOS before max_tokens
  (the benchmark did not ignore EOS; vLLM's `vllm bench serve` forces ignore_eos only for the
  random dataset in later versions, vllm/benchmarks/serve.py at 009e6d4). Varied output
  lengths are what desynchronise the closed-loop clients (median TTFT 53-55 ms at concurrency
  4-8, one prompt's prefill). Tried by hand with a constant per-token EOS hazard capped at 128
  (mean 100.3; an assumption, the distribution is not published): TTFT -40/-38/-56/-63/-67%
  (median 56%, from 49%) and output tok/s median 12.3% (from 9.5%): the lockstep goes, and
  what is left is a per-request cost of vLLM's OpenAI server that gpuplan does not count (at
  concurrency 4: 38 ms simulated against 63 measured) -- not adopted until that is sourced.
  What the rows state (``output_len_served``) is only the served mean, and they run it as a
  fixed length: TTFT is unchanged (49.0% median; the lockstep stays) and output tok/s moves
  the wrong way, 9.5% -> 12.5% median, because the 128-token rows had overstated each
  request's work and so hidden a decode step that is slow on this card: at concurrency 4 the
  measured 2.09 req/s is 1.91 s a request (63 ms TTFT + ~99 steps of ~18.7 ms), the simulated
  1.8 req/s 2.2 s (steps of ~21.5 ms; 14.5 GB of bf16 weights over the 4090's 1,008 GB/s is
  14.4 ms). Neither the vLLM version nor the OpenAI server's per-request cost is stated by the
  source, and no source measuring that cost was found.
- **Throughput.** Below saturation it is the arrival rate times the output length, so its small
  error is by construction. At "INF" gpuplan over-predicts {inf_tok_fixed} on the fixed-length
  467/256 and 467/16 rows (the prefill step being too fast, above) and {inf_tok_varied} on 202/214.
  Little's law on the measured 202/214 INF rows (output tok/s x ITL) gives 173-179 requests
  decoding at once against the simulation's 386-401, which reads like a batch limit; it is not
  one. (1) Nothing in the setup bounds it below the 500 requests: trtllm-build's max_batch_size
  is 2048 from 0.14.0 (release-notes.md @b47198a2; max_num_tokens 8192 since 0.11.0, max_seq_len
  from the model's config), and tensorrtllm_backend v0.14.0 passes neither to the executor
  (inflight_batcher_llm/src/model_instance_state.cc @9958c21 getExecutorConfigFromParams:
  maxBatchSize and maxNumTokens std::nullopt, the engine's own), its docs/model_config.md saying
  the runtime batch "can be larger than triton_max_batch_size", with batch_scheduler_policy
  guaranteed_no_evict, kv_cache_free_gpu_mem_fraction 0.9, enable_chunked_context false and
  max_tokens_in_paged_kv_cache unspecified ('infinite') by default -- gpuplan's 0.14 row as it
  is. (2) The same engines on the 467/256 INF rows hold 347-367 decoding (simulated 349-377), so
  a limit under ~350 would have shown there. (3) A KV-bound count (GUARANTEED_NO_EVICT reserving
  a larger max_tokens than the output) would scale with the pool, which is 2.0x (8B: 446k ->
  893k tokens) and 2.4x (70B TP 4: 521k -> 1.24M) larger on the H200; the measured counts are
  the same on both cards (174 / 175, 173 / 179). (4) The rows' own means (the "All at once"
  table): a request's mean latency over the makespan is {lat_fixed_meas} on every fixed-length INF row
  measured ({lat_fixed_pred} simulated), but {lat_varied_meas} on the four 202/214 rows, whose makespans are
  4-11 s longer than twice the mean TTFT (the last first token, were the prompts' first tokens
  spread evenly) plus one request's decode (213 x ITL): some requests ended long after the mean
  one. Fixed lengths sent at once cannot do that, and a batch limit does not either: requests
  then end evenly from one decode (4.0-10.7 s) to the makespan, a ratio of about
  (decode + makespan) / 2 / makespan = 0.67-0.68 on these rows, not 0.5. The 202/214 workload is most likely varied lengths whose
  means are 202 and 214 (the page states neither its dataset nor its client;
  tensorrtllm_backend's own benchmark_core_model.py draws lengths from a normal distribution
  or a dataset and does not report TTFT or ITL, so it is not the table's client as published).
  Nothing is fitted for it: the distribution is not stated.
- **NIM (Llama 3.3 70B fp8, TP 2): an FP8 KV cache.** With gpuplan's default KV cache (the
  weights' dtype would be bf16 for the cache) the pool is 252,768 tokens per GPU pair: 45
  requests of 5,500 tokens under GUARANTEED_NO_EVICT, throughput saturating at ~650 tok/s
  against 920 measured, and TTFT +58% to +607% from concurrency 25. The measured server holds
  about 86 sequences (920 tok/s x 93 ms). The page names the profile only "fp8 TP2"; TensorRT-LLM
  states for its FP8 engine builds "If you specify FP8 quantization, the KV cache will
  automatically be set to FP8 as well!" (perf-overview.md at 258c754, Engine Building), so the
  rows run ``--kv-dtype fp8`` (``kv_dtype_inferred``: NIM does not say it; the profile's build
  config, its max_batch_size, max_num_tokens and context chunking were not found). Nothing
  fitted: the pool doubles and the saturated rows (C=100-250) land within -4.6% to +21.4% on
  TTFT, +1.3% to +6.4% on ITL and -5.5% to -7.4% on throughput (NIM medians: TTFT 91.3% ->
  13.0%, ITL 24.0% -> 6.1%, output tok/s 26.3% -> 8.0%). ITL at concurrency 1-5 then read +17
  to +19% (22.0 against 18.6 ms at C=1): the FP8 decode step, whose 1-byte weights were read at
  gpt-fast's int8 weight-only share (0.524). TensorRT-LLM's PyTorch backend runs FP8 on Hopper
  as cuBLASLt's FP8 GEMM (no dequantization), which now reads at the FP8 tensor-core share
  (compute/efficiency.py gemv_bw_fp8_tensorcore, 0.625: the 16-bit share times vLLM PR #49363's
  H100 FP8/BF16 one-row ratio, CUTLASS's kernel's, assumed for cuBLASLt's): C=1 {nim_c1_itl},
  C=5 {nim_c5_itl_err}; NIM medians TTFT 13.1% -> 13.4% (C=150-250 2.2-2.3 points further under, the wrong
  way), ITL 5.3% -> 2.2%, output tok/s 7.4% -> 2.9%.
- **NIM at concurrency 25-50: the ramp.** With 5,000-token prompts and no context chunking
  one prompt fits an iteration (max_num_tokens 8192), so the simulated closed loop's first 25
  (50) clients, all sent at t=0, get their first tokens one prefill (~390 ms) apart: the mean
  over 4 x C requests carries that ramp ({nim_ramp}). Any
  burst of C such prompts must queue that way, chunked or not (the prefill work is the same),
  so the measured 689 ms (one prefill plus ~300 ms) is not the mean of such a run. Issue 29's
  search for the measurement method (a negative result; nothing modelled, nothing fitted):
  (1) NIM's guide, "Using AIPerf to Benchmark" (docs.nvidia.com/nim/benchmarking/llm/latest/
  quickstart.html, read in a copy fetched 2026-08-30; the 1.0.0 page the rows cite links to its
  "step-by-step" version, whose sweep was not found in the offline index), sweeps
  concurrency 1 2 5 10 50 100 250 with ``aiperf profile --concurrency C --request-count 3C``
  and no ``--warmup-request-count``: its warm-up is one separate run before the sweep, and it
  reads ``time_to_first_token.avg`` over every request. Run so (3 x C, all counted) the
  simulation reads further off: C=5 640 ms (+17%), C=25 1,908 (+177%), C=50 3,506 (+320%).
  (2) AIPerf's own warm-up would not remove the burst either: its warm-up metrics are
  discarded, but by default it "waits indefinitely for all warmup responses before starting
  profiling" (docs.nvidia.com/aiperf, tutorials, warmup-phase-configuration), so the profiling
  phase again starts C requests at once. (3) NVIDIA's blog "LLM Inference Benchmarking Guide:
  NVIDIA GenAI-Perf and NIM" (developer.nvidia.com/blog/llm-performance-benchmarking-measuring-
  nvidia-nim-performance-with-genai-perf/, copy fetched 2026-08-31) says "All the performance
  figures on the NIM Performance page were collected with the NVIDIA GenAI-Perf tool" and
  sweeps with ``--measurement-interval 30000`` (100000 suggested for a 70B model at 250), so
  which tool made the 1.8.0 rows is itself unsettled. GenAI-Perf ran perf_analyzer's time
  windows, which stop at three stable windows (triton-inference-server/perf_analyzer
  src/inference_profiler.cc at 069e403, as triton-inference-server/client's at 0094d30:
  stability_window 3, MergePerfStatusReports over the last three), but every window's requests
  go to the profile export (Summarize -> CollectData, per window), and GenAI-Perf's TTFT is
  the mean over all of an experiment's exported requests (triton-inference-server/client
  genai_perf/profile_data_parser/profile_data_parser.py at 2be678d): the start-up is diluted
  by the run's length, not excluded. So no source states a warm-up or a window that excludes
  the burst, and none is added. A warm-up alone would not match either: dropping the first C
  requests of the simulated run leaves 387-396 ms at C=5-50 (-29% to -53%), a bare prefill,
  because clients with fixed lengths settle one prefill apart and never wait again. The
  measured TTFT sits above the C=1 one (406.77 ms) by 140, 282 and 428 ms at C=5, 25, 50 -- a
  wait that grows with load, as in a queue of arrivals that do not keep that stagger (a rough
  check, not a model: Poisson arrivals at the measured request rate, tok/s / 500, to a
  392 ms server, M/D/1, wait 41, 187 and 346 ms). What desynchronises the measured clients is
  not stated (the open question of the vLLM 4090 rows below); the rows keep gpuplan's count
  (4 x C, at least 100) and every request.
- **vLLM on an RTX 4090 (Mistral 7B, 256/128, closed loop).** Throughput is within {v4090_tok}. TTFT
  is high {v4090_ttft_high} and low at {v4090_low_conc}: in the simulated closed loop
  with fixed lengths the clients stay in lockstep, so each prompt waits for its whole cohort's
  prefill in one step, while the measured median at concurrency 4-8 (53-55 ms) is about one
  prompt's prefill -- the measured clients drift apart (the source does not say why). At {v4090_low_conc}
  the measured queue is longer than the simulated one; not explained here. Not the engine's
  output processing either: the page states no vLLM version, and every version gpuplan models
  (0.8, 0.11, 0.14) is the V1 engine, which detokenises and streams in the API-server process beside
  the EngineCore loop (engines/profiles.py ``_VLLM_HOST``, overlapped); counting V0's in-loop
  cost instead (issue #6913's line after each step) moves these TTFTs by under 1% (C=4 118 ms
  either way) and only the throughput (median 6.7% overlapped, 12.4% in-loop, when checked;
  {v4090_tok_median} overlapped today).
  The rows run the newest row, 0.14 (async scheduling: the batch formed a step ahead), which
  lifts C=16-48 (above, "vLLM's per-step host work"); the 0.11 row's loop without it read
  C=4-48 TTFT +86.9/+195.3/+37.4/-28.2/-50.0%.
- **SGLang on H200 (DataCrunch: Llama 3.3 70B TP 4, Llama 3.1 405B TP 8; random 1024/1024 at
  random_range_ratio 0, 1-4 req/s).** Added out of sample (issue 31); nothing fitted. The source
  quotes medians only, so the simulation's p50 is compared (``_stat``): SGLang's scheduler runs a
  prefill batch alone, the decodes waiting, so every stream has a few long gaps that lift the
  simulated mean ITL 4-30% above its median (405B at 2 req/s: mean 55.4 ms, p50 42.6, measured
  median 43.3). ITL at the median: {sgl_itl_within}; 70B at 4 req/s (about 52 in flight)
  reads {sgl_itl_worst}, not explained (the overlap scheduler below moves no ITL).
  TTFT read 35-47% low at every rate, and not by a constant: the measured median is 2.2x the
  speed model's lone 509-token prefill on the 70B (85.8 ms against P(509) = 39.6) and 1.8x on the
  405B (218.8 against 120.9), gaps of 46 and 98 ms. Ruled out: the statistic (the simulated p50 is
  below its mean), the length mix (prompts uniform in 1..1024: prefill time is about linear in
  the tokens, so the median prompt's prefill is the mean's) and queueing (at 1 req/s the
  simulated queue is a few ms on the 70B). Modelled since, from the code: SGLang's overlap
  scheduler (on by default; sglang scheduler.py event_loop_overlap, lmsys.org/blog/2024-12-04-
  sglang-v0-4 "runs one batch ahead") forms and launches batch k+1 before it resolves batch k, so
  a batch is formed while the one before it still runs and a request arriving mid-step joins the
  batch after next (capacity/_engines.py ``run_ahead``): about one decode step more per first
  token. TTFT then read 17-32% low (70B -29.6 / -21.7 / -32.0% at 1 / 2 / 4 req/s, 405B -16.5 /
  -18.4%; median 37.7% -> 21.7%, at the served means; today {sgl_ttft_median}, next point); nothing else moved. Also read in that code and ruled out as a
  further delay: the first token is not held for the next step (it is streamed as soon as batch
  k resolves, right after k+1 is launched: tp_worker_overlap_thread.py resolve_batch_result waits
  on k's copy and k+1's launch only); the detokenizer and the HTTP stream run in their own
  processes (detokenizer_manager.py, tokenizer_manager.py), off the loop. The profile's
  ``ServingHost`` is overlapped with no figure counted: the loop's own work (rank 0's ZMQ poll
  and broadcast_pyobj of new requests over the TP CPU group each iteration, PrefillAdder, the
  per-request output processing) has no published time, and under the overlap it costs a step
  only where it outlasts the GPU's (the blog's Nsight profile: no GPU idle over five decode
  batches). Still unexplained (at the served means; at the drawn requests, next point): 19-34 ms
  on the 70B, 36-45 ms on the 405B, growing with the model
  as a too-fast prefill would (the TensorRT-LLM table above reads its compute-bound steps {short_fast}
  fast), not as a per-request constant. SGLang runs its prefill (extend) batches outside the CUDA
  graphs it captures for decode while gpuplan times every step of an engine under one runtime,
  yet at 509 tokens a TP shard's kernels take longer than their launches, so eager launches
  would hide behind them; --enable-torch-compile (the rows' launch flag) changes decode graphs
  only.
- **SGLang: the requests the client drew, not their means.** sglang.bench_serving seeds numpy
  with its --seed (default 1; the rows' commands pass none) and draws every prompt length, then
  every output length, then one Poisson gap per request from that one generator
  (python/sglang/bench_serving.py: run_benchmark, sample_random_requests, get_request). Redrawn
  here they sum to each line's own totals exactly (152,612 / 160,347 tokens at 1 req/s; 308,748
  / 308,712 at 2; 615,860 / 607,936 at 4), and the simulated runs end within 0.1-1.1% of the
  lines' durations (297.7 against 298.4 s at 1 req/s on the 70B, 338.0 against 338.8 on the
  405B at 2), so the rows run those requests (``drawn``, :func:`bench_serving_workload`) rather
  than the served means at gpuplan's seed-0 arrivals. The random_range_ratio the lines state,
  0.0, makes the prompts uniform in [1, 1024] (``max(int(1024 * 0.0), 1)``) and the outputs in
  [0, 1024]: the median prompt is the mean one (507.5 against 508.7 at 1 req/s), and a prefill
  about affine in its tokens puts the median TTFT at the median prompt's, so the served mean was
  a fair stand-in for the TTFT; what the mix changes is the load -- which requests overlap and how
  long each decodes. Output tok/s goes 3.5% -> 0.2% median (every row within 1.1%); TTFT 21.7%
  -> 23.6% (70B -23.6 / -24.0 / -32.7% at 1 / 2 / 4 req/s, 405B -13.6 / -15.8%: three rows
  toward the measured, two 0.7-2.3 points away); ITL 1.6% either way (70B at 4 req/s -22.2%).
  So neither the lengths nor the arrivals explain the TTFT deficit: 20 ms on the 70B at 1-2
  req/s (65.5 against 85.7), 35 ms at 4, 30-39 ms on the 405B. Read in bench_serving and ruled
  out as a measured delay the simulation lacks: TTFT is taken at the first streamed chunk whose
  cumulative ``text`` is non-empty (async_request_sglang_generate), so it is one token's step
  later only where the first token decodes to no text (a special token the detokenizer skips,
  or a partial UTF-8 byte it holds back: detokenizer_manager.py's incremental decode); the
  lines keep no generated text (no --output-details), so how often that happened is not known,
  and nothing is added for it. The one-step lag itself is SGLang's own account: turning the
  overlap scheduler on by default (sgl-project/sglang PR #2067, 2024-11-18) raised the bound on
  median TTFT in its test_bench_serving.py test_online_latency_default from 80 to 86 ms,
  "because we delayed the processing of the first batch in favor of launching the kernels for
  the next batch first": the delay ``run_ahead`` already adds, not a further one. Nor a run of
  decode steps between looks at the queue (SGLang v0.2's tp_worker.py forward_step ran
  global_config.num_continue_decode_steps, 10, decode batches in a row): that would add about
  4.5 decode steps to a median first token, 61 ms on the 70B at 1 req/s, three times the gap. The prefill is not convex over the drawn range either:
  P(128) 16.7, P(509) 39.6, P(1024) 70.9 ms on the 70B (the chord through the ends gives 39.7 at
  509). What is left, 20.2 ms on the 70B and 29.7 ms on the 405B at 1 req/s, scales like the
  layer count (80 / 126 = 0.63; 20.2 / 29.7 = 0.68), not like the prefill (39.6 / 120.9 = 0.33)
  nor a per-request constant (1.0): about 0.24 ms a layer. SGLang runs its extend (prefill)
  batches eagerly -- in the v0.3-v0.4 model_runner.py only forward_decode replays a captured
  graph (when cuda_graph_runner.can_run), forward_extend calls the model's forward as is -- while
  gpuplan times every SGLang step under CUDA graphs
  (1,283 kernels for the 70B prefill at 5 us a launch). An eager launch per layer (16 kernels)
  should hide behind the GPU's 0.49 ms (70B) and 0.96 ms (405B) a layer, unless the prefill
  cannot start launching before the step ahead of it ends; no per-kernel host time for SGLang's
  fused extend path was found, and gpuplan's own eager runtime (transformers' unfused code,
  3,050 kernels at 32 us) would put the 70B's P(509) at 107.7 ms, above the measured TTFT, so it
  is no stand-in. Nothing is counted. The ITL at 4 req/s is the other open end: by Little's law
  (rate x mean E2E latency) about 8, 17 and 51 requests are in flight at 1, 2 and 4 req/s on the
  70B, and the measured median ITL grows 0.134 ms per request (13.64 -> 19.42 ms) where the
  simulated step grows 0.035 (13.6 -> 15.1); the 405B, at about 24 and 60 in flight, grows 0.125
  measured and 0.092 simulated and stays within 2%. A per-request host cost in the loop that
  outlasts the 70B's ~15 ms GPU step beyond ~40 requests, yet stays under the 405B's ~43 ms,
  would read so; the overlap hides host work only up to a step, and v0.4's per-request time has
  no published figure. Not torch.compile's bound (torch_compile_max_bs 32): the 405B's
  batches at 2 req/s are past it too and read -1.6%. The DataCrunch offline lines (every request
  at once; not rows here) point the same way: the same seed-1 draws reproduce their token
  totals exactly, and the simulation serves 6,352 output tok/s against the measured 4,521 at
  3,000 x 1024/1024, 4,774 against 3,492 at 4,000 x 1024/512 and 9,454 against 6,648 at 6,000 x
  256/512 -- the served engine's large-batch steps are about 1.4x the simulated ones.
- **vLLM on datacenter GPUs (issue 29's vLLM source; 19 rows, transcribed and committed before
  any prediction was read; nothing fitted for them; one model change since, gpt-oss's fused
  attention under vLLM, (1)).** Medians over the 19 today: TTFT {vllm19_ttft}, ITL {vllm19_itl},
  output tok/s {vllm19_tok} (25.1%, 16.7%, 12.6% before the A100 sweep ran the prompts cached
  before each run, preempted requests kept their cache and short chunks' attention was timed by
  its query-key pairs, (3); 23.4%, 19.0%, 13.8% after the A100 sweep ran its logged prefix
  hits, before vLLM 0.14's async scheduling; 32.9%, 17.7%, 13.3% before vLLM's FP8 attention
  prefilled at the 16-bit rate; 36.0%, 22.1%, 13.6% with gpt-oss eager). What each group says:
  (1) *gpt-oss-20b on H100 (vLLM blog, FP8-KV post, Table 5): attention now fused.* As first
  read, gpuplan planned every gpt-oss job with materialized scores whatever the engine
  (models/_types.py ``EAGER_ONLY``: transformers' GptOssPreTrainedModel has ``_supports_sdpa =
  False``): TTFT +519%/+539%, ITL +138%/+70%, tok/s -66%/-58%, a lone 8192-token chunk 956 ms.
  vLLM runs the sinks and the 128-token window in its own kernels (vllm gpt_oss.py @0025d69b
  hands ``sinks`` and ``per_layer_sliding_window`` to its Attention; FlashAttention 3's
  ``s_aux`` on Hopper, the Triton backend elsewhere: flash_attn.py @0084b783, platforms/cuda.py
  @002db495), so ``attention_for`` now takes the engine (``FUSED_ATTENTION``: vLLM, SGLang,
  TensorRT-LLM, torchtitan, Megatron with TE >= 2.8; transformers' model code stays eager) and
  the sinks are one more softmax element a row inside the kernel (flops.py
  ``SINKS_IN_KERNEL``). The chunk reads 106 ms; TTFT -9.2%/-32.9%, ITL -6.7%/-13.7%, tok/s
  +8.3%/+20.3% (kvbf16/kvfp8). Still open: the FP8-KV row reads faster than its BF16 twin
  (TTFT 303 against 426 ms) where the measured two are within 4% (452 against 469 ms); the
  chunk's FP8 attention (FlashAttention-3 FP8, selected by the fp8 KV cache) saves 14% of it
  (91 against 106 ms), and the rest of the gap is the queue's, not examined here. The chunk
  attention's ``A(n, p) = Aself(n) (1 + 2p/n)`` (capacity/_cost.py) scales the windowed layers'
  share too, though they see 128 keys whatever p is: at n = 8192 their share of Aself is under
  6% (2 of 64 key blocks a query block against 32.5 on average), so the overstatement is small.
  (2) *Qwen3-0.6B on H100 (kvcached bench JSONs, vLLM 0.19.0).* TTFT -95% (1.9 against 39.1 ms at
  16 req/s) and ITL -65% (0.85 against 2.40 ms); all at once TTFT -82% and ITL +720%, tok/s -24%,
  and the measured run holds 71 decoding at once by Little's law against the simulation's 444.
  A 0.6B model's GPU step is under a millisecond, so the server's CPU work sets the pace: the
  measured all-at-once run prefills 256k prompt tokens in about 6 s (mean TTFT 3.0 s, 43k tok/s;
  the simulated GPU takes 0.55 s mean TTFT), so what binds is the API server's intake (tokenizing,
  the request's path to the EngineCore) and the engine's per-step scheduling. The 37 ms gap at
  16 req/s matches the per-request cost the 4090 rows left open (25 ms there); no source
  measures it, so nothing is added. *Issue 31, a negative result for these rows:* the
  EngineCore's published per-step work (0.43 ms + 1.13 us a sequence, "vLLM's per-step host
  work" above) is now counted, and it does not produce the 2.4 ms. At 16 req/s (about 5.5
  decoding) it is 0.44 ms a step, under the simulated 0.85 ms GPU step, and vLLM 0.19 runs it
  beside the step (async scheduling, default from 0.14.0): ITL stays 0.847 ms. Counted between
  the steps, as without async scheduling, it would read 1.31 ms (checked by hand, not
  committed), still -45%. The API server's output processing (issue #6913's line, 0.2 ms + 0.10
  ms a sequence: 0.67 ms at 5.5) also fits under the step, and runs in another process. The one
  V1 figure of a tiny model's step found is vllm PR #17866 (2025-05-08, Llama-3.2-1B, 0.92 req/s,
  500 in / 50 out: mean TPOT 2.73 ms at about one request in flight, before async scheduling),
  the same size as these rows' 2.4 ms; it names no GPU, so it gives no host time to subtract.
  TTFT moved 1.94 -> 2.60 ms (the batch formed a step ahead), still -93%; no published figure
  of V1's per-request path (the OpenAI server's tokenization, the ZMQ hop to the EngineCore,
  detokenization and the SSE stream) was found, so ``request_s`` stays 0. Searched (2026-12):
  the V1 blog (2025-01-27: "as low as ~5ms" of GPU time for Llama-8B on H100, no CPU figure),
  PRs #19970 / #23569 / #26866 / #27614 (async scheduling: throughput ratios only, e.g. Qwen3-1.7B
  103 -> 133 req/s in #26866, no GPU or per-step time), issue #23446 (persistent batch RFC, no
  figure). The kvcached repository's nsys profile (benchmarks/bench_layout) is of a GB10 and of
  kvcached's allocator, not of these rows' server.
  (3) *Qwen2-7B on A100 80GB (dennislee22, vLLM 0.10.1.1, all N sent at once).* ITL reads 10-31%
  low at every N (N = 1: 10.4 against 11.75 ms) and more so where the pool binds (0.25
  utilization, 93,872 tokens: -19% to -31%); tok/s +3% to +35%. Ruled out from the source
  (every file of dennislee22/vLLM-benchmarking @b474d1e and its history, read 2026-12-07; the
  rows' notes): the card is named only "A100 80GB" (no nvidia-smi, power limit, clocks, MIG,
  driver or node spec), and on the PCIe card's 1,935 GB/s the ITLs would still read 7-28% low
  (10.95 ms at N = 1); the server flags are the defaults but for max_model_len and the
  utilization (chunked prefill at 2,048 tokens, prefix caching, CUDA graphs, FlashAttention, 256
  running as the N = 500 log shows); the generation config's sampling defaults are overridden by
  the client's temperature 0 and repetition_penalty 1.0 (greedy, no penalty); Qwen2-7B-Instruct
  has qwen2.5-7b's shapes. Not explained. TTFT: the README's server log lines show three server
  processes per sweep, and benchmark_serving.py's seed-0 random prompts are the same prompt i in
  every run, so a run after a larger one on the same server finds every prompt cached; its
  logged cumulative hit rates match 1,008 of each 1,024-token prompt (8.9% = 1,008 / (11 x
  1,024) on a fresh server's N = 10 run, the client's test request hitting once). N = 1, 20 and
  30 at 0.5 (after N = 50 on that server) run that whole-prompt hit (serving_runs.json
  prefix_cache): TTFT 12 / 63 / 95 against 36 / 195 / 242 ms, the rest the API server's path,
  which gpuplan does not time for vLLM; a cold 1,024-token prefill of 7.6B parameters needs
  at least 50 ms at the A100's 312 TFLOP/s, so the measured 36 ms is itself a hit. Their ITLs
  move the wrong way (-15.6/-14.7% -> -19.0/-19.8%: fewer prefill chunks share the decode
  steps). N = 75 (10 of 75 cached), 200 (100 of 200) and 500 at 0.5 and the 0.25 sweep (a pool
  too small to keep earlier runs' prompts; preemption re-prefills count as hits) hit a share
  that is not one fraction of every prompt, so they ran none; TTFT median 34.4% over the 13.
  *Issue 29, the vLLM rows taken one group at a time (three changes, nothing fitted):* (a) the
  rows now run the prompts their server held when they began (``prefix_cache.cached_prompts``,
  :func:`warm_cache_workload`): prompts 0-9 at N = 75, 0-99 at N = 200 and 0-199 at N = 500
  (0.5; the runs before on that server, whose tokens the 464,848-token pool holds whole), and
  prompt 0 everywhere else (benchmark_serving.py's test request sends input_requests[0] just
  before each run). N = 200's own figures show it: median TTFT 1,179 ms against a mean of
  3,159, the cached half first. (b) vLLM V1 keeps a preempted request's blocks in the prefix
  cache (capacity/_engines.py ``preempt_keeps_cache``; kv_cache_manager.py ``free``: "the tail
  blocks are evicted first"), so a re-prefill recomputes only its evicted tail: on the 0.25
  pool's N = 500 run 122,752 of 1,072,792 prefilled tokens now hit (11.4%; the log's 43.3% is not
  comparable: vLLM counts a query each time a blocked waiting request is retried). (c) A chunk's
  attention after a cached prefix is that of the lone prompt with as many query-key pairs
  (capacity/_cost.py ``_attn_s``): the 16-token tail of a 1,008-token hit read 1.77 ms, 127
  times a 16-token prompt's kernel floor, now 0.11 ms. TTFT before -> after: N = 1 / 20 / 30
  -65.2/-67.6/-60.3% -> -69.8/-85.8/-82.4% (12.6 / 63.3 / 95.9 -> 10.9 / 27.7 / 42.5 ms
  against 36 / 195 / 242: the 20 chunks' attention had been 35 of the 63 ms), N = 10 / 75 /
  200 / 500 at 0.5 -11.4/-3.1/+114.8/-0.5% -> -24.5/-25.6/-38.9/-27.6%, the 0.25 sweep
  +253.1/+38.8/+2.2/-5.5% -> +247.3/+37.4/+1.0/-7.0%; the group's median 34.2% -> 36.5%, ITL
  16.7% -> 19.6%, tok/s 12.6% -> 18.3%. The rows that read well before (N = 75 and 500 at 0.5)
  did so because their cold prefills made up for a step too fast: with the hits the log shows,
  the 0.5 sweep reads TTFT -18% to -39% wherever prompts are prefilled cold, as its ITL (-8% to
  -24%) and tok/s (+9% to +32%) do. *Issue 29, the A100 step (a negative result; nothing changed,
  nothing fitted):* N = 10's cold prefills do not read as a step ~1.3x too fast. Simulated, its
  10 first tokens come in pairs at the end of five 2,048-token steps (126.7, 253.4, 380.2, 507.1,
  577.6 ms: mean 369, median 380, p99 578); measured (README @b474d1e, Test 5) mean 488.5, median
  512.0, p99 724.0. The stretch from the median to the p99 (the last two steps) is 212 ms against
  197 simulated, 1.07x, where a uniformly slower step would give 1.35 x 197 = 266; the ~130 ms is
  before the third step ends, the size of the delay the full-hit rows show with no prefill at all
  (measured - simulated mean TTFT: +25 ms at N = 1, +168 at N = 20, +199 at N = 30, +120 at N =
  10), so it is read as that delay, below. The decode step is 7-9% slow, not 30%: at N = 1 the
  measured mean / median ITL 11.75 / 11.64 ms against 10.84 simulated at this writing
  ({a100_n1_itl} today; 10.39 ms on the device, 7.6B bf16 weights at the GEMV share of gpt-fast's
  A100 SXM, 0.685 of 2,039 GB/s, + the EngineCore's 0.43 ms between the steps, no async
  scheduling in 0.10.1.1). An independent batch-1 figure agrees with the measured one: Qwen's
  speed benchmark (QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst @010c37c, "7B
  (vLLM)": Qwen2.5-7B-Instruct, BF16, input length 1, 2,048 tokens generated, vLLM 0.6.3, "NVIDIA
  A100 80GB", batch 1, enforce_eager False) 84.28 tok/s = 11.87 ms a token, against 10.39 ms of
  simulated device time at a 1,024-token context (96 tok/s) and 10.82 ms with V1's 0.43 ms
  between the steps (V0's loop, which 0.6.3 ran, has no figure here). The pure-decode rows' ITL
  gap then grows with the batch (N = 1 / 20 / 30: +0.9 / +2.2 / +2.5 ms on means 11.75 / 14.12 /
  14.93), the simulated step's slope (0.055 ms a sequence, its KV reads) under the measured one
  (0.125 ms from 1 to 20, 0.081 from 20 to 30). The EngineCore figures gpuplan counts
  (engines/profiles.py _VLLM_HOST: PR #42131's 0.43 ms a step, PR #46112's 1.13 us a sequence)
  are 2026 code's, on other hosts; the 0.03-0.07 ms a sequence left between the slopes would be
  20-60 times the latter, and no figure of 0.10's per-sequence loop on this pod's CPU (not
  stated) was found (searched 2026-12: vllm issues #26114, update_from_output on the critical
  path, no figure; #18760, CPU overhead growing with the batch, a profile image only). Checked
  against what 0.10.1.1 ran (its startup log, log/vllm-7B-1gpuA10080GB-0.5GRAM.log): the card is
  named "NVIDIA A100 80GB" only, no nvidia-smi, clocks, power or form factor anywhere in the
  repository, so SXM is kept (inferred) and both are read: on the catalog's A100-PCIe-80GB (300
  W, 1,935 GB/s; its datasheet peaks at its own TDP, the Perseus power curve gpuplan holds for it
  reading only below 300 W) the group read TTFT / ITL / tok/s medians 36.2 / 15.9 / 15.3% at this
  writing against SXM's 36.5 / 19.6 / 18.3% (today's SXM table: {a100_medians}; N = 1 ITL 11.4
  ms, -3.1%; N = 10 TTFT 370 ms: the prefill barely moves, compute-bound at the same peak).
  "Using Flash Attention backend on V1 engine": FlashAttention-2's sm80 kernels (vllm-flash-attn;
  FA3 needs sm90), timed at FA2's A100 share (``attn_fwd_ampere_d128``). "cudagraph_mode":1,
  capture sizes 1-512, splitting_ops unified_attention: piecewise graphs, the 28 attention calls
  issued eagerly between 29 replayed pieces -- host issue that runs ahead of a 10.4 ms device
  step (even at 0.1 ms a layer, 2.8 ms), so hidden; the 2,048-token chunked steps are above 512
  and run the compiled model uncaptured, GPU-bound at ~128 ms. "Using FlashInfer for top-p &
  top-k sampling" is loaded, but the client's temperature 0 makes every request greedy (vllm
  sampling_params.py: temperature < _SAMPLING_EPS sets top_p 1, top_k off), so V1's Sampler casts
  the logits to fp32 and takes the argmax: b x 152,064 x ~10 bytes, 1.5 MB at b = 1 and 46 MB at
  b = 30 (0.03 ms), no sort. So the step's kernels, graphs and sampler leave 7-9% at batch 1 and
  a steeper slope in b unexplained; no source times vLLM 0.10's batch-1 decode GEMVs on sm80
  apart from the end-to-end figures above, and none is fitted. And the full-hit rows'
  TTFT is a delay common to every request (N = 20: median 200, p99 239 ms; N = 30: 240 and
  274), ~8-10 ms a request, which a serial tokenizer does not give: vllm PR #19334 (2025-06-08,
  RTX 3090, Qwen1.5-1.8B) times 100 concurrent 10,000-token completions of max_tokens 1 at
  1.338 s before the change (10 runs), at most 13.4 ms of serial server work a request, so
  at most ~1.4 ms for a 1,024-token prompt. Not identified; ``request_s`` stays 0.
  (4) *Llama-3.1-8B on H100 (vLLM blog, Table 4, concurrency 8, ~20k in).* BF16 KV: TTFT +21%, ITL
  -4%, tok/s +2%; FP8 KV: TTFT +23%, ITL -17%, tok/s +14%. The FP8 prefill attention runs vLLM's
  two-level FA3 (flash-attention#104) at the 16-bit kernel's rate (the post's own concurrency-1
  sweep: "similar TTFT"; efficiency ``attn_fp8_two_level_vs_16bit_d128``), where FA3's FP8 share
  of the FP8 peak had made it 3.5x faster and TTFT -18%; simulated FP8/BF16 TTFT is now 0.99
  against 0.97 measured. ITL still gains more than measured (14.5 -> 10.7 ms simulated, 15.18 ->
  12.93 measured). Not from the kernel's slope: the post's concurrency-1 fit (ITL slope 4.37e-05
  -> 2.37e-05 ms per cached token, intercept 6.44 -> 6.58 ms) at these rows' ~8 x 21k cached
  tokens reads 13.8 -> 10.6 ms, the simulated gain. Its slope ratio, 0.54 rather than the bytes'
  0.50 (0.54 on B200 with FlashInfer too), would put the FP8 decode read at ~0.93 of the 16-bit
  kernel's bandwidth share, ~0.3 ms here: not modelled yet.
  Since vLLM 0.14's batch is formed a step ahead (issue 31, "vLLM's per-step host work"), a
  prompt arriving mid-step misses the next 8192-token chunk: the rows' TTFT as the table shows.
  Since a chunk's attention after a cached prefix is timed as the lone prompt with as many
  query-key pairs (issue 29, (3) above), a later chunk reads the speed model's attention at that
  longer prompt, a few percent more efficient (Llama, 3,630 tokens after 16,370: 51.7 -> 48.2
  ms): TTFT +23.2/+25.1/+7.4/+10.9% -> +22.2/+24.0/+5.1/+8.6%, tok/s up 0.1-0.3 points.
  (5) *The post's concurrency-1 sweep as a check of one request's chunked prefill (Llama-3.1-8B,
  H100, v0.19.1, Figure 2; not a row, nothing fitted to it).* The post states no TTFT
  coefficients for Llama, so its BF16 medians were read off Figure 2 by pixel position
  (fig2_llama_8b.png at vllm-project.github.io@c3a01c4; gridlines 2,000 ms / 172.6 px, markers
  18 px, so +-15 ms where a marker is whole, more where the FP8 square covers it) against
  ``gpuplan capacity llama-3.1-8b --gpu H100-SXM-80GB --engine vllm --engine-version 0.19
  --concurrency 1 --requests 20 --input L --output 2`` (chunks of 8192, TTFT in ms):
  L 32,768: 1,270 measured, 1,511 before (+19%), 1,057 after (-17%); 49,152: 2,376, 2,905
  (+22%), 1,884 (-21%); 65,536: 3,569, 4,725 (+32%), 2,909 (-18%); 81,920: 5,075, 6,971 (+37%),
  4,133 (-19%); 98,304: 6,756, 9,642 (+43%), 5,556 (-18%); 114,688: 8,749, 12,739 (+46%), 7,177
  (-18%); 130,944: 10,116, 16,234 (+60%), 8,983 (-11%). The points at 16k and below read
  60-180 ms, under the dense peak's floor for the linear layers alone (2 x 6.98e9 x 16,384 FLOPs
  at 989.4 TFLOP/s: 231 ms), so they are not cold prefills (prefix hits, not examined) and are
  left out. Before, the error grew with L: the 16-bit attention ran at FlashAttention-2's 0.35
  of the peak on every Hopper engine (efficiency ``attn_fwd_hopper_fa2``), an 8192-token chunk's
  attention 53 ms. vLLM runs FlashAttention 3 there (vllm fa_utils.py ``get_flash_attn_version``
  @00bd1493: "Hopper (SM90): prefer FA3"; the post: "using FlashAttention-3 (via the vLLM
  fork)"), now at the FA3 paper's 0.75 at head dim 128 (``attn_fwd_hopper_fa3``,
  engines/profiles.py ``ATTENTION_16BIT``; the fork's own BF16 737 / 696 TFLOP/s at head dim
  128, 2 x 8192 / 1 x 16384, flash-attention#122) and its Figure 5's 0.50 at head dim 64
  (``attn_fwd_hopper_fa3_d64``, 497 TFLOP/s; gpt-oss): 24.5 ms a Llama chunk. A least-squares TTFT = a L^2 + b L over the seven
  points (done by hand, not committed) gives a = 3.63e-07 ms/token^2, i.e. the causal attention's
  2 x 4096 x 32 FLOPs per token^2 at 723 TFLOP/s, where the model now runs 719: the quadratic
  term reads as measured. Its b, 31.9 us a token (261 ms per 8192), is ~1.6x the model's 20.1
  (the chunk's linear layers at 779 TFLOP/s, 147 of its 165 ms), and the constant -18% left is
  that term. Checked and not the cause: the lone request waits for no step (its TTFT is the sum
  of its chunks' steps, to the millisecond: async scheduling's step-ahead only delays a prompt
  arriving mid-step), the LM head runs once a chunk (0.46 ms), the sampler once; the API
  server's tokenization, linear in L, is too small (issue 29's vLLM pass): vllm PR #19334
  (2025-06-08, RTX 3090, Qwen1.5-1.8B, ``vllm serve`` with prefix caching) times 100 concurrent
  completions of ``"hello " * 10000`` at max_tokens 1 at 1.338 s on average over 10 runs before
  its change, so everything serial in the server (tokenizing included; the identical prompts
  hit the cache after the first) takes at most 13.4 ms a 10,000-token request, 1.34 us a
  token, against the 11.8 us a token (31.9 - 20.1) the sweep's linear term leaves: at most about
  a ninth of it, on a repeated word's text rather than the post's prompts (and --enforce-eager).
  Not identified; a sustained-clock GEMM rate (gpu-fryer's 730 against the model's 767.5 TFLOP/s
  at 8192^3, validate_speed.py ``_hopper_compute_gap``) is 5%, not 60%.
  gpt-oss-20b (Figure 3, BF16 KV, read the same way; 12 full-attention layers of 64 x 64):
  L 32,768: ~790 (markers overlapped) measured, 679 before (-14%), 577 after (-27%); 65,536:
  1,995, 2,035 (+2%), 1,628 (-18%); 98,304: 3,641, 4,068 (+12%), 3,154 (-13%); 130,944: 5,651,
  6,769 (+20%), 5,146 (-9%). Its two-term fit over 49k-131k reads the causal attention at 513
  TFLOP/s (the model now 480 at a chunk's 8,192, FA3's head-dim-64 bar) and 18.2 us a token: the
  same picture, the growth with L gone and a linear term short; at 0.75 for every head dim
  (tried first) it read -31% to -37%.
  At concurrency 8 (Table 4/5) the same change takes the rows' TTFT +64.4/+67.4% ->
  +23.2/+25.1% (Llama BF16/FP8 KV) and -- the chunks shorter -- gpt-oss's +22.6/+26.8% ->
  +7.4/+10.9%; tok/s moves the wrong way (+1.8/+13.7/+8.3/+15.0% -> +5.9/+19.7/+10.2/+17.3%),
  consistent with the linear term the sweep says is short; ITL unmoved. The kvcached 0.6B rows' TTFT -93.4/-81.5% ->
  -93.6/-82.2%.
  Not expressible, not transcribed: the post's "FP8 skip-SW" row (an FP8 cache on the full-
  attention layers only, `--kv-cache-dtype-skip-layers sliding_window`: gpuplan has one KV dtype
  per model); the A100 sweep's N = 1000 (76 and 106 of the requests failed); kvcached's own
  configurations (a patched KV allocator). Searched and left out: vLLM's nightly/perf dashboards
  (ShareGPT workloads, results not in the repository), the v0.6.0 blog (ShareGPT and sonnet,
  charts only), vLLM PR threads whose quoted blocks lack the GPU, the version or the ITL.
"""


def main(argv: list[str]) -> int:
    rs = rows()
    text = render(rs)
    if "--write" in argv:
        OUT_MD.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
