"""What a lesson's setup cell calls: `setup_lesson`, then `check("name")` and `use(...)`.

    lesson = setup_lesson("p02.rmsnorm")
    check, DEVICE = lesson.check, lesson.device

`check` runs the same check functions as `pytest` against the live kernel's definitions and shows a
table; it never raises. `use` hands a later lesson an earlier lesson's building block: the learner's
own when it passes its checks, the reference otherwise, and says which.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import types

from . import device as device_policy
from .check.api import load_checks
from .grading import cache as lesson_cache
from .grading.cache import find_lesson
from .grading.execute import LoadedLesson, current_mode
from .grading.run import check_exercise
from .messages import t
from .notebook import Lesson, NotebookError
from .outcome import Outcome, exercise_status
from .session_report import DEFER_CHECKS_ENV, CheckReport, show


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
            elif (missing := _not_defined_yet(lesson, exercise, self.namespace)) is not None:
                report = CheckReport(self.lesson_id, exercise, (), error=missing, not_graded=True)
            elif (taken := _defined_by_solution(lesson, exercise, self.namespace)) is not None:
                report = CheckReport(self.lesson_id, exercise, (), error=taken, not_graded=True)
            else:
                results = check_exercise(specs, LoadedLesson(self.namespace), lesson, registry, diagnose=True)
                report = CheckReport(self.lesson_id, exercise, tuple(results))
        except Exception as exc:  # a check cell never raises: it reports
            report = CheckReport(self.lesson_id, exercise, (), error=f"{type(exc).__name__}: {exc}")
        show(report)

    def use(self, lesson_id: str, *names: str):
        """Earlier lessons' building blocks: yours when all of its exercise's checks pass, else the reference. The
        earlier notebook runs quietly, once per process and content (see llm_algo.grading.cache); one line per name
        says which version was taken."""
        lesson = find_lesson(lesson_id)
        learner, why_not_yours = None, t("grading the reference solutions")
        if current_mode() != "solution":
            try:
                learner = lesson_cache.namespace(lesson, "learner")
            except Exception as exc:  # a broken earlier notebook must not break this lesson: take the reference
                why_not_yours = t("your notebook does not run", error=f"{type(exc).__name__}: {exc}")
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
            saved = t(" as saved at {time}", time=_saved_at(lesson.path)) if learner is not None else ""
            print(t("using", name=name, source=t(source), notebook=lesson.path.name, saved=saved, reason=reason))
        return values[0] if len(values) == 1 else tuple(values)


def _solution_names(lesson: Lesson, exercise: str) -> list[str]:
    try:
        tree = ast.parse(lesson.solution_cell(exercise).source)
    except (NotebookError, SyntaxError):
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _not_defined_yet(lesson: Lesson, exercise: str, namespace: dict) -> str | None:
    """After a kernel restart nothing is defined: say to run the cells, not "did you rename it?"."""
    names = _solution_names(lesson, exercise)
    try:
        tree = ast.parse(lesson.exercise_cell(exercise).source)
    except (NotebookError, SyntaxError):
        return None
    in_cell = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if names and in_cell.issuperset(names) and not any(name in namespace for name in names):  # not a rename
        return t("run the exercise cell first", names=", ".join(f"`{n}`" for n in names), exercise=exercise)
    return None


def _code_of(obj) -> types.CodeType | None:
    obj = getattr(obj, "func", obj)  # functools.partial
    obj = getattr(obj, "fn", obj)  # a @triton.jit kernel
    code = getattr(obj, "__code__", None)
    if code is None and isinstance(obj, type):
        for member in vars(obj).values():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if code is not None:
                break
    return code


def _defined_by_solution(lesson: Lesson, exercise: str, namespace: dict) -> str | None:
    """A name last defined by the reference solution cell (run by "Run All", after STOP) is not the learner's work:
    `check()` grades nothing then, and says so. The cell's text comes from IPython's line cache."""
    if current_mode() == "solution":
        return None
    try:
        solution = lesson.solution_cell(exercise).source.strip()
    except NotebookError:
        return None
    for name in _solution_names(lesson, exercise):
        code = _code_of(namespace.get(name))
        if code is None:
            continue
        cell = "".join(linecache.getlines(code.co_filename)).strip()
        if cell and cell == solution:
            return t("defined by the solution cell", name=name, exercise=exercise)
    return None


def _saved_at(path) -> str:
    """When the notebook file that `use()` read was saved: edits not saved yet in Jupyter are not in it."""
    import time

    try:
        return time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
    except OSError:
        return "an unknown time"


def _yours_passes(lesson: Lesson, exercise: str, learner: LoadedLesson) -> tuple[bool, str]:
    """Whether the learner's exercise passes all of its checks, and why (or why not) in words. An untouched
    exercise is not attempted without running its checks; one whose checks were all skipped (they need a GPU)
    is not passed."""
    if exercise in lesson.untouched_exercises() and not lesson_cache.grade_untouched():
        count = len(lesson_cache.registry(lesson.id).for_exercise(exercise))
        return False, t(WHY_NOT_YOURS[Outcome.NOT_ATTEMPTED], passed=0, total=count)
    results = lesson_cache.learner_verdict(lesson, exercise, learner)
    passed = sum(r.outcome is Outcome.PASSED for r in results)
    status = exercise_status(r.outcome for r in results)
    if status is Outcome.PASSED:
        return True, t("all checks pass", passed=passed, exercise=exercise)
    return False, t(WHY_NOT_YOURS[status], passed=passed, total=len(results))


WHY_NOT_YOURS = {  # message ids (llm_algo.messages)
    Outcome.FAILED: "yours fails",
    Outcome.NOT_ATTEMPTED: "yours is not attempted",
    Outcome.NEEDS_GPU: "yours needs a GPU",
}


def setup_lesson(lesson_id: str, namespace: dict | None = None) -> LessonSession:
    """Pick the device (switching Triton's interpreter on where needed) and bind `check` to the caller's
    globals, which are the notebook's namespace."""
    session = LessonSession(lesson_id, namespace if namespace is not None else sys._getframe(1).f_globals)
    if session.policy.triton_path == "interpreter":  # kernels the interpreter runs are bounds-checked here too
        from .check import bounds

        bounds.install_when_imported()
    print(f"{lesson_id}: {session.policy.describe()}")
    return session
