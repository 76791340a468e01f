"""Where gpuplan's TensorRT-LLM serving steps go fast under load (issues 29 and 31): the online rows
of TensorRT-LLM's perf overview beside the offline rows of the same page, and what TensorRT-LLM's
own code does per request and per iteration that the step model does or does not carry.

Three sections, all from the model and the published figures, nothing fitted:

* **Online** (TensorRT-LLM 0.14 behind Triton's tensorrtllm_backend, streamed; serving_runs.json,
  every row at a stated rate): the simulation's steps split into decode-only and mixed ones, the
  simulated and measured mean ITL, the gap, the requests in flight by Little's law on the measured
  figures, and the gap per request in flight; beside it the request rate the server completed
  (output tokens/s over the output length) against the rate the table states.
* **Offline** (TensorRT-LLM 0.17's trtllm-bench, non-streamed, every request at once: runs.json's
  ``tensorrt-llm`` serving rows, plus the table's decode-heavy 128/2048 rows): simulated over
  measured output tokens/s, and what the gap is per sequence per step at the simulation's batch.
* **A GEMM at 1-256 rows on an H100** (published/hopper_small_m_gemm.json: cuBLAS bf16, CUTLASS
  and DeepGEMM FP8, as vLLM pull requests printed them): each time against its one-row time,
  beside the speed model's time for the same M x N x K (reading 2 of the conclusion).
* **When the rated runs ended**: each online row's makespan against its arrivals' span plus
  one mean request, the test of fixed lengths at a stated rate.
* **An engine batch other than 0.14's default** (the four 202/214 "INF" rows simulated at a
  max_batch_size of 256 and 128 beside trtllm-build 0.14's 2048): what an unstated batch limit
  would do to the rows' TTFT, ITL and throughput.
* **Per-request work** of TensorRT-LLM's executor loop and of Triton's streaming path at the
  0.14 release, sized from first principles at 64 sequences where it can be.

    PYTHONPATH=src python benchmarks/trtllm_load_breakdown.py [--write]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from gpuplan.capacity import _cost, capacity  # noqa: E402
from gpuplan.compute import default_efficiency, device_from_gpu, time_ops  # noqa: E402
from gpuplan.compute.flops import Op  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402
from gpuplan.job import Job  # noqa: E402
from gpuplan.models import load_model  # noqa: E402

import validate_capacity  # noqa: E402
from validate_speed import serving_in_flight  # noqa: E402

SERVING = HERE / "published" / "serving_runs.json"
RUNS = HERE / "published" / "runs.json"
OUT_MD = HERE / "trtllm_load_breakdown.md"
GEMMS = HERE / "published" / "hopper_small_m_gemm.json"
PERF = ("NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md "
        "@258c7540c03517def55d9a5aadfa9288af474e1b")
#: perf-overview.md @258c754, "Preparing a Dataset": $num_requests by input/output length
NUM_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000,
                (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000,
                (20000, 2000): 1000}
#: perf-overview.md @258c754, "Throughput Measurements" (v0.17, FP8, output tokens/s): the
#: decode-heavy 128/2048 rows runs.json does not hold (model, GPU, TP, measured)
DECODE_HEAVY = (("llama-3.1-8b", "H100-SXM-80GB", 1, 21109.38),
                ("llama-3.1-70b", "H100-SXM-80GB", 4, 11511.93))


def achieved_rate(srow: dict) -> float:
    """Requests/s the server completed: the measured output tokens/s over the output length."""
    return srow["measured"]["output_tokens_per_s"]["value"] / srow["output_len"]


def gap_per_request_us(predicted_ms: float, measured_ms: float, in_flight: float) -> float:
    """The measured minus simulated mean ITL, per request in flight, in microseconds."""
    return (measured_ms - predicted_ms) / in_flight * 1e3


def offline_gap_per_seq_us(step_ms: float, simulated: float, measured: float,
                           batch: float) -> float:
    """What the measured throughput implies per sequence per step beyond the simulated step:
    the step that gives the measured throughput at the same batch is ``step x simulated /
    measured``; the difference over the batch, in microseconds."""
    return step_ms * (simulated / measured - 1.0) / batch * 1e3


def logits_pass_s(seqs: int, vocab: int, bytes_per_logit: int, bandwidth: float,
                  passes: int = 2) -> float:
    """One read and one write (``passes``) of ``seqs`` rows of logits over the vocabulary: the
    least a sampler's pass over them moves, at ``bandwidth`` bytes/s."""
    return passes * seqs * vocab * bytes_per_logit / bandwidth


def short_of_rate(rows: list[dict], share: float = 0.9, queue: float = 1.5) -> list[dict]:
    """Rows whose server completed under ``share`` of the stated rate while their measured TTFT
    stayed within ``queue`` x the same configuration's TTFT at its lowest rate (no queue built
    up: the requests were not arriving faster than they were served). A configuration is the
    row id less its ``-qps<N>`` tail."""
    base: dict[str, dict] = {}
    for r in rows:
        key = r["id"].rsplit("-qps", 1)[0]
        if key not in base or r["qps"] < base[key]["qps"]:
            base[key] = r
    return [r for r in rows if r["achieved"] < share * r["qps"]
            and r["ttft"] <= queue * base[r["id"].rsplit("-qps", 1)[0]]["ttft"]]




