"""The embedding and the head + loss as layer-equivalent pipeline parts (``pp_embedding_part`` /
``pp_loss_part``; Megatron-LM's ``--account-for-{embedding,loss}-in-pipeline-split``), with
hand-computed expectations."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.parallel import check_layout, chunk_forwards, in_flight, part_layers, stage_layers


def test_llama3_405b_layout_is_one_layer_chunks():
    # 126 layers + embedding + loss = 128 units over 16 stages x 8 chunks: 1 unit a part
    # (Megatron: (126 + 2) // 16 // 8 = 1, one fewer on stage 0 chunk 0 and stage 15 chunk 7)
    parts = part_layers(126, 16, 8, True, True)
    assert len(parts) == 128 and parts[0] == 0 and parts[-1] == 0
    assert set(parts[1:-1]) == {1}
    stages = stage_layers(126, 16, 8, True, True)
    assert [len(s) for s in stages] == [7] + [8] * 14 + [7]
    # part k (1..126) holds layer k - 1; stage s holds parts s, s + 16, ...
    assert stages[0] == (15, 31, 47, 63, 79, 95, 111)
    assert stages[1] == (0, 16, 32, 48, 64, 80, 96, 112)
    assert stages[15] == (14, 30, 46, 62, 78, 94, 110)
    assert sorted(i for s in stages for i in s) == list(range(126))


def test_non_dividing_splits_follow_partition_uniform():
    # 30 layers + embedding = 31 units over 4 parts: 8, 8, 8, 7; the first loses the embedding's
    assert part_layers(30, 4, 1, True, False) == (7, 8, 8, 7)
    # + loss instead: 8, 8, 8, 7, the last loses the loss's
    assert part_layers(30, 4, 1, False, True) == (8, 8, 8, 6)
    # 10 layers + 2 = 12 units over 2 x 2 parts: 3 each -> 2, 3, 3, 2; stage 0 holds parts 0, 2
    assert stage_layers(10, 2, 2, True, True) == ((0, 1, 5, 6, 7), (2, 3, 4, 8, 9))
    # off: the plain layer split, unchanged
    assert stage_layers(126, 16, 2, False, False) == stage_layers(126, 16, 2)
    assert part_layers(126, 16, 2) == (4,) * 30 + (3,) * 2


def test_parts_refused_in_one_line():
    with pytest.raises(InputError, match=r"128 parts of the pipeline split, fewer than its 144"):
        part_layers(126, 16, 9, True, True)
    with pytest.raises(InputError, match="stage 1 would hold only the head and loss"):
        part_layers(1, 2, 1, False, True)


def test_embedding_chunk_micro_batches_in_flight():
    # interleaved, p 16, v 8, m 32: stage 0 holds 2 (p - 1) + (v - 1) p + 1 = 143 chunk
    # forwards; forward k is chunk (k mod 128) // 16: chunk 0 has 16 + 15 = 31 of them
    assert in_flight("interleaved", 16, 0, 32, 8) == 143
    assert chunk_forwards("interleaved", 16, 0, 32, 8, 0) == 31
    assert chunk_forwards("interleaved", 16, 0, 32, 8, 7) == 16
    # the last stage: (v - 1) p + 1 = 113: one forward of its last chunk
    assert chunk_forwards("interleaved", 16, 15, 32, 8, 7) == 1
    assert chunk_forwards("1f1b", 4, 0, 8, 1, 0) == 4


def test_job_field_checks_and_round_trip():
    j = Job(model="llama-3.1-8b", mode="train", gpus=2, pp=2, pp_schedule="interleaved:17",
            pp_embedding_part=True, pp_loss_part=True)
    assert Job.from_dict(j.to_dict()) == j
    with pytest.raises(InputError, match="pp_loss_part"):
        Job(model="llama-3.1-8b", pp=2, gpus=2, pp_loss_part="yes")
    from gpuplan.models import load_model
    arch = load_model("llama-3.1-8b").architecture
    check_layout(arch, j)  # 32 + 2 = 34 parts = 2 x 17
    with pytest.raises(InputError, match="32 layers, fewer than the 34"):
        check_layout(arch, j.with_(pp_embedding_part=False, pp_loss_part=False))


def test_stage_plans_and_busiest_stage_honour_the_parts():
    from gpuplan.memory.parallel import stage_plans
    from gpuplan.models import load_model
    model = load_model("llama-3.1-8b")
    j = Job(model=model, mode="train", gpus=4, pp=4, grad_accum=8, seq=1024,
            pp_embedding_part=True, pp_loss_part=True)
    # 34 units over 4 stages: 9, 9, 8, 8 -> 8, 9, 8, 7 layers
    assert [len(p.layers) for p in stage_plans(model, j)] == [8, 9, 8, 7]
    assert [len(p.layers) for p in stage_plans(model, j.with_(pp_embedding_part=False,
                                                              pp_loss_part=False))] == [8] * 4
