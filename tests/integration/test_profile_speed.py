"""Measured vs estimated: the profiler asks gpuplan's speed model for the step it measured.

Oracles: every expected estimate is computed here by calling ``gpuplan.compute.estimate_speed``
with the inputs the loop really had -- batch, sequence length, recipe, optimizer and the bytes it
copied, all written out from the test's own tensors -- and the ratio must be the measured median
step / that estimate. CUDA runs are faked (``torch.cuda`` queries and events; ``.to('cuda')`` keeps
the tensor on the CPU), so the GPU is whatever exact device name the fake reports. The CPU's
estimate needs ``gpuplan.hardware.cpu`` (the bench's CPU model): a fake module stands in for it,
or its absence is forced.
"""

from __future__ import annotations

import json
import textwrap
import time
import types

import pytest

torch = pytest.importorskip("torch")

from gpuplan.cli import main  # noqa: E402
from gpuplan.compute import estimate_speed, load_measured  # noqa: E402
from gpuplan.errors import InputError, UnknownNameError  # noqa: E402
from gpuplan.hardware import get_gpu  # noqa: E402
from gpuplan.measure.profile import ProfileReport, profile  # noqa: E402
from gpuplan.measure.profile import estimate as profile_estimate  # noqa: E402
from gpuplan.models import architecture_from_config, from_param_count, load_model  # noqa: E402
from gpuplan.report.profile import render_text  # noqa: E402
from gpuplan.job import Job  # noqa: E402


def J(mode="train", precision=None, **kw):
    """A Job of one mode for the speed model (the precision field that mode reads)."""
    if precision is not None:
        kw["precision" if mode == "train" else "infer_precision"] = precision
    return Job(model="test-model", mode=mode, **kw)

# A made-up CPU (the numbers only need to have a CPU's shape).
FAKE_CPU = types.SimpleNamespace(
    model_name="Test CPU 2-core", vendor="GenuineIntel", machine="x86_64", physical_cores=2,
    logical_cores=2, sockets=1, simd="avx512", simd_bits=512, fma=True, fma_units=2,
    frequency_hz=3.125e9, frequency_source="given", flags=frozenset(),
    peak_fp32_flops=2 * 3.125e9 * 16 * 2, peak_fp64_flops=None,
    peak_basis="2 cores x 3.125 GHz x 16 lanes x 2 (one FMA pipe) = 200 GFLOP/s (a test CPU)")


@pytest.fixture(autouse=True)
def no_stored_bench_run(tmp_path, monkeypatch):
    """No bench database: the defaults apply on both sides of every comparison."""
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "no-bench.sqlite"))


@pytest.fixture
def fake_cpu_model(monkeypatch):
    monkeypatch.setattr(profile_estimate, "detect_cpu", lambda **kw: FAKE_CPU)
    return FAKE_CPU


class FakeCuda:
    """torch.cuda with an idle GPU of a given name: events complete when recorded."""

    def __init__(self, monkeypatch, name):
        self.name = name
        c = torch.cuda

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                self.t = time.perf_counter()

            def query(self):
                return self.t is not None

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3

        for attr, value in {
            "Event": Event, "synchronize": lambda device=None: None,
            "is_available": lambda: True, "is_initialized": lambda: True,
            "current_device": lambda: 0, "current_stream": lambda device=None: "stream0",
            "get_device_name": lambda device=None: self.name,
            "get_device_properties": lambda device=None: types.SimpleNamespace(total_memory=80e9),
            "reset_peak_memory_stats": lambda device=None: None,
            "max_memory_allocated": lambda device=None: 10**9,
            "max_memory_reserved": lambda device=None: 2 * 10**9,
        }.items():
            monkeypatch.setattr(c, attr, value)
        real_to = torch.Tensor.to

        def fake_to(t, *args, **kwargs):
            dev = kwargs.get("device", args[0] if args else None)
            if isinstance(dev, str) and dev.startswith("cuda"):
                return t  # the copy is observed by the profiler; the data stays where it is
            return real_to(t, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "to", fake_to)
        monkeypatch.setattr(torch.Tensor, "is_pinned", lambda t, device=None: False)


