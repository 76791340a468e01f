"""`gpuplan fit` end to end: the JSON contract, the table, and one-line errors with exit 2."""

from __future__ import annotations

import json

import pytest

from gpuplan.job import Job


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)


GB = 10**9




def test_seed_example_json_contract(capsys, cli):
    code, out, err = cli("fit", "--params", "7B", "--json", "--gpu", "H100-SXM-80GB")
    assert code == 0, err
    d = json.loads(out)
    # the contract of issue 2 (README "JSON output")
    assert isinstance(d["model"]["name"], str) and d["model"]["params"] == 7 * GB
    assert d["train"]["precision"] == "mixed-bf16" and d["train"]["optimizer"] == "adamw"
    tr = d["train"]["per_gpu"]
    for k in ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
              "activations_bytes", "overhead_bytes", "total_bytes"):
        assert isinstance(tr[k], int), k
    assert (tr["weights_bytes"], tr["gradients_bytes"], tr["master_weights_bytes"],
            tr["optimizer_bytes"]) == (14 * GB, 14 * GB, 28 * GB, 56 * GB)
    assert d["infer"]["precision"] == "bf16"
    inf = d["infer"]["per_gpu"]
    for k in ("weights_bytes", "kv_cache_bytes", "activations_bytes", "overhead_bytes",
              "total_bytes"):
        assert isinstance(inf[k], int), k
    assert inf["weights_bytes"] == 14 * GB
    g = d["gpus"][0]
    assert g["name"] == "H100-SXM-80GB" and isinstance(g["usable_bytes"], int)
    assert g["train_fits"] is False and g["infer_fits"] is True
    assert d["train_to_infer_ratio"] == 8.0


def test_seed_example_table(capsys, cli):
    code, out, _ = cli("fit", "--params", "7B", "--gpu", "H100-SXM-80GB")
    assert code == 0
    for text in ("14.0 GB", "28.0 GB", "56.0 GB", "112.0 GB", "8.0x"):
        assert text in out
    assert "activations" in out and "architecture unknown" in out


def test_units_gib(capsys, cli):
    code, out, _ = cli("fit", "--params", "7B", "--units", "GiB", "--gpu", "h100")
    assert code == 0
    assert f"{112e9 / 2**30:.1f} GiB" in out            # 104.3 GiB
    assert "alias of H100-SXM-80GB" in out


def test_infer_mode_precision_is_the_weight_format(capsys, cli):
    code, out, _ = cli("fit", "--params", "7B", "--mode", "infer", "--precision", "q4_0",
                       "--json")
    d = json.loads(out)
    assert code == 0 and "train" not in d
    assert d["infer"]["per_gpu"]["weights_bytes"] == 7 * GB * 18 // 32


