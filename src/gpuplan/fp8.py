"""Narrow-format training recipes (FP8, MXFP8, NVFP4) as data: which GEMMs run narrow, on which
GPUs, what memory each keeps and what its casts cost.

Every recipe names the implementation it describes and its source file at a pinned commit:

* Transformer Engine, ``transformer_engine/common/recipe/__init__.py`` (NVIDIA/TransformerEngine
  at 000b637ede9c221d01067e5cdf4f0953da3ab7cd): ``DelayedScaling`` (``amax_history_len`` 1024,
  ``margin`` 0, ``fp8_format`` HYBRID = e4m3 forward / e5m2 backward), ``Float8CurrentScaling``
  (HYBRID, per-tensor scale of the current tensor), ``Float8BlockScaling`` (fp32 scales per
  block), ``MXFP8BlockScaling`` (e4m3, an e8m0 scale per 32 values; rowwise and columnwise copies
  quantized separately from the high-precision tensor) and ``NVFP4BlockScaling`` (e2m1, an e4m3
  scale per 16 values and an fp32 scale per tensor).
* Megatron-LM ``megatron/training/arguments.py`` (``_add_transformer_engine_args``):
  ``--fp8-format {e4m3,hybrid}``, ``--fp8-recipe {tensorwise,delayed,mxfp8,blockwise}`` (default
  delayed), ``--fp8-amax-history-len`` (default 1: Megatron's, not TE's 1024),
  ``--fp8-param-gather``, ``--first-last-layers-bf16``, ``--fp4-format e2m1``, ``--fp4-recipe
  nvfp4``.
* torchao ``torchao/float8/config.py`` (pytorch/ao at 024fe94fd86a94f43be1f0dd62201bd92a313dcb):
  tensorwise (dynamic per-tensor scaling, cuBLAS) and rowwise (axiswise scaling, CUTLASS rowwise
  kernel); ``enable_fsdp_float8_all_gather`` only under tensorwise. What torchao's
  ``Float8Linear`` saves of its input for the backward depends on the recipe and the release
  (:data:`TORCHAO_SAVED_INPUT`): up to torchao 0.8 (024fe94f, and eab345c, the one torchtitan's
  published float8 runs used) tensorwise saves the FP8 input it cast for the forward GEMM,
  rowwise the 16-bit input, cast again in the backward; from 0.9 both save the 16-bit input.
* DeepSeek-V3 technical report (arXiv 2412.19437, sec. 3.3): 1 x 128 tiles for activations,
  128 x 128 blocks for weights, fp32 scales; the embedding, output head, MoE gating, norms and
  attention stay in BF16/FP32.

The memory terms are per element of the blocks' linear weights (the embedding and the head stay
16-bit in every recipe here, as ``compute.time`` already times them).
"""

from __future__ import annotations

from typing import Literal

from ._record import record
from .errors import InputError, opt, shown

__all__ = ["narrow_blocks", "NarrowRecipe", "NARROW_RECIPES", "DEFAULT_FP8_BY_ENGINE", "narrow_recipe",
           "check_narrow_on", "fp8_weight_bytes", "amax_history_bytes", "cast_bytes_per_element",
           "resolve_plain_fp8", "FP8_ARCHITECTURES", "BLACKWELL",
           "gathered_bytes_per_element", "narrow_elements", "columnwise_bytes_per_element",
           "gathers_rowwise_only", "keeps_columnwise", "weight_cast_bytes_per_element",
           "non_tn_fp8_gemm", "columnwise_kept", "weight_copies"]

#: GPU architectures (the catalog's ``architecture`` field) with FP8 tensor cores.
FP8_ARCHITECTURES = ("Hopper", "Ada Lovelace", "Blackwell")
#: ... and with MXFP8 / NVFP4 (block-scaled) tensor cores: Blackwell (sm_100 and later).
BLACKWELL = ("Blackwell",)
#: Architectures whose FP8 GEMMs take only the TN layout (cuBLASLt on sm_89/sm_90): Transformer
#: Engine keeps each FP8 weight's transpose beside it for the dgrad/wgrad GEMMs. The fallback of
#: :func:`non_tn_fp8_gemm` where no compute capability is known (a custom GPU, a test): by
#: architecture name it cannot tell consumer Blackwell (sm_120, TN-only) from sm_100 (any layout).
_TN_ONLY = ("Hopper", "Ada Lovelace")


