"""Structure-aware fuzz targets (issue 32), beside the byte-level ones of ``fuzz_targets.py``:
GGUF files whose fields are known by position (type bytes flipped, counts and lengths inflated,
tensor offsets overlapped), safetensors headers mutated field by field, config.json files with one
count inflated and every other dimension 1, a Hugging Face cache with hostile refs and snapshots,
a damaged bench store, and the Python API's non-Job arguments. Each generator takes a seeded
``random.Random``; each target takes its input and returns an outcome for
:func:`fuzz_targets.check_outcome`. ``REPRODUCERS`` holds issue 32's inputs, each kept as a
regression case of its target (run first by ``benchmarks/fuzz.py`` and by the CI test).

The GGUF layout is the one ggml's docs/gguf.md specifies (magic ``GGUF``, version, tensor count,
key count, typed keys, tensor infos, data aligned to ``general.alignment``, default 32).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import random
import struct
import tempfile
from pathlib import Path

import fuzz_features as ff
import fuzz_targets as ft

# ------------------------------------------------------------------------------------------------
# GGUF

_U32, _U64, _STRING, _ARRAY = 4, 10, 8, 9
H, NH, FF, VOCAB = 8, 2, 16, 32


class _Gguf:
    """A GGUF file being written, with the position and kind of every field a mutation targets."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.fields: list[tuple[int, str, int]] = []  # (position, kind, value)

    def u32(self, v: int, kind: str = "") -> None:
        if kind:
            self.fields.append((len(self.buf), kind, v))
        self.buf += struct.pack("<I", v)

    def u64(self, v: int, kind: str = "") -> None:
        if kind:
            self.fields.append((len(self.buf), kind, v))
        self.buf += struct.pack("<Q", v)

    def string(self, s: str) -> None:
        b = s.encode()
        self.u64(len(b), "strlen")
        self.buf += b


def _llama_tensors() -> list[tuple[str, tuple[int, ...]]]:
    t = [("token_embd.weight", (H, VOCAB)), ("output_norm.weight", (H,))]
    for layer in range(2):
        b = f"blk.{layer}"
        t += [(f"{b}.attn_norm.weight", (H,)), (f"{b}.ffn_norm.weight", (H,)),
              (f"{b}.attn_q.weight", (H, H)), (f"{b}.attn_k.weight", (H, H)),
              (f"{b}.attn_v.weight", (H, H)), (f"{b}.attn_output.weight", (H, H)),
              (f"{b}.ffn_gate.weight", (H, FF)), (f"{b}.ffn_up.weight", (H, FF)),
              (f"{b}.ffn_down.weight", (FF, H))]
    return t


