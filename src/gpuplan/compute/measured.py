"""This machine's measured rates: the latest stored ``gpuplan bench`` run, read with the standard
library only (``sqlite3`` in read-only URI mode), so the speed model never imports
``gpuplan.measure``.

The database is written by :mod:`gpuplan.measure.store`; this module reads the one thing the speed
model needs from it -- the newest run of this machine -- with the store's own checks (a directory,
a foreign SQLite file, a newer schema or a locked/corrupt file is refused in one line; an empty or
missing database is "nothing measured"), and reduces it the way ``store.summarize`` does: the
matmul rate at the largest size measured per (device, dtype), bandwidths in bytes/s (copies count
read + write), per-op overheads in seconds. Where the database lives is decided here too, once:
``gpuplan.measure`` imports :func:`db_path` and :func:`machine_key` from this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .._record import record
from ..bounds import check_int, check_number
from ..errors import GpuplanWarning, InputError, opt, printable, shown
from ..hardware.cpu import detect_cpu, hostname

if TYPE_CHECKING:  # pragma: no cover
    import sqlite3

__all__ = [
    "default_db_path", "db_path", "machine_key", "this_machine_key", "MeasuredRun", "RunUse",
    "NOISY_SPREAD", "judge_quality", "resolve_measured", "run_use",
    "BenchDatabaseError", "latest_measured", "load_measured", "SCHEMA_VERSION", "APPLICATION_ID",
    "LOCK_TIMEOUT_S", "explain_db_error", "recover_hot_journal", "BadRun", "SkippedRunWarning", "skip_run",
    "checked_text", "checked_int", "checked_float", "checked_json",
]

#: The schema this gpuplan reads and writes; a database from a newer gpuplan is refused.
SCHEMA_VERSION = 1
#: ``PRAGMA application_id`` marking a gpuplan bench database ("gpb1").
APPLICATION_ID = 0x67706231
#: Seconds to wait for another process's lock before giving up.
LOCK_TIMEOUT_S = 5.0
#: The one threshold of a measurement's quality: a spread (interquartile range / median) at or
#: above it is *noisy*. The bench repeats each measurement until its spread is under this (its
#: ``target_spread``, :data:`gpuplan.measure.bench.timing.TARGET_SPREAD` is this constant) and
#: flags the ones still above it when the time budget ran out; the speed model does not use a run
#: whose measurements for a device are noisy unless asked (``use_noisy``, ``--use-noisy-bench``).
NOISY_SPREAD = 0.10


def default_db_path() -> Path:
    """``$GPUPLAN_BENCH_DB``, else ``$XDG_DATA_HOME/gpuplan/bench.sqlite`` (``~/.local/share/...``;
    ``%LOCALAPPDATA%`` on Windows)."""
    env = os.environ.get("GPUPLAN_BENCH_DB")
    if env:
        return Path(env).expanduser()
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"])
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "gpuplan" / "bench.sqlite"


def db_path(db: str | os.PathLike | None = None) -> Path:
    """The database file ``db`` names, or :func:`default_db_path` when None."""
    return default_db_path() if db is None else Path(db).expanduser()


def machine_key(host: str, cpu_model: str, physical: int, logical: int) -> str:
    """The string runs are matched on: ``host|cpu model|<cores>c/<threads>t``."""
    return f"{host}|{cpu_model}|{physical}c/{logical}t"


def this_machine_key() -> str:
    """This machine's key (host name, CPU model, core counts; no torch)."""
    cpu = detect_cpu()
    return machine_key(hostname(), cpu.model_name, cpu.physical_cores, cpu.logical_cores)


class BenchDatabaseError(InputError):
    """The bench database exists but cannot be read (one line: the path, the problem, the fix)."""


