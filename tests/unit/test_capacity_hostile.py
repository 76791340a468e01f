"""Hostile input to `gpuplan capacity` (issue qa41): each bad value one line naming it, exit 2;
a version spelled the way `gpuplan fit` accepts it is accepted here too, and gives the same KV
tokens."""

from __future__ import annotations

import json

import pytest

from gpuplan.capacity._workload import Dist, make_workload
from gpuplan.cli import main
from gpuplan.errors import InputError

BASE = ["capacity", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4096", "--tp", "1"]

def _err(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuplan: error:") and "\n" not in err
    return err

def test_a_rate_so_low_the_clock_cannot_time_a_step(capsys):
    # 50 requests at 1e-300/s arrive ~1e301 s apart: a float clock there cannot tell a 7 ms
    # decode step from none (it printed a p50 TTFT and E2E of 0.0 ms); the span is refused
    err = _err(capsys, BASE + ["--rate", "1e-300", "--requests", "50"])
    assert "--rate" in err and "1e-300" in err and "--requests" in err
    with pytest.raises(InputError, match="span"):
        make_workload(input=Dist("fixed", 10), output=Dist("fixed", 2), requests=2000,
                      rate=1e-6)

def test_the_lowest_rate_accepted_still_times_the_steps(capsys):
    # 20 requests spanning ~10^9 s: the p50 TTFT stays the idle engine's prefill (> 1 ms)
    assert main(BASE + ["--rate", "2.1e-8", "--requests", "20", "--input", "500", "--output",
                        "8", "--arrivals", "constant", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ttft_s"]["p50"] > 1e-3 and d["e2e_s"]["p50"] > d["ttft_s"]["p50"]

@pytest.mark.parametrize("engine,version", [("vllm", "v0.21"), ("sglang", " v0.5 ")])
def test_version_spelled_as_fit_takes_it(capsys, engine, version):
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100", "--mode", "infer", "--engine", engine,
                 "--engine-version", version, "--json"]) == 0
    fit_kv = json.loads(capsys.readouterr().out)["infer"]["engine"]["kv_tokens"]
    assert main(["capacity", "llama-3.1-8b", "--gpu", "h100", "--tp", "1", "--engine", engine,
                 "--engine-version", version, "--rate", "1", "--requests", "5", "--input",
                 "100", "--output", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv"]["kv_tokens"] == fit_kv

@pytest.mark.parametrize("cmd", ["fit", "capacity"])
@pytest.mark.parametrize("version", ["-1", "0..5", "0.5.x", "", " "])  # qa43: "" was the default
def test_malformed_version_is_named_so(capsys, cmd, version):
    argv = (["fit", "llama-3.1-8b", "--gpu", "h100", "--mode", "infer"] if cmd == "fit" else
            BASE + ["--rate", "1", "--requests", "5"])
    err = _err(capsys, argv + ["--engine", "sglang", "--engine-version", version])
    assert "--engine-version" in err and repr(version) in err and "expected a version" in err

def test_too_old_for_capacity_says_what_to_give(capsys):
    # fit plans vLLM 0.6's budget; capacity's scheduler rows start at 0.8
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "5", "--engine", "vllm",
                               "--engine-version", "0.6"])
    assert "--engine-version" in err and "0.8" in err and "later" in err

def test_bad_input_dist_names_input_dist(capsys):
    err = _err(capsys, BASE + ["--rate", "1", "--input-dist", "uniform:5:1"])
    assert "--input-dist" in err
    err = _err(capsys, BASE + ["--rate", "1", "--output-dist", "normal:-3:1"])
    assert "--output-dist" in err


@pytest.mark.parametrize("flag", ["--input-dist", "--output-dist"])
def test_an_empty_dist_is_refused_not_replaced_by_the_default_length(capsys, flag):
    # qa43: `--input-dist ''` was falsy, so the simulation silently ran --input's 2000 tokens
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "5", flag, ""])
    assert err.startswith(f"gpuplan: error: {flag} '': expected a token count or uniform")


@pytest.mark.parametrize("text", ["uniform:1:1e300", "normal:100:1e10", "uniform:1:nan"])
def test_a_second_parameter_past_the_bound_says_the_bound(capsys, text):
    # qa43: 1e300 was told to be ">= 0 and finite", which it is; a NaN HI "needs LO <= HI"
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "5", "--input-dist", text])
    assert f"--input-dist {text!r}: the second parameter must be a number >= 0 and <= 2^31" \
        in err


