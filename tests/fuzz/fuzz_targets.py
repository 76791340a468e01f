"""The fuzz targets and their one oracle, shared by the bounded CI run (``tests/fuzz/test_fuzz.py``,
hypothesis) and the large run (``benchmarks/fuzz.py``, a seeded random generator).

Each target takes one hostile input and returns what happened; :func:`check_outcome` is the
property every input must satisfy: no exception but :class:`~gpuplan.errors.InputError`; an error is
one line; JSON output is strict (no NaN/Infinity) with no negative byte count.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import struct
import tempfile
import sys
from pathlib import Path

# the measured-run helpers (_run, KEY) live with the store's reader tests in tests/unit
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from gpuplan.errors import InputError

#: Values a hostile user types: huge, negative, fractional, non-finite, empty, overlong, escapes.
HOSTILE_TEXT = [
    "0", "-1", "1", "2", "7", "1e9", "1000000000000", str(2**31), str(2**31 + 1), str(2**63),
    str(10**300), "9" * 4301, "1e308", "1e309", "-1e308", "nan", "inf", "-inf", "1.5", "0.0",
    "", " ", "a" * 300, "\x1b[31m", "x\ny", "\x00", "7B", "80GB", "1e-320", "0x10", "1_000",
    "+5", "٣", "1" * 40, "1" * 41, "1e10000",
]

COMMANDS = {
    "fit": ["--batch", "--seq", "--grad-accum", "--gpus", "--zero", "--lora-rank", "--context",
            "--params", "--cuda-context", "--fragmentation", "--precision", "--mode",
            "--kv-dtype", "--lora-targets"],
    "speed": ["--batch", "--seq", "--gpus", "--new-tokens", "--link", "--tokens", "--samples",
              "--epochs", "--price", "--precision"],
    "flops-matmul": ["--batch", "--tile", "--dtype"],
    "flops-model": ["--batch", "--seq"],
}
MODELS = ["gpt2", "llama-3.1-8b", "vit-base-patch16-224", "bert-base-uncased", "qwen2-0.5b"]
GPUS = ["h100", "t4", "a100", "rtx-4090", "custom:24GB,165TF,1000GB/s", "nope"]


def cli_argv(rng: random.Random) -> list[str]:
    """One command line: a command, a model, a GPU and one to three hostile option values."""
    cmd = rng.choice(list(COMMANDS))
    benign = rng.random() < 0.3  # a third of the lines are plausible, to reach the answers

    def text() -> str:
        if benign:
            return rng.choice(["1", "2", "4", "512", "1024", "2048"])
        return rng.choice(HOSTILE_TEXT) if rng.random() < 0.8 else str(rng.randint(-5, 10**6))

    if cmd == "flops-matmul":
        argv = ["flops", "matmul", f"{text()}x{text()}", f"{text()}x{text()}"]
    elif cmd == "flops-model":
        argv = ["flops", "model", rng.choice(MODELS)]
    else:
        argv = [cmd, rng.choice(MODELS + [text()])]
    if cmd != "flops-model" and (cmd != "fit" or rng.random() < 0.7):
        argv += ["--gpu", rng.choice(GPUS)]
    for opt in rng.sample(COMMANDS[cmd], k=rng.randint(1, min(3, len(COMMANDS[cmd])))):
        argv += [opt, text()]
    if rng.random() < 0.6:
        argv.append("--json")
    if cmd == "fit":
        argv.append("--no-speed") if rng.random() < 0.5 else None
    return argv


def run_cli(argv: list[str]) -> dict:
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue(), "json": "--json" in argv}


_JOB_VALUES = [None, True, False, 0, 1, -1, 2, 2**31, 2**31 + 1, 10**300, 1.5, math.nan,
               math.inf, "", "no", "train", "infer", "bf16", "fp16", "adamw", "sgd", "full",
               "eager", ["q_proj"], [1], ("v_proj",), {}, "x" * 5000, "\x1b[2J",
               "remainder", ("attn",), ["moe_router", "moe_preprocess"], "megatron"]
_JOB_FIELDS = ["mode", "precision", "infer_precision", "optimizer", "batch", "seq", "grad_accum",
               "gpus", "zero", "offload_optimizer", "lora_rank", "lora_targets", "lora_base",
               "checkpointing", "attention", "kv_dtype", "context", "fused_optimizer",
               "use_cache", "lora_dropout", "prefill_logits", "optimizer_states",
               # qa43: the recent features' fields
               "master_weights", "cuda_graph_scope", "fp8_param_gather", "fp8_attention",
               "first_last_layers_bf16", "engine", "tp", "pp"]


def api_call(rng: random.Random) -> dict:
    """Keyword arguments for Job (and plan's overrides), some fields hostile."""
    if rng.random() < 0.4:  # a plausible job, to reach the answers and check their numbers
        kw = {"batch": rng.randint(1, 64), "seq": rng.choice([None, 128, 512, 2048]),
              "grad_accum": rng.randint(1, 8), "checkpointing": rng.choice(["none", "full"]),
              "offload_optimizer": rng.random() < 0.5, "mode": rng.choice(["train", "infer"])}
        over = rng.choice([None, {"cuda_context": rng.randint(0, 2 * 10**9)},
                           {"fragmentation": rng.random() * 0.9}])
        kw["model"] = rng.choice(MODELS)
        return {"job": kw, "overrides": over, "web": rng.random() < 0.5}
    kw = {f: rng.choice(_JOB_VALUES) for f in rng.sample(_JOB_FIELDS, k=rng.randint(1, 4))}
    kw["model"] = rng.choice(MODELS + [7, None, "x" * 300])
    over = rng.choice([None, {"cuda_context": rng.choice(_JOB_VALUES)},
                       {"fragmentation": rng.choice(_JOB_VALUES)}, [1], {"nope": 1}])
    return {"job": kw, "overrides": over, "web": rng.random() < 0.5}


def run_api(call: dict) -> dict:
    """``Job(**kw)`` + ``plan`` (or the web API's ``fit`` with the same fields as JSON)."""
    from gpuplan import Job, plan

    kw = dict(call["job"])
    if call["web"]:
        from gpuplan.web import _service

        body = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()
                if v is not None or k != "model"}
        body.update(gpu=["h100"], speed=False)
        if call["overrides"] is not None and not isinstance(call["overrides"], dict):
            body["overhead"] = call["overrides"]  # a hostile overhead level
        return {"rc": 0, "obj": _service.fit(body), "json": True}
    if kw.get("model") is None:
        kw.pop("model")
        kw["model"] = "gpt2"
    job = Job(**kw)
    p = plan(job, ["h100"], overhead_overrides=call["overrides"], speed=False)
    return {"rc": 0, "obj": p.to_dict(), "json": True}


