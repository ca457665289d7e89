"""Build a lesson's namespace from its notebook, the way the grader sees it.

Learner mode runs the setup cells and the exercise cells as the learner left them; solution mode runs
the setup cells and each exercise's solution in its place (optionally rewritten by a mutant). Cells
run under pseudo file names (`<notebook 02_PyTorch_Algorithms/02_RMSNorm.ipynb, cell 7 (exercise
"rmsnorm")>`) registered with `linecache`, so a traceback points at the notebook cell and line.
"""

from __future__ import annotations

import builtins
import linecache
import os
import sys
import types
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..mutation.mutants import Mutant
from ..notebook import Cell, Lesson, Mode, NotebookError, cell_filename, notebook_location

MODE_ENV = "LLM_ALGO_MODE"  # "solution" in a kernel that the headless runner started with the reference solutions
GRADING_MODE: ContextVar[Mode | None] = ContextVar("llm_algo_grading_mode", default=None)


def current_mode() -> Mode:
    """The mode of the code running now: the lesson being loaded (`load_namespace` sets it for the cells it runs),
    else the kernel's (the headless runner starts kernels with $LLM_ALGO_MODE), else the learner's."""
    mode = GRADING_MODE.get()
    if mode is None:
        mode = "solution" if os.environ.get(MODE_ENV) == "solution" else "learner"
    return mode


@dataclass
class LoadedLesson:
    namespace: dict
    broken: dict[str, str] = field(default_factory=dict)  # exercise -> why its cell failed to run
    not_attempted: set[str] = field(default_factory=set)


class _NoIPython:
    """Stands in for `get_ipython()` outside a kernel: magics and shell lines are skipped, cell magics
    (`%%time`) run their body."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def run_line_magic(self, *args, **kwargs):
        return None

    def system(self, *args, **kwargs):
        return None

    def getoutput(self, *args, **kwargs):
        return []

    def run_cell_magic(self, magic, line, body):
        exec(compile(body, "<cell magic>", "exec"), self.namespace)


def _python_source(source: str) -> str:
    """Turn IPython syntax (`%matplotlib inline`, `!pip ...`) into plain Python when there is any."""
    if not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
        return source
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def fresh_namespace(lesson_id: str) -> dict:
    module = types.ModuleType(f"__lesson_{lesson_id.replace('.', '_')}__")
    sys.modules[module.__name__] = module  # dataclasses and pickling look the module up by name
    ipython = _NoIPython(module.__dict__)
    module.__dict__.update({"__builtins__": builtins, "get_ipython": lambda: ipython, "display": print})
    return module.__dict__


def run_cell(lesson: Lesson, cell: Cell, source: str, namespace: dict) -> None:
    filename = cell_filename(lesson, cell)
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(_python_source(source), filename, "exec"), namespace)


def load_namespace(
    lesson: Lesson,
    mode: Mode,
    *,
    mutant: Mutant | None = None,
    before_cell: Callable[[Cell], None] | None = None,
) -> LoadedLesson:
    """Execute the lesson's setup and exercise (or solution) cells in a fresh namespace.

    A failing setup cell is a NotebookError (nothing can be graded); a failing exercise cell breaks
    only its own exercise, and one that raises NotImplementedError at top level is not attempted.
    """
    loaded = LoadedLesson(namespace=fresh_namespace(lesson.id))
    token = GRADING_MODE.set(mode)  # so that `use(...)` in a setup cell takes references in solution mode
    try:
        _run_plan(lesson, mode, loaded, mutant, before_cell)
    finally:
        GRADING_MODE.reset(token)
    return loaded


def _run_plan(
    lesson: Lesson, mode: Mode, loaded: LoadedLesson, mutant: Mutant | None, before_cell: Callable[[Cell], None] | None
) -> None:
    for cell in lesson.code_plan(mode):
        exercise = cell.exercise or cell.solution
        source = cell.source
        if mutant is not None and cell.tag == "solution" and exercise == mutant.exercise:
            source = mutant.apply(source)
        if before_cell:
            before_cell(cell)
        try:
            run_cell(lesson, cell, source, loaded.namespace)
        except NotImplementedError:
            loaded.not_attempted.add(exercise)
        except Exception as exc:
            where = notebook_location(exc) or f"{lesson.name}, {cell.label()}"
            if isinstance(exc, SyntaxError):
                where = f"{lesson.name}, {cell.label()}, line {exc.lineno}"
            message = f"{type(exc).__name__}: {exc} (at {where})"
            if cell.tag == "setup":
                raise NotebookError(
                    f"{lesson.name}: the setup cell failed, so nothing can be graded: {message}"
                ) from exc
            loaded.broken[exercise] = f"the cell raised {message}"
