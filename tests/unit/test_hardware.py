"""The GPU catalog: invariants over every entry, golden figures from vendor documents, hand-computed
peaks (units x rate per clock x clock) as an oracle for the dense figures, aliases, suggestions."""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
import re
import subprocess
import sys

import pytest

from gpuplan.errors import InputError, UnknownNameError, UnsupportedError
from gpuplan.hardware import (
    DEFAULT_SHORTLIST, DTYPES, GPU, all_gpus, get_gpu, gpu_aliases, gpu_from_device_name,
    pcie_bandwidth, resolve_gpu,
)
import gpuplan.hardware as hardware

REQUIRED = [
    "H200-SXM-141GB", "H100-SXM-80GB", "H100-PCIe-80GB", "A100-SXM-40GB", "A100-SXM-80GB",
    "A100-PCIe-80GB", "L40S", "L4", "A10", "A10G", "T4", "V100-SXM2-16GB", "V100-SXM2-32GB",
    "RTX-4090", "RTX-3090", "MI300X",
]
GPUS = all_gpus()
IDS = [g.name for g in GPUS]


def test_required_skus_present_by_exact_name():
    names = {g.name for g in GPUS}
    assert set(REQUIRED) <= names
    assert set(DEFAULT_SHORTLIST) <= names
    assert len(names) == len(GPUS)


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_every_number_is_positive_and_finite(gpu: GPU):
    assert isinstance(gpu.memory_bytes, int) and gpu.memory_bytes > 0
    for v in (gpu.memory_bandwidth, gpu.sm_count, *gpu.peak_flops.values()):
        assert v is not None and math.isfinite(v) and v > 0
    # Null where no source gives the number (Apple: threads per core, host link, power; an MI250 GCD:
    # its share of the module's power), and then the notes say so; never zero, never negative.
    for v in (gpu.max_threads_per_sm, gpu.pcie_lanes, gpu.pcie_bandwidth, gpu.tdp_watts):
        assert v is None or (math.isfinite(v) and v > 0)
    if gpu.vendor != "Apple":
        assert gpu.max_threads_per_sm and gpu.pcie_bandwidth
    if gpu.tdp_watts is None:
        assert "tdp_watts null" in gpu.notes or "board power are null" in gpu.notes
    assert set(gpu.peak_flops) <= set(DTYPES)
    # Every GPU with a vendor FP32 figure records it; Apple publishes no peaks for these chips.
    assert ("fp32" in gpu.peak_flops) == (gpu.vendor != "Apple")
    assert (gpu.interconnect is None) == (gpu.interconnect_bandwidth is None)
    if gpu.interconnect_bandwidth is not None:
        assert math.isfinite(gpu.interconnect_bandwidth) and gpu.interconnect_bandwidth > 0
    assert gpu.sources and all(u.startswith("https://") for u in gpu.sources)
    assert gpu.source == " ; ".join(gpu.sources)
    assert gpu.notes
    assert gpu.extra.get("memory_record")


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_reported_memory_is_a_little_under_the_label(gpu: GPU):
    # HBM/GDDR labels ("80 GB") are binary capacities (80 GiB of DRAM); the device reports that minus
    # what the driver reserves, so the total lies within 10% under the label read as GiB.
    label_gb = float(re.match(r"(\d+(?:\.\d+)?) GB ", gpu.memory_label).group(1))
    assert 0.90 * label_gb * 2**30 <= gpu.memory_bytes <= label_gb * 2**30


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_dense_is_half_of_the_published_sparse_figure(gpu: GPU):
    sparse = gpu.extra.get("sparse_tflops", {})
    # The L40S sheet prints BF16/FP16 362.05 dense beside 733* sparse (366.5 dense): its dense figure was
    # computed at the L40's 2.49 GHz (142 SMs x 1024 FLOP/clk x 2.49 GHz = 362.05). We keep the printed,
    # lower value; everywhere else dense is half, to the sheets' rounding to 3-4 digits (the GA102
    # whitepaper prints TF32 35.6 dense beside 71 sparse).
    low = 0.013 if gpu.name == "L40S" else 0.005
    for dtype, s in sparse.items():
        dense = gpu.peak(dtype) / 1e12
        assert s / 2 * (1 - low) <= dense <= s / 2 * (1 + 0.005), (dtype, dense, s)


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_bf16_equals_fp16_where_both_exist(gpu: GPU):
    if gpu.supports("bf16") and gpu.supports("fp16"):
        assert gpu.peak("bf16") == gpu.peak("fp16")


