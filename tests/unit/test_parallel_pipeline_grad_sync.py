"""torch.distributed.pipelining's gradient sync under FSDP2, as torchtitan's PP rows ran it
(compute/parallel.py ``pipeline_reduce_exposed_s``, ``pipeline_accumulate_bytes``; issue 31):
hand-computed from the stage's and FSDP2's own code, the ratios to the published rows not used."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import device_from_gpu
from gpuplan.compute.parallel import (engine_layout_options, nccl_sm_share,
                                      pipeline_accumulate_bytes, pipeline_reduce_exposed_s)
from gpuplan.engines.profiles import get_engine
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")


def test_accumulation_bytes_by_hand():
    # FSDP2 post_backward with reduce_grads False, bf16 gradients, fp32 reduce dtype:
    # micro-batch 0 casts its gradient (read 2, write 4); each later one adds its bf16 gradient
    # into the fp32 sum (read 4 + read 2 + write 4); the chunk-cat at the reduce then reads the
    # fp32 sum, 2 bytes more than the bf16 gradient counted by fsdp2_copy_bytes
    assert pipeline_accumulate_bytes(1e9, 8, 2, 4) == pytest.approx(1e9 * (6 + 7 * 10 + 2))
    assert pipeline_accumulate_bytes(1e9, 1, 2, 4) == pytest.approx(1e9 * (6 + 2))
    # grows by 10 bytes an element with each micro-batch
    assert (pipeline_accumulate_bytes(5, 9, 2, 4) - pipeline_accumulate_bytes(5, 8, 2, 4)
            == pytest.approx(5 * 10))


def test_reduce_after_the_last_backward_by_hand():
    # full 1 s: reduce-scatter of fp32 (4 B) and all-gather of fp8 (1 B) weights -> 0.8 s + 0.2 s
    # one chunk: all 0.8 s exposed; the all-gather hides under a 0.5 s window
    assert pipeline_reduce_exposed_s(1.0, 1, 4, 1, 0.0, 0.5) == pytest.approx(0.8)
    # two chunks: the last one's 0.4 s exposed; the earlier 0.4 s beside 10 s of backward
    assert pipeline_reduce_exposed_s(1.0, 1, 4, 2, 10.0, 0.5) == pytest.approx(0.4)
    # ... or beside only 0.1 s of it: 0.3 s more
    assert pipeline_reduce_exposed_s(1.0, 1, 4, 2, 0.1, 0.5) == pytest.approx(0.7)
    # an all-gather longer than its window: what outlasts it; waited for (no overlap): all
    assert pipeline_reduce_exposed_s(1.0, 1, 4, 1, 0.0, 0.05) == pytest.approx(0.95)
    assert pipeline_reduce_exposed_s(1.0, 1, 4, 1, 0.0, 0.5, gather_overlap=False) == \
        pytest.approx(1.0)
    # the hidden 0.2 s slows the compute beside it by the SM share
    assert pipeline_reduce_exposed_s(1.0, 1, 4, 1, 0.0, 0.5, sm_share=0.1) == \
        pytest.approx(0.8 + 0.1 * 0.2)


def test_profiles_name_the_sync():
    assert get_engine("torchtitan").pp_grad_reduce == "after-last-backward"
    assert get_engine("megatron").pp_grad_reduce == "overlapped"
    assert engine_layout_options("torchtitan")["pp_grad_reduce"] == "after-last-backward"


def _job(**kw) -> Job:
    base = dict(model="llama-3.1-8b", mode="train", engine="torchtitan", tp=2, pp=4,
                pp_schedule="1f1b", batch=1, grad_accum=8, seq=4096, gpus=16, zero=2,
                sequence_parallel=True, precision="mixed-bf16", checkpointing="full")
    return Job(**{**base, **kw})


def test_torchtitan_pipeline_pays_the_sync_and_the_accumulation():
    model = load_model("llama-3.1-8b")
    job = _job()
    late = estimate_speed(model, H100, job, measured=None)
    usual = estimate_speed(model, H100, job, measured=None, pp_reduce_after_backward=False)
    a, b = late.layout, usual.layout
    assert a.dp_comm_s == pytest.approx(b.dp_comm_s)  # the same traffic, less of it hidden
    # the whole reduce-scatter exposed: fp32 4 B of the 2 B + 4 B traffic (bf16 all-gather)
    assert a.dp_exposed_s >= a.dp_comm_s * 4 / 6 > b.dp_exposed_s
    # the accumulation: a GPU's stage parameters x (6 + 7 x 10 + 2) bytes at the memory rate;
    # Llama 3.1 8B's 8,030,261,248 parameters (its safetensors index) over TP 2 x PP 4
    acc = a.fsdp_copy_s - b.fsdp_copy_s
    elements = acc * H100.memory_bandwidth * late.efficiency.memory / 78
    assert elements == pytest.approx(8_030_261_248 / 8, rel=1e-3)
    # inside every backward: the bubble grows by (pp - 1) / m of it
    assert a.bubble_s - b.bubble_s == pytest.approx(3 / 8 * acc, rel=1e-6)
    assert late.step_time_s > usual.step_time_s


def test_interleaved_hides_the_earlier_chunks_reduce():
    # Interleaved1F1B, 2 chunks a rank: the first chunk's reduce-scatter (half the bytes) runs
    # beside the second's last round of backwards (8 micro-batches of a 4-layer chunk here,
    # far longer); the last chunk's half is exposed
    model = load_model("llama-3.1-8b")
    job = _job(pp_schedule="interleaved:2")
    a = estimate_speed(model, H100, job, measured=None).layout
    one = estimate_speed(model, H100, _job(), measured=None).layout
    assert a.dp_comm_s == pytest.approx(one.dp_comm_s)
    rs = a.dp_comm_s * 4 / 6
    assert rs / 2 <= a.dp_exposed_s < one.dp_exposed_s
    # the exposed half, and the hidden rest slowing the compute beside it by NCCL's SM share
    share = nccl_sm_share(device_from_gpu(H100))
    assert a.dp_exposed_s == pytest.approx(rs / 2 + share * (a.dp_comm_s - rs / 2))
    assert one.dp_exposed_s == pytest.approx(rs + share * (one.dp_comm_s - rs))


def test_no_pipeline_or_no_sharding_or_other_engines_unchanged():
    model = load_model("llama-3.1-8b")
    for job in (_job(pp=1, gpus=4), _job(zero=0), _job(engine="megatron",
                                                                      zero=1)):
        a = estimate_speed(model, H100, job, measured=None)
        b = estimate_speed(model, H100, job, measured=None, pp_reduce_after_backward=False)
        assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12), job
