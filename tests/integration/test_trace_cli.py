"""``gpuplan trace``: output formats, the chart, and one-line errors (exit 2, nothing written)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuplan.cli import main  # noqa: E402

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 500}


@pytest.fixture()
def cfg(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY))
    return str(p)


def test_json_output_lines_up_with_fit(cfg, capsys):
    assert main(["trace", cfg, "--batch", "2", "--seq", "32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # the defaults are gpuplan fit's: the seed's mixed-bf16 with AdamW
    assert d["mode"] == "train" and d["precision"] == "mixed-bf16" and d["optimizer"] == "adamw"
    assert d["per_gpu"]["total_bytes"] == d["total_bytes"] > 0
    assert d["peak_phase"] in ("forward", "backward", "optimizer")


def test_model_directory_and_text_output(tmp_path, cfg, capsys):
    assert main(["trace", str(tmp_path), "--mode", "infer", "--seq", "16"]) == 0
    out = capsys.readouterr().out
    assert "KV cache" in out and "prefill" in out and "sdpa-cuda-backend" in out


def test_plot_writes_a_png(tmp_path, cfg, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    assert main(["trace", cfg, "--seq", "16", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,needle", [
    (["--batch", "0"], "--batch"),
    (["--seq", "-1"], "--seq"),
    (["--mode", "serve"], "--mode"),
    (["--attention", "flash3"], "--attention"),
    (["--precision", "fp64"], "training precision"),
    (["--mode", "infer", "--precision", "q4_k_m"], "quantized"),
    (["--optimizer", "adamw", "--optimizer-impl", "fused", "--optimizer", "adafactor"], "fused"),
    (["--real", "--device", "cuda"], "--real"),
])
def test_bad_input_is_one_line_exit_2(cfg, capsys, argv, needle):
    assert main(["trace", cfg, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuplan: error:") and "\n" not in err and needle in err


def test_unwritable_plot_fails_before_any_work(tmp_path, cfg, capsys):
    target = tmp_path / "missing-dir" / "t.png"
    assert main(["trace", cfg, "--plot", str(target)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not target.parent.exists()


def test_missing_file_and_unknown_catalog_name(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "nope" / "config.json")]) == 2
    assert "no such" in capsys.readouterr().err
    assert main(["trace", "llama-9.9-1t"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_importing_the_trace_package_and_cli_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, gpuplan.trace, gpuplan.cli.trace, gpuplan.report.trace\n"
            "print(' '.join(m for m in ('torch', 'transformers', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
