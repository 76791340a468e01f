"""Megatron-LM: the arguments of ``pretrain_gpt.py`` (``megatron/training/arguments.py``).

The layout (``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
``--num-layers-per-virtual-pipeline-stage``, ``--sequence-parallel``, ``--context-parallel-size``,
``--expert-model-parallel-size``), the batch (``--micro-batch-size``, ``--global-batch-size`` =
micro x micro-batches x data-parallel ranks), the model's shape, precision (``--bf16`` /
``--fp16``: fp32 main weights and gradients, the ``mixed-*`` recipes), recomputation
(``--recompute-granularity full|selective``) and the data-parallel sharding: ZeRO-1 is the
distributed optimizer; ZeRO-2/3 are Megatron-FSDP's ``--data-parallel-sharding-strategy
optim_grads`` / ``optim_grads_params``. bf16 Adam states and a remainder master are
Megatron-Core's precision-aware optimizer (``--use-precision-aware-optimizer``, ``--exp-avg-dtype``
/ ``--exp-avg-sq-dtype``), whose master follows the recipe (:func:`_precision_aware`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from ..errors import opt
from ..job import Job, default_seq, part_layers, pp_chunks
from ..models import Model
from ._common import (TRAIN_FIELDS, accumulation, check_expressed, num_machines, refuse,
                      train_only)

ENGINE = "megatron"
_EXPRESSED = frozenset({"zero", "offload_optimizer", "checkpointing", "tp", "pp", "cp", "ep",
                        "max_grad_norm", "master_weights", "grad_dtype",
                        "sequence_parallel", "pp_schedule", "micro_batches", "fused_optimizer",
                        "pp_embedding_part", "pp_loss_part", "distribute_checkpoints",
                        "fp8_param_gather", "fp8_attention", "first_last_layers_bf16",
                        "pp_first_stage_layers", "pp_last_stage_layers", "etp",
                        "moe_capacity_factor", "mtp_layers", "ep_overlap",
                        "recompute_modules", "moe_dispatcher", "cuda_graph_scope",
                        "moe_shared_expert_overlap"})
_FSDP = {2: "optim_grads", 3: "optim_grads_params"}


def _model_args(job: Job, model: Model) -> list[str]:
    a = model.architecture
    if a is None or a.kind != "decoder" or not a.num_layers:
        raise refuse(ENGINE, f"{model.name} has no decoder architecture gpuplan can write as "
                     "Megatron-LM's GPT arguments; name a catalog model or config.json")
    seq = job.seq or default_seq(a)
    out = ["--num-layers", a.num_layers, "--hidden-size", a.hidden_size,
           "--num-attention-heads", a.num_heads, "--ffn-hidden-size", a.intermediate_size,
           "--seq-length", seq, "--max-position-embeddings", max(seq, a.max_position_embeddings)]
    out += _attention_args(a)
    if a.num_experts:
        # --moe-grouped-gemm: the experts as Transformer Engine's GroupedLinear, as the
        # published Megatron-Bridge MoE recipes run them and gpuplan times them
        # (compute.flops.FUSED_MOE)
        out += ["--num-experts", a.num_experts, "--moe-router-topk", a.experts_per_token,
                "--moe-grouped-gemm"]
        out += _moe_args(a)
    return [str(x) for x in out + _block_args(a, model)]


def _attention_args(a) -> list[object]:
    """Grouped-query attention, a head size other than hidden / heads (``--kv-channels``),
    QK-norm (``--qk-layernorm``: the ``--normalization`` kind; ``--qk-l2-norm``: Llama 4's) and
    Multi-head Latent Attention (``--multi-latent-attention`` and its ranks and head sizes,
    ``_add_mla_args``: ``--qk-head-dim`` is the part without positions). The names are
    TransformerConfig's fields (megatron/core/transformer/transformer_config.py, NVIDIA/Megatron-LM
    @d98e8a64dd), which ``ArgumentGroupFactory`` turns into options."""
    out: list[object] = []
    if a.qk_norm == "rmsnorm_full":
        # OLMo 2: Megatron-Bridge builds it from its own layer spec (olmo2_layer_spec: identity
        # input norms, TERowParallelLinearPostLN after attention and MLP; NVIDIA-NeMo/
        # Megatron-Bridge@57852623b64a tests/unit_tests/models/olmo2/test_olmo2_bridge.py)
        raise refuse(ENGINE, "OLMo 2's norms after attention and MLP (no input norm) and its "
                     "QK-norm over the whole q / k projections have no pretrain_gpt.py "
                     "arguments (Megatron-Bridge builds them from its own layer spec); gpuplan "
                     "writes no Megatron-LM command for it")
    if a.mla is not None:
        m = a.mla
        out.append("--multi-latent-attention")
        if m.q_lora_rank:
            out += ["--q-lora-rank", m.q_lora_rank]
        out += ["--kv-lora-rank", m.kv_lora_rank, "--qk-head-dim", m.qk_nope_head_dim,
                "--qk-pos-emb-head-dim", m.qk_rope_head_dim, "--v-head-dim", m.v_head_dim]
        return out + _mla_yarn(a.config or {})
    if a.num_kv_heads and a.num_kv_heads != a.num_heads:
        out += ["--group-query-attention", "--num-query-groups", a.num_kv_heads]
    if a.head_dim and a.num_heads and a.head_dim * a.num_heads != a.hidden_size:
        out += ["--kv-channels", a.head_dim]
    if a.qk_norm == "rmsnorm":
        out.append("--qk-layernorm")
    elif a.qk_norm == "l2":
        out.append("--qk-l2-norm")
    if a.rotary_fraction < 1:
        out += ["--rotary-percent", repr(float(a.rotary_fraction))]
    if a.nope_layers:  # Llama 4's global layers (1: RoPE skipped)
        out += ["--no-rope-freq", "[" + ",".join("1" if i in a.nope_layers else "0"
                                                 for i in range(a.num_layers)) + "]"]
    return out


def _mla_yarn(cfg: Mapping) -> list[object]:
    """DeepSeek-V3's YaRN RoPE in MLA's options (``_add_mla_args``: ``--rotary-scaling-factor``,
    ``--mscale``, ``--mscale-all-dim``; ``--yarn-*`` of the position group)."""
    rs = cfg.get("rope_scaling")
    if not isinstance(rs, Mapping) or _rope_kind(rs) != "yarn":
        return []
    out: list[object] = ["--rope-type", "yarn"]
    for key, flag in (("factor", "--rotary-scaling-factor"), ("mscale", "--mscale"),
                      ("mscale_all_dim", "--mscale-all-dim"), ("beta_fast", "--yarn-beta-fast"),
                      ("beta_slow", "--yarn-beta-slow")):
        v = rs.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1e6:
            out += [flag, repr(float(v))]
    o = rs.get("original_max_position_embeddings")
    if isinstance(o, int) and not isinstance(o, bool) and 0 < o <= 1 << 24:
        out += ["--yarn-original-max-position-embeddings", o]
    return out


def _moe_args(a) -> list[object]:
    """The experts' width, the shared expert, which layers are MoE (``--moe-layer-freq`` as a
    list: DeepSeek-V3's first dense layers, Llama 4's interleave) and the router: a sigmoid
    score with the correction bias, group-limited choice and the routed scaling (DeepSeek-V3,
    GLM-4.5); a softmax before the top-k when the top-k weights are not renormalized (Qwen-MoE
    with ``norm_topk_prob`` false; Megatron's default top-k-then-softmax equals a renormalized
    softmax top-k, as Mixtral and Qwen3-MoE route)."""
    cfg = a.config or {}
    out: list[object] = []
    if a.moe_intermediate_size and a.moe_intermediate_size != a.intermediate_size:
        out += ["--moe-ffn-hidden-size", a.moe_intermediate_size]
    if a.shared_expert_intermediate_size:
        out += ["--moe-shared-expert-intermediate-size", a.shared_expert_intermediate_size]
    moe = set(a.moe_layers or range(a.num_layers))
    if moe != set(range(a.num_layers)):
        out += ["--moe-layer-freq",
                "[" + ",".join("1" if i in moe else "0" for i in range(a.num_layers)) + "]"]
    if a.router == "sigmoid" and a.family != "llama4_text":
        out += ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"]
        n_group, topk_group = a.router_groups
        if n_group > 1:
            out += ["--moe-router-num-groups", n_group, "--moe-router-group-topk", topk_group]
        factor = cfg.get("routed_scaling_factor")
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor != 1:
            out += ["--moe-router-topk-scaling-factor", float(factor)]
    elif a.router == "sigmoid":
        out += ["--moe-router-score-function", "sigmoid"]  # Llama 4: sigmoid of the top-1 logit
    elif a.family in ("qwen2_moe", "qwen3_moe") and not cfg.get("norm_topk_prob", False):
        out.append("--moe-router-pre-softmax")
    return out


#: Linear modules whose bias Megatron-LM's ``--add-qkv-bias`` turns on.
_QKV_MODULES = frozenset({"q_proj", "k_proj", "v_proj", "query_key_value", "qkv_proj", "c_attn",
                          "query", "key", "value", "Wqkv"})


def _block_args(a, model: Model) -> list[object]:
    """The block's shape in pretrain_gpt.py's terms (megatron/training/arguments.py): positions
    (``--position-embedding-type rope | learned_absolute``, ``--rotary-base``), the norm
    (``--normalization RMSNorm | LayerNorm``), a SwiGLU MLP (``--swiglu``), an untied head, and
    the linear biases (Megatron's default has them all; ``--disable-bias-linear``, with
    ``--add-qkv-bias`` where only Q, K and V have one). Without these flags Megatron-LM builds
    its default GPT (learned positions, LayerNorm, GeLU, tied head, biases): another model."""
    cfg = a.config or {}
    out: list[object] = []
    if a.position == "rotary":
        out += ["--position-embedding-type", "rope"]
        theta = cfg.get("rope_theta")
        if isinstance(theta, (int, float)) and not isinstance(theta, bool) and theta >= 1 \
                and float(theta).is_integer():
            out += ["--rotary-base", int(theta)]
        out += _rope_scaling(cfg)
    elif a.position == "learned":
        out += ["--position-embedding-type", "learned_absolute"]
    else:
        raise refuse(ENGINE, f"{model.name} uses {a.position} positions, which Megatron-LM does "
                     "not implement (Megatron-DeepSpeed's fork has ALiBi); plan it with "
                     f"{opt('export')} deepspeed", fix={"export": "deepspeed"})
    out += ["--normalization", "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm"]
    if a.mlp == "gated":
        if "silu" not in (a.activation or "") and "swish" not in (a.activation or ""):
            raise refuse(ENGINE, f"{model.name}'s gated MLP uses {a.activation}; Megatron-LM's "
                         "pretrain_gpt.py gates with SiLU only (--swiglu)")
        out.append("--swiglu")
    if not a.tie_word_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    biased = {t.module for t in model.tensors if t.name.endswith(".bias") and t.component in
              ("attention", "mlp", "experts")}
    if not biased - _QKV_MODULES:
        out.append("--disable-bias-linear")
        if biased & _QKV_MODULES:
            out.append("--add-qkv-bias")
    return out


#: Megatron-Core's Llama 3 RoPE scaling (megatron/core/models/common/embeddings/rope_utils.py,
#: ``apply_rope_scaling``) takes the factor from ``--rope-scaling-factor`` and fixes the rest.
_LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


def _rope_scaling(cfg: Mapping) -> list[object]:
    """``--use-rope-scaling --rope-scaling-factor F`` for a config.json whose ``rope_scaling`` is
    Llama 3's (Llama 3.1/3.2/3.3: factor 8 or 32); other kinds are said in :func:`_notes`."""
    rs = cfg.get("rope_scaling")
    if not isinstance(rs, Mapping) or _rope_kind(rs) != "llama3":
        return []
    factor = rs.get("factor")
    if not (isinstance(factor, (int, float)) and not isinstance(factor, bool)
            and 1 <= factor <= 1e4):
        return []
    return ["--use-rope-scaling", "--rope-scaling-factor", repr(float(factor))]