@record
class NarrowRecipe:
    """One narrow-format training recipe."""

    name: str
    dtype: Literal["fp8", "fp4"]
    """The tensor-core rate its linear GEMMs run at."""
    implementation: str
    """The class or option that implements it."""
    architectures: tuple[str, ...]
    """GPU architectures that run it."""
    formats: str
    """Element formats forward / backward."""
    scaling: str
    """How scales are chosen and their granularity."""
    act_block: int
    """Elements of an activation or gradient sharing one scale (0: one per tensor)."""
    weight_block: int
    """Elements of a weight sharing one scale (0: one per tensor)."""
    scale_bytes: int
    """Bytes of one scale (fp32 4, e8m0 / e4m3 1)."""
    amax_history: int
    """Amax history entries kept per quantized tensor (delayed scaling), 0 otherwise."""
    caches_weight: bool
    """The narrow weight copy persists across micro-batches (TE's weight cache); False: cast in
    every forward and freed (torchao)."""
    columnwise_copy: Literal["never", "tn-only", "always"]
    """A second (transposed / columnwise-scaled) copy of each narrow weight: ``tn-only`` on
    Hopper/Ada/sm_120 (their FP8 GEMM is TN-only: :func:`non_tn_fp8_gemm`), ``always`` where
    the scales run along one axis (MX, NVFP4: both directions quantized from the high-precision
    tensor; TE's 1 x 128 / 128 x 128 blocks, whose ``Float8BlockQuantizer::create_tensor``
    allocates the transposed ``columnwise_data`` whenever the quantizer has columnwise usage, with
    no architecture test: pytorch/csrc/quantizer.cpp at NVIDIA/TransformerEngine @70f53666 and
    @5671fd36)."""
    saves_narrow_inputs: bool
    """The linear layers save their input in the narrow format for the weight-gradient GEMM
    (TE; torchao's tensorwise up to 0.8: :data:`TORCHAO_SAVED_INPUT`); False: the 16-bit input
    is saved and cast again in the backward (torchao's rowwise)."""
    narrow_gemms: str
    """Which GEMMs run narrow."""
    param_gather: bool
    """Weights can be kept and all-gathered narrow (no 16-bit copy)."""
    engines: tuple[str, ...]
    """gpuplan engines that run it."""
    source: str
    global_scale: bool = False
    """A per-tensor fp32 scale over the block scales, taken from the current tensor's amax
    (NVFP4's second level): one more read of the 16-bit tensor before it is quantized."""
    split_quantize_kernels: int | None = None
    """Kernels Transformer Engine's ``split_quantize`` launches per split when it quantizes a
    grouped linear's input or output gradient, one split per local expert (TE
    transformer_engine/pytorch/csrc/extensions/cast.cpp ``split_quantize`` ->
    ``multi_tensor_quantize_impl`` at NVIDIA/TransformerEngine@
    fe8fad59c9add7f8aa841fed2a0b4087b931856f): 0 where one fused kernel quantizes every split
    (delayed scaling's ``nvte_multi_cast_transpose``), else each split's own quantize --
    current scaling 4 (``nvte_compute_amax_with_config``, which launches ``zero_amax_kernel``
    then ``amax_kernel``: common/recipe/current_scaling.cu launch_amax_kernel;
    ``nvte_compute_scale_from_amax``; ``nvte_quantize_v2``: csrc/quantizer.cpp
    Float8CurrentScalingQuantizer::quantize_impl),
    MXFP8 and 1 x 128 / 128 x 128 blocks 1 (``nvte_quantize_v2``), NVFP4 1 (after one grouped
    amax, ``nvte_group_amax``). None: no split quantize (torchao casts each call's input once)."""
    reduces_amax_over_tp: bool = False
    """Under sequence parallelism the per-tensor amax of a tensor that is quantized on its
    sequence shard and then all-gathered (a column-parallel linear's input in the forward, a
    row-parallel linear's output gradient in the backward) is all-reduced (MAX) over the TP
    group before the quantize kernel, so that every rank's shard takes one scale: Transformer
    Engine's ``Float8CurrentScaling`` and ``NVFP4BlockScaling`` quantizers
    (transformer_engine/pytorch/module/linear.py and layernorm_linear.py
    ``_customize_quantizers_float8_current_scaling`` / ``_customize_quantizers_nvfp4``:
    ``with_amax_reduction``, ``amax_reduction_group = self.tp_group`` when
    ``sequence_parallel`` and ``parallel_mode`` is "column" (input) or "row" (grad output);
    csrc/quantizer.cpp ``Float8CurrentScalingQuantizer::quantize_impl`` and
    ``NVFP4Quantizer::quantize_impl``: the amax kernel, then
    ``amax_reduction_group->allreduce(...)->wait()``, then the scale and the cast on the same
    stream; NVIDIA/TransformerEngine v2.9 @70f53666, unchanged in substance at d0067d0d).
    Delayed scaling takes its scale from past amaxes (one reduction of the whole amax buffer
    per autocast region: :attr:`reduces_amax_per_region`), block and MX scales from each
    block's own values: no per-GEMM reduction."""
    fused_norm_cast: bool = False
    """A ``te.LayerNormLinear`` (Megatron-Core's fused input norm and column-parallel linear:
    the attention's QKV and a dense MLP's up projection) normalizes straight into the narrow
    format: the norm kernel writes the 1-byte element with the scale already known, and no
    separate quantize reads the 16-bit norm output; on Hopper/Ada the transposed copy the
    weight gradient reads is made from the narrow copy (1 byte read, 1 written). Delayed
    scaling only, whose scale comes from past amaxes: Transformer Engine v1.8
    (NVIDIA/TransformerEngine@v1.8, NeMo 24.07's) transformer_engine/pytorch/module/
    layernorm_linear.py forward allocates ``ln_out`` as uint8 under fp8 and
    ``_apply_normalization(..., fp8_out=True)`` runs ``layernorm_fwd_fp8`` / ``rmsnorm_fwd_fp8``;
    its backward runs ``tex.fp8_transpose(ln_out_total)`` before the wgrad GEMM; at
    000b637ede9c221d01067e5cdf4f0953da3ab7cd csrc/extensions/normalization.cpp picks
    ``Impl::FULLY_FUSED`` for the delayed ``Float8Quantizer`` only (current scaling
    ``FUSED_NORM_AMAX_FP8``: the 16-bit norm output, then a quantize; MX and NVFP4 unfused)."""
    gathers_16bit_under: tuple[str, ...] = ()
    """Engines whose parameter all-gather of this recipe (``--fp8-param-gather``) moves the
    16-bit weights and quantizes them after the gather, not the narrow copy: Megatron-Core
    keeps MXFP8 parameters out of its parameter buffer and, with
    ``reuse_grad_buf_for_mxfp8_param_ag`` (which Megatron-Bridge's ``bf16_with_mxfp8_mixed``
    sets with ``fp8_param_gather``: src/megatron/bridge/training/mixed_precision.py at
    NVIDIA-NeMo/Megatron-Bridge@7af9601c (v0.2.0, 25.11) and @21b02e0c (v0.3.0, 26.02);
    MixedPrecisionConfig asserts it under mxfp8 param gather), all-gathers them in BF16 through
    the gradient buffer ("For FP32 weight grads, only half of the buffer is used to store
    params in bf16"), then ``param.data.copy_`` casts each to MXFP8 and zeroes the slice for
    the gradients (megatron/core/distributed/param_and_grad_buffer.py
    ``_ParamAndGradBuffer.__init__`` shared_buffer and ``finish_param_sync``,
    distributed_data_parallel.py ``start_param_sync`` at NVIDIA/Megatron-LM@
    0d8e0714cd29c01e164fe6de9f532182bdffa942, the 25.11 pin, the same at b0cc2706, 26.02's).
    The cast is the once-a-step weight cast already timed; the slice's zeroing (2 B a
    parameter a step) is not."""
    narrow_input_after_gather: bool = False
    """Under sequence parallelism the narrow input a linear saves is the all-gathered one,
    whole: torchao's ``Float8ColwiseParallel`` casts the sequence shard to FP8 before the
    all-gather (torchao/float8/float8_tensor_parallel.py @eab345c) and the matmul function
    saves the gathered ``input_fp8`` it is given. False: Transformer Engine, which saves its
    rank's shard and gathers it again in the backward."""
    reduces_amax_per_region: bool = False
    """Delayed scaling's amax reduction: at the exit of each ``fp8_autocast`` region's forward
    and in the backward of its first module, Transformer Engine concatenates the amaxes of
    every narrow GEMM registered under the recipe, all-reduces them (MAX) over the region's
    amax group on the compute stream (``async_op=False``) and rolls the histories in one bulk
    kernel (NVIDIA/TransformerEngine@v1.8 transformer_engine/pytorch/fp8.py
    ``reduce_and_update_fp8_tensors``, ``fp8_autocast_exit``; module/base.py and linear.py
    ``reduce_and_update_bwd_fp8_tensors``; common/recipe/delayed_scaling.cu ``kernel_bulk``).
    Megatron-Core opens one region per model chunk's forward, its group TP x CP at
    core_r0.8.0 (NVIDIA/Megatron-LM@baf94af3c667248865f23df73b9fb8e2395e6fd0
    megatron/core/transformer/transformer_block.py ``get_amax_reduction_group(
    with_context_parallel=True)``, parallel_state.py: ``_TENSOR_AND_CONTEXT_PARALLEL_GROUP``);
    later Megatron-Core adds the data-parallel ranks unless ``tp_only_amax_red``
    (parallel_state.py at d98e8a64dd), which gpuplan does not charge (a lower bound there)."""