def makespan_excess(srow: dict) -> tuple[float, float]:
    """How much later a rated row's run ended than fixed lengths allow, and the Poisson spread of
    that end: the makespan the server's completed rate gives (n over the completed rate) less
    the arrivals' span (n / rate) plus one request's mean latency (TTFT + (o - 1) x ITL), and
    the standard deviation of n exponential gaps at the rate (sqrt(n) / rate), in seconds. With
    fixed lengths and no queue the last request ends one mean latency after it arrives."""
    m, n, o = srow["measured"], srow["num_requests"], srow["output_len"]
    rate = srow["load"]["request_rate"]
    latency_s = (m["ttft_ms"]["value"] + (o - 1) * m["itl_ms"]["value"]) / 1e3
    return n / achieved_rate(srow) - (n / rate + latency_s), n ** 0.5 / rate


def makespan_rows(queue: float = 1.5) -> list[dict]:
    """Every rated online row with no queue (TTFT within ``queue`` x its configuration's TTFT
    at the lowest rate, as :func:`short_of_rate`), with its :func:`makespan_excess`."""
    rows = [r for r in json.loads(SERVING.read_text())["runs"]
            if r["source_group"] == "tensorrt-llm-online" and r["load"]["request_rate"]]
    base: dict[str, float] = {}
    for r in sorted(rows, key=lambda r: -r["load"]["request_rate"]):
        base[r["id"].rsplit("-qps", 1)[0]] = r["measured"]["ttft_ms"]["value"]
    out = []
    for r in rows:
        if r["measured"]["ttft_ms"]["value"] <= queue * base[r["id"].rsplit("-qps", 1)[0]]:
            excess, sd = makespan_excess(r)
            out.append({"id": r["id"], "qps": r["load"]["request_rate"], "excess_s": excess,
                        "sd_s": sd, "varied": r["id"].rsplit("-qps", 1)[0].endswith("202-214")})
    return out

#: max_batch_size values an engine might have been built with instead of trtllm-build 0.14's
#: 2048 (release-notes.md @b47198a2; 256 was the default from 0.11.0 to 0.13): the page states
#: none for its online table
BATCH_LIMITS = (256, 128)
#: the figures the online table quotes per row and the simulation predicts
FIGURES = ("ttft_ms", "itl_ms", "output_tokens_per_s")


def batch_limited(srow: dict, max_num_seqs: int) -> dict:
    """``srow`` simulated as validate_capacity.py does, but with the engine's max_batch_size at
    ``max_num_seqs`` (gpuplan capacity's ``--max-num-seqs``); the row itself is not changed."""
    flags = dict(srow.get("server_flags") or {}, max_num_seqs=max_num_seqs)
    return validate_capacity.predict(dict(srow, server_flags=flags)).predicted


def toward(measured: float, before: float, after: float) -> bool:
    """Whether ``after`` is nearer ``measured`` than ``before`` is."""
    return abs(after - measured) < abs(before - measured)


def batch_limit_rows(limits: tuple[int, ...] = BATCH_LIMITS) -> list[dict]:
    """The 202/214 "INF" rows (every request at once), simulated at the 0.14 default and at
    each of ``limits``."""
    out = []
    for srow in json.loads(SERVING.read_text())["runs"]:
        if (srow["source_group"] != "tensorrt-llm-online" or srow["load"]["request_rate"]
                is not None or not srow["id"].endswith("-202-214-qpsinf")):
            continue
        meas = {k: srow["measured"][k]["value"] for k in FIGURES}
        sims = {None: validate_capacity.predict(srow).predicted}
        sims.update({b: batch_limited(srow, b) for b in limits})
        out.append({"id": srow["id"], "meas": meas, "sims": sims})
    return out


def _logged(fn):
    """Run ``fn`` with every step's (decodes, prompt tokens, seconds) recorded."""
    log: list[tuple[int, int, float]] = []
    orig = _cost.StepCost.step_s

    def step_s(self, decodes, context_sum, chunks):
        t = orig(self, decodes, context_sum, chunks)
        log.append((decodes, sum(n for n, _ in chunks), t))
        return t

    _cost.StepCost.step_s = step_s
    try:
        return fn(), log
    finally:
        _cost.StepCost.step_s = orig


def online_rows() -> list[dict]:
    """Every TensorRT-LLM 0.14 online row at a stated rate, simulated as validate_capacity.py
    does, with its steps split."""
    out = []
    for srow in json.loads(SERVING.read_text())["runs"]:
        if srow["source_group"] != "tensorrt-llm-online" or srow["load"]["request_rate"] is None:
            continue
        row, log = _logged(lambda: validate_capacity.predict(srow))
        dec = [s for s in log if not s[1]]
        mixed = [s for s in log if s[1]]
        pred, meas = row.predicted["itl_ms"], srow["measured"]["itl_ms"]["value"]
        flight = serving_in_flight(srow)
        out.append({"id": srow["id"], "qps": srow["load"]["request_rate"],
                    "achieved": achieved_rate(srow), "in_flight": flight,
                    "decode_b": statistics.mean(s[0] for s in dec),
                    "decode_ms": 1e3 * statistics.mean(s[2] for s in dec),
                    "mixed_share": len(mixed) / len(log),
                    "mixed_ms": 1e3 * statistics.mean(s[2] for s in mixed) if mixed else 0.0,
                    "pred": pred, "meas": meas, "ttft": srow["measured"]["ttft_ms"]["value"],
                    "gap_us": gap_per_request_us(pred, meas, flight)})
    return out


def gpu_pairs(online: list[dict], max_in_flight: float = 64.0) -> list[tuple[str, dict, dict]]:
    """The rows run at the same model, layout, lengths and rate on the H100 and on the H200 (the
    same TensorRT-LLM 0.14 and Triton software), both with at most ``max_in_flight`` requests in
    flight: (the id with its GPU dropped, the H100 row, the H200 row), in the H100 rows' order."""
    h200 = {r["id"]: r for r in online if "-h200-" in r["id"]}
    out = []
    for r in online:
        twin = h200.get(r["id"].replace("-h100-", "-h200-")) if "-h100-" in r["id"] else None
        if twin and max(r["in_flight"], twin["in_flight"]) <= max_in_flight:
            out.append((r["id"].replace("-h100-", "-"), r, twin))
    return out