def gguf_file(tokens: int = 4) -> _Gguf:
    """A valid two-layer llama GGUF v3 (F32 tensors, ``tokens`` vocabulary strings), fields noted."""
    g = _Gguf()
    tensors = _llama_tensors()
    g.buf += b"GGUF"
    g.u32(3, "version")
    g.u64(len(tensors), "tensor_count")
    g.u64(9 + (tokens > 0), "kv_count")
    g.string("general.architecture")
    g.u32(_STRING, "type")
    g.string("llama")
    for key, v in (("block_count", 2), ("context_length", 256), ("embedding_length", H),
                   ("feed_forward_length", FF), ("attention.head_count", NH),
                   ("attention.head_count_kv", NH), ("vocab_size", VOCAB)):
        g.string(f"llama.{key}")
        g.u32(_U32, "type")
        g.u32(v, "value")
    g.string("general.alignment")
    g.u32(_U32, "type")
    g.u32(32, "alignment")
    if tokens:
        g.string("tokenizer.ggml.tokens")
        g.u32(_ARRAY, "type")
        g.u32(_STRING, "item_type")
        g.u64(tokens, "array_count")
        for i in range(tokens):
            g.string(f"t{i}")
    offset, data = 0, 0
    for name, dims in tensors:
        g.string(name)
        g.u32(len(dims), "n_dims")
        for d in dims:
            g.u64(d, "dim")
        g.u32(0, "ggml_type")  # F32
        g.u64(offset, "offset")
        offset += -(-4 * math.prod(dims) // 32) * 32
    data = -(-len(g.buf) // 32) * 32 + offset
    g.buf += b"\0" * (data - len(g.buf))
    return g


_COUNTS = [0, 1, 2, 3, 2**22, 2**22 + 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63, 2**64 - 1]


def _hostile_value(rng: random.Random, kind: str, value: int, g: _Gguf) -> int:
    if kind == "type" or kind == "item_type":
        return rng.choice([*range(14), 255, 2**31, 2**32 - 1])
    if kind == "ggml_type":
        return rng.choice([*range(42), 2**31, 2**32 - 1])
    if kind == "offset":
        others = [v for _, k, v in g.fields if k == "offset" and v != value]
        return rng.choice([*others, value + 1, value + 16, 2**40, 2**64 - 1, 0])
    if kind in ("version", "alignment", "n_dims", "value"):
        return rng.choice([0, 1, 2, 3, 4, 5, 7, 33, 2**16, 2**31, 2**32 - 1])
    return rng.choice([*_COUNTS, value * 2, value + 1, max(value - 1, 0)])


def gguf_bytes(rng: random.Random) -> bytes:
    """A valid GGUF with one to three of its fields given hostile values (a type byte, a count,
    a string length, a dimension, an offset), sometimes truncated or byte-flipped too."""
    g = gguf_file(tokens=rng.choice([0, 4, 40]))
    data = bytearray(g.buf)
    if rng.random() < 0.15:
        return bytes(data)
    for _ in range(rng.randint(1, 3)):
        pos, kind, value = rng.choice(g.fields)
        width = 4 if kind in ("version", "type", "item_type", "value", "alignment", "n_dims",
                              "ggml_type") else 8
        v = _hostile_value(rng, kind, value, g) % (256 ** width)
        data[pos:pos + width] = v.to_bytes(width, "little")
    if rng.random() < 0.15:
        del data[rng.randrange(4, len(data)):]
    if rng.random() < 0.1:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _model_outcome(m) -> dict:
    from gpuplan.report.models import model_json

    return {"rc": 0, "obj": model_json(m), "json": True}


def read_gguf(data: bytes) -> dict:
    from gpuplan.models import load_model

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "model.gguf"
        p.write_bytes(data)
        return _model_outcome(load_model(str(p)))


# ------------------------------------------------------------------------------------------------
# safetensors, field by field


def safetensors_struct_bytes(rng: random.Random) -> bytes:
    """A valid header of llama tensors with one field made hostile: a shape inflated, two tensors'
    data overlapped, an offset past the data, a dtype changed, the header length inflated."""
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.0.mlp.up_proj.weight", "model.norm.weight"]
    shapes = [[VOCAB, H], [H, H], [FF, H], [H]]
    header, at = {}, 0
    for name, shape in zip(names, shapes):
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    t = header[rng.choice(names)]
    how = rng.choice(["shape", "overlap", "past", "dtype", "length", "count", "none"])
    if how == "shape":
        t["shape"] = [d * rng.choice([2, 2**20, 2**31, 2**62]) for d in t["shape"]]
    elif how == "overlap":
        other = header[rng.choice(names)]
        t["data_offsets"] = list(other["data_offsets"])
    elif how == "past":
        t["data_offsets"] = [at, at + rng.choice([2, 2**31, 2**63])]
    elif how == "dtype":
        t["dtype"] = rng.choice(["F64", "I64", "F8_E4M3", "U8", "BOOL", "f32", ""])
    elif how == "count":
        for i in range(rng.choice([1000, 20000])):
            header[f"model.layers.{i}.x"] = {"dtype": "BF16", "shape": [1],
                                             "data_offsets": [0, 2]}
    raw = json.dumps(header).encode()
    length = len(raw)
    if how == "length":
        length = rng.choice([len(raw) + 1, 2**31, 2**63, 100 * 2**20])
    return struct.pack("<Q", length) + raw + b"\0" * at


# ------------------------------------------------------------------------------------------------
# config.json with counts inflated, then planned

_COUNT_KEYS = ["num_local_experts", "num_experts_per_tok", "vocab_size", "num_hidden_layers",
               "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
               "max_position_embeddings", "head_dim"]
_BIG = [1, 2, 10**4, 10**4 + 1, 10**6, 10**7, 2**31, 2**31 + 1, 10**15]


def config_plan_input(rng: random.Random) -> dict:
    """A Mixtral config.json with one to three counts inflated (sometimes every other dimension
    1, so the parameter count stays small while the count grows), and a job to plan it with."""
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
           "num_hidden_layers": 2, "vocab_size": 128, "num_local_experts": 8,
           "num_experts_per_tok": 2, "max_position_embeddings": 256}
    if rng.random() < 0.5:
        cfg.update(hidden_size=1, intermediate_size=1, num_attention_heads=1,
                   num_key_value_heads=1, vocab_size=1, num_hidden_layers=1,
                   max_position_embeddings=1, num_experts_per_tok=1)
    for k in rng.sample(_COUNT_KEYS, k=rng.randint(1, 3)):
        cfg[k] = rng.choice(_BIG)
    job = {"mode": rng.choice(["train", "infer"]), "batch": rng.choice([1, 2, 64]),
           "seq": rng.choice([None, 1, 128])}
    if rng.random() < 0.4:
        job.update(zero=3, gpus=rng.choice([1, 8]))
    return {"config": cfg, "job": job, "web": rng.random() < 0.3}


def run_config_plan(call: dict) -> dict:
    from gpuplan import Job, plan
    from gpuplan.models._load import model_from_config_bytes

    data = json.dumps(call["config"]).encode()
    if call["web"]:
        from gpuplan.web import _service

        body = {"config": data.decode(), "gpu": ["h100"], "speed": False,
                **{k: v for k, v in call["job"].items() if v is not None}}
        return {"rc": 0, "obj": _service.fit(body), "json": True}
    m = model_from_config_bytes(data)
    job = Job(model=m, **{k: v for k, v in call["job"].items() if v is not None})
    return {"rc": 0, "obj": plan(job, ["h100"], speed=False).to_dict(), "json": True}


# ------------------------------------------------------------------------------------------------
# The Hugging Face cache

_HASH = "0123456789abcdef0123456789abcdef01234567"


def hf_cache_input(rng: random.Random) -> dict:
    """A cache holding one repo: its refs/main (valid, with a newline, not UTF-8, huge, a path),
    its snapshot's config.json (valid, mutated, missing, a directory), and the id asked for."""
    ref = _HASH.encode() if rng.random() < 0.5 else rng.choice([_HASH.encode() + b"\n", b"\xff\xfe\x00bad", b"",
                      b"../../../../etc", b"a" * 2_000_000, _HASH.encode() * 3, b"\x00" * 40])
    cfg = rng.choice(["valid", "mutated", "missing", "dir", "huge"])
    rid = "acme/m" if rng.random() < 0.5 else rng.choice(["acme/m\n", "acme/m ", "acme/../m", "Acme/M",
                      "acme/m/extra", "acme/" + "m" * 300, "acme/m\x00"])
    return {"ref": ref, "config": cfg, "seed": rng.randrange(2**32), "id": rid}


def run_hf_cache(call: dict) -> dict:
    import huggingface_hub.constants as hc

    from gpuplan.models import load_model

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "models--acme--m"
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_bytes(call["ref"])
        snap = root / "snapshots" / _HASH
        snap.mkdir(parents=True)
        how = call["config"]
        if how == "dir":
            (snap / "config.json").mkdir()
        elif how == "huge":
            with (snap / "config.json").open("wb") as f:
                f.write(b'{"a": "')
                f.truncate(64 * 2**20)
        elif how != "missing":
            rng = random.Random(call["seed"])
            data = ft.config_bytes(rng) if how == "mutated" else json.dumps(ft.BASE_CONFIG)
            (snap / "config.json").write_bytes(data if isinstance(data, bytes)
                                               else data.encode())
        old = hc.HF_HUB_CACHE, hc.HF_HUB_OFFLINE
        hc.HF_HUB_CACHE, hc.HF_HUB_OFFLINE = d, True
        try:
            return _model_outcome(load_model(call["id"]))
        finally:
            hc.HF_HUB_CACHE, hc.HF_HUB_OFFLINE = old


# ------------------------------------------------------------------------------------------------
# The bench store, damaged

_TEMPLATE: dict[str, bytes] = {}


def _template_db() -> bytes:
    """A store of three saved runs (made once per process)."""
    if "db" not in _TEMPLATE:
        from test_compute_measured import _run

        from gpuplan.measure import save_run

        with tempfile.TemporaryDirectory() as d:
            db = Path(d) / "bench.sqlite"
            for i in range(3):
                save_run(_run(created=f"2026-01-01T00:00:0{i}+00:00"), db)
            _TEMPLATE["db"] = db.read_bytes()
    return _TEMPLATE["db"]


_BENCH_ARGV = [["bench", "--history"], ["bench", "--show", "latest"],
               ["bench", "--show", "latest~2"], ["bench", "--show", "1"],
               ["speed", "gpt2", "--gpu", "h100", "--json"],
               ["fit", "gpt2", "--gpu", "h100", "--json"]]


def bench_store_input(rng: random.Random) -> dict:
    """The template store with bytes flipped, a page zeroed, the file cut or extended, and a
    read-only command to run on it (with a hostile run id sometimes)."""
    data = bytearray(_template_db())
    how = rng.choice(["flip", "zero_page", "cut", "append", "header", "none"])
    if how == "flip":
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif how == "zero_page":
        page = rng.randrange(len(data) // 4096) * 4096
        data[page:page + 4096] = b"\0" * 4096
    elif how == "cut":
        del data[rng.randrange(len(data)):]
    elif how == "append":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 5000)))
    elif how == "header":
        at = rng.randrange(100)
        data[at] = rng.randrange(256)
    argv = list(rng.choice(_BENCH_ARGV))
    if argv[:2] == ["bench", "--show"] and rng.random() < 0.5:
        argv[2] = rng.choice(ft.HOSTILE_TEXT + ["latest~" + str(2**63), "latest~-1"])
    return {"db": bytes(data), "argv": argv}


