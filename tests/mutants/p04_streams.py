"""Realistic wrong versions of the p04.streams solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "overlapped_time",
        "no_fill_or_drain",
        "counts one bottleneck stage per chunk and forgets the pipeline's fill and drain (n * max)",
        [("return (t_h2d + t_compute + t_d2h) + (n_chunks - 1) * max(", "return n_chunks * max(")],
        mistake_zh="每个块只计一个瓶颈阶段，忘了流水线的填充和排空（n * max）",
    ),
    Mutant(
        "overlapped_time",
        "first_chunk_twice",
        "adds the first chunk's stages and then a bottleneck stage for every chunk, the first included",
        [("(n_chunks - 1) * max(", "n_chunks * max(")],
        mistake_zh="先加上第一个块的各阶段，又给每个块（包括第一个）加一个瓶颈阶段",
    ),
    Mutant(
        "overlapped_time",
        "serial_sum",
        "uses the serial time n * (t_h2d + t_compute + t_d2h): no overlap at all",
        [
            (
                "return (t_h2d + t_compute + t_d2h) + (n_chunks - 1) * max(t_h2d, t_compute, t_d2h)",
                "return n_chunks * (t_h2d + t_compute + t_d2h)",
            )
        ],
        mistake_zh="用串行时间 n * (t_h2d + t_compute + t_d2h)：完全没有重叠",
    ),
    Mutant(
        "overlapped_time",
        "copies_share_an_engine",
        "treats the two copies as one stage (one copy engine for both directions)",
        [("max(t_h2d, t_compute, t_d2h)", "max(t_h2d + t_d2h, t_compute)")],
        mistake_zh="把两个方向的拷贝当作一个阶段（两个方向共用一个拷贝引擎）",
    ),
    Mutant(
        "plan_pipeline",
        "no_wait_before_reuse",
        "reuses a buffer without waiting for the copy out of the chunk that last used it",
        [
            (
                "        if c >= n_buffers:  # the buffer still holds chunk c - n_buffers until its D2H has finished\n"
                '            plan.append((COPY_IN, wait(("copied out", c - n_buffers))))\n',
                "",
            )
        ],
        mistake_zh="复用缓冲区时不等上一个使用它的块拷出完成",
    ),
    Mutant(
        "plan_pipeline",
        "wait_before_record",
        "issues the compute stream's wait before the copy's record, so the wait is a no-op",
        [
            (
                '            (COPY_IN, record(("copied in", c))),\n            (COMPUTE, wait(("copied in", c))),',
                '            (COMPUTE, wait(("copied in", c))),\n            (COPY_IN, record(("copied in", c))),',
            )
        ],
        mistake_zh="计算流的 wait 在拷贝的 record 之前发出，这个 wait 什么也没等",
    ),
    Mutant(
        "plan_pipeline",
        "one_copy_stream",
        "puts copies in and copies out on the same side stream, so the two directions never overlap",
        [("COMPUTE, COPY_IN, COPY_OUT = 0, 1, 2", "COMPUTE, COPY_IN, COPY_OUT = 0, 1, 1")],
        mistake_zh="拷入和拷出放在同一个辅助流上，两个方向永远不重叠",
    ),
    Mutant(
        "plan_pipeline",
        "copies_on_compute_stream",
        "issues the copies on stream 0 with the kernels: correct, but serial",
        [("COMPUTE, COPY_IN, COPY_OUT = 0, 1, 2", "COMPUTE, COPY_IN, COPY_OUT = 0, 0, 0")],
        mistake_zh="拷贝和内核一起放在流 0 上：结果正确，但是串行的",
    ),
    Mutant(
        "plan_pipeline",
        "no_wait_for_kernel",
        "copies the result out without waiting for the kernel that computes it",
        [('            (COPY_OUT, wait(("computed", c))),\n', "")],
        mistake_zh="不等计算结果的内核完成就把结果拷出",
    ),
    Mutant(
        "prefetcher",
        "no_lookahead",
        "copies each batch only when it is asked for, so nothing is in flight while a batch is used",
        [
            (
                "        self.side = self.streams.new_stream()\n        self._preload()\n",
                "        self.side = self.streams.new_stream()\n",
            ),
            (
                "        if self.pending is None:\n            raise StopIteration\n",
                "        self._preload()\n        if self.pending is None:\n            raise StopIteration\n",
            ),
            ("        self._preload()\n        return batch", "        return batch"),
        ],
        mistake_zh="每批数据被要求时才拷贝，使用一批时没有任何数据在传输",
    ),
    Mutant(
        "prefetcher",
        "copy_on_current_stream",
        "issues the copy on the current stream instead of the side stream",
        [("        with self.streams.use(self.side):\n", "        with contextlib.nullcontext():\n")],
        mistake_zh="拷贝发在当前流而不是辅助流上",
    ),
    Mutant(
        "prefetcher",
        "event_before_copy",
        "records the event before issuing the copy, so waiting for it does not wait for the copy",
        [
            (
                "        with self.streams.use(self.side):\n            batch = host.to(self.device, non_blocking=True)\n"
                "        ready = self.streams.record(self.side)",
                "        ready = self.streams.record(self.side)\n        with self.streams.use(self.side):\n"
                "            batch = host.to(self.device, non_blocking=True)",
            )
        ],
        mistake_zh="在发出拷贝之前就 record 事件，等待它并不等待拷贝",
    ),
    Mutant(
        "prefetcher",
        "no_wait",
        "returns the batch without making the current stream wait for its copy",
        [("        self.streams.wait(current, ready)  # a GPU-side wait: the CPU goes on issuing work\n", "")],
        mistake_zh="返回批数据时没有让当前流等待它的拷贝",
    ),
    Mutant(
        "prefetcher",
        "cpu_synchronize",
        "blocks the CPU until the copy has finished (torch.cuda.synchronize) instead of a GPU-side wait",
        [
            (
                "        self.streams.wait(current, ready)  # a GPU-side wait: the CPU goes on issuing work\n",
                "        torch.cuda.synchronize()\n",
            )
        ],
        mistake_zh="让 CPU 阻塞到拷贝完成（torch.cuda.synchronize），而不是在 GPU 端等待",
    ),
    Mutant(
        "prefetcher",
        "no_record_stream",
        "never hands the batch over to the current stream (no record_stream): use-after-free in the allocator",
        [("        self.streams.hand_over(batch, current)", "        pass")],
        mistake_zh="从不把批数据移交给当前流（没有 record_stream）：分配器里出现释放后使用",
    ),
    Mutant(
        "prefetcher",
        "not_pinned",
        "copies from pageable memory: the copy is staged and synchronous",
        [("        host = self.streams.pin(host)", "        pass")],
        mistake_zh="从可分页内存拷贝：拷贝要中转，而且是同步的",
    ),
    Mutant(
        "prefetcher",
        "blocking_copy",
        "copies without non_blocking=True",
        [("host.to(self.device, non_blocking=True)", "host.to(self.device)")],
        mistake_zh="拷贝时没有 non_blocking=True",
    ),
]
