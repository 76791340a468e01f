"""benchmarks/validate_fp8.md is what benchmarks/validate_fp8.py writes today, and gpuplan's FP8
training speed meets issue 30's bars against the published runs (benchmarks/published/
fp8_runs.json) -- or the bar is a strict xfail carrying the figure measured now."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

from gpuplan.hardware import get_gpu
from gpuplan.memory import train_memory
from gpuplan.models import load_model

ROOT = Path(__file__).resolve().parents[2]


def _module():
    path = ROOT / "benchmarks" / "validate_fp8.py"
    spec = importlib.util.spec_from_file_location("validate_fp8", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["validate_fp8"] = mod
    spec.loader.exec_module(mod)
    return mod


V = _module()
ROWS = V.rows()
S = V.summary(ROWS)


def _later(r) -> bool:
    """A row of Megatron-Bridge's 26.02.01-26.08 tables (recorded 2026-12-07, branch fp8new)."""
    return r.run["source"].get("table", "").split(" NeMo ")[0] in V.LATER_RELEASES


#: The rows recorded before the later tables: the tests that pin one mechanism's rows by name
#: or count read these; the bars read every row.
OLD_ROWS = [r for r in ROWS if not _later(r)]


def test_md_is_current():
    assert V.OUT_MD.read_text() == V.render(ROWS), f"rerun: {V.COMMAND}"


def test_every_run_predicted_or_explained():
    # 42 before the 25.09 tables (Megatron-Bridge v0.2.0 docs), the 25.11 GB300 DeepSeek-V3 pair
    # and the rest of the NeMo 24.07 tables were recorded: 13 dense + 14 MoE 25.09 rows, 2 GB300
    # rows, 7 NeMo 24.07 pre-training rows of models the catalog lacks, 6 fine-tuning rows
    # + 200 rows of Megatron-Bridge's 26.02.01, 26.04, 26.04.01, 26.06, 26.06.01 and 26.08
    # tables (docs at 4ab94dfa, recorded 2026-12-07); 84 before them
    assert len(ROWS) == 284 and len(OLD_ROWS) == 84
    for r in ROWS:
        assert (r.predicted is None) == bool(r.why_not), r.run["id"]
    # the DeepSeek-V3 figure is the report's 14.8T tokens over 2.664M H800 GPU-hours
    ds = next(r for r in ROWS if r.run["id"] == "deepseek-v3-h800-x2048-pretrain")
    assert ds.measured == pytest.approx(14.8e12 / (2.664e6 * 3600), rel=1e-3)


def test_the_deepseek_v3_report_run_is_a_dualpipe_mtp_job():
    """The report's own run is predicted now (DualPipe, MTP depth 1: issue 30), under the
    report's layout, and DualPipe's schedule is what moves it: the same job under 1F1B leaves
    the all-to-all exposed and predicts less."""
    ds = next(r for r in ROWS if r.run["id"] == "deepseek-v3-h800-x2048-pretrain")
    assert ds.predicted is not None, ds.why_not
    job = V.deepseek_job(ds.run, [])
    assert (job.pp_schedule, job.mtp_layers, job.pp, job.ep, job.tp, job.zero) == \
        ("dualpipe", 1, 16, 64, 1, 1)
    assert job.dp * job.batch * job.grad_accum == 15360
    # the report's memory settings (secs. 3.2.3, 3.3.3), each from its sentence
    assert (job.checkpointing, job.recompute_modules, job.activation_storage,
            job.optimizer_states, job.grad_dtype) == (
        "selective", ("layernorm", "mla_up_proj", "moe_act"), "deepseek-v3", "bf16", "fp32")
    from gpuplan.compute import estimate_speed
    from gpuplan.hardware import get_gpu
    from gpuplan.hardware.topology import topology_for
    from gpuplan.models import load_model
    gpu = get_gpu(ds.run["hardware"]["gpu"])
    model, topo = load_model("deepseek-v3"), topology_for(gpu, gpus_per_node=8)

    def per_gpu(j):
        return estimate_speed(model, gpu, j, measured=None, topology=topo,
                              tp_overlap=True).tokens_per_s / job.gpus
    assert per_gpu(job) == pytest.approx(ds.predicted, rel=1e-9)
    assert per_gpu(job._evolve(pp_schedule="1f1b")) < 0.8 * ds.predicted


