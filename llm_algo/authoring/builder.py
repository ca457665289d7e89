"""Write lesson notebooks from a Python source in `authoring/`, so lessons diff and review as text.

A lesson source defines `build() -> LessonBuilder`. Exercises are written once, as their solution,
with nbgrader-style markers around the part the learner writes:

    def rms_norm(x, weight, eps=1e-6):
        \"\"\"...\"\"\"
        # TODO: mean of squares over the last dimension, in float32
        ### BEGIN SOLUTION
        ms = x.float().pow(2).mean(-1, keepdim=True)
        ### END SOLUTION

The exercise cell keeps everything but the marked lines, which become `raise NotImplementedError`;
the solution cell keeps everything but the marker lines. `python -m llm_algo build` writes the
notebooks, and a package test proves that the committed notebooks are exactly what the sources build.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..colab import bootstrap_code, colab_url
from ..module_files import load_module
from ..mutation.mutants import Mutant, load_mutants
from ..notebook import source_hash
from ..paths import mutants_module_path, repo_root
from .glossary import GLOSSARY

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STOP_MARKER = "## 🛑 STOP"
MISTAKES_ZH = "{易错点}"  # a line of its own in 本节要点 that the builder replaces with the lesson's mutants, in 中文
MISTAKES_CELL = "mistakes"  # metadata llm_algo.generated of the cell that `LessonBuilder.mistakes()` writes
ZH_PER_LESSON = 6  # about this many mutants appear in 本节要点, spread evenly over the exercises


def skeleton(solution: str) -> str:
    """The exercise cell: marked regions become `raise NotImplementedError`, at the region's indent."""
    out, inside = [], False
    for line in solution.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"{BEGIN} inside another {BEGIN} ... {END} region")
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}raise NotImplementedError  # your code here")
            inside = True
        elif stripped == END:
            if not inside:
                raise ValueError(f"{END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN} without {END}")
    return "\n".join(out)


def strip_markers(solution: str) -> str:
    return "\n".join(line for line in solution.splitlines() if line.strip() not in (BEGIN, END))


def _dedent(text: str) -> str:
    lines = text.strip("\n").splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return "\n".join(line[cut:] for line in lines).rstrip()


def mistakes_markdown(lesson_id: str, notebook_path: str, mutants: list[Mutant] | None = None) -> str:
    """The lesson's "usual mistakes" block: every mutant of every exercise (its `mistake`, its name), grouped by
    exercise in the order the mutants file gives them. A sentence that says the checks catch a mistake belongs here
    and nowhere else (CONTRACT.md, section 5): each line is proved by `pytest --mutants`."""
    mutants = load_mutants(lesson_id) if mutants is None else mutants
    if not mutants:
        raise ValueError(f"lesson {lesson_id} has no mutants to list as its usual mistakes")
    source = mutants_module_path(lesson_id).relative_to(repo_root()).as_posix()
    link = os.path.relpath(source, Path(notebook_path).parent).replace(os.sep, "/")
    lines = [
        f"**Usual mistakes the checks catch.** Each line is a mutant in [`{source}`]({link}): a copy of the "
        "reference solution with that one mistake, which `pytest --mutants` proves the checks reject.",
    ]
    for exercise in dict.fromkeys(m.exercise for m in mutants):
        lines += ["", f"`{exercise}` fails its checks when the code:"]
        lines += [f"- {m.mistake} — `{m.name}`" for m in mutants if m.exercise == exercise]
    return "\n".join(lines)


