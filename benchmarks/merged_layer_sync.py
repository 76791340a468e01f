"""Does the dropless router's host sync undo the batch-level EP overlap? (issue 30, the H100
Qwen3-30B-A3B FP8-CS rows of benchmarks/validate_fp8.py.)

An event-by-event simulation of the steady state of Megatron-Core's combined 1F1B: one merged
layer, the forward of one micro-batch (F) beside the backward of another (B), issued by one host
thread in TransformerLayerSchedulePlan.run's order (megatron/core/models/common/
model_chunk_schedule_plan.py lines 176-239 at NVIDIA/Megatron-LM@0d8e0714, the 25.11 pin):

    comm: B combine bwd       | F dispatch, B dispatch bwd    | F combine
    comp: F attn, F post_attn | B mlp bwd, B mlp wgrad, F mlp | B post_attn, B attn, B attn wgrad

Each node's kernels run on its stream after the stream's previous node and after the same
micro-batch's previous node (the node's shared event, ScheduleNode / stream_acquire_context in
megatron/core/pipeline_parallel/utils.py there); the wgrad nodes (delay_wgrad_compute) wait for
their own stream only. A node starts when its first kernel is issued and ends no earlier than
its last is. The alltoall dispatcher's sync is ``d2h_event.synchronize()`` at
"before_ep_alltoall" (token_dispatcher.py lines 572 and 905-907 there: no
moe_router_padding_for_quantization at either Megatron-Bridge tag, so the sync point is not
moved to "before_permutation_1"), i.e. in the F dispatch node, on the D2H copy that post_attn
queued behind F's router: the host waits there until F's post_attn has run.

Every host and device time is gpuplan's own, per layer and micro-batch, from the rows' Jobs
(validate_fp8.job_of): the ops' issue (``Phase._host_s``) and kernel time (``Phase._device_s``),
the step-level FP8 casts, split quantizes and expert padding a quarter each to F's and B's
expert and attention nodes, a matmul's backward halved into its dgrad and wgrad (gpuplan's
rule), one all-to-all the no-overlap Job's EP time over its four a layer. Prints, for each
layout, the merged layer's host issue, compute-stream and communication-stream sums and the
simulated merged-layer time with and without the sync, then the most the sync adds with the
host's issue scaled 0.5-4x (:data:`SCALES`). Nothing here is fitted.

Run:  PYTHONPATH=src python benchmarks/merged_layer_sync.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import validate_fp8 as v  # noqa: E402

from gpuplan.compute import estimate_speed  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402
from gpuplan.hardware.topology import topology_for  # noqa: E402
from gpuplan.models import load_model  # noqa: E402

ATTN = ("attn.norm", "attn.qkv", "attn.qk_norm", "attn.rotary", "attn.core", "attn.out",
        "attn.residual")
ROUTER = ("mlp.norm", "moe.router", "moe.topk")
EXPERTS = ("moe.up", "moe.act", "moe.down")
WGRAD = ("attn.qkv", "attn.out", "moe.up", "moe.down")

#: (label, run id, Job overrides): the table's layout, the 25.11 config's (MBS 1, VP 12, GA 64)
#: and the 26.02 row.
CASES = (
    ("25.11, the table's MBS 2 x VP 24",
     "megatron-bridge-25.11-dgx-h100-qwen330ba3b-fp8-current-x16", {}),
    ("25.11, its config's MBS 1 x VP 12",
     "megatron-bridge-25.11-dgx-h100-qwen330ba3b-fp8-current-x16",
     {"batch": 1, "grad_accum": 64, "pp_schedule": "interleaved:12"}),
    ("26.02, MBS 1 x VP 12 (its DeepEP syncs not simulated)",
     "megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16", {}),
)


def estimate(run: dict, **over):
    job = dataclasses.replace(v.job_of(run, []), **over)
    gpu = get_gpu(run["hardware"]["gpu"])
    return estimate_speed(load_model(run["model"]["catalog"]), gpu, job, measured=None,
                          topology=topology_for(gpu, gpus_per_node=job.gpus_per_node),
                          tp_overlap=v.tp_overlap_of(run), gather_overlap=True)


def nodes(est, a2a: float, layers: int) -> list[tuple[str, str, str, float, float]]:
    """The merged layer's nodes in issue order: (name, stream, micro-batch, host s, device s)."""
    st = est.step
    per = layers * st.micro_steps

    def hd(names, phase, share=1.0):
        ops = [t for t in st.ops if t.op.name in names and t.op.phase == phase]
        return st._host_s(ops) / per * share, st._device_s(ops) / per * share

    def wgrad_split(names, phase, dw: bool):
        h = d = 0.0
        for t in st.ops:
            if t.op.name in names and t.op.phase == phase:
                half = t.op.name in WGRAD and t.op.kind == "matmul"
                share = 0.5 if half else (0.0 if dw else 1.0)
                h += st._host_s([t]) / per * share
                d += st._device_s([t]) / per * share
        return h, d

    step_ops = [t for t in st.ops if t.op.group == "dense"]
    cast = (sum(st._host_s([t]) for t in step_ops if t.op.phase == "forward") / per / 4,
            sum(st._device_s([t]) for t in step_ops if t.op.phase == "forward") / per / 4)
    grad = (sum(st._host_s([t]) for t in step_ops if t.op.phase == "backward") / per,
            sum(st._device_s([t]) for t in step_ops if t.op.phase == "backward") / per)

    def add(*parts):
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    comm = lambda p: (p[0], p[1] + a2a)  # noqa: E731
    return [
        ("B combine bwd", "comm", "B", *comm(hd(("moe.combine",), "backward", 0.5))),
        ("F attn", "comp", "F", *add(hd(ATTN, "forward"), cast)),
        ("F post_attn", "comp", "F", *add(hd(ROUTER, "forward"),
                                          hd(("moe.dispatch",), "forward", 0.5))),
        ("B mlp", "comp", "B", *add(wgrad_split(EXPERTS, "backward", False), cast,
                                    hd(("moe.combine",), "backward", 0.5))),
        ("F dispatch", "comm", "F", *comm(hd(("moe.dispatch",), "forward", 0.5))),
        ("B mlp wgrad", "comp", "-", *wgrad_split(EXPERTS, "backward", True)),
        ("B dispatch bwd", "comm", "B", *comm(hd(("moe.dispatch",), "backward", 0.5))),
        ("F mlp", "comp", "F", *add(hd(EXPERTS, "forward"), cast,
                                    hd(("moe.combine",), "forward", 0.5))),
        ("F combine", "comm", "F", *comm(hd(("moe.combine",), "forward", 0.5))),
        ("B post_attn", "comp", "B", *add(hd(ROUTER, "backward"),
                                          hd(("moe.dispatch",), "backward", 0.5))),
        ("B attn", "comp", "B", *add(wgrad_split(ATTN, "backward", False), cast, grad)),
        ("B attn wgrad", "comp", "-", *wgrad_split(ATTN, "backward", True)),
    ]