# measured now (issue 30's uneven pipelines and expert-TP folding, and the per-SKU best-shape
# matmul fractions of the MAMF table -- efficiency.MEASURED_MATMUL -- Blackwell's scaled to
# training shapes by TE's GEMM profiling guide, efficiency.TRAINING_SHAPE_GEMM (FP8 0.880, BF16
# 0.938); the DeepSeek-V3 report's own run under DualPipe + MTP, 0.85x; MXFP8's GEMMs at 0.951
# of per-tensor FP8's, NVFP4 at the BF16 share x 0.946 with its global amax pass --
# efficiency.BLOCK_SCALED_GEMM, fp8.global_scale; each TP row's tp_comm_overlap from the
# performance configs (off for NVFP4), FP8-CS rows with every block FP8 as the performance
# scripts run them, BF16 edge blocks timed on the stages that hold them; the MoE rows' recorded
# recipes: batch-level EP overlap, MTP, DeepSeek-V3's mla_up_proj recompute; the 26.02 H100
# Qwen3-30B-A3B row at the merged table's 5113 tok/s; Megatron's launches at eager PyTorch's
# host cost per kernel, profiles.EngineProfile.host_issue): 39 rows predicted, 3 listed: median
# 9.7% (the bar met), worst 159.4% (Qwen3-30B-A3B on 16 H100, 25.11: 2.59x optimistic -- the
# Qwen3-30B rows' per-micro-batch cost still runs far above gpuplan's: H100 2.57-2.59x, B200
# 1.99-2.08x, GB200 1.19-1.31x; DeepSeek-V3 B200 1.34-1.60x against GB200 1.00-1.13x; before
# host_issue worst 207.6%, B200 2.95-3.08x, H100 2.71-2.93x, GB200 1.26-1.38x, MoE median
# 32.0% -> 25.1%); dense Llama rows: Hopper median 7.9% / worst 13.7%, Blackwell median 5.1% /
# worst 10.5% (unmoved by host_issue: their GEMMs hide the host). Megatron's interleaved
# pipeline sends beside the next chunk's compute (EngineProfile.p2p_overlap, as Megatron-Bridge
# turns overlap_p2p_comm on at VP > 1): every VP row optimistic by up to 12 points more, median
# 9.7% -> 11.1%, worst 159.4% -> 197.7%; dense Hopper median 7.9% -> 7.7% (1.05 -> 1.08 median
# ratio), Blackwell 5.1% -> 7.1% (worst 10.5% -> 16.3%, B200 405B MXFP8 1.10 -> 1.16).
# Megatron's backward launched from Python (EngineProfile.python_backward, 32 us a backward
# kernel) and TE's split_quantize launches per local expert (step._split_quantize_op): median
# 11.1% unmoved, worst 197.7% -> 193.2% (still the 25.11 H100 Qwen3-30B row, 2.98 -> 2.93);
# Qwen3-30B B200 1.99/2.08 -> 1.35/1.41, H100 26.02 2.75 -> 2.41, GB200 1.19/1.31 -> 1.19/1.30;
# Qwen3-235B B200 1.45/2.04 -> 1.39/1.93; DeepSeek-V3 within 0.01; dense rows unmoved. The
# alltoall dispatcher's permute, sorts and all-to-all launches (flops.dispatch_op): median
# 11.1% -> 10.2%, worst 193.2% -> 172.3% (25.11 H100 Qwen3-30B 2.93 -> 2.72), MoE median
# 24.5% -> 18.5%; Qwen3-30B B200 1.35/1.41 -> 1.25/1.30, H100 26.02 2.41 -> 2.24, GB200
# 1.19/1.30 -> 1.11/1.22; 25.11 GB200 DeepSeek-V3 MXFP8 1.00 -> 0.95 (the wrong way). The
# narrow recipes' expert row padding (step._expert_padding_op): median 10.2% -> 9.4% (the bar
# met), worst 172.3% -> 155.9% (25.11 H100 Qwen3-30B 2.72 -> 2.56), MoE median 18.5% -> 15.4%;
# Qwen3-30B B200 1.21/1.26, H100 26.02 2.15, GB200 1.05/1.16; 25.11 GB200 DeepSeek-V3 MXFP8
# 0.95 -> 0.92 (the wrong way). Each row on its recipe's dispatcher (Job.moe_dispatcher: the
# flex backend where the recipe sets one): HybridEP's dispatch permutes and pads in its own
# exchange (no copies, no Fp8Padding), DeepEP permutes after it: median 9.4% -> 10.4%, worst
# 155.9% unmoved; the HybridEP rows back up -- GB200 Qwen3-30B 1.18/1.29, DeepSeek-V3
# 1.10/0.99 (BF16 1.17), Qwen3-235B 1.10/1.10, B200 DeepSeek-V3 26.02 1.33; H100 26.02
# Qwen3-30B (DeepEP) 2.15 -> 2.05; MoE median 15.4% -> 19.5% (10.2% median after merging main,
# whose DeepSeek-V3 recompute casts moved B200 26.02 to 1.31)
# The weight casts once per step under a TP/PP layout, not once per micro-batch (TE's
# is_first_microbatch): every FP8 layout row 2-7% more optimistic, median 11.1% -> 13.9%, worst
# 197.7% -> 203.3%, dense Hopper median 7.7% -> 13.7% (worst 17.8%), Blackwell 7.1% -> 9.3%
# (worst 21.6%: B200 405B MXFP8 1.22); then current scaling's and NVFP4's per-GEMM amax
# all-reduces over TP (4 a layer, 7.8-15 us each): the FP8-CS/NVFP4 TP rows 0.1-0.6% slower,
# Blackwell median 9.1%, the rest unmoved; then TE's activation quantize as it runs: Hopper's
# FP8 transposes (+1 B an element: the TP 1 Hopper rows 1-2% slower) and, under sequence
# parallelism, the gathered tensors quantized on the shard (the TP rows 1-2% faster): median
# 13.9% -> 14.5%, worst 203.3% -> 197.9%, dense Hopper 13.7% / 17.8% -> 13.1% / 16.6%,
# Blackwell 9.1% / 21.6% -> 9.7% / 23.0% (B200 405B MXFP8 1.22 -> 1.23). Both branches merged
# (the MoE launches above and these casts): median 14.5%, worst 156.0%, pair 13.0%
# The 25.11 GB200 DeepSeek-V3 rows' layouts (MXFP8 0.99 -> 1.12, the wrong way: 10.2% -> 10.9%),
# then HybridEP's measured GB200 exchange (GB200 DeepSeek-V3 1.07/1.06, BF16 1.14, Qwen3-235B
# 1.07/1.07; Qwen3-30B EP 8 1.20/1.31, the wrong way): 10.9% -> 10.2%. With the casts once a
# step merged too: median 14.2%, worst 156.0%, the pair 3.2% (1.240x against 1.280x). The MoE
# layer's launches and host waits counted from Megatron-Core / TE (moehost: current scaling's
# four launches a quantize, DDP's Python main_grad adds, the router GEMM 16-bit, linear_qkv and
# linear_fc1 one launch each, DeepEP's four forward waits and one backward wait): median 14.2%
# -> 14.3% (the wrong way: B200 Qwen3-30B 1.24/1.29 -> 1.26/1.31), worst 156.0% -> 155.5%
# (25.11 H100 Qwen3-30B 2.56), H100 26.02 Qwen3-30B (DeepEP) 2.10 -> 1.95, the pair 3.0%
# (b200moe) The recipes' TE CUDA graphs
# (Job.cuda_graph_scope: one host launch a graph for the captured kernels, compute/graphs.py):
# median 10.2% and worst 155.9% unmoved; only the host-bound B200 Qwen3-30B rows move, the
# wrong way, 1.26/1.21 -> 1.36/1.31 (MoE median 19.5% -> 22.0%); the GB200 rows' graphs over
# attn, moe_router, moe_preprocess leave them as they were (device-bound there). The 25.11
# FP8-MX scripts' overlap_param_gather False (gather_overlap_of: the weights' all-gather after
# the step, synchronous): 25.11 B200 Qwen3-235B 5662 -> 5660 tok/s, GB200 DeepSeek-V3 3991 ->
# 3990, B200 Llama 3.1 405B unmoved (its gradient traffic already outlasts the backward).
# DeepSeek-V3's shared expert beside the alltoall dispatcher's all-to-alls (the Bridge
# provider's moe_shared_expert_overlap, Job.moe_shared_expert_overlap): 25.11 B200 DeepSeek-V3
# 1.50 -> 1.53 (the wrong way), nothing else moves (the other DeepSeek-V3 rows run HybridEP)
# Then TE's
# userbuffers overlap priced (compute.parallel.ub_overlap_price_s: ring-exchange GEMMs in TP
# chunks, the ring reduce-scatter's reduce kernel and last send; TE's pipeline method for the
# delayed-scaling rows) and TE's P2P CP merges (te_cp_merge_bytes): median 14.3% -> 11.2%, worst
# 155.5% unmoved, the pair 3.0% unmoved, MoE rows unmoved (23.0%); dense Hopper 13.0% / 16.5%
# -> 7.9% / 16.5% (median ratio 1.13 -> 1.08), Blackwell 9.8% / 23.1% -> 9.8% / 18.7%
# The grouped expert GEMMs' K-loop share on Hopper / Blackwell (efficiency.grouped_gemm_k_share,
# a tile's fixed cost from DeepGEMM's H800 table) and their backward's dgrad / wgrad at their own
# shapes (grouped_gemm_s): median 11.2% unmoved, worst 155.5% -> 151.2% (25.11 H100 Qwen3-30B
# 2.55 -> 2.51), MoE median 25.0% -> 24.0% (median ratio 1.25 -> 1.24); H100 26.02 Qwen3-30B
# 1.95 unmoved (host-bound: its device time +3.6% under the host's), GB200 Qwen3-30B
# 1.20/1.32 -> 1.19/1.30, B200 DeepSeek-V3 1.35/1.57 -> 1.32/1.54, GB200 Qwen3-235B BF16 1.07
# -> 1.05, DeepSeek-V3 BF16 1.14 -> 1.12; the pair 3.1% -> 3.9% (the wrong way: 1.241x ->
# 1.230x against 1.280x, the BF16 twin's GEMMs keep half the FP8 fixed blocks); dense unmoved
# TE's grouped GEMM four experts at a time (flops.TE_GEMM_STREAMS: one cuBLAS launch per expert
# over 4 streams, each set of four waving alone): median 11.2% unmoved, worst 151.2% -> 151.1%,
# MoE median 24.0% -> 23.4% (median ratio 1.24 -> 1.23; the 16- and 32-expert ranks only:
# GB200 Qwen3-30B 1.19/1.30 -> 1.18/1.29, B200 DeepSeek-V3 25.11 1.54 -> 1.53, the others within
# 0.5%); the pair 3.9% -> 4.1% (1.230x -> 1.228x, the wrong way); dense unmoved
# the EP overlap's hidden all-to-all charged its kernels' SMs (parallel.ep_overlap_sm_share):
# median 11.2% unmoved, worst 151.1% -> 142.3%, MoE median 23.4% unmoved (the five overlap rows:
# H100 Qwen3-30B 2.51 -> 2.42 and 1.95 -> 1.90, B200 Qwen3-235B 1.78 -> 1.73; H100 Qwen3-235B
# 1.00 / 0.99 -> 0.89 / 0.89, the wrong way); the pair and dense unmoved
# the EP overlap's merged 1F1B iterations wait one pipeline hop each under the interleaved
# schedule (parallel.interleaved_p2p_exposed_s): median 11.2% unmoved, worst 142.3% -> 132.0%,
# MoE median 23.4% unmoved (H100 Qwen3-30B 2.42 -> 2.32 and 1.90 -> 1.86, B200 Qwen3-235B
# 25.11 1.73 -> 1.71; H100 Qwen3-235B 1,461 -> 1,454 and 1,405 -> 1,399 tok/s, 0.89 both, the
# wrong way); the pair and dense unmoved
# GB200's fused attention at B200's x their measured tensor-core ratio (efficiency.
# attention_clock_share: 1.044, the MAMF table's BF16 1,822.0 / 1,745.0 TFLOP/s, not the
# datasheet peaks' 1.111): every GB200 row 1-2% slower, B200 and Hopper unmoved; median 11.1% ->
# 10.7%, worst 132.0% unmoved, dense Blackwell median 9.7% -> 7.6% (median ratio 1.10 -> 1.08;
# worst 41.8% -> 40.5%, the 25.09 GB200 405B MXFP8 1.42 -> 1.41), MoE median 17.3% -> 16.4%
# + the 26.02.01-26.08 tables' 200 rows (recorded 2026-12-07 before any prediction was read,
# branch fp8new; 97 predicted, 103 listed): their own median 9.4%, worst 125.1% (26.04 B200
# GPT-OSS 120B BF16, 2.25x; the report's subset line); over all rows 11.1% -> 10.3%, worst
# 132.0% unmoved; no model constant changed, the 76 older rows' predictions bit-identical;
# both together (merge 2026-12-08): 10.0009% over 173 (the newer 97 at 9.0%), MoE 15.8%
# + Megatron-Core's eager expert epilogue (flops.MCORE_EXPERT_EPILOGUE: the clamped GLU's clamps
# and cat, the fc2 bias added expert by expert in TEGroupedMLP._apply_bias): only the 16
# GPT-OSS 120B rows move (no other catalog MoE has a clamp or expert biases), 1.60-2.25x ->
# 1.37-1.85x (26.04 B200 BF16 2.25 -> 1.85, H100 1.60-1.64 -> 1.37-1.42, GB300 1.62-1.64 ->
# 1.45-1.47); then its unfused YaRN rotary (flops.MCORE_UNFUSED_ROPE: Megatron-Bridge drops
# apply_rope_fusion for position_embedding_type 'yarn'): 1.37-1.85x -> 1.30-1.82x (H100
# 1.30-1.34, GB300 1.42-1.43, B200 1.78-1.82); median 10.0009% unmoved (every GPT-OSS row was
# and stays above it), worst 132.0% unmoved, the 26.02.01-26.08 subset's worst 125.1% -> 95.0%
# (now the 26.02.01 B300 Qwen3-235B MXFP8 row)
# HybridEP's measured H100 internode exchange (parallel.HYBRIDEP_INTERNODE_H100, branch
# hybridep; NCCL's all-to-all before it): the 26.04 / 26.04.01 / 26.06 H100 Qwen3-30B-A3B EP 16
# rows 0.52 / 0.52 / 0.53 -> 1.21 / 1.20 / 1.22, nothing else moves; median 10.0009% and worst
# 132.0% unmoved, MoE median 15.8% unmoved (median ratio 1.13 -> 1.16), the newer 97 9.0%
@pytest.mark.xfail(strict=True, reason="median |error| 10.0009% > 10% over 173 predicted "
                   "runs (10.7% over the 76 older rows after GB200's attention clock; the "
                   "26.02.01-26.08 tables' 97 read 9.0%): the MoE rows (15.8% median) hold it "
                   "above the bar")
