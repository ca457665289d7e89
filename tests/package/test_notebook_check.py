"""The notebook's `check("name")` (LessonSession.check) grades the live namespace, shows a report with the
right status, and never raises."""

from __future__ import annotations

import re

import pytest
from tiny_lab import Lab

from llm_algo.outcome import CheckResult
from llm_algo.session import setup_lesson
from llm_algo.session_report import CHECK_MIME, DEFER_CHECKS_ENV, CheckReport


def learners(source: str) -> dict:
    """A namespace whose functions were defined by running `source` in it, as a notebook's cells define them."""
    namespace: dict = {}
    exec(source, namespace)
    return namespace


SKELETON = "def add_one(x):\n    raise NotImplementedError  # your code here\n"


def check_output(capsys: pytest.CaptureFixture, namespace: dict, exercise: str = "add_one", lesson="p02.tiny") -> str:
    session = setup_lesson(lesson, namespace)
    capsys.readouterr()  # the device line that setup_lesson prints
    assert session.check(exercise) is None  # a check cell shows its report; its value would show it twice
    return capsys.readouterr().out


def test_a_correct_exercise_passes(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    out = check_output(capsys, {"add_one": lambda x: x + 1})
    assert out.splitlines()[0] == "add_one: ✅ passed (3/3 checks passed)"


def test_a_wrong_exercise_fails_with_input_expected_and_got(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    out = check_output(capsys, {"add_one": lambda x: x + 2})
    assert out.splitlines()[0] == "add_one: ❌ failed (0/3 checks passed)"
    assert "\n    add_one(2) is wrong" in out
    assert re.search(r"input: +x=2", out) and re.search(r"expected: +3", out) and re.search(r"got: +4", out)


def test_a_skeleton_is_not_attempted(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    out = check_output(capsys, learners(SKELETON))
    assert out.splitlines()[0] == "add_one: ⏳ not attempted (0/3 checks passed)"


def test_not_implemented_inside_torch_is_a_mistake_not_a_skeleton(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    """torch raises NotImplementedError for inputs it does not support (integer logits to cross_entropy); the
    learner who wrote that call has attempted the exercise and must see what went wrong."""
    lab.add_lesson()
    source = (
        "import torch\n"
        "def add_one(x):\n"
        "    logits, labels = torch.ones(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long)\n"
        "    torch.nn.functional.cross_entropy(logits, labels)\n"
        "    return x + 1\n"
    )
    out = check_output(capsys, learners(source))
    assert out.splitlines()[0] == "add_one: ❌ failed (0/3 checks passed)"
    assert "raised NotImplementedError" in out


def test_a_missing_function_fails_without_raising(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    """The exercise cell defines another name (a rename): every check says which name it looks for."""
    lab.add_lesson(exercise_source="def add_1(x):\n    return x + 1\n")
    out = check_output(capsys, {"add_1": lambda x: x + 1})
    assert out.splitlines()[0] == "add_one: ❌ failed (0/3 checks passed)"
    assert "defines no `add_one`" in out


def test_an_unknown_exercise_is_reported_not_raised(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    out = check_output(capsys, {"add_one": lambda x: x + 1}, exercise="add_two")
    assert out.splitlines()[0] == "add_two: ❌ failed (0/0 checks passed)"
    assert "error: NotebookError: lesson p02.tiny has no checks for an exercise named 'add_two'" in out


def test_an_unknown_lesson_is_reported_not_raised(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    out = check_output(capsys, {"add_one": lambda x: x + 1}, lesson="p02.nowhere")
    assert "error: NotebookError: no lesson with id 'p02.nowhere' in this checkout" in out


@pytest.mark.parametrize(
    ("checks_source", "error"),
    [
        ("raise RuntimeError('half-written checks')\n", "error: RuntimeError: half-written checks"),
        ("def broken(:\n", "error: SyntaxError"),
        ("checks = None\n", "error: TypeError: tests/checks/p02_tiny.py must define `checks = Checks('p02.tiny')`"),
    ],
    ids=["raises", "syntax_error", "no_registry"],
)
def test_a_checks_module_that_does_not_import_is_reported_not_raised(
    lab: Lab, capsys: pytest.CaptureFixture, checks_source: str, error: str
) -> None:
    lab.add_lesson(checks=checks_source)
    out = check_output(capsys, {"add_one": lambda x: x + 1})
    assert out.splitlines()[0].startswith("add_one: ❌ failed")
    assert error in out


def test_a_check_that_raises_inside_the_learners_code_is_reported(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()

    def add_one(x):
        return {}[x]

    out = check_output(capsys, {"add_one": add_one})
    assert out.splitlines()[0] == "add_one: ❌ failed (0/3 checks passed)"
    assert "raised KeyError" in out


def result(outcome: str) -> CheckResult:
    return CheckResult(key=f"add_one::{outcome}", outcome=outcome)


@pytest.mark.parametrize(
    ("outcomes", "error", "status"),
    [
        (["passed", "passed"], "", "passed"),
        (["passed", "skipped"], "", "passed"),  # a GPU-only check skipped on a CPU machine
        (["skipped", "skipped"], "", "not_attempted"),  # nothing graded is never a pass
        (["passed", "not_attempted"], "", "not_attempted"),
        (["passed", "failed", "not_attempted"], "", "failed"),
        ([], "", "not_attempted"),
        (["passed"], "the checks module does not import", "failed"),
    ],
)
def test_report_status(outcomes: list[str], error: str, status: str) -> None:
    report = CheckReport("p02.tiny", "add_one", tuple(result(o) for o in outcomes), error=error)
    assert report.status == status
    assert report._repr_mimebundle_()[CHECK_MIME]["status"] == status  # what the headless runner reads back


def test_a_check_cell_defers_to_the_self_check_when_its_kernel_says_so(
    lab: Lab, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab.add_lesson()
    monkeypatch.setenv(DEFER_CHECKS_ENV, "1")  # as the headless runner starts a kernel for the self-check

    out = check_output(capsys, {"add_one": lambda x: x + 2})  # wrong, but not graded here

    assert out.splitlines()[0] == "add_one: ⏭ graded by the self-check"
    unknown = check_output(capsys, {}, exercise="add_two")  # a check cell that names no exercise still fails
    assert "has no checks for an exercise named 'add_two'" in unknown


def defined_in_a_cell(source: str, filename: str) -> dict:
    """Run `source` the way IPython runs a cell: compiled under its own file name, its text in the line cache."""
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_run_all_does_not_credit_the_reference_solution(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    """ "Run All" runs the solution cells after STOP: the names they define are not the learner's work, so a check
    cell run after them grades nothing and says why (issue 19, item 2)."""
    from llm_algo.notebook import read_lesson

    path = lab.add_lesson()
    solution = read_lesson(path).solution_cell("add_one").source
    out = check_output(capsys, defined_in_a_cell(solution, "/tmp/ipykernel_1/solution_cell.py"))
    assert out.splitlines()[0] == "add_one: ⏸ not run (nothing was graded)"
    assert "reference solution" in out and "Run All" in out
    # the same correct code in the learner's own cell (different text) is graded and passes
    mine = defined_in_a_cell("# mine\n" + solution, "/tmp/ipykernel_1/exercise_cell.py")
    assert check_output(capsys, mine).splitlines()[0] == "add_one: ✅ passed (3/3 checks passed)"


def test_after_a_kernel_restart_the_check_says_to_run_the_cells(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    lab.add_lesson()
    out = check_output(capsys, {})
    assert out.splitlines()[0] == "add_one: ⏸ not run (nothing was graded)"
    assert "run the setup cell and the exercise cell" in out and "rename" not in out


def test_a_failure_that_a_mutant_reproduces_is_named(lab: Lab, capsys: pytest.CaptureFixture) -> None:
    """Issue 19, item 3: the learner's wrong output equals a known mistake's (a mutant's): the report names it,
    instead of the check's fixed hint. A mistake no mutant makes keeps the fixed hint."""
    lab.add_lesson()
    out = check_output(capsys, {"add_one": lambda x: x + 2})
    assert "diagnosis: your result is exactly what code gives that off by one: adds two" in out
    assert "return x + 1" not in out  # the fixed hint, replaced
    out = check_output(capsys, {"add_one": lambda x: x - 5})
    assert "diagnosis" not in out and "return x + 1" in out


def test_pytest_names_the_mistake_too(lab: Lab) -> None:
    lab.add_lesson(exercise_source="def add_one(x):\n    return x * 2\n")
    run = lab.run_pytest("-q", "-p", "no:cacheprovider")
    # x * 2 and x + 2 agree at x = 2 (both named), not on the random integers of the next check (one named)
    assert "that off by one: adds two, or that multiplies instead of adding" in run.output
    assert "code gives that multiplies instead of adding\n" in run.output
