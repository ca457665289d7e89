"""Source of 02_PyTorch_Algorithms/41_DDP.ipynb (build with `python -m llm_algo build p02.ddp`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.ddp",
        path="02_PyTorch_Algorithms/41_DDP.ipynb",
        title_en="Data parallel training (DDP) from gradient hooks",
        title_zh="数据并行（DDP）：梯度钩子、分桶与通信重叠",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p01.collectives_cost", "p02.adamw", "p02.grad_accum_clip"],
    )
    lesson.title(
        intro=r"""
        Every large training run is data parallel at its outermost level: Llama 3 405B ran on 16,384 H100s, and
        however the model itself was split (tensor, pipeline, context parallelism), the remaining factor of the
        GPUs each saw a different slice of every global batch and had to agree on one gradient before the optimizer
        step (Llama Team, *The Llama 3 Herd of Models*, 2024, §3.3). The agreement is an **all-reduce** of the
        whole gradient: for a 7B-parameter model in bf16 that is 14 GB per step and per GPU. Done after the
        backward pass, it adds its full time to every step; done *during* the backward pass, a bucket of gradients
        at a time, it hides behind the computation that still has to run. PyTorch's `DistributedDataParallel`
        (Li et al., *PyTorch Distributed: Experiences on Accelerating Data Parallel Training*, VLDB 2020) is built
        around exactly that overlap, and reports near-linear scaling to 256 GPUs when it is configured well.

        **You will implement**, in code that runs in several real processes (`torch.distributed`, gloo on this
        CPU, NCCL on GPUs, the same code): the broadcast that makes every replica start from rank 0's weights; the
        assignment of parameters to gradient buckets, the way DDP does it; and a `DDP` wrapper whose gradient
        hooks launch an asynchronous all-reduce per bucket while backward is still running, average the
        gradients, count a tied weight once, and skip communication under `no_sync()` for gradient accumulation.
        **Graded against** single-process training on the full batch (5 steps, float64, so only the order of the
        sums differs), `torch.nn.parallel.DistributedDataParallel` on gloo (a second oracle, forbidden to you),
        torch's own bucket assignment `dist._compute_bucket_assignment_by_size`, and the order of events inside
        backward: the all-reduces must start before the last gradient is ready.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：数据并行（data parallel）的每个 rank 处理全局批次的一部分，优化器更新前必须对梯度做 all-reduce 求平均；7B 模型的 bf16 梯度每步 14 GB，放在反向传播之后做就完全暴露在步时间里。
        - **等价性**：每个 rank 的损失是本地批次的均值，各 rank 批次等大时，$\frac1p\sum_r \nabla L_r$ 恰好等于全批次损失的梯度；所以数据并行训练与单进程全批次训练只差求和顺序。
        - **起点一致**：包装时把 rank 0 的参数和 buffer 广播（broadcast）给所有 rank，否则各副本从不同权重出发，平均梯度毫无意义。
        - **分桶（bucket）**：按参数的逆序（反向传播产生梯度的顺序）装桶，每种 dtype 一个桶，字节数达到上限即封桶；最后未满的桶也要发出。
        - **重叠**：`register_post_accumulate_grad_hook` 在梯度累加完成后触发；一个桶的梯度齐了就 `all_reduce(async_op=True)`，按桶序发出（各 rank 顺序必须一致）；反向结束时（`queue_callback`）发出剩余的桶、`wait()`、写回 `.grad`。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why averaging shard gradients is full-batch training

        $p$ processes (**ranks**) hold the same model $\theta$. A global batch of $B$ examples is split into $p$
        shards of $B/p$ (a `DistributedSampler` does this in practice); rank $r$ computes the mean loss of its shard
        and its gradient:

        $$
        L_r(\theta) = \frac{p}{B} \sum_{i \in \text{shard } r} \ell_i(\theta), \qquad
        g_r = \nabla L_r \in \mathbb{R}^{N}, \qquad
        \frac{1}{p}\sum_{r=0}^{p-1} g_r = \frac{1}{B} \sum_{i=1}^{B} \nabla \ell_i(\theta) = \nabla L(\theta).
        $$

        So one **all-reduce** (sum over ranks, result on every rank) followed by a division by $p$ gives every
        rank the full-batch gradient; with identical weights and an identical optimizer, every rank then takes
        the identical step, and the replicas stay identical without ever exchanging weights again. Two
        conditions hide in that sentence:

        1. **the same starting point**: each process initialises its model from its own random state, so the
           wrapper broadcasts rank 0's parameters *and buffers* (BatchNorm's running statistics, RoPE tables) at
           wrap time;
        2. **equal shards**: with unequal shard sizes the mean of means is not the global mean (pad or drop the
           last batch, or weight by token counts as in `p02.grad_accum_clip`).

        In floating point the sum over ranks is a different order of additions than the single process's sum
        over the batch, so the two runs agree to rounding, not bit for bit: in float64 to about $10^{-15}$
        relative, which is how the checks compare them.

        ## 2. What an all-reduce costs, and why overlap matters

        `p01.collectives_cost` derived the ring all-reduce's time for $n$ bytes on $p$ ranks with latency
        $\alpha$ per message and bandwidth $\beta$ per link:

        $$
        T_{\text{all-reduce}}(n) = 2(p-1)\,\alpha + 2\,\frac{p-1}{p}\,\frac{n}{\beta}.
        $$

        For a 7B model's bf16 gradient ($n = 14$ GB) on 8 GPUs of one H100 node (NVLink: 900 GB/s per GPU in both
        directions together, NVIDIA's H100 datasheet, so $\beta \approx 450$ GB/s each way) the bandwidth term is
        $2 \cdot \tfrac78 \cdot 14 / 450 \approx 54$ ms. Across nodes, with one 400 Gb/s InfiniBand NIC per GPU
        ($\beta \approx 50$ GB/s), it is about $0.5$ s. The backward pass it has to hide behind: about
        $4 N_{\text{params}}$ FLOPs per token, so $4 \cdot 7\cdot 10^{9} \cdot 8192 \approx 2.3 \cdot 10^{14}$
        FLOPs for 8192 tokens per GPU, some 0.6 s at a (good) 400 TFLOP/s. Sent after backward, the all-reduce
        adds 10% to 90% to every step; started as soon as the last layers' gradients exist, most of it runs while
        the first layers are still being differentiated. These are α-β estimates; NCCL measurements on real
        multi-GPU hardware come with a later issue.

        **Buckets.** One all-reduce per parameter pays $2(p-1)\alpha$ hundreds of times per step (a Llama layer
        has 9 parameter tensors, a model hundreds). One all-reduce for everything cannot start before the last
        gradient. DDP groups the gradients into **buckets** of `bucket_cap_mb` = 25 MB by default (the first
        bucket is only 1 MB, `dist._DEFAULT_FIRST_BUCKET_BYTES`, so communication starts early), flattens each
        bucket into one tensor, and all-reduces a bucket as soon as all of its gradients are ready.

        ## 3. Exercise `broadcast_parameters`: one starting point

        Overwrite every parameter and buffer of `module`, in place, with rank `src`'s values. `module.parameters()`
        yields a tied weight (the embedding shared with the output head) once, so it is sent once. Validate
        before communicating: a `src` that is not a rank of the group must raise `ValueError` on every rank
        (a rank that raises while the others wait in a broadcast is a hang, not an error message).
    """)
    lesson.setup(r"""
        import contextlib
        import functools
        import itertools
        import time

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F

        from llm_algo.distributed import expect_ranks_ok, run_ranks  # the demos start real 2-rank worlds
    """)
    lesson.exercise(
        "broadcast_parameters",
        r'''
        @torch.no_grad()
        def broadcast_parameters(module: nn.Module, src: int = 0, group=None) -> None:
            """Copy rank `src`'s parameters and buffers into every rank's `module`, in place.

            src: a rank of `group` (the default group when None). Runs in every rank of the group.
            """
            # TODO: refuse a module that is not an nn.Module (TypeError) and a src outside the group (ValueError),
            #       before any communication
            # TODO: broadcast each parameter and each buffer from src, in place (a tied weight is one tensor)
            ### BEGIN SOLUTION
            if not isinstance(module, nn.Module):
                raise TypeError(f"broadcast_parameters takes an nn.Module, not {type(module).__name__}")
            world_size = dist.get_world_size(group)
            if not 0 <= src < world_size:
                raise ValueError(f"src={src} is not a rank of this group of {world_size} ranks")
            for tensor in itertools.chain(module.parameters(), module.buffers()):  # tied weights: yielded once
                dist.broadcast(tensor, group=group, group_src=src)  # in place: the module keeps its tensors
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `assign_buckets`: which gradients travel together

        Backward produces gradients roughly in **reverse** order of the parameters (the output head first, the
        embedding last), so DDP fills buckets walking the parameters from the last to the first. A bucket is one
        flat tensor, so it holds one dtype (and device): each dtype has its own open bucket. A bucket closes as
        soon as its size reaches the cap, *including* the tensor that crossed it (a tensor larger than the cap
        gets a bucket of its own); the buckets still open at the end are kept, however small. Return the buckets
        as lists of indices into `params`, each list in walk order, the buckets ordered by their first index in
        walk order (bucket 0 is the one that becomes ready first).

        Example: sizes in bytes `[400, 100, 100, 300]` (all float32) and a cap of 400: walking backwards, 300 + 100
        = 400 reaches the cap, so `[3, 2]`; then 100 + 400 = 500 closes `[1, 0]`. Result `[[3, 2], [1, 0]]`.
        This is the rule of torch's `dist._compute_bucket_assignment_by_size`, which the checks use as their
        reference (and which you may not call).
    """)
    lesson.exercise(
        "assign_buckets",
        r'''
        def assign_buckets(params: list[torch.Tensor], bucket_cap_bytes: int) -> list[list[int]]:
            """DDP's gradient buckets: lists of indices into params.

            Walk params from the last to the first; each (dtype, device) fills its own open bucket, which closes
            when its bytes (numel * element_size) reach bucket_cap_bytes. Buckets still open at the end are kept.
            Each bucket lists indices in walk order; buckets are sorted by their first index in walk order.
            """
            # TODO: refuse bucket_cap_bytes <= 0 (ValueError)
            # TODO: walk the parameters in reverse, one open bucket per (dtype, device), close a bucket at the cap
            # TODO: keep the open buckets, then order the buckets by when they become ready
            ### BEGIN SOLUTION
            if bucket_cap_bytes <= 0:
                raise ValueError(f"bucket_cap_bytes must be positive, not {bucket_cap_bytes}")
            closed, open_buckets = [], {}
            for index in reversed(range(len(params))):
                p = params[index]
                bucket = open_buckets.setdefault((p.dtype, p.device), {"indices": [], "bytes": 0})
                bucket["indices"].append(index)
                bucket["bytes"] += p.numel() * p.element_size()
                if bucket["bytes"] >= bucket_cap_bytes:  # the tensor that crosses the cap stays in the bucket
                    closed.append(bucket["indices"])
                    del open_buckets[(p.dtype, p.device)]
            closed.extend(bucket["indices"] for bucket in open_buckets.values())
            return sorted(closed, key=lambda bucket: -bucket[0])  # ready first = highest index in walk order first
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `DDP`: all-reduce during backward

        The wrapper's forward is the module's. Everything happens in backward, through one hook per parameter:

        - `p.register_post_accumulate_grad_hook(hook)` calls `hook(p)` after autograd has *accumulated* this
          backward's gradient into `p.grad` (for a tied weight: after both uses have been summed, once). DDP's C++
          reducer hooks the same place (the parameter's `AccumulateGrad` node).
        - When the last gradient of a bucket arrives, flatten the bucket's gradients into one tensor (divided by
          the world size, so the sum is the mean) and start `dist.all_reduce(flat, async_op=True)`, which returns
          a `Work` handle immediately while the communication proceeds. **Launch the buckets in bucket order**:
          every rank must issue its collectives in the same order, or rank 0's bucket 1 meets rank 1's bucket 0
          and the run hangs or adds the wrong tensors. A bucket that becomes ready early waits for its
          predecessors.
        - When backward ends, `_finish` runs: launch the buckets that never became ready (a parameter unused in
          this forward never gets its hook called: count its gradient as zero in the flat bucket, so that every
          rank sends the same buffer and none waits forever; `DistributedDataParallel(find_unused_parameters=True)`
          likewise marks such parameters ready after the forward), then `wait()`
          on every handle and copy each averaged slice back into `p.grad` (a parameter without `.grad` gets one).
          **Except** a parameter that *no* rank has a gradient for: its `.grad` stays `None`. `torch.optim` skips
          a parameter whose `.grad` is `None`, but steps one whose gradient is zero, and AdamW's weight decay
          ($\theta \leftarrow \theta(1 - \eta\lambda)$) would shrink an unused parameter every step, which
          single-process training never does. Which parameters some rank has a gradient for is itself a collective
          question: all-reduce a 0/1 flag per parameter (`p.grad is not None`), as torch's DDP all-reduces its
          "locally used" map.
          Backward has no "I am done" hook on parameters; `torch.autograd.Variable._execution_engine.queue_callback(fn)`,
          called from inside backward (the first hook), runs `fn` when the whole backward pass ends: DDP and FSDP
          use exactly that.
        - `no_sync()`: backward passes inside it accumulate into `.grad` locally and communicate nothing; the next
          backward outside it reduces the accumulated sum. Gradient accumulation over $k$ micro-batches then costs
          one all-reduce, not $k$.

        Only trainable parameters take part (`requires_grad=False` ones have no gradient). The state the hooks
        keep per backward pass (gradients still missing per bucket, the next bucket to launch, the handles in
        flight) is reset at the end of `_finish`. The checks build the model from a seed that differs per rank,
        wrap it with your `DDP`, train 5 steps with a `torch.optim` optimizer, and compare with one process
        training the same model on the full batch.
    """)
    lesson.exercise(
        "ddp",
        r'''
        class DDP(nn.Module):
            """Data parallel: forward is module's; backward all-reduces the averaged gradients bucket by bucket."""

            def __init__(self, module: nn.Module, bucket_cap_bytes: int = 25 * 2**20, group=None):
                super().__init__()
                # TODO: refuse a module that is not an nn.Module (TypeError) and bucket_cap_bytes <= 0 (ValueError)
                # TODO: broadcast rank 0's parameters and buffers; list the trainable parameters (a tied one once)
                # TODO: assign the buckets; register a post-accumulate-grad hook on every trainable parameter
                ### BEGIN SOLUTION
                if not isinstance(module, nn.Module):
                    raise TypeError(f"DDP wraps an nn.Module, not {type(module).__name__}")
                if bucket_cap_bytes <= 0:
                    raise ValueError(f"bucket_cap_bytes must be positive, not {bucket_cap_bytes}")
                self.module, self.group = module, group
                self.world_size = dist.get_world_size(group)
                broadcast_parameters(module, src=0, group=group)  # every replica starts from rank 0's weights
                self.params = [p for p in module.parameters() if p.requires_grad]  # a tied weight appears once
                self.buckets = assign_buckets(self.params, bucket_cap_bytes)
                self.bucket_of = {index: b for b, bucket in enumerate(self.buckets) for index in bucket}
                self.require_sync = True
                self._reset()
                for index, p in enumerate(self.params):
                    p.register_post_accumulate_grad_hook(functools.partial(self._gradient_ready, index))
                ### END SOLUTION

            def forward(self, *args, **kwargs):
                return self.module(*args, **kwargs)

            @contextlib.contextmanager
            def no_sync(self):
                """Backward passes inside accumulate .grad locally; the next one outside reduces the sum."""
                # TODO: switch communication off for the duration of the block, and back on after it
                ### BEGIN SOLUTION
                previous, self.require_sync = self.require_sync, False
                try:
                    yield
                finally:
                    self.require_sync = previous
                ### END SOLUTION

            def _reset(self) -> None:
                """The per-backward state: gradients still missing per bucket, next bucket to launch, work in flight."""
                # TODO: initialise the per-backward bookkeeping
                ### BEGIN SOLUTION
                self.missing = [len(bucket) for bucket in self.buckets]
                self.next_bucket = 0  # buckets are launched in order: the same collectives, in the same order, on every rank
                self.in_flight = []  # (bucket index, flat averaged gradients, async work handle)
                self.finish_queued = False
                ### END SOLUTION

            def _gradient_ready(self, index: int, param: torch.Tensor) -> None:
                """Hook: param.grad holds this backward's gradient; launch every bucket that is complete, in order."""
                # TODO: nothing under no_sync; on the first gradient of a backward, queue _finish for its end
                # TODO: count the gradient in its bucket; launch the ready buckets in bucket order
                ### BEGIN SOLUTION
                if not self.require_sync:
                    return
                if not self.finish_queued:
                    torch.autograd.Variable._execution_engine.queue_callback(self._finish)
                    self.finish_queued = True
                self.missing[self.bucket_of[index]] -= 1
                while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
                    self._launch(self.next_bucket)
                ### END SOLUTION

            def _launch(self, b: int) -> None:
                """Flatten bucket b's gradients (zeros where .grad is None), divide by the world size, start the all-reduce."""
                # TODO: one flat tensor per bucket, averaged, dist.all_reduce(..., async_op=True); remember the handle
                ### BEGIN SOLUTION
                grads = [self.params[i].grad if self.params[i].grad is not None else torch.zeros_like(self.params[i])
                         for i in self.buckets[b]]
                flat = torch.cat([g.reshape(-1) for g in grads]).div_(self.world_size)  # sum of g_r / p = the mean
                work = dist.all_reduce(flat, group=self.group, async_op=True)
                self.in_flight.append((b, flat, work))
                self.next_bucket += 1
                ### END SOLUTION

            def _finish(self) -> None:
                """End of backward: launch what is left, wait, write the averaged gradients into .grad (None where no
                rank has one), reset."""
                # TODO: launch the buckets not launched yet (unused parameters); all-reduce, per parameter, whether
                #       this rank has a .grad; wait for every handle, copy each slice back into .grad (a parameter
                #       that no rank has a gradient for keeps .grad None); reset the per-backward state
                ### BEGIN SOLUTION
                while self.next_bucket < len(self.buckets):
                    self._launch(self.next_bucket)
                # per parameter, how many ranks hold a gradient: torch.optim skips a .grad that is None, not a zero one
                has_grad = torch.tensor([int(p.grad is not None) for p in self.params], device=self.params[0].device)
                dist.all_reduce(has_grad, group=self.group)
                for b, flat, work in self.in_flight:
                    work.wait()
                    offset = 0
                    for i in self.buckets[b]:
                        p = self.params[i]
                        averaged = flat[offset : offset + p.numel()].view_as(p)
                        offset += p.numel()
                        if not has_grad[i]:  # no rank used it: .grad stays None, so weight decay does not shrink it
                            continue
                        if p.grad is None:
                            p.grad = averaged.clone()
                        else:
                            p.grad.copy_(averaged)
                self._reset()
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Watching the overlap

        The demo below starts a real world of 2 ranks (separate processes, gloo), wraps an 8-layer MLP in your
        `DDP` with buckets of about two layers, and records on rank 0 when each parameter's gradient became
        ready and when each bucket's all-reduce was launched (by wrapping `dist.all_reduce` in that rank). The
        launches interleave with the gradients: communication starts while backward is still producing the first
        layers' gradients. (Without a passing `DDP` the demo says so and draws nothing.)
    """)
    lesson.code(r"""
        def overlap_timeline(ddp_class, bucket_cap_bytes):
            # runs in every rank: its own events, measured from the start of backward
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh()) for _ in range(8)])
            events, start = [], [0.0]
            for name, p in model.named_parameters():
                p.register_post_accumulate_grad_hook(lambda p, name=name: events.append(("grad", name, time.perf_counter() - start[0])))
            original = dist.all_reduce
            def recording_all_reduce(tensor, *args, **kwargs):
                events.append(("all_reduce", f"{tensor.numel()} values", time.perf_counter() - start[0]))
                return original(tensor, *args, **kwargs)
            ddp = ddp_class(model, bucket_cap_bytes=bucket_cap_bytes)
            x = torch.randn(64, 256)
            dist.all_reduce = recording_all_reduce
            try:
                for _ in range(2):  # the second backward is the one we keep (the first warms up)
                    events.clear()
                    start[0] = time.perf_counter()
                    ddp(x).pow(2).mean().backward()
                    events.append(("end", "backward returns", time.perf_counter() - start[0]))
            finally:
                dist.all_reduce = original
            return events

        try:
            events = expect_ranks_ok(run_ranks(overlap_timeline, 2, args=(DDP, 2 * 257 * 256 * 4), deadline=120), input="demo")[0]
        except Exception as error:  # DDP not written yet (or failing): nothing to draw
            print("no timeline:", str(error).splitlines()[0])
        else:
            fig, ax = plt.subplots(figsize=(8, 2.8))
            for kind, y, color in (("grad", 1, "C0"), ("all_reduce", 0, "C3")):
                times = [1e3 * t for k, _, t in events if k == kind]
                ax.scatter(times, [y] * len(times), color=color, marker="|", s=400)
            end = [1e3 * t for k, _, t in events if k == "end"][0]
            ax.axvline(end, color="k", ls=":", label="backward returns (after _finish waited)")
            ax.set_yticks([0, 1], ["all-reduce launched", "gradient ready"])
            ax.set_xlabel("ms since backward started (rank 0)"); ax.set_ylim(-0.6, 1.6); ax.legend(loc="lower right")
            ax.set_title("Buckets are reduced while backward is still running")
            plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### The bucket size trade-off in the α-β model

        For a fixed gradient of $n$ bytes in buckets of $b$ bytes there are $n/b$ all-reduces. When they overlap
        with backward, what the step still waits for at the end is roughly the **last** bucket's all-reduce,
        $2(p-1)\alpha + 2\frac{p-1}{p}\frac{b}{\beta}$, provided the link kept up with backward; the total time on
        the link is $\frac{n}{b}\,2(p-1)\alpha + 2\frac{p-1}{p}\frac{n}{\beta}$. Small buckets shrink the tail but
        multiply the latency term; huge buckets cannot start early. The plot uses the 7B, 8-GPU NVLink numbers of
        section 2 and an *assumed* $\alpha = 10\,\mu s$ per ring step (a round number for the picture, not a
        measurement).
    """)
    lesson.code(r"""
        p, n, beta, alpha = 8, 14e9, 450e9, 10e-6
        bucket = torch.logspace(5, 10, 200)  # bytes
        link_busy = (n / bucket) * 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta
        tail = 2 * (p - 1) * alpha + 2 * (p - 1) / p * bucket / beta
        plt.figure(figsize=(6.5, 3.5))
        plt.loglog(bucket / 2**20, 1e3 * link_busy, label="total time on the link")
        plt.loglog(bucket / 2**20, 1e3 * tail, label="last bucket (exposed after backward)")
        plt.axvline(25, color="k", ls=":", label="DDP default, 25 MB")
        plt.xlabel("bucket size (MB)"); plt.ylabel("ms"); plt.legend(fontsize=8)
        plt.title("14 GB of bf16 gradients, 8 ranks, α = 10 µs (assumed), β = 450 GB/s")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`broadcast_parameters`.** Validation first, because a collective is a promise every rank must keep: a
        rank that raises while the others sit in `dist.broadcast` leaves them waiting until the process group's
        timeout. Broadcasting *in place* keeps the module's tensors (an optimizer created before wrapping still
        points at them). `group_src=` names the source by its rank inside `group`. DDP itself coalesces the
        tensors into large flat buffers before broadcasting (`dist._broadcast_coalesced`, 250 MB at a time),
        trading one copy for far fewer messages; with $\alpha$-dominated small tensors that is the same trade as
        the gradient buckets.

        **`assign_buckets`.** A dictionary of open buckets keyed by (dtype, device), closed at `>=` the cap; the
        sort puts the bucket holding the last parameter first. Real DDP also makes the first bucket small (1 MB)
        and, after the first iteration, *rebuilds* the buckets in the order the gradients actually arrived
        (which differs from the reverse parameter order when modules are used in another order than they are
        defined), broadcasting rank 0's order so that every rank agrees.

        **`DDP`.** The hook counts the gradients still missing in its bucket; the `while` loop launches every
        complete bucket that is next in line, so the order of collectives is the bucket order on every rank even
        when gradients arrive in another order. Dividing before the all-reduce (as DDP does) keeps large sums
        from overflowing in fp16. The end of backward is `_finish`, queued from the first hook: it flushes the
        buckets that did not complete (unused parameters), waits, and writes back, leaving `.grad` `None` where no
        rank has a gradient (`DistributedDataParallel(find_unused_parameters=True)` does the same: a zero there
        would let AdamW's weight decay shrink a parameter that no loss depends on). Production DDP avoids the
        copies entirely with `gradient_as_bucket_view=True`: each `p.grad` *is* a view into its bucket's flat
        tensor, so autograd accumulates straight into the communication buffer.

        **The usual mistakes, and why they are wrong**:
        - *No averaging* (the sum of $p$ gradients: an effective learning rate $p$ times too large) and *averaging
          twice*: every parameter is off after one step.
        - *Broadcast from one's own rank* (or not at all): the replicas start apart and never meet.
        - *A tied weight listed twice* (collecting parameters per module): its gradient travels twice, the bucket
          is larger than DDP's.
        - *The last, partial bucket never flushed* (launching only buckets that reached the cap), and *every bucket
          launched at the end of backward* (correct numbers, no overlap: the check that records the order of
          gradients and launches rejects it).
        - *`no_sync` that still communicates*, and a *`>` instead of `>=`* at the cap.
        - *Zeros written into `.grad` of a parameter no rank used*: SGD without momentum does not notice, AdamW
          with weight decay shrinks that parameter every step.

        **Cost.** Per step each rank sends and receives $2\frac{p-1}{p}$ times the gradient's bytes (ring),
        independent of $p$ for large $p$: that is why data parallelism scales. Memory is the price: every rank
        holds the full weights, gradients and optimizer state (16 bytes per parameter with AdamW in mixed
        precision), which `p02.zero` removes by sharding.

        **In production.** `torch.nn.parallel.DistributedDataParallel` (C++ `Reducer`: the same hooks, buckets,
        `queue_callback`, plus bucket rebuilding, `static_graph`, communication hooks such as fp16/PowerSGD gradient
        compression); Horovod's tensor fusion (the same idea as buckets); DeepSpeed and Megatron-LM's
        `DistributedDataParallel` (contiguous gradient buffers, overlap of the reduce-scatter with backward for
        its distributed optimizer); FSDP/ZeRO-3 (`p02.fsdp`), which shards the parameters themselves.
    """)
    lesson.mistakes()
    return lesson
