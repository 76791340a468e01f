"""An FP8 inference format on a card without an fp8 rate: the refusal says which of two things is
true -- the architecture has no FP8 tensor cores (Ampere and older: name the architectures and
catalog GPUs that have them), or the catalog lacks this card's dense FP8 rate (consumer Blackwell:
give the card by its numbers with a ``custom:`` spec) -- and names the option the user gave
(``infer_precision``), in one line, exit 2."""

from __future__ import annotations

import re

import pytest

from gpuplan.compute.device import device_from_gpu
from gpuplan.compute.step import infer_precision
from gpuplan.errors import UnsupportedError
from gpuplan.hardware import get_gpu, parse_custom_gpu

_SPEED = ("speed", "qwen2.5-7b", "--mode", "infer", "--infer-precision")


def _one_line_error(cli, *argv: str) -> str:
    rc, _, err = cli(*argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpuplan: error: ")
    return lines[0][len("gpuplan: error: "):]


def test_a_catalog_gap_says_the_rate_is_missing_and_how_to_give_it(cli):
    msg = _one_line_error(cli, *_SPEED, "fp8", "--gpu", "rtx5060ti-16gb")
    assert msg.startswith("--infer-precision fp8: the catalog has no dense fp8 rate for "
                          "RTX-5060-Ti-16GB")
    assert "no fp8 support" not in msg and "no FP8 tensor cores" not in msg
    assert "--precision" not in msg  # the user gave --infer-precision
    assert "Blackwell" in msg
    assert "or use --infer-precision bf16" in msg
    # the suggested spec carries the entry's own numbers: 16 GB GDDR7 at 28 Gbps on 128 bits =
    # 28 * 128 / 8 = 448 GB/s; 36 SMs x 1,536 threads; PCIe 5.0 x8 (NVIDIA's RTX 5060 family page)
    spec = re.search(r"--gpu (custom:\S+)", msg).group(1)
    assert "bw=448GB/s" in spec and "sms=36,threads=1536" in spec and "pcie=5x8" in spec
    assert "fp8=PEAK" in spec


def test_the_suggested_spec_runs_once_its_fp8_peak_is_filled_in(cli):
    msg = _one_line_error(cli, *_SPEED, "fp8", "--gpu", "rtx5060ti-16gb")
    spec = re.search(r"--gpu (custom:\S+)", msg).group(1).rstrip(",;)")
    # any dense FP8 rate will do for the check: twice the entry's bf16 47.4 TF
    rc, out, err = cli(*_SPEED, "fp8", "--gpu", spec.replace("fp8=PEAK", "fp8=94.8TF"))
    assert rc == 0, err
    gpu = get_gpu("RTX-5060-Ti-16GB")
    card = parse_custom_gpu(spec.replace("fp8=PEAK", "fp8=94.8TF"))
    assert card.memory_bytes == gpu.memory_bytes
    assert card.memory_bandwidth == gpu.memory_bandwidth
    assert card.peak_flops["bf16"] == gpu.peak_flops["bf16"]
    assert card.peak_flops["fp8"] == 94.8e12


def test_an_architecture_without_fp8_tensor_cores_names_the_ones_with_them(cli):
    msg = _one_line_error(cli, *_SPEED, "fp8", "--gpu", "a100-80gb")
    assert msg.startswith("--infer-precision fp8: A100-SXM-80GB (Ampere architecture) has no "
                          "FP8 tensor cores")
    assert "Hopper" in msg and "Ada Lovelace" in msg and "Blackwell" in msg
    assert "H100-SXM-80GB" in msg and "L40S" in msg
    assert "RTX-5090" not in msg  # no fp8 rate on record: not a card to pick for it
    assert "use --infer-precision bf16" in msg and "--engine vllm" in msg
    assert "--precision" not in msg


def test_w4a8_names_infer_precision_and_its_16_bit_twin(cli):
    msg = _one_line_error(cli, *_SPEED, "w4a8", "--gpu", "a100-80gb")
    assert msg.startswith("--infer-precision w4a8 (its GEMMs run in fp8): A100-SXM-80GB "
                          "(Ampere architecture) has no FP8 tensor cores")
    assert "use --infer-precision w4a16" in msg and "--engine vllm" not in msg


@pytest.mark.parametrize("gpu, kind", [("RTX-5090", "catalog"), ("A100-SXM-80GB", "arch"),
                                       ("T4", "arch")])
def test_the_library_error_carries_the_field_and_the_fix(gpu, kind):
    with pytest.raises(UnsupportedError) as e:
        infer_precision("fp8", device_from_gpu(get_gpu(gpu)), False)
    assert e.value.field == "infer_precision" and e.value.value == "fp8"
    assert "--" not in str(e.value)
    offer = "bf16" if get_gpu(gpu).supports("bf16") else "fp16"
    assert e.value.fix == {"infer_precision": offer}
    assert ("catalog has no dense fp8 rate" in str(e.value)) == (kind == "catalog")


def test_a_custom_card_without_fp8_is_told_to_add_it():
    card = device_from_gpu(parse_custom_gpu(
        "custom:24GB,bw=1000GB/s,fp32=82.6TF,bf16=165TF,sms=128,threads=1536,pcie=4x16"))
    with pytest.raises(UnsupportedError) as e:
        infer_precision("fp8", card, False)
    assert "fp8=" in str(e.value) and "tensor cores" not in str(e.value)
    assert e.value.field == "infer_precision"


def test_a_training_recipe_on_a_catalog_gap_names_the_entries_that_state_the_rate(cli):
    msg = _one_line_error(cli, "speed", "qwen2.5-7b", "--gpu", "rtx5090", "--precision",
                          "fp8-tensorwise", "--engine", "torchtitan")
    assert msg.startswith("--precision fp8-tensorwise: the catalog has no dense fp8 rate for "
                          "RTX-5090 (its Blackwell tensor cores run it")
    named = msg[msg.rindex("(") + 1:msg.rindex(")")].split(", ")
    assert "RTX-PRO-6000-Blackwell" in named and "B200-SXM-180GB" in named
    assert not {"RTX-5080", "H100-SXM-80GB"} & set(named)  # no rate / another architecture


def test_an_architecture_refusal_of_a_recipe_names_only_gpus_it_can_time(cli):
    msg = _one_line_error(cli, "speed", "qwen2.5-7b", "--gpu", "a100", "--precision",
                          "fp8-tensorwise", "--engine", "torchtitan")
    assert "(Ampere architecture) has no FP8 tensor cores" in msg
    assert "H100-SXM-80GB" in msg and "RTX-5090" not in msg and "RTX-5060-Ti-16GB" not in msg
