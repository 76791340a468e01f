"""The trace against oracles: a real CPU run of the same step, hand-computed parameter and
optimizer bytes, FLOP formulas, and the device paths (CUDA faked)."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuplan.errors import InputError, ModelFileError, UnsupportedError  # noqa: E402
from gpuplan.trace import trace_step  # noqa: E402

#: GPT-2 small's real config.json numbers (openai-community/gpt2).
GPT2_SMALL = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=12, n_embd=768,
                  n_head=12, vocab_size=50257, n_positions=1024)

TINY_LLAMA = dict(model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=2,
                  hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=256, vocab_size=1000)

BLOCK = 512


def rounded(nbytes: int) -> int:
    """The CUDA caching allocator's block rounding (kMinBlockSize = 512 bytes)."""
    return -(-nbytes // BLOCK) * BLOCK


def gpt2_param_shapes(n_layer=12, d=768, vocab=50257, positions=1024) -> list[tuple[int, ...]]:
    """GPT-2's parameter tensors, written out from the architecture (wte tied to the LM head)."""
    shapes = [(vocab, d), (positions, d)]
    for _ in range(n_layer):
        shapes += [(d,), (d,),                     # ln_1
                   (d, 3 * d), (3 * d,),           # attn.c_attn (Conv1D)
                   (d, d), (d,),                   # attn.c_proj
                   (d,), (d,),                     # ln_2
                   (d, 4 * d), (4 * d,),           # mlp.c_fc
                   (4 * d, d), (d,)]               # mlp.c_proj
    shapes += [(d,), (d,)]                         # ln_f
    return shapes


#: GPT-2 small's vocabulary, context and width per head, with 2 layers of width 128: the real CPU
#: run of full GPT-2 small takes about a minute on this 2-core machine, so the full-size
#: comparison lives in benchmarks/trace_real_check.py (recorded results).
GPT2_REDUCED = dict(GPT2_SMALL, n_layer=2, n_embd=128, n_head=2)

TINY_MIXTRAL = dict(model_type="mixtral", architectures=["MixtralForCausalLM"],
                    num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=256, vocab_size=1000,
                    num_local_experts=4, num_experts_per_tok=2)


@pytest.mark.parametrize("cfg,kw", [
    (GPT2_REDUCED, dict(batch=2, seq=256, precision="amp-bf16", optimizer="adamw")),
    (TINY_LLAMA, dict(batch=2, seq=64, precision="mixed-bf16", checkpointing="full",
                      attention="eager")),
    (TINY_MIXTRAL, dict(batch=2, seq=64, precision="amp-bf16", checkpointing="selective")),
    (TINY_LLAMA, dict(mode="infer", batch=2, seq=64, precision="bf16")),
], ids=["gpt2-amp-bf16", "llama-mixed-full-eager", "mixtral-selective", "llama-infer"])
def test_fake_trace_equals_real_cpu_run(cfg, kw):
    r = trace_step(cfg, real=True, **kw)
    m = r.measured
    assert m is not None and m.device == "cpu"
    assert abs(m.peak_bytes - r.total_bytes) <= 0.01 * r.total_bytes
    assert set(m.per_gpu) == set(r.per_gpu)
    for key, traced in r.per_gpu.items():
        measured = m.per_gpu[key]
        assert abs(measured - traced) <= 0.01 * max(traced, 1), key
    assert m.peak_phase == r.peak_phase
    for phase, traced in r.phase_peaks.items():  # the whole timeline, not just its top
        assert abs(m.phase_peaks[phase] - traced) <= 0.01 * traced, phase
    assert r.per_gpu["total_bytes"] == sum(v for k, v in r.per_gpu.items() if k != "total_bytes")


def test_parameter_and_adamw_bytes_are_exact():
    r = trace_step(GPT2_SMALL, batch=2, seq=256, precision="amp-bf16", optimizer="adamw")
    shapes = gpt2_param_shapes()
    n = sum(math.prod(s) for s in shapes)
    assert n == 124_439_808  # GPT-2 small's published parameter count
    assert r.params == n
    # amp-bf16 keeps fp32 parameters; the peak is the AdamW (foreach) step.
    assert r.peak_phase == "optimizer"
    params = sum(rounded(4 * math.prod(s)) for s in shapes)
    assert r.categories["parameters"] == params
    assert r.categories["buffers"] == 0  # transformers 5's GPT-2 keeps no causal-mask buffer
    # AdamW: exp_avg and exp_avg_sq in fp32 for every parameter; step counters live on the host.
    assert r.per_gpu["optimizer_bytes"] == 2 * params
    # foreach AdamW's step materializes a copy of exp_avg_sq (DESIGN.md): +4 B/param.
    assert r.categories["optimizer_temporaries"] == params
    # And against the accounting: 4 + 8 bytes per parameter, up to the 512-byte rounding.
    assert 0 <= r.per_gpu["weights_bytes"] - 4 * n < BLOCK * len(shapes)
    assert 0 <= r.per_gpu["optimizer_bytes"] - 8 * n < 2 * BLOCK * len(shapes)


def test_pure_bf16_keeps_bf16_optimizer_states():
    r = trace_step(TINY_LLAMA, batch=1, seq=16, precision="bf16")
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = {k: v for k, v in TINY_LLAMA.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        m = LlamaForCausalLM(LlamaConfig(**cfg))
    sizes = [p.numel() for p in m.parameters()]
    assert r.params == sum(sizes)
    # torch.optim.AdamW: exp_avg = zeros_like(param): bf16 like the parameters.
    assert r.per_gpu["optimizer_bytes"] == 2 * sum(rounded(2 * s) for s in sizes)


def _write_factory(tmp_path, body: str) -> str:
    f = tmp_path / "user_model.py"
    f.write_text(body)
    return f"{f}:make"


def test_linear_flops_match_2mkn_and_4mkn(tmp_path):
    m_, k_, n_ = 64, 96, 160
    spec = _write_factory(tmp_path, f"""
import torch
def make():
    model = torch.nn.Linear({k_}, {n_}, bias=False)
    x = torch.randn({m_}, {k_}, requires_grad=True)
    return model, x
""")
    r = trace_step(spec, precision="fp32", optimizer="sgd")
    assert r.flops_forward == 2 * m_ * k_ * n_
    assert r.flops_backward == 4 * m_ * k_ * n_  # grad of the input and of the weight


def test_a_factory_that_exits_is_one_line_not_its_exit_status(tmp_path):
    # gpuplan's exit status is its own: a sys.exit in the user's file or factory is a failure
    spec = _write_factory(tmp_path, "import sys\ndef make():\n    sys.exit(7)\n")
    with pytest.raises(InputError, match=r"the factory raised SystemExit: it called sys.exit\(7\)"):
        trace_step(spec, precision="fp32", optimizer="sgd")
    spec = _write_factory(tmp_path, "import sys\nsys.exit(9)\n")
    with pytest.raises(ModelFileError, match=r"importing it failed: SystemExit"):
        trace_step(spec, precision="fp32", optimizer="sgd")


def test_the_factory_file_is_executed_once(tmp_path):
    # The user's own code runs knowingly, but once: resolving the spec imports the file.
    log = tmp_path / "imports.log"
    spec = _write_factory(tmp_path, f"""
import torch
with open({str(log)!r}, "a") as f:
    f.write("imported\\n")
def make():
    return torch.nn.Linear(4, 4), torch.randn(2, 4)
""")
    trace_step(spec, precision="fp32", optimizer="sgd")
    assert log.read_text().splitlines() == ["imported"]


def test_model_that_needs_values_fails_with_one_line(tmp_path):
    spec = _write_factory(tmp_path, """
import torch
class Picky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
    def forward(self, x):
        y = self.lin(x)
        return y[y > 0].sum()          # output shape depends on the values
def make():
    return Picky(), torch.randn(4, 8)
""")
    with pytest.raises(UnsupportedError) as e:
        trace_step(spec, precision="fp32")
    msg = str(e.value)
    assert "\n" not in msg
    assert "user_model.py:make" in msg and "aten." in msg


def test_a_failing_operator_is_named_in_one_line(tmp_path):
    spec = _write_factory(tmp_path, """
import torch
class Wrong(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3, 3))
    def forward(self, x):
        return (x @ self.w).sum()        # (4, 8) @ (3, 3): no GPU would run this either
def make():
    return Wrong(), torch.randn(4, 8)
""")
    with pytest.raises(UnsupportedError) as e:
        trace_step(spec, precision="fp32")
    msg = str(e.value)
    assert "\n" not in msg and "aten.mm" in msg and "user_model.py:make" in msg


def test_unknown_model_type_is_one_line_and_runs_no_code(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "my_secret_arch", "hidden_size": 8,
                               "auto_map": {"AutoModelForCausalLM": "evil.Model"}}))
    with pytest.raises(ModelFileError) as e:
        trace_step(str(cfg))
    assert "my_secret_arch" in str(e.value) and "trust_remote_code" in str(e.value)


