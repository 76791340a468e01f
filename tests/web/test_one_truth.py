"""One truth (issue 27, part 2): fit, speed and the web API give the same memory and the same
tokens/s for the same job, over a grid of models, modes, engines, layouts and precisions; a job
one front end refuses, the others refuse too (the cluster's own agreement:
tests/unit/test_cluster_one_truth.py)."""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import pytest

MODELS = ("gpt2", "llama-3.1-8b", "mixtral-8x7b")
LAYOUTS = ((), ("--gpus", "8", "--zero", "3"), ("--tp", "2", "--gpus", "2"),
           ("--tp", "2", "--pp", "2", "--gpus", "8"))
TRAIN = (("auto", "transformers", "megatron", "torchtitan", "deepspeed"), ("mixed-bf16",))
INFER = (("auto", "transformers", "vllm"), ("bf16", "int8"))
GPU = "H100-SXM-80GB"


def _grid():
    for model, layout in itertools.product(MODELS, LAYOUTS):
        for mode, (engines, precisions) in (("train", TRAIN), ("infer", INFER)):
            for engine, precision in itertools.product(engines, precisions):
                if mode == "infer" and "--zero" in layout:
                    continue
                yield model, mode, engine, precision, layout


def _body(model, mode, engine, precision, layout) -> dict:
    body = {"model": model, "mode": mode, "engine": engine, "gpu": [GPU]}
    body["precision" if mode == "train" else "infer_precision"] = precision
    it = iter(layout)
    for flag, value in zip(it, it):
        body[flag[2:]] = int(value)
    return body


def _cli(argv):
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, (json.loads(out.getvalue()) if rc == 0 else None), err.getvalue()


def test_fit_speed_and_the_web_agree(client):
    checked = refused = 0
    for model, mode, engine, precision, layout in _grid():
        argv = [model, "--mode", mode, "--engine", engine, "--precision", precision,
                "--gpu", GPU, *layout, "--json"]
        rc, fit, err = _cli(["fit", *argv])
        body = _body(model, mode, engine, precision, layout)
        api = client.post("/api/fit", json=body)
        if rc != 0:  # refused: by every front end, in one line
            assert rc == 2 and err.count("\n") == 1, err
            assert api.status_code == 422, (argv, api.text)
            rc2, _, _ = _cli(["speed", *argv])
            assert rc2 == 2, argv
            refused += 1
            continue
        assert api.status_code == 200, (argv, api.text)
        web = api.json()
        assert web[mode]["per_gpu"]["total_bytes"] == fit[mode]["per_gpu"]["total_bytes"], argv
        fit_rate = fit["speed"]["gpus"][0][mode]["tokens_per_s"]
        rc, speed, err = _cli(["speed", *argv])
        assert rc == 0, err
        web_speed = client.post("/api/speed", json={**body, "gpu": GPU}).json()
        for rate in (speed["tokens_per_s"], web_speed[mode]["estimate"]["tokens_per_s"],
                     web["speed"]["gpus"][0][mode]["tokens_per_s"]):
            assert rate == pytest.approx(fit_rate, rel=1e-3), (argv, rate, fit_rate)
        checked += 1
    print(f"one truth: {checked} jobs agree, {refused} refused alike")
    assert checked >= 60 and refused >= 10  # both sides of the grid were exercised