@pytest.mark.parametrize("argv,needle", [
    (["fit", "--params", "-3"], "'-3'"),
    (["fit", "--params", "0"], "'0'"),
    (["fit", "--params", "nan"], "'nan'"),
    (["fit", "--params", "1e30"], "'1e30'"),
    (["fit", "--params", "7Q"], "'7Q'"),
    (["fit", "--params", "7B", "--gpu", "H100-SXM"], "H100-SXM-80GB"),
    (["fit", "--params", "7B", "--precision", "fp64"], "fp64"),
    (["fit", "--params", "7B", "--optimizer", "adamm"], "adam"),
    (["fit", "--params", "7B", "--zero", "5"], "--zero"),
    (["fit", "--params", "7B", "--gpus", "0"], "--gpus"),
    (["fit", "--params", "7B", "--batch", "x"], "--batch"),
    (["fit", "gpt2", "--params", "7B"], "not both"),
    (["fit", "--params", "7B", "--bogus"], "--bogus"),
    (["fit", "gpt2", "--batch", "0"], "--batch"),
    (["fit", "gpt2", "--seq", "-1"], "--seq"),
    (["fit", "gpt2", "--seq", "4096"], "at most 1024"),
    # GPT-2's learned table (n_positions 1024); a rotary model's context past it is planned
    (["fit", "gpt2", "--mode", "infer", "--context", "2048"], "at most 1024"),
    (["fit", "gpt2", "--checkpointing", "fulll"], "'full'"),
    (["fit", "gpt2", "--attention", "flashy"], "eager, sdpa"),
    (["fit", "gpt2", "--cuda-context", "lots"], "--cuda-context"),
    (["fit", "gpt2", "--fragmentation", "2"], "--fragmentation"),
    (["fit", "gpt2", "--plot", "/nonexistent-dir/x.png"], "does not exist"),
    (["fit", "gpt2", "--plot", "out.svg"], ".png"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle, cli):
    code, out, err = cli(*argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err


# ---- activations, KV cache, overhead, suggestions, direct queries, plot (issue 3) -------------

def test_fit_fills_activations_kv_and_overhead(capsys, cli):
    code, out, err = cli("fit", "llama-3.1-8b", "--batch", "2", "--seq", "2048",
                         "--checkpointing", "selective", "--attention", "eager", "--json",
                         "--gpu", "H200-SXM-141GB")
    assert code == 0, err
    d = json.loads(out)
    assert d["train"]["activations_known"] is True
    assert d["train"]["peak_phase"] in ("forward", "backward", "optimizer")
    assert set(d["train"]["phases"]) == {"forward", "backward", "optimizer"}
    assert d["train"]["per_gpu"]["overhead_bytes"] > 0
    # KV cache of 2 sequences x 2048 tokens: 2 x 32 layers x 8 KV heads x 128 x 2 bytes a token
    assert d["infer"]["per_gpu"]["kv_cache_bytes"] == 2 * 32 * 8 * 128 * 2 * 2048 * 2
    assert d["infer"]["peak_phase"] in ("prefill", "decode")
    assert "suggestions" in d and isinstance(d["suggestions"], list)


def test_suggestions_when_a_named_gpu_does_not_fit(capsys, cli):
    code, out, err = cli("fit", "llama-3.1-8b", "--mode", "train", "--gpu", "RTX-4090",
                         "--batch", "2", "--seq", "1024", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["gpus"][0]["train_fits"] is False
    assert d["suggestions"], d.get("solver")
    for s in d["suggestions"]:
        assert s["fits"] and s["peak_bytes"] <= s["usable_bytes"]
        assert s["changes"] and all(c["cost"] for c in s["changes"])
    # and the table says it too
    code, out, err = cli("fit", "llama-3.1-8b", "--mode", "train", "--gpu", "RTX-4090",
                         "--batch", "2", "--seq", "1024")
    assert code == 0 and "What to change (train, RTX-4090)" in out


def test_max_batch_and_max_seq(capsys, cli):
    code, out, err = cli("fit", "gpt2", "--gpu", "T4", "--max-batch", "--max-seq",
                         "--seq", "512", "--json")
    assert code == 0, err
    g = json.loads(out)["gpus"][0]
    for k in ("train_max_batch", "infer_max_batch", "train_max_seq", "infer_max_seq"):
        assert isinstance(g[k], int) and g[k] >= 1, k
    assert g["infer_max_seq"] == 1024  # gpt2's position limit binds before memory


def test_cuda_context_override_on_the_command_line(capsys, cli):
    _, out, _ = cli("fit", "gpt2", "--mode", "infer", "--gpu", "T4", "--json")
    _, out2, _ = cli("fit", "gpt2", "--mode", "infer", "--gpu", "T4", "--json",
                     "--cuda-context", "1GB")
    a, b = json.loads(out)["infer"], json.loads(out2)["infer"]
    ctx = next(i for i in a["overhead"]["items"] if i["name"] == "CUDA context")
    assert b["per_gpu"]["overhead_bytes"] - a["per_gpu"]["overhead_bytes"] == \
        10**9 - ctx["expected_bytes"]


def test_plot_is_written_atomically(capsys, tmp_path, cli):
    pytest.importorskip("matplotlib")
    path = tmp_path / "fit.png"
    code, out, err = cli("fit", "gpt2", "--gpu", "T4", "--gpu", "RTX-4090",
                         "--plot", str(path))
    assert code == 0, err
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["fit.png"]  # no temporary left behind




def test_no_model_plans_the_seed_example(capsys, cli):
    # The README's quick start: `gpuplan fit` on the built-in defaults is the seed's 7B case.
    code, out, err = cli("fit", "--gpu", "H100-SXM-80GB")
    assert code == 0, err
    assert "source document's example" in out
    for text in ("14.0 GB", "28.0 GB", "56.0 GB", "112.0 GB", "8.0x"):
        assert text in out


def test_fit_json_has_a_speed_section_per_gpu(capsys, cli):
    from gpuplan.compute import estimate_speed
    from gpuplan.hardware import get_gpu
    from gpuplan.models import load_model

    code, out, err = cli("fit", "gpt2", "--gpu", "H100-SXM-80GB", "--gpu", "T4",
                         "--batch", "4", "--seq", "512", "--json")
    assert code == 0, err
    sec = json.loads(out)["speed"]
    rows = {r["gpu"]: r for r in sec["gpus"]}
    # the same estimate the speed model gives for this job, computed here independently
    e = estimate_speed(load_model("gpt2"), get_gpu("H100-SXM-80GB"),
                       J(mode="train", batch=4, seq=512, precision="mixed-bf16"), measured=None)
    h = rows["H100-SXM-80GB"]["train"]
    assert h["flops_per_step"] == e.flops_per_step
    for k in ("model_flops_per_token", "step_time_s", "tokens_per_s", "mfu", "bound"):
        assert k in h
    # T4 has no bf16: the row says so instead of sinking the plan
    assert "bf16" in rows["T4"]["error"] and "fp16" in rows["T4"]["error"]


def test_fit_no_speed_leaves_the_section_out(capsys, cli):
    code, out, _ = cli("fit", "--params", "7B", "--json", "--no-speed")
    assert code == 0 and "speed" not in json.loads(out)


def test_fit_trace_side_by_side(capsys, cli):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    code, out, err = cli("fit", "gpt2", "--gpu", "H100-SXM-80GB", "--batch", "2",
                         "--seq", "128", "--trace", "--json", "--no-speed")
    assert code == 0, err
    d = json.loads(out)
    by_mode = {c["mode"]: c for c in d["trace"]}
    for mode in ("train", "infer"):
        c = by_mode[mode]
        a, t = c["analytic"]["total_bytes"], c["traced"]["total_bytes"]
        # the analytic total is the plan's minus its runtime overhead (a trace has none)
        plan = d[mode]["per_gpu"]
        assert a == plan["total_bytes"] - plan["overhead_bytes"]
        assert c["difference_percent"]["total_bytes"] == pytest.approx(100 * (a - t) / t)
        assert abs(a - t) <= 0.05 * t   # the two independent answers agree within 5%


def test_fit_trace_says_what_it_cannot_trace(capsys, cli):
    code, out, err = cli("fit", "gpt2", "--gpu", "H100-SXM-80GB", "--mode", "infer",
                         "--precision", "q4_0", "--trace", "--no-speed")
    assert code == 0, err
    assert "not traced: the q4_0 weight format is not traced" in out


@pytest.mark.parametrize("argv", [
    ("fit", "gpt2"), ("speed", "gpt2", "--gpu", "H100"),
    ("cluster", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--seq", "2048",
     "--global-batch", "64")])
def test_plot_names_its_format_before_any_work(cli, tmp_path, argv):
    """A chart is a PNG: --plot x.txt is one line naming the value and the fix, exit 2, and no
    file is written (it once wrote a PNG into x.txt)."""
    target = tmp_path / "chart.txt"
    rc, out, err = cli(*argv, "--plot", str(target))
    assert rc == 2 and err.count("\n") == 1 and "ending in .png" in err and str(target) in err
    assert not target.exists()
