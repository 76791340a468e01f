"""Number formats: training precision recipes, optimizers, and inference weight formats.

Each is a named layout with its bytes spelled out and a source, so the accounting reads like the
seed document's table (bytes per parameter per line item) and every figure can be checked.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Mapping
from types import MappingProxyType
from typing import Callable, Literal

from ._record import record
from .errors import InputError, UnknownNameError
from .fp8 import NARROW_RECIPES
from .models._ggml import ggml_tensor_bytes
from .models._types import Architecture, ParamTensor

__all__ = [
    "TrainingRecipe", "OptimizerSpec", "WeightFormat",
    "TRAINING_RECIPES", "OPTIMIZERS", "WEIGHT_FORMATS", "STORED_FORMATS",
    "get_recipe", "with_job_dtypes", "get_optimizer", "get_weight_format",
    "optimizer_state_bytes", "weights_bytes_in_format", "gemm_dtype", "FP32_KEPT_STRICT",
    "HF_LOADED_ENGINES", "fp32_kept", "fp32_kept_params",
    "INFER_AUTO", "resolve_infer_precision", "loads_shipped", "FP8_GEMM_ARCHS",
]


# --------------------------------------------------------------------------------------------------
# Training precision recipes (DESIGN.md: "Precision recipes are named layouts, not one number")


@record
class TrainingRecipe:
    """Where each copy of the parameters lives during training, in bytes per parameter."""

    name: str
    weight_bytes: int
    """Bytes of the weights the model computes with (the module's parameters)."""
    grad_bytes: int
    """Bytes of each gradient element (same dtype as the parameters)."""
    master_bytes: int
    """Bytes of a separate master copy held for the optimizer (0 when the weights are fp32): 4,
    fp32, in every recipe; a Job's ``master_weights`` may name bf16, a remainder or none
    (:func:`with_job_dtypes`)."""
    state_bytes: int
    """Default bytes of one optimizer-state element (fp32 = 4; pure bf16 keeps states in bf16)."""
    compute_dtype: Literal["fp32", "bf16", "fp16", "fp8", "fp4"]
    """The dtype the matmuls run in (for the speed model); fp8/fp4: the blocks' linear layers
    (:mod:`gpuplan.fp8`), attention, embedding and head at bf16."""
    autocast: bool
    """torch.autocast over fp32 parameters: a 16-bit copy of each weight is cached for the step."""
    description: str
    source: str
    master_remainder: bool = False
    """The master is the 16-bit weights plus a 16-bit remainder of each fp32 value (``master_bytes``
    2, the remainder; the step reads and writes both halves): a Job's ``master_weights``
    remainder (:func:`with_job_dtypes`)."""


TRAINING_RECIPES: dict[str, TrainingRecipe] = {
    r.name: r
    for r in (
        TrainingRecipe(
            name="mixed-bf16", weight_bytes=2, grad_bytes=2, master_bytes=4, state_bytes=4,
            compute_dtype="bf16", autocast=False,
            description="bf16 weights and gradients, fp32 master copy and optimizer states "
                        "(the seed's table; Megatron-LM, DeepSpeed bf16)",
            source="seed 000: 2 + 2 + 4 + 8 bytes per parameter with Adam; "
                   "Rajbhandari et al. 2020 (ZeRO), sec. 3.1: 16 bytes per parameter",
        ),
        TrainingRecipe(
            name="mixed-fp16", weight_bytes=2, grad_bytes=2, master_bytes=4, state_bytes=4,
            compute_dtype="fp16", autocast=False,
            description="fp16 weights and gradients with loss scaling, fp32 master copy and "
                        "optimizer states (Micikevicius et al. 2018; DeepSpeed fp16)",
            source="Micikevicius et al. 2018, Mixed Precision Training; ZeRO sec. 3.1",
        ),
        TrainingRecipe(
            name="amp-bf16", weight_bytes=4, grad_bytes=4, master_bytes=0, state_bytes=4,
            compute_dtype="bf16", autocast=True,
            description="torch.autocast(bf16) over fp32 parameters: fp32 weights, gradients and "
                        "states; autocast caches a bf16 copy of each weight during the step",
            source="PyTorch AMP docs (torch.autocast); DESIGN.md measured layout",
        ),
        TrainingRecipe(
            name="amp-fp16", weight_bytes=4, grad_bytes=4, master_bytes=0, state_bytes=4,
            compute_dtype="fp16", autocast=True,
            description="torch.autocast(fp16) + GradScaler over fp32 parameters",
            source="PyTorch AMP docs (torch.autocast, torch.amp.GradScaler)",
        ),
        TrainingRecipe(
            name="bf16", weight_bytes=2, grad_bytes=2, master_bytes=0, state_bytes=2,
            compute_dtype="bf16", autocast=False,
            description="pure bf16: parameters, gradients and (by default) optimizer states in "
                        "bf16, as torch.optim keeps states in the parameter dtype",
            source="torch.optim.AdamW: exp_avg = zeros_like(param)",
        ),
        TrainingRecipe(
            name="fp32", weight_bytes=4, grad_bytes=4, master_bytes=0, state_bytes=4,
            compute_dtype="fp32", autocast=False,
            description="everything in fp32",
            source="-",
        ),
        *(TrainingRecipe(
            name=n.name, weight_bytes=2, grad_bytes=2, master_bytes=4, state_bytes=4,
            compute_dtype=n.dtype, autocast=False,
            description=f"mixed-bf16 with the linear GEMMs in {n.formats} ({n.implementation}: "
                        f"{n.scaling})", source=n.source) for n in NARROW_RECIPES.values()),
    )
}


def get_recipe(name: str) -> TrainingRecipe:
    try:
        return TRAINING_RECIPES[name]
    except KeyError:
        raise UnknownNameError("training precision", name, TRAINING_RECIPES,
                               hint="training recipes: " + ", ".join(TRAINING_RECIPES)) from None


#: Bytes of an element of the optimizer states or of the master copy a Job names
#: (``optimizer_states``, ``master_weights``); ``auto`` keeps the recipe's.
_DTYPE_BYTES = {"fp32": 4, "bf16": 2}
#: ``master_weights`` remainder: the fp32 master split into the bf16 weight (its top 16 bits,
#: counted with the weights) and an int16 remainder (its low 16 bits), 2 B a parameter beside
#: the weight instead of a 4 B copy. Apex's DistributedFusedAdam ``store_param_remainders``
#: (param_remainders_shard, torch.int16, beside fp32 exp_avg / exp_avg_sq: NVIDIA/apex@f8e60c47
#: apex/contrib/optimizers/distributed_fused_adam.py lines 458-464; it requires dtype fp32 and
#: param_sync_dtype bf16, lines 659-671), which NeMo turns on for a bf16 O2 model under
#: distributed_fused_adam with its default fp32 dtype and no fp8_params (NVIDIA/NeMo@e938df32
#: nemo/collections/nlp/models/language_modeling/megatron_base_model.py lines 790-812, the same
#: at r2.0.0rc1); Megatron-Core's precision-aware optimizer (use_precision_aware_optimizer, off
#: by default) with bf16 and store_param_remainders True, its default (NVIDIA/Megatron-LM@d98e8a64
#: megatron/core/optimizer/optimizer_config.py line 192; distrib_optimizer.py lines 1007-1009).
#: ``master_weights`` none: no master at all, the optimizer steps the 16-bit weights in place
#: beside its states in the same dtype. Apex's DistributedFusedAdam with ``store_params`` False
#: (params_shard None: distributed_fused_adam.py lines 449-456 @f8e60c47, ``dtype`` its states'
#: lines 464-476), which NeMo sets when the optimizer's ``dtype`` is the model's, bf16 under
#: megatron_amp_O2 (megatron_base_model.py lines 790-807 @e938df32: ``optim_dtype ==
#: model_dtype`` -> store_params False), as NeMo-Framework-Launcher 24.07's
#: conf/training/nemotron/nemotron_340b.yaml lines 158-162 set (8325688d: dtype bf16).
_MASTER_BYTES = {**_DTYPE_BYTES, "remainder": 2, "none": 0}


def with_job_dtypes(recipe: TrainingRecipe, optimizer_states: str = "auto",
                    master_weights: str = "auto", grad_dtype: str = "auto") -> TrainingRecipe:
    """``recipe`` with the optimizer-state, master-copy and gradient dtypes a Job names: what
    the memory plan, the speed model's passes and the layout search all read, through
    :attr:`gpuplan.job.Job.train_recipe`. A master dtype
    applies only where the recipe keeps a master copy, a gradient dtype only beside 16-bit
    weights (the Job refuses them elsewhere)."""
    state = recipe.state_bytes if optimizer_states == "auto" else _DTYPE_BYTES[optimizer_states]
    master, rem = recipe.master_bytes, recipe.master_remainder
    if master and master_weights != "auto":
        master, rem = _MASTER_BYTES[master_weights], master_weights == "remainder"
    grad = recipe.grad_bytes if grad_dtype == "auto" else _DTYPE_BYTES[grad_dtype]
    if (state, master, rem, grad) == (recipe.state_bytes, recipe.master_bytes,
                                      recipe.master_remainder, recipe.grad_bytes):
        return recipe
    return replace(recipe, state_bytes=state, master_bytes=master, master_remainder=rem,
                   grad_bytes=grad)


# --------------------------------------------------------------------------------------------------
# Optimizers


@record
class OptimizerSpec:
    """An optimizer's persistent state, per parameter."""

    name: str
    states: int
    """Full-size state tensors per parameter (Adam: exp_avg and exp_avg_sq = 2)."""
    kind: Literal["plain", "factored", "8bit"] = "plain"
    paged: bool = False
    """bitsandbytes paged optimizer: the states of parameters of 100,000 elements or more live in
    CUDA managed memory (cudaMallocManaged), on the GPU while they fit and evicted to host memory
    when it runs short; torch's allocator statistics never count them."""
    description: str
    tradeoff: str
    """What choosing it costs (said by the solver)."""
    source: str


OPTIMIZERS: dict[str, OptimizerSpec] = {
    o.name: o
    for o in (
        OptimizerSpec(name="sgd", states=0, description="plain SGD, no state",
                      tradeoff="no momentum: usually slower convergence for transformers",
                      source="torch.optim.SGD (momentum=0 keeps no buffer)"),
        OptimizerSpec(name="sgd-momentum", states=1, description="SGD with a momentum buffer",
                      tradeoff="slower convergence than Adam for transformers",
                      source="torch.optim.SGD: momentum_buffer"),
        OptimizerSpec(name="adam", states=2, description="Adam: first and second moments",
                      tradeoff="the reference", source="Kingma & Ba 2015; torch.optim.Adam"),
        OptimizerSpec(name="adamw", states=2, description="AdamW: first and second moments",
                      tradeoff="the reference",
                      source="Loshchilov & Hutter 2019; torch.optim.AdamW (exp_avg, exp_avg_sq)"),
        OptimizerSpec(name="lamb", states=2,
                      description="LAMB: Adam's two moments and a per-tensor trust ratio",
                      tradeoff="as Adam in memory; more passes per step (norms of the weights "
                               "and the update)",
                      source="You et al. 2020 (arXiv 1904.00962); apex.optimizers.FusedLAMB "
                             "(exp_avg, exp_avg_sq)"),
        OptimizerSpec(name="adafactor", states=0, kind="factored",
                      description="Adafactor without momentum: row and column second-moment "
                                  "factors for each matrix, full second moment for vectors",
                      tradeoff="factored second moment, no momentum: may need tuning",
                      source="Shazeer & Stern 2018; transformers.optimization.Adafactor "
                             "(beta1=None by default)"),
        OptimizerSpec(name="adamw-8bit", states=2, kind="8bit",
                      description="bitsandbytes AdamW8bit: two uint8 states with one fp32 absmax "
                                  "per 256-element block; tensors under 4096 elements stay 32-bit",
                      tradeoff="8-bit states: matches 32-bit Adam in the authors' experiments",
                      source="Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization; "
                             "bitsandbytes Optimizer8bit (blocks of 256, min_8bit_size=4096)"),
        OptimizerSpec(name="paged-adamw-8bit", states=2, kind="8bit", paged=True,
                      description="bitsandbytes PagedAdamW8bit: AdamW8bit's states, those of "
                                  "parameters of 100,000 elements or more in CUDA managed memory",
                      tradeoff="8-bit states; paged out to host memory under GPU memory pressure",
                      source="bitsandbytes Optimizer8bit.get_state_buffer: is_paged and "
                             "p.numel() >= 1e5 -> F.get_paged (cget_managed_ptr); else "
                             "torch.zeros_like on the device"),
        OptimizerSpec(name="lion", states=1, description="Lion: one momentum buffer",
                      tradeoff="needs a smaller learning rate than AdamW",
                      source="Chen et al. 2023, Symbolic Discovery of Optimization Algorithms"),
        OptimizerSpec(name="adagrad", states=1, description="Adagrad: a running sum of squares",
                      tradeoff="decaying effective learning rate",
                      source="torch.optim.Adagrad (state 'sum')"),
        OptimizerSpec(name="rmsprop", states=1, description="RMSprop: a running mean of squares "
                                                            "(no momentum buffer at momentum=0)",
                      tradeoff="no momentum by default",
                      source="torch.optim.RMSprop (state 'square_avg')"),
    )
}

_BNB_BLOCK = 256
_BNB_MIN_8BIT_SIZE = 4096
#: bitsandbytes pages the states of parameters of at least this many elements.
BNB_MIN_PAGED_SIZE = 100_000


def get_optimizer(name: str) -> OptimizerSpec:
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise UnknownNameError("optimizer", name, OPTIMIZERS,
                               hint="optimizers: " + ", ".join(OPTIMIZERS)) from None


def optimizer_state_bytes(opt: OptimizerSpec, tensors: tuple[ParamTensor, ...] | None,
                          n_params: int, state_bytes: int) -> tuple[int, str | None]:
    """Bytes of optimizer state for the trainable parameters.

    ``tensors`` are the trainable parameter tensors when shapes are known, else None (then
    ``n_params`` is used and shape-dependent optimizers state an assumption, returned as a note).
    ``state_bytes`` is the bytes of one 32-bit-or-16-bit state element chosen by the recipe.
    """
    if opt.kind == "plain":
        return opt.states * state_bytes * n_params, None
    if opt.kind == "8bit":
        if tensors is None:
            per = 1 + 4 / _BNB_BLOCK  # uint8 state + fp32 absmax per block
            return math.ceil(opt.states * per * n_params), (
                "shapes unknown: every tensor assumed large enough for 8-bit states")
        total = 0
        for t in tensors:
            n = t.numel
            if n < _BNB_MIN_8BIT_SIZE:
                total += opt.states * 4 * n * t.count
            else:
                blocks = -(-n // _BNB_BLOCK)
                total += opt.states * (n + 4 * blocks) * t.count
        return total, None
    # factored (Adafactor)
    if tensors is None:
        return state_bytes * n_params, (
            "shapes unknown: Adafactor assumed unfactored (an upper bound, 1 state per parameter)")
    total = 0
    for t in tensors:
        if len(t.shape) >= 2:
            rows = math.prod(t.shape[:-1])
            cols = math.prod(t.shape[:-2]) * t.shape[-1]
            total += (rows + cols) * state_bytes * t.count
        else:
            total += t.numel * state_bytes * t.count
    return total, None


# --------------------------------------------------------------------------------------------------
# Inference weight formats

#: GGML block types: (bytes per block, elements per block). From ggml's block structs.
_GGML = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1),
    "Q8_0": (34, 32),    # 32 int8 + fp16 scale
    "Q4_0": (18, 32),    # 16 bytes of nibbles + fp16 scale: 4.5 bits
    "Q5_0": (22, 32),    # 5.5 bits
    "Q5_1": (24, 32),    # 6.0 bits
    "Q4_K": (144, 256),  # 4.5 bits
    "Q5_K": (176, 256),  # 5.5 bits
    "Q6_K": (210, 256),  # 6.5625 bits
}
def _as_stored_ggml(t: ParamTensor, arch: Architecture | None) -> int:
    """Each tensor in the GGML type its .gguf file stores it in (``ParamTensor.dtype``)."""
    if t.dtype is None:
        raise InputError(f"weight format 'gguf' is the per-tensor types of a .gguf file, but "
                         f"tensor {t.name} has no stored type; give a .gguf model or choose "
                         f"another format (q4_k_m, q8_0 ...)")
    return ggml_tensor_bytes(t.dtype, t.shape) * t.count


