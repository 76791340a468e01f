"""``gpuplan trace``: the exact memory timeline and FLOPs of a real PyTorch step, without a GPU."""

from __future__ import annotations

import argparse

from .._extras import require
from .._io import check_plot
from ..engines.profiles import runtime_of
from ..errors import InputError, opt
from ..models import is_hub_id, load_model
from ..report.trace import plot_timeline, render_trace, trace_json
from ..trace import check_sequence, trace_step
from ..trace.distributed import trace_sharded, trace_tensor_parallel
from ._common import add_download_argument
from ._job_options import add_job_options
from ._job_options import job_from_args as job_options_to_job

#: The job options a trace runs (one GPU's step of one model; with --gpus N --zero 2|3 one rank
#: of an FSDP2 step over N ranks; with --tp T one rank of a DTensor tensor-parallel step; no
#: adapters yet). ``engine`` as fit takes it: the Job checks the layout against it, and the
#: engine's defaults (its fused optimizer) are traced.
TRACED_FIELDS = frozenset({"batch", "seq", "precision", "optimizer", "fused_optimizer",
                           "checkpointing", "attention", "gpus", "zero", "tp", "engine"})

HELP = "run a model's real training or inference step under fake tensors and record its memory"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help=HELP, description=HELP + ". Needs torch and transformers.")
    p.add_argument("model", help="catalog name (`gpuplan models`), config.json, model directory, "
                   "or path/to/file.py:factory (your own code: a function returning "
                   "(model, example_batch)), or a hub id (org/name) from the local Hugging "
                   "Face cache")
    add_download_argument(p)
    add_job_options(p)
    p.add_argument("--optimizer-impl", metavar="IMPL",
                   help="foreach (CUDA's default), fused, for-loop")
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


def check_traced_engine(job) -> None:
    """The engines whose step the trace replays: transformers' model code, run eagerly, and for a
    sharded step FSDP2's shards (what ``trace_sharded`` runs). Any other is one line naming the
    engines that are traced; ``gpuplan fit`` plans them all."""
    if job.engine == "auto":
        return
    prof = job.engine_profile
    runtime = runtime_of(job.runtime, job.mode, job.engine)
    traced = "transformers, deepspeed, fsdp2 or torchtitan"
    if prof.model_code != "transformers":
        why = f"it runs its own model code ({prof.model_code}), the trace transformers'"
    elif runtime != "eager":
        why = f"it runs the step under runtime {runtime}, the trace runs it eagerly"
    elif (job.gpus > 1 or job.zero) and job.sharding != "fsdp2":
        why = f"its ZeRO is {job.sharding}'s, the trace shards the step with FSDP2"
        traced = "fsdp2 or torchtitan"
    else:
        return
    raise InputError(f"{opt('engine')} {prof.name}: {why}; use {opt('engine')} {traced} "
                     f"(`gpuplan fit` plans {prof.name})", field="engine", value=prof.name)


def _check_layout(job, args: argparse.Namespace) -> None:
    """``--tp T`` traces rank 0 of a tensor-parallel training step over T ranks, ``--gpus N
    --zero 2|3`` rank 0 of an FSDP2 step over N ranks (docs/trace.md); both under fake tensors."""
    if job.tp > 1:
        if (job.mode != "train" or args.device not in (None, "cpu") or args.real or job.zero
                or job.gpus != job.tp):
            raise InputError(f"--tp {job.tp} traces a tensor-parallel training step over "
                             f"{job.tp} ranks under fake tensors; drop --zero, --gpus other "
                             "than the TP degree, --mode infer, --device cuda and --real")
    elif job.gpus > 1 or job.zero:
        if job.mode != "train" or args.device not in (None, "cpu") or args.real:
            raise InputError("--gpus/--zero trace an FSDP2 training step under fake tensors; "
                             "drop --mode infer, --device cuda and --real")


def _checked_job(args: argparse.Namespace):
    """Every check that needs no torch, before torch and transformers are imported (seconds,
    tens of them on a loaded machine): the options, the plot's path, the engine, the layout,
    and the sequence against the model's positions. What needs torch or runs the user's code
    (a factory, a download) comes after the import, so a missing torch is still reported
    before any of it (docs/bounds.md)."""
    if args.plot is not None:
        check_plot(args.plot)
    if args.real and args.device not in (None, "cpu"):
        raise InputError("--real runs the step on this machine's CPU; use it with --device cpu "
                         "(--device cuda always runs the step for real on the GPU)")
    if getattr(args, "tp", None) is not None and getattr(args, "gpus", None) is None:
        args.gpus = args.tp  # --tp T alone: T ranks of tensor parallelism
    job = job_options_to_job(args, args.model, command="trace", default_mode="train",
                             modes=("train", "infer"), supported=TRACED_FIELDS)
    check_traced_engine(job)
    _check_layout(job, args)
    if job.seq is not None and not args.download and not is_hub_id(args.model):
        check_sequence(args.model, job.seq)
    return job


def run(args: argparse.Namespace) -> int:
    job = _checked_job(args)
    # then torch (the one-line install command when it is missing), before the model is built
    require("torch", "transformers", feature="gpuplan trace")
    impl = args.optimizer_impl or ("fused" if job.fused_optimizer else None)
    kw: dict = {"real": args.real, "mode": job.mode, "batch": job.batch, "seq": job.seq,
                "precision": job.precision if job.mode == "train" else job.infer_precision,
                "optimizer": job.optimizer, "checkpointing": job.checkpointing,
                "attention": job.attention}
    if impl is not None:
        kw["optimizer_impl"] = impl
    if args.device is not None:
        kw["device"] = args.device
    model = args.model
    if args.download or is_hub_id(model):  # org/name: the Hugging Face cache (or --download)
        model = load_model(model, download=args.download)
    sharded = {k: v for k, v in kw.items() if k not in ("real", "mode", "device")}
    if job.tp > 1:
        result = trace_tensor_parallel(model, tp=job.tp, **sharded)
    elif job.gpus > 1 or job.zero:
        result = trace_sharded(model, gpus=job.gpus, zero=job.zero, **sharded)
    else:
        result = trace_step(model, **kw)
    if args.plot:
        plot_timeline(result, args.plot, units=args.units)
    if args.json:
        print(trace_json(result))
    else:
        render_trace(result, units=args.units)
        if args.plot:
            print(f"timeline written to {args.plot}")
    return 0
