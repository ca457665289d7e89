"""Diagnoses on a real lesson (issue 19, item 3): a learner's mistake that a mutant encodes is named, and a check
that fails because an earlier exercise it uses is wrong says so."""

from __future__ import annotations

import pytest

from llm_algo.grading.cache import find_lesson
from llm_algo.grading.diagnose import upstream
from llm_algo.grading.execute import load_namespace
from llm_algo.mutation.mutants import load_mutants
from llm_algo.session import setup_lesson


@pytest.fixture(scope="module")
def with_variance():
    """p02.rmsnorm as a learner who used the variance in `rms_norm` (and wrote the module right) has it."""
    lesson = find_lesson("p02.rmsnorm")
    mistake = next(m for m in load_mutants("p02.rmsnorm") if m.name == "layernorm_statistic")
    return lesson, load_namespace(lesson, "solution", mutant=mistake).namespace


def report(capsys, namespace: dict, exercise: str) -> str:
    setup_lesson("p02.rmsnorm", namespace).check(exercise)
    return capsys.readouterr().out


def test_the_module_exercise_uses_the_function_exercise(with_variance):
    lesson, _ = with_variance
    assert upstream(lesson, "rmsnorm_module") == {"rms_norm": ["rms_norm"]}
    assert upstream(lesson, "rms_norm") == {}


def test_a_known_mistake_is_named(with_variance, capsys):
    out = report(capsys, with_variance[1], "rms_norm")
    assert "rms_norm: ❌ failed" in out
    assert "diagnosis: your result is exactly what code gives that uses the variance (subtracts the mean)" in out


def test_a_wrong_rms_norm_is_blamed_not_the_module(with_variance, capsys):
    lesson, namespace = with_variance
    module_solution = lesson.solution_cell("rmsnorm_module").source
    exec(compile("# my own cell\n" + module_solution, "<learner cell>", "exec"), namespace)  # written right
    out = report(capsys, namespace, "rmsnorm_module")
    assert "rmsnorm_module: ❌ failed" in out
    assert "uses exercise 'rms_norm' (your `rms_norm`), which fails its own checks: fix that first" in out
