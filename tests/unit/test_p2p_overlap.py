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


# --- the batch-level EP overlap's merged iterations (combined_1f1b) ---------------------------
# Megatron-LM@0d8e0714 / @b0cc2706 schedules.py forward_backward_helper_wrapper runs the steady
# state through combined_1f1b_schedule_for_interleaved_pipelining: one forward chunk and one
# backward chunk merged, both receives waited first, both sends posted last
# (model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan.run), the first layer's
# attention wgrad after them; the warm-up one forward longer (get_pp_rank_microbatches).


def _orders(pp, chunks, m):
    """Megatron's forward and backward (micro-batch, chunk) orders, groups of ``pp``
    (get_schedule_table with microbatch_group_size_per_vp_stage = pp)."""
    fwd = [(mb, c) for base in range(0, m, pp) for c in range(chunks)
           for mb in range(base, min(base + pp, m))]
    return fwd, [(mb, chunks - 1 - c) for mb, c in fwd]


def _simulated_step(pp, chunks, m, t_f, t_b, hop, tail=0.0):
    """The step's length from the schedule's dependencies alone, no closed form: warm-up
    forwards and cool-down backwards send blocking, each steady iteration waits for both its
    inputs, runs t_f + t_b and posts its sends ``tail`` before its end."""
    fwd, bwd = _orders(pp, chunks, m)
    n = m * chunks
    warm = [min(n, (pp - r - 1) * 2 + (chunks - 1) * pp + 1) for r in range(pp)]
    ops = [[("F", k) for k in range(w)] + [("FB", k) for k in range(n - w)]
           + [("B", k) for k in range(n - w, n)] for w in warm]
    arr_f, arr_b, free, pos = {}, {}, [0.0] * pp, [0] * pp

    def ready(table, r, mb, c, first):
        return 0.0 if first else table.get((r, mb, c))

    def send_f(r, mb, c, t):
        if r < pp - 1 or c < chunks - 1:
            arr_f[(r + 1, mb, c) if r < pp - 1 else (0, mb, c + 1)] = t + hop

    def send_b(r, mb, c, t):
        if r > 0 or c > 0:
            arr_b[(r - 1, mb, c) if r > 0 else (pp - 1, mb, c - 1)] = t + hop

    moved = True
    while moved:
        moved = False
        for r in range(pp):
            while pos[r] < len(ops[r]):
                kind, k = ops[r][pos[r]]
                f = fwd[k + (warm[r] if kind == "FB" else 0)]
                b = bwd[k]
                a = ready(arr_f, r, *f, r == 0 and f[1] == 0) if kind != "B" else 0.0
                c = ready(arr_b, r, *b, r == pp - 1 and b[1] == chunks - 1) if kind != "F" else 0.0
                if a is None or c is None:
                    break
                start = max(free[r], a, c)
                if kind == "F":
                    send_f(r, *f, start + t_f)
                    free[r] = start + t_f + hop
                elif kind == "B":
                    send_b(r, *b, start + t_b)
                    free[r] = start + t_b + hop
                else:
                    send_f(r, *f, start + t_f + t_b - tail)
                    send_b(r, *b, start + t_f + t_b - tail)
                    free[r] = start + t_f + t_b
                pos[r] += 1
                moved = True
    assert pos == [len(o) for o in ops]
    return max(free)


@pytest.mark.parametrize("pp, chunks, m, hop, tail", [
    (2, 24, 32, 0.86, 0.0),    # the 25.11 H100 Qwen3-30B-A3B layout, one layer a chunk
    (2, 12, 128, 0.44, 0.11),  # the 26.02 one
    (4, 4, 16, 1.0, 0.3),
    (8, 4, 64, 0.5, 0.2),
    (3, 5, 30, 0.3, 0.5),      # a tail longer than the hop
    (8, 2, 16, 0.5, 0.2),      # one steady iteration on the first stage
])
def test_merged_iterations_wait_a_hop_each(pp, chunks, m, hop, tail):
    """Under the EP overlap the closed form is what the schedule's own dependencies give."""
    t_f, t_b = 3.0, 6.0
    lay = Layout(pp=pp, chunks=chunks, schedule="interleaved", micro_batches=m, ep=8,
                 ep_overlap=True)
    sim = (_simulated_step(pp, chunks, m, t_f, t_b, hop, tail)
           - _simulated_step(pp, chunks, m, t_f, t_b, 0.0, tail))
    got = interleaved_p2p_exposed_s(hop, chunks * (t_f + t_b), lay, tail)
    assert got == pytest.approx(sim, rel=1e-9, abs=1e-9)
    if tail < hop and m * chunks > 2 * pp * chunks:
        # the steady iterations far outlast 2 hops: without the overlap their sends would hide
        plain = Layout(pp=pp, chunks=chunks, schedule="interleaved", micro_batches=m)
        assert interleaved_p2p_exposed_s(hop, chunks * (t_f + t_b), plain) < got


def test_merged_by_hand():
    # PP 4, 2 chunks, 8 micro-batches: 3 x 2 + 1 x 4 + 1 = 11 warm-up forwards (and cool-down
    # backwards) blocking, 5 merged iterations waiting 1 - 0.25 each, 2 x 3 blocking sends
    # giving back the 0.25 tail: 22 + 3.75 - 1.5
    lay = Layout(pp=4, chunks=2, schedule="interleaved", micro_batches=8, ep=8, ep_overlap=True)
    assert interleaved_p2p_exposed_s(1.0, 100.0, lay, 0.25) == pytest.approx(24.25)
    # a tail longer than the hop hides the steady hops and 6 of the blocking ones: 22 - 6
    assert interleaved_p2p_exposed_s(1.0, 100.0, lay, 2.0) == pytest.approx(16.0)


def test_ep_overlap_step_charges_the_merged_hops():
    """A Qwen3-30B-A3B step under PP 2 x VP 12 with the EP overlap: its exposed p2p lies
    between the steady hops less their attention-wgrad tail (at most one layer's backward) and
    the steady hops in full, on the blocking step's own hop."""
    kw = dict(model="qwen3-30b-a3b", mode="train", engine="megatron", precision="mixed-bf16",
              gpus=16, pp=2, ep=8, zero=1, seq=4096, grad_accum=32,
              pp_schedule="interleaved:12", gpus_per_node=8)
    gpu = get_gpu("H100-SXM-80GB")

    def lt(p2p, **more):
        return estimate_speed(load_model("qwen3-30b-a3b"), gpu, Job(**kw, **more),
                              measured=None, p2p_overlap=p2p).layout
    blocking, over = lt(False, ep_overlap=True), lt(True, ep_overlap=True)
    m, v = 32, 12
    hop = blocking.pp_comm_s / (2 * v * m)
    lone = 2 + (v - 1) * 2 + 1
    assert 2 * lone * hop < over.pp_comm_s <= 2 * lone * hop + (m * v - lone) * hop + 1e-12
    assert over.pp_comm_s > lt(True).pp_comm_s  # the conventional steady state hides them