def run_bench_store(call: dict) -> dict:
    from gpuplan.cli import main

    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "bench.sqlite"
        db.write_bytes(call["db"])
        old = os.environ.get("GPUPLAN_BENCH_DB")
        os.environ["GPUPLAN_BENCH_DB"] = str(db)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(list(call["argv"]))
        finally:
            if old is None:
                os.environ.pop("GPUPLAN_BENCH_DB")
            else:
                os.environ["GPUPLAN_BENCH_DB"] = old
        after = db.read_bytes() if db.exists() else b""
        if after != call["db"] and not Path(f"{db}-journal").exists():
            return {"rc": 99, "err": "a read-only command changed the store", "json": False}
    # a damaged run is skipped with a one-line warning before the answer (or the error)
    lines = err.getvalue().splitlines(keepends=True)
    kept = "".join(ln for ln in lines if not ln.startswith("gpuplan: warning: "))
    return {"rc": rc, "out": out.getvalue(), "err": kept, "warnings": len(lines) - len(kept.splitlines()),
            "json": "--json" in call["argv"]}


# ------------------------------------------------------------------------------------------------
# The Python API's non-Job arguments

_ARG_VALUES = [None, True, 0, 1, -1, 3, 4, 5, 10**6, 2**31, 10**309, 1e308, -1e308, 1.5,
               math.nan, math.inf, "", "h100", "gpt2", "x" * 5000, [], {}, "\x1b[2J"]
