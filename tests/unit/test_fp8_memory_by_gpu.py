"""FP8 weight copies counted as Transformer Engine holds them on each GPU (issue 30).

The rule, read from NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b: in
training ``_Linear.forward`` asks the weight quantizer for rowwise and columnwise usage
(module/linear.py); a per-tensor FP8 quantizer allocates the transposed copy only where
``nvte_is_non_tn_fp8_gemm_supported()`` is false (pytorch/csrc/quantizer.cpp ``with_transpose =
columnwise_usage && !is_non_tn_fp8_gemm_supported``): Hopper (9.0) keeps it, B200 (10.0) does
not; an FP8 parameter (``--fp8-param-gather``) gets its transpose after each all-gather under
the same test (tensor/utils.py ``post_all_gather_processing``); MXFP8 and NVFP4 keep a rowwise
and a columnwise copy, each with its own scales, everywhere; without a backward only the
rowwise copy. Bytes below are counted by hand from the element sizes of llama-3.2-1b's block
linears (its config.json: 16 layers, hidden 2048, 32 heads of 64, 8 KV heads, MLP 8192)."""

from __future__ import annotations

import pytest

from gpuplan.fit import plan
from gpuplan.fp8 import NARROW_RECIPES, fp8_weight_bytes, weight_cast_bytes_per_element, \
    weight_copies
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model
from gpuplan.solver import max_batch

H100, B200 = get_gpu("H100-SXM-80GB"), get_gpu("B200-SXM-180GB")
M = load_model("llama-3.2-1b")
# per layer: q and o 2048 x 2048, k and v 2048 x 512, gate/up/down 3 x 2048 x 8192
N = 16 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192)


def _weights(precision: str, gpu, param_gather: bool = False) -> int:
    job = Job(model=M, mode="train", precision=precision, engine="megatron",
              fp8_param_gather=param_gather)
    return train_memory(M, job, gpu=gpu).weights_bytes


def test_the_linears_counted_by_hand():
    assert N == 973_078_528
    assert sum(t.total for t in M.tensors if t.linear
               and t.component not in ("embeddings", "head")) == N


