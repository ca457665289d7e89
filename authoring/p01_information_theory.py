"""Source of 01_Hardware_Math_Systems/03_Information_Theory.ipynb (build with `python -m llm_algo build p01.information_theory`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.information_theory",
        path="01_Hardware_Math_Systems/03_Information_Theory.ipynb",
        title_en="Entropy, cross-entropy, KL and perplexity",
        title_zh="熵、交叉熵、KL 散度与困惑度",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=[],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 熵 (entropy) $H(p) = -\sum_i p_i \log p_i$：下一个 token 的平均"意外程度"，单位为奈特 (nats)；
          $0 \log 0 = 0$，被屏蔽的词 (logit 为 $-\infty$) 不能产生 NaN。
        - 交叉熵 (cross-entropy) $H(p, q) = H(p) + \mathrm{KL}(p \,\|\, q)$：语言模型的训练损失就是它。
        - KL 散度不对称：$\mathrm{KL}(p\|q)$（前向，蒸馏）覆盖所有模式；$\mathrm{KL}(q\|p)$（反向，RLHF 的 KL 惩罚）
          只抓一个模式；$q_i = 0$ 而 $p_i > 0$ 时 KL 为 $+\infty$。
        - 困惑度 (perplexity) $= \exp(\text{每个 token 的平均负对数似然})$：按 token 平均，而不是先按序列平均；
          忽略 `-100` 标签和填充位置，并把 logits 与标签错开一位。
        - 两个对角高斯的 KL 有闭式解；蒙特卡洛估计的误差按 $1/\sqrt{N}$ 缩小，检查用标准误差来判断。
        {易错点}

        A language model's training loss is a cross-entropy; the number a paper reports is its exponential, the
        perplexity (GPT-2 at 1.5B parameters: 17.48 on WikiText-103, Radford et al., 2019, Table 3); a distillation
        run minimises a forward KL divergence, and RLHF keeps the policy near its reference with a reverse KL penalty
        (InstructGPT, Ouyang et al., 2022). A VAE's loss has a KL between Gaussians in closed form. These are the same
        four formulas, and the bugs are always the same few: a `0 · log 0` that becomes NaN, the KL's direction, a
        perplexity averaged per sequence instead of per token, labels that are not shifted.

        **You will implement** the entropy of a categorical distribution given by logits (masked entries included),
        the KL divergence between two of them, the perplexity of a real model's next-token predictions with ignored
        labels, and the closed-form KL between diagonal Gaussians with its gradient. **Graded against**
        `torch.distributions` (`Categorical`, `Normal`, `kl_divergence`) in float64, `F.kl_div`, a Hugging Face Llama
        built from a tiny config (its own `loss` with `labels`), a Monte Carlo estimate within five standard errors,
        and closed forms (uniform distributions, the gradient of the Gaussian KL).
    """
    )
    lesson.md(r"""
        ## 1. Entropy: the average surprise

        A model's next-token distribution over a vocabulary of $V$ tokens is $p = \operatorname{softmax}(z)$ for
        logits $z \in \mathbb{R}^V$. The *surprise* of token $i$ is $-\log p_i$ (in nats with the natural log; divide
        by $\ln 2$ for bits). Its expectation is the entropy

        $$
        H(p) = -\sum_{i=1}^{V} p_i \log p_i, \qquad 0 \le H(p) \le \log V ,
        $$

        0 for a one-hot distribution, $\log V$ for the uniform one ($\log 128256 = 11.76$ nats for Llama 3's
        vocabulary). With shapes: logits `(..., V)` → entropy `(...)`, one number per position.

        **Compute it from logits.** $\log p_i = z_i - \operatorname{logsumexp}(z)$ is exact where $\log(\operatorname{softmax}(z))$ underflows
        to $-\infty$ for very negative logits. **And mind $0 \log 0$.** Masked tokens (a grammar constraint, top-$k$
        filtering, a padded vocabulary) have $z_i = -\infty$, so $p_i = 0$ and $\log p_i = -\infty$; their product is
        NaN in floating point, though its limit is 0. Drop those terms (`torch.where(p > 0, ...)` or `torch.xlogy`).

        Work in float32 at least (upcast fp16/bf16 inputs), and return the input's dtype.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.exercise(
        "entropy",
        r'''
        def entropy(logits: torch.Tensor) -> torch.Tensor:
            """Entropy in nats of softmax(logits) over the last dim: (..., V) -> (...), in logits.dtype.
            Entries of -inf are impossible tokens (probability 0) and contribute 0. Differentiable."""
            # TODO: refuse a 0-d or non-floating-point tensor with a ValueError
            # TODO: upcast to at least float32; log-probabilities from the logits (stable)
            # TODO: -sum p * log p over the last dim, with 0 * log 0 = 0; cast back to the input dtype
            ### BEGIN SOLUTION
            if logits.dim() == 0 or not logits.is_floating_point():
                raise ValueError(f"expected floating-point logits (..., V), got {logits.dtype} of shape {tuple(logits.shape)}")
            compute = torch.promote_types(logits.dtype, torch.float32)
            log_p = torch.log_softmax(logits.to(compute), dim=-1)  # (..., V), -inf where masked
            p = log_p.exp()
            terms = torch.where(p > 0, p * log_p, torch.zeros_like(p))  # 0 log 0 = 0, not NaN
            return (-terms.sum(dim=-1)).to(logits.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 2. Cross-entropy and KL divergence

        Coding tokens drawn from $p$ with a code built for $q$ costs on average the **cross-entropy**
        $H(p, q) = -\sum_i p_i \log q_i$ nats per token, more than $H(p)$ by exactly the **Kullback–Leibler divergence**

        $$
        \mathrm{KL}(p \,\|\, q) = \sum_i p_i \log \frac{p_i}{q_i} = H(p, q) - H(p) \;\ge\; 0 ,
        $$

        zero only when $p = q$. A language model's loss is $H(p_{\text{data}}, q_\theta)$ with a one-hot $p$ (the
        actual next token), so minimising cross-entropy is minimising $\mathrm{KL}(p_{\text{data}} \| q_\theta)$: the
        entropy of the data is a floor no model goes below.

        **Direction matters.** Terms with $p_i = 0$ contribute 0 whatever $q_i$ is, while $p_i > 0, q_i = 0$ gives
        $+\infty$. So $\mathrm{KL}(p \| q)$, the *forward* KL (what distillation with soft targets minimises over the
        student $q$), punishes $q$ for missing any mode of $p$: it spreads out. The *reverse*
        $\mathrm{KL}(q \| p)$ (the penalty that keeps an RLHF policy $q$ close to its reference $p$; the objective of
        MiniLLM's distillation, Gu et al., 2023) punishes $q$ for putting mass where $p$ has little: it picks one mode.
        The figure after the exercise shows both.

        Shapes: `p_logits`, `q_logits` `(..., V)` (broadcastable) → `(...)`.
    """)
    lesson.exercise(
        "kl_divergence",
        r'''
        def kl_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
            """KL(softmax(p_logits) || softmax(q_logits)) in nats over the last dim: (..., V) -> (...).
            Terms with p_i = 0 are 0; p_i > 0 with q_i = 0 gives +inf. Result in the promoted input dtype."""
            # TODO: refuse logits whose vocabulary sizes (last dims) differ, with a ValueError
            # TODO: log-probabilities of both in at least float32
            # TODO: sum p * (log p - log q) over the last dim, dropping the terms with p = 0
            ### BEGIN SOLUTION
            if p_logits.shape[-1] != q_logits.shape[-1]:
                raise ValueError(f"vocabulary sizes differ: {p_logits.shape[-1]} and {q_logits.shape[-1]}")
            dtype = torch.promote_types(p_logits.dtype, q_logits.dtype)
            compute = torch.promote_types(dtype, torch.float32)
            log_p = torch.log_softmax(p_logits.to(compute), dim=-1)
            log_q = torch.log_softmax(q_logits.to(compute), dim=-1)
            p = log_p.exp()
            terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))  # p = 0: no contribution
            return terms.sum(dim=-1).to(dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Forward against reverse KL, in a picture

        A bimodal target $p$ on a grid; a single Gaussian $q_{\mu, \sigma}$ fitted to it by gradient descent on
        $\mathrm{KL}(p\|q)$ (your function, or `F.kl_div` before you write it) and on $\mathrm{KL}(q\|p)$.
    """)
    lesson.code(r"""
        grid = torch.linspace(-6, 6, 241, dtype=torch.float64)
        target_logits = torch.logsumexp(torch.stack([-(grid + 2.2) ** 2 / 0.5, -(grid - 2.0) ** 2 / 0.8 + math.log(0.7)]), 0)


        def kl(p_logits, q_logits):
            try:
                return kl_divergence(p_logits, q_logits)
            except NotImplementedError:
                return F.kl_div(q_logits.log_softmax(-1), p_logits.log_softmax(-1), log_target=True, reduction="sum")


        def fit(direction):
            params = torch.tensor([0.5, 0.0], dtype=torch.float64, requires_grad=True)  # mu, log sigma
            optimizer = torch.optim.Adam([params], lr=0.05)
            for _ in range(400):
                q_logits = -0.5 * ((grid - params[0]) / params[1].exp()) ** 2
                loss = kl(target_logits, q_logits) if direction == "forward" else kl(q_logits, target_logits)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
            return (-0.5 * ((grid - params[0]) / params[1].exp()) ** 2).softmax(-1).detach(), float(loss.detach())


        plt.figure(figsize=(6.5, 3.4))
        plt.fill_between(grid, target_logits.softmax(-1), color="0.8", label="p (target)")
        for direction, color in (("forward", "C0"), ("reverse", "C3")):
            q, value = fit(direction)
            name = "KL(p||q), forward" if direction == "forward" else "KL(q||p), reverse"
            plt.plot(grid, q, color=color, label=f"argmin {name}: {value:.3f} nats")
        plt.xlabel("x"); plt.ylabel("probability"); plt.title("Mass-covering (forward) vs mode-seeking (reverse)")
        plt.legend(fontsize=8); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. Perplexity of a real model

        For a sequence $x_1, \dots, x_T$ a causal LM predicts $x_{t+1}$ from the logits at position $t$. Its loss is
        the mean negative log-likelihood over all predicted tokens of the batch, and the **perplexity** is

        $$
        \mathrm{PPL} = \exp\Big(\frac{1}{N} \sum_{(b, t) \text{ valid}} -\log q_\theta(x_{b, t+1} \mid x_{b, \le t})\Big),
        $$

        the effective number of tokens the model hesitates between: a uniform guess over $V$ tokens has PPL $V$. With
        shapes: `logits (B, T, V)`, `labels (B, T)`. Three details make or break it, and Hugging Face's
        `LlamaForCausalLM(..., labels=...)` does all three:

        1. **shift**: logits at positions $0..T-2$ predict labels at positions $1..T-1$ (the last logit predicts a
           token that is not there);
        2. **ignore**: labels equal to `ignore_index` (-100: padding, prompt tokens in fine-tuning) count neither in the
           sum nor in $N$;
        3. **average over tokens**, not per sequence then over sequences: a batch of one 1000-token and one 10-token
           sequence is 1010 predictions, not 2 equally weighted averages.
    """)
    lesson.exercise(
        "perplexity",
        r'''
        def perplexity(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
            """exp(mean next-token NLL) of a causal LM: logits (B, T, V) float, labels (B, T) int64 -> a 0-d float32.
            Position t's logits predict labels[:, t + 1]; labels equal to ignore_index do not count."""
            # TODO: refuse shapes that do not match (logits (B, T, V), labels (B, T)) with a ValueError
            # TODO: shift; log-probabilities in float32; pick the label's; mask the ignored ones
            # TODO: average over all valid tokens of the batch, then exp
            ### BEGIN SOLUTION
            if logits.dim() != 3 or labels.shape != logits.shape[:2]:
                raise ValueError(f"expected logits (B, T, V) and labels (B, T), got {tuple(logits.shape)}, {tuple(labels.shape)}")
            log_q = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V): position t predicts t + 1
            targets = labels[:, 1:]  # (B, T-1)
            valid = targets != ignore_index
            picked = log_q.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T-1); clamp: -100 is no index
            nll = -torch.where(valid, picked, 0.0).sum() / valid.sum()  # mean over valid tokens, not sequences
            return nll.exp()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. KL between Gaussians, and checking a Monte Carlo estimate

        Continuous distributions replace sums by integrals. For two diagonal Gaussians over $\mathbb{R}^D$,
        $p = \mathcal{N}(\mu_p, \operatorname{diag}\sigma_p^2)$ and $q = \mathcal{N}(\mu_q, \operatorname{diag}\sigma_q^2)$,
        the integral has a closed form, a sum over dimensions of

        $$
        \mathrm{KL}(p\|q) = \sum_{d=1}^{D} \left[ \log\frac{\sigma_{q,d}}{\sigma_{p,d}}
        + \frac{\sigma_{p,d}^2 + (\mu_{p,d} - \mu_{q,d})^2}{2\,\sigma_{q,d}^2} - \frac12 \right].
        $$

        It is the KL term of a VAE's loss ($q = \mathcal{N}(0, I)$), and it is differentiable:
        $\partial\,\mathrm{KL} / \partial \mu_p = (\mu_p - \mu_q) / \sigma_q^2$.

        When there is no closed form, one estimates $\mathrm{KL}(p\|q) = \mathbb{E}_{x \sim p}[\log p(x) - \log q(x)]$
        by averaging over $N$ samples. The estimate is random: its standard error is the sample standard deviation of
        $\log p(x) - \log q(x)$ divided by $\sqrt N$, and a correct estimator lands within a few standard errors of the
        truth (beyond 5 with probability below $10^{-6}$). That is how the checks compare your closed form with
        sampling, and how you should read any Monte Carlo number, including the per-token KL estimates that RLHF code
        logs (John Schulman's note *Approximating KL Divergence*, 2020, compares their variances).

        Shapes: all four arguments `(..., D)` (broadcastable), $\sigma > 0$ → `(...)`.
    """)
    lesson.exercise(
        "gaussian_kl",
        r'''
        def gaussian_kl(mu_p: torch.Tensor, sigma_p: torch.Tensor, mu_q: torch.Tensor, sigma_q: torch.Tensor) -> torch.Tensor:
            """KL(N(mu_p, diag sigma_p^2) || N(mu_q, diag sigma_q^2)), summed over the last dim: (..., D) -> (...).
            Differentiable in all four arguments. Raises ValueError if any sigma is not positive."""
            # TODO: refuse sigma <= 0
            # TODO: log(sigma_q / sigma_p) + (sigma_p^2 + (mu_p - mu_q)^2) / (2 sigma_q^2) - 1/2, summed over the last dim
            ### BEGIN SOLUTION
            if bool((sigma_p <= 0).any()) or bool((sigma_q <= 0).any()):
                raise ValueError("standard deviations must be positive")
            variance_ratio = (sigma_p / sigma_q) ** 2
            mean_term = ((mu_p - mu_q) / sigma_q) ** 2
            return 0.5 * (variance_ratio + mean_term - 1 - variance_ratio.log()).sum(dim=-1)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`entropy`.** `log_softmax` gives exact log-probabilities; `exp` of them gives $p$; `torch.where(p > 0, ...)`
        implements $0 \log 0 = 0$ (`torch.special.xlogy(p, p)` does the same). The usual mistakes:
        *NaN on masked tokens* (no zero guard), *`softmax(...).log()`* (underflows to $-\infty$ for logits 100 apart,
        and then NaN again), *no upcast* (bf16 logits give an entropy off by a percent), *the sign* (entropy is
        $-\sum p \log p \ge 0$).

        **`kl_divergence`.** The same guard for $p = 0$; $q = 0$ with $p > 0$ correctly gives $+\infty$ (a model that
        assigns zero probability to an observed token has infinite loss). The mistakes: *the arguments swapped* (the
        checks use pairs with $\mathrm{KL}(p\|q) \ne \mathrm{KL}(q\|p)$), *probabilities instead of log-probabilities*
        in the ratio, *no guard* (NaN on masked tokens). PyTorch's `F.kl_div(input, target)` computes
        $\mathrm{KL}(\text{target} \,\|\, \text{input})$ with `input` as *log*-probabilities: the argument order is the
        reverse of the math, the most common KL bug in practice.

        **`perplexity`.** `logits[:, :-1]` and `labels[:, 1:]` shift; `clamp(min=0)` makes the ignored labels valid
        indices for `gather` (their terms are then zeroed by the mask); dividing by `valid.sum()` averages over tokens.
        The mistakes: *no shift* (the model is graded on copying the current token), *ignored labels counted* (or
        gathered at index -100, which wraps around to the last token), *the mean of per-sequence means*, and *exp
        before averaging* (the mean of per-token perplexities is not the perplexity). Cost: one `log_softmax` over
        $B(T-1)V$ logits: for a 128k vocabulary the logits dominate memory, which is why production losses
        (Liger Kernel, `p03.cross_entropy`) fuse the head matmul with the loss and never store them.

        **`gaussian_kl`.** Written with the variance ratio $r = \sigma_p^2 / \sigma_q^2$:
        $\tfrac12 (r + m^2 - 1 - \log r)$ per dimension. The mistakes: *variances where standard deviations are
        meant* ($\log(\sigma_q/\sigma_p)$ is half of $\log(\sigma_q^2/\sigma_p^2)$), *the direction swapped*, *a mean
        over dimensions instead of a sum*, and a broken graph (`.item()`, `.detach()`: no gradient reaches the
        inputs). `torch.distributions.kl_divergence` registers this closed form (and many others) by pair of types.
    """)
    lesson.mistakes()
    return lesson