def test_median_within_10_percent():
    assert S["median"] <= V.MEDIAN_BAR, S


@pytest.mark.xfail(strict=True, reason="worst |error| 132.0% > 20% (Qwen3-30B-A3B, 16 H100, 25.11)")
def test_worst_within_20_percent():
    assert S["worst"] <= V.WORST_BAR, S


def test_the_recipes_tp_comm_overlap_is_the_rows():
    """Megatron-Bridge's performance configs turn tp_comm_overlap off for NVFP4 (every GPU) and
    keep the Llama recipes' on otherwise (fp8_runs.json ``recipe``, file and commit there): the
    dense TP rows carry it, and an NVFP4 row's TP collectives are exposed -- it predicts less
    than the same Job with them hidden."""
    tp_rows = [r for r in ROWS if r.run["source_group"] == "megatron-bridge"
               and (r.run["model"]["catalog"] or "").startswith("llama")
               and r.run["job"]["tp"] > 1 and r.predicted is not None]
    # 12 + the 25.09 rows' six (their scripts at ea299063), + 35 of the 26.02.01-26.08 tables
    # (their presets at v0.3.1-v0.5.1: recipe.commit)
    assert len(tp_rows) == 53 and sum(map(_later, tp_rows)) == 35
    for r in tp_rows:
        assert V.tp_overlap_of(r.run) == (r.run["job"]["precision"] != "nvfp4"), r.run["id"]
        src = r.run["recipe"].get("source")
        assert (src["commit"] in src["url"]) if src else len(r.run["recipe"]["commit"]) == 40
    nv = next(r for r in tp_rows if r.run["id"].endswith("llama3.1405b-nvfp4-x256"))
    hidden = V.predict({**nv.run, "recipe": {**nv.run["recipe"], "tp_comm_overlap": True}})
    assert nv.predicted < 0.9 * hidden.predicted


def test_the_dense_llama_subsets_meet_the_bars():
    """Issue 30's bars over the dense Llama rows apart (the MoE rows miss them), Blackwell's worst
    apart (:func:`test_the_dense_blackwell_worst_within_20_percent`). With the 25.09 rows and the
    NeMo 24.07 SFT rows: Hopper 14 rows, median 6.8% / worst 17.0%; Blackwell 20 rows, median
    9.7% (7.6% since GB200's attention runs at its measured clock); with the three NeMo 24.07
    LoRA rows Hopper 17 rows, median 5.3% -> 5.7%, worst 14.2% unmoved. Before them:
    Hopper median 7.9% / worst 16.5%, Blackwell 9.8% / 18.7%, since Transformer Engine's
    userbuffers ring exchanges are priced (compute.parallel.ub_split_s: the TP GEMMs in TP chunks
    of tokens / TP rows, the reduce-scatters' reduce kernel and last send) and its P2P CP merges
    (te_cp_merge_bytes); before them Hopper 13.0% / 16.5%, Blackwell 9.8% / 23.1% (B200 405B
    MXFP8 1.23 -> 1.19; 13.1% / 16.6%, 9.7% / 23.0% before moehost's launches); before the weight
    casts were charged once per step Hopper 7.7% / 13.7%, Blackwell 7.1% / 16.3% (the
    per-micro-batch casts were hiding the missing ring-exchange cost)."""
    for label, test in V.SUBSETS[:2]:
        errs = [r.error for r in ROWS if r.error is not None and test(r)]
        # 17 / 20 before the 26.02.01-26.08 tables' 5 Hopper and 34 Blackwell rows
        assert len(errs) in (22, 54), label
        assert statistics.median(errs) <= V.MEDIAN_BAR, (label, sorted(errs))
        if "Hopper" in label:
            assert max(errs) <= V.WORST_BAR, (label, sorted(errs))


@pytest.mark.xfail(strict=True, reason="worst |error| 40.5% > 20%: the 25.09 GB200 Llama 3.1 405B "
                   "MXFP8 row (1.41; 578 tok/s/GPU measured against 622 for the same layout on "
                   "B200 in the same release), out of sample; its Job is its 25.09 config's, the "
                   "cause not found (BLACKWELL_405B_CHECKED); 16.3% before the 25.09 rows")
def test_the_dense_blackwell_worst_within_20_percent():
    errs = [r.error for r in ROWS if r.error is not None and V.SUBSETS[1][1](r)]
    assert max(errs) <= V.WORST_BAR, sorted(errs)