def host_cost_contradicted(h100: dict, h200: dict, margin_ms: float = 0.0) -> bool:
    """A pair a host cost per request in flight cannot explain: the H200 row holds no more
    requests in flight than the H100 row, yet its ITL gap (measured - simulated) is larger by more
    than ``margin_ms`` (1 ms: beyond both measured ITLs' rounding to whole milliseconds)."""
    return (h200["in_flight"] <= h100["in_flight"]
            and h200["meas"] - h200["pred"] > h100["meas"] - h100["pred"] + margin_ms)


def _pairs_section(online: list[dict]) -> list[str]:
    pairs = gpu_pairs(online)
    against = [k for k, a, b in pairs if host_cost_contradicted(a, b)]
    beyond = [k for k, a, b in pairs if host_cost_contradicted(a, b, margin_ms=1.0)]
    lines = ["## The same load on an H100 and an H200", "",
             "The same rows on both GPUs (the same TensorRT-LLM 0.14, Triton and client; at most 64 "
             "requests in flight): a host cost per request in flight is the same on both hosts, so "
             "it leaves the larger gap where more requests are in flight.", "",
             "| row | in flight H100 / H200 | ITL gap ms H100 / H200 |", "|---|---|---|"]
    for key, a, b in pairs:
        lines.append(f"| {key.removeprefix('trtllm-online-')} | {a['in_flight']:.1f} / "
                     f"{b['in_flight']:.1f} | {a['meas'] - a['pred']:+.2f} / "
                     f"{b['meas'] - b['pred']:+.2f} |")
    whole = [r for r in online if r["in_flight"] <= 64 and abs(r["meas"] - r["pred"]) <= 0.5]
    single = {gpu: [r["meas"] - r["pred"] for r in online
                    if f"-{gpu}-" in r["id"] and r["in_flight"] <= 1.5] for gpu in ("h100", "h200")}
    lines += ["", f"{len(against)} of {len(pairs)} pairs have the larger gap on the H200 with no "
              f"more requests in flight there, {len(beyond)} by more than 1 ms (beyond the two "
              "ITLs' rounding: the table's ITLs are whole milliseconds, so each gap is itself "
              f"+-0.5 ms; {len(whole)} of the rows at most 64 in flight are simulated within "
              "it). A cost per request in flight alone cannot make these gaps: what makes them "
              "differs between the two GPUs (or their hosts), not with the requests in flight "
              "only. At no more than 1.5 requests in flight the gaps are "
              f"{min(single['h100']):+.2f} to {max(single['h100']):+.2f} ms on the H100 "
              f"({len(single['h100'])} rows) and {min(single['h200']):+.2f} to "
              f"{max(single['h200']):+.2f} ms on the H200 ({len(single['h200'])} rows).", ""]
    return lines


def linear_op(m: int, n: int, k: int, width: float) -> Op:
    """One forward linear of ``m`` rows over an N x K weight of ``width`` bytes an element (the
    activations at the same width), as flops._mm counts it: input, weight and output once."""
    return Op(name="mlp.up", op_class="mlp", kind="matmul", phase="forward", count=1,
              flops=2.0 * m * n * k, counted_flops=2.0 * m * n * k,
              bytes=width * (m * k + n * k + m * n), parallel_work=m * n, kernels=1,
              weight_elements=n * k, shape=(1, m, k, n), weight_bytes=width * n * k)


def gemm_rows(path: Path = GEMMS) -> list[dict]:
    """Every row of hopper_small_m_gemm.json: its time (us; from TFLOP/s as 2 M N K / rate), its
    ratio to the same source's, kernel's and shape's fewest-row time, and the speed model's
    time for the same product on an H100-SXM-80GB (time_ops over :func:`linear_op`, the job's
    default efficiency: the 16-bit GEMV share for bf16, the 1-byte default for FP8)."""
    dev = device_from_gpu(get_gpu("H100-SXM-80GB"))
    eff = default_efficiency(dev)
    out = []
    for r in json.loads(path.read_text())["rows"]:
        us = r["us"] if "us" in r else 2 * r["m"] * r["n"] * r["k"] / r["tflops"] / 1e6
        width = 2.0 if r["dtype"] == "bf16" else 1.0
        (t,) = time_ops([linear_op(r["m"], r["n"], r["k"], width)], dev, eff, r["dtype"])
        out.append({**r, "meas_us": us, "model_us": t.time_s * 1e6,
                    "weight_mb": width * r["n"] * r["k"] / 1e6,
                    "share": width * r["n"] * r["k"] / (us * 1e-6) / dev.memory_bandwidth})
    for r in out:
        first = min((o for o in out if (o["source"], o["kernel"], o["n"], o["k"])
                     == (r["source"], r["kernel"], r["n"], r["k"])), key=lambda o: o["m"])
        r["rise"] = r["meas_us"] / first["meas_us"]
        r["model_rise"] = r["model_us"] / first["model_us"]
        r["first_m"] = first["m"]
    return out


def _gemm_rise(gemms: list[dict], n: int, m: int) -> float:
    return next(r["rise"] for r in gemms if r["dtype"] == "bf16" and (r["n"], r["m"]) == (n, m))