_TE = "NVIDIA/TransformerEngine transformer_engine/common/recipe/__init__.py @000b637e"
_AO = "pytorch/ao torchao/float8/config.py @024fe94f"
_AO_LINEAR = "pytorch/ao torchao/float8/float8_linear.py @eab345c2 (v0.8)"
_ALL3 = "linear layers: forward (fprop), dgrad and wgrad"

#: What torchao's ``Float8Linear`` saves of each linear's input for the weight-gradient GEMM,
#: by recipe and release (pytorch/ao torchao/float8/float8_linear.py):
#:
#: * up to v0.8 (@024fe94f, gpuplan's recipe source, and @eab345c2, 2024-12-20, the torchao
#:   of torchtitan's published float8 runs; benchmarks/validate_speed.py ``_TT_FLOAT8``):
#:   tensorwise ``Float8Linear.forward`` casts the input (``cast_input_to_float8``) before
#:   ``manual_float8_matmul_with_args_in_float8``, whose ``ctx.save_for_backward(input_fp8,
#:   weight_fp8_t)`` keeps the Float8Tensor (1 B an element and one fp32 scale) and whose
#:   backward computes ``mm(grad_output.t(), input_fp8)`` from it: no second cast, only the
#:   column-major layout ``torch._scaled_mm`` takes for mat2 (compute/step.py
#:   ``_torchao_relayout_op``). Rowwise (axiswise) runs ``manual_float8_matmul_with_args_in_hp``:
#:   ``save_for_backward(input_hp, weight_hp_t)``, the 16-bit input, cast again along dim 0 in
#:   the backward (``cast_config_input_for_grad_weight``).
#: * from v0.9 (@12396c64, 2025-01-13, "unify dynamic input and grad_output casting", and at
#:   @36027d82, 2026-08): both recipes run ``matmul_with_hp_or_float8_args``, which saves
#:   ``input_hp`` -- the 16-bit input -- and casts it again in the backward. What
#:   torch.compile's partitioner then keeps is not read here.
#:
#: gpuplan's ``fp8-tensorwise`` and ``fp8-rowwise`` are the v0.8 recipes (their sources and the
#: runs they are validated on); gpuplan has no torchao version to key a later one on.
TORCHAO_SAVED_INPUT = {"fp8-tensorwise": "fp8 (torchao <= 0.8); 16-bit from 0.9",
                       "fp8-rowwise": "16-bit, cast again in the backward"}

