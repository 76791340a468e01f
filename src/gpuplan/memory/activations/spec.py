"""The architecture as the forward code reads it: the few numbers and flags each family's forward
pass branches on (:class:`Spec`), and the options of one job that change the forward
(:class:`Opts`)."""

from __future__ import annotations


from ..._record import record
from ...errors import InputError
from ...models import Architecture

__all__ = ["FAMILIES", "MODERN", "GEMMA", "DECODER_ROPE", "TORCHTUNE_FAMILIES", "GPT2_LIKE", "Spec",
           "Opts", "spec_cached", "sliding_mask"]

#: The families of 2025-2026 (issue 28): llama-style decoders with QK-norm, MLA, sinks,
#: chunked/NoPE layers and new routers.
MODERN = ("qwen3", "qwen3_moe", "gemma3_text", "deepseek_v3", "deepseek_v2", "glm4_moe",
          "gpt_oss", "llama4_text", "olmo2")

#: Families whose forward is modeled op by op.
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma2", "phi3", "gpt2",
            "gpt_bigcode", "gpt_neox", "opt", "falcon", "bloom", "bert", "vit",
            "nemotron") + MODERN

#: Families whose norms are Gemma's (``(1 + weight)`` in fp32).
GEMMA = ("gemma2", "gemma3_text")

#: GPT-2 and its GPTBigCode descendant: the same block, dropouts and learned positions.
GPT2_LIKE = ("gpt2", "gpt_bigcode")

#: Llama-style decoders torchtune's model code is modeled for.
TORCHTUNE_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma2", "phi3")

DECODER_ROPE = TORCHTUNE_FAMILIES + MODERN


@record(kw_only=False)
class Spec:
    """One architecture's numbers, as the forward code below reads them (hashable: profiles are
    cached per spec)."""

    family: str
    kind: str
    h: int
    heads: int
    kv: int
    d: int
    inter: int
    vocab: int
    act: str
    norm: str
    parallel: bool
    experts: int
    top_k: int
    moe_inter: int
    shared_inter: int
    attn_dropout: float
    hidden_dropout: float
    embd_dropout: float
    labels: int
    layers: int
    moe_layers: tuple[int, ...]
    softcap_attn: float
    softcap_final: float
    norm_topk: bool
    channels: int
    patch: int
    post_ln_residual: bool = False
    """BLOOM's ``apply_residual_connection_post_layernorm``: the residual is the LayerNorm's
    output, not its input."""
    qk_norm: str = "none"
    """none, rmsnorm (a weighted norm per head: Qwen3, Gemma 3, GLM-4.5), rmsnorm_full (one over
    the whole q and k projections: OLMo 2) or l2 (Llama 4)."""
    mla: tuple[int, int, int, int, int] = ()
    """MLA's (q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim)."""
    sinks: bool = False
    nope_layers: tuple[int, ...] = ()
    rotary_fraction: float = 1.0
    expert_bias: bool = False
    # ---- the sparse MoE block's router and shared experts (blocks._moe_body) ----------------
    router: str = "softmax"
    """How routing weights are scored: ``softmax`` (fp32 probabilities, then top-k: Mixtral,
    Qwen-MoE, Qwen3-MoE), ``sigmoid`` (sigmoid scores, top-k of scores + a correction bias,
    optionally group-limited, weights gathered from the scores: DeepSeek-V3, GLM-4.5) or
    ``topk_softmax`` (top-k of the logits, softmax over the k: gpt-oss)."""
    router_fp32: str = "dtype"
    """Where the router goes to fp32: ``dtype`` (softmax(logits, dtype=float32): Qwen-MoE),
    ``logits`` (softmax(logits.float()): Mixtral) or ``input`` (F.linear(x.float(),
    weight.float()): DeepSeek-V3)."""
    router_cast_back: bool = False
    """The top-k weights are cast back to the logits' dtype (Qwen-MoE, Qwen3-MoE)."""
    score_bias: bool = False
    """``e_score_correction_bias`` added to the scores used for the choice (DeepSeek-V3)."""
    groups: tuple[int, int] = (1, 1)
    """Group-limited routing (``n_group``, ``topk_group``); (1, 1) is none."""
    routed_scale: float = 0.0
    """``routed_scaling_factor`` multiplying the top-k weights (0: no multiplication)."""
    shared_gate: bool = False
    """The shared expert's output is scaled by sigmoid(shared_expert_gate(x)) (Qwen-MoE)."""
    window_mask: bool = False
    """The model's forward builds a sliding-window mask no layer uses (Qwen2MoeModel builds
    ``create_sliding_window_causal_mask`` on every forward; with ``use_sliding_window`` off the
    window is 0, SDPA's skip test ``kv_length < window`` fails and an (s, s) boolean mask is
    made, alive until the model's forward returns)."""
    local_layers: tuple[int, ...] = ()
    """The layers whose attention is local (a sliding window or Llama 4's chunks) where only some
    are (Gemma 3, gpt-oss, Llama 4); empty: every layer is alike."""
    attn_temp: bool = False
    """Llama 4's ``attn_temperature_tuning``: the query of each NoPE layer scaled by fp32
    per-position factors and cast back."""
    shared_first: bool = False
    """The shared expert runs before the router (Qwen-MoE); otherwise after the routed experts
    (DeepSeek-V3, GLM-4.5)."""