@record
class MeasuredRun:
    """What the speed model takes from one stored run (all rates in base units)."""

    run_id: int
    created_utc: str
    machine_key: str
    device_names: Mapping[str, str]
    """``cpu`` / ``cuda:N`` -> CPU model or GPU name (match GPUs with ``gpu_from_device_name``)."""
    matmul_flops: Mapping[tuple[str, str], float]
    """(device, dtype) -> achieved matmul FLOP/s at the largest size measured for that pair."""
    matmul_size: Mapping[tuple[str, str], int]
    """(device, dtype) -> the size those FLOP/s were measured at."""
    matmul_peak_flops: Mapping[tuple[str, str], float]
    """(device, dtype) -> the peak compared with (catalog dense or CPU estimate), where known."""
    bandwidth: Mapping[tuple[str, str], float]
    """(device, kind) -> bytes/s (``*_copy`` kinds count bytes read + written)."""
    overhead_s: Mapping[tuple[str, str], float]
    """(device, kind) -> seconds per op (``kernel_launch`` on GPUs, ``op_dispatch`` on the CPU)."""
    spread: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    """(``matmul``/``bandwidth``/``overhead``, device, dtype or kind) -> the stored spread (IQR /
    median) of the measurement behind each figure above; empty when not known (a run built by
    hand): its quality is then ``unknown``."""
    flagged: frozenset[tuple[str, str, str]] = frozenset()
    """The measurements (keys as in ``spread``) the bench itself marked noisy."""
    use_noisy: bool = False
    """Use the figures even where they are noisy (asked for: ``load_measured(use_noisy=True)``,
    ``--use-noisy-bench``); otherwise a device whose measurements are noisy keeps the defaults."""

    def flops(self, device: str, dtype: str) -> float | None:
        return self.matmul_flops.get((device, dtype))

    def fraction_of_peak(self, device: str, dtype: str) -> float | None:
        """Achieved / peak (a fraction, not percent); None when the peak is unknown."""
        got = self.matmul_flops.get((device, dtype))
        peak = self.matmul_peak_flops.get((device, dtype))
        return got / peak if got is not None and peak else None

    def bandwidth_of(self, device: str, kind: str) -> float | None:
        return self.bandwidth.get((device, kind))

    def overhead_of(self, device: str, kind: str) -> float | None:
        return self.overhead_s.get((device, kind))


#: A measurement of a stored run: (``matmul``/``bandwidth``/``overhead``, device, dtype or kind).
Measurement = tuple[str, str, str]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _label(measured: Any, m: Measurement) -> str:
    table, device, what = m
    if table == "matmul":
        size = (getattr(measured, "matmul_size", None) or {}).get((device, what))
        return f"{device} {what} matmul" + (f" N={size}" if size else "")
    return f"{device} {what}"


def judge_quality(measured: Any, read: Iterable[Measurement]) -> tuple[str, float | None, str]:
    """(quality, the worst spread, why in words) of the measurements ``read`` of a stored run.

    ``noisy`` when one of them was marked noisy by the bench or has a stored spread (IQR / median)
    at or above :data:`NOISY_SPREAD`; ``unknown`` when none is noisy but a spread is not known (a
    run built by hand); ``clean`` otherwise.
    """
    spreads: Mapping[Measurement, float] = getattr(measured, "spread", None) or {}
    flagged = getattr(measured, "flagged", None) or frozenset()
    read = list(dict.fromkeys(read))
    known = [spreads[m] for m in read if m in spreads]
    worst = max(known) if known else None
    bad = [m for m in read if m in flagged or spreads.get(m, 0.0) >= NOISY_SPREAD]
    if bad:
        m = max(bad, key=lambda k: spreads.get(k, 0.0))
        s = spreads.get(m)
        why = (f"{_label(measured, m)}: spread {_pct(s)} (IQR/median) >= {NOISY_SPREAD:.0%}"
               if s is not None and s >= NOISY_SPREAD else
               f"{_label(measured, m)}: marked noisy by the bench")
        return "noisy", worst, why + (f", and {len(bad) - 1} more" if len(bad) > 1 else "")
    if not read or len(known) < len(read):
        missing = next((m for m in read if m not in spreads), None)
        return "unknown", worst, ("no measurement read" if missing is None else
                                  f"no spread stored for {_label(measured, missing)}")
    top = max(read, key=lambda k: spreads[k])
    return "clean", worst, (f"worst spread {_pct(spreads[top])} (IQR/median, "
                            f"{_label(measured, top)}), under {NOISY_SPREAD:.0%}")


