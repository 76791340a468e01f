"""One helper says which layouts an engine runs (issue 27): ``engines.profiles.layout_limits``,
read by the cluster search and by fit's fewest-GPU search alike; and one job is "the job an
engine gives with nothing else said" (``job.default_job``), read by ``job_flags`` and the exports.

The expected values are the engines' own documentation as docs/engines.md cites it: torchtitan
runs TP/SP/PP/CP/EP, FSDP2 (no ZeRO-1) and weighs the embedding and loss as pipeline parts
(pipeline_parallel.py: input_weight = output_weight = 1); DeepSpeed's PipelineModule runs 1F1B
only (runtime/pipe/schedule.py: TrainSchedule); Megatron-Core's distributed optimizer is ZeRO-1.
"""

from __future__ import annotations

import pytest

from gpuplan import cluster
from gpuplan.engines.profiles import SEARCH_SCHEDULES, layout_limits
from gpuplan.job import Job, default_job, job_flags
from gpuplan.memory import fewest

ALL = frozenset({"tp", "sp", "pp", "cp", "ep"})


@pytest.mark.parametrize("kw,dims,zero,schedules,parts", [
    ({}, ALL, (0, 1, 2, 3), SEARCH_SCHEDULES, (False, True)),
    ({"sharding": "fsdp2"}, ALL, (0, 2, 3), SEARCH_SCHEDULES, (False, True)),
    ({"engine": "torchtitan"}, ALL, (0, 2, 3), SEARCH_SCHEDULES, (True,)),
    ({"engine": "megatron"}, ALL, (0, 1), SEARCH_SCHEDULES, (False, True)),
    # the precision-aware optimizer (bf16 states, a remainder master) runs only over the
    # distributed optimizer (Megatron-LM@d98e8a64 megatron/core/optimizer/__init__.py 1057-1060)
    ({"engine": "megatron", "master_weights": "remainder"}, ALL, (1,), SEARCH_SCHEDULES,
     (False, True)),
    ({"engine": "megatron", "optimizer_states": "bf16", "master_weights": "remainder"}, ALL,
     (1,), SEARCH_SCHEDULES, (False, True)),
    ({"master_weights": "remainder"}, ALL, (0, 1, 2, 3), SEARCH_SCHEDULES, (False, True)),
    ({"engine": "deepspeed"}, frozenset({"pp"}), (0, 1, 2, 3), ("1f1b",), (False, True)),
    ({"engine": "fsdp2"}, frozenset(), (0, 2, 3), ("1f1b",), (False, True)),
    ({"engine": "transformers", "sharding": "fsdp2"}, frozenset({"tp"}), (0, 2, 3), ("1f1b",),
     (False, True)),
])
def test_what_each_engine_runs(kw, dims, zero, schedules, parts):
    lim = layout_limits(Job(model="llama-3.1-8b", mode="train", **kw))
    assert (lim.dims, lim.zero, lim.schedules, lim.parts) == (dims, zero, schedules, parts)
    assert lim.deepest_zero == max(zero)


def test_the_searches_read_the_one_helper():
    # no second copy: the cluster and the fewest-GPU search import this very function
    assert cluster.layout_limits is layout_limits and fewest.layout_limits is layout_limits
    assert cluster.SCHEDULES is SEARCH_SCHEDULES
    assert not hasattr(cluster, "_Limits") and not hasattr(fewest, "_limits")


@pytest.mark.parametrize("engine", ["auto", "transformers", "deepspeed", "fsdp2", "torchtitan",
                                    "megatron", "vllm"])
def test_the_default_job_prints_no_flags(engine):
    base = default_job(engine)
    assert job_flags(base) == []
    # the export's defaults are that job's fields: a field changed from it is printed
    assert job_flags(base.with_(seq=base.seq + 1 if base.seq else 1000)) == \
        ["--seq", str(base.seq + 1 if base.seq else 1000)]
    modes = base.engine_profile.modes
    assert base.mode == ("both" if len(modes) == 2 else modes[0])
