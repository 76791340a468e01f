"""The job options, defined once: every command that describes a job (``fit``, ``speed``,
``trace``, ``flops model``, ``profile --model``) adds this one argument group, so the names, the
accepted values and the help read the same everywhere (``--help`` lists them identically).

Nothing here has a default of its own: an option left out is left out of the :class:`Job`, which
holds every default (``gpuplan.job``). A command that cannot honour an option (``trace`` runs one
GPU's step; ``flops model`` counts FLOPs) says so in one line rather than ignoring it. The old
spellings ``--recompute`` and ``--attention flash`` still work, each with a one-line note.
"""

from __future__ import annotations

import argparse
import math
import sys

from .._record import record
from ..engines.profiles import AUTO_ENGINE, get_engine
from ..errors import InputError
from ..hardware.topology import parse_inter_node
from ..job import Job, choices_of, flat_defaults
from ..units import parse_count, parse_positive_int

__all__ = ["JOB_OPTIONS", "GROUP_TITLE", "add_job_options", "job_from_args", "given_job_options",
           "flag_of", "cli_spelling"]

GROUP_TITLE = ("job options (the same in fit, speed, trace, flops model, profile, cluster and "
               "capacity)")


@record(kw_only=False)
class JobOption:
    flag: str
    """The option as typed (``--grad-accum``)."""
    field: str
    """The :class:`Job` field it sets."""
    kind: str
    """``int`` (a whole number >= 1), ``float`` (in [0, 1)), ``number`` (any finite number, its
    range the Job's), ``zero`` (a ZeRO stage), ``str``,
    ``flag`` (present = true), ``off`` (present = false) or ``list`` (comma list)."""
    help: str
    metavar: str | None = None


#: An example for each comma-list option, for the error an empty list gets.
_LIST_EXAMPLES = {"--lora-targets": "q_proj,v_proj", "--recompute-modules": "core_attn,mlp",
                  "--cuda-graph-scope": "attn,moe_router"}

