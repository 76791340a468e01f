"""The speed model's estimate of a profiled step: measured vs estimated.

After the loop ran, the profiler knows the batch (samples per step), the sequence length (token
positions per sample), the recipe (autocast dtype, parameter dtype, TF32), the optimizer, the
host-to-device bytes and the device. With the architecture -- named by the user, read from a
``transformers`` model's ``config``, or, as a labelled fallback, only the module's parameter count --
and a device the catalog knows exactly, :func:`gpuplan.compute.estimate_speed` (on the CPU,
:func:`gpuplan.compute.estimate_cpu_speed`) gives the step time to compare with. Anything missing
means no estimate and one line saying why: a GPU whose device name is not an exact catalog name
gets no guessed peak.

Pure Python apart from reading the root ``nn.Module`` handed in; imports gpuplan's speed model and
catalogs when used.
"""

from __future__ import annotations

import collections
import math
import os
import statistics
import warnings
from typing import Any

from ..._record import record
from ... import compute
from ...errors import GpuplanError, InputError, UnknownNameError
from ...formats import TRAINING_RECIPES, WEIGHT_FORMATS
from ...hardware import GPU, gpu_from_device_name, resolve_gpu
from ...job import Job
from ...models import Architecture, Model, architecture_from_config, from_param_count, load_model
from ...hardware.cpu import detect_cpu
from ...units import format_count
from .types import COMPUTE_PHASES, EstimateInfo, ProfileReport

__all__ = ["EstimateRequest", "RunFacts", "prepare_estimate", "estimate_step", "optimizer_name",
           "infer_precision"]

#: torch.optim (and common third-party) optimizer class names -> the speed model's optimizer names.
_OPTIMIZERS = {
    "AdamW": "adamw", "Adam": "adam", "SGD": "sgd", "Adagrad": "adagrad", "RMSprop": "rmsprop",
    "Adafactor": "adafactor", "Lion": "lion", "AdamW8bit": "adamw-8bit",
    "PagedAdamW8bit": "adamw-8bit", "Adam8bit": "adamw-8bit", "FusedAdam": "adam",
}

#: Modules whose weights are applied at every spatial position or time step: their FLOPs are not
#: 2 x parameters per sample, so a parameter-count estimate would undercount them.
_REUSED_WEIGHT_MODULES = ("_ConvNd", "RNNBase")


@record
class EstimateRequest:
    """What the user asked for, validated before anything runs."""

    model: Any = None
    """A gpuplan ``Model`` or ``Architecture`` (loaded from ``plan_model``), None: derive it."""
    model_spec: str | None = None
    """``plan_model`` as the user wrote it."""
    gpu: Any = None
    """A catalog ``GPU`` (from ``gpu``), None: from the CUDA device name."""
    gpu_note: str | None = None
    """The alias resolution (``h100 is an alias of H100-SXM-80GB``)."""
    precision: str | None = None
    """A training recipe or weight format; None: inferred from the run."""


@record
class RunFacts:
    """What the run showed besides the measured steps."""

    module: Any = None
    """The root ``nn.Module`` (the largest one called at the top level), None when unknown."""
    training: bool = True
    """Backward or optimizer steps were measured (else forward-only steps)."""
    param_dtype: str | None = None
    """dtype of the root module's first parameter (``float32`` ...)."""
    autocast: bool = False
    """torch.autocast was active around a root forward."""
    autocast_dtype: str | None = None
    """Its dtype (``bfloat16``, ``float16``)."""
    tf32: bool = False
    """TF32 matmuls were allowed."""
    optimizers: tuple[Any, ...] = ()
    """The optimizers whose ``step()`` ran."""
    world_size: int = 1
    """``WORLD_SIZE`` of a distributed run."""
    torch_threads: int | None = None
    """``torch.get_num_threads()``."""


