"""Source of 00_Prerequisites/08_Optim_And_Loss.ipynb (build with `python -m llm_algo build p00.optim_and_loss`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.optim_and_loss",
        path="00_Prerequisites/08_Optim_And_Loss.ipynb",
        title_en="Layers, losses and SGD by hand",
        title_zh="手写网络层、损失函数与 SGD 优化器",
        difficulty="medium",
        device="cpu",
        minutes=55,
        prerequisites=["p00.autograd", "p00.module_basics"],
    )
    lesson.title(
        intro=r"""
        A language model's training step is a handful of functions: an embedding lookup, linear layers, an
        activation, a softmax inside attention, a cross-entropy over the vocabulary that skips padding, and an
        optimizer update. Each has one detail that PyTorch decides for you and that you must match to get the same
        numbers: `nn.Linear` stores its weight as `(d_out, d_in)`; SiLU is $x\,\sigma(x)$; `F.cross_entropy` averages
        over the tokens that are *not* `ignore_index`, not over all of them; `torch.optim.SGD` does not dampen the
        first momentum step. Momentum SGD is also the base of Muon, the optimizer Moonshot used to train Kimi K2
        (momentum with Nesterov's look-ahead, then an orthogonalised update).

        **You will implement** `linear` and `embedding`, `softmax` and `silu`, cross-entropy with `ignore_index`, and
        an `SGD` optimizer with momentum, dampening, Nesterov and weight decay. **Graded against** `nn.Linear`,
        `nn.Embedding`, `torch.softmax`, `F.silu` and `F.cross_entropy` (float64 oracles, low-precision baselines,
        `gradcheck`), and `torch.optim.SGD` step for step, including resuming from its `state_dict`.

        **本节要点**
        - `nn.Linear` 的权重形状是 `(d_out, d_in)`：`y = x Wᵀ + b`；embedding 就是按行索引 `W[ids]`，反向时重复的 id 梯度相加。
        - softmax 先减去最大值再取指数；fp16/bf16 输入在 float32 中计算。SiLU(x) = x·σ(x)（LLaMA 的 SwiGLU 用它）。
        - 交叉熵 = logsumexp(z) − z[目标]；`ignore_index` 的位置既不计入损失，也不计入分母（平均只除以有效 token 数）。
        - SGD 动量：`buf = μ·buf + (1−dampening)·g`，但第一步 `buf = g`（PyTorch 不做阻尼）；Nesterov 用 `g + μ·buf`；权重衰减把 `λ·p` 加到梯度上（L2，不是解耦的 AdamW 衰减）。
        - 与 `torch.optim.SGD` 保持相同的状态键 `momentum_buffer`，才能互相加载 `state_dict`。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Four layers in one line each

        | layer | math, shapes | PyTorch |
        | --- | --- | --- |
        | linear | $y = x W^\top + b$; `x (..., d_in)`, `W (d_out, d_in)`, `b (d_out,)` → `(..., d_out)` | `nn.Linear`, `F.linear` |
        | embedding | $y = W[\text{ids}]$; `ids (...)` int64, `W (V, d)` → `(..., d)` | `nn.Embedding`, `F.embedding` |
        | softmax | $y_i = e^{x_i - m} / \sum_j e^{x_j - m}$, $m = \max_j x_j$, along `dim` | `torch.softmax` |
        | SiLU (swish) | $y = x\,\sigma(x) = x / (1 + e^{-x})$ | `F.silu`, `nn.SiLU` |

        Why `(d_out, d_in)`? Row $o$ of $W$ is the weight vector of output unit $o$, so a checkpoint's
        `q_proj.weight` of Llama-3-8B is `(4096, 4096)` and its `k_proj.weight` is `(1024, 4096)`: the *first* axis is
        the output. Transposing the weight when loading is the most common bug in porting a checkpoint by hand,
        and when `d_out == d_in` it raises no error.

        The embedding's backward is a **scatter-add**: the gradient of row $v$ is the sum of the upstream gradients
        at every position where token $v$ occurs. Plain indexing `W[ids]` gives exactly that through autograd.

        SiLU is the gate of SwiGLU (every Llama, Qwen and Mistral MLP): $\operatorname{SiLU}(x W_g^\top) \odot (x W_u^\top)$.
        Its derivative $\sigma(x)(1 + x(1 - \sigma(x)))$ is non-zero for negative inputs, unlike ReLU's.

        ## 2. Cross-entropy with `ignore_index`

        For logits `z (N, V)` and targets `t (N,)`, the loss of position $i$ is
        $\ell_i = \log\sum_v e^{z_{iv}} - z_{i t_i}$. Positions whose target equals `ignore_index` (`-100` by PyTorch's
        convention) are padding, or prompt tokens in supervised fine-tuning: they contribute nothing, **and they do not
        count in the mean**:

        $$
        L = \frac{\sum_{i : t_i \ne \text{ignore}} \ell_i}{\#\{i : t_i \ne \text{ignore}\}} .
        $$

        Dividing by $N$ instead makes the loss (and the gradient) depend on how much padding the batch has: a batch
        that is half padding would train at half the learning rate. When every target is ignored, PyTorch returns
        `nan` (0/0); so will yours.

        ## 3. SGD with momentum, exactly as `torch.optim.SGD`

        Per parameter $p$ with gradient $g$, learning rate $\eta$, momentum $\mu$, dampening $\tau$, weight decay
        $\lambda$ ([PyTorch's documented algorithm](https://pytorch.org/docs/stable/generated/torch.optim.SGD.html)):

        $$
        \begin{aligned}
        g &\leftarrow g + \lambda p && \text{(L2 weight decay: added to the gradient)}\\
        b &\leftarrow \begin{cases} g & \text{first step (no dampening)}\\ \mu b + (1 - \tau) g & \text{afterwards} \end{cases}
          && \text{(only when } \mu \ne 0\text{)}\\
        g &\leftarrow \begin{cases} g + \mu b & \text{Nesterov}\\ b & \text{otherwise} \end{cases}\\
        p &\leftarrow p - \eta g
        \end{aligned}
        $$

        This is the "PyTorch form" of momentum, where the learning rate multiplies the buffer at use time (Sutskever
        et al. 2013 write $v \leftarrow \mu v - \eta g$; the two agree while $\eta$ is constant and differ once a
        schedule changes it). Nesterov's form evaluates the momentum one step ahead, and requires $\mu > 0$ and
        $\tau = 0$. State: one `momentum_buffer` per parameter, the parameter's shape (4 bytes per fp32 parameter:
        32 GB for an 8B model, half of Adam's two moments).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 4. Exercise `linear_and_embedding`

        Write both without `F.linear`, `nn.Linear`, `F.embedding` or `nn.Embedding` (the checks' references). Keep
        the inputs' dtype (no upcast needed: matmul accumulates in float32 internally for fp16/bf16 on every
        backend), accept any number of leading dimensions, and refuse mismatched shapes and out-of-range ids with
        `ValueError`.
    """)
    lesson.exercise(
        "linear_and_embedding",
        r'''
        def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
            """x: (..., d_in), weight: (d_out, d_in) as nn.Linear stores it, bias: (d_out,) or None -> (..., d_out)"""
            # TODO: refuse a weight whose second axis is not x's last, or a bias that is not (d_out,)
            # TODO: y = x W^T (+ b)
            ### BEGIN SOLUTION
            if weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
                raise ValueError(f"weight must be (d_out, {x.shape[-1]}), got {tuple(weight.shape)}")
            if bias is not None and bias.shape != (weight.shape[0],):
                raise ValueError(f"bias must be ({weight.shape[0]},), got {tuple(bias.shape)}")
            y = x @ weight.T                                   # (..., d_out)
            return y if bias is None else y + bias
            ### END SOLUTION


        def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            """ids: (...) int64 in [0, V), weight: (V, d) -> (..., d); gradients flow into weight's rows"""
            # TODO: refuse non-integer ids and ids outside [0, V)
            # TODO: look the rows up
            ### BEGIN SOLUTION
            if ids.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"ids must be int64 or int32 token ids, got {ids.dtype}")
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]):
                raise ValueError(f"ids must lie in [0, {weight.shape[0]}), got [{int(ids.min())}, {int(ids.max())}]")
            return weight[ids]                                 # (..., d)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `softmax_and_silu`

        `softmax(x, dim)` along any dimension and `silu(x)`, both computing in at least float32 and returning the
        input's dtype, both differentiable by autograd (tensor ops only). Softmax must survive scores of $10^4$ and
        rows with `-inf` (masked keys, not a whole row of them). The builtins `torch.softmax`, `F.softmax`,
        `torch.logsumexp`, `F.silu` and `nn.SiLU` are forbidden; `torch.exp` and `torch.sigmoid` are fine.
    """)
    lesson.exercise(
        "softmax_and_silu",
        r'''
        def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
            """exp(x - max) / sum(exp(x - max)) along dim; float32 compute for fp16/bf16; returns x's dtype"""
            # TODO: upcast, subtract the max along dim (keepdim), exponentiate, normalise, cast back
            ### BEGIN SOLUTION
            xc = x.to(torch.promote_types(x.dtype, torch.float32))
            e = (xc - xc.amax(dim=dim, keepdim=True)).exp()
            return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)
            ### END SOLUTION


        def silu(x: torch.Tensor) -> torch.Tensor:
            """x * sigmoid(x), computed in at least float32, returns x's dtype"""
            # TODO: upcast, x * sigmoid(x), cast back
            ### BEGIN SOLUTION
            xc = x.to(torch.promote_types(x.dtype, torch.float32))
            return (xc * torch.sigmoid(xc)).to(x.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `cross_entropy`

        `cross_entropy(logits, targets, ignore_index=-100)` for `logits (N, V)` (any float dtype, computed in float32
        or more) and `targets (N,)` int64: the mean of $\ell_i$ over the positions that are not ignored, as a 0-d
        tensor in float32 (float64 for float64 logits), differentiable with respect to the logits. Refuse targets
        outside `[0, V)` that are not `ignore_index`, and shapes that do not fit, with `ValueError`.
        `F.cross_entropy`, `F.nll_loss`, the softmax builtins and `torch.logsumexp` are forbidden.
    """)
    lesson.exercise(
        "cross_entropy",
        r'''
        def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
            """Mean over non-ignored positions of logsumexp(logits[i]) - logits[i, targets[i]]."""
            # TODO: validate: logits (N, V), targets (N,), every target in [0, V) or == ignore_index
            # TODO: stable log-sum-exp per row in >= float32
            # TODO: pick the target logits of the kept rows (ignored targets are not valid indices!)
            # TODO: sum over kept rows / number of kept rows (nan when none is kept, like PyTorch)
            ### BEGIN SOLUTION
            if logits.dim() != 2 or targets.shape != (logits.shape[0],):
                raise ValueError(f"need logits (N, V) and targets (N,), got {tuple(logits.shape)} and {tuple(targets.shape)}")
            keep = targets != ignore_index                                    # (N,)
            kept = targets[keep]
            if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= logits.shape[1]):
                raise ValueError(f"targets must lie in [0, {logits.shape[1]}) or equal ignore_index={ignore_index}")
            z = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (N, V)
            row_max = z.amax(dim=-1, keepdim=True)                            # (N, 1)
            log_norm = row_max.squeeze(-1) + (z - row_max).exp().sum(dim=-1).log()  # (N,)
            safe_targets = torch.where(keep, targets, torch.zeros_like(targets))    # ignored rows index 0
            target_logit = z.gather(1, safe_targets[:, None]).squeeze(1)      # (N,)
            losses = (log_norm - target_logit) * keep                         # ignored rows -> 0
            return losses.sum() / keep.sum()                                  # 0/0 = nan when all ignored
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `sgd_optimizer`

        Subclass `torch.optim.Optimizer` as in section 3. Validate the hyper-parameters like PyTorch (negative `lr`,
        `momentum` or `weight_decay`, and Nesterov without momentum or with dampening, raise `ValueError`), skip
        parameters whose `.grad` is `None` (no decay, no momentum update), keep the buffer in
        `self.state[p]["momentum_buffer"]` so that `load_state_dict` accepts a `torch.optim.SGD` checkpoint, and never
        create a buffer when `momentum == 0`. `torch.optim.SGD` (the module `torch.optim.sgd`) is forbidden.

        The likely mistakes: dampening the first step (PyTorch copies $g$ into the buffer), Nesterov as $b$ instead
        of $g + \mu b$, the weight decay added after the momentum update, reading `lr` from `self.defaults`
        instead of the parameter's group, and writing into `p.grad` (the weight decay added in place, or a buffer that
        *is* `p.grad` rather than a copy): invisible while every loop calls `zero_grad()` (which sets gradients to
        `None`), wrong as soon as one zeroes them in place with `zero_grad(set_to_none=False)`.
    """)
    lesson.exercise(
        "sgd_optimizer",
        r'''
        class SGD(torch.optim.Optimizer):
            """SGD with momentum, dampening, Nesterov and L2 weight decay, equal to torch.optim.SGD."""

            def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
                # TODO: refuse lr, momentum, weight_decay < 0, and nesterov with momentum <= 0 or dampening != 0
                ### BEGIN SOLUTION
                if lr < 0 or momentum < 0 or weight_decay < 0:
                    raise ValueError(f"invalid SGD hyper-parameters: {lr=}, {momentum=}, {weight_decay=}")
                if nesterov and (momentum <= 0 or dampening != 0):
                    raise ValueError("Nesterov momentum requires a momentum and zero dampening")
                ### END SOLUTION
                defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
                super().__init__(params, defaults)

            @torch.no_grad()
            def step(self, closure=None):
                loss = None
                if closure is not None:
                    with torch.enable_grad():
                        loss = closure()
                # TODO: for every group and every parameter with a gradient, apply section 3's update in place
                ### BEGIN SOLUTION
                for group in self.param_groups:
                    lr, mu, tau = group["lr"], group["momentum"], group["dampening"]
                    for p in group["params"]:
                        if p.grad is None:
                            continue
                        g = p.grad
                        if group["weight_decay"] != 0:
                            g = g.add(p, alpha=group["weight_decay"])              # L2: into the gradient
                        if mu != 0:
                            state = self.state[p]
                            buf = state.get("momentum_buffer")
                            if buf is None:
                                buf = state["momentum_buffer"] = g.clone()         # first step: no dampening
                            else:
                                buf.mul_(mu).add_(g, alpha=1 - tau)
                            g = g.add(buf, alpha=mu) if group["nesterov"] else buf
                        p.add_(g, alpha=-lr)
                ### END SOLUTION
                return loss
    ''',
    )
    lesson.md(r"""
        ### A picture: momentum on an ill-conditioned valley

        The loss $\tfrac12(x^2 + 25 y^2)$ has curvatures 1 and 25 (condition number 25). Plain SGD must keep
        $\eta < 2/25$ for the steep direction and then crawls along the flat one; momentum builds speed along
        the flat direction. The curves use your `SGD` (PyTorch's when yours is not written yet).
    """)
    lesson.code(r"""
        def run(optimizer_class, steps=60, **hyper):
            point = nn.Parameter(torch.tensor([-4.0, 1.0]))
            optimizer = optimizer_class([point], **hyper)
            path = [point.detach().clone()]
            for _ in range(steps):
                optimizer.zero_grad()
                (0.5 * (point[0] ** 2 + 25 * point[1] ** 2)).backward()
                optimizer.step()
                path.append(point.detach().clone())
            return torch.stack(path)

        try:
            run(SGD, steps=1, lr=0.01)
            mine, who = SGD, "yours"
        except NotImplementedError:
            mine, who = torch.optim.SGD, "torch.optim.SGD"
        settings = {"plain, lr 0.07": dict(lr=0.07), "momentum 0.8, lr 0.03": dict(lr=0.03, momentum=0.8),
                    "Nesterov 0.8, lr 0.03": dict(lr=0.03, momentum=0.8, nesterov=True)}
        xs, ys = torch.meshgrid(torch.linspace(-4.5, 1.5, 200), torch.linspace(-1.5, 1.5, 200), indexing="xy")
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.5))
        ax.contour(xs, ys, 0.5 * (xs**2 + 25 * ys**2), levels=15, colors="lightgrey")
        for label, hyper in settings.items():
            path = run(mine, **hyper)
            ax.plot(path[:, 0], path[:, 1], marker=".", ms=3, label=label)
            bx.semilogy((0.5 * (path[:, 0] ** 2 + 25 * path[:, 1] ** 2)).tolist(), label=label)
        ax.set_xlabel("x (curvature 1)"); ax.set_ylabel("y (curvature 25)"); ax.legend(fontsize=8)
        ax.set_title(f"SGD paths ({who})")
        bx.set_xlabel("step"); bx.set_ylabel("loss"); bx.legend(fontsize=8); bx.set_title("loss per step")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`linear` and `embedding`.** `x @ weight.T` contracts `x`'s last axis with the weight's *second*; matmul
        broadcasts over the leading axes, so `(B, T, d_in)` needs no reshape. `weight[ids]` is a gather whose
        backward is an index-add (a scatter-add), which is what `nn.Embedding` does without `sparse=True`.
        *Mistakes*: `x @ weight` (only "works" when the weight
        is square, and then it is silently transposed), a bias added on the wrong axis, no id validation.

        **`softmax` and `silu`.** The max subtraction changes nothing mathematically and everything numerically;
        the float32 compute is what PyTorch's kernels do for half-precision inputs. `torch.sigmoid` is stable for
        both signs (it never evaluates $e^{+x}$ for large $x$). *Mistakes*: the max taken over the wrong axis or
        over the whole tensor (a stable-looking softmax that underflows to 0/0 on rows far below the global max),
        no upcast, SiLU as $\sigma(x)$ alone.

        **`cross_entropy`.** The ignored rows are replaced by index 0 before `gather` (their value is thrown away,
        but an index of $-100$ would fail), their losses multiplied by 0, and the mean divides by the number of kept
        rows. *Mistakes*: dividing by $N$; indexing with `-100` (advanced indexing `z[rows, targets]` wraps it
        around to column $V - 100$ without a word, `gather` refuses it, a GPU kernel asserts); a log-sum-exp without the max.

        **`SGD`.** The first-step copy is why `torch.optim.SGD` with `dampening=0.5` does *not* scale the first
        update by 0.5. Weight decay here is L2 (added to the gradient, so it passes through the momentum); compare
        AdamW's decoupled decay in [p02.adamw](../02_PyTorch_Algorithms/14_AdamW.ipynb). The update allocates
        nothing but the buffer: `g.add(...)` copies only when decay or Nesterov asks for it.

        **What production code does.** PyTorch runs these updates with `foreach=True` (one kernel per operation
        over all tensors of a group) or `fused=True`; `torch.compile` fuses the whole step. Fused cross-entropy
        kernels (Liger-Kernel, Cut Cross-Entropy) never materialise the `(N, V)` log-probabilities, which for
        $N = 8192$ tokens and a 128k vocabulary are 3.9 GiB in float32. Muon replaces the update $g$ by an
        orthogonalised Nesterov momentum for the matrix parameters and keeps AdamW for embeddings and norms.

        **Where this is used next.** [p02.swiglu](../02_PyTorch_Algorithms/03_SwiGLU.ipynb) gates with your SiLU,
        [p02.cross_entropy](../02_PyTorch_Algorithms/13_Cross_Entropy.ipynb) adds label smoothing and z-loss to
        this loss, and [p02.adamw](../02_PyTorch_Algorithms/14_AdamW.ipynb) is the optimizer LLMs actually use, built
        the same way as your `SGD`.
    """)
    lesson.mistakes()
    return lesson
