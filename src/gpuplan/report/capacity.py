"""Rendering of ``gpuplan capacity``: the latency percentiles, throughput, occupancy, KV use and
SLO verdict of a simulated deployment as a rich table; the layouts a search tried; and
(``--plot``) p50/p99 TTFT and TPOT against the request rate with the SLO lines and the knee.
matplotlib is imported when drawn."""

from __future__ import annotations

import io
from typing import Sequence

from .._io import write_atomic
from ..capacity import CapacityResult
from ..capacity._plan import knee as knee_of
from ..errors import MissingDependencyError
from ._console import console_for

__all__ = ["render_capacity", "render_candidates", "render_disaggregated", "render_sweep",
           "plot_rates"]


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def render_capacity(r: CapacityResult, *, max_rate: float | None = None) -> None:
    from rich.table import Table

    con = console_for()
    lay = r.layout
    w = r.workload
    load = (f"{w['rate']:g} req/s ({w['arrivals']})" if w.get("rate") else
            f"concurrency {w['concurrency']}" if w.get("concurrency") else "trace")
    con.print(f"{r.model} on {r.gpus} x {r.gpu} -- {r.engine} {r.engine_version}, TP "
              f"{lay['tp']} x PP {lay['pp']} x {lay['replicas']} replica(s); {load}, "
              f"{w['requests']} requests of {w['mean_input_tokens']:.0f} in / "
              f"{w['mean_output_tokens']:.0f} out (mean)")
    t = Table(show_header=True, header_style="bold")
    for col in ("latency", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="right" if col != "latency" else "left")
    for name, s in (("TTFT", r.ttft_s), ("TPOT", r.tpot_s), ("ITL", r.itl_s), ("E2E", r.e2e_s),
                    ("queue", r.queue_s)):
        t.add_row(name, _ms(s.mean), _ms(s.p50), _ms(s.p90), _ms(s.p99))
    con.print(t)
    th = r.throughput
    con.print(f"throughput: {th['requests_per_s']:.3g} req/s, {th['input_tokens_per_s']:.4g} "
              f"input tok/s, {th['output_tokens_per_s']:.4g} output tok/s")
    con.print(f"in the system (per replica): {r.concurrency_mean:.2f} mean ({r.running_mean:.2f} "
              f"running, {r.waiting_mean:.2f} waiting); preemptions {r.preemptions}; "
              f"{r.steps} steps")
    kv = r.kv
    con.print(f"KV cache: {kv['kv_tokens']} tokens ({kv['kv_blocks']} blocks of "
              f"{kv['block_size']}), max concurrency {kv['max_concurrency']:.2f} at max_model_len;"
              f" used {kv['utilization_mean']:.1%} mean, {kv['utilization_peak']:.1%} peak")
    if r.slo is not None and r.slo.given:
        verdict = "meets" if r.meets_slo else "MISSES"
        con.print(f"SLO (p{r.slo.percentile:g}): {verdict}; attainment {r.attainment:.1%}, "
                  f"goodput {r.goodput_requests_per_s:.3g} req/s")
    if max_rate is not None:
        con.print(f"max rate within the SLO: {max_rate:.3g} req/s")
    if r.cost_per_m_output_tokens is not None:
        con.print(f"cost: ${r.cost_per_m_output_tokens:.3g} per million output tokens at "
                  f"${r.price_per_gpu_hour:g}/GPU-hour")
    for n in r.notes:
        con.print(f"note: {n}")


