"""Source of 02_PyTorch_Algorithms/24_Reward_Model.ipynb (build with `python -m llm_algo build p02.reward_model`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.reward_model",
        path="02_PyTorch_Algorithms/24_Reward_Model.ipynb",
        title_en="Reward modelling: a Bradley–Terry head on the last real token",
        title_zh="奖励模型：最后一个真实 token 上的 Bradley–Terry 打分头",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p02.sft", "p02.tiny_llama"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 奖励模型（reward model）= 语言模型主干 + 一个线性打分头（$d \to 1$），读取**最后一个真实 token**（非填充）位置的隐藏状态，输出一个标量奖励。
        - 左填充时最后一个真实 token 在行尾，右填充时在 `mask.sum()-1`；通用做法：取掩码为 1 的**最右**位置，Hugging Face 用 `(arange(L) * mask).argmax(-1)`。
        - Bradley–Terry 模型：$P(y_w \succ y_l) = \sigma(r_w - r_l)$，损失 $-\log\sigma(r_w - r_l) = \mathrm{softplus}(-(r_w - r_l))$；只有差值有意义，奖励可以整体平移。
        - Llama 2 在差值里减去一个按偏好强度给定的间隔（margin）：$-\log\sigma(r_w - r_l - m)$；TRL 还可加 $\lambda\,\mathbb E[(r_w + r_l)^2]$ 把奖励拉回 0 附近。
        - 指标：准确率（$r_w > r_l$ 的比例，平局算错）与平均间隔 $\mathbb E[r_w - r_l]$。
        {易错点}

        InstructGPT's reward model is a 6B GPT-3 with its unembedding replaced by a scalar head, trained on 33k prompts
        whose labellers ranked 4 to 9 answers each, i.e. up to 36 comparisons per prompt (Ouyang et al., 2022, §3.5 and
        Table 6). Llama 2 trained two reward models (helpfulness, safety) from the chat model's own checkpoints on
        over a million binary comparisons, and even so they agree with held-out human choices only about 63-65% of the
        time on Meta's test sets (Touvron et al., 2023, §3.2.2, Table 7): preferences are noisy, and a reward model is
        the weakest link of RLHF. It is also where subtle bugs hide: a head that reads a padding position scores the
        pad token, not the answer, and still trains to a decent-looking loss on right-padded batches.

        **You will implement** `last_token_rewards` (pool a per-token value at the last real token, for left and right
        padding), `bradley_terry_loss` (with an optional margin and reward centring, accuracy, mean margin) and
        `RewardModel` (any backbone + a linear score head). **Graded against** Hugging Face's
        `LlamaForSequenceClassification` (tiny random config, `num_labels=1`) on left- and right-padded batches, TRL's
        reward-trainer formula as a float64 closed form, `gradcheck`, and a tiny reward model trained on a synthetic
        preference set that must reach 95% held-out accuracy in a few seconds.
    """
    )
    lesson.md(r"""
        ## 1. From a language model to a scalar

        Take any decoder: hidden states $H \in \mathbb R^{B\times L\times d}$ for token ids $x \in \mathbb Z^{B\times L}$ with
        an attention mask $a \in \{0,1\}^{B\times L}$. A score head $w \in \mathbb R^{d}$ (a `nn.Linear(d, 1, bias=False)`, as
        Hugging Face's `*ForSequenceClassification` models with `num_labels=1`) turns every position into a value
        $v_{b,t} = w^\top H_{b,t}$, shape `(B, L)`. Because the model is causal, only the **last real token** has read
        the whole prompt and answer, so the reward is

        $$
        r_b = v_{b,\,\ell_b},\qquad \ell_b = \max\{t : a_{b,t} = 1\}.
        $$

        With right padding $\ell_b = \sum_t a_{b,t} - 1$; with left padding (what generation uses, so that every row
        ends at the same column) $\ell_b = L - 1$. A single expression covers both and any mask:
        $\ell_b = \operatorname{argmax}_t\, t\cdot a_{b,t}$. Reading position $L-1$ unconditionally scores a padding
        token on right-padded rows; `mask.sum() - 1` reads the wrong token on left-padded rows.

        ## 2. Bradley–Terry

        For a prompt with a preferred answer $y_w$ and a rejected one $y_l$, Bradley and Terry (1952) model
        $P(y_w \succ y_l) = \sigma(r_w - r_l)$. Maximum likelihood over $B$ pairs gives

        $$
        \mathcal L = \frac1B \sum_b -\log \sigma\big(r_{w,b} - r_{l,b} - m_b\big) \;+\; \lambda\,\frac1B\sum_b (r_{w,b} + r_{l,b})^2,
        $$

        with $m_b = 0$ in the original model; Llama 2 subtracts a margin $m_b$ that grows with how strongly the
        labeller preferred $y_w$ ("significantly better" gets a larger margin than "negligibly better", §3.2.2), and
        TRL's `center_rewards_coefficient` $\lambda$ (Eisenstein et al., 2023) keeps the rewards near zero, since the
        loss itself only sees differences. Write $-\log\sigma(z) = \mathrm{softplus}(-z) = \log(1 + e^{-z})$: it
        is exact for any $z$, whereas `torch.log(torch.sigmoid(z))` returns $-\infty$ once $\sigma(z)$ underflows
        ($z < -104$ in float32). The gradient is $\partial\mathcal L/\partial r_w = -(1 - \sigma(z))/B$: a pair the
        model already ranks by a wide margin contributes almost nothing.

        **Metrics.** Accuracy $= \frac1B\sum_b [r_{w,b} > r_{l,b}]$ (a tie is not a correct ranking), and the mean
        margin $\frac1B\sum_b (r_{w,b} - r_{l,b})$, the two numbers TRL logs.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class BagOfWordsBackbone(nn.Module):
            # A causal toy backbone: position t holds the mean embedding of the real tokens up to t, (B, L, d).
            def __init__(self, vocab_size: int, hidden_size: int):
                super().__init__()
                self.embed = nn.Embedding(vocab_size, hidden_size)

            def forward(self, input_ids, attention_mask):
                real = attention_mask.to(self.embed.weight.dtype).unsqueeze(-1)  # (B, L, 1)
                totals = (self.embed(input_ids) * real).cumsum(dim=1)  # (B, L, d)
                return totals / real.cumsum(dim=1).clamp_min(1)


        def hidden_token_score(vocab_size: int = 16):
            # The preference the reward model must rediscover: a fixed score per token id.
            return torch.randn(vocab_size, generator=torch.Generator().manual_seed(0))


        def synthetic_preferences(num_pairs: int, vocab_size: int = 16, max_len: int = 12, seed: int = 0):
            # Pairs of token sequences (half left-, half right-padded, pad id 0) ranked by hidden_token_score: the
            # chosen one has the higher mean score. Returns chosen ids/mask and rejected ids/mask, each (N, L).
            generator = torch.Generator().manual_seed(seed)
            token_score = hidden_token_score(vocab_size)

            def sequences():
                ids = torch.zeros(num_pairs, max_len, dtype=torch.long)
                mask = torch.zeros(num_pairs, max_len, dtype=torch.long)
                for i in range(num_pairs):
                    n = int(torch.randint(3, max_len + 1, (), generator=generator))
                    where = slice(max_len - n, max_len) if i % 2 else slice(0, n)
                    ids[i, where] = torch.randint(1, vocab_size, (n,), generator=generator)
                    mask[i, where] = 1
                return ids, mask, (token_score[ids] * mask).sum(1) / mask.sum(1)

            a_ids, a_mask, a_score = sequences()
            b_ids, b_mask, b_score = sequences()
            a_first = (a_score > b_score)[:, None]
            return (torch.where(a_first, a_ids, b_ids), torch.where(a_first, a_mask, b_mask),
                    torch.where(a_first, b_ids, a_ids), torch.where(a_first, b_mask, a_mask))
    """)
    lesson.md(r"""
        ## 3. Exercise `last_token_rewards`
    """)
    lesson.exercise(
        "last_token_rewards",
        r'''
        def last_token_rewards(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            """values (B, L) float: a score per position; attention_mask (B, L) bool or 0/1 ints, left or right padded.
            Returns (B,) in values' dtype: each row's value at its rightmost position where the mask is set.
            Raises ValueError for mismatched shapes or a row without any real token."""
            # TODO: validate the shapes and that every row has a real token
            # TODO: the index of the rightmost real token per row (works for left AND right padding); gather
            ### BEGIN SOLUTION
            if values.dim() != 2 or attention_mask.shape != values.shape:
                raise ValueError(f"need values (B, L) and a mask of the same shape, got {tuple(values.shape)}, {tuple(attention_mask.shape)}")
            real = attention_mask.bool()
            if not bool(real.any(dim=1).all()):
                raise ValueError("every row needs at least one real token")
            positions = torch.arange(values.shape[1], device=values.device)  # (L,)
            last = (positions * real).argmax(dim=1)  # (B,): rightmost real token; not mask.sum() - 1 (left padding)
            return values.gather(1, last.unsqueeze(1)).squeeze(1)  # (B,)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `bradley_terry_loss`
    """)
    lesson.exercise(
        "bradley_terry_loss",
        r'''
        def bradley_terry_loss(
            chosen_rewards: torch.Tensor,
            rejected_rewards: torch.Tensor,
            margin: torch.Tensor | float | None = None,
            center_coefficient: float = 0.0,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """chosen_rewards, rejected_rewards: (B,) float, B >= 1; margin: None, a float or (B,); center_coefficient >= 0.

            Returns (loss, accuracy, mean_margin), 0-d tensors: loss = mean(-log sigmoid(r_c - r_r - margin))
            + center_coefficient * mean((r_c + r_r)^2), stable for any reward gap; accuracy = mean(r_c > r_r) (ties
            count as wrong); mean_margin = mean(r_c - r_r). accuracy and mean_margin carry no gradient.
            Raises ValueError for mismatched or empty rewards, a margin of the wrong shape, a negative coefficient."""
            # TODO: validate
            # TODO: the stable loss (softplus), the centring term, and the two metrics (detached)
            ### BEGIN SOLUTION
            if chosen_rewards.dim() != 1 or chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.numel() == 0:
                raise ValueError(f"need two (B,) reward tensors, B >= 1, got {tuple(chosen_rewards.shape)}, {tuple(rejected_rewards.shape)}")
            if center_coefficient < 0:
                raise ValueError(f"center_coefficient must be >= 0, got {center_coefficient}")
            gap = chosen_rewards - rejected_rewards  # (B,)
            if margin is not None:
                margin = torch.as_tensor(margin, dtype=gap.dtype, device=gap.device)
                if margin.dim() > 1 or (margin.dim() == 1 and margin.shape != gap.shape):
                    raise ValueError(f"margin must be a number or of shape {tuple(gap.shape)}, got {tuple(margin.shape)}")
                gap = gap - margin  # the chosen answer must win by at least the margin
            loss = F.softplus(-gap).mean()  # -log sigmoid(gap), exact for any gap
            if center_coefficient:
                loss = loss + center_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
            with torch.no_grad():
                accuracy = (chosen_rewards > rejected_rewards).to(chosen_rewards.dtype).mean()
                mean_margin = (chosen_rewards - rejected_rewards).mean()
            return loss, accuracy, mean_margin
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `RewardModel`

        A backbone is any module called as `backbone(input_ids, attention_mask)` that returns hidden states
        `(B, L, hidden_size)`: the toy `BagOfWordsBackbone` above, your `TinyLlama` without its LM head, or a Hugging
        Face `LlamaModel` wrapped to return `last_hidden_state`. The head is named `score` and has no bias, as in
        Hugging Face, so that its weights load from a `LlamaForSequenceClassification` checkpoint.
    """)
    lesson.exercise(
        "RewardModel",
        r'''
        class RewardModel(nn.Module):
            """backbone(input_ids, attention_mask) -> hidden (B, L, hidden_size); self.score = nn.Linear(hidden_size, 1,
            bias=False). forward(input_ids (B, L) int64, attention_mask (B, L)) -> rewards (B,): the score of the last
            real token. Raises ValueError when input_ids and attention_mask differ in shape."""

            def __init__(self, backbone: nn.Module, hidden_size: int):
                super().__init__()
                # TODO: keep the backbone; the score head
                ### BEGIN SOLUTION
                self.backbone = backbone
                self.score = nn.Linear(hidden_size, 1, bias=False)
                ### END SOLUTION

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                # TODO: validate; hidden states (the backbone needs the mask); a value per position; pool with last_token_rewards
                ### BEGIN SOLUTION
                if input_ids.shape != attention_mask.shape:
                    raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} differ")
                hidden = self.backbone(input_ids, attention_mask)  # (B, L, d)
                values = self.score(hidden).squeeze(-1)  # (B, L)
                return last_token_rewards(values, attention_mask)  # (B,)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Training it

        600 synthetic pairs (300 more held out), ranked by a hidden per-token score, half of them left-padded. The
        reward model is `BagOfWordsBackbone(16, 8)` + your head, trained with your loss and AdamW. Accuracy on the
        held-out pairs climbs past 95% within about fifty steps (pairs whose hidden scores nearly tie stay hard); the right panel shows the learned reward against the
        hidden score it has to rediscover (up to a scale and a shift, which Bradley–Terry cannot see).
    """)
    lesson.code(r"""
        try:
            torch.manual_seed(0)
            train = synthetic_preferences(600, seed=1)
            test = synthetic_preferences(300, seed=2)
            model = RewardModel(BagOfWordsBackbone(16, 8), 8)
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
            history = []
            for step in range(120):
                batch = torch.randint(600, (64,))
                loss, accuracy, margin = bradley_terry_loss(model(train[0][batch], train[1][batch]),
                                                            model(train[2][batch], train[3][batch]))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                with torch.no_grad():
                    _, test_accuracy, test_margin = bradley_terry_loss(model(test[0], test[1]), model(test[2], test[3]))
                history.append((loss.item(), test_accuracy.item(), test_margin.item()))
            losses, accuracies, margins = zip(*history)
            fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
            left.plot(losses, label="train loss"); left.plot(accuracies, label="held-out accuracy")
            left.axhline(0.95, color="k", ls=":", lw=1, label="95%"); left.set_ylim(0, 1.05)
            margin_axis = left.twinx()
            margin_axis.plot(margins, color="tab:green", label="held-out mean margin (right axis)")
            left.set_xlabel("step"); left.set_title("Bradley–Terry training")
            left.legend(fontsize=8, loc="center right"); margin_axis.legend(fontsize=8, loc="lower right")
            token_score = hidden_token_score(16)
            with torch.no_grad():
                hidden_score = (token_score[test[0]] * test[1]).sum(1) / test[1].sum(1)
                right.scatter(hidden_score, model(test[0], test[1]), s=6)
            right.set_xlabel("hidden score of the chosen answer"); right.set_ylabel("learned reward")
            right.set_title("the reward recovers the hidden score")
            fig.tight_layout()
            plt.show()
            print(f"held-out accuracy after 120 steps: {accuracies[-1]:.1%}")
        except NotImplementedError:
            print("the exercises are not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`last_token_rewards`.** `positions * real` is 0 on padding and $t$ on real tokens, so its argmax is the
        rightmost real token whatever the padding side, in one vectorised op; `gather` then reads that column. Rows
        without a real token are refused: their argmax would be 0, a padding position, silently.

        **`bradley_terry_loss`.** `F.softplus(-gap)` is $-\log\sigma(\text{gap})$ computed as
        $\max(-\text{gap}, 0) + \log(1 + e^{-|\text{gap}|})$, exact at any gap. The margin is subtracted *inside*
        the sigmoid: the model is asked to win by at least $m$. The metrics are computed under `no_grad` and ignore
        the margin: accuracy is about the ranking itself.

        **`RewardModel`.** The backbone must see the attention mask: with left padding, an unmasked backbone lets the
        real tokens attend to the pads, and the reward changes with the amount of padding.

        **The usual mistakes, and why they are wrong**: the last column read
        regardless of padding, `mask.sum() - 1` (right padding only), the first real token; `log(sigmoid(·))`
        (infinite loss at large gaps), the pair swapped, the margin added instead of subtracted, ties counted as
        correct, the centring term on the difference; mean pooling instead of the last token, the mask not passed to
        the backbone, a head with a bias.

        **What production code does.** Hugging Face `LlamaForSequenceClassification` (and every
        `GenericForSequenceClassification` in transformers 5) pools at the rightmost token that is not
        `pad_token_id` with exactly the argmax above; it therefore needs a pad id different from every real token.
        TRL's `RewardTrainer` computes `-logsigmoid(chosen - rejected - margin).mean()`, adds
        `center_rewards_coefficient * mean((chosen + rejected) ** 2)` when set, and logs accuracy and margin.
        OpenRLHF's reward models read the same last real token (its "EOS" index from the mask) and normalise rewards
        with running statistics for PPO. InstructGPT put all $\binom{K}{2}$ comparisons of one prompt into the same
        batch, so that each answer's forward pass is shared and the model does not overfit to repeated answers.
    """)
    lesson.mistakes()
    return lesson
