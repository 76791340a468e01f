"""Issue 31 (fsdpbias): a training step's fused attention at FlashAttention v1's rate
(``estimate_speed(train_attention="fa1")``), half FlashAttention-2's share on Ampere (Dao 2023,
arXiv 2307.08691, abstract: "around 2x speedup compared to FlashAttention"), the kernel
llm-foundry's 2023 A100 benchmark harness ran (benchmarks/validate_speed.py train_attention)."""
from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import attention_fraction
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model


@pytest.mark.parametrize("head_dim, backward, fa2", [
    # FlashAttention-2 on A100 at 2,048 tokens: 0.73 (head dim 128) or 0.60 (64) of the peak at
    # long sequences x 2048 / (2048 + 256); the backward 0.85 of the forward
    (128, False, 0.73 * 2048 / 2304),
    (64, False, 0.60 * 2048 / 2304),
    (128, True, 0.73 * 0.85 * 2048 / 2304),
])
def test_fa1_is_half_fa2_on_ampere(head_dim, backward, fa2):
    got = attention_fraction("Ampere", head_dim, 2048, backward=backward, cap=1.0, kernel="fa1")
    assert got == pytest.approx(fa2 / 2)
    assert attention_fraction("Ampere", head_dim, 2048, backward=backward,
                              cap=1.0) == pytest.approx(fa2)


def test_fa1_has_no_hopper_rate():
    with pytest.raises(ValueError, match="Ampere only"):
        attention_fraction("Hopper", 128, 2048, backward=False, cap=1.0, kernel="fa1")


def _job(**kw) -> Job:
    base = dict(model="gpt2", mode="train", batch=8, seq=1024, precision="mixed-bf16")
    return Job(**{**base, **kw})


def _attention_s(est) -> float:
    return sum(t.total_s for t in est.step.ops if t.op.kind == "attention")


def test_train_attention_doubles_the_attention_kernels_only():
    model, gpu = load_model("gpt2"), get_gpu("A100-SXM-80GB")
    fa2 = estimate_speed(model, gpu, _job(), measured=None)
    fa1 = estimate_speed(model, gpu, _job(), measured=None, train_attention="fa1")
    a2, a1 = _attention_s(fa2), _attention_s(fa1)
    assert a2 > 0 and a1 == pytest.approx(2 * a2)  # compute-bound at 1,024 tokens a sequence
    # nothing else moves: the step grows by the attention's own time
    assert fa1.step.device_time_s - fa2.step.device_time_s == pytest.approx(a1 - a2, rel=1e-6)
    assert any("FlashAttention v1" in n for n in fa1.notes)


def test_train_attention_refuses_what_it_cannot_time():
    model = load_model("gpt2")
    with pytest.raises(InputError, match="train_attention"):
        estimate_speed(model, get_gpu("A100-SXM-80GB"), _job(), measured=None,
                       train_attention="fa9")
    with pytest.raises(InputError, match="Ampere only"):
        estimate_speed(model, get_gpu("H100-SXM-80GB"), _job(), measured=None,
                       train_attention="fa1")
    with pytest.raises(InputError, match="in inference"):
        estimate_speed(model, get_gpu("A100-SXM-80GB"), Job(model="gpt2", mode="infer", batch=1,
                                                            seq=128), measured=None,
                       train_attention="fa1")
