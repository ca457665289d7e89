"""Automatic mutants: generate small, located edits of a lesson's reference solutions, one learner mistake each.

Every operator is a small function of one AST node that yields replacements of source spans (an operator
token, a call, a keyword argument, a statement). A mutant applies exactly one of them to the solution cell's
text, so everything else in the cell (comments, layout, line numbers) stays as it was. Only the lines a
learner writes are mutated: lines that the exercise cell already gives (signatures, constants, given helpers)
and decorators, defaults, annotations, docstrings and messages are left alone, and so are performance-only
knobs (`num_warps`, `num_stages`, `triton.Config`).

An `AutoMutant` is duck-compatible with `llm_algo.mutation.Mutant` for `load_namespace` and the grader
(`.exercise`, `.name`, `.key`, `.mistake`, `.apply(source)`). Its `id` is stable under edits elsewhere in the
cell: exercise, enclosing function, operator and a digest of the mutated line's text and the edit.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..notebook import Lesson
from .mutants import StaleMutant

# ----------------------------------------------------------------------------------------- the mutant


@dataclass(frozen=True)
class AutoMutant:
    exercise: str
    operator: str
    id: str  # stable: "exercise/scope/operator/digest"
    line: int  # 1-based line of the solution cell where the edit starts
    start: int  # character offsets of the replaced span in the solution cell's source
    end: int
    before: str  # the replaced text
    after: str  # its replacement
    line_before: str  # the whole first line of the edit, before and after, for a reader
    line_after: str

    @property
    def name(self) -> str:
        return self.id

    @property
    def key(self) -> str:
        return f"auto::{self.id}"

    @property
    def description(self) -> str:
        return f"line {self.line}: {_short(self.before)!r} -> {_short(self.after)!r}"

    @property
    def mistake(self) -> str:
        return f"{self.operator}, {self.description}"

    def apply(self, solution_source: str) -> str:
        if solution_source[self.start : self.end] != self.before:
            raise StaleMutant(
                f"automatic mutant {self.id}: the solution of {self.exercise!r} changed since it was generated"
            )
        return solution_source[: self.start] + self.after + solution_source[self.end :]


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------- source positions

Edit = tuple[int, int, str]  # (start offset, end offset, replacement)


class Source:
    """A cell's text with AST positions (line, UTF-8 byte column) turned into character offsets."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))

    def offset(self, lineno: int, byte_col: int) -> int:
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return self.line_starts[lineno - 1] + len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_of(self, offset: int) -> int:
        low, high = 0, len(self.line_starts) - 1
        while low < high - 1:
            middle = (low + high) // 2
            if self.line_starts[middle] <= offset:
                low = middle
            else:
                high = middle
        return low + 1

    def token_between(self, start: int, end: int, token: str) -> int | None:
        """Offset of the operator `token` between two operands, where only brackets, blanks, comments and the
        operator itself can be."""
        i = start
        while i < end:
            if self.text[i] == "#":
                i = self.text.find("\n", i, end)
                if i < 0:
                    return None
            elif self.text.startswith(token, i):
                return i
            i += 1
        return None

    def operator_span(self, node: ast.BinOp, token: str) -> tuple[int, int] | None:
        """Where a binary operator's token is, blanks around it included."""
        where = self.token_between(self.span(node.left)[1], self.span(node.right)[0], token)
        if where is None:
            return None
        start, end = where, where + len(token)
        while start > 0 and self.text[start - 1] in " \t":
            start -= 1
        while end < len(self.text) and self.text[end] in " \t":
            end += 1
        return start, end

    def keep_one_side(self, node: ast.BinOp, token: str, side: str) -> Edit | None:
        """Delete the operator and one operand of `node` (brackets stay balanced: the kept text is untouched)."""
        around = self.operator_span(node, token)
        if around is None:
            return None
        start, end = self.span(node)
        return (around[0], end, "") if side == "left" else (start, around[1], "")

    def drop_method_call(self, call: ast.Call) -> Edit:
        """Delete `.method(...)` from `receiver.method(...)`."""
        dot = self.text.rfind(".", self.span(call.func.value)[1], self.span(call.func)[1])
        return dot, self.span(call)[1], ""

    def operand(self, node: ast.AST) -> str:
        """A node's text, parenthesised unless it is an atom, so that it can stand where a larger expression was."""
        text = self.segment(node)
        atom = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
        return text if atom else f"({text})"


