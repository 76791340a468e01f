"""The golden set: command lines whose JSON output must not move by accident.

Recorded on main before the layout refactor (issue 10) by ``python tests/golden/record.py``; the test
``test_golden.py`` runs each command again and compares. Fields added since the recording are
allowed (new keys in an object); every recorded value must come out equal, to the last digit.
"""

from __future__ import annotations

MODELS = [
    "llama-3.2-1b", "llama-2-7b", "llama-3.1-8b", "llama-2-13b", "llama-2-70b", "llama-3.1-70b",
    "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b",
    "qwen2.5-72b", "qwen1.5-moe-a2.7b", "gemma-2-9b", "phi-3-mini", "gpt2", "gpt2-medium", "gpt2-xl",
    "pythia-160m", "pythia-1.4b", "opt-125m", "opt-350m", "opt-13b", "falcon-7b", "bert-base-uncased",
    "bert-large-uncased", "vit-base-patch16-224",
]
DECODERS = [m for m in MODELS if not m.startswith(("bert", "vit"))]
RECIPES = ["mixed-bf16", "mixed-fp16", "amp-bf16", "amp-fp16", "bf16", "fp32"]
FORMATS = ["fp32", "bf16", "fp16", "fp8", "int8", "nf4", "nf4-dq", "gptq-4bit", "awq-4bit",
           "q8_0", "q4_0", "q4_k_m"]
OPTIMIZERS = ["sgd", "sgd-momentum", "adam", "adamw", "adafactor", "adamw-8bit", "lion", "adagrad",
              "rmsprop"]
GPUS = ["h100", "a100", "4090", "t4", "l4", "v100", "mi300x", "h200"]
#: The speed model needs bf16 tensor cores for the default recipe: no T4 or V100 there.
SPEED_GPUS = ["h100", "a100", "4090", "l4", "mi300x", "h200", "a10g"]


def fit_cases() -> list[list[str]]:
    out = [["fit", "--json"], ["fit", "--params", "7B", "--json"]]
    for m in MODELS:  # the defaults: both modes, the shortlist of GPUs, speed per GPU
        out.append(["fit", m, "--json"])
    for i, m in enumerate(MODELS):  # every recipe and optimizer over the catalog, one GPU each
        out.append(["fit", m, "--mode", "train", "--precision", RECIPES[i % len(RECIPES)],
                    "--optimizer", OPTIMIZERS[i % len(OPTIMIZERS)], "--gpu", GPUS[i % len(GPUS)],
                    "--batch", str(1 + i % 4), "--json"])
    for i, m in enumerate(MODELS):  # every weight format in inference
        out.append(["fit", m, "--mode", "infer", "--precision", FORMATS[i % len(FORMATS)],
                    "--gpu", GPUS[(i + 3) % len(GPUS)], "--batch", str(1 + i % 8), "--json"])
    options = [
        ["--checkpointing", "full"], ["--checkpointing", "selective"], ["--attention", "eager"],
        ["--gpus", "8", "--zero", "3"], ["--gpus", "4", "--zero", "2"], ["--gpus", "2", "--zero", "1"],
        ["--gpus", "8", "--zero", "3", "--offload-optimizer"], ["--fused-optimizer"],
        ["--optimizer-states", "bf16", "--precision", "bf16"], ["--use-cache"],
        ["--lora-rank", "16"], ["--lora-rank", "16", "--lora-base", "nf4"],
        ["--lora-rank", "8", "--lora-targets", "all-linear"], ["--grad-accum", "8"],
        ["--kv-dtype", "fp8", "--context", "1024"], ["--prefill-logits", "all"],
        ["--overhead", "low"], ["--overhead", "high"], ["--cuda-context", "0.5GB"],
        ["--fragmentation", "0.1"], ["--suggest"], ["--max-batch"], ["--max-seq"], ["--no-speed"],
        ["--units", "GiB"], ["--seq", "4096", "--batch", "2"],
    ]
    for i, opt in enumerate(options):  # each option on three decoders
        for j in range(3):
            m = DECODERS[(3 * i + j) % len(DECODERS)]
            out.append(["fit", m, *opt, "--gpu", GPUS[(i + j) % len(GPUS)], "--json"])
    for m in ("bert-base-uncased", "vit-base-patch16-224"):
        out.append(["fit", m, "--checkpointing", "full", "--batch", "32", "--gpu", "t4", "--json"])
    out.append(["fit", "llama-3.1-8b", "--gpu", "4090", "--suggest", "--max-batch", "--max-seq",
                "--json"])
    out.append(["fit", "llama-3.1-70b", "--gpu", "h100", "--gpus", "8", "--suggest", "--json"])
    out.append(["fit", "mixtral-8x7b", "--gpu", "a100", "--gpus", "2", "--suggest", "--json"])
    return out