def test_the_uneven_and_folded_rows_are_predicted():
    """Issue 30: the Megatron-Bridge DeepSeek-V3 rows (uneven pipeline) and the Qwen3-235B H100
    rows (EP 32 over TP x DP with expert TP 1) are Jobs now, the 25.09 B200 DeepSeek-V3 and
    GB200 Qwen3-235B rows too since their whole-layer CUDA graphs are (cuda_graph_scope full),
    but for the 25.09 GB200 DeepSeek-V3 pair, listed for a layout no record holds; both
    FP8/BF16 pairs (25.11 GB200 and GB300) are predicted."""
    listed = []
    for r in OLD_ROWS:  # the later tables' DeepSeek-V3 rows: test_the_later_tables_listed_rows
        j = r.run["job"]
        if r.run["source_group"] == "megatron-bridge" and (
                r.run["model"]["catalog"] == "deepseek-v3" or j["ep"] and j["tp"] > 1
                and j["ep"] > r.run["hardware"]["count"] // (j["tp"] * j["pp"])):
            if r.predicted is None:
                listed.append(r.run["id"])
                assert "layout it ran" in r.why_not, r.run["id"]
    assert sorted(listed) == sorted(
        [f"megatron-bridge-25.09-dgx-gb200-deepseekv3-{p}-x256" for p in ("fp8-current",
                                                                           "mxfp8")])
    assert S["speedup_checked"] == S["speedup_pairs"] == 2


def test_fp8_over_bf16_speedup_within_10_percent():
    """The published pairs: DeepSeek-V3 on GB300, 25.11 (recorded out of sample: 1.195x predicted
    against 1.132x, 5.6%); DeepSeek-V3 on GB200, 25.11: 1.227x against 1.280x (4.2%); before: 1.241x
    predicted against 1.280x (3.0%, with the MoE layer's launches counted from the code (the router
    GEMM 16-bit, DDP's main_grad adds); 1.240x, 3.2%, with the weight casts charged once a step;
    1.210x, 5.5%, before them: each row's pipeline split from the layout string it ran, the MXFP8
    row's PP 8 VP 4 'Et|(tt|)*30L' of Megatron-LM's GB200 guide -- stages 7/8/6, not the 9/6 guessed
    before -- and both on HybridEP's measured GB200 exchange; 1.222x, 4.5%, on NCCL's all-to-all
    model; 1.086x, 15.2%, before the layouts, both on HybridEP, which pads in its dispatch; 1.040x,
    18.7%, with the alltoall dispatcher's expert row padding, four full copies of the experts' rows
    a layer that the BF16 twin does not make; 1.078x, 15.8%, before it; the dispatcher's copies cost
    the MXFP8 run, PP 8 with EP 32, a larger share than its BF16 twin's; 1.087x, 15.1%, before them;
    1.089x, 14.9%, before the MXFP8 run's per-expert split-quantize launches, which its BF16 twin
    has none of; 1.127x, 12.0%, before Megatron's interleaved p2p overlap; 1.124x, 12.2%, before
    both ran their recipe's mla_up_proj recompute; 1.139x, 11.0%, before Blackwell's GEMMs took
    their training-shape shares; 1.157x, 9.6%, before MXFP8's GEMMs took their measured share of
    per-tensor FP8's; 1.141x, 10.9%, before GB200's FP8 and BF16 matmuls took their own measured
    shares)."""
    checked = [(m, p) for _, _, m, p in V.speedups(ROWS) if p is not None]
    assert checked and all(abs(p / m - 1) <= V.SPEEDUP_BAR for m, p in checked), checked


def _row(run_id: str):
    return next(r for r in ROWS if r.run["id"] == run_id)


def test_every_moe_bridge_row_records_its_recipe():
    """Each Megatron-Bridge MoE row carries the performance recipe it ran (the config's name, the
    repository's tag and commit, and what it sets), and its Job takes what gpuplan expresses:
    moe_a2a_overlap as ep_overlap, mtp_num_layers as mtp_layers, and the rest named in the
    notes."""
    moe = [r for r in ROWS if r.run["source_group"] == "megatron-bridge"
           and r.run["model"]["catalog"] and not r.run["model"]["catalog"].startswith("llama")]
    # 17 + the 25.09 tables' 14 + the 25.11 GB300 pair, + 88 of the 26.02.01-26.08 tables
    # (DeepSeek-V3, GPT-OSS 120B, Kimi-K2, Qwen3; the Nemotron 3 / DeepSeek-V4 rows have no entry)
    assert len(moe) == 121 and sum(map(_later, moe)) == 88
    for r in moe:
        rec = r.run["recipe"]
        # a preset's name, or (26.08, v0.6.0) the flat perf recipe's function
        named = rec["config"].isupper() or rec["config"].endswith("_config")
        assert len(rec["commit"]) == 40 and named, r.run["id"]
        if r.predicted is None:
            continue  # listed for its recipe (_not_expressible): no Job to read
        job = V.job_of(r.run)
        assert job.moe_capacity_factor == rec.get("moe_expert_capacity_factor"), r.run["id"]
        if rec.get("expert_tensor_parallel_size") is not None:
            assert job.etp == rec["expert_tensor_parallel_size"], r.run["id"]
        assert job.ep_overlap == bool(rec["moe_a2a_overlap"]), r.run["id"]
        assert (job.mtp_layers or 0) == (rec.get("mtp_num_layers") or 0), r.run["id"]
        assert job.recompute_modules == (tuple(rec["recompute_modules"])
                                         if rec.get("recompute_modules") else None), r.run["id"]
        shared = (r.run["model"]["catalog"] == "deepseek-v3" and not rec["moe_a2a_overlap"]
                  and rec["moe_token_dispatcher_type"] == "alltoall")
        assert job.moe_shared_expert_overlap == shared, r.run["id"]
        graphed = rec.get("cuda_graph_impl") == "transformer_engine" and rec["cuda_graph_scope"]
        # the 25.09 perf matrix's cuda_graphs true: Megatron-Core's whole-layer graphs
        whole = ("full",) if rec.get("cuda_graphs") else None
        assert job.cuda_graph_scope == (tuple(rec["cuda_graph_scope"]) if graphed
                                        else whole), r.run["id"]
        if rec.get("moe_flex_dispatcher_backend"):
            assert any(rec["moe_flex_dispatcher_backend"] in n for n in r.notes), r.run["id"]
        flex = rec["moe_token_dispatcher_type"] == "flex"
        assert job.moe_dispatcher == (rec["moe_flex_dispatcher_backend"] if flex
                                      else "alltoall"), r.run["id"]


def test_the_25_11_mxfp8_scripts_that_turned_param_gather_overlap_off():
    """Megatron-Bridge's 25.11 performance scripts turned overlap_param_gather off for FP8-MX
    in the config functions of Qwen3-235B B200, DeepSeek-V3 GB200 and Llama 3.1 405B B200
    ("keeping this eanbled causes NaN grad norm"; removed for 26.02 by 021fb3d5): exactly those
    rows run their weights' all-gather synchronously, no 26.02 row does; the GB300 DeepSeek-V3
    config of the 25.11 test branch (d19cb73c) turns it off the same way."""
    off = sorted(r.run["id"] for r in ROWS if not V.gather_overlap_of(r.run))
    assert off == ["megatron-bridge-25.11-dgx-b200-llama3.1405b-mxfp8-x128",
                   "megatron-bridge-25.11-dgx-b200-qwen3235ba22b-mxfp8-x64",
                   "megatron-bridge-25.11-dgx-gb200-deepseekv3-mxfp8-x256",
                   "megatron-bridge-25.11-dgx-gb300-deepseekv3-mxfp8-x256",
                   # the 26.04.01 / 26.06 GB200 405B NVFP4 V2 configs (v0.4.2, v0.5.0:
                   # disable_param_gather_overlap, Megatron-Bridge issue 3714)
                   "megatron-bridge-26.04.01-dgx-gb200-llama3.1405b-nvfp4-x256",
                   "megatron-bridge-26.06-dgx-gb200-llama3.1405b-nvfp4-x256"]
    for r in ROWS:
        if r.run["id"] in off:
            assert any("overlap_param_gather False" in n for n in r.notes), r.run["id"]


def test_the_merged_table_figure_is_the_one_recorded():
    """The 26.02 H100 Qwen3-30B-A3B row: the merged table (c0b9a000) prints 5113 tok/s at 118
    model TFLOP/s; 118e12 / 5113 is the 23.1 GFLOP a token the 25.11 row's 121e12 / 5275 (22.9)
    gives, where the branch commit's 2557 would be twice that."""
    r = _row("megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16")
    old = _row("megatron-bridge-25.11-dgx-h100-qwen330ba3b-fp8-current-x16")
    per_token = [x.run["measured"]["model_tflops_per_gpu"] / x.measured for x in (r, old)]
    assert r.measured == 5113
    assert per_token[0] == pytest.approx(per_token[1], rel=0.01)


def test_the_ep_overlap_hides_the_folded_h100_all_to_alls():
    """The Qwen3-235B H100 recipes set moe_a2a_overlap (and tp_comm_overlap False): with the
    batch-level overlap their EP 32 all-to-alls (over 4 nodes) hide under the paired
    micro-batch's compute, 0.67-0.68x without it. With the hidden part charged the SMs NCCL's
    kernels hold (ep_overlap_sm_share) they read 0.89-0.90, hence the band's 0.85."""
    for rid in ("megatron-bridge-26.02-dgx-h100-qwen3235ba22b-fp8-current-x256",
                "megatron-bridge-25.11-dgx-h100-qwen3235ba22b-fp8-current-x256"):
        r = _row(rid)
        assert V.job_of(r.run).ep_overlap and not V.tp_overlap_of(r.run)
        assert 0.85 < r.predicted / r.measured < 1.1, (rid, r.predicted / r.measured)
        run = dict(r.run, recipe=dict(r.run["recipe"], moe_a2a_overlap=False))
        assert V.predict(run).predicted / r.measured < 0.75


def test_the_h100_deepseek_v3_row_runs_its_recipes_expert_tp_over_deepep():
    """The 25.09 H100 DeepSeek-V3 recipe sets expert TP 1 (Megatron-Bridge@ea299063
    deepseek_v3_llm_pretrain.yaml perf_matrix h100 etp: 1; the row's recipe.etp_source) at TP 2,
    EP 64 = DP 64, where EP is not wider than DP x CP: the Job folds the MoE layers from the
    recipe, each rank dispatching its 2048-token sequence-parallel share over 64 adjacent ranks
    (8 nodes) where expert TP 2 sent the TP group's 4096 tokens over ranks strided by 2 (16
    nodes): 0.49 before the recipe's ETP was read. Over those 8 whole nodes its DeepEP
    dispatcher sends a token once to each of the at most 4 nodes its node-limited routing
    reaches, at DeepEP's measured EP 64 rates (parallel.DEEPEP_INTERNODE_H800), where NCCL's
    all-to-all sent each of its 8 expert copies: 0.88 with NCCL's, 1.08 with DeepEP's."""
    r = _row("megatron-bridge-25.09-dgx-h100-deepseekv3-fp8-current-x1024")
    job = V.job_of(r.run)
    assert job.etp == r.run["recipe"]["expert_tensor_parallel_size"] == 1 and job.tp == 2
    assert job.gpus // (job.tp * job.pp) == job.ep == 64  # not folded by the width rule
    assert job.moe_dispatcher == "deepep"
    assert 1.0 < r.predicted / r.measured < 1.15, r.predicted / r.measured
    rec = {k: v for k, v in r.run["recipe"].items() if k != "expert_tensor_parallel_size"}
    assert V.job_of(dict(r.run, recipe=rec)).etp is None
    # expert TP 2 strides EP by 2: not DeepEP's whole-node placement, NCCL's all-to-all timed
    assert V.predict(dict(r.run, recipe=rec)).predicted / r.measured < 0.55
    nccl = dict(r.run["recipe"], moe_token_dispatcher_type="alltoall",
                moe_flex_dispatcher_backend=None)
    assert 0.8 < V.predict(dict(r.run, recipe=nccl)).predicted / r.measured < 0.95


def test_layout_split_reads_megatron_layout_strings():
    """Stages' transformer layers under a Megatron-Core layout string (parts to stages in turn):
    the 25.11 GB200 BF16 row's 'Et*3|(t*4|)*14ttL' over PP 4 is stage 0 = 3+4+4+4 = 15, stage
    3 = 4+4+4+2 = 14; the MXFP8 row's 'Et|(tt|)*30L' over PP 8 is 1+2+2+2 = 7 and 2+2+2+0 = 6;
    Megatron-Bridge's (4, 4) layout_map written as a string gives its 16/13."""
    assert V._expand_layout("Et*3|(t*4|)*2L") == "Ettt|tttt|tttt|L"
    assert V.layout_split("Et*3|(t*4|)*14ttL", 4) == (15, 14)
    assert V.layout_split("Et|(tt|)*30L", 8) == (7, 6)
    assert V.layout_split("Et|(tt|)*30mL", 8) == (7, 6)  # MTP and loss are not layers
    assert V.layout_split("Etttt|(tttt|)*14tL", 4) == V.DEEPSEEK_SPLIT[(4, 4)] == (16, 13)
    with pytest.raises(ValueError, match="not even"):
        V.layout_split("Et|ttt|tt|tL", 4)
    with pytest.raises(ValueError, match="parts over PP"):
        V.layout_split("Et|tt|tL", 2)
    for rid, split in (("megatron-bridge-25.11-dgx-gb200-deepseekv3-mixed-bf16-x256", (15, 14)),
                       ("megatron-bridge-25.11-dgx-gb200-deepseekv3-mxfp8-x256", (7, 6))):
        job = V.job_of(_row(rid).run)
        assert (job.pp_first_stage_layers, job.pp_last_stage_layers) == split, rid


def test_the_blackwell_405b_rows_keep_their_tp_overlap_and_its_bound():
    """Issue 30's negative result for the Llama 3.1 405B rows on Blackwell
    (BLACKWELL_405B_CHECKED): their FP8-CS / FP8-MX recipes keep the userbuffers TP overlap
    (NVFP4 alone turns it off), so the report's last column is a bound, not the prediction: with
    every TP collective exposed each overlapped row predicts less, by more than the 0.5% the bulk
    overlaps' SMs could cost ((0.16 ms x 10 + 0.30 ms x 40 SMs) / 148 SMs / 17 ms), and the NVFP4
    row, already exposed, does not move."""
    rows = V.blackwell_405b(ROWS)
    # with the 25.09 rows: B200 FP8-CS / MXFP8 and GB200 MXFP8 (its FP8-CS ran FSDP); + 12
    # GB200 and 12 GB300 rows of the 26.02.01-26.06 tables (9 before them)
    assert sorted(r.run["hardware"]["gpu"] for r in rows) == ["B200-SXM-180GB"] * 4 + [
        "GB200-NVL72"] * 17 + ["GB300-NVL72"] * 12
    for r in rows:
        on = r.run["job"]["precision"] != "nvfp4"
        assert V.tp_overlap_of(r.run) == on, r.run["id"]
        off = V.predict(r.run, tp_overlap=False)
        if on:
            assert off.predicted < r.predicted * (1 - 0.005), r.run["id"]
        else:
            assert off.predicted == pytest.approx(r.predicted, rel=1e-12), r.run["id"]
    text = V.render(ROWS)
    assert "## Llama 3.1 405B on Blackwell: what was checked" in text
    for what, _ in V.BLACKWELL_405B_CHECKED:
        assert f"- {what}: " in text


def test_mxfp8_pairs_are_one_table_and_model():
    # issue 30's MXFP8 / FP8-CS twins: the tables that publish both recipes for one model (25.11
    # GB200 and B200 Llama 3 8B, 25.11 B200 and 26.02 GB200 Llama 3.1 405B; 25.09 GB200 and B200
    # Llama 3 8B, B200 Llama 3.1 405B and Qwen3-235B-A22B -- 25.09 GB200 405B's FP8-CS ran FSDP;
    # with their whole-layer CUDA graphs, the 25.09 GB200 Qwen3-30B-A3B and Qwen3-235B-A22B and B200
    # DeepSeek-V3 pairs); the measured quotient is the two published figures' (25.11 GB200 8B:
    # 29,789 / 31,508 tok/s/GPU; 25.09 B200 Qwen3-235B: 4,275 / 4,104)
    pairs = {mx.run["id"]: (mx, cs) for mx, cs in V.mxfp8_pairs(ROWS)}
    # 11 before the 26.02.01-26.06 tables' 8 Llama 405B / 70B pairs (a table there is one
    # model's, so the pair is one table, model and GPU)
    assert len(pairs) == 19
    for mx, cs in pairs.values():
        assert mx.run["source"]["table"] == cs.run["source"]["table"]
        assert mx.run["model"]["catalog"] == cs.run["model"]["catalog"]
        assert mx.run["hardware"]["gpu"] == cs.run["hardware"]["gpu"]
        assert (mx.run["job"]["precision"], cs.run["job"]["precision"]) == ("mxfp8", "fp8-current")
    mx, cs = pairs["megatron-bridge-25.11-dgx-gb200-llama38b-mxfp8-x8"]
    assert mx.measured / cs.measured == pytest.approx(29_789 / 31_508)
    mx, cs = pairs["megatron-bridge-25.09-dgx-b200-qwen3235ba22b-mxfp8-x64"]
    assert mx.measured / cs.measured == pytest.approx(4_275 / 4_104)


def test_blackwell_per_tensor_fp8_runs_plan_without_transposes():
    """Issue 30's memory rule on the published runs: a per-tensor FP8 run on B200/GB200
    (compute capability 10.0: FP8 GEMMs of any layout) plans less than with Hopper's
    transposes, by 1 B an element of the narrow linears on its rank (the 8B at TP 1: all its
    block linears); every other run (Hopper, MX, NVFP4, BF16) plans the same either way, and
    none plans more."""
    by_id = {r.run["id"]: V.memory_of(r.run) for r in ROWS}
    for r in ROWS:
        got = by_id[r.run["id"]]
        if got is None:
            continue
        own, hopper, _ = got
        blackwell = not r.run["hardware"]["gpu"].startswith("H")
        if blackwell and r.run["job"]["precision"] == "fp8-current":
            assert own < hopper, r.run["id"]
        else:
            assert own == hopper, r.run["id"]
    # llama-3.1-8b on one B200, TP 1: every block linear on the rank, 32 x (4096 x 6144 +
    # 4096 x 4096 + 3 x 4096 x 14336) elements, 1 B each
    own, hopper, _ = by_id["megatron-bridge-25.11-dgx-b200-llama38b-fp8-current-x8"]
    assert hopper - own == 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)


