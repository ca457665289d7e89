"""Colab (issue 19, item 6): one setting holds the course's address; the set-up cell clones it into Drive when
mounted (work persists) or into the runtime, says which, and installs only what the runtime lacks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llm_algo import colab


def write_pyproject(root: Path, repository: str, branch: str = "main") -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "x"\ndependencies = ["torch>=2.11,<2.14", "einops>=0.8"]\n\n'
        f'[tool.llm_algo]\nrepository = "{repository}"\nbranch = "{branch}"\n',
        encoding="utf-8",
    )


def test_the_address_comes_from_one_setting(tmp_path):
    write_pyproject(tmp_path, "https://github.com/someone/my-fork", "dev")
    assert colab.colab_url(tmp_path) == "https://colab.research.google.com/github/someone/my-fork/blob/dev"
    code = colab.bootstrap_code(tmp_path)
    assert '"https://github.com/someone/my-fork"' in code and '"-b", "dev"' in code
    write_pyproject(tmp_path, "https://gitlab.com/someone/x")
    with pytest.raises(ValueError, match="OWNER/NAME"):
        colab.colab_url(tmp_path)


def test_every_notebook_badge_and_setup_cell_use_the_setting():
    from llm_algo.paths import lesson_notebooks

    url = colab.colab_url()
    for path in lesson_notebooks()[:5]:
        text = path.read_text(encoding="utf-8")
        assert url in text and "from llm_algo.colab import prepare" in text, path


def run_bootstrap(tmp_path: Path, monkeypatch, *, drive: bool) -> list:
    """The generated set-up lines, run as Colab would, with /content and Drive moved under tmp_path."""
    content = tmp_path / "content"
    code = colab.bootstrap_code().replace(str(colab.DRIVE), str(content / "drive/MyDrive"))
    code = code.replace(f'"{colab.COLAB_HOME}"', f'"{content}"')
    if drive:
        (content / "drive/MyDrive").mkdir(parents=True)
    home = (content / "drive/MyDrive" if drive else content) / "llm-algo-lab"
    write_pyproject(home, colab.repository())  # already cloned: no network in a test
    called = []
    monkeypatch.setattr(colab, "prepare", lambda where: called.append(where))
    monkeypatch.setitem(sys.modules, "google.colab", object())
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(code, "<setup cell>", "exec"), {})
    return called, home


def test_the_setup_cell_prefers_drive(tmp_path, monkeypatch):
    called, home = run_bootstrap(tmp_path, monkeypatch, drive=True)
    assert called == [home] and "drive/MyDrive" in str(home)


def test_the_setup_cell_without_drive_uses_the_runtime(tmp_path, monkeypatch):
    called, home = run_bootstrap(tmp_path, monkeypatch, drive=False)
    assert called == [home] and "drive" not in str(home)


def test_a_wrong_address_says_so(tmp_path, monkeypatch):
    code = colab.bootstrap_code().replace(colab.repository(), f"file://{tmp_path}/no-such-repo")
    code = code.replace(str(colab.DRIVE), str(tmp_path / "nodrive")).replace(f'"{colab.COLAB_HOME}"', f'"{tmp_path}"')
    monkeypatch.setitem(sys.modules, "google.colab", object())
    with pytest.raises(RuntimeError, match="could not clone .*is the address right"):
        exec(compile(code, "<setup cell>", "exec"), {})


def test_only_what_is_missing_is_installed(tmp_path, capsys):
    versions = {"torch": "2.9.0", "einops": None}
    missing, warnings = colab.plan(["torch>=2.11,<2.14", "einops>=0.8"], versions.get)
    assert missing == ["einops>=0.8"]  # torch is there (outside the range): left alone, with a warning
    assert warnings == ["torch 2.9.0 is outside the tested range <2.14,>=2.11"]
    home = tmp_path / "llm-algo-lab"
    write_pyproject(home, colab.repository())
    ran = []
    lines = colab.prepare(home, run=ran.append)
    assert all("pip" in " ".join(command) for command in ran)
    assert lines[0].startswith(f"course: {home} — in this runtime only")
