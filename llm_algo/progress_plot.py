"""The learner's progress as a figure: exercises passed, failed, not attempted and needing a GPU, per part and per
lesson, drawn from the results file that `pytest` writes (read through llm_algo.progress, never written here).

    from llm_algo.progress_plot import plot_progress
    plot_progress()            # in a notebook: the figure shows below the cell

`python -m llm_algo progress --plot [--out FILE.png]` saves the same figure. No display is needed: the figure is
drawn without pyplot, so a notebook's own backend is left as it is.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from matplotlib.figure import Figure

from .messages import t
from .outcome import Outcome
from .paths import state_dir
from .progress import STATUSES, lesson_summary, load_results, part_summary, results_path

COLORS = {  # colour-blind safe (Okabe-Ito): the status reads from the legend, never from red against green alone
    Outcome.PASSED.label: "#009E73",
    Outcome.FAILED.label: "#D55E00",
    Outcome.NOT_ATTEMPTED.label: "#BBBBBB",
    Outcome.NEEDS_GPU.label: "#0072B2",
}
BAR_HEIGHT_INCHES = 0.22  # per bar, so that 80 lessons stay readable
TITLE_CHARACTERS = 32  # of a lesson's title beside its id: longer ones squeeze the bars


class ProgressFigure(Figure):
    """A figure that shows itself as an image in a notebook, also where pyplot (and so the inline backend) was never
    imported: IPython would otherwise print `<Figure size ...>`."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


class NoResults(ValueError):
    """Nothing has been graded yet: there is nothing to draw."""


def default_path() -> Path:
    return state_dir() / "progress.png"


def plot_progress(results: dict | None = None, *, root: Path | None = None) -> ProgressFigure:
    """A figure with one stacked bar per part (top) and per lesson (below): how many of its exercises are in each
    status. `results` defaults to the results file; raises NoResults when nothing was graded yet."""
    results = load_results() if results is None else results
    if not results:
        raise NoResults(t("no results", path=results_path()))
    lessons = lesson_summary(results, root)
    parts = part_summary(results, root)
    part_rows = sorted(parts)
    figure = ProgressFigure(
        figsize=(9, BAR_HEIGHT_INCHES * (len(part_rows) + len(lessons)) + 2.5), layout="constrained"
    )
    part_axes, lesson_axes = figure.subplots(
        2, 1, height_ratios=[max(len(part_rows), 1) + 1.5, max(len(lessons), 1) + 1]
    )
    _stacked_bars(part_axes, part_rows, [parts[p] for p in part_rows], "Per part")
    labels = [f"{lesson_id}  {_shortened(row['title'])}" for lesson_id, row in lessons.items()]
    _stacked_bars(lesson_axes, labels, list(lessons.values()), "Per lesson")
    passed = sum(row[Outcome.PASSED.label] for row in parts.values())
    total = sum(row["exercises"] for row in parts.values())
    figure.suptitle(f"Your progress: {passed} of {total} exercises passed")
    handles, names = part_axes.get_legend_handles_labels()
    figure.legend(handles, names, loc="outside lower center", fontsize="small", ncols=len(STATUSES))
    return figure


def _stacked_bars(axes, labels: list[str], rows: list[dict], title: str) -> None:
    """One horizontal bar per row, a segment per status, its length the number of exercises in that status."""
    positions = range(len(labels))
    left = [0] * len(rows)
    for status in STATUSES:
        counts = [row[status] for row in rows]
        axes.barh(positions, counts, left=left, color=COLORS[status], label=status, gid=status)
        left = [a + b for a, b in zip(left, counts, strict=True)]
    axes.set_yticks(list(positions), labels, fontsize="small")
    axes.set_ylim(len(labels) - 0.5, -0.5)  # course order, top down, no empty margin
    axes.set_xlabel("exercises")
    axes.set_title(title, loc="left")
    axes.xaxis.get_major_locator().set_params(integer=True)


def _shortened(title: str, limit: int = TITLE_CHARACTERS) -> str:
    return title if len(title) <= limit else title[: limit - 1].rstrip() + "…"


def save_progress_plot(out: Path | None = None) -> Path:
    """Draw the figure from the results file and write it (PNG, or the format its suffix names; atomically: a temporary file, then a rename)."""
    out = Path(out) if out is not None else default_path()
    figure = plot_progress()
    buffer = io.BytesIO()
    figure.savefig(buffer, format=out.suffix.lstrip(".") or "png", dpi=120)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    temporary.write_bytes(buffer.getvalue())
    os.replace(temporary, out)
    return out