class TokenModel(torch.nn.Module):
    """Embedding + two linear layers over (B, S) token ids; no weight is reused per position."""

    def __init__(self, vocab=64, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.l1 = torch.nn.Linear(d, 32)
        self.l2 = torch.nn.Linear(32, vocab)

    def forward(self, input_ids, labels):
        logits = self.l2(torch.relu(self.l1(self.emb(input_ids))))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _token_batches(n, b=4, s=12, vocab=64):
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(0, vocab, (b, s), generator=g),
             "labels": torch.randint(0, vocab, (b, s), generator=g)} for _ in range(n)]


def _train(model, opt, batches, *, to_cuda=False, warmup=1, **kw):
    with profile(model, opt, warmup=warmup, **kw) as prof:
        for b in prof.wrap(batches):
            if to_cuda:
                b = {k: v.to("cuda") for k, v in b.items()}
            loss = model(**b)
            loss = getattr(loss, "loss", loss)  # a transformers model returns an output object
            opt.zero_grad()
            loss.backward()
            opt.step()
    return prof.report()


# -- on a GPU the catalog knows by its exact device name -------------------------------------------

@pytest.mark.parametrize("recipe", ["fp32", "amp-bf16", "tf32"])
def test_named_architecture_on_an_exactly_named_gpu(monkeypatch, recipe):
    FakeCuda(monkeypatch, "NVIDIA H100 80GB HBM3")  # H100-SXM-80GB's CUDA device name
    if recipe == "amp-bf16":  # autocast(cuda, bf16) around the forward, as the recorder sees it
        monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: True)
        monkeypatch.setattr(torch, "get_autocast_dtype", lambda dev: torch.bfloat16)
    if recipe == "tf32":
        # torch.set_float32_matmul_precision("high") lets fp32 matmuls use TF32
        monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    model = TokenModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    r = _train(model, opt, _token_batches(6), to_cuda=True, plan_model="llama-3.1-8b")
    e = r.estimate
    assert e is not None and e.source == "speed-model" and e.basis == "architecture", \
        r.estimate_unavailable
    assert (e.model, e.device, e.batch, e.seq) == ("llama-3.1-8b", "H100-SXM-80GB", 4, 12)
    # Each step copies input_ids and labels: 2 tensors x 4 x 12 int64 = 768 bytes, 192 per sample;
    # CPU tensors here are pageable, copied with non_blocking=False.
    oracle = estimate_speed(
        load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"),
        J(mode="train", batch=4, seq=12, precision="amp-bf16" if recipe == "amp-bf16" else "fp32",
          optimizer="adamw", checkpointing="none", attention="sdpa"),
        tf32=recipe == "tf32", input_bytes=192, pinned=False, overlap_transfer=False,
        measured=load_measured())
    assert e.precision == ("amp-bf16" if recipe == "amp-bf16" else "fp32")
    assert e.tf32 is (recipe == "tf32")
    assert e.input_bytes_per_step == 768
    assert r.expected_step_time_s == pytest.approx(oracle.step_time_s, rel=1e-12)
    assert r.measured_over_expected == pytest.approx(r.step_time_s / oracle.step_time_s, rel=1e-12)
    assert e.measured_mfu == pytest.approx(
        oracle.model_flops_per_step / (r.step_time_s * oracle.step.peak_flops), rel=1e-12)
    # a module of 2,000-odd parameters is not an 8B model: the report says so
    assert any("is plan_model the model" in n for n in e.notes)
    assert any("estimated" in line for line in r.evidence)
    text = render_text(r)
    assert "by gpuplan's speed model" in text and "H100-SXM-80GB" in text
    assert "llama-3.1-8b [plan_model]" in text


def test_forward_only_loop_of_a_decoder_is_compared_with_the_prefill(monkeypatch):
    FakeCuda(monkeypatch, "NVIDIA A100-SXM4-80GB")
    emb = torch.nn.Embedding(64, 8)
    with torch.no_grad(), profile(emb, warmup=1, plan_model="gpt2") as prof:
        for ids in prof.wrap([torch.randint(0, 64, (2, 10)) for _ in range(5)]):
            emb(ids.to("cuda"))
    r = prof.report()
    e = r.estimate
    assert e is not None and e.mode == "forward" and e.optimizer is None, r.estimate_unavailable
    # one int64 (2, 10) tensor per step: 160 bytes, 80 per sample, pageable and blocking
    oracle = estimate_speed(load_model("gpt2"), get_gpu("A100-SXM-80GB"),
                            J(mode="infer", batch=2, seq=10, precision="fp32"), input_bytes=80,
                            pinned=False, overlap_transfer=False, measured=load_measured())
    expected = oracle.prefill.time_s + oracle.prefill_transfer.exposed_s
    assert r.expected_step_time_s == pytest.approx(expected, rel=1e-12)
    assert r.measured_over_expected == pytest.approx(r.step_time_s / expected, rel=1e-12)
    assert any("prefill" in n for n in e.notes)


