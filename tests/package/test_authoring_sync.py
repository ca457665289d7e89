"""This checkout's notebooks and part indexes are exactly what their sources build: a notebook edited by hand
without its `authoring/` source (or a source changed without `python -m llm_algo build`) fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_lab import MAIN_REPO

from llm_algo.authoring.builder import build
from llm_algo.authoring.part_index import part_readme
from llm_algo.paths import PART_PATTERN

SOURCES = sorted((MAIN_REPO / "authoring").glob("p*.py"))
PARTS = sorted(p for p in MAIN_REPO.iterdir() if p.is_dir() and PART_PATTERN.match(p.name))


def test_there_are_sources_and_parts() -> None:
    assert SOURCES and PARTS  # the parametrized tests below must not pass by collecting nothing


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_notebook_is_what_its_source_builds(real_repo: Path, source: Path) -> None:
    path, text = build(source)
    assert path.is_relative_to(real_repo)
    shown = path.relative_to(real_repo)
    assert path.exists(), f"{shown} is missing: run `python -m llm_algo build`"
    assert path.read_text(encoding="utf-8") == text, (
        f"{shown} differs from what authoring/{source.name} builds: edit the source, then run "
        "`python -m llm_algo build` (never edit the notebook by hand)"
    )


@pytest.mark.parametrize("part", PARTS, ids=[p.name for p in PARTS])
def test_part_index_is_what_the_notebooks_build(real_repo: Path, part: Path) -> None:
    readme = part / "README.md"
    assert readme.exists(), f"{part.name}/README.md is missing: run `python -m llm_algo build`"
    assert readme.read_text(encoding="utf-8") == part_readme(part), (
        f"{part.name}/README.md is out of date: run `python -m llm_algo build`"
    )


def test_readme_part_table_is_what_the_notebooks_build(real_repo: Path) -> None:
    """The README cannot promise lessons that do not exist (issue 19, item 5): its part tables are generated."""
    from llm_algo.authoring.part_index import readme_table, readme_with_tables

    readme = (real_repo / "README.md").read_text(encoding="utf-8")
    assert "<!-- parts:en:begin -->" in readme and "<!-- parts:zh:begin -->" in readme
    assert readme == readme_with_tables(readme), (
        "README.md's part tables are out of date: run `python -m llm_algo build`"
    )
    for lang in ("en", "zh"):
        assert readme_table(lang) in readme


def test_every_lesson_is_in_the_plan(real_repo: Path) -> None:
    """authoring/curriculum.toml lists every lesson that exists (a lesson outside it would never show as planned)."""
    from llm_algo.authoring.part_index import _built_ids, planned

    plan = planned()
    missing = [(p.name, i) for p in PARTS for i in _built_ids(p) if i not in plan.get(p.name, {})]
    assert not missing, f"add these to authoring/curriculum.toml: {missing}"


def test_glossary_is_what_the_sources_build(real_repo: Path) -> None:
    """docs/GLOSSARY.md (EN ↔ 中文, issue 17) is build output, and every lesson's title cell links to it."""
    from llm_algo.authoring.glossary import GLOSSARY, glossary_markdown, terms

    assert len(terms()) >= 60
    assert (real_repo / GLOSSARY).read_text(encoding="utf-8") == glossary_markdown(), (
        "docs/GLOSSARY.md is out of date: run `python -m llm_algo build`"
    )
    for part in PARTS:
        for notebook in sorted(part.glob("*.ipynb"))[:2]:
            assert "../docs/GLOSSARY.md" in notebook.read_text(encoding="utf-8"), notebook
