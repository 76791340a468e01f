"""The accounting: what a GPU holds to train or to serve a model, in bytes, line by line.

Training memory = weights + gradients + fp32 master copy + optimizer states + activations (+ the
transient buffers of the step) + runtime overhead. Each line is computed from the model's exact
parameter tensors and the job's named precision recipe, optimizer, sharding and adapters, so the
seed document's table comes out exactly (7B, mixed precision, Adam: 14 + 14 + 28 + 56 = 112 GB) and
every other configuration is the same sum with different bytes.

One module per concern; each imports only modules listed after it (arrows point down):

* :mod:`.fewest` -- the fewest GPUs of one kind a job needs (ZeRO-3 alone, tensor parallel
  alone, a TP x PP layout): the searches behind ``fit``'s GPU-count columns and the solver;
* :mod:`.train`, :mod:`.infer` -- the plans: :func:`train_memory`, :func:`infer_memory`;
* :mod:`.budget` -- a serving engine's start-up KV budget as the engine computes it:
  :func:`kv_budget`, :class:`KVBudget` (the rules: :mod:`gpuplan.engines.budget`);
* :mod:`.parallel` -- one rank of each pipeline stage of a TP/SP/PP/CP/EP layout;
* :mod:`.results` -- :class:`Line`, :class:`TrainMemory`, :class:`InferMemory`;
* :mod:`.states` -- weights, gradients, master copy, optimizer states, ZeRO sharding, offload;
* :mod:`.optimizer` -- state element bytes and the optimizer step's temporaries;
* :mod:`.layout` -- the layout's degrees, :func:`check_layout` (:mod:`gpuplan.job`'s), stage
  splits, micro-batches in flight, each rank's share of the parameter tensors (Megatron's sharding);
* :mod:`.kv` -- the KV cache;
* :mod:`.activations` -- activations and temporaries of a step, replayed op by op;
* :mod:`.lora` -- LoRA/QLoRA adapters;
* :mod:`.overhead` -- the runtime-overhead band;
* :mod:`.shape` -- the sequence length a job runs at.

This module only re-exports.
"""

from .budget import KVBudget, kv_budget
from .infer import infer_memory
from ..parallel import check_layout
from .lora import DEFAULT_LORA_TARGETS, lora_tensors
from .results import InferMemory, Line, TrainMemory
from .states import shard
from .train import train_memory

__all__ = [
    "Line", "TrainMemory", "InferMemory", "train_memory", "infer_memory", "lora_tensors",
    "DEFAULT_LORA_TARGETS", "shard", "check_layout", "kv_budget", "KVBudget",
]
