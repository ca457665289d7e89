"""The outcome model: what grading one unit can come to, the unit's key, the one rule for "an exercise passed", and
the one text rendering of a result that the pytest failure and the notebook's report share.

Nothing here imports torch: the progress table and `python -m llm_algo progress` read results with this alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum

from .messages import t
from .notebook import Mode


class Outcome(StrEnum):
    """What one check (or one mutant) came to. The values are what results.json and the grading events carry."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_ATTEMPTED = "not_attempted"  # the exercise still raises NotImplementedError (or its cell is untouched)
    NEEDS_GPU = "needs_gpu"  # the check needs CUDA, or Triton compiled on a GPU; never counts as passed
    NOT_RUN = "not_run"  # an earlier check of the exercise failed in a way that stops the rest (a gate, a time-out)
    SKIPPED = "skipped"  # not run for another stated reason

    @property
    def label(self) -> str:
        """The English name: what summaries key their counts by (and the message id of `shown`)."""
        return LABELS[self]

    @property
    def shown(self) -> str:
        """The name in the learner's language (llm_algo.messages)."""
        return t(self.label)


LABELS = {
    Outcome.PASSED: "passed",
    Outcome.FAILED: "failed",
    Outcome.NOT_ATTEMPTED: "not attempted",
    Outcome.NEEDS_GPU: "needs a GPU",
    Outcome.NOT_RUN: "not run",
    Outcome.SKIPPED: "skipped",
}
ICONS = {
    Outcome.PASSED: "✅",
    Outcome.FAILED: "❌",
    Outcome.NOT_ATTEMPTED: "⏳",
    Outcome.NEEDS_GPU: "🖥",
    Outcome.NOT_RUN: "⏸",
    Outcome.SKIPPED: "⏭",
}


def symbol(outcome: Outcome) -> str:
    """`✅ passed`: the icon and the name in the learner's language."""
    return f"{ICONS[outcome]} {outcome.shown}"


MUTANT_PREFIX = "mutant"


@dataclass(frozen=True, order=True)
class UnitKey:
    """What a result is about: check `name` of `exercise`, or mutant `name` of `exercise`. Written as
    `exercise::check` or `mutant::exercise::name`; this class is the only place that writes or reads that form."""

    exercise: str
    name: str
    mutant: bool = False

    def __str__(self) -> str:
        return f"{MUTANT_PREFIX}::{self.exercise}::{self.name}" if self.mutant else f"{self.exercise}::{self.name}"

    @classmethod
    def parse(cls, text: str) -> UnitKey:
        parts = text.split("::")
        if len(parts) == 3 and parts[0] == MUTANT_PREFIX:
            return cls(parts[1], parts[2], mutant=True)
        if len(parts) == 2 and all(parts):
            return cls(parts[0], parts[1])
        raise ValueError(f"not a unit key: {text!r} (expected 'exercise::check' or 'mutant::exercise::name')")


@dataclass(frozen=True)
class Unit:
    """One thing to grade: a check in a mode, or a mutant (all of its exercise's checks, on the solution)."""

    key: str  # a UnitKey written out
    mode: Mode

    @property
    def is_mutant(self) -> bool:
        return UnitKey.parse(self.key).mutant


def check_key(exercise: str, name: str) -> str:
    return str(UnitKey(exercise, name))


def mutant_key(exercise: str, name: str) -> str:
    return str(UnitKey(exercise, name, mutant=True))


@dataclass(frozen=True)
class CheckResult:
    """One graded unit: its key (`UnitKey` written out), outcome, and what a learner needs to fix it."""

    key: str
    outcome: Outcome
    description: str = ""
    summary: str = ""
    input: str = ""
    expected: str = ""
    got: str = ""
    hint: str = ""
    path: str = ""  # where it ran: cpu, cuda, triton interpreter, triton compiled
    seconds: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", Outcome(self.outcome))

    @property
    def unit(self) -> UnitKey:
        return UnitKey.parse(self.key)

    def to_json(self) -> dict:
        data = asdict(self)
        data["outcome"] = str(self.outcome)
        return data

    @classmethod
    def from_json(cls, data: dict) -> CheckResult:
        return cls(**data)


def exercise_status(outcomes: Iterable[Outcome | str]) -> Outcome:
    """The one rule for an exercise, from its checks' outcomes: failed if any check failed; passed if at least one
    check passed and every other one passed too or could not run here (needs a GPU, skipped; "not run" only ever
    follows a failure); needs a GPU if
    nothing ran for that reason alone; else not attempted (nothing graded, or some check not attempted)."""
    found = {Outcome(o) for o in outcomes}
    if Outcome.FAILED in found:
        return Outcome.FAILED
    if Outcome.NOT_ATTEMPTED in found:
        return Outcome.NOT_ATTEMPTED
    if Outcome.PASSED in found:
        return Outcome.PASSED
    if Outcome.NEEDS_GPU in found:
        return Outcome.NEEDS_GPU
    return Outcome.NOT_ATTEMPTED


def exercise_outcomes(graded: dict[str, Outcome | str], exercise: str) -> list[Outcome]:
    """The outcomes of one exercise's units, out of `{unit key: outcome}` (checks and mutants alike)."""
    return [Outcome(o) for key, o in graded.items() if UnitKey.parse(key).exercise == exercise]


DETAIL_LABELS = (("input", "input"), ("expected", "expected"), ("got", "got"), ("hint", "likely mistake"))


def render(result: CheckResult, *, where: str = "", indent: str = "  ") -> str:
    """A result as text: a headline, then what was wrong (input, expected, got, why, likely mistake). The pytest
    failure and the notebook's report both print this."""
    unit = result.unit
    head = f"{where}, " if where else ""
    if unit.mutant:
        return f"{head}{result.description}\n{indent}{result.summary}"
    ran_on = f" [{result.path}]" if result.path else ""
    headline = t(
        "check headline", name=unit.name, description=result.description, ran_on=ran_on, outcome=result.outcome.shown
    )
    lines = [f"{head}{headline}"]
    if result.outcome is Outcome.PASSED:
        return lines[0]
    if result.summary:
        lines.append(f"{indent}{result.summary}")
    for field, label in DETAIL_LABELS:
        value = getattr(result, field)
        if value:
            lines.append(f"{indent}{t(label) + ':':<16}{value}")
    return "\n".join(lines)
