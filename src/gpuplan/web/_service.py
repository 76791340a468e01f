"""What each API route answers, as plain functions over JSON values (no HTTP here).

Every function takes the decoded JSON body (or query) and returns the JSON-ready dict the route
sends; bad input raises :class:`~gpuplan.errors.InputError`, which the app turns into one line.
Nothing is computed here: the job is :meth:`Job.from_dict`, the answers are the library's own
result serializations (``Plan.to_dict`` is what ``gpuplan fit --json`` prints), and every choice
and default the page offers is read from the library.

Bounded work: a model is a catalog name or a pasted config.json (at most :data:`MAX_CONFIG_BYTES`),
never a path on this machine; at most :data:`MAX_GPUS_PER_REQUEST` GPUs per request; the searches
are the library's, whose spaces are capped there.
"""

from __future__ import annotations

from collections.abc import Mapping

from typing import Literal, get_args, get_origin, get_type_hints

from ..bounds import check_int, check_number
from ..capacity import (SLO, SYNTHETIC_OPTIONS, WORKLOAD_DEFAULTS, check_load_options,
                        make_workload, parse_dist)
from ..capacity._search import answer_dict, solve
from ..cluster import SEARCH_JOB_FIELDS, cluster_search, search_options
from ..compute import Efficiency, estimate_speed_for_job, flops_breakdown
from ..engines.profiles import AUTO_ENGINE, ENGINE_NAMES
from ..errors import InputError, shown
from ..fit import OverheadLevel, plan
from ..formats import INFER_AUTO, OPTIMIZERS, TRAINING_RECIPES, WEIGHT_FORMATS
from ..hardware import DEFAULT_SHORTLIST, all_gpus, resolve_gpu
from ..job import KV_DTYPES, Job, cuda_graph_scope_sets, flat_defaults, flat_hints
from ..memory import train_memory
from ..models import (SUPPORTED_FAMILIES, catalog_entry, catalog_names, from_param_count,
                      load_model, model_from_config_bytes)
from ..report import gpus as gpus_report
from ..report import models as models_report
from ..units import MB, parse_count

__all__ = ["capacity", "CAPACITY_OPTIONS", "fit", "speed", "flops", "cluster", "models", "gpus", "options", "FIT_OPTIONS",
           "MAX_CONFIG_BYTES", "MAX_GPUS_PER_REQUEST", "MAX_QUERY_CHARS"]

#: A pasted config.json is read up to this size (real ones are a few kB).
MAX_CONFIG_BYTES = 1 * MB

#: GPUs judged in one request (the catalog holds a few dozen; the page sends one to a handful).
MAX_GPUS_PER_REQUEST = 16

#: Longest catalog search string.
MAX_QUERY_CHARS = 100

#: The keys of a fit request beside the job's fields, each a ``gpuplan fit`` flag:
#: ``gpu`` (--gpu, a list), ``params`` (--params), ``config`` (a config.json's text, as the CLI's
#: path would be read), ``suggest`` (--suggest: true; null: the CLI's default; false: never),
#: ``max_batch``/``max_seq`` (--max-batch/--max-seq), ``overhead`` (--overhead), ``speed``
#: (false = --no-speed).
FIT_OPTIONS = ("gpu", "params", "config", "suggest", "max_batch", "max_seq", "overhead", "speed")


#: Ways to give the model other than a catalog name (the Job's own ``model`` key).
_SOURCES = ("config", "params")


def _bool(body: Mapping, key: str, default: bool | None) -> bool | None:
    v = body.get(key, default)
    if v is not None and not isinstance(v, bool):
        raise InputError(f"{key} {shown(v)}: expected true or false")
    return v


def _catalog_name(name: object) -> str:
    """A model named by the request must be a catalog name: no path on this machine is read."""
    if not isinstance(name, str):
        raise InputError(f"model {shown(name)}: expected a catalog name (see /api/models)")
    return catalog_entry(name).name and name  # raises "unknown model ...; did you mean"


