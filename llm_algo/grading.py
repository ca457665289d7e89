"""Grade a lesson in one process: load the namespace, run checks or mutants, report each result.

`grade(request, emit)` is what the worker subprocess runs (see `llm_algo.worker`); the notebook's
`check(...)` uses `check_exercise` in the kernel itself.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import grading_autotune
from .checking import CheckResult, Checks, CheckSpec, execution_path, load_checks, run_check
from .loader import LoadedLesson, load_namespace
from .mutants import Mutant, StaleMutant, load_mutants
from .notebook import Lesson, Mode, NotebookError, read_lesson


@dataclass(frozen=True)
class Unit:
    """One thing to grade: a check in a mode, or a mutant (all of its exercise's checks)."""

    key: str  # "exercise::check" or "mutant::exercise::name"
    mode: Mode

    @property
    def is_mutant(self) -> bool:
        return self.key.startswith("mutant::")


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Interrupt Python code (an infinite loop) after `seconds` with a TimeoutError that says what ran."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"{what} took longer than {seconds:g} s (an infinite loop?)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def result_for_broken_exercise(spec: CheckSpec, loaded: LoadedLesson, path: str) -> CheckResult | None:
    if spec.exercise in loaded.not_attempted:
        return CheckResult(
            spec.key, "not_attempted", spec.description, "the exercise cell raises NotImplementedError", path=path
        )
    if spec.exercise in loaded.broken:
        return CheckResult(spec.key, "failed", spec.description, loaded.broken[spec.exercise], path=path)
    return None


def lost_exercise_cells(lesson: Lesson, registry: Checks) -> dict[str, str]:
    """Exercises that have checks but no exercise cell (its tag or metadata was lost), with the notebook's
    own message; without this, every check would blame a renamed function."""
    lost = {}
    for exercise in registry.exercises():
        try:
            lesson.exercise_cell(exercise)
        except NotebookError as exc:
            lost[exercise] = str(exc)
    return lost


def check_exercise(
    specs: list[CheckSpec],
    loaded: LoadedLesson,
    lesson: Lesson,
    registry: Checks,
    *,
    timeout: float | None = None,
    stop_at_first_failure: bool = False,
    on_start: Callable[[CheckSpec], None] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run checks in order, each exercise's *gate* checks first (memory safety: a kernel that writes out of
    bounds corrupts the process, so once a gate fails the exercise's other checks are not run)."""
    ordered = sorted(specs, key=lambda spec: not spec.gate)
    path = execution_path(registry.triton)
    gated: dict[str, str] = {}  # exercise -> the gate check that failed
    results = []
    for spec in ordered:
        if on_start:
            on_start(spec)
        result = result_for_broken_exercise(spec, loaded, path)
        if result is None and spec.exercise in gated:
            result = CheckResult(
                spec.key,
                "failed",
                spec.description,
                f"not run: the safety check {gated[spec.exercise]!r} failed first; fix that one before the others",
                path=path,
            )
        if result is None:
            limit = time_limit(timeout, f"check {spec.name!r}") if timeout else contextlib.nullcontext()
            with limit:
                result = run_check(spec, loaded.namespace, lesson.name, triton=registry.triton)
            if spec.gate and result.outcome == "failed":
                gated[spec.exercise] = spec.name
        results.append(result)
        if on_result:
            on_result(result)
        if stop_at_first_failure and result.outcome == "failed":
            break
    return results


def mutant_verdict(mutant: Mutant, results: list[CheckResult]) -> CheckResult:
    """A mutant *passes* (is rejected) when some check failed on it."""
    rejected = [r for r in results if r.outcome == "failed"]
    description = f"mutant {mutant.name}: {mutant.mistake}"
    key = mutant.key
    if rejected:
        first = rejected[0]
        return CheckResult(key, "passed", description, f"rejected by {first.key}: {first.summary}", path=first.path)
    ran = [r for r in results if r.outcome == "passed"]
    return CheckResult(
        key,
        "failed",
        description,
        f"survived: all {len(ran)} checks of exercise {mutant.exercise!r} passed on it ({len(results) - len(ran)} skipped). "
        "Strengthen the checks so that this mistake is caught; never delete the mutant.",
    )


def grade(notebook: str, units: list[Unit], *, timeout: float, emit: Callable[[dict], None]) -> None:
    """Grade `units` of one notebook, emitting `{"type": ...}` events: load (a mode), cell, loaded, start and result
    (these two with the unit's key and mode: one child may grade a lesson's checks in several modes)."""
    lesson = read_lesson(notebook)
    registry = load_checks(lesson.id)
    if registry.triton and not registry.tunes_every_config:
        grading_autotune.install()  # the grader's autotuners try their smallest config; a learner's notebook keeps all
    specs = {s.key: s for s in registry.specs}
    mutants = {m.key: m for m in load_mutants(lesson.id)}

    def before_cell(cell):
        emit({"type": "cell", "cell": cell.label()})

    def load(mode: Mode, mutant: Mutant | None = None) -> LoadedLesson:
        emit({"type": "load", "mode": mode})
        with time_limit(timeout, "running the notebook's cells"):
            loaded = load_namespace(lesson, mode, mutant=mutant, before_cell=before_cell)
        loaded.broken.update(lost_exercise_cells(lesson, registry))
        emit({"type": "loaded"})
        return loaded

    def report(result: CheckResult, mode: Mode) -> None:
        emit({"type": "result", "mode": mode, "result": result.to_json()})

    plain = [u for u in units if not u.is_mutant]
    for mode in dict.fromkeys(u.mode for u in plain):
        loaded = load(mode)
        wanted = [specs[u.key] for u in plain if u.mode == mode]
        exercises = {spec.exercise for spec in wanted}
        gates = [
            s for s in registry.specs if s.gate and s.exercise in exercises and s not in wanted
        ]  # run even if deselected
        check_exercise(
            gates + wanted,
            loaded,
            lesson,
            registry,
            timeout=timeout,
            on_start=lambda spec, mode=mode: emit({"type": "start", "key": spec.key, "mode": mode}),
            on_result=lambda result, mode=mode: report(result, mode),
        )

    for unit in (u for u in units if u.is_mutant):
        mutant = mutants[unit.key]
        emit({"type": "start", "key": unit.key, "mode": unit.mode})
        try:
            loaded = load("solution", mutant)
        except StaleMutant as exc:
            verdict = CheckResult(unit.key, "failed", f"mutant {mutant.name}", str(exc))
        except (NotebookError, TimeoutError) as exc:
            verdict = CheckResult(
                unit.key, "passed", f"mutant {mutant.name}: {mutant.mistake}", f"rejected: loading failed ({exc})"
            )
        else:
            results = check_exercise(
                registry.for_exercise(mutant.exercise),
                loaded,
                lesson,
                registry,
                timeout=timeout,
                stop_at_first_failure=True,
            )
            verdict = mutant_verdict(mutant, results)
        report(verdict, unit.mode)
