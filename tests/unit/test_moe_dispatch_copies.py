"""Megatron-Core's alltoall token dispatcher (with moe_permute_fusion) runs its permute, its
sort into expert order and back, and the expert-parallel all-to-alls as launches of their own
around the experts (token_dispatcher.py @b0cc2706, TE's Triton permutation kernels @fe8fad59c).
Bytes and launches counted by hand for Qwen3-30B-A3B (hidden 2048, 128 experts, top-8)."""

from __future__ import annotations

import pytest

from gpuplan.compute.flops import (StepShape, backward_ops, build_forward_ops, dispatch_op,
                                   run_form)
from gpuplan.models import load_model

ARCH = load_model("qwen3-30b-a3b").architecture
T, H, E, K = 4096, 2048, 128, 8  # one sequence of 4096 tokens; 2-byte activations
R = T * K  # 32768 token-expert rows, dropless


def test_the_architecture_is_the_one_counted():
    a = ARCH
    assert (a.hidden_size, a.num_experts, a.experts_per_token) == (H, E, K)


def test_ep8_sixteen_local_experts():
    op = dispatch_op(T, R, H, E, 2, ep=8, local=16)
    # routing map 4096 x 128 x 9 B; permute reads 4096 x 2048 and writes 32768 x 2048 (2 B);
    # sort and unsort each read and write 32768 x 2048
    assert op.bytes == 4096 * 128 * 9 + (4096 + 32768) * 2048 * 2 + 4 * 32768 * 2048 * 2
    assert op.bytes == 692_584_448
    # row-id map 3 + permute 1 + all-to-alls 3 + sort 2 + unsort 2; backward 1 + 3 + 1 + 1
    assert (op.kernels, op.backward_kernels) == (11, 6)
    assert op.flops == 0.0 and op.counted_flops == 0.0


def test_one_rank_has_no_exchange_and_no_sort():
    op = dispatch_op(T, R, H, E, 2, ep=1, local=128)
    assert op.bytes == 4096 * 128 * 9 + (4096 + 32768) * 2048 * 2
    assert (op.kernels, op.backward_kernels) == (4, 1)


def test_one_local_expert_exchanges_without_sorting():
    op = dispatch_op(T, R, H, E, 2, ep=128, local=1)
    assert (op.kernels, op.backward_kernels) == (7, 4)


def test_its_backward_is_the_inverse_copies():
    op = dispatch_op(T, R, H, E, 2, ep=8, local=16)
    (back,) = backward_ops((op,), act_bytes=2, grad_bytes=2)
    assert back.phase == "backward"
    assert (back.bytes, back.kernels) == (op.bytes, 6)  # not 2x the bytes and kernels + 1


def _names(engine: str, ep: int) -> list[str]:
    shape = StepShape(batch=1, q_len=T, kv_len=T, train=True)
    fwd = build_forward_ops(ARCH, shape, act_bytes=2, weight_bytes=2.0,
                            form=run_form(ARCH, engine, decode=False, ep=ep,
                                          gpu_arch="Blackwell"))
    return [o.name for o in fwd]


@pytest.mark.parametrize("engine", ["vllm", "torchtitan", "transformers"])
def test_only_megatron_runs_the_alltoall_dispatcher(engine):
    assert "moe.dispatch" in _names("megatron", 8)
    assert "moe.dispatch" not in _names(engine, 8)


def test_the_layer_op_is_the_counted_one():
    shape = StepShape(batch=1, q_len=T, kv_len=T, train=True)
    fwd = build_forward_ops(ARCH, shape, act_bytes=2, weight_bytes=2.0,
                            form=run_form(ARCH, "megatron", decode=False, ep=8,
                                          gpu_arch="Blackwell"))
    (op,) = [o for o in fwd if o.name == "moe.dispatch"]
    assert op.count == 48 and op.bytes == 692_584_448 and op.kernels == 11


# -- the flex dispatcher's backends ------------------------------------------------------------

def test_hybridep_fuses_the_permute_into_the_exchange():
    # metadata preprocessing + dispatch_with_permute + combine_with_unpermute; the routing map
    # read once (4096 x 128 bools); no row copies of its own
    op = dispatch_op(T, R, H, E, 2, ep=8, local=16, dispatcher="hybridep")
    assert (op.kernels, op.backward_kernels, op.bytes) == (3, 2, 4096 * 128)


def test_deepep_permutes_after_its_exchange():
    # top-k 1, layout 1, dispatch 2, multi-hot 13, sum 1, row map 3 + permute 1, combine 1;
    # the permute reads and writes 32768 x 2048 rows, the row map 9 B an entry
    op = dispatch_op(T, R, H, E, 2, ep=8, local=16, dispatcher="deepep")
    assert (op.kernels, op.backward_kernels) == (1 + 1 + 2 + 13 + 1 + 4 + 1, 5) == (23, 5)
    assert op.bytes == 4096 * 128 * 9 + 2 * 32768 * 2048 * 2


@pytest.mark.parametrize("dispatcher", ["deepep", "hybridep"])
def test_one_rank_runs_the_alltoall_path(dispatcher):
    assert dispatch_op(T, R, H, E, 2, ep=1, local=128, dispatcher=dispatcher) == \
        dispatch_op(T, R, H, E, 2, ep=1, local=128)


def test_the_job_carries_the_dispatcher_to_the_layer():
    shape = StepShape(batch=1, q_len=T, kv_len=T, train=True)
    fwd = build_forward_ops(ARCH, shape, act_bytes=2, weight_bytes=2.0,
                            form=run_form(ARCH, "megatron", decode=False, ep=8,
                                          gpu_arch="Blackwell", dispatcher="hybridep"))
    (op,) = [o for o in fwd if o.name == "moe.dispatch"]
    assert op.kernels == 3


def test_only_megatron_takes_a_flex_dispatcher():
    from gpuplan.errors import InputError
    from gpuplan.job import Job
    assert Job(model="qwen3-30b-a3b", mode="train", engine="megatron", gpus=8, ep=8,
               moe_dispatcher="deepep").moe_dispatcher == "deepep"
    with pytest.raises(InputError) as e:
        Job(model="qwen3-30b-a3b", mode="train", engine="torchtitan", moe_dispatcher="deepep")
    assert e.value.field == "moe_dispatcher"
