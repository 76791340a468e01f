"""How quick is ``gpuplan serve``? Cold start to the first answer, and the latency of one update.

    PYTHONPATH=src python benchmarks/serve_latency.py [--runs 3] [--updates 30]

Cold: from spawning ``python -m gpuplan serve`` to the first ``POST /api/fit`` answered (the
process imports, binds, and plans a catalog model); targets < 1.5 s. Update: what the page sends
when an input changes -- ``POST /api/fit`` without the solver (``suggest: false``) for
llama-3.1-8b on one GPU, the batch changing each time, then ``POST /api/speed`` for that GPU --
measured on a warm server over loopback; targets < 100 ms. Also measured: the request that adds
the solver's suggestions when the job does not fit (it follows the update on the page).
Prints a Markdown table; the recorded results are in serve_latency.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
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


def updates(n: int) -> dict[str, list[float]]:
    port = free_port()
    proc = start(port)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(500):
            try:
                post(base + "/api/fit", {**JOB, "suggest": False})
                break
            except OSError:
                time.sleep(0.02)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--updates", type=int, default=30)
    args = ap.parse_args()
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
