"""``gpuplan gpus``: the table, one GPU in detail, --json, --units, --sources, and bad names (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuplan.hardware import all_gpus

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__import__("gpuplan").__file__)))




def test_table_lists_every_sku_with_dense_peaks(capsys, cli):
    rc, out, err = cli("gpus")
    assert rc == 0 and err == ""
    for g in all_gpus():
        assert g.name in out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert "989.4" in lines["H100-SXM-80GB"] and "1,978.9" in lines["H100-SXM-80GB"]
    assert "3,350 GB/s" in lines["H100-SXM-80GB"] and "NVLink 4 900 GB/s" in lines["H100-SXM-80GB"]
    assert "Gen5 x16" in lines["H100-SXM-80GB"]
    assert "85.0 GB" in lines["H100-SXM-80GB"]  # 85,028,896,768 bytes as the device reports it
    assert "—" in lines["T4"]  # no bf16 on Turing: shown absent, not 0
    assert " 0.0 " not in out
    assert "304 CUs" in lines["MI300X"]
    assert "https://" not in out  # sources only on request


def test_units_gib(capsys, cli):
    rc, out, _ = cli("gpus", "--units", "GiB")
    assert rc == 0
    row = next(line for line in out.splitlines() if "H100-SXM-80GB" in line)
    assert f"{85_028_896_768 / 2**30:.1f} GiB" in row  # 79.2 GiB
    assert f"{3350e9 / 2**30:,.1f} GiB/s" in row


def test_sources_column(capsys, cli):
    rc, out, _ = cli("gpus", "--sources")
    assert rc == 0
    for g in all_gpus():
        assert g.sources[0] in out


def test_json_is_the_full_catalog_in_si_units(capsys, cli):
    rc, out, err = cli("gpus", "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    recs = {r["name"]: r for r in data["gpus"]}
    assert list(recs) == [g.name for g in all_gpus()]
    h100 = recs["H100-SXM-80GB"]
    assert h100["memory_bytes"] == 85_028_896_768
    assert h100["memory_bandwidth_bytes_per_s"] == pytest.approx(3.35e12)
    assert h100["peak_flops"]["bf16"] == pytest.approx(989.4e12)
    assert h100["resident_threads"] == 132 * 2048
    assert h100["source"] and all(u.startswith("https://") for u in h100["source"])
    assert "bf16" not in recs["T4"]["peak_flops"]
    assert recs["RTX-4090"]["interconnect_bytes_per_s"] is None


def test_one_gpu_by_alias_says_which_sku(capsys, cli):
    rc, out, err = cli("gpus", "h100")
    assert rc == 0 and err == ""
    assert out.splitlines()[0] == "h100 is an alias of H100-SXM-80GB"
    assert "270,336 (132 x 2048)" in out
    assert "989.4 TFLOP/s" in out and "1,978.9 TOPS" in out
    assert "NVIDIA H100 80GB HBM3" in out
    assert "gtc22-whitepaper-hopper" in out


def test_one_gpu_by_exact_name_has_no_alias_line(capsys, cli):
    rc, out, _ = cli("gpus", "T4")
    assert rc == 0
    assert "alias of" not in out
    bf16 = next(line for line in out.splitlines() if line.startswith("│ bf16"))
    assert "—" in bf16


def test_one_gpu_json(capsys, cli):
    rc, out, _ = cli("gpus", "4090", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["query"] == "4090" and data["alias_of"] == "RTX-4090"
    assert data["note"] == "4090 is an alias of RTX-4090"
    assert data["gpu"]["peak_flops"]["fp16"] == pytest.approx(165.2e12)
    rc, out, _ = cli("gpus", "RTX-4090", "--json")
    assert json.loads(out)["alias_of"] is None


@pytest.mark.parametrize("name", ["H100-SXM", "h10"])
def test_unknown_name_is_one_line_exit_2(capsys, name, cli):
    rc, out, err = cli("gpus", name)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"gpuplan: error: unknown GPU {name!r}; did you mean ")
    assert "'H100-SXM-80GB'" in err


@pytest.mark.parametrize("argv", [["--units", "MB"], ["a", "b"], ["--bogus"]])
def test_bad_usage_is_one_line_exit_2(capsys, argv, cli):
    rc, out, err = cli("gpus", *argv)
    assert rc == 2 and out == ""
    assert err.startswith("gpuplan: error: ") and err.count("\n") == 1


def test_cli_module_imports_nothing_heavy_until_run():
    code = ("import sys, gpuplan.cli.gpus; "
            "bad = [m for m in ('rich', 'torch', 'numpy') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert r.returncode == 0, r.stdout + r.stderr


def test_console_script_path_end_to_end():
    r = subprocess.run([sys.executable, "-m", "gpuplan", "gpus", "H100-SXM"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert r.returncode == 2 and r.stdout == ""
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
