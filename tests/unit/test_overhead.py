"""Runtime overhead: an explicit, sourced line with a low/expected/high band, configurable."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.memory import infer_memory, train_memory
from gpuplan.models import load_model
from gpuplan.memory.overhead import runtime_overhead
from gpuplan.units import MiB


def _items(**kw):
    o = runtime_overhead(**{"gpus": 1, "zero": 0, "grad_bytes": 0, "grad_elem_bytes": 2,
                            "dynamic": 10**9, **kw})
    return o, {i.name: i for i in o.items}


def test_every_item_has_an_ordered_band_and_a_basis():
    o, items = _items(gpus=8, zero=0, grad_bytes=10**9)
    for i in o.items:
        assert 0 <= i.low <= i.expected <= i.high, i.name
        assert len(i.basis) > 20, i.name
    assert o.band() == tuple(sum(getattr(i, k) for i in o.items)
                             for k in ("low", "expected", "high"))


def test_cuda_context_figures_are_the_measured_ones():
    # pytorch/pytorch PR #86509: 287,047,680 B with lazy loading, 666,632,192 B eager
    _, items = _items()
    ctx = items["CUDA context"]
    assert ctx.low == 287_047_680
    assert ctx.high >= 666_632_192
    assert "86509" in ctx.basis


def test_cublas_default_workspace_is_4096_2_16_8():
    # CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8": two 4096 KiB chunks and eight 16 KiB chunks
    _, items = _items()
    assert items["cuBLAS/cuBLASLt workspaces"].low == 2 * 4096 * 1024 + 8 * 16 * 1024


def test_nccl_and_buckets_only_with_more_than_one_gpu():
    _, one = _items(gpus=1)
    assert "NCCL buffers" not in one and "DDP gradient buckets" not in one
    _, ddp = _items(gpus=4, zero=0, grad_bytes=123_456)
    assert ddp["DDP gradient buckets"].expected == 123_456  # flat buckets the size of the grads
    _, z2 = _items(gpus=4, zero=2, grad_elem_bytes=2)
    assert z2["ZeRO communication buckets"].expected == 500_000_000 * 2  # reduce_bucket_size 5e8


def test_megatron_keeps_no_bucket_beyond_its_gradient_buffer():
    # Megatron-Core's _ParamAndGradBuffer: param.main_grad views one contiguous grad_data, the
    # reduce-scatter writes the rank's shard of it in place (local_data_view, param_and_grad_
    # buffer.py lines 256-264 at core_r0.9.0) and the DDP all-reduce runs on bucket.grad_data:
    # neither torch DDP's bucket copy nor DeepSpeed's 5e8-element ZeRO bucket
    for zero in (0, 1):
        o, items = _items(gpus=8, zero=zero, grad_bytes=10**9, engine="megatron")
        assert "DDP gradient buckets" not in items and "ZeRO communication buckets" not in items
        assert "NCCL buffers" in items
        _, ds = _items(gpus=8, zero=zero, grad_bytes=10**9)
        assert o.bytes == sum(i.expected for n, i in ds.items()
                              if n not in ("DDP gradient buckets", "ZeRO communication buckets"))


def test_a_megatron_job_plans_without_deepspeeds_bucket():
    # the same ZeRO-1 job under DeepSpeed and under Megatron-Core: the totals differ by exactly
    # DeepSpeed's reduce_bucket_size 5e8 elements x 2 B (bf16 gradients)
    model = load_model("llama-2-7b")
    common = dict(model="llama-2-7b", mode="train", precision="bf16", gpus=8, zero=1, batch=1,
                  seq=2048)
    ds = train_memory(model, Job(engine="deepspeed", **common))
    mg = train_memory(model, Job(engine="megatron", **common))
    assert "ZeRO communication buckets" not in {i.name for i in mg.overhead.items}
    assert ds.overhead.bytes - mg.overhead.bytes == 500_000_000 * 2 + (
        ds.overhead.items[-1].expected - mg.overhead.items[-1].expected)


def test_overrides_replace_an_item_exactly():
    o, items = _items(overrides={"cuda_context": 500 * 10**6, "fragmentation": 0.1})
    assert items["CUDA context"].low == items["CUDA context"].high == 500 * 10**6
    assert items["allocator fragmentation"].expected == 10**8
    with pytest.raises(InputError, match="cuda_contxt"):
        _items(overrides={"cuda_contxt": 1})
    with pytest.raises(InputError, match="fraction"):
        _items(overrides={"fragmentation": 1.5})


def test_overhead_is_its_own_line_never_folded():
    m = load_model("gpt2")
    job = Job(model=m, batch=4, seq=512)
    t = train_memory(m, job)
    assert t.overhead_bytes == t.overhead.bytes
    assert t.total_bytes - t.overhead_bytes == max(t.phases.values())
    i = infer_memory(m, job)
    assert i.total_bytes == i.weights_bytes + i.kv_cache_bytes + i.activations_bytes + i.overhead_bytes
    low = train_memory(m, job, overhead_level="low")
    high = train_memory(m, job, overhead_level="high")
    assert low.total_bytes < t.total_bytes < high.total_bytes


def test_cuda_context_override_moves_the_total_by_the_difference():
    m = load_model("gpt2")
    job = Job(model=m, batch=4, seq=512)
    base = train_memory(m, job)
    ctx = next(i for i in base.overhead.items if i.name == "CUDA context").expected
    set_ = train_memory(m, job, overhead_overrides={"cuda_context": 300 * MiB})
    assert set_.total_bytes - base.total_bytes == 300 * MiB - ctx
