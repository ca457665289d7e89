"""Tiny throwaway lesson repositories for the package's own tests (the fixtures are in conftest.py).

A `Lab` is a repository root with a part folder, lesson notebooks built by `LessonBuilder`, their checks
and mutants, and the pytest configuration a real checkout has. `LLM_ALGO_ROOT` points the package (and
every child process it starts) at it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

import llm_algo.grading.cache
import llm_algo.paths
import llm_algo.session
from llm_algo.authoring.builder import LessonBuilder, serialize, strip_markers

PART = "02_PyTorch_Algorithms"
MAIN_REPO = Path(__file__).resolve().parents[2]

# The exercise, written once as its solution with the markers `skeleton()` turns into the learner's cell.
ADD_ONE = '''
def add_one(x):
    """x + 1, for a number or a tensor."""
    # TODO: add one to x
    ### BEGIN SOLUTION
    return x + 1
    ### END SOLUTION
'''
ADD_ONE_SOLVED = strip_markers(textwrap.dedent(ADD_ONE).strip())
# A tiny lesson's cells: title, intro, setup, exercise, check, STOP, solution, explanation.
EXERCISE_CELL = 'cell 4 (exercise "add_one")'
CHECK_CELL = 'cell 5 (check "add_one")'
SOLUTION_CELL = 'cell 7 (solution "add_one")'

CHECKS = '''
import torch

from llm_algo.check import Checks, describe, expect, expect_close

checks = Checks({lesson_id!r})


@checks("add_one")
def adds_one_to_two(ex):
    """hand-checkable: add_one(2) == 3"""
    got = ex.add_one(2)
    expect(got == 3, "add_one(2) is wrong", input="x=2", expected="3", got=repr(got), hint="return x + 1")


@checks("add_one")
def random_integers(ex):
    """random integers in [-100, 100)"""
    for x in torch.randint(-100, 100, (5,)).tolist():
        got = ex.add_one(x)
        expect(got == x + 1, "wrong on an integer", input=f"x={{x}}", expected=str(x + 1), got=repr(got))


@checks("add_one")
def tensors_elementwise(ex):
    """a float32 tensor of odd length, elementwise"""
    x = torch.randn(7)
    expect_close(ex.add_one(x), x.double() + 1, input=describe(x=x), hint="add elementwise, keep the dtype")
'''

# All three checks probe x = 1 only, where doubling and adding one agree: the `doubles` mutant survives.
WEAK_CHECKS = """
import torch

from llm_algo.check import Checks, expect

checks = Checks({lesson_id!r})


@checks("add_one")
def one_int(ex):
    expect(ex.add_one(1) == 2, "add_one(1) is wrong")


@checks("add_one")
def one_float(ex):
    expect(ex.add_one(1.0) == 2.0, "add_one(1.0) is wrong")


@checks("add_one")
def one_tensor(ex):
    expect(bool(ex.add_one(torch.tensor(1)) == 2), "add_one(tensor(1)) is wrong")
