"""Bad inputs found by fuzzing the CLI (stop 24): each refused in one line that names the value
and a fix that would work -- not a --pp of 0, not a unit already given, not an internal name."""

from __future__ import annotations

import pytest

from gpuplan.cli import main
from gpuplan.errors import InputError
from gpuplan.hardware import resolve_gpu
from gpuplan.hardware.topology import parse_inter_node
from gpuplan.job import Job, pp_chunks


def _err(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_too_many_chunks_suggests_fewer_chunks(capsys):
    # llama-3.1-8b: 32 layers. 4 stages x 64 chunks: the stages are fine, the chunks are not
    base = ["fit", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--mode", "train", "--gpus", "64"]
    assert "use --pp-schedule interleaved:8 or fewer chunks" in _err(
        capsys, [*base, "--pp", "4", "--pp-schedule", "interleaved:64"])
    assert "use --pp-schedule 1f1b" in _err(
        capsys, [*base, "--pp", "32", "--pp-schedule", "interleaved:2"])
    assert "use --pp 32 or less" in _err(capsys, [*base, "--pp", "64"])
    # with the embedding and the loss as parts: 34 units over 2 stages
    assert "use --pp-schedule interleaved:17 or fewer chunks" in _err(
        capsys, [*base, "--pp", "2", "--pp-schedule", "interleaved:64", "--pp-embedding-part",
                 "--pp-loss-part"])


def test_chunks_are_ascii_digits():
    assert pp_chunks("interleaved:2") == ("interleaved", 2)
    for v in ("interleaved:\u0662", "interleaved:\uff12", "interleaved:\u00b2"):
        with pytest.raises(InputError, match="2 to 64"):
            pp_chunks(v)


def test_a_peak_with_a_unit_too_small_is_not_told_to_add_one():
    with pytest.raises(InputError, match=r"give the peak in TF, e\.g\. bf16=165TF$"):
        resolve_gpu("custom:24GB,bf16=0.000001TF")
    with pytest.raises(InputError, match=r"give a unit, e\.g\. bf16=165TF$"):
        resolve_gpu("custom:24GB,bf16=165")


def test_a_huge_network_rate_says_the_limit():
    with pytest.raises(InputError, match=r"<= 100000 Gb/s"):
        parse_inter_node("ib-99999999999999999999999")


def test_job_fields_are_named_as_options_on_the_command_line(capsys):
    # the Job names its field (the Python API's name); the command line names the option
    with pytest.raises(InputError, match=r"^gpus_per_node 2147483648: expected a whole number"):
        Job(model="gpt2", gpus=8, gpus_per_node=2**31)
    err = _err(capsys, ["fit", "gpt2", "--gpus", "8", "--gpus-per-node", str(2**31)])
    assert err.startswith("gpuplan: error: --gpus-per-node 2147483648: expected a whole number")


def test_pipeline_options_without_a_pipeline_are_refused(capsys):
    # accepted with no effect before: an interleaved schedule or embedding/loss parts at --pp 1
    base = ["fit", "llama-3.1-8b", "--mode", "train"]
    err = _err(capsys, [*base, "--pp-schedule", "interleaved:2"])
    assert "--pp-schedule without --pp" in err and "give --pp 2 or more, or drop it" in err
    err = _err(capsys, [*base, "--pp-embedding-part", "--pp-loss-part"])
    assert "--pp-embedding-part, --pp-loss-part without --pp" in err
    # --micro-batches is the pipeline's count; without one it was ignored (speed timed one
    # micro-batch): the fix names the accumulation that does what was meant
    err = _err(capsys, [*base, "--micro-batches", "8"])
    assert ("--micro-batches without --pp: it shapes a pipeline, and there is none; give --pp 2 "
            "or more, or drop it (--grad-accum 8 accumulates micro-batches without a pipeline)"
            in err)


def test_tp_suggestions_respect_the_gpu_count(capsys):
    # gpt2: 12 heads. On 8 GPUs only --tp 4 (or 2, 1) leaves a whole data-parallel degree
    err = _err(capsys, ["fit", "gpt2", "--mode", "train", "--gpus", "8", "--tp", "8"])
    assert "use --tp 4 (or 6 or 12 with --gpus a multiple of it)" in err
    err = _err(capsys, ["fit", "gpt2", "--mode", "train", "--gpus", "24", "--tp", "8"])
    assert err.rstrip().endswith("use --tp 6 or 12")


def test_cluster_refuses_the_other_modes_options(capsys):
    # a training search ignored --concurrency / --max-token-ms, a serving one --global-batch
    base = ["cluster", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--gpus", "8"]
    err = _err(capsys, [*base, "--global-batch", "64", "--concurrency", "8"])
    assert "--concurrency: a --mode infer option" in err and "give --mode infer" in err
    err = _err(capsys, [*base, "--mode", "infer", "--concurrency", "8", "--global-batch", "64"])
    assert "--global-batch: a --mode train option" in err


def test_stage3_counts_are_whole(capsys):
    # a count of elements: 1.5 was rounded to 2 and written into the DeepSpeed config
    err = _err(capsys, ["fit", "llama-3.1-8b", "--mode", "train", "--gpus", "8", "--zero", "3",
                        "--stage3-max-live-parameters", "1.5"])
    assert "--stage3-max-live-parameters '1.5': not a whole number" in err
    from gpuplan.units import parse_count

    assert parse_count("0.3B", what="x", whole=True) == 300_000_000
    assert parse_count("1.5e8", what="x", whole=True) == 150_000_000


def test_speed_suggests_as_fit_does(capsys):
    # speed checks the layout with its own twin of fit's check; both take the suggestions from
    # gpuplan.job (pipeline_fix, tp_fix), so the same bad layout gets the same way out
    for argv, fix in (
            (["--gpus", "8", "--tp", "8"], "use --tp 4 (or 6 or 12 with --gpus a multiple of it)"),
            (["--gpus", "64", "--pp", "4", "--pp-schedule", "interleaved:64"],
             "use --pp-schedule interleaved:8 or fewer chunks")):
        model = "gpt2" if "--tp" in argv else "llama-3.1-8b"
        for command in ("fit", "speed"):
            err = _err(capsys, [command, model, "--gpu", "H100-SXM-80GB", "--mode", "train", *argv])
            assert err.rstrip().endswith(fix), (command, err)


def test_an_interleaved_stage_is_named_by_its_chunks():
    # 32 layers in 2 x 3 parts: 6, 6, 5, 5, 5, 5 layers (the first 32 % 6 one longer); stage 1
    # holds parts 1, 3, 5 = layers 6-11, 17-21, 27-31 (it used to read "layers 6-31")
    from gpuplan.memory import train_memory
    from gpuplan.models import load_model

    m = load_model("llama-3.1-8b")
    mem = train_memory(m, Job(model=m, mode="train", gpus=16, pp=2,
                              pp_schedule="interleaved:3"))
    note = next(n for n in mem.notes if n.startswith("worst pipeline stage"))
    assert note.startswith("worst pipeline stage: 1 of 2 (layers 6-11, 17-21, 27-31, head and "
                           "loss), 1 micro-batch in flight")