NARROW_RECIPES: dict[str, NarrowRecipe] = {r.name: r for r in (
    NarrowRecipe(name="fp8-delayed", dtype="fp8", implementation="te.DelayedScaling",
                 architectures=FP8_ARCHITECTURES, formats="HYBRID: e4m3 fwd / e5m2 bwd",
                 scaling="per tensor, from the max of an amax history of past steps",
                 act_block=0, weight_block=0, scale_bytes=4, amax_history=1024,
                 caches_weight=True, columnwise_copy="tn-only", saves_narrow_inputs=True,
                 narrow_gemms=_ALL3, param_gather=True, engines=("megatron",),
                 source=_TE + " (DelayedScaling: amax_history_len=1024, margin=0)",
                 split_quantize_kernels=0, fused_norm_cast=True, reduces_amax_per_region=True),
    NarrowRecipe(name="fp8-current", dtype="fp8", implementation="te.Float8CurrentScaling",
                 architectures=FP8_ARCHITECTURES, formats="HYBRID: e4m3 fwd / e5m2 bwd",
                 scaling="per tensor, from the tensor's own amax (an extra reduction pass)",
                 act_block=0, weight_block=0, scale_bytes=4, amax_history=0,
                 caches_weight=True, columnwise_copy="tn-only", saves_narrow_inputs=True,
                 narrow_gemms=_ALL3, param_gather=True, engines=("megatron",),
                 source=_TE + " (Float8CurrentScaling); Megatron --fp8-recipe tensorwise; "
                        "NeMo/Megatron-Bridge FP8-CS", split_quantize_kernels=4,
                 reduces_amax_over_tp=True),
    NarrowRecipe(name="fp8-tensorwise", dtype="fp8", implementation="torchao Float8Linear "
                 "(tensorwise, torchao <= 0.8)", architectures=FP8_ARCHITECTURES,
                 formats="e4m3 fwd / e5m2 bwd",
                 scaling="dynamic per tensor", act_block=0, weight_block=0, scale_bytes=4,
                 amax_history=0, caches_weight=False, columnwise_copy="never",
                 saves_narrow_inputs=True, narrow_gemms=_ALL3, param_gather=True,
                 engines=("torchtitan",),
                 source=_AO + " (ALL_TENSORWISE; enable_fsdp_float8_all_gather); the FP8 "
                        "input saved: " + _AO_LINEAR + " manual_float8_matmul_with_args_in_float8",
                 narrow_input_after_gather=True),
    NarrowRecipe(name="fp8-rowwise", dtype="fp8", implementation="torchao Float8Linear "
                 "(rowwise)", architectures=FP8_ARCHITECTURES, formats="e4m3 fwd and bwd",
                 scaling="dynamic per row (axiswise), fp32 scales", act_block=0, weight_block=0,
                 scale_bytes=4, amax_history=0, caches_weight=False, columnwise_copy="never",
                 saves_narrow_inputs=False, narrow_gemms=_ALL3, param_gather=False,
                 engines=("torchtitan",),
                 source=_AO + " (ALL_AXISWISE: FSDP float8 all-gather is tensorwise only)"),
    NarrowRecipe(name="fp8-blockwise", dtype="fp8", implementation="te.Float8BlockScaling",
                 architectures=FP8_ARCHITECTURES, formats="e4m3 fwd and bwd",
                 scaling="1 x 128 tiles (activations, gradients), 128 x 128 blocks (weights), "
                         "fp32 scales", act_block=128, weight_block=128 * 128, scale_bytes=4,
                 amax_history=0, caches_weight=True, columnwise_copy="always",
                 saves_narrow_inputs=True, narrow_gemms=_ALL3, param_gather=True,
                 engines=("megatron",),
                 source=_TE + " (Float8BlockScaling); DeepSeek-V3 report sec. 3.3 "
                        "(arXiv 2412.19437)", split_quantize_kernels=1),
    NarrowRecipe(name="mxfp8", dtype="fp8", implementation="te.MXFP8BlockScaling",
                 architectures=BLACKWELL, formats="e4m3 fwd and bwd",
                 scaling="an e8m0 (power-of-two) scale per 32 consecutive values",
                 act_block=32, weight_block=32, scale_bytes=1, amax_history=0,
                 caches_weight=True, columnwise_copy="always", saves_narrow_inputs=True,
                 narrow_gemms=_ALL3, param_gather=True, engines=("megatron", "torchtitan"),
                 source=_TE + " (MXFP8BlockScaling: rowwise and columnwise copies); OCP MX "
                        "spec v1.0", split_quantize_kernels=1, gathers_16bit_under=("megatron",)),
    NarrowRecipe(name="nvfp4", dtype="fp4", implementation="te.NVFP4BlockScaling",
                 architectures=BLACKWELL, formats="e2m1 fwd and bwd",
                 scaling="an e4m3 scale per 16 values and an fp32 scale per tensor",
                 act_block=16, weight_block=16, scale_bytes=1, amax_history=0,
                 caches_weight=True, columnwise_copy="always", saves_narrow_inputs=True,
                 narrow_gemms=_ALL3, param_gather=False, engines=("megatron",),
                 source=_TE + " (NVFP4BlockScaling); Megatron --fp4-format e2m1 "
                        "--fp4-recipe nvfp4; the global amax pass: TE "
                        "transformer_engine/pytorch/csrc/quantizer.cpp "
                        "NVFP4Quantizer::quantize_impl @d0067d0d (nvte_compute_amax_with_config, "
                        "or nvte_hadamard_transform_amax with RHT, before the quantize kernel)",
                 global_scale=True, split_quantize_kernels=1, reduces_amax_over_tp=True),
)}

