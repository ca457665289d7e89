"""A mutant's verdict: rejected when a check fails on it, survived when its checks pass, and *needs a GPU* (neither)
when none of its exercise's checks can run on this machine (a CUDA C++ exercise graded on a CPU)."""

from __future__ import annotations

from llm_algo.grading.lesson import mutant_verdict
from llm_algo.mutation import Mutant
from llm_algo.outcome import CheckResult, Outcome

MUTANT = Mutant("vector_add_cuda", "off_by_one", "launches one block too few", [("a", "b")])


def result(outcome: Outcome) -> CheckResult:
    return CheckResult("vector_add_cuda::check", outcome, "a check", "")


def test_rejected_survived_and_needs_a_gpu():
    assert mutant_verdict(MUTANT, [result(Outcome.PASSED), result(Outcome.FAILED)]).outcome is Outcome.PASSED
    assert mutant_verdict(MUTANT, [result(Outcome.PASSED), result(Outcome.NEEDS_GPU)]).outcome is Outcome.FAILED
    verdict = mutant_verdict(MUTANT, [result(Outcome.NEEDS_GPU), result(Outcome.NEEDS_GPU)])
    assert verdict.outcome is Outcome.NEEDS_GPU and "needs a CUDA GPU" in verdict.summary