def mistakes_zh_line(lesson_id: str, mutants: list[Mutant] | None = None) -> str:
    """The 易错点 line of 本节要点: the first mutants of each exercise, in the mutants file's order (about
    ZH_PER_LESSON in all: 6 // the number of exercises per exercise, at least one), by their `mistake_zh`."""
    mutants = load_mutants(lesson_id) if mutants is None else mutants
    missing = [m.name for m in mutants if not m.mistake_zh]
    if missing:
        raise ValueError(
            f"{mutants_module_path(lesson_id).name}: mutants without mistake_zh (the 易错点 of 本节要点 lists them in "
            f"简体中文): {', '.join(missing)}"
        )
    exercises = list(dict.fromkeys(m.exercise for m in mutants))
    each = max(1, ZH_PER_LESSON // max(1, len(exercises)))
    seen: dict[str, int] = {}
    shown = [m for m in mutants if (seen := {**seen, m.exercise: seen.get(m.exercise, 0) + 1})[m.exercise] <= each]
    return (
        "- **易错点**（每条都是一个变异体，检查必须拒绝它）："
        + "；".join(m.mistake_zh.rstrip("。；") for m in shown)
        + "。"
    )


@dataclass
class LessonBuilder:
    id: str
    path: str  # relative to the repository root
    title_en: str
    title_zh: str
    difficulty: str
    device: str
    minutes: int
    prerequisites: list[str] = field(default_factory=list)
    triton: bool = False  # Triton lessons put their tensors on lesson.triton_device (the CPU under the interpreter)
    cells: list = field(default_factory=list)
    solutions: list[tuple[str, str]] = field(default_factory=list)
    _counts: dict = field(default_factory=dict)
    _mistakes: dict = field(default_factory=dict)  # what the generated "usual mistakes" went into: "md", "zh"

    def _id(self, kind: str) -> str:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return f"{kind}-{self._counts[kind]}"

    def _add(self, cell, kind: str, tag: str | None = None, llm_algo: dict | None = None, extra: dict | None = None):
        cell.id = self._id(kind)
        if tag:
            cell.metadata["tags"] = [tag]
        if llm_algo:
            cell.metadata["llm_algo"] = llm_algo
        cell.metadata.update(extra or {})
        self.cells.append(cell)

    def title(self, intro: str = "") -> None:
        """Title, badges, and a link to each prerequisite's notebook (found in the authoring sources)."""
        badges = " ".join(
            [
                f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url()}/{self.path})",
                f"![difficulty: {self.difficulty}](https://img.shields.io/badge/difficulty-{self.difficulty}-blue)",
                f"![device: {self.device}](https://img.shields.io/badge/device-{self.device}-green)",
                f"![time: {self.minutes} min](https://img.shields.io/badge/time-{self.minutes}%20min-orange)",
            ]
        )
        paths = declared_paths()
        here = Path(self.path).parent
        prereq = (
            ", ".join(
                f"[{pid}]({os.path.relpath(paths[pid], here)})" if pid in paths else f"`{pid}`"
                for pid in self.prerequisites
            )
            or "none"
        )
        glossary = os.path.relpath(GLOSSARY, here)
        text = (
            f"# {self.title_en} | {self.title_zh}\n\n{badges}\n\n**Lesson** `{self.id}` · **Prerequisites:** {prereq}"
            f" · [Glossary 术语表]({glossary})"
        )
        self.md(text + ("\n\n" + _dedent(intro) if intro else ""))

    def md(self, text: str) -> None:
        self._add(nbformat.v4.new_markdown_cell(self._with_mistakes_zh(_dedent(text))), "md")

    def _with_mistakes_zh(self, text: str) -> str:
        """The text with its `{易错点}` line (if any) replaced by the 易错点 of the lesson's mutants."""
        lines = text.split("\n")
        if MISTAKES_ZH not in (line.strip() for line in lines):
            return text
        if "zh" in self._mistakes:
            raise ValueError(f"{self.id}: {MISTAKES_ZH} appears twice")
        self._mistakes["zh"] = True
        zh = mistakes_zh_line(self.id)
        return "\n".join(
            line[: line.index(MISTAKES_ZH)] + zh if line.strip() == MISTAKES_ZH else line for line in lines
        )

    def mistakes(self) -> None:
        """The "usual mistakes" block, generated from the lesson's mutants (`mistakes_markdown`); a lesson that has it
        also puts a `{易错点}` line in its 本节要点. Put it where the lesson discusses the solutions."""
        if "md" in self._mistakes:
            raise ValueError(f"{self.id}: lesson.mistakes() is called twice")
        self._mistakes["md"] = True
        self._add(
            nbformat.v4.new_markdown_cell(mistakes_markdown(self.id, self.path)),
            "md",
            llm_algo={"generated": MISTAKES_CELL},
        )

    def setup(self, code: str) -> None:
        device = "lesson.triton_device" if self.triton else "lesson.device"
        source = (
            f'{bootstrap_code()}\nfrom llm_algo import setup_lesson\n\nlesson = setup_lesson("{self.id}")  # picks the device first\n'
            f"check, DEVICE = lesson.check, {device}\n\n{_dedent(code)}"
        )
        self._add(nbformat.v4.new_code_cell(source.rstrip()), "setup", "setup")

    def code(self, code: str, tag: str = "demo") -> None:
        self._add(nbformat.v4.new_code_cell(_dedent(code)), tag, tag)

    def exercise(self, name: str, solution: str) -> None:
        """The exercise cell (skeleton of the solution) and its check cell; the solution waits for `stop()`. The
        exercise cell records its skeleton's hash, so that `pytest` reports an untouched exercise as not attempted
        without loading the lesson."""
        solution = _dedent(solution)
        given = skeleton(solution)
        self._add(
            nbformat.v4.new_code_cell(given), "exercise", "exercise", {"exercise": name, "skeleton": source_hash(given)}
        )
        self._add(nbformat.v4.new_code_cell(f'check("{name}")'), "check", "check", {"exercise": name})
        self.solutions.append((name, strip_markers(solution)))

    def stop(self, text: str = "") -> None:
        """The STOP marker, then every solution, collapsed in JupyterLab and in Colab's form view."""
        self.md(
            f"{STOP_MARKER}\n\n{_dedent(text) or 'Try the exercises before you read on: the reference solutions follow.'}"
        )
        for name, solution in self.solutions:
            source = f"#@title Reference solution: {name}\n{solution}"
            self._add(
                nbformat.v4.new_code_cell(source),
                "solution",
                "solution",
                {"solution": name},
                {"jupyter": {"source_hidden": True}, "cellView": "form"},
            )

    @property
    def source_path(self) -> str:
        return f"authoring/{self.id.replace('.', '_')}.py"

    def notebook(self) -> nbformat.NotebookNode:
        if len(self._mistakes) == 1:
            raise ValueError(
                f"{self.id}: a lesson with generated mistakes has both lesson.mistakes() and a {MISTAKES_ZH} line in "
                f"本节要点; this one has only {'lesson.mistakes()' if 'md' in self._mistakes else MISTAKES_ZH}"
            )
        cells = [nbformat.from_dict(dict(cell)) for cell in self.cells]
        if cells and cells[0].cell_type == "markdown":
            cells[0].source += (
                f"\n\n<sub>Generated from [`{self.source_path}`]({os.path.relpath(self.source_path, Path(self.path).parent)})"
                f" by `python -m llm_algo build {self.id}`: maintainers edit that source, never this notebook.</sub>"
            )
        nb = nbformat.v4.new_notebook()
        nb.metadata = {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "colab": {"provenance": []},
            "llm_algo": {
                "id": self.id,
                "title": {"en": self.title_en, "zh": self.title_zh},
                "difficulty": self.difficulty,
                "device": self.device,
                "minutes": self.minutes,
                "prerequisites": list(self.prerequisites),
                "built": {"source": self.source_path, "cells": cell_hashes(cells)},
            },
        }
        nb.cells = cells
        nb.nbformat, nb.nbformat_minor = 4, 5
        return nb