# When a row length is not a multiple of 256, llama.cpp falls back from k-quants to these.
_GGML_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def _ggml_bytes(gtype: str, shape: tuple[int, ...]) -> int:
    row = shape[-1]
    block_bytes, block = _GGML[gtype]
    if row % block:
        if gtype in _GGML_FALLBACK:
            return _ggml_bytes(_GGML_FALLBACK[gtype], shape)
        return _ggml_bytes("F16", shape)
    return math.prod(shape) // block * block_bytes


@record
class WeightFormat:
    """How weights are stored for inference."""

    name: str
    bits: float
    """Effective bits per quantized weight, scales and zero points included (the figure used when
    the architecture is unknown and every parameter is assumed quantized)."""
    compute_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8"]
    """What the matmuls run in (dequantized formats compute in 16-bit); for a format with a
    ``native_dtype``, what they run in on a SKU without that unit (the dequantizing fallback)."""
    description: str
    convention: str
    """Which tensors stay unquantized, by the format's own tooling."""
    source: str
    _tensor_bytes: Callable[[ParamTensor, Architecture | None], int]
    matmul_weight_bytes: int = 0
    """Bytes per weight element a matmul materializes while it runs, beyond the stored weight:
    bitsandbytes 4-bit dequantizes to 16 bits (2), and with fp32 compute also copies that to
    fp32 (2 + 4). 0: the kernel reads the stored weight (int8/fp8/GPTQ/AWQ kernels, 16-bit).
    (bitsandbytes < 0.45 also transformed each LLM.int8 weight to the col_ampere layout on its
    first matmul, a one-time int8 copy; not modeled: today's kernels read the row-major weight.)"""
    native_dtype: Literal["fp4", "fp8"] | None = None
    """The tensor-core dtype the blocks' GEMMs run at where the SKU has the unit the format
    needs (:func:`gemm_dtype`): ``fp4`` for NVFP4/MXFP4 (both operands in 4 bits), ``fp8`` for
    MXFP8. None: always ``compute_dtype``."""
    native_archs: tuple[str, ...] = ()
    """The architectures whose tensor cores take the format's block scales (NVFP4's e4m3 per 16:
    Blackwell; the OCP MX e8m0 per 32: Blackwell and CDNA 4)."""

    def tensor_bytes(self, t: ParamTensor, arch: Architecture | None = None) -> int:
        """Bytes of all ``t.count`` copies of one parameter tensor in this format."""
        return self._tensor_bytes(t, arch)


