"""What to trace: a catalog name, a config.json / model directory, a raw config dict, or the user's
own ``path/to/file.py:factory``; and how to build it with transformers (no weights, no hub, never
``trust_remote_code``)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal
from unittest import mock

from .._record import record
from .. import models
from .._io import json_problem, read_bounded
from ..errors import InputError, ModelFileError, UnsupportedError, opt
from ..job import check_positions

#: config.json files are small; anything larger is not a config.
CONFIG_LIMIT = 4 * 1024 * 1024

Task = Literal["causal-lm", "masked-lm", "image-classification", "sequence-classification",
               "custom"]

#: Keys dropped from a config before building: remote code, quantization (the trace runs the
#: unquantized model), and bookkeeping.
_DROP = ("auto_map", "quantization_config", "transformers_version", "_name_or_path",
         "torch_dtype", "dtype", "_attn_implementation", "attn_implementation")


@record
class ModelSource:
    """A resolved model spec."""

    name: str
    """How the model is named in the output (catalog name, path, or ``file.py:factory``)."""
    config: dict | None = None
    """The raw config.json dict (None for a factory)."""
    factory: Callable[[], Any] | None = None
    """The user's factory, returning ``(model, example_batch)``."""
    origin: str = ""
    """Where the spec came from: ``catalog``, ``config``, ``dict`` or ``factory``."""


def _plain(obj):
    """A config as plain dicts and lists (a Model keeps read-only mapping proxies, which
    transformers' config deep-copy cannot pickle)."""
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def resolve(spec: str | dict) -> ModelSource:
    """Turn a model spec into a :class:`ModelSource` (reads files with bounds; runs no code except a
    factory the user names explicitly)."""
    if isinstance(spec, dict):
        name = str(spec.get("_name_or_path") or spec.get("model_type") or "config")
        return ModelSource(name=name, config=dict(spec), origin="dict")
    arch = getattr(spec, "architecture", None)
    if arch is not None and getattr(arch, "config", None):  # a gpuplan.models.Model
        return ModelSource(name=str(getattr(spec, "name", arch.name)),
                           config=_plain(arch.config), origin="model")
    if hasattr(spec, "architecture"):
        raise InputError(f"model {getattr(spec, 'name', spec)!r}: known only by its parameter "
                         "count; the trace needs an architecture (a catalog name or config.json)")
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"model {spec!r}: expected a catalog name, a config.json path, a model "
                         "directory or path/to/file.py:factory")
    head, sep, tail = spec.rpartition(":")
    if sep and head.endswith(".py"):
        return ModelSource(name=spec, factory=_load_factory(Path(head), tail), origin="factory")
    p = Path(spec)
    if p.is_dir():
        cfg_path = p / "config.json"
        if not cfg_path.is_file():
            raise ModelFileError(p, "model directory has no config.json")
        return ModelSource(name=spec, config=_read_config(cfg_path), origin="config")
    if p.suffix == ".json" or p.is_file():
        return ModelSource(name=spec, config=_read_config(p), origin="config")
    if "/" in spec or "\\" in spec:
        raise ModelFileError(p, "no such file or directory (gpuplan never downloads from the hub; "
                                "give a local config.json or model directory)")
    return ModelSource(name=spec, config=_catalog(spec), origin="catalog")


def check_sequence(spec: str | dict, seq: int) -> None:
    """The trace's refusal of a sequence past a text model's positions
    (:func:`gpuplan.job.check_positions`, the rule :func:`_token_batches` applies), checked
    before torch is imported: ``gpuplan trace`` calls it first, so a mistyped ``--seq`` costs no
    torch import. A factory's code is not run (its model is known only once built), a vision
    model ignores ``--seq``, and a config the planner cannot read is left to the trace."""
    if isinstance(spec, str):
        head, sep, _ = spec.rpartition(":")
        if sep and head.endswith(".py"):
            return
    arch = _planned_architecture(resolve(spec))
    if arch is not None and arch.kind != "vision":
        check_positions(arch, seq, "seq", model=arch.name if isinstance(spec, dict) else spec)


def _catalog(name: str) -> dict:
    try:
        return dict(models.catalog_config(name))
    except NotImplementedError:
        raise InputError(f"model {name!r}: the model catalog is not available in this build; give "
                         "a config.json path or a model directory") from None


def _read_config(path: Path) -> dict:
    data = read_bounded(path, CONFIG_LIMIT, what="config.json")
    try:
        cfg = json.loads(data)
    except UnicodeDecodeError as e:
        raise ModelFileError(path, f"not valid JSON ({e})") from None
    except (ValueError, RecursionError) as e:  # a 5,000-digit integer, 10^5 nested brackets
        raise ModelFileError(path, f"not valid JSON ({json_problem(e)})") from None
    if not isinstance(cfg, dict):
        raise ModelFileError(path, "config.json must hold a JSON object")
    return cfg


