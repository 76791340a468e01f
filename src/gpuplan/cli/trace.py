"""``gpuplan trace``: the exact memory timeline and FLOPs of a real PyTorch step, without a GPU."""

from __future__ import annotations

import argparse

from ._common import add_download_argument

HELP = "run a model's real training or inference step under fake tensors and record its memory"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help=HELP, description=HELP + ". Needs torch and transformers.")
    p.add_argument("model", help="catalog name (`gpuplan models`), config.json, model directory, "
                   "or path/to/file.py:factory (your own code: a function returning "
                   "(model, example_batch)), or a hub id (org/name) from the local Hugging "
                   "Face cache")
    add_download_argument(p)
    p.add_argument("--mode", help="train (default) or infer")
    p.add_argument("--batch", metavar="B", help="batch size (default 1)")
    p.add_argument("--seq", metavar="S", help="sequence length (default: the model's context, at most 2048)")
    p.add_argument("--precision", metavar="NAME",
                   help="train: mixed-bf16 (default), mixed-fp16, amp-bf16, amp-fp16, bf16, fp32; "
                        "infer: bf16 (default), fp16, fp32")
    p.add_argument("--optimizer", metavar="NAME",
                   help="adamw (default), adam, sgd, sgd-momentum, adafactor, adagrad, rmsprop, "
                        "lion, adamw-8bit")
    p.add_argument("--optimizer-impl", metavar="IMPL",
                   help="foreach (CUDA's default), fused, for-loop")
    p.add_argument("--checkpointing", metavar="LEVEL",
                   help="none (default), selective (attention core recomputed), full (every layer)")
    p.add_argument("--attention", metavar="IMPL", help="sdpa (default) or eager")
    p.add_argument("--device", metavar="DEV",
                   help="cpu (default: trace only) or cuda (also run it on the GPU and report "
                        "torch.cuda.max_memory_allocated/reserved beside the trace)")
    p.add_argument("--real", action="store_true",
                   help="with --device cpu: also run the step with real CPU tensors (small models) "
                        "and report the measured live bytes beside the trace")
    p.add_argument("--units", choices=("GB", "GiB"), default="GB",
                   help="GB = 10^9 bytes (default), GiB = 2^30")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="draw the memory timeline (needs matplotlib)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._io import check_writable
    from .._extras import require
    from ..errors import InputError
    from ..units import parse_positive_int

    # torch first (the one-line install command when it is missing), before any argument work.
    require("torch", "transformers", feature="gpuplan trace")

    if args.plot:
        check_writable(args.plot)
        if not args.plot.lower().endswith(".png"):
            raise InputError(f"--plot {args.plot!r}: the chart is a PNG; give a file name ending "
                             "in .png")
    if args.real and args.device not in (None, "cpu"):
        raise InputError("--real runs the step on this machine's CPU; use it with --device cpu "
                         "(--device cuda always runs the step for real on the GPU)")
    # Unset options keep trace_step's own defaults (defined once, there).
    kw: dict = {"real": args.real}
    if args.batch is not None:
        kw["batch"] = parse_positive_int(args.batch, what="--batch", maximum=1 << 20)
    if args.seq is not None:
        kw["seq"] = parse_positive_int(args.seq, what="--seq", maximum=1 << 24)
    for name in ("mode", "precision", "optimizer", "optimizer_impl", "checkpointing", "attention",
                 "device"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)

    from ..trace import trace_step

    model = args.model
    from ..models import is_hub_id, load_model

    if args.download or is_hub_id(model):  # org/name: the Hugging Face cache (or --download)
        model = load_model(model, download=args.download)
    result = trace_step(model, **kw)
    from ..report.trace import plot_timeline, render_trace, trace_json

    if args.plot:
        plot_timeline(result, args.plot, units=args.units)
    if args.json:
        print(trace_json(result))
    else:
        render_trace(result, units=args.units)
        if args.plot:
            print(f"timeline written to {args.plot}")
    return 0
