"""The ends of the model: embeddings, and the final norm, output head and loss (training) or the
next-token logits (serving), each mirroring the transformers code it names."""

from __future__ import annotations

from fractions import Fraction

from .blocks import Ctx, activation, layernorm, norm
from .spec import GPT2_LIKE
from .symbolic import BS, Form, Tensor

__all__ = ["embed_block", "head_block", "infer_head"]

def embed_block(c: Ctx, ids: Tensor) -> Tensor:
    """Token (and position, token-type) embeddings of each family, or ViT's patch embedding."""
    g, sp = c.g, c.sp
    h = sp.h
    if sp.kind == "vision":
        return c.scatter(_vit_embed(c))
    emb_trainable = not c.o.frozen
    x = g.embedding(ids, g.param(sp.vocab * h, "embed_tokens", trainable=emb_trainable), BS * h)
    if sp.family in ("gemma2", "gemma3_text"):
        x = g.scale(x, "embed.normalizer")
    if sp.family in GPT2_LIKE + ("opt",):
        pos = g.embedding(g.constant(BS, 8, "position_ids"),
                          g.param(h, "embed_positions", trainable=emb_trainable), BS * h, "wpe")
        x = g.add(x, pos, "embed+pos")
        x = g.dropout(x, sp.embd_dropout if sp.family in GPT2_LIKE else sp.hidden_dropout,
                      "embed.dropout")
    if sp.family == "bert":
        tt = g.embedding(g.constant(BS, 8, "token_type_ids"), g.param(h, "token_type"), BS * h)
        pos = g.embedding(g.constant(BS, 8, "position_ids"), g.param(h, "positions"), BS * h)
        x = g.add(g.add(x, tt, "embed+tt"), pos, "embed+pos")
        x = c.scatter(x)
        x = layernorm(c, x, "embeddings.LayerNorm")
        return g.dropout(x, sp.hidden_dropout, "embed.dropout")
    if sp.family == "bloom":
        return layernorm(c, c.scatter(x), "word_embeddings_layernorm")
    return c.scatter(x)  # SP: the vocab-parallel embedding's output reduce-scattered


def _vit_embed(c: Ctx) -> Tensor:
    """Conv patch embedding, class token, position embeddings, dropout. The image tensor is an
    input (counted as such); ``s`` is the number of tokens (patches + 1)."""
    g, sp = c.g, c.sp
    h = sp.h
    pix = g.input(BS * (sp.patch * sp.patch * sp.channels), g.r.param, grad=False, name="pixels")
    patches = g.linear(pix, c.w(sp.channels * sp.patch * sp.patch * h, "patch_embeddings"),
                       BS * h, name="patch_embeddings")
    x = g.cat([patches], "cls_cat")
    x = g.add(x, g.constant(BS * 0, 4, "pos"), "embed+pos")
    return g.dropout(x, sp.hidden_dropout, "embed.dropout")


def _final_norm(c: Ctx, x: Tensor) -> Tensor:
    """The norm after the last layer of a decoder."""
    if c.sp.family in ("gpt_neox", "opt"):
        return layernorm(c, x, "final_layer_norm")
    return norm(c, x, "norm")


def _vit_classifier(c: Ctx, x: Tensor) -> Tensor:
    """ViTForImageClassification's head: the final LayerNorm, the [CLS] row, the classifier."""
    g, sp = c.g, c.sp
    x = layernorm(c, x, "layernorm")
    pooled = g.index(x, Form(b=sp.h), None, name="pooled")
    return g.linear(pooled, c.w(sp.h * sp.labels, "classifier"), Form(b=sp.labels),
                    name="classifier")


def _bert_transform(c: Ctx, x: Tensor) -> Tensor:
    """BertPredictionHeadTransform: dense, activation, LayerNorm (before the MLM decoder)."""
    t = c.linear(x, c.sp.h, c.sp.h, "cls.transform.dense")
    t = activation(c, t, "cls.transform.act")
    return layernorm(c, t, "cls.transform.LayerNorm")


