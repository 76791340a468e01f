"""measure/store.py: every field round-trips; failures are one clear line and lose nothing."""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys

import pytest

from gpuplan.errors import InputError
from gpuplan.measure import store
from gpuplan.measure.bench.types import (
    BandwidthResult, BenchRun, GPUInfo, Machine, MatmulResult, OverheadResult,
)
from gpuplan.measure.store import (
    StoreError, default_db_path, latest_run, list_runs, load_run, resolve_run, save_run,
)


def _machine(key="host-a|Test CPU|4c/8t", host="host-a") -> Machine:
    return Machine(
        key=key, hostname=host, os="Linux-test", python="3.10.99", cpu_model="Test CPU",
        physical_cores=4, logical_cores=8, memory_bytes=64 * 10**9,
        cpu_peak_fp32_flops=1.234e12, cpu_peak_basis="estimate: test",
        gpus=(GPUInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_bytes=85520809984,
                      compute_capability="9.0", sm_count=132, catalog_name="H100-SXM-80GB"),
              GPUInfo(index=1, name="Mystery", memory_bytes=1, compute_capability="1.0")),
        driver="550.54.15", torch="2.99.0", cuda="12.9", gpuplan="0.1.0",
    )


def _run(machine=None, *, created="2026-01-02T03:04:05+00:00", scale=1.0) -> BenchRun:
    """A run where every field holds a distinct, non-default value."""
    return BenchRun(
        created_utc=created,
        machine=machine or _machine(),
        matmul=(
            MatmulResult(device="cpu", device_name="Test CPU", dtype="fp32", size=1024,
                         median_s=0.0123456789 * scale, iqr_s=0.000321, min_s=0.0120001,
                         samples=11, inner=2, noisy=True, threads=8, tf32=False,
                         peak_flops=1.234e12, peak_source="estimate: test"),
            MatmulResult(device="cuda:0", device_name="NVIDIA H100 80GB HBM3", dtype="bf16",
                         size=4096, median_s=1.9e-4 * scale, iqr_s=2e-6, min_s=1.85e-4, samples=40,
                         inner=7, noisy=False, threads=None, tf32=False, peak_flops=989.4e12,
                         peak_source="catalog dense H100-SXM-80GB", end_to_end_median_s=0.0151,
                         end_to_end_iqr_s=0.0002, device_median_s=1.7e-4),
            MatmulResult(device="cuda:0", device_name="NVIDIA H100 80GB HBM3", dtype="bf16",
                         size=8192, median_s=1.4e-3 * scale, iqr_s=1e-5, min_s=1.39e-3, samples=9,
                         inner=1, noisy=False, tf32=False, peak_flops=989.4e12,
                         peak_source="catalog dense H100-SXM-80GB"),
            MatmulResult(device="cuda:0", device_name="NVIDIA H100 80GB HBM3", dtype="tf32",
                         size=2048, median_s=5e-5, iqr_s=1e-6, min_s=4.9e-5, samples=30, inner=3,
                         noisy=False, tf32=True),
        ),
        bandwidth=(
            BandwidthResult(device="cpu", kind="host_copy", nbytes=268435456, median_s=0.0201,
                            iqr_s=0.001, noisy=False),
            BandwidthResult(device="cuda:0", kind="h2d_pinned", nbytes=268435456,
                            median_s=0.0105, iqr_s=0.0001, noisy=True),
        ),
        overhead=(
            OverheadResult(device="cuda:0", kind="kernel_launch", median_s=4.5e-6, iqr_s=1e-7,
                           noisy=False),
            OverheadResult(device="cpu", kind="op_dispatch", median_s=2.1e-6, iqr_s=2e-8,
                           noisy=True),
        ),
        settings={"threads": 8, "budget_s": 1.5, "sizes": [1024, 4096], "tf32_default": "x",
                  "nested": {"a": [1, 2.5, None, "s"]}},
        notes=("note one", "note two"),
        warnings=("warn ü",),
    )


def test_every_field_round_trips(tmp_path):
    db = tmp_path / "b.sqlite"
    run = _run()
    rid = save_run(run, db)
    got = load_run(rid, db)
    assert got == dataclasses.replace(run, run_id=rid)
    # not vacuous: the fixture sets every field of every stored dataclass to a non-default value
    for cls, objs in ((MatmulResult, run.matmul[1:2]), (BandwidthResult, run.bandwidth),
                      (OverheadResult, run.overhead), (Machine, [run.machine]),
                      (GPUInfo, run.machine.gpus[:1])):
        for f in dataclasses.fields(cls):
            vals = [getattr(o, f.name) for o in objs]
            assert all(v is not None for v in vals) or cls is MatmulResult and f.name == "threads"
    assert isinstance(got.matmul[0].noisy, bool) and got.matmul[0].noisy is True
    assert got.matmul[3].tf32 is True and got.matmul[1].threads is None