# ----------------------------------------------------------------------------------------- operators

Operator = Callable[[ast.AST, Source], Iterator[Edit]]
OPERATORS: dict[str, Operator] = {}


def operator(func: Operator) -> Operator:
    """Register an operator under its function name."""
    OPERATORS[func.__name__] = func
    return func


def _called_name(call: ast.Call) -> str:
    """`max` for `torch.max(...)`, `x.max(...)` and `max(...)`."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _receiver(call: ast.Call) -> ast.AST | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


MODULES = ("torch", "tl", "F", "math", "triton", "np")


def _module_of(call: ast.Call) -> str:
    """`torch` for `torch.max(...)`, `tl` for `tl.max(...)`, "" for a method or a builtin."""
    receiver = _receiver(call)
    return receiver.id if isinstance(receiver, ast.Name) and receiver.id in MODULES else ""


def _is_method(call: ast.Call) -> bool:
    return _receiver(call) is not None and not _module_of(call)


ARITHMETIC = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*")}
ARITHMETIC[ast.FloorDiv] = ("//", "/")
AUGMENTED = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+="), ast.Mult: ("*=", "/="), ast.Div: ("/=", "*=")}
COMPARISON = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">")}
COMPARISON.update({ast.Eq: ("==", "!="), ast.NotEq: ("!=", "==")})


@operator
def swap_arithmetic(node: ast.AST, src: Source) -> Iterator[Edit]:
    """`+` <-> `-`, `*` <-> `/`, `//` -> `/` (also in augmented assignments)."""
    if isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:
        old, new = ARITHMETIC[type(node.op)]
        where = src.token_between(src.span(node.left)[1], src.span(node.right)[0], old)
    elif isinstance(node, ast.AugAssign) and type(node.op) in AUGMENTED:
        old, new = AUGMENTED[type(node.op)]
        where = src.token_between(src.span(node.target)[1], src.span(node.value)[0], old)
    else:
        return
    if where is not None:
        yield where, where + len(old), new


@operator
def swap_comparison(node: ast.AST, src: Source) -> Iterator[Edit]:
    """`<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`: the off-by-one of a mask or a bound."""
    if not isinstance(node, ast.Compare):
        return
    left = node.left
    for op, right in zip(node.ops, node.comparators, strict=True):
        if type(op) in COMPARISON:
            old, new = COMPARISON[type(op)]
            where = src.token_between(src.span(left)[1], src.span(right)[0], old)
            if where is not None:
                yield where, where + len(old), new
        left = right


DIM_KEYWORDS = ("dim", "axis")
DIM_METHODS = {"sum", "mean", "max", "min", "amax", "amin", "softmax", "log_softmax", "logsumexp", "cumsum"}
DIM_METHODS |= {"argmax", "argmin", "norm", "var", "std", "cat", "stack", "unsqueeze", "squeeze", "prod"}


def _dim_alternatives(value: int) -> list[int]:
    """`0` <-> `-1` or `1` <-> `-1` would name the same axis of a 1-D or 2-D tensor: not a mistake worth a mutant."""
    return {-1: [0, -2], 0: [1], 1: [0], -2: [-1]}.get(value, [value + 1, value - 1])


@operator
def wrong_dim(node: ast.AST, src: Source) -> Iterator[Edit]:
    """The wrong axis: `dim=-1` -> `dim=0` / `-2` (also `x.sum(-1)`, `torch.cat(xs, 1)`), `keepdim=True` -> `False`."""
    if not isinstance(node, ast.Call):
        return
    targets = [kw.value for kw in node.keywords if kw.arg in DIM_KEYWORDS]
    if _called_name(node) in DIM_METHODS and isinstance(node.func, ast.Attribute):  # not the builtins max/min
        position = 0 if _is_method(node) else 1  # x.sum(-1) vs torch.sum(x, -1)
        if len(node.args) > position:
            targets.append(node.args[position])
    for target in targets:
        value = _number(target)
        if isinstance(value, int):
            start, end = src.span(target)
            for alternative in _dim_alternatives(value):
                yield start, end, str(alternative)
    for kw in node.keywords:
        if kw.arg in ("keepdim", "keep_dims") and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            start, end = src.span(kw.value)
            yield start, end, "False"


def _number(node: ast.AST) -> float | int | None:
    """The value of a numeric literal, `-1` included; None for anything else (and for booleans)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _number(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _int_neighbours(value: int) -> list[int]:
    return {0: [1], 1: [0, 2]}.get(value, [value + 1, value - 1])


@operator
def change_constant(node: ast.AST, src: Source) -> Iterator[Edit]:
    """Numbers: `0` <-> `1`, `n` -> `n±1`, a small epsilon -> `0`, `0.5` -> `1.0`, `0.0` <-> `1.0`."""
    value = _number(node)
    if value is None or getattr(node, "negated", False):  # `-1` is edited as a whole, not its `1`
        return
    if isinstance(value, int):
        replacements = [str(v) for v in _int_neighbours(value)]
    else:
        small = 0 < abs(value) < 1e-3
        replacements = {0.0: ["1.0"], 1.0: ["0.0"], 0.5: ["1.0"]}.get(value, ["0.0"] if small else [])
    start, end = src.span(node)
    for text in replacements:
        yield start, end, text


CAST_METHODS = {"float", "double", "half", "bfloat16", "long", "int"}
DTYPE_WORDS = ("float", "int", "dtype", "bf16", "fp16", "fp32", "half", "double", "element_ty")


def _looks_like_dtype(node: ast.AST, src: Source) -> bool:
    return isinstance(node, (ast.Attribute, ast.Name)) and any(word in src.segment(node) for word in DTYPE_WORDS)


@operator
def drop_cast(node: ast.AST, src: Source) -> Iterator[Edit]:
    """A missing upcast or downcast: `.float()`, `.to(torch.float32)`, `.to(x.dtype)` removed;
    `torch.promote_types(x.dtype, torch.float32)` -> `x.dtype`."""
    if not isinstance(node, ast.Call):
        return
    name = _called_name(node)
    if _is_method(node):
        dtype_args = [*node.args, *(kw.value for kw in node.keywords if kw.arg == "dtype")]
        bare = name in CAST_METHODS and not node.args and not node.keywords
        if bare or (name in ("to", "type") and len(dtype_args) == 1 and _looks_like_dtype(dtype_args[0], src)):
            yield src.drop_method_call(node)
    if name == "promote_types" and len(node.args) == 2:
        start, end = src.span(node)
        yield start, end, src.operand(node.args[0])


@operator
def drop_mask(node: ast.AST, src: Source) -> Iterator[Edit]:
    """A missing mask: `mask=` / `other=` dropped from `tl.load`/`tl.store`, `a & b` -> `a` or `b`,
    `where(c, a, b)` -> `a` or `b`, `x.masked_fill(m, v)` -> `x`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        for side in ("left", "right"):
            edit = src.keep_one_side(node, "&", side)
            if edit:
                yield edit
    if not isinstance(node, ast.Call):
        return
    name = _called_name(node)
    if name in ("load", "store") and _module_of(node) == "tl":
        for kw in node.keywords:
            if kw.arg in ("mask", "other"):
                earlier = [n for n in [*node.args, *node.keywords] if src.span(n)[1] <= src.span(kw)[0]]
                if earlier:
                    yield src.span(earlier[-1])[1], src.span(kw)[1], ""
    if name == "where" and len(node.args) == 3:
        start, end = src.span(node)
        for branch in node.args[1:]:
            yield start, end, src.operand(branch)
    if name in ("masked_fill", "masked_fill_") and _is_method(node):
        yield src.drop_method_call(node)


COMMUTATIVE = {
    "maximum",
    "minimum",
    "max",
    "min",
    "add",
    "mul",
    "eq",
    "ne",
    "logical_and",
    "logical_or",
    "promote_types",
}
SWAPPABLE = (ast.Name, ast.Attribute, ast.Subscript, ast.Call)


@operator
def swap_arguments(node: ast.AST, src: Source) -> Iterator[Edit]:
    """Two neighbouring positional arguments of the same kind swapped (`f(out, x)` -> `f(x, out)`)."""
    if not isinstance(node, ast.Call) or _called_name(node) in COMMUTATIVE:
        return
    for first, second in zip(node.args, node.args[1:], strict=False):
        if type(first) is type(second) and isinstance(first, SWAPPABLE):
            a, b = src.segment(first), src.segment(second)
            if a != b and "\n" not in a + b:
                (start, middle), (middle_end, end) = src.span(first), src.span(second)
                yield start, end, b + src.text[middle:middle_end] + a


@operator
def drop_contiguous(node: ast.AST, src: Source) -> Iterator[Edit]:
    """`.contiguous()` removed."""
    if isinstance(node, ast.Call) and _called_name(node) == "contiguous" and _is_method(node):
        yield src.drop_method_call(node)


REDUCTION_SWAPS = {"max": "min", "min": "max", "amax": "amin", "amin": "amax", "maximum": "minimum"}
REDUCTION_SWAPS.update({"minimum": "maximum", "argmax": "argmin", "argmin": "argmax", "sum": "mean", "mean": "sum"})


@operator
def swap_reduction(node: ast.AST, src: Source) -> Iterator[Edit]:
    """`max` <-> `min`, `sum` <-> `mean` (methods, `torch.`/`tl.` functions and the builtins max/min)."""
    if not isinstance(node, ast.Call):
        return
    name = _called_name(node)
    if name not in REDUCTION_SWAPS:
        return
    if isinstance(node.func, ast.Name) and name not in ("max", "min"):
        return  # the builtin sum has no mean
    if _module_of(node) == "tl" and name in ("sum", "mean"):
        return  # triton.language has no mean
    end = src.span(node.func)[1]
    yield end - len(name), end, REDUCTION_SWAPS[name]


@operator
def drop_transpose(node: ast.AST, src: Source) -> Iterator[Edit]:
    """A missing transpose: `.T`, `.mT`, `.t()`, `.transpose(a, b)`, `tl.trans(x)` removed."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        start, end = src.span(node)
        dot = src.text.rfind(".", src.span(node.value)[1], end)
        yield dot, end, ""
    if not isinstance(node, ast.Call):
        return
    name = _called_name(node)
    if _module_of(node) and name in ("trans", "transpose") and node.args:
        start, end = src.span(node)
        yield start, end, src.operand(node.args[0])
    elif _is_method(node) and name in ("t", "transpose"):
        yield src.drop_method_call(node)


GUARDS = (ast.Raise, ast.Continue, ast.Break)


def _statement_removal(statement: ast.stmt, src: Source) -> Edit:
    """`pass` in place of a statement, padded with newlines so that the lines below keep their numbers."""
    start, end = src.span(statement)
    return start, end, "pass" + "\n" * (statement.end_lineno - statement.lineno)


@operator
def delete_statement(node: ast.AST, src: Source) -> Iterator[Edit]:
    """A forgotten statement: an augmented assignment, an in-place update (`p.mul_(...)`), an `assert`, the
    `raise`/`continue`/`break` of a guard, or an assignment that updates state inside a loop."""
    if isinstance(node, ast.If) and len(node.body) == 1 and isinstance(node.body[0], GUARDS):
        yield _statement_removal(node.body[0], src)
    elif isinstance(node, (ast.For, ast.While)) and len(node.body) > 1:
        for statement in node.body:
            if isinstance(statement, ast.Assign):
                yield _statement_removal(statement, src)
    elif isinstance(node, (ast.AugAssign, ast.Assert)):
        yield _statement_removal(node, src)
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        name = _called_name(node.value)
        if name.endswith("_") and not name.startswith("_") and _is_method(node.value):
            yield _statement_removal(node, src)


@operator
def drop_operand(node: ast.AST, src: Source) -> Iterator[Edit]:
    """A missing term or factor: `a - b` -> `a` (the max subtraction), `a * s` -> `a` or `s` (a missing scale),
    `a / b` -> `a`, `a + b` -> `a` or `b`."""
    if not isinstance(node, ast.BinOp) or type(node.op) not in ARITHMETIC:
        return
    token = ARITHMETIC[type(node.op)][0]
    sides = ["left"] if isinstance(node.op, (ast.Sub, ast.Div, ast.FloorDiv)) else ["left", "right"]
    for side in sides:
        edit = src.keep_one_side(node, token, side)
        if edit:
            yield edit


# ----------------------------------------------------------------------------------------- generation

PERFORMANCE_ONLY = {"num_warps", "num_stages", "num_ctas", "maxnreg"}


def _left_alone(node: ast.AST) -> bool:
    """f-strings, performance knobs (`num_warps=...`), autotuning configurations and prints."""
    if isinstance(node, ast.keyword):
        return node.arg in PERFORMANCE_ONLY
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id in PERFORMANCE_ONLY for t in node.targets)
    if isinstance(node, ast.Call):
        return _called_name(node) in ("Config", "print", "warn")
    return isinstance(node, ast.JoinedStr)


