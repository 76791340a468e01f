"""Shared pieces of the web tests: the app in-process, the CLI in-process, a live server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed: pip install 'gpuplan[web]'")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx: pip install 'gpuplan[test]'")

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(autouse=True)
def _empty_bench_db(tmp_path, monkeypatch):
    """The speed model applies this machine's stored bench runs; the tests use none."""
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))


@pytest.fixture
def client():
    from starlette.testclient import TestClient

    from gpuplan.web import create_app

    with TestClient(create_app(), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def cli_json(capsys):
    """``gpuplan ARGS --json`` run in-process -> the parsed JSON it prints."""
    from gpuplan.cli import main

    def run(*argv: str) -> dict:
        capsys.readouterr()
        rc = main([*argv, "--json"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        return json.loads(out.out)

    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    """``gpuplan serve`` in a subprocess on a free loopback port; yields its base URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "GPUPLAN_BENCH_DB": str(tmp_path_factory.mktemp("db") / "empty.sqlite")}
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gpuplan", "serve", "--port", str(port)],
                                env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()  # printed once the socket listens
    if f":{port}/" not in line:
        proc.kill()
        pytest.fail(f"gpuplan serve did not start: {line!r} {log.read_text()[-2000:]}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        proc.stdout.close()
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
