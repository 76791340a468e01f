"""One rule for a sequence past the model's positions, in every command (fit, speed, cluster,
capacity, the web API, the library): :func:`gpuplan.job.check_positions`.

A rotary model runs past its trained context, so the job is planned with a note: torchtitan trained
Llama 3.1 8B (config.json max_position_embeddings 131,072) at seq 262,144 with CP 8
(benchmarks/published/runs.json, torchtitan-t2-llama31-8b-fsdp1-cp8-s262144-float8). A learned
position table (GPT-2's config.json: n_positions 1024) has no row past its limit, so the job is
refused with one line. A serving engine's max_model_len past the config's context is refused as
vLLM and SGLang refuse it at start-up unless their override variable is set."""

from __future__ import annotations

import json
import shlex

import pytest

from gpuplan.errors import InputError
from gpuplan.job import check_positions
from gpuplan.models import load_model

LLAMA = ["llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--seq", "262144"]
NOTE = ("seq 262,144 is past llama-3.1-8b's trained context of 131,072 positions "
        "(max_position_embeddings)")


@pytest.fixture(autouse=True)
def _empty_bench_db(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))


def _json(cli, *argv):
    code, out, err = cli(*argv)
    assert code == 0, err
    return json.loads(out)


def _has_note(notes) -> bool:
    return any(n.startswith(NOTE) for n in notes)


