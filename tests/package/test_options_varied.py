"""Every option of an exercise's signature takes a non-default value in some check (issue 27, guard 7), and no check
lets the learner's code change the caller's tensors (llm_algo.check.calls).

The options a lesson's checks varied are recorded while its reference solutions are graded (the self-check writes
`.llm_algo/options/<lesson>.json`; CI runs it before the package tests). This test reads the exercise cells'
signatures from the notebooks and fails on a parameter with a default that no check called with another value.
Options a check cannot reach from the grading process (a function only called inside rank processes, a GPU-only
exercise graded on a CPU) are listed in `options_pending.toml` next to this file with the reason.
"""

from __future__ import annotations

import ast
import contextlib
import json
import tomllib
from pathlib import Path

import pytest
import torch

from llm_algo.check.api import Checks
from llm_algo.check.calls import CallRecorder, _non_default
from llm_algo.check.failure import CheckFailed
from llm_algo.notebook import read_lesson
from llm_algo.paths import lesson_notebooks, repo_root, state_dir

PENDING = Path(__file__).with_name("options_pending.toml")


def exercise_options(source: str) -> dict[str, list[str]]:
    """ "name" / "Class.method" -> the parameters with a default, of the public functions and methods a cell
    defines (the names the recorder uses)."""

    def with_defaults(args: ast.arguments) -> list[str]:
        positional = [*args.posonlyargs, *args.args]
        named = [a.arg for a in positional[len(positional) - len(args.defaults) :]]
        named += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        return named

    options: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            options[node.name] = with_defaults(node.args)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for method in node.body:
                if not isinstance(method, ast.FunctionDef):
                    continue
                plain = not any(
                    isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in method.decorator_list
                )
                if plain and (not method.name.startswith("_") or method.name in ("__init__", "__call__")):
                    options[f"{node.name}.{method.name}"] = with_defaults(method.args)
    return {name: params for name, params in options.items() if params}


def pending() -> dict[str, str]:
    """ "lesson::name.param" -> why no check in the grading process varies it."""
    if not PENDING.exists():
        return {}
    table = tomllib.loads(PENDING.read_text(encoding="utf-8"))
    return {f"{lesson}::{key}": why for lesson, entries in table.items() for key, why in entries.items()}


def unvaried_options() -> tuple[list[str], int]:
    recorded_dir = state_dir() / "options"
    missing, graded = [], 0
    for path in lesson_notebooks(repo_root()):
        lesson = read_lesson(path)
        record = recorded_dir / f"{lesson.id}.json"
        if not record.exists():
            continue
        graded += 1
        seen = json.loads(record.read_text())
        for exercise in lesson.exercise_names():
            for name, params in exercise_options(lesson.solution_cell(exercise).source).items():
                for param in params:
                    if param not in seen.get(name, []):
                        missing.append(f"{lesson.id}::{name}.{param}")
    return missing, graded


def test_every_option_is_varied_by_some_check():
    missing, graded = unvaried_options()
    if graded == 0:
        pytest.skip("no lesson's solutions graded in this clone yet (the self-check records the options)")
    allowed = pending()
    unexplained = [m for m in missing if m not in allowed]
    assert not unexplained, (
        f"{len(unexplained)} option(s) that no check varies (give each a non-default value in some check, comparing "
        "every result it returns):\n  " + "\n  ".join(unexplained)
    )


def test_pending_entries_are_still_needed():
    missing, graded = unvaried_options()
    if graded == 0:
        pytest.skip("no lesson's solutions graded in this clone yet")
    graded_ids = {p.stem for p in (state_dir() / "options").glob("*.json")}
    stale = [key for key in pending() if key.split("::")[0] in graded_ids and key not in missing]
    assert not stale, "options_pending.toml lists options a check now varies; remove them:\n  " + "\n  ".join(stale)


# ----------------------------------------------------------------------------- the recorder itself


def test_signatures_are_read_from_cells():
    source = """
def rms_norm(x, weight, eps=1e-6, *, out_dtype=None):
    pass
def _helper(a=1):
    pass
class Cache:
    def __init__(self, size, dtype=torch.float32):
        pass
    def append(self, k, v, start=0):
        pass
    @staticmethod
    def make(n=3):
        pass
"""
    assert exercise_options(source) == {
        "rms_norm": ["eps", "out_dtype"],
        "Cache.__init__": ["dtype"],
        "Cache.append": ["start"],
    }


