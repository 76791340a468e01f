"""FSDP2's copies on the compute stream (compute/parallel.py fsdp2_copy_bytes): the copy-out of
the gathered weights (foreach_all_gather_copy_out's split_with_sizes_copy) and the chunk-cat of
the gradients into the reduce-scatter input (foreach_reduce's _chunk_cat), by hand; FSDP1's one
copy there, the cat that joins a unit's gradients into its flat gradient (fsdp1_grad_cat_bytes);
and the other
host-side copy a step carries beside its kernels, a paged optimizer's overflow migrated back
(compute/speed.py paged_migration_s, TrainMemory.paged_overflow_bytes)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import fsdp1_grad_cat_bytes, fsdp2_copy_bytes
from gpuplan.engines.profiles import get_engine
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.models import load_model

H100 = get_gpu("H100-SXM-80GB")


def test_copy_bytes_by_hand():
    # 1e9 elements, bf16 gathered and read, fp32 written by the chunk-cat
    # copy-out: 2 B read + 2 B written = 4e9 B; chunk-cat: 2 + 4 = 6e9 B
    kw = dict(gathers=2, gathered_bytes=2, grad_bytes=2, reduce_bytes=4)
    # ZeRO-3, 2 micro-batches: 2 x (2 copy-outs + 1 chunk-cat) = 2 x 14e9
    assert fsdp2_copy_bytes(1e9, zero=3, micro_batches=2, **kw) == pytest.approx(28e9)
    # ZeRO-2 (no reshard): one copy-out and one chunk-cat a step, whatever the micro-batches
    assert fsdp2_copy_bytes(1e9, zero=2, micro_batches=4, **kw) == pytest.approx(10e9)
    # FP8 all-gather: 1 B an element read and written by the copy-out
    assert fsdp2_copy_bytes(1e9, zero=3, micro_batches=1, gathers=2, gathered_bytes=1,
                            grad_bytes=2, reduce_bytes=4) == pytest.approx(10e9)


def test_only_the_parameters_with_a_gradient_are_chunk_cat():
    # LoRA over a frozen base: FSDPParamGroup.post_backward hands foreach_reduce the parameters
    # whose .grad is set; every parameter is still gathered and copied out.
    # 1e9 gathered, 1e6 adapters, bf16 everywhere: 2 copy-outs x (2 + 2) B x 1e9 = 8e9 B,
    # chunk-cat (2 + 2) B x 1e6 = 4e6 B
    kw = dict(zero=3, micro_batches=1, gathers=2, gathered_bytes=2, grad_bytes=2, reduce_bytes=2)
    assert fsdp2_copy_bytes(1e9, grad_elements=1e6, **kw) == pytest.approx(8.004e9)
    assert fsdp2_copy_bytes(1e9, grad_elements=None, **kw) == pytest.approx(12e9)


def test_torchtune_lora_fsdp_step_carries_the_copy_out():
    # torchtune's shard_model calls fully_shard without a MixedPrecisionPolicy: bf16 reduce (2 B)
    assert get_engine("torchtune").fsdp2_reduce_bytes == 2
    a100 = get_gpu("A100-SXM-80GB")
    model = load_model("llama-3.1-70b")
    job = Job(model="llama-3.1-70b", mode="train", engine="torchtune", precision="bf16",
              batch=2, seq=2048, gpus=8, zero=3, checkpointing="full", lora_rank=16,
              lora_targets=("q_proj", "k_proj", "v_proj"))
    est = estimate_speed(model, a100, job, measured=None, link="nvlink")
    n, t = model.params.total, est.trainable_params
    # rank 16 on q (8192 -> 8192), k and v (8192 -> 1024): A 3 x 16 x 8192 + B (8192 + 2 x 1024)
    # x 16 = 557,056 a layer, x 80 layers
    assert t == 80 * (3 * 16 * 8192 + (8192 + 2 * 1024) * 16) == 44_564_480
    rate = a100.memory_bandwidth * est.efficiency.memory
    # 2 copy-outs x (2 + 2) B over every weight, the chunk-cat (2 + 2) B over the adapters only
    assert est.fsdp_copy_s == pytest.approx((8 * n + 4 * t) / rate, rel=1e-6)
    # ~70.6e9 x 8 B at 2,039 GB/s x 0.85: about a third of a second
    assert 0.30 < est.fsdp_copy_s < 0.35


def _job(**kw):
    base = dict(model="llama-3.1-8b", mode="train", precision="mixed-bf16", batch=2, seq=4096,
                gpus=8, zero=3, checkpointing="full")
    return Job(**{**base, **kw})


def test_torchtitan_fsdp_step_carries_the_copies():
    assert get_engine("torchtitan").fsdp2_reduce_bytes == 4  # mixed_precision_reduce float32
    model = load_model("llama-3.1-8b")
    est = estimate_speed(model, H100, _job(engine="torchtitan"), measured=None, link="nvlink")
    n = est.trainable_params
    rate = H100.memory_bandwidth * est.efficiency.memory
    # per micro-batch: 2 copy-outs x (2 + 2 B) + chunk-cat 2 + 4 B = 14 B an element
    assert est.fsdp_copy_s == pytest.approx(n * 14 / rate)
    assert est.step_time_s == pytest.approx(est.step.time_s + est.transfer.exposed_s
                                            + est.comm_exposed_s + n * 14 / rate)
    assert est.to_dict(ops=False)["fsdp_copy_s"] == est.fsdp_copy_s
    # the generic fsdp2 profile's rows ran FSDP1 (a flat parameter, no copy-out): only the
    # split backward's cat of the gradients, bf16 read + bf16 written = 4 B an element
    plain = estimate_speed(model, H100, _job(engine="fsdp2"), measured=None, link="nvlink")
    assert plain.fsdp_copy_s == pytest.approx(n * 4 / rate)
    # one GPU shards nothing
    one = estimate_speed(model, H100, _job(engine="torchtitan", gpus=1, zero=0),
                         measured=None)
    assert one.fsdp_copy_s == 0.0


def test_fsdp1_grad_cat_bytes_by_hand():
    # FSDP1 (a FlatParameter a unit): each backward's split-backward cat reads and writes every
    # gradient once at its width -- 1e9 bf16 gradients: 2 + 2 B = 4e9 B a micro-batch; no
    # copy-out, so the gathers do not enter; three micro-batches three cats
    assert fsdp1_grad_cat_bytes(1e9, micro_batches=1, grad_bytes=2) == pytest.approx(4e9)
    assert fsdp1_grad_cat_bytes(1e9, micro_batches=3, grad_bytes=2) == pytest.approx(12e9)
    # Composer's DEFAULT mixed precision keeps fp32 parameters, so fp32 gradients: 8 B
    assert fsdp1_grad_cat_bytes(1e9, micro_batches=1, grad_bytes=4) == pytest.approx(8e9)
    # against FSDP2 at the same bf16 widths: 2 copy-outs (4 B each) + chunk-cat (4 B) = 12 B
    assert fsdp2_copy_bytes(1e9, zero=3, micro_batches=1, gathers=2, gathered_bytes=2,
                            grad_bytes=2, reduce_bytes=2) == pytest.approx(3 * 4e9)


def test_fsdp1_profile_times_the_cat_not_fsdp2s_copies():
    # the fsdp2 profile times FSDP1's cat (its published rows ran FullyShardedDataParallel);
    # torchtitan and torchtune time FSDP2's copies, not the cat
    assert get_engine("fsdp2").fsdp1_grad_cat and get_engine("fsdp2").fsdp2_reduce_bytes == 0
    assert not get_engine("torchtitan").fsdp1_grad_cat
    assert not get_engine("torchtune").fsdp1_grad_cat
    model = load_model("llama-3.1-8b")
    rate = H100.memory_bandwidth
    # on a topology (16 GPUs, 2 nodes of 8), 2 micro-batches: 2 cats of the whole model's
    # bf16 gradients, and the step carries them
    job = _job(engine="fsdp2", gpus=16, grad_accum=2)
    est = estimate_speed(model, H100, job, measured=None,
                         topology=topology_for(H100, gpus_per_node=8))
    lt = est.layout
    rate *= est.efficiency.memory
    assert lt is not None and lt.layout.micro_batches == 2
    assert lt.fsdp_copy_s == pytest.approx(2 * est.trainable_params * 4 / rate, rel=1e-6)
    assert lt.step_s == pytest.approx(lt.compute_s + lt.bubble_s + lt.tp_comm_s + lt.cp_comm_s
                                      + lt.ep_comm_s + lt.pp_comm_s + lt.dp_exposed_s
                                      + lt.optimizer_s + lt.fsdp_copy_s)
    # one GPU, or ZeRO-0 (DDP): nothing sharded, no flat gradient timed
    assert estimate_speed(model, H100, _job(engine="fsdp2", gpus=1, zero=0),
                          measured=None).fsdp_copy_s == 0.0
    assert estimate_speed(model, H100, _job(engine="fsdp2", zero=0), measured=None,
                          link="nvlink").fsdp_copy_s == 0.0


def test_layout_step_carries_the_copies():
    # CP 2 x DP 4 under torchtitan: FSDP over dp x cp = 8, the whole model on every rank (no
    # TP/PP), one micro-batch: 14 B an element once
    model = load_model("llama-3.1-8b")
    est = estimate_speed(model, H100, _job(engine="torchtitan", cp=2, seq=8192),
                         measured=None)
    lt = est.layout
    rate = H100.memory_bandwidth * est.efficiency.memory
    assert lt.fsdp_copy_s == pytest.approx(est.trainable_params * 14 / rate, rel=1e-6)
    assert lt.step_s == pytest.approx(lt.compute_s + lt.bubble_s + lt.tp_comm_s + lt.cp_comm_s
                                      + lt.ep_comm_s + lt.pp_comm_s + lt.dp_exposed_s
                                      + lt.optimizer_s + lt.fsdp_copy_s)
    assert lt.to_dict()["fsdp_copy_s"] == lt.fsdp_copy_s


def test_a_plan_times_a_paged_optimizers_overflow_on_each_gpu(tmp_path, monkeypatch):
    # gpuplan fit's speed section reads the plan's own memory: PagedAdamW8bit's 2 x
    # (8,030,261,248 - 65 x 4,096) B of states over what the 24 GB RTX 4090 has left beside the
    # rest of the step come back over PCIe each step; on an 80 GB A100 they all fit (no time)
    from gpuplan.compute.speed import paged_migration_s
    from gpuplan.fit import plan

    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    job = Job(model="llama-3.1-8b", mode="train", engine="torchtune", precision="bf16", batch=2,
              seq=2048, runtime="compile", loss_chunks=8, checkpointing="full",
              optimizer="paged-adamw-8bit", optimizer_in_backward=True)
    p = plan(job, ["RTX-4090", "A100-SXM-80GB"], speed=True, suggest=False,
             search_gpu_counts=False)  # the fewest-GPU search shards: fsdp2 plans no paged states
    assert p.train.paged_bytes == 2 * (8_030_261_248 - 65 * 4096)
    over = p.train.paged_bytes - (get_gpu("RTX-4090").memory_bytes
                                  - (p.train.total_bytes - p.train.paged_bytes))
    assert 9.5 * 2**30 < over < 10.5 * 2**30
    rows = {r.gpu: r for r in p.speed.rows}
    est = rows["RTX-4090"].train
    # 31.51 GB/s (PCIe 4.0 x16) x 0.80 pinned: ~0.43 s a step
    assert est.paged_s == pytest.approx(over / (16e9 * 128 / 130 * 16 / 8 * 0.80))
    assert est.paged_s == pytest.approx(paged_migration_s(over, _device("RTX-4090"),
                                                          est.efficiency))
    assert rows["A100-SXM-80GB"].train.paged_s == 0.0


def _device(name):
    from gpuplan.compute.device import device_from_gpu

    return device_from_gpu(get_gpu(name))


def test_paged_overflow_by_hand():
    # 10 GB paged of a 30 GB plan on a 24 GB card: 20 GB held beside them, 4 GB left, 6 GB over
    from gpuplan.memory import train_memory

    base = train_memory(load_model("gpt2"), Job(model="gpt2", mode="train", batch=1, seq=128))
    mem = replace(base, total_bytes=30 * 10**9, paged_bytes=10 * 10**9)
    assert mem.paged_overflow_bytes(24 * 10**9) == 6 * 10**9
    assert mem.paged_overflow_bytes(80 * 10**9) == 0
    # nothing paged, nothing over, however small the card
    assert replace(base, total_bytes=30 * 10**9).paged_overflow_bytes(10**9) == 0
