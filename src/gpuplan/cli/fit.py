"""``gpuplan fit``: will this model fit on these GPUs, for training and for inference?"""

from __future__ import annotations

import argparse

from .._io import json_text
from ..errors import InputError
from ..job import DEFAULT_MODEL_PARAMS

HELP = "memory per GPU for training and inference, and a verdict per GPU"

#: With no model named, ``gpuplan fit`` plans the source document's example: 7B parameters.
SEED_PARAMS = DEFAULT_MODEL_PARAMS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help=HELP, description=HELP)
    p.add_argument("model", nargs="?", help="catalog name (see `gpuplan models`), config.json, or "
                   "model directory (config.json + *.safetensors)")
    p.add_argument("--params", metavar="N", help="a bare parameter count instead of a model, e.g. 7B")
    p.add_argument("--mode", choices=("train", "infer", "both"), default=None,
                   help="what to plan for (default: both)")
    p.add_argument("--precision", metavar="NAME",
                   help="training recipe in train/both mode (fp32, mixed-bf16, mixed-fp16, amp-bf16, "
                        "amp-fp16, bf16; default mixed-bf16); weight format in infer mode")
    p.add_argument("--infer-precision", metavar="FORMAT",
                   help="inference weight format with --mode both (fp32, bf16, fp16, fp8, int8, "
                        "nf4, nf4-dq, gptq-4bit, awq-4bit, q8_0, q4_0, q4_k_m; default bf16)")
    p.add_argument("--optimizer", metavar="NAME",
                   help="sgd, sgd-momentum, adam, adamw (default), adafactor, adamw-8bit, lion, "
                        "adagrad, rmsprop")
    p.add_argument("--optimizer-states", choices=("auto", "fp32", "bf16"), default=None,
                   help="optimizer state dtype (auto: fp32, or bf16 with the pure bf16 recipe)")
    p.add_argument("--fused-optimizer", action="store_true", default=None,
                   help="AdamW(fused=True): no full-size temporary in the optimizer step")
    p.add_argument("--gpu", action="append", metavar="NAME",
                   help="GPU to judge against (repeatable; default: a shortlist; `gpuplan gpus`), "
                        "or a card by its memory: custom:24GB")
    p.add_argument("--gpus", type=str, metavar="N", help="data-parallel GPUs (ZeRO world size)")
    p.add_argument("--zero", type=str, metavar="0..3", help="ZeRO stage (3 = FSDP full shard)")
    p.add_argument("--offload-optimizer", action="store_true", default=None,
                   help="keep master weights and optimizer states in host memory")
    p.add_argument("--lora-rank", type=str, metavar="R", help="train LoRA adapters of rank R")
    p.add_argument("--lora-targets", metavar="M1,M2",
                   help="modules the adapters attach to (default: PEFT's for the family; all-linear)")
    p.add_argument("--lora-base", metavar="FORMAT",
                   help="format of the frozen base under LoRA (nf4 = QLoRA)")
    p.add_argument("--batch", type=str, metavar="B", help="micro-batch per GPU (default 1)")
    p.add_argument("--seq", type=str, metavar="S",
                   help="sequence length (default: the model's context, at most 2048)")
    p.add_argument("--grad-accum", type=str, metavar="K", help="gradient-accumulation steps")
    p.add_argument("--checkpointing", metavar="LEVEL", help="activation checkpointing: none, "
                   "selective, full")
    p.add_argument("--attention", metavar="IMPL", help="eager or sdpa (flash/memory-efficient)")
    p.add_argument("--kv-dtype", metavar="DTYPE", help="KV-cache format: bf16, fp16, fp8, int8, fp32")
    p.add_argument("--context", type=str, metavar="T",
                   help="inference: tokens in the KV cache per sequence (default: --seq)")
    p.add_argument("--prefill-logits", choices=("last", "all"), default=None,
                   help="inference prefill computes logits for the last prompt position "
                        "(generate(), vLLM; default) or for all (a scoring forward)")
    p.add_argument("--use-cache", action="store_true", default=None,
                   help="training forward keeps transformers' KV cache (config use_cache=True); "
                        "default: use_cache=False")
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
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def job_from_args(args: argparse.Namespace):
    """Build the Job from CLI arguments; unset options keep the Job's own defaults."""
    from ..job import Job
    from ..models import from_param_count
    from ..units import parse_count, parse_positive_int

    if args.model and args.params:
        raise InputError("give a model or --params, not both")
    if not args.model and not args.params:
        # The built-in default: the source document's example, a 7B model.
        model = from_param_count(SEED_PARAMS)
    else:
        model = from_param_count(parse_count(args.params)) if args.params else args.model

    kw: dict = {}
    mode = args.mode or "both"
    kw["mode"] = mode
    if args.precision is not None:
        kw["infer_precision" if mode == "infer" else "precision"] = args.precision
    if args.infer_precision is not None:
        if mode == "train":
            raise InputError("--infer-precision with --mode train: there is no inference to plan")
        if mode == "infer" and args.precision is not None:
            raise InputError("--mode infer takes the weight format as --precision; drop "
                             "--infer-precision")
        kw["infer_precision"] = args.infer_precision
    for name in ("optimizer", "optimizer_states", "checkpointing", "attention", "kv_dtype",
                 "lora_base"):
        v = getattr(args, name)
        if v is not None:
            kw[name] = v
    for name in ("offload_optimizer", "fused_optimizer", "use_cache"):
        if getattr(args, name):
            kw[name] = True
    if args.prefill_logits is not None:
        kw["prefill_logits"] = args.prefill_logits
    for name, flag in (("batch", "--batch"), ("seq", "--seq"), ("grad_accum", "--grad-accum"),
                       ("gpus", "--gpus"), ("lora_rank", "--lora-rank"), ("context", "--context")):
        v = getattr(args, name)
        if v is not None:
            kw[name] = parse_positive_int(v, what=flag)
    if args.zero is not None:
        if args.zero.strip() not in ("0", "1", "2", "3"):
            raise InputError(f"--zero {args.zero!r}: expected a ZeRO stage 0, 1, 2 or 3")
        kw["zero"] = int(args.zero)
    if args.lora_targets is not None:
        targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
        if not targets:
            raise InputError(f"--lora-targets {args.lora_targets!r}: expected module names "
                             "such as q_proj,v_proj")
        kw["lora_targets"] = targets
    return Job(model=model, **kw)


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


def run(args: argparse.Namespace) -> int:
    from .._io import check_writable
    from ..fit import plan

    if args.plot:
        check_writable(args.plot, what="--plot")
        if not args.plot.lower().endswith(".png"):
            raise InputError(f"--plot {args.plot!r}: expected a .png file name")
    job = job_from_args(args)
    overrides = overrides_from_args(args)
    result = plan(job, args.gpu, overhead_level=args.overhead, overhead_overrides=overrides,
                  suggest=True if args.suggest else None, max_batch=args.max_batch,
                  max_seq=args.max_seq, speed=not args.no_speed)
    trace = None
    if args.trace:
        from ..crosscheck import compare_with_trace

        trace = compare_with_trace(result)
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
        render_plan(result, units=args.units, trace=trace)
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0
