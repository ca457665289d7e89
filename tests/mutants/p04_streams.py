"""Realistic wrong versions of the p04.streams solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "overlapped_time",
        "no_fill_or_drain",
        "counts one bottleneck stage per chunk and forgets the pipeline's fill and drain (n * max)",
        [("return (t_h2d + t_compute + t_d2h) + (n_chunks - 1) * max(", "return n_chunks * max(")],
    ),
    Mutant(
        "overlapped_time",
        "first_chunk_twice",
        "adds the first chunk's stages and then a bottleneck stage for every chunk, the first included",
        [("(n_chunks - 1) * max(", "n_chunks * max(")],
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
    ),
    Mutant(
        "overlapped_time",
        "copies_share_an_engine",
        "treats the two copies as one stage (one copy engine for both directions)",
        [("max(t_h2d, t_compute, t_d2h)", "max(t_h2d + t_d2h, t_compute)")],
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
    ),
    Mutant(
        "plan_pipeline",
        "one_copy_stream",
        "puts copies in and copies out on the same side stream, so the two directions never overlap",
        [("COMPUTE, COPY_IN, COPY_OUT = 0, 1, 2", "COMPUTE, COPY_IN, COPY_OUT = 0, 1, 1")],
    ),
    Mutant(
        "plan_pipeline",
        "copies_on_compute_stream",
        "issues the copies on stream 0 with the kernels: correct, but serial",
        [("COMPUTE, COPY_IN, COPY_OUT = 0, 1, 2", "COMPUTE, COPY_IN, COPY_OUT = 0, 0, 0")],
    ),
    Mutant(
        "plan_pipeline",
        "no_wait_for_kernel",
        "copies the result out without waiting for the kernel that computes it",
        [('            (COPY_OUT, wait(("computed", c))),\n', "")],
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
    ),
    Mutant(
        "prefetcher",
        "copy_on_current_stream",
        "issues the copy on the current stream instead of the side stream",
        [("        with self.streams.use(self.side):\n", "        with contextlib.nullcontext():\n")],
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
    ),
    Mutant(
        "prefetcher",
        "no_wait",
        "returns the batch without making the current stream wait for its copy",
        [("        self.streams.wait(current, ready)  # a GPU-side wait: the CPU goes on issuing work\n", "")],
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
    ),
    Mutant(
        "prefetcher",
        "no_record_stream",
        "never hands the batch over to the current stream (no record_stream): use-after-free in the allocator",
        [("        self.streams.hand_over(batch, current)", "        pass")],
    ),
    Mutant(
        "prefetcher",
        "not_pinned",
        "copies from pageable memory: the copy is staged and synchronous",
        [("        host = self.streams.pin(host)", "        pass")],
    ),
    Mutant(
        "prefetcher",
        "blocking_copy",
        "copies without non_blocking=True",
        [("host.to(self.device, non_blocking=True)", "host.to(self.device)")],
    ),
]
