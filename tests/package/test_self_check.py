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
