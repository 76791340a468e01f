"""Schema checks for benchmarks/published/runs.json, the validation set of published measured runs.

The numbers themselves are transcribed from the cited sources; these tests check that every run is
complete enough to be predicted (source, hardware, model, job, measured figure), that the held-out
part is large and varied enough, that no source is split between calibration and hold-out, and that
every GPU and catalog model it names exists in gpuplan's catalog (or is listed in the README as
needing a catalog entry).
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest

from gpuplan.hardware import get_gpu
from gpuplan.models import load_model

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "published"
RUNS = json.loads((HERE / "runs.json").read_text(encoding="utf-8"))["runs"]
README = (HERE / "README.md").read_text(encoding="utf-8")

KINDS = {"train_throughput", "train_mfu", "decode", "prefill", "serving", "train_memory", "infer_memory"}
SHAPE_KEYS = {"hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "seq"}
JOB_KEYS = {"mode", "precision", "optimizer", "micro_batch", "global_batch", "seq", "grad_accum",
            "checkpointing", "attention", "tp", "pp", "cp", "ep", "dp", "zero", "lora", "runtime"}


def _needs_catalog_entry() -> set[str]:
    """GPU names the README lists under 'needs catalog entry'."""
    section = README.split("## Needs catalog entry", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+)`", section, flags=re.M))


def test_ids_unique_and_required_fields():
    ids = [r["id"] for r in RUNS]
    assert len(ids) == len(set(ids))
    for r in RUNS:
        for key in ("id", "kind", "source", "hardware", "model", "job", "measured", "notes", "split",
                    "source_group"):
            assert key in r, (r.get("id"), key)
        assert r["kind"] in KINDS, r["id"]
        assert r["split"] in {"calibrate", "holdout"}, r["id"]
        assert r["notes"].strip(), r["id"]
        assert JOB_KEYS <= set(r["job"]), (r["id"], JOB_KEYS - set(r["job"]))
        assert r["job"]["mode"] in {"train", "infer"}, r["id"]
        assert r["job"]["mode"] == ("train" if r["kind"].startswith("train") else "infer"), r["id"]


def test_sources_are_citable():
    for r in RUNS:
        s = r["source"]
        assert s.get("title") and isinstance(s.get("year"), int), r["id"]
        assert s.get("url") or (s.get("repo") and s.get("path")), r["id"]
        assert s.get("table") or s.get("row"), r["id"]


def test_measured_figure_present():
    for r in RUNS:
        m = r["measured"]
        assert isinstance(m["value"], (int, float)) and m["value"] > 0, r["id"]
        assert m["unit"].strip() and str(m["as_published"]).strip(), r["id"]


def test_hardware_names_catalog_gpus():
    extra = _needs_catalog_entry()
    for r in RUNS:
        h = r["hardware"]
        assert isinstance(h["count"], int) and h["count"] >= 1, r["id"]
        assert h["gpu_as_stated"], r["id"]
        if h["gpu"] in extra:
            continue
        assert get_gpu(h["gpu"]).name == h["gpu"], r["id"]


def test_needs_catalog_entry_list_is_not_stale():
    from gpuplan.errors import InputError

    used = {r["hardware"]["gpu"] for r in RUNS}
    for name in _needs_catalog_entry():
        assert name in used, f"{name} listed in README but used by no run"
        with pytest.raises(InputError):  # once it is catalogued, drop it from the README list
            get_gpu(name)


def test_models_resolve_or_carry_full_shape():
    for r in RUNS:
        m = r["model"]
        assert m.get("name"), r["id"]
        if m.get("catalog"):
            load_model(m["catalog"])
        else:
            shape = m.get("shape") or {}
            assert SHAPE_KEYS <= set(shape), (r["id"], SHAPE_KEYS - set(shape))
            assert all(isinstance(shape[k], int) and shape[k] > 0 for k in SHAPE_KEYS), r["id"]
            assert shape["hidden"] % shape["heads"] == 0 and shape["heads"] % shape["kv_heads"] == 0, r["id"]


def test_layouts_multiply_to_gpu_count_where_stated():
    """Where TP, PP, CP and DP are all stated, they use exactly the GPUs of the run."""
    flagged = [r["id"] for r in RUNS if r.get("layout_inconsistent")]
    assert flagged == ["llama3-405b-h100-x16384-s131072"]  # documented in README; do not let more slip in
    for r in RUNS:
        if r.get("layout_inconsistent"):
            continue
        j = r["job"]
        dims = [j.get(k) for k in ("tp", "pp", "dp")]
        if all(isinstance(d, int) for d in dims):
            cp = j.get("cp") if isinstance(j.get("cp"), int) else 1
            assert dims[0] * dims[1] * dims[2] * cp == r["hardware"]["count"], r["id"]


def test_no_source_split_and_holdout_is_large_enough():
    splits = collections.defaultdict(set)
    for r in RUNS:
        splits[r["source_group"]].add(r["split"])
    assert all(len(v) == 1 for v in splits.values()), {k: v for k, v in splits.items() if len(v) > 1}
    hold = [r for r in RUNS if r["split"] == "holdout"]
    assert len(hold) >= 25
    assert len({r["source_group"] for r in hold}) >= 6
    assert len({r["source_group"] for r in RUNS}) >= 8
    assert len(RUNS) >= 40


def test_readme_documents_every_source_group():
    for group in {r["source_group"] for r in RUNS}:
        assert f"`{group}`" in README, group


def test_every_run_names_its_engine_and_says_why():
    """Each run names the engine that ran it (one of gpuplan's profiles, or auto), an engine
    that runs the run's mode, and its notes say which engine and why -- so both checks of a run
    (memory and speed) read one Job under one engine."""
    from gpuplan.engines.profiles import ENGINE_NAMES, get_engine

    for r in RUNS:
        engine = r.get("engine")
        assert engine in ENGINE_NAMES, (r["id"], engine)
        assert r["job"]["mode"] in get_engine(engine).modes, (r["id"], engine)
        assert f"Engine {engine}" in r["notes"], r["id"]


def test_engines_follow_the_sources_words():
    """The engine is the one the source names, where it names one of gpuplan's profiles."""
    from collections import Counter

    said = {"Megatron-Core": "megatron", "DeepSpeed ZeRO-3": "deepspeed",
            "HF Trainer": "transformers", "TensorRT-LLM": "trt-llm"}
    seen = Counter()
    for r in RUNS:
        for words, engine in said.items():
            if words in str(r["job"].get("runtime")):
                assert r["engine"] == engine, (r["id"], r["engine"])
                seen[engine] += 1
        if r["source_group"] == "torchtune":
            assert r["engine"] == "torchtune", r["id"]
    assert set(seen) == set(said.values())
