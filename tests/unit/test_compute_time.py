"""Roofline time, small-work occupancy, transfers, all-reduce scaling, time and cost to train, and
the achievable fractions (defaults vs this machine's measured numbers)."""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType

import pytest
from hypothesis import given, settings, strategies as st

from gpuplan.compute import (
    Op, allreduce_time, apply_measured, count_matmul, data_parallel_scaling,
    default_efficiency, device_from_gpu, estimate_transfer, link_bandwidth, small_work,
    time_matmul, time_ops, time_to_train,
)
from gpuplan.errors import InputError, UnsupportedError
from gpuplan.hardware import GPU, get_gpu
from gpuplan.job import Job


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)


H100 = get_gpu("H100-SXM-80GB")


def gpt(l: int, h: int, heads: int, *, V: int, s: int) -> "Architecture":
    from gpuplan.models._types import Architecture

    return Architecture(
        name="gpt", family="gpt2", kind="decoder", hidden_size=h, num_layers=l, num_heads=heads,
        num_kv_heads=heads, head_dim=h // heads, intermediate_size=4 * h, vocab_size=V,
        max_position_embeddings=s, tie_word_embeddings=True, mlp="gelu", activation="gelu_new",
        norm="layernorm", position="learned")


def test_catalog_h100_sxm_matches_its_datasheet():
    # NVIDIA H100 datasheet / Hopper whitepaper: 132 SMs, 2048 threads per SM, 989.4 TFLOP/s dense
    # bf16, 3.35 TB/s, PCIe 5.0 x16, NVLink 900 GB/s. The speed model builds on these numbers.
    assert (H100.sm_count, H100.max_threads_per_sm) == (132, 2048)
    assert H100.peak("bf16") == pytest.approx(989.4e12, rel=1e-3)
    assert H100.memory_bandwidth == pytest.approx(3.35e12)
    assert (H100.pcie_gen, H100.pcie_lanes) == (5, 16)
    assert H100.interconnect_bandwidth == pytest.approx(900e9)


# --------------------------------------------------------------------------------------------------
# Small work


def test_seed_128x128_output_is_16_5x_too_little_work_for_h100_sxm():
    # seed 000: "A 128 x 128 output has 16,384 elements ... A large card wants a few hundred
    # thousand threads resident ... roughly 16x more". H100-SXM: 132 SMs x 2048 = 270,336.
    sw = small_work(128, 128, H100)
    assert sw.output_elements == 128 * 128 == 16_384
    assert sw.resident_threads == 132 * 2048 == 270_336
    assert sw.work_shortfall == pytest.approx(270_336 / 16_384) == 16.5
    # as thread blocks: one 128 x 128 tile keeps 1 of 132 SMs busy
    assert (sw.tiles, sw.sms_busy, sw.waves) == (1, 1, 1)
    assert sw.wave_efficiency == pytest.approx(1 / 132)


def test_wave_quantization():
    # 133 tiles on 132 SMs need two waves, the second with one busy SM
    sw = small_work(128 * 133, 128, H100)
    assert (sw.tiles, sw.waves) == (133, 2)
    assert sw.wave_efficiency == pytest.approx(133 / 264)
    assert small_work(4096, 4096, H100).work_shortfall < 1  # 16.8M outputs: enough work
    sw = small_work(100, 300, H100, tile=(128, 256), batch=3)
    assert sw.tiles == 3 * 1 * 2 and sw.tile == (128, 256)


def test_small_matmul_runs_at_its_occupancy():
    dev = device_from_gpu(H100)
    eff = default_efficiency(dev)
    mm = count_matmul(128, 8192, 128)  # long K: compute-bound, 16,384 outputs
    t = time_matmul(mm, dev, eff, "bf16", transfer=False)
    ideal = mm.flops / (H100.peak("bf16") * eff.matmul)
    assert t.occupancy == pytest.approx(16_384 / 270_336)
    assert t.compute_s == pytest.approx(ideal * 16.5)
    # the seed's 4000 x 4000 product fills the GPU
    big = time_matmul(count_matmul(4000, 4000, 4000), dev, eff, "bf16", transfer=False)
    assert big.occupancy == 1.0
    assert big.compute_s == pytest.approx(2 * 4000**3 / (H100.peak("bf16") * eff.matmul))


