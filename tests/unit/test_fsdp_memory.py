"""``--sharding fsdp2``: the states FSDP2 keeps per rank, written out by hand (the per-phase
placement is held to the FSDP2 trace in tests/integration/test_trace_sharded.py)."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError, UnsupportedError
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.memory.fsdp import shard_elements, unit_params
from gpuplan.models import load_model


def plan(name, **kw):
    m = load_model(name)
    return m, train_memory(m, Job(model=m, mode="train", **kw))


def test_mixed_bf16_keeps_only_the_fp32_shard():
    # llama-3.1-8b: every dim 0 divides by 8, so each rank holds exactly n / 8 of each tensor
    m, t = plan("llama-3.1-8b", precision="mixed-bf16", gpus=8, zero=3, sharding="fsdp2")
    n = m.params.total
    assert t.weights_bytes == 4 * n // 8       # the fp32 shard (the master copy)
    assert t.master_weights_bytes == 0
    assert t.optimizer_bytes == 8 * n // 8     # AdamW's two fp32 moments
    # DeepSpeed's layout of the same job: a bf16 shard beside an fp32 master
    _, d = plan("llama-3.1-8b", precision="mixed-bf16", gpus=8, zero=3)
    assert d.weights_bytes == 2 * n // 8 and d.master_weights_bytes == 4 * n // 8


def test_the_root_unit_is_gathered_at_the_backward_peak():
    m, t = plan("llama-3.1-8b", precision="mixed-bf16", gpus=8, zero=3, sharding="fsdp2",
                batch=4, seq=4096)
    root, unit = unit_params(m)
    arch = m.architecture
    # everything outside the blocks: embeddings, head and the final norm
    assert root == 2 * arch.vocab_size * arch.hidden_size + arch.hidden_size
    assert t.peak_phase == "backward"
    assert t.gathered_params_bytes >= 2 * root  # bf16 copies, alive into backward


def test_dim0_padding_keeps_small_tensors_whole():
    # ViT's (1, 197, 768) position embedding and (1, 1, 768) class token have one row: FSDP2
    # pads dim 0 to the ranks, so every rank holds all of them
    m = load_model("vit-base-patch16-224")
    n = m.params.total
    whole = 197 * 768 + 768
    local = shard_elements(m, 4)
    assert local > n // 4
    assert local - n // 4 == pytest.approx(whole * 3 / 4, abs=1000)


def test_default_numbers_are_deepspeeds():
    m = load_model("gpt2")
    a = train_memory(m, Job(model=m, mode="train", gpus=4, zero=3))
    b = train_memory(m, Job(model=m, mode="train", gpus=4, zero=3, sharding="deepspeed"))
    assert a.total_bytes == b.total_bytes and a.phases == b.phases


def test_bad_combinations_are_one_line():
    with pytest.raises(InputError, match="zero 1 with sharding fsdp2"):
        Job(model="gpt2", gpus=4, zero=1, sharding="fsdp2")
    with pytest.raises(InputError, match="sharding 'megatron'"):
        Job(model="gpt2", gpus=4, zero=3, sharding="megatron")
    m = load_model("gpt2")
    with pytest.raises(UnsupportedError, match="offload_optimizer"):
        train_memory(m, Job(model=m, mode="train", gpus=4, zero=3, sharding="fsdp2",
                            offload_optimizer=True))


def test_lora_under_fsdp2_gathers_wrapped_units():
    """LoRA under --sharding fsdp2 (torchtune's LoRA recipes) is planned with the adapters'
    states and FSDP's wrapped units -- the current and the prefetched one, each the largest
    unit -- not DeepSpeed's coordinator. gpt2's largest unit is its token embedding, 50,257 x
    768 (a layer is 7,087,872 parameters): 2 x 38,597,376 x 2 bytes (bf16) gathered."""
    m = load_model("gpt2")
    job = Job(model=m, mode="train", gpus=4, zero=3, sharding="fsdp2", lora_rank=8,
              precision="bf16")
    from dataclasses import replace

    from gpuplan.memory.states import train_states
    line = next(ln for ln in train_memory(m, job).lines if ln.key == "gathered_params")
    assert line.label == "gathered ZeRO-3/FSDP units"
    assert train_states(m, job).gathered == 2 * 50257 * 768 * 2
    # DeepSpeed keeps all of gpt2 (124M parameters, under its reuse distance) gathered
    assert train_states(m, replace(job, sharding="deepspeed")).gathered == 124_439_808 * 2


def test_cli_option(cli):
    rc, out, err = cli("fit", "gpt2", "--mode", "train", "--gpus", "4", "--zero", "3",
                       "--sharding", "fsdp2", "--json")
    assert rc == 0 and '"sharding": "fsdp2"' in out
    rc, out, err = cli("fit", "gpt2", "--gpus", "4", "--zero", "1", "--sharding", "fsdp2")
    assert rc == 2 and err.count("\n") == 1 and "--zero 1" in err


def test_fsdp2_under_a_pipeline_layout_counts_the_gathered_units():
    """FSDP2 inside a pipeline stage gathers the stage's 16-bit units as the single-GPU plan
    does (the stage plan once dropped them: 0 B gathered, the Llama 3 405B row read 6 GB less
    under --sharding fsdp2 than under deepspeed). ZeRO-2 keeps them from forward into backward:
    at the peak more than one layer's 16-bit parameters and at most the rank's."""
    from gpuplan.job import Job
    from gpuplan.memory import train_memory
    from gpuplan.models import load_model

    m = load_model("llama-3.2-1b")
    t = train_memory(m, Job(model=m, mode="train", gpus=4, pp=2, zero=2, sharding="fsdp2",
                            batch=1, seq=128, grad_accum=2))
    gathered = t.to_dict()["per_gpu"]["gathered_params_bytes"]
    layer = sum(x.total for x in m.tensors if x.layer is None and "{i}" in x.name) \
        // m.architecture.num_layers
    assert 2 * layer < gathered <= 2 * t.stage["params_per_rank"]
