"""measure/bench/timing.py with a virtual clock: exact medians, the stopping rules, sync discipline."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from gpuplan.measure.bench import timing as _timing
from gpuplan.measure.bench.timing import measure, quantile


class Clock:
    """A virtual clock: work advances it; the test knows exactly how long everything took."""

    def __init__(self):
        self.t = 0.0
        self.log: list[str] = []
        self.pending = False  # work launched since the last sync

    def read(self):
        self.log.append("clock")
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(_timing, "perf_counter", c.read)
    return c


def test_constant_work_gives_the_exact_time_and_zero_spread(clock):
    def work():
        clock.t += 3e-4
    t = measure(work, budget_s=1.0)
    assert t.median_s == pytest.approx(3e-4, rel=1e-9)
    assert t.iqr_s == pytest.approx(0, abs=1e-15) and not t.noisy
    assert t.stop == "converged"
    # blocks last at least min_block_s = 2 ms: ceil(2e-3 / 3e-4) = 7 calls per block
    assert t.inner == 7
    assert t.samples >= 5
    # warm-up ran for min(0.25, 0.2 * budget) = 0.2 s of virtual time: ceil(0.2 / 3e-4) = 667 calls
    assert t.warmup_calls == math.ceil(0.2 / 3e-4)


def test_slow_work_runs_one_call_per_block(clock):
    def work():
        clock.t += 0.5
    t = measure(work, budget_s=1.0)
    assert t.inner == 1 and t.median_s == pytest.approx(0.5)
    # stops on the budget after the floor of 3 samples (converged needs 5)
    assert t.samples == 3 and t.stop == "budget" and t.warmup_calls == 1


def test_noisy_work_stops_on_the_budget_and_is_flagged(clock):
    rng = random.Random(0)

    def work():
        clock.t += rng.choice([1e-3, 3e-3])
    t = measure(work, budget_s=0.2, min_block_s=1e-4)
    assert t.stop == "budget" and t.noisy and t.spread >= 0.10
    assert t.elapsed_s >= 0.2


def test_median_and_iqr_match_the_statistics_module(clock):
    durations = iter([0.01] * 1 + [0.010, 0.012, 0.011, 0.030, 0.013, 0.0105, 0.0115] * 50)

    def work():
        clock.t += next(durations)
    t = measure(work, budget_s=0.05, min_block_s=0.0, warmup_s=0.0, min_time_s=0.0,
                target_spread=1e-9)
    xs = list(t.times_s)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    assert t.median_s == pytest.approx(statistics.median(xs))
    assert t.iqr_s == pytest.approx(q[2] - q[0])
    assert t.min_s == min(xs)


@pytest.mark.parametrize("xs", [[1.0], [3.0, 1.0], [5, 1, 4, 2, 3], [0.1 * i for i in range(17)]])
def test_quantile_matches_numpy_linear(xs):
    np = pytest.importorskip("numpy")
    s = sorted(xs)
    for q in (0, 0.25, 0.5, 0.75, 1):
        assert quantile(s, q) == pytest.approx(float(np.percentile(s, 100 * q)))


def test_sync_precedes_every_clock_read(clock):
    def sync():
        clock.pending = False
        clock.log.append("sync")

    def launch():
        clock.t += 1e-5
        clock.pending = True
        clock.log.append("launch")

    bad = []
    orig = clock.read

    def read():
        if clock.pending:
            bad.append(len(clock.log))
        return orig()
    _timing.perf_counter = read  # the fixture's monkeypatch restores the module attribute
    t = measure(launch, budget_s=0.05, sync=sync)
    assert bad == [] and t.median_s == pytest.approx(1e-5)
    # and without sync the reads do happen with work pending (the check can fail)
    measure(launch, budget_s=0.01)
    assert bad


def test_events_give_a_device_time_read_after_the_sync(clock):
    class Ev:
        def record(self):
            self.at = clock.t

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.at - self.at) * 1e3

    def work():
        clock.t += 2e-4
    t = measure(work, budget_s=0.1, sync=lambda: None, event=Ev)
    assert t.device_median_s == pytest.approx(2e-4)


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="budget_s"):
        measure(lambda: None, budget_s=0)
