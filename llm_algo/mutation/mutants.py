"""Mutants: small, realistic wrong versions of a reference solution that the checks must reject.

A lesson's mutants live in `tests/mutants/<lesson id with _>.py` as a list `MUTANTS` of `Mutant`s.
Each one names an exercise and rewrites that exercise's solution source by exact text replacements,
so a mutant stays a two-line diff of the solution it breaks and goes stale loudly if the solution
changes under it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..module_files import load_module
from ..paths import display_path, mutants_module_path


class StaleMutant(Exception):
    """The text a mutant replaces is no longer in the solution (or is there more than once)."""


@dataclass(frozen=True)
class Mutant:
    exercise: str
    name: str
    mistake: str  # the realistic mistake it stands for, in words
    replace: tuple[tuple[str, str], ...]
    mistake_zh: str = ""  # the same clause in 简体中文 (the lesson's 本节要点 lists it)
    # rejected only by the exercise's `requires_compiled` checks (an int32 offset past 2**31 elements): graded by
    # those checks alone, so it reads *needs a GPU* where Triton runs interpreted
    requires_compiled: bool = False

    def __init__(
        self,
        exercise: str,
        name: str,
        mistake: str,
        replace: list[tuple[str, str]] | tuple,
        *,
        mistake_zh: str = "",
        requires_compiled: bool = False,
    ):
        object.__setattr__(self, "exercise", exercise)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "mistake", mistake)
        object.__setattr__(self, "replace", tuple((old, new) for old, new in replace))
        object.__setattr__(self, "mistake_zh", mistake_zh)
        object.__setattr__(self, "requires_compiled", requires_compiled)

    @property
    def key(self) -> str:
        return f"mutant::{self.exercise}::{self.name}"

    def apply(self, solution_source: str) -> str:
        source = solution_source
        for old, new in self.replace:
            count = source.count(old)
            if count != 1:
                raise StaleMutant(
                    f"mutant {self.name!r} of exercise {self.exercise!r}: expected the text {old!r} exactly once "
                    f"in the solution, found it {count} times; update the mutant to the current solution"
                )
            source = source.replace(old, new)
        return source


def load_mutants(lesson_id: str) -> list[Mutant]:
    path = mutants_module_path(lesson_id)
    if not path.exists():
        return []
    mutants = getattr(load_module(path, f"llm_algo_mutants.{path.stem}"), "MUTANTS", None)
    if not isinstance(mutants, list) or not all(isinstance(m, Mutant) for m in mutants):
        raise TypeError(f"{display_path(path)} must define `MUTANTS = [Mutant(...), ...]`")
    return mutants
