"""gpuplan's speed estimate against the published measured runs (benchmarks/published/runs.json).

Every speed-kind run (train_throughput, train_mfu, decode, serving) is either expressed as a gpuplan
job -- its model, GPU, engine (the run's ``engine``) and job fields, each mapped from the run's own
fields, with the assumptions stated per row; a TP/PP/CP layout from :data:`LAYOUTS` -- and
predicted, or listed with the reason gpuplan cannot express it (a server's continuous batching).
:func:`job_of` builds that one Job; tests/unit/test_published_layouts.py checks the same Job's
speed (this file's prediction) and memory. The runtime is the source's where it states one, else
the engine's. The calibrate and holdout splits are
summarized separately: the median and worst |predicted / measured - 1|. Nothing here is tuned: the
estimate runs with its stated defaults and no stored bench run (``measured=None``).

Each split is reported by source group and by mechanism (:func:`mechanism_of`, the first of
:data:`MECHANISMS` a run's job falls under), with its worst ten rows, the estimate's breakdown
beside what the measured figure implies (:func:`diagnose`) and what each misses
(:data:`KNOWN_GAPS`, the estimate's known omissions checked against the run).

Run:  PYTHONPATH=src python benchmarks/validate_speed.py [--write]
(--write regenerates benchmarks/validate_speed.md and benchmarks/validate_speed_residuals.json)
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import validate_capacity  # benchmarks/: the serving rows' capacity() call, shared
from gpuplan.compute import estimate_speed
from gpuplan.compute.device import (MEASURED_CLOCK_CURVES, POWER_SIBLINGS,
                                    measured_training_share, power_clock_fraction)
from gpuplan.engines.profiles import get_engine, runtime_of
from gpuplan.formats import get_optimizer
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import Topology, topology_for
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import architecture_from_config, load_model, model_from_config_bytes
from gpuplan.models._types import Architecture

HERE = Path(__file__).resolve().parent
RUNS = HERE / "published" / "runs.json"
OUT_MD = HERE / "validate_speed.md"
#: p10-p90 of predicted/measured on the calibrate split, read by gpuplan.compute.residuals
OUT_RESIDUALS = HERE.parent / "src" / "gpuplan" / "compute" / "speed_residuals.json"
COMMAND = "PYTHONPATH=src python benchmarks/validate_speed.py --write"

SPEED_KINDS = ("train_throughput", "train_mfu", "decode", "serving")

#: Source groups issue 31 added to the holdout out of sample: their runs were written into
#: runs.json before any prediction of them was read (benchmarks/published/README.md).
OUT_OF_SAMPLE_GROUPS = ("torchtitan", "autoawq", "ibm-fsdp-blog")


@dataclass(frozen=True)
class Row:
    run: dict
    predicted: float | None
    measured: float
    unit: str
    config: str
    why_not: str = ""
    assumptions: tuple[str, ...] = ()
    runtime: str = ""
    """The job's engine and the runtime it ran under (the engine's, unless the source states
    one)."""
    mechanism: str = ""
    """What dominates the run's time, as :func:`mechanism_of` reads it from the job."""
    diagnosis: str = ""
    """The estimate's own breakdown beside what the measured figure implies (:func:`diagnose`)."""
    host_bound: bool = False
    """The estimated step waits on the host (its launches outlast the device's work)."""
    comm_share: float = 0.0
    """Exposed communication's share of the estimated step."""

    @property
    def ratio(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.measured


# --------------------------------------------------------------------------------------------------
# Mapping a run onto a gpuplan job


def _shape_arch(model: dict) -> Architecture:
    """The run's stated shape: a Llama-style one (gated MLP, RoPE, RMSNorm) through the llama
    config reader, which gives its tensors (what LoRA targets need); others built directly."""
    s = model["shape"]
    gated = s.get("mlp") == "gated"
    rope = s.get("position") in ("rope", "rotary")
    if gated and rope and s.get("norm") == "rmsnorm":
        return architecture_from_config(dict(
            model_type="llama", hidden_size=s["hidden"], num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
            head_dim=s["hidden"] // s["heads"], intermediate_size=s["ffn"],
            vocab_size=s["vocab"], max_position_embeddings=s["seq"],
            tie_word_embeddings=bool(s.get("tied_embeddings", True))), name=model["name"])
    return Architecture(
        name=model["name"], family="llama" if gated else "mpt", kind="decoder",
        hidden_size=s["hidden"], num_layers=s["layers"], num_heads=s["heads"],
        num_kv_heads=s["kv_heads"], head_dim=s["hidden"] // s["heads"],
        intermediate_size=s["ffn"], vocab_size=s["vocab"], max_position_embeddings=s["seq"],
        tie_word_embeddings=bool(s.get("tied_embeddings", True)), mlp="gated" if gated else "gelu",
        activation="silu" if gated else "gelu", norm=s.get("norm", "layernorm"),
        position="rotary" if rope else "learned")


def _gpt_model(model: dict):
    """A GPT shape (learned positions, LayerNorm, GeLU MLP, untied head unless stated) with its
    tensors, as transformers' GPT-2 config builds it: what DeepSpeed ZeRO-3's coordinator
    replay needs (tests/unit/test_published_layouts.py times the same rows on the same)."""
    s = model["shape"]
    config = {"model_type": "gpt2", "n_embd": s["hidden"], "n_layer": s["layers"],
              "n_head": s["heads"], "n_inner": s["ffn"], "vocab_size": s["vocab"],
              "n_positions": s["seq"], "activation_function": "gelu_new",
              "tie_word_embeddings": bool(s.get("tied_embeddings"))}
    return model_from_config_bytes(json.dumps(config).encode(), name=model["name"])


_PRECISION = {"amp_bf16": "mixed-bf16", "amp-fp16": "amp-fp16", "fp32": "fp32"}
_OPTIMIZER = {"PagedAdamW8bit": "paged-adamw-8bit", "Adam8bit": "adamw-8bit",
              "adafactor": "adafactor"}


def _precision(job: dict, runtime: str) -> tuple[str, list[str]]:
    p = str(job.get("precision") or "")
    notes = []
    if p == "amp-fp16" and "APEX" in runtime:
        # apex amp.initialize(opt_level="O2") (DLE run_squad.py / run_pretraining.py at the pinned
        # commit): fp16 weights and gradients, fp32 master weights in the optimizer, dynamic loss
        # scaling -- no autocast, no per-step weight casts (apex docs, "opt_level O2")
        out = "mixed-fp16"
        notes.append("APEX AMP O2 = mixed-fp16 (fp16 weights, fp32 master; no autocast)")
    elif p in _PRECISION:
        out = _PRECISION[p]
    elif p == "bf16" and "composer" in runtime:
        out = "mixed-bf16"  # FSDP PURE: bf16 params in compute, fp32 sharded master
        notes.append("Composer FSDP PURE bf16 = mixed-bf16 (fp32 sharded master)")
    elif p == "bf16":
        out = "bf16"
    elif "fp16" in p:
        out = "mixed-fp16"
    else:
        out = "mixed-bf16"
        notes.append(f"precision {p!r} read as mixed-bf16")
    return out, notes


def _optimizer(job: dict) -> tuple[str, list[str]]:
    o = str(job.get("optimizer") or "")
    for key, name in _OPTIMIZER.items():
        if key in o:
            return name, []
    if "LAMB" in o:
        return "lamb", []
    return "adamw", []


def _optimizer_impl(run: dict, precision: str, notes: list[str]) -> str | None:
    """How the run's optimizer step runs, where its source's code says (None: torch's default,
    foreach on a GPU). transformers' AdamW (``adamw_hf``) is a per-parameter Python loop
    (transformers/optimization.py, AdamW.step); Megatron-LM's Adam is apex FusedAdam
    (megatron/optimizer: ``from apex.optimizers import FusedAdam as Adam``); NVIDIA DLE BERT
    (run_squad.py / run_pretraining.py at the pinned commit) steps apex FusedAdam under --fp16
    and FusedLAMB in pretraining, BertAdam (optimization.py: a per-parameter loop) otherwise."""
    j = run["job"]
    opt, rt = str(j.get("optimizer") or ""), str(j.get("runtime") or "")
    if "fused=True" in opt:
        notes.append("AdamW(fused=True) (fused)")
        return "fused"
    if "adamw_hf" in opt:
        notes.append("adamw_hf: transformers AdamW, a per-parameter loop (for-loop)")
        return "for-loop"
    if "Megatron" in rt:
        notes.append("Megatron's Adam is apex FusedAdam (fused)")
        return "fused"
    if "torchtitan 9dec370" in (run.get("notes") or ""):
        # torchtitan at the runs' commit: --optimizer.fused is a store_true flag, off by default
        # (torchtitan/config_manager.py @9dec370), and no train_configs/llama3_*.toml sets it;
        # torchtitan/optimizer.py passes foreach = not fused -- not the engine profile's fused
        # default, which is today's torchtitan
        notes.append("torchtitan 9dec370: AdamW foreach (--optimizer.fused off by default then)")
        return "foreach"
    if "APEX" in rt:
        if "LAMB" in opt or precision != "fp32":
            notes.append("DLE: apex FusedAdam / FusedLAMB (fused)")
            return "fused"
        notes.append("DLE fp32 fine-tuning: BertAdam, a per-parameter loop (for-loop)")
        return "for-loop"
    return None


def _stated_runtime(text: str) -> str:
    """The runtime the source states in its own words, else ``auto``: the run's engine decides
    (benchmarks/published/runs.json names the engine of every run; Megatron trains under
    ``compile``, TensorRT-LLM serves under ``cudagraphs``, the rest run eager). Hand-fused modules
    (AutoAWQ's ``fuse_layers=True``) are ``compile``: gpuplan's runtime vocabulary times an
    engine's hand-fused kernels as it times torch.compile's (engines/profiles.py, ``runtime``)."""
    t = text.lower()
    if t.startswith("hand-fused"):
        return "compile"
    if "without torch.compile" in t or t.startswith("eager"):
        return "eager"
    if "cuda graphs" in t:
        return "cudagraphs"
    if "torch.compile" in t:
        return "compile"
    return "auto"


def _not_expressible(run: dict) -> str:
    job, kind = run["job"], run["kind"]
    if kind == "serving":
        return ("a server's continuous batching under unbounded concurrency: the batch is the "
                "engine's choice (trtllm-bench's offline max-throughput; not yet run through "
                "gpuplan.capacity, whose \"INF\" load validate_capacity.py reads)")
    if "not stated" in str(job.get("checkpointing")):
        return ("activation checkpointing of a fraction of the blocks, the fraction not stated "
                "(gpuplan checkpoints none, the attention core or every block)")
    if job.get("tp") is None and kind == "train_mfu" and run["id"] not in LAYOUTS:
        return "layout (TP/PP) not transcribed"
    return ""


#: The layouts of the published runs whose record leaves a choice open -- the one table of them:
#: tests/unit/test_published_layouts.py reads its cases' fields from here (the sources and the
#: reasons are there): run id -> (Job fields, --tp-comm-overlap, the assumption as the table
#: states it). The
#: Megatron-Core README rows are :func:`_megatron_layout`. The Llama 3 rows run the paper's
#: pipeline as that file does (one-layer chunks, the embedding and the loss parts of their own).
LAYOUTS: dict[str, tuple[dict, bool, str]] = {
    "llama3-405b-h100-x8192-s8192": (
        {"tp": 8, "pp": 16, "batch": 1, "grad_accum": 32, "seq": 8192, "zero": 2,
         "sequence_parallel": True, "pp_schedule": "interleaved:8", "pp_embedding_part": True, "pp_loss_part": True, "inter_node": "roce-400",
         "precision": "mixed-bf16"}, False,
        "TP8 PP16 DP64 (Table 4), 32 sequences per DP group = micro-batch 1 x 32; the paper's "
        "pipeline (sec. 3.3.2: one layer taken from the first and last stages, the embedding and "
        "the loss chunks of their own): one-layer chunks, interleaved:8 with the embedding and "
        "loss as pipeline parts, as tests/unit/test_published_layouts.py; FSDP without resharding after forward = "
        "ZeRO-2; bf16 with fp32 master (mixed-bf16); RoCE 400 Gb/s per GPU"),
    "llama3-405b-h100-x16384-s8192": (
        {"tp": 8, "pp": 16, "batch": 1, "grad_accum": 16, "seq": 8192, "zero": 2,
         "sequence_parallel": True, "pp_schedule": "interleaved:8", "pp_embedding_part": True, "pp_loss_part": True, "inter_node": "roce-400",
         "precision": "mixed-bf16"}, False,
        "TP8 PP16 DP128 (Table 4), 16 sequences per DP group = micro-batch 1 x 16; the paper's "
        "pipeline as the 8,192-GPU row (interleaved:8, embedding and loss parts); ZeRO-2; mixed-bf16; RoCE 400 Gb/s "
        "per GPU"),
    "llama3-405b-h100-x16384-s131072": (
        {"tp": 8, "pp": 16, "cp": 16, "batch": 1, "grad_accum": 16, "seq": 131072, "zero": 2,
         "sequence_parallel": True, "pp_schedule": "interleaved:8", "pp_embedding_part": True, "pp_loss_part": True, "inter_node": "roce-400",
         "precision": "mixed-bf16"}, False,
        "TP8 CP16 PP16 and DP 8, which fills 16,384 GPUs (the recorded DP 4 does not); 16 "
        "sequences per DP group = micro-batch 1 x 16; the paper's pipeline as the 8K rows "
        "(interleaved:8, embedding and loss parts); ZeRO-2; mixed-bf16; RoCE 400 Gb/s per GPU"),
    "bloom176b-a100-x384-iter85376": (
        {"tp": 4, "pp": 12, "batch": 2, "grad_accum": 128, "seq": 2048, "zero": 1,
         "checkpointing": "full", "pp_embedding_part": True, "pp_loss_part": True,
         "inter_node": "50Gb/s", "precision": "mixed-bf16"}, False,
        "TP4 PP12 DP8, micro-batch 2 x 128 = GBS 2048 (tr11 slurm script), 1F1B; partition "
        "'type:transformer|embedding' = the embedding and the tied head as pipeline parts; "
        "BF16_Optimizer = ZeRO-1; 4 x 100 Gb/s Omni-Path per 8-GPU node = 50 Gb/s per GPU"),
    "opt175b-a100-x992": (
        {"tp": 8, "pp": 1, "batch": 8, "grad_accum": 1, "seq": 2048, "zero": 2,
         "checkpointing": "full", "distribute_checkpoints": True, "precision": "mixed-fp16"},
        False,
        "metaseq's OPT launcher (facebookresearch/metaseq@f7ffa5f metaseq/launcher/"
        "opt_baselines.py, opt_job_constants.py): model parallel 8 = TP8 over 124 DP ranks, "
        "--ddp-backend fully_sharded --no-reshard-after-forward (its save-dir key says 'zero2'; "
        "ZeRO-2 here, as the Llama 3 rows), --batch-size (2M tokens // 124) // 2048 = 8 with "
        "--update-freq 1 = micro-batch 8 x 1, --checkpoint-activations (full) with "
        "--distribute-checkpointed-activations (split over the TP ranks); 'up to' 147 "
        "TFLOP/s is a peak, its FLOP convention not stated: model FLOP/s"),
    "narayanan2021-gpt1.7b-a100-x32": (
        {"batch": 4, "grad_accum": 4, "seq": 2048, "checkpointing": "full",
         "precision": "mixed-fp16", "inter_node": "200Gb/s"}, False,
        "TP1 PP1 DP32, batch 512 (Table 1) = 16 sequences a GPU: micro-batch 4 x 4 accumulated "
        "(the micro-batch is not stated); HDR InfiniBand = 200 Gb/s per GPU"),
    "narayanan2021-gpt1t-a100-x3072": (
        {"tp": 8, "pp": 64, "batch": 1, "grad_accum": 512, "seq": 2048, "zero": 0,
         "checkpointing": "full", "pp_schedule": "interleaved:2", "precision": "mixed-fp16",
         "inter_node": "200Gb/s"}, False,
        "TP8 PP64 DP6, batch 3072 = micro-batch 1 x 512, interleaved schedule (V = 2 assumed); "
        "HDR InfiniBand = 200 Gb/s per GPU"),
    "korthikanti2022-mtnlg530b-a100-x2240-selective": (
        {"tp": 8, "pp": 35, "batch": 1, "grad_accum": 280, "seq": 2048, "zero": 0,
         "checkpointing": "selective", "sequence_parallel": True, "pp_schedule": "interleaved:3",
         "inter_node": "200Gb/s", "precision": "mixed-bf16"}, False,
        "TP8 PP35 from the paper's Table 3, DP8 fills 2240 GPUs, batch 2240 = micro-batch 1 x "
        "280; interleaved (V = 3 assumed); precision not stated: mixed-bf16 (the Job default, as the layouts test); HDR InfiniBand = 200 Gb/s per GPU"),
    "korthikanti2022-mtnlg530b-a100-x2240-full": (
        {"tp": 8, "pp": 35, "batch": 1, "grad_accum": 280, "seq": 2048, "zero": 0,
         "checkpointing": "full", "pp_schedule": "interleaved:3", "inter_node": "200Gb/s",
         "precision": "mixed-bf16"}, False,
        "TP8 PP35 from the paper's Table 3, DP8, micro-batch 1 x 280; interleaved (V = 3 "
        "assumed), no sequence parallelism; precision not stated: mixed-bf16 (the Job default, as the layouts test); HDR InfiniBand = 200 Gb/s per GPU"),
}


# Narayanan et al. 2021 (arXiv 2104.04473): the Table 1 rows between the 1.7B and the 1T and the
# Table 2 rows, each laid out by one rule (stated in its note): micro-batch 4 without a pipeline
# (as the 1.7B row), 1 with one (as the 1T row), V the smallest >= 2 that divides a stage's
# layers (Megatron requires it); full checkpointing, mixed fp16, HDR InfiniBand.
_NARAYANAN = {"seq": 2048, "checkpointing": "full", "precision": "mixed-fp16",
              "inter_node": "200Gb/s"}
_HDR = "HDR InfiniBand = 200 Gb/s per GPU"


def _smallest_v(stage_layers: int) -> int:
    return next(v for v in range(2, stage_layers + 1) if stage_layers % v == 0)


def _narayanan_tp(tp: int, gpus: int, batch: int) -> tuple[dict, bool, str]:
    """A Table 1 row with tensor parallelism only."""
    dp = gpus // tp
    m = batch // dp // 4
    fields = {"tp": tp, "batch": 4, "grad_accum": m, **_NARAYANAN}
    return fields, False, (f"TP{tp} PP1 DP{dp}, batch {batch} (Table 1) = {batch // dp} sequences "
                           f"a DP rank: micro-batch 4 x {m} (not stated: 4 as the 1.7B row); {_HDR}")


def _narayanan_pp(tp: int, pp: int, layers: int, gpus: int, batch: int,
                  table2: bool = False) -> tuple[dict, bool, str]:
    """A Table 1 (or, ``table2``, Table 2 PTD-P) row with a pipeline."""
    dp = gpus // (tp * pp)
    m = batch // dp
    v = _smallest_v(layers // pp)
    fields = {"tp": tp, "pp": pp, "batch": 1, "grad_accum": m, "zero": 0,
              "pp_schedule": f"interleaved:{v}", **_NARAYANAN}
    if table2:
        why = (f"PTD-P with model-parallel size {tp * pp} = TP{tp} PP{pp} (t <= 8 a node, Table "
               f"1's rule), DP{dp}, batch {batch} = micro-batch 1 x {m} (Table 2), interleaved (V "
               f"= {v} assumed, as the Table 1 rows); {_HDR}")
    else:
        why = (f"TP{tp} PP{pp} DP{dp}, batch {batch} = micro-batch 1 x {m} (as the 1T row), "
               f"interleaved (V = {v} assumed: the smallest V >= 2 that divides the {layers // pp} "
               f"layers of a stage, as Megatron requires); {_HDR}")
    return fields, False, why


def _narayanan_zero3(gpus: int, micro_batch: int, batch: int) -> tuple[dict, bool, str]:
    """A Table 2 ZeRO-3 row (no model parallelism)."""
    fields = {"batch": micro_batch, "grad_accum": batch // (gpus * micro_batch), "zero": 3,
              **_NARAYANAN}
    return fields, False, (
        f"ZeRO-3 over {gpus} GPUs, no model parallelism, micro-batch {micro_batch} (Table 2), "
        "DeepSpeed's ZeRO-3 (the implementation the paper compares with: the weights gathered "
        "again for each checkpointed recompute); full checkpointing as every Table 1/2 run; "
        f"{_HDR}")


LAYOUTS.update({
    "narayanan2021-gpt3.6b-a100-x64": _narayanan_tp(2, 64, 512),
    "narayanan2021-gpt7.5b-a100-x128": _narayanan_tp(4, 128, 512),
    "narayanan2021-gpt18.4b-a100-x256": _narayanan_tp(8, 256, 1024),
    "narayanan2021-gpt39.1b-a100-x512": _narayanan_pp(8, 2, 48, 512, 1536),
    "narayanan2021-gpt76.1b-a100-x1024": _narayanan_pp(8, 4, 60, 1024, 1792),
    "narayanan2021-gpt145.6b-a100-x1536": _narayanan_pp(8, 8, 80, 1536, 2304),
    "narayanan2021-gpt310.1b-a100-x1920": _narayanan_pp(8, 16, 96, 1920, 2160),
    "narayanan2021-gpt529.6b-a100-x2520": _narayanan_pp(8, 35, 105, 2520, 2520),
    **{f"narayanan2021-t2-zero3-gpt{p}b-a100-x{n}": _narayanan_zero3(n, mb, b)
       for p, n, mb, b in (("174.6", 384, 4, 1536), ("174.6", 768, 2, 1536),
                           ("174.6", 1536, 1, 1536), ("529.6", 640, 4, 2560),
                           ("529.6", 1120, 2, 2240), ("529.6", 2240, 1, 2240))},
    **{f"narayanan2021-t2-ptdp-gpt{p}b-a100-x{n}": _narayanan_pp(8, pp, layers, n, b, table2=True)
       for p, pp, layers, n, b in (("174.6", 12, 96, 384, 1536), ("174.6", 12, 96, 768, 1536),
                                   ("174.6", 12, 96, 1536, 1536), ("529.6", 35, 105, 560, 2240),
                                   ("529.6", 35, 105, 1120, 2240),
                                   ("529.6", 35, 105, 2240, 2240))},
})


#: torchtitan's docs/performance.md Float8 rows (@eaea6f6a; the runs at torchtitan 9dec370,
#: torchao eab345c), mapped here after the rows were recorded (benchmarks/published/README.md).
#: The recipe: at 9dec370 torchtitan's float8 converter has one, tensor-wise dynamic scaling
#: (config_manager.py: scaling_type_input/weight/grad_output default "dynamic"; docs/float8.md:
#: "we currently support tensor-wise scaling with dynamic scales ... Row-wise scaling is under
#: exploration") = gpuplan's fp8-tensorwise. The FSDP float8 all-gather
#: (enable_fsdp_float8_all_gather, off by default) is not stated by performance.md: on here, as
#: docs/float8.md's launch command (--float8.enable_float8_linear
#: --float8.enable_fsdp_float8_all_gather --float8.precompute_float8_dynamic_scale_for_fsdp) and
#: the 405B preset (train_configs/llama3_405b.toml) set it = --fp8-param-gather. FSDP2 shards
#: over dp_shard x cp (parallelize_llama.py: the "dp_shard_cp" mesh), gpuplan's ZeRO group; under
#: PP it keeps the gathered weights through the step (reshard_after_forward False = ZeRO-2). TP
#: is sequence-parallel (SequenceParallel on the norms); the pipeline splits the local batch into
#: pipeline_parallel_microbatches, by default the PP degree (pipelining_utils.py), and
#: Interleaved1F1B runs 2 stages a rank. AsyncTP (the rows that state it) = the TP collectives
#: overlapped with the GEMMs (``tp_overlap``).
_TT_FLOAT8 = "fp8-tensorwise (torchtitan 9dec370: tensor-wise dynamic scales, its one recipe); " \
    "FSDP float8 all-gather on (docs/float8.md's launch command; not stated by the table): " \
    "--fp8-param-gather"


def _torchtitan_float8(*, tp: int = 1, pp: int = 1, cp: int = 1, batch: int, seq: int,
                       schedule: str | None = None, async_tp: bool = False,
                       ) -> tuple[dict, bool, str]:
    """One Float8 row of torchtitan's performance.md as Job fields (see :data:`_TT_FLOAT8`)."""
    fields: dict = {"precision": "fp8-tensorwise", "fp8_param_gather": True, "seq": seq,
                    "zero": 2 if pp > 1 else 3}
    why = [_TT_FLOAT8]
    if tp > 1:
        fields.update(tp=tp, sequence_parallel=True)
        why.append(f"TP{tp} with sequence parallelism" + (", AsyncTP" if async_tp else ""))
    if cp > 1:
        fields["cp"] = cp
        why.append(f"CP{cp}, FSDP over dp x cp")
    if pp > 1:
        fields.update(pp=pp, pp_schedule=schedule, batch=batch // pp, grad_accum=pp)
        why.append(f"PP{pp} {schedule}: local batch {batch} in {pp} micro-batches of "
                   f"{batch // pp} (pipeline_parallel_microbatches' default, the PP degree); "
                   "FSDP without resharding under PP = ZeRO-2")
    return fields, async_tp, "; ".join(why)


_TT = "torchtitan-t"
LAYOUTS.update({
    f"{_TT}1-llama31-8b-fsdp8-compile-float8": _torchtitan_float8(batch=2, seq=8192),
    f"{_TT}3-llama31-8b-fsdp128-compile-float8": _torchtitan_float8(batch=2, seq=8192),
    **{f"{_TT}2-llama31-8b-fsdp{8 // cp}-cp{cp}-s{8192 * 4 * cp}-float8":
       _torchtitan_float8(cp=cp, batch=1, seq=8192 * 4 * cp) for cp in (1, 2, 4, 8)},
    f"{_TT}4-llama31-70b-fsdp32-tp8-float8": _torchtitan_float8(tp=8, batch=16, seq=8192),
    f"{_TT}4-llama31-70b-fsdp32-tp8-asynctp-float8": _torchtitan_float8(
        tp=8, batch=16, seq=8192, async_tp=True),
    f"{_TT}5-llama31-405b-fsdp8-tp8-pp8-1f1b-float8": _torchtitan_float8(
        tp=8, pp=8, batch=32, seq=8192, schedule="1f1b", async_tp=True),
    f"{_TT}5-llama31-405b-fsdp8-tp8-pp8-interleaved-float8": _torchtitan_float8(
        tp=8, pp=8, batch=32, seq=8192, schedule="interleaved:2", async_tp=True),
    **{f"{_TT}6-llama31-405b-fsdp{8 // cp}-cp{cp}-tp8-pp8-s{8192 * 4 * cp}-float8":
       _torchtitan_float8(tp=8, pp=8, cp=cp, batch=8, seq=8192 * 4 * cp, schedule="1f1b",
                          async_tp=True) for cp in (1, 2, 4, 8)},
})


def _megatron_layout(run: dict) -> tuple[dict, bool, str] | None:
    """A Megatron-Core README row with TP or PP: its stated TP and PP, sequence parallelism under
    TP and --tp-comm-overlap, as the README's command lines (and the layouts test) have them; the
    micro-batch and the distributed optimizer are :func:`_train_job`'s."""
    j = run["job"]
    if "Megatron-Core" not in str(j.get("runtime")) or (j.get("tp") or 1) * (j.get("pp") or 1) == 1:
        return None
    tp, pp = j["tp"], j["pp"]
    return ({"tp": tp, "pp": pp, "sequence_parallel": tp > 1}, True,
            f"TP{tp} PP{pp} DP{j['dp']} (README), 1F1B, sequence parallelism, --tp-comm-overlap")


def _layout(run: dict) -> tuple[dict, bool, str] | None:
    return LAYOUTS.get(run["id"]) or _megatron_layout(run)


def _model_of(run: dict, notes: list[str]):
    """The run's model: the catalog entry -- with the head of the task the source fine-tuned (HF
    AutoModelForSequenceClassification, DLE run_squad.py's BertForQuestionAnswering: a 2-way
    output layer, not the checkpoint's MLM head over the vocabulary) -- or an architecture from
    the run's shape."""
    m = run["model"]
    if not m.get("catalog"):
        return _awq_kernel(run, _shape_arch(m), notes)
    model = _awq_kernel(run, load_model(m["catalog"]), notes)
    task = f"{run['job'].get('task') or ''} {m.get('name') or ''}".lower()
    if model.architecture.kind == "encoder" and ("fine-tuning" in task
                                                 or "classification" in task):
        notes.append("fine-tuned: a 2-way classifier head, not the checkpoint's MLM head")
        return replace(model.architecture, hf_class="BertForSequenceClassification", num_labels=2)
    return model


def _awq_kernel(run: dict, model, notes: list[str]):
    """``model`` as the AWQ checkpoint the run loaded: its ``quantization_config`` ``version``
    (``Architecture.checkpoint_kernel``), the kernel the source's row names (AutoAWQ README's
    Version column, the run's ``awq_version``: a field added by issue 31 after these rows'
    errors were read; benchmarks/published/README.md says so)."""
    v = run["job"].get("awq_version")
    if not v:
        return model
    notes.append(f"an AWQ checkpoint of version {v!r} (the source row's kernel)")
    if isinstance(model, Architecture):
        return replace(model, checkpoint_kernel=v)
    return replace(model, architecture=replace(model.architecture, checkpoint_kernel=v))


#: torchtune's LoRA target names (lora_attn_modules, apply_lora_to_mlp) as the transformers modules
#: gpuplan's tensors carry: torchtune's output_proj is o_proj, its MLP's w1 / w3 / w2 are
#: gate_proj / up_proj / down_proj (torchtune/models/convert_weights.py's mapping).
_TORCHTUNE_TARGETS = {"q_proj": ("q_proj",), "k_proj": ("k_proj",), "v_proj": ("v_proj",),
                      "output_proj": ("o_proj",), "mlp": ("gate_proj", "up_proj", "down_proj")}


def _lora(job: dict, notes: list[str]) -> dict:
    lora = job.get("lora")
    if not lora:
        return {}
    rank = lora.get("rank")
    if rank is None:
        rank = 8
        notes.append("LoRA rank not stated: 8 assumed")
    out = {"lora_rank": rank}
    if lora.get("targets"):
        out["lora_targets"] = tuple(m for t in lora["targets"] for m in _TORCHTUNE_TARGETS[t])
    if lora.get("base_dtype") == "nf4":
        out["lora_base"] = "nf4-dq"  # torchtune's QLoRA base: torchao to_nf4 (double-quantized)
    return out


def _torchtune_flags(run: dict, notes: list[str]) -> dict:
    """The torchtune recipe's memory and loss flags the run states (runs.json job
    ``optimizer_in_bwd``, ``activation_offloading``, ``chunked_cross_entropy``; the optimizer
    text "optimizer_in_bwd"), as the Job's fields: the one Job both the speed and the memory
    checks read. torchtune's CEWithChunkedOutputLoss splits the output into 8 chunks
    (torchtune/modules/loss/ce_chunked_output_loss.py @30b8519e8: ``num_output_chunks: int = 8``);
    QLoRA's base is torchao's ``to_nf4`` (torchtune/modules/peft/lora.py @30b8519e8:
    ``from torchao.dtypes.nf4tensor import linear_nf4, to_nf4``), NF4 blocks of 64 with the
    scalers double-quantized in blocks of 256 (``nf4-dq``; :func:`_lora`)."""
    if run["engine"] != "torchtune":
        return {}
    j, out = run["job"], {}
    if j.get("optimizer_in_bwd") or "optimizer_in_bwd" in str(j.get("optimizer") or ""):
        out["optimizer_in_backward"] = True
    if j.get("activation_offloading"):
        out["offload_activations"] = True
        # torchtune/training/_activation_offloading.py @1814feb17: get_act_offloading_ctx_manager
        # returns OffloadActivations(), use_streams=True by default (copies on their own stream)
        notes.append("activation offloading: torchtune's OffloadActivations copies on its own "
                     "stream (use_streams=True), beside the compute: not timed")
    if j.get("chunked_cross_entropy"):
        out["loss_chunks"] = 8
    return out


#: The first fused exact-attention kernel for training, FlashAttention (Dao et al. 2022, arXiv
#: 2205.14135), appeared in 2022; PyTorch's SDPA in 2.0 (2023). A source from before 2022 that does
#: not name its attention ran the scores, the softmax and the values as separate kernels -- as its
#: own code shows where it is published: NVIDIA DLE BERT ``modeling.py`` (torch.matmul, / sqrt(d),
#: + mask, softmax, dropout, torch.matmul), Megatron-LM 2021 (baddbmm, FusedScaleMaskSoftmax,
#: dropout, bmm).
FUSED_ATTENTION_YEAR = 2022


#: DeepSpeed ZeRO-3 overlaps its weight all-gathers with the compute since PR #1453 (a prefetch
#: on its own all-gather stream, merged January 2022). Before it they were waited for: "the async
#: version is not async at all, because each all_gather calls torch.cuda.synchronize()" (PR
#: #1188, June 2021, on DeepSpeed 0.3.16; issue #1174: ZeRO-3's forward 480 ms against ZeRO-2's
#: 60 ms on the same 8 x A100 node, "bounded by the parameter gathering").
ZERO3_PREFETCH_YEAR = 2022


def gather_overlap(run: dict, job: Job, notes: list[str] | None = None) -> bool:
    """Whether ``run``'s ZeRO-3 weight all-gathers overlap its compute: not for DeepSpeed's
    before :data:`ZERO3_PREFETCH_YEAR` (said in ``notes``)."""
    if job.zero != 3 or job.sharding != "deepspeed":
        return True
    if (run["source"].get("year") or ZERO3_PREFETCH_YEAR) >= ZERO3_PREFETCH_YEAR:
        return True
    if notes is not None:
        notes.append(f"DeepSpeed ZeRO-3 in {run['source']['year']}: its weight all-gathers waited "
                     "for, not overlapped (before DeepSpeed PR #1453, January 2022)")
    return False


#: Source groups whose runs go through an engine profile whose model code repeats K and V before
#: SDPA (torchtitan's) but ran other code: the Llama 3 paper's own 4D parallelism, whose
#: context parallel all-gathers the GQA K and V ("K and V tensors are much smaller than Q
#: tensor due to the use of GQA", arXiv 2407.21783 sec. 3.3.2).
GQA_CP_GROUPS = frozenset({"llama3"})


def sdpa_repeat_kv(run: dict, job: Job, notes: list[str] | None = None) -> bool | None:
    """False where ``run``'s code is not the engine profile's own Llama, which repeats K and V
    to the query heads (:data:`GQA_CP_GROUPS`): its context parallel moves the GQA K and V (said
    in ``notes``), and the profile's repeat_kv copy before SDPA (compute/step.py
    ``expands_kv``) is not timed -- no source shows that code copying them; None (the engine's)
    otherwise."""
    if run.get("source_group") not in GQA_CP_GROUPS:
        return None
    if notes is not None and job.cp > 1:
        notes.append("CP all-gathers the GQA K and V (the paper's sec. 3.3.2), not repeated to "
                     "the query heads as torchtitan's Llama does")
    return False


#: The path of llm-foundry's benchmark tables, whose A100 rows ran a FlashAttention
#: v1-generation kernel (:func:`train_attention`).
LLMFOUNDRY_README = "scripts/train/benchmarking/README.md"


def train_attention(run: dict, notes: list[str] | None = None) -> str | None:
    """``fa1`` (FlashAttention v1's rate: compute/efficiency.py ``TRAIN_ATTENTION_KERNELS``) for
    llm-foundry's A100 benchmark rows, else None (the generation's kernel).

    Their figures were written in 2023 (the A100 80GB table by mosaicml/llm-foundry b2a43a147,
    2023-10-19, PR #543 "Update_pretrain_benchmarks"; the A100 40GB rows and the 64-GPU 70B row
    were already there at 300cc5c58, 2023-05-03), while the rows' shapes were read from the
    yamls of 8c8dd48 (2025), whose ``attn_impl: flash`` is flash-attn 2. At the figures' commits
    the harness scripts/train/benchmarking/submit_benchmarks.py sets every run's
    ``attn_impl`` from ``--attn_impl``, default ``triton`` (b2a43a147 line 144, 300cc5c58 line
    119), on the image ``mosaicml/pytorch:1.13.1_cu117`` (line 50), and the pretrain yamls say
    ``attn_impl: triton`` too; ``triton`` is llmfoundry/models/layers/flash_attn_triton.py, a
    copy of HazyResearch flash-attention@eff9fe6b's Triton port of FlashAttention v1 ("Overall
    Triton forward + backward is slightly slower than CUDA forward + backward"), and the
    ``flash`` choice then was flash-attn 1.x (setup.py's gpu extra: ``flash-attn==1.0.9`` at
    b2a43a147, ``v1.0.3.post0`` at 300cc5c58; flash-attn 2 only in the optional gpu-flash2
    extra, which the harness installs for H100 runs only). Either way a v1-generation kernel,
    timed at FlashAttention v1's rate, an upper bound for the Triton port. The H100 rows (the
    2024 tables) are left at the generation's kernel: v1's rate on Hopper is not published."""
    src = run.get("source") or {}
    if src.get("repo") != "mosaicml/llm-foundry" or src.get("path") != LLMFOUNDRY_README \
            or not run["hardware"]["gpu"].startswith("A100"):
        return None
    if notes is not None:
        notes.append("llm-foundry's 2023 A100 tables ran attn_impl triton (submit_benchmarks.py's "
                     "default at b2a43a147 / 300cc5c58; torch 1.13.1 image), FlashAttention v1's "
                     "Triton port: timed at FlashAttention v1's rate")
    return "fa1"


#: Megatron-LM overlaps an interleaved pipeline's send/recv with the next chunk's compute since
#: NVIDIA/Megatron-LM commit f9283c5a8a (2023-05-31, "Add option to overlap p2p communication"),
#: on by default since 4eeff55d1f (2023-10-12, "Make overlap_p2p_comm the default"): a run
#: published before 2024 ran its sends blocking (the engine profile's default is today's code).
P2P_OVERLAP_YEAR = 2024


def p2p_overlap(run: dict, job: Job, notes: list[str] | None = None) -> bool | None:
    """Whether ``run``'s interleaved pipeline sends overlap compute: False for a Megatron-LM run
    published before :data:`P2P_OVERLAP_YEAR` (said in ``notes``); None (the engine's rule)
    otherwise."""
    if job.engine != "megatron" or job.pp <= 1 or not job.pp_schedule.startswith("interleaved"):
        return None
    if (run["source"].get("year") or P2P_OVERLAP_YEAR) >= P2P_OVERLAP_YEAR:
        return None
    if notes is not None:
        notes.append(f"Megatron-LM in {run['source']['year']}: interleaved pipeline sends "
                     "blocking (--overlap-p2p-communication came in May 2023, Megatron-LM "
                     "f9283c5a8a)")
    return False


def pp_reduce_after_backward(run: dict, job: Job, notes: list[str] | None = None) -> bool | None:
    """False where ``run`` ran a pipeline under the torchtitan profile but not on
    torch.distributed.pipelining (:data:`GQA_CP_GROUPS`: the Llama 3 paper's own 4D
    parallelism, whose stages' gradient reduce no source describes): its FSDP reduce-scatter
    keeps the usual overlap with the last backward rather than the pipelining stage's
    after-the-last-backward reduce (compute/parallel.py ``pipeline_reduce_exposed_s``); None
    (the engine's) otherwise."""
    if run.get("source_group") not in GQA_CP_GROUPS or job.pp <= 1:
        return None
    if notes is not None:
        notes.append("the paper's own pipeline, not torch.distributed.pipelining: FSDP's "
                     "reduce-scatter beside the last backward")
    return False


def _attention(run: dict, notes: list[str]) -> str:
    stated = str(run["job"].get("attention") or "")
    if "eager" in stated:
        return "eager"
    if not stated and (run["source"].get("year") or FUSED_ATTENTION_YEAR) < FUSED_ATTENTION_YEAR:
        notes.append(f"attention not stated; a {run['source']['year']} source predates fused "
                     "attention kernels (FlashAttention, 2022): unfused (eager)")
        if "Megatron" in str(run["job"].get("runtime")):
            notes.append("Megatron fuses scale and mask into its softmax: the eager chain "
                         "counts two passes over the scores more")
        return "eager"
    return "sdpa"


def _train_job(run: dict, runtime: str, notes: list[str]) -> Job:
    j = run["job"]
    prec, n1 = _precision(j, str(j.get("runtime")))
    opt, n2 = _optimizer(j)
    notes += n1 + n2
    gpus = run["hardware"]["count"]
    mb, accum = j.get("micro_batch"), j.get("grad_accum") or 1
    zero = 3 if "fsdp" in str(j.get("zero") or "").lower() else 0
    layout = _layout(run) or ({}, False, "")
    if mb is None and "Megatron-Core" in str(j.get("runtime")) and j.get("global_batch"):
        # the README's benchmark command lines: --micro-batch-size 1 and the distributed optimizer
        # (as tests/unit/test_published_layouts.py times the same rows)
        mb, accum, zero = 1, j["global_batch"] // (j.get("dp") or gpus), 1
        notes.append(f"Megatron-Core README commands: micro-batch 1 x {accum} accumulated, "
                     "distributed optimizer (ZeRO-1)")
    elif mb is None and "batch" not in layout[0]:  # global batch over the data-parallel GPUs
        gb = j.get("global_batch")
        mb = max(1, (gb or gpus) // gpus)
        notes.append(f"micro-batch {mb} = global batch / data-parallel GPUs (not stated)")
    if zero == 3 and str(j.get("zero") or "").startswith("HSDP"):
        # torch FSDP1 HYBRID_SHARD without process groups given shards over each node's GPUs
        # (torch/distributed/fsdp/_init_utils.py _init_intra_and_inter_node_groups: the intra-node
        # group of the local device count) and replicates across nodes
        fields_hsdp = {"dp_shard": run["hardware"].get("gpus_per_node") or 8}
        notes.append(f"HSDP: sharded over the {fields_hsdp['dp_shard']} GPUs of a node, "
                     "replicated across nodes (FSDP1 HYBRID_SHARD's default groups)")
    else:
        fields_hsdp = {}
    fields = dict(precision=prec, optimizer=opt, batch=mb, seq=j.get("seq") or 2048,
                  grad_accum=accum, gpus=gpus, zero=zero,
                  checkpointing=j.get("checkpointing") or "none", **fields_hsdp)
    if layout[0]:
        fields.update(layout[0])
        notes.append("layout as tests/unit/test_published_layouts.py: " + layout[2])
    if j.get("model_code"):  # whose model code the source's run used, where not the engine's
        fields["model_code"] = j["model_code"]
        notes.append(f"model code {j['model_code']}")
    return Job(model=run["model"]["name"], mode="train", engine=run["engine"],
               attention=_attention(run, notes), runtime=runtime, **fields, **_lora(j, notes),
               **_torchtune_flags(run, notes))


def _grad_clip(run: dict, precision: str, notes: list[str]) -> tuple[float | None, str | None]:
    """(max_grad_norm, how the clip runs) where the run's own code clips, else (None, None).
    NVIDIA DLE run_squad.py at the pinned commit clips every step at 1.0: under --fp16 its
    GradientClipper (apex multi_tensor_l2norm, .item(), multi_tensor_scale) on the fp32 master
    gradients; in fp32, BertAdam (optimization.py, max_grad_norm=1.0) calls clip_grad_norm_ on each
    parameter inside its update loop, and the figures' container (NGC 19.07: PyTorch 1.2) read
    each norm with .item() (pytorch issue #31474; removed in 1.5, pytorch PR #38615).
    transformers' Trainer clips at max_grad_norm=1.0 by default (TrainingArguments), with
    torch.nn.utils.clip_grad_norm_, a norm and a mul per tensor in the torch 1.x of 2022 (no
    host read). DLE pretraining's FusedLAMB clips inside its own passes (its cost counts it);
    the other sources do not state clipping, or clip at a cost their step time dwarfs (not
    modeled)."""
    j = run["job"]
    rt, task = str(j.get("runtime") or ""), str(j.get("task") or "")
    if "APEX" in rt and "fine-tuning" in task:
        if precision == "fp32":
            notes.append("BertAdam clips each parameter at 1.0 with torch 1.2's clip_grad_norm_ "
                         "(a .item() per parameter: per-tensor-sync)")
            return 1.0, "per-tensor-sync"
        notes.append("run_squad.py GradientClipper at 1.0 (apex l2norm, one .item(), scale)")
        return 1.0, "multi-tensor-sync"
    if "HF Trainer" in rt:
        notes.append("Trainer's default max_grad_norm 1.0 (clip_grad_norm_ per tensor, torch 1.x)")
        return 1.0, "per-tensor"
    if "torchtitan 9dec370" in (run.get("notes") or ""):
        # train.py @9dec370 clips every step: utils.clip_grad_norm_(params,
        # job_config.training.max_norm, foreach=True, pp_mesh=...) before optimizers.step();
        # --training.max_norm 1.0 by default (config_manager.py) and in train_configs/
        # llama3_*.toml; torch.nn.utils.get_total_norm's _foreach_norm over the local shards
        # (DTensor's _NormPartial: one all-reduce of the norm, no host read) and
        # clip_grads_with_norm_'s _foreach_mul_
        notes.append("torchtitan 9dec370 clips at max_norm 1.0 each step (foreach norm and mul)")
        return 1.0, "foreach"
    if run.get("source_group") == "ibm-fsdp-blog":
        # fms-fsdp @5e522b4 fms_fsdp/utils/train_utils.py train(): every step
        # ``model.clip_grad_norm_(cfg.grad_clip_thresh).item()`` after ``loss.backward()``,
        # grad_clip_thresh 1.0 (fms_fsdp/config/training.py); torch FSDP1's
        # FullyShardedDataParallel.clip_grad_norm_ takes torch.linalg.vector_norm of each
        # gradient in a Python loop (_get_grad_norm), all-reduces the norm over the shard group
        # and runs ``grad.detach().mul_(clip_coef_clamped)`` for each gradient: a norm and a mul
        # per tensor over the fp32 sharded gradients
        notes.append("fms-fsdp 5e522b4 clips at 1.0 each step (FSDP1 clip_grad_norm_: a norm "
                     "and a mul per tensor)")
        return 1.0, "per-tensor"
    return None, None


_INFER = {"bf16": "bf16", "fp16": "fp16", "int8 weight-only": "int8",
          "int4 weight-only, group 32": "q4_0", "AWQ 4-bit, group 128": "awq-4bit"}


def _new_tokens(run: dict) -> int:
    return run["job"].get("output_len") or 200  # gpt-fast generate.py's default max_new_tokens


def _infer_job(run: dict, runtime: str, notes: list[str]) -> Job:
    j = run["job"]
    p = str(j.get("precision") or "bf16").split(" (")[0]
    fmt = _INFER.get(p, "bf16")
    if fmt == "q4_0":
        notes.append("int4 group-32 weights read as q4_0 (4.5 bits)")
    prompt = j.get("prompt_tokens") or j.get("input_len") or 5
    tp, batch = j.get("tp") or 1, j.get("micro_batch") or 1
    if batch > 1:
        notes.append(f"{batch} streams decoded together (static batch, the source's loop)")
    if tp > 1:
        notes.append(f"TP{tp} on one {run['hardware'].get('gpus_per_node') or 8}-GPU node, the "
                     "SKU's NVLink (gpuplan's default topology); batch 1, one replica")
    return Job(model=run["model"]["name"], mode="infer", engine=run["engine"],
               infer_precision=fmt, batch=batch, seq=prompt, runtime=runtime, attention="sdpa", tp=tp,
               gpus=run["hardware"]["count"] if tp > 1 else 1,
               context=_window_context(run, notes))


#: Tokens AutoAWQ's WindowedCache drops when a decode step would overflow it: ``roll_kv_n_steps
#: (start_pos, n=100)``, ``n = min(n, max_seq_len)`` (AutoAWQ v0.1.6, 8110e028c7fe,
#: awq/modules/fused/attn.py line 139, awq/modules/fused/cache.py ``roll_kv_n_steps``).
_AWQ_ROLL = 100


def _window_context(run: dict, notes: list[str]) -> int | None:
    """The keys a decode step attends to in the run's median step when its KV cache is a window
    (runs.json ``job.kv_window``, issue 31, added after these rows' errors were read): AutoAWQ's
    fused modules size it to ``max_seq_len`` = from_quantized's ``max_new_tokens``, which
    examples/benchmark.py sets to n_generate (v0.1.6 benchmark.py line 46; awq/models/base.py
    lines 207-213 ``config.max_new_tokens``; llama.py line 121 ``max_seq_len``). Full, it rolls
    ``min(100, window)`` tokens out, so the steps see ``window - roll + 1`` to ``window`` keys
    (``start_pos + 1``: FT's single_query_attention reads that many timesteps) -- their middle,
    ``window - roll / 2 + 1/2`` rounded down -- and not the prompt plus half the output (the rolling step's
    own copy is one step in ``roll``, which the README's median time per token leaves out).
    None: no window (gpuplan's default, prompt + new tokens / 2)."""
    w = run["job"].get("kv_window")
    if not w:
        return None
    roll = min(_AWQ_ROLL, w)
    ctx = math.floor(w - roll / 2 + 0.5)
    notes.append(f"the KV cache a {w}-token window that rolls {roll} tokens out when full: the "
                 f"median decode step attends to {ctx} keys")
    return ctx


def job_of(run: dict, notes: list[str] | None = None) -> Job:
    """The run as one gpuplan Job, with its engine (``run["engine"]``): the one job both its
    speed check (:func:`predict`) and its memory check (tests/unit/test_published_layouts.py)
    read. The runtime is the source's where it states one, else the engine's."""
    notes = [] if notes is None else notes
    runtime = _stated_runtime(str(run["job"].get("runtime") or ""))
    job = (_infer_job if run["kind"] == "decode" else _train_job)(run, runtime, notes)
    watts = run["hardware"].get("power_limit_w")
    if watts is not None:  # the source's stated limit (runs.json hardware.power_limit_w)
        notes.append(f"power limit {watts} W as stated ({run['hardware']['gpu_as_stated']})")
        job = job.with_(power_limit_w=float(watts))
    return job


def predict(run: dict, keep: list | None = None) -> Row:
    """The row of ``run``: gpuplan's estimate beside the measured figure. ``keep``, when given,
    receives the estimate itself (benchmarks/speed_breakdown.py prints its ops)."""
    m = run["measured"]
    unit, measured = m["unit"], m["value"]
    if unit.startswith("ms per output token"):  # compared as a rate
        unit, measured = "tokens/s (1000 / ms per output token)", 1000 / measured
    why = _not_expressible(run)
    cfg = json.dumps({k: v for k, v in run["job"].items() if v is not None}, sort_keys=True)
    if why:
        return Row(run, None, measured, unit, cfg, why)
    notes: list[str] = []
    gpu = get_gpu(run["hardware"]["gpu"])
    model = _model_of(run, notes)
    job = job_of(run, notes)
    if run["kind"] == "decode":
        est = estimate_speed(model, gpu, job, new_tokens=_new_tokens(run), measured=None,
                             host_sync_per_step=_host_sync_per_step(run, notes),
                             decode_attention=_decode_attention(run, notes))
        value = est.tokens_per_s
        if run["job"].get("qps"):
            value = _online_rate(run, notes)
    else:
        if job.zero == 3 and job.sharding == "deepspeed" and isinstance(model, Architecture):
            model = _gpt_model(run["model"])
            notes.append("DeepSpeed ZeRO-3: timed on the shape's tensors (a GPT-2 config), whose "
                         "coordinator replay gives the weight all-gathers a step")
        layout = _layout(run)
        topo = _topology(run, gpu, notes, job)
        link = "nvlink" if job.gpus > 1 and topo is None else None
        impl = _optimizer_impl(run, job.precision, notes)
        norm, clip = _grad_clip(run, job.precision, notes)
        est = estimate_speed(model, gpu, job.with_(max_grad_norm=norm), measured=None, link=link, optimizer_impl=impl,
                             grad_clip_impl=clip, topology=topo,
                             paged_host_bytes=_paged_host_bytes(run, notes),
                             tp_overlap=bool(layout and layout[1]),
                             gather_overlap=gather_overlap(run, job, notes),
                             p2p_overlap=p2p_overlap(run, job, notes),
                             sdpa_repeat_kv=sdpa_repeat_kv(run, job, notes),
                             pp_reduce_after_backward=pp_reduce_after_backward(run, job, notes),
                             train_attention=train_attention(run, notes))
        value = _train_value(est, unit, run)
    if keep is not None:
        keep.append(est)
    return Row(run, value, measured, unit, cfg, assumptions=tuple(notes),
               runtime=f"{job.engine}: {runtime_of(job.runtime, job.mode, job.engine)}",
               mechanism=mechanism_of(run, job),
               diagnosis=diagnose(est, gpu, value / measured, _measured_step(run, job, measured)),
               host_bound=est.step.host_bound,
               comm_share=est.comm_exposed_s / est.step_time_s if est.mode == "train" else 0.0)


def _host_sync_per_step(run: dict, notes: list[str]) -> bool:
    """The run's loop waits for the device around every forward (runs.json
    ``job.host_sync_per_step``, a field added by issue 31 after these rows' errors were read;
    benchmarks/published/README.md says which rows state it and where their loop does it).
    AutoAWQ v0.1.6 (8110e028c7fe, the version its README's table was measured with)
    examples/benchmark.py ``generate()``: ``torch.cuda.synchronize()`` at lines 20 and 32, before
    and after ``model(inputs, use_cache=True)``; at the README's commit 027758d47 the same in
    ``generate_torch()``, lines 44 and 56. gpt-fast's generate.py (32971d31) does not: its
    ``decode_n_tokens`` loop has no wait, ``device_sync`` comes after the whole generate."""
    if not run["job"].get("host_sync_per_step"):
        return False
    notes.append("the benchmark loop synchronizes before and after every forward (the run's "
                 "host_sync_per_step)")
    return True


def _decode_attention(run: dict, notes: list[str]) -> str | None:
    """``ft-mmha`` where the run's attention is AutoAWQ's fused attention (runs.json
    ``job.attention``, as transcribed with the rows): with ``fuse_layers=True`` every decode
    step calls FasterTransformer's single_query_attention (AutoAWQ v0.1.6, 8110e028,
    awq/modules/fused/attn.py ``QuantAttentionFused.forward``: ``seqlen == 1`` with
    ``ft_inference_engine`` installed: v0.1.6 setup.py builds that extension wherever ``os.name
    != "nt"``; the rows' OS is not stated, Linux assumed); None: the engine's own kernel."""
    if "AutoAWQ fused attention" not in str(run["job"].get("attention") or ""):
        return None
    notes.append("decode attention: FT's single_query_attention (AutoAWQ's fused modules)")
    return "ft-mmha"


def _measured_step(run: dict, job: Job, measured: float) -> float | None:
    """A decode run's measured step: the batch over its rate where the figure counts every
    stream, else one token's time (a batch-1 rate, an online inter-token latency)."""
    if run["kind"] != "decode":
        return None
    return (job.batch if "all" in run["measured"]["unit"] else 1) / measured


def online_serving_row(run: dict) -> dict:
    """The runs.json online-serving row (a request rate, ``job.qps``) as a row of
    benchmarks/published/serving_runs.json: its engine and the version its runtime states (
    "TensorRT-LLM 0.14 + Triton" -> 0.14), model, GPU, TP, precision, fixed input/output lengths
    and its rate as Poisson arrivals -- what validate_capacity.py hands to ``gpuplan.capacity``."""
    j = run["job"]
    version = re.search(r"\d+\.\d+(?:\.\d+)?", j.get("runtime") or "")
    return {"id": run["id"], "engine": run["engine"],
            "engine_version": version.group(0) if version else None,
            "model": run["model"]["catalog"], "gpu": run["hardware"]["gpu"], "tp": j.get("tp") or 1,
            "precision": j["precision"], "input_len": j["input_len"], "output_len": j["output_len"],
            "load": {"request_rate": float(j["qps"]), "concurrency": None},
            "num_requests": j.get("num_requests"), "replicas": 1, "measured": {}}


def _online_rate(run: dict, notes: list[str]) -> float:
    """1 / the mean inter-token latency of a server taking ``job.qps`` requests a second:
    ``gpuplan.capacity``'s simulation of the engine's scheduler (the call ``gpuplan capacity``
    makes, built by validate_capacity.py's :func:`~validate_capacity.predict` from
    :func:`online_serving_row`), so this row and validate_capacity.md's row of the same
    measurement read one prediction."""
    cap = validate_capacity.predict(online_serving_row(run))
    if cap.why_not:
        raise ValueError(f"{run['id']}: gpuplan capacity cannot run it: {cap.why_not}")
    itl = cap.predicted["itl_ms"]
    notes.append(f"online at {run['job']['qps']:g} requests/s: gpuplan.capacity's simulation "
                 f"(`{cap.command}`): mean ITL {itl:.2f} ms, mean TTFT "
                 f"{cap.predicted['ttft_ms']:.1f} ms")
    return 1000.0 / itl


def _inter_node(stated: str | None, per_node: int) -> str | None:
    """The network between nodes as gpuplan's ``inter_node`` reads it, from the run's stated
    interconnect -- a node's rate between nodes, shared by its GPUs; RoCE where the source says
    so, else a bare rate (InfiniBand assumed) -- None: not stated, the topology's 400 Gb/s
    InfiniBand per GPU default."""
    m = re.match(r"\s*(\d+)\s*Gbps (RoCE )?between nodes", stated or "")
    if not m:
        return None
    per_gpu = int(m.group(1)) / per_node  # the node's rate, shared by its GPUs
    return f"roce-{per_gpu:g}" if m.group(2) else f"{per_gpu:g}Gb/s"  # a bare rate: InfiniBand


def _topology(run: dict, gpu, notes: list[str], job: Job) -> Topology | None:
    """A run over more than one node: its data-parallel traffic crosses the network, so it is timed
    on the node topology (the node's NVLink, the stated network between nodes; a layout's own
    ``inter_node`` where :data:`LAYOUTS` states it)."""
    h = run["hardware"]
    per_node = h.get("gpus_per_node") or 8
    if h["count"] <= per_node:
        return None
    inter = job.inter_node or _inter_node(h.get("interconnect"), per_node)
    topo = topology_for(gpu, gpus_per_node=per_node, inter_node=inter)
    notes.append(f"{h['count'] // per_node} nodes of {per_node}: timed on the topology, "
                 f"{topo.inter.name} per GPU between nodes"
                 + (" (not stated: gpuplan's default)" if inter is None else ""))
    return topo


def _train_value(est, unit: str, run: dict) -> float:
    if unit.startswith("tokens/s per GPU"):
        return est.tokens_per_s / run["hardware"]["count"]
    if unit.startswith("tokens/s"):
        return est.tokens_per_s
    if unit.startswith(("sequences/s", "samples/s")):
        return est.samples_per_s
    if unit.startswith("TFLOP/s"):
        # hardware FLOP/s where the source counts the recompute forward; a note saying the
        # convention is "not stated" (OPT-175B) reads as model FLOP/s, as the layouts test does
        notes = (run.get("notes") or "").lower()
        counted = "hardware flops" in notes or "recomput" in notes  # recompute, recomputation
        hardware = "hardware" in unit or (counted and "not stated" not in notes)
        return (est.hfu if hardware else est.mfu) * est.rated_peak_flops / 1e12
    if unit.startswith("MFU"):
        return 100 * est.mfu
    raise ValueError(f"unit {unit!r}")


# --------------------------------------------------------------------------------------------------
# Mechanisms: what dominates a run's time, and what the estimate is known to leave out


#: The mechanisms a run is sorted under, in the order they are tested (the first that holds):
#: name -> what the estimate carries for it. Read from the job gpuplan runs (:func:`mechanism_of`).
MECHANISMS: dict[str, str] = {
    "online serving": "in-flight batching at a stated request rate: gpuplan.capacity's "
                      "discrete-event simulation of the engine's scheduler (the `gpuplan "
                      "capacity` call validate_capacity.py makes for the same row), so the two "
                      "reports read one prediction",
    "batched decode": "one static batch decoding together: the weights read once a step "
                      "(AutoAWQ's GEMV kernel: once per row, QUANT_KERNELS autoawq-gemv), the "
                      "KV cache per stream",
    "quantized decode": "batch-1 decode over 4/8-bit weights: the GEMV bandwidth fraction of "
                        "the engine's kernel (compute/efficiency.py QUANT_KERNELS), else of the "
                        "weight width (gemv_bw_*)",
    "TP decode": "batch-1 decode under tensor parallelism: the weight read split, two "
                 "all-reduces a layer",
    "16-bit decode": "batch-1 decode over 16-bit weights: the GEMV bandwidth fraction, the "
                     "runtime's launch and host cost",
    "multi-node ZeRO-3 / FSDP": "weight all-gathers and gradient reduce-scatters over the "
                                "node topology (NVLink in the node, the NIC between)",
    "single-node ZeRO-3 / FSDP": "weight all-gathers and reduce-scatters over NVLink, "
                                 "prefetched beside the compute",
    "TP/PP/CP layout": "a model-parallel layout: the micro-batch step, the pipeline bubble, TP "
                       "and data-parallel collectives on the topology",
    "multi-node data parallel": "the gradient all-reduce over the node topology",
    "LoRA / QLoRA training": "the adapters' passes and, for QLoRA, the base's dequantization",
    "Volta/Turing training": "Volta's Tensor Core share (Turing's by GEMM shape, DeepBench), "
                             "fp16 loss scaling's passes",
    "single-GPU training": "the step's kernels on one GPU (matmul, attention and memory "
                           "fractions, the runtime's launch and host cost)",
}


def mechanism_of(run: dict, job: Job) -> str:
    """The first of :data:`MECHANISMS` that the run's job falls under."""
    per_node = run["hardware"].get("gpus_per_node") or 8
    arch = get_gpu(run["hardware"]["gpu"]).architecture.lower()
    if job.mode == "infer":
        if run["job"].get("qps"):
            return "online serving"
        if job.batch > 1:
            return "batched decode"
        if job.infer_precision not in ("bf16", "fp16"):
            return "quantized decode"
        return "TP decode" if job.tp > 1 else "16-bit decode"
    if job.zero == 3 and job.tp * job.pp * job.cp == 1:
        return ("multi-node ZeRO-3 / FSDP" if job.gpus > per_node
                else "single-node ZeRO-3 / FSDP")
    if job.tp * job.pp * job.cp > 1:
        return "TP/PP/CP layout"
    if job.gpus > per_node:
        return "multi-node data parallel"
    if job.lora_rank:
        return "LoRA / QLoRA training"
    if arch in ("volta", "turing"):
        return "Volta/Turing training"
    return "single-GPU training"


def diagnose(est, gpu, ratio: float, measured_step_s: float | None = None) -> str:
    """The estimate's breakdown beside what the measured figure implies: for a decode step
    (``measured_step_s``: the measured one) its bytes at the measured rate as a share of the
    datasheet bandwidth, against the estimate's own; for training the MFU either way, the
    exposed communication and the host's share."""
    if est.mode == "infer":
        step, measured = est.step, measured_step_s or est.step.time_s * ratio
        bw = gpu.memory_bandwidth
        return (f"decode step: {step.bytes / 1e9:.2f} GB; estimate {1e3 * step.time_s:.2f} ms "
                f"({step.bytes / step.time_s / bw:.0%} of {bw / 1e9:,.0f} GB/s), measured "
                f"{1e3 * measured:.2f} ms ({step.bytes / measured / bw:.0%}); host "
                f"{1e3 * step.host_time_s:.2f} ms a step, "
                f"{'bound' if step.host_bound else 'hidden'}")
    comm = est.comm_exposed_s / est.step_time_s if est.step_time_s else 0.0
    return (f"MFU: estimate {est.mfu:.1%}, measured {est.mfu / ratio:.1%}; exposed communication "
            f"{comm:.0%} of the estimated step; host {'bound' if est.step.host_bound else 'hidden'}")


def _sku_gap(run: dict, row: Row) -> str:
    note = run["hardware"].get("sku_note") or ""
    if "not in gpuplan's catalog" not in note:
        return ""
    return (f"the GPU ({run['hardware']['gpu_as_stated']}) is not in gpuplan's catalog: timed as "
            f"{run['hardware']['gpu']}, whose bandwidth, clocks and power limit differ")


def _cap_cost(run: dict, row: Row, gpu, watts: float) -> str:
    """What the cap costs ``row``'s estimate (its rate over the same run's estimate with no
    limit), beside the end-to-end loss measured for a training run on the SKU at the same limit
    (compute/device.py MEASURED_POWER_CURVES), when one is on record."""
    free = predict({**run, "hardware": {**run["hardware"], "power_limit_w": None}}).predicted
    if not free or row.predicted is None:
        return ""
    out = f"the cap costs this estimate {1 - row.predicted / free:.1%} of its uncapped rate"
    measured = measured_training_share(gpu, watts)
    if measured is not None:
        out += (f", against {1 - measured[0]:.1%} measured end to end at {watts:g} W "
                f"({measured[1]})")
    return out


def _power_cap_gap(run: dict, row: Row) -> str:
    """A run at a stated power limit below its SKU's TDP (runs.json hardware.power_limit_w) whose
    SKU has no same-die sibling to read the sustained clock from (compute/device.py
    POWER_SIBLINGS): its tensor peaks stay the TDP's. With a sibling the cap is timed, and what
    remains is the reading's own uncertainty: an interpolation between two vendor ratings. With a
    measured clock curve (MEASURED_CLOCK_CURVES) the note sets what the cap costs the estimate
    beside a measured training run's loss at the same limit (issue 31: no clock curve of a GEMM
    load at a cap was found; the curve's comment says what was read and what rules the cap out
    as the torchtitan rows' miss)."""
    watts = run["hardware"].get("power_limit_w")
    gpu = get_gpu(run["hardware"]["gpu"])
    if watts is None or gpu.tdp_watts is None or watts >= gpu.tdp_watts:
        return ""
    if gpu.name in MEASURED_CLOCK_CURVES:
        share, _ = power_clock_fraction(gpu, watts)
        cost = _cap_cost(run, row, gpu, watts)
        return (f"run at {watts} W, below the {gpu.tdp_watts:g} W TDP: the tensor clock at "
                f"{share:.3f} of the TDP's, read from a measured SM clock curve "
                f"({MEASURED_CLOCK_CURVES[gpu.name][0]}), a load that drew under the TDP uncapped "
                "(no curve of a GEMM load at a cap was found)" + (f"; {cost}" if cost else ""))
    if gpu.name in POWER_SIBLINGS:
        return (f"run at {watts} W, below the {gpu.tdp_watts:g} W TDP: the tensor clock read "
                f"between {POWER_SIBLINGS[gpu.name]}'s and this SKU's ratings (no measured "
                "curve of the sustained clock against the cap)")
    return (f"run at {watts} W, below the {gpu.tdp_watts:g} W TDP: the tensor peaks are the "
            "SKU's at its TDP (no source gives the sustained clock at the cap)")


def _quant_kernel_gap(run: dict, row: Row) -> str:
    q = str(run["job"].get("weight_quant") or "")
    if not q or row.mechanism not in ("quantized decode", "batched decode"):
        return ""
    gemv = run["job"].get("awq_version") == "gemv"
    if gemv:
        out = ("the GEMV kernel's bandwidth share is a lower bound read from TinyChat's Llama-2-7B "
               "on the same kernel (compute/efficiency.py gemv_bw_awq_gemv: its whole step at the "
               f"kernel's rate); this row's kernel is {q}")
    else:
        out = ("the GEMM kernel's bandwidth share is the 16-bit GEMV's (compute/efficiency.py "
               "QUANT_KERNELS autoawq-gemm, a mechanism with no published figure; its 8 split-K "
               f"partials and their sum are timed); this row's kernel is {q}")
    if gemv and (run["job"].get("micro_batch") or 1) > 1:
        out += ("; marked 'avoid using' at batch > 1 by the source: its code reloads the packed "
                "weights once per row of the batch, the rows after the first timed from the L2 "
                "at its measured rate where a launch's matrix fits the footprint the L2 was "
                "measured to keep (compute/time.py row_rereads), else from DRAM; each row's "
                "unpacking and dequantization timed by its instructions, 265 a 32 weights "
                "(compute/efficiency.py AWQ_GEMV_ISSUE_PER_WEIGHT, its sm_89 SASS) at 128 a "
                "clock per SM, the rows one after another, each the longer of its reads and its "
                "issue (compute/time.py gemv_issue_s; the split of the SM's pipes not counted)")
    if run["job"].get("kv_window"):
        out += ("; its decode attention is FT's single_query_attention, timed by each thread "
                "block's chain of loads (compute/efficiency.py single_query_attention_s: one "
                "memory latency per loop iteration, nvcc's unrolling not checked; here "
                f"{_window_context(run, [])} keys a step); the softmax between its loops, the "
                "cache's roll every 100 steps (outside the median step) and the fused model's "
                "per-layer Python are not timed")
    return out


def _fsdp2_copy_gap(run: dict, row: Row) -> str:
    """FSDP2's copies around its collectives on the compute stream, not timed. In
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py the copy-in into the all-gather
    buffer runs on its own stream (``all_gather_copy_in_stream``), but
    ``foreach_all_gather_copy_out`` waits for the gather on the current stream and copies the
    gathered buffer into each parameter there (``split_with_sizes_copy``), and ``foreach_reduce``
    builds the reduce-scatter input with ``_chunk_cat`` of the unsharded gradients, cast to the
    reduce dtype, before the reduce-scatter stream waits on it: per parameter and micro-batch, 2
    gathers x (2 B read + 2 B written) + 2 B read + 4 B written (fp32 reduce) = 14 B of memory
    traffic. Timed where the engine's profile says so (``fsdp2_reduce_bytes``: torchtitan,
    compute/parallel.py fsdp2_copy_bytes); a gap for the others."""
    if "fsdp2" not in str(run["job"].get("zero") or "").lower().replace(" ", "") \
            or row.mechanism not in ("single-node ZeRO-3 / FSDP", "multi-node ZeRO-3 / FSDP") \
            or get_engine(run["engine"]).fsdp2_reduce_bytes:
        return ""
    return ("FSDP2's copy-out of the gathered weights and its chunk-cat of the gradients into the "
            "fp32 reduce-scatter input run on the compute stream, untimed: ~14 B a parameter a "
            "micro-batch (Llama 3.1 8B at 2.4 TB/s: ~55 ms, 2-3% of these steps)")


def _host_gap(run: dict, row: Row) -> str:
    if not row.host_bound:
        return ""
    return ("the step is host-bound: the host's cost per kernel (compute/efficiency.py "
            "eager_host_fwd_s, compile_host_s) was set on other hosts; the source's CPU is another")


def _serving_gap(run: dict, row: Row) -> str:
    if row.mechanism != "online serving":
        return ""
    return ("gpuplan.capacity's simulation (validate_capacity.md's row of the same measurement): "
            "the serving engine's per-step host cost (scheduling, sampling, detokenization "
            "between steps) is in its engine profile only where a source gives it (vLLM's output "
            "processing, vllm issue #6913, and its EngineCore's scheduling and input preparation, "
            "vllm PRs #42131 and #46112, beside the step from 0.14's async scheduling); "
            "vLLM's per-request path has no published figure; TensorRT-LLM's has none, nor a "
            "per-token streaming cost through Triton; its per-request front-end time is fitted "
            "(engines/profiles.py, "
            "ServingHost) and moves TTFT only")


def _fsdp_nodes_gap(run: dict, row: Row) -> str:
    """A multi-node FSDP row whose communication shows: what the estimate's exposed share is
    made of, and what NCCL does that it leaves out. NCCL's per-channel caps
    (tuning.cc ``perChMaxRingLL128Bws``, ``perChMaxTreeBws``) bind LL128 and the tree only,
    which large gathers do not take (Simple); NVLS / SHARP reduce in the switch (an all-reduce
    across nodes: NVLS-tree; an all-gather or reduce-scatter across nodes only with CollNet),
    which would make these steps faster, not slower. The IBM/PyTorch post reads ~10% of its
    H100 steps as exposed network ("network peeking out") and puts the rest of their low MFU on
    HBM bandwidth -- the device, not the collectives."""
    if row.mechanism != "multi-node ZeRO-3 / FSDP" or row.comm_share < 0.05:
        return ""
    return (f"exposed communication {100 * row.comm_share:.0f}% of the estimated step: the edge "
            "units' gathers and scatters (compute.parallel.fsdp_edge_share) and the SMs NCCL's "
            "CTAs hold beside the hidden traffic (the IBM post's H100 profiles: ~10% 'network "
            "peeking out'); not modeled: NVLS/SHARP in-switch reduction (would be faster)")


def _fsdp_machinery_gap(run: dict, row: Row) -> str:
    """llm-foundry's Composer FSDP1 rows and torchtitan's FSDP2 rows: FSDP's own machinery,
    sized by hand on one row of each and ruled out as what is left of their optimism
    (llm-foundry's A100 rows ~1.05-1.13x once their FlashAttention v1 is timed, 1.15-1.26x
    before; torchtitan's 8B FSDP rows 1.15-1.24x) (issue 31, helper fsdpbias, main f318d67; a
    negative result, nothing timed from it).

    llmfoundry-mpt1b-a100_80gb-x8-s2048 (1.31e9 parameters, 8 ranks, 4 micro-batches of 14 x
    2,048 tokens): estimated 4.64 s a step with FlashAttention-2's rate, 5.12 s with the
    FlashAttention v1 its 2023 harness ran (:func:`train_attention`: 1.21 -> 1.09), the figure
    implies 5.59 s (0.95 s, then 0.48 s missing).
    torchtitan-t1-llama31-8b-fsdp8-compile (8.03e9, 8 ranks, one micro-batch of 2 x 8,192):
    2.05 s estimated, 2.46 s implied (0.41 s missing). Per step, at 2.0 / 2.4 TB/s HBM:
    (1) copies on the compute stream, timed (``fsdp_copy_s``: FSDP1's flat-gradient cat 12 ms;
    FSDP2's copy-out and fp32 chunk-cat 55 ms); off it, untimed: the bf16 cast of the shard
    before each all-gather (FSDP1 pre-unshard stream, FSDP2 ``all_gather_copy_in_stream``:
    6 B a sharded element, 8 GB / 12 GB: 4 / 5 ms), the fp32 cast and pre/post divide of the
    gradient (FSDP1 post-backward stream: at most 14 B an unsharded element, 73 GB, 37 ms;
    FSDP2 none at an fp32 or bf16 reduce dtype: ``_get_gradient_divide_factors`` returns no
    factors, "use NCCL's built-in division to avoid separate div kernels", and the
    reduce-scatter runs ``ReduceOp.AVG``, torch/distributed/_composable/fsdp/
    _fsdp_collectives.py in its 2024 versions, read in an undated stored copy). (2) NCCL's own
    HBM traffic beside the compute (ring all-gather: the received bytes written and forwarded,
    ~2 x 7/8 of the gathered bytes; reduce-scatter ~3 x 7/8 of its input, fp32 taken as the
    bound): ~92 GB / ~140 GB, 46 / 58 ms, if every byte displaced a memory-bound kernel's.
    (3) The SMs NCCL holds: timed (``overlap_sm_share``); the
    collectives run ~50 ms of each 1.28 s micro-batch (~4%) and ~155 ms of the 2.05 s step
    (~8%), so even compute stopped beside them is not 20%. (4) Host: 3,124 / 2,562 kernels
    issued in 40 / 10 ms; FSDP1's rate limiter (limit_all_gathers) ties the host to the device
    a unit at a time, but each block's device work (~16 ms forward) far exceeds its host work,
    and FSDP2's ~130 hooks (33 groups x 4) run ahead of a 2 s device step (its loss is read on
    the host only on logging steps, as read of torchtitan's train.py of that period, not
    re-read at 9dec370; the clip is foreach norms and a mul). (5) The optimizer over the
    shards: 7 / 38 ms estimated (AdamW over 1/8 of the fp32 states); DTensor's foreach dispatch
    is host work ahead of the device. (6) Clipping's norm all-reduce: one scalar. (7) Composer's
    per-batch console logging (the 2023 yamls' ``console_log_interval: 1ba``): host work after
    the step, ~ms. Sum of the untimed bounds: ~2% / ~3% of these steps (4 + 37 + 46 ms; 5 + 58
    ms) against the 9% / 20% missing.

    Differential: what is left is not FSDP's. Megatron-Core r0.8.0's own compute-dominated
    rows read as optimistic (megatron-core-gpt1.7b-h100-x48, TP 1 DP 48: 1.37;
    megatron-core-gpt7.1b-h100-x96, TP 2: 1.24; narayanan2021-gpt1.7b-a100-x32: 1.12), while
    the Megatron rows within ~6% carry 9-32% of their estimated step as exposed communication
    and the FSDP rows here under 5%; and a single A100 running Llama 3.2 3B under torchtune at
    an estimated 68% MFU reads 1.00 (torchtune-llama32-3b-compile-throughput), where
    llm-foundry's 3B on 8 A100 read 1.18 at 73% (FlashAttention-2's rate), 1.08 at 67% (v1's).
    With that kernel timed the split is by GPU, not by engine: the A100 FSDP rows read
    0.93-1.13 (llm-foundry 0.99-1.13, IBM's fms-fsdp 0.93-1.06), the H100 ones 1.15-1.31
    (torchtitan 8B 1.15-1.24 at 500 W, IBM 1.17-1.26, llm-foundry's 512-GPU 70B 1.31) as
    Megatron-Core's compute-dominated H100 rows do (1.24-1.37). What the H100's
    compute-dominated steps miss was not identified (no device profile of these runs; the
    differential over every H100 row and what it ruled out: above :func:`_hopper_compute_gap`)."""
    if row.mechanism not in ("single-node ZeRO-3 / FSDP", "multi-node ZeRO-3 / FSDP") \
            or row.comm_share >= 0.05 or not (run["job"].get("runtime") == "composer-fsdp"
                                              or run["engine"] == "torchtitan"):
        return ""
    return ("FSDP's machinery sized by hand (_fsdp_machinery_gap's docstring) and ruled out: "
            "the untimed shard casts and gradient divides off the compute stream, NCCL's own "
            "HBM traffic beside the compute, the host's hooks and the sharded optimizer and "
            "clip add at most ~2-3% of the step; what is left follows the GPU, not FSDP (A100 "
            "FSDP rows 0.93-1.13, H100 ones 1.15-1.31, as Megatron-Core's compute-dominated "
            "H100 rows, 1.24-1.37); not identified")


# The H100 training rows' optimism (issue 31, helper h100bias, 2026-12-07; a negative result,
# nothing timed from it). The differential: the 43 dense H100 training rows of runs.json (both
# splits) and fp8_runs.json (the Qwen3 MoE rows left out: their own MoE notes), each with its
# estimate's shares (benchmarks/speed_breakdown.py class_totals) and its GEMMs' shapes. Pearson
# r against the ratio: TP degree -0.70, exposed communication's share of the estimated step
# -0.62, the weight GEMMs' share of the device time -0.41, the optimizer's +0.44, fused
# attention's +0.41, log2 of the smallest GEMM K or N +0.39, host issue over device time -0.17,
# estimated MFU +0.02, FP8 +0.06. Median ratio by TP: TP 1 (18 rows) 1.18, TP 2 (1) 1.24, TP 4
# (5) 1.04, TP 8 (19) 1.01; with the exposed communication taken as estimated, the rest of the
# step would be (ratio - c) / (1 - c) = 1.19x (TP 1) and 1.01x (TP 8) its estimate. So the
# optimistic rows are TP 1-2 steps, nearly all with under 3% exposed (torchtitan 8B FSDP,
# llm-foundry MPT-70B, Megatron-Core 1.7B / 7.1B, NeMo 24.07 7B / 8B / 13B FP8; IBM fms-fsdp at
# 11%), with the *largest* GEMM K and N (4,096-14,336 unsharded) and GEMM-lighter mixes; the
# rows within ~8% are TP 4-8 steps carrying 7-20% exposed communication (Megatron-Core 16B and
# 70B-462B, Llama 3 405B, torchtitan's 70B, Megatron-Bridge's 405B; Megatron-Core's 32B, at
# 32%, reads 0.84). Exceptions both ways: torchtitan's TP 8 PP 8 405B rows read 1.10-1.17 at
# 2-14%; Megatron-Bridge's TP 4 70B FP8 rows 0.97 at 3%, torchtitan's TP 1 CP 2 8B 1.04 at 3%.
# Ruled out, each with a published H100 figure the rows did not produce:
# - The GEMMs' shapes (tile, wave and K-loop quantization on 132 SMs): XLA's measured sm_90 BF16
#   table (benchmarks/published/xla_sm90_matmul.json, tensorflow @372d578b) reads 0.97-1.06 of
#   the model's rate (0.80 x waves) at K >= 2,048 -- 783-808 TFLOP/s at 4,096^3 against 767.5 --
#   the regime of every weight GEMM of these rows (tests/unit/test_xla_sm90_matmul.py). Below
#   it the measured rate falls (K = 1,024: 0.89-0.90; 512: 0.79-0.81), a K-loop share the model
#   charges only to grouped expert GEMMs; a what-if charging dense Hopper GEMMs
#   kb / (kb + 2.08) (DeepGEMM's 4.17 FP8 K blocks at the BF16 peak; XLA's table reads ~1.9),
#   normalised at K = 4,096, moved no TP 1 torchtitan, IBM or llm-foundry row, Megatron-Core
#   1.7B (hidden 2,304) 1.37 -> 1.33 and the TP 8 rows 0-0.9% the pessimistic way: not shipped.
# - A sustained GEMM clock at 700 W: huggingface/gpu-fryer's README (@2b6fb06a) gives an H100
#   80GB HBM3 ~730 TFLOP/s in its cuBLAS BF16 8,192^3 burn loop (60 s by default; 'for
#   reference', no clock or limit stated), 0.951 of the model's 767.5 at
#   that shape (its FP8 ~1,530, 1.12x the model's 1,361, the other way). A what-if with Hopper's
#   BF16 fraction x 0.951 moved TP 1's median 1.18 -> 1.17 and TP 8's 1.01 -> 1.00
#   (Megatron-Core 70B-462B 0.97-1.00 -> 0.94-0.97, Llama 3 405B 0.93-1.01 -> 0.90-1.00): every row
#   alike, the spread kept, so not the differential's mechanism; not shipped. The GEMM share's
#   negative r says the same of any tensor-clock factor (device.py's 700 W note: a 0.84 trial).
# - Attention: Hopper's fused attention is timed at FlashAttention-2's 35% of peak
#   (attn_fwd_hopper_fa2, FlashAttention-3's paper) for every training engine, torchtitan's SDPA
#   included (only vLLM's serving steps run FA3's 0.75: engines/profiles.py ATTENTION_16BIT); Megatron's and NeMo's Transformer Engine runs FlashAttention-2 or cuDNN's fused
#   kernel, none slower, so a kernel of their own would raise those estimates, widening the
#   gap of the 1.7B / 7.1B / NeMo rows, not closing it.
# Not identified: what a TP 1-2 H100 step pays that a TP 4-8 one does not, or what the TP 4-8
# rows' estimated exposed communication over-counts by as much (either reads the differential);
# no device profile of these runs, and none was run here (no H100 lent to this task).
def _hopper_compute_gap(run: dict, row: Row) -> str:
    """A Hopper training row whose estimated step is compute-dominated (under 5% exposed
    communication; context-parallel rows have their own note, :func:`_torch_cp_gap`): the
    differential above and what it ruled out (a negative result)."""
    if not run["kind"].startswith("train") or row.comm_share >= 0.05 \
            or (run["job"].get("cp") or 1) > 1 \
            or get_gpu(run["hardware"]["gpu"]).architecture.lower() != "hopper":
        return ""
    return ("an H100 step the estimate finds compute-dominated: across the dense H100 training "
            "rows the optimism follows the TP degree and the exposed communication (TP 1 "
            "median 1.18, TP 8 1.01), not the GEMMs' shape or share; ruled out with published "
            "H100 figures (the comment above _hopper_compute_gap): the GEMM shapes (XLA's "
            "sm_90 table, xla_sm90_matmul.json: 0.97-1.06 of the model's rate at K >= 2,048, "
            "where these rows' GEMMs lie), a sustained-clock GEMM rate (gpu-fryer's 60 s BF16 "
            "loop, 0.95 of the model's: every row alike) and Hopper's attention kernel; not "
            "identified")


def _volta_gap(run: dict, row: Row) -> str:
    """The V100 fp16 rows' gap, read op by op (benchmarks/speed_breakdown.py prints the ops; issue
    31). Found: BERT's query, key and value are three nn.Linear, three GEMM launches that tile
    and wave over the SMs each on its own (compute/efficiency.separate_launches_s): 96 tiles on
    80 SMs, 60% busy, where one fused 1,536 x 3,072 product was timed at 90% -- the DLE rows
    moved fp32 1.08 / 1.12 -> 1.01 / 1.04, AMP 1.23 / 1.22 -> 1.17 / 1.16, pre-training AMP 1.22
    -> 1.20 (its 2,048 tokens fill the waves better). Left, dle-bert-large-ft-v100-16g-amp: 95.3
    ms estimated, 111.5 ms implied; by class GEMMs 48.9, attention bmm 4.7, elementwise 17.6,
    optimizer 22.8 (Adam 12.3, loss scaling 5.3, clip 5.3), gaps 1.3 ms; host issue 19.4 ms.
    Each class against what is published: (e) DeepBench's V100 GEMMs of one to two waves measure
    as timed here (4096x128x4096 NN 67 us vs 64.7; 7680x128x2560 NN 74 vs 81) and larger ones
    faster (fit 0.815); its one slow row, 7680x128x2560 TN, 130 vs 81 us, is the weight-gradient
    layout of BERT's 1024 x 1024 layers (1.6x on those: ~2.5 ms); (a) the batched K = 64 GEMMs
    have no V100 figure in DeepBench's sheet (K >= 512) and are 4.7 ms in all (at half the rate
    timed, an assumption: +4.7 ms); (b) pre-1.5 PyTorch ran half elementwise kernels at ~80% of
    fp32's rate (pytorch/pytorch#22612, ngimel, 2019-07-15): <= 4.4 ms on the elementwise class;
    (c) the step is device-bound unless the host's cost per kernel is 4.9x the one timed; (d) the
    2019 FusedAdam's per-tensor Python loop (DeepLearningExamples BERT fused_adam_local.py) moves
    the row by 0.005. Unsourced and not shipped (before the launches were split): a host cost per
    kernel 2x (3x) the one timed read the DLE fp16 rows 1.13-1.16 (0.98-1.02) and HF's GA4+GC fp16
    rows 1.10-1.17 (0.77-0.80), fp32 rows unmoved, but HF's batch-4 fp16 row 1.39 (1.23).
    Split-K's fixed cost on V100 (efficiency.splitk_fixed_volta_s, 16.8 us a GEMM of fewer
    output tiles than SMs, DeepBench's V100 rows) moved HF's micro-batch-1 GA4+GC fp16 rows
    1.85 / 1.65 / 1.61 -> 1.72 / 1.55 / 1.52 (their separate Q/K/V launches are split-K)."""
    if row.mechanism != "Volta/Turing training" and "V100" not in run["hardware"]["gpu"]:
        return ""
    return ("fp16 on Volta, read op by op (benchmarks/speed_breakdown.py; _volta_gap's docstring "
            "has the figures): DeepBench's V100 GEMMs of BERT's one-to-two-wave sizes measure "
            "as timed here (Q, K and V as three launches) and larger ones faster, so the gap "
            "lies outside the linear layers; the attention core's K=64 batched GEMMs (no V100 "
            "figure), pre-1.5 PyTorch's half elementwise kernels at ~80% of fp32's rate "
            "(pytorch#22612) and the transposed weight-gradient GEMMs (DeepBench "
            "7680x128x2560 TN: 1.6x) add at most ~12 of the 16 ms missing from "
            "dle-bert-large-ft-v100-16g-amp; every host wait in the code these rows ran is "
            "timed (BLOCKING_INPUT_COPY, HOST_READ_AFTER_BACKWARD, apex amp's overflow .item(), "
            "GradScaler's found_inf.item()), and the step is device-bound unless the host's "
            "cost per kernel is several times the one timed. The 1.16-1.72x left, common to "
            "every fp16 row (APEX O2 and autocast alike), is not identified")


def _zero3_2021_gap(run: dict, row: Row) -> str:
    if "ZeRO-3" not in str(run["job"].get("runtime")):
        return ""
    return ("DeepSpeed 2021's ZeRO-3 gathers are waited for as a whole; its per-module fetch "
            "order and bucket sizes are not in the job")


# The IBM rows' FSDP1 as their code ran it (issue 31, helper ibmfsdp, 2026-12-07): each fact read
# at foundation-model-stack/fms-fsdp@5e522b4 (main_training.py, fms_fsdp/utils/train_utils.py,
# fms_fsdp/config/training.py, scripts/train.sh) and in torch's FSDP1 of early 2024
# (torch/distributed/fsdp/_runtime_utils.py, fully_sharded_data_parallel.py); the per-unit
# figures are the estimate's own (benchmarks/speed_breakdown.py, compute.parallel's collectives).
# One mechanism was missing and is timed: the loop's clip (below, (8)); the rest, checked:
# (1) limit_all_gathers: ``_unshard`` calls ``state._free_event_queue.dequeue_if_needed()`` and
#     ``event.synchronize()`` before each all-gather; ``_reshard`` records a free event per
#     unit; with two un-freed gathers allowed the host issues unit k+1's gather once unit k-1
#     is freed, so it runs beside unit k: one unit ahead (forward_prefetch False, and
#     backward_prefetch BACKWARD_PRE, FSDP1's defaults; fms-fsdp sets neither). Per unit no
#     gather outlasts the compute it hides behind: 7B H100 (HSDP 8) a block's all-gather 1.02
#     ms (405 MB on NVLink 4) beside a block's 7.33 ms forward, its 15.46 ms backward beside
#     the gather and reduce-scatter (2.04 ms); 34B / 70B H100 (FSDP over 96, 100 Gb/s a GPU)
#     17.5 / 21.6 ms beside 19.9 / 23.5 ms forward, 35.0 / 43.1 ms beside 61.4 / 72.2 ms
#     backward with recompute; the A100 rows wider (7B 1.5 vs 18.2 ms, 34B 34.9 vs 54.1, 70B
#     43.0 vs 65.2), llm-foundry's MPT-70B on 512 H100 6.6 vs 37.2 ms. So the limiter exposes
#     no gather per unit here, only the edge units' (timed, fsdp_edge_share).
# (2) HSDP's replica all-reduce runs after each reduce-scatter on its own stream
#     (``_all_reduce_stream``, a second stream under hybrid sharding; the reduce-scatter
#     stream does not wait for it): 9.50 ms a 7B block (its 50.6 MB shard over 12 nodes at 100
#     Gb/s) beside 15.46 ms of backward, hidden but for the last units' (timed). Were it on the
#     reduce-scatter's stream, as in the 2023 code (pytorch/pytorch@00ae0bc9 _runtime_utils.py
#     _post_backward_hook: default_hooks.allreduce_hook on the post-backward stream), the two
#     in series (10.5 ms) would still fit a block's backward.
# (3) Sharding: scripts/train.sh --sharding_strategy=hsdp (HYBRID_SHARD, get_policies) for the
#     7B, the README's FSDP (FULL_SHARD) for 34B / 70B: as timed. (4) AC: the 7B none
#     (--fsdp_activation_checkpointing=False); 34B / 70B 'Full AC' is apply_fsdp_checkpointing
#     with selective_checkpointing 1 (every LLaMABlock: ``_count % every_xth_item == 0``,
#     NO_REENTRANT): full, as timed. (5) No torch.compile (use_torch_compile False), hence
#     use_orig_params False: the optimizer and the clip see one FlatParameter a unit (33 for
#     the 7B) where the estimate counts 291 tensors: 27.4 vs 27.0 ms of optimizer stretch,
#     ratio 1.2494 vs 1.2501; not shipped. (6) Batch 2 x 4,096, no accumulation: as timed.
# (7) NCCL: scripts/train.sh sets FI_EFA_SET_CUDA_SYNC_MEMOPS=0 and aws-ofi-nccl's library
#     path ("On AWS, the EFA and OFI paths enable NCCL to use optimized networking"),
#     setup_environ_flags NCCL_ASYNC_ERROR_HANDLING=1: no algorithm, protocol or channel
#     setting; the network is the README's 400 / 800 Gbps a node.
# (8) The loop: ``model.clip_grad_norm_(cfg.grad_clip_thresh).item()`` every step at 1.0 --
#     timed now (_grad_clip: 4.1 / 6.4 ms on the 7B H100 / A100 step; 7B 1.255 -> 1.249, 1.062
#     -> 1.058). Its ``.item()`` and ``loss.item()`` make the host wait twice a step, and the
#     next batch then comes from a DataLoader with num_workers=0 (dataloader_utils
#     get_data_loader) while the device idles: its Python after the arrow read (4,097-token
#     lines packed from lists, the 10,000-line shuffle buffer's pop, causal_lm's IntTensor and
#     clone, default_collate) replayed at 3.1 ms a step of 2 lines on this repository's shared
#     2-core CPU (torch 2.13), 0.3% of the 7B H100's 1.09 s step; the run's host not stated:
#     not timed. What is left untimed is under 1% of that step, against the 20% (218 ms of
#     1,092) its figure implies missing.
# Differential (README @5e522b4: "we use the exact same scripts and configurations for these
# GPUs"): measured H100 / A100 tokens a GPU 7500 / 3700 = 2.03 (7B), 1550 / 700 = 2.21 (34B),
# 800 / 370 = 2.16 (70B); estimated 2.39, 2.64, 2.70. Same code, same FSDP1, the faster network
# on the H100s: what the H100 rows miss scales with the GPU (the comment above
# _hopper_compute_gap), not with FSDP1's machinery or the loop.
def _fms_fsdp1_gap(run: dict, row: Row) -> str:
    """The IBM FSDP blog's rows, as their code ran them (foundation-model-stack/fms-fsdp @5e522b4,
    2024-03-13, the post's date): torch FSDP1 (``FullyShardedDataParallel``, flat parameters,
    ``limit_all_gathers=True``: at most two un-freed all-gathers, so one unit gathered ahead),
    not FSDP2; the README's table gives the 7B HSDP (sharded in the node, replicated across
    nodes: the job's ``dp_shard``, timed) and the larger ones FSDP. FSDP1's flat parameters,
    its rate limiter and its BACKWARD_PRE prefetch are not in the job: the timing is FSDP2's
    per-block units with one unit gathered ahead (the rate limiter's two in flight), with
    FSDP1's one copy on the compute stream timed (the engine profile's ``fsdp1_grad_cat``: the
    split backward's cat of a unit's gradients into its flat gradient, no copy-out). The
    reduce dtype is bf16 as timed (fms_fsdp/policies/mixed_precision.py ``bfSixteen``:
    ``reduce_dtype=torch.bfloat16``). IBM FMS's fp32 eager rotary is (the rows' ``model_code``
    fms, compute/efficiency.py ``eager_rotary_fms_bytes``). HSDP does not close the H100 rows'
    gap: it moves fewer bytes across nodes, not more. Nor does the network: the follow-up post
    (https://pytorch.org/blog/maximizing-training-throughput/, Team PyTorch at IBM and Meta,
    2024, Table 2's "MFU no-compile" column, after fms-fsdp ed74fd5 of 2024-05-09) reads the
    same no-compile MFU on 464 H100s over 3.2 Tbps a node as these 96 over 800 Gbps (464 / 96:
    7B 0.37 / 0.37, 13B 0.35 / 0.35, 34B 0.32 / 0.32, 70B 0.32 / 0.34), where gpuplan's own
    timing of the 7B, 34B and 70B jobs gains 7-9% from the faster network: a slower network
    here would contradict it. What the H100 rows miss is in the step's compute (the post's own
    guess: "the HBM bandwidth of H100s"), not in FSDP's traffic."""
    if run.get("source_group") != "ibm-fsdp-blog":
        return ""
    h100 = "h100" in run["id"]
    return ("ran torch FSDP1 (fms-fsdp @5e522b4: FullyShardedDataParallel, flat parameters, "
            "limit_all_gathers) over IBM FMS's Llama: timed as FSDP2's per-block units with "
            "FSDP1's flat-gradient cat"
            + (" under HSDP (dp_shard 8)" if run["job"].get("zero", "").startswith("HSDP")
               else "") + " (FMS's fp32 eager rotary timed, model_code fms); its loop's clip at "
            "1.0 timed; checked at 5e522b4 and ruled out (the comment above _fms_fsdp1_gap): "
            "FSDP1's rate limiter (no unit's gather outlasts the compute beside it), the "
            "replicas' all-reduce on its own stream, the flat parameters' count, the loop's two "
            "host reads and its num_workers=0 loader, under 1% of the step together"
            + ("; not the network: the same no-compile MFU on 464 H100s over 3.2 Tbps a node "
               "(pytorch.org/blog/maximizing-training-throughput, Table 2)" if h100 else ""))


def paged_overflow_bytes(run: dict) -> int:
    """Bytes of a bitsandbytes paged optimizer's states that do not fit on the run's GPU beside
    what torch's allocator holds at the peak (gpuplan's own memory plan of :func:`job_of`'s
    Job: total less the paged states), 0 where they fit or nothing is paged. The paged states
    live in CUDA managed memory (formats.py ``paged-adamw-8bit``): what does not fit is evicted
    to host memory and migrated back over PCIe when the optimizer touches it, every step."""
    job = job_of(run)
    if job.mode != "train" or not get_optimizer(job.optimizer).paged:
        return 0
    mem = train_memory(load_model(run["model"]["catalog"]), job)
    return mem.paged_overflow_bytes(get_gpu(run["hardware"]["gpu"]).memory_bytes)


def _paged_host_bytes(run: dict, notes: list[str]) -> int:
    """The run's paged optimizer states in host memory (:func:`paged_overflow_bytes`), which
    the estimate times coming back each step (``estimate_speed(paged_host_bytes=...)``)."""
    if "Paged" not in str(run["job"].get("optimizer") or "") or not run["model"].get("catalog"):
        return 0
    over = paged_overflow_bytes(run)
    if over:
        notes.append(f"PagedAdamW8bit: {over / 2**30:.1f} GiB of its states over the GPU's "
                     "memory (gpuplan's memory plan of the same Job), migrated back each step")
    return over


def _paged_optimizer_gap(run: dict, row: Row) -> str:
    """bitsandbytes PagedAdamW8bit over its GPU's memory: the overflow migrates both ways each
    step; the estimate times one direction at the link's pinned rate
    (compute/speed.py paged_migration_s), the evictions beside it -- serialized, they would
    double it."""
    if not _paged_host_bytes(run, []):
        return ""
    return ("PagedAdamW8bit's evictions to host memory (the other direction of each step's "
            "migration) are taken to overlap its fetches; serialized, they would add as much "
            "again")


#: The torchtune commit that added the README's "Optimization flags" table (Llama 3.2 3B on an
#: A100); its recipes count ``(batch["labels"] != self._loss_fn.ignore_index).sum()`` tokens
#: (recipes/full_finetune_single_device.py and lora_finetune_single_device.py @1814feb17), where
#: the "Memory and training speed" table's commit 30b8519e8 counted ``batch["tokens"].numel()``.
TORCHTUNE_LABEL_TOKENS_COMMIT = "1814feb17"


def _torchtune_packing_gap(run: dict, row: Row) -> str:
    """What a packed torchtune row's figure and kernels leave out of the estimate: the tokens it
    counts (the padding of each pack to max_seq_len is labelled ignore_index, PackedDataset
    ._pad_pack, and the 1814feb17 recipes do not count it) and the flex attention a packed
    batch runs on torch >= 2.5 (torchtune/modules/attention_utils.py @30b8519e8:
    packed_block_causal_mask builds a BlockMask, _sdpa_or_flex_attention runs flex_attention
    on it, skipping the blocks between documents). Neither the padding's share nor the torch
    version is stated; the estimate times every token of the pack and causal attention."""
    if run["engine"] != "torchtune" or not run["job"].get("packed"):
        return ""
    out = ("packed batches: on torch >= 2.5 flex attention with a document mask skips the "
           "attention between the pack's samples (torch version not stated), timed as causal "
           "attention over the whole pack")
    if run["source"].get("table") == "Optimization flags":
        out += (f"; the recipes at {TORCHTUNE_LABEL_TOKENS_COMMIT} count only tokens with a "
                "label, not the pack's padding (its share not stated)")
    return out


@functools.cache
def _predicted_of(run_id: str) -> float | None:
    """The prediction of the runs.json run ``run_id`` (its series' base for
    :func:`ring_step_ratio`), computed once."""
    run = next(r for r in json.loads(RUNS.read_text())["runs"] if r["id"] == run_id)
    return predict(run).predicted


def ring_series_run(run: dict, cp: int) -> dict | None:
    """The run of ``run``'s series at CP ``cp``: same source table, model, GPU and layout but
    for CP, holding as many tokens a rank (its ``seq`` = ``run``'s x ``cp`` / ``run``'s CP);
    None when ``cp`` is not below ``run``'s CP or its table has no such row."""
    job = run["job"]
    own = job.get("cp") or 1
    if not 1 <= cp < own:
        return None
    same = ("tp", "pp", "micro_batch", "checkpointing", "float8", "runtime")
    for other in json.loads(RUNS.read_text())["runs"]:
        o = other["job"]
        if (other["source"] == {**run["source"], "row": other["source"].get("row")}
                and other["model"] == run["model"] and other["hardware"] == run["hardware"]
                and (o.get("cp") or 1) == cp and o.get("seq") * own == job.get("seq") * cp
                and all(o.get(k) == job.get(k) for k in same)):
            return other
    return None


def ring_base_run(run: dict) -> dict | None:
    """The CP 1 run of ``run``'s series (:func:`ring_series_run`); None when ``run`` is not a
    CP run or its table has no such row."""
    return ring_series_run(run, 1)


def ring_previous_run(run: dict) -> dict | None:
    """The run of ``run``'s series at the largest CP below ``run``'s (:func:`ring_series_run`):
    the row whose ring ``run``'s adds the fewest steps to; None where there is none."""
    for cp in range((run["job"].get("cp") or 1) - 1, 0, -1):
        other = ring_series_run(run, cp)
        if other is not None:
            return other
    return None


def _ring_ratio(run: dict, row: Row, other: dict | None) -> float | None:
    """``(1/measured - 1/measured_o) / (1/predicted - 1/predicted_o)`` in the rows' tokens/s
    per GPU, ``other`` (a run of ``run``'s series at a lower CP) the ``o``; None without
    ``other`` or where the figures are not a rate of tokens."""
    if other is None or row.predicted is None or not row.unit.startswith("tokens/s") \
            or other["measured"]["unit"] != run["measured"]["unit"]:
        return None
    p1 = _predicted_of(other["id"])
    m1 = other["measured"]["value"]
    if p1 is None:
        return None
    return (1 / row.measured - 1 / m1) / (1 / row.predicted - 1 / p1)


def ring_step_ratio(run: dict, row: Row) -> float | None:
    """Measured over estimated cost of the ring steps ``run`` adds to its series' CP 1 run
    (:func:`ring_base_run`): the step time a token of one GPU takes, the CP 1 run's taken off,
    ``(1/measured - 1/measured_1) / (1/predicted - 1/predicted_1)`` in the rows' tokens/s per
    GPU. Both runs hold the same tokens a rank, so the difference is the CP - 1 later ring
    steps (each the same sub-SDPA work) and the ring's machinery; None without a base run
    or where the figures are not a rate of tokens."""
    return _ring_ratio(run, row, ring_base_run(run))


def ring_marginal_ratio(run: dict, row: Row) -> float | None:
    """:func:`ring_step_ratio` against the series' run at the next lower CP
    (:func:`ring_previous_run`) instead of its CP 1 run: what only the ring steps ``run``
    adds to that row cost, measured over estimated. Equal to :func:`ring_step_ratio` at
    CP 2 (its previous row is the CP 1 one). Per-step costs (a kernel's rate, an exchange's
    bandwidth, a merge's traffic) give every CP the same marginal ratio.

    Read on torchtitan's CP rows (issue 31, helper ttcp; main 4063f1e), each against its
    series' next lower CP: the 8B's ring steps cost 0.85x (CP 1 to 2), 1.77x
    (2 to 4) and 1.46x (4 to 8) the estimate's, the 405B's 1.12x, 0.87x, 1.20x. A cost that
    each ring step carries (a kernel's rate, a link's bandwidth, a merge's traffic) reads the
    same at every CP; the 8B's does not, and its jump lies between CP 2 and CP 4, where the
    sub-SDPA shapes (32,768 queries against 16,384 keys, or 16,384 against 32,768) do not
    change. A layer and ring step of the 8B (32 query heads after repeat_kv, head dim 128,
    H100-SXM-96GB at 500 W) is estimated at 164 ms (CP 1 to 2) and 156 ms (2 to 4, 4 to 8),
    144 ms of it the sub-SDPA forward, recompute and backward (8.8 TFLOP forward: 29, 29 and
    86 ms); measured, 140, 277 and 228 ms: -24, +121 and +72 ms. Checked against that, each
    as timed here (:func:`_torch_cp_gap`; torch's ``_templated_ring_attention`` and its
    backward read at pytorch/pytorch@0123248a (2025): the runs' torch 1963fc8 is not in the
    source index, and ttcp2 found the late-2024 ring the same):

    - the rotate method: torchtitan@9dec370's default "allgather" (one all-gather of every
      rank's K and V a ring, ``_AllGatherRotater.exchange_buffers`` "only need to perform the
      allgather once"), three a layer (forward, recompute, backward), each waited for where
      issued (:func:`torch_cp_traced`): 1.5, 4.5 and 10.5 ms a layer at CP 2, 4, 8
      (``collective_time`` over NVLink at 0.8), so at most 4.5 ms a layer and added step.
    - repeat_kv: torchtitan's Llama repeats K and V to the 32 query heads before SDPA and
      the engine profile times it (``sdpa_repeat_kv``): 537 MB of K and V a rank and layer
      gathered, 4x the GQA's 134 MB; already the larger figure.
    - the fp32 merges (``_SDPAMerger``, ``convert_to_f32`` True): traced, 1.3 GB forward and
      5.6 GB backward a layer and added step (:func:`~gpuplan.compute.parallel.
      torch_cp_merge_bytes`, the CP 4 to 8 difference over 4 steps) at 2.04 TB/s: 0.7 ms,
      the recompute's 0.7 ms and 2.8 ms.
    - the backward's ring: the fp32 dK/dV of 32 heads (1.07 GB) sent each step by the
      all-to-all rotater (``dkv_rotater``, ``_RotateMethod.ALL_TO_ALL``), each exposed:
      3.0 ms a step. With the three above, about 12 ms a layer and added step: the +72 to
      +121 ms missing would need six to ten times all of it.
    - a slower link than NVLink's 0.8: the exchanges ten times slower would add ~95 ms a
      layer at CP 2 (10.5 ms a layer there), whose added step is 24 ms under the estimate;
      the 405B's ring, over InfiniBand, reads 0.87x-1.20x.
    - float8: torchao's Float8Linear sees the rank's local tokens (``context_parallel``
      shards the buffers to local tensors, ``_context_parallel_buffers``' ``to_local()``;
      only the SDPA's inputs become DTensors, ``sdpa_input_fn``), 32,768 a rank at every CP
      of the series: nothing of it grows with the ring steps.
    - load balancing: ``_ContextParallelOptions.enable_load_balance`` True by default
      (``context_parallel`` then shards by ``_generate_round_robin_indices``); were it off,
      the last rank would run its causal block and CP - 1 unmasked full blocks, each added
      step twice the balanced one: 2x at CP 2, which reads 0.85x.

    What is missing is not identified (no device to profile the rows: a per-rank trace of
    the CP 2 and CP 4 steps would show whether the sub-SDPA kernels or the waits between
    them take the +121 ms)."""
    return _ring_ratio(run, row, ring_previous_run(run))


def _torch_cp_gap(run: dict, row: Row) -> str:
    """torchtitan's context-parallel rows (torch's context_parallel): what was checked of the
    ring's attention and ruled out as the miss (issue 31, helper ttcp2), beside the measured
    over estimated cost of the ring steps the row adds to its series' CP 1 row
    (:func:`ring_step_ratio`).

    Checked, as timed: the sub-SDPA kernel is FlashAttention-2 (torch's bundled flash
    backend): torchtitan@9dec370 torchtitan/utils.py ``get_train_context`` enters
    ``sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])`` whenever CP
    is on ("TODO: support cuDNN backend"), and the torch of the runs (2.6 nightlies of
    2024-12) did not pick cuDNN on its own either (pytorch/pytorch#142132, 2024-12-05:
    2.6.0.dev20241204 SDPA runs flash on H100, "This is expected"); its H100 rate at head dim
    128 and 16k tokens, read from the bar labels of the FlashAttention-3 paper's charts
    "Attention forward speed, head dim 128 (H100 80GB SXM5)" and "Attention backward speed,
    head dim 128" (Shah et al. 2024, arXiv 2407.08608): FA2 370 TFLOP/s forward, 322
    backward, against gpuplan's 0.35 and 0.35 x 0.85 of 989 (346, 294; efficiency.py
    attention_fraction) before the 500 W clock: no faster than the paper's. The round-robin load balance
    (torch/distributed/tensor/experimental/_attention.py ``_templated_ring_attention``, the
    late-2024 and 2025 versions alike) runs step 0 causal over the rank's two chunks and
    every later step unmasked over half a block -- all queries against the first K/V chunk
    (step <= rank) or the second query chunk against both (step > rank) -- so a rank
    computes s^2 / 2CP scores, what compute/parallel.py times (the local causal block x CP);
    no masked half is computed. The backward (``_templated_ring_attention_backward``) calls
    one flash backward a step with the merged output and log-sum-exp (no merge recomputed):
    2.5x the step's forward FLOPs, as counted, its per-call preamble and the fp32 dQ/dK/dV
    accumulation and dK/dV ring in torch_cp_merge_bytes / torch_cp_exposed_s.

    Against the kernel's rate: the 8B series' ring steps cost 0.85x (CP 2), 1.45x (CP 4) and
    1.46x (CP 8) the estimate's, the 405B series' (TP 8 PP 8; the same 32,768 tokens and
    head dim a rank, the same sub-SDPA shapes at half the heads) 1.12x, 0.96x, 1.09x
    (validate_speed at ttcp2's base, main 80427c6): a slower attention kernel would slow
    both series' steps alike, and the 8B's own CP 2 steps too. torchtitan's TPS/GPU divides
    by cp x tp x pp (train.py ``non_data_parallel_size`` @9dec370), as gpuplan's per-GPU
    rate does, so the figure's unit is not it.

    Step by step, and what each ring step's machinery costs as timed (issue 31, helper ttcp):
    :func:`ring_marginal_ratio`'s docstring; not identified."""
    if "torchtitan 9dec370" not in (run.get("notes") or "") or (run["job"].get("cp") or 1) <= 1:
        return ""
    ratio = ring_step_ratio(run, row)
    head = f"torch context parallel at CP {run['job']['cp']}"
    if ratio is not None:
        head += (f": the ring steps added to the series' CP 1 row cost {ratio:.2f}x the "
                 "estimate's")
    prev = ring_previous_run(run)
    marginal = ring_marginal_ratio(run, row)
    if marginal is not None and (prev["job"].get("cp") or 1) > 1:
        head += f", those added to its CP {prev['job']['cp']} row {marginal:.2f}x"
    return (head + "; checked and timed as run: FlashAttention-2 sub-SDPA calls "
            "(torchtitan 9dec370 sdpa_kernel FLASH/EFFICIENT under CP), the round-robin "
            "halves unmasked (s^2/2CP scores a rank), one flash backward a step, the "
            "all-gather rotater, K and V repeated to the query heads, the fp32 merges and "
            "dK/dV ring (together ~12 ms a layer and ring step, against the 8B's +72 to +121 "
            "ms missing); float8 (the same tokens a rank at every CP) and load balancing "
            "(off, CP 2's added step would read 2x) ruled out; the 8B series' excess at CP 4-8 "
            "against the 405B series' ~1x at the same per-rank shapes rules out the kernel's "
            "rate; a per-step cost would read the same at every CP, the 8B's jumps between "
            "CP 2 and CP 4; cause not identified")


def _torch_pp_gap(run: dict, row: Row) -> str:
    """torchtitan's pipeline rows (torch.distributed.pipelining at torch 1963fc8): what is timed
    of the runtime, and what was checked and ruled out as the rest of the miss (issue 31,
    helper tt405pp).

    Timed (compute/parallel.py ``pipeline_reduce_exposed_s``, ``pipeline_accumulate_bytes``):
    the stage's FSDP2 reduce-scatter issued after the last micro-batch's backward (stage.py
    ``backward_maybe_with_nosync``: gradient sync off for every micro-batch, then
    ``post_backward`` on every param group), and each micro-batch's bf16 gradient accumulated
    into an unsharded fp32 sum (FSDP2 ``to_accumulated_grad_if_needed`` /
    ``accumulate_unsharded_grad_if_needed``): 1.166 -> 1.137 (1F1B), 1.184 -> 1.159
    (interleaved), the CP series 0.5-2 points.

    Checked and ruled out: (1) Schedule1F1B's send/recv batches, each waited for before the
    next compute (the last warm-up send fused with the first gradient recv, each backward's
    send with the next forward's recv): replayed by benchmarks/torch_pp_schedules.py on 8 equal
    stages they give the ideal (m + p - 1)(F + B) exactly, with 27 hops of ~3.4 ms on the
    critical path against the 16 timed (~0.04 s of a ~36 s step); its warm-up (p - rank
    forwards, then 1B1F) is Megatron's order. (2) Interleaved1F1B's time-step runtime
    (PipelineScheduleMulti: every step's p2p batch waited for before the next): +1.3% over the
    ideal at the row's F:B (same script), not timed. (3) torchtitan's split
    (pipelining_utils.py ``generate_split_points`` @9dec370: 15, 16 x 6, 15 + head for 1F1B;
    ranks 1-6 hold 16 layers under Interleaved1F1B): the busiest stage is the 16 layers timed.
    (4) shape inference runs on the first step only (the figure is iteration 90's); (5) both
    schedules run the full backward (no input/weight split); (6) no per-micro-batch all-gather
    (torchtitan's reshard_after_forward False under PP and the stage's
    set_reshard_after_backward(False) until the last backward). What keeps the 405B PP rows
    ~1.1-1.16 while the 70B TP 8 FSDP 32 AsyncTP row of the same table family reads ~1.03 (as
    read when this was written; validate_speed.md's holdout table has today's ratios) is
    not identified (no device to profile them)."""
    if "torchtitan 9dec370" not in (run.get("notes") or "") or (run["job"].get("pp") or 1) <= 1:
        return ""
    return ("torch.distributed.pipelining: the stage's FSDP reduce-scatter after the last "
            "backward and its fp32 gradient accumulation timed; checked and ruled out: "
            "Schedule1F1B's waited send/recv batches (replayed: the ideal schedule), "
            "Interleaved1F1B's time-step lockstep (+1.3%, not timed), torchtitan's split "
            "(16-layer stages as timed), shape inference (first step only), no per-micro-batch "
            "all-gather; the rest not identified")


#: What the estimate is known to leave out, each checked against a row (empty: does not apply).
KNOWN_GAPS = (_sku_gap, _power_cap_gap, _fsdp2_copy_gap, _quant_kernel_gap, _host_gap,
              _serving_gap, _fsdp_nodes_gap, _fsdp_machinery_gap, _hopper_compute_gap,
              _volta_gap, _zero3_2021_gap, _fms_fsdp1_gap, _paged_optimizer_gap,
              _torchtune_packing_gap, _torch_cp_gap, _torch_pp_gap)


def misses(row: Row) -> str:
    """What the estimate is known to leave out for ``row``, or that none is identified."""
    gaps = [g for g in (gap(row.run, row) for gap in KNOWN_GAPS) if g]
    return "; ".join(gaps) if gaps else "no known gap identified"


def by_mechanism(rs: list[Row], split: str) -> list[tuple[str, int, float, float, float]]:
    """(mechanism, runs, median |error|, worst |error|, median ratio) of ``split``, in
    :data:`MECHANISMS` order."""
    out = []
    for name in MECHANISMS:
        rows_ = [r for r in rs if r.ratio is not None and r.run["split"] == split
                 and r.mechanism == name]
        if rows_:
            errs = [abs(r.ratio - 1) for r in rows_]
            out.append((name, len(rows_), statistics.median(errs), max(errs),
                        statistics.median(r.ratio for r in rows_)))
    return out


def worst(rs: list[Row], split: str, n: int = 10) -> list[Row]:
    """The ``n`` rows of ``split`` furthest from their measured figure."""
    done = [r for r in rs if r.ratio is not None and r.run["split"] == split]
    return sorted(done, key=lambda r: -abs(r.ratio - 1))[:n]


# --------------------------------------------------------------------------------------------------
# Summary and table


def rows() -> list[Row]:
    runs = json.loads(RUNS.read_text())["runs"]
    return [predict(r) for r in runs if r["kind"] in SPEED_KINDS]


def summary(rs: list[Row], split: str) -> dict:
    errs = [abs(r.ratio - 1) for r in rs if r.ratio is not None and r.run["split"] == split]
    ratios = sorted(r.ratio for r in rs if r.ratio is not None and r.run["split"] == split)
    if not errs:
        return {"n": 0}
    return {"n": len(errs), "median_abs_error": statistics.median(errs), "worst_abs_error": max(errs),
            "within_10pct": sum(e <= 0.10 for e in errs), "within_25pct": sum(e <= 0.25 for e in errs),
            "p10_ratio": _quantile(ratios, 0.10), "p90_ratio": _quantile(ratios, 0.90)}


def by_group(rs: list[Row], split: str) -> list[tuple[str, int, float, float]]:
    """(source group, runs, median |error|, worst |error|) of ``split``, by group name."""
    groups: dict[str, list[float]] = {}
    for r in rs:
        if r.ratio is not None and r.run["split"] == split:
            groups.setdefault(r.run["source_group"], []).append(abs(r.ratio - 1))
    return [(g, len(e), statistics.median(e), max(e)) for g, e in sorted(groups.items())]


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, 'linear')."""
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if x < 1000 else f"{x:,.0f}"


def table(rs: list[Row], split: str) -> list[str]:
    out = ["| run | kind | GPU x n | engine: runtime | config | predicted | measured | unit | ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        if r.run["split"] != split or r.ratio is None:
            continue
        hw = r.run["hardware"]
        extra = ("; ".join(r.assumptions)).replace("|", "/")
        out.append(f"| {r.run['id']} | {r.run['kind']} | {hw['gpu']} x {hw['count']} | "
                   f"{r.runtime} | `{r.config}`"
                   f"{' -- ' + extra if extra else ''} | {_fmt(r.predicted)} | {_fmt(r.measured)} | "
                   f"{r.unit} | {r.ratio:.2f} |")
    return out


def _group_table(rs: list[Row], split: str) -> list[str]:
    out = ["| source group | runs | median \\|error\\| | worst \\|error\\| | within 15% |",
           "|---|---|---|---|---|"]
    for g, n, med, w in by_group(rs, split):
        within = sum(abs(r.ratio - 1) <= 0.15 for r in rs if r.ratio is not None
                     and r.run["split"] == split and r.run["source_group"] == g)
        out.append(f"| {g} | {n} | {100 * med:.1f}% | {100 * w:.1f}% | {within} |")
    return out


def _mechanism_table(rs: list[Row], split: str) -> list[str]:
    out = ["| mechanism | runs | median \\|error\\| | worst \\|error\\| | median ratio | what the "
           "estimate carries |", "|---|---|---|---|---|---|"]
    out += [f"| {m} | {n} | {100 * med:.1f}% | {100 * w:.1f}% | {ratio:.2f} | {MECHANISMS[m]} |"
            for m, n, med, w, ratio in by_mechanism(rs, split)]
    return out


def _worst_table(rs: list[Row], split: str) -> list[str]:
    out = ["| run | mechanism | ratio | the estimate's breakdown | what it misses |",
           "|---|---|---|---|---|"]
    out += [f"| {r.run['id']} | {r.mechanism} | {r.ratio:.2f} | {r.diagnosis} | {misses(r)} |"
            for r in worst(rs, split)]
    return out


#: Issue 31's must-hold subset: "Serving latency rows (vLLM, SGLang, TensorRT-LLM, NIM; batch 1 to
#: 64): median within 10%", over both published files, each measured figure once
#: (:func:`serving_latency_figures`). A runs.json row belongs when its engine is one of these, its
#: measured figure is a latency (a unit in ms: mean ITL or per-token time) and the batch it ran at
#: is at most 64: the stated micro-batch, else for a request-rate run the measured requests in flight
#: by Little's law (rate x (TTFT + output tokens x ITL)), read from the source's figures, not the
#: estimate; under 1 in flight the engine runs one request at a time, batch 1. A serving_runs.json
#: row (issue 29's table) gives its TTFT and its ITL, each a member when the row's requests in
#: flight are at most 64 (:func:`serving_in_flight`: the closed
#: loop's concurrency, else the same Little's law at the stated rate; "INF" sends every request at
#: once, so all of them); a figure runs.json already holds (the same engine, model, GPU, TP,
#: lengths and load) is counted there, not twice. NIM is TensorRT-LLM inside NVIDIA's container
#: (serving_runs.json's ``engine`` trt-llm, ``engine_as_stated`` "NVIDIA NIM ..."): named nim here.
SERVING_LATENCY_ENGINES = ("vllm", "sglang", "trt-llm", "nim")
SERVING_LATENCY_BAR = 0.10
SERVING_LATENCY_BATCH = (1, 64)  # in flight at most 64; under 1 is batch 1
#: serving_runs.json's latency figures: key in the row's ``measured`` -> the label
SERVING_FIGURES = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"))


@dataclass(frozen=True)
class ServingLatency:
    """One measured serving latency of the subset: where it is published, the requests in flight
    it was measured at, and gpuplan's prediction of it (None: not predicted, said why there)."""
    id: str
    file: str          # runs.json or serving_runs.json
    split: str         # runs.json's split; serving_runs.json has none ("-")
    engine: str
    figure: str        # TTFT or ITL
    in_flight: float
    measured_ms: float
    predicted_ms: float | None
    fitted: bool = False  # a figure a gpuplan constant was fitted to (:func:`_fitted_to`)

    @property
    def error(self) -> float | None:
        """predicted / measured latency - 1 (a latency: above 0 is pessimistic)."""
        return None if self.predicted_ms is None else self.predicted_ms / self.measured_ms - 1


def serving_batch(run: dict) -> float | None:
    """The batch a serving-engine latency row ran at: the stated micro-batch, else the measured
    requests in flight at its request rate (Little's law on the source's TTFT and ITL)."""
    job, m = run["job"], run["measured"]
    if job.get("micro_batch"):
        return float(job["micro_batch"])
    qps, out = job.get("qps"), job.get("output_len")
    if qps and out and "ms per output token" in m["unit"]:
        ttft = m.get("also_reported", {}).get("mean_ttft_ms", 0.0)
        return qps * (ttft + out * m["value"]) / 1000.0
    return None


def serving_in_flight(srow: dict) -> float | None:
    """A serving_runs.json row's requests in flight, from the source's load and figures: a closed
    loop's concurrency; at a stated rate Little's law on the measured mean TTFT and ITL (rate x
    (TTFT + output tokens x ITL), the output tokens served where the row states them
    (``output_len_served``); "INF" (no rate, no concurrency) every request at once."""
    load, m = srow["load"], srow["measured"]
    if load.get("concurrency"):
        return float(load["concurrency"])
    if load.get("request_rate") is None:
        return float(srow.get("num_requests") or 500)  # validate_capacity's count for INF
    if "itl_ms" not in m:
        return None
    out = validate_capacity._output(srow)  # the served mean where the row gives one
    return load["request_rate"] * (m["ttft_ms"]["value"] + out * m["itl_ms"]["value"]) / 1000.0


def _fitted_to(srow: dict, label: str) -> bool:
    """A TTFT that fitted TensorRT-LLM's per-request time (engines/profiles.py ``_TRTLLM_HOST``:
    8.3 ms, the median gap over the QPS-2 rows of TensorRT-LLM 0.14's online table)."""
    return (label == "TTFT" and srow["source_group"] == "tensorrt-llm-online"
            and srow["load"].get("request_rate") == 2.0)


def _serving_engine(srow: dict) -> str:
    return "nim" if srow.get("engine_as_stated", "").startswith("NVIDIA NIM") else srow["engine"]


def _figure_key(engine, model, gpu, tp, lengths, load, figure, setup=()) -> tuple:
    """What identifies one published measurement across the two files; ``setup`` is what else
    the source states about the server (a KV-cache dtype, engine flags), empty where it states
    none (every runs.json row)."""
    return (engine, model, gpu, int(tp or 1), tuple(lengths), load, figure, tuple(setup))


def _serving_key(srow: dict, figure: str) -> tuple:
    """An "INF" load is keyed by its request count (all N sent at once: N = 10 and N = 50 are
    two measurements), and the setup by the row's stated KV dtype and ``server_flags`` (the vLLM
    blog's BF16- and FP8-KV rows share every other field)."""
    load = srow["load"]
    ld = (("concurrency", load["concurrency"]) if load.get("concurrency")
          else ("rate", float(load["request_rate"])) if load.get("request_rate") is not None
          else ("all", int(srow.get("num_requests") or 500)))
    flags = srow.get("server_flags") or {}
    setup = ((("kv_dtype", srow["kv_dtype"]),) if srow.get("kv_dtype") else ()) + tuple(
        sorted((k, v) for k, v in flags.items() if k != "from"))
    return _figure_key(_serving_engine(srow), srow["model"], srow["gpu"], srow["tp"],
                       (srow["input_len"], srow["output_len"]), ld, figure, setup)


def _runs_key(run: dict) -> tuple:
    j = run["job"]
    if not (j.get("qps") and "inter-token" in run["measured"]["unit"]):
        return ("runs.json", run["id"])
    return _figure_key(run["engine"], run["model"]["catalog"], run["hardware"]["gpu"], j.get("tp"),
                       (j["input_len"], j["output_len"]), ("rate", float(j["qps"])), "ITL")


def serving_latency_rows(rs: list[Row]) -> list[Row]:
    """The runs.json rows of issue 31's serving-latency subset (:data:`SERVING_LATENCY_ENGINES`, a
    latency measured in ms, batch at most :data:`SERVING_LATENCY_BATCH`'s 64), predicted or not."""
    hi = SERVING_LATENCY_BATCH[1]
    out = []
    for r in rs:
        run = r.run
        if run["kind"] not in ("decode", "serving") or run["engine"] not in SERVING_LATENCY_ENGINES:
            continue
        if "ms" not in run["measured"]["unit"].split():
            continue
        b = serving_batch(run)
        if b is not None and b <= hi:
            out.append(r)
    return out


def serving_runs_members(seen: set = frozenset()) -> list[tuple[dict, str, str, float]]:
    """serving_runs.json's figures in the subset, as (row, key in ``measured``, label, in flight):
    at most 64 requests in flight, a :data:`SERVING_LATENCY_ENGINES` engine, not among ``seen``."""
    hi = SERVING_LATENCY_BATCH[1]
    out = []
    for srow in json.loads(validate_capacity.RUNS.read_text())["runs"]:
        n = serving_in_flight(srow)
        if _serving_engine(srow) not in SERVING_LATENCY_ENGINES or n is None or n > hi:
            continue
        out += [(srow, key, label, n) for key, label in SERVING_FIGURES
                if key in srow["measured"] and _serving_key(srow, label) not in seen]
    return out


def serving_latency_figures(rs: list[Row], predict_serving=None) -> list[ServingLatency]:
    """Issue 31's subset over both files, each measured figure once: runs.json's rows
    (:func:`serving_latency_rows`; a rate-compared row's latency is its measured ms over the
    ratio) and serving_runs.json's figures (:func:`serving_runs_members`), predicted by
    ``predict_serving`` (validate_capacity.py's :func:`~validate_capacity.predict`, the
    ``gpuplan capacity`` call, by default)."""
    predict_serving = predict_serving or validate_capacity.predict
    out = []
    for r in serving_latency_rows(rs):
        ms = float(r.run["measured"]["value"])
        out.append(ServingLatency(
            r.run["id"], "runs.json", r.run["split"], r.run["engine"],
            "ITL" if "inter-token" in r.run["measured"]["unit"] else "per-token", serving_batch(r.run),
            ms, None if r.ratio is None else ms / r.ratio))
    seen = {_runs_key(r.run) for r in serving_latency_rows(rs)}
    preds: dict[str, dict] = {}
    for srow, key, label, n in serving_runs_members(seen):
        if srow["id"] not in preds:
            preds[srow["id"]] = predict_serving(srow).predicted
        out.append(ServingLatency(srow["id"], "serving_runs.json", "-", _serving_engine(srow),
                                  label, n, float(srow["measured"][key]["value"]),
                                  preds[srow["id"]].get(key), _fitted_to(srow, label)))
    return out


def _median_abs(figs: list[ServingLatency]) -> float:
    return statistics.median(abs(f.error) for f in figs)


def _serving_latency_section(rs: list[Row], predict_serving=None) -> list[str]:
    figs = serving_latency_figures(rs, predict_serving)
    done = [f for f in figs if f.error is not None]
    lo, hi = SERVING_LATENCY_BATCH
    lines = ["## Serving latency (issue 31's subset)", "",
             "Every published serving latency from vLLM, SGLang, TensorRT-LLM or NIM at a batch "
             f"of {lo}-{hi} (at most {hi} requests in flight; under 1, one request at a time), "
             "over runs.json (either split) and "
             "serving_runs.json, each measured figure once: the stated batch or closed-loop "
             "concurrency, else the requests in flight by Little's law on the measured TTFT and "
             "ITL at the stated rate (\"INF\": every request at once). A figure both files hold "
             "is counted in runs.json's row. Online rows are predicted by gpuplan.capacity's "
             "simulation (the call validate_capacity.py makes), so the two reports agree. "
             "error = predicted / measured latency - 1 (for runs.json's rate-compared rows, 1 / "
             f"ratio - 1). The bar: median |error| within {100 * SERVING_LATENCY_BAR:.0f}%.", ""]
    if not done:
        return lines + ["No published figure is in the subset.", ""]
    med = _median_abs(done)
    engines = sorted({f.engine for f in done})
    by_fig = ", ".join(f"{label} {len(sub)}: {100 * _median_abs(sub):.1f}%"
                       for label in sorted({f.figure for f in done})
                       for sub in [[f for f in done if f.figure == label]])
    absent = [e for e in SERVING_LATENCY_ENGINES if e not in engines]
    lines += [f"{len(done)} figures (engines present: {', '.join(engines)}; "
              f"{'none from ' + ', '.join(absent) + '; ' if absent else ''}"
              f"{len(figs) - len(done)} not predicted): median |error| {100 * med:.1f}%, worst "
              f"{100 * max(abs(f.error) for f in done):.1f}% (by figure: {by_fig}); bar met: "
              f"{'yes' if med <= SERVING_LATENCY_BAR else 'no'}."]
    held = [f for f in done if not f.fitted]
    if len(held) < len(done):
        lines += [f"{len(done) - len(held)} of them (TTFT on TensorRT-LLM's QPS-2 rows) fitted "
                  "TensorRT-LLM's per-request time (engines/profiles.py, ServingHost); without "
                  f"them {len(held)} figures, median |error| {100 * _median_abs(held):.1f}%."]
    lines += ["", "| measurement | file | split | engine | figure | in flight | predicted ms | "
              "measured ms | error |", "|---|---|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {f.id} | {f.file} | {f.split} | {f.engine} | {f.figure} | {f.in_flight:.1f} | "
              f"{_fmt(f.predicted_ms)} | {_fmt(f.measured_ms)} | {100 * f.error:+.1f}% |"
              for f in done]
    return lines + [""]


def _split_section(rs: list[Row], split: str) -> list[str]:
    s = summary(rs, split)
    lines = [f"## {split}", ""]
    if not s["n"]:
        return lines
    lines += [f"{s['n']} runs: median |error| {100 * s['median_abs_error']:.1f}%, worst "
              f"{100 * s['worst_abs_error']:.1f}%; within 10%: {s['within_10pct']}, "
              f"within 25%: {s['within_25pct']}; ratio p10-p90 {s['p10_ratio']:.2f}-"
              f"{s['p90_ratio']:.2f}", ""]
    if split == "holdout":
        old = summary([r for r in rs if r.run["source_group"] not in OUT_OF_SAMPLE_GROUPS],
                      split)
        lines += [f"Without the groups added out of sample by issue 31 "
                  f"({', '.join(OUT_OF_SAMPLE_GROUPS)}): {old['n']} runs, median |error| "
                  f"{100 * old['median_abs_error']:.1f}%, worst "
                  f"{100 * old['worst_abs_error']:.1f}%.", ""]
    lines += [f"### {split}: by source group", "", "A group with many rows weighs on the median.",
              ""] + _group_table(rs, split) + [""]
    lines += [f"### {split}: by mechanism", "", "Each run under the first mechanism its job "
              "falls under (`mechanism_of`); median ratio above 1 is optimistic.", ""]
    lines += _mechanism_table(rs, split) + [""]
    lines += [f"### {split}: the worst ten", "", "What each misses: the gaps `KNOWN_GAPS` "
              "finds for the run (the estimate's known omissions), beside the estimate's own "
              "breakdown and what the measured figure implies.", ""]
    lines += _worst_table(rs, split) + [""]
    lines += [f"### {split}: every run", ""] + table(rs, split) + [""]
    return lines


def render(rs: list[Row]) -> str:
    lines = ["# Speed: gpuplan against published measured runs", "",
             f"Generated by `{COMMAND}` from `benchmarks/published/runs.json` (sources, "
             "configurations and figures there). ratio = predicted / measured (a rate: above 1 is "
             "optimistic). |error| = |ratio - 1|. Default fractions, no stored bench run.", ""]
    for split in ("calibrate", "holdout"):
        lines += _split_section(rs, split)
    lines += _serving_latency_section(rs)
    lines += ["## Not expressible in gpuplan (yet)", "", "| run | split | kind | why |", "|---|---|---|---|"]
    lines += [f"| {r.run['id']} | {r.run['split']} | {r.run['kind']} | {r.why_not} |"
              for r in rs if r.ratio is None]
    return "\n".join(lines) + "\n"


def residuals(rs: list[Row]) -> dict:
    s = summary(rs, "calibrate")
    return {"p10_ratio": s["p10_ratio"], "p90_ratio": s["p90_ratio"], "runs": s["n"],
            "split": "calibrate", "command": COMMAND,
            "source": "benchmarks/published/runs.json (calibrate split, speed kinds)"}


def main(argv: list[str]) -> int:
    rs = rows()
    text = render(rs)
    if "--write" in argv:
        OUT_MD.write_text(text)
        OUT_RESIDUALS.write_text(json.dumps(residuals(rs), indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
