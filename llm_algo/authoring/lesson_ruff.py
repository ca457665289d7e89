"""Lesson code under ruff: each notebook's code cells joined in execution order, checked in both forms.

The *learner* form is what a learner runs top to bottom: setup, the exercise skeletons, check and demo cells. The
*solution* form has each exercise's solution in its place. Both are written to one temporary folder and checked by
one ruff process with the rule set of `[tool.llm_algo.lesson-ruff]` in pyproject.toml; every finding is mapped back
to its notebook, cell and line. Some codes are not reported in some kinds of cells (`ignore-in`, by cell tag, and
`learner-exercise` for a skeleton as it is handed out), and nothing is reported in a skeleton's lines after its
`raise NotImplementedError` (the `return` that shows the shape of the answer names what the learner will write).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..notebook import Cell, Lesson, NotebookError
from ..paths import repo_root

CONFIG_SECTION = "lesson-ruff"  # [tool.llm_algo.lesson-ruff] in pyproject.toml
FORMS = ("learner", "solution")


@dataclass(frozen=True)
class RuleSet:
    select: tuple[str, ...]
    ignore: tuple[str, ...]
    ignore_in: dict[str, tuple[str, ...]]  # cell kind (a tag, or "learner-exercise") -> codes not reported there
    source: str  # where it was read, for messages


@dataclass(frozen=True)
class Piece:
    first_line: int  # 1-based line of the cell's first line in the joined file
    lines: int
    cell: Cell
    kind: str  # the cell's tag; "learner-exercise" for a skeleton in the learner form
    unreachable: frozenset[int]  # 1-based lines of the cell that never run (after `raise NotImplementedError`)


def rule_set() -> RuleSet:
    """The rule set of this checkout's pyproject.toml, or of the checkout the package comes from (a lesson
    repository without one, such as the package tests' tiny labs, uses the package's own)."""
    for path in (repo_root() / "pyproject.toml", Path(__file__).resolve().parents[2] / "pyproject.toml"):
        if not path.is_file():
            continue
        config = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("llm_algo", {})
        if CONFIG_SECTION in config:
            section = config[CONFIG_SECTION]
            return RuleSet(
                select=tuple(section["select"]),
                ignore=tuple(section.get("ignore", ())),
                ignore_in={kind: tuple(codes) for kind, codes in section.get("ignore-in", {}).items()},
                source=f"{path.name} [tool.llm_algo.{CONFIG_SECTION}]",
            )
    raise LookupError(f"no [tool.llm_algo.{CONFIG_SECTION}] rule set in pyproject.toml")


def joined(lesson: Lesson, form: str) -> tuple[str, list[Piece]]:
    """The code a learner (or the solution run) executes, top to bottom, as one file, and where each cell is in it."""
    text: list[str] = []
    pieces: list[Piece] = []
    for cell in lesson.cells:
        if cell.cell_type != "code" or cell.tag in ("solution", None):
            continue
        kind = cell.tag
        if cell.tag == "exercise":
            if form == "solution":
                cell, kind = lesson.solution_cell(cell.exercise), "solution"
            else:
                kind = "learner-exercise"
        lines = [_without_magic(line) for line in cell.source.splitlines()] or [""]
        text.append(f"# %% {cell.label()}")
        first = len(text) + 1
        text.extend(lines)
        unreachable = _unreachable(cell.source) if kind == "learner-exercise" else frozenset()
        pieces.append(Piece(first, len(lines), cell, kind, unreachable))
    return "\n".join(text) + "\n", pieces


def _without_magic(line: str) -> str:
    """IPython's `%magic` and `!shell` lines as comments: they are not Python."""
    return "# " + line if line.lstrip().startswith(("%", "!")) else line


def _unreachable(source: str) -> frozenset[int]:
    """Lines after a `raise NotImplementedError` in the same block: a skeleton's `return answer` that never runs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    lines: set[int] = set()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for at, statement in enumerate(block):
                if isinstance(statement, ast.Raise) and _names_not_implemented(statement.exc):
                    for rest in block[at + 1 :]:
                        lines.update(range(rest.lineno, (rest.end_lineno or rest.lineno) + 1))
                    break
    return frozenset(lines)


def _names_not_implemented(exc: ast.AST | None) -> bool:
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def _piece(pieces: list[Piece], line: int) -> Piece | None:
    return next((p for p in pieces if p.first_line <= line < p.first_line + p.lines), None)


def _where(pieces: list[Piece], line: int) -> str:
    """A line of the joined file as the learner finds it: `cell 3 (setup), line 12`."""
    piece = _piece(pieces, line)
    return f"line {line}" if piece is None else f"{piece.cell.label()}, line {line - piece.first_line + 1}"


def ruff_executable() -> str | None:
    """The ruff of this environment (requirements/dev.txt), else one on PATH."""
    beside = Path(sys.executable).parent / "ruff"
    return str(beside) if beside.is_file() else shutil.which("ruff")


def lesson_ruff(lessons: list[Lesson]) -> list[str]:
    """ruff's findings in the lessons' code, both forms, one ruff process; one line each, naming the cell."""
    if not lessons:
        return []
    try:
        rules = rule_set()
    except LookupError as exc:
        return [f"lesson code: {exc}"]
    ruff = ruff_executable()
    if ruff is None:
        return ["lesson code: ruff is not installed (pip install -r requirements/dev.txt)"]
    files: dict[str, tuple[Lesson, str, list[Piece]]] = {}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="llm_algo_lesson_ruff_") as folder:
        for number, lesson in enumerate(lessons):
            for form in FORMS:
                try:
                    text, pieces = joined(lesson, form)
                except NotebookError:
                    continue  # a lost tag or solution: the notebook lint reports it
                name = f"{number:03d}_{form}.py"
                (Path(folder) / name).write_text(text, encoding="utf-8")
                files[name] = (lesson, form, pieces)
        command = [ruff, "check", "--isolated", "--no-cache", "--output-format", "json", "--target-version", "py311"]
        command += ["--select", ",".join(rules.select)] + (["--ignore", ",".join(rules.ignore)] if rules.ignore else [])
        done = subprocess.run([*command, "."], cwd=folder, capture_output=True, text=True, timeout=300)
    try:
        findings = json.loads(done.stdout or "[]")
    except json.JSONDecodeError:
        return [f"lesson code: ruff failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:500]}"]
    reported: dict[tuple, list[str]] = {}
    for finding in findings:
        lesson, form, pieces = files[Path(finding["filename"]).name]
        line = finding["location"]["row"]
        piece = _piece(pieces, line)
        code = finding.get("code") or "E999"  # a syntax error has no code
        if piece is None:
            continue  # a `# %% cell` separator line
        in_cell = line - piece.first_line + 1
        if code in rules.ignore_in.get(piece.kind, ()) or in_cell in piece.unreachable:
            continue
        message = re.sub(r"\bline (\d+)", lambda m, pieces=pieces: _where(pieces, int(m.group(1))), finding["message"])
        key = (lesson.name, piece.cell.index, piece.cell.label(), in_cell, code, message)
        reported.setdefault(key, []).append(form)
    for (name, _, label, in_cell, code, message), forms in sorted(reported.items()):
        errors.append(
            f"{name}, {label}, line {in_cell} ({' and '.join(forms)} form): {code} {message} (ruff, {rules.source})"
        )
    return errors
