"""The API's schema and docs/serve.md hold the code's choices and keys: every Job field with
choices (``gpuplan.job.choices_of``) carries them in the OpenAPI document -- a string's enum, a
list field's items' enum (the lead's finding: ``cuda_graph_scope`` listed no names), the ZeRO
stages as integers, ``interleaved:V`` as a pattern --; the capacity request's schema has every key
the service reads (``disaggregated`` was missing, so a schema-valid client could not send it);
docs/serve.md's route table names each of those keys."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplan.cluster import SEARCH_JOB_FIELDS
from gpuplan.job import FLAT_FIELDS, Job, choices_of
from gpuplan.web._openapi import openapi_schema
from gpuplan.web._service import CAPACITY_OPTIONS

SERVE_MD = (Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text()


def _alternatives(s: dict) -> list[dict]:
    return s["anyOf"] if "anyOf" in s else [s]


def _listed(s: dict) -> tuple | None:
    """What the schema says a field accepts, as the vocabulary spells it."""
    for alt in _alternatives(s):
        if "enum" in alt:
            return tuple(map(str, alt["enum"]))
        if alt.get("type") == "array" and "enum" in alt["items"]:
            return tuple(alt["items"]["enum"])
        if "pattern" in alt:
            return ("pattern", alt["pattern"])
    return None


def test_every_field_with_choices_carries_them():
    props = openapi_schema()["components"]["schemas"]["Job"]["properties"]
    checked = 0
    for name in FLAT_FIELDS:
        choices = choices_of(name)
        if not choices:
            continue
        listed = _listed(props[name])
        assert listed is not None, f"the schema lists no choices for {name}"
        if listed[0] == "pattern":
            rx = re.compile(listed[1])
            for c in choices:  # interleaved:V stands for interleaved:2 .. interleaved:64
                assert rx.match(c.replace(":V", ":2")), (name, c)
            assert not rx.match("interleaved") and not rx.match("zigzag")
        else:
            assert listed == tuple(choices), name
        checked += 1
    assert checked >= 20


def test_a_scope_the_schema_allows_is_one_the_job_accepts():
    """The schema's names are the ones the Job takes (a full set from the schema builds)."""
    props = openapi_schema()["components"]["schemas"]["Job"]["properties"]
    names = _listed(props["recompute_modules"])
    Job(model="gpt2", engine="megatron", mode="train", checkpointing="selective", recompute_modules=names)
    assert _listed(props["cuda_graph_scope"]) == ("attn", "moe_router", "moe_preprocess", "full")
    Job(model="gpt2", engine="megatron", mode="train", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))


def test_the_capacity_schema_has_every_key_the_service_reads():
    props = openapi_schema()["components"]["schemas"]["CapacityRequest"]["properties"]
    missing = [k for k in CAPACITY_OPTIONS if k not in props]
    assert not missing, missing


def _route_row(route: str) -> str:
    return next(line for line in SERVE_MD.splitlines() if line.startswith(f"| `POST {route}` |"))


def test_serve_md_names_the_keys_each_route_reads():
    capacity = _route_row("/api/capacity")
    assert not [k for k in CAPACITY_OPTIONS if f"`{k}`" not in capacity and k not in capacity]
    cluster = _route_row("/api/cluster")
    missing = sorted(k for k in SEARCH_JOB_FIELDS if f"`{k}`" not in cluster)
    assert not missing, f"docs/serve.md's /api/cluster row lacks {missing}"


def test_the_pages_fixed_choices_are_the_codes():
    """The page's few choices written in its HTML (not filled from /api/options): the pipeline
    schedules' suggestions name every schedule (dualpipe was missing), the capacity panel's
    engines are the serving engines capacity simulates, its SLO percentiles the ones it takes."""
    from gpuplan.engines.budget import SERVING_ENGINES
    from gpuplan.parallel.checks import PP_SCHEDULES

    html = (Path(__file__).resolve().parents[2] / "src" / "gpuplan" / "web" / "static"
            / "index.html").read_text()

    def options_of(start: str, end: str) -> list[str]:
        i = html.index(start)
        return re.findall(r'<option value="([^"]+)"', html[i:html.index(end, i)])

    schedules = {v.split(":")[0] for v in options_of('<datalist id="pp-schedules">', "</datalist>")}
    assert schedules == set(PP_SCHEDULES)
    assert options_of('id="cap-engine"', "</select>") == list(SERVING_ENGINES)
    assert sorted(map(int, options_of('id="cap-slo-percentile"', "</select>"))) == [50, 90, 99]
