"""``gpuplan capacity MODEL --gpu G``: TTFT/TPOT/ITL/E2E percentiles of a model served at a
request rate or concurrency, simulated step by step as vLLM, SGLang or TensorRT-LLM schedule it;
the fewest GPUs that meet an SLO; the highest rate a deployment sustains."""

from __future__ import annotations

import argparse
import contextlib
import sys

from .._io import json_text
from ..engines.budget import SERVING_ENGINES
from ._budget_options import positive_int
from ._common import add_model_on_gpu
from ._job_options import add_job_options, given_job_options, job_from_args

__all__ = ["register", "run"]

HELP = "TTFT/TPOT percentiles at a request rate, and the fewest GPUs that meet an SLO"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("capacity", help=HELP, description=(
        "Serve MODEL on GPU under load: a discrete-event simulation of the engine's scheduler "
        "(continuous batching, chunked prefill, paged KV blocks, preemption, prefix caching), "
        "each step timed by gpuplan's speed model for its exact mix. Without --tp and with an "
        "SLO: the fewest GPUs (replicas x TP) that meet it."))
    add_model_on_gpu(p)
    add_job_options(p)
    a = p.add_argument
    a("--engine-version", default=None, help="the engine release whose scheduler and budget rules "
      "apply (default: vllm 0.21, sglang 0.5, trt-llm 1.0; docs/engine_budget.md)")
    a("--rate", default=None, help="requests per second (open loop)")
    a("--arrivals", default=None, help="poisson (default), constant, gamma:CV")
    a("--concurrency", default=None, help="clients in a closed loop (instead of --rate)")
    a("--input", default=None, help="prompt tokens (default 2000)")
    a("--output", default=None, help="output tokens (default 256)")
    a("--input-dist", default=None, help="uniform:LO:HI, normal:MEAN:STD, lognormal:MEDIAN:SIGMA")
    a("--output-dist", default=None, help="as --input-dist, for the output length")
    a("--workload", default=None, metavar="FILE.jsonl",
      help="one request a line: arrival_s, input_tokens, output_tokens[, prefix_id, "
           "prefix_tokens]; the file is the load and the lengths (--rate, --concurrency, "
           "--input/--output, their -dist, --requests, --seed, --arrivals refused beside it)")
    a("--requests", default=None, help="requests simulated (default 2000; at most 100000, "
      "docs/capacity.md 'Bounded work')")
    a("--seed", default=None, help="the RNG seed (default 0)")
    a("--replicas", default=None, help="replicas of the layout (default 1, or searched)")
    a("--max-gpus", default="64", help="the search's largest deployment (default 64)")
    a("--max-num-seqs", default=None, help="the engine's running-request budget")
    a("--max-num-batched-tokens", default=None, help="the engine's tokens-per-step budget")
    a("--gpu-memory-utilization", default=None, metavar="U",
      help="vLLM's share of the card (TensorRT-LLM: its free_gpu_memory_fraction); default: "
           "the engine version's")
    a("--mem-fraction-static", default=None, metavar="F",
      help="SGLang's share for the weights and the KV pool; default: computed as SGLang does")
    a("--max-model-len", default=None, help="tokens per request the KV plan allows (default: "
                                            "the model's context)")
    a("--prefix-hit", default="0", help="share of each prompt served by the prefix cache, 0 to 1 (1: "
      "every prompt from the cache; default 0)")
    a("--slo-ttft", default=None, help="TTFT target, seconds")
    a("--slo-tpot", default=None, help="TPOT target, seconds")
    a("--slo-e2e", default=None, help="end-to-end target, seconds")
    a("--slo-percentile", default="99", help="50, 90 or 99 (default 99)")
    a("--max-rate", action="store_true", help="the highest rate the deployment sustains "
                                              "within the SLO")
    a("--disaggregated", action="store_true", help="also search disaggregated prefill and "
      "decode pools (DistServe, OSDI'24), each with its own TP and replicas, the KV cache sent "
      "between them; compared with the best aggregated deployment")
    a("--price", default=None, help="price per GPU-hour, for the cost per million tokens")
    a("--export", default=None, metavar="ENGINE", help="vllm: the chosen deployment's `vllm "
      "serve` command; sglang: its `sglang.launch_server` command per replica and a router; "
      "every scheduler knob set")
    a("--json", action="store_true", help="machine-readable output")
    a("--sweep", action="store_true", help="also the chosen deployment at 0.25x to 2x the "
      "load (--rate or --concurrency): p50/p99 latencies and the knee (`sweep` in --json)")
    a("--plot", default=None, metavar="FILE.png", help="latency percentiles against the rate")
    p.set_defaults(func=run)


