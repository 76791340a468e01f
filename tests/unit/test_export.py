"""``--export``: every engine's config checked by that engine's own parser where it installs here,
and by its documented option list where it does not.

Parsers (installed with ``pip install``; tests skip, saying why, where one is absent):
* DeepSpeed 0.19: ``deepspeed.runtime.config.DeepSpeedConfig`` (batch assertion, ZeRO config
  model) -- ``DS_BUILD_OPS=0 pip install --no-deps deepspeed`` + its small deps;
* accelerate 1.x: ``load_config_from_file`` (``ClusterConfig`` rejects unknown keys) and its
  launch parser for the nested keys;
* torchtitan 0.2: ``ConfigManager().parse_args(["--job.config_file", FILE])``
  (``pip install --no-deps torchtitan==0.2.2`` + tyro; 0.3 dropped TOML files);
* Megatron-LM and vLLM do not install on a CPU-only machine (Megatron-LM's ``arguments.py`` is not
  in the megatron-core wheel; vLLM's wheel needs CUDA and pins its own torch): their options are
  checked against the documented lists below.
"""

from __future__ import annotations

import argparse
import ast
import json
import shlex

import pytest

from gpuplan.cli import main
from gpuplan.errors import InputError
from gpuplan.export import ENGINES, export_plan
from gpuplan.job import Job


def job(**kw) -> Job:
    kw.setdefault("model", "llama-3.1-8b")
    kw.setdefault("mode", "train")
    return Job(**kw)


# ------------------------------------------------------------------ DeepSpeed

def ds_parse(text: str, dp: int, monkeypatch):
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed (DS_BUILD_OPS=0 pip "
                        "install --no-deps deepspeed hjson msgpack py-cpuinfo psutil einops)")
    import deepspeed.runtime.config as dsc

    class Mpu:  # the data-parallel group DeepSpeed asks a model-parallel engine for
        def get_data_parallel_world_size(self):
            return dp

    monkeypatch.setattr(dsc.dist, "get_rank", lambda: 0)
    return dsc.DeepSpeedConfig(json.loads(text), mpu=Mpu())


@pytest.mark.parametrize("zero,offload,precision", [(0, False, "fp32"), (1, True, "mixed-bf16"),
                                                    (2, False, "mixed-fp16"),
                                                    (3, True, "mixed-bf16")])
def test_deepspeed_round_trip(zero, offload, precision, monkeypatch):
    j = job(gpus=16, zero=zero, offload_optimizer=offload, precision=precision, batch=2,
            grad_accum=4)
    c = ds_parse(export_plan(j, "deepspeed"), j.dp, monkeypatch)
    assert c.train_batch_size == 2 * 4 * 16  # DeepSpeed asserts micro x accum x dp itself
    assert (c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == (2, 4)
    assert c.zero_optimization_stage == zero
    assert c.bfloat16_config.enabled == (precision == "mixed-bf16")
    assert c.float16_config.enabled == (precision == "mixed-fp16")
    assert (c.zero_config.offload_optimizer is not None) == offload
    assert c.optimizer_name == "adamw"


def test_gradient_clipping_is_written_or_refused(monkeypatch, tmp_path, tt_manager):
    j = job(gpus=8, zero=1, batch=2, max_grad_norm=0.5)
    assert ds_parse(export_plan(j, "deepspeed"), j.dp, monkeypatch).gradient_clipping == 0.5
    # unset: nothing written, the engine's own default stands (DeepSpeed's, as Megatron's and
    # torchtitan's, clips at 1.0)
    assert "gradient_clipping" not in json.loads(export_plan(j.with_(max_grad_norm=None),
                                                             "deepspeed"))
    assert megatron_args(export_plan(j, "megatron")).clip_grad == 0.5
    assert tt_parse(export_plan(j.with_(zero=3), "torchtitan"), tmp_path,
                    tt_manager).training.max_norm == 0.5
    for engine in ("accelerate", "fsdp"):
        with pytest.raises(InputError, match="max_grad_norm 0.5 has no"):
            export_plan(j.with_(zero=3), engine)


def test_stage3_gathering_is_written_or_refused(monkeypatch):
    """--stage3-max-live-parameters / --stage3-prefetch-bucket-size plan ZeRO-3's gathering and
    reach DeepSpeed's own zero config; unset, DeepSpeed's defaults stand (what the plan used);
    an engine without the setting refuses it in one line."""
    j = job(gpus=16, zero=3, batch=1, stage3_max_live_parameters=200_000_000,
            stage3_prefetch_bucket_size=10_000_000)
    c = ds_parse(export_plan(j, "deepspeed"), j.dp, monkeypatch).zero_config
    assert (c.max_live_parameters, c.prefetch_bucket_size) == (200_000_000, 10_000_000)
    plain = ds_parse(export_plan(job(gpus=16, zero=3, batch=1), "deepspeed"), 16, monkeypatch)
    from gpuplan.engines.zero3 import MAX_LIVE, MAX_REUSE, PERSISTENCE, PREFETCH_BUCKET
    z = plain.zero_config  # DeepSpeed's own defaults: what the plan assumes
    assert (z.max_live_parameters, z.prefetch_bucket_size, z.max_reuse_distance,
            z.param_persistence_threshold) == (MAX_LIVE, PREFETCH_BUCKET, MAX_REUSE, PERSISTENCE)
    for engine in ("accelerate", "fsdp", "torchtitan"):
        with pytest.raises(InputError, match="stage3_max_live_parameters") as e:
            export_plan(j, engine)
        assert "\n" not in str(e.value)


def test_deepspeed_tensor_parallel_is_autotp(monkeypatch):
    j = job(gpus=16, tp=2, zero=1, batch=1)
    text = export_plan(j, "deepspeed")
    assert json.loads(text)["tensor_parallel"] == {"autotp_size": 2}
    assert ds_parse(text, j.dp, monkeypatch).train_batch_size == 8


@pytest.mark.parametrize("kw,named", [
    (dict(pp=2, gpus=2), "pp 2"), (dict(checkpointing="full"), "checkpointing full"),
    (dict(tp=2, gpus=2, zero=3), "zero 3"), (dict(precision="bf16"), "precision bf16"),
    (dict(optimizer="adamw-8bit"), "optimizer adamw-8bit"), (dict(lora_rank=8), "lora_rank 8"),
    (dict(mode="infer"), "mode infer")])
def test_deepspeed_refuses_what_it_cannot_express(kw, named):
    with pytest.raises(InputError) as e:
        export_plan(job(**kw), "deepspeed")
    assert named in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ accelerate

def acc_load(text: str, tmp_path):
    pytest.importorskip("accelerate", reason="accelerate not installed (pip install accelerate)")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    path = tmp_path / "acc.yaml"
    path.write_text(text)
    cfg = load_config_from_file(str(path))
    dests = {a.dest for a in launch_command_parser()._actions}
    for section in ("fsdp_config", "deepspeed_config", "parallelism_config"):
        unknown = set(getattr(cfg, section) or {}) - dests
        assert not unknown, (section, unknown)
    return cfg


@pytest.mark.parametrize("zero,offload,tp,backend", [
    (0, False, 1, "MULTI_GPU"), (1, False, 1, "DEEPSPEED"), (3, True, 1, "DEEPSPEED"),
    (2, False, 1, "FSDP"), (3, False, 2, "FSDP")])
def test_accelerate_round_trip(zero, offload, tp, backend, tmp_path):
    j = job(gpus=16, zero=zero, offload_optimizer=offload, tp=tp, gpus_per_node=8)
    cfg = acc_load(export_plan(j, "accelerate"), tmp_path)
    assert cfg.distributed_type == backend
    assert (cfg.num_processes, cfg.num_machines, cfg.mixed_precision) == (16, 2, "bf16")
    if backend == "FSDP":
        assert cfg.fsdp_config["fsdp_version"] == 2
        assert cfg.fsdp_config["fsdp_reshard_after_forward"] == (zero == 3)
        if tp > 1:
            assert cfg.parallelism_config["parallelism_config_tp_size"] == 2
            assert cfg.parallelism_config["parallelism_config_dp_shard_size"] == 8
    if backend == "DEEPSPEED":
        assert cfg.deepspeed_config["zero_stage"] == zero
        assert cfg.deepspeed_config["offload_optimizer_device"] == ("cpu" if offload else "none")


# ------------------------------------------------------------------ FSDP2 snippet

def test_fsdp_snippet_is_python_and_names_fsdp2():
    torch = pytest.importorskip("torch")
    import torch.distributed.fsdp as fsdp_mod

    text = export_plan(job(gpus=8, zero=3, checkpointing="full"), "fsdp")
    tree = ast.parse(text)  # valid Python
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module == "torch.distributed.fsdp" for a in n.names}
    assert imported == {"fully_shard", "MixedPrecisionPolicy"}
    assert all(hasattr(fsdp_mod, n) for n in imported)
    assert "reshard_after_forward=True" in text and "(8,)" in text
    assert "param_dtype=torch.bfloat16, reduce_dtype=torch.float32" in text
    assert torch.optim.AdamW  # the optimizer line names a real class
    assert "torch.optim.AdamW(model.parameters(), foreach=True)" in text
    z2 = export_plan(job(gpus=8, zero=2), "fsdp")
    assert "reshard_after_forward=False" in z2
    with pytest.raises(InputError, match="zero 1 is not FSDP"):
        export_plan(job(gpus=8, zero=1), "fsdp")


