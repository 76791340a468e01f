"""The accounting, checked against the seed document's table and hand calculations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import InputError, UnknownNameError
from gpuplan.formats import (
    OPTIMIZERS, TRAINING_RECIPES, WEIGHT_FORMATS, get_optimizer, optimizer_state_bytes,
)
from gpuplan.job import Job
from gpuplan.memory import infer_memory, lora_tensors, shard, train_memory
from gpuplan.models import Model, ParamCounts, ParamTensor

GB = 10**9


def count_model(n: int) -> Model:
    return Model(name=f"{n} params",
                 params=ParamCounts(total=n, by_component={"other": n}, active=n, embedding=0))


def tensor_model(tensors: list[ParamTensor], name: str = "toy") -> Model:
    total = sum(t.total for t in tensors)
    by: dict[str, int] = {}
    for t in tensors:
        by[t.component] = by.get(t.component, 0) + t.total
    return Model(name=name, tensors=tuple(tensors),
                 params=ParamCounts(total=total, by_component=by, active=total, embedding=0))


SEVEN_B = count_model(7_000_000_000)


# ---- the seed document (000_*.txt): "GPU for Deep Learning" ------------------------------------

def test_seed_table_7b_mixed_precision_adam():
    # | weights, 16-bit 2 B 14.0 GB | gradients 2 B 14.0 GB | master 4 B 28.0 GB |
    # | optimizer's two running averages, 32-bit 8 B 56.0 GB | 112.0 GB |
    t = train_memory(SEVEN_B, Job(model=SEVEN_B, precision="mixed-bf16", optimizer="adam"))
    assert t.weights_bytes == 7 * 2 * GB == 14 * GB
    assert t.gradients_bytes == 14 * GB
    assert t.master_weights_bytes == 28 * GB
    assert t.optimizer_bytes == 56 * GB
    assert t.model_states_bytes == 112 * GB
    # "That total is before a single activation is stored, and it does not fit on an 80 GB card."
    assert t.activations_bytes == 0 and not t.activations_known
    assert t.total_bytes > 80 * GB


def test_seed_inference_16bit_is_14gb_and_8x():
    job = Job(model=SEVEN_B)
    t = train_memory(SEVEN_B, job)
    i = infer_memory(SEVEN_B, job)
    assert i.weights_bytes == 14 * GB
    assert t.model_states_bytes / i.weights_bytes == 8.0   # "Training costs 8x the memory"


def test_seed_optimizer_without_momentum_is_56gb():
    # "Drop to an optimizer without momentum and the budget falls to 56 GB"
    t = train_memory(SEVEN_B, Job(model=SEVEN_B, optimizer="sgd"))
    assert t.model_states_bytes == 56 * GB
    assert t.optimizer_bytes == 0


def test_seed_4bit_inference_is_28x():
    # q4_0 stores 32 weights in 18 bytes (16 bytes of nibbles + an fp16 scale): 4.5 bits/weight.
    i = infer_memory(SEVEN_B, Job(model=SEVEN_B, infer_precision="q4_0"))
    assert i.weights_bytes == 7_000_000_000 * 18 // 32
    ratio = 112 * GB / i.weights_bytes
    assert round(ratio) == 28   # "if inference is quantized to around 4 bits, 28x"
    assert ratio == pytest.approx(112 / (7 * 4.5 / 8))


# ---- recipes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("recipe,w,g,m,s", [
    ("fp32", 4, 4, 0, 8), ("mixed-bf16", 2, 2, 4, 8), ("mixed-fp16", 2, 2, 4, 8),
    ("amp-bf16", 4, 4, 0, 8), ("amp-fp16", 4, 4, 0, 8), ("bf16", 2, 2, 0, 4),
])
def test_recipe_layouts_from_design_table(recipe, w, g, m, s):
    n = 1_000_000
    model = count_model(n)
    t = train_memory(model, Job(model=model, precision=recipe, optimizer="adamw"))
    assert (t.weights_bytes, t.gradients_bytes, t.master_weights_bytes, t.optimizer_bytes) == (
        w * n, g * n, m * n, s * n)


def test_pure_bf16_with_fp32_states():
    model = count_model(10**6)
    t = train_memory(model, Job(model=model, precision="bf16", optimizer_states="fp32"))
    assert t.optimizer_bytes == 8 * 10**6


# ---- optimizers --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,states", [
    ("sgd", 0), ("sgd-momentum", 1), ("adam", 2), ("adamw", 2), ("lion", 1), ("adagrad", 1),
    ("rmsprop", 1),
])
def test_plain_optimizer_state_counts(name, states):
    model = count_model(3_000_000)
    t = train_memory(model, Job(model=model, optimizer=name, precision="fp32"))
    assert t.optimizer_bytes == states * 4 * 3_000_000


def test_adafactor_factored_from_shapes():
    # Shazeer & Stern 2018: an (r, c) matrix keeps r + c second-moment factors; a vector keeps n.
    w = ParamTensor("mlp.w", (11008, 4096), 32, "mlp", "up_proj", True)
    b = ParamTensor("norm.w", (4096,), 65, "norms", "norm", False)
    model = tensor_model([w, b])
    t = train_memory(model, Job(model=model, optimizer="adafactor", precision="fp32"))
    assert t.optimizer_bytes == 4 * (32 * (11008 + 4096) + 65 * 4096)


def test_adafactor_without_shapes_is_an_upper_bound_and_says_so():
    t = train_memory(SEVEN_B, Job(model=SEVEN_B, optimizer="adafactor"))
    assert t.optimizer_bytes == 4 * 7_000_000_000
    assert any("Adafactor assumed unfactored" in n for n in t.notes)


def test_adamw_8bit_block_scales_and_small_tensors():
    # bitsandbytes: uint8 state + one fp32 absmax per 256 elements, per state; tensors with
    # fewer than 4096 elements keep 32-bit states.
    big = ParamTensor("w", (4096, 4096), 1, "mlp", "up_proj", True)
    small = ParamTensor("b", (1000,), 3, "norms", "norm", False)
    total, note = optimizer_state_bytes(get_optimizer("adamw-8bit"), (big, small), 0, 4)
    blocks = 4096 * 4096 // 256
    assert total == 2 * (4096 * 4096 + 4 * blocks) + 3 * 2 * 4 * 1000
    assert note is None


# ---- weight formats ----------------------------------------------------------------------------

def test_nf4_block_64_fp32_absmax():
    w = ParamTensor("layers.{i}.mlp.up_proj.weight", (4096, 4096), 2, "mlp", "up_proj", True)
    n = 4096 * 4096
    assert WEIGHT_FORMATS["nf4"].tensor_bytes(w) == 2 * (n // 2 + 4 * n // 64)
    # double quantization: 8-bit absmax per 64 weights + fp32 per 256 absmax + one offset
    blocks = n // 64
    assert WEIGHT_FORMATS["nf4-dq"].tensor_bytes(w) == 2 * (n // 2 + blocks + 4 * (blocks // 256) + 4)


def test_gguf_block_sizes():
    w = ParamTensor("layers.{i}.mlp.up_proj.weight", (11008, 4096), 1, "mlp", "up_proj", True)
    n = 11008 * 4096
    assert WEIGHT_FORMATS["q4_0"].tensor_bytes(w) == n // 32 * 18
    assert WEIGHT_FORMATS["q8_0"].tensor_bytes(w) == n // 32 * 34
    norm = ParamTensor("layers.{i}.norm.weight", (4096,), 1, "norms", "norm", False)
    assert WEIGHT_FORMATS["q4_0"].tensor_bytes(norm) == 4 * 4096   # 1-D tensors stay F32


def test_gptq_awq_group_128():
    w = ParamTensor("layers.{i}.self_attn.q_proj.weight", (4096, 4096), 1, "attention", "q_proj",
                    True)
    n = 4096 * 4096
    groups = 4096 // 128
    # packed int4 + per (output, group) an fp16 scale and a 4-bit zero; GPTQ adds int32 g_idx
    awq = (n * 4 + 4096 * groups * (16 + 4)) // 8
    assert WEIGHT_FORMATS["awq-4bit"].tensor_bytes(w) == awq
    assert WEIGHT_FORMATS["gptq-4bit"].tensor_bytes(w) == awq + 4096 * 4
    head = ParamTensor("lm_head.weight", (32000, 4096), 1, "head", "lm_head", True)
    assert WEIGHT_FORMATS["gptq-4bit"].tensor_bytes(head) == 2 * 32000 * 4096  # head stays fp16


def test_int8_per_channel_scale():
    w = ParamTensor("layers.{i}.mlp.down_proj.weight", (4096, 11008), 1, "mlp", "down_proj", True)
    assert WEIGHT_FORMATS["int8"].tensor_bytes(w) == 4096 * 11008 + 4 * 4096


def test_formats_ordered_by_effective_bits_on_a_count_model():
    model = count_model(7_000_000_000)
    fmts = sorted(WEIGHT_FORMATS.values(), key=lambda f: f.bits)
    sizes = [infer_memory(model, Job(model=model, infer_precision=f.name)).weights_bytes
             for f in fmts]
    assert sizes == sorted(sizes)
    assert sizes[0] < sizes[-1]


# ---- ZeRO --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 8])
def test_zero_stages_shard_exactly_what_they_shard(n):
    model = count_model(7_000_000_001)  # odd: exercises the padded ceil division
    base = train_memory(model, Job(model=model, gpus=n, zero=0))
    z1 = train_memory(model, Job(model=model, gpus=n, zero=1))
    z2 = train_memory(model, Job(model=model, gpus=n, zero=2))
    z3 = train_memory(model, Job(model=model, gpus=n, zero=3))
    ceil = lambda x: -(-x // n)  # noqa: E731
    assert (z1.weights_bytes, z1.gradients_bytes) == (base.weights_bytes, base.gradients_bytes)
    assert z1.master_weights_bytes == ceil(base.master_weights_bytes)
    assert z1.optimizer_bytes == ceil(base.optimizer_bytes)
    assert z2.weights_bytes == base.weights_bytes
    assert z2.gradients_bytes == ceil(base.gradients_bytes)
    assert (z2.master_weights_bytes, z2.optimizer_bytes) == (z1.master_weights_bytes,
                                                             z1.optimizer_bytes)
    assert z3.weights_bytes == ceil(base.weights_bytes)
    assert (z3.gradients_bytes, z3.master_weights_bytes, z3.optimizer_bytes) == (
        z2.gradients_bytes, z2.master_weights_bytes, z2.optimizer_bytes)
    # the gathered parameters are their own line, never folded into weights: with no tensor
    # list, two units of 1/32 of the model (stated), 16-bit, in the forward and backward;
    # released after the backward, so not in the optimizer step
    unit = -(-7_000_000_001 // 32)
    held = base.weights_bytes - z3.weights_bytes  # what ZeRO-3 no longer holds of the weights
    for phase in ("forward", "backward"):
        assert z3.phases[phase] - z2.phases[phase] == 2 * unit * 2 - held
    assert z3.phases["optimizer"] - z2.phases["optimizer"] == -held
    assert base.gathered_params_bytes == 0
    for z in (z1, z2, z3):
        assert z.activations_bytes == base.activations_bytes


def test_offload_moves_master_and_states_to_host():
    model = count_model(1_000_000_000)
    t = train_memory(model, Job(model=model, offload_optimizer=True))
    assert t.master_weights_bytes == 0 and t.optimizer_bytes == 0
    # host: fp32 master (4) + Adam states (8) + fp32 gradient copy (4) per parameter
    assert t.host_bytes == 16 * 10**9


# ---- LoRA --------------------------------------------------------------------------------------

def _llama7b_linears() -> list[ParamTensor]:
    # Llama-2-7B: 32 layers, hidden 4096, MLP 11008, vocab 32000 (its config.json)
    L = 32
    return [
        ParamTensor("model.embed_tokens.weight", (32000, 4096), 1, "embeddings", "embed_tokens", False),
        ParamTensor("model.layers.{i}.self_attn.q_proj.weight", (4096, 4096), L, "attention", "q_proj", True),
        ParamTensor("model.layers.{i}.self_attn.k_proj.weight", (4096, 4096), L, "attention", "k_proj", True),
        ParamTensor("model.layers.{i}.self_attn.v_proj.weight", (4096, 4096), L, "attention", "v_proj", True),
        ParamTensor("model.layers.{i}.self_attn.o_proj.weight", (4096, 4096), L, "attention", "o_proj", True),
        ParamTensor("model.layers.{i}.mlp.gate_proj.weight", (11008, 4096), L, "mlp", "gate_proj", True),
        ParamTensor("model.layers.{i}.mlp.up_proj.weight", (11008, 4096), L, "mlp", "up_proj", True),
        ParamTensor("model.layers.{i}.mlp.down_proj.weight", (4096, 11008), L, "mlp", "down_proj", True),
        ParamTensor("model.layers.{i}.input_layernorm.weight", (4096,), L, "norms", "input_layernorm", False),
        ParamTensor("model.layers.{i}.post_attention_layernorm.weight", (4096,), L, "norms", "post_attention_layernorm", False),
        ParamTensor("model.norm.weight", (4096,), 1, "norms", "norm", False),
        ParamTensor("lm_head.weight", (32000, 4096), 1, "head", "lm_head", True),
    ]


def test_llama2_7b_parameter_count_by_hand():
    m = tensor_model(_llama7b_linears())
    assert m.params.total == 6_738_415_616   # the published Llama-2-7B count


def test_lora_rank8_q_v_on_llama2_7b():
    # PEFT on Llama-2-7B, r=8, q_proj+v_proj: "trainable params: 4,194,304"
    m = tensor_model(_llama7b_linears())
    adapters = lora_tensors(m, 8, ("q_proj", "v_proj"))
    assert sum(t.total for t in adapters) == 2 * 32 * 8 * (4096 + 4096) == 4_194_304
    t = train_memory(m, Job(model=m, lora_rank=8, lora_targets=("q_proj", "v_proj")))
    assert t.trainable_params == 4_194_304
    assert t.gradients_bytes in (0, 2 * 4_194_304)  # 16-bit adapter gradients (if alive at peak)
    assert t.optimizer_bytes == 8 * 4_194_304
    assert t.master_weights_bytes == 4 * 4_194_304
    assert t.weights_bytes == 2 * 6_738_415_616 + 2 * 4_194_304


def test_qlora_base_in_nf4():
    m = tensor_model(_llama7b_linears())
    t = train_memory(m, Job(model=m, lora_rank=16, lora_targets=("q_proj", "v_proj"), lora_base="nf4"))
    nf4 = WEIGHT_FORMATS["nf4"]
    base = sum(nf4.tensor_bytes(x) for x in m.tensors)
    adapters = 2 * 32 * 16 * (4096 + 4096)
    assert t.weights_bytes == base + 2 * adapters


def test_lora_unknown_target_names_the_modules():
    m = tensor_model(_llama7b_linears())
    with pytest.raises(InputError, match="q_prj.*q_proj"):
        lora_tensors(m, 8, ("q_prj",))


def test_lora_needs_shapes():
    with pytest.raises(InputError, match="only a parameter count"):
        train_memory(SEVEN_B, Job(model=SEVEN_B, lora_rank=8))


# ---- bad names ---------------------------------------------------------------------------------

def test_unknown_names_suggest():
    with pytest.raises(UnknownNameError, match="mixed-bf16"):
        Job(model=SEVEN_B, precision="mixed_bf16")
    with pytest.raises(UnknownNameError, match="adamw"):
        Job(model=SEVEN_B, optimizer="adamww")
    with pytest.raises(UnknownNameError, match="q4_0"):
        Job(model=SEVEN_B, infer_precision="q4-0")


@pytest.mark.parametrize("field,value", [("batch", 0), ("gpus", -1), ("seq", 0), ("zero", 4),
                                         ("grad_accum", 1.5), ("lora_rank", 0)])
def test_job_rejects_bad_numbers(field, value):
    with pytest.raises(InputError, match=field):
        Job(model=SEVEN_B, **{field: value})


# ---- properties --------------------------------------------------------------------------------

_TRAIN_PARTS = ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
                "activations_bytes", "temporaries_bytes", "gathered_params_bytes", "overhead_bytes")
_INFER_PARTS = ("weights_bytes", "kv_cache_bytes", "activations_bytes", "overhead_bytes")

jobs = st.fixed_dictionaries({
    "precision": st.sampled_from(sorted(TRAINING_RECIPES)),
    "optimizer": st.sampled_from(sorted(OPTIMIZERS)),
    "infer_precision": st.sampled_from(sorted(WEIGHT_FORMATS)),
    "gpus": st.integers(1, 64),
    "zero": st.integers(0, 3),
})


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 10**13), kw=jobs)
def test_parts_nonnegative_and_sum_to_total(n, kw):
    m = count_model(n)
    job = Job(model=m, **kw)
    t = train_memory(m, job)
    d = t.per_gpu()
    assert all(d[k] >= 0 for k in d)
    assert sum(d[k] for k in _TRAIN_PARTS) == d["total_bytes"]
    i = infer_memory(m, job)
    e = i.per_gpu()
    assert all(e[k] >= 0 for k in e)
    assert sum(e[k] for k in _INFER_PARTS) == e["total_bytes"]


@settings(max_examples=150, deadline=None)
@given(a=st.integers(1, 10**13), b=st.integers(1, 10**13), kw=jobs)
def test_more_parameters_never_need_less_memory(a, b, kw):
    lo, hi = sorted((a, b))
    tl = train_memory(count_model(lo), Job(model=count_model(lo), **kw)).total_bytes
    th = train_memory(count_model(hi), Job(model=count_model(hi), **kw)).total_bytes
    assert tl <= th
    il = infer_memory(count_model(lo), Job(model=count_model(lo), **kw)).total_bytes
    ih = infer_memory(count_model(hi), Job(model=count_model(hi), **kw)).total_bytes
    assert il <= ih


def test_shard_is_ceil_division():
    assert shard(10, 3) == 4 and shard(9, 3) == 3 and shard(0, 5) == 0
    assert all(shard(x, n) * n >= x and (shard(x, n) - 1) * n < x
               for x in range(1, 200) for n in range(1, 9))


def test_model_states_bytes_per_param_sum():
    m = count_model(10**9)
    t = train_memory(m, Job(model=m))
    per = sum(l.bytes_per_param for l in t.lines
              if l.key in ("weights", "gradients", "master_weights", "optimizer"))
    assert math.isclose(per, 16.0)


def test_paged_adamw_8bit_states_are_in_managed_memory():
    # bitsandbytes PagedAdamW8bit: two uint8 states per element; a parameter of 100,000 elements
    # or more gets them from cudaMallocManaged (F.get_paged), a smaller one (Llama's norm weights,
    # 4,096 each: 2 x 32 + 1) from torch on the device; the fp32 block scales stay on the device
    from gpuplan.models import load_model

    m = load_model("llama-3.1-8b")
    norms = (2 * 32 + 1) * 4096
    t = train_memory(m, Job(model=m, precision="bf16", optimizer="paged-adamw-8bit", batch=1,
                            seq=128))
    assert t.paged_bytes == 2 * (m.params.total - norms)
    plain = train_memory(m, Job(model=m, precision="bf16", optimizer="adamw-8bit", batch=1,
                                seq=128))
    assert t.optimizer_bytes == plain.optimizer_bytes and plain.paged_bytes == 0
    line = next(l for l in t.lines if l.key == "optimizer")
    assert "paged" in line.note and "torch's allocator statistics" in line.note
    assert t.to_dict()["paged_bytes"] == t.paged_bytes


def test_lora_dropout_copies_and_qlora_saved_inputs_by_hand():
    """Llama-2-7B (h 4096, ffn 11008, 32 layers), batch 1 x 512 tokens, LoRA r=8 on q_proj and
    v_proj, SDPA. PEFT's forward is base(x) + B(A(dropout(x))): with lora_dropout 0 both adapters'
    A save the one normed input x (2 B a token-element); with 0.1 each adapter saves its own
    dropped bf16 copy (2 B) and its 1-byte mask: 2 x 3 - 2 = 4 B more per token-element of h, per
    layer. A 4-bit base (bitsandbytes MatMul4Bit) saves every base linear's input for the input
    gradient: beyond what LoRA and SDPA already keep, the MLP's normed input (2 B x h) and
    down_proj's input (2 B x ffn); its dequantized 16-bit weight is a transient of each matmul,
    which at this peak (the start of backward) is not alive."""
    from gpuplan.models import load_model
    m = load_model("llama-2-7b")
    base = dict(model=m, mode="train", batch=1, seq=512, lora_rank=8,
                lora_targets=("q_proj", "v_proj"), attention="sdpa")
    act = {(d, q): train_memory(m, Job(**base, lora_dropout=d, lora_base=q)).activations_bytes
           for d in (0.0, 0.1) for q in (None, "nf4")}
    tokens, h, ffn, layers = 512, 4096, 11008, 32
    assert act[(0.1, None)] - act[(0.0, None)] == (2 * 3 - 2) * tokens * h * layers  # 268,435,456
    assert act[(0.0, "nf4")] - act[(0.0, None)] == 2 * tokens * (h + ffn) * layers  # 494,927,872
