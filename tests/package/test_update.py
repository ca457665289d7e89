"""`python -m llm_algo update` (issue 19, item 8): the course's new version arrives, the learner's exercise cells
stay, a backup of every changed notebook is kept, and other local changes stop it before anything is touched."""

from __future__ import annotations

import json
import subprocess

from tiny_lab import ADD_ONE_SOLVED, PART, Lab

from llm_algo.notebook import read_lesson


def git(lab: Lab, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=lab.root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def course_with_an_upstream_change(lab: Lab):
    path = lab.add_lesson()
    (lab.root / ".gitignore").write_text(".llm_algo/\n")
    git(lab, "init", "-q", "-b", "main")
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "course v1")
    git(lab, "checkout", "-qb", "upstream")
    lab.edit_notebook(path, lambda nb: nb["cells"][1].update(source="A rewritten introduction."))
    git(lab, "commit", "-qam", "course v2: the introduction changes")
    git(lab, "checkout", "-q", "main")
    return path


def test_update_keeps_the_learners_exercise_cells(lab: Lab) -> None:
    path = course_with_an_upstream_change(lab)
    lab.edit_cell(path, "exercise", lambda cell: cell.update(source=ADD_ONE_SOLVED))  # the learner's work
    done = lab.run_cli("update", "--ref", "upstream")
    assert done.returncode == 0, done.stdout + done.stderr
    lesson = read_lesson(path)
    assert lesson.cells[1].source == "A rewritten introduction."  # the new version arrived
    assert lesson.exercise_cell("add_one").source == ADD_ONE_SOLVED  # and the learner's cell stayed
    assert "update: kept 1 exercise cell of yours" in done.stdout
    backups = list((lab.root / ".llm_algo" / "backup").rglob("*.ipynb"))
    assert len(backups) == 1 and ADD_ONE_SOLVED in "".join(
        "".join(c["source"]) for c in json.loads(backups[0].read_text())["cells"]
    )


def test_update_refuses_when_other_files_changed(lab: Lab) -> None:
    path = course_with_an_upstream_change(lab)
    lab.edit_cell(path, "exercise", lambda cell: cell.update(source=ADD_ONE_SOLVED))
    (lab.root / "pytest.ini").write_text("[pytest]\n")  # a local change outside the notebooks
    done = lab.run_cli("update", "--ref", "upstream")
    assert done.returncode == 1 and "pytest.ini" in done.stdout
    assert read_lesson(path).exercise_cell("add_one").source == ADD_ONE_SOLVED  # nothing was touched
    assert git(lab, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_an_exercise_gone_upstream_is_listed(lab: Lab) -> None:
    path = course_with_an_upstream_change(lab)
    git(lab, "checkout", "-q", "upstream")
    lab.edit_cell(path, "exercise", lambda cell: cell["metadata"]["llm_algo"].update(exercise="add_two"))
    git(lab, "commit", "-qam", "course v3: the exercise is renamed")
    git(lab, "checkout", "-q", "main")
    lab.edit_cell(path, "exercise", lambda cell: cell.update(source=ADD_ONE_SOLVED))
    done = lab.run_cli("update", "--ref", "upstream")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no longer in the course (kept in the backup only): {path.name}: add_one" in done.stdout
    assert PART in str(path)