def test_measured_bench_numbers_replace_the_defaults(monkeypatch):
    from gpuplan.measure.store import Measured

    FakeCuda(monkeypatch, "NVIDIA H100 80GB HBM3")
    # A stored bench run of this very GPU: 40 TFLOP/s fp32 matmul, 2.9 TB/s device copy, 4 us
    # per launch (numbers made up for the test; what matters is that they are used).
    run = Measured(run_id=7, created_utc="2025-01-01T00:00:00Z", machine=None,
                   device_names={"cpu": "Test CPU", "cuda:0": "NVIDIA H100 80GB HBM3"},
                   matmul_flops={("cuda:0", "fp32"): 40e12},
                   matmul_size={("cuda:0", "fp32"): 8192},
                   matmul_peak_flops={}, bandwidth={("cuda:0", "device_copy"): 2.9e12},
                   overhead_s={("cuda:0", "kernel_launch"): 4e-6})
    import gpuplan.compute

    monkeypatch.setattr(gpuplan.compute, "load_measured", lambda db=None: run)
    model = TokenModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    r = _train(model, opt, _token_batches(5), to_cuda=True, plan_model="llama-3.1-8b")
    oracle = estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"),
                            J(mode="train", batch=4, seq=12, precision="fp32", optimizer="adamw"),
                            input_bytes=192, pinned=False, overlap_transfer=False, measured=run)
    default = estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"),
                             J(mode="train", batch=4, seq=12, precision="fp32", optimizer="adamw"),
                             input_bytes=192, pinned=False, overlap_transfer=False, measured=None)
    assert oracle.step_time_s != default.step_time_s
    assert r.expected_step_time_s == pytest.approx(oracle.step_time_s, rel=1e-12)
    eff = r.estimate.efficiency
    assert {"matmul_fp32", "memory", "launch_s"} <= set(eff["measured"])
    peak = get_gpu("H100-SXM-80GB").peak("fp32")
    assert eff["matmul_by_dtype"]["fp32"] == pytest.approx(40e12 / peak)
    assert "measured by gpuplan bench" in render_text(r)


def test_unknown_gpu_name_gives_no_estimate_and_says_why(monkeypatch):
    FakeCuda(monkeypatch, "NVIDIA H200")  # not an exact device name in the catalog
    model = TokenModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    r = _train(model, opt, _token_batches(5), to_cuda=True, plan_model="llama-3.1-8b")
    assert r.estimate is None
    assert r.expected_step_time_s is None and r.measured_over_expected is None
    assert "'NVIDIA H200'" in r.estimate_unavailable and "gpu=" in r.estimate_unavailable
    assert "\n" not in r.estimate_unavailable
    lines = [ln for ln in render_text(r).splitlines() if ln.startswith("estimate")]
    assert lines == [f"estimate    none: {r.estimate_unavailable}"]
    d = r.to_dict()
    assert d["estimate"] is None and d["estimate_unavailable"] == r.estimate_unavailable

    # naming the SKU gives the estimate for it
    r = _train(TokenModel(), torch.optim.SGD(TokenModel().parameters(), lr=0.1),
               _token_batches(5), to_cuda=True, plan_model="llama-3.1-8b", gpu="H200-SXM-141GB")
    oracle = estimate_speed(load_model("llama-3.1-8b"), get_gpu("H200-SXM-141GB"),
                            J(mode="train", batch=4, seq=12, precision="fp32", optimizer="sgd"),
                            input_bytes=192, pinned=False, overlap_transfer=False,
                            measured=load_measured())
    assert r.estimate.device_source == "the gpu argument"
    assert r.measured_over_expected == pytest.approx(r.step_time_s / oracle.step_time_s, rel=1e-12)