@record
class RunUse:
    """Which stored bench run an estimate read for one of its devices, how good its measurements
    of that device are (:func:`judge_quality`), and whether they were used."""

    run_id: int
    created_utc: str
    """When the run was measured (ISO 8601, UTC)."""
    device: str
    """The run's device: ``cpu`` or ``cuda:N``."""
    device_name: str
    """The CPU model or GPU name the run recorded."""
    quality: str
    """``clean``, ``noisy`` or ``unknown``, over the measurements the estimate read."""
    spread: float | None
    """The worst spread (IQR / median) among them; None when none is known."""
    why: str
    """The quality in words: the worst (noisy) measurement and its spread."""
    used: bool
    """False: the run was noisy and not asked for, so the defaults stand in."""

    @property
    def line(self) -> str:
        """One line saying which run, its quality, and whether it was used."""
        run = (f"gpuplan bench run {self.run_id} of {self.created_utc} on {self.device_name} "
               f"({self.device})")
        if not self.used:
            return (f"stored {run} not used: its measurements are noisy ({self.why}); the "
                    "defaults stand in; --use-noisy-bench uses it")
        return (f"measured: {run}, quality {self.quality} ({self.why})"
                + (", used as asked (--use-noisy-bench)" if self.quality == "noisy" else ""))

    def to_dict(self) -> dict:
        return {"id": self.run_id, "device": self.device_name, "device_key": self.device,
                "date": self.created_utc, "quality": self.quality, "spread": self.spread,
                "why": self.why, "used": self.used, "note": self.line}


def run_use(measured: Any, device: str, read: Iterable[Measurement]) -> RunUse:
    """The :class:`RunUse` of ``measured``'s measurements ``read`` of ``device`` (``cpu``,
    ``cuda:N``): used unless noisy, or noisy and the run says ``use_noisy``."""
    quality, worst, why = judge_quality(measured, read)
    names: Mapping[str, str] = getattr(measured, "device_names", None) or {}
    return RunUse(run_id=int(getattr(measured, "run_id", 0) or 0),
                  created_utc=str(getattr(measured, "created_utc", "?")), device=device,
                  device_name=names.get(device, device), quality=quality, spread=worst, why=why,
                  used=quality != "noisy" or bool(getattr(measured, "use_noisy", False)))


# --------------------------------------------------------------------------------------------------
# Reading (the store's read path, read-only)


def explain_db_error(e: BaseException, path: Path, doing: str, *, write: bool = False,
                     timeout_s: float = LOCK_TIMEOUT_S) -> str:
    """One line for a failed SQLite operation on the bench database: the path, the problem and
    the remedy (shared by this read path and :mod:`gpuplan.measure.store`'s writes)."""
    # SQLite's message quoting a damaged schema's bytes cannot be decoded: the file is malformed
    msg = "malformed: stored text is not UTF-8" if isinstance(e, UnicodeDecodeError) else str(e)
    low = msg.lower()
    name = getattr(e, "sqlite_errorname", "") or ""
    if "BUSY" in name or "LOCKED" in name or "locked" in low or "busy" in low:
        return (f"bench database {str(path)!r} is locked by another process (waited "
                f"{timeout_s:g} s) while {doing}; try again when it finishes, or pass "
                f"{opt('db')} OTHER.sqlite")
    if "NOTADB" in name or "CORRUPT" in name or "not a database" in low or "malformed" in low:
        return (f"bench database {str(path)!r} is corrupt or not a SQLite database ({msg}); it "
                f"was left untouched: move it aside or pass {opt('db')} NEW.sqlite")
    if ("READONLY" in name or "CANTOPEN" in name or "PERM" in name or "readonly" in low
            or "unable to open" in low or isinstance(e, PermissionError)):
        return (f"bench database {str(path)!r} cannot be {'written' if write else 'read'} "
                f"({msg}); check the directory's permissions or pass {opt('db')} WRITABLE.sqlite "
                "(or set GPUPLAN_BENCH_DB)")
    if "FULL" in name or "disk is full" in low:
        return f"bench database {str(path)!r}: the disk is full ({msg}); nothing was saved"
    return f"bench database {str(path)!r}: {msg} while {doing}"


