"""Where the bench database lives (standard library only: every planning command asks)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_db_path", "db_path"]


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
