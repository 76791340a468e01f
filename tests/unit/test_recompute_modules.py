"""--recompute-modules: Megatron-Core's selective recompute of named submodules
(transformer_config.py recompute_modules, NVIDIA/Megatron-LM@d98e8a64), its extra work counted
by hand from the model's shapes."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

BATCH, SEQ = 1, 2048


def _recomputed(model: str, **kw) -> list:
    job = Job(model=model, mode="train", batch=BATCH, seq=SEQ, engine="megatron",
              attention="sdpa", **kw)
    step = estimate_speed(load_model(model), get_gpu("H100-SXM-80GB"), job, measured=None).step
    return [t.op for t in step.ops if t.op.phase == "recompute"]


def test_mlp_recompute_is_the_dense_mlp_forward():
    # Llama 3.1 8B: hidden 4096, ffn 14336, 32 layers; gate, up and down: 3 x (4096 x 14336)
    ops = _recomputed("llama-3.1-8b", checkpointing="selective", recompute_modules=("mlp",))
    mm = [op for op in ops if op.kind == "matmul"]
    by_hand = 32 * 2 * BATCH * SEQ * 3 * 4096 * 14336
    assert sum(op.flops * op.count for op in mm) == pytest.approx(by_hand, rel=1e-9)
    assert {op.name for op in ops} <= {"mlp.gate_up", "mlp.up", "mlp.act", "mlp.down"}


def test_mla_up_proj_recompute_is_the_up_projections():
    # DeepSeek-V3: q_lora_rank 1536 -> 128 heads x 192; kv_lora_rank 512 -> 128 x (128 + 128);
    # its 61 layers all MLA
    ops = _recomputed("deepseek-v3", checkpointing="selective", recompute_modules=("mla_up_proj",))
    mm = [op for op in ops if op.kind == "matmul"]
    assert {op.name for op in mm} == {"attn.q_b", "attn.kv_b"}
    by_hand = 61 * 2 * BATCH * SEQ * (1536 * 128 * 192 + 512 * 128 * 256)
    assert sum(op.flops * op.count for op in mm) == pytest.approx(by_hand, rel=1e-9)


def test_core_attn_under_a_fused_kernel_adds_nothing():
    # the fused kernel stores no scores: as plain selective, nothing is recomputed
    assert _recomputed("llama-3.1-8b", checkpointing="selective",
                       recompute_modules=("core_attn",)) == []
    assert _recomputed("llama-3.1-8b", checkpointing="selective") == []


@pytest.mark.parametrize("kw, field", [
    (dict(checkpointing="none", recompute_modules=("mlp",)), "checkpointing"),
    (dict(checkpointing="selective", recompute_modules=("moe",)), None),
    (dict(checkpointing="selective", recompute_modules=("mlp",), engine="torchtitan"), "engine"),
])
def test_refusals(kw, field):
    base = dict(model="llama-3.1-8b", mode="train", engine="megatron")
    with pytest.raises(InputError) as e:
        Job(**{**base, **kw})
    assert e.value.field == "recompute_modules" and "\n" not in str(e.value)
    if field:
        assert field in e.value.fix
