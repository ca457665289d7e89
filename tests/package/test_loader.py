"""The loader runs notebook cells the way the grader sees them: errors point at the notebook cell and line,
IPython syntax does not break grading, and classes defined in a cell behave like a module's."""

from __future__ import annotations

import dataclasses
import pickle
import traceback

import pytest
from tiny_lab import ADD_ONE_SOLVED, EXERCISE_CELL, Lab

from llm_algo.check import load_checks
from llm_algo.grading.execute import load_namespace
from llm_algo.grading.run import check_exercise, run_check
from llm_algo.notebook import NotebookError, read_lesson

NOTEBOOK = "02_PyTorch_Algorithms/02_Tiny.ipynb"


def load(lab: Lab, exercise_source: str, mode: str = "learner", **options):
    lesson = read_lesson(lab.add_lesson(exercise_source=exercise_source, **options))
    return lesson, load_namespace(lesson, mode)


def test_an_error_inside_the_exercise_points_at_its_cell_and_line(lab: Lab) -> None:
    source = "def add_one(x):\n    offset = 1\n    return x + offsett\n"
    lesson, loaded = load(lab, source)
    assert loaded.broken == {} and loaded.not_attempted == set()

    result = run_check(load_checks("p02.tiny").specs[0], loaded.namespace, lesson.name)

    assert result.outcome == "failed"
    assert result.summary == (f"raised NameError: name 'offsett' is not defined at {NOTEBOOK}, {EXERCISE_CELL}, line 3")
    with pytest.raises(NameError) as caught:
        loaded.namespace["add_one"](1)
    shown = "".join(traceback.format_exception(caught.value))
    assert f"{NOTEBOOK}, cell 4" in shown
    assert "return x + offsett" in shown  # the cell's source line, through linecache


def test_an_error_at_the_top_of_an_exercise_cell_breaks_only_that_exercise(lab: Lab) -> None:
    _, loaded = load(lab, "x = 1\ny = x / 0\n" + ADD_ONE_SOLVED)
    assert loaded.broken == {
        "add_one": f"the cell raised ZeroDivisionError: division by zero (at {NOTEBOOK}, {EXERCISE_CELL}, line 2)"
    }


def test_a_syntax_error_names_the_cell_and_line(lab: Lab) -> None:
    _, loaded = load(lab, "def add_one(x)\n    return x + 1\n")
    assert "SyntaxError" in loaded.broken["add_one"]
    assert f"(at {NOTEBOOK}, {EXERCISE_CELL}, line 1)" in loaded.broken["add_one"]


def test_a_skeleton_is_not_attempted_not_broken(lab: Lab) -> None:
    _, loaded = load(lab, "raise NotImplementedError\n")
    assert loaded.not_attempted == {"add_one"} and loaded.broken == {}


def test_a_failing_setup_cell_is_a_notebook_error(lab: Lab) -> None:
    lesson = read_lesson(lab.add_lesson(setup_code="import torch\nimport no_such_module_anywhere"))
    with pytest.raises(NotebookError, match="the setup cell failed, so nothing can be graded: ModuleNotFoundError"):
        load_namespace(lesson, "learner")


def test_solution_mode_runs_the_solution_in_place_of_the_exercise(lab: Lab) -> None:
    _, loaded = load(lab, None, mode="solution")  # the exercise cell is the untouched skeleton
    assert loaded.not_attempted == set() and loaded.namespace["add_one"](41) == 42


def test_ipython_magics_and_shell_lines_do_not_break_grading(lab: Lab) -> None:
    setup = "%matplotlib inline\n!echo hi\nlisting = !ls\n%time total = 1 + 1\nimport torch"
    lesson, loaded = load(lab, "%%time\n" + ADD_ONE_SOLVED, setup_code=setup)

    assert loaded.broken == {} and loaded.not_attempted == set()
    assert "listing" in loaded.namespace
    registry = load_checks("p02.tiny")
    results = check_exercise(registry.specs, loaded, lesson, registry)
    assert [r.outcome for r in results] == ["passed", "passed", "passed"]


DATACLASS_CELL = """from __future__ import annotations

import dataclasses
from typing import ClassVar


@dataclasses.dataclass(frozen=True)
class Shape:
    rows: int
    cols: int = 1
    rank: ClassVar[int] = 2


def add_one(x):
    return x + 1
"""


def test_dataclasses_defined_in_a_cell_work(lab: Lab) -> None:
    _, loaded = load(lab, DATACLASS_CELL)
    assert loaded.broken == {}
    shape_class = loaded.namespace["Shape"]

    shape = shape_class(3)
    # with string annotations, dataclasses resolves ClassVar through sys.modules[Shape.__module__]
    assert [f.name for f in dataclasses.fields(shape_class)] == ["rows", "cols"]
    assert dataclasses.replace(shape, cols=4) == shape_class(3, 4)
    assert pickle.loads(pickle.dumps(shape)) == shape  # pickle finds the class through its module's name