def speed_cases() -> list[list[str]]:
    out = []
    for i, m in enumerate(MODELS):
        g = SPEED_GPUS[i % len(SPEED_GPUS)]
        out.append(["speed", m, "--gpu", g, "--json"])
        out.append(["speed", m, "--gpu", g, "--mode", "infer", "--json"])
    options = [
        ["--tf32", "--precision", "fp32"], ["--gpus", "8"], ["--gpus", "8", "--link", "pcie"],
        ["--gpus", "16", "--no-overlap"], ["--checkpointing", "full"],
        ["--checkpointing", "selective"], ["--attention", "eager"], ["--batch", "8", "--seq", "4096"],
        ["--tokens", "300B", "--price", "2.5"], ["--samples", "100000", "--epochs", "3"],
        ["--pageable"], ["--sweep"], ["--ops"], ["--optimizer", "sgd"],
        ["--mode", "infer", "--new-tokens", "512", "--batch", "16"],
        ["--mode", "infer", "--precision", "int8"],
    ]
    for i, opt in enumerate(options):
        for j in range(2):
            m = DECODERS[(2 * i + j + 5) % len(DECODERS)]
            out.append(["speed", m, "--gpu", SPEED_GPUS[(i + 2 * j) % len(SPEED_GPUS)], *opt,
                        "--no-measured", "--json"])
    for g in ("t4", "v100"):  # the fp16 generations
        out.append(["speed", "llama-3.2-1b", "--gpu", g, "--precision", "mixed-fp16", "--json"])
        out.append(["speed", "gpt2", "--gpu", g, "--mode", "infer", "--precision", "fp16", "--json"])
    return out


def flops_cases() -> list[list[str]]:
    out = []
    for i, m in enumerate(MODELS):
        out.append(["flops", "model", m, "--json"])
        out.append(["flops", "model", m, "--mode", "forward", "--batch", str(1 + i % 4), "--json"])
    for opt in (["--recompute", "full"], ["--recompute", "selective"], ["--attention", "eager"],
                ["--seq", "512", "--batch", "8"]):
        for m in ("llama-3.1-8b", "gpt2", "mixtral-8x7b"):
            out.append(["flops", "model", m, *opt, "--json"])
    for shape in (("128x128", "128x128"), ("4096x4096", "4096x4096"), ("1x4096", "4096x4096"),
                  ("8192x8192", "8192x28672"), ("3x5", "5x7")):
        out.append(["flops", "matmul", *shape, "--json"])
        out.append(["flops", "matmul", *shape, "--gpu", "h100", "--json"])
    return out


def trace_cases() -> list[list[str]]:
    return [
        ["trace", "gpt2", "--batch", "2", "--seq", "128", "--json"],
        ["trace", "opt-125m", "--batch", "1", "--seq", "256", "--json"],
        ["trace", "bert-base-uncased", "--batch", "4", "--seq", "128", "--json"],
        ["trace", "qwen2.5-0.5b", "--batch", "1", "--seq", "128", "--json"],
        ["trace", "gpt2", "--mode", "infer", "--batch", "2", "--seq", "128", "--json"],
        ["trace", "pythia-160m", "--batch", "1", "--seq", "256", "--checkpointing", "full", "--json"],
    ]


def all_cases() -> dict[str, list[list[str]]]:
    return {"fit": fit_cases(), "speed": speed_cases(), "flops": flops_cases(),
            "trace": trace_cases()}
