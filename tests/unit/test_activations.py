"""Activation memory against the published closed form, hand calculations and properties.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 4.1:
a GPT layer with 16-bit activations, eager attention and dropout saves

    34*s*b*h + 5*a*s^2*b   bytes

(attention block 11sbh + 5as^2b: QKV input 2, Q and K 4, softmax output 2as^2b, its dropout mask
as^2b, the dropped-out probabilities 2as^2b, V 2, the output projection's input 2, its dropout
mask 1; MLP 19sbh: fc1 input 2, GELU input 8, fc2 input 8, dropout mask 1; two LayerNorm inputs
4). gpuplan's model replays the transformers code op by op; every test below that departs from
that configuration states the term that changes, computed by hand.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.memory import activations as A
from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import Architecture, Model, ParamCounts, load_model


def _model(arch: Architecture, params: int = 1) -> Model:
    return Model(name=arch.name, architecture=arch,
                 params=ParamCounts(total=params, by_component={"other": params}, active=params,
                                    embedding=0))


def gpt_layer(h=1024, a=16, layers=2, act="gelu", attn_dropout=0.1, hidden_dropout=0.1,
              vocab=1000) -> Architecture:
    """A GPT-2-style layer (LayerNorm, learned positions, fused QKV, 4h MLP) from config numbers."""
    return Architecture(
        name="gpt-layer", family="gpt2", kind="decoder", hidden_size=h, num_layers=layers,
        num_heads=a, num_kv_heads=a, head_dim=h // a, intermediate_size=4 * h,
        vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True, mlp="gelu",
        activation=act, norm="layernorm", position="learned",
        attention_dropout=attn_dropout, hidden_dropout=hidden_dropout,
        config={"attn_pdrop": attn_dropout, "resid_pdrop": hidden_dropout,
                "embd_pdrop": hidden_dropout})


def layer_bytes(arch: Architecture, *, b: int, s: int, precision="mixed-bf16", attention="eager",
                use_cache=False, checkpointing="none") -> int:
    m = _model(arch)
    job = Job(model=m, precision=precision, attention=attention, batch=b, seq=s,
              use_cache=use_cache, checkpointing=checkpointing)
    return A.step_profile(m, job).layers[0][1].saved(b, s)


# LayerNorm's saved mean and rstd are fp32 per row (CUDA's accumulate type): 2 norms x 2 x 4 B.
def ln_stats(s, b):
    return 2 * 2 * 4 * s * b


@pytest.mark.parametrize("h,a,s,b", [(1024, 16, 2048, 1), (4096, 32, 2048, 4), (12288, 96, 2048, 1),
                                     (768, 12, 512, 8)])
def test_korthikanti_34sbh_plus_5as2b(h, a, s, b):
    arch = gpt_layer(h=h, a=a)
    got = layer_bytes(arch, b=b, s=s)
    assert got == 34 * s * b * h + 5 * a * s * s * b + ln_stats(s, b)


def test_fp32_doubles_every_term_but_the_masks():
    # fp32 activations: every 2-byte tensor becomes 4 bytes; the 1-byte dropout masks (sbh twice
    # and as^2b once) stay 1 byte: 2 * (34 - 2) sbh + 2 sbh, 2 * (5 - 1) as^2b + as^2b.
    h, a, s, b = 1024, 16, 1024, 2
    got = layer_bytes(gpt_layer(h=h, a=a), b=b, s=s, precision="fp32")
    assert got == 66 * s * b * h + 9 * a * s * s * b + ln_stats(s, b)


def test_no_dropout_drops_the_masks_and_the_dropped_copy():
    # p = 0: no attention mask (as^2b), no dropped-out copy of the probabilities (2as^2b; the
    # matmul saves the softmax output itself) and no residual masks (2 x sbh).
    h, a, s, b = 1024, 16, 2048, 1
    got = layer_bytes(gpt_layer(h=h, a=a, attn_dropout=0.0, hidden_dropout=0.0), b=b, s=s)
    assert got == 32 * s * b * h + 2 * a * s * s * b + ln_stats(s, b)


def test_flash_attention_keeps_O_s_statistics():
    # SDPA/flash: the core keeps no s x s tensor. Q, K and V are views of the fused c_attn output
    # (its whole 6sbh storage stays alive), the kernel saves its output (2sbh, which is also
    # c_proj's input) and an fp32 logsumexp per head and row (4asb). Against eager: minus the
    # Q/K/V copies (6sbh) and the separate c_proj input (2sbh), plus 6sbh + 2sbh: 34sbh again,
    # minus 5as^2b, plus 4asb.
    h, a, s, b = 1024, 16, 2048, 2
    got = layer_bytes(gpt_layer(h=h, a=a), b=b, s=s, attention="sdpa")
    assert got == 34 * s * b * h + 4 * a * s * b + ln_stats(s, b)


def test_transformers_kv_cache_in_a_training_forward():
    # transformers builds a DynamicCache in a training forward (use_cache defaults to True): K
    # and V are copied by torch.cat and SDPA saves the copies, while Q still pins the fused
    # c_attn storage: + 2 x 2sbh.
    h, a, s, b = 1024, 16, 2048, 2
    got = layer_bytes(gpt_layer(h=h, a=a), b=b, s=s, attention="sdpa", use_cache=True)
    assert got == 38 * s * b * h + 4 * a * s * b + ln_stats(s, b)


def test_gpt2s_gelu_new_is_composed_of_elementwise_ops():
    # transformers' NewGELUActivation, 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))), saves
    # tanh's output, (1 + tanh) and 0.5*x besides its input: + 3 x 2 bytes x 4h = 24sbh.
    h, a, s, b = 1024, 16, 1024, 1
    got = layer_bytes(gpt_layer(h=h, a=a, act="gelu_new"), b=b, s=s)
    assert got == 58 * s * b * h + 5 * a * s * s * b + ln_stats(s, b)


def llama_layer(h=4096, a=32, kv=8, inter=14336, layers=2, vocab=128256) -> Architecture:
    return Architecture(
        name="llama-layer", family="llama", kind="decoder", hidden_size=h, num_layers=layers,
        num_heads=a, num_kv_heads=kv, head_dim=h // a, intermediate_size=inter, vocab_size=vocab,
        max_position_embeddings=131072, tie_word_embeddings=False, mlp="gated",
        activation="silu", norm="rmsnorm", position="rotary")


def test_llama_layer_bf16_sdpa_by_hand():
    # Llama (transformers LlamaDecoderLayer), bf16, SDPA/flash, no dropout, GQA:
    # * each RMSNorm: the fp32 upcast of its input (4), the fp32 rsqrt per row (4sb), its bf16
    #   normalized input to the weight multiply (2) and its output, the projections' input (2):
    #   8sbh + 4sb, twice;
    # * attention: Q after RoPE (2sbh); K and V at kv heads (2 x 2 sb*kv*d -- GQA in SDPA, no
    #   repeat); the flash output (2sbh, also o_proj's input); logsumexp 4asb;
    # * SwiGLU MLP: gate and up outputs, silu(gate), silu(gate)*up: 4 x 2 sbI.
    h, a, kv, inter, s, b = 4096, 32, 8, 14336, 2048, 1
    d = h // a
    expected = (2 * (8 * s * b * h + 4 * s * b) + 2 * s * b * h + 2 * 2 * s * b * kv * d
                + 2 * s * b * h + 4 * a * s * b + 8 * s * b * inter)
    assert layer_bytes(llama_layer(h, a, kv, inter), b=b, s=s, attention="sdpa",
                       use_cache=True) == expected


def test_llama_eager_repeats_kv_and_keeps_fp32_probabilities():
    # eager_attention_forward: repeat_kv copies K and V to every head (2 x 2sbh instead of
    # 2 x 2 sb*kv*d), Q is copied for the batched matmul (2sbh), softmax(dtype=float32) saves
    # its fp32 output (4as^2b) and the matmul saves its bf16 copy (2as^2b); the output is
    # transposed and copied for o_proj (2sbh) instead of the flash output and logsumexp. The
    # DynamicCache's K/V copies are held for the forward but not saved.
    h, a, kv, inter, s, b = 4096, 32, 8, 14336, 1024, 1
    expected = (2 * (8 * s * b * h + 4 * s * b) + 2 * s * b * h + 2 * 2 * s * b * h
                + 2 * s * b * h + 6 * a * s * s * b + 8 * s * b * inter)
    assert layer_bytes(llama_layer(h, a, kv, inter), b=b, s=s) == expected


def test_selective_checkpointing_drops_the_s2_terms():
    # Korthikanti sec. 4.2: recomputing the attention core keeps 34sbh (the s^2 terms go).
    h, a, s, b = 1024, 16, 2048, 1
    arch = gpt_layer(h=h, a=a)
    m = _model(arch)
    job = Job(model=m, attention="eager", batch=b, seq=s, use_cache=False,
              checkpointing="selective")
    prof = A.step_profile(m, job).layers[0][1]
    assert prof.saved(b, s) == 34 * s * b * h + ln_stats(s, b)
    # what the recompute makes again during that layer's backward: the s^2 terms (the region
    # starts from the batched-matmul copies of Q, K and V, which stay saved)
    assert prof.region_saved(b, s) == 5 * a * s * s * b


def test_moe_routes_b_s_k_rows_whatever_the_balance():
    # Mixtral-style layer with transformers' grouped_mm experts: every (token, expert) pair's
    # row is gathered (k*h per token), the expert up/gate output (2*I), silu(gate) and its
    # product with up (I each), the down output (h) are saved for b*s*k rows -- the total is
    # the same however the tokens fall on the experts (dropless routing).
    m = load_model("mixtral-8x7b")
    b, s = 1, 1024
    job = Job(model=m, batch=b, seq=s, attention="sdpa")
    prof = A.step_profile(m, job).layers[0][1]
    arch = m.architecture
    h, k, inter = arch.hidden_size, arch.experts_per_token, arch.moe_intermediate_size
    expert_rows = b * s * k * 2 * (h + 2 * inter + inter + inter + h)
    dense = llama_layer(h=h, a=arch.num_heads, kv=arch.num_kv_heads, inter=inter)
    dense_bytes = layer_bytes(dense, b=b, s=s, attention="sdpa", use_cache=True)
    # the dense MLP's 4 x 2sbI is replaced by the routed rows plus the router's fp32 softmax and
    # the small index/weight tensors (< 1% here)
    moe_extra = prof.saved(b, s) - (dense_bytes - 8 * s * b * inter)
    assert expert_rows <= moe_extra <= expert_rows * 1.01


# ---- the timeline -------------------------------------------------------------------------------

def test_logits_spike_is_the_activation_peak_for_a_large_vocabulary():
    # DESIGN.md: with a 128k vocabulary the start of backward (fp32 logits gradient: two b*s*V*4
    # buffers besides the saved fp32 log-probabilities) is the activation peak.
    m = load_model("llama-3.1-8b")
    t = train_memory(m, Job(model=m, batch=4, seq=2048, fused_optimizer=True,
                            precision="bf16"))
    assert t.peak_phase == "backward"
    act = A.train_activations(m, Job(model=m, batch=4, seq=2048, precision="bf16"),
                              grad_bytes=0)
    assert act.backward_detail.startswith("start of backward")
    bsv = 4 * 2048 * m.architecture.vocab_size
    # the nll gradient and the log_softmax gradient, both fp32 b*s*V (the 4-byte scalar gradient
    # of the loss is already freed by then)
    assert act.backward_temporaries >= 8 * bsv - 4


def test_adamw_foreach_step_is_the_peak_for_small_batches_and_fused_removes_it():
    # DESIGN.md: amp recipe, AdamW foreach: 4 (weights) + 4 (grads) + 8 (states) + 4 (the sqrt
    # temporary) = 20 B/param at the step, which is the peak at small batch.
    m = load_model("llama-3.1-8b")
    n = m.params.total
    t = train_memory(m, Job(model=m, precision="amp-bf16", batch=1, seq=512))
    assert t.peak_phase == "optimizer"
    assert t.phases["optimizer"] == 20 * n
    f = train_memory(m, Job(model=m, precision="amp-bf16", batch=1, seq=512,
                            fused_optimizer=True))
    assert f.phases["optimizer"] == 16 * n
    assert f.total_bytes < t.total_bytes


def test_autocast_weight_copies_are_alive_in_forward():
    # DESIGN.md: autocast caches a 16-bit copy of every weight: +2 B/param while activations are
    # alive. Compare the forward-phase temporaries of amp-bf16 and fp32 at a tiny batch.
    m = load_model("gpt2")
    n = m.params.total
    amp = A.train_activations(m, Job(model=m, precision="amp-bf16", batch=1, seq=8),
                              grad_bytes=0)
    assert amp.forward_temporaries >= 2 * n * 0.99


def test_gradient_accumulation_keeps_gradients_through_forward():
    m = load_model("gpt2")
    one = train_memory(m, Job(model=m, batch=2, seq=512))
    acc = train_memory(m, Job(model=m, batch=2, seq=512, grad_accum=4))
    grads = 2 * m.params.total
    assert acc.phases["forward"] - one.phases["forward"] == grads


def test_zero2_grads_in_backward_are_sharded():
    # pythia-1.4b (untied head) at a tiny batch: the backward peak is its end, when the embedding
    # gradient is made and every gradient exists. With ZeRO-2 each GPU keeps its shard of them
    # (reduce-scattered bucket by bucket; the bucket is an overhead line) -- but under DeepSpeed
    # the embedding's gradient, made last, is whole until its reduce hook copies it into the
    # bucket: 50,304 x 2,048 at 16 bits in flight at that point.
    m = load_model("pythia-1.4b")
    grads = 2 * m.params.total
    z1 = train_memory(m, Job(model=m, batch=1, seq=8, gpus=4, zero=1))
    z2 = train_memory(m, Job(model=m, batch=1, seq=8, gpus=4, zero=2))
    a1 = A.train_activations(m, Job(model=m, batch=1, seq=8), grad_bytes=grads)
    a2 = A.train_activations(m, Job(model=m, batch=1, seq=8), grad_bytes=-(-grads // 4))
    assert a1.backward_detail.startswith("end of backward")
    assert a1.backward_grads == grads and a2.backward_grads == -(-grads // 4)
    in_flight = 50304 * 2048 * 2
    assert z1.phases["backward"] - z2.phases["backward"] == grads - (-(-grads // 4)) - in_flight


def test_sequence_limit_is_an_error_naming_it():
    m = load_model("gpt2")
    with pytest.raises(InputError, match="at most 1024"):
        train_memory(m, Job(model=m, seq=4096))


# ---- properties ---------------------------------------------------------------------------------

_NAMES = ("gpt2", "llama-3.2-1b", "qwen2.5-0.5b", "bert-base-uncased", "pythia-160m", "opt-125m",
          "mistral-7b", "phi-3-mini", "gemma-2-9b", "falcon-7b", "qwen1.5-moe-a2.7b")
_MODELS = {n: load_model(n) for n in _NAMES}

jobs = st.fixed_dictionaries({
    "name": st.sampled_from(_NAMES),
    "precision": st.sampled_from(["fp32", "mixed-bf16", "amp-bf16", "bf16"]),
    "attention": st.sampled_from(["eager", "sdpa"]),
    "checkpointing": st.sampled_from(["none", "selective", "full"]),
    "optimizer": st.sampled_from(["adamw", "sgd", "adafactor"]),
    "grad_accum": st.sampled_from([1, 2]),
})


def _total(kw, **over):
    kw = dict(kw, **over)
    m = _MODELS[kw.pop("name")]
    return train_memory(m, Job(model=m, **kw)).total_bytes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kw=jobs, b=st.integers(1, 16), s=st.integers(1, 256), db=st.integers(0, 16),
       ds=st.integers(0, 256))
def test_memory_never_decreases_with_batch_or_sequence(kw, b, s, db, ds):
    assert _total(kw, batch=b + db, seq=s) >= _total(kw, batch=b, seq=s)
    assert _total(kw, batch=b, seq=s + ds) >= _total(kw, batch=b, seq=s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kw=jobs, b=st.integers(1, 16), s=st.integers(16, 512))
def test_checkpointing_never_increases_the_peak(kw, b, s):
    none = _total(kw, batch=b, seq=s, checkpointing="none")
    sel = _total(kw, batch=b, seq=s, checkpointing="selective")
    full = _total(kw, batch=b, seq=s, checkpointing="full")
    assert sel <= none and full <= none


@settings(max_examples=40, deadline=None)
@given(h=st.sampled_from([256, 512, 1024]), grow=st.sampled_from([2, 4]),
       layers=st.integers(1, 6), more=st.integers(0, 6), b=st.integers(1, 8),
       s=st.integers(16, 1024), prec=st.sampled_from(["fp32", "mixed-bf16", "amp-bf16"]))
def test_a_larger_model_never_needs_less(h, grow, layers, more, b, s, prec):
    small = gpt_layer(h=h, a=h // 64, layers=layers)
    big = dataclasses.replace(gpt_layer(h=h * grow, a=h * grow // 64, layers=layers + more))
    n_small = 12 * h * h * layers
    n_big = 12 * (h * grow) ** 2 * (layers + more)
    ts = train_memory(_model(small, n_small), Job(model=_model(small, n_small), batch=b, seq=s,
                                                  precision=prec))
    tb = train_memory(_model(big, n_big), Job(model=_model(big, n_big), batch=b, seq=s,
                                              precision=prec))
    assert tb.total_bytes >= ts.total_bytes


# ---- the training loop around the model (torchtune's recipes) ---------------------------------

def _llama_job(**kw) -> tuple[Model, Job]:
    m = _model(llama_layer(4096, 32, 8, 14336))
    return m, Job(model=m, precision="bf16", attention="sdpa", batch=1, seq=2048, **kw)


def test_torchtune_code_expands_k_and_v_to_every_head():
    # torchtune's MultiHeadAttention: k.unsqueeze(2).expand(...).flatten(1, 2), and v: the
    # attention kernel saves K and V at every query head instead of the kv heads:
    # 2 x 2 sb (a - kv) d more per layer
    h, a, kv, s, b = 4096, 32, 8, 2048, 1
    m, hf = _llama_job()
    tt = hf.with_(model_code="torchtune")
    diff = (A.step_profile(m, tt).layers[0][1].saved(b, s)
            - A.step_profile(m, hf).layers[0][1].saved(b, s))
    assert diff == 2 * 2 * s * b * (a - kv) * (h // a)


def test_torchtune_code_only_for_llama_style_decoders():
    m = _model(gpt_layer())
    with pytest.raises(InputError, match="llama-style"):
        A.step_profile(m, Job(model=m, model_code="torchtune"))


def test_loss_chunks_keep_the_16_bit_logits_once_compiled():
    # compiled, each chunk's loss keeps its 16-bit logits and two fp32 statistics per row
    # (amax, log-sum-exp); the final norm (eager: x.float() 4h, rsqrt 4, normed 2h) and its
    # output (2h, the chunks' input) are saved as before
    h, V, s, b = 4096, 128256, 2048, 1
    m, job = _llama_job(runtime="compile", loss_chunks=8)
    head = A.step_profile(m, job).head
    assert head.saved(b, s) == s * b * (2 * V + 8) + s * b * (4 * h + 4 + 2 * h + 2 * h)


def test_offloaded_layer_inputs_leave_the_backward_start():
    # full checkpointing keeps each layer's input (2sbh in bf16); offloaded, they are in host
    # memory when the backward starts (the final norm's tensors fill the side stream's stash)
    h, layers, s, b = 4096, 2, 2048, 1
    m, job = _llama_job(checkpointing="full", loss_chunks=8, runtime="compile")
    kept = train_activation_start(m, job)
    off = train_activation_start(m, job.with_(offload_activations=True))
    assert kept - off == layers * 2 * s * b * h


def train_activation_start(m: Model, job: Job) -> int:
    t = A.train_activations(m, job, grad_bytes=0)
    assert t.backward_detail.startswith("start of backward")
    return t.backward_peak


@pytest.mark.parametrize("kw,fix", [
    (dict(optimizer_in_backward=True, grad_accum=2), "grad_accum 1"),
    (dict(optimizer_in_backward=True, offload_optimizer=True), "drop one"),
    (dict(offload_activations=True), "add checkpointing full"),
    (dict(model_code="megatron"), "transformers, torchtune"),
    (dict(loss_chunks=0), "loss_chunks"),
])
def test_loop_options_refuse_what_the_loop_cannot_do(kw, fix):
    with pytest.raises(InputError, match=fix):
        _llama_job(**kw)


def test_optimizer_in_backward_never_holds_every_gradient():
    m = load_model("llama-3.1-8b")
    job = Job(model=m, precision="bf16", batch=1, seq=512, fused_optimizer=True)
    with_grads = train_memory(m, job)
    stepped = train_memory(m, job.with_(optimizer_in_backward=True))
    assert with_grads.phases["optimizer"] - stepped.phases["optimizer"] == with_grads.gradients_bytes
    line = next(l for l in stepped.lines if l.key == "gradients")
    assert "stepped and freed in the backward" in line.at_peak
