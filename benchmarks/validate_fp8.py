"""gpuplan's speed estimate against published FP8 (and MXFP8 / NVFP4) training throughput
(benchmarks/published/fp8_runs.json, recorded before any prediction of them was read).

Each run is expressed as a gpuplan Job the way benchmarks/validate_speed.py builds one (its
:func:`~validate_speed.topology` rules, ``measured=None``, the engine's defaults): the table's
model (the catalog entry), GPU, precision recipe (FP8-CS = ``fp8-current``, FP8-MX = ``mxfp8``,
NVFP4 = ``nvfp4``, NeMo 24.07's FP8 = ``fp8-delayed``, BF16 = ``mixed-bf16``), micro-batch,
gradient accumulation, sequence, TP / PP / CP / EP and VP (``interleaved:VP``), sequence
parallelism under TP, the distributed optimizer (ZeRO-1) -- Megatron-Bridge's performance
recipes -- or listed with the reason it cannot be. Nothing is fitted.

The bars (gpuplan issue 30): over the predicted rows, median |predicted / measured - 1| within
10% and worst within 20%; for rows whose BF16 twin the same table publishes (same model, system
and container), the predicted FP8-over-BF16 speed-up within 10% of the published one.

Run:  PYTHONPATH=src python benchmarks/validate_fp8.py [--write]
(--write regenerates benchmarks/validate_fp8.md)
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuplan.compute import estimate_speed
from gpuplan.errors import GpuplanError
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import nvlink_domain, topology_for
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model

HERE = Path(__file__).resolve().parent
RUNS = HERE / "published" / "fp8_runs.json"
OUT_MD = HERE / "validate_fp8.md"
COMMAND = "PYTHONPATH=src python benchmarks/validate_fp8.py --write"

MEDIAN_BAR, WORST_BAR, SPEEDUP_BAR = 0.10, 0.20, 0.10


@dataclass(frozen=True)
class Row:
    run: dict
    predicted: float | None
    measured: float
    why_not: str = ""
    notes: tuple[str, ...] = ()

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else abs(self.predicted / self.measured - 1)


def _not_expressible(run: dict) -> str:
    j, rec = run["job"], run.get("recipe") or {}
    if run["model"]["catalog"] is None:
        return (f"{run['model']['name_as_stated']} is not in gpuplan's catalog (an entry needs its "
                "config from the NeMo / Megatron-Bridge recipe code, file and commit)")
    if j.get("finetune_task") == "lora" and not j.get("lora"):
        return ("LoRA fine-tuning: the row records neither its LoRA target modules nor its "
                "rank (job.lora)")
    unmapped = [t for t in (j.get("lora") or {}).get("targets", ()) if t not in NEMO_LORA_TARGETS]
    if unmapped:
        return f"LoRA target {unmapped[0]} has no Job target (NEMO_LORA_TARGETS)"
    if j.get("fsdp"):
        return ("Megatron-FSDP (FSDP = 1): the megatron profile runs ZeRO stages 0 and 1 only "
                "(the distributed optimizer)")
    if rec.get("pipeline_layout_unknown"):
        return "the pipeline layout it ran is not recorded: " + rec["pipeline_layout_unknown"]
    return _later_recipe_not_expressible(run)


def _later_recipe_not_expressible(run: dict) -> str:
    """What the 26.02.01-26.08 tables' performance configs run that no Job field says (each
    row's ``recipe``: the config at its tag), else ""."""
    j, rec = run["job"], run.get("recipe") or {}
    scope = rec.get("cuda_graph_scope") or ()
    scope = (scope,) if isinstance(scope, str) else tuple(scope)
    impl = rec.get("cuda_graph_impl")
    # impl "none" captures nothing whatever the scope (scripts/performance/utils/overrides.py
    # _set_cuda_graph_overrides, Megatron-Bridge v0.4.2)
    if impl == "full_iteration" or impl == "local" and "full_iteration" in scope:
        return (f"one CUDA graph over the whole iteration (cuda_graph_impl "
                f"{impl}, cuda_graph_scope {list(scope)}, {rec['config']} "
                f"@{rec['tag']}): the Job's graphs are per layer or per TE scope "
                "(CUDA_GRAPH_SCOPES); a captured step's launches, and the MoE rows' expert padding "
                "to a fixed capacity it needs (moe_expert_rank_capacity_factor 1.5, "
                "set_full_iter_cg_configs), have no Job field")
    if rec.get("recompute_num_layers"):
        return (f"full recompute of {rec['recompute_num_layers']} layers a stage "
                f"(recompute_num_layers, {rec['config']} @{rec['tag']}): the Job recomputes every "
                "layer or named modules, not a count")
    if rec.get("cpu_offloading_num_layers"):
        return (f"activations of {rec['cpu_offloading_num_layers']} layers offloaded to the host "
                f"(cpu_offloading_num_layers, {rec['config']} @{rec['tag']}): the Job offloads "
                "only under full checkpointing")
    if run["model"]["catalog"] == "kimi-k2" and j["pp"] > 1:
        return ("Kimi-K2's uneven pipeline (kimi_llm_pretrain.py builds its layout over the 61 "
                "layers): job_of reads an uneven split for DeepSeek-V3's entry only")
    if run["model"]["catalog"] == "deepseek-v3" and j["pp"] > 1:
        layout = rec.get("pipeline_model_parallel_layout")
        if not layout and (j["pp"], j.get("vp") or 1) not in DEEPSEEK_SPLIT:
            return f"DeepSeek-V3 at PP {j['pp']} VP {j.get('vp')}: no layout recorded or mapped"
        try:
            layout and layout_split(layout, j["pp"])
        except ValueError as e:
            return f"DeepSeek-V3's layout as the Job's first / last / even split: {e}"
    return ""


#: Models whose Megatron-Bridge recipe counts the embedding and the loss as pipeline layers
#: (account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split), with where.
SPLIT_ACCOUNTING = {
    "llama-3.1-405b": "embedding and loss as pipeline parts: Megatron-Bridge "
                      "src/megatron/bridge/recipes/llama/llama3.py llama31_405b_pretrain_config "
                      "sets account_for_embedding/loss_in_pipeline_split True",
    "qwen3-235b-a22b": "embedding and loss as pipeline parts: Megatron-Bridge "
                       "src/megatron/bridge/recipes/qwen/qwen3_moe.py "
                       "qwen3_235b_a22b_pretrain_config sets account_for_embedding/"
                       "loss_in_pipeline_split True at v0.2.0 (7af9601c) and v0.3.0 (21b02e0c), "
                       "the config scripts/performance/configs/qwen/qwen3_llm_pretrain.py builds "
                       "every 235B row from (set_qwen3_common_configs leaves them)",
}


#: Issue 30's Llama 3.1 405B rows on Blackwell (B200 x128 TP4 PP8 CP2 VP8, GB200 x256 TP4 PP16
#: VP4/8), FP8-CS and FP8-MX 1.11-1.19 against the H100 405B rows' 1.05-1.08 and the Blackwell
#: 8B/70B rows' 1.01-1.10 when this was written (the report computes today's, _ratio_spans):
#: what their recipes run that might cost them time, each read at the
#: config functions fp8_runs.json names (scripts/performance/configs/llama/llama31_llm_pretrain.py
#: llama31_405b_pretrain_config_b200 / _gb200, the presets in llama31_workload_base_configs.py,
#: the recipe src/megatron/bridge/recipes/llama/llama3.py llama31_405b_pretrain_config,
#: NVIDIA-NeMo/Megatron-Bridge at 2effdfa312c53d140350410204400cafb2fb6968 (25.11) and
#: df0289c180dd20ff26933455c7a0a11084f6a36f (26.02)) and sized with gpuplan's own times at the
#: commit that added this (the GB200 FP8-CS row: a layer 16.99 ms a micro-batch forward and
#: backward, sequence-parallel quantize included). A negative result: no mechanism a source shows
#: accounts for the gap, none is charged for it. (candidate, finding) pairs.
BLACKWELL_405B_CHECKED = (
    ("TP collectives without userbuffers overlap",
     "not the case: the B200 and GB200 config functions keep the recipe's CommOverlapConfig("
     "tp_comm_overlap=True) with userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 for FP8-CS "
     "and FP8-MX (off for NVFP4 only, as the Job takes it), and Megatron-Bridge turns it off only "
     "for TP < 2, no sequence parallelism or no Transformer Engine "
     "(src/megatron/bridge/training/comm_overlap.py _get_model_comm_overlap_cfgs at df0289c1). "
     "Each collective lies under its own GEMM in gpuplan's times (NVLink 5, TP 4, GB200): the "
     "tightest, the attention-out forward reduce-scatter of 268 MB, 0.30 ms against its 0.35 ms "
     "GEMM; the FP8 all-gathers 0.16 ms against 0.40 ms (QKV) and more; B200's CP 2 halves "
     "both. Exposed in full they would bring these rows to the ratios in the last column (and "
     "the H100 405B rows to 0.90-0.93), but no source shows the overlap failing on Blackwell"),
    ("the userbuffers bulk overlaps' SMs",
     "too small: the config's bulk qkv_dgrad / qkv_wgrad / fc1_dgrad / fc1_wgrad run their "
     "all-gather or reduce-scatter kernel on 8 / 32 / 2 / 8 SMs beside a GEMM given every SM "
     "(set_sm_margin False; Transformer Engine CommOverlapBase::bulk_overlap, "
     "transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp at 815bf369): at most "
     "(0.16 ms x 10 + 0.30 ms x 40) / 148 SMs = 0.09 ms of the 17 ms layer (0.5%), the same share "
     "on B200; not modelled"),
    ("the pipeline's uneven first / last stage",
     "ruled out: account_for_embedding/loss_in_pipeline_split put 126 layers and 2 parts in 128 "
     "over PP x VP (SPLIT_ACCOUNTING, taken), and at TP 4 the BF16 output layer and loss cost "
     "about one FP8 layer (16.60 ms against 16.99 ms on GB200 FP8-CS; 8.71 ms against 9.14 ms on "
     "B200), so the last stage (7 layers and the head, 135.5 ms; B200 15 and the head, "
     "145.8 ms) is no busier than a middle one (135.9 ms; 146.2 ms), and no virtual chunk "
     "outlasts a middle stage's (VP 8: the loss part 16.6 ms against a layer's 17.5 ms). NVFP4's "
     "cheaper layers (11 ms) leave its last stage the busiest, which the Job already times"),
    ("CP 2's ring exchange on B200",
     "ruled out: the Llama recipes leave cp_comm_type unset (Megatron-Core's p2p); a rank's K "
     "and V (4,096 tokens x 2 KV heads x 128 x 2 x 2 B = 4.2 MB) is one ring step on NVLink, "
     "hidden under the attention; TE's P2P merges are timed (te_cp_merge_bytes); the H100 405B "
     "rows run the same CP 2 and read {h100_405b}"),
    ("MXFP8's activations quantized after the TP all-gather",
     "ruled out: Transformer Engine v2.9 quantizes the norm's output on the rank's sequence "
     "shard before the userbuffers all-gather (layernorm_linear.py forward, "
     "fill_userbuffers_buffer_for_all_gather with the input quantizer, at 70f53666); the BF16 "
     "gather then quantize runs only under return_layernorm_output_gathered, which "
     "Megatron-Core does not set. Timed as run (compute.parallel.sp_quantize_s)"),
    ("the rest of the recipe",
     "nothing more to time: no CUDA graphs (26.02's recipe sets cuda_graph_impl none, 25.11's "
     "leaves Megatron-Core's default, none, and no 405B FP8 preset sets one), no recompute "
     "(neither recipe sets one; the GB200 NVFP4 V2 preset clears V1's recompute_num_layers 1), "
     "TE's fused cross entropy "
     "(scripts/performance/utils/overrides.py _set_common_perf_overrides), no FSDP, nccl_ub "
     "unset, a manual GC every 100 steps"),
    ("the 25.09 GB200 MXFP8 row (x128) against what ran",
     "the Job is what ran, and its B200 twin's; the gap is not found. The 25.09 scripts "
     "(Megatron-Bridge@ea299063: scripts/performance/configs/llama31/"
     "llama31_405b_llm_pretrain.yaml perf_matrix gb200 num_gpus_128) give fp8_mx tp 4, pp 8, "
     "cp 2, vp 8, ep 1, mbs 1, gbs 64 (GA 32 over DP 2), use_megatron_fsdp false, "
     "cuda_graphs false, no recompute_num_layers and no cpu_offloading_num_layers (only the "
     "fp8_ds / fp8_cs entries set FSDP, TP 2 and 95 offloaded layers: the table's columns "
     "outside the parentheses, which the FP8-CS row records; the columns in parentheses are "
     "this config's, none copied); the b200 block is the same but 8 GPUs a node. run_script.py "
     "takes llama31_405b_pretrain_config (recipes/llama/llama3.py: account_for_embedding/"
     "loss_in_pipeline_split True, overlap_grad_reduce and overlap_param_gather True, "
     "grad_reduce_in_fp32 False from the yaml) with bf16_with_mxfp8_mixed, the same "
     "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 for gb200 and b200 "
     "(utils/helpers.py COMM_OVERLAP_CONFIG_MAP), sequence parallelism under TP, no "
     "recompute_modules, fp8_param_gather with reuse_grad_buf_for_mxfp8_param_ag (the preset, "
     "timed), no nccl_ub; NCCL_NVLS_ENABLE 0 "
     "on both (utils/executors.py PERF_ENV_VARS). What the scripts set for GB200 alone: 4 GPUs "
     "a node, sbatch --segment 16 (the largest of 18..1 dividing 32 nodes: two NVLink domains "
     "of 64 GPUs), NCCL_NET_GDR_LEVEL PHB and NCCL_NET_GDR_C2C 1, numactl over 2 ranks a "
     "NUMA node. Under Megatron-Core's tp-cp-ep-dp-pp order (training/initialize.py line 400, "
     "use_tp_pp_dp_mapping unset) the TP, CP and DP 2 groups lie in "
     "16 consecutive ranks, inside one domain; PP strides 16 ranks, so 2 of its 8 ring hops "
     "(3 -> 4 and 7 -> 0) cross on InfiniBand, where gpuplan times every PP hop on it (as on "
     "B200, all 8 across nodes); the Job at 64 GPUs a domain predicts as at 72 (820), as "
     "every GB200 / GB300 row over 64 GPUs here does (the x256 ones, were they placed so too). "
     "gpuplan's step (GB200 / B200 at this note's commit): compute 4.57 / 4.83 s (GB200's "
     "clock), DP exposed 0.01 / 0.39 s (DP 2 on NVLink in the rack against InfiniBand across "
     "B200 nodes), bubble 0.13 / 0.14, TP exposed 0.15 / 0.16, PP exposed 0.12 / 0.12 s: "
     "5.00 / 5.64 s, GB200 predicted 1.13x B200; measured 7.09 / 6.59 s, 0.93x, where the same "
     "releases' single-node 8B pairs measure GB200 1.01-1.05x B200 (predicted 1.06x). The "
     "26.02 GB200 MXFP8 row (TP 4 PP 16 VP 8, x256) reads 1.11, so the 25.09 run's miss "
     "(2.1 s a step) is this run's, in no term its config names; not charged (the figures "
     "above are that note's commit's, before GB200's attention clock)"),
    ("GB200's clock in the fused attention",
     "found and charged (compute.efficiency.attention_clock_share): GB200 is B200's die "
     "(148 SMs) at 1,200 W, its datasheet peaks B200's x 1.111, but the MAMF table (stas00/"
     "ml-engineering @744d01e1) measures its BF16 tensor cores 1,822.0 against 1,745.0 TFLOP/s "
     "(1.044; FP8 1.053, as the maximum SM clocks 2,062 / 1,965 MHz = 1.049). The GEMMs already "
     "took each SKU's measured share; the fused attention took a share of the datasheet peak, "
     "so GB200's ran 1.111x B200's. Now B200's x 1.044: every GB200 row 1-2% slower (the 8B "
     "pairs GB200 over B200 predicted 1.063x -> 1.041x, measured 1.01-1.05x; these rows' x256 "
     "FP8-CS 900 -> 892 tok/s/GPU, the 25.09 x128 MXFP8 820 -> 812); B200 unmoved"),
    ("a Blackwell GEMM rate optimistic across the board (datasheet against sustained clocks)",
     "not found: the GEMMs run the MAMF table's measured best-shape shares (B200 BF16 77.6%, "
     "FP8 76.3%; GB200 72.9% / 72.3%) times TE's GEMM guide's training-shape factor (B300's 12 "
     "training GEMMs against H200 NVL's, gemm_training_shapes_blackwell_*), and the single-node "
     "B200 8B rows that run them read {b200_8b} (GEMMs 49% of their step, the attention 36%): a "
     "GEMM rate 10% optimistic would read them about 5% higher. Unless the attention offsets "
     "it: Blackwell's fused attention takes FlashAttention-2's H100 share (attn_fwd_hopper_fa2, "
     "0.35 of the peak, 0.34 at 8,192 tokens), where cuDNN on a Blackwell part reaches 1,074 "
     "TFLOP/s causal forward at head dim 64 and 8,192 tokens, 42.9% of 2,500 "
     "(Dao-AILab/flash-attention#2605, 2026); were the 8B rows' attention that much faster, their "
     "GEMMs would be optimistic by about as much as these rows read. Not charged: no published "
     "Blackwell share at head dim 128, forward and backward, was found to replace it"),
)