JOB_OPTIONS: tuple[JobOption, ...] = (
    JobOption("--mode", "mode", "str", "{choices} (fit's default: both; speed, trace, flops "
              "model and profile: train; a serving engine: infer)", "MODE"),
    JobOption("--engine", "engine", "str", "the engine that runs the job: {choices} (default "
              "auto = {auto_engine}, stated); it decides the runtime, kernels, sharding and the "
              "layouts allowed (--runtime, --model-code, --sharding refine it)", "NAME"),
    JobOption("--precision", "precision", "str", "training recipe: {choices} (default "
              "{default}); with --mode infer the weight format: {infer_formats} (default "
              "{infer_default})", "NAME"),
    JobOption("--infer-precision", "infer_precision", "str", "inference weight format with "
              "--mode both: {choices} (default {default}; a .gguf file: gguf, its own "
              "per-tensor types)", "FORMAT"),
    JobOption("--optimizer", "optimizer", "str", "{choices} (default {default})", "NAME"),
    JobOption("--optimizer-states", "optimizer_states", "str", "optimizer state dtype: "
              "{choices} (default auto: fp32, or bf16 with the pure bf16 recipe)", "DTYPE"),
    JobOption("--master-weights", "master_weights", "str", "dtype of the master copy of the "
              "weights a mixed or FP8 recipe keeps: {choices} (default auto: fp32; bf16 as "
              "NeMo's fp8_params over Apex's distributed Adam; remainder: the bf16 weights "
              "plus 16-bit remainders, as NeMo's O2 bf16 over it; none: the bf16 weights stepped in "
              "place, as NeMo's optim dtype bf16 over it)", "DTYPE"),
    JobOption("--grad-dtype", "grad_dtype", "str", "dtype of the gradient buffer: {choices} "
              "(default auto: the recipe's, 16-bit under a mixed or FP8 recipe; fp32 as Apex's "
              "distributed Adam with no grad_sync_dtype, Megatron's grad_reduce_in_fp32)",
              "DTYPE"),
    JobOption("--fused-optimizer", "fused_optimizer", "flag", "AdamW(fused=True): no full-size "
              "temporary in the optimizer step"),
    JobOption("--batch", "batch", "int", "micro-batch per GPU: sequences, or images (default 1)",
              "B"),
    JobOption("--seq", "seq", "int", "sequence length (default: the model's context, at most "
              "2048; a vision model: its patches)", "S"),
    JobOption("--grad-accum", "grad_accum", "int", "gradient-accumulation steps (default 1)", "K"),
    JobOption("--gpus", "gpus", "int", "all GPUs of the job (default 1); the data-parallel "
              "degree is gpus / (tp x pp x cp)", "N"),
    JobOption("--zero", "zero", "zero", "ZeRO stage over the data-parallel group: 0 (default, "
              "DDP), 1, 2, 3 (= FSDP full shard)", "0..3"),
    JobOption("--sharding", "sharding", "str", "whose ZeRO runs --zero: {choices} (default: "
              "the engine's; deepspeed: 16-bit shards + fp32 master; fsdp2: PyTorch "
              "fully_shard, the fp32 shard is the master, the root unit stays gathered through "
              "backward); fsdp2 with --zero 2 or 3", "ENGINE"),
    JobOption("--dp-shard", "dp_shard", "int", "hybrid sharding (HSDP) under --zero 3 "
              "--sharding fsdp2: shard the states over groups of N data-parallel ranks (e.g. a "
              "node's GPUs), replicate them across the groups (FSDP1 HYBRID_SHARD, torchtitan's "
              "data_parallel_shard_degree); default: shard over every data-parallel rank", "N"),
    JobOption("--offload-optimizer", "offload_optimizer", "flag", "keep master weights and "
              "optimizer states in host memory (ZeRO-Offload)"),
    JobOption("--lora-rank", "lora_rank", "int", "train LoRA adapters of rank R", "R"),
    JobOption("--lora-targets", "lora_targets", "list", "modules the adapters attach to (default: "
              "PEFT's for the family; all-linear)", "M1,M2"),
    JobOption("--lora-dropout", "lora_dropout", "float", "PEFT lora_dropout in [0, 1) (default "
              "0: > 0 keeps a mask and a dropped-out copy of each adapted layer's input)", "P"),
    JobOption("--lora-base", "lora_base", "str", "format of the frozen base under LoRA: "
              "{choices} (nf4 = QLoRA; default: the recipe's weight dtype)", "FORMAT"),
    JobOption("--checkpointing", "checkpointing", "str", "activation checkpointing: "
              "{choices} (default {default}; selective: attention recomputed; full: per layer); "
              "--recompute is its old name", "LEVEL"),
    JobOption("--attention", "attention", "str", "{choices} (default {default}; sdpa: fused "
              "flash/memory-efficient kernels; eager: materialized s x s scores); flash is the "
              "old name of sdpa", "IMPL"),
    JobOption("--kv-dtype", "kv_dtype", "str", "KV-cache format: {choices} (default: the "
              "compute dtype)", "DTYPE"),
    JobOption("--context", "context", "int", "inference: tokens in the KV cache per sequence "
              "(default: --seq)", "T"),
    JobOption("--prefill-logits", "prefill_logits", "str", "inference prefill computes logits "
              "for the last prompt position (last: generate(), vLLM; default) or for all (a "
              "scoring forward): {choices}", "last|all"),
    JobOption("--zero-grad-in-place", "zero_grad_set_to_none", "off", "optimizer.zero_grad() "
              "zeroes gradients in place (torch < 2.0, older Trainer loops): they stay alive "
              "through the step; default: set to None, as torch >= 2.0 does"),
    JobOption("--max-grad-norm", "max_grad_norm", "number", "clip the gradients' global norm to "
              "N each step (clip_grad_norm_; HF Trainer's default is 1.0): its passes over the "
              "gradients are timed; default: no clipping", "N"),
    JobOption("--use-cache", "use_cache", "flag", "training forward keeps transformers' KV cache "
              "(config use_cache=True); default: use_cache=False"),
    JobOption("--runtime", "runtime", "str", "how the code runs: {choices} (default auto: "
              "the engine's, stated; compile: torch.compile or fused kernels)", "HOW"),
    JobOption("--model-code", "model_code", "str", "whose model code runs the step: "
              "{choices} (default: the engine's; torchtune: llama-style, K/V expanded to every "
              "head, logits upcast in the model, its own RoPE chain in eager; fms: IBM FMS's Llama "
              "under the fsdp2 engine, its fp32 RoPE chain in eager)", "CODE"),
    JobOption("--loss-chunks", "loss_chunks", "int", "output projection and cross-entropy over "
              "N chunks of the sequence (torchtune's CEWithChunkedOutputLoss: 8; default 1)",
              "N"),
    JobOption("--optimizer-in-backward", "optimizer_in_backward", "flag", "step each "
              "parameter as its gradient is ready and free it (torchtune's optimizer_in_bwd)"),
    JobOption("--offload-activations", "offload_activations", "flag", "copy the layer inputs "
              "full checkpointing keeps to host memory (torchtune's OffloadActivations)"),
    JobOption("--tp", "tp", "int", "tensor-parallel degree (default 1)", "N"),
    JobOption("--pp", "pp", "int", "pipeline-parallel stages (default 1)", "N"),
    JobOption("--cp", "cp", "int", "context-parallel degree (default 1)", "N"),
    JobOption("--ep", "ep", "int", "expert-parallel degree for MoE models (default 1)", "N"),
    JobOption("--etp", "etp", "int", "expert tensor-parallel degree (Megatron-Core's "
              "--expert-tensor-parallel-size; default: --tp); below --tp the MoE layers fold and "
              "--ep spans tp x dp x cp / etp ranks (MoE Parallel Folding)", "N"),
    JobOption("--moe-capacity-factor", "moe_capacity_factor", "number", "MoE expert capacity "
              "factor: each expert runs ceil(tokens x top-k / experts x CF) rows, the rest "
              "dropped and short experts padded (Megatron-Core's --moe-expert-capacity-factor "
              "with --moe-pad-expert-input-to-capacity); default: dropless", "CF"),
    JobOption("--mtp-layers", "mtp_layers", "int", "multi-token-prediction depth trained "
              "beside the model (Megatron-Core's --mtp-num-layers; DeepSeek-V3: 1): one more "
              "transformer block, projection and head pass per depth; default: none", "N"),
    JobOption("--recompute-modules", "recompute_modules", "list", "under --checkpointing "
              "selective the submodules recomputed in backward (Megatron-Core's "
              "--recompute-modules: {choices}; default core_attn)", "M1,M2"),
    JobOption("--moe-shared-expert-overlap", "moe_shared_expert_overlap", "flag", "run the "
              "MoE layer's shared expert beside the alltoall dispatcher's all-to-alls on its own "
              "stream (Megatron-Core's --moe-shared-expert-overlap)"),
    JobOption("--cuda-graph-scope", "cuda_graph_scope", "list", "the parts of each layer "
              "Megatron-Core replays as Transformer Engine CUDA graphs (--cuda-graph-scope: "
              "{choices}; full alone: Megatron-Core's own whole-layer graphs, "
              "--cuda-graph-impl local, token-drop MoE only): one host launch a graph instead of "
              "one a kernel; default: none", "S1,S2"),
    JobOption("--ep-overlap", "ep_overlap", "flag", "run one micro-batch's expert-parallel "
              "all-to-alls beside another's compute (Megatron-Core's "
              "--overlap-moe-expert-parallel-comm --delay-wgrad-compute; Megatron-Bridge's "
              "moe_a2a_overlap)"),
    JobOption("--moe-dispatcher", "moe_dispatcher", "str", "Megatron-Core's MoE token "
              "dispatcher: {choices} (default {default}; deepep, hybridep: the flex dispatcher "
              "over DeepEP's / HybridEP's fused kernels)", "NAME"),
    JobOption("--sequence-parallel", "sequence_parallel", "flag", "Megatron sequence parallelism "
              "over the TP group"),
    JobOption("--distribute-checkpoints", "distribute_checkpoints", "flag", "split the layer "
              "inputs full checkpointing keeps over the TP group (Megatron's "
              "--distribute-saved-activations)"),
    JobOption("--fp8-param-gather", "fp8_param_gather", "flag", "under an FP8 recipe keep the "
              "linear weights as FP8 parameters and all-gather them in FP8 (no BF16 copy; "
              "Megatron --fp8-param-gather)"),
    JobOption("--fp8-attention", "fp8_attention", "flag", "under an FP8 recipe run the "
              "attention core in FP8 too (TE fp8_dpa; default BF16)"),
    JobOption("--activation-storage", "activation_storage", "str", "what a narrow recipe "
              "caches for backward: {choices} (default engine; deepseek-v3: its report's "
              "E5M6 attention output, FP8 MoE SwiGLU inputs, no norm outputs when recomputed)",
              "NAME"),
    JobOption("--fp8-amax-history", "fp8_amax_history", "count", "under delayed scaling the "
              "amaxes kept per quantized tensor (TE amax_history_len; NeMo "
              "fp8_amax_history_len; default the recipe's 1024)", "N"),
    JobOption("--first-last-layers-bf16", "first_last_layers_bf16", "count", "under a narrow "
              "recipe keep this many blocks at each end of the stack in BF16 (Megatron "
              "--first-last-layers-bf16 with --num-layers-at-start/end-in-bf16 N)", "N"),
    JobOption("--stage3-max-live-parameters", "stage3_max_live_parameters", "count",
              "DeepSpeed ZeRO-3: prefetch until this many parameters are gathered (its "
              "default 1e9; e.g. 2e8 on a small GPU)", "N"),
    JobOption("--stage3-prefetch-bucket-size", "stage3_prefetch_bucket_size", "count",
              "DeepSpeed ZeRO-3: parameters one prefetch round takes at most (its default 5e7)",
              "N"),
    JobOption("--pp-schedule", "pp_schedule", "str", "pipeline schedule: {choices} (default "
              "{default})", "SCHEDULE"),
    JobOption("--pp-embedding-part", "pp_embedding_part", "flag", "the embedding counts as one "
              "layer in the pipeline split, on the first stage (Megatron's "
              "--account-for-embedding-in-pipeline-split)"),
    JobOption("--pp-loss-part", "pp_loss_part", "flag", "the output layer and loss count as one "
              "layer in the pipeline split, on the last stage (Megatron's "
              "--account-for-loss-in-pipeline-split)"),
    JobOption("--pp-first-stage-layers", "pp_first_stage_layers", "int", "transformer layers "
              "on the first pipeline stage, the middle stages splitting the rest evenly "
              "(Megatron's --decoder-first-pipeline-num-layers; default: the even split)", "N"),
    JobOption("--pp-last-stage-layers", "pp_last_stage_layers", "int", "transformer layers on "
              "the last pipeline stage (Megatron's --decoder-last-pipeline-num-layers)", "N"),
    JobOption("--micro-batches", "micro_batches", "int", "micro-batches per step through the "
              "pipeline, with --pp (default: --grad-accum)", "M"),
    JobOption("--gpus-per-node", "gpus_per_node", "int", "GPUs per node on the node's own link "
              "(default 8)", "N"),
    JobOption("--inter-node", "inter_node", "str", "link between nodes per GPU, e.g. ib-400, "
              "roce-200, 100Gb/s (default: 400 Gb/s InfiniBand)", "LINK"),
    JobOption("--power-limit-w", "power_limit_w", "number", "the GPUs' power limit in watts "
              "(nvidia-smi -pl) when below the TDP: the tensor clock sustained at it (default: "
              "the TDP)", "W"),
)