def head_block(c: Ctx, x: Tensor) -> Tensor:
    """Final norm, the output head and the loss."""
    g, sp = c.g, c.sp
    h, V = sp.h, sp.vocab
    if sp.kind == "vision":
        return g.cross_entropy(_vit_classifier(c, x), Form(b=1), sp.labels)
    if sp.family == "bert":
        g.hold(x)  # the encoder's last_hidden_state, held by its output
        logits = g.linear(_bert_transform(c, c.gather(x)), c.w(V * h, "decoder"), BS * V,
                          name="decoder")
        g.hold(logits)
        return g.cross_entropy(logits, BS, V)
    x = _final_norm(c, x)
    g.hold(x)  # last_hidden_state: held by the base model's output until the forward returns
    x = c.gather(x)  # SP: the head is column-parallel (vocab-parallel) over the full sequence
    if c.o.loss_chunks > 1 or c.o.model_code == "torchtune":
        return _torchtune_loss(c, x)
    logits = g.linear(x, c.w(V * h, "lm_head"), BS * V, name="lm_head")
    g.hold(logits)  # returned in the model output: alive until the forward returns
    if sp.softcap_final:
        logits = g.scale(g.unary_saves_output(g.scale(logits, "softcap.div"), "softcap.tanh"),
                         "softcap.mul")
    g.compiling = c.o.compiled         # the loss compiled (torchtune's compile_loss)
    logits = g.to(logits, 4)           # ForCausalLMLoss: logits.float()
    loss = g.cross_entropy(logits, BS, V)
    g.compiling = False
    return loss


def _torchtune_loss(c: Ctx, x: Tensor) -> Tensor:
    """torchtune's output projection and loss. Whole: TransformerDecoder.forward returns
    ``self.output(h).float()`` (the upcast in the model, eager) to nn.CrossEntropyLoss. In
    ``loss_chunks`` chunks: ``chunked_output`` returns the 16-bit logits of each chunk of the
    sequence (``h.chunk(n, dim=1)``), all alive until the loss returns, and
    CEWithChunkedOutputLoss runs ``compute_cross_entropy`` -- ``F.cross_entropy(logits.float())``,
    what compile_loss compiles -- one chunk at a time."""
    g, sp, o = c.g, c.sp, c.o
    h, V, n = sp.h, sp.vocab, o.loss_chunks
    w = c.w(V * h, "lm_head")  # one weight: its gradient is summed over the chunks
    rows = BS * Fraction(1, n) if n > 1 else BS
    total = None
    for _ in range(n):
        logits = g.linear(g.view(x, rows * h) if n > 1 else x, w, rows * V, name="lm_head")
        if n == 1:
            logits = g.to(logits, 4)  # .float() in the model's forward
        g.hold(logits)  # the model's output, until the loss is computed
        g.compiling = o.compiled
        loss = g.cross_entropy(g.to(logits, 4), rows, V)
        g.compiling = False
        total = loss if total is None else g.add(total, loss, "loss.sum")
    return total


def infer_head(c: Ctx, x: Tensor, logits_all: bool) -> Tensor:
    """Final norm and the output head; generate() keeps the last position's logits in fp32."""
    g, sp = c.g, c.sp
    h, V = sp.h, sp.vocab
    if sp.kind == "vision":
        return _vit_classifier(c, x)
    if sp.family == "bert":
        return g.linear(_bert_transform(c, x), c.w(V * h, "decoder"), BS * V, name="decoder")
    x = _final_norm(c, x)
    if logits_all:
        # A plain forward without labels (scoring, perplexity): transformers' *ForCausalLM
        # returns ``self.lm_head(hidden_states)`` in the model dtype and upcasts only inside
        # the loss, which runs when labels are passed -- no fp32 copy.
        return g.linear(x, c.w(V * h, "lm_head"), BS * V, name="lm_head")
    last = g.index(x, Form(b=h), None, name="last_position")
    logits = g.linear(last, c.w(V * h, "lm_head"), Form(b=V), name="lm_head")
    return g.to(logits, 4)  # next_token_logits.to(float32) in generate()

