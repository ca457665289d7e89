"""`python -m llm_algo mutate`: score automatic mutants per exercise, honour reviewed equivalents, print survivors.

A lesson's reviewed equivalents live in `tests/mutants/equivalent/<lesson id with _>.txt`, one per line:

    <mutant id>  <why it cannot be told apart from the reference by any correct check>

(`#` starts a comment line). Equivalent mutants are not graded; the score is killed / (total - equivalent).
An id that is no longer generated (the solution changed under it) is reported as stale.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..notebook import Lesson, NotebookError, read_lesson
from ..paths import display_path, lesson_notebooks, module_name, repo_root
from .generate import AutoMutant, generate
from .run import LessonRun, Verdict, run_mutants


def equivalents_path(lesson_id: str) -> Path:
    return repo_root() / "tests" / "mutants" / "equivalent" / f"{module_name(lesson_id)}.txt"


def load_equivalents(lesson_id: str) -> dict[str, str]:
    """Mutant id -> the reason it is equivalent; a line without a reason is an error."""
    path = equivalents_path(lesson_id)
    if not path.exists():
        return {}
    found = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        ident, _, reason = line.strip().partition(" ")
        if not reason.strip():
            raise ValueError(f"{display_path(path)}, line {number}: `{ident}` needs a reason after the mutant id")
        found[ident] = reason.strip()
    return found


@dataclass
class ExerciseScore:
    exercise: str
    total: int = 0  # graded: equivalents and not-run mutants excluded
    killed: int = 0
    equivalent: int = 0
    not_run: int = 0
    survivors: list[AutoMutant] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        return self.killed / self.total if self.total else None


@dataclass
class LessonScore:
    lesson_id: str
    notebook: str
    generated: int  # every automatic mutant of the selected exercises
    sampled: int  # graded or recorded as equivalent in this run
    exercises: dict[str, ExerciseScore]
    stale: list[str]  # equivalents whose id is no longer generated
    run: LessonRun

    def totals(self) -> ExerciseScore:
        total = ExerciseScore("all")
        for score in self.exercises.values():
            total.total += score.total
            total.killed += score.killed
            total.equivalent += score.equivalent
            total.not_run += score.not_run
            total.survivors += score.survivors
        return total


def score_lesson(
    lesson: Lesson, mutants: list[AutoMutant], equivalents: dict[str, str], run: LessonRun, generated: list[str]
) -> LessonScore:
    exercises = {m.exercise: ExerciseScore(m.exercise) for m in mutants}
    for mutant in mutants:
        score = exercises[mutant.exercise]
        verdict = run.verdicts.get(mutant.id)
        if mutant.id in equivalents:
            score.equivalent += 1
        elif verdict is None or verdict.outcome == "not_run":
            score.not_run += 1
        else:
            score.total += 1
            score.killed += verdict.killed
            if not verdict.killed:
                score.survivors.append(mutant)
    stale = sorted(set(equivalents) - set(generated))
    return LessonScore(lesson.id, lesson.name, len(generated), len(mutants), exercises, stale, run)


def percent(score: ExerciseScore) -> str:
    return "n/a" if score.score is None else f"{100 * score.score:.0f}%"


def describe_exercise(score: ExerciseScore) -> str:
    extras = [f"{score.equivalent} equivalent"] * bool(score.equivalent) + [f"{score.not_run} not run"] * bool(
        score.not_run
    )
    return f"{score.exercise}: {score.killed}/{score.total} killed ({percent(score)})" + "".join(
        f", {extra}" for extra in extras
    )


def describe_survivor(mutant: AutoMutant) -> str:
    return (
        f"    survived {mutant.id}\n"
        f"      {mutant.operator}, {mutant.description}\n"
        f"      - {mutant.line_before.strip()}\n"
        f"      + {mutant.line_after.strip()}"
    )


def print_lesson(score: LessonScore, out: Callable[[str], None]) -> None:
    run = score.run
    sampled = f" (a sample of {score.sampled} of {score.generated})" if score.sampled < score.generated else ""
    out(f"{score.lesson_id} ({score.notebook}): {score.sampled} automatic mutants{sampled}, {run.seconds:.0f} s")
    if run.error:
        out(f"  error: {run.error}")
    for exercise, why in run.reference_failures.items():
        out(f"  {exercise}: the reference solution fails a check, so its mutants were not graded: {why}")
    for exercise_score in score.exercises.values():
        out("  " + describe_exercise(exercise_score))
        for mutant in exercise_score.survivors:
            out(describe_survivor(mutant))
    for ident in score.stale:
        out(
            f"  stale equivalent: {ident} is no longer generated; remove it from {display_path(equivalents_path(score.lesson_id))}"
        )


def print_table(scores: list[LessonScore], out: Callable[[str], None]) -> None:
    header = f"{'lesson':<26} {'mutants':>7} {'killed':>7} {'survived':>8} {'equiv.':>6} {'not run':>7} {'score':>6} {'time':>7}"
    out("")
    out(header)
    out("-" * len(header))
    for score in scores:
        t = score.totals()
        out(
            f"{score.lesson_id:<26} {score.sampled:>7} {t.killed:>7} {len(t.survivors):>8} {t.equivalent:>6} "
            f"{t.not_run:>7} {percent(t):>6} {score.run.seconds:>6.0f}s"
        )


def to_json(score: LessonScore) -> dict:
    verdicts = score.run.verdicts
    mutants = [
        {
            **{k: v for k, v in asdict(m).items() if k not in ("start", "end")},
            "key": m.key,
            "verdict": asdict(verdicts.get(m.id, Verdict(m.id, "not_run"))),
        }
        for exercise in score.exercises.values()
        for m in exercise.survivors
    ]
    return {
        "lesson": score.lesson_id,
        "notebook": score.notebook,
        "generated": score.generated,
        "sampled": score.sampled,
        "seconds": score.run.seconds,
        "error": score.run.error,
        "reference_failures": score.run.reference_failures,
        "stale_equivalents": score.stale,
        "exercises": {
            name: {k: v for k, v in asdict(s).items() if k != "survivors"} | {"score": s.score}
            for name, s in score.exercises.items()
        },
        "survivors": mutants,
        "verdicts": {ident: asdict(v) for ident, v in verdicts.items()},
    }


def sample(mutants: list[AutoMutant], limit: int | None, seed: str) -> list[AutoMutant]:
    """At most `limit` mutants, drawn with a fixed seed and kept in source order."""
    if limit is None or len(mutants) <= limit:
        return mutants
    chosen = set(random.Random(seed).sample(range(len(mutants)), limit))
    return [m for i, m in enumerate(mutants) if i in chosen]


def resolve_lessons(names: list[str], every: bool) -> list[Path]:
    """Lesson ids (`p02.rmsnorm`) or notebook paths, or every lesson."""
    if every:
        return lesson_notebooks()
    from ..grading.cache import find_lesson

    return [Path(name) if name.endswith(".ipynb") else find_lesson(name).path for name in names]


def mutate_lesson(
    path: Path, *, exercise: str | None, limit: int | None, timeout: float, progress: Callable[[Verdict], None]
) -> LessonScore:
    lesson = read_lesson(path)
    exercises = [exercise] if exercise else None
    everything = generate(lesson)
    equivalents = load_equivalents(lesson.id)
    selected = [m for m in everything if exercises is None or m.exercise in exercises]
    graded = sample([m for m in selected if m.id not in equivalents], limit, lesson.id)
    reviewed = [m for m in selected if m.id in equivalents]
    chosen = {m.id for m in graded + reviewed}
    mutants = [m for m in selected if m.id in chosen]
    run = run_mutants(path, graded, timeout=timeout, on_verdict=progress)
    return score_lesson(lesson, mutants, equivalents, run, [m.id for m in everything])


def command(
    names: list[str],
    *,
    every: bool = False,
    exercise: str | None = None,
    limit: int | None = None,
    json_path: str | None = None,
    timeout: float,
    out: Callable[[str], None] = print,
    progress: Callable[[str], None] | None = None,
) -> int:
    """The `mutate` command: grade, print each lesson as it finishes, then the table; 0 unless misused."""
    try:
        paths = resolve_lessons(names, every)
    except NotebookError as exc:
        out(str(exc))
        return 2
    if not paths:
        out("name a lesson id (p02.rmsnorm), or pass --all")
        return 2

    def tick(verdict: Verdict) -> None:
        if progress:
            progress("." if verdict.killed else "S" if verdict.outcome == "survived" else "-")

    scores, started = [], time.monotonic()
    for path in paths:
        try:
            score = mutate_lesson(path, exercise=exercise, limit=limit, timeout=timeout, progress=tick)
        except (NotebookError, ValueError) as exc:
            out(f"{display_path(path)}: {exc}")
            continue
        if progress and score.run.verdicts:
            progress("\n")
        print_lesson(score, out)
        scores.append(score)
    print_table(scores, out)
    out(f"{sum(s.sampled for s in scores)} mutants in {time.monotonic() - started:.0f} s")
    if json_path:
        Path(json_path).write_text(json.dumps([to_json(s) for s in scores], indent=1) + "\n", encoding="utf-8")
        out(f"wrote {json_path}")
    return 0
