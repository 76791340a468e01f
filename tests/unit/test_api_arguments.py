"""Issue 32, part 3: the Python API checks its non-Job arguments as the CLI checks its options.
Each reproducer from the issue is refused with an InputError whose ``field`` names the argument
(it hung, returned -1, overflowed, gave an infinite cost or raised AttributeError before)."""

from __future__ import annotations

import dataclasses
import math

import pytest

import gpuplan as g
from gpuplan.errors import InputError
from gpuplan.hardware.cpu import detect_cpu


@pytest.fixture(scope="module")
def gpt2():
    return g.load_model("gpt2")


@pytest.fixture(scope="module")
def h100():
    return g.get_gpu("h100")


TRAIN = g.Job(model="gpt2", mode="train")


def _refused(field, fn, *args, **kw):
    with pytest.raises(InputError) as e:
        fn(*args, **kw)
    assert e.value.field == field, (e.value.field, str(e.value))
    return e.value


def test_suggest_max_changes_is_bounded_not_a_hang(gpt2, h100):
    e = _refused("max_changes", g.suggest, gpt2, TRAIN, h100, max_changes=10**6)
    assert "<= 4" in str(e)
    _refused("top", g.suggest, gpt2, TRAIN, h100, top=0)
    # the largest accepted still answers
    assert g.suggest(gpt2, TRAIN, h100, max_changes=4).fits_already


def test_infer_memory_tensor_parallel_negative(gpt2):
    _refused("tensor_parallel", g.infer_memory, gpt2, g.Job(model="gpt2"), tensor_parallel=-1)
    _refused("tensor_parallel", g.infer_memory, gpt2, g.Job(model="gpt2"), tensor_parallel=1.5)


def test_estimate_speed_input_bytes_past_a_float(gpt2, h100):
    _refused("input_bytes", g.estimate_speed, gpt2, h100, TRAIN, input_bytes=10**309)


def test_price_that_makes_an_infinite_cost(gpt2, h100):
    _refused("price_per_gpu_hour", g.estimate_speed, gpt2, h100, TRAIN, train_tokens=1e9,
             price_per_gpu_hour=1e308)
    _refused("train_tokens", g.estimate_speed, gpt2, h100, TRAIN, train_tokens=math.inf)
    _refused("epochs", g.estimate_speed, gpt2, h100, TRAIN, train_tokens=1e9, epochs=math.nan)
    _refused("link", g.estimate_speed, gpt2, h100, TRAIN, link=1e308)


def test_a_str_where_a_model_gpu_or_cpu_belongs(gpt2, h100):
    assert "load_model" in str(_refused("model", g.train_memory, "gpt2", TRAIN))
    _refused("model", g.infer_memory, "gpt2", g.Job(model="gpt2"))
    assert "get_gpu" in str(_refused("gpu", g.suggest, gpt2, TRAIN, "h100"))
    _refused("gpu", g.max_batch, gpt2, TRAIN, "h100")
    _refused("gpu", g.estimate_speed, gpt2, "h100", TRAIN)
    _refused("cpu", g.estimate_speed, gpt2, h100, TRAIN, cpu="x")
    _refused("cpu", g.estimate_cpu_speed, gpt2, "x", TRAIN)
    _refused("job", g.train_memory, gpt2, {"model": "gpt2"})
    _refused("job", g.plan, "gpt2")


def test_switches_and_levels(gpt2, h100):
    _refused("speed", g.plan, TRAIN, ["h100"], speed=1)
    _refused("overhead_level", g.plan, TRAIN, ["h100"], overhead_level="huge")
    _refused("overhead_level", g.train_memory, gpt2, TRAIN, overhead_level=None)
    _refused("mode", g.suggest, gpt2, TRAIN, h100, mode="both")
    _refused("limit", g.max_batch, gpt2, TRAIN, h100, limit=-1)
    _refused("pinned", g.estimate_speed, gpt2, h100, TRAIN, pinned="yes")
    _refused("new_tokens", g.estimate_cpu_speed, gpt2, detect_cpu(), TRAIN, new_tokens=0)


def _arch(**changes):
    return dataclasses.replace(g.load_model("gpt2").architecture, **changes)


def test_architecture_constructor_refuses_what_no_network_has():
    _refused("num_kv_heads", _arch, num_kv_heads=-12)  # negative KV bytes followed
    _refused("head_dim", _arch, head_dim=0)
    _refused("num_layers", _arch, num_layers=10**6)
    _refused("hidden_dropout", _arch, hidden_dropout=math.nan)
    _refused("hidden_size", _arch, hidden_size=768.0)
    assert _arch(num_layers=6).kv_elements_per_token == 2 * 6 * 12 * 64


def _gpu(**changes):
    return dataclasses.replace(g.get_gpu("h100"), **changes)


def test_gpu_constructor_refuses_nan_memory_and_zero_rates():
    _refused("memory_bytes", _gpu, memory_bytes=math.nan)  # NaN usable bytes followed
    _refused("memory_bytes", _gpu, memory_bytes=-1)
    _refused("memory_bandwidth", _gpu, memory_bandwidth=0.0)  # zero tokens/s followed
    _refused("peak_flops", _gpu, peak_flops={"bf16": 0.0})
    _refused("peak_flops", _gpu, peak_flops={"bf16": math.inf})
    _refused("pcie_gen", _gpu, pcie_gen=9)
    assert _gpu(memory_bytes=40 * 10**9).memory_bytes == 40 * 10**9


def test_job_dict_round_trip_plans_again():
    first = g.Job.from_dict({})
    again = g.Job.from_dict(first.to_dict())
    assert again.model.params.total == first.model.params.total == 7 * 10**9
    assert g.plan(again).train.total_bytes == g.plan(first).train.total_bytes
    # a catalog name is still a name
    assert g.Job.from_dict({"model": "gpt2"}).model == "gpt2"


@pytest.mark.parametrize("field,kw", [
    ("model", {"model": "qwen2.5-0.5b"}), ("gpu", {"gpu": "h100"}), ("job", {"job": "x"}),
    ("replicas", {"replicas": 1.5}), ("replicas", {"replicas": "2"}),
    ("prefix_hit", {"prefix_hit": 1.5}), ("prefix_hit", {"prefix_hit": math.nan}),
    ("price", {"price": "x"}), ("price", {"price": math.nan}), ("seed", {"seed": [1]}),
    ("seed", {"seed": -1}), ("slo", {"slo": "x"}), ("workload", {"workload": [1]}),
])
def test_capacity_checks_its_arguments(h100, field, kw):
    """qa43: ``gpuplan.capacity(...)`` and its Deployment checked none of their own arguments: a
    str model or GPU, a float replica count, a str price or an SLO that is not one raised
    AttributeError/TypeError from deep inside the simulation."""
    model = g.load_model("qwen2.5-0.5b")
    args = {"model": model, "gpu": h100, **{k: v for k, v in kw.items() if k in ("model",
                                                                             "gpu")}}
    rest = {k: v for k, v in kw.items() if k not in ("model", "gpu")}
    _refused(field, g.capacity, args["model"], args["gpu"], rate=1, requests=5, input=100,
             output=4, **rest)
    r = g.capacity(model, h100, rate=1, requests=5, input=100, output=4, seed=0, replicas=1)
    assert r.ttft_s.at(50) > 0  # the same call with every argument valid answers
    # a whole prompt from the cache is a share too (a published row's): 1.0 is accepted
    assert g.capacity(model, h100, rate=1, requests=5, input=100, output=4,
                      prefix_hit=1.0).ttft_s.at(50) > 0
