"""The attribution arithmetic and the verdict/advice rules, on hand-built timelines (no torch).

Every expected number below is worked out by hand in the comments from the definitions in
gpuplan/measure/profile/timeline.py: c = max(t, g) per mark; a phase is charged c[i+1] - c[i];
GPU busy at most g[i+1] - max(g[i], t[i]) and at least g[i+1] - max(g[i], t[i+1]).
"""

from __future__ import annotations

import json
import math

import pytest

from gpuplan.measure.profile.analysis import (
    NoStepsError, RunInfo, analyze, combine_ranks,
)
from gpuplan.measure.profile.timeline import attribute
from gpuplan.measure.profile.types import PHASES, LoaderInfo, ProfileReport, StepRecord
from gpuplan.report.profile import render_text


def test_cpu_intervals_are_charged_to_their_phase():
    # marks at 0, 2, 5, 9, 10 s: data 2, forward 3, backward 4, optimizer 1
    a = attribute([0, 2, 5, 9, 10], ["data_wait", "forward", "backward", "optimizer"])
    assert a.parts_s == {"data_wait": 2, "transfer": 0, "forward": 3, "backward": 4, "optimizer": 1, "other": 0}
    assert a.duration_s == 10
    assert a.gpu_busy_min_s is None


def test_cuda_compute_bound_step():
    # Host: fetch ends at 1, forward issued 1..2, backward 2..3, rest 3..4 (host-clock seconds).
    # GPU: nothing during the fetch (g1 = g0 = 0); forward done at 12, backward at 30, rest at 33.
    t = [0, 1, 2, 3, 4]
    g = [0, 0, 12, 30, 33]
    a = attribute(t, ["data_wait", "forward", "backward", "other"], g)
    # c = [0, 1, 12, 30, 33]
    assert a.parts_s["data_wait"] == 1
    assert a.parts_s["forward"] == 11
    assert a.parts_s["backward"] == 18
    assert a.parts_s["other"] == 3
    assert a.duration_s == 33
    # upper: 0 + (12 - 1) + (30 - 12) + (33 - 30) = 32 ; lower: 0 + (12 - 2) + (30 - 12) + (33 - 30) = 31
    assert a.gpu_busy_max_s == pytest.approx(32)
    assert a.gpu_busy_min_s == pytest.approx(31)
    # paced = forward 11 - 10 + backward 18 - 18 = 1 ; other proven busy = 3
    assert a.host_paced_s == pytest.approx(1)
    assert a.other_gpu_busy_s == pytest.approx(3)


def test_cuda_launch_bound_step():
    # The host spends 20 s issuing the forward (1..21); the GPU is done 0.5 s after it (21.5).
    t = [0, 1, 21, 31, 32]
    g = [0, 0, 21.5, 31.2, 32.1]
    a = attribute(t, ["data_wait", "forward", "backward", "other"], g)
    # c = [0, 1, 21.5, 31.2, 32.1]
    assert a.parts_s["forward"] == pytest.approx(20.5)
    assert a.parts_s["backward"] == pytest.approx(9.7)
    # proven busy: forward 21.5 - 21 = 0.5, backward 31.2 - 31 = 0.2 -> paced 20 + 9.5
    assert a.host_paced_s == pytest.approx(29.5)
    assert a.duration_s == pytest.approx(32.1)


def test_cuda_hidden_data_wait_is_not_charged():
    # The GPU is still busy with the previous step until 5 while the host fetches (0..3):
    # the fetch is hidden behind compute; only the exposed part (none) is charged.
    t = [0, 3, 4, 5]
    g = [5, 5, 9, 9]
    a = attribute(t, ["data_wait", "forward", "other"], g)
    # c = [5, 5, 9, 9]
    assert a.parts_s["data_wait"] == 0
    assert a.parts_s["forward"] == 4
    assert a.duration_s == 4


def test_parts_always_sum_to_duration():
    import random

    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 12)
        t = sorted(rng.uniform(0, 10) for _ in range(n))
        g = sorted(rng.uniform(0, 12) for _ in range(n))
        labels = [rng.choice(PHASES) for _ in range(n - 1)]
        a = attribute(t, labels, g)
        assert sum(a.parts_s.values()) == pytest.approx(a.duration_s, abs=1e-9)
        assert 0 <= a.gpu_busy_min_s <= a.gpu_busy_max_s <= a.duration_s + 1e-9
        c = attribute(t, labels)
        assert sum(c.parts_s.values()) == pytest.approx(t[-1] - t[0], abs=1e-9)


def test_attribute_rejects_bad_input():
    with pytest.raises(ValueError):
        attribute([0, 1], ["forward", "backward"])
    with pytest.raises(ValueError):
        attribute([0, 1], ["lunch"])


# -- analysis ----------------------------------------------------------------------------------

def _step(i, **parts):
    p = dict.fromkeys(PHASES, 0.0)
    p.update(parts)
    return StepRecord(index=i, duration_s=sum(p.values()), parts_s=p, samples=8, overhead_s=1e-5)


def test_breakdown_and_verdict_data_loading():
    steps = [_step(i, data_wait=0.030, forward=0.004, backward=0.005, optimizer=0.001) for i in range(5)]
    r = analyze(steps, RunInfo(loader=LoaderInfo(kind="DataLoader", num_workers=0), cpu_count=8))
    assert r.verdict == "data-loading"
    assert sum(r.breakdown.values()) == pytest.approx(1)
    assert r.breakdown["data_wait"] == pytest.approx(0.75)
    assert r.step_time_s == pytest.approx(0.040)
    assert r.samples_per_s == pytest.approx(8 / 0.040)
    # num_workers=0: one batch takes the 30 ms wait to make; the rest of the step is 10 ms;
    # workers needed = ceil(30 / 10) = 3
    assert any("num_workers=3" in a for a in r.advice)


