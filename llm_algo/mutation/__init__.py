"""Mutants: the hand-written known-wrong variants a lesson ships (`Mutant`), and automatic ones generated, graded and
reported by `python -m llm_algo mutate`."""

from .mutants import Mutant

__all__ = ["Mutant"]
