"""Name the learner's mistake when a check fails: the exercise's mutants are known mistakes, so run the failed check
on each of them, and where one fails in exactly the same way (same input, expected and got), say which mistake it is.
Each later failure of the exercise narrows the candidates (x * 2 and x + 2 agree at x = 2, not at x = -82).

A fixed hint per check is often wrong for the mistake actually made (padding a softmax with 0 gets an addressing
hint); a mutant that reproduces the learner's wrong output is evidence. Only in the learner's mode, within a time
budget per failed check: the mutants' namespaces are loaded (setup cells and
the mutated solution) once per process and lesson content.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, redirect_stdout

from ..check.api import Checks, CheckSpec
from ..mutation.mutants import Mutant, StaleMutant, load_mutants
from ..notebook import Lesson, NotebookError
from ..outcome import CheckResult, Outcome
from .execute import LoadedLesson, load_namespace

BUDGET_S = 20.0  # a learner waits for the check cell: stop looking after this
_LOCATION = re.compile(r" at [^ ]+\.ipynb, cell \d+.*$")  # where an error was raised: the learner's cell or ours
_loaded: dict[tuple[str, str, str], LoadedLesson | None] = {}


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan")


def _signature(result: CheckResult) -> tuple[str, str, str, str]:
    return (_LOCATION.sub("", result.summary), result.input, result.expected, result.got)


def _same_text(a: str, b: str, rel: float = 1e-2) -> bool:
    """Equal, but numbers only to 2 significant digits' worth: the learner's `1 / sqrt` and a mutant's `rsqrt` make
    the same mistake and may differ in the last bits of what they print."""
    if a == b:
        return True
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        fx, fy = float(x), float(y)
        if fx == fy or (fx != fx and fy != fy):
            continue
        if abs(fx - fy) > rel * max(abs(fx), abs(fy)):
            return False
    return True


def same_failure(a: CheckResult, b: CheckResult) -> bool:
    return all(_same_text(x, y) for x, y in zip(_signature(a), _signature(b), strict=True))


def _mutant_namespace(lesson: Lesson, mutant: Mutant) -> LoadedLesson | None:
    key = (lesson.id, lesson.code_hash("solution"), mutant.key)
    if key not in _loaded:
        try:
            with redirect_stdout(io.StringIO()):  # the setup cell's device line, the cells' prints: not the learner's
                _loaded[key] = load_namespace(lesson, "solution", mutant=mutant)
        except (NotebookError, StaleMutant, TimeoutError):
            _loaded[key] = None
    return _loaded[key]


def matching_mistakes(
    spec: CheckSpec,
    failed: CheckResult,
    lesson: Lesson,
    registry: Checks,
    *,
    run: Callable[[CheckSpec, dict], CheckResult],
    limit: Callable[[float], AbstractContextManager],
    among: list[Mutant] | None = None,
    budget_s: float = BUDGET_S,
) -> list[Mutant]:
    """The exercise's mutants (or those `among` them) whose result on this check is the learner's failure, exactly."""
    found, start = [], time.monotonic()
    candidates = among if among is not None else [m for m in load_mutants(lesson.id) if m.exercise == spec.exercise]
    for mutant in candidates:
        if time.monotonic() - start > budget_s:
            break
        loaded = _mutant_namespace(lesson, mutant)
        if loaded is None or spec.exercise in loaded.broken:
            continue
        left = budget_s - (time.monotonic() - start)
        bound = limit(left) if threading.current_thread() is threading.main_thread() else nullcontext()
        try:
            with bound:
                result = run(spec, loaded.namespace)
        except TimeoutError:
            break
        if result.outcome is Outcome.FAILED and same_failure(result, failed):
            found.append(mutant)
    return found


def diagnosis(mutants: list[Mutant]) -> str:
    if not mutants:
        return ""
    if len(mutants) == 1:
        return f"diagnosis: your result is exactly what code gives that {mutants[0].mistake}"
    return "diagnosis: your result is exactly what code gives that " + ", or that ".join(m.mistake for m in mutants)


def upstream(lesson: Lesson, exercise: str) -> dict[str, list[str]]:
    """The lesson's other exercises whose names this exercise's solution uses: {exercise: [names]} (a module's
    forward calls the `rms_norm` of the exercise before it)."""
    import ast

    defined: dict[str, str] = {}
    for cell in lesson.tagged("solution"):
        try:
            body = ast.parse(cell.source).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.setdefault(node.name, cell.solution)
    try:
        tree = ast.parse(lesson.solution_cell(exercise).source)
    except (NotebookError, SyntaxError):
        return {}
    used: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and defined.get(node.id) not in (None, exercise):
            names = used.setdefault(defined[node.id], [])
            if node.id not in names:
                names.append(node.id)
    return used


def blame_upstream(failing: dict[str, list[str]]) -> str:
    """`failing`: {earlier exercise: [its names this one uses]} for those that fail their own checks."""
    parts = [f"exercise {name!r} (your {', '.join(f'`{n}`' for n in names)})" for name, names in failing.items()]
    return f"this exercise uses {' and '.join(parts)}, which fails its own checks: fix that first"