BASE_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 128}
_CFG_VALUES = [0, -1, 1, 3, 2**31, 10**300, 10**4, 10**4 + 1, 1.5, 1e308, None, True, "x", [],
               {}, [[[[1]]]], "\x1b[31m"]


def config_bytes(rng: random.Random) -> bytes:
    """A config.json: the base with hostile values, or mutated bytes of it."""
    cfg = dict(BASE_CONFIG)
    for k in rng.sample(list(cfg), k=rng.randint(1, 3)):
        cfg[k] = rng.choice(_CFG_VALUES)
    if rng.random() < 0.2:
        v: object = 1
        for _ in range(rng.choice([10, 63, 64, 65, 200, 900])):
            v = [v]
        cfg["extra"] = v
    data = bytearray(json.dumps(cfg).encode())
    if rng.random() < 0.4:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
    return bytes(data)


def read_config(data: bytes) -> dict:
    from gpuplan.models._load import model_from_config_bytes

    m = model_from_config_bytes(data)
    from gpuplan.report.models import model_json

    return {"rc": 0, "obj": model_json(m), "json": True}


def safetensors_bytes(rng: random.Random) -> bytes:
    """A safetensors file: a header of a few tensors with hostile fields, then data."""
    if rng.random() < 0.35:  # a well-formed file, to reach the model and its numbers
        header, at = {}, 0
        for i in range(rng.randint(1, 4)):
            shape = rng.choice([[1], [2, 3], [4, 4], [8]])
            n = 4 * math.prod(shape)
            header[f"model.layers.{i}.mlp.weight"] = {"dtype": "F32", "shape": shape,
                                                      "data_offsets": [at, at + n]}
            at += n
        raw = json.dumps(header).encode()
        return struct.pack("<Q", len(raw)) + raw + b"\0" * at
    header: dict = {}
    at = 0
    for i in range(rng.choice([0, 1, 2, 5])):
        shape = rng.choice([[], [0], [1], [2, 3], [2**62, 2**62], [-1], [1.5], ["a"], [3] * 40])
        dtype = rng.choice(["F32", "BF16", "I8", "F4", "X", 7])
        n = 4 * (math.prod(s for s in shape if isinstance(s, int)) if shape else 1)
        n = n if 0 <= n < 64 else 4
        offs = rng.choice([[at, at + n], [0, 2**63], [5, 1], "x", [at, at + n, 1]])
        header[rng.choice([f"model.layers.{i}.w", "\x1b[2J", "a\nb", "x" * 300, f"t{i}"])] = \
            {"dtype": dtype, "shape": shape, "data_offsets": offs}
        at += n
    if rng.random() < 0.3:
        header["__metadata__"] = rng.choice([{"format": "pt"}, {"a": 1}, [], "x"])
    raw = json.dumps(header).encode()
    if rng.random() < 0.3:
        raw = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256) if raw else 0
        raw = bytes(raw)
    length = len(raw) if rng.random() < 0.85 else rng.choice([0, 7, 2**63, len(raw) + 1])
    return struct.pack("<Q", length) + raw + b"\0" * at


