"""Grade lessons ahead of pytest's item loop: when a lesson's first item runs, that lesson and the next ones (up to
`jobs` at once) are graded, each in a child process of its own (llm_algo.worker), so that the cores stay busy
while pytest reports the results of the one before."""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..outcome import CheckResult, Unit
from .child import cancel_children, grade_in_subprocess

NOT_GRADED = "was not graded (internal error: please report it)"


class LessonScheduler:
    def __init__(self, *, jobs: int, timeout: float, grade_untouched: bool):
        self.jobs, self.timeout, self.grade_untouched = jobs, timeout, grade_untouched
        self.units: dict[Path, list[Unit]] = {}  # in pytest's order
        self.order: list[Path] = []
        self.planned = False
        self.futures: dict[Path, Future] = {}
        self.seconds: dict[Path, float] = {}  # wall time of each lesson's grading
        self.pool: ThreadPoolExecutor | None = None

    def plan(self, items: list[tuple[Path, Unit]]) -> None:
        """What each lesson has to grade (the selected items that need a child), in the order pytest runs them."""
        for path, unit in items:
            self.units.setdefault(path, []).append(unit)
        self.order, self.planned = list(self.units), True

    def lesson(self, path: Path, units: list[Unit]) -> dict[Unit, CheckResult | str]:
        """This lesson's results (waiting for its child), with the next lessons started meanwhile. A lesson outside
        the plan is graded on its own."""
        if path not in self.units:
            self.units[path] = list(units)
            self.order.append(path)
        start = self.order.index(path)
        for ahead in self.order[start : start + self.jobs]:
            self._submit(ahead)
        graded = self.futures[path].result()
        return {unit: graded.get(unit, NOT_GRADED) for unit in units}

    def _submit(self, path: Path) -> None:
        if path in self.futures:
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="llm_algo_grading")
        self.futures[path] = self.pool.submit(self._grade, path)

    def _grade(self, path: Path) -> dict[Unit, CheckResult | str]:
        start = time.monotonic()
        threads = max(1, (os.cpu_count() or 1) // self.jobs) if self.jobs > 1 else None  # no oversubscription
        try:
            return grade_in_subprocess(
                path, self.units[path], timeout=self.timeout, grade_untouched=self.grade_untouched, threads=threads
            )
        finally:
            self.seconds[path] = time.monotonic() - start

    def timing_line(self) -> str:
        total = sum(self.seconds.values())
        slowest = max(self.seconds, key=self.seconds.get)
        return (
            f"llm_algo: {len(self.seconds)} lesson{'s' * (len(self.seconds) != 1)} graded in child processes, "
            f"{total:.1f} s in all, {total / len(self.seconds):.1f} s per lesson "
            f"({self.jobs} at a time; slowest {slowest.name} {self.seconds[slowest]:.1f} s)"
        )

    def close(self) -> None:
        """Stop what is still running (an interrupted session) and the grading threads."""
        if self.pool is None:
            return
        interrupted = not all(future.done() for future in self.futures.values())
        if interrupted:
            cancel_children()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = None
        if interrupted:
            cancel_children(False)
