"""FLOP and byte counting: exact matmul counts, and the operations of one training or inference step
for every architecture family :class:`~gpuplan.models.Architecture` describes.

Conventions (stated once, used everywhere):

* A matmul of an M x K by a K x N matrix performs exactly ``M*K*N`` multiplies and ``M*(K-1)*N``
  additions (``M*K*N`` with a bias). FLOP totals use the usual ``2*M*K*N`` (one multiply and one add
  per multiply-accumulate), as Megatron-LM, PaLM and every MFU figure do.
* **Counted FLOPs** (model and hardware FLOPs, MFU and HFU) are matmul FLOPs only -- norms,
  activations, softmax and residuals are excluded (Narayanan et al. 2021; PaLM appendix B; MosaicML's
  MFU). The attention score and value products are counted over the *full* s x s square even for a
  causal decoder: that is Megatron's 96BslH^2(1 + s/6h + V/16lh) and PaLM's 6N + 12LHQT.
* **Executed FLOPs** are what the kernels do, and are what the step time uses: a causal fused
  attention kernel (``sdpa``: PyTorch's flash / memory-efficient kernels) skips key blocks that are
  entirely masked (about half the square; Dao 2023, FlashAttention-2 sec. 3.1.1), an eager
  (materialized) attention computes the whole square and then masks it, and a fused backward
  recomputes the scores (2.5x the forward's FLOPs, the figure the flash-attn benchmarks use).
* Backward = 2x forward for every matmul (dX and dW); activation recompute adds one forward of every
  layer ("full") or of the attention core only ("selective", Korthikanti et al. 2022).
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Literal, Mapping, Sequence, get_args

from .._record import record
from ..bounds import BOUNDS
from ..engines.profiles import FP8_ATTENTION, fp8_attention_of, resolve_engine
from ..engines.profiles import MLA_ABSORBING as _MLA_ABSORBING
from ..errors import InputError, opt, shown
from ..hardware import all_gpus
from ..job import Attention, Checkpointing, Job, default_seq
from ..parallel.moe_ep import expert_capacity
from ..models._types import Architecture, attention_for

__all__ = [
    "MatmulCount", "count_matmul", "Op", "OpClass", "OP_CLASSES", "StepShape", "build_forward_ops",
    "backward_ops", "recompute_ops", "mtp_projection_ops", "one_launch_product", "optimizer_op", "lora_adapter_ops", "is_layer_op", "default_seq",
    "FlopsBreakdown", "LayerFlops", "flops_breakdown", "FLASH_BLOCK", "causal_score_elements",
    "chunked_score_elements", "visible_keys", "RunForm", "run_form", "form_notes", "grouped_experts",
    "expert_tokens", "TRANSFORMERS_CODE", "MLA_ABSORBING", "AttentionPrecision",
    "inference_attention", "fp8_attention_ops",
]

OpClass = Literal["attention", "mlp", "norm_elementwise", "embedding", "logits", "optimizer"]
#: Op classes in display order (the roofline groups ops by these).
OP_CLASSES: tuple[str, ...] = ("attention", "mlp", "norm_elementwise", "embedding", "logits",
                               "optimizer")
OpKind = Literal["matmul", "attention", "elementwise"]
Phase = Literal["forward", "backward", "recompute", "optimizer"]

#: Key/query block size of a FlashAttention kernel: a key block is skipped only when every one of
#: its keys is masked for every query of the query block (FlashAttention-2 uses 64-128; 128 stated).
FLASH_BLOCK = 128

# Executed FLOPs per element of the non-matmul ops (stated approximations; these ops are
# memory-bound on every device, so the constants only place them on the roofline).
_NORM_FLOPS = {"layernorm": 7, "rmsnorm": 4}
#: relu2 (squared ReLU, Nemotron's MLP: transformers' ReLUSquaredActivation, NeMo's squared_relu)
#: is relu(x) then its square: a max and a multiply per element.
_ACT_FLOPS = {"gelu": 8, "relu": 1, "relu2": 2, "silu": 4}
_SOFTMAX_FLOPS = 5


def positive_int(value: object, what: str, maximum: int | None = None) -> int:
    """``value`` when it is an int >= 1 (not a bool, not a string) and at most ``maximum``; else a
    one-line :class:`InputError` naming ``what`` and the value. The speed model's one check of a
    whole-number argument (the CLI parses text with :func:`gpuplan.units.parse_positive_int`).
    ``maximum`` defaults to the ``dim`` range of :mod:`gpuplan.bounds` (2^31)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{what} {shown(value)}: expected a whole number >= 1")
    hi = int(BOUNDS["dim"].high) if maximum is None else maximum
    if value > hi:
        raise InputError(f"{what} {shown(value)}: at most {hi} is supported")
    return value


# --------------------------------------------------------------------------------------------------
# One matmul, exactly


@record
class MatmulCount:
    """Exact arithmetic of ``batch`` products of an M x K by a K x N matrix."""

    m: int
    k: int
    n: int
    batch: int = 1
    """Independent products (examples, or batch x heads for attention)."""
    bias: bool = False
    """A bias vector is added to each output (one more addition per output element)."""

    @property
    def output_elements(self) -> int:
        """Independent dot products: every one can be computed at the same time."""
        return self.batch * self.m * self.n

    @property
    def multiplies(self) -> int:
        """One multiply per (row, inner, column) triple: ``M*K*N``."""
        return self.batch * self.m * self.k * self.n

    @property
    def additions(self) -> int:
        """Summing K products takes K-1 additions per output (plus one for a bias)."""
        per_output = self.k - 1 + (1 if self.bias else 0)
        return self.batch * self.m * self.n * per_output

    @property
    def multiply_adds(self) -> int:
        """Multiply-accumulate steps, the unit of "512 by 512 multiplications and additions"."""
        return self.multiplies

    @property
    def flops(self) -> int:
        """The ``2*M*K*N`` convention (exact when a bias is added)."""
        return 2 * self.multiplies

    @property
    def exact_flops(self) -> int:
        """Multiplies + additions, exactly."""
        return self.multiplies + self.additions

    def to_dict(self) -> dict:
        return {"m": self.m, "k": self.k, "n": self.n, "batch": self.batch, "bias": self.bias,
                "multiplies": self.multiplies, "additions": self.additions,
                "multiply_adds": self.multiply_adds, "exact_flops": self.exact_flops,
                "flops": self.flops, "output_elements": self.output_elements}


def count_matmul(m: int, k: int, n: int, *, batch: int = 1, bias: bool = False) -> MatmulCount:
    """Exact counts of an (M x K) @ (K x N) product; every size must be a whole number >= 1."""
    return MatmulCount(m=positive_int(m, "M"), k=positive_int(k, "K"), n=positive_int(n, "N"),
                       batch=positive_int(batch, "batch"), bias=bool(bias))


# --------------------------------------------------------------------------------------------------
# Operations of a step


@record
class Op:
    """One operation of a step, ``count`` times (e.g. once per layer). Sizes are per instance."""

    name: str
    """``attn.qkv``, ``mlp.down``, ``logits.loss`` ...; backward/recompute ops share the name."""
    op_class: OpClass
    kind: OpKind
    """``matmul`` (tensor cores, weights or activations), ``attention`` (a fused attention kernel),
    ``elementwise`` (vector units: norms, activations, softmax, residuals, gathers, the optimizer)."""
    phase: Phase
    count: int
    """Instances per step (layers x ...)."""
    flops: float
    """FLOPs the kernels execute, per instance (what the step time uses)."""
    counted_flops: float
    """Matmul FLOPs by the Megatron/PaLM convention, per instance (0 for elementwise ops)."""
    bytes: float
    """Bytes read from and written to device memory, per instance (each operand once)."""
    parallel_work: int
    """Independent outputs the kernel can spread over the device (for small-work occupancy)."""
    kernels: int
    """Kernel launches per instance."""
    weight_elements: int = 0
    """Elements of the weight matrix this matmul multiplies by (0 for activation products)."""
    shape: tuple[int, int, int, int] | None = None
    """(batch, M, K, N) of a matmul."""
    group: str = ""
    """``embedding``, ``head``, or the layer group: ``dense``, ``moe``, ``sliding-window dense`` ..."""
    host_s: float | None = None
    """Host time to issue each kernel when it is not the runtime's per-phase cost (a Python loop
    issuing one tensor op at a time, a multi-tensor pass issued from C++)."""
    weight_width: float = 0.0
    """Bytes per weight element as this matmul reads them, where ``bytes / weight_elements`` is
    not that (a MoE GEMM reads only the experts it hits); 0: that ratio."""
    weight_bytes: float = 0.0
    """Bytes of weights this matmul reads per instance, its weight stream (a MoE GEMM: the
    experts it hits; a backward op: what its input gradient reads), within ``bytes``; 0: none
    (an activation product, a weight-gradient-only backward). What the skinny share of
    :func:`~.time._bandwidth` applies to."""
    narrow: bool = False
    """An attention kernel run in the step's 8-bit dtype (TE ``fp8_dpa`` under an FP8 recipe)
    rather than at the 16-bit rate beside it."""
    attention_kernel: str = ""
    """The narrow attention kernel whose published share of the FP8 peak times it
    (``fa3-fp8``: :func:`~.efficiency.attention_fraction`; ``fa3-fp8-two-level``: a measured
    ratio of the 16-bit kernel's rate, :func:`~.efficiency.fp8_attention_vs_16bit`); "": the
    generation's 16-bit one."""
    wide: bool = False
    """A block's matmul kept 16-bit under a narrow recipe (the first and last blocks in BF16:
    Megatron ``--first-last-layers-bf16``)."""
    groups: int = 1
    """A grouped GEMM (MoE experts): ``shape``'s M rows split over this many experts, each its
    own product of about M / groups rows (what the shape-dependent efficiency sees)."""
    concurrent: int = 0
    """A grouped GEMM issued as one launch per expert over a few streams: how many experts'
    products run at once, each set tiling and waving over the SMs together
    (:func:`~.efficiency.grouped_gemm_efficiency`); 0: one grouped kernel, every expert's tiles
    in one schedule."""
    launch_shares: tuple[float, ...] = ()
    """A matmul that runs as separate GEMM launches over N (unfused Q, K and V projections; gate
    and up): each launch's share of ``shape``'s N, which each tile and wave over the SMs on its
    own (:func:`~.efficiency.separate_launches_s`); (): one product of the whole N."""
    backward_kernels: int = 0
    """Kernel launches of this op's backward where they are not :func:`backward_ops`' rule for
    its kind (0: the rule): Megatron-Core's token-dispatch copies (``moe.dispatch``); the GQA
    K/V expansion (``attn.kv_expand`` of compute/step.py ``_kv_expand``), whose backward is
    autograd's ``sum_to`` over the repeats (derivatives.yaml ``expand``: ``at::sum_to(grad,
    self.sym_sizes())``), at the forward's bytes."""
    backward_bytes: float | None = None
    """Bytes of this op's backward where they are not :func:`backward_ops`' rule (None: the
    rule): Megatron-Core's eager expert epilogue (:func:`expert_epilogue_ops`)."""

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, executed FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else math.inf


@record
class StepShape:
    """What one pass processes: ``batch`` sequences of ``q_len`` new tokens attending to ``kv_len``
    keys each (prefill and training: q_len = kv_len = seq; decode: q_len = 1, kv_len = context)."""

    batch: int
    q_len: int
    kv_len: int
    decode: bool = False
    logits_tokens: int | None = None
    """Tokens whose logits are computed (None: every token; prefill keeps only the last)."""
    train: bool = False


@record
class _Bytes:
    act: int
    """Bytes of an activation element (2 for 16-bit compute, 4 for fp32)."""
    weight: float
    """Bytes per weight element of the transformer blocks' matmuls."""
    head: float
    """Bytes per element of the output head / tied embedding as the matmul reads it."""
    embed: float
    """Bytes per element of the input embedding table."""
    kv: int
    """Bytes per cached key/value element."""
    grad: int
    """Bytes per weight-gradient element."""
    expert: float = 0.0
    """Bytes per element of the routed experts' weights (gpt-oss ships them in MXFP4 beside
    16-bit attention); 0: ``weight``."""
    kv_scale: int = 0
    """Bytes of the KV cache's scales each attention core reads per layer (an FP8 cache's fp32
    k_scale and v_scale under the serving engines: 8); 0: none."""

    def __post_init__(self) -> None:
        if not self.expert:
            object.__setattr__(self, "expert", self.weight)


def _mm(name: str, cls: OpClass, *, b: int, m: int, k: int, n: int, act: int, w: float | None,
        kernels: int = 1, counted: bool = True, input_reads: int = 1,
        launch_shares: tuple[float, ...] = ()) -> Op:
    """A forward matmul; ``w`` is the weight element size (None: both operands are activations)."""
    f = 2.0 * b * m * k * n
    rhs = k * n * w if w is not None else b * k * n * act
    return Op(name=name, op_class=cls, kind="matmul", phase="forward", count=1, flops=f,
              counted_flops=f if counted else 0.0,
              bytes=input_reads * b * m * k * act + rhs + b * m * n * act,
              parallel_work=b * m * n, kernels=kernels,
              weight_elements=k * n if w is not None else 0, shape=(b, m, k, n),
              weight_bytes=k * n * w if w is not None else 0.0, launch_shares=launch_shares)