def _failure(e: BaseException) -> str:
    """The user's code's failure in a few words (a ``sys.exit`` in it is one too: gpuplan's own
    exit status is never the user code's)."""
    if isinstance(e, SystemExit):
        return f"SystemExit: it called sys.exit({e.code!r})"
    return f"{type(e).__name__}: {e}"


def _load_factory(path: Path, name: str) -> Callable[[], Any]:
    if not name.isidentifier():
        raise InputError(f"model {str(path)}:{name}: {name!r} is not a Python name; use "
                         "path/to/file.py:function_name")
    if not path.is_file():
        raise ModelFileError(path, "no such Python file")
    mod_name = f"_gpuplan_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(path, "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)  # the user's own code, run knowingly (documented)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure in user code: one line
        sys.modules.pop(mod_name, None)
        raise ModelFileError(path, f"importing it failed: {_failure(e)}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise InputError(f"model {str(path)}:{name}: the file has no function {name!r}")
    return fn


# --------------------------------------------------------------------------------------------------
# Building


@dataclass
class Built:
    """A model ready to step, and how to feed it."""

    model: Any
    task: Task
    make_batch: Callable[[], dict | tuple | Any]
    notes: list[str] = field(default_factory=list)

    @property
    def has_cache(self) -> bool:
        """A causal LM: it keeps a KV cache when generating (and is told not to in training)."""
        return self.task == "causal-lm"


_TASK_SUFFIXES = (("ForCausalLM", "causal-lm"), ("LMHeadModel", "causal-lm"),
                  ("ForMaskedLM", "masked-lm"), ("ForImageClassification", "image-classification"),
                  ("ForSequenceClassification", "sequence-classification"))


def _task_of(cls_name: str) -> Task | None:
    for suffix, task in _TASK_SUFFIXES:
        if cls_name.endswith(suffix):
            return task
    return None


def hf_config(source: ModelSource):
    """The transformers config object for a config-based source."""
    import transformers

    cfg = source.config or {}
    mt = cfg.get("model_type")
    if not mt:
        raise ModelFileError(source.name, "config has no 'model_type'; gpuplan builds the model "
                                          "with transformers and needs it")
    from transformers import CONFIG_MAPPING

    if mt not in CONFIG_MAPPING:
        raise ModelFileError(source.name, f"model_type {mt!r} is not built into transformers "
                                          f"{transformers.__version__}; gpuplan never runs remote "
                                          "code (trust_remote_code), so it cannot build this model")
    kwargs = {k: v for k, v in cfg.items() if k not in _DROP and k != "model_type"}
    try:
        return CONFIG_MAPPING[mt](**kwargs)
    except Exception as e:  # noqa: BLE001 - transformers validation errors vary
        # its last line says why (pydantic-style validators wrap it in a header line)
        why = [ln.strip() for ln in str(e).splitlines() if ln.strip()][-1:] or [type(e).__name__]
        raise ModelFileError(source.name, f"transformers rejects this {mt} config: "
                             f"{why[0]}") from None


def model_class(source: ModelSource, config) -> tuple[type, Task]:
    """The transformers class to build and its training task."""
    import transformers
    from transformers.models.auto import modeling_auto as ma

    for arch in (source.config or {}).get("architectures") or ():
        task = _task_of(str(arch))
        cls = getattr(transformers, str(arch), None) if task else None
        if cls is not None:
            return cls, task
    for mapping, task in ((ma.MODEL_FOR_CAUSAL_LM_MAPPING, "causal-lm"),
                          (ma.MODEL_FOR_MASKED_LM_MAPPING, "masked-lm"),
                          (ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING, "image-classification")):
        try:
            return mapping[type(config)], task
        except KeyError:
            continue
    raise UnsupportedError(f"not traceable: {source.name} ({config.model_type}) has no causal-LM, "
                           "masked-LM or image-classification class in transformers")


def build(source: ModelSource, *, dtype, attention: str, batch: int, seq: int, device: str,
          skip_init: bool = False) -> Built:
    """Build the model (under whatever fake/real mode the caller set up) and its batch maker.

    ``skip_init``: skip transformers' weight initialization (fake tensors have no values; some
    initializers, e.g. truncated normal, read values back)."""
    if source.factory is not None:
        return _build_factory(source, dtype=dtype, device=device)
    model, task = _build_transformers(source, dtype=dtype, attention=attention, device=device,
                                      skip_init=skip_init)
    if task in ("causal-lm", "masked-lm", "sequence-classification"):
        return _token_batches(source, model, task, batch=batch, seq=seq, device=device)
    return _image_batches(model, task, batch=batch, dtype=dtype, device=device)


def _build_factory(source: ModelSource, *, dtype, device: str) -> Built:
    """The user's ``(model, example_batch)``, cast to ``dtype`` and moved to ``device``."""
    import torch

    try:
        out = source.factory()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's code: one line
        raise InputError(f"model {source.name}: the factory raised {_failure(e)}") from None
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.nn.Module)):
        raise InputError(f"model {source.name}: the factory must return (model, example_batch), "
                         f"got {type(out).__name__}")
    model, example = out
    _cast_module(model, dtype)
    example = _to_device(example, device, dtype if dtype != torch.float32 else None)
    return Built(model=model, task="custom", make_batch=lambda: example,
                 notes=["factory model: the loss is output.loss, a scalar output, or the sum "
                        "of the output"])