"""

MUTANTS = """
from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant("add_one", "adds_two", "off by one: adds two", [("return x + 1", "return x + 2")]),
    Mutant("add_one", "doubles", "multiplies instead of adding", [("return x + 1", "return x * 2")]),
]
"""

STALE_MUTANTS = """
from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant("add_one", "adds_two", "off by one: adds two", [("return x + 1", "return x + 2")]),
    Mutant("add_one", "subtracts", "subtracts instead of adding", [("return x - 1", "return x - 2")]),
]
"""

PYTEST_INI = f"""
[pytest]
testpaths = {PART}
addopts = -rfs -p no:cacheprovider
llm_algo_check_timeout = 20
"""


def build_notebook(
    lesson_id: str,
    path: str,
    *,
    setup_code: str = "import torch",
    solution: str = ADD_ONE,
    prerequisites: tuple[str, ...] = (),
) -> str:
    """The text of a tiny lesson notebook with one exercise, `add_one`."""
    lesson = LessonBuilder(
        id=lesson_id,
        path=path,
        title_en="Tiny",
        title_zh="小练习",
        difficulty="easy",
        device="cpu",
        minutes=5,
        prerequisites=list(prerequisites),
    )
    lesson.title(intro="## 本节要点\n\n- 给每个元素加一；检查、变异体与评分流程的最小示例。")
    lesson.md("## Add one\n\nThe smallest exercise there is.")
    lesson.setup(setup_code)
    lesson.exercise("add_one", solution)
    lesson.stop()
    lesson.md("## Reading the solution\n\nAdd one.")
    return serialize(lesson.notebook())


@dataclass
class PytestRun:
    returncode: int
    output: str
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)  # "02_Tiny::add_one::check" -> (outcome, text)

    def of(self, notebook_stem: str) -> dict[str, tuple[str, str]]:
        """The outcomes of one notebook's items, by item name."""
        prefix = f"{notebook_stem}::"
        return {key.removeprefix(prefix): value for key, value in self.outcomes.items() if key.startswith(prefix)}

    def counts(self, notebook_stem: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for outcome, _ in self.of(notebook_stem).values():
            found[outcome] = found.get(outcome, 0) + 1
        return found


def _parse_junit(path: Path) -> dict[str, tuple[str, str]]:
    outcomes = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        # junit writes the node id `02_PyTorch_Algorithms/02_Tiny.ipynb::add_one::check` as classname
        # `02_PyTorch_Algorithms.02_Tiny.ipynb.add_one` and name `check`
        notebook, _, inner = case.get("classname", "").partition(".ipynb")
        stem = notebook.split(".", 1)[-1]
        name = "::".join([*(inner.lstrip(".").split(".") if inner else []), case.get("name", "")])
        outcome, text = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                text = f"{element.get('message', '')}\n{element.text or ''}"
                break
        outcomes[f"{stem}::{name}"] = (outcome, text)
    return outcomes


@dataclass
class Lab:
    """A throwaway lesson repository."""

    root: Path

    @classmethod
    def create(cls, root: Path) -> Lab:
        """An empty lesson repository with the pytest setup of a real checkout (mirrors pyproject.toml and
        conftest.py at the top of this repository)."""
        for folder in (PART, "tests/checks", "tests/mutants"):
            (root / folder).mkdir(parents=True)
        (root / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")
        (root / "conftest.py").write_text('pytest_plugins = ["llm_algo.pytest_plugin"]\n', encoding="utf-8")
        return cls(root)

    def env(self) -> dict[str, str]:
        """The environment of a child process: the lab as its root, and nothing from the outer pytest run."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_ALGO_"))}
        env["LLM_ALGO_ROOT"] = str(self.root)
        return env

    def notebook_path(self, filename: str) -> Path:
        return self.root / PART / filename

    def add_lesson(
        self,
        lesson_id: str = "p02.tiny",
        filename: str = "02_Tiny.ipynb",
        *,
        solved: bool = False,
        exercise_source: str | None = None,
        checks: str = CHECKS,
        mutants: str = MUTANTS,
        **build_options,
    ) -> Path:
        """Write a lesson notebook, its checks and its mutants; `solved` fills the exercise cell with the
        solution, `exercise_source` with any text (the learner's edit)."""
        path = self.notebook_path(filename)
        path.write_text(build_notebook(lesson_id, f"{PART}/{filename}", **build_options), encoding="utf-8")
        if solved:
            exercise_source = ADD_ONE_SOLVED
        if exercise_source is not None:
            self.edit_cell(path, "exercise", lambda cell: cell.update(source=exercise_source))
        module = lesson_id.replace(".", "_")
        (self.root / "tests" / "checks" / f"{module}.py").write_text(
            checks.format(lesson_id=lesson_id), encoding="utf-8"
        )
        (self.root / "tests" / "mutants" / f"{module}.py").write_text(mutants, encoding="utf-8")
        llm_algo.grading.cache._lesson_index.cache_clear()
        return path

    @staticmethod
    def edit_notebook(path: Path, change) -> None:
        """Apply `change(notebook_dict)` to the notebook's JSON and write it back, as an editor would."""
        notebook = json.loads(path.read_text(encoding="utf-8"))
        change(notebook)
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def edit_cell(cls, path: Path, tag: str, change) -> None:
        """Apply `change(cell_dict)` to the first cell tagged `tag`."""

        def edit(notebook: dict) -> None:
            change(next(c for c in notebook["cells"] if tag in c["metadata"].get("tags", [])))

        cls.edit_notebook(path, edit)

    def run_pytest(self, *args: str, timeout: float = 240) -> PytestRun:
        """`python -m pytest` in the lab, as a learner (or maintainer) runs it."""
        junit = self.root.parent / f"junit-{os.getpid()}-{len(list(self.root.parent.glob('junit-*')))}.xml"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", f"--junitxml={junit}", *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = done.stdout + done.stderr
        return PytestRun(done.returncode, output, _parse_junit(junit) if junit.exists() else {})

    def run_cli(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        """`python -m llm_algo ...` in the lab."""
        return subprocess.run(
            [sys.executable, "-m", "llm_algo", *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def clear_caches() -> None:
    """repo_root(), the lesson index and the lessons that `use` loaded are cached per process; a test that moves
    LLM_ALGO_ROOT clears them."""
    llm_algo.paths.repo_root.cache_clear()
    llm_algo.grading.cache._lesson_index.cache_clear()
    llm_algo.grading.cache.clear()