@pytest.mark.parametrize("key", ["input_dist", "output_dist"])
def test_the_web_api_refuses_an_empty_dist(key):
    from gpuplan.web._service import capacity

    with pytest.raises(InputError, match=f"^{key} '': expected a token count"):
        capacity({"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "rate": 4, "requests": 5,
                  key: "", "max_model_len": 4096})


def test_a_training_engine_is_named_not_a_mode_never_given(capsys):
    err = _err(capsys, BASE + ["--rate", "1", "--engine", "megatron"])
    assert "--engine 'megatron'" in err and "vllm, sglang, trt-llm" in err and "--mode" not in err
    assert "did you mean vllm" in _err(capsys, BASE + ["--rate", "1", "--engine", "vlm"])


@pytest.mark.parametrize("extra", [["--moe-dispatcher", "deepep"], ["--ep-overlap"]])
def test_a_training_only_option_is_dropped_not_sent_to_megatron(capsys, extra):
    # capacity serves: "use --engine megatron" would be a dead end (capacity refuses it)
    err = _err(capsys, ["capacity", "mixtral-8x7b", "--gpu", "h100", "--tp", "2", "--ep", "2",
                        "--rate", "1", "--requests", "5"] + extra)
    assert extra[0] in err and "--engine megatron" not in err and "drop" in err


@pytest.mark.parametrize("cmd", ["fit", "speed"])
@pytest.mark.parametrize("extra", [["--moe-capacity-factor", "1.0"],
                                   ["--moe-dispatcher", "deepep"]])
def test_an_moe_option_on_a_dense_model_is_refused_by_fit_and_speed(capsys, cmd, extra):
    err = _err(capsys, [cmd, "llama-3.1-8b", "--gpu", "h100", "--engine", "megatron", "--gpus",
                        "8", "--batch", "1", "--seq", "1024"] + extra)
    assert extra[0] in err and "no experts" in err


@pytest.mark.parametrize("engine,knobs,moved", [
    ("vllm", ["--max-num-seqs", "64", "--max-num-batched-tokens", "4096"], "kv_tokens"),
    ("sglang", ["--max-num-seqs", "32"], "max_num_seqs")])
