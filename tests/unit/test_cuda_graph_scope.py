"""--cuda-graph-scope: Megatron-Core's Transformer Engine CUDA graphs over parts of each layer
(transformer_layer.py _te_cuda_graph_capture / _te_cuda_graph_replay and transformer_config.py's
checks at NVIDIA/Megatron-LM@b0cc2706): what each scope captures, the host issue of the
captured kernels as one launch per graph, counted by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import constant, runtime_overheads
from gpuplan.compute.flops import Op
from gpuplan.compute.graphs import captured_kernels, graphed_ops
from gpuplan.compute.parallel import micro_cost
from gpuplan.compute.time import OpTime
from gpuplan.compute.step import train_precision
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

EAGER = runtime_overheads("eager")  # 32 us a forward kernel; a megatron backward as its forward
HOST = constant("eager_host_fwd_s")


def _t(name: str, phase: str, kernels: int, count: int = 2, group: str = "moe"):
    op = Op(name=name, op_class="norm_elementwise", kind="elementwise", phase=phase, count=count,
            flops=0.0, counted_flops=0.0, bytes=0.0, parallel_work=1, kernels=kernels,
            group=group)
    return OpTime(op=op, compute_s=0.0, memory_s=0.0, occupancy=1.0, dtype="fp32")


def _layer(count: int = 2) -> list:
    # two MoE layers (count 2), the launches as gpuplan counts them for the alltoall dispatcher
    return [_t("attn.qkv", "forward", 3, count), _t("mlp.norm", "forward", 1, count),
            _t("moe.router", "forward", 1, count), _t("moe.topk", "forward", 4, count),
            _t("moe.dispatch", "forward", 11, count), _t("moe.up", "forward", 16, count),
            _t("attn.qkv", "backward", 6, count), _t("mlp.norm", "backward", 2, count),
            _t("moe.router", "backward", 2, count), _t("moe.topk", "backward", 5, count),
            _t("moe.dispatch", "backward", 6, count)]


def _host(ops: list) -> float:
    """The issue time as Phase._host_s counts it with the megatron backward at the forward's
    cost: each kernel its op's host_s, else 32 us."""
    return sum(t.op.kernels * t.op.count * (HOST if t.op.host_s is None else t.op.host_s)
               for t in ops)


def test_router_and_preprocess_scope_is_one_launch_per_graph():
    # captured a layer: forward mlp.norm 1 + router 1 + top-k 4 + the dispatch's first permute 4
    # (of its 11) = 10; backward 2 + 2 + 5 + the unpermute 1 (of 6) = 10: 20 launches a layer,
    # 40 for the two. Left eager a layer: qkv 3 + 6, dispatch 7 + 5, experts 16 = 37 (74 both).
    # Graphs: a forward and a backward replay a layer, 4 -> 4 x graph_replay_s for the 40.
    ops = _layer()
    scope = ("moe_router", "moe_preprocess")
    assert [captured_kernels(t, scope) for t in ops] == [0, 1, 1, 4, 4, 0, 0, 2, 2, 5, 1]
    before = _host(ops)
    after = _host(graphed_ops(ops, scope, replace(EAGER, host_bwd_s=EAGER.host_fwd_s)))
    assert before == pytest.approx((74 + 40) * HOST)
    assert after == pytest.approx(74 * HOST + 4 * constant("graph_replay_s"))


def test_attn_scope_takes_dense_layers_and_router_scope_does_not():
    # a dense layer (group dense) holds an attention graph but no router graph
    dense = [_t("attn.qkv", "forward", 3, 1, "dense"), _t("attn.core", "backward", 3, 1, "dense"),
             _t("mlp.norm", "forward", 1, 1, "dense")]
    assert [captured_kernels(t, ("moe_router",)) for t in dense] == [0, 0, 0]
    assert [captured_kernels(t, ("attn",)) for t in dense] == [3, 3, 0]
    # hybridep's dispatch keeps every launch outside the graph (its metadata is in the call)
    assert captured_kernels(_t("moe.dispatch", "forward", 3), ("moe_router", "moe_preprocess"),
                            "hybridep") == 0


def test_no_scope_or_no_gpu_host_leaves_ops_alone():
    ops = _layer()
    assert graphed_ops(ops, None, EAGER) == ops
    assert graphed_ops(ops, ("attn",), None) == ops