def _explain(e: BaseException, path: Path, doing: str) -> BenchDatabaseError:
    return BenchDatabaseError(explain_db_error(e, path, doing), field="db", value=str(path))


def recover_hot_journal(path: Path) -> None:
    """Roll back what a writer that was killed mid-transaction left behind (a non-empty
    ``PATH-journal``), so that read-only connections can read the database: SQLite plays a hot
    journal back on the first read of a connection that may write, never on a read-only one
    (which fails with "attempt to write a readonly database" instead)."""
    import sqlite3  # only when a bench database exists (not on every `gpuplan fit`)

    journal = Path(f"{path}-journal")
    try:
        hot = journal.is_file() and journal.stat().st_size > 0
    except OSError:
        return
    if not hot:
        return
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
        raise BenchDatabaseError(
            f"bench database {str(path)!r} has an unfinished write's journal ({journal.name}) "
            "and this user cannot roll it back; run `gpuplan bench --history` as its owner once")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True,
                               timeout=LOCK_TIMEOUT_S, isolation_level=None)
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise _explain(e, path, "recovering it") from None
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # plays the journal back
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise _explain(e, path, "recovering it") from None
    finally:
        conn.close()


class BadRun(ValueError):
    """A stored run whose fields do not hold what gpuplan wrote (hand-edited, damaged)."""


class SkippedRunWarning(GpuplanWarning):
    """A stored bench run failed validation and was skipped (the message is one line)."""


def skip_run(path: Path, run_id: object, why: str) -> None:
    """Say, in one warning line, that stored run ``run_id`` is not used, and why."""
    import warnings  # noqa: PLC0415 -- only a damaged database pays for it

    warnings.warn(f"bench database {str(path)!r}: run {run_id} skipped, {printable(why, 160)}",
                  SkippedRunWarning, stacklevel=3)


def stored_text(raw: bytes) -> str | bytes:
    """A stored TEXT value as str -- the connection's ``text_factory``. Bytes that are not UTF-8
    (a damaged page) come back as bytes, which :func:`checked_text` refuses as a damaged run,
    instead of a UnicodeDecodeError from the whole query."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def checked_text(v: object, what: str, limit: int = 4096) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise BadRun(f"{what} is {shown(v)}, not a text of at most {limit} characters")
    return v


def checked_int(v: object, what: str, bound: str) -> int:
    try:
        return check_int(v, bound, what=what)
    except InputError as e:
        raise BadRun(str(e)) from None


def checked_float(v: object, what: str, bound: str = "seconds", *, optional: bool = False
                  ) -> float | None:
    if v is None and optional:
        return None
    try:
        return check_number(v, bound, what=what)
    except InputError as e:
        raise BadRun(str(e)) from None


def checked_json(text: object, what: str, kind: type) -> object:
    """A stored JSON column: text that parses to a ``kind`` (dict or list), bounded in size."""
    checked_text(text, what, limit=1_000_000)
    try:
        v = json.loads(text)  # type: ignore[arg-type]
    except (ValueError, RecursionError):
        raise BadRun(f"{what} is not valid JSON") from None
    if not isinstance(v, kind):
        raise BadRun(f"{what} is a JSON {type(v).__name__}, expected a {kind.__name__}")
    return v


def _connect_read_only(path: Path) -> sqlite3.Connection:
    import sqlite3  # only when a bench database exists (not on every `gpuplan fit`)

    if path.is_dir():
        raise BenchDatabaseError(f"bench database {str(path)!r} is a directory; give a file name "
                                 f"to {opt('db')}", field="db", value=str(path))
    recover_hot_journal(path)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                               timeout=LOCK_TIMEOUT_S, isolation_level=None)
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise _explain(e, path, "opening it") from None
    conn.text_factory = stored_text
    try:
        conn.execute("PRAGMA foreign_keys = ON")
    except (sqlite3.Error, UnicodeDecodeError) as e:
        conn.close()
        raise _explain(e, path, "opening it") from None
    return conn


def _is_bench_db(conn: sqlite3.Connection, path: Path) -> bool:
    """True for a gpuplan bench database; False for an empty file; an error for anything else."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    ver = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app == 0 and ver == 0 and not tables:
        return False
    if app != APPLICATION_ID:
        raise BenchDatabaseError(f"bench database {str(path)!r} is a SQLite file but not a gpuplan "
                                 "bench database; it was left untouched: pass "
                                 f"{opt('db')} NEW.sqlite", field="db", value=str(path))
    if ver > SCHEMA_VERSION:
        raise BenchDatabaseError(
            f"bench database {str(path)!r} has schema version {ver}, written by a newer gpuplan "
            f"(this one reads version {SCHEMA_VERSION}); upgrade gpuplan or pass {opt('db')} "
            "NEW.sqlite", field="db", value=str(path))
    return True