# ------------------------------------------------------------------ torchtitan

@pytest.fixture
def tt_manager():
    """torchtitan 0.2's ConfigManager. Its package ``__init__`` imports the float8/MoE kernels,
    which need triton (a CUDA package); the config manager does not: it is imported under a bare
    parent package, and every torchtitan module is unloaded again afterwards."""
    import importlib.util
    import sys
    import types

    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan 0.2 not installed (pip install --no-deps torchtitan==0.2.2 tyro)")
    ours = lambda: [m for m in sys.modules if m == "torchtitan" or m.startswith("torchtitan.")]  # noqa: E731
    before = {m: sys.modules.pop(m) for m in ours()}
    bare = types.ModuleType("torchtitan")
    bare.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchtitan"] = bare
    try:
        import torchtitan.config.manager as manager
        if not hasattr(manager, "JobConfig"):
            pytest.skip("torchtitan >= 0.3 reads Python config registries, not TOML job files")
        yield manager.ConfigManager
    finally:
        for m in ours():
            del sys.modules[m]
        sys.modules.update(before)


def tt_parse(text: str, tmp_path, manager):
    path = tmp_path / "job.toml"
    path.write_text(text)
    return manager().parse_args(["--job.config_file", str(path)])


def test_torchtitan_round_trip(tmp_path, tt_manager):
    j = job(model="llama-3.1-70b", gpus=64, tp=8, sequence_parallel=True, pp=2,
            pp_schedule="interleaved:2", zero=3, batch=1, grad_accum=8, seq=8192,
            checkpointing="full")
    c = tt_parse(export_plan(j, "torchtitan"), tmp_path, tt_manager)
    p = c.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree,
            p.data_parallel_shard_degree) == (8, 2, 4)
    assert p.pipeline_parallel_schedule == "Interleaved1F1B"
    assert p.pipeline_parallel_layers_per_stage == 80 // (2 * 2)
    assert (c.training.local_batch_size, c.training.global_batch_size) == (8, 32)
    assert c.training.seq_len == 8192 and c.activation_checkpoint.mode == "full"
    assert (c.model.name, c.model.flavor) == ("llama3", "70B")


def test_torchtitan_refusals():
    with pytest.raises(InputError, match="not one of torchtitan's model definitions"):
        export_plan(job(model="gpt2", gpus=2, zero=3), "torchtitan")
    with pytest.raises(InputError, match="sequence_parallel"):
        export_plan(job(gpus=2, tp=2), "torchtitan")