def prepare_estimate(*, plan_model: Any = None, gpu: Any = None,
                     precision: str | None = None) -> EstimateRequest:
    """Check and load what the user named (bad names fail here, before the loop runs)."""

    model, spec = None, None
    if plan_model is None:
        pass
    elif isinstance(plan_model, (Model, Architecture)):
        model, spec = plan_model, plan_model.name
    elif isinstance(plan_model, int) and not isinstance(plan_model, bool):
        if plan_model < 1:
            raise InputError(f"plan_model={plan_model!r}: a parameter count must be >= 1")
        model, spec = from_param_count(plan_model), str(plan_model)
    elif isinstance(plan_model, (str, os.PathLike)):
        spec = os.fspath(plan_model)
        model = load_model(plan_model)
    else:
        raise InputError(f"plan_model={plan_model!r}: expected a catalog name (`gpuplan models`), "
                         "a config.json path or model directory, a gpuplan Model, or None")
    gpu_obj, note = None, None
    if gpu is None:
        pass
    elif isinstance(gpu, GPU):
        gpu_obj = gpu
    elif isinstance(gpu, str):
        gpu_obj, note = resolve_gpu(gpu)
    else:
        raise InputError(f"gpu={gpu!r}: expected a catalog GPU name such as H100-SXM-80GB "
                         "(`gpuplan gpus` lists them)")
    if precision is not None:
        if not isinstance(precision, str) or (precision not in TRAINING_RECIPES
                                              and precision not in WEIGHT_FORMATS):
            raise UnknownNameError("precision", str(precision),
                                   list(TRAINING_RECIPES) + list(WEIGHT_FORMATS),
                                   hint="training recipes: " + ", ".join(TRAINING_RECIPES)
                                   + "; weight formats (forward-only loops): "
                                   + ", ".join(WEIGHT_FORMATS))
    return EstimateRequest(model=model, model_spec=spec, gpu=gpu_obj, gpu_note=note,
                           precision=precision)


# -- what the run shows -----------------------------------------------------------------------

def optimizer_name(opt: Any) -> tuple[str, str]:
    """(speed-model optimizer name, how it was found) for an optimizer instance."""
    cls = type(opt).__name__
    name = _OPTIMIZERS.get(cls)
    if name is None:
        return "adamw", f"{cls} is not one the speed model knows: AdamW assumed"
    if name == "sgd":
        groups = getattr(opt, "param_groups", None) or []
        if any((g.get("momentum") or 0) > 0 for g in groups):
            name = "sgd-momentum"
    return name, f"torch.optim.{cls}" if name != "adamw-8bit" else cls


def infer_precision(facts: RunFacts) -> tuple[str, str, list[str]]:
    """(recipe, how it was inferred, notes) from what the run showed (training loops; forward-only
    loops use the same names: the speed model maps a recipe to its compute dtype)."""
    notes: list[str] = []
    p = facts.param_dtype
    if facts.autocast:
        ad = facts.autocast_dtype
        if ad == "bfloat16":
            if p == "bfloat16":
                return "bf16", "bfloat16 parameters (autocast bfloat16 too)", notes
            return "amp-bf16", f"autocast(bfloat16) seen over {p or 'unknown-dtype'} parameters", notes
        if ad == "float16":
            if p == "float16":
                return "mixed-fp16", "float16 parameters (autocast float16 too)", notes
            return "amp-fp16", f"autocast(float16) seen over {p or 'unknown-dtype'} parameters", notes
        notes.append(f"autocast dtype {ad!r} is not one the speed model knows: "
                     "the parameter dtype decides")
    if p == "bfloat16":
        return "bf16", "bfloat16 parameters, no autocast", notes
    if p == "float16":
        notes.append("float16 parameters without autocast: estimated as mixed-fp16 (fp16 matmuls; "
                     "its optimizer traffic includes an fp32 master copy the loop may not keep)")
        return "mixed-fp16", "float16 parameters, no autocast", notes
    if p == "float32":
        return "fp32", "float32 parameters, no autocast", notes
    if p is None:
        notes.append("parameter dtype unknown (no parameter seen in the root module): fp32 assumed")
        return "fp32", "assumed (parameter dtype unknown)", notes
    raise _NoEstimate(f"{p} parameters: the speed model has no recipe for them (it knows fp32, "
                      "bf16, fp16 and their mixed/autocast recipes); give precision= (--precision)")


