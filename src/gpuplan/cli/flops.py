"""``gpuplan flops matmul MxK KxN``: the exact arithmetic of one matrix product, and how much of a
GPU it can occupy."""

from __future__ import annotations

import argparse
import re
import sys

from .._io import json_text
from ._job_options import add_job_options
from ._job_options import job_from_args as job_options_to_job
from ._common import add_download_argument

__all__ = ["register", "run", "parse_shape"]

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX\u00d7*]\s*(\d+)\s*$")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "flops", help="exact multiplies and additions of a matmul, and the work it gives a GPU",
        description="FLOP counting worked examples.")
    sub = p.add_subparsers(dest="what", metavar="WHAT", parser_class=type(p))
    m = sub.add_parser(
        "matmul", help="an (M x K) @ (K x N) product",
        description="Exact multiplies (M*K*N) and additions (M*(K-1)*N) of a matrix product "
                    "beside the 2*M*K*N FLOP convention; with --gpu, its output elements against "
                    "the GPU's resident threads and SM tiles, and its estimated time on the GPU "
                    "(with the copies in and out) and on this machine's CPU.")
    m.add_argument("a", metavar="MxK", help="left matrix shape, e.g. 1x3")
    m.add_argument("b", metavar="KxN", help="right matrix shape, e.g. 3x2")
    m.add_argument("--batch", default="1", help="independent products (default 1)")
    m.add_argument("--bias", action="store_true", help="a bias is added to every output")
    m.add_argument("--gpu", default=None,
                   help="GPU SKU or alias, or a card by its numbers: custom:24GB,bw=1000GB/s,bf16=165TF")
    m.add_argument("--dtype", default="fp32",
                   help="GPU matmul dtype (default fp32, as torch.randn makes in the source "
                        "document's experiment; bf16/fp16 for tensor cores)")
    m.add_argument("--tile", default="128x128",
                   help="thread-block output tile for wave quantization (default 128x128)")
    m.add_argument("--use-noisy-bench", action="store_true",
                   help="with --gpu: use the stored bench run even where its measurements are "
                        "noisy (spread >= 10%%; left out otherwise, and the output says so)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=run)
    mo = sub.add_parser(
        "model", help="per-layer and per-model FLOPs of a training step or a forward pass",
        description="Counted (matmul) FLOPs of MODEL for BATCH sequences of SEQ tokens: each "
                    "layer's ops, the embedding and head, forward, backward (2x) and recompute; "
                    "the attention s^2 term over the full square (Megatron/PaLM convention).")
    mo.add_argument("model", help="catalog name, hub id (org/name), config.json, model directory "
                    "or .gguf file")
    add_download_argument(mo)
    add_job_options(mo)
    mo.add_argument("--json", action="store_true")
    mo.set_defaults(func=run_model)
    p.set_defaults(func=_no_what)


def _no_what(args: argparse.Namespace) -> int:
    from ..errors import InputError
    raise InputError("say what to count: `gpuplan flops matmul MxK KxN`")


def parse_shape(text: str, what: str) -> tuple[int, int]:
    from ..errors import InputError, shown
    from ..units import parse_positive_int

    m = _SHAPE.match(text) if len(text) <= 2 * 40 + 1 else None
    if not m:
        raise InputError(f"{what} {shown(text)}: expected ROWSxCOLS with whole numbers >= 1, "
                         "e.g. 1x3")
    if any(g.strip("0") == "" for g in m.groups()):
        raise InputError(f"{what} {shown(text)}: sizes must be >= 1")
    r, c = (parse_positive_int(g, what=f"{what} {shown(text)}: size") for g in m.groups())
    return r, c


def run(args: argparse.Namespace) -> int:
    from ..compute import compare_matmul, count_matmul
    from ..errors import InputError
    from ..units import parse_positive_int

    m, k = parse_shape(args.a, "MxK")
    k2, n = parse_shape(args.b, "KxN")
    if k != k2:
        raise InputError(f"inner sizes differ: {args.a} @ {args.b} (K={k} vs {k2}); the left "
                         "matrix's columns must equal the right matrix's rows")
    tile = parse_shape(args.tile, "--tile")
    batch = parse_positive_int(args.batch, what="--batch")
    mm = count_matmul(m, k, n, batch=batch, bias=args.bias)
    out: dict = mm.to_dict()
    cmp = alias = None
    if args.gpu:
        from ..hardware import resolve_gpu
        from ..hardware.cpu import detect_cpu
        gpu, alias = resolve_gpu(args.gpu)
        cmp = compare_matmul(mm, gpu, dtype=args.dtype, tile=tile, cpu=detect_cpu(),
                             use_noisy_bench=args.use_noisy_bench)
        out.update({"gpu": gpu.name, **cmp.small.to_dict(),
                    "times": [t.to_dict() for t in cmp.times], "verdict": cmp.verdict,
                    "measured_runs": [r.to_dict() for r in cmp.measured_runs]})
        if alias:
            out["gpu_note"] = alias
    if args.json:
        sys.stdout.write(json_text(out, indent=2))
        sys.stdout.write("\n")
        return 0
    from ..report.speed import render_matmul
    if alias:
        print(f"note: {alias}", file=sys.stderr)
    render_matmul(mm, small=cmp and cmp.small, times=list(cmp.times) if cmp else None,
                  verdict=cmp and cmp.verdict,
                  measured=[r.line if r.used else f"note: {r.line}" for r in cmp.measured_runs]
                  if cmp else None)
    return 0


#: What ``flops model`` counts from a job: the shape of the step and how it runs.
_FLOPS_FIELDS = frozenset({"batch", "seq", "checkpointing", "attention", "precision"})


def run_model(args: argparse.Namespace) -> int:
    from ..compute import flops_breakdown
    from ..errors import InputError
    from ..models import load_model

    if args.mode == "forward":  # the command's old word for a scoring forward pass
        print("gpuplan: note: --mode forward is now spelled --mode infer", file=sys.stderr)
        args.mode = "infer"
    model = load_model(args.model, download=args.download)
    arch = model.architecture
    if arch is None:
        raise InputError(f"{args.model!r}: per-layer FLOPs need the architecture (a config.json)")
    job = job_options_to_job(args, model, command="flops model", default_mode="train",
                             modes=("train", "infer"), supported=_FLOPS_FIELDS)
    # a forward pass here is a scoring pass: every position's logits
    job = job.with_(prefill_logits="all")
    fb = flops_breakdown(arch, job)
    if args.json:  # "mode" names the pass counted: train, or forward (the JSON's old word)
        sys.stdout.write(json_text({"model": model.name, "batch": job.batch, "seq": fb.tokens // job.batch,
                   "mode": "train" if job.mode == "train" else "forward", **fb.to_dict()},
                  indent=2))
        sys.stdout.write("\n")
        return 0
    from ..report.speed import render_flops_breakdown
    render_flops_breakdown(model.name, fb, job)
    return 0
