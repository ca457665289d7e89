"""Every lesson notebook of this checkout runs top to bottom headlessly (nbclient) with its reference solutions in
place, and every check cell runs and reports. The self-check runs this file as its own step, after `pytest
--self-check` has graded every check: here the check cells only report "graded by the self-check" (the kernels
start with $LLM_ALGO_DEFER_CHECKS), so the checks are not paid for twice. Two kernels run at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_lab import MAIN_REPO, clear_caches

from llm_algo.headless import RunReport, run_notebooks
from llm_algo.paths import lesson_notebooks
from llm_algo.session_report import DEFERRED

NOTEBOOKS = lesson_notebooks(MAIN_REPO)
KERNELS_AT_ONCE = 2


def test_there_are_lessons() -> None:
    assert NOTEBOOKS  # the parametrized test below must not pass by collecting nothing


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> dict[Path, tuple[bytes, RunReport, bytes]]:
    """Run every selected notebook (two kernels at a time); per notebook its bytes before, the report, and after."""
    selected = {
        item.callspec.params.get("notebook")
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }
    paths = [path for path in NOTEBOOKS if path in selected]
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("LLM_ALGO_ROOT", raising=False)
        clear_caches()
        before = {path: path.read_bytes() for path in paths}
        reports = run_notebooks(paths, solutions=True, defer_checks=True, jobs=KERNELS_AT_ONCE)
        clear_caches()
    return {path: (before[path], report, path.read_bytes()) for path, report in zip(paths, reports, strict=True)}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[f"{n.parent.name}/{n.name}" for n in NOTEBOOKS])
def test_lesson_runs_headless_with_solutions(runs: dict, notebook: Path) -> None:
    before, report, after = runs[notebook]
    assert isinstance(report, RunReport), report  # not a NotebookError
    assert not report.error, f"{report.notebook}: {report.error}"
    assert report.checks, f"{report.notebook}: no check cell reported a result"
    assert all(status == DEFERRED for status in report.checks.values()), f"{report.notebook}: {report.checks}"
    assert after == before, "the runner must never write to the source notebook"
    assert report.executed_copy.exists() and not report.executed_copy.is_relative_to(notebook.parent)
