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


def test_every_doc_names_only_choices_the_job_accepts():
    """Anywhere in the README and docs/, ``--flag a|b`` names only accepted values (a subset may
    stand for a context: ``--engine vllm|sglang|trt-llm`` under ``--mode infer``); a renamed or
    removed choice would leave a stale name here."""
    checked = 0
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for o in JOB_OPTIONS:
            choices = choices_of(o.field)
            for m in re.finditer(re.escape(o.flag) + r" ([\w:.-]+(?:\|[\w:.-]+)+)`", text):
                stale = [w for w in m.group(1).split("|") if w not in (choices or ())]
                assert not stale, (path.name, o.flag, stale)
                checked += 1
    assert checked >= 19


def test_fp8_training_md_names_every_narrow_recipe():
    from gpuplan.fp8 import NARROW_RECIPES

    text = (ROOT / "docs" / "fp8_training.md").read_text()
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    assert f"takes {words[len(NARROW_RECIPES)]} narrow recipes" in text
    missing = [r for r in NARROW_RECIPES if f"`{r}`" not in text]
    assert not missing, missing


def _own_options(command: str) -> list[str]:
    """A command's options beyond the job-option group (its parser, as --help lists them)."""
    import argparse

    from gpuplan.cli import build_parser
    from gpuplan.cli._job_options import GROUP_TITLE

    sub = next(a for a in build_parser(command)._actions
               if isinstance(a, argparse._SubParsersAction)).choices[command]
    return [s for g in sub._action_groups if g.title != GROUP_TITLE for a in g._group_actions
            for s in a.option_strings if s.startswith("--") and s != "--help"]


def test_capacity_md_usage_names_every_capacity_option():
    text = (ROOT / "docs" / "capacity.md").read_text()
    usage = text[text.index("    gpuplan capacity MODEL"):text.index("\n\n", text.index(
        "    gpuplan capacity MODEL"))]
    # --download: the model loader's own, as in fit (README)
    missing = [f for f in _own_options("capacity") if f != "--download"
               and not re.search(re.escape(f) + r"(?![-\w])", usage)]
    assert not missing, f"docs/capacity.md's usage lacks {missing}"
