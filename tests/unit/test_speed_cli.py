"""`gpuplan speed` end to end: JSON fields, text, the roofline plot, and bad input (exit 2)."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main


@pytest.fixture(autouse=True)
def no_bench_db(monkeypatch):
    """No stored bench run: the defaults are used (a run on this machine would replace them)."""
    monkeypatch.setenv("GPUPLAN_BENCH_DB", "/nonexistent-dir/bench.sqlite")




def test_json_fields(capsys, cli):
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "h100", "--batch", "4", "--json",
                       "--no-measured")
    assert rc == 0, err
    d = json.loads(out)
    for k in ("flops_per_step", "model_flops_per_token", "step_time_s", "tokens_per_s", "mfu",
              "bound"):
        assert k in d
    assert d["bound"] in ("compute", "memory")
    assert d["gpu"] == "H100-SXM-80GB" and "alias" in d["gpu_note"]
    assert d["tokens_per_s"] == pytest.approx(4 * 2048 / d["step_time_s"])
    assert d["efficiency"]["basis"]["matmul"].startswith("default")


def test_infer_sweep_and_text(capsys, cli):
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "A100-SXM-80GB", "--mode", "infer",
                       "--batch", "8", "--seq", "512", "--sweep", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["step"]["name"] == "decode" and d["prefill"]["name"] == "prefill"
    assert d["sweep"]["saturation_batch"] in [p["batch"] for p in d["sweep"]["points"]]
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "A100-SXM-80GB", "--mode", "infer",
                       "--ops")
    assert rc == 0, err
    assert "decode" in out and "prefill" in out and "Roofline by op class" in out


def test_plot_is_written(capsys, tmp_path, cli):
    pytest.importorskip("matplotlib")
    path = tmp_path / "roofline.png"
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "h100", "--plot", str(path))
    assert rc == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name != "roofline.png"]  # no temp file left


@pytest.mark.parametrize("argv,match", [
    (("--gpu", "T4"), "T4 has no bf16 support"),
    (("--gpu", "V100", "--mode", "infer"), "use --infer-precision fp16"),
    (("--gpu", "h100", "--gpus", "0"), "--gpus '0'"),
    (("--gpu", "h100", "--batch", "-2"), "--batch '-2'"),
    (("--gpu", "h100", "--seq", "0"), "--seq '0'"),
    (("--gpu", "h200x"), "unknown GPU 'h200x'"),
    (("--gpu", "h100", "--link", "fast"), "--link 'fast'"),
    (("--gpu", "h100", "--price", "-1", "--tokens", "1B"), "--price '-1'"),
    (("--gpu", "h100", "--plot", "/nonexistent-dir/x.png"), "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, match, cli):
    rc, out, err = cli("speed", "llama-2-7b", *argv)
    assert rc == 2
    assert match in err
    assert err.count("\n") == 1 and err.startswith("gpuplan: error:")


def test_unknown_model(capsys, cli):
    rc, out, err = cli("speed", "llama-2-7c", "--gpu", "h100")
    assert rc == 2 and "llama-2-7b" in err and err.count("\n") == 1


class _CPU:
    model_name, vendor, physical_cores, simd_bits = "Test CPU", "GenuineIntel", 2, 256
    peak_fp32_flops = 2 * 3e9 * 8 * 2 * 2
    peak_fp64_flops = peak_fp32_flops / 2
    peak_basis = "estimate: 2 cores x 3.00 GHz x 8 fp32 lanes x 2 FMA units x 2"


def test_vs_cpu(capsys, monkeypatch, cli):
    import gpuplan.hardware.cpu as hw_cpu

    # the real module with its detector replaced (a stand-in module would hide hostname & co.
    # from whatever else imports it first)
    monkeypatch.setattr(hw_cpu, "detect_cpu", lambda **kw: _CPU())
    rc, out, err = cli("speed", "gpt2", "--gpu", "h100", "--mode", "infer", "--seq", "16",
                       "--new-tokens", "4", "--vs-cpu", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["cpu"]["cpu"] == "Test CPU" and isinstance(d["cpu"]["needs_gpu"], bool)
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "h100", "--batch", "8",
                       "--vs-cpu")
    assert rc == 0 and "A GPU pays off" in out


def test_speed_and_flops_commands_import_nothing_heavy():
    # the analytic speed model answers without torch, numpy or matplotlib (DESIGN.md)
    import subprocess
    import sys

    code = (
        "import io, contextlib, os\n"
        "os.environ['GPUPLAN_BENCH_DB'] = '/nonexistent-dir/bench.sqlite'\n"
        "from gpuplan.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['speed', 'llama-3.1-8b', '--gpu', 'h100', '--json']) == 0\n"
        "    assert main(['speed', 'llama-3.1-8b', '--gpu', 'h100', '--mode', 'infer']) == 0\n"
        "    assert main(['flops', 'matmul', '128x128', '128x128', '--gpu', 'h100']) == 0\n"
        "import sys; print(' '.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    mods = set(out.stdout.split())
    assert not [m for m in ("torch", "transformers", "numpy", "matplotlib") if m in mods]


def test_vs_cpu_interactive_request_is_judged_by_latency(capsys, monkeypatch, cli):
    # issue 12's repro: an 8B model's request on an A100 against a 2-core CPU is far more than 10x
    # faster on the GPU; the verdict must say a GPU pays off and print the rule it applied
    import gpuplan.hardware.cpu as hw_cpu

    # the real module with its detector replaced (a stand-in module would hide hostname & co.
    # from whatever else imports it first)
    monkeypatch.setattr(hw_cpu, "detect_cpu", lambda **kw: _CPU())
    rc, out, err = cli("speed", "llama-3.1-8b", "--gpu", "a100", "--vs-cpu", "--mode",
                       "infer", "--json")
    assert rc == 0, err
    c = json.loads(out)["cpu"]
    assert c["speedup"] >= 10 and c["needs_gpu"] and c["workload"] == "interactive"
    assert "latency" in c["rule"] and c["rule"] in c["verdict"]
    assert c["cpu_job_s"] / c["gpu_job_s"] == pytest.approx(c["speedup"])


def test_optimizer_impl_option(cli):
    """--optimizer-impl picks how the step runs: a per-parameter loop launches 8 kernels per
    tensor (llama-2-7b: 291 tensors); --fused-optimizer is the fused pass; a bad name is one line,
    exit 2."""
    def opt(*extra):
        rc, out, _ = cli("speed", "llama-2-7b", "--gpu", "h100", "--batch", "1", "--seq", "256",
                         "--json", "--no-measured", *extra)
        assert rc == 0
        return next(o for o in json.loads(out)["step"]["ops"] if o["phase"] == "optimizer")
    loop, fused = opt("--optimizer-impl", "for-loop"), opt("--fused-optimizer")
    assert loop["kernels"] == 8 * 291 and loop["bytes"] > 2.5 * fused["bytes"]
    rc, out, err = cli("speed", "llama-2-7b", "--gpu", "h100", "--optimizer-impl", "jit")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "'jit'" in err


@pytest.mark.parametrize("argv,label", [
    (("llama-3.1-8b", "--gpus", "16"), "exposed gradient all-reduce"),
    (("llama-3.1-70b", "--mode", "infer", "--tp", "4", "--gpus", "4"),
     "exposed TP all-reduces and pipeline sends"),
    (("llama-3.1-70b", "--tp", "4", "--pp", "2", "--gpus", "8", "--grad-accum", "8"),
     "exposed communication (TP, CP, EP, pipeline sends, data parallel)"),
])
def test_the_exposed_communication_says_what_it_is(argv, label, cli):
    """A decode step under TP reduces no gradients: the step table names the collectives the
    estimate timed (it once called a serving replica's TP all-reduces a gradient all-reduce)."""
    rc, out, err = cli("speed", *argv, "--gpu", "h100", "--no-measured")
    assert rc == 0, err
    assert label in out
    assert ("gradient all-reduce" in out) == (label == "exposed gradient all-reduce")