def _ew(name: str, cls: OpClass, *, elements: int, nbytes: float, flops_per: float,
        kernels: int = 1) -> Op:
    return Op(name=name, op_class=cls, kind="elementwise", phase="forward", count=1,
              flops=float(flops_per * elements), counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, int(elements)), kernels=kernels)


def mtp_projection_ops(arch: Architecture, tokens: int, act: int, weight: float) -> list[Op]:
    """The forward ops one multi-token-prediction module runs around its transformer block, over
    ``tokens`` tokens (Megatron-Core ``MultiTokenPredictionLayer._concat_embeddings``,
    megatron/core/transformer/multi_token_prediction.py at NVIDIA/Megatron-LM@d98e8a64): the
    RMSNorms of the shifted embedding (``enorm``) and of the main model's hidden state
    (``hnorm``), their concatenation to ``2H``, and ``eh_proj``, a column-parallel linear ``2H ->
    H`` run inside the FP8 context where the model trains narrow (DeepSeek-V3 report, arXiv
    2412.19437 sec. 2.2: ``M_k [RMSNorm(h); RMSNorm(Emb(t))]``). ``act``: bytes of an
    activation, ``weight``: of a block weight element as its GEMM reads it."""
    h, T = arch.hidden_size, tokens
    norm = _NORM_FLOPS["rmsnorm"]
    return [_ew("mtp.norms", "norm_elementwise", elements=2 * T * h, nbytes=2 * 2 * T * h * act,
                flops_per=norm, kernels=2),
            _ew("mtp.concat", "norm_elementwise", elements=2 * T * h,
                nbytes=2 * 2 * T * h * act, flops_per=0),
            _mm("mtp.eh_proj", "mlp", b=1, m=T, k=2 * h, n=h, act=act, w=weight)]


