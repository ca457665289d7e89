"""Realistic wrong versions of the p02.ddp solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "broadcast_parameters",
        "parameters_only",
        "broadcasts the parameters but not the buffers (BatchNorm statistics, tables) ",
        [("itertools.chain(module.parameters(), module.buffers())", "module.parameters()")],
        mistake_zh="广播了参数，却没有广播 buffer（BatchNorm 统计量、查找表）",
    ),
    Mutant(
        "broadcast_parameters",
        "src_zero_always",
        "always broadcasts from rank 0, ignoring src",
        [("group_src=src)", "group_src=0)")],
        mistake_zh="忽略 src，总是从 rank 0 广播",
    ),
    Mutant(
        "broadcast_parameters",
        "no_src_validation",
        "does not check src: a bad rank fails inside the collective (or hangs) instead of a clear ValueError",
        [("if not 0 <= src < world_size:", "if False:")],
        mistake_zh="不检查 src：错误的 rank 在集合通信内部才失败（或挂起），而不是清楚的 ValueError",
    ),
    Mutant(
        "assign_buckets",
        "strict_cap",
        "closes a bucket only when it exceeds the cap (> instead of >=)",
        [('if bucket["bytes"] >= bucket_cap_bytes:', 'if bucket["bytes"] > bucket_cap_bytes:')],
        mistake_zh="桶超过上限时才关闭（> 而不是 >=）",
    ),
    Mutant(
        "assign_buckets",
        "forward_order",
        "fills the buckets in parameter order instead of the reverse order backward produces gradients in",
        [("for index in reversed(range(len(params))):", "for index in range(len(params)):")],
        mistake_zh="按参数顺序而不是反向产生梯度的逆序填桶",
    ),
    Mutant(
        "assign_buckets",
        "dtypes_mixed",
        "one open bucket for every dtype together (a flat bucket cannot hold two dtypes)",
        [
            ("open_buckets.setdefault((p.dtype, p.device),", "open_buckets.setdefault(p.device,"),
            ("del open_buckets[(p.dtype, p.device)]", "del open_buckets[p.device]"),
        ],
        mistake_zh="所有数据类型共用一个打开的桶（扁平的桶装不下两种数据类型）",
    ),
    Mutant(
        "assign_buckets",
        "last_bucket_dropped",
        "forgets the buckets still open at the end (the last, partial bucket is never reduced)",
        [('closed.extend(bucket["indices"] for bucket in open_buckets.values())', "pass")],
        mistake_zh="忘了结尾时仍打开的桶（最后那个不满的桶从未被规约）",
    ),
    Mutant(
        "ddp",
        "no_average",
        "all-reduces the sum of the gradients without dividing by the world size",
        [(".div_(self.world_size)", "")],
        mistake_zh="对梯度之和做 all-reduce，却不除以进程总数",
    ),
    Mutant(
        "ddp",
        "average_twice",
        "divides by the world size before the all-reduce and again when writing back",
        [("p.grad.copy_(averaged)", "p.grad.copy_(averaged / self.world_size)")],
        mistake_zh="all-reduce 之前除以进程总数，写回时又除了一次",
    ),
    Mutant(
        "ddp",
        "no_broadcast",
        "does not broadcast rank 0's weights at wrap time: the replicas start apart",
        [("broadcast_parameters(module, src=0, group=group)", "pass")],
        mistake_zh="包装时不广播 rank 0 的权重：各副本从一开始就不一致",
    ),
    Mutant(
        "ddp",
        "tied_weight_twice",
        "collects the parameters module by module, so the tied embedding/head weight is listed (and sent) twice",
        [
            (
                "self.params = [p for p in module.parameters() if p.requires_grad]",
                "self.params = [p for m in module.modules() for p in m.parameters(recurse=False) if p.requires_grad]",
            )
        ],
        mistake_zh="按模块逐个收集参数，绑定的嵌入/输出头权重被列出（并发送）了两次",
    ),
    Mutant(
        "ddp",
        "all_reduce_after_backward",
        "launches every bucket at the end of backward: right numbers, no overlap with the computation",
        [
            (
                "while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:\n"
                "            self._launch(self.next_bucket)",
                "pass  # launched in _finish",
            )
        ],
        mistake_zh="在反向结束时才发出每个桶：数值对，但没有与计算重叠",
    ),
    Mutant(
        "ddp",
        "partial_buckets_never_flushed",
        "at the end of backward only waits: buckets with an unused parameter are never reduced",
        [
            (
                "while self.next_bucket < len(self.buckets):\n            self._launch(self.next_bucket)",
                "pass",
            )
        ],
        mistake_zh="反向结束时只等待：含有未使用参数的桶从未被规约",
    ),
    Mutant(
        "ddp",
        "no_sync_still_syncs",
        "no_sync() leaves communication on: k all-reduces per accumulated step instead of one",
        [("previous, self.require_sync = self.require_sync, False", "previous = self.require_sync")],
        mistake_zh="no_sync() 里仍然通信：每个累积步做了 k 次而不是一次 all-reduce",
    ),
    Mutant(
        "ddp",
        "state_not_reset",
        "never resets the per-backward state: the second backward finds every bucket already launched",
        [("p.grad.copy_(averaged)\n        self._reset()", "p.grad.copy_(averaged)")],
        mistake_zh="从不重置每次反向的状态：第二次反向发现每个桶都已经发出",
    ),
    Mutant(
        "broadcast_parameters",
        "ignores_group",
        "takes the world size of the whole world and broadcasts on the default group from global rank src",
        [
            ("world_size = dist.get_world_size(group)", "world_size = dist.get_world_size()"),
            ("dist.broadcast(tensor, group=group, group_src=src)", "dist.broadcast(tensor, src=src)"),
        ],
        mistake_zh="用整个 world 的大小，并在默认进程组上从全局 rank src 广播，忽略了 `group`",
    ),
    Mutant(
        "ddp",
        "ignores_group",
        "averages over the whole world and all-reduces on the default group, ignoring `group`",
        [
            ("self.world_size = dist.get_world_size(group)", "self.world_size = dist.get_world_size()"),
            ("broadcast_parameters(module, src=0, group=group)", "broadcast_parameters(module, src=0)"),
            (
                "work = dist.all_reduce(flat, group=self.group, async_op=True)",
                "work = dist.all_reduce(flat, async_op=True)",
            ),
        ],
        mistake_zh="按整个 world 求平均，并在默认进程组上做 all-reduce，忽略了 `group`",
    ),
    Mutant(
        "ddp",
        "decays_unused_params",
        "writes a zero gradient into .grad of a parameter no rank used, so AdamW's weight decay shrinks it every step "
        "(torch.optim skips a parameter whose .grad is None)",
        [("if not has_grad[i]:", "if False:")],
        mistake_zh="给任何 rank 都没用到的参数写入零梯度，于是 AdamW 的权重衰减每一步都把它缩小"
        "（torch.optim 会跳过 .grad 为 None 的参数）",
    ),
]
