"""The learner's progress: a results file that pytest writes, and the per-part table built from it."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .messages import t
from .notebook import Lesson, NotebookError, read_lesson
from .outcome import Outcome, exercise_outcomes, exercise_status
from .paths import lesson_notebooks, state_dir
from .state_files import read_json, update_json

STATUSES = tuple(o.label for o in (Outcome.PASSED, Outcome.FAILED, Outcome.NOT_ATTEMPTED, Outcome.NEEDS_GPU))


def results_path() -> Path:
    return state_dir() / "results.json"


REBUILD = "run `pytest` on your notebooks to grade them again"


def load_results() -> dict:
    results = read_json(results_path(), default={}, rebuild=REBUILD)
    return results if isinstance(results, dict) else {}


def save_results(outcomes: dict[str, dict[str, str]]) -> None:
    """Merge `{lesson id: {"exercise::check": outcome}}` into the results file (a `-k` run updates only what it
    graded), atomically and under a lock: two `pytest` runs in two terminals both keep their results."""

    def merge(results) -> dict:
        results = results if isinstance(results, dict) else {}
        for lesson_id, checks in outcomes.items():
            results.setdefault(lesson_id, {}).update(checks)
        return results

    update_json(results_path(), merge, default={}, rebuild=REBUILD)


def lesson_summary(results: dict, root: Path | None = None) -> dict[str, dict]:
    """`{lesson id: {"part": part, "title": title, "exercises": n, "passed": n, ...one count per status}}` over every
    lesson, in course order."""
    summary = {}
    for lesson in _readable_lessons(root):
        row = {"part": lesson.part, "title": _english_title(lesson), "exercises": 0, **dict.fromkeys(STATUSES, 0)}
        graded = results.get(lesson.id, {})
        for exercise in lesson.exercise_names():
            row["exercises"] += 1
            row[exercise_status(exercise_outcomes(graded, exercise)).label] += 1
        summary[lesson.id] = row
    return summary


def part_summary(results: dict, root: Path | None = None, only: set[str] | None = None) -> dict[str, dict[str, int]]:
    """`{part: {"lessons": n, "exercises": n, "passed": n, ...one count per status}}` over every lesson,
    or over the lesson ids in `only`."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(("lessons", "exercises", *STATUSES), 0))
    for lesson_id, lesson_row in lesson_summary(results, root).items():
        if only is not None and lesson_id not in only:
            continue
        row = table[lesson_row["part"]]
        row["lessons"] += 1
        for column in ("exercises", *STATUSES):
            row[column] += lesson_row[column]
    return dict(table)


def _readable_lessons(root: Path | None) -> Iterator[Lesson]:
    for path in lesson_notebooks(root):
        try:
            yield read_lesson(path)
        except NotebookError:
            continue  # pytest and lint report broken notebooks; the table counts what it can read


def _english_title(lesson: Lesson) -> str:
    title = lesson.meta.get("title")
    return str(title.get("en", lesson.id) if isinstance(title, dict) else title or lesson.id)


def render_table(summary: dict[str, dict[str, int]], title: str | None = None) -> str:
    """The per-part table, its headings in the learner's language (llm_algo.messages)."""
    table = Table(title=t("Progress (exercises)") if title is None else title)
    for column in ("part", "lessons", "exercises", *STATUSES):
        table.add_column(t(column), justify="left" if column == "part" else "right")
    totals = dict.fromkeys(("lessons", "exercises", *STATUSES), 0)
    for part, row in sorted(summary.items()):
        table.add_row(part, *(str(row[c]) for c in totals))
        for column in totals:
            totals[column] += row[column]
    table.add_row(t("total"), *(str(v) for v in totals.values()), style="bold")
    buffer = io.StringIO()
    Console(file=buffer, width=110, force_terminal=False, color_system=None).print(table)
    return buffer.getvalue()