_BY_FIELD = {o.field: o for o in JOB_OPTIONS}


def flag_of(field: str) -> str:
    """The option that sets a Job field (``grad_accum`` -> ``--grad-accum``)."""
    return _BY_FIELD[field].flag


def cli_spelling(name: str) -> str:
    """A field named in an error (:func:`gpuplan.errors.opt`) as the command line spells it: a
    Job field's option, else the option of the same name (``global_batch`` ->
    ``--global-batch``)."""
    o = _BY_FIELD.get(name)
    return o.flag if o is not None else "--" + name.replace("_", "-")


def help_of(o: JobOption) -> str:
    """An option's help with its choices and default filled in from where they are defined (the
    Job's vocabulary, the engines' and formats' tables, the Job's defaults): one vocabulary."""
    if "{" not in o.help:
        return o.help
    choices = choices_of(o.field) or ()
    return o.help.format(
        choices=", ".join(choices), default=flat_defaults()[o.field],
        auto_engine=AUTO_ENGINE, infer_formats=", ".join(choices_of("infer_precision")),
        infer_default=flat_defaults()["infer_precision"])


def add_job_options(p: argparse.ArgumentParser) -> None:
    """Add the one job-option group to a command's parser (every default None: the Job's)."""
    group = p.add_argument_group(GROUP_TITLE)
    for o in JOB_OPTIONS:
        if o.kind in ("flag", "off"):
            group.add_argument(o.flag, dest=o.field, action="store_const",
                               const=o.kind == "flag", default=None, help=help_of(o))
        else:
            group.add_argument(o.flag, dest=o.field, metavar=o.metavar, default=None,
                               help=help_of(o))
    group.add_argument("--recompute", dest="recompute", metavar="LEVEL", default=None,
                       help="the old name of --checkpointing")


