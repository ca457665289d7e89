"""Source of 02_PyTorch_Algorithms/26_PPO.ipynb (build with `python -m llm_algo build p02.ppo`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.ppo",
        path="02_PyTorch_Algorithms/26_PPO.ipynb",
        title_en="PPO for LLMs: GAE, clipped losses, KL estimators",
        title_zh="面向大模型的 PPO：GAE、裁剪损失与 KL 估计量",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p02.reward_model", "p02.dpo"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - RLHF 中的 PPO：每个生成的 token 是一步动作；奖励 = 每个 token 上的 KL 惩罚 $-\beta\,(\log\pi - \log\pi_\text{ref})$，再在最后一个真实 token 上加奖励模型的分数。
        - GAE（广义优势估计）：$\delta_t = r_t + \gamma V_{t+1}(1-d_t) - V_t$，$A_t = \delta_t + \gamma\lambda(1-d_t)A_{t+1}$，从后往前递推；回合结束（done）处不能向后自举；优势不带梯度。
        - 裁剪策略损失：$-\min(\rho A,\ \mathrm{clip}(\rho, 1-\varepsilon, 1+\varepsilon)A)$，$\rho = e^{\log\pi - \log\pi_\text{old}}$；裁剪价值损失取两种平方误差的较大者，再乘 $\tfrac12$。
        - 按 token 平均（所有有效 token 一起平均）与按序列平均（每条先平均）对长短回答的权重不同。
        - KL 估计量（从 $\pi$ 采样，$\log r = \log\pi_\text{ref} - \log\pi$）：$k_1 = -\log r$（无偏、方差大、可为负）；$k_2 = \tfrac12(\log r)^2$（有偏、方差小）；$k_3 = (r - 1) - \log r$（无偏且恒非负）。
        {易错点}

        InstructGPT's RLHF stage ran PPO on about 31k prompts, with the policy and a value model both initialised
        from 6B-parameter models and a per-token KL penalty of coefficient $\beta = 0.02$ towards the SFT model
        (Ouyang et al., 2022, §3.5 and appendix C.4). Hugging Face TRL's `PPOTrainer` keeps the same recipe with
        defaults $\gamma = 1$, $\lambda = 0.95$, clip $\varepsilon = 0.2$ for both the policy and the value, and a KL
        coefficient of 0.05. PPO (Schulman et al., 2017) is four small formulas, and each has a classic bug that
        trains without crashing: a bootstrap across an episode end, advantages that still carry a gradient into the
        value head, a `max` where the pessimistic `min` belongs, a KL estimate whose sign flips.

        **You will implement** GAE with episode ends, the clipped policy loss with token- and sequence-level means
        (and its clip fraction and approximate KL), the clipped value loss, and the three KL estimators with the
        per-token KL-penalised rewards. **Graded against** float64 loop specs written as explicit sums, closed forms
        ($\lambda = 0$: TD error; $\lambda = 1$: Monte Carlo return), `gradcheck`, and, for the estimators, exact
        KL divergences of categorical distributions compared with the means of 200,000 samples.
    """
    )
    lesson.md(r"""
        ## 1. RLHF as reinforcement learning

        A prompt $x$ is the state, the policy $\pi_\theta$ (the LLM) samples a completion $y_{1..T}$ token by token, and
        a reward model scores the whole answer once, $R(x, y)$. To keep the policy near the SFT model
        $\pi_\text{ref}$, every token also pays a KL penalty. The per-token rewards are

        $$
        r_t = -\beta\,\big(\log\pi_\theta(y_t \mid \cdot) - \log\pi_\text{ref}(y_t \mid \cdot)\big) + [t = T]\, R(x, y),\qquad t = 1..T,
        $$

        zero on padding. A value model $V_\phi$ (usually the reward model's architecture with its own head) predicts
        the return at each token, and the advantage says how much better than predicted an action turned out.

        ## 2. Generalised advantage estimation

        With the TD residual $\delta_t = r_t + \gamma V_{t+1} (1 - d_t) - V_t$, GAE (Schulman et al., 2016) averages
        the $k$-step advantage estimates with weights $\lambda^k$:

        $$
        A_t = \sum_{l \ge 0} (\gamma\lambda)^l \Big(\prod_{m=0}^{l-1} (1 - d_{t+m})\Big)\, \delta_{t+l}
        \quad\Longleftrightarrow\quad A_t = \delta_t + \gamma\lambda\,(1 - d_t)\, A_{t+1},\ \ A_T = 0,
        $$

        computed right to left in $O(T)$. $d_t = 1$ marks that the episode ended at step $t$: neither the value nor
        the advantage of step $t+1$ (which belongs to the next episode) may leak back. The value targets are the
        returns $G_t = A_t + V_t$. Shapes: rewards and dones `(..., T)`, values `(..., T + 1)` (the last entry bootstraps
        a rollout that was cut off without ending). $\lambda = 0$ gives $A_t = \delta_t$ (low variance, biased by
        $V$); $\lambda = 1$ gives the Monte Carlo return minus $V_t$ (unbiased, high variance). The advantages are
        *targets*: they must carry no gradient.

        ## 3. The clipped losses

        With $\rho_t = \exp(\log\pi_\theta(y_t) - \log\pi_\text{old}(y_t))$ (the policy that generated the rollout is
        $\pi_\text{old}$; several minibatch epochs move $\pi_\theta$ away from it),

        $$
        \ell^\text{pg}_t = -\min\big(\rho_t A_t,\ \mathrm{clip}(\rho_t, 1 - \varepsilon, 1 + \varepsilon)\, A_t\big),\qquad
        \ell^\text{vf}_t = \tfrac12 \max\Big((V_t - G_t)^2,\ \big(\mathrm{clip}(V_t, V^\text{old}_t - \varepsilon_v, V^\text{old}_t + \varepsilon_v) - G_t\big)^2\Big).
        $$

        The `min` makes the objective pessimistic: once the ratio has moved past $1 \pm \varepsilon$ in the direction
        the advantage rewards, the gradient is zero; moves in the harmful direction are never clipped. A batch of
        $B$ completions with a mask $m \in \{0,1\}^{B\times T}$ is reduced either per token,
        $\sum m\ell / \sum m$ (TRL, OpenRLHF's default), or per sequence, $\frac1B \sum_b \big(\sum_t m_{bt}\ell_{bt} / \sum_t m_{bt}\big)$
        (every answer weighs the same, so a token of a short answer weighs more). The diagnostics PPO logs are the
        clip fraction, the share of valid tokens with $|\rho - 1| > \varepsilon$, and an approximate KL between
        $\pi_\theta$ and $\pi_\text{old}$, $\tfrac12\,\overline{(\log\pi_\theta - \log\pi_\text{old})^2}$ (TRL's `approxkl`).

        ## 4. Estimating KL from samples

        The exact $\mathrm{KL}(\pi\|\pi_\text{ref}) = \mathbb E_{y\sim\pi}[\log\pi(y) - \log\pi_\text{ref}(y)]$ needs a sum
        over the vocabulary at every position; RLHF only has the log-probabilities of the *sampled* tokens. With
        $r = \pi_\text{ref}(y)/\pi(y)$ (Schulman, 2020, *Approximating KL Divergence*):

        | estimator | per sample | bias | notes |
        | --- | --- | --- | --- |
        | $k_1$ | $-\log r$ | unbiased | negative for half the samples; high variance |
        | $k_2$ | $\tfrac12 (\log r)^2$ | biased | low variance; exact to second order when $\pi \approx \pi_\text{ref}$ |
        | $k_3$ | $(r - 1) - \log r$ | unbiased, since $\mathbb E_\pi[r] = 1$ | always $\ge 0$ ($\log r \le r - 1$); low variance |

        The per-token penalty of section 1 uses $k_1$ (TRL's default `kl_estimator="k1"`); GRPO puts $k_3$ into the loss.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 5. Exercise `gae`
    """)
    lesson.exercise(
        "gae",
        r'''
        def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, gamma: float, lam: float):
            """rewards (..., T) float; values (..., T + 1) float (values[..., T] bootstraps a cut rollout); dones (..., T)
            bool, True where the episode ended at that step; 0 <= gamma, lam <= 1.

            Returns (advantages, returns), both (..., T) in rewards' dtype and WITHOUT gradient:
            delta_t = r_t + gamma * V_{t+1} * (1 - d_t) - V_t;  A_t = delta_t + gamma * lam * (1 - d_t) * A_{t+1};
            returns = A + V[..., :T]. Raises ValueError for mismatched shapes or gamma/lam outside [0, 1]."""
            # TODO: validate the shapes and the coefficients
            # TODO: detach; delta for all steps at once; then A right to left; returns
            ### BEGIN SOLUTION
            steps = rewards.shape[-1]
            if values.shape != (*rewards.shape[:-1], steps + 1) or dones.shape != rewards.shape:
                raise ValueError(f"need rewards (..., T), values (..., T + 1), dones (..., T), got {tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(dones.shape)}")
            if not (0 <= gamma <= 1 and 0 <= lam <= 1):
                raise ValueError(f"gamma and lam must be in [0, 1], got {gamma=}, {lam=}")
            rewards, values = rewards.detach(), values.detach().to(rewards.dtype)  # targets: no gradient
            not_done = 1.0 - dones.to(rewards.dtype)  # (..., T)
            deltas = rewards + gamma * values[..., 1:] * not_done - values[..., :-1]  # (..., T)
            advantages = torch.zeros_like(rewards)
            running = torch.zeros_like(rewards[..., 0])  # A_{t+1}, 0 past the end
            for t in reversed(range(steps)):
                running = deltas[..., t] + gamma * lam * not_done[..., t] * running  # no leak across an episode end
                advantages[..., t] = running
            return advantages, advantages + values[..., :-1]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `ppo_policy_loss`
    """)
    lesson.exercise(
        "ppo_policy_loss",
        r'''
        def ppo_policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps: float = 0.2, reduction: str = "token"):
            """All (B, T): logprobs float (with gradient), old_logprobs and advantages float (constants), mask bool or 0/1.

            Returns (loss, clip_fraction, approx_kl), 0-d: loss = masked mean of
            -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A), ratio = exp(logprobs - old_logprobs), reduced per token
            ("token": over every valid token) or per sequence ("sequence": each row's mean, then the mean over rows with
            a valid token); clip_fraction = share of valid tokens with |ratio - 1| > eps; approx_kl = masked token mean
            of 0.5 * (logprobs - old_logprobs)^2. The two metrics carry no gradient.
            Raises ValueError for mismatched shapes, no valid token, clip_eps <= 0, an unknown reduction."""
            # TODO: validate
            # TODO: the ratio, the two surrogate terms, the pessimistic bound, the masked reduction; the metrics
            ### BEGIN SOLUTION
            if not (logprobs.shape == old_logprobs.shape == advantages.shape == mask.shape) or logprobs.dim() != 2:
                raise ValueError("logprobs, old_logprobs, advantages and mask must all be (B, T)")
            if clip_eps <= 0 or reduction not in ("token", "sequence"):
                raise ValueError(f"need clip_eps > 0 and reduction 'token' or 'sequence', got {clip_eps}, {reduction!r}")
            valid = mask.to(logprobs.dtype)
            if not bool(valid.sum() > 0):
                raise ValueError("the mask selects no token")
            log_ratio = logprobs - old_logprobs.detach()
            ratio = torch.exp(log_ratio)  # (B, T)
            advantages = advantages.detach()
            unclipped = ratio * advantages
            clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
            per_token = -torch.min(unclipped, clipped)  # pessimistic: the smaller objective, the larger loss
            if reduction == "token":
                loss = (per_token * valid).sum() / valid.sum()
            else:
                counts = valid.sum(dim=1)
                rows = counts > 0
                loss = ((per_token * valid).sum(dim=1)[rows] / counts[rows]).mean()
            with torch.no_grad():
                clip_fraction = (((ratio - 1).abs() > clip_eps).to(valid.dtype) * valid).sum() / valid.sum()
                approx_kl = (0.5 * log_ratio**2 * valid).sum() / valid.sum()
            return loss, clip_fraction, approx_kl
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `ppo_value_loss`
    """)
    lesson.exercise(
        "ppo_value_loss",
        r'''
        def ppo_value_loss(values, old_values, returns, mask, clip_eps: float = 0.2) -> torch.Tensor:
            """All (B, T): values float (with gradient), old_values and returns float (constants), mask bool or 0/1.
            Returns the 0-d masked token mean of 0.5 * max((V - G)^2, (clip(V, V_old - eps, V_old + eps) - G)^2).
            Raises ValueError for mismatched shapes, no valid token, clip_eps <= 0."""
            # TODO: validate; the clipped value around the OLD value; the larger of the two squared errors; masked mean
            ### BEGIN SOLUTION
            if not (values.shape == old_values.shape == returns.shape == mask.shape) or values.dim() != 2:
                raise ValueError("values, old_values, returns and mask must all be (B, T)")
            if clip_eps <= 0:
                raise ValueError(f"clip_eps must be > 0, got {clip_eps}")
            valid = mask.to(values.dtype)
            if not bool(valid.sum() > 0):
                raise ValueError("the mask selects no token")
            old_values, returns = old_values.detach(), returns.detach()
            clipped_values = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)  # stay near V_old
            squared = torch.max((values - returns) ** 2, (clipped_values - returns) ** 2)  # pessimistic again
            return 0.5 * (squared * valid).sum() / valid.sum()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 8. Exercise `kl`: the estimators and the KL-penalised rewards
    """)
    lesson.exercise(
        "kl",
        r'''
        def kl_estimators(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Per-sample estimators of KL(pi || ref) for tokens sampled from pi: logprobs = log pi(y), ref_logprobs =
            log ref(y), same shape. Returns (k1, k2, k3), each of that shape, with log r = ref_logprobs - logprobs:
            k1 = -log r, k2 = 0.5 * (log r)^2, k3 = (exp(log r) - 1) - log r. Raises ValueError for mismatched shapes."""
            # TODO: validate; the three estimators from log r
            ### BEGIN SOLUTION
            if logprobs.shape != ref_logprobs.shape:
                raise ValueError(f"shapes differ: {tuple(logprobs.shape)} and {tuple(ref_logprobs.shape)}")
            log_ratio = ref_logprobs - logprobs  # log r = log ref(y) - log pi(y)
            k1 = -log_ratio
            k2 = 0.5 * log_ratio**2
            k3 = torch.expm1(log_ratio) - log_ratio  # exp(x) - 1 without cancellation near 0; >= 0
            return k1, k2, k3
            ### END SOLUTION


        def kl_penalized_rewards(scores, logprobs, ref_logprobs, mask, beta: float) -> torch.Tensor:
            """scores (B,) reward-model scores; logprobs, ref_logprobs (B, T); mask (B, T) bool or 0/1 (at least one
            real token per row). Returns (B, T) rewards: -beta * k1 on real tokens, plus the score at each row's LAST
            real token, 0 on padding; no gradient. Raises ValueError for mismatched shapes, an empty row, beta < 0."""
            # TODO: validate; the per-token penalty (k1 from kl_estimators), masked; add the score at the last real token
            ### BEGIN SOLUTION
            if logprobs.shape != ref_logprobs.shape or logprobs.shape != mask.shape or scores.shape != logprobs.shape[:1]:
                raise ValueError("need scores (B,), logprobs, ref_logprobs and mask (B, T)")
            if beta < 0:
                raise ValueError(f"beta must be >= 0, got {beta}")
            real = mask.bool()
            if not bool(real.any(dim=1).all()):
                raise ValueError("every row needs a real token")
            k1, _, _ = kl_estimators(logprobs.detach(), ref_logprobs.detach())
            rewards = torch.where(real, -beta * k1, torch.zeros_like(k1))  # (B, T)
            last = (torch.arange(real.shape[1]) * real).argmax(dim=1)  # (B,) rightmost real token
            rewards[torch.arange(real.shape[0]), last] += scores.detach().to(rewards.dtype)
            return rewards
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### How noisy are the estimators?

        Two categorical distributions over 8 tokens, $\pi_\text{ref}$ fixed and $\pi$ moved away from it by a growing
        amount. For each, 20,000 tokens sampled from $\pi$: the mean of each estimator against the exact KL (left), and
        the standard deviation of a single sample (right). $k_1$ and $k_3$ track the exact value; $k_2$ drifts once
        the distributions are far apart; $k_3$ has the smallest spread when they are close.
    """)
    lesson.code(r"""
        try:
            torch.manual_seed(0)
            ref_logits = torch.randn(8)
            direction = torch.randn(8)
            shifts = torch.linspace(0, 2.5, 11)
            exact, means, spreads = [], [], []
            for shift in shifts:
                log_pi = torch.log_softmax(ref_logits + shift * direction, 0).double()
                log_ref = torch.log_softmax(ref_logits, 0).double()
                exact.append(float((log_pi.exp() * (log_pi - log_ref)).sum()))
                samples = torch.multinomial(log_pi.exp(), 20_000, replacement=True)
                estimates = torch.stack(kl_estimators(log_pi[samples], log_ref[samples]))  # (3, N)
                means.append(estimates.mean(1)); spreads.append(estimates.std(1))
            means, spreads = torch.stack(means), torch.stack(spreads)
            fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
            left.plot(shifts, exact, "k-", lw=2, label="exact KL")
            for i, name in enumerate(("k1", "k2", "k3")):
                left.plot(shifts, means[:, i], "o--", ms=3, label=f"mean of {name}")
                right.plot(shifts, spreads[:, i], "o-", ms=3, label=name)
            left.set_xlabel("distance of pi from ref (shift)"); left.set_ylabel("KL"); left.legend(fontsize=8)
            right.set_xlabel("shift"); right.set_ylabel("std of one sample"); right.legend(fontsize=8)
            left.set_title("means of 20,000 samples"); right.set_title("spread of a single estimate")
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("kl_estimators is not attempted yet")
    """)
    lesson.md(r"""
        ### One PPO update on a toy problem

        A bandit with 5 actions, one step each (so $A = r - V$): the policy is a softmax over 5 logits, the reward of
        action $a$ is fixed, and a shared baseline plays the value. Several clipped epochs on one batch: the clip
        fraction rises as the policy moves away from $\pi_\text{old}$, and the loss stops pulling once the ratio has
        left $[0.8, 1.2]$ in the rewarded direction.
    """)
    lesson.code(r"""
        try:
            torch.manual_seed(0)
            action_reward = torch.tensor([0.0, 0.2, 1.0, 0.1, -0.5])
            logits = torch.zeros(5, requires_grad=True)
            optimizer = torch.optim.SGD([logits], lr=1.0)
            actions = torch.multinomial(torch.ones(5) / 5, 256, replacement=True).view(16, 16)  # a rollout batch
            old_logprobs = torch.log_softmax(logits.detach(), 0)[actions]
            rewards = action_reward[actions]
            advantages = rewards - rewards.mean()
            mask = torch.ones(16, 16, dtype=torch.bool)
            fractions, kls = [], []
            for epoch in range(12):
                logprobs = torch.log_softmax(logits, 0)[actions]
                loss, clip_fraction, approx_kl = ppo_policy_loss(logprobs, old_logprobs, advantages, mask, 0.2)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                fractions.append(clip_fraction.item()); kls.append(approx_kl.item())
            fig, ax = plt.subplots(figsize=(6, 2.8))
            ax.plot(fractions, "o-", label="clip fraction"); ax.plot(kls, "s-", label="approx KL to pi_old")
            ax.set_xlabel("epoch on the same batch"); ax.legend(fontsize=8)
            ax.set_title("PPO epochs on one rollout")
            plt.show()
            print("policy after 12 epochs:", [round(p, 3) for p in torch.softmax(logits, 0).tolist()])
        except NotImplementedError:
            print("ppo_policy_loss is not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 9. Reading the solutions

        **`gae`.** The residuals for all steps are one vectorised line; only the recursion runs over time, and it runs
        over the batch at once. `not_done` multiplies both the bootstrap $V_{t+1}$ and the carried $A_{t+1}$: an episode
        end cuts both. Detaching first is what keeps the policy loss from back-propagating into the value head through
        the advantages.

        **`ppo_policy_loss`.** The ratio is computed in log space and exponentiated once. `torch.min` of the two
        surrogates is the pessimistic bound; for $A > 0$ it clips only above $1 + \varepsilon$, for $A < 0$ only below
        $1 - \varepsilon$. The sequence reduction leaves out rows without valid tokens, as in `p02.sft`.

        **`ppo_value_loss`.** The clip is centred on the *old* value; clipping around the new value or around the
        returns is a frequent bug (it makes the clip a no-op or a different loss). `max` again, so that the value cannot
        profit from a large step that happens to land near the target.

        **`kl_estimators` / `kl_penalized_rewards`.** `expm1` keeps $k_3$ accurate near $\log r = 0$, where $r - 1$
        would cancel. The rewards put the score on the last *real* token (the rightmost set mask bit, as in
        `p02.reward_model`), never on padding.

        **The usual mistakes, and why they are wrong**: bootstrapping across an episode
        end, the `(1 - d)` factor left off the recursion, $\gamma$ in place of $\gamma\lambda$, advantages that keep a
        gradient, the recursion run left to right; `max` instead of `min`, the clip applied to the advantage, the ratio
        as `exp(logprobs) / exp(old_logprobs)` (0/0 for float32 log-probs near $-120$), padding in
        the mean, sequence = token mean, a clip fraction over padding; the value clip centred on the new value, `min`
        instead of `max`, no $\tfrac12$; $k_1$ with the wrong sign, $k_3$ without the $-\log r$ term, the score on the last
        column.

        **What production code does.** TRL's `PPOTrainer` computes the rewards exactly as `kl_penalized_rewards` (with
        `kl_estimator` "k1" or "k3"), whitens the advantages over the batch (subtract the mean, divide by the standard
        deviation, masked), runs `num_ppo_epochs` over minibatches, and combines `pg_loss + vf_coef * vf_loss`.
        OpenRLHF and verl run the rollouts with vLLM and train with DeepSpeed or FSDP; verl exposes the reduction as
        `loss_agg_mode` (`token-mean`, `seq-mean-token-sum`, `seq-mean-token-mean`), the very choice of section 3, and
        DAPO (`p02.grpo`) argues for the token mean on long reasoning traces. GRPO drops the value model altogether and
        replaces GAE by the normalised reward of a group of samples per prompt.
    """)
    lesson.mistakes()
    return lesson
