"""The pytest plugin: every lesson notebook becomes a file of check items (or mutant items).

`pytest` grades the learner's notebooks, `pytest --solutions` the reference solutions, and
`pytest --mutants` proves every known-wrong variant is rejected. Each lesson is graded once, in a
child process (llm_algo.worker), the first time one of its items runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .checking import CheckResult, load_checks
from .grading import Unit
from .mutants import load_mutants
from .notebook import NotebookError, read_lesson
from .paths import is_lesson_path
from .progress import load_results, part_summary, render_table, save_results
from .settings import CHECK_TIMEOUT, SettingError, resolve
from .worker import grade_in_subprocess

GRADES = pytest.StashKey[dict]()  # notebook path -> {unit key: CheckResult | error string}
OUTCOMES = pytest.StashKey[dict]()  # lesson id -> {unit key: outcome}
NOT_ATTEMPTED = "not_attempted"


class NotAttempted(Exception):
    """Raised by an item whose exercise still raises NotImplementedError; reported as a skip."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llm_algo", "LLM Algo Lab grading")
    group.addoption("--solutions", action="store_true", help="grade the reference solutions instead of your notebooks")
    group.addoption(
        "--mutants", action="store_true", help="check that every known-wrong variant of each exercise is rejected"
    )
    group.addoption("--check-timeout", default=None, help=CHECK_TIMEOUT.help)
    parser.addini(CHECK_TIMEOUT.ini, CHECK_TIMEOUT.help, default="")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("solutions") and config.getoption("mutants"):
        raise pytest.UsageError("--solutions and --mutants grade different things; pass one of them")
    try:
        config.llm_algo_timeout = resolve(
            CHECK_TIMEOUT, cli=config.getoption("check_timeout"), ini=config.getini(CHECK_TIMEOUT.ini)
        )
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[GRADES] = {}
    config.stash[OUTCOMES] = {}


def grading_mode(config: pytest.Config) -> str:
    return "mutants" if config.getoption("mutants") else "solution" if config.getoption("solutions") else "learner"


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if is_lesson_path(file_path):
        return LessonFile.from_parent(parent, path=file_path)
    return None


class LessonFile(pytest.File):
    def collect(self):
        try:
            lesson = read_lesson(self.path)
            registry = load_checks(lesson.id)
        except (NotebookError, FileNotFoundError, TypeError) as exc:
            yield BrokenLessonItem.from_parent(self, name="lesson", message=str(exc))
            return
        if grading_mode(self.config) == "mutants":
            for mutant in load_mutants(lesson.id):
                yield GradedItem.from_parent(
                    self,
                    name=mutant.key,
                    unit=Unit(mutant.key, "solution"),
                    lesson_id=lesson.id,
                    exercise=mutant.exercise,
                    description=f"{mutant.name}: {mutant.mistake}",
                )
            return
        mode = "solution" if grading_mode(self.config) == "solution" else "learner"
        for spec in registry.specs:
            yield GradedItem.from_parent(
                self,
                name=spec.key,
                unit=Unit(spec.key, mode),
                lesson_id=lesson.id,
                exercise=spec.exercise,
                description=spec.description,
            )


class BrokenLessonItem(pytest.Item):
    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        pytest.fail(self.message, pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: lesson cannot be graded"


class GradedItem(pytest.Item):
    def __init__(self, *, unit: Unit, lesson_id: str, exercise: str, description: str, **kwargs):
        super().__init__(**kwargs)
        self.unit, self.lesson_id, self.exercise, self.description = unit, lesson_id, exercise, description

    def runtest(self) -> None:
        __tracebackhide__ = True
        result = self._result()
        self.config.stash[OUTCOMES].setdefault(self.lesson_id, {})[self.unit.key] = (
            result.outcome if isinstance(result, CheckResult) else "failed"
        )
        where = f'{self.path.name}, exercise "{self.exercise}"'
        if isinstance(result, str):
            pytest.fail(f"{where}: {result}", pytrace=False)
        if result.outcome == "not_attempted":
            raise NotAttempted(f"not attempted: {where} still raises NotImplementedError; fill in the exercise cell")
        if result.outcome == "skipped":
            pytest.skip(f"{where}: {result.summary}")
        if result.outcome == "failed":
            pytest.fail(format_failure(where, result), pytrace=False)

    def _result(self) -> CheckResult | str:
        grades = self.config.stash[GRADES]
        if self.path not in grades:
            siblings = [i for i in self.session.items if isinstance(i, GradedItem) and i.path == self.path]
            grades[self.path] = grade_in_subprocess(
                self.path, [i.unit for i in siblings], timeout=self.config.llm_algo_timeout
            )
        return grades[self.path].get(self.unit.key, "was not graded (internal error: please report it)")

    def reportinfo(self):
        return self.path, None, f'{self.path.name}, exercise "{self.exercise}": {self.description}'


def format_failure(where: str, result: CheckResult) -> str:
    if result.key.startswith("mutant::"):
        return f"{where}, {result.description}\n  {result.summary}"
    lines = [
        f"{where}, check {result.key.split('::')[-1]} ({result.description}) [{result.path}]",
        f"  {result.summary}",
    ]
    for label, value in (
        ("input", result.input),
        ("expected", result.expected),
        ("got", result.got),
        ("likely mistake", result.hint),
    ):
        if value:
            lines.append(f"  {label + ':':<16}{value}")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """'Not attempted' is decided here, in one place: a skip that carries its own word."""
    report = yield
    if call.when == "call" and call.excinfo is not None and call.excinfo.errisinstance(NotAttempted):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), None, f"Skipped: {call.excinfo.value}")
        report.user_properties.append((NOT_ATTEMPTED, True))
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if report.skipped and (NOT_ATTEMPTED, True) in report.user_properties:
        return "skipped", "n", ("NOT ATTEMPTED", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    outcomes = config.stash.get(OUTCOMES, {})
    if not outcomes:
        return
    mode = grading_mode(config)
    if mode == "learner":
        save_results(outcomes)
        title = "Your progress (saved in .llm_algo/results.json)"
        summary = part_summary(load_results())
    else:
        title = (
            "Reference solutions, this run"
            if mode == "solution"
            else "Mutants rejected (passed = every mutant caught), this run"
        )
        summary = part_summary(outcomes, only=set(outcomes))
    terminalreporter.write_line("")
    for line in render_table(summary, title).splitlines():
        terminalreporter.write_line(line)