def _skipped_subtrees(tree: ast.AST) -> set[int]:
    """ids of the nodes that are not mutated: decorators, signatures, annotations, docstrings, messages, and what
    `_left_alone` names."""
    skipped: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            skipped += node.decorator_list
            if not isinstance(node, ast.ClassDef):
                skipped += [node.args, *([node.returns] if node.returns else [])]
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.append(body[0])
        elif isinstance(node, ast.Lambda):
            skipped.append(node.args)
        elif isinstance(node, ast.AnnAssign):
            skipped.append(node.annotation)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            skipped.append(node.exc)
        elif isinstance(node, ast.Assert) and node.msg is not None:
            skipped.append(node.msg)
        elif _left_alone(node):
            skipped.append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):  # `bm, num_warps = 64, 8`
            for target in node.targets:
                if isinstance(target, ast.Tuple) and len(target.elts) == len(node.value.elts):
                    skipped += [
                        value
                        for name, value in zip(target.elts, node.value.elts, strict=True)
                        if isinstance(name, ast.Name) and name.id in PERFORMANCE_ONLY
                    ]
    return {id(inner) for node in skipped for inner in ast.walk(node)}


def _scopes(tree: ast.AST) -> dict[int, str]:
    """id(node) -> the name of the innermost function or class around it (`Class.method`), "<cell>" at top level."""
    scopes: dict[int, str] = {}

    def visit(node: ast.AST, scope: str) -> None:
        scopes[id(node)] = scope
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, child.name if scope == "<cell>" else f"{scope}.{child.name}")
            else:
                visit(child, scope)

    visit(tree, "<cell>")
    return scopes


