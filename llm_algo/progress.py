"""The learner's progress: a results file that pytest writes, and the per-part table built from it."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .notebook import NotebookError, read_lesson
from .paths import lesson_notebooks, state_dir

STATUSES = ("passed", "failed", "not attempted")


def results_path() -> Path:
    return state_dir() / "results.json"


def load_results() -> dict:
    try:
        return json.loads(results_path().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def save_results(outcomes: dict[str, dict[str, str]]) -> None:
    """Merge `{lesson id: {"exercise::check": outcome}}` into the results file (a `-k` run updates only
    what it graded)."""
    results = load_results()
    for lesson_id, checks in outcomes.items():
        results.setdefault(lesson_id, {}).update(checks)
    results_path().parent.mkdir(parents=True, exist_ok=True)
    results_path().write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")


def exercise_status(outcomes: list[str]) -> str:
    if "failed" in outcomes:
        return "failed"
    graded = [o for o in outcomes if o != "skipped"]
    if graded and all(o == "passed" for o in graded):
        return "passed"
    return "not attempted"


def part_summary(results: dict, root: Path | None = None, only: set[str] | None = None) -> dict[str, dict[str, int]]:
    """`{part: {"lessons": n, "exercises": n, "passed": n, "failed": n, "not attempted": n}}` over every lesson,
    or over the lesson ids in `only`."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(("lessons", "exercises", *STATUSES), 0))
    for path in lesson_notebooks(root):
        try:
            lesson = read_lesson(path)
        except NotebookError:
            continue  # pytest and lint report broken notebooks; the table counts what it can read
        if only is not None and lesson.id not in only:
            continue
        row = table[lesson.part]
        row["lessons"] += 1
        graded = results.get(lesson.id, {})
        for exercise in lesson.exercise_names():
            outcomes = [o for key, o in graded.items() if key.removeprefix("mutant::").split("::")[0] == exercise]
            row["exercises"] += 1
            row[exercise_status(outcomes)] += 1
    return dict(table)


def render_table(summary: dict[str, dict[str, int]], title: str = "Progress (exercises)") -> str:
    table = Table(title=title)
    for column in ("part", "lessons", "exercises", *STATUSES):
        table.add_column(column, justify="left" if column == "part" else "right")
    totals = dict.fromkeys(("lessons", "exercises", *STATUSES), 0)
    for part, row in sorted(summary.items()):
        table.add_row(part, *(str(row[c]) for c in totals))
        for column in totals:
            totals[column] += row[column]
    table.add_row("total", *(str(v) for v in totals.values()), style="bold")
    buffer = io.StringIO()
    Console(file=buffer, width=110, force_terminal=False, color_system=None).print(table)
    return buffer.getvalue()
