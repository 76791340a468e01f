"""The ASGI app: routes, body limits and a body read timeout, one-line JSON errors, a bound on
concurrent work and a wall-clock budget per request (:mod:`._work`).

Starlette, not FastAPI: the request and response bodies are the library's own serializations
(``Job.from_dict``, ``Plan.to_dict``), validated by the library, so FastAPI's pydantic layer would
be a second copy of the job's types and defaults; and importing it costs more than a second of
start-up on this machine (see docs/serve.md). The OpenAPI schema is built from the Job's fields
(:mod:`gpuplan.web._openapi`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._io import json_text
from ..errors import GpuplanError, InputError, UnknownNameError
from ._openapi import openapi_schema
from ._work import DEFAULT_BUDGET_S, ProcessRunner, ThreadRunner

__all__ = ["create_app", "MAX_BODY_BYTES", "MAX_WORKERS", "MAX_PENDING", "BODY_TIMEOUT_S"]

log = logging.getLogger("gpuplan.web")

#: Largest request body read (a pasted config.json plus the job's keys).
MAX_BODY_BYTES = 1_100_000

#: Requests computed at once (the library is CPU-bound: more threads only share the cores).
MAX_WORKERS = 2

#: Requests waiting for a worker beyond which new ones are refused with 503.
MAX_PENDING = 32

#: Seconds a request's body may take to arrive, all of it (a client that stalls is answered 408).
BODY_TIMEOUT_S = 10.0

STATIC = Path(__file__).resolve().parent / "static"

#: Sent with every response: the page loads only its own files and talks only to this server.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _error(status: int, message: str, headers: dict | None = None,
           data: dict | None = None) -> JSONResponse:
    line = " ".join(str(message).split())  # one line, whatever the message held
    return JSONResponse({**(data or {}), "error": line}, status_code=status,
                        headers={**_HEADERS, **(headers or {})})


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


async def _json_body(request: Request, timeout_s: float) -> Any:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise HTTPException(415, "send the body as application/json")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise HTTPException(413, f"request body over {MAX_BODY_BYTES:,} bytes")
    chunks, size = [], 0
    with anyio.move_on_after(timeout_s) as scope:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise HTTPException(413, f"request body over {MAX_BODY_BYTES:,} bytes")
            chunks.append(chunk)
    if scope.cancelled_caught:
        raise HTTPException(408, f"request body not received within {timeout_s:g} s",
                            headers={"Connection": "close"})
    try:
        return json.loads(b"".join(chunks).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise HTTPException(400, f"request body is not valid JSON ({e})") from None


class _Work:
    """At most MAX_WORKERS computations at once, at most MAX_PENDING waiting, each within the
    runner's wall-clock budget; beyond any of these, 503 with Retry-After."""

    def __init__(self, runner: ThreadRunner | ProcessRunner, body_timeout_s: float) -> None:
        self.limiter = anyio.CapacityLimiter(MAX_WORKERS)
        self.pending = 0
        self.runner = runner
        self.body_timeout_s = body_timeout_s

    async def run(self, name: str, *args: Any, method: str = "POST") -> Response:
        if self.pending >= MAX_PENDING or self.runner.busy():
            raise HTTPException(503, "busy: too many requests at once; retry shortly")
        self.pending += 1
        try:
            out = await anyio.to_thread.run_sync(self.runner.call, name, args, method,
                                                 limiter=self.limiter)
        finally:
            self.pending -= 1
        if out is None:
            budget = self.runner.budget_s
            log.warning("gpuplan serve: %s /api/%s ran past its budget of %g s; answered 503",
                        method, name, budget)
            raise HTTPException(503, f"the request ran past this server's budget of {budget:g} "
                                "s of computing and was stopped; retry with a smaller job",
                                headers={"Retry-After": "5"})
        status, body = out
        return Response(body, status_code=status, media_type="application/json",
                        headers=_HEADERS)


def _respond(obj: Any) -> Response:
    body = json_text(obj).encode()
    return Response(body, media_type="application/json", headers=_HEADERS)


