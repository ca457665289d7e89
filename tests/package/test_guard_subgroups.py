"""Guard 1 of issue 27 (review C1): every lesson whose distributed exercises take a `group` is checked on a sub-group
of a larger world, with a bystander that must receive nothing (`llm_algo.distributed.run_subgroup`).

Which lessons: those whose checks module starts real worlds (`run_ranks` or `run_subgroup`) and one of whose
exercises (the solution cell) defines a function or method with a `group` parameter. Their checks module must call
`run_subgroup`, or `make_group` (p02.collectives and p04.ring_allreduce put the learner's send/recv code on the
sub-group [1, 2, 3] of a world of 4 and balance every message: one to a non-member is never received and fails).
p05.distributed_training is not selected: its exercises build their process groups themselves (grid_groups) and take
none; it composes the p02 exercises, which are.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import pytest

from llm_algo.notebook import read_lesson
from llm_algo.paths import checks_module_path, lesson_notebooks

HELPERS = ("run_subgroup", "make_group")
# Lessons that do not use it yet, each with the reason; remove an entry when its lesson lands on the helper (the
# test fails while an entry is stale).
PENDING = {
    "p04.overlap": "bucket_reducer takes a group; its checks module is outside the files of the sub-groups helper",
}


@dataclass
class Distributed:
    lesson: str
    checks_source: str
    group_exercises: list[str]


def takes_group(source: str) -> bool:
    """A function or method in this (solution) source has a parameter named `group`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            if any(a.arg == "group" for a in arguments):
                return True
    return False


def calls(source: str, name: str) -> bool:
    return re.search(rf"\b{name}\b", source) is not None


def distributed_lessons() -> list[Distributed]:
    found = []
    for path in lesson_notebooks():
        lesson = read_lesson(path)
        checks = checks_module_path(lesson.id)
        if not checks.exists():
            continue
        source = checks.read_text(encoding="utf-8")
        if not (calls(source, "run_ranks") or calls(source, "run_subgroup")):
            continue
        exercises = [name for name in lesson.exercise_names() if takes_group(lesson.solution_cell(name).source)]
        if exercises:
            found.append(Distributed(lesson.id, source, exercises))
    return found


def uncovered(lessons: list[Distributed]) -> list[str]:
    """The lessons whose checks never put the learner's code on a sub-group with a bystander."""
    return [d.lesson for d in lessons if not any(calls(d.checks_source, helper) for helper in HELPERS)]


@pytest.fixture(scope="module")
def lessons() -> list[Distributed]:
    return distributed_lessons()


def test_the_guard_finds_the_distributed_lessons(lessons):
    ids = {d.lesson for d in lessons}
    for known in ("p02.collectives", "p02.ddp", "p02.zero", "p02.fsdp", "p02.expert_parallel", "p04.ring_allreduce"):
        assert known in ids, f"{known} takes a group and starts worlds: the guard must see it"


def test_every_distributed_lesson_runs_on_a_subgroup_with_a_bystander(lessons):
    missing = [lesson for lesson in uncovered(lessons) if lesson not in PENDING]
    assert not missing, (
        f"{missing}: exercises that take a `group` are never checked on a sub-group of a larger world; call "
        "llm_algo.distributed.run_subgroup in one check per such exercise (docs/WRITING_LESSONS.md, 'Checks that run "
        "in several processes')"
    )


def test_pending_entries_are_still_pending(lessons):
    by_id = {d.lesson: d for d in lessons}
    unknown = [lesson for lesson in PENDING if lesson not in by_id]
    assert not unknown, f"{unknown} in PENDING are not distributed lessons with a group parameter"
    stale = [lesson for lesson in PENDING if lesson not in uncovered([by_id[lesson]])]
    assert not stale, f"{stale} now use the sub-group helper: remove them from PENDING"


def test_a_checks_module_without_the_helper_is_caught():
    """What the guard reports for a lesson whose checks run only on a world of their own (as p02.ddp's did)."""
    world_only = Distributed(
        "p99.world_only",
        "results = run_ranks(train, 2, args=(ex.DDP, batch))\nvalues = expect_ranks_ok(results, input=label)\n",
        ["ddp"],
    )
    on_subgroup = Distributed("p99.subgroup", "results = run_subgroup(train, input=label, args=(ex.DDP,))\n", ["ddp"])
    assert uncovered([world_only, on_subgroup]) == ["p99.world_only"]
    assert takes_group("class DDP:\n    def __init__(self, module, bucket_cap_bytes=1, group=None):\n        pass\n")
    assert not takes_group("def assign_buckets(params, bucket_cap_bytes):\n    pass\n")
