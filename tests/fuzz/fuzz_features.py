"""The recent features' fuzz targets (qa43), beside issue 32's of ``fuzz_surfaces.py``: command
lines over the options no hostile pass had reached (``--master-weights``, ``--cuda-graph-scope``,
the FP8 recipes' ``--fp8-param-gather``/``--fp8-attention``/``--first-last-layers-bf16``, LoRA
under TP/PP, the nemotron family, a sequence or context past the positions), ``gpuplan
capacity``'s workload options (``--input-dist``, ``--arrivals gamma:CV``, ``--engine-version``,
``--disaggregated``, ``--max-rate``, ``--export``), a hostile ``--workload FILE.jsonl``, the
export writers aimed at a file that exists, a directory, a missing directory or an empty name,
and ``POST /api/capacity``/``/api/fit`` bodies with wrong types, non-finite and huge numbers and
unknown keys. Every outcome keeps :func:`fuzz_targets.check_outcome`'s promise, and an export
that fails leaves the file it was aimed at as it was (nothing partial, no temp file left)."""

from __future__ import annotations

import json
import math
import random
import tempfile
from pathlib import Path

import fuzz_targets as ft

#: Option values a hostile user types for the recent features (beside ft.HOSTILE_TEXT).
_TEXT = ["", " ", ",", ",,", "attn", "attn,attn", "full", "attn,full", "moe_router",
         "moe_preprocess", "mlp", "full_iteration", "auto", "fp32", "bf16", "remainder",
         "nope", "0", "-1", "1", "2", "4", "1e300", "nan", "inf", "x\ny", "\x1b[31m", "a" * 300]
_MODELS = ["gpt2", "qwen2.5-0.5b", "nemotron-8b", "llama-3.1-8b", "mixtral-8x7b"]
_PRECISIONS = ["mixed-bf16", "mixed-fp16", "bf16", "fp32", "fp8-delayed", "fp8-current",
               "fp8-blockwise", "mxfp8", "nvfp4", "amp-fp16"]
_FIT_OPTS = {
    "--master-weights": ["auto", "fp32", "bf16", "remainder"],
    "--cuda-graph-scope": ["attn", "moe_router,moe_preprocess", "full", "attn,moe_router"],
    "--first-last-layers-bf16": ["0", "1", "2", "16"],
    "--lora-rank": ["8", "64"], "--lora-targets": ["q_proj,v_proj", "all-linear"],
    "--tp": ["1", "2", "4", "8"], "--pp": ["1", "2", "4"], "--gpus": ["1", "2", "8", "16"],
    "--context": ["1024", "4096", "8192", "131073"], "--seq": ["128", "1024", "4097"],
    "--optimizer-states": ["auto", "fp32", "bf16"], "--micro-batches": ["1", "2", "8"],
}
_FIT_FLAGS = ["--fp8-param-gather", "--fp8-attention", "--sequence-parallel",
              "--offload-optimizer"]
_CAP_OPTS = {
    "--input-dist": ["uniform:10:900", "normal:300:50", "lognormal:300:0.5", "uniform:5:1",
                     "lognormal:300:9", "zipf:1", "uniform:1:1e300", "normal:nan:1"],
    "--output-dist": ["uniform:1:64", "normal:16:4", "lognormal:16:0.3"],
    "--arrivals": ["poisson", "constant", "gamma:0.5", "gamma:4", "gamma:0", "gamma:1e-300",
                   "gamma:nan", "gamma:", "gamma"],
    "--engine-version": ["0.21", "v0.10", "0.8", "0.6", "99", "0..5", "0.21rc1"],
    "--slo-ttft": ["0.5", "2", "1e-9"], "--slo-tpot": ["0.05", "0.2"],
    "--max-num-seqs": ["1", "64", "1000000"], "--max-model-len": ["512", "4096", "1000000000"],
    "--prefix-hit": ["0.5", "1", "-0.1"], "--price": ["2", "1e308"],
    "--max-gpus": ["2", "8", "1000000000"], "--engine": ["vllm", "sglang", "trt-llm", "megatron"],
    "--export": ["vllm", "sglang", "deepspeed", ""],
}
_CAP_FLAGS = ["--disaggregated", "--max-rate", "--sweep", "--json"]


