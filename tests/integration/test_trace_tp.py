"""The tensor-parallel trace (``gpuplan trace MODEL --tp T``) against the analytic TP plan
(``gpuplan fit --tp T --gpus T``): one rank of a DTensor step (``torch.distributed.tensor.parallel``,
Megatron's column/row split, the vocabulary split over the ranks, ``loss_parallel``) under
FakeTensorMode with torch's fake process group. Cases within 3% pass; the others are
xfail(strict) with the measured numbers and what torch's DTensor step holds that Megatron's
layout (the plan's) does not. Families torch's TP styles cannot split are one line (exit 2).
"""

from __future__ import annotations

import json

import pytest

from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_trace_sharded import configs  # noqa: E402,F401  (the 4-layer family configs)

TOLERANCE = 0.03
_CACHE: dict = {}


def _seq(model: str, seq: int | None) -> int:
    return 197 if "vit" in model else (seq or 256)


def traced(model: str, tp: int, precision: str, seq: int | None = None):
    from gpuplan.trace.distributed import trace_tensor_parallel

    key = (model, tp, precision, seq)
    if key not in _CACHE:
        _CACHE[key] = trace_tensor_parallel(model, tp=tp, batch=2, seq=_seq(model, seq),
                                            precision=precision)
    return _CACHE[key]


def analytic(model: str, tp: int, precision: str, seq: int | None = None):
    m = load_model(model)
    return train_memory(m, Job(model=m, mode="train", precision=precision, batch=2,
                               seq=_seq(model, seq), tp=tp, gpus=tp))


#: (family, precision, tp, seq) -> the measured analytic/traced and why, for the cases outside 3%
OUTSIDE = {
    ("llama", "mixed-bf16", 2, None): "analytic/traced = 0.916 (532.5 MB vs 581.7 MB, both at "
    "the optimizer step): torch's DTensor embedding backward (RowwiseParallel of nn.Embedding) "
    "makes the token embedding's gradient full-vocabulary on every rank and the sharded .grad "
    "keeps that storage (32.8 MB bf16 instead of 16.4 MB), and the master step copies it to "
    "fp32; Megatron's VocabParallelEmbedding, which the plan follows, makes the rank's rows only",
    ("neox", "fp32", 2, None): "analytic/traced = 0.932 (1056.4 MB vs 1133.7 MB at the "
    "optimizer step): the same full-vocabulary embedding gradient (embed_in, 50304 x 768 fp32: "
    "154.5 MB on each rank instead of 77.3 MB)",
    ("opt", "fp32", 2, None): "analytic/traced = 0.905 (717.1 MB vs 792.7 MB, both at the end "
    "of backward): the tied embedding's gradient from the DTensor embedding backward is "
    "full-vocabulary on each rank (154.4 MB fp32 instead of 77.2 MB) when it is summed into "
    "the head's sharded gradient",
    ("llama", "mixed-bf16", 2, 1024): "analytic/traced = 1.085 (837.3 MB at the start of "
    "backward vs 772.0 MB at the end of forward): the plan's loss keeps transformers' "
    "log_softmax + nll_loss backward (three logits-sized fp32 tensors at the start of "
    "backward); loss_parallel's nll_loss backward writes the fused gradient and its "
    "log_softmax backward passes it through (two): the traced backward peak is 706.5 MB",
}


@pytest.mark.parametrize("family,precision,tp,seq", [
    ("vit", "mixed-bf16", 2, None), ("vit", "fp32", 2, None), ("vit", "mixed-bf16", 4, None),
    ("opt", "mixed-bf16", 2, None), ("qwen2", "mixed-bf16", 2, None),
    ("bert", "mixed-bf16", 2, None),
    ("llama", "mixed-bf16", 2, None), ("neox", "fp32", 2, None), ("opt", "fp32", 2, None),
    ("llama", "mixed-bf16", 2, 1024),
])
def test_tp_trace_against_the_tp_plan(family, precision, tp, seq, configs, request):
    reason = OUTSIDE.get((family, precision, tp, seq))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    model = configs[family]
    t, r = analytic(model, tp, precision, seq), traced(model, tp, precision, seq)
    total = t.total_bytes - t.overhead_bytes
    assert abs(total - r.total_bytes) <= TOLERANCE * r.total_bytes, (total, r.total_bytes)
    assert t.peak_phase == r.peak_phase


def test_one_rank_holds_its_split_of_every_linear(configs):
    # ViT over 2 ranks: the blocks' linears are split, the patch embedding, norms and classifier
    # replicated; fp32 parameters of one rank = (the blocks' linears / 2 + the rest) x 4 bytes
    model = configs["vit"]
    m = load_model(model)
    split = sum(t.total for t in m.tensors if "{i}" in t.name and t.component in
                ("attention", "mlp") and not t.name.endswith(("output.dense.bias",
                                                               "attention.output.dense.bias")))
    rest = m.params.total - split
    r = traced(model, 2, "fp32")
    assert r.per_gpu["weights_bytes"] == pytest.approx(4 * (split / 2 + rest), rel=0.002)
    # the analytic rank's parameters are the same split (row-parallel biases replicated)
    assert analytic(model, 2, "fp32").weights_bytes == pytest.approx(
        r.per_gpu["weights_bytes"], rel=0.002)
    assert any("tensor parallel over 2 ranks" in n for n in r.notes)


@pytest.mark.parametrize("name,why", [
    ("gpt2", "ColwiseParallel currently only support nn.Linear and nn.Embedding"),
])
def test_families_torch_cannot_split_are_one_line(name, why, capsys):
    # torch 2.13: parallelize_module(GPT2Block, mesh, {"attn.c_attn": ColwiseParallel()}) raises
    # NotImplementedError("ColwiseParallel currently only support nn.Linear and nn.Embedding!");
    # Falcon's fused MQA projection and Mixtral's fused 3-D experts are refused the same way
    from gpuplan.cli import main

    assert main(["trace", name, "--tp", "2", "--batch", "1", "--seq", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Conv1D" in err and "nn.Linear and nn.Embedding" in err
    assert why.split(" currently")[0] in "ColwiseParallel"


def test_cli_trace_tp(configs, capsys):
    from gpuplan.cli import main

    model = configs["opt"]
    assert main(["trace", model, "--tp", "2", "--batch", "2", "--seq", "256", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_bytes"] == traced(model, 2, "mixed-bf16").total_bytes
    assert main(["trace", model, "--tp", "2", "--zero", "3"]) == 2
    assert "drop --zero" in capsys.readouterr().err


def test_a_vocabulary_smaller_than_tp_is_one_line(tmp_path, capsys):
    """DTensor's row split of a 7-row vocabulary over 8 ranks leaves a rank none, and its
    optimizer step then fails inside torch; the trace says so first (fuzzing found it)."""
    from gpuplan.cli import main

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8,
           "vocab_size": 7, "max_position_embeddings": 64}
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    assert main(["trace", str(d), "--gpus", "8", "--tp", "8", "--seq", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "7 rows split over 8 ranks" in err and "--tp 7" in err