_CALLS = {
    "suggest": ("max_changes", "top", "mode", "overhead_level"),
    "infer_memory": ("tensor_parallel", "overhead_level"),
    "train_memory": ("overhead_level", "overhead_overrides"),
    "estimate_speed": ("new_tokens", "link", "input_bytes", "train_tokens", "train_samples",
                       "epochs", "price_per_gpu_hour", "trainable_params", "pinned", "tf32"),
    "max_batch": ("limit", "mode"),
    "max_seq": ("mode",),
    "estimate_cpu_speed": ("new_tokens", "trainable_params"),
    "plan": ("top", "speed", "max_batch", "overhead_level"),
    "Architecture": ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "vocab_size", "intermediate_size", "hidden_dropout"),
    "GPU": ("memory_bytes", "memory_bandwidth", "pcie_gen", "peak_flops"),
    "from_dict": ("batch", "seq", "mode", "model", "gpus"),
    # qa43: the serving simulation's own arguments
    "capacity": ("replicas", "prefix_hit", "price", "seed", "slo", "workload", "requests",
                 "rate", "input_dist", "engine_version"),
}


def api_args_input(rng: random.Random) -> dict:
    """One public function or constructor with one to three hostile arguments; sometimes a str
    where the Model, GPU or CPU belongs."""
    fn = rng.choice(list(_CALLS))
    names = _CALLS[fn]
    kw = {k: rng.choice(_ARG_VALUES) for k in rng.sample(names, k=rng.randint(1, min(3,
                                                                                  len(names))))}
    if rng.random() < 0.25:  # the defaults, to reach the answers and check them
        kw = {}
    if "peak_flops" in kw:
        kw["peak_flops"] = {"bf16": kw["peak_flops"]}
    swap = rng.choice([None, None, None, "model", "gpu", "cpu", "job"])
    return {"fn": fn, "kw": kw, "swap": swap, "mode": rng.choice(["train", "infer"])}


