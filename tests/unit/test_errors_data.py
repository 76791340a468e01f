"""Errors are data (issue 27, part 4c): an InputError carries the field, the value, what is
accepted and the fix; its message names fields with ``opt`` markers that each front end spells
its own way: the library by the field's name, the CLI by its option, the web by its JSON key."""

from __future__ import annotations

from gpuplan.cli._job_options import cli_spelling
from gpuplan.errors import InputError, opt


def _error() -> InputError:
    return InputError(f"{opt('grad_accum')} 0: expected a whole number >= 1; use "
                      f"{opt('grad_accum')} 1 or {opt('global_batch')} 8",
                      field="grad_accum", value=0, accepted="a whole number >= 1",
                      fix={"grad_accum": 1})


def test_library_spelling_is_the_field_name():
    e = _error()
    assert str(e) == "grad_accum 0: expected a whole number >= 1; use grad_accum 1 or global_batch 8"
    assert "--" not in str(e) and "\x1f" not in str(e)


def test_the_cli_names_options_and_the_web_keys():
    e = _error()
    assert e.render(cli_spelling) == ("--grad-accum 0: expected a whole number >= 1; use "
                                      "--grad-accum 1 or --global-batch 8")
    d = e.to_dict()
    assert d == {"error": str(e), "field": "grad_accum", "value": 0,
                 "accepted": "a whole number >= 1", "fix": {"grad_accum": 1}}
    assert e.to_dict(cli_spelling)["fix"] == {"--grad-accum": 1}


def test_cli_prints_the_option_spelling(cli):
    code, out, err = cli("fit", "gpt2", "--engine", "megatron", "--zero", "3", "--no-speed")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("gpuplan: error: --zero 3 under --engine megatron: it runs ZeRO stage 0, 1")


def test_web_error_is_data():
    from starlette.testclient import TestClient
    from gpuplan.web import create_app

    client = TestClient(create_app(allowed_hosts=["testserver"]))
    r = client.post("/api/fit", json={"model": "gpt2", "engine": "vlm"})
    assert r.status_code == 422
    body = r.json()
    assert body["error"].startswith("engine 'vlm': expected one of auto, transformers")
    assert "did you mean 'vllm'" in body["error"]
    assert set(body) <= {"error", "field", "value", "accepted", "fix"}
