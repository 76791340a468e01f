"""NeMo's GPT-3 and Nemotron models: catalog entries from the NeMo-Framework-Launcher 24.07
training configs, the ``nemotron`` family (transformers' NemotronForCausalLM) and squared ReLU.

Every count below is written out from the architecture (the numbers of the launcher's yaml, in
the entry's notes), not read from gpuplan's tensor lists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import activations as A
from gpuplan.models import (Model, ParamCounts, architecture_from_config, catalog_entry,
                            load_model)

LAUNCHER = ("https://github.com/NVIDIA/NeMo-Framework-Launcher/blob/"
            "8325688d8345a5513660f0f8390f0482a721c009/launcher_scripts/conf/training/")


def _gpt3(h: int, layers: int, vocab: int = 50257, pos: int = 2048) -> int:
    """Megatron GPT (GPT-2's block): per layer two biased LayerNorms (4h), fused QKV 3h^2 + 3h,
    its projection h^2 + h, the 4h MLP 8h^2 + 5h; the tied token table, learned positions and the
    final LayerNorm once."""
    return layers * (12 * h * h + 13 * h) + vocab * h + pos * h + 2 * h


def _nemotron(h: int, layers: int, heads: int, kv: int, ffn: int, vocab: int = 256000) -> int:
    """Nemotron: no linear biases; q and o h^2 each, k and v h x kv x head_dim each; up and
    down h x ffn each (no gate); two LayerNorm1P (weight and bias) per layer and one final;
    untied embedding and output layer."""
    hd = h // heads
    per_layer = 2 * h * h + 2 * h * kv * hd + 2 * h * ffn + 4 * h
    return layers * per_layer + 2 * h + 2 * vocab * h


@pytest.mark.parametrize("name, h, layers", [
    ("gpt3-5b", 4096, 24), ("gpt3-20b", 6144, 44), ("gpt3-175b", 12288, 96)])
def test_gpt3_counts_by_hand(name, h, layers):
    assert load_model(name).params.total == _gpt3(h, layers)


def test_gpt3_175b_is_175_billion():
    # Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 175.0B, n_layers 96, d_model 12288,
    # n_heads 96 -- NeMo's 175b.yaml is that shape; 174,604,259,328 is 0.23% under the name
    total = load_model("gpt3-175b").params.total
    assert total == 174_604_259_328
    assert abs(total / 175e9 - 1) < 0.01


@pytest.mark.parametrize("name, h, layers, heads, kv, ffn", [
    ("nemotron-8b", 4096, 32, 32, 32, 16384), ("nemotron-22b", 6144, 40, 48, 48, 24576),
    ("nemotron-4-340b", 18432, 96, 96, 8, 73728)])
def test_nemotron_counts_by_hand(name, h, layers, heads, kv, ffn):
    assert load_model(name).params.total == _nemotron(h, layers, heads, kv, ffn)


def test_nemotron_4_340b_is_341_billion():
    # 96 x 3,454,083,072 per layer + 2 x 256,000 x 18,432 + 36,864 = 341,029,195,776: the
    # "340B" of the name, 341.0e9 as written out
    total = load_model("nemotron-4-340b").params.total
    assert total == 341_029_195_776
    assert abs(total / 341e9 - 1) < 0.001


@pytest.mark.parametrize("name, path", [
    ("gpt3-5b", "gpt3/5b.yaml"), ("gpt3-175b", "gpt3/175b.yaml"),
    ("nemotron-22b", "nemotron/nemotron_22b.yaml"),
    ("nemotron-4-340b", "nemotron/nemotron_340b.yaml")])
def test_the_entries_cite_the_launcher_config_at_its_24_07_commit(name, path):
    assert catalog_entry(name).source == LAUNCHER + path


def test_nemotron_architecture_is_what_neMo_configures():
    a = load_model("nemotron-4-340b").architecture
    assert (a.family, a.mlp, a.activation, a.norm, a.position) == (
        "nemotron", "gelu", "relu2", "layernorm", "rotary")
    assert (a.num_kv_heads, a.head_dim, a.rotary_fraction) == (8, 192, 0.5)
    assert not a.tie_word_embeddings and not a.attention_bias and not a.mlp_bias
    names = {t.name for t in a.tensors}
    assert "model.layers.{i}.mlp.up_proj.weight" in names
    assert not any("gate_proj" in n for n in names)  # squared ReLU, no gate
    assert "model.layers.{i}.input_layernorm.bias" in names  # LayerNorm1P keeps its bias
    assert not any(n.endswith("_proj.bias") for n in names)  # bias false


def test_gpt3_architecture_is_megatron_gpt():
    a = load_model("gpt3-20b").architecture
    assert (a.family, a.activation, a.position, a.max_position_embeddings) == (
        "gpt2", "gelu", "learned", 2048)
    assert a.tie_word_embeddings and a.attention_bias and a.mlp_bias


# --------------------------------------------------------------------------------------------
# Squared ReLU

_SMALL = {"model_type": "nemotron", "architectures": ["NemotronForCausalLM"],
          "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}


def _small(act: str) -> Model:
    arch = architecture_from_config(dict(_SMALL, hidden_act=act), name=f"nemotron-{act}")
    return Model(name=arch.name, architecture=arch,
                 params=ParamCounts(total=1, by_component={"other": 1}, active=1, embedding=0))


def _mlp_act(name: str):
    est = estimate_speed(load_model(name), get_gpu("H100-SXM-80GB"),
                         Job(model=name, mode="train", batch=1, seq=512), measured=None)
    return next(t.op for t in est.step.ops if t.op.phase == "forward"
                and t.op.name == "mlp.act")


def test_squared_relu_counts_a_max_and_a_multiply_per_element():
    op = _mlp_act("nemotron-8b")
    # 512 tokens x 16,384 intermediate values, relu then square: 2 FLOPs each
    assert op.flops == 2 * 512 * 16384


@pytest.mark.parametrize("precision, extra", [("bf16", 2), ("mixed-bf16", 2), ("amp-bf16", 6)])
def test_squared_relu_saves_the_relu_output_besides_its_own(precision, extra):
    # ReLUSquaredActivation: relu(x) saves its output r; torch.square(r) is aten::pow(r, 2) and
    # saves its input. In 16-bit that is r again (one tensor): relu2 holds one more 2-byte b x s
    # x intermediate tensor per layer than relu (whose output is down_proj's saved input either
    # way). Under autocast pow is on the fp32 list: it saves an fp32 copy of r (4 B) and returns
    # fp32, which down_proj casts to a saved bf16 copy (2 B) -- 6 B more than relu. (The trace of
    # transformers' code on benchmarks/modern_agreement.py's small nemotron config: relu2 - relu
    # = 6 B x 262,144 x 2 layers, amp-bf16 train, 2 x 256.)
    b, s = 2, 128
    saved = {}
    for act in ("relu", "relu2"):
        m = _small(act)
        job = Job(model=m, precision=precision, batch=b, seq=s, checkpointing="none")
        saved[act] = A.step_profile(m, job).layers[0][1].saved(b, s)
    assert saved["relu2"] - saved["relu"] == extra * b * s * 1024


def _nemo_rows(prefix: str) -> list[dict]:
    path = Path(__file__).resolve().parents[2] / "benchmarks/published/fp8_runs.json"
    data = json.loads(path.read_text())
    runs = data if isinstance(data, list) else data["runs"]
    return [r for r in runs if (r["model"]["catalog"] or "").startswith(prefix)]


def test_the_gpt3_rows_model_flops_are_the_entries_counts():
    # NeMo 24.07's table gives tokens/s/GPU and model TFLOP/s/GPU for each run: their quotient is
    # the FLOPs NeMo counts per token. For the three GPT-3 sizes it is 6 N (N the catalog count,
    # the tied embedding included) plus 12 x layers x hidden x seq for the attention scores and
    # their product with V (forward and backward, the full square), within 0.1%: the catalog's
    # counts are the models NeMo measured
    rows = _nemo_rows("gpt3-")
    assert len(rows) == 4
    for r in rows:
        m = load_model(r["model"]["catalog"])
        a, s = m.architecture, r["job"]["seq"]
        per_token = r["measured"]["model_tflops_per_gpu"] * 1e12 / r["measured"][
            "tokens_per_s_per_gpu"]
        assert per_token == pytest.approx(6 * m.params.total + 12 * a.num_layers
                                          * a.hidden_size * s, rel=1e-3), r["id"]
