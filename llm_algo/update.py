"""`python -m llm_algo update`: take the course's new version without losing the exercise cells you wrote.

Learners work in the course's own notebooks, so a plain `git pull` after lessons change conflicts inside `.ipynb`
JSON. This command does it in four steps:
1. copy every lesson notebook you changed into `.llm_algo/backup/<time>/` (whatever happens next, nothing is lost);
2. keep the source of each exercise cell you wrote (cells are found by their metadata: the exercise's name), then
   put the notebooks back as the course shipped them (`git checkout`);
3. `git pull --ff-only` (or `git merge --ff-only REF` with `--ref`), so your other files are never merged;
4. write your exercise cells into the new notebooks, cell by exercise name. An exercise that the new version no
   longer has, or whose skeleton changed, is listed (your code is kept in the backup and, for a changed skeleton, in
   the cell: compare it with the new one there).
Only exercise cells are carried over: notes in other cells are in the backup.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .notebook import NotebookError, read_lesson
from .paths import display_path, lesson_notebooks, repo_root, state_dir


class UpdateError(Exception):
    pass


@dataclass
class Work:
    """A learner's exercise cells in one notebook: {exercise: (source, skeleton hash it started from)}."""

    path: Path
    lesson_id: str
    cells: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass
class UpdateReport:
    backup: Path | None = None
    kept: list[str] = field(default_factory=list)  # "02_RMSNorm.ipynb: rms_norm"
    changed: list[str] = field(default_factory=list)  # kept, but the exercise's skeleton changed upstream
    dropped: list[str] = field(default_factory=list)  # the exercise (or its lesson) is gone: in the backup only

    def lines(self) -> list[str]:
        out = [f"kept {len(self.kept)} exercise cell{'s' * (len(self.kept) != 1)} of yours"]
        if self.backup:
            out.append(f"your notebooks as they were: {display_path(self.backup)}")
        out += [f"changed upstream (your code kept; compare with the new skeleton): {c}" for c in self.changed]
        out += [f"no longer in the course (kept in the backup only): {d}" for d in self.dropped]
        return out


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise UpdateError(f"git {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def collect(paths: list[Path]) -> list[Work]:
    """The exercise cells that differ from the skeleton the lesson gave, per notebook."""
    works = []
    for path in paths:
        try:
            lesson = read_lesson(path)
        except NotebookError:
            continue
        work = Work(path, lesson.id)
        for cell in lesson.tagged("exercise"):
            if cell.exercise and not cell.untouched:
                work.cells[cell.exercise] = (cell.source, cell.skeleton)
        if work.cells:
            works.append(work)
    return works


def apply(works: list[Work], report: UpdateReport) -> None:
    """Write each kept exercise cell into the notebook that now has that lesson (found by id: files may move)."""
    by_id = {}
    for path in lesson_notebooks():
        try:
            by_id[read_lesson(path).id] = path
        except NotebookError:
            continue
    for work in works:
        target = by_id.get(work.lesson_id)
        if target is None:
            report.dropped += [f"{work.path.name}: {name}" for name in work.cells]
            continue
        notebook = json.loads(target.read_text(encoding="utf-8"))
        cells = {
            c["metadata"].get("llm_algo", {}).get("exercise"): c
            for c in notebook["cells"]
            if "exercise" in c.get("metadata", {}).get("tags", [])
        }
        for name, (source, skeleton) in work.cells.items():
            cell = cells.get(name)
            if cell is None:
                report.dropped.append(f"{work.path.name}: {name}")
                continue
            if cell["metadata"].get("llm_algo", {}).get("skeleton") != skeleton:
                report.changed.append(f"{target.name}: {name}")
            cell["source"] = source
            report.kept.append(f"{target.name}: {name}")
        target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def update(ref: str | None = None, root: Path | None = None) -> UpdateReport:
    root = root or repo_root()
    if not (root / ".git").exists():
        raise UpdateError(f"{root} is not a git checkout: download the new version and copy your exercise cells")
    notebooks = [p.relative_to(root).as_posix() for p in lesson_notebooks()]
    changed = set(_git(root, "diff", "--name-only", "HEAD").split())
    others = sorted(changed - set(notebooks))
    if others:
        raise UpdateError(
            "files other than lesson notebooks have local changes; commit or stash them first: " + ", ".join(others)
        )
    mine = [root / p for p in notebooks if p in changed]
    report = UpdateReport()
    if mine:
        report.backup = state_dir() / "backup" / time.strftime("%Y%m%d-%H%M%S")
        for path in mine:
            copy = report.backup / path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
    works = collect(mine)
    if mine:
        _git(root, "checkout", "--", *[p.relative_to(root).as_posix() for p in mine])
    try:
        _git(root, *(["merge", "--ff-only", ref] if ref else ["pull", "--ff-only"]))
    finally:
        apply(works, report)  # also when the pull fails: your cells go back where they were
    return report
