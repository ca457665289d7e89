"""`python -m llm_algo build` says where each notebook comes from and refuses to overwrite one edited by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_lab import MAIN_REPO, clear_caches

from llm_algo.authoring.builder import HandEdited, build_all, edited_cells

SOURCE = MAIN_REPO / "authoring" / "p02_swiglu.py"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one lesson source (p02.swiglu), built once."""
    (tmp_path / "authoring").mkdir()
    (tmp_path / "authoring" / SOURCE.name).write_text(SOURCE.read_text(encoding="utf-8"), encoding="utf-8")
    mutants = MAIN_REPO / "tests" / "mutants" / "p02_swiglu.py"  # the usual-mistakes block is built from them
    (tmp_path / "tests" / "mutants").mkdir(parents=True)
    (tmp_path / "tests" / "mutants" / mutants.name).write_text(mutants.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv("LLM_ALGO_ROOT", str(tmp_path))
    clear_caches()
    yield tmp_path
    monkeypatch.delenv("LLM_ALGO_ROOT")
    clear_caches()


def _edit(path: Path, index: int, text: str) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    notebook["cells"][index]["source"] = text
    path.write_text(json.dumps(notebook), encoding="utf-8")


def test_the_first_cell_names_the_source(checkout: Path) -> None:
    (path,) = build_all()
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    assert "Generated from [`authoring/p02_swiglu.py`]" in "".join(first["source"])
    assert edited_cells(path) == []


def test_a_hand_edit_is_refused_with_the_cells_and_the_way_back(checkout: Path) -> None:
    (path,) = build_all()
    _edit(path, 3, "# a fix made in the notebook\n")
    with pytest.raises(HandEdited) as refused:
        build_all()
    message = str(refused.value)
    assert "cell 4 (" in message and "authoring/p02_swiglu.py" in message and "--force" in message
    assert "# a fix made in the notebook" in path.read_text(encoding="utf-8")  # nothing was overwritten

    build_all(force=True)
    assert edited_cells(path) == [] and "# a fix made in the notebook" not in path.read_text(encoding="utf-8")


def test_outputs_and_a_learner_run_are_not_edits(checkout: Path) -> None:
    (path,) = build_all()
    notebook = json.loads(path.read_text(encoding="utf-8"))
    code = next(c for c in notebook["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
    code["execution_count"] = 1
    path.write_text(json.dumps(notebook), encoding="utf-8")
    assert edited_cells(path) == []
