"""The OpenAPI document of ``gpuplan serve``, built from the Job's own fields.

The job's properties come from :func:`typing.get_type_hints` over :class:`~gpuplan.job.Job` (a
field added to the Job appears here by itself); the choices of a ``Literal`` field are its
``enum``. Values the schema cannot express (a recipe name the library does not know, a batch
that does not fit) are answered 422 with one line, which the schema states for every route.
"""

from __future__ import annotations

import types
from dataclasses import MISSING
from functools import cache
from typing import Literal, Union, get_args, get_origin, get_type_hints

from ..cluster import SEARCH_JOB_FIELDS
from ..job import Job, choices_of, flat_defaults, flat_docs, flat_hints
from ..models import Model

__all__ = ["openapi_schema", "job_properties"]


def _schema_of(t: object) -> dict:
    if get_origin(t) in (Union, types.UnionType):
        alts = [_schema_of(a) for a in get_args(t) if a is not Model]
        return alts[0] if len(alts) == 1 else {"anyOf": alts}
    if t is type(None):
        return {"type": "null"}
    if get_origin(t) is Literal:
        return {"type": "string", "enum": list(get_args(t))}
    if get_origin(t) is tuple:
        return {"type": "array", "items": {"type": "string"}, "maxItems": 64}
    return {bool: {"type": "boolean"}, int: {"type": "integer"}, float: {"type": "number"},
            str: {"type": "string", "maxLength": 200}}[t]


def _describe(doc: str) -> str | None:
    """A field's docstring as a schema description: its first paragraph, on one line."""
    first = " ".join(doc.split("\n\n")[0].split())
    return first[:400] or None


def _with_choices(s: dict, choices: tuple[str, ...] | None) -> dict:
    """The schema of a field with its choices (defined once: the Job's vocabulary, the engines'
    and formats' tables): a string's ``enum``, a list's items' ``enum``, a ZeRO stage's integers;
    a spelled parameter (``interleaved:V``) as a ``pattern`` with V a number."""
    if not choices:
        return s
    if "anyOf" in s:
        return {**s, "anyOf": [_with_choices(a, choices) for a in s["anyOf"]]}
    if s.get("type") == "string" and "enum" not in s:
        rest = {k: v for k, v in s.items() if k != "maxLength"}
        if any(":" in c for c in choices):
            alts = "|".join(c.split(":")[0] + (":[0-9]+" if ":" in c else "") for c in choices)
            return {**rest, "pattern": f"^({alts})$"}
        return {**rest, "enum": list(choices)}
    if s.get("type") == "array" and s["items"].get("type") == "string":
        return {**s, "items": {"type": "string", "enum": list(choices)}}
    if s.get("type") == "integer" and all(c.isdigit() for c in choices):
        return {**s, "enum": [int(c) for c in choices]}
    return s


def job_properties() -> dict:
    """JSON Schema of every Job field, generated from the Job: the type from its annotation,
    the choices from the vocabulary (:func:`gpuplan.job.choices_of`), the default, and the
    description from the field's docstring (:func:`gpuplan.job.flat_docs`)."""
    hints, defaults, docs = flat_hints(), flat_defaults(), flat_docs()
    props = {}
    for name, hint in hints.items():
        s = _with_choices(_schema_of(hint), choices_of(name))
        default = defaults[name]
        if default is not MISSING:
            s["default"] = list(default) if isinstance(default, tuple) else default
        text = _describe(docs[name])
        if text:
            s["description"] = text
        props[name] = s
    props["model"]["description"] = ("catalog name (see /api/models); left out: the 7B "
                                     "parameter model gpuplan fit plans by default")
    return props


_FIT_OPTIONS = {
    "gpu": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                            "minItems": 1, "maxItems": 16}],
            "description": "GPU(s) to judge against (gpuplan fit --gpu); default: a shortlist"},
    "params": {"anyOf": [{"type": "string"}, {"type": "integer"}],
               "description": "a bare parameter count instead of a model (--params), e.g. 7B"},
    "config": {"type": "string", "description": "the text of a config.json (at most 1 MB)"},
    "suggest": {"anyOf": [{"type": "boolean"}, {"type": "null"}],
                "description": "true: --suggest; null: only for named GPUs that do not fit; "
                               "false: never"},
    "max_batch": {"type": "boolean"},
    "max_seq": {"type": "boolean"},
    "overhead": {"type": "string", "enum": ["low", "expected", "high"]},
    "speed": {"type": "boolean", "description": "false: --no-speed"},
}

#: An error is one line and, for a refused value, its data (gpuplan.errors.InputError.to_dict).
_ERROR = {"type": "object", "required": ["error"], "additionalProperties": False,
          "properties": {"error": {"type": "string"},
                         "field": {"type": ["string", "null"],
                                   "description": "the request key the error is about"},
                         "value": {"description": "the value given"},
                         "accepted": {"type": ["string", "null"],
                                      "description": "what is accepted, in words"},
                         "fix": {"type": "object", "description": "request keys and values "
                                 "that make the request valid"}}}


def _responses(ok: str) -> dict:
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    out = {"200": {"description": ok, "content": {"application/json": {
        "schema": {"type": "object"}}}}}
    for code, what in (("400", "malformed request"), ("413", "body too large"),
                       ("415", "body is not JSON"), ("422", "invalid job or option"),
                       ("503", "busy: retry")):
        out[code] = {"description": what, **err}
    return out


def _post(summary: str, schema_ref: str) -> dict:
    return {"post": {"summary": summary, "requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}}}},
        "responses": _responses(summary)}}


