"""Stored bench runs: a local SQLite database (standard library only, never imports torch).

Every ``gpuplan bench`` run is saved, with the machine's fingerprint, in one transaction: a run is
stored whole or not at all, and a failed write (locked, full, read-only) leaves every earlier run as
it was. A file that is not a gpuplan bench database -- corrupt, another program's, or written by a
newer gpuplan -- is never modified; the error says so in one line.

Where: ``--db PATH``, else ``$GPUPLAN_BENCH_DB``, else ``$XDG_DATA_HOME/gpuplan/bench.sqlite``
(``~/.local/share/gpuplan/bench.sqlite``; ``%LOCALAPPDATA%\\gpuplan\\bench.sqlite`` on Windows).

The speed model reads this machine's latest measurements with :func:`latest_run`::

    m = latest_run()                     # None when this machine has no stored run
    m.flops("cuda:0", "bf16")            # achieved FLOP/s at the largest size measured
    m.fraction_of_peak("cuda:0", "bf16") # achieved / catalog dense peak
    m.bandwidth_of("cuda:0", "device_copy"), m.overhead_of("cuda:0", "kernel_launch")
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import contextmanager
from dataclasses import asdict, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Iterator, Mapping

from .._record import record
from ..compute.measured import (
    BadRun, MeasuredRun, checked_float, checked_int, checked_json, checked_text, explain_db_error,
    recover_hot_journal, skip_run, stored_text,
)
from ..bounds import MAX_DIGITS
from ..errors import InputError, opt, printable, shown
from .bench.machine import machine_fingerprint, machine_key
from ._paths import db_path, default_db_path
from .bench.types import (
    BandwidthResult, BenchRun, GPUInfo, Machine, MatmulResult, OverheadResult,
)

__all__ = [
    "SCHEMA_VERSION", "StoreError", "Measured", "default_db_path", "db_path", "summarize",
    "save_run", "load_run",
    "list_runs", "latest_run", "resolve_run", "check_db", "machine_fingerprint", "machine_key",
    "SaveOutcome", "check_db_or_why", "save_checked",
]

#: Bumped whenever the tables change; a database from a newer gpuplan is refused, not rewritten.
SCHEMA_VERSION = 1
#: ``PRAGMA application_id`` marking a gpuplan bench database ("gpb1").
APPLICATION_ID = 0x67706231
#: Seconds to wait for another process's lock before giving up.
LOCK_TIMEOUT_S = 5.0
#: Most of one machine's newest runs looked at for one that passes validation.
_RUNS_TRIED = 50

_SCHEMA = """
CREATE TABLE runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    created_utc   TEXT NOT NULL,
    machine_key   TEXT NOT NULL,
    machine_json  TEXT NOT NULL,
    settings_json TEXT NOT NULL,
    notes_json    TEXT NOT NULL,
    warnings_json TEXT NOT NULL
);
CREATE INDEX runs_by_machine ON runs (machine_key, id);
CREATE TABLE matmul (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    device TEXT NOT NULL, device_name TEXT NOT NULL, dtype TEXT NOT NULL, size INTEGER NOT NULL,
    median_s REAL NOT NULL, iqr_s REAL NOT NULL, min_s REAL NOT NULL,
    samples INTEGER NOT NULL, inner INTEGER NOT NULL, noisy INTEGER NOT NULL,
    threads INTEGER, tf32 INTEGER NOT NULL, peak_flops REAL, peak_source TEXT,
    end_to_end_median_s REAL, end_to_end_iqr_s REAL, device_median_s REAL
);
CREATE TABLE bandwidth (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    device TEXT NOT NULL, kind TEXT NOT NULL, nbytes INTEGER NOT NULL,
    median_s REAL NOT NULL, iqr_s REAL NOT NULL, noisy INTEGER NOT NULL
);
CREATE TABLE overhead (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    device TEXT NOT NULL, kind TEXT NOT NULL,
    median_s REAL NOT NULL, iqr_s REAL NOT NULL, noisy INTEGER NOT NULL
);
"""

_ROW_TABLES = (("matmul", MatmulResult), ("bandwidth", BandwidthResult), ("overhead", OverheadResult))


class StoreError(InputError):
    """The bench database cannot be read or written (one line: the path, the problem, the remedy)."""


def _explain(e: BaseException, path: Path, doing: str, *, write: bool = False) -> StoreError:
    return StoreError(explain_db_error(e, path, doing, write=write, timeout_s=LOCK_TIMEOUT_S))


def _connect(path: Path, *, write: bool) -> sqlite3.Connection:
    if path.is_dir():
        raise StoreError(f"bench database {str(path)!r} is a directory; give a file name to "
                         f"{opt('db')}")
    if write:
        if path == default_db_path() and not path.parent.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise _explain(e, path, "creating its directory", write=True) from None
        if not path.parent.is_dir():
            raise StoreError(f"bench database {str(path)!r}: directory {str(path.parent)!r} does "
                             f"not exist; create it or pass {opt('db')} PATH")
        uri = f"{path.resolve().as_uri()}?mode=rwc"
    else:
        recover_hot_journal(path)  # a killed writer's journal, rolled back before any read
        uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT_S, isolation_level=None)
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise _explain(e, path, "opening it", write=write) from None
    conn.text_factory = stored_text
    try:
        conn.execute("PRAGMA foreign_keys = ON")
    except (sqlite3.Error, UnicodeDecodeError) as e:
        conn.close()
        raise _explain(e, path, "opening it", write=write) from None
    return conn


def _check_schema(conn: sqlite3.Connection, path: Path, *, create: bool) -> bool:
    """True when the schema is ours (creating it in the open transaction if ``create``)."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    ver = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app == 0 and ver == 0 and not tables:
        if not create:
            return False
        for stmt in _SCHEMA.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return True
    if app != APPLICATION_ID:
        raise StoreError(f"bench database {str(path)!r} is a SQLite file but not a gpuplan bench "
                         f"database; it was left untouched: pass {opt('db')} NEW.sqlite")
    if ver > SCHEMA_VERSION:
        raise StoreError(f"bench database {str(path)!r} has schema version {ver}, written by a newer "
                         f"gpuplan (this one reads version {SCHEMA_VERSION}); upgrade gpuplan or "
                         f"pass {opt('db')} NEW.sqlite")
    return True


