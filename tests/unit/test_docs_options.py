"""The README's job-option list and names table stay the code's (issue 27's one vocabulary, as
the reader meets it): every option of the one job-option group is named in the README's list,
an option written with its choices (``--runtime auto|eager|...``) lists exactly the choices the
Job accepts, and the names table holds every training recipe, weight format and optimizer.
The lists are derived from the code here, never typed twice."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplan.cli._job_options import JOB_OPTIONS
from gpuplan.job import choices_of

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _job_options_paragraph() -> str:
    start = README.index("Job options --")
    return README[start:README.index("`fit`'s own:", start)]


def test_the_readme_names_every_job_option():
    text = _job_options_paragraph()
    missing = [o.flag for o in JOB_OPTIONS if not re.search(re.escape(o.flag) + r"(?![-\w])", text)]
    assert not missing, f"README's job-option list lacks {missing}"


def test_an_option_written_with_its_choices_lists_the_jobs():
    """``--flag a|b|c`` in the README: the set is the field's choices (a list field's names
    written the same way)."""
    text = _job_options_paragraph()
    checked = 0
    for o in JOB_OPTIONS:
        m = re.search(re.escape(o.flag) + r" ([\w:.-]+(?:\|[\w:.-]+)+)`", text)
        if m is None:
            continue
        written = m.group(1).split("|")
        assert sorted(written) == sorted(choices_of(o.field)), (o.flag, written)
        checked += 1
    assert checked >= 15


def _names_row(label: str) -> str:
    return next(line for line in README.splitlines() if line.startswith(f"| {label} |"))


def test_the_names_table_holds_every_recipe_format_and_optimizer():
    for label, field in (("training recipes", "precision"), ("inference formats", "infer_precision"),
                         ("optimizers", "optimizer")):
        row = _names_row(label)
        missing = [c for c in choices_of(field) if f"`{c}`" not in row]
        assert not missing, (label, missing)


def test_the_engine_list_is_the_engines_table():
    text = _job_options_paragraph()
    engines = text[text.index("`--engine`"):text.index('"The engine" below')]
    missing = [e for e in choices_of("engine") if f"`{e}`" not in engines]
    assert not missing, missing
