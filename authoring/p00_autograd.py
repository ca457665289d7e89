"""Source of 00_Prerequisites/05_Autograd.ipynb (build with `python -m llm_algo build p00.autograd`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.autograd",
        path="00_Prerequisites/05_Autograd.ipynb",
        title_en="Autograd and backward",
        title_zh="自动微分与反向传播",
        difficulty="medium",
        device="cpu",
        minutes=55,
        prerequisites=["p00.tensor_layout"],
    )
    lesson.title(
        intro=r"""
        `loss.backward()` is one line, and it is where most of a training step's time goes: the backward pass costs
        about twice the forward (two matmuls per linear layer instead of one, the origin of the $6ND$ training FLOPs
        of Kaplan et al. 2020: $2ND$ forward, $4ND$ backward). Fused kernels (FlashAttention, Liger-Kernel's fused
        cross-entropy, Apex's fused LayerNorm) exist because someone wrote that backward by hand, and the bugs they
        guard against (a gradient that silently stops flowing, a saved tensor modified in place, a graph freed too
        early) are the ones this lesson makes you meet on purpose.

        **You will implement** the forward and backward of a 2-layer MLP language-model head with softmax
        cross-entropy entirely by hand, a softmax `torch.autograd.Function` that saves only its output for the
        backward, and per-loss gradient norms from one shared graph (`retain_graph`, leaves left untouched).
        **Graded against** `torch.autograd` on the same computation (float64 and float32),
        `torch.autograd.gradcheck` (finite differences) run *through your hand-written gradients*, closed forms, and
        autograd's in-place detection.

        **本节要点**
        - 反向传播 = 链式法则按计算图逆序执行：每个算子只需要“上游梯度 × 局部导数”。
        - 线性层 `y = x Wᵀ + b`（权重形状 `(d_out, d_in)`）：`dx = dy W`，`dW = dyᵀ x`，`db = dy` 对批维求和。
        - softmax 交叉熵对 logits 的梯度是 `(softmax(z) − onehot(t)) / N`；ReLU 的梯度是掩码 `h > 0`。
        - 自定义 `torch.autograd.Function`：`forward` 里用 `ctx.save_for_backward` 保存反向所需的张量，`backward` 返回每个输入的梯度。
          softmax 只需保存输出 y：`dx = y ⊙ (dy − Σ dy⊙y)`。
        - 叶子张量 (leaf tensor) 的 `.grad` 会累加；`backward` 之后计算图被释放，第二次 `backward` 需要 `retain_graph=True`。
        - 用 `gradcheck`（float64 有限差分）验证手写梯度。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. What autograd records

        Every operation on a tensor with `requires_grad=True` appends a node to a graph: `y = x @ w.T` records a
        `MmBackward0` node that holds (references to) what it needs for the backward, here `x` and `w`. Tensors you
        create yourself (weights, inputs) are **leaves** (叶子张量): `w.is_leaf` is `True`, `w.grad_fn` is `None`, and
        `loss.backward()` *adds* $\partial L/\partial w$ into `w.grad`. Intermediate results are not leaves: their
        `.grad` stays `None` unless you call `t.retain_grad()`. After `backward`, the graph's saved tensors are freed
        (that is what makes training fit in memory), so a second `backward` through the same graph raises unless the
        first one passed `retain_graph=True`.

        The backward pass runs the graph in reverse. Each node receives $\bar{y} = \partial L / \partial y$ (the
        *upstream gradient*, same shape as $y$) and returns $\bar{x} = \bar{y} \cdot \partial y / \partial x$ for each
        input: a vector-Jacobian product, never the full Jacobian.

        ## 2. The three local gradients of an MLP head

        Take `N` token positions with hidden states `x: (N, d)`, a hidden layer of width `h`, a vocabulary of `V`
        tokens, and weights in PyTorch's `nn.Linear` layout `(d_out, d_in)`:

        $$
        \begin{aligned}
        H &= x W_1^\top + b_1 &&(N, h) & A &= \max(H, 0) &&(N, h)\\
        Z &= A W_2^\top + b_2 &&(N, V) & L &= \frac{1}{N}\sum_{i=1}^{N} \Big(\log \sum_{v} e^{Z_{iv}} - Z_{i, t_i}\Big) && ()
        \end{aligned}
        $$

        **Cross-entropy.** $\partial L / \partial Z_{iv} = \frac{1}{N}\big(\operatorname{softmax}(Z_i)_v - [v = t_i]\big)$:
        the predicted distribution minus the one-hot target, divided by $N$ because the loss is a mean. Call it
        $\bar{Z}$, shape `(N, V)`.

        **Linear layer** $Y = X W^\top + b$ with upstream $\bar{Y}$ `(N, d_out)`: each weight $W_{oj}$ touches
        $Y_{io}$ for every row $i$ through $X_{ij}$, so

        $$
        \bar{X} = \bar{Y}\, W \;\; (N, d_{in}), \qquad \bar{W} = \bar{Y}^\top X \;\; (d_{out}, d_{in}), \qquad
        \bar{b} = \textstyle\sum_i \bar{Y}_{i} \;\; (d_{out}).
        $$

        A shape check derives all three: $\bar{W}$ must have $W$'s shape, and the only product of $\bar{Y}$
        `(N, d_out)` and $X$ `(N, d_in)` with that shape is $\bar{Y}^\top X$. The bias gradient is a *sum* over
        the batch, because the same $b$ was broadcast to every row.

        **ReLU.** $\bar{H} = \bar{A} \odot [H > 0]$: the gradient passes where the unit was active.

        So the backward is: $\bar{Z}$, then $\bar{W}_2, \bar{b}_2, \bar{A}$ from the second linear layer, then
        $\bar{H}$, then $\bar{W}_1, \bar{b}_1, \bar{x}$ from the first. It costs two matmuls per linear layer
        ($\bar X$ and $\bar W$) against one in the forward: the backward is twice the forward.

        **Numerical stability.** $\log\sum_v e^{Z_v}$ overflows float32 once a logit passes 88. Subtract the row
        maximum $m$ first: $\log\sum_v e^{Z_v} = m + \log\sum_v e^{Z_v - m}$ (the same trick gives a stable softmax).
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ### See it: leaves, `.grad` accumulation and `retain_graph`

        Predict each printed line before you run the cell.
    """)
    lesson.code(r"""
        w = torch.tensor([2.0, -1.0], requires_grad=True)   # a leaf: created by you
        x = torch.tensor([3.0, 4.0])
        y = (w * x).sum()                                     # not a leaf: made by an op
        print("w.is_leaf", w.is_leaf, "| y.is_leaf", y.is_leaf, "| y.grad_fn", type(y.grad_fn).__name__)

        y.backward(retain_graph=True)
        print("after one backward:     w.grad =", w.grad.tolist())
        y.backward()                                          # allowed: the graph was retained
        print("after a second backward: w.grad =", w.grad.tolist(), "(accumulated, not overwritten)")
        try:
            y.backward()                                      # the graph is gone now
        except RuntimeError as error:
            print("a third backward:", str(error).split(".")[0])
        w.grad = None                                         # what optimizer.zero_grad() does by default

        h = w * x
        h.retain_grad()                                       # ask for an intermediate's gradient
        (h ** 2).sum().backward()
        print("h.grad =", h.grad.tolist(), "(2h) | w.grad =", w.grad.tolist(), "(2h * x)")
    """)
    lesson.md(r"""
        ## 3. Exercise `mlp_forward_backward`: the whole backward by hand

        Compute the loss and the gradients of the loss with respect to `x`, `w1`, `b1`, `w2` and `b2`, following
        section 2 in reverse, with tensor operations only (autograd and `F.cross_entropy` are what the checks compare
        with, so this exercise forbids them; `torch.softmax` is allowed). Validate the inputs: wrong shapes, or
        targets outside `[0, V)`, must raise `ValueError` (an out-of-range token id would otherwise index out of
        bounds on a GPU, which crashes the whole process with a device-side assert).

        The likely mistakes: forgetting the $1/N$ of the mean, summing the bias gradient over the wrong axis,
        transposing a weight gradient (`x.T @ dH` has shape `(d, h)`, not `w1`'s `(h, d)`), and a log-sum-exp
        without the max subtraction.
    """)
    lesson.exercise(
        "mlp_forward_backward",
        r'''
        def mlp_forward_backward(x, w1, b1, w2, b2, targets):
            """Loss and gradients of mean cross-entropy(relu(x w1^T + b1) w2^T + b2, targets), by hand.

            x: (N, d) float; w1: (h, d); b1: (h,); w2: (V, h); b2: (V,) same dtype; targets: (N,) int64 in [0, V)
            returns (loss: 0-d tensor, grads: {"x": (N, d), "w1": (h, d), "b1": (h,), "w2": (V, h), "b2": (V,)})
            raises ValueError on inconsistent shapes or targets outside [0, V)
            """
            N, d = x.shape
            h, V = w1.shape[0], w2.shape[0]
            if w1.shape != (h, d) or b1.shape != (h,) or w2.shape != (V, h) or b2.shape != (V,):
                raise ValueError(f"shapes do not fit: x {tuple(x.shape)}, w1 {tuple(w1.shape)}, b1 {tuple(b1.shape)}, "
                                 f"w2 {tuple(w2.shape)}, b2 {tuple(b2.shape)}")
            # TODO: refuse targets that are not (N,) or lie outside [0, V)
            # TODO: forward: pre-activation (N, h), ReLU, logits (N, V), stable log-sum-exp, mean loss
            # TODO: backward: d_logits = (softmax - one_hot) / N, then the second linear layer, ReLU, the first
            ### BEGIN SOLUTION
            if targets.shape != (N,) or bool((targets < 0).any()) or bool((targets >= V).any()):
                raise ValueError(f"targets must be (N,) = ({N},) token ids in [0, {V}), got {tuple(targets.shape)} "
                                 f"with values in [{int(targets.min())}, {int(targets.max())}]")
            pre = x @ w1.T + b1                                            # (N, h)
            act = pre.clamp_min(0)                                         # (N, h)
            logits = act @ w2.T + b2                                       # (N, V)
            row_max = logits.max(dim=-1, keepdim=True).values              # (N, 1)
            shifted = logits - row_max                                     # (N, V), <= 0: exp cannot overflow
            log_norm = row_max.squeeze(-1) + shifted.exp().sum(-1).log()   # (N,)  log sum_v exp(z_v)
            rows = torch.arange(N)
            loss = (log_norm - logits[rows, targets]).mean()               # ()
            d_logits = shifted.exp() / shifted.exp().sum(-1, keepdim=True)  # (N, V)  softmax
            d_logits[rows, targets] -= 1.0                                 # softmax - one_hot
            d_logits /= N                                                  # the mean over N positions
            grad_w2 = d_logits.T @ act                                     # (V, h)
            grad_b2 = d_logits.sum(dim=0)                                  # (V,)
            d_act = d_logits @ w2                                          # (N, h)
            d_pre = d_act * (pre > 0)                                      # (N, h)  ReLU passes where active
            grad_w1 = d_pre.T @ x                                          # (h, d)
            grad_b1 = d_pre.sum(dim=0)                                     # (h,)
            grad_x = d_pre @ w1                                            # (N, d)
            return loss, {"x": grad_x, "w1": grad_w1, "b1": grad_b1, "w2": grad_w2, "b2": grad_b2}
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `softmax_function`: a custom `torch.autograd.Function`

        When you write a fused kernel (Part 03), autograd cannot see inside it: you wrap it in a
        `torch.autograd.Function` whose `forward` runs the kernel and whose `backward` you supply. The pattern:

        ```python
        class Op(torch.autograd.Function):
            @staticmethod
            def forward(ctx, inp):          # plain tensors in, plain tensors out; autograd is off in here
                out = ...
                ctx.save_for_backward(out)  # tensors the backward needs (checked by autograd's version counter)
                return out

            @staticmethod
            def backward(ctx, grad_out):    # one upstream gradient per output
                (out,) = ctx.saved_tensors
                return ...                  # one gradient per input of forward (None for non-tensors)
        ```

        Softmax over the last dimension, $y_j = e^{s_j} / \sum_k e^{s_k}$ (an attention row: `scores (..., T_k)`),
        has the Jacobian $\partial y_j / \partial s_i = y_j([i=j] - y_i)$, so for an upstream gradient $\bar{y}$

        $$
        \bar{s}_i = \sum_j \bar{y}_j\, y_j([i=j] - y_i) = y_i\Big(\bar{y}_i - \sum_j \bar{y}_j y_j\Big) .
        $$

        It needs only the **output** $y$: save `y`, not the scores (half the memory, since the scores are not
        needed again). This identity is the heart of FlashAttention's backward, where $\sum_j \bar{y}_j y_j$ is the
        precomputed `D` term.

        Use `ctx.save_for_backward`, not `ctx.y = y`: tensors saved that way are checked by autograd, so an
        in-place change of `y` after the forward makes `backward` raise instead of silently computing a wrong
        gradient (a check does exactly that). Masked attention scores contain `-inf` (a causal mask): those entries
        must come out exactly 0 with gradient 0. The softmax builtins and autograd are forbidden here.
    """)
    lesson.exercise(
        "softmax_function",
        r'''
        class SoftmaxFunction(torch.autograd.Function):
            """Softmax over the last dimension with a hand-written backward that saves only the output."""

            @staticmethod
            def forward(ctx, scores: torch.Tensor) -> torch.Tensor:
                """scores: (..., T) float (may hold -inf, not a whole row of it) -> probabilities (..., T), same dtype"""
                # TODO: subtract the row max, exponentiate, normalise over the last dimension (compute in >= float32)
                # TODO: save the output for the backward with ctx.save_for_backward
                ### BEGIN SOLUTION
                compute_dtype = torch.promote_types(scores.dtype, torch.float32)
                s = scores.to(compute_dtype)
                e = (s - s.amax(dim=-1, keepdim=True)).exp()               # (..., T) in (0, 1], exp(-inf) = 0
                probs = (e / e.sum(dim=-1, keepdim=True)).to(scores.dtype)  # (..., T)
                ctx.save_for_backward(probs)
                return probs
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_probs: torch.Tensor) -> torch.Tensor:
                """grad_probs: (..., T) = dL/dy -> dL/dscores (..., T)"""
                # TODO: read the saved output; return y * (grad - sum(grad * y) over the last dimension)
                ### BEGIN SOLUTION
                (probs,) = ctx.saved_tensors
                compute_dtype = torch.promote_types(probs.dtype, torch.float32)
                y, g = probs.to(compute_dtype), grad_probs.to(compute_dtype)
                dot = (g * y).sum(dim=-1, keepdim=True)                    # (..., 1)
                return (y * (g - dot)).to(grad_probs.dtype)                # (..., T)
                ### END SOLUTION


        def softmax(scores: torch.Tensor) -> torch.Tensor:
            return SoftmaxFunction.apply(scores)
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `per_loss_grad_norms`: one graph, several losses

        A mixture-of-experts model trains on a sum of losses: the language-modelling loss, a load-balancing
        auxiliary loss (Switch Transformer, coefficient $10^{-2}$) and sometimes a router z-loss (ST-MoE,
        $10^{-3}$). To set those coefficients you monitor how hard each term pulls on the weights: the global
        gradient norm of each loss *separately*, $\lVert \nabla_\theta L_k \rVert_2 =
        \sqrt{\sum_{p} \lVert \partial L_k / \partial p \rVert^2}$ (GradNorm, Chen et al. 2018, balances tasks on
        the same quantity). All the losses come from one forward pass, so they share one graph.

        Write `per_loss_grad_norms(losses, params)` with `torch.autograd.grad`, which *returns* gradients instead of
        accumulating them into the leaves' `.grad` (so the training step's own `.grad` is left exactly as it was).
        Three details decide whether it works:

        - the graph's saved tensors are freed by the first backward through them, so every call but the **last**
          needs `retain_graph=True`, and the last one must **not** retain it (or the whole graph's activations stay in
          memory until the losses are garbage-collected);
        - a parameter that a loss does not reach (the output head, for a loss on the router) has no gradient:
          `allow_unused=True` returns `None` for it, which counts as 0;
        - the norm is global: the square root of the sum over all parameters, not a sum of per-parameter norms.

        Return a list of 0-d tensors, one per loss, in the parameters' dtype.
    """)
    lesson.exercise(
        "per_loss_grad_norms",
        r'''
        def per_loss_grad_norms(losses: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
            """Global L2 norm of d loss_k / d params for each loss of one shared graph; leaves' .grad untouched.

            losses: 0-d tensors from one forward pass; params: leaf tensors that require grad
            returns [norm_k: 0-d tensor] in the params' dtype; the graph is freed after the last loss
            """
            # TODO: torch.autograd.grad for each loss: retain the graph for all but the last, allow unused params
            # TODO: unused parameters (None) count as 0; norm = sqrt(sum over params of sum(g**2))
            ### BEGIN SOLUTION
            norms = []
            for k, loss in enumerate(losses):
                last = k == len(losses) - 1
                grads = torch.autograd.grad(loss, params, retain_graph=not last, allow_unused=True)
                squares = [g.pow(2).sum() for g in grads if g is not None]
                total = torch.stack(squares).sum() if squares else torch.zeros((), dtype=params[0].dtype)
                norms.append(total.sqrt().detach())
            return norms
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A picture: what gradcheck compares

        `torch.autograd.gradcheck` perturbs each input entry by $\pm\varepsilon$ and compares the finite difference
        $(f(x+\varepsilon) - f(x-\varepsilon))/2\varepsilon$ with your analytic gradient. In float64 the error of a
        central difference falls like $\varepsilon^2$ until rounding ($\approx 10^{-16}/\varepsilon$) takes over;
        in float32 rounding wins much earlier, which is why gradcheck insists on float64. The plot measures both
        for one coordinate of the MLP loss, against your analytic gradient.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        N, d, h, V = 8, 6, 10, 12
        params = [torch.randn(N, d), torch.randn(h, d) / d**0.5, torch.zeros(h), torch.randn(V, h) / h**0.5, torch.zeros(V)]
        targets = torch.randint(0, V, (N,))

        def loss_of(w1_entry, dtype):
            p = [t.to(dtype) for t in params]
            p[1] = p[1].clone(); p[1][0, 0] = w1_entry
            return F.cross_entropy(F.relu(p[0] @ p[1].T + p[2]) @ p[3].T + p[4], targets)

        try:
            _, grads = mlp_forward_backward(*[t.double() for t in params], targets)
            analytic = grads["w1"][0, 0].item()
            label = "your analytic gradient"
        except NotImplementedError:  # not attempted yet: autograd's gradient stands in
            w1 = params[1].double().clone().requires_grad_()
            loss_of_w1 = F.cross_entropy(F.relu(params[0].double() @ w1.T) @ params[3].double().T, targets)
            analytic = torch.autograd.grad(loss_of_w1, w1)[0][0, 0].item()
            label = "autograd's gradient"
        epsilons = [10.0 ** -k for k in range(1, 13)]
        w = params[1][0, 0].item()
        plt.figure(figsize=(6, 3.5))
        for dtype in (torch.float64, torch.float32):
            errors = [abs(((loss_of(w + e, dtype) - loss_of(w - e, dtype)) / (2 * e)).item() - analytic) + 1e-18
                      for e in epsilons]
            plt.loglog(epsilons, errors, marker="o", label=str(dtype).removeprefix("torch."))
        plt.gca().invert_xaxis()
        plt.xlabel("finite-difference step ε"); plt.ylabel(f"|central difference − {label}|")
        plt.title("Why gradcheck runs in float64 (dL/dW1[0,0] of the MLP)"); plt.legend(); plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`mlp_forward_backward`.** The forward keeps `pre` (for the ReLU mask) and `act` (for $\bar W_2$): exactly
        what PyTorch's `ReluBackward0` and `MmBackward0` nodes save. The log-sum-exp subtracts the row max, and the
        softmax reuses the same shifted exponentials. `d_logits[rows, targets] -= 1` subtracts the one-hot without
        building it (an `(N, V)` one-hot for a 128k vocabulary is as big as the logits). Every weight gradient is
        "upstream transposed times input", every bias gradient a sum over rows, every input gradient "upstream times
        weight". Cost: 6 matmul FLOPs per weight per token against 2 in the forward.

        A missing $1/N$ is a learning-rate bug in disguise (gradients $N$ times too large); the input gradient goes
        through `w1`, not `w1.T` (the shapes tell you which: `d_pre` is `(N, h)`, `w1` is `(h, d)`).

        **`SoftmaxFunction`.** The forward works in float32 (or float64) and casts back, as production softmax
        kernels do; `amax` keeps `-inf` entries at exactly 0 after `exp`. It saves the *output*, so the backward
        needs no exponentials at all, and it uses `save_for_backward`, so autograd's version counter guards it.
        *Mistakes*: $\bar s = y \odot \bar y$ (the diagonal of the Jacobian only), the sum over the wrong axis,
        saving with `ctx.probs = ...` (an in-place edit of the output then goes unnoticed), no max subtraction.

        **`per_loss_grad_norms`.** `torch.autograd.grad` walks the same graph as `backward` but hands the gradients
        back instead of adding them to `.grad`, so monitoring never disturbs the step. `retain_graph=not last` keeps
        the saved activations alive exactly as long as a later loss needs them. *Mistakes*: `loss.backward()` (it
        accumulates into every leaf's `.grad`, and the next loss then reads the sum), no `retain_graph` (the second
        loss raises *Trying to backward through the graph a second time*), `retain_graph=True` on every call (the
        activations outlive the function), a sum of per-parameter norms (larger than the global norm), and
        `allow_unused` left out (a loss that does not reach the head raises).

        **What production code does.** PyTorch's `_softmax_backward_data` is this formula; FlashAttention-2's
        backward computes $D_i = \sum_j \bar{O}_{ij} O_{ij}$ once per row for the same reason. Fused linear +
        cross-entropy kernels (Liger-Kernel, Apple's Cut Cross-Entropy) compute $\bar{Z}$ chunk by chunk inside the
        forward and never store the `(N, V)` logits: with $N = 8192$ tokens and $V = 128256$ (Llama 3) those are
        3.9 GiB in float32. Megatron and DeepSpeed write custom `autograd.Function`s for their communication ops
        (all-reduce in the backward of a column-parallel layer) with the same `forward`/`backward` pattern.

        **Where this is used next.** [p02.rmsnorm](../02_PyTorch_Algorithms/02_RMSNorm.ipynb) asks for RMSNorm's
        backward by hand, [p02.cross_entropy](../02_PyTorch_Algorithms/13_Cross_Entropy.ipynb) for a stable
        cross-entropy with `ignore_index`, and Part 03's Triton kernels are wrapped in `autograd.Function`s like
        yours.
    """)
    lesson.mistakes()
    return lesson