def test_real_refuses_large_models(monkeypatch):
    import gpuplan.trace._run as run_mod

    monkeypatch.setattr(run_mod, "REAL_MAX_PARAMS", 10_000)
    with pytest.raises(UnsupportedError, match="limit"):
        trace_step(TINY_LLAMA, batch=1, seq=8, real=True)


def test_bad_names_fail_before_work():
    with pytest.raises(InputError, match="checkpointing"):
        trace_step(TINY_LLAMA, checkpointing="some")
    with pytest.raises(InputError, match="did you mean"):
        trace_step(TINY_LLAMA, optimizer="adamww")
    with pytest.raises(UnsupportedError, match="quantized"):
        trace_step(TINY_LLAMA, mode="infer", precision="nf4")
    with pytest.raises(InputError, match="batch"):
        trace_step(TINY_LLAMA, batch=0)


def test_kv_cache_is_2_layers_kvheads_headdim_bytes_per_token():
    b, s = 2, 48
    r = trace_step(TINY_LLAMA, mode="infer", batch=b, seq=s, precision="bf16")
    layers, kv_heads, head_dim = 2, 2, 128 // 4
    per_tensor = rounded(b * kv_heads * s * head_dim * 2)  # one layer's K (or V), bf16
    prefill = [p for p in r.timeline if p["phase"] == "prefill"]
    assert max(p["kv_cache"] for p in prefill) == 2 * layers * per_tensor
    assert r.flops_decode > 0 and r.flops_forward > r.flops_decode