def _gemm_section(gemms: list[dict], online: list[dict]) -> list[str]:
    lines = ["## A GEMM at 1-256 rows on an H100", "",
             "published/hopper_small_m_gemm.json (vLLM pull requests #49363, #23280, #13917; "
             "each a single kernel timed alone, CUDA graphs, medians): the time at M rows over "
             "the same kernel's time at its fewest rows, beside the speed model's for the same "
             "product (bf16: weights at `gemv_bw_16bit` 0.685, all bytes at no more than 0.85).",
             "", "| source | kernel | N x K (weights) | M | measured | x fewest rows | model "
             "| model / measured |", "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['source']} | {r['kernel']} | {r['n']} x {r['k']} ({r['weight_mb']:.0f} MB) "
              f"| {r['m']} | {r['meas_us']:.1f} us | {r['rise']:.3f} | {r['model_us']:.1f} us "
              f"| {r['model_us'] / r['meas_us']:.2f} |" for r in gemms]
    bf16 = [r for r in gemms if r["dtype"] == "bf16" and r["m"] > 1]

    def span(rows: list[dict]) -> str:
        return f"{min(r['rise'] for r in rows):.3f}-{max(r['rise'] for r in rows):.3f}x"
    short = [r for r in bf16 if r["m"] <= 128 and r["model_us"] < r["meas_us"]]
    at16 = max(r["rise"] for r in bf16 if r["m"] <= 16)
    one = [r["share"] for r in gemms if r["dtype"] == "bf16" and r["m"] == 1]
    low = [r for r in online if 2 <= r["in_flight"] <= 64 and r["decode_b"] <= 16
           and "-467-16-" not in r["id"]]
    bound = {r["id"]: r["decode_ms"] * (at16 - 1) for r in low}
    over = [r for r in low if r["meas"] - r["pred"] > bound[r["id"]]]
    lines += ["", f"cuBLAS's bf16 GEMM at 16 rows takes {span([r for r in bf16 if r['m'] == 16])} "
              f"its one-row time, at 64 rows {span([r for r in bf16 if r['m'] == 64])}, at 128 "
              f"rows {span([r for r in bf16 if r['m'] == 128])} (the largest on the 30 MB shape, "
              "whose weights fit the H100's 50 MB L2 between the benchmark's replays, so its "
              "one-row time may be short of a DRAM read), at 256 "
              f"rows {span([r for r in bf16 if r['m'] == 256])}; the FP8 kernels rise no more "
              f"than {max(r['rise'] for r in gemms if r['dtype'] == 'fp8' and r['m'] <= 128):.3f}x "
              "by 128 rows. The model's time is flat over the same rows and is the longer of the "
              "two at every bf16 row of 2-128 rows but "
              + (", ".join(f"{r['n']} x {r['k']} at {r['m']} ({r['model_us'] / r['meas_us']:.2f})"
                           for r in short) or "none")
              + f": its share is the end-to-end step's (gpt-fast's), below these kernels' own "
              f"one-row share ({min(one):.2f}-{max(one):.2f} of the datasheet bandwidth). So a "
              "16-bit weight GEMM's share does not "
              "fall with its rows at 2-128 rows on an H100 by more than the model already "
              "allows, and reading 2 is ruled out as the cause of the online gaps where the "
              f"decode batch is at most 16: there the bf16 GEMMs rise at most "
              f"{100 * (at16 - 1):.1f}%, {min(bound.values()):.2f}-{max(bound.values()):.2f} ms "
              "a step had the whole step risen so, and the measured gap exceeds that on "
              f"{len(over)} of the {len(low)} rows on the decode-bound lengths (median gap "
              f"{statistics.median(r['meas'] - r['pred'] for r in low):.1f} ms). At 17-64 rows "
              "the data bound it less: the 30 MB shape, the size of llama-3.1-70b TP4's "
              "attention projections (2560 x 8192 and 8192 x 2048, 42 and 34 MB), takes "
              f"{_gemm_rise(gemms, 2112, 64):.3f}x at 64 rows, and nothing was published between "
              "16 and 64 rows. Not measured: TensorRT-LLM's own GEMM plugin at these rows, and "
              "shapes under 30 MB.", ""]
    return lines


def _offline_specs() -> list[tuple]:
    specs = []
    for r in json.loads(RUNS.read_text())["runs"]:
        if r["source_group"] == "tensorrt-llm" and r["kind"] == "serving":
            j, hw = r["job"], r["hardware"]
            prec = j["precision"].split()[0]  # "fp8 (weights and KV cache)": an FP8 build
            specs.append((r["id"], r["model"]["catalog"], hw["gpu"], j.get("tp") or 1, prec,
                          j["input_len"], j["output_len"], r["measured"]["value"]))
    for model, gpu, tp, meas in DECODE_HEAVY:
        specs.append((f"perf-overview {model} {gpu} tp{tp} fp8 128/2048", model, gpu, tp, "fp8",
                      128, 2048, meas))
    return specs


def offline_rows() -> list[dict]:
    """The offline max-throughput rows at every request at once (trtllm-bench's load), on
    gpuplan's TensorRT-LLM 0.14 scheduler row (0.17 lies between 0.14 and 1.0); an FP8 build
    runs an FP8 KV cache (perf-overview.md: "If you specify FP8 quantization, the KV cache will
    automatically be set to FP8 as well!")."""
    out = []
    for rid, model, gpu, tp, prec, i, o, meas in _offline_specs():
        n = NUM_REQUESTS[(i, o)]
        job = Job(model=model, mode="infer", engine="trt-llm", tp=tp, gpus=tp,
                  infer_precision=prec, kv_dtype="fp8" if prec == "fp8" else None)
        res, log = _logged(lambda: capacity(
            load_model(model), get_gpu(gpu), job=job, engine="trt-llm", engine_version="0.14",
            input=i, output=o, requests=n, seed=0, concurrency=n))
        sim = res.throughput["output_tokens_per_s"]
        dec = [s for s in log if not s[1]]
        b = statistics.mean(s[0] for s in dec)
        step = 1e3 * statistics.mean(s[2] for s in dec)
        out.append({"id": rid, "in_out": f"{i}/{o}", "requests": n, "sim": sim, "meas": meas,
                    "decode_b": b, "decode_ms": step,
                    "gap_us": offline_gap_per_seq_us(step, sim, meas, b)})
    return out


