"""The multi-token-prediction module's work around its block (Megatron-Core
MultiTokenPredictionLayer._concat_embeddings, megatron/core/transformer/multi_token_prediction.py
at NVIDIA/Megatron-LM@d98e8a64: enorm, hnorm, concat, eh_proj 2H -> H): hand-counted FLOPs and
bytes, and its time charged once per MTP depth on the last pipeline stage."""

from __future__ import annotations

import pytest

from gpuplan.compute.flops import mtp_projection_ops
from gpuplan.compute.parallel import MicroCost, _busiest_stage
from gpuplan.models import load_model
from gpuplan.parallel.layout import Layout


def test_eh_proj_flops_and_bytes_by_hand():
    arch = load_model("deepseek-v3").architecture  # hidden 7168
    norms, cat, proj = mtp_projection_ops(arch, 4096, act=2, weight=1.0)
    # eh_proj: 2 x T x 2H x H = 2 x 4096 x 14336 x 7168
    assert proj.flops == 841_813_590_016
    assert proj.shape == (1, 4096, 14336, 7168)
    # reads the 2H input (2 B) and the 1-byte weight, writes the H output (2 B)
    assert proj.bytes == 4096 * 14336 * 2 + 14336 * 7168 * 1 + 4096 * 7168 * 2
    # two RMSNorms over T x H each (4 FLOPs an element), read + write at 2 B
    assert norms.flops == 4 * 2 * 4096 * 7168 and norms.bytes == 2 * 2 * 2 * 4096 * 7168
    assert norms.kernels == 2
    assert cat.bytes == 2 * 2 * 2 * 4096 * 7168  # both halves read, the 2H tensor written


def _cost(proj: float) -> MicroCost:
    return MicroCost(layers=32, layer_fwd_s=1.0, layer_bwd_s=2.0, attn_fwd_s=0.0,
                     attn_bwd_s=0.0, other_s=0.5, hardware_flops=0.0, embedding_s=0.2,
                     mtp_proj_s=proj)


def test_last_stage_carries_the_projection_once_per_depth():
    arch = load_model("llama-3.1-8b").architecture  # 32 layers: 8 a stage over PP 4
    one = Layout(pp=4, micro_batches=8, mtp_layers=1)
    two = Layout(pp=4, micro_batches=8, mtp_layers=2)
    # an even split: ceil(32 / 4) = 8 layers x 3 and other_s 0.5 (embedding, head and loss, as
    # the even path counts them) + per depth (layer 3 + head and loss 0.3 + projection 0.4)
    assert _busiest_stage(arch, _cost(0.4), one)[:2] == (9, pytest.approx(24.5 + 3.7))
    assert _busiest_stage(arch, _cost(0.4), two)[:2] == (10, pytest.approx(24.5 + 2 * 3.7))
    assert _busiest_stage(arch, _cost(0.0), one)[:2] == (9, pytest.approx(24.5 + 3.3))
    # an uneven split (the stage loop), stages 7/8/8/9: the last stage's 9 layers, its head and
    # loss 0.3 and one depth 3.7 = 31.0, over the first's 7 x 3 + embedding 0.2
    uneven = Layout(pp=4, micro_batches=8, mtp_layers=1, first_stage_layers=7,
                    last_stage_layers=9)
    assert _busiest_stage(arch, _cost(0.4), uneven)[:2] == (10, pytest.approx(27 + 0.3 + 3.7))
    # no MTP: the projection is not charged
    assert _busiest_stage(arch, _cost(0.4), Layout(pp=4, micro_batches=8))[:2] == \
        (8, pytest.approx(24.5))