def test_blackwell_405b_prose_ranges_are_the_tables():
    # the section's opening ranges, read back from the rendered main table's ratio cells (its
    # last column), by hand: the Blackwell 405B FP8-CS / MXFP8 rows, the H100 405B rows
    text = V.render(ROWS)
    cells = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) == 8 and parts[0].startswith("`megatron-bridge-") and parts[7][:1].isdigit():
            cells[parts[0].strip("`")] = (parts[1], parts[2], float(parts[7]))
    bw = [x for i, (gpu, rec, x) in cells.items() if "llama3.1405b" in i
          and not gpu.startswith("H") and rec in ("fp8-current", "mxfp8")]
    h100 = [x for i, (gpu, _, x) in cells.items() if "llama3.1405b" in i and gpu.startswith("H")]
    # with the 25.09 rows (5 and 2 before), then the 26.02.01-26.06 tables' 16 GB200 / GB300
    # and 2 H100 rows (8 and 3 before them)
    assert len(bw) == 24 and len(h100) == 5
    assert (f"FP8-CS and MXFP8 ratios ({min(bw):.2f}-{max(bw):.2f}) read more optimistic than "
            f"the H100 405B rows ({min(h100):.2f}-{max(h100):.2f})") in text
    assert f"rows run the same CP 2 and read {min(h100):.2f}-{max(h100):.2f}." in text


def _estimate(run: dict, **over):
    import dataclasses

    from gpuplan.compute import estimate_speed
    from gpuplan.hardware import get_gpu
    from gpuplan.hardware.topology import topology_for
    from gpuplan.models import load_model
    job = dataclasses.replace(V.job_of(run, []), **over)
    gpu = get_gpu(run["hardware"]["gpu"])
    topo = topology_for(gpu, gpus_per_node=job.gpus_per_node) if job.gpus > 8 else None
    return estimate_speed(load_model(run["model"]["catalog"]), gpu, job, measured=None,
                          topology=topo, link="nvlink" if topo is None else None,
                          tp_overlap=V.tp_overlap_of(run), gather_overlap=V.gather_overlap_of(run))


