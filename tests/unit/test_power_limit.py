"""A GPU under a power limit below its TDP (Job.power_limit_w): the tensor clock read between the
SKU's rating at its TDP and its same-die sibling's (compute/device.py POWER_SIBLINGS)."""

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import at_power_limit, device_from_gpu, power_clock_fraction
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model


def test_fraction_between_the_two_vendor_ratings():
    # H100 datasheet: SXM 989.4 TFLOP/s BF16 dense at 700 W, NVL 835.5 at 400 W (same 132 SMs)
    g = get_gpu("H100-SXM-96GB")
    f_nvl = 835.5 / 989.4
    assert power_clock_fraction(g, 400)[0] == pytest.approx(f_nvl, rel=1e-3)
    # 500 W: a third of the way from 400 to 700 W
    assert power_clock_fraction(g, 500)[0] == pytest.approx(f_nvl + (1 - f_nvl) / 3, rel=1e-3)
    assert power_clock_fraction(g, 700) == (1.0, "")
    assert power_clock_fraction(g, None) == (1.0, "")
    # below the sibling's rating: the sibling's clock, an upper bound, said so
    f, note = power_clock_fraction(g, 300)
    assert f == pytest.approx(f_nvl, rel=1e-3) and "upper bound" in note


def test_no_sibling_keeps_the_peaks_and_says_so():
    g = get_gpu("A100-SXM-80GB")  # 400 W TDP; no sibling listed
    f, note = power_clock_fraction(g, 330)
    assert f == 1.0 and "no source" in note


def test_device_scales_compute_not_memory():
    g = get_gpu("H100-SXM-96GB")
    d = device_from_gpu(g)
    capped, note = at_power_limit(d, g, 500)
    f = power_clock_fraction(g, 500)[0]
    assert capped.peak("bf16") == pytest.approx(d.peak("bf16") * f)
    assert capped.vector_flops == pytest.approx(d.vector_flops * f)
    assert capped.memory_bandwidth == d.memory_bandwidth and "500 W" in note


def test_a_compute_bound_step_slows_by_at_most_the_clock():
    m = load_model("llama-3.1-8b")
    g = get_gpu("H100-SXM-96GB")
    job = Job(model="llama-3.1-8b", mode="train", batch=2, seq=8192, checkpointing="selective")
    full = estimate_speed(m, g, job, measured=None)
    capped = estimate_speed(m, g, job.with_(power_limit_w=500.0), measured=None)
    f = power_clock_fraction(g, 500)[0]
    ratio = full.step_time_s / capped.step_time_s
    # only the compute-bound kernels slow: between the clock share and no change
    assert f - 1e-9 <= ratio < 1.0
    assert any("power limit 500 W" in n for n in capped.notes)


def test_bad_limit_is_one_line():
    with pytest.raises(InputError, match="power_limit_w"):
        Job(model="llama-3.1-8b", power_limit_w=0)


def test_measured_curve_reads_the_published_iteration_times():
    # Perseus SOSP'24 artifact (ml-energy/zeus @38cb3f9, sosp24_data/zeus/csv/A100/
    # zeus_global.csv, gpt3-xl on 4x A100-80G PCIe): seconds per iteration at each power limit
    g = get_gpu("A100-PCIe-80GB")  # 300 W TDP
    t300, t250, t225, t175 = 60.095173279444374, 65.02246014277141, 73.32878303527832, 106.298974831899
    assert power_clock_fraction(g, 300) == (1.0, "")
    f, note = power_clock_fraction(g, 250)
    assert f == pytest.approx(t300 / t250)  # 0.924: 7.6% slower at 5/6 of the TDP
    assert f == pytest.approx(0.9242, abs=1e-4) and "measured" in note
    # between measured limits: the iteration time read linearly in watts
    t_mid = (t250 + t225) / 2
    assert power_clock_fraction(g, 237.5)[0] == pytest.approx(t300 / t_mid)
    # below the lowest limit measured: that limit's share, said to be an upper bound
    f, note = power_clock_fraction(g, 150)
    assert f == pytest.approx(t300 / t175) and "upper bound" in note


def test_measured_curve_scales_a_capped_device():
    g = get_gpu("A100-PCIe-80GB")
    d = device_from_gpu(g)
    capped, note = at_power_limit(d, g, 200)
    assert capped.peak("bf16") == pytest.approx(d.peak("bf16") * 60.095173279444374 / 87.91865595181783)
    assert capped.memory_bandwidth == d.memory_bandwidth and "200 W" in note


def test_a_sku_without_a_curve_keeps_its_rule():
    # the curve is the PCIe card's alone: the SXM (400 W TDP) keeps its TDP peaks under a cap
    assert power_clock_fraction(get_gpu("A100-SXM-80GB"), 250)[0] == 1.0
    assert power_clock_fraction(get_gpu("A100-PCIe-40GB"), 200)[0] == 1.0
