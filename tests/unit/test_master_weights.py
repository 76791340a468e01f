"""``master_weights``: the dtype of the master copy the optimizer steps (NeMo's fp8_params over
Apex's DistributedFusedAdam keeps it in that optimizer's bf16: NVIDIA/NeMo@e938df32
megatron_base_model.py 802-812, NVIDIA/apex@f8e60c47 distributed_fused_adam.py 449-476), in the
memory plan, the optimizer step's traffic, the layout search and the exports; and the speed
model's optimizer step reading the Job's ``optimizer_states`` (it read the recipe's)."""

from __future__ import annotations

import pytest

from gpuplan.cli import build_parser
from gpuplan.cli.fit import job_from_args
from gpuplan.cluster import cluster_search
from gpuplan.compute import estimate_speed
from gpuplan.errors import InputError
from gpuplan.export import export_plan
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.memory.states import train_states
from gpuplan.models import load_model

from test_export import megatron_args

A100 = get_gpu("A100-SXM4-80GB")
MODEL = "llama-3.2-1b"


def _job(**kw) -> Job:
    return Job(model=MODEL, mode="train", batch=1, seq=256, precision="mixed-bf16", **kw)


def test_master_bytes_by_hand():
    """The master line is 4 B a weight at fp32 (the default) and 2 B at bf16; ZeRO-1 over 4
    ranks holds a quarter of it (padded up); the label names the bits."""
    m = load_model(MODEL)
    n = m.params.total
    auto, fp32, bf16 = (train_memory(m, _job(**kw)) for kw in
                        ({}, {"master_weights": "fp32"}, {"master_weights": "bf16"}))
    assert auto.master_weights_bytes == fp32.master_weights_bytes == 4 * n
    assert bf16.master_weights_bytes == 2 * n
    # every other state line is the same: weights 2 B, grads 2 B, Adam's two fp32 states 8 B
    assert bf16.weights_bytes == auto.weights_bytes and bf16.optimizer_bytes == 8 * n
    line = next(x for x in bf16.lines if x.key == "master_weights")
    assert line.label.startswith("16-bit master")
    sharded = train_memory(m, _job(master_weights="bf16", gpus=4, zero=1))
    assert sharded.master_weights_bytes == -(-2 * n // 4)


def test_remainder_master_by_hand():
    """master_weights remainder (Apex DistributedFusedAdam store_param_remainders: an int16
    shard, the fp32 master's low 16 bits, its top 16 the bf16 weight): 2 B a weight on the
    master line beside the 2 B weight (weights, grads and Adam's fp32 states unchanged: 2 + 2 +
    2 + 8 = 14 B a weight where the fp32 copy makes 16); ZeRO-1 over 8 ranks holds an eighth (padded up); foreach AdamW's step keeps
    only the state-sized sqrt (4 B): the 16-bit grads are not copied into fp32."""
    m = load_model(MODEL)
    n = m.params.total
    fp32, rem = (train_memory(m, _job(**kw)) for kw in ({}, {"master_weights": "remainder"}))
    assert rem.master_weights_bytes == 2 * n
    assert fp32.master_weights_bytes - rem.master_weights_bytes == 2 * n
    assert rem.weights_bytes == fp32.weights_bytes and rem.optimizer_bytes == 8 * n
    assert rem.gradients_bytes == fp32.gradients_bytes
    line = next(x for x in rem.lines if x.key == "master_weights")
    assert "remainders" in line.label
    assert train_memory(m, _job(master_weights="remainder", gpus=8, zero=1)) \
        .master_weights_bytes == -(-2 * n // 8)
    assert train_states(m, _job(master_weights="remainder")).step_tmp == 4 * n


def test_no_master_by_hand():
    """master_weights none (Apex DistributedFusedAdam with store_params False, as NeMo sets it
    when the optimizer's dtype is the model's bf16): no master line bytes, bf16 Adam states
    (2 x 2 B), the bf16 weights and grads as before: 2 + 2 + 4 = 8 B a weight where the fp32
    master and states make 16; the step copies nothing and fused Adam keeps no sqrt."""
    m = load_model(MODEL)
    n = m.params.total
    none = train_memory(m, _job(master_weights="none", optimizer_states="bf16"))
    auto = train_memory(m, _job())
    assert none.master_weights_bytes == 0 and auto.master_weights_bytes == 4 * n
    assert none.optimizer_bytes == 4 * n
    assert none.weights_bytes == auto.weights_bytes and none.gradients_bytes == 2 * n
    line = next(x for x in none.lines if x.key == "master_weights")
    assert line.label.startswith("no master copy")
    fused = _job(master_weights="none", optimizer_states="bf16", fused_optimizer=True)
    assert train_states(m, fused).step_tmp == 0


def test_the_master_step_copies_gradients_only_into_fp32():
    """torch's foreach AdamW with an fp32 master: an fp32 copy of the bf16 gradients (4 B) and
    the sqrt of the second moment (state-sized, 4 B) during the step; a bf16 master steps on the
    bf16 gradients (no copy), and bf16 states make the sqrt 2 B."""
    m = load_model(MODEL)
    n = m.params.total
    assert train_states(m, _job()).step_tmp == 8 * n
    assert train_states(m, _job(master_weights="bf16")).step_tmp == 4 * n
    both = _job(master_weights="bf16", optimizer_states="bf16")
    assert train_states(m, both).step_tmp == 2 * n


def _step_bytes(job: Job) -> float:
    m = load_model(MODEL)
    est = estimate_speed(m, A100, job, measured=None, optimizer_impl="fused")
    return next(t for t in est.step.ops if t.op.name == "optimizer.step").op.bytes


@pytest.mark.parametrize("kw,per_param", [
    # fused Adam reads master, grad, two states and writes master, states, the bf16 weights:
    ({}, 4 + 2 + 8 + 4 + 8 + 2),
    ({"optimizer_states": "bf16"}, 4 + 2 + 4 + 4 + 4 + 2),
    ({"master_weights": "bf16"}, 2 + 2 + 8 + 2 + 8 + 2),
    ({"master_weights": "bf16", "optimizer_states": "bf16"}, 2 + 2 + 4 + 2 + 4 + 2),
    # remainders (Apex's multi_tensor_fused_adam_with_param_remainders): read the bf16 weight
    # and its remainder, the grad and two states; write the weight, remainder and states
    ({"master_weights": "remainder"}, (2 + 2) + 2 + 8 + (2 + 2) + 8),
    # no master (Apex at dtype bf16, store_params False): read the bf16 weight, the grad and two
    # bf16 states; write the weight and the states, no 16-bit copy to write
    ({"master_weights": "none", "optimizer_states": "bf16"}, 2 + 2 + 4 + 2 + 4),
])
def test_optimizer_traffic_by_hand(kw, per_param):
    n = load_model(MODEL).params.total
    assert _step_bytes(_job(**kw)) == pytest.approx(per_param * n)


def test_cli_and_json_spell_it_like_optimizer_states():
    args = build_parser("fit").parse_args(["fit", MODEL, "--master-weights", "bf16",
                                           "--precision", "fp8-delayed"])
    j = job_from_args(args)
    assert j.master_weights == "bf16"
    assert Job.from_dict(j.to_dict()).master_weights == "bf16"
    assert Job(model=MODEL).to_dict()["master_weights"] == "auto"
    args = build_parser("fit").parse_args(["fit", MODEL, "--master-weights", "remainder"])
    assert Job.from_dict(job_from_args(args).to_dict()).master_weights == "remainder"
    args = build_parser("fit").parse_args(["fit", MODEL, "--master-weights", "none",
                                           "--optimizer-states", "bf16"])
    assert Job.from_dict(job_from_args(args).to_dict()).master_weights == "none"


@pytest.mark.parametrize("kw,match,fix", [
    ({"precision": "bf16", "master_weights": "bf16"}, "no separate master copy",
     {"master_weights": "auto"}),
    ({"precision": "fp32", "master_weights": "fp32"}, "no separate master copy",
     {"master_weights": "auto"}),
    ({"engine": "megatron", "master_weights": "bf16"}, "optimizer_states bf16",
     {"optimizer_states": "bf16"}),
    ({"engine": "torchtitan", "zero": 3, "gpus": 2, "master_weights": "bf16"},
     "fp32 parameter shard is the master", {"master_weights": "auto"}),
    ({"precision": "mixed-fp16", "master_weights": "remainder"}, "keeps fp16 weights",
     {"master_weights": "auto"}),
    ({"precision": "bf16", "master_weights": "remainder"}, "no separate master copy",
     {"master_weights": "auto"}),
    ({"master_weights": "none"}, "optimizer_states bf16", {"optimizer_states": "bf16"}),
    ({"precision": "mixed-fp16", "master_weights": "none", "optimizer_states": "bf16"},
     "fp16 weights", {"master_weights": "auto"}),
    ({"precision": "bf16", "master_weights": "none"}, "no separate master copy",
     {"master_weights": "auto"}),
    # ZeRO-Offload's CPU Adam steps an fp32 master on the host: no master is not what it runs
    ({"master_weights": "none", "optimizer_states": "bf16", "zero": 2, "gpus": 2,
      "offload_optimizer": True}, "fp32 master of every weight on the host",
     {"master_weights": "auto"}),
])
def test_refusals_name_the_fix(kw, match, fix):
    kw = {"precision": "mixed-bf16", **kw}
    with pytest.raises(InputError, match=match) as e:
        Job(model=MODEL, mode="train", **kw)
    assert e.value.fix == fix and "\n" not in str(e.value)


def test_megatron_export_writes_fp32_and_refuses_bf16():
    """Megatron-LM's --main-params-dtype takes fp32 or fp16 (arguments.py @d98e8a64), fp32 its
    default: an fp32 master exports as the default does; a bf16 one is refused; a remainder
    master needs the distributed optimizer the precision-aware optimizer runs over."""
    j = Job(model="llama-3.1-8b", mode="train", gpus=8, engine="megatron", precision="mixed-bf16")
    plain = export_plan(j, "megatron")
    assert export_plan(j.with_(master_weights="fp32"), "megatron") == plain
    assert export_plan(j.with_(optimizer_states="fp32"), "megatron") == plain
    assert megatron_args(plain).bf16
    with pytest.raises(InputError, match="main_params_dtype"):
        export_plan(j.with_(master_weights="bf16", optimizer_states="bf16"), "megatron")
    with pytest.raises(InputError, match="keeps none") as e:
        export_plan(j.with_(master_weights="none", optimizer_states="bf16"), "megatron")
    assert e.value.fix == {"master_weights": "auto"}
    with pytest.raises(InputError, match="precision-aware optimizer"):
        export_plan(j.with_(master_weights="remainder"), "megatron")
    # one data-parallel rank: ZeRO-0 is the distributed optimizer over one rank, written so
    one = megatron_args(export_plan(j.with_(gpus=1, master_weights="remainder"), "megatron"))
    assert one.use_distributed_optimizer and one.use_precision_aware_optimizer


#: (job fields, the state dtype Megatron is told: None = its fp32 default). Megatron-Core's
#: precision-aware optimizer keeps FusedAdam's remainder master under bf16 weights and a
#: delayed (or no) FP8 recipe, a whole fp32 one under fp16 weights and the other FP8 recipes
#: (optimizer_config.py 407-413, distrib_optimizer.py 421-423 and 1007-1012 @d98e8a64;
#: TE fused_adam.py 626 @d0067d0d): each plan names the master Megatron then keeps.
_PRECISION_AWARE = [
    ({"master_weights": "remainder"}, None),
    ({"master_weights": "remainder", "optimizer_states": "bf16"}, "bf16"),
    ({"master_weights": "remainder", "precision": "fp8-delayed"}, None),
    ({"master_weights": "remainder", "optimizer_states": "bf16", "precision": "nvfp4"}, "bf16"),
    ({"optimizer_states": "bf16", "precision": "mixed-fp16"}, "bf16"),
    ({"optimizer_states": "bf16", "precision": "fp8-current"}, "bf16"),
    ({"optimizer_states": "bf16", "master_weights": "fp32", "precision": "mxfp8"}, "bf16"),
]


@pytest.mark.parametrize("kw,states", _PRECISION_AWARE)
def test_megatron_exports_the_precision_aware_optimizer(kw, states):
    j = Job(model="llama-3.1-8b", mode="train", gpus=8, **{"precision": "mixed-bf16", "zero": 1,
                                                            **kw})
    a = megatron_args(export_plan(j, "megatron"))
    assert a.use_precision_aware_optimizer and a.use_distributed_optimizer
    assert a.exp_avg_dtype == a.exp_avg_sq_dtype == states
    assert a.bf16 != (j.precision == "mixed-fp16") and a.optimizer == "adam"
    # the plan counts the master Megatron keeps: 2 B a weight beside it, or a 4 B copy
    rem = j.master_weights == "remainder"
    m = load_model("llama-3.1-8b")
    assert train_memory(m, j).master_weights_bytes == (2 if rem else 4) * 8_030_261_248 // 8


@pytest.mark.parametrize("kw,match,fix", [
    ({"optimizer_states": "bf16"}, "no option turns that off", {"master_weights": "remainder"}),
    ({"optimizer_states": "bf16", "master_weights": "fp32", "precision": "fp8-delayed"},
     "16-bit remainders", {"master_weights": "remainder"}),
    ({"master_weights": "remainder", "precision": "fp8-blockwise"}, "whole fp32 master",
     {"master_weights": "auto"}),
    ({"master_weights": "remainder", "zero": 0}, "distributed optimizer", {"zero": 1}),
    ({"optimizer_states": "bf16", "offload_optimizer": True}, "torch's Adam",
     {"optimizer_states": "auto"}),
    ({"master_weights": "remainder", "precision": "fp8-delayed", "fp8_param_gather": True},
     "FP8 tensors", {"master_weights": "auto"}),
    ({"optimizer_states": "bf16", "precision": "fp32"}, "16-bit weights",
     {"precision": "mixed-bf16", "master_weights": "remainder"}),
])
def test_megatron_refuses_the_master_it_does_not_keep(kw, match, fix):
    """Each refusal is one line naming a fix that exports (for bf16 states under bf16 weights:
    the remainder master Megatron keeps)."""
    j = Job(model="llama-3.1-8b", mode="train", gpus=8, **{"precision": "mixed-bf16", "zero": 1,
                                                            **kw})
    with pytest.raises(InputError, match=match) as e:
        export_plan(j, "megatron")
    assert e.value.fix == fix and "\n" not in str(e.value)
    assert megatron_args(export_plan(j.with_(**fix), "megatron")).use_distributed_optimizer


def test_other_exports_refuse_a_16bit_master():
    j = Job(model="llama-3.1-8b", mode="train", gpus=8, zero=1, precision="mixed-bf16",
            master_weights="bf16")
    with pytest.raises(InputError, match="master_weights"):
        export_plan(j, "deepspeed")


def test_megatron_cluster_proposals_export():
    """The cluster search under Megatron with a remainder master and bf16 states proposes the
    distributed optimizer only (ZeRO-1, or ZeRO-0 over one data-parallel rank, where it is
    the same), and each proposal exports with the precision-aware optimizer."""
    m = load_model(MODEL)
    j = Job(model=MODEL, mode="train", gpus=8, seq=2048, engine="megatron",
            precision="mixed-bf16", master_weights="remainder", optimizer_states="bf16")
    plan = cluster_search(m, get_gpu("H100-SXM-80GB"), j, global_batch=32, top=3)
    assert plan.best
    for cand in plan.best:
        lay = cand.layout
        assert lay.zero == 1 or lay.dp * lay.cp == 1
        a = megatron_args(export_plan(cand.job, "megatron", model=m))
        assert a.use_distributed_optimizer and a.use_precision_aware_optimizer
        assert a.exp_avg_dtype == a.exp_avg_sq_dtype == "bf16"


def test_fp32_grad_buffer_by_hand():
    """grad_dtype fp32 (Apex DistributedFusedAdam with no grad_sync_dtype: its fp32 dtype, the
    contiguous grad buffer in it; NVIDIA/apex@f8e60c47 distributed_fused_adam.py lines 586-587,
    1099-1118): 4 B a weight's gradient where the mixed recipe's are 2, unsharded under ZeRO-1;
    the weights, master and states as before; the fused step reads 4 B gradients; an fp32
    master needs no fp32 copy of them."""
    m = load_model(MODEL)
    n = m.params.total
    auto, fp32 = (train_memory(m, _job(**kw)) for kw in ({}, {"grad_dtype": "fp32"}))
    assert fp32.gradients_bytes == 4 * n and auto.gradients_bytes == 2 * n
    assert (fp32.weights_bytes, fp32.master_weights_bytes, fp32.optimizer_bytes) == \
        (auto.weights_bytes, auto.master_weights_bytes, auto.optimizer_bytes)
    assert any(x.label == "gradients, 32-bit" for x in fp32.lines)
    assert train_memory(m, _job(grad_dtype="fp32", gpus=4, zero=1)).gradients_bytes == 4 * n
    assert train_states(m, _job(grad_dtype="fp32")).step_tmp == 4 * n  # the sqrt alone
    assert _step_bytes(_job(grad_dtype="fp32")) - _step_bytes(_job()) == pytest.approx(2 * n)
    args = build_parser("fit").parse_args(["fit", MODEL, "--grad-dtype", "fp32"])
    assert Job.from_dict(job_from_args(args).to_dict()).grad_dtype == "fp32"


@pytest.mark.parametrize("kw,match", [
    ({"precision": "fp32"}, "fp32 parameters' own"),
    ({"precision": "amp-bf16"}, "fp32 parameters' own"),
    ({"engine": "torchtitan", "zero": 3, "gpus": 2}, "FSDP2's reduce dtype"),
])
def test_grad_dtype_refusals_name_the_fix(kw, match):
    with pytest.raises(InputError, match=match) as e:
        Job(model=MODEL, mode="train", grad_dtype="fp32", **{"precision": "mixed-bf16", **kw})
    assert e.value.fix == {"grad_dtype": "auto"} and "\n" not in str(e.value)


def _grad_job(**kw) -> Job:
    return Job(model="llama-3.1-8b", mode="train", gpus=8,
               **{"engine": "megatron", "precision": "mixed-bf16", **kw})


def test_megatron_writes_the_gradient_dtype():
    """Megatron-LM@d98e8a64 arguments.py: --accumulate-allreduce-grads-in-fp32 (line 3069)
    becomes DDPConfig grad_reduce_in_fp32 (training.py line 2635), the buffer allocated in
    torch.float (param_and_grad_buffer.py line 924); --grad-reduce-in-bf16 (line 3053) keeps it
    in the bf16 parameters' dtype (lines 1213-1214). It was refused as having no setting."""
    fp32 = megatron_args(export_plan(_grad_job(grad_dtype="fp32", zero=1), "megatron"))
    assert fp32.accumulate_allreduce_grads_in_fp32 and not fp32.grad_reduce_in_bf16
    bf16 = megatron_args(export_plan(_grad_job(grad_dtype="bf16"), "megatron"))
    assert bf16.grad_reduce_in_bf16 and not bf16.accumulate_allreduce_grads_in_fp32
    auto = megatron_args(export_plan(_grad_job(), "megatron"))
    assert not auto.grad_reduce_in_bf16 and not auto.accumulate_allreduce_grads_in_fp32


@pytest.mark.parametrize("kw,match", [
    # a ZeRO-2 plan under engine auto, exported to Megatron-FSDP
    ({"grad_dtype": "fp32", "zero": 2, "engine": "auto"}, "--megatron-fsdp-main-grads-dtype"),
    ({"grad_dtype": "bf16", "precision": "mixed-fp16"}, "fp16 or fp32 gradients"),
])
def test_megatron_refuses_a_gradient_dtype_it_cannot_write(kw, match):
    with pytest.raises(InputError, match=match) as e:
        export_plan(_grad_job(**kw), "megatron")
    assert e.value.fix == {"grad_dtype": "auto"} and "\n" not in str(e.value)
