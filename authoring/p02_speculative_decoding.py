"""Source of 02_PyTorch_Algorithms/34_Speculative_Decoding.ipynb (build with
`python -m llm_algo build p02.speculative_decoding`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.speculative_decoding",
        path="02_PyTorch_Algorithms/34_Speculative_Decoding.ipynb",
        title_en="Speculative decoding: draft, verify, and the exact target distribution",
        title_zh="投机解码：草稿、验证与严格一致的目标分布",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p02.sampling", "p02.kv_cache"],
    )
    lesson.title(
        intro=r"""
        **本节要点**

        - **问题**：解码是访存密集型：大模型每步读一遍全部权重只产出一个 token。让一个小的草稿模型（draft）先猜 $k$ 个 token，
          大的目标模型（target）一次前向同时给出这 $k+1$ 个位置的分布，就能一次接受多个 token。
        - **修正的拒绝采样**：草稿 token $x \sim q$，以概率 $\min(1, p(x)/q(x))$ 接受；第一次拒绝时从残差分布
          $\operatorname{norm}(\max(0, p - q))$ 重新采样并停止；全部接受则再从 $p_{k+1}$ 采一个额外（bonus）token。
        - **正确性**：输出分布与直接从目标模型采样**完全相同**：$q(x)\min(1, p/q) + (1-\beta)\,r(x) = p(x)$，其中 $\beta = \sum_x \min(p, q)$。
        - **接受率与加速**：$\alpha = \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q)$；每次目标调用期望产出
          $(1-\alpha^{k+1})/(1-\alpha)$ 个 token；加速比再除以 $(k c + 1)$，$c$ 是草稿与目标单步耗时之比。
        - **贪心模式**：草稿 token 等于目标的 argmax 才接受，输出与目标贪心解码逐 token 相同。
        {易错点}

        A decode step of a large model is memory-bound (lesson `p02.kv_cache`): Llama-3-70B in bf16 reads 140 GB of
        weights to produce one token per sequence, and the GPU's arithmetic units sit mostly idle. Scoring $k+1$
        positions in one forward pass costs almost the same time as scoring one. Speculative decoding (Leviathan et
        al., 2023, *Fast Inference from Transformers via Speculative Decoding*; Chen et al., 2023, *Accelerating
        Large Language Model Decoding with Speculative Sampling*) exploits that: a cheap draft model proposes $k$
        tokens, the target model checks all of them in one pass, and a modified rejection sampling step keeps a
        prefix of them **without changing the output distribution at all**. Leviathan et al. report 2–3× faster
        T5-XXL decoding; Chen et al. report 2–2.5× for Chinchilla-70B with a 4B draft. vLLM, SGLang, TensorRT-LLM
        and Hugging Face's assisted generation all ship it.

        **You will implement** the acceptance probability and the residual distribution, the verification of a
        block of drafts (`verify_block`), the whole draft-then-verify loop with sampled and greedy modes
        (`speculative_generate`), and the acceptance rate and speed-up formulas. **Graded against** the exactness
        identity evaluated exhaustively on tiny vocabularies in float64; Pearson chi-square tests of seeded samples
        against the exact target distribution (false-alarm rate $10^{-3}$ per test); greedy decoding of the target
        alone — a tiny Hugging Face `LlamaForCausalLM` with `generate(do_sample=False)` — token for token; and the
        closed forms of Leviathan et al.
    """
    )
    lesson.md(r"""
        ## 1. The algorithm, with shapes

        Let the target give next-token distributions $p(\cdot \mid \text{prefix})$ and the draft $q(\cdot \mid
        \text{prefix})$, each a row of $V$ probabilities. One step, from a sequence of length $T$:

        1. **Draft** $k$ tokens autoregressively: $x_i \sim q_i = q(\cdot \mid \text{seq}, x_{<i})$, keeping the rows
           $q_1 \dots q_k$: `draft_probs (k, V)`.
        2. **Score** the sequence plus the $k$ drafts with the target **once**: its logits at positions
           $T-1, \dots, T+k-1$ give $p_1 \dots p_{k+1}$: `target_probs (k + 1, V)` ($p_{k+1}$ follows the last draft).
        3. **Verify** left to right: accept $x_i$ with probability $a_i = \min\!\big(1, p_i(x_i) / q_i(x_i)\big)$. At the
           first rejection, emit one token from the residual $r_i = \operatorname{norm}\big(\max(0, p_i - q_i)\big)$ and
           stop. If all $k$ are accepted, emit a bonus token from $p_{k+1}$.

        Every step emits between 1 and $k+1$ tokens for one target call.

        **Why the output is exactly $p$.** For one position, the probability of emitting token $y$ is

        $$
        \underbrace{q(y)\,\min\!\Big(1, \tfrac{p(y)}{q(y)}\Big)}_{\text{drafted and accepted}} \;+\;
        \underbrace{\Big(1 - \textstyle\sum_x q(x) \min\!\big(1, \tfrac{p(x)}{q(x)}\big)\Big)}_{\text{rejected}}\, r(y)
        \;=\; \min(p(y), q(y)) + (1 - \beta)\, \frac{\max(0, p(y) - q(y))}{1 - \beta} \;=\; p(y),
        $$

        with $\beta = \sum_x \min(p(x), q(x))$, since $\sum_y \max(0, p - q) = 1 - \beta$ and
        $\min(p, q) + \max(0, p - q) = p$. By induction over positions the whole emitted sequence is distributed as
        the target's own samples. Nothing is approximate: a bad draft only costs speed.

        **Greedy mode.** With temperature 0 the target is deterministic: accept $x_i$ iff it equals $\arg\max p_i$,
        and at the first mismatch emit $\arg\max p_i$ instead. The output equals the target's greedy decoding token
        for token, which is how speculative decoding is usually tested.

        ## 2. How much faster

        The **acceptance rate** of a position is $\beta = \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q)$. Treating it as
        a constant $\alpha$ (Leviathan et al.'s simplification), the number of tokens a target call produces is
        $1 + $ the number of leading acceptances, capped at $k$:

        $$
        \mathbb{E}[\text{tokens per target call}] = \sum_{i=0}^{k} \alpha^i = \frac{1 - \alpha^{k+1}}{1 - \alpha}
        \quad (k + 1 \text{ when } \alpha = 1).
        $$

        A step costs one target call plus $k$ draft calls; with $c$ the draft's cost relative to the target's, the
        walltime improvement over plain decoding is $\dfrac{1 - \alpha^{k+1}}{(1 - \alpha)(k c + 1)}$. With
        $\alpha = 0.8$, $k = 4$ and $c = 0.05$ that is $2.80\times$; with a poor draft ($\alpha = 0.5$) the same $k$ gives
        $1.61\times$, and larger $k$ only hurts.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 3. Exercise `verify`: one block of drafts

        `acceptance_probability(p, q, tokens)` gives $\min(1, p(x)/q(x))$ per row (a token the draft gave probability 0
        is never proposed; return 1 for it). `residual_distribution(p, q)` gives
        $\operatorname{norm}(\max(0, p - q))$ per row; where $p = q$ the residual is undefined and never sampled —
        return $p$ there. `verify_block` runs step 3 with the `generator` for every random number (uniforms for the
        acceptance tests, `torch.multinomial` for the replacement or bonus token) and returns the emitted tokens
        `(n,)` int64, $1 \le n \le k + 1$, and the number of accepted drafts. Refuse mismatched shapes and rows that are not
        probability distributions (negative, or not summing to 1 within 1e-4) with a `ValueError`.
    """)
    lesson.exercise(
        "verify",
        r'''
        def acceptance_probability(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
            """p, q: (N, V) target and draft probabilities; tokens: (N,) int64 drafted. returns (N,) min(1, p/q)."""
            # TODO: gather p and q at the tokens; the ratio, capped at 1 (1 where q is 0)
            ### BEGIN SOLUTION
            p_x = p.gather(-1, tokens[:, None])[:, 0]                                # (N,)
            q_x = q.gather(-1, tokens[:, None])[:, 0]
            return torch.where(q_x > 0, (p_x / q_x.clamp_min(1e-30)).clamp(max=1.0), torch.ones_like(p_x))
            ### END SOLUTION


        def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
            """p, q: (N, V). returns (N, V): max(0, p - q) normalised per row (p itself where p == q)."""
            # TODO: the positive part of p - q; normalise rows with mass; fall back to p for the others
            ### BEGIN SOLUTION
            excess = (p - q).clamp_min(0.0)                                          # (N, V)
            mass = excess.sum(dim=-1, keepdim=True)                                  # (N, 1) = 1 - beta
            return torch.where(mass > 0, excess / mass.clamp_min(1e-30), p)
            ### END SOLUTION


        def verify_block(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                         generator: torch.Generator | None = None):
            """draft_tokens (k,) int64, draft_probs (k, V), target_probs (k + 1, V).
            returns (emitted (n,) int64 with 1 <= n <= k + 1, num_accepted int)."""
            # TODO: validate shapes and that every row is a probability distribution
            # TODO: for i in order: accept with probability a_i (a uniform from the generator);
            #       at the first rejection emit a token from the residual and stop
            # TODO: all accepted -> a bonus token from target_probs[k]
            ### BEGIN SOLUTION
            k = draft_tokens.shape[0]
            if draft_probs.dim() != 2 or draft_probs.shape[0] != k or target_probs.shape != (k + 1, draft_probs.shape[1]):
                raise ValueError(f"expected draft_tokens (k,), draft_probs (k, V), target_probs (k + 1, V); got "
                                 f"{tuple(draft_tokens.shape)}, {tuple(draft_probs.shape)}, {tuple(target_probs.shape)}")
            for name, probs in (("draft_probs", draft_probs), ("target_probs", target_probs)):
                if bool((probs < 0).any()) or not torch.allclose(probs.sum(-1).double(), torch.ones(len(probs), dtype=torch.float64), atol=1e-4):
                    raise ValueError(f"every row of {name} must be a probability distribution (>= 0, summing to 1)")
            accept = acceptance_probability(target_probs[:k], draft_probs, draft_tokens)   # (k,)
            emitted = []
            for i in range(k):
                if torch.rand((), generator=generator, dtype=torch.float64) < accept[i]:
                    emitted.append(int(draft_tokens[i]))
                    continue
                residual = residual_distribution(target_probs[i : i + 1], draft_probs[i : i + 1])  # (1, V)
                emitted.append(int(torch.multinomial(residual, 1, generator=generator)))
                return torch.tensor(emitted, dtype=torch.long), i
            emitted.append(int(torch.multinomial(target_probs[k : k + 1], 1, generator=generator)))  # bonus
            return torch.tensor(emitted, dtype=torch.long), k
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks evaluate the identity of section 1 with your two functions on random pairs $(p, q)$ of small
        vocabularies in float64 (including $q(x) = 0$, $p = q$ and disjoint supports), run `verify_block` 3,000 times
        with a seeded generator and test the first emitted token against $p_1$ and the second (after an acceptance)
        against $p_2$ by chi-square, and compare the mean number of accepted drafts with its exact expectation.

        ## 4. Exercise `speculative_generate`

        The models are callables `(1, T) int64 -> (1, T, V)` logits for every position, like a causal LM's forward
        (no KV cache here, to keep the loop readable; production code keeps one for each model and rolls the target's
        back by the rejected positions). Each step drafts `min(num_draft, tokens still needed)` tokens (the draft
        samples from its softmax, or takes the argmax when `greedy`), calls the target **once** on the sequence plus
        the drafts, verifies (`verify_block`, or the greedy rule), and appends what was emitted. Stop at
        `max_new_tokens` (cut the last block if it overshoots). Return the new tokens `(max_new_tokens,)` and a dict
        with `target_calls`, `drafted` and `accepted`. Refuse `num_draft < 1` or `max_new_tokens < 1`.
    """)
    lesson.exercise(
        "speculative_generate",
        r'''
        @torch.no_grad()
        def speculative_generate(target, draft, prompt: torch.Tensor, num_draft: int, max_new_tokens: int,
                                 generator: torch.Generator | None = None, greedy: bool = False):
            """target, draft: callables (1, T) int64 -> (1, T, V) logits; prompt (T,) int64.
            returns (tokens (max_new_tokens,) int64, {"target_calls": int, "drafted": int, "accepted": int})."""
            # TODO: validate; loop until max_new_tokens tokens are out:
            #   draft k tokens one at a time (softmax in float32; sample with the generator, or argmax if greedy)
            #   one target call on sequence + drafts: probabilities at the last k + 1 positions
            #   greedy: accept while the draft equals the target's argmax, then emit the target's argmax;
            #   sampled: verify_block; append, count the stats
            ### BEGIN SOLUTION
            if num_draft < 1 or max_new_tokens < 1:
                raise ValueError(f"num_draft and max_new_tokens must be >= 1, got {num_draft} and {max_new_tokens}")
            sequence = prompt[None].clone()                                                 # (1, T)
            stats = {"target_calls": 0, "drafted": 0, "accepted": 0}
            new_tokens = []
            while len(new_tokens) < max_new_tokens:
                k = min(num_draft, max_new_tokens - len(new_tokens))
                drafted, draft_rows = sequence, []
                for _ in range(k):
                    q = torch.softmax(draft(drafted)[0, -1].float(), dim=-1)                 # (V,)
                    token = q.argmax() if greedy else torch.multinomial(q, 1, generator=generator)[0]
                    draft_rows.append(q)
                    drafted = torch.cat((drafted, token.view(1, 1)), dim=1)
                draft_tokens = drafted[0, -k:]                                               # (k,)
                p = torch.softmax(target(drafted)[0, -k - 1 :].float(), dim=-1)             # (k + 1, V)
                stats["target_calls"] += 1
                stats["drafted"] += k
                if greedy:
                    best = p.argmax(dim=-1)                                                  # (k + 1,)
                    matches = (draft_tokens == best[:k]).long()
                    accepted = int(matches.cumprod(0).sum())                                 # leading matches
                    emitted = torch.cat((draft_tokens[:accepted], best[accepted : accepted + 1]))
                else:
                    emitted, accepted = verify_block(draft_tokens, torch.stack(draft_rows), p, generator)
                stats["accepted"] += accepted
                new_tokens.extend(emitted.tolist())
                sequence = torch.cat((sequence, emitted[None]), dim=1)
            return torch.tensor(new_tokens[:max_new_tokens], dtype=torch.long), stats
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks decode with a tiny Hugging Face `LlamaForCausalLM` as the target and a smaller one as the draft in
        greedy mode and compare with the target's own `generate(do_sample=False)`; with the draft equal to the target
        every draft must be accepted; and, with bigram models over 3 tokens, 1,500 sampled continuations of two
        tokens are tested against the target's exact joint distribution by chi-square.

        ## 5. Exercise `speedup`

        `acceptance_rate(p, q)` per row, `expected_tokens(alpha, k)` and `speedup(alpha, k, cost_ratio)` from
        section 2. `alpha` must lie in $[0, 1]$, `k` be an int $\ge 0$ and `cost_ratio` $\ge 0$ (`ValueError`
        otherwise).
    """)
    lesson.exercise(
        "speedup",
        r'''
        def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
            """p, q: (N, V). returns (N,) sum_x min(p, q), the probability that a drafted token is accepted."""
            # TODO: one line
            ### BEGIN SOLUTION
            return torch.minimum(p, q).sum(dim=-1)
            ### END SOLUTION


        def expected_tokens(alpha: float, k: int) -> float:
            """Expected tokens per target call with k drafts accepted with probability alpha each."""
            # TODO: validate; the geometric sum (k + 1 at alpha = 1)
            ### BEGIN SOLUTION
            if not (0.0 <= alpha <= 1.0) or not isinstance(k, int) or k < 0:
                raise ValueError(f"need 0 <= alpha <= 1 and an int k >= 0, got {alpha} and {k!r}")
            if alpha == 1.0:
                return float(k + 1)
            return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
            ### END SOLUTION


        def speedup(alpha: float, k: int, cost_ratio: float) -> float:
            """Walltime improvement over plain decoding: expected tokens per step / the step's cost (k * c + 1)."""
            # TODO: validate cost_ratio; combine
            ### BEGIN SOLUTION
            if cost_ratio < 0:
                raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio}")
            return expected_tokens(alpha, k) / (k * cost_ratio + 1.0)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Speed-up against the number of drafts

        Section 2's formula for a cheap draft ($c = 0.05$) at several acceptance rates: each curve has a best $k$
        (past the plotted range for $\alpha \ge 0.9$), beyond which the extra drafts cost more than they return. The
        better the draft, the longer the blocks worth drafting.
    """)
    lesson.code(r"""
        try:
            ks = list(range(0, 13))
            plt.figure(figsize=(6, 3.4))
            for alpha in (0.5, 0.7, 0.8, 0.9, 0.95):
                values = [speedup(alpha, k, 0.05) for k in ks]
                best = max(range(len(ks)), key=lambda i: values[i])
                plt.plot(ks, values, "o-", ms=3, label=f"alpha = {alpha} (best k = {ks[best]}, {values[best]:.2f}x)")
            plt.axhline(1.0, color="gray", lw=0.8)
            plt.xlabel("draft tokens per step, k"); plt.ylabel("speed-up over plain decoding")
            plt.title("speculative decoding, draft cost c = 0.05"); plt.legend(fontsize=7); plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print("finish speedup to draw the curves")
    """)
    lesson.md(r"""
        ### Your tiny Llama as target, a noisy copy as draft

        The target is your `TinyLlama` from `p02.tiny_llama` (the reference where yours does not pass yet) with
        sharpened random weights; the draft is the same model with noise added to every weight, so that its
        distributions drift away from the target's as the noise grows. The cell decodes 24 tokens from four prompts
        with `speculative_generate` (sampled, $k = 4$), measures the tokens per target call, and compares them with
        the formula of section 2 at the mean acceptance rate $\sum_x \min(p, q)$ over the generated positions. They agree within the
        noise of 96 tokens; the gaps come from the rate varying from position to position and from the last block
        being cut at 24 tokens (at noise 0 every draft is accepted, yet 24 tokens take 5 calls: 4.8 per call, not 5).
    """)
    lesson.code(r"""
        import copy
        from types import SimpleNamespace

        TinyLlama = lesson.use("p02.tiny_llama", "TinyLlama")
        args = SimpleNamespace(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, hidden_dim=160,
                               vocab_size=128, norm_eps=1e-6, rope_theta=10000.0, tie_embeddings=False)
        torch.manual_seed(0)
        target_model = TinyLlama(args).eval()
        with torch.no_grad():
            target_model.lm_head.weight.mul_(3.0)
        try:
            noise_levels, measured, predicted = [0.0, 0.1, 0.2, 0.4, 0.8], [], []
            for noise in noise_levels:
                draft_model = copy.deepcopy(target_model)
                with torch.no_grad():
                    for weight in draft_model.parameters():
                        weight.add_(noise * weight.std() * torch.randn_like(weight))
                generator = torch.Generator().manual_seed(1)
                calls, rates = 0, []
                for prompt_seed in range(4):
                    prompt = torch.randint(0, 128, (6,), generator=torch.Generator().manual_seed(prompt_seed))
                    tokens, stats = speculative_generate(target_model, draft_model, prompt, 4, 24, generator=generator)
                    calls += stats["target_calls"]
                    with torch.no_grad():  # the acceptance rate of every position of the generated sequence
                        sequence = torch.cat((prompt, tokens))[None]
                        p = torch.softmax(target_model(sequence)[0, 5:-1].float(), dim=-1)
                        q = torch.softmax(draft_model(sequence)[0, 5:-1].float(), dim=-1)
                    rates.append(acceptance_rate(p, q))
                alpha = float(torch.cat(rates).mean())
                measured.append(96 / calls)
                predicted.append(expected_tokens(min(alpha, 1.0), 4))
                print(f"noise {noise:.1f}: mean acceptance rate {alpha:.2f}, tokens per target call {96 / calls:.2f} "
                      f"(formula {predicted[-1]:.2f})")
            plt.figure(figsize=(5.5, 3.2))
            plt.plot(noise_levels, measured, "o-", label="measured")
            plt.plot(noise_levels, predicted, "s--", label="(1 - a^(k+1)) / (1 - a) at the measured a")
            plt.xlabel("draft weight noise (x weight std)"); plt.ylabel("tokens per target call (k = 4)")
            plt.title("tiny Llama target, noisy draft"); plt.legend(fontsize=8); plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("finish verify, speculative_generate and speedup to run the experiment")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`acceptance_probability` and `residual_distribution`.** `gather` picks each row's drafted token; the ratio
        is capped at 1 because a token the target likes *more* than the draft must always be kept (it is
        under-proposed, and the residual will add more of it on rejections). The residual keeps only the tokens the
        draft under-proposes; its mass is exactly $1 - \beta$, the rejection probability, which is what makes the
        identity work.

        **`verify_block`.** One uniform per draft, compared with $a_i$; the first rejection ends the block, because
        every later draft was conditioned on a token that is no longer there. The bonus token when all $k$ are
        accepted is free: the target already computed $p_{k+1}$ in the same pass.

        **`speculative_generate`.** The target's logits at positions $T-1 \dots T+k-1$ are the last $k + 1$ columns of
        its output on the extended sequence: column $T - 1$ (the last prompt token) predicts the first draft. The
        greedy rule counts leading matches with a cumulative product. The last block is shortened so that no more
        than `max_new_tokens` tokens are drafted.

        **The usual mistakes, and why they are wrong**:
        - *$p/q$ without the cap* — harmless for acceptance (a uniform is never above 1) but wrong as a probability;
          *$q/p$* instead of $p/q$: over-proposed tokens are accepted more, not less;
        - *resampling from $p$* after a rejection instead of from the residual: tokens the draft already proposed get
          counted twice, and the output is no longer $p$ — only the statistics can see it, since every individual
          output is a plausible token;
        - *no bonus token*: still exact, but one token per step is lost when all drafts pass;
        - *continuing after a rejection*; *target probabilities off by one position* (column $T$ instead of $T-1$);
        - *greedy accepting the whole block* without comparing, or emitting the draft's token at a mismatch.
        - *random numbers from the global generator* (the acceptance uniforms or the draft samples drawn without
          `generator=`): the distribution is still right, but the same seed no longer gives the same output and the
          caller's global RNG stream moves; the checks run twice with equal seeds and compare `torch.get_rng_state()`.

        **Cost.** A step costs $k$ draft forwards and one target forward over $k + 1$ positions. On a GPU the target
        forward over $k+1$ positions takes about as long as over one while decoding is memory-bound, which is the
        whole premise; at large batch sizes decoding becomes compute-bound and the gain shrinks, which is why vLLM
        turns speculation off above a batch-size threshold in some configurations.

        **What production code does differently.**
        - *KV caches for both models*, with the target's cache rolled back to the accepted length after each step
          (in a paged cache, by moving the length pointer; nothing is copied).
        - *Draft-free variants*: Medusa heads and EAGLE predict several tokens from the target's own hidden states;
          DeepSeek-V3's multi-token prediction modules (lesson `p02.mtp`) serve as a built-in draft; n-gram/prompt
          lookup drafts copy spans from the context (Hugging Face's `prompt_lookup_num_tokens`).
        - *Tree speculation* (SpecInfer, Medusa, EAGLE-2) verifies several candidate continuations at once with a tree
          attention mask, raising the expected accepted length for the same target call.
        - *Batched verification* in vLLM handles rows with different numbers of accepted tokens in one kernel
          (its rejection sampler is a fused GPU kernel that implements exactly the rule above).
    """)
    lesson.mistakes()
    return lesson
