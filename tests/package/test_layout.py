"""The package reads as a pipeline: every module says its one job in its first line, and imports only go one way
(no cycle, counting the imports made inside functions too, and the package `__init__` that importing a submodule
runs)."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import llm_algo

PACKAGE = Path(llm_algo.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {module_name(p): p for p in MODULES}


def imported(path: Path) -> set[str]:
    """The llm_algo modules a module imports, anywhere in its body; `from .x import y` counts `.x.y` when that is
    a module, and importing `a.b.c` counts the package `a.b` it runs first (unless `a.b` contains this module)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target:
                if target in NAMES and target != here:
                    found.add(target)
                target = target.rpartition(".")[0]
    # A module's own packages contain it (their __init__ may re-export it); the top package imports nothing until asked.
    return {name for name in found if not here.startswith(f"{name}.") and name != "llm_algo"}


def test_every_module_says_its_one_job_first() -> None:
    silent = [
        module_name(p)
        for p in MODULES
        if not (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "").strip().splitlines()
    ]
    assert not silent, f"modules without a first docstring line saying their job: {silent}"


def test_the_import_graph_is_one_way() -> None:
    graph = {name: imported(path) for name, path in NAMES.items()}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
    assert set(order) >= set(graph)


def test_the_check_api_does_not_reach_up_into_grading_or_front_ends() -> None:
    below = {"llm_algo.check", "llm_algo.check.api", "llm_algo.check.failure", "llm_algo.check.bounds"}
    upper = ("llm_algo.grading", "llm_algo.worker", "llm_algo.session", "llm_algo.pytest_plugin", "llm_algo.mutation.")
    for name in below:
        reached = {m for m in imported(NAMES[name]) if m.startswith(upper)}
        assert not reached, f"{name} imports {reached}"


def test_import_llm_algo_and_reading_progress_need_no_torch() -> None:
    code = "import sys, llm_algo, llm_algo.progress, llm_algo.outcome; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_pytest_collects_lessons_without_importing_torch(tmp_path: Path) -> None:
    """The learner's pytest process reads the checks modules (llm_algo.check_index) instead of importing them."""
    code = (
        "import sys, pytest; "
        "code = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', '02_PyTorch_Algorithms']); "
        "print('TORCH', 'torch' in sys.modules); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, env=_plain_env()
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "TORCH False" in done.stdout


def _plain_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_ALGO_"))} | {
        "LLM_ALGO_WARM_GRADER": "0"
    }
