"""Realistic wrong versions of the p04.overlap solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "overlap_schedule",
        "ready_at_first_gradient",
        "a bucket starts when its first gradient is ready instead of its last",
        [
            (
                "start = max(max(ready[layer] for layer in bucket), link_free)",
                "start = max(min(ready[layer] for layer in bucket), link_free)",
            )
        ],
        mistake_zh="桶在它的第一个梯度就绪时就开始，而不是最后一个",
    ),
    Mutant(
        "overlap_schedule",
        "link_not_serial",
        "every bucket starts as soon as it is ready, as if the link ran all the all-reduces at once",
        [
            (
                "start = max(max(ready[layer] for layer in bucket), link_free)",
                "start = max(ready[layer] for layer in bucket)",
            ),
            ("link_free = start + cost", "link_free = max(link_free, start + cost)"),
        ],
        mistake_zh="每个桶一就绪就开始，好像链路能同时跑所有 all-reduce",
    ),
    Mutant(
        "overlap_schedule",
        "backward_in_forward_order",
        "differentiates layer 0 first (the forward order), so the ready times are reversed",
        [("for layer in reversed(range(layers)):", "for layer in range(layers):")],
        mistake_zh="先对第 0 层求导（前向顺序），就绪时间反了",
    ),
    Mutant(
        "overlap_schedule",
        "no_partition_check",
        "does not check that the buckets hold every layer exactly once",
        [("if sorted(layer for bucket in buckets for layer in bucket) != list(range(layers)):", "if False:")],
        mistake_zh="不检查各桶是否恰好包含每一层一次",
    ),
    Mutant(
        "bucket_reducer",
        "no_average",
        "all-reduces the sum of the gradients without dividing by the world size",
        [(".div_(self.world_size)", "")],
        mistake_zh="对梯度之和做 all-reduce，却不除以进程总数",
    ),
    Mutant(
        "bucket_reducer",
        "blocking_all_reduce",
        "a synchronous all-reduce in the hook (right numbers, but backward stops until each bucket is reduced)",
        [
            (
                "self.handles.append(dist.all_reduce(buffer, group=self.group, async_op=True))",
                "dist.all_reduce(buffer, group=self.group)",
            )
        ],
        mistake_zh="在 hook 里做同步的 all-reduce（数值对，但反向要停下来等每个桶规约完）",
    ),
    Mutant(
        "bucket_reducer",
        "launch_in_wait",
        "the hook only counts; wait() launches every bucket after backward (right numbers, no overlap)",
        [
            (
                "        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:\n",
                "        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0 and False:\n",
            ),
            (
                "        if self.next_bucket != len(self.buckets):",
                "        for b, buffer in enumerate(self.buffers):\n"
                "            if self.missing[b] == 0:\n"
                "                self.handles.append(dist.all_reduce(buffer.div_(self.world_size), group=self.group, async_op=True))\n"
                "                self.next_bucket += 1\n"
                "        if self.next_bucket != len(self.buckets):",
            ),
        ],
        mistake_zh="hook 只计数；wait() 在反向结束后才发出每个桶（数值对，没有重叠）",
    ),
    Mutant(
        "bucket_reducer",
        "copies_not_views",
        "p.grad gets a copy of its slice of the bucket, so autograd accumulates outside the buffer",
        [
            (
                "self.views[i] = buffer[offset : offset + n].view_as(self.params[i])",
                "self.views[i] = buffer[offset : offset + n].view_as(self.params[i]).clone()",
            )
        ],
        mistake_zh="p.grad 拿到的是桶中自己那一段的副本，autograd 在缓冲区之外累加",
    ),
    Mutant(
        "bucket_reducer",
        "fresh_grad_not_brought_home",
        "after zero_grad(set_to_none=True) the fresh .grad is not copied into the bucket: stale values are sent",
        [("if param.grad.data_ptr() != view.data_ptr():", "if False:")],
        mistake_zh="zero_grad(set_to_none=True) 之后新的 .grad 没有拷进桶：发出去的是过期的值",
    ),
    Mutant(
        "bucket_reducer",
        "wait_without_reset",
        "wait() does not reset the per-backward state, so the next backward launches nothing",
        [("            work.wait()\n        self._reset()", "            work.wait()")],
        mistake_zh="wait() 不重置每次反向的状态，下一次反向什么都不发出",
    ),
    Mutant(
        "bucket_reducer",
        "no_launch_check",
        "wait() does not check that every bucket was launched",
        [("if self.next_bucket != len(self.buckets):", "if False:")],
        mistake_zh="wait() 不检查每个桶是否都已发出",
    ),
]
