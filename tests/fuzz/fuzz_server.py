"""Issue 32's web-server fuzz target: hostile raw HTTP requests to a running ``gpuplan serve``
(request lines and headers mutated, Content-Length lies, chunked garbage, bodies of hostile JSON
or a pasted config.json with inflated counts, requests cut short, requests sent slowly), each on
its own connection. The promise: a request the client sent whole is answered with a status
line that is not a 5xx (503 only with Retry-After, the budget's and the connection cap's
answer); a half-sent one is answered 408/400 or closed within the timeouts; the server's log
holds no traceback and no failed request; a real request is answered between them.

Shared by the CI sample (``tests/fuzz/test_surfaces.py``) and the large run
(``benchmarks/fuzz_server.py``).
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import fuzz_features as ff
import fuzz_surfaces as fs
import fuzz_targets as ft

SRC = Path(__file__).resolve().parents[2] / "src"

_PATHS = ["/api/fit", "/api/speed", "/api/cluster", "/api/flops", "/api/capacity",
          "/api/models?q=llama",
          "/api/gpus", "/api/options", "/", "/static/../../../etc/passwd", "/%ff%fe",
          "/api/fit?x=" + "a" * 9000, "/api/models?q=%00%1b", "/api/../api/fit", "*"]
_METHODS = ["POST", "POST", "GET", "PUT", "DELETE", "OPTIONS", "G\x00T", "", "P" * 300]


def _body(rng: random.Random) -> bytes:
    how = rng.choice(["job", "job", "config", "junk", "deep", "empty", "features"])
    if how == "features":  # qa43: a capacity or fit body over the recent features' keys
        return json.dumps(ff.web_input(rng)["body"], allow_nan=True).encode()
    if how == "job":
        kw = {f: rng.choice(ft._JOB_VALUES) for f in rng.sample(ft._JOB_FIELDS,
                                                              k=rng.randint(0, 3))}
        kw = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}
        kw["model"] = rng.choice(ft.MODELS + [7, "x" * 300])
        kw["gpu"] = rng.choice(["h100", "t4", ["a100"], 5, "nope"])
        kw["speed"] = rng.random() < 0.3
        return json.dumps(kw, allow_nan=True).encode()
    if how == "config":
        c = fs.config_plan_input(rng)
        return json.dumps({"config": json.dumps(c["config"]), "gpu": "h100", **{
            k: v for k, v in c["job"].items() if v is not None}}).encode()
    if how == "junk":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    if how == "deep":
        return b"[" * 100_000 + b"]" * 100_000
    return b""


def request(rng: random.Random, port: int) -> dict:
    """One hostile request: its bytes, how it is sent (whole, cut, slowly) and whether whole."""
    method = rng.choice(_METHODS) if rng.random() < 0.1 else "POST"
    path = rng.choice(_PATHS) if rng.random() < 0.3 else rng.choice(_PATHS[:5])
    version = "HTTP/1.1" if rng.random() < 0.9 else rng.choice(["HTTP/1.0", "HTTP/9.9",
                                                                 "HTTX/1.1", ""])
    body = _body(rng)
    headers = [("Host", rng.choice([f"127.0.0.1:{port}"] * 8 + ["evil.example", ""])),
               ("Content-Type", "application/json")]
    length = "exact" if rng.random() < 0.7 else rng.choice(
        ["more", "less", "-1", "1" * 40, "abc", "two", "chunked", "none"])
    n = len(body)
    if length == "exact":
        headers.append(("Content-Length", str(n)))
    elif length == "more":
        headers.append(("Content-Length", str(n + rng.randint(1, 10_000))))
    elif length == "less":
        headers.append(("Content-Length", str(max(n - 1, 0))))
    elif length == "two":
        headers += [("Content-Length", str(n)), ("Content-Length", str(n + 1))]
    elif length == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        body = rng.choice([b"%x\r\n%s\r\n0\r\n\r\n" % (n, body), b"zz\r\n" + body,
                           b"ffffffffffffffff\r\n" + body])
    elif length != "none":
        headers.append(("Content-Length", length))
    if rng.random() < 0.05:
        headers += [(f"X-{i}", "v") for i in range(rng.choice([100, 1000]))]
    if rng.random() < 0.05:
        headers.append(("X-Big", "a" * rng.choice([10_000, 200_000])))
    if rng.random() < 0.05:
        headers.append(("X-Ctl", "\x1b[2J\x00"))
    head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    data = head.encode("latin-1", "replace") + b"\r\n" + body
    send = rng.choice(["whole"] * 7 + ["cut", "cut", "slow"])
    cut = rng.randrange(len(data)) if send == "cut" else len(data)
    return {"data": data[:cut], "send": send, "whole": send != "cut" and length == "exact"
            and version in ("HTTP/1.1", "HTTP/1.0")}


def send(req: dict, port: int, wait_s: float) -> tuple[bytes, float]:
    """Send ``req`` (slowly: in 8 pieces 50 ms apart) and read until the server closes or
    ``wait_s`` passes; (what came back, seconds)."""
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        data = req["data"]
        try:
            if req["send"] == "slow":
                step = max(1, len(data) // 8)
                for i in range(0, len(data), step):
                    s.sendall(data[i:i + step])
                    time.sleep(0.05)
            else:
                s.sendall(data)
        except OSError:
            pass  # the server may close a connection it refused mid-send
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
                if b"\r\n\r\n" in got and req["send"] != "cut":
                    head, _, rest = got.partition(b"\r\n\r\n")
                    n = _content_length(head)
                    if n is not None and len(rest) >= n:
                        break
        except (TimeoutError, ConnectionResetError, socket.timeout):
            pass
    return got, time.monotonic() - t


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            try:
                return int(v.strip())
            except ValueError:
                return None
    return None


def check(req: dict, got: bytes) -> str | None:
    """Why the answer to ``req`` breaks the promise, or None."""
    if not got:
        return "a whole request got no answer" if req["whole"] else None
    line = got.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return f"not a status line: {line[:100]!r}"
    code = int(parts[1])
    if code == 503:
        return None if b"retry-after:" in got.lower() else "503 without Retry-After"
    if code >= 500:
        return f"answered {code}: {got[:300]!r}"
    return None


def log_problems(text: str) -> list[str]:
    """Lines of the server's log that say a request failed or show a traceback."""
    return [ln for ln in text.splitlines()
            if "Traceback" in ln or " failed" in ln or "Exception" in ln or " 500" in ln]


def start_server(port: int, log: Path, db: Path, *, header_s: float, body_s: float,
                 budget_s: float, max_connections: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC), "GPUPLAN_BENCH_DB": str(db),
           "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplan", "serve", "--port", str(port), "--header-timeout",
             str(header_s), "--body-timeout", str(body_s), "--request-budget", str(budget_s),
             "--max-connections", str(max_connections)],
            env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    if f":{port}/" not in proc.stdout.readline():
        proc.kill()
        raise RuntimeError(f"gpuplan serve did not start: {log.read_text()[-2000:]}")
    return proc


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def real_fit(port: int) -> int:
    body = json.dumps({"model": "gpt2", "gpu": "T4", "speed": False}).encode()
    req = {"data": (f"POST /api/fit HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: "
                    f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close"
                    "\r\n\r\n").encode() + body, "send": "whole", "whole": True}
    got, _ = send(req, port, 60)
    parts = got.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