def _job(body: Mapping, options: tuple[str, ...]) -> Job:
    """The request's job: its job keys through Job.from_dict, the model a catalog name, a pasted
    config.json or a bare parameter count."""
    if not isinstance(body, Mapping):
        raise InputError("request body: expected a JSON object of job fields")
    job_keys = {k: v for k, v in body.items() if k not in options and k not in _SOURCES}
    sources = [k for k in ("model", *_SOURCES) if body.get(k) is not None]
    if len(sources) > 1:
        raise InputError(f"give one of model, config, params, not {' and '.join(sources)}")
    if body.get("config") is not None:
        text = body["config"]
        if not isinstance(text, str):
            raise InputError("config: expected the text of a config.json as a string")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800) that JSON let through
            raise InputError("config: the text holds an unpaired surrogate (e.g. \\ud800), "
                             "which is not UTF-8; paste the config.json as it is") from None
        job_keys["model"] = model_from_config_bytes(data, limit=MAX_CONFIG_BYTES)
    elif body.get("params") is not None:
        p = body["params"]
        if isinstance(p, bool) or not isinstance(p, (str, int)):
            raise InputError(f"params {shown(p)}: expected a count such as 7B or 7000000000")
        job_keys["model"] = from_param_count(parse_count(p, what="params"))
    elif "model" in job_keys:
        _catalog_name(job_keys["model"])
    model = job_keys.pop("model", None)
    job = Job.from_dict(job_keys)  # the CLI's defaults for every key left out
    job.check_pipeline_shaping()  # as the command line refuses them: they would do nothing
    return job if model is None else job.with_(model=model)


def _model_of(job: Job):
    return job.model if not isinstance(job.model, str) else load_model(job.model)


def _gpu_names(value: object) -> list[str] | None:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not names:
        raise InputError(f"gpu {shown(value)}: expected a GPU name or a list of them "
                         "(see /api/gpus)")
    if len(names) > MAX_GPUS_PER_REQUEST:
        raise InputError(f"gpu: {len(names)} GPUs named; at most {MAX_GPUS_PER_REQUEST} per "
                         "request")
    return names


def fit(body: Mapping) -> dict:
    """``POST /api/fit``: exactly the object ``gpuplan fit --json`` prints for the same job and
    flags."""
    job = _job(body, FIT_OPTIONS)
    level = body.get("overhead", "expected")
    if level not in get_args(OverheadLevel):
        raise InputError(f"overhead {shown(level)}: expected one of "
                         f"{', '.join(get_args(OverheadLevel))}")
    suggest = _bool(body, "suggest", None)
    result = plan(job, _gpu_names(body.get("gpu")), overhead_level=level, suggest=suggest,
                  max_batch=bool(_bool(body, "max_batch", False)),
                  max_seq=bool(_bool(body, "max_seq", False)),
                  speed=bool(_bool(body, "speed", True)))
    return result.to_dict()


#: Every kernel at 100% of the datasheet's dense peak and bandwidth, no launch cost: the ceiling
#: the estimate's range is bounded by (the speed model's own arithmetic at other fractions).
_CEILING = Efficiency(matmul=1.0, attention=1.0, memory=1.0, launch_s=0.0, pcie_pinned=1.0,
                      pcie_pageable=1.0, comm=1.0,
                      basis={k: "ceiling: 100% of the datasheet figure" for k in
                             ("matmul", "attention", "memory", "launch_s", "pcie_pinned",
                              "pcie_pageable", "comm")})


def speed(body: Mapping) -> dict:
    """``POST /api/speed``: the speed model for the job on one GPU, per mode: the estimate (what
    ``gpuplan speed --json`` prints, without the per-op list) and the ceiling at 100% of the
    datasheet peaks, the top of the estimate's range."""
    job = _job(body, ("gpu",))
    names = _gpu_names(body.get("gpu"))
    if not names or len(names) != 1:
        raise InputError("gpu: name one GPU for the speed estimate (see /api/gpus)")
    gpu, note = resolve_gpu(names[0])
    model = _model_of(job)
    trainable = train_memory(model, job).trainable_params if job.trains else None
    kw = dict(model=model, trainable_params=trainable)
    est = estimate_speed_for_job(job, gpu, **kw)
    top = estimate_speed_for_job(job, gpu, efficiency=_CEILING, measured=None, **kw)
    out: dict = {"job": job.to_dict(), "gpu": gpu.name, "gpu_note": note,
                 "memory_bandwidth": gpu.memory_bandwidth}
    for mode, e in est.items():
        out[mode] = {"estimate": e.to_dict(ops=False), "ceiling": top[mode].to_dict(ops=False)}
    return out