def _value(rng: random.Random, good: list[str], benign: bool) -> str:
    r = rng.random()
    if benign or r < 0.55:
        return rng.choice(good)
    return rng.choice(_TEXT) if r < 0.85 else rng.choice(ft.HOSTILE_TEXT)


def features_argv(rng: random.Random) -> list[str]:
    """A fit, speed or capacity line over the recent features' options, some values hostile (a
    third of the lines only plausible ones, to reach the answers and check them)."""
    cmd = rng.choice(["fit", "fit", "speed", "capacity"])
    benign = rng.random() < 0.35
    argv = [cmd, rng.choice(_MODELS), "--gpu",
            rng.choice(["h100", "b200"] if benign else ["h100", "b200", "t4", "h100"])]
    if cmd == "capacity":
        argv += ["--requests", rng.choice(["8", "20", "40"]), "--input", "200", "--output", "8"]
        argv += rng.choice([["--rate", rng.choice(["1", "4"] if benign else
                                                  ["1", "4", "1e-300", "nan"])],
                            ["--concurrency", rng.choice(["1", "4", "0"])]]
                           + ([] if benign else [[]]))
        for opt in rng.sample(list(_CAP_OPTS), k=rng.randint(1, 3)):
            argv += [opt, _value(rng, _CAP_OPTS[opt][:3] if benign else _CAP_OPTS[opt], benign)]
        argv += rng.sample(_CAP_FLAGS, k=rng.randint(0, 2))
        return argv
    argv += ["--mode", rng.choice(["train", "train", "infer"]), "--precision",
             rng.choice(_PRECISIONS[:5] if benign else _PRECISIONS), "--engine",
             rng.choice(["megatron", "megatron", "auto", "torchtitan", "vllm"])]
    for opt in rng.sample(list(_FIT_OPTS), k=rng.randint(1, 2 if benign else 4)):
        argv += [opt, _value(rng, _FIT_OPTS[opt][:2] if benign else _FIT_OPTS[opt], benign)]
    argv += rng.sample(_FIT_FLAGS, k=rng.randint(0, 1 if benign else 2))
    if cmd == "fit":
        argv.append("--no-speed") if rng.random() < 0.3 else None
        argv.append("--json") if rng.random() < 0.5 else None
    return argv


def run_features(argv: list[str]) -> dict:
    return ft.run_cli(argv)


# ------------------------------------------------------------------------------------------------
# --workload FILE.jsonl

_FIELD_VALUES = [0, 1, -1, 2, 10, 500, 1.5, 2**31, 2**31 + 1, 10**300, 1e308, True, None, "7",
                 [], {}, "\x1b[2J"]


def workload_input(rng: random.Random) -> dict:
    """A workload file: a few valid lines, then hostile ones (a field mistyped or out of range, an
    unknown key, a line that is not JSON or not an object, bytes that are not UTF-8, deep
    nesting, a blank line), or nothing at all."""
    lines = [json.dumps({"arrival_s": 0.1 * i, "input_tokens": rng.choice([50, 200]),
                         "output_tokens": rng.choice([4, 8])}).encode()
             for i in range(rng.randint(0, 6))]
    for _ in range(rng.randint(0, 3)):
        row: dict = {"arrival_s": 0.5, "input_tokens": 100, "output_tokens": 4}
        kind = rng.choice(["field", "field", "unknown", "prefix", "text", "array", "bytes",
                           "deep", "blank", "nan"])
        if kind == "field":
            row[rng.choice(list(row))] = rng.choice(_FIELD_VALUES)
        elif kind == "unknown":
            row[rng.choice(["bogus", "arrival", "\x1b"])] = 1
        elif kind == "prefix":
            row.update(prefix_id=rng.choice(["a", 1, [1], None]),
                       prefix_tokens=rng.choice(_FIELD_VALUES))
        line = json.dumps(row).encode()
        if kind == "text":
            line = line[:rng.randrange(1, len(line))]
        elif kind == "array":
            line = b"[1, 2, 3]"
        elif kind == "bytes":
            line = line.replace(b"input", b"in\xffput", 1)
        elif kind == "deep":
            line = b"[" * 100_000 + b"]" * 100_000
        elif kind == "blank":
            line = b"   "
        elif kind == "nan":
            line = line.replace(b"0.5", rng.choice([b"NaN", b"Infinity", b"-1e400"]), 1)
        lines.insert(rng.randint(0, len(lines)), line)
    return {"data": b"\n".join(lines) + (b"\n" if rng.random() < 0.7 else b""),
            "argv": ["capacity", rng.choice(["qwen2.5-0.5b", "gpt2"]), "--gpu", "h100",
                     *rng.choice([[], ["--json"], ["--tp", "1"], ["--rate", "1"]])]}