@pytest.mark.parametrize("gpu", [g for g in GPUS if g.architecture in ("Hopper", "Ada Lovelace", "CDNA 3")],
                         ids=lambda g: g.name)
def test_fp8_is_twice_bf16_on_hopper_ada_cdna3(gpu: GPU):
    # To the sheets' rounding (L4: 242.5 / 121 = 2.004); the L40S note above: 733 / 362.05 = 2.025.
    tol = 0.025 if gpu.name == "L40S" else 0.005
    assert gpu.peak("fp8") / gpu.peak("bf16") == pytest.approx(2.0, rel=tol)


@pytest.mark.parametrize("gpu", [g for g in GPUS if g.architecture in ("Ampere", "Turing", "Volta")],
                         ids=lambda g: g.name)
def test_no_fp8_before_hopper_and_ada(gpu: GPU):
    assert not gpu.supports("fp8")


@pytest.mark.parametrize("name", ["T4", "V100-SXM2-16GB", "V100-SXM2-32GB"])
def test_no_bf16_or_tf32_on_turing_and_volta(name):
    gpu = get_gpu(name)
    assert not gpu.supports("bf16") and not gpu.supports("tf32")
    assert gpu.supports("fp16")


def test_t4_bf16_raises_unsupported_and_offers_fp16():
    with pytest.raises(UnsupportedError) as e:
        get_gpu("T4").peak("bf16")
    msg = str(e.value)
    assert "T4" in msg and "bf16" in msg and "fp16" in msg and "\n" not in msg
    assert isinstance(e.value, InputError)


def test_unknown_dtype_is_an_input_error():
    with pytest.raises(InputError, match="bf61"):
        get_gpu("H100-SXM-80GB").peak("bf61")


# --- golden figures from the vendor documents and the seed ---------------------------------------

def test_h100_sxm_anchors():
    h100 = get_gpu("H100-SXM-80GB")
    assert h100.resident_threads == 132 * 2048 == 270_336  # the seed's "a few hundred thousand"
    assert h100.peak("bf16") == pytest.approx(989.4e12)
    assert h100.peak("fp8") == pytest.approx(1978.9e12)
    assert h100.memory_bandwidth == pytest.approx(3.35e12)
    assert h100.ridge_point("bf16") == pytest.approx(989.4e12 / 3.35e12)
    assert h100.interconnect_bandwidth == pytest.approx(900e9)


def test_h200_is_h100_compute_with_more_faster_memory():
    h100, h200 = get_gpu("H100-SXM-80GB"), get_gpu("H200-SXM-141GB")
    assert dict(h200.peak_flops) == dict(h100.peak_flops)
    assert (h200.sm_count, h200.max_threads_per_sm) == (h100.sm_count, h100.max_threads_per_sm)
    assert h200.memory_bandwidth == pytest.approx(4.8e12)
    assert h200.memory_label.startswith("141 GB")


def test_a10g_is_not_the_a10():
    a10, a10g = get_gpu("A10"), get_gpu("A10G")
    assert (a10.sm_count, a10g.sm_count) == (72, 80)
    assert a10.peak("bf16") == pytest.approx(125e12)
    # A10G: GeForce-style half-rate FP32-accumulate tensor math; a public torch benchmark measured
    # 69.47 TFLOP/s bf16, which no peak may be below and which a 140 TFLOP/s part would not stop at.
    assert 69.47e12 <= a10g.peak("bf16") < 1.02 * 69.47e12
    assert a10g.peak("bf16") < a10.peak("bf16") and a10g.peak("fp32") > a10.peak("fp32")


def test_geforce_records_the_fp32_accumulate_rate():
    # Ada whitepaper, RTX 4090: FP16 tensor 330.3 with FP16 accumulate, 165.2 with FP32 accumulate.
    assert get_gpu("RTX-4090").peak("fp16") == pytest.approx(330.3e12 / 2, rel=1e-3)
    # GA102 whitepaper, RTX 3090: 142 with FP16 accumulate, 71 with FP32 accumulate.
    assert get_gpu("RTX-3090").peak("bf16") == pytest.approx(142e12 / 2)


