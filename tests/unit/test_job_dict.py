"""Job.to_dict / Job.from_dict: the JSON form of a job is its fields, all of them, and reading it
back gives the CLI's job."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import build_parser
from gpuplan.cli.fit import job_from_args
from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.models import load_model

#: Every field of Job, spelled out here on purpose: adding a field must be seen in this test.
FIELDS = ["model", "mode", "engine", "precision", "infer_precision", "optimizer", "optimizer_states",
          "batch", "seq", "grad_accum", "gpus", "zero", "offload_optimizer", "lora_rank",
          "lora_targets", "lora_base", "checkpointing", "attention", "kv_dtype", "context",
          "fused_optimizer", "use_cache", "lora_dropout", "zero_grad_set_to_none", "max_grad_norm",
          "prefill_logits", "runtime", "model_code", "loss_chunks", "optimizer_in_backward",
          "offload_activations", "tp", "pp", "cp", "ep", "sequence_parallel",
          "distribute_checkpoints", "pp_schedule",
          "pp_embedding_part", "pp_loss_part", "pp_first_stage_layers", "pp_last_stage_layers",
          "etp", "moe_capacity_factor", "mtp_layers", "ep_overlap", "moe_dispatcher",
          "micro_batches", "gpus_per_node", "inter_node", "sharding",
          "stage3_max_live_parameters", "stage3_prefetch_bucket_size", "fp8_param_gather",
          "fp8_attention", "first_last_layers_bf16", "power_limit_w", "recompute_modules",
          "dp_shard", "cuda_graph_scope", "moe_shared_expert_overlap",
          "master_weights", "grad_dtype", "activation_storage", "fp8_amax_history"]


def cli_job(*argv: str) -> Job:
    args = build_parser("fit").parse_args(["fit", *argv])
    return job_from_args(args)


def test_to_dict_has_every_field_in_order():
    d = Job(model="gpt2").to_dict()
    assert list(d) == FIELDS
    assert d["model"] == "gpt2" and d["optimizer_states"] == "auto" and d["lora_dropout"] == 0.0


def test_to_dict_is_json_and_names_a_loaded_model():
    job = Job(model=load_model("gpt2-small"), lora_rank=8, lora_targets=("c_attn", "c_proj"))
    d = json.loads(json.dumps(job.to_dict()))
    assert d["model"] == "gpt2"  # the loaded model's canonical name, not the alias typed
    assert d["lora_targets"] == ["c_attn", "c_proj"]


@pytest.mark.parametrize("argv", [
    ("gpt2",),
    ("llama-3.1-8b", "--batch", "4", "--seq", "1024", "--checkpointing", "full"),
    ("qwen2.5-7b", "--mode", "infer", "--precision", "int8", "--context", "8192",
     "--kv-dtype", "fp8"),
    ("llama-3.1-8b", "--lora-rank", "16", "--lora-base", "nf4", "--lora-targets", "q_proj,v_proj"),
    ("gpt2", "--gpus", "8", "--zero", "3", "--offload-optimizer", "--grad-accum", "4",
     "--optimizer-states", "bf16", "--fused-optimizer", "--use-cache", "--attention", "eager"),
    ("llama-3.1-8b", "--gpus", "8", "--zero", "3", "--sharding", "fsdp2"),
])
def test_round_trip_equals_the_cli_job(argv):
    job = cli_job(*argv)
    back = Job.from_dict(json.loads(json.dumps(job.to_dict())))
    assert back == job


def test_missing_keys_take_the_cli_defaults():
    # the CLI with only a model named, and with nothing named at all
    assert Job.from_dict({"model": "gpt2"}) == cli_job("gpt2")
    assert Job.from_dict({}).to_dict() == cli_job().to_dict()
    assert Job.from_dict({}).to_dict()["model"] == "7.00B-parameter model"


def test_unknown_key_names_it_and_the_close_match():
    with pytest.raises(InputError, match=r"unknown job key 'batch_size'; did you mean 'batch'"):
        Job.from_dict({"model": "gpt2", "batch_size": 4})


@pytest.mark.parametrize("key,value,expected", [
    ("batch", "4", "batch '4': expected a whole number"),
    ("batch", True, "batch True: expected a whole number"),
    ("batch", 2.0, "batch 2.0: expected a whole number"),
    ("seq", [1], "seq [1]: expected a whole number or null"),
    ("offload_optimizer", 1, "offload_optimizer 1: expected true or false"),
    ("lora_targets", "q_proj", "lora_targets 'q_proj': expected a list of strings or null"),
    ("mode", 3, "mode 3: expected one of train, infer, both"),
    ("model", 7, "model 7: expected a string"),
])
def test_wrong_json_types_are_named(key, value, expected):
    with pytest.raises(InputError) as e:
        Job.from_dict({"model": "gpt2", key: value})
    assert str(e.value) == expected


def test_values_are_validated_and_converted():
    with pytest.raises(InputError, match="mode 'tran'.*did you mean 'train'"):
        Job.from_dict({"mode": "tran"})
    with pytest.raises(InputError, match="batch 0: expected a whole number >= 1"):
        Job.from_dict({"batch": 0})
    job = Job.from_dict({"lora_rank": 4, "lora_targets": ["q_proj"], "lora_dropout": 0})
    assert job.lora_targets == ("q_proj",)
    assert job.lora_dropout == 0.0 and isinstance(job.lora_dropout, float)
    with pytest.raises(InputError, match="expected an object"):
        Job.from_dict(["gpt2"])


def test_fit_json_job_is_serialized_from_the_fields(capsys):
    from gpuplan.cli import main

    assert main(["fit", "gpt2", "--gpu", "T4", "--no-speed", "--json",
                 "--optimizer-states", "bf16"]) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert list(job) == FIELDS
    assert job["optimizer_states"] == "bf16" and job["lora_dropout"] == 0.0


def test_the_moe_dispatcher_option():
    j = cli_job("qwen3-30b-a3b", "--engine", "megatron", "--gpus", "8", "--ep", "8",
                "--moe-dispatcher", "deepep")
    assert j.moe_dispatcher == "deepep"
    assert Job.from_dict(j.to_dict()).moe_dispatcher == "deepep"
    assert cli_job("qwen3-30b-a3b").moe_dispatcher == "alltoall"
