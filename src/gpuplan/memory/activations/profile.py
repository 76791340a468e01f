"""A model's training step as formulas in (b, s): the embeddings, each kind of layer and the head,
each replayed once by :func:`~.symbolic.simulate` and cached per architecture and job options."""

from __future__ import annotations

from ...fp8 import NARROW_RECIPES

from dataclasses import replace
from fractions import Fraction
from functools import lru_cache

from ..._record import record
from ...engines.profiles import get_engine, runtime_of
from ...job import Job
from ...models import Model
from ...models._types import attention_for
from ..lora import DEFAULT_LORA_TARGETS
from ..shape import seq_for
from .blocks import Ctx, transformer_layer
from .heads import embed_block, head_block
from ...errors import InputError, opt
from .spec import TORCHTUNE_FAMILIES, Opts, Spec, sliding_mask, spec_cached
from .symbolic import BS, ZERO, Form, Graph, LayerProfile, Regime, simulate

__all__ = ["StepProfile", "Shard", "step_profile", "layer_activation_bytes", "regime_for"]


@record(kw_only=False)
class Shard:
    """What one rank of a parallel layout runs of the step: the sequence split over the TP group
    (``sp``, Megatron sequence parallelism), ``1 / ep`` of the experts, and whether its pipeline
    stage holds the embeddings (``first``) and the head and loss (``last``). The architecture
    the profile is built from is already the rank's (heads, widths and vocabulary per TP rank,
    the stage's layers)."""

    sp: int = 1
    ep: int = 1
    first: bool = True
    last: bool = True
    ckpt_split: int = 1
    """The TP ranks full checkpointing's layer inputs are split over (Megatron's
    ``--distribute-saved-activations``; 1: each rank keeps them whole)."""


WHOLE = Shard()


def regime_for(precision: str) -> Regime:
    """How dtypes flow in a named training recipe."""
    if precision == "fp32":
        return Regime(param=4)
    if precision in ("amp-bf16", "amp-fp16"):
        return Regime(param=4, autocast=2, fp16=precision == "amp-fp16")
    return Regime(param=2, fp16=precision == "mixed-fp16")  # mixed-bf16, mixed-fp16, bf16


