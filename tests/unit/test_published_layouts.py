"""Published large training runs under their layouts: gpuplan's per-GPU throughput (or MFU) within
15% of what each source reports, and the layout fits the memory it ran in. Every figure comes from
benchmarks/published/runs.json, whose entries cite the exact table or sentence; the source is
repeated at each case below.

Each run is one gpuplan Job, with the engine runs.json names for it (``run["engine"]``), built
once by benchmarks/validate_speed.py's :func:`job_of` and read by both checks here: the speed
check is validate_speed's own prediction of the run (the figure its table shows), the memory
check plans that same Job. No check adds fields of its own: the engine decides what the source
leaves open (Megatron trains under its fused kernels, timed and planned as ``compile``;
torchtitan, DeepSpeed and FSDP eager), and a fact the source states (full checkpointing, the
layout) is a field of the run's Job for both checks.

Assumptions the sources leave open are stated per case (micro-batch, schedule chunks, overlap) in
validate_speed's LAYOUTS; none is fitted to the answer: the Megatron-Core rows all take
micro-batch 1, the distributed optimizer (ZeRO-1), sequence parallelism and --tp-comm-overlap, as
the README's command lines say.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from gpuplan.hardware import get_gpu
from gpuplan.models import load_model, model_from_config_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from validate_speed import job_of, predict  # noqa: E402  (the one job of each run)

RUNS = {r["id"]: r for r in json.loads(
    (Path(__file__).resolve().parents[2] / "benchmarks/published/runs.json").read_text())["runs"]}
TOL = 0.15


# The Megatron-Core README rows (engine megatron): TP/PP as the README's table, micro-batch 1,
# the distributed optimizer (ZeRO-1), sequence parallelism under TP, --tp-comm-overlap.
MEGATRON = [rid for rid in RUNS if rid.startswith("megatron-core-")]

CASES = MEGATRON + [
    # Llama 3 Herd, arXiv 2407.21783, Table 4: TP8 PP16 DP64, 32 sequences per DP group, RoCE
    # 400 Gb/s per GPU; FSDP without resharding after forward (ZeRO-2 here). Meta's modified
    # interleaved schedule, laid out as sec. 3.3.2 states: "we reduce one Transformer layer from
    # the first and the last stages, respectively. This means that the first model chunk on the
    # first stage has only the embedding, and the last model chunk on the last stage has only
    # output projection and loss calculation" -- 126 layers + the embedding + the loss as 128
    # one-layer parts on 16 stages: interleaved:8 with the embedding and loss parts. V is not
    # stated; 8 is what that sentence implies. Meta's tunable contiguous micro-batches N (their
    # Figure 6) are not modeled: the bubble is the plain interleaved (PP-1)/(V M). Engine
    # torchtitan (FSDP + TP + PP + CP, the embedding and output weighed as parts); the paper
    # names no kernels, so the runtime is the engine's (eager).
    "llama3-405b-h100-x8192-s8192",
    "llama3-405b-h100-x16384-s8192",
    # BLOOM-176B, bigscience tr11-176B-ml README/slurm: TP4 PP12 DP8, MBS 2, GBS 2048, full
    # checkpointing; TFLOPs counted with recompute (HFU); 4 x 100 Gb/s Omni-Path per 8-GPU node
    # = 50 Gb/s per GPU; --pp-partition-method 'type:transformer|embedding': the embedding on the
    # first stage and the tied embedding (the head) on the last count as a layer each in the
    # split (70 + 2 = 72 units, 6 a stage) -- the embedding and loss parts. Engine megatron
    # (Megatron-DeepSpeed: Megatron's TP, even split and fused kernels).
    "bloom176b-a100-x384-iter85376",
    # OPT-175B, arXiv 2205.01068 sec. 2.4: 992 A100-80GB, FSDP + Megatron TP, fp16, "up to" 147
    # TFLOP/s; the launcher (metaseq@f7ffa5f metaseq/launcher/opt_baselines.py): TP8, FSDP
    # without resharding after forward (ZeRO-2 here), micro-batch (2M tokens // 124 DP ranks) //
    # 2048 = 8 with no accumulation, full checkpointing with the checkpoints split over the TP
    # ranks (--distribute-checkpointed-activations; 1 x 8 was assumed before it was read).
    # Engine torchtitan (FSDP with TP, eager; FSDP's fp32 sharded master).
    "opt175b-a100-x992",
    # Narayanan et al. 2021, arXiv 2104.04473, Table 1 last row: 1T on 3072 A100, TP8 PP64,
    # batch 3072, interleaved schedule (V=2 assumed), recompute, HDR InfiniBand (200 Gb/s per GPU);
    # TFLOP/s counted with recompute. Attention unfused: the paper (April 2021) predates fused
    # attention kernels (FlashAttention, 2022) -- Megatron then fused only scale, mask and softmax
    # -- the rule benchmarks/validate_speed.py applies to every pre-2022 source. Engine megatron.
    "narayanan2021-gpt1t-a100-x3072",
    # Korthikanti et al. 2022, arXiv 2205.05198: MT-NLG 530B on 2240 A100; layout from the
    # paper's Table 3 (TP8 PP35; DP8 fills 2240 GPUs, batch 2240 = 280 per DP rank), interleaved
    # (V=3 assumed), HDR InfiniBand; MFU without recompute. Engine megatron.
    "korthikanti2022-mtnlg530b-a100-x2240-selective",
    "korthikanti2022-mtnlg530b-a100-x2240-full",
]

#: Runs gpuplan does not reach honestly, with the reason and the ratio measured here.
_ZERO3_SERIAL = (
    "DeepSpeed ZeRO-3 in 2021 (Narayanan 2021 Table 2), micro-batch {mb}: the weights all-gathered "
    "2.66 times a micro-batch (DeepSpeed's coordinator replayed over the model), each waited for "
    "as DeepSpeed did before January 2022 (validate_speed.gather_overlap) at that code path's "
    "measured ~21 GB/s a GPU (DeepSpeed #1174, engines/zero3.SERIAL_GATHER_BUS_BPS), the "
    "gradients' reduce-scatter overlapped on the node's NICs: {got} TFLOP/s against {pub} "
    "({ratio}x). With the all-gathers overlapped as today's DeepSpeed runs them it reads "
    "{overlapped}x; {where}")
_AGGREGATED = (
    "Megatron-Core weak scaling, TP {tp}: the data-parallel ring holds {nics} GPUs of each node and "
    "so {nics} NICs (NCCL's channels, one or more a NIC: Topology.bandwidth), and its traffic hides "
    "under the backward; the step is the H100 compute alone (and the SMs NCCL's CTAs hold while "
    "the hidden traffic runs: efficiency.overlap_sm_share), {got} TFLOP/s against {pub} "
    "({ratio}x) -- as the other H100 rows whose traffic hides read (IBM's FSDP H100 rows "
    "1.21-1.37x, llm-foundry's 512-GPU MPT-70B 1.32x, torchtitan's FSDP 1.31-1.46x on its 2.4 TB/s H100-SXM-96GB). At one NIC's "
    "rate (before issue 31's network model) it read {one}x, the network's pessimism offsetting "
    "the compute's optimism")
XFAIL = {
    "narayanan2021-t2-zero3-gpt174.6b-a100-x384": _ZERO3_SERIAL.format(
        mb=4, got=121.2, pub=144, ratio=0.84, overlapped=1.53,
        where="the published step lies between the two: how much 2021's gathers overlapped "
              "at micro-batch 4 is not modeled"),
    "narayanan2021-t2-zero3-gpt174.6b-a100-x1536": _ZERO3_SERIAL.format(
        mb=1, got=51.2, pub=44, ratio=1.16, overlapped=4.92,
        where="the published run's gathers were slower still than the one-node figure, at "
              "1,536 GPUs"),
    "megatron-core-gpt1.7b-h100-x48": _AGGREGATED.format(tp=1, nics=8, got=558.5, pub=408.8,
                                                          ratio=1.37, one=1.06),
    "megatron-core-gpt7.1b-h100-x96": _AGGREGATED.format(tp=2, nics=4, got=576.3, pub=465.9,
                                                          ratio=1.24, one=0.97),
    "megatron-core-gpt32b-h100-x384": (
        "Megatron-Core weak scaling, TP 8 over 48 nodes: 385.7 TFLOP/s against 459.6 (0.84x). "
        "The data-parallel reduce-scatter / all-gather leaves 0.278 s of the 1.06 s step exposed "
        "(the window past the last micro-batch's backward is too short for 48 ranks over "
        "InfiniBand at TP 8's gradient shard), and TP 8's userbuffers ring exchanges add 0.065 s "
        "(compute.parallel.ub_split_s: the QKV GEMM in 512-row chunks, 72 tiles on 132 SMs; TE's "
        "pipeline reduce-scatters on 116 SMs). Before the ring exchanges were priced it read "
        "0.89x; the data-parallel exposure is the gap, not modelled better here"),
}
CASES += [
    # Llama 3 Table 4 long-context row: TP8 CP16 PP16, DP 8 (the runs.json DP 4 does not fill
    # 16,384 GPUs; see its note), 16 sequences per DP group at 131,072 tokens; the pipeline laid
    # out as the 8K rows.
    "llama3-405b-h100-x16384-s131072",
    # Narayanan et al. 2021 Table 1 first row: 1.7B, TP1 PP1, 32 GPUs, batch 512 (micro-batch
    # not stated: 4 assumed), recompute; TFLOP/s with recompute; attention unfused, as the 1T row
    # (a 2021 source). With fused attention it read ~1.6x. The layout is validate_speed's.
    "narayanan2021-gpt1.7b-a100-x32",
    # ... and the eight rows between (3.6B on 64 GPUs to 529.6B on 2,520), transcribed at stop
    # 22 after the model was fixed: TP and PP as the table states, the micro-batch and V as
    # validate_speed's LAYOUTS assume (4 without a pipeline, as the 1.7B row; 1 and the smallest
    # V >= 2 dividing a stage's layers with one, as the 1T row), unfused attention as the others.
    "narayanan2021-gpt3.6b-a100-x64",
    "narayanan2021-gpt7.5b-a100-x128",
    "narayanan2021-gpt18.4b-a100-x256",
    "narayanan2021-gpt39.1b-a100-x512",
    "narayanan2021-gpt76.1b-a100-x1024",
    "narayanan2021-gpt145.6b-a100-x1536",
    "narayanan2021-gpt310.1b-a100-x1920",
    "narayanan2021-gpt529.6b-a100-x2520",
    # ... and its Table 2: the same 175B and 530B models as PTD-P (TP8 x PP12 / PP35; engine
    # megatron) and as ZeRO-3 without model parallelism (engine deepspeed: the weights gathered
    # again for each checkpointed recompute), on 384-2,240 GPUs; layouts in validate_speed's
    # LAYOUTS.
    *(f"narayanan2021-t2-{kind}-gpt{size}b-a100-x{n}" for kind, size, n in (
        ("zero3", "174.6", 384), ("zero3", "174.6", 768), ("zero3", "174.6", 1536),
        ("zero3", "529.6", 640), ("zero3", "529.6", 1120), ("zero3", "529.6", 2240),
        ("ptdp", "174.6", 384), ("ptdp", "174.6", 768), ("ptdp", "174.6", 1536),
        ("ptdp", "529.6", 560), ("ptdp", "529.6", 1120), ("ptdp", "529.6", 2240))),
]


def _memory_model(run: dict):
    """The model with its tensors, which the memory plan needs: the catalog's, or the run's
    shape written as the config.json of the transformers family it is -- OPT-175B as OPT
    (ReLU, learned positions), the Megatron GPTs as GPT-2's layout (learned positions,
    LayerNorm, GeLU). The head is untied unless the shape says tied, as ``_arch`` times it:
    the Megatron-Core table's names count an untied head (1.7B = 1,753,862,144 parameters
    untied, 1.49B tied), and an untied head is the larger plan where a source is silent.
    BLOOM (ALiBi) as transformers' BLOOM (its FFN is 4h, as the shape states)."""
    if run["model"].get("catalog"):
        return load_model(run["model"]["catalog"])
    s = run["model"]["shape"]
    if s.get("position") == "alibi":
        assert s["ffn"] == 4 * s["hidden"]
        config = {"model_type": "bloom", "hidden_size": s["hidden"], "n_layer": s["layers"],
                  "n_head": s["heads"], "vocab_size": s["vocab"],
                  "tie_word_embeddings": bool(s.get("tied_embeddings"))}
    elif s["mlp"] == "relu":
        config = {"model_type": "opt", "hidden_size": s["hidden"], "word_embed_proj_dim": s["hidden"],
                  "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
                  "ffn_dim": s["ffn"], "vocab_size": s["vocab"], "max_position_embeddings": s["seq"],
                  "do_layer_norm_before": True, "activation_function": "relu",
                  "tie_word_embeddings": bool(s.get("tied_embeddings"))}
    else:
        config = {"model_type": "gpt2", "n_embd": s["hidden"], "n_layer": s["layers"],
                  "n_head": s["heads"], "n_inner": s["ffn"], "vocab_size": s["vocab"],
                  "n_positions": s["seq"], "activation_function": "gelu_new",
                  "tie_word_embeddings": bool(s.get("tied_embeddings"))}
    return model_from_config_bytes(json.dumps(config).encode(), name=run["model"]["name"])