def test_sdpa_keeps_no_s_by_s_matrix_but_eager_does():
    s = 256
    eager = trace_step(TINY_LLAMA, batch=1, seq=s, attention="eager", optimizer="sgd")
    sdpa = trace_step(TINY_LLAMA, batch=1, seq=s, attention="sdpa", optimizer="sgd")
    heads = 4
    # eager saves the fp32 probabilities (CUDA autocast runs softmax in fp32) and their bf16 copy
    # for the next matmul: at least heads*s*s*(4+2) bytes per layer more than SDPA's flash kernel.
    extra = eager.per_gpu["activations_bytes"] - sdpa.per_gpu["activations_bytes"]
    assert extra >= 2 * heads * s * s * 6 * 0.9
    em = {e.name: e for e in sdpa.emulations}
    assert "flash" in em["sdpa-cuda-backend"].detail


def test_checkpointing_lowers_activations():
    base = trace_step(TINY_LLAMA, batch=4, seq=128, attention="eager", optimizer="sgd")
    sel = trace_step(TINY_LLAMA, batch=4, seq=128, attention="eager", optimizer="sgd",
                     checkpointing="selective")
    full = trace_step(TINY_LLAMA, batch=4, seq=128, attention="eager", optimizer="sgd",
                      checkpointing="full")
    fwd = {r.checkpointing: r.phase_peaks["forward"] for r in (base, sel, full)}
    assert fwd["full"] < fwd["selective"] < fwd["none"]
    assert full.flops_backward > base.flops_backward  # recomputation is counted


# --------------------------------------------------------------------------------------------------
# --device cuda, with torch.cuda faked


class _FakeCuda:
    def __init__(self):
        self.resets = 0
        self.allocated = 987_654_321
        self.reserved = 1_234_567_890

    def install(self, monkeypatch):
        import gpuplan.trace._run as run_mod

        monkeypatch.setattr(run_mod, "CUDA_DEVICE", "cpu")  # the tensors stay on this CPU
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", self._reset)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a, **k: self.reserved)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA H100 80GB HBM3")

    def _reset(self, *a, **k):
        self.resets += 1


def test_cuda_device_reports_allocator_peaks_beside_the_trace(monkeypatch):
    fake = _FakeCuda()
    fake.install(monkeypatch)
    r = trace_step(TINY_LLAMA, batch=1, seq=16, device="cuda")
    m = r.measured
    assert m.device == "NVIDIA H100 80GB HBM3"
    assert m.peak_bytes == fake.allocated and m.reserved_bytes == fake.reserved
    assert m.ratio == pytest.approx(fake.allocated / r.total_bytes)
    assert fake.resets == 1  # peak statistics reset once, after the warm-up iteration
    d = r.to_dict()["measured"]
    assert d["peak_bytes"] == fake.allocated and d["reserved_bytes"] == fake.reserved


def test_cuda_device_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UnsupportedError, match="no CUDA GPU"):
        trace_step(TINY_LLAMA, device="cuda")


def test_result_json_has_the_fit_fields():
    r = trace_step(TINY_LLAMA, batch=1, seq=16, precision="amp-bf16")
    d = json.loads(json.dumps(r.to_dict()))
    for key in ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
                "activations_bytes", "temporaries_bytes", "overhead_bytes", "total_bytes"):
        assert key in d["per_gpu"]
    assert d["per_gpu"]["overhead_bytes"] == 0
    assert d["total_bytes"] == d["per_gpu"]["total_bytes"]
    for key in ("peak_phase", "peak_module", "flops_forward", "flops_backward", "timeline",
                "emulations"):
        assert key in d
    assert {e["name"] for e in d["emulations"]} >= {"allocator-rounding-512", "autocast-op-lists",
                                                    "sdpa-cuda-backend"}
    peak_point = [p for p in d["timeline"] if p["event"] == d["peak_event"]]
    assert peak_point and sum(v for k, v in peak_point[0].items()
                              if k not in ("event", "phase")) == d["total_bytes"]
