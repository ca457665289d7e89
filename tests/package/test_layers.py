"""The package reads as a pipeline (docs/WRITING_LESSONS.md, "Where things are in the package"): a module imports
only from its own layer or the layers below it, so that the check author's API never pulls in the grader."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "llm_algo"

LAYERS = [  # lowest first; a name is a top-level module or subpackage of llm_algo
    {
        "paths",
        "settings",
        "outcome",
        "notebook",
        "progress",
        "device",
        "state_files",
        "module_files",
        "check_index",
        "colab",
        "messages",
        "heartbeat",
    },
    {"check"},
    {"references", "distributed", "cuda"},
    {"mutation"},
    {"grading"},
    {"session", "session_report"},
    {"worker"},
    {
        "pytest_plugin",
        "headless",
        "bench",
        "doctor",
        "authoring",
        "update",
        "progress_plot",
        "site",
        "__main__",
        "__init__",
    },
]
FRONT_ENDS_IN_MUTATION = {"generate", "run", "report"}  # `mutate`'s own modules: a front end living in mutation/


def layer_of(name: str) -> int:
    for index, layer in enumerate(LAYERS):
        if name in layer:
            return index
    raise AssertionError(f"llm_algo.{name} is in no layer: add it to LAYERS and to the docs' table")


def imported(path: Path) -> set[str]:
    """Top-level llm_algo modules that `path` imports (absolute or relative)."""
    relative = path.relative_to(PACKAGE)
    package = list(relative.parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                parts = [*base, *(node.module.split(".") if node.module else [])]
                if not parts:  # `from . import x` at the top level
                    parts = [alias.name for alias in node.names]
                    names.update(parts)
                    continue
                names.add(parts[0])
            elif node.module and node.module.startswith("llm_algo."):
                names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("llm_algo."))
    return names


def test_imports_only_go_down():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        own = relative.parts[0].removesuffix(".py")
        level = len(LAYERS) - 1 if own == "mutation" and relative.stem in FRONT_ENDS_IN_MUTATION else layer_of(own)
        for name in imported(path) - {own}:
            if layer_of(name) > level:
                wrong.append(f"{relative} imports llm_algo.{name}")
    assert not wrong, "imports that go up the layers:\n" + "\n".join(wrong)