#: The host's pace against gpuplan's, scanned: how much the sync could cost at any of them.
SCALES = tuple(round(0.25 * i, 2) for i in range(2, 17))


def merged_layer_s(seq, sync: bool, layers: int = 40, warm: int = 10) -> float:
    """The steady merged layer's time over ``layers`` in a row (the first ``warm`` dropped)."""
    host = 0.0
    stream = {"comp": 0.0, "comm": 0.0}
    last = {"F": 0.0, "B": 0.0, "-": 0.0}
    done: dict[str, float] = {}
    ends = []
    for _ in range(layers):
        for name, s, mb, h, d in seq:
            if sync and name == "F dispatch":
                host = max(host, done["F post_attn"])
            start = max(host, stream[s], last[mb])
            host += h
            stream[s] = done[name] = max(start + d, host)
            if mb != "-":
                last[mb] = done[name]
        ends.append(max(stream.values()))
    return (ends[-1] - ends[warm - 1]) / (layers - warm)


def main() -> int:
    runs = {r["id"]: r for r in json.loads(v.RUNS.read_text())["runs"]}
    for label, rid, over in CASES:
        run = runs[rid]
        est = estimate(run, **over)
        lay = est.layout
        flat = estimate(run, **dict(over, ep_overlap=False)).layout
        per = lay.layout.micro_batches * lay.stage_layers
        a2a = flat.ep_comm_s / per / 4
        seq = nodes(est, a2a, load_model(run["model"]["catalog"]).architecture.num_layers)
        host = sum(n[3] for n in seq)
        comp = sum(n[4] for n in seq if n[1] == "comp")
        comm = sum(n[4] for n in seq if n[1] == "comm")
        step = lay.tokens_per_step / est.tokens_per_s
        print(f"{label}: host {host * 1e3:.2f} ms, compute stream {comp * 1e3:.2f} ms, "
              f"communication stream {comm * 1e3:.2f} ms a merged layer; simulated "
              f"{merged_layer_s(seq, True) * 1e3:.2f} ms with the sync, "
              f"{merged_layer_s(seq, False) * 1e3:.2f} ms without; gpuplan's step over its "
              f"{per} layer passes {step / per * 1e3:.2f} ms")
        worst = max((merged_layer_s(scaled, True) / merged_layer_s(scaled, False) - 1, k)
                    for k in SCALES for scaled in [[(n, s, m, h * k, d) for n, s, m, h, d in seq]])
        print(f"    the host's issue scaled {SCALES[0]}-{SCALES[-1]}x: the sync adds at most "
              f"{worst[0]:.1%} (at {worst[1]}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
