"""The vLLM command serves the weights the plan has, and a multi-node accelerate file can launch.

vLLM (engine args, docs.vllm.ai/en/latest/configuration/engine_args.html; Quantization docs):
``--quantization awq``/``gptq`` loads weights AutoAWQ/GPTQ already packed -- it cannot make them
from a 16-bit repository -- while ``--quantization fp8`` (online FP8) and ``bitsandbytes``
(in-flight 4-bit) quantize a 16-bit repository at load. ``--gpu-memory-utilization`` defaults to
0.9: the export writes it, so the command says how much of each card vLLM takes.

accelerate: past one node every node needs ``main_process_ip``/``main_process_port`` (where rank 0
listens) and its own ``machine_rank`` (accelerate's ``ClusterConfig``); the file is loaded with
accelerate's own ``load_config_from_file``.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from gpuplan.errors import InputError
from gpuplan.export import export_plan
from gpuplan.job import Job
from gpuplan.models import catalog_config, load_model

from test_export import acc_load, vllm_args  # the engines' documented parsers


def infer(**kw) -> Job:
    kw.setdefault("model", "llama-3.1-8b")
    return Job(mode="infer", **kw)


@pytest.mark.parametrize("fmt, dtype", [("bf16", "bfloat16"), ("fp16", "float16"),
                                        ("fp32", "float32")])
def test_a_16_bit_plan_has_no_quantization(fmt, dtype):
    repo, a = vllm_args(export_plan(infer(infer_precision=fmt), "vllm"))
    assert repo == "meta-llama/Llama-3.1-8B"
    assert a.dtype == dtype and a.quantization is None


@pytest.mark.parametrize("fmt, quant", [("fp8", "fp8"), ("nf4", "bitsandbytes")])
def test_online_quantization_of_the_16_bit_repository(fmt, quant):
    repo, a = vllm_args(export_plan(infer(infer_precision=fmt), "vllm"))
    assert repo == "meta-llama/Llama-3.1-8B" and a.quantization == quant


@pytest.mark.parametrize("fmt, method", [("awq-4bit", "AWQ"), ("gptq-4bit", "GPTQ")])
def test_a_packed_format_without_its_repository_is_refused_naming_the_flag(fmt, method, cli):
    with pytest.raises(InputError) as e:
        export_plan(infer(infer_precision=fmt), "vllm")
    msg = str(e.value)
    assert msg.startswith(f"export vllm: precision {fmt} serves a checkpoint quantized by "
                          f"{method} and meta-llama/Llama-3.1-8B holds unquantized weights")
    assert "add export_repo" in msg and "\n" not in msg
    rc, out, err = cli("fit", "llama-3.1-8b", "--mode", "infer", "--precision", fmt,
                       "--export", "vllm")
    assert rc == 2 and out == "" and "add --export-repo" in err


def test_a_given_quantized_repository_is_served_as_it_is(cli):
    awq = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
    rc, out, _ = cli("fit", "llama-3.1-8b", "--mode", "infer", "--precision", "awq-4bit",
                     "--export", "vllm", "--export-repo", awq)
    assert rc == 0
    repo, a = vllm_args(out)
    # vLLM reads quant_method from the repository's config.json (and then picks its Marlin
    # kernel where the GPU has it); AWQ kernels run in fp16
    assert repo == awq and a.quantization is None and a.dtype == "float16"
    # an FP8 checkpoint given likewise: its own config says how (fp8 or compressed-tensors)
    repo, a = vllm_args(export_plan(infer(infer_precision="fp8"), "vllm", repo="org/m-FP8"))
    assert repo == "org/m-FP8" and a.quantization is None
    _, a = vllm_args(export_plan(infer(infer_precision="nf4"), "vllm", repo="org/m-bnb-4bit"))
    assert a.quantization == "bitsandbytes"


def test_a_model_directory_with_a_matching_quantization_config_is_its_own_repository(tmp_path):
    config = catalog_config("llama-3.1-8b")
    config.pop("_gpuplan", None)
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    d = tmp_path / "llama-awq"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    model = load_model(str(d))
    repo, a = vllm_args(export_plan(infer(model=str(d), infer_precision="awq-4bit"), "vllm",
                                    model=model))
    assert repo == str(d) and a.quantization is None
    with pytest.raises(InputError, match="quantized by GPTQ"):  # an AWQ checkpoint is not GPTQ
        export_plan(infer(model=str(d), infer_precision="gptq-4bit"), "vllm", model=model)


def test_gpu_memory_utilization_is_always_stated():
    for kw in ({}, {"tp": 2, "gpus": 2}, {"infer_precision": "fp8", "kv_dtype": "fp8"}):
        _, a = vllm_args(export_plan(infer(**kw), "vllm"))
        assert a.gpu_memory_utilization is not None


def test_the_exported_utilization_is_the_one_the_plans_kv_budget_used(cli):
    """One truth (onetruth43): `fit --engine vllm`'s KV budget is sized at the version's default
    (0.92 from vLLM 0.21, PR #38284) or the user's --gpu-memory-utilization; `fit --export vllm`
    and `capacity --export vllm` wrote a constant 0.9, so the launched engine held less KV cache
    than the plan counted. Each door's command now states the fraction its plan read."""
    job = ["llama-3.1-8b", "--mode", "infer", "--engine", "vllm", "--gpu", "H100-SXM-80GB"]
    for extra in ([], ["--gpu-memory-utilization", "0.8"], ["--engine-version", "0.10"]):
        code, out, err = cli("fit", *job, *extra, "--json")
        assert code == 0, err
        planned = json.loads(out)["infer"]["engine"]["fraction"]
        code, cmd, err = cli("fit", *job, *extra, "--export", "vllm")
        assert code == 0, err
        _, a = vllm_args(cmd)
        assert a.gpu_memory_utilization == pytest.approx(planned), extra
        code, out, err = cli("capacity", *job[:1], *job[5:], "--engine", "vllm", *extra,
                             "--rate", "1", "--requests", "20", "--input", "512", "--output",
                             "64", "--export", "vllm", "--json")
        assert code == 0, err
        res = json.loads(out)
        _, a = vllm_args(res["export"].split(" --max-num-batched-tokens")[0])  # its scheduler knobs
        assert a.gpu_memory_utilization == pytest.approx(res["scheduler"]["memory_utilization"])
        assert res["scheduler"]["memory_utilization"] == pytest.approx(planned), extra


def test_export_repo_is_checked(cli):
    rc, _, err = cli("fit", "gpt2", "--export-repo", "org/x")
    assert rc == 2 and "--export-repo without --export" in err
    rc, _, err = cli("fit", "gpt2", "--export", "deepspeed", "--export-repo", "org/x")
    assert rc == 2 and "drop --export-repo" in err
    with pytest.raises(InputError, match="export_repo 'a b'"):
        export_plan(infer(), "vllm", repo="a b")


# ------------------------------------------------------------------ accelerate, several nodes

def test_a_multi_node_accelerate_file_names_the_main_node_and_each_rank(tmp_path):
    j = Job(model="llama-3.1-8b", mode="train", gpus=32, zero=3, gpus_per_node=8)
    text = export_plan(j, "accelerate")
    cfg = acc_load(text, tmp_path)  # accelerate's own loader: the placeholder still parses
    assert (cfg.num_machines, cfg.num_processes, cfg.machine_rank) == (4, 32, 0)
    assert cfg.main_process_ip == "MAIN_NODE_IP"
    assert cfg.main_process_port == 29500  # torch.distributed's default MASTER_PORT
    assert cfg.rdzv_backend == "static"
    lines = text.splitlines()
    rank = lines.index("machine_rank: 0")
    assert lines[rank - 1].startswith("# machine_rank: 0 on the main node, 1 to 3 on the others")
    assert "--machine_rank R" in lines[rank - 1]
    ip = lines.index('main_process_ip: "MAIN_NODE_IP"')
    assert "address of the machine_rank 0 node" in lines[ip - 1]
    assert lines.count("machine_rank: 0") == 1


def test_one_node_needs_no_main_node_address(tmp_path):
    cfg = acc_load(export_plan(Job(model="llama-3.1-8b", mode="train", gpus=8, zero=3),
                               "accelerate"), tmp_path)
    assert cfg.num_machines == 1 and cfg.main_process_ip is None
    assert cfg.machine_rank == 0


# ------------------------------------------------------------------ the 2025 formats (issue 30)

@pytest.mark.parametrize("fmt, quant", [("fp8", "fp8"), ("mxfp8", "mxfp8")])
def test_online_fp8_and_mxfp8_of_the_16_bit_repository(fmt, quant):
    repo, a = vllm_args(export_plan(infer(infer_precision=fmt, kv_dtype="fp8"), "vllm"))
    assert repo == "meta-llama/Llama-3.1-8B"
    assert (a.quantization, a.kv_cache_dtype, a.dtype) == (quant, "fp8", "bfloat16")


@pytest.mark.parametrize("fmt, quant, quantizer", [
    ("nvfp4", "modelopt_fp4", "TensorRT Model Optimizer (NVFP4)"),
    ("w4a16", "compressed-tensors", "llm-compressor (W4A16)"),
    ("w4a8", "compressed-tensors", "llm-compressor (W4A8)"),
    ("fp8-channel", "compressed-tensors", "llm-compressor (FP8_DYNAMIC)")])
def test_a_quantizer_written_format_needs_its_checkpoint(fmt, quant, quantizer):
    with pytest.raises(InputError, match=f"quantized by {re.escape(quantizer)}"):
        export_plan(infer(infer_precision=fmt), "vllm")
    repo, a = vllm_args(export_plan(infer(infer_precision=fmt), "vllm", repo="org/m-q"))
    assert (repo, a.quantization, a.dtype) == ("org/m-q", quant, "bfloat16")


def test_a_model_directory_quantized_by_modelopt_or_compressed_tensors(tmp_path):
    for fmt, method, quant in (("nvfp4", "modelopt", "modelopt_fp4"),
                               ("w4a16", "compressed-tensors", "compressed-tensors")):
        config = catalog_config("llama-3.1-8b")
        config.pop("_gpuplan", None)
        config["quantization_config"] = {"quant_method": method}
        d = tmp_path / fmt
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        model = load_model(str(d))
        repo, a = vllm_args(export_plan(infer(model=str(d), infer_precision=fmt), "vllm",
                                        model=model))
        assert repo == str(d) and a.quantization == quant


def test_gpt_oss_serves_its_own_mxfp4_checkpoint():
    repo, a = vllm_args(export_plan(infer(model="gpt-oss-20b", infer_precision="mxfp4"),
                                    "vllm"))
    assert repo == "openai/gpt-oss-20b" and a.quantization == "mxfp4"
