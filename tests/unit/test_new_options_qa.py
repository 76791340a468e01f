"""Regressions found by trying the options that landed together (inference format ``auto``, the
pipeline edge stages, ETP, the MoE capacity factor, the FP8 switches, ``gpuplan capacity``) as a
new and as a hostile user would (qa37). Each test pins the exact line or the real value."""

from __future__ import annotations

import shlex

import pytest

from gpuplan.errors import InputError
from gpuplan.export import export_plan
from gpuplan.job import Job


# -- --fp8-attention (inference) under a serving export -------------------------------------
# vLLM's and SGLang's FP8 attention is the FlashAttention-3 path their FP8 KV cache selects
# (engines/profiles.FP8_ATTENTION, kv_selects=True): neither has a switch of its own, so the
# export used to drop --fp8-attention silently and print a bf16-cache command.

@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fp8_attention_with_a_16_bit_cache_is_refused_not_dropped(engine):
    job = Job(model="llama-3.1-8b", mode="infer", engine=engine, fp8_attention=True)
    with pytest.raises(InputError) as e:
        export_plan(job, engine)
    assert str(e.value) == (
        f"export {engine}: fp8_attention has no {engine} setting of its own: its FP8 attention "
        "is selected by the FP8 KV cache; give kv_dtype fp8 too, or drop fp8_attention")
    assert e.value.field == "fp8_attention" and e.value.fix == {"kv_dtype": "fp8"}


@pytest.mark.parametrize("engine,cache_flag,cache_value", [
    ("vllm", "--kv-cache-dtype", "fp8"), ("sglang", "--kv-cache-dtype", "fp8_e4m3")])
def test_fp8_attention_with_the_fp8_cache_is_expressed_by_the_cache(engine, cache_flag,
                                                                     cache_value):
    job = Job(model="llama-3.1-8b", mode="infer", engine=engine, fp8_attention=True,
              kv_dtype="fp8")
    args = shlex.split(export_plan(job, engine).splitlines()[0])
    assert args[args.index(cache_flag) + 1] == cache_value


# -- --first-last-layers-bf16 past half the blocks ------------------------------------------
# The speed model refused it; `gpuplan fit --no-speed` (the memory alone) planned it, clamping
# the narrow blocks to none, so the two commands disagreed on the same job. Qwen3-30B-A3B has 48
# blocks (its config.json num_hidden_layers): 2 x 24 = 48 leaves none narrow, 23 is the most.

@pytest.mark.parametrize("edge", [24, 30])
def test_memory_refuses_edge_layers_that_leave_no_block_narrow(edge):
    from gpuplan.memory import train_memory
    from gpuplan.models import load_model

    job = Job(model="qwen3-30b-a3b", mode="train", precision="fp8-delayed",
              first_last_layers_bf16=edge)
    with pytest.raises(InputError) as e:
        train_memory(load_model("qwen3-30b-a3b"), job)
    assert str(e.value) == (f"first_last_layers_bf16 {edge}: {2 * edge} of the model's 48 "
                            "blocks would be BF16, none narrow; give at most 23")
    assert e.value.fix == {"first_last_layers_bf16": 23}


def test_memory_and_speed_agree_on_the_largest_edge():
    from gpuplan.fit import plan

    job = Job(model="qwen3-30b-a3b", mode="train", precision="fp8-delayed",
              first_last_layers_bf16=23)
    p = plan(job, ["H100-SXM-80GB"], speed=True, suggest=False)  # both accept 23 of 48
    assert p.train is not None and p.speed is not None


# -- a second --gpu on a one-GPU command ----------------------------------------------------
# `gpuplan speed/cluster/capacity --gpu H100 --gpu A100` planned the A100 alone without a word
# (argparse keeps the last value), while POST /api/speed refuses a list.

@pytest.mark.parametrize("command", ["speed", "cluster", "capacity"])
def test_a_second_gpu_is_refused_not_replaced(command, capsys):
    from gpuplan.cli import main

    argv = [command, "llama-3.1-8b", "--mode", "infer", "--gpu", "H100-SXM-80GB",
            "--gpu", "A100-SXM-80GB", *(["--rate", "1"] if command == "capacity" else [])]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("gpuplan: error: --gpu given twice (H100-SXM-80GB, A100-SXM-80GB): this "
                       "command plans one GPU; run it once per GPU, or judge several with "
                       f"`gpuplan fit --gpu A --gpu B` (see `gpuplan {command} --help`)")