def test_tiny_matmul_on_gpu_is_all_overhead():
    # seed 003: "with very small matrices, the overhead of launching work on the GPU and moving
    # data to VRAM can outweigh any benefit": the 1x3 by 3x2 product is launches and copies.
    dev = device_from_gpu(H100)
    eff = default_efficiency(dev)
    t = time_matmul(count_matmul(1, 3, 2), dev, eff, "bf16")
    assert t.compute_s < 1e-6
    assert t.launch_s == pytest.approx(4 * eff.launch_s)  # kernel + 3 copies
    assert t.total_s > 10 * t.compute_s


# --------------------------------------------------------------------------------------------------
# The roofline of one op

def _op(flops: float, nbytes: float, *, kind="matmul", parallel=10**9) -> Op:
    return Op(name="x", op_class="mlp", kind=kind, phase="forward", count=1, flops=flops,
              counted_flops=flops, bytes=nbytes, parallel_work=parallel, kernels=1)


def test_roofline_verdict_follows_the_ridge_point():
    dev = device_from_gpu(H100)
    eff = dataclasses.replace(default_efficiency(dev), matmul=1.0, memory=1.0)
    ridge = H100.ridge_point("bf16")
    assert ridge == pytest.approx(989.4e12 / 3.35e12, rel=1e-3)
    below, above = time_ops([_op(ridge * 0.5e9, 1e9), _op(ridge * 2e9, 1e9)], dev, eff, "bf16")
    assert below.bound == "memory" and below.time_s == pytest.approx(1e9 / 3.35e12)
    assert above.bound == "compute" and above.time_s == pytest.approx(ridge * 2e9 / 989.4e12,
                                                                      rel=1e-3)


def test_eight_bit_weights_run_only_the_linear_layers_in_eight_bits():
    # fp8 weights (vLLM's W8A8): the blocks' linear GEMMs at the fp8 peak (1978.9 TFLOP/s on an
    # H100 SXM), attention's products of activations and the head at bf16's (989.4); every
    # dtype at its full peak (H100's measured FP8 share, 0.709, cleared with the others)
    dev = device_from_gpu(H100)
    eff = dataclasses.replace(default_efficiency(dev), matmul=1.0, memory=1.0, matmul_by_dtype={})
    flops = 1e15  # compute-bound at either peak
    linear = dataclasses.replace(_op(flops, 1e9), weight_elements=4096 * 4096)
    scores = _op(flops, 1e9)  # Q @ K^T: no weight
    head = dataclasses.replace(_op(flops, 1e9), weight_elements=4096 * 128256, group="head")
    t = time_ops([linear, scores, head], dev, eff, "fp8")
    assert t[0].time_s == pytest.approx(flops / 1978.9e12, rel=1e-3) and t[0].dtype == "fp8"
    assert t[1].time_s == pytest.approx(flops / 989.4e12, rel=1e-3) and t[1].dtype == "bf16"
    assert t[2].time_s == pytest.approx(flops / 989.4e12, rel=1e-3) and t[2].dtype == "bf16"
    # the seed's one-product experiment keeps the dtype asked for
    assert time_ops([scores], dev, eff, "fp8", shaped=False)[0].dtype == "fp8"


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 8192), k=st.integers(1, 8192), n=st.integers(1, 8192),
       grow=st.sampled_from(["m", "k", "n"]), by=st.integers(1, 4096))
def test_more_flops_never_take_less_time(m, k, n, grow, by):
    dev = device_from_gpu(H100)
    eff = default_efficiency(dev)
    a = count_matmul(m, k, n)
    b = count_matmul(m + by * (grow == "m"), k + by * (grow == "k"), n + by * (grow == "n"))
    assert b.flops > a.flops
    ta, tb = (time_matmul(x, dev, eff, "bf16") for x in (a, b))
    assert tb.compute_s >= ta.compute_s * (1 - 1e-12)  # float rounding only
    assert tb.total_s >= ta.total_s * (1 - 1e-12)


