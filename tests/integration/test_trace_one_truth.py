"""One truth for the trace (issue 27, part 2): ``gpuplan trace`` takes ``--engine`` as ``gpuplan
fit`` does, refuses the same bad engine/layout combinations with the same one line (exit 2), and
its traced peak is fit's analytic peak for the same job (runtime overhead excluded: a trace has
none) within 5%, as tests/integration/test_trace_agreement.py holds it for engine auto.

The two answers are independent: fit replays each family's ops as formulas (no torch); the trace
runs the real transformers step under FakeTensorMode and records every allocation. The engine
is part of the job: torchtitan's default optimizer is fused (torchtitan/config/job_config.py:
optimizer.implementation 'fused'), FSDP2's and transformers' the foreach one torch picks on a
GPU, and the trace runs what the engine runs.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

TOLERANCE = 0.05
GPU = "H100-SXM-80GB"

#: (model, job options): small catalog models, train and infer, under the engines the trace
#: runs; no --mode where the engine decides it (a training engine trains).
AGREE = [
    ("gpt2", ["--engine", "transformers", "--mode", "train", "--batch", "2", "--seq", "256"]),
    ("gpt2", ["--engine", "torchtitan", "--batch", "2", "--seq", "256"]),
    ("opt-125m", ["--engine", "fsdp2", "--batch", "2", "--seq", "256"]),
    ("qwen2.5-0.5b", ["--engine", "torchtitan", "--batch", "1", "--seq", "256"]),
    ("gpt2", ["--engine", "fsdp2", "--gpus", "2", "--zero", "3", "--batch", "2", "--seq", "256"]),
    ("gpt2", ["--engine", "transformers", "--mode", "infer", "--batch", "4", "--seq", "256"]),
    ("opt-125m", ["--engine", "transformers", "--mode", "infer", "--batch", "4", "--seq", "256"]),
    ("qwen2.5-0.5b", ["--engine", "auto", "--mode", "infer", "--batch", "2", "--seq", "256"]),
]

#: Jobs the engine cannot run: the Job refuses them, for every command alike.
REFUSED = [
    ("gpt2", ["--engine", "fsdp2", "--tp", "2", "--gpus", "2"]),        # FSDP2 alone: no TP
    ("gpt2", ["--engine", "torchtitan", "--zero", "1", "--gpus", "2"]),  # FSDP2 has no ZeRO-1
    ("gpt2", ["--engine", "megatron", "--zero", "3", "--gpus", "2"]),    # distributed opt: ZeRO-1
    ("gpt2", ["--engine", "fsdp2", "--mode", "infer"]),                  # a training engine
    ("gpt2", ["--engine", "vllm", "--mode", "train"]),                   # a serving engine
    ("gpt2", ["--engine", "titan"]),                                     # no such engine
]


def _run(*argv: str) -> tuple[int, str, str]:
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("model,opts", AGREE, ids=lambda v: v if isinstance(v, str) else
                         "-".join(o.lstrip("-") for o in v))
def test_the_trace_and_fit_agree_on_the_job_and_its_peak(model, opts):
    rc, out, err = _run("fit", model, *opts, "--gpu", GPU, "--no-speed", "--json")
    assert rc == 0, err
    fit = json.loads(out)
    rc, out, err = _run("trace", model, *opts, "--json")
    assert rc == 0, err
    trace = json.loads(out)

    # the same job: the mode the engine gives, its optimizer implementation, the same shape
    job = fit["job"]
    assert trace["mode"] == job["mode"] and trace["batch"] == job["batch"]
    assert trace["seq"] == job["seq"] and trace["attention"] == job["attention"]
    if job["mode"] == "train":
        assert trace["precision"] == job["precision"]
        assert trace["optimizer_impl"] == ("fused" if job["fused_optimizer"] else "foreach")
    else:
        # the format planned (the job's echo may read auto, the checkpoint's own: bf16 here)
        assert trace["precision"] == fit["infer"]["precision"]

    mem = fit[job["mode"]]
    analytic = mem["per_gpu"]["total_bytes"] - mem["per_gpu"]["overhead_bytes"]
    traced = trace["total_bytes"]
    assert abs(analytic - traced) <= TOLERANCE * traced, (analytic, traced)
    assert mem["peak_phase"] == trace["peak_phase"]


def test_the_engine_moves_the_traced_peak_as_it_moves_fits():
    # torchtitan's fused AdamW keeps no foreach temporary (exp_avg_sq's copy, 4 B a parameter):
    # both answers drop by about that much from transformers' foreach step at the same job
    job = ["--mode", "train", "--batch", "2", "--seq", "256"]
    peaks = {}
    for engine in ("transformers", "torchtitan"):
        rc, out, err = _run("trace", "gpt2", "--engine", engine, *job, "--json")
        assert rc == 0, err
        peaks[engine] = json.loads(out)["total_bytes"]
    params = 124_439_808  # GPT-2 small (its config.json: 12 layers, 768 wide, 50,257 tokens)
    assert peaks["transformers"] - peaks["torchtitan"] == pytest.approx(4 * params, rel=0.05)


@pytest.mark.parametrize("model,opts", REFUSED, ids=lambda v: v if isinstance(v, str) else
                         "-".join(o.lstrip("-") for o in v))
def test_a_job_the_engine_cannot_run_is_refused_alike(model, opts):
    rc_fit, out_fit, err_fit = _run("fit", model, *opts, "--gpu", GPU)
    rc, out, err = _run("trace", model, *opts)
    assert rc_fit == rc == 2 and out == out_fit == ""
    assert err.count("\n") == 1 and err.startswith("gpuplan: error: ")
    assert err == err_fit


@pytest.mark.parametrize("model,opts,why", [
    # torchtune's own decoder is modeled for llama-style families (qwen2 among them)
    ("qwen2.5-0.5b", ["--engine", "torchtune"],
     "it runs its own model code (torchtune), the trace transformers'"),
    ("gpt2", ["--engine", "megatron"],
     "it runs the step under runtime compile, the trace runs it eagerly"),
    ("gpt2", ["--engine", "vllm"],
     "it runs the step under runtime cudagraphs, the trace runs it eagerly"),
    ("gpt2", ["--engine", "deepspeed", "--gpus", "2", "--zero", "2"],
     "its ZeRO is deepspeed's, the trace shards the step with FSDP2"),
])
def test_an_engine_whose_step_the_trace_does_not_run_is_one_line(model, opts, why):
    # fit plans these jobs; the trace, which runs transformers' code eagerly (FSDP2 for a
    # sharded step), says so instead of tracing another step under the engine's name
    rc, _, err = _run("fit", model, *opts, "--gpu", GPU, "--no-speed", "--json")
    assert rc == 0, err
    rc, out, err = _run("trace", model, *opts)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"gpuplan: error: --engine {opts[1]}: {why}; use --engine ")
