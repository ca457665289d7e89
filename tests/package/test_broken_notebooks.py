"""A broken notebook costs only its own lesson: a one-line error that names the notebook and says what went
wrong, while a healthy lesson graded in the same run still passes and pytest ends normally.

Each breakage gets its own two-lesson repository and its own pytest run. A run keeps one core busy at a time
(pytest waits while its grader process works), so the runs go two at a time: on two cores, half the wall time.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiny_lab import ADD_ONE_SOLVED, EXERCISE_CELL, Lab, PytestRun


@dataclass(frozen=True)
class Breakage:
    id: str
    exercise_source: str | None  # the learner's exercise cell; None keeps the skeleton
    expected: tuple[str, ...]  # every failure message says all of these
    edit: Callable[[Lab, Path], None] | None = None  # an edit to the notebook file itself
    check_timeout: str = "20"


def truncate_file(lab: Lab, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")


def drop_exercise_tag(lab: Lab, path: Path) -> None:
    lab.edit_cell(path, "exercise", lambda cell: cell["metadata"].update(tags=[]))


BREAKAGES = [
    Breakage("invalid_json", ADD_ONE_SOLVED, ("not valid JSON", "line ", "git checkout"), edit=truncate_file),
    Breakage(
        "lost_exercise_tag",
        ADD_ONE_SOLVED,
        ('no exercise cell for exercise "add_one"', "`exercise` tag"),
        edit=drop_exercise_tag,
    ),
    Breakage(
        "renamed_function",
        ADD_ONE_SOLVED.replace("def add_one(", "def add_1("),
        ("defines no `add_one`", "did you rename it?"),
    ),
    Breakage(
        "infinite_loop_at_top_level",
        "while True:\n    pass\n" + ADD_ONE_SOLVED,
        ("TimeoutError", "took longer than 2 s", EXERCISE_CELL),
        check_timeout="2",
    ),
    Breakage(
        "infinite_loop_in_the_function",
        "def add_one(x):\n    while True:\n        pass\n",
        ("TimeoutError", "took longer than 2 s", f"{EXERCISE_CELL}, line 2"),
        check_timeout="2",
    ),
    # `except Exception` swallows the time limit's TimeoutError: only the watchdog can stop this one.
    Breakage(
        "infinite_loop_that_swallows_the_time_limit",
        "while True:\n    try:\n        while True:\n            pass\n    except Exception:\n        pass\n",
        ("made no progress", "was stopped", EXERCISE_CELL),
        check_timeout="2",
    ),
    Breakage(
        "os_exit",
        "import os\nos._exit(1)\n" + ADD_ONE_SOLVED,
        ("process exited (code 1)", "os._exit()", EXERCISE_CELL),
    ),
    Breakage(
        "sys_exit",
        "import sys\nsys.exit()\n" + ADD_ONE_SOLVED,
        ("process exited (code 0)", "exit()", EXERCISE_CELL),
    ),
    Breakage(
        "prints_megabytes",
        "print('x' * 5_000_000)\n" + ADD_ONE_SOLVED,
        ("TooMuchOutput", "printed more than", f"{EXERCISE_CELL}, line 1"),
    ),
    # Writes that bypass sys.stdout (C code, os.write) are stopped by the parent, which watches the log's size.
    Breakage(
        "writes_megabytes_below_python",
        "import os\nwhile True:\n    os.write(1, b'x' * 100_000)\n",
        ("printed more than", "was stopped", EXERCISE_CELL),
    ),
]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start the pytest run of every selected breakage, two at a time; each test waits for its own."""
    selected = {
        item.callspec.params["breakage"].id
        for item in request.session.items
        if hasattr(item, "callspec") and isinstance(item.callspec.params.get("breakage"), Breakage)
    }
    pool = ThreadPoolExecutor(max_workers=2)
    futures: dict[str, Future[PytestRun]] = {}
    for breakage in sorted(BREAKAGES, key=lambda b: b.check_timeout):  # the slow, looping ones first
        if breakage.id not in selected:
            continue
        lab = Lab.create(tmp_path_factory.mktemp(breakage.id) / "lab")
        lab.add_lesson("p02.healthy", "01_Healthy.ipynb", solved=True)
        broken = lab.add_lesson("p02.broken", "03_Broken.ipynb", exercise_source=breakage.exercise_source)
        if breakage.edit:
            breakage.edit(lab, broken)
        futures[breakage.id] = pool.submit(lab.run_pytest, "--check-timeout", breakage.check_timeout)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b.id for b in BREAKAGES])
def test_broken_lesson_fails_alone_and_the_run_completes(
    runs: dict[str, Future[PytestRun]], breakage: Breakage
) -> None:
    run = runs[breakage.id].result()

    assert run.returncode == 1, run.output  # tests failed; not 2 (interrupted) or 3 (internal error)
    assert "INTERNALERROR" not in run.output and "Traceback" not in run.output
    assert run.counts("01_Healthy") == {"passed": 3}, run.output
    items = run.of("03_Broken")
    assert items, run.output
    failed = {name: message for name, (outcome, message) in items.items() if outcome == "failed"}
    assert failed, items
    for message in failed.values():
        assert "03_Broken.ipynb" in message, message
        for fragment in breakage.expected:
            assert fragment in message, (fragment, message)
    for name, (outcome, message) in items.items():  # after a time-out, the exercise's other checks wait no more
        if name not in failed:
            assert outcome == "skipped" and "not run: check" in message and "ran past its time limit" in message
            assert len(failed) == 1, items
    assert "Your progress" in run.output  # the run reached its summary table
    assert len(run.output) < 100_000  # the learner's prints never reach the terminal
