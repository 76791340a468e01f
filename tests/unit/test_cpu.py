"""hardware/cpu.py: parsing /proc/cpuinfo and the estimated peak, checked by hand arithmetic."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuplan.hardware.cpu import (
    available_memory_bytes, cpu_from_cpuinfo, detect_cpu, total_memory_bytes,
)


def _x86(n_threads, *, model, flags, mhz="2600.000", cores_per_socket=None, smt=1, sockets=1,
         vendor="GenuineIntel"):
    """A /proc/cpuinfo text: ``n_threads`` processors; core ids shared by ``smt`` threads."""
    per_socket = n_threads // sockets
    cores_per_socket = cores_per_socket or per_socket // smt
    blocks = []
    for p in range(n_threads):
        sock = p // per_socket
        core = (p % per_socket) % cores_per_socket
        blocks.append(
            f"processor\t: {p}\nvendor_id\t: {vendor}\ncpu family\t: 6\nmodel name\t: {model}\n"
            f"cpu MHz\t\t: {mhz}\nphysical id\t: {sock}\nsiblings\t: {per_socket}\n"
            f"core id\t\t: {core}\ncpu cores\t: {cores_per_socket}\nflags\t\t: {flags}\n"
        )
    return "\n".join(blocks) + "\n"


AVX512_FLAGS = ("fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512cd "
                "avx512bw avx512vl avx512_bf16 amx_bf16 avx512_fp16 amx_tile amx_int8")


def test_this_kind_of_vm_two_avx512_cores():
    cpu = cpu_from_cpuinfo(_x86(2, model="Intel(R) Xeon(R) Processor", flags=AVX512_FLAGS))
    assert (cpu.physical_cores, cpu.logical_cores, cpu.sockets) == (2, 2, 1)
    assert (cpu.simd, cpu.simd_bits, cpu.fma, cpu.fma_units) == ("avx512", 512, True, 2)
    assert cpu.frequency_hz == 2.6e9 and "cpu MHz" in cpu.frequency_source
    # 2 cores x 2.6e9 Hz x (512/32 = 16 lanes) x 2 FMA units x 2 FLOP per FMA
    assert cpu.peak_fp32_flops == pytest.approx(2 * 2.6e9 * 16 * 2 * 2)  # 332.8 GFLOP/s
    assert cpu.peak_fp64_flops == pytest.approx(2 * 2.6e9 * 8 * 2 * 2)   # 166.4 GFLOP/s
    assert cpu.peak_basis.startswith("estimate:")
    assert cpu.native_matmul_dtypes == ("fp32", "bf16", "fp16")
    assert cpu.peak("fp32") == cpu.peak_fp32_flops and cpu.peak("bf16") is None


def test_smt_threads_are_not_counted_as_cores_and_model_name_clock_is_used():
    # Haswell desktop: 4 cores, 8 threads, AVX2 + FMA, "@ 3.40GHz" in the name.
    cpu = cpu_from_cpuinfo(_x86(8, model="Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz",
                                flags="sse sse2 avx fma avx2", smt=2, mhz="800.000"))
    assert (cpu.physical_cores, cpu.logical_cores) == (4, 8)
    assert cpu.frequency_hz == 3.4e9 and "model name" in cpu.frequency_source
    # 4 cores x 3.4e9 x 8 fp32 lanes x 2 FMA units x 2 = 435.2 GFLOP/s; fp64: 4 lanes -> 217.6
    assert cpu.peak_fp32_flops == pytest.approx(435.2e9)
    assert cpu.peak_fp64_flops == pytest.approx(217.6e9)
    assert cpu.native_matmul_dtypes == ("fp32",)


def test_cpufreq_max_beats_the_model_name_and_a_given_clock_beats_both():
    text = _x86(8, model="Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz", flags="avx fma avx2", smt=2)
    assert cpu_from_cpuinfo(text, cpufreq_max_hz=3.9e9).frequency_hz == 3.9e9
    cpu = cpu_from_cpuinfo(text, cpufreq_max_hz=3.9e9, frequency_hz=3.0e9)
    assert cpu.frequency_hz == 3.0e9 and cpu.frequency_source == "given"


def test_sandy_bridge_without_fma_matches_the_rpeak_convention():
    # Xeon E5-2670 (8 cores, 2.6 GHz, AVX without FMA). TOP500 Rpeak counts 8 double-precision
    # FLOP/cycle per Sandy Bridge core (a 4-wide add and a 4-wide multiply each cycle), so
    # 8 cores x 2.6 GHz x 8 = 166.4 GFLOP/s, the peak quoted for this part.
    cpu = cpu_from_cpuinfo(_x86(16, model="Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz",
                                flags="sse sse2 avx", smt=2, mhz="1200.000"))
    assert not cpu.fma and cpu.simd == "avx"
    assert cpu.peak_fp64_flops == pytest.approx(166.4e9)
    assert cpu.peak_fp32_flops == pytest.approx(332.8e9)


def test_two_sockets_count_cores_per_socket():
    cpu = cpu_from_cpuinfo(_x86(8, model="Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz",
                                flags=AVX512_FLAGS, sockets=2))
    assert (cpu.sockets, cpu.physical_cores) == (2, 8)


@pytest.mark.parametrize("model,vendor,units", [
    ("Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz", "GenuineIntel", 1),
    ("Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", "GenuineIntel", 2),
    ("AMD EPYC 9654 96-Core Processor", "AuthenticAMD", 1),
])
def test_fma_units_assumed_per_family(model, vendor, units):
    cpu = cpu_from_cpuinfo(_x86(4, model=model, flags=AVX512_FLAGS, vendor=vendor))
    assert cpu.fma_units == units
    assert cpu_from_cpuinfo(_x86(4, model=model, flags=AVX512_FLAGS, vendor=vendor),
                            fma_units=3).fma_units == 3


ARM = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
    f"atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\n"
    f"CPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n"
    for i in range(4)
)


def test_aarch64_neon_without_a_clock_has_no_estimate():
    cpu = cpu_from_cpuinfo(ARM, machine="aarch64")
    assert cpu.vendor == "Arm" and "0xd0c" in cpu.model_name
    assert (cpu.physical_cores, cpu.simd, cpu.simd_bits, cpu.fma) == (4, "neon", 128, True)
    assert cpu.peak_fp32_flops is None and cpu.peak("fp32") is None
    assert "clock" in cpu.peak_basis and "no estimate" in cpu.peak_basis
    assert cpu.native_matmul_dtypes == ("fp32", "fp16")
    # with a clock: 4 cores x 3.0e9 x 4 fp32 lanes x 2 FMA units x 2 = 192 GFLOP/s
    assert cpu_from_cpuinfo(ARM, machine="aarch64", frequency_hz=3.0e9).peak_fp32_flops == \
        pytest.approx(192e9)


def test_empty_cpuinfo_falls_back_without_guessing():
    cpu = cpu_from_cpuinfo("", machine="x86_64", fallback_model="Mystery", fallback_logical=6)
    assert cpu.model_name == "Mystery" and cpu.logical_cores == 6 and cpu.physical_cores == 6
    assert cpu.simd == "unknown" and cpu.peak_fp32_flops is None


def test_detect_this_machine_is_consistent():
    cpu = detect_cpu()
    assert 1 <= cpu.physical_cores <= cpu.logical_cores
    assert cpu.model_name
    mem = available_memory_bytes()
    tot = total_memory_bytes()
    assert mem is None or tot is None or 0 < mem <= tot


def test_cpu_module_imports_no_torch():
    code = ("import sys; import gpuplan.hardware.cpu as c; c.detect_cpu(); "
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
