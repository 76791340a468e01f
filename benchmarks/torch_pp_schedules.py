"""torch.distributed.pipelining's 1F1B and Interleaved1F1B runtimes replayed on a pipeline of
equal stages, against the ideal schedule gpuplan times ((m V + p - 1) (F + B) / V): what the
runtime's blocking send/recv batches and its time-step lockstep add (issue 31, the torchtitan
405B PP rows; the finding is noted in validate_speed.py ``_torch_pp_gap``).

The runtimes as in torch/distributed/pipelining/schedules.py of the late-2024 torch the rows
ran (torch 1963fc8, 2024-12-23; read in undated stored copies of pytorch/pytorch that agree):

- ``Schedule1F1B._step_microbatches``: ``min(m, p - rank)`` warm-up forwards, each after its
  activation recv is waited for, its send fired and waited after the next forward; the last
  warm-up send fused with the first backward's gradient recv (``fwd_send_bwd_recv``), then
  1B1F with each backward's send fused with the next forward's recv (``bwd_send_fwd_recv``),
  every batch waited for before the compute that follows; cool-down backwards.
- ``PipelineScheduleMulti._step_microbatches`` (Interleaved1F1B): the per-rank grid of
  ``_get_1f1b_rank_ops`` (``rank`` idle steps, ``(V - 1) mpr + 2 (p - 1 - rank)`` warm-up
  forwards capped at ``m V``, idle steps to the first backward at ``V p + 2 (p - 1 - rank)``,
  then F/B pairs, then idle/B pairs) run one time step at a time: each step's own sends and the
  recvs of what the neighbours send at that step batched and waited for before the next step.

A p2p batch completes when each of its ops' peers has posted the matching op (NCCL send/recv
rendezvous), plus ``hop`` for the transfer. Standard library only.

Run: ``python benchmarks/torch_pp_schedules.py`` (prints the ratios to the ideal).
"""

from __future__ import annotations

from collections import defaultdict


