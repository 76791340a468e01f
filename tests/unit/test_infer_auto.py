"""``infer_precision`` ``auto`` (the Job's default, issues 28/30): a checkpoint that ships quantized
(its config.json's ``quantization_config``) plans in its own format where the engine and GPU load
it so (gpt-oss-120b's MXFP4 on one 80 GB GPU, as OpenAI publishes; DeepSeek-V3's fp8-block under
vLLM), bf16 otherwise and for every model that ships none; an explicit format always wins."""

from __future__ import annotations

import json

import pytest

from gpuplan.fit import plan
from gpuplan.formats import resolve_infer_precision
from gpuplan.job import DEFAULT_INFER_PRECISION, Job
from gpuplan.models import load_model

GB = 1e9
GIB = 2 ** 30

# gpt-oss-120b's config.json (openai/gpt-oss-120b): 36 layers, 128 experts, hidden 2880,
# intermediate 2880; each expert's gate_up_proj is 2880 x 5760 (two matrices), down_proj
# 2880 x 2880.
_EXPERT_WEIGHTS = 36 * 128 * (2880 * 5760 + 2880 * 2880)
# MXFP4 (OCP MX v1.0): two e2m1 values a byte and one e8m0 scale byte per 32 along the input
# (2880 = 90 x 32): 4.25 bits; the experts' biases, attention, router, norms, embeddings, head bf16.
_MXFP4_EXPERT_BYTES = _EXPERT_WEIGHTS // 2 + _EXPERT_WEIGHTS // 32


