"""Checks for p01.compilers. References: the original modules' outputs on random inputs (float64 oracles; bit for bit
where a rewrite is exact), `torch.fx.subgraph_rewriter.replace_pattern` for the SiLU fusion, node lists written out
by hand for the identities (with the dtypes PyTorch's type promotion gives), `torch.fx.Graph.eliminate_dead_code`
with an impurity rule that knows in-place methods, and `torch._dynamo.explain` for the graphs `torch.compile`
captures (count, breaks, the operations of each)."""

import torch
import torch.nn.functional as F
from torch import fx, nn

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, reference_only

checks = Checks("p01.compilers")
checks.restrict(
    "fuse_silu",
    forbid=("torch.fx.subgraph_rewriter",),
    instead="match the nodes yourself (replace_pattern is the checks' reference)",
)
checks.restrict(
    "eliminate_dead_code",
    forbid=(torch.fx.Graph.eliminate_dead_code,),
    instead="walk the nodes backwards yourself (fx's own pass is the checks' reference)",
)


def call_nodes(gm: fx.GraphModule) -> list[tuple[str, str]]:
    """(op, target name) of every call node, in graph order."""
    return [
        (n.op, n.target if isinstance(n.target, str) else n.target.__name__)
        for n in gm.graph.nodes
        if n.op.startswith("call")
    ]


def traced(module: nn.Module) -> fx.GraphModule:
    return fx.symbolic_trace(module)


def expect_lints(gm, label: str, hint: str) -> None:
    try:
        gm.graph.lint()
        problem = None
    except Exception as error:  # noqa: BLE001 - any lint error is the learner's
        problem = f"{type(error).__name__}: {error}"
    expect(
        problem is None,
        "the rewritten graph is not well formed",
        input=label,
        expected="graph.lint() passes",
        got=str(problem)[:200],
        hint=hint,
    )


def expect_count(got, want: int, label: str, what: str, hint: str) -> None:
    expect(
        isinstance(got, int) and not isinstance(got, bool) and got == want,
        f"wrong number of {what}",
        input=label,
        expected=str(want),
        got=repr(got),
        hint=hint,
    )


def expect_nodes(gm, want: list, label: str, hint: str) -> None:
    got = call_nodes(gm)
    expect(
        got == want,
        "the rewritten graph has other nodes than expected",
        input=label,
        expected=str(want)[:300],
        got=str(got)[:300],
        hint=hint,
    )


# ------------------------------------------------------------------------------------------ fuse_silu

HINT_FUSE = (
    "a product (operator.mul, torch.mul, Tensor.mul) of a node x and sigmoid(x) (torch.sigmoid, torch.special.expit, "
    "x.sigmoid()) in either order becomes F.silu(x); erase the sigmoid only if nothing else reads it"
)


class Spellings(nn.Module):
    """Four ways to write SiLU, and a product that is not one."""

    def forward(self, a, b):
        one = torch.sigmoid(a) * a
        two = torch.mul(b, b.sigmoid())
        total, difference = a + b, b - a
        three = total.mul(torch.special.expit(total))
        four = F.sigmoid(difference) * difference
        not_silu = a * torch.sigmoid(b)
        return one + two + three + four + not_silu


