"""Source of 02_PyTorch_Algorithms/13_Cross_Entropy.ipynb (build with `python -m llm_algo build p02.cross_entropy`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.cross_entropy",
        path="02_PyTorch_Algorithms/13_Cross_Entropy.ipynb",
        title_en="Stable cross-entropy: log-sum-exp, ignore_index, label smoothing, z-loss",
        title_zh="数值稳定的交叉熵：log-sum-exp、ignore_index、标签平滑与 z-loss",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p00.optim_and_loss", "p00.autograd"],
    )
    lesson.title(
        intro=r"""
        Every language model is trained on one number: the cross-entropy (交叉熵) between its next-token distribution
        and the token that actually came next, averaged over the batch. For Llama-3 the logits of one batch of
        $8 \times 1024$ tokens over a vocabulary of $128{,}256$ entries are a `(8192, 128256)` tensor: a billion numbers,
        2 GiB in bf16, 4 GiB in float32. Written naively (`softmax`, then `log`, then pick the target) the loss overflows
        on large logits, turns into `inf` when a probability underflows to 0, counts padding tokens as if they were text,
        and stores two more copies of that tensor for the backward pass.

        **You will implement** a numerically stable `logsumexp`, the cross-entropy loss with `ignore_index`, label
        smoothing and the PaLM z-loss, and its gradient with respect to the logits by hand
        ($\operatorname{softmax} - \text{target distribution}$). **Graded against** `torch.logsumexp` and
        `F.cross_entropy` in float64 (with `ignore_index`, `label_smoothing`, `reduction="none"`), the z-loss written
        from builtins, and float64 autograd for the gradient.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：Llama-3 一个 batch 的 logits 是 `(8192, 128256)`，bf16 下 2 GiB；朴素的 softmax→log→取目标会溢出、概率下溢成 0 时得到 `inf`，还会把 padding 当成文本。
        - **稳定 logsumexp**：$\operatorname{lse}(x) = m + \log\sum_j e^{x_j - m}$，$m=\max_j x_j$；整行都是 $-\infty$ 时把 $m$ 换成 0，避免 nan。
        - **损失**：$\text{nll}_t = \operatorname{lse}(x_t) - x_{t,y_t}$；label smoothing 为 $(1-\varepsilon)\,\text{nll} + \varepsilon\,(\operatorname{lse} - \overline{x})$（$\varepsilon$ 分给全部 $V$ 个类）；PaLM z-loss 加 $w\cdot\operatorname{lse}^2$。
        - **ignore_index**：被忽略的 token 损失置零，按有效 token 数求平均，不是按全部 token；在 float32 中计算（logits 是 bf16 也要上转）。
        - **梯度**：$\partial L/\partial x = (\operatorname{softmax}(x) - q)/N_\text{valid}$，$q$ 为（平滑后的）目标分布；z-loss 贡献 $2w\cdot\operatorname{lse}\cdot\operatorname{softmax}(x)$；被忽略的行梯度为 0。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: one loss per token, over a huge vocabulary

        For one token with logits $x \in \mathbb{R}^{V}$ (the output head's row for that position) and target class
        $t \in \{0, \dots, V-1\}$, the model's probability of class $v$ is $p_v = e^{x_v} / \sum_k e^{x_k}$ and the loss is
        the negative log-likelihood of the target:

        $$
        \ell(x, t) = -\log p_t = \underbrace{\log \textstyle\sum_{k} e^{x_k}}_{\operatorname{LSE}(x)} - x_t .
        $$

        Shapes: logits `(B, S, V)` (or already flattened, `(N, V)` with $N = B \cdot S$), targets `(B, S)` of int64 class
        ids; the loss per token is `(B, S)`, and the training loss is its mean over the tokens that count.

        Read the right-hand side again: **the loss never needs the softmax.** It needs one log-sum-exp per row and one
        gathered logit. Computing `softmax(x)` and then `log` is both slower (an extra `(N, V)` tensor) and wrong in
        finite precision:

        - $e^{x}$ overflows float32 for $x > 88.7$ and float16 for $x > 11.1$, so $\sum_k e^{x_k}$ is `inf` on logits a
          trained model really produces;
        - even with the max subtracted, a target whose probability is below float32's smallest number ($\approx
          10^{-45}$, i.e. a logit gap above ~104) gives $p_t = 0$ and $-\log 0 = \infty$. A confident wrong prediction is
          exactly when the loss (and its gradient) matters most.

        ## 2. The stable log-sum-exp

        With $m = \max_k x_k$,

        $$
        \operatorname{LSE}(x) = m + \log \textstyle\sum_k e^{x_k - m} .
        $$

        Every exponent is $\le 0$, the largest term is exactly 1, so the sum lies in $[1, V]$ and its log in
        $[0, \log V]$: no overflow, no $\log 0$. One edge case: a row of all $-\infty$ (a fully masked row) has
        $m = -\infty$ and $x - m = -\infty - (-\infty) = \text{NaN}$. Subtract 0 when $m$ is not finite; then the sum is
        0 and the result is $\log 0 = -\infty$, the correct log-sum-exp of nothing, which is what `torch.logsumexp` returns.

        **Precision.** Compute in float32 whatever the input dtype (float64 stays float64): in bf16 a sum of 128k terms
        keeps 8 bits of mantissa. Megatron, Liger-Kernel and Hugging Face all upcast the logits for the loss.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `logsumexp`: over the last dimension

        `x: (..., V)` → `(...)`, returned in `x`'s dtype, computed in at least float32. No `torch.logsumexp` (that is
        the reference) and no `torch.softmax`.
    """)
    lesson.exercise(
        "logsumexp",
        r'''
        def logsumexp(x: torch.Tensor) -> torch.Tensor:
            """log(sum(exp(x))) over the last dimension, without overflow.

            x: (..., V) float16, bfloat16, float32 or float64 (may contain -inf)
            returns (...), same dtype as x
            """
            # TODO: compute in promote_types(x.dtype, float32)
            # TODO: the row max (..., 1); where it is not finite (an all -inf row), use 0 instead
            # TODO: max + log(sum(exp(x - max))), cast back to x's dtype
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)
            xc = x.to(compute_dtype)                                               # (..., V)
            m = xc.amax(dim=-1, keepdim=True)                                      # (..., 1)
            m = torch.where(m.isfinite(), m, torch.zeros_like(m))                  # all -inf row: subtract 0, not -inf
            lse = m.squeeze(-1) + torch.log(torch.exp(xc - m).sum(dim=-1))        # (...)
            return lse.to(x.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. What goes into a training loss

        **`ignore_index`.** A batch is padded to a common length, and in supervised fine-tuning the prompt tokens are
        not trained on. Their targets are set to `ignore_index` (`-100` in PyTorch and Hugging Face). An ignored token
        contributes 0 to the sum *and* does not count in the denominator:

        $$
        L = \frac{1}{|\mathcal{V}|} \sum_{i \in \mathcal{V}} \ell_i, \qquad \mathcal{V} = \{ i : t_i \ne \texttt{ignore\_index} \}.
        $$

        Dividing by all $N$ tokens instead makes the loss (and the learning rate's effect) depend on how much padding a
        batch happened to have. If *every* token is ignored, $L = 0/0$: `F.cross_entropy` returns NaN, and so will you.

        **Label smoothing** (Szegedy et al., 2016). Instead of the one-hot target, train towards
        $q = (1-\varepsilon)\,\text{one\_hot}(t) + \varepsilon / V$ (the uniform part includes the target class, as
        `F.cross_entropy(label_smoothing=ε)` defines it). The loss is the cross-entropy with $q$:

        $$
        \ell^{\varepsilon}_i = -\sum_v q_v \log p_v = (1-\varepsilon)\,\underbrace{(\operatorname{LSE}(x_i) - x_{i,t_i})}_{\text{NLL}}
        + \varepsilon\,\underbrace{\big(\operatorname{LSE}(x_i) - \tfrac{1}{V}\textstyle\sum_v x_{i,v}\big)}_{-\frac{1}{V}\sum_v \log p_v} .
        $$

        The smoothing term needs only the row mean of the logits: still no softmax.

        **z-loss** (PaLM, Chowdhery et al., 2022, §5). The softmax is invariant to adding a constant to every logit, so
        nothing stops $\operatorname{LSE}(x)$ (the log of the normaliser $Z$) from drifting to large values, where bf16
        loses precision and training can diverge. PaLM adds $w \cdot \operatorname{LSE}(x)^2$ per token with
        $w = 10^{-4}$, pulling $\log Z$ towards 0. It is averaged over the same non-ignored tokens:

        $$
        \ell^{\text{total}}_i = \ell^{\varepsilon}_i + w\,\operatorname{LSE}(x_i)^2 .
        $$

        ## 5. Exercise `cross_entropy`

        Flatten to `(N, V)` rows, compute every term from your `logsumexp` and a `gather` of the target logits, zero the
        ignored tokens, and reduce. Ignored targets (e.g. `-100`) are not valid indices: replace them by 0 before the
        `gather`, then mask. The loss is returned in `promote_types(logits.dtype, float32)`: training frameworks keep the
        loss in float32 even when the logits are bf16. `reduction="none"` returns the per-token losses `(...)` with 0 at
        ignored tokens, like `F.cross_entropy(..., reduction="none")`.
    """)
    lesson.exercise(
        "cross_entropy",
        r'''
        def cross_entropy(
            logits: torch.Tensor,
            targets: torch.Tensor,
            ignore_index: int = -100,
            label_smoothing: float = 0.0,
            z_loss_weight: float = 0.0,
            reduction: str = "mean",
        ) -> torch.Tensor:
            """Cross-entropy from logits, averaged over the tokens whose target is not ignore_index.

            logits:  (..., V) float16, bfloat16, float32 or float64
            targets: (...) int64 class ids in [0, V), or ignore_index
            returns  () for reduction="mean" (NaN if every token is ignored), (...) for reduction="none";
                     dtype promote_types(logits.dtype, float32)
            """
            V = logits.shape[-1]
            # TODO: flatten to (N, V) / (N,) and upcast; mask of valid tokens; targets safe to gather
            # TODO: lse from your logsumexp; the target logit; NLL and the smoothing term; add the z-loss
            # TODO: zero the ignored tokens; "none" -> (...) per token, "mean" -> sum / number of valid tokens
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(logits.dtype, torch.float32)
            x = logits.reshape(-1, V).to(compute_dtype)                            # (N, V)
            t = targets.reshape(-1)                                                # (N,)
            valid = t != ignore_index                                              # (N,)
            safe_t = torch.where(valid, t, torch.zeros_like(t))                    # ignored rows gather class 0, masked below
            lse = logsumexp(x)                                                     # (N,)
            target_logit = x.gather(1, safe_t[:, None]).squeeze(1)                 # (N,)
            nll = lse - target_logit                                               # -log p_t
            smooth = lse - x.mean(dim=-1)                                          # -(1/V) sum_v log p_v
            loss = (1 - label_smoothing) * nll + label_smoothing * smooth + z_loss_weight * lse.pow(2)
            loss = torch.where(valid, loss, torch.zeros_like(loss))               # (N,)
            if reduction == "none":
                return loss.reshape(targets.shape)
            return loss.sum() / valid.sum()                                        # all ignored: 0 / 0 = nan
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Softmax-then-log against the log-sum-exp: a picture

        Run this after your `cross_entropy` passes. It scales a fixed set of float32 logits by a growing factor (a
        model growing more confident, and wrong on some tokens) and plots the mean loss of `-log(softmax(x)[t])` and of
        yours, next to the float64 truth. The naive loss leaves the chart as soon as one target probability underflows
        to 0.
    """)
    lesson.code(r"""
        def naive_cross_entropy(logits, targets):  # the mistake, kept for the picture
            return -torch.log(torch.softmax(logits, dim=-1).gather(1, targets[:, None])).mean()

        base = torch.randn(64, 1000)
        targets = torch.randint(0, 1000, (64,))
        scales = [2.0 ** k for k in range(0, 9)]
        curves = {"softmax then log": [], "log-sum-exp (yours)": [], "float64 truth": []}
        for scale in scales:
            logits = base * scale
            curves["softmax then log"].append(naive_cross_entropy(logits, targets).item())
            curves["float64 truth"].append(F.cross_entropy(logits.double(), targets).item())
            try:
                curves["log-sum-exp (yours)"].append(cross_entropy(logits, targets).item())
            except NotImplementedError:
                curves["log-sum-exp (yours)"].append(float("nan"))  # not attempted yet: no curve
        plt.figure(figsize=(6, 3.5))
        for (name, values), style in zip(curves.items(), ("o", "s-", "k:")):
            finite = [(s, v) for s, v in zip(scales, values) if math.isfinite(v)]
            plt.loglog([s for s, _ in finite], [v for _, v in finite], style, label=name, ms=9 if style == "o" else 5,
                       mfc="none" if style == "o" else None)
        overflowed = [s for s, v in zip(scales, curves["softmax then log"]) if not math.isfinite(v)]
        plt.scatter(overflowed, [1500] * len(overflowed), marker="x", color="C0", label="softmax then log = inf")
        plt.xlabel("logit scale (std of the logits)"); plt.ylabel("mean loss (float32)")
        plt.title("Cross-entropy in float32: the naive loss becomes inf"); plt.legend(fontsize=8); plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 6. The gradient by hand

        Liger-Kernel, Megatron's vocab-parallel loss and the Triton lesson `p03.cross_entropy` never call autograd on
        the loss: they write the gradient themselves, so derive it. With $p = \operatorname{softmax}(x_i)$ and
        $\partial \operatorname{LSE}(x)/\partial x_v = p_v$:

        $$
        \frac{\partial \ell^{\text{total}}_i}{\partial x_{i,v}}
        = \underbrace{p_v - q_v}_{\text{NLL with smoothing}} + \underbrace{2 w \operatorname{LSE}(x_i)\, p_v}_{\text{z-loss}},
        \qquad q = (1-\varepsilon)\,\text{one\_hot}(t_i) + \varepsilon / V,
        $$

        because $-\sum_v q_v \log p_v = \operatorname{LSE}(x) - \sum_v q_v x_v$ when $\sum_v q_v = 1$. For the mean loss,
        divide by $|\mathcal{V}|$; rows of ignored tokens get 0. Without z-loss every row of the gradient sums to 0
        (both $p$ and $q$ sum to 1), which is a good sanity test. Shape: `grad: (..., V)`, same as the logits, in the
        logits' dtype (what autograd returns). If every token is ignored, return zeros: that is what autograd gives
        through `F.cross_entropy` (the forward's NaN comes from $0/0$; nothing flows back).
    """)
    lesson.exercise(
        "cross_entropy_grad",
        r'''
        def cross_entropy_grad(
            logits: torch.Tensor,
            targets: torch.Tensor,
            ignore_index: int = -100,
            label_smoothing: float = 0.0,
            z_loss_weight: float = 0.0,
        ) -> torch.Tensor:
            """d(mean loss)/d(logits) of cross_entropy(logits, targets, ...) with reduction="mean".

            logits: (..., V); targets: (...) int64 or ignore_index
            returns (..., V) in logits.dtype; zeros at ignored tokens (and everywhere if all are ignored)
            """
            V = logits.shape[-1]
            # TODO: flatten and upcast as in the forward; p = softmax from your logsumexp (exp(x - lse))
            # TODO: the smoothed target distribution q: eps / V everywhere, plus (1 - eps) at the target
            # TODO: p - q + 2 * w * lse * p; zero the ignored rows; divide by the number of valid tokens (at least 1)
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(logits.dtype, torch.float32)
            x = logits.reshape(-1, V).to(compute_dtype)                            # (N, V)
            t = targets.reshape(-1)                                                # (N,)
            valid = t != ignore_index                                              # (N,)
            safe_t = torch.where(valid, t, torch.zeros_like(t))
            lse = logsumexp(x)                                                     # (N,)
            probs = torch.exp(x - lse[:, None])                                    # softmax, (N, V)
            q = torch.full_like(x, label_smoothing / V)                            # smoothed target distribution
            q.scatter_add_(1, safe_t[:, None], torch.full_like(lse[:, None], 1 - label_smoothing))
            grad = probs - q + (2 * z_loss_weight * lse)[:, None] * probs          # (N, V)
            grad = torch.where(valid[:, None], grad, torch.zeros_like(grad))
            grad = grad / valid.sum().clamp(min=1)                                 # mean over valid tokens
            return grad.reshape(logits.shape).to(logits.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`logsumexp`.** `amax(keepdim=True)` gives `(..., 1)` so it broadcasts over the vocabulary; the `torch.where`
        replaces a non-finite max by 0 (an all-`-inf` row then gives $\log 0 = -\infty$, a row with `+inf` gives `+inf`,
        both what `torch.logsumexp` returns); adding `m` back is the step people forget when they first subtract it.

        **`cross_entropy`.** Everything is per row: one log-sum-exp, one gathered logit, one row mean of the logits
        (for smoothing). The target's log-probability is `target_logit - lse`, a *difference*, which stays finite
        however small the probability is: that is the whole point of working in log space. `torch.where(valid, ...)`
        zeroes ignored tokens instead of indexing them out, so the per-token output keeps its shape for
        `reduction="none"`, and the mean divides by `valid.sum()`, which makes an all-ignored batch $0/0 = $ NaN,
        exactly like `F.cross_entropy`.

        **`cross_entropy_grad`.** `probs - q` is the famous "softmax minus one-hot", generalised to the smoothed target;
        `scatter_add_` puts $1-\varepsilon$ on top of the uniform $\varepsilon/V$ at each target; the z-loss adds
        $2w\operatorname{LSE}\cdot p$; ignored rows are zeroed and every row is divided by the number of valid tokens
        (clamped to 1 so an all-ignored batch gives zeros, not NaN).

        **The usual mistakes, and why they are wrong**:
        - *No max subtraction* in `logsumexp`: `inf` from logits above 88 (float32) or 11 (float16).
        - *Max subtracted but not added back*: right only when the max is 0.
        - *No guard for an all-`-inf` row*: NaN instead of `-inf`.
        - *Softmax, then log*: the loss is `inf` once a target probability underflows (logit gaps above ~104 in float32).
        - *Mean over all tokens*: padding tokens dilute the loss.
        - *Ignored tokens not masked*: they are trained towards class 0.
        - *Label smoothing over the other $V-1$ classes* (an older convention): not what `label_smoothing=` computes.
        - *Smoothing added on top of the full NLL* ($\ell + \varepsilon \cdot$ smooth) instead of the mixture
          $(1-\varepsilon)\,$NLL $+ \varepsilon\,$smooth.
        - *z-loss not squared*, *gradient without the $1/|\mathcal{V}|$* or divided by all $N$, *one-hot instead of the
          smoothed target* in the gradient, *z-loss gradient without its factor 2*.

        **Cost and memory.** The forward reads the `(N, V)` logits a few times (max, exp-sum, mean, gather) and writes
        `N` numbers; the gradient writes another `(N, V)` tensor. In eager PyTorch each step is a kernel with its own
        HBM round trip, and autograd keeps the float32 log-softmax `(N, V)` alive for the backward: at `8192 × 128256`
        that is 4 GiB on top of the 2 GiB of bf16 logits. Production code avoids it in two ways:
        - **Fused kernels** (Liger-Kernel's `LigerCrossEntropyLoss`, `p03.cross_entropy`): one program per row computes
          the log-sum-exp online over vocabulary chunks, and writes the gradient *in place of the logits* during the
          forward, so the backward is a multiply by the incoming scalar. Nothing of size `(N, V)` is allocated.
        - **Chunking through the output head** (Liger's fused linear cross-entropy, Apple's Cut Cross-Entropy): the
          logits of a chunk of tokens are computed, consumed and dropped, so the full logits tensor never exists.

        With tensor parallelism over the vocabulary (Megatron's `vocab_parallel_cross_entropy`), each GPU holds
        `V / tp` columns: it computes its local max and sum of exponentials, and two all-reduces (a max, then a sum)
        give the global log-sum-exp — the same combine rule as the online softmax. Hugging Face's `LlamaForCausalLM`
        shifts the labels by one and calls `F.cross_entropy(..., ignore_index=-100)` in float32.
    """)
    lesson.mistakes()
    return lesson
