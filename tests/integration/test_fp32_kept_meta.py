"""The weights transformers keeps in fp32 under a bf16 dtype (``_keep_in_fp32_modules_strict``:
DeepSeek-V2/V3's and GLM-4.5's router ``gate.weight``), against the model transformers builds
on the meta device in bf16: the plan's weight bytes equal the sum of its parameters' bytes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.formats import get_weight_format, weights_bytes_in_format  # noqa: E402
from gpuplan.models import architecture_from_config, count_params  # noqa: E402

from test_models_oracle import VARIANTS  # noqa: E402  (rootdir-relative, as pytest puts tests/integration on sys.path)

KEPT = ["deepseek-v3-mla-moe", "deepseek-v2-lite-no-q-lora", "deepseek-v2-group-limited",
        "glm4-moe-qk-norm-bias"]


def _meta_bf16(variant):
    model_type, cls_name, cfg = VARIANTS[variant]
    hf_config = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        hf = getattr(transformers, cls_name)._from_config(hf_config, dtype=torch.bfloat16)
    arch = architecture_from_config({"model_type": model_type, **cfg}, name=variant)
    return hf, arch


@pytest.mark.parametrize("variant", [*KEPT, "qwen3-moe-sparse-step", "llama-biases"])
def test_bf16_weight_bytes_equal_meta_model(variant):
    hf, arch = _meta_bf16(variant)
    n = count_params(arch.tensors, arch).total
    meta = sum(p.numel() * p.element_size() for p in hf.parameters())
    fp32 = sum(p.numel() for p in hf.parameters() if p.dtype == torch.float32)
    assert (fp32 > 0) == (variant in KEPT)
    bf16 = get_weight_format("bf16")
    assert weights_bytes_in_format(bf16, arch.tensors, arch, n) == meta == 2 * n + 2 * fp32
    # vLLM builds its own router in the model dtype: every parameter 2 bytes.
    assert weights_bytes_in_format(bf16, arch.tensors, arch, n, "vllm") == 2 * n


@pytest.mark.parametrize("variant", ["deepseek-v3-mla-moe", "deepseek-v2-lite-no-q-lora"])
def test_full_finetune_holds_the_kept_router_in_fp32(variant):
    """mixed-bf16 under transformers: the 16-bit copy is the model built in bf16 (the router
    fp32); a fp32 parameter's grad is fp32 (``param.grad`` takes the parameter's dtype); the
    fp32 master and the Adam states are 4 bytes a parameter either way. torchtitan runs its own
    model code: every copy 2 bytes."""
    from gpuplan.job import Job
    from gpuplan.memory.states import train_states
    from gpuplan.models._types import Model

    hf, arch = _meta_bf16(variant)
    model = Model(name=variant, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                  architecture=arch, source="config")
    n = model.params.total
    fp32 = sum(p.numel() for p in hf.parameters() if p.dtype == torch.float32)
    meta = sum(p.numel() * p.element_size() for p in hf.parameters())
    st = train_states(model, Job(model=model, precision="mixed-bf16", mode="train",
                                   engine="transformers"))
    assert st.weights_trainable == meta == 2 * n + 2 * fp32
    assert st.grads == 2 * (n - fp32) + 4 * fp32
    assert st.master == 4 * n
    titan = train_states(model, Job(model=model, precision="mixed-bf16", mode="train",
                                  engine="torchtitan"))
    assert (titan.weights_trainable, titan.grads) == (2 * n, 2 * n)
