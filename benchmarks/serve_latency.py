"""How quick is ``gpuplan serve``? Cold start to the first answer, and the latency of one update.

    PYTHONPATH=src python benchmarks/serve_latency.py [--runs 3] [--updates 30]

Cold: from spawning ``python -m gpuplan serve`` to the first ``POST /api/fit`` answered (the
process imports, binds, and plans a catalog model); targets < 1.5 s. Update: what the page sends
when an input changes -- ``POST /api/fit`` without the solver (``suggest: false``) for
llama-3.1-8b on one GPU, the batch changing each time, then ``POST /api/speed`` for that GPU --
measured on a warm server over loopback; targets < 100 ms. Also measured: the request that adds
the solver's suggestions when the job does not fit (it follows the update on the page).
Prints a Markdown table; the recorded results are in serve_latency.md.

    PYTHONPATH=src python benchmarks/serve_latency.py --hold [--clients 50] [--half-sent 1000]
        [--seconds 20]

Held (issue 32): the server under ``--clients`` concurrent clients, each sending the page's
update (fit without the solver, alternating with speed) back to back for ``--seconds``, while
``--half-sent`` sockets each send part of a request's headers and stall (re-opened as the server
closes them). Every well-formed request must be answered 200, or 503 with Retry-After; prints
the counts and the latency percentiles.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def start(port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, "-m", "gpuplan", "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


JOB = {"model": "llama-3.1-8b", "gpu": ["H100-SXM-80GB"]}


def cold_start() -> float:
    port = free_port()
    t0 = time.perf_counter()
    proc = start(port)
    try:
        while True:
            try:
                post(f"http://127.0.0.1:{port}/api/fit", {**JOB, "suggest": False})
                return time.perf_counter() - t0
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit("gpuplan serve exited") from None
                time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait()


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def wait_ready(base: str) -> None:
    """Until the server answers a fit (at most ~10 s of retries while it starts)."""
    for _ in range(500):
        try:
            post(base + "/api/fit", {**JOB, "suggest": False})
            return
        except OSError:
            time.sleep(0.02)


def updates(n: int) -> dict[str, list[float]]:
    port = free_port()
    proc = start(port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base)
        out: dict[str, list[float]] = {"fit (the update)": [], "speed": [],
                                       "fit with the solver (RTX-4090, does not fit)": []}
        for i in range(n):
            b = {**JOB, "batch": 1 + i % 16}
            out["fit (the update)"].append(timed(lambda: post(base + "/api/fit",
                                                              {**b, "suggest": False})))
            out["speed"].append(timed(lambda: post(base + "/api/speed",
                                                   {**b, "gpu": "H100-SXM-80GB"})))
            if i < max(5, n // 3):
                out["fit with the solver (RTX-4090, does not fit)"].append(timed(
                    lambda: post(base + "/api/fit", {**b, "gpu": ["RTX-4090"]})))
        return out
    finally:
        proc.terminate()
        proc.wait()


def _stall(port: int) -> socket.socket | None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /api/fit HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        s.setblocking(False)
        return s
    except OSError:
        return None


def _keep_stalled(port: int, n: int, stop: threading.Event, counts: dict) -> None:
    """``n`` half-sent connections open the whole time: each one the server closes is replaced."""
    socks = [s for s in (_stall(port) for _ in range(n)) if s]
    counts["opened"] = len(socks)
    counts["ready"].set()
    while not stop.wait(0.2):
        alive = []
        for s in socks:
            try:
                gone = s.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                s.close()
                counts["closed_by_server"] += 1
                s = _stall(port)
                counts["opened"] += s is not None
            if s:
                alive.append(s)
        socks = alive
    for s in socks:
        s.close()


def _client(base: str, until: float, out: list) -> None:
    i = 0
    while time.perf_counter() < until:
        path, body = (("/api/fit", {**JOB, "batch": 1 + i % 16, "suggest": False}) if i % 2 == 0
                      else ("/api/speed", {**JOB, "gpu": "H100-SXM-80GB", "batch": 1 + i % 8}))
        req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                out.append((r.status, True, time.perf_counter() - t))
        except urllib.error.HTTPError as e:
            out.append((e.code, e.headers.get("Retry-After") is not None,
                        time.perf_counter() - t))
        except OSError as e:
            out.append((f"no answer ({type(e).__name__})", False, time.perf_counter() - t))
        i += 1


def held(clients: int, half_sent: int, seconds: float) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    port = free_port()
    proc = start(port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base)
        stop, counts = threading.Event(), {"opened": 0, "closed_by_server": 0,
                                           "ready": threading.Event()}
        holder = threading.Thread(target=_keep_stalled, args=(port, half_sent, stop, counts))
        holder.start()
        counts["ready"].wait()
        results: list = []
        until = time.perf_counter() + seconds
        threads = [threading.Thread(target=_client, args=(base, until, results))
                   for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        holder.join()
    finally:
        proc.terminate()
        proc.wait()
    _report_held(results, counts, clients, half_sent, seconds)


def _report_held(results: list, counts: dict, clients: int, half_sent: int,
                 seconds: float) -> None:
    statuses: dict = {}
    for status, retry, _ in results:
        key = f"{status}" + (" with Retry-After" if status == 503 and retry else "")
        statuses[key] = statuses.get(key, 0) + 1
    lat = sorted(x for _, _, x in results)
    lat200 = sorted(x for s, _, x in results if s == 200)
    ok = all(s == 200 or (s == 503 and r) for s, r, _ in results)

    def pct(q: float, xs: list = lat) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3 if xs else float("nan")

    print(f"{clients} clients for {seconds:g} s beside {half_sent} half-sent connections "
          f"({counts['opened']} opened in all, {counts['closed_by_server']} closed by the "
          "server)\n")
    print("| requests | answers | p50 | p99 | max | every request answered 200 or 503 + "
          "Retry-After |")
    print("|---|---|---|---|---|---|")
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
    print(f"| {len(results)} | {answers} | {pct(0.5):.0f} ms | {pct(0.99):.0f} ms | "
          f"{lat[-1] * 1e3:.0f} ms | {'yes' if ok else 'NO'} |")
    print(f"\nthe 200 answers alone: p50 {pct(0.5, lat200):.0f} ms, p99 {pct(0.99, lat200):.0f} ms")
    if not ok:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--hold", action="store_true", help="the held-server run (issue 32)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--half-sent", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    if args.hold:
        print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs\n")
        held(args.clients, args.half_sent, args.seconds)
        return
    load = os.getloadavg()[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {load:.1f}; Python {platform.python_version()}\n")
    colds = [cold_start() for _ in range(args.runs)]
    print("| measure | runs | median | min | max | target |")
    print("|---|---|---|---|---|---|")
    print(f"| cold `gpuplan serve` to first fit answer | {len(colds)} | "
          f"{statistics.median(colds) * 1e3:.0f} ms | {min(colds) * 1e3:.0f} ms | "
          f"{max(colds) * 1e3:.0f} ms | < 1500 ms |")
    for name, xs in updates(args.updates).items():
        target = "< 100 ms" if name.startswith("fit (") or name == "speed" else "(follows)"
        print(f"| {name} | {len(xs)} | {statistics.median(xs) * 1e3:.1f} ms | "
              f"{min(xs) * 1e3:.1f} ms | {max(xs) * 1e3:.1f} ms | {target} |")


if __name__ == "__main__":
    main()