_SPECS: dict[int, tuple[Architecture, Spec]] = {}


def spec_cached(arch: Architecture) -> Spec:
    hit = _SPECS.get(id(arch))
    if hit is not None and hit[0] is arch:
        return hit[1]
    sp = _spec(arch)
    if len(_SPECS) > 256:
        _SPECS.clear()
    _SPECS[id(arch)] = (arch, sp)
    return sp


def _spec(arch: Architecture) -> Spec:
    cfg = arch.config or {}
    fam = arch.family
    if fam not in FAMILIES:
        raise InputError(f"activation memory for family {fam!r} is not modeled; known families: "
                         + ", ".join(FAMILIES))
    moe_layers = tuple(getattr(arch, "moe_layers", ()) or ())
    if arch.num_experts and not moe_layers:
        moe_layers = tuple(range(arch.num_layers))
    # (GPTBigCodeConfig's default embd_pdrop is 0.1; gpt2 keeps its earlier 0.0 when absent)
    embd_default = 0.1 if fam == "gpt_bigcode" else 0.0
    embd_dropout = float(cfg.get("embd_pdrop", embd_default) or 0.0) if fam in GPT2_LIKE else 0.0
    if fam in GPT2_LIKE:
        attn_dropout = float(cfg.get("attn_pdrop", arch.attention_dropout) or 0.0)
        hidden_dropout = float(cfg.get("resid_pdrop", arch.hidden_dropout) or 0.0)
    else:
        attn_dropout = arch.attention_dropout
        hidden_dropout = arch.hidden_dropout
    if fam in ("bert", "vit"):
        attn_dropout = float(cfg.get("attention_probs_dropout_prob", attn_dropout) or 0.0)
        hidden_dropout = float(cfg.get("hidden_dropout_prob", hidden_dropout) or 0.0)
    if fam == "opt":
        hidden_dropout = float(cfg.get("dropout", hidden_dropout) or 0.0)
        attn_dropout = float(cfg.get("attention_dropout", attn_dropout) or 0.0)
    return Spec(
        family=fam, kind=arch.kind, h=arch.hidden_size, heads=arch.num_heads,
        kv=arch.num_kv_heads, d=arch.head_dim, inter=arch.intermediate_size,
        vocab=arch.vocab_size, act=arch.activation, norm=arch.norm,
        parallel=arch.parallel_attn_mlp,
        experts=arch.num_experts, top_k=arch.experts_per_token,
        moe_inter=arch.moe_intermediate_size or arch.intermediate_size,
        shared_inter=arch.shared_expert_intermediate_size,
        attn_dropout=attn_dropout, hidden_dropout=hidden_dropout, embd_dropout=embd_dropout,
        labels=arch.num_labels or 2, layers=arch.num_layers,
        moe_layers=moe_layers,
        softcap_attn=float(cfg.get("attn_logit_softcapping") or 0.0) if fam in GEMMA else 0.0,
        softcap_final=float(cfg.get("final_logit_softcapping") or 0.0) if fam in GEMMA else 0.0,
        channels=arch.num_channels or 3, patch=arch.patch_size,
        post_ln_residual=bool(cfg.get("apply_residual_connection_post_layernorm", False))
        if fam == "bloom" else False,
        qk_norm=arch.qk_norm,
        mla=(() if arch.mla is None else
             (arch.mla.q_lora_rank, arch.mla.kv_lora_rank, arch.mla.qk_rope_head_dim,
              arch.mla.qk_nope_head_dim, arch.mla.v_head_dim)),
        sinks=arch.attention_sinks, nope_layers=arch.nope_layers,
        rotary_fraction=arch.rotary_fraction, expert_bias=arch.expert_bias,
        local_layers=_local_layers(arch),
        attn_temp=(fam == "llama4_text" and bool(cfg.get("attn_temperature_tuning", True))),
        **{"norm_topk": bool(cfg.get("norm_topk_prob", fam in ("mixtral", "deepseek_v3",
                                                              "glm4_moe"))),
           **_router_fields(fam, cfg)},
    )


