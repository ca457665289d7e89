"""Running checks: one check against a namespace (seeded, time-limited, restrictions enforced, kernels
bounds-checked), and an exercise's checks in order, gate checks first. Never raises for the learner's mistakes."""

from __future__ import annotations

import contextlib
import random
import signal
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from .. import device as device_policy
from ..check.api import Checks, CheckSpec, Exercise
from ..check.calls import CallRecorder
from ..check.failure import CheckFailed, NotAttempted
from ..check.restrictions import Enforcement
from ..messages import MESSAGES, t
from ..notebook import Lesson, NotebookError, notebook_location, source_location
from ..outcome import CheckResult, Outcome
from .diagnose import blame_upstream, diagnosis, matching_mistakes, upstream
from .execute import LoadedLesson
from .interpreted import checked_kernels


def timed_out(what: str, seconds: float) -> str:
    """The TimeoutError's message, and so the failed check's summary (check_exercise looks for it there)."""
    return t("time limit", what=what, seconds=f"{seconds:g}")


def ran_past_time_limit(summary: str) -> bool:
    """Whether a failed check's summary is a time limit's, in any language (`mutate` counts those apart)."""
    words = (text.split("{what}")[1].split("{seconds}")[0].strip() for text in MESSAGES["time limit"].values())
    return "TimeoutError" in summary and any(word in summary for word in words)


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Interrupt Python code (an infinite loop) after `seconds` with a TimeoutError that says what ran."""

    def on_alarm(signum, frame):
        raise TimeoutError(timed_out(what, seconds))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def seed_for(spec: CheckSpec) -> int:
    return zlib.crc32(f"{spec.lesson_id}:{spec.key}".encode())


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is a dependency, but a check must not die for want of it
        pass


def execution_path(triton: bool) -> str:
    policy = device_policy.policy()
    return f"triton {policy.triton_path}" if triton else policy.device


def _caused_by_not_implemented(exc: BaseException | None, namespace: dict) -> bool:
    """A check that wrapped the exercise's NotImplementedError in another error still means not attempted."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if _raised_by_the_learner(exc, namespace) or _skeleton_kernel_compile_error(exc):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _raised_by_the_learner(exc: BaseException, namespace: dict) -> bool:
    """A NotImplementedError raised by the notebook's own code (the skeleton's `raise NotImplementedError`: its frame's
    globals are the lesson's namespace, in a grading child and in a live kernel alike), not one that torch raised for
    an input it does not support (`F.cross_entropy` of integer logits): that one is a mistake to report."""
    if not isinstance(exc, NotImplementedError):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_globals is namespace


def _skeleton_kernel_compile_error(exc: BaseException) -> bool:
    """A GPU cannot compile a `@triton.jit` skeleton whose body is `raise NotImplementedError` (the interpreter runs
    it as Python and raises): Triton's compile error quotes that source line."""
    return type(exc).__module__.startswith("triton") and "raise NotImplementedError" in str(exc)


def _not_attempted(exc: BaseException, common: dict) -> CheckResult:
    where = notebook_location(exc)
    return CheckResult(
        outcome=Outcome.NOT_ATTEMPTED,
        summary=t("still raises NotImplementedError", where=t(" at {where}", where=where) if where else ""),
        **common,
    )


def run_check(spec: CheckSpec, namespace: dict, lesson_name: str, *, triton: bool = False) -> CheckResult:
    """Run one check against a namespace; never raises (but lets KeyboardInterrupt through)."""
    path = execution_path(triton)
    common = {"key": spec.key, "description": spec.description, "path": path}
    if spec.requires_cuda and not device_policy.policy().has_cuda:
        return CheckResult(outcome=Outcome.NEEDS_GPU, summary=t("needs CUDA"), **common)
    if spec.requires_compiled and device_policy.policy().triton_path != "compiled":
        return CheckResult(outcome=Outcome.NEEDS_GPU, summary=t("needs compiled Triton"), **common)
    capability = device_policy.policy().capability
    if spec.requires_capability is not None and capability is not None and capability < spec.requires_capability:
        need = ".".join(map(str, spec.requires_capability))
        have = ".".join(map(str, capability))
        return CheckResult(outcome=Outcome.NEEDS_GPU, summary=t("needs capability", need=need, have=have), **common)
    if spec.requires_gpu_memory_gib is not None and device_policy.policy().has_cuda:
        import torch

        have_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
        if have_gib < spec.requires_gpu_memory_gib:
            need, have = f"{spec.requires_gpu_memory_gib:g}", f"{have_gib:.0f}"
            return CheckResult(outcome=Outcome.NEEDS_GPU, summary=t("needs GPU memory", need=need, have=have), **common)
    seed_everything(seed_for(spec))
    start = time.perf_counter()
    with (
        checked_kernels(namespace, gate=triton and spec.gate),
        Enforcement(spec.restriction, namespace, spec.func.__globals__, source_location) as enforcement,
        CallRecorder(namespace, spec.in_place) as recorder,
    ):
        ex = recorder.exercise(enforcement.exercise(Exercise(namespace, lesson_name)))
        result = _outcome(spec, ex, namespace, common, start)
    violation = enforcement.violation(passed=result.outcome is Outcome.PASSED)
    if violation:  # a forbidden call fails the check even when the learner's code (or the check) swallowed it
        return replace(result, outcome=Outcome.FAILED, summary=violation, input="", expected="", got="", hint="")
    changed = recorder.found
    if changed is not None and result.outcome is not Outcome.FAILED:  # an input changed, even if something caught it
        return replace(
            result,
            outcome=Outcome.FAILED,
            summary=changed.summary,
            input=changed.input,
            expected=changed.expected,
            got=changed.got,
            hint=changed.hint,
        )
    return result


