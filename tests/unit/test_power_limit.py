"""A GPU under a power limit below its TDP (Job.power_limit_w): the tensor clock read between the
SKU's rating at its TDP and its same-die sibling's (compute/device.py POWER_SIBLINGS), or read from
a published measurement against the cap (MEASURED_CLOCK_CURVES, MEASURED_POWER_CURVES)."""

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import (MEASURED_POWER_CURVES, at_power_limit, device_from_gpu,
                                    measured_training_share, power_clock_fraction)
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model


def test_fraction_between_the_two_vendor_ratings():
    # H100 datasheet: SXM 989.4 TFLOP/s BF16 dense at 700 W, NVL 835.5 at 400 W (same 132 SMs);
    # the HBM3 SXM has no measured curve (the HBM2e H100-SXM-96GB has: the tests below)
    g = get_gpu("H100-SXM-80GB")
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


# Ujeniya et al. arXiv:2604.11391v2 Fig. 6b: an H100 94 GiB HBM2e's average SM clock (MHz) at
# caps 700..200 W (ViT-L/16 inference, TF32), as transcribed in connorlagana/flexcompute-microgrid
# @5c8dbb0 src/flexcompute/gpu.py
UJENIYA_MHZ = {700: 1969.0, 600: 1889.0, 500: 1731.0, 400: 1501.0, 300: 1132.0, 200: 625.0}
# Mayr et al. arXiv:2603.16164 Table 4, "Pre-training / H100": LLaMA 3 8B tokens/s at the same caps
MAYR_TOKENS_S = {700: 30271.0, 600: 29250.0, 500: 27705.3, 400: 24853.4, 300: 17982.3,
                 200: 9699.3}


def test_hbm2e_h100_reads_its_measured_sm_clock():
    g = get_gpu("H100-SXM-96GB")  # the HBM2e part (2.4 TB/s) at 700 W TDP
    f, note = power_clock_fraction(g, 500)
    assert f == pytest.approx(1731 / 1969)  # 0.879: below the ratings' line (0.896)
    assert "MEASURED_CLOCK_CURVES" in note and "2604.11391" in note
    # between measured caps: the clock read linearly in watts
    assert power_clock_fraction(g, 450)[0] == pytest.approx((1501 + 1731) / 2 / 1969)
    assert power_clock_fraction(g, 650)[0] == pytest.approx((1889 + 1969) / 2 / 1969)
    assert power_clock_fraction(g, 700) == (1.0, "")
    # below the lowest cap measured: that cap's share, said to be an upper bound
    f, note = power_clock_fraction(g, 150)
    assert f == pytest.approx(625 / 1969) and "upper bound" in note


def test_measured_clock_is_under_the_measured_training_throughput():
    # an end-to-end throughput share bounds the tensor clock's (memory-bound kernels slow less):
    # the two published H100 HBM2e measurements agree with that at every cap both measured
    for watts, mhz in UJENIYA_MHZ.items():
        clock = mhz / UJENIYA_MHZ[700]
        throughput = MAYR_TOKENS_S[watts] / MAYR_TOKENS_S[700]
        assert clock <= throughput, watts
    # the throughput curve on record reads Mayr's ratio (0.915 at 500 W), t(TDP) / t(cap)
    points = dict(MEASURED_POWER_CURVES["H100-SXM-96GB"][1])
    assert points[700.0] / points[500.0] == pytest.approx(27705.3 / 30271.0)
    assert 27705.3 / 30271.0 == pytest.approx(0.9152, abs=1e-4)


def test_measured_training_share_reads_the_published_tokens_per_second():
    g = get_gpu("H100-SXM-96GB")
    f, source = measured_training_share(g, 500)
    assert f == pytest.approx(MAYR_TOKENS_S[500] / MAYR_TOKENS_S[700])  # 0.915
    assert "2603.16164" in source
    # between measured caps the time a token is read linearly in watts
    t550 = (1 / MAYR_TOKENS_S[600] + 1 / MAYR_TOKENS_S[500]) / 2
    assert measured_training_share(g, 550)[0] == pytest.approx(1 / MAYR_TOKENS_S[700] / t550)
    assert measured_training_share(g, 700)[0] == pytest.approx(1.0)
    # outside the measured limits, and on a SKU without a curve: nothing is claimed
    assert measured_training_share(g, 150) is None
    assert measured_training_share(get_gpu("H100-SXM-80GB"), 500) is None


def test_hbm2e_curve_leaves_the_hbm3_part_on_its_rule():
    # the measurement is of the HBM2e part: the 80 GB HBM3 SXM keeps the ratings' line
    f_nvl = 835.5 / 989.4
    f80 = power_clock_fraction(get_gpu("H100-SXM-80GB"), 500)
    assert f80[0] == pytest.approx(f_nvl + (1 - f_nvl) / 3, rel=1e-3) and "POWER_SIBLINGS" in f80[1]
