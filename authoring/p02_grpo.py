"""Source of 02_PyTorch_Algorithms/27_GRPO.ipynb (build with `python -m llm_algo build p02.grpo`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.grpo",
        path="02_PyTorch_Algorithms/27_GRPO.ipynb",
        title_en="GRPO, Dr. GRPO and DAPO: policy gradients without a critic",
        title_zh="GRPO、Dr. GRPO 与 DAPO：无价值网络的策略梯度",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p02.dpo"],
    )
    lesson.title(
        intro=r"""
        PPO for language models trains a value network as large as the policy to estimate each token's advantage.
        GRPO (Shao et al., 2024, *DeepSeekMath*) drops it: sample a *group* of $G$ answers to the same prompt, score
        them, and use each answer's reward relative to its group as the advantage of all its tokens. DeepSeekMath-RL
        7B went from 82.9% to 88.2% on GSM8K and from 46.8% to 51.7% on MATH with it, and DeepSeek-R1 (2025) was
        trained with GRPO at scale. Two follow-ups found biases in its details: Dr. GRPO (Liu et al., 2025,
        *Understanding R1-Zero-Like Training: A Critical Perspective*) showed that dividing by each answer's length
        favours long wrong answers and that dividing by the group's standard deviation re-weights questions; DAPO
        (Yu et al., 2025) raised the upper clip bound ("clip-higher") against entropy collapse and averaged the loss
        over *tokens* instead of answers, reaching 50 points on AIME 2024 with Qwen2.5-32B. TRL's `GRPOTrainer`
        implements all of them as options, and so will you.

        **You will implement** group-relative advantages (scaled by the group's standard deviation, the batch's, or
        not at all), the per-token clipped surrogate with asymmetric clipping and the k3 KL estimator, and the three
        ways of averaging a per-token loss (GRPO's per-answer mean, DAPO's token mean, Dr. GRPO's constant).
        **Graded against** float64 loop specs written from the papers, TRL 1.16.0's `grpo_trainer.py` formulas
        (lines cited below), `torch.autograd.gradcheck`, a sampling check of k3's unbiasedness, and a constructed
        example where GRPO and Dr. GRPO push one token's probability in opposite directions.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **组相对优势**：同一提示词采样 $G$ 个回答，$\hat A_i = (r_i - \operatorname{mean}(r)) / (\operatorname{std}(r) + \epsilon)$，该回答所有 token 共享这个优势；不需要价值网络（critic）。
        - **裁剪目标**：$\rho_t = \pi_\theta / \pi_\text{old}$，逐 token 损失 $-\min(\rho_t \hat A, \operatorname{clip}(\rho_t, 1-\varepsilon_\text{low}, 1+\varepsilon_\text{high})\hat A)$；DAPO 的 clip-higher 取 $\varepsilon_\text{high} = 0.28 > \varepsilon_\text{low} = 0.2$。
        - **KL 项（k3 估计）**：$\frac{\pi_\text{ref}}{\pi_\theta} - \log\frac{\pi_\text{ref}}{\pi_\theta} - 1 \ge 0$，对 $\pi_\theta$ 的采样是 KL 的无偏估计。
        - **三种平均**：GRPO 先对每个回答按长度取平均再对回答平均；DAPO 对所有 token 平均；Dr. GRPO 除以常数（批大小 × 最大生成长度）。
        - **长度偏差**：按回答长度归一化会让长的错误回答每个 token 受罚更轻；本节构造了一个 GRPO 与 Dr. GRPO 梯度方向相反的例子。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Advantages from a group instead of a critic

        For each prompt $q$ the trainer samples $G$ completions $o_1, \dots, o_G$ from the current policy (TRL's
        `num_generations`, 8 by default; DeepSeekMath used 64) and scores them with a reward function, often a rule
        (1 if the final answer is right, else 0). TRL stores the rewards of a batch as one vector `(N,)`, $N = P
        \cdot G$, the $G$ completions of a prompt *contiguous* (`rewards.view(-1, num_generations)`, TRL 1.16.0
        `grpo_trainer.py` line 2765). The advantage of completion $i$ of its group $g$:

        $$
        \hat A_i = \frac{r_i - \operatorname{mean}_{j \in g}(r_j)}{\operatorname{std}_{j \in g}(r_j) + 10^{-4}}
        \quad\text{(GRPO)},\qquad
        \hat A_i = r_i - \operatorname{mean}_{j \in g}(r_j) \quad\text{(Dr. GRPO)} .
        $$

        TRL (lines 2765–2787) uses the *unbiased* standard deviation (Bessel's $G-1$, its `nanstd`) and $10^{-4}$
        inside the denominator, so a group whose answers all got the same reward has advantage 0 for every answer
        (no signal, no NaN); `scale_rewards="batch"` divides by the standard deviation of the whole batch instead
        (line 2777) and `"none"` not at all. Dr. GRPO's objection to the group std: a question that nearly every
        sample solves (or fails) has a small std, so its few differing answers get huge advantages; the std
        re-weights questions by difficulty, which is not part of the policy gradient.

        ## 2. The clipped surrogate and the KL term, per token

        For completion $i$ and its token $t$, with per-token log-probabilities of the current policy $\log\pi_\theta$,
        of the policy that sampled ($\log\pi_\text{old}$) and of the frozen reference ($\log\pi_\text{ref}$), all
        `(N, T)`:

        $$
        \rho_{i,t} = e^{\log\pi_\theta - \log\pi_\text{old}}, \qquad
        \ell_{i,t} = -\min\!\big(\rho_{i,t}\hat A_i,\ \operatorname{clip}(\rho_{i,t}, 1-\varepsilon_\text{low}, 1+\varepsilon_\text{high})\,\hat A_i\big)
        + \beta\, \underbrace{\big(e^{\log\pi_\text{ref} - \log\pi_\theta} - (\log\pi_\text{ref} - \log\pi_\theta) - 1\big)}_{k_3}.
        $$

        The `min` makes the objective *pessimistic*: once the ratio has moved by more than $\varepsilon$ in the
        direction the advantage wants, the clipped branch is the smaller one and its gradient is 0, so one batch
        cannot move the policy far; in the other direction the unclipped branch is kept. GRPO and PPO use
        $\varepsilon_\text{low} = \varepsilon_\text{high} = 0.2$. DAPO's **clip-higher** sets
        $\varepsilon_\text{high} = 0.28$: with a symmetric clip, a token of probability 0.01 can only grow to 0.012
        in one update while a token of probability 0.9 can reach 1.08 (capped at 1), so exploration tokens stay rare
        and the policy's entropy collapses. TRL: `epsilon`, `epsilon_high` (lines 945–946, 3113–3119).

        **k3** (Schulman, 2020, *Approximating KL Divergence*): for $x \sim \pi_\theta$ and $u = \pi_\text{ref}(x) /
        \pi_\theta(x)$, $\mathbb{E}[u] = 1$, so $\mathbb{E}[u - 1 - \log u] = \mathbb{E}[-\log u] = \mathrm{KL}(\pi_\theta
        \| \pi_\text{ref})$: unbiased, and every sample is $\ge 0$ because $u - 1 \ge \log u$. GRPO adds it to the loss
        rather than to the reward (TRL lines 3100–3102 and 3149–3150). TRL's default is `beta=0.0` (no reference
        model loaded; its docs cite DeepSeek-R1's 0.001), and DAPO and Dr. GRPO drop the KL term for rule-based
        rewards, where there is no learned reward model to over-optimise.

        ## 3. Three ways to average: where the length bias comes from

        With the completion mask $m$ `(N, T)` (1 on the $|o_i|$ real tokens of completion $i$), TRL 1.16.0 lines
        3153–3170:

        $$
        \mathcal{L}_\text{GRPO} = \frac1N \sum_i \frac{1}{|o_i|}\sum_t m_{i,t}\,\ell_{i,t}, \qquad
        \mathcal{L}_\text{DAPO} = \frac{\sum_{i,t} m_{i,t}\,\ell_{i,t}}{\sum_{i,t} m_{i,t}}, \qquad
        \mathcal{L}_\text{Dr.GRPO} = \frac{\sum_{i,t} m_{i,t}\,\ell_{i,t}}{N \cdot L_\text{max}} .
        $$

        In GRPO each *answer* weighs the same, so each token of a long answer weighs less: a long wrong answer
        ($\hat A < 0$) is penalised less per token than a short wrong one, and the model learns that being wrong at
        length is cheaper. Liu et al. observed exactly this: the length of incorrect responses keeps growing under
        GRPO. The policy-gradient theorem says the gradient of the expected reward is $\mathbb{E}\big[\hat A\,
        \sum_t \nabla\log\pi(o_t)\big]$, a *sum* over the tokens; Dr. GRPO divides that sum by a constant
        ($L_\text{max}$, TRL's `max_completion_length`), and DAPO by the batch's token count, which is constant
        within a batch.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 4. Exercise `group_advantages`

        `rewards: (N,)`, `N = num_prompts * group_size`, groups contiguous. `scale` is `"group"` (GRPO, TRL's
        default), `"batch"` (the group's mean, the whole batch's std) or `"none"` (Dr. GRPO). Standard deviations are
        unbiased (divide by $n - 1$), and $10^{-4}$ is added to them, as TRL does. Refuse a `group_size` below 2, a
        length that is not a multiple of it, and an unknown `scale`, with a `ValueError`.
    """)
    lesson.exercise(
        "group_advantages",
        r'''
        def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "group") -> torch.Tensor:
            """Advantage of each completion relative to its group. rewards: (N,) float -> (N,), same dtype."""
            # TODO: validate group_size >= 2, N % group_size == 0 and scale in ("group", "batch", "none")
            # TODO: view as (num_prompts, group_size); subtract each group's mean
            # TODO: divide by (unbiased std + 1e-4): each group's, or the whole batch's; not at all for "none"
            ### BEGIN SOLUTION
            if group_size < 2:
                raise ValueError(f"a group needs at least 2 completions to compare, got group_size={group_size}")
            if rewards.dim() != 1 or rewards.numel() % group_size != 0:
                raise ValueError(f"rewards must be (N,) with N a multiple of {group_size}, got {tuple(rewards.shape)}")
            if scale not in ("group", "batch", "none"):
                raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
            grouped = rewards.view(-1, group_size)                                # (P, G): a prompt's samples in a row
            centred = grouped - grouped.mean(dim=1, keepdim=True)                 # (P, G)
            if scale == "group":
                centred = centred / (grouped.std(dim=1, keepdim=True) + 1e-4)     # unbiased std, per group
            elif scale == "batch":
                centred = centred / (rewards.std() + 1e-4)                        # one std for the batch
            return centred.reshape(-1)                                            # (N,)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `clipped_token_loss`

        Per-token loss `(N, T)` from the three log-probability tensors `(N, T)` and the advantages `(N,)` (one per
        completion, broadcast over its tokens). `epsilon_high=None` means symmetric clipping. With `beta > 0` add
        $\beta\, k_3$, which needs `ref_logps`. Padding is not your concern here (the next exercise masks it); the
        values at padded positions may be anything finite. Refuse mismatched shapes, a negative epsilon, and
        `beta > 0` without `ref_logps`, with a `ValueError`.
    """)
    lesson.exercise(
        "clipped_token_loss",
        r'''
        def clipped_token_loss(
            logps: torch.Tensor,
            old_logps: torch.Tensor,
            advantages: torch.Tensor,
            epsilon_low: float = 0.2,
            epsilon_high: float | None = None,
            ref_logps: torch.Tensor | None = None,
            beta: float = 0.0,
        ) -> torch.Tensor:
            """-min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) + beta * k3, per token: (N, T)."""
            # TODO: validate shapes (logps, old_logps and ref_logps (N, T); advantages (N,)), epsilons >= 0,
            #       and ref_logps present when beta > 0
            # TODO: ratio = exp(logps - old_logps); both branches with advantages broadcast over T; -min of them
            # TODO: k3 = exp(ref - logps) - (ref - logps) - 1, times beta
            ### BEGIN SOLUTION
            epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
            if old_logps.shape != logps.shape or logps.dim() != 2 or advantages.shape != logps.shape[:1]:
                raise ValueError(
                    f"expected logps and old_logps (N, T) and advantages (N,), got {tuple(logps.shape)}, "
                    f"{tuple(old_logps.shape)} and {tuple(advantages.shape)}"
                )
            if epsilon_low < 0 or epsilon_high < 0:
                raise ValueError(f"clip ranges must be >= 0, got {epsilon_low} and {epsilon_high}")
            if beta > 0 and (ref_logps is None or ref_logps.shape != logps.shape):
                raise ValueError("beta > 0 needs ref_logps of logps' shape for the KL term")
            ratio = torch.exp(logps - old_logps)                                   # (N, T)
            adv = advantages.unsqueeze(1)                                          # (N, 1): one per completion
            unclipped = ratio * adv
            clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv
            loss = -torch.min(unclipped, clipped)                                  # pessimistic bound
            if beta > 0:
                log_u = ref_logps - logps                                          # log(pi_ref / pi_theta)
                loss = loss + beta * (torch.exp(log_u) - log_u - 1)                # k3 >= 0, unbiased
            return loss
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The clipped objective, in a picture

        The objective $\min(\rho\hat A, \operatorname{clip}(\rho)\hat A)$ (the negative of your loss) against the ratio
        for a positive and a negative advantage, with GRPO's symmetric $\varepsilon = 0.2$ and DAPO's clip-higher
        $(0.2, 0.28)$. Where a curve is flat, the gradient is zero: the update has gone far enough for this token.
    """)
    lesson.code(r"""
        ratio = torch.linspace(0.5, 1.6, 221, dtype=torch.float64)
        logps = ratio.log()[None]                                 # (1, 221): one completion, 221 "tokens"
        old = torch.zeros_like(logps)
        fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.3), sharex=True)
        try:
            for ax, advantage in zip(axes, (1.0, -1.0)):
                adv = torch.tensor([advantage], dtype=torch.float64)
                for name, high, style in (("GRPO ε = 0.2", None, "-"), ("DAPO ε = (0.2, 0.28)", 0.28, "--")):
                    ax.plot(ratio, -clipped_token_loss(logps, old, adv, 0.2, high)[0], style, label=name)
                ax.plot(ratio, ratio * advantage, ":", color="grey", label="ρ·Â (no clip)")
                ax.set_title(f"Â = {advantage:+g}"); ax.set_xlabel("ratio ρ = π_θ / π_old"); ax.legend(fontsize=8)
            axes[0].set_ylabel("objective (−loss)")
            plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("clipped_token_loss not attempted yet")
    """)
    lesson.md(r"""
        ## 6. Exercise `aggregate_loss`

        Reduce the per-token loss `(N, T)` to a scalar with the completion mask `(N, T)` (bool or 0/1):
        `"grpo"` (per-completion means, then the mean over completions; a completion without tokens counts as 0 over
        a length clamped to 1, as TRL does), `"dapo"` (sum over all real tokens divided by their number) or
        `"dr_grpo"` (sum divided by `N * max_completion_length`). Select the real tokens (`torch.where`), so a
        non-finite value at a padded position cannot leak in. Refuse an unknown `loss_type`, a mask of another
        shape, and for `"dr_grpo"` a missing `max_completion_length` or one shorter than a completion in the batch.
    """)
    lesson.exercise(
        "aggregate_loss",
        r'''
        def aggregate_loss(
            per_token_loss: torch.Tensor,
            completion_mask: torch.Tensor,
            loss_type: str = "grpo",
            max_completion_length: int | None = None,
        ) -> torch.Tensor:
            """Scalar loss from (N, T) per-token losses and the (N, T) completion mask."""
            # TODO: validate loss_type, the mask's shape, and max_completion_length for "dr_grpo"
            # TODO: zero the padded positions by selection; token counts per completion
            # TODO: grpo: mean_i(sum_t / max(|o_i|, 1)); dapo: sum / max(total tokens, 1); dr_grpo: sum / (N * L_max)
            ### BEGIN SOLUTION
            if loss_type not in ("grpo", "dapo", "dr_grpo"):
                raise ValueError(f"loss_type must be 'grpo', 'dapo' or 'dr_grpo', got {loss_type!r}")
            if completion_mask.shape != per_token_loss.shape or per_token_loss.dim() != 2:
                raise ValueError(
                    f"expected per_token_loss and completion_mask (N, T), got {tuple(per_token_loss.shape)} "
                    f"and {tuple(completion_mask.shape)}"
                )
            mask = completion_mask.bool()
            lengths = mask.sum(dim=1)                                              # (N,) |o_i|
            if loss_type == "dr_grpo" and (max_completion_length is None or max_completion_length < lengths.max()):
                raise ValueError(
                    f"dr_grpo divides by N * max_completion_length, which must be >= every completion's length "
                    f"({int(lengths.max())}); got {max_completion_length}"
                )
            masked = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))  # (N, T)
            if loss_type == "grpo":
                return (masked.sum(dim=1) / lengths.clamp(min=1)).mean()           # each completion weighs 1/N
            if loss_type == "dapo":
                return masked.sum() / lengths.sum().clamp(min=1)                   # each token weighs the same
            return masked.sum() / (per_token_loss.shape[0] * max_completion_length)  # a constant: Dr. GRPO
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The length bias, constructed

        One prompt, two completions over a unigram policy (one logit per token id, the same at every position,
        uniform over 7 ids at the start, so $\pi(\text{wait}) = 1/7$). The correct answer (reward 1) is 4 tokens
        long and says "wait" once; the wrong one (reward 0) is 20 tokens and says "wait" 4 times. The advantages
        are $\pm 0.5$ (Dr. GRPO's, no std). Which way does one gradient step move the logit of "wait"? For a softmax,
        $\partial \log\pi(o)/\partial\theta_\text{wait} = \mathbb{1}[o = \text{wait}] - \pi(\text{wait})$, so answer $i$,
        with $c_i$ "wait"s in $|o_i|$ tokens each of weight $w_i$, contributes $\hat A_i\, w_i\, (c_i - |o_i|\,
        \pi(\text{wait}))$ to the step. Under GRPO $w_i = 1/(N|o_i|)$, and because the advantages sum to 0 the
        $\pi$ term cancels: the *density* decides, $0.5 \cdot \tfrac14 - 0.5 \cdot \tfrac{4}{20} > 0$, up. Under
        Dr. GRPO (and DAPO) every token weighs the same: $0.5\,(1 - \tfrac47) - 0.5\,(4 - \tfrac{20}{7}) < 0$, down,
        which is the sign of the true policy gradient $\sum_i \hat A_i \sum_t \nabla \log\pi(o_{i,t})$. The bars
        below come from autograd through your `clipped_token_loss` and `aggregate_loss`.
    """)
    lesson.code(r"""
        vocab = ["wait", "so", "the", "answer", "is", "42", "7"]
        WAIT = 0
        correct = torch.tensor([WAIT, 3, 4, 5])                                          # 4 tokens, "wait" once
        wrong = torch.tensor([WAIT, 1, 2, 1, WAIT, 2, 1, 2, WAIT, 1, 2, 1, WAIT, 1, 2, 1, 3, 4, 6, 2])  # 20 tokens, 4 times
        T = len(wrong)
        tokens = torch.stack([torch.cat([correct, torch.full((T - len(correct),), 6)]), wrong])  # (2, T), padded
        mask = torch.stack([torch.arange(T) < len(correct), torch.ones(T, dtype=torch.bool)])               # (2, T)
        advantages = torch.tensor([0.5, -0.5], dtype=torch.float64)                      # rewards 1, 0 minus their mean

        def wait_gradient(loss_type):
            logits = torch.zeros(len(vocab), dtype=torch.float64, requires_grad=True)      # the unigram policy
            logps = torch.log_softmax(logits, 0)[tokens]                                  # (2, T)
            per_token = clipped_token_loss(logps, logps.detach(), advantages)             # ratio 1: first step
            loss = aggregate_loss(per_token, mask, loss_type, max_completion_length=T)
            (grad,) = torch.autograd.grad(loss, logits)
            return -grad[WAIT].item()                                                     # the descent direction

        try:
            steps = {name: wait_gradient(name) for name in ("grpo", "dapo", "dr_grpo")}
            plt.figure(figsize=(5.5, 3))
            plt.bar(list(steps), list(steps.values()), color=["C3" if v > 0 else "C0" for v in steps.values()])
            plt.axhline(0, color="k", lw=0.8); plt.ylabel('−∂L/∂logit("wait")')
            plt.title('one step on the logit of "wait": GRPO says up, the others down'); plt.tight_layout(); plt.show()
            print({k: round(v, 4) for k, v in steps.items()})
        except NotImplementedError:
            print("clipped_token_loss / aggregate_loss not attempted yet")
    """)
    lesson.md(r"""
        ### A capstone: GRPO on a toy verifiable task

        Everything together, on a task with a rule-based reward. The policy is a table of logits, one row per position
        (8 positions over 11 tokens: the digits 0–9 and an end token), sampled token by token; a completion is
        rewarded 1 if its digits sum to exactly 10 before the end token (or the 8-token limit), else 0. Each step
        samples 4 groups of 16 completions, computes your `group_advantages`, `clipped_token_loss` (ratio 1: one
        update per batch) and `aggregate_loss`, and takes one Adam step. With the reference solutions the mean
        reward climbs from 0 to about 0.97 within 100 steps under all three averages, and the completions shrink
        from 6 tokens to 3 (two digits and the end token): on a task this small the averages behave alike. The length
        bias of section 3 needs wrong answers that can grow long, over thousands of steps (Liu et al.'s R1-Zero-like
        runs).
    """)
    lesson.code(r"""
        EOS, VOCAB, MAX_LEN = 10, 11, 8

        def train_toy_policy(loss_type, steps=150, group_size=16, num_groups=4, seed=0):
            torch.manual_seed(seed)
            logits = torch.zeros(MAX_LEN, VOCAB, requires_grad=True)       # the policy: (position, token)
            optimizer = torch.optim.Adam([logits], lr=0.05)
            positions = torch.arange(MAX_LEN)
            history = []
            for _ in range(steps):
                with torch.no_grad():                                       # sample N = groups * G completions
                    probs = torch.softmax(logits, -1).expand(num_groups * group_size, MAX_LEN, VOCAB)
                    tokens = torch.multinomial(probs.reshape(-1, VOCAB), 1).view(-1, MAX_LEN)  # (N, L)
                    is_end = tokens == EOS
                    end = torch.where(is_end.any(1), is_end.float().argmax(1), torch.full_like(tokens[:, 0], MAX_LEN))
                    mask = positions[None] <= end[:, None]                  # real tokens, the end token included
                    digit_sum = torch.where(mask & ~is_end, tokens, 0).sum(1)
                    rewards = (digit_sum == 10).float()                     # the verifier
                logps = torch.log_softmax(logits, -1)[positions[None], tokens]  # (N, L)
                advantages = group_advantages(rewards, group_size, "group" if loss_type == "grpo" else "none")
                per_token = clipped_token_loss(logps, logps.detach(), advantages)
                loss = aggregate_loss(per_token, mask, loss_type, max_completion_length=MAX_LEN)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                history.append((rewards.mean().item(), mask.sum(1).float().mean().item()))
            return history

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: one thread beats two (no hand-offs); restored below
        fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.2))
        try:
            for loss_type in ("grpo", "dapo", "dr_grpo"):
                history = train_toy_policy(loss_type)
                axes[0].plot([h[0] for h in history], label=loss_type)
                axes[1].plot([h[1] for h in history], label=loss_type)
            axes[0].set_ylabel("mean reward"); axes[1].set_ylabel("mean completion length (tokens)")
            for ax in axes:
                ax.set_xlabel("step"); ax.legend()
            plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("the three exercises are needed for the capstone")
        torch.set_num_threads(threads)
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`group_advantages`.** `view(-1, group_size)` relies on the contiguous layout; a trainer that interleaves
        prompts (completion $j$ of every prompt, then $j+1$) needs `view(group_size, -1).T`, and mixing the two up
        compares answers to *other prompts'* answers, a bug that trains without crashing. `std` is unbiased by default
        in PyTorch, as in TRL's `nanstd`. The $10^{-4}$ turns an all-equal group into zeros: with binary rewards
        and $G = 8$, a question that the model always (or never) solves gives no signal, which is why DAPO
        *over-samples* and drops such groups ("dynamic sampling") to keep the batch full of useful prompts.

        **`clipped_token_loss`.** The ratio is computed in log space and exponentiated once. On the first update
        after sampling, $\pi_\theta = \pi_\text{old}$, so $\rho = 1$ and the loss is $-\hat A$ per token, with gradient
        $-\hat A\,\nabla\log\pi_\theta$: plain REINFORCE with a group baseline. TRL skips the old log-probabilities
        entirely in that case (`old_per_token_logps = per_token_logps.detach()`, line 3066); clipping only matters when a
        batch is reused for several updates (`num_iterations > 1`) or when the sampler (vLLM) and the trainer
        disagree numerically.

        **`aggregate_loss`.** Three denominators, one numerator. `torch.where` instead of `* mask` keeps a NaN or
        inf at a padded position (an exploded ratio on a token that was never sampled) out of the sum.

        **The usual mistakes, and why they are wrong**: the population std ($G$ instead
        of $G-1$), no $10^{-4}$ (NaN for all-equal groups), the batch mean instead of each group's, the interleaved
        view, `"none"` still dividing; `max` instead of `min` (optimistic), the clip applied without the min, a
        symmetric clip that ignores `epsilon_high`, the ratio (or k3's) as a quotient of two `exp`s (0/0 for float32
        log-probs near $-120$, which a rare token of a long completion reaches), k3's log-ratio flipped or its $-1$
        dropped, the KL subtracted; the
        per-token mean used for GRPO, Dr. GRPO dividing by the token count, padding multiplied in.

        **In production.** TRL's `GRPOTrainer` (default `loss_type="dapo"` in 1.16), verl and OpenRLHF generate the
        group with vLLM, compute rewards with rule-based verifiers or reward models, and run the loss above with
        sequence packing and micro-batching; the entire memory saving against PPO is the missing value network.
        Variants keep appearing as `loss_type` values: GSPO (sequence-level ratios,
        `importance_sampling_level="sequence"`), CISPO (clipped, detached importance weights), SAPO (soft gates
        instead of the hard clip). The reference log-probabilities need one more forward pass of a frozen model per
        batch, which is why many recipes now set $\beta = 0$ and drop the reference altogether.
    """)
    lesson.mistakes()
    return lesson
