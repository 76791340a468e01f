"""A .gguf file written by the gguf package: its header read, its per-tensor types planned.

The oracle for bytes is gguf-py's own GGML_QUANT_SIZES (block size, type size) applied to the
tensors this test writes; the oracle for parameters is the llama parameter formula worked by hand.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from gguf import GGMLQuantizationType as T  # noqa: E402

from gpuplan import Job, plan  # noqa: E402
from gpuplan.cli import main  # noqa: E402
from gpuplan.errors import InputError, ModelFileError  # noqa: E402
from gpuplan.models import GGML_TYPES, load_model  # noqa: E402

H, L, NH, KV, I, V, CTX = 64, 2, 4, 2, 128, 96, 256
HD = H // NH

#: (gguf name, numpy shape (out, in), type) -- llama.cpp's names; a per-layer mix on ffn_down
#: (Q8_0 in layer 0, Q4_0 in layer 1) as Q4_K_M files mix types by layer.
def _tensors() -> list[tuple[str, tuple[int, ...], T]]:
    out = [("token_embd.weight", (V, H), T.F16), ("output_norm.weight", (H,), T.F32),
           ("output.weight", (V, H), T.Q8_0)]
    for i in range(L):
        b = f"blk.{i}"
        out += [(f"{b}.attn_norm.weight", (H,), T.F32), (f"{b}.ffn_norm.weight", (H,), T.F32),
                (f"{b}.attn_q.weight", (NH * HD, H), T.Q8_0),
                (f"{b}.attn_k.weight", (KV * HD, H), T.Q8_0),
                (f"{b}.attn_v.weight", (KV * HD, H), T.Q8_0),
                (f"{b}.attn_output.weight", (H, NH * HD), T.Q8_0),
                (f"{b}.ffn_gate.weight", (I, H), T.Q4_0), (f"{b}.ffn_up.weight", (I, H), T.Q4_0),
                (f"{b}.ffn_down.weight", (H, I), T.Q8_0 if i == 0 else T.Q4_0)]
    return out


def _write(path) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(L)
    w.add_context_length(CTX)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_head_count(NH)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    rng = np.random.default_rng(0)
    for name, shape, qtype in _tensors():
        data = rng.standard_normal(shape).astype(np.float32)
        if qtype == T.F32:
            w.add_tensor(name, data)
        elif qtype == T.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def gguf_file(tmp_path):
    p = tmp_path / "tiny-llama.Q-mix.gguf"
    _write(p)
    return p


def _expected_bytes() -> int:
    total = 0
    for _name, shape, qtype in _tensors():
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n = int(np.prod(shape))
        assert n % block == 0
        total += n // block * type_size
    return total


def test_ggml_type_table_matches_gguf_py():
    for name, (type_bytes, block) in GGML_TYPES.items():
        assert gguf.GGML_QUANT_SIZES[T[name]] == (block, type_bytes), name


def test_gguf_header_gives_architecture_and_exact_parameters(gguf_file):
    m = load_model(gguf_file)
    assert m.source == "gguf"
    a = m.architecture
    assert (a.family, a.hidden_size, a.num_layers, a.num_heads, a.num_kv_heads,
            a.intermediate_size, a.vocab_size, a.max_position_embeddings) == (
        "llama", H, L, NH, KV, I, V, CTX)
    assert not a.tie_word_embeddings          # the file has its own output.weight
    per_layer = H * NH * HD + 2 * H * KV * HD + NH * HD * H + 3 * H * I + 2 * H
    assert m.params.total == V * H + L * per_layer + H + V * H == sum(
        int(np.prod(s)) for _, s, _ in _tensors())
    types = {t.dtype for t in m.tensors}
    assert types == {"F16", "F32", "Q8_0", "Q4_0"}
    # ffn_down is Q8_0 in one layer and Q4_0 in the other: two groups of one tensor each
    down = [t for t in m.tensors if t.name.endswith("mlp.down_proj.weight")]
    assert sorted((t.dtype, t.count) for t in down) == [("Q4_0", 1), ("Q8_0", 1)]


def test_gguf_inference_weights_are_the_files_per_tensor_bytes(gguf_file):
    m = load_model(gguf_file)
    p = plan(Job(model=m, mode="infer", infer_precision="gguf"), gpus=["H100-SXM-80GB"])
    assert p.infer.weights_bytes == _expected_bytes()
    # the plan knows the architecture, so the KV cache is the llama formula:
    # 2 (K, V) x layers x kv_heads x head_dim x 2 bytes x tokens (the default seq: the context)
    assert p.infer.kv_cache_bytes == 2 * L * KV * HD * 2 * CTX


def test_cli_fit_gguf_defaults_to_inference_in_the_files_types(gguf_file):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fit", str(gguf_file), "--json", "--gpu", "RTX-4090"]) == 0
    d = json.loads(out.getvalue())
    assert d["job"]["mode"] == "infer" and d["job"]["infer_precision"] == "gguf"
    assert d["infer"]["per_gpu"]["weights_bytes"] == _expected_bytes()
    assert "speed" not in d


def test_gguf_format_needs_per_tensor_types():
    with pytest.raises(InputError, match="'gguf'"):
        plan(Job(model="llama-3.1-8b", mode="infer", infer_precision="gguf"))


def test_not_a_gguf_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "fake.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 64)
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        load_model(bad)
    assert main(["fit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_truncated_gguf_is_a_model_file_error(gguf_file):
    data = gguf_file.read_bytes()
    gguf_file.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFileError):
        load_model(gguf_file)
