"""Source of 04_CUDA_Systems/10_Ring_Allreduce.ipynb (build with `python -m llm_algo build p04.ring_allreduce`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.ring_allreduce",
        path="04_CUDA_Systems/10_Ring_Allreduce.ipynb",
        title_en="Ring all-reduce in depth: slices, pipelining and bus bandwidth",
        title_zh="深入环形 all-reduce：切片、流水线与总线带宽",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p01.collectives_cost", "p02.collectives"],
    )
    lesson.title(
        intro=r"""
        In `p02.collectives` you built a ring all-reduce from `isend` and `recv`: each of its $2(p-1)$ steps sends one
        chunk, waits for the whole incoming chunk, and only then adds it. Real libraries do not wait. NCCL cuts every
        chunk into *slices* and adds slice $k$ while slice $k+1$ is still on the wire, so the reduction hides behind
        the transfer; and it reports its speed as **bus bandwidth**, a number you can put next to the link's
        datasheet. This lesson is about that gap between a correct ring and a fast one.

        **You will implement** the cost model of a sliced ring (the α-β model plus the time of the additions, and the
        pipeline formula that decides how many slices pay off), and a sliced, pipelined ring all-reduce with
        non-blocking `isend`/`irecv`, in place, on any tensor length and any process group. **Graded against** a
        step-by-step event simulation of the schedule (for the model) and `dist.all_reduce` on the same data in
        real gloo processes, in groups of 2, 3 and 4 ranks, with every message each rank sends counted and
        compared with the model's message count. A demo measures bus bandwidth against message size for your ring and
        for gloo's own all-reduce.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **环形 all-reduce** = reduce-scatter（$p-1$ 步，每步发一块 $n/p$ 并累加）+ all-gather（$p-1$ 步，只拷贝）；两段可写成同一个循环：第 $s$ 步发送块 $(r-s) \bmod p$、接收到块 $(r-s-1) \bmod p$，前 $p-1$ 步累加，后 $p-1$ 步覆盖。
        - **α-β 模型**：$T = 2(p-1)\alpha + 2\frac{p-1}{p}\frac{n}{B}$；带宽项与 $p$ 几乎无关，所以环是带宽最优的。
        - **总线带宽 (bus bandwidth)**：nccl-tests 的定义 $\text{busbw} = \frac{n}{T}\cdot\frac{2(p-1)}{p}$，可直接与链路带宽比较；$\alpha$ 使小消息的 busbw 很低，达到一半 $B$ 的消息大小是 $n_{1/2} = p\,\alpha B$。
        - **切片流水线 (pipelining)**：每块切成 $S$ 片，先挂起全部 `irecv`，第 $k$ 片到达就累加，同时第 $k+1$ 片在传输；每步耗时 $S\max(t,c)+\min(t,c)$，其中 $t=\alpha+\frac{n}{pSB}$，$c=\frac{n}{pSR}$（$R$ 为累加带宽）。
        - **切片数的权衡**：切得越细越能把累加藏在传输后面，但每片多付一次 $\alpha$；最优 $S$ 由模型给出。
        - **非阻塞通信**：每个 rank 同时向右发、从左收；全都先阻塞 `send` 会死锁（NCCL 上必然，gloo 上小消息碰巧不会）。NCCL 上应把同一步的收发放进 `batch_isend_irecv`（ncclGroupStart/End）。
        - **不能整除**：`tensor_split` 让块长相差至多 1，切片再 `tensor_split`；空切片两端都跳过（两端算出的长度相同）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: a correct ring is not yet a fast one

        Data-parallel training all-reduces every gradient every step: 16 GB of bf16 gradients for an 8B-parameter
        model. On 8 GPUs joined by NVLink at 450 GB/s per direction (NVIDIA's H100/H200 datasheet gives 900 GB/s
        bidirectional), the ring moves $2\cdot\frac{7}{8}\cdot 16 = 28$ GB through each GPU's link: 62 ms at the
        least. Two things stand between a textbook ring and that number:

        1. **The additions.** In the reduce-scatter half every received byte is added into the local chunk. A GPU adds
           at its memory bandwidth (it reads two operands and writes one: about 4.8 TB/s / 3 on an H200), fast but not
           free; a CPU adds at a few GB/s, slower than the network. If a rank first waits for a whole chunk and then
           adds it, the additions sit on the critical path of every step.
        2. **Latency.** Each of the $2(p-1)$ steps pays a start-up cost $\alpha$ (a few microseconds on NVLink, more
           across nodes). For small messages that is all you pay: this is why DDP gathers gradients into 25 MB buckets
           before all-reducing them.

        **nccl-tests' bus bandwidth.** An all-reduce of $n$ bytes in time $T$ has an *algorithm bandwidth* $n/T$, which
        depends on $p$ through the algorithm. nccl-tests (`doc/PERFORMANCE.md` in NVIDIA/nccl-tests) multiplies it
        by the factor of bytes each link must carry, $2(p-1)/p$ for an all-reduce:

        $$ \text{busbw} = \frac{n}{T} \cdot \frac{2(p-1)}{p}. $$

        For an ideal ring with $\alpha = 0$ this is exactly the link bandwidth $B$, whatever $p$: the number you
        compare with the hardware. With latency,

        $$
        T = 2(p-1)\,\alpha + 2\frac{p-1}{p}\frac{n}{B}
        \quad\Longrightarrow\quad
        \text{busbw} = B \cdot \frac{n}{n + p\,\alpha B},
        $$

        so the bus bandwidth reaches half of $B$ at $n_{1/2} = p\,\alpha B$: for $p = 8$, $\alpha = 5\,\mu s$,
        $B = 450$ GB/s that is 18 MB. Below it an all-reduce is latency-bound.

        ## 2. Slices and the pipeline

        Let $m = n/p$ be a chunk's bytes, cut into $S$ slices of $m/S$ bytes. One slice takes
        $t = \alpha + \frac{m}{S B}$ to arrive and $c = \frac{m}{S R}$ to add, with $R$ the bytes per second of the
        addition (counted in bytes of the incoming slice). Post all $S$ receives at once; slices arrive at
        $t, 2t, \dots, St$; slice $k$ is added as soon as it has arrived and slice $k-1$ is added:

        $$
        \text{done}_k = \max(k\,t,\ \text{done}_{k-1}) + c
        \quad\Longrightarrow\quad
        \text{done}_S = S \max(t, c) + \min(t, c).
        $$

        A reduce-scatter step therefore takes $S\max(t,c) + \min(t,c)$, an all-gather step (no addition) $S\,t$, and

        $$
        T(S) = (p-1)\Big[S\max(t,c) + \min(t,c)\Big] + (p-1)\,S\,t .
        $$

        With $S = 1$ and $R = \infty$ this is the α-β time of section 1. More slices hide all but one slice's
        addition ($\min(t,c)$ shrinks with $S$), but each slice pays $\alpha$ again: there is a best $S$, which
        you compute. (Here every step waits for its last slice before the next step starts. NCCL goes further: the
        chunk a rank sends at step $s+1$ is the one it reduced at step $s$, so it forwards each slice the moment it is
        reduced, and the whole ring becomes one pipeline of $2(p-1) + S - 1$ slice times.)
    """)
    lesson.setup(r"""
        import math
        import time

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
    """)
    lesson.md(r"""
        ## 3. Exercise `ring_model`

        - `ring_allreduce_seconds(nbytes, world_size, alpha, bandwidth, reduce_bandwidth=math.inf, slices=1)`: $T(S)$
          of section 2 (0 for one rank).
        - `bus_bandwidth(nbytes, world_size, seconds)`: nccl-tests' busbw in bytes per second.
        - `best_slices(nbytes, world_size, alpha, bandwidth, reduce_bandwidth, max_slices=64)`: the $S$ in
          $1..\text{max\_slices}$ with the smallest $T(S)$ (the smallest such $S$ on a tie).
        - `half_bandwidth_bytes(world_size, alpha, bandwidth)`: $n_{1/2}$, where an unsliced ring without addition
          cost reaches half of $B$.

        Refuse with `ValueError`: `world_size` < 1 (or not an int), `slices` or `max_slices` < 1 (or not an int),
        negative `nbytes` or `alpha`, and a `bandwidth` or `reduce_bandwidth` that is not positive. Return floats
        (ints for the slice count).
    """)
    lesson.exercise(
        "ring_model",
        r'''
        def _check_world_size(world_size):
            if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
                raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")


        def _check_link(alpha, bandwidth):
            if alpha < 0 or not bandwidth > 0:
                raise ValueError(f"need alpha >= 0 and bandwidth > 0, got alpha={alpha!r}, bandwidth={bandwidth!r}")


        def ring_allreduce_seconds(nbytes: float, world_size: int, alpha: float, bandwidth: float,
                                   reduce_bandwidth: float = math.inf, slices: int = 1) -> float:
            """Seconds of a sliced ring all-reduce of `nbytes` over `world_size` ranks (section 2)."""
            _check_world_size(world_size)
            _check_link(alpha, bandwidth)
            # TODO: ValueError for nbytes < 0, reduce_bandwidth <= 0, slices not an int >= 1
            # TODO: 0.0 for one rank; else t and c of one slice, (p - 1) reduce-scatter steps and (p - 1) all-gather steps
            ### BEGIN SOLUTION
            if nbytes < 0 or not reduce_bandwidth > 0:
                raise ValueError(f"need nbytes >= 0 and reduce_bandwidth > 0, got {nbytes!r}, {reduce_bandwidth!r}")
            if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
                raise ValueError(f"slices must be an int >= 1, got {slices!r}")
            p = world_size
            if p == 1:
                return 0.0
            slice_bytes = nbytes / p / slices
            transfer = alpha + slice_bytes / bandwidth  # t: one slice on the wire
            add = slice_bytes / reduce_bandwidth  # c: one slice added into the local chunk
            reduce_scatter_step = slices * max(transfer, add) + min(transfer, add)
            all_gather_step = slices * transfer
            return float((p - 1) * (reduce_scatter_step + all_gather_step))
            ### END SOLUTION


        def bus_bandwidth(nbytes: float, world_size: int, seconds: float) -> float:
            """nccl-tests' bus bandwidth of an all-reduce of `nbytes` that took `seconds` (bytes per second)."""
            # TODO: ValueError unless seconds > 0 (and the usual world_size check); algbw times 2(p - 1)/p
            ### BEGIN SOLUTION
            _check_world_size(world_size)
            if not seconds > 0 or nbytes < 0:
                raise ValueError(f"need seconds > 0 and nbytes >= 0, got {seconds!r}, {nbytes!r}")
            return float(nbytes / seconds * 2 * (world_size - 1) / world_size)
            ### END SOLUTION


        def best_slices(nbytes: float, world_size: int, alpha: float, bandwidth: float, reduce_bandwidth: float,
                        max_slices: int = 64) -> int:
            """The slice count in 1..max_slices with the smallest ring_allreduce_seconds (smallest on a tie)."""
            # TODO
            ### BEGIN SOLUTION
            if isinstance(max_slices, bool) or not isinstance(max_slices, int) or max_slices < 1:
                raise ValueError(f"max_slices must be an int >= 1, got {max_slices!r}")
            times = [ring_allreduce_seconds(nbytes, world_size, alpha, bandwidth, reduce_bandwidth, s)
                     for s in range(1, max_slices + 1)]
            return 1 + times.index(min(times))  # index() finds the first, so the smallest S on a tie
            ### END SOLUTION


        def half_bandwidth_bytes(world_size: int, alpha: float, bandwidth: float) -> float:
            """Message size where an unsliced ring (no addition cost) reaches half of `bandwidth` in bus bandwidth."""
            # TODO: from busbw = B n / (n + p alpha B)
            ### BEGIN SOLUTION
            _check_world_size(world_size)
            _check_link(alpha, bandwidth)
            return float(world_size * alpha * bandwidth)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # What the model says for 8 H200s on NVLink (alpha 5 us, 450 GB/s per direction, additions at 1.6 TB/s of
        # incoming bytes) and for 8 CPU ranks adding at 5 GB/s over a 12.5 GB/s network (alpha 30 us).
        sizes = [2.0**k for k in range(12, 33)]
        fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
        for ax, (name, alpha, bandwidth, reduce_bw) in zip(axes, [("8 x H200, NVLink", 5e-6, 450e9, 1.6e12),
                                                                  ("8 CPU ranks, 100 Gb/s Ethernet", 30e-6, 12.5e9, 5e9)]):
            for slices in (1, 4, "best"):
                bus = []
                for n in sizes:
                    s = best_slices(n, 8, alpha, bandwidth, reduce_bw) if slices == "best" else slices
                    bus.append(bus_bandwidth(n, 8, ring_allreduce_seconds(n, 8, alpha, bandwidth, reduce_bw, s)) / 1e9)
                ax.semilogx(sizes, bus, label=f"S = {slices}")
            ax.axhline(bandwidth / 1e9, color="gray", ls=":", label="link bandwidth B")
            ax.axvline(half_bandwidth_bytes(8, alpha, bandwidth), color="gray", ls="--", label="$n_{1/2} = p\\alpha B$")
            ax.set_title(name); ax.set_xlabel("message size (bytes)"); ax.set_ylabel("bus bandwidth (GB/s)")
            ax.legend(fontsize=8)
        plt.tight_layout()
        plt.show()
        for n in (1e6, 64e6, 1e9):
            print(f"{n / 1e6:7.0f} MB on 8 CPU ranks: best S = {best_slices(n, 8, 30e-6, 12.5e9, 5e9)}, "
                  f"{ring_allreduce_seconds(n, 8, 30e-6, 12.5e9, 5e9) * 1e3:8.2f} ms unsliced, "
                  f"{ring_allreduce_seconds(n, 8, 30e-6, 12.5e9, 5e9, best_slices(n, 8, 30e-6, 12.5e9, 5e9)) * 1e3:8.2f} ms sliced")
    """)
    lesson.md(r"""
        Read the plateaus with the formula. For large messages $\alpha$ vanishes and a reduce-scatter step costs
        $m/B + m/R$ unsliced but only $\max(m/B, m/R)$ with many slices. On the GPUs (wire 450 GB/s, additions
        1.6 TB/s) the unsliced ring therefore tops out at $2/(2/B + 1/R) \approx 394$ GB/s of bus bandwidth, while
        slicing recovers the full 450 GB/s on gigabyte messages; up to about 100 MB an extra slice costs more
        $\alpha$ than it hides, so the best $S$ is 1 there and the two curves coincide. On the CPU ranks the addition (5 GB/s) is slower than the wire (12.5 GB/s): the ceiling becomes
        $2/(1/B + 1/R) \approx 7.1$ GB/s with slices against 5.6 GB/s without, and the printed best $S$ grows with
        the message (5 slices at 64 MB, 18 at 1 GB). That is the schedule you now write.

        ## 4. Exercise `ring_allreduce`

        In place, the sum over the ranks of `group`, for any contiguous tensor. The two halves are one loop of
        $2(p-1)$ steps: at step $s$ rank $r$ sends chunk $(r - s) \bmod p$ to the right and receives chunk
        $(r - s - 1) \bmod p$ from the left (check: at the first all-gather step, $s = p - 1$, rank $r$ sends chunk
        $(r+1) \bmod p$, the one its reduce-scatter completed). In the first $p-1$ steps the received slices are
        **added**; in the last $p-1$ they **overwrite**.

        In each step: `tensor_split` both chunks into `slices` pieces; `isend` every non-empty outgoing slice; post an
        `irecv` for every non-empty incoming slice (into a fresh buffer in the reduce-scatter, straight into the chunk
        in the all-gather); then wait for the receives **one at a time, in order**, adding each slice as soon as it is
        there; finally wait for the sends (their buffers become the next step's receive targets). Empty slices (a
        chunk shorter than `slices`, or $n < p$) send nothing on both sides: both ends compute the same lengths.

        Refuse before the first message: a bool tensor (`TypeError`), a non-contiguous tensor or `slices` that is not
        an int $\ge 1$ (`ValueError`). Return `tensor`. `dist.all_reduce`, `reduce_scatter` and `all_gather` (every
        spelling) are forbidden in the ranks: they are the checks' reference.
    """)
    lesson.exercise(
        "ring_allreduce",
        r'''
        def ring_allreduce(tensor: torch.Tensor, group=None, slices: int = 1) -> torch.Tensor:
            """Sliced, pipelined ring all-reduce (sum) of `tensor` over the ranks of `group`, in place.

            tensor: contiguous, any shape, any numeric dtype; n = tensor.numel() need not divide by p or by slices
            """
            # TODO: TypeError for bool; ValueError for a non-contiguous tensor or slices not an int >= 1
            # TODO: p chunks of the flat view (tensor_split); the left and right neighbours inside the group
            # TODO: 2(p - 1) steps: send chunk (r - s) % p, receive chunk (r - s - 1) % p, each cut into slices;
            #       isend the slices, irecv the slices, wait for each receive in turn and add it (first p - 1 steps),
            #       then wait for the sends
            ### BEGIN SOLUTION
            if tensor.dtype == torch.bool:
                raise TypeError("a sum of booleans is not defined: cast to an integer dtype first")
            if not tensor.is_contiguous():
                raise ValueError("ring_allreduce works in place on a contiguous tensor")
            if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
                raise ValueError(f"slices must be an int >= 1, got {slices!r}")
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            chunks = tensor.view(-1).tensor_split(size)  # p views whose lengths differ by at most one
            right, left = (rank + 1) % size, (rank - 1) % size
            for step in range(2 * (size - 1)):
                reducing = step < size - 1
                outgoing = chunks[(rank - step) % size].tensor_split(slices)
                target = chunks[(rank - step - 1) % size].tensor_split(slices)
                sends = [dist.isend(piece, group=group, group_dst=right) for piece in outgoing if piece.numel()]
                receives = []
                for piece in target:
                    if piece.numel():
                        buffer = torch.empty_like(piece) if reducing else piece
                        receives.append((dist.irecv(buffer, group=group, group_src=left), buffer, piece))
                for request, buffer, piece in receives:  # slice k is added while slices k+1.. are still arriving
                    request.wait()
                    if reducing:
                        piece.add_(buffer)
                for request in sends:
                    request.wait()
            return tensor
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Bus bandwidth, measured

        The cell below starts a world of 4 gloo processes on this machine (`llm_algo.distributed`), times your ring
        (with 1 and 4 slices) and gloo's own `dist.all_reduce` on float32 tensors from 4 KB to 4 MB, and plots
        bus bandwidth against message size. Processes on one machine talk through loopback TCP, and a busy laptop
        shares its cores between them, so read the shapes, not the absolute numbers: a flat, latency-bound left
        part and a plateau on the right. With CUDA and several GPUs the same code runs on NCCL (`device="cuda"`).
    """)
    lesson.code(r"""
        from llm_algo.distributed import run_ranks


        def time_allreduce(fn, sizes, repeats, slices):
            results = []
            for numel in sizes:
                x = torch.ones(numel)
                fn(x, slices=slices) if slices else dist.all_reduce(x)  # warm-up
                dist.barrier()
                start = time.perf_counter()
                for _ in range(repeats):
                    fn(x, slices=slices) if slices else dist.all_reduce(x)
                dist.barrier()
                results.append((time.perf_counter() - start) / repeats)
            return results


        sizes = [1 << k for k in range(10, 21, 2)]  # float32 elements: 4 KB .. 4 MB
        curves = {}
        try:
            for label, slices in [("dist.all_reduce (gloo)", 0), ("your ring, S = 1", 1), ("your ring, S = 4", 4)]:
                results = run_ranks(time_allreduce, 4, args=(ring_allreduce, sizes, 3, slices), deadline=120)
                if not all(r.ok for r in results):
                    raise RuntimeError(results[0].describe())
                seconds = [max(r.value[i] for r in results) for i in range(len(sizes))]
                curves[label] = [bus_bandwidth(4 * n, 4, s) / 1e9 for n, s in zip(sizes, seconds)]
        except NotImplementedError:
            print("write ring_allreduce first")
        if curves:
            for label, bus in curves.items():
                plt.semilogx([4 * n for n in sizes], bus, marker="o", label=label)
            plt.xlabel("message size (bytes)"); plt.ylabel("bus bandwidth (GB/s)")
            plt.title("all-reduce over 4 gloo processes on this machine")
            plt.legend(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`ring_model`.** The whole model is two lines: `transfer` ($t$) and `add` ($c$) for one slice, then the
        pipeline formula for the reduce-scatter steps and $S t$ for the all-gather steps. The usual mistakes: *charging the addition in the all-gather too* (it only copies), *dividing by $S$ once too few*
        (a slice is $n/(pS)$ bytes, not $n/p$), *paying $\alpha$ once per step instead of once per slice*, and for
        bus bandwidth *the factor $(p-1)/p$ without the 2*. `best_slices` scans $1..S_{max}$: the function is not
        convex in general once $\max$ switches sides, and 64 evaluations cost nothing; `index(min(...))` returns
        the first minimum, so ties go to the smaller $S$ (fewer messages).

        **`ring_allreduce`.** One loop for both halves: the index algebra $(r - s)$ and $(r - s - 1)$ continues from
        the reduce-scatter into the all-gather without a second formula. The receives of a step are all posted before
        the first `wait`, so the transport can deliver slice $k+1$ while the Python thread adds slice $k$; waiting for
        them in posting order matters because `add_` of slice $k$ needs slice $k$ and nothing else. The sends are
        waited for at the end of the step: an `isend` buffer must not be written while the send is in flight, and
        every chunk this rank sends is written again later (the all-gather overwrites the chunks the reduce-scatter
        sent). The
        usual mistakes: *slices of different sizes at the two ends* (messages that do not
        match), *adding in the all-gather half* (every element counted $p$ times too often), *copying in the
        reduce-scatter half* (only the left neighbour's data survives), *the receive chunk one step off*, *ignoring
        `slices`* (whole chunks: correct sums, but the message count shows $2(p-1)$ messages, not $2(p-1)S$), and
        *accepting `slices=0`*.

        **Deadlock, once more.** Every rank sends and receives in every step. With blocking `send` first on every rank,
        each waits for a receiver that is itself stuck in `send`. Gloo buffers small messages, so the bug can hide on
        a laptop; on NCCL a `send` is a kernel that waits for the matching `recv` kernel, and even `isend`/`irecv`
        issued one by one can queue a rank's send ahead of its receive on the same stream when left = right
        ($p = 2$), so the two ranks' sends can wait for each other. PyTorch's `dist.batch_isend_irecv([P2POp(...), ...])` issues a
        step's sends and receives inside `ncclGroupStart/End`, so NCCL schedules them together: the portable way to
        write this loop for NCCL.

        **What NCCL does beyond this.**
        - *Cross-step pipelining*: a slice reduced at step $s$ is sent at step $s+1$ at once, without a step barrier.
          NCCL's ring all-reduce (`runRing` in `src/device/all_reduce.h`) is this loop written per chunk with fused
          primitives: `send`, then $p-2$ times `recvReduceSend`, `directRecvReduceCopySend` (the chunk is complete:
          keep it and forward it), $p-2$ times `directRecvCopySend`, and a final `directRecv`; each primitive moves
          its chunk in slices (`ProtoSimple<ALLREDUCE_CHUNKSTEPS/ALLREDUCE_SLICESTEPS, ALLREDUCE_SLICESTEPS>`), run by
          the thread blocks of one channel.
        - *Channels*: several rings at once (different orderings of the GPUs over different NVLinks or NICs), each
          carrying part of the tensor.
        - *Protocols*: `Simple` for bandwidth, `LL`/`LL128` (flags inlined in the data, no separate synchronisation)
          for low latency on small messages: the left part of the bus bandwidth curve.
        - *Other algorithms*: double binary trees (latency $O(\log p)$ instead of $O(p)$, for large $p$ and small
          messages), and NVLS on NVSwitch systems, where the switch itself performs the reduction.
        - *nccl-tests* (`all_reduce_perf -b 8 -e 8G -f 2`) prints algbw and busbw for each size: the measurement your
          demo makes, on the real library.

        **Not measured by the course yet.** Comparing your ring with NCCL needs two or more GPUs in one machine, and the
        course's GPU runs so far had one; the measurement waits for a multi-GPU machine, and no number is quoted here.
        What to expect when you run the demo with `device="cuda"` on several NVLink-connected GPUs — the model of
        section 2, not a measurement: NCCL's `dist.all_reduce` latency-bound on the left (a few microseconds per
        step) and a plateau on the right near the link's per-direction bandwidth (450 GB/s on an H100/H200 NVLink
        datasheet). Your ring runs the same schedule, but every step pays a Python loop iteration, one NCCL
        point-to-point call per slice and a separate `add_` kernel, tens of microseconds rather than a few, so its
        $\alpha$ is several times NCCL's: by $n_{1/2} = p\,\alpha B$ its curve reaches half the bandwidth at a message
        several times larger, and more slices help only on messages large enough to pay for the extra calls. On the
        plateau it can come close to NCCL only if the additions and the transfers overlap, which NCCL's fused
        `recvReduceSend` does inside one kernel and your Python loop does only between slices.
    """)
    lesson.mistakes()
    return lesson