class _NoEstimate(Exception):
    """Internal: why there is no estimate (one line)."""


def _unwrap(module: Any) -> Any:
    """The user's model inside DDP/FSDP/DataParallel and torch.compile wrappers."""
    for _ in range(8):
        if hasattr(module, "_orig_mod"):
            module = module._orig_mod
        elif type(module).__name__ in ("DistributedDataParallel", "DataParallel",
                                       "FullyShardedDataParallel") and hasattr(module, "module"):
            module = module.module
        else:
            break
    return module


def _hf_config(module: Any) -> dict | None:
    """The config dict of a transformers model (``model.config.to_dict()`` with a model_type)."""
    cfg = getattr(module, "config", None)
    to_dict = getattr(cfg, "to_dict", None)
    if not callable(to_dict):
        return None
    try:
        d = to_dict()
    except Exception:  # noqa: BLE001 - not a transformers config after all
        return None
    if not isinstance(d, dict) or not isinstance(d.get("model_type"), str):
        return None
    return d


def _job_precision(precision: str, training: bool) -> dict[str, str]:
    """The Job's precision field for the loop's recipe: a training recipe when training; for a
    forward-only loop, the weight format its matmuls run in (a recipe's compute dtype)."""
    if training:
        return {"precision": precision}
    if precision in WEIGHT_FORMATS:
        return {"infer_precision": precision}
    return {"infer_precision": WEIGHT_FORMATS[TRAINING_RECIPES[precision].compute_dtype].name}


def _hf_attention(module: Any) -> tuple[str | None, str | None]:
    """(speed-model attention, recompute) from a transformers model; None where it does not say."""
    cfg = getattr(module, "config", None)
    impl = getattr(cfg, "_attn_implementation", None)
    attention = None
    if isinstance(impl, str):
        attention = "eager" if impl == "eager" else "sdpa"
    recompute = None
    flag = getattr(module, "is_activation_checkpointing", None)
    if flag is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flag = getattr(module, "is_gradient_checkpointing", None)
    if isinstance(flag, bool):
        recompute = "full" if flag else "none"
    return attention, recompute


def _param_counts(module: Any) -> tuple[int, int, bool]:
    """(all parameters, parameters only in embedding tables, any weight reused per position)."""
    import torch

    total: dict[int, int] = {}
    outside_embedding: set[int] = set()
    reused = False
    for m in module.modules():
        bases = {c.__name__ for c in type(m).__mro__}
        if bases & set(_REUSED_WEIGHT_MODULES) and any(True for _ in m.parameters(recurse=False)):
            reused = True
        is_embedding = isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))
        for p in m.parameters(recurse=False):
            total[id(p)] = p.numel()
            if not is_embedding:
                outside_embedding.add(id(p))
    n = sum(total.values())
    emb = sum(v for k, v in total.items() if k not in outside_embedding)
    return n, emb, reused


# -- the estimate --------------------------------------------------------------------------------

def _most_common(xs: list[int]) -> int:
    counts = collections.Counter(xs)
    top = max(counts.values())
    return max(x for x, c in counts.items() if c == top)


