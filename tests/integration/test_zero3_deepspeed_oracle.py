"""Oracle: real DeepSpeed ZeRO-3 on the CPU, world size 1, against gpuplan's replay of its
parameter coordinator (:func:`gpuplan.engines.zero3.deepspeed_gathered`).

A subprocess (DeepSpeed keeps process-wide state: the accelerator, module-id counters, the process
group) trains a tiny transformers ``GPT2LMHeadModel`` built under ``deepspeed.zero.Init`` for three
steps per setting of the ``stage3_*`` knobs, with and without each block's forward wrapped in
``torch.utils.checkpoint`` (non-reentrant; reentrant gave the same figures everywhere tried). It
wraps ``PartitionedParameterCoordinator.fetch_sub_module`` and reads the coordinator's private
``__n_available_params`` after every call -- the counter rises only inside a fetch (the fetch of
the submodule's own parameters plus the prefetch round), so that is its peak. The figure compared
is the third step's (the trace is recorded in the first and replayed from the second on); the
counter restarts at 0 every forward (``reset_step``), so parameters that persist, gathered once
in the first step, are not in it, just as they are not in ``Gathered.live``.

The embeddings' post-backward hook never fires -- it hangs on the module's inputs, and
``input_ids``/``position_ids`` are integer tensors that get no gradient (``if
output_in.requires_grad`` in ``runtime/zero/parameter_offload.py:507``) -- so ``wpe``, fetched by
its pre-backward hook, is still gathered when ``wte`` is fetched after it, and both are freed
only by ``release_backward_leftovers`` at the end of the backward (``runtime/zero/stage3.py:3068``,
``partitioned_param_coordinator.py:554``). This test found it (the "embeddings-leftover"
setting), and the replay now keeps the embeddings through the backward.

The weight traffic is compared too: the elements DeepSpeed all-gathers in the third step (counted
in the coordinator's ``__all_gather_params_``) against the replay's ``Gathered.fetched`` -- the
count the speed model charges a ZeRO-3 step.

One way DeepSpeed 0.19.8 gathers more than the replay, pinned below as a strict xfail on a
setting where it decides the peak (the other settings avoid it):

* every hooked module runs a prefetch round when it is entered, also those with no parameters of
  their own (the model, ``transformer``, each block, ``attn``, ``mlp``, the dropouts, the
  activation: ``parameter_offload.py:346-359,543,582``, the round at
  ``partitioned_param_coordinator.py:451-485``); the replay runs one round per module that owns
  parameters, so where the bucket rather than the live cap stops a round DeepSpeed prefetches
  further ahead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

for _mod in ("torch", "deepspeed", "transformers"):
    if importlib.util.find_spec(_mod) is None:  # not imported here: DeepSpeed runs in a child
        pytest.skip(f"{_mod} is not installed", allow_module_level=True)

from gpuplan.engines.zero3 import deepspeed_gathered  # noqa: E402
from gpuplan.models import model_from_config_bytes  # noqa: E402

CONFIG = {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 256,
          "n_positions": 32}

# (prefetch_bucket, max_live, max_reuse, persistence): sizes scaled to the tiny model, whose
# largest tensors are wte (16384 elements), c_fc and mlp.c_proj (16384), c_attn (12288).
SETTINGS = {
    "deepspeed-defaults": (50_000_000, 1_000_000_000, 1_000_000_000, 100_000),
    "unbounded": (10**9, 10**9, 10**9, 1000),
    "bucket-binds": (10_000, 200_000, 60_000, 100),
    "live-cap-binds": (10**9, 60_000, 200_000, 300),
    "no-reuse": (40_000, 60_000, 0, 0),
    "small-everything": (10_000, 20_000, 20_000, 100),
    "live-cap-1": (10_000, 1, 200_000, 0),
    "bucket-1": (1, 60_000, 5_000, 1000),
    "embeddings-leftover": (3_000, 1, 0, 0),
    "paramless-prefetch": (1, 200_000, 5_000, 0),
}

_PARAMLESS = pytest.mark.xfail(strict=True, reason=(
    "DeepSpeed runs a prefetch round on entering every module, parameter-less ones included "
    "(parameter_offload.py:543,582 -> partitioned_param_coordinator.py:451-485); the replay runs "
    "one per parameter-owning module, so with a 1-element bucket it prefetches less far ahead"))
XFAIL = {"paramless-prefetch": _PARAMLESS}
#: Where the prefetch bucket binds, DeepSpeed's extra rounds on parameter-less modules also pop
#: later uses off its queue sooner; a parameter whose later use was popped is not released
#: (``__params_to_release``: ``__most_recent_step_id_param_fetched_for``), so DeepSpeed fetches
#: fewer elements a step than the replay: 284,864 against 334,464 ("bucket-binds", plain),
#: 415,872 against 432,256 ("no-reuse", plain; DeepSpeed kept the last block's MLP weights from
#: forward to backward at a reuse distance of 0). Under DeepSpeed's defaults they agree.
_PARAMLESS_FETCH = pytest.mark.xfail(strict=True, reason=(
    "DeepSpeed's prefetch rounds on parameter-less modules mark later uses as fetched, which "
    "keeps those parameters gathered: fewer fetches than the replay where the bucket binds"))
FETCH_XFAIL = {n: _PARAMLESS_FETCH for n in ("bucket-binds", "no-reuse", "paramless-prefetch")}

# The child: everything DeepSpeed touches stays in it. It prints one line, ORACLE <json>.
_WORKER = r'''
import importlib, json, os, socket, sys

spec = json.loads(sys.argv[1])
def emit(obj):
    print("ORACLE " + json.dumps(obj), flush=True)

try:
    import torch
    import torch.distributed as tdist
    from torch.utils.checkpoint import checkpoint
    import deepspeed
    from deepspeed.runtime.zero.partitioned_param_coordinator import (
        PartitionedParameterCoordinator as Coordinator)
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from transformers import GPT2Config, GPT2LMHeadModel
    # The shared-memory allreduce op is JIT-compiled (a minute, into ~/.cache) and is of no use
    # to one process; DeepSpeed runs without it where it does not build.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
except Exception as e:  # noqa: BLE001
    emit({"unavailable": f"import failed: {e!r}"})
    sys.exit(0)

COUNTER = "_PartitionedParameterCoordinator__n_available_params"
GATHER = "_PartitionedParameterCoordinator__all_gather_params_"
state = {"step": None, "peaks": {}, "fetched": {}, "counter_seen": False}
_fetch = Coordinator.fetch_sub_module
_gather = getattr(Coordinator, GATHER, None)

def all_gather_params_(self, params, *args, **kwargs):
    # the elements this call all-gathers: those not yet available (DeepSpeed's own test)
    if state["step"] is not None:
        n = sum(p.ds_numel for p in params if p.ds_status == ZeroParamStatus.NOT_AVAILABLE)
        state["fetched"][state["step"]] = state["fetched"].get(state["step"], 0) + n
    return _gather(self, params, *args, **kwargs)

if _gather is not None:
    setattr(Coordinator, GATHER, all_gather_params_)

def fetch_sub_module(self, *args, **kwargs):
    _fetch(self, *args, **kwargs)
    if state["step"] is not None and hasattr(self, COUNTER):
        state["counter_seen"] = True
        n = getattr(self, COUNTER)
        state["peaks"][state["step"]] = max(state["peaks"].get(state["step"], 0), n)

Coordinator.fetch_sub_module = fetch_sub_module

def run(knobs, ckpt):
    bucket, live, reuse, persist = knobs
    ds_config = {
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {
            "stage": 3, "stage3_prefetch_bucket_size": bucket,
            "stage3_max_live_parameters": live, "stage3_max_reuse_distance": reuse,
            "stage3_param_persistence_threshold": persist}}
    cfg = {k: v for k, v in spec["config"].items() if k != "model_type"}
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=ds_config):
        model = GPT2LMHeadModel(GPT2Config(**cfg, bos_token_id=0, eos_token_id=0))
    if ckpt:  # each block's forward recomputed in the backward; its own hooks stay outside
        for block in model.transformer.h:
            block.forward = (lambda f: lambda *a, **k: checkpoint(f, *a, use_reentrant=False,
                                                                  **k))(block.forward)
    model.train()
    engine, *_ = deepspeed.initialize(model=model, config=ds_config, dist_init_required=False,
                                      optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))
    ids = torch.randint(0, cfg["vocab_size"], (1, 16))
    state["peaks"], state["fetched"] = {}, {}
    for step in range(3):
        state["step"] = step
        loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
        engine.backward(loss)
        engine.step()
    state["step"] = None
    params = [(n, list(p.ds_shape)) for n, p in engine.module.named_parameters()]
    persisted = sum(p.ds_numel for p in engine.module.parameters() if p.ds_persist)
    engine.destroy()
    return {"peaks": [state["peaks"].get(s, 0) for s in range(3)], "persisted": persisted,
            "params": params,
            "fetched": [state["fetched"].get(s, 0) for s in range(3)] if _gather else None}

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0",
                  WORLD_SIZE="1", LOCAL_SIZE="1")
out = {"deepspeed": deepspeed.__version__, "results": {}}
try:
    tdist.init_process_group("gloo", rank=0, world_size=1)
    first = True
    for name, knobs in spec["settings"].items():
        for ckpt in (False, True):
            try:
                res = run(knobs, ckpt)
            except Exception as e:  # noqa: BLE001
                if first:  # DeepSpeed did not get as far as one training run: no oracle here
                    emit({"unavailable": f"DeepSpeed ZeRO-3 did not run on the CPU: {e!r}"})
                    sys.exit(0)
                raise
            if first and not state["counter_seen"]:
                emit({"unavailable": f"DeepSpeed {deepspeed.__version__}'s coordinator has no "
                                     f"{COUNTER} to read"})
                sys.exit(0)
            first = False
            out["results"][f"{name}|{int(ckpt)}"] = res
finally:
    if tdist.is_initialized():
        tdist.destroy_process_group()
emit(out)
'''


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    env = dict(os.environ, DS_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES="",
               TORCH_EXTENSIONS_DIR=str(tmp_path_factory.mktemp("torch_extensions")),
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    spec = json.dumps({"config": CONFIG, "settings": SETTINGS})
    proc = subprocess.run([sys.executable, "-c", _WORKER, spec], capture_output=True, text=True,
                          env=env, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ORACLE ")]
    assert proc.returncode == 0 and lines, (
        f"DeepSpeed child failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
        f"{proc.stderr[-6000:]}")
    out = json.loads(lines[-1][len("ORACLE "):])
    if "unavailable" in out:
        pytest.skip(out["unavailable"])
    return out


@pytest.fixture(scope="module")
def model():
    return model_from_config_bytes(json.dumps(CONFIG).encode(), name="gpt2-tiny")


def test_the_replayed_tensors_are_the_ones_deepspeed_partitions(oracle, model):
    ds = {n: tuple(s) for n, s in oracle["results"]["unbounded|0"]["params"]}
    ours = {}
    for t in model.tensors:
        names = ([t.name.replace("{i}", str(i)) for i in range(t.count)] if "{i}" in t.name
                 else [t.name])
        ours.update({n: tuple(t.shape) for n in names})
    assert ours == ds  # the tied head is wte's parameter: named_parameters() yields it once


@pytest.mark.parametrize("name", list(SETTINGS))
def test_persisted_elements_match_deepspeed(oracle, model, name):
    bucket, live, reuse, persist = SETTINGS[name]
    ours = deepspeed_gathered(model, False, prefetch_bucket=bucket, max_live=live,
                              max_reuse=reuse, persistence=persist)
    assert ours.persisted == oracle["results"][f"{name}|0"]["persisted"]


@pytest.mark.parametrize("ckpt", [False, True], ids=["plain", "checkpointed"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=XFAIL[n]) if n in XFAIL else n
                                  for n in SETTINGS])
def test_live_peak_matches_deepspeed(oracle, model, name, ckpt):
    bucket, live, reuse, persist = SETTINGS[name]
    peaks = oracle["results"][f"{name}|{int(ckpt)}"]["peaks"]
    assert peaks[1] == peaks[2], f"not steady from the second step on: {peaks}"
    ours = deepspeed_gathered(model, ckpt, prefetch_bucket=bucket, max_live=live,
                              max_reuse=reuse, persistence=persist)
    assert ours.live == peaks[2], (
        f"DeepSpeed {oracle['deepspeed']} held {peaks[2]} elements gathered at once in the "
        f"third step; gpuplan replays {ours.live} ({ours.where})")


@pytest.mark.parametrize("ckpt", [False, True], ids=["plain", "checkpointed"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=FETCH_XFAIL[n]) if n in FETCH_XFAIL
                                  else n for n in SETTINGS])
def test_fetched_elements_match_deepspeed(oracle, model, name, ckpt):
    """The weight traffic of a step: the elements DeepSpeed all-gathers in the third step
    (counted where its coordinator launches each all-gather, ``__all_gather_params_``: the
    parameters not yet available) against the replay's fetches -- what the speed model charges
    a ZeRO-3 step's all-gathers (:func:`gpuplan.compute.parallel.zero3_gathers`)."""
    bucket, live, reuse, persist = SETTINGS[name]
    fetched = oracle["results"][f"{name}|{int(ckpt)}"]["fetched"]
    if fetched is None:
        pytest.skip(f"DeepSpeed {oracle['deepspeed']}'s coordinator has no __all_gather_params_")
    assert fetched[1] == fetched[2], f"not steady from the second step on: {fetched}"
    ours = deepspeed_gathered(model, ckpt, prefetch_bucket=bucket, max_live=live,
                              max_reuse=reuse, persistence=persist)
    assert ours.fetched == fetched[2], (
        f"DeepSpeed {oracle['deepspeed']} all-gathered {fetched[2]} elements in the third step; "
        f"gpuplan replays {ours.fetched} ({ours.gathers:.3f} x the {ours.partitioned} "
        "partitioned)")
