"""Source of 04_CUDA_Systems/12_Offload.ipynb (build with `python -m llm_algo build p04.offload`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.offload",
        path="04_CUDA_Systems/12_Offload.ipynb",
        title_en="Optimizer-state offload with prefetch",
        title_zh="优化器状态卸载到 CPU：锁页内存、侧流预取与事件同步",
        difficulty="hard",
        device="cpu",
        minutes=75,
        prerequisites=["p02.adamw", "p04.overlap"],
    )
    lesson.title(
        intro=r"""
        AdamW keeps two moments per parameter. In fp32 that is 8 bytes per parameter, twice the bf16 weights
        themselves: 56 GB for a 7B model, more than half of an 80 GB GPU before a single activation is stored.
        ZeRO-Offload (Ren et al., *ZeRO-Offload: Democratizing Billion-Scale Model Training*, USENIX ATC 2021)
        moved the optimizer state and the step to the CPU and trained a 13B model on one 32 GB V100; DeepSpeed
        (`offload_optimizer`), FSDP (`CPUOffload`) and torchao's `CPUOffloadOptimizer` ship variants of it. The
        price is the PCIe link: 32 GB/s per direction at most on PCIe 4.0 x16 and 64 GB/s on PCIe 5.0 (about 25
        and 50 in practice), against 2-5 TB/s of HBM (NVIDIA's A100, H100 and H200 datasheets), so whether offload
        costs 5% or 50% of a step depends on overlapping the transfers with work.

        **You will implement** `OffloadedAdamW`: the moments live in CPU memory (pinned when there is a GPU, so
        that copies can be asynchronous), the parameters are split into groups, and the step streams each group's
        moments to the device, updates the group there and sends the moments back, while the **next** group's
        moments are already being copied on a side stream, ordered by CUDA events. On this CPU the stream calls
        are a wrapper that does nothing (the code path is the same); the lesson explains what each one does on a
        GPU. **Graded against** `torch.optim.AdamW` (same parameters and moments after several steps), a
        recorder of the order of prefetches and updates, the bytes held on the device measured by the checks
        (every tensor the step allocates there, followed by weak references) against the closed-form split between
        device and host, then `memory()` against that measurement, a recorder of the copies (every transfer
        `non_blocking=True`), a recorder of the stream and event calls (copies on the side stream, an event
        recorded after them and waited on before the update, the next group's copies issued first), and, on a GPU, pinned memory and the same order with real streams and events.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：AdamW 的两个 fp32 动量每个参数 8 字节，7B 模型就是 56 GB；把它们放在 CPU 内存里，GPU 上只留参数和梯度（ZeRO-Offload）。
        - **代价**：PCIe（每方向实际约 25–50 GB/s）比 HBM（2–5 TB/s）慢两个数量级；每步要把动量搬上来再搬回去，不与计算重叠就会主导步时间。
        - **锁页内存（pinned memory）**：只有锁页的主机内存才能被 DMA 引擎异步拷贝；`non_blocking=True` 配合锁页内存，CPU 发出拷贝后立即返回。
        - **侧流预取**：在第二个 CUDA 流上拷贝下一组的动量，用事件（event）让计算流在用到它之前等待；拷贝和当前组的更新同时进行。
        - **顺序**：预取 0、预取 1、更新 0、预取 2、更新 1……；任一时刻设备上最多两组的动量。
        - **主权重（master weights）**：bf16 参数配 fp32 主权重与 fp32 动量，每个元素 12 字节随组搬运；更新在 fp32 主权重上做，再舍入写回参数。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Where the bytes live

        For $N$ parameters trained in bf16 with AdamW, per parameter: 2 bytes of weight, 2 of gradient, 8 of fp32
        moments (and 4 more for fp32 master weights in mixed precision, `p01.training_memory`). Offloading the
        moments leaves $4N$ bytes on the device, plus the moments of the groups in flight. With the moments in
        $G$ groups and a prefetch depth of one, at most two groups are on the device at once:

        $$
        \text{device} = 4N + 2 \cdot 8\,\frac{N}{G}, \qquad \text{host} = 8N .
        $$

        A step moves $8N$ bytes to the device and $8N$ back: for 7B parameters, 56 GB each way, about 2.2 s per
        direction at 25 GB/s. That is why ZeRO-Offload does the update **on the CPU** instead (only the bf16
        gradients go down and the bf16 weights come back, $2N + 2N$ bytes) and overlaps it with the next
        backward, and why a streamed GPU update like this lesson's pays off when the step is long (large batches,
        long sequences) or when the state does not fit at all. The mechanism is the same in both: pinned host
        buffers, asynchronous copies, a side stream and events.

        ## 2. Streams and events, in four calls

        A CUDA **stream** is a queue of work that runs in order; work on different streams may run at the same
        time, and the GPU's copy engines run host-device copies alongside kernels. The four calls this lesson
        needs, wrapped in the `SideStream` class below (on a CPU every method does nothing, so the same code runs
        here and on a GPU):

        - `with side:` puts the copies issued inside on the side stream (`torch.cuda.stream(s)`);
        - `side.record(key)`: an event recorded on the side stream after those copies (`torch.cuda.Event().record(s)`);
        - `side.wait(key)`: the *current* stream waits for that event before running what comes next (a GPU-side
          wait: the CPU does not block, `torch.cuda.current_stream().wait_event(e)`);
        - `side.hand_over(tensors)`: tensors allocated on the side stream and used on the current one must be
          marked with `tensor.record_stream(current)`, or the caching allocator may give their memory to another
          tensor while the current stream still reads it.

        A copy from the host is asynchronous only when the host memory is **pinned** (page-locked, so the DMA
        engine can read it while the CPU goes on): `tensor.pin_memory()` (only where CUDA exists: it needs the
        driver) and `.to(device, non_blocking=True)`. From pageable memory, `non_blocking=True` silently becomes a
        staged, synchronous copy. The copies back (device to pinned host) are asynchronous too, which is why the
        step must **synchronize** before the host memory is read again (the next step's prefetch): the last
        update's moments may still be on their way.
    """)
    lesson.setup(r"""
        import contextlib

        import matplotlib.pyplot as plt
        import torch

        adamw_step = lesson.use("p02.adamw", "adamw_step")  # your in-place AdamW update from p02.adamw


        class SideStream:
            # On a GPU: a second CUDA stream and one event per key. On a CPU: the same calls, doing nothing.
            def __init__(self, device: torch.device, enabled: bool = True):
                self.cuda = device.type == "cuda"
                self.stream = torch.cuda.Stream(device) if self.cuda and enabled else None
                self.events = {}

            def __enter__(self):
                self._context = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
                return self._context.__enter__()

            def __exit__(self, *exc):
                return self._context.__exit__(*exc)

            def record(self, key) -> None:
                if self.stream is not None:
                    event = torch.cuda.Event()
                    event.record(self.stream)
                    self.events[key] = event

            def wait(self, key) -> None:
                if self.stream is not None:
                    torch.cuda.current_stream().wait_event(self.events.pop(key))

            def hand_over(self, tensors) -> None:
                if self.stream is not None:
                    for tensor in tensors:
                        tensor.record_stream(torch.cuda.current_stream())

            def synchronize(self) -> None:
                if self.cuda:
                    torch.cuda.current_stream().synchronize()
    """)
    lesson.md(r"""
        ## 3. Exercise `OffloadedAdamW`

        `OffloadedAdamW(params, lr, betas, eps, weight_decay, group_numel, master_weights)` takes a list of
        parameters on one device (`self.device`). It splits them, in order, into groups (`self.groups`, lists of
        indices): a group is closed when adding the next parameter would take it past `group_numel` elements, and
        a parameter larger than `group_numel` is a group of its own. `self.host_state[i]` is the tuple of
        parameter `i`'s host tensors on the CPU, pinned when `torch.cuda.is_available()`:
        `(exp_avg, exp_avg_sq)`, zeros of its shape and dtype; with `master_weights=True` (mixed precision: bf16
        parameters on the device, the optimizer in fp32) `(exp_avg, exp_avg_sq, master)`, the moments in float32
        and `master` a float32 copy of the parameter. `self.side = SideStream(self.device)`.

        - `_prefetch(g)`: on the side stream, copy group `g`'s moments into new device tensors,
          `torch.empty_like(t, device=self.device).copy_(t, non_blocking=True)`, kept in `self.staged[g]` (a list
          of tuples in group order), then `self.side.record(g)`. (Not `t.to(device)`: on a CPU that returns `t`
          itself, and the "device" copy would be the host tensor.)
        - `_update(g)`: `self.side.wait(g)` and `hand_over` the staged tensors; then for each parameter of the
          group that has a gradient, your `adamw_step` from `p02.adamw` (taken in the setup cell) with the step
          count `self.t`, in place on the staged moments. With master weights the update runs on the staged
          fp32 master with the gradient in fp32, and the parameter receives the master rounded to its dtype
          (`p.copy_(master)`). Copy every staged tensor back into its host tensor (`copy_(...,
          non_blocking=True)`) and drop `self.staged[g]`. The arithmetic is `p02.adamw`'s; this
          exercise is about where the bytes are and when they move.
        - `step()`: increment $t$; prefetch group 0; for every group $g$, prefetch $g+1$ (if any) **before**
          updating $g$; finally `self.side.synchronize()`. Parameters without a gradient are skipped (their
          moments still travel; that keeps the groups simple).
        - `memory()`: `{"device": bytes staged, "host": bytes of host_state}`: per element $2b$ staged or on the
          host for moments in the parameter's $b$-byte dtype, 12 with master weights (two fp32 moments + fp32 master).
          The checks weigh the tensors your step allocates on the device themselves (weak references), so a group
          is off the device only when nothing refers to it any more.

        Refuse (ValueError) `lr < 0`, betas outside $[0, 1)$, `eps <= 0`, `weight_decay < 0`, `group_numel < 1`,
        no parameters, the same parameter twice, parameters on different devices; (TypeError) a non-tensor.
        `torch.optim.AdamW` is forbidden: it is the reference.
    """)
    lesson.exercise(
        "offloaded_adamw",
        r'''
        class OffloadedAdamW:
            """AdamW whose moments live in (pinned) host memory and are streamed through the device group by group."""

            def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, group_numel=2**20,
                         master_weights=False):
                # TODO: validate (TypeError for a non-tensor; ValueError for the hyperparameters, no/duplicate
                #       parameters, several devices)
                # TODO: the groups (in order, closed before exceeding group_numel), the host tensors (pinned if CUDA;
                #       fp32 moments and an fp32 master copy with master_weights), the side stream, staged, the step count
                ### BEGIN SOLUTION
                params = list(params)
                if any(not isinstance(p, torch.Tensor) for p in params):
                    raise TypeError("every parameter must be a torch.Tensor")
                if not params:
                    raise ValueError("no parameters to optimize")
                if len({id(p) for p in params}) != len(params):
                    raise ValueError("a parameter appears twice")
                if len({p.device for p in params}) != 1:
                    raise ValueError(f"the parameters are on several devices: {sorted({str(p.device) for p in params})}")
                if lr < 0 or eps <= 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
                    raise ValueError(f"bad hyperparameters: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
                if group_numel < 1:
                    raise ValueError(f"group_numel must be at least 1, not {group_numel}")
                self.params, self.device = params, params[0].device
                self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
                self.master_weights = master_weights
                self.groups, size = [], 0
                for i, p in enumerate(params):
                    if not self.groups or size + p.numel() > group_numel:
                        self.groups.append([])
                        size = 0
                    self.groups[-1].append(i)
                    size += p.numel()
                pin = torch.cuda.is_available()  # pin_memory() needs the CUDA driver
                self.host_state = []
                for p in params:
                    dtype = torch.float32 if master_weights else p.dtype
                    host = [torch.zeros(p.shape, dtype=dtype, device="cpu") for _ in range(2)]
                    if master_weights:
                        host.append(p.detach().to("cpu", torch.float32, copy=True))  # copy: never the parameter itself
                    self.host_state.append(tuple(t.pin_memory() for t in host) if pin else tuple(host))
                self.side = SideStream(self.device)
                self.staged = {}
                self.t = 0
                ### END SOLUTION

            def memory(self) -> dict:
                """Bytes of optimizer state staged on the device and kept on the host."""
                # TODO: sum numel * element_size over self.staged and over self.host_state
                ### BEGIN SOLUTION
                def size(tuples):
                    return sum(t.numel() * t.element_size() for group in tuples for t in group)

                return {"device": sum(size(staged) for staged in self.staged.values()), "host": size(self.host_state)}
                ### END SOLUTION

            def _prefetch(self, g: int) -> None:
                """On the side stream: group g's moments to the device (non_blocking) into self.staged[g]; record event g."""
                # TODO: copies inside `with self.side:`, then self.side.record(g)
                ### BEGIN SOLUTION
                with self.side:
                    self.staged[g] = [
                        tuple(torch.empty_like(t, device=self.device).copy_(t, non_blocking=True) for t in self.host_state[i])
                        for i in self.groups[g]
                    ]
                self.side.record(g)
                ### END SOLUTION

            @torch.no_grad()
            def _update(self, g: int) -> None:
                """Wait for group g's state, AdamW-update its parameters, send the state back, drop it."""
                # TODO: self.side.wait(g); hand_over the staged tensors
                # TODO: adamw_step (your p02.adamw) for each parameter with a gradient, on the staged moments
                #       (with master weights: on the fp32 master, then copy it into the parameter)
                # TODO: copy the staged tensors back to the host (non_blocking) and delete self.staged[g]
                ### BEGIN SOLUTION
                self.side.wait(g)
                self.side.hand_over([t for staged in self.staged[g] for t in staged])
                hyper = dict(lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
                             weight_decay=self.weight_decay)
                for i, staged in zip(self.groups[g], self.staged[g]):
                    p = self.params[i]
                    if p.grad is not None and self.master_weights:  # fp32 update, then rounded into the parameter
                        m, v, master = staged
                        adamw_step(master, p.grad.float(), m, v, self.t, **hyper)
                        p.copy_(master)
                    elif p.grad is not None:  # p02.adamw's update, in place on the staged moments
                        m, v = staged
                        adamw_step(p, p.grad, m, v, self.t, **hyper)
                    for host, device_copy in zip(self.host_state[i], staged):
                        host.copy_(device_copy, non_blocking=True)
                del self.staged[g]
                ### END SOLUTION

            def step(self) -> None:
                """One AdamW step: prefetch group g+1 while group g is updated; synchronize at the end."""
                # TODO: t += 1; prefetch 0; for each g: prefetch g+1 (if any), then update g; synchronize
                ### BEGIN SOLUTION
                self.t += 1
                self._prefetch(0)
                for g in range(len(self.groups)):
                    if g + 1 < len(self.groups):
                        self._prefetch(g + 1)
                    self._update(g)
                self.side.synchronize()  # the last copies back to pinned memory must land before the next step reads it
                ### END SOLUTION

            def zero_grad(self) -> None:
                for p in self.params:
                    p.grad = None
    ''',
    )
    lesson.md(r"""
        ### The timeline of a step, serial and prefetched

        Six groups, each taking 3 ms to copy up, 4 ms to update and 3 ms to copy back (illustrative numbers, of
        the order of a few hundred MB of moments per group on PCIe 4.0). Serially, each group waits for its own
        copy; with the prefetch on a side stream, the copy of group $g+1$ runs during the update of $g$, and the
        copy engine for the other direction takes the copies back. With two device buffers (the memory bound of
        section 1), group $g$'s copy can only start once group $g-2$'s update has freed its buffer. The cell
        computes both schedules with three queues (copies up, compute, copies down) and draws them.
    """)
    lesson.code(r"""
        def offload_timeline(groups, up, compute, down, prefetch):
            # (lane, start, end) bars: a lane runs one thing at a time, in order
            free = {"H2D copy": 0.0, "update": 0.0, "D2H copy": 0.0}
            bars, arrived, updated = [], [0.0] * groups, [0.0] * groups
            for g in range(groups):
                if prefetch:  # two device buffers: group g's copy reuses the one group g - 2's update has freed
                    ready_to_copy = max(free["H2D copy"], updated[g - 2] if g >= 2 else 0.0)
                else:
                    ready_to_copy = max(free["H2D copy"], free["update"])
                arrived[g] = ready_to_copy + up
                bars.append(("H2D copy", ready_to_copy, arrived[g]))
                free["H2D copy"] = arrived[g]
                start = max(free["update"], arrived[g])
                bars.append(("update", start, start + compute))
                free["update"] = updated[g] = start + compute
                back = max(free["D2H copy"], free["update"])
                bars.append(("D2H copy", back, back + down))
                free["D2H copy"] = back + down
                if not prefetch:
                    free["update"] = free["D2H copy"]
            return bars

        fig, axes = plt.subplots(2, 1, figsize=(8, 3.4), sharex=True)
        lanes = ["H2D copy", "update", "D2H copy"]
        for ax, prefetch in zip(axes, (False, True)):
            bars = offload_timeline(6, 3.0, 4.0, 3.0, prefetch)
            for lane, start, end in bars:
                ax.broken_barh([(start, end - start)], (lanes.index(lane), 0.8), facecolors=f"C{lanes.index(lane)}",
                               edgecolor="white")
            ax.set_yticks([0.4, 1.4, 2.4], lanes)
            ax.set_title(("prefetch on a side stream" if prefetch else "serial") + f": {max(e for _, _, e in bars):g} ms", fontsize=9)
        axes[-1].set_xlabel("ms")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 4. Reading the solution

        **Validation and groups.** Hyperparameters are checked as in `torch.optim.AdamW`. The groups are closed
        before they would exceed `group_numel`, so a group is the unit of device memory for the moments: at most
        two groups are staged at once (the one being updated and the one prefetched). The checks do not take
        `memory()`'s word for it: they watch every tensor the step allocates on the device (on this CPU, the CPU),
        follow each with a weak reference, and weigh those still alive at the start of each update against the
        closed form, and zero after the step; only then do they compare `memory()` with what they measured. A
        staged group kept anywhere (in `self.staged`, another list, an attribute) stays alive and is counted.

        **What `memory()` counts on a GPU.** The CPU only *enqueues* work, and usually runs ahead of the GPU: by
        the time `_update(g)` returns, the GPU may not have started it, and `del self.staged[g]` only returns the
        memory to PyTorch's caching allocator, which (thanks to `record_stream`) hands it out again only once the
        streams that use it have passed that point. `memory()` is the bookkeeping of what the algorithm holds;
        `torch.cuda.max_memory_allocated()` can be higher when the CPU runs ahead. Real implementations bound it
        with a fixed pair of device buffers that the copies write into, as the timeline above assumes.

        **Pinned memory.** `pin_memory()` returns a page-locked copy; it needs the CUDA driver, so it is taken only
        when `torch.cuda.is_available()`. On a GPU a check asserts that every host moment is pinned.

        **The order of calls.** `_prefetch(g + 1)` is issued *before* `_update(g)`: the side stream then copies
        while the current stream computes. `side.wait(g)` makes the current stream wait on event `g` (the copy
        of group `g` finished); without it the update may read moments that are still arriving. `hand_over`
        (`record_stream`) keeps the allocator from reusing the staged memory too early. The final
        `synchronize()` makes the asynchronous copies back complete before the step returns: the next step's
        prefetch reads the host moments, and the CPU has no other way to know they have landed.

        **The update** is `p02.adamw`'s `adamw_step`, in place on the staged moments, with the step count
        incremented once per `step()` before any group is updated (every group of one step uses the same $t$).
        With master weights it runs on the fp32 master (a bf16 parameter has 8 significant bits: at
        $|p| \approx 1$ any update smaller than $2^{-8}$, half its resolution, rounds away), and the
        parameter is overwritten with the rounded master; the master travels with the moments, 12 bytes per
        element instead of 8, all of them off the device between steps.

        **The usual mistakes, and why they are wrong**: prefetching a group
        only when it is its turn (no overlap: the recorder sees update $g$ before prefetch $g+1$); keeping every
        group on the device (memory); spent groups kept in another list or attribute while `memory()`, summing
        `self.staged`, reports two (the measured bytes); a blocking copy (`non_blocking` missing); the copy back forgotten (the
        moments on the host never change: the second step differs); the step count incremented per group instead
        of per step; staged moments never dropped (device memory grows with every group); the master never
        copied into the parameter; bf16 moments next to an fp32 master; and, from the recorder of stream calls, the
        copies issued on the current stream (no prefetch at all), no `side.wait(g)`, the event recorded before the
        copies, the staged tensors never handed over, no final `synchronize()`.

        **In production.** DeepSpeed ZeRO-Offload / ZeRO-Infinity (`offload_optimizer: {device: cpu, pin_memory:
        true}`; the step on the CPU with a vectorised `DeepSpeedCPUAdam`, overlapped with the GPU's backward);
        FSDP's `CPUOffload(offload_params=True)`; torchao's `CPUOffloadOptimizer` (the step on the CPU, gradients
        copied to pinned memory from a post-accumulate-grad hook on a side stream, as soon as each is ready: the
        hook of `p04.overlap`); activation offload in Megatron-LM and torch's `save_on_cpu` use the same pinned
        buffers and side streams for activations instead of moments.
    """)
    lesson.mistakes()
    return lesson
