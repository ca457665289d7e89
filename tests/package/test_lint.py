"""`llm_algo.authoring.lint`: a notebook built by LessonBuilder keeps the contract, and each broken rule gives an error
that names the notebook (and the cell, for rules about a cell)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from tiny_lab import ADD_ONE_SOLVED, CHECK_CELL, EXERCISE_CELL, MUTANTS, SOLUTION_CELL, WEAK_CHECKS, Lab

from llm_algo.authoring.lint import lint

NOTEBOOK = "02_PyTorch_Algorithms/02_Tiny.ipynb"
pytestmark = pytest.mark.filterwarnings("ignore:Non-unique cell id")  # nbformat's reader renames duplicates


def test_a_built_lesson_passes(lab: Lab) -> None:
    lab.add_lesson()
    assert lint() == []


def test_a_known_prerequisite_passes(lab: Lab) -> None:
    lab.add_lesson("p02.healthy", "01_Healthy.ipynb")
    lab.add_lesson(prerequisites=("p02.healthy",))
    assert lint() == []


def cells(notebook: dict, tag: str) -> list[dict]:
    return [c for c in notebook["cells"] if tag in c["metadata"].get("tags", [])]


def set_meta(key: str, value) -> Callable[[dict], None]:
    return lambda nb: nb["metadata"]["llm_algo"].__setitem__(key, value)


def drop_meta(key: str) -> Callable[[dict], None]:
    return lambda nb: nb["metadata"]["llm_algo"].pop(key)


def edit(tag: str, change: Callable[[dict], None]) -> Callable[[dict], None]:
    return lambda nb: change(cells(nb, tag)[0])


def solution_before_stop(nb: dict) -> None:
    solution = cells(nb, "solution")[0]
    nb["cells"].remove(solution)
    stop = next(i for i, c in enumerate(nb["cells"]) if c["source"].startswith("## 🛑 STOP"))
    nb["cells"].insert(stop, solution)  # now cell 6, and STOP cell 7


def with_output(cell: dict) -> None:
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hello\n"}]
    cell["execution_count"] = 3


def duplicate_id(nb: dict) -> None:
    cells(nb, "check")[0]["id"] = cells(nb, "exercise")[0]["id"]


@dataclass(frozen=True)
class Rule:
    id: str
    change: Callable[[dict], None] | None  # an edit to the notebook JSON
    where: str  # the error line starts with this
    message: str  # and says this
    checks: str | None = None
    mutants: str | None = None


ONE_MUTANT = MUTANTS.replace(
    '    Mutant("add_one", "doubles", "multiplies instead of adding", [("return x + 1", "return x * 2")]),\n', ""
)
TWO_CHECKS = WEAK_CHECKS.split('@checks("add_one")\ndef one_tensor')[0]

RULES = [
    *[
        Rule(f"missing_metadata_{key}", drop_meta(key), NOTEBOOK, f"metadata llm_algo.{key}")
        for key in ("title", "difficulty", "device", "minutes", "prerequisites")
    ],
    Rule("missing_metadata_id", drop_meta("id"), NOTEBOOK, "metadata llm_algo.id None must look like pNN.slug"),
    Rule("bad_id", set_meta("id", "p2.Tiny"), NOTEBOOK, "metadata llm_algo.id 'p2.Tiny' must look like pNN.slug"),
    Rule("id_of_another_part", set_meta("id", "p03.tiny"), NOTEBOOK, "does not match its part folder"),
    Rule("bad_difficulty", set_meta("difficulty", "trivial"), NOTEBOOK, "difficulty must be easy, medium or hard"),
    Rule("minutes_not_a_number", set_meta("minutes", "5"), NOTEBOOK, "minutes must be a positive whole number"),
    Rule(
        "signature_drift_argument_names",
        edit("exercise", lambda c: c.update(source="def add_one(value):\n    raise NotImplementedError\n")),
        f"{NOTEBOOK}, {EXERCISE_CELL}",
        "signature drift: exercise has `def add_one(value)`, solution has `def add_one(x)`",
    ),
    Rule(
        "signature_drift_default",
        edit("exercise", lambda c: c.update(source="def add_one(x=0):\n    raise NotImplementedError\n")),
        f"{NOTEBOOK}, {EXERCISE_CELL}",
        "signature drift: exercise has `def add_one(x=0)`",
    ),
    Rule(
        "exercise_misses_the_function",
        edit("exercise", lambda c: c.update(source=ADD_ONE_SOLVED.replace("def add_one(", "def add_1("))),
        f"{NOTEBOOK}, {EXERCISE_CELL}",
        "does not define 'add_one', which its solution defines (renamed?)",
    ),
    Rule(
        "solution_not_hidden",
        edit("solution", lambda c: c["metadata"].pop("jupyter")),
        f"{NOTEBOOK}, {SOLUTION_CELL}",
        "a solution cell must be collapsed",
    ),
    Rule(
        "solution_not_a_colab_form",
        edit("solution", lambda c: c["metadata"].pop("cellView")),
        f"{NOTEBOOK}, {SOLUTION_CELL}",
        "a solution cell must be collapsed",
    ),
    Rule(
        "solution_without_title_line",
        edit("solution", lambda c: c.update(source=c["source"].split("\n", 1)[1])),
        f"{NOTEBOOK}, {SOLUTION_CELL}",
        "a '#@title' first line",
    ),
    Rule(
        "solution_before_stop",
        solution_before_stop,
        f'{NOTEBOOK}, cell 6 (solution "add_one")',
        "solution cells belong after the STOP marker",
    ),
    Rule(
        "outputs_not_stripped",
        edit("exercise", with_output),
        f"{NOTEBOOK}, {EXERCISE_CELL}",
        "outputs must be stripped",
    ),
    Rule(
        "execution_count_not_stripped",
        edit("setup", lambda c: c.update(execution_count=1)),
        f"{NOTEBOOK}, cell 3 (setup)",
        "outputs must be stripped",
    ),
    Rule("duplicate_cell_ids", duplicate_id, NOTEBOOK, "cells 4, 5 share the cell id 'exercise-1'"),
    Rule(
        "unknown_prerequisite",
        set_meta("prerequisites", ["p02.missing"]),
        NOTEBOOK,
        "prerequisite 'p02.missing' is not the id of any lesson",
    ),
    Rule(
        "check_cell_with_extra_code",
        edit("check", lambda c: c.update(source='check("add_one")\nprint("all good")')),
        f"{NOTEBOOK}, {CHECK_CELL}",
        'a check cell holds exactly check("add_one")',
    ),
    Rule(
        "check_cell_for_another_exercise",
        edit("check", lambda c: c.update(source='check("add_two")')),
        f"{NOTEBOOK}, {CHECK_CELL}",
        'a check cell holds exactly check("add_one")',
    ),
    Rule(
        "no_chinese_summary",
        lambda nb: nb["cells"][0].update(source=nb["cells"][0]["source"].split("## 本节要点")[0]),
        NOTEBOOK,
        "needs a 简体中文 summary right after the title",
    ),
    Rule("fewer_than_three_checks", None, NOTEBOOK, "exercise 'add_one' has 2 checks; at least 3", checks=TWO_CHECKS),
    Rule("fewer_than_two_mutants", None, NOTEBOOK, "exercise 'add_one' has 1 mutants; at least 2", mutants=ONE_MUTANT),
]


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_names_notebook_and_cell(lab: Lab, rule: Rule) -> None:
    options = {k: v for k, v in (("checks", rule.checks), ("mutants", rule.mutants)) if v is not None}
    path = lab.add_lesson(**options)
    if rule.change:
        lab.edit_notebook(path, rule.change)

    errors = lint([path])

    assert any(error.startswith(f"{rule.where}: ") and rule.message in error for error in errors), errors


def test_checks_module_that_does_not_load_is_an_error_not_a_crash(lab: Lab) -> None:
    lab.add_lesson(checks="raise RuntimeError('half-written checks')\n")
    errors = lint()
    assert f"{NOTEBOOK}: its checks or mutants do not load: RuntimeError: half-written checks" in errors


def test_invalid_json_is_one_error(lab: Lab) -> None:
    path = lab.add_lesson()
    path.write_text("{", encoding="utf-8")
    errors = lint([path])
    assert len(errors) == 1 and errors[0].startswith(f"{NOTEBOOK}: not valid JSON"), errors