@pytest.mark.parametrize("precision, gather, h100, b200", [
    # fp8-current: 1 B copy + 1 B transpose on H100, the one copy on B200
    ("fp8-current", False, 2 * N, N),
    # param gather: the FP8 parameter replaces the 2 B bf16 copy; H100 adds its transpose
    ("fp8-current", True, 2 * N - 2 * N, N - 2 * N),
    # MXFP8: rowwise and columnwise, 1 B and an e8m0 byte per 32 values each, on both
    ("mxfp8", False, 2 * (N + N // 32), 2 * (N + N // 32)),
    ("mxfp8", True, 2 * (N + N // 32) - 2 * N, 2 * (N + N // 32) - 2 * N),
    # NVFP4: rowwise and columnwise, 0.5 B and an e4m3 byte per 16 values each, on both
    ("nvfp4", False, 2 * (N // 2 + N // 16), 2 * (N // 2 + N // 16)),
])
def test_weight_bytes_over_bf16_on_h100_and_b200(precision, gather, h100, b200):
    """The weights line's bytes over mixed-bf16's (2 B a parameter) on each GPU."""
    base = {g.name: _weights("mixed-bf16", g) for g in (H100, B200)}
    assert _weights(precision, H100, gather) - base[H100.name] == h100
    assert _weights(precision, B200, gather) - base[B200.name] == b200


def test_no_gpu_is_hoppers_layout():
    """A plan of the job alone (no GPU) keeps the transposes, as before: the upper bound."""
    assert _weights("fp8-current", None) == _weights("fp8-current", H100)
    assert _weights("fp8-current", None) - _weights("fp8-current", B200) == N


def test_delayed_scaling_keeps_its_amax_histories_on_both():
    """fp8-delayed on B200: the one copy, plus 112 linears x 3 tensors x (1024 + 2) fp32."""
    amax = 112 * 3 * 1026 * 4
    assert _weights("fp8-delayed", B200) - _weights("mixed-bf16", B200) == N + amax
    assert _weights("fp8-delayed", H100) - _weights("mixed-bf16", H100) == 2 * N + amax


@pytest.mark.parametrize("name, one", [
    ("fp8-current", 3200), ("fp8-delayed", 3200),
    ("mxfp8", 3200 + 3200 // 32),             # an e8m0 byte per 32
    ("nvfp4", 3200 // 2 + 3200 // 16),        # 0.5 B and an e4m3 byte per 16
    ("fp8-blockwise", 3201)])                 # 3200 + 3200 x 4 B / (128 x 128) = 3200.78
def test_no_backward_keeps_the_rowwise_copy_alone(name, one):
    """Without a backward (TE's ``columnwise=is_grad_enabled and inp.requires_grad``) one copy
    of 3,200 elements on either GPU, with its rowwise scales."""
    for cc in ("9.0", "10.0"):
        assert fp8_weight_bytes(NARROW_RECIPES[name], 3200, "Blackwell", param_gather=False,
                                compute_capability=cc, backward=False)[0] == one


@pytest.mark.parametrize("name", ["fp8-current", "fp8-delayed", "mxfp8", "nvfp4"])
def test_memory_and_speed_read_one_rule(name):
    """The copies the memory plan keeps are the copies the speed model's weight cast writes:
    the cast's bytes per element less its 16-bit read and amax pass, over one copy's bytes."""
    r = NARROW_RECIPES[name]
    one = (0.5 if r.dtype == "fp4" else 1.0) + (r.scale_bytes / r.weight_block
                                                if r.weight_block else 0.0)
    amax = 2.0 if name in ("fp8-current", "nvfp4") else 0.0
    for gpu, non_tn in ((H100, False), (B200, True)):
        cast = weight_cast_bytes_per_element(r, gpu.architecture, gpu.compute_capability)
        assert (cast - 2.0 - amax) / one == pytest.approx(weight_copies(r, non_tn))
        mem = fp8_weight_bytes(r, 32_000, gpu.architecture, param_gather=False,
                               compute_capability=gpu.compute_capability)[0]
        assert mem == pytest.approx(32_000 * one * weight_copies(r, non_tn))


def test_fit_plans_each_gpu_on_its_own_memory():
    """llama-3.1-70b, fp8-current under Megatron: a B200 holds 1 B an element of its blocks'
    linears (80 x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672)) less than an H100. Alone,
    the B200's plan is its own; beside an H100 the plan's lines stay Hopper's and the B200's
    verdict carries its own total, with a note."""
    n70 = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    job = Job(model="llama-3.1-70b", mode="train", precision="fp8-current", engine="megatron")
    h, b = plan(job, ["H100-SXM-80GB"]), plan(job, ["B200-SXM-180GB"])
    assert h.train.weights_bytes - b.train.weights_bytes == n70
    assert h.train.total_bytes - b.train.total_bytes == n70
    both = plan(job, ["H100-SXM-80GB", "B200-SXM-180GB"])
    assert both.train.total_bytes == h.train.total_bytes
    assert [g.train_total_bytes for g in both.gpus] == [None, b.train.total_bytes]
    assert both.gpus[1].train_headroom_bytes == b.gpus[0].train_headroom_bytes
    assert both.gpus[1].to_dict()["train_total_bytes"] == b.train.total_bytes
    assert "train_total_bytes" not in both.gpus[0].to_dict()
    assert any(n.startswith("B200-SXM-180GB: fp8-current weights keep no FP8 transposes")
               for n in both.notes)


def test_a_mixed_list_under_mxfp8_needs_no_second_plan():
    """MXFP8 keeps both copies on every GPU: one training plan, no per-GPU total."""
    job = Job(model=M, mode="train", precision="mxfp8", engine="megatron")
    p = plan(job, ["H100-SXM-80GB", "B200-SXM-180GB"])
    assert [g.train_total_bytes for g in p.gpus] == [None, None]


def test_the_searches_plan_on_the_gpu_asked_about():
    """fit's layout column and the solver's max batch read the GPU's own memory: llama-3.1-70b
    under fp8-current on a B200 needs TP 8 (8 GPUs), where Hopper's layout of the same job
    (the transposes kept, 68.45 GB more per replica) needed 16; the layout's peak is what
    train_memory gives for that layout on the B200, and the max batch of llama-3.2-1b (seq
    1024) is the last batch whose B200 plan fits."""
    job = Job(model="llama-3.1-70b", mode="train", precision="fp8-current", engine="megatron")
    g = plan(job, ["B200-SXM-180GB"]).gpus[0]
    assert (g.train_layout.gpus, g.train_layout.tp, g.train_layout.pp) == (8, 8, 1)
    laid = g.train_layout.apply(job)
    model = load_model("llama-3.1-70b")
    assert g.train_layout.peak_bytes == train_memory(model, laid, gpu=B200).total_bytes
    assert train_memory(model, laid, gpu=B200).total_bytes <= B200.memory_bytes \
        < train_memory(model, laid).total_bytes
    small = Job(model=M, mode="train", precision="fp8-current", engine="megatron", seq=1024)
    b = max_batch(M, small, B200)
    assert train_memory(M, small.with_(batch=b), gpu=B200).total_bytes <= B200.memory_bytes \
        < train_memory(M, small.with_(batch=b + 1), gpu=B200).total_bytes
    # ... a batch that Hopper's layout (the transposes kept) would not fit on it
    assert train_memory(M, small.with_(batch=b), gpu=None).total_bytes > B200.memory_bytes