def _online_table(rows: list[dict]) -> list[str]:
    lines = ["| row | QPS | completed req/s | in flight | decode-only steps: batch, ms | mixed "
             "steps: share, ms | ITL ms sim / meas | gap per request in flight |",
             "|---|---:|---:|---:|---|---|---|---:|"]
    for r in rows:
        lines.append(
            f"| {r['id'].removeprefix('trtllm-online-')} | {r['qps']:g} | {r['achieved']:.2f} | "
            f"{r['in_flight']:.1f} | {r['decode_b']:.1f}, {r['decode_ms']:.2f} | "
            f"{100 * r['mixed_share']:.1f}%, {r['mixed_ms']:.1f} | {r['pred']:.2f} / "
            f"{r['meas']:g} | {r['gap_us']:.0f} us |")
    return lines


def _offline_table(rows: list[dict]) -> list[str]:
    lines = ["| row | in/out | requests | output tok/s sim / meas | ratio | decode-only steps: "
             "batch, ms | implied extra per sequence per step |", "|---|---|---:|---|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['in_out']} | {r['requests']} | {r['sim']:,.0f} / "
                     f"{r['meas']:,.0f} | {r['sim'] / r['meas']:.2f} | {r['decode_b']:.0f}, "
                     f"{r['decode_ms']:.2f} | {r['gap_us']:.1f} us |")
    return lines


def _summary(online: list[dict]) -> list[str]:
    small = [r for r in online if r["in_flight"] <= 64 and r["id"].endswith(
        ("-467-256-qps2", "-467-256-qps4", "-202-214-qps2", "-202-214-qps4", "-202-214-qps8"))]
    under = short_of_rate(online)
    gaps = sorted(r["gap_us"] for r in small)
    return [f"Decode-bound rows (467/256 at 2-4 QPS, 202/214 at 2-8 QPS) with at most 64 in flight: "
            f"{len(small)}; the measured ITL exceeds the simulated one by "
            f"{gaps[0]:.0f}-{gaps[-1]:.0f} us per request in flight (median "
            f"{statistics.median(gaps):.0f} us). Rows whose server completed under 90% of the "
            f"stated rate with their TTFT within 1.5x their lowest rate's (no queue): {len(under)} "
            f"({', '.join(r['id'].removeprefix('trtllm-online-') for r in under)})."]


MECHANISMS = """## What TensorRT-LLM does per request and per iteration

Read in NVIDIA/TensorRT-LLM as stored in the offline index (the 0.14 batch manager shipped as a
static library; these are the first open-sourced versions of the same loop):

* **The executor loop is serial with the GPU.** `cpp/tensorrt_llm/executor/executorImpl.cpp`
  @036a60f7 `Executor::Impl::executionLoop`: `forwardSync` (waits for the iteration's GPU work and
  the decoder, updates the requests), `populateNewResponses` (for every active request,
  `llmReq->createResponse(...)`: under streaming a response with the iteration's new token, each
  iteration), `enqueueNewResponses` (one lock of the response map, one notify), then
  `fetchNewRequests` and `forwardAsync` (capacity and micro-batch scheduling, sequence slots, KV
  blocks, buffers, the engine's enqueue, the decoder step). Nothing of this overlaps the GPU unless
  TRT overlap is on (`trtGptModelInflightBatching.cpp` @00825c4e: `mNumMicroBatches =
  isTrtOverlap() ? 2 : 1`, off by default). gpuplan's TensorRT-LLM host already runs serially
  (`ServingHost.overlap` False) but with no per-step or per-sequence seconds: no published figure
  for this loop's host time was found.
* **Streaming is the difference between the two tables.** The online rows stream every token
  through Triton's tensorrtllm_backend (perf-overview.md: "The TensorRT-LLM backend is used to
  measure the performance of TensorRT-LLM for online serving"); `trtllm-bench throughput`, which
  made the offline table, does not stream unless asked (`tensorrt_llm/bench/benchmark/
  throughput.py`: `--streaming`, `is_flag=True, default=False`). A non-streamed request makes one
  response at its end; a streamed one makes a response per iteration in the loop above and then
  travels Triton's response path (the backend's response thread, the ensemble's postprocessing
  model, the HTTP/gRPC stream). Its cost per response is published nowhere found here.
* **Where a streamed response's work runs.** On the loop: `createResponse` under streaming copies
  `max(getNumTokensPerIteration(), 1)` tokens, one without speculative decoding
  (`cpp/include/tensorrt_llm/batch_manager/llmRequest.h` @d879430b; `exclude_input_in_output`
  is read only when not streaming), no detokenisation. Off it:
  triton-inference-server/tensorrtllm_backend v0.14.0 @9958c211
  `inflight_batcher_llm/src/model_instance_state.cc` drains the responses on its own
  `WaitForResponse` thread (`awaitResponses` with a 1 ms wait, `fillTritonResponse`,
  `TRITONBACKEND_ResponseSend`), and the ensemble detokenises each streamed token in its
  `postprocessing` model, a Python backend model (`all_models/inflight_batcher_llm/postprocessing`,
  `dynamic_batching {{}}`, KIND_CPU instances) in its own stub process. Work off the loop delays a
  token's delivery without lengthening the iterations, and a delay cancels out of a request's mean
  gap (its gaps sum to its last token's time minus its first's) unless that stage falls behind.
* **How the client timed it.** perf-overview.md names no client; its columns (Mean TTFT, Mean ITL,
  Total Token Tput, Output Tput, a QPS of INF, 500 requests) are the report of vLLM's
  `benchmarks/benchmark_serving.py`, whose `tensorrt-llm` backend (`async_request_trt_llm`,
  `backend_request_func.py`) posts to Triton's `generate_stream` and timestamps each server-sent
  event as it is read; the mean ITL is the mean of all those gaps. That reading is inferred from
  the column names, not stated by the page.
* **No CUDA graphs.** The TRT-engine runtime replays a graph only in CUDA-graph mode
  (`ExtendedRuntimePerfKnobConfig.cuda_graph_mode`, default False;
  `TrtGptModelInflightBatching::executeContext` never for a batch with a context request): each
  iteration enqueues the engine's kernels. That is a per-kernel cost, the same at any batch, so it
  is no part of a gap that grows with the requests in flight.
* **How gpuplan prices a mixed step** (capacity/_cost.py `StepCost.step_s`): the decode step of
  its decodes at their mean context (the speed model's D(b, c) is affine in the summed context, so
  the mean is exact), plus the token-linear part of the prompt tokens over the decodes'
  (`Plin(T + b) - Plin(b)`: the weights read once, elementwise work per token), plus each chunk's
  attention over its own cached prefix. The one piece it drops is the finishing prompt's own
  logits row (both `Plin` terms carry one), a row of a GEMM whose weights the decodes' rows already
  read. Nothing here grows with the requests in flight beyond what the kernels do.
* **Sampling over the vocabulary.** One read and one write of fp32 logits (vocabulary 128,256) for
  64 sequences moves {sampler_mb:.0f} MB: {sampler_us:.0f} us at the H100's 3.35 TB/s, {sampler_pct:.2f}%
  of the simulated 8B step at that batch ({step64:.2f} ms) -- too small to matter, so it is not
  added to the step.
"""



