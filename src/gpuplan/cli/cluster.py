"""``gpuplan cluster MODEL --gpu G --gpus N``: search every parallel layout of a training job
(``--seq S --global-batch B``) or a serving job (``--mode infer --concurrency C --context T``)
and show the best few. Thin: parses, calls :func:`gpuplan.cluster.cluster_search`, renders."""

from __future__ import annotations

import argparse
import json
import sys

from .._io import check_plot
from ..cluster import SEARCH_JOB_FIELDS, cluster_search, search_options
from ..hardware import resolve_gpu
from ..models import load_model
from ..report.cluster import plot_cluster, render_cluster
from ._common import add_model_on_gpu
from ._job_options import add_job_options, job_from_args

__all__ = ["register", "run"]



def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cluster", help="the best parallel layout (TP/PP/CP/EP/DP, ZeRO) of a job on N GPUs",
        description="Search every valid layout of MODEL over --gpus N GPUs (tensor, pipeline, "
                    "context, expert and data parallel; ZeRO stage; micro-batch; checkpointing; "
                    "pipeline schedule), keep those that fit, rank by tokens/s (serving: per "
                    "GPU, within --max-token-ms), and show the best with their breakdowns.")
    add_model_on_gpu(p)
    add_job_options(p)
    p.add_argument("--global-batch", default=None, metavar="B",
                   help="training: sequences per step over all GPUs")
    p.add_argument("--concurrency", default=None, metavar="C",
                   help="serving: sequences decoded at once over all replicas")
    p.add_argument("--max-token-ms", default=None, metavar="MS",
                   help="serving: the most time per output token a layout may take")
    p.add_argument("--top", default="3", metavar="K", help="layouts to show (default 3)")
    p.add_argument("--tp-overlap", action="store_true",
                   help="TP collectives overlapped with GEMMs (Megatron-Core --tp-comm-overlap)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="memory vs throughput of every layout tried, the chosen one marked")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_plot(args.plot)
    gpu, alias = resolve_gpu(args.gpu)
    model = load_model(args.model, download=args.download)
    job = job_from_args(args, model, command="cluster", default_mode="train",
                        modes=("train", "infer"), supported=SEARCH_JOB_FIELDS)
    opts = search_options(global_batch=args.global_batch, concurrency=args.concurrency,
                          top=args.top, max_token_ms=args.max_token_ms, mode=job.mode,
                          names={"global_batch": "--global-batch", "concurrency": "--concurrency",
                                 "top": "--top", "max_token_ms": "--max-token-ms",
                                 "mode": "--mode"})
    plan = cluster_search(model, gpu, job, tp_overlap=args.tp_overlap, **opts)
    if args.plot:
        plot_cluster(plan, args.plot)
    if args.json:
        d = plan.to_dict()
        if alias:
            d["gpu_note"] = alias
        json.dump(d, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if alias:
        print(f"note: {alias}", file=sys.stderr)
    render_cluster(plan, sys.stdout)
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
