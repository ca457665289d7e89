"""Grading never writes to the learner's checkout: after a learner-mode pytest run over a real lesson, git sees
no change to any tracked file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NOTEBOOK = "02_PyTorch_Algorithms/02_RMSNorm.ipynb"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_learner_run_leaves_tracked_files_alone(real_repo: Path) -> None:
    status_before = git(real_repo, "status", "--porcelain", "--untracked-files=no")
    diff_before = git(real_repo, "diff", "--binary")  # also catches a change to a file that was already modified
    notebook_before = (real_repo / NOTEBOOK).read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_ALGO_"))}

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", NOTEBOOK],
        cwd=real_repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    # 0 on a fresh clone (every check not attempted), 1 where someone has worked on the lesson; never a crash
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "Your progress" in done.stdout and "INTERNALERROR" not in done.stdout
    assert (real_repo / NOTEBOOK).read_bytes() == notebook_before
    assert git(real_repo, "status", "--porcelain", "--untracked-files=no") == status_before
    assert git(real_repo, "diff", "--binary") == diff_before