def test_the_dropless_overlap_checks_quote_todays_figures():
    """DROPLESS_OVERLAP_CHECKS' layer passes: the measured ones by hand from the tables (tokens a
    GPU a step over tok/s/GPU, over the stage's layers x micro-batches), gpuplan's from the
    estimate as it reads today (rerun and requote the prose where the model moves)."""
    text = " ".join(V.DROPLESS_OVERLAP_CHECKS)
    runs = {r.run["id"]: r.run for r in ROWS}
    h25 = runs["megatron-bridge-25.11-dgx-h100-qwen330ba3b-fp8-current-x16"]
    h26 = runs["megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16"]
    b25 = runs["megatron-bridge-25.11-dgx-b200-qwen330ba3b-mxfp8-x8"]
    # 512 x 4096 tokens over 16 GPUs at 10,494 (25.09), 5,275 (25.11); 1024 x 4096 at 5,113
    assert 512 * 4096 / 16 / 10494 / (24 * 32) * 1e3 == pytest.approx(16.3, abs=0.05)
    assert 512 * 4096 / 16 / h25["measured"]["tokens_per_s_per_gpu"] / (24 * 64) * 1e3 == \
        pytest.approx(16.2, abs=0.05)
    assert 1024 * 4096 / 16 / h26["measured"]["tokens_per_s_per_gpu"] / (24 * 128) * 1e3 == \
        pytest.approx(16.7, abs=0.05)
    assert 512 * 4096 / 8 / b25["measured"]["tokens_per_s_per_gpu"] / (48 * 64) * 1e3 == \
        pytest.approx(9.18, abs=0.005)
    assert 512 * 4096 / 8 / 18066 / (48 * 64) * 1e3 == pytest.approx(4.72, abs=0.005)
    for quoted in ("16.3 ms", "16.2 ms", "16.7 ms", "9.18 ms", "4.72 ms", "12,558", "6.80 ms",
                   "14.5 -> 8.3 ms"):
        assert quoted in text, quoted
    # gpuplan: the B200 token-drop Job and the H100 row under its table's and config's layouts
    drop = _estimate(b25, moe_capacity_factor=1.0, cuda_graph_scope=None)
    assert drop.tokens_per_s / 8 == pytest.approx(12558, abs=1)
    assert 512 * 4096 / drop.tokens_per_s / (48 * 64) * 1e3 == pytest.approx(6.80, abs=0.005)
    ctrl = _estimate(h25, moe_capacity_factor=1.0, ep_overlap=False)
    cfg = _estimate(h25, batch=1, grad_accum=64, pp_schedule="interleaved:12")
    assert 512 * 4096 / ctrl.tokens_per_s / (24 * 32) * 1e3 == pytest.approx(14.5, abs=0.05)
    assert 512 * 4096 / cfg.tokens_per_s / (24 * 64) * 1e3 == pytest.approx(8.3, abs=0.05)


def test_every_published_megatron_run_fits_where_it_ran():
    """Issue 30's must-hold: each run that ran under Megatron-Core (Megatron-Bridge's and
    NeMo's tables) plans within its GPU's memory, the megatron engine's layers kept as
    Megatron-Core and Transformer Engine keep them (tests/unit/test_megatron_activations_memory
    .py counts them by hand). The one run that still plans over is the DeepSeek-V3 report's own
    (not Megatron-Core; its micro-batch and split assumed: V.MEMORY_CHECKED says what is open):
    162.6 -> 90.7 GB on its 85.9 GB since its Job took the report's memory sentences
    (V.DEEPSEEK_V3_MEMORY) and DualPipe's ranks are planned as its schedule runs
    (tests/unit/test_deepseek_v3_memory.py holds each term to a hand count).
    The NeMo 24.07 Llama 2 70B SFT run fits under its launcher script's settings (the row's
    recipe: FP8 parameters, bf16 Adam states, VP 20; 100.3 -> 75.1 GB on 85.0 GB; with its bf16
    master, 66.4 GB).

    Open since the NeMo 24.07 GPT-3 / Nemotron rows were mapped (branch nemocat): GPT3-20B (TP 2,
    MBS 2, no recompute: 85.2 GB planned on 85.0) and Nemotron-4 340B (TP 8 PP 8 VP 12: 95.5 GB)
    planned over. GPT3-20B fits since its yaml's optimizer was read (branch remainder):
    distributed_fused_adam at its default fp32 dtype over a bf16 O2 model stores the master as
    16-bit remainders beside the bf16 weights (master_weights remainder, V.master_fields):
    84.6 GB. The launcher's nemotron_340b.yaml at 24.07 (8325688d) sets selective recompute and
    distributed_fused_adam with grad_sync_dtype and dtype bf16, but with PP 12 x VP 8 where the
    row ran PP 8 x VP 12: it is not the row's run config, so (unlike the SFT rows' scripts) its
    optimizer settings are not applied. 20b.yaml is the row's layout (TP 2, MBS 2) and sets
    neither (Apex distributed_fused_adam at its default dtypes), which is what makes NeMo keep
    remainders. The 340B yaml's dtype bf16 would mean no master at all (V.MEMORY_CHECKED).
    History (branch nemo340mem): the 340B yaml's optimizer and recompute are applied as the
    other NeMo pre-training rows' yamls are (their VP or MBS differ from the rows' too; the
    layout and batch stay the table's): dtype bf16 is no master (master_weights none) and bf16
    Adam states, activations_checkpoint_granularity selective checkpoints the core attention:
    95.5 -> 70.7 GB (test_the_nemotron_340b_row_plans_its_yaml has the terms)."""
    over = []
    for r in ROWS:  # the 26.02.01 GB300 70B rows whose printed layouts cannot fit are listed
        got = V.memory_of(r.run)
        if got is not None and got[0] > got[2]:
            over.append(r.run["id"])
    assert over == ["deepseek-v3-h800-x2048-pretrain"]


def test_the_nemotron_340b_row_plans_its_yaml():
    """The NeMo 24.07 Nemotron-4 340B row (128 H100, TP 8 PP 8 VP 12: DP 2) under its launcher
    yaml (nemotron_340b.yaml at 8325688d, lines 122 and 158-162): distributed_fused_adam dtype
    bf16 over the bf16 O2 model, so NeMo sets store_params False and Apex keeps no master and its
    exp_avg / exp_avg_sq in bf16 (2 x 2 B a weight over DP 2: 2 B, where fp32 made 4 and the
    fp32 master 2 more); selective recompute drops each layer's attention output (4096 tokens x
    96 heads x 192 / TP 8 x 2 B) and the fused kernel's fp32 softmax statistics (4096 x 12 heads
    x 4 B) for the worst stage's 12 layers (one a chunk under VP 12) and its 7 5/12 micro-batches
    in flight; the grads stay 16-bit (grad_sync_dtype bf16)."""
    rid = "nemo-24.07-dgx-h100-nemotron-340b-fp8-delayed-x128"
    run = next(r.run for r in ROWS if r.run["id"] == rid)
    job = V.job_of(run, [])
    assert (job.master_weights, job.optimizer_states, job.checkpointing, job.dp) == \
        ("none", "bf16", "selective", 2)
    gpu, model = get_gpu("H100-SXM-80GB"), load_model("nemotron-4-340b")
    plan = train_memory(model, job, gpu=gpu)
    before = train_memory(model, job.with_(master_weights="auto", optimizer_states="auto",
                                           checkpointing="none"), gpu=gpu)
    n = plan.trainable_params
    assert plan.master_weights_bytes == 0 and before.master_weights_bytes == n * 4 // 2
    assert plan.optimizer_bytes == n * 2 * 2 // 2 and before.optimizer_bytes == n * 2 * 4 // 2
    assert plan.gradients_bytes == before.gradients_bytes == n * 2
    per_layer = 4096 * 96 * 192 // 8 * 2 + 4096 * 12 * 4
    saved = before.activation_detail["saved_bytes"] - plan.activation_detail["saved_bytes"]
    assert saved == 12 * per_layer
    assert before.activations_bytes - plan.activations_bytes == \
        pytest.approx(12 * per_layer * (7 + 5 / 12), abs=1)
    assert plan.total_bytes <= gpu.memory_bytes < before.total_bytes


def test_the_nemo_70b_sft_run_plans_its_launcher_script():
    """The NeMo 24.07 Llama 2 70B SFT row (16 H100, TP4 x PP4: DP 1) as its launcher script
    runs it (the row's recipe: NeMo-Framework-Launcher 24.07 examples/peft/llama/h100/
    70b_2node.sh over conf/peft/llama/sft.yaml): FP8 parameters, Adam states and (fp8_params: NeMo's
    store_params, Apex's params_shard in its dtype) the master in bf16, VP 20. By hand, the first
    stage's rank holds 20 of the 80 layers over TP 4: each layer's linear weights (8192^2 x 2 for q
    and o, 2 x 8192 x 1024 for k and v under GQA 8, 3 x 8192 x 28672 for the MLP) / 4 plus two 8192
    norms, and the 32000 x 8192 embedding / 4."""
    sft = "nemo-24.07-dgx-h100-llama2-70b-sft-fp8-delayed-x16"
    r = next(r for r in ROWS if r.run["id"] == sft)
    job = V.job_of(r.run, [])
    assert (job.fp8_param_gather, job.optimizer_states, job.master_weights, job.pp_schedule,
            job.dp) == (True, "bf16", "bf16", "interleaved:20", 1)
    linear = 2 * 8192 ** 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    kept_16bit = 20 * 2 * 8192 + 32000 * 8192 // 4
    per_rank = 20 * linear // 4 + kept_16bit
    gpu = get_gpu("H100-SXM-80GB")
    plan = train_memory(load_model("llama-2-70b"), job, gpu=gpu)
    assert plan.trainable_params == per_rank == 4_344_053_760
    assert plan.optimizer_bytes == per_rank * 2 * 2  # exp_avg, exp_avg_sq in bf16
    assert plan.gradients_bytes == per_rank * 2
    assert plan.master_weights_bytes == per_rank * 2  # 8.7 GB (17.4 GB counted at fp32)
    lines = {line.label: line.bytes for line in plan.lines}
    assert lines["weights, 16-bit"] == kept_16bit * 2  # the FP8 weights keep no BF16 copy
    assert plan.total_bytes <= gpu.memory_bytes


