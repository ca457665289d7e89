"""Every lesson notebook of this checkout runs top to bottom headlessly (nbclient) with its reference solutions in
place, and every check cell reports "passed". The self-check runs this file as its own step."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_lab import MAIN_REPO

from llm_algo.paths import lesson_notebooks
from llm_algo.runner import run_notebook

NOTEBOOKS = lesson_notebooks(MAIN_REPO)


def test_there_are_lessons() -> None:
    assert NOTEBOOKS  # the parametrized test below must not pass by collecting nothing


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[f"{n.parent.name}/{n.name}" for n in NOTEBOOKS])
def test_lesson_runs_headless_with_solutions(real_repo: Path, notebook: Path) -> None:
    before = notebook.read_bytes()
    report = run_notebook(notebook, solutions=True)
    assert not report.error, f"{report.notebook}: {report.error}"
    assert report.checks, f"{report.notebook}: no check cell reported a result"
    assert all(status == "passed" for status in report.checks.values()), f"{report.notebook}: {report.checks}"
    assert notebook.read_bytes() == before, "the runner must never write to the source notebook"
    assert report.executed_copy.exists() and not report.executed_copy.is_relative_to(notebook.parent)