def _num(text, what, bound):
    from ..units import parse_number

    return None if text is None else parse_number(text, what=what, bound=bound)


def _seed(text: str) -> int:
    """``--seed``: a whole number 0 .. 2^31 - 1 (the default 0), named as given when not."""
    from ..errors import InputError, shown

    t = str(text).strip()
    if not (t.isascii() and t.isdigit()) or len(t) > 10 or int(t) > 2**31 - 1:
        raise InputError(f"--seed {shown(text)}: expected a whole number >= 0 and <= 2^31 - 1",
                         field="seed", value=text)
    return int(t)


def _or(given, default: str):
    """An option left out (None) takes its default; one given, even empty, is parsed as given."""
    return default if given is None else given


def _inputs(args):
    """The workload, SLO and deployment options, parsed (errors name the option)."""
    from ..capacity import (SLO, SYNTHETIC_OPTIONS, WORKLOAD_DEFAULTS, check_load_options,
                            make_workload, parse_dist, read_workload)
    from ..errors import InputError

    pct = _num(args.slo_percentile, "--slo-percentile", "duration")
    if pct not in (50.0, 90.0, 99.0):
        raise InputError(f"--slo-percentile {args.slo_percentile}: expected 50, 90 or 99")
    slo = SLO(ttft_s=_num(args.slo_ttft, "--slo-ttft", "seconds"),
              tpot_s=_num(args.slo_tpot, "--slo-tpot", "seconds"),
              e2e_s=_num(args.slo_e2e, "--slo-e2e", "seconds"), percentile=pct)
    rate = _num(args.rate, "--rate", "rate")
    conc = positive_int(args.concurrency, "--concurrency")
    check_load_options({**{k: getattr(args, k) for k in SYNTHETIC_OPTIONS},
                        "workload": args.workload, "rate": rate, "concurrency": conc})
    if args.workload is not None:
        make = make_at = None
        wl = read_workload(args.workload)
    else:
        if rate is None and conc is None and not args.max_rate:
            raise InputError("give --rate R (requests/s), --concurrency C or --workload FILE")
        # a distribution given empty is refused as such, not replaced by --input's length
        ind, outd = args.input_dist is not None, args.output_dist is not None
        d = {k: str(v) for k, v in WORKLOAD_DEFAULTS.items()}  # as if typed
        kw = dict(input=parse_dist(args.input_dist if ind else _or(args.input, d["input"]),
                                   what="--input-dist" if ind else "--input"),
                  output=parse_dist(args.output_dist if outd else _or(args.output, d["output"]),
                                    what="--output-dist" if outd else "--output"),
                  requests=positive_int(_or(args.requests, d["requests"]), "--requests"),
                  arrivals=_or(args.arrivals, d["arrivals"]), seed=_seed(_or(args.seed, d["seed"])))

        def make(r, conc=conc, kw=kw):
            return make_workload(rate=r if conc is None else None, concurrency=conc, **kw)

        def make_at(load, conc=conc, kw=kw):  # a --sweep point: a rate, or a concurrency
            return make_workload(rate=None if conc is not None else load,
                                 concurrency=load if conc is not None else None, **kw)
        wl = make(rate if rate is not None else 1.0)
    return wl, make, slo, rate, conc, make_at


def _check_plot(args, make) -> None:
    """``--plot`` checked before any simulation: a writable ``.png``, and what it draws -- one
    aggregated deployment at rates around the one given -- exists (a trace has no rate to vary,
    a disaggregated split is two pools)."""
    from .._io import check_plot
    from ..errors import InputError

    if args.plot is None:  # an empty --plot is check_plot's error, not "no plot" (qa43)
        return
    check_plot(args.plot)
    if make is None:
        raise InputError("--plot draws latency against the rate, and --workload's trace has "
                         "its own arrivals: give --rate or --concurrency with --input/--output, "
                         "or drop --plot", field="plot")
    if args.disaggregated:
        raise InputError("--plot draws one aggregated deployment: drop --disaggregated or "
                         "--plot", field="plot")
    if args.concurrency is not None:
        raise InputError("--plot draws latency against the request rate, which --concurrency's "
                         "closed loop does not set: give --rate, or --sweep for latency "
                         "against the concurrency", field="plot")