#: Issue 30, MXFP8 beside FP8 current scaling on the same model, GPU and table: the 25.11 pairs
#: (Transformer Engine release_v2.9, the pin of NVIDIA-NeMo/Megatron-Bridge@7af9601c v0.2.0's
#: pyproject.toml; TE v2.9 = 70f536662ae10a62a54f4ed1ba92e3314c5cfd69) measure MXFP8 3.6-5.9%
#: slower, the estimate 1.1-4.2%. What an MXFP8 step runs that FP8-CS does not, each read in TE
#: at that pin and at 26.02's (Megatron-Bridge@21b02e0c v0.3.0 pins TE
#: 5671fd3675906cda1ade26c24a65d3dedd88eb89, 2.12.0.dev) and sized with gpuplan's own times.
#: (candidate, finding) pairs; the one mechanism found wrong is charged (the BF16 param gather).
MXFP8_CHECKED = (
    ("the scale swizzle into cuBLAS's layout",
     "already in the measured GEMM rate: at TE v2.9 every GEMM swizzles both operands' e8m0 "
     "scales, one kernel and one allocation an operand (pytorch/csrc/extensions/gemm.cpp "
     "gemm lines 233-240, util.cpp swizzle_scaling_factors), a grouped GEMM one multi-tensor "
     "kernel an operand list of up to 64 experts (gemm.cpp te_general_grouped_gemm lines "
     "484-491; common/swizzle/swizzle.cu kMaxTensorsPerKernel 64), and TE's GEMM profiling "
     "guide's pre-quantized MXFP8 loop, the source of gemm_mxfp8_vs_fp8 (0.951), swizzles both "
     "operands inside its CUDA-event window on every call (benchmarks/gemm/benchmark_gemm.py "
     "benchmark_fp8_prequantized at d0067d0d: MXFP8Quantizer outputs without optimize_for_gemm; "
     "swizzle_scales_for_gemm marks only its local TensorWrapper swizzled), so the device side "
     "is priced as 25.11 ran it. The host side, 6 launches a linear a micro-batch at the "
     "dispatcher cost, lies under a device 10 times longer on the dense rows (Llama 3 8B: host "
     "0.40 s, device 4.0 s a step), and adds 12 launches (under 0.05 ms) to a MoE layer pass "
     "whose miss is 2.3-2.75 ms. From the 26.02 pin the quantize writes the swizzled layout "
     "itself for the inputs and output gradients not gathered under sequence parallelism "
     "(module/linear.py _get_quantizers, grouped_linear.py lines 961 and 971: "
     "optimize_for_gemm), so the 0.951 errs slow there, by at most the swizzle kernels' "
     "unmeasured device time; not charged either way")
    , ("the quantize kernels, rowwise and columnwise",
       "not under-charged: one kernel reads the 16-bit tensor once and writes both copies with "
       "their e8m0 scales (2 + 2 x (1 + 1/32) = 4.06 B an element, the columnwise scales "
       "counted since this note: TE v2.9 quantizer.cpp MXFP8Quantizer::get_scale_shape), "
       "against FP8-CS's 5 B (its amax pass) and 3 more launches; TE's guide measures the "
       "quantize's share on B300 as autocast minus pre-quantized per layer, MXFP8 8.984 - "
       "7.161 = 1.823 ms against FP8-CS 9.147 - 6.812 = 2.335 ms (0.78), where gpuplan's MXFP8 "
       "casts move 0.81 of FP8-CS's bytes")
    , ("the weights' cast and its columnwise copy",
       "charged per recipe and architecture since this note (fp8.weight_cast_bytes_per_element): "
       "TE's linear sets the weight quantizer to rowwise + columnwise usage in training "
       "(module/linear.py, TE @70f53666 and @5671fd36, the 25.11 and 26.02 pins), and "
       "quantizer.cpp allocates the per-tensor FP8 transpose only where "
       "nvte_is_non_tn_fp8_gemm_supported() is false (sm_90, sm_89, sm_120), so on sm_100 an "
       "FP8-CS weight cast moves 5 B an element, not 6; NVFP4's columnwise copy is 0.5 B plus an "
       "e4m3 byte per 16 (NVFP4Quantizer::get_scale_shape), 5.125 B in all instead of 5.56; "
       "MXFP8's 1 + 1/32, 4.06 B instead of 4.03; TE's FP8 blocks keep their columnwise copy on "
       "every architecture (Float8BlockQuantizer::create_tensor). One cast a step: the 8B rows "
       "move by under 0.03% (GB200 FP8-CS 32,947 -> 32,956 tok/s), the rest by a token or none")
    , ("the backward's requantization of the output gradient",
       "none beyond the cast counted: the output gradient is quantized once with rowwise and "
       "columnwise usage (dgrad reads the rowwise copy, wgrad the columnwise), one kernel, in "
       "fp8.quantize; under sequence parallelism the row-parallel output gradient is quantized "
       "on its shard before the gather (compute.parallel.sp_quantize_s)")
    , ("the MXFP8 GEMM against the per-tensor one",
       "in the estimate: gemm_mxfp8_vs_fp8 0.951 (TE's guide, B300, the 12 training GEMMs); no "
       "B200 or GB200 MXFP8 cuBLASLt measurement was found to set beside it")
    , ("the weights' all-gather under MXFP8 param gather",
       "charged since this note: Megatron-Core gathers MXFP8 parameters in BF16 through the "
       "gradient buffer and casts them after the gather (reuse_grad_buf_for_mxfp8_param_ag, "
       "which bf16_with_mxfp8_mixed sets: gpuplan.fp8.NarrowRecipe.gathers_16bit_under), 2 B "
       "an element, not 1 + 1/32; it moves the B200 405B 25.11 row (DP 4 across nodes, the "
       "25.11 FP8-MX overlap_param_gather False) 1.19 -> 1.16 and the others under half a "
       "point; the slice's zeroing after the copy (2 B a parameter a step) is not charged")
)


#: DeepSeek-V3's uneven pipeline split in Megatron-Bridge's recipe (transformer layers on the
#: first and last stage, the rest even), by (PP, VP): NVIDIA-NeMo/Megatron-Bridge
#: src/megatron/bridge/recipes/deepseek/deepseek_v3.py ``layout_map`` at
#: 05d003fb8985ccde5cc8c33a72f750e38c1e76ff: (4, 4) parts [E + 4t, 14 x 4t, t + mtp + loss]
#: give stages 16/16/16/13, (16, 1) stages 4 x 15 and 1. A row whose recipe records the layout
#: string it ran (``recipe.pipeline_model_parallel_layout``) takes its split from that string
#: instead (:func:`layout_split`): the 25.11 GB200 rows, whose (8, 4) is in no map. The MTP
#: module rides on the last stage where the row's recipe trains one (``mtp_num_layers`` 1 in the
#: 26.02 configs and the 25.11 B200 row, "w/ MTP"; 0 for the 25.11 GB200 rows, "w/o MTP":
#: :func:`recipe_fields`).
DEEPSEEK_SPLIT = {(4, 4): (16, 13), (16, 1): (4, 1)}


