"""`gpuplan flops matmul`: the source documents' worked examples from the command line."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(autouse=True)
def no_bench_db(monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", "/nonexistent-dir/bench.sqlite")


def test_seed_example_six_multiplies_four_additions(capsys):
    rc, out, _ = run(capsys, "flops", "matmul", "1x3", "3x2", "--json")
    d = json.loads(out)
    assert rc == 0
    assert (d["multiplies"], d["additions"], d["flops"]) == (6, 4, 12)


def test_seed_512_layer(capsys):
    rc, out, _ = run(capsys, "flops", "matmul", "256x512", "512x512", "--json")
    d = json.loads(out)
    assert d["multiplies"] // 256 == 262_144  # per example (row)
    rc, out, _ = run(capsys, "flops", "matmul", "1x512", "512x512")
    assert "262,144" in out


def test_seed_128x128_on_h100(capsys):
    rc, out, _ = run(capsys, "flops", "matmul", "128x128", "128x128", "--gpu", "H100-SXM-80GB",
                     "--json")
    d = json.loads(out)
    assert rc == 0
    assert d["output_elements"] == 16_384
    assert d["resident_threads"] == 270_336
    assert d["work_shortfall"] == pytest.approx(16.5)
    assert d["times"][0]["device"] == "H100-SXM-80GB"
    rc, out, _ = run(capsys, "flops", "matmul", "128x128", "128x128", "--gpu", "h100")
    assert "16.5x" in out and "270,336" in out


@pytest.mark.parametrize("argv,match", [
    (("0x3", "3x2"), "sizes must be >= 1"),
    (("--", "-1x3", "3x2"), "expected ROWSxCOLS"),
    (("2x3", "4x2"), "inner sizes differ"),
    (("1x3", "3x2", "--gpu", "T4", "--dtype", "bf16"), "T4 has no bf16"),
    (("1x3", "3x2", "--batch", "0"), "--batch '0'"),
    (("1x3", "3x2", "--tile", "0x128"), "sizes must be >= 1"),
])
def test_bad_shapes(capsys, argv, match):
    rc, out, err = run(capsys, "flops", "matmul", *argv)
    assert rc == 2 and match in err and err.count("\n") == 1
