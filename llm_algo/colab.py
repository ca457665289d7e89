"""The course on Google Colab: where it is published (one setting), where the runtime keeps it, what to install.

The address lives in `pyproject.toml` under `[tool.llm_algo]` (`repository`, `branch`); the Colab badges and each
notebook's set-up cell are built from it (`python -m llm_algo build`), so a fork publishes itself by changing it.

On Colab, the set-up cell clones the course once per runtime, into Google Drive when Drive is mounted (your
notebooks there persist, and `use()` in a later lesson sees your earlier work) or into `/content` otherwise (gone
with the runtime), and says which. `prepare()` then installs only what the runtime lacks, within the ranges the
course is tested with; a package Colab already has outside those ranges is left alone (reinstalling torch there
would break the runtime) and named in a warning.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from .paths import repo_root

DEFAULT_REPOSITORY = "https://github.com/llm-algo-lab/llm-algo-lab"
DRIVE = Path("/content/drive/MyDrive")
COLAB_HOME = Path("/content")


def _settings(root: Path | None = None) -> dict:
    path = (root or repo_root()) / "pyproject.toml"
    if not path.exists():
        return {}
    with path.open("rb") as handle:
        return tomllib.load(handle).get("tool", {}).get("llm_algo", {})


def repository(root: Path | None = None) -> str:
    return _settings(root).get("repository", DEFAULT_REPOSITORY).rstrip("/")


def branch(root: Path | None = None) -> str:
    return _settings(root).get("branch", "main")


def colab_url(root: Path | None = None) -> str:
    """The prefix of a notebook's Open-in-Colab link: `.../github/OWNER/NAME/blob/BRANCH`."""
    match = re.match(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?$", repository(root))
    if match is None:
        raise ValueError(
            f"[tool.llm_algo] repository must be a https://github.com/OWNER/NAME address: {repository(root)}"
        )
    return f"https://colab.research.google.com/github/{match[1]}/{match[2]}/blob/{branch(root)}"


def bootstrap_code(root: Path | None = None) -> str:
    """The first lines of every set-up cell: on Colab, fetch the course once per runtime and prepare it."""
    return f'''import sys
if "google.colab" in sys.modules:  # Colab: the course and its grader, once per runtime (see llm_algo/colab.py)
    import pathlib, subprocess
    drive = pathlib.Path("{DRIVE}")
    home = (drive if drive.is_dir() else pathlib.Path("{COLAB_HOME}")) / "llm-algo-lab"
    if not (home / "pyproject.toml").exists():
        subprocess.run(["git", "clone", "-q", "--depth=1", "-b", "{branch(root)}", "{repository(root)}", str(home)])
    if not (home / "pyproject.toml").exists():
        raise RuntimeError(f"could not clone {repository(root)} into {{home}}: is the address right?")
    sys.path.insert(0, str(home))
    from llm_algo.colab import prepare
    prepare(home)
'''


def _requirements(root: Path) -> list[str]:
    with (root / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    return list(project["dependencies"])


def plan(requirements: list[str], installed: Callable[[str], str | None]) -> tuple[list[str], list[str]]:
    """(what to install: missing requirements, as written) and (warnings: present but outside the tested range)."""
    from packaging.requirements import Requirement

    missing, warnings = [], []
    for line in requirements:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = installed(requirement.name)
        if version is None:
            missing.append(line)
        elif requirement.specifier and version not in requirement.specifier:
            warnings.append(f"{requirement.name} {version} is outside the tested range {requirement.specifier}")
    return missing, warnings


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def prepare(home: Path, *, run: Callable[[list[str]], object] = subprocess.run) -> list[str]:
    """Install what the runtime lacks and say where the course lives; returns the lines it printed."""
    missing, warnings = plan(_requirements(home), _installed)
    if missing:
        run([sys.executable, "-m", "pip", "install", "-q", *missing])
    on_drive = DRIVE in home.parents
    lines = [
        f"course: {home} — "
        + (
            "in your Google Drive: your work there persists, and later lessons use it. Open the notebooks from "
            "Drive (File → Open notebook → Google Drive → llm-algo-lab) so that your edits land there."
            if on_drive
            else "in this runtime only (it goes when the runtime does). To keep your work and let later lessons use "
            "it: run `from google.colab import drive; drive.mount('/content/drive')`, then this cell again."
        ),
        f"installed: {', '.join(missing)}" if missing else "installed: nothing (the runtime has what the course needs)",
        *(f"warning: {w} (left as Colab has it)" for w in warnings),
    ]
    for line in lines:
        print(line)
    return lines