@pytest.mark.parametrize("rid", [
    pytest.param(rid, id=rid, marks=[pytest.mark.xfail(strict=True, reason=XFAIL[rid])]
                 if rid in XFAIL else []) for rid in CASES])
def test_published_throughput_within_15_percent(rid):
    """validate_speed's prediction of the run (its Job, engine included) against the figure
    the source published, in the source's unit (model or hardware FLOP/s, MFU)."""
    row = predict(RUNS[rid])
    assert abs(row.ratio - 1) <= TOL, (
        f"{rid}: gpuplan {row.predicted:.1f} vs published {row.measured} ({row.ratio:.2f}x)")


def test_every_train_mfu_run_is_covered():
    """Each published train_mfu run is a case here (Korthikanti's with the layout from the
    paper's Table 3), so a new run in runs.json is not silently left out."""
    covered = set(CASES)
    assert {rid for rid, r in RUNS.items() if r["kind"] == "train_mfu"} <= covered


#: Layouts gpuplan's memory plan does not fit where they ran, with the figures measured here.
#: Llama 3 (arXiv 2407.21783, sec. 3.3.2): "we could pre-train Llama 3 on sequences of 8K tokens
#: without activation checkpointing" -- so the 8K rows run with none (the Job default); the 128K
#: row (checkpointing not stated) is checked the same way: fitting without recompute is the bound
#: that holds whatever it used. Their one Job runs under engine torchtitan, whose runtime is eager
#: (torchtitan's [compile] enable is false by default; the paper names no kernels and no
#: compiler): transformers' eager Llama ops keep RMSNorm's fp32 copy and SiLU and up apart, ~0.77
#: GB a one-layer chunk micro-batch here (SP over t = 8, flash attention, bf16). Fused kernels --
#: the same Job under runtime compile -- keep 31.75 sbh/t = 533,209,088 B a layer with the fp32
#: statistics (norm inputs 2 x 2sbh, norm outputs 2 x 2sbh, Q 2sbh, K and V 2 x 2sb(h/16), the
#: attention output 2sbh, gate and up 2 x 2sb(3.25h), their product 2sb(3.25h)); this file
#: planned the memory that way before the engine was part of the job, while timing the speed
#: eager: two jobs for one run. Under compile the rows read 88.9 / 81.2 / 81.2 GB (the 16K rows
#: fit) but the same Job times 1.17x / 1.18x / 1.21x the published MFU, outside 15%: neither
#: runtime matches both what Meta measured and what it fitted, and which kernels it ran is not
#: stated. Meta's tunable number of contiguous micro-batches N (their Figure 6), which sets the
#: warm-up, is not stated for 405B and not modeled.
_LLAMA3_EAGER = (
    "engine torchtitan, runtime eager (the engine's; the paper names no kernels): {mb} "
    "micro-batches per DP group on 16 stages as the paper lays them out (interleaved:8 with "
    "one-layer chunks, the embedding and the loss parts of their own): stage 1, the worst, holds "
    "{chunks} one-layer chunk micro-batches in flight ({whole} whole micro-batches) of ~0.77 GB "
    "each under eager Llama ops: {got} GB per GPU planned against 85.0 GB of HBM ({over}% over; "
    "stage 0 {first} GB; every stage over). With fused kernels (runtime compile) it reads "
    "{fused}, but the same Job then times {fast}x the published MFU: neither runtime matches "
    "both, and Meta's kernels and its tunable N (Figure 6) are not stated")
