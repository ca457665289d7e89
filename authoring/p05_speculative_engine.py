"""Source of 05_Projects/03_Speculative_Engine.ipynb (build with `python -m llm_algo build p05.speculative_engine`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p05.speculative_engine",
        path="05_Projects/03_Speculative_Engine.ipynb",
        title_en="Project: speculative decoding end to end",
        title_zh="项目：端到端的投机解码",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p02.tiny_llama", "p02.kv_cache", "p02.speculative_decoding"],
    )
    lesson.title(
        intro=r"""
        Decoding one token reads every weight of the model once, so a large model decodes at the speed of its memory,
        not of its arithmetic. Speculative decoding (Leviathan et al., 2023; Chen et al., 2023) lets a cheap **draft**
        guess $k$ tokens and has the **target** check all of them in one forward pass, which costs about as much as a
        one-token step; with rejection sampling the output has *exactly* the target's distribution. Leviathan et al.
        report 2 to 3 times faster T5-XXL decoding with identical outputs; Chen et al. 2 to 2.5 times for Chinchilla
        70B. `p02.speculative_decoding` derived the rule on probability vectors and decoded without a KV
        cache; a real engine keeps one for each model, and the target's cache must forget the drafts it rejected.

        **You will build** `CachedLM`, your tiny Llama (`p02.tiny_llama`) behind a KV cache that can be **rolled
        back** (your `KVCache` from `p02.attention_mha_gqa`), and `speculative_decode`, the whole loop on two such
        models: draft $k$ tokens, verify them with one target call, accept each with probability
        $\min(1, p/q)$, resample a rejection from the normalised residual $\max(0, p - q)$, roll both caches back.
        The pair: a 4-layer target and a 1-layer draft that shares its embedding, first layer, final norm and head
        (an *early-exit* draft, as in LayerSkip and Draft & Verify). **Graded on outcomes**: greedy output identical
        to the target's own greedy decoding; sampled outputs follow the target's distribution (a chi-square test with
        a stated false-alarm rate); at most 0.6 target calls per token on the tiny pair with $k = 4$; acceptance rate
        and speed-up reported.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **投机解码**：草稿模型（draft）一次猜 $k$ 个 token，目标模型（target）一次前向同时算出这 $k+1$ 个位置的分布并验证；每次目标调用至少产出 1 个 token，最多 $k+1$ 个。
        - **接受规则**：草稿 token $x \sim q$ 以概率 $\min(1, p(x)/q(x))$ 接受；第一次拒绝时从归一化的残差分布 $\max(0, p-q)/\sum\max(0,p-q)$ 重新采样并结束本轮；全部接受时从 $p_{k+1}$ 追加一个 bonus token。输出分布与目标模型完全相同。
        - **greedy 版本**：草稿取 argmax，接受直到第一个与目标 argmax 不同的位置，再输出目标的 argmax；结果与目标自己的 greedy 解码逐 token 相同。
        - **KV cache 回滚（rollback）**：目标模型的 cache 里写入了全部 $k$ 个草稿，被拒绝的要截掉（长度回到“已确认序列 + 接受数”）；不回滚，下一轮就会注意到不存在的 token。
        - **早退草稿（early exit）**：1 层草稿共享 4 层目标的 embedding、第一层、最终 norm 和输出头，不需要单独训练。
        - **评分**：greedy 与目标 greedy 完全一致；采样结果通过卡方检验（误报率 $10^{-3}$）；$k=4$ 时每个 token 的目标调用次数 ≤ 0.6。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. One round, with shapes

        Let the confirmed sequence be $x_{1..n}$ and let both models have cached all of it except the last token
        (that token is *pending*: it has not been fed yet). One round with $k$ drafts:

        1. **Draft** (k calls of the draft): feed the pending tokens, take $q_1$ from the last row, draw
           $d_1 \sim q_1$; feed $d_1$, get $q_2$, draw $d_2$; ... up to $d_k$. Each $q_i$ is a `(V,)` row.
        2. **Verify** (1 call of the target): feed the target's pending tokens followed by $d_1 \dots d_k$; its last
           $k + 1$ rows give $p_1 \dots p_{k+1}$, `(k + 1, V)`: $p_i$ is the target's distribution at the position of
           $d_i$, and $p_{k+1}$ the one after $d_k$.
        3. **Accept** $d_i$ in order with probability $\min(1, p_i(d_i) / q_i(d_i))$ (a uniform from the generator).
           At the first rejection, emit one token from $\operatorname{norm}(\max(0, p_i - q_i))$ and stop. If all
           $k$ are accepted, emit a **bonus** token from $p_{k+1}$. The round emits $a + 1$ tokens, $a$ the accepted
           count.
        4. **Roll back.** The target has now cached $n + k$ positions, but only $n + a$ of them are confirmed tokens
           (the emitted one is the new pending token). Truncate it to $n + a$. The draft has cached
           $n + k - 1$ positions (it never fed $d_k$): truncate it to $\min(n + k - 1, n + a)$.

        `p02.speculative_decoding` proved the output has the target's distribution: the probability of emitting $x$
        at a position is $q(x)\min(1, p(x)/q(x)) + (1 - \beta)\,\frac{\max(0, p(x) - q(x))}{1 - \beta} = p(x)$, with
        $\beta = \sum_x \min(p, q)$ the acceptance rate. With $k$ drafts accepted independently with probability
        $\alpha$, a round emits $\frac{1 - \alpha^{k+1}}{1 - \alpha}$ tokens in expectation for one target call.

        ## 2. Rolling back a KV cache

        Your `KVCache` keeps preallocated buffers and a length per sequence; `update` writes the new keys at
        positions `lengths[b], ...` and returns the prefix up to `length`. Rolling back to $L$ is therefore just
        setting every layer's `lengths` to $L$ and `length` to $L$: the stale keys past $L$ are still in the buffer,
        never read (the returned prefix stops at $L$), and overwritten by the next update. No copy, $O(1)$. A cache
        that grows by `torch.cat` is truncated by a slice (a view), but its next `torch.cat` copies it whole anyway;
        a paged cache (`p02.paged_attention`) moves its length back and frees the blocks past $L$. vLLM rolls back the
        request's count of computed tokens, so the rejected drafts' slots are overwritten by the next step.

        ## 3. The pair

        The setup cell builds a 4-layer target with random weights (its head scaled so that distributions are peaked)
        and a 1-layer draft with the target's embedding, layer 0, final norm and head: the draft is the target
        *exiting early*. No training, no download; on this pair about 83% of the probability mass agrees
        ($\sum_x \min(p, q)$) and the greedy choices agree two times out of three. Production drafts are either a
        small model of the same family (Llama 3.2 1B for Llama 3.1 70B; the vocabularies must match), an
        early exit of the target itself (LayerSkip, Elhoushi et al., 2024), or extra heads on the target's last hidden
        state (Medusa, EAGLE).
    """)
    lesson.setup(r"""
        import time
        from types import SimpleNamespace

        import matplotlib.pyplot as plt
        import torch

        # Your building blocks from the earlier lessons (the reference where yours does not pass its checks yet)
        TinyLlama, generate_greedy = lesson.use("p02.tiny_llama", "TinyLlama", "generate_greedy")
        KVCache = lesson.use("p02.attention_mha_gqa", "KVCache")

        VOCAB = 32


        def make_pair(seed: int = 0):
            '''(target, draft): a 4-layer tiny Llama with random weights and its 1-layer early exit.'''
            torch.manual_seed(seed)
            args = SimpleNamespace(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=8, hidden_dim=64,
                                   vocab_size=VOCAB, norm_eps=1e-6, rope_theta=10000.0, tie_embeddings=False)
            target = TinyLlama(args).eval()
            with torch.no_grad():
                target.lm_head.weight.mul_(3.0)  # peaked next-token distributions
            draft = TinyLlama(SimpleNamespace(**{**vars(args), "n_layers": 1})).eval()
            shared = {name: value for name, value in target.state_dict().items()
                      if not name.startswith("layers.") or name.startswith("layers.0.")}
            draft.load_state_dict(shared)  # embedding, layer 0, final norm and head of the target
            return target, draft
    """)
    lesson.md(r"""
        ## 4. Exercise `CachedLM`

        A model behind its KV caches (one `KVCache(max_len)` per layer). `extend(tokens)` feeds a non-empty list of
        token ids after everything cached and returns their logits `(n, V)` float32 (row $i$: the distribution of the
        token after `tokens[i]`); `length` is the number of cached positions; `rollback(length)` forgets every
        position from `length` on. Refuse an empty `tokens` and a `length` outside $[0, \text{current length}]$ with
        `ValueError`.
    """)
    lesson.exercise(
        "CachedLM",
        r'''
        class CachedLM:
            """A causal LM with its KV caches: extend(tokens) -> logits (n, V); rollback(length)."""

            def __init__(self, model, max_len: int = 256):
                self.model = model
                self.caches = [KVCache(max_len) for _ in model.layers]

            @property
            def length(self) -> int:
                return self.caches[0].length

            @torch.no_grad()
            def extend(self, tokens) -> torch.Tensor:
                """tokens: list of n >= 1 ints, fed after the cached positions. returns (n, V) float32 logits."""
                # TODO: refuse an empty list; one forward of (1, n) through the caches
                ### BEGIN SOLUTION
                if len(tokens) == 0:
                    raise ValueError("extend needs at least one token")
                logits = self.model(torch.tensor([list(tokens)]), caches=self.caches)  # (1, n, V)
                return logits[0].float()
                ### END SOLUTION

            def rollback(self, length: int) -> None:
                """Forget every cached position from `length` on (0 <= length <= self.length)."""
                # TODO: refuse a length outside [0, self.length]; set every layer's lengths and length
                ### BEGIN SOLUTION
                if not 0 <= length <= self.length:
                    raise ValueError(f"cannot roll back to {length}: {self.length} positions are cached")
                for cache in self.caches:
                    if cache.lengths is not None:
                        cache.lengths.fill_(length)  # positions >= length are stale: overwritten by the next update
                    cache.length = length
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks feed your `CachedLM` in pieces and compare every row with one full forward of the model (float64
        oracle, the package's tolerance policy), ask a bfloat16 model for float32 logits, roll back and feed
        *different* tokens (a cache that kept the old keys gives the old context's logits), roll back to 0, and
        refuse bad lengths and an empty list.

        ## 5. Exercise `speculative_decode`

        Section 1, on two objects with `CachedLM`'s interface (`extend`, `rollback`, `length`), both empty at the start.
        Each round drafts `min(k, tokens still needed)` tokens, calls the target's `extend` **once**, accepts, and
        rolls both back; stop after `max_new_tokens` (cut the last round if it overshoots). Sampling: softmax of the
        float32 logits; every random number from `generator` (the draft's draws, one `torch.rand((), generator=...,
        dtype=torch.float64)` per acceptance test, the resampled or bonus token). `greedy=True`: drafts are the
        draft's argmax, accepted while they equal the target's argmax, and the emitted token is the target's argmax.
        Return the new tokens (a list) and `{"target_calls", "draft_calls", "drafted", "accepted"}`. Refuse
        `k < 1`, `max_new_tokens < 1`, an empty prompt and a model that is not empty (`ValueError`).
    """)
    lesson.exercise(
        "speculative_decode",
        r'''
        def speculative_decode(target, draft, prompt, k: int, max_new_tokens: int, generator=None, greedy=False):
            """target, draft: empty CachedLM-like objects; prompt: list of ints.
            returns (list of max_new_tokens ints, {"target_calls", "draft_calls", "drafted", "accepted"})."""
            # TODO: validate; sequence = prompt; loop until max_new_tokens tokens are out:
            #   draft kk = min(k, still needed) tokens: feed the draft its unseen tokens, then each draft token
            #   one target extend of its unseen tokens + the drafts: the last kk + 1 rows are p_1 .. p_{kk+1}
            #   accept in order (min(1, p/q) or argmax equality); at a rejection emit from the residual (or argmax)
            #   all accepted: a bonus token from p_{kk+1}; roll both models back to the confirmed tokens
            ### BEGIN SOLUTION
            if k < 1 or max_new_tokens < 1 or len(prompt) == 0:
                raise ValueError(f"need k >= 1, max_new_tokens >= 1 and a prompt; got {k}, {max_new_tokens}, {prompt}")
            if target.length != 0 or draft.length != 0:
                raise ValueError("target and draft must start empty")
            sequence, out = list(prompt), []
            stats = {"target_calls": 0, "draft_calls": 0, "drafted": 0, "accepted": 0}
            while len(out) < max_new_tokens:
                kk = min(k, max_new_tokens - len(out))
                start = len(sequence)
                drafts, q_rows, feed = [], [], sequence[draft.length :]
                for _ in range(kk):
                    q = torch.softmax(draft.extend(feed)[-1].float(), dim=-1)                   # (V,)
                    stats["draft_calls"] += 1
                    token = int(q.argmax()) if greedy else int(torch.multinomial(q, 1, generator=generator))
                    drafts.append(token)
                    q_rows.append(q)
                    feed = [token]
                logits = target.extend(sequence[target.length :] + drafts)                       # (pending + kk, V)
                p_rows = torch.softmax(logits[-(kk + 1) :].float(), dim=-1)                      # (kk + 1, V)
                stats["target_calls"] += 1
                stats["drafted"] += kk
                accepted, emitted = 0, None
                for i in range(kk):
                    p, q, x = p_rows[i], q_rows[i], drafts[i]
                    if greedy:
                        ok = x == int(p.argmax())
                    else:
                        ok = bool(torch.rand((), generator=generator, dtype=torch.float64) < min(1.0, float(p[x] / q[x])))
                    if not ok:
                        residual = (p - q).clamp_min(0.0)
                        residual = residual / residual.sum()                                      # norm(max(0, p - q))
                        emitted = int(p.argmax()) if greedy else int(torch.multinomial(residual, 1, generator=generator))
                        break
                    accepted += 1
                if emitted is None:                                                              # all accepted: bonus
                    bonus = p_rows[kk]
                    emitted = int(bonus.argmax()) if greedy else int(torch.multinomial(bonus, 1, generator=generator))
                stats["accepted"] += accepted
                new = drafts[:accepted] + [emitted]
                target.rollback(start + accepted)                   # keep the confirmed tokens; `emitted` is pending
                draft.rollback(min(draft.length, start + accepted))
                sequence += new
                out += new
            return out[:max_new_tokens], stats
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks decode greedily with the tiny pair behind the checks' own cache-free wrapper (each `extend`
        recomputes the whole kept sequence, so a model that is not rolled back sees the rejected drafts) and compare
        with your `generate_greedy` on the target, for $k = 1, 3, 4$, with the pair's draft and with the early exit
        of another random model (most of its drafts are rejected, so every round rolls back); decode with a draft identical to the target
        (every draft accepted; the calls, the drafts and the tokens fed to each model follow from the round structure:
        nothing is fed twice); sample 3,000 two-token continuations from two
        different bigram tables and test the counts of the 16 outcomes against the target's exact joint distribution
        (every expected count at least 8.8, so Pearson's approximation holds) by Pearson's chi-square (false-alarm rate $10^{-3}$: a correct decoder fails it on one seed in a thousand, and
        the check's seed is fixed), for $k = 1$ and $k = 2$; count the target's calls with your `CachedLM` on the pair
        for 48 greedy tokens with $k = 4$: at most **0.6** per token (the reference measures 0.21: on that prompt
        the target's greedy continuation settles into a loop that its early exit predicts); and refuse bad arguments.

        ### Acceptance and speed-up against $k$

        The cell below decodes 40 tokens from three prompts with your two functions, greedy and sampled, for
        $k = 1, 2, 4, 6$, and reports the acceptance rate (accepted / drafted), the tokens per target call, and the
        wall time against your plain `generate_greedy` on the target. The speed-up in target calls is what a GPU
        would see if the draft were free; the time on this CPU includes the draft's calls (a quarter of the target's
        layers each) and Python overhead.
    """)
    lesson.code(r"""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matrices: one thread beats two on a busy CPU (restored below)
        target, draft = make_pair()
        prompts = [[3, 1, 4], [1, 5, 9, 2], [6, 5]]
        rows = []
        try:
            start = time.perf_counter()
            for prompt in prompts:
                generate_greedy(target, torch.tensor([prompt]), max_new_tokens=40)
            plain_s = time.perf_counter() - start
            for k in (1, 2, 4, 6):
                for greedy in (True, False):
                    calls = drafted = accepted = 0
                    start = time.perf_counter()
                    for i, prompt in enumerate(prompts):
                        _, stats = speculative_decode(CachedLM(target), CachedLM(draft), prompt, k, 40,
                                                      generator=torch.Generator().manual_seed(i), greedy=greedy)
                        calls += stats["target_calls"]; drafted += stats["drafted"]; accepted += stats["accepted"]
                    rows.append((k, greedy, accepted / drafted, 40 * len(prompts) / calls,
                                 plain_s / (time.perf_counter() - start)))
        except NotImplementedError:
            print("CachedLM and speculative_decode first")
        torch.set_num_threads(threads)
        if rows:
            fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
            for greedy, style in ((True, "o-"), (False, "s--")):
                sel = [r for r in rows if r[1] == greedy]
                name = "greedy" if greedy else "sampled"
                axes[0].plot([r[0] for r in sel], [r[3] for r in sel], style, label=f"{name}: tokens per target call")
                axes[0].plot([r[0] for r in sel], [r[2] for r in sel], style, alpha=0.5, label=f"{name}: acceptance rate")
                axes[1].plot([r[0] for r in sel], [r[4] for r in sel], style, label=name)
            axes[0].set_xlabel("drafts per round, k"); axes[0].legend(fontsize=7)
            axes[1].axhline(1.0, color="gray", lw=0.8)
            axes[1].set_xlabel("drafts per round, k"); axes[1].set_ylabel("speed-up over generate_greedy (this CPU)")
            axes[1].legend(fontsize=8); plt.tight_layout(); plt.show()
            for k, greedy, rate, per_call, speed in rows:
                print(f"k={k} {'greedy ' if greedy else 'sampled'}: acceptance {rate:.2f}, {per_call:.2f} tokens per "
                      f"target call, wall-time speed-up x{speed:.2f}")
    """)
    lesson.md(r"""
        ### Reading the numbers

        Tokens per target call grow with $k$ and flatten: with acceptance $\alpha$ per draft they approach
        $1 / (1 - \alpha)$, and every extra draft costs a draft call whether it is accepted or not. On a GPU the
        target's verify call of $k + 1$ tokens costs about as much as a one-token step (both read all the weights),
        so tokens per target call is close to the speed-up when the draft is cheap. On this CPU the model is so
        small that each call is mostly Python overhead, which does not shrink with the layer count: a 1-layer draft
        call costs a good part of a 4-layer target call, and the wall-time speed-up stays far below the tokens per
        target call (from 0.85 to 2.1 across our runs, depending on how busy the machine was). Sampled decoding
        accepts less than greedy here (about 0.7 against 0.83 at $k = 4$ in our runs) because $\min(1, p/q)$ rejects some draws even where
        the argmaxes agree.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`CachedLM`.** `extend` is one forward of `(1, n)` through the caches: the model's default mask and positions
        (the cached length onwards) are right for a single unpadded sequence. `rollback` only moves lengths: the
        buffers keep the stale keys, which the next `update` overwrites at the same positions. Forgetting `lengths`
        (resetting `length` alone) makes the next write land after the stale keys, at the wrong positions: wrong
        logits, or a shape error in attention, depending on how your `KVCache` slices.

        **`speculative_decode`.** The *pending* bookkeeping is the part people get wrong: each model is fed
        `sequence[model.length:]`, the confirmed tokens it has not cached yet (the whole prompt in the first round,
        then one or two tokens). The verify call returns a row per fed token; only the last $k + 1$ matter. The
        acceptance test compares a uniform with $\min(1, p(x)/q(x))$; $q(x) > 0$ because $x$ was drawn from $q$ (in
        greedy mode the ratio is never computed). The residual is renormalised explicitly: `torch.multinomial` would
        accept unnormalised weights, but an inverse-CDF sampler, or a kernel that draws with one uniform, would not.
        After the round, the target keeps $n + a$ positions (confirmed tokens plus accepted drafts) and the emitted
        token becomes pending for both models.

        **The usual mistakes, and why they are wrong**: `rollback` that
        resets `length` but not `lengths`, or nothing; `extend` returning only the last row; accepting every draft
        without the $\min(1, p/q)$ test (the output follows the draft), resampling a rejection from $p$ instead of the
        residual, the residual of $q - p$, a target that is never rolled back, a round without the bonus token, and a
        greedy rule that emits the draft's token at a mismatch.

        **In production.** vLLM runs speculative decoding inside its batched engine: the drafts of every running
        request are verified in one target forward, the rejection sampler is a batched kernel (one uniform per draft
        per request), and rollback frees the KV slots of the rejected tokens. EAGLE and Medusa draft from the
        target's own hidden states (no second KV cache of a separate model), and tree attention verifies several
        candidate continuations at once. Greedy verification is exact; sampled verification is exact in distribution
        only when the target's probabilities are computed exactly as plain decoding would compute them (same
        temperature, same processors), which is why engines apply the sampling processors to both $p$ and $q$ before
        the test.
    """)
    lesson.mistakes()
    return lesson
