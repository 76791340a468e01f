"""One vocabulary (issue 27, part 4d): each choice is defined once -- a Literal of the job's
vocabulary, the engines' table, the formats' tables -- and the CLI's option help lists exactly
those, with the Job's own default; nothing is typed twice to drift apart."""

from __future__ import annotations

from gpuplan.cli._job_options import JOB_OPTIONS, help_of
from gpuplan.engines.profiles import ENGINE_NAMES
from gpuplan.formats import OPTIMIZERS, TRAINING_RECIPES, WEIGHT_FORMATS
from gpuplan.job import choices_of, flat_defaults


def test_choices_come_from_their_tables():
    assert choices_of("engine") == ENGINE_NAMES
    assert choices_of("optimizer") == tuple(OPTIMIZERS)
    assert choices_of("precision") == tuple(TRAINING_RECIPES)
    assert choices_of("infer_precision") == ("auto", *WEIGHT_FORMATS)  # auto: the checkpoint's
    assert choices_of("checkpointing") == ("none", "selective", "full")
    assert choices_of("batch") is None  # a free number


def test_every_choice_is_in_its_options_help():
    """Each option whose field has choices names every one of them in its help (the hand-written
    list of optimizers had lost 'lamb' before the help was generated); a list option's help names
    the names each item may be (--cuda-graph-scope, --recompute-modules)."""
    checked = 0
    for o in JOB_OPTIONS:
        choices = choices_of(o.field)
        if not choices or o.kind not in ("str", "list"):
            continue
        text = help_of(o)
        missing = [c for c in choices if c not in text]
        assert not missing, (o.flag, missing)
        checked += 1
    assert checked >= 14
    assert "lamb" in help_of(next(o for o in JOB_OPTIONS if o.field == "optimizer"))


def test_the_help_states_the_jobs_defaults():
    by = {o.field: o for o in JOB_OPTIONS}
    assert f"default {flat_defaults()['optimizer']}" in help_of(by["optimizer"])
    assert f"default {flat_defaults()['precision']}" in help_of(by["precision"])
    assert "default auto = transformers" in help_of(by["engine"])