def causal_score_elements(q_len: int, window: int | None = None, block: int = FLASH_BLOCK) -> int:
    """Score elements a causal block-skipping attention kernel computes for one sequence and head.

    Query block i covers rows [i*b, min((i+1)*b, s)); it processes every key block from the first
    one holding a visible key up to its own diagonal block. With a sliding ``window`` a query sees
    the ``window`` most recent keys (itself included).
    """
    s, b = q_len, block
    # Closed form (bounded whatever q_len is; issue 14): full query block i spans key blocks
    # max(0, i - c) .. i, where c = ceil((window - 1) / b) (no limit without a window), so it
    # computes b * b * min(i + 1, c + 1) elements; the partial last block computes rem rows.
    m, rem = divmod(s, b)
    c = None if window is None else -(-(window - 1) // b)
    ramp = m if c is None else min(m, c + 1)
    total = b * b * (ramp * (ramp + 1) // 2 + (m - ramp) * (0 if c is None else c + 1))
    if rem:
        lo = 0 if c is None else max(0, m - c) * b
        total += rem * (s - lo)
    return total


def chunked_score_elements(q_len: int, chunk: int, block: int = FLASH_BLOCK) -> int:
    """Score elements a block-skipping kernel computes for one sequence and head under chunked
    local attention (Llama 4's ``attention_chunk_size``): a token sees the tokens of its own chunk
    up to itself, so the square is block-diagonal, each full chunk a causal square of ``chunk``
    (chunks aligned to key blocks when ``chunk`` is a multiple of ``block``)."""
    m, rem = divmod(q_len, chunk)
    return m * causal_score_elements(chunk, None, block) + causal_score_elements(rem, None, block)


def visible_keys(kv_len: int, window: int | None, chunk: int | None = None) -> int:
    """Keys the newest of ``kv_len`` tokens attends to: all of them, the ``window`` most recent
    (sliding), or those of its own chunk (chunked: position mod chunk, itself included)."""
    if chunk is not None:
        return (kv_len - 1) % chunk + 1
    return kv_len if window is None else min(kv_len, window)


def _attention_counts(shape: StepShape, window: int | None, causal: bool,
                      attention: str, chunk: int | None = None) -> tuple[float, float]:
    """(executed, counted) score elements per (sequence, head). Counted: the full square of the
    keys each query may see (s x s; s x w with a window; a square of ``chunk`` per chunk)."""
    q, kv = shape.q_len, shape.kv_len
    if shape.decode:
        keys = visible_keys(kv, window, chunk)
        return float(q * keys), float(q * keys)
    if chunk is not None:
        m, rem = divmod(q, chunk)
        counted = float(m * chunk * chunk + rem * rem)
    else:
        counted = float(q * (kv if window is None else min(kv, window)))
    if not causal or attention == "eager":
        return float(q * kv), counted  # eager computes the whole square, then masks it
    if chunk is not None:
        return float(chunked_score_elements(q, chunk)), counted
    return float(causal_score_elements(q, window)), counted


def _is_fused_qkv(arch: Architecture) -> bool:
    return arch.family in ("gpt2", "gpt_bigcode", "gpt_neox", "falcon", "phi3", "bloom", "mpt",
                           "gptj")


def _mlp_act(arch: Architecture) -> str:
    a = (arch.activation or "").lower()
    if a in ("relu2", "squared-relu", "squared_relu"):
        return "relu2"
    if "relu" in a:
        return "relu"
    if "silu" in a or "swish" in a or "swiglu" in a:  # gpt-oss's swiglu_oai: a clamped SiLU
        return "silu"
    return "gelu"


def _moe_layers(arch: Architecture) -> int:
    """Layers whose MLP is a mixture of experts: ``arch.moe_layers`` when the reader listed them,
    else all, unless the config says otherwise."""
    if not arch.is_moe:
        return 0
    if arch.moe_layers:
        return len(arch.moe_layers)
    cfg = arch.config or {}
    n = arch.num_layers
    dense_first = int(cfg.get("first_k_dense_replace") or 0)
    only_mlp = set(cfg.get("mlp_only_layers") or ())
    step = int(cfg.get("decoder_sparse_step") or 1)
    return sum(1 for i in range(n)
               if i >= dense_first and i not in only_mlp and (i + 1) % step == 0)


def _moe_layer_set(arch: Architecture) -> set[int]:
    """The MoE layers' indices (without a list: the last ones; only the count matters)."""
    if arch.is_moe and arch.moe_layers:
        return set(arch.moe_layers)
    n, n_moe = arch.num_layers, _moe_layers(arch)
    return set(range(n - n_moe, n))


def _norms_per_layer(arch: Architecture) -> int:
    if arch.family == "falcon" and arch.parallel_attn_mlp and not (arch.config or {}).get(
            "new_decoder_architecture"):
        return 1  # Falcon-7B: one LayerNorm feeds both branches
    return 2


@record
class RunForm:
    """How the engine's code runs the families' mechanisms (what the step's engine decides).

    ``mla``: Multi-head Latent Attention as ``naive`` (kv_b_proj expands the new tokens' latents
    into per-head keys and values, then multi-head attention with qk_head_dim scores and
    v_head_dim values: prefill and training everywhere), ``expand`` (transformers' decode:
    DeepseekV3Attention.expand_kv runs kv_b_proj over the whole cached latent every step) or
    ``absorbed`` (vLLM / SGLang / TensorRT-LLM decode: kv_b_proj's key half is absorbed into the
    query and its value half into the output, and attention runs MQA-like over the latent).
    ``all_experts``: every expert computes every token (transformers' Llama4TextMoe repeats the
    hidden states for all experts). ``ep``: expert-parallel ranks the experts are spread over.
    ``grouped_experts``: the experts run as one grouped GEMM per projection (a fixed handful of
    kernels per MoE layer: permute, the gate-up GEMM, the activation, the down GEMM, unpermute)
    rather than one GEMM per expert hit (:func:`grouped_experts`). ``capacity_factor``: each
    expert runs ``ceil(T x top-k / E x cf)`` rows, dropped and padded to it (Megatron-Core's
    drop-and-pad; None: dropless). ``expert_gemm_loop``: the grouped GEMM is issued as one GEMM
    launch per local expert (:data:`EXPERT_GEMM_LOOP`), not one kernel."""

    mla: Literal["naive", "expand", "absorbed"] = "naive"
    all_experts: bool = False
    ep: int = 1
    grouped_experts: bool = False
    capacity_factor: float | None = None
    expert_gemm_loop: bool = False
    dispatch_copies: bool = False
    """The token dispatcher's permute, sort-by-expert and their inverses run as kernels of
    their own around the experts, the expert-parallel all-to-alls launched between them
    (:data:`ALLTOALL_DISPATCH`, :func:`dispatch_op`)."""
    dispatcher: str = "alltoall"
    """Which of Megatron-Core's dispatchers does so: ``alltoall``, ``deepep``, ``hybridep``
    (:func:`dispatch_op`)."""
    split_launches: bool = True
    """The engine's model code runs a layer's unfused projections as separate nn.Linear GEMMs,
    each waving over the SMs on its own (:attr:`Op.launch_shares`); False: it fuses them
    (:data:`SEPARATE_PROJECTIONS`)."""
    one_launch: bool = False
    """With ``split_launches`` False, the fused projection is also counted as the one launch
    that reads its input once (:func:`one_launch_product`; :data:`ONE_LAUNCH_PROJECTIONS`)."""
    sinks: Literal["op", "kernel", "rescale"] = "op"
    """How a fused attention applies learned sinks (gpt-oss; eager concatenates them to the
    scores whatever this says): ``kernel``, an argument of the attention kernel that joins each
    query row's softmax denominator (one more element a row, no kernel or tensor of its own:
    :data:`SINKS_IN_KERNEL`); ``rescale``, the kernel's output rescaled afterwards by
    ``sigmoid(lse - sink)`` (torchtitan: an elementwise pass over the output and the
    log-sum-exp); ``op``, one small softmax-side kernel over the rows (an engine whose form is
    unknown)."""
    unfused_rope: bool = False
    """Megatron-Core's unfused rotary embedding (:data:`MCORE_UNFUSED_ROPE`,
    :func:`mcore_unfused_rope`)."""
    expert_epilogue: bool = False
    """Megatron-Core's unfused expert epilogue (:data:`MCORE_EXPERT_EPILOGUE`): a clamped GLU's
    clamps and concatenation before its fused activation, and a biased fc2's per-expert bias
    loop (:func:`expert_epilogue_ops`)."""


#: Engines that run transformers' own model code (Llama4TextMoe computes every expert).
TRANSFORMERS_CODE = ("transformers", "deepspeed", "fsdp2")
#: Engines whose fused attention kernel takes gpt-oss's sinks as an argument (models/_types.py
#: FUSED_ATTENTION has each source): vLLM's FlashAttention 3 ``s_aux`` and Triton backend,
#: SGLang's fa3 / triton / trtllm_mha, TensorRT-LLM's ``attention_sinks``, Transformer Engine's
#: ``softmax_type="learnable"`` under Megatron. torchtitan rescales the output instead
#: (torchtitan/models/gpt_oss/model.py @b5bcd76c ``apply_attention_sink_rescale``).
SINKS_IN_KERNEL = ("vllm", "sglang", "trt-llm", "megatron")
SINKS_RESCALED = ("torchtitan",)
#: Engines whose model code keeps Q, K and V (and gate and up) as separate nn.Linear layers:
#: transformers' models (BertSelfAttention query/key/value, LlamaAttention q_proj/k_proj/v_proj,
#: LlamaMLP gate_proj/up_proj), under DeepSpeed and FSDP2 too; torchtune (q_proj/k_proj/v_proj,
#: w1/w3); torchtitan (wq/wk/wv, w1/w3). Megatron-Core fuses them (linear_qkv, linear_fc1), as
#: vLLM, SGLang and TensorRT-LLM do (QKVParallelLinear, MergedColumnParallelLinear) and gpt-fast
#: its QKV (wqkv; its w1/w3 stay apart, taken fused here).
SEPARATE_PROJECTIONS = (*TRANSFORMERS_CODE, "torchtune", "torchtitan")
#: Engines whose fused Q/K/V and gate/up projections are counted as one launch reading the input
#: once (:func:`one_launch_product`): Megatron-Core, whose code was read for it (issue 30). vLLM,
#: SGLang, TensorRT-LLM and gpt-fast fuse the same way but keep the separate GEMMs' launches and
#: input reads here for now (counted once they would move their serving rows; not yet checked).
ONE_LAUNCH_PROJECTIONS = ("megatron",)
#: Serving engines whose MLA decode is the absorbed form: defined in engines.profiles (the
#: memory plan reads it too), kept here under its name
MLA_ABSORBING = _MLA_ABSORBING


#: Engines whose MoE layers are fused / grouped kernels on every GPU they run on: vLLM's and
#: SGLang's fused_moe (Triton; vllm/model_executor/layers/fused_moe), TensorRT-LLM's CUTLASS MoE
#: plugin, Megatron-Core's grouped GEMM (Transformer Engine's GroupedLinear; the published
#: recipes set ``--moe-grouped-gemm``, as gpuplan's Megatron export does).
FUSED_MOE = ("vllm", "sglang", "trt-llm", "megatron")
#: Chip generations where ``torch._grouped_mm`` has its CUTLASS bf16 kernel (SM90 and SM100:
#: aten/src/ATen/native/cuda/GroupedBlas.cpp; elsewhere it falls back to one mm per group).
#: transformers 5 (``experts_implementation="grouped_mm"``, its default: modeling_utils
#: ``get_correct_experts_implementation``) and torchtitan (``use_grouped_mm``) call it.
GROUPED_MM_ARCHS = ("Hopper", "Blackwell")
#: Engines whose grouped expert GEMM launches one cuBLAS GEMM per local expert: Megatron-Core's
#: TEGroupedMLP runs Transformer Engine's GroupedLinear, whose general_grouped_gemm calls
#: nvte_multi_stream_cublas_gemm, a C++ loop of one cublas_gemm per split over round-robin
#: streams (transformer_engine/common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm at
#: NVIDIA/TransformerEngine@fe8fad59c9add7f8aa841fed2a0b4087b931856f, 2026-01-13, the TE of the
#: Megatron-Bridge 25.11 / 26.02 containers' era; TE's one-kernel grouped-tensor path came in
#: mid 2026). The backward's dgrad and wgrad loop the same way (backward_ops doubles kernels).
EXPERT_GEMM_LOOP = ("megatron",)
#: Streams Transformer Engine's grouped GEMM spreads its per-expert cuBLAS launches over:
#: ``multi_stream_cublas_gemm`` issues GEMM i on compute stream ``i % num_streams`` and
#: ``get_num_compute_streams`` returns the constant 4 (transformer_engine/common/gemm/
#: cublaslt_gemm.cu lines 948-1001, common/util/multi_stream.cpp lines 52-55 at
#: NVIDIA/TransformerEngine@fe8fad59c9add7f8aa841fed2a0b4087b931856f). GroupedLinear reaches it
#: through ``general_grouped_gemm`` -> ``nvte_multi_tensor_gemm``, which takes the cuBLAS path
#: on every GPU unless NVTE_USE_CUTLASS_GROUPED_GEMM is set on Hopper (same file, lines
#: 1030-1050); no Megatron-Bridge performance script sets it (scripts/ at v0.3.0). So at most
#: four experts' GEMMs share the SMs at a time: each set of four tiles and waves alone.
TE_GEMM_STREAMS = 4
#: Engines whose MoE layer runs Megatron-Core's MoEAlltoAllTokenDispatcher (gpuplan's Megatron
#: export writes --moe-token-dispatcher-type alltoall) with --moe-permute-fusion, as the
#: published Qwen3 and DeepSeek-V3 recipes set it (Megatron-Bridge qwen_provider.py
#: Qwen3MoEModelProvider moe_permute_fusion True @v0.3.0): :func:`dispatch_op`.
ALLTOALL_DISPATCH = ("megatron",)
#: Engines whose MoE experts run Megatron-Core's TEGroupedMLP epilogue in eager PyTorch
#: (megatron/core/transformer/moe/experts.py and fusions/fused_bias_geglu.py, read at
#: NVIDIA/Megatron-LM@55ac7082, d7288711, 2edffadb and d0b3b775: the Megatron-Bridge
#: v0.3.1, v0.4.0, v0.4.2 and v0.5.0 submodules, the 26.02.01-26.06 containers):
#:
#: * ``weighted_bias_quick_geglu_impl`` with ``activation_func_clamp_value`` set (gpt-oss:
#:   Megatron-Bridge's GPTOSSBridge sets 7.0, its swiglu_limit) clamps the two halves of the
#:   fc1 output and ``torch.cat``\ s them back *before* the torch.compile'd fused activation:
#:   three eager kernels over ``R x 2 ie``; inside ``bias_act_func``, so ``moe_act`` recompute
#:   re-runs them.
#: * ``linear_fc2`` is built with ``skip_bias_add=True`` and its bias (``add_bias_linear``:
#:   gpt-oss's expert biases) is added by ``TEGroupedMLP._apply_bias``: a Python loop over the
#:   local experts of ``t + b * p`` on each expert's rows, then ``torch.cat`` and ``.to``.
#:
#: TE's fused CuTe-DSL grouped MLP (``NVTE_CUTEDSL_FUSED_GROUPED_MLP``, MXFP8 on SM100, from
#: TE 2.16) replaces both; the rows that set it run whole-iteration CUDA graphs, which no Job
#: expresses, so it is not modelled.
MCORE_EXPERT_EPILOGUE = ("megatron",)
#: engine -> the families whose rotary embedding it runs unfused. Megatron-Bridge's performance
#: scripts set ``apply_rope_fusion = True`` for every config (scripts/performance/utils/
#: overrides.py at v0.4.0), but ``GPTModelProvider.provide`` turns it off where
#: ``fusions.validate_rope_fusion_compatibility`` fails, which it does for any
#: ``position_embedding_type`` other than ``"rope"`` (src/megatron/bridge/utils/fusions.py at
#: v0.3.1-v0.5.0) -- and GPTOSSBridge sets ``"yarn"`` (models/gpt_oss/gpt_oss_bridge.py).
#: DeepSeek-V3's MLA and Qwen3 keep ``"rope"`` (DeepSeek's YaRN is MLA's ``rope_type``).
MCORE_UNFUSED_ROPE: Mapping[str, tuple[str, ...]] = MappingProxyType({"megatron": ("gpt_oss",)})


def grouped_experts(engine: str, gpu_arch: str = "", act_bytes: float = 2) -> bool:
    """Whether ``engine`` runs the experts as grouped kernels on a ``gpu_arch`` chip with
    ``act_bytes``-byte activations (bf16/fp16 are 2): the serving engines and Megatron always;
    the torch-native engines only where torch's grouped GEMM has a kernel (Hopper, Blackwell;
    bf16), else one GEMM per expert hit as before."""
    if engine in FUSED_MOE:
        return True
    return gpu_arch in GROUPED_MM_ARCHS and act_bytes == 2


def run_form(arch: Architecture | None, engine: str, *, decode: bool, ep: int = 1,
             gpu_arch: str = "", act_bytes: float = 2,
             capacity_factor: float | None = None, dispatcher: str = "alltoall") -> RunForm:
    """How ``engine`` (a resolved engine name) runs ``arch``'s mechanisms in a decode step or in
    prefill / training (:class:`RunForm`) on a ``gpu_arch`` chip (``""``: unknown, no grouped
    GEMM for the torch-native engines)."""
    if arch is None:
        return RunForm(ep=ep)
    mla = "naive"
    if arch.mla is not None and decode:
        mla = "absorbed" if engine in MLA_ABSORBING else "expand"
    all_experts = arch.family == "llama4_text" and arch.is_moe and engine in TRANSFORMERS_CODE
    return RunForm(mla=mla, all_experts=all_experts, ep=ep,
                   grouped_experts=(arch.is_moe and not all_experts
                                    and grouped_experts(engine, gpu_arch, act_bytes)),
                   expert_gemm_loop=arch.is_moe and engine in EXPERT_GEMM_LOOP,
                   dispatch_copies=arch.is_moe and not all_experts
                   and engine in ALLTOALL_DISPATCH, dispatcher=dispatcher,
                   capacity_factor=capacity_factor if arch.is_moe and not decode else None,
                   split_launches=engine in SEPARATE_PROJECTIONS,
                   one_launch=engine in ONE_LAUNCH_PROJECTIONS,
                   sinks="kernel" if engine in SINKS_IN_KERNEL else
                   "rescale" if engine in SINKS_RESCALED else "op",
                   expert_epilogue=arch.is_moe and engine in MCORE_EXPERT_EPILOGUE,
                   unfused_rope=arch.family in MCORE_UNFUSED_ROPE.get(engine, ()))


def form_notes(arch: Architecture | None, form: RunForm, engine: str) -> tuple[str, ...]:
    """What the engine's form of the mechanisms means for the FLOPs and the time, in words."""
    if arch is None:
        return ()
    out = []
    if form.all_experts:
        out.append(f"MoE under {engine}: transformers' Llama4TextMoe runs every one of the "
                   f"{arch.num_experts} experts on every token (hidden states repeated per "
                   f"expert, scaled by the router's scores), so the experts' FLOPs are "
                   f"{arch.num_experts // max(1, arch.experts_per_token)}x the routed top-"
                   f"{arch.experts_per_token}; vLLM and SGLang route top-"
                   f"{arch.experts_per_token} (--engine vllm)")
    if arch.mla is not None and form.mla == "expand":
        out.append(f"MLA decode under {engine}: kv_b_proj re-expands the whole cached latent "
                   "into per-head keys and values every step (DeepseekV3Attention.expand_kv); "
                   "vLLM / SGLang absorb it into the query and output (--engine vllm)")
    elif arch.mla is not None and form.mla == "absorbed":
        out.append(f"MLA decode under {engine}: the absorbed form, MQA over the "
                   f"{arch.mla.kv_lora_rank} + {arch.mla.qk_rope_head_dim} latent per token")
    return tuple(out)


@record
class _Kind:
    """What differs between a model's layers: the attention's reach, rotary or not, experts."""

    window: int | None = None
    chunk: int | None = None
    rotary: bool = True
    moe: bool = False


def _layer_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *, attention: Attention,
               kind: _Kind, form: RunForm) -> list[Op]:
    """One transformer layer's forward: norm, attention, residual, (norm), MLP or experts,
    residual."""
    T = shape.batch * shape.q_len
    h, a = arch.hidden_size, nb.act
    nflops = _NORM_FLOPS.get(arch.norm, 7)

    def norm(name: str) -> Op:
        return _ew(name, "norm_elementwise", elements=T * h, nbytes=2 * T * h * a, flops_per=nflops)

    def dropout(name: str) -> list[Op]:
        # training with hidden dropout: the fused CUDA dropout reads the branch's output, writes
        # it and a 1-byte keep mask (as the memory model's activations keep it)
        if not (shape.train and arch.hidden_dropout > 0):
            return []
        return [_ew(name, "norm_elementwise", elements=T * h, nbytes=T * h * (2 * a + 1),
                    flops_per=1)]

    attn = (_mla_attention_ops(arch, shape, nb, attention=attention, form=form.mla)
            if arch.mla is not None else
            _attention_ops(arch, shape, nb, attention=attention, kind=kind, sinks=form.sinks,
                           unfused_rope=form.unfused_rope))
    ops = [norm("attn.norm"), *attn]
    ops.extend(dropout("attn.dropout"))
    ops.append(_ew("attn.residual", "norm_elementwise", elements=T * h, nbytes=3 * T * h * a,
                   flops_per=1))
    if _norms_per_layer(arch) == 2:
        ops.append(norm("mlp.norm"))
    ops.extend(_moe_ops(arch, T, nb, form) if kind.moe else _mlp_ops(arch, T, nb))
    ops.extend(dropout("mlp.dropout"))
    ops.append(_ew("mlp.residual", "norm_elementwise", elements=T * h, nbytes=3 * T * h * a,
                   flops_per=1))
    if not form.split_launches:  # the engine fuses the projections: one product each
        ops = [(one_launch_product(o, a) if form.one_launch else replace(o, launch_shares=()))
               if o.launch_shares else o for o in ops]
    return ops


def one_launch_product(op: Op, act: int) -> Op:
    """A projection built as separate GEMMs (Q/K/V, gate/up: ``op.kernels`` of them, each
    reading the input) run as the one fused GEMM an engine outside
    :data:`SEPARATE_PROJECTIONS` launches: one launch, the input read once (Megatron-Core's
    linear_qkv and linear_fc1: megatron/core/transformer/attention.py SelfAttention and
    mlp.py MLP at NVIDIA/Megatron-LM@b0cc2706 build one ColumnParallelLinear of the
    concatenated outputs; vLLM's QKVParallelLinear / MergedColumnParallelLinear alike)."""
    b, m, k, _ = op.shape
    return replace(op, launch_shares=(), kernels=1,
                   bytes=op.bytes - (op.kernels - 1) * b * m * k * act)


def _qk_norm_ops(arch: Architecture, T: int, q_el: int, k_el: int, a: int,
                 rotary: bool) -> list[Op]:
    """QK-norm, elementwise over every query and key head (Qwen3, Gemma 3, GLM-4.5's weighted
    RMSNorm; OLMo 2's over the whole projections, the same elements; Llama 4's unweighted L2
    norm, on its rotary layers only: Llama4TextAttention builds qk_norm when ``use_qk_norm and
    use_rope``)."""
    if arch.qk_norm == "none" or (arch.qk_norm == "l2" and not rotary):
        return []
    n = T * (q_el + k_el)
    return [_ew("attn.qk_norm", "norm_elementwise", elements=n, nbytes=2 * n * a,
                flops_per=_NORM_FLOPS["rmsnorm"] - (1 if arch.qk_norm == "l2" else 0),
                kernels=2)]


def _sink_ops(arch: Architecture, shape: StepShape, a: int, attention: str,
              sinks: str = "op") -> list[Op]:
    """gpt-oss's learned sinks: one logit per head joins each query's softmax denominator.
    transformers' eager attention concatenates the sink column to the scores and slices it off
    after the softmax (two copies of the materialized scores: modeling_gpt_oss.
    eager_attention_forward). A fused kernel that takes them (``sinks`` ``kernel``: one more
    element a row, inside ``attn.core``, :func:`_attention_ops`) adds no op; torchtitan's
    rescale (``rescale``) reads the output and the fp32 log-sum-exp and writes the output
    (``out * sigmoid(lse - sinks)``); otherwise one small kernel over the rows (``op``)."""
    if not arch.attention_sinks:
        return []
    rows = shape.batch * arch.num_heads * shape.q_len
    if attention == "eager":
        n = rows * (shape.kv_len + 1)
        return [_ew("attn.sinks", "norm_elementwise", elements=n, nbytes=4 * n * a, flops_per=1,
                    kernels=2)]
    if sinks == "kernel":
        return []
    if sinks == "rescale":
        n = rows * arch.head_dim
        return [_ew("attn.sinks", "norm_elementwise", elements=n, nbytes=2 * n * a + 4 * rows,
                    flops_per=1)]
    return [_ew("attn.sinks", "norm_elementwise", elements=rows, nbytes=2 * rows * 4,
                flops_per=_SOFTMAX_FLOPS)]


def _attention_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *, attention: Attention,
                   kind: _Kind, sinks: str = "op", unfused_rope: bool = False) -> list[Op]:
    """The QKV projection, QK-norm, rotary (Megatron-Core's unfused form where
    ``unfused_rope``: :func:`mcore_unfused_rope`), the attention core (fused, or eager
    scores/softmax/values) and the output projection."""
    B, T = shape.batch, shape.batch * shape.q_len
    h, d = arch.hidden_size, arch.head_dim
    H, Hkv = arch.num_heads, arch.num_kv_heads
    nq, nkv = H * d, Hkv * d
    a, w = nb.act, nb.weight
    fused = _is_fused_qkv(arch)
    ops = [_mm("attn.qkv", "attention", b=1, m=T, k=h, n=nq + 2 * nkv, act=a, w=w,
               kernels=1 if fused else 3, input_reads=1 if fused else 3)]
    if not fused:  # three nn.Linear (BertSelfAttention query/key/value, q_proj/k_proj/v_proj)
        n = nq + 2 * nkv
        ops[0] = replace(ops[0], launch_shares=(nq / n, nkv / n, nkv / n))
    ops.extend(_qk_norm_ops(arch, T, nq, nkv, a, kind.rotary))
    if arch.position == "rotary" and kind.rotary:
        rot = max(1, round(T * (nq + nkv) * arch.rotary_fraction))  # GLM-4.5 rotates half
        rope = _ew("attn.rotary", "norm_elementwise", elements=rot, nbytes=2 * rot * a,
                   flops_per=3, kernels=2)
        ops.append(mcore_unfused_rope(rope, a) if unfused_rope else rope)
    executed, counted = _attention_counts(shape, kind.window, arch.kind == "decoder", attention,
                                          kind.chunk)
    kv_src = nb.kv if shape.decode else a  # decode reads the cache; prefill the fresh K and V
    # decode reads the keys the newest token sees (a window or its chunk at most)
    keys = visible_keys(shape.kv_len, kind.window, kind.chunk) if shape.decode else shape.kv_len
    kv_read = B * keys * 2 * nkv * kv_src
    kv_write = B * shape.q_len * 2 * nkv * nb.kv if not shape.train else 0  # inference fills a cache
    if attention == "sdpa":
        f_exec = 4.0 * B * H * executed * d
        if arch.attention_sinks and sinks == "kernel":  # the sink: one more element a row
            f_exec += float(B * H * shape.q_len * _SOFTMAX_FLOPS)
        ops.append(Op(name="attn.core", op_class="attention", kind="attention", phase="forward",
                      count=1, flops=f_exec, counted_flops=4.0 * B * H * counted * d,
                      bytes=2 * T * nq * a + kv_read + kv_write + (B * H * shape.q_len * 4
                                                                   if shape.train else 0)
                      + nb.kv_scale,
                      parallel_work=max(1, int(B * H * executed)), kernels=1,
                      shape=(B * H, shape.q_len, d, shape.kv_len)))
    else:
        seen = replace(shape, kv_len=keys)  # a sliding cache holds the window (decode)
        ops.extend(_eager_core_ops(arch, seen, nb, executed=executed, counted=counted,
                                   kv_read=kv_read, kv_write=kv_write))
    ops.extend(_sink_ops(arch, shape, a, attention, sinks))
    ops.append(_mm("attn.out", "attention", b=1, m=T, k=nq, n=h, act=a, w=w))
    return ops


