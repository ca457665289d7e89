"""Where things are: the repository root, its parts, and the lesson notebooks in them."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

PART_PATTERN = re.compile(r"^\d\d_[A-Za-z0-9_]+$")
NOTEBOOK_PATTERN = re.compile(r"^(\d\d)_[A-Za-z0-9_]+\.ipynb$")
STATE_DIR_NAME = ".llm_algo"  # ignored by git: results file, executed notebooks


@lru_cache(maxsize=1)
def repo_root() -> Path:
    """The checkout that holds the lessons: $LLM_ALGO_ROOT, else the folder above the package."""
    override = os.environ.get("LLM_ALGO_ROOT")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    return repo_root() / STATE_DIR_NAME


def part_dirs(root: Path | None = None) -> list[Path]:
    root = root or repo_root()
    return sorted(p for p in root.iterdir() if p.is_dir() and PART_PATTERN.match(p.name))


def is_lesson_path(path: Path) -> bool:
    """A notebook directly inside a part folder (checkpoints and executed copies are not lessons)."""
    return path.suffix == ".ipynb" and PART_PATTERN.match(path.parent.name) is not None


def lesson_notebooks(root: Path | None = None) -> list[Path]:
    return [nb for part in part_dirs(root) for nb in sorted(part.glob("*.ipynb"))]


def display_path(path: Path) -> str:
    """`02_PyTorch_Algorithms/02_RMSNorm.ipynb` for paths inside the checkout, else the path as given."""
    try:
        return str(Path(path).resolve().relative_to(repo_root()))
    except ValueError:
        return str(path)


def checks_module_path(lesson_id: str) -> Path:
    return repo_root() / "tests" / "checks" / f"{module_name(lesson_id)}.py"


def mutants_module_path(lesson_id: str) -> Path:
    return repo_root() / "tests" / "mutants" / f"{module_name(lesson_id)}.py"


def module_name(lesson_id: str) -> str:
    """`p02.rmsnorm` -> `p02_rmsnorm`."""
    return lesson_id.replace(".", "_")
