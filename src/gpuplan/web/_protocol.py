"""uvicorn's HTTP/1.1 protocol with the two bounds it lacks (issue 32, part 4): a header read
timeout and a cap on open connections. Imported by ``gpuplan serve`` only (it imports uvicorn).

uvicorn (0.55, h11) times out only an idle keep-alive connection: a client that sends part of
its request line or headers and stalls holds its connection, and its file descriptor, for as long
as it likes (20,000 of them stalled every real request, issue 32). Here:

- **Header timeout**: from the moment a connection opens, or a request's first bytes arrive
  after a keep-alive pause, its headers must be complete within ``header_timeout_s``; else the
  connection is closed. The body's own timeout is the app's (:data:`~._app.BODY_TIMEOUT_S`).
- **Connection cap**: past ``max_connections`` open connections, a new one first closes the
  oldest connection still waiting for its headers after a tenth of the header timeout (a
  stalled half-sent request, or an idle keep-alive one: neither has work in flight; a client
  that has just connected is given time to send its request); when there is none, the new one
  is answered 503 with Retry-After and closed. The default cap is above the 1,000 half-sent
  connections of benchmarks/serve_latency.md, whose real requests are then never evicted, and
  ``gpuplan serve`` raises its open-file limit to hold it (:func:`file_limit_for`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["bounded_protocol", "file_limit_for", "HEADER_TIMEOUT_S", "MAX_CONNECTIONS"]

log = logging.getLogger("gpuplan.web")

#: Seconds a request's line and headers may take to arrive.
HEADER_TIMEOUT_S = 10.0

#: Open connections beyond which the oldest waiting one is closed (or the new one refused).
MAX_CONNECTIONS = 2048

#: File descriptors the server keeps beyond its connections (the listening socket, the worker
#: pipes, the log, imports).
SPARE_FILES = 128

_BUSY_BODY = b'{"error": "busy: too many open connections; retry shortly"}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
         b"retry-after: 1\r\nconnection: close\r\ncontent-length: "
         + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


class _BoundedH11(H11Protocol):
    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS

    _header_timer: asyncio.TimerHandle | None = None
    _opened: float = 0.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened = time.monotonic()
        if self._open() > self.max_connections and not self._make_room():
            self.transport.write(_BUSY)
            self.transport.close()
            return
        self._watch_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_watch()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # an idle connection now: uvicorn's keep-alive timeout
        self._stop_watch()

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers a request whose body turns out malformed (a bad chunk size) 400 and
        closes, while the app's task for it runs on: its own answer then raised h11's
        LocalProtocolError, logged as a failed request with a traceback (the fuzzer's finding).
        The app is told the client is gone (its answer goes nowhere, as after a disconnect);
        a response already begun is cut off instead of followed by a second one."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()  # a receive() waiting for more body returns now
            if cycle.response_started:
                self.transport.close()
                return
        super().send_400_response(msg)

    # the header deadline

    def _waiting(self) -> bool:
        """Waiting for a request's headers: no request parsed since the last response."""
        return self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete)

    def _watch_headers(self) -> None:
        if self.transport.is_closing():
            return
        if not self._waiting():
            self._stop_watch()
        elif self._header_timer is None and self.timeout_keep_alive_task is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._expired)

    def _stop_watch(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self._waiting() and not self.transport.is_closing():
            log.info("gpuplan serve: closed a connection whose request headers did not arrive "
                     "within %g s", self.header_timeout_s)
            self.transport.close()

    # the connection cap

    def _open(self) -> int:
        """Connections open, not counting those already closing."""
        return sum(not c.transport.is_closing() for c in self.connections)

    def _make_room(self) -> bool:
        """Close the oldest other connection waiting for its headers; False when none is."""
        settled = time.monotonic() - self.header_timeout_s / 10
        idle = [c for c in self.connections
                if c is not self and isinstance(c, _BoundedH11) and c._waiting()
                and c._opened <= settled and not c.transport.is_closing()]
        if not idle:
            log.warning("gpuplan serve: %d connections open, none of them idle; refused a new "
                        "one (503)", len(self.connections))
            return False
        oldest = min(idle, key=lambda c: c._opened)
        oldest._stop_watch()
        oldest.transport.close()
        return True


def bounded_protocol(*, header_timeout_s: float = HEADER_TIMEOUT_S,
                     max_connections: int = MAX_CONNECTIONS) -> type[H11Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``, with these bounds."""
    return type("BoundedH11Protocol", (_BoundedH11,),
                {"header_timeout_s": header_timeout_s, "max_connections": max_connections})


def file_limit_for(max_connections: int) -> int:
    """Raise this process's open-file limit (soft, up to the hard one) to hold
    ``max_connections`` connections; returns the connections it can hold (fewer when the hard
    limit is lower: the cap is then lowered to fit, rather than accept() failing)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + SPARE_FILES
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    return max(1, min(max_connections, soft - SPARE_FILES))
