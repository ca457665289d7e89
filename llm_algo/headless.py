"""`python -m llm_algo run NOTEBOOK [--solutions]`: execute a lesson headlessly with nbclient.

The source notebook is never written: the executed copy, with its outputs, goes under the ignored
`.llm_algo/executed/` folder. One kernel per notebook (several notebooks run at once with `jobs`), a
per-cell timeout and a whole-notebook deadline, outputs capped, and each check cell's verdict read
back from its display data. The kernel learns its mode from its environment: $LLM_ALGO_MODE, and
$LLM_ALGO_DEFER_CHECKS when the self-check grades the checks itself (check cells then only report).
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from .grading.execute import MODE_ENV
from .notebook import Lesson, NotebookError, read_lesson
from .outcome import Outcome
from .paths import state_dir
from .session_report import CHECK_MIME, DEFER_CHECKS_ENV, DEFERRED

CELL_TIMEOUT = 300.0
NOTEBOOK_DEADLINE = 900.0
MAX_OUTPUT_CHARS = 20_000  # per output in the executed copy


# A check cell's status that a run with the reference solutions may show: passed, graded by the self-check instead,
# or not gradable on this machine (its checks need a GPU).
RAN_CLEAN = (str(Outcome.PASSED), DEFERRED, str(Outcome.NEEDS_GPU))


@dataclass
class RunReport:
    notebook: str
    executed_copy: Path
    seconds: float
    checks: dict[str, str] = field(default_factory=dict)  # exercise -> status
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and all(status in RAN_CLEAN for status in self.checks.values())


def with_solutions(lesson: Lesson) -> nbformat.NotebookNode:
    """A copy where each exercise cell holds its solution and the solution cells are gone."""
    nb = copy.deepcopy(lesson.notebook)
    cells = []
    for cell, raw in zip(lesson.cells, nb.cells, strict=True):
        if cell.tag == "solution":
            continue
        if cell.tag == "exercise":
            raw.source = lesson.solution_cell(cell.exercise).source
        cells.append(raw)
    nb.cells = cells
    return nb


def _cap_outputs(nb: nbformat.NotebookNode) -> None:
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and len(output.get("text", "")) > MAX_OUTPUT_CHARS:
                output["text"] = output["text"][:MAX_OUTPUT_CHARS] + "\n… (output cut by llm_algo run)\n"


def executed_path(lesson: Lesson, solutions: bool) -> Path:
    suffix = ".solutions" if solutions else ""
    return state_dir() / "executed" / lesson.part / f"{lesson.path.stem}{suffix}.ipynb"


def run_notebook(
    path: Path | str,
    *,
    solutions: bool = False,
    defer_checks: bool = False,
    cell_timeout: float = CELL_TIMEOUT,
    deadline: float = NOTEBOOK_DEADLINE,
    threads: int | None = None,
) -> RunReport:
    """Run one notebook (a NotebookError when it cannot be read)."""
    return run_sync(_run)(
        read_lesson(path), solutions=solutions, defer_checks=defer_checks, cell_timeout=cell_timeout, deadline=deadline
    )


def run_notebooks(
    paths: list[Path], *, solutions: bool = False, defer_checks: bool = False, jobs: int = 1
) -> list[RunReport | NotebookError]:
    """Run notebooks, `jobs` kernels at a time; one report (or the NotebookError of an unreadable one) per path."""

    # Kernels side by side share the cores: each gets its part, or torch's thread pools wait on each other (tiny
    # matrix products then cost milliseconds each instead of microseconds).
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None

    async def run_all() -> list[RunReport | NotebookError]:
        slots = asyncio.Semaphore(jobs)

        async def one(path: Path) -> RunReport | NotebookError:
            try:
                lesson = read_lesson(path)
            except NotebookError as exc:
                return exc
            async with slots:
                return await _run(lesson, solutions=solutions, defer_checks=defer_checks, threads=threads)

        return await asyncio.gather(*(one(path) for path in paths))

    return run_sync(run_all)()


async def _run(
    lesson: Lesson,
    *,
    solutions: bool,
    defer_checks: bool,
    cell_timeout: float = CELL_TIMEOUT,
    deadline: float = NOTEBOOK_DEADLINE,
    threads: int | None = None,
) -> RunReport:
    nb = with_solutions(lesson) if solutions else copy.deepcopy(lesson.notebook)
    out = executed_path(lesson, solutions)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()

    def timeout_for(_cell) -> int:  # the whole-notebook deadline shortens the last cells' timeouts
        return max(1, int(min(cell_timeout, deadline - (time.monotonic() - start))))

    source_cells = {cell.raw.get("id"): cell for cell in lesson.cells}  # executed cells keep their ids
    failed: list[str] = []

    def on_cell_error(cell, cell_index: int, execute_reply) -> None:
        source = source_cells.get(cell.get("id"))
        failed.append(source.label() if source else f"cell {cell_index + 1}")

    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout_func=timeout_for,
        allow_errors=False,
        resources={"metadata": {"path": str(lesson.path.parent.resolve())}},
        on_cell_error=on_cell_error,
    )
    report = RunReport(notebook=lesson.name, executed_copy=out, seconds=0.0)
    env = {**os.environ, MODE_ENV: "solution" if solutions else "learner"}  # the kernel's mode, set at its start
    if defer_checks:
        env[DEFER_CHECKS_ENV] = "1"
    if threads is not None:  # read by torch (OpenMP, MKL) when the kernel imports it
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    kernel_log = out.with_suffix(".kernel.log")  # the kernel's own stderr (ipykernel's start-up warnings): not ours
    try:
        with open(kernel_log, "w", encoding="utf-8") as log:
            await client.async_execute(env=env, stderr=log)
    except CellTimeoutError:
        report.error = f"a cell ran past its timeout ({cell_timeout:g} s per cell, {deadline:g} s per notebook)"
    except DeadKernelError:
        report.error = f"the kernel died (did a cell call exit() or crash the interpreter?); its stderr: {kernel_log}"
    except CellExecutionError as exc:  # ename and evalue: str(exc) carries the kernel's ANSI colour codes
        report.error = f"{failed[-1] if failed else 'a cell'} raised {exc.ename}: {exc.evalue}"
    report.seconds = time.monotonic() - start
    for cell in nb.cells:
        if "check" in cell.metadata.get("tags", []):
            name = cell.metadata.get("llm_algo", {}).get("exercise", "?")
            verdicts = [o["data"][CHECK_MIME] for o in cell.get("outputs", []) if CHECK_MIME in o.get("data", {})]
            report.checks[name] = verdicts[-1]["status"] if verdicts else "not run"
    _cap_outputs(nb)
    nbformat.write(nb, out)
    return report