def test_the_schema_covers_every_dataclass_field(tmp_path):
    db = tmp_path / "b.sqlite"
    save_run(_run(), db)
    con = sqlite3.connect(db)
    for table, cls in (("matmul", MatmulResult), ("bandwidth", BandwidthResult),
                       ("overhead", OverheadResult)):
        cols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        assert {f.name for f in dataclasses.fields(cls)} | {"run_id"} == cols
    assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    con.close()


def test_latest_run_summarizes_the_largest_size_per_device_and_dtype(tmp_path):
    db = tmp_path / "b.sqlite"
    m = _machine()
    save_run(_run(m, created="2026-01-01T00:00:00+00:00", scale=2.0), db)
    rid = save_run(_run(m, created="2026-01-02T00:00:00+00:00"), db)
    save_run(_run(_machine(key="other|Test CPU|4c/8t", host="other"), scale=3.0), db)
    got = latest_run(db, machine=m.key)
    assert got.run_id == rid
    # cuda:0 bf16 was measured at 4096 and 8192: the 8192 figure is used, 2*8192^3 / 1.4e-3
    assert got.matmul_size["cuda:0", "bf16"] == 8192
    assert got.flops("cuda:0", "bf16") == pytest.approx(2 * 8192**3 / 1.4e-3)
    assert got.fraction_of_peak("cuda:0", "bf16") == pytest.approx(2 * 8192**3 / 1.4e-3 / 989.4e12)
    assert got.flops("cpu", "fp32") == pytest.approx(2 * 1024**3 / 0.0123456789)
    assert got.fraction_of_peak("cuda:0", "tf32") is None  # no peak known for that case
    # bandwidth: a copy counts read + write (2x the buffer); a transfer counts the buffer once
    assert got.bandwidth_of("cpu", "host_copy") == pytest.approx(2 * 268435456 / 0.0201)
    assert got.bandwidth_of("cuda:0", "h2d_pinned") == pytest.approx(268435456 / 0.0105)
    assert got.overhead_of("cuda:0", "kernel_launch") == pytest.approx(4.5e-6)
    assert got.device_names["cuda:0"] == "NVIDIA H100 80GB HBM3"
    assert latest_run(db, machine="nobody") is None
    assert latest_run(tmp_path / "missing.sqlite") is None
    assert not (tmp_path / "missing.sqlite").exists()  # reading never creates a file