def _scaled(gpu: GPU, f_peak: float, f_bw: float, f_sm: float, f_pcie: int) -> GPU:
    return dataclasses.replace(
        gpu, name=gpu.name + "-faster",
        peak_flops=MappingProxyType({d: v * f_peak * f_sm for d, v in gpu.peak_flops.items()}),
        memory_bandwidth=gpu.memory_bandwidth * f_bw,
        sm_count=int(gpu.sm_count * f_sm), pcie_gen=min(6, gpu.pcie_gen + f_pcie))


@settings(max_examples=40, deadline=None)
@given(f_peak=st.floats(1.0, 4.0), f_bw=st.floats(1.0, 4.0), f_sm=st.sampled_from([1.0, 1.5, 2.0]),
       f_pcie=st.integers(0, 1), batch=st.integers(1, 64), seq=st.sampled_from([16, 128, 1024]),
       mode=st.sampled_from(["train", "infer"]))
def test_a_faster_gpu_is_never_slower(f_peak, f_bw, f_sm, f_pcie, batch, seq, mode):
    # "faster" = at least as much of every resource: per-SM throughput, SMs, bandwidth, PCIe
    from gpuplan.compute import estimate_speed

    a100 = get_gpu("A100-SXM-80GB")
    fast = _scaled(a100, f_peak, f_bw, f_sm, f_pcie)
    arch = gpt(4, 512, 8, V=32000, s=2048)
    slow_e = estimate_speed(arch, a100, J(mode=mode, batch=batch, seq=seq), measured=None)
    fast_e = estimate_speed(arch, fast, J(mode=mode, batch=batch, seq=seq), measured=None)
    assert fast_e.step_time_s <= slow_e.step_time_s * (1 + 1e-12)
    if mode == "infer":
        assert fast_e.request_time_s <= slow_e.request_time_s * (1 + 1e-12)


# --------------------------------------------------------------------------------------------------
# Transfers


def test_transfer_time_over_pcie():
    dev = device_from_gpu(H100)
    eff = default_efficiency(dev)
    # PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s per direction
    assert dev.host_link_bandwidth == pytest.approx(32e9 * 16 * 128 / 130 / 8)
    nbytes = 256 * 3 * 224 * 224 * 4  # a batch of 256 fp32 224x224 RGB images
    pinned = estimate_transfer(nbytes, dev, eff, compute_s=0.010)
    assert pinned.time_s == pytest.approx(nbytes / (dev.host_link_bandwidth * 0.80)
                                          + eff.launch_s)
    assert pinned.overlapped and pinned.exposed_s == 0.0  # 3.1 ms hides under 10 ms
    pageable = estimate_transfer(nbytes, dev, eff, compute_s=0.010, pinned=False)
    assert not pageable.overlapped and pageable.exposed_s == pageable.time_s
    assert pageable.time_s > 1.9 * (pinned.time_s - eff.launch_s)
    assert any("pin_memory=True" in a for a in pageable.advice)
    slow = estimate_transfer(nbytes, dev, eff, compute_s=0.001)
    assert slow.exposed_s == pytest.approx(slow.time_s - 0.001)
    assert any("keep the data on the GPU" in a for a in slow.advice)
    with pytest.raises(InputError, match="pageable memory cannot overlap"):
        estimate_transfer(nbytes, dev, eff, compute_s=1, pinned=False, overlap=True)


# --------------------------------------------------------------------------------------------------
# Data-parallel scaling


def test_ring_allreduce_time():
    # 2(N-1)/N x bytes / bus bandwidth: 8 GPUs, 14 GB of bf16 gradients, 360 GB/s
    assert allreduce_time(14e9, 8, 360e9) == pytest.approx(2 * 7 / 8 * 14e9 / 360e9)
    assert allreduce_time(14e9, 1, 360e9) == 0.0
    with pytest.raises(InputError):
        allreduce_time(1e9, 0, 1e9)


