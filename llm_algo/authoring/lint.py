"""`python -m llm_algo lint`: every lesson notebook keeps the contract (CONTRACT.md, section 3)."""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections import Counter
from pathlib import Path

import nbformat

from ..check.api import load_checks
from ..mutation.mutants import load_mutants
from ..notebook import TAGS, Cell, Lesson, NotebookError, read_lesson
from ..paths import (
    NOTEBOOK_PATTERN,
    checks_module_path,
    display_path,
    is_lesson_path,
    lesson_notebooks,
    part_dirs,
    repo_root,
)
from .builder import MISTAKES_CELL, MISTAKES_ZH, STOP_MARKER, mistakes_markdown, mistakes_zh_line
from .lesson_ruff import lesson_ruff
from .speed_verdicts import MARKER, speed_verdicts

SUMMARY_HEADING = "本节要点"  # the 简体中文 summary every lesson carries after its title (CONTRACT.md, section 3)

ID_PATTERN = re.compile(r"^p(\d\d)\.[a-z0-9_]+$")
MIN_CHECKS, MIN_MUTANTS = 3, 2

# A sentence that says the checks catch a mistake (CONTRACT.md, section 5) belongs only in the block generated from
# the mutants (`lesson.mistakes()` and the {易错点} line of 本节要点), where `pytest --mutants` proves each one.
CATCH_CLAIM = re.compile(
    r"\b(?:checks?|tests?|gradcheck)(?:\s+(?:will|would|also|then|here|below|all|do|does|can|must))?\s+"
    r"(?:catch|catches|caught|reject|rejects|rejected|detect|detects|flag|flags)\b"
    r"|\b(?:caught|rejected|detected|flagged)\s+by\s+(?:the\s+|a\s+|its\s+)?(?:checks?|tests?)\b"
    r"|能捕获|能检查出|会被检查|检查(?:会|能|可以|都会)?(?:捕获|发现|拒绝|抓到)",
    re.IGNORECASE,
)
# Lessons whose hand-written mistakes lists are not yet generated from their mutants (issue 27, guard 6): the lint
# skips the catch-claim rule for them (a lesson added without `lesson.mistakes()` may be listed here while it is
# written). Remove a lesson from here when its source calls `lesson.mistakes()`; a package test
# (tests/package/test_mistakes.py) fails while a listed lesson already has the block.
MISTAKES_PENDING: frozenset[str] = frozenset()  # empty: every lesson is migrated


def public_signatures(source: str) -> dict[str, str]:
    """Top-level public names a cell defines, with a signature string for functions and classes."""
    names: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = f"def {node.name}({_args(node.args)})"
        elif isinstance(node, ast.ClassDef):
            methods = [
                f"{m.name}({_args(m.args)})"
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                and (not m.name.startswith("_") or m.name == "__init__")
            ]
            names[node.name] = f"class {node.name}: " + ", ".join(methods)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names[target.id] = "variable"
    return {name: sig for name, sig in names.items() if not name.startswith("_")}


