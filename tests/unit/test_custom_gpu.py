"""A card that is not in the catalog, named by its numbers: ``--gpu custom:24GB,bw=1000GB/s,bf16=165TF``.

Oracles: the units the spec is written in (decimal GB, GiB, TF), and the catalog itself -- a custom
card given a catalog card's numbers must plan exactly as that card does."""

from __future__ import annotations

from dataclasses import replace
import json

import pytest

from gpuplan.cli import main
from gpuplan.compute import estimate_speed
from gpuplan.errors import InputError, UnsupportedError
from gpuplan.fit import plan
from gpuplan.hardware import get_gpu, parse_custom_gpu, pcie_bandwidth, resolve_gpu
from gpuplan.job import Job
from gpuplan.models import load_model


def test_memory_alone_is_a_gpu_and_nothing_else_is_filled_in():
    g = get_gpu("custom:24GB")
    assert g.memory_bytes == 24 * 10**9 and g.vendor == "custom" and g.name == "custom:24GB"
    assert dict(g.peak_flops) == {} and g.memory_bandwidth is None
    assert g.sm_count is None and g.resident_threads is None and g.pcie_bandwidth is None
    assert resolve_gpu("  custom:24GB ") == (g, None)


def test_every_part_in_its_units():
    g = parse_custom_gpu("custom:24GiB, bw=1.5TB/s, bf16=165TF, fp32=82.6e12, fp8=1.2PF, "
                         "sms=128, threads=1536, pcie=5x16")
    assert g.memory_bytes == 24 * 2**30
    assert g.memory_bandwidth == 1.5e12
    assert g.peak("bf16") == 165e12 and g.peak("fp32") == 82.6e12 and g.peak("fp8") == 1.2e15
    assert g.resident_threads == 128 * 1536
    assert g.pcie_bandwidth == pcie_bandwidth(5, 16)
    assert g.ridge_point("bf16") == pytest.approx(165e12 / 1.5e12)
    assert get_gpu("CUSTOM:80GB,bw=3350GB/s").memory_bandwidth == 3350e9  # prefix in any case


@pytest.mark.parametrize("spec,names", [
    ("custom:", "memory comes first"),
    ("custom:bw=1TB/s", "memory comes first"),
    ("custom:24XB", "'24XB'"),
    ("custom:0GB", "'0GB'"),
    ("custom:24GB,bw=fast", "bw="),
    ("custom:24GB,bw", "'bw'"),
    ("custom:24GB,bf16=", "'bf16='"),
    ("custom:24GB,bf16=165", "bf16=165TF"),      # a bare number is FLOP/s: a missing unit
    ("custom:24GB,bf16=lots", "bf16="),
    ("custom:24GB,bf61=165TF", "'bf61'"),
    ("custom:24GB,sms=128", "sms= and threads="),
    ("custom:24GB,sms=0,threads=1536", "sms="),
    ("custom:24GB,pcie=16", "pcie=4x16"),
    ("custom:24GB,pcie=9x16", "generation"),
    ("custom:24GB,bf16=1TF,bf16=2TF", "twice"),
])
def test_a_malformed_spec_is_one_line_naming_the_part(spec, names):
    with pytest.raises(InputError) as e:
        get_gpu(spec)
    msg = str(e.value)
    assert "\n" not in msg and names in msg and spec in msg


def _verdicts(p) -> list[dict]:
    out = []
    for v in p.to_dict()["gpus"]:
        v = {k: x for k, x in v.items() if k not in ("name", "gpu", "alias_note")}
        out.append(v)
    return out


def test_gpt2_on_custom_24gb_plans_as_a_catalog_24gb_card_with_the_same_usable_memory():
    job = Job(model="gpt2", batch=8, seq=1024)
    custom = plan(job, ["custom:24GB"], speed=False)
    # The RTX 4090 with its usable memory set to the custom card's 24 x 10^9 bytes: the same job, the
    # same memory, so every verdict, headroom and GPU count must agree.
    same = replace(get_gpu("RTX-4090"), memory_bytes=24 * 10**9)
    catalog = plan(job, [same], speed=False)
    assert custom.gpus[0].usable_bytes == catalog.gpus[0].usable_bytes == 24 * 10**9
    assert _verdicts(custom) == _verdicts(catalog)
    # and a custom card given the 4090's reported total is the 4090, verdict for verdict
    rtx = get_gpu("RTX-4090")
    assert _verdicts(plan(job, [f"custom:{rtx.memory_bytes}B"], speed=False)) == \
        _verdicts(plan(job, ["RTX-4090"], speed=False))