def _expand_layout(text: str) -> str:
    """Megatron-Core's pipeline layout string with its repetitions written out: ``X*n`` repeats
    the symbol or the parenthesised group before it ``n`` times (``"Et*3|(t*4|)*2L"`` ->
    ``"Ettt|tttt|tttt|L"``), as PipelineParallelLayerLayout.from_str reads it
    (megatron/core/transformer/pipeline_parallel_layer_layout.py, NVIDIA/Megatron-LM)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "(":
            depth, j = 1, i + 1
            while depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            unit, i = _expand_layout(text[i + 1:j - 1]), j
        elif c == "*":
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(out.pop() * (int(text[i + 1:j]) if j > i + 1 else 1))
            i = j
            continue
        else:
            unit, i = c, i + 1
        out.append(unit)
    return "".join(out)


def layout_split(layout: str, pp: int) -> tuple[int, int]:
    """(transformer layers on the first pipeline stage, on the last) under a Megatron-Core layout
    string over ``pp`` stages: its ``|``-separated parts go to the stages in turn (part ``i`` to
    stage ``i mod pp``, the virtual chunks interleaved), ``t`` counted. The stages between must
    hold one count (the Job's split: first, last, the rest even); a layout that does not is an
    error, as is one whose parts are not a multiple of ``pp``."""
    parts = _expand_layout(layout.replace(" ", "")).split("|")
    if len(parts) % pp:
        raise ValueError(f"layout {layout!r}: {len(parts)} parts over PP {pp}")
    stages = [sum(p.count("t") for p in parts[s::pp]) for s in range(pp)]
    if len(set(stages[1:-1])) > 1:
        raise ValueError(f"layout {layout!r}: middle stages {stages[1:-1]} are not even")
    return stages[0], stages[-1]

#: Megatron-Bridge's precision presets (src/megatron/bridge/training/mixed_precision.py at
#: NVIDIA-NeMo/Megatron-Bridge@d9f7643bb9609a6a6e0ea1439fb51d8669306434):
#: bf16_with_fp8_current_scaling_mixed (FP8-CS) keeps the first and last block in BF16
#: (num_layers_at_start/end_in_bf16 = 1) and gathers FP8 parameters; bf16_with_mxfp8_mixed
#: (FP8-MX) gathers MXFP8 parameters; bf16_with_nvfp4_mixed (NVFP4) neither. The performance
#: scripts that ran the published rows turn FP8-CS's BF16 blocks off ("Disable BF16
#: Transformer layers in the performance config": scripts/performance/utils/precision.py
#: get_precision_config sets first_last_layers_bf16 = False for fp8_cs, at df0289c180dd20ff
#: 26933455c7a0a11084f6a36f (26.02's) and 2effdfa312c53d140350410204400cafb2fb6968
#: (2025-12-03, 25.11's)), so those rows run every block in FP8.
BRIDGE_PRESETS = {"fp8-current": {"fp8_param_gather": True},
                  "mxfp8": {"fp8_param_gather": True}, "nvfp4": {}, "mixed-bf16": {}}


#: What the MoE rows' Megatron-Bridge performance recipes set that gpuplan's Job has no word
#: for (each row's ``recipe`` in fp8_runs.json: the config read at its tag and commit): named in
#: the row's notes, not modelled.
RECIPE_UNMODELLED = {
    # the router as the recipe runs it (Megatron-Core moe_utils.py @b0cc2706): TE's fused top-k
    # is one launch each way where the Job counts Megatron's unfused default (4 forward, 5
    # backward); the random logits (RandomSTE: clone, normal_) two forward launches a layer
    "moe_router_fusion": lambda v: "TE's fused router top-k (1 launch a pass; counted as "
                                   "Megatron's unfused default, 4 forward / 5 backward)",
    "moe_router_force_load_balancing": lambda v: "random router logits (RandomSTE: 2 forward "
                                                 "launches a MoE layer, not counted)",
}


#: What was checked for the MoE rows whose ranks hold 16-32 local experts at EP 8 (issue 30; the
#: B200 and H100 rows, ratios 1.29-2.51, against 1.00-1.12 at EP 32 / 64 with 2-8 local
#: experts), and what it left. Each entry is printed under the MoE recipes' table.
MOE_LOCAL_EXPERT_CHECKS = (
    "Per local expert the residual is no constant: (the measured step - the estimated one) per "
    "MoE layer pass (a layer's forward and backward of one micro-batch, the stage's layers x the "
    "micro-batches) per local expert reads 124-651 us on the B200 / GB200 rows with 16-32 local "
    "experts and 507-1,217 us on the H100 Qwen3-30B-A3B ones, so no per-expert cost, host or "
    "device, explains the rows alone.",
    "TE GroupedLinear's per-expert host work is in the estimate already: its loop of one cuBLASLt "
    "GEMM per local expert (transformer_engine/common/gemm/cublaslt_gemm.cu at NVIDIA/"
    "TransformerEngine@fe8fad59c9add7f8aa841fed2a0b4087b931856f, lines 454-777: four matrix "
    "layouts, a matmul descriptor and its attributes, a preference and "
    "cublasLtMatmulAlgoGetHeuristic created and destroyed per call) and each split quantize's "
    "launches are issued at the megatron runtime's 32 us a kernel, forward and backward, and "
    "the B200 Qwen3-30B-A3B rows are host-bound in the estimate (host / device 2.05). A measured "
    "figure of that path, TE pull request #3134 (SM100, benchmarks/linear/"
    "benchmark_grouped_linear.py, 8 experts x 128 tokens, N = K = 2048: 0.267 ms for the "
    "multi-stream cuBLASLt GEMMs alone, 33 us an expert GEMM), charged per expert GEMM launch "
    "in place of the runtime's, leaves those rows at 1.33 / 1.39 (from 1.35 / 1.41): ruled out "
    "as the miss. Nor is the per-expert Python work that launches nothing (the quantizer and "
    "weight-workspace loops of the forward, the main_grad and dummy-wgrad loops and "
    "clear_tensor_data of the backward: module/grouped_linear.py at fe8fad59c): TE issue #2897 "
    "(GB200, a grouped MLP block of 64 experts) measures its like at 350 us of wgrad "
    "allocations, 200 us of clear_tensor_data and 90 us of weight-quantizer set-up a pass, "
    "10 us an expert: 0.16 ms a pass at 16 local experts, against a 2.3-2.75 ms miss.",
    "The recipe pair is against the batch-level EP overlap at EP 8 inside one NVLink node: the "
    "25.11 B200 Qwen3-235B-A22B run (moe_a2a_overlap on, which Megatron-Bridge's "
    "set_moe_a2a_overlap_overrides pairs with delay_wgrad_compute True: scripts/performance/"
    "utils/helpers.py lines 182-186 at NVIDIA-NeMo/Megatron-Bridge@7af9601c; TE GroupedLinear "
    "then stores the experts' wgrad GEMMs for later, module/grouped_linear.py lines 472-473 at "
    "fe8fad59c) measured 3,269 tok/s/GPU, 14% below the 26.02 run without the overlap (3,805), "
    "where the estimate reads the 25.11 run 15% faster (5,653 against 4,909; the pair also "
    "differs in VP 2 against none and the 25.11 FP8-MX overlap_param_gather False, both in "
    "the Job); the H100 "
    "Qwen3-30B-A3B pair reads the same way (25.11 alltoall with the overlap 2.32, 26.02 "
    "DeepEP with it 1.86). The same Jobs without the overlap still read 1.52 and 2.09 (the "
    "overlap's whole modelled gain is under half the miss). The hidden all-to-all's kernels "
    "hold SMs the paired micro-batch's compute then lacks, and are charged so "
    "(:func:`~gpuplan.compute.parallel.ep_overlap_sm_share`: DeepEP's moe_deepep_num_sms 20, "
    "HybridEP's 32, NCCL's all-to-all the DP collectives' 24 CTAs; from 2.51 / 1.95 / 1.78, "
    "and the H100 Qwen3-235B-A22B rows, whose EP 32 all-to-alls over 4 nodes outlast their "
    "compute, from 1.00 / 0.99 to 0.89): a few points of the miss, not the miss.",
    "The overlap schedule itself (Megatron-Core's TransformerLayerSchedulePlan.run, "
    "megatron/core/models/common/model_chunk_schedule_plan.py at NVIDIA/Megatron-LM@0d8e0714) "
    "pairs by sub-module, not by layer: combine backward beside attention and router forward, "
    "dispatch forward then backward beside the experts' backward, their wgrad and forward, "
    "combine forward beside the attention backward. Where each all-to-all (0.36-0.69 ms a "
    "layer on the 30B H100 and B200 235B rows) is shorter than even the attention kernels of "
    "its window (0.38-0.87 ms forward, 1.1-2.6 ms backward) no phase exposes more than the "
    "whole layer does, so the per-phase pairing leaves those rows as timed: ruled out for "
    "them; on the H100 235B rows (3.4 ms each) it could expose at most 56 ms a micro-batch "
    "against the 44 ms charged, not taken without the attention block's own time. The "
    "delayed wgrad moves the experts' and attention's wgrad GEMMs within the same phase "
    "(backward_dw right after the backward), no FLOPs added; the nodes' CUDA events (a record "
    "and a wait a sub-module) are host calls with no published per-call cost: not charged. "
    "Nothing is fitted to the rows.",
    "The other lead: per MoE layer pass the miss hardly moves with the micro-batch or the "
    "model's width at 16 local experts on Blackwell (B200 Qwen3-30B-A3B, MBS 1: 2.30 / 2.67 ms; "
    "GB200 Qwen3-30B-A3B, MBS 4: 1.98 / 3.26 ms; B200 Qwen3-235B-A22B 26.02: 2.75 ms), so it "
    "goes by launches, not tokens. Read as a floor of 33 us on each expert GEMM launch on the "
    "device (TE pull request #3134's figure above) it would add 2.69 ms a pass to the B200 "
    "Qwen3-30B-A3B rows, 1.53 to the GB200 ones, 1.54 to the B200 Qwen3-235B-A22B ones, 2.37 "
    "to the B200 DeepSeek-V3 ones (misses 11.5 / 20.8 ms) and nothing to the EP 32 / 64 rows, "
    "whose expert GEMMs run 39-297 us; not taken, because that benchmark does not say whether "
    "its 33 us is the host's pace or the device's, and the host side is charged already.",
    "Nor the experts' GEMM rate at these shapes. gpuplan times each expert GEMM with "
    ":func:`~gpuplan.compute.efficiency.grouped_gemm_s` (compute/time.py): B200 FP8 peak 4,500 "
    "TFLOP/s x matmul_b200_fp8 0.763 x gemm_training_shapes_blackwell_fp8 0.880 = 3,020 "
    "(FP8-CS), x gemm_mxfp8_vs_fp8 0.951 = 2,872 (MXFP8), then each expert's own tiles and "
    "waves (four streams) and K-loop share (c = 4.17 blocks): forward fc1 / fc2 and backward "
    "(dgrad + wgrad) fc1 / fc2 run 1,971 / 1,675 and 2,037 / 1,971 TFLOP/s on the B200 "
    "Qwen3-30B-A3B MXFP8 rows (16 local experts, 2,048 rows each), 2,398 / 2,107 and 2,333 / "
    "2,174 on B200 Qwen3-235B-A22B (16, 2,048), 2,642 / 2,122 and 2,087 / 2,042 on B200 "
    "DeepSeek-V3 (32, 1,024), 2,645 / 2,218 and 2,670 / 2,662 on GB200 Qwen3-235B-A22B at EP "
    "32 (4, 8,192). Published B200 figures at or near these shapes: vLLM's SM100 CUTLASS FP8 "
    "GEMM (vllm-project/vllm pull request #19566, benchmarks/kernels/bench_fp8_gemm.py, "
    "CUDA-graphed, one of its N = K = 4,096 tables; the series' GPU a B200, pull request "
    "#18778) runs 1,832 / 1,906 TFLOP/s (per-tensor / per-channel, no quantize) at "
    "M = 512 and 2,077 / 2,354 at M = 1,024, where the same function gives one such expert "
    "GEMM 2,311 (FP8-CS): 0.79-1.02 of the model; torchao's MXFP8 torch._scaled_grouped_mm on "
    "a B200 at DeepSeek-V3's expert shape (pytorch/ao torchao/prototype/moe_training/README.md "
    "at 0b1bb117, 'MXFP8 Kernel Breakdown by Pass': 131,072 rows over 8 groups, K 7,168, N "
    "2,048) 1,838.1 us forward and dgrad, 2,412.4 us wgrad: 2,094 / 2,094 / 1,595 TFLOP/s "
    "against the model's 2,666 / 2,275 / 2,750 there (0.79 / 0.92 / 0.58; another library's "
    "kernel, whose 2D-2D wgrad the README names as the one to improve, at 16,384 rows a group; "
    "its G 1-8 table at 128,000 rows reads the forward + backward flat, 10,996 -> 10,397 us). "
    "FBGEMM pull request #4821 (MXFP8 grouped GEMM tuned on a B200 capped at 750 W, 1,963 "
    "TFLOP/s at best) gives no per-shape figure; no DeepGEMM SM100 table (its README's are "
    "H800 only) and no cuBLASLt MXFP8 figure at M <= 4,096 an expert was found. The path the "
    "rows run, TE's multi-stream cuBLASLt grouped GEMM, is measured on Hopper at Qwen3-30B-A3B's "
    "expert shape: NVIDIA/TransformerEngine pull request #2045 (TE 2.7, CUDA 12.9, H100, "
    "tests/pytorch/test_group_gemm.py at 4ac7be85: FP16 general_grouped_gemm, 1,000 eager "
    "iterations wall-clocked) 627.9 TFLOP/s at 8 experts x 4,096 rows and 553.9 at 16 x 2,048 "
    "(N 768, K 2,048), where grouped_gemm_s gives 679 at both: 0.92 / 0.82 of the model, and "
    "the device's own rate no lower (the wall clock holds the host's issue too). Its drop from "
    "8 to 16 experts, 21.9 us for 8 more GEMMs (2.7 us a GEMM), charged on the device for "
    "every Blackwell expert GEMM moves the EP 8 rows 0.01-0.04 (the CUDA-graphed 25.09 B200 "
    "Qwen3-30B-A3B one 1.35 -> 1.25): not taken, the benchmark not telling host from device. "
    "The same run bounds TE's C++ issue of one cuBLASLt GEMM on that host at 186 / 16 = 11.6 "
    "us, where the estimate charges each expert GEMM launch the megatron runtime's 32 us "
    "(eager_host_fwd_s): a lead for the host side, not taken here -- those launches at 11.6 us "
    "would read the host-bound 26.02 / 25.11 B200 Qwen3-30B-A3B rows 1.94 / 2.02 (B200 "
    "Qwen3-235B-A22B 26.02 1.29 -> 1.37), so their 1.35 / 1.41 rest on the host charge and "
    "the device side under it is further off. A floor on each kernel: torchao's "
    "cuBLASLt series on a B200 (pytorch/ao pull request #2427, merged 2025-06-23, benchmarks/"
    "float8/bench_matmul.py --recipe nvfp4, square M = K = N, BF16 beside NVFP4) runs BF16 at "
    "0.90-1.03 of grouped_gemm_s's one-GEMM rate from 2,048 to 8,192 but 0.68 at 1,536 and "
    "0.38 at 1,024 (2.5-3.2 us beyond the model), and NVFP4 at 0.92-1.07 from 4,096 up but "
    "0.48 / 0.30 / 0.14 at 2,048 / 1,536 / 1,024 (4.7-5.3 us beyond): a fixed time a kernel "
    "that the tile / wave / K-share model lacks and that weighs on GEMMs of a few us, as the "
    "experts' are (4-7 us of work each on the B200 Qwen3-30B-A3B rows, 12-23 us on the "
    "Qwen3-235B-A22B and DeepSeek-V3 ones). Charged at 5 us, NVFP4's, on every "
    "Blackwell expert GEMM it moves the EP 8 rows 0.03-0.07 (the graphed 25.09 B200 "
    "Qwen3-30B-A3B one 1.35 -> 1.19) and the EP 32 / 64 ones 0.00-0.02; once a round of the "
    "four streams' concurrent GEMMs (their latencies overlapping) 0.01-0.02 (the graphed one "
    "1.35 -> 1.30). Not taken: which of the two holds is not measured, nor MXFP8's own floor; "
    "either way a few hundredths of a 0.2-0.7 miss. Sized on the "
    "rows: all expert GEMMs at torchao's three ratios (a bound: its rows are 8-16x more a "
    "group) move B200 DeepSeek-V3 1.32 / 1.53 / 1.51 / 1.59 -> 1.27 / 1.45 / 1.45 / 1.53, B200 "
    "Qwen3-235B-A22B 1.29 / 1.71 / 1.24 -> 1.23 / 1.62 / 1.23 (the 25.09 FP8-CS one 1.17 -> "
    "1.18), GB200 Qwen3-30B-A3B 1.18-1.29 "
    "-> 1.14-1.25, B200 Qwen3-30B-A3B 1.35 / 1.41 not at all (host-bound in the estimate; the "
    "25.09 FP8-CS one 1.35 -> 1.29), and "
    "take the GB200 EP 32 / 64 rows from 1.04-1.06 to 0.98-1.01. To reach 1.00 by rate alone "
    "the EP 8 rows need their expert GEMMs at 0.2-0.45 of the modelled rate (B200 Qwen3-30B-A3B "
    "26.02 / 25.11 below 0.1), where 0.8 already takes the EP 32 / 64 rows to 0.99-1.02: a cut "
    "2-4x deeper at "
    "1,024-2,048 rows an expert than at 8,192, against published rates at 512-1,024 rows within "
    "0.79-1.02 of the model. Ruled out; nothing fitted, the timing unchanged "
    "(tests/unit/test_grouped_gemm_blackwell.py pins these comparisons, tests/integration/"
    "test_moe_gemm_rate_sizing.py the cut to 0.8).",
)


#: What was checked of the pipeline for the H100 Qwen3-30B-A3B rows (issue 30's worst: 25.11 PP 2
#: x VP 24, one of the 48 layers a virtual stage, MBS 2; 26.02 PP 2 x VP 12, two, MBS 1), and
#: what it left. Printed under :data:`MOE_LOCAL_EXPERT_CHECKS`.
PIPELINE_CHECKS = (
    "Where the sends go: Megatron-Core's rank order tp-cp-ep-dp-pp (parallel_state.py "
    "initialize_model_parallel at NVIDIA/Megatron-LM@0d8e0714; Megatron-Bridge passes it, "
    "src/megatron/bridge/training/initialize.py line 431 at NVIDIA-NeMo/Megatron-Bridge@7af9601c) "
    "puts the two stages on the two DGX nodes, so every hop crosses InfiniBand: b x s x hidden "
    "x 2 B = 33.6 MB (MBS 2) and 16.8 MB (MBS 1) a hop, 0.86 ms and 0.44 ms in gpuplan's "
    "send-recv, the NIC's bandwidth, not its latency. Megatron-Bridge sets overlap_p2p_comm True "
    "and batch_p2p_comm False for PP > 1 with VP > 1 (src/megatron/bridge/training/"
    "comm_overlap.py lines 450-460 at v0.2.0 = 7af9601c and v0.3.0 = 21b02e0c), and no "
    "performance script overrides either (no p2p key under scripts/performance at either tag).",
    "Charged since this note: under moe_a2a_overlap the interleaved schedule's steady state is "
    "combined_1f1b_schedule_for_interleaved_pipelining (schedules.py "
    "forward_backward_helper_wrapper, line 1302 at Megatron-LM@0d8e0714, line 1322 at "
    "@b0cc2706), whose merged iteration waits for both receives first and posts both sends "
    "last (model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan.run), only the first "
    "layer's delayed attention wgrad after them; round the ring of stages each iteration then "
    "waits one hop less that tail (:func:`~gpuplan.compute.parallel.interleaved_p2p_exposed_s`, "
    "the form checked against an event-by-event simulation of the schedule in tests/unit/"
    "test_p2p_overlap.py): the exposed p2p goes 0.08 -> 0.54 s a step (25.11) and 0.02 -> "
    "0.51 s (26.02), the rows 2.42 -> 2.32 and 1.90 -> 1.86 (B200 Qwen3-235B 25.11, PP 8 x VP "
    "2, 1.73 -> 1.71; the H100 Qwen3-235B rows 0.89 unmoved at two decimals, 0.5% the wrong way).",
    "The rest of the pipeline cannot hold the miss: every send exposed in full would be 2 x 24 x 32 "
    "hops x 0.86 ms = 1.32 s (25.11) and 2 x 12 x 128 x 0.44 ms = 1.34 s (26.02) against "
    "misses of 14.1 s and 23.8 s a step (measured 24.8 s and 51.3 s, estimated 10.7 s and "
    "27.5 s); the interleaved bubble, (PP - 1) / VP of a micro-batch, is 13 ms and 18 ms. The "
    "miss is 9.2 ms (25.11) and 7.7 ms (26.02) a chunk pass, each way.",
    "Nor the schedule's per-virtual-stage host work, by a measured control: the 25.09 run of the "
    "same pipeline (Megatron-Bridge docs/performance-summary.md at 7af9601c, 25.09 container, "
    "DGX-H100: Qwen3_30B_a3B (tokendrop), 16 GPUs, GBS 512, MBS 2, TP 1, PP 2, VP 24, EP 8, "
    "GA 32: 10,494 tok/s/GPU; its script at ea299063, scripts/performance/configs/qwen3/"
    "qwen3_30b_a3b_llm_pretrain.yaml perf_matrix h100: fp8_cs mbs 2, bf16's 1; run_script.py "
    "apply_moe_token_drop: capacity factor 1.0 padded, the alltoall dispatcher; no "
    "moe_a2a_overlap: the script passes CommOverlapConfig(tp_comm_overlap=True) alone and "
    "src/megatron/bridge/training/comm_overlap.py line 438 there leaves the overlap off) ran "
    "the same 48 virtual stages, 1,536 chunk passes a step, at twice the 25.11 throughput, and gpuplan times that Job (the 25.11 one "
    "with moe_capacity_factor 1.0, no EP overlap) at 11,789 tok/s/GPU, 1.12; the NeMo 24.07 "
    "Llama 2 70B (PP 4 x VP 20) and 13B (PP 4 x VP 10) rows above, one layer a virtual stage "
    "too, read 1.11 and 1.17. So the miss lies in what 25.11 changed beside the pipeline, "
    "dropless routing (its host sync per MoE layer, :data:`~gpuplan.compute.parallel."
    "MOE_HOST_SYNCS`) with the batch-level EP overlap: measured x 0.50 (10,494 -> 5,275), "
    "estimated x 1.04 (11,789 -> 12,239; the sync alone 11,789 -> 11,044, the overlap then "
    "11,044 -> 12,239). Not modelled further here: no source measures either mechanism on "
    "H100 (each sized in `DROPLESS_OVERLAP_CHECKS`). The 25.11 config at its tag (QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG at 7af9601c) "
    "sets VP 12 and MBS 1 where the table says VP 24 and MBS 2 (fp8_runs.json "
    "differs_from_table; the table's taken); the config's layout would read 10,307 (1.95), "
    "beside the 26.02 row's 1.86 under the same layout.",
)


#: What was checked of what 25.11 changed beside the pipeline for the H100 Qwen3-30B-A3B rows (issue
#: 30: the 25.09 token-drop control of :data:`PIPELINE_CHECKS` measured x 0.50 from 25.09 to
#: 25.11, gpuplan x 1.04), each candidate sized on gpuplan's own breakdown of the rows' Jobs.
#: Printed under :data:`PIPELINE_CHECKS`.
DROPLESS_OVERLAP_CHECKS = (
    "The MoE flags each run set. 25.09 (Megatron-Bridge@ea299063: scripts/performance/configs/"
    "qwen3/qwen3_30b_a3b_llm_pretrain.yaml perf_matrix h100, run_script.py lines 101-107; "
    "src/megatron/bridge/models/qwen/qwen_provider.py lines 369-375): apply_moe_token_drop "
    "(moe_expert_capacity_factor 1.0, moe_pad_expert_input_to_capacity True), the alltoall "
    "dispatcher, moe_permute_fusion and moe_grouped_gemm True, moe_router_fusion True, "
    "cuda_graphs false, no recompute, no moe_router_force_load_balancing (run_script.py sets it "
    "for DeepSeek-V3 with DeepEP only), no moe_a2a_overlap nor delay_wgrad_compute; its "
    "Megatron-Core is not pinned in the repository at that commit (no 3rdparty submodule; "
    "uv.lock resolves megatron-core 0.15.0rc6). 25.11 (v0.2.0 = 7af9601c, Megatron-LM@0d8e0714: "
    "QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG, scripts/performance/configs/qwen3/"
    "workload_base_configs.py lines 233-239): the same provider flags, dropless (no capacity "
    "factor), moe_router_force_load_balancing True ('required for token dropless', "
    "qwen3_llm_pretrain.py line 47), moe_a2a_overlap True with delay_wgrad_compute True "
    "(utils/helpers.py lines 182-186), no CUDA graphs (its BF16 twin graphs moe_router and "
    "moe_preprocess), no recompute. 26.02 (v0.3.0 = 21b02e0c, @b0cc2706): the same with the "
    "flex dispatcher over DeepEP. No moe_router_padding_for_fp8 / _for_quantization under src/ "
    "or scripts/ at any of the three commits.",
    "The D2H sync inside the overlap: its point is 'before_ep_alltoall' (token_dispatcher.py "
    "line 572, the wait lines 905-907 at Megatron-LM@0d8e0714), which the merged layer "
    "reaches in the forward's dispatch node, after the paired backward's expert dgrad is queued "
    "(model_chunk_schedule_plan.py lines 201-219); router padding, which would move it to "
    "'before_permutation_1' inside post_attn (lines 523-527), is off. An event simulation of "
    "the merged layer on gpuplan's own host and kernel times (benchmarks/merged_layer_sync.py: "
    "two streams, one host, the nodes' event order) gives the sync 0.0% in the table's layout "
    "(host 6.9 ms, compute stream 10.0 ms a merged layer), the config's (6.9 / 5.2 ms) and "
    "the 26.02 row's, and at most 5.2% at any host pace 0.5-4x gpuplan's: the queued expert "
    "dgrad covers the host's wait where the device leads, and where the host leads the device "
    "has drained already. Ruled out as the x 0.50.",
    "Routing imbalance: moe_router_force_load_balancing replaces the logits with normal draws "
    "seeded per rank (moe_utils.py RandomSTE, lines 901-925 at @0d8e0714), so each token's "
    "top-8 of 128 is a uniform 8-subset and an expert's rows are Binomial(8 ranks x 4096 x "
    "MBS, 1/16): at MBS 1 mean 2,048, sd 44; the busiest of a rank's 16 experts about +3.8%, "
    "a rank's 16-expert total 0.5% sd, at most ~1% of the step were the expert GEMMs to run "
    "at the busiest expert's rows. 25.09's drop-and-pad gives each expert its capacity, 512 "
    "rows from each rank at MBS 2, the dropless mean. Ruled out.",
    "FP8 alignment: TEGroupedMLP's Fp8Padding of the dropless splits to 16 rows is charged "
    "already (fp8.expert_padding: 36.5 ms of kernels a micro-batch at MBS 2 over the 48 layers, "
    "0.76 ms a layer pass against a 16 ms miss); 25.09's 512-row capacities need none. CUDA "
    "graphs: neither H100 FP8-CS run has any, so dropless disabled none. The dropless "
    "preprocess's all-gather of the token counts over the TP x EP group (token_dispatcher.py "
    "lines 545-552; drop-and-pad returns at line 516 before it): 8 KB over 8 NVLink ranks, "
    "10.8 us in gpuplan's collective_time, 8 ms a step at MBS 2 (0.1%): not charged. The "
    "overlap's per-node stream switch, event wait and record and NVTX range "
    "(pipeline_parallel/utils.py ScheduleNode._forward / _backward): host calls with no "
    "published cost, 12 nodes a merged layer, under 1 ms a merged layer even at 50 us each: "
    "not charged. None of these is the x 0.50.",
    "What is left, read two ways (a layer pass: a stage's layers x its micro-batches, forward "
    "and backward; measured step time over them). (a) The 25.11 H100 row's layout columns "
    "(GBS 512, MBS 2, PP 2, VP 24, EP 8, GA 32) are the 25.09 row's column for column, while "
    "its config at the tag runs MBS 1 (WorkloadBaseConfig's default, scripts/performance/"
    "utils/utils.py line 45) x VP 12, GA 64; the same tag's GB200 and B200 Qwen3-30B-A3B "
    "configs (MBS 4, MBS 1, PP 1) agree with their rows. Read with the config, the three H100 "
    "runs take 12.49 s / (24 x 32) = 16.3 ms (25.09), 24.85 s / (24 x 64) = 16.2 ms (25.11) "
    "and 51.27 s / (24 x 128) = 16.7 ms (26.02, DeepEP, five host waits a layer) a layer "
    "pass: what 25.11 changed kept the pass's time and halved its tokens, where gpuplan's goes "
    "14.5 -> 8.3 ms (host-bound at MBS 1: host 6.9 ms, compute stream 5.2 a merged layer). "
    "(b) The table is right (32.4 ms a pass at MBS 2): then dropless doubled the pass at the "
    "same layout, and per token the 25.11 pass (16.2 ms a sequence) matches the 26.02 one "
    "(16.7). The B200 pair reads x 0.51 too -- 25.09 Qwen3_30B_a3B (tokendrop) on DGX-B200 "
    "(docs/performance-summary.md at ea299063: 8 GPUs, MBS 1, PP 1, EP 8, GA 64: 18,066 "
    "tok/s/GPU, 4.72 ms a pass) against the 25.11 row (9,299, 9.18 ms; its config agrees) -- "
    "but with a cause of its own that H100 lacks: that matrix sets cuda_graphs true for b200 "
    "(qwen3_30b_a3b_llm_pretrain.yaml at ea299063; h100's false), which "
    "set_cuda_graph_overrides turns into model.enable_cuda_graph True (scripts/performance/"
    "utils/helpers.py lines 114-120 there), Megatron-Core's graphs of whole layers "
    "(cuda_graph_impl 'local', layer-wise: transformer_config.py lines 693-698 and 1496-1498 "
    "at @0d8e0714), which "
    "token-drop's static shapes allow and dropless cannot hold (the 25.11 row graphs "
    "moe_router and moe_preprocess only). gpuplan times that token-drop Job without graphs "
    "(the 25.11 row's with moe_capacity_factor 1.0, no cuda_graph_scope) at 12,558, "
    "host-bound at 6.80 ms a pass, above the measured 4.72: what the graphs' host savings "
    "would have to cover. So the B200 pair is no evidence for (b) on H100, where neither run "
    "graphed anything. Since then the whole-layer graphs are a Job option (cuda_graph_scope "
    "full, compute/graphs.py) and the 25.09 rows that ran them are predicted with it: the "
    "graphs take the B200 token-drop Job from host-bound under its measured figure to "
    "device-bound over it, and leave the GB200 Qwen3 and B200 DeepSeek-V3 rows, device-bound "
    "without them, where they were (the table above). Either way the EP overlap is not the cause and the candidates above "
    "are too small; not modelled: no source times the host or the kernels of these H100 "
    "runs' layer passes. The table's layout stays taken (fp8_runs.json "
    "differs_from_table).",
)


#: What was checked of the Qwen3-30B-A3B rows (128 experts, 8 active, hidden 2,048, expert FFN
#: 768; EP 8, 16 local experts a rank) against their sources and of what their estimate might
#: lack (issue 30), beside :data:`MOE_LOCAL_EXPERT_CHECKS`, :data:`PIPELINE_CHECKS` and
#: :data:`DROPLESS_OVERLAP_CHECKS`. Printed under :data:`LATER_QWEN3_30B`'s table.
QWEN3_30B_CHECKS = (
    "The ten rows against their tables (Megatron-Bridge docs/performance-summary.md: 25.09 at "
    "fa0315ae and 7af9601c, 25.11 at 5776a6d9 and df0289c1, 26.02 at c0b9a000 and df0289c1, "
    "each re-read at cfeddcd9 and in the archive at 4ab94dfa): every column (GPUs, precision, "
    "GBS, MBS, sequence 4,096, FSDP 0, TP / PP / CP / VP / EP, GA, tokens/s/GPU, model "
    "TFLOP/s/GPU) as recorded; no row carries a footnote mark or a note of its own (no 'CUDA "
    "graphs', 'HybridEP' or recompute marks in these tables: what each ran is its config's, "
    "the row's recipe); the 25.09 footnotes (force-balanced, the parentheses' quantization) "
    "are in the rows' notes already. The two throughput columns agree on every row: model "
    "TFLOP/s over tokens/s is 22.9-23.1 GFLOP a token (the 26.02 H100 row's 118 / 5,113 = "
    "23.1 once 5,113 is read for df0289c1's 2,557), so no figure is a slip of one column. "
    "No row changed.",
    "The 25.09 B200 FP8-CS row (18,066 tok/s/GPU, 1.94x / 1.86x the 25.11 / 26.02 MXFP8 rows "
    "at the same columns) is the table's as printed; what set it apart is its run, not its record: "
    "token-drop with padded capacity (its name's '(tokendrop)') and the 25.09 matrix's "
    "cuda_graphs true for b200, whole-layer graphs that dropless routing cannot hold "
    "(`DROPLESS_OVERLAP_CHECKS`; the Job runs both).",
    "The next table re-ran the H100 row's columns at x 1.77 (5,113 -> 9,058, the table above) "
    "and the GB200 row's config at x 1.01 (26,084 -> 26,373); the B200 config moved to MBS 4 "
    "(and HybridEP, attention graphed) at x 2.75 (9,691 -> 26,695). The H100 row reads two ways (the "
    "table's columns or the config's EP 16: its note below): the estimate meets the re-run "
    "within 5% on the columns (1.05) and on the config with DeepEP's exchange (0.96); with the "
    "HybridEP exchange the config ran, at HybridEP's README H100 rates (measured at hidden "
    "7,168, not Qwen3's 2,048), it reads 1.21, over by a fifth. Either way the 26.02 H100 "
    "miss, like the 25.11 one's x 0.50 from 25.09 "
    "(`PIPELINE_CHECKS`), is no per-token cost of this model the estimate lacks, but what that "
    "run did -- at the same layout the next container's (first reading), or the PP 2 x VP 12 "
    "DeepEP layout with the EP overlap that the next config dropped (second) -- and no "
    "constant is moved for it. The B200 pair is a lead on the host: a layer pass (48 layers x the micro-batches, "
    "forward and backward) takes 8.81 ms at MBS 1 (26.02) and 12.79 ms at MBS 4 (26.02.01), "
    "a quarter of the tokens in 69% of the time, where the estimate reads 6.51 and 11.68 ms "
    "(host-bound at MBS 1): its miss shrinks from 2.30 to 1.10 ms a pass as the micro-batches "
    "go from 64 to 16, so it goes by micro-batches, not tokens. Not modelled: the two runs "
    "differ in three settings (MBS, dispatcher, graphs) and no source times their host.",
    "The router's aux loss and forced balance (router.py TopKRouter.routing / forward and "
    "moe_utils.py at NVIDIA/Megatron-LM@b0cc2706, the 26.02 pin; the Qwen3 provider's "
    "moe_router_load_balancing_type 'aux_loss', moe_aux_loss_coeff 1e-3: Megatron-Bridge "
    "src/megatron/bridge/models/qwen/qwen_provider.py at v0.3.0 lines 391-392): RandomSTE's "
    "clone and normal_, the fused TE score kernel for the aux loss, routing_map.sum, the fused "
    "aux loss, and the tracker's division and indexed add -- 7 launches a forward; "
    "MoEAuxLossAutoScaler's ones_like x scale, the two fused kernels' backward and autograd's "
    "sum of the logits' two gradients -- 5 a backward; get_tokens_per_expert_and_token_count's all-reduce is over the TP x CP group, "
    "of one rank here, which mappings.py _reduce skips. None is in the estimate's ops (the "
    "recipe's moe_router graph covers them on every Blackwell Qwen3-30B-A3B row since "
    "25.11); on the ungraphed H100 rows 12 launches at the megatron runtime's 32 us are "
    "0.38 ms a layer pass against a 7.7 ms (26.02) and 18.4 ms (25.11, the table's MBS 2) "
    "miss: 5% and 2% of it, named, not charged (`RECIPE_UNMODELLED` names the random logits).",
)


#: Later Megatron-Bridge tables that ran Qwen3-30B-A3B again (issue 30: the EP 8 rows above,
#: 1.18-2.32): each a recorded row's Job with what the later run changed, timed by the same
#: estimate and printed beside the later table's figure; not counted in the bars (the H100 and
#: GB200 Jobs are the recorded rows' own, whose predictions were read before these figures
#: were). Source: docs/performance-summary.md at NVIDIA-NeMo/Megatron-Bridge@
#: cfeddcd9445817a85ff58549d407fa700b1f8ace (2026-03-21, '2602_perf_table_reorder and patch
#: container data', #2872), section '26.02.01 NeMo Container', table 'Model: Qwen3_30B_a3B';
#: the same rows in the archive at 4ab94dfad36641cabdeb96452b21bf676aac4772. The configs: the
#: r0.3.0 branch's v0.3.1 tag (9c9dd848966322fc3ed7706747ec13219ef49dda, 2026-03-20),
#: scripts/performance/configs/qwen/qwen3_workload_base_configs.py and qwen3_llm_pretrain.py.
#: Each: (the recorded row the Job starts from, job changes, recipe changes, the later row as
#: printed, its tok/s/GPU, what the config at v0.3.1 says).
LATER_QWEN3_30B = (
    ("megatron-bridge-26.02-dgx-h100-qwen330ba3b-fp8-current-x16", {}, {},
     "DGX-H100 | 16 | FP8 | 1024 | 1 | 4096 | 0 | 1 | 2 | 1 | 12 | 8 | 9058 | 208", 9058,
     "the row's columns are the 26.02 row's, so its Job is that row's (DeepEP, the EP overlap); "
     "the config at v0.3.1 reads otherwise -- QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 "
     "expert_model_parallel_size 16, no PP / VP, moe_a2a_overlap False, the flex dispatcher "
     "over hybridep (f29a269f, 'Update Qwen3 30B H100 Base Configs with HybridEP', #2477), "
     "the layout the 26.04 / 26.04.01 / 26.06 tables print (EP 16, PP 1: 8,901 / 8,960 / "
     "8,826) -- timed as run there: over two H100 nodes HybridEP's measured internode "
     "exchange (RDMA between peer GPUs, NVLink inside, as DeepEP's: 1.21 of 8,901; 0.52 under "
     "NCCL's all-to-all before it, DeepEP's internode exchange in its place reads 0.96)"),
    ("megatron-bridge-26.02-dgx-gb200-qwen330ba3b-mxfp8-x8", {}, {},
     "DGX-GB200 | 8 | MXFP8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 26373 | 607", 26373,
     "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 is v0.3.0's (MBS 4, flex over hybridep, "
     "graphs of moe_router and moe_preprocess): the 26.02 row's Job"),
    ("megatron-bridge-26.02-dgx-b200-qwen330ba3b-mxfp8-x8", {"micro_batch": 4, "grad_accum": 16},
     {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
      "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"]},
     "DGX-B200 | 8 | MXFP8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 26695 | 614", 26695,
     "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 = B200_BF16_V1: micro_batch_size 4, the "
     "flex dispatcher (qwen3_30b_a3b_pretrain_config_b200 sets moe_token_dispatcher_type "
     "'flex') over hybridep, TE graphs of attn, moe_router and moe_preprocess; GA 512 / (4 x "
     "8) = 16. One DGX-B200's 8 GPUs are no NVL72 rack: NCCL's all-to-all times the exchange"),
)


def later_run(base: dict, job: dict, recipe: dict, measured: float) -> dict:
    """``base`` (a recorded run) as a later table ran it: its job and recipe with ``job`` and
    ``recipe`` laid over them, the later figure as measured."""
    run = json.loads(json.dumps(base))
    run["id"] = base["id"].replace("26.02", "26.02.01", 1)
    run["job"].update(job)
    run["recipe"].update(recipe, tag="v0.3.1", commit="9c9dd848966322fc3ed7706747ec13219ef49dda")
    run["measured"] = {"tokens_per_s_per_gpu": measured}
    return run


def later_rows(rows: list[Row]) -> list[tuple[Row, Row, str, str]]:
    """(the recorded row, its later run's Row, the later row as printed, the config's word) for
    each of :data:`LATER_QWEN3_30B`."""
    by_id = {r.run["id"]: r for r in rows}
    out = []
    for base_id, job, recipe, printed, measured, config in LATER_QWEN3_30B:
        base = by_id[base_id]
        out.append((base, predict(later_run(base.run, job, recipe, measured)), printed, config))
    return out


def _later_lines(rows: list[Row]) -> list[str]:
    out = ["", "Qwen3-30B-A3B in the next table (`LATER_QWEN3_30B`: Megatron-Bridge "
           "docs/performance-summary.md at cfeddcd9, '26.02.01 NeMo Container', the configs at "
           "v0.3.1 = 9c9dd848; not counted in the bars, the H100 and GB200 Jobs being the 26.02 "
           "rows' own):", "",
           "| 26.02 row | its ratio | 26.02.01 row as printed | measured | predicted | ratio |",
           "|---|---|---|---|---|---|"]
    notes = []
    for base, later, printed, config in later_rows(rows):
        out.append(f"| `{base.run['id']}` | {base.predicted / base.measured:.2f} | "
                   f"{printed.replace(' | ', ', ')} | "
                   f"{later.measured:,.0f} | {later.predicted:,.0f} | "
                   f"{later.predicted / later.measured:.2f} |")
        notes.append(f"- `{later.run['id']}`: {config}.")
    return out + [""] + notes + ["", "Checked of the Qwen3-30B-A3B rows and their sources "
                                 "(`QWEN3_30B_CHECKS`):", ""] + [f"- {c}" for c in
                                                                  QWEN3_30B_CHECKS]


#: What was checked for the B200 rows of the large MoE models (issue 30: DeepSeek-V3 at PP 16 x
#: EP 8, 32 local experts; Qwen3-235B-A22B at PP 8 x EP 8, 16; ratios 1.17-1.71, against
#: 1.04-1.12 for the same models on GB200 at EP 32-64), sized on gpuplan's own breakdown of the
#: rows' Jobs. Printed under :data:`DROPLESS_OVERLAP_CHECKS`; nothing here is taken into the Job.
B200_EP8_CHECKS = (
    "The rows against their sources: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at "
    "df0289c1 (the 26.02 and 25.11 DGX-B200 tables: DeepSeekV3 256 GPUs FP8-MX GBS 4096 MBS 1 "
    "PP 16 VP n/a EP 8 GA 256, 2,689; DeepSeekV3 (w/ MTP) GBS 2048 PP 16 VP 1 EP 8 GA 128, "
    "2,139; Qwen3_235B_a22B 256 GPUs GBS 8192 PP 8 VP n/a EP 8 GA 256, 3,805; 64 GPUs GBS 1024 "
    "PP 8 VP 2 EP 8 GA 128, 3,269) and at 7af9601c (25.09: DeepSeekV3 (tokendrop) PP 16 EP 8 GA "
    "128, 2,265 (2,159); Qwen3_235B_a22B (tokendrop) 64 GPUs PP 8 VP 2 EP 8, 4,104 (4,275)), "
    "sequence 4096, TP 1, CP 1 throughout; the configs at the tags (DEEPSEEK_V3_B200_BASE_CONFIG "
    "in scripts/performance/configs/deepseek/workload_base_configs.py at 7af9601c, "
    "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1 / _V2 in deepseek_workload_base_configs.py at 21b02e0c, "
    "recompute_modules mla_up_proj, the V1 hybridep, V2 GBS 4096; "
    "QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_CS_V1 / _V2 in qwen3_workload_base_configs.py at "
    "21b02e0c, no recompute, no flex backend, 256 GPUs and GBS 8192 in V2) agree with the "
    "recorded recipes; no row changed. The DeepSeek-V3 common configs set grad_reduce_in_fp32 "
    "False (deepseek_llm_pretrain.py set_deepseek_v3_common_configs at 7af9601c): the Job's "
    "2-byte gradients (15.85 GB a 25.11 rank).",
    "Where the step goes (estimate against measured, s): DeepSeek-V3 25.11 10.01 against 15.32 "
    "-- the busiest stage's compute 8.06, bubble 1.00, EP exchanges 0.48, pipeline sends 0.38, "
    "data-parallel 0.08; 26.02 18.53 against 24.37 (15.53 / 0.98 / 1.17 / 0.76 / 0.08); "
    "Qwen3-235B-A22B 26.02 26.71 against 34.45 (21.52 / 0.70 / 4.04 / 0.44 / 0.02). The miss "
    "over the micro-batches and a middle stage's MoE layers is 10.4 ms a DeepSeek-V3 layer pass "
    "at 25.11, 11.0 / 9.6 at 25.09 (MXFP8 / FP8-CS), 5.7 at 26.02, against the estimate's own "
    "16.8 (14.55 of kernels, 2.29 of exchanges, 25.11); Qwen3-235B-A22B 5.4 (25.11), 2.0 / 1.5 "
    "(25.09), 2.5 (26.02) ms.",
    "The host's charge per TE GEMM: every kernel Megatron-Core issues, each expert GEMM of TE's "
    "multi-stream grouped GEMM and each split quantize's launch included, is charged "
    "eager_host_fwd_s (32 us, compute/efficiency.py; the megatron profile's host_issue eager "
    "and python_backward, engines/profiles.py), where TE pull request #2045's H100 run bounds "
    "the C++ issue of one cuBLASLt GEMM at 11.6 us (`MOE_LOCAL_EXPERT_CHECKS`). Lowering it can "
    "only raise these estimates: at 11.6 us on every kernel (a bound on the move) DeepSeek-V3 "
    "1.53 -> 1.57 (25.11), 1.32 -> 1.35 (26.02), the 25.09 rows unmoved (whole-layer CUDA "
    "graphs: host 0.24 s a step), Qwen3-235B-A22B 1.71 -> 1.87, 1.24 -> 1.32, 1.17 -> 1.35, "
    "1.29 -> 1.40 (host-bound in the estimate: host over device 1.04-1.18 against DeepSeek-V3's "
    "0.76-0.79). And the graphed 25.09 DeepSeek-V3 runs miss as much as the eager 25.11 one "
    "(1.59 / 1.51 against 1.53): the miss is the device's, not the host's. For the expert GEMMs "
    "the 32 us is likely high (TE issues them and each split quantize from a C++ loop: the "
    "11.6 us bound, and TE issue #2897's ~10 us an expert of Python loops), so the host-bound "
    "Qwen3-235B-A22B estimates rest on it and their device side is further off; not changed "
    "here: no measurement of the whole per-expert host path on a DGX B200's host, and the "
    "Qwen3-30B-A3B rows ride the same charge. Not the miss.",
    "The EP exchange inside the DGX B200 node: deepseek-ai/DeepEP branch hybrid-ep, "
    "docs/README_Hybrid-EP.md 'B200 Platform' at 94a9f8f6 (B200, 8 ranks, 4,096 tokens, hidden "
    "7,168, top-8, random uniform router): HybridEP (Torch API, 16 SMs) 535.94 GB/s BF16 "
    "dispatch, 530.86 combine, on the rows a rank receives. At DeepSeek-V3's 256 experts over 8 "
    "ranks a token reaches 5.29 of them (hybridep_rows: 21,687 rows a rank, 311 MB): 0.583 ms an "
    "exchange, where gpuplan charges NCCL's all-to-all of the 8 copies (470 MB, 7/8 leaving the "
    "rank) at 0.8 of NVLink 5's 900 GB/s, 0.603 ms. The 26.02 DeepSeek-V3 row, the only B200 "
    "row under HybridEP, timed with the measured exchange: 1.3155 -> 1.3185. Not the miss for "
    "that row. Left open: the rows under the alltoall dispatcher miss about twice as much a layer "
    "pass (9.6-11.0 ms) as the HybridEP one (5.7) while the two exchanges are charged alike (the "
    "estimate's alltoall path adds only its permutation copies, moe.dispatch 0.71 ms a layer "
    "pass, which HybridEP does inside its kernel): for the 4.7 ms difference to be that "
    "path's, its four NCCL exchanges and those copies (3.1 ms charged) would take 2.5x their "
    "charge. No NCCL all-to-all measurement on a DGX B200 was found, and the 26.02 run differs also in "
    "Megatron-Core (b0cc2706 against 0d8e0714), TE and the global batch: not modelled.",
    "The experts' gradients: Megatron-Core reduces them over the expert data-parallel group, "
    "TP x DP / EP ranks 8 apart -- 2 for DeepSeek-V3 (one GPU of each of two nodes, one NIC), 4 "
    "for the 26.02 Qwen3-235B-A22B row -- where gpuplan charges a stage's whole gradient as an "
    "all-reduce over its 16 / 32-rank data-parallel group over every NIC of the nodes (0.093 s "
    "full, 0.079 exposed, DeepSeek-V3 25.11). gpuplan's own reduce-scatter of all 15.85 GB over "
    "the 2-rank group takes 0.198 s, its all-gather as much (9.10 GB over 4 ranks, 0.171 s each, "
    "for Qwen3-235B-A22B 26.02): at most 0.4 s more a step, and less where the stage's last "
    "backward and its 1F1B cool-down hide it -- DeepSeek-V3 1.53 -> 1.48 at the most, "
    "Qwen3-235B-A22B 1.29 -> 1.27. Not the miss; not modelled.",
    "The pipeline at PP 16 over the nodes' NICs: Megatron-Core's rank order (tp-cp-ep-dp-pp) "
    "fills a node with the EP group, so every stage-to-stage send crosses InfiniBand on its "
    "GPU's own 400 Gb/s NIC; each is charged exposed (1F1B's paired blocking sends: 2 a "
    "micro-batch, 58.7 MB each at 1.48 ms: 0.38 s a 25.11 DeepSeek-V3 step), and the bubble in "
    "full (15 slots of the busiest stage's 67 ms: 1.00 s). Together 1.4 s of a 15.3 s step "
    "whose miss is 5.3 s: doubled they would not hold it. The stages are even in the estimate "
    "(a middle stage's 4 MoE layers 58.2 ms + 9.2 ms of exchanges against the last stage's "
    "layer, MTP layer and two heads 63.0 + 4.6 ms: DEEPSEEK_SPLIT (16, 1), the recipe's "
    "layout_map at 7af9601c).",
    "Memory-driven recompute: none beyond the recorded one. gpuplan's memory puts the rows at "
    "93-164 GB of the B200's 178 GB (DeepSeek-V3 121 GB with mla_up_proj at 25.11 / 26.02, "
    "157-164 GB at 25.09 without; Qwen3-235B-A22B 93-151 GB), so the configs' recompute is all the "
    "Jobs need, and all they run.",
)


def recipe_fields(run: dict, notes: list[str]) -> dict:
    """The Job fields a row's recorded Megatron-Bridge recipe sets (``run['recipe']``): the
    batch-level EP overlap (``moe_a2a_overlap`` -> ``ep_overlap``), the flex dispatcher's
    backend (``moe_flex_dispatcher_backend`` -> ``moe_dispatcher``), the MTP depth
    (``mtp_num_layers`` -> ``mtp_layers``), Transformer Engine's scoped CUDA graphs
    (``cuda_graph_scope`` under ``cuda_graph_impl`` transformer_engine -> ``cuda_graph_scope``),
    the 25.09 performance matrix's whole-layer graphs (``cuda_graphs`` -> ``cuda_graph_scope``
    full)
    and selective recompute of named modules
    (``recompute_modules`` -> ``checkpointing`` selective with ``recompute_modules``); what
    gpuplan cannot express goes to ``notes``."""
    r = run.get("recipe")
    if not r:
        return {}
    out: dict = {}
    src = r.get("source") or {}
    where = (f"{r['repo']}@{r['tag']} {r['config']}" if "repo" in r
             else f"{src.get('path', '?')} @{src.get('commit', '?')}")
    if r.get("moe_a2a_overlap"):
        out["ep_overlap"] = True
        notes.append(f"batch-level EP overlap (moe_a2a_overlap, {where})")
    if r.get("moe_token_dispatcher_type") == "flex" and r.get("moe_flex_dispatcher_backend"):
        out["moe_dispatcher"] = r["moe_flex_dispatcher_backend"]
        notes.append(f"the flex dispatcher over {r['moe_flex_dispatcher_backend']} "
                     f"(moe_flex_dispatcher_backend, {where})")
    if r.get("mtp_num_layers"):
        out["mtp_layers"] = r["mtp_num_layers"]
        notes.append(f"MTP depth {r['mtp_num_layers']} (the recipe's mtp_num_layers, {where})")
    if r.get("cuda_graph_impl") == "transformer_engine" and r.get("cuda_graph_scope"):
        out["cuda_graph_scope"] = tuple(r["cuda_graph_scope"])
        notes.append(f"TE CUDA graphs over {', '.join(r['cuda_graph_scope'])}, one host launch "
                     f"a graph (cuda_graph_impl / cuda_graph_scope, {where})")
    if r.get("recompute_modules"):
        out.update(checkpointing="selective", recompute_modules=tuple(r["recompute_modules"]))
        notes.append(f"selective recompute of {', '.join(r['recompute_modules'])} ({where})")
    if r.get("expert_tensor_parallel_size") is not None:
        # the experts' own TP (Megatron-Core expert_tensor_parallel_size): below the row's TP
        # the MoE layers fold (MoE Parallel Folding), EP's ranks adjacent past the expert TP group
        out["etp"] = r["expert_tensor_parallel_size"]
        notes.append(f"expert TP {out['etp']} (expert_tensor_parallel_size, {where})")
    if r.get("moe_expert_capacity_factor") is not None:
        # token drop (Megatron-Bridge apply_moe_token_drop: capacity factor 1.0, each expert's
        # input padded to its capacity), which the experts' GEMMs run at (moe_capacity_factor)
        out["moe_capacity_factor"] = r["moe_expert_capacity_factor"]
        notes.append(f"token drop: capacity factor {r['moe_expert_capacity_factor']}, padded to "
                     f"capacity (moe_expert_capacity_factor, {where})")
    if r.get("cuda_graphs"):
        # cuda_graphs true -> set_cuda_graph_overrides: model.enable_cuda_graph True
        # (Megatron-Bridge@ea299063 scripts/performance/utils/helpers.py lines 114-120):
        # Megatron-Core's whole-layer graphs, its cuda_graph_scope left at "full"
        out["cuda_graph_scope"] = ("full",)
        notes.append("Megatron-Core's whole-layer CUDA graphs (cuda_graphs true -> "
                     "enable_cuda_graph; cuda_graph_scope full: a layer's forward and its "
                     "backward one host launch each)")
    if not r.get("tp_comm_overlap", True) and run["job"]["tp"] > 1:
        notes.append(f"no TP communication overlap (tp_comm_overlap False, {where})")
    if (run["model"]["catalog"] == "deepseek-v3" and not r.get("moe_a2a_overlap")
            and r.get("moe_token_dispatcher_type") == "alltoall"):
        # DeepSeekV3ModelProvider moe_shared_expert_overlap = True (src/megatron/bridge/models/
        # deepseek/deepseek_provider.py:78 at v0.2.0 7af9601c and v0.3.0 21b02e0c); Megatron-Core
        # allows it only under the alltoall dispatcher (transformer_config.py @0d8e0714 line 941)
        # and the a2a-overlap override turns it off (scripts/performance/utils/helpers.py:186)
        out["moe_shared_expert_overlap"] = True
        notes.append("the shared expert beside the dispatcher's all-to-alls "
                     "(moe_shared_expert_overlap, the DeepSeek-V3 provider's default under "
                     "alltoall)")
    out.update(_launcher_fields(run, r, where, notes))
    missing = [say(r[k]) for k, say in RECIPE_UNMODELLED.items() if r.get(k)]
    if missing:
        notes.append("not modelled: " + "; ".join(missing))
    return out


def _launcher_fields(run: dict, r: dict, where: str, notes: list[str]) -> dict:
    """The Job fields a NeMo 24.07 fine-tuning row's launcher script sets (NeMo-Framework-
    Launcher examples/peft/llama/h100/*.sh over conf/peft/llama/sft.yaml at the 24.07 tag,
    8325688d: the scripts' nodes, batches, TP, PP and packed 4096 are the table's rows):
    ``++peft.model.fp8_params=true`` -> ``fp8_param_gather`` (TE FP8 parameters, no BF16 copy);
    sft.yaml's ``optim.dtype: bf16`` -> ``optimizer_states`` bf16 (Apex DistributedFusedAdam
    keeps exp_avg and exp_avg_sq in its ``dtype``: apex/contrib/optimizers/
    distributed_fused_adam.py lines 464-476 at NVIDIA/apex@f8e60c47, 2024-06-29); the script's
    ``virtual_pipeline_model_parallel_size`` -> interleaved. Its master copy, which NeMo
    stores in that bf16 too (fp8_params sets store_params True: megatron_base_model.py lines
    802-812 at NVIDIA/NeMo@e938df32, r2.0.0 = v2.0.0; Apex's params_shard in ``dtype``, lines
    449-456) -> ``master_weights`` bf16."""
    out: dict = {}
    if r.get("fp8_params"):
        out["fp8_param_gather"] = True
        notes.append(f"FP8 parameters, no BF16 weight copy (fp8_params, {where})")
    if r.get("optim_dtype") == "bf16":
        out["optimizer_states"] = "bf16"
        notes.append(f"Adam states in bf16 (distributed_fused_adam dtype bf16, {where})")
        if r.get("fp8_params"):  # store_params: Apex's parameter shards in that dtype
            out["master_weights"] = "bf16"
            notes.append(f"master copy in bf16 (fp8_params sets store_params: Apex keeps the "
                         f"parameter shards in its dtype bf16, {where})")
    vp = r.get("virtual_pipeline_model_parallel_size")
    if vp and vp > 1 and run["job"]["pp"] > 1:
        out["pp_schedule"] = f"interleaved:{vp}"
        notes.append(f"VP {vp} (virtual_pipeline_model_parallel_size, {where})")
    return out


def master_fields(run: dict, notes: list[str]) -> dict:
    """The master copy a NeMo 24.07 pre-training row's launcher config implies (``run
    ['launcher']``: NeMo-Framework-Launcher conf/training/*/*.yaml at tag 24.07, 8325688d, and
    the row's examples/training/*/h100/*_fp8.sh). NeMo's rule (megatron_base_model.py lines
    790-812 at NVIDIA/NeMo@e938df32, the same at r2.0.0rc1): under distributed_fused_adam its
    model dtype is the precision's under megatron_amp_O2 (bf16), the optimizer's ``dtype``
    fp32 unless set; no ``store_params`` in the config, so fp8_params -> store_params; dtype ==
    model dtype -> neither (no master); fp32 over bf16 -> ``store_param_remainders``: Apex
    keeps an int16 remainder shard beside fp32 exp_avg / exp_avg_sq (apex distributed_fused_
    adam.py lines 458-476, 659-671 @f8e60c47) -> ``master_weights`` remainder; dtype bf16 (the
    Nemotron-4 340B yaml, lines 158-162) -> store_params False: Apex keeps no params_shard and
    steps the bf16 weights in place, exp_avg / exp_avg_sq in its dtype bf16 (lines 449-476) ->
    ``master_weights`` none, ``optimizer_states`` bf16."""
    la = run.get("launcher")
    if not la or la.get("optim_name") != "distributed_fused_adam":
        return {}
    where = f"{la['config']} @{la['tag']}"
    o2_bf16 = la.get("megatron_amp_O2") and la.get("precision") == "bf16"
    dtype = la.get("optim_dtype") or "fp32"
    if not o2_bf16 or la.get("fp8_params"):
        return {}
    if dtype == "fp32":
        notes.append("fp32 master as the bf16 weights plus 16-bit remainders (distributed_fused_"
                     f"adam at its default fp32 dtype over a bf16 O2 model: NeMo sets "
                     f"store_param_remainders, {where})")
        return {"master_weights": "remainder"}
    if dtype != "bf16":
        notes.append(f"not modelled: distributed_fused_adam dtype {dtype} ({where})")
        return {}
    notes.append(f"no master: distributed_fused_adam dtype bf16 over the bf16 O2 model ({where}): "
                 "NeMo sets store_params False, Apex steps the bf16 weights in place, its Adam "
                 "states bf16")
    return {"master_weights": "none", "optimizer_states": "bf16"}


def grad_fields(run: dict, notes: list[str]) -> dict:
    """The gradient buffer a NeMo 24.07 pre-training row's launcher config implies: Apex's
    DistributedFusedAdam takes ``grad_sync_dtype`` from its ``dtype`` where none is given
    (distributed_fused_adam.py lines 586-587 @f8e60c47; NeMo passes the config's optim keys
    through: nemo/core/optim/distributed_adam.py lines 148-150 @e938df32), fp32 unless set, and
    allocates its contiguous grad buffer (the yamls' contiguous_grad_buffer True) in that dtype
    (lines 1099-1118), NeMo's ``main_grad`` a view of it that the wgrad GEMMs accumulate into
    (distributed_adam.py line 496) -> ``grad_dtype`` fp32. The Nemotron 8B and 22B rows alone
    set none (their yamls and scripts); the others' scripts (or the 340B yaml) set bf16."""
    la = run.get("launcher")
    if not la or la.get("optim_name") != "distributed_fused_adam":
        return {}
    sync = la.get("grad_sync_dtype") or la.get("optim_dtype") or "fp32"
    if sync != "fp32":
        return {}
    notes.append(f"fp32 gradient buffer (distributed_fused_adam with no grad_sync_dtype: its "
                 f"dtype fp32, {la['config']} @{la['tag']})")
    return {"grad_dtype": "fp32"}


def launcher_recompute(run: dict, notes: list[str]) -> dict:
    """The recompute a NeMo 24.07 pre-training row's launcher config sets (``run['launcher']
    ['activations_checkpoint_granularity']``): NeMo passes it to Megatron-Core as
    ``recompute_granularity`` (megatron_base_model.py lines 533 and 553 at NVIDIA/NeMo@e938df32),
    and ``selective`` checkpoints the core attention (``checkpoint_core_attention``:
    megatron/core/transformer/attention.py line 95 at core_r0.9.0, 1afee592, the tag NeMo's
    Dockerfile.ci names at e938df32; line 103 at core_r0.8.0) -> ``checkpointing`` selective,
    whose default module is core_attn. Only the Nemotron-4 340B yaml sets it (line 122)."""
    la = run.get("launcher") or {}
    if la.get("activations_checkpoint_granularity") != "selective":
        return {}
    notes.append(f"selective recompute of the core attention (activations_checkpoint_"
                 f"granularity selective, {la['config']} @{la['tag']})")
    return {"checkpointing": "selective"}


def gather_overlap_of(run: dict) -> bool:
    """Megatron-Bridge's ``overlap_param_gather`` as the row's recipe sets it: the 25.11
    performance scripts turn it off for FP8-MX ("keeping this eanbled causes NaN grad norm"),
    recorded in the runs file's ``recipe`` where the row's config function does; True
    elsewhere (the recipes' DistributedDataParallelConfig(overlap_param_gather=True))."""
    return bool((run.get("recipe") or {}).get("overlap_param_gather", True))


def tp_overlap_of(run: dict) -> bool:
    """Megatron-Bridge's CommOverlapConfig(tp_comm_overlap=...) as the row's recipe sets it
    (True where no recipe is recorded, as every row ran before the recipes were read)."""
    return bool((run.get("recipe") or {}).get("tp_comm_overlap", True))


#: NeMo's LoRA target names (peft_config.py PEFT_MODULE_MAP / LORA_CONFIG_TO_MCORE_MAP at
#: NVIDIA/NeMo@579983fb) as the Job's targets. attention_qkv: NeMo's "nemo" variant puts ONE
#: adapter on Megatron-Core's fused linear_qkv (A: hidden x r, B: r x (heads + 2 query groups) x
#: head_dim), the Job's ``linear_qkv`` target (gpuplan.models FUSED_QKV_TARGET: the catalog's q,
#: k and v as one linear).
#: mlp_fc1 is left out: NeMo's one adapter over the fused gate and up projections has no Job
#: target (a row naming it is listed, not expressed).
NEMO_LORA_TARGETS = {"attention_qkv": ("linear_qkv",), "attention_dense": ("o_proj",),
                     "mlp_fc2": ("down_proj",)}


def lora_fields(run: dict, notes: list[str]) -> dict:
    """The Job fields of a LoRA row's ``job.lora`` (NeMo's defaults where the table states none,
    recorded with their source): rank, the target modules (:data:`NEMO_LORA_TARGETS`), dropout;
    NeMo's fused_adam without the distributed optimizer (``job.distributed_optimizer`` False:
    ZeRO 0). The frozen base's linears run FP8 under the row's recipe (Transformer Engine's
    modules under fp8_autocast), the adapters BF16 (megatron.core.tensor_parallel linears, which
    fp8_autocast does not reach): the Job's LoRA ops are 16-bit whatever the recipe."""
    j = run["job"]
    lo = j.get("lora")
    if not lo:
        return {}
    targets = tuple(m for t in lo["targets"] for m in NEMO_LORA_TARGETS[t])
    out = dict(lora_rank=lo["rank"], lora_targets=targets, lora_dropout=lo["dropout"])
    if j.get("distributed_optimizer") is False:
        out["zero"] = 0
    notes.append(f"LoRA rank {lo['rank']} on {', '.join(lo['targets'])} as {', '.join(targets)} "
                 f"(one fused adapter), dropout {lo['dropout']}; base FP8, "
                 "adapters BF16" + (", no distributed optimizer" if out.get("zero") == 0 else ""))
    if j.get("fp8_params"):
        out["fp8_param_gather"] = True
        notes.append("fp8_params (TE FP8 parameters: the frozen base stored FP8) taken as "
                     "fp8_param_gather, which a LoRA Job reads nowhere: the base counted at 2 B "
                     "a weight with no narrow copy (on H100 the same bytes as the FP8 weight and "
                     "its transpose), one FP8 weight cast a step charged as for a BF16 base "
                     "(LORA_CHECKED)")
    return out


def _pp_schedule(j: dict) -> str:
    vp = j.get("vp")
    return f"interleaved:{vp}" if j["pp"] > 1 and vp and vp > 1 else "1f1b"


def job_of(run: dict, notes: list[str] | None = None) -> Job:
    """The run as one gpuplan Job under the megatron engine."""
    notes = [] if notes is None else notes
    j, h = run["job"], run["hardware"]
    gpus = h["count"]
    domain = nvlink_domain(get_gpu(h["gpu"]))
    per_node = min(domain, gpus) if domain else 8
    if domain:
        notes.append(f"{h['gpu']}: ranks in NVLink domains of {per_node} (the NVL{domain} rack)")
    tp = j["tp"]
    fields = dict(precision=j["precision"], batch=j["micro_batch"], grad_accum=j["grad_accum"],
                  seq=j["seq"], gpus=gpus, tp=tp, pp=j["pp"], cp=j["cp"], ep=j.get("ep") or 1,
                  sequence_parallel=tp > 1, pp_schedule=_pp_schedule(j), zero=1,
                  gpus_per_node=per_node)
    if run["source_group"] == "megatron-bridge":
        preset = BRIDGE_PRESETS[j["precision"]]
        fields.update(preset)
        if preset:
            notes.append(f"Megatron-Bridge's {j['precision_as_stated']} preset: "
                         + ", ".join(f"{k} {v}" for k, v in preset.items()))
    if run["model"]["catalog"] in SPLIT_ACCOUNTING and j["pp"] > 1:
        fields.update(pp_embedding_part=True, pp_loss_part=True)
        notes.append(SPLIT_ACCOUNTING[run["model"]["catalog"]])
    fields.update(recipe_fields(run, notes))
    fields.update(lora_fields(run, notes))
    fields.update(master_fields(run, notes))
    fields.update(launcher_recompute(run, notes))
    fields.update(grad_fields(run, notes))
    if run["model"]["catalog"] == "deepseek-v3" and j["pp"] > 1:
        layout = (run.get("recipe") or {}).get("pipeline_model_parallel_layout")
        first, last = (layout_split(layout, j["pp"]) if layout
                       else DEEPSEEK_SPLIT[(j["pp"], j.get("vp") or 1)])
        fields.update(pp_first_stage_layers=first, pp_last_stage_layers=last)
        notes.append(f"DeepSeek-V3's uneven pipeline: first stage {first} layers, last {last} "
                     + (f"(the recipe's layout {layout})" if layout else "(DEEPSEEK_SPLIT)"))
    ep = fields["ep"]
    if ("etp" not in fields and tp > 1 and ep > 1
            and (gpus // (tp * j["pp"] * j["cp"]) * j["cp"]) % ep):
        # EP wider than DP x CP: Megatron-Bridge folds the MoE layers, expert TP 1 (MoE
        # Parallel Folding; its Qwen3 MoE and DeepSeek-V3 recipes set
        # expert_tensor_parallel_size 1)
        fields["etp"] = 1
        notes.append(f"EP {ep} over TP x DP x CP with expert TP 1 (MoE Parallel Folding)")
    notes.append(("distributed optimizer (ZeRO-1), " if fields["zero"] else "")
                 + f"sequence parallelism under TP, {fields['pp_schedule']}")
    return Job(model=run["model"]["catalog"], mode="train", engine="megatron", **fields)


#: DeepSeek-V3's own pre-training (the report, arXiv 2412.19437: sec. 3.1 2048 H800, 8 a node,
#: NVLink in the node, InfiniBand across; sec. 3.2 PP 16 with DualPipe, EP 64 over 8 nodes,
#: ZeRO-1, no TP; sec. 3.3 FP8 with 1x128 / 128x128 blocks; sec. 2.2 MTP depth 1; sec. 4.2
#: sequence 4096, batch ramped 3072 -> 15360 over the first 469B of the 14.8T tokens, so taken
#: at 15360). ASSUMED, the report giving neither: micro-batch 1 (15360 / DP 128 = 120
#: micro-batches, even as DualPipe needs) and Megatron-Bridge's PP16 split of the 61 layers
#: (DEEPSEEK_SPLIT[(16, 1)]: first stage 4, last 1 and the MTP module). Not modelled: the
#: node-limited routing (each token to at most 4 nodes) and the IB -> NVLink forwarding that
#: trim the all-to-all's IB volume (sec. 3.2.2), and the ramp's smaller early batches.
#: Its memory, each setting from the report's own sentence (:data:`DEEPSEEK_V3_MEMORY`).
DEEPSEEK_V3_REPORT = dict(batch=1, global_batch=15360, split=DEEPSEEK_SPLIT[(16, 1)])

#: The report's memory savings and states as Job settings, each with its sentence (arXiv
#: 2412.19437 v2). Not set, the report saying nothing against the plan's: the 16-bit weights
#: beside their FP8 copies (sec. 3.3.2 quantizes "the activation or weight online" but says
#: nothing of caching either), ZeRO-1 over DP alone (sec. 3.2; the two DualPipe copies of a
#: stage's states are not said to share one shard group), the EMA (sec. 3.2.3: "stored in CPU
#: memory": nothing on the GPU, as planned).
DEEPSEEK_V3_MEMORY = (
    ("checkpointing", "selective"),
    # sec. 3.2.3 "Recomputation of RMSNorm and MLA Up-Projection": "We recompute all RMSNorm
    # operations and MLA up-projections during back-propagation, thereby eliminating the need
    # to persistently store their output activations"; sec. 3.3.3 (2): "we cache the inputs of
    # the SwiGLU operator and recompute its output in the backward pass" (the MoE's: moe_act)
    ("recompute_modules", ("layernorm", "mla_up_proj", "moe_act")),
    # sec. 3.3.3 "Low-Precision Activation": the attention output in E5M6 ("We adopt a
    # customized E5M6 data format exclusively for these activations"), the MoE SwiGLU inputs
    # "also stored in FP8 with our fine-grained quantization method"
    ("activation_storage", "deepseek-v3"),
    # sec. 3.3.3 "Low-Precision Optimizer States": "We adopt the BF16 data format instead of
    # FP32 to track the first and second moments in the AdamW optimizer"
    ("optimizer_states", "bf16"),
    # ibid.: "the master weights (stored by the optimizer) and gradients (used for batch size
    # accumulation) are still retained in FP32" (the master is the recipe's fp32 already)
    ("grad_dtype", "fp32"),
)


def deepseek_job(run: dict, notes: list[str]) -> Job:
    """The report's own run as a gpuplan Job (:data:`DEEPSEEK_V3_REPORT`): megatron engine (the
    accounting of Megatron-Core's MoE and MTP), DualPipe, MTP depth 1."""
    j, h = run["job"], run["hardware"]
    gpus, pp = h["count"], j["pp"]
    dp = gpus // (pp * j["tp"])
    mbs, gb = DEEPSEEK_V3_REPORT["batch"], DEEPSEEK_V3_REPORT["global_batch"]
    first, last = DEEPSEEK_V3_REPORT["split"]
    notes.append(f"DeepSeek-V3 report: DualPipe over PP {pp}, EP {j['ep']}, ZeRO-1, MTP depth 1; "
                 f"global batch {gb} (the ramp's end) as {gb // (mbs * dp)} micro-batches of "
                 f"{mbs} (assumed) over DP {dp}; stages first {first} / last {last} layers "
                 "(assumed: Megatron-Bridge's PP16 split)")
    notes.append("its memory savings (sec. 3.2.3, 3.3.3): RMSNorm, MLA up-projections and the "
                 "MoE SwiGLU output recomputed, the attention output cached in E5M6 and the "
                 "SwiGLU inputs in FP8, BF16 AdamW moments, FP32 gradients")
    return Job(model=run["model"]["catalog"], mode="train", engine="megatron",
               precision=j["precision"], batch=mbs, grad_accum=gb // (mbs * dp), seq=j["seq"],
               gpus=gpus, tp=j["tp"], pp=pp, ep=j["ep"], zero=j["zero"], pp_schedule="dualpipe",
               mtp_layers=1, pp_first_stage_layers=first, pp_last_stage_layers=last,
               gpus_per_node=h["gpus_per_node"], **dict(DEEPSEEK_V3_MEMORY))


def predict(run: dict, tp_overlap: bool | None = None) -> Row:
    """The run's Row: gpuplan's estimate of it, or why it is not expressible. ``tp_overlap``:
    the TP communication overlap to time it with (None: the row's recipe's, :func:`tp_overlap_of`;
    False: every TP collective exposed, the bound :data:`BLACKWELL_405B_CHECKED` reports)."""
    measured = float(run["measured"]["tokens_per_s_per_gpu"])
    why = _not_expressible(run)
    if why:
        return Row(run, None, measured, why)
    notes: list[str] = []
    # job_of's notes say where it is off
    overlap = tp_overlap_of(run) if tp_overlap is None else tp_overlap
    try:
        job = deepseek_job(run, notes) if run["kind"] == "train_gpu_hours" else job_of(run, notes)
        gpu = get_gpu(run["hardware"]["gpu"])
        topo = topology_for(gpu, gpus_per_node=job.gpus_per_node) if job.gpus > job.gpus_per_node \
            or job.gpus_per_node > 8 else None
        est = estimate_speed(load_model(run["model"]["catalog"]), gpu, job, measured=None,
                             topology=topo, link="nvlink" if topo is None else None,
                             tp_overlap=overlap, gather_overlap=gather_overlap_of(run))
        if not gather_overlap_of(run):
            notes.append("the weights' all-gather after the optimizer step, not overlapped "
                         "(the recipe's overlap_param_gather False)")
    except GpuplanError as e:
        return Row(run, None, measured, f"gpuplan refuses the job: {e}")
    return Row(run, est.tokens_per_s / run["hardware"]["count"], measured, notes=tuple(notes))


def _twin_key(run: dict) -> tuple:
    s = run["source"]
    # the GPU and count too: from 26.02.01 a table is one model's, every system in it
    return (s.get("commit"), s.get("table"), run["model"]["catalog"], run["hardware"]["gpu"],
            run["hardware"]["count"])


def speedups(rows: list[Row]) -> list[tuple[Row, Row, float, float | None]]:
    """(FP8 row, its BF16 twin, published speed-up, predicted speed-up or None)."""
    bf16 = {_twin_key(r.run): r for r in rows if r.run["job"]["precision"] == "mixed-bf16"}
    out = []
    for r in rows:
        twin = bf16.get(_twin_key(r.run))
        if twin is None or r is twin:
            continue
        pred = (r.predicted / twin.predicted if r.predicted is not None
                and twin.predicted is not None else None)
        out.append((r, twin, r.measured / twin.measured, pred))
    return out


#: Where FP8/BF16 twins were looked for (issue 30's speed-up check), and what was found: printed
#: under the speed-ups table. A negative result for every source but the two pairs recorded.
PAIR_SEARCH = (
    "NVIDIA/NeMo docs/source/performance/performance_summary.md: every stored version (4c73f776, "
    "3a8081fe, 8e3d65dc, 070a0bb1 and their branch copies) is the 24.07 DGX-H100 table 'at FP8 "
    "precision', no BF16 column or row; the file leaves the repository at d31653f7 "
    "(2024-12-12, 'perf summary docs link'). The NeMo 24.09-25.07 tables moved to "
    "docs.nvidia.com/nemo-framework/user-guide (performance-summary.html and archive/"
    "25.04-performance-summary.html); their opening tables are headed 'pre-training "
    "performance of various models with the FP8 precision' and only their openings are "
    "stored here, so no row of them is recorded (the 25.07 GB200 rows' parenthesized figures "
    "are defined in a footnote the stored text does not reach).",
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md: the 25.09 tables (v0.2.0 = "
    "7af9601c, first at fa0315ae) print FP8-CS with FP8-MX in parentheses and no BF16; of the "
    "25.11 and 26.02 tables (df0289c1) and the 26.02.01-26.08 ones (the archive at 4ab94dfa) "
    "only DeepSeek-V3 on GB200 and GB300 (25.11) publishes BF16 beside FP8 (GB300 at one "
    "layout, GB200 at two); their other BF16 rows (GPT-OSS 120B everywhere, Qwen3-235B-A22B 25.11 GB200 / GB300) have "
    "no FP8 twin in the same table.",
)


def summary(rows: list[Row]) -> dict:
    errs = [r.error for r in rows if r.error is not None]
    sp = speedups(rows)
    sperr = [abs(p / m - 1) for _, _, m, p in sp if p is not None]
    return {"predicted": len(errs), "listed": len(rows) - len(errs),
            "median": statistics.median(errs) if errs else None,
            "worst": max(errs) if errs else None,
            "speedup_pairs": len(sp), "speedup_checked": len(sperr),
            "speedup_worst": max(sperr) if sperr else None}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


#: NeMo 24.07's dense GPT-3 and Nemotron rows (catalog entries from the NeMo-Framework-Launcher
#: 24.07 training configs): dense like the Llama rows, but their own subset so that the Llama
#: figures stay comparable across the change that mapped them.
_NEMO_DENSE = ("gpt3-", "nemotron-")

#: What the GPT-3 / Nemotron subset is, and what is open about it (prose of the report).
NEMO_DENSE_NOTE = (
    "The GPT-3 (5B, 20B, 175B) and Nemotron (8B, 22B, Nemotron-4 340B) rows of NeMo 24.07's "
    "pretraining table are the catalog entries built from NeMo-Framework-Launcher 24.07's "
    "training yaml (conf/training/gpt3/*.yaml, conf/training/nemotron/*.yaml at 8325688d; "
    "GPT-3: GPT-2's block, gelu, learned positions, tied; Nemotron: LayerNorm1P, squared ReLU "
    "without a gate, half-rotary heads, no biases, untied, GQA 8 in the 340B only). Their Jobs "
    "are the table's layouts with the harness defaults (no recipe recorded: the 24.07 yaml's "
    "layouts match the GPT3-5B and 20B rows' (TP, MBS) but not the 175B's (VP 12 against 6) nor "
    "the Nemotron rows' -- nemotron_340b.yaml is PP 12 x VP 8 against the row's PP 8 x VP 12 -- "
    "so their layouts and batches stay the table's; each row's yaml (and H100 script) is read "
    "for its optimizer, its gradient buffer and its recompute (`master_fields`, `grad_fields`, "
    "`launcher_recompute`; 5b.yaml and 20b.yaml set none beyond the defaults). Every one plans faster than measured; the largest gap is GPT3-5B "
    "at TP 1 (no model parallelism, 1.24), open: what was checked for it (`GPT3_5B_CHECKED`, "
    "sized with gpuplan's own step, 2.35 s against the 2.91 s the measured rate implies):")

#: Issue 30, the GPT3-5B row (1.24): what its source and its NeMo-Framework-Launcher 24.07
#: config (5b.yaml, 5b_fp8_8node.sh at 8325688d) set that might cost it time, each read at its
#: source and sized with gpuplan's step for the row at the commit that added this (2.353 s:
#: GEMMs 1.48 s, attention 0.36 s, elementwise 0.49 s; the measured rate implies 2.91 s). A
#: negative result: none accounts for the 0.56 s, none is charged. (candidate, finding) pairs.
GPT3_5B_CHECKED = (
    ("the row against its source",
     "as recorded: NeMo docs/source/performance/performance_summary.md at 070a0bb1, "
     "'Pretraining (NeMo 24.07)', DGX-H100: 64 GPUs, GBS 2048, MBS 4, sequence 2048, TP / PP / "
     "CP / VP 1 / 1 / 1 / 1, 22,521 tokens/s/GPU and 736 model TFLOP/s/GPU, which is 22,521 x "
     "gpuplan's 32.64 GFLOP a token (735): the same model and sequence; the table has no "
     "footnote on recompute or CUDA graphs, 5b.yaml sets no activation checkpointing, and "
     "5b_fp8_8node.sh the table's batch and layout (8 nodes, fp8 true, grad_sync_dtype bf16)"),
    ("attention dropout 0.1 (5b.yaml attention_dropout) in TE's fused attention",
     "too small: Transformer Engine v1.8 (3ec998e9, pytorch/attention.py DotProductAttention) "
     "prefers FusedAttention (cuDNN F16_arbitrary_seqlen, which takes dropout) to "
     "FlashAttention on sm90, and dropout 0.1 costs cuDNN's sbhd forward + backward 0.594 -> "
     "0.614 ms (+3.4%) on an H200 (NVIDIA/TransformerEngine#3312, TE 2.15): on this row's "
     "0.36 s of attention about 12 ms, 0.5% of the step; not charged"),
    ("apply_query_key_layer_scaling True (5b.yaml)",
     "no effect: NeMo's build_transformer_config (nlp/models/language_modeling/megatron_base_"
     "model.py) sets it False, with NVTE_APPLY_QK_LAYER_SCALING 0, unless the trainer runs "
     "fp16; the row runs bf16 with FP8"),
    ("the delayed-scaling amax history (5b.yaml fp8_amax_history_len 1024, "
     "fp8_amax_compute_algo max)",
     "negligible: at TE v1.8 (pytorch/fp8.py reduce_and_update_fp8_tensors) each forward and "
     "each backward concatenates its amaxes, all-reduces them (MAX, blocking) over the amax "
     "group and updates every history, scale and inverse in one bulk kernel "
     "(common/recipe/delayed_scaling.cu kernel_bulk): 96 GEMMs x 5 tensors x 1,024 x 4 B = "
     "2 MB of history at most an update, 16 updates and 16 all-reduces of under 2 KB a step, "
     "1-2 ms of the 2.9 s"),
    ("GPT-2's block: learned positions, gelu, LayerNorm, biases, hidden dropout 0.1",
     "timed, each as its kernels run: the position embedding 1.7 ms a step, the gelu 108 ms, the "
     "norms, dropouts and residuals among the 0.49 s of elementwise kernels (at 0.85 of the "
     "HBM bandwidth). The 0.56 s gap is 1.14x all of that elementwise time: they would have to "
     "run at under half the bandwidth taken; no measurement of Megatron's fused bias-gelu / "
     "bias-dropout-add kernels' bandwidth was found"),
    ("the data-parallel traffic over 8 nodes (DP 64; distributed_fused_adam with bucket_cap_mb "
     "400, overlap_grad_sync and overlap_param_sync True, grad_sync_dtype bf16)",
     "small: gpuplan's reduce-scatter of the 10 GB of bf16 gradients and all-gather of the "
     "weights take 63 ms, 12 ms of it exposed; all of it exposed would be 2.7% of the step"),
)

#: Megatron-Bridge's tables after 26.02 (docs/performance-summary.md and -archive.md at
#: 4ab94dfa), whose rows fp8_runs.json records since 2026-12-07: a subset of their own.
LATER_RELEASES = ("26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08")

#: Subsets the summary reports apart: (label, test on a predicted row).
SUBSETS = (
    ("dense (Llama), Hopper", lambda r: r.run["model"]["catalog"].startswith("llama")
     and r.run["hardware"]["gpu"].startswith("H")),
    ("dense (Llama), Blackwell", lambda r: r.run["model"]["catalog"].startswith("llama")
     and not r.run["hardware"]["gpu"].startswith("H")),
    ("dense (GPT-3, Nemotron), Hopper",
     lambda r: r.run["model"]["catalog"].startswith(_NEMO_DENSE)),
    ("MoE (Qwen3, DeepSeek-V3)", lambda r: not r.run["model"]["catalog"].startswith(
        ("llama",) + _NEMO_DENSE)),
    ("the 26.02.01-26.08 tables (recorded 2026-12-07, out of sample), every model",
     lambda r: r.run["source"].get("table", "").split(" NeMo ")[0] in LATER_RELEASES),
)


def _subsets(rows: list[Row]) -> list[str]:
    out = []
    for label, test in SUBSETS:
        sel = [r for r in rows if r.error is not None and test(r)]
        if sel:
            errs = [r.error for r in sel]
            ratio = statistics.median(r.predicted / r.measured for r in sel)
            out.append(f"| {label} | {len(sel)} | {_pct(statistics.median(errs))} | "
                       f"{_pct(max(errs))} | {ratio:.2f} |")
    return out


GPT_OSS_NOTE = (
    "The 16 predicted GPT-OSS 120B rows (BF16 26.02.01-26.04.01 on every GPU, the 26.06 B300 "
    "MXFP8 row, which runs the B300 BF16 preset) plan faster than measured, 1.30-1.82x after "
    "Megatron-Core's eager expert epilogue and its unfused YaRN rotary are charged "
    "(compute/flops.py `MCORE_EXPERT_EPILOGUE`, `MCORE_UNFUSED_ROPE`; 1.60-2.25x before): "
    "B200 and B300 furthest (1.62-1.82), H100 nearest (1.30-1.34); the rest is open. What was "
    "checked (`GPT_OSS_CHECKED`):")

#: Issue 30, the GPT-OSS 120B rows: what Megatron-Bridge's gpt_oss recipe and its
#: performance presets (v0.3.1-v0.5.0) run, each read at its source. (candidate, finding) pairs.
GPT_OSS_CHECKED = (
    ("attention (learnable sinks, a 128-token window on every other layer, head dim 64)",
     "fused: Megatron-Core passes softmax_type 'learnable' and window_size (127, 0) to TE's "
     "DotProductAttention (extensions/transformer_engine.py at d7288711); at the pinned TE "
     "(2.12.0 5671fd36 to 2.16.0 4220403e) a learnable softmax rules out FlashAttention only, "
     "and cuDNN's F16_arbitrary_seqlen takes it with the window from cuDNN 9.13.1 "
     "(fused_attn.cpp); determinism (NVTE_ALLOW_NONDETERMINISTIC_ALGO 0: DeepSeek only, "
     "perf_plugins.py) and fp8_dpa, the two ways back to UnfusedDotProductAttention, are unset "
     "in every predicted row. "
     "Unfused could not have run: its saved probabilities, 4 x 64 x 4096^2 x 2 B = 8.6 GB a "
     "layer, are 309 GB over 36 layers (B200: 180 GB)"),
    ("the sequence and the vocabulary",
     "as modelled: 4096 in every row and in gpt_oss_120b_pretrain_config (seq_length 4096); "
     "the recipe's NullTokenizer (vocab 32,000) is below the model's 201,088, which "
     "Megatron-Bridge keeps (training/setup.py _validate_and_set_vocab_size)"),
    ("the experts' activation (quick-GeGLU, alpha 1.702, limit 7, linear offset 1)",
     "one kernel each way as modelled: weighted_bias_quick_geglu under jit_fuser = "
     "torch.compile (megatron/core/jit.py, fusions/fused_bias_geglu.py); its clamps and "
     "torch.cat run eagerly before it: charged (moe.clamp, re-run by moe_act recompute)"),
    ("the experts' biases",
     "fc1's in TE GroupedLinear's GEMM epilogue and its gradient in the wgrad GEMM "
     "(skip_bias_add False; pytorch/module/grouped_linear.py at 71bbefbf), no kernel of its "
     "own; fc2's (skip_bias_add True) in TEGroupedMLP._apply_bias's loop over the local "
     "experts, float32 under the flex dispatchers' probabilities: charged (moe.bias)"),
    ("the rotary embedding (YaRN)",
     "unfused: the presets set apply_rope_fusion, GPTModelProvider drops it for "
     "position_embedding_type 'yarn' (utils/fusions.py validate_rope_fusion_compatibility): "
     "charged (Megatron-Core's _apply_rotary_pos_emb_bshd, 12 passes forward, 10 backward)"),
    ("the 26.06 / 26.06.01 GB300 MXFP8 rows (33,166 and 20,288 tok/s/GPU)",
     "not predicted (one CUDA graph over the iteration); they set cutedsl_fused_grouped_mlp "
     "(NVTE_CUTEDSL_FUSED_GROUPED_MLP: TE 2.16's cuDNN-frontend grouped GEMM + GLU, "
     "ops/fused/forward_grouped_mlp.py), which replaces the epilogue; the footnote's "
     "cudnn-frontend#256 is its backward, grouped_gemm_dglu_wrapper_sm100, 10x slower from "
     "cudnn-frontend 1.24.0 (the dbias reduction under CUTLASS DSL 4.5: 1,362.8 us against "
     "155.6 us after the fix, cudnn-frontend#322)"),
)


def _checked_lines() -> list[str]:
    """The GPT3-5B and GPT-OSS checks, as the report lists them."""
    return [*[f"- {what}: {found}." for what, found in GPT3_5B_CHECKED], "", GPT_OSS_NOTE, "",
            *[f"- {what}: {found}." for what, found in GPT_OSS_CHECKED]]


def render(rows: list[Row]) -> str:
    s = summary(rows)
    out = ["# FP8 training speed: gpuplan against published runs", "",
           f"Generated by `{COMMAND}` from `benchmarks/published/fp8_runs.json` (sources there). "
           "Tokens/s/GPU as the tables give; ratio = predicted / measured. Default fractions, no "
           "stored bench run, nothing fitted. Each run is a megatron Job: the table's TP/PP/CP/EP, "
           "VP as interleaved:VP, sequence parallelism under TP, the distributed optimizer "
           "(ZeRO-1), TP communication overlap as the row's performance config sets it "
           "(recipe.tp_comm_overlap in the runs file: off for NVFP4); Megatron-Bridge rows with "
           "its precision presets (FP8-CS: FP8 param gather, every block FP8 as the performance "
           "scripts run it; FP8-MX: MXFP8 param gather, which Megatron-Core runs in BF16; "
           "`BRIDGE_PRESETS`), Llama 3.1 405B and "
           "Qwen3 235B with the embedding and "
           "loss as pipeline parts (`SPLIT_ACCOUNTING`); the NeMo 24.07 SFT rows as their "
           "NeMo-Framework-Launcher scripts set them (FP8 parameters, bf16 Adam states and "
           "master, the script's VP, marked * in the table: `_launcher_fields`). The "
           "recorded rows are the sources' "
           "(benchmarks/published/fp8_runs.json, written before any prediction was read).", "",
           f"{s['predicted']} runs predicted, {s['listed']} listed as not expressible: median "
           f"|error| {_pct(s['median'])}, worst {_pct(s['worst'])} (bars: median within "
           f"{MEDIAN_BAR:.0%}, worst within {WORST_BAR:.0%}).", "",
           f"FP8-over-BF16 speed-up: {s['speedup_pairs']} pairs published in the same table, "
           f"{s['speedup_checked']} predicted, worst |error| {_pct(s['speedup_worst'])} (bar "
           f"{SPEEDUP_BAR:.0%}).", "",
           "| subset | runs | median \\|error\\| | worst \\|error\\| | median ratio |",
           "|---|---|---|---|---|",
           *_subsets(rows), "", NEMO_DENSE_NOTE, "",
           *_checked_lines(), "",
           "| run | GPU | recipe | TP/PP/CP/VP/EP | MBS x GA | measured tok/s/GPU | predicted | ratio |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        j = r.run["job"]
        lay = "/".join(_layout_cell(r.run, k) for k in ("tp", "pp", "cp", "vp", "ep"))
        pred = "—" if r.predicted is None else f"{r.predicted:,.0f}"
        ratio = "—" if r.predicted is None else f"{r.predicted / r.measured:.2f}"
        out.append(f"| `{r.run['id']}` | {r.run['hardware']['gpu']} | {j['precision']} | {lay} | "
                   f"{j.get('micro_batch', '-')} x {j.get('grad_accum', '-')} | "
                   f"{r.measured:,.0f} | {pred} | {ratio} |")
    out += ["", "## FP8-over-BF16 speed-ups", "",
            "| FP8 run | BF16 twin | published | predicted |", "|---|---|---|---|"]
    for r, t, m, p in speedups(rows):
        out.append(f"| `{r.run['id']}` | `{t.run['id']}` | {m:.3f} | "
                   f"{'—' if p is None else f'{p:.3f}'} |")
    out += ["", "Where twins were looked for (`PAIR_SEARCH`):", ""]
    out += [f"- {t}" for t in PAIR_SEARCH]
    out += _recipe_lines(rows)
    out += _later_lines(rows)
    out += _blackwell_405b_lines(rows)
    out += _mxfp8_lines(rows)
    out += _lora_lines(rows)
    out += _memory_lines(rows)
    out += ["", "## Not expressible", ""]
    out += [f"- `{r.run['id']}`: {r.why_not}" for r in rows if r.predicted is None]
    return "\n".join(out) + "\n"


def _layout_cell(run: dict, key: str) -> str:
    """One TP/PP/CP/VP/EP cell: the table's value, or for VP the recipe's (marked *) where the
    table has no VP column and the row's launcher script sets one."""
    v = run["job"].get(key)
    if v is None and key == "vp":
        vp = (run.get("recipe") or {}).get("virtual_pipeline_model_parallel_size")
        return f"{vp}*" if vp else "-"
    return "-" if v is None else str(v)


def _recipe_lines(rows: list[Row]) -> list[str]:
    """Per MoE row, its recorded Megatron-Bridge recipe and what of it the Job takes or leaves."""
    out = ["", "## MoE rows: the Megatron-Bridge recipes they ran", "",
           "Each row's `recipe` in fp8_runs.json (the performance config read at the tag named); "
           "taken into the Job: moe_a2a_overlap (`ep_overlap`), the dispatcher and its flex "
           "backend (`moe_dispatcher`), mtp_num_layers (`mtp_layers`), "
           "recompute_modules (`recompute_modules`: its time and its memory), tp_comm_overlap, "
           "pipeline_model_parallel_layout where recorded (the 25.11 GB200 DeepSeek-V3 rows: the "
           "pipeline split, `layout_split`, with its source in `layout_source`); TE CUDA graphs (`cuda_graph_scope`: one host "
           "launch a graph), the DeepSeek-V3 provider's shared expert overlap under alltoall "
           "(`moe_shared_expert_overlap`), the 25.11 FP8-MX scripts' overlap_param_gather False "
           "(`gather_overlap`), expert_tensor_parallel_size where recorded (the 25.09 "
           "DeepSeek-V3 rows, `etp_source`: expert TP 1, the MoE layers folded also where EP "
           "is not wider than DP x CP); the rest named, not modelled. Under hybridep inside the "
           "NVL72 rack the EP exchange is HybridEP's measured one (`hybridep_exchange_s`); under "
           "deepep over whole nodes of 400 Gb/s NICs, DeepEP's measured internode one, a token "
           "once to each node its experts lie on (`deepep_internode_exchange_s`: the 25.09 H100 "
           "DeepSeek-V3 row, its node-limited routing reaching at most 4 of its EP group's 8 "
           "nodes, 0.88 -> 1.08; 0.49 before its expert TP 1 was read); under hybridep over "
           "whole nodes, HybridEP's internode one at its README's H100 rates, the same "
           "RDMA-then-NVLink path (`HYBRIDEP_INTERNODE_H100`: the 26.04 / 26.04.01 / 26.06 H100 "
           "Qwen3-30B-A3B rows at EP 16, 0.52 -> 1.21 / 1.20 / 1.22, NOT measured at their "
           "hidden 2048 or the recipe's 32 SMs).", "",
           "| run | config @ tag | dispatcher | EP overlap | recompute | CUDA graphs | MTP |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        rec = r.run.get("recipe")
        if not rec or "moe_token_dispatcher_type" not in rec:
            continue  # a dense row's recipe (tp_comm_overlap only)
        disp = rec["moe_token_dispatcher_type"] + (f" ({rec['moe_flex_dispatcher_backend']})"
                                                   if rec.get("moe_flex_dispatcher_backend")
                                                   else "")
        rc = ", ".join(rec.get("recompute_modules") or []) or "none"
        graphs = ", ".join(rec.get("cuda_graph_scope") or []) or "none"
        out.append(f"| `{r.run['id']}` | {rec['config']} @ {rec['tag']} | {disp} | "
                   f"{'yes' if rec.get('moe_a2a_overlap') else 'no'} | {rc} | {graphs} | "
                   f"{rec.get('mtp_num_layers', '-')} |")
    out += ["", "Checked for the EP 8 rows with 16-32 local experts (`MOE_LOCAL_EXPERT_CHECKS`):",
            ""]
    out += [f"- {c}" for c in MOE_LOCAL_EXPERT_CHECKS]
    out += ["", "Checked of the pipeline for the H100 Qwen3-30B-A3B rows (PP 2 x VP 24 / 12: one / "
            "two layers a virtual stage; `PIPELINE_CHECKS`):", ""]
    out += [f"- {c}" for c in PIPELINE_CHECKS]
    out += ["", "Checked of what 25.11 changed beside the pipeline for those rows (dropless routing "
            "with the EP overlap; `DROPLESS_OVERLAP_CHECKS`):", ""]
    out += [f"- {c}" for c in DROPLESS_OVERLAP_CHECKS]
    out += ["", "Checked for the B200 rows of DeepSeek-V3 and Qwen3-235B-A22B (PP 8-16 across "
            "the nodes, EP 8 inside one; `B200_EP8_CHECKS`):", ""]
    out += [f"- {c}" for c in B200_EP8_CHECKS]
    return out


def blackwell_405b(rows: list[Row]) -> list[Row]:
    """The Llama 3.1 405B rows on Blackwell (B200, GB200) that gpuplan predicts."""
    return [r for r in rows if r.predicted is not None
            and r.run["model"]["catalog"] == "llama-3.1-405b"
            and not r.run["hardware"]["gpu"].startswith("H")]


def _ratio_spans(rows: list[Row]) -> dict[str, str]:
    """'lo-hi' of the table's ratios (as its cells print them) for the row sets the Blackwell
    405B prose compares, so the prose reads as the table does."""
    def span(sel) -> str:
        xs = [r.predicted / r.measured for r in rows if r.predicted is not None and sel(r)]
        return f"{min(xs):.2f}-{max(xs):.2f}"

    def model(r):
        return r.run["model"]["catalog"]

    def blackwell(r):
        return not r.run["hardware"]["gpu"].startswith("H")

    return {"blackwell_405b_fp8": span(lambda r: blackwell(r) and model(r) == "llama-3.1-405b"
                                       and r.run["job"]["precision"] in ("fp8-current", "mxfp8")),
            "h100_405b": span(lambda r: not blackwell(r) and model(r) == "llama-3.1-405b"),
            "blackwell_8b_70b": span(lambda r: blackwell(r)
                                     and model(r) in ("llama-3.1-8b", "llama-3.1-70b")),
            "b200_8b": span(lambda r: r.run["hardware"]["gpu"].startswith("B200")
                            and model(r) == "llama-3.1-8b")}


def _blackwell_405b_lines(rows: list[Row]) -> list[str]:
    """Issue 30's Blackwell 405B rows: what was checked (:data:`BLACKWELL_405B_CHECKED`), each
    row beside its ratio with every TP collective exposed (:func:`predict`, ``tp_overlap``
    False) -- the size a failing overlap would have, not a prediction."""
    spans = _ratio_spans(rows)
    out = ["", "## Llama 3.1 405B on Blackwell: what was checked", "",
           f"These rows' FP8-CS and MXFP8 ratios ({spans['blackwell_405b_fp8']}) read more "
           f"optimistic than the H100 405B rows ({spans['h100_405b']}) and the Blackwell 8B / "
           f"70B rows ({spans['blackwell_8b_70b']}). Each mechanism their Megatron-Bridge recipes "
           "could pay for, with what was "
           "found (sources in `BLACKWELL_405B_CHECKED`); none is charged beyond what the table "
           "above already times, and what these rows pay that gpuplan does not time is still "
           "unknown.", ""]
    out += [f"- {what}: " + found.replace("{h100_405b}", spans["h100_405b"]).replace(
        "{b200_8b}", spans["b200_8b"]) + "." for what, found in BLACKWELL_405B_CHECKED]
    out += ["", "| run | TP overlap (recipe) | ratio | ratio, every TP collective exposed |",
            "|---|---|---|---|"]
    for r in blackwell_405b(rows):
        off = predict(r.run, tp_overlap=False)
        out.append(f"| `{r.run['id']}` | {'on' if tp_overlap_of(r.run) else 'off'} | "
                   f"{r.predicted / r.measured:.2f} | {off.predicted / off.measured:.2f} |")
    return out


def mxfp8_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(MXFP8 row, FP8-CS row) pairs of one table, GPU and model, both predicted."""
    def key(r: Row) -> tuple:  # the GPU too: from 26.02.01 a table holds every system
        return (r.run["source"]["table"], r.run["model"]["catalog"], r.run["hardware"]["gpu"])
    cs = {key(r): r for r in rows if r.predicted is not None
          and r.run["job"]["precision"] == "fp8-current"}
    return [(r, cs[key(r)]) for r in rows if r.predicted is not None
            and r.run["job"]["precision"] == "mxfp8" and key(r) in cs]


def _mxfp8_lines(rows: list[Row]) -> list[str]:
    """Issue 30's MXFP8 rows beside their FP8-CS twins: what was checked
    (:data:`MXFP8_CHECKED`) and each pair's MXFP8 / FP8-CS tokens/s, measured and predicted."""
    out = ["", "## MXFP8 beside FP8 current scaling: what was checked", "",
           "Each cost an MXFP8 step runs that an FP8-CS one does not, read in Transformer "
           "Engine at the 25.11 and 26.02 pins (sources in `MXFP8_CHECKED`). What the 25.11 "
           "pairs pay beyond these is still unknown.", ""]
    out += [f"- {what}: {found}." for what, found in MXFP8_CHECKED]
    out += ["", "| MXFP8 run | FP8-CS twin | layouts (TP/PP/CP/VP) | measured MXFP8 / FP8-CS | "
            "predicted |", "|---|---|---|---|---|"]
    for mx, cs in mxfp8_pairs(rows):
        lay = [" / ".join(str(r.run["job"].get(k) or "-") for k in ("tp", "pp", "cp", "vp"))
               for r in (mx, cs)]
        out.append(f"| `{mx.run['id']}` | `{cs.run['id']}` | "
                   f"{lay[0] if lay[0] == lay[1] else ' vs '.join(lay)} | "
                   f"{mx.measured / cs.measured:.3f} | {mx.predicted / cs.predicted:.3f} |")
    return out


#: What was read in Megatron-Core and Transformer Engine for the runs that planned over their
#: GPU's memory (issue 30), each term beside what gpuplan counted before; printed under the
#: memory table. The accounting fixes live in the megatron engine profile (engines/profiles.py
#: moe_experts, narrow_shard, proj_original_input) and memory/activations/blocks.py.
MEMORY_CHECKED = (
    ("the routed experts' activations", "counted as transformers' grouped_mm path until this "
     "note (the gathered rows and the down projection's output kept in 16 bits, the experts' "
     "GEMM inputs unquantized: 4h + 6 I_moe bytes a routed copy); Megatron-Core's TEGroupedMLP "
     "keeps fc1's input (quantized under FP8), fc1's output (the fused weighted SwiGLU's "
     "input) and fc2's input, and its permute and unpermute only index maps (moe/experts.py "
     "TEGroupedMLP.forward, fusions/fused_bias_swiglu.py WeightedSwiGLUFunction, "
     "moe/token_dispatcher.py at NVIDIA/Megatron-LM@0d8e0714, the v0.2.0 pin; b0cc2706 for "
     "v0.3.0): h + 5 I_moe under FP8, 2h + 6 I_moe under BF16 (Qwen3-30B-A3B, MXFP8: "
     "102,400 -> 47,104 B a token a layer); the router saves its 16-bit input, its GEMM in moe_router_dtype "
     "(moe_utils.py RouterGatingLinearFunction), not an fp32 copy (DeepSeek-V3: 14 KB)"),
    ("the column-parallel inputs under sequence parallelism", "the 16-bit norm output shard "
     "until this note; TE's LayerNormLinear saves the norm's input, rsigma and the quantized "
     "local shard (module/layernorm_linear.py lines 186-269, 400-458 at "
     "NVIDIA/TransformerEngine@70f53666): h / TP bytes a token fewer a norm"),
    ("the attention output projection's input", "a quantized copy until this note; under "
     "FP8-CS, blockwise and MXFP8 Megatron-Core sets set_save_original_input(linear_proj), so "
     "it saves the core attention's output the fused attention keeps already "
     "(transformer/attention.py lines 207-218 @0d8e0714): heads x head_dim / TP bytes a token "
     "fewer a layer; with moe_act and FP8, linear_fc2 saves its 16-bit input too, which the "
     "recompute discards"),
    ("the model states", "as Megatron-Core holds them: BF16 gradients (the Llama 3.1, "
     "DeepSeek and Qwen3 performance scripts set grad_reduce_in_fp32 False: scripts/"
     "performance/configs at NVIDIA-NeMo/Megatron-Bridge@7af9601c, 21b02e0c, df0289c1), FP8 / MXFP8 parameters alone under fp8_param_gather, "
     "the fp32 master and Adam states of the experts sharded over EP x ETP x PP's data "
     "group (world / (EP x ETP x PP): 1 for the 8-GPU Qwen3-30B-A3B runs); no recipe of these "
     "rows sets activation offloading, precision-aware optimizer states (but the BF16 "
     "DeepSeek-V3 row's, recorded, not modelled) or recompute beyond the table's: unchanged"),
    ("the NeMo 24.07 Llama 2 70B SFT run (16 H100, TP4 x PP4: DP 1, so the distributed "
     "optimizer shards nothing)", "100.3 GB until its launcher script was read: BF16 weights "
     "beside the FP8 copy and transpose (2 + 2 B a weight), 16-bit grads (2 B), fp32 master "
     "and Adam states (4 + 8 B), 4 micro-batches of 1F1B activations: 18 B x 4.34B weights a "
     "GPU = 78 GB before 19.5 GB of activations. The run's own script (NeMo-Framework-Launcher "
     "examples/peft/llama/h100/70b_2node.sh over conf/peft/llama/sft.yaml, tag 24.07 "
     "8325688d: 2 nodes x 8, MBS 1, GBS 32, TP4 PP4, packed 4096, the table's row) sets "
     "fp8_params (TE FP8 weights, no BF16 copy: fp8_param_gather), distributed_fused_adam "
     "with dtype bf16 and grad_sync_dtype bf16 (Apex keeps exp_avg, exp_avg_sq and, as "
     "fp8_params makes NeMo set store_params, the master in that dtype: apex distributed_fused"
     "_adam.py lines 449-476 @f8e60c47, NeMo megatron_base_model.py 802-812 @e938df32), VP 20, "
     "sequence parallelism, no recompute: with fp8_param_gather, bf16 Adam states and "
     "interleaved:20 it plans 75.1 GB (weights 8.7 -> 0.1 GB, Adam 34.8 -> 17.4 GB, "
     "activations 19.5 -> 20.2 GB under VP), and with the master in that bf16 too "
     "(master_weights bf16) 66.4 GB (master 17.4 -> 8.7 GB). Still counted high: the amax "
     "histories at 1024 (the script's fp8_amax_history_len 512); the grads' 16-bit buffer "
     "is the run's grad_sync_dtype. SFT freezes nothing (peft_scheme null): every weight has grads and states. The 7B and 13B "
     "SFT rows' scripts (7b_1node.sh, 13b_1node.sh: VP 10) set the same, recorded too"),
    ("the NeMo 24.07 pre-training rows' master copy (GPT3-20B: 85.2 GB planned on 85.0 until "
     "this note)", "counted as a 4 B fp32 copy a weight. Their launcher configs "
     "(NeMo-Framework-Launcher conf/training/{gpt3,llama,nemotron}/*.yaml at 24.07, 8325688d; "
     "each row's `launcher`, lines cited) state precision bf16, megatron_amp_O2 true and optim "
     "distributed_fused_adam with no dtype, and their H100 FP8 scripts add fp8=true (and "
     "grad_sync_dtype bf16, not the Nemotron 8B/22B ones) and no fp8_params: NeMo then sets "
     "store_params False and store_param_remainders True (megatron_base_model.py lines 790-812 "
     "@e938df32, the same at r2.0.0rc1), and Apex keeps an int16 remainder shard, the low 16 "
     "bits of each fp32 master whose top 16 are the bf16 weight (distributed_fused_adam.py "
     "lines 458-464, 659-671 @f8e60c47): master_weights remainder, 2 B a weight beside it "
     "(`master_fields`). GPT3-20B (DP 32) 85.2 -> 84.6 GB, now within its 85.0; GPT3-175B "
     "74.6 -> 71.8 / 83.4 -> 82.7, Llama 2 7B 69.8 -> 68.1, 13B 59.5 -> 57.8, 70B 63.0 -> "
     "60.8, Llama 3 8B 81.2 -> 79.2, 70B 66.7 -> 64.4, GPT3-5B 60.3 -> 60.2, Nemotron 8B "
     "68.4 -> 68.2, 22B 62.8 -> 62.1; their optimizer step reads the weight and its remainder "
     "(26 B a parameter, 28 with the fp32 copy): speed +0-1 tok/s/GPU. Nemotron-4 340B (95.5 GB "
     "on 85.0 until branch nemo340mem): nemotron_340b.yaml (lines 122, 153, 158-162) sets "
     "distributed_fused_adam dtype bf16 and grad_sync_dtype bf16, no fp8_params, "
     "fp8_amax_history_len 1024 and activations_checkpoint_granularity selective; its layout "
     "(PP 12 x VP 8, 768 nodes) is not the row's (PP 8 x VP 12), as the 175B, Nemotron 8B/22B "
     "and Llama 3 70B yamls' VP or MBS differ from their rows, whose optimizer blocks are read: "
     "so the 340B's is read too, the layout and batch the table's. dtype bf16 = the bf16 O2 "
     "model's: NeMo sets store_params False (megatron_base_model.py lines 802-807) and Apex "
     "keeps no params_shard, steps the bf16 weights in place and keeps exp_avg / exp_avg_sq in "
     "bf16 (distributed_fused_adam.py lines 449-476): master_weights none, optimizer_states "
     "bf16, master 11.5 -> 0 GB, Adam 23.1 -> 11.5 GB. Selective granularity is Megatron-Core's "
     "recompute_granularity (megatron_base_model.py lines 533, 553), the core attention "
     "checkpointed (megatron/core/transformer/attention.py line 95 at core_r0.9.0, the tag "
     "NeMo's Dockerfile.ci names at e938df32): each layer's attention output (4096 x 96 x 192 "
     "/ TP 8 x 2 B) and softmax statistics (4096 x 12 heads x 4 B) dropped, 19.1 MB a layer, "
     "the worst stage's 12 layers x 7.42 micro-batches in flight: activations 21.8 -> 20.1 GB. "
     "Unchanged: the grads (grad_sync_dtype bf16: 2 B), the BF16 weights beside the FP8 copy "
     "and transpose (no fp8_params), the amax histories (1024, as counted), sequence "
     "parallelism and MBS 1. 95.5 -> 70.7 GB; 328 -> 330 tok/s/GPU (the step reads no fp32 "
     "master; the speed model times no re-run of the fused core under selective, "
     "compute/flops.py recompute_ops: by hand a causal attention forward, 0.15 of 6.9 GFLOP a "
     "token a layer, ~0.7% of the step, not charged). The Nemotron 8B and 22B yamls and "
     "scripts set no grad_sync_dtype (nemotron_8b.yaml lines 170-186, nemotron_22b.yaml "
     "172-188, *_fp8.sh): Apex takes its dtype, fp32 (distributed_fused_adam.py lines 586-587), "
     "and allocates its contiguous grad buffer (contiguous_grad_buffer True) in it (lines "
     "1099-1118), NeMo's main_grad a view of it (nemo/core/optim/distributed_adam.py line 496): "
     "grad_dtype fp32 (`grad_fields`), 4 B a weight unsharded where 2 were counted. Nemotron "
     "8B 68.2 -> 78.1 GB (grads 8.5 -> 17.1 GB; the overhead's ZeRO bucket, 5e8 elements, "
     "1.0 -> 2.0 GB at 4 B, and its fragmentation, 5% of the grads, +0.4 GB), 22B 62.1 -> "
     "69.5 GB (grads 6.1 -> 12.2 GB, overhead +1.3 GB); speed 15,073 -> "
     "14,816 and 5,024 -> 4,967 tok/s/GPU (the wgrad accumulation, the optimizer's read and the "
     "data-parallel reduce-scatter in fp32). The other NeMo pre-training rows' scripts set "
     "grad_sync_dtype bf16: unchanged. Not modelled: Apex's reduce-scatter outputs "
     "(sync_grads_shard, distributed_fused_adam.py lines 1853-1860, kept as grads_shard until "
     "zero_grad, line 1498), the grads / DP in the sync dtype (340B 5.8 GB, 22B 1.5 GB, 8B "
     "0.5 GB), live from each chunk's grad sync in the cool-down, as the activations drain, "
     "to the step; the Llama 2 13B and 70B yamls' fp8_amax_history_len 1 (line 133), counted "
     "at 1024 (3 x 1026 x 4 B a linear: under 4 MB a GPU)"),
    ("the DeepSeek-V3 report's own run (H800)", "162.6 GB (stage 0) until its Job took the "
     "report's memory sentences (DEEPSEEK_V3_MEMORY: sec. 3.2.3 RMSNorm and MLA up-projections "
     "recomputed; sec. 3.3.3 the MoE SwiGLU output recomputed from its FP8-cached input, the "
     "attention output in E5M6, BF16 AdamW moments, FP32 gradients) and DualPipe's rank was "
     "planned as deepseek-ai/DualPipe@3da1bbe's step runs it (rank i keeps 16 - i micro-batches "
     "of stage i and i + 1 of stage 15 - i, PP + 1 in all; the MTP module's one in flight, not "
     "17; the twin stage's FP8 weight copies and the MTP states at the last stage's bytes, not "
     "the pair's): 90.7 GB on the worst rank (stage 15 with stage 0: weights 12.23 -> 9.87 GB "
     "with 0.82 -> 5.14 GB of FP8 copies, 16-bit -> FP32 gradients 12.23 -> 19.74 GB, master "
     "1.15 -> 0.98, Adam 2.30 -> 0.98, activations 101.2 -> 43.5 GB; stage 0's rank 162.6 -> "
     "88.8, the middle ranks 149.3 -> 83.3, within the 85.9 GB). Still over by 4.8 GB, and not "
     "closed: what the report does not say is not taken. Its split of the 61 layers "
     "(Megatron-Bridge's PP16 first 4 / last 1, assumed) puts stage 0's three dense layers on "
     "the end ranks, whose SwiGLU inputs the report caches in FP8 only 'in MoE' (3.3.3 (2)): in "
     "FP8 too they would hold 16 x 3 x 4096 x 36,864 B = 7.2 GB less (~83.4 GB); sec. 3.3.1's "
     "'efficient sharding across multiple DP ranks' of the master, weight gradients and optimizer "
     "states would shard the 19.7 GB of FP32 gradients too, but sec. 3.2 names ZeRO-1; the two "
     "DualPipe copies of a stage's states may share one ZeRO group (unstated); the expected "
     "overhead (5% allocator fragmentation, 4.3 GB; 1 GB of ZeRO buckets) is PyTorch's and "
     "DeepSpeed's, not HAI-LLM's, whose allocator the report does not describe"),
)


def memory_of(run: dict) -> tuple[int, int, int] | None:
    """(gpuplan's per-GPU training total of the run on its GPU, the same with the FP8 weights
    reckoned as Hopper holds them -- the plan of the job with no GPU --, the GPU's memory);
    None where the run is not expressible or refused."""
    if _not_expressible(run):
        return None
    try:
        job = deepseek_job(run, []) if run["kind"] == "train_gpu_hours" else job_of(run, [])
        gpu, model = get_gpu(run["hardware"]["gpu"]), load_model(run["model"]["catalog"])
        return (train_memory(model, job, gpu=gpu).total_bytes,
                train_memory(model, job).total_bytes, gpu.memory_bytes)
    except GpuplanError:
        return None


#: The NeMo 24.07 LoRA rows (Llama 2 7B / 13B at TP1 PP1, 70B at TP2 PP4; NeMo's LoRA defaults
#: and the launcher scripts in their ``job.lora``), what was read for them and what gpuplan
#: cannot express, sized with gpuplan's own times at the commit that added this (the 7B row: a
#: step of 16,384 tokens a GPU, 0.746 s predicted). (candidate, finding) pairs.
LORA_CHECKED = (
    ("LoRA under the TP/PP layout (the 70B row)",
     "fixed with these rows: compute.parallel built each rank's micro-batch as full training "
     "(weight gradients charged, no adapter passes); it now times dX only and the adapters at "
     "the rank's width (lora_rank_tensors), 2,000 -> 2,518 tok/s/GPU. NeMo's adapters are "
     "megatron.core.tensor_parallel linears that Transformer Engine's fp8_autocast does not "
     "reach, so they run BF16 beside the base's FP8 GEMMs (NVIDIA/NeMo@579983fb "
     "nemo/collections/nlp/modules/common/megatron/adapters/parallel_adapters.py), as timed"),
    ("the packed SQuAD sequences' attention",
     "not expressible: NeMo runs a packed micro-batch's attention per sample (PackedSeqParams "
     "with cu_seqlens, qkv_format 'thd': nemo/collections/nlp/models/language_modeling/"
     "megatron_gpt_model.py lines 1246-1270 at NVIDIA/NeMo@579983fb), where the Job costs one "
     "causal 4,096 sequence: 0.22 s of the 7B LoRA step (29%; the SFT step's too). A LoRA step "
     "drops only the weight gradients, so that fixed attention weighs more in it: the 7B pair "
     "(same layout, GPUs and batch) measures LoRA over SFT 25,206 / 17,120 = 1.47 (a step 0.307 s "
     "shorter), near the 1.5 of a step that is all linear GEMMs; gpuplan {pair}. The Job has "
     "no per-document attention and the runs file no sample-length distribution of packed "
     "SQuAD, so nothing is charged for it"),
    ("fp8_params (the launcher scripts' ++peft.model.fp8_params=true)",
     "taken as fp8_param_gather, which gpuplan reads for full training only: the frozen base is "
     "counted at 2 B a block weight with no narrow copy, on H100 the bytes of its FP8 weight and "
     "transpose; the one FP8 weight cast a step is charged as for a BF16 base (9.1 ms of the "
     "7B step, 1.2%), where FP8 parameters are read as stored and at most have their "
     "transpose refreshed (not checked at the 24.07 container's Transformer Engine): at most "
     "1.2% pessimistic, not removed"),
    ("the 70B adapter's own sequence-parallel exchange",
     "not charged: under sequence parallelism the adapter gathers its input itself "
     "(ParallelLinearAdapter.forward gather_from_sequence_parallel_region, a reduce-scatter in "
     "the backward) unless TE's linear_qkv returns the gathered LayerNorm output, which "
     "MCoreSelfAttentionMixin asks for only without userbuffers' all-gather overlap "
     "(return_layernorm_output_gathered, adapters/mcore_mixins.py at NVIDIA/NeMo@579983fb), "
     "and the 70B script turns ub_tp_comm_overlap on. 4,096 x 8,192 x 2 B = 67 MB each way at TP "
     "2, 0.086 ms by gpuplan's NCCL times: 20 layers x 32 micro-batches, 0.12 s of the 6.5 s "
     "step (1.9%), if the run had sequence parallelism on, which neither sft.yaml nor the "
     "script sets (the base checkpoint's config decides; the Job takes it on under TP)"),
    ("NeMo's one fused QKV adapter",
     "expressed: the Job's linear_qkv target is q, k and v as one linear (A hidden x 32, B 32 x "
     "the fused output), not three adapters; its eager scale and add (two kernels, "
     "ParallelLinearAdapter.forward and MCoreSelfAttentionMixin) are timed as the megatron "
     "runtime's one fused kernel (3 accesses an output element, not 5): eager's would add "
     "about 9 ms (1.2%) to the 7B step; not charged"),
)


def _lora_lines(rows: list[Row]) -> list[str]:
    """The LoRA rows' notes (:data:`LORA_CHECKED`), the 7B LoRA / SFT pair's predicted ratio
    computed from the rows."""
    by = {r.run["id"]: r for r in rows}
    lo = by.get("nemo-24.07-dgx-h100-llama2-7b-lora-fp8-delayed-x8")
    sft = by.get("nemo-24.07-dgx-h100-llama2-7b-sft-fp8-delayed-x8")
    if lo is None or sft is None or lo.predicted is None or sft.predicted is None:
        return []
    pair = f"{lo.predicted:,.0f} / {sft.predicted:,.0f} = {lo.predicted / sft.predicted:.2f}"
    return (["", "## NeMo 24.07 LoRA rows", "",
             "NeMo's LoRA defaults where the table states none (rank 32, alpha 32, no dropout, "
             "one adapter on linear_qkv) and the launcher scripts' settings, each row's "
             "`job.lora` with file and commit. Checked (`LORA_CHECKED`):", ""]
            + [f"- {what}: {found.format(pair=pair)}." for what, found in LORA_CHECKED])


def _memory_lines(rows: list[Row]) -> list[str]:
    """Each run's training memory as ``fit`` plans it on the run's GPU: every run ran, so a plan
    over the GPU's memory over-counts it (issue 30: the FP8 weight copies as Transformer Engine
    keeps them on that GPU, :func:`gpuplan.fp8.weight_copies`)."""
    planned = [(r, memory_of(r.run)) for r in rows]
    planned = [(r, got) for r, got in planned if got is not None]
    fit = sum(own <= usable for _, (own, _, usable) in planned)
    fit_hopper = sum(hopper <= usable for _, (_, hopper, usable) in planned)
    out = ["", "## Memory: each run's plan on its GPU", "",
           "gpuplan's per-GPU training total of each run's Job (`fit`'s, at the expected "
           "overhead) on the run's GPU, beside the same with the per-tensor FP8 weights' "
           "transposes kept as on Hopper (the plan of the job with no GPU: B200 and GB200 run "
           "FP8 GEMMs of any layout, so Transformer Engine keeps none there). Every run ran: a "
           "plan over the GPU's memory over-counts that run.", "",
           f"{fit} of {len(planned)} planned runs fit their GPU ({fit_hopper} with Hopper's "
           "transposes everywhere).", "",
           "| run | GPU | recipe | planned GB | with Hopper's transposes | GPU GB | fits |",
           "|---|---|---|---|---|---|---|"]
    for r, (own, hopper, usable) in planned:
        out.append(f"| `{r.run['id']}` | {r.run['hardware']['gpu']} | "
                   f"{r.run['job']['precision']} | {own / 1e9:.1f} | "
                   f"{'same' if hopper == own else f'{hopper / 1e9:.1f}'} | {usable / 1e9:.1f} | "
                   f"{'yes' if own <= usable else '**no**'} |")
    out += ["", "Checked term by term for the runs planned over their GPU (`MEMORY_CHECKED`):",
            ""]
    out += [f"- {what}: {found}." for what, found in MEMORY_CHECKED]
    return out


def rows() -> list[Row]:
    return [predict(run) for run in json.loads(RUNS.read_text())["runs"]]


def main(argv: list[str]) -> int:
    text = render(rows())
    if "--write" in argv:
        OUT_MD.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
