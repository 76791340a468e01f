"""The two Job options the page offers beside their siblings (webmaster): ``master_weights``
(auto|fp32|bf16|remainder|none, ``--master-weights``) beside the optimizer states, and ``cuda_graph_scope``
(``--cuda-graph-scope``, ``full`` among its sets) beside checkpointing. Through the JSON API each
plans as the command line does, and each bad value is refused in the CLI's words, one line,
its keys spelt as JSON keys."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

GPU = "H100-SXM-80GB"
#: Llama 3.2 1B: 1,235,814,400 parameters (its config.json: tied embeddings), a quick plan.
MODEL, PARAMS = "llama-3.2-1b", 1_235_814_400
TRAIN = {"model": MODEL, "mode": "train", "gpu": [GPU]}
MEGATRON = {**TRAIN, "engine": "megatron"}
#: A MoE model for the router's scopes (a dense one has no router to graph: refused).
MOE = "qwen1.5-moe-a2.7b"

#: The scope sets a loop without recompute accepts, by Megatron-Core's rules as gpuplan takes
#: them (transformer_config.py at NVIDIA/Megatron-LM@b0cc2706): any of attn and moe_router,
#: moe_preprocess only beside moe_router, full alone. Counted by hand, in the names' order.
SCOPE_SETS = [["attn"], ["moe_router"], ["full"], ["attn", "moe_router"],
              ["moe_router", "moe_preprocess"], ["attn", "moe_router", "moe_preprocess"]]


def _argv(body: dict) -> list[str]:
    """``gpuplan fit`` arguments for a request body (the flags are the keys with dashes)."""
    argv = [body["model"]]
    for k, v in body.items():
        if k == "model":
            continue
        for item in (v if k == "gpu" else [v]):
            argv += [f"--{k.replace('_', '-')}", ",".join(item) if isinstance(item, list)
                     else str(item)]
    return argv


def _cli_error(*argv: str) -> str:
    """The one line ``gpuplan ARGS`` prints on stderr for a refused job, less its prefix."""
    from gpuplan.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(list(argv)) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error: "), lines
    return lines[0].removeprefix("gpuplan: error: ")


def _as_keys(cli_line: str) -> str:
    """A CLI line as the API spells it: ``--optimizer-states`` -> ``optimizer_states``."""
    return re.sub(r"--([a-z][a-z0-9-]*)", lambda m: m.group(1).replace("-", "_"), cli_line)


@pytest.mark.parametrize("extra", [
    {"master_weights": "bf16"},
    {"master_weights": "fp32", "precision": "fp8-current"},
    {"engine": "megatron", "master_weights": "bf16", "optimizer_states": "bf16"},
    # no seq: the model's default (this job was a TypeError, a 500, before)
    {"engine": "megatron", "cuda_graph_scope": ["full"]},
    {"model": MOE, "engine": "megatron", "cuda_graph_scope": ["attn", "moe_router"],
     "checkpointing": "selective", "seq": 4096},
], ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_fit_is_the_cli_json(client, cli_json, extra):
    body = {**TRAIN, **extra}
    r = client.post("/api/fit", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got == cli_json("fit", *_argv(body))
    for k, v in extra.items():
        assert got["job"][k] == v, k


def test_a_bf16_master_is_two_bytes_a_parameter(client):
    def master(**kw) -> int:
        r = client.post("/api/fit", json={**TRAIN, **kw})
        assert r.status_code == 200, r.text
        return {ln["key"]: ln["bytes"] for ln in r.json()["train"]["lines"]}["master_weights"]

    # mixed-bf16 keeps an fp32 master (auto), 4 bytes a parameter; bf16: 2
    assert master() == master(master_weights="fp32") == 4 * PARAMS
    assert master(master_weights="bf16") == 2 * PARAMS == 2_471_628_800


@pytest.mark.parametrize("extra", [{"master_weights": "bf16"},
                                   {"engine": "megatron", "cuda_graph_scope": ["full"]}],
                         ids=["master_weights", "cuda_graph_scope"])
def test_speed_is_the_cli(client, cli_json, extra):
    body = {**TRAIN, **extra}
    r = client.post("/api/speed", json={**body, "gpu": GPU})
    assert r.status_code == 200, r.text
    cli = cli_json("speed", *_argv(body))
    est = r.json()["train"]["estimate"]
    for key in ("step_time_s", "tokens_per_s", "mfu", "flops_per_step"):
        assert est[key] == cli[key], key


def test_cluster_takes_the_master_and_refuses_the_graphs_as_the_cli(client, cli_json):
    search = {"model": MODEL, "mode": "train", "gpu": GPU, "gpus": 8, "global_batch": 32,
              "seq": 2048}
    argv = ["cluster", MODEL, "--mode", "train", "--gpu", GPU, "--gpus", "8", "--global-batch",
            "32", "--seq", "2048"]
    r = client.post("/api/cluster", json={**search, "master_weights": "bf16"})
    assert r.status_code == 200, r.text
    want = cli_json(*argv, "--master-weights", "bf16")
    want.pop("elapsed_s")
    assert r.json() == want
    r = client.post("/api/cluster", json={**search, "engine": "megatron",
                                          "cuda_graph_scope": ["full"]})
    assert r.status_code == 422
    assert r.json()["error"] == ("cluster does not take 'cuda_graph_scope' (it is planned by "
                                 "/api/fit; the layout keys are what it searches)")
    assert _cli_error(*argv, "--engine", "megatron", "--cuda-graph-scope", "full") == (
        "cluster does not take --cuda-graph-scope (it is planned by `gpuplan fit`); drop it")


#: Refused values, each the CLI's own refusal: (body beside TRAIN, the field, the fix).
REFUSED = [
    ({"master_weights": "fp16"}, "master_weights", None),
    ({"master_weights": "bf16", "precision": "bf16"}, "master_weights",
     {"master_weights": "auto"}),
    ({"master_weights": "bf16", "engine": "megatron"}, "master_weights",
     {"optimizer_states": "bf16"}),
    ({"cuda_graph_scope": ["full"]}, "cuda_graph_scope", {"engine": "megatron"}),
    ({"cuda_graph_scope": ["full", "attn"], "engine": "megatron"}, "cuda_graph_scope",
     {"cuda_graph_scope": ["full"]}),
    ({"cuda_graph_scope": ["mlp"], "engine": "megatron"}, "cuda_graph_scope", None),
    ({"cuda_graph_scope": ["moe_router"], "engine": "megatron"}, "cuda_graph_scope", None),
    ({"cuda_graph_scope": ["full"], "engine": "megatron", "checkpointing": "selective"},
     "cuda_graph_scope", {"checkpointing": "none"}),
    ({"cuda_graph_scope": ["moe_preprocess"], "engine": "megatron"}, "cuda_graph_scope",
     {"cuda_graph_scope": ["moe_router", "moe_preprocess"]}),
]


@pytest.mark.parametrize("route", ["/api/fit", "/api/speed"])
@pytest.mark.parametrize("extra,field,fix", REFUSED,
                         ids=[",".join(f"{k}={v}" for k, v in e.items()) for e, _, _ in REFUSED])
def test_a_refused_value_is_the_cli_line_in_json_keys(client, route, extra, field, fix):
    body = {**TRAIN, **extra}
    r = client.post(route, json={**body, "gpu": GPU} if route == "/api/speed" else body)
    assert r.status_code == 422, r.text
    d = r.json()
    assert "\n" not in d["error"] and "--" not in d["error"]
    assert d["error"] == _as_keys(_cli_error("fit", *_argv(body)))
    assert d["field"] == field
    if fix is not None:
        assert d["fix"] == fix


@pytest.mark.parametrize("value,needle", [
    (16, "master_weights 16: expected one of auto, fp32, bf16, remainder, none"),
    (None, "master_weights None: expected one of auto, fp32, bf16, remainder, none"),
])
def test_a_master_of_the_wrong_json_type_is_one_line(client, value, needle):
    r = client.post("/api/fit", json={**TRAIN, "master_weights": value})
    assert r.status_code == 422 and r.json()["error"] == needle


@pytest.mark.parametrize("value,needle", [
    ("full", "cuda_graph_scope 'full': expected a list of strings or null"),
    ([1], "cuda_graph_scope [1]: expected a list of strings or null"),
    ([], "cuda_graph_scope (): expected 1 to"),
])
def test_a_scope_that_is_not_a_list_of_names_is_one_line(client, value, needle):
    r = client.post("/api/fit", json={**MEGATRON, "cuda_graph_scope": value})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err.startswith(needle) and "\n" not in err, err


def test_options_offer_both_with_the_jobs_defaults(client):
    o = client.get("/api/options").json()
    assert o["master_weights"] == ["auto", "fp32", "bf16", "remainder", "none"]
    assert o["defaults"]["master_weights"] == "auto"
    assert o["cuda_graph_scope"] == SCOPE_SETS
    assert o["defaults"]["cuda_graph_scope"] is None


@pytest.mark.parametrize("scope", SCOPE_SETS, ids=[",".join(s) for s in SCOPE_SETS])
def test_every_offered_scope_plans_as_the_cli(client, cli_json, scope):
    # full graphs a dense model (a MoE one only under token drop); the router's scopes a MoE one
    model = MODEL if scope == ["full"] or "moe_router" not in scope else MOE
    body = {**MEGATRON, "model": model, "cuda_graph_scope": scope, "seq": 2048}
    r = client.post("/api/fit", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json("fit", *_argv(body))


@pytest.mark.parametrize("command", ["fit", "speed"])
def test_the_help_lists_both_with_the_offered_choices(client, command, capsys):
    from gpuplan.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    o = client.get("/api/options").json()
    master = text.split("--master-weights DTYPE ", 1)[1][:300]
    assert f"{', '.join(o['master_weights'])} (default auto" in master
    graphs = text.split("--cuda-graph-scope S1,S2 ", 1)[1][:400]
    for name in {n for s in o["cuda_graph_scope"] for n in s}:
        assert re.search(rf"\b{name}\b", graphs), name