def _resolve_model(req: EstimateRequest, facts: RunFacts, notes: list[str]
                   ) -> tuple[Any, str, str, str, int]:
    """(model, its name, where it came from, basis, parameters counted)."""

    module = _unwrap(facts.module) if facts.module is not None else None
    module_params = None
    if module is not None and hasattr(module, "parameters"):
        module_params = _param_counts(module)
    if req.model is not None:
        m = req.model
        arch = m if isinstance(m, Architecture) else m.architecture
        n = (sum(t.total for t in arch.tensors) if isinstance(m, Architecture)
             else m.params.total)
        if module_params is not None and n and module_params[0]:
            ratio = module_params[0] / n
            if not 0.5 <= ratio <= 2.0:
                notes.append(f"the profiled module has {format_count(module_params[0])} parameters "
                             f"but {m.name} has {format_count(n)}: is plan_model the model this "
                             "loop trains?")
        basis = "architecture" if arch is not None else "parameter-count"
        return m, m.name, "plan_model", basis, n
    if module is None:
        raise _NoEstimate("the model is unknown (no root module was seen): name it with "
                          "plan_model= (--model)")
    cfg = _hf_config(module)
    if cfg is not None:
        name = (getattr(module.config, "name_or_path", None) or cfg.get("_name_or_path")
                or f"{cfg['model_type']} ({type(module).__name__})")
        try:
            arch = architecture_from_config(cfg, name=str(name), source="model.config")
        except GpuplanError as e:
            notes.append(f"the module's transformers config was not usable ({e}): estimated from "
                         "the parameter count only")
        else:
            n = sum(t.total for t in arch.tensors)
            if module_params is not None and n and abs(module_params[0] - n) > 0.01 * n:
                notes.append(f"the module has {format_count(module_params[0])} parameters, the "
                             f"architecture read from its config {format_count(n)} "
                             f"({arch.hf_class or arch.family}): the difference is not modeled")
            return arch, arch.name, f"the nn.Module's transformers config ({type(module).__name__})", \
                "architecture", n
    assert module_params is not None
    total, emb, reused = module_params
    if reused:
        raise _NoEstimate(
            f"{type(module).__name__} has convolutional or recurrent layers, whose weights are "
            "applied at every position, so its parameter count does not give its FLOPs: name the "
            "architecture with plan_model= (--model) or give expected_step_time_s")
    n = total - emb
    if n < 1:
        raise _NoEstimate(f"{type(module).__name__} has no parameters outside embedding tables")
    notes.append(f"parameter count only: N = {format_count(n)} parameters outside embedding "
                 f"tables (of {format_count(total)}); name the architecture with plan_model= "
                 "(--model) for a per-op estimate")
    model = from_param_count(n, name=f"{type(module).__name__} ({format_count(n)} parameters)")
    return model, model.name, "parameter count of the nn.Module", "parameter-count", n


def _seq(report: ProfileReport, arch: Any, basis: str, batch_steps: list, notes: list[str]
         ) -> int | None:
    per = [s.positions / s.samples for s in batch_steps if s.positions and s.samples]
    if per and len(per) == len(batch_steps):
        lo, hi = min(per), max(per)
        seq = max(1, round(statistics.fmean(per)))
        if hi - lo > 0.5:
            notes.append(f"sequence lengths vary between steps ({lo:g} to {hi:g} positions per "
                         f"sample): the estimate uses the mean, {seq}")
        return seq
    if arch is not None and arch.kind == "vision":
        return None  # the speed model uses the patches
    if basis == "parameter-count":
        notes.append("no sequence dimension seen: one token per sample, i.e. 6·N FLOPs per sample "
                     "(2·N forward + 4·N backward)")
        return 1
    raise _NoEstimate("the sequence length was not seen (no input_ids or integer (B, S) tensor in "
                      "the batch or the model's arguments): give tokens_per_sample= "
                      "(--tokens-per-sample)")


def estimate_step(report: ProfileReport, req: EstimateRequest, facts: RunFacts
                  ) -> tuple[EstimateInfo | None, str | None]:
    """(the estimate, None) or (None, why there is none)."""
    try:
        return _estimate(report, req, facts), None
    except _NoEstimate as e:
        return None, str(e)
    except GpuplanError as e:
        return None, f"the speed model cannot estimate this run: {e}"
    except Exception as e:  # noqa: BLE001 - never lose the measured report to the estimate
        return None, (f"the speed model failed ({type(e).__name__}: {e}); the measurement above "
                      "is unaffected -- please report this")


@record(kw_only=False)
class _Expected:
    """What the speed model expects of one step on the device the loop ran on."""

    est: Any
    step_s: float
    compute_s: float
    exposed_s: float
    peak: float
    model_flops: float
    efficiency: dict
    device_name: str
    device_kind: str
    bound: str | None
    precision: str
    precision_source: str