def test_link_bandwidths():
    dev = device_from_gpu(H100)
    assert link_bandwidth("nvlink", dev)[1] == pytest.approx(450e9)  # 900 GB/s both directions
    assert link_bandwidth(None, dev)[1] == pytest.approx(450e9)
    assert link_bandwidth("pcie", dev)[1] == pytest.approx(dev.host_link_bandwidth)
    assert link_bandwidth("400Gb/s", dev)[1] == pytest.approx(50e9)
    assert link_bandwidth("50", dev)[1] == pytest.approx(50e9)
    assert link_bandwidth("25GB/s", dev)[1] == pytest.approx(25e9)
    assert link_bandwidth(12.5, dev)[1] == pytest.approx(12.5e9)
    t4 = device_from_gpu(get_gpu("T4"))
    with pytest.raises(UnsupportedError, match="T4 has no NVLink"):
        link_bandwidth("nvlink", t4)
    assert link_bandwidth(None, t4)[0].startswith("PCIe 3.0")
    for bad in ("fast", "-5", "0", "0GB/s"):
        with pytest.raises(InputError):
            link_bandwidth(bad, dev)


def test_data_parallel_scaling_is_never_linear():
    dev = device_from_gpu(H100)
    eff = default_efficiency(dev)
    kw = dict(step_s=0.5, backward_s=0.3, gradient_bytes=14_000_000_000, gpus=8,
              link="100 Gb/s", link_bandwidth=12.5e9, eff=eff, tokens_per_step=16384)
    over = data_parallel_scaling(overlap=True, **kw)
    serial = data_parallel_scaling(overlap=False, **kw)
    assert [r.gpus for r in over.rows] == list(range(1, 9))
    assert over.rows[0].speedup == 1.0 and over.rows[0].exposed_comm_s == 0
    for a, b in zip(over.rows[1:], over.rows[2:]):
        assert b.speedup > a.speedup  # more GPUs still help ...
        assert b.efficiency <= a.efficiency  # ... but less and less
    for o, s in zip(over.rows[1:], serial.rows[1:]):
        assert o.efficiency < 1 and s.efficiency < o.efficiency
        ring = 2 * (o.gpus - 1) / o.gpus * 14e9 / (12.5e9 * 0.8)
        assert s.exposed_comm_s == pytest.approx(ring + math.ceil(14e9 / (25 * 2**20))
                                                 * eff.launch_s)
        assert o.exposed_comm_s == pytest.approx(s.exposed_comm_s - 0.3)
    big = data_parallel_scaling(overlap=True, **{**kw, "gpus": 64})
    assert [r.gpus for r in big.rows] == [1, 2, 4, 8, 16, 32, 64]


def _dp_table(gpu, **job):
    from gpuplan.compute import estimate_speed
    from gpuplan.models import load_model

    est = estimate_speed(load_model("llama-3.1-8b"), gpu, J(batch=1, seq=2048, **job), measured=None,
                         overlap_comm=False)
    return est, {r.gpus: r for r in est.scaling.rows}