#: What plain ``--precision fp8`` means under each engine: Megatron's ``--fp8-recipe`` default
#: (delayed) and torchtitan's float8 converter default (``recipe_name`` unset = tensorwise).
DEFAULT_FP8_BY_ENGINE = {"megatron": "fp8-delayed", "torchtitan": "fp8-tensorwise"}


def narrow_recipe(name: str) -> NarrowRecipe | None:
    """The narrow recipe named ``name``; None for a 16/32-bit recipe."""
    return NARROW_RECIPES.get(name)


def resolve_plain_fp8(engine: str) -> str:
    """The recipe plain ``fp8`` stands for under ``engine``, or a one-line error listing the
    recipes where the engine has no default."""
    if engine in DEFAULT_FP8_BY_ENGINE:
        return DEFAULT_FP8_BY_ENGINE[engine]
    raise InputError(f"{opt('precision')} fp8 names no training recipe under {opt('engine')} "
                     f"{engine}: give one of {', '.join(NARROW_RECIPES)} (or {opt('engine')} "
                     "megatron: fp8-delayed, torchtitan: fp8-tensorwise)",
                     field="precision", value="fp8", accepted=", ".join(NARROW_RECIPES))


def check_narrow_on(recipe: NarrowRecipe, gpu_name: str, architecture: str | None,
                    have: tuple[str, ...]) -> None:
    """Refuse ``recipe`` on a GPU whose architecture lacks its tensor cores, naming the catalog
    GPUs (``have``: those of a right architecture) that run it."""
    if architecture in recipe.architectures:
        return
    kind = "FP4" if recipe.dtype == "fp4" else ("MXFP8" if recipe.name == "mxfp8" else "FP8")
    raise InputError(f"{opt('precision')} {recipe.name}: {gpu_name} ({architecture or 'unknown'}"
                     f" architecture) has no {kind} tensor cores for it; it runs on "
                     f"{', '.join(recipe.architectures)} GPUs ({', '.join(have)})",
                     field="precision", value=recipe.name, accepted=", ".join(have))


def _block_scale(elements: int, block: int, scale_bytes: int) -> float:
    return 0.0 if block == 0 else elements * scale_bytes / block


def _narrow_bytes(recipe: NarrowRecipe, block: int) -> float:
    """Bytes of one narrow element (1, 0.5 for FP4) plus its share of the scales of ``block``
    elements (the recipe's ``act_block`` or ``weight_block``)."""
    return (0.5 if recipe.dtype == "fp4" else 1.0) + _block_scale(1, block, recipe.scale_bytes)


