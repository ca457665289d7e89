"""Realistic wrong versions of the p01.compilers solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "fuse_silu",
        "one_order_only",
        "matches x * sigmoid(x) but not sigmoid(x) * x",
        [("for x, gate in ((left, right), (right, left)):", "for x, gate in ((left, right),):")],
        mistake_zh="能匹配 x * sigmoid(x)，却匹配不到 sigmoid(x) * x",
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
        mistake_zh="把 x * sigmoid(y) 也融合了：从不检查 sigmoid 读的是否是另一个因子",
    ),
    Mutant(
        "fuse_silu",
        "always_erases_sigmoid",
        "erases the sigmoid even when another node still reads it",
        [("if not gate.users:  # the sigmoid", "if True:  # the sigmoid")],
        mistake_zh="即使还有别的节点读取 sigmoid，也把它删掉",
    ),
    Mutant(
        "fuse_silu",
        "method_spelling_missed",
        "recognises torch.sigmoid but not x.sigmoid() (nor F.sigmoid, which traces as the method)",
        [('node.op == "call_method" and node.target == "sigmoid")', "False)")],
        mistake_zh="认得 torch.sigmoid，却认不出 x.sigmoid()（F.sigmoid 追踪出来也是方法调用）",
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
        mistake_zh="折叠时不看数据类型：int * 1.0 和 bool + 0 丢了类型提升",
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
        mistake_zh="把 0 - x 和 1 / x 也当成恒等式",
    ),
    Mutant(
        "fold_identities",
        "bool_is_a_number",
        "accepts True as the constant 1 (Python's bool is an int)",
        [("if not isinstance(tensor, fx.Node) or isinstance(constant, bool):", "if not isinstance(tensor, fx.Node):")],
        mistake_zh="把 True 当作常数 1（Python 的 bool 是 int）",
    ),
    Mutant(
        "eliminate_dead_code",
        "forward_pass",
        "walks the graph forwards: a dead chain loses only its last node",
        [("for node in reversed(list(gm.graph.nodes)):", "for node in list(gm.graph.nodes):")],
        mistake_zh="正向遍历计算图：一条死链只删掉最后一个节点",
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
        mistake_zh="只保留输入和输出：删掉了原地更新和 assert",
    ),
    Mutant(
        "eliminate_dead_code",
        "no_recompile",
        "edits the graph but never regenerates the module's code",
        [("    gm.recompile()\n    return erased", "    return erased")],
        mistake_zh="改了计算图却从不重新生成模块的代码",
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
        mistake_zh="用 fullgraph=True 编译：遇到图中断就报错，而不是开始一张新图",
    ),
    Mutant(
        "capture_graphs",
        "eager_call",
        "calls fn itself: nothing is compiled, no graph recorded",
        [("output = torch.compile(fn, backend=recording_backend)(*args)", "output = fn(*args)")],
        mistake_zh="直接调用 fn：什么都没编译，也没记录任何图",
    ),
    Mutant(
        "capture_graphs",
        "first_graph_only",
        "keeps only the first graph",
        [("return output, graphs", "return output, graphs[:1]")],
        mistake_zh="只保留第一张图",
    ),
]
