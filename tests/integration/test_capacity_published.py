"""gpuplan capacity against published serving measurements (issue 29's "must hold": TTFT, ITL and
throughput within a 15% median error), from benchmarks/published/serving_runs.json through
benchmarks/validate_capacity.py. The table in the repository must be the one this code computes;
the bar is asserted where it is met and held as a strict xfail, with the measured median, where it
is not. Nothing in the simulation was fitted to these rows."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_capacity as vc  # noqa: E402
from gpuplan.capacity._result import Stats  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return vc.rows()


def test_every_row_is_predicted(rows):
    runs = json.loads(vc.RUNS.read_text())["runs"]
    assert len(rows) == len(runs) >= 20
    for r in rows:
        assert not r.why_not, (r.run["id"], r.why_not)
        for key, _ in vc.FIGURES:
            assert r.predicted[key] > 0
    # more than one independent source
    assert len({r.run["source_group"] for r in rows}) >= 2


def test_rows_cite_their_source():
    for run in json.loads(vc.RUNS.read_text())["runs"]:
        src = run["source"]
        assert src.get("url", "").startswith("https://"), run["id"]
        assert src.get("commit") or src.get("date"), run["id"]
        for key in ("engine", "model", "gpu", "tp", "precision", "input_len", "output_len"):
            assert run[key] is not None, (run["id"], key)
        # the figure as the source printed it
        for fig in run["measured"].values():
            assert float(fig["as_published"]) == fig["value"], run["id"]


def test_table_in_the_repository_is_current(rows):
    assert vc.OUT_MD.read_text() == vc.render(rows), \
        f"benchmarks/validate_capacity.md is stale: run `{vc.COMMAND}`"


def test_summary_by_hand(rows):
    for key, _ in vc.FIGURES:
        errs = sorted(abs(r.predicted[key] / r.run["measured"][key]["value"] - 1) for r in rows
                      if key in r.run["measured"])
        assert vc.summary(rows, key)["median_abs_error"] == pytest.approx(
            statistics.median(errs))
        assert vc.summary(rows, key)["worst_abs_error"] == pytest.approx(errs[-1])


def test_reading_the_misses_quotes_todays_rows(rows):
    # the prose's figures of today's table are computed from the rows (vc.fill_mechanisms), so
    # each reads as the summary and the rows do, by hand here
    text = vc.fill_mechanisms(vc.MECHANISMS, rows)
    assert not re.search(r"\{\w+\}", text)
    ttft = sorted(abs(r.error("ttft_ms")) for r in rows)
    assert f"over all {len(rows)} rows it is {100 * statistics.median(ttft):.1f}%" in text
    v4090 = [r for r in rows if r.run["id"].startswith("mrahman-vllm-")]
    tok = [100 * abs(r.predicted["output_tokens_per_s"] / r.run["measured"]["output_tokens_per_s"]
                     ["value"] - 1) for r in v4090]
    assert f"Throughput is within {min(tok):.1f}-{max(tok):.1f}%." in text
    inf16 = [r for r in rows if r.run["id"].startswith("trtllm-online-")
             and r.run["id"].endswith("-467-16-qpsinf")]
    assert len(inf16) == 4
    served = " / ".join(f"{r.predicted['output_tokens_per_s'] / 16:.1f}" for r in inf16)
    assert f"gpuplan's steps serve {served}:" in text


def test_throughput_meets_the_bar(rows):
    # reached: 3.8% median over the 109 rows (benchmarks/validate_capacity.md)
    assert vc.summary(rows, "output_tokens_per_s")["median_abs_error"] <= vc.BAR


def test_errors_reached(rows):
    # what the model reads today, so a change that moves it is seen (validate_capacity.md):
    # TTFT 18.1% (109 rows), ITL 16.1% (104 rows), output tok/s 3.8% (109 rows) median |error|.
    # History, newest first:
    # - 16.0% / 16.0% / 3.8% before issue 29's vLLM pass (validate_capacity.py MECHANISMS, vLLM
    #   (3)): the A100 sweep ran the prompts its server held when each run began
    #   (serving_runs.json prefix_cache.cached_prompts, from the server logs: 0-9 / 0-99 / 0-199
    #   at N = 75 / 200 / 500 on the 0.5 pool, prompt 0, the client's test request, elsewhere),
    #   vLLM V1 kept a preempted request's blocks in the prefix cache (capacity/_engines.py
    #   preempt_keeps_cache; kv_cache_manager.py free, "tail blocks are evicted first"), and a
    #   chunk's attention after a cached prefix was timed by its query-key pairs (capacity/
    #   _cost.py _attn_s; a 16-token tail after 1,008 cached read 1.77 ms, 127 x a 16-token
    #   prompt's kernel floor, now 0.11): the A100 TTFTs N = 1/10/20/30/50/75/100/200/500 at 0.5
    #   -65.2/-11.4/-67.6/-60.3/-34.2/-3.1/-16.0/+114.8/-0.5% -> -69.8/-24.5/-85.8/-82.4/-36.5/
    #   -25.6/-17.6/-38.9/-27.6%, at 0.25 +253.1/+38.8/+2.2/-5.5% -> +247.3/+37.4/+1.0/-7.0%
    #   (the group 34.2% -> 36.5%, ITL 16.7% -> 19.6%, tok/s 12.6% -> 18.3%: rows that read well
    #   had cold prefills making up for an A100 step the model runs ~1.3x too fast); the vLLM
    #   blog's TTFT +23.2/+25.1/+7.4/+10.9% -> +22.2/+24.0/+5.1/+8.6%; the 4090 and kvcached rows
    #   by under 0.3 points; no other row moves. The overall TTFT median moves the wrong way
    #   because rows near it (N = 75 and 500 at 0.5) had read well by that compensation;
    # - 17.1% / 16.0% / 3.3% before vLLM's 16-bit attention on Hopper ran at FlashAttention-3's
    #   share, 0.75 at head dim 128 and 0.50 at 64 (efficiency attn_fwd_hopper_fa3 / _d64; vllm
    #   fa_utils.py picks FA3 on SM90), not FlashAttention-2's 0.35: an 8192-token chunk's
    #   attention 53 -> 24.5 ms on Llama-3.1-8B; the vLLM blog's four H100 rows TTFT
    #   +64.4/+67.4/+22.6/+26.8% -> +23.2/+25.1/+7.4/+10.9%, their tok/s the wrong way
    #   +1.8/+13.7/+8.3/+15.0% -> +5.9/+19.7/+10.2/+17.3% (the blog's
    #   own concurrency-1 sweep: the prefill's quadratic term now reads as measured, its linear
    #   term ~1.4x short, not explained); kvcached 0.6B TTFT 87.4% -> 87.9% median; the 19 vLLM
    #   rows' TTFT median 38.8% -> 25.1%; no other row moves;
    # - 17.1% / 15.7% / 3.3% (after vLLM 0.14's async scheduling) before the A100 sweep's N = 1, 20
    #   and 30 rows (0.5 utilization) ran the prefix hits their server logs show (every prompt
    #   cached by the runs before on that server, serving_runs.json prefix_cache; read from the
    #   source, nothing fitted): their TTFT +87.9/+279.8/+342.8% -> -66.4/-67.8/-60.5% (the group's
    #   median 34.4% either way), ITL -11.4/-15.6/-14.7% -> -11.4/-19.0/-19.8% (the wrong way: fewer
    #   prefill chunks mixed into the decode steps), tok/s +12.5/+13.6/+10.0% -> +13.1/+25.5/+26.4%;
    #   the 19 vLLM rows' medians TTFT 23.4% either way, ITL 17.7% -> 19.0%, tok/s 13.3% -> 13.8%;
    #   no other row moves;
    # - 16.3% / 16.0% / 3.8% (merged onto the FP8-attention and gpt-oss changes) before vLLM's
    #   EngineCore work per step was counted (0.43 ms + 1.13
    #   us a sequence: vllm PRs #42131, #46112) and vLLM >= 0.14 ran async scheduling
    #   (engines/profiles.py _VLLM_HOST, capacity/_engines.py): between the steps for the A100
    #   sweep (0.10.1.1, the 0.8 row): its ITL 18.9% -> 16.3%, tok/s 13.3% -> 9.7%; beside them
    #   from 0.14 with each batch formed a step ahead: the kvcached 0.6B rows' ITL unmoved
    #   (0.847 ms: the loop fits under the step), TTFT 88.3% -> 87.4%; the wrong way, the vLLM
    #   blog's 0.19 rows' TTFT (269.9% -> 373.8% median; Llama BF16 +21.2% -> +64.4%) and the
    #   4090 rows' (no version stated: the newest row; 50.0% -> 86.9%), where a prompt arriving
    #   mid-step now misses the next step (a long prefill chunk there);
    # - 17.1% / 16.0% / 3.8% before vLLM's FP8 attention on Hopper prefilled at the 16-bit
    #   kernel's rate (two-level accumulation FA3, efficiency.fp8_attention_vs_16bit): the
    #   Llama-3.1-8B FP8-KV row's TTFT -17.8% -> +23.4%, its tok/s +21.9% -> +13.8%; the
    #   median crosses to a row nearer the measured; no other row moves;
    # - 17.8% / 16.4% / 3.8% before gpt-oss ran fused under vLLM (models/_types.py
    #   FUSED_ATTENTION: the sinks in FlashAttention 3's kernel, the 128-token window's blocks
    #   skipped): the two gpt-oss-20b rows TTFT +518.6/+539.0% -> -9.2/-32.9%, ITL +138.4/+70.3%
    #   -> -6.7/-13.7%, tok/s -66.1/-58.4% -> +8.3/+20.3%; the 19 vLLM rows' medians TTFT 36.0% ->
    #   32.9%, ITL 22.1% -> 17.7%, tok/s 13.6% -> 13.3%; no other row moves;
    # - 18.1% / 16.4% / 3.8% over 109 / 104 / 109 rows before the five SGLang rows ran the requests
    #   sglang.bench_serving drew (seed 1: lengths uniform in 1..1024 / 0..1024 and its own Poisson
    #   gaps, validate_capacity.py bench_serving_workload) instead of their served means at
    #   gpuplan's seed-0 arrivals: their TTFT 21.7% -> 23.6% median (70B -29.6/-21.7/-32.0% ->
    #   -23.6/-24.0/-32.7%, 405B -16.5/-18.4% -> -13.6/-15.8%), ITL 1.6% either way (70B at 4 req/s
    #   -23.4% -> -22.2%), tok/s 3.5% -> 0.2%; no other row moves;
    # - 16.4% / 15.5% / 2.8% over 90 / 85 / 90 rows (TTFT 15.6% had the SGLang rows run their draws
    #   then) before issue 29's 19 vLLM rows joined (kvcached H100, the vLLM blog's FP8-KV tables,
    #   dennislee22's A100 sweep; transcribed before any prediction was read, nothing fitted, no
    #   model change): their own medians TTFT 36.0%, ITL 22.1%, tok/s 13.6% (gpt-oss planned with
    #   eager attention, a 0.6B model's host-bound server, prefix-cache hits in the A100 sweep;
    #   validate_capacity.py MECHANISMS); every earlier row reads as before;
    # - 16.6% / 15.5% / 2.8% before SGLang's overlap scheduler formed each batch one step ahead
    #   (capacity/_engines.py SchedulerDefaults.run_ahead; sglang scheduler.py
    #   event_loop_overlap): the five SGLang TTFTs 37.7% -> 21.7% median (70B -45.5/-37.7/-46.8%
    #   -> -29.6/-21.7/-32.0%, 405B -34.9/-36.8% -> -16.5/-18.4%), still low; no other row moves;
    # - 15.2% / 16.0% / 2.8% over 85 / 80 / 85 rows before DataCrunch's five SGLang H200 rows
    #   joined out of sample (issue 31; nothing fitted): their TTFT 37.7% median (35-47% low,
    #   not explained, validate_capacity.py MECHANISMS), ITL 1.6% at the simulated p50 against
    #   the quoted medians, tok/s 3.5%;
    # - ITL 16.4% / tok/s 3.8% before FP8 W8A8 on Hopper read its tensor-core GEMM's share, 0.625,
    #   not the int8 weight-only 0.524 (compute/efficiency.py gemv_bw_fp8_tensorcore): NIM's ITL
    #   5.3% -> 2.2%, tok/s 7.4% -> 2.9%, its TTFT 13.1% -> 13.4%, the wrong way;
    # - ITL 17.5% (TensorRT-LLM 18.8%) before the H200 SXM streamed at its measured share beside
    #   the H100's, 0.85 x 0.965 (compute/device.py stream_share): every H200 ITL toward the
    #   measured (8B 467/16 QPS 2 across it, -1.7% -> +1.7%); TTFT 15.2% either way, 10 H200 TTFTs
    #   and 5 tok/s the wrong way by 0.1-2.1 points;
    # - 18.3% / 19.8% / 3.9% before the NIM rows ran an FP8 KV cache and the 4090 rows their
    #   served 100-token mean (the 4090's tok/s the wrong way, 9.5% -> 12.5%);
    # - 17.2% / 17.4% / 4.6% before issues 29/31's one weight share at every M: the prefill
    #   chunks' weights at the GEMV share up to ~770 rows (TTFT up, toward the measured), the
    #   decode GEMMs' rows no longer at it (ITL down ~0.1-1%, the wrong way: TensorRT-LLM 18.7% ->
    #   18.8%); tok/s 4.6% -> 3.8% once vLLM V1's output processing ran beside the steps (the 4090
    #   rows 12.4% -> 6.3%).
    assert vc.summary(rows, "ttft_ms")["median_abs_error"] == pytest.approx(0.181, abs=0.005)
    assert vc.summary(rows, "itl_ms")["median_abs_error"] == pytest.approx(0.161, abs=0.005)
    assert vc.summary(rows, "output_tokens_per_s")["median_abs_error"] == pytest.approx(
        0.038, abs=0.005)
    nim = "nvidia-nim"
    assert vc.summary(rows, "ttft_ms", nim)["median_abs_error"] == pytest.approx(0.134, abs=0.005)
    assert vc.summary(rows, "itl_ms", nim)["median_abs_error"] == pytest.approx(0.022, abs=0.005)
    sgl = "datacrunch-sglang-h200"
    assert vc.summary(rows, "ttft_ms", sgl)["median_abs_error"] == pytest.approx(0.236, abs=0.01)
    assert vc.summary(rows, "output_tokens_per_s", sgl)["median_abs_error"] < 0.01
    assert vc.summary(rows, "itl_ms", sgl)["median_abs_error"] == pytest.approx(0.016, abs=0.005)


@pytest.mark.xfail(strict=True, reason="issue 29's bar not met for TTFT: median |error| 18.1% "
                   "over 109 rows (SGLang on H200 23.6%; TensorRT-LLM online table 12.9% once "
                   "its 8.3 ms per-request cost is counted; "
                   "NIM 13.4%, its C=25-50 rows carrying the closed loop's start-up ramp; "
                   "vLLM on a 4090 86.9%; vLLM on H100/A100 27.6%, the A100 sweep "
                   "36.5% once its rows run the prompts cached before them)")
def test_ttft_meets_the_bar(rows):
    assert vc.summary(rows, "ttft_ms")["median_abs_error"] <= vc.BAR


@pytest.mark.xfail(strict=True, reason="issue 29's bar not met for ITL: median |error| 16.1% "
                   "over 104 rows (TensorRT-LLM online table 17.4%, NIM 2.2%, SGLang 1.6%, "
                   "vLLM on H100/A100 17.4%)")
def test_itl_meets_the_bar(rows):
    assert vc.summary(rows, "itl_ms")["median_abs_error"] <= vc.BAR


def test_stated_kv_dtype_is_run_and_cited(rows):
    # a row that states a KV-cache dtype runs it (the job and the CLI line), and quotes where
    # it comes from; the NIM fp8 rows (inferred, TensorRT-LLM's doc) and the vLLM blog's FP8-KV
    # rows (stated: --kv-cache-dtype fp8) are the ones that state it
    stated = [r for r in rows if r.run.get("kv_dtype")]
    assert {r.run["source_group"] for r in stated} == {"nvidia-nim", "vllm-blog-fp8-kv"}
    for r in stated:
        src = r.run["kv_dtype_source"]
        assert src["url"].startswith("https://") and src["quote"], r.run["id"]
        assert f"--kv-dtype {r.run['kv_dtype']} " in r.command, r.command


def test_served_output_mean_is_the_rows_own_ratio(rows):
    # output tok/s over req/s is the mean served output (a closed loop's both rates share one
    # window): 210 / 2.09 = 100.48 tokens on the 4090's concurrency-4 row
    served = [r for r in rows if r.run.get("output_len_served")
              and r.run["source_group"] == "mushfiqrahman-vllm-4090"]
    assert len(served) == 5
    for r in served:
        m, s = r.run["measured"], r.run["output_len_served"]
        ratio = m["output_tokens_per_s"]["value"] / m["requests_per_s"]["value"]
        assert s["mean"] == pytest.approx(ratio, abs=0.005)
        assert s["run_as"] == round(ratio) < r.run["output_len"]
        assert f"--output {s['run_as']} " in r.command
    c4 = next(r for r in served if r.run["load"]["concurrency"] == 4)
    assert c4.run["output_len_served"]["mean"] == pytest.approx(100.48, abs=0.01)


def test_drawn_lengths_run_as_the_lines_own_means(rows):
    # DataCrunch's SGLang lines draw each prompt and output length up to 1024
    # (random_range_ratio 0.0): the served means are total tokens / completed, e.g.
    # 152612 / 300 = 508.7 in and 160347 / 300 = 534.5 out at 1 req/s
    drawn = [r for r in rows if r.run["source_group"] == "datacrunch-sglang-h200"]
    assert len(drawn) == 5
    for r in drawn:
        t = r.run["run_totals"]
        for side, total in (("input", "total_input_tokens"), ("output", "total_output_tokens")):
            s = r.run[f"{side}_len_served"]
            assert s["mean"] == pytest.approx(t[total] / t["completed"], abs=0.005)
            assert s["run_as"] == round(t[total] / t["completed"]) < 1024


def test_bench_serving_draws_are_the_lines_own_requests(rows):
    # sglang.bench_serving at its default --seed 1 (numpy's legacy generator): the draws sum to
    # each line's own totals, 152612 / 160347 tokens over 300 requests at 1 req/s (the 405B's
    # 1 req/s line the same 300 draws), and at random_range_ratio 0 they span 1..1024 in and
    # 0..1024 out (3 outputs of 0 at 4 req/s, run as 1)
    drawn = [r for r in rows if r.run.get("drawn")]
    assert {r.run["source_group"] for r in drawn} == {"datacrunch-sglang-h200"}
    assert len(drawn) == 5
    for r in drawn:
        wl = vc.bench_serving_workload(r.run)
        t = r.run["run_totals"]
        assert len(wl.requests) == t["completed"] == r.run["num_requests"]
        assert sum(q.input_tokens for q in wl.requests) == t["total_input_tokens"]
        zeros = sum(q.output_tokens == 1 for q in wl.requests)  # drawn 0 or 1, both run as 1
        assert sum(q.output_tokens for q in wl.requests) - zeros <= t["total_output_tokens"]
        assert 1 <= min(q.input_tokens for q in wl.requests)
        assert max(q.input_tokens for q in wl.requests) <= 1024
        assert "--workload" in r.command
        # the Poisson gaps' mean is 1 / rate: 300 gaps at 1 req/s end near 300 s (here 293.6),
        # and the simulated run ends within 1.2% of the line's own duration
        span = wl.requests[-1].arrival_s
        assert span == pytest.approx(t["completed"] / r.run["load"]["request_rate"], rel=0.07)
        sim_span = (sum(q.output_tokens for q in wl.requests)
                    / r.predicted["output_tokens_per_s"])
        assert sim_span == pytest.approx(t["duration_s"], rel=0.012), r.run["id"]
    rps1 = next(r for r in drawn if "70b" in r.run["id"] and r.run["load"]["request_rate"] == 1)
    wl = vc.bench_serving_workload(rps1.run)
    assert sum(q.output_tokens for q in wl.requests) == 160347
    bad = dict(rps1.run, drawn=dict(rps1.run["drawn"], seed=2))
    with pytest.raises(ValueError, match="not the line's 152612 / 160347"):
        vc.bench_serving_workload(bad)


def test_median_figures_read_the_simulated_median():
    # a row quoting medians is compared with the simulation's p50, a row quoting means with its
    # mean: Stats(mean=2, p50=1) reads 1 for a median figure and 2 for a mean one
    st = Stats(mean=2.0, p50=1.0, p90=3.0, p99=4.0)
    assert vc._stat(st, {"measured": {"itl_ms": {"value": 9, "stat": "median"}}}, "itl_ms") == 1.0
    assert vc._stat(st, {"measured": {"itl_ms": {"value": 9, "stat": "mean"}}}, "itl_ms") == 2.0
    assert vc._stat(st, {"measured": {}}, "ttft_ms") == 2.0


def test_simulated_concurrency_matches_the_fixed_length_inf_rows(rows):
    # Little's law (output tok/s x ITL) on the 467/256 INF rows, every request sent at once:
    # measured 347-367 requests decoding at once, and gpuplan's 0.14 scheduler (max_batch_size
    # 2048, GUARANTEED_NO_EVICT, the pool holding all 500) the same within 3%. A batch limit
    # fitted to the 202/214 rows' 173-179 would break this (validate_capacity.md, "All at once")
    checked = 0
    for r in rows:
        if r.run["source_group"] != "tensorrt-llm-online" or "-467-256-qpsinf" not in r.run["id"]:
            continue
        m = vc.all_at_once(r.run, vc._measured_means(r.run))
        p = vc.all_at_once(r.run, r.predicted)
        assert 340 < m["decoding"] < 370, r.run["id"]
        assert p["decoding"] == pytest.approx(m["decoding"], rel=0.03), r.run["id"]
        assert p["latency_over_makespan"] > 0.97 and m["latency_over_makespan"] > 0.97
        checked += 1
    assert checked == 4


def test_a100_cold_prefill_gap_is_before_the_last_steps(rows):
    # dennislee22's A100 sweep, N = 10 at 0.5 (9 cold 1,024-token prompts in 2,048-token
    # chunked steps, first tokens in pairs at the end of five steps): the README's Test 5 block
    # quotes median / p99 TTFT 511.95 / 723.97 ms (serving_runs.json ``spread``). The stretch
    # between them is the last two prefill steps, apart from any delay common to every request:
    # 212.0 ms measured against 197.4 simulated (1.07x), where the median alone reads 1.35x --
    # so the simulated step is not ~1.3x too fast; the gap is front-loaded (issue 29,
    # validate_capacity.py MECHANISMS (3)). A step timed 1.3x slower would fail the first
    # bound, one 1.3x faster (or a lost delay) the second.
    r = next(r for r in rows if r.run["id"] == "dl-vllm-qwen2-7b-a100-util05-1024-1024-n10")
    sp = r.run["spread"]
    measured = sp["ttft_p99_ms"] - sp["ttft_median_ms"]
    simulated = r.ttft_pct_ms["p99"] - r.ttft_pct_ms["p50"]
    assert measured == pytest.approx(212.02)
    assert measured / simulated == pytest.approx(1.074, abs=0.03)
    assert sp["ttft_median_ms"] / r.ttft_pct_ms["p50"] - measured / simulated > 0.2


def test_a100_prose_quotes_todays_group_medians(rows):
    # the A100 paragraph's SXM medians and N = 1 ITL are today's rows', by hand here
    g = [r for r in rows if r.run["source_group"] == "dennislee22-vllm-a100"]
    assert len(g) == 13
    med = [100 * statistics.median(abs(r.error(k)) for r in g) for k, _ in vc.FIGURES]
    text = vc.fill_mechanisms(vc.MECHANISMS, rows)
    assert f"today's SXM table: {med[0]:.1f} / {med[1]:.1f} / {med[2]:.1f}%;" in text
    n1 = next(r for r in g if r.run["id"].endswith("util05-1024-1024-n1"))
    assert f"({n1.predicted['itl_ms']:.2f} ms today;" in text