def _mla_attention_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *,
                       attention: Attention, form: str) -> list[Op]:
    """Multi-head Latent Attention (DeepSeek-V2/V3, Kimi-K2) as its modules run: the query
    (q_a_proj, q_a_layernorm, q_b_proj; or q_proj), kv_a_proj_with_mqa (the latent and the shared
    rotary key), kv_a_layernorm, rotary on the rope dims, then by ``form`` (:class:`RunForm`):

    * ``naive`` / ``expand``: kv_b_proj (kv_lora_rank -> heads x (qk_nope + v)) over the new
      tokens (naive) or the whole cache (expand: transformers' decode), the per-head keys
      assembled (expand_kv's copies), attention with qk_head_dim scores and v_head_dim values:
      per query and key 2 x heads x (qk_head_dim + v_head_dim) FLOPs;
    * ``absorbed``: q_nope times W_UK per head (heads x qk_nope x kv_lora_rank), attention over
      the cached latent as one shared KV head -- scores over kv_lora_rank + qk_rope, values of
      kv_lora_rank: 2 x heads x (2 kv_lora_rank + qk_rope) per query and key -- then W_UV per head
      (heads x kv_lora_rank x v) before o_proj (DeepSeek-V2 report sec. 2.1.2-2.1.3, "W^UK can be
      absorbed into W^UQ, and W^UV into W^O"; vLLM's MLA backend docstring, which computes decode
      this way as MQA of head size kv_lora_rank + qk_rope over one latent head; FlashMLA's
      d_qk 576 / d_v 512 kernel for DeepSeek-V3's 512 + 64).

    The cache holds ``kv_lora_rank + qk_rope_head_dim`` per token and layer: what decode reads."""
    m = arch.mla
    assert m is not None
    B, T, q, kv = shape.batch, shape.batch * shape.q_len, shape.q_len, shape.kv_len
    h, H, a, w = arch.hidden_size, arch.num_heads, nb.act, nb.weight
    c, dr, dn, dv, dq = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim, \
        m.qk_head_dim
    ops: list[Op] = []
    if m.q_lora_rank:
        ops += [_mm("attn.q_a", "attention", b=1, m=T, k=h, n=m.q_lora_rank, act=a, w=w),
                _ew("attn.q_a_norm", "norm_elementwise", elements=T * m.q_lora_rank,
                    nbytes=2 * T * m.q_lora_rank * a, flops_per=_NORM_FLOPS["rmsnorm"]),
                _mm("attn.q_b", "attention", b=1, m=T, k=m.q_lora_rank, n=H * dq, act=a, w=w)]
    else:
        ops.append(_mm("attn.q", "attention", b=1, m=T, k=h, n=H * dq, act=a, w=w))
    ops += [_mm("attn.kv_a", "attention", b=1, m=T, k=h, n=c + dr, act=a, w=w),
            _ew("attn.kv_a_norm", "norm_elementwise", elements=T * c, nbytes=2 * T * c * a,
                flops_per=_NORM_FLOPS["rmsnorm"]),
            _ew("attn.rotary", "norm_elementwise", elements=T * (H + 1) * dr,
                nbytes=2 * T * (H + 1) * dr * a, flops_per=3, kernels=2)]
    executed, counted = _attention_counts(shape, None, True, attention)
    latent_read = B * kv * (c + dr) * (nb.kv if shape.decode else a)
    cache_write = B * q * (c + dr) * nb.kv if not shape.train else 0
    if form == "absorbed":
        ops += _mla_absorbed_core(arch, shape, nb, executed=executed, counted=counted,
                                  latent_read=latent_read, cache_write=cache_write)
    else:
        rows = B * (kv if form == "expand" else q)  # the latents kv_b_proj expands
        kvb = _mm("attn.kv_b", "attention", b=1, m=rows, k=c, n=H * (dn + dv), act=a, w=w)
        if shape.decode:  # it reads the cached latents
            kvb = replace(kvb, bytes=kvb.bytes - rows * c * a + latent_read)
        keys = rows * H * dq
        ops += [kvb, _ew("attn.kv_expand", "norm_elementwise", elements=keys,
                         nbytes=2 * keys * a, flops_per=0, kernels=2)]
        ops += _mla_naive_core(arch, shape, nb, attention, executed=executed, counted=counted,
                               cache_write=cache_write)
    ops.append(_mm("attn.out", "attention", b=1, m=T, k=H * dv, n=h, act=a, w=w))
    return ops


def _mla_naive_core(arch: Architecture, shape: StepShape, nb: _Bytes, attention: Attention, *,
                    executed: float, counted: float, cache_write: float) -> list[Op]:
    """Multi-head attention over expanded keys (qk_head_dim) and values (v_head_dim)."""
    m = arch.mla
    assert m is not None
    B, T, q, kv = shape.batch, shape.batch * shape.q_len, shape.q_len, shape.kv_len
    H, a, dq, dv = arch.num_heads, nb.act, m.qk_head_dim, m.v_head_dim
    if attention == "sdpa":
        kv_read = B * kv * H * (dq + dv) * a
        return [Op(name="attn.core", op_class="attention", kind="attention", phase="forward",
                   count=1, flops=2.0 * B * H * executed * (dq + dv),
                   counted_flops=2.0 * B * H * counted * (dq + dv),
                   bytes=T * H * (dq + dv) * a + kv_read + cache_write
                   + (B * H * q * 4 if shape.train else 0),
                   parallel_work=max(1, int(B * H * executed)), kernels=1,
                   shape=(B * H, q, dq, kv))]
    scores = B * H * q * kv
    frac = counted / executed if executed else 1.0
    sc = _mm("attn.scores", "attention", b=B * H, m=q, k=dq, n=kv, act=a, w=None)
    sc = replace(sc, counted_flops=sc.flops * frac, bytes=sc.bytes + cache_write)
    av = _mm("attn.values", "attention", b=B * H, m=q, k=kv, n=dv, act=a, w=None)
    av = replace(av, counted_flops=av.flops * frac)
    dropout = shape.train and arch.attention_dropout > 0
    return [sc, _ew("attn.scale_mask", "norm_elementwise", elements=scores,
                    nbytes=4 * scores * a, flops_per=2, kernels=2),
            _ew("attn.softmax", "norm_elementwise", elements=scores,
                nbytes=2 * scores * a * (2 if dropout else 1), flops_per=_SOFTMAX_FLOPS,
                kernels=3 if dropout else 2), av]


def _mla_absorbed_core(arch: Architecture, shape: StepShape, nb: _Bytes, *, executed: float,
                       counted: float, latent_read: float, cache_write: float) -> list[Op]:
    """The absorbed form: W_UK into the query, MQA over the latent, W_UV after it (a serving
    engine's fused MLA kernel: FlashMLA, FlashInfer MLA, Triton MLA decode)."""
    m = arch.mla
    assert m is not None
    B, T, q, kv = shape.batch, shape.batch * shape.q_len, shape.q_len, shape.kv_len
    H, a, w = arch.num_heads, nb.act, nb.weight
    c, dr, dn, dv = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
    uk = _mm("attn.q_absorb", "attention", b=H, m=T, k=dn, n=c, act=a, w=w)
    uk = replace(uk, bytes=H * T * dn * a + H * dn * c * w + H * T * c * a,
                 weight_elements=H * dn * c, weight_bytes=H * dn * c * w)
    core = Op(name="attn.core", op_class="attention", kind="attention", phase="forward", count=1,
              flops=2.0 * B * H * executed * (2 * c + dr),
              counted_flops=2.0 * B * H * counted * (2 * c + dr),
              bytes=T * H * (c + dr) * a + latent_read + cache_write + T * H * c * a,
              parallel_work=max(1, int(B * H * executed)), kernels=1,
              shape=(B * H, q, c + dr, kv))
    uv = _mm("attn.v_up", "attention", b=H, m=T, k=c, n=dv, act=a, w=w)
    uv = replace(uv, bytes=H * T * c * a + H * c * dv * w + H * T * dv * a,
                 weight_elements=H * c * dv, weight_bytes=H * c * dv * w)
    return [uk, core, uv]


def _eager_core_ops(arch: Architecture, shape: StepShape, nb: _Bytes, *, executed: float,
                    counted: float, kv_read: float, kv_write: float) -> list[Op]:
    """Eager attention: the s x s scores are materialized, softmaxed (and dropped out), then
    multiplied by V; K and V are expanded to every query head (repeat_kv) first."""
    B, T, d = shape.batch, shape.batch * shape.q_len, arch.head_dim
    H, Hkv = arch.num_heads, arch.num_kv_heads
    nq, a = H * d, nb.act
    scores = B * H * shape.q_len * shape.kv_len  # materialized s x s per head
    frac = counted / executed if executed else 1.0
    sc = _mm("attn.scores", "attention", b=B * H, m=shape.q_len, k=d, n=shape.kv_len, act=a,
             w=None)
    sc = replace(sc, counted_flops=sc.flops * frac,
                 bytes=T * nq * a + kv_read * H / max(Hkv, 1) / 2 + scores * a + kv_write)
    # transformers' eager attention (BertSelfAttention: / sqrt(d), + attention_mask; Llama's
    # eager_attention_forward: * scaling, + causal_mask) scales and masks the materialized scores
    # in two more kernels, each reading and writing them
    smk = _ew("attn.scale_mask", "norm_elementwise", elements=scores, nbytes=4 * scores * a,
              flops_per=2, kernels=2)
    dropout = shape.train and arch.attention_dropout > 0
    sm = _ew("attn.softmax", "norm_elementwise", elements=scores,
             nbytes=2 * scores * a * (2 if dropout else 1), flops_per=_SOFTMAX_FLOPS,
             kernels=3 if dropout else 2)
    av = _mm("attn.values", "attention", b=B * H, m=shape.q_len, k=shape.kv_len, n=d, act=a,
             w=None)
    av = replace(av, counted_flops=av.flops * frac,
                 bytes=scores * a + kv_read * H / max(Hkv, 1) / 2 + T * nq * a)
    return [sc, smk, sm, av]


