"""`gpuplan fit` end to end: the JSON contract, the table, and one-line errors with exit 2."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main

GB = 10**9


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_seed_example_json_contract(capsys):
    code, out, err = run(capsys, "fit", "--params", "7B", "--json", "--gpu", "H100-SXM-80GB")
    assert code == 0, err
    d = json.loads(out)
    # the contract of issue 2 (README "JSON output")
    assert isinstance(d["model"]["name"], str) and d["model"]["params"] == 7 * GB
    assert d["train"]["precision"] == "mixed-bf16" and d["train"]["optimizer"] == "adamw"
    tr = d["train"]["per_gpu"]
    for k in ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
              "activations_bytes", "overhead_bytes", "total_bytes"):
        assert isinstance(tr[k], int), k
    assert (tr["weights_bytes"], tr["gradients_bytes"], tr["master_weights_bytes"],
            tr["optimizer_bytes"]) == (14 * GB, 14 * GB, 28 * GB, 56 * GB)
    assert d["infer"]["precision"] == "bf16"
    inf = d["infer"]["per_gpu"]
    for k in ("weights_bytes", "kv_cache_bytes", "activations_bytes", "overhead_bytes",
              "total_bytes"):
        assert isinstance(inf[k], int), k
    assert inf["weights_bytes"] == 14 * GB
    g = d["gpus"][0]
    assert g["name"] == "H100-SXM-80GB" and isinstance(g["usable_bytes"], int)
    assert g["train_fits"] is False and g["infer_fits"] is True
    assert d["train_to_infer_ratio"] == 8.0


def test_seed_example_table(capsys):
    code, out, _ = run(capsys, "fit", "--params", "7B", "--gpu", "H100-SXM-80GB")
    assert code == 0
    for text in ("14.0 GB", "28.0 GB", "56.0 GB", "112.0 GB", "8.0x"):
        assert text in out
    assert "activations" in out and "architecture unknown" in out


def test_units_gib(capsys):
    code, out, _ = run(capsys, "fit", "--params", "7B", "--units", "GiB", "--gpu", "h100")
    assert code == 0
    assert f"{112e9 / 2**30:.1f} GiB" in out            # 104.3 GiB
    assert "alias of H100-SXM-80GB" in out


def test_infer_mode_precision_is_the_weight_format(capsys):
    code, out, _ = run(capsys, "fit", "--params", "7B", "--mode", "infer", "--precision", "q4_0",
                       "--json")
    d = json.loads(out)
    assert code == 0 and "train" not in d
    assert d["infer"]["per_gpu"]["weights_bytes"] == 7 * GB * 18 // 32


@pytest.mark.parametrize("argv,needle", [
    (["fit", "--params", "-3"], "'-3'"),
    (["fit", "--params", "0"], "'0'"),
    (["fit", "--params", "nan"], "'nan'"),
    (["fit", "--params", "1e30"], "'1e30'"),
    (["fit", "--params", "7Q"], "'7Q'"),
    (["fit", "--params", "7B", "--gpu", "H100-SXM"], "H100-SXM-80GB"),
    (["fit", "--params", "7B", "--precision", "fp64"], "fp64"),
    (["fit", "--params", "7B", "--optimizer", "adamm"], "adam"),
    (["fit", "--params", "7B", "--zero", "5"], "--zero"),
    (["fit", "--params", "7B", "--gpus", "0"], "--gpus"),
    (["fit", "--params", "7B", "--batch", "x"], "--batch"),
    (["fit"], "no model given"),
    (["fit", "--params", "7B", "--bogus"], "--bogus"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err
