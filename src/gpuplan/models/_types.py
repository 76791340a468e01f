"""The value types every analysis consumes: a model is a list of parameter tensors, plus (when
known) its architecture.

Listing tensors rather than a few totals lets one representation serve every consumer: parameter
counts by component, Adafactor's factored states (matrix shapes), quantization conventions (which
tensors stay unquantized), LoRA targets (which linear modules), and the exact per-tensor dtypes read
from a checkpoint's safetensors headers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Mapping

from .._record import record
from ..bounds import check_int, check_number

__all__ = ["COMPONENTS", "ParamTensor", "ParamCounts", "MLA", "Architecture", "Model",
           "EAGER_ONLY", "FUSED_ATTENTION", "attention_for"]

#: Families whose transformers attention is eager only (BloomAttention: ALiBi in a baddbmm, no
#: SDPA path; GptOssPreTrainedModel: ``_supports_sdpa = False``, its sinks join the softmax):
#: planned, timed and counted with materialized scores unless the engine runs the family's
#: attention in a fused kernel of its own (:data:`FUSED_ATTENTION`).
EAGER_ONLY = ("bloom", "gpt_oss")

#: family -> the engines that run the family's attention in a fused kernel of their own (which
#: the speed and memory models time and count as ``sdpa``: flash-style, no materialized
#: scores, the causal and sliding-window blocks skipped). gpt-oss's learned sinks and its
#: alternating 128-token window, engine by engine:
#:
#: * transformers (and deepspeed, fsdp2, torchtune, gpt-fast, which run its model code or
#:   SDPA): eager. transformers 5.25.0 (the version in the project's venv)
#:   models/gpt_oss/modeling_gpt_oss.py: ``_supports_sdpa = False``, ``_supports_flash_attn``
#:   and ``_supports_flex_attn`` True; modeling_utils.get_correct_attn_implementation turns an
#:   unset implementation into ``sdpa``, which for this class falls back to eager. Flash (the
#:   kernels-hub ``kernels-community/vllm-flash-attn3``, Hopper only, or FA4) and flex run only
#:   when asked by name, which gpuplan's ``attention`` (eager / sdpa) cannot say. Not listed.
#: * vllm: fused on every GPU. vllm/model_executor/models/gpt_oss.py @0025d69b passes
#:   ``sinks=self.sinks`` and ``per_layer_sliding_window`` (even layers) to its ``Attention``;
#:   vllm/platforms/cuda.py @002db495 ``_get_backend_priorities`` tries FLASH_ATTN,
#:   FLASHINFER, TRITON_ATTN, FLEX_ATTENTION (FlashInfer first on SM100), each a fused kernel;
#:   vllm/v1/attention/backends/flash_attn.py @0084b783 hands the sinks to FlashAttention 3's
#:   varlen kernel (``s_aux=self.sinks``, ``window_size=(sliding_window - 1, 0)``), and the
#:   Triton backend (``supports_sink`` True) takes them where FA3 does not run.
#: * sglang: fused. python/sglang/srt/models/gpt_oss.py @009c6808 passes ``sinks=self.sinks``
#:   and ``sliding_window_size = sliding_window - 1`` to RadixAttention, whose backends
#:   (fa3, triton, trtllm_mha: the sinks' dtype is chosen for the latter) run it fused.
#: * trt-llm: fused. tensorrt_llm/_torch/models/modeling_gpt_oss.py @050b6cb9 passes
#:   ``attention_sinks=self.sinks.data`` and ``attention_window_size`` to its Attention module.
#: * torchtitan: fused. torchtitan/models/gpt_oss/model.py @b5bcd76c runs FlexAttention or
#:   varlen attention (a sliding-window mask mod per layer) and applies the sinks after it as
#:   a rescale of the output by ``sigmoid(lse - sinks)`` (``apply_attention_sink_rescale``).
#: * megatron: fused with Transformer Engine >= 2.8. NVIDIA-NeMo/Megatron-Bridge
#:   src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py @355cef45: ``softmax_type
#:   "learnable"``, ``window_size (128, 0)``, ``window_attn_skip_freq 2``; older TE falls
#:   back to MCore's local (unfused) sink attention, a version gpuplan does not model.
#:   Checked for the Megatron-Bridge 26.02.01-26.06 performance rows (issue 30): their TE pins
#:   (pyproject.toml at v0.3.1 / v0.4.0 / v0.4.2 / v0.5.0: TE 5671fd36 2.12.0, 71bbefbf
#:   2.14.0, 366798ef 2.14.1, 4220403e 2.16.0) filter the backends alike
#:   (pytorch/attention/dot_product_attention/utils.py get_attention_backend): a learnable
#:   softmax disables FlashAttention and keeps FusedAttention, and cuDNN's
#:   F16_arbitrary_seqlen takes it with a (left, 0) window from cuDNN 9.13.1
#:   (common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend: "9.13.1+: vanilla,
#:   off-by-one, learnable"; head dim 64 and sbhd within its limits on sm90 and sm100). Two
#:   things would still drop it to UnfusedDotProductAttention -- determinism
#:   (NVTE_ALLOW_NONDETERMINISTIC_ALGO 0, which the performance scripts set for DeepSeek only:
#:   scripts/performance/perf_plugins.py) and FP8 attention (``fp8_dpa``, set only by the
#:   whole-iteration-graph GB rows, which no Job expresses) -- and neither applies to a
#:   predicted row. Nor could it have run unfused: its saved probabilities, 4 x 64 heads x
#:   4096^2 x 2 B = 8.6 GB a layer at MBS 4, are 309 GB over the 36 layers (B200: 180 GB);
#:   2.1 GB a layer at H100's MBS 1, 77 GB for the 9 layers of a PP-4 stage x 4 micro-batches
#:   in flight under 1F1B.
#:
#: None of them depends on the GPU for being fused: vLLM's backends differ by GPU (FA3 on
#: Hopper, FlashInfer / TRT-LLM-gen on Blackwell, Triton elsewhere) but every one that takes
#: sinks is a flash-style kernel.
FUSED_ATTENTION: Mapping[str, frozenset[str]] = MappingProxyType({
    "gpt_oss": frozenset({"vllm", "sglang", "trt-llm", "torchtitan", "megatron"}),
})


def attention_for(family: str, attention: str, engine: str | None = None) -> str:
    """The attention a job of ``family`` runs under ``engine``: ``attention`` (the job's), or
    ``eager`` for a family with no other implementation (:data:`EAGER_ONLY`) unless ``engine``
    runs the family's attention fused (:data:`FUSED_ATTENTION`). ``engine`` None or ``auto``:
    transformers' model code."""
    if family in EAGER_ONLY and engine not in FUSED_ATTENTION.get(family, ()):
        return "eager"
    return attention


#: Components parameters are split into, in display order.
COMPONENTS = ("embeddings", "attention", "mlp", "experts", "router", "norms", "head", "other")

Component = Literal["embeddings", "attention", "mlp", "experts", "router", "norms", "head", "other"]


@dataclass(frozen=True, slots=True)
class ParamTensor:
    """``count`` identical parameter tensors (e.g. one per layer) of one shape."""

    name: str
    """Checkpoint-style name; ``{i}`` stands for the layer index (and ``{e}`` the expert)."""
    shape: tuple[int, ...]
    count: int
    """How many tensors of this name pattern and shape exist (layers x experts ...)."""
    component: Component
    module: str
    """Leaf module name as PEFT ``target_modules`` and quantizers see it (``q_proj``, ``c_attn``,
    ``dense_h_to_4h``, ``lm_head``, ``embed_tokens`` ...)."""
    linear: bool
    """True for the 2-D weight of a matmul layer (nn.Linear / Conv1D): quantizable, LoRA-targetable."""
    dtype: str | None = None
    """Stored dtype when read from a checkpoint (safetensors names: ``BF16``, ``F32`` ...)."""
    layer: int | None = None
    """The layer index when tensors of the same name differ by layer (GGUF mixes); else None."""
    transposed: bool = False
    """Stored as (in_features, out_features) -- GPT-2's ``Conv1D`` -- rather than nn.Linear's
    (out_features, in_features)."""

    @property
    def numel(self) -> int:
        """Elements in one tensor."""
        return math.prod(self.shape)

    @property
    def total(self) -> int:
        """Elements in all ``count`` tensors."""
        return self.numel * self.count

    @property
    def in_features(self) -> int:
        """For a linear weight, the input dimension (nn.Linear stores (out, in); Conv1D and the
        fused expert tensors of gpt-oss and Llama 4 (in, out))."""
        return self.shape[-2] if self.transposed else self.shape[-1]

    @property
    def out_features(self) -> int:
        """For a linear weight, the output dimension."""
        return self.shape[-1] if self.transposed else self.shape[-2]

    @property
    def matrices(self) -> int:
        """Matrices in one tensor: 1 for a 2-D weight, the experts for a fused (E, in, out)
        expert tensor."""
        return math.prod(self.shape[:-2]) if len(self.shape) > 2 else 1

    @property
    def per_layer(self) -> bool:
        """True when the name holds a ``{i}`` layer placeholder."""
        return "{i}" in self.name


@record(kw_only=False)
class ParamCounts:
    """Exact parameter counts, split by component."""

    total: int
    by_component: Mapping[str, int]
    active: int
    """Parameters used per token: equals ``total`` except for mixture-of-experts models."""
    embedding: int
    """Input embedding parameters (token, position, type); ``total - embedding`` is the
    non-embedding count used by scaling laws and FLOP formulas."""

    def __post_init__(self) -> None:
        assert sum(self.by_component.values()) == self.total, "components must sum to the total"


@record
class MLA:
    """Multi-head Latent Attention (DeepSeek-V2/V3, Kimi-K2): queries through an optional
    low-rank ``q_lora_rank`` bottleneck; keys and values compressed into one ``kv_lora_rank``
    latent per token plus one shared rotary key of ``qk_rope_head_dim``, expanded per head by
    ``kv_b_proj`` into ``qk_nope_head_dim`` key and ``v_head_dim`` value dimensions. The cache
    holds the latent and the rotary key: ``kv_lora_rank + qk_rope_head_dim`` elements per token
    and layer, whatever the head count (transformers 5, vLLM, SGLang, TensorRT-LLM)."""

    q_lora_rank: int
    """0 when queries are projected directly (DeepSeek-V2-Lite)."""
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_elements(self) -> int:
        """Elements cached per token and layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@record
class Architecture:
    """A network's shape, from its config.json numbers. Only what analyses need is kept; the raw
    config is there for the rest."""

    name: str
    family: str
    """config.json ``model_type``: llama, mistral, mixtral, qwen2, qwen2_moe, gemma2, phi3, gpt2,
    gpt_bigcode, gpt_neox, opt, falcon, bloom, bert, vit."""
    kind: Literal["decoder", "encoder", "vision"]
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    """MLP width of a dense layer (per expert for MoE see ``moe_intermediate_size``)."""
    vocab_size: int
    """0 for vision models."""
    max_position_embeddings: int
    """Longest sequence the architecture supports (vision: number of patches + 1)."""
    tie_word_embeddings: bool
    mlp: Literal["gelu", "gated"]
    """``gelu``: up + down (two matrices, any pointwise activation); ``gated``: gate, up, down
    (SwiGLU / GeGLU)."""
    activation: str
    """config.json ``hidden_act``."""
    norm: Literal["layernorm", "rmsnorm"]
    position: Literal["learned", "rotary", "alibi", "none"]
    parallel_attn_mlp: bool = False
    """Attention and MLP read the same normed input (Falcon, GPT-J, GPT-NeoX parallel residual)."""
    attention_bias: bool = False
    mlp_bias: bool = False
    num_experts: int = 0
    """Routed experts per MoE layer (0 for a dense model)."""
    experts_per_token: int = 0
    """Routed experts each token is sent to (top-k)."""
    moe_intermediate_size: int = 0
    """MLP width of one routed expert."""
    shared_expert_intermediate_size: int = 0
    """MLP width of the always-active shared expert (Qwen-MoE); 0 when there is none."""
    moe_layers: tuple[int, ...] = ()
    """Indices of the layers whose MLP is a mixture of experts (every layer for Mixtral); the
    other layers have a dense MLP of ``intermediate_size``. Empty for dense models."""
    sliding_window: int | None = None
    """Tokens a sliding-window attention layer looks back over; None when no layer slides."""
    sliding_window_layers: tuple[int, ...] = ()
    """Indices of the layers that use ``sliding_window`` (every index for Mistral-7B v0.1, the even
    ones for Gemma-2); empty exactly when ``sliding_window`` is None."""
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    torch_dtype: str | None = None
    mla: MLA | None = None
    """Multi-head Latent Attention's ranks (DeepSeek-V2/V3); None for the other families, whose
    cache holds ``num_kv_heads`` K and V heads of ``head_dim``. With MLA ``head_dim`` is the
    query/key head (nope + rope) and ``num_kv_heads`` equals ``num_heads``."""
    qk_norm: Literal["none", "rmsnorm", "rmsnorm_full", "l2"] = "none"
    """A norm over each query and key head before the rotary embedding: Qwen3, Gemma 3 and
    GLM-4.5 weight an RMSNorm of ``head_dim`` (q_norm, k_norm); Llama 4 an unweighted L2 norm on
    its rotary layers; OLMo 2 (``rmsnorm_full``) one weighted RMSNorm over the whole query
    (heads x head_dim) and the whole key projection, before the split into heads."""
    attention_sinks: bool = False
    """gpt-oss: a learned logit per head joins the softmax's denominator (a parameter, nothing
    cached)."""
    attention_chunk: int | None = None
    """Llama 4's chunked local attention: a token sees only its own chunk of this many tokens on
    ``chunked_layers``; the others are global (and NoPE)."""
    chunked_layers: tuple[int, ...] = ()
    nope_layers: tuple[int, ...] = ()
    """Layers without rotary positions (Llama 4's global layers)."""
    rotary_fraction: float = 1.0
    """The part of each head that is rotated (GLM-4.5: 0.5)."""
    router: Literal["softmax", "sigmoid"] = "softmax"
    """How router logits become scores: a softmax over experts (Mixtral, Qwen, gpt-oss after the
    top-k), or a sigmoid per expert (DeepSeek-V3, GLM-4.5, Llama 4)."""
    router_groups: tuple[int, int] = (1, 1)
    """Group-limited routing (DeepSeek-V3: 8 groups, the top 4 kept): (n_group, topk_group)."""
    expert_bias: bool = False
    """Routed experts and their router carry biases (gpt-oss)."""
    mtp_layers: int = 0
    """Multi-token-prediction layers the checkpoint holds beyond ``num_layers`` (DeepSeek-V3,
    GLM-4.5: 1). transformers builds none of them, so they are not in ``tensors``; their
    parameters are ``mtp_params``, said in a note."""
    mtp_params: int = 0
    checkpoint_format: str | None = None
    """The weight format the published checkpoint ships in, from its ``quantization_config``
    (``fp8-block``: DeepSeek-V3's e4m3 with a 128 x 128 block scale; ``mxfp4``: gpt-oss's
    experts); None for a 16-bit checkpoint."""
    checkpoint_kernel: str | None = None
    """The kernel an AWQ checkpoint names in its ``quantization_config`` (``version``, or
    transformers' newer ``format``; lowercased: ``gemm``, ``gemv``, ``gemv_fast`` ...), which
    picks the decode kernel (compute/efficiency.py ``QUANT_KERNELS``); None for any other
    checkpoint."""
    buffer_bytes: int = 0
    """Non-parameter buffers the module keeps on the device next to its weights, in bytes
    (GPTBigCode's n_positions x n_positions bool causal mask); 0 for most families."""
    image_size: int = 0
    patch_size: int = 0
    num_channels: int = 0
    num_labels: int = 0
    hf_class: str = ""
    """The transformers class the parameter list corresponds to (``LlamaForCausalLM`` ...)."""
    tensors: tuple[ParamTensor, ...] = ()
    config: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    source: str = ""
    """Where the config numbers come from (catalog file's source URL, or the user's path)."""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_patches(self) -> int:
        """Image patches per image (vision models); 0 otherwise."""
        if not self.patch_size:
            return 0
        return (self.image_size // self.patch_size) ** 2

    @property
    def kv_elements_per_layer(self) -> int:
        """Elements cached per token and layer: K and V (2 x kv_heads x head_dim), or MLA's latent
        and rotary key."""
        if self.mla is not None:
            return self.mla.cache_elements
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def kv_elements_per_token(self) -> int:
        """Elements cached per token: 2 x layers x kv_heads x head_dim (MLA: layers x
        (kv_lora_rank + qk_rope_head_dim))."""
        return self.num_layers * self.kv_elements_per_layer

    def __post_init__(self) -> None:
        _check_architecture(self)  # issue 32: a constructor refuses what no network has


#: Architecture's numeric fields and the least each may be (the most: bounds.py's ``dim``).
_ARCH_DIMS = {"hidden_size": 1, "num_layers": 1, "num_heads": 1, "num_kv_heads": 1,
              "head_dim": 1, "intermediate_size": 0, "vocab_size": 0,
              "max_position_embeddings": 1, "num_experts": 0, "experts_per_token": 0,
              "moe_intermediate_size": 0, "shared_expert_intermediate_size": 0,
              "image_size": 0, "patch_size": 0, "num_channels": 0, "num_labels": 0}


def _check_architecture(a: "Architecture") -> None:
    """Whole numbers in range (layers: bounds.py's ``layers``), dropouts fractions, the
    buffer bytes a size, the sliding window a length: an InputError naming the field."""
    for name, low in _ARCH_DIMS.items():
        check_int(getattr(a, name), "layers" if name == "num_layers" else "dim",
                  low=low, field=name)
    for name in ("attention_dropout", "hidden_dropout"):
        check_number(getattr(a, name), "fraction", field=name)
    check_int(a.buffer_bytes, "bytes", field="buffer_bytes")
    if a.sliding_window is not None:
        check_int(a.sliding_window, "seq", field="sliding_window")


@record
class Model:
    """What the planner plans for: a name, its parameter tensors, and its architecture if known."""

    name: str
    params: ParamCounts
    tensors: tuple[ParamTensor, ...] = ()
    """Empty when only a bare count is known (``--params 7B``)."""
    architecture: Architecture | None = None
    source: Literal["catalog", "config", "safetensors", "gguf", "count"] = "count"
    checkpoint_dtype: str | None = None
    """Dominant stored dtype when read from safetensors."""
    notes: tuple[str, ...] = ()