def test_parameter_count_estimate_is_labelled(monkeypatch):
    FakeCuda(monkeypatch, "NVIDIA A100-SXM4-80GB")
    model = TokenModel(vocab=64, d=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    r = _train(model, opt, _token_batches(5), to_cuda=True)
    e = r.estimate
    assert e is not None and e.basis == "parameter-count", r.estimate_unavailable
    # N outside the embedding table: l1 16x32 + 32, l2 32x64 + 64 (the 64x16 table is a lookup)
    n = 16 * 32 + 32 + 32 * 64 + 64
    assert e.params == n and e.optimizer == "sgd-momentum" and e.seq == 12
    oracle = estimate_speed(
        from_param_count(n), get_gpu("A100-SXM-80GB"),
        J(mode="train", batch=4, seq=12, precision="fp32", optimizer="sgd-momentum"),
        input_bytes=192, pinned=False, overlap_transfer=False, measured=load_measured())
    assert r.measured_over_expected == pytest.approx(r.step_time_s / oracle.step_time_s, rel=1e-12)
    assert any("parameter count only" in n for n in e.notes)
    assert "parameter count only: 6·N FLOPs per token" in render_text(r)

    # an MLP on feature vectors: no sequence dimension -> one token per sample, said so
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(mlp.parameters())
    with profile(mlp, opt, warmup=1) as prof:
        for x, y in prof.wrap([(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 5):
            x, y = x.to("cuda"), y.to("cuda")
            torch.nn.functional.cross_entropy(mlp(x), y).backward()
            opt.step()
    r = prof.report()
    n = 16 * 32 + 32 + 32 * 4 + 4
    # bytes per sample: 16 float32 features + one int64 label = 72
    oracle = estimate_speed(from_param_count(n), get_gpu("A100-SXM-80GB"),
                            J(mode="train", batch=8, seq=1, precision="fp32", optimizer="adam"),
                            input_bytes=72, pinned=False, overlap_transfer=False,
                            measured=load_measured())
    assert r.estimate.seq == 1 and any("one token per sample" in n for n in r.estimate.notes)
    assert r.measured_over_expected == pytest.approx(r.step_time_s / oracle.step_time_s, rel=1e-12)


def test_convolutions_are_not_estimated_from_their_parameter_count(monkeypatch):
    FakeCuda(monkeypatch, "NVIDIA A100-SXM4-80GB")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    model(torch.randn(1, 3, 8, 8))  # materialize the lazy layer
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(model, opt, warmup=1) as prof:
        for x in prof.wrap([torch.randn(2, 3, 8, 8)] * 4):
            model(x.to("cuda")).sum().backward()
            opt.step()
    r = prof.report()
    assert r.estimate is None and "convolutional" in r.estimate_unavailable
    assert "plan_model" in r.estimate_unavailable


# -- on the CPU ---------------------------------------------------------------------------------

def test_transformers_model_on_the_cpu_is_read_from_its_config(fake_cpu_model):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    r = _train(model, opt, _token_batches(5, b=2, s=16))
    e = r.estimate
    assert e is not None and e.basis == "architecture", r.estimate_unavailable
    assert e.device == FAKE_CPU.model_name and e.device_kind == "cpu"
    assert "transformers config" in e.model_source
    # the oracle: the architecture read from the same config, the CPU side of estimate_speed
    # (fp32, the speed model's CPU dtype); the CPU step does not depend on the GPU passed beside it
    arch = architecture_from_config(model.config.to_dict(), name="tiny-llama")
    oracle = estimate_speed(
        arch, get_gpu("A100-SXM-80GB"),
        J(mode="train", batch=2, seq=16, precision="fp32", optimizer="adamw", attention="sdpa",
          checkpointing="none"),
        cpu=FAKE_CPU, measured=load_measured())
    assert r.expected_step_time_s == pytest.approx(oracle.cpu.cpu_step_s, rel=1e-12)
    assert r.measured_over_expected == pytest.approx(r.step_time_s / oracle.cpu.cpu_step_s,
                                                     rel=1e-12)
    assert e.peak_flops == FAKE_CPU.peak_fp32_flops
    # JSON carries the estimate and reads back
    d = json.loads(json.dumps(r.to_dict()))
    assert d["estimate"]["source"] == "speed-model" and d["estimate"]["basis"] == "architecture"
    assert d["estimate"]["efficiency"]["basis"]["matmul"].startswith(("default", "measured"))
    back = ProfileReport.from_dict(d)
    assert back.estimate == r.estimate and back.measured_over_expected == r.measured_over_expected


def test_this_machines_cpu_model(monkeypatch):
    from gpuplan.hardware.cpu import detect_cpu

    cpu = detect_cpu()
    model = TokenModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    r = _train(model, opt, _token_batches(4), plan_model="gpt2")
    if cpu.peak_fp32_flops is None:  # a CPU whose peak cannot be estimated: said so
        assert r.estimate is None and "peak" in r.estimate_unavailable
        return
    oracle = estimate_speed(load_model("gpt2"), get_gpu("L4"),
                            J(mode="train", batch=4, seq=12, precision="fp32", optimizer="sgd"),
                            cpu=cpu, measured=None)
    assert r.estimate.device == cpu.model_name
    assert r.measured_over_expected == pytest.approx(r.step_time_s / oracle.cpu.cpu_step_s,
                                                     rel=1e-12)


def test_given_estimates_and_turning_it_off(fake_cpu_model):
    model = TokenModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    r = _train(model, opt, _token_batches(4), expected_step_time_s=0.25)
    assert r.estimate.source == "given" and r.estimate.step_time_s == 0.25
    assert r.measured_over_expected == pytest.approx(r.step_time_s / 0.25)
    r = _train(model, opt, _token_batches(4), estimate=False)
    assert r.estimate is None and r.estimate_unavailable is None
    assert not any(ln.startswith("estimate") for ln in render_text(r).splitlines())


def test_bad_estimate_arguments_fail_before_the_loop():
    m = torch.nn.Linear(2, 2)
    with pytest.raises(UnknownNameError, match="no-such-model"):
        profile(m, plan_model="no-such-model")
    with pytest.raises(InputError, match="no-such-gpu"):
        profile(m, gpu="no-such-gpu")
    with pytest.raises(UnknownNameError, match="precision"):
        profile(m, precision="fp13")
    with pytest.raises(InputError, match="not both"):
        profile(m, plan_model="llama-3.1-8b", expected_step_time_s=1.0)
    with pytest.raises(InputError, match="estimate=False"):
        profile(m, gpu="h100", estimate=False)


# -- the CLI -------------------------------------------------------------------------------------

SCRIPT = """
import torch
from torch.utils.data import DataLoader

class TokenModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 16)
        self.head = torch.nn.Linear(16, 64)
    def forward(self, ids):
        return self.head(self.emb(ids))

print("script ran")
data = [torch.randint(0, 64, (12,)) for _ in range(4 * 12)]
model = TokenModel()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for ids in DataLoader(data, batch_size=4):
    logits = model(ids)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(SCRIPT))
    return p


def test_cli_model_argument_gives_the_estimate(script, capsys, fake_cpu_model):
    rc = main(["profile", "--steps", "4", "--warmup", "1", "--model", "gpt2", "--json",
               str(script)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    d = json.loads(out)
    e = d["estimate"]
    assert e["source"] == "speed-model" and e["model_source"] == "plan_model"
    assert (e["batch"], e["seq"], e["optimizer"], e["precision"]) == (4, 12, "adamw", "fp32")
    oracle = estimate_speed(load_model("gpt2"), get_gpu("H100-SXM-80GB"),
                            J(mode="train", batch=4, seq=12, precision="fp32", optimizer="adamw"),
                            cpu=FAKE_CPU, measured=load_measured())
    assert d["expected_step_time_s"] == pytest.approx(oracle.cpu.cpu_step_s, rel=1e-12)
    assert d["measured_over_expected"] == pytest.approx(d["step_time_s"] / oracle.cpu.cpu_step_s,
                                                        rel=1e-12)


@pytest.mark.parametrize("args, words", [
    (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--model", "/no/such/config.json"], "no such file"),
    (["--gpu", "no-such-gpu"], "no-such-gpu"),
    (["--precision", "fp13"], "fp13"),
    (["--model", "gpt2", "--expected-step-time", "0.1"], "not both"),
    (["--gpu", "h100", "--no-estimate"], "--no-estimate"),
])
def test_cli_bad_estimate_arguments_are_one_line_exit_2(script, capsys, args, words):
    rc = main(["profile", *args, str(script)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert words in err
    assert len(err.strip().splitlines()) == 1
    assert "script ran" not in out  # the script never started