def _routes(work: _Work) -> list:
    async def post(request: Request, name: str) -> Response:
        body = await _json_body(request, work.body_timeout_s)
        return await work.run(name, body)

    async def fit(request: Request) -> Response:
        return await post(request, "fit")

    async def speed(request: Request) -> Response:
        return await post(request, "speed")

    async def flops(request: Request) -> Response:
        return await post(request, "flops")

    async def cluster(request: Request) -> Response:
        return await post(request, "cluster")

    async def capacity(request: Request) -> Response:
        return await post(request, "capacity")

    async def models(request: Request) -> Response:
        return await work.run("models", request.query_params.get("q", ""), method="GET")

    async def gpus(request: Request) -> Response:
        return await work.run("gpus", method="GET")

    async def options(request: Request) -> Response:
        return await work.run("options", method="GET")

    async def schema(request: Request) -> Response:
        return _respond(openapi_schema())

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_HEADERS)

    return [
        Route("/", index, methods=["GET"]),
        Route("/api/fit", fit, methods=["POST"]),
        Route("/api/speed", speed, methods=["POST"]),
        Route("/api/flops", flops, methods=["POST"]),
        Route("/api/cluster", cluster, methods=["POST"]),
        Route("/api/capacity", capacity, methods=["POST"]),
        Route("/api/models", models, methods=["GET"]),
        Route("/api/gpus", gpus, methods=["GET"]),
        Route("/api/options", options, methods=["GET"]),
        Route("/api/openapi.json", schema, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


async def _http_error(request: Request, exc: HTTPException) -> Response:
    headers = dict(exc.headers or {})  # e.g. 405's Allow
    if exc.status_code == 503:
        headers.setdefault("Retry-After", "1")
    return _error(exc.status_code, exc.detail, headers)


async def _input_error(request: Request, exc: Exception) -> Response:
    status = 404 if isinstance(exc, UnknownNameError) and request.method == "GET" else 422
    # an error is data: its field, value, what is accepted and the fix, named as JSON keys
    data = exc.to_dict() if isinstance(exc, InputError) else {"error": str(exc)}
    return _error(status, data.pop("error"), data=data)


async def _disconnected(request: Request, exc: ClientDisconnect) -> Response:
    """The client went away before its body was read: a disconnect, not a server error."""
    log.warning("gpuplan serve: %s %s: the client disconnected before sending its whole body",
                request.method, request.url.path)
    return _error(400, "the client disconnected before sending its whole body")


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("gpuplan serve: %s %s failed", request.method, request.url.path)
    return _error(500, f"internal error ({type(exc).__name__}); the server log has the details")


class _LoopbackHosts:
    """Refuse a request whose Host header is not one of ``hosts`` (JSON, 400): a page on another
    site that rebinds its DNS name to 127.0.0.1 sends its own name and is refused."""

    def __init__(self, app: Any, hosts: list[str]) -> None:
        self.app, self.hosts = app, {h.lower() for h in hosts}

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and "*" not in self.hosts:
            host = Headers(scope=scope).get("host", "").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in self.hosts:
                await _error(400, f"host {host[:80]!r} is not served here")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(*, allowed_hosts: list[str] | None = None,
               body_timeout_s: float = BODY_TIMEOUT_S, budget_s: float = DEFAULT_BUDGET_S,
               processes: bool = False) -> Starlette:
    """The app. ``allowed_hosts``: the Host headers accepted (default: loopback names only, which
    keeps a page on another site from reaching this server by DNS rebinding).
    ``body_timeout_s``: the time a request body may take to arrive (then 408); ``budget_s``: the
    wall clock a request may compute (then 503 with Retry-After); ``processes``: compute in
    worker processes, which a request past its budget stops by being killed (``gpuplan serve``;
    default: threads, which it leaves to finish, :mod:`._work`)."""
    hosts = allowed_hosts or ["127.0.0.1", "localhost", "[::1]", "::1"]
    handlers = {HTTPException: _http_error, InputError: _input_error,
                GpuplanError: _input_error, ClientDisconnect: _disconnected,
                Exception: _server_error}
    runner = ProcessRunner(budget_s, MAX_WORKERS) if processes else ThreadRunner(budget_s)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if processes:  # the workers start beside the server, not on the first request
            threading.Thread(target=runner.warm, daemon=True, name="gpuplan-warm").start()
        try:
            yield
        finally:
            runner.close()

    return Starlette(routes=_routes(_Work(runner, body_timeout_s)), exception_handlers=handlers,
                     middleware=[Middleware(_LoopbackHosts, hosts=hosts)], lifespan=lifespan)
