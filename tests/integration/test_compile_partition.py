"""torch.compile's activation memory against AOTAutograd's own partitioner (torch as the oracle).

A compiled layer keeps for its backward what ``min_cut_rematerialization_partition`` (the
partitioner torch.compile's inductor backend uses, with inductor's decompositions) chooses; the
tensors it saves are the placeholders of the backward graph it hands to the compiler. Here each
family's transformers layer is traced by ``aot_function`` on the CPU, its saved activations (not
the parameters, not the rotary tables) summed, and held to gpuplan's compiled replay of the same
layer (``runtime="compile"``), byte for byte.

One CPU-vs-CUDA difference is added explicitly, as in test_activations_probe.py: LayerNorm's
mean and rstd are 16-bit on the CPU for 16-bit inputs (the decomposition casts them to the input
dtype there), fp32 on CUDA: 2 x 2 bytes per row per LayerNorm. A saved view (a transposed
weight, a piece of a split projection) is counted as the storage it views, once.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.job import Job  # noqa: E402
from gpuplan.memory.activations import step_profile  # noqa: E402
from gpuplan.models import architecture_from_config, count_params  # noqa: E402
from gpuplan.models._types import Model  # noqa: E402

B, S = 2, 48  # b*s = 96 rows: no parameter dimension, so nothing is mistaken for a weight

CFG = {
    "llama": dict(hidden_size=256, intermediate_size=688, num_attention_heads=4,
                  num_key_value_heads=2, num_hidden_layers=1, vocab_size=512),
    "gpt2": dict(n_embd=256, n_layer=1, n_head=4, vocab_size=512, n_positions=128,
                 attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0),
    "gpt_bigcode": dict(n_embd=256, n_layer=1, n_head=4, n_inner=704, vocab_size=512,
                        n_positions=128, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0),
    "gpt_neox": dict(hidden_size=256, intermediate_size=704, num_attention_heads=4,
                     num_hidden_layers=1, vocab_size=512, rotary_pct=0.25),
}
CLASSES = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel",
           "gpt_bigcode": "GPTBigCodeForCausalLM", "gpt_neox": "GPTNeoXForCausalLM"}
#: Sets of LayerNorm statistics each layer keeps (16-bit on the CPU): GPT-NeoX's two
#: LayerNorms read the same input, and the compiled graph computes its statistics once.
LAYER_NORMS = {"llama": 0, "gpt2": 2, "gpt_bigcode": 2, "gpt_neox": 1}


def _layer(family: str):
    """The first layer of the family's model in bf16, and a function giving its keyword
    arguments (the rotary tables where the family computes them once per forward)."""
    cfg = transformers.AutoConfig.for_model(family, **CFG[family])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = getattr(transformers, CLASSES[family])(cfg).to(torch.bfloat16)
    base = {"llama": lambda m: m.model, "gpt_neox": lambda m: m.gpt_neox}.get(
        family, lambda m: m.transformer)(model)
    layer = (base.layers if hasattr(base, "layers") else base.h)[0]
    x = torch.randn(B, S, cfg.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    if family in ("llama", "gpt_neox"):
        pos = torch.arange(S)[None]
        cos, sin = base.rotary_emb(x, pos)
        return layer, x, (cos, sin), lambda c, s: dict(position_embeddings=(c, s),
                                                       attention_mask=None)
    return layer, x, (), lambda: dict(attention_mask=None)


#: View ops: a saved view is the storage of its base (a transposed weight is the weight).
_VIEWS = {"view", "_unsafe_view", "reshape", "permute", "t", "transpose", "alias", "expand",
          "unsqueeze", "squeeze", "slice", "select", "as_strided", "split", "getitem_view"}


def _op_name(node) -> str:
    return getattr(node.target, "__name__", "").split(".")[0]


def _base(node):
    """The node whose storage ``node`` views (itself when it is not a view): through view ops
    and through the pieces of a split (``getitem`` of ``split_with_sizes``)."""
    while node.op == "call_function":
        if _op_name(node) in _VIEWS:
            node = node.args[0]
        elif (_op_name(node) == "getitem" and node.args[0].op == "call_function"
              and _op_name(node.args[0]) in ("split", "split_with_sizes", "unbind", "chunk")):
            node = node.args[0].args[0]
        else:
            break
    return node


def _aot_saved_bytes(family: str) -> int:
    """Bytes of the activations the partitioner saves for the layer's backward: the backward
    graph's non-gradient inputs, each storage once, less parameters and the rotary tables."""
    from functorch.compile import (aot_function, make_boxed_func,
                                   min_cut_rematerialization_partition)
    from torch._inductor.decomposition import select_decomp_table

    layer, x, extra, kwargs = _layer(family)
    names = [n for n, _ in layer.named_parameters()]
    n_params = len(names)
    graphs = {}

    def f(*a):
        params = dict(zip(names, a[:n_params]))
        out = torch.func.functional_call(layer, params, (a[n_params],),
                                         kwargs(*a[n_params + 1:]))
        return out[0] if isinstance(out, tuple) else out

    def keep(name):
        def compiler(gm, _example):
            graphs[name] = gm
            return make_boxed_func(gm)
        return compiler

    fn = aot_function(f, fw_compiler=keep("fw"), bw_compiler=keep("bw"),
                      partition_fn=min_cut_rematerialization_partition,
                      decompositions=select_decomp_table())
    fn(*[p for _, p in layer.named_parameters()], x, *extra).float().sum().backward()
    fw_nodes = {n.name: n for n in graphs["fw"].graph.nodes}
    bases = {}
    for node in graphs["bw"].graph.nodes:
        if node.op != "placeholder" or node.name.startswith("tangents"):
            continue
        v = node.meta.get("val")
        if not isinstance(v, torch.Tensor):
            continue
        base = _base(fw_nodes[node.name]) if node.name in fw_nodes else node
        if base.op == "placeholder" and int(base.name.split("_")[1]) != n_params + 1:
            continue  # a parameter (or its transpose) or a rotary table: not an activation
        bv = base.meta.get("val", v)
        bases[base.name] = bv.untyped_storage().nbytes() if base is not node else \
            v.numel() * v.element_size()
    return sum(bases.values())


