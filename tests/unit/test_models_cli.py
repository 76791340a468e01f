"""``gpuplan models``: the catalog table, one model, --json, --sources, and bad input."""

from __future__ import annotations

import json

import pytest

from gpuplan.models import COMPONENTS, catalog_entry, catalog_names, load_model




def test_catalog_table_lists_every_model(capsys, cli):
    code, out, err = cli("models")
    assert code == 0 and err == ""
    for name in catalog_names():
        assert name in out
    assert "46.70B" in out and "12.88B" in out          # mixtral total and active
    assert "huggingface.co" not in out


def test_catalog_table_with_sources(capsys, cli):
    code, out, _ = cli("models", "--sources")
    assert code == 0
    for name in catalog_names():
        assert catalog_entry(name).source in out


def test_catalog_json(capsys, cli):
    code, out, _ = cli("models", "--json")
    assert code == 0
    rows = json.loads(out)["models"]
    assert sorted(r["name"] for r in rows) == sorted(catalog_names())
    by = {r["name"]: r for r in rows}
    r = by["llama-3.1-8b"]
    assert r["params"] == load_model("llama-3.1-8b").params.total
    assert (r["layers"], r["hidden_size"], r["heads"], r["kv_heads"], r["vocab_size"],
            r["context"]) == (32, 4096, 32, 8, 128256, 131072)
    assert r["source"] == catalog_entry("llama-3.1-8b").source
    assert "gpt2-small" in by["gpt2"]["aliases"]
    assert by["mixtral-8x7b"]["active_params"] < by["mixtral-8x7b"]["params"]


def test_one_model_detail(capsys, cli):
    code, out, _ = cli("models", "qwen1.5-moe-a2.7b")
    assert code == 0
    assert "Qwen2MoeForCausalLM" in out
    assert "model.layers.{i}.mlp.experts.{e}.gate_proj.weight" in out
    assert "shared expert 5,632" in out
    assert "active per token" in out
    for comp in ("embeddings", "attention", "experts", "router", "norms", "head"):
        assert comp in out


def test_one_model_json(capsys, cli):
    code, out, _ = cli("models", "GPT2-small", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["name"] == "gpt2" and d["source"] == "catalog"
    assert d["params"]["total"] == 124_439_808
    assert list(d["params"]["by_component"]) == list(COMPONENTS)
    assert sum(d["params"]["by_component"].values()) == 124_439_808
    assert sum(t["params"] for t in d["tensors"]) == 124_439_808
    assert d["architecture"]["family"] == "gpt2" and d["architecture"]["tie_word_embeddings"]
    c_attn = [t for t in d["tensors"] if t["name"].endswith("c_attn.weight")][0]
    assert c_attn["shape"] == [768, 2304] and c_attn["count"] == 12 and c_attn["transposed"]


def test_config_path(capsys, tmp_path, cli):
    from gpuplan.models import catalog_config

    (tmp_path / "config.json").write_text(json.dumps(catalog_config("phi-3-mini")))
    code, out, _ = cli("models", str(tmp_path / "config.json"), "--json")
    assert code == 0
    assert json.loads(out)["params"]["total"] == load_model("phi-3-mini").params.total


@pytest.mark.parametrize("argv,message", [
    (["llama-9b"], "unknown model 'llama-9b'; did you mean"),
    (["./no/such/config.json"], "no such file or directory"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, message, cli):
    code, out, err = cli("models", *argv)
    assert code == 2 and out == ""
    assert err.startswith("gpuplan: error: ") and message in err
    assert err.count("\n") == 1


def test_bad_config_value_is_one_line_exit_2(capsys, tmp_path, cli):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": "big"}))
    code, out, err = cli("models", str(p))
    assert code == 2 and out == ""
    assert err == f'gpuplan: error: {p}: "hidden_size" is \'big\'; expected a whole number >= 1\n'