def _api_objects():
    if "api" not in _TEMPLATE:
        import gpuplan as g
        from gpuplan.hardware.cpu import detect_cpu

        _TEMPLATE["api"] = (g.load_model("gpt2"), g.get_gpu("h100"), detect_cpu())
    return _TEMPLATE["api"]


def _call_api(fn: str, kw: dict, model, gpu, cpu, job):
    import gpuplan as g

    if fn == "Architecture":
        return dataclasses.replace(model.architecture, **kw).kv_elements_per_token
    if fn == "GPU":
        return dataclasses.replace(gpu, **kw).memory_bytes
    if fn == "from_dict":
        j = g.Job.from_dict({k: v for k, v in kw.items()})
        return g.plan(g.Job.from_dict(j.to_dict()), ["h100"], speed=False)
    if fn == "plan":
        return g.plan(job, [gpu], **kw)
    if fn == "capacity":
        kw = {"rate": 1, "requests": 5, **kw}
        return g.capacity(model, gpu, input=100, output=4, **kw).ttft_s.at(50)
    if fn == "estimate_cpu_speed":
        kw.pop("cpu", None)
        return g.estimate_cpu_speed(model, cpu, job, **kw)
    if fn in ("train_memory", "infer_memory"):
        return getattr(g, fn)(model, job, **kw)
    if fn == "estimate_speed":
        return g.estimate_speed(model, gpu, job, cpu=cpu if kw.pop("cpu", 0) else None, **kw)
    return getattr(g, fn)(model, job, gpu, **kw)


def _as_outcome(r) -> dict:
    if hasattr(r, "to_dict"):
        return {"rc": 0, "obj": r.to_dict(), "json": True}
    if isinstance(r, (int, float)):
        return {"rc": 0, "obj": {"value": r}, "json": True}
    return {"rc": 0, "out": repr(r)[:2000], "json": False}


_TAKES = {"model": ("suggest", "infer_memory", "train_memory", "estimate_speed", "max_batch",
                    "max_seq", "estimate_cpu_speed", "capacity"),
          "gpu": ("suggest", "estimate_speed", "max_batch", "max_seq", "plan", "capacity"),
          "cpu": ("estimate_speed", "estimate_cpu_speed"),
          "job": ("suggest", "infer_memory", "train_memory", "estimate_speed", "max_batch",
                  "max_seq", "estimate_cpu_speed", "plan")}


def run_api_args(call: dict) -> dict:
    import gpuplan as g

    model, gpu, cpu = _api_objects()
    job = g.Job(model="gpt2", mode=call["mode"])
    kw = dict(call["kw"])
    swap = call["swap"] if call["fn"] in _TAKES.get(call["swap"], ()) else None
    model = "gpt2" if swap == "model" else model
    gpu = "h100" if swap == "gpu" else gpu
    if swap == "cpu":
        cpu = "x"
        kw["cpu"] = 1
    if swap == "job":
        job = {"model": "gpt2"}
    return _as_outcome(_call_api(call["fn"], kw, model, gpu, cpu, job))


# ------------------------------------------------------------------------------------------------
# Issue 32's reproducers, one per target they belong to


def _retyped_first_key() -> bytes:
    g = gguf_file(tokens=4)
    data = bytearray(g.buf)
    pos = next(p for p, k, _ in g.fields if k == "type")
    data[pos:pos + 4] = struct.pack("<I", _ARRAY)
    return bytes(data)


