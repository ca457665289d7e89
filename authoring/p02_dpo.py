"""Source of 02_PyTorch_Algorithms/25_DPO.ipynb (build with `python -m llm_algo build p02.dpo`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.dpo",
        path="02_PyTorch_Algorithms/25_DPO.ipynb",
        title_en="DPO: preference optimisation without a reward model",
        title_zh="DPO 直接偏好优化",
        difficulty="medium",
        device="cpu",
        minutes=80,
        prerequisites=["p02.cross_entropy", "p02.tiny_llama"],
    )
    lesson.title(
        intro=r"""
        InstructGPT's RLHF (Ouyang et al., 2022) needs four models at once (the policy, a frozen reference, a reward
        model and a value model), samples from the policy inside the training loop and runs PPO on top. Direct
        Preference Optimization (Rafailov et al., 2023) reaches the same objective with a *classification loss* on
        pairs of answers someone preferred and rejected: two models (the policy and a frozen reference), no sampling,
        no reward model. Zephyr-7B-β was trained that way on preference pairs built from UltraFeedback's ~64k prompts,
        with $\beta = 0.1$ and a learning rate of $5\times10^{-7}$ (Tunstall et al., 2023), and Llama 3's post-training rounds use DPO after supervised fine-tuning (Llama Team,
        *The Llama 3 Herd of Models*, 2024). Hugging Face TRL's `DPOTrainer` is the usual implementation; you will
        write its core.

        **You will implement** the log-probability of a completion from a model's logits (prompt and padding
        masked, stable in bf16 and against garbage logits at padded positions), the DPO, conservative-DPO
        (label smoothing) and IPO losses with their implicit rewards, and a batch loss over a policy and a frozen
        reference in TRL's `[chosen; rejected]` layout, with TRL's logged metrics. **Graded against** Hugging Face
        `LlamaForCausalLM`'s own loss on labels masked with `-100`, float64 loop specs, TRL 1.16.0's formulas
        (`trl/trainer/dpo_trainer.py`, lines cited below) as closed forms written with `softplus`,
        `torch.autograd.gradcheck`, and a tiny policy trained on synthetic pairs whose reward margin must rise.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：RLHF（PPO）要同时加载策略、参考、奖励、价值四个模型并在线采样；DPO 只用策略模型和冻结的参考模型，在偏好对（chosen/rejected）上做分类损失。
        - **序列对数概率**：位置 $t$ 的 logits 预测第 $t+1$ 个 token；只对回答（completion）部分求和，提示词（prompt）和填充（padding）要屏蔽；用 `log_softmax` 而不是 `log(softmax)`。
        - **隐式奖励**：$r = \beta\,(\log\pi_\theta(y|x) - \log\pi_\text{ref}(y|x))$；DPO 损失 $-\log\sigma(r_w - r_l)$。
        - **cDPO**：标签以概率 $\varepsilon$ 翻转，损失为 $-(1-\varepsilon)\log\sigma(\beta\Delta) - \varepsilon\log\sigma(-\beta\Delta)$。
        - **IPO**：把 $\Delta$ 回归到 $1/(2\beta)$：$(\Delta - \tfrac{1}{2\beta})^2$，TRL 中 $\Delta$ 用每个 token 的平均值。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. From a reward to a loss on pairs

        **The RLHF objective.** Given prompts $x$, a reward $r(x, y)$ and a reference policy $\pi_\text{ref}$ (the SFT
        model), RLHF maximises expected reward while staying close to the reference:

        $$
        \max_{\pi}\ \mathbb{E}_{x,\, y\sim\pi}\big[r(x,y)\big] - \beta\, \mathrm{KL}\big(\pi(\cdot|x)\,\|\,\pi_\text{ref}(\cdot|x)\big).
        $$

        Its maximiser has a closed form, $\pi^*(y|x) = \pi_\text{ref}(y|x)\, e^{r(x,y)/\beta} / Z(x)$, so the reward
        can be read off any policy: $r(x,y) = \beta \log \frac{\pi(y|x)}{\pi_\text{ref}(y|x)} + \beta \log Z(x)$.

        **Bradley–Terry.** Human preference data says $y_w \succ y_l$ (winner, loser) for a prompt $x$, modelled as
        $p(y_w \succ y_l) = \sigma\big(r(x, y_w) - r(x, y_l)\big)$. In the difference the intractable $\beta \log Z(x)$
        cancels, and maximising the likelihood of the data gives DPO's loss, with the *implicit rewards*
        $r_w = \beta\,(\log\pi_\theta(y_w|x) - \log\pi_\text{ref}(y_w|x))$ and $r_l$ likewise:

        $$
        \mathcal{L}_\text{DPO} = -\log\sigma\big(\beta\,\Delta\big), \qquad
        \Delta = \big(\log\pi_\theta(y_w|x) - \log\pi_\text{ref}(y_w|x)\big) - \big(\log\pi_\theta(y_l|x) - \log\pi_\text{ref}(y_l|x)\big).
        $$

        Shapes: for a batch of $B$ pairs every log-probability is a vector `(B,)`, and so are $\Delta$, the losses and
        the rewards; the training loss is the mean. The gradient explains the behaviour:
        $\nabla_\theta \mathcal{L} = -\beta\, \sigma(r_l - r_w)\, \big(\nabla \log\pi_\theta(y_w|x) - \nabla\log\pi_\theta(y_l|x)\big)$:
        push the winner up and the loser down, weighted by how *wrong* the implicit reward model currently is.

        ## 2. Two fixes: noisy labels and deterministic preferences

        **Conservative DPO (cDPO)** (Mitchell, 2023, *A note on DPO with noisy preferences*): if a label is flipped
        with probability $\varepsilon$, the likelihood of the observed label is a mixture, and the loss becomes
        $-(1-\varepsilon)\log\sigma(\beta\Delta) - \varepsilon\log\sigma(-\beta\Delta)$, minimised at a finite
        $\beta\Delta = \log\frac{1-\varepsilon}{\varepsilon}$ instead of at $+\infty$. TRL's `DPOConfig(label_smoothing=ε)`
        applied exactly this to the `"sigmoid"` loss in its 0.x releases (0.12.0: `dpo_trainer.py` lines
        1088–1091); TRL 1.16.0 keeps the same weighted form for its `"aot"` losses (`dpo_trainer.py` lines
        1453–1456) and now reserves `label_smoothing` for the `"robust"` (lines 1428–1431) and `"exo_pair"` losses.

        **IPO** (Azar et al., 2023, *A General Theoretical Paradigm to Understand Learning from Human Preferences*):
        when a pair is always preferred the same way, DPO's loss keeps decreasing as $\Delta \to \infty$, so the KL
        regularisation stops acting and the policy drifts. IPO regresses $\Delta$ to a finite target:
        $\mathcal{L}_\text{IPO} = \big(\Delta - \tfrac{1}{2\beta}\big)^2$ ($\beta$ is the paper's $\tau$). TRL
        1.16.0 (lines 1393–1404) computes $\Delta$ from log-ratios *averaged over each completion's tokens*, not
        summed: the comment there says the authors confirmed that the paper's results use that normalisation. You will
        do the same.

        ## 3. The log-probability of a completion

        A causal LM's logits at position $t$ predict token $t+1$. For a sequence `input_ids: (B, T)` made of a prompt,
        the completion and right padding, with `completion_mask: (B, T)` equal to 1 on completion tokens only,

        $$
        \log\pi(y|x) = \sum_{t=1}^{T-1} m_t \,\log\operatorname{softmax}(\ell_{t-1})[\text{id}_t],
        \qquad \ell: (B, T, V),\ m = \text{completion\_mask}[:, 1:] : (B, T-1).
        $$

        TRL does exactly this (`dpo_trainer.py` line 1297, `shift_completion_mask = completion_mask[..., 1:]`, and line
        1304, `logps = per_token_logps.sum(dim=1)`). The sum, not the mean, is what DPO's derivation needs: it is the
        log-probability of the whole answer. Three details bite in practice: the logits of a 128k vocabulary are
        often bf16 (compute the log-softmax in float32); `log(softmax(ℓ))` underflows to $-\infty$ where
        `log_softmax` does not; and a padded position's logits can be anything, NaN included (a fully masked
        attention row), so masked terms must be *selected away* (`torch.where`), not multiplied by 0 ($0 \cdot
        \text{NaN} = \text{NaN}$).
    """)
    lesson.setup(r"""
        import copy

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 4. Exercise `sequence_logprobs`

        Return, per row, the sum (or with `average=True` the mean) of the completion tokens' log-probabilities. Compute
        in float32 at least (float64 stays float64) and return that dtype. A row without completion tokens has sum 0
        and mean 0 (no division by zero). Refuse inconsistent shapes with a `ValueError`. `F.cross_entropy` is the
        checks' reference and is forbidden here: use `log_softmax` and `gather`.
    """)
    lesson.exercise(
        "sequence_logprobs",
        r'''
        def sequence_logprobs(
            logits: torch.Tensor, input_ids: torch.Tensor, completion_mask: torch.Tensor, average: bool = False
        ) -> torch.Tensor:
            """Log-probability of each row's completion tokens under the logits.

            logits:          (B, T, V) float; position t predicts token t + 1
            input_ids:       (B, T) int64
            completion_mask: (B, T) bool or 0/1; 1 on completion tokens, 0 on the prompt and padding
            returns          (B,) float32 (float64 for float64 logits): sum, or mean with average=True
            """
            # TODO: refuse logits that are not (B, T, V) with input_ids and completion_mask of shape (B, T)
            # TODO: log-softmax of logits[:, :-1] in at least float32; gather the log-prob of input_ids[:, 1:]
            # TODO: keep the terms where completion_mask[:, 1:] is set (select, do not multiply); sum, or mean
            ### BEGIN SOLUTION
            if logits.dim() != 3 or input_ids.shape != logits.shape[:2] or completion_mask.shape != input_ids.shape:
                raise ValueError(
                    f"expected logits (B, T, V) with input_ids and completion_mask (B, T), got {tuple(logits.shape)}, "
                    f"{tuple(input_ids.shape)} and {tuple(completion_mask.shape)}"
                )
            compute_dtype = torch.promote_types(logits.dtype, torch.float32)
            logprobs = torch.log_softmax(logits[:, :-1].to(compute_dtype), dim=-1)    # (B, T-1, V)
            targets = input_ids[:, 1:].unsqueeze(-1)                                   # (B, T-1, 1): the next tokens
            token_logps = logprobs.gather(-1, targets).squeeze(-1)                     # (B, T-1)
            mask = completion_mask[:, 1:].bool()                                       # (B, T-1)
            token_logps = torch.where(mask, token_logps, torch.zeros_like(token_logps))  # NaN-safe
            total = token_logps.sum(dim=-1)                                            # (B,)
            if average:
                return total / mask.sum(dim=-1).clamp(min=1)
            return total
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `preference_loss`: DPO, cDPO and IPO

        Given the four log-probability vectors `(B,)`, return `(losses, chosen_rewards, rejected_rewards)`, each `(B,)`:
        per-pair losses (the caller takes the mean) and the implicit rewards $\beta\,(\log\pi_\theta - \log\pi_\text{ref})$,
        *detached* (they are metrics; a gradient through them would be a silent second loss). `loss_type` is
        `"sigmoid"` (DPO; with `label_smoothing` $\varepsilon > 0$, cDPO) or `"ipo"` (the caller passes per-token
        averages). Stay finite for any $\Delta$: $-\log\sigma(z)$ is `softplus(-z)` or `-F.logsigmoid(z)`, never
        `-log(sigmoid(z))`, which is `inf` once $\sigma(z)$ underflows. Refuse an unknown `loss_type`, $\beta \le 0$,
        $\varepsilon \notin [0, 0.5)$, label smoothing with IPO, and vectors of different shapes, with a `ValueError`.
    """)
    lesson.exercise(
        "preference_loss",
        r'''
        def preference_loss(
            policy_chosen_logps: torch.Tensor,
            policy_rejected_logps: torch.Tensor,
            ref_chosen_logps: torch.Tensor,
            ref_rejected_logps: torch.Tensor,
            beta: float = 0.1,
            loss_type: str = "sigmoid",
            label_smoothing: float = 0.0,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """(losses, chosen_rewards, rejected_rewards), each (B,); the rewards detached."""
            # TODO: validate loss_type ("sigmoid" or "ipo"), beta > 0, 0 <= label_smoothing < 0.5 (sigmoid only),
            #       and four vectors of one shape
            # TODO: log-ratios of chosen and rejected; their difference delta
            # TODO: sigmoid: -(1 - eps) log sigmoid(beta delta) - eps log sigmoid(-beta delta); ipo: (delta - 1/(2 beta))^2
            # TODO: rewards beta * log-ratio, detached
            ### BEGIN SOLUTION
            if loss_type not in ("sigmoid", "ipo"):
                raise ValueError(f"loss_type must be 'sigmoid' or 'ipo', got {loss_type!r}")
            if beta <= 0:
                raise ValueError(f"beta must be positive, got {beta}")
            if not 0.0 <= label_smoothing < 0.5:
                raise ValueError(f"label_smoothing must lie in [0, 0.5), got {label_smoothing}")
            if loss_type == "ipo" and label_smoothing != 0.0:
                raise ValueError("label_smoothing is conservative DPO's; IPO has none")
            shapes = {tuple(t.shape) for t in (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)}
            if len(shapes) != 1:
                raise ValueError(f"the four log-probability vectors must have one shape, got {sorted(shapes)}")
            chosen_logratios = policy_chosen_logps - ref_chosen_logps               # (B,)
            rejected_logratios = policy_rejected_logps - ref_rejected_logps         # (B,)
            delta = chosen_logratios - rejected_logratios                           # (B,)
            if loss_type == "sigmoid":
                losses = (
                    -(1 - label_smoothing) * F.logsigmoid(beta * delta)             # the observed label
                    - label_smoothing * F.logsigmoid(-beta * delta)                 # the flipped one (cDPO)
                )
            else:
                losses = (delta - 1 / (2 * beta)) ** 2                              # IPO: regress to 1/(2 beta)
            chosen_rewards = beta * chosen_logratios.detach()
            rejected_rewards = beta * rejected_logratios.detach()
            return losses, chosen_rewards, rejected_rewards
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The three losses and their gradient weight, in a picture

        Left: the per-pair loss against the scaled margin $\beta\Delta$. DPO's keeps falling as the margin grows (the
        pair is never "done"); cDPO's has its minimum at $\log\frac{1-\varepsilon}{\varepsilon}$; IPO's parabola
        has its minimum at $\beta\Delta = 1/2$ (drawn times $\beta^2$, which is $(\beta\Delta - \tfrac12)^2$; unscaled it is
        100 times steeper at $\beta = 0.1$). Right: $-\partial\mathcal{L}/\partial(\beta\Delta)$, the weight that
        multiplies the push on the winner and the loser, computed by autograd through your `preference_loss`.
    """)
    lesson.code(r"""
        beta = 0.1
        margin = torch.linspace(-6, 6, 241, dtype=torch.float64)          # beta * delta
        delta = (margin / beta).requires_grad_(True)
        zeros = torch.zeros_like(delta)
        fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
        try:
            for name, kwargs in (("DPO", {}), ("cDPO, ε = 0.1", {"label_smoothing": 0.1}), ("IPO", {"loss_type": "ipo"})):
                losses, _, _ = preference_loss(delta, zeros, zeros, zeros, beta=beta, **kwargs)
                (grad,) = torch.autograd.grad(losses.sum(), delta)
                scale = beta**2 if name == "IPO" else 1.0  # IPO's (Δ - 1/(2β))² is (β·Δ - 1/2)² / β²
                label = "IPO × β²" if name == "IPO" else name
                axes[0].plot(margin, scale * losses.detach(), label=label)
                axes[1].plot(margin, -scale * grad / beta, label=label)
            axes[0].set_ylim(-0.2, 6); axes[1].set_ylim(-3, 1.2)
        except NotImplementedError:
            print("preference_loss not attempted yet")
        axes[0].set_xlabel("β·Δ (scaled reward margin)"); axes[0].set_ylabel("loss per pair"); axes[0].legend()
        axes[1].set_xlabel("β·Δ"); axes[1].set_ylabel("−∂L/∂(β·Δ)"); axes[1].axhline(0, color="grey", lw=0.5)
        axes[1].set_title("how hard the pair is pushed"); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 6. Exercise `dpo_batch_loss`: policy, reference, one batch

        TRL stacks a batch as `[chosen; rejected]` (line 1316: `chosen_logps, rejected_logps = logps.chunk(2, dim=0)`):
        `input_ids: (2B, T)`, the first $B$ rows the prompts with their chosen answers, the last $B$ the same
        prompts with the rejected ones, so one forward pass serves both. Run the policy with gradients and the
        reference under `torch.no_grad()` (it is frozen; building its graph would double the activation memory for
        nothing), take sums of log-probabilities (per-token means for IPO), and return the mean loss and TRL's logged
        metrics (lines 1582–1595) as Python floats: `"rewards/chosen"`, `"rewards/rejected"` (means of the rewards),
        `"rewards/margins"` (mean of chosen minus rejected) and `"rewards/accuracies"` (fraction of pairs with the
        chosen reward *strictly* above the rejected one). Both models are called as
        `model(input_ids=..., attention_mask=...).logits`. Refuse an odd number of rows.
    """)
    lesson.exercise(
        "dpo_batch_loss",
        r'''
        def dpo_batch_loss(
            policy,
            reference,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            completion_mask: torch.Tensor,
            beta: float = 0.1,
            loss_type: str = "sigmoid",
            label_smoothing: float = 0.0,
        ) -> tuple[torch.Tensor, dict[str, float]]:
            """Mean preference loss over the B pairs of a [chosen; rejected] batch of 2B rows, and TRL's metrics."""
            # TODO: refuse an odd number of rows
            # TODO: policy logits with gradients, reference logits under torch.no_grad()
            # TODO: sequence_logprobs of both (average=True for IPO); split each into chosen and rejected halves
            # TODO: preference_loss; return its mean and the four metrics as floats
            ### BEGIN SOLUTION
            if input_ids.shape[0] % 2 != 0:
                raise ValueError(f"a [chosen; rejected] batch has an even number of rows, got {input_ids.shape[0]}")
            average = loss_type == "ipo"                                             # IPO: per-token means (TRL)
            policy_logits = policy(input_ids=input_ids, attention_mask=attention_mask).logits  # (2B, T, V)
            policy_logps = sequence_logprobs(policy_logits, input_ids, completion_mask, average)  # (2B,)
            with torch.no_grad():                                                    # the reference is frozen
                ref_logits = reference(input_ids=input_ids, attention_mask=attention_mask).logits
                ref_logps = sequence_logprobs(ref_logits, input_ids, completion_mask, average)
            policy_chosen, policy_rejected = policy_logps.chunk(2)                   # (B,), (B,)
            ref_chosen, ref_rejected = ref_logps.chunk(2)
            losses, chosen_rewards, rejected_rewards = preference_loss(
                policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, loss_type, label_smoothing
            )
            metrics = {
                "rewards/chosen": chosen_rewards.mean().item(),
                "rewards/rejected": rejected_rewards.mean().item(),
                "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
                "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
            }
            return losses.mean(), metrics
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A tiny DPO run

        The cell below builds a one-layer Llama (vocabulary 32, hidden size 32) from a config, with random weights,
        and a synthetic preference set: for a prompt of four tokens, the *chosen* answer repeats the prompt shifted by
        one token id, the *rejected* answer is random. The policy starts as a copy of the reference, so every
        reward is 0 at step 0. Watch what your `dpo_batch_loss` does over 60 AdamW steps: accuracy reaches 1 within
        a step and the margin keeps growing (about 3.5 at step 60 with the reference solution). Here the chosen
        reward rises too, but nothing in the loss asks for that: DPO only needs the *difference* to grow, and on
        real data it often pushes the chosen answers' log-probabilities down as well (Pal et al., 2024, *Smaug*;
        Razin et al., 2024, "likelihood displacement").
    """)
    lesson.code(r"""
        from llm_algo.references.hf import tiny_llama_config, transformers_module

        def synthetic_pairs(num_pairs=16, prompt_len=4, vocab=32, generator=None):
            prompts = torch.randint(4, vocab - 1, (num_pairs, prompt_len), generator=generator)
            chosen = prompts + 1                                                         # the rule to learn
            rejected = torch.randint(4, vocab, (num_pairs, prompt_len), generator=generator)
            input_ids = torch.cat([torch.cat([prompts, chosen], 1), torch.cat([prompts, rejected], 1)])  # (2B, T)
            completion_mask = torch.zeros_like(input_ids)
            completion_mask[:, prompt_len:] = 1
            return input_ids, torch.ones_like(input_ids), completion_mask

        torch.manual_seed(0)
        config = tiny_llama_config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=16)
        reference = transformers_module().LlamaForCausalLM(config).eval()
        policy = copy.deepcopy(reference).train()
        batch = synthetic_pairs(generator=torch.Generator().manual_seed(0))
        optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3, weight_decay=0.0)
        history = []
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny model: one thread beats two (no hand-offs); restored below
        try:
            for step in range(60):
                loss, metrics = dpo_batch_loss(policy, reference, *batch, beta=0.1)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                history.append(metrics)
            fig, ax = plt.subplots(figsize=(6.5, 3.4))
            for key in ("rewards/chosen", "rewards/rejected", "rewards/margins"):
                ax.plot([m[key] for m in history], label=key)
            ax.plot([m["rewards/accuracies"] for m in history], "k:", label="rewards/accuracies")
            ax.set_xlabel("AdamW step"); ax.set_title("DPO on 16 synthetic pairs (β = 0.1)"); ax.legend(fontsize=8)
            plt.tight_layout(); plt.show()
            print({k: round(v, 3) for k, v in history[-1].items()})
        except NotImplementedError:
            print("dpo_batch_loss not attempted yet")
        torch.set_num_threads(threads)
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`sequence_logprobs`.** `logits[:, :-1]` against `input_ids[:, 1:]` is the one-position shift of every causal
        LM loss; the last position's logits predict a token that is not there. `log_softmax` computes
        $\ell - \max\ell - \log\sum e^{\ell - \max\ell}$ and never takes the log of an underflowed 0. The upcast
        costs memory: `(B, T, V)` float32 for $B = 8$, $T = 2048$ and Llama-3's $V = 128{,}256$ is 8.4 GB, which is why
        TRL 1.16 asks the model for `fused_lm_head=True` and gets per-token log-probabilities without ever
        materialising the `(B, T, V)` logits at all (line 1299; `add_fused_lm_head` in `trl/trainer/utils.py`, line
        1548, projects through the head tile by tile at the scored positions only), and why Liger-Kernel and
        others fuse the head, the log-softmax and the gather chunk by chunk. `torch.where` keeps a NaN in a padded position out of the sum.

        **`preference_loss`.** `F.logsigmoid` is stable for both signs; `(1 - ε)` and `ε` weight the observed and the
        flipped label. The rewards are detached because TRL logs them (`chosen_logratios.detach()`, line 1582); a
        learner who returns them with a graph and adds them to a loss trains on a metric.

        **`dpo_batch_loss`.** One forward per model over the stacked `[chosen; rejected]` batch; `chunk(2)` splits it
        back. The reference runs under `torch.no_grad()`: no graph, no activation memory. TRL can go further and
        precompute the reference log-probabilities once for the whole data set (`precompute_ref_log_probs=True`),
        and with a PEFT policy it uses the base model with the adapter *disabled* as the reference (lines 1328–1336),
        so only one copy of the weights is in memory.

        **The usual mistakes, and why they are wrong**: no shift (each position scored on
        its own token), the mask not shifted, the prompt scored, the mean where the sum is needed, `log(softmax)`, a
        mask multiplied into NaNs, no float32 upcast; the margin's sign flipped, $\beta$ dropped, `log(sigmoid)`,
        the smoothing term added with the wrong sign, IPO's target $1/\beta$, rewards with a graph or without
        $\beta$; the reference with gradients, or run with autograd on and its output detached afterwards (the
        numbers are right; a forward hook on the reference records `torch.is_grad_enabled()`), chosen and rejected halves swapped, IPO on sums, accuracy counting
        ties.

        **In production.** TRL's `DPOTrainer` adds the data collation (prompt + completion, right padding, TRL's
        `flush_left`), many loss variants (`loss_type=["sigmoid", "sft"]` mixes DPO with an NLL term on the chosen
        answers as in RPO; `"sigmoid_norm"`, `"hinge"`, `"robust"`, `"bco_pair"`, `"apo_zero"`, ...), the f-divergence
        generalisation, and WPO weighting. OpenRLHF and verl implement the same loss for multi-GPU runs. Typical
        settings: $\beta \in [0.01, 0.5]$ (0.1 is TRL's default), learning rates around $5\times 10^{-7}$ for full
        fine-tuning of 7B models (Zephyr's), one to three epochs. DPO learns from fixed, off-policy pairs; comparisons
        such as Xu et al. (2024, *Is DPO Superior to PPO for LLM Alignment?*) found a well-tuned PPO ahead on several
        tasks, code generation among them, and online methods (PPO, GRPO in `p02.grpo`) dominate reasoning-model
        training.
    """)
    lesson.mistakes()
    return lesson
