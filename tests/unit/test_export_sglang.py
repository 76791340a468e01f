"""``--export sglang``: every flag written is one SGLang's own argument parser defines (recorded
below from its source, with the commit), and each value is the plan's -- the simulated
scheduler's budgets under ``gpuplan capacity``, the Job's layout under ``gpuplan fit``."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

from gpuplan.cli import main
from gpuplan.errors import InputError
from gpuplan.export import ENGINES, export_plan
from gpuplan.job import Job

#: Flags of ``sglang.launch_server``: ServerArgs fields in sgl-project/sglang
#: python/sglang/srt/server_args.py at commit 001067fffe33427bee0ed2f007fb7551a1d76b44 (a field
#: ``tp_size`` is the flag ``--tp-size``; read 2026-12-06). The type is the field's.
SGLANG_SERVER_ARGS = {
    "--model-path": str, "--tp-size": int, "--pp-size": int, "--ep-size": int, "--dtype": str,
    "--quantization": str, "--kv-cache-dtype": str, "--context-length": int,
    "--mem-fraction-static": float, "--max-running-requests": int,
    "--chunked-prefill-size": int, "--page-size": int, "--host": str, "--port": int,
    "--base-gpu-id": int,
}
#: server_args.py's choices at that commit for the two enumerated fields the export writes.
KV_CHOICES = {"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
              "fp4_mx_block16", "fp4_e2m1"}
DTYPE_CHOICES = {"auto", "half", "float16", "bfloat16", "float", "float32"}
#: ``sglang_router.launch_router``: sgl-project/sglang sgl-router/py_src/sglang_router/
#: router_args.py at commit e46dcd87adca58ec70831ad7cb01a3892b2c9e50 (RouterArgs.add_cli_args).
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")


def _server_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    for flag, typ in SGLANG_SERVER_ARGS.items():
        kw = {}
        if flag == "--kv-cache-dtype":
            kw["choices"] = sorted(KV_CHOICES)
        if flag == "--dtype":
            kw["choices"] = sorted(DTYPE_CHOICES)
        p.add_argument(flag, type=typ, required=flag == "--model-path", **kw)
    return p


def _router_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    p.add_argument("--worker-urls", nargs="*", default=[])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--policy", choices=ROUTER_POLICIES)
    return p


def parse(text: str):
    """(server namespaces, router namespace or None); an unknown flag fails the parse."""
    servers, router = [], None
    for line in text.strip().splitlines():
        argv = shlex.split(line)
        if argv[:3] == ["python", "-m", "sglang.launch_server"]:
            servers.append(_server_parser().parse_args(argv[3:]))
        else:
            assert argv[:3] == ["python", "-m", "sglang_router.launch_router"], line
            assert router is None
            router = _router_parser().parse_args(argv[3:])
    return servers, router


def test_the_writer_emits_only_recorded_flags():
    from gpuplan.export import sglang

    assert set(sglang.SERVER_FLAGS) == set(SGLANG_SERVER_ARGS)
    assert set(sglang.ROUTER_FLAGS) <= {"--worker-urls", "--host", "--port", "--policy"}
    assert "sglang" in ENGINES


def test_capacity_export_is_the_simulated_deployment(capsys):
    assert main(["capacity", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--tp", "2",
                 "--replicas", "3", "--rate", "6", "--requests", "60", "--input", "500",
                 "--output", "16", "--max-model-len", "4096", "--max-num-seqs", "96",
                 "--max-num-batched-tokens", "4096", "--export", "sglang", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    servers, router = parse(d["export"])
    sch = d["scheduler"]
    assert len(servers) == d["layout"]["replicas"] == 3
    for i, a in enumerate(servers):
        assert a.model_path == "meta-llama/Llama-3.1-8B"
        assert (a.tp_size, a.pp_size) == (d["layout"]["tp"], d["layout"]["pp"]) == (2, 1)
        assert a.max_running_requests == sch["max_num_seqs"] == 96
        assert a.chunked_prefill_size == sch["max_num_batched_tokens"] == 4096
        assert a.page_size == sch["block_size"] == d["kv"]["block_size"]
        assert a.mem_fraction_static == pytest.approx(sch["memory_utilization"], abs=5e-4)
        assert a.context_length == d["kv"]["max_model_len"] == 4096
        assert (a.dtype, a.kv_cache_dtype, a.quantization) == ("bfloat16", "auto", None)
        assert a.port == 30000 + i and a.base_gpu_id == 2 * i  # GPUs 0-1, 2-3, 4-5
    assert router.policy == "round_robin"  # how the simulation deals requests
    assert router.worker_urls == [f"http://127.0.0.1:{30000 + i}" for i in range(3)]
    assert router.port not in {a.port for a in servers}


def test_one_replica_has_no_router_and_fp8_is_written():
    j = Job(model="llama-3.1-8b", mode="infer", engine="sglang", tp=4, gpus=4, batch=32,
            context=8192, infer_precision="fp8", kv_dtype="fp8")
    servers, router = parse(export_plan(j, "sglang"))
    assert router is None and len(servers) == 1
    a = servers[0]
    assert (a.tp_size, a.max_running_requests, a.context_length) == (4, 32, 8192)
    assert (a.quantization, a.kv_cache_dtype) == ("fp8", "fp8_e4m3")


def test_data_parallel_is_replicas_across_nodes():
    # dp 4 of TP 4 on 8-GPU nodes: two replicas a node
    j = Job(model="llama-3.1-8b", mode="infer", engine="sglang", tp=4, gpus=16, batch=8)
    servers, router = parse(export_plan(j, "sglang"))
    assert [a.base_gpu_id for a in servers] == [0, 4, 0, 4]
    assert len(router.worker_urls) == 4 and router.worker_urls[2].startswith("http://node1:")


@pytest.mark.parametrize("kw,field", [
    (dict(mode="train"), "mode"),
    (dict(mode="infer", runtime="eager"), "runtime"),
    (dict(mode="infer", tp=8, pp=2, gpus=16, gpus_per_node=8), "tp"),
])
def test_what_sglang_cannot_launch_is_refused_in_one_line(kw, field):
    with pytest.raises(InputError) as e:
        export_plan(Job(model="llama-3.1-8b", **kw), "sglang")
    assert e.value.field == field and "\n" not in str(e.value)
    assert str(e.value).startswith("export sglang:")


def test_fits_export_states_the_fraction_fits_kv_budget_used(capsys):
    """One truth (onetruth43): `fit --engine sglang` sizes the KV cache at SGLang 0.5's
    mem_fraction_static for the card (0.834 on an H100-SXM-80GB: memory/budget.py), but
    `fit --export sglang` wrote 0.88 (0.4's TP-1 default), so the launched server held another
    cache than the plan. The export now writes the plan's fraction: the user's, else the card's
    default when one --gpu is named, else none (SGLang then computes its own per card)."""
    base = ["fit", "qwen3-30b-a3b", "--mode", "infer", "--engine", "sglang"]
    for gpu, extra in (("H100-SXM-80GB", []), ("A100-SXM-40GB", []),
                       ("H100-SXM-80GB", ["--mem-fraction-static", "0.8"]),
                       ("H100-SXM-80GB", ["--engine-version", "0.4"])):
        assert main([*base, "--gpu", gpu, *extra, "--json"]) == 0
        eng = json.loads(capsys.readouterr().out)["infer"]["engine"]
        planned = eng["fraction"]
        assert main([*base, "--gpu", gpu, *extra, "--export", "sglang"]) == 0
        (a,), _ = parse(capsys.readouterr().out)
        assert a.mem_fraction_static == pytest.approx(planned), (gpu, extra)
        # the card's chunk too (4096 on a 40 GB A100, where 8192 was written)
        assert a.chunked_prefill_size == eng["max_num_batched_tokens"], (gpu, extra)
    assert main([*base, "--gpu", "H100-SXM-80GB", "--gpu", "A100-SXM-40GB", "--export",
                 "sglang"]) == 0  # two cards, two defaults: SGLang's own on each
    (a,), _ = parse(capsys.readouterr().out)
    assert a.mem_fraction_static is None