def weight_copies(recipe: NarrowRecipe, non_tn: bool, *, backward: bool = True) -> int:
    """How many narrow copies of each linear weight Transformer Engine keeps (1 or 2): the
    rowwise one the forward GEMM reads, and beside it the columnwise one the backward's dgrad
    GEMM reads where the quantizer keeps one (:func:`columnwise_kept` on ``non_tn``, the GPU's
    :func:`non_tn_fp8_gemm`) -- the one rule the memory plan (:func:`fp8_weight_bytes`) and the
    speed model's weight cast (:func:`weight_cast_bytes_per_element`) both read.

    Without a backward (``backward`` False: no gradient, TE's inference) only the rowwise copy:
    ``_Linear.forward`` asks the weight quantizer for ``columnwise=is_grad_enabled and
    inp.requires_grad`` (transformer_engine/pytorch/module/linear.py at
    NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b), on every GPU and recipe.
    With a backward, ``weight_quantizer.set_usage(rowwise=True, columnwise=True)``, and what
    ``columnwise`` allocates is per recipe: per-tensor FP8 (``Float8Quantizer``,
    ``Float8CurrentScalingQuantizer``) a transposed ``_transpose`` only where
    ``!nvte_is_non_tn_fp8_gemm_supported()`` (pytorch/csrc/quantizer.cpp; on sm_100 the
    columnwise usage is served by the one ``_data``: tensor/storage/float8_tensor_storage.py
    ``update_usage`` and ``get_usages`` at d0067d0d), MXFP8 and NVFP4 a separately quantized
    ``_columnwise_data`` with its own ``_columnwise_scale_inv`` everywhere
    (tensor/mxfp8_tensor.py ``MXFP8Quantizer`` specs ``_columnwise_data`` /
    ``_columnwise_scale_inv``; tensor/nvfp4_tensor.py the same), TE's 1 x 128 / 128 x 128 blocks
    a columnwise copy everywhere."""
    return 1 + (backward and columnwise_kept(recipe, non_tn))


def fp8_weight_bytes(recipe: NarrowRecipe, linear_elements: int, architecture: str | None, *,
                     param_gather: bool,
                     compute_capability: str | None = None,
                     backward: bool = True, non_tn: bool | None = None) -> tuple[int, int, str]:
    """(persistent bytes of the narrow weight copies, bytes of the 16-bit weights it replaces,
    a label) for ``linear_elements`` of the blocks' linear weights on one rank.

    TE caches each weight's FP8 copy across micro-batches (1 byte per element, 0.5 for FP4, plus
    its block scales) and where the FP8 GEMM is TN-only (Hopper, Ada, consumer Blackwell:
    :func:`non_tn_fp8_gemm` on ``compute_capability``) its transpose too; MX and NVFP4 keep a
    rowwise and a columnwise copy everywhere (:func:`weight_copies`; ``backward`` False: the
    rowwise copy alone; ``non_tn``: the GPU's :func:`non_tn_fp8_gemm` where the caller knows
    it, in place of ``architecture`` and ``compute_capability``). ``param_gather`` keeps the
    narrow copy *as* the parameter: the 16-bit copy (2 bytes per element) is gone, and the
    copies are the same -- a ``Float8Tensor``
    parameter's transpose is made after each all-gather where the GEMM is TN-only and not
    otherwise (tensor/utils.py ``post_all_gather_processing``: ``if not
    is_non_tn_fp8_gemm_supported(): model_weight._create_transpose()``; an ``MXFP8Tensor`` keeps
    both directions; NVIDIA/TransformerEngine@d0067d0d). torchao casts in each forward and
    keeps no copy across steps. Not counted: up to torchao 0.8 (pytorch/ao@eab345c2
    float8_linear.py) the tensorwise matmul also saves the forward's ``weight_fp8_t`` for the
    backward, so without activation checkpointing and without the FSDP float8 all-gather (whose
    gathered storage FSDP2 frees after the forward) each block's FP8 weight (1 B an element) stays
    alive from its forward to its backward; under torchtitan@9dec370's op-level checkpointing the
    cast is recomputed but its ``abs(weight)`` is on the save list (16 bits) where the cast runs
    inside the block (not under the FSDP float8 all-gather, which casts in FSDP's pre-forward hook;
    not checked further here)."""
    if not recipe.caches_weight and not param_gather:
        return 0, 0, ""
    elem = 0.5 if recipe.dtype == "fp4" else 1.0
    one = linear_elements * elem + _block_scale(linear_elements, recipe.weight_block,
                                                recipe.scale_bytes)
    if non_tn is None:
        non_tn = non_tn_fp8_gemm(architecture, compute_capability)
    copies = weight_copies(recipe, non_tn, backward=backward)
    what = "copy" if copies == 1 else "copy + transpose" if recipe.columnwise_copy == "tn-only" \
        else "rowwise + columnwise copies"
    label = f"{recipe.name} weight {what}" + (" (the parameters: fp8 param gather)"
                                              if param_gather else "")
    return int(round(one * copies)), 2 * linear_elements if param_gather else 0, label


def narrow_elements(params: int, vocab_size: int, hidden_size: int, tied: bool) -> int:
    """Elements of ``params`` that a narrow recipe quantizes: all but the embedding and the output
    head, which stay 16-bit in every recipe here -- torchtitan's float8 converter skips
    ``output`` by default (``filter_fqns``), Transformer Engine's recipes in Megatron run only
    the blocks' ``te.Linear`` layers narrow (the embedding is a ``VocabParallelEmbedding`` and
    the output layer a ``ColumnParallelLinear``, outside TE's autocast). The norms' vectors are
    counted as narrow: they are under 0.01% of a block."""
    return max(0, params - vocab_size * hidden_size * (1 if tied else 2))


