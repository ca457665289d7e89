"""No check asserts a speed: find verdicts in a checks module that compare a measured time (CONTRACT.md, section 6).

A value is *measured* when it comes from a clock or a benchmark: `time.perf_counter()` and the other clocks,
`do_bench`, `Event.elapsed_time`, `median_ms`, a `benchmark(...)` call (never the learner's `ex.*`: their results
are checked like any other), a function of the module that returns a measured value (`median_step_ms(...)`), and
every name, list element or arithmetic result that carries one (`elapsed = time.perf_counter() - start`, `times.append(elapsed)`, `sorted(times)`).
A *verdict* is an `assert`, the arguments of an `expect...(...)` call, or the condition of an `if` whose body raises
or fails. A verdict that compares a measured value is reported, unless one of its lines carries the marker
`# not a speed verdict: <reason>` (for a deadline that guards against a hang, or a plausibility check such as "the
clock advanced"). Benchmarks may time; they never assert.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

MARKER = "# not a speed verdict:"
CLOCKS = {
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "monotonic_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "time_ns",
    "do_bench",
    "do_bench_cudagraph",
    "elapsed_time",
    "median_ms",
    "benchmark",
    "timeit",
    "blocked_autorange",
    "adaptive_autorange",
}
NOT_A_TIME = {"len", "isinstance", "type", "str", "repr", "format", "bool", "id", "hasattr", "callable", "range"}
FAILS = {"fail"}  # pytest.fail(...)


@dataclass(frozen=True)
class SpeedVerdict:
    line: int
    message: str


def speed_verdicts(source: str) -> list[SpeedVerdict]:
    """Every verdict in `source` (a checks module) that compares a measured value and carries no marker."""
    tree = ast.parse(source)
    if not any(isinstance(node, ast.Call) and _is_clock(node) for node in ast.walk(tree)):
        return []  # every measured value starts at a clock
    lines = source.splitlines()
    scopes = _scopes(tree)
    timers = _timing_functions(scopes)
    found: set[SpeedVerdict] = set()
    for nodes in scopes:
        timed = _Taint(timers, _measured_names(nodes, timers))
        for node in nodes:
            for line, what in _verdicts(node, timed):
                if not _marked(lines, node):
                    found.add(SpeedVerdict(line, what))
    return sorted(found, key=lambda v: (v.line, v.message))


def _scopes(tree: ast.Module) -> list[list[ast.AST]]:
    """The module's own statements, and each top-level function or method with everything nested in it (a nested
    function or lambda shares its enclosing function's names)."""
    functions = [
        node
        for top in tree.body
        for node in ([top] if not isinstance(top, ast.ClassDef) else top.body)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    module = [
        n
        for top in tree.body
        if not isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for n in ast.walk(top)
    ]
    return [module, *(list(ast.walk(f)) for f in functions)]


def _own_nodes(function: ast.AST):
    """The nodes of a function without those of the functions nested in it (their returns are theirs)."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_clock(call: ast.Call) -> bool:
    """A clock or a benchmark of the check's own; never the learner's function (`ex.benchmark` may be the exercise,
    run on a fake clock: what it returns is checked like any other result)."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "ex":
        return False
    name = _call_name(call)
    if name == "time":  # time.time() or time() from `from time import time`; not `self.time()` of another object
        return isinstance(func, ast.Name) or (isinstance(func.value, ast.Name) and func.value.id == "time")
    return name in CLOCKS


class _Taint:
    """Which expressions carry a measured value, given the names measured in a scope (and its parents)."""

    def __init__(self, timers: set[str], names: set[str]):
        self.timers, self.names = timers, names

    def __call__(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in NOT_A_TIME:
                return False
            if _is_clock(node) or name in self.timers:
                return True
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            # keywords carry options (`results.get(timeout=remaining)` returns a result, not a time)
            return self(receiver) or any(self(a) for a in node.args)
        if isinstance(node, ast.Subscript | ast.Attribute | ast.Starred):
            return self(node.value)
        if isinstance(node, ast.BinOp):
            return self(node.left) or self(node.right)
        if isinstance(node, ast.UnaryOp):
            return self(node.operand)
        if isinstance(node, ast.IfExp):
            return self(node.body) or self(node.orelse)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(self(e) for e in node.elts)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self(node.elt) or any(self(g.iter) for g in node.generators)
        if isinstance(node, ast.NamedExpr):
            return self(node.value)
        return False


def _targets(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def _measured_names(nodes: list[ast.AST], timers: set[str]) -> set[str]:
    """Names that hold a measured value somewhere in a scope, to a fixed point (assignments, loops, appends)."""
    names: set[str] = set()
    taint = _Taint(timers, names)
    while True:
        before = len(names)
        for node in nodes:
            if isinstance(node, ast.Assign) and taint(node.value):
                names.update(t for target in node.targets for t in _targets(target))
            elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.NamedExpr | ast.For | ast.comprehension):
                source = node.iter if isinstance(node, ast.For | ast.comprehension) else node.value
                if taint(source):
                    names.update(_targets(node.target))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend", "insert", "add")
                and isinstance(node.func.value, ast.Name)
                and any(taint(a) for a in node.args)
            ):
                names.add(node.func.value.id)
        if len(names) == before:
            return names


def _timing_functions(scopes: list[list[ast.AST]]) -> set[str]:
    """Functions of the module (nested ones too) that return a measured value, to a fixed point."""
    timers: set[str] = set()
    while True:
        before = len(timers)
        for nodes in scopes:
            taint = _Taint(timers, _measured_names(nodes, timers))
            for function in nodes:
                if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                    isinstance(n, ast.Return) and taint(n.value) for n in _own_nodes(function)
                ):
                    timers.add(function.name)
        if len(timers) == before:
            return timers


def _verdicts(node: ast.AST, timed: _Taint):
    """(line, description) for each comparison of a measured value that `node` turns into a verdict."""
    if isinstance(node, ast.Assert):
        yield from _comparisons(node.test, timed, "assert")
    elif isinstance(node, ast.Call) and _call_name(node).startswith("expect"):
        name = _call_name(node)
        if name == "expect":
            yield from _comparisons(node.args[0] if node.args else None, timed, "expect(...)")
        elif any(timed(a) for a in node.args):
            yield node.lineno, f"{name}(...) on a measured value"
    elif isinstance(node, ast.If) and any(_fails(n) for n in node.body):
        yield from _comparisons(node.test, timed, "if ...: raise")


def _comparisons(test: ast.AST | None, timed: _Taint, verdict: str):
    for node in ast.walk(test) if test is not None else ():
        if isinstance(node, ast.Compare) and any(timed(o) for o in (node.left, *node.comparators)):
            yield node.lineno, f"{verdict} compares a measured time: `{ast.unparse(node)[:80]}`"


def _fails(node: ast.AST) -> bool:
    if isinstance(node, ast.Raise):
        return True
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _call_name(node.value) in FAILS


def _marked(lines: list[str], node: ast.AST) -> bool:
    """The marker, with a reason after it, on a line of the verdict or the line above it."""
    first, last = node.lineno - 1, getattr(node, "end_lineno", node.lineno)
    for text in lines[max(0, first - 1) : last]:
        at = text.find(MARKER)
        if at >= 0 and text[at + len(MARKER) :].strip():
            return True
    return False
