"""The speed half of the validation table (benchmarks/validate_speed.md): recomputed here from
benchmarks/published/runs.json, summarized per split, and held to issue 12's bar on the holdout.

The model's constants were set from sources and the calibrate split only; the holdout is reported,
never fitted. Issue 12's bar (median |error| <= 10%, worst <= 25%) is asserted, and so is what is
reached below it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.hardware import get_gpu
from gpuplan.models import load_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_speed as vs  # noqa: E402


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUPLAN_BENCH_DB", str(tmp_path_factory.mktemp("db") / "none.sqlite"))
    try:
        yield vs.rows()
    finally:
        mp.undo()


def test_every_speed_run_is_predicted_or_says_why(rows):
    runs = [r for r in json.loads(vs.RUNS.read_text())["runs"] if r["kind"] in vs.SPEED_KINDS]
    assert len(rows) == len(runs)
    for r in rows:
        assert (r.predicted is not None) != bool(r.why_not), r.run["id"]
        if r.predicted is not None:
            assert r.predicted > 0 and r.measured > 0
    # the issue's split: both sides are populated, holdout from several independent sources
    hold = {r.run["source_group"] for r in rows if r.run["split"] == "holdout" and r.ratio}
    assert len(hold) >= 4


def test_table_in_the_repository_is_current(rows):
    assert vs.OUT_MD.read_text() == vs.render(rows), \
        f"benchmarks/validate_speed.md is stale: run `{vs.COMMAND}`"
    stored = json.loads(vs.OUT_RESIDUALS.read_text())
    fresh = vs.residuals(rows)
    assert stored == json.loads(json.dumps(fresh))


def test_summary_by_hand(rows):
    hold = [abs(r.ratio - 1) for r in rows if r.ratio is not None and r.run["split"] == "holdout"]
    hold.sort()
    n = len(hold)
    median = hold[n // 2] if n % 2 else (hold[n // 2 - 1] + hold[n // 2]) / 2
    s = vs.summary(rows, "holdout")
    assert s["n"] == n and s["median_abs_error"] == pytest.approx(median)
    assert s["worst_abs_error"] == pytest.approx(hold[-1])


def test_holdout_error_reached(rows):
    # what this model reaches on runs it was never fitted to (issue 12 measured 17% / 2.56x before;
    # 18.3% / 82.1% before Volta's Tensor Core share and fp16 loss scaling's passes; 18.3% / 58.2%
    # after, benchmarks/validate_speed.md; timing multi-node runs on their topology moved Narayanan's
    # 1.7B row 0.93 -> 0.89, not the summary; timing the TP/PP/CP rows at the layouts of
    # tests/unit/test_published_layouts.py added 8 holdout rows: 25 runs, 17.1% / 58.2%; Llama 3 at
    # the paper's pipeline and Megatron 1T's FLOPs counted with the recompute: 12.0% / 58.2%;
    # eager RMSNorm/rotary/SwiGLU counted from transformers' code, the DLE 32G fine-tuning rows at
    # the batch their figures are (4; runs.json says why), the TensorRT-LLM online rows at their
    # stated 2 requests/s: 11.1% / 30.6%; LoRA's adapter passes timed and the torchtune rows at the
    # configs of the commits that published them, the clip each source's code runs -- DLE
    # fine-tuning's per-parameter .item() in BertAdam, its GradientClipper under fp16: 10.8% /
    # 24.8%; torchtune's own model code -- its eager RoPE chain, K/V expanded to every head: 9.2% /
    # 24.4%; Narayanan 2021's eight middle Table 1 rows added, read 1.00-1.11x: 33 runs, 9.2% /
    # 24.4%; its Table 2, PTD-P 0.98-1.06x and DeepSpeed ZeRO-3 0.85-1.21x: 45 runs, 8.0% / 24.4%,
    # the other groups' 23 runs 9.2% -- asserted below, so one large group cannot carry the bar;
    # DeepSpeed ZeRO-3's all-gathers counted as its coordinator fetches them and waited for as
    # its 2021 code did: Table 2's ZeRO-3 rows 0.82-1.04x, still 8.0% / 24.4%; a layout's
    # micro-batch paced as the single-GPU step is -- the device gap between kernels, not a whole
    # launch each, stretched where the host is slower (issue 27: speed and cluster one model) --
    # moved the layout rows +0.5-2%: still 8.0% / 24.4%, the other groups' median 9.2% -> 9.65%,
    # its median row Llama 3 405B at 131k tokens 1.09x -> 1.10x, so that bar is 9.7%; the
    # TensorRT-LLM online rows predicted by gpuplan.capacity's simulation, validate_capacity's
    # call, in place of Little's law over the step model (issue 27's one truth, onlinecap):
    # 1.13/1.08/1.20x -> 1.14/1.12/1.21x, the 70B row now the others' median row: 9.65% -> 11.2%,
    # the wrong way, so that bar is 11.3%)
    #
    # These bars are held on the runs they were set on: the holdout before issue 31 added its
    # out-of-sample groups (OUT_OF_SAMPLE below), which test_out_of_sample_holdout_reads reports.
    old = [r for r in rows if r.run["source_group"] not in OUT_OF_SAMPLE]
    s = vs.summary(old, "holdout")
    assert s["n"] >= 45
    others = [abs(r.ratio - 1) for r in old if r.ratio is not None
              and r.run["split"] == "holdout" and r.run["source_group"] != "narayanan2021"]
    assert statistics.median(others) <= 0.113
    assert s["median_abs_error"] <= 0.095
    assert s["worst_abs_error"] <= 0.245


def test_holdout_meets_the_issue_bar(rows):
    # issue 12's bar, on the holdout it was set on (the whole holdout: the strict xfail below)
    s = vs.summary([r for r in rows if r.run["source_group"] not in OUT_OF_SAMPLE], "holdout")
    assert s["median_abs_error"] <= 0.10 and s["worst_abs_error"] <= 0.25


OUT_OF_SAMPLE = set(vs.OUT_OF_SAMPLE_GROUPS)


def test_out_of_sample_holdout_reads(rows):
    # what the whole holdout reads with issue 31's runs: today 93 runs, 7.2% median, 41.1% worst
    # (benchmarks/validate_speed.md, "## holdout"; the bounds asserted below are looser). History,
    # oldest first: 79 runs, 12.1% median, 70.8% worst when this test was first written
    # (13.1% / 75.0% before the network model held the node's NICs, 13.0% median before the SM
    # contention of overlapped collectives).
    # torchtitan's four bf16 rows 1.64-1.70x before its op-level selective checkpointing was
    # timed, 1.46-1.54x after; AutoAWQ's 24 rows 0.56-1.71x (its 4-bit kernels reach ~73% of the
    # bandwidth at batch 1, gpuplan's 4-bit fraction is gpt-fast's 42%); the IBM FSDP post's six
    # rows, their 400 / 800 Gbps read per node as written before any prediction was read, 0.25-
    # 0.29x while a ring across nodes ran at one NIC's rate (74-82% of the step exposed
    # all-gathers and reduce-scatters), now on the node's 8 NICs with the traffic hidden: the
    # A100 rows 1.06-1.26x, the H100 rows 1.36-1.55x, as those GPUs' single-node FSDP rows read;
    # then (the SMs NCCL's 24 CTAs hold while the hidden traffic runs, efficiency.overlap_sm_share)
    # 0.95-1.11x and 1.21-1.37x, the whole holdout 12.1% median: the hidden traffic now costs
    # 24 / SMs of its time, 10-12% of these steps (at most 24/108 = 22% on A100, 24/132 = 18% on
    # H100, were all of the step hidden traffic). Issue 30/31 (awq31): AutoAWQ's GEMM kernel at
    # the 16-bit GEMV share (QUANT_KERNELS autoawq-gemm) moves the holdout to 10.4% median; its
    # worst becomes 159.5%, AutoAWQ's GEMV kernel at batch 8 (the Job cannot pick that kernel, so
    # it is timed as the GEMM one, which reads the weights once for the batch). Issue 31
    # (tt31): torchtitan's 14 Float8 rows expressed (fp8-tensorwise, validate_speed's
    # _torchtitan_float8) and its 18 rows timed on H100-SXM-96GB (2.4 TB/s, not 3.35): the four
    # BF16 rows 1.45-1.51x -> 1.32-1.46x, then 1.31-1.46x with torchtitan 9dec370's foreach AdamW;
    # the group 48.3% / 51.4% (4 rows) -> 35.9% / 71.5% (18), the whole holdout 93 runs, 11.4%
    # median, worst still 159.5%. Issue 31 (gemv): the autoawq rows carry the kernel their README
    # row names (awq_version, Architecture.checkpoint_kernel) and AutoAWQ's GEMV kernel reloads
    # its packed weights once per row up to 8 rows (QUANT_KERNELS autoawq-gemv): its two batch-8
    # rows 2.60x / 1.95x -> 0.38x / 0.42x (the 4090's L2 serving re-reads is not modelled), the
    # group's worst 159.5% -> 61.8%, the holdout 11.4% median, worst 71.5% (torchtitan's Float8
    # CP rows).
    # Issue 31 (ttc): AsyncTP hides each TP collective under its own
    # GEMM only (micro_pipeline_tp's fused all-gather-matmul / matmul-reduce-scatter) and
    # torch's context parallel is timed as torchtitan 9dec370 ran it (the all-gather rotater
    # beside step 0, the fp32 dK/dV ring, the fp32 merges): the 70B AsyncTP row 1.14x -> 1.02x,
    # the 405B AsyncTP rows 1.25-1.31x -> 1.20-1.23x, the CP 4-8 rows 1.49-1.71x -> 1.41-1.64x;
    # the group 35.9% / 71.5% -> 35.9% / 64.0%, the whole holdout 11.2% median (Llama 3's CP16
    # row 1.09x -> 1.03x by the same merges).
    # Issue 31 (titancp): FSDP2's copy-out and chunk-cat timed on the compute stream for
    # torchtitan (14 B an element a micro-batch): its FSDP rows 1.18-1.33x -> 1.15-1.29x; torch
    # CP's K/V contiguous copies and forward cats and the flash backward's per-call dO.O and dQ
    # accumulator passes: the 8B CP2-8 rows 1.08/1.43/1.48x -> 1.07/1.42/1.47x, the 405B CP8
    # row 1.48x -> 1.47x; the group 25.0% / 48.1% -> 22.7% / 47.3%; Llama 3's and OPT's rows,
    # which ride the torchtitan profile, -0.1% to -1.3% (their FSDPs were others, the 0.1-0.8%
    # of the copies a cause those runs did not have). Asserted as reached, so a change that
    # moves it is seen. The online rows by gpuplan.capacity (onlinecap, above): 10.9% -> 11.2%
    # Issue 31 (titan): H100-SXM-96GB's FP8 GEMMs at the MAMF H100 SXM FP8 share (0.709, the
    # same GH100 SXM5 die) rather than the BF16 default 0.80: torchtitan's 14 Float8 rows
    # 0.01-0.06x less optimistic (8B FSDP 1.22/1.15 -> 1.17/1.10, 405B 1F1B 1.14 -> 1.08, the
    # 70B 2D rows 0.88/0.98 -> 0.85/0.95); the group 22.6% / 47.3% -> 19.5% / 46.3%, the whole
    # holdout 10.9% -> 10.4% median. Then torchao's Float8 TP styles (torchtitan apply_tp with
    # float8 on: all-gathers in float8, reduce-scatters in bf16, parallel.tp_collectives_s): the
    # 70B 2D rows 0.85/0.95 -> 0.90/0.98, the 405B rows the wrong way 1.08/1.10/1.07/1.27/1.26 ->
    # 1.10/1.12/1.08/1.28/1.27; the group 19.5% / 46.3%, the holdout 10.4% / 46.3% unchanged.
    # Then a checkpointed block's narrow casts as they re-run (step.narrow_recompute_op): the
    # layout path had recomputed the whole step's casts (the gradients' and the weights' too),
    # the single-GPU path none: the layout rows the wrong way (8B FSDP128 Float8 1.10 -> 1.20,
    # its FSDP8 twin 1.17 -> 1.15; 70B 0.90/0.98 -> 0.96/1.05; 405B 1.10/1.12/1.08/1.28/1.27/
    # 1.46 -> 1.17/1.19/1.13/1.32/1.30/1.48; 8B CP2-8 +0.01-0.02); the group 19.7% / 48.0%, the
    # holdout 10.9% / 48.0%. Merged over main's fsdpnode and awq (main: torchtitan 21.6% /
    # 47.2%, holdout 8.9% / 47.2%): torchtitan 19.0% / 48.0%, holdout 7.7% / 48.0%.
    # Issue 31 (cpring): torchtitan's Llama repeats K and V to the query heads before SDPA, so
    # its context parallel all-gathers, rotates (fp32 dK/dV) and merges 4x (8B) / 16x (405B at
    # TP 8) the GQA K/V: 405B CP2/4/8 1.32/1.30/1.48 -> 1.24/1.21/1.30, 8B CP2/4/8 1.08/1.42/
    # 1.47 -> 1.05/1.39/1.44; torchtitan 19.0% / 43.8%, holdout 7.5% / 48.0% -> 7.3% / 43.8%.
    # Issue 31 (ttpower): the 500 W H100 HBM2e's tensor clock read from a published measured SM
    # clock (arXiv:2604.11391v2 Fig. 6b: 0.879, not the ratings' line 0.896): every torchtitan
    # row -0.01 to -0.03 (8B FSDP8 compile 1.23 -> 1.21, 8B CP8 1.44 -> 1.41); torchtitan 19.0%
    # / 43.8% -> 17.3% / 41.3%, holdout 7.7% / 43.8% -> 7.7% / 41.3%.
    s = vs.summary(rows, "holdout")
    new = [r for r in rows if r.run["source_group"] in OUT_OF_SAMPLE and r.ratio is not None]
    assert s["n"] == 45 + len(new) and len(new) == 48
    assert s["median_abs_error"] <= 0.112 and s["worst_abs_error"] <= 0.641
    # AutoAWQ's GEMV at batch 8 (awql2): rows 2-8 re-read each matrix from the RTX 4090's L2 at
    # its measured 3,645 GB/s (every Mistral launch fits the 32 MiB it was measured to keep):
    # 0.38x / 0.42x -> 1.24x / 1.15x; each row's dequantization is not timed (optimistic);
    # issue 31 (awq): the GEMV kernel's batch-1 share from TinyChat's figure (70.2%, not
    # 68.5%) and one fused QKV launch: 1.27x / 1.26x; issue 31 (awqgemv): each row's unpacking
    # and dequantization timed by its instructions (efficiency.AWQ_GEMV_ISSUE_PER_WEIGHT, 8.28
    # a weight at 128 a clock per SM, time.gemv_issue_s), the rows one after another: 1.04x /
    # 1.07x; the batch-1 rows stay bound by their bytes, unchanged
    gemv8 = [r.ratio for r in new if "-gemv-b8-" in r.run["id"]]
    assert len(gemv8) == 2 and all(1.0 < x < 1.10 for x in gemv8)
    (_, _, tt_med, tt_worst), = [g for g in vs.by_group(rows, "holdout") if g[0] == "torchtitan"]
    assert tt_med <= 0.174 and tt_worst <= 0.414
    ibm = [r for r in new if r.run["source_group"] == "ibm-fsdp-blog"]
    assert len(ibm) == 6
    for r in ibm:
        cap = 24 / (108 if "a100" in r.run["id"] else 132)
        assert 0.05 < r.comm_share < cap
    a100 = [r.ratio for r in ibm if "a100" in r.run["id"]]
    h100 = [r.ratio for r in ibm if "h100" in r.run["id"]]
    assert len(a100) == len(h100) == 3
    # IBM FMS's fp32 eager rotary (model_code fms: 36 B a q/k element against transformers' 20 B)
    # moved them 7B 1.114 -> 1.082 (A100), 1.370 -> 1.310 (H100); 34B 1.012 -> 1.001, 1.231 ->
    # 1.208; 70B 0.954 -> 0.945, 1.207 -> 1.188; the group's median 16.1% -> 13.5%. Issue 31
    # (fsdpnode): the 7B rows under HSDP over a node (dp_shard 8, the README's row) and FSDP's
    # edge units exposed (compute.parallel.fsdp_edge_share): 7B 1.082 -> 1.070 (A100), 1.307 ->
    # 1.269 (H100); 34B 1.001 -> 0.993, 1.203 -> 1.190; 70B 0.945 -> 0.941, 1.186 -> 1.179.
    # Issue 31 (ibmfsdp): FSDP1's split-backward cat of each unit's gradients into its flat
    # gradient (fsdp1_grad_cat_bytes, 4 B a bf16 parameter on the compute stream): 7B 1.070 ->
    # 1.062 / 1.269 -> 1.255, 34B 0.993 -> 0.986 / 1.190 -> 1.177, 70B 0.941 -> 0.935 / 1.179 ->
    # 1.166 (the A100 34B/70B rows the wrong way). Issue 31 (ibmfsdp, second pass): fms-fsdp's
    # clip at 1.0 each step (FSDP1's norm and mul per tensor over the fp32 shard): 7B 1.0616 ->
    # 1.0584 / 1.2553 -> 1.2494, 34B 0.9864 -> 0.9861 / 1.1772 -> 1.1766, 70B 0.9346 -> 0.9344 /
    # 1.1657 -> 1.1651 (the A100 rows the wrong way, by at most 0.3%)
    assert 0.92 < min(a100) and max(a100) < 1.07 and 1.15 < min(h100) and max(h100) < 1.25


@pytest.mark.xfail(strict=True, reason="issue 31's bar is not met out of sample: the whole "
                   "holdout reads 7.2% median and 41.1% worst (torchtitan's 8B Float8 CP 8 row; "
                   "the torchtitan group's median 15.1%, over 15% again since torchao "
                   "tensorwise's saved FP8 input is cast once, not twice: fp8.TORCHAO_SAVED_INPUT"
                   ") (benchmarks/validate_speed.md, "
                   "'holdout: by source group' and 'the worst ten')")
def test_holdout_meets_issue_31s_bar(rows):
    s = vs.summary(rows, "holdout")
    assert s["median_abs_error"] <= 0.08 and s["worst_abs_error"] <= 0.25
    assert all(med <= 0.15 for _, _, med, _ in vs.by_group(rows, "holdout"))


def test_only_torchtitans_own_pipelines_reduce_after_the_last_backward(rows):
    # torchtitan's PP rows ran torch.distributed.pipelining (the profile's pp_grad_reduce); the
    # Llama 3 paper's rows, timed on the same profile, ran Meta's own pipeline: told so
    pp_rows = [r for r in rows if r.run["source_group"] == "torchtitan" and r.run["job"]["pp"] > 1]
    assert len(pp_rows) == 6
    for r in pp_rows:
        assert vs.pp_reduce_after_backward(r.run, vs.job_of(r.run)) is None, r.run["id"]
        assert "torch.distributed.pipelining" in vs.misses(r)
        keep: list = []
        vs.predict(r.run, keep)
        lay = keep[0].layout
        # the last chunk's fp32 reduce-scatter (4 of the 4 + 1 bytes: FP8 weights gathered)
        assert lay.dp_exposed_s >= lay.dp_comm_s * 0.8 / lay.layout.chunks
    for r in rows:
        if r.run["source_group"] == "llama3":
            assert vs.pp_reduce_after_backward(r.run, vs.job_of(r.run)) is False, r.run["id"]


def test_torchtitan_cp_rows_exchange_repeated_kv(rows):
    # torchtitan 9dec370's Llama hands SDPA K and V repeated to the query heads (the profile's
    # sdpa_repeat_kv); the Llama 3 paper's CP row, timed on the same profile, all-gathers the
    # GQA K and V (arXiv 2407.21783 sec. 3.3.2): only it is told so
    llama3 = next(r for r in rows if r.run["id"] == "llama3-405b-h100-x16384-s131072")
    assert vs.sdpa_repeat_kv(llama3.run, vs.job_of(llama3.run)) is False
    cp_rows = [r for r in rows if r.run["source_group"] == "torchtitan" and r.run["job"]["cp"] > 1]
    assert len(cp_rows) == 6
    for r in cp_rows:
        assert vs.sdpa_repeat_kv(r.run, vs.job_of(r.run)) is None, r.run["id"]
    # the 405B rows cross the nodes with CP (TP fills a node): the 16-head K/V costs their step
    # most at CP 8, whose all-gathers of 8 ranks' K and V, traced into torchtitan's compiled
    # blocks, are waited for where they are issued (compute.parallel.torch_cp_traced)
    big = _tt(rows, "6-llama31-405b-fsdp1-cp8-tp8-pp8-s262144-float8")
    grouped = vs.predict({**big.run, "source_group": "llama3"}).predicted
    assert big.predicted < grouped * 0.95
    assert 1.0 < big.ratio < 1.2


def test_the_cap_is_costed_as_the_measured_8b_fsdp_run_lost(rows):
    # issue 31 (h100cap): no clock curve of a GEMM load at 500 W on an H100 SXM was found; what
    # the 500 W limit costs torchtitan's Llama 3.1 8B FSDP rows (estimate over the same run's
    # uncapped estimate) is held to the end-to-end loss Mayr et al. measured for LLaMA 3 8B FSDP
    # pre-training on an H100 of the same HBM2e memory (arXiv:2603.16164 Table 4: 27,705.3 of
    # 30,271 tokens/s at 500 W). A clock share fitted to close these holdout rows (0.68-0.72)
    # would cost them 20-27% and fail here.
    mayr = 27705.3 / 30271.0
    fsdp = [r for r in rows if r.run["source_group"] == "torchtitan"
            and r.run["job"]["tp"] == 1 and r.run["job"]["cp"] == 1 and r.run["job"]["dp"] >= 8]
    assert len(fsdp) == 7
    for r in fsdp:
        assert r.run["hardware"]["power_limit_w"] == 500
        free = vs.predict({**r.run, "hardware": {**r.run["hardware"], "power_limit_w": None}})
        assert r.predicted / free.predicted == pytest.approx(mayr, abs=0.025), r.run["id"]
        assert free.predicted > r.predicted
    # the worst-ten note says so, with the row's own cost and the measured loss
    row = _tt(rows, "1-llama31-8b-fsdp8-compile")
    note = vs.misses(row)
    assert "the cap costs this estimate 9.9% of its uncapped rate" in note
    assert "against 8.5% measured end to end at 500 W" in note and "2603.16164" in note


def _tt(rows, suffix):
    (row,) = [r for r in rows if r.run["id"] == "torchtitan-t" + suffix]
    return row


def test_torchtitan_float8_rows_are_mapped_from_its_code(rows):
    # torchtitan 9dec370 has one float8 recipe (tensor-wise dynamic scales) and docs/float8.md
    # launches it with the FSDP float8 all-gather: every Float8 row is fp8-tensorwise with
    # --fp8-param-gather, compiled, and predicted
    f8 = [r for r in rows if r.run["source_group"] == "torchtitan" and r.run["job"]["float8"]]
    assert len(f8) == 14 and all(r.predicted is not None for r in f8)
    for r in f8:
        job = vs.job_of(r.run)
        assert (job.precision, job.fp8_param_gather, job.runtime) == ("fp8-tensorwise", True,
                                                                      "compile"), r.run["id"]
    # Table 5: local batch 32 over PP 8 = 8 micro-batches (the PP degree, torchtitan's default)
    # of 32 / 8 = 4; FSDP keeps the gathered weights under PP (ZeRO-2); 512 / (8 x 8) = DP 8
    job = vs.job_of(_tt(rows, "5-llama31-405b-fsdp8-tp8-pp8-interleaved-float8").run)
    assert (job.batch, job.grad_accum, job.zero, job.pp_schedule) == (4, 8, 2, "interleaved:2")
    assert (job.tp, job.pp, job.dp, job.sequence_parallel) == (8, 8, 8, True)
    # Table 6's last row: local batch 8 = 8 micro-batches of 1; 512 / (8 x 8 x 8) = DP 1
    job = vs.job_of(_tt(rows, "6-llama31-405b-fsdp1-cp8-tp8-pp8-s262144-float8").run)
    assert (job.batch, job.grad_accum, job.cp, job.dp, job.seq) == (1, 8, 8, 1, 262144)
    # Table 2's last row: FSDP 1 x CP 8 on 8 GPUs, FSDP2 sharding over dp x cp (ZeRO-3)
    job = vs.job_of(_tt(rows, "2-llama31-8b-fsdp1-cp8-s262144-float8").run)
    assert (job.cp, job.dp, job.zero, job.batch, job.grad_accum) == (8, 1, 3, 1, 1)
    # AsyncTP (Table 4's second row) hides the TP collectives: faster than the same row without
    plain = _tt(rows, "4-llama31-70b-fsdp32-tp8-float8")
    asynctp = _tt(rows, "4-llama31-70b-fsdp32-tp8-asynctp-float8")
    assert vs.LAYOUTS[asynctp.run["id"]][1] and not vs.LAYOUTS[plain.run["id"]][1]
    assert asynctp.predicted > plain.predicted
    # ... but only what each collective's own GEMM covers: measured, AsyncTP gained 876 / 829 =
    # 5.7% on this row (docs/performance.md) and "~8% E2E" on Llama3 70B (discuss.pytorch.org/t/
    # 209487); hiding all of TP under the layer's GEMMs (the userbuffers model) read +31%
    assert 1.0 < asynctp.predicted / plain.predicted < 1.2


def test_torchtitan_rows_run_on_the_grand_teton_h100(rows, monkeypatch, tmp_path):
    # docs/performance.md: 96GB HBM2e at 2.4 TB/s, default 500 W limit; the SXM5's peaks kept
    from gpuplan.hardware import get_gpu

    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    tt, sxm = get_gpu("H100-SXM-96GB"), get_gpu("H100-SXM-80GB")
    assert tt.memory_bandwidth == 2400e9 and tt.peak_flops["bf16"] == sxm.peak_flops["bf16"]
    assert tt.memory_bytes == 96 * 2**30
    tt_rows = [r for r in rows if r.run["source_group"] == "torchtitan"]
    assert len(tt_rows) == 18 and {r.run["hardware"]["gpu"] for r in tt_rows} == {tt.name}
    # the same BF16 run on the 3.35 TB/s part is faster, by less than the bandwidth ratio (only
    # the memory-bound share of the step moves)
    row = _tt(rows, "1-llama31-8b-fsdp8-eager")
    run = {**row.run, "hardware": {**row.run["hardware"], "gpu": sxm.name}}
    on_sxm = vs.predict(run).predicted
    assert row.predicted < on_sxm < row.predicted * 3350 / 2400
    # the 500 W cap below the 700 W TDP is named as a known gap; Llama 3's 700 W rows have none
    assert "500 W, below the 700 W TDP" in vs.misses(row)
    llama3 = next(r for r in rows if r.run["source_group"] == "llama3")
    assert vs._power_cap_gap(llama3.run, llama3) == ""


def test_torchtitan_bf16_rows_step_as_torchtitan_9dec370_did(rows, monkeypatch, tmp_path):
    # the runs' torchtitan (9dec370) left --optimizer.fused off: AdamW foreach, not the engine
    # profile's (today's) fused default
    row = _tt(rows, "1-llama31-8b-fsdp8-eager")
    notes: list[str] = []
    assert vs._optimizer_impl(row.run, "mixed-bf16", notes) == "foreach" and notes
    llama3 = next(r for r in rows if r.run["source_group"] == "llama3")
    assert vs._optimizer_impl(llama3.run, "mixed-bf16", []) is None
    # FSDP2's copies on the compute stream, timed for torchtitan (fsdp2_copy_bytes): 2 gathers x
    # (2 + 2) B + (2 + 4) B = 14 B a parameter; Llama 3.1 8B's parameters at 2.4 TB/s x the 0.85
    # memory fraction ~ 55 ms, ~2-3% of the estimated step at the 500 W cap (16,384 tokens at
    # the predicted rate), so no longer a gap the row names
    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.hardware import get_gpu
    from gpuplan.models import load_model

    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    gpu = get_gpu(row.run["hardware"]["gpu"])
    est = vs.estimate_speed(load_model("llama-3.1-8b"), gpu, vs.job_of(row.run), measured=None,
                            link="nvlink")
    copy_s = 14 * est.trainable_params / (gpu.memory_bandwidth
                                          * default_efficiency(device_from_gpu(gpu)).memory)
    assert round(1e3 * copy_s) == 55
    assert 0.02 < copy_s / (2 * 8192 / row.predicted) < 0.035
    assert est.fsdp_copy_s == pytest.approx(copy_s)
    assert vs._fsdp2_copy_gap(row.run, row) == ""
    assert vs._fsdp2_copy_gap(llama3.run, llama3) == ""


def test_torchtitan_rows_clip_as_its_train_py_does(rows, monkeypatch, tmp_path):
    # train.py @9dec370 clips every step (utils.clip_grad_norm_, foreach=True) at
    # --training.max_norm 1.0: a foreach norm over the local fp32 gradient shards (1 read) and
    # the in-place multiply (1 read, 1 write), 12 B a parameter of the rank's shard: Llama 3.1
    # 8B's 8,030,261,248 over 8 FSDP ranks = 1,003,782,656 x 12 B = 12,045,391,872 B
    row = _tt(rows, "1-llama31-8b-fsdp8-eager")
    notes: list[str] = []
    assert vs._grad_clip(row.run, "mixed-bf16", notes) == (1.0, "foreach") and notes
    llama3 = next(r for r in rows if r.run["source_group"] == "llama3")
    assert vs._grad_clip(llama3.run, "mixed-bf16", []) == (None, None)
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    keep: list = []
    vs.predict(row.run, keep=keep)
    clip = [t.op for t in keep[0].step.ops if t.op.name == "optimizer.clip_grad_norm"]
    assert keep[0].trainable_params == 8_030_261_248
    assert len(clip) == 1 and clip[0].bytes == 12 * 8_030_261_248 // 8 == 12_045_391_872


def test_ibm_fsdp_rows_clip_as_fms_fsdps_loop_does(rows, monkeypatch, tmp_path):
    # fms-fsdp @5e522b4 train_utils.train(): ``model.clip_grad_norm_(cfg.grad_clip_thresh)`` every
    # step, grad_clip_thresh 1.0 (config/training.py); FSDP1's clip_grad_norm_ takes each
    # gradient's vector_norm (1 read) and multiplies each in place (1 read, 1 write) over the
    # rank's fp32 sharded gradients: Llama 2 7B's 6,738,415,616 over its HSDP shard group of 8
    # = 842,301,952 x 12 B = 10,107,623,424 B, added to the layout's optimizer stretch at the
    # memory rate (its launches on top)
    row = next(r for r in rows if r.run["id"] == "ibm-fsdp-llama2-7b-h100-x96")
    notes: list[str] = []
    assert vs._grad_clip(row.run, "mixed-bf16", notes) == (1.0, "per-tensor") and notes
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    keep: list = []
    vs.predict(row.run, keep=keep)
    clipped = keep[0].layout.optimizer_s
    assert keep[0].trainable_params == 6_738_415_616 and keep[0].layout.layout.zero_group == 8
    monkeypatch.setattr(vs, "_grad_clip", lambda run, precision, notes: (None, None))
    keep = []
    vs.predict(row.run, keep=keep)
    hand = 12 * 6_738_415_616 // 8 / (get_gpu("H100-SXM-80GB").memory_bandwidth
                                      * keep[0].efficiency.memory)
    assert 12 * 6_738_415_616 // 8 == 10_107_623_424
    assert hand <= clipped - keep[0].layout.optimizer_s < 1.25 * hand


def test_online_rows_are_gpuplan_capacitys_prediction(rows):
    # issue 27's one truth: each runs.json online row (a request rate) is predicted by the same
    # gpuplan.capacity call validate_capacity.py makes for serving_runs.json's row of the same
    # measurement (TensorRT-LLM's online table, 500 requests), so the two reports cannot disagree
    serving = json.loads(vs.validate_capacity.RUNS.read_text())["runs"]
    online = [r for r in rows if r.mechanism == "online serving"]
    assert len(online) == 3
    for r in online:
        j = r.run["job"]
        twin = [s for s in serving if (s["model"], s["gpu"], s["tp"], s["input_len"],
                                       s["output_len"], s["load"]["request_rate"])
                == (r.run["model"]["catalog"], r.run["hardware"]["gpu"], j["tp"],
                    j["input_len"], j["output_len"], j["qps"])]
        assert len(twin) == 1 and twin[0]["measured"]["itl_ms"]["value"] == 1000 / r.measured
        cap = vs.validate_capacity.predict(twin[0])
        assert cap.requests == 500  # the table's stated request count
        assert r.predicted == pytest.approx(1000 / cap.predicted["itl_ms"], rel=1e-12)


def test_every_row_sits_under_one_mechanism_and_the_tables_add_up(rows):
    done = [r for r in rows if r.ratio is not None]
    assert all(r.mechanism in vs.MECHANISMS for r in done)
    for split in ("calibrate", "holdout"):
        n = vs.summary(rows, split)["n"]
        assert sum(m[1] for m in vs.by_mechanism(rows, split)) == n
        assert sum(g[1] for g in vs.by_group(rows, split)) == n


def test_worst_ten_are_the_furthest_rows(rows):
    hold = sorted((abs(r.ratio - 1), r.run["id"]) for r in rows
                  if r.ratio is not None and r.run["split"] == "holdout")
    worst = vs.worst(rows, "holdout")
    assert [r.run["id"] for r in worst] == [i for _, i in reversed(hold[-10:])]
    assert all(vs.misses(r) for r in worst)


def test_a_decode_rows_measured_step_is_read_off_its_own_figure(rows):
    # AutoAWQ's batch-8 rate counts all eight streams: the step is 8 tokens over it; a batch-1
    # rate (or an online inter-token rate) is one token's time
    by_id = {r.run["id"]: r for r in rows}
    b8 = by_id["autoawq-mistral-7b-gemm-b8-p64-d64-4090"]
    job = vs.job_of(b8.run)
    assert job.batch == 8
    assert vs._measured_step(b8.run, job, b8.measured) == pytest.approx(8 / 1185.25)
    b1 = by_id["autoawq-mistral-7b-gemm-b1-p64-d64-4090"]
    assert vs._measured_step(b1.run, vs.job_of(b1.run), b1.measured) == pytest.approx(1 / 156.317)
    assert "measured 6.75 ms" in b8.diagnosis  # 8 / 1185.25 tokens/s


def test_ibm_fsdp_rows_name_what_their_code_ran(rows):
    # fms-fsdp @5e522b4 README: 7B HSDP, 13B/34B/70B FSDP; the gap says so for the 7B rows only,
    # and for no other source group
    ibm = [r for r in rows if r.run["source_group"] == "ibm-fsdp-blog" and r.predicted]
    assert len(ibm) == 6
    for r in ibm:
        gap = vs._fms_fsdp1_gap(r.run, r)
        assert "FSDP1" in gap and ("HSDP" in gap) == ("7b" in r.run["id"])
        assert gap in vs.misses(r)
    # FMS's eager fp32 rotary is in the job now (tests/unit/test_compute_runtime.py counts its
    # 36 B a q/k element): every row runs model_code fms, and an FMS step is slower than the
    # same job over transformers' code in eager (more bytes), equal compiled (one fused chain)
    for r in ibm:
        assert vs.job_of(r.run).model_code == "fms" and "FSDP2's per-block units" in vs.misses(r)
        # the README's HSDP rows run hybrid sharding over a node's 8 GPUs (the job's dp_shard)
        assert vs.job_of(r.run).dp_shard == (8 if "7b" in r.run["id"] else None)
    model = load_model("llama-2-7b")
    fms = vs.job_of(ibm[0].run)
    rate = {(code, rt): estimate_speed(model, get_gpu("A100-SXM-80GB"), fms.with_(
        model_code=code, runtime=rt), measured=None).tokens_per_s
            for code in ("fms", "transformers") for rt in ("eager", "compile")}
    assert rate["fms", "eager"] < 0.99 * rate["transformers", "eager"]
    assert rate["fms", "compile"] == pytest.approx(rate["transformers", "compile"])
    other = next(r for r in rows if r.run["source_group"] == "nvidia-dle-bert")
    assert vs._fms_fsdp1_gap(other.run, other) == ""


def test_autoawq_rows_run_as_its_benchmark_loop_does(rows):
    # Issue 31 (awqsync): AutoAWQ v0.1.6's examples/benchmark.py synchronizes before and after
    # every forward (host_sync_per_step: each step kernel by kernel from idle) and its fused
    # modules keep a KV window of n_generate tokens rolled by min(100, window) when full: a
    # 2048-token window's steps attend to 1,949..2,048 keys, middle 2048 - 50 + 0.5 = 1998.5
    # -> 1998; a 64-token window rolls all 64 out, 1..64 keys, middle 64 - 32 + 0.5 -> 32. No
    # other run states either (gpt-fast's loop waits once, after generate).
    awq = [r for r in rows if r.run["source_group"] == "autoawq"]
    assert len(awq) == 24
    assert all(r.run["job"]["host_sync_per_step"] for r in awq)
    others = [r for r in rows if r.run["source_group"] != "autoawq"]
    assert not any(r.run["job"].get("host_sync_per_step") or r.run["job"].get("kv_window")
                   for r in others)
    by_id = {r.run["id"]: r for r in awq}
    long = by_id["autoawq-tinyllama-1.1b-gemv-b1-p2048-d2048-4090"].run
    short = by_id["autoawq-tinyllama-1.1b-gemv-b1-p64-d64-4090"].run
    assert vs.job_of(long).context == 1998 and vs.job_of(short).context == 32
    # before: group 10.6% median, 43.7% worst (TinyLlama p2048 1.44x); the sync 1.44x -> 1.42x
    # (p64 1.18x -> 1.12x), the window moves the p2048 rows up (MPT 1.14x -> 1.24x): 10.1% /
    # 42.8%. Issue 31 (awq): the p2048 rows' extra time over p64 is FT's single-query attention
    # (one thread block per head and sequence, each waiting one memory latency per loop
    # iteration: compute/efficiency.py single_query_attention_s, the RTX 4090's 252 ns from
    # gpus.json memory_latency), timed now, and its rotary is in the kernel: TinyLlama p2048
    # 1.43x -> 0.97x, Falcon 1.39x -> 1.17x, Mistral GEMM 1.36x -> 1.05x, MPT 1.24x -> 1.08x,
    # Mistral GEMV 1.19x -> 0.92x; TinyLlama p64 1.12x -> 1.18x (two rotary launches a layer
    # fewer on a host-bound step): the group 10.1% / 42.8% -> 7.2% / 24.8%. The GEMV kernel's
    # share from TinyChat's 4090 figure (gemv_bw_awq_gemv, 70.2%, not 68.5%): 6.7% / 26.0%.
    # The GEMM kernel's 8 split-K partials summed by a kernel after each launch, and the fused
    # modules' one QKV launch: the GEMM rows 2-10% down (Mistral b8 p64 1.09x -> 1.00x), the
    # GEMV rows up (TinyLlama p64 1.23x): 5.6% / 26.6% (Mistral GEMV b8, 1.27x).
    # Issues 29/31 (skinny): a weight matmul's time is the longer of its weights at the kernel's
    # share and all its bytes at the streaming one, so the split-K partials and the rows'
    # activations no longer add time under a weight-bound read: the b8 rows move up (Mistral
    # GEMM b8 p64 1.00x -> 1.04x, p2048 1.05x -> 1.09x; GEMV b8 1.27x): 6.2% / 27.2%, the
    # wrong way.
    (_, _, med, worst_err), = [g for g in vs.by_group(rows, "holdout") if g[0] == "autoawq"]
    assert med <= 0.063 and worst_err <= 0.273
    ratio = {r.run["id"]: r.ratio for r in awq}
    assert 0.98 < ratio["autoawq-tinyllama-1.1b-gemv-b1-p2048-d2048-4090"] < 1.00
    assert 1.02 < ratio["autoawq-mistral-7b-gemm-b1-p2048-d2048-4090"] < 1.04
    # 1.00x before issues 29/31 (its 8 split-K partials now written under the weight stream)
    assert 1.03 < ratio["autoawq-mistral-7b-gemm-b8-p64-d64-4090"] < 1.05


def test_dle_bert_rows_time_q_k_v_as_three_launches(rows):
    # Issue 31: DLE BERT's query, key and value are three nn.Linear (modeling.py
    # BertSelfAttention), timed as three GEMM launches each waving over the SMs on its own
    # (compute/efficiency.separate_launches_s). Before: fine-tune fp32 1.08 (16 GB) / 1.12
    # (32 GB), AMP 1.23 / 1.22, pre-training fp32 0.98, AMP 1.22 -- the group's median 17.2%;
    # after: 1.006 / 1.043, 1.170 / 1.165, 0.984, 1.197 -- 10.4%
    dle = {r.run["id"].removeprefix("dle-bert-large-"): r.ratio for r in rows
           if r.run["source_group"] == "nvidia-dle-bert"}
    assert 1.00 < dle["ft-v100-16g-fp32"] < 1.01 and 1.04 < dle["ft-v100-32g-fp32"] < 1.05
    assert 1.16 < dle["ft-v100-16g-amp"] < 1.18 and 1.16 < dle["ft-v100-32g-amp"] < 1.17
    assert 0.98 < dle["pt128-v100-16g-fp32"] < 0.99 and 1.19 < dle["pt128-v100-16g-amp"] < 1.20
    (group,) = [g for g in vs.by_group(rows, "holdout") if g[0] == "nvidia-dle-bert"]
    assert group[2] < 0.15


def _tune(rows, suffix):
    (row,) = [r for r in rows if r.run["id"] == "torchtune-" + suffix]
    return row


def test_torchtune_rows_run_as_their_configs_say(rows):
    # recipes/configs at the commits that published the tables: the full 8B row's
    # bitsandbytes.optim.PagedAdamW8bit with optimizer_in_bwd: True, every row's
    # CEWithChunkedOutputLoss (8 chunks), the 3B LoRA row's activation offloading; QLoRA's base
    # torchao to_nf4 (double-quantized scalers)
    full = vs.job_of(_tune(rows, "llama31-8b-full-4090-throughput").run)
    assert full.optimizer == "paged-adamw-8bit" and full.optimizer_in_backward
    assert full.loss_chunks == 8
    lora3b = vs.job_of(_tune(rows, "llama32-3b-lora-throughput").run)
    assert lora3b.offload_activations and lora3b.loss_chunks == 8
    assert not lora3b.optimizer_in_backward
    assert vs.job_of(_tune(rows, "llama31-8b-qlora-4090-throughput").run).lora_base == "nf4-dq"
    assert vs.job_of(_tune(rows, "llama32-3b-packed-throughput").run).loss_chunks == 1
    # torchtune's FSDP2 copy-out of the gathered weights on the compute stream (70.6B x 2 gathers
    # x 4 B at 2,039 GB/s x 0.85 ~ 0.33 s of the ~7.8 s step): the 70B LoRA row 1.198 -> 1.150
    assert 1.14 < _tune(rows, "llama31-70b-lora-8xa100-throughput").ratio < 1.16
    # Ada's attention at FlashAttention-2's sm8x shares (0.73 forward, not 0.50): the 4090 rows
    # LoRA 0.781 -> 0.805, QLoRA 0.869 -> 0.893, full 1.114 -> 1.139 (the wrong way); then the
    # full row's paged optimizer states migrated back each step (0.43 s): 1.139 -> 0.952
    assert 0.80 < _tune(rows, "llama31-8b-lora-4090-throughput").ratio < 0.81
    assert 0.89 < _tune(rows, "llama31-8b-qlora-4090-throughput").ratio < 0.90
    assert 0.94 < _tune(rows, "llama31-8b-full-4090-throughput").ratio < 0.96


def test_paged_optimizer_overflow_by_hand(rows):
    # PagedAdamW8bit pages the states of tensors of 1e5 elements or more: every Llama 3.1 8B
    # matrix and embedding, not its 65 norms of 4,096 -- 2 uint8 states each
    from gpuplan.memory import train_memory

    row = _tune(rows, "llama31-8b-full-4090-throughput")
    job = vs.job_of(row.run)
    mem = train_memory(load_model("llama-3.1-8b"), job)
    assert mem.paged_bytes == 2 * (8_030_261_248 - 65 * 4096)  # 14.96 GiB
    # the RTX 4090's 25,756,696,576 B less what torch's allocator holds at the peak
    held = mem.total_bytes - mem.paged_bytes
    over = vs.paged_overflow_bytes(row.run)
    assert over == mem.paged_bytes - (25_756_696_576 - held)
    assert 9.5 * 2**30 < over < 10.5 * 2**30
    # timed coming back over PCIe 4.0 x16 (16 GT/s x 128/130 x 16 lanes / 8 = 31.51 GB/s) at
    # the pinned 0.80: ~0.43 s a step, the evictions beside it (the gap names the other reading)
    pcie = 16e9 * 128 / 130 * 16 / 8
    assert vs._paged_host_bytes(row.run, []) == over
    est = estimate_speed(load_model("llama-3.1-8b"), get_gpu("RTX-4090"), job, measured=None,
                         paged_host_bytes=over)
    assert est.paged_s == pytest.approx(over / (pcie * 0.80))
    assert 0.42 < est.paged_s < 0.44
    plain = estimate_speed(load_model("llama-3.1-8b"), get_gpu("RTX-4090"), job, measured=None)
    assert est.step_time_s == pytest.approx(plain.step_time_s + est.paged_s)
    assert est.to_dict(ops=False)["paged_s"] == est.paged_s and plain.paged_s == 0.0
    assert "serialized" in vs._paged_optimizer_gap(row.run, row)
    lora = _tune(rows, "llama31-8b-lora-4090-throughput")
    assert vs._paged_optimizer_gap(lora.run, lora) == "" and vs._paged_host_bytes(lora.run, []) == 0


def test_packed_torchtune_rows_say_what_their_figures_leave_out(rows):
    # the 3B table's recipes (1814feb17) count labelled tokens only; the 8B table's (30b8519e8)
    # batch["tokens"].numel()
    three = _tune(rows, "llama32-3b-compile-throughput")
    eight = _tune(rows, "llama31-8b-lora-4090-throughput")
    assert "1814feb17" in vs._torchtune_packing_gap(three.run, three)
    assert "flex attention" in vs._torchtune_packing_gap(eight.run, eight)
    assert "1814feb17" not in vs._torchtune_packing_gap(eight.run, eight)
    dle = next(r for r in rows if r.run["source_group"] == "nvidia-dle-bert")
    assert vs._torchtune_packing_gap(dle.run, dle) == ""


def test_torch_cp_rows_name_what_their_ring_was_checked_for(rows):
    # torchtitan's CP rows (issue 31, ttcp2): the ring steps a row adds to its series' CP 1
    # row (the same 32,768 tokens a rank), measured over estimated, by hand from the two rows'
    # published and predicted figures
    base, cp8 = _tt(rows, "2-llama31-8b-fsdp8-cp1-s32768-float8"), \
        _tt(rows, "2-llama31-8b-fsdp1-cp8-s262144-float8")
    assert (base.measured, cp8.measured) == (3890, 548)  # performance.md Table 2, TPS/GPU
    by_hand = (1 / 548 - 1 / 3890) / (1 / cp8.predicted - 1 / base.predicted)
    assert vs.ring_base_run(cp8.run)["id"] == base.run["id"]
    assert vs.ring_step_ratio(cp8.run, cp8) == pytest.approx(by_hand, rel=1e-9)
    gap = vs._torch_cp_gap(cp8.run, cp8)
    assert f"cost {by_hand:.2f}x the estimate's" in gap and "FlashAttention-2" in gap
    assert gap in vs.misses(cp8)
    # the finding the note rests on: the 8B series' CP 8 ring steps cost more over the
    # estimate than the 405B series' at the same sub-SDPA shapes a rank
    big = _tt(rows, "6-llama31-405b-fsdp1-cp8-tp8-pp8-s262144-float8")
    assert vs.ring_step_ratio(big.run, big) < vs.ring_step_ratio(cp8.run, cp8)
    # not a CP row, or not torchtitan's context_parallel (the Llama 3 paper's own 4D code,
    # an MFU figure): no note, no ratio
    assert vs._torch_cp_gap(base.run, base) == "" and vs.ring_base_run(base.run) is None
    llama3 = next(r for r in rows if r.run["id"] == "llama3-405b-h100-x16384-s131072")
    assert vs._torch_cp_gap(llama3.run, llama3) == ""
    assert vs.ring_step_ratio(llama3.run, llama3) is None


def test_torch_cp_rows_read_the_ring_steps_each_row_adds_to_the_one_before(rows):
    # issue 31, ttcp: the ring steps a row adds to its series' next lower CP row, measured
    # over estimated, by hand from the two rows' published (performance.md Table 2, TPS/GPU)
    # and predicted figures
    cp1, cp2, cp4, cp8 = (_tt(rows, f"2-llama31-8b-{x}-float8") for x in (
        "fsdp8-cp1-s32768", "fsdp4-cp2-s65536", "fsdp2-cp4-s131072", "fsdp1-cp8-s262144"))
    assert (cp2.measured, cp4.measured, cp8.measured) == (2540, 1071, 548)
    assert vs.ring_previous_run(cp8.run)["id"] == cp4.run["id"]
    assert vs.ring_previous_run(cp4.run)["id"] == cp2.run["id"]
    assert vs.ring_previous_run(cp2.run)["id"] == cp1.run["id"]
    assert vs.ring_series_run(cp8.run, 2)["id"] == cp2.run["id"]
    assert vs.ring_previous_run(cp1.run) is None and vs.ring_series_run(cp4.run, 8) is None
    by_hand = (1 / 1071 - 1 / 2540) / (1 / cp4.predicted - 1 / cp2.predicted)
    assert vs.ring_marginal_ratio(cp4.run, cp4) == pytest.approx(by_hand, rel=1e-9)
    # at CP 2 the row before is the CP 1 one: the two readings agree
    assert vs.ring_marginal_ratio(cp2.run, cp2) == pytest.approx(
        vs.ring_step_ratio(cp2.run, cp2), rel=1e-12)
    gap = vs._torch_cp_gap(cp4.run, cp4)
    assert f"those added to its CP 2 row {by_hand:.2f}x" in gap
    assert "those added to its CP" not in vs._torch_cp_gap(cp2.run, cp2)
    # the reading the note rests on: the 8B's CP 2 to 4 steps cost more over the estimate
    # than its CP 1 to 2 step, at the same sub-SDPA shapes a rank
    assert vs.ring_marginal_ratio(cp4.run, cp4) > vs.ring_marginal_ratio(cp2.run, cp2)



def test_fsdp_machinery_gap_names_the_fsdp_rows_and_not_megatron(rows):
    """The FSDP machinery note (issue 31, fsdpbias: a negative result) reads on llm-foundry's
    Composer FSDP rows and torchtitan's FSDP rows whose estimated step is compute-dominated,
    and on no Megatron row (the rows the differential compares them with); the two steps its
    docstring sizes by hand are still the estimate's (5.12 s at FlashAttention v1's rate and
    2.05 s; 3,124 and 2,562 kernels), so the note's shares stand."""
    by_id = {r.run["id"]: r for r in rows}
    noted = {r.run["id"] for r in rows if r.predicted and vs._fsdp_machinery_gap(r.run, r)}
    foundry_single = {i for i, r in by_id.items() if i.startswith("llmfoundry-")
                      and r.run["hardware"]["count"] == 8 and r.predicted}
    assert foundry_single <= noted and len(foundry_single) == 10
    assert not {i for i in noted if by_id[i].run["engine"] == "megatron"}
    assert not {i for i in noted if by_id[i].run.get("source_group") == "ibm-fsdp-blog"}
    for rid, step, kernels in (("llmfoundry-mpt1b-a100_80gb-x8-s2048", 5.12, 3124),
                               ("torchtitan-t1-llama31-8b-fsdp8-compile", 2.05, 2562)):
        r = by_id[rid]
        gap = vs._fsdp_machinery_gap(r.run, r)
        assert "ruled out" in gap and gap in vs.misses(r)
        keep = []
        vs.predict(r.run, keep)
        assert keep[0].step_time_s == pytest.approx(step, abs=0.005)
        assert keep[0].step.kernels == kernels and r.comm_share < 0.05


