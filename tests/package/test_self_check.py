"""The grading modes on a tiny lesson: the learner view of an untouched skeleton, `--solutions`, `--mutants`
(including a mutant that survives weak checks and one that no longer applies), and `--self-check`, all three at
once.

Each test reads one or two pytest runs, each in a repository of its own. A run keeps about one core busy, so the
module's runs start together, two at a time (as in test_broken_notebooks.py); each test waits for its own.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from tiny_lab import STALE_MUTANTS, WEAK_CHECKS, Lab, PytestRun

CHECK_ITEMS = {"add_one::adds_one_to_two", "add_one::random_integers", "add_one::tensors_elementwise"}
MUTANT_ITEMS = {"mutant::add_one::adds_two", "mutant::add_one::doubles"}
BROKEN_SETUP = "import torch\nimport no_such_module_anywhere"  # any grading of the lesson fails
CRASHING_MUTANTS = """
from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant("add_one", "exits", "kills its process (as a CUDA device-side assert can)",
           [("return x + 1", "return __import__('os')._exit(3)")]),
    Mutant("add_one", "adds_two", "off by one: adds two", [("return x + 1", "return x + 2")]),
]
"""


@dataclass(frozen=True)
class Scenario:
    lesson: dict = field(default_factory=dict)  # Lab.add_lesson options
    args: tuple[str, ...] = ()


SCENARIOS = {
    "untouched": Scenario(),
    "solutions": Scenario(args=("--solutions",)),
    "mutants": Scenario(args=("--mutants",)),
    "weak_checks": Scenario({"checks": WEAK_CHECKS}, ("--mutants",)),  # every check tries x = 1: 2 * x == x + 1
    "stale_mutant": Scenario({"mutants": STALE_MUTANTS}, ("--mutants",)),
    "crashing_mutant": Scenario({"mutants": CRASHING_MUTANTS}, ("--mutants",)),
    "untouched_unrunnable": Scenario({"setup_code": BROKEN_SETUP}),
    "untouched_unrunnable_graded": Scenario({"setup_code": BROKEN_SETUP}, ("--grade-untouched",)),
    "self_check": Scenario(args=("--self-check",)),
    "self_check_solved": Scenario({"solved": True}, ("--self-check",)),  # as if the skeleton gave the answer away
    "two_modes": Scenario(args=("--self-check", "--mutants")),
}


def reads(*names: str) -> Callable:
    """Mark a test with the scenarios whose runs it reads."""

    def mark(test: Callable) -> Callable:
        test.scenarios = names
        return test

    return mark


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start the run of every scenario that a selected test reads, two at a time."""
    wanted = {
        name
        for item in request.session.items
        if item.module is request.module
        for name in getattr(getattr(item, "function", None), "scenarios", ())
    }
    pool = ThreadPoolExecutor(max_workers=2)
    futures: dict[str, Future[PytestRun]] = {}
    for name in sorted(wanted):
        lab = Lab.create(tmp_path_factory.mktemp(name) / "lab")
        lab.add_lesson(**SCENARIOS[name].lesson)
        futures[name] = pool.submit(lab.run_pytest, *SCENARIOS[name].args)
    yield {name: future.result for name, future in futures.items()}
    pool.shutdown(wait=True, cancel_futures=True)


def summary_line(output: str) -> str:
    return [line for line in output.splitlines() if line.startswith("=") and " in " in line][-1]


@reads("untouched")
def test_untouched_skeleton_grades_zero_passed_all_not_attempted(runs: dict) -> None:
    run = runs["untouched"]()

    assert run.returncode == 0, run.output
    items = run.of("02_Tiny")
    assert set(items) == CHECK_ITEMS
    for outcome, message in items.values():
        assert outcome == "skipped"
        assert 'not attempted: 02_Tiny.ipynb, exercise "add_one" still raises NotImplementedError' in message
    assert "passed" not in summary_line(run.output) and "3 skipped" in summary_line(run.output)
    assert "NOT ATTEMPTED" in run.output


