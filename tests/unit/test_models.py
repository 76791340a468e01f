"""Model inputs without torch: published counts, hand calculations, conventions, loading paths,
names and bad config.json files. (The torch oracle is in test_models_oracle.py.)"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.errors import InputError, ModelFileError, UnknownNameError
from gpuplan.models import (COMPONENTS, HF_CLASSES, SUPPORTED_FAMILIES, architecture_from_config,
                            catalog_config, catalog_entry, catalog_keys, catalog_names,
                            from_param_count, load_model)

REQUIRED = ("gpt2", "gpt2-medium", "gpt2-xl", "bert-base-uncased", "bert-large-uncased",
            "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
            "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-0.5b", "qwen2.5-7b",
            "qwen2.5-72b", "gemma-2-9b", "phi-3-mini", "opt-13b", "falcon-7b")


def _t(model, name):
    (t,) = [t for t in model.tensors if t.name == name]
    return t


# ---------------------------------------------------------------------------------------------
# The catalog as data

def test_catalog_has_the_required_models_and_the_later_ones():
    names = set(catalog_names())
    assert set(REQUIRED) <= names
    assert {"vit-base-patch16-224", "qwen1.5-moe-a2.7b", "pythia-1.4b"} <= names
    families = {catalog_entry(n).family for n in names}
    # gpt_bigcode has no catalog entry: the catalog holds published config.json files verbatim,
    # and no StarCoder/SantaCoder config.json could be read here; its parameter list is held to
    # transformers by tests/integration/test_models_oracle.py (variants and random configs)
    # (deepseek_v2 joined the catalog with deepseek-v2-lite in catalog43; before, only the
    # oracle's variants held it)
    assert families == set(SUPPORTED_FAMILIES) - {"gpt_bigcode"}


@pytest.mark.parametrize("name", catalog_names())
def test_catalog_entry_is_sourced_and_consistent(name):
    entry = catalog_entry(name)
    cfg = catalog_config(name)
    if entry.source.startswith("https://github.com/NVIDIA/NeMo-Framework-Launcher/"):
        # NeMo's GPT-3 and Nemotron: no config.json on the Hub; the training yaml the published
        # NeMo runs used, pinned to a commit (the numbers are in the entry's notes)
        assert re.fullmatch(r"https://github\.com/NVIDIA/NeMo-Framework-Launcher/blob/[0-9a-f]{40}"
                            r"/launcher_scripts/conf/training/[a-z0-9_/]+\.yaml", entry.source)
        assert entry.notes
    else:
        assert entry.source.startswith("https://huggingface.co/")
        assert entry.source.endswith("/blob/main/config.json")
        repo = entry.source.removeprefix("https://huggingface.co/").removesuffix(
            "/blob/main/config.json")
        assert repo in entry.aliases  # the Hub id resolves to the entry
    assert entry.hf_class == HF_CLASSES[cfg["model_type"]]
    assert entry.hf_class in cfg["architectures"]  # the published file names the class we count
    assert "_gpuplan" not in cfg
    assert "auto_map" not in cfg  # no remote-code pointers shipped


def test_catalog_config_is_a_fresh_copy():
    a = catalog_config("llama-3.1-8b")
    a["hidden_size"] = 1
    a["rope_scaling"]["factor"] = 0
    assert catalog_config("llama-3.1-8b")["hidden_size"] == 4096
    assert catalog_config("llama-3.1-8b")["rope_scaling"]["factor"] == 8.0


def test_catalog_keys_are_unique_case_insensitively():
    keys = [k.lower() for k in catalog_keys()]
    assert len(keys) == len(set(keys))


# ---------------------------------------------------------------------------------------------
# Published counts and hand calculations (independent of the tensor lists)

def test_gpt2_published_124_439_808():
    # The 124M GPT-2 (huggingface.co/openai-community/gpt2): 124,439,808 parameters.
    assert load_model("gpt2").params.total == 124_439_808


def test_bert_base_uncased_from_the_published_bertmodel_count():
    # BertModel (encoder + pooler) is 109,482,240. BertForMaskedLM has no pooler but an MLM head:
    # a 768x768 dense + bias, a LayerNorm (2x768) and a 30522 output bias; the decoder weight is
    # the tied word embedding.
    pooler = 768 * 768 + 768
    mlm = (768 * 768 + 768) + 2 * 768 + 30522
    assert load_model("bert-base-uncased").params.total == 109_482_240 - pooler + mlm


def _llama_like(V, H, L, I, heads, kv, tied=False):
    hd = H // heads
    per_layer = H * heads * hd + 2 * H * kv * hd + heads * hd * H + 3 * H * I + 2 * H
    return V * H * (1 if tied else 2) + L * per_layer + H


@pytest.mark.parametrize("name,expected", [
    ("llama-2-7b", _llama_like(32000, 4096, 32, 11008, 32, 32)),
    ("llama-2-70b", _llama_like(32000, 8192, 80, 28672, 64, 8)),
    ("llama-3.1-8b", _llama_like(128256, 4096, 32, 14336, 32, 8)),
    ("llama-3.1-405b", _llama_like(128256, 16384, 126, 53248, 128, 8)),
    ("mistral-7b", _llama_like(32000, 4096, 32, 14336, 32, 8)),
])
def test_llama_style_totals_by_formula(name, expected):
    assert load_model(name).params.total == expected


def test_llama_2_7b_is_the_well_known_6_738_415_616():
    assert load_model("llama-2-7b").params.total == 6_738_415_616


def test_falcon_7b_by_hand():
    # Multi-query: qkv projects to 4544 + 2 x 64; no biases; one LayerNorm per (parallel) layer.
    V, H, L = 65024, 4544, 32
    per_layer = H * (H + 2 * 64) + H * H + 2 * H * 4 * H + 2 * H
    assert load_model("falcon-7b").params.total == V * H + L * per_layer + 2 * H


def test_vit_base_by_hand():
    H, L, I = 768, 12, 3072
    embeddings = (H * 3 * 16 * 16 + H) + H + 197 * H           # patch conv, class token, positions
    per_layer = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    classifier = 1000 * H + 1000
    total = embeddings + L * per_layer + 2 * H + classifier
    assert total == 86_567_656
    assert load_model("vit-base-patch16-224").params.total == total


def test_pythia_matches_the_pythia_readme_table():
    # github.com/EleutherAI/pythia README: total and non-embedding (both embed_in and embed_out
    # excluded) parameters.
    for name, total, non_embedding in (("pythia-160m", 162_322_944, 85_056_000),
                                       ("pythia-1.4b", 1_414_647_808, 1_208_602_624)):
        p = load_model(name).params
        assert p.total == total
        assert p.total - p.by_component["embeddings"] - p.by_component["head"] == non_embedding


@pytest.mark.parametrize("name,total_b,non_embedding_b", [
    # Qwen2.5 model cards: "Number of Parameters" and "(Non-Embedding)", in billions, 2 decimals.
    ("qwen2.5-0.5b", "0.49", "0.36"),
    ("qwen2.5-1.5b", "1.54", "1.31"),
    ("qwen2.5-7b", "7.61", "6.53"),
])
def test_qwen25_match_the_model_cards(name, total_b, non_embedding_b):
    p = load_model(name).params
    non_emb = p.total - p.by_component["embeddings"] - p.by_component["head"]

    def quoted(x):  # the cards round or truncate to two decimals
        return {f"{x / 1e9:.2f}", f"{math.floor(x / 1e7) / 100:.2f}"}

    assert total_b in quoted(p.total)
    assert non_embedding_b in quoted(non_emb)


def test_mixtral_total_and_active_match_the_announcement():
    # mistral.ai "Mixtral of experts": 46.7B total, 12.9B used per token (2 of 8 experts).
    p = load_model("mixtral-8x7b").params
    assert f"{p.total / 1e9:.1f}" == "46.7"
    assert f"{p.active / 1e9:.1f}" == "12.9"
    expert = 3 * 4096 * 14336                      # w1, w2, w3 of one expert
    assert p.by_component["experts"] == 32 * 8 * expert
    assert p.active == p.total - 32 * 6 * expert   # six unused experts per layer


def test_qwen_moe_total_active_and_shared_expert():
    # Qwen blog "Qwen1.5-MoE: Matching 7B Model Performance with 1/3 Activated Parameters":
    # 14.3B total, 2.7B activated. Top-4 of 60 experts plus an always-on shared expert.
    m = load_model("qwen1.5-moe-a2.7b")
    p = m.params
    assert f"{p.total / 1e9:.1f}" == "14.3" and f"{p.active / 1e9:.1f}" == "2.7"
    expert = 3 * 2048 * 1408
    assert p.by_component["experts"] == 24 * 60 * expert
    assert p.active == p.total - 24 * 56 * expert
    shared = _t(m, "model.layers.{i}.mlp.shared_expert.gate_proj.weight")
    assert shared.shape == (5632, 2048) and shared.component == "mlp"
    gate = _t(m, "model.layers.{i}.mlp.shared_expert_gate.weight")
    assert gate.shape == (1, 2048) and gate.component == "router"
    assert _t(m, "model.layers.{i}.mlp.gate.weight").shape == (60, 2048)
    assert m.architecture.moe_layers == tuple(range(24))


# ---------------------------------------------------------------------------------------------
# Conventions

@pytest.mark.parametrize("name", catalog_names())
def test_counts_are_consistent(name):
    m = load_model(name)
    p = m.params
    assert set(p.by_component) == set(COMPONENTS)
    assert sum(p.by_component.values()) == p.total == sum(t.total for t in m.tensors)
    assert p.embedding == p.by_component["embeddings"]
    assert (p.active < p.total) == m.architecture.is_moe
    names = [t.name for t in m.tensors]
    assert len(names) == len(set(names))
    for t in m.tensors:
        assert t.count >= 1 and all(d >= 0 for d in t.shape)
        # linear = the 2-D weight of an nn.Linear/Conv1D; embedding tables and norms are not.
        matmul = t.component not in ("embeddings", "norms") or t.module == "project_in"
        # ... or the fused (experts, in, out) expert weights gpt-oss and Llama 4 store
        fused = (len(t.shape) == 3 and t.component == "experts" and t.transposed
                 and not t.name.endswith("_bias"))
        assert t.linear == ((len(t.shape) == 2 and t.name.endswith(".weight") and matmul)
                            or fused), t


def test_tied_embeddings_are_counted_once():
    for name in ("gpt2", "llama-3.2-1b", "qwen2.5-0.5b", "gemma-2-9b", "opt-125m", "falcon-7b"):
        m = load_model(name)
        assert m.architecture.tie_word_embeddings
        assert m.params.by_component["head"] == 0
        assert not any(t.module in ("lm_head", "embed_out") for t in m.tensors)
    for name in ("llama-3.1-8b", "pythia-1.4b", "qwen2.5-7b"):
        m = load_model(name)
        assert not m.architecture.tie_word_embeddings
        assert m.params.by_component["head"] == m.params.by_component["embeddings"]


def test_gqa_and_mqa_shapes():
    m = load_model("llama-3.1-8b")
    assert m.architecture.num_kv_heads == 8
    assert _t(m, "model.layers.{i}.self_attn.k_proj.weight").shape == (8 * 128, 4096)
    f = load_model("falcon-7b")
    assert f.architecture.num_kv_heads == 1 and f.architecture.head_dim == 64
    qkv = _t(f, "transformer.h.{i}.self_attention.query_key_value.weight")
    assert qkv.shape == (4544 + 2 * 64, 4544)
    assert f.architecture.kv_elements_per_token == 2 * 32 * 1 * 64


def test_opt_positions_offset_and_projections():
    m = load_model("opt-125m")
    assert _t(m, "model.decoder.embed_positions.weight").shape == (2048 + 2, 768)
    m = load_model("opt-350m")
    assert _t(m, "model.decoder.embed_tokens.weight").shape == (50272, 512)
    assert _t(m, "model.decoder.project_in.weight").shape == (1024, 512)
    assert _t(m, "model.decoder.project_out.weight").shape == (512, 1024)
    assert not any(t.name == "model.decoder.final_layer_norm.weight" for t in m.tensors)


def test_phi3_fused_projections():
    m = load_model("phi-3-mini")
    assert _t(m, "model.layers.{i}.self_attn.qkv_proj.weight").shape == (3 * 3072, 3072)
    assert _t(m, "model.layers.{i}.mlp.gate_up_proj.weight").shape == (2 * 8192, 3072)
    assert m.architecture.sliding_window == 2047


def test_gemma2_four_norms_and_alternating_window():
    m = load_model("gemma-2-9b")
    norms = [t.module for t in m.tensors if t.component == "norms" and "{i}" in t.name]
    assert sorted(norms) == sorted(["input_layernorm", "post_attention_layernorm",
                                    "pre_feedforward_layernorm", "post_feedforward_layernorm"])
    a = m.architecture
    assert a.head_dim == 256 and a.sliding_window == 4096
    assert a.sliding_window_layers == tuple(range(0, 42, 2))


def test_sliding_windows():
    assert load_model("mistral-7b").architecture.sliding_window_layers == tuple(range(32))
    for name in ("qwen2.5-7b", "llama-3.1-8b", "mixtral-8x7b"):
        a = load_model(name).architecture
        assert a.sliding_window is None and a.sliding_window_layers == ()


def test_bert_token_types_no_pooler_and_mlm_head():
    m = load_model("bert-base-uncased")
    assert _t(m, "bert.embeddings.token_type_embeddings.weight").shape == (2, 768)
    assert not any("pooler" in t.name for t in m.tensors)
    assert _t(m, "cls.predictions.transform.dense.weight").component == "head"
    assert _t(m, "cls.predictions.bias").shape == (30522,)
    assert m.architecture.kind == "encoder"


def test_gpt2_conv1d_is_transposed():
    t = _t(load_model("gpt2"), "transformer.h.{i}.attn.c_attn.weight")
    assert t.shape == (768, 2304) and t.transposed
    assert (t.in_features, t.out_features) == (768, 2304)
    q = _t(load_model("llama-3.1-8b"), "model.layers.{i}.self_attn.k_proj.weight")
    assert (q.in_features, q.out_features) == (4096, 1024)


def test_vision_architecture():
    a = load_model("vit-base-patch16-224").architecture
    assert a.kind == "vision" and a.vocab_size == 0 and a.num_labels == 1000
    assert a.num_patches == 196 and a.max_position_embeddings == 197


# ---------------------------------------------------------------------------------------------
# Loading: names, paths

def test_names_are_case_insensitive_with_aliases():
    assert load_model("GPT2-Small").name == "gpt2"
    assert load_model("Llama-3.1-8B").name == "llama-3.1-8b"
    assert load_model("meta-llama/Llama-3.1-8B").name == "llama-3.1-8b"
    assert load_model("  mistral-7b-v0.1 ").name == "mistral-7b"
    assert load_model("gpt2") is load_model("gpt2")  # cached, frozen


def test_unknown_name_suggests_close_ones():
    with pytest.raises(UnknownNameError) as e:
        load_model("llama-3-8b")
    assert "llama-3.1-8b" in e.value.suggestions
    assert "\n" not in str(e.value)


def test_hub_id_that_is_not_local_says_nothing_is_downloaded(tmp_path, monkeypatch):
    hf = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path))   # an empty cache
    with pytest.raises(InputError, match="not a local path, in gpuplan's catalog or in the "
                                         "Hugging Face cache.*download fetches"):
        load_model("someone/Some-Model-7B")


def test_missing_path(tmp_path):
    with pytest.raises(ModelFileError, match="no such file"):
        load_model(str(tmp_path / "nope" / "config.json"))


def test_empty_and_wrong_type():
    with pytest.raises(InputError):
        load_model("  ")
    with pytest.raises(InputError):
        load_model(7)  # type: ignore[arg-type]


def _write(path: Path, cfg) -> Path:
    path.write_text(json.dumps(cfg))
    return path


def test_config_file_and_directory(tmp_path):
    d = tmp_path / "My-Llama"
    d.mkdir()
    _write(d / "config.json", catalog_config("llama-3.1-8b"))
    a = load_model(str(d / "config.json"))
    b = load_model(str(d))
    assert a.source == b.source == "config"
    assert a.name == b.name == "My-Llama"
    assert a.params == load_model("llama-3.1-8b").params
    assert a.architecture.source == str(d / "config.json")


def test_directory_with_pickle_weights_only_reads_the_config(tmp_path):
    _write(tmp_path / "config.json", catalog_config("gpt2"))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    m = load_model(str(tmp_path))
    assert m.params.total == 124_439_808
    assert any("never opened" in n for n in m.notes)


def test_empty_directory(tmp_path):
    with pytest.raises(ModelFileError, match="neither a config.json nor"):
        load_model(str(tmp_path))


# ---------------------------------------------------------------------------------------------
# Bad config.json

def _cfg(**over):
    c = catalog_config("llama-2-7b")
    c.update(over)
    return c


@pytest.mark.parametrize("over,message", [
    ({"hidden_size": "big"}, "\"hidden_size\" is 'big'; expected a whole number >= 1"),
    ({"hidden_size": -4096}, "\"hidden_size\" is -4096"),
    ({"hidden_size": 0}, "\"hidden_size\" is 0"),
    ({"hidden_size": 4096.0}, "a float; expected a whole number (write 4096)"),
    ({"num_hidden_layers": True}, "\"num_hidden_layers\" is True"),
    ({"hidden_size": None}, "missing required key \"hidden_size\""),
    ({"vocab_size": [32000]}, "\"vocab_size\" is [32000]"),
    ({"tie_word_embeddings": "no"}, "expected true or false"),
    ({"num_key_value_heads": 3}, "not a multiple of \"num_key_value_heads\" 3"),
    ({"hidden_size": 10**12}, "larger than the limit"),
    # an unlisted model_type plans as its nearest family (tests/unit/test_models_unknown.py),
    # but not one with state-space layers
    ({"model_type": "mamba", "state_size": 16}, "model_type 'mamba' is not supported and is "
                                                "not a decoder-only transformer"),
    ({"model_type": None}, "missing required key \"model_type\""),
    # 10^4 layers x 3 x 4096 x 2^30 ~ 1.3e17 parameters (layers at their bound, issue 14)
    ({"num_hidden_layers": 10**4, "intermediate_size": 2**30}, "more than the 1e+15 limit"),
    ({"num_hidden_layers": 2**30}, "\"num_hidden_layers\" is 1073741824; larger than the limit 10000"),
])
def test_bad_config_values_are_one_line_errors_naming_the_file(tmp_path, over, message):
    cfg = _cfg(**over)
    if over.get("hidden_size", 1) is None:
        del cfg["hidden_size"]
    path = _write(tmp_path / "config.json", cfg)
    with pytest.raises(ModelFileError) as e:
        load_model(str(path))
    text = str(e.value)
    assert text.startswith(str(path) + ": ")
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize("content,message", [
    (b"{not json", "is not valid JSON"),
    (b"[1, 2, 3]", "must hold a JSON object, found a JSON array"),
    (b"\xff\xfe{}", "is not UTF-8"),
    (b'{"model_type": "llama", "hidden_size": NaN}', "is not valid JSON"),
    (b"", "is not valid JSON"),
])
def test_malformed_config_files(tmp_path, content, message):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    with pytest.raises(ModelFileError, match=message):
        load_model(str(p))


def test_oversized_config_is_rejected_before_parsing(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b'{"pad": "' + b"x" * (5 * 10**6) + b'"}')
    with pytest.raises(ModelFileError, match="larger than the 5000000-byte limit"):
        load_model(str(p))


def test_architecture_from_config_names_its_source():
    with pytest.raises(ModelFileError, match=r"^my/config\.json: \"n_embd\" is 'x'"):
        architecture_from_config({"model_type": "gpt2", "n_embd": "x"}, name="m",
                                 source="my/config.json")
    with pytest.raises(ModelFileError, match=r"^m: model_type 'rwkv' is not supported"):
        architecture_from_config({"model_type": "rwkv"}, name="m")


def test_transformers_fixed_kv_default_is_used_and_said(tmp_path):
    cfg = catalog_config("mistral-7b")
    del cfg["num_key_value_heads"]
    m = load_model(str(_write(tmp_path / "config.json", cfg)))
    assert m.architecture.num_kv_heads == 8  # MistralConfig's default, not num_attention_heads
    assert any("num_key_value_heads" in n for n in m.notes)


def test_other_class_in_architectures_is_noted(tmp_path):
    cfg = catalog_config("llama-2-7b") | {"architectures": ["LlamaForSequenceClassification"]}
    m = load_model(str(_write(tmp_path / "config.json", cfg)))
    assert any("LlamaForSequenceClassification" in n and "LlamaForCausalLM" in n for n in m.notes)


def test_explicit_null_sliding_window_means_none(tmp_path):
    cfg = catalog_config("mistral-7b") | {"sliding_window": None}
    a = load_model(str(_write(tmp_path / "config.json", cfg))).architecture
    assert a.sliding_window is None and a.sliding_window_layers == ()
    del cfg["sliding_window"]  # absent: MistralConfig's default of 4096
    assert load_model(str(_write(tmp_path / "config.json", cfg))).architecture.sliding_window == 4096


def test_unsupported_variants_are_refused():
    with pytest.raises(ModelFileError, match="position_embedding_type"):
        architecture_from_config(catalog_config("bert-base-uncased")
                                 | {"position_embedding_type": "relative_key"}, name="b")
    with pytest.raises(ModelFileError, match="add_cross_attention"):
        architecture_from_config(catalog_config("gpt2") | {"add_cross_attention": True}, name="g")


# ---------------------------------------------------------------------------------------------
# A bare count

def test_from_param_count():
    m = from_param_count("7B")
    assert m.params.total == m.params.active == 7 * 10**9
    assert m.params.by_component["other"] == 7 * 10**9
    assert m.architecture is None and m.tensors == () and m.source == "count"
    assert m.notes
    assert from_param_count(124_439_808, name="x").name == "x"


@pytest.mark.parametrize("bad", ["-3", "0", "nan", "1e30", "7Q", 0, -1, True])
def test_from_param_count_rejects(bad):
    with pytest.raises(InputError):
        from_param_count(bad)


# ---------------------------------------------------------------------------------------------
# Imports

def test_models_and_catalog_loading_import_no_torch_or_numpy():
    code = ("import sys, gpuplan.models as m; m.load_model('llama-3.1-8b'); "
            "m.load_model('mixtral-8x7b'); "
            "print(sorted({n.split('.')[0] for n in sys.modules} & "
            "{'torch', 'numpy', 'transformers', 'safetensors', 'rich'}))")
    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": src, "PATH": ""}, check=True)
    assert out.stdout.strip() == "[]"


def test_docs_table_matches_the_catalog():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    for name in catalog_names():
        m = load_model(name)
        row = [line for line in doc.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(row) == 1, name
        assert f"| {m.params.total:,} |" in row[0]
        assert catalog_entry(name).source in row[0]