#: Each MoE family's router and shared-expert arrangement, as its transformers code has it
#: (``<Family>TopKRouter.forward`` and ``<Family>SparseMoeBlock.forward``).
_ROUTERS: dict[str, dict] = {
    "mixtral": dict(router="softmax", router_fp32="logits"),
    "qwen2_moe": dict(router="softmax", router_fp32="dtype", router_cast_back=True,
                      shared_gate=True, shared_first=True),
    "qwen3_moe": dict(router="softmax", router_fp32="dtype", router_cast_back=True),
    "deepseek_v3": dict(router="sigmoid", router_fp32="input"),
    "glm4_moe": dict(router="sigmoid", router_fp32="input"),
    "gpt_oss": dict(router="topk_softmax"),
    # DeepseekV2TopkRouter: fp32 input and (kept fp32) weight, softmax, greedy or group-limited
    # top-k, always times routed_scaling_factor; norm_topk_prob is not read by its code
    "deepseek_v2": dict(router="softmax_v2", router_fp32="input", norm_topk=False),
}


def _router_fields(fam: str, cfg: dict) -> dict:
    fields = dict(_ROUTERS.get(fam, {}))
    if fam == "qwen2_moe" and not cfg.get("use_sliding_window"):
        fields["window_mask"] = True
    if fields.get("router") == "sigmoid":
        fields.setdefault("score_bias", True)
        fields["groups"] = (int(cfg.get("n_group") or 1), int(cfg.get("topk_group") or 1))
        fields["routed_scale"] = float(cfg.get("routed_scaling_factor") or 1.0)
    if fam == "deepseek_v2":
        limited = cfg.get("topk_method") == "group_limited_greedy"
        fields["groups"] = ((int(cfg["n_group"]), int(cfg["topk_group"])) if limited
                            else (0, 0))  # (0, 0): greedy, no group ops
        fields["routed_scale"] = float(cfg.get("routed_scaling_factor") or 1.0)
    return fields


@record(kw_only=False)
class Opts:
    """The options of one job that change what the forward records."""

    attention: str          # eager | sdpa
    cache: bool             # transformers builds a DynamicCache in the forward
    lora: frozenset         # targeted module names ("all-linear" = every block linear)
    lora_rank: int
    lora_dropout: float
    quantized: int          # frozen quantized base: bytes per weight element a matmul
                            # materializes (bitsandbytes 4-bit: 2, with fp32 compute 2 + 4)
    frozen: bool            # base weights frozen (LoRA)
    sdpa_mask: bool = False  # an explicit mask reaches SDPA (sliding window shorter than s)
    sp: int = 1             # Megatron sequence parallelism: the sequence split over this TP group
    ep: int = 1             # expert parallelism: this rank holds experts / ep of each MoE layer
    compiled: bool = False  # torch.compile of each layer and of the loss (runtime="compile")
    model_code: str = "transformers"  # whose model code: transformers or torchtune
    loss_chunks: int = 1    # output projection + cross-entropy over this many sequence chunks
    narrow_inputs: float = 0  # a narrow recipe saves each block linear's input at this many
                              # bytes per element for the weight gradient (TE FP8: 1; 0: 16-bit)
    narrow_gathered: bool = False  # ... of the all-gathered input under SP, saved whole (torchao)
    capacity_factor: object = None  # MoE capacity factor (a Fraction): the experts run
                                    # b*s*top_k*cf padded rows; None: dropless
    experts: str = "transformers"  # whose routed experts (EngineProfile.moe_experts)
    narrow_shard: bool = False  # ... of the sequence shard, quantized before the gather (TE)
    proj_original: bool = False  # the attention's output projection saves its 16-bit input
    attn_out_bytes: object = None  # DeepSeek-V3's storage (Job.activation_storage): MLA's
                                   # attention output, shared with o_proj, at this many bytes
    moe_act_narrow: float = 0  # ... the MoE SwiGLU inputs cached at this many bytes
    norm_out_narrow: bool = False  # ... a recomputed norm's quantized copy recomputed with it


def _local_layers(arch: Architecture) -> tuple[int, ...]:
    if arch.family not in ("gemma3_text", "gpt_oss", "llama4_text"):
        return ()
    return tuple(sorted(set(arch.sliding_window_layers) | set(arch.chunked_layers)))


def sliding_mask(arch: Architecture, sp: Spec, attention: str, s: int) -> bool:
    """Whether an explicit mask reaches SDPA: a sliding window shorter than ``s``; for the
    families with local and global layers, whether it reaches their local layers (Gemma 3's
    sliding layers, Llama 4's chunked ones: a window or chunk shorter than ``s``); or Falcon's
    causal mask, which transformers (5.25 on) always materializes (``create_causal_mask`` with
    ``allow_is_causal_skip=False``, so that an ALiBi bias can be added to it)."""
    if attention == "sdpa" and sp.family == "falcon":
        return True
    if sp.local_layers:
        span = arch.attention_chunk if sp.family == "llama4_text" else arch.sliding_window
        return bool(attention == "sdpa" and span and s > span)
    return bool(attention == "sdpa" and sp.family in ("mistral", "qwen2", "mixtral", "phi3",
                                                      "qwen3", "qwen3_moe")
                and arch.sliding_window and s > arch.sliding_window)
