"""Megatron's --overlap-p2p-communication under the interleaved schedule.

By hand from megatron/core/pipeline_parallel/schedules.py (NVIDIA/Megatron-LM@d98e8a64,
forward_backward_pipelining_with_interleaving): the first stage's ``(pp - 1) x 2 + (chunks - 1)
x pp`` warm-up forwards and as many cool-down backwards send blocking; each steady-state 1F1B
iteration's two sends (its forward's, its backward's) run beside one chunk's forward and
backward, ``t_mb / chunks``, exposed only what outlasts it. Megatron-LM turns the overlap off
without a virtual pipeline (arguments.py validate_args), so 1F1B keeps blocking sends."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import interleaved_p2p_exposed_s
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout


def test_exposed_by_hand():
    # PP 4, 2 chunks, 8 micro-batches: 16 chunk passes, 3 x 2 + 1 x 4 = 10 warm-up forwards
    # (and 10 cool-down backwards) blocking, 6 steady iterations of two sends each
    lay = Layout(pp=4, chunks=2, schedule="interleaved", micro_batches=8)
    # hop 1 s beside a 0.5 s chunk pair: 20 x 1 + 6 x (2 - 0.5) = 29
    assert interleaved_p2p_exposed_s(1.0, 1.0, lay) == pytest.approx(29.0)
    # sends shorter than the chunk: only the warm-up and cool-down ones show, 20 x 0.1
    assert interleaved_p2p_exposed_s(0.1, 1.0, lay) == pytest.approx(2.0)


def test_all_warm_up_is_all_blocking():
    # PP 8, 2 chunks, 8 micro-batches: 7 x 2 + 8 = 22 warm-up forwards > 16 passes, so every
    # send is blocking: 2 x chunks x m hops, as without the overlap
    lay = Layout(pp=8, chunks=2, schedule="interleaved", micro_batches=8)
    assert interleaved_p2p_exposed_s(0.3, 1.0, lay) == pytest.approx(2 * 2 * 8 * 0.3)


def _layout(engine="megatron", schedule="interleaved:2", **kw):
    job = Job(model="llama-3.1-8b", mode="train", engine=engine, precision="mixed-bf16",
              gpus=32, tp=2, pp=4, grad_accum=8, pp_schedule=schedule,
              zero=1 if engine == "megatron" else 2, sequence_parallel=True)
    return estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"), job,
                          measured=None, **kw).layout


def test_the_step_exposes_what_the_schedule_says():
    """Megatron's default overlaps: its exposed p2p is the hand formula on the blocking step's
    own hop (its pp_comm_s / (2 x chunks x m)) and micro-batch compute; nothing else moves."""
    blocking, over = _layout(p2p_overlap=False), _layout()
    m, v = 8, 2
    hop, t_mb = blocking.pp_comm_s / (2 * v * m), blocking.compute_s / m
    assert hop > 0
    lone = min(m * v, 3 * 2 + (v - 1) * 4)
    want = 2 * lone * hop + (m * v - lone) * max(0.0, 2 * hop - t_mb / v)
    assert over.pp_comm_s == pytest.approx(want, rel=1e-9)
    assert over.pp_comm_s < blocking.pp_comm_s
    assert over.compute_s == pytest.approx(blocking.compute_s, rel=1e-12)
    assert any("--overlap-p2p-communication" in n for n in over.notes)
    assert not any("--overlap-p2p-communication" in n for n in blocking.notes)


def test_without_virtual_pipeline_sends_block():
    # Megatron-LM sets overlap_p2p_comm False without VP: 1F1B as before, forced or not
    assert _layout(schedule="1f1b").pp_comm_s == pytest.approx(
        _layout(schedule="1f1b", p2p_overlap=True).pp_comm_s)
    assert _layout(schedule="1f1b").pp_comm_s == pytest.approx(
        _layout(schedule="1f1b", p2p_overlap=False).pp_comm_s)


def test_other_engines_keep_blocking_sends():
    # torchtitan's profile leaves p2p_overlap "none": its default is the blocking count
    plain = _layout(engine="torchtitan")
    assert plain.pp_comm_s == pytest.approx(_layout(engine="torchtitan", p2p_overlap=False)
                                            .pp_comm_s)
    assert plain.pp_comm_s > _layout(engine="torchtitan", p2p_overlap=True).pp_comm_s


def test_not_a_switch_refused():
    with pytest.raises(InputError, match="p2p"):
        _layout(p2p_overlap="yes")