def expert_tokens(T: int, arch: Architecture, form: RunForm) -> tuple[int, float, float]:
    """(local experts, expected experts hit, token-expert rows each hit expert runs) of one MoE
    layer on one expert-parallel rank that holds ``T`` tokens. Under EP every rank dispatches its
    ``T x top-k`` assignments over all ``E`` experts and holds ``E / EP`` of them, so with uniform
    routing it runs ``T x top-k`` rows (balanced) over its experts, each getting
    ``T x EP x top-k / E`` -- EP makes each expert's GEMM taller, not the rank's work larger.
    Expected experts hit: ``E_local x (1 - (1 - k/E)^(T x EP))`` (uniform routing).
    ``form.all_experts``: every expert runs every token (transformers' Llama 4).
    ``form.capacity_factor``: every local expert runs its padded capacity from each of the EP
    ranks, ``capacity x EP`` rows (:func:`~gpuplan.parallel.moe_ep.expert_capacity`)."""
    E, k = arch.num_experts, max(1, arch.experts_per_token)
    ep = max(1, form.ep)
    local = max(1, E // ep)
    if form.all_experts:
        return local, float(local), float(T)
    if form.capacity_factor is not None:
        return local, float(local), float(expert_capacity(T, E, k, form.capacity_factor) * ep)
    touched = local * (1.0 - (1.0 - k / E) ** (T * ep))
    return local, touched, T * k / touched if touched else 0.0


def dispatch_op(T: int, R: int, h: int, E: int, act: int, *, ep: int, local: int,
                dispatcher: str = "alltoall") -> Op:
    """The copies and launches Megatron-Core's token ``dispatcher`` adds around the experts of
    one MoE layer on one rank holding ``T`` tokens that send ``R`` token-expert rows of ``h``
    elements (``act`` bytes each) over ``E`` experts, ``local`` of them here, under expert
    parallelism ``ep`` -- beyond the router, the experts' GEMMs, their activation and the
    combine, which are their own ops. The alltoall dispatcher, counted from the code with
    ``moe_permute_fusion``
    (NVIDIA/Megatron-LM@b0cc2706ddc60d2aefd5fff346445b5c013036a8 token_dispatcher.py
    dispatch_preprocess / token_dispatch / dispatch_postprocess / combine_preprocess /
    token_combine; the fused kernels of NVIDIA/TransformerEngine@fe8fad59c transformer_engine/
    pytorch/triton/permutation.py):

    * ``permute``: ``make_row_id_map``'s three passes (read the ``T x E`` routing map, write the
      int32 row map, taken at 9 bytes an entry) and ``_permute_kernel`` (read ``T x h``, write
      ``R x h``) -- 4 launches; its backward one ``_unpermute_kernel`` over the same bytes.
    * under EP > 1: the dispatch ``all_to_all`` of the tokens and of the probabilities and the
      combine's (3 launches, each its backward's too; their bytes are the layout's EP
      exchange), and with several local experts ``sort_chunks_by_idxs`` into expert order and
      back (``_make_chunk_sort_map_kernel`` + ``_sort_chunks_by_map_kernel`` each way, read and
      write ``R x h`` each: 4 launches; backward one sort each way).

    The unpermute back to ``[T, h]`` is ``moe.combine``. The backward moves the forward's bytes
    (a copy's gradient is the inverse copy), its launches in :attr:`Op.backward_kernels`. Not
    counted here: the FP8 recipes' per-expert row padding (``_expert_padding_op`` in
    compute/step.py).

    The flex dispatcher (token_dispatcher.py MoEFlexTokenDispatcher and fused_a2a.py at the
    same commit) over ``deepep``: ``setup_metadata``'s top-k (1), DeepEP's
    ``get_dispatch_layout`` (1) and ``dispatch`` (notify and dispatch, 2), the received rows
    multi-hot mapped by ``_indices_to_multihot`` (unfused without Megatron's experimental flag,
    which the Qwen3 performance configs leave off: two ``zeros``, the mask, two boolean-mask
    selections at a nonzero and a gather each, ``arange``, a sum and ``repeat_interleave``, two
    index-puts and the ``bool`` cast, 13), ``tokens_per_expert.sum()`` (1), TE's permute (row
    map 3 and the permute 1, ``R x h`` read and written) and DeepEP's ``combine`` (1): 23
    launches (the unpermute is ``moe.combine``); backward DeepEP's two calls the other way, the
    permute's inverse and the probabilities' gather and index-put, 5. Launches per torch call
    as stated, not read from the kernels; the host waits this path adds (the boolean-mask
    selections, ``repeat_interleave`` and ``.item()``) are not modelled. Over
    ``hybridep``: HybridEP's ``metadata_preprocessing`` and ``dispatch_with_permute`` (the
    permute and the expert padding done in the exchange's own writes) and
    ``combine_with_unpermute`` (deep_ep/hybrid_ep_buffer.py, deepseek-ai/DeepEP branch
    hybrid-ep @94a9f8f6: one launch taken per runtime call), reading the routing map: 3
    launches, backward 2. Without expert parallelism the flex dispatchers are not run
    (Megatron-Bridge sets them only for EP > 1): one rank times as alltoall."""
    if dispatcher == "hybridep" and ep > 1:
        return replace(_ew("moe.dispatch", "norm_elementwise", elements=T * E, nbytes=T * E,
                           flops_per=0, kernels=3), backward_kernels=2)
    if dispatcher == "deepep" and ep > 1:
        return replace(_ew("moe.dispatch", "norm_elementwise", elements=R * h,
                           nbytes=T * E * 9 + 2 * R * h * act, flops_per=0, kernels=23),
                       backward_kernels=5)
    exchange = ep > 1
    sort = exchange and local > 1
    nbytes = T * E * 9 + (T + R) * h * act + (4 * R * h * act if sort else 0)
    kernels = 4 + (3 if exchange else 0) + (4 if sort else 0)
    back = 1 + (3 if exchange else 0) + (2 if sort else 0)
    return replace(_ew("moe.dispatch", "norm_elementwise", elements=(T + R) * h, nbytes=nbytes,
                       flops_per=0, kernels=kernels), backward_kernels=back)


def mcore_unfused_rope(rope: Op, a: float) -> Op:
    """``rope`` (the fused rotary op over Q and K's ``rope.parallel_work`` elements of ``a``
    bytes) as Megatron-Core's unfused ``_apply_rotary_pos_emb_bshd`` runs it
    (megatron/core/models/common/embeddings/rope_utils.py at NVIDIA/Megatron-LM@d7288711, for
    Q and for K): ``t * cos_`` (2 passes), ``_rotate_half``'s ``-x2`` (1) and ``torch.cat``
    (2), ``* sin_`` (2), the add (3) and ``torch.cat((t, t_pass))`` with an empty ``t_pass``
    (2): 12 passes, 6 large launches each, and 6 small ones over the ``[s, 1, 1, d]``
    frequencies (cos, sin, their ``* mscale`` and ``.to``). Its backward: ``grad * sin_`` (2),
    the negation's (1), the chunk's halves joined (2), ``grad * cos_`` (2) and the two paths'
    gradients summed (3): 10 passes, 5 launches each (the slice ``t[..., :rot_dim]``'s
    backward, a copy into zeros unless autograd elides a full slice, not counted)."""
    n = rope.parallel_work
    return replace(rope, bytes=12 * n * a, kernels=2 * (6 + 6), backward_bytes=10 * n * a,
                   backward_kernels=2 * 5)


#: Megatron-Core's flex dispatchers hand the experts float32 probabilities
#: (token_dispatcher.py at NVIDIA/Megatron-LM@d7288711, lines 1033-1039 and 1178-1180:
#: "HybridEP only supports float32 probs", "DeepEP only supports float32 probs", the probs
#: cast with ``.float()``); the alltoall dispatcher keeps the router's dtype (the router's
#: softmax ``.type_as(logits)``, bf16 without ``moe_router_dtype``).
FP32_PROB_DISPATCHERS = ("hybridep", "deepep")


def expert_epilogue_ops(arch: Architecture, R: int, local: int, a: float, *,
                        fp32_probs: bool = False) -> tuple[list[Op], list[Op]]:
    """Megatron-Core's eager expert epilogue over one rank's ``R`` token-expert rows on
    ``local`` experts with ``a``-byte activations (:data:`MCORE_EXPERT_EPILOGUE`): (the clamps
    before the activation, the fc2 bias loop after fc2), each empty where the model has no
    clamp (``swiglu_limit``) or no expert biases.

    * ``moe.clamp``: ``x_glu.clamp(max=L)`` and ``x_linear.clamp(-L, L)`` (each reads and
      writes its half of the ``R x 2 ie`` fc1 output) and ``torch.cat`` of the two (reads and
      writes all of it): 4 passes of ``a`` bytes over ``R x 2 ie``, 3 launches. Its backward
      (:func:`backward_ops`): the two ``clamp_backward`` (``where``: the gradient and the
      saved input read, the gradient written, 3 passes over each half) and the chunk's
      gradient concatenated (2 passes): 5 passes, 3 launches.
    * ``moe.bias``: per local expert ``b * p`` (writes the rows, ``q`` bytes: the promoted
      dtype, 4 with float32 probabilities) and ``t + b * p`` (reads ``t`` at ``a`` and the
      product, writes ``q``), then ``torch.cat`` (reads and writes ``q``) and, where ``q`` is
      not ``a``, ``.to`` (reads ``q``, writes ``a``): ``5q + a (+ q + a)`` bytes per element
      of ``R x h``, ``2 local + 1 (+1)`` launches. Its backward: per expert the product's two
      gradients (``grad * p`` and ``grad * b``, each written then summed to the bias's and the
      probabilities' shape: 3 passes of ``q`` each, 4 launches), with the casts of the
      gradient back (``a + q`` each way, 2 launches) where ``q`` is not ``a``."""
    h, ie = arch.hidden_size, arch.moe_intermediate_size or arch.intermediate_size
    clamp, bias = [], []
    if (arch.config or {}).get("swiglu_limit") and arch.mlp == "gated":
        n = R * 2 * ie
        clamp.append(replace(_ew("moe.clamp", "norm_elementwise", elements=n,
                                 nbytes=4 * n * a, flops_per=1, kernels=3),
                             backward_bytes=5 * n * a, backward_kernels=3))
    if arch.expert_bias:
        q = 4.0 if fp32_probs else a
        cast = q != a
        n, k = R * h, max(1, local)
        bias.append(replace(_ew("moe.bias", "norm_elementwise", elements=n,
                                nbytes=n * (5 * q + a + ((q + a) if cast else 0)), flops_per=2,
                                kernels=2 * k + 1 + (1 if cast else 0)),
                            backward_bytes=n * (6 * q + (2 * (a + q) if cast else 0)),
                            backward_kernels=4 * k + (2 if cast else 0)))
    return clamp, bias


def _with_expert_epilogue(ops: list[Op], arch: Architecture, R: int, local: int, a: float,
                          form: RunForm) -> list[Op]:
    """``ops`` (the MoE layer's, up to fc2) with the engine's eager expert epilogue where it
    runs one (:attr:`RunForm.expert_epilogue`): the clamps before the activation, the fc2
    bias after fc2 (:func:`expert_epilogue_ops`)."""
    if not form.expert_epilogue:
        return ops
    clamp, bias = expert_epilogue_ops(arch, R, local, a, fp32_probs=(
        form.ep > 1 and form.dispatcher in FP32_PROB_DISPATCHERS))
    at = next(i for i, op in enumerate(ops) if op.name == "moe.act")
    return ops[:at] + clamp + ops[at:] + bias


def _expert_launches(form: RunForm, local: int) -> tuple[int, int]:
    """(launches, experts in flight at once) of a grouped expert GEMM: one launch over
    :data:`TE_GEMM_STREAMS` streams per local expert where the engine loops
    (:data:`EXPERT_GEMM_LOOP`), else one grouped kernel (0: every expert in one schedule)."""
    if not form.expert_gemm_loop:
        return 1, 0
    return local, TE_GEMM_STREAMS if form.grouped_experts else 0


def _moe_ops(arch: Architecture, T: int, nb: _Bytes, form: RunForm = RunForm()) -> list[Op]:
    """A mixture-of-experts MLP over ``T`` tokens: router, top-k, the experts hit (a grouped GEMM:
    ``groups`` experts of ``rows / groups`` rows each, as :func:`expert_tokens` gives them),
    combine, and a shared expert where the model has one. FLOPs are those of the routed
    ``T x top-k`` rows (all ``T x E`` when ``form.all_experts``), not of every expert."""
    h, a, w = arch.hidden_size, nb.act, nb.expert
    act, gated = _mlp_act(arch), arch.mlp == "gated"
    E, k_top = arch.num_experts, max(1, arch.experts_per_token)
    ie = arch.moe_intermediate_size or arch.intermediate_size
    local, touched, per_expert = expert_tokens(T, arch, form)
    R = T * E if form.all_experts else T * k_top  # token-expert rows this rank computes
    useful = 1.0  # share of the rows that are routed tokens (model FLOPs), not padding
    if form.capacity_factor is not None and not form.all_experts:  # padded to the capacity
        routed, R = R, E * expert_capacity(T, E, k_top, form.capacity_factor)
        useful = min(routed, R) / R
    n_up = (2 if gated else 1) * ie
    ops = [_mm("moe.router", "mlp", b=1, m=T, k=h, n=E, act=a, w=nb.weight),
           _ew("moe.topk", "norm_elementwise", elements=T * E, nbytes=3 * T * E * 4,
               flops_per=_SOFTMAX_FLOPS, kernels=4)]
    ops += [dispatch_op(T, R, h, E, a, ep=form.ep, local=local, dispatcher=form.dispatcher)
            ] if form.dispatch_copies else []
    if form.all_experts:  # hidden_states.repeat(E, 1) * router_scores: one copy per expert
        ops.append(_ew("moe.repeat", "norm_elementwise", elements=R * h, nbytes=3 * R * h * a,
                       flops_per=1, kernels=2))
    # one GEMM per expert hit, or one grouped kernel for them all (plus its permute / unpermute)
    launches = 1 if form.grouped_experts else max(1, math.ceil(touched))
    groups = max(1, round(touched))
    grouped_launches, streams = _expert_launches(form, local)  # TE GroupedLinear's loop
    up = _mm("moe.up", "mlp", b=1, m=R, k=h, n=n_up, act=a, w=w)
    ops.append(replace(up, bytes=R * h * a + touched * h * n_up * w + R * n_up * a,
                       counted_flops=up.counted_flops * useful,
                       weight_elements=local * h * n_up,
                       kernels=(grouped_launches if form.grouped_experts
                                else launches * (2 if gated else 1)),
                       groups=groups, concurrent=streams, weight_width=w,
                       weight_bytes=touched * h * n_up * w))
    ops.append(_ew("moe.act", "norm_elementwise", elements=R * ie,
                   nbytes=(3 if gated else 2) * R * ie * a,
                   flops_per=_ACT_FLOPS[act] + (1 if gated else 0),
                   kernels=launches * (2 if gated else 1)))
    down = _mm("moe.down", "mlp", b=1, m=R, k=ie, n=h, act=a, w=w)
    ops.append(replace(down, bytes=R * ie * a + touched * ie * h * w + R * h * a,
                       counted_flops=down.counted_flops * useful,
                       weight_elements=local * ie * h,
                       kernels=grouped_launches if form.grouped_experts else launches,
                       groups=groups, concurrent=streams,
                       weight_width=w, weight_bytes=touched * ie * h * w))
    ops = _with_expert_epilogue(ops, arch, R, local, a, form)
    ops.append(_ew("moe.combine", "norm_elementwise", elements=R * h, nbytes=3 * R * h * a,
                   flops_per=2, kernels=launches * 2))
    si = arch.shared_expert_intermediate_size
    if si:
        ops.append(_mm("moe.shared_up", "mlp", b=1, m=T, k=h, n=2 * si, act=a, w=nb.weight,
                       kernels=2, input_reads=2))
        ops.append(_ew("moe.shared_act", "norm_elementwise", elements=T * si,
                       nbytes=3 * T * si * a, flops_per=_ACT_FLOPS[act] + 1, kernels=2))
        ops.append(_mm("moe.shared_down", "mlp", b=1, m=T, k=si, n=h, act=a, w=nb.weight))
        if arch.family == "qwen2_moe":  # Qwen2MoeSparseMoeBlock.shared_expert_gate (h -> 1)
            ops.append(_mm("moe.shared_gate", "mlp", b=1, m=T, k=h, n=1, act=a, w=nb.weight))
    return ops


def _mlp_ops(arch: Architecture, T: int, nb: _Bytes) -> list[Op]:
    """A dense MLP over ``T`` tokens (gated: gate and up projections, the activation times the
    gate, down)."""
    h, i, a, w = arch.hidden_size, arch.intermediate_size, nb.act, nb.weight
    act = _mlp_act(arch)
    if arch.mlp == "gated":
        fused_gu = arch.family == "phi3"
        ops = [_mm("mlp.gate_up", "mlp", b=1, m=T, k=h, n=2 * i, act=a, w=w,
                   kernels=1 if fused_gu else 2, input_reads=1 if fused_gu else 2,
                   launch_shares=() if fused_gu else (0.5, 0.5)),
               _ew("mlp.act", "norm_elementwise", elements=T * i, nbytes=3 * T * i * a,
                   flops_per=_ACT_FLOPS[act] + 1, kernels=2)]
    else:
        ops = [_mm("mlp.up", "mlp", b=1, m=T, k=h, n=i, act=a, w=w),
               _ew("mlp.act", "norm_elementwise", elements=T * i, nbytes=2 * T * i * a,
                   flops_per=_ACT_FLOPS[act])]
    ops.append(_mm("mlp.down", "mlp", b=1, m=T, k=i, n=h, act=a, w=w))
    return ops


def _vision_patches(arch: Architecture) -> int:
    if not arch.image_size or not arch.patch_size:
        raise InputError(f"{arch.name}: a vision model needs image_size and patch_size")
    return (arch.image_size // arch.patch_size) ** 2


def _embed_width(arch: Architecture) -> int:
    """Width of the word embeddings (OPT's ``word_embed_proj_dim``), else the hidden size."""
    e = (arch.config or {}).get("word_embed_proj_dim")
    return int(e) if isinstance(e, int) and not isinstance(e, bool) and e > 0 else \
        arch.hidden_size


def _embedding_ops(arch: Architecture, shape: StepShape, nb: _Bytes) -> list[Op]:
    B, T, h, a = shape.batch, shape.batch * shape.q_len, arch.hidden_size, nb.act
    ops: list[Op] = []
    if arch.kind == "vision":
        P, p, C = _vision_patches(arch), arch.patch_size, arch.num_channels or 3
        ops.append(_mm("embed.patches", "embedding", b=1, m=B * P, k=C * p * p, n=h, act=a,
                       w=nb.embed))
        ops.append(_ew("embed.positions", "embedding", elements=T * h, nbytes=3 * T * h * a,
                       flops_per=1, kernels=2))
        return ops
    e = _embed_width(arch)
    ops.append(_ew("embed.tokens", "embedding", elements=T * e,
                   nbytes=T * e * (nb.embed + a) + T * 8, flops_per=0))
    if e != h:  # OPT-350m: word embeddings of width e, projected to the hidden size
        ops.append(_mm("embed.project_in", "embedding", b=1, m=T, k=e, n=h, act=a, w=nb.weight))
    if arch.position == "learned":
        ops.append(_ew("embed.positions", "embedding", elements=T * h,
                       nbytes=T * h * (nb.embed + 2 * a), flops_per=1, kernels=2))
    if arch.kind == "encoder":  # token types + embedding LayerNorm (BERT)
        ops.append(_ew("embed.norm", "embedding", elements=T * h, nbytes=4 * T * h * a,
                       flops_per=_NORM_FLOPS.get(arch.norm, 7) + 1, kernels=3))
    elif arch.family == "bloom":  # word_embeddings_layernorm
        ops.append(_ew("embed.norm", "embedding", elements=T * h, nbytes=2 * T * h * a,
                       flops_per=_NORM_FLOPS.get(arch.norm, 7)))
    return ops


def _head_ops(arch: Architecture, shape: StepShape, nb: _Bytes) -> list[Op]:
    B, T, h, a = shape.batch, shape.batch * shape.q_len, arch.hidden_size, nb.act
    ops: list[Op] = []
    hf = arch.hf_class or ""
    nflops = _NORM_FLOPS.get(arch.norm, 7)
    if arch.kind in ("decoder", "vision"):
        ops.append(_ew("final.norm", "norm_elementwise", elements=T * h, nbytes=2 * T * h * a,
                       flops_per=nflops))
    if arch.kind == "decoder":
        if arch.vocab_size:
            L = shape.logits_tokens if shape.logits_tokens is not None else T
            V = arch.vocab_size
            e = _embed_width(arch)
            if e != h:
                ops.append(_mm("logits.project_out", "logits", b=1, m=L, k=h, n=e, act=a,
                               w=nb.weight))
            ops.append(_mm("logits.head", "logits", b=1, m=L, k=e, n=V, act=a, w=nb.head))
            if shape.train:
                # cross-entropy upcasts the logits to fp32: read them, write and read the fp32 copy
                ops.append(_ew("logits.loss", "logits", elements=L * V, nbytes=L * V * (a + 8),
                               flops_per=_SOFTMAX_FLOPS, kernels=3))
        return ops
    labels = arch.num_labels
    if arch.kind == "encoder" and ("MaskedLM" in hf or "PreTraining" in hf) and arch.vocab_size:
        ops.append(_mm("logits.transform", "logits", b=1, m=T, k=h, n=h, act=a, w=nb.weight))
        ops.append(_ew("logits.transform_act", "logits", elements=T * h, nbytes=4 * T * h * a,
                       flops_per=_ACT_FLOPS["gelu"] + nflops, kernels=2))
        ops.append(_mm("logits.head", "logits", b=1, m=T, k=h, n=arch.vocab_size, act=a,
                       w=nb.head))
        if shape.train:
            V = arch.vocab_size
            ops.append(_ew("logits.loss", "logits", elements=T * V, nbytes=T * V * (a + 8),
                           flops_per=_SOFTMAX_FLOPS, kernels=3))
        return ops
    pooled = arch.kind == "encoder" or not labels  # BERT pools [CLS]; ViT classifies [CLS] directly
    if pooled:
        ops.append(_mm("logits.pooler", "logits", b=1, m=B, k=h, n=h, act=a, w=nb.weight))
    if labels:
        ops.append(_mm("logits.classifier", "logits", b=1, m=B, k=h, n=labels, act=a,
                       w=nb.weight))
    return ops


def build_forward_ops(arch: Architecture, shape: StepShape, *, act_bytes: int,
                      weight_bytes: float, head_bytes: float | None = None,
                      embed_bytes: float | None = None, kv_bytes: int | None = None,
                      grad_bytes: int | None = None, expert_bytes: float | None = None,
                      attention: Attention = "sdpa",
                      form: RunForm | None = None, kv_scale_bytes: int = 0) -> tuple[Op, ...]:
    """Every forward operation of one pass, grouped by kind of layer (``count`` = layers).

    Layers with a sliding window or chunked attention, layers without rotary positions (Llama 4's
    NoPE layers), and mixture-of-experts layers, are separate groups because their arithmetic
    differs from the others'. ``attention`` is the job's: ``sdpa`` (a fused kernel that skips
    fully masked blocks and never stores the scores) or ``eager`` (materialized scores).
    ``form``: how the engine runs MLA and the experts (:class:`RunForm`; default: naive MLA,
    routed experts, one rank).
    """
    if attention not in get_args(Attention):
        raise InputError(f"{opt('attention')} {attention!r}: expected sdpa or eager",
                         field="attention", value=attention)
    form = form or RunForm()
    nb = _Bytes(act=act_bytes, weight=weight_bytes,
                head=weight_bytes if head_bytes is None else head_bytes,
                embed=weight_bytes if embed_bytes is None else embed_bytes,
                kv=act_bytes if kv_bytes is None else kv_bytes,
                grad=act_bytes if grad_bytes is None else grad_bytes,
                expert=expert_bytes or 0.0, kv_scale=kv_scale_bytes)
    groups: dict[tuple[int, bool, bool], int] = {}
    moe_set = _moe_layer_set(arch)
    for i in range(arch.num_layers):
        key = _layer_key(arch, i, moe_set)
        groups[key] = groups.get(key, 0) + 1
    ops: list[Op] = [replace(op, group="embedding") for op in _embedding_ops(arch, shape, nb)]
    for key, count in sorted(groups.items()):
        reach, nope, moe = key
        kind = _Kind(window=arch.sliding_window if reach == 1 else None,
                     chunk=arch.attention_chunk if reach == 2 else None,
                     rotary=not nope, moe=moe)
        group = (("", "sliding-window ", "chunked ")[reach] + ("moe" if moe else "dense")
                 + (" (NoPE)" if nope and arch.position == "rotary" else ""))
        for op in _layer_ops(arch, shape, nb, attention=attention, kind=kind, form=form):
            ops.append(replace(op, count=count, group=group))
    ops.extend(replace(op, group="head") for op in _head_ops(arch, shape, nb))
    return tuple(ops)


def _layer_key(arch: Architecture, i: int, moe_set: set[int]) -> tuple[int, bool, bool]:
    """(reach: 0 full, 1 sliding window, 2 chunked; NoPE; MoE) of layer ``i``."""
    if arch.sliding_window and i in arch.sliding_window_layers:
        reach = 1
    elif arch.attention_chunk and i in arch.chunked_layers:
        reach = 2
    else:
        reach = 0
    return reach, i in arch.nope_layers, i in moe_set


def is_layer_op(op: Op) -> bool:
    """True for the ops of the transformer layers (not the embedding, not the head)."""
    return op.group not in ("embedding", "head", "optimizer", "")


def backward_ops(fwd: tuple[Op, ...], *, act_bytes: int, grad_bytes: int,
                 weight_grads: bool = True) -> tuple[Op, ...]:
    """The backward of each forward op: 2x the FLOPs of every matmul (dX and dW), FlashAttention's
    backward at 2.5x its forward (it recomputes the scores), elementwise ops at 2x their bytes.

    ``weight_grads=False`` (a frozen base under LoRA): weight matmuls compute dX only, and the
    embedding needs no backward at all.
    """
    out: list[Op] = []
    a = act_bytes
    for op in fwd:
        if op.kind == "matmul":
            b, m, k, n = op.shape or (1, 1, 1, 1)
            if op.weight_elements and op.name == "embed.patches":
                # a patch embedding's input (the pixels) needs no gradient: dW only
                if weight_grads:
                    out.append(replace(op, phase="backward", weight_bytes=0.0,
                                       bytes=b * m * k * a + b * m * n * a
                                       + op.weight_elements * grad_bytes))
                continue
            if op.weight_elements:
                w_read = op.bytes - b * m * k * a - b * m * n * a  # as the forward read it
                dx = b * m * n * a + w_read + b * m * k * a
                dw = b * m * k * a + b * m * n * a + op.weight_elements * grad_bytes
                if not weight_grads:
                    out.append(replace(op, phase="backward", bytes=dx))
                    continue
            else:
                dx = b * m * n * a + b * k * n * a + b * m * k * a
                dw = b * m * k * a + b * m * n * a + b * k * n * a
            out.append(replace(op, phase="backward", flops=2 * op.flops,
                               counted_flops=2 * op.counted_flops, bytes=dx + dw,
                               kernels=2 * op.kernels))
        elif op.kind == "attention":
            # reads Q, K, V, O, dO and the log-sum-exp; writes dQ, dK, dV
            out.append(replace(op, phase="backward", flops=2.5 * op.flops,
                               counted_flops=2 * op.counted_flops, bytes=2 * op.bytes,
                               kernels=3))
        elif op.backward_bytes is not None:  # counted with the forward (expert_epilogue_ops)
            out.append(replace(op, phase="backward", flops=op.flops, bytes=op.backward_bytes,
                               kernels=op.backward_kernels, backward_bytes=None))
        elif op.name == "moe.dispatch" or (op.name == "attn.kv_expand" and op.backward_kernels):
            # the inverse copies, at the forward's bytes (its routing-map share, T x E x 9 B --
            # a few MB against the rows' hundreds -- taken again rather than split off)
            out.append(replace(op, phase="backward", bytes=op.bytes, kernels=op.backward_kernels))
        elif op.name == "attn.scale_mask":
            # the scale's gradient is one multiply; the mask add passes the gradient through
            out.append(replace(op, phase="backward", flops=op.flops / 2, bytes=op.bytes / 2,
                               kernels=1))
        else:
            if op.group == "embedding" and not weight_grads:
                continue
            out.append(replace(op, phase="backward", flops=2 * op.flops, bytes=2 * op.bytes,
                               kernels=op.kernels + 1))
    return tuple(out)


#: What an engine's ``selective`` checkpointing recomputes (its profile's ``selective``):
#: ``attention`` -- the attention core only (Korthikanti et al. 2022, Megatron's
#: --recompute-granularity selective); ``op`` -- torchtitan's op-level policy (``selective_ac_option
#: = 'op'``, its default): every op's output recomputed but the saved list's (the matmuls, SDPA,
#: the reduce-scatter), and of the matmuls every second one of a block recomputed too
#: (pytorch/torchtitan@582fe7d torchtitan/parallelisms/parallelize_llama.py, ``_save_list`` and
#: ``_custom_policy``: "Saves output of all compute ops, except every second mm").
SELECTIVE_POLICIES = ("attention", "op")


#: The forward ops each of Megatron-Core's ``--recompute-modules`` re-runs (transformer_config.py
#: at NVIDIA/Megatron-LM@d98e8a64: "mla_up_proj": recompute the MLA up projection and RoPE
#: applying parts; "layernorm": the input_layernorm and pre_mlp_layernorm; "moe_act": the MoE
#: MLP activation function; "mlp": the dense MLP submodule; "shared_experts": the shared
#: experts in the MoE layer). core_attn: the attention core, as ``selective`` alone.
#: mla_up_proj's function (multi_latent_attention.py ``qkv_up_proj_and_rope_apply``) also runs
#: q_proj where there is no q_lora_rank, and the q/kv norms fused into the up projections
#: (gpt_layer_specs.py: ``column_parallel_layer_norm_linear`` under qk_layernorm). The memory
#: model drops the same regions (memory/activations/blocks.py, ``_begin``).
MODULE_OPS = {
    "core_attn": ("attn.scores", "attn.scale_mask", "attn.softmax", "attn.values"),
    "mla_up_proj": ("attn.q_a_norm", "attn.q_b", "attn.q", "attn.kv_a_norm", "attn.kv_b",
                    "attn.kv_expand", "attn.rotary"),
    "layernorm": ("attn.norm", "mlp.norm"),
    "moe_act": ("moe.clamp", "moe.act"),  # the clamps run inside bias_act_func
    "mlp": ("mlp.gate_up", "mlp.up", "mlp.act", "mlp.down"),
    "shared_experts": ("moe.shared_up", "moe.shared_act", "moe.shared_down", "moe.shared_gate"),
}


def recompute_ops(fwd: tuple[Op, ...], checkpointing: Checkpointing,
                  attention: Attention, *, policy: str = "attention",
                  qkv_shares: tuple[float, float, float] | None = None,
                  modules: tuple[str, ...] | None = None) -> tuple[Op, ...]:
    """The extra forward work of activation checkpointing.

    ``full``: every transformer layer's forward runs again during backward (embedding and head are
    not recomputed). ``selective`` under ``policy`` (:data:`SELECTIVE_POLICIES`): ``attention``
    (Korthikanti et al. 2022) -- only the attention core -- scores, softmax, dropout, values -- is
    recomputed; with a fused (sdpa) kernel that core is never stored in the first place (its
    backward recomputes it, already counted), so selective adds nothing. ``op``:
    :func:`_op_policy_recompute` (``qkv_shares``: the q, k and v projections' shares of a
    three-kernel QKV op's work). ``modules`` (selective only): Megatron-Core's
    ``--recompute-modules`` instead of the attention core alone (:data:`MODULE_OPS`; core_attn
    among them as the attention core under the same fused-kernel rule).
    """
    if checkpointing == "none":
        return ()
    if checkpointing not in ("selective", "full"):
        raise InputError(f"{opt('checkpointing')} {checkpointing!r}: expected none, selective "
                         "or full", field="checkpointing", value=checkpointing)
    if checkpointing == "selective" and policy == "op":
        return _op_policy_recompute(fwd, qkv_shares or (1 / 3, 1 / 3, 1 / 3))
    if checkpointing == "selective" and modules is not None:
        return _module_recompute(fwd, attention, modules)
    out = []
    for op in fwd:
        if not is_layer_op(op):
            continue
        if checkpointing == "selective":
            if attention == "sdpa" or op.name not in ("attn.scores", "attn.scale_mask",
                                                       "attn.softmax", "attn.values"):
                continue
        out.append(replace(op, phase="recompute"))
    return tuple(out)


def _module_recompute(fwd: tuple[Op, ...], attention: Attention,
                      modules: tuple[str, ...]) -> tuple[Op, ...]:
    """The forward ops of Megatron-Core's recompute ``modules``, each layer's again in backward
    (the attention core's only where it is stored: not under a fused kernel)."""
    mla = any(op.name == "attn.kv_b" for op in fwd)  # attn.rotary alone is any RoPE model's
    names = {n for m in modules for n in MODULE_OPS[m]
             if not (m == "core_attn" and attention == "sdpa")
             and not (m == "mla_up_proj" and not mla)}
    return tuple(replace(op, phase="recompute") for op in fwd
                 if is_layer_op(op) and op.name in names)


def _op_policy_recompute(fwd: tuple[Op, ...],
                         qkv_shares: tuple[float, float, float]) -> tuple[Op, ...]:
    """torchtitan's op-level selective checkpointing, per transformer block: its elementwise
    ops all again (norms, rotary, activation, residuals: not on the saved list), the attention
    core not (SDPA is saved), and the block's matmul launches counted in forward order with the
    2nd, 4th, 6th ... recomputed -- in a Llama block wq wk wv wo w1 w3 w2, so wk, wo and w3. A
    matmul op of several launches (q, k, v; gate, up) is recomputed at the share of the
    launches that fall on even counts: ``qkv_shares`` for a three-launch QKV, equal shares
    otherwise."""
    out, count = [], 0
    for op in fwd:
        if not is_layer_op(op) or op.kind == "attention":
            continue
        if op.kind != "matmul":
            out.append(replace(op, phase="recompute"))
            continue
        shares = qkv_shares if op.name == "attn.qkv" and op.kernels == 3 else \
            (1 / op.kernels,) * op.kernels
        share, kernels = 0.0, 0
        for s in shares:
            count += 1
            if count % 2 == 0:
                share, kernels = share + s, kernels + 1
        if kernels:
            # the recomputed launches' own product: N cut to their share (wk: N = kv width)
            shape = op.shape and (*op.shape[:3], max(1, round(op.shape[3] * share)))
            out.append(replace(op, phase="recompute", flops=op.flops * share, shape=shape,
                               launch_shares=(),
                               counted_flops=op.counted_flops * share, bytes=op.bytes * share,
                               parallel_work=max(1, round(op.parallel_work * share)),
                               kernels=kernels, weight_elements=round(op.weight_elements * share),
                               weight_bytes=op.weight_bytes * share))
    return tuple(out)


def _lora_mm(name: str, m: int, k: int, n: int, nbytes: float, phase: Phase, count: int) -> Op:
    f = 2.0 * m * k * n
    return Op(name=name, op_class="mlp", kind="matmul", phase=phase, count=count, flops=f,
              counted_flops=f, bytes=float(nbytes), parallel_work=max(1, m * n), kernels=1,
              shape=(1, m, k, n), group="dense")


def _lora_ew(name: str, nbytes: float, elements: int, kernels: int, phase: Phase,
             count: int) -> Op:
    return Op(name=name, op_class="norm_elementwise", kind="elementwise", phase=phase,
              count=count, flops=float(elements), counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, elements), kernels=kernels, group="dense")


def lora_adapter_ops(linears: Sequence[tuple[int, int, int, int]], *, rank: int,
                     act_bytes: int, fused: bool, dropout: bool = False,
                     recompute: bool = False) -> tuple[Op, ...]:
    """The passes LoRA adds beside each adapted frozen linear ``(in, out, count, tokens)`` --
    ``tokens``: what one instance sees, an expert its share under MoE routing -- as PEFT's and
    torchtune's LoRA layers run ``out = base(x) + scale * B(A(dropout(x)))``, and its backward.

    Forward: dropout of x when ``dropout`` (the output and a 1-byte mask), x @ A (M = tokens,
    K = in, N = r), @ B (K = r, N = out), then ``x scale`` and the add to the base output: two
    kernels (mul: 2 accesses per output element, add: 3) in eager, one (3) when ``fused`` (a
    compiled graph). Backward: the scale's gradient (read g, write), dB and dH from it, dA and the
    adapter's dX from dH, and dX added to the base's (3 accesses of each input element in eager;
    compiled, the sum is folded into dX's consumer: one read, no launch), the dropout's gradient
    when there is one. ``recompute``: the forward again (full checkpointing).
    The products are skinny (one side is r), so bytes bound them; their FLOPs are counted."""
    a, r = act_bytes, rank
    out: list[Op] = []
    for i, o, c, T in linears:
        x, y, h = T * i, T * o, T * r
        fwd = [_lora_ew("lora.dropout", 2 * a * x + x, x, 1, "forward", c)] if dropout else []
        fwd += [_lora_mm("lora.A", T, i, r, a * (x + i * r + h), "forward", c),
                _lora_mm("lora.B", T, r, o, a * (h + r * o + y), "forward", c),
                _lora_ew("lora.scale_add", (3 if fused else 5) * a * y, y, 1 if fused else 2,
                         "forward", c)]
        out += fwd
        out += [_lora_ew("lora.scale_add", 2 * a * y, y, 1, "backward", c),
                _lora_mm("lora.B", o, T, r, a * (y + h + o * r), "backward", c),
                _lora_mm("lora.B", T, o, r, a * (y + o * r + h), "backward", c),
                _lora_mm("lora.A", r, T, i, a * (h + x + r * i), "backward", c),
                _lora_mm("lora.A", T, r, i, a * (h + r * i + x), "backward", c),
                # eager adds the adapter's dX to the base's (read both, write); a compiled graph
                # folds the sum into the kernel that consumes dX (one more read, no launch)
                _lora_ew("lora.dx_add", (1 if fused else 3) * a * x, x, 0 if fused else 1,
                         "backward", c)]
        if dropout:
            out.append(_lora_ew("lora.dropout", 2 * a * x + x, x, 1, "backward", c))
        if recompute:
            out += [replace(op, phase="recompute") for op in fwd]
    return tuple(out)


def optimizer_op(n_params: int, *, state_bytes_total: float, grad_bytes: int, weight_bytes: int,
                 master_bytes: int, tensors: int = 1, param_accesses: float = 2.0,
                 grad_reads: float = 1.0, state_accesses: float = 2.0, scratch_bytes: float = 0.0,
                 kernels: int | None = None, host_s: float | None = None,
                 weight_reads: float = 0.0) -> Op:
    """The optimizer step: read the gradients, update master (or weights) and states in place, and
    write the working 16-bit copy when a master copy exists; ``weight_reads``: reads of that
    16-bit copy too (a master kept as remainders: the fp32 value is the weight and its remainder,
    Apex's multi_tensor_fused_adam_with_param_remainders). By default one fused pass (each
    operand once); an unfused implementation gives its accesses per element (see
    :func:`~.efficiency.optimizer_cost`), ``scratch_bytes`` of temporaries per element, its
    ``kernels`` and the host time of each (``host_s``)."""
    upd = master_bytes or weight_bytes
    nbytes = n_params * (grad_reads * grad_bytes + param_accesses * upd
                         + (weight_bytes if master_bytes else 0) + weight_reads * weight_bytes
                         + scratch_bytes) \
        + state_accesses * state_bytes_total
    k = kernels if kernels is not None else max(12, 12 * math.ceil(tensors / 256))
    return Op(name="optimizer.step", op_class="optimizer", kind="elementwise", phase="optimizer",
              count=1, flops=12.0 * n_params, counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, n_params), kernels=max(1, k), group="optimizer",
              host_s=host_s)


