"""Regressions found by trying the options that landed together (inference format ``auto``, the
pipeline edge stages, ETP, the MoE capacity factor, the FP8 switches, ``gpuplan capacity``) as a
new and as a hostile user would (qa37). Each test pins the exact line or the real value."""

from __future__ import annotations

import shlex

import pytest

from gpuplan.errors import InputError
from gpuplan.export import export_plan
from gpuplan.job import Job


# -- --fp8-attention (inference) under a serving export -------------------------------------
# vLLM's and SGLang's FP8 attention is the FlashAttention-3 path their FP8 KV cache selects
# (engines/profiles.FP8_ATTENTION, kv_selects=True): neither has a switch of its own, so the
# export used to drop --fp8-attention silently and print a bf16-cache command.

@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fp8_attention_with_a_16_bit_cache_is_refused_not_dropped(engine):
    job = Job(model="llama-3.1-8b", mode="infer", engine=engine, fp8_attention=True)
    with pytest.raises(InputError) as e:
        export_plan(job, engine)
    assert str(e.value) == (
        f"export {engine}: fp8_attention has no {engine} setting of its own: its FP8 attention "
        "is selected by the FP8 KV cache; give kv_dtype fp8 too, or drop fp8_attention")
    assert e.value.field == "fp8_attention" and e.value.fix == {"kv_dtype": "fp8"}


@pytest.mark.parametrize("engine,cache_flag,cache_value", [
    ("vllm", "--kv-cache-dtype", "fp8"), ("sglang", "--kv-cache-dtype", "fp8_e4m3")])
def test_fp8_attention_with_the_fp8_cache_is_expressed_by_the_cache(engine, cache_flag,
                                                                     cache_value):
    job = Job(model="llama-3.1-8b", mode="infer", engine=engine, fp8_attention=True,
              kv_dtype="fp8")
    args = shlex.split(export_plan(job, engine).splitlines()[0])
    assert args[args.index(cache_flag) + 1] == cache_value


# -- --first-last-layers-bf16 past half the blocks ------------------------------------------
# The speed model refused it; `gpuplan fit --no-speed` (the memory alone) planned it, clamping
# the narrow blocks to none, so the two commands disagreed on the same job. Qwen3-30B-A3B has 48
# blocks (its config.json num_hidden_layers): 2 x 24 = 48 leaves none narrow, 23 is the most.

@pytest.mark.parametrize("edge", [24, 30])
def test_memory_refuses_edge_layers_that_leave_no_block_narrow(edge):
    from gpuplan.memory import train_memory
    from gpuplan.models import load_model

    job = Job(model="qwen3-30b-a3b", mode="train", precision="fp8-delayed",
              first_last_layers_bf16=edge)
    with pytest.raises(InputError) as e:
        train_memory(load_model("qwen3-30b-a3b"), job)
    assert str(e.value) == (f"first_last_layers_bf16 {edge}: {2 * edge} of the model's 48 "
                            "blocks would be BF16, none narrow; give at most 23")
    assert e.value.fix == {"first_last_layers_bf16": 23}


def test_memory_and_speed_agree_on_the_largest_edge():
    from gpuplan.fit import plan

    job = Job(model="qwen3-30b-a3b", mode="train", precision="fp8-delayed",
              first_last_layers_bf16=23)
    p = plan(job, ["H100-SXM-80GB"], speed=True, suggest=False)  # both accept 23 of 48
    assert p.train is not None and p.speed is not None


# -- a second --gpu on a one-GPU command ----------------------------------------------------
# `gpuplan speed/cluster/capacity --gpu H100 --gpu A100` planned the A100 alone without a word
# (argparse keeps the last value), while POST /api/speed refuses a list.

@pytest.mark.parametrize("command", ["speed", "cluster", "capacity"])
def test_a_second_gpu_is_refused_not_replaced(command, capsys):
    from gpuplan.cli import main

    argv = [command, "llama-3.1-8b", "--mode", "infer", "--gpu", "H100-SXM-80GB",
            "--gpu", "A100-SXM-80GB", *(["--rate", "1"] if command == "capacity" else [])]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("gpuplan: error: --gpu given twice (H100-SXM-80GB, A100-SXM-80GB): this "
                       "command plans one GPU; run it once per GPU, or judge several with "
                       f"`gpuplan fit --gpu A --gpu B` (see `gpuplan {command} --help`)")


# -- infer_precision auto over a mixed GPU list ---------------------------------------------
# SGLang loads gpt-oss's MXFP4 on Hopper only. One format used to serve the list (bf16), so the
# H100 row of H100 + A100 said "does not fit" while `fit --gpu H100-SXM-80GB` alone said "fits".
# Now each GPU is planned in its own format (issue 28): the H100 row is the H100-alone plan.

