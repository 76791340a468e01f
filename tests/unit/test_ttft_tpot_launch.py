"""TTFT and TPOT are named in every inference output, and the step's launch row says what it is.

TTFT (time to first token) is the batch's prefill: the first token comes from the prefill's
logits. TPOT (time per output token) is one decode step, which makes one token per sequence.
A request is TTFT + new_tokens x TPOT (the speed model's request time, docs/speed.md).

The launch row is ``Phase.launch_time_s``, the step's time beyond its kernels. On a GPU the host
issues kernels ahead of the device and the slower of the two sets the pace, so that time is the
device's gaps between kernels when the device is slower (the host's issue time hidden), or the
host's issue time less the kernels when the host is slower (dispatch-bound).
"""

from __future__ import annotations

import io
import json

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import constant
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.report.speed import render_speed
from gpuplan.units import format_seconds

H100 = get_gpu("H100-SXM-80GB")


@pytest.fixture(autouse=True)
def _no_bench(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))


def _text(est) -> str:
    from rich.console import Console

    buf = io.StringIO()
    render_speed(est, console=Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def _infer(**kw):
    job = Job(model="llama-3.1-8b", mode="infer", batch=4, seq=512, **kw)
    return estimate_speed(load_model("llama-3.1-8b"), H100, job, new_tokens=64, measured=None)


def test_ttft_is_the_prefill_and_tpot_one_decode_step():
    e = _infer()
    # the prefill phase timed on its own, plus its input copy where that is not hidden
    assert e.ttft_s == e.prefill.time_s + e.prefill_transfer.exposed_s
    assert e.tpot_s == e.step_time_s
    assert e.step.name == "decode" and e.step.q_len == 1  # one new token per sequence
    assert e.request_time_s == pytest.approx(e.ttft_s + 64 * e.tpot_s, rel=1e-12)
    d = e.to_dict(ops=False)
    assert d["ttft_s"] == e.ttft_s and d["tpot_s"] == e.tpot_s
    assert d["request_time_s"] == e.request_time_s  # the old field kept, same value


def test_ttft_under_a_serving_layout_includes_its_collectives():
    e = _infer(tp=2, gpus=2)
    assert e.ttft_s == pytest.approx(e.layout.prefill_s + e.prefill_transfer.exposed_s)
    assert e.ttft_s > e.prefill.time_s  # the TP all-reduces of the prefill are waited for
    assert e.tpot_s == e.layout.decode_s + e.transfer.exposed_s


def test_training_and_encoders_have_no_ttft():
    train = estimate_speed(load_model("gpt2"), H100, Job(model="gpt2", mode="train"), measured=None)
    assert train.ttft_s is None and train.tpot_s is None
    d = train.to_dict(ops=False)
    assert d["ttft_s"] is None and d["tpot_s"] is None
    bert = estimate_speed(load_model("bert-base-uncased"), H100,
                          Job(model="bert-base-uncased", mode="infer"), measured=None)
    assert bert.step.name == "forward"  # one pass over the input, nothing decoded
    assert bert.ttft_s is None and bert.tpot_s is None
    assert "TTFT" not in _text(bert)


def test_the_text_names_ttft_and_tpot_with_their_values():
    e = _infer()
    out = _text(e)
    assert (f"TTFT (time to first token: the batch's prefill, end to end) "
            f"{format_seconds(e.ttft_s)}; TPOT (time per output token: one decode step) "
            f"{format_seconds(e.tpot_s)}") in out
    assert f"request: TTFT + 64 new tokens x TPOT = {format_seconds(e.request_time_s)}" in out
    assert "decode step = TPOT" in out


def test_a_dispatch_bound_launch_row_is_the_exposed_host_issue():
    e = _infer(runtime="eager")
    s = e.step
    assert s.host_bound
    # decode has no backward: every kernel costs the eager forward dispatch (32 us, docs/speed.md)
    per = constant("eager_host_fwd_s")
    assert s.host_time_s == pytest.approx(s.kernels * per, rel=1e-12)
    assert s.launch_time_s == pytest.approx(s.host_time_s - s.kernel_time_s, rel=1e-12)
    out = _text(e)
    assert (f"host issue, exposed: {s.kernels:,} x {per * 1e6:.1f} us (eager) = "
            f"{format_seconds(s.host_time_s)} - {format_seconds(s.kernel_time_s)} of kernels"
            ) in out
    assert "launch overhead" not in out


def test_a_device_bound_launch_row_is_the_launch_gaps_with_the_issue_hidden():
    e = estimate_speed(load_model("gpt2"), H100, Job(model="gpt2", mode="train", batch=8), measured=None)
    s = e.step
    assert not s.host_bound
    gap = constant("stream_gap_s")
    assert s.launch_time_s == pytest.approx(s.kernels * gap, rel=1e-9)
    out = _text(e)
    assert f"launch gaps: {s.kernels:,} kernels x {gap * 1e6:,.1f} us (host issue " in out
    assert f"= {format_seconds(s.host_time_s)}, hidden)" in out


def test_cuda_graphs_issue_one_replay():
    e = _infer(runtime="cudagraphs")
    out = _text(e)
    assert (f"(host issue 1 graph replay (cudagraphs) = {format_seconds(e.step.host_time_s)}, "
            "hidden)") in out


def test_fit_json_and_the_web_api_carry_ttft_and_tpot(cli):
    rc, out, _ = cli("fit", "llama-3.1-8b", "--mode", "infer", "--gpu", "H100-SXM-80GB",
                     "--json")
    assert rc == 0
    row = json.loads(out)["speed"]["gpus"][0]["infer"]
    e = _fit_infer_estimate()
    assert row["ttft_s"] == pytest.approx(e.ttft_s) and row["tpot_s"] == pytest.approx(e.tpot_s)
    assert row["request_time_s"] == pytest.approx(row["ttft_s"] + 128 * row["tpot_s"])
    pytest.importorskip("starlette")
    from gpuplan.web._service import speed

    api = speed({"model": "llama-3.1-8b", "mode": "infer", "gpu": "H100-SXM-80GB"})
    assert api["infer"]["estimate"]["ttft_s"] == pytest.approx(e.ttft_s)
    # the ceiling's kernels run at the datasheet peaks: a compute-bound prefill is faster there;
    # this decode step is paced by the host's dispatch, which the ceiling keeps
    assert api["infer"]["ceiling"]["ttft_s"] < api["infer"]["estimate"]["ttft_s"]
    assert api["infer"]["ceiling"]["tpot_s"] == api["infer"]["estimate"]["tpot_s"]


def _fit_infer_estimate():
    """The estimate fit makes for its inference job (llama-3.1-8b's defaults: seq 2048)."""
    job = Job(model="llama-3.1-8b", mode="infer")
    return estimate_speed(load_model("llama-3.1-8b"), H100, job, measured=None)
