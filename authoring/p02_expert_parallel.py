"""Source of 02_PyTorch_Algorithms/46_Expert_Parallel.ipynb (build with `python -m llm_algo build p02.expert_parallel`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.expert_parallel",
        path="02_PyTorch_Algorithms/46_Expert_Parallel.ipynb",
        title_en="Expert parallelism: all-to-all dispatch and combine",
        title_zh="专家并行：all-to-all 分发与合并",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p02.moe_router", "p02.collectives"],
    )
    lesson.title(
        intro=r"""
        DeepSeek-V3 has 256 routed experts per MoE layer, 37 B active parameters per token, and 671 B in all: no GPU
        holds one layer's experts. Its training run spread them with **64-way expert parallelism over 8 nodes**
        (DeepSeek-V3 technical report, 2024): each GPU keeps 4 experts of every MoE layer, and every token travels to
        the GPUs of the 8 experts its router picked, then comes back. Those two trips are **all-to-all** collectives
        (全交换), and their sizes change at every step because the router decides them.

        **You will implement** the exchange of token counts that must come before the all-to-all
        (`exchange_counts`), a differentiable all-to-all with uneven split sizes (`AllToAll`, `all_to_all`), and
        a whole expert-parallel MoE layer: route, dispatch, run the local experts, combine back in the original token
        order with the router weights (`ep_moe_layer`). **Graded against** your single-process MoE layer of
        `p02.moe_router` (or its reference solution) on the same tokens and weights, forward and gradients, and a
        float64 per-token loop; `dist.all_to_all_single` and its autograd version
        `torch.distributed.nn.functional.all_to_all_single` on the same data; and a log of every all-to-all each
        rank posts (the counts first, then the tokens with the right split sizes). The checks run 2 real gloo
        processes.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **专家并行 (expert parallelism, EP)**：$E$ 个专家按连续区间分到 $p$ 个 rank，每个 rank 持有 $E/p$ 个；token 留在原 rank 路由，再被送到所选专家所在的 rank。
        - **两次 all-to-all**：dispatch（分发）把 $(token, choice)$ 行发给专家所在 rank；combine（合并）把专家输出原路送回，再乘 gate 加回原 token。
        - **先交换计数**：每个 rank 只知道自己发多少，不知道要收多少；先用 `all_to_all_single` 交换每个专家的 token 数（$E$ 个整数），才能给不等长的 token 交换设置 `input_split_sizes` / `output_split_sizes`。
        - **排序**：把 $(token, choice)$ 按全局专家编号稳定排序，目的 rank 的行就连续排列；收到的行按「来源 rank，再本地专家」分段。
        - **反向传播**：all-to-all 的梯度是把 split sizes 对调的 all-to-all；用 `autograd.Function` 实现；router 的梯度只经过 gate。
        - **与单进程等价**：各 rank 的输出、输入梯度、本地专家梯度等于单进程 MoE 层的对应部分；router 梯度是各 rank 之和。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: tokens must travel to their experts

        A dense model splits its *data* across data-parallel ranks: rank $r$ owns tokens $x_r$ ($T_r \times H$) and a
        copy of every weight. An MoE layer's experts are too big to copy, so expert parallelism splits the
        *experts*: with $E$ experts on $p$ ranks, rank $j$ owns experts $[jE_\ell, (j+1)E_\ell)$, $E_\ell = E/p$.
        The router is small and replicated. One MoE layer then runs in five steps:

        1. **route** locally: `route_topk` of `p02.moe_router` gives every token $k$ experts and $k$ gates;
        2. **exchange counts**: how many rows rank $r$ will send to each expert, and so how many it receives;
        3. **dispatch**: all-to-all of the $T_r k$ token rows, each to the rank of its expert;
        4. **experts**: each rank runs its $E_\ell$ experts on what it received;
        5. **combine**: all-to-all of the results back, then $y_t = \sum_j g_{t,j}\,\mathrm{FFN}_{e_{t,j}}(x_t)$.

        **How many bytes?** Each token sends $k$ rows of $H$ values each way. For DeepSeek-V3 ($H = 7168$, $k = 8$, bf16)
        that is $8 \cdot 7168 \cdot 2 = 114{,}688$ bytes, 112 KiB per token, per layer, per direction; 4096 tokens
        per GPU make 470 MB (DeepSeek sends the dispatch in FP8, halving it). With uniform routing a fraction
        $(p-1)/p$ of it leaves the GPU. In the α-β model of `p01.collectives_cost`, an all-to-all of $n$ bytes per
        rank costs $(p-1)(\alpha + \frac{n}{p}\beta)$: with $p = 64$ and 50 GB/s of InfiniBand, about 9 ms per
        direction per layer for those 470 MB, against compute of the same order. That is why DeepSeek limits each token to 4 nodes,
        overlaps the all-to-all of one micro-batch with the compute of another (DualPipe), and wrote dedicated
        kernels (DeepEP). These numbers are derived with the model, not measured here; NCCL measurements on real
        GPUs are pending in this project.

        **Why counts first.** `dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes)` sends
        `input_split_sizes[j]` rows to rank $j$ and receives `output_split_sizes[j]` rows from rank $j$. Rank $r$ knows
        what it sends (its router decided), but not what it will receive: that was decided by the other ranks'
        routers. So the ranks first swap their per-expert counts with a small all-to-all of $E$ integers (equal
        splits of $E_\ell$), and only then can they allocate the receive buffer and post the real one. Megatron-Core's
        `MoEAlltoAllTokenDispatcher` does exactly this (its `preprocess` step); capacity-based systems (GShard,
        DeepSpeed-MoE) skip it by padding every expert to $C$ slots, paying in padding what they save in latency.
    """)
    lesson.md(r"""
        ## 2. The layout, with shapes

        Take rank $r$ with $T$ tokens, $k$ choices each, and flatten the choices: row $i = t k + j$ is choice $j$ of
        token $t$, with expert `experts.reshape(-1)[i]`.

        - **Sort** the $Tk$ rows by global expert id with a *stable* sort: `order = argsort(flat_experts)`. Since
          experts are sharded in contiguous ranges, the rows for rank 0 come first, then rank 1, and inside each
          rank the rows are grouped by expert. `token_of = order // k` says which token each sorted row is.
        - **Send counts**: `tokens_per_expert = bincount(flat_experts, minlength=E)` $(E,)$; the rows for rank $j$
          are `tokens_per_expert.view(p, E_l).sum(1)[j]`.
        - **Receive counts**: `exchange_counts` returns `received` $(p, E_\ell)$: `received[s, e]` rows arrive from
          rank $s$ for my local expert $e$. The dispatched tensor $(N, H)$, $N = \sum$ `received`, holds rank 0's
          rows (grouped by my local experts), then rank 1's, and so on. So the local expert of each received row is
          `arange(E_l).repeat(p).repeat_interleave(received.reshape(-1))`.
        - **Combine** is the same all-to-all with the two split lists swapped: the results come back in the sorted
          order of the dispatch, and `index_add(0, token_of, gate * result)` puts them into the token rows, where the
          gate of sorted row $i$ is `gates.reshape(-1)[order[i]]`.

        **The backward of an all-to-all.** All-to-all is a permutation of rows across ranks: row $i$ of rank $r$'s
        input becomes some row of rank $j$'s output. Its gradient sends each output row's gradient back to where
        the row came from, which is an all-to-all with `input_split_sizes` and `output_split_sizes` swapped. Autograd
        does not know about communication, so you write it as a `torch.autograd.Function`. Every rank must call it
        in the same order, forward and backward; they do, because every rank runs the same layer.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F

        route_topk, moe_layer = lesson.use("p02.moe_router", "route_topk", "moe_layer")
    """)
    lesson.md(r"""
        ## 3. Exercise `exchange_counts`

        `tokens_per_expert` $(E,)$ int64: how many rows this rank will send to each global expert. Return
        `received` $(p, E_\ell)$ int64, `received[s, e]` = rows rank $s$ sends to my local expert $e$, with one
        `dist.all_to_all_single` of equal splits (the counts for rank $j$'s experts are the $j$-th block of
        $E_\ell$ entries). Refuse a dtype other than int64 (TypeError: splits are integers, and NCCL moves them as
        such) and a 1-D length that `p` does not divide, or a tensor that is not 1-D (ValueError).
    """)
    lesson.exercise(
        "exchange_counts",
        r'''
        def exchange_counts(tokens_per_expert: torch.Tensor, group=None) -> torch.Tensor:
            """Swap per-expert token counts: returns (p, E_local) int64, row s = what rank s sends to my experts.

            tokens_per_expert: (E,) int64, rows this rank sends to each global expert; experts are sharded in
            contiguous blocks of E_local = E / p (rank j owns experts j*E_local ... (j+1)*E_local - 1)
            """
            # TODO: TypeError unless int64; ValueError unless 1-D with a length that the group size divides
            # TODO: one all_to_all_single with equal splits; view the result as (p, E_local)
            ### BEGIN SOLUTION
            size = dist.get_world_size(group)
            if tokens_per_expert.dtype != torch.int64:
                raise TypeError(f"counts must be int64, not {tokens_per_expert.dtype}")
            if tokens_per_expert.dim() != 1 or tokens_per_expert.numel() % size:
                raise ValueError(f"need (E,) counts with E divisible by {size} ranks, got {tuple(tokens_per_expert.shape)}")
            received = torch.empty_like(tokens_per_expert)  # (E,) = p blocks of E_local
            dist.all_to_all_single(received, tokens_per_expert.contiguous(), group=group)  # block j goes to rank j
            return received.view(size, -1)  # (p, E_local): block s came from rank s
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `AllToAll`: an all-to-all that autograd can go through

        `all_to_all(x, output_splits, input_splits, group)` sends rows `x[offset_j : offset_j + input_splits[j]]` to
        rank $j$ and returns the $\sum$ `output_splits` rows received, in rank order: the semantics of
        `dist.all_to_all_single` along dim 0 ($x$ may have more dimensions after the rows). `AllToAll.backward` is the
        same collective on the gradient with the splits swapped. Validate in `all_to_all`, before any message:
        both split lists have one entry per rank, none negative, and `input_splits` sums to `x.shape[0]`
        (ValueError). `torch.distributed.nn.functional.all_to_all_single` already does this; it is the checks'
        reference, so it is off limits.
    """)
    lesson.exercise(
        "all_to_all",
        r'''
        class AllToAll(torch.autograd.Function):
            """Differentiable all-to-all of rows with uneven split sizes."""

            @staticmethod
            def forward(ctx, x, output_splits, input_splits, group):
                # TODO: remember what backward needs; allocate (sum(output_splits), *x.shape[1:]); all_to_all_single
                ### BEGIN SOLUTION
                ctx.output_splits, ctx.input_splits, ctx.group = output_splits, input_splits, group
                out = x.new_empty((sum(output_splits), *x.shape[1:]))  # (N_out, ...)
                dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)
                return out
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_out):
                # TODO: the gradient of each received row goes back to its sender: the splits swapped
                ### BEGIN SOLUTION
                grad_in = grad_out.new_empty((sum(ctx.input_splits), *grad_out.shape[1:]))  # (N_in, ...)
                dist.all_to_all_single(
                    grad_in, grad_out.contiguous(), ctx.input_splits, ctx.output_splits, group=ctx.group
                )
                return grad_in, None, None, None
                ### END SOLUTION


        def all_to_all(x: torch.Tensor, output_splits, input_splits, group=None) -> torch.Tensor:
            """Rows x[...] to each rank by input_splits (p ints); returns the sum(output_splits) rows received."""
            # TODO: ValueError unless both split lists have p non-negative entries and input_splits sums to x.shape[0]
            # TODO: AllToAll.apply with the splits as lists of Python ints
            ### BEGIN SOLUTION
            size = dist.get_world_size(group)
            output_splits, input_splits = [int(s) for s in output_splits], [int(s) for s in input_splits]
            if len(output_splits) != size or len(input_splits) != size:
                raise ValueError(f"need {size} output and input split sizes, got {output_splits} and {input_splits}")
            if min(output_splits + input_splits) < 0 or sum(input_splits) != x.shape[0]:
                raise ValueError(f"input_splits {input_splits} must be >= 0 and sum to the {x.shape[0]} rows of x")
            return AllToAll.apply(x, output_splits, input_splits, group)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `ep_moe_layer`

        The whole layer on this rank's tokens `x` $(T, H)$, with the replicated `router_weight` $(E, H)$ and this
        rank's experts `w_gate`, `w_up` $(E_\ell, F, H)$ and `w_down` $(E_\ell, H, F)$ (the layout of
        `p02.moe_router`, sliced to experts $[rE_\ell, (r+1)E_\ell)$). Dropless and Mixtral-style: use `route_topk`
        (softmax, renormalised), which the setup cell took from `p02.moe_router`. Follow section 2: route, sort,
        count, `exchange_counts`, dispatch with `all_to_all`, one SwiGLU per local expert on its rows, combine with
        `all_to_all`, gates, `index_add`. Keep everything on `x.device` (the same code then runs on GPUs with NCCL).

        Refuse, before any message: `x` not 2-D, or an expert count that does not match (`w_gate.shape[0] * p !=
        E`) with a ValueError; weights of another dtype than `x` with a TypeError.
    """)
    lesson.exercise(
        "ep_moe_layer",
        r'''
        def ep_moe_layer(x: torch.Tensor, router_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                         w_down: torch.Tensor, top_k: int, group=None) -> torch.Tensor:
            """Expert-parallel, dropless, Mixtral-style MoE FFN on this rank's tokens.

            x: (T, H) this rank's tokens (T may differ between ranks); router_weight: (E, H), the same on every rank
            w_gate, w_up: (E_local, F, H); w_down: (E_local, H, F): global experts rank*E_local ... (rank+1)*E_local-1
            returns (T, H) in x's dtype: sum over the k choices of gate * expert(x_t)
            """
            # TODO: validate (ValueError: x not 2-D, E_local * p != E; TypeError: weights' dtype != x's)
            # TODO: route (route_topk of x @ router_weight.T); stable argsort of the flat expert ids; token_of
            # TODO: tokens_per_expert (bincount), exchange_counts, send and receive splits per rank
            # TODO: dispatch x[token_of] with all_to_all; the local expert of each received row
            # TODO: SwiGLU of each local expert on its rows
            # TODO: combine with all_to_all (splits swapped); multiply by the gates in sorted order; index_add per token
            ### BEGIN SOLUTION
            size = dist.get_world_size(group)
            E, E_local = router_weight.shape[0], w_gate.shape[0]
            if x.dim() != 2:
                raise ValueError(f"x must be (T, H) tokens, got {tuple(x.shape)}")
            if E_local * size != E:
                raise ValueError(f"{E_local} local experts on {size} ranks do not make the router's {E} experts")
            if any(w.dtype != x.dtype for w in (router_weight, w_gate, w_up, w_down)):
                raise TypeError("x and every weight must have the same dtype")
            T, H = x.shape
            gates, experts = route_topk(x @ router_weight.T, top_k)  # (T, k) each
            flat_experts = experts.reshape(-1)  # (T*k,): choice j of token t at row t*k + j
            order = torch.argsort(flat_experts, stable=True)  # (T*k,) grouped by expert, hence by rank
            token_of = order // top_k  # (T*k,) the token of each sorted row
            tokens_per_expert = torch.bincount(flat_experts, minlength=E)  # (E,)
            received = exchange_counts(tokens_per_expert, group)  # (p, E_local)
            send_splits = tokens_per_expert.view(size, E_local).sum(dim=1).tolist()  # rows to each rank
            recv_splits = received.sum(dim=1).tolist()  # rows from each rank
            dispatched = all_to_all(x[token_of], recv_splits, send_splits, group)  # (N, H): by source, then expert
            local_expert = torch.arange(E_local, device=x.device).repeat(size).repeat_interleave(received.reshape(-1))
            expert_out = torch.zeros_like(dispatched)  # (N, H)
            for e in range(E_local):
                rows = (local_expert == e).nonzero().squeeze(1)  # (n_e,)
                tokens = dispatched[rows]  # (n_e, H)
                hidden = F.silu(tokens @ w_gate[e].T) * (tokens @ w_up[e].T)  # (n_e, F)
                expert_out = expert_out.index_copy(0, rows, hidden @ w_down[e].T)  # (N, H)
            combined = all_to_all(expert_out, send_splits, recv_splits, group)  # (T*k, H) in sorted order
            weighted = combined * gates.reshape(-1)[order].unsqueeze(1).to(x.dtype)  # (T*k, H)
            return x.new_zeros(T, H).index_add(0, token_of, weighted)  # (T, H)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Who sends what: the counts of one step

        Two processes, 8 experts (4 per rank), $k = 2$, 48 tokens on rank 0 and 32 on rank 1, and a router with a
        bias towards the first experts (as an untrained or unbalanced router has). The cell runs your
        `route_topk` and `exchange_counts` in both ranks and draws what each expert receives from each rank. The
        bars are uneven, and they change at every step of training: the reason for the count exchange, and the
        reason the all-to-all of expert parallelism cannot have static shapes without padding or dropping. With the
        reference solutions and this seed, rank 0 receives 111 rows and rank 1 only 49: the rank that holds the
        popular experts does more than twice the expert work, and everyone waits for it at the combine. Keeping the
        router balanced is the subject of `p02.moe_balance`; DeepSeek's EPLB instead replicates the hot experts.
    """)
    lesson.code(r"""
        from llm_algo.distributed import run_ranks

        def counts_of_one_step(num_experts, top_k, hidden, tokens_on_rank, seed):
            '''Runs in every rank: route this rank's tokens, exchange the counts; (sent per expert, received).'''
            rank = dist.get_rank()
            torch.manual_seed(seed)  # the same router on every rank
            router = torch.randn(num_experts, hidden) + torch.linspace(1.0, -1.0, num_experts)[:, None]
            torch.manual_seed(seed + 1 + rank)  # different tokens on every rank
            x = torch.randn(tokens_on_rank[rank], hidden) + 0.15  # a shared direction: the router's bias shows
            try:
                _, experts = route_topk(x @ router.T, top_k)
                sent = torch.bincount(experts.reshape(-1), minlength=num_experts)
                return sent, exchange_counts(sent)
            except NotImplementedError:
                return None

        results = run_ranks(counts_of_one_step, 2, args=(8, 2, 16, [48, 32], 0), deadline=20)
        values = [r.value for r in results if r.ok]
        if len(values) < 2 or None in values:
            print("exchange_counts is not written yet (or it failed: run its check cell)")
        else:
            sent = torch.stack([v[0] for v in values])  # (source rank, global expert)
            fig, ax = plt.subplots(figsize=(6.5, 3.2))
            bottom = torch.zeros(8)
            for source in range(2):
                ax.bar(range(8), sent[source], bottom=bottom, label=f"from rank {source}")
                bottom += sent[source]
            ax.axvline(3.5, color="gray", linestyle="--")
            top = float(bottom.max())
            ax.set_ylim(0, top * 1.25)
            ax.text(1.5, top * 1.1, "experts of rank 0", ha="center"); ax.text(5.5, top * 1.1, "experts of rank 1", ha="center")
            ax.set_xlabel("global expert"); ax.set_ylabel("rows received"); ax.legend(loc="center right")
            ax.set_title("one dispatch: 80 tokens x 2 choices over 8 experts on 2 ranks")
            plt.tight_layout(); plt.show()
            for rank, (_, received) in enumerate(values):
                print(f"rank {rank} receives {int(received.sum())} rows (per source rank x local expert):", received.tolist())
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`exchange_counts`.** An all-to-all without split sizes cuts its input into $p$ equal blocks: block $j$ (the
        counts for rank $j$'s experts) goes to rank $j$, and block $s$ of the output came from rank $s$. So the
        view as $(p, E_\ell)$ is "source rank × my local expert". It is $E$ integers, a few hundred bytes: pure
        latency, paid once per layer per step, and it forces a device-to-host copy (`.tolist()`) because split sizes
        are Python integers. Megatron-Core pays the same sync; DeepEP's low-latency kernels avoid it by sizing their
        buffers for a maximum number of tokens per rank. The usual mistakes: *no exchange at all* (using your own counts as what you
        receive: the second all-to-all then receives the wrong number of rows, and gloo or NCCL fails or hangs),
        and *the transposed view* (expert-major instead of source-major).

        **`AllToAll`.** The forward saves only the split lists: the backward needs no tensor. `x.contiguous()`
        because the collective sends storage as it is. The backward returns one gradient per forward input, `None`
        for the splits and the group. The mistakes: *the same splits in the backward* (each rank expects the rows
        it sent but gets the rows it received: a size mismatch, or wrong gradients when the two happen to match),
        and *no communication in the backward* (the gradient stays on the rank that computed it).

        **`ep_moe_layer`.** The stable sort makes the rows for each rank contiguous, so one all-to-all with split
        sizes moves them; `token_of` and `order` remember the permutation so that the combine can undo it without a
        second sort. The local-expert index of the received rows follows from the counts alone: no expert ids
        travel. The gates never leave the rank: they multiply the results after the combine, so the router's
        gradient is computed locally, and the gradient of `router_weight` on each rank is the part of the total
        that its own tokens contribute (data parallelism then all-reduces it, as `p02.ddp` does). The mistakes:
        *the gates in unsorted order* (each result multiplied by another choice's gate), *the local expert ids
        grouped the wrong way* (`repeat_interleave` where `repeat` belongs: rows run through the wrong expert),
        *splits not swapped for the combine*, and *detached gates* (exact forward, no router gradient).

        **Cost.** Per rank and layer: two all-to-alls of $T k H$ values (plus the counts), $T k \cdot 6HF$ expert
        FLOPs (dropless: no padding), a sort of $Tk$ ids. The per-expert Python loop is fine for $E_\ell = 2$; with
        $E_\ell = 32$ production code runs one grouped GEMM over all local experts instead (`p03.moe_grouped_gemm`).

        **What production systems do.**
        - *Megatron-Core* (`MoEAlltoAllTokenDispatcher`): the same permute → count exchange → all-to-all →
          local regroup (`sort_chunks_by_idxs` makes each expert's rows contiguous across source ranks, so a grouped
          GEMM can run on them) → all-to-all back → unpermute with the probabilities. Expert parallelism is combined
          with tensor parallelism of the experts and with data parallelism of everything else.
        - *DeepSpeed-MoE, GShard, Tutel*: fixed capacity $C$ per expert, so the all-to-all has static shapes
          $(E, C, H)$ and needs no count exchange, at the price of padding and dropped tokens (`p02.moe_router`).
        - *DeepEP* (DeepSeek, 2025): custom dispatch/combine kernels over NVLink and RDMA; a high-throughput mode
          for training and prefill and a low-latency mode for decoding that overlaps communication with compute
          without occupying GPU cores.
        - *vLLM and SGLang* serve large MoE models with expert parallelism across GPUs (and DeepEP kernels), and
          rebalance hot experts by replicating them (DeepSeek's EPLB).
    """)
    lesson.mistakes()
    return lesson
