"""Realistic wrong versions of the p02.ddp solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "broadcast_parameters",
        "parameters_only",
        "broadcasts the parameters but not the buffers (BatchNorm statistics, tables) ",
        [("itertools.chain(module.parameters(), module.buffers())", "module.parameters()")],
    ),
    Mutant(
        "broadcast_parameters",
        "src_zero_always",
        "always broadcasts from rank 0, ignoring src",
        [("group_src=src)", "group_src=0)")],
    ),
    Mutant(
        "broadcast_parameters",
        "no_src_validation",
        "does not check src: a bad rank fails inside the collective (or hangs) instead of a clear ValueError",
        [("if not 0 <= src < world_size:", "if False:")],
    ),
    Mutant(
        "assign_buckets",
        "strict_cap",
        "closes a bucket only when it exceeds the cap (> instead of >=)",
        [('if bucket["bytes"] >= bucket_cap_bytes:', 'if bucket["bytes"] > bucket_cap_bytes:')],
    ),
    Mutant(
        "assign_buckets",
        "forward_order",
        "fills the buckets in parameter order instead of the reverse order backward produces gradients in",
        [("for index in reversed(range(len(params))):", "for index in range(len(params)):")],
    ),
    Mutant(
        "assign_buckets",
        "dtypes_mixed",
        "one open bucket for every dtype together (a flat bucket cannot hold two dtypes)",
        [
            ("open_buckets.setdefault((p.dtype, p.device),", "open_buckets.setdefault(p.device,"),
            ("del open_buckets[(p.dtype, p.device)]", "del open_buckets[p.device]"),
        ],
    ),
    Mutant(
        "assign_buckets",
        "last_bucket_dropped",
        "forgets the buckets still open at the end (the last, partial bucket is never reduced)",
        [('closed.extend(bucket["indices"] for bucket in open_buckets.values())', "pass")],
    ),
    Mutant(
        "ddp",
        "no_average",
        "all-reduces the sum of the gradients without dividing by the world size",
        [(".div_(self.world_size)", "")],
    ),
    Mutant(
        "ddp",
        "average_twice",
        "divides by the world size before the all-reduce and again when writing back",
        [("p.grad.copy_(averaged)", "p.grad.copy_(averaged / self.world_size)")],
    ),
    Mutant(
        "ddp",
        "no_broadcast",
        "does not broadcast rank 0's weights at wrap time: the replicas start apart",
        [("broadcast_parameters(module, src=0, group=group)", "pass")],
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
    ),
    Mutant(
        "ddp",
        "no_sync_still_syncs",
        "no_sync() leaves communication on: k all-reduces per accumulated step instead of one",
        [("previous, self.require_sync = self.require_sync, False", "previous = self.require_sync")],
    ),
    Mutant(
        "ddp",
        "state_not_reset",
        "never resets the per-backward state: the second backward finds every bucket already launched",
        [("offset += p.numel()\n        self._reset()", "offset += p.numel()")],
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
]
