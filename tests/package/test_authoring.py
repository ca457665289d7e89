"""`llm_algo.authoring`: the exercise cell is the solution with its marked regions cut out."""

from __future__ import annotations

import ast

import pytest

from llm_algo.authoring.builder import BEGIN, END, LessonBuilder, skeleton, strip_markers
from llm_algo.notebook import source_hash

SOLUTION = f'''def attention(q, k, v, causal=False):
    """q, k, v: (T, D) -> (T, D)"""
    # TODO: scores scaled by 1/sqrt(D): (T, T)
    {BEGIN}
    scores = q @ k.T / q.shape[-1] ** 0.5  # (T, T)
    {END}
    if causal:
        # TODO: mask the future with -inf
        {BEGIN}
        mask = torch.ones_like(scores, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        {END}
    return scores.softmax(-1) @ v  # (T, D)'''

SKELETON = '''def attention(q, k, v, causal=False):
    """q, k, v: (T, D) -> (T, D)"""
    # TODO: scores scaled by 1/sqrt(D): (T, T)
    raise NotImplementedError  # your code here
    if causal:
        # TODO: mask the future with -inf
        raise NotImplementedError  # your code here
    return scores.softmax(-1) @ v  # (T, D)'''


def test_skeleton_replaces_each_region_at_its_indent_and_keeps_the_todos() -> None:
    assert skeleton(SOLUTION) == SKELETON
    ast.parse(skeleton(SOLUTION))  # the learner's cell is valid Python


def test_strip_markers_keeps_the_solution_lines_only() -> None:
    solution = strip_markers(SOLUTION)
    assert BEGIN not in solution and END not in solution
    assert '        scores = scores.masked_fill(mask, float("-inf"))' in solution.splitlines()
    assert "# TODO: mask the future with -inf" in solution  # the TODOs stay: they explain the solution too


def test_a_region_at_the_top_level_of_a_cell() -> None:
    assert (
        skeleton(f"import torch\n{BEGIN}\nanswer = 42\n{END}\n")
        == "import torch\nraise NotImplementedError  # your code here"
    )


@pytest.mark.parametrize(
    "source",
    [
        f"def f():\n    {BEGIN}\n    return 1\n",  # BEGIN without END
        f"def f():\n    return 1\n    {END}\n",  # END without BEGIN
        f"def f():\n    {BEGIN}\n    {BEGIN}\n    return 1\n    {END}\n",  # nested
    ],
    ids=["begin_without_end", "end_without_begin", "nested_begin"],
)
def test_unbalanced_markers_raise(source: str) -> None:
    with pytest.raises(ValueError, match="SOLUTION"):
        skeleton(source)


def test_the_builder_writes_skeleton_check_and_collapsed_solution() -> None:
    lesson = LessonBuilder("p02.demo", "02_PyTorch_Algorithms/09_Demo.ipynb", "Demo", "演示", "easy", "cpu", 5)
    lesson.setup("import torch")
    lesson.exercise("attention", SOLUTION)
    lesson.stop()
    cells = lesson.notebook().cells
    by_tag = {cell.metadata.get("tags", [None])[0]: cell for cell in cells}
    assert by_tag["exercise"].source == SKELETON
    # the skeleton's hash lets `pytest` call an untouched exercise not attempted without loading the lesson
    assert by_tag["exercise"].metadata["llm_algo"] == {"exercise": "attention", "skeleton": source_hash(SKELETON)}
    assert by_tag["check"].source == 'check("attention")'
    solution = by_tag["solution"]
    assert solution.source == "#@title Reference solution: attention\n" + strip_markers(SOLUTION)
    assert solution.metadata["jupyter"] == {"source_hidden": True} and solution.metadata["cellView"] == "form"
    assert [cell.id for cell in cells] == ["setup-1", "exercise-1", "check-1", "md-1", "solution-1"]
    assert 'lesson = setup_lesson("p02.demo")' in by_tag["setup"].source