def test_data_parallel_scaling_crosses_the_network_beyond_a_node():
    """A data-parallel job over more GPUs than a node holds reduces its gradients over the
    network between nodes (400 Gb/s per GPU unless --inter-node says otherwise, each node's
    GPUs on their own NICs), not over NVLink across every GPU; the rows inside a node keep the
    node's link. Hand-computed ring:
    2 (n - 1) / n x gradient bytes / (rate x comm fraction) + one launch per 25 MiB bucket."""
    est, rows = _dp_table(H100, gpus=16)
    s, eff = est.scaling, est.efficiency
    g = s.gradient_bytes
    assert g == est.trainable_params * 2  # bf16 gradients, every weight trains

    def ring(n, rate):
        return 2 * (n - 1) / n * g / (rate * eff.comm) + math.ceil(g / (25 * 2**20)) * eff.launch_s

    nvlink = H100.interconnect_bandwidth / 2  # per direction
    assert rows[8].allreduce_s == pytest.approx(ring(8, nvlink))
    assert rows[8].link == "NVLink 4"
    # NCCL's ring crosses the nodes on every NIC the group holds in each node (8 GPUs, 8 NICs
    # of 400 Gb/s: 8 x 50 GB/s = 400 GB/s), the node's NVLink (450 GB/s a direction) above it
    assert rows[16].allreduce_s == pytest.approx(ring(16, min(nvlink, 8 * 400e9 / 8)))
    assert rows[16].link == "InfiniBand 400 Gb/s"
    assert est.comm_exposed_s == pytest.approx(rows[16].exposed_comm_s)
    assert s.topology.default_network and any("assumed" in n for n in s.notes)
    # the network named, and a node of 16 GPUs
    _, eth = _dp_table(H100, gpus=16, inter_node="eth-100")
    assert eth[16].allreduce_s == pytest.approx(ring(16, 8 * 100e9 / 8))
    assert eth[8].allreduce_s == rows[8].allreduce_s
    _, big_node = _dp_table(H100, gpus=16, gpus_per_node=16)
    assert big_node[16].allreduce_s == pytest.approx(ring(16, nvlink))
    # --link names one link for every row, as before
    from gpuplan.compute import estimate_speed

    from gpuplan.models import load_model

    named = estimate_speed(load_model("llama-3.1-8b"), H100, J(batch=1, seq=2048, gpus=16), measured=None,
                           overlap_comm=False, link="nvlink")
    assert named.scaling.rows[-1].allreduce_s == pytest.approx(ring(16, nvlink))
    assert named.scaling.topology is None


def test_data_parallel_scaling_across_pcie_nodes_rides_the_slower_hop():
    """On a PCIe box a ring spanning nodes still crosses PCIe inside each node: the slower of
    the two links sets its rate (here PCIe 4.0 x16 against a 400 Gb/s NIC per GPU)."""
    l4 = get_gpu("L4")
    est, rows = _dp_table(l4, gpus=16)
    pcie = device_from_gpu(l4).host_link_bandwidth
    assert pcie < 400e9 / 8
    g, eff = est.scaling.gradient_bytes, est.efficiency
    assert rows[16].allreduce_s == pytest.approx(
        2 * 15 / 16 * g / (pcie * eff.comm) + math.ceil(g / (25 * 2**20)) * eff.launch_s)


def test_a_mistyped_inter_node_link_fails_on_one_gpu_too():
    from gpuplan.compute import estimate_speed
    from gpuplan.models import load_model

    with pytest.raises(InputError, match="inter_node 'bogus'"):
        estimate_speed(load_model("llama-3.1-8b"), H100, J(inter_node="bogus"), measured=None)


# --------------------------------------------------------------------------------------------------
# Time and cost


def test_time_and_cost_to_train():
    tt = time_to_train(work=1e12, rate_per_s=1e6, gpus=8, price_per_gpu_hour=2.5)
    assert tt.seconds == pytest.approx(1e6)
    assert tt.days == pytest.approx(1e6 / 86400)
    assert tt.gpu_hours == pytest.approx(8e6 / 3600)
    assert tt.cost == pytest.approx(8e6 / 3600 * 2.5)
    assert time_to_train(work=1e9, rate_per_s=1e3, gpus=1).cost is None
    for bad in (dict(work=0, rate_per_s=1, gpus=1), dict(work=1, rate_per_s=0, gpus=1),
                dict(work=1, rate_per_s=1, gpus=0),
                dict(work=1, rate_per_s=1, gpus=1, price_per_gpu_hour=-1)):
        with pytest.raises(InputError):
            time_to_train(**bad)


# --------------------------------------------------------------------------------------------------
# Achievable fractions: stated defaults, replaced by measurements of the same device


def test_default_fractions_carry_their_basis():
    eff = default_efficiency(device_from_gpu(H100))
    assert eff.matmul == 0.80 and "794.5" in eff.basis["matmul"]
    assert eff.memory == 0.85 and eff.basis["memory"].startswith("default")
    assert default_efficiency(device_from_gpu(get_gpu("MI300X"))).matmul == 0.60
    assert eff.measured == ()
    with pytest.raises(InputError):
        dataclasses.replace(eff, matmul=0.0)


