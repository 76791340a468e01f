"""``gpuplan fit``: will this model fit on these GPUs, for training and for inference?"""

from __future__ import annotations

import argparse
import sys

from .._io import check_writable, json_text
from ..errors import InputError
from ..job import DEFAULT_MODEL_PARAMS, Job
from ..models import from_param_count, load_model
from ..units import parse_count
from ._job_options import add_job_options, cli_spelling
from ._job_options import job_from_args as job_options_to_job
from ._budget_options import add_budget_options, budget_kwargs
from ._common import add_download_argument

HELP = "memory per GPU for training and inference, and a verdict per GPU"

#: With no model named, ``gpuplan fit`` plans the source document's example: 7B parameters.
SEED_PARAMS = DEFAULT_MODEL_PARAMS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help=HELP, description=HELP)
    p.add_argument("model", nargs="?", help="catalog name (see `gpuplan models`), hub id "
                   "(org/name, from the local Hugging Face cache), config.json, model directory "
                   "(config.json + *.safetensors), or a .gguf file")
    add_download_argument(p)
    p.add_argument("--params", metavar="N", help="a bare parameter count instead of a model, e.g. 7B")
    p.add_argument("--gpu", action="append", metavar="NAME",
                   help="GPU to judge against (repeatable; default: a shortlist; `gpuplan gpus`), "
                        "or a card by its numbers: custom:24GB,bw=1000GB/s,bf16=165TF")
    add_job_options(p)
    add_budget_options(p)
    _add_plan_options(p)
    p.set_defaults(func=run)


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    """fit's own options: the overhead band, the searches, and the output."""
    p.add_argument("--overhead", choices=("low", "expected", "high"), default="expected",
                   help="which end of the runtime-overhead band to plan with")
    p.add_argument("--cuda-context", metavar="SIZE",
                   help="set the CUDA context overhead exactly, e.g. 0.5GB (measured on your "
                        "machine: nvidia-smi after the first CUDA op)")
    p.add_argument("--fragmentation", metavar="F",
                   help="caching-allocator fragmentation as a fraction of the bytes freed and "
                        "re-allocated each step, e.g. 0.1")
    p.add_argument("--suggest", action="store_true",
                   help="show the cheapest changes that make the job fit, for every GPU (they "
                        "are shown anyway for GPUs named with --gpu that the job does not fit)")
    p.add_argument("--max-batch", action="store_true",
                   help="the largest micro-batch (train) / concurrent sequences (infer) that fit")
    p.add_argument("--max-seq", action="store_true",
                   help="the longest sequence (train) / context (infer) that fits")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the stacked per-GPU breakdown with each GPU's capacity "
                        "(needs matplotlib)")
    p.add_argument("--units", choices=("GB", "GiB"), default="GB",
                   help="GB = 10^9 bytes (default), GiB = 2^30")
    p.add_argument("--trace", action="store_true",
                   help="also trace the job's real step under fake tensors (needs torch) and show "
                        "analytic and traced bytes side by side")
    p.add_argument("--no-speed", action="store_true",
                   help="leave out the speed model's estimate per GPU")
    p.add_argument("--use-noisy-bench", action="store_true",
                   help="speed: use the stored bench run even where its measurements are noisy "
                        "(spread >= 10%%; left out otherwise, and the output says so)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--export", metavar="ENGINE",
                   help="write the job as an engine's own config: deepspeed (JSON), accelerate "
                        "(YAML), fsdp (torchrun + FSDP2 snippet), torchtitan (TOML), megatron "
                        "(arguments), vllm (serve command); printed instead of the plan unless "
                        "--export-file is given")
    p.add_argument("--export-file", metavar="PATH",
                   help="write --export's config to PATH (the plan is then printed as usual)")
    p.add_argument("--export-repo", metavar="REPO",
                   help="--export vllm: the repository to serve when it is not the model's own "
                        "(Hugging Face id or directory), e.g. the AWQ or GPTQ checkpoint that "
                        "--precision awq-4bit or gptq-4bit needs")


def job_from_args(args: argparse.Namespace) -> Job:
    """The Job of ``gpuplan fit``'s arguments (the shared job options; unset ones keep the Job's
    defaults); no model and no --params: the source document's 7B example. A .gguf file is what
    llama.cpp serves: its inference is planned with the file's own per-tensor types."""
    if args.model and args.params:
        raise InputError("give a model or --params, not both")
    if args.params:
        model = from_param_count(parse_count(args.params))
    elif args.model:
        model = load_model(args.model, download=args.download)
        if model.source == "catalog":  # the name as typed, as a JSON body names it (web, tests)
            model = args.model
    else:
        model = from_param_count(SEED_PARAMS)
    gguf = getattr(model, "source", None) == "gguf"
    job = job_options_to_job(args, model, command="fit", default_mode="infer" if gguf else "both")
    if gguf and job.infers and args.precision is None and args.infer_precision is None:
        job = job.with_(infer_precision="gguf")
    return job


