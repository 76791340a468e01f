"""What torchao's float8 linear saves of its input for the backward (pytorch/ao@eab345c2, v0.8,
the torchao of torchtitan's published float8 runs: torchao/float8/float8_linear.py): tensorwise
``manual_float8_matmul_with_args_in_float8`` saves the forward's ``input_fp8`` (1 B an element),
rowwise ``manual_float8_matmul_with_args_in_hp`` the 16-bit ``input_hp`` (2 B). Llama 3.1 8B,
checked by hand against the per-layer saved bytes of the two recipes, which differ in nothing
else."""

from __future__ import annotations

import pytest

from gpuplan.fp8 import NARROW_RECIPES
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model

T = 512  # tokens: batch 1 x seq 512


def _per_layer(precision: str, checkpointing: str = "none", **kw) -> int:
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=T, engine="torchtitan",
              precision=precision, checkpointing=checkpointing, **kw)
    (per,) = set(train_memory(load_model("llama-3.1-8b"), job).activation_detail[
        "per_layer_saved_bytes"])
    return per


def test_tensorwise_saves_the_fp8_input_rowwise_the_16bit_one():
    # 1 B an element less where the linear is the input's only saver: the attention norm's
    # output (wq wk wv), the MLP norm's (w1 w3), w2's input (silu(w1 x) * w3 x, 14336 wide);
    # 1 B more for wo's, SDPA's output, which the attention kernel saves at 16 bits anyway
    saved = T * (4096 + 4096 + 14336) - T * 4096
    assert _per_layer("fp8-rowwise") - _per_layer("fp8-tensorwise") == saved


def test_tensor_parallel_saves_the_gathered_fp8_input():
    # TP 2 with sequence parallelism: Float8ColwiseParallel casts the shard before the
    # all-gather, so the gathered full-sequence input is saved in FP8 (wq wk wv, w1 w3: T x
    # 4096 each); w2's input is its column shard (14336 / 2), wo's its heads' (4096 / 2, +1 B)
    kw = dict(gpus=2, tp=2)
    saved = T * (4096 + 4096 + 14336 // 2) - T * 4096 // 2
    assert _per_layer("fp8-rowwise", **kw) - _per_layer("fp8-tensorwise", **kw) == saved


def test_op_selective_checkpointing_keeps_sixteen_bit_bytes():
    # torchtitan@9dec370's op policy recomputes the cast and keeps the amax's 16-bit abs(x)
    # (_save_list: aten.abs, aten.max): the 16-bit input's bytes, as rowwise's
    assert _per_layer("fp8-tensorwise", "selective") == _per_layer("fp8-rowwise", "selective")


@pytest.mark.parametrize("name, narrow", [("fp8-tensorwise", True), ("fp8-rowwise", False)])
def test_recipe_flags(name, narrow):
    assert NARROW_RECIPES[name].saves_narrow_inputs is narrow
