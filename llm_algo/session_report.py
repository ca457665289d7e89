"""What a notebook's check cell shows: one exercise's results as a table (HTML in Jupyter, text elsewhere), and the
machine-readable copy that the headless runner reads back."""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass

from .messages import t
from .outcome import ICONS, CheckResult, Outcome, exercise_status, render, symbol

CHECK_MIME = "application/vnd.llm-algo.check+json"  # read back by the headless runner
# Set in a kernel's environment by the headless runner when the self-check grades the checks (`pytest
# --self-check`): check cells then show "graded by the self-check" instead of running the checks a second time.
DEFER_CHECKS_ENV = "LLM_ALGO_DEFER_CHECKS"
DEFERRED = "deferred"


@dataclass(frozen=True)
class CheckReport:
    lesson: str
    exercise: str
    results: tuple[CheckResult, ...]
    error: str = ""

    deferred: bool = False  # the check cell ran, but its checks are graded by the self-check (see DEFER_CHECKS_ENV)
    not_graded: bool = False  # nothing to grade yet (the exercise cell was not run) or not the learner's (Run All)

    @property
    def status(self) -> str:
        """The exercise's outcome (llm_algo.outcome.exercise_status), or DEFERRED."""
        if self.deferred and not self.error:
            return DEFERRED
        if self.not_graded:
            return str(Outcome.NOT_RUN)
        if self.error:
            return str(Outcome.FAILED)
        return str(exercise_status(r.outcome for r in self.results))

    def headline(self) -> str:
        if self.status == DEFERRED:
            return f"{self.exercise}: {ICONS[Outcome.SKIPPED]} {t('graded by the self-check')}"
        if self.not_graded:
            return f"{self.exercise}: {symbol(Outcome.NOT_RUN)} ({t('nothing was graded')})"
        passed = sum(r.outcome is Outcome.PASSED for r in self.results)
        counts = t("checks passed", passed=passed, total=len(self.results))
        return f"{self.exercise}: {symbol(Outcome(self.status))} ({counts})"

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (r.description, symbol(r.outcome), r.path, r.input, r.expected, r.got, r.summary, r.hint)
            for r in self.results
        ]

    def __repr__(self) -> str:
        lines = [self.headline()] + ([f"  {t('error')}: {self.error}"] if self.error else [])
        lines += [textwrap.indent(render(r), "  ") for r in self.results]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        header = "".join(
            f"<th>{t(h)}</th>"
            for h in ("check", "result", "ran on", "input", "expected", "got", "mismatch", "likely mistake")
        )
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self._rows()
        )
        error = f"<p><b>{t('error')}:</b> {html.escape(self.error)}</p>" if self.error else ""
        return f"<p><b>{html.escape(self.headline())}</b></p>{error}<table><tr>{header}</tr>{body}</table>"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {
            "text/plain": repr(self),
            "text/html": self._repr_html_(),
            CHECK_MIME: {
                "lesson": self.lesson,
                "exercise": self.exercise,
                "status": self.status,
                "results": [r.to_json() for r in self.results],
                "error": self.error,
            },
        }


def show(report: CheckReport) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(report)
    else:
        print(repr(report))