def _gpuplan_saved_bytes(family: str) -> int:
    arch = architecture_from_config({"model_type": family, **CFG[family]}, name=family)
    m = Model(name=family, params=count_params(arch.tensors, arch), tensors=arch.tensors,
              architecture=arch, source="config")
    job = Job(model=m, mode="train", precision="bf16", attention="sdpa", runtime="compile",
              batch=B, seq=S)
    return step_profile(m, job).layers[0][1].saved(B, S)


@pytest.mark.parametrize("family", sorted(CFG))
def test_compiled_layer_keeps_what_the_partitioner_saves(family):
    oracle = _aot_saved_bytes(family)
    cuda_stats = LAYER_NORMS[family] * 2 * 2 * B * S  # fp32 on CUDA, 16-bit on the CPU
    assert _gpuplan_saved_bytes(family) == oracle + cuda_stats


def test_compile_keeps_less_than_eager_and_says_where():
    # llama in bf16: eager keeps what each RMSNorm makes (x.float(), 4h, and the normalized
    # 16-bit product, 2h) and SiLU's output (2 x inter); the compiled layer recomputes them
    # from the 16-bit norm inputs and the gate projection, so it keeps those inputs instead:
    # the block input and the attention output projection (the residual is recomputed), 2h each
    arch = architecture_from_config({"model_type": "llama", **CFG["llama"]}, name="llama")
    m = Model(name="l", params=count_params(arch.tensors, arch), tensors=arch.tensors,
              architecture=arch, source="config")
    eager = step_profile(m, Job(model=m, mode="train", precision="bf16", runtime="eager"))
    comp = step_profile(m, Job(model=m, mode="train", precision="bf16", runtime="compile"))
    h, inter = 256, 688
    per_token_eager = eager.layers[0][1].saved(1, 1)
    per_token_comp = comp.layers[0][1].saved(1, 1)
    assert per_token_eager - per_token_comp == 2 * (4 * h + 2 * h) + 2 * inter - 2 * (2 * h)


def test_compiled_loss_keeps_the_16_bit_logits_and_two_row_statistics():
    """torchtune's compiled ``F.cross_entropy(logits.float(), labels)``: the partitioner keeps the
    16-bit logits it was given and amax and log(sum(exp)) per row; the fp32 upcast and the
    log-probabilities are recomputed in the backward."""
    import torch.nn.functional as F
    from functorch.compile import (aot_function, make_boxed_func,
                                   min_cut_rematerialization_partition)
    from torch._inductor.decomposition import select_decomp_table

    from gpuplan.memory.activations.profile import regime_for
    from gpuplan.memory.activations.symbolic import BS, Graph, simulate

    rows, vocab = B * S, 1000
    saved = {}

    def backward_compiler(gm, _example):
        saved["bytes"] = sum(n.meta["val"].numel() * n.meta["val"].element_size()
                             for n in gm.graph.nodes if n.op == "placeholder"
                             and not n.name.startswith("tangents")
                             and isinstance(n.meta.get("val"), torch.Tensor)
                             and n.meta["val"].dtype != torch.int64)  # the labels: an input
        return make_boxed_func(gm)

    fn = aot_function(lambda x, y: F.cross_entropy(x.float(), y, reduction="sum"),
                      fw_compiler=lambda gm, _: make_boxed_func(gm),
                      bw_compiler=backward_compiler,
                      partition_fn=min_cut_rematerialization_partition,
                      decompositions=select_decomp_table())
    logits = torch.randn(rows, vocab, dtype=torch.bfloat16, requires_grad=True)
    fn(logits, torch.randint(0, vocab, (rows,))).backward()

    g = Graph(regime_for("bf16"))
    x = g.input(BS * vocab, 2, grad=True, name="logits")
    g.compiling = True
    loss = g.cross_entropy(g.to(x, 4), BS, vocab)
    assert simulate(g, [loss], param_grad_dt=2).saved(B, S) == saved["bytes"]
    assert saved["bytes"] == rows * vocab * 2 + rows * 8