# Hand calculation: units x dense FLOP per clock per unit x boost clock. Clocks and units from the
# whitepapers / deviceQuery; FLOP per clock per SM from the tensor-core widths (an FMA is 2 FLOP).
ORACLE = [
    # (gpu, dtype, SMs, FLOP/clk/SM, GHz)
    ("H100-SXM-80GB", "bf16", 132, 4 * 512 * 2, 1.830),   # 4 TCs x 512 dense FMA/clk
    ("H100-SXM-80GB", "fp32", 132, 128 * 2, 1.980),
    ("A100-SXM-80GB", "bf16", 108, 4 * 256 * 2, 1.410),
    ("A100-SXM-80GB", "fp32", 108, 64 * 2, 1.410),
    ("A10", "bf16", 72, 4 * 128 * 2, 1.695),
    ("A10G", "bf16", 80, 4 * 64 * 2, 1.710),              # half-rate FP32 accumulate
    ("A10G", "fp32", 80, 128 * 2, 1.710),
    ("L4", "bf16", 58, 4 * 128 * 2, 2.040),
    ("L4", "fp32", 58, 128 * 2, 2.040),
    ("RTX-4090", "bf16", 128, 4 * 64 * 2, 2.520),         # half-rate FP32 accumulate
    ("RTX-4090", "fp32", 128, 128 * 2, 2.520),
    ("RTX-3090", "fp32", 82, 128 * 2, 1.695),
    ("T4", "fp16", 40, 8 * 64 * 2, 1.590),                # 8 Turing TCs x 64 FMA/clk
    ("T4", "fp32", 40, 64 * 2, 1.590),
    ("V100-SXM2-32GB", "fp16", 80, 8 * 64 * 2, 1.530),
    ("V100-SXM2-32GB", "fp32", 80, 64 * 2, 1.530),
    ("MI300X", "bf16", 304, 2048, 2.100),
    ("MI300X", "fp8", 304, 4096, 2.100),
    ("MI300X", "fp32", 304, 256, 2.100),
    # Added SKUs: whitepaper / datasheet clocks and SM counts (the entries' notes say which).
    ("RTX-5090", "fp32", 170, 128 * 2, 2.407),            # RTX Blackwell whitepaper prints 104.8
    ("RTX-4080", "bf16", 76, 4 * 64 * 2, 2.505),          # Ada whitepaper prints 97.5 (FP32 accumulate)
    ("RTX-4080", "fp32", 76, 128 * 2, 2.505),             # ... and 48.7
    ("RTX-A6000", "bf16", 84, 4 * 128 * 2, 1.800),        # datasheet 309.7 sparse / 2
    ("RTX-6000-Ada", "fp32", 142, 128 * 2, 2.505),        # datasheet 91.1
    ("RTX-3060-12GB", "fp32", 28, 128 * 2, 1.777),
    ("MI325X", "bf16", 304, 2048, 2.100),
    ("MI250X-GCD", "bf16", 110, 1024, 1.700),             # half the module's 383
]


@pytest.mark.parametrize("name,dtype,units,per_clock,ghz", ORACLE, ids=[f"{o[0]}-{o[1]}" for o in ORACLE])
def test_dense_peak_matches_units_times_rate_times_clock(name, dtype, units, per_clock, ghz):
    gpu = get_gpu(name)
    assert gpu.sm_count == units
    assert gpu.peak(dtype) == pytest.approx(units * per_clock * ghz * 1e9, rel=0.006)


# CUDA programming guide, "Maximum number of resident threads per SM" by compute capability; AMD CDNA3:
# rocminfo reports 32 wavefronts x 64 lanes = 2048 work-items per CU.
# CDNA2 (gfx90a) likewise 32 wavefronts x 64. Apple publishes no threads per GPU core: None.
THREADS_PER_SM = {"7.0": 2048, "7.5": 1024, "8.0": 2048, "8.6": 1536, "8.9": 1536, "9.0": 2048,
                  "10.0": 2048, "10.3": 2048, "12.0": 1536, "gfx90a": 32 * 64, "gfx942": 32 * 64,
                  "gfx950": 32 * 64, None: None}


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_threads_per_sm_follow_the_compute_capability(gpu: GPU):
    assert gpu.max_threads_per_sm == THREADS_PER_SM[gpu.compute_capability]


