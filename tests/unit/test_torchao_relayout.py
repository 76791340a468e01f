"""torchao's backward FP8 re-layouts (``fp8.relayout``): torch._scaled_mm takes a row-major
mat1 and a column-major mat2 (pytorch/ao@eab345c torchao/float8/float8_ops.py
``preprocess_addmm``), so the tensorwise weight-gradient GEMM ``mm(grad_output.t(), input)``
needs the output gradient transposed, and a weight FSDP2 gathered in FP8 is copied
column-major for the input-gradient GEMM. Checked by hand for Llama 3.1 8B."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

T = 512  # tokens of one micro-batch: batch 1 x seq 512
# per layer, the linears' output widths: q + k + v (4096 + 1024 + 1024), wo 4096, w1 + w3
# (2 x 14336), w2 4096 -- the output gradient's elements are T times their sum
GRADS = 32 * T * (6144 + 4096 + 2 * 14336 + 4096)
# the blocks' linear weights: 32 x (4096 x 6144 + 4096^2 + 3 x 4096 x 14336)
WEIGHTS = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
LINEARS = 32 * 7  # wq wk wv wo w1 w3 w2: one copy launch each
# the linears' inputs, each cast once (q, k, v share the attention norm's output, w1 and w3 the
# MLP norm's): attention norm 4096, wo 4096, MLP norm 4096, w2 14336 -- T x their sum a layer
INPUTS = 32 * T * (4096 + 4096 + 4096 + 14336)
INPUT_OPS = 32 * 4  # the saved FP8 inputs: one eager copy each


def _relayout(precision="fp8-tensorwise", runtime="compile", engine="torchtitan", zero=3,
              **kw):
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=T, engine=engine,
              precision=precision, runtime=runtime, gpus=8, zero=zero, **kw)
    est = estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"), job,
                         measured=None, link="nvlink")
    return [t for t in est.step.ops if t.op.name == "fp8.relayout"]


def test_compiled_tensorwise_cast_writes_the_transposed_grad_output():
    # torchao roofline (torchao/float8/roofline_utils.py @eab345c): the compiled cast writes
    # the column-major FP8 copy beside the row-major one, 1 B an element, no launch of its own
    # -- and the saved FP8 input's column-major copy for mat2 of mm(grad_output.t(), input_fp8)
    (t,) = _relayout()
    assert t.op.bytes == (GRADS + INPUTS) * 1 and t.op.kernels == 0 and t.op.phase == "backward"
    assert t.memory_s > 0


def test_float8_gathered_weight_is_copied_column_major_each_backward():
    # the gathered Float8Tensor arrives row-major: preprocess_addmm's b.t().contiguous().t()
    # reads and writes its FP8 bytes, one launch a linear, once per micro-batch
    (t,) = _relayout(fp8_param_gather=True)
    assert t.op.bytes == GRADS + INPUTS + 2 * WEIGHTS and t.op.kernels == LINEARS
    (two,) = _relayout(fp8_param_gather=True, grad_accum=2)
    assert two.op.count == 2 * t.op.count


def test_eager_tensorwise_copies_the_grad_output():
    # eager: a.contiguous() of grad_output.t(), an FP8 read and write, one launch a linear
    # and of the saved input_fp8 (b.t().contiguous().t()), one launch an input
    (t,) = _relayout(runtime="eager")
    assert t.op.bytes == (GRADS + INPUTS) * 2 and t.op.kernels == LINEARS + INPUT_OPS


def test_rowwise_casts_the_grad_output_again_along_dim0():
    # manual_float8_matmul_with_args_in_hp: cast_config_grad_output_for_grad_weight (axiswise
    # dim 0), a second whole cast: amax read 2 + read 2 + write 1 B an element
    (t,) = _relayout(precision="fp8-rowwise")
    assert t.op.bytes == GRADS * 5 and t.op.kernels == LINEARS


def _quantize(precision):
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=T, engine="torchtitan",
              precision=precision, runtime="compile", gpus=8, zero=3)
    est = estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"), job,
                         measured=None, link="nvlink")
    (t,) = [t for t in est.step.ops if t.op.name == "fp8.quantize"]
    return t.op


def test_tensorwise_casts_each_input_once_rowwise_twice():
    # pytorch/ao@eab345c float8_linear.py: tensorwise saves the forward's input_fp8 (no second
    # cast); rowwise saves input_hp and casts it again along dim 0 in the backward. Each cast:
    # amax read 2 + read 2 + write 1 = 5 B an element; one launch per linear op each (q, k, v one)
    tw, rw = _quantize("fp8-tensorwise"), _quantize("fp8-rowwise")
    assert tw.bytes == 5 * (INPUTS + GRADS) and tw.kernels == 2 * INPUT_OPS
    assert rw.bytes == 5 * (2 * INPUTS + GRADS) and rw.kernels == 3 * INPUT_OPS


def test_transformer_engine_recipes_have_no_torchao_relayout():
    assert _relayout(precision="fp8-current", engine="megatron", runtime="auto",
                     zero=1) == []