def _rope_kind(rs: Mapping) -> str:
    return str(rs.get("rope_type") or rs.get("type") or "")[:40]


def _notes(a, mtp: int | None = None) -> list[str]:
    """What pretrain_gpt.py cannot express of the block, said in the export (``mtp``: the
    job's MTP depth, written as ``--mtp-num-layers``)."""
    out = []
    rs = (a.config or {}).get("rope_scaling")
    if isinstance(rs, Mapping) and _rope_kind(rs) not in ("", "default"):
        kind = _rope_kind(rs)
        if kind == "yarn" and a.mla is not None:
            pass  # written as MLA's YaRN options (_mla_yarn)
        elif kind != "llama3":
            out.append(f"# the model's RoPE is scaled ({kind!r}); these arguments do not scale "
                       "it: pretrain_gpt.py builds plain RoPE at --rotary-base")
        elif any(rs.get(k, v) != v for k, v in _LLAMA3_ROPE.items()):
            out.append("# Megatron-Core's Llama 3 RoPE scaling fixes low_freq_factor 1, "
                       "high_freq_factor 4 and original_max_position_embeddings 8192; this "
                       "model's config.json differs")
    if a.mtp_layers and not mtp:
        out.append(f"# the checkpoint's {a.mtp_layers} multi-token-prediction layer(s) are not "
                   "built (the plan has none, as transformers); --mtp-num-layers "
                   f"{a.mtp_layers} trains them")
    if a.attention_chunk:
        out.append(f"# Llama 4's chunked local attention ({a.attention_chunk} tokens) is not an "
                   "option of pretrain_gpt.py: its RoPE layers attend causally over the whole "
                   "sequence (same sizes and FLOPs at seq <= the chunk)")
    if a.parallel_attn_mlp:
        out.append("# the model adds attention and MLP in parallel (one residual); Megatron-LM's "
                   "GPT block is sequential: same sizes and FLOPs, not the same function")
    if a.mlp != "gated" and "gelu" not in (a.activation or "gelu"):
        out.append(f"# the MLP activation is {a.activation}; pretrain_gpt.py's default is GeLU")
    return out


