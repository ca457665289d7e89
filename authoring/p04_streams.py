"""Source of 04_CUDA_Systems/07_Streams.ipynb (build with `python -m llm_algo build p04.streams`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.streams",
        path="04_CUDA_Systems/07_Streams.ipynb",
        title_en="Streams and overlap: copy engines, events and pinned memory",
        title_zh="CUDA 流与重叠：拷贝引擎、事件与锁页内存",
        difficulty="medium",
        device="cpu",
        minutes=90,
        prerequisites=["p04.cuda_intro", "p01.roofline"],
    )
    lesson.title(
        intro=r"""
        An H200 reads its own HBM at 4.8 TB/s (NVIDIA's datasheet), but everything that enters or leaves it from the
        host crosses PCIe Gen5 x16: 32 GT/s × 16 lanes ≈ 63 GB/s **per direction** on paper, about 50–55 in
        practice (NVIDIA's GH200 superchip replaces this link with NVLink-C2C at 900 GB/s, both directions together). That is
        75–90× slower than HBM. A batch of data, a KV-cache block swapped out by vLLM, an optimizer state
        offloaded by DeepSpeed, a layer's weights prefetched by FSDP: all of them ride this link, and the only way
        to hide it is to keep the GPU computing *while* the bytes move. The GPU can: it has separate **copy
        engines** for each direction next to its compute engine, and a program tells them what may run together
        with **streams** and **events**, provided the host memory is **pinned**.

        **You will implement** (1) `overlapped_time`, the closed form of a three-stage pipeline (copy in, compute,
        copy out) over $n$ chunks; (2) `plan_pipeline`, the stream program itself — which engine does what, on which
        stream, in which device buffer, ordered by which events — run through a discrete-event model of the GPU's
        engines that finds every missing dependency; (3) `Prefetcher`, the double-buffered host-to-device batch
        loader of NVIDIA's Apex ImageNet example, on real PyTorch streams. **Graded against** an independent
        model of in-order streams, events and engines (its happens-before relation and its timeline), a
        recorder of every stream operation and copy your prefetcher issues, and on a GPU the real thing: pinned
        memory, a side stream, `record_stream`. Everything except the GPU check grades on a CPU.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **三个引擎**：GPU 有 H2D 拷贝引擎、D2H 拷贝引擎和计算引擎（SM），三者可以同时工作；PCIe Gen5 x16 每个方向约 63 GB/s（理论），H200 的 HBM 为 4.8 TB/s（规格）。
        - **流（stream）**：一个按顺序执行的队列；不同流上的工作才可能并行。**事件（event）**：`record` 在流中打一个标记，`wait` 让另一个流等到该标记之前的工作全部完成（GPU 端等待，CPU 不阻塞），`synchronize` 让 CPU 等待，`elapsed_time` 测 GPU 时间。
        - **重叠的收益**：$n$ 块、三段耗时 $t_1,t_2,t_3$ 时，串行为 $n(t_1+t_2+t_3)$，流水线为 $(t_1+t_2+t_3)+(n-1)\max(t_1,t_2,t_3)$——从“求和”变成“取最大”。
        - **缓冲区**：三段流水线需要至少 3 个设备缓冲区；复用缓冲区之前必须等它的 D2H 拷贝完成（否则覆盖了还没拷回的结果）。
        - **锁页内存（pinned memory）**：DMA 只能读写页锁定的主机内存；可分页内存会先经驱动的暂存缓冲区同步拷贝，`non_blocking=True` 悄悄失效。用 `pin_memory()`。
        - **缓存分配器与 `record_stream`**：每块显存属于分配它的流；在另一个流上使用时要 `tensor.record_stream(stream)`，否则释放后可能被立即复用（use-after-free）。
        - **实测（H200，一次运行，`python -m llm_algo bench p04.streams`）**：锁页内存单向 H2D 55.5 GB/s；32 块 × 64 MiB 的作业中，串行可分页 9.4 GB/s、串行锁页 42.6 GB/s、三缓冲流水线 95.6 GB/s（这三行按输入 + 输出两个方向的总字节计算，即每个方向约 47.8 GB/s，两个拷贝引擎同时工作），流水线比串行锁页快 2.25 倍。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: a link 80× slower than the memory

        | link | bandwidth | 64 MiB takes |
        | --- | --- | --- |
        | H200 HBM3e (datasheet) | 4.8 TB/s | 14 µs (read) |
        | PCIe Gen5 x16, one direction (spec: 32 GT/s × 16 × 128/130 / 8) | 63 GB/s | 1.07 ms |
        | PCIe Gen5 x16, one direction, typical measured | ~50–55 GB/s | ~1.3 ms |
        | pageable host memory (staged through a driver buffer) | lower, and synchronous for the CPU (section 7 measures it) | |

        Take a job that streams 32 chunks of 64 MiB through the GPU: copy a chunk in, run a kernel on it for
        1 ms, copy the result out. Serially each chunk costs $1.3 + 1 + 1.3 = 3.6$ ms, 115 ms in all. But the copy
        in, the kernel and the copy out run on **different hardware**: while the kernel works on chunk $c$, one
        copy engine can bring chunk $c+1$ in and the other can take chunk $c-1$ out. Then the pipeline advances by
        one chunk every $\max(1.3, 1, 1.3) = 1.3$ ms, and the whole job takes about $3.6 + 31 \times 1.3 = 44$ ms:
        2.6× faster, without a single faster kernel. This is what PyTorch's `DataLoader(pin_memory=True)` with
        `.to(device, non_blocking=True)`, FSDP's and DeepSpeed ZeRO-3's parameter prefetch, ZeRO-Offload, and vLLM's
        swapping of KV-cache blocks to CPU memory all rely on.

        ## 2. The machine: engines, streams, events

        **Engines.** A GPU has one compute engine (the SMs, running kernels) and DMA **copy engines**: data-centre
        GPUs have at least one per direction (`asyncEngineCount` in `deviceQuery`), so an H2D copy, a D2H copy and
        kernels can all run at once. Each engine takes one transfer at a time from the work it is given.

        **Streams** (流). A stream is an in-order queue: the operations issued to one stream run one after the other,
        each starting after the previous one has *finished*. Operations on *different* streams have no order
        unless you add one, so they may overlap: that is all a CUDA stream is. PyTorch issues everything to the **current stream** (the default
        stream unless you enter `with torch.cuda.stream(s):`); every operation only *enqueues* work and returns to
        the CPU at once.

        **Events** (事件). A CUDA event is a marker in a stream:

        | call | what it does | who waits |
        | --- | --- | --- |
        | `e = torch.cuda.Event(); e.record(s)` (or `s.record_event()`) | marks "everything issued to `s` so far" | nobody |
        | `s2.wait_event(e)` (or `e.wait(s2)`; `s2.wait_stream(s)` records and waits in one call) | `s2`'s later work starts after `e` has completed | the GPU (stream `s2`); the CPU goes on |
        | `e.synchronize()`, `s.synchronize()`, `torch.cuda.synchronize()` | the CPU blocks until `e` (or `s`, or everything) completes | the CPU |
        | `start.elapsed_time(end)` (events made with `enable_timing=True`) | milliseconds between two recorded events, measured on the GPU | — |

        A subtle rule: `wait_event` on an event that has **not been recorded yet** (in the order the CPU issues
        the calls) waits for nothing. The CPU must issue the `record` before the `wait`.

        **Pinned memory** (锁页内存). A copy engine reads host memory by physical address, behind the CPU's back
        (DMA). The OS may move or swap out an ordinary (*pageable*) page at any time, so for a pageable source the
        driver first copies the bytes, with the CPU, into a pinned staging buffer, and only then lets the engine
        copy them: the call is synchronous for the host and the copy is chunked through a small buffer. A
        **pinned** (page-locked) tensor, `t.pin_memory()` or `torch.empty(..., pin_memory=True)`, lets the engine
        read it directly, and only then does `x.to("cuda", non_blocking=True)` return before the copy is done.
        Pinned memory is a scarce resource (it cannot be swapped): pin buffers once and reuse them, as the
        DataLoader's pin-memory thread does.

        **The caching allocator's streams.** PyTorch's CUDA caching allocator gives each freed block back to the
        **stream that allocated it**, and hands it out again at once to the next allocation on that stream: safe,
        because that stream is in order. It does not know about other streams. A tensor allocated on a side stream
        and read by a kernel on the current stream can be freed by Python while that kernel is still queued; the
        side stream's next allocation gets the same memory and its next copy overwrites data the kernel has not
        read yet (use-after-free, with no error, only wrong numbers). `tensor.record_stream(current)` tells the
        allocator that `current` uses the block too; on free it waits for that stream's pending work before reusing
        the memory.
    """)
    lesson.md(r"""
        ## 3. The math: serial versus pipelined

        Split the job into $n$ equal chunks whose three stages take $t_1$ (H2D), $t_2$ (compute) and $t_3$ (D2H),
        and let $S = t_1 + t_2 + t_3$. On one stream every stage waits for the previous one:

        $$T_\text{serial} = n\,S .$$

        With each stage on its own engine and enough buffers, chunk $c$ can be copied in while chunk $c-1$ is
        computed and chunk $c-2$ copied out. The slowest stage $t_{\max} = \max(t_1, t_2, t_3)$ is busy without a
        gap from its first chunk to its last, the other stages fill in around it, and only the first chunk's stages
        before the bottleneck (the *fill*) and the last chunk's stages after it (the *drain*) are not hidden:

        $$T_\text{pipelined} = S + (n - 1)\,t_{\max}, \qquad \frac{T_\text{serial}}{T_\text{pipelined}} \xrightarrow{n \to \infty} \frac{S}{t_{\max}} \le 3 .$$

        Overlap turns a **sum** into a **max**: at best a 3× gain when the three stages are balanced, nothing when
        one stage dominates (a 10 ms kernel between two 1 ms copies: 12 ms per chunk become 10, a sixth saved at most). It is the flow-shop formula of
        scheduling theory for identical jobs on three machines.

        **Buffers.** A device buffer is busy from the start of its chunk's H2D to the end of its D2H. With $B$
        buffers, chunk $c$ reuses the buffer of chunk $c - B$, and its H2D must wait for that chunk's D2H. $B = 1$
        is serial whatever the streams; $B = 2$ (*double buffering*) overlaps copies with compute but not both
        copies with each other all the time; $B \ge 3$ reaches $T_\text{pipelined}$ (the model below confirms it).
        Memory cost: $B$ chunks on the device, so choose the chunk size so that $B$ of them fit.
    """)
    lesson.setup(r"""
        import contextlib

        import matplotlib.pyplot as plt
        import torch

        # The operations of a stream program (section 5): a plan is a list of (stream, op) in the order the CPU issues them.
        def h2d(chunk, buffer):     # copy engine, host -> device: host chunk `chunk` into device buffer `buffer`
            return ("h2d", chunk, buffer)

        def compute(chunk, buffer):  # compute engine: the kernel on chunk `chunk`, in place in `buffer`
            return ("compute", chunk, buffer)

        def d2h(chunk, buffer):     # copy engine, device -> host: the result of `chunk` from `buffer` to the host
            return ("d2h", chunk, buffer)

        def record(event):          # mark "everything issued to this stream so far" as `event` (any hashable name)
            return ("record", event)

        def wait(event):            # this stream's later work waits for the last record of `event` issued before
            return ("wait", event)

        ENGINES = {"h2d": "H2D copy", "compute": "compute", "d2h": "D2H copy"}


        def simulate_plan(plan, t_h2d, t_compute, t_d2h):
            # Timeline of a plan on one H2D engine, one compute engine and one D2H engine. An op starts when the op
            # before it on its stream is done, (a wait) when the event it waits for is done, and (a copy or a
            # kernel) when its engine is free; of the ops that could start, the earliest goes first.
            # Returns (bars, makespan), bars = [(engine, chunk, start, end)]. (Races are the checks' job.)
            duration = {"h2d": t_h2d, "compute": t_compute, "d2h": t_d2h}
            done, free, bars = {}, {engine: 0.0 for engine in ENGINES.values()}, []
            after, recorded, previous = [], {}, {}
            for i, (stream, op) in enumerate(plan):
                deps = [previous[stream]] if stream in previous else []
                if op[0] == "wait" and op[1] in recorded:
                    deps.append(recorded[op[1]])
                if op[0] == "record":
                    recorded[op[1]] = i
                previous[stream] = i
                after.append(deps)
            waiting = list(range(len(plan)))
            while waiting:
                def start_of(i):
                    ready = max((done[j] for j in after[i]), default=0.0)
                    kind = plan[i][1][0]
                    return max(ready, free[ENGINES[kind]]) if kind in ENGINES else ready
                i = min((i for i in waiting if all(j in done for j in after[i])), key=lambda i: (start_of(i), i))
                kind, start = plan[i][1][0], start_of(i)
                done[i] = start + duration.get(kind, 0.0)
                if kind in ENGINES:
                    free[ENGINES[kind]] = done[i]
                    bars.append((ENGINES[kind], plan[i][1][1], start, done[i]))
                waiting.remove(i)
            return bars, max(done.values(), default=0.0)


        def draw_timeline(ax, bars, title):
            lanes = list(ENGINES.values())
            for engine, chunk, start, end in bars:
                y = lanes.index(engine)
                ax.broken_barh([(start, end - start)], (y + 0.1, 0.8), facecolors=f"C{chunk % 10}", edgecolor="white")
                if end - start > 0:
                    ax.text((start + end) / 2, y + 0.5, str(chunk), ha="center", va="center", fontsize=7, color="white")
            ax.set_yticks([0.5, 1.5, 2.5], lanes)
            ax.set_ylim(3, 0)  # H2D on top: a chunk flows downwards
            ax.set_title(title, fontsize=9)


        class CudaStreams:
            # The stream operations the prefetcher (section 6) needs, each one line of torch.cuda.
            def __init__(self, device):
                self.device = torch.device(device)

            def new_stream(self):
                return torch.cuda.Stream(self.device)

            def current_stream(self):
                return torch.cuda.current_stream(self.device)

            def use(self, stream):            # work issued inside `with streams.use(s):` goes to stream s
                return torch.cuda.stream(stream)

            def record(self, stream):         # an event after everything issued to `stream` so far
                return stream.record_event()

            def wait(self, stream, event):    # `stream`'s later work waits for `event` (on the GPU; the CPU goes on)
                stream.wait_event(event)

            def hand_over(self, tensor, stream):  # the caching allocator: `stream` uses this memory too
                tensor.record_stream(stream)

            def pin(self, tensor):            # page-locked copy (DMA needs it); a pinned tensor is kept as it is
                return tensor if tensor.is_pinned() else tensor.pin_memory()


        class NoStreams:
            # The same calls on a CPU, where there is one in-order queue and nothing to overlap: they do nothing.
            def new_stream(self):
                return "side stream"

            def current_stream(self):
                return "current stream"

            def use(self, stream):
                return contextlib.nullcontext()

            def record(self, stream):
                return None

            def wait(self, stream, event):
                pass

            def hand_over(self, tensor, stream):
                pass

            def pin(self, tensor):
                return tensor


        def streams_for(device):
            return CudaStreams(device) if torch.device(device).type == "cuda" else NoStreams()


        def run_plan_cuda(plan, host_in, host_out, fn, n_buffers):
            # Execute a plan on real CUDA streams: stream 0 is the current stream, any other number a side stream.
            # host_in/host_out: lists of same-shaped (pinned) CPU tensors; fn works in place on a device buffer.
            current = torch.cuda.current_stream()
            streams = {0: current}
            buffers = [torch.empty_like(host_in[0], device="cuda") for _ in range(n_buffers)]  # on the current stream
            events = {}
            for number, op in plan:
                if number not in streams:
                    streams[number] = torch.cuda.Stream()
                    # the buffers were allocated on the current stream, whose earlier work may still use that memory
                    streams[number].wait_stream(current)
                stream = streams[number]
                with torch.cuda.stream(stream):
                    if op[0] == "h2d":
                        buffers[op[2]].copy_(host_in[op[1]], non_blocking=True)
                    elif op[0] == "compute":
                        fn(buffers[op[2]])
                    elif op[0] == "d2h":
                        host_out[op[1]].copy_(buffers[op[2]], non_blocking=True)
                    elif op[0] == "record":
                        events[op[1]] = stream.record_event()
                    elif op[0] == "wait" and op[1] in events:  # CUDA: waiting for an unrecorded event does nothing
                        stream.wait_event(events[op[1]])
            for stream in streams.values():
                current.wait_stream(stream)  # the buffers are freed on return: every stream must be done with them
            current.synchronize()  # the D2H copies are asynchronous: the host may read host_out only after this
    """)
    lesson.md(r"""
        ## 4. Exercise `overlapped_time`: the closed form

        Write `overlapped_time(n_chunks, t_h2d, t_compute, t_d2h)`: the time of the pipeline of section 3 with
        enough buffers, $S + (n-1)\,t_{\max}$ (and 0 for no chunks). Refuse a negative `n_chunks` or a negative
        duration with a `ValueError`. The checks compare it with the timeline of the engine model for many
        random durations.
    """)
    lesson.exercise(
        "overlapped_time",
        r'''
        def overlapped_time(n_chunks: int, t_h2d: float, t_compute: float, t_d2h: float) -> float:
            """Time for n_chunks through H2D -> compute -> D2H on three engines, fully pipelined (>= 3 buffers)."""
            # TODO: refuse n_chunks < 0 or a negative duration (ValueError)
            # TODO: no chunks take no time; otherwise the first chunk's three stages, then one bottleneck stage per chunk
            ### BEGIN SOLUTION
            if n_chunks < 0 or min(t_h2d, t_compute, t_d2h) < 0:
                raise ValueError(f"need n_chunks >= 0 and durations >= 0, got {n_chunks}, {t_h2d}, {t_compute}, {t_d2h}")
            if n_chunks == 0:
                return 0.0
            return (t_h2d + t_compute + t_d2h) + (n_chunks - 1) * max(t_h2d, t_compute, t_d2h)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `plan_pipeline`: a stream program

        Now write the program that achieves it. `plan_pipeline(n_chunks, n_buffers)` returns a **plan**: the list
        of `(stream, op)` pairs in the order the CPU issues them, with the ops of the setup cell:
        `h2d(chunk, buffer)`, `compute(chunk, buffer)`, `d2h(chunk, buffer)`, `record(event)`, `wait(event)`.
        Streams are small integers; **stream 0 is the current stream, where the kernels must run** (your model's
        forward pass is there); use other streams for copies. Buffers are `0 .. n_buffers - 1`; events are any
        hashable names (`("copied", c)` reads well). The rules a correct plan follows, each one a bug when missed:

        1. each chunk gets exactly one `h2d`, one `compute` and one `d2h`, all three in the same buffer;
        2. a chunk's `compute` starts after its `h2d` has finished, and its `d2h` after its `compute`;
        3. a buffer is reused (the next chunk's `h2d` into it) only after the previous chunk's `d2h` from it has
           finished;
        4. across streams only events order work: a `wait` must come after (in the plan) the `record` it waits for.

        And it must be fast: for `n_buffers >= 3` the timeline must reach `overlapped_time`, whatever the three
        durations; for `n_buffers == 1` it is necessarily serial. The checks run your plan through their own model:
        a happens-before analysis (rules 1–4, whatever the durations: a race that happens to be hidden by a slow
        engine is still a race) and the timeline. Refuse `n_chunks < 0` or `n_buffers < 1` with a `ValueError`.

        *Hint:* one stream per engine, and three events per chunk.
    """)
    lesson.exercise(
        "plan_pipeline",
        r'''
        def plan_pipeline(n_chunks: int, n_buffers: int) -> list:
            """[(stream, op)] in issue order: chunk c in buffer c % n_buffers, H2D/compute/D2H ordered by events."""
            # TODO: refuse n_chunks < 0 or n_buffers < 1 (ValueError)
            # TODO: chunk c in buffer c % n_buffers; kernels on stream 0, copies on streams of their own
            # TODO: order with record/wait: each chunk's h2d -> compute -> d2h, and a buffer's d2h -> the next h2d
            #       into that buffer; every wait issued after the record it waits for
            ### BEGIN SOLUTION
            if n_chunks < 0 or n_buffers < 1:
                raise ValueError(f"need n_chunks >= 0 and n_buffers >= 1, got {n_chunks} and {n_buffers}")
            COMPUTE, COPY_IN, COPY_OUT = 0, 1, 2
            plan = []
            for c in range(n_chunks):
                buffer = c % n_buffers
                if c >= n_buffers:  # the buffer still holds chunk c - n_buffers until its D2H has finished
                    plan.append((COPY_IN, wait(("copied out", c - n_buffers))))
                plan += [
                    (COPY_IN, h2d(c, buffer)),
                    (COPY_IN, record(("copied in", c))),
                    (COMPUTE, wait(("copied in", c))),
                    (COMPUTE, compute(c, buffer)),
                    (COMPUTE, record(("computed", c))),
                    (COPY_OUT, wait(("computed", c))),
                    (COPY_OUT, d2h(c, buffer)),
                    (COPY_OUT, record(("copied out", c))),
                ]
            return plan
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The timeline, serial and overlapped

        Eight chunks with illustrative durations (1.3 ms per copy: 64 MiB at ~50 GB/s; 1 ms of compute) through
        the engine model: all on stream 0 with one buffer, then your plan with two and with three buffers.
    """)
    lesson.code(r"""
        t_h2d, t_compute, t_d2h, n = 1.3, 1.0, 1.3, 8
        serial = [(0, op) for c in range(n) for op in (h2d(c, 0), compute(c, 0), d2h(c, 0))]
        try:
            plans = [("one stream, 1 buffer", serial)] + [
                (f"plan_pipeline, {b} buffers", plan_pipeline(n, b)) for b in (2, 3)
            ]
        except NotImplementedError:
            plans = [("one stream, 1 buffer", serial)]
            print("plan_pipeline is not implemented yet: only the serial timeline is drawn")
        fig, axes = plt.subplots(len(plans), 1, figsize=(9, 1.3 * len(plans) + 0.6), sharex=True, squeeze=False)
        for ax, (name, plan) in zip(axes[:, 0], plans):
            bars, makespan = simulate_plan(plan, t_h2d, t_compute, t_d2h)
            draw_timeline(ax, bars, f"{name}: {makespan:.1f} ms")
        axes[-1, 0].set_xlabel("ms (bars labelled with the chunk number)")
        plt.tight_layout(); plt.show()
        print(f"closed forms: serial {n * (t_h2d + t_compute + t_d2h):.1f} ms, "
              f"pipelined {(t_h2d + t_compute + t_d2h) + (n - 1) * max(t_h2d, t_compute, t_d2h):.1f} ms")
    """)
    lesson.md(r"""
        With one buffer every engine idles two thirds of the time. With two, the copy in of chunk $c+2$ waits for
        the copy out of chunk $c$, so the copy engines take turns. With three, the two copy engines run back to
        back and compute hides underneath them: the makespan is $S + (n-1) t_{\max}$.

        ### What a missing wait looks like

        Below, the copies in go to stream 1, the kernels to stream 0 and the copies out to stream 2, with no events
        at all. Nothing orders a kernel after its copy, so each kernel starts as soon as the compute engine is free:
        the bars outlined in red start before their input is there (a kernel reading a half-copied chunk, a copy out
        of a result not yet computed). It even *looks* faster. On a real GPU such a bug gives wrong numbers only
        when the copy happens to be slower than the work queued before the kernel, which is why the checks judge a
        plan by its happens-before order, for any durations, and not by one timeline.
    """)
    lesson.code(r"""
        racy = []
        for c in range(6):
            racy += [(1, h2d(c, c % 3)), (0, compute(c, c % 3)), (2, d2h(c, c % 3))]
        bars, makespan = simulate_plan(racy, 1.3, 1.0, 1.3)
        ready = {("compute", chunk): end for engine, chunk, _, end in bars if engine == "H2D copy"}
        ready.update({("D2H copy", chunk): end for engine, chunk, _, end in bars if engine == "compute"})
        fig, ax = plt.subplots(figsize=(9, 1.7))
        draw_timeline(ax, bars, f"no events: {makespan:.1f} ms, and wrong")
        for engine, chunk, start, end in bars:
            if start < ready.get((engine, chunk), 0.0):
                y = list(ENGINES.values()).index(engine)
                ax.broken_barh([(start, end - start)], (y + 0.1, 0.8), facecolors="none", edgecolor="red", linewidth=2)
        ax.set_xlabel("ms (red: starts before its input is ready)")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 6. Exercise `Prefetcher`: the same idea on real streams

        A training loop reads batches from the host and computes on each. NVIDIA's Apex ImageNet example
        (`data_prefetcher` in `examples/imagenet/main_amp.py`) and many training codebases after it overlap the two: while the model computes on batch $i$ on
        the current stream, batch $i+1$ is already being copied on a side stream. Write `Prefetcher(batches,
        device, streams=None)`, an iterator over `batches` (an iterable of CPU tensors) that yields each one on
        `device`. `streams` are the stream operations of the setup cell (`streams_for(device)` when `None`: real
        CUDA streams on a GPU, calls that do nothing on a CPU); use them, not `torch.cuda` directly, so that the
        same code runs on both, and the checks can watch what you do on a CPU too:

        - the constructor keeps the iterator, the device and the streams, creates the side stream
          (`streams.new_stream()`) and starts the copy of the first batch, so that it overlaps whatever the caller
          does before the loop;
        - starting a copy (`_preload`): pull the next host batch (refuse a non-tensor with a `TypeError`, a tensor
          not on the CPU with a `ValueError`), pin it (`streams.pin`), and inside `with streams.use(side):` copy it
          with `.to(self.device, non_blocking=True)`; then record an event on the side stream. Keep the device
          batch and its event;
        - `__next__`: make the current stream wait for the pending batch's event, hand the batch over to the current
          stream (`streams.hand_over`: it was allocated on the side stream), start the copy of the next batch,
          then return the pending one. At most one batch is in flight ahead of the one being used.
    """)
    lesson.exercise(
        "prefetcher",
        r'''
        class Prefetcher:
            """Yield host batches on `device`; the copy of batch i + 1 runs on a side stream while batch i is used."""

            def __init__(self, batches, device, streams=None):
                # TODO: keep iter(batches), torch.device(device), the streams (streams_for(device) if None), a side
                #       stream; then start the first copy
                ### BEGIN SOLUTION
                self.batches = iter(batches)
                self.device = torch.device(device)
                self.streams = streams_for(self.device) if streams is None else streams
                self.side = self.streams.new_stream()
                self._preload()
                ### END SOLUTION

            def _preload(self) -> None:
                """Pull the next host batch, pin it, copy it on the side stream and record an event; None at the end."""
                # TODO: self.pending = None when the batches are exhausted
                # TODO: refuse a non-tensor (TypeError) or a tensor not on the CPU (ValueError)
                # TODO: pin; copy non_blocking inside streams.use(side); record an event on side; keep (batch, event)
                ### BEGIN SOLUTION
                try:
                    host = next(self.batches)
                except StopIteration:
                    self.pending = None
                    return
                if not isinstance(host, torch.Tensor):
                    raise TypeError(f"batches must be tensors, got {type(host).__name__}")
                if host.device.type != "cpu":
                    raise ValueError(f"batches must be host (CPU) tensors, got one on {host.device}")
                host = self.streams.pin(host)  # DMA reads page-locked memory; pageable would be staged synchronously
                with self.streams.use(self.side):
                    batch = host.to(self.device, non_blocking=True)
                ready = self.streams.record(self.side)  # after the copy: "batch is on the device"
                self.pending = (batch, ready)
                ### END SOLUTION

            def __iter__(self):
                return self

            def __next__(self) -> torch.Tensor:
                # TODO: StopIteration when nothing is pending
                # TODO: the current stream waits for the pending batch's event; hand the batch over to it
                # TODO: start the next copy, then return the pending batch
                ### BEGIN SOLUTION
                if self.pending is None:
                    raise StopIteration
                batch, ready = self.pending
                current = self.streams.current_stream()
                self.streams.wait(current, ready)  # a GPU-side wait: the CPU goes on issuing work
                self.streams.hand_over(batch, current)  # allocated on the side stream, used (and freed) on current
                self._preload()
                return batch
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Measuring it (GPU only)

        `python -m llm_algo bench p04.streams` moves 32 chunks of 64 MiB (2 GiB each way) through a kernel that
        works in place for roughly half of a chunk's copy time, and reports host bytes moved (in + out) per second:

        | row | what it shows |
        | --- | --- |
        | serial, pageable | one stream, `.to("cuda")` from ordinary memory: staged copies, nothing overlaps |
        | serial, pinned | one stream, pinned memory: faster copies, still a sum of stages |
        | `plan_pipeline`, pinned, 3 buffers | your plan on real streams (`run_plan_cuda`): a max of stages |
        | H2D copy, pinned | one 2 GiB copy: the PCIe ceiling for one direction |
        | device-to-device copy | the HBM roofline, for scale |

        **Reading the numbers.** One run on an H200 (`python -m llm_algo bench p04.streams`; your GPU and host will
        differ). What each GB/s counts, from the benchmark's code: the first three rows divide the host bytes moved
        **in both directions**, 2 GiB in plus 2 GiB out (4.29 GB), by the time of the whole job; the H2D row counts
        its 2 GiB once; the device-to-device row counts 1 GiB read plus 1 GiB written.

        | row | median time | GB/s | reading |
        | --- | --- | --- | --- |
        | serial, pageable (one stream) | 457.7 ms | 9.4 (in + out) | 4.5x slower than serial pinned |
        | serial, pinned (one stream) | 100.9 ms | 42.6 (in + out) | 3.15 ms per chunk: the three stages add up |
        | `plan_pipeline`, pinned, 3 buffers | 44.9 ms | 95.6 (in + out) | 2.25x serial pinned; 47.8 GB/s each way |
        | H2D copy only, pinned | 38.7 ms | 55.5 (one direction) | 88% of PCIe Gen5 x16's 63 GB/s |
        | device-to-device copy | 0.51 ms | 4,227 (read + write) | 88% of HBM3e's 4.8 TB/s |

        The pinned H2D copy lands at 55.5 GB/s, the top of the 50–55 GB/s expected in practice. The pipelined
        row's 95.6 GB/s is **not** a faster link: it counts both directions, and 95.6 / 2 = 47.8 GB/s flows each way
        at the same time, 0.86x of the 55.5 GB/s that one direction reaches alone. That is the two copy engines
        running at once, with the kernel hidden under them: the whole job of 2 GiB in and 2 GiB out takes 44.9 ms,
        only 1.16x the 38.7 ms of copying the 2 GiB in alone. Section 4's closed form predicts a little less: with
        the serial row's 3.15 ms per chunk as the fill $S$ and the H2D copy's 1.21 ms per 64 MiB as the bottleneck
        stage, $3.15 + 31 \times 1.21 = 40.6$ ms, so the measured run is 11% slower than the model. This run cannot
        say why; likely candidates are a D2H copy slower than the H2D one on this host (then it, not the H2D copy, is
        the bottleneck stage) or the two directions slowing each other a little when both are busy. Timing a D2H
        copy alone, and both directions at once without a kernel, would tell. The serial pinned row, at 42.6 GB/s,
        is what a sum of stages predicts: two copies and a kernel of about half a copy move 2 chunks of bytes in
        about 2.5 copy times, $0.8 \times 55.5 \approx 44$ GB/s. And the pageable row is the slowest by far,
        9.4 GB/s: every copy is staged through the driver's pinned bounce buffer, and the CPU waits for it. The cell
        below runs the same comparison at a smaller size with CUDA events (`elapsed_time`); on a CPU it says so and
        does nothing.
    """)
    lesson.code(r"""
        if not torch.cuda.is_available():
            print("Streams need a CUDA GPU to overlap anything; skipped here.")
        else:
            n, chunk = 16, 16 * 2**20 // 4  # 16 chunks of 16 MiB of float32

            def busy(x):
                for _ in range(10):
                    torch.sin(x, out=x)

            pinned_in = [torch.randn(chunk).pin_memory() for _ in range(n)]
            pinned_out = [torch.empty(chunk).pin_memory() for _ in range(n)]
            serial = [(0, op) for c in range(n) for op in (h2d(c, 0), compute(c, 0), d2h(c, 0))]
            runs = [("serial, pinned", serial, 1)]
            try:
                runs.append(("plan_pipeline, 3 buffers", plan_pipeline(n, 3), 3))
            except NotImplementedError:
                print("plan_pipeline is not implemented yet: only the serial run is timed")
            for name, plan, buffers in runs:
                run_plan_cuda(plan, pinned_in, pinned_out, busy, buffers)  # warm-up
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run_plan_cuda(plan, pinned_in, pinned_out, busy, buffers)
                end.record(); end.synchronize()
                ms = start.elapsed_time(end)
                print(f"{name:28s} {ms:7.2f} ms  {2 * n * chunk * 4 / ms / 1e6:6.1f} GB/s (in + out)")
            expected = pinned_in[3].cuda()
            busy(expected)
            print("last run correct:", torch.allclose(pinned_out[3], expected.cpu()))
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`overlapped_time`.** Fill (the first chunk's three stages, $S$) plus one bottleneck stage per further
        chunk. The mistakes: $n \cdot t_{\max}$ (forgetting fill and drain: too optimistic by $S - t_{\max}$),
        $S + n\,t_{\max}$ (counting the first chunk twice), $n\,S$ (no overlap at all), and the sum of the two
        copies as one stage (true only if both directions shared one copy engine or one stream).

        **`plan_pipeline`.** One stream per engine (compute on 0, copies in on 1, copies out on 2) and three events
        per chunk, `copied in`, `computed`, `copied out`: each `wait` is issued right after the `record` it needs,
        so no wait is ever a no-op. The wait for `copied out` of chunk $c - B$ before the `h2d` of chunk $c$ is
        the buffer-reuse rule; it is the one people forget, because with short kernels the copy engine is usually
        late enough to hide it — the model's happens-before analysis catches it whatever the durations. The usual
        mistakes:

        - no wait before reusing a buffer (rule 3): chunk $c$'s input overwrites chunk $c - B$'s result before it
          has been copied out;
        - the `wait` issued before its `record` (for instance waiting for the *next* chunk's event): CUDA treats a
          wait on an unrecorded event as already satisfied, so the dependency silently disappears;
        - copies in and copies out on the same stream: in order, so the copy out of chunk $c$ (which waits for its
          compute) blocks the copy in of chunk $c+1$ queued behind it — correct, but the two copy engines never
          work at the same time and the makespan misses the closed form;
        - the copies on stream 0 with the compute: correct and serial.

        Why does stream order alone not suffice? It would, if every chunk ran on one stream (the CUDA samples'
        `simpleStreams` gives each of $k$ streams its own chunks: stream order then covers all four rules). But a
        model's kernels run on one stream, the current one, and the copies must not be queued behind them: that is
        exactly the side-stream-plus-events shape of every production prefetcher.

        **`Prefetcher`.** `pin` before the copy (the DataLoader does it in its pin-memory thread so that the loop
        never pays for it); `.to(device, non_blocking=True)` inside `use(side)`, so the copy goes to the side
        stream's queue and to a copy engine while the current stream computes; `record` **after** the copy (an event
        recorded before it would say nothing about it). In `__next__`, `wait` makes the current stream's next kernel
        wait for the copy on the GPU, without blocking the CPU; `hand_over` is `record_stream`: the batch was
        allocated on the side stream, and when the loop drops it, the allocator must not give its memory to the next
        prefetch until the current stream's kernels that read it have run. Without it, the next batch can overwrite
        this one under a running kernel. Allocating the batch on the current stream (`torch.empty` outside `use(side)`,
        then `copy_` inside it) needs no `record_stream`, but then the side stream must first wait for the current
        stream (`side.wait_stream(current)`): the allocator may hand out a block that current-stream kernels still
        queued were reading, and the copy would overwrite it under them. Each choice has its ordering rule; what is
        never safe is neither.

        The pinned temporary that `pin` returns is freed when `_preload` returns, with its copy possibly still in
        flight: PyTorch's pinned-memory allocator (`CachingHostAllocator`) records an event on the block for each
        `non_blocking` copy and reuses it only when that event has completed, so this is safe.

        **Costs.** Memory: two batches on the device (the one used, the one arriving), as the double buffering of
        section 3 for a two-stage pipeline (copy, compute). Time: $\max(t_\text{copy}, t_\text{step})$ per batch
        instead of their sum.

        **In production.** PyTorch's `DataLoader(pin_memory=True)` pins batches in a background thread, and
        `.to(device, non_blocking=True)` in the loop makes the copy asynchronous (on the current stream; Apex's
        prefetcher moves it to a side stream as here). FSDP issues each layer's parameter all-gather on its
        own stream ahead of the layer (`forward_prefetch`, `backward_prefetch`) and calls `record_stream` on the
        gathered tensors; DeepSpeed ZeRO-3 prefetches parameters by buckets, and ZeRO-Offload/Infinity move
        optimizer state through pinned buffers (`p04.offload`). vLLM keeps a pinned CPU pool of KV-cache blocks
        (`swap_space`) and copies blocks out and in with `cudaMemcpyAsync` when it preempts and resumes a sequence;
        SGLang's hierarchical cache offloads KV blocks to host memory on dedicated streams. To time any of this,
        use CUDA events (`elapsed_time`) or `torch.cuda.synchronize()` around a wall clock: without them the CPU only
        measures how long it took to *enqueue* the work.
    """)
    lesson.mistakes()
    return lesson
