"""fit, speed and the Python API refuse the same bad layouts with the same line: one check
(gpuplan.job.check_layout) behind both the memory plan and the speed model. Before it was
one, speed timed layouts fit refused -- ring attention over eager kernels, a sequence that
context parallelism cannot cut into 2 x cp balanced chunks or that sequence parallelism cannot
split over the TP group, an MLP width TP does not divide -- and printed a throughput for a job
no engine runs."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.job import Job, check_layout
from gpuplan.models import load_model

#: (model, arguments, the option and value the error names, the fix it names)
BAD = [
    ("llama-3.1-8b", ["--gpus", "2", "--cp", "2", "--seq", "2050"], "--seq 2050",
     "use a multiple of 4"),
    ("llama-3.1-8b", ["--gpus", "2", "--cp", "2", "--seq", "2048", "--attention", "eager"],
     "--cp 2", "use --attention sdpa"),
    ("llama-3.1-8b", ["--gpus", "2", "--tp", "2", "--sequence-parallel", "--seq", "2049"],
     "--seq 2049", "use a multiple of 2"),
    ("llama-3.1-8b", ["--gpus", "3", "--tp", "3"], "--tp 3", "use --tp"),
    ("llama-3.1-8b", ["--gpus", "64", "--pp", "64"], "--pp 64", "use --pp 32 or less"),
    ("mixtral-8x7b", ["--gpus", "6", "--ep", "3"], "--ep 3", "use --ep 2 or 4"),
]


@pytest.mark.parametrize("model,args,value,fix", BAD, ids=[" ".join(b[1][2:]) for b in BAD])
def test_fit_and_speed_refuse_a_bad_layout_alike(cli, model, args, value, fix):
    lines = {}
    for command in ("fit", "speed"):
        rc, out, err = cli(command, model, "--gpu", "h100", *args)
        assert rc == 2, (command, rc, err)
        assert out == ""
        msg = [line for line in err.splitlines() if line.startswith("gpuplan: error:")]
        assert len(msg) == 1 and "Traceback" not in err, err
        lines[command] = msg[0]
    assert lines["fit"] == lines["speed"]
    # the library names the Job field ("tp 3: ..."); the command line names the option
    assert lines["fit"].startswith(f"gpuplan: error: {value}: ") and fix in lines["fit"], \
        lines["fit"]


def test_the_check_reads_the_sequence_the_caller_resolved():
    """Speed resolves the sequence (the model's default when none is given) and passes it; a
    job without a sequence skips the sequence's checks rather than guessing one."""
    m = load_model("llama-3.1-8b")
    job = Job(model=m, gpus=3, cp=3)
    check_layout(m.architecture, job)  # no sequence given: nothing to cut
    with pytest.raises(InputError, match=r"^seq 2048: context parallel 3 splits the sequence "
                                         r"into 6 balanced chunks; use a multiple of 6$"):
        check_layout(m.architecture, job, 2048)
    check_layout(m.architecture, job, 3072)  # 6 x 512


def test_global_batch_counts_data_parallel_ranks_and_micro_batches():
    # Megatron's rule: global batch = micro-batch x micro-batches x DP. 64 GPUs as TP4 PP2 are
    # 8 data-parallel ranks: 1 x 16 x 8; it was batch x accumulation x every GPU (1 x 16 x 64)
    assert Job(model="gpt2", gpus=64, tp=4, pp=2, batch=1, grad_accum=16).global_batch == 128
    assert Job(model="gpt2", gpus=64, tp=4, pp=2, batch=2, micro_batches=8).global_batch == 128
    assert Job(model="gpt2", gpus=8, batch=4, grad_accum=2).global_batch == 64