def test_the_nemo_lora_rows_run_nemos_defaults():
    """The NeMo 24.07 LoRA rows (issue 30): each records NeMo's LoRA defaults with their source
    (rank 32, alpha 32, no dropout, one adapter on the fused linear_qkv: NVIDIA/NeMo@579983fb,
    the launcher's 24.07 scripts at 8325688d), is a LoRA Job on that target without the
    distributed optimizer, and fits its 8 H100 (the runs ran). Ratios when this was written:
    7B 0.87, 13B 0.90, 70B 0.98 (0.78 while a TP/PP layout timed LoRA as full training)."""
    lora = [r for r in ROWS if r.run["job"].get("finetune_task") == "lora"
            and r.run["source_group"] == "nemo"]  # the 26.06 LoRA rows record no job.lora
    assert len(lora) == 3
    for r in lora:
        lo = r.run["job"]["lora"]
        assert (lo["rank"], lo["alpha"], lo["dropout"], lo["targets"]) == \
            (32, 32, 0.0, ["attention_qkv"])
        assert "579983fbfc85533df0fb53b30b5e9fca1a1159c9" in lo["as_stated"]
        assert "8325688d8345a5513660f0f8390f0482a721c009" in lo["sources"]["launch"]
        job = V.job_of(r.run)
        assert (job.lora_rank, job.lora_targets, job.zero) == (32, ("linear_qkv",), 0)
        assert r.predicted is not None and 0.8 < r.predicted / r.measured < 1.1, r.run["id"]
        own, _, usable = V.memory_of(r.run)
        assert own <= usable, r.run["id"]


def test_the_25_09_gb200_405b_mxfp8_job_is_its_b200_twins(monkeypatch):
    """Issue 30, the 25.09 GB200 Llama 3.1 405B MXFP8 row (1.42), a negative result
    (BLACKWELL_405B_CHECKED): its 25.09 perf_matrix (Megatron-Bridge@ea299063
    llama31_405b_llm_pretrain.yaml) gives gb200 fp8_mx the b200 layout (TP 4 PP 8 CP 2 VP 8,
    MBS 1, GBS 64, no FSDP), so the Jobs differ in the node alone; the two 64-GPU NVLink domains
    sbatch --segment 16 makes of 32 four-GPU nodes (utils/executors.py) predict as the 72-GPU
    rack does (TP, CP and DP 2 inside one domain either way, PP timed on InfiniBand); GB200 is
    predicted faster than B200 (its clock; DP 2 on NVLink) where it measured slower (578
    against 622)."""
    by_id = {r.run["id"]: r for r in ROWS}
    gb = by_id["megatron-bridge-25.09-dgx-gb200-llama3.1405b-mxfp8-x128"]
    b = by_id["megatron-bridge-25.09-dgx-b200-llama3.1405b-mxfp8-x128"]
    assert V.job_of(gb.run) == V.job_of(b.run).with_(gpus_per_node=72)
    assert gb.measured < b.measured and gb.predicted > b.predicted
    at_72 = gb.predicted
    monkeypatch.setattr(V, "nvlink_domain", lambda gpu: 64)
    assert V.job_of(gb.run).gpus_per_node == 64
    assert V.predict(gb.run).predicted == pytest.approx(at_72, rel=1e-9)


#: The NeMo 24.07 pre-training rows whose launcher yaml states precision bf16, megatron_amp_O2
#: and distributed_fused_adam with no dtype (and whose script sets no fp8_params): NeMo sets
#: store_param_remainders (each row's ``launcher`` cites the lines).
REMAINDER_ROWS = {f"nemo-24.07-dgx-h100-{t}-fp8-delayed-x{n}" for t, n in (
    ("llama2-7b", 8), ("llama2-13b", 16), ("llama2-70b", 64), ("llama3-8b", 8),
    ("llama3-70b", 64), ("gpt3-5b", 64), ("gpt3-20b", 64), ("gpt3-175b", 128),
    ("gpt3-175b", 512), ("nemotron-8b", 64), ("nemotron-22b", 64))}


def test_the_nemo_pretraining_rows_keep_master_remainders():
    """Each row whose launcher config triggers NeMo's store_param_remainders plans its master as
    2 B remainders a weight, half the fp32 copy it planned before, and nothing else moves; the
    Nemotron-4 340B yaml (dtype bf16: no remainder) keeps no master (none; the default until
    branch nemo340mem)."""
    got = set()
    for r in ROWS:
        if not r.run.get("launcher"):
            continue
        job = V.job_of(r.run)
        if job.master_weights == "remainder":
            got.add(r.run["id"])
            model = load_model(r.run["model"]["catalog"])
            rem, fp32 = (train_memory(model, j) for j in (job, job.with_(master_weights="auto")))
            assert rem.master_weights_bytes * 2 == pytest.approx(fp32.master_weights_bytes,
                                                                 abs=64), r.run["id"]
            assert rem.weights_bytes == fp32.weights_bytes, r.run["id"]
            assert rem.optimizer_bytes == fp32.optimizer_bytes, r.run["id"]
        elif r.run["launcher"].get("optim_dtype") == "bf16" and \
                not r.run["launcher"].get("fp8_params"):
            assert job.master_weights == "none", r.run["id"]
        else:
            assert job.master_weights == "auto", r.run["id"]
    assert got == REMAINDER_ROWS


def test_the_nemotron_8b_22b_rows_count_apex_fp32_grad_buffer():
    """The Nemotron 8B and 22B rows' yamls and scripts set no grad_sync_dtype (each row's
    ``launcher``): Apex's DistributedFusedAdam then syncs in its dtype, fp32 (apex
    distributed_fused_adam.py lines 586-587 @f8e60c47), its contiguous grad buffer in that
    dtype (lines 1099-1118): 4 B a weight, unsharded by the distributed optimizer, where the
    16-bit grads made 2; every other NeMo pre-training row's grad_sync_dtype is bf16 (2 B).
    History (branch nemo340mem): Nemotron 8B 68.2 -> 78.1 GB, 22B 62.1 -> 69.5 GB, both
    within their 85.0 GB."""
    fp32 = {"nemo-24.07-dgx-h100-nemotron-8b-fp8-delayed-x64",
            "nemo-24.07-dgx-h100-nemotron-22b-fp8-delayed-x64"}
    got = set()
    gpu = get_gpu("H100-SXM-80GB")
    for r in ROWS:
        if not r.run.get("launcher"):
            continue
        job = V.job_of(r.run)
        plan = train_memory(load_model(r.run["model"]["catalog"]), job, gpu=gpu)
        wide = job.grad_dtype == "fp32"
        assert plan.gradients_bytes == plan.trainable_params * (4 if wide else 2), r.run["id"]
        if wide:
            got.add(r.run["id"])
            assert r.run["launcher"]["grad_sync_dtype"] is None
            assert plan.total_bytes <= gpu.memory_bytes, r.run["id"]
    assert got == fp32



def _qwen30b_runs() -> dict:
    # the rows QWEN3_30B_CHECKS was written against (the later tables' own are in ROWS)
    return {r.run["id"]: r for r in OLD_ROWS if r.run["model"]["catalog"] == "qwen3-30b-a3b"}