@record(kw_only=False)
class StepProfile:
    """A model's step as formulas in (b, s): blocks, in order, with their profiles."""

    embed: LayerProfile
    layers: tuple[tuple[int, LayerProfile], ...]
    """(count, profile) runs of identical consecutive layers."""
    head: LayerProfile
    layer_input: Form
    """Bytes of one layer's input (what full checkpointing keeps per layer)."""
    inputs: Form
    """The batch tensors (input ids and labels, int64) or images."""
    mask: Form
    """An explicit attention mask the model builds once per forward (eager), held in forward."""
    checkpointing: str
    regime: Regime
    notes: tuple[str, ...] = ()
    ckpt_split: int = 1
    """Full checkpointing keeps ``1 / ckpt_split`` of each layer input (:class:`Shard`) and
    all-gathers the whole input again for the layer's recompute."""

    def kept_input(self, b: int, s: int) -> int:
        """What full checkpointing keeps of one layer's input, bytes."""
        return -(-self.layer_input(b, s) // self.ckpt_split)


def _opts(job: Job, sp: Spec, lora_targets: frozenset, sdpa_mask: bool = False,
          shard: Shard = WHOLE) -> Opts:
    # transformers turns the cache off when gradient checkpointing is enabled (full checkpointing)
    cache = job.use_cache and job.checkpointing != "full" and sp.kind == "decoder"
    frozen = job.lora_rank is not None
    engine, narrow = get_engine(job.engine), _narrow_inputs(job)
    return Opts(attention=attention_for(sp.family, job.attention, job.engine), cache=cache,
                lora=lora_targets,
                lora_rank=job.lora_rank or 0, lora_dropout=job.lora_dropout if frozen else 0.0,
                # QLoRA computes in the 16-bit dtype: each matmul dequantizes its 4-bit base
                quantized=2 if (frozen and job.lora_base is not None
                                and job.lora_base.startswith(("nf4", "fp4"))) else 0,
                frozen=frozen, sdpa_mask=sdpa_mask, sp=shard.sp, ep=shard.ep,
                compiled=runtime_of(job.runtime, "train", job.engine) == "compile", model_code=job.model_code,
                loss_chunks=job.loss_chunks, narrow_inputs=narrow,
                narrow_gathered=_narrow_gathered(job), experts=engine.moe_experts,
                narrow_shard=bool(narrow) and engine.narrow_shard,
                proj_original=bool(narrow) and job.precision in engine.proj_original_input,
                **_deepseek_storage(job, narrow),
                capacity_factor=(None if job.moe_capacity_factor is None
                                 else Fraction(str(job.moe_capacity_factor))))


def _narrow_inputs(job: Job) -> float:
    """Bytes per element a narrow recipe saves each block linear's input in (Transformer
    Engine's recipes and torchao's tensorwise up to 0.8 keep the quantized input for the weight
    gradient: 1 for FP8/MXFP8, 0.5 for NVFP4, before scales: :data:`gpuplan.fp8.
    TORCHAO_SAVED_INPUT`); 0 where the 16-bit input is saved (torchao's rowwise, 16-bit
    recipes).

    Also 0 under selective checkpointing with torchtitan's op policy (the engine's
    ``selective`` ``op``): the cast is not on its save list, so its FP8 output is recomputed,
    not kept (gpuplan.compute.step.narrow_recompute_op times that), while the 16-bit
    ``abs(x)`` of the amax is kept -- torchtitan@9dec370 torchtitan/parallelisms/
    parallelize_llama.py ``_save_list`` holds ``aten.abs`` and ``aten.max`` "for low precision
    training" (taken off the list by torchtitan@88247277, 2025-02-06, #820, for the peak memory
    it cost float8 training): 2 B an element, the 16-bit input's bytes. (The memory model does
    not replay the op policy's other recomputes; this keeps the linear inputs at 16 bits as
    before.) Under full checkpointing the choice moves only the one layer recomputed at a time."""
    r = NARROW_RECIPES.get(job.precision)
    if r is None or not r.saves_narrow_inputs or job.lora_rank is not None:
        return 0
    if job.checkpointing == "selective" and get_engine(job.engine).selective == "op":
        return 0
    return 0.5 if r.dtype == "fp4" else 1


#: DeepSeek-V3's E5M6 (1 sign, 5 exponent, 6 mantissa bits: 12 bits, 1.5 B) for the attention
#: output, the output projection's input (arXiv 2412.19437 sec. 3.3.3, "Low-Precision
#: Activation" (1): "We adopt a customized E5M6 data format exclusively for these activations").
E5M6_BYTES = Fraction(3, 2)


def _deepseek_storage(job: Job, narrow: float) -> dict:
    """The :class:`Opts` of ``job.activation_storage`` "deepseek-v3" under a narrow recipe
    (arXiv 2412.19437 sec. 3.3.3 (1) and (2), sec. 3.2.3): the attention output in E5M6, kept
    once for the attention backward and the output projection; the MoE SwiGLU inputs in the
    recipe's narrow dtype ("we cache the inputs of the SwiGLU operator and recompute its output
    in the backward pass. These activations are also stored in FP8"); the norms' quantized
    copies recomputed with them where ``recompute_modules`` names layernorm. {} otherwise."""
    if job.activation_storage != "deepseek-v3" or not narrow:
        return {}
    return dict(attn_out_bytes=E5M6_BYTES, moe_act_narrow=narrow,
                norm_out_narrow=job.checkpointing == "selective"
                and "layernorm" in (job.recompute_modules or ()))


def _narrow_gathered(job: Job) -> bool:
    """The narrow input saved is the all-gathered one (:attr:`gpuplan.fp8.NarrowRecipe.
    narrow_input_after_gather`, torchao), where the engine gathers the recipe narrow."""
    r = NARROW_RECIPES.get(job.precision)
    return bool(r is not None and r.narrow_input_after_gather
                and job.precision in get_engine(job.engine).tp_narrow_gather)


#: What of a new family's forward is not yet op by op (the rest is: QK-norm, the routers,
#: Llama 4's MoE, complex RoPE and L2 norm, local and global layers, gpt-oss's sinks, biased
#: experts and clamped SwiGLU, MLA with the memory-efficient SDPA kernel CUDA runs for it):
#: family -> what is approximate. Empty today; a family named here gets a note in every plan.
_APPROXIMATE: dict[str, str] = {}


#: Megatron-Core's ``--recompute-modules`` entries whose outputs are discarded as well
#: (``CheckpointWithoutOutput``: transformer_layer.py for the norms, multi_latent_attention.py,
#: moe/experts.py; NVIDIA/Megatron-LM@d98e8a64); the others (``tensor_parallel.checkpoint``)
#: keep their output where a later op saves it.
DISCARD_OUTPUTS = frozenset({"layernorm", "mla_up_proj", "moe_act"})


def _drops(modules: tuple[str, ...] | None) -> tuple[str, ...]:
    """The recompute regions selective checkpointing drops: the attention core, or the named
    modules (core_attn is the region ``attn_core``)."""
    if modules is None:
        return ("attn_core",)
    return tuple("attn_core" if m == "core_attn" else m for m in modules)


def _module_notes(g_regions: set[str], modules: tuple[str, ...], o: Opts,
                  family: str) -> list[str]:
    """What the plan says about ``--recompute-modules``: the modules recomputed, and those this
    model has no such part for."""
    found = [m for m in modules if ("attn_core" if m == "core_attn" else m) in g_regions]
    absent = [m for m in modules if m not in found]
    fused_core = "core_attn" in found and o.attention == "sdpa"
    if fused_core:  # as the speed model: the fused kernel's own backward recomputes the scores
        found.remove("core_attn")
    notes = []
    if found:
        notes.append("selective checkpointing recomputes " + ", ".join(found) + " (Megatron-Core "
                     "recompute modules): their saved tensors are not kept, one layer's are "
                     "rematerialized during its backward")
    if "layernorm" in absent:
        # the norms of post-LN, parallel-residual, BLOOM and Gemma layers are not tagged
        absent.remove("layernorm")
        notes.append(f"memory of layernorm recompute not modelled for {family}'s layer layout "
                     "(its norms stay kept; the speed model still times their recompute)")
    if absent:
        notes.append("recompute modules " + ", ".join(absent) + ": no such part in this "
                     "model's layers, nothing recomputed")
    if fused_core:
        notes.append("core_attn under SDPA/flash: nothing recomputed beyond the fused kernel's "
                     "own backward; the core keeps only O(s) statistics (dropped)")
    if "layernorm" in found:
        notes.append("layernorm recompute is modelled on separate norm modules; with Megatron-Core's "
                     "Transformer Engine layer spec a norm fused into the next linear is not "
                     "recomputed (transformer_layer.py skips an IdentityOp norm)")
    return notes


def _simulate_layer(g: Graph, y, checkpointing: str, modules: tuple[str, ...] | None,
                    grad_dt: int) -> LayerProfile:
    """One layer's replay under the job's checkpointing."""
    if checkpointing == "full":
        prof = simulate(g, [y], param_grad_dt=grad_dt, recompute=True)
        prof.fwd_points_nosave = simulate(g, [y], param_grad_dt=grad_dt,
                                          inference=True).fwd_points
        return prof
    if checkpointing == "selective":
        return simulate(g, [y], param_grad_dt=grad_dt, drop_region=_drops(modules),
                        discard_outputs=DISCARD_OUTPUTS if modules else frozenset())
    return simulate(g, [y], param_grad_dt=grad_dt)


@lru_cache(maxsize=512)
def _profile_cached(sp: Spec, regime: Regime, o: Opts, checkpointing: str,
                    modules: tuple[str, ...] | None = None) -> StepProfile:
    notes: list[str] = []
    pdt = regime.param
    grad_dt = pdt
    # layers: group consecutive identical layers (MoE vs dense)
    # (a layer's kind: MoE or dense, local or global attention, RoPE or NoPE); sets: 10^4
    # layers were 10^8 tuple scans (5.7 s)
    moe, local, nope = (frozenset(x) for x in (sp.moe_layers, sp.local_layers, sp.nope_layers))
    kinds = [(sp.experts > 0 and i in moe, i in local, i in nope) for i in range(sp.layers)]
    runs: list[tuple[int, bool]] = []
    for k in kinds:
        if runs and runs[-1][1] == k:
            runs[-1] = (runs[-1][0] + 1, k)
        else:
            runs.append((1, k))
    mask_form = ZERO
    if sp.kind == "decoder" and o.attention == "eager":
        mask_form = Form(bss=pdt)  # eager_mask: a (b, 1, s, s) float mask in the model dtype
        if sp.local_layers:
            mask_form = Form(bss=2 * pdt)  # one for the local layers, one for the global
    if sp.family == "bloom":
        mask_form = mask_form + Form(bs=sp.heads * pdt)  # the (b heads, 1, s) ALiBi tensor
    if sp.kind == "decoder" and o.attention == "sdpa" and o.sdpa_mask:
        mask_form = Form(bss=1)  # sdpa_mask: a boolean (b, 1, s, s) mask, held in forward
    if sp.window_mask and o.attention == "sdpa":
        mask_form = mask_form + Form(ss=1)  # an unused (s, s) boolean window mask (Spec)
    rows = BS if o.sp == 1 else BS * Fraction(1, o.sp)  # residual-stream rows on this rank
    layer_profiles = []
    by_kind: dict[tuple, LayerProfile] = {}
    regions: set[str] = set()
    for count, kind in runs:
        if kind not in by_kind:
            g = Graph(regime)
            c = Ctx(g, sp, o)
            x = g.input(rows * sp.h, pdt, grad=True, name="hidden")
            mask = g.constant(Form(bss=1), pdt, "mask") if mask_form != ZERO else None
            layer_idx = kinds.index(kind)
            g.compiling = o.compiled  # torch.compile of each layer (torchtune's compile_model)
            y = transformer_layer(c, x, mask, layer_idx)
            if checkpointing == "selective":
                regions |= {op.region.partition("#")[0] for op in g.ops if op.region}
            by_kind[kind] = _simulate_layer(g, y, checkpointing, modules, grad_dt)
        layer_profiles.append((count, by_kind[kind]))
    # embeddings
    g = Graph(regime)
    c = Ctx(g, sp, o)
    ids = g.constant(BS, 8, "input_ids")
    x = embed_block(c, ids)
    embed = simulate(g, [x], param_grad_dt=grad_dt)
    # head + loss
    g = Graph(regime)
    c = Ctx(g, sp, o)
    hx = g.input(rows * sp.h, pdt, grad=True, name="hidden")
    loss = head_block(c, hx)
    head = simulate(g, [loss], param_grad_dt=grad_dt)
    inputs = Form(bs=16) if sp.kind != "vision" else Form(b=8)
    if sp.kind == "vision":
        inputs = inputs + Form(bs=sp.channels * sp.patch * sp.patch * pdt)
    if sp.family in _APPROXIMATE:
        notes.append(f"{sp.family}'s activations are partly approximate: "
                     f"{_APPROXIMATE[sp.family]} (against the trace on small configs: "
                     "benchmarks/modern_agreement.md); the weights, states and KV cache are "
                     "exact")
    if checkpointing == "selective" and modules is not None:
        notes += _module_notes(regions, modules, o, sp.family)
    elif checkpointing == "selective" and o.attention == "sdpa":
        notes.append("selective checkpointing recomputes the attention core; with SDPA/flash "
                     "that core already keeps only O(s) statistics, so it saves little")
    return StepProfile(embed=embed, layers=tuple(layer_profiles), head=head,
                       layer_input=rows * (sp.h * pdt), inputs=inputs, mask=mask_form,
                       checkpointing=checkpointing, regime=regime, notes=tuple(notes))


def _lora_targets(model: Model, job: Job) -> frozenset:
    if job.lora_rank is None:
        return frozenset()
    if job.lora_targets is not None:
        return frozenset(job.lora_targets)
    return frozenset(DEFAULT_LORA_TARGETS.get(model.architecture.family, ()))


def step_profile(model: Model, job: Job, seq: int | None = None,
                 shard: Shard = WHOLE) -> StepProfile:
    """The step profile of ``job`` on ``model`` (its architecture must be known). ``seq``
    overrides the job's sequence length (it decides whether a sliding-window mask exists);
    ``shard`` is what one rank of a parallel layout runs (default: the whole step)."""
    arch = model.architecture
    sp = spec_cached(arch)
    if job.model_code == "torchtune" and sp.family not in TORCHTUNE_FAMILIES:
        raise InputError(f"{opt('model_code')} torchtune is modeled for llama-style decoders "
                         f"({', '.join(TORCHTUNE_FAMILIES)}), not {sp.family}; drop "
                         f"{opt('model_code')}")
    s = seq if seq is not None else seq_for(model, job)
    o = _opts(job, sp, _lora_targets(model, job), sliding_mask(arch, sp, job.attention, s),
              shard)
    modules = job.recompute_modules if job.checkpointing == "selective" else None
    prof = _profile_cached(sp, regime_for(job.precision), o, job.checkpointing,
                           tuple(modules) if modules is not None else None)
    if shard.ckpt_split > 1 and job.checkpointing == "full":
        prof = replace(prof, ckpt_split=shard.ckpt_split)
    if shard.first and shard.last:
        return prof
    return _stage_profile(prof, shard.first, shard.last)


_STAGES: dict[tuple, tuple[StepProfile, StepProfile]] = {}


def _stage_profile(prof: StepProfile, first: bool, last: bool) -> StepProfile:
    """A pipeline stage's part of the step: the embeddings and the input ids only on the first
    stage, the head, the loss and the labels only on the last (cached per profile)."""
    key = (id(prof), first, last)
    hit = _STAGES.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1]
    ids = Form(bs=8)  # int64 token ids (first stage) and labels (last stage)
    if prof.inputs != Form(bs=16):  # images: all on the first stage
        ids = prof.inputs
    out = replace(prof, embed=prof.embed if first else LayerProfile(),
                  head=prof.head if last else LayerProfile(),
                  inputs=(ids if first else ZERO) + (Form(bs=8) if last and ids == Form(bs=8)
                                                     else ZERO))
    if len(_STAGES) > 1024:
        _STAGES.clear()
    _STAGES[key] = (prof, out)
    return out


def layer_activation_bytes(model: Model, job: Job, *, batch: int | None = None,
                           seq: int | None = None) -> int:
    """Bytes one (dense) layer saves for backward at this batch and sequence (no checkpointing)."""
    prof = step_profile(model, job.with_(checkpointing="none"))
    b = batch or job.batch
    s = seq or seq_for(model, job)
    return prof.layers[0][1].saved(b, s)

