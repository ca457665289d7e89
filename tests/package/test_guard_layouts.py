"""Coverage of the operand-layouts guard (issue 27, guard 3; CONTRACT section 4): every Triton lesson and every CUDA
C++ kernel lesson gives its tensor operands layouts of their own in its checks (`llm_algo.references.layouts`:
`distinct_layouts` or `with_layout`), or its checks module says why not in `LAYOUTS_EXEMPT = "..."`.

Lessons whose checks another change is converting are listed in PENDING with the reason; the list only shrinks."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from llm_algo.notebook import read_lesson
from llm_algo.paths import checks_module_path, lesson_notebooks

# the layout helpers, and the package helpers built on them (llm_algo.cuda.sim_matmul for the C++ GEMMs)
GUARD_CALLS = {"distinct_layouts", "with_layout", "expect_cuda_gemm_in_own_layouts"}
TRITON_CHECKS = re.compile(r"Checks\(\s*['\"][^'\"]+['\"][^)]*\btriton\s*=\s*True")

PENDING: dict[str, str] = {}


def kernel_kind(notebook: Path, checks_source: str) -> str | None:
    """'triton' for a Triton lesson (its checks registry says triton=True), 'cuda' for a lesson whose exercises
    compile CUDA C++ (`compile_cuda`), else None."""
    if TRITON_CHECKS.search(checks_source):
        return "triton"
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    if any("compile_cuda(" in "".join(cell.get("source", "")) for cell in cells if cell.get("cell_type") == "code"):
        return "cuda"
    return None


def layout_guard(checks_source: str) -> str | None:
    """How a checks module keeps the guard: 'calls distinct_layouts' / 'calls with_layout', 'exempt: <reason>', or None
    when it does neither (an empty LAYOUTS_EXEMPT is no reason)."""
    tree = ast.parse(checks_source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in GUARD_CALLS:
                return f"calls {name}"
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "LAYOUTS_EXEMPT" for t in targets):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.strip():
                return f"exempt: {value.value.strip()}"
    return None


def kernel_lessons() -> dict[str, tuple[str, str | None]]:
    """lesson id -> (kind, guard) for every Triton and CUDA C++ kernel lesson of the repository."""
    found = {}
    for notebook in lesson_notebooks():
        lesson_id = read_lesson(notebook).id
        path = checks_module_path(lesson_id)
        if not path.exists():
            continue
        source = path.read_text(encoding="utf-8")
        kind = kernel_kind(notebook, source)
        if kind:
            found[lesson_id] = (kind, layout_guard(source))
    return found


def test_every_kernel_lesson_gives_its_operands_their_own_layouts():
    lessons = kernel_lessons()
    assert len(lessons) >= 20, f"found only {len(lessons)} kernel lessons: is the detection broken? {sorted(lessons)}"
    missing = [
        f"{lid} ({kind})" for lid, (kind, guard) in sorted(lessons.items()) if guard is None and lid not in PENDING
    ]
    assert not missing, (
        "kernel lessons whose checks never give a tensor operand a layout of its own: "
        + ", ".join(missing)
        + ". Call llm_algo.references.layouts.distinct_layouts (or with_layout) in a check, comparing with the "
        'reference on the original tensors, or declare LAYOUTS_EXEMPT = "<why>" in the checks module.'
    )


def test_pending_lessons_are_still_pending():
    """A pending lesson that keeps the guard now (or no longer exists) must leave PENDING."""
    lessons = kernel_lessons()
    stale = [lid for lid in PENDING if lid not in lessons or lessons[lid][1] is not None]
    assert not stale, f"remove from PENDING (they keep the guard now, or are no kernel lessons): {stale}"


def test_the_guard_tells_modules_with_and_without_layouts_apart():
    """The guard fails a checks module that never calls the helpers, and accepts the three ways to keep it."""
    without = (
        'from llm_algo.check import Checks\nchecks = Checks("p03.x", triton=True)\n\ndef c(ex):\n    ex.f(q, k, v)\n'
    )
    assert kernel_kind(Path("unused"), without) == "triton"
    assert layout_guard(without) is None
    assert layout_guard(without + "q, k, v = distinct_layouts(q, k, v)\n") == "calls distinct_layouts"
    assert layout_guard(without + "x = layouts.with_layout(x, 'padded')\n") == "calls with_layout"
    assert layout_guard(without + 'LAYOUTS_EXEMPT = "no tensor operand: the exercise takes sizes"\n').startswith(
        "exempt"
    )
    assert layout_guard(without + 'LAYOUTS_EXEMPT = "  "\n') is None
    assert layout_guard(without + "# distinct_layouts(q, k, v) in a comment does not count\n") is None
