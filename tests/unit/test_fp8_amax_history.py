"""The Job's fp8_amax_history: delayed scaling's amax history length (TE DelayedScaling
amax_history_len; NeMo fp8_amax_history_len), counted in the FP8 weight line."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model


def _plan(history):
    model = load_model("llama-2-7b")
    job = Job(model="llama-2-7b", mode="train", engine="megatron", precision="fp8-delayed",
              gpus=1, batch=1, seq=1024, fp8_amax_history=history)
    return train_memory(model, job)


def test_a_shorter_history_drops_its_fp32_amaxes():
    # each block linear (q, k, v, o, gate, up, down as the model lists them: 7 x 32 blocks)
    # keeps 3 quantized tensors' histories of fp32 amaxes: 1024 -> 1 is 1023 x 4 B less each
    full, one = _plan(None), _plan(1)
    assert full.weights_bytes - one.weights_bytes == 7 * 32 * 3 * 1023 * 4
    assert _plan(1024).weights_bytes == full.weights_bytes  # None is TE's default 1024


def test_only_delayed_scaling_takes_a_history():
    with pytest.raises(InputError, match="fp8_amax_history"):
        Job(model="llama-2-7b", mode="train", precision="fp8-current", fp8_amax_history=1)
    with pytest.raises(InputError, match="fp8_amax_history"):
        Job(model="llama-2-7b", mode="train", precision="bf16", fp8_amax_history=16)
    with pytest.raises(InputError):
        Job(model="llama-2-7b", mode="train", precision="fp8-delayed", fp8_amax_history=0)
