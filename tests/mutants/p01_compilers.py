"""Realistic wrong versions of the p01.compilers solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "fuse_silu",
        "one_order_only",
        "matches x * sigmoid(x) but not sigmoid(x) * x",
        [("for x, gate in ((left, right), (right, left)):", "for x, gate in ((left, right),):")],
    ),
    Mutant(
        "fuse_silu",
        "any_sigmoid",
        "fuses x * sigmoid(y) too: never checks that the sigmoid reads the other factor",
        [
            (
                "if not isinstance(node, fx.Node) or node.args != (x,) or node.kwargs:",
                "if not isinstance(node, fx.Node) or node.kwargs:",
            )
        ],
    ),
    Mutant(
        "fuse_silu",
        "always_erases_sigmoid",
        "erases the sigmoid even when another node still reads it",
        [("if not gate.users:  # the sigmoid", "if True:  # the sigmoid")],
    ),
    Mutant(
        "fuse_silu",
        "method_spelling_missed",
        "recognises torch.sigmoid but not x.sigmoid() (nor F.sigmoid, which traces as the method)",
        [('node.op == "call_method" and node.target == "sigmoid")', "False)")],
    ),
    Mutant(
        "fold_identities",
        "no_dtype_check",
        "folds without looking at dtypes: int * 1.0 and bool + 0 lose their promotion",
        [
            (
                "(before.dtype, before.shape) != (after.dtype, after.shape)",
                "False",
            )
        ],
    ),
    Mutant(
        "fold_identities",
        "sub_either_side",
        "treats 0 - x and 1 / x as identities too",
        [
            (
                "orders = [(left, right), (right, left)] if node.target in either_side else [(left, right)]",
                "orders = [(left, right), (right, left)]",
            )
        ],
    ),
    Mutant(
        "fold_identities",
        "bool_is_a_number",
        "accepts True as the constant 1 (Python's bool is an int)",
        [("if not isinstance(tensor, fx.Node) or isinstance(constant, bool):", "if not isinstance(tensor, fx.Node):")],
    ),
    Mutant(
        "eliminate_dead_code",
        "forward_pass",
        "walks the graph forwards: a dead chain loses only its last node",
        [("for node in reversed(list(gm.graph.nodes)):", "for node in list(gm.graph.nodes):")],
    ),
    Mutant(
        "eliminate_dead_code",
        "ignores_side_effects",
        "keeps only the inputs and the output: erases in-place updates and asserts",
        [
            (
                "if not node.users and not has_side_effects(node):",
                'if not node.users and node.op not in ("placeholder", "output"):',
            )
        ],
    ),
    Mutant(
        "eliminate_dead_code",
        "no_recompile",
        "edits the graph but never regenerates the module's code",
        [("    gm.recompile()\n    return erased", "    return erased")],
    ),
    Mutant(
        "capture_graphs",
        "fullgraph",
        "compiles with fullgraph=True: a graph break raises instead of starting a new graph",
        [
            (
                "output = torch.compile(fn, backend=recording_backend)(*args)",
                "output = torch.compile(fn, backend=recording_backend, fullgraph=True)(*args)",
            )
        ],
    ),
    Mutant(
        "capture_graphs",
        "eager_call",
        "calls fn itself: nothing is compiled, no graph recorded",
        [("output = torch.compile(fn, backend=recording_backend)(*args)", "output = fn(*args)")],
    ),
    Mutant(
        "capture_graphs",
        "first_graph_only",
        "keeps only the first graph",
        [("return output, graphs", "return output, graphs[:1]")],
    ),
]