def _sharding(job: Job) -> list[str]:
    out = []
    if job.zero >= 1:
        out.append("--use-distributed-optimizer")
    if job.zero >= 2:
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _FSDP[job.zero],
                "--ckpt-format", "fsdp_dtensor", "--no-gradient-accumulation-fusion"]
    if job.offload_optimizer:
        if job.zero == 0:
            raise refuse(ENGINE, f"{opt('offload_optimizer')} needs the distributed optimizer: "
                         f"add {opt('zero')} 1", field="offload_optimizer", value=True,
                         fix={"zero": 1})
        out += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    return out


def _layout(job: Job, model: Model) -> list[str]:
    out = ["--tensor-model-parallel-size", str(job.tp),
           "--pipeline-model-parallel-size", str(job.pp),
           "--context-parallel-size", str(job.cp), "--expert-model-parallel-size", str(job.ep)]
    name, chunks = pp_chunks(job.pp_schedule)
    if job.pp > 1 and name == "gpipe":
        raise refuse(ENGINE, f"{opt('pp_schedule')} gpipe: Megatron-LM runs 1F1B (or "
                     "interleaved:V)", field="pp_schedule", value=job.pp_schedule,
                     fix={"pp_schedule": "1f1b"})
    if job.pp > 1 and name == "dualpipe":
        raise refuse(ENGINE, f"{opt('pp_schedule')} dualpipe: DeepSeek's DualPipe "
                     "(github.com/deepseek-ai/DualPipe) is not a Megatron-LM schedule; export "
                     "with 1f1b or interleaved:V", field="pp_schedule", value=job.pp_schedule,
                     fix={"pp_schedule": "1f1b"})
    if job.mtp_layers:
        # megatron/training/arguments.py (_add_mtp_args): --mtp-num-layers, default None
        out += ["--mtp-num-layers", str(job.mtp_layers)]
    if job.moe_shared_expert_overlap:
        # transformer_config.py @0d8e0714 moe_shared_expert_overlap (a TransformerConfig flag)
        out.append("--moe-shared-expert-overlap")
    if job.ep_overlap:
        # megatron/training/arguments.py @d98e8a64: batch-level EP overlap and the delayed
        # wgrad it is paired with (megatron/core/transformer/moe/README.md)
        out += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if job.etp is not None:
        out += ["--expert-tensor-parallel-size", str(job.etp)]
    if job.ep > 1 or job.moe_capacity_factor is not None:
        # the all-to-all dispatcher gpuplan's EP buffers and capacity are read from
        # (MoEAlltoAllTokenDispatcher; Megatron-Core's default is allgather:
        # transformer_config.py @d98e8a64 moe_token_dispatcher_type)
        out += ["--moe-token-dispatcher-type", "alltoall"] if job.moe_dispatcher == "alltoall" \
            else ["--moe-token-dispatcher-type", "flex",  # transformer_config.py @b0cc2706
                  "--moe-flex-dispatcher-backend", job.moe_dispatcher]
    if job.moe_capacity_factor is not None:
        # drop-and-pad: every expert runs exactly its capacity (moe_utils.get_capacity)
        out += ["--moe-expert-capacity-factor", f"{job.moe_capacity_factor:g}",
                "--moe-pad-expert-input-to-capacity"]
    if job.pp > 1 and (job.pp_first_stage_layers is not None
                       or job.pp_last_stage_layers is not None):
        return out + _uneven(job, model, chunks)
    extra = int(job.pp_embedding_part) + int(job.pp_loss_part)
    if job.pp > 1 and extra:
        return out + _parts(job, model, chunks)
    if job.pp > 1 and chunks > 1:
        layers = model.architecture.num_layers
        if layers % (job.pp * chunks):
            raise refuse(ENGINE, f"{opt('pp_schedule')} {job.pp_schedule}: {layers} layers do "
                         f"not split into {job.pp} x {chunks} equal chunks", field="pp_schedule",
                         value=job.pp_schedule)
        out += ["--num-layers-per-virtual-pipeline-stage", str(layers // (job.pp * chunks))]
    if job.sequence_parallel:
        out.append("--sequence-parallel")
    return out


def _uneven(job: Job, model: Model, chunks: int) -> list[str]:
    """An uneven pipeline split. Megatron-LM's ``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers`` when the split is theirs (the middle stages equal,
    every stage's layers divisible by V, V as ``--num-virtual-stages-per-pipeline-rank``);
    otherwise the parts themselves as a ``--pipeline-model-parallel-layout`` string (Megatron-
    Core's ``PipelineParallelLayerLayout``: ``E`` the embedding, ``t`` a transformer layer, ``L``
    the loss, ``|`` between the ``pp x V`` parts in model order, as NVIDIA-NeMo/Megatron-Bridge's
    DeepSeek-V3 recipes write their 61 layers)."""
    parts = part_layers(model.architecture.num_layers, job.pp, chunks, False, False,
                        job.pp_first_stage_layers, job.pp_last_stage_layers)
    stages = [parts[s::job.pp] for s in range(job.pp)]
    given = {0: job.pp_first_stage_layers, job.pp - 1: job.pp_last_stage_layers}
    middle = {sum(stages[s]) for s in range(job.pp) if given.get(s) is None}
    if len(middle) <= 1 and all(sum(p) % chunks == 0 for p in stages):
        out = ["--num-virtual-stages-per-pipeline-rank", str(chunks)] if chunks > 1 else []
        if job.pp_first_stage_layers is not None:
            out += ["--decoder-first-pipeline-num-layers", str(job.pp_first_stage_layers)]
        if job.pp_last_stage_layers is not None:
            out += ["--decoder-last-pipeline-num-layers", str(job.pp_last_stage_layers)]
    else:
        text = ["t" if n == 1 else f"t*{n}" for n in parts]
        text[0], text[-1] = "E" + text[0], text[-1] + "L"
        out = ["--pipeline-model-parallel-layout", "|".join(text)]
    if job.sequence_parallel:
        out.append("--sequence-parallel")
    return out


def _parts(job: Job, model: Model, chunks: int) -> list[str]:
    """The embedding and/or loss as pipeline parts: Megatron-LM's ``--account-for-embedding-in-
    pipeline-split`` / ``--account-for-loss-in-pipeline-split``, which need ``layers + parts``
    divisible by ``pp x V``; V as ``--num-virtual-stages-per-pipeline-rank`` (its
    ``--num-layers-per-virtual-pipeline-stage`` counts transformer layers only)."""
    layers = model.architecture.num_layers
    units = layers + int(job.pp_embedding_part) + int(job.pp_loss_part)
    if units % (job.pp * chunks):
        raise refuse(ENGINE, f"{layers} layers with the embedding/loss parts are {units} parts, "
                     f"which do not split into {job.pp} x {chunks} equal chunks (Megatron-LM "
                     "requires it)")
    out = []
    if chunks > 1:
        out += ["--num-virtual-stages-per-pipeline-rank", str(chunks)]
    if job.pp_embedding_part:
        out.append("--account-for-embedding-in-pipeline-split")
    if job.pp_loss_part:
        out.append("--account-for-loss-in-pipeline-split")
    if job.sequence_parallel:
        out.append("--sequence-parallel")
    return out


#: gpuplan's narrow recipes as Megatron-LM's Transformer Engine options
#: (megatron/training/arguments.py ``_add_transformer_engine_args``): over ``--bf16`` (BF16
#: weights, fp32 main weights). Megatron's own ``--fp8-amax-history-len`` default is 1 and its
#: ``--fp8-amax-compute-algo`` most_recent: the export writes TE's DelayedScaling defaults, the
#: history gpuplan plans (1024, max).
_NARROW = {
    "fp8-delayed": ["--fp8-format", "hybrid", "--fp8-recipe", "delayed",
                    "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"],
    "fp8-current": ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"],
    "fp8-blockwise": ["--fp8-format", "e4m3", "--fp8-recipe", "blockwise"],
    "mxfp8": ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"],
    "nvfp4": ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"],
}


def _narrow(job: Job) -> list[str]:
    """The Transformer Engine options of a narrow recipe (none for a 16/32-bit one)."""
    if job.precision not in _NARROW:
        return []
    out = ["--bf16", *_NARROW[job.precision]]
    if job.fp8_param_gather:
        out.append("--fp8-param-gather")
    if job.fp8_attention:
        out.append("--fp8-dot-product-attention")
    if job.first_last_layers_bf16:
        n = str(job.first_last_layers_bf16)
        out += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", n,
                "--num-layers-at-end-in-bf16", n]
    return out


#: Recipes under which Megatron-Core's precision-aware optimizer hands the master to Transformer
#: Engine's FusedAdam (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``: main params fp32 and
#: fp8_recipe delayed, which is also TransformerConfig's default when no FP8 recipe is named:
#: optimizer_config.py lines 407-413, transformer_config.py line 594, NVIDIA/Megatron-LM
#: @d98e8a64), FusedAdam keeping it as int16 remainders beside bf16 weights
#: (``store_param_remainders``, OptimizerConfig default True, line 192, passed at
#: optimizer/__init__.py line 588; FusedAdam stores remainders for bf16 parameters only:
#: transformer_engine/pytorch/optimizers/fused_adam.py lines 213-214 and 626,
#: NVIDIA/TransformerEngine@d0067d0d). No option of pretrain_gpt.py sets
#: store_param_remainders (arguments.py @d98e8a64 has none; training.py
#: get_megatron_optimizer_config copies only the fields args has), so under these recipes the
#: precision-aware master is the remainder one (with Transformer Engine 2.1 or newer: before,
#: optimizer_config.py line 437-438 turns the remainders off).
_REMAINDER_RECIPES = frozenset({"mixed-bf16", "fp8-delayed", "nvfp4"})
#: Recipes where it keeps a whole fp32 master: fp16 weights (FusedAdam stores no remainder of
#: them) and the FP8 recipes other than delayed, whose fp32 main params Megatron-Core's
#: distributed optimizer holds itself (distrib_optimizer.py lines 421-423 @d98e8a64).
_FP32_MASTER_RECIPES = frozenset({"mixed-fp16", "fp8-current", "fp8-blockwise", "mxfp8"})


def _refuse_master(mw: str) -> None:
    """The masters Megatron-LM cannot keep: a bf16 one, and none."""
    if mw == "bf16":
        # --main-params-dtype: choices fp32, fp16 (megatron/training/arguments.py @d98e8a64dd);
        # TE's FusedAdam refuses a bf16 master (fused_adam.py 137-138 @d0067d0d)
        raise refuse(ENGINE, f"{opt('master_weights')} bf16: Megatron-LM's main_params_dtype "
                     "takes fp32 or fp16 and Transformer Engine's FusedAdam refuses a bf16 "
                     "master (NeMo's Apex distributed Adam keeps one); drop it",
                     field="master_weights", value="bf16", fix={"master_weights": "auto"})
    if mw == "none":
        # Megatron-Core's optimizers keep fp32 (or fp16) main params, or remainders of them
        # (optimizer_config.py main_params_dtype, store_param_remainders @d98e8a64): none steps
        # the bf16 weights, as NeMo's Apex distributed Adam at dtype bf16 does
        raise refuse(ENGINE, f"{opt('master_weights')} none: Megatron-LM keeps an fp32 or "
                     "fp16 master, or its remainders (NeMo's Apex distributed Adam at dtype "
                     "bf16 keeps none); drop it", field="master_weights", value="none",
                     fix={"master_weights": "auto"})


def _precision_aware(job: Job) -> list[str]:
    """Megatron-Core's precision-aware optimizer for bf16 Adam states and/or a remainder master
    (``--use-precision-aware-optimizer``, ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` bf16:
    arguments.py lines 3667-3684 @d98e8a64); nothing for fp32 states and an fp32 master. The
    master it keeps follows the recipe (:data:`_REMAINDER_RECIPES`): a plan that names the other
    one is refused, naming the master Megatron keeps."""
    bf16_states, mw = job.optimizer_states == "bf16", job.master_weights
    _refuse_master(mw)
    if not bf16_states and mw != "remainder":
        return []
    field, value = ("optimizer_states", "bf16") if bf16_states else ("master_weights", mw)
    what, why, fix = f"{opt(field)} {value}", None, {field: "auto"}
    alone = job.zero == 0 and job.dp * job.cp == 1  # ZeRO-1 over one rank is ZeRO-0
    if job.zero != 1 and not alone:
        # optimizer/__init__.py lines 1057-1060 @d98e8a64: only with the distributed optimizer;
        # Megatron-FSDP (ZeRO-2/3) keeps its own main-parameter buffer
        # (--megatron-fsdp-main-params-dtype), not FusedAdam's remainders
        why, fix = (f"Megatron-LM's precision-aware optimizer runs only over its distributed "
                    f"optimizer (not Megatron-FSDP); use {opt('zero')} 1"), {"zero": 1}
    elif job.offload_optimizer:
        # optimizer/__init__.py lines 504-546 @d98e8a64: HybridDeviceOptimizer, torch's Adam
        # with param_update_in_fp32, no state dtypes and no remainders
        why = (f"with {opt('offload_optimizer')} Megatron-LM steps on the host with torch's "
               "Adam, fp32 states and master; drop it")
    elif job.fp8_param_gather:
        why = (f"with {opt('fp8_param_gather')} the weights are FP8 tensors, which the export "
               "does not know FusedAdam to keep remainders of")
    elif job.precision not in _REMAINDER_RECIPES | _FP32_MASTER_RECIPES:
        why, fix = (f"Megatron-LM's precision-aware optimizer steps 16-bit weights; use "
                    f"{opt('precision')} mixed-bf16 with {opt('master_weights')} remainder"), \
            {"precision": "mixed-bf16", "master_weights": "remainder"}
    elif mw == "remainder" and job.precision not in _REMAINDER_RECIPES:
        why, fix = (f"under {opt('precision')} {job.precision} Megatron-Core keeps a whole fp32 "
                    f"master; drop {opt('master_weights')}"), {"master_weights": "auto"}
        field, value, what = "master_weights", mw, f"{opt('master_weights')} remainder"
    elif mw != "remainder" and job.precision in _REMAINDER_RECIPES:
        why, fix = (f"Megatron-LM's precision-aware optimizer, which bf16 states need, keeps the "
                    f"fp32 master as 16-bit remainders beside the bf16 weights and no option "
                    f"turns that off; add {opt('master_weights')} remainder"), \
            {"master_weights": "remainder"}
    if why:
        raise refuse(ENGINE, f"{what}: {why}", field=field, value=value, fix=fix)
    out = ["--use-distributed-optimizer"] * alone + ["--use-precision-aware-optimizer"]
    if bf16_states:
        out += ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    return out


def _grads(job: Job) -> list[str]:
    """The gradient buffer in ``grad_dtype`` (NVIDIA/Megatron-LM@d98e8a64): fp32 is
    ``--accumulate-allreduce-grads-in-fp32`` (megatron/training/arguments.py line 3069; passed
    as DDPConfig ``grad_reduce_in_fp32``, training.py line 2635, which allocates the buffer in
    ``torch.float``: core/distributed/param_and_grad_buffer.py line 924); bf16 beside bf16
    weights is ``--grad-reduce-in-bf16`` (arguments.py lines 1213-1214 and 3053). Nothing for
    auto. Megatron-FSDP (ZeRO-2/3) keeps its own ``--megatron-fsdp-main-grads-dtype``, and fp16
    weights (``--fp16``) have fp16 or fp32 gradients: the rest is refused."""
    g = job.grad_dtype
    if g == "auto":
        return []
    why = None
    if job.zero >= 2:
        why = (f"under Megatron-FSDP ({opt('zero')} {job.zero}) the gradient buffer is "
               "--megatron-fsdp-main-grads-dtype's, which this export does not write; plan "
               f"{opt('zero')} 1")
    elif g == "bf16" and job.precision == "mixed-fp16":
        why = "Megatron-LM's --fp16 keeps fp16 or fp32 gradients; use fp32"
    if why:
        raise refuse(ENGINE, f"{opt('grad_dtype')} {g}: {why}, or drop {opt('grad_dtype')}",
                     field="grad_dtype", value=g, fix={"grad_dtype": "auto"})
    return ["--accumulate-allreduce-grads-in-fp32"] if g == "fp32" else ["--grad-reduce-in-bf16"]


def _recipe(job: Job) -> list[str]:
    flags = {"mixed-bf16": ["--bf16"], "mixed-fp16": ["--fp16"], "fp32": []}
    flags.update({name: _narrow(job) for name in _NARROW})
    if job.precision not in flags:
        raise refuse(ENGINE, f"{opt('precision')} {job.precision} has no Megatron-LM setting "
                     "(--bf16 and --fp16 keep fp32 main weights: mixed-bf16, mixed-fp16; or "
                     f"fp32; Transformer Engine: {', '.join(_NARROW)})", field="precision", value=job.precision,
                     fix={"precision": "mixed-bf16"})
    opts = {"adamw": ["--optimizer", "adam"], "adam": ["--optimizer", "adam"],
            "sgd": ["--optimizer", "sgd", "--sgd-momentum", "0.0"],
            "sgd-momentum": ["--optimizer", "sgd", "--sgd-momentum", "0.9"]}
    if job.optimizer not in opts or (job.optimizer_states == "bf16"
                                     and job.optimizer not in ("adam", "adamw")):
        raise refuse(ENGINE, f"{opt('optimizer')} {job.optimizer} (states "
                     f"{job.optimizer_states}): Megatron-LM steps adam (decoupled weight decay) or "
                     "sgd with fp32 states", field="optimizer", value=job.optimizer)
    rec = {"none": [], "selective": ["--recompute-granularity", "selective"],
           "full": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                    "--recompute-num-layers", "1"]}[job.checkpointing]
    if job.recompute_modules is not None:
        # transformer_config.py @d98e8a64 recompute_modules (a list; default ["core_attn"])
        rec += ["--recompute-modules", *job.recompute_modules]
    if job.cuda_graph_scope == ("full",):
        # whole-layer graphs: transformer_config.py @0d8e0714 lines 1496-1527, cuda_graph_impl
        # "local" with no scope (enable_cuda_graph, deprecated there, maps to it)
        rec += ["--cuda-graph-impl", "local"]
    elif job.cuda_graph_scope is not None:
        # transformer_config.py @b0cc2706 cuda_graph_impl / cuda_graph_scope (a list)
        rec += ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope",
                *job.cuda_graph_scope]
    if job.distribute_checkpoints:
        rec.append("--distribute-saved-activations")
    return flags[job.precision] + _grads(job) + opts[job.optimizer] + _precision_aware(job) + rec


