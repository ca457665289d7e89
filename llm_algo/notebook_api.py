"""What a lesson's setup cell calls: `setup_lesson`, then `check("name")` and `use(...)`.

    lesson = setup_lesson("p02.rmsnorm")
    check, DEVICE = lesson.check, lesson.device

`check` runs the same check functions as `pytest` against the live kernel's definitions and shows a
table; it never raises. `use` hands a later lesson an earlier lesson's building block: the learner's
own when it passes its checks, the reference otherwise, and says which.
"""

from __future__ import annotations

import ast
import html
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import device as device_policy
from . import lesson_cache
from .checking import CheckResult, load_checks
from .grading import check_exercise
from .loader import LoadedLesson, current_mode
from .notebook import Lesson, NotebookError, read_lesson
from .paths import lesson_notebooks

CHECK_MIME = "application/vnd.llm-algo.check+json"  # read back by the headless runner
# Set in a kernel's environment by the headless runner when the self-check grades the checks (`pytest
# --self-check`): check cells then show "graded by the self-check" instead of running the checks a second time.
DEFER_CHECKS_ENV = "LLM_ALGO_DEFER_CHECKS"
DEFERRED = "deferred"
SYMBOLS = {
    "passed": "✅ passed",
    "failed": "❌ failed",
    "not_attempted": "⏳ not attempted",
    "skipped": "⏭ skipped",
    DEFERRED: "⏭ graded by the self-check",
}


@dataclass(frozen=True)
class CheckReport:
    lesson: str
    exercise: str
    results: tuple[CheckResult, ...]
    error: str = ""

    deferred: bool = False  # the check cell ran, but its checks are graded by the self-check (see DEFER_CHECKS_ENV)

    @property
    def status(self) -> str:
        outcomes = [r.outcome for r in self.results]
        if self.deferred and not self.error:
            return DEFERRED
        if self.error or "failed" in outcomes:
            return "failed"
        if outcomes and all(o in ("passed", "skipped") for o in outcomes) and "passed" in outcomes:
            return "passed"
        return "not_attempted"

    def headline(self) -> str:
        if self.status == DEFERRED:
            return f"{self.exercise}: {SYMBOLS[DEFERRED]}"
        passed = sum(r.outcome == "passed" for r in self.results)
        return f"{self.exercise}: {SYMBOLS[self.status]} ({passed}/{len(self.results)} checks passed)"

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (r.description, SYMBOLS[r.outcome], r.path, r.input, r.expected, r.got, r.summary, r.hint)
            for r in self.results
        ]

    def __repr__(self) -> str:
        lines = [self.headline()] + ([f"  error: {self.error}"] if self.error else [])
        for description, outcome, path, input_, expected, got, summary, hint in self._rows():
            lines.append(f"  {outcome:<18} {description} [{path}]")
            for label, value in (
                ("input", input_),
                ("expected", expected),
                ("got", got),
                ("why", summary),
                ("likely mistake", hint),
            ):
                if value and outcome != SYMBOLS["passed"]:
                    lines.append(f"      {label}: {value}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        header = "".join(
            f"<th>{h}</th>"
            for h in ("check", "result", "ran on", "input", "expected", "got", "mismatch", "likely mistake")
        )
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self._rows()
        )
        error = f"<p><b>error:</b> {html.escape(self.error)}</p>" if self.error else ""
        return f"<p><b>{html.escape(self.headline())}</b></p>{error}<table><tr>{header}</tr>{body}</table>"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {
            "text/plain": repr(self),
            "text/html": self._repr_html_(),
            CHECK_MIME: {
                "lesson": self.lesson,
                "exercise": self.exercise,
                "status": self.status,
                "results": [r.to_json() for r in self.results],
                "error": self.error,
            },
        }


def _show(report: CheckReport) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(report)
    else:
        print(repr(report))


@lru_cache(maxsize=1)
def _lesson_index() -> dict[str, Path]:
    index = {}
    for path in lesson_notebooks():
        try:
            index[lesson_cache.lesson_at(path).id] = path
        except (NotebookError, OSError):
            continue
    return index