# --------------------------------------------------------------------------------------------------
# FLOPs by layer and by model


@record
class LayerFlops:
    """Forward FLOPs of one layer of a group of identical layers (counted convention)."""

    kind: str
    """``dense``, ``moe``, ``sliding-window dense`` ..."""
    count: int
    """Layers of this kind."""
    forward_flops: float
    """One layer's forward matmul FLOPs (attention s^2 term counted in full)."""
    attention_flops: float
    """Of which the attention score and value products (the s^2 term)."""
    by_op: tuple[tuple[str, float], ...]
    """Forward counted FLOPs of each matmul of the layer."""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "count": self.count, "forward_flops": self.forward_flops,
                "attention_flops": self.attention_flops, "by_op": dict(self.by_op)}


@record
class FlopsBreakdown:
    """Counted (matmul) FLOPs of one step of ``batch`` sequences of ``seq`` tokens."""

    tokens: int
    layers: tuple[LayerFlops, ...]
    embedding_forward_flops: float
    head_forward_flops: float
    forward_flops: float
    """Whole model, one forward pass."""
    backward_flops: float
    """2x the forward (dX and dW of every matmul), except that a patch embedding needs no dX."""
    recompute_flops: float
    """Extra forward work of activation checkpointing."""
    model_flops: float
    """Forward + backward: the MFU numerator for one step (inference: the forward only)."""
    hardware_flops: float
    """Model FLOPs + recompute: the HFU numerator."""
    model_flops_per_token: float
    matmul_params: int
    """Weight elements multiplied per token (the "N" of 6N, MoE: active experts only; every
    expert where the engine runs them all)."""
    notes: tuple[str, ...] = ()
    """What the engine's code changes (:func:`form_notes`)."""

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "layers": [l.to_dict() for l in self.layers],
                "embedding_forward_flops": self.embedding_forward_flops,
                "head_forward_flops": self.head_forward_flops,
                "forward_flops": self.forward_flops, "backward_flops": self.backward_flops,
                "recompute_flops": self.recompute_flops, "model_flops": self.model_flops,
                "hardware_flops": self.hardware_flops,
                "model_flops_per_token": self.model_flops_per_token,
                "matmul_params": self.matmul_params,
                **({"notes": list(self.notes)} if self.notes else {})}