def _batch_limit_section(rows: list[dict]) -> list[str]:
    lines = ["## An engine batch other than 0.14's default", "",
             "The online table states nothing of its build or server beyond version 0.14.0, 500 "
             "requests and BF16: perf-overview.md @258c754 has no method section for it, and its "
             "build commands (`trtllm-bench build` with a dataset's tuning heuristics, or "
             "`--max_batch_size` / `--max_num_tokens` given) are the throughput table's, at "
             "v0.17. gpuplan runs trtllm-build 0.14's defaults (max_batch_size 2048, "
             "max_num_tokens 8192; tensorrtllm_backend v0.14.0 passes the engine's own to the "
             "executor). The four 202/214 \"INF\" rows, whose throughput is simulated about 2x "
             "the measured, at a smaller engine batch (256 was trtllm-build's default from 0.11.0 "
             "to 0.13.0; release-notes.md @b47198a2):", "",
             "| row | max_batch_size | TTFT ms sim / meas | ITL ms sim / meas | output tok/s sim / "
             "meas |", "|---|---:|---|---|---|"]
    for r in rows:
        m = r["meas"]
        for b, p in r["sims"].items():
            lines.append(f"| {r['id'].removeprefix('trtllm-online-')} | {b or 2048} | "
                         f"{p['ttft_ms']:,.0f} / {m['ttft_ms']:,.0f} | {p['itl_ms']:.1f} / "
                         f"{m['itl_ms']:.0f} | {p['output_tokens_per_s']:,.0f} / "
                         f"{m['output_tokens_per_s']:,.0f} |")
    moves = {b: sum(all(toward(r["meas"][k], r["sims"][None][k], r["sims"][b][k])
                        for k in FIGURES) for r in rows) for b in BATCH_LIMITS}
    tok = [r["sims"][b]["output_tokens_per_s"] / r["meas"]["output_tokens_per_s"]
           for r in rows for b in BATCH_LIMITS]
    lines += ["", "A smaller batch lengthens TTFT (prompts wait for a free slot) and shortens ITL "
              "(fewer sequences a step); rows on which it moves all three figures toward the "
              "measured ones: " + ", ".join(f"{n} of {len(rows)} at {b}" for b, n in moves.items())
              + f". The throughput stays {min(tok):.2f}-{max(tok):.2f}x the measured at every "
              "limit, so no unstated batch limit makes these rows' figures together; the "
              "measured ones are the rows' own (see validate_capacity.md's \"All at once\" table "
              "for what their means say about the lengths). The default stays.", ""]
    return lines



def _makespan_section(rows: list[dict]) -> list[str]:
    lines = ["## When the rated runs ended", "",
             "With fixed lengths and no queue, a run at a stated rate ends one mean request "
             "(TTFT + (output - 1) x ITL) after its last arrival, and the arrivals take n / rate "
             "give or take sqrt(n) / rate (Poisson; the page does not state the process). The "
             "makespan the completed rate gives (n x output / output tok/s), less that, on every "
             "rated row with no queue (TTFT within 1.5x its lowest rate's):", "",
             "| row | QPS | makespan - (n / rate + mean request) | in Poisson sd |",
             "|---|---:|---:|---:|"]
    lines += [f"| {r['id'].removeprefix('trtllm-online-')} | {r['qps']:g} | "
              f"{r['excess_s']:+.1f} s | {r['excess_s'] / r['sd_s']:+.1f} |" for r in rows]
    var = [r for r in rows if r["varied"]]
    fixed = [r for r in rows if not r["varied"]]
    z = sorted(r["excess_s"] / r["sd_s"] for r in fixed)
    lines += ["", f"The 202/214 rows ended {min(r['excess_s'] for r in var):.1f}-"
              f"{max(r['excess_s'] for r in var):.1f} s late at every rate "
              f"({min(r['excess_s'] / r['sd_s'] for r in var):+.1f} to "
              f"{max(r['excess_s'] / r['sd_s'] for r in var):+.1f} sd, growing with the rate as "
              "the spread narrows), about the same seconds at each rate of one model and GPU: a "
              "last request that decodes a few hundred steps longer than the mean one, as the "
              "\"INF\" rows' means say (validate_capacity.md, \"All at once\"). The 467/256 and "
              f"467/16 rows with no queue ended within {z[0]:+.1f} to {z[-1]:+.1f} sd "
              f"({sum(abs(x) <= 2 for x in z)} of {len(z)} within 2 sd). So the 202/214 rows read "
              "as varied lengths at the stated rates too; the page states no distribution, and "
              "gpuplan runs them fixed. A cost on the server would lengthen every request, not the "
              "last one only.", ""]
    return lines

