"""Errors are data (issue 27, part 4c): a library message names options with
:func:`gpuplan.errors.opt`, never in the command line's spelling, and each front end renders it:
the CLI ``--grad-accum``, the web the JSON key ``grad_accum`` (with ``field``/``fix`` as data), the
library ``str(e)`` the field name.

(a) scans every string inside a ``raise ...Error(...)`` and inside a ``*_fix`` / ``refuse``
helper in ``src/gpuplan`` (outside ``cli/``) for ``--option`` text; the allowlist names each
exception and why. (b) drives a few bad inputs through the three front ends.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpuplan.errors import InputError, opt
from gpuplan.export import export_plan
from gpuplan.hardware.topology import parse_inter_node
from gpuplan.job import Job

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuplan"
#: an option spelled out, or an f-string part that ends in ``--`` before a field's name
#: (``f"use --{name}"``)
_FLAG = re.compile(r"--[a-z]|--$")

_EXTERNAL = "another tool's own flag, not a gpuplan option"
_COMMAND = "a command to type (or the feature a MissingDependencyError names), not a field"
_NOTE = ("_NoEstimate is not an InputError (its text becomes a report note, no front end renders "
         "it); it names the library keyword and the flag side by side (plan_model is --model)")

#: (file under src/gpuplan, substring of the string constant, reason)
ALLOWED: tuple[tuple[str, str, str], ...] = (
    ("export/megatron.py", "(--bf16 and --fp16", "Megatron-LM's " + _EXTERNAL),
    ("export/megatron.py", "(--swiglu)", "Megatron-LM's " + _EXTERNAL),
    ("export/vllm.py", "--enforce-eager", "vLLM's " + _EXTERNAL),
    ("compute/measured.py", "`gpuplan bench --history`", _COMMAND),
    ("measure/store.py", "`gpuplan bench --history`", _COMMAND),
    ("trace/distributed.py", "gpuplan trace --", _COMMAND),
    ("report/bench.py", "--plot", _COMMAND),
    ("report/speed.py", "--plot", _COMMAND),
    ("report/trace.py", "--plot", _COMMAND),
    ("report/profile.py", "--plot", _COMMAND),
    ("report/fit_plot.py", "gpuplan fit --plot", _COMMAND),
    ("report/cluster.py", "gpuplan cluster --plot", _COMMAND),
    ("report/capacity.py", "gpuplan capacity --plot", _COMMAND),
    ("measure/profile/estimate.py", "(--", _NOTE),
)


def _strings(node: ast.AST):
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def _error_strings(tree: ast.AST):
    """The string constants (f-string parts too) of every raise and every fix/refuse helper."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Raise) and n.exc is not None:
            yield from _strings(n.exc)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                n.name.endswith("_fix") or n.name.endswith("refuse")):
            yield from _strings(n)


def test_no_library_message_spells_a_command_line_option():
    found, used = [], set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("cli/"):
            continue
        for text in set(_error_strings(ast.parse(path.read_text(encoding="utf-8")))):
            if not _FLAG.search(text):
                continue
            hits = [a for a in ALLOWED if a[0] == rel and a[1] in text]
            used.update(hits)
            if not hits:
                found.append(f"{rel}: {text!r}")
    assert not found, "name options with opt('field'), not '--flag':\n" + "\n".join(found)
    assert not set(ALLOWED) - used, f"allowlist entries that match nothing: {set(ALLOWED) - used}"


def test_the_scan_sees_a_flag_in_a_raise_and_in_a_fix_helper():
    """The scan itself can fail: a raise or a *_fix helper spelling ``--tp`` is caught."""
    code = ("def f():\n    raise InputError(f'tp {1}: use --tp 2')\n"
            "def tp_fix():\n    return '--pp 2'\n"
            "def h(name):\n    raise InputError(f'{name} 0: use --{name} 1')\n"
            "def g():\n    return '--ok outside an error'\n")
    hits = [t for t in _error_strings(ast.parse(code)) if _FLAG.search(t)]
    assert sorted(hits) == [" 0: use --", "--pp 2", ": use --tp 2"]