class FakeMeasured:
    """The interface of gpuplan.measure.store.Measured (flops/bandwidth_of/overhead_of)."""

    run_id, created_utc = 7, "2025-01-01T00:00:00Z"

    def __init__(self, device_name: str, flops: dict, bw: dict, overhead: dict):
        self.device_names = {"cpu": "Some CPU", "cuda:0": device_name}
        self._f, self._b, self._o = flops, bw, overhead

    def flops(self, device, dtype):
        return self._f.get((device, dtype))

    def bandwidth_of(self, device, kind):
        return self._b.get((device, kind))

    def overhead_of(self, device, kind):
        return self._o.get((device, kind))


def test_measured_numbers_replace_the_defaults_for_the_same_gpu():
    dev = device_from_gpu(H100)
    name = H100.device_names[0]
    m = FakeMeasured(name, {("cuda:0", "bf16"): 700e12},
                     {("cuda:0", "device_copy"): 3.0e12, ("cuda:0", "h2d_pinned"): 50e9},
                     {("cuda:0", "kernel_launch"): 7e-6})
    dev2, eff = apply_measured(dev, default_efficiency(dev), m)
    assert eff.matmul_fraction("bf16") == pytest.approx(700e12 / H100.peak("bf16"))
    assert eff.matmul_fraction("fp16") == 0.80  # not measured: the default stays
    assert eff.memory == pytest.approx(3.0e12 / 3.35e12)
    assert eff.pcie_pinned == pytest.approx(50e9 / dev.host_link_bandwidth)
    assert eff.launch_s == 7e-6
    assert set(eff.measured) >= {"matmul_bf16", "memory", "pcie_pinned", "launch_s"}
    assert "run 7" in eff.basis["memory"]
    # a run on another GPU changes nothing
    other = FakeMeasured(get_gpu("A100-SXM-80GB").device_names[0],
                         {("cuda:0", "bf16"): 250e12}, {}, {})
    assert apply_measured(dev, default_efficiency(dev), other)[1] == default_efficiency(dev)


@pytest.mark.parametrize("sharding,ckpt,gathers", [
    ("deepspeed", "full", 3), ("fsdp2", "full", 2), ("deepspeed", "none", 2),
    ("deepspeed", "full", "replay"), ("deepspeed", "none", "replay"),
])
def test_zero3_traffic_per_micro_batch_and_the_recompute_gather(sharding, ckpt, gathers):
    """ZeRO-3 moves, for every micro-batch, a reduce-scatter of the gradients and all-gathers of
    the weights (forward, backward; DeepSpeed with full checkpointing a third for the recompute,
    FSDP not), each half an all-reduce's bytes: (grad + gathers x weight) / 2 x micro-batches.
    Those counts hold for an architecture without its tensor list; given the model, DeepSpeed's
    are its coordinator's fetches ("replay": fewer, its reuse distance keeping some gathered)."""
    from gpuplan.compute import estimate_speed
    from gpuplan.engines.zero3 import deepspeed_gathered
    from gpuplan.models import load_model

    m = load_model("llama-3.1-8b")
    job = J(batch=1, seq=2048, gpus=16, zero=3, grad_accum=4, checkpointing=ckpt,
            sharding=sharding)
    n = m.params.total
    if gathers == "replay":
        est = estimate_speed(m, H100, job, measured=None)
        g = deepspeed_gathered(m, ckpt == "full").gathers
        assert g < 2
        assert est.scaling.gradient_bytes == pytest.approx((n * 2 + g * n * 2) / 2 * 4, abs=1)
        return
    est = estimate_speed(m if sharding == "fsdp2" else m.architecture, H100, job, measured=None)
    n = est.trainable_params
    assert est.scaling.gradient_bytes == int((n * 2 + gathers * n * 2) / 2 * 4)
