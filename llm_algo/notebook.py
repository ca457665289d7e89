"""The lesson notebook model: metadata, tagged cells, and the two ways of reading its code."""

from __future__ import annotations

import hashlib
import json
import re
import traceback
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .paths import display_path

if TYPE_CHECKING:
    import nbformat

TAGS = ("setup", "exercise", "check", "solution", "demo")
Mode = Literal["learner", "solution"]
NOTEBOOK_FRAME_PREFIX = "<notebook "  # prefix of the pseudo file names that notebook cells run under


class NotebookError(Exception):
    """A lesson notebook that cannot be used as it is; the message says which one and what to do."""


@dataclass(frozen=True)
class Cell:
    index: int  # position in the notebook, 0-based; shown to learners 1-based
    cell_type: str
    source: str
    tags: tuple[str, ...]
    exercise: str | None  # metadata.llm_algo.exercise (exercise and check cells)
    solution: str | None  # metadata.llm_algo.solution (solution cells)
    raw: dict = field(repr=False, compare=False, hash=False)
    skeleton: str | None = None  # metadata.llm_algo.skeleton (exercise cells): source_hash of the cell as given

    @property
    def untouched(self) -> bool:
        """An exercise cell still exactly as the lesson gave it (so it can only be *not attempted*)."""
        return self.skeleton is not None and source_hash(self.source) == self.skeleton

    @property
    def tag(self) -> str | None:
        known = [t for t in self.tags if t in TAGS]
        return known[0] if known else None

    @property
    def number(self) -> int:
        return self.index + 1

    def label(self, quoted: bool = True) -> str:
        """`cell 7 (exercise "rope")`; unquoted for file names, because a `"` in the file name that Triton writes
        into its PTX debug info makes ptxas fail."""
        name = self.exercise or self.solution
        if name:
            return f"cell {self.number} ({self.tag} " + (f'"{name}")' if quoted else f"{name})")
        return f"cell {self.number}" + (f" ({self.tag})" if self.tag else "")


def source_hash(source: str) -> str:
    """A short fingerprint of a cell's code; trailing whitespace does not count (editors add and drop it)."""
    text = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Lesson:
    path: Path
    meta: dict
    cells: tuple[Cell, ...]
    text: str = field(repr=False, compare=False, hash=False)  # the file as read

    @cached_property
    def notebook(self) -> nbformat.NotebookNode:
        """The notebook as nbformat reads it (for the runner and the lint; grading needs only the cells, and
        importing nbformat costs a second)."""
        import nbformat

        return nbformat.reads(self.text, as_version=4)

    @property
    def id(self) -> str:
        return str(self.meta.get("id", ""))

    @property
    def name(self) -> str:
        return display_path(self.path)

    @property
    def part(self) -> str:
        return self.path.parent.name

    @property
    def device(self) -> str:
        return str(self.meta.get("device", "cpu"))

    def tagged(self, tag: str) -> list[Cell]:
        return [c for c in self.cells if c.tag == tag]

    def exercise_names(self) -> list[str]:
        return [c.exercise for c in self.tagged("exercise") if c.exercise]

    def exercise_cell(self, name: str) -> Cell:
        return self._named("exercise", name, lambda c: c.exercise)

    def solution_cell(self, name: str) -> Cell:
        return self._named("solution", name, lambda c: c.solution)

    def _named(self, tag: str, name: str, key) -> Cell:
        found = [c for c in self.tagged(tag) if key(c) == name]
        if not found:
            raise NotebookError(
                f'{self.name}: no {tag} cell for exercise "{name}". Did the cell lose its '
                f'`{tag}` tag or its metadata {{"llm_algo": {{"{"exercise" if tag != "solution" else "solution"}": "{name}"}}}}? '
                "Re-download the lesson or restore the tag in JupyterLab's property inspector."
            )
        return found[0]

    def code_plan(self, mode: Mode) -> list[Cell]:
        """The cells the grader executes, in order: setup and exercises, with solutions swapped in for
        exercises in solution mode. Check, demo and solution cells never run here."""
        plan: list[Cell] = []
        for cell in self.cells:
            if cell.cell_type != "code":
                continue
            if cell.tag == "setup":
                plan.append(cell)
            elif cell.tag == "exercise":
                plan.append(self.solution_cell(cell.exercise) if mode == "solution" else cell)
        return plan

    def untouched_exercises(self) -> set[str]:
        """Exercises whose cell is still the skeleton the lesson shipped (recorded by the builder)."""
        return {c.exercise for c in self.tagged("exercise") if c.exercise and c.untouched}

    def code_hash(self, mode: Mode) -> str:
        """A fingerprint of the code the grader runs in `mode` (see `code_plan`)."""
        return source_hash("\n# --- cell ---\n".join(c.source for c in self.code_plan(mode)))


def read_lesson(path: Path | str) -> Lesson:
    """Parse a notebook file; raise NotebookError with a one-line reason when it cannot be read."""
    path = Path(path)
    shown = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NotebookError(f"{shown}: cannot be read ({exc.strerror}).") from None
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{shown}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}). "
            "Restore it with `git checkout -- <file>` or fix the edit that broke it."
        ) from None
    meta = notebook.get("metadata", {}).get("llm_algo") if isinstance(notebook, dict) else None
    if not isinstance(meta, dict):
        raise NotebookError(f"{shown}: the notebook metadata has no `llm_algo` object, so it is not a lesson.")
    cells = []
    for index, raw in enumerate(notebook.get("cells", [])):
        cell_meta = raw.get("metadata", {})
        ours = cell_meta.get("llm_algo", {}) if isinstance(cell_meta.get("llm_algo"), dict) else {}
        source = raw.get("source", "")
        cells.append(
            Cell(
                index=index,
                cell_type=raw.get("cell_type", ""),
                source="".join(source) if isinstance(source, list) else source,  # nbformat stores lines
                tags=tuple(cell_meta.get("tags", ())),
                exercise=ours.get("exercise"),
                solution=ours.get("solution"),
                raw=raw,
                skeleton=ours.get("skeleton"),
            )
        )
    return Lesson(path=path, meta=dict(meta), cells=tuple(cells), text=text)


def cell_filename(lesson: Lesson, cell: Cell) -> str:
    """The pseudo file name that tracebacks show for a notebook cell (no quotes: see Cell.label)."""
    return f"{NOTEBOOK_FRAME_PREFIX}{lesson.name}, {cell.label(quoted=False)}>"


def notebook_location(exc: BaseException) -> str:
    """The innermost frame that ran notebook code, as `02_RMSNorm.ipynb, cell 7 (exercise "rmsnorm"), line 3`."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(NOTEBOOK_FRAME_PREFIX)]
    return source_location(frames[-1].filename, frames[-1].lineno) if frames else ""


def source_location(filename: str, lineno: int) -> str:
    """A notebook cell's pseudo file name and a line as the learner reads them; "" for any other file."""
    if not filename.startswith(NOTEBOOK_FRAME_PREFIX):
        return ""
    where = re.sub(r"\((\w+) (\w+)\)$", r'(\1 "\2")', filename[len(NOTEBOOK_FRAME_PREFIX) : -1])
    return f"{where}, line {lineno}"