def _tt_flavors(name: str) -> dict:
    """torchtitan 0.2's flavors of model ``name`` read from its source
    (torchtitan/models/<name>/__init__.py: the one dict of ModelArgs), keyword constants only:
    importing the package needs triton, torchdata and datasets."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan 0.2 not installed (pip install --no-deps torchtitan==0.2.2 tyro)")
    src = Path(list(spec.submodule_search_locations)[0]) / "models" / name / "__init__.py"

    def val(n):
        if isinstance(n, ast.Call):
            return {k.arg: val(k.value) for k in n.keywords}
        try:
            return ast.literal_eval(n)
        except ValueError:
            return None

    for node in ast.parse(src.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            return {ast.literal_eval(k): val(v) for k, v in zip(node.value.keys, node.value.values)}
    raise AssertionError(f"no flavor table in {src}")


def test_torchtitan_flavors_are_the_catalog_models():
    from gpuplan.export.torchtitan import MODELS
    from gpuplan.models import load_model

    for catalog, (name, flavor) in MODELS.items():
        f = _tt_flavors(name)[flavor]
        a = load_model(catalog).architecture
        ours = {"dim": a.hidden_size, "n_layers": a.num_layers, "n_heads": a.num_heads,
                "n_kv_heads": a.num_kv_heads, "vocab_size": a.vocab_size,
                "head_dim": a.head_dim if a.mla is None else None,
                "moe_inter_dim": a.moe_intermediate_size or None,
                "kv_lora_rank": a.mla.kv_lora_rank if a.mla else None,
                "q_lora_rank": (a.mla.q_lora_rank or 0) if a.mla else None}
        for key, value in ours.items():
            if key in f and value is not None:
                assert f[key] == value, (catalog, flavor, key, f[key], value)
        moe = f.get("moe_args") or {}
        if "num_experts" in moe:
            assert moe["num_experts"] == a.num_experts, (catalog, flavor)
        if "top_k" in moe:
            assert moe["top_k"] == a.experts_per_token, (catalog, flavor)
        assert "n_layers" in f  # every flavor names its depth


@pytest.mark.parametrize("model,name,flavor,ep", [
    ("qwen3-8b", "qwen3", "8B", 1), ("qwen3-30b-a3b", "qwen3", "30B-A3B", 8),
    ("llama-4-scout", "llama4", "17bx16e_irope", 8), ("deepseek-v3", "deepseek_v3", "671B", 8),
    ("gpt-oss-20b", "gpt_oss", "20b", 4)])
def test_torchtitan_new_families_round_trip(model, name, flavor, ep, tmp_path, tt_manager):
    j = job(model=model, gpus=64, zero=3, ep=ep, batch=1, grad_accum=2, seq=4096)
    c = tt_parse(export_plan(j, "torchtitan"), tmp_path, tt_manager)
    assert (c.model.name, c.model.flavor) == (name, flavor)
    assert (c.parallelism.data_parallel_shard_degree, c.parallelism.expert_parallel_degree) == (
        64, ep)
    assert (c.training.local_batch_size, c.training.global_batch_size) == (1, 2 * 64)


@pytest.mark.parametrize("model,why", [
    ("gemma-3-4b", "defines no gemma3_text model"), ("glm-4.5-air", "defines no glm4_moe model"),
    ("kimi-k2", "no torchtitan deepseek_v3 flavor has its size")])
def test_torchtitan_refuses_families_it_lacks(model, why):
    with pytest.raises(InputError, match="not one of torchtitan's model definitions") as e:
        export_plan(job(model=model, gpus=64, zero=3), "torchtitan")
    assert why in str(e.value) and "\n" not in str(e.value)


def test_megatron_refuses_olmo2_rather_than_write_a_pre_norm_llama():
    # pretrain_gpt.py has no flags for OLMo 2's post-norms and whole-projection QK-norm; without
    # the refusal the command would train Llama's pre-norm block with no QK-norm
    with pytest.raises(InputError, match="OLMo 2's norms after attention and MLP") as e:
        export_plan(job(model="olmo-2-1124-7b", gpus=8, engine="megatron"), "megatron")
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ Megatron-LM (documented)

#: Options of NVIDIA/Megatron-LM megatron/training/arguments.py used by the export, with their
#: types there (store_true flags as None); Megatron-FSDP's from its docs
#: (megatron/core/distributed/fsdp/README.md).
MEGATRON = {"--num-layers": int, "--hidden-size": int, "--num-attention-heads": int,
            "--ffn-hidden-size": int, "--seq-length": int, "--max-position-embeddings": int,
            "--group-query-attention": None, "--num-query-groups": int, "--num-experts": int,
            "--moe-router-topk": int, "--tensor-model-parallel-size": int,
            "--pipeline-model-parallel-size": int, "--context-parallel-size": int,
            "--expert-model-parallel-size": int, "--num-layers-per-virtual-pipeline-stage": int,
            "--sequence-parallel": None, "--micro-batch-size": int, "--global-batch-size": int,
            "--bf16": None, "--fp16": None, "--optimizer": ["adam", "sgd"],
            # arguments.py lines 3053 and 3069 @d98e8a64 (the gradient buffer's dtype)
            "--grad-reduce-in-bf16": None, "--accumulate-allreduce-grads-in-fp32": None,
            "--sgd-momentum": float, "--recompute-granularity": ["full", "selective"],
            "--recompute-method": ["uniform", "block"], "--recompute-num-layers": int,
            "--use-distributed-optimizer": None, "--use-megatron-fsdp": None,
            "--data-parallel-sharding-strategy": ["no_shard", "optim", "optim_grads",
                                                  "optim_grads_params"],
            "--ckpt-format": ["torch", "torch_dist", "zarr", "fsdp_dtensor"],
            "--no-gradient-accumulation-fusion": None, "--optimizer-cpu-offload": None,
            "--use-precision-aware-optimizer": None,
            # arguments.py lines 3675-3684 @d98e8a64 (precision-aware optimizer state dtypes)
            "--exp-avg-dtype": ["fp32", "fp16", "bf16", "fp8"],
            "--exp-avg-sq-dtype": ["fp32", "fp16", "bf16", "fp8"],
            "--num-virtual-stages-per-pipeline-rank": int,
            "--account-for-embedding-in-pipeline-split": None,
            "--account-for-loss-in-pipeline-split": None,
            "--decoder-first-pipeline-num-layers": int,
            "--decoder-last-pipeline-num-layers": int,
            "--pipeline-model-parallel-layout": str, "--expert-tensor-parallel-size": int,
            # transformer_config.py @d98e8a64dd (TransformerConfig fields as options)
            "--moe-token-dispatcher-type": ["allgather", "alltoall", "flex"],
            # transformer_config.py @b0cc2706: moe_flex_dispatcher_backend Literal
            "--moe-flex-dispatcher-backend": ["deepep", "hybridep"],
            "--moe-expert-capacity-factor": float, "--moe-pad-expert-input-to-capacity": None,
            "--overlap-moe-expert-parallel-comm": None, "--delay-wgrad-compute": None,
            "--recompute-modules": ("*", str),  # a List[str] field: nargs *
            # @b0cc2706: cuda_graph_impl a choice; arguments.py --cuda-graph-scope nargs +
            "--cuda-graph-impl": ["none", "local", "transformer_engine"],
            "--cuda-graph-scope": ("*", str),
            # transformer_config.py @0d8e0714: moe_shared_expert_overlap, a bool flag
            "--moe-shared-expert-overlap": None,
            # arguments.py _add_mtp_args (NVIDIA/Megatron-LM): an int, default None
            "--mtp-num-layers": int,
            "--position-embedding-type": ["learned_absolute", "rope", "mrope", "relative",
                                          "none"],
            "--rotary-base": int, "--normalization": ["LayerNorm", "RMSNorm"],
            "--swiglu": None, "--untie-embeddings-and-output-weights": None,
            "--disable-bias-linear": None, "--add-qkv-bias": None, "--clip-grad": float,
            "--use-rope-scaling": None, "--rope-scaling-factor": float,
            "--distribute-saved-activations": None,
            # MLA (_add_mla_args) and TransformerConfig fields made options by
            # ArgumentGroupFactory (megatron/core/transformer/transformer_config.py @d98e8a64dd)
            "--multi-latent-attention": None, "--q-lora-rank": int, "--kv-lora-rank": int,
            "--qk-head-dim": int, "--qk-pos-emb-head-dim": int, "--v-head-dim": int,
            "--rope-type": ["rope", "yarn"], "--rotary-scaling-factor": float, "--mscale": float,
            "--mscale-all-dim": float, "--yarn-beta-fast": float, "--yarn-beta-slow": float,
            "--yarn-original-max-position-embeddings": int, "--kv-channels": int,
            "--qk-layernorm": None, "--qk-l2-norm": None, "--rotary-percent": float,
            "--no-rope-freq": str, "--moe-ffn-hidden-size": int,
            "--moe-shared-expert-intermediate-size": int, "--moe-layer-freq": str,
            "--moe-router-score-function": ["softmax", "sigmoid", "sqrtsoftplus"],
            "--moe-router-enable-expert-bias": None, "--moe-router-num-groups": int,
            "--moe-router-group-topk": int, "--moe-router-topk-scaling-factor": float,
            "--moe-router-pre-softmax": None, "--moe-grouped-gemm": None,
            # Transformer Engine options (_add_transformer_engine_args)
            "--fp8-format": ["e4m3", "hybrid"],
            "--fp8-recipe": ["tensorwise", "delayed", "mxfp8", "blockwise"],
            "--fp8-amax-history-len": int, "--fp8-amax-compute-algo": ["most_recent", "max"],
            "--fp8-param-gather": None, "--fp8-dot-product-attention": None,
            "--fp4-format": ["e2m1"], "--fp4-recipe": ["nvfp4"],
            # _add_transformer_engine_args (a 2025 arguments.py: store_true, and int default 1)
            "--first-last-layers-bf16": None, "--num-layers-at-start-in-bf16": int,
            "--num-layers-at-end-in-bf16": int}

#: torchrun's options the launch line uses (torch.distributed.run; both spellings accepted).
TORCHRUN = {"--nproc-per-node": int, "--nnodes": int, "--node-rank": str, "--master-addr": str,
            "--master-port": int}


def _documented_parser(options: dict) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    for name, kind in options.items():
        if kind is None:
            p.add_argument(name, action="store_true")
        elif isinstance(kind, list):
            p.add_argument(name, choices=kind)
        elif isinstance(kind, tuple):
            p.add_argument(name, nargs=kind[0], type=kind[1])
        else:
            p.add_argument(name, type=kind)
    return p


def megatron_launch(text: str) -> tuple[argparse.Namespace, argparse.Namespace]:
    """(torchrun's options, pretrain_gpt.py's) of a Megatron export, each parsed strictly."""
    body = " ".join(line.rstrip("\\").strip() for line in text.splitlines()
                    if line.strip() and not line.startswith("#"))
    words = shlex.split(body, posix=True)
    assert words[0] == "torchrun" and "pretrain_gpt.py" in words
    at = words.index("pretrain_gpt.py")
    return (_documented_parser(TORCHRUN).parse_args(words[1:at]),
            _documented_parser(MEGATRON).parse_args(words[at + 1:]))


def megatron_args(text: str) -> argparse.Namespace:
    return megatron_launch(text)[1]


def test_megatron_launches_every_node_and_scales_llama3_rope():
    """16 GPUs on nodes of 8: the torchrun line is run on 2 nodes (--nnodes 2, its node rank and
    the rendezvous host left to the cluster), 8 processes each. Llama 3.1's config.json scales
    RoPE (rope_type llama3, factor 8): without --use-rope-scaling Megatron builds plain RoPE."""
    j = job(model="llama-3.1-70b", gpus=16, tp=8, pp=2, grad_accum=4)
    run, a = megatron_launch(export_plan(j, "megatron"))
    assert (run.nproc_per_node, run.nnodes, run.node_rank) == (8, 2, "$NODE_RANK")
    assert a.use_rope_scaling and a.rope_scaling_factor == 8.0 and a.rotary_base == 500000
    one, b = megatron_launch(export_plan(job(model="llama-3.1-8b", gpus=8, tp=8), "megatron"))
    assert (one.nproc_per_node, one.nnodes) == (8, None)
    small = export_plan(job(model="llama-3.2-1b", gpus=1), "megatron")
    assert megatron_args(small).rope_scaling_factor == 32.0  # Llama 3.2's factor
    plain = megatron_args(export_plan(job(model="qwen2.5-7b", gpus=1), "megatron"))
    assert not plain.use_rope_scaling and plain.rope_scaling_factor is None


def test_megatron_layout_and_batch():
    j = job(model="llama-3.1-70b", gpus=64, tp=8, pp=4, pp_schedule="interleaved:5",
            sequence_parallel=True, zero=1, batch=1, grad_accum=16, checkpointing="selective",
            seq=4096)
    a = megatron_args(export_plan(j, "megatron"))
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size) == (8, 4)
    assert a.num_layers_per_virtual_pipeline_stage == 80 // (4 * 5)
    assert a.sequence_parallel and a.use_distributed_optimizer and a.bf16
    assert (a.micro_batch_size, a.global_batch_size) == (1, 1 * 16 * 2)
    assert (a.num_layers, a.hidden_size, a.num_query_groups) == (80, 8192, 8)
    assert a.recompute_granularity == "selective"


def test_megatron_embedding_and_loss_parts():
    # llama-3.1-8b: 32 layers + embedding + loss = 34 parts = 2 stages x 17 chunks; Megatron
    # counts V itself (--num-layers-per-virtual-pipeline-stage counts transformer layers only)
    j = job(gpus=2, pp=2, pp_schedule="interleaved:17", pp_embedding_part=True,
            pp_loss_part=True, grad_accum=4)
    a = megatron_args(export_plan(j, "megatron"))
    assert a.account_for_embedding_in_pipeline_split and a.account_for_loss_in_pipeline_split
    assert a.num_virtual_stages_per_pipeline_rank == 17
    assert a.num_layers_per_virtual_pipeline_stage is None
    with pytest.raises(InputError, match="33 parts"):  # 32 + the loss over 2 stages
        export_plan(job(gpus=2, pp=2, pp_loss_part=True), "megatron")
    # 34 parts do not split over 4 stages: Megatron refuses it, so does the export
    with pytest.raises(InputError, match="34 parts"):
        export_plan(job(gpus=4, pp=4, pp_embedding_part=True, pp_loss_part=True), "megatron")
    with pytest.raises(InputError, match="pp_loss_part"):
        export_plan(job(gpus=2, pp=2, pp_loss_part=True), "torchtitan")


def test_megatron_uneven_split_and_expert_tp():
    # mixtral-8x7b, 32 layers: first 5, last 11, the middle 16 as 8 + 8: Megatron's own options
    j = job(model="mixtral-8x7b", gpus=16, pp=4, tp=2, ep=4, etp=1, sequence_parallel=True,
            pp_first_stage_layers=5, pp_last_stage_layers=11, grad_accum=4)
    a = megatron_args(export_plan(j, "megatron"))
    assert (a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers) == (5, 11)
    assert a.expert_tensor_parallel_size == 1 and a.pipeline_model_parallel_layout is None
    # first 6, last 7 over 2 chunks each: the middle 19 as 10 + 9 and the last stage's 7 as
    # 4 + 3 are not Megatron's even split, so the parts go as a layout string: E + 3 t first,
    # 3 t + the loss last
    j = job(model="mixtral-8x7b", gpus=4, pp=4, pp_schedule="interleaved:2",
            pp_first_stage_layers=6, pp_last_stage_layers=7, grad_accum=4)
    a = megatron_args(export_plan(j, "megatron"))
    parts = a.pipeline_model_parallel_layout.split("|")
    assert len(parts) == 8 and parts[0] == "Et*3" and parts[-1] == "t*3L"
    assert a.decoder_first_pipeline_num_layers is None
    counts = [int(p.strip("EL").partition("*")[2] or 1) for p in parts]
    assert sum(counts) == 32 and sum(counts[0::4]) == 6 and sum(counts[3::4]) == 7
    with pytest.raises(InputError, match="pp_first_stage_layers"):
        export_plan(j, "torchtitan")


def test_megatron_writes_the_block_it_plans():
    """Without the architecture flags pretrain_gpt.py builds its default GPT (learned positions,
    LayerNorm, GeLU, tied head, biases): Llama 3.1 needs rope (base 500,000 from its config),
    RMSNorm, SwiGLU, an untied head and no biases; Qwen2 has Q/K/V biases only; GPT-2 is
    Megatron's default block."""
    a = megatron_args(export_plan(job(model="llama-3.1-8b", gpus=8), "megatron"))
    assert (a.position_embedding_type, a.rotary_base, a.normalization) == ("rope", 500000,
                                                                          "RMSNorm")
    assert a.swiglu and a.untie_embeddings_and_output_weights and a.disable_bias_linear
    assert not a.add_qkv_bias
    q = megatron_args(export_plan(job(model="qwen2.5-7b", gpus=4), "megatron"))
    assert q.disable_bias_linear and q.add_qkv_bias and q.rotary_base == 1000000
    g = megatron_args(export_plan(job(model="gpt2", gpus=2), "megatron"))
    assert (g.position_embedding_type, g.normalization) == ("learned_absolute", "LayerNorm")
    assert not (g.swiglu or g.untie_embeddings_and_output_weights or g.disable_bias_linear)
    with pytest.raises(InputError, match="alibi positions"):
        export_plan(job(model="bloom-560m", gpus=2), "megatron")
    assert "in parallel" in export_plan(job(model="pythia-160m", gpus=2), "megatron")