def gathered_bytes_per_element(recipe: NarrowRecipe, elements: int, narrow: int) -> float:
    """Mean bytes per element of a weight all-gather of ``elements`` of which ``narrow`` are kept
    and gathered narrow (``--fp8-param-gather``: Megatron's distributed optimizer gathers the FP8
    parameters; torchtitan's FSDP2 float8 all-gather, ``enable_fsdp_float8_all_gather``): 1 byte
    (0.5 for FP4) plus the block scales for those, 2 for the 16-bit rest. One per-tensor scale
    (4 bytes a tensor) is left out: a few bytes per million elements."""
    if elements <= 0:
        return 2.0
    per = _narrow_bytes(recipe, recipe.weight_block)
    narrow = min(narrow, elements)
    return (narrow * per + (elements - narrow) * 2.0) / elements


def amax_history_bytes(recipe: NarrowRecipe, linear_tensors: int, history: int | None = None) -> int:
    """Bytes of the amax histories and scales of delayed scaling: each linear layer quantizes
    three tensors (input, weight, output gradient), each with ``history`` fp32 amaxes plus its
    fp32 scale and inverse scale."""
    if not recipe.amax_history:
        return 0
    h = recipe.amax_history if history is None else history
    return linear_tensors * 3 * (h + 2) * 4


def _amax_pass_bytes(recipe: NarrowRecipe) -> float:
    """The 16-bit read of a cast's separate amax pass (per element): current and dynamic
    per-tensor scaling, and NVFP4's per-tensor second-level scale; none for a delayed scale or
    block scales taken in the quantize kernel itself."""
    return 2.0 if ((recipe.act_block == 0 and not recipe.amax_history)
                   or recipe.global_scale) else 0.0


def cast_bytes_per_element(recipe: NarrowRecipe) -> float:
    """Bytes one quantize kernel moves per element: reads 16-bit, writes the narrow element plus
    its share of the scales; current and dynamic per-tensor scaling read once more for the amax,
    and so does NVFP4 for its per-tensor second-level scale (``global_scale``: Transformer
    Engine's NVFP4 quantizer runs an amax kernel over the whole tensor -- over the input and its
    Hadamard transform at once where RHT is on -- before the one kernel that writes the rowwise
    and the columnwise copies). MX block scales come from each block's own amax, in the
    quantize kernel itself."""
    return 2.0 + _narrow_bytes(recipe, recipe.act_block) + _amax_pass_bytes(recipe)


def _sm_arch(compute_capability: str | None) -> int | None:
    """CUDA's ``major * 10 + minor`` of a catalog ``compute_capability`` ("12.0" -> 120); None
    where there is none or it is not a CUDA one (AMD's "gfx942")."""
    major, dot, minor = (compute_capability or "").partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return int(major) * 10 + int(minor)


def non_tn_fp8_gemm(architecture: str | None, compute_capability: str | None = None) -> bool:
    """Whether the FP8 GEMM takes layouts other than TN, as Transformer Engine decides it:
    ``nvte_is_non_tn_fp8_gemm_supported`` (transformer_engine/common/transformer_engine.cpp at
    NVIDIA/TransformerEngine @70f53666) returns ``(sm_arch >= 100 && sm_arch < 120) || sm_arch
    >= 130`` for the device's ``major * 10 + minor`` ("temporary restriction"): data-centre
    Blackwell (10.0 B200, 10.3 B300) and 11.x take any layout, consumer Blackwell (12.x: RTX
    50-series, RTX PRO 6000 Blackwell), Hopper and Ada only TN. Read from the catalog's
    ``compute_capability``; only where none is known, from the architecture name
    (:data:`_TN_ONLY`: Hopper and Ada TN-only, any other name -- Blackwell included -- not)."""
    sm = _sm_arch(compute_capability)
    if sm is None:
        return architecture not in _TN_ONLY
    return 100 <= sm < 120 or sm >= 130


def keeps_columnwise(recipe: NarrowRecipe, architecture: str | None,
                     compute_capability: str | None = None) -> bool:
    """Whether Transformer Engine's quantizer writes a second (columnwise) copy beside the rowwise
    one when the backward needs it: MX, NVFP4 and TE's FP8 blocks always (``always``); per-tensor
    FP8 (``tn-only``) only where the FP8 GEMM is TN-only -- ``Float8Quantizer`` and
    ``Float8CurrentScalingQuantizer::create_tensor`` allocate the transpose only when
    ``columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()`` (pytorch/csrc/quantizer.cpp at
    NVIDIA/TransformerEngine @70f53666 and @5671fd36), and ``get_weight_workspace`` resets a
    cached FP8 weight for a missing transpose only under the same test (module/base.py); torchao
    never (``never``: its casts are laid out again instead, :mod:`gpuplan.compute.step`). The
    TN-only test is :func:`non_tn_fp8_gemm` on ``compute_capability`` (the name
    ``architecture`` only where that is unknown)."""
    return columnwise_kept(recipe, non_tn_fp8_gemm(architecture, compute_capability))


def columnwise_kept(recipe: NarrowRecipe, non_tn: bool) -> bool:
    """:func:`keeps_columnwise` once the GPU's :func:`non_tn_fp8_gemm` is known (``non_tn``):
    the columnwise copy of ``always`` recipes everywhere, of ``tn-only`` ones where the GEMM is
    TN-only, of ``never`` ones nowhere."""
    return recipe.columnwise_copy == "always" or (recipe.columnwise_copy == "tn-only"
                                                  and not non_tn)


