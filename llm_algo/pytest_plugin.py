"""The pytest plugin: every lesson notebook becomes a file of check items (or mutant items).

`pytest` grades the learner's notebooks, `pytest --solutions` the reference solutions, `pytest --mutants` proves
every known-wrong variant is rejected, and `pytest --self-check` does all three at once (the learner's part on the
untouched skeletons, which must all be *not attempted*). Each lesson is graded once, in a child process
(llm_algo.worker), the first time one of its items runs; the next lessons are graded meanwhile (see
llm_algo.scheduler). An exercise cell that still holds its skeleton is not attempted without a child at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .checking import CheckResult, load_checks
from .grading import Unit
from .mutants import load_mutants
from .notebook import NotebookError, read_lesson
from .paths import PART_PATTERN, is_lesson_path, repo_root
from .progress import load_results, part_summary, render_table, save_results
from .scheduler import LessonScheduler
from .settings import CHECK_TIMEOUT, GRADE_UNTOUCHED, GRADING_JOBS, SettingError, resolve
from .worker import start_zygote

OUTCOMES = pytest.StashKey[dict]()  # lesson id -> {unit key: outcome} (learner, solution and mutant runs)
SCHEDULER = pytest.StashKey[LessonScheduler]()
NOT_ATTEMPTED = "not_attempted"
# What an item grades: the learner's cell, the reference solution, a mutant, or (self-check) the untouched skeleton.
LEARNER, SOLUTION, MUTANT, SKELETON = "learner", "solution", "mutant", "skeleton"


class NotAttempted(pytest.skip.Exception):
    """Raised by an item whose exercise still raises NotImplementedError; reported as a skip (a skip, so that pytest
    does not format a traceback for it: on a clean checkout that was most of the learner's run)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llm_algo", "LLM Algo Lab grading")
    group.addoption("--solutions", action="store_true", help="grade the reference solutions instead of your notebooks")
    group.addoption(
        "--mutants", action="store_true", help="check that every known-wrong variant of each exercise is rejected"
    )
    group.addoption(
        "--self-check",
        action="store_true",
        help="(maintainers) in one pass: every untouched skeleton not attempted, solutions pass, mutants rejected",
    )
    group.addoption("--check-timeout", default=None, help=CHECK_TIMEOUT.help)
    group.addoption("--grade-untouched", action="store_true", default=None, help=GRADE_UNTOUCHED.help)
    group.addoption("--grading-jobs", default=None, help=GRADING_JOBS.help)
    for setting in (CHECK_TIMEOUT, GRADE_UNTOUCHED, GRADING_JOBS):
        parser.addini(setting.ini, setting.help, default="")


def pytest_configure(config: pytest.Config) -> None:
    if sum(bool(config.getoption(flag)) for flag in ("solutions", "mutants", "self_check")) > 1:
        raise pytest.UsageError("--solutions, --mutants and --self-check grade different things; pass one of them")
    try:
        config.llm_algo_timeout = resolve(
            CHECK_TIMEOUT, cli=config.getoption("check_timeout"), ini=config.getini(CHECK_TIMEOUT.ini)
        )
        config.llm_algo_grade_untouched = grading_mode(config) == "self-check" or resolve(
            GRADE_UNTOUCHED, cli=config.getoption("grade_untouched"), ini=config.getini(GRADE_UNTOUCHED.ini)
        )
        jobs = resolve(GRADING_JOBS, cli=config.getoption("grading_jobs"), ini=config.getini(GRADING_JOBS.ini))
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[OUTCOMES] = {}
    config.stash[SCHEDULER] = LessonScheduler(
        jobs=jobs, timeout=config.llm_algo_timeout, grade_untouched=config.llm_algo_grade_untouched
    )
    if grading_mode(config) != "learner" or _names_lessons(config):
        start_zygote()  # preloads while pytest collects (a learner's run stops it unused when nothing was touched)


def _names_lessons(config: pytest.Config) -> bool:
    """Whether this run is about lessons: no arguments (the lesson parts are pytest's testpaths), or a notebook or
    part folder among them (and not, say, the package's own tests)."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == repo_root() or is_lesson_path(path) or PART_PATTERN.match(path.name):
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """A learner's run starts the zygote only when some exercise was touched (else nothing is graded in a child).
    transformers' models are preloaded too when several lessons are to be graded and some of their checks use them
    (their checks modules, imported to collect the items, imported llm_algo.hf_reference)."""
    lessons = {i.path for i in session.items if isinstance(i, GradedItem) and not i.untouched}
    if lessons:
        start_zygote(extra=len(lessons) > 1 and "llm_algo.hf_reference" in sys.modules)


def pytest_unconfigure(config: pytest.Config) -> None:
    scheduler = config.stash.get(SCHEDULER, None)
    if scheduler is not None:
        scheduler.close()


def grading_mode(config: pytest.Config) -> str:
    if config.getoption("self_check"):
        return "self-check"
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
        mode = grading_mode(self.config)
        kinds = {"learner": [LEARNER], "solution": [SOLUTION], "mutants": [MUTANT]}.get(
            mode, [SKELETON, SOLUTION, MUTANT]
        )
        untouched = set() if self.config.llm_algo_grade_untouched else lesson.untouched_exercises()
        for kind in kinds:
            if kind == MUTANT:
                for mutant in load_mutants(lesson.id):
                    yield GradedItem.from_parent(
                        self,
                        name=mutant.key,
                        kind=kind,
                        unit=Unit(mutant.key, "solution"),
                        lesson_id=lesson.id,
                        exercise=mutant.exercise,
                        description=f"{mutant.name}: {mutant.mistake}",
                    )
                continue
            for spec in registry.specs:
                yield GradedItem.from_parent(
                    self,
                    name=f"{kind}::{spec.key}" if kind == SKELETON or mode == "self-check" else spec.key,
                    kind=kind,
                    unit=Unit(spec.key, "solution" if kind == SOLUTION else "learner"),
                    lesson_id=lesson.id,
                    exercise=spec.exercise,
                    description=spec.description,
                    untouched=kind == LEARNER and spec.exercise in untouched,
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
    def __init__(
        self,
        *,
        kind: str,
        unit: Unit,
        lesson_id: str,
        exercise: str,
        description: str,
        untouched: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kind, self.unit, self.lesson_id, self.exercise = kind, unit, lesson_id, exercise
        self.description = description
        self.untouched = untouched  # the exercise cell is still the skeleton: not attempted, no child needed

    def runtest(self) -> None:
        __tracebackhide__ = True
        result = self._result()
        outcome = result.outcome if isinstance(result, CheckResult) else "failed"
        if self.kind != SKELETON:
            self.config.stash[OUTCOMES].setdefault(self.lesson_id, {})[self.unit.key] = outcome
        where = f'{self.path.name}, exercise "{self.exercise}"'
        if isinstance(result, str):
            pytest.fail(f"{where}: {result}", pytrace=False)
        if self.kind == SKELETON:
            _expect_not_attempted(where, result)
            return
        if result.outcome == "not_attempted":
            raise NotAttempted(f"not attempted: {where} still raises NotImplementedError; fill in the exercise cell")
        if result.outcome == "skipped":
            pytest.skip(f"{where}: {result.summary}")
        if result.outcome == "failed":
            pytest.fail(format_failure(where, result), pytrace=False)

    def _result(self) -> CheckResult | str:
        if self.untouched:
            return CheckResult(self.unit.key, "not_attempted", self.description, "the exercise cell is untouched")
        scheduler = self.config.stash[SCHEDULER]
        if not scheduler.planned:
            scheduler.plan(
                [
                    (item.path, item.unit)
                    for item in self.session.items
                    if isinstance(item, GradedItem) and not item.untouched
                ]
            )
        return scheduler.result(self.path, self.unit)

    def reportinfo(self):
        return self.path, None, f'{self.path.name}, exercise "{self.exercise}": {self.description}'


def _expect_not_attempted(where: str, result: CheckResult) -> None:
    """Self-check of a skeleton: a learner who has not started must see *not attempted*, never a pass or a failure."""
    __tracebackhide__ = True
    check = result.key.split("::")[-1]
    if result.outcome == "passed":
        pytest.fail(
            f"{where}: the untouched skeleton passes check {check} ({result.description}); a learner would pass "
            "without doing the exercise: make the check call the exercise, or give away less in the skeleton",
            pytrace=False,
        )
    if result.outcome == "failed":
        pytest.fail(
            f"{where}: the untouched skeleton fails check {check} instead of being not attempted: {result.summary} "
            "(a check that catches errors must let NotImplementedError through)",
            pytrace=False,
        )
    if result.outcome == "skipped":
        pytest.skip(f"{where}: {result.summary}")


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
    scheduler = config.stash.get(SCHEDULER, None)
    if scheduler is not None and scheduler.seconds:
        terminalreporter.write_line(scheduler.timing_line())
    if not outcomes:
        return
    mode = grading_mode(config)
    if mode == "learner":
        save_results(outcomes)
        title = "Your progress (saved in .llm_algo/results.json)"
        summary = part_summary(load_results())
    else:
        title = {
            "solution": "Reference solutions, this run",
            "mutants": "Mutants rejected (passed = every mutant caught), this run",
            "self-check": "Self-check, this run (passed = every solution passes and every mutant is caught)",
        }[mode]
        summary = part_summary(outcomes, only=set(outcomes))
    terminalreporter.write_line("")
    for line in render_table(summary, title).splitlines():
        terminalreporter.write_line(line)
