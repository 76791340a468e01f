"""How close is gpuplan's speed estimate to measured training runs?

Compares ``estimate_speed`` (default achievable fractions, no bench data) with
1. MosaicML's measured MPT throughput on one 8 x H100-SXM node (llm-foundry,
   scripts/train/benchmarking/README.md, "H100 80GB BF16" table; model shapes from
   scripts/train/yamls/pretrain/mpt-*.yaml). Every row there is FSDP FULL_SHARD (ZeRO-3) over
   NVLink, amp_bf16, flash/triton attention.
2. LLaMA-65B (Touvron et al. 2023, "LLaMA", sec. 2.4): "around 380 tokens/sec/GPU on 2048 A100
   GPU with 80GB of RAM"; shapes from its Table 2 (8192 dim, 64 heads, 80 layers, SwiGLU 22016,
   32k vocabulary, 2048 context).
3. Llama 2 (Touvron et al. 2023, "Llama 2", Table 2): pretraining GPU-hours on A100-80GB for 2.0T
   tokens at 4096 context -- 184,320 (7B), 368,640 (13B), 1,720,320 (70B); the catalog's configs.
   gpuplan's figure is the single-GPU compute throughput (communication and memory not counted).

Run:  PYTHONPATH=src python benchmarks/speed_vs_published.py [--write]
(--write regenerates benchmarks/speed_vs_published.md)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.models._types import Architecture

# d_model, n_heads, n_layers (expansion ratio 4, vocab 50368) -- mpt-*.yaml
SHAPES = {"760m": (1536, 12, 24), "1b": (2048, 16, 24), "3b": (2560, 20, 32),
          "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48)}

# model, seq, MFU %, tokens/s (8 GPUs), micro-batch, grad accum, activation checkpointing
ROWS = [
    ("760m", 2048, 34.90, 505177, 24, 2, False),
    ("1b", 2048, 41.82, 363645, 14, 1, False),
    ("3b", 4096, 42.31, 167712, 5, 6, False),
    ("7b", 2048, 46.44, 85144, 6, 1, False),
    ("7b", 4096, 40.42, 68893, 16, 2, True),
    ("13b", 2048, 39.79, 38336, 2, 1, False),
    ("13b", 4096, 41.60, 37740, 10, 3, True),
    ("30b", 2048, 38.11, 16022, 3, 21, True),
]


def mpt(name: str, seq: int) -> Architecture:
    h, heads, l = SHAPES[name]
    return Architecture(
        name=f"mpt-{name}", family="mpt", kind="decoder", hidden_size=h, num_layers=l,
        num_heads=heads, num_kv_heads=heads, head_dim=h // heads, intermediate_size=4 * h,
        vocab_size=50368, max_position_embeddings=seq, tie_word_embeddings=True, mlp="gelu",
        activation="gelu", norm="layernorm", position="learned")


def main(write: bool) -> int:
    h100 = get_gpu("H100-SXM-80GB")
    lines = ["| model | seq | micro-batch x accum | ckpt | measured tok/s | estimated tok/s | "
             "ratio | measured MFU | estimated MFU |", "|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for name, seq, mfu, tps, mb, ga, ckpt in ROWS:
        job = Job(model=name, mode="train", batch=mb, seq=seq, gpus=8, grad_accum=ga, zero=3,
                  precision="amp-bf16", checkpointing="full" if ckpt else "none",
                  attention="sdpa")
        e = estimate_speed(mpt(name, seq), h100, job, link="nvlink", measured=None)
        r = e.tokens_per_s / tps
        ratios.append(r)
        lines.append(f"| {name} | {seq} | {mb} x {ga} | {'full' if ckpt else 'none'} | {tps:,} | "
                     f"{e.tokens_per_s:,.0f} | {r:.2f} | {mfu:.1f}% | {100 * e.mfu:.1f}% |")
    summary = (f"MPT: estimated / measured tokens/s: median {statistics.median(ratios):.2f}, "
               f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} runs")
    a100 = get_gpu("A100-SXM-80GB")
    llama65 = Architecture(
        name="llama-65b", family="llama", kind="decoder", hidden_size=8192, num_layers=80,
        num_heads=64, num_kv_heads=64, head_dim=128, intermediate_size=22016, vocab_size=32000,
        max_position_embeddings=2048, tie_word_embeddings=False, mlp="gated",
        activation="silu", norm="rmsnorm", position="rotary")
    e = estimate_speed(llama65, a100, Job(model="llama-65b", mode="train", batch=1, seq=2048),
                       measured=None)
    l1 = ["", "| LLaMA-65B on A100-80GB | measured tok/s/GPU | estimated tok/s/GPU | ratio |",
          "|---|---|---|---|",
          f"| 2048 GPUs, seq 2048 | 380 | {e.tokens_per_s:,.0f} | {e.tokens_per_s / 380:.2f} |"]
    l2 = ["", "| Llama 2 on A100-80GB, 2.0T tokens | reported GPU-hours | estimated GPU-hours "
          "(compute only) | reported / estimated |", "|---|---|---|---|"]
    for name, hours in (("llama-2-7b", 184_320), ("llama-2-13b", 368_640),
                        ("llama-2-70b", 1_720_320)):
        e = estimate_speed(load_model(name), a100, Job(model=name, mode="train", batch=1, seq=4096),
                           measured=None)
        est_h = 2.0e12 / e.tokens_per_s / 3600
        l2.append(f"| {name} | {hours:,} | {est_h:,.0f} | {hours / est_h:.2f} |")
    text = ("\n".join(lines) + "\n\n" + summary + "\n" + "\n".join(l1) + "\n"
            + "\n".join(l2) + "\n")
    print(text)
    if write:
        out = Path(__file__).with_suffix(".md")
        header = (
            "# Speed estimate vs measured training throughput\n\n"
            "Command: `PYTHONPATH=src python benchmarks/speed_vs_published.py --write`\n\n"
            "Measured: MosaicML llm-foundry, `scripts/train/benchmarking/README.md`, table "
            "\"H100 80GB BF16\", the single-node (8 x H100-SXM) rows; FSDP FULL_SHARD, amp_bf16. "
            "LLaMA-65B: Touvron et al. 2023, sec. 2.4 (380 tokens/s/GPU on 2048 A100-80GB). "
            "Llama 2: Touvron et al. 2023, Table 2 (pretraining GPU-hours, 2.0T tokens). "
            "Estimated: `gpuplan.compute.estimate_speed` with the default achievable fractions "
            "(matmul 80%, fused attention 50%, memory 85%, 5 us per launch), ZeRO-3 over NVLink, "
            "no bench data. The estimate is arithmetic at stated fractions: it leaves out "
            "framework overheads it cannot see (Python, FSDP's all-gather scheduling, data "
            "loading), so a ratio above 1 is the expected direction.\n\n")
        out.write_text(header + text, encoding="utf-8")
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main("--write" in sys.argv[1:]))
