"""Typed results (issue 27, part 4e): a verdict per GPU holds one result per mode, the plan's
speed rows are typed, and the JSON keys are the ones the README documents."""

from __future__ import annotations

import gpuplan
from gpuplan.fit import ModeVerdict

#: The verdict's JSON keys as README.md's contract lists them (with --max-batch / --max-seq off).
VERDICT_KEYS = {"name", "usable_bytes", "train_fits", "infer_fits", "train_verdict",
                "infer_verdict", "train_headroom_bytes", "infer_headroom_bytes",
                "train_min_gpus_zero3", "infer_min_gpus_tensor_parallel", "train_min_gpus_layout",
                "train_layout", "infer_min_gpus_layout", "infer_layout",
                # the GPU's own inference format and total (added by issue 28: a mixed list)
                "infer_precision", "infer_total_bytes"}


def test_a_verdict_holds_one_result_per_mode():
    p = gpuplan.plan(gpuplan.Job(model="llama-3.1-8b", mode="both", batch=1, seq=2048),
                     gpus=["RTX-4090"], speed=True)
    g = p.gpus[0]
    assert isinstance(g.train, ModeVerdict) and isinstance(g.infer, ModeVerdict)
    # 8.03B parameters: 16 B each of model states alone are 128 GB, far over 24 GB; 16 GB of
    # bf16 weights fit
    assert g.train.fits is False and g.infer.fits is True
    assert g.train_fits is g.train.fits and g.infer_headroom_bytes == g.infer.headroom_bytes
    assert g.train.headroom_bytes == g.usable_bytes - p.train.total_bytes
    d = g.to_dict()
    assert set(d) == VERDICT_KEYS
    assert set(g.to_dict(p.job)) == VERDICT_KEYS | {"flags"}
    assert d["train_min_gpus_zero3"] == g.train.min_gpus


def test_one_mode_leaves_the_other_none():
    p = gpuplan.plan(gpuplan.Job(model="gpt2", mode="infer"), gpus=["T4"])
    g = p.gpus[0]
    assert g.train is None and g.train_fits is None and g.to_dict()["train_fits"] is None


def test_the_speed_rows_are_estimates():
    p = gpuplan.plan(gpuplan.Job(model="gpt2", mode="train", batch=4, seq=512),
                     gpus=["H100-SXM-80GB", "T4"], speed=True)
    row = p.speed.row("H100-SXM-80GB")
    assert row.train is not None and row.infer is None
    assert dict(row.fits) == {"train": p.gpus[0].train.fits}
    d = p.to_dict()["speed"]["gpus"][0]
    assert d["train"]["tokens_per_s"] == row.train.tokens_per_s
    assert d["train"]["fits_gpu"] is True
