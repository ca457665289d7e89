"""The pytest plugin: every lesson notebook becomes a file of check items (or mutant items).

`pytest` grades the learner's notebooks, `pytest --solutions` the reference solutions, `pytest --mutants` proves
every known-wrong variant is rejected, and `pytest --self-check` does all three at once (the learner's part on the
untouched skeletons, which must all be *not attempted*).

It works the pytest way: a lesson is graded in its file node's `setup()` (in a child process, llm_algo.worker; the
next lessons are graded meanwhile, llm_algo.worker.scheduler), its items read their results from the session's
stash, and each outcome travels in its report's `user_properties`, from which the progress table and results.json
are built. So `--durations` shows each lesson's grading as its first item's setup, `-x`, `--lf` and junit XML
behave as usual, and under `-n N` (pytest-xdist; lessons are kept whole on one worker, `--dist loadfile`) the
controller sees every outcome and writes the same table and results.json as a serial run. An exercise cell that
still holds its skeleton is not attempted without a child at all.
"""

from __future__ import annotations

import ast
import contextlib
import time
from pathlib import Path

import pytest

from .check_index import declared_checks
from .messages import t
from .mutation.mutants import load_mutants
from .notebook import NotebookError, read_lesson
from .outcome import CheckResult, Outcome, Unit, render
from .paths import PART_PATTERN, checks_module_path, is_lesson_path, lesson_notebooks, repo_root
from .progress import load_results, part_summary, render_table, save_results
from .settings import CHECK_TIMEOUT, GRADE_UNTOUCHED, GRADING_JOBS, SettingError, resolve
from .worker.child import died_on_it, start_zygote
from .worker.scheduler import LessonScheduler

GRADED_FILES = pytest.StashKey[set]()  # the notebooks (relative to the root) that reports came from
OUTCOMES = pytest.StashKey[dict]()  # lesson id -> {unit key: outcome}, from the reports (the controller's, under -n)
RESULTS = pytest.StashKey[dict]()  # lesson path -> {Unit: CheckResult | problem}, set by LessonFile.setup()
SCHEDULER = pytest.StashKey[LessonScheduler]()
GRADED = "llm_algo"  # the user property that carries an item's outcome: {"lesson", "key", "kind", "outcome"}
NOT_ATTEMPTED = "not_attempted"
# What an item grades: the learner's cell, the reference solution, a mutant, or (self-check) the untouched skeleton.
LEARNER, SOLUTION, MUTANT, SKELETON = "learner", "solution", "mutant", "skeleton"