def _check_intact(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse to write into a database whose pages are damaged (``PRAGMA quick_check``: every
    page and index entry read once, under the write lock, before anything is written)."""
    problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if problems != ["ok"]:
        raise StoreError(f"bench database {str(path)!r} is corrupt ({printable(problems[0], 120)})"
                         f"; it was left untouched: move it aside or pass {opt('db')} NEW.sqlite")


def _value(v: object) -> object:
    return int(v) if isinstance(v, bool) else v


#: How each stored column of a result row is checked when read: (checker, range).
_INT_COLUMNS = {"size": "dim", "samples": "int", "inner": "int", "threads": "int",
                "nbytes": "bytes"}


def _checked_field(f, v: object) -> object:
    """One stored column, validated against its dataclass field (:class:`BadRun` when not)."""
    optional = "None" in str(f.type)
    if v is None and optional:
        return None
    if f.type.startswith("bool"):
        if v not in (0, 1) or isinstance(v, float):
            raise BadRun(f"{f.name} is {shown(v)}, not 0 or 1")
        return bool(v)
    if f.name in _INT_COLUMNS:
        return checked_int(v, f.name, _INT_COLUMNS[f.name])
    if f.type.startswith("float"):
        # a median time and a peak are > 0 (they divide); spreads and minima may be 0
        bound = ("flops" if f.name == "peak_flops" else
                 "seconds" if "median" in f.name else "duration")
        return checked_float(v, f.name, bound)
    return checked_text(v, f.name)


def _from_row(cls: type, names: list[str], row: tuple) -> object:
    kw = {f.name: _checked_field(f, row[names.index(f.name)]) for f in fields(cls)}
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        raise BadRun(f"{cls.__name__}: {e}") from None


def _machine_from_json(text: str) -> Machine:
    d = checked_json(text, "machine_json", dict)
    try:
        gpus = d.get("gpus", ())  # type: ignore[union-attr]
        if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
            raise BadRun("machine_json gpus is not a list of objects")
        d["gpus"] = tuple(GPUInfo(**g) for g in gpus)  # type: ignore[index]
        known = {f.name for f in fields(Machine)}
        m = Machine(**{k: v for k, v in d.items() if k in known})  # type: ignore[union-attr]
    except TypeError as e:
        raise BadRun(f"machine_json: {e}") from None
    checked_text(m.key, "machine key")
    checked_text(m.cpu_model, "machine cpu_model")
    return m


def check_db(db: str | os.PathLike | None = None) -> Path:
    """Check, before a long measurement, that the run can be saved; return the database's path.

    An existing file is opened and its schema checked (nothing is written); a missing one only
    needs a writable directory (it is created on the first save), so a run that then fails leaves
    no file behind.
    """
    path = db_path(db)
    if not path.exists():
        probe = path.parent
        if path != default_db_path() and not probe.is_dir():
            raise StoreError(f"bench database {str(path)!r}: directory {str(probe)!r} does "
                             f"not exist; create it or pass {opt('db')} PATH")
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent  # the default directory is created on the first save
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise StoreError(f"bench database {str(path)!r} cannot be written (directory "
                             f"{str(probe)!r} is not writable); pass {opt('db')} WRITABLE.sqlite "
                             "(or set "
                             "GPUPLAN_BENCH_DB)")
        return path
    with _write_transaction(path, "checking it") as conn:
        _check_schema(conn, path, create=False)  # refuses a foreign or newer database
        conn.execute("ROLLBACK")  # only checked: nothing to keep
    return path


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


@contextmanager
def _write_transaction(path: Path, doing: str) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` on ``path``; committed when the block ends (unless it ended the
    transaction itself), rolled back on any failure, an SQLite error explained in one line."""
    conn = _connect(path, write=True)
    try:
        conn.execute("BEGIN IMMEDIATE")
        _check_intact(conn, path)
        yield conn
        if conn.in_transaction:
            conn.execute("COMMIT")
    except (sqlite3.Error, UnicodeDecodeError) as e:
        _rollback(conn)
        raise _explain(e, path, doing, write=True) from None
    except BaseException:
        _rollback(conn)
        raise
    finally:
        conn.close()


def save_run(run: BenchRun, db: str | os.PathLike | None = None) -> int:
    """Store ``run`` in one transaction and return its id; on any failure nothing is written."""
    path = db_path(db)
    with _write_transaction(path, "saving the run") as conn:
        _check_schema(conn, path, create=True)
        cur = conn.execute(
            "INSERT INTO runs (created_utc, machine_key, machine_json, settings_json, notes_json, "
            "warnings_json) VALUES (?, ?, ?, ?, ?, ?)",
            (run.created_utc, run.machine.key, json.dumps(asdict(run.machine)),
             json.dumps(dict(run.settings)), json.dumps(list(run.notes)),
             json.dumps(list(run.warnings))),
        )
        run_id = int(cur.lastrowid)
        for table, cls in _ROW_TABLES:
            names = [f.name for f in fields(cls)]
            sql = (f"INSERT INTO {table} (run_id, {', '.join(names)}) "
                   f"VALUES (?, {', '.join('?' * len(names))})")
            rows = [(run_id, *(_value(getattr(r, n)) for n in names)) for r in getattr(run, table)]
            conn.executemany(sql, rows)
    return run_id


@record(kw_only=False)
class SaveOutcome:
    """Where a new run was stored, or why it was not (what ``gpuplan bench`` says after a run)."""

    run: BenchRun
    """The run, with its ``run_id`` when it was saved."""
    path: Path | None
    """The database checked before the run; None when it was not usable (or saving was off)."""
    error: str | None = None
    """Why the run was not saved (one line); None when it was, or when saving was off."""

    @property
    def saved(self) -> bool:
        return self.run.run_id is not None


def check_db_or_why(db: str | os.PathLike | None = None) -> tuple[Path | None, str | None]:
    """:func:`check_db` before a long run: (the database's path, None), or (None, why it cannot be
    written) -- the run then goes ahead and is printed, not saved."""
    try:
        return check_db(db), None
    except StoreError as e:
        return None, str(e)


def save_checked(run: BenchRun, path: Path | None, early_error: str | None = None) -> SaveOutcome:
    """Save ``run`` in ``path`` (checked by :func:`check_db_or_why`) and say how it went; a failed
    save is an outcome, not an exception, so the measured run is never lost."""
    if path is None:
        return SaveOutcome(run=run, path=None, error=early_error)
    try:
        run_id = save_run(run, path)
    except StoreError as e:
        return SaveOutcome(run=run, path=path, error=str(e))
    return SaveOutcome(run=replace(run, run_id=run_id), path=path)


def _read(db: str | os.PathLike | None, fn):
    """Run ``fn(conn)`` on a read-only connection; None when the database does not exist yet."""
    path = db_path(db)
    if not path.exists():
        return None
    conn = _connect(path, write=False)
    try:
        if not _check_schema(conn, path, create=False):
            return None
        return fn(conn)
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise _explain(e, path, "reading it") from None
    finally:
        conn.close()


def _load(conn: sqlite3.Connection, run_id: int) -> BenchRun | None:
    row = conn.execute(
        "SELECT id, created_utc, machine_json, settings_json, notes_json, warnings_json "
        "FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        return None
    parts = {}
    for table, cls in _ROW_TABLES:
        names = [f.name for f in fields(cls)]
        rows = conn.execute(f"SELECT {', '.join(names)} FROM {table} WHERE run_id = ? "
                            "ORDER BY rowid", (run_id,)).fetchall()
        parts[table] = tuple(_from_row(cls, names, r) for r in rows)
    notes = checked_json(row[4], "notes_json", list)
    warns = checked_json(row[5], "warnings_json", list)
    if not all(isinstance(n, str) for n in [*notes, *warns]):  # type: ignore[misc]
        raise BadRun("notes_json/warnings_json hold something other than text")
    return BenchRun(
        run_id=row[0], created_utc=checked_text(row[1], "created_utc"),
        machine=_machine_from_json(row[2]),
        settings=checked_json(row[3], "settings_json", dict), notes=tuple(notes),
        warnings=tuple(warns), **parts,
    )


def _load_or_skip(conn: sqlite3.Connection, path: Path, run_id: int) -> BenchRun | None:
    """A stored run, or None (with one warning line) when it fails validation."""
    try:
        return _load(conn, run_id)
    except BadRun as e:
        skip_run(path, run_id, str(e))
        return None


def load_run(run_id: int, db: str | os.PathLike | None = None) -> BenchRun:
    """The stored run ``run_id``; a clear error when there is none."""
    def fn(conn):
        try:
            return _load(conn, run_id)
        except BadRun as e:
            raise StoreError(f"bench run {run_id} in {str(db_path(db))!r} is damaged "
                             f"({printable(e, 160)}); it is never used") from None
    got = _read(db, fn)
    if got is None:
        raise StoreError(f"no bench run {run_id} in {str(db_path(db))!r}; `gpuplan bench --history` "
                         "lists the stored runs")
    return got


def list_runs(db: str | os.PathLike | None = None, *, machine: str | None = None,
              limit: int | None = None) -> tuple[BenchRun, ...]:
    """Stored runs, newest first, optionally of one machine key only."""
    def fn(conn):
        sql = "SELECT id FROM runs"
        args: list[object] = []
        if machine is not None:
            sql += " WHERE machine_key = ?"
            args.append(machine)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        runs = (_load_or_skip(conn, db_path(db), r[0]) for r in conn.execute(sql, args).fetchall())
        return tuple(r for r in runs if r is not None)
    return _read(db, fn) or ()


#: SQLite's largest integer: a larger id overflows its binding (OverflowError).
MAX_RUN_ID = 2**63 - 1


def resolve_run(ref: str | int, db: str | os.PathLike | None = None) -> int:
    """A run id from ``12``, ``latest`` or ``latest~N`` (N runs before the latest)."""
    if len(str(ref)) > MAX_DIGITS:  # int() of 4,301 digits is a ValueError; 2^63 an overflow
        raise InputError(f"run {shown(str(ref))}: expected a run id of at most 19 digits "
                         "(see `gpuplan bench --history`), 'latest' or 'latest~N'")
    text = str(ref).strip().lower()
    if text.isdigit():
        if int(text) > MAX_RUN_ID:
            raise InputError(f"run {text}: no run id is larger than {MAX_RUN_ID} (SQLite's "
                             "largest integer); see `gpuplan bench --history`")
        return int(text)
    back = 0
    if text.startswith("latest~") and text[7:].isdigit():
        back = int(text[7:])
    elif text != "latest":
        raise InputError(f"run {ref!r}: expected a run id (see `gpuplan bench --history`), "
                         "'latest' or 'latest~N'")
    ids = _read(db, lambda c: [r[0] for r in c.execute("SELECT id FROM runs ORDER BY id DESC")])
    if not ids or back >= len(ids):
        have = len(ids or [])
        raise StoreError(f"run {ref!r}: the database {str(db_path(db))!r} holds {have} run(s)")
    return ids[back]


@record
class Measured(MeasuredRun):
    """What the speed model needs from this machine's latest run: the speed model's
    :class:`~gpuplan.compute.measured.MeasuredRun` (its fields and accessors, defined once there),
    with the whole machine record the store holds."""

    machine: Machine | None = None
    machine_key: str = ""


def summarize(run: BenchRun) -> Measured:
    """Reduce a run to the figures the speed model uses."""
    names = {"cpu": run.machine.cpu_model}
    best: dict[tuple[str, str], MatmulResult] = {}
    for m in run.matmul:
        names[m.device] = m.device_name
        k = (m.device, m.dtype)
        if k not in best or m.size > best[k].size:
            best[k] = m
    # the measurement behind each figure, for its quality (compute.measured.judge_quality)
    rows: dict = {("matmul", *k): m for k, m in best.items()}
    rows.update({("bandwidth", b.device, b.kind): b for b in run.bandwidth})
    rows.update({("overhead", o.device, o.kind): o for o in run.overhead})
    return Measured(
        run_id=int(run.run_id or 0), created_utc=run.created_utc, machine=run.machine,
        machine_key=run.machine.key,
        device_names=MappingProxyType(names),
        matmul_flops=MappingProxyType({k: m.achieved_flops for k, m in best.items()}),
        matmul_size=MappingProxyType({k: m.size for k, m in best.items()}),
        matmul_peak_flops=MappingProxyType({k: m.peak_flops for k, m in best.items() if m.peak_flops}),
        bandwidth=MappingProxyType({(b.device, b.kind): b.bytes_per_s for b in run.bandwidth}),
        overhead_s=MappingProxyType({(o.device, o.kind): o.median_s for o in run.overhead}),
        spread=MappingProxyType({k: r.iqr_s / r.median_s for k, r in rows.items()}),
        flagged=frozenset(k for k, r in rows.items() if r.noisy),
    )


def latest_run(db: str | os.PathLike | None = None,
               machine: str | Machine | None = None) -> Measured | None:
    """This machine's (or ``machine``'s key's) most recent stored run, or None if it has none.

    Torch-free and fast: "this machine" is matched by host name, CPU model and core counts.
    Raises :class:`StoreError` when the database exists but cannot be read.
    """
    if not db_path(db).exists():  # nothing stored yet: no need to fingerprint this machine
        return None
    if machine is None:
        key = machine_fingerprint(gpus="none").key
    elif isinstance(machine, Machine):
        key = machine.key
    else:
        key = machine
    runs = list_runs(db, machine=key, limit=_RUNS_TRIED)  # a damaged newest run is skipped
    return summarize(runs[0]) if runs else None
