"""The runtime model (eager / torch.compile / CUDA graphs) and the one efficiency table."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import (
    CONSTANTS, DEFAULT_RUNTIME, attention_fraction, constant, gemm_wave_efficiency,
    resolve_runtime,
)
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

A100 = get_gpu("A100-SXM-80GB")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "speed.md"


@pytest.fixture(autouse=True)
def _no_bench(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))


def test_every_constant_is_sourced_and_documented():
    text = DOCS.read_text()
    for name, c in CONSTANTS.items():
        assert c.source and c.unit and c.value > 0, name
        assert f"`{name}`" in text, f"docs/speed.md does not list {name}"


def test_runtime_is_validated_and_auto_is_stated():
    with pytest.raises(InputError, match="runtime 'jit'"):
        Job(model="gpt2", runtime="jit")
    assert resolve_runtime("auto", "train") == DEFAULT_RUNTIME["train"] == "eager"
    assert resolve_runtime("auto", "infer") == "eager"  # transformers' generate: eager by default
    assert resolve_runtime("compile", "infer") == "compile"


def _decode(runtime: str):
    m = load_model("llama-2-7b")
    return estimate_speed(m, A100, Job(model="llama-2-7b", mode="infer", batch=1, seq=5,
                                        runtime=runtime), new_tokens=200, measured=None)


def test_eager_decode_is_dispatch_bound_and_graphs_remove_it():
    eager, comp, graphs = (_decode(r) for r in ("eager", "compile", "cudagraphs"))
    # eager: the host's dispatch (kernels x 34 us forward) sets the pace, not the 13.5 GB of weights
    assert eager.step.host_bound
    host = eager.step.kernels * constant("eager_host_fwd_s")
    assert eager.step_time_s == pytest.approx(host, rel=1e-9)
    # compile fuses the eager chains (fewer kernels) and launches them cheaply: device-bound
    assert comp.step.kernels < eager.step.kernels and not comp.step.host_bound
    # CUDA graphs: one replay per step; only the launch gaps remain on top of the kernels
    g = graphs.step
    assert g.time_s == pytest.approx(g.kernel_time_s + g.kernels * constant("graph_gap_s"))
    assert graphs.tokens_per_s > comp.tokens_per_s > 3 * eager.tokens_per_s


def test_wave_quantization_by_hand():
    # 108 SMs, 128 x 128 tiles: 4096 x 4096 = 1024 tiles = 9.48 waves -> 10 rounds
    assert gemm_wave_efficiency(1, 4096, 4096, 108) == pytest.approx(1024 / 1080)
    # a partial edge tile does full work: 130 rows take two tile rows
    assert gemm_wave_efficiency(1, 130, 128 * 108, 108) == pytest.approx(130 / 256)


def test_attention_fraction_by_generation_direction_and_sequence():
    a = attention_fraction("Ampere", 128, 10**9, backward=False, cap=1.0)
    assert a == pytest.approx(0.73, rel=1e-6)
    assert attention_fraction("Ampere", 128, 10**9, backward=True, cap=1.0) == \
        pytest.approx(0.73 * 0.85, rel=1e-6)
    assert attention_fraction("Ampere", 64, 10**9, backward=False, cap=1.0) < a
    assert attention_fraction("Hopper", 128, 10**9, backward=False, cap=1.0) == \
        pytest.approx(0.35, rel=1e-6)
    # at 256 tokens, half the long-sequence rate; never above the matmul fraction
    assert attention_fraction("Ampere", 128, 256, backward=False, cap=1.0) == pytest.approx(0.365)
    assert attention_fraction("Ampere", 128, 10**9, backward=False, cap=0.5) == 0.5