#: The search's own keys of ``POST /api/cluster`` (besides the job's and the model's).
CLUSTER_OPTIONS = ("gpu", "global_batch", "concurrency", "max_token_ms", "top", "tp_overlap")
#: Most layouts one answer lists (the command line allows 50).
MAX_CLUSTER_TOP = 10


def cluster(body: Mapping) -> dict:
    """``POST /api/cluster``: what ``gpuplan cluster --json`` prints for the same job and
    options, less ``elapsed_s`` (this machine's search time); the search is bounded by the
    library (every layout of at most 16,384 GPUs is timed in about a second here) and the answer
    by ``top`` <= 10."""
    if not isinstance(body, Mapping):
        raise InputError("request body: expected a JSON object of job fields")
    extra = [str(k) for k in body if k not in CLUSTER_OPTIONS and k not in _SOURCES
             and k != "model" and k not in SEARCH_JOB_FIELDS]
    if extra:
        raise InputError(f"cluster does not take {shown(', '.join(sorted(extra)))} (it is "
                         "planned by /api/fit; the layout keys are what it searches)")
    job = _job(body, CLUSTER_OPTIONS)
    if body.get("mode") not in (None, "train", "infer"):  # as the command takes it
        raise InputError(f"mode {shown(body.get('mode'))}: the cluster search is train or "
                         "infer, one at a time")
    names = _gpu_names(body.get("gpu"))
    if not names or len(names) != 1:
        raise InputError("gpu: name one GPU for the cluster search (see /api/gpus)")
    gpu, note = resolve_gpu(names[0])
    opts = search_options(global_batch=body.get("global_batch"),
                          concurrency=body.get("concurrency"), top=body.get("top", 3),
                          max_token_ms=body.get("max_token_ms"), max_top=MAX_CLUSTER_TOP,
                          mode="infer" if job.mode == "infer" else "train")
    overlap = _bool(body, "tp_overlap", False)
    model = _model_of(job)
    out = cluster_search(model, gpu, job, tp_overlap=overlap, **opts).to_dict()
    out.pop("elapsed_s", None)
    if note:
        out["gpu_note"] = note
    return out


def flops(body: Mapping) -> dict:
    """``POST /api/flops``: what ``gpuplan flops model --json`` prints (counted matmul FLOPs per
    layer and per model)."""
    if not isinstance(body, Mapping):
        raise InputError("request body: expected a JSON object")
    allowed = ("model", "batch", "seq", "mode", "checkpointing", "recompute", "attention")
    for key in body:
        if key not in allowed:
            raise InputError(f"unknown flops key {shown(str(key))}; keys are {', '.join(allowed)}")
    name = _catalog_name(body.get("model"))
    model = load_model(name)
    mode = body.get("mode", "train")
    if mode not in ("train", "forward"):
        raise InputError(f"mode {shown(mode)}: expected train or forward")
    attention = body.get("attention", "sdpa")
    # the same Job `gpuplan flops model` builds: a forward pass is a scoring pass (all logits)
    job = Job.from_dict({
        "model": name, "mode": "train" if mode == "train" else "infer",
        "batch": body.get("batch", 1), "seq": body.get("seq"),
        "checkpointing": body.get("checkpointing", body.get("recompute", "none")),
        "attention": "sdpa" if attention == "flash" else attention, "prefill_logits": "all"})
    fb = flops_breakdown(model.architecture, job)
    return {"model": model.name, "batch": job.batch, "seq": fb.tokens // job.batch, "mode": mode,
            **fb.to_dict()}


