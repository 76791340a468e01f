"""Prepared GPU check of the profiler: loops whose bottleneck is known by construction.

Run once on a machine with a CUDA GPU (a few minutes):

    bash benchmarks/profile_gpu_loops.sh            # writes benchmarks/profile_gpu_results/

Loops (each profiled with ``gpuplan.profile(model, optimizer)``):

1. ``starved``  -- a DataLoader (num_workers=0) whose items take CPU time; a small conv net.
                   Expected verdict: data-loading, advice num_workers.
2. ``transfer`` -- large batches in pageable host memory, copied with ``.to(device)``; a model
                   that does almost nothing. Expected: transfer, advice pin_memory + non_blocking.
3. ``transfer_pinned`` -- the same batches pinned, ``non_blocking=True`` (for comparison: the
                   copy bandwidth should rise and the pin_memory advice disappear).
4. ``compute``  -- a transformer encoder in fp32 with data already on the GPU. Expected: compute,
                   advice mixed precision.
5. ``launch``   -- a deep stack of tiny layers at batch 8. Expected: host-overhead (launch-bound),
                   advice torch.compile / CUDA graphs.

Plus the overhead check: ``compute`` and ``launch`` run without and with the profiler in
interleaved rounds (one synchronize at the end of each round in both arms); the A/B difference
and the profiler's own ``overhead_fraction`` are written to ``summary.md``.

``--device cpu --quick`` runs the same code on the CPU at small sizes (a smoke test of this
script; on the CPU there are no host-device copies, so the transfer loops are not transfer-bound).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from gpuplan.measure.profile import profile
from gpuplan.report.profile import plot_profile, render_json, render_text


class SlowImages(Dataset):
    """Each item costs CPU work (a sleep standing in for JPEG decoding and augmentation)."""

    def __init__(self, n, size, work_s):
        self.n, self.size, self.work_s = n, size, work_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.work_s)
        return torch.randn(3, self.size, self.size), torch.randint(0, 10, ())


def conv_net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(64, 10))


def train(prof, batches, model, opt, dev, non_blocking=False):
    for x, y in prof.wrap(batches):
        x = x.to(dev, non_blocking=non_blocking)
        y = y.to(dev, non_blocking=non_blocking)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def loop_starved(dev, q):
    ds = SlowImages(n=64 * (q["steps"] + q["warmup"] + 1), size=64, work_s=0.002)
    model = conv_net().to(dev)
    opt = torch.optim.AdamW(model.parameters())
    with profile(model, opt, warmup=q["warmup"]) as prof:
        train(prof, DataLoader(ds, batch_size=64), model, opt, dev)
    return prof.report()


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 10)

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3)))


def loop_transfer(dev, q, pinned):
    n = q["steps"] + q["warmup"] + 1
    xs = [torch.randn(q["big_batch"], 3, 224, 224) for _ in range(min(n, 4))]
    ys = [torch.randint(0, 10, (q["big_batch"],)) for _ in range(len(xs))]
    if pinned and dev.type == "cuda":
        xs = [x.pin_memory() for x in xs]
        ys = [y.pin_memory() for y in ys]
    batches = [(xs[i % len(xs)], ys[i % len(ys)]) for i in range(n)]
    model = Tiny().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(model, opt, warmup=q["warmup"]) as prof:
        train(prof, batches, model, opt, dev, non_blocking=pinned)
    return prof.report()


def transformer(q):
    layer = torch.nn.TransformerEncoderLayer(q["d_model"], nhead=16, dim_feedforward=4 * q["d_model"],
                                             batch_first=True)
    return torch.nn.Sequential(torch.nn.TransformerEncoder(layer, q["layers"]),
                               torch.nn.Linear(q["d_model"], 10))


def compute_batches(dev, q, n):
    x = torch.randn(q["batch"], q["seq"], q["d_model"], device=dev)
    y = torch.randint(0, 10, (q["batch"], q["seq"]), device=dev)
    return [(x, y)] * n


def compute_step(model, opt, x, y):
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, 10), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def loop_compute(dev, q, model=None, opt=None):
    model = model or transformer(q).to(dev)
    opt = opt or torch.optim.AdamW(model.parameters())
    batches = compute_batches(dev, q, q["steps"] + q["warmup"] + 1)
    with profile(model, opt, warmup=q["warmup"]) as prof:
        for x, y in prof.wrap(batches):
            compute_step(model, opt, x, y)
    return prof.report()


def tiny_deep():
    mods = []
    for _ in range(48):
        mods += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(64, 10))


def launch_batches(dev, n):
    x = torch.randn(8, 64, device=dev)
    y = torch.randint(0, 10, (8,), device=dev)
    return [(x, y)] * n


def launch_step(model, opt, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def loop_launch(dev, q, model=None, opt=None):
    model = model or tiny_deep().to(dev)
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(model, opt, warmup=q["warmup"]) as prof:
        for x, y in prof.wrap(launch_batches(dev, q["steps"] + q["warmup"] + 1)):
            launch_step(model, opt, x, y)
    return prof.report()


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def ab_overhead(name, dev, q, make, batches_fn, step_fn):
    """Interleaved rounds without/with the profiler; seconds per step from one synchronize per round."""
    model, opt = make()
    n = q["ab_steps"]
    for x, y in batches_fn(n):  # warm-up
        step_fn(model, opt, x, y)
    sync(dev)
    plain, prof_t, self_ovh = [], [], []
    for r in range(q["ab_rounds"]):
        for arm in (("plain", "prof") if r % 2 == 0 else ("prof", "plain")):
            batches = batches_fn(n)
            sync(dev)
            t0 = time.perf_counter()
            if arm == "plain":
                for x, y in batches:
                    step_fn(model, opt, x, y)
                sync(dev)
                plain.append((time.perf_counter() - t0) / n)
            else:
                with profile(model, opt, warmup=0) as p:
                    for x, y in p.wrap(batches):
                        step_fn(model, opt, x, y)
                sync(dev)
                prof_t.append((time.perf_counter() - t0) / n)
                self_ovh.append(p.report().overhead_fraction)
    a, b = statistics.median(plain), statistics.median(prof_t)
    half = statistics.median(plain[1::2]) / statistics.median(plain[0::2]) - 1 if len(plain) > 1 else float("nan")
    return {"loop": name, "plain_step_s": a, "profiled_step_s": b, "ab_overhead": b / a - 1,
            "noise_floor": half, "self_overhead_fraction": statistics.mean(self_ovh)}


EXPECTED = {"starved": "data-loading", "transfer": "transfer", "transfer_pinned": "transfer",
            "compute": "compute", "launch": "host-overhead"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/profile_gpu_results")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true", help="small sizes (CPU smoke test)")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --quick for a smoke test", file=sys.stderr)
        return 2
    dev = torch.device(a.device)
    if a.quick:
        q = dict(steps=6, warmup=2, big_batch=4, d_model=64, layers=2, batch=4, seq=32, ab_steps=5, ab_rounds=4)
    else:
        q = dict(steps=30, warmup=5, big_batch=128, d_model=1024, layers=8, batch=16, seq=512,
                 ab_steps=20, ab_rounds=6)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor() or "cpu"
    summary = [f"# gpuplan profile: prepared loops on {name}", "",
               f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}, "
               f"{os.cpu_count()} CPUs; command: `python {' '.join(sys.argv)}`", "",
               "| loop | expected | verdict | median step | data wait | transfer | fwd+bwd+opt | other | GPU busy | overhead (self) |",
               "|---|---|---|---|---|---|---|---|---|---|"]
    loops = {
        "starved": lambda: loop_starved(dev, q),
        "transfer": lambda: loop_transfer(dev, q, pinned=False),
        "transfer_pinned": lambda: loop_transfer(dev, q, pinned=True),
        "compute": lambda: loop_compute(dev, q),
        "launch": lambda: loop_launch(dev, q),
    }
    for key, fn in loops.items():
        t0 = time.perf_counter()
        try:
            r = fn()
        except Exception as e:  # noqa: BLE001 - record and go on: one run must give all it can
            summary.append(f"| {key} | {EXPECTED[key]} | FAILED: {type(e).__name__}: {e} | | | | | | | |")
            print(f"{key}: FAILED {e!r}", flush=True)
            continue
        (out / f"{key}.txt").write_text(render_text(r) + "\n")
        (out / f"{key}.json").write_text(render_json(r) + "\n")
        try:
            plot_profile(r, out / f"{key}.png")
        except Exception as e:  # noqa: BLE001
            print(f"{key}: plot failed: {e!r}")
        b = r.breakdown
        comp = (b["forward"] or 0) + (b["backward"] or 0) + (b["optimizer"] or 0)
        busy = f"{r.gpu.busy_fraction_min:.0%}-{r.gpu.busy_fraction_max:.0%}" if r.gpu else "-"
        summary.append(f"| {key} | {EXPECTED[key]} | {r.verdict} | {r.step_time_s * 1e3:.2f} ms | "
                       f"{b['data_wait'] if b['data_wait'] is None else format(b['data_wait'], '.1%')} | "
                       f"{b['transfer']:.1%} | {comp:.1%} | {b['other']:.1%} | {busy} | {r.overhead_fraction:.2%} |")
        print(f"{key}: {r.verdict} (expected {EXPECTED[key]}), {time.perf_counter() - t0:.1f} s", flush=True)

    summary += ["", "## Overhead A/B (interleaved rounds, one synchronize per round in both arms)", "",
                "| loop | plain step | profiled step | A/B | noise floor (plain halves) | self-measured |",
                "|---|---|---|---|---|---|"]
    ab = [
        ("compute", lambda: (lambda m: (m, torch.optim.AdamW(m.parameters())))(transformer(q).to(dev)),
         lambda n: compute_batches(dev, q, n), compute_step),
        ("launch", lambda: (lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.01)))(tiny_deep().to(dev)),
         lambda n: launch_batches(dev, n), launch_step),
    ]
    results = []
    for key, make, batches_fn, step_fn in ab:
        try:
            res = ab_overhead(key, dev, q, make, batches_fn, step_fn)
        except Exception as e:  # noqa: BLE001
            summary.append(f"| {key} | FAILED: {type(e).__name__}: {e} | | | | |")
            continue
        results.append(res)
        summary.append(f"| {key} | {res['plain_step_s'] * 1e3:.3f} ms | {res['profiled_step_s'] * 1e3:.3f} ms | "
                       f"{res['ab_overhead']:+.2%} | {res['noise_floor']:+.2%} | {res['self_overhead_fraction']:.2%} |")
        print(f"A/B {key}: {res}", flush=True)
    (out / "overhead_ab.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
