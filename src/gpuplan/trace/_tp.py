"""Tensor parallelism with DTensor under the fake process group (see
:mod:`gpuplan.trace.distributed`); imports torch."""

from __future__ import annotations

import contextlib
import dataclasses
import time

from torch import nn

from ..errors import UnsupportedError, opt
from ._fsdp import blocks, fake_world
from ._recorder import Recorder
from ._result import TraceResult
from ._run import _default_seq, _notes, _result
from ._spec import resolve
from ._step import StepConfig, check_config, run

#: Row-parallel linears (their input dimension split), as the analytic plan's Megatron layout
#: (``gpuplan.parallel.layout``): attention output and MLP down projections; every other linear of
#: a block is column-parallel (q/k/v, fused qkv, gate/up, fc1). BERT's ``intermediate.dense`` is
#: column-parallel despite ending in ``dense``.
ROW = frozenset({"o_proj", "out_proj", "c_proj", "down_proj", "w2", "fc2", "dense_4h_to_h",
                 "dense"})
#: Families whose blocks torch's Colwise/RowwiseParallel cannot split as Megatron does.
_NOT_SPLIT = {
    "gpt2": "GPT-2's projections are transformers Conv1D modules, which torch's ColwiseParallel "
            "and RowwiseParallel do not take (nn.Linear and nn.Embedding only)",
    "falcon": "Falcon's fused query_key_value holds all query heads then one K/V head: a "
              "column split gives the K/V head to one rank only",
    "bloom": "BloomAttention reshapes the fused query_key_value with the model's n_head, not "
             "a rank's share of the heads, so a column split of it cannot run",
    "mixtral": "Mixtral's experts are one fused 3-D parameter per projection, which torch's "
               "ColwiseParallel and RowwiseParallel do not take",
    "qwen2_moe": "the experts are fused 3-D parameters, which torch's ColwiseParallel and "
                 "RowwiseParallel do not take",
}


def block_plan(block: nn.Module) -> dict:
    """Megatron's plan for one block: ``{submodule name: ColwiseParallel() | RowwiseParallel()}``
    for every ``nn.Linear`` in it."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for name, mod in block.named_modules():
        if isinstance(mod, nn.Linear):
            leaf = name.rsplit(".", 1)[-1]
            row = leaf in ROW and "intermediate" not in name
            plan[name] = RowwiseParallel() if row else ColwiseParallel()
    return plan


def _ends_plan(model: nn.Module) -> dict:
    """The vocabulary split over the TP group, as the plan assumes (``VOCAB_PARALLEL``): the token
    embedding row-parallel on its vocabulary rows (``RowwiseParallel`` of an ``nn.Embedding``:
    a vocab-parallel embedding whose partial outputs are all-reduced), the output head
    column-parallel with its logits left sharded on the vocabulary for ``loss_parallel``'s
    vocab-parallel cross-entropy. A head tied to the embedding shares its sharded weight."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plan = {}
    for name, mod in model.named_modules():
        if mod is emb and isinstance(mod, nn.Embedding):
            plan[name] = RowwiseParallel(input_layouts=Replicate())
        elif mod is out and isinstance(mod, nn.Linear):
            plan[name] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    return plan


def _parallelizer(mesh):
    from torch.distributed.tensor.parallel import parallelize_module

    def prepare(model: nn.Module) -> list[str]:
        family = getattr(getattr(model, "config", None), "model_type", "")
        if family in _NOT_SPLIT:
            raise UnsupportedError(f"{opt('tp')}: {_NOT_SPLIT[family]}; trace a llama, mistral, "
                                   "qwen2, "
                                   "opt, gpt_neox, bert or vit model")
        units = blocks(model)
        n = 0
        for block in units:
            plan = block_plan(block)
            n += len(plan)
            parallelize_module(block, mesh, plan)
        ends = _ends_plan(model)
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0)
        if ends and 0 < vocab < mesh.size():
            # DTensor would leave a rank an empty shard of the vocabulary rows, which the
            # optimizer's in-place update cannot place (Megatron pads the vocabulary instead)
            raise UnsupportedError(f"{opt('tp')} {mesh.size()}: the vocabulary's {vocab} rows "
                                   "split "
                                   f"over {mesh.size()} ranks leave some ranks none; trace at "
                                   f"{opt('tp')} {vocab} or less")
        emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        tied = emb is not None and out is not None and out.weight is emb.weight
        if ends:
            parallelize_module(model, mesh, ends)
        if tied:
            # each style distributes its module's own weight; a tied head shares the embedding's
            # (both split on the vocabulary rows: the same Shard(0) DTensor)
            out.weight = emb.weight
        styles = [type(st).__name__ for st in ends.values()]
        return [f"tensor parallel over {mesh.size()} ranks with DTensor (fake process group; "
                f"rank 0 traced): {n} linears of {len(units)} blocks split as Megatron-LM does "
                "(q/k/v, gate/up, fc1 column-parallel; attention output and down projections "
                "row-parallel)"
                + (", the token embedding vocab-parallel" if "RowwiseParallel" in styles else "")
                + (", the head column-parallel with loss_parallel's vocab-parallel "
                   "cross-entropy" if "ColwiseParallel" in styles else "")
                + (" (tied to the embedding)" if tied else "")
                + "; norms and everything else replicated (implicit_replication)"]
    return prepare


def trace(model, *, tp, batch, seq, precision, optimizer, optimizer_impl, checkpointing,
          attention) -> TraceResult:
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.distributed.tensor.parallel import loss_parallel

    source = resolve(model)
    cfg = StepConfig(mode="train", batch=batch, seq=seq or _default_seq(source),
                     precision=precision, optimizer=optimizer, optimizer_impl=optimizer_impl,
                     checkpointing=checkpointing, attention=attention)
    check_config(cfg)
    rec = Recorder()
    t0 = time.perf_counter()
    with fake_world(tp) as mesh, contextlib.ExitStack() as stack:
        # the norms (and other replicated parameters) stay plain tensors: torch's DTensor ops
        # treat them as replicated inside implicit_replication (the foreach optimizer mixes them)
        stack.enter_context(implicit_replication())
        stack.enter_context(loss_parallel())
        out = run(source, cfg, fake=True, recorder=rec, prepare=_parallelizer(mesh))
    notes = _notes(out, cfg, real_cpu=False)
    result = _result(source.name, cfg, out, measured=None, notes=notes,
                     seconds=time.perf_counter() - t0)
    return dataclasses.replace(result, precision=precision)


__all__ = ["trace", "block_plan", "ROW"]