def render_disaggregated(r: CapacityResult, dis: dict, agg: CapacityResult | None) -> None:
    """The disaggregated split (its pools, the KV transfer) beside the best aggregated
    deployment, then the split's simulated latencies."""
    from rich.table import Table

    con = console_for()
    p, d, x = dis["prefill"], dis["decode"], dis["transfer_s"]
    t = Table(title="disaggregated prefill/decode against aggregated", header_style="bold")
    for col in ("deployment", "GPUs", "p99 TTFT", "p99 TPOT", "$/M out"):
        t.add_column(col, justify="right" if col != "deployment" else "left")

    def cost(c):
        return "-" if c is None else f"{c:.3g}"
    t.add_row(f"prefill {p['replicas']} x TP {p['tp']} + decode {d['replicas']} x TP {d['tp']}",
              str(r.gpus), _ms(r.ttft_s.p99), _ms(r.tpot_s.p99),
              cost(r.cost_per_m_output_tokens))
    if agg is not None:
        lay = agg.layout
        t.add_row(f"aggregated {lay['replicas']} x TP {lay['tp']} x PP {lay['pp']}",
                  str(agg.gpus), _ms(agg.ttft_s.p99), _ms(agg.tpot_s.p99),
                  cost(agg.cost_per_m_output_tokens))
    else:
        t.add_row("aggregated: none meets the SLO", "-", "-", "-", "-")
    con.print(t)
    link = dis["link"]
    con.print(f"KV transfer over {link['name']} ({link['bandwidth'] / 1e9:.0f} GB/s per GPU): "
              f"{dis['kv_bytes_per_request_mean'] / 2**20:.1f} MiB a request, "
              f"{_ms(x['mean'])} mean, {_ms(x['p99'])} p99")
    render_capacity(r)


def render_candidates(cands: Sequence) -> None:
    from rich.table import Table

    t = Table(title="layouts tried (fewest replicas meeting the SLO per TP)", header_style="bold")
    for col in ("TP", "PP", "replicas", "GPUs", "meets", "p99 TTFT", "p99 TPOT", "$/M out",
                "KV / budget"):
        t.add_column(col, justify="right")
    for c in cands:
        d = c.to_dict()
        cost = d["cost_per_m_output_tokens"]
        v = d.get("variant") or {}
        knobs = ", ".join(f"{'KV ' + v['kv_dtype'] if k == 'kv_dtype' else f'{x} tok/step'}"
                          for k, x in v.items()) or "defaults"
        t.add_row(str(d["tp"]), str(d["pp"]), str(d["replicas"]), str(d["gpus"]),
                  "yes" if d["meets_slo"] else "no", _ms(d["ttft_p99_s"]), _ms(d["tpot_p99_s"]),
                  "-" if cost is None else f"{cost:.3g}", knobs)
    console_for().print(t)


def render_sweep(sw: dict) -> None:
    """``--sweep``: the latency percentiles at each load, the knee marked."""
    from rich.table import Table

    t = Table(title=f"sweep over the {sw['load']} (knee: p99 TTFT above 3x the lowest load's)",
              header_style="bold")
    for col in (sw["load"], "req/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99",
                "SLO"):
        t.add_column(col, justify="right")
    for i, p in enumerate(sw["points"]):
        ok = p["meets_slo"]
        t.add_row(f"{p['load']:g}" + (" knee" if i == sw["knee"] else ""),
                  f"{p['requests_per_s']:.3g}", _ms(p["ttft_s"]["p50"]), _ms(p["ttft_s"]["p99"]),
                  _ms(p["tpot_s"]["p50"]), _ms(p["tpot_s"]["p99"]), _ms(p["e2e_s"]["p99"]),
                  "-" if ok is None else "yes" if ok else "no")
    console_for().print(t)


def plot_rates(rows: Sequence[tuple[float, CapacityResult]], path: str, *, slo=None) -> None:
    """p50 and p99 TTFT and TPOT against the rate; the knee (where p99 TTFT first exceeds three
    times its lowest-rate value) marked; the SLO targets as lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", "gpuplan capacity --plot") from e
    rates = [x for x, _ in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, target in ((a1, "ttft_s", getattr(slo, "ttft_s", None)),
                            (a2, "tpot_s", getattr(slo, "tpot_s", None))):
        for q, style in (("p50", "-"), ("p99", "--")):
            ax.plot(rates, [getattr(getattr(r, key), q) for _, r in rows], style, label=q)
        if target is not None:
            ax.axhline(target, color="red", linewidth=1, label="SLO")
        ax.set_xlabel("requests/s")
        ax.set_ylabel(key.replace("_s", " (s)"))
        ax.legend(fontsize=7)
    k = knee_of(rows)
    knee = None if k is None else rows[k][0]
    if knee is not None:
        for ax in (a1, a2):
            ax.axvline(knee, color="0.5", linestyle=":", linewidth=1)
        a1.text(knee, a1.get_ylim()[1] * 0.9, " knee", fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    write_atomic(path, buf.getvalue())