def flops_breakdown(arch: Architecture, job: Job) -> FlopsBreakdown:
    """Per-layer and per-model counted FLOPs of one step of ``job`` on ``arch``: a training step
    (``job.mode == "train"``: forward, backward and ``job.checkpointing``'s recompute) or one
    inference forward pass over the prompt (``"infer"``: logits for every position when
    ``job.prefill_logits == "all"``, a scoring pass; for the last one only when ``"last"``).

    ``job.batch`` sequences of ``job.seq`` tokens (None: :func:`default_seq`; a vision model's
    sequence is always its patches + [CLS]).
    """
    if job.mode not in ("train", "infer"):
        raise InputError(f"job mode {job.mode!r}: a FLOP count is of one step; use "
                         "job.with_(mode='train') or job.with_(mode='infer')")
    train = job.mode == "train"
    batch = job.batch
    job = job._evolve(attention=attention_for(arch.family, job.attention, job.engine))
    seq = default_seq(arch) if job.seq is None or arch.kind == "vision" else job.seq
    logits = None if train or job.prefill_logits == "all" else batch
    shape = StepShape(batch=batch, q_len=seq, kv_len=seq, train=train, logits_tokens=logits)
    engine = resolve_engine(job.engine)
    form = run_form(arch, engine, decode=False)
    fwd = build_forward_ops(arch, shape, act_bytes=2, weight_bytes=2, attention=job.attention,
                            form=form)
    forward = sum(op.counted_flops * op.count for op in fwd)
    backward = sum(op.counted_flops * op.count
                   for op in backward_ops(fwd, act_bytes=2, grad_bytes=2)) if train else 0.0
    rec = sum(op.counted_flops * op.count
              for op in recompute_ops(fwd, job.checkpointing, job.attention)) if train else 0.0
    tokens = batch * seq
    model = forward + backward
    return FlopsBreakdown(
        tokens=tokens, layers=_layer_flops(fwd),
        embedding_forward_flops=sum(op.counted_flops * op.count for op in fwd
                                    if op.group == "embedding"),
        head_forward_flops=sum(op.counted_flops * op.count for op in fwd if op.group == "head"),
        forward_flops=forward, backward_flops=backward, recompute_flops=rec, model_flops=model,
        hardware_flops=model + rec, model_flops_per_token=model / tokens,
        matmul_params=_matmul_params(arch, fwd, form), notes=form_notes(arch, form, engine))