def learner_namespace(source: str) -> dict:
    namespace = {"__name__": "learner_notebook", "torch": torch}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


def run_with_recorder(namespace, body, in_place=frozenset()):
    from llm_algo.check.api import Exercise

    with CallRecorder(namespace, in_place) as recorder:
        try:
            body(recorder.exercise(Exercise(namespace, "lesson")))
        except CheckFailed as exc:
            return exc, recorder
    return None, recorder


def test_a_function_that_scales_its_input_in_place_fails():
    namespace = learner_namespace("def scale(x, s=2.0):\n    return x.mul_(s)\n")
    x = torch.randn(4)
    failure, recorder = run_with_recorder(namespace, lambda ex: ex.scale(x))
    assert failure is not None and "changed its argument `x`" in failure.summary
    assert recorder.found is failure


def test_a_caught_failure_still_counts():
    """expect_refused-style code that swallows every exception must not turn a changed input into a pass."""
    namespace = learner_namespace("def scale(x, s=2.0):\n    x.mul_(s)\n    return x\n")

    def swallow(ex):
        with contextlib.suppress(Exception):
            ex.scale(torch.randn(3))

    failure, recorder = run_with_recorder(namespace, swallow)
    assert failure is None and recorder.found is not None


def test_declared_in_place_arguments_may_change_and_lists_are_compared():
    namespace = learner_namespace(
        "def step(params, grads, lr=0.1):\n    for p, g in zip(params, grads):\n        p.sub_(lr * g)\n        g.zero_()\n"
    )
    params, grads = [torch.randn(3)], [torch.randn(3)]
    failure, _ = run_with_recorder(namespace, lambda ex: ex.step(params, grads), in_place=frozenset({"params"}))
    assert failure is not None and "grads[0]" in failure.summary
    failure, _ = run_with_recorder(
        namespace, lambda ex: ex.step(params, grads), in_place=frozenset({"params", "grads"})
    )
    assert failure is None


def test_methods_of_notebook_classes_are_recorded_and_restored():
    namespace = learner_namespace(
        "class Norm(torch.nn.Module):\n"
        "    def __init__(self, dim, eps=1e-6):\n        super().__init__()\n        self.eps = eps\n"
        "    def forward(self, x, inplace=False):\n        return x.div_(2) if inplace else x / 2\n"
    )
    original_forward = namespace["Norm"].forward

    def body(ex):
        norm = ex.Norm(4, eps=1e-3)
        norm(torch.randn(2, 4))
        norm(torch.randn(2, 4), inplace=True)

    failure, _ = run_with_recorder(namespace, body)
    assert failure is not None and "Norm.forward" in failure.summary
    assert namespace["Norm"].forward is original_forward
    from llm_algo.check.calls import options_seen

    assert "eps" in options_seen()["Norm.__init__"] and "inplace" in options_seen()["Norm.forward"]


def test_non_default_values():
    import inspect

    def f(a, b=1, c=None, d=torch.float32, *rest, e="x", **extra):
        pass

    signature = inspect.signature(f)
    assert _non_default(signature, signature.bind(0)) == set()
    assert _non_default(signature, signature.bind(0, 1, None, torch.float32, e="x")) == set()
    assert _non_default(signature, signature.bind(0, 2, torch.zeros(1), torch.float16, 5, e="y", z=1)) == {
        "b",
        "c",
        "d",
        "rest",
        "e",
        "extra",
    }


def test_in_place_declarations_reach_the_specs():
    checks = Checks("p99.toy")

    @checks("step")
    def a_check(ex):
        """a check"""

    checks.in_place("step", "params")
    assert checks.specs[0].in_place == frozenset({"params"})
    with pytest.raises(ValueError):
        checks.in_place("step")


def test_a_function_comes_back_as_one_wrapper():
    """Checks key caches on id(ex.f): a fresh wrapper per access could take the id of a dead one from another
    namespace (a mutant's run then reads the reference's cached result)."""
    namespace = learner_namespace("def train(x, lr=0.1):\n    return x * lr\n")
    from llm_algo.check.api import Exercise

    with CallRecorder(namespace) as first:
        ex = first.exercise(Exercise(namespace, "lesson"))
        wrapper = ex.train
        assert ex.train is wrapper
    with CallRecorder(namespace) as second:
        assert second.exercise(Exercise(namespace, "lesson")).train is wrapper
