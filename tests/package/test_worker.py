"""The grading child: forked from a warm zygote (Linux) or a fresh interpreter, with the same verdicts; a warm child
takes the environment of the request that started it (another checkout, another root), and one child grades every
mode of a lesson."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_lab import ADD_ONE_SOLVED, Lab, clear_caches

from llm_algo.outcome import CheckResult, Unit
from llm_algo.settings import WARM_GRADER
from llm_algo.worker.child import grade_in_subprocess, start_zygote

CHECKS = ("add_one::adds_one_to_two", "add_one::random_integers", "add_one::tensors_elementwise")


def every_mode() -> list[Unit]:
    plain = [Unit(key, mode) for mode in ("learner", "solution") for key in CHECKS]
    return plain + [Unit("mutant::add_one::adds_two", "solution"), Unit("mutant::add_one::doubles", "solution")]


def outcomes(results: dict) -> dict[Unit, str]:
    return {unit: r.outcome if isinstance(r, CheckResult) else r for unit, r in results.items()}


def test_one_child_grades_every_mode_of_a_lesson(lab: Lab) -> None:
    path = lab.add_lesson(exercise_source="def add_one(x):\n    return x - 1\n")

    results = outcomes(grade_in_subprocess(path, every_mode(), timeout=20))

    assert {u: o for u, o in results.items() if u.mode == "learner"} == dict.fromkeys(
        [Unit(key, "learner") for key in CHECKS], "failed"
    )
    assert {u: o for u, o in results.items() if u.mode == "solution"} == dict.fromkeys(every_mode()[3:], "passed")


@pytest.mark.skipif(not WARM_GRADER.default, reason="the warm grader forks: Linux only")
def test_a_warm_child_takes_the_root_of_its_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start_zygote()  # started before either lab exists, so nothing of them can be cached in it
    verdicts = {}
    for name, source in (("solved", ADD_ONE_SOLVED), ("wrong", "def add_one(x):\n    return x * 2\n")):
        lab = Lab.create(tmp_path / name)
        monkeypatch.setenv("LLM_ALGO_ROOT", str(lab.root))
        clear_caches()
        path = lab.add_lesson(exercise_source=source)  # the same lesson id and file name in both
        verdicts[name] = set(outcomes(grade_in_subprocess(path, every_mode()[:3], timeout=20)).values())
    clear_caches()
    assert verdicts == {"solved": {"passed"}, "wrong": {"failed"}}


def test_a_fresh_interpreter_gives_the_same_verdicts(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    path = lab.add_lesson(exercise_source="import os\nos._exit(3)\n")
    warm = grade_in_subprocess(path, every_mode(), timeout=20)
    monkeypatch.setenv(WARM_GRADER.env, "0")

    cold = grade_in_subprocess(path, every_mode(), timeout=20)

    assert outcomes(cold) == outcomes(warm)
    learner = [warm[Unit(key, "learner")] for key in CHECKS]
    assert all("process exited (code 3)" in message for message in learner), learner
