"""The outcome model: unit keys written and read in one place, the one rule for an exercise, one rendering."""

from __future__ import annotations

import pytest

from llm_algo.outcome import CheckResult, Outcome, UnitKey, exercise_outcomes, exercise_status, render


@pytest.mark.parametrize(
    ("outcomes", "status"),
    [
        (["passed", "passed"], Outcome.PASSED),
        (["passed", "skipped"], Outcome.PASSED),
        (["passed", "needs_gpu"], Outcome.PASSED),  # a compiled-only check on a CPU machine
        (["passed", "failed"], Outcome.FAILED),
        (["not_attempted", "failed"], Outcome.FAILED),
        (["not_attempted", "passed"], Outcome.NOT_ATTEMPTED),
        (["not_attempted", "not_attempted"], Outcome.NOT_ATTEMPTED),
        (["needs_gpu", "needs_gpu"], Outcome.NEEDS_GPU),  # a CUDA C++ exercise on a CPU: never passed
        (["skipped"], Outcome.NOT_ATTEMPTED),  # nothing graded is never a pass
        ([], Outcome.NOT_ATTEMPTED),
    ],
)
def test_exercise_status(outcomes: list[str], status: Outcome) -> None:
    assert exercise_status(outcomes) is status


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("rmsnorm::matches_torch", UnitKey("rmsnorm", "matches_torch")),
        ("mutant::rmsnorm::no_upcast", UnitKey("rmsnorm", "no_upcast", mutant=True)),
    ],
)
def test_unit_keys_round_trip(text: str, key: UnitKey) -> None:
    assert UnitKey.parse(text) == key and str(key) == text


@pytest.mark.parametrize("text", ["rmsnorm", "a::b::c", "::check", "rmsnorm::"])
def test_a_malformed_key_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a unit key"):
        UnitKey.parse(text)


def test_exercise_outcomes_take_checks_and_mutants_of_that_exercise_only() -> None:
    graded = {"a::one": "passed", "mutant::a::m": "failed", "b::one": "passed", "ab::one": "failed"}
    assert sorted(exercise_outcomes(graded, "a")) == [Outcome.FAILED, Outcome.PASSED]


def test_results_round_trip_through_json_with_their_enum() -> None:
    result = CheckResult("a::one", "failed", "desc", "wrong", input="x (2,)", hint="upcast")
    again = CheckResult.from_json(result.to_json())
    assert again == result and again.outcome is Outcome.FAILED and result.to_json()["outcome"] == "failed"


def test_render_says_what_was_wrong_and_leaves_out_what_is_empty() -> None:
    failed = CheckResult("a::one", Outcome.FAILED, "matches F.x", "differs", input="x (2,)", expected="1", path="cpu")
    text = render(failed, where="01_A.ipynb")
    assert text.splitlines() == [
        "01_A.ipynb, check one (matches F.x) [cpu]: failed",
        "  differs",
        "  input:          x (2,)",
        "  expected:       1",
    ]
    passed = CheckResult("a::one", Outcome.PASSED, "matches F.x", path="cpu")
    assert render(passed) == "check one (matches F.x) [cpu]: passed"
    mutant = CheckResult("mutant::a::m", Outcome.FAILED, "mutant m: no upcast", "survived")
    assert render(mutant, where="w") == "w, mutant m: no upcast\n  survived"
