"""Grade a list of automatic mutants of one lesson against their exercises' checks, in a child process.

The child (`python -m llm_algo.mutation.run REQUEST EVENTS`) loads the lesson's checks once, grades the
unmutated reference first (a mutant can only be judged against checks that pass on the reference), then each
mutant: its exercise's checks in turn, gate checks first, stopping at the first failure, each under a time
limit. The check that rejected the last mutant is tried first on the next one, which changes the cost of a
run but never a verdict. The parent reads the child's events; when the child dies or goes quiet (a crash
or a hang in compiled code), the mutant in flight counts as rejected and a new child takes the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..check.api import CheckSpec, load_checks
from ..grading.execute import MODE_ENV, load_namespace
from ..grading.run import check_exercise, ran_past_time_limit, time_limit
from ..heartbeat import on_beat
from ..notebook import NotebookError, read_lesson
from .generate import AutoMutant, generate

STARTUP_SECONDS = 60  # importing torch (and Triton) on a slow, busy machine
QUIET_GRACE_SECONDS = 15
SLOWDOWN_ALLOWED = 10.0  # a check may take this many times its time on the reference before the mutant is "too slow"
MIN_CHECK_SECONDS = 10.0
KILLED = ("killed", "timeout", "crashed")  # the outcomes that count as a rejected mutant


@dataclass(frozen=True)
class Verdict:
    id: str
    outcome: str  # killed | survived | timeout | crashed | not_run
    by: str = ""  # the check that rejected it ("exercise::check")
    summary: str = ""  # why that check failed, or why the mutant was not graded
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return self.outcome in KILLED


@dataclass
class LessonRun:
    notebook: str
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # by mutant id
    reference_failures: dict[str, str] = field(default_factory=dict)  # exercise -> the check failing on the reference
    error: str = ""  # the lesson could not be graded at all
    seconds: float = 0.0


# ----------------------------------------------------------------------------------------- the child


def check_limit(reference_seconds: float, timeout: float) -> float:
    """The time a check may take on a mutant: generous next to the reference, never above the setting."""
    return min(timeout, max(MIN_CHECK_SECONDS, SLOWDOWN_ALLOWED * reference_seconds))


def grade_mutants(notebook: str, ids: list[str], *, timeout: float, emit: Callable[[dict], None]) -> None:
    """Grade the mutants `ids` of a notebook, emitting `reference`, `start`, `check` and `verdict` events."""
    lesson = read_lesson(notebook)
    registry = load_checks(lesson.id)
    os.environ[MODE_ENV] = "solution"  # `use(...)` in the setup cell takes the earlier lessons' references
    by_id = {m.id: m for m in generate(lesson)}
    mutants = [by_id[i] for i in ids if i in by_id]
    for missing in (i for i in ids if i not in by_id):
        emit({"type": "verdict", "verdict": asdict(Verdict(missing, "not_run", summary="no longer generated"))})

    with time_limit(timeout, "running the notebook's cells"):
        reference = load_namespace(lesson, "solution")
    order: dict[str, list[CheckSpec]] = {}  # exercise -> its checks, in the order they are tried
    limits: dict[str, float] = {}  # check key -> its time limit on a mutant
    broken: dict[str, str] = {}  # exercise -> the check that fails on the reference itself
    for exercise in dict.fromkeys(m.exercise for m in mutants):
        specs = registry.for_exercise(exercise)
        results = check_exercise(specs, reference, lesson, registry, timeout=timeout)
        failed = [r for r in results if r.outcome == "failed"]
        limits.update({r.key: check_limit(r.seconds, timeout) for r in results})
        seconds = {r.key: r.seconds for r in results}
        order[exercise] = sorted(specs, key=lambda s: (not s.gate, seconds.get(s.key, 0.0)))  # gates, then cheap
        if failed:
            broken[exercise] = f"{failed[0].key}: {failed[0].summary}"
        emit({"type": "reference", "exercise": exercise, "failed": broken.get(exercise, "")})

    for mutant in mutants:
        if mutant.exercise in broken:
            why = f"not graded: the reference fails {broken[mutant.exercise]}"
            emit({"type": "verdict", "verdict": asdict(Verdict(mutant.id, "not_run", summary=why))})
            continue
        emit({"type": "start", "id": mutant.id})
        started = time.perf_counter()
        verdict = _grade_one(mutant, lesson, registry, order[mutant.exercise], limits, timeout, emit)
        emit({"type": "verdict", "verdict": asdict(verdict) | {"seconds": time.perf_counter() - started}})


def _grade_one(mutant: AutoMutant, lesson, registry, specs: list[CheckSpec], limits, timeout, emit) -> Verdict:
    try:
        with time_limit(timeout, "running the notebook's cells"):
            loaded = load_namespace(lesson, "solution", mutant=mutant)
    except TimeoutError as exc:
        return Verdict(mutant.id, "timeout", summary=str(exc))
    for spec in specs:
        emit({"type": "check", "key": spec.key})
        limit = limits.get(spec.key, timeout)
        result = check_exercise([spec], loaded, lesson, registry, timeout=limit)[0]
        if result.outcome == "failed" and limit < timeout and ran_past_time_limit(result.summary):
            # slow is not wrong: the limit is a few times the reference's time, and a check can be slow once for a
            # reason of its own (restarting a world of ranks that the previous mutant hung): once more, in full
            result = check_exercise([spec], loaded, lesson, registry, timeout=timeout)[0]
        if result.outcome == "failed":
            if not spec.gate:  # try this check first on the next mutant
                specs.remove(spec)
                specs.insert(sum(s.gate for s in specs), spec)
            verdict = "timeout" if ran_past_time_limit(result.summary) else "killed"
            return Verdict(mutant.id, verdict, by=result.key, summary=result.summary)
    return Verdict(mutant.id, "survived")


def main(request_path: str, events_path: str) -> int:
    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    with open(events_path, "a", encoding="utf-8") as events:

        def emit(event: dict) -> None:
            events.write(json.dumps(event) + "\n")
            events.flush()

        on_beat(lambda: emit({"type": "alive"}))  # during an nvcc build (llm_algo.heartbeat)
        try:
            grade_mutants(request["notebook"], request["ids"], timeout=request["timeout"], emit=emit)
        except (NotebookError, FileNotFoundError, TypeError, TimeoutError) as exc:
            emit({"type": "error", "message": f"{type(exc).__name__}: {exc}"})
            return 1
        emit({"type": "done"})
    return 0


# ----------------------------------------------------------------------------------------- the parent


def _tail(path: Path, size: int = 2000) -> str:
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        lines = handle.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:200] if lines else ""
    return ""


class _Child:
    """One child process and the events it has written so far."""

    def __init__(self, notebook: Path, ids: list[str], timeout: float, workdir: Path):
        self.events_path, self.log = workdir / "events.jsonl", workdir / "output.log"
        self.events_path.unlink(missing_ok=True)
        request = workdir / "request.json"
        request.write_text(json.dumps({"notebook": str(notebook), "ids": ids, "timeout": timeout}), encoding="utf-8")
        with open(self.log, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "llm_algo.mutation.run", str(request), str(self.events_path)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.offset = 0

    def new_events(self) -> list[dict]:
        if not self.events_path.exists():
            return []
        with open(self.events_path, encoding="utf-8") as handle:
            handle.seek(self.offset)
            text = handle.read()
        complete = text[: text.rfind("\n") + 1]  # a line still being written is read next time
        self.offset += len(complete.encode("utf-8"))
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def run_mutants(
    notebook: Path,
    mutants: list[AutoMutant],
    *,
    timeout: float,
    on_verdict: Callable[[Verdict], None] | None = None,
) -> LessonRun:
    """Grade `mutants` (all of one lesson) in child processes; a verdict for each, or the lesson's error.

    A mutant in flight when its child crashes or hangs is graded again first in a fresh child before it counts as
    crashed: a kernel that wrote out of bounds earlier in the same process can corrupt the heap and bring the
    process down during a later, innocent mutant."""
    run = LessonRun(notebook=str(notebook))
    pending = [m.id for m in mutants]
    retried: set[str] = set()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llm_algo_mutate_") as tmp:
        while pending:
            child = _Child(notebook, pending, timeout, Path(tmp))
            in_flight, problem = _follow(child, run, timeout, on_verdict)
            progress = any(i in run.verdicts for i in pending)
            pending = [i for i in pending if i not in run.verdicts]
            if not problem:
                break
            if in_flight is None:
                if not progress:  # not even one mutant: the lesson itself cannot be graded
                    run.error = problem
                    break
                continue
            if in_flight not in retried:  # first in a fresh process: is it this mutant, or an earlier one's damage?
                retried.add(in_flight)
                pending = [in_flight] + [i for i in pending if i != in_flight]
                continue
            outcome = "timeout" if problem.startswith("made no progress") else "crashed"
            verdict = Verdict(in_flight, outcome, summary=problem)
            run.verdicts[in_flight] = verdict
            if on_verdict:
                on_verdict(verdict)
            pending = [i for i in pending if i != in_flight]
    run.seconds = time.monotonic() - started
    return run


def _follow(child: _Child, run: LessonRun, timeout: float, on_verdict) -> tuple[str | None, str]:
    """Read the child's events until it ends; returns the mutant in flight and, if it did not finish, why."""
    in_flight, last_event = None, time.monotonic()
    quiet_limit = STARTUP_SECONDS + timeout
    while True:
        code = child.process.poll()
        for event in child.new_events():
            last_event, quiet_limit = time.monotonic(), timeout + QUIET_GRACE_SECONDS
            kind = event["type"]
            if kind == "start":
                in_flight = event["id"]
            elif kind == "verdict":
                verdict = Verdict(**event["verdict"])
                run.verdicts[verdict.id] = verdict
                in_flight = None
                if on_verdict:
                    on_verdict(verdict)
            elif kind == "reference" and event["failed"]:
                run.reference_failures[event["exercise"]] = event["failed"]
            elif kind == "error":
                child.stop()
                return None, event["message"]
            elif kind == "done":
                child.process.wait()
                return None, ""
        if code is not None:
            last = _tail(child.log)
            return in_flight, f"the grader process exited (code {code}){'; it last printed: ' + last if last else ''}"
        if time.monotonic() - last_event > quiet_limit:
            child.stop()
            return in_flight, f"made no progress for {quiet_limit:g} s and was stopped (a hang in compiled code?)"
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