def columnwise_bytes_per_element(recipe: NarrowRecipe, architecture: str | None,
                                 compute_capability: str | None = None) -> float:
    """Bytes per element of the second (columnwise) copy a quantize kernel writes beside the
    rowwise one for a linear's input or output gradient, whose weight-gradient GEMM reads it:
    MX and NVFP4 quantize both directions from the 16-bit tensor everywhere (``always``), and
    Transformer Engine's per-tensor and block FP8 write a transposed copy where the FP8 GEMM is
    TN-only (Hopper, Ada, sm_120: ``tn-only``; the fused ``cast_transpose`` kernel, one read,
    two writes: transformer_engine/pytorch/module/linear.py sets the input quantizer's usage to
    ``rowwise`` and ``columnwise`` when the backward needs the input, and docs "Handling
    transposes" of NVIDIA/TransformerEngine @d0067d0d: "for FP8 on Hopper architecture, some
    tensors need to be physically transposed in memory"); 0 where the GEMM takes either layout
    (torchao's ``never``, per-tensor FP8 on sm_100/sm_103). The columnwise copy of a block-scaled
    recipe has its own scales, one per block down the columns (Transformer Engine v2.9 @70f53666
    transformer_engine/pytorch/csrc/quantizer.cpp ``MXFP8Quantizer::get_scale_shape``: the
    columnwise scale-inverse is roundup(rows / 32, 4) x roundup(columns, 128) e8m0 bytes;
    ``NVFP4Quantizer::get_scale_shape``: roundup(columns, 128) x roundup(rows / 16, 4)), the same
    share as the rowwise copy's."""
    if not keeps_columnwise(recipe, architecture, compute_capability):
        return 0.0
    return _narrow_bytes(recipe, recipe.act_block)


def weight_cast_bytes_per_element(recipe: NarrowRecipe, architecture: str | None,
                                  compute_capability: str | None = None) -> float:
    """Bytes one cast of a linear weight moves per element: the 16-bit read, the amax pass where
    the scale comes from the current tensor (as :func:`cast_bytes_per_element`), the rowwise copy
    with the weight's own block scales (``weight_block``: 128 x 128 blocks for TE's FP8 blocks,
    16 values for NVFP4), and the columnwise copy where the quantizer keeps one
    (:func:`keeps_columnwise`), with its own element size and scales. Transformer Engine's
    linear sets the weight quantizer's usage to rowwise and columnwise in training
    (module/linear.py ``_Linear.forward``: ``weight_quantizer.set_usage(rowwise=True,
    columnwise=columnwise_usage)`` before ``get_weight_workspace``, at
    NVIDIA/TransformerEngine @70f53666 and @5671fd36); per-tensor FP8 then writes its 1-byte
    transpose on Hopper/Ada/sm_120 only (on sm_100 the one copy serves both GEMMs), NVFP4 writes a
    0.5-byte columnwise copy with an e4m3 byte per 16 values (``NVFP4Quantizer::create_tensor``
    and ``get_scale_shape``: roundup(columns, 128) x roundup(rows / 16, 4) scale bytes) and MXFP8
    a 1-byte one with an e8m0 byte per 32 (``MXFP8Quantizer::get_scale_shape``)."""
    row = _narrow_bytes(recipe, recipe.weight_block)
    return 2.0 + _amax_pass_bytes(recipe) + row * weight_copies(
        recipe, non_tn_fp8_gemm(architecture, compute_capability))


def gathers_rowwise_only(recipe: NarrowRecipe) -> bool:
    """Transformer Engine all-gathers a per-tensor FP8 tensor's rowwise data only (its
    ``Float8Quantizer`` / ``Float8CurrentScalingQuantizer.supports_only_rowwise_all_gather``:
    True, tensor/float8_tensor.py @70f53666): under sequence parallelism the shard is quantized
    rowwise and the transposed copy made after the gather (layernorm_linear.py backward: "If data
    is in FP8, we compute FP8 transposes manually"); block, MX and NVFP4 tensors gather both
    copies, quantized on the shard."""
    return recipe.act_block == 0 and recipe.implementation.startswith("te.")


def shown_recipes() -> str:
    return ", ".join(shown(n) for n in NARROW_RECIPES)


def narrow_blocks(layers: int, edge: int) -> int:
    """How many of ``layers`` blocks run narrow when the first ``edge`` and the last ``edge`` stay
    BF16 (Megatron ``--first-last-layers-bf16``); refused in one line where none would be left
    narrow -- the one home of that check, read by the memory and the speed model alike."""
    if edge > 0 and 2 * edge >= layers:
        raise InputError(f"{opt('first_last_layers_bf16')} {edge}: {2 * edge} of the model's "
                         f"{layers} blocks would be BF16, none narrow; give at most "
                         f"{max(0, (layers - 1) // 2)}", field="first_last_layers_bf16",
                         value=edge, fix={"first_last_layers_bf16": max(0, (layers - 1) // 2)})
    return layers - 2 * max(0, edge)