def _batch(steps: list, notes: list[str]) -> tuple[int, list]:
    """The loop's batch size (the most common) and the steps that showed one."""
    batch_steps = [s for s in steps if s.samples]
    if not batch_steps:
        raise _NoEstimate("the batch size was not found (the first dimension of the first tensor "
                          "in the batch)")
    batch = _most_common([s.samples for s in batch_steps])
    if len({s.samples for s in batch_steps}) > 1:
        notes.append(f"batch sizes vary between steps: the estimate uses the most common, {batch}")
    return batch, batch_steps


def _on_gpu(model, gpu, job: Job, precision: str, precision_source: str, training: bool, tf32,
            copy: tuple, measured, notes: list[str]) -> _Expected:
    per_sample, pinned, overlap = copy
    job = job.with_(**_job_precision(precision, training))
    est = compute.estimate_speed(model, gpu, job, tf32=tf32, input_bytes=per_sample,
                                 pinned=pinned, overlap_transfer=overlap, measured=measured)
    if training or est.prefill is None:
        phase, exposed = est.step, est.transfer.exposed_s
        expected = est.step_time_s
    else:
        phase = est.prefill
        exposed = est.prefill_transfer.exposed_s if est.prefill_transfer is not None else 0.0
        expected = phase.time_s + exposed
        notes.append("forward-only loop of a decoder: estimated as the speed model's prefill "
                     "(one forward over batch x seq tokens, logits for the last position only; "
                     "generation with a KV cache is not modeled here)")
    return _Expected(est, expected, phase.time_s, exposed, phase.peak_flops, phase.model_flops,
                     est.efficiency.to_dict(), gpu.name, "gpu", phase.bound, precision,
                     precision_source)


def _on_cpu(model, cpu, job: Job, arch, precision: str, precision_source: str, facts: RunFacts,
            measured, notes: list[str]) -> _Expected:
    if precision not in ("fp32",):
        notes.append(f"the CPU estimate is fp32 (the speed model's CPU side has fp32 peaks "
                     f"only); this loop's recipe is {precision}")
    if not facts.training and (arch is None or arch.kind == "decoder"):
        raise _NoEstimate("forward-only loops of decoders (or of models known by parameter "
                          "count) have no CPU estimate: the speed model's CPU side times "
                          "training steps and encoder forwards")
    est = compute.estimate_cpu_speed(model, cpu, job, measured=measured)
    efficiency = est.efficiency.to_dict()
    efficiency["peak_basis"] = est.peak_basis
    threads, cores = facts.torch_threads, getattr(cpu, "physical_cores", None)
    if threads and cores and threads < cores:
        notes.append(f"the CPU estimate assumes all {cores} physical cores; torch used "
                     f"{threads} thread(s)")
    return _Expected(est, est.step_time_s, est.step_time_s, 0.0, est.step.peak_flops,
                     est.step.model_flops, efficiency, est.cpu, "cpu", None, "fp32",
                     precision_source + "; the CPU estimate is fp32")


