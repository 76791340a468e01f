"""The engine is part of the job (issue 27, part 1): one profile per engine, read by every
command; auto is transformers and moves no number; a named engine resolves what the job leaves
to it and refuses what it cannot run, in one line with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.engines.profiles import AUTO_ENGINE, ENGINES, engine_notes, runtime_of
from gpuplan.errors import InputError
from gpuplan.job import Job, check_layout
from gpuplan.models import load_model

PAGE = Path(__file__).resolve().parents[2] / "docs" / "engines.md"


def render_page() -> str:
    """docs/engines.md from the profiles (the page is held to this)."""
    out = ["# Engines: who runs the job", "",
           "The profiles of `src/gpuplan/engines/profiles.py`, as data: what `--engine NAME` "
           f"means in every command. `auto` is `{AUTO_ENGINE}` in both modes. "
           "`tests/unit/test_engines.py` holds this page to the table (`write_page()` there "
           "rewrites it).", "",
           "| engine | runs | runtime (auto) | model code | ZeRO | stages | fused Adam | "
           "parallel | pipeline | serving budget | export |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in ENGINES.values():
        rt = ", ".join(f"{m}: {r}" for m, r in p.runtime.items())
        pipe = (", ".join(p.pp_schedules) + f"; {p.pp_split} split; embedding/loss parts "
                f"{p.pp_parts}") if "pp" in p.parallel else "-"
        budget = "-" if p.memory_utilization is None else (
            f"{p.memory_utilization:.2f} of HBM" + (" + CUDA-graph pool" if p.cuda_graph_pool
                                                     else ""))
        out.append(f"| `{p.name}` | {', '.join(p.modes)} | {rt} | {p.model_code} | {p.sharding} "
                   f"| {', '.join(map(str, p.zero_stages))} | "
                   f"{'yes' if p.fused_optimizer else 'no'} | "
                   f"{' '.join(sorted(p.parallel)) or 'data parallel'} | {pipe} | {budget} | "
                   f"{p.export or '-'} |")
    out.append("")
    for p in ENGINES.values():
        out += [f"## `{p.name}`: {p.title}", "", f"- kernels: {p.kernels}"]
        out += [f"- overlap: {p.overlap}"] if p.overlap else []
        out += [f"- host cost per launch: {p.host_issue}'s (`host_issue`; the kernels stay "
                "the runtime's)"] if p.host_issue else []
        out += ["- backward launches: from Python, at the forward's host cost per kernel "
                "(`python_backward`)"] if p.python_backward else []
        out += [f"- source: {s}" for s in p.sources] + [""]
    return "\n".join(out)


def write_page() -> None:
    PAGE.write_text(render_page())


def test_the_page_is_the_table():
    assert PAGE.read_text() == render_page(), "docs/engines.md is stale: run write_page()"


def test_auto_is_transformers_and_its_defaults_are_the_old_ones():
    job = Job(model="gpt2")
    assert job.engine == "auto" and job.engine_profile.name == AUTO_ENGINE == "transformers"
    assert (job.model_code, job.sharding, job.fused_optimizer) == ("transformers", "deepspeed",
                                                                   False)
    assert runtime_of(job.runtime, "train", job.engine) == "eager"
    assert runtime_of(job.runtime, "infer", job.engine) == "eager"


def test_a_named_engine_resolves_what_the_job_leaves():
    mt = Job(model="gpt2", mode="train", engine="megatron")
    assert runtime_of(mt.runtime, "train", mt.engine) == "compile" and mt.fused_optimizer
    tt = Job(model="gpt2", mode="train", engine="torchtitan", tp=2, pp=2, gpus=4)
    assert tt.sharding == "fsdp2" and tt.pp_embedding_part and tt.pp_loss_part
    assert Job(model="gpt2", mode="train", engine="torchtune").model_code == "torchtune"
    # a new engine takes its own refinements unless they are changed too
    back = tt.with_(engine="transformers", pp=1, tp=1, gpus=1, pp_embedding_part=False,
                    pp_loss_part=False)
    assert (back.sharding, back.fused_optimizer) == ("deepspeed", False)
    assert runtime_of("auto", "infer", "vllm") == "cudagraphs"


def test_fsdp2_runs_fms_model_code_and_other_engines_refuse_it():
    # FSDP2 wraps any model: IBM's fms-fsdp trains FMS's Llama under torch FSDP; DeepSpeed's
    # engine runs transformers' code only, and the fix names the engine that runs FMS's
    assert Job(model="gpt2", mode="train", engine="fsdp2", model_code="fms").model_code == "fms"
    with pytest.raises(InputError, match="fsdp2") as e:
        Job(model="gpt2", mode="train", engine="deepspeed", model_code="fms")
    assert e.value.fix == {"model_code": "transformers"}
    with pytest.raises(InputError):
        Job(model="gpt2", mode="train", engine="fsdp2", model_code="torchtune")


@pytest.mark.parametrize("kw, needle", [
    (dict(engine="vllm", mode="train"), "engine vllm does not train"),
    (dict(engine="megatron", mode="train", zero=3), "zero 3 under engine megatron"),
    (dict(engine="transformers", mode="train", pp=2, gpus=2), "pp 2 under engine transformers"),
    (dict(engine="deepspeed", mode="train", sharding="fsdp2", zero=3), "sharding fsdp2 under"),
    (dict(engine="megatron", mode="train", runtime="eager"), "runtime eager under engine megatron"),
    (dict(engine="vlm"), "did you mean 'vllm'"),
])
def test_an_engine_refuses_what_it_cannot_run(kw, needle):
    with pytest.raises(InputError, match=needle) as e:
        Job(model="gpt2", **kw)
    assert "\n" not in str(e.value) and "--" not in str(e.value)


def test_megatron_splits_layers_evenly():
    """Llama 3.1 405B: 126 layers over 16 stages x 4 chunks = 64 parts: 126 / 64 is not whole,
    (126 + the embedding + the loss) / 64 = 2 is (Megatron's account-for flags)."""
    arch = load_model("llama-3.1-405b").architecture
    assert arch.num_layers == 126
    kw = dict(model="llama-3.1-405b", mode="train", engine="megatron", tp=8, pp=16,
              pp_schedule="interleaved:4", gpus=128, seq=8192)
    with pytest.raises(InputError, match="126 layers are 126 parts' worth, not divisible by 64"):
        check_layout(arch, Job(**kw))
    check_layout(arch, Job(**kw, pp_embedding_part=True, pp_loss_part=True))  # 128 / 64
    check_layout(arch, Job(**{**kw, "engine": "torchtitan"}))  # uneven splits are taken


def test_auto_names_the_engines_that_run_a_layout():
    notes = engine_notes(Job(model="gpt2", mode="train", pp=2, gpus=2), "train")
    assert notes[0].startswith("engine auto = transformers")
    assert "engines that run it: deepspeed, torchtitan, megatron" in notes[1]


def test_every_command_states_the_engine(cli):
    code, out, _ = cli("speed", "llama-3.1-8b", "--gpu", "h100", "--engine", "megatron",
                       "--json")
    assert code == 0
    d = json.loads(out)
    assert d["engine"]["name"] == "megatron" and d["runtime"] == "compile"
    code, out, _ = cli("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--json")
    d = json.loads(out)
    assert code == 0 and d["job"]["mode"] == "infer" and d["job"]["engine"] == "vllm"


def test_an_export_names_the_engine_planned(cli):
    code, _, err = cli("fit", "gpt2", "--engine", "megatron", "--export", "deepspeed",
                       "--no-speed")
    assert code == 2 and "--export deepspeed under --engine megatron" in err
