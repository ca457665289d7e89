"""Mutants that only a compiled check can reject (`Mutant(..., requires_compiled=True)`): an int32 offset that wraps
past 2**31 elements, which a check can only allocate on a GPU. Such a mutant is graded by its exercise's
`requires_compiled` checks alone: *needs a GPU* where Triton runs interpreted (never *survived*, never *rejected*),
and rejected or survived on a GPU as any mutant. Without the flag the same mutant survives the CPU's checks and fails
`pytest --mutants` on every machine without a GPU. Also the helpers that build those checks' inputs
(`llm_algo.references.layouts`)."""

from __future__ import annotations

import pytest
import torch

import llm_algo.references.layouts as layouts
from llm_algo.grading.lesson import mutant_verdict
from llm_algo.mutation import Mutant
from llm_algo.outcome import CheckResult, Outcome

CHECKS_WITH_A_COMPILED_CHECK = """
from llm_algo.check import Checks, expect

checks = Checks({lesson_id!r})


@checks("add_one")
def small_numbers(ex):
    for x in (-3, 0, 2, 1000):
        expect(ex.add_one(x) == x + 1, "wrong", input=f"x={{x}}")


@checks("add_one", requires_compiled=True)
def past_2_31(ex):
    expect(ex.add_one(2**31) == 2**31 + 1, "wrong past 2**31", input="x=2**31")
"""

WRAPS = (
    'Mutant("add_one", "wraps", "wraps past 2**31", [("return x + 1", "return x + 1 if x < 2**31 else x - 2**32 + 1")]'
)
MUTANTS = """
from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant("add_one", "adds_two", "off by one: adds two", [("return x + 1", "return x + 2")]),
    {wraps}{flag}),
]
"""


@pytest.mark.parametrize("flagged", [True, False, "stale"])
def test_a_compiled_only_mutant_needs_a_gpu_on_the_cpu(lab, flagged):
    flag = ", requires_compiled=True" if flagged else ""
    wraps = WRAPS.replace('("return x + 1",', '("return x + 3",') if flagged == "stale" else WRAPS
    lab.add_lesson(checks=CHECKS_WITH_A_COMPILED_CHECK, mutants=MUTANTS.format(wraps=wraps, flag=flag))
    run = lab.run_pytest("--mutants")
    outcome, text = run.of("02_Tiny")["mutant::add_one::wraps"]
    assert run.of("02_Tiny")["mutant::add_one::adds_two"][0] == "passed", run.output
    if flagged == "stale":  # graded without loading the lesson, but its text is still checked against the solution
        assert outcome == "failed" and "expected the text" in text, run.output
    elif flagged:
        assert outcome == "skipped" and "compiled checks" in text, run.output
        assert run.returncode == 0, run.output
    else:  # what the flag is for: on a CPU the small checks pass it, so it survives
        assert outcome == "failed" and "survived" in text, run.output


def result(outcome: Outcome) -> CheckResult:
    return CheckResult("add_one::past_2_31", outcome, "a compiled check", "")


def test_compiled_mutant_verdicts():
    mutant = Mutant("add_one", "wraps", "wraps past 2**31", [("a", "b")], requires_compiled=True)
    verdict = mutant_verdict(mutant, [result(Outcome.NEEDS_GPU)])
    assert verdict.outcome is Outcome.NEEDS_GPU and "compiled checks" in verdict.summary
    assert mutant_verdict(mutant, [result(Outcome.FAILED)]).outcome is Outcome.PASSED  # rejected on a GPU
    assert mutant_verdict(mutant, [result(Outcome.PASSED)]).outcome is Outcome.FAILED  # survived on a GPU
    assert mutant_verdict(mutant, []).outcome is Outcome.FAILED  # an exercise without a compiled check: survived


def test_past_int32_offsets_wraps_an_int32_product(monkeypatch):
    """Index 2 of the dimension starts past 2**31 elements while its stride fits an int32 argument: the product
    `index * stride` in int32 (what a kernel without the int64 cast computes) wraps negative."""
    stride = layouts.INT32_WRAP_STRIDE
    assert stride < 2**31 <= 2 * stride
    wrapped = torch.tensor(2, dtype=torch.int32) * torch.tensor(stride, dtype=torch.int32)
    assert int(wrapped) < 0
    monkeypatch.setattr(layouts, "INT32_WRAP_STRIDE", 64)  # the same layout, small enough to allocate here
    t = torch.randn(3, 4, 5)
    for dim in range(3):
        view = layouts.past_int32_offsets(t, dim=dim)
        assert torch.equal(view, t) and view.stride(dim) == 64
        rest = t.numel() // t.shape[dim]
        assert view.untyped_storage().nbytes() == 4 * ((t.shape[dim] - 1) * 64 + rest)  # no more than that
    with pytest.raises(ValueError, match="never reaches index 2"):
        layouts.past_int32_offsets(torch.randn(2, 4))
    with pytest.raises(ValueError, match="more than the stride"):
        layouts.past_int32_offsets(torch.randn(3, 100))


def test_unit_last_stride_layouts_and_their_description():
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    views = layouts.distinct_layouts(q, k, v, order=layouts.UNIT_LAST_STRIDE)
    layouts.expect_own_layouts(*views)
    assert all(view.stride(-1) == 1 for view in views)
    text = layouts.describe_layouts(q=views[0], k=views[1])
    assert text.startswith(f"q (2, 3, 5, 8) strides {views[0].stride()}, k (2, 3, 5, 8) strides")