# --- (b) the three front ends -------------------------------------------------------------------

@pytest.fixture
def web_client(tmp_path, monkeypatch):
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from gpuplan.web import create_app

    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))
    with TestClient(create_app(allowed_hosts=["testserver"]),
                    raise_server_exceptions=False) as c:
        yield c


def test_a_layout_error_in_each_spelling(cli, web_client):
    # 32 heads (Llama 3.1 8B's config.json: num_attention_heads 32) do not split over tp 3
    rc, _, err = cli("fit", "llama-3.1-8b", "--gpu", "h100", "--tp", "3", "--gpus", "3")
    assert rc == 2
    assert err.startswith("gpuplan: error: --tp 3: llama-3.1-8b has 32 attention heads")
    assert "use --tp 1 (or 2 or 4 with --gpus a multiple of it)" in err

    r = web_client.post("/api/fit", json={"model": "llama-3.1-8b", "gpu": "h100", "tp": 3,
                                          "gpus": 3})
    assert r.status_code == 422
    body = r.json()
    assert body["error"].startswith("tp 3: llama-3.1-8b has 32 attention heads")
    assert "use tp 1 (or 2 or 4 with gpus a multiple of it)" in body["error"]
    assert "--" not in body["error"]
    assert body["field"] == "tp" and body["value"] == 3

    from gpuplan.parallel import check_layout
    from gpuplan.models import load_model

    with pytest.raises(InputError) as e:
        check_layout(load_model("llama-3.1-8b").architecture, Job(model="llama-3.1-8b", tp=3,
                                                                  gpus=3))
    assert str(e.value).startswith("tp 3: llama-3.1-8b has 32 attention heads")
    assert "--" not in str(e.value) and e.value.field == "tp"


def test_an_export_refusal_names_the_flag_and_carries_the_fix(cli):
    rc, _, err = cli("fit", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--tp", "2",
                     "--zero", "3", "--export", "deepspeed")
    assert rc == 2
    assert err.strip() == ("gpuplan: error: --export deepspeed: --tp 2 with --zero 3: DeepSpeed's "
                           "AutoTP training runs with ZeRO stages 0-2; use --zero 2 or --export "
                           "megatron")
    with pytest.raises(InputError) as e:
        export_plan(Job(model="llama-3.1-8b", gpus=2, tp=2, zero=3), "deepspeed")
    assert str(e.value) == ("export deepspeed: tp 2 with zero 3: DeepSpeed's AutoTP training runs "
                            "with ZeRO stages 0-2; use zero 2 or export megatron")
    assert e.value.to_dict()["fix"] == {"zero": 2} and e.value.field == "zero"


def test_a_mode_refusal_offers_the_mode_that_works(cli):
    rc, _, err = cli("fit", "llama-3.1-8b", "--gpu", "h100", "--mode", "infer",
                     "--export", "fsdp")
    assert rc == 2
    assert "this plan has --mode infer; use --export vllm for serving, or --mode train" in err
    with pytest.raises(InputError) as e:
        export_plan(Job(model="llama-3.1-8b", mode="infer"), "fsdp")
    assert "this plan has mode infer; use export vllm for serving, or mode train" in str(e.value)
    assert e.value.fix == {"mode": "train"}


def test_a_network_link_in_each_spelling(cli, web_client):
    rc, _, err = cli("fit", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16",
                     "--inter-node", "bogus")
    assert rc == 2 and err.startswith("gpuplan: error: --inter-node 'bogus': expected ib-400")
    r = web_client.post("/api/fit", json={"model": "llama-3.1-8b", "gpu": "h100", "gpus": 16,
                                          "inter_node": "bogus"})
    assert r.status_code == 422
    body = r.json()
    assert body["error"].startswith("inter_node 'bogus': expected ib-400")
    assert body["field"] == "inter_node" and body["value"] == "bogus"
    with pytest.raises(InputError) as e:
        parse_inter_node("bogus")
    assert str(e.value).startswith("inter_node 'bogus': expected ib-400")