MEMORY_XFAIL = {
    "llama3-405b-h100-x8192-s8192": _LLAMA3_EAGER.format(
        mb=32, chunks="2 (p-2) + (v-1) p + 1 = 141", whole=17.6, got=124.6, over=47,
        first=100.6, fused="88.9 GB (still ~5% over; at interleaved:2, 116 GB)",
        fast=1.17),
    "llama3-405b-h100-x16384-s8192": _LLAMA3_EAGER.format(
        mb=16, chunks="all 16 x 8 = 128", whole=16.0, got=113.6, over=34, first=100.2,
        fused="81.2 GB and fits", fast=1.18),
    "llama3-405b-h100-x16384-s131072": _LLAMA3_EAGER.format(
        mb=16, chunks="all 16 x 8 = 128", whole=16.0, got=113.6, over=34, first=100.3,
        fused="81.2 GB and fits", fast=1.21),
}


@pytest.mark.parametrize("rid", [
    pytest.param(rid, id=rid, marks=[pytest.mark.xfail(strict=True, reason=MEMORY_XFAIL[rid])]
                 if rid in MEMORY_XFAIL else []) for rid in CASES])
def test_published_layout_fits_its_memory(rid):
    """The run's one Job (validate_speed.job_of: the one its speed check times) planned on the
    model with its tensors fits the GPU it ran on."""
    from gpuplan.memory import train_memory

    run = RUNS[rid]
    model = _memory_model(run)
    gpu = get_gpu(run["hardware"]["gpu"])
    mem = train_memory(model, job_of(run))
    assert mem.total_bytes <= gpu.memory_bytes, (
        f"{rid}: {mem.total_bytes / 1e9:.1f} GB planned, {gpu.memory_bytes / 1e9:.1f} GB on the GPU")


@pytest.mark.parametrize("rid", [rid for rid in CASES if not RUNS[rid]["model"].get("catalog")])
def test_memory_models_have_their_named_size(rid):
    """The shape-built model of each run has the parameter count its name states (gpt-1.7b,
    OPT-175B, gpt-1t ...) within 5% (names round: 1.75B and 1.77B are both "1.7b"; a tied head
    would read 1.49B): the family, the untied head and the FFN width are right."""
    name = RUNS[rid]["model"]["name"]
    size = re.search(r"(\d+(?:\.\d+)?)\s*([bt])\b", name, re.IGNORECASE)
    assert size, name
    named = float(size.group(1)) * (1e12 if size.group(2).lower() == "t" else 1e9)
    got = _memory_model(RUNS[rid]).params.total
    assert abs(got / named - 1) <= 0.05, f"{name}: {got:,} parameters"
