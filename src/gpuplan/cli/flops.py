"""``gpuplan flops matmul MxK KxN``: the exact arithmetic of one matrix product, and how much of a
GPU it can occupy."""

from __future__ import annotations

import argparse
import json
import re
import sys

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
    m.add_argument("--gpu", default=None, help="GPU SKU or alias")
    m.add_argument("--dtype", default="fp32",
                   help="GPU matmul dtype (default fp32, as torch.randn makes in the source "
                        "document's experiment; bf16/fp16 for tensor cores)")
    m.add_argument("--tile", default="128x128",
                   help="thread-block output tile for wave quantization (default 128x128)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=run)
    mo = sub.add_parser(
        "model", help="per-layer and per-model FLOPs of a training step or a forward pass",
        description="Counted (matmul) FLOPs of MODEL for BATCH sequences of SEQ tokens: each "
                    "layer's ops, the embedding and head, forward, backward (2x) and recompute; "
                    "the attention s^2 term over the full square (Megatron/PaLM convention).")
    mo.add_argument("model", help="catalog name, hub id (org/name), config.json, model directory or .gguf file")
    add_download_argument(mo)
    mo.add_argument("--batch", default="1")
    mo.add_argument("--seq", default=None, help="default min(2048, the model's maximum)")
    mo.add_argument("--mode", choices=("train", "forward"), default="train")
    mo.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    mo.add_argument("--attention", choices=("flash", "eager"), default="flash")
    mo.add_argument("--json", action="store_true")
    mo.set_defaults(func=run_model)
    p.set_defaults(func=_no_what)


def _no_what(args: argparse.Namespace) -> int:
    from ..errors import InputError
    raise InputError("say what to count: `gpuplan flops matmul MxK KxN`")


def parse_shape(text: str, what: str) -> tuple[int, int]:
    from ..errors import InputError

    m = _SHAPE.match(text)
    if not m:
        raise InputError(f"{what} {text!r}: expected ROWSxCOLS with whole numbers >= 1, e.g. 1x3")
    r, c = int(m.group(1)), int(m.group(2))
    if r < 1 or c < 1:
        raise InputError(f"{what} {text!r}: sizes must be >= 1")
    return r, c


def run(args: argparse.Namespace) -> int:
    from ..compute import (
        count_matmul, default_efficiency, device_from_cpu, device_from_gpu, small_work,
        time_matmul,
    )
    from ..errors import InputError, UnsupportedError
    from ..units import format_seconds, parse_positive_int

    m, k = parse_shape(args.a, "MxK")
    k2, n = parse_shape(args.b, "KxN")
    if k != k2:
        raise InputError(f"inner sizes differ: {args.a} @ {args.b} (K={k} vs {k2}); the left "
                         "matrix's columns must equal the right matrix's rows")
    tile = parse_shape(args.tile, "--tile")
    batch = parse_positive_int(args.batch, what="--batch")
    mm = count_matmul(m, k, n, batch=batch, bias=args.bias)
    out: dict = mm.to_dict()
    small = None
    times = []
    verdict = None
    alias = None
    if args.gpu:
        from ..hardware import resolve_gpu
        gpu, alias = resolve_gpu(args.gpu)
        dev = device_from_gpu(gpu)
        dtype = args.dtype
        if not dev.supports(dtype):
            have = ", ".join(d for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
                             if dev.supports(d))
            raise UnsupportedError(f"{gpu.name} has no {dtype} support (it has {have}); "
                                   "use another --dtype")
        small = small_work(m, n, gpu, batch=batch, tile=tile)
        out.update({"gpu": gpu.name, **{kk: v for kk, v in small.to_dict().items()}})
        from ..compute import apply_measured, load_measured
        measured = load_measured()
        dev, eff = apply_measured(dev, default_efficiency(dev), measured)
        g = time_matmul(mm, dev, eff, dtype)
        times.append(g)
        try:
            from ..hardware.cpu import detect_cpu
        except ModuleNotFoundError as e:
            if e.name != "gpuplan.hardware.cpu":
                raise
        else:
            cpu = detect_cpu()
            if cpu.peak_fp32_flops:
                cpu_dev = device_from_cpu(cpu)
                cpu_dev, ceff = apply_measured(cpu_dev, default_efficiency(cpu_dev), measured)
                times.append(time_matmul(mm, cpu_dev, ceff, "fp32"))
        if len(times) == 2:
            c, gg = times[1].total_s, times[0].total_s
            if c <= gg:
                verdict = (f"No GPU needed for this product: this CPU ({format_seconds(c)}) beats "
                           f"the {gpu.name} end to end ({format_seconds(gg)}, of which launches "
                           f"and copies {format_seconds(gg - times[0].compute_s)})")
            else:
                verdict = (f"The {gpu.name} is {c / gg:.1f}x faster than this CPU end to end "
                           f"({format_seconds(gg)} vs {format_seconds(c)})")
        out["times"] = [t.to_dict() for t in times]
        out["verdict"] = verdict
        if alias:
            out["gpu_note"] = alias
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from ..report.speed import render_matmul
    if alias:
        print(f"note: {alias}", file=sys.stderr)
    render_matmul(mm, small=small, times=times or None, verdict=verdict)
    return 0


def run_model(args: argparse.Namespace) -> int:
    from ..compute import default_seq, flops_breakdown
    from ..errors import InputError
    from ..models import load_model
    from ..units import format_flops, parse_positive_int

    batch = parse_positive_int(args.batch, what="--batch", maximum=10**7)
    model = load_model(args.model, download=args.download)
    arch = model.architecture
    if arch is None:
        raise InputError(f"{args.model!r}: per-layer FLOPs need the architecture (a config.json)")
    seq = default_seq(arch) if args.seq is None else parse_positive_int(args.seq, what="--seq",
                                                                        maximum=10**8)
    fb = flops_breakdown(arch, batch=batch, seq=seq, mode=args.mode, recompute=args.recompute,
                         attention=args.attention)
    if args.json:
        json.dump({"model": model.name, "batch": batch, "seq": seq, "mode": args.mode,
                   **fb.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.table import Table

    from ..report._console import console_for
    c = console_for(width=160)
    c.print(f"[bold]{model.name}[/bold]: {args.mode}, batch {batch} x seq {fb.tokens // batch} "
            f"= {fb.tokens:,} tokens (matmul FLOPs; attention over the full s x s square)")
    for layer in fb.layers:
        t = Table(title=f"one {layer.kind} layer (x{layer.count}), forward", title_justify="left")
        t.add_column("op")
        t.add_column("FLOPs", justify="right")
        for name, f in layer.by_op:
            t.add_row(name, format_flops(f))
        t.add_row("[bold]layer[/bold]", f"[bold]{format_flops(layer.forward_flops)}[/bold]")
        c.print(t)
    t = Table(title="model", show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("FLOPs", justify="right")
    t.add_row("embedding (forward)", format_flops(fb.embedding_forward_flops))
    t.add_row("head (forward)", format_flops(fb.head_forward_flops))
    t.add_row("forward", format_flops(fb.forward_flops))
    if args.mode == "train":
        t.add_row("backward (2x forward)", format_flops(fb.backward_flops))
        t.add_row(f"recompute ({args.recompute})", format_flops(fb.recompute_flops))
    t.add_row("model FLOPs (MFU)", format_flops(fb.model_flops))
    t.add_row("hardware FLOPs (HFU)", format_flops(fb.hardware_flops))
    t.add_row("model FLOPs per token", format_flops(fb.model_flops_per_token))
    t.add_row("weights multiplied per token (N)", f"{fb.matmul_params:,}")
    c.print(t)
    return 0
