"""Grade a lesson in one process: load the namespace, run checks or mutants, report each result.

`grade(notebook, units, ...)` is what a grading child runs (see `llm_algo.worker`); the notebook's `check(...)`
runs `llm_algo.grading.run.check_exercise` in the kernel itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from .. import device as device_policy
from ..check.api import load_checks
from ..check.calls import reset_options, write_options
from ..mutation.mutants import Mutant, StaleMutant, load_mutants
from ..notebook import Mode, NotebookError, read_lesson
from ..outcome import CheckResult, Outcome, Unit
from ..paths import state_dir
from . import autotune
from .execute import LoadedLesson, load_namespace
from .run import check_exercise, lost_exercise_cells, time_limit


def mutant_verdict(mutant: Mutant, results: list[CheckResult]) -> CheckResult:
    """A mutant *passes* (is rejected) when some check failed on it; it *needs a GPU* when no check could run here
    (every check of its exercise needs CUDA); otherwise it survived."""
    rejected = [r for r in results if r.outcome is Outcome.FAILED]
    description = f"mutant {mutant.name}: {mutant.mistake}"
    key = mutant.key
    if rejected:
        first = rejected[0]
        return CheckResult(
            key, Outcome.PASSED, description, f"rejected by {first.key}: {first.summary}", path=first.path
        )
    ran = [r for r in results if r.outcome is Outcome.PASSED]
    if not ran and any(r.outcome is Outcome.NEEDS_GPU for r in results):  # a CUDA C++ exercise on a CPU
        why = (
            "only its exercise's compiled checks (a GPU) can reject it"
            if mutant.requires_compiled
            else "every check of this exercise needs a CUDA GPU"
        )
        return CheckResult(key, Outcome.NEEDS_GPU, description, f"not graded here: {why}")
    return CheckResult(
        key,
        Outcome.FAILED,
        description,
        f"survived: all {len(ran)} checks of exercise {mutant.exercise!r} passed on it ({len(results) - len(ran)} skipped). "
        "Strengthen the checks so that this mistake is caught; never delete the mutant.",
    )


def _compiled_mutant_here(lesson, mutant: Mutant) -> CheckResult:
    """A `requires_compiled` mutant where Triton is interpreted: stale if its text is not in the solution, else
    *needs a GPU* without running anything (only its exercise's compiled checks could reject it)."""
    try:
        for cell in lesson.code_plan("solution"):
            if cell.tag == "solution" and (cell.exercise or cell.solution) == mutant.exercise:
                mutant.apply(cell.source)
    except StaleMutant as exc:
        return CheckResult(mutant.key, Outcome.FAILED, f"mutant {mutant.name}", str(exc))
    return mutant_verdict(mutant, [CheckResult(mutant.key, Outcome.NEEDS_GPU, mutant.name, "needs compiled Triton")])


def grade(notebook: str, units: list[Unit], *, timeout: float, emit: Callable[[dict], None]) -> None:
    """Grade `units` of one notebook, emitting `{"type": ...}` events: load (a mode), cell, loaded, start and result
    (these two with the unit's key and mode: one child may grade a lesson's checks in several modes)."""
    try:
        _grade(notebook, units, timeout=timeout, emit=emit)
    finally:
        if "llm_algo.distributed.world" in sys.modules:  # the rank processes a parallelism lesson's checks started
            sys.modules["llm_algo.distributed.world"].close_worlds()


def _grade(notebook: str, units: list[Unit], *, timeout: float, emit: Callable[[dict], None]) -> None:
    lesson = read_lesson(notebook)
    registry = load_checks(lesson.id)
    if registry.triton and not registry.tunes_every_config:
        autotune.install()  # the grader's autotuners try their smallest config; a learner's notebook keeps all
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
        reset_options()
        check_exercise(
            gates + wanted,
            loaded,
            lesson,
            registry,
            timeout=timeout,
            diagnose=mode == "learner",
            on_start=lambda spec, mode=mode: emit({"type": "start", "key": spec.key, "mode": mode}),
            on_result=lambda result, mode=mode: report(result, mode),
        )
        if mode == "solution" and len(wanted) == len(registry.specs):  # every check ran: the options they varied
            write_options(state_dir() / "options" / f"{lesson.id}.json")

    for unit in (u for u in units if u.is_mutant):
        mutant = mutants[unit.key]
        emit({"type": "start", "key": unit.key, "mode": unit.mode})
        if mutant.requires_compiled and device_policy.policy().triton_path != "compiled":
            report(_compiled_mutant_here(lesson, mutant), unit.mode)  # nothing to run: skip loading the lesson
            continue
        try:
            loaded = load("solution", mutant)
        except StaleMutant as exc:
            verdict = CheckResult(unit.key, Outcome.FAILED, f"mutant {mutant.name}", str(exc))
        except (NotebookError, TimeoutError) as exc:
            verdict = CheckResult(
                unit.key, Outcome.PASSED, f"mutant {mutant.name}: {mutant.mistake}", f"rejected: loading failed ({exc})"
            )
        else:
            specs_of_exercise = registry.for_exercise(mutant.exercise)
            if mutant.requires_compiled:  # only a compiled check can reject it: elsewhere it needs a GPU
                specs_of_exercise = [s for s in specs_of_exercise if s.requires_compiled]
            results = check_exercise(
                specs_of_exercise,
                loaded,
                lesson,
                registry,
                timeout=timeout,
                stop_at_first_failure=True,
            )
            verdict = mutant_verdict(mutant, results)
        report(verdict, unit.mode)
