"""Source of 02_PyTorch_Algorithms/12_Hyper_Connections.ipynb (build with `python -m llm_algo build p02.hyper_connections`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.hyper_connections",
        path="02_PyTorch_Algorithms/12_Hyper_Connections.ipynb",
        title_en="Residual streams and hyper-connections",
        title_zh="残差流与超连接",
        difficulty="hard",
        device="cpu",
        minutes=65,
        prerequisites=["p02.rmsnorm"],
    )
    lesson.title(
        intro=r"""
        Every Transformer since 2017 is a **residual stream** (残差流): one vector per token that each block reads,
        transforms, and adds its output back into, $h_{l+1} = h_l + f_l(\operatorname{norm}(h_l))$. Where the norm
        sits decides how deep a model can go: the original post-norm Transformer needed learning-rate warm-up and
        careful initialisation past a dozen layers, pre-norm (GPT-2, Llama) trains at a hundred layers but lets the
        stream grow with depth so that late layers contribute less and less. **Hyper-connections** (超连接; Zhu et
        al., ByteDance, ICLR 2025) widen the stream into $n$ parallel copies with learned mixing between them, at a
        negligible cost in FLOPs, and **mHC** (DeepSeek, 2025) constrains the mixing to doubly-stochastic matrices so
        that it stays stable over hundreds of layers.

        **You will implement** a pre-norm and a post-norm residual stack (with DeepNorm's residual scaling), the
        hyper-connection step with its three mixing matrices, the `HyperConnection` module with the paper's
        initialisation and its dynamic (input-dependent) variant, a full hyper-connected stack, and the Sinkhorn
        projection of mHC. **Graded against** loop specs written in float64 in the checks file, the closed form of
        the initialisation (a hyper-connected stack at init equals $n$ times a plain pre-norm residual stack, computed
        independently), the closed form of a $2 \times 2$ Sinkhorn limit, and float64 `gradcheck`.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：残差流 $h_{l+1} = h_l + f_l(\operatorname{norm}(h_l))$ 中 norm 的位置决定可训练深度：post-norm 深了难训，pre-norm 能训很深但残差流随深度增长、后面的层贡献越来越小。
        - **Post-norm / DeepNorm**：$h \leftarrow \operatorname{norm}(\alpha h + f(h))$；pre-norm：$h \leftarrow \alpha h + f(\operatorname{norm}(h))$，$\alpha$ 乘在残差上，不乘在 block 输出上。
        - **Hyper-connections**：残差流扩成 $H \in \mathbb{R}^{n\times d}$；block 输入 $h_\text{in} = A_m^\top H$，输出 $H' = A_r^\top H + B^\top f(h_\text{in})$（$A_m\in\mathbb{R}^n$，$A_r\in\mathbb{R}^{n\times n}$，$B\in\mathbb{R}^n$），FLOPs 开销可忽略。
        - **初始化**：$A_m$ 为 one-hot（block 只读一条流），$A_r = I$，$B$ 全 1；此时整个 stack 等于 $n$ 倍的普通 pre-norm 残差堆叠。输入 $x$ 复制到 $n$ 条流，结尾对流求和。
        - **动态版本**：由 $\bar H = \operatorname{norm}(H)$ 计算输入相关的修正，$A$ 部分乘 $s_\alpha$、$B$ 部分乘 $s_\beta$（经 `tanh`）。
        - **mHC 与 Sinkhorn**：把混合矩阵投影到双随机矩阵，在 log 域交替做行、列的 `logsumexp` 归一化，数值稳定。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Pre-norm, post-norm, and residual scaling

        A stack of $L$ blocks $f_0, \dots, f_{L-1}$ (attention, MLP: each maps `(..., d) -> (..., d)`) with norms
        $N_0, \dots, N_{L-1}$ and a residual weight $\alpha$ (1 unless stated):

        $$
        \text{post-norm (Vaswani et al., 2017):}\quad h_{l+1} = N_l\big(\alpha\, h_l + f_l(h_l)\big),
        \qquad
        \text{pre-norm (GPT-2, Llama):}\quad h_{l+1} = \alpha\, h_l + f_l\big(N_l(h_l)\big).
        $$

        **Why pre-norm trains deep.** Unroll it with $\alpha = 1$: $h_L = h_0 + \sum_l f_l(N_l(h_l))$, so
        $\partial h_L / \partial h_0 = I + \dots$: every layer has an identity path to the loss, and gradients neither
        vanish nor need warm-up. The price is **representation collapse**: the stream is a sum of $L$ terms, its size
        grows like $\sqrt{L}$, each new block's contribution is relatively smaller, and the last layers of a deep
        pre-norm model end up very similar to one another (their inputs differ little).

        **Why post-norm is hard to train.** The norm sits on the residual path, so the gradient to $h_0$ is multiplied
        by $L$ Jacobians of norms; at initialisation the last layers get large gradients and the first ones small
        ones (Xiong et al., 2020). It keeps each layer's contribution large, which is why it often ends up better when
        it can be trained. **DeepNorm** (Wang et al., 2022, *DeepNet*) keeps post-norm and up-weights the residual,
        $\alpha = (2N)^{1/4}$ for an encoder-only or decoder-only model of $N$ layers (each layer is an attention and an
        FFN block, so $2N$ of this section's blocks), together with a down-scaled initialisation of the blocks, and
        trains 1000-layer models. Shapes: `x: (..., d)` in, `(..., d)` out, the same for both.

        The plot after the first exercise measures the growth of the stream with depth.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 2. Exercise `residual_stack`: the two placements

        `layers` and `norms` are lists of callables (`(..., d) -> (..., d)`), one of each per block. Apply the stack
        of section 1 with `placement="pre"` or `"post"` and the residual weight `alpha`; refuse any other placement.
    """)
    lesson.exercise(
        "residual_stack",
        r'''
        def residual_stack(x: torch.Tensor, layers, norms, placement: str = "pre", alpha: float = 1.0) -> torch.Tensor:
            """A residual stack. x: (..., d); layers, norms: lists of callables (..., d) -> (..., d); returns (..., d).

            pre:  h = alpha * h + layer(norm(h))
            post: h = norm(alpha * h + layer(h))
            """
            # TODO: check placement is "pre" or "post" (ValueError otherwise)
            # TODO: walk the layers with their norms and update h by the rule of the placement
            ### BEGIN SOLUTION
            if placement not in ("pre", "post"):
                raise ValueError(f"placement must be 'pre' or 'post', got {placement!r}")
            h = x                                                    # (..., d)
            for layer, norm in zip(layers, norms, strict=True):
                if placement == "pre":
                    h = alpha * h + layer(norm(h))                   # the residual path skips the norm
                else:
                    h = norm(alpha * h + layer(h))                   # the norm sits on the residual path
            return h
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The stream grows under pre-norm

        Random two-layer MLP blocks with a `1/sqrt(d)` initialisation, 64 layers, `d = 64`: the root mean square of
        the stream after each layer, and the relative size of each layer's update $\lVert f_l \rVert / \lVert h_l
        \rVert$. Under pre-norm the stream grows like $\sqrt{l}$ and the updates shrink like $1/\sqrt{l}$; under
        post-norm both stay flat.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        depth, d = 64, 64
        weights = [(torch.randn(d, 4 * d) / math.sqrt(d), torch.randn(4 * d, d) / math.sqrt(4 * d)) for _ in range(depth)]
        blocks = [lambda h, w=w: F.gelu(h @ w[0]) @ w[1] for w in weights]
        norms = [lambda h: F.rms_norm(h, (d,))] * depth
        x = torch.randn(256, d)
        curves = {}
        try:
            for placement in ("pre", "post"):
                rms, update, h = [], [], x
                for block, norm in zip(blocks, norms):  # one layer at a time: a stack of one, applied to h
                    h_prev, h = h, residual_stack(h, [block], [norm], placement)
                    rms.append(h.pow(2).mean().sqrt().item())
                    update.append(((h - h_prev).norm() / h_prev.norm()).item())
                curves[placement] = (rms, update)
        except NotImplementedError:
            print("Implement residual_stack first.")
        if curves:
            fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
            for placement, (rms, update) in curves.items():
                left.plot(range(1, depth + 1), rms, label=f"{placement}-norm")
                right.plot(range(1, depth + 1), update, label=f"{placement}-norm")
            left.set_xlabel("layer l"); left.set_ylabel("RMS of h_l"); left.legend()
            right.set_xlabel("layer l"); right.set_ylabel("||h_l - h_(l-1)|| / ||h_(l-1)||"); right.set_yscale("log")
            fig.suptitle("pre-norm: the stream grows and each layer moves it less"); fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. Hyper-connections: $n$ streams and three mixing matrices

        Zhu et al. replace the single stream $h \in \mathbb{R}^{d}$ by a **hyper hidden matrix** $H \in
        \mathbb{R}^{n \times d}$: $n$ streams (the *expansion rate*, 4 in the paper's best runs). The embedding is
        copied into all $n$ streams, and at the end the streams are **summed** before the final norm and the output
        head. Around each block $f$ (which includes its own pre-norm: $f = f_l \circ N_l$) sit three learned
        weightings:

        | symbol | shape | role |
        | --- | --- | --- |
        | $A_m$ | $(n,)$ | *width connection to the block*: the block reads the mix $h_{\text{in}} = \sum_i A_m[i]\, H_i$ |
        | $A_r$ | $(n, n)$ | *width connections between streams*: output stream $j$ starts from $\sum_i A_r[i, j]\, H_i$ |
        | $B$ | $(n,)$ | *depth connections*: the block's output is written into stream $j$ with weight $B[j]$ |

        $$
        h_{\text{in}} = A_m^{\top} H \in \mathbb{R}^{d},\qquad
        H' = B^{\top} f(h_{\text{in}}) + A_r^{\top} H \in \mathbb{R}^{n \times d},\qquad
        \text{i.e.}\quad H'_j = B[j]\, f(h_{\text{in}}) + \sum_i A_r[i, j]\, H_i .
        $$

        The paper packs them into one $(n+1) \times (n+1)$ matrix $\begin{pmatrix} 0 & B \\ A_m & A_r \end{pmatrix}$.
        With $n = 1$ and all three equal to 1 this is $h' = f(h) + h$: **the residual connection is the special case**.
        The extra cost is tiny: a few $n \times d$ multiply-adds per token per block, against the block's
        $O(d^2)$, but the stream's memory traffic and activation memory grow $n$-fold, which is why production
        implementations fuse these mixes into the neighbouring kernels.

        **Initialisation** for block $k$ (counting from 0): $A_m = e_{k \bmod n}$ (one-hot), $A_r = I_n$, $B =
        \mathbf{1}$. All streams start equal; block $k$ reads stream $k \bmod n$, which equals every other stream;
        its output is added to every stream; so the streams stay equal, each one is exactly the pre-norm residual
        stream $h_l$, and the summed output is $n\, h_L$ (the final norm removes the factor $n$). A hyper-connected
        model **starts as a pre-norm Transformer** and learns to depart from it.

        **Dynamic hyper-connections** make the weights depend on the token. With $\bar H = \operatorname{RMSNorm}(H)$
        (each stream normalised over $d$), learned $W_m \in \mathbb{R}^{d}$, $W_r \in \mathbb{R}^{d \times n}$,
        $W_b \in \mathbb{R}^{d}$ and scalars $s_\alpha, s_\beta$:

        $$
        A_m(H) = A_m + s_\alpha \tanh(\bar H W_m),\qquad
        A_r(H) = A_r + s_\alpha \tanh(\bar H W_r),\qquad
        B(H) = B + s_\beta \tanh(\bar H W_b),
        $$

        shapes `(..., n)`, `(..., n, n)` (row $i$ from stream $i$) and `(..., n)`. $W_m, W_r, W_b$ start at **zero**
        and $s_\alpha = s_\beta = 0.01$, so a dynamic model also starts as the static one, hence as pre-norm.
    """)
    lesson.md(r"""
        ## 4. Exercise `hyper_connection`: one step

        `H: (..., n, d)`; `A_m: (..., n)`, `A_r: (..., n, n)`, `B: (..., n)`, where the leading dimensions are absent
        (static weights, shared by every token) or equal to those of `H` (dynamic weights, one set per token). Compute
        $h_{\text{in}}$, call `layer` once on it, and return $H'$. `torch.einsum` with `...` handles both cases.
    """)
    lesson.exercise(
        "hyper_connection",
        r'''
        def hyper_connection(H: torch.Tensor, layer, A_m: torch.Tensor, A_r: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
            """H' = B^T layer(A_m^T H) + A_r^T H.  H: (..., n, d); A_m: (..., n); A_r: (..., n, n); B: (..., n)."""
            # TODO: the block's input: the A_m-weighted sum of the streams          (..., d)
            # TODO: run the layer once; write its output into stream j with weight B[j]
            # TODO: add the mixed streams: output stream j gets sum_i A_r[i, j] H_i    (..., n, d)
            ### BEGIN SOLUTION
            h_in = torch.einsum("...n,...nd->...d", A_m, H)                   # (..., d)
            out = layer(h_in)                                                  # (..., d)
            mixed = torch.einsum("...ij,...id->...jd", A_r, H)                 # (..., n, d), A_r^T H
            return torch.einsum("...n,...d->...nd", B, out) + mixed            # (..., n, d)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `HyperConnection`: the module, static and dynamic

        Parameters, named as in section 3: `A_m (n,)`, `A_r (n, n)`, `B (n,)` with the initialisation for block
        `layer_index`; if `dynamic`, also `norm = nn.RMSNorm(dim, eps=1e-6)`, `W_m (dim,)`, `W_r (dim, n)`, `W_b
        (dim,)` at zero and `s_alpha`, `s_beta` (0-dim) at 0.01. `weights(H)` returns the three weightings (the static
        parameters themselves, or the dynamic formulas), and `forward(H, layer)` applies your `hyper_connection`.
        All in the parameters' dtype: call `.double()` on the module for float64.
    """)
    lesson.exercise(
        "hyper_connection_module",
        r'''
        class HyperConnection(nn.Module):
            """Hyper-connection around one block (Zhu et al., 2024): static, or dynamic with input-dependent weights."""

            def __init__(self, dim: int, num_streams: int, layer_index: int, dynamic: bool = True):
                super().__init__()
                self.dynamic = dynamic
                # TODO: A_m one-hot at layer_index % num_streams, A_r the identity, B all ones (nn.Parameter each)
                # TODO: if dynamic: norm = nn.RMSNorm(dim, eps=1e-6); W_m, W_r, W_b zeros; s_alpha, s_beta = 0.01
                ### BEGIN SOLUTION
                self.A_m = nn.Parameter(F.one_hot(torch.tensor(layer_index % num_streams), num_streams).float())  # (n,)
                self.A_r = nn.Parameter(torch.eye(num_streams))                                              # (n, n)
                self.B = nn.Parameter(torch.ones(num_streams))                                               # (n,)
                if dynamic:
                    self.norm = nn.RMSNorm(dim, eps=1e-6)
                    self.W_m = nn.Parameter(torch.zeros(dim))                    # (d,)
                    self.W_r = nn.Parameter(torch.zeros(dim, num_streams))       # (d, n)
                    self.W_b = nn.Parameter(torch.zeros(dim))                    # (d,)
                    self.s_alpha = nn.Parameter(torch.tensor(0.01))
                    self.s_beta = nn.Parameter(torch.tensor(0.01))
                ### END SOLUTION

            def weights(self, H: torch.Tensor):
                """(A_m, A_r, B) for streams H (..., n, d): static (n,), (n, n), (n,) or dynamic (..., n), (..., n, n), (..., n)."""
                # TODO: static: the parameters; dynamic: H_bar = norm(H), then the three tanh corrections
                ### BEGIN SOLUTION
                if not self.dynamic:
                    return self.A_m, self.A_r, self.B
                H_bar = self.norm(H)                                              # (..., n, d)
                A_m = self.A_m + self.s_alpha * torch.tanh(H_bar @ self.W_m)      # (..., n)
                A_r = self.A_r + self.s_alpha * torch.tanh(H_bar @ self.W_r)      # (..., n, n), row i from stream i
                B = self.B + self.s_beta * torch.tanh(H_bar @ self.W_b)           # (..., n)
                return A_m, A_r, B
                ### END SOLUTION

            def forward(self, H: torch.Tensor, layer) -> torch.Tensor:
                # TODO: hyper_connection with this module's weights
                ### BEGIN SOLUTION
                return hyper_connection(H, layer, *self.weights(H))
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `hyper_connection_stack`: expand, connect, sum

        Copy `x: (..., d)` into `n` streams `(..., n, d)`, pass them through every `(layer, connection)` pair
        (`connection(H, layer)` returns the new streams), and sum the streams at the end: `(..., d)`. With the
        initialisation of section 3 the result is $n$ times the pre-norm stack of section 2; the check compares with
        exactly that.
    """)
    lesson.exercise(
        "hyper_connection_stack",
        r'''
        def hyper_connection_stack(x: torch.Tensor, layers, connections, num_streams: int) -> torch.Tensor:
            """x: (..., d) -> (..., d): n copies of x, each block through its connection, then the sum of the streams."""
            # TODO: expand x to (..., n, d) (a copy per stream), apply connection(H, layer) for each block, sum over n
            ### BEGIN SOLUTION
            H = x.unsqueeze(-2).expand(*x.shape[:-1], num_streams, x.shape[-1])    # (..., n, d)
            for layer, connection in zip(layers, connections, strict=True):
                H = connection(H, layer)                                            # (..., n, d)
            return H.sum(dim=-2)                                                    # (..., d)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. mHC: keep the stream mixing on the Birkhoff polytope

        Unroll a hyper-connected stack and the residual path from block $a$ to block $b$ is the product
        $A_r^{(a)} A_r^{(a+1)} \cdots A_r^{(b)}$. In a plain residual stack that product is $I$: the identity
        mapping that makes deep networks trainable. With learned, unconstrained $A_r$ nothing bounds it: small
        departures from the identity compound over dozens of layers into large gains, or into decay. DeepSeek's
        mHC (*Manifold-Constrained Hyper-Connections*, arXiv 2512.24880, 2025) reports exactly this instability when
        scaling HC, and fixes it by projecting the stream-mixing matrix onto the **doubly-stochastic matrices**
        (双随机矩阵, the Birkhoff polytope): non-negative entries, every row and every column summing to 1.

        - Such a matrix maps the mean of the streams to itself (columns sum to 1) and is a convex combination of
          permutations (Birkhoff–von Neumann), so its spectral norm is exactly 1: it cannot amplify.
        - Products of doubly-stochastic matrices are doubly stochastic, so the whole residual path through any depth
          stays bounded.
        - The projection is **Sinkhorn–Knopp** (1967): start from $M = \exp(\text{logits})$ (positive) and
          alternately divide every row by its sum and every column by its sum. For a positive matrix it converges to
          the unique doubly-stochastic $D_1 M D_2$ with diagonal $D_1, D_2$; mHC runs a fixed, small number of
          iterations (20 in the paper) and back-propagates through them. mHC also keeps the read and write
          weights non-negative (a sigmoid), and computes all of them from the token as in dynamic HC.

        Because the limit is $D_1 M D_2$, adding a constant to a row or a column of the logits changes nothing, and
        for $n = 2$ the limit is $\begin{pmatrix} p & 1-p \\ 1-p & p \end{pmatrix}$ with
        $\frac{p^2}{(1-p)^2} = \frac{M_{00} M_{11}}{M_{01} M_{10}}$ (the cross-ratio is invariant under $D_1 M D_2$).

        ## 8. Exercise `sinkhorn`: the projection, in log space

        `logits: (..., n, n)` → doubly-stochastic `(..., n, n)`: `num_iters` rounds of *rows, then columns*.
        $\exp$ of a logit of 100 overflows float32, and a row of logits 200 below the others underflows to a row of
        zeros and then $0/0$; so work on $\log M$: dividing a row by its sum is subtracting its `logsumexp`.
        Exponentiate once at the end.
    """)
    lesson.exercise(
        "sinkhorn",
        r'''
        def sinkhorn(logits: torch.Tensor, num_iters: int = 20) -> torch.Tensor:
            """Sinkhorn-Knopp on exp(logits): num_iters rounds of row then column normalisation. (..., n, n) -> (..., n, n)."""
            # TODO: in log space: subtract each row's logsumexp, then each column's, num_iters times; exp at the end
            ### BEGIN SOLUTION
            log_m = logits                                                          # (..., n, n)
            for _ in range(num_iters):
                log_m = log_m - torch.logsumexp(log_m, dim=-1, keepdim=True)        # rows sum to 1
                log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)        # columns sum to 1
            return log_m.exp()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Products over depth: unconstrained vs projected

        64 layers of stream-mixing matrices $I + 0.15\,\varepsilon$ (random perturbations of the identity, as after
        some training), $n = 4$: the largest singular value of the product of the first $l$ matrices, raw, and after
        `sinkhorn` of $\log$ of the (clamped positive) matrices. The raw product's gain wanders up by an order of
        magnitude; the projected product's stays at exactly 1.
    """)
    lesson.code(r"""
        torch.manual_seed(1)
        n, depth = 4, 64
        raw = [torch.eye(n, dtype=torch.float64) + 0.15 * torch.randn(n, n, dtype=torch.float64) for _ in range(depth)]
        try:
            projected = [sinkhorn(m.clamp_min(1e-3).log()) for m in raw]
        except NotImplementedError:
            projected = None
            print("Implement sinkhorn to see the projected curve.")
        plt.figure(figsize=(6, 3.5))
        for name, mats in (("unconstrained A_r", raw), ("Sinkhorn-projected (mHC)", projected)):
            if mats is None:
                continue
            product, gains = torch.eye(n, dtype=torch.float64), []
            for m in mats:
                product = product @ m
                gains.append(torch.linalg.matrix_norm(product, ord=2).item())
            plt.semilogy(range(1, depth + 1), gains, label=name)
        plt.xlabel("layers composed"); plt.ylabel("spectral norm of the product")
        plt.title("Residual path gain over depth, n = 4 streams"); plt.legend(); plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 9. Reading the solutions

        **`residual_stack`.** The whole difference between the placements is whether `norm` wraps the sum or only the
        block's input. `strict=True` in `zip` turns a length mismatch into an error instead of a silently shorter
        stack.

        **`hyper_connection`.** Three `einsum`s with `...`, so the same line serves static weights (no leading
        dimensions: broadcast to every token) and dynamic weights (one set per token). The subscripts encode the
        transpose: `"...ij,...id->...jd"` sums over the *input* stream `i`, which is $A_r^\top H$. Using
        `"...ij,...jd->...id"` ($A_r H$) is the same at the identity initialisation and wrong as soon as $A_r$ is not
        symmetric, which a check with random matrices catches. The layer runs once, on one `(..., d)` input: the
        block's FLOPs do not grow with $n$.

        **`HyperConnection`.** The initialisation is the point of the module: one-hot $A_m$ (block $k$ reads stream
        $k \bmod n$), identity $A_r$, ones $B$. With $A_m = \mathbf{1}$ the block would read the *sum* of $n$ equal
        streams, $n$ times too large; with one-hot $B$ only one stream would receive the output and the streams would
        drift apart. The dynamic corrections start at exactly zero (zero $W$), so the equivalence with pre-norm
        holds for both variants at initialisation, while gradients reach $W$ through $s_\alpha, s_\beta \ne 0$.

        **`hyper_connection_stack`.** `expand` makes $n$ views of one tensor without copying; the first
        `connection` writes a fresh tensor, so nothing is modified in place. Summing (not averaging) the streams is
        the paper's choice; the final RMSNorm makes the factor $n$ irrelevant.

        **`sinkhorn`.** Subtracting `logsumexp` is dividing by the sum, in log space: no overflow at logit 1000, no
        $0/0$ for a row far below the others. After the column step the columns sum to 1 exactly and the rows
        approximately; the row error shrinks geometrically with the iterations.

        **The usual mistakes, and why they are wrong**: the norm on the wrong
        side of the sum; $\alpha$ on the block instead of the residual; $A_r H$ instead of $A_r^\top H$; the block
        reading the plain sum of the streams; $A_m$ or $B$ initialised wrongly; the dynamic weights computed from the
        unnormalised $H$, or with $s_\alpha$ and $s_\beta$ swapped; the streams averaged, or $x$ put into one stream
        only; the dynamic correction of $A_r$ transposed (column $i$ from stream $i$); Sinkhorn normalising only rows,
        rows twice, or columns first.

        **Cost and production.** Per token and block, HC adds $O(n d + n^2 d)$ FLOPs for the mixes (and $O(n^2 d)$ for
        the dynamic weights) against the block's $O(d^2)$ — negligible — but the residual stream is $n$ times wider in
        memory: $n \times$ the activation memory for the stream and $n \times$ its read/write traffic per block. mHC
        spends most of its engineering on that: fused kernels for the mixes and the Sinkhorn iterations, and
        recomputation instead of storing the $n$-wide stream, and reports a small training-time overhead at $n = 4$.
        Zhu et al. report faster convergence with $n = 4$ on OLMo-style dense and OLMoE-style mixture-of-experts
        models; the mHC paper reports that unconstrained HC became unstable as models grew (loss and gradient-norm
        spikes) and that the projected version trained smoothly at the same scale.
    """)
    lesson.mistakes()
    return lesson
