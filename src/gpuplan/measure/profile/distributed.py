"""Gathering every rank's profile to rank 0 in a ``torchrun`` job.

Two ways, chosen the same way on every rank (from the environment only, so no rank can pick the
other way and wait forever):

- **files** (all ranks on one node, the usual case): each rank writes its result atomically into
  a directory keyed by the job (``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``, ``MASTER_PORT``,
  restart count) under the temp directory, or ``GPUPLAN_PROFILE_DIR``; rank 0 waits for all of
  them (with a timeout, so a crashed rank cannot hang it), prints one report, then writes a
  ``done`` marker. The other ranks wait for that marker before exiting, because torchrun stops
  every rank as soon as one exits with an error.
- **collective** (ranks on several nodes and torch.distributed still initialized):
  ``torch.distributed.gather_object`` to rank 0. Without an initialized process group on several
  nodes, the files way is used and needs ``GPUPLAN_PROFILE_DIR`` on storage every node shares.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from ..._io import read_bounded, write_atomic
from ...errors import InputError, ModelFileError
from .analysis import NoStepsError, combine_ranks
from .types import ProfileReport

__all__ = ["DistEnv", "dist_env", "gather_reports", "GatherMode"]

GatherMode = Literal["auto", "files", "collective"]

#: A rank's result file is at most this large (per-step records included).
MAX_RESULT_BYTES = 64 * 2**20
#: Result files written more than this long before rank 0 started belong to an earlier job.
FRESH_SLACK_S = 120.0
_POLL_S = 0.05
#: Process start, for freshness checks of other ranks' files.
STARTED_AT = time.time()


class DistEnv:
    """This process's place in a torchrun job, read from the environment torchrun sets."""

    def __init__(self, rank: int, world_size: int, local_world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_world_size = local_world_size

    @property
    def single_node(self) -> bool:
        return self.local_world_size >= self.world_size


def dist_env() -> DistEnv | None:
    """None unless RANK and WORLD_SIZE say this is one of several processes."""
    try:
        rank = int(os.environ["RANK"])
        world = int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    if world <= 1 or not 0 <= rank < world:
        return None
    try:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        local_world = world
    return DistEnv(rank, world, local_world)


def job_dir() -> Path:
    base = os.environ.get("GPUPLAN_PROFILE_DIR")
    key = "|".join(os.environ.get(k, "") for k in (
        "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"))
    name = "gpuplan-profile-" + hashlib.sha1(key.encode()).hexdigest()[:16]
    root = Path(base) if base else Path(tempfile.gettempdir())
    d = root / name
    try:
        d.mkdir(mode=0o700, parents=bool(base), exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the directory {str(d)!r} for gathering ranks' profiles: {e}; "
                         "set GPUPLAN_PROFILE_DIR to a writable directory") from None
    return d


def _payload(env: DistEnv, local: ProfileReport | None, failure: str | None) -> dict[str, Any]:
    return {"rank": env.rank, "world_size": env.world_size, "started_at": STARTED_AT,
            "report": None if local is None else local.to_dict(), "failure": failure}


def _combine(env: DistEnv, payloads: dict[int, dict[str, Any]], missing_why: str) -> ProfileReport:
    reports: dict[int, ProfileReport | None] = {}
    failures: dict[int, str] = {}
    for r in range(env.world_size):
        p = payloads.get(r)
        if p is None:
            reports[r] = None
            failures[r] = missing_why
        elif p.get("report") is None:
            reports[r] = None
            failures[r] = str(p.get("failure") or "no measured step")
        else:
            reports[r] = ProfileReport.from_dict(p["report"])
    return combine_ranks(reports, env.world_size, failures)


def gather_reports(
    local: ProfileReport | None,
    *,
    failure: str | None = None,
    timeout_s: float = 300.0,
    mode: GatherMode = "auto",
    env: DistEnv | None = None,
) -> ProfileReport | None:
    """Rank 0: the combined report. Other ranks: None (they hand their result to rank 0).

    Not distributed: ``local`` itself (NoStepsError when it is None).
    """
    env = env or dist_env()
    if env is None:
        if local is None:
            raise NoStepsError(failure or "no measured step")
        return local
    if mode == "auto":
        mode = "files"
        if not env.single_node:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                mode = "collective"
    if mode == "collective":
        return _gather_collective(env, local, failure)
    return _gather_files(env, local, failure, timeout_s)


def _gather_collective(env: DistEnv, local: ProfileReport | None, failure: str | None) -> ProfileReport | None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise InputError("gathering with torch.distributed needs an initialized process group; "
                         "use the files way (GPUPLAN_PROFILE_DIR on shared storage)")
    out: list[Any] | None = [None] * env.world_size if env.rank == 0 else None
    dist.gather_object(_payload(env, local, failure), out, dst=0)
    if env.rank != 0:
        return None
    assert out is not None
    return _combine(env, {p["rank"]: p for p in out if p is not None}, "sent no result")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(read_bounded(path, MAX_RESULT_BYTES, what="rank result"))
    except (ModelFileError, ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None


def _gather_files(env: DistEnv, local: ProfileReport | None, failure: str | None,
                  timeout_s: float) -> ProfileReport | None:
    d = job_dir()
    write_atomic(d / f"rank-{env.rank}.json", json.dumps(_payload(env, local, failure)))
    deadline = time.monotonic() + timeout_s
    done = d / "done.json"
    if env.rank != 0:
        # Wait for rank 0 to read us: torchrun would stop it if we exited with an error first.
        while time.monotonic() < deadline:
            info = _read_json(done) if done.exists() else None
            if info is not None and info.get("started_at", 0) >= STARTED_AT - FRESH_SLACK_S:
                break
            time.sleep(_POLL_S)
        try:
            write_atomic(d / f"ack-{env.rank}.json", "{}")
        except OSError:
            pass
        return None

    payloads: dict[int, dict[str, Any]] = {0: _payload(env, local, failure)}
    while len(payloads) < env.world_size and time.monotonic() < deadline:
        for r in range(1, env.world_size):
            if r in payloads:
                continue
            p = d / f"rank-{r}.json"
            if p.exists():
                data = _read_json(p)
                if data is not None and data.get("started_at", 0) >= STARTED_AT - FRESH_SLACK_S:
                    payloads[r] = data
        if len(payloads) < env.world_size:
            time.sleep(_POLL_S)
    write_atomic(done, json.dumps({"started_at": STARTED_AT}))
    report = _combine(env, payloads, f"sent no result within {timeout_s:g} s")
    _cleanup(d, env, payloads)
    return report


def _cleanup(d: Path, env: DistEnv, payloads: dict[int, Any]) -> None:
    """Remove the job directory once the ranks that answered have seen the done marker."""
    waiting = [r for r in payloads if r != 0]
    deadline = time.monotonic() + 10.0
    while waiting and time.monotonic() < deadline:
        waiting = [r for r in waiting if not (d / f"ack-{r}.json").exists()]
        if waiting:
            time.sleep(_POLL_S)
    if waiting:
        return  # leave it; a rank still needs the marker
    for p in d.iterdir():
        try:
            p.unlink()
        except OSError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass
