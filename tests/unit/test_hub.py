"""Hub ids (org/name) from a Hugging Face cache folder built on disk, and --download with the
network faked: no test touches the network.

The cache has the layout huggingface_hub writes (models--org--name/refs/main holding the commit,
snapshots/<commit>/...), with a real config.json's numbers (Qwen2.5-0.5B, from its hub page) and a
safetensors header written by the safetensors package.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

hf = pytest.importorskip("huggingface_hub")
pytest.importorskip("huggingface_hub.constants")
pytest.importorskip("huggingface_hub.errors")
np = pytest.importorskip("numpy")
st = pytest.importorskip("safetensors.numpy")

from gpuplan.cli import main  # noqa: E402
from gpuplan.errors import InputError, ModelFileError, UnknownNameError  # noqa: E402
from gpuplan.models import load_model  # noqa: E402

REV = "0123456789abcdef0123456789abcdef01234567"

#: A tiny llama config (one layer) so the test can write every tensor's header for real.
TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 96, "max_position_embeddings": 256, "tie_word_embeddings": False,
        "torch_dtype": "float16"}


def _tiny_tensors() -> dict[str, np.ndarray]:
    H, I, V, KVD = 64, 128, 96, 2 * 16
    t = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,),
         "lm_head.weight": (V, H)}
    p = "model.layers.0"
    t.update({f"{p}.input_layernorm.weight": (H,), f"{p}.post_attention_layernorm.weight": (H,),
              f"{p}.self_attn.q_proj.weight": (H, H), f"{p}.self_attn.k_proj.weight": (KVD, H),
              f"{p}.self_attn.v_proj.weight": (KVD, H), f"{p}.self_attn.o_proj.weight": (H, H),
              f"{p}.mlp.gate_proj.weight": (I, H), f"{p}.mlp.up_proj.weight": (I, H),
              f"{p}.mlp.down_proj.weight": (H, I)})
    return {k: np.zeros(s, dtype=np.float16) for k, s in t.items()}


def _repo(cache, repo_id: str, files: dict[str, bytes | None]) -> None:
    """A cached repo: blobs, a snapshot of symlinks, refs/main (huggingface_hub's layout)."""
    root = cache / ("models--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / REV
    snap.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(REV)
    (root / "blobs").mkdir()
    for n, (name, data) in enumerate(files.items()):
        blob = root / "blobs" / f"blob{n}"
        blob.write_bytes(data)
        (snap / name).symlink_to(blob)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "hub"
    c.mkdir()
    monkeypatch.setattr(hf.constants, "HF_HUB_CACHE", str(c))
    # Any network call fails the test.
    def no_network(*a, **k):
        raise AssertionError("the network was used")
    monkeypatch.setattr(hf, "hf_hub_download", no_network)
    monkeypatch.setattr(hf, "get_safetensors_metadata", no_network)
    return c


def _safetensors_bytes(tmp_path) -> bytes:
    p = tmp_path / "model.safetensors"
    st.save_file(_tiny_tensors(), str(p))
    return p.read_bytes()


def test_hub_id_from_cache_reads_config_and_headers(cache, tmp_path):
    _repo(cache, "acme/tiny-llama", {"config.json": json.dumps(TINY).encode(),
                                     "model.safetensors": _safetensors_bytes(tmp_path)})
    m = load_model("acme/tiny-llama")
    assert m.name == "acme/tiny-llama" and m.source == "safetensors"
    assert m.checkpoint_dtype == "F16"
    # by hand: embeddings + head 2 x 96 x 64, final norm 64; one layer: q, o 64x64, k, v 32x64,
    # gate, up, down 128x64, two norms of 64
    assert m.params.total == 2 * 96 * 64 + 64 + (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64 + 2 * 64)
    assert m.params.total == sum(a.size for a in _tiny_tensors().values())


def test_real_config_numbers_from_cache_match_the_catalog(cache):
    # Qwen2.5-0.5B's published config.json is in the catalog: the cache copy gives the same model
    from gpuplan.models import catalog_config

    _repo(cache, "someone/qwen-copy",
          {"config.json": json.dumps(catalog_config("qwen2.5-0.5b")).encode()})
    m = load_model("someone/qwen-copy")
    assert m.source == "config"
    assert m.params.total == load_model("qwen2.5-0.5b").params.total == 494_032_768


def test_partial_shards_fall_back_to_config(cache):
    index = {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                            "model.norm.weight": "model-00001-of-00002.safetensors"}}
    _repo(cache, "acme/sharded", {"config.json": json.dumps(TINY).encode(),
                                  "model.safetensors.index.json": json.dumps(index).encode()})
    m = load_model("acme/sharded")
    assert m.source == "config"
    assert any("0 of the 2 weight shards" in n for n in m.notes)


def test_case_of_a_cached_hub_id_is_forgiven(cache):
    _repo(cache, "Acme/Tiny", {"config.json": json.dumps(TINY).encode()})
    assert load_model("acme/tiny").name == "Acme/Tiny"


def test_unknown_hub_id_says_how_to_get_it_and_suggests_no_other_size(cache):
    # Qwen2.5-3B, not Qwen2.5-14B: Qwen/Qwen2.5-14B is a catalog alias since the catalog
    # gained qwen2.5-14b (a catalog name resolves before the hub cache)
    with pytest.raises(InputError) as e:
        load_model("Qwen/Qwen2.5-3B")
    msg = str(e.value)
    assert "not a local path, in gpuplan's catalog or in the Hugging Face cache" in msg
    assert str(cache) in msg and "download" in msg
    assert "1.5b" not in msg.lower() and "did you mean" not in msg


def test_hub_typo_suggests_the_cached_repo(cache):
    _repo(cache, "acme/tiny-llama", {"config.json": json.dumps(TINY).encode()})
    with pytest.raises(InputError, match="did you mean 'acme/tiny-llama'"):
        load_model("acme/tiny-lama")


def test_catalog_typos_still_suggest_but_never_another_size():
    with pytest.raises(UnknownNameError) as e:
        load_model("lama-3.1-8b")
    assert "llama-3.1-8b" in e.value.suggestions
    with pytest.raises(UnknownNameError) as e:
        load_model("qwen2.5-3b")  # not qwen2.5-14b: that is a catalog entry now
    assert e.value.suggestions == []


@pytest.mark.parametrize("arg", ["./nonexistent/path", "../x/y", "/no/such/dir", "~/nope/model",
                                 "gpt2.json", "model.gguf", "a/b/c"])
def test_path_like_arguments_are_missing_paths(arg):
    with pytest.raises(ModelFileError, match="no such file or directory") as e:
        load_model(arg)
    assert "did you mean" not in str(e.value)


# --------------------------------------------------------------------------------------------
# --download, the network faked


class _Meta:
    def __init__(self, files):
        self.files_metadata = files


class _FileMeta:
    def __init__(self, tensors):
        self.tensors = tensors


class _Info:
    def __init__(self, dtype, shape, offsets):
        self.dtype, self.shape, self.data_offsets = dtype, shape, offsets


def _fake_metadata(tmp_path):
    """The header of the file this test writes, as get_safetensors_metadata returns it."""
    from gpuplan.models import read_header

    p = tmp_path / "dl.safetensors"
    st.save_file(_tiny_tensors(), str(p))
    tensors, at = {}, 0
    for t in read_header(p).tensors:
        tensors[t.name] = _Info(t.dtype, list(t.shape), (at, at + t.nbytes))
        at += t.nbytes
    return _Meta({"model.safetensors": _FileMeta(tensors)})


def test_download_fetches_config_and_headers_only(cache, tmp_path, monkeypatch):
    calls = []

    def fake_download(repo_id, filename, **kw):
        calls.append(filename)
        _repo(cache, repo_id, {"config.json": json.dumps(TINY).encode()})
        return str(cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / REV /
                   "config.json")

    meta = _fake_metadata(tmp_path)
    monkeypatch.setattr(hf, "hf_hub_download", fake_download)
    monkeypatch.setattr(hf, "get_safetensors_metadata", lambda repo_id, **kw: meta)
    with pytest.raises(InputError):
        load_model("acme/remote")                      # never by default
    m = load_model("acme/remote", download=True)
    assert calls == ["config.json"]                    # the weights were never asked for
    assert m.source == "safetensors" and m.checkpoint_dtype == "F16"
    assert m.params.total == sum(a.size for a in _tiny_tensors().values())
    # the config is now in the cache: the next plain call finds it there
    assert load_model("acme/remote").source == "config"


def _http_error(cls, status):
    import httpx2 as httpx  # huggingface_hub 2.x

    req = httpx.Request("GET", "https://huggingface.co/x")
    return cls("boom", response=httpx.Response(status, request=req))


@pytest.mark.parametrize("make, expect", [
    (lambda: _http_error(hf.errors.GatedRepoError, 401), "is a gated repository"),
    (lambda: _http_error(hf.errors.RepositoryNotFoundError, 404), "no such model repository"),
    (lambda: hf.errors.LocalEntryNotFoundError("no connection"), "cannot reach the Hugging Face hub"),
])
def test_download_failures_are_one_line(cache, monkeypatch, capsys, make, expect):
    pytest.importorskip("httpx2")

    def fail(*a, **k):
        raise make()

    monkeypatch.setattr(hf, "hf_hub_download", fail)
    with pytest.raises(InputError, match=expect):
        load_model("acme/remote", download=True)
    assert main(["fit", "acme/remote", "--download"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err and "Traceback" not in err


def test_cli_fit_takes_a_cached_hub_id(cache, tmp_path):
    _repo(cache, "acme/tiny-llama", {"config.json": json.dumps(TINY).encode(),
                                     "model.safetensors": _safetensors_bytes(tmp_path)})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fit", "acme/tiny-llama", "--mode", "infer", "--json", "--gpu",
                     "RTX-4090"]) == 0
    d = json.loads(out.getvalue())
    assert d["model"]["name"] == "acme/tiny-llama"
    assert d["infer"]["per_gpu"]["weights_bytes"] == 2 * sum(
        a.size for a in _tiny_tensors().values())      # bf16: 2 bytes per parameter
