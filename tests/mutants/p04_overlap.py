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
        mistake_zh="桶在它的第一个梯度就绪时开始，而不是最后一个梯度就绪时",
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
        mistake_zh="每个桶一就绪就开始，仿佛链路能同时执行所有 all-reduce",
    ),
    Mutant(
        "overlap_schedule",
        "backward_in_forward_order",
        "differentiates layer 0 first (the forward order), so the ready times are reversed",
        [("for layer in reversed(range(layers)):", "for layer in range(layers):")],
        mistake_zh="先对第 0 层求导（前向顺序），就绪时间因此整个颠倒",
    ),
    Mutant(
        "overlap_schedule",
        "no_partition_check",
        "does not check that the buckets hold every layer exactly once",
        [("if sorted(layer for bucket in buckets for layer in bucket) != list(range(layers)):", "if False:")],
        mistake_zh="不检查各个桶是否恰好包含每一层一次",
    ),
    Mutant(
        "bucket_reducer",
        "no_average",
        "all-reduces the sum of the gradients without dividing by the world size",
        [(".div_(self.world_size)", "")],
        mistake_zh="对梯度之和做 all-reduce 后没有除以 world size",
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
        mistake_zh="在 hook 中做同步 all-reduce（数值正确，但反向传播要停下来等每个桶规约完）",
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
        mistake_zh="hook 只计数，wait() 在反向结束后才发起所有桶（数值正确，但没有重叠）",
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
        mistake_zh="p.grad 拿到的是桶中对应切片的副本，于是 autograd 在缓冲区之外累加",
    ),
    Mutant(
        "bucket_reducer",
        "fresh_grad_not_brought_home",
        "after zero_grad(set_to_none=True) the fresh .grad is not copied into the bucket: stale values are sent",
        [("if param.grad.data_ptr() != view.data_ptr():", "if False:")],
        mistake_zh="zero_grad(set_to_none=True) 之后没有把新的 .grad 拷进桶里：发送的是过期的值",
    ),
    Mutant(
        "bucket_reducer",
        "wait_without_reset",
        "wait() does not reset the per-backward state, so the next backward launches nothing",
        [("            work.wait()\n        self._reset()", "            work.wait()")],
        mistake_zh="wait() 没有重置每次反向的状态，于是下一次反向什么都不发起",
    ),
    Mutant(
        "bucket_reducer",
        "no_launch_check",
        "wait() does not check that every bucket was launched",
        [("if self.next_bucket != len(self.buckets):", "if False:")],
        mistake_zh="wait() 不检查每个桶是否都已发起",
    ),
    Mutant(
        "bucket_reducer",
        "ignores_group",
        "keeps group=None: every all-reduce and the division run over the whole world, not the group it was given",
        [("self.params, self.group = list(params), group", "self.params, self.group = list(params), None")],
        mistake_zh="忽略了 group 参数：all-reduce 和除法都在整个 world 上进行，而不是在给定的进程组内",
    ),
    Mutant(
        "bucket_reducer",
        "ignores_bucket_cap",
        "buckets with the default 25 MiB cap whatever bucket_cap_bytes says (one bucket for a small model)",
        [("assign_buckets(self.params, bucket_cap_bytes)", "assign_buckets(self.params, 25 * 2**20)")],
        mistake_zh="无论 bucket_cap_bytes 是多少都按默认的 25 MiB 分桶（小模型只有一个桶）",
    ),
]
