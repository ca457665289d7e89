"""Source of 01_Hardware_Math_Systems/10_Collectives_Cost.ipynb (build with `python -m llm_algo build p01.collectives_cost`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.collectives_cost",
        path="01_Hardware_Math_Systems/10_Collectives_Cost.ipynb",
        title_en="Communication cost models",
        title_zh="集合通信的代价模型",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.training_memory"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - α-β 模型：发送 $n$ 字节的一条消息耗时 $\alpha + n\beta$，$\alpha$ 是延迟 (latency)，$\beta$ 是每字节时间（带宽的倒数）。
        - 环形 (ring) all-reduce = reduce-scatter + all-gather，共 $2(p-1)$ 步，每步发 $n/p$ 字节：
          $T = 2(p-1)\alpha + 2\frac{p-1}{p} n \beta$，带宽项与 $p$ 几乎无关（带宽最优）。
        - 树形 (tree) all-reduce（先归约再广播）：$T = 2\lceil \log_2 p\rceil(\alpha + n\beta)$，延迟项小，适合小消息。
        - reduce-scatter、all-gather、all-to-all 各 $(p-1)\alpha + \frac{p-1}{p} n\beta$：ZeRO-2/3、FSDP、MoE 专家并行的通信都是它们。
        - nccl-tests 的 busbw = algbw × $2(p-1)/p$ 正是为了把 all-reduce 的带宽项换算回链路带宽。
        - 用 gloo 在 2–4 个进程里手写环形 all-reduce，逐条数消息和字节，与模型对照。
        {易错点}

        Data-parallel training all-reduces every gradient every step. For Llama-3-8B in bf16 that is 16 GB per step;
        on 8 GPUs joined by NVLink at 450 GB/s per direction (H100 SXM, NVIDIA datasheet: 900 GB/s bidirectional) a
        ring all-reduce moves $2 \cdot \frac{7}{8} \cdot 16 = 28$ GB through each GPU's link, 62 ms at best. Across
        nodes over 400 Gb/s InfiniBand (50 GB/s) the same bytes take 0.56 s. Whether that hides behind the backward
        pass, whether ZeRO-3's extra all-gathers are affordable, and which algorithm NCCL should pick for a 4 KB
        message or a 1 GB one, all follow from a two-parameter model.

        **You will implement** the α-β cost of ring and tree all-reduce, reduce-scatter, all-gather and all-to-all,
        and a ring all-reduce out of point-to-point sends and receives. **Graded against** step-by-step simulations
        of each algorithm, the message and byte counts of a real `torch.distributed` run on the `gloo` backend in 2, 3
        and 4 processes that the check spawns (and always cleans up), and `dist.all_reduce` for the result.
    """
    )
    lesson.md(r"""
        ## 1. The α-β model and the ring

        Sending a message of $n$ bytes between two processes takes $\alpha + n\beta$ (Hockney, 1994): $\alpha$ is the
        fixed cost (software, synchronisation, a few µs on NVLink, more across a network), $\beta = 1/\text{bandwidth}$.
        With $p$ processes each holding a tensor of $n$ bytes:

        **Ring reduce-scatter.** Cut the tensor into $p$ chunks of $n/p$. In step $s = 0, \dots, p-2$, rank $r$ sends
        chunk $(r - s) \bmod p$ to rank $r+1$ and adds the chunk it receives from rank $r-1$ into its own copy of
        chunk $(r - s - 1) \bmod p$. After $p - 1$ steps rank $r$ holds the full sum of chunk $(r + 1) \bmod p$.
        All ranks send at once, so a step costs one message: $T_{RS} = (p-1)(\alpha + \tfrac{n}{p}\beta)$.

        **Ring all-gather.** The same ring, $p-1$ more steps, each forwarding the completed chunk it last received
        instead of adding: $T_{AG} = (p-1)(\alpha + \tfrac{n}{p}\beta)$.

        **Ring all-reduce** = reduce-scatter + all-gather:

        $$
        T_{\text{ring}} = 2(p-1)\,\alpha + 2\,\frac{p-1}{p}\, n\,\beta .
        $$

        The bandwidth term tends to $2n\beta$ whatever $p$ is: each byte crosses each link about twice, which is the
        lower bound (Patarasuk and Yuan, 2009). The latency term grows linearly with $p$.

        **Tree all-reduce** (binomial tree: reduce to a root, then broadcast back) sends whole messages along
        $\lceil \log_2 p \rceil$ levels each way: $T_{\text{tree}} = 2\lceil\log_2 p\rceil(\alpha + n\beta)$. Fewer
        latencies, more bytes: trees win for small messages on many ranks, rings for large ones. NCCL uses both (its
        double binary trees pipeline the message to recover the bandwidth) and picks by size.

        **All-to-all** (MoE expert parallelism, `p01.moe_math`), with $n$ the bytes each rank holds, $n/p$ destined
        to each rank, sent in $p-1$ pairwise exchanges: $T = (p-1)(\alpha + \tfrac{n}{p}\beta)$.

        With $p = 1$ there is nothing to send: $T = 0$.
    """)
    lesson.setup(r"""
        import math
        import datetime

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
    """)
    lesson.exercise(
        "collective_time",
        r'''
        def collective_time(collective: str, algorithm: str, world_size: int, nbytes: float, alpha: float,
                            beta: float) -> float:
            """alpha-beta time (s) of one collective over world_size ranks; nbytes = the tensor each rank holds.

            (collective, algorithm): ("all_reduce", "ring"), ("all_reduce", "tree"), ("reduce_scatter", "ring"),
            ("all_gather", "ring") (nbytes = the full gathered tensor), ("all_to_all", "pairwise").
            ValueError for another pair, world_size < 1, or negative nbytes, alpha or beta."""
            # TODO: refuse what the model does not cover
            # TODO: the formulas of section 1 (they give 0 for one rank)
            ### BEGIN SOLUTION
            known = {("all_reduce", "ring"), ("all_reduce", "tree"), ("reduce_scatter", "ring"),
                     ("all_gather", "ring"), ("all_to_all", "pairwise")}
            if (collective, algorithm) not in known:
                raise ValueError(f"no cost model for {collective!r} with {algorithm!r}")
            if world_size < 1 or nbytes < 0 or alpha < 0 or beta < 0:
                raise ValueError("need world_size >= 1 and non-negative nbytes, alpha, beta")
            p = world_size  # one rank: p - 1 = 0 steps and ceil(log2 1) = 0 levels, so every formula gives 0
            if algorithm == "tree":
                return 2 * math.ceil(math.log2(p)) * (alpha + nbytes * beta)  # reduce up, broadcast down
            one_pass = (p - 1) * (alpha + nbytes / p * beta)  # p - 1 steps of one chunk each
            return 2 * one_pass if collective == "all_reduce" else one_pass
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Ring or tree? Time against message size, 64 ranks

        With $\alpha = 5$ µs and 50 GB/s ($\beta = 2 \cdot 10^{-11}$ s/B, 400 Gb/s InfiniBand), the tree's
        $2 \cdot 6 = 12$ latencies beat the ring's $126$ below about 3 MB; above, the ring's near-$2n\beta$ wins
        by the factor $\log_2 p \cdot p / (p-1) \approx 6$.
    """)
    lesson.code(r"""
        sizes = [2**k for k in range(10, 31)]
        alpha, beta, p = 5e-6, 1 / 50e9, 64
        try:
            ring = [collective_time("all_reduce", "ring", p, n, alpha, beta) for n in sizes]
            tree = [collective_time("all_reduce", "tree", p, n, alpha, beta) for n in sizes]
            who = "yours"
        except NotImplementedError:
            ring = [2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta for n in sizes]
            tree = [2 * math.ceil(math.log2(p)) * (alpha + n * beta) for n in sizes]
            who = "formula"
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        ax.loglog(sizes, [t * 1e3 for t in ring], label="ring all-reduce")
        ax.loglog(sizes, [t * 1e3 for t in tree], label="tree all-reduce")
        ax.set_xlabel("message size per rank (bytes)"); ax.set_ylabel("time (ms)")
        ax.set_title(f"alpha-beta model, p={p}, alpha=5 us, 50 GB/s ({who})"); ax.legend()
        plt.tight_layout(); plt.show()
        cross = next((n for n, r, t in zip(sizes, ring, tree) if r < t), None)
        print(f"ring is faster from {cross:,} bytes on")
    """)
    lesson.md(r"""
        ## 2. Exercise `ring_all_reduce`, over real processes

        Now the algorithm itself, with `torch.distributed` point-to-point calls on the `gloo` backend (CPU, TCP). The
        check starts 2, 3 and 4 processes, calls your function in each with that rank's tensor, counts every
        message and byte you send, and compares the result with the sum of all ranks' tensors.

        Sum `tensor` over all ranks in place with the ring of section 1: split it into `world_size` chunks with
        `torch.tensor_split` (lengths need not divide evenly), run the $p - 1$ reduce-scatter steps and then the
        $p - 1$ all-gather steps, each step **one** message to rank $r+1$ and one from rank $r-1$. Send with
        `dist.isend` (non-blocking: every rank sends and receives at the same time, so a blocking send on every rank
        could wait forever) and receive with `dist.recv` into a fresh buffer; `wait()` on the send before the next
        step. With `world_size == 1` both loops are empty and no process group is needed. `dist.all_reduce` and the other
        collectives are the reference, so they are off limits.
    """)
    lesson.exercise(
        "ring_all_reduce",
        r'''
        def ring_all_reduce(tensor: torch.Tensor, rank: int, world_size: int) -> None:
            """Sum `tensor` (1-D) over all ranks, in place, by ring reduce-scatter then ring all-gather."""
            # TODO: chunks = torch.tensor_split(tensor, world_size) (views: writing them writes tensor)
            # TODO: reduce-scatter: p - 1 steps, send chunk (rank - s) % p, add the received one into (rank - s - 1) % p
            # TODO: all-gather: p - 1 steps, send chunk (rank - s + 1) % p, copy the received one into (rank - s) % p
            ### BEGIN SOLUTION
            chunks = torch.tensor_split(tensor, world_size)  # views into tensor
            right, left = (rank + 1) % world_size, (rank - 1) % world_size
            for step in range(world_size - 1):  # reduce-scatter
                send, receive = (rank - step) % world_size, (rank - step - 1) % world_size
                buffer = torch.empty_like(chunks[receive])
                request = dist.isend(chunks[send], right)  # a 1-D view: contiguous
                dist.recv(buffer, left)
                request.wait()
                chunks[receive].add_(buffer)
            for step in range(world_size - 1):  # all-gather: forward the completed chunks
                send, receive = (rank - step + 1) % world_size, (rank - step) % world_size
                buffer = torch.empty_like(chunks[receive])
                request = dist.isend(chunks[send], right)  # a 1-D view: contiguous
                dist.recv(buffer, left)
                request.wait()
                chunks[receive].copy_(buffer)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 3. Reading the solutions

        **`collective_time`.** One structure covers four collectives: $p - 1$ steps of one chunk of $n/p$, once
        (reduce-scatter, all-gather, all-to-all) or twice (all-reduce). The usual mistakes: *the
        all-reduce bandwidth term without its factor 2* (only the reduce-scatter half), *$\log_2 p$ not rounded up*
        (6 ranks need 3 levels, not 2.58), *$n$ taken as the chunk size* (a factor $p$), and *a cost for one rank*.
        nccl-tests reports `busbw = algbw * 2(p-1)/p` for all-reduce (its `PERFORMANCE.md`) precisely so that the
        number can be compared with the link bandwidth $1/\beta$: it is this model's bandwidth term, inverted.

        **`ring_all_reduce`.** The two loops differ in one index and one operation (`add_` or `copy_`). The mistakes:
        *stopping after the reduce-scatter* (each rank then holds one correct chunk), *adding in the all-gather*,
        *the received chunk written to the chunk just sent* (an index off by one), and *copying in the
        reduce-scatter*. Each rank sends $2(p-1)$ messages, and all ranks together send $2(p-1)\,n$ bytes: the
        counts the check measured. NCCL runs the same ring, but splits each chunk into slices so that receiving,
        reducing and sending overlap (pipelining), and runs several rings at once over different links (channels).
        In PyTorch DDP the gradients are all-reduced in 25 MB buckets as the backward pass produces them, to hide
        the time of the last formula behind computation; FSDP and ZeRO-3 use reduce-scatter for gradients and
        all-gather for parameters, whose sum is exactly one all-reduce's traffic.
    """)
    lesson.mistakes()
    return lesson