def test_latest_run_for_this_machine_needs_no_torch(tmp_path):
    db = tmp_path / "b.sqlite"
    code = (
        "import sys, dataclasses\n"
        "from gpuplan.measure import store\n"
        "from gpuplan.measure.bench.types import BenchRun, MatmulResult\n"
        "me = store.machine_fingerprint()\n"
        "m = MatmulResult(device='cpu', device_name='x', dtype='fp32', size=64, median_s=1e-3,\n"
        "                 iqr_s=0.0, min_s=1e-3, samples=5, inner=1, noisy=False)\n"
        f"store.save_run(BenchRun(created_utc='t', machine=me, matmul=(m,)), {str(db)!r})\n"
        f"got = store.latest_run({str(db)!r})\n"
        "assert got is not None and got.flops('cpu', 'fp32') == 2 * 64**3 / 1e-3\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_corrupt_file_is_a_clear_error_and_is_left_untouched(tmp_path):
    db = tmp_path / "b.sqlite"
    junk = b"this is not a database\x00" * 200
    db.write_bytes(junk)
    with pytest.raises(StoreError, match=r"corrupt or not a SQLite database.*left untouched") as e:
        save_run(_run(), db)
    assert "\n" not in str(e.value)
    with pytest.raises(StoreError, match="corrupt"):
        list_runs(db)
    assert db.read_bytes() == junk


def test_a_locked_database_fails_cleanly_and_keeps_earlier_runs(tmp_path, monkeypatch):
    db = tmp_path / "b.sqlite"
    first = save_run(_run(), db)
    monkeypatch.setattr(store, "LOCK_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match=r"locked by another process"):
            save_run(_run(), db)
        with pytest.raises(StoreError, match="locked"):
            load_run(first, db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r.run_id for r in list_runs(db)] == [first]
    assert load_run(first, db) == dataclasses.replace(_run(), run_id=first)


def test_a_failed_write_stores_nothing_of_the_run(tmp_path):
    db = tmp_path / "b.sqlite"
    first = save_run(_run(), db)
    bad = dataclasses.replace(_run(), bandwidth=(
        BandwidthResult(device="cpu", kind="host_copy", nbytes=None, median_s=1.0, iqr_s=0.0,
                        noisy=False),))  # NOT NULL fails after the run and its matmuls went in
    with pytest.raises(StoreError):
        save_run(bad, db)
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    assert con.execute("SELECT COUNT(*) FROM matmul").fetchone()[0] == len(_run().matmul)
    con.close()
    assert [r.run_id for r in list_runs(db)] == [first]


def test_another_programs_database_is_refused_and_untouched(tmp_path):
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match="not a gpuplan bench database"):
        save_run(_run(), db)
    assert db.read_bytes() == before


def test_a_newer_schema_is_refused(tmp_path):
    db = tmp_path / "b.sqlite"
    save_run(_run(), db)
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer gpuplan"):
        save_run(_run(), db)
    with pytest.raises(StoreError, match="newer gpuplan"):
        list_runs(db)


def test_unwritable_locations_are_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        save_run(_run(), tmp_path / "no" / "such" / "dir" / "b.sqlite")
    with pytest.raises(StoreError, match="is a directory"):
        save_run(_run(), tmp_path)
    with pytest.raises(StoreError, match="is a directory"):
        store.check_db(tmp_path)
    with pytest.raises(StoreError, match="is a directory"):
        list_runs(tmp_path)
    with pytest.raises(StoreError, match="cannot be (written|read)"):
        save_run(_run(), "/proc/gpuplan-bench-test.sqlite")  # procfs: no files can be created


def test_run_references(tmp_path):
    db = tmp_path / "b.sqlite"
    ids = [save_run(_run(), db) for _ in range(3)]
    assert resolve_run("latest", db) == ids[-1]
    assert resolve_run("latest~2", db) == ids[0]
    assert resolve_run(str(ids[1]), db) == ids[1]
    with pytest.raises(StoreError, match="holds 3 run"):
        resolve_run("latest~3", db)
    with pytest.raises(InputError, match="expected a run id"):
        resolve_run("yesterday", db)
    with pytest.raises(StoreError, match="no bench run 99"):
        load_run(99, db)


def test_default_path_honours_env_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "env.sqlite"))
    assert default_db_path() == tmp_path / "env.sqlite"
    monkeypatch.delenv("GPUPLAN_BENCH_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "gpuplan" / "bench.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".local" / "share" / "gpuplan" / "bench.sqlite"


def test_the_default_location_is_created_on_first_save(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUPLAN_BENCH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    rid = save_run(_run())
    assert (tmp_path / "xdg" / "gpuplan" / "bench.sqlite").is_file()
    assert load_run(rid).run_id == rid


def test_check_db_writes_nothing(tmp_path, monkeypatch):
    from gpuplan.measure.store import check_db

    new = tmp_path / "new.sqlite"
    assert check_db(new) == new and not new.exists()  # created by the first save only
    monkeypatch.delenv("GPUPLAN_BENCH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    check_db()
    assert not (tmp_path / "xdg").exists()
    db = tmp_path / "b.sqlite"
    save_run(_run(), db)
    before = db.read_bytes()
    assert check_db(db) == db and db.read_bytes() == before
    with pytest.raises(StoreError, match="does not exist"):
        check_db(tmp_path / "nope" / "b.sqlite")
    bad = tmp_path / "junk.sqlite"
    bad.write_bytes(b"junk" * 500)
    with pytest.raises(StoreError, match="corrupt"):
        check_db(bad)


def test_a_failed_save_is_an_outcome_that_keeps_the_run(tmp_path):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"not a database" * 100)
    path, why = store.check_db_or_why(corrupt)
    assert path is None and "corrupt.sqlite" in why
    out = store.save_checked(_run(), path, why)
    assert (out.saved, out.path, out.error) == (False, None, why)
    assert out.run == _run()  # nothing of the measurement is lost

    good = tmp_path / "bench.sqlite"
    path, why = store.check_db_or_why(good)
    assert (path, why) == (good, None)
    out = store.save_checked(_run(), path)
    assert out.saved and out.error is None
    assert [r.run_id for r in list_runs(good)] == [out.run.run_id]
    assert load_run(out.run.run_id, good) == out.run