@reads("solutions")
def test_solutions_pass_every_check(runs: dict) -> None:
    run = runs["solutions"]()

    assert run.returncode == 0, run.output
    assert {name: outcome for name, (outcome, _) in run.of("02_Tiny").items()} == dict.fromkeys(CHECK_ITEMS, "passed")
    assert "Reference solutions, this run" in run.output


@reads("mutants")
def test_mutants_are_each_rejected(runs: dict) -> None:
    run = runs["mutants"]()

    assert run.returncode == 0, run.output
    assert {name: outcome for name, (outcome, _) in run.of("02_Tiny").items()} == dict.fromkeys(MUTANT_ITEMS, "passed")


@reads("weak_checks")
def test_a_mutant_that_survives_weak_checks_fails_its_item(runs: dict) -> None:
    run = runs["weak_checks"]()

    assert run.returncode == 1, run.output
    items = run.of("02_Tiny")
    assert items["mutant::add_one::adds_two"][0] == "passed"
    outcome, message = items["mutant::add_one::doubles"]
    assert outcome == "failed"
    assert "survived: all 3 checks of exercise 'add_one' passed on it" in message
    assert "Strengthen the checks" in message


@reads("crashing_mutant")
def test_a_mutant_that_kills_its_grading_process_is_rejected_and_the_next_one_still_graded(runs: dict) -> None:
    run = runs["crashing_mutant"]()

    assert run.returncode == 0, run.output
    items = run.of("02_Tiny")
    assert items["mutant::add_one::exits"][0] == "passed"  # rejected by the crash, as `llm_algo mutate` counts it
    assert items["mutant::add_one::adds_two"][0] == "passed"  # graded in a fresh process, rejected by a check


@reads("stale_mutant")
def test_a_stale_mutant_fails_with_a_clear_message(runs: dict) -> None:
    run = runs["stale_mutant"]()

    assert run.returncode == 1, run.output
    items = run.of("02_Tiny")
    assert items["mutant::add_one::adds_two"][0] == "passed"
    outcome, message = items["mutant::add_one::subtracts"]
    assert outcome == "failed"
    assert "expected the text 'return x - 1' exactly once in the solution, found it 0 times" in message
    assert "update the mutant" in message


@reads("untouched_unrunnable", "untouched_unrunnable_graded")
def test_an_untouched_lesson_is_not_attempted_without_being_run(runs: dict) -> None:
    # A setup cell that cannot run: any grading of this lesson would fail, so "not attempted" proves nothing ran it.
    run = runs["untouched_unrunnable"]()

    assert run.returncode == 0, run.output
    assert {outcome for outcome, _ in run.of("02_Tiny").values()} == {"skipped"}
    assert "graded in child processes" not in run.output  # no grading process was started

    forced = runs["untouched_unrunnable_graded"]()  # what the self-check does: grade the skeleton for real

    assert forced.returncode == 1, forced.output
    for outcome, message in forced.of("02_Tiny").values():
        assert outcome == "failed" and "the setup cell failed" in message, message


@reads("self_check")
def test_self_check_grades_skeletons_solutions_and_mutants_in_one_pass(runs: dict) -> None:
    run = runs["self_check"]()

    assert run.returncode == 0, run.output
    expected = {f"skeleton::{name}" for name in CHECK_ITEMS} | {f"solution::{name}" for name in CHECK_ITEMS}
    assert {name: outcome for name, (outcome, _) in run.of("02_Tiny").items()} == dict.fromkeys(
        expected | MUTANT_ITEMS, "passed"
    )
    assert "1 lesson graded in child processes" in run.output  # the three modes, one child


@reads("self_check_solved")
def test_self_check_fails_a_learner_cell_that_passes_untouched(runs: dict) -> None:
    run = runs["self_check_solved"]()

    assert run.returncode == 1, run.output
    items = run.of("02_Tiny")
    for name in CHECK_ITEMS:
        outcome, message = items[f"skeleton::{name}"]
        assert outcome == "failed" and "the untouched skeleton passes check" in message, message
        assert items[f"solution::{name}"][0] == "passed"


@reads("two_modes")
def test_self_check_is_one_of_the_modes(runs: dict) -> None:
    run = runs["two_modes"]()
    assert run.returncode == 4 and "grade different things" in run.output, run.output
