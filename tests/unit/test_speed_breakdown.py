"""benchmarks/speed_breakdown.py: the speed model's op-by-op breakdown of a published run (issue 31's
V100 fp16 reading), checked against hand calculations of the ops it prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import speed_breakdown as sb  # noqa: E402
import validate_speed as vs  # noqa: E402

RUN = "dle-bert-large-ft-v100-16g-amp"  # BERT-large, batch 4 x 384 tokens, V100-SXM2-16GB, fp16


@pytest.fixture(scope="module")
def estimate(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUPLAN_BENCH_DB", str(tmp_path_factory.mktemp("db") / "none.sqlite"))
    try:
        run = next(r for r in json.loads(vs.RUNS.read_text())["runs"] if r["id"] == RUN)
        yield sb.breakdown(run)
    finally:
        mp.undo()


def _op(est, name: str, phase: str = "forward"):
    return next(t for t in est.step.ops if t.op.name == name and t.op.phase == phase)


def test_the_estimate_kept_is_the_rows(estimate):
    row, est = estimate
    # a rate in sequences/s: the batch of 4 over the estimated step
    assert row.predicted == pytest.approx(4 / est.step_time_s, rel=1e-9)


def test_attention_scores_by_hand(estimate):
    _, est = estimate
    t = _op(est, "attn.scores")
    # QK^T per layer: batch 4 x 16 heads = 64 products of (384 x 64) @ (64 x 384)
    assert t.op.shape == (64, 384, 64, 384)
    assert t.op.flops == 2 * 64 * 384 * 64 * 384  # 1.208 GFLOP
    # fp16 Q and K read (1536 tokens x 1024 each), the 64 x 384 x 384 scores written
    nbytes = 2 * 1536 * 1024 * 2 + 64 * 384 * 384 * 2
    assert t.op.bytes == nbytes == 25_165_824
    # memory-bound at V100's 900 GB/s x the 0.85 streaming fraction: 32.9 us
    assert t.memory_s == pytest.approx(nbytes / (900e9 * 0.85), rel=1e-9)
    assert t.bound == "memory" and sb.op_class(t) == "bmm"


def test_linear_layer_is_a_gemm_at_voltas_share(estimate):
    _, est = estimate
    t = _op(est, "mlp.up")
    assert sb.op_class(t) == "gemm"
    # 1536 x 1024 @ 1024 x 4096: 384 output tiles of 128 x 128 over 80 SMs = 5 waves, 96% full;
    # at Markidis's 83 of 125 TFLOP/s (0.664): 12.885 GFLOP / (125e12 x 0.664 x 0.96) = 161.7 us
    flops = 2 * 1536 * 1024 * 4096
    assert t.op.flops == flops
    assert t.compute_s == pytest.approx(flops / (125e12 * 0.664 * (384 / 400)), rel=1e-3)


def test_class_totals_cover_the_step(estimate):
    _, est = estimate
    totals = sb.class_totals(est.step)
    assert sum(v for k, v in totals.items() if k != "gaps") == pytest.approx(
        est.step.kernel_time_s, rel=1e-12)
    # the gaps: every kernel of the step x eager PyTorch's device gap per kernel
    assert totals["gaps"] == pytest.approx(
        est.step.kernels * est.step.overheads.device_gap_s, rel=1e-9)
    assert totals["attention"] == 0.0  # a 2020 source: unfused (eager) attention, no fused kernel


def test_report_names_the_measured_step(estimate):
    run = next(r for r in json.loads(vs.RUNS.read_text())["runs"] if r["id"] == RUN)
    lines = sb.report(run)
    # measured 35.88 sequences/s of 4: 4 / 35.88 = 111.48 ms per step
    assert lines[-1].endswith(f"implies {4 / 35.88 * 1e3:.2f} ms")


def test_unknown_run_is_refused(capsys):
    assert sb.main(["no-such-run"]) == 2
    assert "no-such-run" in capsys.readouterr().out


def test_separate_qkv_launches_wave_on_their_own(estimate):
    # BertSelfAttention's query, key and value are three nn.Linear: three 1536 x 1024 outputs of
    # 12 x 8 = 96 tiles each on V100's 80 SMs -- two waves, 96 / 160 = 60% busy -- not one
    # 1536 x 3072 product of 288 tiles (four waves, 90% busy)
    _, est = estimate
    t = _op(est, "attn.qkv")
    assert t.op.kernels == 3 and t.op.launch_shares == (1 / 3, 1 / 3, 1 / 3)
    flops = 2 * 1536 * 1024 * 3072
    assert t.compute_s == pytest.approx(flops / (125e12 * 0.664 * 0.6), rel=1e-9)  # 194.1 us
    back = _op(est, "attn.qkv", "backward")  # dX and dW of each projection, the same waves
    assert back.compute_s == pytest.approx(2 * flops / (125e12 * 0.664 * 0.6), rel=1e-9)


def test_implied_tensor_stretch_by_hand():
    # a step of 2.0 s of GEMMs, 0.5 s of attention, 1.0 s elementwise, 0.5 s optimizer: the
    # tensor-core share 2.5 / 4.0 = 0.625; measured 1.25x slower (ratio 1.25) with the memory-
    # bound 1.5 s unchanged needs the 2.5 s to become 5.0 - 1.5 = 3.5 s: 1.4x = 1 + 0.25 / 0.625
    totals = {"gemm": 2.0, "bmm": 0.0, "attention": 0.5, "elementwise": 1.0, "optimizer": 0.5,
              "gaps": 0.0}
    assert sb.implied_tensor_stretch(totals, 1.25) == pytest.approx(1.4, rel=1e-12)
    assert sb.implied_tensor_stretch(totals, 1.0) == pytest.approx(1.0)
    # an optimistic-by-nothing step on memory-bound kernels only: no reading
    assert sb.implied_tensor_stretch({"elementwise": 1.0, "gaps": 0.1}, 1.3) is None
