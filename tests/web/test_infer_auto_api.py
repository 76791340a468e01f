"""One truth for ``infer_precision`` ``auto`` (issues 28/30): ``POST /api/fit`` plans a shipped
quantized checkpoint as the CLI does, and the page's options list ``auto`` as the default."""

from __future__ import annotations

import pytest

CASES = [
    (["gpt-oss-120b", "--mode", "infer", "--gpu", "H100-SXM-80GB"],
     {"model": "gpt-oss-120b", "mode": "infer", "gpu": ["H100-SXM-80GB"]}),
    (["gpt-oss-120b", "--mode", "infer", "--precision", "bf16", "--gpu", "H100-SXM-80GB"],
     {"model": "gpt-oss-120b", "mode": "infer", "infer_precision": "bf16",
      "gpu": ["H100-SXM-80GB"]}),
    (["deepseek-v3", "--mode", "infer", "--gpu", "H200-SXM-141GB", "--gpus", "8", "--tp", "8",
      "--engine", "vllm"],
     {"model": "deepseek-v3", "mode": "infer", "gpu": ["H200-SXM-141GB"], "gpus": 8, "tp": 8,
      "engine": "vllm"}),
    (["gpt-oss-120b", "--gpu", "H100-SXM-80GB"], {"model": "gpt-oss-120b",
                                                  "gpu": ["H100-SXM-80GB"]}),
]


@pytest.mark.parametrize("argv,body", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_fit_is_the_cli_json(client, cli_json, argv, body):
    r = client.post("/api/fit", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got == cli_json("fit", *argv)
    want = "bf16" if body.get("infer_precision") == "bf16" else (
        "fp8-block" if body["model"] == "deepseek-v3" else "mxfp4")
    assert got["infer"]["precision"] == want
    assert got["job"]["infer_precision"] == body.get("infer_precision", "auto")


def test_options_offer_auto_as_the_default():
    from gpuplan.web._service import options

    o = options()
    assert o["defaults"]["infer_precision"] == "auto"
    assert o["infer_precision"][0] == "auto" and "bf16" in o["infer_precision"]
