"""compute/measured.py reads what gpuplan.measure.store writes: the same run, the same figures, the
same refusals -- with the standard library only, and without importing gpuplan.measure."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys

import pytest

from gpuplan.compute.measured import (
    APPLICATION_ID, BenchDatabaseError, MeasuredRun, db_path, default_db_path, latest_measured,
    load_measured, machine_key, this_machine_key,
)
from gpuplan.measure import (
    BandwidthResult, BenchRun, Machine, MatmulResult, OverheadResult, latest_run,
    machine_fingerprint, save_run,
)
from gpuplan.measure import store

KEY = "host-a|Test CPU|4c/8t"


def _machine(key: str = KEY) -> Machine:
    return Machine(key=key, hostname=key.split("|")[0], os="Linux-test", python="3.10.99",
                   cpu_model="Test CPU", physical_cores=4, logical_cores=8, memory_bytes=10**10,
                   cpu_peak_fp32_flops=1e12, cpu_peak_basis="estimate: test")


def _mm(device: str, dtype: str, size: int, median_s: float, peak: float | None = None,
        name: str = "NVIDIA H100 80GB HBM3") -> MatmulResult:
    return MatmulResult(device=device, device_name="Test CPU" if device == "cpu" else name,
                        dtype=dtype, size=size, median_s=median_s, iqr_s=1e-6, min_s=median_s,
                        samples=5, inner=1, noisy=False, peak_flops=peak)


def _run(key: str = KEY, *, scale: float = 1.0, created: str = "2026-01-02T00:00:00+00:00"):
    return BenchRun(
        created_utc=created, machine=_machine(key),
        matmul=(
            _mm("cpu", "fp32", 1024, 0.0125 * scale, peak=1e12),
            _mm("cuda:0", "bf16", 4096, 2.0e-4 * scale, peak=989e12),
            _mm("cuda:0", "bf16", 8192, 1.6e-3 * scale, peak=989e12),
            _mm("cuda:0", "bf16", 2048, 1.0e-4 * scale, peak=989e12),  # smaller, after: ignored
            _mm("cuda:0", "tf32", 2048, 5e-5 * scale),  # no peak known
        ),
        bandwidth=(
            BandwidthResult(device="cpu", kind="host_copy", nbytes=1 << 28, median_s=0.02,
                            iqr_s=1e-4, noisy=False),
            BandwidthResult(device="cuda:0", kind="h2d_pinned", nbytes=1 << 28, median_s=0.01,
                            iqr_s=1e-4, noisy=False),
        ),
        overhead=(
            OverheadResult(device="cuda:0", kind="kernel_launch", median_s=4.5e-6, iqr_s=1e-7,
                           noisy=False),
        ),
    )


def _same(got: MeasuredRun, want) -> None:
    """Every figure the speed model reads is equal (not approximately: the same arithmetic)."""
    assert got.run_id == want.run_id and got.created_utc == want.created_utc
    for name in ("device_names", "matmul_flops", "matmul_size", "matmul_peak_flops", "bandwidth",
                 "overhead_s"):
        assert dict(getattr(got, name)) == dict(getattr(want, name)), name


def test_the_reader_gives_the_stores_figures(tmp_path):
    db = tmp_path / "b.sqlite"
    save_run(_run(scale=2.0, created="2026-01-01T00:00:00+00:00"), db)
    rid = save_run(_run(), db)
    save_run(_run("other|Test CPU|4c/8t", scale=3.0), db)  # another machine's, newer
    got = latest_measured(db, machine=KEY)
    _same(got, latest_run(db, machine=KEY))
    assert got.run_id == rid and got.machine_key == KEY
    # by hand: the largest size per (device, dtype), 2 N^3 / median
    assert got.matmul_size["cuda:0", "bf16"] == 8192
    assert got.flops("cuda:0", "bf16") == 2.0 * 8192**3 / 1.6e-3
    assert got.fraction_of_peak("cuda:0", "bf16") == 2.0 * 8192**3 / 1.6e-3 / 989e12
    assert got.flops("cpu", "fp32") == 2.0 * 1024**3 / 0.0125
    assert got.fraction_of_peak("cuda:0", "tf32") is None
    # a copy counts read + write; a host-to-device transfer counts the buffer once
    assert got.bandwidth_of("cpu", "host_copy") == 2 * (1 << 28) / 0.02
    assert got.bandwidth_of("cuda:0", "h2d_pinned") == (1 << 28) / 0.01
    assert got.overhead_of("cuda:0", "kernel_launch") == 4.5e-6
    assert got.device_names == {"cpu": "Test CPU", "cuda:0": "NVIDIA H100 80GB HBM3"}
    _same(latest_measured(db, machine="other|Test CPU|4c/8t"),
          latest_run(db, machine="other|Test CPU|4c/8t"))


def test_nothing_measured_is_none_and_reading_writes_nothing(tmp_path):
    assert latest_measured(tmp_path / "missing.sqlite") is None
    assert not (tmp_path / "missing.sqlite").exists()
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert latest_measured(empty, machine=KEY) is None
    db = tmp_path / "b.sqlite"
    save_run(_run(), db)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    assert latest_measured(db, machine="nobody|x|1c/1t") is None
    latest_measured(db, machine=KEY)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_refusals_match_the_store(tmp_path):
    foreign = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    newer = tmp_path / "newer.sqlite"
    save_run(_run(), newer)
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    con.commit()
    con.close()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 100)
    for path, match in ((foreign, "not a gpuplan bench database"),
                        (newer, "written by a newer gpuplan"),
                        (garbage, "corrupt or not a SQLite database"),
                        (tmp_path, "is a directory")):
        with pytest.raises(BenchDatabaseError, match=match) as ours:
            latest_measured(path, machine=KEY)
        with pytest.raises(store.StoreError) as theirs:
            latest_run(path, machine=KEY)
        assert str(ours.value) == str(theirs.value)
        assert "\n" not in str(ours.value)


def test_the_store_and_the_reader_share_one_path_and_one_key(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "env.sqlite"))
    assert default_db_path() == store.default_db_path() == tmp_path / "env.sqlite"
    assert db_path("~/x.sqlite") == store.db_path("~/x.sqlite")
    assert store.APPLICATION_ID == APPLICATION_ID
    assert machine_key("h", "cpu", 2, 4) == "h|cpu|2c/4t"
    assert this_machine_key() == machine_fingerprint(gpus="none").key
    # load_measured: this machine's latest run in the default database
    save_run(_run(this_machine_key()), tmp_path / "env.sqlite")
    _same(load_measured(), latest_run())


def test_the_reader_never_imports_the_measure_package():
    code = ("import sys, gpuplan.compute\n"
            "from gpuplan.compute.measured import latest_measured\n"
            "latest_measured()\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpuplan.measure')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