class Plain(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class SharedSigmoid(nn.Module):
    """The sigmoid is also read by the sum: it must stay. Then a sigmoid read by two products."""

    def forward(self, x, y):
        gate = torch.sigmoid(x)
        kept = x * gate + gate
        twice = y.sigmoid()
        return kept, (y * twice) + (twice * y)


def silu_by_replace_pattern(module: nn.Module) -> fx.GraphModule:
    """fx's own rewriter, one pattern per spelling and order."""
    from torch.fx import subgraph_rewriter

    gm = traced(module)
    patterns = [
        lambda x: x * torch.sigmoid(x),
        lambda x: torch.sigmoid(x) * x,
        lambda x: torch.mul(x, x.sigmoid()),
        lambda x: x.mul(torch.special.expit(x)),
        lambda x: x.sigmoid() * x,
    ]
    for pattern in patterns:
        subgraph_rewriter.replace_pattern(gm, pattern, lambda x: F.silu(x))
    return gm


def run_fused(ex, module: nn.Module, inputs: tuple, label: str):
    gm = traced(module)
    fused = ex.fuse_silu(gm)
    expect_lints(gm, label, HINT_FUSE)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        args = tuple(t.to(dtype) for t in inputs)
        oracle = module(*(t.double() for t in inputs))
        got, baseline = gm(*args), module(*args)
        pairs = zip(got, oracle, baseline, strict=True) if isinstance(oracle, tuple) else [(got, oracle, baseline)]
        for g, o, b in pairs:
            expect_close(g, o, input=f"{label}, {describe(x=args[0])}", baseline=b, dtype=dtype, hint=HINT_FUSE)
    return gm, fused


@checks("fuse_silu")
def plain_silu(ex):
    """x * torch.sigmoid(x): one F.silu node left, the same output as the module"""
    gm, fused = run_fused(ex, Plain(), (torch.randn(3, 7),), "x * torch.sigmoid(x)")
    expect_count(fused, 1, "x * torch.sigmoid(x)", "products rewritten", HINT_FUSE)
    expect_nodes(gm, [("call_function", "silu")], "x * torch.sigmoid(x)", HINT_FUSE)


@checks("fuse_silu")
def every_spelling_like_replace_pattern(ex):
    """torch.sigmoid / Tensor.sigmoid / expit / F.sigmoid, mul in both orders; a * sigmoid(b) left alone"""
    module = Spellings()
    gm, fused = run_fused(ex, module, (torch.randn(5, 4), torch.randn(5, 4)), "Spellings (4 SiLUs and a*sigmoid(b))")
    with reference_only():
        want = silu_by_replace_pattern(module)
    expect_count(fused, 4, "Spellings", "products rewritten", HINT_FUSE)
    got, expected = sorted(call_nodes(gm)), sorted(call_nodes(want))  # replace_pattern places nodes its own way
    expect(
        got == expected,
        "other nodes remain than after torch.fx.subgraph_rewriter.replace_pattern",
        input="Spellings (4 SiLUs and a*sigmoid(b))",
        expected=str(expected)[:300],
        got=str(got)[:300],
        hint=HINT_FUSE,
    )


@checks("fuse_silu")
def shared_sigmoids(ex):
    """a sigmoid also read elsewhere stays; one read by two products goes once both are rewritten"""
    gm, fused = run_fused(ex, SharedSigmoid(), (torch.randn(6), torch.randn(6)), "x*sigmoid(x) + sigmoid(x); y*s + s*y")
    expect_count(fused, 3, "SharedSigmoid", "products rewritten", HINT_FUSE)
    want = [
        ("call_function", "sigmoid"),
        ("call_function", "silu"),
        ("call_function", "add"),
        ("call_function", "silu"),
        ("call_function", "silu"),
        ("call_function", "add"),
    ]
    expect_nodes(gm, want, "x*sigmoid(x) + sigmoid(x); y*s + s*y", HINT_FUSE)


# ------------------------------------------------------------------------------------------ fold_identities

HINT_FOLD = (
    "x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 (int or float constants, not bool) fold to x only when "
    "node.meta['tensor_meta'] has x's dtype and shape (ShapeProp first); 0 - x, 1 / x, x * 0 are not identities"
)


class Identities(nn.Module):
    """Fourteen identities, written every way, then look-alikes that are not identities."""

    def forward(self, x):
        a = x + 0
        b = 0 + a
        c = b * 1
        d = 1.0 * c
        e = d - 0
        f = e / 1
        g = torch.add(f, 0)
        h = g.mul(1)
        i = h.div(1.0)
        j = torch.sub(i, 0)
        k = j.add(0)
        m = k.sub(0)
        n = torch.mul(m, 1)
        y = torch.div(n, 1)
        operators = (y + 1) + (0 - y) + (y * 0) + (1 / (y + 2)) + (y - 1)
        spelled = y.add(1) + y.sub(1) + torch.mul(y, 0) + torch.mul(y, 2) + torch.div(y, 2) + y.mul(0) + y.div(2)
        return y, operators, spelled, torch.div(y, 1, rounding_mode="floor"), torch.div(y, 0)


class Promotions(nn.Module):
    """Identities that change a dtype (int * 1.0, bool + 0) must stay; the same-dtype ones fold."""

    def forward(self, ints, flags, floats):
        return ints * 1.0, ints + 0, flags + 0, flags * True, floats * 1.0, floats.div(1), ints // 1


def run_folded(ex, module: nn.Module, inputs: tuple, label: str) -> tuple:
    gm = traced(module)
    folded = ex.fold_identities(gm, *inputs)
    expect_lints(gm, label, HINT_FOLD)
    got, want = gm(*inputs), module(*inputs)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        expect_tensor(g, shape=w.shape, dtype=w.dtype, input=f"{label}, output {index}")
        expect(
            torch.equal(g, w),
            f"output {index} changed",
            input=f"{label}, {describe(x=inputs[0])}",
            expected=str(w.flatten()[:6].tolist()),
            got=str(g.flatten()[:6].tolist()),
            hint=HINT_FOLD,
        )
    return gm, folded


@checks("fold_identities")
def every_spelling_folds(ex):
    """x+0, 0+x, *1, 1.0*, -0, /1 as operators, torch functions and methods fold; y+1, 0-y, y*0, 1/y, floor div stay"""
    gm, folded = run_folded(ex, Identities(), (torch.randn(3, 5),), "Identities")
    expect_count(folded, 14, "Identities", "nodes folded", HINT_FOLD)
    want = call_nodes(traced(Identities()))[14:]  # the fourteen identities come first in the trace
    expect_nodes(gm, want, "Identities: only the look-alikes (y + 1, 0 - y, torch.mul(y, 0), ...) stay", HINT_FOLD)


@checks("fold_identities")
def type_promotion_blocks_folding(ex):
    """int * 1.0 -> float and bool + 0 -> int64 stay; int + 0, float * 1.0, float.div(1) fold; dtypes unchanged"""
    inputs = (torch.randint(-5, 5, (4, 3)), torch.rand(4, 3) > 0.5, torch.randn(4, 3, dtype=torch.float16))
    gm, folded = run_folded(ex, Promotions(), inputs, "Promotions (int64, bool, float16 inputs)")
    expect_count(folded, 3, "Promotions", "nodes folded", HINT_FOLD)
    want = [("call_function", "mul"), ("call_function", "add"), ("call_function", "mul"), ("call_function", "floordiv")]
    expect_nodes(gm, want, "Promotions: ints * 1.0, flags + 0, flags * True, ints // 1 stay", HINT_FOLD)


class Broadcast(nn.Module):
    def forward(self, x, zeros):
        return x + 0, zeros + x, x * torch.ones(1)


@checks("fold_identities")
def only_python_constants_and_no_broadcast(ex):
    """a zeros tensor is not a Python constant (and broadcasts), nor is torch.ones(1): only x + 0 folds"""
    inputs = (torch.randn(2, 3), torch.zeros(4, 2, 3))
    gm, folded = run_folded(ex, Broadcast(), inputs, "x + 0, zeros(4,2,3) + x, x * torch.ones(1)")
    expect_count(folded, 1, "Broadcast", "nodes folded", HINT_FOLD)
    want = [("call_function", "add"), ("call_function", "mul")]  # torch.ones(1) was traced into a constant
    expect_nodes(gm, want, "x + 0, zeros(4,2,3) + x, x * torch.ones(1)", HINT_FOLD)


# ------------------------------------------------------------------------------------------ eliminate_dead_code

HINT_DCE = (
    "walk reversed(list(gm.graph.nodes)); erase a node when it has no users and has_side_effects(node) is False "
    "(placeholders, the output, torch._assert and in-place methods stay)"
)


def impure(node: fx.Node) -> bool:
    """fx's own rule, plus in-place calls (a trailing underscore), which fx's rule does not know."""
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function":
        name = getattr(node.target, "__name__", "")
    else:
        name = ""
    return node.is_impure() or (name.endswith("_") and not name.endswith("__"))


class DeadChains(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, ignored, counter):
        a = x.sin()
        dead = torch.relu(self.unused(a)).exp().sum()  # noqa: F841 - a chain of four dead nodes, a module among them
        counter.add_(1)  # in place: read by nobody, but it must run
        torch._assert(a.abs().max() <= 1, "sin is bounded")  # impure for fx
        b = (a * 2).cos()  # noqa: F841 - a dead pair
        return self.used(a) + x


class NothingDead(nn.Module):
    def forward(self, x):
        return x.sin() * x.cos()


def run_dce(ex, module: nn.Module, inputs: tuple, label: str):
    gm, reference = traced(module), traced(module)
    with reference_only():
        want_erased = len(reference.graph.nodes)
        reference.graph.eliminate_dead_code(is_impure_node=impure)
        want_erased -= len(reference.graph.nodes)
    erased = ex.eliminate_dead_code(gm)
    expect_lints(gm, label, HINT_DCE)
    expect_count(erased, want_erased, label, "nodes erased", HINT_DCE)
    got = [(n.op, n.name) for n in gm.graph.nodes]
    want = [(n.op, n.name) for n in reference.graph.nodes]
    expect(
        got == want,
        "other nodes remain than after torch.fx's eliminate_dead_code",
        input=label,
        expected=str(want)[:300],
        got=str(got)[:300],
        hint=HINT_DCE,
    )
    copies = [t.clone() for t in inputs]
    out, want_out = gm(*inputs), module(*copies)
    expect(
        torch.equal(out, want_out) and all(torch.equal(a, b) for a, b in zip(inputs, copies, strict=True)),
        "the program changed (its output or an input it updates in place)",
        input=label,
        expected="the same output, and the same in-place updates",
        got="a difference",
        hint=HINT_DCE,
    )
    return gm


@checks("eliminate_dead_code")
def dead_chains_against_fx(ex):
    """a dead chain through a module, a dead pair, an unused input, an in-place update, torch._assert: as fx does"""
    run_dce(ex, DeadChains(), (torch.randn(3, 4), torch.randn(2), torch.zeros(1)), "DeadChains")


@checks("eliminate_dead_code")
def nothing_to_remove(ex):
    """a graph without dead code is left as it is (0 erased)"""
    gm = run_dce(ex, NothingDead(), (torch.randn(5),), "x.sin() * x.cos()")
    expect_nodes(
        gm, [("call_method", "sin"), ("call_method", "cos"), ("call_function", "mul")], "x.sin() * x.cos()", HINT_DCE
    )


class Patient(nn.Module):
    """The lesson's LongSwiGLU, after its identities are gone: the relu and the + 1 are dead."""

    def __init__(self):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        gate = self.gate(x)
        scaled = gate * torch.sigmoid(gate) * self.up(x)
        unused = torch.relu(scaled) + 1  # noqa: F841
        return self.down(scaled)


@checks("eliminate_dead_code")
def the_lessons_patient(ex):
    """the SwiGLU of the lesson: relu and + 1 erased (2 nodes), the output unchanged"""
    gm = run_dce(ex, Patient(), (torch.randn(4, 8),), "LongSwiGLU without its identities")
    expect(
        "relu" not in gm.code,
        "the dead relu is still in the generated code",
        input="LongSwiGLU",
        expected="gm.code without relu",
        got=gm.code[:300],
        hint="call gm.recompile() after editing the graph",
    )


# ------------------------------------------------------------------------------------------ capture_graphs

HINT_CAPTURE = (
    "torch._dynamo.reset(); a backend(gm, example_inputs) that appends gm and returns gm.forward; "
    "torch.compile(fn, backend=...) (not fullgraph) called once on args"
)


def straight(x):
    return F.silu(x @ x.T).sum(-1)


def with_print(x):
    y = x.sin()
    print("a print is a graph break")
    return y.cos()


def data_dependent(x):
    y = x.sin()
    if y.sum() > 0:
        return y.cos()
    return y * 2


def explained(fn, args) -> tuple:
    import torch._dynamo

    with reference_only():
        torch._dynamo.reset()
        report = torch._dynamo.explain(fn)(*args)
        torch._dynamo.reset()
    return report.graph_count, report.graph_break_count, [call_nodes(gm) for gm in report.graphs]


def run_capture(ex, fn, args: tuple, label: str) -> None:
    want_count, want_breaks, want_ops = explained(fn, args)
    result = ex.capture_graphs(fn, *args)
    expect(
        isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], list),
        "not a pair (output, list of graphs)",
        input=label,
        expected="(output, [GraphModule, ...])",
        got=repr(type(result)),
        hint=HINT_CAPTURE,
    )
    output, graphs = result
    expect_close(output, fn(*(a.double() for a in args)), input=label, baseline=fn(*args), hint=HINT_CAPTURE)
    expect(
        len(graphs) == want_count and all(isinstance(g, fx.GraphModule) for g in graphs),
        "wrong number of graphs",
        input=label,
        expected=f"{want_count} GraphModule(s), {want_breaks} graph break(s), as torch._dynamo.explain reports",
        got=f"{len(graphs)}: {[type(g).__name__ for g in graphs]}",
        hint=HINT_CAPTURE,
    )
    got_ops = [call_nodes(g) for g in graphs]
    expect(
        got_ops == want_ops,
        "the graphs hold other operations than torch._dynamo.explain's",
        input=label,
        expected=str(want_ops)[:300],
        got=str(got_ops)[:300],
        hint=HINT_CAPTURE,
    )


@checks("capture_graphs")
def one_graph_without_breaks(ex):
    """matmul, silu, sum: one graph with explain's operations, the eager output"""
    run_capture(ex, straight, (torch.randn(4, 3),), "straight(x) = silu(x @ x.T).sum(-1)")


@checks("capture_graphs")
def a_print_breaks_the_graph(ex):
    """sin, print, cos: two graphs (one break), as torch._dynamo.explain reports"""
    run_capture(ex, with_print, (torch.randn(5),), "with_print: sin, print, cos")


@checks("capture_graphs")
def a_data_dependent_branch(ex):
    """if y.sum() > 0: a graph up to the branch and one for the branch taken, either way; a fresh capture each time"""
    x = torch.randn(6)
    run_capture(ex, data_dependent, (x.abs() + 0.5,), "data_dependent, sum(sin(x)) > 0")
    run_capture(ex, data_dependent, (-(x.abs() + 0.5),), "data_dependent, sum(sin(x)) < 0")