def test_the_rule_by_position_kind():
    llama = load_model("llama-3.1-8b").architecture  # rotary, 131,072
    assert check_positions(llama, 131_072) is None
    assert check_positions(llama, None) is None
    assert check_positions(llama, 262_144, model="llama-3.1-8b").startswith(NOTE)
    bloom = load_model("bloom-560m").architecture  # ALiBi: no table, seq_length 2048
    assert bloom.position == "alibi"
    assert "alibi positions extend past it" in check_positions(bloom, 4096)
    gpt2 = load_model("gpt2").architecture  # learned, n_positions 1024
    with pytest.raises(InputError) as e:
        check_positions(gpt2, 1025, model="gpt2")
    assert e.value.fix == {"seq": 1024} and "\n" not in str(e.value)
    # the serving engine's start-up check refuses even a rotary model past its context
    with pytest.raises(InputError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"):
        check_positions(llama, 262_144, "max_model_len", engine="vllm")
    with pytest.raises(InputError, match="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"):
        check_positions(llama, 262_144, "max_model_len", engine="sglang")
    assert check_positions(llama, 131_072, "max_model_len", engine="vllm") is None


def test_a_rope_model_past_its_context_plans_the_same_in_fit_speed_and_cluster(cli):
    """The published job (8 H100s, seq 262,144): cluster's best layout is the job fit and speed
    plan with its command, to the byte and to 0.1% (as test_cluster_one_truth compares), and
    each says the length is past the trained context."""
    plan = _json(cli, "cluster", *LLAMA, "--gpus", "8", "--global-batch", "8", "--json")
    assert plan["best"] and _has_note(plan["notes"])
    cand = plan["best"][0]
    words = shlex.split(cand["command"])
    fit = _json(cli, *words[1:], "--json")
    assert fit["train"]["per_gpu"]["total_bytes"] == cand["memory_bytes"]
    assert _has_note(fit["train"]["notes"])
    speed = _json(cli, "speed", *words[2:], "--json")
    assert speed["tokens_per_s"] == pytest.approx(cand["tokens_per_s"], rel=1e-3)
    assert _has_note(speed["notes"])


def test_a_rope_models_serving_context_past_its_positions_plans_with_a_note(cli):
    fit = _json(cli, "fit", "llama-3.1-8b", "--gpu", "h200", "--mode", "infer", "--context",
                "262144", "--json")
    assert any(n.startswith("context 262,144 is past llama-3.1-8b's trained context")
               for n in fit["infer"]["notes"])
    speed = _json(cli, "speed", "llama-3.1-8b", "--gpu", "h200", "--mode", "infer",
                  "--context", "262144", "--json")
    assert any(n.startswith("context 262,144 is past") for n in speed["notes"])


@pytest.mark.parametrize("argv", [
    ["fit", "gpt2", "--seq", "2048"],
    ["speed", "gpt2", "--gpu", "h100", "--seq", "2048"],
    ["cluster", "gpt2", "--gpu", "h100", "--gpus", "8", "--seq", "2048", "--global-batch", "8"],
    ["fit", "gpt2", "--mode", "infer", "--context", "2048"],
    ["speed", "gpt2", "--gpu", "h100", "--mode", "infer", "--context", "2048"],
    ["capacity", "gpt2", "--gpu", "h100", "--max-model-len", "2048", "--concurrency", "4",
     "--input", "100", "--output", "100"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_learned_table_past_its_rows_is_refused_by_every_command(cli, argv):
    rc, out, err = cli(*argv)
    err = err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err
    name = "max-model-len" if "--max-model-len" in argv else \
        "context" if "--context" in argv else "seq"
    assert err.startswith(f"gpuplan: error: --{name} 2048: gpt2 supports at most 1024 positions")
    assert err.endswith(f"use --{name} 1024 or less")


@pytest.mark.parametrize("engine,override", [
    ("vllm", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
    ("sglang", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")])
def test_capacity_refuses_a_max_model_len_its_engine_refuses(cli, engine, override):
    rc, _, err = cli("capacity", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                     "--max-model-len", "262144", "--concurrency", "4", "--input", "1000",
                     "--output", "100")
    err = err.strip()
    assert rc == 2 and "\n" not in err
    assert "--max-model-len 262,144 is longer than the model's context (131,072)" in err
    assert override in err


def test_the_web_api_answers_as_the_cli(tmp_path, monkeypatch):
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from gpuplan.web import create_app

    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))
    with TestClient(create_app(allowed_hosts=["testserver"]),
                    raise_server_exceptions=False) as c:
        for path, body in (("/api/fit", {"model": "gpt2", "seq": 2048}),
                           ("/api/speed", {"model": "gpt2", "gpu": "h100", "seq": 2048}),
                           ("/api/cluster", {"model": "gpt2", "gpu": "h100", "gpus": 8,
                                             "seq": 2048, "global_batch": 8})):
            r = c.post(path, json=body)
            assert r.status_code == 422, (path, r.text)
            assert r.json()["error"].startswith("seq 2048: gpt2 supports at most 1024 positions")
            assert r.json()["fix"] == {"seq": 1024}
        r = c.post("/api/speed", json={"model": "llama-3.1-8b", "gpu": "h100", "seq": 262144,
                                       "mode": "train"})
        assert r.status_code == 200, r.text
        assert _has_note(r.json()["train"]["estimate"]["notes"])
        r = c.post("/api/fit", json={"model": "llama-3.1-8b", "seq": 262144, "mode": "train"})
        assert r.status_code == 200, r.text
        assert _has_note(r.json()["train"]["notes"])


@pytest.mark.parametrize("argv", [
    ["fit", "llama-3.1-8b", "--gpu", "h200", "--mode", "infer"],
    ["speed", "llama-3.1-8b", "--gpu", "h200", "--mode", "infer"],
    ["cluster", "llama-3.1-8b", "--gpu", "h200", "--gpus", "8", "--mode", "infer",
     "--concurrency", "4"],
], ids=lambda a: a[0])
def test_serving_on_vllm_past_the_context_is_refused_as_vllm_refuses_it(cli, argv):
    """The same rotary context that plans with a note on plain transformers is one line on vLLM,
    whose start-up check refuses a max_model_len past the config's (a request longer than it is
    never admitted)."""
    rc, _, err = cli(*argv, "--engine", "vllm", "--context", "262144")
    err = err.strip()
    assert rc == 2 and "\n" not in err
    assert err == ("gpuplan: error: --context 262,144 is longer than the model's context "
                   "(131,072), which vllm refuses unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set; "
                   "give at most that")