def _get(summary: str, params: list | None = None) -> dict:
    op: dict = {"summary": summary, "responses": _responses(summary)}
    if params:
        op["parameters"] = params
    return {"get": op}


@cache
def openapi_schema() -> dict:
    job = job_properties()
    speed_props = {**job, **{k: _FIT_OPTIONS[k] for k in ("gpu", "params", "config")}}
    flops_props = {"model": {"type": "string"}, "batch": {"type": "integer", "minimum": 1},
                   "seq": {"type": "integer", "minimum": 1},
                   "mode": {"type": "string", "enum": ["train", "forward"]},
                   "recompute": {"type": "string", "enum": ["none", "selective", "full"]},
                   "attention": {"type": "string", "enum": ["flash", "eager"]}}
    cluster_props = {
        **{k: v for k, v in job.items() if k in SEARCH_JOB_FIELDS or k == "model"},
        **{k: _FIT_OPTIONS[k] for k in ("params", "config")},
        "gpu": {"type": "string", "description": "the GPU of every rank (gpuplan cluster --gpu)"},
        "global_batch": {"type": "integer", "minimum": 1, "maximum": 10**9,
                         "description": "training: sequences per step over all GPUs"},
        "concurrency": {"type": "integer", "minimum": 1, "maximum": 10**7,
                        "description": "serving: sequences decoded at once over all replicas"},
        "max_token_ms": {"type": "number", "exclusiveMinimum": True, "minimum": 0,
                         "description": "serving: the most time per output token"},
        "top": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "tp_overlap": {"type": "boolean", "default": False},
    }
    num = {"type": "number", "exclusiveMinimum": True, "minimum": 0}
    capacity_props = {
        **job, **{k: _FIT_OPTIONS[k] for k in ("params", "config")},
        "gpu": {"type": "string", "description": "the GPU of every replica's ranks"},
        "rate": {**num, "description": "requests per second (open loop)"},
        "concurrency": {"type": "integer", "minimum": 1, "description": "closed-loop clients"},
        "input": {"type": "integer", "minimum": 1, "default": 2000},
        "output": {"type": "integer", "minimum": 1, "default": 256},
        "input_dist": {"type": "string", "description": "uniform:LO:HI, normal:MEAN:STD, "
                                                        "lognormal:MEDIAN:SIGMA"},
        "output_dist": {"type": "string"},
        "arrivals": {"type": "string", "default": "poisson",
                     "description": "poisson, constant or gamma:CV"},
        "requests": {"type": "integer", "minimum": 1, "maximum": 5000, "default": 2000},
        "seed": {"type": "integer", "minimum": 0, "default": 0},
        "replicas": {"type": "integer", "minimum": 1},
        "engine_version": {"type": "string"},
        "max_num_seqs": {"type": "integer", "minimum": 1},
        "max_num_batched_tokens": {"type": "integer", "minimum": 1},
        "max_model_len": {"type": "integer", "minimum": 1},
        "prefix_hit": {"type": "number", "minimum": 0, "maximum": 1},
        "slo_ttft": num, "slo_tpot": num, "slo_e2e": num,
        "slo_percentile": {"type": "number", "enum": [50, 90, 99], "default": 99},
        "price": {"type": "number", "minimum": 0},
        "max_gpus": {"type": "integer", "minimum": 1, "maximum": 64, "default": 64},
        "max_rate": {"type": "boolean", "default": False},
        "sweep": {"type": "boolean", "default": False,
                  "description": "also the chosen deployment at 0.25x to 2x the load (rate or "
                                 "concurrency): latency stats per point and the knee"},
        "disaggregated": {"type": "boolean", "default": False,
                          "description": "also search disaggregated prefill and decode "
                                         "pools (gpuplan capacity --disaggregated)"},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "gpuplan serve", "version": "1",
                 "description": "The planner's JSON API: the bodies are the library's Job and "
                                "result serializations (POST /api/fit answers what `gpuplan "
                                "fit --json` prints)."},
        "paths": {
            "/api/fit": _post("the plan, as gpuplan fit --json prints it", "FitRequest"),
            "/api/speed": _post("the speed estimate and its ceiling on one GPU", "SpeedRequest"),
            "/api/flops": _post("counted FLOPs, as gpuplan flops model --json", "FlopsRequest"),
            "/api/cluster": _post("the best parallel layouts, as gpuplan cluster --json prints "
                                  "them (less elapsed_s)", "ClusterRequest"),
            "/api/capacity": _post("TTFT/TPOT percentiles under load, as gpuplan capacity "
                                   "--json prints them", "CapacityRequest"),
            "/api/models": _get("catalog models", [{"name": "q", "in": "query", "required": False,
                                                    "schema": {"type": "string",
                                                               "maxLength": 100}}]),
            "/api/gpus": _get("the GPU catalog"),
            "/api/options": _get("the page's choices and the job's defaults"),
        },
        "components": {"schemas": {
            "Job": {"type": "object", "properties": job, "additionalProperties": False},
            "FitRequest": {"type": "object", "properties": {**job, **_FIT_OPTIONS},
                           "additionalProperties": False},
            "SpeedRequest": {"type": "object", "properties": speed_props, "required": ["gpu"],
                             "additionalProperties": False},
            "FlopsRequest": {"type": "object", "properties": flops_props, "required": ["model"],
                             "additionalProperties": False},
            "ClusterRequest": {"type": "object", "properties": cluster_props, "required": ["gpu"],
                               "additionalProperties": False},
            "CapacityRequest": {"type": "object", "properties": capacity_props,
                                "required": ["gpu"], "additionalProperties": False},
            "Error": _ERROR,
        }},
    }
