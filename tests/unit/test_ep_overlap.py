"""--ep-overlap: Megatron-Core's batch-level EP overlap (--overlap-moe-expert-parallel-comm).

The exposed all-to-all follows the schedule by hand: in the steady state a micro-batch's
all-to-alls hide under the paired micro-batch's compute, only what outlasts it shows; the
warm-up forwards and cool-down backwards (Megatron's get_pp_rank_microbatches count) keep all
of theirs. Megatron's own checks (transformer_config.py) are the Job's refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import device_from_gpu
from gpuplan.compute.parallel import ep_overlap_exposed_s, ep_overlap_sm_share
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout


def test_exposed_share_interleaved_by_hand():
    # PP 8, 4 chunks, 512 micro-batches: 7 x 2 + 3 x 8 + 1 = 39 unpaired chunk passes of 2048
    lay = Layout(pp=8, chunks=4, schedule="interleaved", micro_batches=512, ep=32, ep_overlap=True)
    share = 39 / 2048
    assert ep_overlap_exposed_s(3.0, 2.0, lay) == pytest.approx(share * 3.0 + (1 - share) * 1.0)
    # compute longer than the all-to-alls: only the unpaired passes show
    assert ep_overlap_exposed_s(1.0, 2.0, lay) == pytest.approx(share * 1.0)


def test_exposed_share_without_pipeline_by_hand():
    # PP 1: the first forward and the last backward are alone, one micro-batch of 64
    lay = Layout(micro_batches=64, ep=8, ep_overlap=True)
    assert ep_overlap_exposed_s(4.0, 1.0, lay) == pytest.approx(4.0 / 64 + 63 / 64 * 3.0)
    # a single micro-batch has nothing to pair with
    assert ep_overlap_exposed_s(4.0, 1.0, Layout(micro_batches=1, ep=8)) == pytest.approx(4.0)


def test_hidden_part_costs_the_dispatchers_sm_share_by_hand():
    # PP 1, 64 micro-batches; all-to-alls 3.0 beside compute 2.0: 2.0 hidden, 1.0 exposed a pair.
    # With the kernels on a fifth of the SMs the paired compute loses 0.2 x 2.0 = 0.4 more.
    lay = Layout(micro_batches=64, ep=8, ep_overlap=True)
    assert ep_overlap_exposed_s(3.0, 2.0, lay, 0.2) == pytest.approx(
        3.0 / 64 + 63 / 64 * (1.0 + 0.4))
    # all-to-alls shorter than the compute: all of them hidden, a fifth of them charged
    assert ep_overlap_exposed_s(1.0, 2.0, lay, 0.2) == pytest.approx(1.0 / 64 + 63 / 64 * 0.2)


def _device(sms, interconnect="NVLink 4.0"):
    return replace(device_from_gpu(get_gpu("H100-SXM-80GB")), sm_count=sms,
                   interconnect=interconnect)


def test_dispatcher_sm_shares_by_hand():
    # DeepEP: Megatron-Core's moe_deepep_num_sms default 20; H100 SXM 132 SMs
    assert ep_overlap_sm_share("deepep", _device(132)) == pytest.approx(20 / 132)
    # HybridEP: Megatron-Bridge's moe_hybridep_num_sms 32; B200 148 SMs
    assert ep_overlap_sm_share("hybridep", _device(148)) == pytest.approx(32 / 148)
    # NCCL's all-to-all: the 24 CTAs of an overlapped NCCL collective, NVLink boards only
    assert ep_overlap_sm_share("alltoall", _device(132)) == pytest.approx(24 / 132)
    assert ep_overlap_sm_share("alltoall", _device(132, "PCIe 5.0")) == 0.0
    assert ep_overlap_sm_share("deepep", _device(0)) == 0.0


def _layout_time(**kw):
    job = Job(model="qwen3-30b-a3b", mode="train", engine="megatron", precision="mixed-bf16",
              gpus=8, ep=8, zero=1, seq=4096, grad_accum=16, **kw)
    est = estimate_speed(load_model("qwen3-30b-a3b"), get_gpu("H100-SXM-80GB"), job,
                         measured=None, link="nvlink")
    return est.layout


def test_the_step_exposes_what_the_schedule_says():
    """With the overlap the step's exposed EP time is the hand formula applied to the plain
    step's own per-micro-batch all-to-all and compute, the hidden part charged NCCL's 24 CTAs
    of the H100's 132 SMs; nothing else moves."""
    plain, over = _layout_time(), _layout_time(ep_overlap=True)
    m = 16
    ep_c, t_mb = plain.ep_comm_s / m, plain.compute_s / m
    assert ep_c > 0
    paired = max(0.0, ep_c - t_mb) + 24 / 132 * min(ep_c, t_mb)
    want = m * (ep_c / m + (1 - 1 / m) * paired)
    assert over.ep_comm_s == pytest.approx(want, rel=1e-9)
    assert over.compute_s == pytest.approx(plain.compute_s, rel=1e-12)
    assert over.step_s < plain.step_s


@pytest.mark.parametrize("kw, field", [
    (dict(engine="torchtitan"), "engine"),
    (dict(ep=1), None),
    (dict(checkpointing="full"), "checkpointing"),
    (dict(pp=2, grad_accum=8), None),
])
def test_refused_where_megatron_refuses(kw, field):
    base = dict(model="qwen3-30b-a3b", mode="train", engine="megatron", gpus=8, ep=8,
                ep_overlap=True)
    with pytest.raises(InputError) as e:
        Job(**{**base, **kw})
    assert e.value.field == "ep_overlap" and "\n" not in str(e.value)
    if field:
        assert field in e.value.fix


def test_interleaved_pipeline_accepted():
    job = Job(model="qwen3-30b-a3b", mode="train", engine="megatron", gpus=16, pp=2, ep=8,
              grad_accum=8, pp_schedule="interleaved:12", ep_overlap=True)
    assert Layout.of(job).ep_overlap and Layout.of(job).to_dict()["ep_overlap"] is True
