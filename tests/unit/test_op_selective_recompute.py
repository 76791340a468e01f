"""torchtitan's op-level selective activation checkpointing (issue 31, part 1): what its
``selective`` recomputes, counted from its own policy and checked by hand.

torchtitan (pytorch/torchtitan@582fe7d torchtitan/parallelisms/parallelize_llama.py) saves the
outputs of mm, SDPA and the reduce-scatter and recomputes every other op -- and every second mm of
a block. A Llama block launches wq wk wv wo w1 w3 w2, so wk, wo and w3 run again.
"""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.flops import recompute_ops
from gpuplan.engines.profiles import get_engine
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

MODEL = "llama-3.1-8b"  # hidden 4096, 32 heads, 8 KV heads of 128, ffn 14336, 32 layers
BATCH, SEQ = 2, 2048


def _step(engine: str, checkpointing: str = "selective"):
    job = Job(model=MODEL, mode="train", batch=BATCH, seq=SEQ, engine=engine,
              checkpointing=checkpointing, attention="sdpa")
    return estimate_speed(load_model(MODEL), get_gpu("H100-SXM-80GB"), job, measured=None).step


def _recomputed(step, kind: str) -> list:
    return [t.op for t in step.ops if t.op.phase == "recompute" and t.op.kind == kind]


def test_torchtitan_recomputes_wk_wo_and_w3_of_every_block():
    assert get_engine("torchtitan").selective == "op"
    tokens = BATCH * SEQ
    # by hand: 2 FLOPs per multiply-add, (K x N) of each recomputed projection
    per_layer = 2 * tokens * 4096 * (8 * 128 + 4096 + 14336)
    mm = _recomputed(_step("torchtitan"), "matmul")
    assert {op.name for op in mm} == {"attn.qkv", "attn.out", "mlp.gate_up"}
    assert sum(op.flops * op.count for op in mm) == pytest.approx(32 * per_layer, rel=1e-9)
    # each recomputed launch at its own shape: wk's N is the KV width, w3's the FFN width
    shapes = {op.name: op.shape[3] for op in mm}
    assert shapes == {"attn.qkv": 1024, "attn.out": 4096, "mlp.gate_up": 14336}


def test_torchtitan_recomputes_the_elementwise_ops_not_sdpa():
    step = _step("torchtitan")
    fwd = {t.op.name for t in step.ops if t.op.phase == "forward" and t.op.kind == "elementwise"
           and t.op.group not in ("embedding", "head")}
    assert {op.name for op in _recomputed(step, "elementwise")} == fwd
    assert not _recomputed(step, "attention")


def test_other_engines_selective_is_the_attention_core_only():
    # under SDPA the attention core is never stored: nothing runs again (Korthikanti et al. 2022)
    step = _step("fsdp2")
    assert not [t for t in step.ops if t.op.phase == "recompute"]
    assert step.hardware_flops == pytest.approx(step.model_flops)
    titan = _step("torchtitan")
    assert titan.hardware_flops > titan.model_flops
    assert titan.model_flops == pytest.approx(step.model_flops)


def test_full_checkpointing_is_the_same_under_both_policies():
    # the policy only reads 'selective': full recomputes every layer op whoever runs it
    fwd = tuple(t.op for t in _step("fsdp2", "full").ops if t.op.phase == "forward")
    assert recompute_ops(fwd, "full", "sdpa", policy="op") == recompute_ops(fwd, "full", "sdpa")