def test_megatron_zero3_is_megatron_fsdp():
    a = megatron_args(export_plan(job(gpus=8, zero=3, offload_optimizer=True), "megatron"))
    assert a.use_megatron_fsdp and a.data_parallel_sharding_strategy == "optim_grads_params"
    assert a.optimizer_cpu_offload


# ------------------------------------------------------------------ vLLM (documented)

#: vLLM engine arguments (docs.vllm.ai/en/latest/configuration/engine_args.html). The
#: --quantization choices are vLLM's QuantizationMethods (vllm/model_executor/layers/
#: quantization/__init__.py @05d909563e1d1ada39a13b67e7b9a4cbca1d6a8e), --kv-cache-dtype's its
#: CacheDType (vllm/config/cache.py @c1d86421174a87056edc90a41dc9942391509e84).
VLLM = {"--tensor-parallel-size": int, "--pipeline-parallel-size": int,
        "--data-parallel-size": int, "--max-model-len": int, "--max-num-seqs": int,
        "--dtype": ["auto", "half", "float16", "bfloat16", "float", "float32"],
        "--quantization": ["awq", "fp8", "ptpc_fp8", "fbgemm_fp8", "fp_quant", "modelopt",
                           "modelopt_fp4", "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin",
                           "gptq_bitblas", "awq_marlin", "gptq", "compressed-tensors",
                           "bitsandbytes", "experts_int8", "ipex", "quark", "moe_wna16",
                           "torchao", "inc", "mxfp4", "mxfp8", "petit_nvfp4", "cpu_awq"],
        "--kv-cache-dtype": ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
                             "fp8_ds_mla"],
        "--enforce-eager": None, "--enable-expert-parallel": None,
        "--distributed-executor-backend": ["ray", "mp", "uni", "external_launcher"],
        "--gpu-memory-utilization": float}


