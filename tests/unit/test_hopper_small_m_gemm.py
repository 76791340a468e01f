"""benchmarks/published/hopper_small_m_gemm.json (issue 31, the decode step at 2-128 rows): the
published H100 GEMM times at 1-256 rows, read by benchmarks/trtllm_load_breakdown.py's
``gemm_rows``. Each figure is worked by hand from the pull request's printed TFLOP/s, and the
speed model's time for the same product from its two shares (``gemv_bw_16bit`` 0.685 of the
weights, ``memory_default`` 0.85 of all bytes) and H100-SXM-80GB's 3.35 TB/s."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gpuplan.hardware import get_gpu

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
DATA = BENCH / "published" / "hopper_small_m_gemm.json"
H100_BW, GEMV, STREAM = 3.35e12, 0.685, 0.85


@pytest.fixture(scope="module")
def rows():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("trtllm_load_breakdown_g", BENCH /
                                                  "trtllm_load_breakdown.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.gemm_rows()


def _row(rows, source, kernel, n, m):
    return next(r for r in rows if (r["source"], r["kernel"], r["n"], r["m"]) ==
                (source, kernel, n, m))


def test_every_row_names_a_recorded_source_on_a_catalog_gpu():
    data = json.loads(DATA.read_text())
    for r in data["rows"]:
        src = data["sources"][r["source"]]
        assert src["url"].startswith("https://github.com/") and src["date"]
        assert get_gpu(src["gpu"]).name == "H100-SXM-80GB"
        assert ("tflops" in r) != ("us" in r)  # one published figure per row, as printed


def test_time_from_the_printed_rate(rows):
    # vLLM #49363, N=12288 K=5376: 2 x 1 x 12288 x 5376 = 132,120,576 FLOP at 2.870333 TFLOP/s
    # = 46.03 us; at 16 rows 2,113,929,216 FLOP at 46.541434 TFLOP/s = 45.42 us
    one = _row(rows, "vllm-49363", "torch-bf16", 12288, 1)
    sixteen = _row(rows, "vllm-49363", "torch-bf16", 12288, 16)
    assert one["meas_us"] == pytest.approx(46.029, abs=1e-3)
    assert sixteen["meas_us"] == pytest.approx(45.421, abs=1e-3)
    assert sixteen["rise"] == pytest.approx(45.421 / 46.029, rel=1e-4)
    # its one-row share: 132.12 MB of bf16 weights in 46.03 us = 2.870 TB/s = 0.857 of 3.35
    assert one["share"] == pytest.approx(0.8568, abs=1e-4)
    # DeepGEMM's rows are printed in us: the ratio is theirs directly, 69.4 / 70.8
    assert _row(rows, "vllm-13917", "deepgemm-fp8-block", 7168, 64)["rise"] == \
        pytest.approx(69.4 / 70.8)


def test_the_bf16_gemm_holds_its_one_row_time_to_16_rows(rows):
    # the claim reading 2 is ruled out on: 0.987 (45.42 / 46.03), 1.017 (153.09 / 150.53) and
    # 0.987 (9.77 / 9.90) on the three shapes
    at16 = [r["rise"] for r in rows if r["dtype"] == "bf16" and r["m"] == 16]
    assert len(at16) == 3 and 0.98 < min(at16) and max(at16) < 1.02


def test_the_model_at_the_same_products(rows):
    # weight-bound at every row here: 132.12 MB / (3.35e12 x 0.685) = 57.58 us, the same at 1 and
    # 128 rows (128 x (12288 + 5376) x 2 B = 4.5 MB more bytes, under the 0.85 share's slack)
    for m in (1, 16, 64, 128):
        r = _row(rows, "vllm-49363", "torch-bf16", 12288, m)
        total = 2 * (12288 * 5376 + m * (12288 + 5376))
        want = max(12288 * 5376 * 2 / (H100_BW * GEMV), total / (H100_BW * STREAM))
        assert r["model_us"] == pytest.approx(want * 1e6, rel=1e-9)
        assert r["model_rise"] == pytest.approx(1.0)
    # longer than the kernel at every bf16 row of 2-64 rows; at 128 rows 13.19 us vs 14.06 us on
    # the 30 MB shape (2112 x 7168 x 2 B / (3.35e12 x 0.685) = 13.19 us), the one row short
    short = [(r["n"], r["m"]) for r in rows if r["dtype"] == "bf16" and r["m"] <= 128
             and r["model_us"] < r["meas_us"]]
    assert short == [(2112, 128)]
    assert _row(rows, "vllm-23280", "torch-bf16", 2112, 128)["model_us"] == \
        pytest.approx(2112 * 7168 * 2 / (H100_BW * GEMV) * 1e6, rel=1e-9)
