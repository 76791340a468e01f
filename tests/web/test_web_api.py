"""The JSON API in-process: every answer is the CLI's, every error one JSON line."""

from __future__ import annotations

import json
from dataclasses import MISSING

import pytest

from gpuplan.job import FLAT_FIELDS, Job, flat_defaults

#: An error response: its line and, for a refused value, the data (InputError.to_dict).
ERROR_KEYS = {"error", "field", "value", "accepted", "fix"}

#: (gpuplan fit argv, the same job as an API body): 24 jobs across the catalog, modes, recipes,
#: formats, LoRA/QLoRA, ZeRO, checkpointing, attention, KV formats and the fit flags.
CASES = [
    (["llama-3.1-8b"], {"model": "llama-3.1-8b"}),
    (["gpt2"], {"model": "gpt2"}),
    (["llama-3.1-8b", "--gpu", "H100-SXM-80GB"], {"model": "llama-3.1-8b", "gpu": ["H100-SXM-80GB"]}),
    (["llama-3.1-8b", "--gpu", "RTX-4090"], {"model": "llama-3.1-8b", "gpu": "RTX-4090"}),
    (["llama-3.1-8b", "--gpu", "h100", "--batch", "4", "--seq", "4096"],
     {"model": "llama-3.1-8b", "gpu": ["h100"], "batch": 4, "seq": 4096}),
    (["qwen2.5-7b", "--mode", "train", "--precision", "amp-bf16", "--gpu", "A100-SXM-80GB"],
     {"model": "qwen2.5-7b", "mode": "train", "precision": "amp-bf16", "gpu": ["A100-SXM-80GB"]}),
    (["llama-3.1-8b", "--mode", "infer", "--precision", "int8", "--context", "8192"],
     {"model": "llama-3.1-8b", "mode": "infer", "infer_precision": "int8", "context": 8192}),
    (["mistral-7b", "--mode", "infer", "--kv-dtype", "fp8", "--batch", "16", "--gpu", "L40S"],
     {"model": "mistral-7b", "mode": "infer", "kv_dtype": "fp8", "batch": 16, "gpu": ["L40S"]}),
    (["llama-3.1-8b", "--lora-rank", "16", "--lora-base", "nf4", "--gpu", "T4"],
     {"model": "llama-3.1-8b", "lora_rank": 16, "lora_base": "nf4", "gpu": ["T4"]}),
    (["llama-3.1-8b", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj"],
     {"model": "llama-3.1-8b", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"]}),
    (["llama-3.1-70b", "--gpus", "8", "--zero", "3", "--gpu", "H100-SXM-80GB"],
     {"model": "llama-3.1-70b", "gpus": 8, "zero": 3, "gpu": ["H100-SXM-80GB"]}),
    (["gpt2", "--checkpointing", "full", "--attention", "eager", "--batch", "8"],
     {"model": "gpt2", "checkpointing": "full", "attention": "eager", "batch": 8}),
    (["gpt2", "--optimizer", "sgd-momentum", "--precision", "fp32"],
     {"model": "gpt2", "optimizer": "sgd-momentum", "precision": "fp32"}),
    (["llama-3.2-1b", "--precision", "bf16", "--optimizer-states", "fp32", "--fused-optimizer"],
     {"model": "llama-3.2-1b", "precision": "bf16", "optimizer_states": "fp32",
      "fused_optimizer": True}),
    (["llama-3.1-8b", "--offload-optimizer", "--zero", "2", "--gpus", "2"],
     {"model": "llama-3.1-8b", "offload_optimizer": True, "zero": 2, "gpus": 2}),
    (["llama-3.1-8b", "--grad-accum", "8", "--use-cache", "--infer-precision", "fp8"],
     {"model": "llama-3.1-8b", "grad_accum": 8, "use_cache": True, "infer_precision": "fp8"}),
    (["llama-3.1-8b", "--mode", "infer", "--prefill-logits", "all", "--seq", "1024"],
     {"model": "llama-3.1-8b", "mode": "infer", "prefill_logits": "all", "seq": 1024}),
    (["llama-3.1-8b", "--max-batch", "--max-seq", "--gpu", "H200-SXM-141GB"],
     {"model": "llama-3.1-8b", "max_batch": True, "max_seq": True, "gpu": ["H200-SXM-141GB"]}),
    (["gpt2", "--suggest", "--gpu", "T4"], {"model": "gpt2", "suggest": True, "gpu": ["T4"]}),
    (["llama-3.1-8b", "--overhead", "high", "--no-speed"],
     {"model": "llama-3.1-8b", "overhead": "high", "speed": False}),
    (["--params", "13B", "--gpu", "A100-SXM-40GB"], {"params": "13B", "gpu": ["A100-SXM-40GB"]}),
    ([], {}),
    (["mixtral-8x7b", "--mode", "infer", "--precision", "q4_k_m", "--gpu", "RTX-4090",
      "--gpu", "H100-SXM-80GB"],
     {"model": "mixtral-8x7b", "mode": "infer", "infer_precision": "q4_k_m",
      "gpu": ["RTX-4090", "H100-SXM-80GB"]}),
    (["vit-base", "--batch", "32"], {"model": "vit-base", "batch": 32}),
]


def test_enough_jobs():
    assert len(CASES) >= 20


@pytest.mark.parametrize("argv,body", CASES, ids=[" ".join(a) or "(defaults)" for a, _ in CASES])
def test_fit_is_the_cli_json(client, cli_json, argv, body):
    r = client.post("/api/fit", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json("fit", *argv)


def test_pasted_config_is_the_cli_on_that_file(client, cli_json, tmp_path):
    from gpuplan.models import catalog_config

    text = json.dumps(catalog_config("qwen2.5-0.5b"))
    (tmp_path / "config.json").write_text(text)
    want = cli_json("fit", str(tmp_path / "config.json"), "--gpu", "T4")
    got = client.post("/api/fit", json={"config": text, "gpu": ["T4"]}).json()
    # the model is named after its source: the file's folder there, "pasted config.json" here
    assert got["model"].pop("name") == "pasted config.json"
    assert got["job"].pop("model") == "pasted config.json"
    want["model"].pop("name"), want["job"].pop("model")
    assert got["model"].pop("source") == "config" == want["model"].pop("source")
    assert got == want


def test_speed_is_the_library_estimate_and_its_ceiling(client, cli_json):
    r = client.post("/api/speed", json={"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB",
                                        "batch": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    cli = cli_json("speed", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--batch", "2")
    est, top = d["train"]["estimate"], d["train"]["ceiling"]
    for key in ("step_time_s", "tokens_per_s", "mfu", "flops_per_step", "bound", "peak_flops"):
        assert est[key] == cli[key], key
    # the ceiling: the same FLOPs, every kernel at 100% of peak: never slower than the estimate
    assert top["flops_per_step"] == est["flops_per_step"]
    assert top["tokens_per_s"] > est["tokens_per_s"]
    # the fit page's speed row for this GPU is the same estimate
    fit = client.post("/api/fit", json={"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB",
                                        "batch": 2}).json()
    assert fit["speed"]["gpus"][0]["train"]["tokens_per_s"] == est["tokens_per_s"]
    assert d["infer"]["estimate"]["tokens_per_s"] == fit["speed"]["gpus"][0]["infer"]["tokens_per_s"]


def test_flops_is_the_cli(client, cli_json):
    r = client.post("/api/flops", json={"model": "gpt2", "batch": 2, "seq": 512})
    assert r.json() == cli_json("flops", "model", "gpt2", "--batch", "2", "--seq", "512")


def test_models_and_gpus_are_the_cli_lists(client, cli_json):
    assert client.get("/api/gpus").json() == cli_json("gpus")
    assert client.get("/api/models").json() == cli_json("models")
    names = [m["name"] for m in client.get("/api/models", params={"q": "LLAMA"}).json()["models"]]
    assert names and all("llama" in n for n in names)
    assert client.get("/api/models", params={"q": "no-such-model"}).json()["models"] == []


def test_options_defaults_are_the_jobs():
    from gpuplan.web._service import options

    o = options()
    for name, default in flat_defaults().items():
        if default is not MISSING:
            assert o["defaults"][name] == default, name
    assert o["mode"] == ["train", "infer", "both"]
    assert "mixed-bf16" in o["precision"] and "nf4" in o["infer_precision"]


def test_openapi_lists_every_job_field(client):
    s = client.get("/api/openapi.json").json()
    props = s["components"]["schemas"]["Job"]["properties"]
    assert list(props) == list(FLAT_FIELDS)
    assert props["mode"]["enum"] == ["train", "infer", "both"]
    assert {k: v for k, v in props["batch"].items() if k != "description"} == \
        {"type": "integer", "default": 1}
    from gpuplan.job import choices_of, flat_docs
    # generated from the Job: its field docstrings and its vocabulary
    assert props["batch"]["description"] == " ".join(flat_docs()["batch"].split())
    assert props["engine"]["enum"] == list(choices_of("engine"))
    assert props["optimizer"]["enum"] == list(choices_of("optimizer"))
    assert set(s["paths"]) >= {"/api/fit", "/api/speed", "/api/models", "/api/gpus"}


@pytest.mark.parametrize("body,status,message", [
    ({"model": "llama-3.1-8b", "batchsize": 2}, 422, "unknown job key 'batchsize'; did you mean 'batch', 'micro_batches'?"),
    ({"model": "lama-3.1-8b"}, 422, "unknown model 'lama-3.1-8b'; did you mean"),
    ({"model": "/etc/passwd"}, 422, "unknown model '/etc/passwd'"),
    ({"model": "./config.json"}, 422, "unknown model './config.json'"),
    ({"model": "gpt2", "batch": 0}, 422, "batch 0: expected a whole number >= 1"),
    ({"model": "gpt2", "batch": "2"}, 422, "batch '2': expected a whole number"),
    ({"model": "gpt2", "gpu": ["H1000"]}, 422, "unknown GPU 'H1000'"),
    ({"model": "gpt2", "gpu": ["T4"] * 17}, 422, "at most 16 per request"),
    ({"model": "gpt2", "overhead": "max"}, 422, "overhead 'max': expected one of low"),
    ({"model": "gpt2", "config": "{}"}, 422, "give one of model, config, params"),
    ({"config": "{\"model_type\": \"llama\", \"x\": NaN}"}, 422, "pasted config.json: is not valid JSON"),
    ({"config": "[1]"}, 422, "pasted config.json: must hold a JSON object"),
    ({"model": "gpt2", "seq": 10**9}, 422, "seq 1000000000: gpt2 supports at most"),
    ([1, 2], 422, "request body: expected a JSON object"),
    # pipeline-shaping keys without a pipeline did nothing in silence; refused as the CLI does
    ({"model": "llama-3.1-8b", "micro_batches": 4}, 422,
     "micro_batches without pp: it shapes a pipeline, and there is none; give pp 2 or more, or "
     "drop it (grad_accum 4 accumulates micro-batches without a pipeline)"),
    ({"model": "llama-3.1-8b", "pp_schedule": "interleaved:2"}, 422,
     "pp_schedule without pp: it shapes a pipeline"),
    # the library's fix names command-line options; a request is told its JSON keys
    ({"model": "llama-3.1-8b", "gpus": 3, "tp": 3}, 422,
     "tp 3: llama-3.1-8b has 32 attention heads, not divisible by 3; use tp 1 (or 2 or 4 with "
     "gpus a multiple of it)"),
])
def test_bad_input_is_one_json_line(client, body, status, message):
    r = client.post("/api/fit", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert message in err and "\n" not in err and "Traceback" not in err
    assert "--" not in err, err


def test_http_errors_are_json(client):
    cases = [
        (client.post("/api/fit", content=b"{", headers={"content-type": "application/json"}), 400),
        (client.post("/api/fit", content=b"model=gpt2",
                     headers={"content-type": "application/x-www-form-urlencoded"}), 415),
        (client.post("/api/fit", content=b"{\"batch\": NaN}",
                     headers={"content-type": "application/json"}), 400),
        (client.get("/api/fit"), 405),
        (client.get("/api/nothing"), 404),
        (client.get("/static/../../etc/passwd"), 404),
        (client.get("/", headers={"host": "attacker.example"}), 400),
    ]
    for r, status in cases:
        assert r.status_code == status, (r.request.url, r.text)
        assert set(r.json()) <= ERROR_KEYS and "\n" not in r.json()["error"]


def test_body_is_capped_at_one_megabyte(client):
    from gpuplan.web import MAX_BODY_BYTES

    big = json.dumps({"config": "x" * MAX_BODY_BYTES}).encode()
    r = client.post("/api/fit", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "bytes" in r.json()["error"]
    # a config.json just over 1 MB fits in the body but not in the config reader
    cfg = json.dumps({"config": " " * 1_000_001})
    r = client.post("/api/fit", content=cfg, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "at most 1,000,000 are read" in r.json()["error"]


def test_no_cors_and_a_strict_page_policy(client):
    r = client.post("/api/fit", json={"model": "gpt2", "gpu": "T4"},
                    headers={"origin": "https://attacker.example"})
    assert r.status_code == 200
    assert not any(k.lower().startswith("access-control-") for k in r.headers)
    page = client.get("/")
    assert page.status_code == 200 and "<title>gpuplan" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    pre = client.options("/api/fit", headers={"origin": "https://attacker.example",
                                             "access-control-request-method": "POST"})
    assert pre.status_code == 405
    assert not any(k.lower().startswith("access-control-") for k in pre.headers)


def test_page_assets_are_shipped_and_need_no_network(client):
    html = client.get("/").text
    for asset in ("/static/app.js", "/static/style.css"):
        assert asset in html
        assert client.get(asset).status_code == 200
    for text in (html, client.get("/static/app.js").text, client.get("/static/style.css").text):
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text


def test_server_error_is_one_line_without_a_trace(client, monkeypatch):
    from gpuplan.web import _service

    def boom(body):
        raise ZeroDivisionError("secret detail")

    monkeypatch.setattr(_service, "fit", boom)
    r = client.post("/api/fit", json={})
    assert r.status_code == 500
    assert r.json() == {"error": "internal error (ZeroDivisionError); the server log has the "
                                 "details"}


#: (gpuplan cluster argv, the same search as an API body): training and serving searches.
CLUSTER_CASES = [
    (["cluster", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--global-batch", "64",
      "--seq", "4096"],
     {"model": "llama-3.1-8b", "gpu": "h100", "gpus": 16, "global_batch": 64, "seq": 4096}),
    (["cluster", "mixtral-8x7b", "--gpu", "A100-SXM-80GB", "--gpus", "8", "--global-batch", "16",
      "--seq", "2048", "--top", "2", "--tp-overlap"],
     {"model": "mixtral-8x7b", "gpu": "A100-SXM-80GB", "gpus": 8, "global_batch": 16,
      "seq": 2048, "top": 2, "tp_overlap": True}),
    (["cluster", "llama-3.1-70b", "--gpu", "H100-SXM-80GB", "--gpus", "8", "--mode", "infer",
      "--concurrency", "32", "--context", "8192", "--max-token-ms", "50", "--engine", "vllm"],
     {"model": "llama-3.1-70b", "gpu": "H100-SXM-80GB", "gpus": 8, "mode": "infer",
      "concurrency": 32, "context": 8192, "max_token_ms": 50, "engine": "vllm"}),
]


@pytest.mark.parametrize("argv,body", CLUSTER_CASES, ids=lambda v: "-".join(map(str, v))[:60]
                         if isinstance(v, list) else None)
def test_cluster_is_the_cli_json(client, cli_json, argv, body):
    """``POST /api/cluster`` answers what ``gpuplan cluster --json`` prints, less elapsed_s (the
    search's wall time on this machine)."""
    want = cli_json(*argv)
    want.pop("elapsed_s")
    r = client.post("/api/cluster", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert "elapsed_s" not in got
    assert got == want


@pytest.mark.parametrize("body,needle", [
    ({"model": "gpt2", "gpu": "h100", "global_batch": 8, "tp": 2}, "cluster does not take 'tp'"),
    ({"model": "gpt2", "gpu": "h100", "global_batch": 8, "top": 11}, "top 11"),
    ({"model": "gpt2", "gpu": ["h100", "a100"], "global_batch": 8}, "name one GPU"),
    ({"model": "gpt2", "global_batch": 8}, "name one GPU"),
    ({"model": "gpt2", "gpu": "h100", "mode": "infer", "concurrency": 4, "max_token_ms": -1},
     "max_token_ms"),
    ({"model": "gpt2", "gpu": "h100", "global_batch": True}, "global_batch"),
    ({"model": "/etc/passwd", "gpu": "h100", "global_batch": 8}, "model"),
    ({"model": "gpt2", "gpu": "h100", "global_batch": 8, "concurrency": 4},
     "concurrency: a mode infer option"),
    ({"model": "gpt2", "gpu": "h100", "mode": "infer", "concurrency": 4, "global_batch": 8},
     "global_batch: a mode train option"),
    # found by fuzzing the API (stop 24): each was a 500, or ran on silently
    ({"model": "gpt2", "gpu": "h100", "mode": "infer", "concurrency": 4,
      "max_token_ms": 10**400}, "max_token_ms"),
    ({"model": "gpt2", "gpu": "h100", "global_batch": 8, "mode": "both"}, "train or infer"),
    ({"model": "gpt2", "gpu": "custom:80GB,pcie=" + "9" * 5000 + "x16", "global_batch": 8},
     "longer than 256 characters"),
    ({"model": "gpt2", "gpu": "x" * 1_000_000, "global_batch": 8},
     "longer than 256 characters"),
    ({"model": "gpt2", "gpu": "custom:80GB,pcie=999x16", "global_batch": 8},
     "expected GENxLANES"),
])
def test_cluster_bad_requests_are_one_line(client, body, needle):
    r = client.post("/api/cluster", json=body)
    assert r.status_code == 422, r.text
    msg = r.json()["error"]
    assert needle in msg and "\n" not in msg and len(msg) < 600


def test_a_lone_surrogate_in_a_pasted_config_is_one_line(client):
    # JSON may carry \ud800 escaped; it is no UTF-8 text (it was a 500)
    body = '{"config": "\\ud800", "gpu": "h100"}'
    r = client.post("/api/fit", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert "unpaired surrogate" in r.json()["error"]