def given_lines(solution: str, exercise: str) -> set[int]:
    """1-based lines of the solution that the exercise cell already gives the learner (same text, in order)."""
    ours, theirs = solution.splitlines(), exercise.splitlines()
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    return {i + 1 for block in matcher.get_matching_blocks() for i in range(block.a, block.a + block.size)}


def _digest(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest()[:8]


def mutate_source(
    exercise: str, source: str, *, given: set[int] = frozenset(), operators: dict[str, Operator] | None = None
) -> list[AutoMutant]:
    """Every automatic mutant of one solution cell, in source order; edits that start on a `given` line are left
    out, and so are edits that do not parse or that another operator already made."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    src = Source(source)
    skipped, scopes = _skipped_subtrees(tree), _scopes(tree)
    for node in ast.walk(tree):  # `-1` is one number: the change_constant operator must not also edit its `1`
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            node.operand.negated = True
    seen: set[tuple[int, int, str]] = set()
    found: list[tuple[int, int, str, str, str]] = []  # (start, end, after, operator, scope)
    operators = operators or OPERATORS
    for name, func in operators.items():
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            for start, end, after in func(node, src):
                edit = (start, end, after)
                if edit in seen or src.text[start:end] == after or src.line_of(start) in given:
                    continue
                seen.add(edit)
                found.append((start, end, after, name, scopes.get(id(node), "<cell>")))
    mutants, counts = [], {}
    for start, end, after, name, scope in sorted(found, key=lambda f: (f[0], f[1], list(operators).index(f[3]))):
        mutated = source[:start] + after + source[end:]
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        line = src.line_of(start)
        line_text = src.lines[line - 1].rstrip("\n")
        line_start = src.line_starts[line - 1]
        new_line = mutated[line_start:].split("\n", 1)[0]
        base = (exercise, scope, name, line_text.strip(), source[start:end], after)
        counts[base] = counts.get(base, 0) + 1
        ident = f"{exercise}/{scope}/{name}/{_digest(*base, str(counts[base]))}"
        mutants.append(
            AutoMutant(exercise, name, ident, line, start, end, source[start:end], after, line_text, new_line)
        )
    return mutants


def generate(lesson: Lesson, exercises: list[str] | None = None) -> list[AutoMutant]:
    """The automatic mutants of every exercise of a lesson (or of the named ones), exercise by exercise."""
    mutants = []
    for cell in lesson.tagged("solution"):
        if exercises is not None and cell.solution not in exercises:
            continue
        exercise_source = lesson.exercise_cell(cell.solution).source
        mutants += mutate_source(cell.solution, cell.source, given=given_lines(cell.source, exercise_source))
    return mutants