def _overlapping_gguf() -> bytes:
    g = gguf_file(tokens=0)
    data = bytearray(g.buf)
    offs = [p for p, k, _ in g.fields if k == "offset"]
    data[offs[2]:offs[2] + 8] = struct.pack("<Q", 0)
    return bytes(data)


def _ten_million_experts(web: bool) -> dict:
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 1,
           "intermediate_size": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
           "num_hidden_layers": 1, "vocab_size": 1, "num_local_experts": 10_000_000,
           "num_experts_per_tok": 1, "max_position_embeddings": 1}
    return {"config": cfg, "job": {"mode": "train", "zero": 3}, "web": web}


def _wide_experts() -> dict:
    """The slowest input of the 10,000-input run (5.6 s alone): 10,000 experts of 1e6 x 64 in
    two layers, 60,000 freed-after-use parameters the ZeRO-3 replay named one by one, in each
    of the nine TP/PP ranks the layout search planned."""
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64,
           "intermediate_size": 1_000_000, "num_attention_heads": 4, "num_key_value_heads": 4,
           "num_hidden_layers": 2, "vocab_size": 128, "num_local_experts": 10_000,
           "num_experts_per_tok": 2, "max_position_embeddings": 256}
    return {"config": cfg, "job": {"mode": "train", "batch": 1}, "web": False}


def reproducers() -> dict[str, list]:
    """Issue 32's inputs, by target (and qa43's, of the recent features' targets)."""
    return {**ff.reproducers(),
        "cli": [["fit", "gpt2", "--mode", "train", "--loss-chunks", "100000"],
                ["fit", "gpt2", "--mode", "train", "--loss-chunks", str(2**31)],
                ["speed", "gpt2", "--gpu", "h100", "--mode", "infer", "--precision", "gguf"],
                ["cluster", "gpt2", "--gpu", "h100", "--gpus", "8", "--mode", "infer",
                 "--precision", "gguf"],
                ["bench", "--show", "9" * 31], ["bench", "--show", "9" * 4301],
                ["profile", "a" * 300 + ".py"], ["fit", "acme/m\n"]],
        "gguf": [_retyped_first_key(), _overlapping_gguf()],
        "config_plan": [_ten_million_experts(False), _ten_million_experts(True),
                        _wide_experts()],
        "hf_cache": [{"ref": b"\xff\xfe\x00bad", "config": "valid", "seed": 0, "id": "acme/m"},
                     {"ref": _HASH.encode(), "config": "valid", "seed": 0, "id": "acme/m\n"}],
        "api_args": [{"fn": "suggest", "kw": {"max_changes": 10**6}, "swap": None,
                      "mode": "train"},
                     {"fn": "infer_memory", "kw": {"tensor_parallel": -1}, "swap": None,
                      "mode": "infer"},
                     {"fn": "estimate_speed", "kw": {"input_bytes": 10**309}, "swap": None,
                      "mode": "train"},
                     {"fn": "estimate_speed", "kw": {"train_tokens": 1e9,
                                                     "price_per_gpu_hour": 1e308},
                      "swap": None, "mode": "train"},
                     *({"fn": "train_memory", "kw": {}, "swap": s, "mode": "train"}
                       for s in ("model", "job")),
                     {"fn": "suggest", "kw": {}, "swap": "gpu", "mode": "train"},
                     {"fn": "estimate_speed", "kw": {}, "swap": "cpu", "mode": "train"},
                     {"fn": "Architecture", "kw": {"num_kv_heads": -12}, "swap": None,
                      "mode": "train"},
                     {"fn": "GPU", "kw": {"memory_bytes": math.nan}, "swap": None,
                      "mode": "train"},
                     {"fn": "GPU", "kw": {"memory_bandwidth": 0.0}, "swap": None,
                      "mode": "train"},
                     {"fn": "from_dict", "kw": {}, "swap": None, "mode": "train"}],
    }



#: Each structure-aware target: (generator, runner).
TARGETS = {
    "gguf": (gguf_bytes, read_gguf),
    "safetensors_struct": (safetensors_struct_bytes, ft.read_safetensors),
    "config_plan": (config_plan_input, run_config_plan),
    "hf_cache": (hf_cache_input, run_hf_cache),
    "bench_store": (bench_store_input, run_bench_store),
    "api_args": (api_args_input, run_api_args),
    **ff.TARGETS,  # qa43: the recent features (fuzz_features.py)
}