def interleaved_grid(pp: int, v: int, m: int) -> dict[int, list]:
    """ScheduleInterleaved1F1B's pipeline_order: rank -> [("F"|"B", stage, mb) or None]."""
    rounds = max(1, m // pp)
    mpr = m // rounds
    order = {}
    for r in range(pp):
        warm = min((v - 1) * mpr + 2 * (pp - 1 - r), m * v)
        fb = v * m - warm
        fmb: dict[int, int] = defaultdict(int)
        bmb: dict[int, int] = defaultdict(int)
        ops: list = [None] * r
        post = (v * pp + 2 * (pp - 1 - r)) - (warm + r)
        for op in range(warm + fb + warm):
            if op < warm + fb:
                s = ((op // mpr) % v) * pp + r
                ops.append(("F", s, fmb[s]))
                fmb[s] += 1
                if op == warm - 1:
                    ops += [None] * post
            else:
                ops.append(None)
            if op >= warm:
                s = (v - 1 - ((op - warm) // mpr) % v) * pp + r
                ops.append(("B", s, bmb[s]))
                bmb[s] += 1
        order[r] = ops
    return order


def lockstep_s(pp: int, v: int, m: int, f: float, b: float, hop: float = 0.0) -> float:
    """The step of PipelineScheduleMulti's time-step runtime over :func:`interleaved_grid`
    (``f``, ``b``: one chunk's forward and backward)."""
    order = interleaved_grid(pp, v, m)
    last = pp * v - 1
    end = [0.0] * pp
    for t in range(max(len(o) for o in order.values())):
        act = [order[r][t] if t < len(order[r]) else None for r in range(pp)]
        done = [end[r] + (0.0 if a is None else (f if a[0] == "F" else b))
                for r, a in enumerate(act)]
        new = []
        for r in range(pp):
            peers = set()
            a = act[r]
            if a is not None and a[0] == "F" and a[1] < last:
                peers.add((a[1] + 1) % pp)
            if a is not None and a[0] == "B" and a[1] > 0:
                peers.add((a[1] - 1) % pp)
            for n in ((r - 1) % pp, (r + 1) % pp):
                c = act[n]
                if c is not None and ((c[0] == "F" and c[1] < last and (c[1] + 1) % pp == r)
                                      or (c[0] == "B" and c[1] > 0 and (c[1] - 1) % pp == r)):
                    peers.add(n)
            new.append(max([done[r]] + [done[n] for n in peers]) + (hop if peers else 0.0))
        end = new
    return max(end)


def _one_f1b_programs(pp: int, m: int, f: float, b: float) -> dict[int, list]:
    """Schedule1F1B's loop per rank: ("C", s) compute, ("S", ops) fire, ("W", ops) wait for
    fired ops, ("P", ops) fire and wait."""
    progs = {}
    for r in range(pp):
        first, final = r == 0, r == pp - 1
        fr = (lambda k: []) if first else (lambda k: [("rF", k)])
        fs = (lambda k: []) if final else (lambda k: [("sF", k)])
        br = (lambda k: []) if final else (lambda k: [("rB", k)])
        bs = (lambda k: []) if first else (lambda k: [("sB", k)])
        p: list = []
        warm, fw, bw, work, left = min(m, pp - r), 0, 0, None, []
        for _ in range(warm):
            p += [("P", fr(fw)), ("C", f)]
            if work is not None:
                p.append(("W", work))
                work = None
            if fw != warm - 1:
                work = fs(fw)
                p.append(("S", work))
            else:
                left = fs(fw)
            fw += 1
        while True:
            p += [("P", left + br(bw)), ("C", b)]
            sent = bs(bw)
            bw += 1
            if fw == m:
                break
            p += [("P", sent + fr(fw)), ("C", f)]
            left = fs(fw)
            fw += 1
        work = sent
        p.append(("S", work))
        while bw < m:
            p += [("P", br(bw)), ("C", b), ("W", work)]
            work = bs(bw)
            p.append(("S", work))
            bw += 1
        progs[r] = p + [("W", work)]
    return progs


def one_f1b_s(pp: int, m: int, f: float, b: float, hop: float = 0.0) -> float:
    """The step of Schedule1F1B's loop (``f``, ``b``: a stage's forward and backward)."""
    progs = _one_f1b_programs(pp, m, f, b)
    peer = {"rF": (-1, "sF"), "sF": (1, "rF"), "rB": (1, "sB"), "sB": (-1, "rB")}
    pc = dict.fromkeys(progs, 0)
    now = dict.fromkeys(progs, 0.0)
    posted: dict = {}
    moved = True
    while moved:
        moved = False
        for r, prog in progs.items():
            while pc[r] < len(prog):
                kind, x = prog[pc[r]]
                if kind == "C":
                    now[r] += x
                elif kind in ("S", "P") and not all((r, o) in posted for o in x):
                    for o in x:
                        posted[(r, o)] = now[r]
                    if kind == "S":
                        pc[r] += 1
                        moved = True
                        continue
                if kind in ("W", "P"):
                    match = [(r + peer[o[0]][0], (peer[o[0]][1], o[1])) for o in x]
                    if not all(k in posted for k in match):
                        break
                    now[r] = max([now[r]] + [max(posted[(r, o)], posted[k]) + hop
                                             for o, k in zip(x, match)])
                pc[r] += 1
                moved = True
    assert all(pc[r] == len(p) for r, p in progs.items()), "deadlock"
    return max(now.values())


def ideal_s(pp: int, v: int, m: int, f: float, b: float) -> float:
    """(m V + p - 1) chunk passes of F + B: the schedule gpuplan times (1F1B: V = 1)."""
    return (m * v + pp - 1) * (f + b)


def main() -> None:
    # the 405B rows' shape: PP 8, 8 micro-batches; a stage's forward and backward (full
    # recompute included) in gpuplan's MicroCost ratio for TP 8, 4 x 8192 tokens (0.0418 s and
    # 0.1005 s a layer: only the ratio matters here)
    pp, m, f, b = 8, 8, 0.0418, 0.1005
    print(f"Schedule1F1B loop / ideal: {one_f1b_s(pp, m, f, b) / ideal_s(pp, 1, m, f, b):.4f}")
    for v in (1, 2):
        r = lockstep_s(pp, v, m, f / v, b / v) / ideal_s(pp, v, m, f / v, b / v)
        print(f"Interleaved1F1B lockstep (V={v}) / ideal: {r:.4f}")
    h = 1e-3
    hops = (one_f1b_s(pp, m, f, b, h) - one_f1b_s(pp, m, f, b)) / h
    print(f"Schedule1F1B send/recv hops on the critical path: {hops:.0f} (gpuplan charges "
          f"2 x m = {2 * m})")


if __name__ == "__main__":
    main()
