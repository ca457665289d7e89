"""Source of 01_Hardware_Math_Systems/01_Matrix_Calculus.ipynb (build with `python -m llm_algo build p01.matrix_calculus`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.matrix_calculus",
        path="01_Hardware_Math_Systems/01_Matrix_Calculus.ipynb",
        title_en="Matrix calculus and backprop",
        title_zh="矩阵微积分与反向传播",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p00.autograd"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 反向传播 (backpropagation) 的每一步都是一个向量-雅可比积 (VJP)：给定输出的梯度 $\bar y$，求 $\bar x = J^\top \bar y$，
          从不构造雅可比矩阵 $J$ 本身。
        - 广播 (broadcasting) 的反向是求和：被扩展的维度（前面新增的维度、大小为 1 的维度）要把梯度加回去，形状还原成输入的形状。
        - 归约 (reduction) 的反向是扩展：`sum` 原样复制梯度，`mean` 再除以元素个数，`amax` 只给最大值，并列时平分。
        - 矩阵乘 $Y = AB$：$\bar A = \bar Y B^\top$，$\bar B = A^\top \bar Y$；批量维度被广播时还要对其求和。
        - softmax：$\bar x = y \odot (\bar y - \langle \bar y, y \rangle)$，只需保存输出 $y$。
        - 前向模式 (JVP) 一次得到 $J$ 的一列，反向模式 (VJP) 一次得到一行：标量损失只有一行，所以训练用反向模式。
        {易错点}

        Every `loss.backward()` in a training run is a chain of small rules, one per operation, each of which turns
        the gradient of an output into the gradient of its inputs. A Llama layer's backward is made of exactly the
        rules of this lesson: broadcasting (the RMSNorm weight, the bias, the residual), reductions (the mean of
        squares, the loss), matrix products (the seven projections) and softmax (attention). Writing them by hand is
        what every fused kernel does (FlashAttention's backward, Liger-Kernel's fused cross-entropy, Apex's LayerNorm),
        and the mistakes are always the same few: a broadcast dimension that was not summed, a `keepdim` lost, a
        transpose on the wrong side.

        **You will implement**, without autograd: the gradient of a broadcast, the gradient of `sum`/`mean`/`amax`
        over any dims, the gradient of a batched, broadcasting matmul and of softmax; then a full Jacobian by forward
        mode (`torch.func.jvp`) and by reverse mode (`torch.func.vjp`). **Graded against** `torch.autograd.grad` in
        float64 (float32 and float16 with the package's tolerance policy), closed-form Jacobians, and properties that
        any correct gradient keeps.
    """
    )
    lesson.md(r"""
        ## 1. The one rule: vector-Jacobian products

        For $y = f(x)$ with $x \in \mathbb{R}^n$, $y \in \mathbb{R}^m$ and a scalar loss $\ell$, the chain rule gives

        $$
        \bar x_j = \frac{\partial \ell}{\partial x_j} = \sum_i \frac{\partial \ell}{\partial y_i}
        \frac{\partial y_i}{\partial x_j} \qquad\Longleftrightarrow\qquad \bar x = J^\top \bar y, \quad
        J \in \mathbb{R}^{m \times n}.
        $$

        Tensors change nothing: flatten them, and $\bar x$ always has the shape of $x$. The Jacobian of a
        $(4096 \times 4096)$ matmul's output with respect to its input has $2^{48}$ entries; nobody builds it. Each
        operation's backward computes $J^\top \bar y$ directly from the structure of $J$, in about the cost of the
        forward. That is what `torch.autograd` stores per op (`grad_fn`), and what you will write now.

        ## 2. Broadcasting: the backward is a sum

        `x + b` with `x` of shape `(B, T, d)` and `b` of shape `(d,)` uses each `b[k]` in $B \cdot T$ places. A value used
        in several places receives the sum of their gradients, so $\bar b_k = \sum_{i,j} \bar y_{ijk}$. The rules of
        broadcasting (NumPy's, which PyTorch follows) align shapes from the right; an input dimension is either equal
        to the output's or 1 (stretched), and missing leading dimensions are added. The gradient therefore

        1. sums over the leading dimensions that the input does not have;
        2. sums, *keeping the dimension*, over every dimension where the input has size 1 and the output does not.

        Autograd does exactly this after every broadcasting op (`Tensor.sum_to_size`, `at::sum_to` in its C++ code).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.func
    """)
    lesson.exercise(
        "unbroadcast",
        r'''
        def unbroadcast(grad: torch.Tensor, shape) -> torch.Tensor:
            """Gradient of an input of `shape` from `grad`, the gradient of the broadcast result (grad.shape).

            Raise ValueError when `shape` does not broadcast to grad.shape."""
            # TODO: refuse a shape that does not broadcast to grad.shape
            # TODO: sum over the leading dims the input does not have
            # TODO: sum (keeping the dim) over the dims where the input has size 1
            ### BEGIN SOLUTION
            shape = tuple(shape)
            extra = grad.dim() - len(shape)
            if extra < 0 or any(s not in (1, g) for s, g in zip(shape, grad.shape[extra:])):
                raise ValueError(f"shape {shape} does not broadcast to the gradient's {tuple(grad.shape)}")
            if extra:  # careful: sum(dim=()) would sum over every dim
                grad = grad.sum(dim=tuple(range(extra)))
            stretched = tuple(i for i, s in enumerate(shape) if s == 1)  # size 1 in the input, maybe more in grad
            if stretched:
                grad = grad.sum(dim=stretched, keepdim=True)
            return grad
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Reductions: the backward is a broadcast

        A reduction is the mirror image: $y = \sum_{k} x_{\dots k \dots}$ uses every $x$ once with weight 1, so each
        $\bar x$ is the $\bar y$ of its group, copied back over the reduced dimensions. For
        $y = \frac{1}{N}\sum_k x_k$ it is $\bar y / N$ with $N$ the number of elements reduced. For $y = \max_k x_k$ the
        derivative is 1 for the winner and 0 for the others; with ties, `torch.amax` shares $\bar y$ equally among the
        tied maxima (a subgradient, and the symmetric choice), while `torch.max(x, dim)` gives all of it to the one index
        it returns. With `keepdim=False` the reduced dimensions are gone from $\bar y$: put them back as size 1
        (`unsqueeze`, in increasing order) before broadcasting.
    """)
    lesson.exercise(
        "reduction_vjp",
        r'''
        def reduction_vjp(x: torch.Tensor, grad_out: torch.Tensor, op: str, dim, keepdim: bool) -> torch.Tensor:
            """Gradient of x for y = x.sum/mean/amax(dim=dim, keepdim=keepdim) given grad_out (y's shape).

            op: "sum", "mean" or "amax" (ValueError otherwise); dim: an int or a tuple of ints, negative allowed.
            Ties of amax share the gradient equally. Returns a tensor of x's shape."""
            # TODO: refuse an unknown op; normalise dim to a tuple of non-negative ints
            # TODO: without keepdim, put the reduced dims back as size 1
            # TODO: sum: copy; mean: copy / count; amax: only the (tied) maxima, shared
            ### BEGIN SOLUTION
            if op not in ("sum", "mean", "amax"):
                raise ValueError(f"unknown reduction {op!r}")
            dims = sorted(d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim))
            if not keepdim:
                for d in dims:  # increasing order: each index is already right for the growing tensor
                    grad_out = grad_out.unsqueeze(d)
            if op == "sum":
                return grad_out.expand_as(x).clone()
            if op == "mean":
                count = math.prod(x.shape[d] for d in dims)
                return grad_out.expand_as(x) / count
            winners = x == x.amax(dim=dims, keepdim=True)  # bool; arithmetic promotes it
            return winners * grad_out / winners.sum(dim=dims, keepdim=True)  # ties share the gradient
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Matrix products

        For $Y = AB$ with $A: (M, K)$, $B: (K, N)$, $Y_{mn} = \sum_k A_{mk} B_{kn}$, so
        $\partial \ell / \partial A_{mk} = \sum_n \bar Y_{mn} B_{kn}$:

        $$
        \bar A = \bar Y B^\top \;(M, N)(N, K) \to (M, K), \qquad \bar B = A^\top \bar Y \;(K, M)(M, N) \to (K, N).
        $$

        The shapes leave only one way to write each, a good way to remember them. Each costs $2MNK$ FLOPs, as much
        as the forward: the origin of "the backward costs twice the forward" and of $6ND$ (`p01.params_and_flops`).

        `torch.matmul` broadcasts the batch dimensions `(...)` of $A: (\dots, M, K)$ and $B: (\dots, K, N)$: a
        weight $W: (K, N)$ multiplied by activations $(B, T, K)$ is used by every batch element, so its gradient sums
        over them. Compute the products in the broadcast batch shape, then reduce each to its input's shape with your
        `unbroadcast`. (For $x W^\top$ in `nn.Linear`, $\bar W = \bar Y^\top x$ summed over all tokens: the
        $(d_{out}, d_{in})$ gradient of a layer is a sum over $B \cdot T$ outer products.)
    """)
    lesson.exercise(
        "matmul_vjp",
        r'''
        def matmul_vjp(a: torch.Tensor, b: torch.Tensor, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """(grad_a, grad_b) for y = a @ b, a: (..., M, K), b: (..., K, N) (at least 2-D each, batch dims broadcast),
            grad_out: y's shape (..., M, N). ValueError for a 1-D operand or mismatched inner sizes."""
            # TODO: refuse what this function does not cover
            # TODO: the two products in the broadcast batch shape, then back to each input's shape
            ### BEGIN SOLUTION
            if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2]:
                raise ValueError(f"need a: (..., M, K) and b: (..., K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
            grad_a = grad_out @ b.transpose(-1, -2)  # (..., M, N) @ (..., N, K) -> (..., M, K)
            grad_b = a.transpose(-1, -2) @ grad_out  # (..., K, M) @ (..., M, N) -> (..., K, N)
            return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Softmax

        $y_i = e^{x_i} / \sum_j e^{x_j}$ has $\partial y_i / \partial x_j = y_i(\delta_{ij} - y_j)$, i.e.
        $J = \operatorname{diag}(y) - y y^\top$, symmetric. Then

        $$
        \bar x = J^\top \bar y = y \odot \bar y - y\,(y^\top \bar y) = y \odot \big(\bar y - \langle \bar y, y\rangle\big),
        $$

        with the inner product taken along the softmax dimension (`keepdim=True`, so it broadcasts back). Two
        consequences worth knowing: the backward needs only the *output* $y$ (PyTorch saves exactly that), and adding
        a constant to $\bar y$ along the dimension changes nothing, because the rows of $J$ sum to zero (softmax is
        invariant to shifting its input). FlashAttention's backward uses the same identity, with
        $\langle \bar y, y\rangle$ computed as $\text{rowsum}(dO \odot O)$ (`p03.flash_attention_bwd`).
    """)
    lesson.exercise(
        "softmax_vjp",
        r'''
        def softmax_vjp(y: torch.Tensor, grad_out: torch.Tensor, dim: int = -1) -> torch.Tensor:
            """Gradient of x for y = softmax(x, dim), from the output y and grad_out (both y's shape)."""
            # TODO: the inner product of grad_out and y along dim (keep the dim), then the formula
            ### BEGIN SOLUTION
            inner = (grad_out * y).sum(dim=dim, keepdim=True)  # <g, y> per softmax row
            return y * (grad_out - inner)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Forward mode and reverse mode

        A Jacobian-vector product (JVP) $J v$ pushes a tangent forward through the computation alongside the values; a
        vector-Jacobian product (VJP) $u^\top J$ pulls a cotangent backward. Each costs a small multiple of one
        evaluation of $f$. So a full $m \times n$ Jacobian takes $n$ JVPs (one per column, $v = e_j$) or $m$ VJPs (one
        per row, $u = e_i$). A training loss is a scalar, $m = 1$: one VJP gives the whole gradient of billions of
        parameters, where forward mode would need one pass per parameter. That asymmetry is why deep learning runs on
        reverse mode. Forward mode wins when $n \ll m$ (sensitivities to a few hyperparameters, Hessian-vector products
        as forward-over-reverse).

        `torch.func` has both: `torch.func.jvp(f, (x,), (v,))` returns `(f(x), J v)`; `torch.func.vjp(f, x)` returns
        `(f(x), vjp_fn)` and `vjp_fn(u)` returns the tuple `(J^T u,)`. Build the Jacobian both ways (not with
        `torch.func.jacfwd`/`jacrev`, which do exactly this with `vmap`).
    """)
    lesson.exercise(
        "jacobian",
        r'''
        def jacobian(f, x: torch.Tensor, mode: str) -> torch.Tensor:
            """The (m, n) Jacobian of f: (n,) -> (m,) at x (1-D), column by column with torch.func.jvp
            (mode="forward") or row by row with torch.func.vjp (mode="reverse"). ValueError otherwise."""
            # TODO: refuse a mode other than "forward"/"reverse" and an x that is not 1-D
            # TODO: forward: one JVP per basis vector e_j gives column j
            # TODO: reverse: one VJP per basis vector e_i gives row i
            ### BEGIN SOLUTION
            if mode not in ("forward", "reverse") or x.dim() != 1:
                raise ValueError(f"need mode 'forward' or 'reverse' and a 1-D x, got {mode!r} and {tuple(x.shape)}")
            if mode == "forward":
                basis = torch.eye(x.numel(), dtype=x.dtype)
                columns = [torch.func.jvp(f, (x,), (e,))[1] for e in basis]  # J e_j, each (m,)
                return torch.stack(columns, dim=1)  # (m, n)
            y, vjp_fn = torch.func.vjp(f, x)
            basis = torch.eye(y.numel(), dtype=y.dtype)
            rows = [vjp_fn(e)[0] for e in basis]  # J^T e_i = row i, each (n,)
            return torch.stack(rows, dim=0)  # (m, n)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What a Jacobian looks like

        The Jacobians of softmax (dense, symmetric, rows summing to zero), of $x \mapsto W \tanh(x)$ (any matrix),
        and of a causal cumulative sum (lower triangular: output $i$ depends on inputs $\le i$, the structure that
        causal attention has too).
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        n = 8
        x = torch.randn(n, dtype=torch.float64)
        W = torch.randn(6, n, dtype=torch.float64)
        functions = {
            "softmax(x)": lambda v: torch.softmax(v, dim=0),
            "W tanh(x)": lambda v: W @ torch.tanh(v),
            "cumsum(x)": lambda v: torch.cumsum(v, dim=0),
        }
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
        for ax, (name, f) in zip(axes, functions.items()):
            try:
                J, who = jacobian(f, x, "reverse"), "yours, reverse"
            except NotImplementedError:
                J, who = torch.func.jacrev(f)(x), "jacrev"
            bound = J.abs().max().item()
            image = ax.imshow(J, cmap="RdBu_r", vmin=-bound, vmax=bound)
            ax.set_title(f"{name}  ({who})", fontsize=9); ax.set_xlabel("input j"); ax.set_ylabel("output i")
            fig.colorbar(image, ax=ax, shrink=0.8)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`unbroadcast`.** Two sums, in that order: first the leading dims (after them the gradient has as many dims as
        the input), then the stretched size-1 dims with `keepdim=True`. The guard `if extra:` matters:
        `grad.sum(dim=())` sums over *every* dimension in PyTorch (an empty `dim` means "all"), which turns a gradient
        that needed no reduction into a scalar. The usual mistakes: *leading dims not summed*, *`keepdim`
        lost* (shape `(3,)` instead of `(3, 1)`), *that empty `dim`*.

        **`reduction_vjp`.** `expand_as` is free (a stride-0 view), so `sum`'s backward moves no data until someone
        writes to it; autograd returns such expanded gradients too. The mistakes: *`mean` without the division*,
        *every tied maximum gets the full gradient* (the gradient of the sum over ties, not of the max), and *the
        reduced dims not restored* before broadcasting (a `(2,)` gradient broadcast against `(2, 3)` lines up with the
        wrong axis, or fails).

        **`matmul_vjp`.** The transposes are on the side the shapes force. The mistakes: *batch dims not reduced* (a
        shared weight's gradient returned per batch element) and *the operands swapped* ($B^\top \bar Y$ only has
        the right shape by accident for square matrices). Cost: $2 \times 2MNK$ FLOPs for the pair. Production code
        (cuBLAS through `at::mm`) does not transpose anything in memory: it passes transposition flags to the GEMM.

        **`softmax_vjp`.** Saving $y$ and not $x$ is the whole design; PyTorch's `_softmax_backward_data` is this
        formula in one fused kernel. The mistakes: *no factor $y$ outside the bracket* and *the inner product over the
        wrong dimension*.

        **`jacobian`.** Forward mode makes $n$ passes, reverse mode one forward plus $m$ backward passes through the
        saved graph. `torch.func.jacrev` and `jacfwd` vectorise exactly these loops with `vmap` (one batched pass
        instead of $m$ or $n$), and `torch.func.hessian` is `jacfwd(jacrev(f))`.
    """)
    lesson.mistakes()
    return lesson