def _dense(nbytes: int) -> Callable[[ParamTensor, Architecture | None], int]:
    return lambda t, arch: t.total * nbytes


def _in_blocks(t: ParamTensor) -> bool:
    """A matmul weight inside the transformer blocks (what quantizers convert)."""
    return t.linear and t.component in ("attention", "mlp", "experts")


def _groupwise(bits: int, group: int, scale_bits: int, zero_bits: int,
               per_in_bits: int = 0) -> Callable[[ParamTensor, Architecture | None], int]:
    """Packed ``bits``-bit weights, one scale (+ zero point) per ``group`` inputs per output, and
    optionally ``per_in_bits`` per input row (GPTQ's g_idx). Unquantized tensors in 16-bit."""

    def f(t: ParamTensor, arch: Architecture | None) -> int:
        if not _in_blocks(t):
            return t.total * 2
        out, inp = t.out_features, t.in_features
        groups = -(-inp // group)
        nbits = out * inp * bits + out * groups * (scale_bits + zero_bits) + inp * per_in_bits
        return -(-nbits // 8) * t.count * t.matrices

    return f


def _bnb_int8(t: ParamTensor, arch: Architecture | None) -> int:
    # LLM.int8(): int8 weight + one fp32 scale per output row (SCB); lm_head kept in 16-bit.
    if t.linear and t.component != "head" and t.component != "embeddings":
        out = t.out_features
        return (t.numel + 4 * out * t.matrices) * t.count
    return t.total * 2


def _bnb_nf4(double_quant: bool) -> Callable[[ParamTensor, Architecture | None], int]:
    # NF4 packs two weights per byte with an absmax per 64 weights: fp32 (4.5 bits), or with
    # double quantization an 8-bit absmax plus one fp32 scale per 256 absmax values.
    def f(t: ParamTensor, arch: Architecture | None) -> int:
        if not (t.linear and t.component not in ("head", "embeddings")):
            return t.total * 2
        n = t.numel
        blocks = -(-n // 64)
        if double_quant:
            scale = blocks * 1 + (-(-blocks // 256)) * 4 + 4  # + the nested offset
        else:
            scale = blocks * 4
        return (-(-n // 2) + scale) * t.count

    return f


def _fp8(t: ParamTensor, arch: Architecture | None) -> int:
    # Per-tensor-scaled fp8 (e4m3) linears in the blocks; embeddings, head and norms in 16-bit.
    if _in_blocks(t):
        return (t.numel + 4) * t.count
    return t.total * 2


def _fp8_block(t: ParamTensor, arch: Architecture | None) -> int:
    # DeepSeek-V3's checkpoint format: e4m3 linears in the blocks with one fp32 scale per
    # 128 x 128 block of each matrix (weight_scale_inv); routers, embeddings, head, norms 16-bit.
    if _in_blocks(t):
        blocks = -(-t.out_features // 128) * -(-t.in_features // 128) * t.matrices
        return (t.numel + 4 * blocks) * t.count
    return t.total * 2


def _mxfp4(t: ParamTensor, arch: Architecture | None) -> int:
    # OCP MX FP4: e2m1 values (two per byte) and one e8m0 scale byte per 32 along the input.
    # A checkpoint shipped in MXFP4 (gpt-oss) converts its experts only; applied to any other
    # model the format converts the linear layers of the blocks.
    shipped = arch is not None and arch.checkpoint_format == "mxfp4"
    if (t.linear and t.component == "experts") if shipped else _in_blocks(t):
        per_row = -(-t.in_features // 2) + -(-t.in_features // 32)
        return per_row * t.out_features * t.matrices * t.count
    return t.total * 2


def _nvfp4(t: ParamTensor, arch: Architecture | None) -> int:
    # NVFP4: e2m1 values (two per byte), one e4m3 scale byte per 16 along the input, and one fp32
    # scale per tensor (the second level); embeddings, head and norms in 16-bit (ModelOpt).
    if _in_blocks(t):
        per_row = -(-t.in_features // 2) + -(-t.in_features // 16)
        return (per_row * t.out_features + 4) * t.matrices * t.count
    return t.total * 2


def _mxfp8(t: ParamTensor, arch: Architecture | None) -> int:
    # OCP MX FP8: e4m3 values and one e8m0 scale byte per 32 along the input.
    if _in_blocks(t):
        per_row = t.in_features + -(-t.in_features // 32)
        return per_row * t.out_features * t.matrices * t.count
    return t.total * 2


def _fp8_channel(t: ParamTensor, arch: Architecture | None) -> int:
    # e4m3 linears in the blocks with one fp32 scale per output channel (llm-compressor's
    # FP8_DYNAMIC: channel-wise weights, dynamic per-token activations).
    if _in_blocks(t):
        return (t.numel + 4 * t.out_features * t.matrices) * t.count
    return t.total * 2


_GGUF_DOWN = ("down_proj", "w2", "dense_4h_to_h", "fc2")
_GGUF_FUSED_QKV = ("qkv_proj", "query_key_value", "c_attn")


def _use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's layer-position rule: first and last eighth, and every third layer between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _gguf_mix_type(t: ParamTensor, arch: Architecture, i: int, default: str) -> str:
    """The Q4_K_M type of a linear weight in layer ``i``."""
    more = _use_more_bits(i, arch.num_layers)
    if t.module == "v_proj":
        if arch.num_experts == 8:
            return "Q8_0"          # "for the 8-expert model, bumping this to Q8_0 trades ~128MB"
        if more:
            return "Q6_K"
        # llama.cpp's LLM_TYPE_70B (llama arch, 80 layers, GQA) gets Q5_K attn_v.
        is_70b = (arch.family in ("llama", "mistral") and arch.num_layers == 80
                  and arch.num_kv_heads < arch.num_heads)
        return "Q5_K" if is_70b else default
    if t.module in _GGUF_DOWN or (t.module == "c_proj" and t.component == "mlp"):
        return "Q6_K" if more else default
    if t.module in _GGUF_FUSED_QKV:
        return "Q5_K"
    return default


def _gguf(default: str, mix: bool) -> Callable[[ParamTensor, Architecture | None], int]:
    """llama.cpp's type choice per tensor (src/llama-quant.cpp, llama_tensor_get_type)."""

    def f(t: ParamTensor, arch: Architecture | None) -> int:
        if len(t.shape) < 2:
            return t.total * 4                       # 1-D tensors (norms, biases) stay F32
        is_output = t.component == "head" or (
            arch is not None and arch.tie_word_embeddings and t.component == "embeddings"
            and t.module in ("embed_tokens", "wte", "word_embeddings", "embed_in"))
        if is_output:
            falcon = arch is not None and arch.family == "falcon"
            gtype = "Q8_0" if (default == "Q8_0" or falcon) else "Q6_K"
            return _ggml_bytes(gtype, t.shape) * t.count
        n = arch.num_layers if arch is not None else 0
        if not mix or arch is None or not t.linear or t.count % n:
            return _ggml_bytes(default, t.shape) * t.count
        per_layer = t.count // n
        return per_layer * sum(_ggml_bytes(_gguf_mix_type(t, arch, i, default), t.shape)
                               for i in range(n))

    return f


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    w.name: w
    for w in (
        WeightFormat(name="fp32", bits=32, compute_dtype="fp32", description="32-bit float",
                     convention="every tensor", source="-", _tensor_bytes=_dense(4)),
        WeightFormat(name="bf16", bits=16, compute_dtype="bf16", description="bfloat16",
                     convention="every tensor", source="-", _tensor_bytes=_dense(2)),
        WeightFormat(name="fp16", bits=16, compute_dtype="fp16", description="float16",
                     convention="every tensor", source="-", _tensor_bytes=_dense(2)),
        WeightFormat(name="fp8", bits=8, compute_dtype="fp8",
                     description="fp8 e4m3 weights with a per-tensor fp32 scale",
                     convention="linear layers of the blocks; embeddings, head, norms in 16-bit",
                     source="Micikevicius et al. 2022, FP8 Formats for Deep Learning; "
                            "vLLM/llm-compressor FP8 per-tensor scheme",
                     _tensor_bytes=_fp8),
        WeightFormat(name="fp8-block", bits=8 + 32 / (128 * 128), compute_dtype="fp8",
                     description="fp8 e4m3 weights with an fp32 scale per 128 x 128 block "
                                 "(DeepSeek-V3's checkpoint format)",
                     convention="linear layers of the blocks; routers, embeddings, head, norms "
                                "in 16-bit",
                     source="DeepSeek-V3 technical report sec. 3.3 (block-wise quantization); "
                            "its config.json quantization_config (weight_block_size [128, 128])",
                     _tensor_bytes=_fp8_block),
        WeightFormat(name="fp8-channel", bits=8, compute_dtype="fp8",
                     description="fp8 e4m3 weights with an fp32 scale per output channel, "
                                 "activations scaled per token (W8A8)",
                     convention="linear layers of the blocks; embeddings, head, norms in 16-bit",
                     source="llm-compressor FP8_DYNAMIC scheme (channel-wise weight, dynamic "
                            "per-token activation); vLLM CompressedTensorsW8A8Fp8",
                     _tensor_bytes=_fp8_channel),
        WeightFormat(name="mxfp4", bits=4.25, compute_dtype="bf16",
                     description="OCP MX FP4: e2m1 weights with an e8m0 scale per 32 values; "
                                 "FP4 GEMMs on Blackwell and CDNA 4 (activations in MXFP4 too), "
                                 "dequantized to bf16 elsewhere (W4A16)",
                     convention="a checkpoint shipped in MXFP4 (gpt-oss): its experts only; "
                                "otherwise the linear layers of the blocks",
                     source="OCP Microscaling Formats (MX) v1.0 spec; gpt-oss model card and "
                            "config.json quantization_config (modules_to_not_convert)",
                     _tensor_bytes=_mxfp4, native_dtype="fp4",
                     native_archs=("Blackwell", "CDNA 4")),
        WeightFormat(name="nvfp4", bits=4 + 8 / 16, compute_dtype="bf16",
                     description="NVFP4: e2m1 weights with an e4m3 scale per 16 values and an "
                                 "fp32 scale per tensor; FP4 GEMMs on Blackwell (W4A4), "
                                 "dequantized to bf16 elsewhere (W4A16)",
                     convention="linear layers of the blocks; embeddings, head, norms in 16-bit",
                     source="NVIDIA, Introducing NVFP4 for Efficient and Accurate Low-Precision "
                            "Inference (developer blog, 2025); TensorRT Model Optimizer NVFP4 "
                            "(weight_scale e4m3 per 16, weight_scale_2 fp32)",
                     _tensor_bytes=_nvfp4, native_dtype="fp4", native_archs=("Blackwell",)),
        WeightFormat(name="mxfp8", bits=8 + 8 / 32, compute_dtype="bf16",
                     description="OCP MX FP8: e4m3 weights with an e8m0 scale per 32 values; FP8 "
                                 "GEMMs on Blackwell and CDNA 4, dequantized to bf16 elsewhere",
                     convention="linear layers of the blocks; embeddings, head, norms in 16-bit",
                     source="OCP Microscaling Formats (MX) v1.0 spec (MXFP8 E4M3, block 32)",
                     _tensor_bytes=_mxfp8, native_dtype="fp8",
                     native_archs=("Blackwell", "CDNA 4")),
        WeightFormat(name="w4a16", bits=4 + 16 / 128, compute_dtype="bf16",
                     description="int4 weights, symmetric, a bf16 scale per 128 inputs; 16-bit "
                                 "activations: a dequantizing GEMM (Marlin, Machete)",
                     convention="linear layers of the blocks; embeddings and head in 16-bit",
                     source="llm-compressor W4A16 preset scheme (int4, symmetric, group 128); "
                            "vLLM Marlin / Machete mixed-input GEMMs",
                     _tensor_bytes=_groupwise(4, 128, 16, 0)),
        WeightFormat(name="w4a8", bits=4 + 16 / 128, compute_dtype="fp8",
                     description="int4 weights, a 16-bit scale per 128 inputs, fp8 activations: "
                                 "the weights widen to fp8 in the kernel and the GEMM runs at the "
                                 "fp8 rate (Hopper, Ada, Blackwell)",
                     convention="linear layers of the blocks; embeddings and head in 16-bit",
                     source="TensorRT Model Optimizer W4A8_AWQ (int4 group 128, fp8 "
                            "activations); TensorRT-LLM W4A8 GEMM; vLLM CUTLASS W4A8 (Hopper)",
                     _tensor_bytes=_groupwise(4, 128, 16, 0)),
        WeightFormat(name="int8", bits=8, compute_dtype="int8",
                     description="LLM.int8(): int8 weights, one fp32 scale per output channel",
                     convention="every nn.Linear except the LM head; embeddings in 16-bit",
                     source="Dettmers et al. 2022, LLM.int8(); bitsandbytes Int8Params (SCB)",
                     _tensor_bytes=_bnb_int8),
        WeightFormat(name="nf4", bits=4.5, compute_dtype="bf16",
                     description="bitsandbytes NF4, block 64, fp32 absmax per block",
                     convention="every nn.Linear except the LM head; embeddings in 16-bit",
                     source="Dettmers et al. 2023, QLoRA; bitsandbytes Params4bit (blocksize 64)",
                     _tensor_bytes=_bnb_nf4(False), matmul_weight_bytes=2),
        WeightFormat(name="fp4", bits=4.5, compute_dtype="fp32",
                     description="bitsandbytes 4-bit as load_in_4bit=True leaves it: FP4, block "
                                 "64, fp32 absmax per block, matmuls in fp32",
                     convention="every nn.Linear except the LM head; embeddings in 16-bit",
                     source="transformers BitsAndBytesConfig defaults (bnb_4bit_quant_type='fp4', "
                            "bnb_4bit_compute_dtype=None -> float32); bitsandbytes Linear4bit "
                            "(x.to(compute_dtype)) and MatMul4Bit (dequantize_4bit(...).to(A.dtype))",
                     _tensor_bytes=_bnb_nf4(False), matmul_weight_bytes=2 + 4),
        WeightFormat(name="nf4-dq", bits=4 + 8 / 64 + 32 / (64 * 256), compute_dtype="bf16",
                     description="NF4 with double quantization: 8-bit absmax per 64 weights, fp32 "
                                 "scale per 256 absmax values",
                     convention="every nn.Linear except the LM head; embeddings in 16-bit",
                     source="Dettmers et al. 2023, QLoRA sec. 3 (Double Quantization: 0.127 "
                            "bits/parameter of constants)",
                     _tensor_bytes=_bnb_nf4(True), matmul_weight_bytes=2),
        WeightFormat(name="gptq-4bit", bits=4 + (16 + 4) / 128, compute_dtype="fp16",
                     description="GPTQ 4-bit, group 128: packed int4, fp16 scale and 4-bit zero "
                                 "per group, int32 g_idx per input",
                     convention="linear layers of the blocks; embeddings and head in fp16",
                     source="Frantar et al. 2023, GPTQ; AutoGPTQ QuantLinear (qweight, qzeros, "
                            "scales, g_idx)",
                     _tensor_bytes=_groupwise(4, 128, 16, 4, per_in_bits=32)),
        WeightFormat(name="awq-4bit", bits=4 + (16 + 4) / 128, compute_dtype="fp16",
                     description="AWQ 4-bit, group 128: packed int4, fp16 scale and 4-bit zero "
                                 "per group",
                     convention="linear layers of the blocks; embeddings and head in fp16",
                     source="Lin et al. 2024, AWQ; AutoAWQ WQLinear_GEMM (qweight, qzeros, scales)",
                     _tensor_bytes=_groupwise(4, 128, 16, 4)),
        WeightFormat(name="q8_0", bits=8.5, compute_dtype="fp16",
                     description="GGUF Q8_0: blocks of 32 int8 with an fp16 scale (34 bytes)",
                     convention="llama.cpp: 2-D tensors Q8_0, 1-D tensors F32",
                     source="ggml block_q8_0; llama.cpp llama_tensor_get_type",
                     _tensor_bytes=_gguf("Q8_0", False)),
        WeightFormat(name="q4_0", bits=4.5, compute_dtype="fp16",
                     description="GGUF Q4_0: blocks of 32 4-bit weights with an fp16 scale "
                                 "(18 bytes, 4.5 bits per weight)",
                     convention="llama.cpp: 2-D tensors Q4_0, output head Q6_K, 1-D tensors F32",
                     source="ggml block_q4_0; llama.cpp llama_tensor_get_type",
                     _tensor_bytes=_gguf("Q4_0", False)),
        WeightFormat(name="q4_k_m", bits=4.5 * 0.8 + 6.5625 * 0.2, compute_dtype="fp16",
                     description="GGUF Q4_K_M: Q4_K super-blocks (4.5 bits), with attn_v and "
                                 "ffn_down in Q6_K (6.5625 bits) on the use_more_bits layers",
                     convention="llama.cpp: Q4_K; attn_v/ffn_down Q6_K on first/last eighth and "
                                "every third layer; output Q6_K; 1-D tensors F32. Without an "
                                "architecture: 80% Q4_K / 20% Q6_K assumed",
                     source="ggml block_q4_K/block_q6_K; llama.cpp llama_tensor_get_type",
                     _tensor_bytes=_gguf("Q4_K", True)),
    )
}

#: Formats a model can only be in when it was read from such a file: each tensor keeps the type
#: the file stores it in. Not in WEIGHT_FORMATS, whose formats apply to any model (the solver
#: and the property tests go through those); :func:`get_weight_format` finds both.
STORED_FORMATS: dict[str, WeightFormat] = {
    # bits: only a stand-in; weights_bytes_in_format refuses a model without per-tensor types,
    # and the speed model is not given this format. 16 is the widest type llama.cpp quantizes from.
    "gguf": WeightFormat(name="gguf", bits=16, compute_dtype="fp16",
                         description="as stored in a .gguf file: each tensor in its own GGML "
                                     "type (Q4_K, Q6_K, Q8_0, F16, F32 ...)",
                         convention="per tensor, read from the file's header",
                         source="the file's tensor infos; ggml type_traits block sizes",
                         _tensor_bytes=_as_stored_ggml),
}

def gemm_dtype(fmt: WeightFormat, architecture: str, supports: Callable[[str], bool],
               *, shipped: str | None = None) -> str:
    """The dtype ``fmt``'s block GEMMs run at on a SKU of ``architecture`` (``supports``: whether
    it has a peak for a dtype): ``native_dtype`` where the tensor cores take the format's scales
    (NVFP4 on Blackwell; MXFP4/MXFP8 on Blackwell and CDNA 4), else ``compute_dtype`` -- Hopper
    runs MXFP4 and NVFP4 as a W4A16 dequantizing GEMM at the bf16 rate, reading the packed
    weights. A checkpoint that ships the format for its weights only (``shipped``: gpt-oss's
    MXFP4 experts, whose engines keep 16-bit activations) stays ``compute_dtype`` everywhere."""
    native = fmt.native_dtype
    if native is None or shipped == fmt.name or architecture not in fmt.native_archs \
            or not supports(native):
        return fmt.compute_dtype
    return native


#: The inference weight format that means "the checkpoint's own" (the Job's default).
INFER_AUTO = "auto"

# Where each engine loads a checkpoint's shipped format as such (else it dequantizes to bf16 or
# refuses), by GPU architecture (the catalog's ``architecture``):
# - transformers 5.25 (quantizers/quantizer_finegrained_fp8.py: FP8 needs compute capability
#   >= 8.9, else "default to dequantizing the model to bf16"; quantizer_mxfp4.py: MXFP4 needs
#   >= 7.5, else dequantized to bf16); AMD CDNA 3/4 report >= 9.4 through ROCm.
# - vLLM: FP8 W8A8 on Ada, Hopper and AMD (docs.vllm.ai v0.9.2 features/quantization/
#   supported_hardware), FP8 Marlin (W8A16) on Ampere for dense models only ("vLLM supports FP8
#   MoE models only on Ada Lovelace or Hopper GPUs", huggingface.co/neuralmagic/
#   DeepSeek-Coder-V2-Instruct-FP8/discussions/1); gpt-oss's MXFP4 on H100/H200/B200/MI300x+
#   and on Ampere through Marlin MXFP4 MoE (vllm-project/recipes OpenAI/GPT-OSS.md, read
#   2026-12). SGLang and TensorRT-LLM: the FP8 tensor-core GPUs (no fallback assumed).
#: The architectures whose tensor (matrix) cores run FP8 GEMMs, in display order: the loaders'
#: FP8 set above, also named by the inference refusal of an FP8 format
#: (compute.step.infer_precision).
FP8_GEMM_ARCHS = ("Hopper", "Ada Lovelace", "Blackwell", "CDNA 3", "CDNA 4")
_FP8_ARCHS = frozenset(FP8_GEMM_ARCHS)
_MXFP4_HF_ARCHS = frozenset({"Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell",
                             "CDNA 2", "CDNA 3", "CDNA 4"})
_MXFP4_VLLM_ARCHS = frozenset({"Ampere", "Hopper", "Blackwell", "CDNA 3", "CDNA 4"})
_MXFP4_OTHER_ARCHS = frozenset({"Hopper", "Blackwell"})


def loads_shipped(arch: Architecture, engine: str | None, gpu_arch: str) -> bool:
    """Whether ``engine`` (None/``auto``: transformers) loads ``arch``'s checkpoint in its
    shipped format on a GPU of ``gpu_arch`` (an empty name: not known, assumed it does)."""
    fmt = arch.checkpoint_format
    if fmt is None:
        return False
    if not gpu_arch:
        return True
    engine = engine or "auto"
    if fmt in ("fp8", "fp8-block"):
        moe = any(t.component == "experts" for t in arch.tensors)
        return gpu_arch in _FP8_ARCHS or (engine == "vllm" and gpu_arch == "Ampere" and not moe)
    if fmt == "mxfp4":
        table = (_MXFP4_VLLM_ARCHS if engine == "vllm" else _MXFP4_OTHER_ARCHS
                 if engine in ("sglang", "trt-llm") else _MXFP4_HF_ARCHS)
        return gpu_arch in table
    return False


def resolve_infer_precision(name: str, arch: Architecture | None, engine: str | None = None,
                            gpu_arch: str | tuple[str, ...] | None = None) -> str:
    """The weight format an inference plan uses for the Job's ``infer_precision`` ``name``:
    itself when given; for ``auto`` (the default) the checkpoint's shipped format
    (``arch.checkpoint_format``: gpt-oss's mxfp4, DeepSeek-V3's fp8-block) where ``engine``
    loads it as such on every GPU of ``gpu_arch`` (None: no GPU named), else bf16 -- what
    transformers and the serving engines do with a quantized checkpoint. The one home of
    that rule: every reader of ``Job.infer_precision`` resolves through it."""
    if name != INFER_AUTO:
        return name
    if arch is None or arch.checkpoint_format is None:
        return "bf16"
    archs = (gpu_arch,) if gpu_arch is None or isinstance(gpu_arch, str) else tuple(gpu_arch)
    if all(loads_shipped(arch, engine, a or "") for a in archs):
        return arch.checkpoint_format
    return "bf16"


#: Inference formats ordered by effective bits (largest first).
INFERENCE_ORDER = tuple(sorted(WEIGHT_FORMATS, key=lambda n: -WEIGHT_FORMATS[n].bits))


def get_weight_format(name: str) -> WeightFormat:
    """A format of WEIGHT_FORMATS, or of STORED_FORMATS (``gguf``); ``auto`` is the Job's
    unresolved default (:func:`resolve_infer_precision` names the format)."""
    if name == INFER_AUTO:
        raise InputError("weight format 'auto' is resolved against the model's checkpoint "
                         "(formats.resolve_infer_precision) before its bytes are read",
                         field="infer_precision", value=name)
    fmt = WEIGHT_FORMATS.get(name) or STORED_FORMATS.get(name)
    if fmt is None:
        raise UnknownNameError("weight format", name, [*WEIGHT_FORMATS, *STORED_FORMATS],
                               hint="inference formats: " + ", ".join(WEIGHT_FORMATS)
                               + "; gguf for a .gguf file's own types")
    return fmt


#: The parameters transformers 5.25 keeps in fp32 when a model is built or loaded in bf16 or
#: fp16 (``_keep_in_fp32_modules_strict``, applied by ``PreTrainedModel._get_dtype_plan``), by
#: family, as the leaf module whose ``weight`` it is: the MoE router's ``gate.weight`` in
#: models/deepseek_v2/modeling_deepseek_v2.py (["gate.weight"]), deepseek_v3 and glm4_moe
#: (["e_score_correction_bias", "gate.weight"]; the bias is a buffer, already fp32 in
#: ``buffer_bytes``). No other planned family has a strict list; gpt_oss's non-strict
#: ``_keep_in_fp32_modules`` (its norms, upcast only under fp16) is not modelled.
FP32_KEPT_STRICT: Mapping[str, frozenset[str]] = MappingProxyType({
    "deepseek_v2": frozenset({"gate"}), "deepseek_v3": frozenset({"gate"}),
    "glm4_moe": frozenset({"gate"}),
})

#: Engines whose weights come from transformers' own model classes and loader, so the fp32 kept
#: above applies. vLLM and SGLang build their own router (vLLM's GateLinear, a ReplicatedLinear
#: with params_dtype left to the model dtype: vllm-project/vllm@002d6073
#: vllm/model_executor/models/deepseek_v2.py, DeepseekV2MoE) and load the checkpoint's bf16
#: gate.weight as such; torchtitan, Megatron and the others run their own model code.
HF_LOADED_ENGINES = frozenset({"auto", "transformers", "deepspeed", "fsdp2"})


def fp32_kept(t: ParamTensor, arch: Architecture | None, engine: str | None = None) -> bool:
    """Whether ``engine`` (None: transformers) holds ``t`` in fp32 under a 16-bit dtype
    (:data:`FP32_KEPT_STRICT`)."""
    if arch is None or (engine or "auto") not in HF_LOADED_ENGINES:
        return False
    kept = FP32_KEPT_STRICT.get(arch.family)
    return kept is not None and t.module in kept and t.name.endswith(".gate.weight")


def fp32_kept_params(tensors: tuple[ParamTensor, ...] | None, arch: Architecture | None,
                     engine: str | None = None) -> int:
    """Parameters of ``tensors`` that ``engine`` keeps in fp32 under a 16-bit dtype."""
    return sum(t.total for t in tensors or () if fp32_kept(t, arch, engine))


def weights_bytes_in_format(fmt: WeightFormat, tensors: tuple[ParamTensor, ...],
                            arch: Architecture | None, n_params: int,
                            engine: str | None = None) -> int:
    """Bytes of all weights in ``fmt``: per tensor when the tensors are known, else every
    parameter at the format's effective bits. A tensor the format leaves in 16-bit that
    ``engine`` (None: transformers) keeps in fp32 (:func:`fp32_kept`) counts 4 bytes each."""
    if not tensors:
        if fmt.name == "gguf":
            raise InputError("weight format 'gguf' needs a model read from a .gguf file (its "
                             "per-tensor types); this model has no tensors")
        return math.ceil(n_params * fmt.bits / 8)
    total = 0
    for t in tensors:
        b = fmt.tensor_bytes(t, arch)
        if fmt.name != "gguf" and b == t.total * 2 and fp32_kept(t, arch, engine):
            b = t.total * 4
        total += b
    return total
