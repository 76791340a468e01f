"""LoRA under a tensor / pipeline-parallel layout (one TP rank's micro-batch: no weight
gradients, the adapters at the rank's width) and NeMo's fused QKV target (``linear_qkv``: one
adapter over q, k and v), each counted by hand from Llama 2 70B's config (hidden 8192, 64 heads
and 8 KV heads of 128, FFN 28672, 80 layers, vocabulary 32000)."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.parallel import lora_rank_tensors, micro_cost
from gpuplan.compute.step import adapted_linears, train_precision
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import lora_tensors, train_memory
from gpuplan.models import load_model, lora_linears

H, Q, KV, FFN, LAYERS, VOCAB = 8192, 64 * 128, 8 * 128, 28672, 80, 32000


def test_linear_qkv_is_one_fused_adapter_a_layer():
    m = load_model("llama-2-70b")
    (qkv,) = lora_linears(m.tensors, "llama", m.name, ("linear_qkv",))
    assert qkv.shape == (Q + 2 * KV, H) and qkv.count == LAYERS and qkv.module == "linear_qkv"
    # NeMo's LoraKQVAdapter: A hidden x r, B r x (heads + 2 query groups) x head_dim
    adapters = lora_tensors(m, 32, ("linear_qkv",))
    assert sum(t.total for t in adapters) == 32 * (H + Q + 2 * KV) * LAYERS
    # three apart would hold two more A's of hidden x r a layer
    apart = lora_tensors(m, 32, ("q_proj", "k_proj", "v_proj"))
    assert sum(t.total for t in apart) - sum(t.total for t in adapters) == 2 * 32 * H * LAYERS


def test_linear_qkv_needs_separate_q_k_v():
    gpt2 = load_model("gpt2")  # c_attn is already fused: no q_proj / k_proj / v_proj to join
    with pytest.raises(InputError, match="linear_qkv"):
        lora_linears(gpt2.tensors, "gpt2", gpt2.name, ("linear_qkv",))


def test_the_rank_adapts_its_share_of_each_linear():
    arch = load_model("llama-2-70b").architecture
    tensors = lora_rank_tensors(arch, 2, (32, ("linear_qkv",)))
    (qkv,) = adapted_linears(arch, tensors, ("linear_qkv",))
    # column-parallel: the output over TP 2 (32 query heads and 4 KV heads a rank)
    assert qkv.shape == (Q // 2 + 2 * KV // 2, H)
    (o,) = adapted_linears(arch, tensors, ("o_proj",))
    assert o.shape == (H, Q // 2)  # row-parallel: the input over TP
    assert lora_rank_tensors(arch, 2, None) == ()


def test_a_lora_micro_batch_drops_every_weight_gradient():
    """At TP 2, 4,096 tokens: full training's backward computes 2 x T x (the rank's linear
    weights, the 80 blocks' and the head's) more FLOPs than LoRA's, which adds its adapters'
    forward and backward, 3 x 2 x T x r x (hidden + the rank's QKV width) a layer."""
    device = device_from_gpu(get_gpu("H100-SXM-80GB"))
    eff, prec = default_efficiency(device), train_precision("mixed-bf16", device, False)
    arch = load_model("llama-2-70b").architecture
    kw = dict(tp=2, cp=1, batch=1, seq=4096, checkpointing="none", attention="sdpa",
              engine="megatron")
    full = micro_cost(arch, device, eff, prec, **kw)
    lora = micro_cost(arch, device, eff, prec, lora=(32, ("linear_qkv",)), **kw)
    T, r = 4096, 32
    blocks = H * ((Q + 2 * KV) // 2 + Q // 2 + 3 * FFN // 2) * LAYERS
    head = H * VOCAB // 2
    adapters = 3 * 2 * T * r * (H + (Q + 2 * KV) // 2) * LAYERS
    assert full.hardware_flops - lora.hardware_flops == pytest.approx(
        2 * T * (blocks + head) - adapters, rel=1e-12)
    assert lora.layer_bwd_s < full.layer_bwd_s


def test_a_lora_layout_job_is_faster_than_full_training():
    m, gpu = load_model("llama-2-70b"), get_gpu("H100-SXM-80GB")
    kw = dict(model="llama-2-70b", mode="train", engine="megatron", precision="fp8-delayed",
              batch=1, grad_accum=32, seq=4096, gpus=8, tp=2, pp=4, sequence_parallel=True)
    full = estimate_speed(m, gpu, Job(**kw), measured=None, link="nvlink")
    lora = estimate_speed(m, gpu, Job(**kw, lora_rank=32, lora_targets=("linear_qkv",)),
                          measured=None, link="nvlink")
    # the blocks' matmuls are most of the step: dropping their weight gradients (a third of
    # their FLOPs) must buy more than a tenth
    assert lora.tokens_per_s > 1.1 * full.tokens_per_s
    assert train_memory(m, Job(**kw, lora_rank=32, lora_targets=("linear_qkv",))).total_bytes \
        < train_memory(m, Job(**kw)).total_bytes