def cell_hashes(cells: list) -> list[str]:
    """One short hash per cell (its type and source): what `build` compares to find the cells edited by hand."""
    return [source_hash(f"{cell['cell_type']}\n{''.join(cell['source'])}") for cell in cells]


class HandEdited(Exception):
    """`build` would overwrite a notebook whose cells were edited since it was built."""


def edited_cells(path: Path) -> list[str]:
    """The cells of the notebook at `path` that differ from what `build` wrote there ([] if none, or if the notebook
    does not exist or predates the recorded hashes), as `cell 7 (code)`."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    built = nb.get("metadata", {}).get("llm_algo", {}).get("built", {}).get("cells")
    if built is None:
        return []
    now = cell_hashes(nb.get("cells", []))
    changed = [
        f"cell {i + 1} ({nb['cells'][i]['cell_type']})" for i in range(min(len(now), len(built))) if now[i] != built[i]
    ]
    if len(now) != len(built):
        changed.append(f"{abs(len(now) - len(built))} cell(s) {'added' if len(now) > len(built) else 'deleted'}")
    return changed


def serialize(nb: nbformat.NotebookNode) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def source_files() -> list[Path]:
    return sorted((repo_root() / "authoring").glob("p*.py"))


def declared_paths() -> dict[str, str]:
    """Lesson id -> notebook path, as each source's `LessonBuilder(id=..., path=...)` declares them (read from the
    source text, so that a lesson can link to one that has not been built yet)."""
    paths = {}
    for source in source_files():
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LessonBuilder":
                fields = {kw.arg: kw.value for kw in node.keywords if isinstance(kw.value, ast.Constant)}
                if "id" in fields and "path" in fields:
                    paths[fields["id"].value] = fields["path"].value
    return paths


def build(source: Path) -> tuple[Path, str]:
    """(notebook path, notebook text) for one lesson source."""
    builder = load_module(source, f"llm_algo_authoring.{source.stem}").build()
    nbformat.validate(builder.notebook())
    return repo_root() / builder.path, serialize(builder.notebook())


def build_all(selected: list[str] | None = None, *, force: bool = False) -> list[Path]:
    """Write the notebooks of the selected lesson sources (all by default). A notebook edited by hand since it was
    built is not overwritten (HandEdited says which cells and how to keep the edit), unless `force`."""
    written = []
    for source in source_files():
        if selected and source.stem not in {s.replace(".", "_") for s in selected}:
            continue
        path, text = build(source)
        edited = [] if force else edited_cells(path)
        if edited:
            lesson_id = source.stem.replace("_", ".", 1)
            raise HandEdited(
                f"{path.relative_to(repo_root())} was edited by hand since it was built ({', '.join(edited)}); "
                f"building would lose that. Carry the edit into {source.relative_to(repo_root())} (`git diff` on the "
                f"notebook shows it), then run `python -m llm_algo build {lesson_id} --force`; or `git checkout` the "
                "notebook to drop the edit."
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
