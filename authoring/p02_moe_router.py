"""Source of 02_PyTorch_Algorithms/09_MoE_Router.ipynb (build with `python -m llm_algo build p02.moe_router`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.moe_router",
        path="02_PyTorch_Algorithms/09_MoE_Router.ipynb",
        title_en="Mixture-of-experts routing: top-k, capacity, dispatch and combine",
        title_zh="混合专家路由：Top-k、容量、分发与合并",
        difficulty="medium",
        device="cpu",
        minutes=80,
        prerequisites=["p00.numpy_einsum"],
    )
    lesson.title(
        intro=r"""
        Mixtral 8x7B stores 46.7 B parameters but runs only 12.9 B of them per token. DeepSeek-V3 stores 671 B and runs
        37 B. The trick is the **mixture-of-experts (MoE, 混合专家)** layer: instead of one feed-forward network (FFN),
        a layer holds $E$ of them (the *experts*), and a small linear **router** (路由器, also called the gate) picks
        $k$ of them for each token. Compute per token grows with $k$; capacity to store knowledge grows with $E$.

        The FFN math is the SwiGLU you already know. What is new, and where the bugs live, is the bookkeeping: which
        token goes to which expert with what weight, what happens when too many tokens pick the same expert, and how
        to move tokens to experts and back without a Python loop.

        **You will implement** top-k routing with softmax or sigmoid scores (`route_topk`), expert capacity with a
        stated dropping rule (`assign_capacity_slots`), and a whole MoE layer with dispatch and combine
        (`moe_layer`). **Graded against** Hugging Face `MixtralTopKRouter` and `MixtralSparseMoeBlock` built locally
        from a tiny random `MixtralConfig` (the dropless case), and a slow per-token loop written in the checks (the
        routing, capacity and dropping rule, and gradients through float64 autograd).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：MoE 层有 $E$ 个 expert FFN，router 为每个 token 选 $k$ 个（Mixtral 8x7B 存 46.7B 参数、每 token 只算 12.9B）；难点在路由、容量和 dispatch/combine 的记账。
        - **路由**：logits `(T, E)`，对每个 token 的 expert 维做 softmax（或 sigmoid），在 float32 中计算，取 top-$k$；`normalize=True` 时把 $k$ 个 gate 除以它们自己的和。
        - **容量**：$C = \lceil c \cdot T \cdot k / E \rceil$（向上取整，且包含 $k$）；`capacity_factor=None` 为 dropless，$C$ 取最忙 expert 的负载。
        - **槽位分配**：按选择的名次优先（所有 token 的第 1 选择先于任何第 2 选择），同名次内按 token 顺序；槽位从 0 开始，位置 $\ge C$ 的选择被丢弃（slot $=-1$）。
        - **Dispatch / combine**：把保留的选择放入 `(E, C, d)` 缓冲，各 expert 批量计算，输出乘以 gate 后加回对应 token；gate 不能 detach，router 要得到梯度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: many experts, a few per token

        A dense Llama FFN with hidden size $H$ and inner size $F$ costs $3 \cdot 2HF$ FLOPs per token
        ($2HF$ for each of gate, up and down). An MoE layer with $E$ such experts, of which each token uses $k$, costs
        $k \cdot 6HF$ FLOPs per token plus the router's $2HE$, but stores $E$ times the weights.

        | model | experts $E$ | per token $k$ | scores | gates renormalised over the $k$? | shared experts |
        | --- | --- | --- | --- | --- | --- |
        | Switch Transformer (2021) | up to 2048 | 1 | softmax | no | 0 |
        | Mixtral 8x7B (2024) | 8 | 2 | softmax | yes | 0 |
        | Qwen3-30B-A3B (2025) | 128 | 8 | softmax | yes (`norm_topk_prob`) | 0 |
        | DeepSeek-V3 (2024) | 256 | 8 | sigmoid | yes | 1 |

        (Sources: each model's paper and its Hugging Face config.) Shared experts and load balancing are the next
        lesson, `p02.moe_balance`. Here is the router.

        **Where MoE training hurts.** The experts of one layer are spread over GPUs (expert parallelism, 专家并行):
        each GPU holds $E/P$ experts and sends every token to the GPU of its chosen expert with an **all-to-all**
        collective, then gets the results back with a second one. Collectives and compiled kernels want
        **static shapes**: every GPU must know in advance how many tokens it sends to each expert. A router is
        free to send 40% of the tokens to one expert. So classic MoE systems (GShard, Switch, DeepSpeed-MoE) give every
        expert a fixed number of slots, the **expert capacity** (专家容量), and *drop* the choices that do not fit.
        A dropped choice contributes nothing; the token still reaches the next layer through the residual
        connection, so dropping loses quality but never crashes.
    """)
    lesson.md(r"""
        ## 2. The math, with shapes

        Flatten the batch to $T$ tokens, $x \in \mathbb{R}^{T \times H}$. The router is one matrix
        $W_r \in \mathbb{R}^{E \times H}$ (stored like `nn.Linear.weight`):

        $$
        \ell = x W_r^\top \in \mathbb{R}^{T \times E} \quad\text{(router logits)},\qquad
        s = \operatorname{softmax}(\ell) \ \text{(Mixtral, Qwen)} \quad\text{or}\quad s = \sigma(\ell) \ \text{(DeepSeek-V3)} .
        $$

        Each token keeps its $k$ highest scores: $\mathcal{K}(t) = \operatorname{top-}k(s_t)$ and gates
        $g_{t,j} = s_{t,e_j}$ for $j = 1 \dots k$. With **renormalisation** the $k$ gates are divided by their sum so
        they add up to 1. For softmax scores that is the same as a softmax over the $k$ chosen logits only, which is
        how Mistral's original code writes it (`topk` on logits, then `softmax`):
        $\frac{e^{\ell_i}/Z}{\sum_{j \in \mathcal{K}} e^{\ell_j}/Z} = \frac{e^{\ell_i}}{\sum_{j \in \mathcal{K}} e^{\ell_j}}$.
        Sigmoid scores are independent per expert (they do not sum to 1), so DeepSeek-V3 always renormalises them.

        The layer output for token $t$ is the gate-weighted sum of its experts, with each expert a SwiGLU FFN
        ($W^{g}_e, W^{u}_e \in \mathbb{R}^{F\times H}$, $W^{d}_e \in \mathbb{R}^{H \times F}$):

        $$
        y_t = \sum_{j=1}^{k} g_{t,j}\; \mathrm{FFN}_{e_{t,j}}(x_t), \qquad
        \mathrm{FFN}_e(x) = W^{d}_e\big(\operatorname{silu}(W^{g}_e x) \odot W^{u}_e x\big) .
        $$

        **The gradient reaches the router only through the gates.** `topk` returns indices, which have no gradient.
        $\partial y_t / \partial g_{t,j} = \mathrm{FFN}_{e_{t,j}}(x_t)$, and $g$ is a differentiable function of
        $\ell = x W_r^\top$, so the router learns "give more weight to the expert whose output lowered the loss".
        Detach the gates and the router never learns. A corollary: with $k = 1$ and renormalisation the gate is
        always exactly 1 and the router gets **no** gradient, which is why Switch Transformer ($k=1$) multiplies by
        the raw softmax probability.

        **Capacity.** With capacity factor $c$, each expert has

        $$
        C = \left\lceil c \cdot \frac{T \cdot k}{E} \right\rceil \ \text{slots}
        $$

        ($T k / E$ is the load of a perfectly balanced router; $c = 1.25$ leaves 25% headroom). The experts'
        input buffer has the static shape `(E, C, H)`, whatever the router did.

        **The dropping rule used in this lesson** (GShard's top-2 gating does the same): choices are served
        **choice rank first, then token order**. Every token's first choice is placed, in token order, before any
        token's second choice. An expert that already holds $C$ tokens drops the choice. Token order is a
        position priority: late tokens of a batch are dropped first. Other systems sort by router score instead
        (V-MoE's *batch prioritized routing*), so that the most confident choices survive. Any rule works if it
        is stated and kept: the kept set, and so the output, depends on it.

        **The loop spec.** This is the definition the checks use (slow, one token and one choice at a time):

        ```python
        load = [0] * E                          # tokens already placed with each expert
        kept = {}
        for j in range(k):                      # choice rank first ...
            for t in range(T):                  # ... then token order
                e = experts[t][j]
                kept[t, j] = load[e] < C        # a free slot?
                load[e] += kept[t, j]
        for t in range(T):
            y[t] = sum(gates[t][j] * ffn(experts[t][j], x[t]) for j in range(k) if kept[t, j])
        ```
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `route_topk`: scores, top-k, gates

        Write `route_topk(router_logits, top_k, score_fn, normalize)`. It returns `gates (T, k)` and `experts (T, k)`,
        best first (`torch.topk` sorts by default). Compute the scores in at least float32: router logits of a bf16
        model are bf16, and a softmax over 128 or 256 experts in bf16 rounds the small probabilities badly. Every
        production router upcasts here (Hugging Face Mixtral: `softmax(router_logits.float())`; DeepSeek-V3 computes
        the whole router matmul in float32). So gates come back in `promote_types(logits.dtype, float32)`, and
        experts as int64.
    """)
    lesson.exercise(
        "route_topk",
        r'''
        def route_topk(router_logits: torch.Tensor, top_k: int, score_fn: str = "softmax", normalize: bool = True):
            """Top-k routing of T tokens over E experts.

            router_logits: (T, E) any float dtype
            score_fn:      "softmax" (Mixtral, Qwen) or "sigmoid" (DeepSeek-V3): how logits become scores
            normalize:     divide the k chosen scores by their sum (Mixtral, Qwen3, DeepSeek-V3) or keep them raw
            returns (gates (T, k) in promote_types(dtype, float32), experts (T, k) int64), highest score first
            """
            if score_fn not in ("softmax", "sigmoid"):
                raise ValueError(f"score_fn must be 'softmax' or 'sigmoid', got {score_fn!r}")
            # TODO: scores in at least float32: softmax over the experts of each token, or an elementwise sigmoid
            # TODO: the k best scores of each token and their expert ids, best first
            # TODO: if normalize, divide the k gates of each token by their sum
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(router_logits.dtype, torch.float32)
            logits = router_logits.to(compute_dtype)                               # (T, E)
            scores = logits.softmax(dim=-1) if score_fn == "softmax" else logits.sigmoid()  # (T, E)
            gates, experts = torch.topk(scores, top_k, dim=-1)                     # (T, k) each, sorted
            if normalize:
                gates = gates / gates.sum(dim=-1, keepdim=True)                    # (T, k), rows sum to 1
            return gates, experts
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with Hugging Face's `MixtralTopKRouter` (softmax, top-k, renormalise), with the per-token
        spec for the other three combinations in fp32, bf16, fp16 and float64, and the gradient of the gates with
        float64 autograd of the spec.
    """)
    lesson.md(r"""
        ## 4. Exercise `assign_capacity_slots`: who gets a seat

        Each expert has $C$ slots. Write `assign_capacity_slots(experts, num_experts, capacity)`: for every (token,
        choice) it returns the slot index in that expert's buffer, $0 \dots C-1$, or $-1$ when the choice is dropped,
        with the priority rule of section 2 (choice rank first, then token order).

        Without a loop: read the choices in priority order, which is `experts.T` flattened (all first choices,
        then all second choices). One-hot them to `(k*T, E)`. A running count down each expert's column
        (`cumsum`) says how many earlier choices went to the same expert, and that number is the slot. GShard,
        Switch (Mesh TensorFlow), DeepSpeed-MoE and Tutel all compute the position this way. The picture after the
        exercise shows it for a small batch.
    """)
    lesson.exercise(
        "assign_capacity_slots",
        r'''
        def assign_capacity_slots(experts: torch.Tensor, num_experts: int, capacity: int) -> torch.Tensor:
            """Slot of every routed choice in its expert's buffer, or -1 when the expert is full.

            experts:  (T, k) int64 expert ids from route_topk
            capacity: slots per expert
            returns   (T, k) int64; priority: all first choices in token order, then all second choices, ...
            """
            T, k = experts.shape
            # TODO: the choices in priority order: (k * T,), choice rank major, token order inside a rank
            # TODO: position of each choice among the earlier choices of the same expert (one-hot, cumsum)
            # TODO: -1 where that position is >= capacity; reshape back to (T, k)
            ### BEGIN SOLUTION
            in_priority_order = experts.T.reshape(-1)                             # (k*T,): rank 0 of all tokens first
            one_hot = F.one_hot(in_priority_order, num_experts)                   # (k*T, E)
            position = (one_hot.cumsum(dim=0) * one_hot).sum(dim=-1) - 1          # (k*T,): 0 for the first arrival
            slots = torch.where(position < capacity, position, -1)                # (k*T,)
            return slots.reshape(k, T).T                                          # (T, k)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # The priority order, drawn: 10 tokens, 2 choices, 4 experts, capacity ceil(1.0 * 10 * 2 / 4) = 5.
        torch.manual_seed(3)
        picture_logits = torch.randn(10, 4) + torch.tensor([1.5, 0.0, 0.0, -1.0])  # expert 0 is popular
        try:
            _, picture_experts = route_topk(picture_logits, 2)
            picture_slots = assign_capacity_slots(picture_experts, 4, capacity=5)
            fig, ax = plt.subplots(figsize=(7.5, 2.3))
            ax.imshow(picture_experts.T, cmap="Pastel1", vmin=0, vmax=8, aspect="auto")
            for t in range(10):
                for j in range(2):
                    slot = int(picture_slots[t, j])
                    text = f"e{int(picture_experts[t, j])}\n" + (f"slot {slot}" if slot >= 0 else "DROP")
                    ax.text(t, j, text, ha="center", va="center", fontsize=7, color="red" if slot < 0 else "black")
            ax.set_yticks([0, 1], ["1st choice", "2nd choice"]); ax.set_xticks(range(10)); ax.set_xlabel("token")
            ax.set_title("slots are handed out row by row: all 1st choices, then all 2nd choices (C = 5)")
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("route_topk and assign_capacity_slots are not written yet: no picture")
    """)
    lesson.md(r"""
        ## 5. Exercise `moe_layer`: dispatch, experts, combine

        Now the whole layer, for `x (B, S, H)`, with the weights stacked over experts: `router_weight (E, H)`,
        `w_gate` and `w_up (E, F, H)`, `w_down (E, H, F)`. Use Mixtral's routing (softmax, renormalised) and your two
        functions. Three steps:

        1. **Dispatch** (分发). Allocate the expert buffer `(E, C, H)` of zeros and copy each kept (token, choice) into
           `buffer[expert, slot]`. Dropped choices have slot $-1$: index with them and you silently overwrite the
           expert's *last* slot, so keep only the kept ones.
        2. **Experts.** One batched SwiGLU over all experts at once: `torch.bmm` over the expert axis,
           `(E, C, H) @ (E, H, F) -> (E, C, F)`. Empty slots hold zeros and produce zeros (SwiGLU has no bias).
        3. **Combine** (合并). Read each kept choice's result at `expert_out[expert, slot]`, multiply by its gate,
           and add it into its token's row (`index_add_`: a token has up to $k$ contributions).

        `capacity_factor=None` means **dropless**: $C$ is the largest number of tokens any expert received, so
        nothing is dropped. Then the output must equal Hugging Face's `MixtralSparseMoeBlock`, which is dropless.
        Notice that $C$ then depends on the data, which is exactly what a static all-to-all cannot have.

        The gates must stay attached to the autograd graph: the check differentiates your layer with respect to
        `router_weight`.
    """)
    lesson.exercise(
        "moe_layer",
        r'''
        def moe_layer(x: torch.Tensor, router_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                      w_down: torch.Tensor, top_k: int, capacity_factor: float | None = None) -> torch.Tensor:
            """Mixtral-style MoE FFN with expert capacity.

            x:             (B, S, H) float32 or float64
            router_weight: (E, H); w_gate, w_up: (E, F, H); w_down: (E, H, F)
            capacity_factor: None for dropless (C = the busiest expert's load), else C = ceil(cf * T * k / E)
            returns        (B, S, H) in x's dtype; dropped choices contribute nothing
            """
            B, S, H = x.shape
            E = router_weight.shape[0]
            tokens = x.reshape(-1, H)                                                  # (T, H)
            T = tokens.shape[0]
            # TODO: router logits, then route_topk (softmax, renormalised)
            # TODO: the capacity C (dropless: the largest load of any expert), then assign_capacity_slots
            # TODO: dispatch the kept choices into an (E, C, H) buffer
            # TODO: the SwiGLU of every expert on its buffer, batched over experts: (E, C, H)
            # TODO: combine: gate * expert output, added into each token's row; reshape to (B, S, H)
            ### BEGIN SOLUTION
            logits = tokens @ router_weight.T                                          # (T, E)
            gates, experts = route_topk(logits, top_k)                                 # (T, k), (T, k)
            if capacity_factor is None:
                capacity = int(torch.bincount(experts.flatten(), minlength=E).max())   # dropless
            else:
                capacity = math.ceil(capacity_factor * T * top_k / E)
            slots = assign_capacity_slots(experts, E, capacity)                        # (T, k), -1 = dropped
            kept = slots >= 0                                                          # (T, k) bool
            token_ids = torch.arange(T).unsqueeze(1).expand(T, top_k)[kept]            # (N,) N = kept choices
            kept_experts, kept_slots = experts[kept], slots[kept]                      # (N,), (N,)
            buffer = tokens.new_zeros(E, capacity, H)                                  # (E, C, H)
            buffer[kept_experts, kept_slots] = tokens[token_ids]                       # dispatch
            hidden = F.silu(buffer @ w_gate.transpose(1, 2)) * (buffer @ w_up.transpose(1, 2))  # (E, C, F)
            expert_out = hidden @ w_down.transpose(1, 2)                               # (E, C, H)
            weighted = expert_out[kept_experts, kept_slots] * gates[kept].unsqueeze(1).to(x.dtype)  # (N, H)
            out = tokens.new_zeros(T, H).index_add(0, token_ids, weighted)             # combine
            return out.reshape(B, S, H)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### How many tokens does a capacity factor drop?

        The cell below routes 4096 random tokens over 16 experts with $k = 2$ through your functions and plots
        the fraction of choices dropped against the capacity factor, for a router whose logits are pure noise
        and for one with a per-expert offset (some experts are popular, as an untrained or unbalanced router is).
        With the reference solution and this seed, the noise router's busiest expert receives 557 choices against a
        mean of 512, so $c = 1$ drops 1.7% of the choices and $c = 1.25$ drops none. The skewed router's busiest
        expert receives 1800, 3.5 times the mean: it drops 35% of the choices at $c = 1$ and still 3% at $c = 3$.
        Dropping is a property of the router's balance, not only of the capacity factor. That is why the next lesson
        adds a loss (or a bias) that keeps the router balanced.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        num_tokens, num_experts, k = 4096, 16, 2
        factors = [0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0]
        routers = {
            "noise logits": torch.randn(num_tokens, num_experts),
            "skewed: offsets N(0, 0.5²) per expert": torch.randn(num_tokens, num_experts) + 0.5 * torch.randn(num_experts),
        }
        plt.figure(figsize=(6, 3.5))
        for name, logits in routers.items():
            try:
                _, chosen = route_topk(logits, k)
                drop_rate = [
                    float((assign_capacity_slots(chosen, num_experts, math.ceil(c * num_tokens * k / num_experts)) < 0)
                          .float().mean())
                    for c in factors
                ]
            except NotImplementedError:
                drop_rate = [float("nan")] * len(factors)  # not attempted yet: no curve
            plt.plot(factors, [100 * r for r in drop_rate], marker="o", label=name)
        plt.xlabel("capacity factor c"); plt.ylabel("choices dropped (%)")
        plt.title(f"{num_tokens} tokens, E = {num_experts}, k = {k}"); plt.legend(fontsize=8); plt.grid(alpha=0.3)
        plt.tight_layout()
        plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`route_topk`.** `promote_types(dtype, float32)` upcasts bf16 and fp16 logits and keeps float64. The softmax
        is over `dim=-1`, the experts of one token. `torch.topk` returns values and indices sorted best first. The
        renormalisation divides by the sum of the $k$ kept gates, not of all $E$ scores. Note what does **not**
        matter: `topk` on the logits or on the softmax picks the same experts (softmax is monotonic), which is why
        Mistral's "top-k on logits, then softmax over the $k$" equals Hugging Face's "softmax, top-k, renormalise".
        For sigmoid scores top-k also commutes with the score function, but the sum of all $E$ sigmoids is
        meaningless as a normaliser.

        **`assign_capacity_slots`.** `experts.T.reshape(-1)` is the priority order. `cumsum` over the one-hot
        matrix counts, for each choice, the choices of the same expert up to and including itself; multiplying by
        the one-hot and summing picks that count in the choice's own column; minus one makes it a 0-based slot.
        Memory is $O(kT \cdot E)$ integers. Production code sorts instead: `argsort` of the expert ids (a stable
        sort keeps the priority order) groups each expert's tokens in a contiguous run, and the slot is the
        position inside the run. Megablocks and vLLM's `moe_align_block_size` do that, since at $E = 256$ the
        one-hot matrix is wasteful.

        **`moe_layer`.** Routing, capacity, dispatch by advanced indexing, three batched matmuls, combine with
        `index_add`. The gate multiplies in the combine step, so the gradient flows to the gates there. Cost:
        $E \cdot C \cdot 6HF$ FLOPs for the experts, which is $c \cdot kT \cdot 6HF$: a capacity factor of 1.25
        pays 25% more expert FLOPs than the tokens need, spent on zero padding. With $k$ small the router
        ($2HE$ per token) is negligible; the two copies (dispatch, combine) move $2kTH$ values, and on a
        multi-GPU system that traffic crosses the network twice (`p02.expert_parallel`).

        **The usual mistakes, and why they are wrong**:
        - *Ignoring `normalize`* (renormalising always, or never): Mixtral renormalises, Qwen1.5-MoE and Switch do
          not, and the layer output differs by a per-token factor.
        - *Softmax over the wrong axis* (`dim=0`, over tokens): every shape is right, every value wrong.
        - *Sigmoid scores divided by the sum of all $E$ sigmoids*: it looks like a softmax normaliser.
        - *Token-major priority* (`experts.reshape(-1)`): token 0's second choice beats token 5's first choice. A
          legitimate rule, but not the one stated, so the kept set differs.
        - *Off by one*: slots starting at 1 (no `- 1`), or `<=` capacity, which keeps $C+1$ tokens.
        - *Floor instead of ceil* for $C$: one slot short whenever $c\,Tk/E$ is not an integer.
        - *Dropless read as a factor of 1*: `capacity_factor=None` means the busiest expert's load, not
          $\lceil Tk/E \rceil$, which drops choices as soon as the router is unbalanced.
        - *Dropped choices not filtered*: slot $-1$ indexes the last slot, so a dropped token overwrites a kept one.
        - *Detached gates*: the forward pass is exact, but `router_weight` gets no gradient, so the router never
          learns. Only a gradient check sees it.

        **What production systems do.**
        - *DeepSpeed-MoE, GShard, Switch, Tutel* use the capacity scheme of this lesson: static `(E, C, H)` buffers
          and an all-to-all of fixed size. Tutel adapts $C$ per step to the observed load; DeepSpeed exposes
          `capacity_factor`, `eval_capacity_factor` and `drop_tokens`.
        - *Megablocks* (Gale et al., 2022) is **dropless**: it sorts the tokens by expert and runs the experts as one
          block-sparse matrix multiply whose blocks follow the actual loads. No padding, no drops. Recent open
          MoE models (Mixtral, Qwen3-MoE, DeepSeek-V3) run dropless in Hugging Face and vLLM, and DeepSeek-V3 reports
          dropping no tokens in training either, relying on a balance loss or bias (next lesson) instead.
        - *vLLM's `fused_moe`* (inference) never drops: `moe_align_block_size` sorts the (token, choice) pairs by
          expert and pads each expert's run to the GEMM tile size. Then one Triton kernel computes every expert's
          GEMM on its own rows and multiplies by the gates in the epilogue (`p03.moe_grouped_gemm`).
        - *Hugging Face's eager `MixtralExperts`* loops over the experts that received tokens, gathers their tokens
          with `torch.where`, and `index_add_`s the gated results. That is the dropless version of your combine
          step, one expert at a time.
    """)
    lesson.mistakes()
    return lesson
