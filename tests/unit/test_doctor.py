"""``gpuplan doctor``: the devices are faked (nvidia-smi's output, torch.cuda), not the logic."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import types

import pytest

import gpuplan
from gpuplan import doctor
from gpuplan.cli import main
from gpuplan.hardware import get_gpu
from gpuplan.report.doctor import doctor_lines

H100 = get_gpu("H100-SXM-80GB")


def _fake_smi(monkeypatch, stdout: str, returncode: int = 0):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, returncode, stdout=stdout, stderr="")

    monkeypatch.setattr(doctor.subprocess, "run", run)
    return seen


def _fake_torch(monkeypatch, *, cuda: str | None, devices: list[tuple[str, int]]):
    t = types.ModuleType("torch")
    t.__version__ = "9.9.9"
    t.version = types.SimpleNamespace(cuda=cuda)
    t.cuda = types.SimpleNamespace(
        is_available=lambda: bool(devices), device_count=lambda: len(devices),
        get_device_name=lambda i: devices[i][0],
        get_device_properties=lambda i: types.SimpleNamespace(total_memory=devices[i][1]))
    monkeypatch.setitem(sys.modules, "torch", t)
    monkeypatch.setattr(doctor, "installed_version",
                        lambda d: "9.9.9" if d == "torch" else None)


def test_gpus_from_nvidia_smi_with_catalog_match_and_driver(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    name = H100.device_names[0]
    cmds = _fake_smi(monkeypatch, f"{name}, 81559, 550.54.15\nSome Future GPU, 4096, 550.54.15\n")
    _fake_torch(monkeypatch, cuda="12.4", devices=[(name, 85_520_809_984)])
    r = doctor.diagnose()
    assert cmds[0][1:] == ["--query-gpu=name,memory.total,driver_version",
                           "--format=csv,noheader,nounits"]
    assert r.driver == "550.54.15" and r.nvidia_smi == "found"
    assert [(g.name, g.catalog, g.seen_by) for g in r.gpus] == [
        (name, "H100-SXM-80GB", "nvidia-smi"), ("Some Future GPU", None, "nvidia-smi")]
    assert r.gpus[0].memory_bytes == 81559 * 2**20     # nvidia-smi reports MiB
    assert (r.torch.version, r.torch.cuda_build, r.torch.cuda_available,
            r.torch.device_count) == ("9.9.9", "12.4", True, 1)
    assert r.gpuplan == gpuplan.__version__
    assert r.bench_db.exists is False and r.bench_db.runs == 0


def test_torch_sees_gpus_when_nvidia_smi_is_absent(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    name = H100.device_names[0]
    _fake_torch(monkeypatch, cuda="12.4", devices=[(name, 85_520_809_984)])
    r = doctor.diagnose()
    assert r.nvidia_smi == "not found" and r.driver is None
    assert [(g.catalog, g.seen_by, g.memory_bytes) for g in r.gpus] == [
        ("H100-SXM-80GB", "torch", 85_520_809_984)]


def test_no_gpu_cpu_torch_and_broken_nvidia_smi(monkeypatch):
    _fake_smi(monkeypatch, "", returncode=9)
    _fake_torch(monkeypatch, cuda=None, devices=[])
    r = doctor.diagnose()
    assert r.gpus == () and r.nvidia_smi.startswith("exit 9")
    assert r.torch.cuda_build is None and not r.torch.cuda_available
    text = "\n".join(doctor_lines(r))
    assert "CPU-only build" in text and "none seen" in text


def test_torch_not_installed_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    monkeypatch.setattr(doctor, "installed_version", lambda d: None)
    r = doctor.diagnose()
    assert r.torch is None


def test_cli_doctor_json_and_text(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    _fake_torch(monkeypatch, cuda=None, devices=[])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["doctor", "--json"]) == 0
    d = json.loads(out.getvalue())
    assert set(d) >= {"gpuplan", "python", "platform", "torch", "gpus", "driver", "bench_db",
                      "extras", "extras_installed"}
    assert d["bench_db"]["path"] == str(tmp_path / "none.sqlite")
    assert set(d["extras"]) == {"safetensors", "plot", "torch", "hub", "gguf"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["doctor"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"gpuplan   {gpuplan.__version__}" and len(lines) <= 24   # one screen


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"gpuplan {gpuplan.__version__}\n"