def _check_sweep(make_at, rate, conc) -> None:
    """A sweep varies a synthetic workload's load up to 2x: refused on a workload file, or
    where its top point would be a load not accepted."""
    from ..capacity._plan import SWEEP_FACTORS
    from ..errors import InputError

    if make_at is None:
        raise InputError("--sweep varies a synthetic workload's load: give --rate or "
                         "--concurrency instead of --workload")
    top = max(SWEEP_FACTORS)
    load, name = (conc, "--concurrency") if conc is not None else (rate, "--rate")
    if load is None:  # --max-rate alone: the sweep runs around the rate found (checked there)
        return
    if load * top > 10**6:
        raise InputError(f"--sweep runs up to {top:g}x the load: {name} {load:g} would "
                         f"reach {load * top:g}, over the 10^6 accepted; give {name} "
                         f"{10**6 / top:g} or less, or drop --sweep")


_SERVING = SERVING_ENGINES  # vllm, sglang, trt-llm: the engines capacity simulates


def _serving_job(args: argparse.Namespace, model, given: dict):
    """The Job a capacity run serves: a training engine is named as such (not as the train
    mode it implies), and a training-only option (one whose fix is a training engine) is to be
    dropped, not moved to an engine capacity refuses."""
    from ..errors import InputError, closest, opt, shown

    if "engine" in given and given["engine"] not in (*_SERVING, "auto"):
        hint = closest(given["engine"], _SERVING)
        raise InputError(f"{opt('engine')} {shown(given['engine'])}: capacity simulates "
                         f"{', '.join(_SERVING)}"
                         + (f"; did you mean {hint[0]}?" if hint else "; name one of those"),
                         field="engine",
                         value=given["engine"], accepted=", ".join(_SERVING))
    try:
        return job_from_args(args, model, command="capacity", default_mode="infer",
                             modes=("infer",))
    except InputError as e:
        if e.field is None or e.fix.get("engine") in (None, *_SERVING):
            raise
        raise InputError(f"{opt(e.field)}: {e.fix['engine']} training's option; capacity "
                         f"serves with {', '.join(_SERVING)}, so drop {opt(e.field)}",
                         field=e.field, value=e.value) from None


def run(args: argparse.Namespace) -> int:
    from ..capacity._search import solve
    from ..errors import InputError, opt
    from ..hardware import resolve_gpu
    from ..models import load_model

    gpu, alias = resolve_gpu(args.gpu)
    model = load_model(args.model, download=args.download)
    given = given_job_options(args)
    if "gpus" not in given and ("tp" in given or "pp" in given):
        # a replica's layout: its GPUs are tp x pp (replicas come from --replicas)
        args.gpus = str(int(given.get("tp", 1)) * int(given.get("pp", 1)))
    job = _serving_job(args, model, given)
    engine = job.engine if job.engine in _SERVING else "vllm"
    wl, make, slo, rate, conc, make_at = _inputs(args)
    _check_plot(args, make)
    if args.sweep:
        _check_sweep(make_at, rate, conc)
    price = _num(args.price, "--price", "price")
    hit = _num(args.prefix_hit, "--prefix-hit", "prefix_share")
    kw = dict(engine_version=args.engine_version,
              max_num_seqs=positive_int(args.max_num_seqs, "--max-num-seqs"),
              max_num_batched_tokens=positive_int(args.max_num_batched_tokens,
                                          "--max-num-batched-tokens", 2**31),
              max_model_len=positive_int(args.max_model_len, "--max-model-len", 2**31),
              gpu_memory_utilization=_num(args.gpu_memory_utilization,
                                          "--gpu-memory-utilization", "memory_fraction"),
              mem_fraction_static=_num(args.mem_fraction_static, "--mem-fraction-static",
                                       "memory_fraction"))
    # --disaggregated searches both pools' layouts: a --pp alone is a layout given there too
    laid_out = "tp" in given or (args.disaggregated and "pp" in given)
    with _progress(args) as (step, total):
        out = solve(model, gpu, job, wl, slo, engine=engine, layout_given=laid_out,
                    replicas=positive_int(args.replicas, "--replicas"),
                    max_gpus=positive_int(args.max_gpus, "--max-gpus", 2**20), price=price,
                    prefix_hit=hit, find_max_rate=args.max_rate, make=make, progress=step,
                    progress_total=total, sweep=args.sweep,
                    sweep_base=conc if conc is not None else rate, closed=conc is not None,
                    sweep_make=make_at, disaggregated=args.disaggregated, **kw)
    res, dep, cands, best_rate = out["_result"], out["_deployment"], out["searched"], \
        out["max_rate"]
    if args.export is not None and out.get("disaggregated") is not None:
        raise InputError(f"{opt('export')} writes one aggregated deployment: drop "
                         f"{opt('disaggregated')} or {opt('export')}", field="export")
    # checked before the plot is written: a refused export leaves no file
    command = None if args.export is None else _export(args.export, model, job, res)
    if args.plot:  # _check_plot: a synthetic workload and one aggregated deployment
        from ..report.capacity import plot_rates

        base = rate or best_rate or 1.0
        plot_rates([(x, dep.run(make(x), slo=slo)) for x in
                    (base * f for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0))],
                   args.plot, slo=slo)
    return _render(args, res, cands, best_rate, alias, command, out.get("sweep"),
                   out.get("disaggregated"), out.get("_aggregated"))