def overrides_from_args(args: argparse.Namespace) -> dict | None:
    """``--cuda-context`` / ``--fragmentation`` as overhead overrides."""
    from ..units import parse_bytes

    out: dict = {}
    if args.cuda_context is not None:
        out["cuda_context"] = parse_bytes(args.cuda_context, what="--cuda-context")
    if args.fragmentation is not None:
        try:
            f = float(args.fragmentation)
        except ValueError:
            f = float("nan")
        if not 0 <= f < 1:
            raise InputError(f"--fragmentation {args.fragmentation!r}: expected a fraction in "
                             "[0, 1), e.g. 0.1")
        out["fragmentation"] = f
    return out or None


def export_text(args: argparse.Namespace, job: Job, gpu=None) -> str | None:
    """``--export ENGINE [--export-file PATH]``: the engine's config, its options checked (and
    the file's path), nothing written yet; None without ``--export``."""
    if args.export_file is not None and not str(args.export_file).strip():
        raise InputError(f"--export-file {args.export_file!r}: give the file's name, e.g. "
                         "--export-file ds_config.json (or drop it to print the config)")
    if args.export_file and not args.export:
        raise InputError("--export-file without --export: name the engine, e.g. "
                         "--export deepspeed")
    if args.export is None:
        if args.export_repo is not None:
            raise InputError("--export-repo without --export: it names the repository of "
                             "--export vllm")
        return None
    if not args.export:
        raise InputError("--export '': name the engine, e.g. --export deepspeed")
    if args.export_file:
        check_writable(args.export_file, what="--export-file")
    elif args.json or args.plot:
        raise InputError("--export prints the config on stdout; with --json or --plot give "
                         "--export-file PATH")
    from ..export import export_plan  # the exporters load only when --export is given

    budget = budget_kwargs(args)  # the knobs the plan's KV budget reads, in the command too
    return export_plan(job, args.export, repo=args.export_repo,
                       gpu_memory_utilization=budget.get("gpu_memory_utilization"),
                       mem_fraction_static=budget.get("mem_fraction_static"),
                       engine_version=budget.get("engine_version"),
                       gpu=gpu, budget={k: budget.get(k) for k in (
                           "max_model_len", "max_num_batched_tokens", "max_num_seqs")})


def run(args: argparse.Namespace) -> int:
    from .._io import check_plot, write_atomic
    from ..fit import plan, resolve_gpus
    from ..memory.overhead import check_overrides

    if args.plot is not None:
        check_plot(args.plot)
    job = job_from_args(args)
    overrides = overrides_from_args(args)
    gpus = resolve_gpus(args.gpu)  # one card: an export's fraction where its default is the card's
    config = export_text(args, job, gpus[0][0] if len(gpus) == 1 else None)
    if config is not None and not args.export_file:  # the config alone, on stdout
        check_overrides(overrides)
        resolve_gpus(args.gpu)  # a mistyped --gpu fails here as it would with the plan
        print(config, end="")
        return 0
    # The speed model reads one bit width per weight format, not a file's per-tensor mix.
    per_tensor = job.infers and job.infer_precision == "gguf"
    result = plan(job, args.gpu, overhead_level=args.overhead, overhead_overrides=overrides,
                  suggest=True if args.suggest else None, max_batch=args.max_batch,
                  max_seq=args.max_seq, speed=not args.no_speed and not per_tensor,
                  use_noisy_bench=args.use_noisy_bench, engine_budget=budget_kwargs(args))
    trace = None
    if args.trace:
        from ..crosscheck import compare_with_trace

        trace = compare_with_trace(result)
    if config is not None:  # written once everything else has been checked
        write_atomic(args.export_file, config)
        print(f"{args.export} config written to {args.export_file}", file=sys.stderr)
    if args.plot:
        from ..report.fit_plot import plot_plan

        plot_plan(result, args.plot, units=args.units)
    if args.json:
        d = result.to_dict()
        if trace is not None:
            d["trace"] = [c.to_dict() for c in trace]
        print(json_text(d, indent=2))
    else:
        from ..report.fit import render_plan

        if not args.model and not args.params:
            print("no model given: planning the source document's example, a 7B model "
                  "(name one, e.g. `gpuplan fit llama-3.1-8b`, or give --params)")
        render_plan(result, units=args.units, trace=trace, spell=cli_spelling)
        if per_tensor and not args.no_speed:
            print("speed: not estimated for a GGUF file's per-tensor types (the speed model "
                  "takes one format: give --precision q4_k_m, q8_0 ... for an estimate)")
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0
