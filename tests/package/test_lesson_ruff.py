"""`llm_algo.authoring.lesson_ruff`: `python -m llm_algo lint` runs ruff on each lesson's code cells joined in
execution order, as a learner runs them and with the solutions in place, and names the notebook, cell and line of
each finding."""

from __future__ import annotations

from tiny_lab import SOLUTION_CELL, Lab

from llm_algo.authoring.lesson_ruff import joined, lesson_ruff, rule_set
from llm_algo.authoring.lint import lint
from llm_algo.notebook import read_lesson

NOTEBOOK = "02_PyTorch_Algorithms/02_Tiny.ipynb"

# The reference solution reads a name nothing defines: every check of the lesson would fail on the solution, but
# only once it runs; a learner who opens the solution to compare gets a NameError.
UNDEFINED_IN_SOLUTION = '''
def add_one(x):
    """x + 1, for a number or a tensor."""
    # TODO: add one to x
    ### BEGIN SOLUTION
    return x + one
    ### END SOLUTION
'''

# The skeleton shows the shape of the answer after its raise: names the learner will define, never run.
RETURN_AFTER_RAISE = '''
def add_one(x):
    """x + 1, for a number or a tensor."""
    # TODO: add one to x
    ### BEGIN SOLUTION
    result = x + 1
    ### END SOLUTION
    return result
'''


def test_an_undefined_name_in_a_solution_cell_fails_the_lint(lab: Lab) -> None:
    lab.add_lesson(solution=UNDEFINED_IN_SOLUTION)
    errors = lint()
    assert errors == [
        f"{NOTEBOOK}, {SOLUTION_CELL}, line 5 (solution form): F821 Undefined name `one` "
        "(ruff, pyproject.toml [tool.llm_algo.lesson-ruff])"
    ]


def test_the_tiny_lesson_and_its_toolbox_imports_pass(lab: Lab) -> None:
    lab.add_lesson(setup_code="import math\n\nimport torch")  # a setup's imports the solution does not use
    assert lint() == []


def test_a_setup_finding_is_reported_once_for_both_forms(lab: Lab) -> None:
    lab.add_lesson(setup_code="import torch\n\nscale = torch.ones(3) * factor")
    (error,) = lint()
    assert error.startswith(f"{NOTEBOOK}, cell 3 (setup), line ")
    assert "(learner and solution form): F821 Undefined name `factor`" in error


def test_a_skeletons_return_after_raise_is_not_reported(lab: Lab) -> None:
    lab.add_lesson(solution=RETURN_AFTER_RAISE)
    lesson = read_lesson(lab.notebook_path("02_Tiny.ipynb"))
    text, pieces = joined(lesson, "learner")
    assert "raise NotImplementedError" in text and "return result" in text  # `result` is undefined there
    assert [p.kind for p in pieces] == ["setup", "learner-exercise", "check"]
    assert lesson_ruff([lesson]) == []


def test_the_joined_file_maps_back_to_cells(lab: Lab) -> None:
    lesson = read_lesson(lab.add_lesson())
    text, pieces = joined(lesson, "solution")
    lines = text.splitlines()
    for piece in pieces:
        assert lines[piece.first_line - 1 : piece.first_line - 1 + piece.lines] == piece.cell.source.splitlines()
    assert [p.cell.label() for p in pieces] == ["cell 3 (setup)", SOLUTION_CELL, 'cell 5 (check "add_one")']


def test_the_rule_set_is_named_in_pyproject(real_repo) -> None:
    rules = rule_set()
    assert {"F", "E9", "B"} <= set(rules.select)
    assert rules.source == "pyproject.toml [tool.llm_algo.lesson-ruff]"
