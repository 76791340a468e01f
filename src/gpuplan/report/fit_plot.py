"""``gpuplan fit --plot``: the per-GPU memory breakdown, stacked, with each GPU's capacity.

Rendering only; matplotlib is imported when a plot is drawn (an optional extra) and the file is
written atomically.
"""

from __future__ import annotations

import io

from ..errors import MissingDependencyError
from ..fit import Plan
from ..units import ByteUnits

__all__ = ["plot_plan"]

_TRAIN_KEYS = (("weights_bytes", "weights"), ("gradients_bytes", "gradients"),
               ("master_weights_bytes", "fp32 master"), ("optimizer_bytes", "optimizer states"),
               ("gathered_params_bytes", "gathered units"), ("activations_bytes", "activations"),
               ("temporaries_bytes", "temporaries"), ("overhead_bytes", "runtime overhead"))
_INFER_KEYS = (("weights_bytes", "weights"), ("kv_cache_bytes", "KV cache"),
               ("activations_bytes", "activations"), ("overhead_bytes", "runtime overhead"))


def plot_plan(p: Plan, path: str, *, units: ByteUnits = "GB") -> None:
    """One stacked bar per mode (train, infer), one capacity line per GPU of the plan."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", "gpuplan fit --plot") from e
    from .._io import write_atomic

    scale = 1e9 if units == "GB" else 2 ** 30
    bars = []
    if p.train is not None:
        bars.append((f"train\n{p.train.precision}, {p.train.optimizer}\npeak: {p.train.peak_phase}",
                     p.train.per_gpu(), _TRAIN_KEYS))
    if p.infer is not None:
        bars.append((f"infer\n{p.infer.precision}\npeak: {p.infer.peak_phase}",
                     p.infer.per_gpu(), _INFER_KEYS))
    fig, ax = plt.subplots(figsize=(3.2 + 2.2 * len(bars), 5.2))
    cmap = plt.get_cmap("tab10")
    order = [label for _, label in _TRAIN_KEYS] + ["KV cache"]
    colors = {label: cmap(i % 10) for i, label in enumerate(order)}
    labels_done: set[str] = set()
    for x, (name, parts, keys) in enumerate(bars):
        bottom = 0.0
        for i, (key, label) in enumerate(keys):
            v = parts.get(key, 0) / scale
            if v <= 0:
                continue
            ax.bar(x, v, bottom=bottom, width=0.55, color=colors[label],
                   label=None if label in labels_done else label)
            labels_done.add(label)
            bottom += v
        ax.text(x, bottom, f"{bottom:.1f}", ha="center", va="bottom", fontsize=8)
    top = max((sum(parts.get(k, 0) for k, _ in keys) for _, parts, keys in bars), default=0)
    for j, g in enumerate(p.gpus):
        cap = g.usable_bytes / scale
        ax.axhline(cap, color="0.3", linestyle=("--", ":", "-.")[j % 3], linewidth=1)
        ax.text(len(bars) - 0.5, cap, f" {g.name}", va="bottom", ha="right", fontsize=7)
        top = max(top, g.usable_bytes)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    ax.set_ylim(0, top / scale * 1.12)
    ax.set_ylabel(f"per GPU ({units})")
    job = p.job
    ax.set_title(f"{p.model.name}: batch {job.batch}" + (f" x seq {job.seq}" if job.seq else ""),
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    write_atomic(path, buf.getvalue())
