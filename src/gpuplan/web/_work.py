"""Where a request's computation runs, and how long it may: a wall-clock budget per request
(issue 32, part 4).

Each route's work is one :mod:`._service` function over JSON values. :func:`outcome` runs it and
turns what it returns or raises into the HTTP status and JSON body, the same in both runners:

- :class:`ProcessRunner` (``gpuplan serve``): a few worker processes, each computing one request
  at a time. A request past its budget is answered 503 and its worker is killed (SIGKILL) and
  replaced: the work stops, whatever it was doing. Workers are forked from a forkserver that has
  imported the library once (:mod:`multiprocessing`'s ``forkserver`` start method; ``spawn``
  where there is none), so a replacement answers in milliseconds, not an import.
- :class:`ThreadRunner` (``create_app()`` in-process, as the tests use it): the work runs in a
  daemon thread, which Python cannot kill; a thread past its budget is answered 503 and left to
  finish, and while :data:`MAX_ABANDONED` of them still run new work is refused with 503 rather
  than piling up threads. The server itself keeps answering either way.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import signal
import threading
from multiprocessing.connection import Connection

from .._io import json_text
from ..errors import GpuplanError, InputError, UnknownNameError
from ..job import FLAT_FIELDS
from . import _service

__all__ = ["outcome", "as_keys", "ProcessRunner", "ThreadRunner", "ROUTES", "MAX_ABANDONED",
           "DEFAULT_BUDGET_S"]

log = logging.getLogger("gpuplan.web")

#: The :mod:`._service` functions a request may run (looked up by name when called, so the
#: module's current function is the one run).
ROUTES = ("fit", "speed", "flops", "cluster", "capacity", "models", "gpus", "options")

#: Seconds of wall clock a request's computation may take before it is answered 503 (the
#: library's bounds keep a real request far below: a solver run takes well under a second).
DEFAULT_BUDGET_S = 30.0

#: Abandoned computations (threads past their budget, still running) beyond which a
#: :class:`ThreadRunner` refuses new work.
MAX_ABANDONED = 4

#: What a runner returns: (HTTP status, JSON body bytes); None: past the budget.
Outcome = tuple[int, bytes]


#: The keys a request may hold: the Job's fields and the endpoints' own options.
_KEYS = frozenset(FLAT_FIELDS) | frozenset(_service.FIT_OPTIONS + _service.CLUSTER_OPTIONS
                                                  + _service.CAPACITY_OPTIONS)
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def as_keys(message: str) -> str:
    """A library message names the command line's options ("use --tp 4", "add --grad-accum 8");
    a request holds JSON keys: name those instead ("use tp 4", "add grad_accum 8"). An option with
    no key of the same name is left as written."""
    def key(m: re.Match) -> str:
        name = m.group(1).replace("-", "_")
        return name if name in _KEYS else m.group(0)
    return _FLAG.sub(key, message)


def _error_body(message: str, data: dict | None = None) -> bytes:
    line = " ".join(str(message).split())  # one line, whatever the message held
    return json_text({**(data or {}), "error": line}).encode()


def outcome(name: str, args: tuple, method: str = "POST") -> Outcome:
    """``_service.<name>(*args)`` as (status, body): 200 and the result; 422 (a GET's unknown
    name: 404) and the error as data for an InputError; 500 and one line for anything else,
    the traceback in the server's log."""
    if name not in ROUTES:
        raise ValueError(f"no route computes {name!r}")
    try:
        return 200, json_text(getattr(_service, name)(*args)).encode()
    except GpuplanError as exc:
        status = 404 if isinstance(exc, UnknownNameError) and method == "GET" else 422
        data = exc.to_dict() if isinstance(exc, InputError) else {"error": str(exc)}
        return status, _error_body(as_keys(data.pop("error")), data)
    except Exception as exc:  # noqa: BLE001 (a bug: one line out, the traceback logged)
        log.exception("gpuplan serve: %s /api/%s failed", method, name)
        return 500, _error_body(f"internal error ({type(exc).__name__}); the server log has "
                                "the details")


class ThreadRunner:
    """The work in a daemon thread, waited for up to the budget (see the module's docstring)."""

    def __init__(self, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.budget_s = budget_s
        self._abandoned: list[threading.Thread] = []
        self._lock = threading.Lock()

    def busy(self) -> bool:
        """Too many abandoned computations still running to start another."""
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            return len(self._abandoned) >= MAX_ABANDONED

    def call(self, name: str, args: tuple, method: str) -> Outcome | None:
        box: list[Outcome] = []
        t = threading.Thread(target=lambda: box.append(outcome(name, args, method)),
                             name=f"gpuplan-{name}", daemon=True)
        t.start()
        t.join(self.budget_s)
        if t.is_alive():
            with self._lock:
                self._abandoned.append(t)
            return None
        return box[0]

    def close(self) -> None:
        pass


def _worker_main(conn: Connection) -> None:
    """A worker process: one request at a time until its pipe closes (the server is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops this
    while True:
        try:
            name, args, method = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(outcome(name, args, method))


class _Worker:
    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True,
                                name="gpuplan-serve-worker")
        self.proc.start()
        child.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def _context():
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["gpuplan.web._work"])  # the library, imported once
        return ctx
    return multiprocessing.get_context("spawn")


class ProcessRunner:
    """Worker processes, killed and replaced when a request runs past its budget (see the
    module's docstring). At most ``workers`` requests compute at once (the caller's limiter)."""

    def __init__(self, budget_s: float = DEFAULT_BUDGET_S, workers: int = 2) -> None:
        self.budget_s = budget_s
        self.workers = workers
        self._ctx = _context()
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Start the workers now (the first request would otherwise wait for them)."""
        started = [self._take() for _ in range(self.workers)]
        with self._lock:
            self._idle.extend(started)

    def busy(self) -> bool:
        return False  # a computation past its budget is killed, never left running

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                w = self._idle.pop()
                if w.proc.is_alive():
                    return w
                w.kill()
        return _Worker(self._ctx)

    def call(self, name: str, args: tuple, method: str) -> Outcome | None:
        w = self._take()
        try:
            w.conn.send((name, args, method))
            if w.conn.poll(self.budget_s):
                result = w.conn.recv()
                with self._lock:
                    self._idle.append(w)
                return result
        except (EOFError, OSError):  # the worker died (out of memory, killed): no answer
            w.kill()
            log.warning("gpuplan serve: a worker computing %s /api/%s ended without an "
                        "answer (exit code %s)", method, name, w.proc.exitcode)
            return 500, _error_body("internal error (the computation's process ended); the "
                                    "server log has the details")
        w.kill()  # past the budget: the work stops with its process
        return None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()