TRITON_PATH = """## Triton's streaming path at the 0.14 release

Read in triton-inference-server/tensorrtllm_backend at tag v0.14.0 (9958c21), the release the
online table ran, for a cost that a streamed token pays per request in flight:

* **Detokenisation per token.** `all_models/inflight_batcher_llm/postprocessing/1/model.py`:
  `execute` batch-decodes the new tokens of every request Triton's dynamic batcher gave it
  (`self.tokenizer.batch_decode`), first skipping ids at or above `self.tokenizer.vocab_size`.
  0.13.0 read `len(self.tokenizer.vocab)` there, which tensorrtllm_backend #622 (2024-10-18)
  timed at about 40 ms an `execute()` and called critical under streaming; 0.14.0 reads the
  attribute again, so that cost is not in the release that ran.
* **Its instances.** `postprocessing/config.pbtxt`: `dynamic_batching {}`, `KIND_CPU`, `count:
  ${postprocessing_instance_count}`. The README's example fills `INSTANCE_COUNT=1`, as do
  docs/llama.md and ci/L0_backend_trtllm/test.sh; perf-overview.md states no count, so neither
  how many Python processes detokenised nor what one execute costs is known.
* **The client's `accumulate_tokens`.** vLLM's `async_request_trt_llm` posts
  `"accumulate_tokens": True` with every request. At v0.14.0 only `tensorrt_llm_bls` reads an
  `accumulate_tokens`, and as its model-config parameter (docs/model_config.md: "call the
  postprocessing model with all accumulated tokens, instead of only one token"), not as a
  request input; the ensemble has no such input. Which model the table's client called is not
  stated, so a re-detokenisation of the whole output per token is not assumed.
* **Off the loop.** `inflight_batcher_llm/src/model_instance_state.cc` `WaitForResponse`: its
  own thread calls `awaitResponses` (1 ms wait), then `fillTritonResponse` and
  `TRITONBACKEND_ResponseSend` for each response, taking `mRequestIdToRequestDataMutex` (shared
  with request entry, not with the executor loop) to look the request up. The executor config
  (`getExecutorConfigFromParams`) passes `maxBatchSize` / `maxNumTokens` as `std::nullopt`
  (the engine's).
* **Published figures.** Searched 2026-12-08 (GitHub issues and pull requests on
  NVIDIA/TensorRT-LLM, tensorrtllm_backend and triton-inference-server/server): TensorRT-LLM
  #2613 (streamed slower than not, v0.13.0 through `ensemble/generate_stream`, the
  postprocessing #622 timed; no per-token figure); server #7548 (0.11.0 on an A100 PCIe, 73.36,
  193.30 and 193.81 tok/s at 1, 50 and 100 concurrent requests against vLLM's 64.13, 984.55 and
  1,246.50; no breakdown); tensorrtllm_backend #293 (2024-01: gptSessionBenchmark's static batch of 64 at
  1,421 tok/s against the Triton server's 43.65, a configuration of that era); TensorRT-LLM PR
  #6332 (2025-07-28, the PyTorch backend's trtllm-bench: "The overhead of streaming is only
  revealed when the concurrency gets high enough", no figure). None sizes a cost per streamed
  response, or per request in flight, of 0.14 behind Triton, so the online ITL gap keeps no
  term in the model.
"""