def export(job: Job, model: Model) -> str:
    """``pretrain_gpt.py`` arguments for ``job``, one option per line."""
    train_only(job, ENGINE)
    check_expressed(job, ENGINE, tuple(f for f in TRAIN_FIELDS if f != "optimizer_states"),
                    _EXPRESSED)
    accum = accumulation(job, ENGINE)
    args = [*_model_args(job, model), *_layout(job, model),
            "--micro-batch-size", str(job.batch),
            "--global-batch-size", str(job.batch * accum * job.dp),
            *_recipe(job), *_sharding(job)]
    if job.max_grad_norm is not None:  # Megatron clips at 1.0 unless told
        args += ["--clip-grad", repr(job.max_grad_norm)]
    lines = [f"# gpuplan plan of {model.name}: {job.gpus} GPUs = tp {job.tp} x pp {job.pp} x "
             f"cp {job.cp} x dp {job.dp}"]
    lines += _notes(model.architecture, job.mtp_layers)
    if not job.fused_optimizer:
        lines.append("# Megatron-LM's Adam is a fused kernel (no foreach temporary): plan with "
                     "--fused-optimizer for its exact step memory")
    nodes = num_machines(job)
    launch = f"torchrun --nproc-per-node {min(job.gpus, job.gpus_per_node)}"
    if nodes > 1:  # one such line on every node, NODE_RANK 0 .. nodes - 1
        launch += (f" --nnodes {nodes} --node-rank $NODE_RANK --master-addr $MASTER_ADDR "
                   "--master-port 29500")
    lines.append(f"{launch} pretrain_gpt.py \\")
    pairs: list[str] = []
    for a in args:
        if a.startswith("--") or not pairs:
            pairs.append(a)
        else:
            pairs[-1] += " " + shlex.quote(a)
    lines += [f"    {p} \\" for p in pairs[:-1]] + [f"    {pairs[-1]}"]
    return "\n".join(lines) + "\n"