def vllm_args(text: str):
    words = shlex.split(text)
    assert words[:2] == ["vllm", "serve"]
    return words[2], _documented_parser(VLLM).parse_args(words[3:])


def test_vllm_serve_command():
    j = job(mode="infer", infer_precision="fp8", kv_dtype="fp8", tp=4, gpus=8, batch=64,
            context=32768, runtime="eager")
    repo, a = vllm_args(export_plan(j, "vllm"))
    assert repo == "meta-llama/Llama-3.1-8B"
    assert (a.tensor_parallel_size, a.data_parallel_size, a.max_model_len, a.max_num_seqs) == \
        (4, 2, 32768, 64)
    assert (a.quantization, a.kv_cache_dtype, a.enforce_eager) == ("fp8", "fp8", True)
    with pytest.raises(InputError, match="mode train"):
        export_plan(job(), "vllm")
    with pytest.raises(InputError, match="cp 2"):
        export_plan(job(mode="infer", cp=2, gpus=2), "vllm")


# ------------------------------------------------------------------ CLI

def test_every_engine_is_exported_or_refused_in_one_line():
    for e in ENGINES:
        for kw in (dict(gpus=8, zero=3), dict(mode="infer", tp=2, gpus=2)):
            try:
                out = export_plan(job(**kw), e)
            except InputError as err:
                assert "\n" not in str(err) and str(err).startswith(f"export {e}:")
            else:
                assert out.endswith("\n") and len(out) > 40


