"""The library API on real training loops on the CPU.

Oracles are the loop's own clocks: the test times its own model call, backward and dataset
__getitem__ calls with perf_counter, and the profiler's attribution must agree (within 5% plus a
small per-step allowance for the hooks' own time). No wall-clock speed claims are asserted.
"""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from gpuplan.errors import InputError  # noqa: E402
from gpuplan.measure.profile import NoStepsError, profile  # noqa: E402
from gpuplan.report.profile import render_text  # noqa: E402

HOOK_SLACK_S = 0.0005  # per step: time of the profiler's hooks and the loop's own bookkeeping


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # steadier timings on a shared machine
    yield
    torch.set_num_threads(n)


class SlowDataset(Dataset):
    """Sleeps per item and records how long each __getitem__ took (the data-wait oracle)."""

    def __init__(self, n, sleep_s, dim=32):
        self.n, self.sleep_s, self.dim = n, sleep_s, dim
        self.item_times: list[float] = []  # in fetch order (num_workers=0)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t = time.perf_counter()
        time.sleep(self.sleep_s)
        x = torch.full((self.dim,), float(i))
        y = torch.tensor(i % 4)
        self.item_times.append(time.perf_counter() - t)
        return x, y


def _mlp(dim, hidden, layers):
    mods = [torch.nn.Linear(dim, hidden), torch.nn.ReLU()]
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(hidden, 4))


class TimedLoader:
    """Iterates a loader and times each next() itself: the data-wait oracle."""

    def __init__(self, loader):
        self.loader = loader
        self.fetch_times: list[float] = []

    def __iter__(self):
        it = iter(self.loader)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.fetch_times.append(time.perf_counter() - t)
            yield batch


class Clocks:
    """The loop's own timing of each phase, per fetch index."""

    def __init__(self):
        self.fwd: list[float] = []
        self.bwd: list[float] = []
        self.body_end: list[float] = []


def _train(prof, loader, model, opt, clocks, limit=None):
    for i, (x, y) in enumerate(prof.wrap(loader)):
        t0 = time.perf_counter()
        out = model(x)
        t1 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        clocks.fwd.append(t1 - t0)
        clocks.bwd.append(t3 - t2)
        clocks.body_end.append(time.perf_counter())
        if limit is not None and i + 1 >= limit:
            break


