"""``gpuplan profile script.py``: unmodified scripts, stop/continue, JSON, plot, failures, torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuplan.cli import main  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")

TRAIN = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 4 * 40
    def __getitem__(self, i):
        time.sleep({sleep})
        return torch.randn(16), torch.randint(0, 4, ())

def main():
    print("script argv:", sys.argv[1:])
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(DataLoader(Slow(), batch_size=4)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        {extra}
    print("script finished")

if __name__ == "__main__":
    main()
"""


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # in-process scripts: steadier timings on a shared machine
    yield
    torch.set_num_threads(n)


def _script(tmp_path, name="train.py", sleep=0.002, extra="pass", body=None):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body) if body is not None else TRAIN.format(sleep=sleep, extra=extra))
    return p


def test_profiles_an_unmodified_script_then_stops_it(tmp_path, capsys):
    script = _script(tmp_path, sleep=0.005)  # 20 ms of loading per 4-item batch, ~1 ms of compute
    rc = main(["profile", "--steps", "6", "--warmup", "2", str(script), "--lr", "3"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "script argv: ['--lr', '3']" in out  # the script saw its own arguments
    assert "script finished" not in out  # stopped after the measured steps
    assert "6 step(s) measured after 2 warm-up" in out
    assert "DATA-LOADING bound" in out
    assert "DataLoader(batch_size=4, num_workers=0" in out  # the script's loader was found
    assert "num_workers=" in out.split("Advice", 1)[1]
    assert "then stopped the script" in out
    assert "profiler overhead:" in out
    # everything the profiler patched is back
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    assert "__next__" in _BaseDataLoaderIter.__dict__ and "to" not in torch.Tensor.__dict__


def test_then_continue_lets_the_script_finish(tmp_path, capsys):
    script = _script(tmp_path, sleep=0.0)
    rc = main(["profile", "--steps", "4", "--warmup", "1", "--then", "continue", str(script)])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "script finished" in out
    assert "4 step(s) measured" in out


def test_json_output_and_plot(tmp_path, capsys):
    script = _script(tmp_path, sleep=0.0)
    png = tmp_path / "steps.png"
    rc = main(["profile", "--steps", "5", "--warmup", "1", "--json", "--plot", str(png), str(script)])
    out, err = capsys.readouterr()
    assert rc == 0
    d = json.loads(out)  # stdout holds only the JSON ...
    assert "script argv" in err  # ... the script's own prints went to stderr
    for key in ("verdict", "steps", "step_time_s", "overhead_fraction", "breakdown"):
        assert key in d
    assert d["verdict"] in ("data-loading", "transfer", "host-overhead", "compute")
    assert d["steps"] == 5 and len(d["per_step"]) == 5
    assert set(d["breakdown"]) == {"data_wait", "transfer", "forward", "backward", "optimizer", "other"}
    assert sum(d["breakdown"].values()) == pytest.approx(1)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_script_that_raises_shows_its_traceback_then_a_partial_report(tmp_path, capsys):
    script = _script(tmp_path, sleep=0.0, extra='if i == 6: raise ValueError("bad batch 6")')
    rc = main(["profile", "--steps", "50", "--warmup", "1", str(script)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "Traceback (most recent call last)" in err
    assert "ValueError: bad batch 6" in err
    assert str(script) in err
    tb = err[err.index("Traceback"):err.index("ValueError")]
    assert "gpuplan" not in tb and "runpy" not in tb  # the script's own frames only
    assert "PARTIAL" in out
    assert "5 step(s) measured" in out  # steps 0..5 closed, step 6 in progress left out, 1 warm-up


def test_no_steps_is_said_plainly(tmp_path, capsys):
    early = _script(tmp_path, "early.py", body="""
        import torch
        raise RuntimeError("cannot open dataset")
    """)
    rc = main(["profile", str(early)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "RuntimeError: cannot open dataset" in err
    assert "no step measured" in err
    assert out == ""
    idle = _script(tmp_path, "idle.py", body="""
        print("nothing to train")
    """)
    rc = main(["profile", str(idle)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "no step measured" in err and "Traceback" not in err


def test_script_exit_status_is_kept(tmp_path, capsys):
    script = _script(tmp_path, sleep=0.0, extra="if i == 5: sys.exit(3)")
    rc = main(["profile", "--steps", "50", "--warmup", "1", str(script)])
    out, _ = capsys.readouterr()
    assert rc == 3
    assert "step(s) measured" in out


def test_script_without_dataloader(tmp_path, capsys):
    script = _script(tmp_path, body="""
        import torch
        model = torch.nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(12):
            x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    """)
    rc = main(["profile", "--steps", "5", "--warmup", "1", "--json", str(script)])
    out, _ = capsys.readouterr()
    assert rc == 0
    d = json.loads(out)
    assert d["breakdown"]["data_wait"] is None
    assert d["data_wait_known"] is False
    assert d["steps"] == 5


@pytest.mark.parametrize("args, words", [
    (["profile", "missing.py"], "no such file"),
    (["profile", "--steps", "0", "{script}"], "--steps '0'"),
    (["profile", "--warmup", "-1", "{script}"], "--warmup '-1'"),
    (["profile", "--plot", "/no/such/dir/x.png", "{script}"], "does not exist"),
    (["profile", "--then", "later", "{script}"], "invalid choice"),
    (["profile", "--expected-step-time", "fast", "{script}"], "--expected-step-time 'fast'"),
    (["profile"], "required"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, capsys, args, words):
    script = _script(tmp_path)
    rc = main([a.format(script=script) for a in args])
    out, err = capsys.readouterr()
    assert rc == 2
    assert words in err
    assert len(err.strip().splitlines()) == 1
    assert "script argv" not in out  # the script never ran


def test_imports_do_not_pull_torch():
    code = ("import sys, gpuplan, gpuplan.cli.profile, gpuplan.measure.profile, gpuplan.report.profile;"
            "bad = [m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": SRC}, check=True).stdout
    assert out.strip() == "[]"


DDP = """
import os, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.nn.parallel import DistributedDataParallel as DDP

class DS(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        if int(os.environ["RANK"]) == 1:
            time.sleep(0.004)   # rank 1 is starved; rank 0 waits for it in the all-reduce
        return torch.randn(32), torch.randint(0, 4, ())

dist.init_process_group("gloo")
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for x, y in DataLoader(DS(), batch_size=4):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
finally:
    dist.destroy_process_group()
"""


def test_torchrun_two_ranks_one_report(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    gather_dir = tmp_path / "gather"
    gather_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": SRC, "GPUPLAN_PROFILE_DIR": str(gather_dir), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "-m", "gpuplan", "profile", "--steps", "8", "--warmup", "2", "--json", str(script)],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(proc.stdout)  # exactly one JSON document: only rank 0 printed
    assert d["world_size"] == 2
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert all(r["steps"] == 8 for r in d["ranks"])
    assert d["slowest_rank"] in (0, 1) and d["rank"] == d["slowest_rank"]
    assert d["rank_spread"] is not None
    # rank 1 waits for data; rank 0 waits for rank 1 in backward: rank 1 is the straggler
    by_rank = {r["rank"]: r for r in d["ranks"]}
    assert by_rank[1]["breakdown"]["data_wait"] > by_rank[0]["breakdown"]["data_wait"]
    assert d["slowest_rank"] == 1
    assert list(gather_dir.iterdir()) == []  # the exchange directory was cleaned up


def test_gather_with_torch_distributed(tmp_path):
    """The collective way (several nodes with a live process group), on a one-process gloo group."""
    import torch.distributed as dist

    from gpuplan.measure.profile.analysis import RunInfo, analyze
    from gpuplan.measure.profile.distributed import DistEnv, gather_reports
    from gpuplan.measure.profile.types import PHASES, StepRecord

    steps = [StepRecord(index=i, duration_s=0.01, parts_s={**dict.fromkeys(PHASES, 0.0), "forward": 0.01})
             for i in range(3)]
    local = analyze(steps, RunInfo())
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        r = gather_reports(local, env=DistEnv(0, 1, 1), mode="collective")
    finally:
        dist.destroy_process_group()
    assert r.world_size == 1 and [s.rank for s in r.ranks] == [0]
    assert r.step_time_s == local.step_time_s