def test_cli_export_to_stdout_and_file(capsys, tmp_path):
    assert main(["fit", "llama-3.1-8b", "--mode", "train", "--gpus", "8", "--zero", "3",
                 "--export", "deepspeed"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["zero_optimization"]["stage"] == 3  # the config only
    path = tmp_path / "ds.json"
    assert main(["fit", "llama-3.1-8b", "--mode", "train", "--gpus", "8", "--zero", "3",
                 "--export", "deepspeed", "--export-file", str(path), "--json",
                 "--no-speed"]) == 0
    assert json.loads(capsys.readouterr().out)["job"]["zero"] == 3  # the plan as usual
    assert json.loads(path.read_text())["train_batch_size"] == 8
    assert main(["fit", "gpt2", "--export", "megatronn"]) == 2
    assert "did you mean 'megatron'" in capsys.readouterr().err


def test_cli_export_file_is_written_only_when_everything_else_passes(capsys, tmp_path):
    """The config file is written last: a bad option checked later (an overhead override, a GPU
    name) fails with exit 2 and leaves no file behind, as a bad --gpu fails an export to stdout."""
    base = ["fit", "llama-3.1-8b", "--mode", "train", "--gpus", "8", "--tp", "2", "--zero", "1",
            "--export", "deepspeed"]
    for extra in (["--fragmentation", "2"], ["--gpu", "bogusgpu"], ["--gpu", "custom:24GB,bw=-5"]):
        path = tmp_path / "ds.json"
        assert main([*base, "--export-file", str(path), *extra]) == 2
        assert capsys.readouterr().err.count("\n") == 1 and not path.exists()
    assert main([*base, "--gpu", "bogusgpu"]) == 2
    assert capsys.readouterr().out == ""
    assert main([*base[:-2], "--export", ""]) == 2
    assert "name the engine" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", [
    ["fit", "llama-3.1-8b", "--mode", "train", "--gpus", "8", "--zero", "3", "--export",
     "deepspeed"],
    ["fit", "llama-3.1-8b", "--mode", "train"],
    ["cluster", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--global-batch", "64",
     "--export", "megatron"],
])
@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_export_file_is_refused_not_read_as_stdout(capsys, cmd, name):
    """qa43: ``--export-file ''`` was taken as no file: the config went to stdout (or, without
    --export, nothing was said) and exit 0. Now a one-line error naming the option, nothing
    printed."""
    assert main([*cmd, "--export-file", name]) == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err.count("\n") == 1
    assert got.err.startswith(f"gpuplan: error: --export-file {name!r}: give the file's name")