def _expect(report: ProfileReport, req: EstimateRequest, facts: RunFacts, notes: list[str]):
    """The shapes of the loop, then the speed model's expectation on its device."""
    batch, batch_steps = _batch(report.per_step, notes)
    on_gpu, gpu, cpu, device_source = _device(report, req, notes)
    model, model_name, model_source, basis, n_params = _resolve_model(req, facts, notes)
    arch = model if isinstance(model, Architecture) else getattr(model, "architecture", None)
    seq = _seq(report, arch, basis, batch_steps, notes)
    precision, precision_source, tf32 = _precision(req, facts, on_gpu, notes)
    optimizer, optimizer_source = _optimizer(facts, report.per_step, notes)
    attention, recompute = _kernels(facts, arch, notes)
    copy = _input_copy(report.transfer, batch, on_gpu, notes)
    job = Job(model=model_name, mode="train" if facts.training else "infer", batch=batch, seq=seq,
              optimizer=optimizer, checkpointing=recompute, attention=attention)
    if on_gpu:
        exp = _on_gpu(model, gpu, job, precision, precision_source, facts.training, tf32, copy,
                      compute.load_measured(), notes)
    else:
        exp = _on_cpu(model, cpu, job, arch, precision, precision_source, facts,
                      compute.load_measured(), notes)
    # the speed model's TF32 note names its CLI flag; this run's TF32 setting was observed instead
    notes.extend(n for n in exp.est.notes if n not in notes and "TF32" not in n)
    if on_gpu and precision == "fp32" and not tf32 and gpu.supports("tf32"):
        notes.append("fp32 matmuls at the fp32 (not TF32) peak: TF32 was off in this run "
                     "(torch.backends.cuda.matmul.allow_tf32 / torch.set_float32_matmul_precision)")
    if not (exp.step_s > 0 and math.isfinite(exp.step_s)):
        raise _NoEstimate(f"the speed model gave a step time of {exp.step_s!r} s")
    return dict(exp=exp, batch=batch, on_gpu=on_gpu, device_source=device_source,
                model_name=model_name, model_source=model_source, basis=basis, n_params=n_params,
                tf32=tf32, optimizer=optimizer, optimizer_source=optimizer_source,
                attention=attention, recompute=recompute, copy=copy)


def _estimate(report: ProfileReport, req: EstimateRequest, facts: RunFacts) -> EstimateInfo:
    notes: list[str] = []
    x = _expect(report, req, facts, notes)
    exp, training, basis, on_gpu = x["exp"], facts.training, x["basis"], x["on_gpu"]
    per_sample, pinned, _ = x["copy"]
    measured_compute = statistics.median(
        sum(s.parts_s.get(p, 0.0) for p in COMPUTE_PHASES) for s in report.per_step)
    step = report.step_time_s
    mfu = (exp.model_flops / (step * exp.peak)) if (step > 0 and exp.peak) else None
    if mfu is not None and mfu > 1:
        notes.append(f"the measured step would be {mfu * 100:.0f}% of the peak for "
                     f"{x['model_name']}'s arithmetic: the run cannot have done it -- check "
                     "plan_model, batch and seq")
    return EstimateInfo(
        source="speed-model", step_time_s=exp.step_s, basis=basis,  # type: ignore[arg-type]
        model=x["model_name"], model_source=x["model_source"], params=x["n_params"],
        device=exp.device_name, device_kind=exp.device_kind,  # type: ignore[arg-type]
        device_source=x["device_source"],
        mode="train" if training else "forward",  # type: ignore[arg-type]
        precision=exp.precision, precision_source=exp.precision_source, tf32=x["tf32"],
        batch=x["batch"], seq=exp.est.seq, optimizer=x["optimizer"] if training else None,
        optimizer_source=x["optimizer_source"] if training else None,
        attention=x["attention"] if basis == "architecture" else None,
        recompute=x["recompute"] if (training and basis == "architecture") else None,
        input_bytes_per_step=per_sample * x["batch"] if on_gpu else 0,
        pinned=pinned if on_gpu else None, compute_s=exp.compute_s,
        transfer_exposed_s=exp.exposed_s, measured_compute_s=measured_compute,
        measured_compute_over_expected=(measured_compute / exp.compute_s)
        if exp.compute_s > 0 else None,
        bound=exp.bound, model_flops_per_step=exp.model_flops, peak_flops=exp.peak,
        measured_mfu=mfu, efficiency=exp.efficiency, notes=tuple(notes),
    )


# -- the estimate's inputs, in the order _estimate asks for them -----------------------------------