def test_mixed_list_plans_each_gpu_in_its_own_format():
    from gpuplan.fit import plan

    job = Job(model="gpt-oss-120b", mode="infer", engine="sglang")
    mixed = plan(job, ["H100-SXM-80GB", "A100-SXM-80GB"], suggest=False)
    h100 = plan(job, ["H100-SXM-80GB"], suggest=False)
    a100 = plan(job, ["A100-SXM-80GB"], suggest=False)
    assert (h100.infer.precision, a100.infer.precision) == ("mxfp4", "bf16")
    rows = {g.name: g for g in mixed.gpus}
    for name, alone in (("H100-SXM-80GB", h100), ("A100-SXM-80GB", a100)):
        assert rows[name].infer_precision == alone.infer.precision
        assert rows[name].infer_total_bytes == alone.infer.total_bytes
        assert rows[name].infer_verdict == alone.gpus[0].infer_verdict
        assert rows[name].infer_headroom_bytes == alone.gpus[0].infer_headroom_bytes
    # the plan's own inference section stays the format every GPU of the list loads
    assert mixed.infer.precision == "bf16"
    assert dict(mixed.infer_by_precision) == {"bf16": a100.infer, "mxfp4": h100.infer}
    assert ("planned in bf16: engine sglang dequantizes the mxfp4 checkpoint to bf16 on "
            "A100-SXM-80GB; H100-SXM-80GB is planned in mxfp4, the format the checkpoint ships "
            "in, each GPU in its own format (give --infer-precision mxfp4 to plan the shipped "
            "format)") in mixed.notes
    # bf16 weights: 2 bytes a parameter of the 116.83B, more than an 80 GB card by itself
    assert a100.infer.total_bytes > 2 * 116_829_156_672 > h100.infer.total_bytes
    d = mixed.to_dict()
    assert [(g["name"], g["infer_precision"], g["infer_total_bytes"]) for g in d["gpus"]] == [
        ("H100-SXM-80GB", "mxfp4", h100.infer.total_bytes),
        ("A100-SXM-80GB", "bf16", a100.infer.total_bytes)]
    assert d["infer_by_precision"]["mxfp4"] == h100.infer.to_dict()


def test_mixed_list_table_shows_each_gpus_format(cli):
    rc, out, _ = cli("fit", "deepseek-v3", "--mode", "infer", "--engine", "vllm",
                     "--gpu", "H100-SXM-80GB", "--gpu", "A100-SXM-80GB")
    assert rc == 0 and "Inference: bf16" in out and "Inference: fp8-block" in out
    assert "infer format" in out
    # the Per GPU table's rows: GPU, memory, verdict, headroom, TP GPUs, infer format
    rows = {c[0]: c for line in out.splitlines()
            if len(c := [x.strip() for x in line.strip("│ ").split("│")]) == 6
            and c[2] in ("fits", "tight", "does not fit")}
    assert (rows["H100-SXM-80GB"][5], rows["A100-SXM-80GB"][5]) == ("fp8-block", "bf16")


def test_one_format_list_adds_no_format_column(cli):
    rc, out, _ = cli("fit", "llama-3.1-8b", "--mode", "infer",
                     "--gpu", "H100-SXM-80GB", "--gpu", "A100-SXM-80GB")
    assert rc == 0 and "Per GPU" in out and "infer format" not in out


def test_a_list_no_gpu_of_which_loads_it_keeps_the_short_note():
    from gpuplan.fit import plan

    p = plan(Job(model="gpt-oss-120b", mode="infer", engine="sglang"),
             ["A100-SXM-80GB", "MI300X"], suggest=False)
    assert ("planned in bf16: engine sglang dequantizes the mxfp4 checkpoint to bf16 on "
            "A100-SXM-80GB, MI300X (give --infer-precision mxfp4 to plan the shipped format)"
            ) in p.notes


# -- capacity --sweep at the top of the accepted load ----------------------------------------
# --rate 1e6 is accepted (<= 10^6), but the sweep's 1.25x point failed as "--rate 1250000.0: out
# of range", a value the user never gave. Now refused up front, naming the sweep.

def test_sweep_past_the_load_bound_names_the_sweep(capsys):
    from gpuplan.cli import main

    rc = main(["capacity", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--engine", "vllm",
               "--rate", "1e6", "--sweep"])
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "gpuplan: error: --sweep runs up to 2x the load: --rate 1e+06 would reach 2e+06, over "
        "the 10^6 accepted; give --rate 500000 or less, or drop --sweep")


def test_expert_parallel_serving_of_a_dense_model_is_refused():
    """--ep on a model without experts is one line in inference too (training refused it; a
    serving job of TP x PP 1 skipped the layout check and the vLLM export wrote
    --enable-expert-parallel for a dense Llama)."""
    import pytest

    from gpuplan.errors import InputError
    from gpuplan.job import Job
    from gpuplan.memory import infer_memory
    from gpuplan.models import load_model

    m = load_model("llama-3.1-8b")
    with pytest.raises(InputError, match=r"has no experts; drop"):
        infer_memory(m, Job(model=m, mode="infer", engine="vllm", ep=2, gpus=2))


def test_no_export_writes_expert_parallelism_for_a_dense_model():
    import pytest

    from gpuplan.errors import InputError
    from gpuplan.export import export_plan
    from gpuplan.job import Job

    for engine in ("vllm", "sglang"):
        job = Job(model="llama-3.1-8b", mode="infer", engine=engine, ep=2, gpus=2)
        with pytest.raises(InputError, match=r"has no experts; drop"):
            export_plan(job, engine)
