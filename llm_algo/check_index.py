"""The checks a lesson declares, read from its checks module's source without importing it (so without torch): what
pytest needs to collect a lesson's items. A module this reader cannot follow is imported instead (`None` here);
a package test keeps the two in agreement for every lesson."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .outcome import check_key
from .paths import checks_module_path


@dataclass(frozen=True)
class DeclaredCheck:
    exercise: str
    name: str
    description: str

    @property
    def key(self) -> str:
        return check_key(self.exercise, self.name)


def declared_checks(lesson_id: str) -> list[DeclaredCheck] | None:
    """Each `@checks("exercise", ...)` function of `checks = Checks(lesson_id)`, in order; None when the module
    declares its checks any other way (the caller imports it), or does not exist or parse."""
    try:
        tree = ast.parse(checks_module_path(lesson_id).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    if not _declares_registry(tree, lesson_id):
        return None
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            exercise = _registry_call(decorator)
            if exercise is _DYNAMIC:
                return None
            if exercise is not None:
                if node not in tree.body:
                    return None  # a check defined inside a function or a loop: only importing tells
                doc = (ast.get_docstring(node) or node.name.replace("_", " ")).strip().splitlines()[0]
                found.append(DeclaredCheck(exercise, node.name, doc))
    return found


_DYNAMIC = object()


def _declares_registry(tree: ast.Module, lesson_id: str) -> bool:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["checks"]
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "Checks"
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            return node.value.args[0].value == lesson_id
    return False


def _registry_call(decorator: ast.expr):
    """The exercise of `@checks("exercise", ...)`; _DYNAMIC for `@checks(...)` with a computed exercise; else None."""
    if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "checks"):
        return None
    if decorator.args and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str):
        return decorator.args[0].value
    return _DYNAMIC
