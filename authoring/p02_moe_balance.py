"""Source of 02_PyTorch_Algorithms/10_MoE_Balance.ipynb (build with `python -m llm_algo build p02.moe_balance`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.moe_balance",
        path="02_PyTorch_Algorithms/10_MoE_Balance.ipynb",
        title_en="Mixture-of-experts load balancing",
        title_zh="混合专家负载均衡",
        difficulty="medium",
        device="cpu",
        minutes=55,
        prerequisites=["p02.moe_router"],
    )
    lesson.title(
        intro=r"""
        A freshly initialised router is not neutral for long. An expert that gets a few more tokens early gets more
        gradient, becomes better, gets chosen more, and a few steps later half the experts receive almost nothing:
        **routing collapse** (路由坍塌). With a capacity limit the popular experts drop tokens; without one, the busy
        GPU of expert parallelism holds up every other GPU. Each MoE recipe answers with a balancing mechanism, and
        the four in use today are the subject of this lesson.

        **You will implement** the Switch Transformer load-balancing loss from the full router probabilities
        (`load_balancing_loss`), the ST-MoE router z-loss (`router_z_loss`), DeepSeek-V3's auxiliary-loss-free
        balancing (`biased_routing` and `update_bias`), and an MoE layer with shared experts
        (`moe_with_shared_experts`). **Graded against** Hugging Face's `load_balancing_loss_func` (Mixtral; section 3
        says exactly where it differs), `DeepseekV3TopkRouter` and `DeepseekV3MoE` built locally from tiny random
        configs, closed forms, and slow per-token loop specs in the checks.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：router 的正反馈导致路由坍塌（routing collapse）：少数 expert 拿到大部分 token，有 capacity 时丢 token，expert parallelism 下最忙的 GPU 拖慢所有 GPU。
        - **Switch 负载均衡损失**：$\mathcal{L}_\text{aux} = N\sum_i f_i P_i$，$f_i$ = 分给 expert $i$ 的 token 比例（计数除以 $T\cdot k$），$P_i$ = 完整 softmax 概率在（非 padding）token 上的平均；完全均衡时为 1。
        - **Router z-loss（ST-MoE）**：$\frac{1}{T}\sum_t \big(\operatorname{logsumexp}(l_t)\big)^2$，压住 logits 的幅度；用稳定的 `logsumexp`，先平方再平均。
        - **无辅助损失均衡（DeepSeek-V3）**：用 $\text{score}+b$ 做 top-k 选择，但 gate 用原始 sigmoid score 并归一化；bias 只改选择、不改输出。每步 $b_i \leftarrow b_i + \gamma\,\operatorname{sign}(\bar{c} - c_i)$，平均负载 $\bar c = Tk/N$。
        - **Shared experts**：每个 token 都经过的 shared experts 输出直接相加（不是平均），再加上 routed experts 的加权和；gate 不能 detach，否则 router 没有梯度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Four ways to keep experts busy

        | mechanism | introduced by | what it changes | used by |
        | --- | --- | --- | --- |
        | load-balancing loss $N \sum_i f_i P_i$ | Switch Transformer (Fedus et al., 2021), after GShard | adds a loss term; the router's gradient pushes probability away from busy experts | Switch, Mixtral and Qwen-MoE (`router_aux_loss_coef`, 0.001 by default in their HF configs), DeepSeek-V2 |
        | router z-loss $\operatorname{mean}(\log\sum e^{\ell})^2$ | ST-MoE (Zoph et al., 2022) | keeps router logits small, so the softmax stays in a well-conditioned range in bf16 | ST-MoE, OLMoE, many training recipes |
        | aux-loss-free bias | DeepSeek (Wang et al., 2024), DeepSeek-V3 | a per-expert bias, updated by a rule rather than by gradient, shifts **only the selection** | DeepSeek-V3, and models after it |
        | shared experts | DeepSeekMoE (Dai et al., 2024) | always-on experts carry common knowledge, so the routed ones can specialise | DeepSeek-V2/V3, Qwen2-MoE, Llama 4 |

        The tension is that a balancing *loss* competes with the language-modelling loss: DeepSeek measured
        that a strong auxiliary loss hurts quality, and a weak one does not balance. The bias does not enter
        any gradient, so it balances without touching what the model learns.
    """)
    lesson.md(r"""
        ## 2. The math, with shapes

        Router logits $\ell \in \mathbb{R}^{T \times N}$ for $T$ tokens and $N$ experts (this lesson writes $N$ for
        the number of experts, as the Switch paper does), probabilities $p = \operatorname{softmax}(\ell)$ over the
        experts, and $\mathcal{K}(t)$ the $k$ experts token $t$ is routed to (top-$k$ of $p_t$).

        **Load-balancing loss.** Two per-expert vectors:

        $$
        f_i = \frac{1}{T k} \sum_{t} \mathbb{1}[i \in \mathcal{K}(t)] \quad\text{(fraction of the } Tk \text{ choices that went to } i\text{)},
        \qquad
        P_i = \frac{1}{T} \sum_t p_{t,i} \quad\text{(mean router probability of } i\text{)},
        $$

        $$
        \mathcal{L}_{\text{aux}} = N \sum_{i=1}^{N} f_i\, P_i .
        $$

        Both vectors sum to 1. $f$ comes from counts, so it has **no gradient**; $P$ is differentiable, and
        $\partial \mathcal{L}_{\text{aux}} / \partial P_i = N f_i$: the loss lowers the probability of each expert in
        proportion to how busy it is. Under uniform routing, $f_i = P_i = 1/N$ and $\mathcal{L}_{\text{aux}} = 1$; this
        is the value a balanced router settles at, which is why the factor $N$ is there: the loss reads the same
        for 8 or 256 experts. A collapsed router that sends every token to the same $k$ experts, each with probability
        near $1/k$, scores close to $N/k$ (the cell after the exercise prints 3.9 for $N = 8$, $k = 2$).

        **Where is the minimum?** If the counts followed the probabilities ($f = P$, the picture the Switch paper
        argues with), the loss would be $N \sum_i P_i^2 \ge N \cdot \frac{1}{N} (\sum_i P_i)^2 = 1$ by Cauchy-Schwarz,
        with equality only at $P_i = 1/N$: uniform routing is the minimum. With hard top-$k$ counts the bound is not
        exact: a router whose probabilities are almost flat but whose argmaxes pile up on one expert can score a
        little below 1 (for $N = 2$, $k = 1$: one token at $[1, 0]$ and three at $[0.45, 0.55]$ give 0.91). In
        practice the loss sits near 1 for a balanced router and rises quickly with imbalance.

        Why not use $f$ alone? It is piecewise constant in $\ell$. Why not $P$ alone? $\sum_i P_i^2$ is
        minimised by uniform *probabilities*, which can still route every token to the same expert. The product
        ties the differentiable part to the actual assignment.

        With padding, only real tokens count: $T$ becomes the number of unmasked tokens in both $f$ and $P$.

        **Router z-loss.** $\mathcal{L}_z = \frac{1}{T}\sum_t \big(\log \sum_i e^{\ell_{t,i}}\big)^2$. Large logits make
        the softmax saturate and make bf16 round-off in $e^{\ell}$ large; the z-loss penalises the log-partition
        function and so the overall size of the logits. Its gradient is
        $\partial \mathcal{L}_z / \partial \ell_{t,i} = \frac{2}{T}\, \operatorname{lse}_t\, p_{t,i}$. Compute
        $\operatorname{lse}$ with `torch.logsumexp` (max subtraction inside), never as `log(exp(l).sum())`.

        **Aux-loss-free balancing (DeepSeek-V3).** Scores are sigmoids, $s = \sigma(\ell) \in (0, 1)^{T \times N}$.
        Each expert has a bias $b_i$, which is not a parameter (no gradient):

        $$
        \mathcal{K}(t) = \operatorname{top-}k_i\,(s_{t,i} + b_i), \qquad
        g_{t,i} = \frac{s_{t,i}}{\sum_{j \in \mathcal{K}(t)} s_{t,j}} \ \text{ for } i \in \mathcal{K}(t) .
        $$

        The bias moves experts in or out of the top-$k$; the gate values use the **unbiased** scores, so the
        output (and its gradient) is what the router computed. After each step, with $c_i$ the number of choices
        expert $i$ received in the batch and $\bar c = kT/N$ the mean,

        $$
        b_i \leftarrow b_i + \gamma\, \operatorname{sign}(\bar c - c_i),
        $$

        so an overloaded expert's bias goes down by $\gamma$ and an underloaded one's goes up by $\gamma$ (DeepSeek-V3
        used $\gamma = 0.001$ for most of its training). The update is a sign, not a step proportional to the
        error: each bias moves at a fixed speed whatever the batch size, like signSGD.

        **Shared experts.** $S$ experts see every token with weight 1, next to the routed ones:

        $$
        y_t = \sum_{s=1}^{S} \mathrm{FFN}^{\text{shared}}_s(x_t) + \sum_{i \in \mathcal{K}(t)} g_{t,i}\, \mathrm{FFN}_i(x_t) .
        $$

        DeepSeek-V3 has $S = 1$ shared and 256 routed experts with $k = 8$. Hugging Face stores $S$ shared experts
        fused as one MLP of width $S \cdot F$, which is the same function: a SwiGLU of width $S F$ is the sum of $S$
        SwiGLUs of width $F$ over the split rows of its weights.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `load_balancing_loss`

        Write the Switch loss for one layer's router logits `(T, N)`, with an optional `token_mask (T,)` that is
        `True` for real tokens. Compute in at least float32 and return a 0-dim tensor. Count assignments with
        `torch.bincount` (or `one_hot(...).sum(0)`), and divide by $Tk$.

        **Where Hugging Face differs.** `load_balancing_loss_func` in `transformers/models/mixtral/modeling_mixtral.py`
        (read it: it is 60 lines) computes `tokens_per_expert` as counts divided by the number of tokens $T$, not by
        $Tk$. So its $f$ sums to $k$, and its loss is $k$ times the one defined here: 2 for a balanced Mixtral
        router, $k$ for a balanced Qwen3 router. It also takes a tuple of all layers' logits and pools the counts and
        probability sums over layers before multiplying. That is not the mean of the per-layer losses: a router
        that is unbalanced in opposite ways in two layers looks balanced when pooled. And the model multiplies the
        result by `router_aux_loss_coef`. Finally, it takes the softmax in the logits' own dtype (bf16 in a bf16
        model) and upcasts only the sums. The check compares your loss with `load_balancing_loss_func` of a
        one-layer tuple, divided by $k$, with and without a padding mask.
    """)
    lesson.exercise(
        "load_balancing_loss",
        r'''
        def load_balancing_loss(router_logits: torch.Tensor, top_k: int, token_mask: torch.Tensor | None = None):
            """Switch Transformer load-balancing loss N * sum_i f_i * P_i for one layer.

            router_logits: (T, N) any float dtype
            token_mask:    (T,) bool, True for tokens that count (None: all of them)
            returns        0-dim tensor in promote_types(dtype, float32); 1.0 for perfectly uniform routing
            """
            T, N = router_logits.shape
            # TODO: the full router probabilities (T, N) in at least float32
            # TODO: f: the top-k assignments counted per expert over the real tokens, divided by (real tokens * k)
            # TODO: P: the mean probability of each expert over the real tokens (a differentiable function of logits)
            # TODO: N * sum(f * P)
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(router_logits.dtype, torch.float32)
            probs = router_logits.to(compute_dtype).softmax(dim=-1)                   # (T, N)
            if token_mask is None:
                token_mask = torch.ones(T, dtype=torch.bool, device=router_logits.device)
            real_probs = probs[token_mask]                                             # (T_real, N)
            chosen = torch.topk(real_probs, top_k, dim=-1).indices                     # (T_real, k)
            counts = torch.bincount(chosen.flatten(), minlength=N).to(compute_dtype)   # (N,) no gradient
            f = counts / (real_probs.shape[0] * top_k)                                 # (N,) sums to 1
            P = real_probs.mean(dim=0)                                                 # (N,) sums to 1
            return N * (f * P).sum()
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # The loss between a collapsed router and a uniform one: 1024 tokens, N = 8, k = 2.
        torch.manual_seed(0)
        try:
            for skew in (8.0, 4.0, 2.0, 1.0, 0.5, 0.0):
                logits = torch.randn(1024, 8) + skew * torch.linspace(1, -1, 8)  # expert 0 preferred by `skew`
                print(f"skew {skew:4}: loss {float(load_balancing_loss(logits, 2)):.3f}")
            two_hot = torch.eye(8) + torch.eye(8).roll(1, dims=1)  # token t prefers experts t and t+1 (mod 8)
            balanced = 3.0 * two_hot.repeat(128, 1)  # every expert chosen equally often, mean probability 1/8
            print(f"balanced by construction: loss {float(load_balancing_loss(balanced, 2)):.3f}")
        except NotImplementedError:
            print("load_balancing_loss is not written yet")
    """)
    lesson.md(r"""
        ## 4. Exercise `router_z_loss`

        $\frac{1}{T}\sum_t \operatorname{lse}(\ell_t)^2$ over the experts of each token, in at least float32, returned as
        a 0-dim tensor. The check feeds logits of size $10^4$, where $e^{\ell}$ overflows float32.
    """)
    lesson.exercise(
        "router_z_loss",
        r'''
        def router_z_loss(router_logits: torch.Tensor) -> torch.Tensor:
            """ST-MoE router z-loss: mean over tokens of logsumexp(logits over experts) ** 2.

            router_logits: (T, N) any float dtype; returns a 0-dim tensor in promote_types(dtype, float32)
            """
            # TODO: a stable log-sum-exp over the experts of each token, in at least float32
            # TODO: square it and average over the tokens
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(router_logits.dtype, torch.float32)
            lse = torch.logsumexp(router_logits.to(compute_dtype), dim=-1)            # (T,)
            return lse.pow(2).mean()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `biased_routing`: DeepSeek-V3's selection

        Sigmoid scores in at least float32, selection by `scores + bias`, gates from the unbiased scores of the
        chosen experts, renormalised over the $k$. Return `gates (T, k)` and `experts (T, k)`, ordered by the
        **biased** score, best first.

        Hugging Face's `DeepseekV3TopkRouter` does this (its `e_score_correction_bias` buffer is the bias), plus two
        things set aside here: group-limited routing (the experts are split into `n_group` groups, only `topk_group`
        groups are eligible per token, which bounds the number of nodes a token's choices are sent to) and a
        `routed_scaling_factor` (2.5 in DeepSeek-V3) that multiplies the gates. The checks build it with one group
        and a factor of 1.
    """)
    lesson.exercise(
        "biased_routing",
        r'''
        def biased_routing(router_logits: torch.Tensor, bias: torch.Tensor, top_k: int):
            """Aux-loss-free routing: the bias chooses the experts, the unbiased sigmoid scores weight them.

            router_logits: (T, N) any float dtype; bias: (N,) float32
            returns (gates (T, k) in promote_types(dtype, float32), rows sum to 1;
                     experts (T, k) int64, by decreasing biased score)
            """
            # TODO: sigmoid scores in at least float32
            # TODO: the k experts with the highest score + bias
            # TODO: gates: the *unbiased* scores of those experts, divided by their sum
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(router_logits.dtype, torch.float32)
            scores = router_logits.to(compute_dtype).sigmoid()                        # (T, N)
            experts = torch.topk(scores + bias.to(compute_dtype), top_k, dim=-1).indices  # (T, k) by biased score
            gates = scores.gather(-1, experts)                                         # (T, k) unbiased
            return gates / gates.sum(dim=-1, keepdim=True), experts
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `update_bias`: the balancing rule

        Given the experts chosen in a batch, `(T, k)`, count each expert's load $c_i$ (all $k$ choices count) and
        return $b + \gamma\,\operatorname{sign}(\bar c - c)$ with $\bar c = kT/N$. Return a new tensor in the bias's
        dtype; the caller assigns it (DeepSeek does this in place on a buffer, outside autograd).
    """)
    lesson.exercise(
        "update_bias",
        r'''
        def update_bias(bias: torch.Tensor, experts: torch.Tensor, gamma: float) -> torch.Tensor:
            """One aux-loss-free bias step: raise underloaded experts' bias by gamma, lower overloaded ones'.

            bias: (N,) float32; experts: (T, k) int64 choices of the last batch; returns (N,) new bias, bias's dtype
            """
            N = bias.shape[0]
            # TODO: the load of every expert over all T * k choices, and the mean load k*T/N
            # TODO: bias + gamma * sign(mean load - load)
            ### BEGIN SOLUTION
            load = torch.bincount(experts.flatten(), minlength=N).to(torch.float64)   # (N,) c_i
            mean_load = experts.numel() / N                                            # k*T/N
            return bias + gamma * torch.sign(mean_load - load).to(bias.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Watching the bias balance a skewed router

        The cell below simulates training steps of one MoE layer whose router strongly prefers some experts (a
        fixed offset per expert on top of per-token noise), with DeepSeek-V3's routing: $N = 16$, $k = 4$, 512 tokens
        per step. It uses your `biased_routing` and `update_bias` with $\gamma = 0.01$ (DeepSeek's 0.001 is for
        a router whose scores move slowly over 14 trillion tokens; here the demo wants 300 steps). The left panel
        plots the busiest expert's load divided by the mean load (1.0 is perfect balance), the right one the final
        biases against the experts' offsets: the bias learns to cancel the router's preference. With the reference
        solution the ratio falls from 2.9 to about 1.2 within 30 steps and stays there, while plain top-k stays at
        2.9. It does not reach 1.0: with 512 tokens a step the loads fluctuate, and the busiest of 16 experts is
        always somewhat above the mean, as in the previous lesson's noise router.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        num_experts, k, tokens_per_step, steps, gamma = 16, 4, 512, 300, 0.01
        preference = torch.linspace(1.5, -1.5, num_experts)[torch.randperm(num_experts)]  # the router's skew
        bias = torch.zeros(num_experts)
        imbalance = {"bias updated": [], "no bias (plain top-k)": []}
        try:
            for step in range(steps):
                logits = torch.randn(tokens_per_step, num_experts) + preference
                for name, b in (("bias updated", bias), ("no bias (plain top-k)", torch.zeros(num_experts))):
                    _, chosen = biased_routing(logits, b, k)
                    load = torch.bincount(chosen.flatten(), minlength=num_experts).float()
                    imbalance[name].append(float(load.max() / load.mean()))
                _, chosen = biased_routing(logits, bias, k)
                bias = update_bias(bias, chosen, gamma)
            fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
            for name, values in imbalance.items():
                left.plot(values, label=name)
            left.axhline(1.0, color="grey", ls=":")
            left.set_xlabel("step"); left.set_ylabel("max load / mean load"); left.legend(fontsize=8)
            left.set_title(f"N = {num_experts}, k = {k}, γ = {gamma}")
            right.scatter(preference, bias)
            right.set_xlabel("router preference (logit offset) of the expert"); right.set_ylabel("final bias b_i")
            right.set_title("the bias cancels the preference")
            fig.tight_layout()
            plt.show()
            print(f"max/mean load: first step {imbalance['bias updated'][0]:.2f}, "
                  f"mean of the last 50 steps {sum(imbalance['bias updated'][-50:]) / 50:.2f} "
                  f"(no bias: {sum(imbalance['no bias (plain top-k)'][-50:]) / 50:.2f})")
        except NotImplementedError:
            print("biased_routing and update_bias are not written yet: no picture")
    """)
    lesson.md(r"""
        ## 7. Exercise `moe_with_shared_experts`: DeepSeek-V3's MoE layer

        Put it together, dropless: router logits (in at least float32), `biased_routing`, the routed SwiGLU experts
        weighted by their gates, plus every shared expert on every token with weight 1. Loop over the experts that
        received tokens, as Hugging Face's eager `DeepseekV3Experts` does: gather the expert's tokens, run the
        expert, `index_add_` the gated result into the output. Weights: `router_weight (N, H)`, routed
        `w_gate, w_up (N, F, H)`, `w_down (N, H, F)`; shared `shared_gate, shared_up (S, F, H)`,
        `shared_down (S, H, F)`.
    """)
    lesson.exercise(
        "moe_with_shared_experts",
        r'''
        def moe_with_shared_experts(x, router_weight, w_gate, w_up, w_down, shared_gate, shared_up, shared_down,
                                    bias, top_k):
            """DeepSeek-V3 style MoE FFN: S always-on shared experts plus top-k of N routed experts (dropless).

            x: (B, S_len, H) float32/float64; router_weight (N, H); w_gate, w_up (N, F, H); w_down (N, H, F)
            shared_gate, shared_up (S, F, H); shared_down (S, H, F); bias (N,)
            returns (B, S_len, H) in x's dtype
            """
            H = x.shape[-1]
            tokens = x.reshape(-1, H)                                                  # (T, H)
            # TODO: router logits in at least float32; gates and experts from biased_routing
            # TODO: for each routed expert that got tokens: its SwiGLU on those tokens, times their gates, added in
            # TODO: add every shared expert's SwiGLU of every token (weight 1); reshape to x's shape
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)
            logits = tokens.to(compute_dtype) @ router_weight.to(compute_dtype).T     # (T, N)
            gates, experts = biased_routing(logits, bias, top_k)                       # (T, k), (T, k)
            out = torch.zeros_like(tokens)                                             # (T, H)
            for e in experts.unique().tolist():
                token_ids, choice = torch.where(experts == e)                          # (n_e,), (n_e,)
                h = tokens[token_ids]                                                  # (n_e, H)
                y = (F.silu(h @ w_gate[e].T) * (h @ w_up[e].T)) @ w_down[e].T          # (n_e, H)
                out = out.index_add(0, token_ids, y * gates[token_ids, choice, None].to(x.dtype))
            for s in range(shared_gate.shape[0]):
                out = out + (F.silu(tokens @ shared_gate[s].T) * (tokens @ shared_up[s].T)) @ shared_down[s].T
            return out.reshape(x.shape)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`load_balancing_loss`.** The mask is applied by selecting the real rows once, so both $f$ and $P$ use the
        same $T$. `bincount` turns the `(T, k)` indices into loads; dividing by $Tk$ makes $f$ a distribution. $P$ is
        a plain mean of the softmax, the only differentiable path. Cost: one softmax over $T \times N$, negligible
        next to the experts.

        **`router_z_loss`.** `torch.logsumexp` subtracts the row maximum before exponentiating, so logits of $10^4$ are
        fine in float32 (the naive `log(exp(l).sum())` gives `inf`).

        **`biased_routing`.** The bias enters `topk` and nothing else. `gather` picks the unbiased scores of the
        chosen experts. The renormalisation divides by the sum of those $k$ scores.

        **`update_bias`.** `bincount` over all $kT$ choices, a sign, a fixed step. Experts exactly at the mean load
        keep their bias (`sign(0) = 0`).

        **`moe_with_shared_experts`.** The routed part is Hugging Face's eager loop: one gather, one SwiGLU and one
        `index_add` per expert that received tokens. The shared experts are dense: every token, weight 1.

        **The usual mistakes, and why they are wrong**:
        - *$f$ not divided by $k$* (Hugging Face's normalisation): the balanced value becomes $k$, not 1.
        - *$P$ from the renormalised top-$k$ gates* instead of the full probabilities: the loss then ignores the
          probability mass on unchosen experts, and its gradient is wrong.
        - *Padding counted in $P$ but not in $f$* (or the other way round): the two halves disagree on $T$.
        - *No factor $N$*: the loss shrinks as experts are added.
        - *`log(exp(l).sum())`*: `inf` for large logits. *Missing square*, or a *sum over tokens* instead of a mean.
        - *Gates from the biased scores*: the bias then changes the layer's output and receives a meaning it was
          never meant to have. The check shifts the bias of every expert by the same constant: the selection stays
          the same, and the gates must too.
        - *Bias added to the logits before the sigmoid*: a different selection rule (the sigmoid is nonlinear).
        - *Sign reversed*, or an update *proportional* to the load error instead of a sign.
        - *Only first choices counted* in the load, or a mean load of $T/N$ that forgets the $k$.
        - *Shared experts forgotten*, or *averaged* instead of summed, or the routed experts chosen *without the
          bias*.

        **What production systems do.**
        - *Megatron-Core* (`moe_router_load_balancing_type`) offers `aux_loss` (the Switch loss over a
          micro-batch), `seq_aux_loss` (DeepSeek's per-sequence variant), `global_aux_loss` (the same loss over the
          global batch), `sinkhorn` (no loss: a Sinkhorn iteration balances the token-to-expert assignment itself, as in
          S-BASE) and `none`, plus `moe_z_loss_coeff` and
          `moe_router_enable_expert_bias` with `moe_router_bias_update_rate` (the $\gamma$ of this lesson). The
          loads for the bias update are summed over the data-parallel ranks first, so every rank applies the same
          update.
        - *DeepSeek-V3* keeps a tiny sequence-wise balance loss ($\alpha = 10^{-4}$) next to the bias, to prevent
          extreme imbalance inside a single sequence, and no token dropping at all.
        - *Hugging Face* computes `load_balancing_loss_func` only when `output_router_logits=True` and adds
          `router_aux_loss_coef` times it to the language-modelling loss.
        - *Shared experts* in Qwen2-MoE are scaled by a learned sigmoid gate per token (`shared_expert_gate`);
          DeepSeek's are not. Serving systems (vLLM, SGLang) often fuse the shared expert into the routed kernel as
          an extra expert that every token picks with weight 1.
    """)
    lesson.mistakes()
    return lesson