def _cell_ids_in_file(path: Path) -> list:
    """Cell ids as the file holds them: nbformat's reader silently renames duplicates."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    return [cell.get("id") for cell in cells if isinstance(cell, dict)]


def _args(args: ast.arguments) -> str:
    """Argument names, kinds and defaults; annotations are left out (they do not change a call)."""
    clean = ast.arguments(
        posonlyargs=[ast.arg(a.arg) for a in args.posonlyargs],
        args=[ast.arg(a.arg) for a in args.args],
        vararg=args.vararg and ast.arg(args.vararg.arg),
        kwonlyargs=[ast.arg(a.arg) for a in args.kwonlyargs],
        kw_defaults=args.kw_defaults,
        kwarg=args.kwarg and ast.arg(args.kwarg.arg),
        defaults=args.defaults,
    )
    return ast.unparse(clean)


class Linter:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, where: str, message: str) -> None:
        self.errors.append(f"{where}: {message}")

    def lint_paths(self, paths: list[Path]) -> list[str]:
        lessons = []
        for path in paths:
            lesson = self.lint_file(path)
            if lesson:
                lessons.append(lesson)
        known = {read.id for read in self._all_lessons()}
        ids = Counter(lesson.id for lesson in self._all_lessons())
        for lesson in lessons:
            if ids[lesson.id] > 1:
                self.error(lesson.name, f"lesson id {lesson.id!r} is used by {ids[lesson.id]} notebooks")
            for prerequisite in lesson.meta.get("prerequisites", []):
                if prerequisite not in known:
                    self.error(lesson.name, f"prerequisite {prerequisite!r} is not the id of any lesson")
        for part in part_dirs():
            numbers = Counter(m.group(1) for nb in part.glob("*.ipynb") if (m := NOTEBOOK_PATTERN.match(nb.name)))
            for number, count in numbers.items():
                if count > 1:
                    self.error(display_path(part), f"{count} notebooks share the number {number}")
        self.errors.extend(lesson_ruff(lessons))  # one ruff process for every selected lesson, both forms
        return self.errors

    def _all_lessons(self) -> list[Lesson]:
        found = []
        for path in lesson_notebooks():
            with contextlib.suppress(NotebookError):  # reported by lint_file when it is in the selection
                found.append(read_lesson(path))
        return found

    def lint_file(self, path: Path) -> Lesson | None:
        name = display_path(path)
        if not NOTEBOOK_PATTERN.match(path.name):
            self.error(name, "file name must look like NN_Title_In_Words.ipynb (NN two digits)")
        try:
            lesson = read_lesson(path)
            nbformat.validate(lesson.notebook)
        except NotebookError as exc:
            self.errors.append(str(exc))
            return None
        except nbformat.ValidationError as exc:
            self.error(name, f"not a valid nbformat 4 notebook: {exc.message}")
            return None
        self.lint_metadata(lesson)
        self.lint_cells(lesson)
        self.lint_checks(lesson)
        self.lint_mistakes(lesson)
        return lesson

    def lint_metadata(self, lesson: Lesson) -> None:
        meta, name = lesson.meta, lesson.name
        match = ID_PATTERN.match(str(meta.get("id", "")))
        if not match:
            self.error(name, f"metadata llm_algo.id {meta.get('id')!r} must look like pNN.slug (e.g. p02.rope)")
        elif match.group(1) != lesson.part[:2]:
            self.error(name, f"lesson id {lesson.id!r} does not match its part folder {lesson.part}")
        title = meta.get("title")
        if not (isinstance(title, dict) and all(isinstance(title.get(k), str) and title[k] for k in ("en", "zh"))):
            self.error(name, 'metadata llm_algo.title must be {"en": "...", "zh": "..."}')
        if meta.get("difficulty") not in ("easy", "medium", "hard"):
            self.error(name, "metadata llm_algo.difficulty must be easy, medium or hard")
        if meta.get("device") not in ("cpu", "gpu"):
            self.error(name, "metadata llm_algo.device must be cpu or gpu")
        if not (isinstance(meta.get("minutes"), int) and meta["minutes"] > 0):
            self.error(name, "metadata llm_algo.minutes must be a positive whole number")
        if not isinstance(meta.get("prerequisites"), list):
            self.error(name, "metadata llm_algo.prerequisites must be a list of lesson ids")

    def lint_cells(self, lesson: Lesson) -> None:
        name = lesson.name
        ids = _cell_ids_in_file(lesson.path)
        for cell_id, count in Counter(ids).items():
            if cell_id is not None and count > 1:
                numbers = ", ".join(str(number) for number, found in enumerate(ids, 1) if found == cell_id)
                self.error(name, f"cells {numbers} share the cell id {cell_id!r}; every cell needs its own id")
        first = lesson.cells[0] if lesson.cells else None
        if not (
            first
            and first.cell_type == "markdown"
            and "colab.research.google.com" in first.source
            and " | " in first.source.splitlines()[0]
        ):
            self.error(name, "the first cell must be the title `# English | 中文` with an Open-in-Colab badge")
        summary = next((c for c in lesson.cells[1:] if c.cell_type == "markdown"), None)
        if not (first and SUMMARY_HEADING in first.source) and not (summary and SUMMARY_HEADING in summary.source):
            self.error(
                name,
                f"needs a 简体中文 summary right after the title: a markdown cell (or the title cell) with "
                f"{SUMMARY_HEADING!r} and 5-10 lines on the ideas, formulas and pitfalls",
            )
        stops = [c for c in lesson.cells if c.cell_type == "markdown" and c.source.startswith(STOP_MARKER)]
        if len(stops) != 1:
            self.error(
                name,
                f"needs exactly one STOP marker (a markdown cell starting with {STOP_MARKER!r}), found {len(stops)}",
            )
        stop = stops[0].index if stops else len(lesson.cells)
        code = [c for c in lesson.cells if c.cell_type == "code"]
        if not code or code[0].tag != "setup":
            self.error(name, "the first code cell must be tagged `setup`")
        for cell in lesson.cells:
            self.lint_cell(lesson, cell, stop)
        exercises = lesson.exercise_names()
        for exercise, count in Counter(exercises).items():
            if count > 1:
                self.error(name, f"{count} exercise cells are named {exercise!r}")
        if not exercises:
            self.error(name, "a lesson needs at least one exercise cell")
        for exercise in exercises:
            self.lint_exercise(lesson, exercise)

    def lint_cell(self, lesson: Lesson, cell: Cell, stop: int) -> None:
        where = f"{lesson.name}, {cell.label()}"
        known = [t for t in cell.tags if t in TAGS]
        if cell.cell_type == "code":
            if len(known) != 1:
                self.error(
                    where, f"a code cell needs exactly one of the tags {', '.join(TAGS)}; it has {known or 'none'}"
                )
            if cell.raw.get("outputs") or cell.raw.get("execution_count") is not None:
                self.error(where, "outputs must be stripped (Edit > Clear Outputs of All Cells, then save)")
        elif known:
            self.error(where, f"only code cells carry the tag {known[0]!r}")
        tag = cell.tag
        if tag in ("exercise", "check") and not cell.exercise:
            self.error(where, f'a {tag} cell needs metadata {{"llm_algo": {{"exercise": "<name>"}}}}')
        if tag == "solution" and not cell.solution:
            self.error(where, 'a solution cell needs metadata {"llm_algo": {"solution": "<name>"}}')
        if tag in ("exercise", "check") and cell.index > stop:
            self.error(where, f"{tag} cells belong before the STOP marker")
        if tag == "solution":
            if cell.index < stop:
                self.error(where, "solution cells belong after the STOP marker")
            collapsed = cell.raw.get("metadata", {}).get("jupyter", {}).get("source_hidden") is True
            if not collapsed or cell.raw["metadata"].get("cellView") != "form" or not cell.source.startswith("#@title"):
                self.error(
                    where,
                    "a solution cell must be collapsed: metadata jupyter.source_hidden, cellView 'form', and a '#@title' first line",
                )
        if tag == "check" and cell.source.strip() != f'check("{cell.exercise}")':
            self.error(where, f'a check cell holds exactly check("{cell.exercise}")')

    def lint_exercise(self, lesson: Lesson, exercise: str) -> None:
        checks = [c for c in lesson.tagged("check") if c.exercise == exercise]
        solutions = [c for c in lesson.tagged("solution") if c.solution == exercise]
        ex_cell = lesson.exercise_cell(exercise)
        where = f"{lesson.name}, {ex_cell.label()}"
        if len(checks) != 1:
            self.error(where, f"needs exactly one check cell, found {len(checks)}")
        elif checks[0].index < ex_cell.index:
            self.error(where, "its check cell must come after it")
        if len(solutions) != 1:
            self.error(where, f"needs exactly one solution cell, found {len(solutions)}")
            return
        try:
            mine, theirs = public_signatures(ex_cell.source), public_signatures(solutions[0].source)
        except SyntaxError as exc:
            self.error(where, f"does not parse (line {exc.lineno}: {exc.msg})")
            return
        for missing in sorted(theirs.keys() - mine.keys()):
            self.error(where, f"does not define {missing!r}, which its solution defines (renamed?)")
        for extra in sorted(mine.keys() - theirs.keys()):
            self.error(where, f"defines {extra!r}, which its solution does not")
        for shared in sorted(mine.keys() & theirs.keys()):
            if mine[shared] != theirs[shared]:
                self.error(where, f"signature drift: exercise has `{mine[shared]}`, solution has `{theirs[shared]}`")

    def lint_checks(self, lesson: Lesson) -> None:
        try:
            registry = load_checks(lesson.id)
            mutants = load_mutants(lesson.id)
        except Exception as exc:  # a broken checks module is a lint error, not a crash
            self.error(lesson.name, f"its checks or mutants do not load: {type(exc).__name__}: {exc}")
            return
        self.lint_speed_verdicts(lesson)
        exercises = lesson.exercise_names()
        for exercise in registry.exercises():
            if exercise not in exercises:
                self.error(lesson.name, f"checks exist for an exercise {exercise!r} that the notebook does not have")
        for exercise in exercises:
            count = len(registry.for_exercise(exercise))
            if count < MIN_CHECKS:
                self.error(lesson.name, f"exercise {exercise!r} has {count} checks; at least {MIN_CHECKS} are required")
            count = sum(m.exercise == exercise for m in mutants)
            if count < MIN_MUTANTS:
                self.error(
                    lesson.name, f"exercise {exercise!r} has {count} mutants; at least {MIN_MUTANTS} are required"
                )

    def lint_speed_verdicts(self, lesson: Lesson) -> None:
        """Checks never assert a speed (CONTRACT.md, section 6): benchmarks time, checks compare results."""
        path = checks_module_path(lesson.id)
        for verdict in speed_verdicts(path.read_text(encoding="utf-8")):
            self.error(
                f"{display_path(path)}:{verdict.line}",
                f"{verdict.message}; a check never asserts a speed (put the timing in `benchmark(ex)`, and check the "
                f"order of operations instead). A deadline that only guards against a hang may stay, with "
                f"`{MARKER} <reason>` on its line",
            )

    def lint_mistakes(self, lesson: Lesson) -> None:
        """The "usual mistakes" come from the mutants: the generated block is what the mutants file gives today,
        every mutant has its 中文 `mistake_zh`, and no other markdown says that the checks catch something."""
        blocks = [
            c for c in lesson.cells if c.raw.get("metadata", {}).get("llm_algo", {}).get("generated") == MISTAKES_CELL
        ]
        zh_line = None
        if blocks:
            try:
                mutants = load_mutants(lesson.id)
                rel = lesson.path.resolve().relative_to(repo_root()).as_posix()
                expected, zh_line = mistakes_markdown(lesson.id, rel, mutants), mistakes_zh_line(lesson.id, mutants)
            except Exception as exc:  # mutants without mistake_zh, or none at all
                self.error(lesson.name, f"its usual mistakes cannot be generated from its mutants: {exc}")
                return
            for block in blocks[1:]:
                self.error(f"{lesson.name}, {block.label()}", "a second generated usual-mistakes block")
            if blocks[0].source != expected:
                self.error(
                    f"{lesson.name}, {blocks[0].label()}",
                    "the usual-mistakes block is not what the mutants file gives now (a mutant was added, renamed or "
                    f"reworded): run `python -m llm_algo build {lesson.id}`",
                )
            if not any(zh_line in c.source for c in lesson.cells[:2] if c.cell_type == "markdown"):
                self.error(
                    lesson.name,
                    f"{SUMMARY_HEADING} lacks the 易错点 line generated from the mutants (a {MISTAKES_ZH} line in the "
                    f"source), or it is stale: run `python -m llm_algo build {lesson.id}`",
                )
        if lesson.id in MISTAKES_PENDING:
            return
        for cell in lesson.cells:
            if cell.cell_type != "markdown" or cell in blocks:
                continue
            text = cell.source.replace(zh_line, "") if zh_line else cell.source
            for match in CATCH_CLAIM.finditer(text):
                start = max(text.rfind("\n", 0, match.start()) + 1, match.start() - 40)
                self.error(
                    f"{lesson.name}, {cell.label()}",
                    f"says the checks catch something ({text[start : match.end() + 40].strip()!r}...) outside the "
                    "usual-mistakes block generated from the mutants: make the mistake a mutant (it then shows in "
                    "lesson.mistakes()) or say it without claiming the checks catch it",
                )


def lint(paths: list[Path] | None = None) -> list[str]:
    targets: list[Path] = []
    for path in paths or []:
        path = Path(path)
        targets.extend(sorted(p for p in path.resolve().rglob("*.ipynb") if _is_lesson(p)) if path.is_dir() else [path])
    if not paths:
        targets = lesson_notebooks()
    return Linter().lint_paths(targets)


def _is_lesson(path: Path) -> bool:
    return is_lesson_path(path) and path.parent.parent == repo_root()
