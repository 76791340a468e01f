"""The CUDA emulations, each against an oracle: torch's own dispatcher tables, torch's CPU behaviour
(what the emulation must change), and allocation sizes written out by hand."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from gpuplan.trace import _attention, _emulate  # noqa: E402
from gpuplan.trace._recorder import Recorder  # noqa: E402


def test_emulated_policy_covers_every_op_cuda_autocast_handles():
    # The oracle: the ops this torch registers an AutocastCUDA kernel for (compiled in even on a
    # CPU-only build). Every one of them needs a CUDA policy in the emulation.
    cuda_ops = _emulate.autocast_cuda_ops()
    table = _emulate.cuda_policy_table()
    assert len(cuda_ops) > 100
    assert cuda_ops <= set(table), sorted(cuda_ops - set(table))
    # Names in the table that this torch does not register are named-tensor overloads (or
    # removed ops), never a typo in an op that exists.
    for name in set(table) - cuda_ops:
        assert "name" in name.lower() or _emulate._overload(name) is None, name


def _dtype_under_autocast(fn, emulate: bool):
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    ctx = _emulate.cuda_emulation(Counter(), fake=False) if emulate else _nullctx()
    with ctx, torch.autocast("cpu", dtype=torch.bfloat16):
        return fn(x).dtype


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("name,fn", [
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1)),
    ("layer_norm", lambda x: torch.nn.functional.layer_norm(x, (8,))),
    ("pow", lambda x: torch.pow(x, 3.0)),
    ("exp", torch.exp),
    ("sum", lambda x: x.sum()),
])
def test_ops_cuda_autocast_runs_in_fp32(name, fn):
    # PyTorch AMP docs, "CUDA Ops that can autocast to float32": softmax, log_softmax, layer_norm,
    # pow, exp, sum ... CPU autocast leaves these in bf16 (the oracle for "the emulation changes
    # something"); the emulation gives CUDA's fp32.
    assert _dtype_under_autocast(fn, emulate=False) == torch.bfloat16
    assert _dtype_under_autocast(fn, emulate=True) == torch.float32


def test_matmuls_stay_in_bf16_and_cpu_only_entries_are_dropped():
    w = torch.randn(8, 8)
    assert _dtype_under_autocast(lambda x: x.float() @ w, emulate=True) == torch.bfloat16
    # cross_entropy_loss is an fp32 op in CPU autocast's list but not in CUDA's; on CUDA it
    # decomposes into log_softmax (fp32_set_opt_dtype) + nll_loss (fp32): still an fp32 loss.
    target = torch.zeros(4, dtype=torch.long)
    ce = _dtype_under_autocast(lambda x: torch.nn.functional.cross_entropy(x, target), True)
    assert ce == torch.float32
    # The registration is undone on exit: CPU autocast is back.
    assert _dtype_under_autocast(lambda x: torch.softmax(x, -1), emulate=False) == torch.bfloat16


def _allocations(fn, *, emulate=True) -> list[tuple[str, int]]:
    rec = Recorder(track_modules=False)
    ctx = _emulate.cuda_emulation(Counter(), fake=False) if emulate else _nullctx()
    with ctx, rec:
        keep = fn()
    del keep
    return [(rec.op_names[rec.op_of[s - 1]], rec.nbytes[s - 1]) for s in rec.ev_sid if s > 0]


def test_dropout_uses_the_fused_kernel_with_a_bool_mask():
    x = torch.randn(64, 32, dtype=torch.bfloat16)
    allocs = _allocations(lambda: torch.nn.functional.dropout(x, 0.1, training=True))
    # CUDA: native_dropout -> output (bf16, 2 B) and a bool mask (1 B) per element.
    assert sorted(b for _, b in allocs) == sorted([64 * 32 * 2, 64 * 32 * 1])
    # torch's CPU path instead multiplies by a noise tensor in the input dtype.
    cpu = _allocations(lambda: torch.nn.functional.dropout(x, 0.1, training=True), emulate=False)
    assert 64 * 32 * 1 not in [b for _, b in cpu]


@pytest.mark.parametrize("dtype,mask,hq,hk,d,expected", [
    (torch.bfloat16, False, 8, 8, 64, "flash"),
    (torch.bfloat16, False, 8, 2, 128, "flash"),      # grouped-query: flash handles it
    (torch.bfloat16, True, 8, 8, 64, "efficient"),    # flash takes no mask
    (torch.float32, False, 8, 8, 64, "efficient"),    # flash is 16-bit only
    (torch.float32, False, 8, 2, 64, "math"),         # efficient has no grouped-query
    (torch.bfloat16, False, 8, 8, 20, "math"),        # head_dim not a multiple of 8
    (torch.bfloat16, False, 8, 8, 512, "efficient"),  # flash stops at head_dim 256
])
def test_sdpa_backend_choice(dtype, mask, hq, hk, d, expected):
    q = torch.empty(1, hq, 16, d, dtype=dtype, device="meta")
    k = torch.empty(1, hk, 16, d, dtype=dtype, device="meta")
    m = torch.empty(1, 1, 16, 16, dtype=torch.bool, device="meta") if mask else None
    assert _attention.choose_backend(q, k, k, m, enable_gqa=hq != hk) == expected


def test_flash_allocates_outputs_logsumexp_and_backward_workspace_not_s_by_s():
    b, h, s, d = 2, 4, 200, 32
    q = torch.randn(b, h, s, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, h, s, d, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, h, s, d, dtype=torch.bfloat16, requires_grad=True)

    def step():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()

    allocs = _allocations(step)
    qkv = b * h * s * d * 2
    s128 = (s + 127) // 128 * 128
    d32 = (d + 31) // 32 * 32
    fwd = sorted(n for op, n in allocs if op.startswith("flash_fwd"))
    bwd = sorted(n for op, n in allocs if op.startswith("flash_bwd"))
    assert fwd == sorted([qkv,                       # output
                          b * h * s * 4])            # logsumexp, fp32
    assert bwd == sorted([qkv, qkv, qkv,             # dq, dk, dv
                          b * h * s128 * 4,          # softmax_d, fp32
                          b * s128 * h * d32 * 4])   # dq_accum, fp32
    sizes = [n for _, n in allocs]
    assert max(sizes) < b * h * s * s * 2  # never the s x s matrix
    # The emulated values are right too (real tensors): compare with torch's math kernel.
    with torch.no_grad():
        ref = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, is_causal=True)[0]
        with _emulate.cuda_emulation(Counter(), fake=False):
            got = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(got.float(), ref.float(), atol=2e-2)


def test_emulation_leaves_no_registration_behind():
    before = torch._C._dispatch_dump("aten::softmax.int")
    with _emulate.cuda_emulation(Counter(), fake=True):
        during = torch._C._dispatch_dump("aten::softmax.int")
    after = torch._C._dispatch_dump("aten::softmax.int")
    assert before == after and during != before
