"""`gpuplan flops matmul`: the source documents' worked examples from the command line."""

from __future__ import annotations

import json

import pytest





@pytest.fixture(autouse=True)
def no_bench_db(monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", "/nonexistent-dir/bench.sqlite")


def test_seed_example_six_multiplies_four_additions(capsys, cli):
    rc, out, _ = cli("flops", "matmul", "1x3", "3x2", "--json")
    d = json.loads(out)
    assert rc == 0
    assert (d["multiplies"], d["additions"], d["flops"]) == (6, 4, 12)


def test_seed_512_layer(capsys, cli):
    rc, out, _ = cli("flops", "matmul", "256x512", "512x512", "--json")
    d = json.loads(out)
    assert d["multiplies"] // 256 == 262_144  # per example (row)
    rc, out, _ = cli("flops", "matmul", "1x512", "512x512")
    assert "262,144" in out


def test_seed_128x128_on_h100(capsys, cli):
    rc, out, _ = cli("flops", "matmul", "128x128", "128x128", "--gpu", "H100-SXM-80GB",
                     "--json")
    d = json.loads(out)
    assert rc == 0
    assert d["output_elements"] == 16_384
    assert d["resident_threads"] == 270_336
    assert d["work_shortfall"] == pytest.approx(16.5)
    assert d["times"][0]["device"] == "H100-SXM-80GB"
    rc, out, _ = cli("flops", "matmul", "128x128", "128x128", "--gpu", "h100")
    assert "16.5x" in out and "270,336" in out


@pytest.mark.parametrize("argv,match", [
    (("0x3", "3x2"), "sizes must be >= 1"),
    (("--", "-1x3", "3x2"), "expected ROWSxCOLS"),
    (("2x3", "4x2"), "inner sizes differ"),
    (("1x3", "3x2", "--gpu", "T4", "--dtype", "bf16"), "T4 has no bf16"),
    (("1x3", "3x2", "--batch", "0"), "--batch '0'"),
    (("1x3", "3x2", "--tile", "0x128"), "sizes must be >= 1"),
])
def test_bad_shapes(capsys, argv, match, cli):
    rc, out, err = cli("flops", "matmul", *argv)
    assert rc == 2 and match in err and err.count("\n") == 1


class _CPU:
    """Stand-in for gpuplan.hardware.cpu.CPU (2 cores, AVX2 with 2 FMA units, 3 GHz)."""

    model_name, vendor, physical_cores, simd_bits = "Test CPU", "GenuineIntel", 2, 256
    peak_fp32_flops = 2 * 3e9 * 8 * 2 * 2
    peak_fp64_flops = peak_fp32_flops / 2
    peak_basis = "estimate: 2 cores x 3.00 GHz x 8 fp32 lanes x 2 FMA units x 2"


@pytest.fixture
def fake_cpu(monkeypatch):
    import sys
    import types

    mod = types.ModuleType("gpuplan.hardware.cpu")
    mod.detect_cpu = lambda **kw: _CPU()
    monkeypatch.setitem(sys.modules, "gpuplan.hardware.cpu", mod)


def test_seed_experiment_tiny_vs_4000(capsys, fake_cpu, cli):
    # seed 003: a 4000 x 4000 product is "large enough to give the GPU enough independent work";
    # "with very small matrices, the overhead of launching work on the GPU and moving data to VRAM
    # can outweigh any benefit".
    rc, out, _ = cli("flops", "matmul", "1x3", "3x2", "--gpu", "h100", "--json")
    d = json.loads(out)
    gpu, cpu = d["times"]
    assert cpu["device"] == "Test CPU" and gpu["device"] == "H100-SXM-80GB"
    assert cpu["total_s"] < gpu["total_s"]
    assert d["verdict"].startswith("No GPU needed")
    rc, out, _ = cli("flops", "matmul", "4000x4000", "4000x4000", "--gpu", "h100",
                     "--json")
    d = json.loads(out)
    gpu, cpu = d["times"]
    # fp32 (torch.randn): 2 x 4000^3 FLOPs at 80% of H100's 66.9 TFLOP/s fp32; the CPU at 80% of
    # its 192 GFLOP/s estimate; three 64 MB copies over PCIe 5.0 x16 at 80%
    assert gpu["compute_s"] == pytest.approx(2 * 4000**3 / (66.9e12 * 0.8), rel=0.01)
    assert cpu["compute_s"] == pytest.approx(2 * 4000**3 / (_CPU.peak_fp32_flops * 0.8))
    assert gpu["transfer_s"] == pytest.approx(3 * 4000**2 * 4 / (63.0e9 * 0.8), rel=0.01)
    assert gpu["total_s"] < cpu["total_s"] / 100
    assert "faster than this CPU" in d["verdict"]


def test_flops_model_per_layer_and_total(capsys, cli):
    # Llama-2-7B: forward = 2 x tokens x (weights multiplied: every linear tensor) + the s^2 term
    # 4 x B x s^2 x (32 heads x 128) per layer x 32 layers.
    from gpuplan.models import load_model

    m = load_model("llama-2-7b")
    n = sum(t.total for t in m.tensors if t.linear)
    rc, out, _ = cli("flops", "model", "llama-2-7b", "--seq", "4096", "--batch", "2",
                     "--json")
    d = json.loads(out)
    assert rc == 0 and d["tokens"] == 8192 and d["matmul_params"] == n
    assert d["forward_flops"] == 2 * 8192 * n + 4 * 2 * 4096**2 * 4096 * 32
    assert d["backward_flops"] == 2 * d["forward_flops"]
    (layer,) = d["layers"]
    assert layer["count"] == 32 and layer["by_op"]["attn.core"] == 4 * 2 * 4096**2 * 4096
    rc, out, _ = cli("flops", "model", "llama-2-7b")
    assert rc == 0 and "one dense layer (x32)" in out
    rc, out, err = cli("flops", "model", "llama-2-7b", "--seq", "0")
    assert rc == 2 and "--seq '0'" in err
