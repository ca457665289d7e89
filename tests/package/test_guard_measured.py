"""Measured, never self-reported (issue 27, guard 2): no check takes the word of the learner's code for a figure
about its own run (a peak of memory or activations, bytes moved, a tile size); it measures it.

The guard reads every lesson's checks (tests/checks/*.py) and finds the figures a check reads from what the
learner's code returns:

- a string key that names such a figure (`result["peak_in_flight"]`, `out["state_bytes"]`) and that the checks module
  never writes itself (a key the checks put in a dict of their own holds the checks' own number);
- an attribute that names such a figure on an object the learner's code built (`hbm = ex.HBM(...)` then
  `hbm.bytes_moved`).

A function of the checks that reads one must measure the same thing next to it: call one of the package's ledgers
(`llm_algo.check.ledger`) or a hook that sees the learner's tensors (saved_tensors_hooks, a TorchDispatchMode). A
lesson whose figures are the exercise's answer (a cost model computes bytes from a configuration; nothing runs) is
listed in ANSWERS with why; one whose measurement another change brings is listed in PENDING with who brings it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "tests" / "checks"

FIGURE = re.compile(r"peak|bytes|memory|in_flight|tile|traffic|moved")
NOT_A_FIGURE = re.compile(r"_lr$|tile_schedule|program_to_tile|tiled")  # a learning rate; kernels named after tiles
MEASUREMENTS = {
    "SavedTensorLedger",
    "LiveTensors",
    "CommLedger",
    "saved_tensors_hooks",
    "TorchDispatchMode",
}

# lesson module -> why its figures are the exercise's answer, not a report about the learner's own run
ANSWERS = {
    "p02_kv_cache": "step_cost is a cost model: it computes a decode step's bytes from a configuration, and the checks "
    "compare them with their own count of the model's weights and cache",
}
# lesson module -> who brings the measurement (remove the entry when it lands)
PENDING: dict[str, str] = {}


def _str_key(subscript: ast.Subscript) -> str | None:
    key = subscript.slice
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _written_keys(tree: ast.AST) -> set[str]:
    """Keys the checks module writes itself: dict literals, dict(key=...), and subscript stores."""
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            keys |= {kw.arg for kw in node.keywords if kw.arg}
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _str_key(node):
            keys.add(_str_key(node))  # also the target of an augmented assignment (sent["bytes"] += n)
    return keys


def _is_figure(name: str) -> bool:
    return bool(FIGURE.search(name)) and not NOT_A_FIGURE.search(name)


def _learner_objects(function: ast.AST) -> set[str]:
    """Names bound, in this function, to what an exercise returned: `x = ex.Something(...)`."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "ex":
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _measures(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in MEASUREMENTS:
            return True
        if isinstance(node, ast.Attribute) and node.attr in MEASUREMENTS:
            return True
    return False


def self_reported_reads(source: str) -> list[tuple[str, int, str]]:
    """(function, line, figure) for every figure a checks module reads from the learner without measuring it."""
    tree = ast.parse(source)
    written = _written_keys(tree)
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        objects = _learner_objects(function)
        reads = []
        for node in ast.walk(function):
            key = _str_key(node) if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) else None
            if key and _is_figure(key) and key not in written:
                reads.append((node.lineno, f'["{key}"]'))
            on_learner_object = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if on_learner_object and node.value.id in objects and _is_figure(node.attr):
                reads.append((node.lineno, f"{node.value.id}.{node.attr}"))
        if reads and not _measures(function):
            found += [(function.name, line, what) for line, what in reads]
    return sorted(set(found), key=lambda item: item[1])


def lessons_reading_figures() -> dict[str, list[tuple[str, int, str]]]:
    out = {}
    for path in sorted(CHECKS.glob("p*.py")):
        reads = self_reported_reads(path.read_text(encoding="utf-8"))
        if reads:
            out[path.stem] = reads
    return out


def test_no_check_takes_the_learners_word_for_a_figure_about_its_own_run():
    problems = []
    for lesson, reads in lessons_reading_figures().items():
        if lesson in ANSWERS or lesson in PENDING:
            continue
        for function, line, what in reads:
            problems.append(
                f"tests/checks/{lesson}.py:{line}, {function}: reads {what} from the learner's code without "
                "measuring it (run the call under llm_algo.check.ledger and decide on the measurement)"
            )
    assert not problems, "\n".join(problems)


def test_the_exempt_lessons_still_read_such_a_figure():
    """An ANSWERS or PENDING entry whose lesson no longer reads a figure is stale: remove it."""
    reading = lessons_reading_figures()
    stale = sorted(lesson for lesson in {**ANSWERS, **PENDING} if lesson not in reading)
    assert not stale, f"remove these entries, their checks read no such figure any more: {stale}"


PIPELINE_BEFORE = """
def stage_in_rank(run_stage, stages, schedule, microbatches, targets, loss_fn):
    result = run_stage(stages[0], schedule[0], microbatches, targets, loss_fn, (2, 6))
    return dict(losses=list(result["losses"]), peak=result["peak_in_flight"])
"""
PIPELINE_AFTER = """
def stage_in_rank(run_stage, stages, schedule, microbatches, targets, loss_fn):
    with SavedTensorLedger(exclude=(stages[0], microbatches, targets), forwards_of=stages[0]) as ledger:
        result = run_stage(stages[0], schedule[0], microbatches, targets, loss_fn, (2, 6))
    return dict(reported_peak=result["peak_in_flight"], measured_peak=ledger.peak_forwards)
"""
HBM_OBJECT = """
def tiled_bytes(ex):
    hbm = ex.HBM(q=q, k=k, v=v)
    ex.tiled_attention(hbm, 16, 16)
    return hbm.bytes_moved
"""
OWN_FIGURE = """
def run_sharded(zero_class):
    return {"state_bytes": state_bytes(zero_class.optimizer)}

def check(ex):
    out = run_sharded(ex.ZeRO1)
    expect(out["state_bytes"] == 36)
"""


@pytest.mark.parametrize(
    ("source", "want"),
    [
        (PIPELINE_BEFORE, [("stage_in_rank", 4, '["peak_in_flight"]')]),  # review C3, before the ledger
        (PIPELINE_AFTER, []),
        (HBM_OBJECT, [("tiled_bytes", 5, "hbm.bytes_moved")]),
        (OWN_FIGURE, []),  # the checks computed state_bytes themselves
    ],
    ids=["reported-peak", "measured-peak", "learner-object", "checks-own-key"],
)
def test_the_scanner_tells_a_reported_figure_from_a_measured_one(source, want):
    assert self_reported_reads(source) == want