def models(query: str = "") -> dict:
    """``GET /api/models?q=``: catalog models whose name, alias or family holds ``q`` (all when
    empty), as ``gpuplan models --json`` lists them."""
    q = query.strip().lower()
    if len(q) > MAX_QUERY_CHARS:
        raise InputError(f"q: {len(q)} characters; at most {MAX_QUERY_CHARS}")
    hits = []
    for name in catalog_names():
        e = catalog_entry(name)
        if not q or any(q in k.lower() for k in (e.name, *e.aliases, e.family)):
            hits.append(load_model(name))
    order = {f: i for i, f in enumerate(SUPPORTED_FAMILIES)}
    hits.sort(key=lambda m: (order[m.architecture.family], m.params.total))
    return models_report.catalog_json(hits, {m.name: catalog_entry(m.name).aliases for m in hits})


def gpus() -> dict:
    """``GET /api/gpus``: the GPU catalog, as ``gpuplan gpus --json`` prints it."""
    return gpus_report.catalog_json(list(all_gpus()))


def _literal(hint: object) -> tuple:
    """The choices of a Literal annotation, or of an optional one (``Literal[...] | None``)."""
    if get_origin(hint) is Literal:
        return get_args(hint)
    return next((get_args(a) for a in get_args(hint) if get_origin(a) is Literal), ())


def options() -> dict:
    """``GET /api/options``: every choice the page offers and the defaults, read from the
    library (the page holds no default of its own)."""
    left_to_engine = {k: None for k, v in flat_defaults().items() if v is None}
    return {
        # a field whose default is None (model_code, sharding: the engine's) stays None
        "defaults": Job.from_dict({}).to_dict() | left_to_engine | {"model": None},
        "default_gpus": list(DEFAULT_SHORTLIST),
        # every Job field typed as a Literal (or an optional one): mode, optimizer_states,
        # master_weights, checkpointing, attention, model_code, sharding ...
        **{name: list(_literal(t)) for name, t in flat_hints().items() if _literal(t)},
        "engine": list(ENGINE_NAMES),
        "engine_auto": AUTO_ENGINE,
        "precision": list(TRAINING_RECIPES),
        "infer_precision": [INFER_AUTO, *WEIGHT_FORMATS],  # auto: the checkpoint's own format
        "optimizer": list(OPTIMIZERS),
        "kv_dtype": list(KV_DTYPES),
        # a list field: the scope sets the training loop accepts (full alone among them)
        "cuda_graph_scope": [list(s) for s in cuda_graph_scope_sets()],
        "zero": [0, 1, 2, 3],  # the ZeRO stages
        "lora_base": list(WEIGHT_FORMATS),
        "overhead": list(get_args(OverheadLevel)),
        "fit_options": list(FIT_OPTIONS),
        "max_gpus_per_request": MAX_GPUS_PER_REQUEST,
        "max_config_bytes": MAX_CONFIG_BYTES,
    }


#: The capacity simulation's own keys of ``POST /api/capacity`` (besides the job's and the
#: model's); a trace file is the command line's (the server reads no file).
CAPACITY_OPTIONS = ("gpu", "rate", "concurrency", "input", "output", "input_dist", "output_dist",
                    "arrivals", "requests", "seed", "replicas", "engine_version", "max_num_seqs",
                    "max_num_batched_tokens", "max_model_len", "prefix_hit", "slo_ttft",
                    "slo_tpot", "slo_e2e", "slo_percentile", "price", "max_gpus", "max_rate",
                    "sweep", "disaggregated")
#: Most requests one web simulation serves, and the largest deployment it searches.
MAX_WEB_REQUESTS = 5000
MAX_WEB_GPUS = 64


def _opt(body: Mapping, key: str, kind: str, bound: str, **kw):
    v = body.get(key)
    if v is None:
        return None
    return check_int(v, bound, field=key, **kw) if kind == "int" else check_number(
        v, bound, field=key)


def _slo(body: Mapping) -> SLO:
    """The request's SLOs (``slo_ttft``, ``slo_tpot``, ``slo_e2e`` in seconds) at its
    ``slo_percentile`` (50, 90 or 99; default 99)."""
    pct = _opt(body, "slo_percentile", "num", "duration") or 99.0
    if pct not in (50.0, 90.0, 99.0):
        raise InputError(f"slo_percentile {shown(pct)}: expected 50, 90 or 99",
                         field="slo_percentile")
    return SLO(ttft_s=_opt(body, "slo_ttft", "num", "seconds"),
               tpot_s=_opt(body, "slo_tpot", "num", "seconds"),
               e2e_s=_opt(body, "slo_e2e", "num", "seconds"), percentile=pct)