def parse_fraction(text: object, *, what: str) -> float:
    """A number in [0, 1) as typed (``0.05``)."""
    try:
        v = float(str(text))
    except ValueError:
        v = float("nan")
    if not 0 <= v < 1:
        raise InputError(f"{what} {text!r:.40}: expected a number in [0, 1), e.g. 0.05")
    return v


def parse_number(text: object, *, what: str) -> float:
    """A finite number as typed (``1.0``); the Job checks its range."""
    try:
        v = float(str(text))
    except ValueError:
        v = float("nan")
    if not math.isfinite(v):
        raise InputError(f"{what} {text!r:.40}: expected a number, e.g. 1.0")
    return v


def _note(text: str) -> None:
    print(f"gpuplan: note: {text}", file=sys.stderr)


def given_job_options(args: argparse.Namespace) -> dict[str, object]:
    """The job options given on the command line, parsed: Job field -> value (old spellings
    translated with a note)."""
    out: dict[str, object] = {}
    for o in JOB_OPTIONS:
        v = getattr(args, o.field, None)
        if v is None:
            continue
        if o.kind == "int":
            v = parse_positive_int(v, what=o.flag)
        elif o.kind == "count":  # 1e9, 200M, 50000000
            v = parse_count(v, what=o.flag, whole=True)  # the Job checks its range
        elif o.kind == "float":
            v = parse_fraction(v, what=o.flag)
        elif o.kind == "number":  # its range is the Job's (gpuplan.bounds)
            v = parse_number(v, what=o.flag)
        elif o.kind == "zero":
            if str(v).strip() not in ("0", "1", "2", "3"):
                raise InputError(f"--zero {v!r}: expected a ZeRO stage 0, 1, 2 or 3")
            v = int(v)
        elif o.kind == "list":
            v = tuple(t.strip() for t in str(v).split(",") if t.strip())
            if not v:  # each list its own example: q_proj is no graph scope (qa43)
                raise InputError(f"{o.flag} {getattr(args, o.field)!r}: expected names such "
                                 f"as {_LIST_EXAMPLES[o.flag]}, or drop {o.flag}")
        out[o.field] = v
    return _old_spellings(args, out)