def _device(report: ProfileReport, req: EstimateRequest, notes: list[str]
            ) -> tuple[bool, Any, Any, str]:
    """(on a GPU, the catalog GPU or None, the CPU or None, where the device came from)."""

    on_gpu = report.device.startswith("cuda")
    gpu = cpu = None
    if on_gpu:
        if req.gpu is not None:
            gpu = req.gpu
            device_source = "the gpu argument" + (f" ({req.gpu_note})" if req.gpu_note else "")
            exact = gpu_from_device_name(report.device_name)
            if exact is not None and exact.name != gpu.name:
                notes.append(f"the run's device {report.device_name!r} is the catalog's {exact.name}, "
                             f"but the estimate is for the named {gpu.name}")
        else:
            gpu = gpu_from_device_name(report.device_name)
            if gpu is None:
                raise _NoEstimate(
                    f"the GPU {report.device_name!r} is not in gpuplan's catalog under that exact "
                    "device name, and no peak is guessed: name its SKU with gpu= (--gpu), see "
                    "`gpuplan gpus`")
            device_source = f"exact CUDA device name {report.device_name!r}"
    else:
        if req.gpu is not None:
            notes.append(f"gpu={req.gpu.name} not used: this run was on the CPU, and the estimate "
                         "is for the device that ran it")
        cpu = detect_cpu()
        device_source = "this machine's CPU (gpuplan.hardware.cpu)"

    return on_gpu, gpu, cpu, device_source


def _precision(req: EstimateRequest, facts: RunFacts, on_gpu: bool, notes: list[str]
               ) -> tuple[str, str, bool]:
    """(recipe, where it came from, TF32 on)."""
    if req.precision is not None:
        precision, precision_source = req.precision, "the precision argument"
    else:
        precision, precision_source, pnotes = infer_precision(facts)
        notes.extend(pnotes)
    tf32 = bool(facts.tf32) and on_gpu and precision == "fp32"
    return precision, precision_source, tf32


def _optimizer(facts: RunFacts, steps: Any, notes: list[str]) -> tuple[str, str | None]:
    """(the speed model's optimizer, where it came from); AdamW for forward-only loops (unused)."""
    optimizer, optimizer_source = "adamw", None
    if facts.training:
        if facts.optimizers:
            optimizer, optimizer_source = optimizer_name(facts.optimizers[0])
            if len({type(o) for o in facts.optimizers}) > 1:
                notes.append(f"{len(facts.optimizers)} optimizers stepped: the estimate uses the "
                             f"first one's kind ({optimizer}) for all parameters")
        else:
            optimizer_source = "no optimizer step seen: AdamW assumed"
        opt_steps = sum(1 for s in steps if s.parts_s.get("optimizer", 0.0) > 0)
        if 0 < opt_steps < len(steps):
            notes.append(f"the optimizer stepped in {opt_steps} of {len(steps)} measured steps "
                         "(gradient accumulation?); the estimate has one optimizer step per step")
    return optimizer, optimizer_source


def _kernels(facts: RunFacts, arch: Any, notes: list[str]) -> tuple[str, str]:
    """(attention kernel, recompute) for the estimate."""
    attention, recompute = _hf_attention(_unwrap(facts.module)) if facts.module is not None \
        else (None, None)
    attention_src = attention
    attention = attention or "sdpa"
    recompute = recompute or "none"
    if arch is not None and arch.kind != "vision" and attention_src is None:
        notes.append("attention kernel assumed fused (flash/SDPA)")
    if facts.world_size > 1:
        notes.append(f"per-GPU estimate of one of {facts.world_size} ranks, without the gradient "
                     "all-reduce (the link is not known)")
    return attention, recompute


def _input_copy(t: Any, batch: int, on_gpu: bool, notes: list[str]) -> tuple[int, bool, bool]:
    """(bytes copied to the device per sample, from pinned memory, overlapped): what the loop
    really sent."""
    h2d = t.h2d_bytes_per_step if (t is not None and on_gpu) else 0.0
    per_sample = max(0, round(h2d / batch))
    pinned = t is None or t.pageable_fraction is None or t.pageable_fraction < 0.5
    overlap = pinned and t is not None and (t.non_blocking_fraction or 0.0) >= 0.5
    if on_gpu and not h2d:
        notes.append("no host-to-device copy was observed: the estimate copies nothing")

    return per_sample, pinned, overlap
