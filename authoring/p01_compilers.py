"""Source of 01_Hardware_Math_Systems/16_Compilers.ipynb (build with `python -m llm_algo build p01.compilers`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.compilers",
        path="01_Hardware_Math_Systems/16_Compilers.ipynb",
        title_en="Graphs and compilers: torch.fx passes and torch.compile",
        title_zh="计算图与编译器：torch.fx 变换与 torch.compile",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p00.module_basics", "p01.roofline"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 计算图 (computation graph)：`torch.fx.symbolic_trace` 把 `forward` 记录成节点列表，节点有
          `placeholder`、`call_function`、`call_method`、`call_module`、`output` 五种；图变换 (graph pass) 就是改这张表，再 `recompile()`。
        - 模式改写：把 `x * sigmoid(x)`（两种顺序、三种写法）换成一个 `F.silu(x)` 节点；只有 sigmoid 不再被别处使用时才删除它。
        - 恒等折叠 (identity folding)：`x + 0`、`x * 1`、`x - 0`、`x / 1` 可以直接用 `x` 代替，
          但前提是结果的 dtype 与 `x` 相同——整数张量乘 `1.0` 会变成浮点，所以要先用 `ShapeProp` 得到每个节点的 dtype。
        - 死代码消除 (dead code elimination, DCE)：逆序遍历，删掉没有使用者、也没有副作用的节点；输入、输出和原地 (in-place) 操作要保留。
        - `torch.compile` = Dynamo（Python 字节码 → FX 图 + 守卫 guards）+ 后端；自定义后端就是一个函数
          `backend(gm, example_inputs)`，可以记录 Dynamo 交来的每张图，数出图中断 (graph break)。
        {易错点}

        A SwiGLU MLP written in eager PyTorch as `gate * torch.sigmoid(gate) * up` launches three elementwise kernels
        and moves $5N$ elements through memory for the activation alone (sigmoid reads $N$ and writes $N$, the
        multiply reads $2N$ and writes $N$) where a fused `silu` moves $2N$: 2.5× less traffic for a memory-bound
        operation (`p01.roofline`). Compilers find such rewrites on a *graph* of the program. PyTorch 2's compiler
        stack, `torch.compile` (Dynamo capturing FX graphs, Inductor generating fused Triton and C++ kernels), reports
        geometric-mean speed-ups of 2.27× for inference and 1.41× for training over 180+ real models on an A100
        (Ansel et al., *PyTorch 2*, ASPLOS 2024). The graph it works on is the one you can build and rewrite yourself
        with `torch.fx`.

        **You will implement** three graph passes on `torch.fx` graphs (fuse `x * sigmoid(x)` into `F.silu`, fold
        identities with dtypes in view, eliminate dead code) and a `torch.compile` backend that records the graphs
        Dynamo captures. **Graded against** the original modules' outputs on random inputs (bit for bit where the
        rewrite is exact), node counts of the rewritten graphs, `torch.fx`'s own `Graph.eliminate_dead_code`, and
        `torch._dynamo.explain` (graph count, graph breaks, the operations of each graph).
    """
    )
    lesson.md(r"""
        ## 1. A program as a graph

        `torch.fx.symbolic_trace(module)` runs `forward` with *proxies* instead of tensors and records every operation
        into a `Graph`: a list of `Node`s in execution order. Each node has an `op` (what kind of operation), a
        `target` (which one) and `args`/`kwargs` (other nodes or constants):

        | `op` | `target` | example |
        | --- | --- | --- |
        | `placeholder` | the argument's name | `x` |
        | `call_function` | a Python callable | `torch.sigmoid`, `operator.mul` (from `a * b`), `F.silu` |
        | `call_method` | a method name | `"sigmoid"` (from `x.sigmoid()`), `"add_"` |
        | `call_module` | a submodule's path | `"gate"` (an `nn.Linear`) |
        | `output` | `"output"` | what `forward` returns |

        `node.users` is the set of nodes that read a node's value. A pass edits the graph with
        `graph.inserting_before(node)` and `graph.call_function(target, args)` (a new node),
        `node.replace_all_uses_with(other)` (rewire the readers) and `graph.erase_node(node)` (only once it has no
        users), then calls `gm.recompile()` to regenerate `forward`'s Python code from the graph (`gm.code`), and
        `graph.lint()` to check that it still is a well-formed graph. The module below is the lesson's patient: a
        SwiGLU written the long way, with an identity left over from a refactor and a value nobody reads.
    """)
    lesson.setup(r"""
        import operator

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        from torch import fx, nn
        from torch.fx.passes.shape_prop import ShapeProp


        class LongSwiGLU(nn.Module):
            def __init__(self, dim=8, hidden=16):
                super().__init__()
                self.gate, self.up, self.down = nn.Linear(dim, hidden), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

            def forward(self, x):
                gate = self.gate(x)                 # (B, hidden)
                act = gate * torch.sigmoid(gate)    # SiLU, the long way
                scaled = (act * self.up(x)) * 1     # an identity left over from a refactor
                unused = torch.relu(scaled) + 1     # nothing reads it  # noqa: F841
                return self.down(scaled + 0)        # (B, dim)


        def has_side_effects(node):
            # Inputs, the output, calls fx knows to be impure, and in-place operations (add_, copy_) must stay.
            name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
            in_place = node.op in ("call_method", "call_function") and name.endswith("_") and not name.endswith("__")
            return node.is_impure() or in_place


        def call_nodes(gm):
            return [(n.op, n.target if isinstance(n.target, str) else n.target.__name__)
                    for n in gm.graph.nodes if n.op.startswith("call")]


        gm = fx.symbolic_trace(LongSwiGLU())
        print(gm.code)
    """)
    lesson.md(r"""
        ## 2. Exercise `fuse_silu`

        Rewrite, in place, every product of a node `x` with `sigmoid(x)` into one `F.silu(x)` node, and return how
        many products were rewritten. Recognise the product as `operator.mul` (`a * b`), `torch.mul(a, b)` or
        `a.mul(b)` with two arguments and no keyword arguments, in either order, and the sigmoid as
        `torch.sigmoid(x)`, `torch.special.expit(x)` or `x.sigmoid()` (`F.sigmoid(x)` traces as the method). Leave
        `x * sigmoid(y)` alone. Erase the sigmoid only when nothing else reads it. End with `graph.lint()` and
        `gm.recompile()`. `torch.fx.subgraph_rewriter` (a ready-made pattern rewriter) is off limits: write the
        matching yourself.
    """)
    lesson.exercise(
        "fuse_silu",
        r'''
        def fuse_silu(gm: fx.GraphModule) -> int:
            """Rewrite x * sigmoid(x) (any order and spelling) into F.silu(x) in gm, in place; return the count."""
            # TODO: walk over a copy of the node list; find products whose one argument is the sigmoid of the other
            # TODO: insert F.silu(x) before the product, move the product's users to it, erase the product
            # TODO: erase the sigmoid when it has no users left; lint and recompile
            ### BEGIN SOLUTION
            def is_sigmoid_of(node, x):
                if not isinstance(node, fx.Node) or node.args != (x,) or node.kwargs:
                    return False
                return (node.op == "call_function" and node.target in (torch.sigmoid, torch.special.expit)) or (
                    node.op == "call_method" and node.target == "sigmoid")

            fused = 0
            for node in list(gm.graph.nodes):
                is_mul = (node.op == "call_function" and node.target in (operator.mul, torch.mul)) or (
                    node.op == "call_method" and node.target == "mul")
                if not is_mul or len(node.args) != 2 or node.kwargs:
                    continue
                left, right = node.args
                for x, gate in ((left, right), (right, left)):
                    if isinstance(x, fx.Node) and is_sigmoid_of(gate, x):
                        with gm.graph.inserting_before(node):
                            silu = gm.graph.call_function(F.silu, (x,))
                        node.replace_all_uses_with(silu)
                        gm.graph.erase_node(node)
                        if not gate.users:  # the sigmoid was only there for this product
                            gm.graph.erase_node(gate)
                        fused += 1
                        break
            gm.graph.lint()
            gm.recompile()
            return fused
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Identities, and why a compiler needs dtypes

        `x + 0`, `x - 0`, `x * 1` and `x / 1` compute `x`, so a pass can hand `x` itself to their readers and drop
        the node. Almost: PyTorch's type promotion makes `int_tensor * 1.0` a *float* tensor and `bool_tensor + 0` an
        *int64* tensor; dropping those nodes would change the program's dtypes. The graph alone does not know dtypes.
        `torch.fx.passes.shape_prop.ShapeProp(gm).propagate(*example_inputs)` runs the graph once on example inputs
        and stores each node's `tensor_meta` (shape, dtype, ...) in `node.meta["tensor_meta"]`; Dynamo and Inductor
        keep the same information as fake tensors in `node.meta["val"]`. With it, the rule is safe: fold when the
        constant is the operation's neutral element and the result has the same dtype and shape as `x`.

        (One bit still changes: $-0.0 + 0 = +0.0$ in IEEE arithmetic, while the folded graph returns $-0.0$. They
        compare equal; compilers accept it, as they accept reassociating sums under `fast-math`.)
    """)
    lesson.md(r"""
        ## 4. Exercise `fold_identities`

        Fold, in place, every `add`/`sub` of 0 and `mul`/`div` by 1 (`operator.add`, `operator.sub`, `operator.mul`,
        `operator.truediv`, `torch.add`, `torch.sub`, `torch.mul`, `torch.div`, and the methods `"add"`, `"sub"`,
        `"mul"`, `"div"`; two arguments, no keyword arguments; the constant on either side for `add` and `mul`, on the
        right only for `sub` and `div`; a Python `int` or `float`, never a `bool`) whose result has the tensor operand's
        dtype and shape, found by running `ShapeProp` on `example_inputs` first. Return the number of nodes folded;
        lint and recompile.
    """)
    lesson.exercise(
        "fold_identities",
        r'''
        def fold_identities(gm: fx.GraphModule, *example_inputs) -> int:
            """Replace x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 by x where the dtype and shape stay; return the count."""
            # TODO: ShapeProp(gm).propagate(*example_inputs) for node.meta["tensor_meta"]
            # TODO: for each add/sub/mul/div node: the tensor operand and the neutral constant (which sides may hold it)
            # TODO: same dtype and shape as the tensor operand: readers take the operand, the node goes; lint, recompile
            ### BEGIN SOLUTION
            ShapeProp(gm).propagate(*example_inputs)
            neutral = {operator.add: 0, torch.add: 0, "add": 0, operator.sub: 0, torch.sub: 0, "sub": 0,
                       operator.mul: 1, torch.mul: 1, "mul": 1, operator.truediv: 1, torch.div: 1, "div": 1}
            either_side = {operator.add, torch.add, "add", operator.mul, torch.mul, "mul"}
            folded = 0
            for node in list(gm.graph.nodes):
                if node.op not in ("call_function", "call_method") or node.kwargs or len(node.args) != 2:
                    continue
                if (node.op == "call_method") != isinstance(node.target, str) or node.target not in neutral:
                    continue
                left, right = node.args
                orders = [(left, right), (right, left)] if node.target in either_side else [(left, right)]
                for tensor, constant in orders:
                    if not isinstance(tensor, fx.Node) or isinstance(constant, bool):
                        continue
                    if not isinstance(constant, (int, float)) or constant != neutral[node.target]:
                        continue
                    before, after = tensor.meta.get("tensor_meta"), node.meta.get("tensor_meta")
                    if before is None or after is None or (before.dtype, before.shape) != (after.dtype, after.shape):
                        continue  # type promotion or broadcasting: not an identity here
                    node.replace_all_uses_with(tensor)
                    gm.graph.erase_node(node)
                    folded += 1
                    break
            gm.graph.lint()
            gm.recompile()
            return folded
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Dead code elimination

        A node whose value nobody reads (`len(node.users) == 0`) can go, unless running it *does* something: the
        inputs and the output define the graph's interface, and an in-place `x.add_(1)` or a `print` changes the world
        without returning anything anyone reads (the setup's `has_side_effects(node)` says which). Erasing a node can
        make its inputs dead in turn, so walk the graph **backwards**: by the time you reach a node, all its readers
        (which come after it) have already been decided. One backward pass removes whole dead chains; a forward pass
        would need to repeat until nothing changes.
    """)
    lesson.md(r"""
        ## 6. Exercise `eliminate_dead_code`

        Erase, in place, every node without users and without side effects, in one backward pass; lint, recompile and
        return the number of nodes erased. `Graph.eliminate_dead_code` (fx's own pass, the checks' reference) is off
        limits.
    """)
    lesson.exercise(
        "eliminate_dead_code",
        r'''
        def eliminate_dead_code(gm: fx.GraphModule) -> int:
            """Erase the nodes nobody reads that have no side effects (backward pass); return how many."""
            # TODO: walk the nodes in reverse; erase those with no users and no side effects
            # TODO: lint and recompile
            ### BEGIN SOLUTION
            erased = 0
            for node in reversed(list(gm.graph.nodes)):  # readers come later: decide them first
                if not node.users and not has_side_effects(node):
                    gm.graph.erase_node(node)
                    erased += 1
            gm.graph.lint()
            gm.recompile()
            return erased
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The patient, before and after the three passes

        Each box is a node (its op and target), each arrow an argument; left to right is the longest path from the
        input.
    """)
    lesson.code(r"""
        def draw_graph(gm, ax, title):
            nodes = list(gm.graph.nodes)
            level = {}
            for node in nodes:
                level[node] = 1 + max((level[a] for a in node.all_input_nodes), default=-1)
            rows = {}
            position = {}
            for node in nodes:
                row = rows.get(level[node], 0)
                rows[level[node]] = row + 1
                position[node] = (level[node], -row)
            for node in nodes:
                for source in node.all_input_nodes:
                    (x0, y0), (x1, y1) = position[source], position[node]
                    bend = 0.35 if x1 - x0 > 1 and y0 == y1 else 0.0  # an edge skipping a level goes around
                    ax.annotate("", (x1 - 0.28, y1), (x0 + 0.28, y0),
                                arrowprops=dict(arrowstyle="->", color="gray", connectionstyle=f"arc3,rad={bend}"))
            for node in nodes:
                name = node.target if isinstance(node.target, str) else node.target.__name__
                color = {"placeholder": "C2", "output": "C3", "call_module": "C0"}.get(node.op, "C1")
                ax.text(*position[node], name, ha="center", va="center", fontsize=8,
                        bbox=dict(boxstyle="round", fc="white", ec=color))
            ax.set_xlim(-0.7, max(level.values()) + 0.7); ax.set_ylim(-max(rows.values()) + 0.4, 0.6)
            ax.set_title(f"{title}: {len(nodes)} nodes"); ax.axis("off")


        module = LongSwiGLU()
        gm = fx.symbolic_trace(module)
        x = torch.randn(4, 8)
        fig, axes = plt.subplots(2, 1, figsize=(10, 5))
        draw_graph(gm, axes[0], "traced")
        try:
            counts = fuse_silu(gm), fold_identities(gm, x), eliminate_dead_code(gm)
            draw_graph(gm, axes[1], "after fuse_silu, fold_identities, eliminate_dead_code")
            print("rewritten / folded / erased:", counts)
            print("same output:", torch.equal(gm(x), module(x)) or torch.allclose(gm(x), module(x)))
            print(gm.code)
        except NotImplementedError:
            axes[1].axis("off"); axes[1].set_title("(implement the three passes to see the rewritten graph)")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 7. What `torch.compile` sees

        `torch.compile(fn, backend=...)` does not trace with proxies. Dynamo hooks CPython's frame evaluation, reads
        `fn`'s *bytecode*, runs it symbolically, and records every tensor operation into an FX graph, plus *guards*
        (conditions on the inputs, e.g. their shapes and dtypes, under which the graph stays valid). What it cannot
        put in a graph (a `print`, a Python `if` on a tensor's value, `.item()` without
        `capture_scalar_outputs`, a call into C code it does not know) causes a **graph break**: the graph so far
        is compiled, the offending code runs in plain Python, and a new graph starts after it. Every graph goes to the
        *backend*, any function `backend(gm: fx.GraphModule, example_inputs: list[Tensor]) -> callable`: Inductor
        generates kernels from it; `"eager"` just runs it. A backend that appends `gm` to a list and returns
        `gm.forward` records exactly what the compiler receives, at almost no cost.

        Graph breaks matter: each one ends a fusion region, and a model that breaks in every layer compiles into
        hundreds of small graphs. `torch._dynamo.explain(fn)(*args)` reports them, and `TORCH_LOGS=graph_breaks` prints
        them as they happen.
    """)
    lesson.md(r"""
        ## 8. Exercise `capture_graphs`

        Call `torch._dynamo.reset()` (forget earlier compilations, so that every graph reaches your backend), compile
        `fn` with a backend that records each `GraphModule` it receives and returns `gm.forward`, call the compiled
        function once on `args`, and return `(output, graphs)` with the graphs in the order Dynamo produced them.
        `torch._dynamo.explain` is the checks' reference.
    """)
    lesson.exercise(
        "capture_graphs",
        r'''
        def capture_graphs(fn, *args):
            """Run torch.compile(fn) once on args with a backend that records every FX graph; return (output, graphs)."""
            # TODO: a backend(gm, example_inputs) that records gm and returns something that runs it
            # TODO: reset Dynamo, compile fn with that backend, call it once
            ### BEGIN SOLUTION
            graphs = []

            def recording_backend(gm, example_inputs):
                graphs.append(gm)
                return gm.forward  # run the captured graph as it is: no code generation

            torch._dynamo.reset()
            output = torch.compile(fn, backend=recording_backend)(*args)
            return output, graphs
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Three functions, and the graphs Dynamo makes of them
    """)
    lesson.code(r"""
        def straight(x):
            return F.silu(x @ x.T).sum(-1)


        def with_print(x):
            y = x.sin()
            print("a print is a graph break")
            return y.cos()


        def data_dependent(x):
            y = x.sin()
            if y.sum() > 0:  # Python needs the value: the graph ends here
                return y.cos()
            return y * 2


        try:
            for fn in (straight, with_print, data_dependent):
                output, graphs = capture_graphs(fn, torch.randn(4, 4))
                print(f"{fn.__name__}: {len(graphs)} graph(s), {len(graphs) - 1} break(s)")
                for gm in graphs:
                    print("   ", [target for _, target in call_nodes(gm)])
        except NotImplementedError:
            print("implement capture_graphs to see them")
    """)
    lesson.md(r"""
        `data_dependent` becomes two graphs: `sin`, the sum and the comparison up to the branch (Python needs the
        boolean), then one graph for the branch Python took. The other branch is compiled only if a later call takes it
        (a guard fails, Dynamo compiles again).
    """)
    lesson.stop()
    lesson.md(r"""
        ## 9. Reading the solutions

        **`fuse_silu`.** Matching is the work: a pattern has several spellings (`operator.mul`, `torch.mul`,
        `Tensor.mul`; `torch.sigmoid`, `x.sigmoid()`) and two orders, and each must bind the *same* node `x` on both
        sides. Erasing the sigmoid only when its `users` are empty keeps a program that also reads it elsewhere
        correct. The usual mistakes: *one order only*, *erasing a sigmoid that is still read* (fx refuses,
        or the program changes), *fusing `x * sigmoid(y)`*. `torch.fx.subgraph_rewriter.replace_pattern(gm, pattern,
        replacement)` does this matching for any pattern written as a function; Inductor's pattern matcher
        (`torch/_inductor/pattern_matcher.py`) does it on the graphs of `torch.compile`. Inductor would not need this
        particular rewrite: it fuses the sigmoid and the product into one kernel anyway. The rewrite pays in eager
        mode and for backends that map `silu` to a library call.

        **`fold_identities`.** The dtype test is the lesson: the mistakes are *folding `int_tensor * 1.0`* (the
        output becomes an integer tensor), *folding `0 - x`* (only `sub` with 0 on the right is an identity), and
        *folding `x * 0`*. Production compilers keep a fake tensor per node (`node.meta["val"]`) so that every pass
        knows dtypes, shapes and strides without running anything.

        **`eliminate_dead_code`.** The backward walk and the side-effect test: *walking forward* leaves dead chains
        behind, *ignoring side effects* erases an in-place update or a parameter's placeholder. fx's own
        `Graph.eliminate_dead_code` is this loop (with `Node.is_impure`, which does not know in-place methods: pass
        `is_impure_node=` to it when a graph mutates), and `GraphModule.delete_all_unused_submodules()` then drops
        the modules nobody calls.

        **`capture_graphs`.** A backend is just a function, which is why the ecosystem plugs in here (Inductor,
        TensorRT, OpenXLA, ONNX export). The mistakes: *compiling with `fullgraph=True`* (a graph break then raises
        instead of splitting), *calling `fn` itself* (nothing compiled, no graphs), *keeping only the first graph*.
        What the backend receives is a forward graph of ATen-level or torch-level calls; AOTAutograd then traces the
        backward into a joint graph and lowers both to ATen operators before Inductor schedules and fuses them.
    """)
    lesson.mistakes()
    return lesson