def test_hopper_compute_gap_reads_on_the_compute_dominated_h100_rows(rows):
    """The H100 note (issue 31, h100bias: a negative result) reads on the H100 training rows
    whose estimated step is compute-dominated -- Megatron-Core's TP 1 1.7B, torchtitan's 8B
    FSDP -- and on no A100 row nor any TP 4-8 Megatron-Core row; the differential it reports
    holds on runs.json (TP 1 H100 rows read well above the TP 8 ones), and the GEMMs of the
    torchtitan 8B step lie where XLA's measured sm_90 table agrees with the model (K and N of
    4,096 and more; tests/unit/test_xla_sm90_matmul.py)."""
    by_id = {r.run["id"]: r for r in rows}
    for rid in ("megatron-core-gpt1.7b-h100-x48", "torchtitan-t1-llama31-8b-fsdp8-compile"):
        r = by_id[rid]
        gap = vs._hopper_compute_gap(r.run, r)
        assert "not identified" in gap and gap in vs.misses(r)
    noted = {i for i, r in by_id.items() if r.predicted and vs._hopper_compute_gap(r.run, r)}
    assert all(by_id[i].run["hardware"]["gpu"].startswith(("H100", "H200")) for i in noted)
    assert not {i for i in noted if by_id[i].run["engine"] == "megatron"
                and (by_id[i].run["job"].get("tp") or 1) >= 4}
    h100 = [r for r in rows if r.predicted and r.run["kind"].startswith("train")
            and r.run["hardware"]["gpu"].startswith("H100")]
    tp1 = [r.ratio for r in h100 if (r.run["job"].get("tp") or 1) == 1]
    tp8 = [r.ratio for r in h100 if (r.run["job"].get("tp") or 1) == 8]
    assert len(tp1) >= 10 and len(tp8) >= 10
    assert statistics.median(tp1) - statistics.median(tp8) > 0.1
    keep = []
    vs.predict(by_id["torchtitan-t1-llama31-8b-fsdp8-compile"].run, keep)
    gemms = [t for t in keep[0].step.ops if t.op.kind == "matmul" and t.op.weight_elements]
    wide = sum(t.total_s for t in gemms if min(t.op.shape[2], t.op.shape[3]) >= 4096)
    assert wide / sum(t.total_s for t in gemms) > 0.97
