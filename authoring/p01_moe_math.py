"""Source of 01_Hardware_Math_Systems/12_MoE_Math.ipynb (build with `python -m llm_algo build p01.moe_math`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.moe_math",
        path="01_Hardware_Math_Systems/12_MoE_Math.ipynb",
        title_en="MoE parameters, capacity and tokens per expert",
        title_zh="MoE 的参数、容量与每个专家的 token 数",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.params_and_flops"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 混合专家 (MoE) 模型的总参数 (total) 全部要放进显存，但每个 token 只经过 top-$k$ 个路由专家 (routed
          experts)，计算量按激活参数 (active) 算：Mixtral-8x7B 46.7B/12.9B，DeepSeek-V3 671B/37B。
        - 专家容量 (expert capacity)：$C = \lceil c \cdot T k / E \rceil$，$c$ 是容量因子 (capacity factor)；
          超过 $C$ 的分配被丢弃 (token dropping)，丢弃数 $= \sum_e \max(0, n_e - C)$。
        - 均匀随机路由下每个专家的负载 $n_e \sim \text{Binomial}(T, k/E)$（top-$k$ 不放回），期望丢弃比例可以精确算出；
          常见错误是把它当作 $Tk$ 次、概率 $1/E$ 的放回抽样。
        - 解码 (decode) 时一个批次读到的专家数期望为 $E\,(1 - (1 - k/E)^B)$：批次一大，MoE 就要读几乎全部专家，
          "只读激活参数" 的带宽优势消失。
        - 所有数字都与 meta 设备上建出的真实模型、一个小 Mixtral 的真实路由和蒙特卡洛路由模拟比对。
        {易错点}

        A mixture-of-experts (MoE, 混合专家) model is two different sizes at once. DeepSeek-V3 stores 671B parameters,
        1.34 TB in BF16, yet a token's forward pass multiplies by only 37B of them (DeepSeek-AI, *DeepSeek-V3
        Technical Report*, arXiv:2412.19437): memory is paid on the total, compute on the active part. Between the
        two sit the numbers that decide whether an MoE runs well: how many tokens each expert receives, how many it
        can take (its *capacity*), how many are dropped when the router is unbalanced, and how many experts a batch
        of decoding tokens actually reads from memory.

        **You will implement** top-$k$ routing with a capacity limit (tokens per expert, capacity, dropped
        assignments), the exact expected fraction of dropped assignments under uniform random routing, and the
        expected weight bytes a decoding step reads as a function of batch size. **Graded against** the indices
        that the experts of a small `transformers` Mixtral actually receive, a loop over tokens, an exact rational
        enumeration and a Monte Carlo routing simulation with a stated error, and the parameters of Mixtral and
        DeepSeek-V3 models built on the `meta` device.
    """
    )
    lesson.md(r"""
        ## 1. Total and active parameters, on real modules

        An MoE layer replaces the MLP with a router $W_r \in \mathbb{R}^{E \times d}$ and $E$ expert MLPs. For a
        token $x \in \mathbb{R}^{d}$ the router scores $s = W_r x \in \mathbb{R}^{E}$, keeps the $k$ largest and
        sends the token to those experts only. With $L_{\text{moe}}$ MoE layers and $P_e$ parameters per expert
        (SwiGLU: $3 d I$), the model's parameters split as

        $$
        N_{\text{total}} = N_{\text{other}} + L_{\text{moe}} E P_e, \qquad
        N_{\text{active}} = N_{\text{other}} + L_{\text{moe}} k P_e ,
        $$

        where $N_{\text{other}}$ is everything every token uses (embeddings, attention, norms, routers, shared
        experts). `p01.params_and_flops` derived both from the config; here we read them off models that
        `transformers` builds on the `meta` device (shapes only, no memory), taking the parameters whose name contains
        `.experts.` (the routed experts, stored as stacked tensors `gate_up_proj` $(E, 2I, d)$ and `down_proj`
        $(E, d, I)$) as the routed part:

        | model | source of the published numbers | $E$ | $k$ | total | active |
        | --- | --- | --- | --- | --- | --- |
        | Mixtral-8x7B | *Mixtral of experts*, mistral.ai, Dec 2023: "46.7B total, 12.9B per token" | 8 | 2 | 46.7B | 12.9B |
        | DeepSeek-V3 | arXiv:2412.19437, abstract: "671B total parameters with 37B activated for each token" | 256 (+1 shared) | 8 | 671B | 37B |

        The next cell measures them.
    """)
    lesson.setup(r"""
        import math
        import warnings

        import matplotlib.pyplot as plt
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' tqdm import warns inside a kernel without ipywidgets
            from transformers import AutoModelForCausalLM, DeepseekV3Config, MixtralConfig

        # Published configurations (config.json on the Hugging Face Hub); DeepseekV3Config's defaults are V3's.
        PUBLISHED = {
            "Mixtral-8x7B": MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                          num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                          num_local_experts=8, num_experts_per_tok=2),
            "DeepSeek-V3": DeepseekV3Config(),
        }


        def meta_counts(config):
            '''(total, routed-expert) parameters of the model transformers builds from config, on the meta device.'''
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_config(config)
            total = sum(p.numel() for p in model.parameters())
            routed = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
            return total, routed


        def experts_and_top_k(config):
            experts = getattr(config, "num_local_experts", None) or config.n_routed_experts
            return experts, config.num_experts_per_tok
    """)
    lesson.code(r"""
        MEASURED = {}
        for name, config in PUBLISHED.items():
            total, routed = meta_counts(config)
            experts, top_k = experts_and_top_k(config)
            active = total - routed + routed // experts * top_k
            MEASURED[name] = (total, active)
            print(f"{name:13} total {total / 1e9:7.2f}B   routed experts {routed / 1e9:7.2f}B   "
                  f"active {active / 1e9:6.2f}B   ({active / total:.1%} of the weights per token)")
    """)
    lesson.md(r"""
        Mixtral multiplies each token by 28% of its weights, DeepSeek-V3 by under 6%. That ratio is the whole appeal:
        the FLOPs of a 37B model ($2 N_{\text{active}}$ per token forward, `p01.params_and_flops`) with the capacity
        of a 671B one. The price is paid in memory, in communication (experts on different GPUs exchange tokens with
        an all-to-all), and in balance: the router decides where the work goes.

        ## 2. Tokens per expert and capacity

        A batch of $T$ tokens makes $T k$ assignments. Perfectly balanced, each expert would receive $Tk/E$. Static
        implementations (GShard, Lepikhin et al., arXiv:2006.16668; Switch Transformer, Fedus et al.,
        arXiv:2101.03961) give every expert a fixed buffer of

        $$
        C = \left\lceil c \cdot \frac{T k}{E} \right\rceil \quad \text{(expert capacity, } c \text{ the capacity
        factor, a little above 1)}
        $$

        slots, so that the expert computation has static shapes $(E, C, d)$. Assignments beyond an expert's $C$ are
        *dropped*: the token skips that expert (it still has its residual connection). With $n_e$ the number of
        assignments routed to expert $e$,

        $$
        n_e = \#\{(t, j) : \text{expert}_j(t) = e\}, \quad \sum_e n_e = T k, \qquad
        \text{dropped} = \sum_{e=1}^{E} \max(0,\, n_e - C).
        $$

        Shapes: router logits $(T, E)$; top-$k$ indices $(T, k)$; $n$ is $(E,)$ int64. Which of an expert's
        assignments are dropped (first come, or lowest score) changes *who* loses, not *how many*.

        ## 3. Exercise `route_with_capacity`

        Given router logits `(T, E)` (any float dtype), return `(tokens_per_expert, capacity, dropped)`:
        `tokens_per_expert` an int64 tensor `(E,)` (experts nobody picked hold 0), `capacity` and `dropped` Python
        ints. Refuse logits that are not 2-D, `top_k` outside $1..E$ and `capacity_factor <= 0` with a `ValueError`.
        The checks use capacity factors that are exact in binary floating point (0.5, 1.0, 1.25, 1.5, 2.0), so
        computing $c \cdot Tk / E$ in floats is fine.
    """)
    lesson.exercise(
        "route_with_capacity",
        r'''
        def route_with_capacity(router_logits: torch.Tensor, top_k: int,
                                capacity_factor: float) -> tuple[torch.Tensor, int, int]:
            """Top-k routing of router_logits (T, E) with capacity ceil(capacity_factor * T * top_k / E).

            Returns (tokens_per_expert (E,) int64, capacity, dropped assignments)."""
            # TODO: refuse non-2-D logits, top_k outside 1..E, capacity_factor <= 0 (ValueError)
            # TODO: the top_k experts of every token, then how many assignments each expert received
            # TODO: the capacity, and the assignments beyond it
            ### BEGIN SOLUTION
            if router_logits.dim() != 2:
                raise ValueError(f"router_logits must be (T, E), got shape {tuple(router_logits.shape)}")
            num_tokens, num_experts = router_logits.shape
            if not 1 <= top_k <= num_experts:
                raise ValueError(f"top_k={top_k} must be between 1 and the {num_experts} experts")
            if capacity_factor <= 0:
                raise ValueError(f"capacity_factor must be positive, got {capacity_factor}")
            chosen = router_logits.topk(top_k, dim=-1).indices  # (T, k)
            tokens_per_expert = torch.bincount(chosen.reshape(-1), minlength=num_experts)  # (E,) int64
            capacity = math.ceil(capacity_factor * num_tokens * top_k / num_experts)
            dropped = int((tokens_per_expert - capacity).clamp(min=0).sum())
            return tokens_per_expert, capacity, dropped
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A real router, untrained

        A small Mixtral with random weights, 512 tokens, 8 experts, top-2: how unbalanced is its router, and what
        would a capacity factor of 1.0 or 1.25 drop?
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            small = AutoModelForCausalLM.from_config(MixtralConfig(
                vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2))
        logits_seen = []
        hook = small.model.layers[1].mlp.gate.register_forward_hook(lambda m, i, out: logits_seen.append(out[0]))
        with torch.no_grad():
            small(torch.randint(0, 128, (4, 128)))
        hook.remove()
        router_logits = logits_seen[0]  # (512, 8)
        try:
            counts, capacity, dropped = route_with_capacity(router_logits, 2, 1.0)
            who = "yours"
        except NotImplementedError:
            counts = torch.bincount(router_logits.topk(2).indices.reshape(-1), minlength=8)
            capacity = math.ceil(1.0 * 512 * 2 / 8)
            dropped = int((counts - capacity).clamp(min=0).sum())
            who = "reference formula"
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.bar(range(8), counts.tolist(), color="C0")
        ax.axhline(capacity, color="C3", label=f"capacity, c = 1.0 ({capacity})")
        ax.axhline(math.ceil(1.25 * 512 * 2 / 8), color="C1", ls="--", label="capacity, c = 1.25")
        ax.set_xlabel("expert"); ax.set_ylabel("assignments"); ax.legend(fontsize=8)
        ax.set_title(f"512 tokens, top-2 of 8 ({who}): {dropped} of 1024 dropped at c = 1.0")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. How much is dropped when routing is random

        Even a perfectly *balanced* router in expectation drops tokens, because loads fluctuate. Model each token as
        picking $k$ distinct experts uniformly at random, independently of the others. Expert $e$ is among a token's
        $k$ picks with probability $k/E$, so its load is a sum of $T$ independent Bernoulli($k/E$) draws:

        $$
        n_e \sim \text{Binomial}\!\left(T, \tfrac{k}{E}\right), \qquad
        \mathbb{E}[\text{dropped fraction}] = \frac{E \cdot \mathbb{E}[\max(0, n_e - C)]}{T k}
        = \frac{E}{T k} \sum_{n = C+1}^{T} (n - C) \binom{T}{n} p^{n} (1 - p)^{T - n}, \quad p = \frac{k}{E}.
        $$

        (Not Binomial$(Tk, 1/E)$: a token never picks the same expert twice, so for $k = E$ every load is exactly $T$.)
        For large $T$ the binomial coefficients overflow a float (`math.comb(4096, 2048)` has 1232 digits): work
        with logarithms, $\log \binom{T}{n} = \ln\Gamma(T+1) - \ln\Gamma(n+1) - \ln\Gamma(T-n+1)$ (`math.lgamma`), and
        treat $p = 1$ on its own.

        ## 5. Exercise `expected_drop_fraction`

        Return the expected fraction of the $T k$ assignments that are dropped, as a Python float, for
        `capacity = ceil(capacity_factor * T * k / E)`. Refuse `num_tokens < 1`, `top_k` outside $1..E$ and
        `capacity_factor <= 0` (`ValueError`).
    """)
    lesson.exercise(
        "expected_drop_fraction",
        r'''
        def expected_drop_fraction(num_tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> float:
            """Expected fraction of the num_tokens * top_k assignments dropped when every token picks top_k distinct
            experts uniformly at random and each expert keeps at most ceil(capacity_factor * T * k / E)."""
            # TODO: refuse num_tokens < 1, top_k outside 1..num_experts, capacity_factor <= 0 (ValueError)
            # TODO: the capacity; the load of one expert is Binomial(num_tokens, top_k / num_experts)
            # TODO: E * E[max(0, load - capacity)] / (T * k), with log-binomials (and p = 1 on its own)
            ### BEGIN SOLUTION
            if num_tokens < 1 or not 1 <= top_k <= num_experts or capacity_factor <= 0:
                raise ValueError("need num_tokens >= 1, 1 <= top_k <= num_experts and capacity_factor > 0")
            capacity = math.ceil(capacity_factor * num_tokens * top_k / num_experts)
            p = top_k / num_experts  # chance that a given token picks a given expert
            if p == 1.0:  # every token picks every expert: the load is exactly num_tokens
                overflow = max(0, num_tokens - capacity)
            else:
                overflow = 0.0  # E[max(0, load - capacity)]
                for n in range(capacity + 1, num_tokens + 1):
                    log_pmf = (math.lgamma(num_tokens + 1) - math.lgamma(n + 1) - math.lgamma(num_tokens - n + 1)
                               + n * math.log(p) + (num_tokens - n) * math.log1p(-p))
                    overflow += (n - capacity) * math.exp(log_pmf)
            return num_experts * overflow / (num_tokens * top_k)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Dropped fraction against capacity factor

        4096 tokens per batch (a common per-device micro-batch), Mixtral's top-2 of 8 and DeepSeek-V3's top-8 of 256.
        Fewer assignments per expert ($Tk/E$ = 1024 against 128) mean larger relative fluctuations, hence more drops at
        the same $c$.
    """)
    lesson.code(r"""
        factors = [0.8 + 0.05 * i for i in range(15)]
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        for experts, top_k in ((8, 2), (64, 8), (256, 8)):
            try:
                fractions = [expected_drop_fraction(4096, experts, top_k, c) for c in factors]
                who = "yours"
            except NotImplementedError:  # a Monte Carlo estimate instead, 20 batches
                who = "Monte Carlo"
                fractions = []
                for c in factors:
                    capacity = math.ceil(c * 4096 * top_k / experts)
                    picks = torch.rand(20, 4096, experts).topk(top_k, dim=-1).indices.reshape(20, -1)
                    loads = torch.stack([torch.bincount(row, minlength=experts) for row in picks])
                    fractions.append(float((loads - capacity).clamp(min=0).sum(dim=1).float().mean()) / (4096 * top_k))
            ax.plot(factors, [100 * f for f in fractions], marker=".", label=f"top-{top_k} of {experts} ({who})")
        ax.set_yscale("log"); ax.set_ylim(1e-6, 100); ax.set_xlabel("capacity factor c"); ax.set_ylabel("assignments dropped (%)")
        ax.set_title("Uniform random routing, T = 4096 tokens"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 6. Decoding: how many experts does a batch read?

        Decoding is memory-bound (`p01.kv_cache_math`): each step reads the weights it uses. With one sequence, a
        step reads the active parameters only. With a batch of $B$ tokens, each MoE layer reads every expert that
        *some* token picked. Under uniform routing an expert is missed by one token with probability $1 - k/E$, by all
        $B$ with probability $(1 - k/E)^B$, so the expected number of experts read per layer is

        $$
        \mathbb{E}[\text{experts read}] = E \left(1 - \left(1 - \tfrac{k}{E}\right)^{B}\right),
        $$

        and, since all MoE layers have the same $E$, $k$ and $P_e$, the routed parameters
        $R = L_{\text{moe}} E P_e = (N_{\text{total}} - N_{\text{active}}) \cdot \frac{E}{E - k}$ give

        $$
        \text{bytes}_{\text{step}} = s \left( N_{\text{total}} - R + R \cdot \frac{\mathbb{E}[\text{experts read}]}{E}
        \right) \qquad (s \text{ bytes per parameter}).
        $$

        For Mixtral (top-2 of 8) a batch of 16 already reads 7.9 of the 8 experts of each layer; DeepSeek-V3 (top-8 of
        256) reads 102 of 256 at $B = 16$ and 222 at $B = 64$. This is why MoE serving batches large and spreads
        experts over many GPUs (expert parallelism, 专家并行): the weight traffic is paid once per step for the whole
        batch.

        ## 7. Exercise `decode_weight_bytes`

        From the total and active parameter counts, $E$, $k$, the batch size $B$ and the bytes per parameter, return
        the expected weight bytes one decoding step reads (a float). When $k = E$ nothing is routed away (the model
        reads everything). Refuse `num_tokens < 1`, `top_k` outside $1..E$, `active_params > total_params`,
        non-positive counts or bytes per parameter (`ValueError`).
    """)
    lesson.exercise(
        "decode_weight_bytes",
        r'''
        def decode_weight_bytes(total_params: int, active_params: int, num_experts: int, top_k: int, num_tokens: int,
                                bytes_per_param: float) -> float:
            """Expected weight bytes one decoding step of num_tokens tokens reads, under uniform top_k routing."""
            # TODO: validate the arguments (ValueError)
            # TODO: the routed parameters R of all MoE layers from total - active, E and k
            # TODO: the expected fraction of experts some token picks; everything else is read once
            ### BEGIN SOLUTION
            if num_tokens < 1 or not 1 <= top_k <= num_experts or bytes_per_param <= 0:
                raise ValueError("need num_tokens >= 1, 1 <= top_k <= num_experts and bytes_per_param > 0")
            if not 0 < active_params <= total_params:
                raise ValueError(f"need 0 < active_params <= total_params, got {active_params} and {total_params}")
            if top_k == num_experts:  # every expert is active: the whole model is read
                return float(total_params * bytes_per_param)
            routed = (total_params - active_params) * num_experts / (num_experts - top_k)  # L_moe * E * P_e
            read_fraction = 1 - (1 - top_k / num_experts) ** num_tokens  # of each layer's experts
            return (total_params - routed + routed * read_fraction) * bytes_per_param
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Bytes per step against batch size

        BF16 weights; the dashed lines are the active and the total size. Dividing by a GPU's bandwidth (H200:
        4.8 TB/s, NVIDIA datasheet) gives the weight-read time per step, before any KV cache.
    """)
    lesson.code(r"""
        batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
        for ax, (name, (total, active)) in zip(axes, MEASURED.items()):
            experts, top_k = experts_and_top_k(PUBLISHED[name])
            try:
                step = [decode_weight_bytes(total, active, experts, top_k, b, 2) for b in batches]
                who = "yours"
            except NotImplementedError:
                routed = (total - active) * experts / (experts - top_k)
                step = [2 * (total - routed + routed * (1 - (1 - top_k / experts) ** b)) for b in batches]
                who = "formula"
            ax.plot(batches, [s / 1e9 for s in step], marker="o", label=f"expected bytes per step ({who})")
            ax.axhline(2 * active / 1e9, ls="--", color="C2", label="active (batch 1)")
            ax.axhline(2 * total / 1e9, ls="--", color="C3", label="total")
            ax.set_xscale("log", base=2); ax.set_xlabel("decode batch (tokens)"); ax.set_ylabel("GB read per step")
            ax.set_title(f"{name}, BF16, top-{top_k} of {experts}"); ax.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`route_with_capacity`.** `topk` picks the experts (a softmax first would not change which: it is monotonic),
        `bincount(..., minlength=E)` counts them and keeps experts nobody picked. The usual mistakes:
        *counting only the first choice* (loads then sum to $T$, not $Tk$), *`bincount` without `minlength`* (a
        shorter tensor whenever the last experts are idle), *the Switch formula without $k$* ($C = \lceil cT/E
        \rceil$, right only for top-1: a top-2 model would drop about half its assignments), *floor instead of
        ceiling* (one slot short whenever $cTk/E$ is fractional), and *counting overloaded experts instead of dropped
        assignments*.

        **`expected_drop_fraction`.** The load of one expert is Binomial$(T, k/E)$; the sum runs over loads above the
        capacity, weighted by the excess. The mistakes: *Binomial$(Tk, 1/E)$* (picks with replacement: it overstates
        the variance, badly when $k$ is a sizeable part of $E$), *the probability of overflowing* $P(n_e > C)$
        instead of the expected excess, *dividing by $T$ instead of $Tk$*, and *`math.comb` in floats*, which
        overflows at a few thousand tokens. Cost: $O(T)$ terms, each $O(1)$.

        **`decode_weight_bytes`.** The routed parameters are not $N_{\text{total}} - N_{\text{active}}$: that
        difference is the $E - k$ experts a single token skips, so $R$ is that times $E/(E-k)$. The mistakes:
        *$R = N_{\text{total}} - N_{\text{active}}$*, *experts read $= \min(E, kB)$* (as if no two tokens ever shared an
        expert: right at $B = 1$, too many bytes at every batch in between), and *picks with replacement*,
        $(1 - 1/E)^{kB}$.

        **Production.** Modern MoE stacks do not drop: MegaBlocks (Gale et al., arXiv:2211.15841) computes experts as
        block-sparse matrix products of whatever size the router produces, `transformers` loops over the experts that
        were hit, vLLM and SGLang run fused MoE kernels over token groups sorted by expert, and DeepSeek-V3 reports no
        token dropping in training or inference (arXiv:2412.19437, Sec. 2.1.2), keeping the load balanced with a bias
        on the router scores instead of an auxiliary loss (`p02.moe_balance`). Capacity still matters wherever shapes
        must be static: expert-parallel all-to-all buffers (DeepEP, Megatron-Core's `moe_expert_capacity_factor`) and
        compiled TPU programs (GShard, Switch). The decoding analysis is why serving systems put each expert on one
        GPU of an expert-parallel group and batch hundreds of tokens: the weight bytes per step saturate at the total
        while the tokens per step keep growing.
    """)
    lesson.mistakes()
    return lesson
