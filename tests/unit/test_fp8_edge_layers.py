"""The first and last blocks kept BF16 under a narrow recipe (Megatron --first-last-layers-bf16
--num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 N), checked by hand."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")
# Llama 3.1 70B: 80 blocks, each q 8192^2 + k,v 2 x 8192 x 1024 + o 8192^2 + 3 x 8192 x 28672
PER_BLOCK = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672


def _job(**kw):
    base = dict(model="llama-3.1-8b", mode="train", engine="megatron", precision="fp8-current",
                batch=1, seq=4096)
    return Job(**{**base, **kw})


def _ops(est, name, phase="forward"):
    return [t for t in est.step.ops if t.op.name == name and t.op.phase == phase]


def test_edge_blocks_run_their_gemms_at_the_bf16_rate():
    m = load_model("llama-3.1-8b")  # 32 blocks
    one = estimate_speed(m, H100, _job(first_last_layers_bf16=1), measured=None)
    bf16 = estimate_speed(m, H100, _job(precision="mixed-bf16"), measured=None)
    for name in ("attn.qkv", "mlp.gate_up", "mlp.down"):
        narrow, wide = sorted(_ops(one, name), key=lambda t: t.op.wide)
        assert (narrow.op.count, wide.op.count) == (30, 2)  # blocks 0 and 31 BF16
        assert wide.op.wide and not narrow.op.wide
        # a BF16 block's GEMM takes what the same GEMM takes in a BF16 job
        assert wide.time_s == pytest.approx(_ops(bf16, name)[0].time_s, rel=1e-9)
    # the activation casts cover 30 of the 32 blocks
    q0 = _ops(estimate_speed(m, H100, _job(), measured=None), "fp8.quantize")[0].op.bytes
    assert _ops(one, "fp8.quantize")[0].op.bytes == pytest.approx(q0 * 30 / 32, rel=1e-9)


def test_edge_blocks_keep_no_fp8_copies():
    m = load_model("llama-3.1-70b")
    mem = {n: train_memory(m, Job(model=m, mode="train", precision="fp8-current",
                                  engine="megatron", first_last_layers_bf16=n)) for n in (0, 2)}
    # Hopper: 1 B FP8 copy + 1 B transpose per element of the 76 narrow blocks, not 80
    assert mem[0].weights_bytes - mem[2].weights_bytes == 2 * 4 * PER_BLOCK


def test_edge_blocks_are_gathered_bf16():
    m = load_model("llama-3.1-8b")
    params, edge = 8_030_261_248, 2 * 128_256 * 4_096
    narrow = (params - edge) * 30 // 32
    g = (narrow + (params - narrow) * 2) / params
    kw = dict(gpus=16, tp=2, zero=1, sequence_parallel=True, grad_accum=4, fp8_param_gather=True)
    est = estimate_speed(m, H100, _job(**kw, first_last_layers_bf16=1), measured=None)
    assert any(f"{g:.3f} B an element" in n for n in est.notes)


def test_refusals():
    with pytest.raises(InputError, match="first_last_layers_bf16.*narrow recipe"):
        Job(model="llama-3.1-8b", mode="train", precision="mixed-bf16", first_last_layers_bf16=1)
    with pytest.raises(InputError, match="give at most 15"):
        estimate_speed(load_model("llama-3.1-8b"), H100, _job(first_last_layers_bf16=16),
                       measured=None)


def test_a_pipeline_stage_that_holds_an_edge_block_runs_it_wide():
    """Under PP the BF16 blocks sit on the first and the last stage, and a pipeline runs at its
    slowest stage: the last (it holds the head) carries one whole BF16 block, not the mean's
    share of two. On 32 blocks the last stage holds block 31 at PP 2 (16 blocks) and at PP 4
    (8 blocks) alike, so the edge block costs a micro-batch the same (wide - narrow) at both;
    averaged over the blocks it would cost 16 x 2 / 32 = 1 and 8 x 2 / 32 = 1/2 of that."""
    m = load_model("llama-3.1-8b")

    def extra(pp):
        def compute(**kw):
            job = _job(gpus=pp, pp=pp, grad_accum=8, **kw)
            return estimate_speed(m, H100, job, measured=None).layout.compute_s
        return compute(first_last_layers_bf16=1) - compute()

    two, four = extra(2), extra(4)
    assert two > 0
    assert four == pytest.approx(two, rel=1e-9)