def _layer_flops(fwd: tuple[Op, ...]) -> tuple[LayerFlops, ...]:
    """One :class:`LayerFlops` per group of identical layers."""
    layers: dict[str, list[Op]] = {}
    for op in fwd:
        if is_layer_op(op):
            layers.setdefault(op.group, []).append(op)
    groups = []
    for kind, ops in layers.items():
        attn = sum(o.counted_flops for o in ops
                   if o.name in ("attn.core", "attn.scores", "attn.values"))
        groups.append(LayerFlops(
            kind=kind, count=ops[0].count, forward_flops=sum(o.counted_flops for o in ops),
            attention_flops=attn,
            by_op=tuple((o.name, o.counted_flops) for o in ops if o.counted_flops)))
    return tuple(groups)


def _matmul_params(arch: Architecture, fwd: tuple[Op, ...], form: RunForm = RunForm()) -> int:
    """Weight elements multiplied per token (MoE: the experts a token is routed to, or all of
    them where the engine runs them all)."""
    params = sum(op.weight_elements * op.count for op in fwd if op.kind == "matmul"
                 and not op.name.endswith(("moe.up", "moe.down")))
    if arch.is_moe:
        ie = arch.moe_intermediate_size or arch.intermediate_size
        per_expert = (3 if arch.mlp == "gated" else 2) * arch.hidden_size * ie
        used = arch.num_experts if form.all_experts else arch.experts_per_token
        params += _moe_layers(arch) * used * per_expert
    return int(params)


@record
class AttentionPrecision:
    """How an inference step's attention cores run: on the FP8 tensor cores or 16-bit, over an
    FP8 KV cache or not (:func:`inference_attention`)."""

    fp8: bool
    """QK^T and PV run in FP8 (e4m3), at the FP8 peak."""
    selected_by: str
    """``fp8_attention`` (asked for), ``kv_dtype`` (the engine's FP8 KV backend selects its FP8
    kernel) or "" (16-bit)."""
    kernel: str
    """The FP8 kernel ("" when 16-bit)."""
    fraction_kernel: str
    """Whose share of the FP8 peak times it (``fa3-fp8``; "": the 16-bit kernel's share)."""
    kv_fp8: bool
    kv_scale_bytes: int
    """Scale bytes each layer's attention reads beside an FP8 cache (0: none)."""
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"fp8": self.fp8, "selected_by": self.selected_by or None,
                "kernel": self.kernel or None, "kv_cache_fp8": self.kv_fp8,
                "kv_scale_bytes_per_layer": self.kv_scale_bytes}


_BF16_ATTENTION = AttentionPrecision(fp8=False, selected_by="", kernel="", fraction_kernel="",
                                     kv_fp8=False, kv_scale_bytes=0)


def _refuse_fp8_attention(engine: str, gpu: str, architecture: str, has_fp8: bool) -> None:
    """One line when ``fp8_attention`` cannot run: no FP8 tensor cores on ``gpu``, an engine
    without an FP8 attention kernel, or a generation its kernel does not run on."""
    prof = fp8_attention_of(engine)
    if not has_fp8:
        have = [g.name for g in all_gpus() if "fp8" in g.peak_flops]
        raise InputError(f"{opt('fp8_attention')}: {gpu} ({architecture or 'unknown'} "
                         "architecture) has no FP8 tensor cores; FP8 attention runs on "
                         f"{', '.join(have)}; drop it or pick one of them",
                         field="fp8_attention", value=True, accepted=", ".join(have),
                         fix={"fp8_attention": False})
    if prof is None or not prof.kernel:
        who = ", ".join(FP8_ATTENTION)
        raise InputError(f"{opt('fp8_attention')} under {opt('engine')} {engine}: it has no "
                         f"FP8 attention kernel for inference; use {opt('engine')} one of "
                         f"{who}, or drop it", field="fp8_attention", value=True,
                         accepted=who, fix={"fp8_attention": False})
    if architecture not in prof.architectures:
        have = [g.name for g in all_gpus() if g.architecture in prof.architectures]
        raise InputError(f"{opt('fp8_attention')} under {opt('engine')} {engine}: its "
                         f"{prof.kernel} runs on {', '.join(prof.architectures)} GPUs "
                         f"({', '.join(have)}), not {gpu} ({architecture}); drop it or pick "
                         "one of them", field="fp8_attention", value=True,
                         accepted=", ".join(have), fix={"fp8_attention": False})


#: How each FP8 attention kernel's products are timed (:func:`inference_attention`'s note).
_FP8_RATE = {
    "fa3-fp8": "at the FP8 peak x FlashAttention-3's FP8 share of it (Shah et al. 2024: ~1.2 "
               "PFLOP/s on H100)",
    "fa3-fp8-two-level": "at the 16-bit kernel's rate x its measured FP8/16-bit ratio (two-level "
                         "FP32 accumulation takes back the FP8 MMAs' 2x: 1.0 at head dim <= 128, "
                         "0.62 at 256)",
    "": "at the FP8 peak x the 16-bit kernel's share of it (no published figure for it)",
}


def inference_attention(engine: str, kv_dtype: str | None, fp8_attention: bool, *, gpu: str,
                        architecture: str, has_fp8: bool) -> AttentionPrecision:
    """Whether a serving step's attention runs in FP8 on ``gpu`` under ``engine`` (resolved), by
    the engine's data (:data:`gpuplan.engines.profiles.FP8_ATTENTION`): asked for
    (``fp8_attention``: refused in one line where it cannot run), or selected by an FP8 KV cache
    where the engine's kernel takes e4m3 queries (vLLM's and SGLang's FlashAttention-3 backend on
    Hopper); otherwise 16-bit products, the cache dequantized in the kernel. An FP8 cache under
    those engines also reads its per-tensor scales (8 bytes a layer)."""
    kv_fp8 = kv_dtype == "fp8"
    if fp8_attention:
        _refuse_fp8_attention(engine, gpu, architecture, has_fp8)
    prof = fp8_attention_of(engine)
    if prof is None:
        return _BF16_ATTENTION if not kv_fp8 else replace(_BF16_ATTENTION, kv_fp8=True)
    scale = prof.scale_bytes_per_layer if kv_fp8 else 0
    selects = (kv_fp8 and prof.kv_selects and has_fp8 and architecture in prof.architectures)
    if fp8_attention or selects:
        by = "fp8_attention" if fp8_attention else "kv_dtype"
        why = "asked for" if fp8_attention else f"selected by the fp8 KV cache on {architecture}"
        note = (f"attention in FP8 ({why}): {engine}'s {prof.kernel}, QK^T and PV "
                f"{_FP8_RATE.get(prof.fraction_kernel, _FP8_RATE[''])}"
                + (f"; KV cache e4m3 + {prof.scales}" if kv_fp8 else ""))
        return AttentionPrecision(fp8=True, selected_by=by, kernel=prof.kernel,
                                  fraction_kernel=prof.fraction_kernel, kv_fp8=kv_fp8,
                                  kv_scale_bytes=scale, notes=(note,))
    if not kv_fp8:
        return _BF16_ATTENTION
    note = (f"KV cache fp8 (e4m3, 1 B/element + {prof.scales}): {prof.kv_read}"
            + ("" if prof.kv_selects or architecture not in prof.architectures else
               f"; its FP8 attention ({prof.kernel}) is a switch of its own, not asked for"))
    return AttentionPrecision(fp8=False, selected_by="", kernel="", fraction_kernel="",
                              kv_fp8=True, kv_scale_bytes=scale, notes=(note,))


def fp8_attention_ops(ops: Sequence[Op], plan: AttentionPrecision) -> tuple[Op, ...]:
    """``ops`` with their fused attention cores marked to run in FP8 when ``plan`` says so."""
    if not plan.fp8:
        return tuple(ops)
    return tuple(replace(o, narrow=True, attention_kernel=plan.fraction_kernel)
                 if o.kind == "attention" else o for o in ops)
