"""Missing extras: one line with the exact install command, exit 2, never a traceback -- in this
process (a module hidden from import) and in a real virtualenv that has no torch at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpuplan._extras import EXTRAS, extras_status, installed_version, require
from gpuplan.cli import main
from gpuplan.errors import MissingDependencyError, install_command

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def test_extras_table_is_pyprojects():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name, dists in EXTRAS.items():
        declared = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in extras[name]}
        assert declared == set(dists), name


def test_torch_install_command_names_the_cpu_wheels():
    assert install_command("torch") == f"pip install 'gpuplan[torch]' {CPU_INDEX}"
    assert install_command("gguf") == "pip install 'gpuplan[gguf]'"


def test_require_raises_one_line_naming_feature_and_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)        # import gguf -> ImportError
    with pytest.raises(MissingDependencyError) as e:
        require("gguf", feature="reading a .gguf file")
    msg = str(e.value)
    assert msg == ("reading a .gguf file needs gguf, which is not installed; "
                   "pip install 'gpuplan[gguf]'")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=f"needs torch.*{CPU_INDEX}"):
        require("torch", feature="gpuplan trace")


def test_a_gguf_file_without_the_gguf_package_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gguf", None)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    assert main(["fit", str(f)]) == 2
    err = capsys.readouterr().err
    assert err == ("gpuplan: error: reading a .gguf file needs gguf, which is not installed; "
                   "pip install 'gpuplan[gguf]'\n")


def test_a_hub_id_without_huggingface_hub_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    assert main(["fit", "acme/some-model"]) == 2
    err = capsys.readouterr().err
    assert "needs huggingface_hub" in err and "pip install 'gpuplan[hub]'" in err
    assert err.count("\n") == 1


def test_installed_versions_come_from_metadata_without_importing():
    code = ("import sys; from gpuplan._extras import extras_status; s = extras_status(); "
            "print('torch' in sys.modules, 'gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.stdout.split() == ["False", "False"]
    assert installed_version("pytest") is not None
    assert installed_version("surely-not-a-package-gpuplan") is None
    assert set(extras_status()) == set(EXTRAS)


def _site_packages(venv: Path) -> Path:
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def venv_without_torch(tmp_path_factory):
    """python -m venv; the project installed with --no-deps; rich (and its own dependencies)
    copied from this environment, so nothing is fetched from a network."""
    if os.name == "nt":
        pytest.skip("POSIX venv layout")
    venv = tmp_path_factory.mktemp("notorch") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The wheel is built with this environment's setuptools (the venv's own may be older than
    # pyproject.toml asks for), then installed with --no-deps from the file alone.
    # A copy is built, so that no build output (src/*.egg-info, build/) lands in the checkout.
    wheels = tmp_path_factory.mktemp("wheel")
    copy = tmp_path_factory.mktemp("project") / "gpuplan"
    shutil.copytree(ROOT / "src", copy / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, copy / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                            "--no-build-isolation", "-w", str(wheels), str(copy)],
                           capture_output=True, text=True, cwd=wheels, env=env)
    if build.returncode != 0:
        pytest.skip(f"cannot build the project's wheel offline here: {build.stderr[-300:]}")
    wheel = next(wheels.glob("gpuplan-*.whl"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                    "--no-deps", str(wheel)], check=True, env=env)
    site = _site_packages(venv)
    import markdown_it
    import mdurl
    import pygments
    import rich

    for mod in (rich, markdown_it, mdurl, pygments):
        src = Path(mod.__file__).parent
        shutil.copytree(src, site / src.name)
    return venv


@pytest.mark.parametrize("args", [["trace", "gpt2"], ["profile", "train.py"],
                                  ["bench", "--size", "64"]])
def test_commands_needing_torch_in_a_venv_without_torch(venv_without_torch, tmp_path, args):
    gpuplan = venv_without_torch / "bin" / "gpuplan"
    (tmp_path / "train.py").write_text("print('hello')\n")
    check = subprocess.run([str(venv_without_torch / "bin" / "python"), "-c", "import torch"],
                           capture_output=True)
    assert check.returncode != 0                       # really no torch there
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(gpuplan), *args], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert "needs torch, which is not installed" in out.stderr
    assert f"pip install 'gpuplan[torch]' {CPU_INDEX}" in out.stderr


def test_analytic_fit_works_in_the_venv_without_torch(venv_without_torch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(venv_without_torch / "bin" / "gpuplan"), "fit", "--params", "7B",
                          "--json"], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    doctor = subprocess.run([str(venv_without_torch / "bin" / "gpuplan"), "doctor"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert doctor.returncode == 0 and "torch     not installed" in doctor.stdout
