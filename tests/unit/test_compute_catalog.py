"""The speed model over every catalog model: the weights its matmuls multiply by are exactly the
model's linear tensors (+ a tied output head, + a vision patch embedding), and an estimate of each
in training and inference is consistent with its own definitions."""

from __future__ import annotations

import json

import pytest

from gpuplan.compute import StepShape, build_forward_ops, estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.models import catalog_names, load_model
from gpuplan.job import Job


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)


H100 = get_gpu("H100-SXM-80GB")


@pytest.mark.parametrize("name", catalog_names())
def test_matmul_weights_are_the_models_linear_tensors(name):
    m = load_model(name)
    a = m.architecture
    fwd = build_forward_ops(a, StepShape(batch=1, q_len=8, kv_len=8), act_bytes=2, weight_bytes=2)
    mine = sum(op.weight_elements * op.count for op in fwd if op.weight_elements)
    expected = sum(t.total for t in m.tensors if t.linear)
    head_tied = a.tie_word_embeddings and (a.kind == "decoder" or "MaskedLM" in a.hf_class)
    if head_tied:  # the output head multiplies by the (non-linear-listed) embedding table
        table = next(t for t in m.tensors if t.component == "embeddings"
                     and t.shape[0] == a.vocab_size)
        expected += table.total
    if a.kind == "vision":  # the patch embedding is a convolution: a matmul over patches
        conv = next(t for t in m.tensors if t.component == "embeddings" and len(t.shape) == 4)
        expected += conv.total
    assert mine == expected


@pytest.mark.parametrize("name", catalog_names())
def test_estimates_are_consistent(name):
    m = load_model(name)
    for mode in ("train", "infer"):
        # a vision model's sequence is its patches + class token (197 for ViT-B/16 at 224 px):
        # a longer one is refused (job.check_positions), so it runs at its own
        seq = None if m.architecture.kind == "vision" else 256
        e = estimate_speed(m, H100, J(mode=mode, batch=2, seq=seq), measured=None)
        d = json.loads(json.dumps(e.to_dict(ops=False)))
        assert d["bound"] in ("compute", "memory")
        assert 0 < e.mfu <= e.efficiency.matmul
        assert e.flops_per_step >= e.model_flops_per_step > 0
        assert e.step_time_s == pytest.approx(e.step.kernel_time_s + e.step.launch_time_s)
        paced = max(e.step.host_time_s, e.step.device_time_s)
        if e.step.sync_per_micro_step or e.step.serve_host_s:
            # the host cannot run ahead past a micro-batch's blocking input copy (or the serving
            # engine's host work follows the kernels): at least the slower of the two, at most
            # the two in turn plus that host work
            assert paced * (1 - 1e-9) <= e.step.time_s
            assert e.step.time_s <= (e.step.host_time_s + e.step.device_time_s
                                     + e.step.serve_host_s) * (1 + 1e-9)
        else:
            assert e.step.time_s == pytest.approx(paced)
        assert e.tokens_per_s == pytest.approx(e.step.tokens / e.step_time_s)
        if mode == "train":
            # every parameter is updated: the optimizer reads and writes them all
            opt = next(t for t in e.step.ops if t.op.phase == "optimizer")
            assert opt.op.bytes >= 16 * m.params.total  # 2 + 4 + 4 + 8 read, more written
