"""``gpuplan cluster MODEL --gpu G --gpus N``: search every parallel layout of a training job
(``--seq S --global-batch B``) or a serving job (``--mode infer --concurrency C --context T``)
and show the best few. Thin: parses, calls :func:`gpuplan.cluster.cluster_search`, renders."""

from __future__ import annotations

import argparse
import json
import sys

from dataclasses import replace

from .._io import check_plot, check_writable, write_atomic
from ..errors import InputError
from ..units import parse_positive_int
from ..cluster import SEARCH_JOB_FIELDS, cluster_search, search_options
from ..hardware import resolve_gpu
from ..models import load_model
from ..report.cluster import plot_cluster, render_cluster
from ._common import add_model_on_gpu
from ._job_options import add_job_options, given_job_options, job_from_args

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
    p.add_argument("--export", metavar="ENGINE", default=None,
                   help="write the best layout (or --pick N's) as that engine's config: "
                        "deepspeed, accelerate, fsdp, torchtitan, megatron, vllm; with --engine "
                        "auto the search runs under that engine")
    p.add_argument("--pick", metavar="N", default=None,
                   help="with --export: the N-th layout shown (default 1, the best)")
    p.add_argument("--export-file", metavar="PATH", default=None,
                   help="write --export's config to PATH (the search is printed as usual)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="memory vs throughput of every layout tried, the chosen one marked")
    p.set_defaults(func=run)


def _export_engine(args: argparse.Namespace) -> str | None:
    """``--export ENGINE``'s writer, checked before the search (with its file and ``--pick``);
    under ``--engine auto`` the search runs under the engine whose config is written."""
    if args.export_file is not None and not str(args.export_file).strip():
        raise InputError(f"--export-file {args.export_file!r}: give the file's name, e.g. "
                         "--export-file megatron_args.txt (or drop it to print the config)")
    if args.export is None:
        for given, flag in ((args.pick, "--pick"), (args.export_file, "--export-file")):
            if given is not None:
                raise InputError(f"{flag} without --export: name the engine, e.g. "
                                 "--export megatron")
        return None
    if args.export_file:
        check_writable(args.export_file, what="--export-file")
    elif args.json or args.plot:
        raise InputError("--export prints the config on stdout; with --json or --plot give "
                         "--export-file PATH")
    from ..export import ENGINES

    name = str(args.export).strip().lower()
    if name not in ENGINES:
        raise InputError(f"--export {args.export!r:.40}: expected one of {', '.join(ENGINES)}")
    return name


#: The engine whose search an export runs under, by its writer (under --engine auto).
_ENGINE_OF_WRITER = {"megatron": "megatron", "torchtitan": "torchtitan",
                     "deepspeed": "deepspeed", "fsdp": "fsdp2", "accelerate": "transformers",
                     "vllm": "vllm", "sglang": "sglang"}  # every export writer (qa43: sglang's
# was missing, a KeyError under --engine auto; tests/unit/test_export.py holds them equal)


def run(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_plot(args.plot)
    writer = _export_engine(args)
    pick = 1 if args.pick is None else parse_positive_int(args.pick, what="--pick", maximum=100)
    gpu, alias = resolve_gpu(args.gpu)
    model = load_model(args.model, download=args.download)
    job = job_from_args(args, model, command="cluster", default_mode="train",
                        modes=("train", "infer"), supported=SEARCH_JOB_FIELDS)
    said = []
    if writer is not None and job.engine == "auto":
        job = job.with_(engine=_ENGINE_OF_WRITER[writer])
        said.append(f"--export {writer}: searched under --engine {job.engine}, the engine "
                    "whose config it writes")
    opts = search_options(global_batch=args.global_batch, concurrency=args.concurrency,
                          top=args.top, max_token_ms=args.max_token_ms, mode=job.mode,
                          names={"global_batch": "--global-batch", "concurrency": "--concurrency",
                                 "top": "--top", "max_token_ms": "--max-token-ms",
                                 "mode": "--mode"})
    opts["top"] = max(opts["top"], pick)  # the layout picked is among those shown
    plan = cluster_search(model, gpu, job, tp_overlap=args.tp_overlap,
                          search_gpus="gpus" not in given_job_options(args), **opts)
    if said:
        plan = replace(plan, notes=plan.notes + tuple(said))
    config = None
    if writer is not None:
        if len(plan.best) < pick:
            raise InputError(f"--pick {pick}: the search found {len(plan.best)} layout(s) that "
                             f"fit; use --pick {len(plan.best) or 1}" if plan.best else
                             "--export: no layout fits, nothing to export")
        from ..export import export_plan  # the exporters load only when --export is given

        config = export_plan(plan.best[pick - 1].job, writer, model=model)
        if not args.export_file:
            print(config, end="")
            return 0
    if args.plot:
        plot_cluster(plan, args.plot)
    if config is not None:
        write_atomic(args.export_file, config)
        print(f"{writer} config of layout {pick} written to {args.export_file}",
              file=sys.stderr)
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