def _checked_flag(v: object, what: str) -> bool:
    if v not in (0, 1) or isinstance(v, float):
        raise BadRun(f"{what} is {shown(v)}, not 0 or 1")
    return bool(v)


def _quality_of(table: str, device: str, what: str, median_s: float, iqr_s: object, noisy: object,
                spread: dict, flagged: set) -> None:
    """Record one measurement's spread (IQR / median) and the bench's noisy flag, checked."""
    k = (table, device, what)
    spread[k] = checked_float(iqr_s, f"{table} iqr_s", "duration") / median_s
    if _checked_flag(noisy, f"{table} noisy"):
        flagged.add(k)


def _read_run(conn: sqlite3.Connection, run_id: int, created: str, machine_json: str,
              key: str) -> MeasuredRun:
    """One run reduced as ``gpuplan.measure.store.summarize`` reduces it; every field is checked
    (:class:`BadRun` names the first that is not what gpuplan writes)."""
    machine = checked_json(machine_json, "machine_json", dict)
    names = {"cpu": checked_text(machine.get("cpu_model"), "machine cpu_model")}  # type: ignore[union-attr]
    spread: dict = {}
    flagged: set = set()
    best = _best_matmuls(conn, run_id, names)
    for (device, dtype), (_, t, _, iqr, noisy) in best.items():
        _quality_of("matmul", device, dtype, t, iqr, noisy, spread, flagged)
    bandwidth = {}
    for device, kind, nbytes, median_s, iqr_s, noisy in conn.execute(
            "SELECT device, kind, nbytes, median_s, iqr_s, noisy FROM bandwidth WHERE run_id = ? "
            "ORDER BY rowid", (run_id,)):
        k = (checked_text(device, "bandwidth device"), checked_text(kind, "bandwidth kind"))
        n = checked_int(nbytes, "bandwidth nbytes", "bytes")
        t = checked_float(median_s, "bandwidth median_s")
        moved = 2 * n if kind.endswith("_copy") else n  # a copy reads and writes
        bandwidth[k] = moved / t
        _quality_of("bandwidth", *k, t, iqr_s, noisy, spread, flagged)
    overhead = {}
    for device, kind, median_s, iqr_s, noisy in conn.execute(
            "SELECT device, kind, median_s, iqr_s, noisy FROM overhead WHERE run_id = ? "
            "ORDER BY rowid", (run_id,)):
        k = (checked_text(device, "overhead device"), checked_text(kind, "overhead kind"))
        overhead[k] = checked_float(median_s, "overhead median_s")
        _quality_of("overhead", *k, overhead[k], iqr_s, noisy, spread, flagged)
    return MeasuredRun(
        run_id=int(run_id or 0), created_utc=checked_text(created, "created_utc"),
        machine_key=key, device_names=MappingProxyType(names),
        # achieved FLOP/s of an N x N @ N x N product: 2 N^3 / median seconds
        matmul_flops=MappingProxyType({k: 2.0 * b[0]**3 / b[1] for k, b in best.items()}),
        matmul_size=MappingProxyType({k: b[0] for k, b in best.items()}),
        matmul_peak_flops=MappingProxyType({k: b[2] for k, b in best.items() if b[2]}),
        bandwidth=MappingProxyType(bandwidth), overhead_s=MappingProxyType(overhead),
        spread=MappingProxyType(spread), flagged=frozenset(flagged))


