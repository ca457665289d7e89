"""Reading a checks module without importing it (llm_algo.check_index) finds exactly the checks that importing it
registers, for every lesson of this checkout; a module it cannot follow is left to the import."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_lab import MAIN_REPO, clear_caches

from llm_algo.check import load_checks
from llm_algo.check_index import declared_checks
from llm_algo.notebook import read_lesson
from llm_algo.paths import lesson_notebooks

LESSON_IDS = [read_lesson(path).id for path in lesson_notebooks(MAIN_REPO)]


@pytest.mark.parametrize("lesson_id", LESSON_IDS)
def test_read_equals_imported(real_repo: Path, lesson_id: str) -> None:
    declared = declared_checks(lesson_id)
    assert declared is not None, f"{lesson_id}: its checks module declares checks in a way the reader cannot follow"
    imported = [(s.exercise, s.name, s.description) for s in load_checks(lesson_id).specs]
    assert [(d.exercise, d.name, d.description) for d in declared] == imported


@pytest.mark.parametrize(
    "source",
    [
        'checks = Checks("p02.x")\nfor e in ("a", "b"):\n    @checks(e)\n    def one(ex): ...\n',
        'checks = Checks("p02.x")\nEX = "a"\n@checks(EX)\ndef one(ex): ...\n',
        'checks = Checks("p02.other")\n@checks("a")\ndef one(ex): ...\n',
    ],
    ids=["in a loop", "computed exercise", "another lesson's registry"],
)
def test_what_the_reader_cannot_follow_is_left_to_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    (tmp_path / "tests" / "checks").mkdir(parents=True)
    (tmp_path / "tests" / "checks" / "p02_x.py").write_text(source, encoding="utf-8")
    monkeypatch.setenv("LLM_ALGO_ROOT", str(tmp_path))
    clear_caches()
    try:
        assert declared_checks("p02.x") is None
    finally:
        monkeypatch.delenv("LLM_ALGO_ROOT")
        clear_caches()