def run_workload(call: dict) -> dict:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.jsonl"
        p.write_bytes(call["data"])
        return ft.run_cli([*call["argv"], "--workload", str(p)])


# ------------------------------------------------------------------------------------------------
# The export writers: nothing partial

_SENTINEL = b"the file as it was before the export\n"


def export_input(rng: random.Random) -> dict:
    """A fit or cluster export into a file that exists, a directory, a missing directory, an empty
    or blank name, or a name in a file's place; sometimes with a bad option checked later."""
    where = rng.choice(["new", "exists", "exists", "dir", "dir/", "missing", "empty", "blank",
                        "under_file", "long"])
    engine = rng.choice(["deepspeed", "accelerate", "fsdp", "torchtitan", "megatron", "vllm",
                         "sglang", "nope", ""])
    cmd = rng.choice(["fit", "fit", "cluster"])
    argv = ([cmd, "llama-3.1-8b", "--gpus", "8"] + (["--gpu", "h100", "--global-batch", "64"]
                                                    if cmd == "cluster" else []))
    argv += rng.choice([[], ["--zero", "3"], ["--mode", "infer"], ["--tp", "2"]])
    late = rng.choice([[], [], ["--gpu", "bogusgpu"], ["--fragmentation", "2"], ["--json"]])
    if cmd == "cluster" and "--fragmentation" in late:
        late = []
    return {"argv": argv + ["--export", engine] + late, "where": where}


def run_export(call: dict) -> dict:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "adir").mkdir()
        (root / "afile").write_bytes(_SENTINEL)
        (root / "exists.json").write_bytes(_SENTINEL)
        path = {"new": root / "out.json", "exists": root / "exists.json", "dir": root / "adir",
                "dir/": f"{root / 'adir'}/", "missing": root / "nodir" / "x.json", "empty": "",
                "blank": " ", "under_file": root / "afile" / "x.json",
                "long": root / ("x" * 250)}[call["where"]]
        o = ft.run_cli([*call["argv"], "--export-file", str(path)])
        left = sorted(p.name for p in root.iterdir())
        if o["rc"] != 0:
            changed = [n for n in ("exists.json", "afile")
                       if (root / n).read_bytes() != _SENTINEL]
            if changed or left != ["adir", "afile", "exists.json"] or any((root / "adir").iterdir()):
                o["problem"] = f"a failed export left {left} (changed: {changed})"
        elif left != sorted({"adir", "afile", "exists.json", Path(path).name}):
            o["problem"] = f"an export left {left}"
        return o


# ------------------------------------------------------------------------------------------------
# POST /api/capacity and /api/fit bodies

_BODY_VALUES = [None, True, False, 0, 1, -1, 2, 1.5, math.nan, math.inf, -math.inf, 10**300,
                2**63, 1e308, "", "x", "0.21", "\x1b[2J", [], [1], {}, {"a": 1}, "a" * 5000]
_CAP_KEYS = ["tp", "pp", "gpus", "rate", "concurrency", "requests", "seed", "replicas",
             "max_gpus", "price", "prefix_hit", "max_rate", "disaggregated", "sweep",
             "max_num_seqs", "max_num_batched_tokens", "max_model_len", "slo_ttft", "slo_tpot",
             "slo_percentile", "engine_version", "input", "output", "input_dist", "output_dist",
             "arrivals", "engine", "master_weights", "fp8_attention", "bogus"]