def _outcome(spec: CheckSpec, ex, namespace: dict, common: dict, start: float) -> CheckResult:
    try:
        spec.func(ex)
    except NotImplementedError as exc:
        if isinstance(exc, NotAttempted) or _raised_by_the_learner(exc, namespace):
            return _not_attempted(exc, common)
        return _failed(spec, exc, common, start)
    except CheckFailed as exc:
        return CheckResult(
            outcome=Outcome.FAILED,
            summary=exc.summary,
            input=exc.input,
            expected=exc.expected,
            got=exc.got,
            hint=exc.hint or spec.hint,
            seconds=time.perf_counter() - start,
            **common,
        )
    except Exception as exc:  # the learner's code raised: report it where it happened
        # also a Triton compile error of a kernel that is still a skeleton
        if _caused_by_not_implemented(exc, namespace):
            return _not_attempted(exc, common)
        return _failed(spec, exc, common, start)
    return CheckResult(outcome=Outcome.PASSED, seconds=time.perf_counter() - start, **common)


def _failed(spec: CheckSpec, exc: BaseException, common: dict, start: float) -> CheckResult:
    where = notebook_location(exc)
    kind = "assertion failed" if isinstance(exc, AssertionError) else f"raised {type(exc).__name__}"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return CheckResult(
        outcome=Outcome.FAILED,
        summary=f"{kind}{': ' + message if message else ''}{' at ' + where if where else ''}",
        hint=spec.hint,
        seconds=time.perf_counter() - start,
        **common,
    )


def result_for_broken_exercise(spec: CheckSpec, loaded: LoadedLesson, path: str) -> CheckResult | None:
    if spec.exercise in loaded.not_attempted:
        return CheckResult(
            spec.key,
            Outcome.NOT_ATTEMPTED,
            spec.description,
            t("the exercise cell raises NotImplementedError"),
            path=path,
        )
    if spec.exercise in loaded.broken:
        return CheckResult(spec.key, Outcome.FAILED, spec.description, loaded.broken[spec.exercise], path=path)
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
    diagnose: bool = False,
    on_start: Callable[[CheckSpec], None] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run checks in order, each exercise's *gate* checks first (memory safety: a kernel that writes out of
    bounds corrupts the process, so once a gate fails the exercise's other checks are not run). After a check runs
    past its time limit (an infinite loop), the exercise's other checks are not run either: each would wait as long.
    With `diagnose` (the learner's code), failures are compared with the exercise's mutants' (grading.diagnose)."""
    ordered = sorted(specs, key=lambda spec: not spec.gate)
    path = execution_path(registry.triton)
    stopped: dict[str, str] = {}  # exercise -> why its remaining checks are not run
    candidates: dict[str, list] = {}  # exercise -> the mutants that reproduce each of its failures so far
    statuses: dict[str, Outcome] = {}  # exercise -> failed if any of its checks failed in this call
    results = []
    for spec in ordered:
        if on_start:
            on_start(spec)
        result = result_for_broken_exercise(spec, loaded, path)
        if result is None and spec.exercise in stopped:
            result = CheckResult(spec.key, Outcome.NOT_RUN, spec.description, stopped[spec.exercise], path=path)
        if result is None:
            what = f"check {spec.name!r}"
            limit = time_limit(timeout, what) if timeout else contextlib.nullcontext()
            with limit:
                result = run_check(spec, loaded.namespace, lesson.name, triton=registry.triton)
            if (
                timeout
                and result.outcome is Outcome.FAILED
                and f"TimeoutError: {timed_out(what, timeout)}" in result.summary
            ):
                stopped[spec.exercise] = t("not run after a time-out", name=repr(spec.name))
            elif result.outcome is Outcome.FAILED:
                if diagnose:
                    result = _diagnosed(spec, result, loaded, lesson, registry, candidates, statuses)
                if spec.gate:
                    stopped[spec.exercise] = t("not run after a gate", name=repr(spec.name))
        results.append(result)
        if result.outcome is Outcome.FAILED or spec.exercise not in statuses:
            statuses[spec.exercise] = result.outcome
        if on_result:
            on_result(result)
        if stop_at_first_failure and result.outcome is Outcome.FAILED:
            break
    return results


def _diagnosed(
    spec: CheckSpec,
    result: CheckResult,
    loaded: LoadedLesson,
    lesson: Lesson,
    registry: Checks,
    candidates: dict[str, list],
    statuses: dict[str, Outcome],
) -> CheckResult:
    """The failure with its likely cause: an earlier exercise this one uses that fails its own checks (graded here
    if this call has not), else the mutants that fail the same way."""
    failing = {}
    for exercise, names in upstream(lesson, spec.exercise).items():
        if exercise not in statuses and registry.for_exercise(exercise):
            own = check_exercise(registry.for_exercise(exercise), loaded, lesson, registry, stop_at_first_failure=True)
            statuses[exercise] = Outcome.FAILED if any(r.outcome is Outcome.FAILED for r in own) else Outcome.PASSED
        if statuses.get(exercise) is Outcome.FAILED:
            failing[exercise] = names
    if failing:
        return replace(result, hint=blame_upstream(failing))
    if candidates.get(spec.exercise) == []:
        return result  # no mutant reproduced an earlier failure of this exercise: stop looking
    found = matching_mistakes(
        spec,
        result,
        lesson,
        registry,
        run=lambda check, namespace: run_check(check, namespace, lesson.name, triton=registry.triton),
        limit=lambda seconds: time_limit(seconds, "diagnosis"),
        among=candidates.get(spec.exercise),
    )
    candidates[spec.exercise] = found  # later failures narrow the suspects
    return replace(result, hint=diagnosis(found)) if found else result
