"""Source of 04_CUDA_Systems/11_Overlap.ipynb (build with `python -m llm_algo build p04.overlap`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.overlap",
        path="04_CUDA_Systems/11_Overlap.ipynb",
        title_en="Overlapping gradient communication with backward",
        title_zh="通信与计算重叠：反向传播中的分桶异步 all-reduce",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p02.ddp", "p01.collectives_cost"],
    )
    lesson.title(
        intro=r"""
        In `p02.ddp` you wrote a data-parallel wrapper whose hooks all-reduce gradient buckets while backward is
        still running, and a check confirmed that the launches came early. This lesson asks the two questions that
        decide whether that overlap is worth anything on a real cluster: **how much of the communication does it
        actually hide**, and **what does the bucket machinery cost in memory and copies**. A 7B model's bf16
        gradient is 14 GB per step; on 8 GPUs of one NVLink node its ring all-reduce takes about 54 ms and across
        nodes on 400 Gb/s InfiniBand about 0.5 s (the α-β estimates of `p01.collectives_cost`, bandwidths from
        NVIDIA's H100 datasheet), against some 0.6 s of backward for 8192 tokens per GPU. Whether that 0.5 s adds
        to the step or hides behind it is decided by the schedule, and the schedule can be computed before anything
        runs.

        **You will implement** the timeline model of an overlapped step (per-layer backward times and per-bucket
        communication times in, the start and end of every all-reduce and the step's finish time out), and a
        `BucketReducer` that keeps every gradient as a *view* into a flat bucket buffer (no copies: DDP's
        `gradient_as_bucket_view=True`, Megatron-LM's contiguous gradient buffer), launches an in-place
        `all_reduce(async_op=True)` from the hook of each bucket's last gradient, and whose `wait()`, called
        before the optimizer step, waits on the work handles. **Graded against** an event-by-event simulation of
        the same schedule (written differently), single-process training on the full batch on 2 and 3 real
        `torch.distributed` ranks (gloo), `torch.nn.parallel.DistributedDataParallel` (forbidden to you), torch's
        bucket assignment, and a recorder of the order of gradient hooks, all-reduce launches and waits.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：数据并行每步都要对全部梯度做 all-reduce（7B 模型 bf16 梯度 14 GB）；放在反向传播之后，通信时间全部暴露在步时间里；与反向重叠，大部分可以被隐藏。
        - **时间线模型**：第 $b$ 个桶在其最后一个梯度就绪时（$R_b$）才能发出，且链路一次只做一个 all-reduce：$S_b = \max(R_b, E_{b-1})$，$E_b = S_b + C_b$，整步结束于 $\max(B, E_{\text{last}})$。
        - **暴露的通信**：$\max(B, E_{\text{last}}) - B$；至少是最后一个桶的通信时间（它包含第 0 层，反向结束时才就绪），所以桶越小尾巴越短，但每个桶都要付一次延迟 $\alpha$。
        - **零拷贝**：梯度直接作为扁平桶缓冲区的视图（`gradient_as_bucket_view`），autograd 原地累加进缓冲区，all-reduce 原地进行，省掉一份梯度大小的内存和两次拷贝。
        - **异步与等待**：钩子里 `dist.all_reduce(buffer, async_op=True)` 立即返回 work 句柄；优化器更新之前必须 `wait()`，否则用到的是未归约的梯度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The timeline of one overlapped step

        Take a model of $L$ layers (in forward order $0 \dots L-1$). Backward differentiates them in reverse: layer
        $L-1$ first, taking $t_{L-1}$ ms, then $L-2$, and so on, so layer $\ell$'s gradients are ready at

        $$
        r_\ell = \sum_{k=\ell}^{L-1} t_k, \qquad B = r_0 = \sum_k t_k \quad\text{(the end of backward)}.
        $$

        The gradients are grouped into buckets $0 \dots K-1$, launched **in bucket order** (every rank must issue
        its collectives in the same order, `p02.ddp`). Bucket $b$ holds a set of layers; it can start when its
        last gradient exists, $R_b = \max_{\ell \in b} r_\ell$, and the communication link (NCCL's ring, or gloo's
        worker thread here) runs one all-reduce at a time, each taking $C_b$:

        $$
        S_b = \max(R_b,\ E_{b-1}), \qquad E_b = S_b + C_b, \qquad E_{-1} = 0, \qquad
        T_{\text{step}} = \max(B,\ E_{K-1}).
        $$

        Without overlap the step takes $B + \sum_b C_b$. With it, the **exposed** communication is
        $T_{\text{step}} - B$. Two lower bounds follow at once: the bucket holding layer 0 is ready only at $B$,
        so at least its $C_b$ is always exposed; and the link must carry $\sum_b C_b$ after the first bucket is
        ready, so when communication is slower than backward, the step is communication-bound whatever the
        schedule. This is the model behind DDP's defaults: a small first bucket (1 MB) so that the link starts
        early, then 25 MB buckets so that the latency term $2(p-1)\alpha$ per bucket stays small.

        Two things the model leaves out, both of which make real overlap *worse*: on a GPU, NCCL's kernels take
        some of the streaming multiprocessors, so backward slows down while a bucket is in flight
        (`NCCL_MAX_NCHANNELS` bounds the channels, hence the SMs, that communication may take); and a bucket
        launched out of order (a gradient that arrives late because its layer is used early in an unusual
        forward) holds up all the buckets behind it.

        ## 2. Exercise `overlap_schedule`

        `backward_ms[l]` is the backward time of layer `l` (forward order), `buckets[b]` the layers of bucket `b`
        (every layer in exactly one bucket), `comm_ms[b]` the all-reduce time of bucket `b`. Return
        `(finish_ms, intervals)` with `intervals[b] = (start_ms, end_ms)` of bucket `b`'s all-reduce. Refuse
        (ValueError) negative times, a `comm_ms` whose length is not the number of buckets, an empty bucket, and
        buckets that are not a partition of the layers (a layer missing, twice, or out of range). No layers at
        all is refused too.
    """)
    lesson.setup(r"""
        import functools
        import time

        import matplotlib.pyplot as plt
        import torch
        import torch.distributed as dist
        import torch.nn as nn

        from llm_algo.distributed import expect_ranks_ok, run_ranks  # the demo starts real 2-rank worlds

        assign_buckets = lesson.use("p02.ddp", "assign_buckets")  # your bucket assignment from p02.ddp
    """)
    lesson.exercise(
        "overlap_schedule",
        r'''
        def overlap_schedule(
            backward_ms: list[float], buckets: list[list[int]], comm_ms: list[float]
        ) -> tuple[float, list[tuple[float, float]]]:
            """Finish time of an overlapped step and each bucket's (start, end), in ms.

            Backward runs layer L-1 first. Bucket b starts when its last gradient is ready and bucket b-1 has ended.
            """
            # TODO: validate (ValueError): times >= 0, at least one layer, one comm time per bucket, no empty bucket,
            #       the buckets partition range(len(backward_ms))
            # TODO: the time each layer's gradients are ready (backward runs from the last layer to the first)
            # TODO: walk the buckets in order: start = max(ready, previous end); the step ends at max(B, last end)
            ### BEGIN SOLUTION
            layers = len(backward_ms)
            if layers == 0:
                raise ValueError("overlap_schedule needs at least one layer")
            if any(t < 0 for t in backward_ms) or any(t < 0 for t in comm_ms):
                raise ValueError("backward and communication times must be >= 0")
            if len(comm_ms) != len(buckets):
                raise ValueError(f"{len(buckets)} buckets but {len(comm_ms)} communication times")
            if any(len(bucket) == 0 for bucket in buckets):
                raise ValueError("a bucket holds no layer")
            if sorted(layer for bucket in buckets for layer in bucket) != list(range(layers)):
                raise ValueError(f"the buckets must hold every layer 0..{layers - 1} exactly once, got {buckets}")
            ready, clock = [0.0] * layers, 0.0
            for layer in reversed(range(layers)):  # backward: the last layer first
                clock += backward_ms[layer]
                ready[layer] = clock
            link_free, intervals = 0.0, []
            for bucket, cost in zip(buckets, comm_ms):
                start = max(max(ready[layer] for layer in bucket), link_free)  # complete, and the link is free
                link_free = start + cost
                intervals.append((start, link_free))
            return max(clock, link_free), intervals
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What the schedule looks like

        A 12-layer model, backward 5 ms per layer, buckets of 2 layers in reverse order (the order `assign_buckets`
        gives), for three link speeds. With a fast link the exposed part is the last bucket's all-reduce; when a
        bucket's all-reduce takes longer than the backward of its layers, the buckets queue up on the link and the
        step becomes communication-bound. (Without a passing `overlap_schedule` the cell says so and draws nothing.)
    """)
    lesson.code(r"""
        layers, per_layer = 12, 5.0
        buckets = [[layers - 1 - 2 * b, layers - 2 - 2 * b] for b in range(layers // 2)]  # [[11, 10], [9, 8], ...]
        try:
            rows = [(label, comm, *overlap_schedule([per_layer] * layers, buckets, [comm] * len(buckets)))
                    for label, comm in (("fast link", 4.0), ("balanced", 10.0), ("slow link", 16.0))]
        except NotImplementedError:
            print("overlap_schedule is not written yet: nothing to draw")
        else:
            fig, axes = plt.subplots(len(rows), 1, figsize=(8, 1.6 * len(rows)), sharex=True)
            for ax, (label, comm, finish, intervals) in zip(axes, rows):
                ax.broken_barh([(per_layer * k, per_layer) for k in range(layers)], (1, 0.8), facecolors=["C0", "C9"] * 6)
                ax.broken_barh([(s, e - s) for s, e in intervals], (0, 0.8), facecolors=["C3", "C1"] * 6)
                ax.axvline(layers * per_layer, color="k", ls=":")
                no_overlap = layers * per_layer + comm * len(buckets)
                ax.set_title(f"{label}: {comm:g} ms per bucket; step {finish:g} ms (no overlap: {no_overlap:g} ms)", fontsize=9)
                ax.set_yticks([0.4, 1.4], ["all-reduce", "backward"])
            axes[-1].set_xlabel("ms (backward ends at the dotted line)")
            plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. Buckets without copies

        The `DDP` of `p02.ddp` concatenates each bucket's gradients into a new flat tensor (`torch.cat`), sends it,
        and copies the averaged slices back into `.grad`: one extra gradient-sized buffer in flight and two copies
        of every gradient per step. For a 7B model in bf16 that is 14 GB of memory and 28 GB of memory traffic per
        step. Production systems allocate the flat bucket buffers **once** and make every `p.grad` a view into
        them (`DistributedDataParallel(gradient_as_bucket_view=True)`; Megatron-LM's DDP keeps all gradients in
        one contiguous buffer, with `overlap_grad_reduce=True` to launch from hooks and `finish_grad_sync()` to
        wait before the step; FSDP2 does the same with its reduce-scatter). Then:

        1. **autograd accumulates in place**: when `p.grad` exists, backward adds the new gradient into it
           (`AccumulateGrad` does `grad += new` when no graph is being built), so the bucket buffer fills by
           itself;
        2. **the all-reduce is in place**: `buffer.div_(p)` then `dist.all_reduce(buffer, async_op=True)`, and the
           averaged gradients are already where the optimizer reads them;
        3. **`zero_grad` must zero, not free**: `optimizer.zero_grad()` sets `.grad = None` by default, after
           which autograd creates a fresh tensor that is *not* a view. DDP handles it the way you will: in the
           hook, when `p.grad` is not the view any more, copy it into the view once and point `p.grad` back at
           the view (and the reducer's own `zero_grad()` zeroes the buffers in place).

        **Waiting.** `all_reduce(..., async_op=True)` returns a `Work` handle at once; `work.wait()` blocks until
        the result is in the buffer (on a GPU it makes the current stream wait on NCCL's, without blocking the
        CPU). `p02.ddp` waited from a callback queued at the end of backward; here `wait()` is an explicit call
        the training loop makes before `optimizer.step()`, as in Megatron-LM: the optimizer step is the first
        reader of the gradients, and gradient clipping (a norm over all of them) must also come after it.

        ## 4. Exercise `BucketReducer`

        `BucketReducer(params, bucket_cap_bytes, group)` takes a list of trainable tensors (all used in every
        forward; `p02.ddp` dealt with unused ones), assigns buckets with your `assign_buckets` from `p02.ddp`
        (walking the parameters in reverse), allocates `self.buffers[b]`, one zeroed flat tensor per bucket (the
        bucket's dtype and device, the parameters in bucket order), sets every `p.grad` to its view, and
        registers `register_post_accumulate_grad_hook` on every parameter. The hook counts the gradient and
        launches every complete bucket that is next in bucket order: divide its buffer by the world size, start
        `dist.all_reduce(buffer, group=group, async_op=True)`, keep the handle. `wait()` refuses to run when some
        bucket was never launched (RuntimeError: backward did not reach it), waits on every handle, and resets
        the per-backward state. `zero_grad()` zeroes the buffers and re-attaches the views. Refuse bad input
        before anything else: `params` not a non-empty list or tuple of tensors (TypeError for a non-tensor,
        ValueError for an empty list, a tensor without `requires_grad`, or the same tensor twice), and
        `bucket_cap_bytes <= 0` (ValueError).
    """)
    lesson.exercise(
        "bucket_reducer",
        r'''
        class BucketReducer:
            """Gradients live in flat bucket buffers; hooks all-reduce each bucket in place as it fills; wait() before step."""

            def __init__(self, params, bucket_cap_bytes: int = 25 * 2**20, group=None):
                # TODO: validate params (TypeError / ValueError) and bucket_cap_bytes (ValueError), before anything else
                # TODO: buckets from assign_buckets; one zeroed flat buffer per bucket; p.grad = its view
                # TODO: a post-accumulate-grad hook on every parameter; the per-backward state
                ### BEGIN SOLUTION
                if not isinstance(params, list | tuple):
                    raise TypeError(f"params must be a list of tensors, not {type(params).__name__}")
                if any(not isinstance(p, torch.Tensor) for p in params):
                    raise TypeError("every entry of params must be a torch.Tensor")
                if len(params) == 0:
                    raise ValueError("params is empty: nothing to reduce")
                if any(not p.requires_grad for p in params):
                    raise ValueError("every parameter must require grad (a frozen one never fires its hook)")
                if len({id(p) for p in params}) != len(params):
                    raise ValueError("a parameter appears twice (a tied weight must be listed once)")
                if bucket_cap_bytes <= 0:
                    raise ValueError(f"bucket_cap_bytes must be positive, not {bucket_cap_bytes}")
                self.params, self.group = list(params), group
                self.world_size = dist.get_world_size(group)
                self.buckets = assign_buckets(self.params, bucket_cap_bytes)
                self.bucket_of = {i: b for b, bucket in enumerate(self.buckets) for i in bucket}
                self.buffers, self.views = [], [None] * len(self.params)
                for bucket in self.buckets:
                    first = self.params[bucket[0]]
                    buffer = torch.zeros(sum(self.params[i].numel() for i in bucket), dtype=first.dtype, device=first.device)
                    offset = 0
                    for i in bucket:
                        n = self.params[i].numel()
                        self.views[i] = buffer[offset : offset + n].view_as(self.params[i])
                        offset += n
                    self.buffers.append(buffer)
                self.zero_grad()
                self._reset()
                for index, p in enumerate(self.params):
                    p.register_post_accumulate_grad_hook(functools.partial(self._gradient_ready, index))
                ### END SOLUTION

            def zero_grad(self) -> None:
                """Zero the buffers in place and make every p.grad its view again."""
                # TODO: zero each buffer; point each parameter's .grad at its view
                ### BEGIN SOLUTION
                for buffer in self.buffers:
                    buffer.zero_()
                for p, view in zip(self.params, self.views):
                    p.grad = view
                ### END SOLUTION

            def _reset(self) -> None:
                """Per-backward state: gradients missing per bucket, the next bucket to launch, the handles in flight."""
                # TODO: initialise the bookkeeping
                ### BEGIN SOLUTION
                self.missing = [len(bucket) for bucket in self.buckets]
                self.next_bucket = 0
                self.handles = []
                ### END SOLUTION

            def _gradient_ready(self, index: int, param: torch.Tensor) -> None:
                """Hook: param.grad holds its accumulated gradient; make it the view; launch the complete buckets in order."""
                # TODO: if param.grad is not the view any more (zero_grad(set_to_none=True)), copy it in, re-point .grad
                # TODO: count it; launch every complete bucket that is next in bucket order
                ### BEGIN SOLUTION
                view = self.views[index]
                if param.grad.data_ptr() != view.data_ptr():  # autograd made a fresh tensor: bring it home
                    view.copy_(param.grad)
                    param.grad = view
                self.missing[self.bucket_of[index]] -= 1
                while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
                    buffer = self.buffers[self.next_bucket].div_(self.world_size)  # sum of g_r / p = the mean
                    self.handles.append(dist.all_reduce(buffer, group=self.group, async_op=True))
                    self.next_bucket += 1
                ### END SOLUTION

            def wait(self) -> None:
                """Before optimizer.step(): every bucket must have been launched; wait on each handle; reset."""
                # TODO: RuntimeError if a bucket was never launched; wait on every handle; reset the state
                ### BEGIN SOLUTION
                if self.next_bucket != len(self.buckets):
                    raise RuntimeError(
                        f"only {self.next_bucket} of {len(self.buckets)} buckets were launched: call wait() after "
                        "a backward that produces every parameter's gradient"
                    )
                for work in self.handles:
                    work.wait()
                self._reset()
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Measuring the overlap on two ranks

        The demo below starts a real world of 2 ranks (processes, gloo) and times one training step's backward +
        communication of an 8-layer MLP (512 × 512 layers, 8 MB of float32 gradients, buckets of two layers) three ways, median of 5:
        backward alone; backward, then one all-reduce per bucket after it (no overlap); and your `BucketReducer`
        (launches from the hooks, `wait()` after backward). On this machine the ranks share a few CPU cores with
        gloo's worker threads, so the numbers move from run to run and the overlap may be small or absent: gloo
        on one host is memory copies on the same cores that compute. On GPUs with NCCL, communication runs on its
        own engine and links, which is where the overlap pays. The numbers are reported, never graded; the
        timeline model of section 1 is how to reason about what a GPU cluster would show.
    """)
    lesson.code(r"""
        def time_step(reducer_class, mode, layers=8, width=512, repeats=5):
            # in every rank: median ms of backward (+ communication) for one mode
            torch.set_num_threads(1)
            torch.manual_seed(0)
            model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(layers)])
            params = list(model.parameters())
            reducer = reducer_class(params, bucket_cap_bytes=2 * (width + 1) * width * 4) if mode == "overlapped" else None
            x = torch.randn(128, width)
            times = []
            for _ in range(repeats + 1):  # the first step warms up
                if reducer is not None:
                    reducer.zero_grad()
                else:
                    model.zero_grad()
                dist.barrier()
                start = time.perf_counter()
                model(x).pow(2).mean().backward()
                if mode == "after backward":
                    for bucket in assign_buckets(params, 2 * (width + 1) * width * 4):
                        flat = torch.cat([params[i].grad.reshape(-1) for i in bucket])
                        dist.all_reduce(flat)
                elif reducer is not None:
                    reducer.wait()
                times.append(1e3 * (time.perf_counter() - start))
            return sorted(times[1:])[repeats // 2]

        try:
            measured = {mode: expect_ranks_ok(run_ranks(time_step, 2, args=(BucketReducer, mode), deadline=180), input=mode)[0]
                        for mode in ("backward only", "after backward", "overlapped")}
        except Exception as error:  # BucketReducer not written yet (or failing): nothing to measure
            print("no measurement:", str(error).splitlines()[0])
        else:
            for mode, ms in measured.items():
                print(f"{mode:>15}: {ms:7.1f} ms (rank 0, median of 5)")
            hidden = measured["after backward"] - measured["overlapped"]
            exposed = measured["after backward"] - measured["backward only"]
            print(f"communication after backward: {exposed:.1f} ms; hidden by overlapping: {hidden:.1f} ms")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`overlap_schedule`.** One pass computes the ready time of every layer (a suffix sum: backward goes from
        the last layer to the first), one pass walks the buckets keeping the time the link becomes free. The step
        ends at $\max(B, E_{K-1})$; when the buckets partition the layers the bucket holding layer 0 is ready only
        at $B$, so $E_{K-1} \ge B$ and the `max` is a safety net, not a case that occurs. The checks compare you
        with an event-by-event simulation (a clock that jumps from one event to the next: a layer finishing, an
        all-reduce finishing), written without the recurrence.

        **`BucketReducer`.** The buffers are allocated once; each `p.grad` is a view (`buffer[offset:offset+n]
        .view_as(p)`), so backward accumulates straight into the communication buffer and the all-reduce leaves
        the mean where the optimizer reads it. The data-pointer test in the hook catches a `.grad` that someone
        replaced (the default `zero_grad(set_to_none=True)`), which would otherwise silently leave stale values in
        the buffer. The `while` loop launches buckets in bucket order on every rank, as in `p02.ddp`. `wait()`
        refuses to wait for a bucket that was never launched: with a view-based buffer a missing gradient would
        send last step's stale values, and a rank whose backward skipped a bucket would otherwise leave the other
        ranks waiting in an all-reduce it never joins.

        **The usual mistakes, and why they are wrong**:
        - *A bucket ready at its first gradient* instead of its last, and *a link that runs every all-reduce at
          once* (no `max` with the previous end): schedules that finish too early.
        - *Backward in forward order* (layer 0 first): the ready times are reversed.
        - *No averaging*, *`async_op=False`* (correct numbers, but every launch blocks the backward thread: the
          recorder sees a blocking call), *launching everything in `wait()`* (correct numbers, no overlap),
          *copying the gradients out* instead of keeping views, *not re-pointing `.grad`* after
          `zero_grad(set_to_none=True)`, and a *`wait()` that does not reset*.

        **In production.** `DistributedDataParallel(gradient_as_bucket_view=True, bucket_cap_mb=...)`; Megatron-LM
        core's `DistributedDataParallel` with `overlap_grad_reduce=True`, a contiguous gradient buffer split into
        buckets (`bucket_size`) and `finish_grad_sync()` before the optimizer; DeepSpeed ZeRO's
        `overlap_comm=True` with `reduce_bucket_size`. Where the parameters are sharded (ZeRO-3, FSDP, Megatron's
        distributed optimizer) the *other* direction overlaps too: the all-gather of the next layer's parameters
        runs during the current layer's forward (FSDP's prefetch, `p02.fsdp`). The timeline model is what their
        tuning guides reason with: if the last bucket's all-reduce is the exposed part, make it smaller; if the
        link is busy all the time, no bucket size helps, and the answer is fewer bytes (bf16 or fp8 gradients,
        sharding) or more bandwidth.
    """)
    lesson.mistakes()
    return lesson
