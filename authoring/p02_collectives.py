"""Source of 02_PyTorch_Algorithms/40_Collectives.ipynb (build with `python -m llm_algo build p02.collectives`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.collectives",
        path="02_PyTorch_Algorithms/40_Collectives.ipynb",
        title_en="Collectives from point-to-point messages",
        title_zh="用点对点通信实现集合通信",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p01.collectives_cost"],
    )
    lesson.title(
        intro=r"""
        Every parallel training job is four collectives in a trench coat. Data parallelism all-reduces the gradients;
        ZeRO and FSDP reduce-scatter the gradients and all-gather the parameters; every job starts by broadcasting
        rank 0's weights. `torch.distributed` hands you each one as a single call, and NCCL or gloo run it. Here you
        build all four from the only primitive a network really offers, sending a message to one peer, and you run them
        in real processes.

        **You will implement** a binomial-tree broadcast, a ring reduce-scatter, a ring all-gather and a ring
        all-reduce (reduce-scatter then all-gather, on lengths that do not divide by the number of ranks), each one
        with `dist.send` / `dist.isend` / `dist.recv` only, on any process group, for any dtype. **Graded against**
        `dist.broadcast`, `dist.reduce_scatter_single`, `dist.all_gather_single` and `dist.all_reduce` on the same
        data, in a world of 4 real gloo processes and in a sub-group of 3 of them. The checks also count every message
        and byte each rank sends and compare them with the α-β model.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **四个集合通信**：broadcast（广播）、reduce-scatter（归约分散）、all-gather（全收集）、all-reduce（全归约）都只用 `send`/`isend`/`recv` 实现，在真实的多进程 (gloo) 中运行。
        - **二叉树广播 (binomial tree)**：第 $s$ 轮距离 $d=2^s$，相对秩 $v<d$ 发给 $v+d$，$d\le v<2d$ 从 $v-d$ 接收；共 $\lceil\log_2 p\rceil$ 轮，代价 $\lceil\log_2 p\rceil(\alpha+n\beta)$，总消息数 $p-1$。
        - **环形 reduce-scatter / all-gather**：各 $p-1$ 步，每步每个 rank 向右发一块 $n/p$、从左收一块；代价 $(p-1)(\alpha+\tfrac{n}{p}\beta)$。
        - **环形 all-reduce** = reduce-scatter + all-gather：$2(p-1)$ 条消息，全体共发 $2(p-1)n$ 字节；长度不能被 $p$ 整除时用 `tensor_split`（块长相差至多 1）。
        - **非阻塞发送**：每个 rank 同时发和收，用 `isend` + `recv` 再 `wait()`；NCCL 上每个 rank 都先阻塞 `send` 会死锁。
        - **进程组 (process group)**：`group_dst=`/`group_src=` 是组内秩，`dst=`/`src=` 是全局秩；`broadcast` 的 `src` 是全局秩。
        - **数据类型**：在张量自身的 dtype 中累加（与 NCCL 一致），bool 拒绝；低精度下求和顺序不同，结果只在舍入误差内一致。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: what a collective costs, and who sends what

        The cost model is the one of `p01.collectives_cost`: a message of $n$ bytes takes $\alpha + n\beta$. There you
        derived the ring all-reduce, reduce-scatter and all-gather and a tree all-reduce; read it first, this lesson
        does not repeat the derivations. The numbers to keep in mind: on 8 H100s joined by NVLink (450 GB/s per
        direction, NVIDIA's datasheet gives 900 GB/s bidirectional), all-reducing Llama-3-8B's 16 GB of bf16 gradients
        moves $2 \cdot \frac{7}{8} \cdot 16 = 28$ GB through each GPU's link: 62 ms at best. ZeRO-3 and FSDP replace
        that one all-reduce by a reduce-scatter of the gradients plus an all-gather of the parameters before each
        forward and backward: the same bytes, cut in two halves that can be overlapped with compute.

        | collective | what rank $r$ has after it | algorithm here | messages per rank | α-β time |
        | --- | --- | --- | --- | --- |
        | broadcast from `src` | `src`'s tensor | binomial tree | root: $\lceil\log_2 p\rceil$; others receive 1 | $\lceil\log_2 p\rceil(\alpha + n\beta)$ |
        | reduce-scatter | the sum over ranks of chunk $r$ | ring | $p-1$ | $(p-1)(\alpha + \frac{n}{p}\beta)$ |
        | all-gather | every rank's chunk, in rank order | ring | $p-1$ | $(p-1)(\alpha + \frac{n}{p}\beta)$ |
        | all-reduce | the sum over ranks | ring RS + AG | $2(p-1)$ | $2(p-1)\alpha + 2\frac{p-1}{p}n\beta$ |

        ($n$ is the size of the full tensor: the input of a reduce-scatter, the output of an all-gather.) These counts
        are what the checks measure on your code: they wrap `dist.send`, `dist.isend` and `dist.recv` in each rank and
        log every message.

        **Why a tree for the broadcast?** A root that sends the tensor to each of the $p-1$ others in turn pays
        $(p-1)(\alpha + n\beta)$: its one link is the bottleneck. In a binomial tree every rank that already has the
        data forwards it, so the number of ranks holding it doubles each round:

        $$
        \text{round } s = 0, 1, \dots, \lceil\log_2 p\rceil - 1,\ d = 2^s:\quad
        v < d \text{ sends to } v + d \ (\text{if } v + d < p), \qquad d \le v < 2d \text{ receives from } v - d,
        $$

        with $v = (r - r_{\text{src}}) \bmod p$ the rank relative to the root. For $p = 8$ that is 3 rounds instead of
        7 sends. For long messages the tree wastes bandwidth (each rank's link carries the whole $n$ up to
        $\log_2 p$ times), so MPI libraries switch to *scatter + ring all-gather* (time $\approx 2n\beta$) above a size
        threshold (Thakur, Rabenseifner and Gropp, *Optimization of Collective Communication Operations in MPICH*,
        2005), and NCCL runs its broadcast as a ring, pipelined in small slices so that every link is busy at once.
    """)
    lesson.md(r"""
        ## 2. Point-to-point in `torch.distributed`, and three traps

        Each rank is a process; `dist.get_rank(group)` and `dist.get_world_size(group)` say who it is inside a
        process group (`group=None` is the whole world). The primitives:

        - `dist.send(tensor, group=group, group_dst=j)` blocks until the tensor can be reused;
          `dist.isend(...)` returns at once with a request, and `request.wait()` blocks until that point.
        - `dist.recv(tensor, group=group, group_src=j)` writes the incoming message into `tensor`, which must have
          the same number of elements and the same dtype as the sent one. Both sides must be contiguous.

        **Trap 1, deadlock.** In a ring step every rank sends right *and* receives from the left. If every rank first
        calls a blocking `send`, each waits for a receiver that is itself stuck in `send`. Gloo happens to buffer
        small messages, so this can look fine on a laptop and hang on NCCL. Post the send with `isend`, then `recv`,
        then `wait()` on the send before you reuse its buffer.

        **Trap 2, global or group rank.** `dst=` and `src=` are *global* ranks; `group_dst=` and `group_src=` are
        ranks inside `group`. In a sub-group made of global ranks `[1, 2, 3]`, group rank 0 is global rank 1. Tensor
        parallel and expert parallel groups are sub-groups, so this bug is common in real code. Like
        `dist.broadcast`, your `tree_broadcast` takes `src` as a *global* rank: find its place in the group with
        `dist.get_process_group_ranks(group)` (the global ranks of a group, in group-rank order).

        **Trap 3, dtypes.** The sum is computed in the tensor's own dtype, as NCCL does: an fp16 all-reduce adds
        fp16 numbers, in an order that depends on the algorithm. The ring adds the $p$ contributions of a chunk in
        a different order on different chunks, so two correct all-reduces agree only to rounding. Receive buffers
        must have the dtype of what is sent (`torch.empty_like`, never `torch.empty(shape)`, which is float32). A
        boolean tensor has no sum: refuse it.

        Validate every input **before** the first message: a rank that raises after sending leaves its peers
        waiting for a message that never comes.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
    """)
    lesson.md(r"""
        ## 3. Exercise `tree_broadcast`

        In place: after the call, `tensor` on every rank of `group` equals `tensor` on global rank `src`. Use the
        rounds of section 1, addressed inside the group with `group_dst=` / `group_src=`. Refuse a non-contiguous
        tensor and a `src` that is not a member of `group` with a `ValueError`.
    """)
    lesson.exercise(
        "tree_broadcast",
        r'''
        def tree_broadcast(tensor: torch.Tensor, src: int, group=None) -> None:
            """Binomial-tree broadcast of `tensor` from global rank `src` to every rank of `group`, in place.

            tensor: contiguous, any shape and dtype, the same shape and dtype on every rank
            src:    a *global* rank (as in dist.broadcast) that belongs to `group`
            """
            # TODO: ValueError for a non-contiguous tensor or a src outside the group (before any message)
            # TODO: the root's rank inside the group; v = this rank relative to it
            # TODO: rounds d = 1, 2, 4, ... < p: v < d sends to v + d (if it exists), d <= v < 2d receives from v - d
            ### BEGIN SOLUTION
            if not tensor.is_contiguous():
                raise ValueError("tree_broadcast needs a contiguous tensor (messages send its storage as it is)")
            members = dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)  # global ranks
            if src not in members:
                raise ValueError(f"src={src} is not a rank of this group (its global ranks: {members})")
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            root = members.index(src)  # the source's rank inside the group
            relative = (rank - root) % size  # 0 at the root
            distance = 1
            while distance < size:  # ceil(log2 p) rounds; after round s, relative ranks < 2 * distance have it
                if relative < distance and relative + distance < size:
                    dist.send(tensor, group=group, group_dst=(relative + distance + root) % size)
                elif distance <= relative < 2 * distance:
                    dist.recv(tensor, group=group, group_src=(relative - distance + root) % size)
                distance *= 2
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `ring_reduce_scatter`

        The signature of `dist.reduce_scatter_single(output, input)`: `input` holds $p$ equal chunks (flattened, in
        rank order), and rank $r$ ends with the sum over all ranks of chunk $r$ in `output`. `input` must not change.

        The ring: keep a private copy `partial` of the input viewed as `(p, m)`. In step $s = 0 \dots p-2$, rank $r$
        sends row $(r - s - 1) \bmod p$ to the right and adds the row it receives from the left into row
        $(r - s - 2) \bmod p$. Follow one chunk: rank $c+1$ sends its own chunk $c$ at step 0, rank $c+2$ adds it to
        its own and forwards the sum at step 1, ..., and rank $c + p = c$ receives the sum of the other $p - 1$
        ranks at step $p - 2$ and adds its own: that is why the index is shifted by one against the all-reduce of
        `p01.collectives_cost`, whose reduce-scatter leaves chunk $r + 1$ on rank $r$.

        Refuse: `input.numel() != p * output.numel()` (ValueError), different dtypes or a bool dtype (TypeError).
    """)
    lesson.exercise(
        "ring_reduce_scatter",
        r'''
        def ring_reduce_scatter(output: torch.Tensor, input: torch.Tensor, group=None) -> None:
            """Ring reduce-scatter (sum): output on rank r = sum over ranks of chunk r of input.

            input:  p * m elements (any shape, flattened into p chunks of m), unchanged by the call
            output: m elements, written in place; same dtype as input
            """
            # TODO: TypeError for a dtype mismatch or a bool dtype, ValueError if input is not p chunks of output's size
            # TODO: a private (p, m) copy of the input; p - 1 steps: isend row (r - s - 1) % p to the right,
            #       recv from the left, add it into row (r - s - 2) % p; wait() on the send
            # TODO: copy your row r into output
            ### BEGIN SOLUTION
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            if input.dtype != output.dtype:
                raise TypeError(f"input is {input.dtype} but output is {output.dtype}")
            if input.dtype == torch.bool:
                raise TypeError("a sum of booleans is not defined: cast to an integer dtype first")
            if input.numel() != size * output.numel():
                raise ValueError(f"input has {input.numel()} elements, not {size} x output's {output.numel()}")
            partial = input.reshape(size, -1).clone()  # (p, m) our running sums, one row per chunk
            incoming = torch.empty_like(partial[0])  # (m,) same dtype as what the left neighbour sends
            right, left = (rank + 1) % size, (rank - 1) % size
            for step in range(size - 1):
                send, receive = (rank - step - 1) % size, (rank - step - 2) % size
                request = dist.isend(partial[send], group=group, group_dst=right)
                dist.recv(incoming, group=group, group_src=left)
                request.wait()  # partial[send] may be reused only now
                partial[receive] += incoming
            output.copy_(partial[rank].view_as(output))  # row r: all p contributions after p - 1 steps
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `ring_all_gather`

        The signature of `dist.all_gather_single(output, input)`: `output` (contiguous, $p$ times `input`'s elements)
        ends with rank $j$'s input in its chunk $j$, on every rank. Write your input into your own chunk, then
        $p - 1$ steps: send chunk $(r - s) \bmod p$ to the right, receive chunk $(r - s - 1) \bmod p$ from the left,
        straight into `output` (a row of a `(p, m)` view is contiguous). Each rank forwards what it received in the
        previous step.

        Refuse: a dtype mismatch (TypeError), `output.numel() != p * input.numel()` or a non-contiguous `output`
        (ValueError).
    """)
    lesson.exercise(
        "ring_all_gather",
        r'''
        def ring_all_gather(output: torch.Tensor, input: torch.Tensor, group=None) -> None:
            """Ring all-gather: chunk j of output = input of rank j (of the group), on every rank.

            input:  m elements, any shape; output: p * m elements, contiguous, same dtype, written in place
            """
            # TODO: TypeError for a dtype mismatch; ValueError for a wrong output size or a non-contiguous output
            # TODO: view output as (p, m); put your input into row r
            # TODO: p - 1 steps: isend row (r - s) % p to the right, recv row (r - s - 1) % p from the left, wait()
            ### BEGIN SOLUTION
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            if input.dtype != output.dtype:
                raise TypeError(f"input is {input.dtype} but output is {output.dtype}")
            if output.numel() != size * input.numel():
                raise ValueError(f"output has {output.numel()} elements, not {size} x input's {input.numel()}")
            if not output.is_contiguous():
                raise ValueError("output must be contiguous: its rows are received in place")
            blocks = output.view(size, -1)  # (p, m) views into output
            blocks[rank].copy_(input.reshape(-1))
            right, left = (rank + 1) % size, (rank - 1) % size
            for step in range(size - 1):
                send, receive = (rank - step) % size, (rank - step - 1) % size
                request = dist.isend(blocks[send], group=group, group_dst=right)
                dist.recv(blocks[receive], group=group, group_src=left)
                request.wait()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `ring_all_reduce`

        In place, any shape (contiguous), any number of elements $n$: split the flat tensor with
        `torch.tensor_split(flat, p)` ($n \bmod p$ chunks one element longer, possibly empty chunks when $n < p$; all
        are views). Then the two rings:

        - reduce-scatter, $p - 1$ steps: send chunk $(r - s) \bmod p$, add the received one into chunk
          $(r - s - 1) \bmod p$. Rank $r$ ends with the full sum of chunk $(r + 1) \bmod p$.
        - all-gather, $p - 1$ steps: send chunk $(r - s + 1) \bmod p$, receive into chunk $(r - s) \bmod p$.

        Chunks have different lengths, so this reduce-scatter is not your `ring_reduce_scatter` (which, like NCCL's,
        wants equal chunks): write the two loops. Refuse a bool dtype (TypeError) and a non-contiguous tensor
        (ValueError).
    """)
    lesson.exercise(
        "ring_all_reduce",
        r'''
        def ring_all_reduce(tensor: torch.Tensor, group=None) -> None:
            """Ring all-reduce (sum) of `tensor` over the ranks of `group`, in place.

            tensor: contiguous, any shape, any numeric dtype; n = tensor.numel() need not divide by p
            """
            # TODO: TypeError for bool, ValueError for a non-contiguous tensor
            # TODO: p chunks of the flat tensor with torch.tensor_split (views)
            # TODO: reduce-scatter: p - 1 steps; isend chunk (r - s) % p, recv into a fresh buffer, add into (r - s - 1) % p
            # TODO: all-gather: p - 1 steps; isend chunk (r - s + 1) % p, recv into chunk (r - s) % p
            ### BEGIN SOLUTION
            if tensor.dtype == torch.bool:
                raise TypeError("a sum of booleans is not defined: cast to an integer dtype first")
            if not tensor.is_contiguous():
                raise ValueError("ring_all_reduce works in place on a contiguous tensor")
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            chunks = tensor.view(-1).tensor_split(size)  # p views; lengths differ by at most one
            right, left = (rank + 1) % size, (rank - 1) % size
            for step in range(size - 1):  # reduce-scatter
                send, receive = (rank - step) % size, (rank - step - 1) % size
                incoming = torch.empty_like(chunks[receive])  # the sender's chunk has this index and length
                request = dist.isend(chunks[send], group=group, group_dst=right)
                dist.recv(incoming, group=group, group_src=left)
                request.wait()
                chunks[receive].add_(incoming)
            for step in range(size - 1):  # all-gather: rank r starts with the full chunk (r + 1) % p
                send, receive = (rank - step + 1) % size, (rank - step) % size
                request = dist.isend(chunks[send], group=group, group_dst=right)
                dist.recv(chunks[receive], group=group, group_src=left)
                request.wait()
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The ring, step by step

        Four ranks, four chunks. A cell shows how many ranks' contributions that rank's copy of the chunk holds
        after each step (a pure picture of the schedule of section 6, not a run). During the reduce-scatter the
        counts climb along a diagonal until each rank holds one complete chunk (4); the all-gather then copies the
        complete chunks around the ring.
    """)
    lesson.code(r"""
        p = 4
        held = [[{r} for _ in range(p)] for r in range(p)]  # held[r][c]: whose contributions rank r's chunk c holds
        frames = [[[len(held[r][c]) for c in range(p)] for r in range(p)]]
        for step in range(p - 1):  # reduce-scatter
            sent = [(r, (r - step) % p, set(held[r][(r - step) % p])) for r in range(p)]  # all send at once
            for r, c, data in sent:
                held[(r + 1) % p][c] |= data  # the receiver adds into its own copy of the same chunk
            frames.append([[len(held[r][c]) for c in range(p)] for r in range(p)])
        for step in range(p - 1):  # all-gather
            sent = [(r, (r - step + 1) % p, set(held[r][(r - step + 1) % p])) for r in range(p)]
            for r, c, data in sent:
                held[(r + 1) % p][c] = data
            frames.append([[len(held[r][c]) for c in range(p)] for r in range(p)])
        fig, axes = plt.subplots(1, len(frames), figsize=(2.0 * len(frames), 2.4))
        for i, (ax, frame) in enumerate(zip(axes, frames)):
            ax.imshow(frame, cmap="Blues", vmin=0, vmax=p)
            for r in range(p):
                for c in range(p):
                    ax.text(c, r, frame[r][c], ha="center", va="center", fontsize=8, color="white" if frame[r][c] > 2 else "black")
            phase = "start" if i == 0 else (f"RS {i}" if i < p else f"AG {i - p + 1}")
            ax.set_title(phase, fontsize=9); ax.set_xticks(range(p)); ax.set_yticks(range(p))
            ax.set_xlabel("chunk", fontsize=8)
            if i == 0:
                ax.set_ylabel("rank", fontsize=8)
        fig.suptitle("ring all-reduce, p = 4: contributions held per (rank, chunk)", fontsize=10)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### Your four collectives in four real processes, counted

        The next cell starts a world of 4 gloo processes (a few seconds), runs each of your collectives there on a
        tensor of $n = 4096$ float32 elements (16 KiB), counts the messages and bytes each rank sends, and prints them
        next to the α-β model of section 1. Then it prices the same traffic on two real links with the model: 8
        H100s over NVLink (α ≈ 5 µs, 450 GB/s per direction) and 8 nodes over 400 Gb/s InfiniBand (α ≈ 10 µs,
        50 GB/s). These α are order-of-magnitude assumptions, not measurements; timings of NCCL on real GPUs are
        pending (a later issue of this project runs them).
    """)
    lesson.code(r"""
        from llm_algo.distributed import run_ranks

        def counted_run(collective, n):
            '''Runs in every rank: your collective on n float32 elements, with dist.isend/send counted.'''
            size = dist.get_world_size()
            sent = [0, 0]  # messages, bytes
            originals = dist.send, dist.isend

            def counting(send):
                def wrapper(tensor, *args, **kwargs):
                    sent[0] += 1
                    sent[1] += tensor.numel() * tensor.element_size()
                    return send(tensor, *args, **kwargs)
                return wrapper

            dist.send, dist.isend = counting(dist.send), counting(dist.isend)
            try:
                x = torch.randn(n)
                if collective == "broadcast":
                    tree_broadcast(x, 0)
                elif collective == "reduce_scatter":
                    ring_reduce_scatter(torch.empty(n // size), x)
                elif collective == "all_gather":
                    ring_all_gather(torch.empty(n), x[: n // size].clone())
                else:
                    ring_all_reduce(x)
            except NotImplementedError:
                return None
            finally:
                dist.send, dist.isend = originals
            return sent

        n, p = 4096, 4
        model = {  # (messages of the busiest rank, bytes it sends) in the alpha-beta model of section 1
            "broadcast": (math.ceil(math.log2(p)), math.ceil(math.log2(p)) * 4 * n),
            "reduce_scatter": (p - 1, (p - 1) * 4 * n // p),
            "all_gather": (p - 1, (p - 1) * 4 * n // p),
            "all_reduce": (2 * (p - 1), 2 * (p - 1) * 4 * n // p),
        }
        links = {"NVLink (5 us, 450 GB/s)": (5e-6, 1 / 450e9), "InfiniBand (10 us, 50 GB/s)": (10e-6, 1 / 50e9)}
        print(f"{'collective':<15} {'messages/rank':>22} {'bytes/rank':>34}   alpha-beta time of the busiest rank")
        for collective, (want_messages, want_bytes) in model.items():
            results = run_ranks(counted_run, p, args=(collective, n), deadline=20)
            counts = [r.value for r in results if r.ok]
            if len(counts) < p or None in counts:
                print(f"{collective:<15} not written yet (or it failed: run its check cell)")
                continue
            messages, nbytes = [c[0] for c in counts], [c[1] for c in counts]
            times = "; ".join(f"{name}: {1e6 * (max(messages) * a + max(nbytes) * b):.1f} us" for name, (a, b) in links.items())
            print(f"{collective:<15} {str(messages):>14} (model {want_messages}) {str(nbytes):>26} (model {want_bytes})   {times}")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`tree_broadcast`.** `dist.get_process_group_ranks` lists the group's global ranks in group-rank order, so
        `members.index(src)` turns the global `src` into a group rank; everything after that is relative to the
        root, so the same tree works for any root. Each rank receives once (in round $\lfloor\log_2 v\rfloor$) and
        then sends in every later round where $v + d < p$: the root sends $\lceil\log_2 p\rceil$ messages, and the
        $p - 1$ messages reach everyone after $\lceil\log_2 p\rceil$ rounds. A blocking `send` is fine here: the
        receiver of each message is waiting in a `recv`, never in a `send` of its own. The usual mistakes:
        *the global `src` used as a group rank* (the broadcast comes from the wrong rank of a sub-group), *peers
        addressed with `dst=` instead of `group_dst=`* (a message to a rank outside the group), and *a root that
        sends to everyone itself* (right values, $p - 1$ latencies instead of $\lceil\log_2 p\rceil$: only the
        message count sees it).

        **`ring_reduce_scatter`.** The private `partial` copy keeps the caller's input intact (a reduce-scatter that
        overwrites its input surprises every caller that reuses it, e.g. gradients kept for clipping). `incoming` is
        allocated once with `empty_like`, so it has the dtype and length of the rows. The mistakes: *the all-reduce's
        index* (rank $r$ then completes chunk $r + 1$ and returns an incomplete row), *copying instead of adding*,
        *working on the input itself*.

        **`ring_all_gather`.** Receiving straight into the output's rows saves a copy per step. A send and a
        receive of the same step touch different rows, so nothing is overwritten while a send is in flight. The
        mistakes: *always sending your own row* (the other rows get the neighbour's data twice), *forgetting to
        place your own input* (that row is garbage on your rank only).

        **`ring_all_reduce`.** `tensor_split` gives chunks whose lengths differ by at most one, and both ends of a
        message agree on its length because they use the same chunk index. Each rank sends $2(p-1)$ messages; all
        ranks together send $2(p-1)\,n$ elements, whatever $n \bmod p$. The mistakes: *stopping after the
        reduce-scatter*, *a receive buffer made with `torch.empty(shape)`* (float32 whatever the tensor's dtype: the
        message size no longer matches, or the bytes are read as the wrong type), and *`split(n // p)`*, which makes
        more than $p$ chunks when $n$ does not divide and never reduces the tail.

        **What production libraries do differently.**
        - *NCCL* runs the same rings, but cuts each chunk into slices so that receiving, reducing and forwarding
          overlap (a pipeline along the ring), and runs several rings at once on different links (channels). Its
          all-reduce may also use double binary trees, and on NVSwitch systems NVLS, where the switch does the
          reduction. Its reductions are written as GPU kernels that read the incoming slice and the local one and write
          the sum: the `+=` of your loop.
        - *Gloo* (what ran your checks) ships several all-reduce algorithms (ring, chunked ring, halving-doubling,
          bcube), all built from the same point-to-point pairs as yours.
        - *`torch.distributed`* gives you the collectives of this lesson as single calls; `batch_isend_irecv` posts
          several point-to-point calls at once (pipeline parallelism uses it), and `new_group` builds the
          sub-groups that tensor, pipeline and expert parallelism run on (Megatron builds one group per
          parallelism dimension).
        - *DDP* (`p02.ddp`) all-reduces gradients in 25 MB buckets during the backward pass; *ZeRO* and *FSDP*
          (`p02.zero`, `p02.fsdp`) use reduce-scatter and all-gather; *expert parallelism* (`p02.expert_parallel`)
          uses all-to-all with uneven split sizes, which is the one collective not built here.
    """)
    lesson.mistakes()
    return lesson
