"""`lesson.use(lesson_id, name)`: a later lesson takes an earlier lesson's building block — the learner's own when
it passes all of that exercise's checks, the reference otherwise — and says which one it took."""

from __future__ import annotations

import os
import re

import pytest
from tiny_lab import Lab

from llm_algo import device
from llm_algo.grading import cache as lesson_cache
from llm_algo.grading.execute import MODE_ENV, load_namespace
from llm_algo.notebook import read_lesson
from llm_algo.session import setup_lesson

USES_TINY = 'add_one_from_tiny = lesson.use("p02.tiny", "add_one")\nassert add_one_from_tiny(1) == 2'


def borrow(capsys: pytest.CaptureFixture):
    session = setup_lesson("p02.next", {})
    capsys.readouterr()
    block = session.use("p02.tiny", "add_one")
    return block, capsys.readouterr().out.strip()


def add_next_lesson(lab: Lab) -> None:
    lab.add_lesson("p02.next", "03_Next.ipynb", setup_code=f"import torch\n{USES_TINY}", prerequisites=("p02.tiny",))


def test_a_passing_exercise_lends_the_learners_own_code(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson(solved=True)
    add_next_lesson(lab)
    block, said = borrow(capsys)
    assert re.search(r"from 02_Tiny.ipynb as saved at \d\d:\d\d:\d\d —", said)  # the file on disk is what use() read
    assert (
        re.sub(r" as saved at \d\d:\d\d:\d\d", "", said)
        == "add_one: using yours from 02_Tiny.ipynb — all 3 checks of exercise 'add_one' pass"
    )
    assert "exercise add_one" in block.__code__.co_filename  # the function defined by the learner's cell
    assert block(41) == 42


def test_an_unfinished_exercise_lends_the_reference(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    add_next_lesson(lab)
    block, said = borrow(capsys)
    assert (
        re.sub(r" as saved at \d\d:\d\d:\d\d", "", said)
        == "add_one: using reference from 02_Tiny.ipynb — yours is not attempted (0/3 checks pass)"
    )
    assert "solution add_one" in block.__code__.co_filename
    assert block(41) == 42


def test_a_wrong_exercise_lends_the_reference(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson(exercise_source="def add_one(x):\n    return x + 2")
    add_next_lesson(lab)
    block, said = borrow(capsys)
    assert (
        re.sub(r" as saved at \d\d:\d\d:\d\d", "", said)
        == "add_one: using reference from 02_Tiny.ipynb — yours fails (0/3 checks pass)"
    )
    assert block(41) == 42


def test_grading_the_reference_solutions_never_borrows_the_learners(
    lab: Lab, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab.add_lesson(solved=True)
    add_next_lesson(lab)
    monkeypatch.setenv(MODE_ENV, "solution")
    block, said = borrow(capsys)
    assert said == "add_one: using reference from 02_Tiny.ipynb — grading the reference solutions"
    assert "solution add_one" in block.__code__.co_filename


def test_a_setup_cell_that_borrows_grades_in_every_mode(lab: Lab) -> None:
    lab.add_lesson()
    add_next_lesson(lab)
    for args, outcome in ((("--solutions",), "passed"), ((), "skipped")):
        run = lab.run_pytest(*args, "02_PyTorch_Algorithms/03_Next.ipynb")
        assert run.counts("03_Next") == {outcome: 3}, run.output


def test_an_exercise_cell_that_does_not_run_lends_the_reference(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson(exercise_source="def add_one(x)\n    return x + 1")  # a syntax error
    add_next_lesson(lab)
    block, said = borrow(capsys)
    assert (
        re.sub(r" as saved at \d\d:\d\d:\d\d", "", said)
        == "add_one: using reference from 02_Tiny.ipynb — yours fails (0/3 checks pass)"
    )
    assert block(41) == 42


GPU_ONLY_CHECKS = """
from llm_algo.check import Checks, expect

checks = Checks({lesson_id!r})


@checks("add_one", requires_cuda=True)
def on_the_gpu(ex):
    expect(ex.add_one(1) == 2, "add_one(1) is wrong")


@checks("add_one", requires_cuda=True)
def on_the_gpu_too(ex):
    expect(ex.add_one(2) == 3, "add_one(2) is wrong")


@checks("add_one", requires_cuda=True)
def on_the_gpu_again(ex):
    expect(ex.add_one(3) == 4, "add_one(3) is wrong")
"""


def test_an_exercise_whose_checks_were_all_skipped_lends_the_reference(
    lab: Lab, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_ALGO_FORCE_CPU", "1")  # the checks need CUDA: skipped here
    device.policy.cache_clear()
    try:
        lab.add_lesson(solved=True, checks=GPU_ONLY_CHECKS)
        add_next_lesson(lab)
        block, said = borrow(capsys)
    finally:
        device.policy.cache_clear()
    assert (
        re.sub(r" as saved at \d\d:\d\d:\d\d", "", said)
        == "add_one: using reference from 02_Tiny.ipynb — yours needs a GPU to be graded (0/3 checks pass)"
    )
    assert "solution add_one" in block.__code__.co_filename


def test_an_earlier_lesson_is_loaded_once_until_it_changes(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    path = lab.add_lesson(solved=True)
    add_next_lesson(lab)
    first, _ = borrow(capsys)
    again, said = borrow(capsys)
    assert again is first and said.startswith("add_one: using yours")  # the same function: not loaded again

    lab.edit_cell(path, "exercise", lambda cell: cell.update(source="def add_one(x):\n    return x + 2\n"))
    changed, said = borrow(capsys)

    assert changed is not first and changed(1) == 2  # the learner broke it: the reference again
    assert (
        re.sub(r" as saved at \d\d:\d\d:\d\d", "", said)
        == "add_one: using reference from 02_Tiny.ipynb — yours fails (0/3 checks pass)"
    )


def test_loading_a_lesson_in_solution_mode_borrows_references(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson(solved=True)
    add_next_lesson(lab)
    assert MODE_ENV not in os.environ  # the mode travels with the load, not through the environment

    load_namespace(read_lesson(lab.notebook_path("03_Next.ipynb")), "solution")

    assert "add_one: using reference from 02_Tiny.ipynb — grading the reference solutions" in capsys.readouterr().out
    assert MODE_ENV not in os.environ


def test_a_new_kernel_takes_the_verdict_kept_on_disk(
    lab: Lab, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = lab.add_lesson(solved=True)
    add_next_lesson(lab)
    graded = []
    real = lesson_cache.check_exercise
    monkeypatch.setattr(lesson_cache, "check_exercise", lambda *args, **kw: graded.append(1) or real(*args, **kw))

    borrow(capsys)
    lesson_cache.clear()  # as in a new process
    _, said = borrow(capsys)

    assert len(graded) == 1 and said.startswith("add_one: using yours")  # the checks ran once
    assert list((lab.root / ".llm_algo" / "verdicts").glob("*.json"))

    lab.edit_cell(path, "exercise", lambda cell: cell.update(source=cell["source"] + "\n# tidied up\n"))
    lesson_cache.clear()
    _, said = borrow(capsys)

    assert len(graded) == 2 and said.startswith("add_one: using yours")  # the code changed: graded again
