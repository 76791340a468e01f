"""The FSDP2 trace (``gpuplan trace MODEL --gpus N --zero 3``) against hand counts and against the
analytic plan with ``--sharding fsdp2``, the way tests/integration/test_trace_agreement.py holds
the single-GPU trace.

One rank of a real FSDP2 step (``fully_shard`` per block and on the root) runs under FakeTensorMode
with torch's fake process group. Every family the single-GPU trace covers (GPT-2, BERT, Llama,
Mistral, Qwen2 with tied embeddings, Mixtral MoE, OPT, Falcon, GPT-NeoX, ViT) is traced at test
size (4 layers of the catalog config) and must agree with the plan within 3% on the per-rank peak.
The default plan (``--sharding deepspeed``) is DeepSpeed's ZeRO layout and is not held to the
FSDP2 trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model

pytest.importorskip("torch")
pytest.importorskip("transformers")

TOLERANCE = 0.03
CATALOG = Path(__file__).resolve().parents[2] / "src" / "gpuplan" / "models" / "catalog"

#: A small Llama-style config (untied embeddings, GQA): the llama family at test size.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
         "intermediate_size": 1376, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "hidden_act": "silu",
         "torch_dtype": "bfloat16"}

#: family -> (catalog config, overrides): 4 layers of the real config, narrower where a layer is
#: large (falcon-7b, mistral-7b, mixtral-8x7b); vocabularies, head sizes and tying kept.
SMALL = {
    "gpt2": ("gpt2", {"n_layer": 4}),
    "opt": ("opt-125m", {"num_hidden_layers": 4}),
    "bert": ("bert-base-uncased", {"num_hidden_layers": 4}),
    "neox": ("pythia-160m", {"num_hidden_layers": 4}),
    "falcon": ("falcon-7b", {"hidden_size": 512, "num_attention_heads": 8, "num_kv_heads": 8,
                             "num_hidden_layers": 4}),
    "mistral": ("mistral-7b", {"hidden_size": 512, "intermediate_size": 1376,
                               "num_attention_heads": 8, "num_key_value_heads": 4,
                               "num_hidden_layers": 4}),
    "mixtral": ("mixtral-8x7b", {"hidden_size": 512, "intermediate_size": 1024,
                                 "num_attention_heads": 8, "num_key_value_heads": 4,
                                 "num_hidden_layers": 4}),
    "qwen2": ("qwen2.5-0.5b", {"num_hidden_layers": 4}),
    "vit": ("vit-base-patch16-224", {"num_hidden_layers": 4}),
}
_CACHE: dict = {}


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("families")
    out = {}
    for fam, (name, over) in {**SMALL, "llama": (None, LLAMA)}.items():
        if name is None:
            cfg = dict(over)
        else:
            cfg = json.loads((CATALOG / f"{name}.json").read_text())
            cfg.pop("_gpuplan", None)
            cfg.update(over)
        path = root / f"{fam}.json"
        path.write_text(json.dumps(cfg))
        out[fam] = str(path)
    out["gpt2-full"] = "gpt2"
    return out


@pytest.fixture(scope="module")
def llama_path(configs):
    return configs["llama"]


def _seq(model: str) -> int:
    return 197 if "vit" in model else 256


def traced(model: str, gpus: int, precision: str, zero: int = 3, checkpointing: str = "none"):
    from gpuplan.trace.distributed import trace_sharded

    key = (model, gpus, precision, zero, checkpointing)
    if key not in _CACHE:
        _CACHE[key] = trace_sharded(model, gpus=gpus, zero=zero, batch=2, seq=_seq(model),
                                    precision=precision, checkpointing=checkpointing)
    return _CACHE[key]


def analytic(model: str, gpus: int, precision: str, zero: int = 3, checkpointing: str = "none",
             sharding: str = "fsdp2"):
    m = load_model(model)
    t = train_memory(m, Job(model=m, mode="train", precision=precision, batch=2,
                            seq=_seq(model), gpus=gpus, zero=zero, checkpointing=checkpointing,
                            sharding=sharding))
    return t


def _agree(got, traced_result) -> None:
    total = got.total_bytes - got.overhead_bytes
    assert abs(total - traced_result.total_bytes) <= TOLERANCE * traced_result.total_bytes, (
        total, traced_result.total_bytes, got.peak_phase, traced_result.peak_phase)
    assert got.peak_phase == traced_result.peak_phase


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


def test_the_fsdp2_plan_places_the_states_as_the_trace(llama_path):
    # mixed-bf16 under FSDP2: the fp32 shard is the master (4 B/param/N, no 16-bit shard, no
    # separate master), the gathered root unit is bf16; the trace's own categories agree
    r = traced(llama_path, 4, "mixed-bf16")
    t = analytic(llama_path, 4, "mixed-bf16")
    n = load_model(llama_path).params.total
    assert t.master_weights_bytes == 0 == r.per_gpu["master_weights_bytes"]
    assert t.weights_bytes == pytest.approx(4 * n / 4, rel=0.001)
    assert t.weights_bytes == pytest.approx(r.per_gpu["weights_bytes"], rel=0.001)
    assert t.optimizer_bytes == pytest.approx(r.per_gpu["optimizer_bytes"], rel=0.001)
    root = 2 * 32000 * 512 * 2  # embed_tokens + lm_head in bf16 (the norm's 1 KB aside)
    assert t.gathered_params_bytes == pytest.approx(root, rel=0.001)
    assert r.per_gpu["gathered_params_bytes"] == pytest.approx(root, rel=0.001)


@pytest.mark.parametrize("precision", ["mixed-bf16", "fp32"])
@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt2-full", "opt", "bert", "neox",
                                    "falcon", "mistral", "mixtral", "qwen2", "vit"])
def test_fsdp2_trace_against_the_fsdp2_plan(family, precision, configs):
    model = configs[family]
    _agree(analytic(model, 4, precision), traced(model, 4, precision))


@pytest.mark.parametrize("family,precision,gpus,zero,ck", [
    ("llama", "bf16", 8, 3, "none"),
    ("qwen2", "mixed-bf16", 2, 2, "none"),
    ("bert", "fp32", 4, 2, "none"),
    ("neox", "mixed-bf16", 2, 3, "full"),
    ("mixtral", "fp32", 2, 3, "full"),
    ("vit", "fp32", 2, 2, "full"),
])
def test_fsdp2_zero2_checkpointing_and_world_sizes(family, precision, gpus, zero, ck, configs):
    model = configs[family]
    _agree(analytic(model, gpus, precision, zero, ck), traced(model, gpus, precision, zero, ck))


def test_the_deepspeed_default_is_not_fsdp2(llama_path, configs):
    # The default keeps DeepSpeed's ZeRO-3 layout, which FSDP2 does not run: mixed-bf16 keeps a
    # 16-bit shard beside the fp32 master (6 B/param/N), and DeepSpeed keeps a model this small
    # (under its 1e9-element reuse distance) gathered whole where FSDP2 gathers a block at a
    # time. Measured against the FSDP2 trace: llama mixed-bf16 1.088, gpt2 fp32 1.221
    # (analytic/traced).
    for model, precision, lo in ((llama_path, "mixed-bf16", 1.03), (configs["gpt2-full"], "fp32",
                                                                      1.05)):
        t = analytic(model, 4, precision, sharding="deepspeed")
        r = traced(model, 4, precision)
        assert (t.total_bytes - t.overhead_bytes) / r.total_bytes > lo


def test_cli_trace_gpus_zero3(llama_path, capsys):
    from gpuplan.cli import main

    assert main(["trace", llama_path, "--gpus", "4", "--zero", "3", "--batch", "2", "--seq",
                 "256", "--precision", "fp32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_bytes"] == traced(llama_path, 4, "fp32").total_bytes
    assert main(["trace", "gpt2", "--gpus", "4", "--zero", "1"]) == 2
    assert "--zero 2 or 3" in capsys.readouterr().err