def test_fit_takes_the_batch_budgets_capacity_takes(capsys, engine, knobs, moved):
    # vLLM's profile run's activation and sampler peaks grow with both budgets, so its KV
    # tokens depend on them; SGLang's running-request cap is the one given: fit has to be able
    # to state the job capacity simulates
    common = ["llama-3.1-8b", "--gpu", "h100", "--engine", engine, "--max-model-len", "4096"]
    assert main(["fit"] + common + ["--mode", "infer", "--json"] + knobs) == 0
    fit = json.loads(capsys.readouterr().out)["infer"]["engine"]
    assert main(["capacity"] + common + ["--tp", "1", "--rate", "1", "--requests", "5",
                                         "--input", "100", "--output", "4", "--json"]
                + knobs) == 0
    cap_kv = json.loads(capsys.readouterr().out)["kv"]["kv_tokens"]
    assert main(["fit"] + common + ["--mode", "infer", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["infer"]["engine"]
    assert fit["kv_tokens"] == cap_kv and fit[moved] != default[moved]
    assert "--max-num-seqs" in _err(capsys, ["fit"] + common + ["--mode", "infer",
                                                                "--max-num-seqs", "0"])


@pytest.mark.parametrize("load,ok", [(["--rate", "4"], ["--rate", "4"]),
                                     (["--concurrency", "1"], ["--concurrency", "4"])])
def test_more_replicas_than_requests_is_refused(capsys, load, ok):
    # each replica is simulated on its round-robin share: with 10^6 replicas and 40 requests the
    # one simulated request's 1 / E2E was multiplied by 10^6 (8.76e6 req/s out of 4 offered)
    err = _err(capsys, BASE + ["--requests", "40", "--replicas", "1000000", "--input", "500",
                               "--output", "16"] + load)
    assert "--replicas" in err and "1000000" in err and "--requests" in err and "40" in err
    # as many replicas as requests (and clients) is still simulated
    assert main(BASE + ["--requests", "4", "--replicas", "4", "--input", "500", "--output",
                        "16", "--json"] + ok) == 0


def test_fewer_clients_than_replicas_is_refused(capsys):
    # a closed loop's clients are shared out (concurrency // replicas, at least 1): 1 client
    # over 4 replicas ran 4 clients, four times the load given
    err = _err(capsys, BASE + ["--requests", "40", "--replicas", "4", "--concurrency", "1"])
    assert "--concurrency" in err and "--replicas" in err


@pytest.mark.parametrize("cmd", ["fit", "capacity"])
@pytest.mark.parametrize("knobs", [["--max-num-seqs", "1000000"],
                                   ["--max-num-batched-tokens", "128"]])
def test_vllm_refuses_fewer_step_tokens_than_sequences(capsys, cmd, knobs):
    # vLLM's SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py at
    # vllm-project/vllm@01230b40): max_num_batched_tokens must be >= max_num_seqs; H100's
    # defaults are 8192 tokens and 1024 sequences
    argv = (["fit", "llama-3.1-8b", "--gpu", "h100", "--mode", "infer"] if cmd == "fit" else
            BASE + ["--rate", "1", "--requests", "5"])
    err = _err(capsys, argv + ["--engine", "vllm"] + knobs)
    assert "--max-num-batched-tokens" in err and "--max-num-seqs" in err
    # SGLang has no such rule: its running-request cap is separate from the chunk size
    assert main(argv + ["--engine", "sglang", "--max-num-seqs", "1000000", "--json"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("cv", ["1e-300", "1e-200", "0.0001"])
def test_a_gamma_cv_too_small_is_refused_not_a_traceback(capsys, cv):
    # 1 / cv^2 underflowed to a ZeroDivisionError (1e-300) or overflowed to inf (1e-200)
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "5", "--arrivals", f"gamma:{cv}"])
    assert cv in err and "constant" in err


@pytest.mark.parametrize("seed,shown", [("-1", "'-1'"), ("1.5", "'1.5'"),
                                        ("99999999999999999999", "'99999999999999999999'")])
def test_a_bad_seed_is_named_as_given(capsys, seed, shown):
    # the seed was parsed shifted by one: 10^20 - 1 was shown as 10^20, and -1 told ">= 1"
    # although 0 is accepted (the default)
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "5", f"--seed={seed}"])
    assert f"--seed {shown}" in err and ">= 0" in err
    assert main(BASE + ["--rate", "1", "--requests", "5", "--input", "100", "--output", "4",
                        "--seed", "0", "--json"]) == 0
    capsys.readouterr()


def test_a_refused_export_writes_no_plot(capsys, tmp_path):
    # the plot was written before --export was checked: exit 2 with a file left behind
    pytest.importorskip("matplotlib")
    plot = tmp_path / "p.png"
    err = _err(capsys, BASE + ["--rate", "2", "--requests", "20", "--input", "500", "--output",
                               "16", "--plot", str(plot), "--export", "sglang"])
    assert "--export" in err and not plot.exists()


def test_the_web_api_refuses_more_replicas_than_requests():
    from gpuplan.web._service import capacity

    with pytest.raises(InputError, match="replicas") as e:
        capacity({"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "rate": 4, "requests": 40,
                  "replicas": 1000, "input": 500, "output": 16, "max_model_len": 4096})
    assert e.value.field == "replicas" and e.value.fix == {"replicas": 40}


@pytest.mark.parametrize("seed", [-1, True, 2**31])
def test_the_web_api_names_a_bad_seed_as_given(seed):
    from gpuplan.web._service import capacity

    # the web parsed seed + 1: -1 was shown as 0, and True (a bool) became the seed 1
    with pytest.raises(InputError, match="seed") as e:
        capacity({"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "rate": 4, "requests": 5,
                  "seed": seed, "input": 100, "output": 4, "max_model_len": 4096})
    assert e.value.value is seed


@pytest.mark.parametrize("version", [0.1, 21, True, [0, 21]])
def test_the_web_api_refuses_a_version_that_is_not_text(version):
    """qa43: a JSON number was str()-ed: 0.10 (vLLM 0.10) arrived as 0.1 and was refused as older
    than 0.8, and 21 ran as a vLLM "21" (the newest rules); now the version must be text."""
    from gpuplan.engines.budget import version_key
    from gpuplan.web._service import capacity

    with pytest.raises(InputError, match="expected the version as text") as e:
        capacity({"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "rate": 4, "requests": 5,
                  "engine_version": version, "input": 100, "output": 4, "max_model_len": 4096})
    assert e.value.field == "engine_version" and "\n" not in str(e.value)
    assert version_key("0.10", "vllm") == (0, 10)  # the text spelling is read as written