def test_a_plot_name_in_each_spelling(cli, tmp_path):
    rc, _, err = cli("fit", "llama-3.1-8b", "--gpu", "h100", "--plot", str(tmp_path / "x.txt"))
    assert rc == 2 and "error: --plot '" in err and "give a file name ending in .png" in err
    from gpuplan._io import check_plot

    with pytest.raises(InputError) as e:
        check_plot(tmp_path / "x.txt")
    assert str(e.value).startswith("plot '") and e.value.field == "plot"


def test_a_helper_handed_an_opt_label_carries_its_field():
    from gpuplan.units import parse_positive_int

    with pytest.raises(InputError) as e:
        parse_positive_int("x", what=opt("grad_accum"))
    assert str(e.value) == "grad_accum 'x': expected a whole number >= 1"
    assert e.value.field == "grad_accum" and e.value.value == "x"
    with pytest.raises(InputError) as e:
        parse_positive_int("x", what="batch size")  # words, not a field: no field
    assert e.value.field is None


def test_a_custom_gpu_spec_in_each_spelling(cli, web_client):
    # "fast" is no bandwidth: the custom spec's message names the gpu field, each front end its way
    spec = "custom:24GB,bw=fast"
    rc, _, err = cli("fit", "gpt2", "--gpu", spec)
    assert rc == 2 and err.startswith(f"gpuplan: error: --gpu {spec!r}: bw= 'fast': expected")
    r = web_client.post("/api/fit", json={"model": "gpt2", "gpu": [spec]})
    assert r.status_code == 422 and r.json()["error"].startswith(f"gpu {spec!r}: bw= 'fast'")
    from gpuplan.hardware import parse_custom_gpu

    with pytest.raises(InputError) as e:
        parse_custom_gpu("custom:24GB,bw=1TB/s,bw=2TB/s")
    assert str(e.value) == "gpu 'custom:24GB,bw=1TB/s,bw=2TB/s': bw= is given twice; give it once"
    assert e.value.field == "gpu" and e.value.value == "custom:24GB,bw=1TB/s,bw=2TB/s"


def test_a_missing_peak_offers_a_recorded_dtype_as_data():
    # the catalog's A100 records bf16 but no fp8 (NVIDIA's A100 datasheet: no FP8 tensor cores)
    from gpuplan.hardware import get_gpu

    with pytest.raises(InputError) as e:
        get_gpu("a100").peak("fp8")
    assert str(e.value).endswith("; use dtype bf16") and "--" not in str(e.value)
    assert e.value.field == "dtype" and e.value.fix == {"dtype": "bf16"}


def test_a_message_that_starts_with_a_word_like_a_field_is_printed_as_written(cli):
    # "context parallelism ..." is not the option --context: the CLI renders opt() markers only
    # (a rewrite by the message's first word printed "--context parallelism for serving")
    rc, _, err = cli("fit", "llama-3.1-8b", "--mode", "infer", "--gpu", "h100", "--cp", "2",
                     "--gpus", "2")
    assert rc == 2
    assert err.strip() == ("gpuplan: error: context parallelism for serving is not modeled; "
                           "plan serving with --tp and --pp")


def test_a_sequence_past_the_positions_in_each_spelling(cli, web_client):
    # GPT-2's config.json: n_positions 1024
    rc, _, err = cli("fit", "gpt2", "--seq", "4096")
    assert rc == 2 and err.strip().startswith("gpuplan: error: --seq 4096: gpt2 supports at most "
                                              "1024 positions")
    assert err.strip().endswith("use --seq 1024 or less")
    r = web_client.post("/api/fit", json={"model": "gpt2", "seq": 4096})
    body = r.json()
    assert r.status_code == 422 and body["error"].endswith("use seq 1024 or less")
    assert body["field"] == "seq" and body["fix"] == {"seq": 1024}