def _build_transformers(source: ModelSource, *, dtype, attention: str, device: str,
                        skip_init: bool) -> tuple[Any, Task]:
    """The transformers model of a config-based source (no weights loaded) and its task."""
    import torch

    config = hf_config(source)
    cls, task = model_class(source, config)
    no_init = contextlib.nullcontext()
    if skip_init:
        from transformers.modeling_utils import PreTrainedModel

        no_init = mock.patch.object(PreTrainedModel, "initialize_weights", lambda self: None)
    if attention == "sdpa" and not getattr(cls, "_supports_sdpa", False):
        attention = "eager"  # BLOOM: its attention has one implementation (gpuplan plans it so)
    with torch.device(device), no_init:
        model = cls._from_config(config, dtype=dtype, attn_implementation=attention)
    return model, task


def _token_batches(source: ModelSource, model, task: Task, *, batch: int, seq: int,
                   device: str) -> Built:
    """A text model: random token ids (batch, seq) as inputs and labels."""
    import torch

    cfg = model.config
    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    arch = _planned_architecture(source)
    notes = [n for n in (check_positions(arch, seq, "seq", model=source.name),) if n] \
        if arch is not None else []
    limit = _max_positions(cfg) if arch is None else None
    if limit is not None and seq > limit:
        raise InputError(f"{opt('seq')} {seq}: longer than {source.name}'s {limit} positions "
                         f"(max_position_embeddings); use {opt('seq')} {limit} or less")

    def make_batch():
        ids = torch.randint(0, max(vocab, 2), (batch, seq), device=device)
        if task == "sequence-classification":
            labels = torch.randint(0, max(int(getattr(cfg, "num_labels", 2)), 2), (batch,),
                                   device=device)
            return {"input_ids": ids, "labels": labels}
        return {"input_ids": ids, "labels": ids}

    return Built(model=model, task=task, make_batch=make_batch, notes=notes)


def _planned_architecture(source: ModelSource):
    """The architecture gpuplan's planner reads from the config, so the trace refuses or notes a
    sequence by the rule fit, speed and cluster share (:func:`gpuplan.job.check_positions`);
    None for a model_type the planner does not know (then :func:`_max_positions` decides)."""
    if source.config is None:
        return None
    try:
        return models.architecture_from_config(source.config, name=source.name)
    except InputError:
        return None


def _image_batches(model, task: Task, *, batch: int, dtype, device: str) -> Built:
    """An image classifier: random images (batch, channels, size, size) and labels."""
    import torch

    cfg = model.config
    size = int(getattr(cfg, "image_size", 224))
    chans = int(getattr(cfg, "num_channels", 3))
    n_labels = max(int(getattr(cfg, "num_labels", 2)), 2)
    notes = [f"vision model: --seq is ignored; {size}x{size} images "
             f"({(size // int(getattr(cfg, 'patch_size', 16))) ** 2 + 1} tokens)"]

    def make_vision_batch():
        pix = torch.randn(batch, chans, size, size, device=device, dtype=dtype)
        labels = torch.randint(0, n_labels, (batch,), device=device)
        return {"pixel_values": pix, "labels": labels}

    return Built(model=model, task=task, make_batch=make_vision_batch, notes=notes)


def _max_positions(cfg) -> int | None:
    for key in ("max_position_embeddings", "n_positions"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            if getattr(cfg, "model_type", "") in ("llama", "mistral", "qwen2", "mixtral",
                                                  "qwen2_moe", "falcon", "gemma", "gemma2",
                                                  "phi3"):
                return None  # rotary models extrapolate; the config's limit is advisory
            return v
    return None


def _cast_module(model, dtype) -> None:
    """Give every floating parameter and buffer ``dtype``, keeping tied parameters tied (done by hand:
    ``Module.to`` swaps tensors, which fake parameters refuse)."""
    import torch

    done: dict[int, torch.Tensor] = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            new = done.get(id(p))
            if new is None:
                with torch.no_grad():
                    new = torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                done[id(p)] = new
            mod._parameters[name] = new
        for name, b in list(mod._buffers.items()):
            if b is not None and b.is_floating_point() and b.dtype != dtype:
                mod._buffers[name] = b.to(dtype)


def _to_device(batch, device, dtype=None):
    import torch

    if isinstance(batch, torch.Tensor):
        if dtype is not None and batch.is_floating_point():
            return batch.to(device=device, dtype=dtype)
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, dtype) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device, dtype) for v in batch)
    return batch