def test_max_rate_with_a_sweep_and_no_rate_is_not_a_traceback(capsys):
    """qa43: ``--max-rate --sweep`` with neither --rate nor --concurrency raised TypeError (None *
    2.0) in the sweep's pre-check. The sweep then runs around the rate the search finds; where
    that is past 10^6 / 2 (a handful of short requests meets the SLO at any rate the search
    tries), it is one line naming --sweep and the fix, not a "rate 1342177: out of range" about
    a rate never given (the web API said that)."""
    from gpuplan.web._service import capacity

    argv = ["capacity", "qwen2.5-0.5b", "--gpu", "h100", "--requests", "8", "--input", "200",
            "--output", "8", "--max-rate", "--sweep", "--slo-ttft", "1"]
    err = _err(capsys, argv)
    assert "--sweep runs up to 2x the highest rate found" in err and "give --rate R" in err
    with pytest.raises(InputError, match="^sweep runs up to 2x") as e:
        capacity({"model": "qwen2.5-0.5b", "gpu": "h100", "requests": 8, "input": 200,
                  "output": 8, "max_rate": True, "sweep": True, "slo_ttft": 1})
    assert e.value.field == "sweep"
    assert main(argv + ["--rate", "1"]) == 0  # the given rate is the sweep's load


@pytest.mark.parametrize("extra,named", [
    (["--rate", "1"], "drop --rate"), (["--requests", "50"], "drop --requests"),
    (["--input-dist", "uniform:1:10"], "drop --input-dist"), (["--input", "500"], "drop --input"),
    (["--arrivals", "gamma:2", "--seed", "3"], "drop --seed, --arrivals"),
])
def test_a_workload_file_refuses_the_synthetic_options_it_would_ignore(capsys, tmp_path, extra,
                                                                       named):
    """qa43: with --workload, --input-dist, --arrivals, --input, --requests and --seed were
    ignored without a word (only --rate/--concurrency were refused)."""
    w = tmp_path / "w.jsonl"
    w.write_text('{"arrival_s": 0, "input_tokens": 100, "output_tokens": 4}\n')
    err = _err(capsys, BASE + ["--workload", str(w), *extra])
    assert "--workload carries its own requests and arrivals" in err and named in err
    assert main(BASE + ["--workload", str(w), "--json"]) == 0


@pytest.mark.parametrize("extra,named", [
    (["--rate", "1", "--concurrency", "2"], "two loads"),
    (["--concurrency", "2", "--arrivals", "gamma:2"], "--arrivals 'gamma:2'"),
    (["--rate", "1", "--input", "100", "--input-dist", "uniform:1:10"], "--input-dist draws"),
    (["--rate", "1", "--output", "8", "--output-dist", "uniform:1:10"], "--output-dist draws"),
])
def test_two_loads_or_two_lengths_are_refused_not_one_dropped(capsys, extra, named):
    """qa43: --rate with --concurrency ran the closed loop (the rate dropped), a closed loop's
    --arrivals did nothing, and a distribution silently replaced the --input/--output given."""
    err = _err(capsys, BASE + ["--requests", "5", *extra])
    assert named in err


@pytest.mark.parametrize("body,field", [
    ({"rate": 1, "concurrency": 2}, "concurrency"),
    ({"concurrency": 2, "arrivals": "gamma:2"}, "arrivals"),
    ({"rate": 1, "input": 100, "input_dist": "uniform:1:10"}, "input_dist"),
])
def test_the_web_api_refuses_two_loads_or_two_lengths(body, field):
    from gpuplan.web._service import capacity

    with pytest.raises(InputError) as e:
        capacity({"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "requests": 5,
                  "max_model_len": 4096, **body})
    assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["", " "])
def test_an_empty_plot_name_is_refused_not_taken_as_no_plot(capsys, name):
    # qa43: `--plot ''` was falsy: the run went ahead and drew nothing, exit 0
    err = _err(capsys, BASE + ["--rate", "1", "--requests", "5", "--plot", name])
    assert err.startswith("gpuplan: error: --plot ")
