"""``power_limit_w`` through the JSON API: the cluster search refused it (it was not one of
SEARCH_JOB_FIELDS) while fit, speed and capacity took it; now every endpoint takes it and
answers as the command line does (qa38)."""

from __future__ import annotations


def test_cluster_api_takes_the_limit_and_answers_as_the_cli(client, cli_json):
    body = {"model": "llama-3.1-8b", "mode": "train", "gpu": "H100-SXM-80GB", "gpus": 8,
            "global_batch": 32, "seq": 2048, "power_limit_w": 500}
    r = client.post("/api/cluster", json=body)
    assert r.status_code == 200, r.text
    api = r.json()
    cli = cli_json("cluster", "llama-3.1-8b", "--mode", "train", "--gpu", "H100-SXM-80GB",
                   "--gpus", "8", "--global-batch", "32", "--seq", "2048",
                   "--power-limit-w", "500")
    assert api["best"][0]["tokens_per_s"] == cli["best"][0]["tokens_per_s"]
    assert "--power-limit-w 500" in api["best"][0]["command"]
    assert any(n.startswith("power limit 500 W (TDP 700 W)") for n in api["notes"])


def test_a_bad_limit_is_one_json_line_naming_the_field(client):
    r = client.post("/api/cluster", json={"model": "llama-3.1-8b", "mode": "train",
                                          "gpu": "H100-SXM-80GB", "gpus": 8,
                                          "global_batch": 32, "power_limit_w": -1})
    assert r.status_code == 422
    assert r.json()["error"] == ("power_limit_w -1.0: out of range; expected a power limit in "
                                 "watts > 0 and <= 10^5")