def _old_spellings(args: argparse.Namespace, out: dict[str, object]) -> dict[str, object]:
    recompute = getattr(args, "recompute", None)
    if recompute is not None:
        if out.get("checkpointing", recompute) != recompute:
            raise InputError(f"--recompute {recompute} and --checkpointing "
                             f"{out['checkpointing']} disagree; give --checkpointing only")
        _note("--recompute is now spelled --checkpointing")
        out["checkpointing"] = recompute
    if out.get("attention") == "flash":
        _note("--attention flash is now spelled sdpa")
        out["attention"] = "sdpa"
    return out


def job_from_args(args: argparse.Namespace, model: object, *, command: str,
                  default_mode: str, modes: tuple[str, ...] = ("train", "infer", "both"),
                  supported: frozenset[str] | None = None) -> Job:
    """The :class:`Job` the job options describe, for ``command``.

    ``default_mode`` when ``--mode`` is not given; ``modes`` the ones the command runs;
    ``supported`` the Job fields it honours (None: all) -- any other option given is one line
    naming it. In infer mode ``--precision`` is the weight format."""
    kw = given_job_options(args)
    if "mode" not in kw and "engine" in kw:  # a serving engine serves, a training one trains
        prof = get_engine(kw["engine"])
        if default_mode == "both" or default_mode not in prof.modes:
            default_mode = default_mode if set(prof.modes) >= {"train", "infer"} \
                else prof.modes[0]
    mode = str(kw.pop("mode", default_mode))
    if mode not in modes:
        raise InputError(f"{command} --mode {mode!r}: expected one of {', '.join(modes)}")
    if supported is not None:
        extra = [flag_of(f) for f in kw if f not in supported]
        if extra:
            raise InputError(f"{command} does not take {', '.join(extra)} (it is planned by "
                             f"`gpuplan fit`); drop {'it' if len(extra) == 1 else 'them'}")
    if "infer_precision" in kw:
        if mode == "train":
            raise InputError("--infer-precision with --mode train: there is no inference to plan")
        if mode == "infer" and "precision" in kw:
            raise InputError("--mode infer takes the weight format as --precision; drop "
                             "--infer-precision")
    if mode == "infer" and "precision" in kw:
        kw["infer_precision"] = kw.pop("precision")
    if kw.get("inter_node") is not None:
        # checked whatever the job's size, so a mistyped link fails on one GPU as on many (its
        # message names the field: the CLI's main spells it --inter-node)
        parse_inter_node(kw["inter_node"])
    if kw.get("context", math.inf) < kw.get("seq", 0):
        raise InputError(f"--context {kw['context']} is shorter than --seq {kw['seq']}: the "
                         "context holds the prompt (--seq) and the tokens generated after it; "
                         f"give --context {kw['seq']} or more, or a shorter --seq")
    job = Job(model=model, mode=mode, **kw)  # its errors are spelled by the CLI's main
    job.check_pipeline_shaping()  # accepted before and silently did nothing
    return job
