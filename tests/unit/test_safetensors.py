"""*.safetensors headers: real files written with the safetensors library (numpy arrays), sharded
directories with and without an index, and hostile files written by hand."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
st_numpy = pytest.importorskip("safetensors.numpy")

from gpuplan.errors import MissingDependencyError, ModelFileError  # noqa: E402
from gpuplan.models import architecture_from_config, load_model, read_header  # noqa: E402

TINY_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 50, "tie_word_embeddings": False,
}


def _concrete(arch) -> dict[str, tuple[int, ...]]:
    out = {}
    for t in arch.tensors:
        names = [t.name.replace("{i}", str(i)) for i in range(arch.num_layers)] \
            if "{i}" in t.name else [t.name]
        for n in names:
            out[n] = t.shape
    return out


def _arrays(shapes, dtype=np.float16):
    return {n: np.zeros(s, dtype=dtype) for n, s in shapes.items()}


@pytest.fixture
def llama_dir(tmp_path):
    d = tmp_path / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    arch = architecture_from_config(TINY_LLAMA, name="t")
    return d, arch, _concrete(arch)


def test_single_file_headers_give_exact_counts_and_dtype(llama_dir):
    d, arch, shapes = llama_dir
    st_numpy.save_file(_arrays(shapes), str(d / "model.safetensors"))
    m = load_model(str(d))
    assert m.source == "safetensors" and m.architecture is not None
    assert m.params.total == sum(t.total for t in arch.tensors)
    assert m.checkpoint_dtype == "F16"
    assert all(t.dtype == "F16" for t in m.tensors)
    assert {t.name for t in m.tensors} == {t.name for t in arch.tensors}  # grouped by pattern
    assert m.notes == ()


def _split(shapes):
    names = sorted(shapes)
    return ({n: shapes[n] for n in names[: len(names) // 2]},
            {n: shapes[n] for n in names[len(names) // 2:]})


def test_sharded_with_index(llama_dir):
    d, arch, shapes = llama_dir
    a, b = _split(shapes)
    st_numpy.save_file(_arrays(a), str(d / "model-00001-of-00002.safetensors"))
    st_numpy.save_file(_arrays(b, np.float32), str(d / "model-00002-of-00002.safetensors"))
    wmap = {n: "model-00001-of-00002.safetensors" for n in a}
    wmap |= {n: "model-00002-of-00002.safetensors" for n in b}
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": wmap}))
    m = load_model(str(d))
    assert m.params.total == sum(t.total for t in arch.tensors)
    assert {t.dtype for t in m.tensors} == {"F16", "F32"}
    f16 = sum(t.total for t in m.tensors if t.dtype == "F16")
    assert m.checkpoint_dtype == ("F16" if f16 * 2 > m.params.total else "F32")


def test_sharded_without_index(llama_dir):
    d, arch, shapes = llama_dir
    a, b = _split(shapes)
    st_numpy.save_file(_arrays(a), str(d / "part-a.safetensors"))
    st_numpy.save_file(_arrays(b), str(d / "part-b.safetensors"))
    assert load_model(str(d)).params.total == sum(t.total for t in arch.tensors)


def test_the_same_tensor_in_two_shards_is_an_error(llama_dir):
    d, arch, shapes = llama_dir
    st_numpy.save_file(_arrays(shapes), str(d / "a.safetensors"))
    st_numpy.save_file(_arrays({"lm_head.weight": (50, 32)}), str(d / "b.safetensors"))
    with pytest.raises(ModelFileError, match="'lm_head.weight' is also in a.safetensors"):
        load_model(str(d))


def test_consolidated_copy_is_skipped(llama_dir):
    d, arch, shapes = llama_dir
    st_numpy.save_file(_arrays(shapes), str(d / "model.safetensors"))
    st_numpy.save_file(_arrays({"layers.0.attention.wq.weight": (32, 32)}),
                       str(d / "consolidated.safetensors"))
    m = load_model(str(d))
    assert m.params.total == sum(t.total for t in arch.tensors)
    assert any("consolidated.safetensors" in n for n in m.notes)


def test_headers_without_config_give_tensors_but_no_architecture(tmp_path, llama_dir):
    _, arch, shapes = llama_dir
    d = tmp_path / "weights-only"
    d.mkdir()
    st_numpy.save_file(_arrays(shapes), str(d / "model.safetensors"))
    m = load_model(str(d))
    assert m.architecture is None and m.source == "safetensors"
    assert m.params.total == sum(t.total for t in arch.tensors)
    by = m.params.by_component
    assert by["embeddings"] == 50 * 32 and by["head"] == 50 * 32
    assert by["norms"] == 2 * 2 * 32 + 32
    assert by["attention"] == 2 * (32 * 32 + 2 * 16 * 32 + 32 * 32)
    assert by["mlp"] == 2 * 3 * 32 * 48
    q = [t for t in m.tensors if t.name == "model.layers.{i}.self_attn.q_proj.weight"]
    assert q and q[0].count == 2 and q[0].linear
    assert any("no config.json" in n for n in m.notes)
    # A single .safetensors file works the same way.
    assert load_model(str(d / "model.safetensors")).params == m.params


def test_prefixless_names_buffers_and_mismatches(tmp_path):
    # An older GPT-2 checkpoint: no "transformer." prefix, the causal-mask buffer saved, a
    # resized vocabulary and an extra tensor.
    cfg = {"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 2, "vocab_size": 40,
           "n_positions": 8}
    d = tmp_path / "old-gpt2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    arch = architecture_from_config(cfg, name="g")
    shapes = {k.removeprefix("transformer."): v for k, v in _concrete(arch).items()}
    shapes["wte.weight"] = (44, 16)
    for i in range(2):
        shapes[f"h.{i}.attn.bias"] = (1, 1, 8, 8)
    shapes["score.weight"] = (3, 16)
    st_numpy.save_file(_arrays(shapes, np.float32), str(d / "model.safetensors"))
    m = load_model(str(d))
    expected = sum(t.total for t in arch.tensors) + 4 * 16 + 3 * 16
    assert m.params.total == expected
    assert m.params.by_component["embeddings"] == 44 * 16 + 8 * 16
    notes = " | ".join(m.notes)
    assert "skipped 2 non-parameter buffers" in notes
    assert "score.weight" in notes and "wte.weight is [44, 16]" in notes
    c_attn = [t for t in m.tensors if t.name == "transformer.h.{i}.attn.c_attn.weight"]
    assert c_attn and c_attn[0].transposed and c_attn[0].count == 2


def test_missing_tensors_are_noted(llama_dir):
    d, arch, shapes = llama_dir
    del shapes["lm_head.weight"]
    st_numpy.save_file(_arrays(shapes), str(d / "model.safetensors"))
    m = load_model(str(d))
    assert m.params.total == sum(t.total for t in arch.tensors) - 50 * 32
    assert any("not in the checkpoint (e.g. lm_head.weight)" in n for n in m.notes)


def test_read_header_and_metadata(tmp_path):
    p = tmp_path / "x.safetensors"
    st_numpy.save_file({"a": np.zeros((2, 3), np.int8), "b": np.zeros(5, np.float64)}, str(p),
                       metadata={"format": "np"})
    h = read_header(p)
    assert {(t.name, t.dtype, t.shape, t.nbytes) for t in h.tensors} == {
        ("a", "I8", (2, 3), 6), ("b", "F64", (5,), 40)}
    assert h.metadata == {"format": "np"}


# ---------------------------------------------------------------------------------------------
# Hostile files, written by hand

def _raw(path: Path, header, data: bytes = b"", *, length: int | None = None) -> Path:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(body) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + body + data)
    return path


OK = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}


@pytest.mark.parametrize("header,data,length,message", [
    (b"", b"", 2**62, "header length 4611686018427387904 bytes is over the 100 MB limit"),
    (b"{}", b"", 100_000_001, "over the 100 MB limit"),
    (b"{}", b"", 1000, "header length 1000 bytes is larger than the file (10 bytes)"),
    (b"{not json", b"", None, "safetensors header is not valid JSON"),
    (b"\xff\xfe", b"", None, "safetensors header is not UTF-8"),
    (b"[1, 2]", b"", None, "safetensors header is not a JSON object"),
    (b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
     b'"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4, None,
     "repeats the key 'w'"),
    (b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, NaN]}}', b"", None,
     "not valid JSON"),
    ({"w": 5}, b"", None, "tensor 'w': expected an object"),
    ({"w": {"dtype": 5, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, None,
     "tensor 'w': unknown dtype 5"),
    ({"w": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, None,
     "unknown dtype 'F12'"),
    ({"w": {"dtype": "F32", "shape": "2x2", "data_offsets": [0, 16]}}, b"\0" * 16, None,
     "shape '2x2' is not a list of whole numbers"),
    ({"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}}, b"\0" * 16, None,
     "shape [-1, 4]"),
    ({"w": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4, None,
     "shape [True]"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16]}}, b"\0" * 16, None,
     "data_offsets [16] is not [begin, end]"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, b"\0" * 16, None,
     "is not [begin, end] with 0 <= begin <= end"),
    ({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, b"\0" * 8, None,
     "data_offsets [0, 16] run past the end of the file (data section is 8 bytes)"),
    ({"w": {"dtype": "F32", "shape": [10**12, 10**12], "data_offsets": [0, 16]}}, b"\0" * 16,
     None, "needs 4e+24"),
    ({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}}, b"\0" * 16, None,
     "data_offsets span 16 bytes but shape [2, 2] of BF16 needs 8"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, None,
     "overlaps the previous tensor"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, None,
     "leaves a gap at byte 0"),
    (OK, b"\0" * 20, None, "data section is 20 bytes but the tensors cover 16"),
    ({"__metadata__": {"format": 1}, **OK}, b"\0" * 16, None, "__metadata__ must map strings"),
])
def test_hostile_files_are_one_line_errors(tmp_path, header, data, length, message):
    p = _raw(tmp_path / "model.safetensors", header, data, length=length)
    for spec in (p, tmp_path):  # the file itself, and its directory
        with pytest.raises(ModelFileError) as e:
            load_model(str(spec))
        text = str(e.value)
        assert text.startswith(str(p) + ": "), text
        assert message in text
        assert "\n" not in text


def test_too_short_file(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"\x01\x02")
    with pytest.raises(ModelFileError, match="is 2 bytes, too short"):
        read_header(p)


def test_a_valid_hand_written_file_is_accepted(tmp_path):
    p = _raw(tmp_path / "ok.safetensors", {**OK, "__metadata__": {"format": "pt"}}, b"\0" * 16)
    assert [(t.name, t.shape) for t in read_header(p).tensors] == [("w", (2, 2))]


@pytest.mark.parametrize("weight_map,message", [
    ({"w": "../evil.safetensors"}, "expected a plain *.safetensors file name"),
    ({"w": "/etc/passwd"}, "expected a plain *.safetensors file name"),
    ({"w": "missing.safetensors"}, "weight_map names missing.safetensors, which is not in"),
    ({"w": "a.safetensors", "v": "a.safetensors"}, "weight_map puts 'v' in a.safetensors, but "
                                                   "no shard holds it"),
    ([], '"weight_map" must be a non-empty object'),
])
def test_hostile_index(tmp_path, weight_map, message):
    _raw(tmp_path / "a.safetensors", OK, b"\0" * 16)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ModelFileError, match=message.replace("*", r"\*").replace(".", r"\.")
                       .replace("(", r"\(")):
        load_model(str(tmp_path))


def test_index_pointing_at_the_wrong_shard(tmp_path):
    _raw(tmp_path / "a.safetensors", OK, b"\0" * 16)
    _raw(tmp_path / "b.safetensors", {"v": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
         b"\0" * 4)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "b.safetensors", "v": "b.safetensors"}}))
    with pytest.raises(ModelFileError, match="puts 'w' in b.safetensors, but no shard holds it"):
        load_model(str(tmp_path))


def test_missing_safetensors_library_says_what_to_install(tmp_path, monkeypatch):
    p = _raw(tmp_path / "ok.safetensors", OK, b"\0" * 16)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'gpuplan\[safetensors\]'"):
        read_header(p)
