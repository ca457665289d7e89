"""The three grading modes on a tiny lesson: the learner view of an untouched skeleton, `--solutions`, and
`--mutants` (including a mutant that survives weak checks and one that no longer applies)."""

from __future__ import annotations

from tiny_lab import STALE_MUTANTS, WEAK_CHECKS, Lab

CHECK_ITEMS = {"add_one::adds_one_to_two", "add_one::random_integers", "add_one::tensors_elementwise"}
MUTANT_ITEMS = {"mutant::add_one::adds_two", "mutant::add_one::doubles"}


def summary_line(output: str) -> str:
    return [line for line in output.splitlines() if line.startswith("=") and " in " in line][-1]


def test_untouched_skeleton_grades_zero_passed_all_not_attempted(lab: Lab) -> None:
    lab.add_lesson()

    run = lab.run_pytest()

    assert run.returncode == 0, run.output
    items = run.of("02_Tiny")
    assert set(items) == CHECK_ITEMS
    for outcome, message in items.values():
        assert outcome == "skipped"
        assert 'not attempted: 02_Tiny.ipynb, exercise "add_one" still raises NotImplementedError' in message
    assert "passed" not in summary_line(run.output) and "3 skipped" in summary_line(run.output)
    assert "NOT ATTEMPTED" in run.output


def test_solutions_pass_every_check(lab: Lab) -> None:
    lab.add_lesson()

    run = lab.run_pytest("--solutions")

    assert run.returncode == 0, run.output
    assert {name: outcome for name, (outcome, _) in run.of("02_Tiny").items()} == dict.fromkeys(CHECK_ITEMS, "passed")
    assert "Reference solutions, this run" in run.output


def test_mutants_are_each_rejected(lab: Lab) -> None:
    lab.add_lesson()

    run = lab.run_pytest("--mutants")

    assert run.returncode == 0, run.output
    assert {name: outcome for name, (outcome, _) in run.of("02_Tiny").items()} == dict.fromkeys(MUTANT_ITEMS, "passed")


def test_a_mutant_that_survives_weak_checks_fails_its_item(lab: Lab) -> None:
    lab.add_lesson(checks=WEAK_CHECKS)  # every check tries x = 1 only, where 2 * x == x + 1

    run = lab.run_pytest("--mutants")

    assert run.returncode == 1, run.output
    items = run.of("02_Tiny")
    assert items["mutant::add_one::adds_two"][0] == "passed"
    outcome, message = items["mutant::add_one::doubles"]
    assert outcome == "failed"
    assert "survived: all 3 checks of exercise 'add_one' passed on it" in message
    assert "Strengthen the checks" in message


def test_a_stale_mutant_fails_with_a_clear_message(lab: Lab) -> None:
    lab.add_lesson(mutants=STALE_MUTANTS)

    run = lab.run_pytest("--mutants")

    assert run.returncode == 1, run.output
    items = run.of("02_Tiny")
    assert items["mutant::add_one::adds_two"][0] == "passed"
    outcome, message = items["mutant::add_one::subtracts"]
    assert outcome == "failed"
    assert "expected the text 'return x - 1' exactly once in the solution, found it 0 times" in message
    assert "update the mutant" in message


def test_an_untouched_lesson_is_not_attempted_without_being_run(lab: Lab) -> None:
    # A setup cell that cannot run: any grading of this lesson would fail, so "not attempted" proves nothing ran it.
    lab.add_lesson(setup_code="import torch\nimport no_such_module_anywhere")

    run = lab.run_pytest()

    assert run.returncode == 0, run.output
    assert {outcome for outcome, _ in run.of("02_Tiny").values()} == {"skipped"}
    assert "graded in child processes" not in run.output  # no grading process was started

    forced = lab.run_pytest("--grade-untouched")  # what the self-check does: grade the skeleton for real

    assert forced.returncode == 1, forced.output
    for outcome, message in forced.of("02_Tiny").values():
        assert outcome == "failed" and "the setup cell failed" in message, message


def test_self_check_grades_skeletons_solutions_and_mutants_in_one_pass(lab: Lab) -> None:
    lab.add_lesson()

    run = lab.run_pytest("--self-check")

    assert run.returncode == 0, run.output
    expected = {f"skeleton::{name}" for name in CHECK_ITEMS} | {f"solution::{name}" for name in CHECK_ITEMS}
    assert {name: outcome for name, (outcome, _) in run.of("02_Tiny").items()} == dict.fromkeys(
        expected | MUTANT_ITEMS, "passed"
    )
    assert "1 lesson graded in child processes" in run.output  # the three modes, one child


def test_self_check_fails_a_learner_cell_that_passes_untouched(lab: Lab) -> None:
    lab.add_lesson(solved=True)  # as if the skeleton gave the answer away

    run = lab.run_pytest("--self-check")

    assert run.returncode == 1, run.output
    items = run.of("02_Tiny")
    for name in CHECK_ITEMS:
        outcome, message = items[f"skeleton::{name}"]
        assert outcome == "failed" and "the untouched skeleton passes check" in message, message
        assert items[f"solution::{name}"][0] == "passed"


def test_self_check_is_one_of_the_modes(lab: Lab) -> None:
    lab.add_lesson()
    run = lab.run_pytest("--self-check", "--mutants")
    assert run.returncode == 4 and "grade different things" in run.output, run.output
