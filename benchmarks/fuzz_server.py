"""Issue 32's web-server fuzz pass: ``python benchmarks/fuzz_server.py N [SEED] [THREADS]``.

Starts ``gpuplan serve`` (2 s header and body timeouts, a 10 s request budget, the default
connection cap), then: the issue's reproducer (2,000 half-sent requests held open while a real
request is asked for), then N hostile raw requests of ``tests/fuzz/fuzz_server.py`` from THREADS
clients at once, a real ``/api/fit`` after every 200. Printed as one JSON line: requests, the
answers by status, those that break the promise (:func:`fuzz_server.check`), the slowest, the
real requests answered, and the server log's tracebacks or failed requests. Recorded in
``benchmarks/fuzz_results.md``.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import json
import random
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
sys.path.insert(0, str(ROOT / "src"))

import fuzz_server as fsv  # noqa: E402

HEADER_S, BODY_S, BUDGET_S = 2.0, 2.0, 10.0


def half_sent(port: int, n: int) -> dict:
    """``n`` connections that send half a request line and stall, and a real request then."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /api/fit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
        socks.append(s)
    t = time.monotonic()
    code = fsv.real_fit(port)
    dt = time.monotonic() - t
    for s in socks:
        s.close()
    return {"half_sent": n, "real_request_status": code, "real_request_s": round(dt, 3)}


def main() -> None:
    n = int(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = Path(tempfile.mkdtemp())
    port = fsv.free_port()
    proc = fsv.start_server(port, d / "serve.log", d / "empty.sqlite", header_s=HEADER_S,
                            body_s=BODY_S, budget_s=BUDGET_S, max_connections=2048)
    rng = random.Random(seed)
    reqs = [fsv.request(rng, port) for _ in range(n)]
    wait = HEADER_S + BODY_S + BUDGET_S + 20
    codes: collections.Counter = collections.Counter()
    broken, slowest, real = [], (0.0, ""), collections.Counter()
    t0 = time.monotonic()
    try:
        result = half_sent(port, 2000)

        def one(req):
            got, dt = fsv.send(req, port, wait)
            return req, got, dt

        with cf.ThreadPoolExecutor(threads) as pool:
            for i in range(0, n, 200):
                for req, got, dt in pool.map(one, reqs[i:i + 200]):
                    line = got.split(b"\r\n", 1)[0][:40].decode("latin-1")
                    codes[line.split(" ")[1] if " " in line else "closed"] += 1
                    why = fsv.check(req, got)
                    if why:
                        broken.append(f"{why} for {req['data'][:150]!r}")
                    if dt > slowest[0]:
                        slowest = (dt, repr(req["data"][:150]))
                real[fsv.real_fit(port)] += 1
    finally:
        proc.terminate()
        proc.wait(30)
    log = (d / "serve.log").read_text()
    problems = fsv.log_problems(log)
    result.update({"target": "server", "requests": n, "seed": seed, "threads": threads,
                   "answers": dict(codes), "broken": len(broken), "first_broken": broken[:5],
                   "slowest_s": round(slowest[0], 2), "slowest_request": slowest[1],
                   "real_requests": dict(real), "log_problems": len(problems),
                   "first_log_problems": problems[:5],
                   "wall_s": round(time.monotonic() - t0, 1)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
