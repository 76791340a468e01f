"""Output a person cannot misread, and missing hardware as an error (issue 15, items 3 and 4).

- a table line that holds nothing at the peak phase says where its bytes are, never "0 GB" beside
  a bytes-per-parameter figure;
- --context and the prompt: the prefill is the prompt (--seq), the cache the context; a context
  shorter than an explicit --seq is refused in one line;
- the profile's phase table: shares and times from the same totals;
- bench/profile --device cuda without CUDA: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from gpuplan import Job
from gpuplan.cli import main
from gpuplan.measure.profile.analysis import RunInfo, analyze
from gpuplan.measure.profile.types import PHASES, StepRecord
from gpuplan.memory import train_memory
from gpuplan.models import load_model
from gpuplan.report.profile import render_text


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _line(mem, key: str):
    return next(l for l in mem.lines if l.key == key)


def test_activations_at_an_optimizer_peak_say_they_were_freed():
    m = load_model("llama-3.1-8b")
    t = train_memory(m, Job(model=m, mode="train"))
    assert t.peak_phase == "optimizer"          # the repro of issue 15
    act = _line(t, "activations")
    assert act.bytes == 0 and act.at_peak == "freed before the optimizer step"
    assert _line(t, "gradients").at_peak == ""  # all gradients are alive at the step
    rc, out, _ = _cli("fit", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--mode", "train",
                      "--no-speed")
    assert rc == 0
    row = next(r for r in out.splitlines() if r.startswith("│ activations"))
    assert "freed before the optimizer step" in row and "0 GB" not in row


def test_gradients_before_the_backward_peak_are_none_yet_not_zero():
    m = load_model("bert-base-uncased")
    t = train_memory(m, Job(model=m, mode="train", batch=32, checkpointing="full"))
    g = _line(t, "gradients")
    # the peak is the start of backward: no gradient exists yet, though each costs 2 B/param
    assert t.peak_phase == "backward" and g.bytes == 0 and g.bytes_per_param == 2
    assert g.at_peak == "none yet (the peak precedes them)"
    rc, out, _ = _cli("fit", "bert-base-uncased", "--checkpointing", "full", "--batch", "32",
                      "--gpu", "t4", "--mode", "train", "--no-speed", "--json")
    lines = {l["key"]: l for l in json.loads(out)["train"]["lines"]}
    assert lines["gradients"]["at_peak"] == g.at_peak and "at_peak" not in lines["weights"]


def test_offloaded_states_are_in_host_memory():
    m = load_model("gpt2-xl")
    t = train_memory(m, Job(model=m, mode="train", gpus=8, zero=3, offload_optimizer=True))
    assert _line(t, "optimizer").bytes == 0
    assert _line(t, "optimizer").at_peak == "in host memory (offloaded)"
    assert _line(t, "master_weights").at_peak == "in host memory (offloaded)"


def test_context_longer_than_the_prompt_is_stated():
    rc, out, _ = _cli("fit", "llama-3.1-8b", "--mode", "infer", "--context", "32768",
                      "--gpu", "H100-SXM-80GB", "--no-speed")
    assert rc == 0
    text = " ".join(out.split())
    assert ("prefill: a 2,048-token prompt (the default --seq); the KV cache and the decode are "
            "sized for 32,768 tokens (--context: the prompt + 30,720 generated)") in text
    rc, out, _ = _cli("fit", "llama-3.1-8b", "--mode", "infer", "--context", "32768",
                      "--gpu", "H100-SXM-80GB", "--no-speed", "--json")
    infer = json.loads(out)["infer"]
    assert (infer["prompt_tokens"], infer["context_tokens"]) == (2048, 32768)
    # the cache is the context's: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes per token
    assert infer["kv_cache_full_bytes"] == 2 * 32 * 8 * 128 * 2 * 32768


def test_equal_context_and_prompt_add_no_line():
    rc, out, _ = _cli("fit", "gpt2", "--mode", "infer", "--context", "1024", "--no-speed")
    assert rc == 0 and "prefill: a" not in out


def test_context_shorter_than_seq_is_refused_in_one_line():
    rc, out, err = _cli("fit", "llama-3.1-8b", "--mode", "infer", "--context", "1024",
                        "--seq", "4096")
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        "gpuplan: error: --context 1024 is shorter than --seq 4096: the context holds the prompt "
        "(--seq) and the tokens generated after it; give --context 4096 or more, or a shorter "
        "--seq"]


def _step(i: int, **parts: float) -> StepRecord:
    full = {p: parts.get(p, 0.0) for p in PHASES}
    return StepRecord(index=i, duration_s=sum(full.values()), parts_s=full, samples=4)


def test_profile_shares_and_times_are_one_statistic():
    # forward: 1, 1, 7 ms (median 1, mean 3); optimizer: 5, 5, 5 (median 5, mean 5).
    # Shares of the totals: forward 9/24, optimizer 15/24. The medians would show forward
    # "1 ms" beside a 37.5% share; the means show 3 ms = 37.5% of the 8 ms mean step.
    steps = [_step(0, forward=1e-3, optimizer=5e-3), _step(1, forward=1e-3, optimizer=5e-3),
             _step(2, forward=7e-3, optimizer=5e-3)]
    r = analyze(steps, RunInfo())
    assert r.breakdown["forward"] == pytest.approx(9 / 24)
    assert r.breakdown_mean_s["forward"] == pytest.approx(3e-3)
    assert r.breakdown_mean_s["optimizer"] == pytest.approx(5e-3)
    assert r.step_time_mean_s == pytest.approx(8e-3)
    for p in PHASES:
        assert r.breakdown[p] * r.step_time_mean_s == pytest.approx(r.breakdown_mean_s[p])
    assert r.breakdown_median_s["forward"] == pytest.approx(1e-3)   # kept, in the JSON
    text = render_text(r)
    assert "share of the total time, mean per step" in text
    row = next(l for l in text.splitlines() if l.strip().startswith("forward"))
    assert "37.5%" in row and "3.0 ms" in row
    assert json.loads(json.dumps(r.to_dict()))["breakdown_mean_s"]["forward"] == pytest.approx(3e-3)


def _no_cuda_torch():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the missing-device error cannot happen")
    return torch


@pytest.mark.parametrize("argv", [
    ("bench", "--device", "cuda", "--no-save"),
    ("bench", "--device", "cuda:0", "--no-save"),
])
def test_bench_on_a_missing_cuda_device_is_an_error(argv):
    _no_cuda_torch()
    rc, out, err = _cli(*argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "sees no CUDA device" in lines[0] and "--device cpu" in lines[0]


def test_profile_on_a_missing_cuda_device_is_an_error_before_the_script_runs(tmp_path):
    _no_cuda_torch()
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    rc, out, err = _cli("profile", "--device", "cuda", str(script))
    assert rc == 2 and not marker.exists()
    assert len(err.strip().splitlines()) == 1 and "sees no CUDA device" in err


def test_a_slow_job_does_not_read_zero_tokens_per_second(cli):
    # 70B over TP 8 x DP 2 with 0.001 Gb/s between nodes: ~0.02 tokens/s, printed as such (it
    # printed "0", and its expected range "0-0"); the network rate keeps its digits too
    from gpuplan.units import format_per_s

    assert [format_per_s(x) for x in (40530.5, 12.4, 9.87, 0.0231512, 0.0)] == \
        ["40,530", "12", "9.87", "0.0232", "0"]
    rc, out, err = cli("speed", "llama-3.1-70b", "--gpu", "h100", "--gpus", "16", "--tp", "8",
                       "--inter-node", "roce-0.001")
    assert rc == 0, err
    row = next(line for line in out.splitlines() if "tokens/s (all GPUs)" in line)
    rate = float(row.split("│")[2].strip())
    assert 0 < rate < 1
    assert "RoCE 0.001 Gb/s (0.001 Gb/s per GPU)" in out
    assert "Expected range: 0-0" not in out
