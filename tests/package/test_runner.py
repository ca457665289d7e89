"""`python -m llm_algo run`: executes a lesson headlessly in a kernel, keeps the executed copy under
`.llm_algo/executed/`, reads each check cell's verdict back, and never writes the source notebook."""

from __future__ import annotations

import json

from tiny_lab import ADD_ONE, ADD_ONE_SOLVED, EXERCISE_CELL, PART, Lab

from llm_algo.session_report import CHECK_MIME


def tagged(notebook: dict, tag: str) -> list[dict]:
    return [c for c in notebook["cells"] if tag in c["metadata"].get("tags", [])]


def test_run_with_solutions_executes_a_copy_and_reads_the_verdicts(lab: Lab) -> None:
    path = lab.add_lesson()  # the exercise cell is the untouched skeleton
    before = path.read_bytes()
    part_files = sorted(p.name for p in (lab.root / PART).iterdir())

    done = lab.run_cli("run", f"{PART}/02_Tiny.ipynb", "--solutions")

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"✓ {PART}/02_Tiny.ipynb in ")
    assert "— add_one: passed" in done.stdout
    assert "IPKernelApp" not in done.stderr  # the kernel's start-up chatter goes to its log, not the terminal
    assert path.read_bytes() == before  # the source notebook is never written
    assert sorted(p.name for p in (lab.root / PART).iterdir()) == part_files  # nothing beside it either
    executed = lab.root / ".llm_algo" / "executed" / PART / "02_Tiny.solutions.ipynb"
    assert str(executed) in done.stdout
    copy = json.loads(executed.read_text(encoding="utf-8"))
    assert tagged(copy, "solution") == []  # solutions ran in place of the exercises
    assert "".join(tagged(copy, "exercise")[0]["source"]) == f"#@title Reference solution: add_one\n{ADD_ONE_SOLVED}"
    verdicts = [o["data"][CHECK_MIME] for o in tagged(copy, "check")[0]["outputs"] if CHECK_MIME in o.get("data", {})]
    assert [(v["exercise"], v["status"]) for v in verdicts] == [("add_one", "passed")]
    assert all(
        c["execution_count"] for c in copy["cells"] if c["cell_type"] == "code" and "demo" not in c["metadata"]["tags"]
    )


def test_run_reports_a_failing_solution(lab: Lab) -> None:
    broken_solution = ADD_ONE + '\nassert add_one(1) == 3, "the reference disagrees"\n'
    path = lab.add_lesson(solution=broken_solution)
    before = path.read_bytes()

    done = lab.run_cli("run", f"{PART}/02_Tiny.ipynb", "--solutions")

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(f"✗ {PART}/02_Tiny.ipynb in ")
    assert f"{EXERCISE_CELL} raised AssertionError: the reference disagrees" in done.stdout
    assert "add_one: not run" in done.stdout  # the check cell after the error never ran
    assert "\x1b[" not in done.stdout  # no terminal colour codes from the kernel's traceback
    assert path.read_bytes() == before
    assert (lab.root / ".llm_algo" / "executed" / PART / "02_Tiny.solutions.ipynb").exists()


def test_a_learners_failed_check_is_not_marked_done() -> None:
    """`run` on a learner's notebook: ✓ only when every check passed; a failed exercise is not ✓ (issue 19, 7)."""
    from types import SimpleNamespace

    from llm_algo.__main__ import run_mark

    def report(error: str = "", **checks: str):
        return SimpleNamespace(error=error, checks=checks, ok=not error and all(v == "passed" for v in checks.values()))

    assert run_mark(report(a="passed", b="passed"), solutions=False) == "✓"
    assert run_mark(report(a="passed", b="failed"), solutions=False) == "·"
    assert run_mark(report(a="not attempted"), solutions=False) == "·"
    assert run_mark(report("the kernel died", a="passed"), solutions=False) == "✗"
    assert run_mark(report(a="failed"), solutions=True) == "✗"