def _fit(cli, *argv):
    rc, out, err = cli("fit", *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_the_default_is_auto_and_round_trips():
    assert DEFAULT_INFER_PRECISION == "auto"
    job = Job.from_dict({})
    assert job.infer_precision == "auto"
    assert Job.from_dict(job.to_dict()) == job
    given = Job(model="gpt-oss-120b", mode="infer", infer_precision="mxfp4")
    assert Job.from_dict(given.to_dict()) == given


def test_gpt_oss_120b_fits_one_h100_at_its_mxfp4_size(cli):
    m = load_model("gpt-oss-120b")
    others = m.params.total - _EXPERT_WEIGHTS
    expected = _MXFP4_EXPERT_BYTES + 2 * others  # 65.24 GB
    d = _fit(cli, "gpt-oss-120b", "--mode", "infer", "--gpu", "h100", "--no-speed")
    assert d["job"]["infer_precision"] == "auto"
    assert d["infer"]["precision"] == "mxfp4"
    assert d["infer"]["per_gpu"]["weights_bytes"] == expected
    # the model card (arXiv 2508.10925, Table 1): a 60.8 GiB checkpoint
    assert expected / GIB == pytest.approx(60.8, rel=0.01)
    assert d["gpus"][0]["infer_fits"] is True
    assert ("planned in mxfp4, the format the checkpoint ships in (give --infer-precision bf16 "
            "to plan it dequantized)") in d["notes"]
    assert not any("inference plans use" in n for n in d["notes"])  # the false note is gone


def test_an_explicit_bf16_still_plans_bf16(cli):
    m = load_model("gpt-oss-120b")
    d = _fit(cli, "gpt-oss-120b", "--mode", "infer", "--precision", "bf16", "--gpu", "h100",
             "--no-speed")
    assert d["infer"]["precision"] == "bf16"
    assert d["infer"]["per_gpu"]["weights_bytes"] == 2 * m.params.total  # 233.7 GB
    assert d["gpus"][0]["infer_fits"] is False
    assert not any(n.startswith("planned in") for n in d["notes"])


def test_deepseek_v3_tp8_on_eight_h200_fits_in_fp8_block(cli):
    argv = ("deepseek-v3", "--mode", "infer", "--gpu", "h200", "--gpus", "8", "--tp", "8",
            "--engine", "vllm", "--no-speed")
    auto = _fit(cli, *argv)
    given = _fit(cli, *argv, "--precision", "fp8-block")
    bf16 = _fit(cli, *argv, "--precision", "bf16")
    assert auto["infer"]["precision"] == "fp8-block"
    assert auto["infer"]["per_gpu"] == given["infer"]["per_gpu"]
    assert auto["gpus"][0]["infer_fits"] is True and bf16["gpus"][0]["infer_fits"] is False
    # e4m3 is one byte a weight against bf16's two (scales: one fp32 per 128 x 128 block)
    w8, w16 = auto["infer"]["per_gpu"]["weights_bytes"], bf16["infer"]["per_gpu"]["weights_bytes"]
    assert 0.5 < w8 / w16 < 0.55


def test_llama_plans_bf16_as_before(cli):
    auto = _fit(cli, "llama-3.1-8b", "--mode", "infer", "--gpu", "h100")
    bf16 = _fit(cli, "llama-3.1-8b", "--mode", "infer", "--precision", "bf16", "--gpu", "h100")
    assert auto["infer"]["precision"] == "bf16"
    assert auto["job"]["infer_precision"] == "auto" and bf16["job"]["infer_precision"] == "bf16"
    auto["job"]["infer_precision"] = "bf16"
    assert auto == bf16
    m = load_model("llama-3.1-8b")
    assert auto["infer"]["per_gpu"]["weights_bytes"] == 2 * m.params.total + \
        m.architecture.buffer_bytes


@pytest.mark.parametrize("engine,gpu_arch,want", [
    # transformers 5.25: FP8 needs compute capability 8.9, else dequantized to bf16
    ("auto", "Hopper", "fp8-block"), ("auto", "Ampere", "bf16"), ("transformers", "Ada Lovelace",
                                                                   "fp8-block"),
    # vLLM's FP8 Marlin on Ampere is for dense models only; DeepSeek-V3 is a MoE
    ("vllm", "Ampere", "bf16"), ("vllm", "Hopper", "fp8-block"),
    (None, None, "fp8-block"),  # no GPU named: the shipped format
])
def test_deepseek_resolution_by_engine_and_gpu(engine, gpu_arch, want):
    arch = load_model("deepseek-v3").architecture
    assert resolve_infer_precision("auto", arch, engine, gpu_arch) == want
    assert resolve_infer_precision("bf16", arch, engine, gpu_arch) == "bf16"  # given: it wins


@pytest.mark.parametrize("engine,gpu_arch,want", [
    ("auto", "Volta", "bf16"), ("auto", "Turing", "mxfp4"),  # transformers: CC 7.5 for MXFP4
    ("vllm", "Ampere", "mxfp4"), ("sglang", "Ampere", "bf16"), ("vllm", "Hopper", "mxfp4"),
    ("auto", ("Hopper", "Volta"), "bf16"),  # every GPU of a plan must load it
])
def test_gpt_oss_resolution_by_engine_and_gpu(engine, gpu_arch, want):
    arch = load_model("gpt-oss-120b").architecture
    assert resolve_infer_precision("auto", arch, engine, gpu_arch) == want


def test_a_model_without_quantization_config_is_bf16():
    assert resolve_infer_precision("auto", load_model("llama-3.1-8b").architecture,
                                   "vllm", "Hopper") == "bf16"
    assert resolve_infer_precision("auto", None) == "bf16"


def test_a_gpu_that_dequantizes_says_so(cli):
    d = _fit(cli, "gpt-oss-120b", "--mode", "infer", "--gpu", "v100", "--no-speed")
    assert d["infer"]["precision"] == "bf16"
    assert any(n.startswith("planned in bf16") and "V100" in n for n in d["notes"])


def test_library_plan_names_the_format_planned():
    p = plan(Job(model="gpt-oss-120b", mode="infer"), ["H100-SXM-80GB"])
    assert p.job.infer_precision == "auto" and p.infer.precision == "mxfp4"
    assert p.gpus[0].infer.fits
