"""``gpuplan profile script.py [args...]``: why is this training loop slow?

Runs the unmodified script with the profiler installed, measures ``--steps`` steps after
``--warmup``, then prints the verdict (data-loading, transfer, host-overhead or compute bound),
the evidence and the advice. Under ``torchrun`` every rank measures and rank 0 prints one report.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys

from ..errors import InputError
from ..measure.profile import DEFAULT_STEPS, DEFAULT_WARMUP, check_device
from ..units import parse_positive_int
from ._job_options import add_job_options, flag_of, given_job_options

__all__ = ["register", "run"]

_EPILOG = """\
gpuplan's options go before the script; everything after the script is the script's own.
Under torchrun:  torchrun --nproc_per_node N -m gpuplan profile train.py ...
Measured vs estimated: gpuplan profile --model llama-3.1-8b [--gpu H100-SXM-80GB] train.py ...
(a transformers model's own config is read without --model; --no-estimate turns it off).
Exit status: the script's own (0 when gpuplan stopped it after --steps); 1 when no step was
measured; 2 for bad gpuplan arguments.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="run a training script and say what bounds it: data loading, transfer, host or compute",
        description="Run an unmodified training script under the profiler and report where each step's "
                    "time goes (data wait, host-device transfer, forward, backward, optimizer, other), "
                    "the verdict and what to change.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steps", default=str(DEFAULT_STEPS), metavar="N",
                   help=f"steps to measure after the warm-up (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", default=str(DEFAULT_WARMUP), metavar="K",
                   help=f"steps left out at the start (default {DEFAULT_WARMUP})")
    p.add_argument("--then", choices=("stop", "continue"), default="stop",
                   help="after the measured steps: stop the script (default) or let it finish at full "
                        "speed with the profiler removed")
    p.add_argument("--json", action="store_true",
                   help="print the report as JSON on stdout (the script's own stdout goes to stderr)")
    p.add_argument("--plot", metavar="FILE.png", help="write a per-step stacked time chart")
    p.add_argument("--tokens-per-sample", metavar="N",
                   help="tokens per sample, for tokens/s when the batch does not show them")
    p.add_argument("--expected-step-time", metavar="SECONDS",
                   help="your own estimated step time to compare the measurement with (replaces "
                        "the speed model's estimate)")
    p.add_argument("--model", metavar="NAME_OR_CONFIG",
                   help="the architecture the script trains, for the speed model's estimate: a "
                        "catalog name (`gpuplan models`), a config.json or a model directory "
                        "(default: a transformers model's config, else its parameter count)")
    p.add_argument("--gpu", metavar="SKU",
                   help="the catalog GPU the script runs on (default: the CUDA device's exact "
                        "name; `gpuplan gpus` lists them)")
    p.add_argument("--no-estimate", action="store_true",
                   help="do not compare with the speed model's estimate")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="timing: CUDA events once CUDA is in use (auto), or force one")
    p.add_argument("--gather-timeout", default="300", metavar="SECONDS",
                   help="under torchrun: how long rank 0 waits for the other ranks (default 300)")
    add_job_options(p)
    p.add_argument("script", help="the training script (a .py file)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.set_defaults(func=run)


def _seconds(text: str, what: str) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"{what} {text!r}: expected a number of seconds > 0, e.g. 0.25")
    return v


def _estimate_flags(args: argparse.Namespace, expected: float | None) -> None:
    extra = [flag_of(f) for f in given_job_options(args) if f != "precision"]
    if extra:
        raise InputError(f"profile measures the loop itself: {', '.join(extra)} come from the "
                         "running script; of the job options only --precision (the recipe for "
                         "the estimate) applies")
    named = [f for f, v in (("--model", args.model), ("--gpu", args.gpu),
                            ("--precision", args.precision)) if v is not None]
    if named and expected is not None:
        raise InputError(f"give either --expected-step-time or {'/'.join(named)} (the speed "
                         "model's estimate), not both")
    if named and args.no_estimate:
        raise InputError(f"{'/'.join(named)} configure the estimate that --no-estimate turns off")


def _check_plot(path: str) -> None:
    from .._io import check_plot

    check_plot(path, formats=("png", "svg", "pdf"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("matplotlib", "plot", "--plot") from None


def run(args: argparse.Namespace) -> int:
    from .._extras import require

    # torch first: without it, one line with the install command (measure/ imports it too).
    require("torch", feature="gpuplan profile")
    from ..measure.profile.distributed import dist_env
    from ..measure.profile.script import check_script, collect, run_script
    from ..report.profile import plot_profile, render_json, render_text

    # Validate everything before the script runs: bad arguments are one line and exit 2.
    steps = parse_positive_int(args.steps, what="--steps", maximum=1_000_000)
    warmup = parse_positive_int(args.warmup, what="--warmup", minimum=0)
    tps = None if args.tokens_per_sample is None else parse_positive_int(
        args.tokens_per_sample, what="--tokens-per-sample")
    expected = None if args.expected_step_time is None else _seconds(
        args.expected_step_time, "--expected-step-time")
    gather_timeout = _seconds(args.gather_timeout, "--gather-timeout")
    _estimate_flags(args, expected)
    # --model/--gpu/--precision are checked by the Profiler run_script makes, before the script runs.
    check_device(None if args.device == "auto" else args.device)
    check_script(args.script)
    env = dist_env()
    if args.plot is not None and (env is None or env.rank == 0):
        _check_plot(args.plot)

    redirect = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with redirect:
        outcome = run_script(
            args.script, list(args.script_args), steps=steps, warmup=warmup, then=args.then,
            tokens_per_sample=tps, expected_step_time_s=expected,
            device=None if args.device == "auto" else args.device,
            plan_model=args.model, gpu=args.gpu, precision=args.precision,
            estimate=not args.no_estimate,
        )
    sys.stdout.flush()  # the script's own output first
    if outcome.traceback_text:
        sys.stderr.write(outcome.traceback_text)
        sys.stderr.flush()
    shown = collect(outcome, env, gather_timeout_s=gather_timeout)
    if shown.failure:
        print(f"gpuplan profile: {shown.failure}", file=sys.stderr)
    if shown.report is None:
        return shown.exit_code
    if args.json:
        print(render_json(shown.report))
    else:
        if shown.partial:
            print("\n--- gpuplan: partial report of the steps completed before the script stopped ---",
                  file=sys.stderr, flush=True)
        print(render_text(shown.report))
    if args.plot:
        plot_profile(shown.report, args.plot)
        if not args.json:
            print(f"chart written to {args.plot}")
    return shown.exit_code