def _conclusion(online: list[dict], offline: list[dict], steps: list[tuple]) -> list[str]:
    small = [r for r in online if 2 <= r["in_flight"] <= 64]
    ratios = [r["sim"] / r["meas"] for r in offline]
    heavy = [r for r in offline if r["id"].startswith("perf-overview")]
    gap = statistics.median(r["gap_us"] for r in small)
    lines = ["## Reading", "",
             f"Offline, the same engine's batched step at {min(r['decode_b'] for r in offline):.0f}-"
             f"{max(r['decode_b'] for r in offline):,.0f} sequences is simulated within "
             f"{100 * (min(ratios) - 1):+.0f}% to {100 * (max(ratios) - 1):+.0f}% of the measured "
             f"throughput (at most {max(r['gap_us'] for r in offline):.0f} us per sequence per "
             "step left). Online, with 2-64 requests in flight, the measured ITL is "
             f"{gap:.0f} us per request in flight (median over {len(small)} rows) above the "
             "simulated one, and about nothing at one request. Two readings are consistent with "
             "both tables:", "",
             "1. **A cost per streamed response** (only the online rows stream): the loop's "
             "`createResponse` and Triton's response path for every request every iteration. At "
             f"{gap:.0f} us per sequence it would add "
             + ", ".join(f"{gap * r['decode_b'] / 1e3:.0f} ms to the {r['decode_ms']:.1f} ms "
                         f"offline step of {r['id'].removeprefix('perf-overview ')}"
                         for r in heavy)
             + " had those requests streamed; they did not, so the offline rows neither confirm "
             "nor exclude it.",
             "2. **A per-step cost that appears past one sequence**: the offline decode-heavy "
             "rows leave "
             + " and ".join(f"{r['decode_ms'] * (r['sim'] / r['meas'] - 1):.1f} ms per step "
                            f"({r['id'].removeprefix('perf-overview ')})" for r in heavy)
             + ", the size of the online gaps at 8-64 requests in flight on the decode-bound "
             "lengths (" + "; ".join(
                 f"{lo:.1f}-{hi:.1f} ms on {m}" for m, (lo, hi) in _gap_ranges(online).items())
             + "). The speed model reads every 16-bit weight matmul's weights at the GEMV "
             "bandwidth share measured at batch 1 (efficiency.py `gemv_bw_16bit` 0.685, "
             "gpt-fast's batch-1 decode) at every row count, and all its bytes at no more than "
             "the streaming share (`memory_default` 0.85; time.py `_bandwidth`), so its decode "
             "step grows smoothly with the sequences in flight:", ""]
    lines += ["| model (H100, bf16, context 512) | " + " | ".join(f"D({b})" for b, _ in steps[0][1])
              + " |", "|---|" + "---:|" * len(steps[0][1])]
    lines += [f"| {m} | " + " | ".join(f"{t:.2f} ms" for _, t in row) + " |" for m, row in steps]
    lines += ["", "Until issues 29/31 the model switched to the streaming share at one 128-row "
              "tile, and a 128th sequence made the step faster; the switch had no GEMM "
              "measurement behind it (DeepBench's cuBLAS rows and Marlin's FP16 baseline hold "
              "their share from 1 to 32-128 rows), so it is gone, and the 2-127-row steps are "
              "at most 2-3% shorter than they were. Under reading 2 the GEMV share would still "
              "be too high for 2-127 rows on a Hopper; the published H100 GEMMs at 1-256 rows "
              "(the next section) do not say so: at up to 16 rows they take their one-row time.",
              "",
              "Neither cost has a published figure, and one fitted to these rows is what issue 31 "
              "rules out, so nothing is added: gpuplan's TensorRT-LLM host (engines/profiles.py "
              "``_TRTLLM_HOST``) keeps no per-step or per-sequence seconds. What would settle it: "
              "tensorrtllm_backend streamed and not streamed at one batch (reading 1), and "
              "TensorRT-LLM's own 16-bit GEMM of a 70B layer's shapes at 1-256 rows (reading 2), "
              "on an H100.", ""]
    return lines


def _gap_ranges(online: list[dict]) -> dict[str, tuple[float, float]]:
    """Measured minus simulated ITL (ms), lowest and highest, over the 467/256 and 202/214 rows
    with 8-64 requests in flight, by model."""
    out: dict[str, list[float]] = {}
    for r in online:
        if 8 <= r["in_flight"] <= 64 and "-467-16-" not in r["id"]:
            out.setdefault(r["id"].split("-h")[0].removeprefix("trtllm-online-"), []).append(
                r["meas"] - r["pred"])
    return {m: (min(g), max(g)) for m, g in out.items()}


def decode_steps(batches=(1, 2, 8, 32, 64, 127, 128, 256)) -> list[tuple]:
    """The simulated decode step D(b) at context 512 on an H100 (bf16, TensorRT-LLM), for the
    8B on one GPU and the 70B over TP4: (model, [(b, ms), ...])."""
    out = []
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4)):
        job = Job(model=model, mode="infer", engine="trt-llm", infer_precision="bf16", tp=tp,
                  gpus=tp)
        cost = _cost.StepCost(load_model(model), get_gpu("H100-SXM-80GB"), job, max_len=4096)
        out.append((f"{model} TP{tp}", [(b, cost.decode_s(b, b * 512) * 1e3) for b in batches]))
    return out


def render(online: list[dict], offline: list[dict], steps: list[tuple],
           limited: list[dict] | None = None) -> str:
    s = logits_pass_s(64, 128256, 4, 3.35e12)
    step64_ms = dict(steps[0][1])[64]
    lines = ["Recorded by `PYTHONPATH=src python benchmarks/trtllm_load_breakdown.py --write` "
             "(the model's figures, no GPU).", "",
             "# TensorRT-LLM under load: online (streamed) against offline (not streamed)", "",
             f"Both tables are {PERF}. Little's law on the measured figures gives the requests in "
             "flight (rate x (TTFT + output x ITL)); the gap is measured minus simulated mean "
             "ITL over them.", "", "## Online: TensorRT-LLM 0.14 behind Triton, streamed", ""]
    lines += _online_table(online) + [""] + _summary(online) + [""]
    lines += _pairs_section(online)
    lines += ["## Offline: trtllm-bench (v0.17, FP8/FP16), every request at once, not streamed",
              "", "Simulated on gpuplan's TensorRT-LLM 0.14 scheduler row at the request counts the "
              "page states; trtllm-bench tunes its own max_batch_size (not stated), which moves "
              "none of these rows: at 2,048 and 4,096 sequences the KV cache is the limit.", ""]
    lines += _offline_table(offline) + [""]
    lines += _conclusion(online, offline, steps)
    lines += _gemm_section(gemm_rows(), online)
    lines += _makespan_section(makespan_rows())
    if limited:
        lines += _batch_limit_section(limited)
    lines += [MECHANISMS.format(sampler_mb=2 * 64 * 128256 * 4 / 1e6, sampler_us=s * 1e6,
                                sampler_pct=100 * s / (step64_ms / 1e3), step64=step64_ms),
              TRITON_PATH]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render(online_rows(), offline_rows(), decode_steps(), batch_limit_rows())
    if "--write" in argv:
        OUT_MD.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
