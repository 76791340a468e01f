"""Activation memory and the transient buffers of a step, from the architecture.

The model describes what a *CUDA* run of the Hugging Face implementation holds. Each family's
forward pass is written out op by op (:mod:`.blocks`, :mod:`.heads`), following the transformers
code it mirrors, and replayed by :mod:`.symbolic` (which knows what each op saves for backward, how
autocast casts, and how backward allocates and frees). The result for one layer is a set of
formulas in batch ``b`` and sequence ``s``; a model is embeddings + layers + head and loss, and the
step timeline (forward, start of backward, through backward, optimizer step) is assembled from them.

Conventions (what each category holds):

* **activations** -- tensors saved for backward and alive at that moment (the layers' saved
  tensors, the loss's fp32 log-probabilities, the input ids), plus the KV cache transformers builds
  during a training forward (``use_cache``) while the forward runs;
* **temporaries** -- everything else that is transient: tensors not saved but not yet freed (the
  logits and their fp32 upcast during the loss, gradients of activations during backward, kernel
  workspaces such as FlashAttention's fp32 dq accumulator, the 16-bit weight copies autocast
  caches, optimizer-step temporaries, the fp32 gradient copy of mixed-precision recipes);
* **gradients** -- parameter gradients (``.grad``) alive at that moment.

Measured basis: ``benchmarks/activation_probe.py`` runs real models (fp32, bf16, CUDA-autocast
emulation) and records every saved tensor and the live bytes op by op;
``tests/integration/test_activations_probe.py`` holds this model to it.

Modules, each importing only those listed before it: :mod:`.symbolic` (the replay), :mod:`.spec`
(the architecture as the forward reads it), :mod:`.blocks` (one layer per family), :mod:`.heads`
(embeddings, head, loss), :mod:`.profile` (a step as formulas), :mod:`.timeline` (the training
step's peaks), :mod:`.serving` (prefill and decode working sets).
"""

from .profile import StepProfile, layer_activation_bytes, regime_for, step_profile
from .serving import InferActivations, infer_activations
from .timeline import TrainActivations, train_activations

__all__ = [
    "TrainActivations", "InferActivations", "StepProfile", "step_profile", "train_activations",
    "infer_activations", "layer_activation_bytes", "regime_for",
]
