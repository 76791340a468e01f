"""``gpuplan speed MODEL --gpu G``: FLOPs, roofline, step time, throughput and MFU of a job."""

from __future__ import annotations

import argparse
import sys

from .._io import json_text
from ._job_options import add_job_options
from ._job_options import job_from_args as job_options_to_job
from ._common import add_model_on_gpu

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "speed", help="how fast a model trains or serves on a GPU, and why",
        description="Estimate one training or inference step of MODEL on GPU: FLOPs, the "
                    "roofline of each op class, step time, tokens/s, MFU; prefill vs decode; "
                    "input copies; data-parallel scaling; time and cost to train; and whether "
                    "the job needs a GPU at all.")
    add_model_on_gpu(p)
    add_job_options(p)
    p.add_argument("--new-tokens", default="128", help="inference: tokens generated per sequence")
    p.add_argument("--link", default=None,
                   help="gradient all-reduce link: nvlink, pcie, or GB/s per GPU (e.g. 50, "
                        "400Gb/s); default NVLink when the GPU has it")
    p.add_argument("--no-overlap", action="store_true",
                   help="all-reduce after backward instead of overlapped with it")
    p.add_argument("--pageable", action="store_true",
                   help="host batches in pageable memory (no pin_memory): slower, not overlapped")
    p.add_argument("--tokens", default=None, help="training tokens for time and cost (e.g. 300B)")
    p.add_argument("--samples", default=None, help="training samples per epoch (instead of "
                                                   "--tokens)")
    p.add_argument("--epochs", default="1", help="epochs over --tokens/--samples (default 1)")
    p.add_argument("--price", default=None, help="price per GPU-hour, for the cost")
    p.add_argument("--tf32", action="store_true", help="fp32 matmuls on TF32 tensor cores")
    p.add_argument("--optimizer-impl", default=None, metavar="IMPL",
                   help="how the optimizer step runs: foreach (torch's default on a GPU), fused "
                        "(default with --fused-optimizer), for-loop (a per-parameter Python loop)")
    p.add_argument("--grad-clip-impl", default=None, metavar="IMPL",
                   help="how a --max-grad-norm clip runs: foreach (torch >= 2.0, the default on "
                        "a GPU), per-tensor (torch 1.5-1.13), multi-tensor-sync (apex: one host "
                        "read), per-tensor-sync (torch <= 1.4: a host read per tensor)")
    p.add_argument("--vs-cpu", action="store_true",
                   help="also estimate the job on this machine's CPU and say if a GPU is needed")
    p.add_argument("--sweep", action="store_true",
                   help="batch sizes 1..1024: where throughput saturates")
    p.add_argument("--no-measured", action="store_true",
                   help="use the default achievable fractions even when `gpuplan bench` "
                        "measured this GPU")
    p.add_argument("--use-noisy-bench", action="store_true",
                   help="use the stored bench run even where its measurements are noisy "
                        "(spread >= 10%%; left out otherwise, and the output says so)")
    p.add_argument("--ops", action="store_true", help="list every op of the step")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw the roofline with the step's ops")
    p.set_defaults(func=run)


def _float(text: str | None, what: str, *, bound: str) -> float | None:
    """An optional number within the ``bound`` range of :mod:`gpuplan.bounds`."""
    from ..units import parse_number

    return None if text is None else parse_number(text, what=what, bound=bound)


def job_from_args(args: argparse.Namespace, model):
    """The Job these arguments describe (one mode: train or infer)."""
    return job_options_to_job(args, model, command="speed", default_mode="train",
                              modes=("train", "infer"))


def run(args: argparse.Namespace) -> int:
    from .._io import check_plot
    from ..compute import batch_sweep, estimate_speed
    from ..errors import InputError
    from ..hardware import resolve_gpu
    from ..hardware.cpu import detect_cpu
    from ..models import load_model
    from ..units import parse_count, parse_positive_int

    new_tokens = parse_positive_int(args.new_tokens, what="--new-tokens", maximum=10**7)
    tokens = None if args.tokens is None else parse_count(args.tokens, what="--tokens")
    samples = None if args.samples is None else parse_count(args.samples, what="--samples")
    epochs = _float(args.epochs, "--epochs", bound="epochs")
    price = _float(args.price, "--price", bound="price")
    if args.plot is not None:
        check_plot(args.plot)
    gpu, alias = resolve_gpu(args.gpu)
    model = load_model(args.model, download=args.download)
    job = job_from_args(args, model)
    kw = dict(new_tokens=new_tokens, link=args.link, overlap_comm=not args.no_overlap,
              pinned=not args.pageable, tf32=args.tf32, optimizer_impl=args.optimizer_impl,
              grad_clip_impl=args.grad_clip_impl)
    if args.no_measured and args.use_noisy_bench:
        raise InputError("--use-noisy-bench with --no-measured: drop one (--no-measured reads no "
                         "bench run at all)")
    if args.no_measured:
        kw["measured"] = None
    elif args.use_noisy_bench:
        kw["use_noisy_bench"] = True
    est = estimate_speed(model, gpu, job, train_tokens=tokens, train_samples=samples,
                         epochs=epochs, price_per_gpu_hour=price,
                         cpu=detect_cpu() if args.vs_cpu else None, **kw)
    sweep = batch_sweep(model, gpu, job, **kw) if args.sweep else None
    return _render(args, est, sweep, alias)


def _render(args: argparse.Namespace, est, sweep, alias: str | None) -> int:
    if args.plot:
        from ..report.speed import plot_roofline
        plot_roofline(est, args.plot)
    if args.json:
        d = est.to_dict()
        if alias:
            d["gpu_note"] = alias
        if sweep is not None:
            d["sweep"] = sweep.to_dict()
        if args.plot:
            d["plot"] = args.plot
        sys.stdout.write(json_text(d, indent=2))
        sys.stdout.write("\n")
        return 0
    from ..report.speed import render_speed, render_sweep
    if alias:
        print(f"note: {alias}", file=sys.stderr)
    render_speed(est, ops=args.ops)
    if sweep is not None:
        render_sweep(sweep)
    if args.plot:
        print(f"roofline written to {args.plot}")
    return 0
