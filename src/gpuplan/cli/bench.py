"""``gpuplan bench``: measure this machine -- CPU vs GPU matmul, bandwidth, transfers -- and keep it.

Thin: parses arguments, calls :mod:`gpuplan.measure`, renders with :mod:`gpuplan.report.bench`.
Nothing heavy is imported at module level; ``--history``/``--compare``/``--show`` need no torch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from .._io import json_text
from ..errors import InputError

__all__ = ["register", "run"]

_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="measure this machine: CPU vs GPU matmul, bandwidth, transfers (needs torch)",
        description=(
            "Time an N x N matmul on the CPU (all its threads) and on every CUDA device -- by "
            "default the source document's 4000 x 4000 fp32 experiment -- with warm-up, "
            "synchronized timing and adaptive repetitions (median and IQR); report TFLOP/s, percent "
            "of the catalog's dense peak, the size from which the GPU wins (with and without the "
            "copies), memory/transfer bandwidth and launch overhead. Every run is stored locally."
        ),
    )
    what = p.add_argument_group("what to measure")
    what.add_argument("--sweep", action="store_true",
                      help="sizes 64..8192 (powers of two and 4000) x every dtype each device "
                           "runs natively (fp32, tf32, bf16, fp16)")
    what.add_argument("--size", action="append", metavar="N",
                      help="matrix size N (repeatable); default 4000, or the sweep's sizes")
    what.add_argument("--dtype", action="append", choices=_DTYPES,
                      help="matmul dtype (repeatable); default fp32, or every native one with "
                           "--sweep; tf32 = fp32 tensors on TF32 tensor cores (GPU)")
    what.add_argument("--device", default="all", metavar="cpu|cuda|cuda:N|all",
                      help="where to measure (default: all = the CPU and every CUDA device)")
    what.add_argument("--budget", default=None, metavar="SECONDS",
                      help="seconds of repetitions per measurement before accepting a spread "
                           "above 10%% (default 1)")
    what.add_argument("--threads", default=None, metavar="N",
                      help="CPU threads for torch (default: every CPU this process may use)")
    what.add_argument("--copy-size", default=None, metavar="SIZE",
                      help="buffer size of the bandwidth copies (default 256MiB)")
    what.add_argument("--no-bandwidth", action="store_true",
                      help="skip the bandwidth and launch-overhead measurements")
    out = p.add_argument_group("output and storage")
    out.add_argument("--json", action="store_true", help="print the run as JSON on stdout")
    out.add_argument("--plot", metavar="FILE.png",
                     help="draw time and TFLOP/s vs N (log-log), CPU vs GPU, crossover marked")
    out.add_argument("--db", metavar="PATH",
                     help="bench database (default: $GPUPLAN_BENCH_DB, else "
                          "$XDG_DATA_HOME/gpuplan/bench.sqlite)")
    out.add_argument("--no-save", action="store_true", help="do not store this run")
    look = out.add_mutually_exclusive_group()
    look.add_argument("--history", action="store_true", help="list the stored runs")
    look.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"),
                      help="show what changed between two stored runs (ids, latest, latest~1 ...)")
    look.add_argument("--show", metavar="RUN", help="print (or --json/--plot) a stored run")
    p.set_defaults(func=run)


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= 3600):  # also rejects nan
        raise InputError(f"--budget {text!r}: expected seconds per measurement, more than 0 and "
                         "at most 3600, e.g. --budget 2")
    return value


def _stored(args, console) -> int:
    from ..measure import store
    from ..report import bench as report

    if args.history:
        key = store.machine_fingerprint(gpus="none").key
        runs = store.list_runs(args.db)
        if args.json:
            print(json_text([report.run_to_json(r) for r in runs], indent=1))
        else:
            report.render_history(runs, console, this_key=key, db=str(store.db_path(args.db)))
        return 0
    if args.compare:
        a = store.load_run(store.resolve_run(args.compare[0], args.db), args.db)
        b = store.load_run(store.resolve_run(args.compare[1], args.db), args.db)
        if args.json:
            print(json_text({"a": report.run_to_json(a), "b": report.run_to_json(b)}, indent=1))
        else:
            report.render_compare(a, b, console)
        return 0
    r = store.load_run(store.resolve_run(args.show, args.db), args.db)
    if args.plot:
        report.plot_run(r, args.plot)
    if args.json:
        print(json_text(report.run_to_json(r), indent=1))
    else:
        report.render_run(r, console)
    return 0


def _config(args: argparse.Namespace):
    from ..measure.bench.run import BenchConfig
    from ..units import parse_bytes, parse_positive_int

    given = {
        "sizes": (tuple(parse_positive_int(s, what="--size") for s in args.size)
                  if args.size else None),
        "dtypes": tuple(dict.fromkeys(args.dtype)) if args.dtype else None,
        "budget_s": None if args.budget is None else _budget(args.budget),
        "threads": (None if args.threads is None
                    else parse_positive_int(args.threads, what="--threads")),
        "copy_bytes": (parse_bytes(args.copy_size, what="--copy-size") if args.copy_size
                       else None),
    }
    return BenchConfig(sweep=args.sweep, device=args.device, bandwidth=not args.no_bandwidth,
                       **{k: v for k, v in given.items() if v is not None})


@contextlib.contextmanager
def _progress(err):
    """A transient progress bar on a terminal (stderr), else nothing: yields run_bench's callback."""
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err, transient=True)
    task = bar.add_task("planning", total=None)
    bar.start()
    try:
        yield lambda label, done, total: bar.update(task, description=label, completed=done,
                                                    total=total)
    finally:
        bar.stop()


def _show(args: argparse.Namespace, saved, console) -> None:
    from ..report import bench as report

    result = saved.run
    if args.plot:
        report.plot_run(result, args.plot)
    if args.json:
        doc = report.run_to_json(result)
        doc["db"] = None if saved.path is None else str(saved.path)
        if saved.error:
            doc["save_error"] = saved.error
        print(json_text(doc, indent=1))
        for n in result.notes:
            print(n, file=sys.stderr)
    else:
        line = (f"Saved as run {result.run_id} in {saved.path} (`gpuplan bench --history`)."
                if saved.saved else None)
        report.render_run(result, console, saved_to=line)
    if args.plot:
        print(f"Wrote {args.plot}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .._io import check_plot
    from ..report._console import console_for

    console = console_for(sys.stdout, width=160)
    if args.plot is not None:
        check_plot(args.plot)
    if args.history or args.compare or args.show is not None:  # --show '' is a bad id
        return _stored(args, console)

    from ..measure import store
    from ..measure.bench.run import import_torch, run_bench

    config = _config(args)
    import_torch()
    path, early_error = (None, None) if args.no_save else store.check_db_or_why(args.db)
    if early_error:
        print(f"gpuplan: error: {early_error}; the results will be printed but not saved",
              file=sys.stderr)
    with _progress(Console(stderr=True, highlight=False)) as progress:
        result = run_bench(config, progress=progress)
    saved = store.save_checked(result, path, early_error)
    _show(args, saved, console)
    if saved.error:
        if saved.path is not None:  # the early check passed, the save itself failed
            print(f"gpuplan: error: {saved.error}; the results above were not saved",
                  file=sys.stderr)
        return 2
    return 0
