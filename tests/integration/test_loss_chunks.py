"""torchtune's chunked cross-entropy (``--loss-chunks``) against a real CPU run of the same code.

The head and loss as torchtune writes them (``TransformerDecoder.chunked_output`` and
``CEWithChunkedOutputLoss``): the final RMSNorm, the output projection per chunk of the sequence
(each chunk's 16-bit logits returned in a list), and per chunk ``F.cross_entropy(logits.float())``
summed. Every tensor autograd saves is recorded by a saved-tensors hook (each storage once, the
parameters and the labels left out) and held to gpuplan's head profile, byte for byte; the
16-bit logits, which the forward holds in the returned list, are counted beside them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402

from gpuplan.job import Job  # noqa: E402
from gpuplan.memory.activations import step_profile  # noqa: E402
from gpuplan.models import architecture_from_config, count_params  # noqa: E402
from gpuplan.models._types import Model  # noqa: E402

B, S, H, V = 2, 48, 256, 1000
CFG = dict(hidden_size=H, intermediate_size=688, num_attention_heads=4, num_key_value_heads=2,
           num_hidden_layers=1, vocab_size=V, tie_word_embeddings=True)


def _measured(chunks: int) -> tuple[int, int]:
    """(saved bytes, bytes of the 16-bit logits the forward returns) of torchtune's head."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    norm = LlamaRMSNorm(H).to(torch.bfloat16)
    weight = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (B, S))
    params = {id(p.untyped_storage()) for p in (weight, *norm.parameters())}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if id(st) not in params and t.dtype != torch.int64:
            seen[id(st)] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        h = norm(x)
        logits = [F.linear(c, weight) for c in h.chunk(chunks, dim=1)]
        loss = sum(F.cross_entropy(c.reshape(-1, V).float(), y.reshape(-1), reduction="sum")
                   for c, y in zip(logits, labels.chunk(chunks, dim=1)))
    held = sum(c.untyped_storage().nbytes() for c in logits)
    loss.backward()
    return sum(seen.values()), held


@pytest.mark.parametrize("chunks", [2, 8])
def test_chunked_loss_saves_what_torch_saves(chunks):
    arch = architecture_from_config({"model_type": "llama", **CFG}, name="l")
    m = Model(name="l", params=count_params(arch.tensors, arch), tensors=arch.tensors,
              architecture=arch, source="config")
    job = Job(model=m, mode="train", precision="bf16", model_code="torchtune",
              loss_chunks=chunks, batch=B, seq=S)
    saved, held = _measured(chunks)
    head = step_profile(m, job).head
    # nll_loss also saves its total_weight, a 4-byte scalar, per call (not modeled)
    assert head.saved(B, S) == saved - 4 * chunks
    # the fp32 log-probabilities of every chunk are kept (eager): 4 bytes per logit
    assert saved >= B * S * V * 4
    # the 16-bit logits, held by the returned list until the loss is computed, are the head's
    # largest non-saved tensor alive at the end of its forward
    assert max(t(B, S) for _, t in head.fwd_points) >= held
