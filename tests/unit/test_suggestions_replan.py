"""What gpuplan proposes runs (issue 27, part 3): every suggestion and every "how many of this
GPU" answer, re-planned through the CLI with the flags printed beside it, is accepted, fits the
GPU it names, and -- for a suggestion -- peaks where the suggestion said, to 0.1%. The full grid
(every catalog model x T4, L4, A100-40GB, H100 x batch 1, 16, 64 x train and infer) is
benchmarks/suggestions_replan.py, recorded in benchmarks/suggestions_replan.md; here every
catalog model once per mode, the GPU and batch rotating."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import suggestions_replan as replan  # noqa: E402

from gpuplan.models import catalog_names  # noqa: E402


@pytest.fixture(autouse=True)
def _empty_bench_db(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))


def _sample() -> list[tuple[str, str, int, str]]:
    out = []
    for i, model in enumerate(catalog_names()):
        for j, mode in enumerate(replan.MODES):
            k = i + j
            out.append((model, replan.GPUS[k % len(replan.GPUS)],
                        replan.BATCHES[(k // len(replan.GPUS)) % len(replan.BATCHES)], mode))
    return out


def test_every_sampled_proposal_runs_as_printed():
    records = []
    for model, gpu, batch, mode in _sample():
        records += replan.check_one(model, gpu, batch, mode)
    s = replan.summary(records)
    failed = [f"{r['argv']}: {r['why']}" for r in records if r["ok"] is False]
    assert not failed, failed[:5]
    assert s["checked"] >= 100  # proposals were offered and re-planned, not skipped


def test_falcon_is_not_offered_a_tp_degree_its_heads_refuse(cli):
    """falcon-7b has 71 attention heads (a prime): no TP degree of 2..64 divides them, so no
    tensor-parallel answer is offered; the pipeline that serves it is, and runs."""
    import json

    code, out, _ = cli("fit", "falcon-7b", "--mode", "infer", "--gpu", "T4", "--batch", "1",
                       "--precision", "fp32", "--json", "--no-speed")
    g = json.loads(out)["gpus"][0]
    assert g["infer_min_gpus_tensor_parallel"] is None
    assert g["flags"]["infer_layout"] == "--tp 1 --pp 4 --gpus 4"
    code, out, _ = cli("fit", "falcon-7b", "--mode", "infer", "--gpu", "T4", "--batch", "1",
                       "--precision", "fp32", "--tp", "1", "--pp", "4", "--gpus", "4", "--json",
                       "--no-speed")
    assert code == 0 and json.loads(out)["gpus"][0]["infer_fits"] is True
    code, _, err = cli("fit", "falcon-7b", "--mode", "infer", "--tp", "2", "--gpus", "2")
    assert code == 2 and "71 attention heads" in err