@contextlib.contextmanager
def _progress(args):
    """A transient bar on stderr while a search (or ``--max-rate``) simulates, only when stderr
    is a terminal and the output is not ``--json``: yields (one simulation done, the most there
    will be), or (None, None)."""
    if args.json or not sys.stderr.isatty():
        yield None, None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True)
    task = bar.add_task("simulating", total=None)
    bar.start()
    try:
        yield (lambda: bar.advance(task)), (lambda n: bar.update(task, total=n))
    finally:
        bar.stop()


def _export(engine: str, model, job, res) -> str:
    """The launch command(s) of the deployment ``res`` describes, with the scheduler budgets the
    simulation ran under: ``vllm serve`` (export/vllm.py) or one ``sglang.launch_server`` per
    replica and a router (export/sglang.py)."""
    from ..errors import InputError, opt

    if engine not in ("vllm", "sglang"):
        raise InputError(f"{opt('export')} {engine}: capacity writes a vllm or sglang command",
                         field="export", value=engine, accepted="vllm, sglang")
    if res.engine != engine:
        raise InputError(f"{opt('export')} {engine} of a {res.engine} deployment: give "
                         f"{opt('engine')} {engine}", field="export", value=engine)
    lay, sch = res.layout, res.scheduler
    max_len = res.kv["max_model_len"]
    served = job.with_(engine=engine, tp=lay["tp"], pp=lay["pp"],
                       kv_dtype=lay.get("kv_dtype", job.kv_dtype),
                       gpus=lay["tp"] * lay["pp"] * lay["replicas"], batch=sch["max_num_seqs"],
                       seq=max_len, context=max_len)
    if engine == "sglang":
        from ..export.sglang import export as sglang_export

        return sglang_export(served, model, replicas=lay["replicas"],
                             mem_fraction_static=sch["memory_utilization"],
                             max_running_requests=sch["max_num_seqs"],
                             chunked_prefill_size=sch["max_num_batched_tokens"],
                             page_size=sch["block_size"], context=max_len)
    from ..export.vllm import export

    cmd = export(served, model, gpu_memory_utilization=sch["memory_utilization"]).rstrip("\n")
    return (f"{cmd} --max-num-batched-tokens {sch['max_num_batched_tokens']} --block-size "
            f"{sch['block_size']}\n")


def _render(args, res, cands, best_rate, alias, command=None, sweep=None, dis=None,
            agg=None) -> int:
    if args.json:
        from ..capacity._search import answer_dict

        d = answer_dict({"_result": res, "searched": cands, "max_rate": best_rate,
                         "sweep": sweep, "disaggregated": dis})
        if alias:
            d["gpu_note"] = alias
        if command is not None:
            d["export"] = command
        sys.stdout.write(json_text(d, indent=2) + "\n")
        return 0
    from ..report.capacity import render_candidates, render_capacity, render_sweep

    if alias:
        print(f"note: {alias}", file=sys.stderr)
    if cands is not None:
        render_candidates(cands)
    if dis is not None:
        from ..report.capacity import render_disaggregated

        render_disaggregated(res, dis, agg)
    else:
        render_capacity(res, max_rate=best_rate)
    if sweep is not None:
        render_sweep(sweep)
    if args.plot:
        print(f"plot written to {args.plot}")
    if command is not None:
        print(command, end="")
    return 0
