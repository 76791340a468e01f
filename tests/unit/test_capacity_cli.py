"""`gpuplan capacity` on the command line: the answer in JSON, and each bad input one line with
exit 2 (a rate of 0 or below, a workload file that is huge, truncated or has a broken line, an
SLO no layout meets -- which says the best achievable)."""

from __future__ import annotations

import json

import pytest

from gpuplan.capacity import _workload
from gpuplan.cli import main

BASE = ["capacity", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4096"]


def _err(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuplan: error:") and "\n" not in err
    return err


def test_json_answer(capsys):
    assert main(BASE + ["--tp", "1", "--rate", "2", "--requests", "60", "--input", "500",
                        "--output", "32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"]["gpus"] == 1 and d["workload"]["requests"] == 60
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(d[key]) == {"mean", "p50", "p90", "p99"}
    assert set(d["throughput"]) == {"requests_per_s", "input_tokens_per_s",
                                    "output_tokens_per_s"}
    assert d["concurrency_mean"] > 0 and d["preemptions"] == 0


def test_search_finds_a_layout_meeting_the_slo(capsys):
    assert main(BASE + ["--rate", "4", "--requests", "100", "--input", "500", "--output", "32",
                        "--slo-ttft", "1", "--slo-tpot", "0.1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["meets_slo"] and d["ttft_s"]["p99"] <= 1 and d["tpot_s"]["p99"] <= 0.1
    assert d["gpus"] == min(c["gpus"] for c in d["searched"] if c["meets_slo"])


@pytest.mark.parametrize("rate", ["0", "-1", "nan"])
def test_bad_rate(capsys, rate):
    assert "--rate" in _err(capsys, BASE + ["--rate", rate])


def test_impossible_slo_says_the_best_reached(capsys):
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "20", "--input", "500", "--output",
                               "16", "--slo-ttft", "0.000001", "--max-gpus", "2"])
    assert "best reached" in err and "TTFT" in err


@pytest.mark.parametrize("text,what", [
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n{"arrival_s": 1, "inp', "truncated"),
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n{oops}\n', "JSON"),
    ('{"arrival_s": 0, "input_tokens": 10}\n', "output_tokens"),
    ('{"arrival_s": 0, "input_tokens": -3, "output_tokens": 5}\n', "input_tokens"),
    ('[1, 2]\n', "object"),
])
def test_broken_workload_file(capsys, tmp_path, text, what):
    f = tmp_path / "w.jsonl"
    f.write_text(text)
    assert what in _err(capsys, BASE + ["--tp", "1", "--workload", str(f)])


def test_huge_workload_file(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(_workload, "MAX_WORKLOAD_BYTES", 100)
    f = tmp_path / "w.jsonl"
    f.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n' * 10)
    assert "limit" in _err(capsys, BASE + ["--tp", "1", "--workload", str(f)])


def test_workload_file_with_prefixes(capsys, tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text("".join(
        json.dumps({"arrival_s": i * 2.0, "input_tokens": 2000, "output_tokens": 4,
                    "prefix_id": "sys", "prefix_tokens": 1800}) + "\n" for i in range(6)))
    assert main(BASE + ["--tp", "1", "--workload", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["workload"]["requests"] == 6
    # the first request computes the prefix; the rest hit it, so the p50 TTFT is far shorter
    assert d["ttft_s"]["p50"] < 0.5 * d["ttft_s"]["p99"]


def test_request_longer_than_max_model_len(capsys):
    assert "max-model-len" in _err(capsys, BASE + ["--tp", "1", "--rate", "1", "--input",
                                                   "4000", "--output", "200"])


def test_export_vllm_sets_the_simulated_knobs(capsys):
    assert main(BASE + ["--tp", "2", "--replicas", "2", "--rate", "2", "--requests", "40",
                        "--input", "500", "--output", "16", "--max-num-seqs", "128",
                        "--export", "vllm", "--json"]) == 0
    cmd = json.loads(capsys.readouterr().out)["export"].split()
    def val(flag):
        return cmd[cmd.index(flag) + 1]
    assert cmd[:2] == ["vllm", "serve"]
    assert val("--tensor-parallel-size") == "2" and val("--data-parallel-size") == "2"
    assert val("--max-num-seqs") == "128" and val("--max-model-len") == "4096"
    assert val("--max-num-batched-tokens") == "8192" and val("--block-size") == "16"
    assert "sglang" in _err(capsys, BASE + ["--tp", "1", "--rate", "1", "--export", "sglang"])


def test_a_whole_prompt_from_the_cache_is_accepted_as_the_library_accepts_it(capsys):
    """--prefix-hit takes [0, 1] as Deployment.run does (a published row serves every prompt
    from the cache: 1.0); the command line had kept the open [0, 1) fraction and refused 1."""
    argv = BASE + ["--tp", "1", "--rate", "1", "--requests", "10", "--input", "512",
                   "--output", "4", "--json"]
    assert main(argv + ["--prefix-hit", "1"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(argv + ["--prefix-hit", "0"]) == 0
    cold = json.loads(capsys.readouterr().out)
    assert full["ttft_s"]["p50"] < cold["ttft_s"]["p50"]
    assert "expected a share of each prompt >= 0 and <= 1" in _err(capsys, argv + ["--prefix-hit",
                                                                                   "1.01"])


def test_an_expert_parallel_replica_is_the_layout_fit_plans(cli):
    """One truth (onetruth43): capacity counted a replica as tp x pp x ep GPUs, so `--tp 2 --ep 2`
    became a data-parallel pair of TP-2 ranks (4 GPUs, each rank's KV cache and step) of which
    one scheduler was simulated, while fit refused the 2-GPU layout and the vllm export wrote a
    2-GPU TP-2 engine. A replica is tp x pp GPUs: capacity refuses what fit refuses, in the same
    words, and a folded EP (--etp 1) replica has fit's GPUs, KV cache and batch-1 latencies."""
    lay = ["qwen3-30b-a3b", "--gpu", "H100-SXM-80GB", "--engine", "vllm", "--tp", "2",
           "--ep", "2"]
    work = ["--rate", "0.001", "--requests", "4", "--input", "2048", "--output", "128"]
    code_c, _, err_c = cli("capacity", *lay, *work)
    code_f, _, err_f = cli("fit", *lay, "--gpus", "2", "--mode", "infer", "--seq", "2048")
    assert code_c == code_f == 2 and err_c == err_f and "--etp 1" in err_c
    code, out, err = cli("capacity", *lay, "--etp", "1", *work, "--json")
    assert code == 0, err
    cap = json.loads(out)
    code, out, err = cli("fit", *lay, "--etp", "1", "--gpus", "2", "--mode", "infer", "--seq",
                         "2048", "--json")
    assert code == 0, err
    fit = json.loads(out)
    assert cap["layout"]["gpus"] == cap["gpus"] == fit["job"]["gpus"] == 2
    assert cap["kv"]["kv_tokens"] == fit["infer"]["engine"]["kv_tokens"]
    assert cap["kv"]["available_kv_bytes"] == fit["infer"]["engine"]["available_kv_bytes"]
    speed = fit["speed"]["gpus"][0]["infer"]
    assert cap["ttft_s"]["mean"] == pytest.approx(speed["ttft_s"], rel=1e-6)
    assert cap["tpot_s"]["mean"] == pytest.approx(speed["tpot_s"], rel=1e-6)