def _layout_gpus(body: Mapping) -> int:
    """tp x pp, each checked where it enters: a "x", [1], NaN or 10**300 is the key's own one-line
    error (a 422), not a ValueError from int() or an error about a gpus never sent."""
    tp, pp = (1 if body.get(k) is None else check_int(body[k], "gpus", field=k)
              for k in ("tp", "pp"))
    return tp * pp


def _dist(body: Mapping, key: str, default: int):
    """``{key}_dist`` when given (an empty one refused, not skipped), else ``key``'s length."""
    d = body.get(f"{key}_dist")
    return parse_dist(str(body.get(key, default) if d is None else d),
                      what=key if d is None else f"{key}_dist")


def capacity(body: Mapping) -> dict:
    """``POST /api/capacity``: what ``gpuplan capacity --json`` prints for the same model, GPU,
    layout and workload (a synthetic one: ``rate`` or ``concurrency``, ``input``/``output`` or
    their distributions), at most 5,000 requests and a search over at most 64 GPUs."""
    if not isinstance(body, Mapping):
        raise InputError("request body: expected a JSON object of job fields")
    body = dict(body)
    body.setdefault("mode", "infer")
    body.setdefault("engine", "vllm")
    if body.get("gpus") is None and (body.get("tp") is not None or body.get("pp") is not None):
        body["gpus"] = _layout_gpus(body)
    job = _job(body, CAPACITY_OPTIONS)
    names = _gpu_names(body.get("gpu"))
    if not names or len(names) != 1:
        raise InputError("gpu: name one GPU for the capacity simulation (see /api/gpus)")
    gpu, note = resolve_gpu(names[0])
    slo = _slo(body)
    rate = _opt(body, "rate", "num", "rate")
    conc = _opt(body, "concurrency", "int", "requests")
    find = _bool(body, "max_rate", False)
    if rate is None and conc is None and not find:
        raise InputError("give rate (requests/s) or concurrency (closed loop)", field="rate")
    check_load_options({k: body.get(k) for k in SYNTHETIC_OPTIONS})
    d = WORKLOAD_DEFAULTS
    kw = dict(input=_dist(body, "input", d["input"]), output=_dist(body, "output", d["output"]),
              requests=_opt(body, "requests", "int", "requests", high=MAX_WEB_REQUESTS)
              or d["requests"], arrivals=str(body.get("arrivals", d["arrivals"])),
              seed=check_int(body.get("seed", d["seed"]), "int", field="seed", low=0,
                             high=2**31 - 1))

    def make(r):
        return make_workload(rate=r if conc is None else None, concurrency=conc, **kw)

    def make_at(load):  # a sweep's point: a rate, or a concurrency in a closed loop
        return make_workload(rate=None if conc is not None else load,
                             concurrency=load if conc is not None else None, **kw)
    do_sweep = _bool(body, "sweep", False)
    out = solve(_model_of(job), gpu, job, make(rate if rate is not None else 1.0), slo,
                engine=job.engine, layout_given=body.get("tp") is not None,
                replicas=_opt(body, "replicas", "int", "gpus"),
                max_gpus=_opt(body, "max_gpus", "int", "gpus", high=MAX_WEB_GPUS) or
                MAX_WEB_GPUS, price=_opt(body, "price", "num", "price"),
                prefix_hit=_opt(body, "prefix_hit", "num", "prefix_share") or 0.0,
                find_max_rate=find, make=make, disaggregated=_bool(body, "disaggregated", False),
                engine_version=body.get("engine_version"),
                max_num_seqs=_opt(body, "max_num_seqs", "int", "requests"),
                max_num_batched_tokens=_opt(body, "max_num_batched_tokens", "int", "tokens"),
                max_model_len=_opt(body, "max_model_len", "int", "tokens"),
                sweep=do_sweep, sweep_base=conc if conc is not None else rate,
                closed=conc is not None, sweep_make=make_at)
    d = answer_dict(out)
    if note:
        d["gpu_note"] = note
    return d
