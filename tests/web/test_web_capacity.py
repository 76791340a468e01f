"""``POST /api/capacity`` answers what ``gpuplan capacity --json`` prints for the same job, and
refuses bad input with one JSON line."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv,body", [
    (["--tp", "1", "--rate", "3", "--requests", "60", "--input", "500", "--output", "32"],
     {"tp": 1, "rate": 3, "requests": 60, "input": 500, "output": 32}),
    (["--rate", "4", "--requests", "80", "--input", "500", "--output", "32", "--slo-ttft", "1",
      "--slo-tpot", "0.1", "--engine", "sglang"],
     {"rate": 4, "requests": 80, "input": 500, "output": 32, "slo_ttft": 1, "slo_tpot": 0.1,
      "engine": "sglang"}),
    (["--tp", "2", "--concurrency", "4", "--requests", "20", "--input-dist", "uniform:100:900",
      "--output", "16", "--price", "2"],
     {"tp": 2, "concurrency": 4, "requests": 20, "input_dist": "uniform:100:900", "output": 16,
      "price": 2}),
    (["--tp", "1", "--concurrency", "4", "--requests", "20", "--input", "500", "--output", "32",
      "--sweep"],
     {"tp": 1, "concurrency": 4, "requests": 20, "input": 500, "output": 32, "sweep": True}),
    (["--rate", "4", "--requests", "40", "--input", "500", "--output", "32", "--slo-ttft", "1",
      "--slo-tpot", "0.1", "--max-gpus", "4", "--sweep"],
     {"rate": 4, "requests": 40, "input": 500, "output": 32, "slo_ttft": 1, "slo_tpot": 0.1,
      "max_gpus": 4, "sweep": True}),
    # every prompt from the cache (a published row's 1.0): both front ends take [0, 1]
    (["--tp", "1", "--rate", "2", "--requests", "20", "--input", "500", "--output", "8",
      "--prefix-hit", "1"],
     {"tp": 1, "rate": 2, "requests": 20, "input": 500, "output": 8, "prefix_hit": 1}),
])
def test_capacity_is_the_cli_json(client, cli_json, argv, body):
    base = {"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "max_model_len": 4096}
    r = client.post("/api/capacity", json={**base, **body})
    assert r.status_code == 200, r.text
    want = cli_json("capacity", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--max-model-len",
                    "4096", *argv)
    assert r.json() == want


@pytest.mark.parametrize("body,field", [
    ({"rate": 0}, "rate"),
    ({"rate": -2}, "rate"),
    ({"rate": 1, "requests": 100000}, "requests"),
    ({"rate": 1, "slo_percentile": 95}, "slo_percentile"),
    ({}, "rate"),
    # qa43: tp/pp were multiplied through int() before any check: "x", [2] and a NaN/inf (which
    # JSON cannot carry, but the Python handler can) raised from int() (a 500), and pp -1 was
    # blamed on a gpus the request never sent
    ({"rate": 1, "tp": "x"}, "tp"),
    ({"rate": 1, "tp": [2]}, "tp"),
    ({"rate": 1, "pp": 1.5}, "pp"),
    ({"rate": 1, "pp": -1}, "pp"),
    ({"rate": 1, "tp": 10**300}, "tp"),
])
def test_bad_capacity_input_is_one_json_line(client, body, field):
    r = client.post("/api/capacity", json={"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB",
                                           "max_model_len": 4096, **body})
    assert r.status_code == 422
    d = r.json()
    assert "\n" not in d["error"] and d.get("field") == field


@pytest.mark.parametrize("key,value", [("tp", "x"), ("pp", [1]), ("tp", float("nan")),
                                       ("pp", float("inf"))])
def test_a_hostile_tp_or_pp_is_an_input_error_naming_it(key, value):
    """The handler itself (values JSON cannot carry, NaN and inf, included): an InputError naming
    the key, never int()'s ValueError/OverflowError."""
    from gpuplan.errors import InputError
    from gpuplan.web import _service

    with pytest.raises(InputError, match=f"^{key} "):
        _service.capacity({"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "rate": 1,
                           key: value})


def test_openapi_describes_capacity(client):
    s = client.get("/api/openapi.json").json()
    assert "/api/capacity" in s["paths"]
    props = s["components"]["schemas"]["CapacityRequest"]["properties"]
    assert {"rate", "concurrency", "slo_ttft", "slo_tpot", "max_rate"} <= set(props)


def test_the_sweep_holds_the_answer_at_its_own_load_and_finds_the_knee(client):
    """The sweep's point at the given load is the answer itself; the knee is the first point
    whose p99 TTFT is over three times the lowest load's."""
    d = client.post("/api/capacity", json={"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB",
                                           "max_model_len": 4096, "tp": 1, "concurrency": 4,
                                           "requests": 20, "input": 500, "output": 32,
                                           "sweep": True}).json()
    sw = d["sweep"]
    assert sw["load"] == "concurrency"
    assert [p["concurrency"] for p in sw["points"]] == [1, 2, 3, 4, 5, 6, 8]  # 0.25x .. 2x of 4
    at4 = sw["points"][3]
    assert at4["ttft_s"] == d["ttft_s"] and at4["e2e_s"] == d["e2e_s"]
    assert at4["requests_per_s"] == d["throughput"]["requests_per_s"]
    p99 = [p["ttft_s"]["p99"] for p in sw["points"]]
    want = next((i for i, x in enumerate(p99) if x > 3 * p99[0]), None)
    assert sw["knee"] == want
    assert sw["knee_requests_per_s"] == (None if want is None else
                                         sw["points"][want]["requests_per_s"])