def _best_matmuls(conn: sqlite3.Connection, run_id: int, names: dict
                  ) -> dict[tuple[str, str], tuple[int, float, float | None, object, object]]:
    """(device, dtype) -> (size, median_s, peak, iqr_s, noisy) of the largest size measured,
    checked (the last two by :func:`_quality_of`)."""
    best: dict[tuple[str, str], tuple[int, float, float | None, object, object]] = {}
    for device, device_name, dtype, size, median_s, peak, iqr_s, noisy in conn.execute(
            "SELECT device, device_name, dtype, size, median_s, peak_flops, iqr_s, noisy "
            "FROM matmul WHERE run_id = ? ORDER BY rowid", (run_id,)):
        names[checked_text(device, "matmul device")] = checked_text(device_name, "device_name")
        k = (device, checked_text(dtype, "matmul dtype"))
        n = checked_int(size, "matmul size", "dim")
        t = checked_float(median_s, "matmul median_s")
        p = checked_float(peak, "matmul peak_flops", "flops", optional=True)
        if k not in best or n > best[k][0]:
            best[k] = (n, t, p, iqr_s, noisy)  # type: ignore[assignment]
    return best


#: Most of one machine's newest runs looked at for one that passes validation.
_RUNS_TRIED = 50


def latest_measured(db: str | os.PathLike | None = None, *,
                    machine: str | None = None) -> MeasuredRun | None:
    """The newest stored run of this machine (or of the machine key ``machine``), or None when the
    database does not exist, is empty, or holds no run of that machine.

    Raises :class:`BenchDatabaseError` when the database exists but cannot be read.
    """
    path = db_path(db)
    if not path.exists():  # nothing measured yet: no need to fingerprint this machine
        return None
    import sqlite3  # only when a bench database exists (not on every `gpuplan fit`)

    key = this_machine_key() if machine is None else machine
    conn = _connect_read_only(path)
    try:
        if not _is_bench_db(conn, path):
            return None
        rows = conn.execute("SELECT id, created_utc, machine_json FROM runs WHERE machine_key = ? "
                            "ORDER BY id DESC LIMIT ?", (key, _RUNS_TRIED)).fetchall()
        for row in rows:
            try:
                return _read_run(conn, row[0], row[1], row[2], key)
            except BadRun as e:
                skip_run(path, row[0], str(e))
        return None
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise _explain(e, path, "reading it") from None
    finally:
        conn.close()


def load_measured(db: str | os.PathLike | None = None, *,
                  use_noisy: bool = False) -> MeasuredRun | None:
    """This machine's latest stored bench run, or None when there is none (what
    ``measured="auto"`` means everywhere in the speed model). Its noisy measurements (a spread
    at or above :data:`NOISY_SPREAD`) are not used unless ``use_noisy``: a device they measured
    keeps the defaults, and the estimate says so (:class:`RunUse`). Not an older run instead:
    the newest one is what this machine measured last."""
    run = latest_measured(db)
    return replace(run, use_noisy=True) if run is not None and use_noisy else run


def resolve_measured(measured: Any, *, use_noisy: bool = False) -> Any:
    """What ``measured=`` means in the speed model: ``"auto"``, this machine's latest stored run
    (:func:`load_measured`); None, none; a run given is used as given -- its noisy measurements
    too when ``use_noisy``."""
    if isinstance(measured, str) and measured == "auto":
        return load_measured(use_noisy=use_noisy)
    if use_noisy and isinstance(measured, MeasuredRun) and not measured.use_noisy:
        return replace(measured, use_noisy=True)
    return measured
