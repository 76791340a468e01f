"""MoE agreement: the analytic peak (overhead excluded) against ``gpuplan trace`` (transformers'
own code under FakeTensorMode), training and inference, on small Mixtral and Qwen-MoE configs.

    PYTHONPATH=src python benchmarks/moe_agreement.py [--quick] > benchmarks/moe_agreement.md
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path

from gpuplan.job import Job
from gpuplan.memory import infer_memory, train_memory
from gpuplan.models import load_model
from gpuplan.trace import trace_step


def config(fam: str, h: int, experts: int, k: int) -> dict:
    base = dict(hidden_size=h, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=1000, max_position_embeddings=8192, num_experts_per_tok=k)
    if fam == "mixtral":
        return dict(base, model_type="mixtral", intermediate_size=2 * h, num_local_experts=experts)
    return dict(base, model_type="qwen2_moe", intermediate_size=2 * h, moe_intermediate_size=h // 2,
                shared_expert_intermediate_size=h, num_experts=experts)


def compare(cfg: dict, mode: str, batch: int, seq: int, prec: str, ck: str = "none",
            attention: str = "sdpa") -> tuple[int, int]:
    """(traced bytes, analytic bytes without the overhead term)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        p.write_text(json.dumps(cfg))
        r = trace_step(str(p), mode=mode, batch=batch, seq=seq, precision=prec,
                       checkpointing=ck, attention=attention)
        m = load_model(str(p))
    if mode == "train":
        t = train_memory(m, Job(model=m, mode="train", precision=prec, optimizer="adamw",
                                batch=batch, seq=seq, attention=attention, checkpointing=ck))
    else:
        t = infer_memory(m, Job(model=m, mode="infer", infer_precision=prec, batch=batch,
                                seq=seq, attention=attention))
    return r.total_bytes, t.total_bytes - t.overhead_bytes


def grid(quick: bool):
    fams = ("mixtral", "qwen2_moe")
    shapes = ((256, 8, 2), (256, 4, 1), (384, 16, 4)) if quick else \
        ((256, 8, 2), (256, 4, 1), (384, 16, 4), (256, 64, 2), (512, 32, 4))
    for fam, (h, e, k) in itertools.product(fams, shapes):
        cfg = config(fam, h, e, k)
        for prec, ck in (("mixed-bf16", "none"), ("amp-bf16", "none"), ("bf16", "none"),
                         ("mixed-bf16", "selective"), ("mixed-bf16", "full")):
            yield fam, h, e, k, cfg, "train", 4, 512, prec, ck, "sdpa"
        yield fam, h, e, k, cfg, "train", 2, 512, "mixed-bf16", "none", "eager"
        for b, s in ((4, 512), (1, 2048), (8, 128)):
            yield fam, h, e, k, cfg, "infer", b, s, "bf16", "none", "sdpa"


def main(argv: list[str]) -> int:
    print("| family | h | experts | top-k | mode | b x s | precision | ckpt | attn | trace B "
          "| analytic B | diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for fam, h, e, k, cfg, mode, b, s, prec, ck, att in grid("--quick" in argv):
        tr, an = compare(cfg, mode, b, s, prec, ck, att)
        print(f"| {fam} | {h} | {e} | {k} | {mode} | {b} x {s} | {prec} | {ck} | {att} | {tr:,} "
              f"| {an:,} | {(an - tr) / tr:+.2%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