def read_safetensors(data: bytes) -> dict:
    from gpuplan.models import load_model
    from gpuplan.report.models import model_json

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "model.safetensors"
        p.write_bytes(data)
        m = load_model(str(p))
        return {"rc": 0, "obj": model_json(m), "json": True}


def outcome(fn, arg) -> dict:
    """``fn(arg)``, an InputError recorded as exit 2 with its one-line message."""
    try:
        return fn(arg)
    except InputError as e:
        return {"rc": 2, "err": f"gpuplan: error: {e}\n", "json": False}


def _negative_bytes(obj: object, path: str = "$") -> str | None:
    stack = [(obj, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(x, (int, float)) and not isinstance(x, bool) and \
                        str(k).endswith("_bytes") and x < 0 and "headroom" not in str(k):
                    return f"{p}.{k} = {x}"
                stack.append((x, f"{p}.{k}"))
        elif isinstance(v, list):
            stack.extend((x, f"{p}[{i}]") for i, x in enumerate(v))
    return None


def check_outcome(o: dict) -> str | None:
    """Why the outcome breaks the promise, or None when it keeps it."""
    if o.get("problem"):  # what the target itself saw (a file left partial, a store changed)
        return o["problem"]
    if o["rc"] not in (0, 2):
        return f"exit {o['rc']}"
    if o["rc"] == 2:
        lines = o["err"].strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("gpuplan: error: "):
            return f"error is not one line: {o['err'][:300]!r}"
        if "\x1b" in o["err"]:
            return "raw escape in the error"
        return None
    if o.get("json"):
        if "obj" in o:
            from gpuplan._io import json_text

            text = json_text(o["obj"])
        else:
            text = o["out"]
        try:
            obj = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as e:
            return f"invalid JSON ({e})"
        neg = _negative_bytes(obj)
        if neg:
            return f"negative bytes {neg}"
    elif "\x1b" in o.get("out", ""):
        return "raw escape in text output"
    return None


def _writer(db: Path, w: int) -> None:
    """The child: save runs in a loop, writing each committed id to the pipe ``w``."""
    import os

    from gpuplan.measure import save_run
    from test_compute_measured import _run

    try:
        i = 0
        while True:
            rid = save_run(_run(created=f"2026-01-01T00:00:{i % 60:02d}+00:00"), db)
            os.write(w, f"{rid}\n".encode())
            i += 1
    finally:
        os._exit(0)  # never return into the parent's code


def kill_writers(n: int, seed: int, db: Path | None = None) -> dict:
    """SIGKILL a process that saves bench runs in a loop, at a random moment, ``n`` times; after
    each kill every run it reported committed must be there, read through the read-only paths
    (the speed model's reader, then the store's), with no writer opening the database first.
    The writer is a fork of this process (no start-up cost), so every kill lands in the writes."""
    import os
    import signal
    import sqlite3
    import time

    from gpuplan.compute.measured import latest_measured
    from gpuplan.measure import list_runs
    from test_compute_measured import KEY

    rng = random.Random(seed)
    db = db or Path(tempfile.mkdtemp()) / "bench.sqlite"
    committed: set[int] = set()
    lost = read_failures = journals = 0
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _writer(db, w)
        os.close(w)
        with os.fdopen(r, "rb", buffering=0) as pipe:
            time.sleep(rng.uniform(0.0, 0.25))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            committed.update(int(x) for x in pipe.read().split())
        journals += Path(f"{db}-journal").exists()
        try:
            latest_measured(db, machine=KEY)
            have = {r.run_id for r in list_runs(db)}
        except Exception:  # noqa: BLE001 -- a failed read is what is counted
            read_failures += 1
            continue
        lost += len(committed - have)
    conn = sqlite3.connect(db)
    check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()
    return {"target": "kill", "kills": n, "seed": seed, "committed_runs": len(committed),
            "lost": lost, "read_failures": read_failures,
            "kills_leaving_a_journal": journals, "integrity_check": check}
