"""--moe-shared-expert-overlap: Megatron-Core runs the shared expert on its own stream beside
the alltoall dispatcher's all-to-alls (token_dispatcher.py / shared_experts.py at
NVIDIA/Megatron-LM@0d8e0714), each of its four stretches hiding at most its own all-to-all;
counted by hand."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import shared_overlap_hidden_s
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.models import load_model


def test_each_stretch_hides_at_most_its_own_all_to_all():
    # a layer's all-to-alls 4 ms: 1 ms each; the shared expert's stretches 0.5, 2, 0.25, 1 ms
    # hide 0.5 + 1 + 0.25 + 1 = 2.75 ms
    assert shared_overlap_hidden_s(4e-3, (0.5e-3, 2e-3, 0.25e-3, 1e-3)) == pytest.approx(2.75e-3)
    assert shared_overlap_hidden_s(4e-3, ()) == 0.0


def _ep_comm(overlap: bool) -> float:
    job = Job(model="deepseek-v3", mode="train", engine="megatron", precision="mxfp8",
              gpus=256, pp=16, ep=8, zero=1, batch=1, seq=4096, grad_accum=64,
              pp_first_stage_layers=4, pp_last_stage_layers=1,
              moe_shared_expert_overlap=overlap)
    gpu = get_gpu("B200-SXM-180GB")
    est = estimate_speed(load_model("deepseek-v3"), gpu, job, measured=None,
                         topology=topology_for(gpu, gpus_per_node=8))
    return est.layout.ep_comm_s


def test_the_overlap_only_shortens_the_exposed_all_to_all():
    # DeepSeek-V3's shared expert (2048 wide) is far shorter than its layer's all-to-alls on
    # 8 B200s: it hides, it does not hide all of them
    off, on = _ep_comm(False), _ep_comm(True)
    assert 0 < on < off


@pytest.mark.parametrize("kw", [dict(engine="torchtitan"), dict(moe_dispatcher="hybridep"),
                                dict(ep_overlap=True, pp=1)])
def test_refusals(kw):
    base = dict(model="deepseek-v3", mode="train", engine="megatron", gpus=64, ep=8)
    base.update(kw)
    with pytest.raises(InputError) as e:
        Job(**base, moe_shared_expert_overlap=True)
    assert e.value.field == "moe_shared_expert_overlap"


def test_a_model_without_a_shared_expert_refuses_it():
    job = Job(model="qwen3-30b-a3b", mode="train", engine="megatron", gpus=8, ep=8, zero=1,
              moe_shared_expert_overlap=True)
    with pytest.raises(InputError) as e:
        estimate_speed(load_model("qwen3-30b-a3b"), get_gpu("B200-SXM-180GB"), job,
                       measured=None)
    assert e.value.field == "moe_shared_expert_overlap"