def _cost(scope, model="qwen3-30b-a3b", gpu="B200-SXM-180GB"):
    device = device_from_gpu(get_gpu(gpu))
    eff = default_efficiency(device)
    prec = train_precision("mxfp8", device, False)
    return micro_cost(load_model(model).architecture, device, eff, prec, tp=1, cp=1, batch=1,
                      seq=4096, checkpointing="none", attention="sdpa", runtime="compile", ep=8,
                      engine="megatron", moe_sync=True, cuda_graph_scope=scope)


def test_graphs_shorten_a_host_bound_micro_batch_by_at_most_the_launches_they_take():
    # Qwen3-30B-A3B on a B200, MXFP8, EP 8, one 4096-token sequence: host-bound at 32 us a
    # kernel (the step's issue paces all its kernels). The router graph takes, in each of the 48
    # layers, the norm's, router's and top-k's launches (forward 1 + 1 + 4, backward 2 + 2 + 5)
    # and the router GEMM's two casts (gpuplan counts it among the narrow GEMMs): 17 at 32 us,
    # for two replays. The micro-batch can shorten by no more than that host time.
    plain, graphed = _cost(None), _cost(("moe_router",))
    layers = load_model("qwen3-30b-a3b").architecture.num_layers
    saved = (layers * plain.layer_s + plain.other_s) - (layers * graphed.layer_s
                                                        + graphed.other_s)
    assert layers == 48
    assert 0 < saved <= layers * (17 * HOST - 2 * constant("graph_replay_s")) + 1e-12


@pytest.mark.parametrize("kw, field", [
    (dict(cuda_graph_scope=("mlp",)), "cuda_graph_scope"),
    (dict(cuda_graph_scope=("moe_preprocess",)), "cuda_graph_scope"),
    (dict(cuda_graph_scope=("attn",), checkpointing="full"), "cuda_graph_scope"),
    (dict(cuda_graph_scope=("moe_router", "moe_preprocess"), moe_capacity_factor=1.0),
     "cuda_graph_scope"),
])
def test_refusals(kw, field):
    with pytest.raises(InputError) as e:
        Job(model="qwen3-30b-a3b", mode="train", engine="megatron", gpus=8, ep=8, **kw)
    assert e.value.field == field


def test_other_engines_refuse_it():
    with pytest.raises(InputError) as e:
        Job(model="qwen3-30b-a3b", mode="train", engine="torchtitan", cuda_graph_scope=("attn",))
    assert e.value.field == "cuda_graph_scope"


def test_a_single_gpu_step_replays_its_graphs_too():
    # one B200 (no layout): the step's own ops carry the graphs; a host-bound MoE step gains,
    # a dense device-bound one (Llama 3.1 8B) is unmoved
    gpu = get_gpu("B200-SXM-180GB")

    def tps(model, scope):
        job = Job(model=model, mode="train", engine="megatron", precision="mxfp8", seq=4096,
                  grad_accum=4, cuda_graph_scope=scope)
        return estimate_speed(load_model(model), gpu, job, measured=None).tokens_per_s

    assert tps("qwen3-30b-a3b", ("moe_router", "moe_preprocess")) > tps("qwen3-30b-a3b", None)
    assert tps("llama-3.1-8b", ("attn",)) == pytest.approx(tps("llama-3.1-8b", None))


def test_router_graphs_need_experts():
    job = Job(model="llama-3.1-8b", mode="train", engine="megatron",
              cuda_graph_scope=("moe_router",))
    with pytest.raises(InputError) as e:
        estimate_speed(load_model("llama-3.1-8b"), get_gpu("B200-SXM-180GB"), job, measured=None)
    assert e.value.field == "cuda_graph_scope"


@pytest.mark.parametrize("flag, example", [("--cuda-graph-scope", "attn"),
                                           ("--recompute-modules", "core_attn"),
                                           ("--lora-targets", "q_proj")])
@pytest.mark.parametrize("value", ["", ",,", " , "])
def test_an_empty_list_option_is_refused_with_its_own_example(capsys, flag, example, value):
    """qa43: an empty --cuda-graph-scope (or --recompute-modules) was told to give "module names
    such as q_proj,v_proj", --lora-targets' example; each list now names its own."""
    from gpuplan.cli import main
    from gpuplan.cli._job_options import _LIST_EXAMPLES, JOB_OPTIONS

    assert {o.flag for o in JOB_OPTIONS if o.kind == "list"} == set(_LIST_EXAMPLES)
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "megatron", flag,
                 value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"gpuplan: error: {flag} ")
    assert f"such as {example}" in err and (example == "q_proj") == ("q_proj" in err)
