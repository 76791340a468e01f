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