def test_megatron_says_which_rope_scaling_it_cannot_write(tmp_path):
    """A YaRN-scaled RoPE (Qwen's long-context recipe) has no pretrain_gpt.py flag among the
    ones the export writes: the export says so rather than silently planning plain RoPE; a
    Llama 3 scaling with other factors than the ones Megatron-Core fixes is said too."""
    from gpuplan.models import catalog_config, load_model

    cfg = dict(catalog_config("qwen2.5-7b"))
    cfg["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(tmp_path / "config.json")
    text = export_plan(Job(model=m, mode="train"), "megatron", model=m)
    assert "# the model's RoPE is scaled ('yarn')" in text
    assert not megatron_args(text).use_rope_scaling
    cfg = dict(catalog_config("llama-3.1-8b"))
    cfg["rope_scaling"] = {**cfg["rope_scaling"], "high_freq_factor": 2.0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(tmp_path / "config.json")
    text = export_plan(Job(model=m, mode="train"), "megatron", model=m)
    assert "fixes low_freq_factor 1, high_freq_factor 4" in text
    assert megatron_args(text).rope_scaling_factor == 8.0


def test_vllm_replica_across_nodes_runs_on_ray():
    """405B over TP 8 x PP 2 on nodes of 8 GPUs: one replica spans two nodes, which vLLM runs
    on a Ray cluster ("ray" backend); inside a node it keeps its default (no flag)."""
    j = job(model="llama-3.1-405b", mode="infer", tp=8, pp=2, gpus=16)
    _, a = vllm_args(export_plan(j, "vllm"))
    assert (a.tensor_parallel_size, a.pipeline_parallel_size) == (8, 2)
    assert a.distributed_executor_backend == "ray"
    _, b = vllm_args(export_plan(job(mode="infer", tp=8, gpus=8), "vllm"))
    assert b.distributed_executor_backend is None


def test_distributed_checkpoints_are_megatrons_distributed_saved_activations():
    """--distribute-checkpoints is Megatron-LM's --distribute-saved-activations (with full
    recompute); the engines without it refuse the plan in one line."""
    j = job(model="llama-3.1-70b", gpus=8, tp=8, checkpointing="full",
            distribute_checkpoints=True)
    a = megatron_args(export_plan(j, "megatron"))
    assert a.distribute_saved_activations and a.recompute_granularity == "full"
    assert not megatron_args(export_plan(j.with_(distribute_checkpoints=False),
                                         "megatron")).distribute_saved_activations
    with pytest.raises(InputError, match="distribute_checkpoints has no torchtitan setting"):
        export_plan(j.with_(sequence_parallel=False), "torchtitan")


def _config(name: str) -> dict:
    from gpuplan.models import load_model
    return load_model(name).architecture.config


def test_megatron_writes_mla_and_deepseek_routing():
    """DeepSeek-V3 as Megatron-LM builds it: MLA's ranks and head sizes, the shared expert, the
    first dense layers, the sigmoid router with its bias, groups and scaling, YaRN -- each
    compared with the model's own config.json."""
    cfg = _config("deepseek-v3")
    a = megatron_args(export_plan(job(model="deepseek-v3", gpus=64, tp=8, ep=8), "megatron"))
    assert a.multi_latent_attention and not a.group_query_attention
    assert (a.q_lora_rank, a.kv_lora_rank) == (cfg["q_lora_rank"], cfg["kv_lora_rank"])
    assert (a.qk_head_dim, a.qk_pos_emb_head_dim, a.v_head_dim) == (
        cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"])
    assert (a.num_experts, a.moe_router_topk) == (cfg["n_routed_experts"],
                                                   cfg["num_experts_per_tok"])
    assert a.moe_ffn_hidden_size == cfg["moe_intermediate_size"]
    assert a.moe_shared_expert_intermediate_size == (cfg["moe_intermediate_size"]
                                                     * cfg["n_shared_experts"])
    freq = ast.literal_eval(a.moe_layer_freq)
    k = cfg["first_k_dense_replace"]
    assert freq == [0] * k + [1] * (cfg["num_hidden_layers"] - k)
    assert a.moe_router_score_function == "sigmoid" and a.moe_router_enable_expert_bias
    assert (a.moe_router_num_groups, a.moe_router_group_topk) == (cfg["n_group"],
                                                                 cfg["topk_group"])
    assert a.moe_router_topk_scaling_factor == cfg["routed_scaling_factor"]
    rs = cfg["rope_scaling"]
    assert a.rope_type == "yarn" and a.rotary_scaling_factor == rs["factor"]
    assert a.yarn_original_max_position_embeddings == rs["original_max_position_embeddings"]


def test_megatron_writes_qk_norm_head_size_and_moe_width():
    """Qwen3: QK-norm and a head size other than hidden / heads; Qwen3-MoE: the experts' width
    and its renormalized top-k (Megatron's default router); GLM-4.5-Air: partial rotary, QKV
    biases, first dense layer; Llama 4 Scout: L2 QK-norm, NoPE layers, sigmoid top-1."""
    cfg = _config("qwen3-0.6b")
    a = megatron_args(export_plan(job(model="qwen3-0.6b", gpus=1), "megatron"))
    assert a.qk_layernorm and a.kv_channels == cfg["head_dim"]
    assert cfg["head_dim"] * cfg["num_attention_heads"] != cfg["hidden_size"]
    cfg = _config("qwen3-30b-a3b")
    a = megatron_args(export_plan(job(model="qwen3-30b-a3b", gpus=8, ep=8), "megatron"))
    assert (a.num_experts, a.moe_router_topk, a.moe_ffn_hidden_size) == (
        cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"])
    assert cfg["norm_topk_prob"] and not a.moe_router_pre_softmax
    assert a.moe_layer_freq is None  # every layer is MoE
    cfg = _config("glm-4.5-air")
    a = megatron_args(export_plan(job(model="glm-4.5-air", gpus=8, ep=8), "megatron"))
    assert a.rotary_percent == cfg["partial_rotary_factor"] and a.add_qkv_bias
    assert ast.literal_eval(a.moe_layer_freq)[:cfg["first_k_dense_replace"] + 1] == (
        [0] * cfg["first_k_dense_replace"] + [1])
    cfg = _config("llama-4-scout")
    a = megatron_args(export_plan(job(model="llama-4-scout", gpus=8, ep=8), "megatron"))
    assert a.qk_l2_norm and a.moe_router_score_function == "sigmoid"
    interval = cfg.get("no_rope_layer_interval", 4)
    expected = ([int(not r) for r in cfg["no_rope_layers"]] if cfg.get("no_rope_layers") else
                [int((i + 1) % interval == 0) for i in range(cfg["num_hidden_layers"])])
    assert ast.literal_eval(a.no_rope_freq) == expected and sum(expected) > 0


# ------------------------------------------------------------------ FP8 recipes (issue 30)

@pytest.mark.parametrize("precision, fmt, recipe", [
    ("fp8-delayed", "hybrid", "delayed"), ("fp8-current", "hybrid", "tensorwise"),
    ("fp8-blockwise", "e4m3", "blockwise"), ("mxfp8", "e4m3", "mxfp8")])
def test_megatron_writes_the_fp8_recipe(precision, fmt, recipe):
    j = job(model="llama-3.1-70b", gpus=64, tp=4, pp=8, pp_schedule="interleaved:5",
            sequence_parallel=True, zero=1, grad_accum=128, precision=precision,
            engine="megatron", fp8_param_gather=True)
    a = megatron_args(export_plan(j, "megatron"))
    assert a.bf16 and (a.fp8_format, a.fp8_recipe) == (fmt, recipe) and a.fp8_param_gather
    assert not a.fp8_dot_product_attention and a.fp4_format is None
    # delayed scaling: TE's history (1024, max) written over Megatron's defaults (1, most_recent)
    assert (a.fp8_amax_history_len, a.fp8_amax_compute_algo) == (
        (1024, "max") if precision == "fp8-delayed" else (None, None))


def test_megatron_first_last_layers_bf16():
    j = job(model="llama-3.1-8b", gpus=8, precision="mxfp8", engine="megatron",
            first_last_layers_bf16=2)
    a = megatron_args(export_plan(j, "megatron"))
    assert a.first_last_layers_bf16 and (a.num_layers_at_start_in_bf16,
                                         a.num_layers_at_end_in_bf16) == (2, 2)
    assert not megatron_args(export_plan(job(gpus=8, precision="mxfp8", engine="megatron"),
                                         "megatron")).first_last_layers_bf16
    with pytest.raises(InputError, match="first_last_layers_bf16"):
        export_plan(job(gpus=8, zero=3, precision="mxfp8", engine="torchtitan",
                        first_last_layers_bf16=1), "torchtitan")


def test_megatron_plain_fp8_nvfp4_and_fp8_attention():
    plain = megatron_args(export_plan(job(gpus=8, precision="fp8", engine="megatron",
                                          fp8_attention=True), "megatron"))
    assert plain.fp8_recipe == "delayed" and plain.fp8_dot_product_attention
    fp4 = megatron_args(export_plan(job(gpus=8, precision="nvfp4", engine="megatron"),
                                    "megatron"))
    assert (fp4.fp4_format, fp4.fp4_recipe, fp4.fp8_format) == ("e2m1", "nvfp4", None)


@pytest.mark.parametrize("precision, gather", [("fp8-tensorwise", True), ("fp8-rowwise", False),
                                               ("fp8", False)])
def test_torchtitan_float8_round_trip(precision, gather, tmp_path, tt_manager):
    j = job(gpus=8, zero=3, precision=precision, engine="torchtitan", fp8_param_gather=gather)
    c = tt_parse(export_plan(j, "torchtitan"), tmp_path, tt_manager)
    assert c.model.converters == ["quantize.linear.float8"]
    f8 = c.quantize.linear.float8
    assert f8.recipe_name == ("rowwise" if precision == "fp8-rowwise" else None)
    assert f8.enable_fsdp_float8_all_gather is gather
    assert f8.precompute_float8_dynamic_scale_for_fsdp is gather
    assert f8.filter_fqns == ["output"]


def test_torchtitan_mxfp8_round_trip_and_refusals(tmp_path, tt_manager):
    c = tt_parse(export_plan(job(gpus=8, zero=3, precision="mxfp8", engine="torchtitan"),
                             "torchtitan"), tmp_path, tt_manager)
    assert c.model.converters == ["quantize.linear.mx"]
    assert c.quantize.linear.mx.recipe_name == "mxfp8_cublas"
    with pytest.raises(InputError, match="linear layers only"):
        export_plan(job(gpus=8, zero=3, precision="fp8-rowwise", engine="torchtitan",
                        fp8_attention=True), "torchtitan")


def test_fp8_options_are_refused_by_engines_that_cannot_write_them():
    # a recipe an engine has no setting for, and the FP8 options, are refused in one line
    with pytest.raises(InputError, match="fp8-delayed"):
        export_plan(job(gpus=2, zero=3, precision="fp8-delayed"), "fsdp")
    with pytest.raises(InputError, match="fp8.param.gather"):
        export_plan(job(gpus=2, zero=3, precision="fp8-tensorwise", fp8_param_gather=True),
                    "accelerate")


def test_megatron_capacity_factor_and_alltoall_dispatcher():
    # the EP buffers and the capacity are MoEAlltoAllTokenDispatcher's: the export names it
    # (Megatron-Core's default is allgather) and drop-and-pad with the job's capacity factor
    j = job(model="mixtral-8x7b", engine="megatron", gpus=8, ep=8, moe_capacity_factor=1.25)
    a = megatron_args(export_plan(j, "megatron"))
    assert a.moe_token_dispatcher_type == "alltoall"
    assert a.moe_expert_capacity_factor == 1.25 and a.moe_pad_expert_input_to_capacity
    a = megatron_args(export_plan(job(model="mixtral-8x7b", gpus=8, ep=8), "megatron"))
    assert a.moe_expert_capacity_factor is None and not a.moe_pad_expert_input_to_capacity


def test_megatron_mtp_layers_and_dualpipe_refused():
    # --mtp-num-layers is Megatron-Core's MTP depth (arguments.py _add_mtp_args): written when the
    # job trains one, absent (and the checkpoint's note kept) otherwise
    base = dict(model="deepseek-v3", engine="megatron", gpus=64, ep=64, zero=1)
    a = megatron_args(export_plan(job(**base, mtp_layers=1), "megatron"))
    assert a.mtp_num_layers == 1
    text = export_plan(job(**base), "megatron")
    assert megatron_args(text).mtp_num_layers is None and "--mtp-num-layers 1 trains them" in text
    # DualPipe is DeepSeek's schedule, not Megatron-LM's: one line, naming the field
    with pytest.raises(InputError) as e:
        export_plan(job(**{**base, "gpus": 1024}, pp=16, pp_schedule="dualpipe", grad_accum=32,
                        pp_first_stage_layers=4, pp_last_stage_layers=1), "megatron")
    assert e.value.field == "pp_schedule" and "\n" not in str(e.value)
    assert "dualpipe" in str(e.value)
    # the other exports refuse an MTP depth they cannot express
    with pytest.raises(InputError):
        export_plan(job(**base, mtp_layers=1), "deepspeed")


def test_megatron_ep_overlap():
    # batch-level EP overlap: TransformerConfig's overlap_moe_expert_parallel_comm with the
    # delay_wgrad_compute it is paired with (megatron/core/transformer/moe/README.md @d98e8a64)
    base = dict(model="deepseek-v3", engine="megatron", gpus=64, ep=64, zero=1)
    a = megatron_args(export_plan(job(**base, ep_overlap=True), "megatron"))
    assert a.overlap_moe_expert_parallel_comm and a.delay_wgrad_compute
    a = megatron_args(export_plan(job(**base), "megatron"))
    assert not a.overlap_moe_expert_parallel_comm and not a.delay_wgrad_compute


def test_megatron_flex_dispatcher():
    # the flex dispatcher and its backend (transformer_config.py @b0cc2706); alltoall otherwise
    base = dict(model="qwen3-30b-a3b", engine="megatron", gpus=8, ep=8, zero=1)
    a = megatron_args(export_plan(job(**base, moe_dispatcher="hybridep"), "megatron"))
    assert (a.moe_token_dispatcher_type, a.moe_flex_dispatcher_backend) == ("flex", "hybridep")
    a = megatron_args(export_plan(job(**base), "megatron"))
    assert a.moe_token_dispatcher_type == "alltoall" and a.moe_flex_dispatcher_backend is None


def test_megatron_cuda_graph_scope():
    # the scope as Megatron-Bridge's Qwen3-30B-A3B B200 recipe sets it (v0.3.0 21b02e0c)
    base = dict(model="qwen3-30b-a3b", engine="megatron", gpus=8, ep=8, zero=1)
    a = megatron_args(export_plan(job(**base, cuda_graph_scope=("moe_router", "moe_preprocess")),
                                  "megatron"))
    assert a.cuda_graph_impl == "transformer_engine"
    assert a.cuda_graph_scope == ["moe_router", "moe_preprocess"]
    assert megatron_args(export_plan(job(**base), "megatron")).cuda_graph_scope is None


def test_megatron_whole_layer_cuda_graphs():
    # cuda_graph_scope full: Megatron-Core's local whole-layer graphs, cuda_graph_impl "local"
    # with no scope (transformer_config.py @0d8e0714 lines 1496-1527)
    base = dict(model="qwen3-30b-a3b", engine="megatron", gpus=8, ep=8, zero=1,
                moe_capacity_factor=1.0)
    a = megatron_args(export_plan(job(**base, cuda_graph_scope=("full",)), "megatron"))
    assert a.cuda_graph_impl == "local"
    assert a.cuda_graph_scope is None


def test_megatron_shared_expert_overlap():
    # Megatron-Bridge's DeepSeek-V3 provider default (deepseek_provider.py:78 @21b02e0c)
    base = dict(model="deepseek-v3", engine="megatron", gpus=64, ep=64, zero=1)
    a = megatron_args(export_plan(job(**base, moe_shared_expert_overlap=True), "megatron"))
    assert a.moe_shared_expert_overlap
    assert not megatron_args(export_plan(job(**base), "megatron")).moe_shared_expert_overlap


def test_megatron_recompute_modules():
    # transformer_config.py @d98e8a64 recompute_modules: a list after --recompute-granularity
    base = dict(model="deepseek-v3", engine="megatron", gpus=64, ep=64, zero=1)
    text = export_plan(job(**base, checkpointing="selective",
                           recompute_modules=("mla_up_proj", "moe_act")), "megatron")
    a = megatron_args(text)
    assert a.recompute_granularity == "selective"
    assert a.recompute_modules == ["mla_up_proj", "moe_act"]


def test_cluster_exports_every_writer_under_engine_auto(capsys):
    """qa43: ``cluster --export sglang`` (the sglang writer, added after the cluster's table of the
    engine each writer's search runs under) raised KeyError: 'sglang'. Every writer is in the
    table, and the sglang export of a serving search is its launch command."""
    from gpuplan.cli.cluster import _ENGINE_OF_WRITER

    assert set(_ENGINE_OF_WRITER) == set(ENGINES)
    assert main(["cluster", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--mode", "infer",
                 "--concurrency", "4", "--export", "sglang"]) == 0
    assert capsys.readouterr().out.startswith("python -m sglang.launch_server ")