def test_device_reported_memory_records():
    # Exact totals from the public records quoted in each entry (deviceQuery bytes, torch MiB x 2^20).
    assert get_gpu("H100-SXM-80GB").memory_bytes == 85_028_896_768
    assert get_gpu("A100-SXM-40GB").memory_bytes == 42_298_834_944
    assert get_gpu("MI300X").memory_bytes == 196_592 * 2**20
    assert get_gpu("A10G").memory_bytes == 22_587 * 2**20
    for g in GPUS:
        record = str(g.extra["memory_record"])
        assert str(g.memory_bytes) in record or f"{g.memory_bytes // 2**20}MB" in record


# --- PCIe ------------------------------------------------------------------------------------------

def test_pcie_bandwidth_from_signalling_rate_and_line_code():
    assert pcie_bandwidth(4, 16) == pytest.approx(16e9 * 128 / 130 * 16 / 8)  # 31.5 GB/s
    assert pcie_bandwidth(3, 16) == pytest.approx(8e9 * 128 / 130 * 16 / 8)
    assert pcie_bandwidth(5, 16) == pytest.approx(32e9 * 128 / 130 * 16 / 8)
    assert pcie_bandwidth(4, 8) == pytest.approx(pcie_bandwidth(4, 16) / 2)
    assert get_gpu("T4").pcie_bandwidth == pytest.approx(pcie_bandwidth(3, 16))
    assert get_gpu("H100-SXM-80GB").pcie_bandwidth == pytest.approx(pcie_bandwidth(5, 16))
    with pytest.raises(InputError, match="generation"):
        pcie_bandwidth(7, 16)
    with pytest.raises(InputError, match="lanes"):
        pcie_bandwidth(4, 0)


# --- names, aliases, suggestions -----------------------------------------------------------------

def test_documented_aliases():
    assert get_gpu("h100").name == "H100-SXM-80GB"
    assert get_gpu("a100").name == "A100-SXM-80GB"
    assert get_gpu("4090").name == "RTX-4090"
    assert get_gpu("h200").name == "H200-SXM-141GB"
    assert get_gpu("v100").name == "V100-SXM2-32GB"
    gpu, note = resolve_gpu("h100")
    assert note == "h100 is an alias of H100-SXM-80GB"


def test_every_alias_names_exactly_one_sku_and_says_so():
    aliases = gpu_aliases()
    owners: dict[str, list[str]] = {}
    for g in GPUS:
        for a in g.aliases:
            owners.setdefault(a, []).append(g.name)
    assert owners and all(len(v) == 1 for v in owners.values())
    sku_keys = {g.name.lower() for g in GPUS}
    for alias, sku in aliases.items():
        assert alias == alias.lower() and alias not in sku_keys
        gpu, note = resolve_gpu(alias.upper())
        assert gpu.name == sku == owners[alias][0]
        assert note == f"{alias.upper()} is an alias of {sku}"


def test_sku_names_are_case_insensitive_and_carry_no_note():
    gpu, note = resolve_gpu("h100-sxm-80gb")
    assert gpu.name == "H100-SXM-80GB" and note is None
    assert resolve_gpu("  L40S ")[0].name == "L40S"


@pytest.mark.parametrize("query", ["h10", "H100-SXM", "H100 SXM", "h100-sxm"])
def test_unknown_name_suggests_the_closest_skus(query):
    with pytest.raises(UnknownNameError) as e:
        get_gpu(query)
    err = e.value
    assert isinstance(err, InputError)
    assert "H100-SXM-80GB" in err.suggestions
    assert len(err.suggestions) <= 3 and all(s in IDS for s in err.suggestions)
    msg = str(err)
    assert "\n" not in msg and repr(query) in msg and "H100-SXM-80GB" in msg


def test_unknown_name_with_nothing_close_still_fails_cleanly():
    with pytest.raises(UnknownNameError) as e:
        get_gpu("qqqqqqqq")
    assert e.value.suggestions == []
    assert "qqqqqqqq" in str(e.value)


@pytest.mark.parametrize("query", ["l40-48gb", "rtx 4090", "a100_80gb", "mi250x", "rtx 5090"])
def test_near_misses_are_errors_not_substitutes(query):
    with pytest.raises(UnknownNameError):
        get_gpu(query)


def test_l40_is_its_own_sku_not_the_l40s():
    assert get_gpu("l40").name == "L40" and get_gpu("L40S").name == "L40S"
    assert get_gpu("l40").peak("bf16") < get_gpu("L40S").peak("bf16")


@pytest.mark.parametrize("bad", ["", "   ", None, 7])
def test_empty_or_non_string_name(bad):
    with pytest.raises(InputError):
        resolve_gpu(bad)