def test_slow_dataset_is_data_loading_bound_and_parts_match_the_loops_clocks():
    ds = SlowDataset(n=4 * 12, sleep_s=0.004)
    timed = TimedLoader(DataLoader(ds, batch_size=4))
    model = _mlp(32, 32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clocks = Clocks()
    t_start = time.perf_counter()
    with profile(model, opt, warmup=2) as prof:
        _train(prof, timed, model, opt, clocks)
    t_loop = time.perf_counter() - t_start
    r = prof.report()
    assert r.verdict == "data-loading"
    assert r.steps == 10
    assert r.status == "complete"
    assert r.loader.kind == "TimedLoader"
    assert any("DataLoader with num_workers > 0" in a for a in r.advice)
    assert r.samples_per_step == 4
    # Per step the attributed parts sum to the step's duration ...
    for s in r.per_step:
        assert sum(s.parts_s.values()) == pytest.approx(s.duration_s, rel=1e-9)
    # ... and the steps tile the loop: step k runs from fetch k (right after body k-1) to fetch
    # k+1 (right after body k). Compare with the loop's own clock, within 5%.
    idx = [s.index for s in r.per_step]
    own = sum(clocks.body_end[k] - clocks.body_end[k - 1] for k in idx)
    assert sum(s.duration_s for s in r.per_step) == pytest.approx(own, rel=0.05)
    assert sum(s.duration_s for s in r.per_step) < t_loop
    # Data wait vs the dataset's own clock, per step (medians: one step in which the process was
    # preempted between two clocks must not decide the test).
    # The loop's own timing of each next() on the DataLoader (TimedLoader) is the oracle; the
    # dataset's sleeps are a lower bound.
    waits = [s.parts_s["data_wait"] for s in r.per_step]
    assert statistics.median(waits) == pytest.approx(
        statistics.median(timed.fetch_times[k] for k in idx), rel=0.05, abs=HOOK_SLACK_S)
    assert statistics.median(waits) >= 0.95 * statistics.median(sum(ds.item_times[4 * k:4 * k + 4]) for k in idx)
    # Forward and backward vs the loop's own timing of model(x) and loss.backward().
    assert statistics.median(s.parts_s["forward"] for s in r.per_step) == pytest.approx(
        statistics.median(clocks.fwd[k] for k in idx), rel=0.05, abs=HOOK_SLACK_S)
    assert statistics.median(s.parts_s["backward"] for s in r.per_step) == pytest.approx(
        statistics.median(clocks.bwd[k] for k in idx), rel=0.05, abs=HOOK_SLACK_S)
    assert 0 < r.overhead_fraction < 0.5


def test_heavy_model_cheap_data_is_compute_bound():
    n, dim = 256 * 12, 256
    ds = TensorDataset(torch.randn(n, dim), torch.randint(0, 4, (n,)))
    loader = DataLoader(ds, batch_size=256)
    model = _mlp(dim, 512, 4)
    opt = torch.optim.AdamW(model.parameters())
    clocks = Clocks()
    with profile(model, opt, warmup=2) as prof:
        _train(prof, loader, model, opt, clocks)
    r = prof.report()
    assert r.verdict == "compute"
    assert r.breakdown["forward"] + r.breakdown["backward"] + r.breakdown["optimizer"] > 0.6
    idx = [s.index for s in r.per_step]
    own = sum(clocks.body_end[k] - clocks.body_end[k - 1] for k in idx)
    assert sum(s.duration_s for s in r.per_step) == pytest.approx(own, rel=0.05)
    assert statistics.median(s.parts_s["forward"] for s in r.per_step) == pytest.approx(
        statistics.median(clocks.fwd[k] for k in idx), rel=0.05, abs=HOOK_SLACK_S)


def test_loop_without_a_dataloader_reports_data_wait_unknown():
    model = _mlp(64, 128, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    own_fwd = []
    with profile(model, opt, warmup=1) as prof:
        for _ in range(8):
            x = torch.randn(16, 64)  # batches made in the loop: no loader to time
            y = torch.randint(0, 4, (16,))
            t = time.perf_counter()
            out = model(x)
            own_fwd.append(time.perf_counter() - t)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    r = prof.report()
    # step k starts at forward k: its forward part is the loop's own timing of model(x)
    assert statistics.median(s.parts_s["forward"] for s in r.per_step) == pytest.approx(
        statistics.median(own_fwd[s.index] for s in r.per_step), rel=0.05, abs=HOOK_SLACK_S)
    assert all(s.parts_s["other"] > 0 and s.parts_s["backward"] > 0 for s in r.per_step)
    assert r.breakdown["data_wait"] is None
    assert r.to_dict()["breakdown"]["data_wait"] is None
    assert sum(v for v in r.breakdown.values() if v is not None) == pytest.approx(1)
    # Steps run from a forward after an optimizer step to the next: 8 forwards -> 7 closed
    # steps (the last is not closed), minus 1 warm-up.
    assert r.steps == 6
    assert r.samples_per_step == 16
    assert "data wait unknown" in render_text(r)


def test_gradient_accumulation_without_loader_is_one_step_per_optimizer_step():
    model = _mlp(16, 16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(model, opt, warmup=1) as prof:
        for _ in range(6):
            for _ in range(3):  # three micro-batches per optimizer step
                torch.nn.functional.cross_entropy(model(torch.randn(4, 16)), torch.randint(0, 4, (4,))).backward()
            opt.step()
            opt.zero_grad()
    r = prof.report()
    # The first cycle is cut at each backward (no optimizer step seen yet): 3 steps (1 warm-up,
    # 2 measured); then one step per optimizer cycle: cycles 2..5 close (the 6th has no next forward).
    assert r.steps == 2 + 4
    assert [s.parts_s["optimizer"] > 0 for s in r.per_step][-4:] == [True] * 4


def test_break_keeps_the_last_step_and_error_leaves_it_out():
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    model = _mlp(8, 8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clocks = Clocks()
    with profile(model, opt, warmup=1) as prof:
        _train(prof, DataLoader(ds, batch_size=4), model, opt, clocks, limit=5)
    r = prof.report()
    assert r.steps == 4  # 5 steps, the 5th ended by `break`, minus 1 warm-up
    assert r.status == "complete"

    with pytest.raises(RuntimeError, match="boom"):
        with profile(model, opt, warmup=1) as prof:
            for i, (x, y) in enumerate(prof.wrap(DataLoader(ds, batch_size=4))):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                if i == 4:
                    raise RuntimeError("boom")
    r = prof.report()
    assert r.status == "error"
    assert r.steps == 3  # steps 0..3 closed, step 4 in progress left out, minus 1 warm-up
    assert any("left out" in n for n in r.notes)


def test_steps_limit_stops_observing_and_everything_is_restored():
    before = {n: torch.Tensor.__dict__.get(n) for n in ("to", "cuda", "cpu", "copy_")}
    backward = torch.autograd.backward
    from torch.nn.modules import module as M
    from torch.optim import optimizer as O

    ds = TensorDataset(torch.randn(80, 8), torch.randint(0, 4, (80,)))
    model = _mlp(8, 8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(model, opt, warmup=1, steps=3) as prof:
        for x, y in prof.wrap(DataLoader(ds, batch_size=4)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if prof.steps_measured >= 3:
                # after the limit the hooks are gone already (full speed from here)
                assert torch.autograd.backward is backward
    assert prof.report().steps == 3
    assert {n: torch.Tensor.__dict__.get(n) for n in before} == before
    assert torch.autograd.backward is backward
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    assert not M._global_forward_pre_hooks and not M._global_forward_hooks
    assert not O._global_optimizer_pre_hooks and not O._global_optimizer_post_hooks


def test_tokens_from_input_ids_and_from_tokens_per_sample():
    class Tok(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(100, 8)
            self.out = torch.nn.Linear(8, 100)

        def forward(self, input_ids):
            return self.out(self.emb(input_ids))

    model = Tok()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [{"input_ids": torch.randint(0, 100, (4, 12))} for _ in range(6)]
    with profile(model, opt, warmup=1) as prof:
        for b in prof.wrap(batches):
            logits = model(b["input_ids"])
            torch.nn.functional.cross_entropy(logits.view(-1, 100), b["input_ids"].view(-1)).backward()
            opt.step()
    r = prof.report()
    assert r.samples_per_s is not None and r.tokens_per_s is not None
    assert r.tokens_per_s == pytest.approx(r.samples_per_s * 12)
    assert "input_ids" in r.tokens_source
    # fixed-length sequences made inside the model: the user says how many tokens per sample
    with profile(model, opt, warmup=1, tokens_per_sample=7) as prof:
        for b in prof.wrap(batches):
            model(b["input_ids"]).sum().backward()
            opt.step()
    r = prof.report()
    assert r.tokens_per_s == pytest.approx(r.samples_per_s * 7)


def test_evaluation_fetches_are_left_out():
    ds = TensorDataset(torch.randn(40, 8), torch.randint(0, 4, (40,)))
    model = _mlp(8, 8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(model, opt, warmup=1) as prof:
        for x, y in prof.wrap(DataLoader(ds, batch_size=4)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            for x, _ in prof.wrap(DataLoader(ds, batch_size=4)):
                model(x)
    r = prof.report()
    assert r.steps == 9  # 10 training batches - 1 warm-up
    assert any("evaluation" in n for n in r.notes)


def test_no_steps_and_bad_arguments():
    model = _mlp(8, 8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(model, opt, warmup=3) as prof:
        torch.nn.functional.cross_entropy(model(torch.randn(2, 8)), torch.tensor([0, 1])).backward()
        opt.step()
    with pytest.raises(NoStepsError, match="no training step"):
        prof.report()
    with pytest.raises(InputError, match="warmup=-1"):
        profile(model, opt, warmup=-1)
    with pytest.raises(InputError, match="steps=0"):
        profile(model, opt, steps=0)
    with pytest.raises(InputError, match="nn.Module"):
        with profile("gpt2", opt):
            pass
    with pytest.raises(InputError, match="optimizer"):
        with profile(model, 0.1):
            pass
    with pytest.raises(InputError, match="inside"):
        prof.wrap([1, 2])
    with profile(model, opt):
        with pytest.raises(InputError, match="do not nest"):
            with profile(model, opt):
                pass


def test_model_found_without_being_given():
    """model=None: the top-level module calls are found with global hooks, then narrowed."""
    ds = TensorDataset(torch.randn(48, 16), torch.randint(0, 4, (48,)))
    model = _mlp(16, 32, 2)
    crit = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    from torch.nn.modules import module as M

    with profile(warmup=1) as prof:
        for x, y in prof.wrap(DataLoader(ds, batch_size=4)):
            crit(model(x), y).backward()
            opt.step()
        # after the first counted step only the root modules carry hooks
        assert not M._global_forward_pre_hooks
        assert model._forward_pre_hooks and crit._forward_pre_hooks
        assert not model[0]._forward_pre_hooks
    r = prof.report()
    assert r.steps == 11
    assert r.breakdown["forward"] > 0 and r.breakdown["optimizer"] > 0


def test_device_copies_are_counted():
    """On a CPU-only machine the only real device change is to 'meta'; it exercises the copy path."""
    model = _mlp(8, 8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(4, 8), torch.randint(0, 4, (4,))) for _ in range(5)]
    with profile(model, opt, warmup=1) as prof:
        for x, y in prof.wrap(batches):
            x.to("meta")  # 4 x 8 float32 = 128 bytes
            x.to(torch.float64)  # dtype only: not a copy between devices
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    r = prof.report()
    assert r.transfer is not None
    assert r.transfer.copies_per_step == 1
    assert r.transfer.h2d_bytes_per_step == 4 * 8 * 4
    assert r.transfer.pageable_fraction == 1.0


def test_measured_vs_estimated_step_time():
    ds = TensorDataset(torch.randn(40, 8), torch.randint(0, 4, (40,)))
    model = _mlp(8, 8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []

    def estimate(report):  # the hook for gpuplan's speed model: gets the measured report
        seen.append(report.samples_per_step)
        return 0.5e-3

    with profile(model, opt, warmup=1, expected_step_time_s=estimate) as prof:
        for x, y in prof.wrap(DataLoader(ds, batch_size=4)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    r = prof.report()
    assert seen == [4]
    assert r.expected_step_time_s == 0.5e-3
    assert r.measured_over_expected == pytest.approx(r.step_time_s / 0.5e-3)
    assert any("estimated" in e for e in r.evidence)
    with pytest.raises(InputError, match="expected_step_time_s"):
        profile(model, opt, expected_step_time_s=-1)
    with profile(model, opt, warmup=1, expected_step_time_s=lambda r: float("nan")) as prof:
        for x, y in prof.wrap(DataLoader(ds, batch_size=4)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    with pytest.raises(InputError, match="returned nan"):
        prof.report()
