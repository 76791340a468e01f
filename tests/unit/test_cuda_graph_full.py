"""--cuda-graph-scope full: Megatron-Core's own whole-layer CUDA graphs (enable_cuda_graph at
NVIDIA/Megatron-LM@core_v0.15.0rc6, cuda_graph_impl "local" at @0d8e0714): every kernel of a
layer's forward, and of its backward, issued as one graph replay; refused where Megatron
refuses; the static buffers they hold; the export's flag. Counted by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import constant, runtime_overheads
from gpuplan.compute.flops import Op
from gpuplan.compute.graphs import captured_kernels, graphed_ops
from gpuplan.compute.time import OpTime
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory.train import train_memory
from gpuplan.models import load_model

EAGER = runtime_overheads("eager")
HOST = constant("eager_host_fwd_s")


def _t(name: str, phase: str, kernels: int, count: int = 2, group: str = "moe"):
    op = Op(name=name, op_class="norm_elementwise", kind="elementwise", phase=phase, count=count,
            flops=0.0, counted_flops=0.0, bytes=0.0, parallel_work=1, kernels=kernels,
            group=group)
    return OpTime(op=op, compute_s=0.0, memory_s=0.0, occupancy=1.0, dtype="fp32")


def _ops() -> list:
    # two MoE layers (count 2) and the step's embedding and head, which no layer graph holds
    return [_t("embed", "forward", 1, 1, "embedding"),
            _t("attn.qkv", "forward", 3), _t("moe.router", "forward", 1),
            _t("moe.dispatch", "forward", 11), _t("moe.up", "forward", 16),
            _t("attn.qkv", "backward", 6), _t("moe.dispatch", "backward", 6),
            _t("moe.up", "backward", 32), _t("head", "forward", 2, 1, "head")]


def _host(ops: list) -> float:
    return sum(t.op.kernels * t.op.count * (HOST if t.op.host_s is None else t.op.host_s)
               for t in ops)


def test_whole_layer_graph_is_two_launches_a_layer():
    # a layer's kernels: forward 3 + 1 + 11 + 16 = 31, backward 6 + 6 + 32 = 44: 75 a layer,
    # 150 for the two, all captured; the embedding's 1 and the head's 2 stay eager. Graphs: a
    # forward and a backward replay a layer: 4 x graph_replay_s in place of the 150 launches.
    ops = _ops()
    assert [captured_kernels(t, ("full",)) for t in ops] == [0, 3, 1, 11, 16, 6, 6, 32, 0]
    flat = replace(EAGER, host_bwd_s=EAGER.host_fwd_s)
    assert _host(ops) == pytest.approx((150 + 3) * HOST)
    assert _host(graphed_ops(ops, ("full",), flat)) == pytest.approx(
        3 * HOST + 4 * constant("graph_replay_s"))
    # against the router scope alone, which takes only the router's 1 forward launch a layer
    assert _host(graphed_ops(ops, ("moe_router",), flat)) == pytest.approx(
        (150 + 3 - 2) * HOST + 4 * constant("graph_replay_s"))


def _job(**kw) -> Job:
    base = dict(model="qwen3-30b-a3b", mode="train", engine="megatron", precision="mxfp8",
                gpus=8, ep=8, seq=4096, grad_accum=8)
    return Job(**{**base, **kw})


def test_token_drop_step_is_faster_with_whole_layer_graphs():
    # Qwen3-30B-A3B on B200, MBS 1: host-bound eager (gpuplan's per-kernel issue); the graphs
    # remove most of that issue time, and never make the step slower
    gpu, m = get_gpu("B200-SXM-180GB"), load_model("qwen3-30b-a3b")
    plain = estimate_speed(m, gpu, _job(moe_capacity_factor=1.0), measured=None)
    full = estimate_speed(m, gpu, _job(moe_capacity_factor=1.0, cuda_graph_scope=("full",)),
                          measured=None)
    assert full.tokens_per_s > 1.3 * plain.tokens_per_s


@pytest.mark.parametrize("kw", [
    dict(cuda_graph_scope=("full", "attn"), moe_capacity_factor=1.0),
    dict(cuda_graph_scope=("full",), moe_capacity_factor=1.0, checkpointing="selective"),
    dict(cuda_graph_scope=("full",), moe_capacity_factor=1.0, checkpointing="full"),
])
def test_job_refusals(kw):
    with pytest.raises(InputError) as e:
        _job(**kw)
    assert e.value.field == "cuda_graph_scope"


def test_dropless_moe_cannot_be_graphed_whole():
    # moe/README.md @core_v0.15.0rc6: dropless expert splits make MoE layers uncapturable
    job = _job(cuda_graph_scope=("full",))
    with pytest.raises(InputError) as e:
        estimate_speed(load_model("qwen3-30b-a3b"), get_gpu("B200-SXM-180GB"), job,
                       measured=None)
    assert e.value.field == "cuda_graph_scope" and e.value.fix == {"moe_capacity_factor": 1.0}
    with pytest.raises(InputError):
        train_memory(load_model("qwen3-30b-a3b"), replace(job, gpus=1, ep=1))
    # a dense model graphs whole layers with no capacity factor
    dense = Job(model="llama-3.1-8b", mode="train", engine="megatron", seq=4096,
                cuda_graph_scope=("full",))
    assert estimate_speed(load_model("llama-3.1-8b"), get_gpu("B200-SXM-180GB"), dense,
                          measured=None).tokens_per_s > 0


def test_static_buffers_are_counted():
    # EP 8, no pipeline: one reused runner; Qwen3-30B-A3B hidden 2048 (its config.json), one
    # 4096-token sequence: 3 buffers x 4096 x 2048 x 2 bytes = 50,331,648 bytes
    m = load_model("qwen3-30b-a3b")
    assert m.architecture.hidden_size == 2048
    plain = train_memory(m, _job(moe_capacity_factor=1.0))
    full = train_memory(m, _job(moe_capacity_factor=1.0, cuda_graph_scope=("full",)))
    items = {i.name: i.expected for i in full.overhead.items}
    assert items["CUDA graph static buffers"] == 3 * 4096 * 2048 * 2 == 50_331_648
    assert full.total_bytes - plain.total_bytes == 50_331_648



def test_static_buffers_without_a_given_seq():
    # no seq: the model's default (min(context, 2048) = 2048 for Llama 3.1 8B, job.default_seq),
    # as the rest of the plan reads it (it was a TypeError, a 500 from POST /api/fit); one GPU,
    # hidden 4096 (its config.json): 3 buffers x 2048 x 4096 x 2 bytes = 50,331,648 bytes
    m = load_model("llama-3.1-8b")
    assert m.architecture.hidden_size == 4096
    job = Job(model="llama-3.1-8b", mode="train", engine="megatron", cuda_graph_scope=("full",))
    assert job.seq is None
    items = {i.name: i.expected for i in train_memory(m, job).overhead.items}
    assert items["CUDA graph static buffers"] == 3 * 2048 * 4096 * 2
    # the same as the sequence given
    given = train_memory(m, replace(job, seq=2048))
    assert train_memory(m, job).total_bytes == given.total_bytes