def test_gpu_from_device_name_is_exact_match_only():
    assert gpu_from_device_name("NVIDIA H100 80GB HBM3").name == "H100-SXM-80GB"
    assert gpu_from_device_name("Tesla T4").name == "T4"
    assert gpu_from_device_name("NVIDIA A10G").name == "A10G"
    assert gpu_from_device_name("NVIDIA A10").name == "A10"
    assert gpu_from_device_name("AMD Instinct MI300X").name == "MI300X"
    for near in ["NVIDIA H100", "nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3 ", "H100", "T4",
                 "NVIDIA A10G-24GB", "NVIDIA GeForce RTX 4090 D", ""]:
        assert gpu_from_device_name(near) is None, near
    # Shared by the H200 SXM and the H200 NVL, so deliberately not matched (see the entry's notes).
    assert gpu_from_device_name("NVIDIA H200") is None


def test_each_device_name_belongs_to_one_sku():
    seen: dict[str, str] = {}
    for g in GPUS:
        for dn in g.device_names:
            assert dn not in seen, (dn, seen.get(dn), g.name)
            seen[dn] = g.name
    assert len(seen) >= 16


# --- the loader validates the data ----------------------------------------------------------------

def _base_record() -> dict:
    raw = json.loads((Path(hardware.__file__).parent / "gpus.json").read_text("utf-8"))
    return copy.deepcopy(next(r for r in raw["gpus"] if r["name"] == "H100-SXM-80GB"))


@pytest.mark.parametrize("mutate,match", [
    (lambda r: r["dense_tflops"].update(bf61=1.0), "unknown dtype"),
    (lambda r: r["dense_tflops"].update(bf16=0), "positive"),
    (lambda r: r["dense_tflops"].update(bf16=float("nan")), "positive"),
    (lambda r: r["dense_tflops"].update(bf16="989"), "not a number"),
    (lambda r: r.update(memory_bandwidth_GBps=-1), "positive"),
    (lambda r: r.update(memory_bytes=80.5), "positive integer"),
    (lambda r: r.update(interconnect_GBps=None), "both"),
    (lambda r: r.update(source=["see datasheet"]), "https"),
    (lambda r: r.update(aliases=["H100"]), "lower-case"),
])
def test_loader_rejects_bad_records(mutate, match):
    rec = _base_record()
    mutate(rec)
    with pytest.raises(ValueError, match=match):
        hardware._from_record(rec)


def test_as_dict_is_si_units_and_json_serializable():
    h100 = get_gpu("H100-SXM-80GB")
    d = json.loads(json.dumps(h100.as_dict()))
    assert d["memory_bytes"] == h100.memory_bytes
    assert d["memory_bandwidth_bytes_per_s"] == pytest.approx(3350e9)
    assert d["peak_flops"]["bf16"] == pytest.approx(989.4e12)
    assert d["pcie_bandwidth_bytes_per_s"] == pytest.approx(32e9 * 128 / 130 * 16 / 8)
    assert d["interconnect_bytes_per_s"] == pytest.approx(900e9)
    assert d["resident_threads"] == 270_336
    assert d["source"] == list(h100.sources)
    t4 = get_gpu("T4").as_dict()
    assert "bf16" not in t4["peak_flops"] and t4["interconnect"] is None


def test_importing_the_catalog_pulls_in_nothing_heavy():
    code = ("import sys, gpuplan.hardware as h; h.all_gpus(); "
            "bad = [m for m in ('torch', 'numpy', 'rich', 'transformers') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": hardware.__file__.rsplit("/gpuplan/", 1)[0]})
    assert r.returncode == 0, r.stdout + r.stderr


def test_docs_alias_and_source_tables_match_the_data():
    import pathlib

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "gpus.md").read_text("utf-8")
    documented = dict(re.findall(r"^\| `([^`]+)` \| (\S+) \|$", doc, flags=re.M))
    assert documented == gpu_aliases()
    for g in GPUS:
        row = next(line for line in doc.splitlines() if line.startswith(f"| {g.name} |"))
        assert all(f"<{u}>" in row for u in g.sources), g.name


# --- the added SKUs against the figures printed in the documents they cite --------------------------

