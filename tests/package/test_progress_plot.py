"""`python -m llm_algo progress --plot` and `plot_progress()`: the bars say what the results file says."""

from __future__ import annotations

import json

import pytest
from tiny_lab import PART, Lab

from llm_algo.progress_plot import NoResults, plot_progress

RESULTS = {  # fabricated as pytest would write them: one lesson passed, one failed, one never graded
    "p02.healthy": {"add_one::adds_one_to_two": "passed", "add_one::random_integers": "passed"},
    "p02.wrong": {"add_one::adds_one_to_two": "passed", "add_one::random_integers": "failed"},
}


def fabricated_lab(lab: Lab) -> Lab:
    lab.add_lesson("p02.healthy", "01_Healthy.ipynb")
    lab.add_lesson("p02.tiny", "02_Tiny.ipynb")
    lab.add_lesson("p02.wrong", "03_Wrong.ipynb")
    (lab.root / ".llm_algo").mkdir()
    (lab.root / ".llm_algo" / "results.json").write_text(json.dumps(RESULTS), encoding="utf-8")
    return lab


def bar_lengths(axes) -> dict[str, dict[str, float]]:
    """{tick label: {status: bar length}} for one axes of horizontal stacked bars."""
    labels = [tick.get_text() for tick in axes.get_yticklabels()]
    lengths: dict[str, dict[str, float]] = {label: {} for label in labels}
    for container in axes.containers:
        for row, patch in enumerate(container.patches):
            lengths[labels[row]][container.get_label()] = patch.get_width()
    return lengths


def test_the_bars_count_exercises_per_status(lab: Lab) -> None:
    fabricated_lab(lab)

    figure = plot_progress()

    part_axes, lesson_axes = figure.axes[:2]
    zero = {"passed": 0, "failed": 0, "not attempted": 0, "needs a GPU": 0}
    assert bar_lengths(part_axes) == {PART: {**zero, "passed": 1, "failed": 1, "not attempted": 1}}
    assert bar_lengths(lesson_axes) == {
        "p02.healthy  Tiny": {**zero, "passed": 1},
        "p02.tiny  Tiny": {**zero, "not attempted": 1},
        "p02.wrong  Tiny": {**zero, "failed": 1},
    }
    assert figure.get_suptitle() == "Your progress: 1 of 3 exercises passed"
    assert figure._repr_png_().startswith(b"\x89PNG")  # a notebook shows it as an image, pyplot imported or not


def test_the_command_writes_the_figure(lab: Lab) -> None:
    fabricated_lab(lab)
    out = lab.root / "figures" / "mine.png"

    done = lab.run_cli("progress", "--plot", "--out", str(out))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {out}"
    assert out.read_bytes().startswith(b"\x89PNG")
    assert not list(out.parent.glob(".*.tmp"))


def test_no_results_gives_a_message_not_a_traceback(lab: Lab) -> None:
    lab.add_lesson()
    (lab.root / ".llm_algo").mkdir()
    (lab.root / ".llm_algo" / "results.json").write_text("{}", encoding="utf-8")

    done = lab.run_cli("progress", "--plot")

    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.startswith("No results yet") and "run `pytest`" in done.stdout
    assert not (lab.root / ".llm_algo" / "progress.png").exists()
    with pytest.raises(NoResults, match="No results yet"):
        plot_progress()