def find_lesson(lesson_id: str) -> Lesson:
    path = _lesson_index().get(lesson_id)
    if path is None:
        raise NotebookError(f"no lesson with id {lesson_id!r} in this checkout")
    try:
        return lesson_cache.lesson_at(path)
    except FileNotFoundError:
        return read_lesson(path)  # says which notebook is gone


def defining_exercise(lesson: Lesson, name: str) -> str:
    """The exercise whose reference solution defines `name` at top level (the solution, not the learner's cell,
    which may not even parse yet)."""
    for cell in lesson.tagged("solution"):
        tree = ast.parse(cell.source)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return cell.solution
    raise NotebookError(f"{lesson.name} has no exercise that defines {name!r}")


class LessonSession:
    def __init__(self, lesson_id: str, namespace: dict):
        self.lesson_id = lesson_id
        self.namespace = namespace
        self.policy = device_policy.policy()
        self.device = self.policy.device
        self.triton_device = self.policy.triton_device  # where tensors for Triton kernels live

    def check(self, exercise: str) -> None:
        """Grade one exercise against the kernel's current definitions and show the table."""
        try:
            lesson = find_lesson(self.lesson_id)
            registry = load_checks(self.lesson_id)
            specs = registry.for_exercise(exercise)
            if not specs:
                raise NotebookError(f"lesson {self.lesson_id} has no checks for an exercise named {exercise!r}")
            if os.environ.get(DEFER_CHECKS_ENV) == "1":
                report = CheckReport(self.lesson_id, exercise, (), deferred=True)
            else:
                results = check_exercise(specs, LoadedLesson(self.namespace), lesson, registry)
                report = CheckReport(self.lesson_id, exercise, tuple(results))
        except Exception as exc:  # a check cell never raises: it reports
            report = CheckReport(self.lesson_id, exercise, (), error=f"{type(exc).__name__}: {exc}")
        _show(report)

    def use(self, lesson_id: str, *names: str):
        """Earlier lessons' building blocks: yours when all of its exercise's checks pass, else the reference. The
        earlier notebook runs quietly, once per process and content (see llm_algo.lesson_cache); one line per name
        says which version was taken."""
        lesson = find_lesson(lesson_id)
        learner, why_not_yours = None, "grading the reference solutions"
        if current_mode() != "solution":
            try:
                learner = lesson_cache.namespace(lesson, "learner")
            except Exception as exc:  # a broken earlier notebook must not break this lesson: take the reference
                why_not_yours = f"your notebook does not run ({type(exc).__name__}: {exc})"
        values = []
        for name in names:
            exercise = defining_exercise(lesson, name)
            source, reason = "reference", why_not_yours
            if learner is not None:
                taken, reason = _yours_passes(lesson, exercise, learner)
                if taken:
                    source = "yours"
                    values.append(learner.namespace[name])
            if source == "reference":
                values.append(lesson_cache.namespace(lesson, "solution").namespace[name])
            print(f"{name}: using {source} from {lesson.path.name} — {reason}")
        return values[0] if len(values) == 1 else tuple(values)


def _yours_passes(lesson: Lesson, exercise: str, learner: LoadedLesson) -> tuple[bool, str]:
    """Whether the learner's exercise passes all of its checks, and why (or why not) in words. An untouched
    exercise is not attempted without running its checks; one whose checks were all skipped (they need a GPU)
    is not passed."""
    if exercise in lesson.untouched_exercises() and not lesson_cache.grade_untouched():
        count = len(lesson_cache.registry(lesson.id).for_exercise(exercise))
        return False, f"yours is not attempted (0/{count} checks pass)"
    results = lesson_cache.learner_verdict(lesson, exercise, learner)
    passed = sum(r.outcome == "passed" for r in results)
    status = CheckReport(lesson.id, exercise, tuple(results)).status
    if status == "passed":
        return True, f"all {passed} checks of exercise {exercise!r} pass"
    return False, f"yours is {status.replace('_', ' ')} ({passed}/{len(results)} checks pass)"


def setup_lesson(lesson_id: str, namespace: dict | None = None) -> LessonSession:
    """Pick the device (switching Triton's interpreter on where needed) and bind `check` to the caller's
    globals, which are the notebook's namespace."""
    session = LessonSession(lesson_id, namespace if namespace is not None else sys._getframe(1).f_globals)
    print(f"{lesson_id}: {session.policy.describe()}")
    return session
