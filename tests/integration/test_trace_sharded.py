"""The FSDP2 trace (``gpuplan trace MODEL --gpus N --zero 3``) against hand counts and against the
analytic ZeRO-3 plan, the way tests/integration/test_trace_agreement.py holds the single-GPU trace.

One rank of a real FSDP2 step (``fully_shard`` per block and on the root) runs under FakeTensorMode
with torch's fake process group. Where the analytic plan and FSDP2 differ by more than 3%, the
case is an xfail(strict) stating the measured numbers and what FSDP2 holds differently.
"""

from __future__ import annotations

import json

import pytest

from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model

pytest.importorskip("torch")
pytest.importorskip("transformers")

TOLERANCE = 0.03

#: A small Llama-style config (untied embeddings, GQA): the llama family at test size.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
         "intermediate_size": 1376, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "hidden_act": "silu",
         "torch_dtype": "bfloat16"}
_CACHE: dict = {}


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama") / "config.json"
    path.write_text(json.dumps(LLAMA))
    return str(path)


def traced(model: str, gpus: int, precision: str):
    from gpuplan.trace.distributed import trace_sharded

    key = (model, gpus, precision)
    if key not in _CACHE:
        _CACHE[key] = trace_sharded(model, gpus=gpus, zero=3, batch=2, seq=256,
                                    precision=precision)
    return _CACHE[key]


def analytic(model: str, gpus: int, precision: str) -> int:
    m = load_model(model)
    t = train_memory(m, Job(model=m, mode="train", precision=precision, batch=2, seq=256,
                            gpus=gpus, zero=3))
    return t.total_bytes - t.overhead_bytes


def test_one_rank_holds_a_shard_of_the_states(llama_path):
    r = traced(llama_path, 4, "fp32")
    n = load_model(llama_path).params.total
    # fp32 sharded parameters and AdamW's two fp32 moments: 4 and 8 bytes per parameter / 4
    # ranks (each of the 39 parameter shards rounded up to 512-byte blocks)
    assert r.per_gpu["weights_bytes"] == pytest.approx(4 * n / 4, rel=0.001)
    assert r.per_gpu["optimizer_bytes"] == pytest.approx(8 * n / 4, rel=0.001)
    # at the backward peak FSDP2 holds the root unit gathered: embeddings + head, full size
    assert r.per_gpu["gathered_params_bytes"] == pytest.approx(2 * 32000 * 512 * 4, rel=0.001)
    assert r.peak_phase == "backward"
    assert any("FSDP2 over 4 ranks" in note for note in r.notes)


# (model, precision, measured analytic/traced, why) for the cases outside 3%
OUTSIDE = {
    ("gpt2", "fp32"): "analytic/traced = 1.087 (1.533 GB vs 1.410 GB): the plan counts two "
    "gathered units of the largest unit, the tied 38.6M-parameter embedding (309 MB), in every "
    "phase; FSDP2 keeps the root unit (embeddings, tied head, final norm: 158 MB) gathered alone "
    "from forward into backward, and no block is gathered at the backward peak",
    ("llama", "fp32"): "analytic/traced = 0.944 (547 MB vs 580 MB): the gathered root (embed + "
    "head, 131 MB) agrees to the byte; FSDP2's step holds 33 MB more activations and backward "
    "buffers at the start of backward (traced 315 MB vs 283 MB)",
    ("llama", "mixed-bf16"): "analytic/traced = 1.036 (465 MB vs 449 MB): the plan's mixed-bf16 "
    "is DeepSpeed's layout (bf16 shard + fp32 master = 6 B/param/N); FSDP2's MixedPrecisionPolicy "
    "keeps only the fp32 shard (4 B/param/N) and gathers bf16 copies",
}


@pytest.mark.parametrize("family,precision", [("llama", "fp32"), ("llama", "mixed-bf16"),
                                              ("gpt2", "fp32")])
def test_fsdp2_trace_against_the_analytic_zero3_plan(family, precision, llama_path, request):
    reason = OUTSIDE.get((family, precision))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    model = llama_path if family == "llama" else family
    r = traced(model, 4, precision)
    got = analytic(model, 4, precision)
    assert abs(got - r.total_bytes) <= TOLERANCE * r.total_bytes, (got, r.total_bytes)


def test_cli_trace_gpus_zero3(llama_path, capsys):
    from gpuplan.cli import main

    assert main(["trace", llama_path, "--gpus", "4", "--zero", "3", "--batch", "2", "--seq",
                 "256", "--precision", "fp32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_bytes"] == traced(llama_path, 4, "fp32").total_bytes
    assert main(["trace", "gpt2", "--gpus", "4", "--zero", "1"]) == 2
    assert "--zero 2 or 3" in capsys.readouterr().err
