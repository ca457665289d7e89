"""Grading is pytest-native: `-n 2` (pytest-xdist) gives the verdicts, table and results.json of a serial run;
`--durations` shows a lesson's grading as its first item's setup; `-x` stops after the first failure."""

from __future__ import annotations

import json
import re

import pytest
from tiny_lab import ADD_ONE_SOLVED, Lab

pytest.importorskip("xdist")


def two_lessons(lab: Lab) -> None:
    lab.add_lesson("p02.tiny", "02_Tiny.ipynb", solved=True)
    lab.add_lesson("p02.wrong", "03_Wrong.ipynb", exercise_source=ADD_ONE_SOLVED.replace("+ 1", "+ 2"))
    lab.add_lesson("p02.blank", "04_Blank.ipynb")


def table(output: str) -> list[str]:
    """The progress table's rows (the part and total lines), without the timing line around it."""
    return [line for line in output.splitlines() if line.startswith(("│ 02_", "│ total"))]


def test_two_workers_give_the_serial_verdicts_table_and_results(lab: Lab) -> None:
    two_lessons(lab)
    serial = lab.run_pytest("-q", "-p", "no:cacheprovider")
    results = (lab.root / ".llm_algo" / "results.json").read_text(encoding="utf-8")
    (lab.root / ".llm_algo" / "results.json").unlink()

    parallel = lab.run_pytest("-q", "-p", "no:cacheprovider", "-n", "2")

    assert parallel.outcomes == serial.outcomes and len(serial.outcomes) == 9
    assert {o for o, _ in serial.outcomes.values()} == {"passed", "failed", "skipped"}
    assert table(parallel.output) == table(serial.output) and table(serial.output)
    assert json.loads((lab.root / ".llm_algo" / "results.json").read_text(encoding="utf-8")) == json.loads(results)


def test_durations_show_grading_as_the_first_items_setup(lab: Lab) -> None:
    lab.add_lesson(solved=True)
    run = lab.run_pytest("-q", "-p", "no:cacheprovider", "--durations=3", "--durations-min=0")
    assert re.search(r"\d+\.\d+s setup +02_PyTorch_Algorithms/02_Tiny\.ipynb::add_one::", run.output), run.output


def test_stop_at_the_first_failure(lab: Lab) -> None:
    two_lessons(lab)
    run = lab.run_pytest("-q", "-p", "no:cacheprovider", "-x")
    assert run.returncode == 1 and "stopping after 1 failures" in run.output
    assert not run.of("04_Blank")  # never reached


def test_the_summary_says_which_saved_version_was_graded(tmp_path):
    """pytest grades the files on disk: the summary names each one with the time it was saved (issue 19, item 7)."""
    import os

    from llm_algo.pytest_plugin import saved_files_lines

    for name, age in (("a.ipynb", 30), ("b.ipynb", 600)):
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, (1_000_000 - age, 1_000_000 - age))
    lines = saved_files_lines(tmp_path, ["a.ipynb", "b.ipynb", "gone.ipynb"], now=1_000_000, listed=1)
    assert "unsaved edits are not graded" in lines[0]
    assert lines[1].startswith("  a.ipynb — saved ") and lines[1].endswith("just now")
    assert lines[2].startswith("  … and 1 more, the oldest saved ") and lines[2].endswith("10 min ago")
    assert saved_files_lines(tmp_path, []) == []


def test_lesson_selects_lessons_not_substrings_of_check_names():
    """`-k rope` picks every check whose name contains "rope" (`properties`, an MLA check); `--lesson rope` picks the
    RoPE lessons (issue 19, item 7)."""
    from llm_algo.pytest_plugin import lesson_matches

    assert lesson_matches("p02.rope", "rope") and lesson_matches("p03.rope", "rope")
    assert not lesson_matches("p02.mla", "rope") and not lesson_matches("p01.cost_model", "rope")
    assert lesson_matches("p02.rope", "p02.rope") and not lesson_matches("p03.rope", "p02.rope")
    assert lesson_matches("p03.flash_attention_fwd", "p03.flash*") and lesson_matches("p01.roofline", "p01")
    assert lesson_matches("p02.rope", "RoPE")


def test_lesson_option_collects_only_the_named_lessons(lab):
    lab.add_lesson("p02.tiny", "02_Tiny.ipynb", solved=True)
    lab.add_lesson("p02.other", "03_Other.ipynb", solved=True)
    run = lab.run_pytest("-q", "-p", "no:cacheprovider", "--collect-only", "--lesson", "other")
    assert "03_Other.ipynb" in run.output and "02_Tiny.ipynb" not in run.output