_FIT_KEYS = ["master_weights", "cuda_graph_scope", "fp8_param_gather", "fp8_attention",
             "first_last_layers_bf16", "precision", "engine", "tp", "pp", "gpus", "lora_rank",
             "lora_targets", "context", "seq", "batch", "overhead", "suggest", "max_batch",
             "params", "bogus"]


def web_input(rng: random.Random) -> dict:
    """A capacity or fit body: a valid one with one to three keys made hostile."""
    if rng.random() < 0.5:
        body: dict = {"model": rng.choice(["qwen2.5-0.5b", "nemotron-8b"]), "gpu": "h100",
                      "rate": 2, "requests": 10, "input": 100, "output": 4}
        keys, ep = _CAP_KEYS, "capacity"
    else:
        body = {"model": rng.choice(["qwen2.5-0.5b", "nemotron-8b", "llama-3.1-8b"]),
                "gpu": ["h100"], "speed": rng.random() < 0.3, "engine": "megatron",
                "precision": "fp8-delayed"}
        keys, ep = _FIT_KEYS, "fit"
    if rng.random() < 0.3:  # plausible values only, to reach the answers and check them
        for k, v in rng.choice(_PLAUSIBLE[ep]).items():
            body[k] = v
        return {"endpoint": ep, "body": body}
    for k in rng.sample(keys, k=rng.randint(1, 3)):
        body[k] = rng.choice(_BODY_VALUES)
    return {"endpoint": ep, "body": body}


_PLAUSIBLE = {
    "capacity": [{"tp": 1}, {"concurrency": 2, "rate": None},
                 {"input_dist": "uniform:10:200", "input": None},
                 {"arrivals": "gamma:2"}, {"engine_version": "0.10"}, {"engine": "sglang"},
                 {"slo_ttft": 1.0, "max_rate": True}, {"prefix_hit": 0.5}, {"price": 2.5}],
    "fit": [{"master_weights": "bf16", "optimizer_states": "bf16"}, {"fp8_param_gather": True},
            {"cuda_graph_scope": ["attn"]}, {"first_last_layers_bf16": 1},
            {"precision": "mixed-bf16", "master_weights": "remainder"},
            {"lora_rank": 8, "lora_targets": ["q_proj", "v_proj"], "tp": 2, "gpus": 2},
            {"fp8_attention": True}, {"mode": "infer", "engine": "vllm", "context": 4096}],
}


def run_web(call: dict) -> dict:
    from gpuplan.web import _service

    return {"rc": 0, "obj": getattr(_service, call["endpoint"])(call["body"]), "json": True}


def reproducers() -> dict[str, list]:
    """qa43's findings, each kept as a regression case of its target."""
    web = [{"endpoint": "capacity", "body": {"model": "qwen2.5-0.5b", "gpu": "h100", "rate": 1,
                                             "requests": 5, k: v}}
           for k, v in (("tp", "x"), ("tp", [1]), ("tp", math.nan), ("pp", math.inf),
                        ("engine_version", 0.1), ("engine_version", 21), ("input_dist", ""))]
    cap = ["capacity", "qwen2.5-0.5b", "--gpu", "h100", "--rate", "1", "--requests", "5"]
    return {
        "web": web,
        "features": [["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "megatron",
                      "--cuda-graph-scope", ""],
                     [*cap, "--engine-version", ""], [*cap, "--input-dist", ""],
                     [*cap, "--input-dist", "uniform:1:1e300"]],
        "export": [{"argv": ["fit", "llama-3.1-8b", "--gpus", "8", "--export", "deepspeed"],
                    "where": "empty"},
                   {"argv": ["cluster", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100",
                             "--global-batch", "64", "--export", "megatron"], "where": "blank"}],
    }


#: Each target: (generator, runner).
TARGETS = {
    "features": (features_argv, run_features),
    "workload": (workload_input, run_workload),
    "export": (export_input, run_export),
    "web": (web_input, run_web),
}
