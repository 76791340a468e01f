"""How much does the profiler slow a training loop down? (CPU; see profile_gpu_loops.py for CUDA)

For loops with different step times, the same training loop (DataLoader -> MLP -> AdamW) runs in
interleaved rounds: plain, under ``gpuplan.profile(model, opt)`` (library mode), and under the
CLI's instrumentation (model and optimizer found by global hooks, DataLoader iterators patched).
Per arm: the median of the loop's own per-step clock over all rounds. Reported per loop:

- ``self``: the profiler's own measurement, ``overhead_fraction`` (time inside its hooks / step),
- ``A/B``: per round, median step time with the profiler / without; the median over rounds - 1
  (what the user pays; pairing within a round cancels the machine's drift),
- ``noise``: the same statistic between two plain arms (the noise floor of the A/B column),
- ``TorchFunctionMode``: for comparison, the A/B cost of observing copies with a no-op
  TorchFunctionMode instead of patching Tensor.to (the approach the profiler does not take).

Run:  PYTHONPATH=src python benchmarks/profile_overhead.py [--rounds 30] [--steps 6] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, TensorDataset

from gpuplan.hardware.cpu import detect_cpu
from gpuplan.measure.profile import Profiler, profile

# (batch, width, layers): chosen to give steps of roughly 1, 10, 25 and 60 ms on one CPU thread
CONFIGS = [(32, 128, 2), (64, 512, 3), (128, 768, 3), (128, 1024, 4)]


class NoOpMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def make(batch, width, layers, steps):
    torch.manual_seed(0)
    n = batch * (steps + 1)
    ds = TensorDataset(torch.randn(n, width), torch.randint(0, 10, (n,)))
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return DataLoader(ds, batch_size=batch), model, opt


def run_loop(it, model, opt, times):
    last = time.perf_counter()
    for x, y in it:
        x = x.to("cpu")  # a device copy call, as real loops have (a no-op on the CPU)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now


def one_round(arm, loader, model, opt, steps):
    times: list[float] = []
    ovh = None
    if arm == "plain":
        run_loop(loader, model, opt, times)
    elif arm == "library":
        with profile(model, opt, warmup=0) as prof:
            run_loop(prof.wrap(loader), model, opt, times)
        r = prof.report()
        ovh = r.overhead_fraction
    elif arm == "cli":
        prof = Profiler(None, None, warmup=0, _patch_loaders=True)
        with prof:
            run_loop(loader, model, opt, times)
        ovh = prof.report().overhead_fraction
    elif arm == "torchfunctionmode":
        with NoOpMode():
            run_loop(loader, model, opt, times)
    return times[1:], ovh  # the first iteration includes the iterator's start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=6, help="steps per arm per round")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    # "plain2" is a second plain arm: plain2 / plain measures the noise floor of the comparison.
    arms = ["plain", "library", "plain2", "cli", "torchfunctionmode"]
    lines = [
        "| step (plain, median) | self overhead (library) | self overhead (CLI) | A/B library | A/B CLI "
        "| noise floor (plain vs plain) | A/B TorchFunctionMode |",
        "|" + "---|" * 7,
    ]
    for batch, width, layers in CONFIGS:
        loader, model, opt = make(batch, width, layers, a.steps)
        one_round("plain", loader, model, opt, a.steps)  # warm-up
        per_round = {arm: [] for arm in arms}
        all_plain: list[float] = []
        ovh = {"library": [], "cli": []}
        for r in range(a.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]  # rotate against drift
            for arm in order:
                t, o = one_round("plain" if arm == "plain2" else arm, loader, model, opt, a.steps)
                per_round[arm].append(statistics.median(t))
                if arm == "plain":
                    all_plain += t
                if o is not None:
                    ovh[arm].append(o)

        def ab(arm: str) -> float:
            # paired: the ratio within each round (drift cancels), then the median over rounds
            return statistics.median(x / y for x, y in zip(per_round[arm], per_round["plain"])) - 1

        row = (f"| {statistics.median(all_plain) * 1e3:.2f} ms | {statistics.median(ovh['library']) * 100:.2f}% | "
               f"{statistics.median(ovh['cli']) * 100:.2f}% | {ab('library') * 100:+.2f}% | "
               f"{ab('cli') * 100:+.2f}% | {ab('plain2') * 100:+.2f}% | {ab('torchfunctionmode') * 100:+.2f}% |")
        lines.append(row)
        print(row, flush=True)
    meta = (f"torch {torch.__version__}, Python {platform.python_version()}, {detect_cpu().model_name}, "
            f"{os.cpu_count()} CPUs, torch threads {a.threads}, {a.rounds} rounds x {a.steps} steps per arm")
    text = "\n".join(lines) + "\n\n" + meta + "\n"
    print(meta)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
