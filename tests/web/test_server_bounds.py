"""Issue 32, part 4: a server that cannot be held. A half-sent request is closed after the header
timeout, a stalled body is answered 408, past the connection cap the oldest waiting connection
is closed so a real request is still answered, a request past its budget is answered 503 with
Retry-After, and a client that disconnects mid-body is logged as a disconnect, not a 500.
No speed is asserted: the timeouts here are generous bounds that prove "does not hang"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

HEADER_S, BODY_S = 1.0, 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``gpuplan serve`` with short timeouts and a small connection cap; yields (port, log)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "GPUPLAN_BENCH_DB": str(tmp_path_factory.mktemp("db") / "empty.sqlite")}
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplan", "serve", "--port", str(port), "--header-timeout",
             str(HEADER_S), "--body-timeout", str(BODY_S), "--max-connections", "8"],
            env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    if f":{port}/" not in proc.stdout.readline():
        proc.kill()
        pytest.fail(f"gpuplan serve did not start: {log.read_text()[-2000:]}")
    yield port, log
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def _half_sent(port: int, data: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(data)
    return s


def _closed_within(s: socket.socket, seconds: float) -> bytes:
    """What the server sends before it closes ``s`` (b"" ends it), waiting at most ``seconds``."""
    s.settimeout(seconds)
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return got
        got += chunk


def _fit(port: int) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/api/fit", timeout=60,
                      json={"model": "gpt2", "gpu": "T4", "speed": False})


def test_half_sent_headers_are_closed_after_the_timeout(server):
    port, _ = server
    t0 = time.monotonic()
    s = _half_sent(port, b"POST /api/fit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
    with s:
        assert _closed_within(s, 30) == b""  # closed, no answer: it never sent a request
    assert time.monotonic() - t0 >= HEADER_S * 0.9  # by the timeout, not at once
    assert _fit(port).status_code == 200


def test_stalled_body_is_answered_408(server):
    port, _ = server
    head = (b"POST /api/fit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{\"model\": ")
    with _half_sent(port, head) as s:
        reply = _closed_within(s, 30)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"not received within" in reply


def test_past_the_connection_cap_a_real_request_is_answered(server):
    port, _ = server
    stalled = [_half_sent(port, b"GET /api/gpus HTTP/1.1\r\nHo") for _ in range(40)]
    time.sleep(HEADER_S / 4)  # past the grace a new connection has (a tenth of the timeout)
    try:
        r = _fit(port)
        assert r.status_code == 200, r.text
        # beyond the cap (8) each stalled connection was refused at once (503, Retry-After:
        # those were all younger than the grace a new connection has) or closed to make room
        # for the fit (an older one)
        ended = 0
        for s in stalled:
            try:
                reply = _closed_within(s, 0.05)
            except ConnectionResetError:
                reply = b""
            except TimeoutError:
                continue
            assert reply == b"" or (reply.startswith(b"HTTP/1.1 503")
                                    and b"retry-after: 1" in reply), reply[:200]
            ended += 1
        assert ended >= len(stalled) - 8  # at most the cap's 8 still open
    finally:
        for s in stalled:
            s.close()


def test_a_disconnect_mid_body_is_logged_as_one(server):
    port, log = server
    head = (b"POST /api/speed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{\"model\": \"gpt2\"")
    _half_sent(port, head).close()
    for _ in range(100):  # the log line is written when the server notices
        if "disconnected before sending its whole body" in log.read_text():
            break
        time.sleep(0.1)
    text = log.read_text()
    assert "POST /api/speed: the client disconnected before sending its whole body" in text
    assert "failed" not in text and "Traceback" not in text
    assert _fit(port).status_code == 200


def test_past_the_budget_503_with_retry_after(monkeypatch):
    from starlette.testclient import TestClient

    from gpuplan.web import _service, create_app

    def slow(body):
        time.sleep(3)
        return {}

    monkeypatch.setattr(_service, "fit", slow)
    with TestClient(create_app(budget_s=0.2), base_url="http://127.0.0.1") as c:
        r = c.post("/api/fit", json={})
        assert r.status_code == 503
        assert r.headers["retry-after"] == "5"
        assert "budget of 0.2 s" in r.json()["error"]
        assert c.get("/api/options").status_code == 200  # the server answers meanwhile


def test_a_worker_past_the_budget_is_killed():
    from gpuplan.web._work import ProcessRunner

    runner = ProcessRunner(budget_s=30, workers=1)
    try:
        status, body = runner.call("options", (), "GET")
        assert status == 200 and b"defaults" in body
        runner.budget_s = 1e-4  # no solver run answers this fast
        worker = runner._take()
        runner._idle.append(worker)
        assert runner.call("fit", ({"model": "llama-3.1-8b", "gpu": "RTX-4090"},), "POST") \
            is None
        worker.proc.join(10)
        assert not worker.proc.is_alive()  # the work stopped with its process
        runner.budget_s = 30
        assert runner.call("options", (), "GET")[0] == 200  # a fresh worker took its place
    finally:
        runner.close()
