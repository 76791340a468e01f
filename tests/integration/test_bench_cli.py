"""``gpuplan bench`` end to end on the real CPU (small sizes, short budgets)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuplan.cli import main

QUICK = ["--budget", "0.05", "--copy-size", "1MiB"]


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    """Never touch the user's real database."""
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "default.sqlite"))


def _json(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, json.loads(out) if out.strip().startswith("{") else out, err


def test_json_shape_and_storage(tmp_path, capsys):
    pytest.importorskip("torch")
    db = tmp_path / "b.sqlite"
    rc, doc, err = _json(capsys, ["bench", "--size", "64", "--size", "96", "--json", "--db",
                                  str(db), *QUICK])
    assert rc == 0
    assert {"matmul", "bandwidth", "launch_overhead", "machine", "crossover", "settings",
            "notes", "warnings", "run_id", "cpu_peak"} <= set(doc)
    rows = doc["matmul"]
    assert [(r["device"], r["dtype"], r["size"]) for r in rows] == [("cpu", "fp32", 64),
                                                                    ("cpu", "fp32", 96)]
    for r in rows:
        assert {"device", "dtype", "size", "median_s", "iqr_s", "tflops"} <= set(r)
        assert r["tflops"] == pytest.approx(2 * r["size"] ** 3 / r["median_s"] / 1e12)
        if doc["machine"]["cpu_peak_fp32_flops"]:
            assert r["percent_of_peak"] == pytest.approx(
                100 * 2 * r["size"] ** 3 / r["median_s"] / doc["machine"]["cpu_peak_fp32_flops"])
    assert [b["kind"] for b in doc["bandwidth"]] == ["host_copy"]
    assert [o["kind"] for o in doc["launch_overhead"]] == ["op_dispatch"]
    assert doc["machine"]["cpu_model"] and doc["machine"]["logical_cores"] >= 1
    assert doc["cpu_peak"]["is_estimate"] is True
    assert doc["run_id"] == 1 and doc["db"] == str(db)
    # stdout is pure JSON; the no-GPU line goes to stderr, once
    assert err.count("No CUDA device") == 1

    # the stored run reads back identically (JSON of the stored run == JSON printed)
    rc, shown, _ = _json(capsys, ["bench", "--show", "latest", "--json", "--db", str(db)])
    assert rc == 0
    doc.pop("db")
    assert shown == doc


def test_text_output_history_and_compare(tmp_path, capsys):
    pytest.importorskip("torch")
    db = str(tmp_path / "b.sqlite")
    assert main(["bench", "--size", "64", "--db", db, *QUICK]) == 0
    out, _ = capsys.readouterr()
    assert "CPU peak fp32" in out and "ESTIMATE" in out
    assert "No CUDA device found" in out and "Saved as run 1" in out
    assert main(["bench", "--size", "64", "--dtype", "fp32", "--no-bandwidth", "--db", db,
                 *QUICK]) == 0
    capsys.readouterr()
    assert main(["bench", "--history", "--db", db]) == 0
    out, _ = capsys.readouterr()
    assert "Stored bench runs" in out and "* this machine" in out
    assert main(["bench", "--compare", "1", "2", "--db", db]) == 0
    out, _ = capsys.readouterr()
    assert "A = run 1" in out and "B = run 2" in out and "Matmul median time" in out
    # run 2 skipped the bandwidth: the host copy appears in A only
    assert "host memory copy" in out
    rc, doc, _ = _json(capsys, ["bench", "--compare", "latest~1", "latest", "--json", "--db", db])
    assert rc == 0 and doc["a"]["run_id"] == 1 and doc["b"]["run_id"] == 2


def test_plot_is_written(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    png = tmp_path / "bench.png"
    assert main(["bench", "--size", "64", "--size", "128", "--no-bandwidth", "--plot", str(png),
                 "--no-save", *QUICK]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bad_plot_path_fails_before_any_work(tmp_path, capsys):
    rc = main(["bench", "--plot", str(tmp_path / "no" / "x.png"), "--size", "64", *QUICK])
    _, err = capsys.readouterr()
    assert rc == 2 and "does not exist" in err and err.count("\n") == 1


def test_unwritable_database_prints_results_then_one_error(tmp_path, capsys):
    pytest.importorskip("torch")
    rc = main(["bench", "--size", "64", "--no-bandwidth", "--db",
               str(tmp_path / "missing-dir" / "b.sqlite"), *QUICK])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "cpu" in out and "fp32" in out and "Saved" not in out  # results still printed
    lines = [ln for ln in err.splitlines() if ln.startswith("gpuplan: error:")]
    assert len(lines) == 1 and "does not exist" in lines[0] and "not saved" in lines[0]


def test_corrupt_database_keeps_its_bytes_and_results_are_printed(tmp_path, capsys):
    pytest.importorskip("torch")
    db = tmp_path / "b.sqlite"
    db.write_bytes(b"garbage" * 1000)
    rc, doc, err = _json(capsys, ["bench", "--size", "64", "--no-bandwidth", "--json", "--db",
                                  str(db), *QUICK])
    assert rc == 2 and doc["matmul"] and doc["run_id"] is None and "corrupt" in doc["save_error"]
    assert "corrupt" in err
    assert db.read_bytes() == b"garbage" * 1000


@pytest.mark.parametrize("argv,match", [
    (["--size", "0"], "--size '0': expected a whole number >= 1"),
    (["--size", "-3"], "--size '-3'"),
    (["--size", "1000000"], "largest that fits is --size"),
    (["--budget", "0"], "--budget '0'"),
    (["--budget", "soon"], "--budget 'soon'"),
    (["--dtype", "fp8"], "invalid choice"),
    (["--threads", "0"], "--threads '0'"),
    (["--copy-size", "lots"], "--copy-size 'lots'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, match, capsys):
    pytest.importorskip("torch")
    rc = main(["bench", *argv, "--no-save"])
    out, err = capsys.readouterr()
    assert rc == 2 and match in err and err.count("\n") == 1 and out == ""


def test_without_torch_one_line_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    rc = main(["bench", "--size", "64"])
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.strip() == ("gpuplan: error: gpuplan bench needs torch, which is not installed; "
                           "pip install 'gpuplan[torch]' --extra-index-url "
                           "https://download.pytorch.org/whl/cpu (CPU-only wheels; drop "
                           "--extra-index-url for a CUDA build)")


def test_history_and_compare_need_no_torch(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "--history", "--db", str(tmp_path / "none.sqlite")]) == 0
    out, _ = capsys.readouterr()
    assert "No stored bench runs" in out


def test_the_cli_module_imports_nothing_heavy():
    code = ("import sys, argparse; import gpuplan.cli.bench as b; "
            "p = argparse.ArgumentParser(); b.register(p.add_subparsers()); "
            "heavy = {'torch', 'numpy', 'matplotlib', 'rich'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_progress_bar_on_a_terminal_leaves_stdout_clean(monkeypatch, tmp_path, capsys):
    pytest.importorskip("torch")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    import rich.console
    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    assert main(["bench", "--size", "64", "--size", "96", "--no-bandwidth", "--no-save",
                 *QUICK]) == 0
    out, _ = capsys.readouterr()
    assert "fp32 " in out and "\x1b[?25l" not in out  # the bar (cursor control) stays on stderr