def test_the_qwen3_30b_checks_quote_the_tables():
    """QWEN3_30B_CHECKS' figures: the per-token FLOPs of every Qwen3-30B-A3B row (its model
    TFLOP/s over its tokens/s, both as the table prints them), the later table's ratios and
    the B200 layer passes by hand (tokens a GPU a step over tok/s/GPU, over 48 layers x the
    micro-batches), the estimate's passes as it reads today."""
    text = " ".join(V.QWEN3_30B_CHECKS)
    rows = _qwen30b_runs()
    assert len(rows) == 10
    per_token = [r.run["measured"]["model_tflops_per_gpu"] * 1e3
                 / r.run["measured"]["tokens_per_s_per_gpu"] for r in rows.values()]
    assert 22.9 <= min(per_token) and max(per_token) <= 23.1 + 0.005
    assert "22.9-23.1 GFLOP a token" in text
    b26 = rows["megatron-bridge-26.02-dgx-b200-qwen330ba3b-mxfp8-x8"]
    b25 = rows["megatron-bridge-25.11-dgx-b200-qwen330ba3b-mxfp8-x8"]
    assert f"{18066 / b25.measured:.2f}x / {18066 / b26.measured:.2f}x" in text
    later = {b.run["id"]: (b, l) for b, l, _, _ in V.later_rows(ROWS)}
    for rid, quoted in (("megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16", "x 1.77"),
                        ("megatron-bridge-26.02-dgx-gb200-qwen330ba3b-mxfp8-x8", "x 1.01"),
                        ("megatron-bridge-26.02-dgx-b200-qwen330ba3b-mxfp8-x8", "x 2.75")):
        base, late = later[rid]
        assert f"x {late.measured / base.measured:.2f}" == quoted
        assert quoted in text
    _, b4 = later["megatron-bridge-26.02-dgx-b200-qwen330ba3b-mxfp8-x8"]
    tokens = 512 * 4096 / 8
    passes = {"measured 1": tokens / b26.measured / (48 * 64), "measured 4": tokens / b4.measured
              / (48 * 16), "estimate 1": tokens / b26.predicted / (48 * 64),
              "estimate 4": tokens / b4.predicted / (48 * 16)}
    assert [f"{v * 1e3:.2f}" for v in passes.values()] == ["8.81", "12.79", "6.51", "11.68"]
    for quoted in ("8.81 ms at MBS 1", "12.79 ms at MBS 4", "6.51 and 11.68 ms"):
        assert quoted in text
    miss = [(passes["measured 1"] - passes["estimate 1"]) * 1e3,
            (passes["measured 4"] - passes["estimate 4"]) * 1e3]
    assert f"from {miss[0]:.2f} to {miss[1]:.2f} ms" in text
    h_base, h_late = later["megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16"]
    assert f"on the columns ({h_late.predicted / h_late.measured:.2f})" in text
    # the config's EP 16 under each flex backend, against the 26.04 table's 8,901 at that
    # layout (history: 'with HybridEP's exchange ... 1.21' added with HYBRIDEP_INTERNODE_H100,
    # branch hybridep: HybridEP across nodes had been NCCL's all-to-all, 0.52)
    for backend, quoted in (("deepep", "DeepEP's exchange (0.96)"), ("hybridep", "reads 1.21")):
        run = V.later_run(h_base.run, {"pp": 1, "vp": None, "ep": 16},
                          {"moe_flex_dispatcher_backend": backend, "moe_a2a_overlap": False}, 8901)
        assert f"{V.predict(run).predicted / 8901:.2f}" in quoted and quoted in text
    # the aux loss's launches: 7 forward + 5 backward at the megatron runtime's 32 us
    assert f"{(7 + 5) * 32e-3:.2f} ms a layer pass" in text


def test_the_later_qwen3_30b_runs_are_their_configs():
    """LATER_QWEN3_30B's Jobs: the H100 and GB200 26.02.01 runs are the 26.02 rows' Jobs (the
    same prediction), the B200 one runs v0.3.1's config (MBS 4, GA 16, HybridEP, attention
    graphed); the H100 note's EP 16 readings as the estimate gives them today."""
    later = {b.run["id"]: (b, l) for b, l, _, _ in V.later_rows(ROWS)}
    for rid in ("megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16",
                "megatron-bridge-26.02-dgx-gb200-qwen330ba3b-mxfp8-x8"):
        base, late = later[rid]
        assert late.predicted == pytest.approx(base.predicted, rel=1e-12)
    base, late = later["megatron-bridge-26.02-dgx-b200-qwen330ba3b-mxfp8-x8"]
    job = V.job_of(late.run, [])
    assert (job.batch, job.loop.grad_accum, job.parallel.moe_dispatcher) == (4, 16, "hybridep")
    assert job.loop.cuda_graph_scope == ("attn", "moe_router", "moe_preprocess")
    assert job.batch * job.loop.grad_accum * job.gpus == 512  # MBS x GA x DP 8 = GBS
    h100 = later["megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16"][0].run
    note = V.LATER_QWEN3_30B[0][5]
    # history: ("hybridep", "0.52 of 8,901") while HybridEP across nodes was NCCL's
    # all-to-all; 1.21 on HybridEP's measured H100 internode exchange (branch hybridep)
    for backend, quoted in (("hybridep", "1.21 of 8,901"), ("deepep", "reads 0.96")):
        run = V.later_run(h100, {"pp": 1, "vp": None, "ep": 16},
                          {"moe_flex_dispatcher_backend": backend, "moe_a2a_overlap": False}, 8901)
        ratio = V.predict(run).predicted / 8901
        assert f"{ratio:.2f}" in quoted and quoted in note


def test_the_later_tables_listed_rows():
    """The 200 rows of Megatron-Bridge's 26.02.01-26.08 tables (docs at 4ab94dfa; each row's
    config at its release's tag): 97 predicted; the rest listed, each for what its config runs
    that no Job says -- no catalog entry (Nemotron 3 Nano / Super / Ultra / 3.5 Lightning,
    DeepSeek-V4 Flash), one CUDA graph over the whole iteration (the v0.5.x MoE presets and every
    26.08 flat recipe), Megatron-FSDP (the Llama 3 70B FP8-CS rows), TE graphs over 'mlp' (the
    26.06 SFT / LoRA configs), LoRA without its targets recorded, Kimi-K2's uneven pipeline, and
    the two 26.02.01 GB300 Llama 3 70B rows whose printed layout cannot have run."""
    later = [r for r in ROWS if _later(r)]
    assert len(later) == 200 and sum(r.predicted is not None for r in later) == 97
    kinds = {"not in gpuplan's catalog": 55, "one CUDA graph over the whole iteration": 26,
             "Megatron-FSDP": 6, "cuda_graph_scope 'mlp'": 5, "LoRA fine-tuning": 5,
             "Kimi-K2's uneven pipeline": 4, "cannot have run": 2}
    got = dict.fromkeys(kinds, 0)
    for r in later:
        if r.predicted is None:
            hit = [k for k in kinds if k in r.why_not]
            assert len(hit) == 1, (r.run["id"], r.why_not)
            got[hit[0]] += 1
    assert got == kinds
    # every 26.08 row of a catalog model runs its flat recipe's whole-iteration graph
    for r in later:
        if r.run["id"].startswith("megatron-bridge-26.08-") and r.run["model"]["catalog"]:
            assert r.run["recipe"]["cuda_graph_impl"] == "full_iteration", r.run["id"]
    assert "| the 26.02.01-26.08 tables (recorded 2026-12-07, out of sample), every model | 97 |" \
        in V.render(ROWS)


#: The 16 predicted GPT-OSS 120B rows (26.02.01-26.04.01 BF16 on H100, B200, B300, GB200, GB300;
#: 26.06 B300 MXFP8): predicted / measured before and with Megatron-Core's expert epilogue and
#: its unfused YaRN rotary.
GPT_OSS_RATIOS = {"without": (1.60, 2.25), "with": (1.30, 1.82)}


def test_the_expert_epilogue_and_rope_move_the_gpt_oss_rows_only(monkeypatch):
    """Megatron-Core's TEGroupedMLP runs gpt-oss's clamps (activation_func_clamp_value 7) and its
    fc2 bias (skip_bias_add, _apply_bias's loop over the local experts) as eager kernels
    (compute/flops.py MCORE_EXPERT_EPILOGUE, read at the 26.02.01-26.06 submodules), and its
    YaRN rotary unfused (MCORE_UNFUSED_ROPE). With them every GPT-OSS row plans slower, still
    optimistic; without them (the engine taken out of both) the rows read what they read
    before; a Qwen3 MoE row, which has neither a clamp, expert biases nor YaRN positions, is the
    same either way."""
    from gpuplan.compute import flops

    oss = [r for r in ROWS if "gptoss120b" in r.run["id"] and r.predicted is not None]
    qwen = _row("megatron-bridge-26.04-dgx-b200-qwen330ba3b-mxfp8-x8")
    assert len(oss) == 16
    monkeypatch.setattr(flops, "MCORE_EXPERT_EPILOGUE", ())
    monkeypatch.setattr(flops, "MCORE_UNFUSED_ROPE", {})
    before = {r.run["id"]: V.predict(r.run).predicted for r in oss}
    assert V.predict(qwen.run).predicted == qwen.predicted
    for key, rows in (("without", [(r, before[r.run["id"]]) for r in oss]),
                      ("with", [(r, r.predicted) for r in oss])):
        ratios = [p / r.measured for r, p in rows]
        lo, hi = GPT_OSS_RATIOS[key]
        assert round(min(ratios), 2) == lo and round(max(ratios), 2) == hi, (key, ratios)
    for r in oss:
        assert 1.0 < r.predicted / r.measured and r.predicted < 0.95 * before[r.run["id"]]
    lo, hi = GPT_OSS_RATIOS["with"]
    assert f"{lo:.2f}-{hi:.2f}x" in V.GPT_OSS_NOTE  # the report's prose quotes today's range
    by_gpu = {}
    for r in oss:
        by_gpu.setdefault(r.run["hardware"]["gpu"].split("-")[0], []).append(
            r.predicted / r.measured)
    assert f"({min(by_gpu['H100']):.2f}-{max(by_gpu['H100']):.2f})" in V.GPT_OSS_NOTE
    blackwell = by_gpu["B200"] + by_gpu["B300"]
    assert f"({min(blackwell):.2f}-{max(blackwell):.2f})" in V.GPT_OSS_NOTE