def test_more_workers_when_workers_are_already_used():
    # 2 workers, starved: step 40 ms of which 30 ms waiting -> each batch takes ~2 x 40 = 80 ms
    # to make; the rest of the step is 10 ms -> ceil(80 / 10) = 8 workers.
    steps = [_step(i, data_wait=0.030, forward=0.005, backward=0.005) for i in range(5)]
    L = LoaderInfo(kind="DataLoader", num_workers=2, prefetch_factor=2, persistent_workers=False)
    r = analyze(steps, RunInfo(loader=L, cpu_count=16))
    assert any("from 2 to 8" in a for a in r.advice)
    assert any("persistent_workers=True" in a for a in r.advice)
    # Too few CPUs for that: say so instead.
    r = analyze(steps, RunInfo(loader=L, cpu_count=4))
    assert any("8 workers would be needed" in a for a in r.advice)


def test_compute_and_host_overhead_verdicts():
    comp = [_step(i, data_wait=0.001, forward=0.010, backward=0.020, optimizer=0.002, other=0.002) for i in range(3)]
    assert analyze(comp, RunInfo()).verdict == "compute"
    host = [_step(i, data_wait=0.001, forward=0.002, backward=0.002, other=0.030) for i in range(3)]
    r = analyze(host, RunInfo())
    assert r.verdict == "host-overhead"
    assert any("every N steps" in a for a in r.advice)


def test_unknown_data_wait_is_null_not_zero():
    steps = [_step(i, forward=0.01, backward=0.01, other=0.02) for i in range(3)]
    r = analyze(steps, RunInfo(data_wait_known=False))
    assert r.breakdown["data_wait"] is None
    assert r.breakdown_median_s["data_wait"] is None
    assert sum(v for v in r.breakdown.values() if v is not None) == pytest.approx(1)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["breakdown"]["data_wait"] is None
    assert d["per_step"][0]["parts_s"]["data_wait"] is None
    assert d["data_wait_known"] is False
    assert any("unknown" in n for n in r.notes)
    assert "unknown" in render_text(r)


def test_launch_bound_on_gpu_is_host_overhead():
    # forward+backward = 30 ms of which 25 ms host-paced (GPU proven busy 5 ms < half).
    steps = [StepRecord(index=i, duration_s=0.032,
                        parts_s={**dict.fromkeys(PHASES, 0.0), "forward": 0.015, "backward": 0.015, "other": 0.002},
                        samples=4, gpu_busy_min_s=0.005, gpu_busy_max_s=0.030, host_paced_s=0.025,
                        other_gpu_busy_s=0.0) for i in range(4)]
    r = analyze(steps, RunInfo(device="cuda:0", device_name="Fake"))
    assert r.verdict == "host-overhead"
    assert any("CUDA graphs" in a for a in r.advice)
    assert r.gpu.host_paced_fraction == pytest.approx(0.025 / 0.032)
    assert r.gpu.busy_fraction_min == pytest.approx(0.005 / 0.032)


def test_report_json_round_trip():
    steps = [_step(i, data_wait=0.01, forward=0.02, backward=0.03) for i in range(4)]
    r = analyze(steps, RunInfo(loader=LoaderInfo(kind="DataLoader", num_workers=1), expected_step_time_s=0.05))
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    for key in ("verdict", "steps", "step_time_s", "overhead_fraction", "breakdown"):
        assert key in d
    assert set(d["breakdown"]) == set(PHASES)
    assert d["measured_over_expected"] == pytest.approx(0.06 / 0.05)
    assert ProfileReport.from_dict(d) == r


def test_no_steps():
    with pytest.raises(NoStepsError, match="no training step"):
        analyze([], RunInfo(warmup_steps=3))


def test_combine_ranks_lockstep_straggler():
    # Rank 1 waits 30 ms for data; rank 0 waits for rank 1 inside backward (all-reduce):
    # both steps take 40 ms. The straggler is the rank with less forward+backward (rank 1).
    r0 = analyze([_step(i, data_wait=0.001, forward=0.004, backward=0.035) for i in range(4)], RunInfo())
    r1 = analyze([_step(i, data_wait=0.030, forward=0.004, backward=0.006) for i in range(4)], RunInfo())
    c = combine_ranks({0: r0, 1: r1}, 2)
    assert c.slowest_rank == 1 and c.rank == 1
    assert c.verdict == "data-loading"
    assert [s.rank for s in c.ranks] == [0, 1]
    assert c.rank_spread == pytest.approx(0)
    # Independent ranks (one clearly slower): the slowest by time.
    r2 = analyze([_step(i, forward=0.1, backward=0.1) for i in range(4)], RunInfo())
    c = combine_ranks({0: r0, 1: r2}, 2)
    assert c.slowest_rank == 1
    assert c.rank_spread == pytest.approx(0.2 / 0.04 - 1)


def test_combine_ranks_with_a_missing_rank():
    r0 = analyze([_step(i, forward=0.01) for i in range(2)], RunInfo())
    c = combine_ranks({0: r0, 1: None}, 2, {1: "sent no result within 5 s"})
    assert c.ranks[1].steps == 0 and c.ranks[1].status == "sent no result within 5 s"
    assert any("rank 1" in n for n in c.notes)
    with pytest.raises(NoStepsError):
        combine_ranks({0: None, 1: None}, 2, {0: "x", 1: "y"})


def test_finite_json_only():
    steps = [_step(0, forward=0.01)]
    d = analyze(steps, RunInfo()).to_dict()
    json.dumps(d, allow_nan=False)
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in d.values())