def test_added_skus_match_their_datasheets():
    # 51 SKUs; the default shortlist of `gpuplan fit` is unchanged.
    assert len(GPUS) >= 40
    assert DEFAULT_SHORTLIST == ("H200-SXM-141GB", "H100-SXM-80GB", "A100-SXM-80GB", "A100-SXM-40GB",
                                 "L40S", "RTX-4090", "T4")
    rtx4090 = get_gpu("RTX-4090")  # Ada whitepaper: 24 GB GDDR6X, 1008 GB/s
    assert rtx4090.memory_label.startswith("24 GB") and rtx4090.memory_bandwidth == 1008e9
    rtx5090 = get_gpu("5090")  # RTX Blackwell whitepaper: 32 GB GDDR7, 28 Gbps x 512 bit, 104.8 FP32
    assert rtx5090.name == "RTX-5090" and rtx5090.memory_label.startswith("32 GB")
    assert rtx5090.memory_bandwidth == 28e9 * 512 / 8 == 1792e9
    assert rtx5090.peak("fp32") == pytest.approx(104.8e12)
    assert rtx5090.peak("bf16") == pytest.approx(419e12 / 2, rel=1e-3)  # half of the FP16-accumulate 419
    assert rtx5090.peak("bf16") > 182.68e12  # a public cuBLAS bf16 measurement may not exceed the peak
    nvl = get_gpu("h100-nvl")  # H100 datasheet NVL column: 3.9 TB/s, BF16 1,671* sparse, 94 GB
    assert nvl.memory_bandwidth == 3.9e12 and nvl.peak("bf16") == pytest.approx(1671e12 / 2, rel=1e-3)
    b200 = get_gpu("b200")  # DGX B200: 1,440 GB and 64 TB/s over 8 GPUs; FP8 9 PF sparse
    assert b200.memory_bandwidth == 64e12 / 8 and b200.memory_label.startswith(f"{1440 // 8} GB")
    assert b200.peak("fp8") == pytest.approx(9000e12 / 2)
    a6000 = get_gpu("a6000")  # datasheet: 48 GB, 768 GB/s, FP32 38.7, tensor 309.7 sparse
    assert a6000.memory_bandwidth == 768e9 and a6000.peak("fp32") == pytest.approx(38.7e12)
    assert get_gpu("RTX-6000-Ada").memory_bandwidth == 960e9
    assert get_gpu("L40").memory_bandwidth == 864e9 and get_gpu("L40").peak("fp8") == pytest.approx(724e12 / 2)
    mi325 = get_gpu("MI325X")  # AMD data sheet: 256 GB HBM3E, 6 TB/s, the MI300X's compute
    assert mi325.memory_bandwidth == 6e12 and dict(mi325.peak_flops) == dict(get_gpu("MI300X").peak_flops)
    gcd = get_gpu("MI250X-GCD")  # AMD MI250X module: 128 GB, 3.2768 TB/s, 383 BF16; one GCD is half
    assert gcd.memory_bytes == 128 * 2**30 // 2 and gcd.memory_bandwidth == 3276.8e9 / 2
    assert gcd.peak("bf16") == pytest.approx(383e12 / 2)


def test_apple_silicon_is_unified_memory_for_inference_with_no_guessed_peak():
    m2 = get_gpu("M2-Ultra-192GB")  # Apple newsroom: 192 GB unified memory, 800 GB/s, 76-core GPU
    assert m2.memory_kind == "unified" and m2.training is False
    assert m2.memory_bytes == 192 * 2**30 and m2.memory_bandwidth == 800e9 and m2.sm_count == 76
    assert dict(m2.peak_flops) == {} and m2.resident_threads is None and m2.pcie_bandwidth is None
    with pytest.raises(UnsupportedError, match="no bf16 peak"):
        m2.peak("bf16")
    assert get_gpu("M4-Max-128GB").memory_bandwidth == 546e9
    d = json.loads(json.dumps(m2.as_dict()))
    assert d["training"] is False and d["memory_kind"] == "unified" and d["pcie_bandwidth_bytes_per_s"] is None
    for g in GPUS:
        assert (g.memory_kind == "unified") == (g.vendor == "Apple") == (not g.training)


def test_loader_rejects_a_bad_training_flag_or_memory_kind():
    rec = _base_record()
    rec["training"] = "no"
    with pytest.raises(ValueError, match="training"):
        hardware._from_record(rec)
    rec = _base_record()
    rec["memory_kind"] = "shared"
    with pytest.raises(ValueError, match="memory_kind"):
        hardware._from_record(rec)