class NotAttempted(pytest.skip.Exception):
    """Raised by an item whose exercise still raises NotImplementedError; reported as a skip (a skip, so that pytest
    does not format a traceback for it: on a clean checkout that was most of the learner's run)."""


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def is_xdist_controller(config: pytest.Config) -> bool:
    """This process hands items to pytest-xdist workers and runs none itself."""
    return (
        not is_xdist_worker(config)
        and bool(getattr(config.option, "numprocesses", None))
        and (getattr(config.option, "dist", "no") != "no")
    )


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
    group.addoption(
        "--lesson",
        action="append",
        default=[],
        metavar="ID",
        help="grade only these lessons: an id (p02.rope), a slug (rope), a part (p02) or a glob (p03.flash*); repeatable",
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
    config.stash[GRADED_FILES] = set()
    config.stash[RESULTS] = {}
    config.pluginmanager.register(OutcomeRecorder(config), "llm_algo_outcomes")
    if is_xdist_controller(config):
        if config.option.dist == "load":  # xdist's default: keep each lesson on one worker, graded once
            config.option.dist = "loadfile"
        return
    if is_xdist_worker(config):
        jobs = 1  # no look-ahead: the next lesson in this worker's list may be handed to another worker
    config.stash[SCHEDULER] = LessonScheduler(
        jobs=jobs, timeout=config.llm_algo_timeout, grade_untouched=config.llm_algo_grade_untouched
    )
    to_grade = _lessons_to_grade(config)
    if to_grade:  # preloads while pytest collects; more when several lessons come or their checks build HF models
        start_zygote(extra=len(to_grade) > 1 or any(_builds_reference_models(path) for path in to_grade))


def _lessons_to_grade(config: pytest.Config) -> list[Path]:
    """The notebooks this run will grade in a child, as far as the arguments tell before collection: those named
    (a notebook, a part folder, the checkout), and in a learner's run only those with an exercise touched."""
    found: list[Path] = []
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if is_lesson_path(path):
            found.append(path)
        elif path == repo_root():
            found += lesson_notebooks()
        elif PART_PATTERN.match(path.name) and path.is_dir():
            found += sorted(p for p in path.glob("*.ipynb") if is_lesson_path(p))
    if grading_mode(config) != "learner" or config.llm_algo_grade_untouched:
        return found
    touched = []
    for path in found:
        try:
            lesson = read_lesson(path)
        except NotebookError:
            continue  # reported as a broken lesson at collection
        if set(lesson.exercise_names()) - lesson.untouched_exercises():
            touched.append(path)
    return touched


REFERENCE_MODULES = ("transformers", "llm_algo.references.hf", "llm_algo.references.llama", "llm_algo.references.moe")


def _builds_reference_models(notebook: Path) -> bool:
    """Whether the lesson's checks module imports transformers or a reference builder that does (read, not
    imported: the answer is wanted before pytest collects)."""
    try:
        tree = ast.parse(checks_module_path(read_lesson(notebook).id).read_text(encoding="utf-8"))
    except (NotebookError, OSError, SyntaxError):
        return False
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(name.startswith(REFERENCE_MODULES) for name in names):
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection found to grade (after -k, --lf, deselection) confirms the zygote started at configure, or
    starts it (a selection the arguments did not show), with transformers' models when those checks build them."""
    if is_xdist_controller(session.config):
        return
    lessons = {i.path for i in session.items if isinstance(i, GradedItem) and not i.untouched}
    if lessons:
        start_zygote(extra=len(lessons) > 1 or any(_builds_reference_models(path) for path in lessons))


def pytest_unconfigure(config: pytest.Config) -> None:
    scheduler = config.stash.get(SCHEDULER, None)
    if scheduler is not None:
        scheduler.close()


def grading_mode(config: pytest.Config) -> str:
    if config.getoption("self_check"):
        return "self-check"
    return "mutants" if config.getoption("mutants") else "solution" if config.getoption("solutions") else "learner"


def _checks_of(lesson_id: str):
    """The lesson's checks as its module declares them, read without importing it (so pytest's process does not
    import torch); imported when the reader cannot follow the module (llm_algo.check_index)."""
    declared = declared_checks(lesson_id)
    if declared is not None:
        return declared
    from .check.api import load_checks

    return load_checks(lesson_id).specs


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if is_lesson_path(file_path):
        wanted = parent.config.getoption("lesson")
        if wanted and not _lesson_selected(file_path, wanted):
            return None
        return LessonFile.from_parent(parent, path=file_path)
    return None


def lesson_matches(lesson_id: str, pattern: str) -> bool:
    """`p02.rope` (the id), `rope` (the slug, in any part), `p02` (a part) or a glob (`p03.flash*`). Unlike `-k`,
    which matches any substring of any check's name (`-k rope` also picks `properties` checks)."""
    import fnmatch

    part, _, slug = lesson_id.partition(".")
    pattern = pattern.lower()
    return pattern in (lesson_id, slug, part) or fnmatch.fnmatchcase(lesson_id, pattern)


def _lesson_selected(path: Path, patterns: list[str]) -> bool:
    try:
        lesson_id = read_lesson(path).id
    except (NotebookError, FileNotFoundError):
        return True  # a broken notebook is reported, whatever was asked for
    return any(lesson_matches(lesson_id, p) for p in patterns)


class LessonFile(pytest.File):
    def collect(self):
        try:
            lesson = read_lesson(self.path)
            specs = _checks_of(lesson.id)
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
            for spec in specs:
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

    def setup(self) -> None:
        """Grade this lesson's selected items in one child (the scheduler may have started it already), before its
        first item runs; the items read their results from the stash."""
        selected = [i for i in self.session.items if isinstance(i, GradedItem) and not i.untouched]
        scheduler = self.config.stash[SCHEDULER]
        if not scheduler.planned:
            scheduler.plan([(item.path, item.unit) for item in selected])
        units = [item.unit for item in selected if item.path == self.path]
        self.config.stash[RESULTS][self.path] = scheduler.lesson(self.path, units) if units else {}

    def teardown(self) -> None:
        self.config.stash[RESULTS].pop(self.path, None)


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
        self.outcome: Outcome | None = None  # what runtest found; pytest_runtest_makereport puts it in the report

    def runtest(self) -> None:
        __tracebackhide__ = True
        result = self._result()
        self.outcome = result.outcome if isinstance(result, CheckResult) else Outcome.FAILED
        where = f'{self.path.name}, exercise "{self.exercise}"'
        if isinstance(result, str):
            if self.kind == MUTANT and died_on_it(result):
                # the mutant killed or hung its grading process (a CUDA device-side assert, a segfault, a hang): it is
                # rejected, as `python -m llm_algo mutate` counts it; a solution that does this still fails
                self.outcome = Outcome.PASSED
                self.user_properties.append(("rejected_by", result[:200]))
                return
            pytest.fail(f"{where}: {result}", pytrace=False)
        if self.kind == SKELETON:
            _expect_not_attempted(where, result)
            return
        if result.outcome is Outcome.NOT_ATTEMPTED:
            raise NotAttempted(t("not attempted in pytest", where=where))
        if result.outcome in (Outcome.SKIPPED, Outcome.NEEDS_GPU, Outcome.NOT_RUN):
            pytest.skip(f"{where}: {result.summary}")
        if result.outcome is Outcome.FAILED:
            pytest.fail(render(result, where=where), pytrace=False)

    def _result(self) -> CheckResult | str:
        if self.untouched:
            return CheckResult(self.unit.key, Outcome.NOT_ATTEMPTED, self.description, "the exercise cell is untouched")
        graded = self.config.stash[RESULTS].get(self.path, {})
        return graded.get(self.unit, "was not graded (internal error: please report it)")

    def reportinfo(self):
        return self.path, None, f'{self.path.name}, exercise "{self.exercise}": {self.description}'


def _expect_not_attempted(where: str, result: CheckResult) -> None:
    """Self-check of a skeleton: a learner who has not started must see *not attempted*, never a pass or a failure."""
    __tracebackhide__ = True
    check = result.unit.name
    if result.outcome is Outcome.PASSED:
        pytest.fail(
            f"{where}: the untouched skeleton passes check {check} ({result.description}); a learner would pass "
            "without doing the exercise: make the check call the exercise, or give away less in the skeleton",
            pytrace=False,
        )
    if result.outcome is Outcome.FAILED:
        pytest.fail(
            f"{where}: the untouched skeleton fails check {check} instead of being not attempted: {result.summary} "
            "(a check that catches errors must let NotImplementedError through)",
            pytrace=False,
        )
    if result.outcome in (Outcome.SKIPPED, Outcome.NEEDS_GPU, Outcome.NOT_RUN):
        pytest.skip(f"{where}: {result.summary}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """'Not attempted' is decided here, in one place: a skip that carries its own word. Each graded item's outcome
    goes into its report (a failed setup, the lesson's grading, counts as failed)."""
    report = yield
    if call.when == "call" and call.excinfo is not None and call.excinfo.errisinstance(NotAttempted):
        report.outcome = "skipped"
        report.user_properties.append((NOT_ATTEMPTED, True))
    if call.when == "call" and report.skipped and isinstance(item, GradedItem | BrokenLessonItem):
        report.longrepr = (str(item.path), None, f"Skipped: {call.excinfo.value}")  # the notebook, not this plugin
    if isinstance(item, GradedItem) and item.kind != SKELETON:
        outcome = item.outcome if call.when == "call" else Outcome.FAILED if report.failed else None
        if outcome is not None:
            record = {"lesson": item.lesson_id, "key": item.unit.key, "kind": item.kind, "outcome": str(outcome)}
            report.user_properties.append((GRADED, record))
    return report


class OutcomeRecorder:
    """Collects outcomes from the reports: in a serial run, this process's; under -n, the controller's (xdist sends
    every worker's reports to it, user_properties included)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == GRADED:
                self.config.stash[OUTCOMES].setdefault(value["lesson"], {})[value["key"]] = value["outcome"]
                self.config.stash[GRADED_FILES].add(report.nodeid.split("::")[0])


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if report.skipped and (NOT_ATTEMPTED, True) in report.user_properties:
        return "skipped", "n", ("NOT ATTEMPTED", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if is_xdist_worker(config):
        return
    outcomes = config.stash.get(OUTCOMES, {})
    scheduler = config.stash.get(SCHEDULER, None)
    if scheduler is not None and scheduler.seconds:
        terminalreporter.write_line(scheduler.timing_line())
    if not outcomes:
        return
    mode = grading_mode(config)
    if mode == "learner":
        save_results(outcomes)
        title = t("Your progress")
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
    if mode == "learner":
        for line in saved_files_lines(config.rootpath, sorted(config.stash.get(GRADED_FILES, set()))):
            terminalreporter.write_line(line)


def saved_files_lines(root: Path, files: list[str], *, now: float | None = None, listed: int = 5) -> list[str]:
    """Which version of each notebook was graded: the file on disk, as last saved (Jupyter autosaves every 2 minutes;
    edits made since are not graded)."""
    now = time.time() if now is None else now
    stamped = []
    for name in files:
        with contextlib.suppress(OSError):
            stamped.append((name, (root / name).stat().st_mtime))
    if not stamped:
        return []
    stamped.sort(key=lambda item: -item[1])

    def when(mtime: float) -> str:
        minutes = int((now - mtime) // 60)
        ago = "just now" if minutes < 1 else f"{minutes} min ago" if minutes < 120 else f"{minutes // 60} h ago"
        return f"{time.strftime('%H:%M:%S', time.localtime(mtime))}, {ago}"

    lines = ["Graded the notebooks as saved on disk (save in Jupyter first: unsaved edits are not graded):"]
    lines += [f"  {name} — saved {when(mtime)}" for name, mtime in stamped[:listed]]
    if len(stamped) > listed:
        lines.append(f"  … and {len(stamped) - listed} more, the oldest saved {when(stamped[-1][1])}")
    return lines