def test_a_job_too_big_for_the_custom_card_does_not_fit_and_the_solver_runs():
    job = Job(model="llama-3.1-8b", batch=1, seq=1024)
    p = plan(job, ["custom:16GB"], speed=False)
    assert p.gpus[0].train_fits is False
    assert p.solver and p.solver[0].suggestions  # the solver takes a custom card like any other


def _custom_4090() -> str:
    g = get_gpu("RTX-4090")
    peaks = ",".join(f"{d}={v!r}" for d, v in g.peak_flops.items())
    return (f"custom:{g.memory_bytes}B,bw={g.memory_bandwidth!r},{peaks},"
            f"sms={g.sm_count},threads={g.max_threads_per_sm},pcie={g.pcie_gen}x{g.pcie_lanes}")


def test_a_custom_card_with_a_catalog_cards_numbers_has_its_speed():
    model = load_model("gpt2")
    mine = estimate_speed(model, get_gpu(_custom_4090()), Job(model=model, mode="train", batch=4, seq=512), measured=None)
    # The achievable matmul fraction is chosen by vendor (a published NVIDIA measurement, else an
    # assumed 0.70) and the attention kernel's share by architecture (Ada runs FlashAttention-2's
    # sm86/sm89 kernels), and a custom card states neither: so the reference is the 4090 without
    # them.
    rtx = replace(get_gpu("RTX-4090"), vendor="custom", architecture="custom")
    ref = estimate_speed(model, rtx, Job(model=model, mode="train", batch=4, seq=512), measured=None)
    assert mine.step_time_s == ref.step_time_s and mine.mfu == ref.mfu
    assert mine.step_time_s > 0


def test_speed_without_the_dtypes_peak_says_so_instead_of_guessing():
    model = load_model("gpt2")
    g = get_gpu("custom:24GB,bw=1000GB/s,fp32=82.6TF,sms=128,threads=1536,pcie=4x16")
    with pytest.raises(UnsupportedError, match="has no bf16 support"):
        estimate_speed(model, g, Job(model=model, mode="train", batch=1, seq=128), measured=None)
    with pytest.raises(UnsupportedError, match="fp32=") as e:
        estimate_speed(model, get_gpu("custom:24GB,bw=1000GB/s,bf16=165TF"),
                       Job(model=model, mode="train", batch=1, seq=128), measured=None)
    assert "sms=N,threads=N" in str(e.value) and "pcie=4x16" in str(e.value)


def test_apple_plans_memory_but_no_speed():
    p = plan(Job(model="gpt2", batch=8, seq=1024), ["M2-Ultra-192GB"], speed=True)
    assert p.gpus[0].train_fits is True
    row = p.speed.to_dict()["gpus"][0]
    assert "no speed estimate" in row["error"] and "fp32 peak" in row["error"]


def test_cli_fit_speed_and_gpus_take_a_custom_card(capsys):
    assert main(["fit", "gpt2", "--gpu", "custom:24GB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"][0]["name"] == "custom:24GB" and out["gpus"][0]["usable_bytes"] == 24 * 10**9
    assert main(["gpus", "custom:24GB,bw=1000GB/s,bf16=165TF"]) == 0
    assert "165.0 TFLOP/s" in capsys.readouterr().out
    assert main(["speed", "gpt2", "--gpu", "custom:24GB,bw=1000GB/s,bf16=165TF"]) == 2
    err = capsys.readouterr().err
    assert "no speed estimate" in err and err.count("\n") == 1
    assert main(["fit", "gpt2", "--gpu", "custom:24GB,bw=fast"]) == 2
    err = capsys.readouterr().err
    assert "bw=" in err and "1000GB/s" in err and err.count("\n") == 1
