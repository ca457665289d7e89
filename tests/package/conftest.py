"""Fixtures for the package's own tests: a tiny lesson repository in tmp_path (see tiny_lab.py), or this
checkout itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_lab import MAIN_REPO, Lab, clear_caches


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty lesson repository; the package in this process, and every child it starts, points at it."""
    lab = Lab.create(tmp_path / "lab")
    monkeypatch.setenv("LLM_ALGO_ROOT", str(lab.root))
    clear_caches()
    yield lab
    clear_caches()


@pytest.fixture
def real_repo(monkeypatch: pytest.MonkeyPatch):
    """The package pointed at this checkout (no LLM_ALGO_ROOT)."""
    monkeypatch.delenv("LLM_ALGO_ROOT", raising=False)
    clear_caches()
    yield MAIN_REPO
    clear_caches()
