"""Source of 02_PyTorch_Algorithms/28_Sampling.ipynb (build with `python -m llm_algo build p02.sampling`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.sampling",
        path="02_PyTorch_Algorithms/28_Sampling.ipynb",
        title_en="Decoding strategies: logits processors, sampling and beam search",
        title_zh="解码策略：logits 处理器、采样与束搜索",
        difficulty="medium",
        device="cpu",
        minutes=100,
        prerequisites=["p02.tiny_llama", "p02.cross_entropy"],
    )
    lesson.title(
        intro=r"""
        **本节要点**

        - **问题**：模型每一步只给出一行 logits `(B, V)`；选哪个 token 由解码策略决定。贪心（greedy）稳定但容易重复，
          纯采样（sampling）会从长尾里抽到胡言乱语。生产系统把"改 logits"拆成可组合的 **logits 处理器**，按顺序作用。
        - **温度（temperature）**：$\ell / T$；$T<1$ 让分布更尖，$T \to 0$ 退化为贪心。
        - **截断**：top-k 只留最大的 $k$ 个；top-p（核采样）留累计概率刚达到 $p$ 的最小集合；min-p 留概率不小于
          $p_\min \cdot p_\max$ 的 token。被删的 logits 设为 $-\infty$。
        - **惩罚**：重复惩罚（repetition penalty）对出现过的 token 正 logits 除以 $\theta$、负 logits 乘以 $\theta$；
          频率/存在惩罚（frequency/presence）减去 $\alpha_f \cdot c_j + \alpha_p \cdot [c_j>0]$，$c_j$ 要按出现次数计数。
        - **束搜索（beam search）**：保留累计对数概率最高的 $k$ 条假设，结束的假设按 $\log p / L^{\alpha}$（长度惩罚）排名。
        {易错点}

        A language model does not produce text; it produces one row of logits per step, `(B, V)`, and a decoding
        strategy turns that row into a token. The choice matters as much as the weights: Holtzman et al. (2020,
        *The Curious Case of Neural Text Degeneration*) showed that maximising likelihood (greedy or beam search)
        makes GPT-2 loop on the same phrase, while pure sampling from the full distribution wanders into the tail:
        with a 50k vocabulary most of the mass of a flat-ish distribution sits on thousands of tokens that are each
        unlikely but together likely. Every serving stack therefore has a *pipeline* of small functions that edit the
        logits in a fixed order before the token is drawn: Hugging Face's `LogitsProcessorList`, vLLM's `Sampler`
        (penalties, then temperature, then top-k/top-p/min-p), llama.cpp's sampler chain.

        **You will implement** temperature, top-k, top-p and min-p as logits processors with Hugging Face's
        interface, the repetition and the frequency/presence penalties, a sampler that composes any list of
        processors, and beam search with a length penalty. **Graded against** transformers' `TemperatureLogitsWarper`,
        `TopKLogitsWarper`, `TopPLogitsWarper`, `MinPLogitsWarper` and `RepetitionPenaltyLogitsProcessor` on random
        logits in several dtypes, a float64 loop spec of the OpenAI frequency/presence formula, the exact processed
        distribution against 20,000 draws (a chi-square test at a stated false-alarm rate), and
        `LlamaForCausalLM.generate(num_beams=...)` on a tiny local model, token for token and score for score.
    """
    )
    lesson.md(r"""
        ## 1. The problem, with numbers

        A step of decoding gives logits $\ell \in \mathbb{R}^{V}$ per row. With Llama 3's $V = 128256$, even a model
        that puts 60% of its mass on a handful of sensible continuations leaves 40% spread over the rest: sampling
        from the raw softmax picks a "tail" token almost every other step, and one bad token derails everything after
        it. Greedy decoding avoids the tail but is deterministic, so a chat model answers the same prompt the same
        way, and it is known to fall into loops. The fixes are cheap — a sort over $V$ per row, microseconds next to
        a forward pass — but the details (ties, the token that crosses the threshold, the order of operations,
        duplicates in the history) decide whether two implementations agree. The defaults you meet in practice:
        Llama 3's `generation_config.json` on the Hub ships `temperature=0.6, top_p=0.9`; OpenAI's API takes
        `frequency_penalty` and `presence_penalty` in $[-2, 2]$; min-p (Nguyen et al., 2024, *Turning Up the Heat:
        Min-p Sampling*) is typically used with $p_\min \in [0.05, 0.1]$.

        ## 2. The math, with shapes

        Every processor is a function `(input_ids: (B, T) int64, scores: (B, V) float) -> (B, V)`: the history so far
        and the current scores in, new scores out. Removing a token means setting its score to $-\infty$, so the final
        softmax gives it probability exactly 0. Write $p = \operatorname{softmax}(\ell)$ per row.

        | processor | rule, per row | parameter |
        | --- | --- | --- |
        | temperature | $\ell \mapsto \ell / T$ | $T > 0$ |
        | top-k | keep $\ell_j \ge \ell_{(k)}$, the $k$-th largest (ties with it are kept) | integer $k \ge 1$ |
        | top-p | sort $p$ descending; keep token $j$ iff the mass of the tokens **before** it, $\sum_{i \text{ before } j} p_i$, is $< p$ | $p \in (0, 1]$ |
        | min-p | keep $p_j \ge p_\min \cdot \max_i p_i$ | $p_\min \in [0, 1]$ |
        | repetition | for $j$ in the history: $\ell_j \mapsto \ell_j / \theta$ if $\ell_j > 0$, else $\ell_j \cdot \theta$ | $\theta > 0$ |
        | frequency / presence | $\ell_j \mapsto \ell_j - \alpha_f\, c_j - \alpha_p\, [c_j > 0]$, $c_j$ = count of $j$ in the history | $\alpha_f, \alpha_p \in [-2, 2]$ |

        **Top-p is the smallest set whose mass reaches $p$.** Sorting descending, the set grows one token at a time
        until its mass is $\ge p$; the token that crosses the threshold is *in* the set. That is why the rule looks at
        the mass *before* each token: a token is kept iff the set was still short of $p$ when it was reached.
        Hugging Face's `TopPLogitsWarper` writes the same rule from the other end (ascending sort, remove while the
        cumulative mass is $\le 1 - p$). Both keep `min_tokens_to_keep` tokens whatever the threshold says (Hugging
        Face uses this for beam search, where every beam needs candidates).

        **Min-p scales with confidence.** When the model is sure ($p_{\max} = 0.9$, $p_\min = 0.1$) only tokens above
        0.09 survive; when it is unsure ($p_{\max} = 0.05$) anything above 0.005 does. In log space the test is
        $\ell_j \ge \max_i \ell_i + \log p_\min$: no softmax needed.

        **Repetition penalty** (Keskar et al., 2019, CTRL) divides positive logits and multiplies negative ones, so
        that a seen token always becomes *less* likely for $\theta > 1$; dividing a negative logit by $\theta$ would
        move it towards 0 and make it *more* likely. It applies once per distinct token, however often it occurred.
        **Frequency and presence penalties** (OpenAI's API reference; vLLM implements the same formula) are additive
        and the frequency term does count occurrences, so `scores[b, ids] -= alpha` — which writes each repeated index
        once — is wrong.

        **Order matters.** Top-k commutes with temperature (dividing by $T > 0$ keeps the order), but top-p and min-p
        do not: at $T = 2$ the distribution is flatter and the nucleus of mass $0.9$ holds more tokens. Hugging Face and
        vLLM apply penalties first, then temperature, then the truncations; your sampler applies the processors in
        the order of the list it is given, which is what makes them compose.

        ## 3. Beam search, exactly as `generate(num_beams=k)` does it

        Greedy decoding maximises each step's probability, not the sequence's. Beam search keeps the $k$ running
        hypotheses with the highest sum of log-probabilities $s = \sum_t \log p(y_t \mid y_{<t})$. At each step, for
        every running beam `(k, V)` candidates $s + \log p$; take the best $2k$ over all `k·V` (two per beam, so that
        even if $k$ of them end with EOS, $k$ others can continue), and walk down them by score:

        - a candidate ending in EOS (or any candidate at the last allowed step) is *finished*: if its rank among the
          $2k$ is below $k$, it enters the finished pool with score $s / L^{\alpha}$, where $L$ counts the generated
          tokens including EOS and $\alpha$ is the `length_penalty` ($\alpha = 1$: mean log-probability; $\alpha = 0$:
          raw sum, which favours short outputs; $\alpha > 1$: favours long ones);
        - other candidates continue, the first $k$ of them become the next running beams.

        The pool keeps its best $k$. With `early_stopping=True` a prompt is done when the pool holds $k$
        hypotheses; the answer is the pool's best. At the first step all $k$ beams would be the same prompt, so only
        one beam is expanded (Hugging Face gives the others a score of $-10^9$), otherwise the $k$ beams would be $k$
        copies of the same hypothesis.

        Cost: a step runs the model on $k$ sequences per prompt, so beam search multiplies decode compute and KV
        memory by $k$; it is used where outputs are short and likelihood is what you want (translation, ASR,
        constrained tasks), rarely for chat.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 4. Exercise `truncation`: temperature, top-k, top-p, min-p

        Four classes with Hugging Face's interface: the constructor validates its parameter (a `ValueError` that
        names it), `__call__(input_ids, scores)` returns a **new** tensor of the scores' shape and dtype in which the
        removed tokens hold `-inf` and the kept ones their score unchanged. Do the probability arithmetic in at least
        float32 whatever the scores' dtype. `transformers.generation` is the checks' reference and is off limits here.
    """)
    lesson.exercise(
        "truncation",
        r'''
        class Temperature:
            """scores / temperature; temperature > 0."""

            def __init__(self, temperature: float):
                # TODO: refuse a temperature that is not a finite number > 0 (ValueError)
                ### BEGIN SOLUTION
                if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
                    raise ValueError(f"temperature must be a finite number > 0, got {temperature!r} (use greedy for 0)")
                ### END SOLUTION
                self.temperature = float(temperature)

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                """input_ids (B, T) int64 (unused), scores (B, V) float -> (B, V), same dtype"""
                # TODO: divide
                ### BEGIN SOLUTION
                return scores / self.temperature
                ### END SOLUTION


        class TopK:
            """Keep the scores >= the k-th largest score of their row (ties with it kept); the rest -> -inf."""

            def __init__(self, top_k: int, min_tokens_to_keep: int = 1):
                # TODO: refuse top_k or min_tokens_to_keep that are not ints >= 1 (ValueError); keep max of the two
                ### BEGIN SOLUTION
                for name, value in (("top_k", top_k), ("min_tokens_to_keep", min_tokens_to_keep)):
                    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
                self.top_k = max(top_k, min_tokens_to_keep)
                ### END SOLUTION

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                """scores (B, V) -> (B, V), same dtype; k larger than V keeps everything"""
                # TODO: the k-th largest score per row (k clipped to V); mask what is strictly below it
                ### BEGIN SOLUTION
                k = min(self.top_k, scores.shape[-1])
                kth_largest = scores.topk(k, dim=-1).values[..., -1:]            # (B, 1)
                return scores.masked_fill(scores < kth_largest, float("-inf"))    # (B, V)
                ### END SOLUTION


        class TopP:
            """Nucleus: keep the smallest set of most likely tokens whose probability mass reaches top_p."""

            def __init__(self, top_p: float, min_tokens_to_keep: int = 1):
                # TODO: refuse top_p outside (0, 1] and min_tokens_to_keep < 1 (ValueError)
                ### BEGIN SOLUTION
                if not (isinstance(top_p, (int, float)) and 0.0 < top_p <= 1.0):
                    raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
                if not isinstance(min_tokens_to_keep, int) or min_tokens_to_keep < 1:
                    raise ValueError(f"min_tokens_to_keep must be an int >= 1, got {min_tokens_to_keep!r}")
                ### END SOLUTION
                self.top_p = float(top_p)
                self.min_tokens_to_keep = min_tokens_to_keep

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                """scores (B, V) -> (B, V), same dtype"""
                # TODO: probabilities in >= float32, sorted descending; the mass of the tokens before each one
                # TODO: remove a token when that mass already reaches top_p, except the first min_tokens_to_keep
                # TODO: bring the decision back to the original token order and mask
                ### BEGIN SOLUTION
                probs = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(dim=-1)  # (B, V)
                sorted_probs, order = probs.sort(dim=-1, descending=True)                             # (B, V)
                mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs                              # exclusive
                remove_sorted = mass_before >= self.top_p
                remove_sorted[..., : self.min_tokens_to_keep] = False
                remove = remove_sorted.scatter(-1, order, remove_sorted)   # sorted position i -> token order[i]
                return scores.masked_fill(remove, float("-inf"))
                ### END SOLUTION


        class MinP:
            """Keep tokens whose probability is >= min_p times the row's largest probability."""

            def __init__(self, min_p: float, min_tokens_to_keep: int = 1):
                # TODO: refuse min_p outside [0, 1] and min_tokens_to_keep < 1 (ValueError)
                ### BEGIN SOLUTION
                if not (isinstance(min_p, (int, float)) and 0.0 <= min_p <= 1.0):
                    raise ValueError(f"min_p must be in [0, 1], got {min_p!r}")
                if not isinstance(min_tokens_to_keep, int) or min_tokens_to_keep < 1:
                    raise ValueError(f"min_tokens_to_keep must be an int >= 1, got {min_tokens_to_keep!r}")
                ### END SOLUTION
                self.min_p = float(min_p)
                self.min_tokens_to_keep = min_tokens_to_keep

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                """scores (B, V) -> (B, V), same dtype"""
                # TODO: probabilities in >= float32; the threshold min_p * max per row; keep the top min_tokens_to_keep
                ### BEGIN SOLUTION
                probs = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(dim=-1)  # (B, V)
                threshold = self.min_p * probs.amax(dim=-1, keepdim=True)                            # (B, 1)
                remove = probs < threshold
                k = min(self.min_tokens_to_keep, scores.shape[-1])
                remove.scatter_(-1, probs.topk(k, dim=-1).indices, False)
                return scores.masked_fill(remove, float("-inf"))
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare the kept set and the kept values with transformers' warpers applied to the same scores in
        float64, on rows of several sizes (one of a single token) in float32, bfloat16 and float16; they pass rows
        with ties, a `top_k` larger than $V$, `top_p = 1`, `min_p = 0` and `1`, `min_tokens_to_keep > 1`, and they
        make sure your processor leaves its input untouched.
    """)
    lesson.md(r"""
        ## 5. Exercise `penalties`: repetition, frequency and presence

        Both processors read the history `input_ids: (B, T)` (any $T \ge 0$; ids in $[0, V)$, refuse others with a
        `ValueError`) and return new scores of the input's shape and dtype. The history here is whatever the caller
        passes: Hugging Face passes prompt and output, vLLM passes only the generated tokens for the frequency and
        presence penalties.
    """)
    lesson.exercise(
        "penalties",
        r'''
        def _check_history(input_ids: torch.Tensor, scores: torch.Tensor) -> None:
            """A ValueError unless input_ids is (B, T) integer with ids in [0, V) for scores (B, V)."""
            if scores.dim() != 2 or input_ids.dim() != 2 or input_ids.shape[0] != scores.shape[0]:
                raise ValueError(f"expected input_ids (B, T) and scores (B, V), got {tuple(input_ids.shape)} "
                                 f"and {tuple(scores.shape)}")
            if input_ids.is_floating_point() or (input_ids.numel() and not (0 <= input_ids.min() and
                                                                            input_ids.max() < scores.shape[1])):
                raise ValueError(f"token ids must be integers in [0, {scores.shape[1]})")


        class RepetitionPenalty:
            """CTRL's penalty on every token already in the history: positive scores / penalty, negative * penalty."""

            def __init__(self, penalty: float):
                # TODO: refuse a penalty that is not a finite number > 0 (ValueError)
                ### BEGIN SOLUTION
                if not (isinstance(penalty, (int, float)) and math.isfinite(penalty) and penalty > 0):
                    raise ValueError(f"penalty must be a finite number > 0, got {penalty!r}")
                ### END SOLUTION
                self.penalty = float(penalty)

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                """input_ids (B, T) int64, scores (B, V) -> (B, V), same dtype"""
                _check_history(input_ids, scores)
                # TODO: a (B, V) bool "seen" mask from the history; penalise the seen scores by their sign
                ### BEGIN SOLUTION
                seen = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
                seen.scatter_(-1, input_ids, True)                                             # (B, V)
                penalised = torch.where(scores > 0, scores / self.penalty, scores * self.penalty)
                return torch.where(seen, penalised, scores)
                ### END SOLUTION


        class FrequencyPresencePenalty:
            """OpenAI's penalties: scores - frequency_penalty * count - presence_penalty * (count > 0)."""

            def __init__(self, frequency_penalty: float = 0.0, presence_penalty: float = 0.0):
                # TODO: refuse values outside [-2, 2] (ValueError), as the OpenAI API and vLLM do
                ### BEGIN SOLUTION
                for name, value in (("frequency_penalty", frequency_penalty), ("presence_penalty", presence_penalty)):
                    if not (isinstance(value, (int, float)) and -2.0 <= value <= 2.0):
                        raise ValueError(f"{name} must be in [-2, 2], got {value!r}")
                ### END SOLUTION
                self.frequency_penalty = float(frequency_penalty)
                self.presence_penalty = float(presence_penalty)

            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                """input_ids (B, T) int64, scores (B, V) -> (B, V), same dtype"""
                _check_history(input_ids, scores)
                # TODO: count every occurrence of every token per row (B, V); subtract both terms
                ### BEGIN SOLUTION
                counts = torch.zeros(scores.shape, dtype=torch.float32, device=scores.device)
                counts.scatter_add_(-1, input_ids, torch.ones(input_ids.shape, device=scores.device))  # (B, V)
                penalty = self.frequency_penalty * counts + self.presence_penalty * (counts > 0).float()
                return (scores.float() - penalty).to(scores.dtype)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare `RepetitionPenalty` with transformers' `RepetitionPenaltyLogitsProcessor` and
        `FrequencyPresencePenalty` with a float64 loop over the history, on histories full of repeats, an empty
        history, positive, negative and zero scores, and bfloat16.
    """)
    lesson.md(r"""
        ## 6. Exercise `sampler`: compose, then draw

        `next_token_probs` runs the processors **in the order given** on float32 scores and returns the softmax;
        a row whose every token was removed cannot be sampled from and must raise a `ValueError` (a silent NaN
        here becomes a crash or a garbage token three layers later). `sample_next_token` draws one token per row
        from those probabilities with the `generator` it is given, or, with `do_sample=False`, takes the argmax
        (greedy decoding after the penalties). The checks draw 20,000 tokens from one row and compare their
        counts with the exact processed distribution by Pearson's chi-square test. With a fixed seed the verdict is
        reproducible; the threshold is the 99.9% quantile of the $\chi^2$ distribution with (support − 1) degrees of
        freedom, so a correct sampler would fail with probability $10^{-3}$ on a random seed.
    """)
    lesson.exercise(
        "sampler",
        r'''
        def next_token_probs(input_ids: torch.Tensor, logits: torch.Tensor, processors=()) -> torch.Tensor:
            """input_ids (B, T) int64, logits (B, V) float, processors: callables (input_ids, scores) -> scores.
            returns (B, V) float32 probabilities after every processor, in order."""
            # TODO: refuse logits that are not 2-D (ValueError)
            # TODO: float32 scores through every processor in order; refuse a row left with no finite score
            ### BEGIN SOLUTION
            if logits.dim() != 2:
                raise ValueError(f"expected logits (B, V), got shape {tuple(logits.shape)}")
            scores = logits.float()                                                  # (B, V)
            for processor in processors:
                scores = processor(input_ids, scores)
            empty = torch.isneginf(scores).all(dim=-1)                               # (B,)
            if empty.any():
                raise ValueError(f"the processors removed every token of row(s) {empty.nonzero().flatten().tolist()}")
            return scores.softmax(dim=-1)
            ### END SOLUTION


        def sample_next_token(input_ids, logits, processors=(), generator=None, do_sample=True) -> torch.Tensor:
            """One token per row: (B,) int64, drawn from next_token_probs with `generator`, or its argmax."""
            # TODO: the processed probabilities; argmax without sampling, otherwise one draw per row
            ### BEGIN SOLUTION
            probs = next_token_probs(input_ids, logits, processors)                  # (B, V)
            if not do_sample:
                return probs.argmax(dim=-1)
            return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (B,)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What the truncations do to one distribution

        A Zipf-like row of 40 logits (the shape of a real next-token distribution: a few likely tokens, a long tail),
        processed four ways with your classes. The bars are the probabilities your sampler would draw from.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        ranks = torch.arange(1, 41, dtype=torch.float32)
        row = (-1.1 * ranks.log() + 0.3 * torch.randn(40))[None]  # (1, 40)
        history = torch.zeros(1, 0, dtype=torch.long)
        try:
            settings = {
                "T = 1": [],
                "T = 0.6, top-p 0.9": [Temperature(0.6), TopP(0.9)],
                "T = 1.5, top-p 0.9": [Temperature(1.5), TopP(0.9)],
                "top-k 8": [TopK(8)],
                "min-p 0.1": [MinP(0.1)],
            }
            fig, axes = plt.subplots(1, len(settings), figsize=(13, 2.8), sharey=True)
            for axis, (name, chain) in zip(axes, settings.items()):
                probs = next_token_probs(history, row, chain)[0]
                axis.bar(range(40), probs.numpy(), color="tab:blue")
                axis.set_title(f"{name}\n{int((probs > 0).sum())} tokens kept", fontsize=9)
                axis.set_xlabel("token (by rank)")
            axes[0].set_ylabel("probability")
            plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print("finish the truncation processors and next_token_probs to see the figure")
    """)
    lesson.md(r"""
        ## 7. Exercise `beam_search`

        Implement section 3 for a batch of prompts of equal length. `next_token_logits` is any callable that maps
        `(N, T)` token ids to the `(N, V)` logits of the next token (the checks pass a Hugging Face model; the demo
        passes your tiny Llama); recompute the whole sequence each step, as a KV cache is the next lesson's subject.
        Use float32 log-probabilities (`log_softmax` of the logits). Return the best finished hypothesis of every
        prompt, prompts included, right-padded with `eos_token_id` to the longest one, and its score
        $s / L^{\alpha}$. Refuse `num_beams < 1` or `max_new_tokens < 1` with a `ValueError`.
    """)
    lesson.exercise(
        "beam_search",
        r'''
        @torch.no_grad()
        def beam_search(next_token_logits, input_ids: torch.Tensor, num_beams: int, max_new_tokens: int,
                        eos_token_id: int | None = None, length_penalty: float = 1.0):
            """Beam search with early stopping and a length penalty, as transformers' generate(num_beams=...,
            early_stopping=True).

            next_token_logits: callable, (N, T) int64 -> (N, V) logits of the next token
            input_ids:         (B, T) int64 prompts (no padding)
            returns            sequences (B, T + L) int64, right-padded with eos_token_id;
                               scores (B,) float32: sum of generated log-probs / (generated length ** length_penalty)
            """
            # TODO: validate num_beams and max_new_tokens
            # TODO: per prompt: running beams (tokens, summed log-prob), starting from the prompt alone;
            #       each step: candidates = beam score + log_softmax(logits) over (beams, V); the best 2 * num_beams
            #       walk down them: EOS or last step -> finished (only ranks < num_beams, score / L ** length_penalty);
            #       otherwise the first num_beams continue. Keep the best num_beams finished; stop once there are
            #       num_beams of them.
            # TODO: the best finished hypothesis per prompt; pad to the longest; return sequences and scores
            ### BEGIN SOLUTION
            if num_beams < 1 or max_new_tokens < 1:
                raise ValueError(f"num_beams and max_new_tokens must be >= 1, got {num_beams} and {max_new_tokens}")
            best = []                                               # (score, tokens) per prompt
            for prompt in input_ids:                                # (T,)
                running = [(prompt, 0.0)]                           # one beam at first: k copies would be duplicates
                finished = []                                       # (length-penalised score, tokens)
                for step in range(max_new_tokens):
                    sequences = torch.stack([tokens for tokens, _ in running])                    # (n, T + step)
                    logprobs = torch.log_softmax(next_token_logits(sequences).float(), dim=-1)    # (n, V)
                    beam_scores = torch.tensor([score for _, score in running])                   # (n,)
                    candidates = (logprobs + beam_scores[:, None]).flatten()                      # (n * V,)
                    vocab = logprobs.shape[-1]
                    top_scores, top_index = candidates.topk(min(2 * num_beams, candidates.numel()))
                    last_step = step + 1 == max_new_tokens
                    next_running = []
                    for rank, (score, index) in enumerate(zip(top_scores.tolist(), top_index.tolist())):
                        parent, token = divmod(index, vocab)
                        tokens = torch.cat((running[parent][0], torch.tensor([token])))
                        if token == eos_token_id or last_step:
                            if rank < num_beams:
                                finished.append((score / (step + 1) ** length_penalty, tokens))
                        elif len(next_running) < num_beams:
                            next_running.append((tokens, score))
                    finished = sorted(finished, key=lambda item: item[0], reverse=True)[:num_beams]
                    if len(finished) == num_beams or last_step:
                        break
                    running = next_running
                best.append(finished[0])
            length = max(len(tokens) for _, tokens in best)
            pad = eos_token_id if eos_token_id is not None else 0
            sequences = torch.full((len(best), length), pad, dtype=torch.long)
            for row, (_, tokens) in enumerate(best):
                sequences[row, : len(tokens)] = tokens
            return sequences, torch.tensor([score for score, _ in best], dtype=torch.float32)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Greedy, beam and sampling on your tiny Llama

        The cell below takes your `TinyLlama` from `p02.tiny_llama` (the reference where yours does not pass yet),
        with random weights sharpened so that its distributions look like a trained model's, and decodes 12 tokens
        from 6 prompts: greedy, beam search with 2, 4 and 8 beams ($\alpha = 1$), and top-p sampling. It plots the
        mean log-probability per generated token. Beam search usually finds more likely sequences than greedy, and
        wider beams usually help, but neither is guaranteed: the pruning to $2k$ candidates is a heuristic, and a
        narrow beam can commit to a prefix that greedy avoided. Sampling pays in likelihood for diversity.
    """)
    lesson.code(r"""
        from types import SimpleNamespace

        TinyLlama = lesson.use("p02.tiny_llama", "TinyLlama")
        args = SimpleNamespace(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, hidden_dim=160,
                               vocab_size=128, norm_eps=1e-6, rope_theta=10000.0, tie_embeddings=False)
        torch.manual_seed(1)
        model = TinyLlama(args).eval()
        with torch.no_grad():
            model.lm_head.weight.mul_(4.0)  # random heads give nearly flat distributions; a trained model's are sharp


        @torch.no_grad()
        def last_logits(tokens):  # (N, T) -> (N, V)
            return model(tokens)[:, -1]


        @torch.no_grad()
        def mean_logprob(sequence, prompt_len):  # the model's own mean log-probability of the generated part
            logprobs = torch.log_softmax(model(sequence[None])[0, :-1].float(), dim=-1)
            picked = logprobs.gather(-1, sequence[1:, None])[prompt_len - 1 :, 0]
            return float(picked.mean())


        prompts = torch.randint(0, 128, (6, 5))
        steps = 12
        try:
            results = {}
            greedy = prompts.clone()
            for _ in range(steps):
                greedy = torch.cat((greedy, sample_next_token(greedy, last_logits(greedy), do_sample=False)[:, None]), 1)
            results["greedy"] = [mean_logprob(seq, 5) for seq in greedy]
            for beams in (2, 4, 8):
                sequences, _ = beam_search(last_logits, prompts, beams, steps)
                results[f"beam {beams}"] = [mean_logprob(seq, 5) for seq in sequences]
            generator = torch.Generator().manual_seed(0)
            sampled = prompts.clone()
            for _ in range(steps):
                token = sample_next_token(sampled, last_logits(sampled), [TopP(0.9)], generator=generator)
                sampled = torch.cat((sampled, token[:, None]), 1)
            results["top-p 0.9"] = [mean_logprob(seq, 5) for seq in sampled]
            plt.figure(figsize=(6.5, 3.2))
            for offset, (name, values) in enumerate(results.items()):
                plt.scatter([i + 0.12 * (offset - 2) for i in range(6)], values, label=name, s=22)
            plt.xlabel("prompt"); plt.ylabel("mean log-prob per generated token")
            plt.title("the model's own likelihood of 12 decoded tokens"); plt.legend(fontsize=7, ncol=3)
            plt.tight_layout(); plt.show()
            for name, values in results.items():
                print(f"{name:>10}: mean over prompts {sum(values) / len(values):.3f}")
        except NotImplementedError:
            print("finish sample_next_token, TopP and beam_search to run the comparison")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **Truncations.** `topk(k).values[..., -1:]` is the $k$-th largest score per row, kept as `(B, 1)` so that it
        broadcasts; comparing with `<` keeps every score tied with it, which is Hugging Face's choice (a row of equal
        scores keeps them all). Top-p sorts once, takes the *exclusive* cumulative sum (`cumsum - p`: the mass before
        each token) and scatters the decision back through the sort's permutation — `remove_sorted.scatter(-1, order,
        remove_sorted)` writes position $i$'s decision to token `order[i]`. Min-p compares each probability with a
        per-row threshold. All three compute probabilities in at least float32: in bfloat16 a cumulative sum over a
        128k vocabulary loses whole percent of mass (bfloat16 keeps 8 bits of mantissa), which moves the nucleus.
        Each returns `masked_fill(...)`, a new tensor: processors run in a chain, and one that writes into its input
        corrupts the caller's logits (which Hugging Face keeps for `output_scores`).

        **Penalties.** The repetition penalty builds a `(B, V)` mask with `scatter_` (duplicates write `True` twice,
        which is harmless) and chooses by sign with `torch.where`. The frequency penalty needs counts: `scatter_add_`
        adds 1 per occurrence, where fancy-index assignment `scores[b, ids] -= alpha` applies a repeated index once.
        The arithmetic runs in float32 and is cast back, so a bfloat16 score minus a small penalty is rounded once.

        **Sampler.** Processors run on float32 scores in list order, so `[Temperature(2), TopP(0.9)]` and `[TopP(0.9),
        Temperature(2)]` differ, as they should. The "no token left" guard stops a chain such as `MinP` after a
        processor that set everything to `-inf`: `softmax` of an all-`-inf` row is NaN, and `torch.multinomial` then
        raises an unhelpful error (or, on some GPUs, returns garbage). `torch.multinomial(probs, 1, generator=...)`
        draws by inverse CDF; with a seeded generator it is reproducible, which is how the chi-square check can fix its
        verdict.

        **Beam search.** Three details make it agree with `generate` token for token: one initial beam (Hugging Face
        gives beams 1..k−1 a score of $-10^9$), $2k$ candidates with finished ones accepted only from the top $k$
        ranks, and the length penalty applied only when a hypothesis finishes (running beams compare raw sums, which
        is fair because they all have the same length).

        **The usual mistakes, and why they are wrong**:
        - *top-k with `<=`*, which removes the $k$-th token itself; *top-p with the inclusive cumulative sum*, which
          drops the token that crosses the threshold (a row whose top token has probability 0.95 and `top_p = 0.9`
          keeps nothing but the guaranteed one, and at 0.5/0.5 the second is lost);
        - *top-p over the sorted positions without scattering back*: removes the wrong tokens;
        - *min-p against $p_\min$ alone* instead of $p_\min \cdot p_\max$ (that is $\epsilon$-sampling, a different
          rule);
        - *a repetition penalty that divides every seen score*: a negative logit moves towards 0 and the repeated
          token becomes *more* likely; *counting with assignment* instead of `scatter_add_`;
        - *a sampler that ignores the processors* when drawing (the probabilities are right, the draws are not: only
          the chi-square test sees it) or *applies them in reverse order*;
        - *beam search expanding all $k$ identical initial beams* (the beams become copies), *the length penalty on the
          running beams*, or *normalising by the full length, prompt included*.

        **Cost.** Each processor is $O(BV)$, top-p $O(BV \log V)$ for the sort; at $V = 128\text{k}$ and $B = 256$ the
        sort is the sampler's main cost, which is why vLLM and FlashInfer ship sorting-free top-p/top-k kernels
        (FlashInfer's rejection-based `top_p_sampling_from_probs` draws a candidate and raises a pivot instead of
        sorting). Beam search costs $k$ times the decode compute and KV cache of greedy, plus cache reordering every
        step (`Cache.reorder_cache` in transformers; vLLM forks paged blocks copy-on-write).

        **What production code does differently.**
        - *vLLM's sampler* applies repetition, frequency and presence penalties with counts kept on the GPU per
          request (prompt tokens for repetition, output tokens for frequency/presence), then temperature, then top-k,
          top-p and min-p in one batched kernel with a per-request parameter tensor, so requests with different
          settings share a batch.
        - *Hugging Face* builds the list from `GenerationConfig` in a fixed order (penalties, then temperature, top-k,
          top-p, min-p), and applies processors to **log-probabilities** in beam search, not to raw logits.
        - *llama.cpp* chains samplers the same way and lets users reorder the chain, which is why the order question
          of section 2 is a documented setting there.
        - *Speculative decoding* (lesson `p02.speculative_decoding`) needs the exact processed distribution, not just a
          sample from it, on both the draft and the target: `next_token_probs` is the function it reuses.
    """)
    lesson.mistakes()
    return lesson
