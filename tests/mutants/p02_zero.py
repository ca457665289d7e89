"""Realistic wrong versions of the p02.zero solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "zero_memory_per_rank",
        "stage_two_gradients_kept",
        "stage 2 still divides only the optimizer state (gradients not sharded)",
        [("if stage >= 2:", "if stage >= 3:")],
        mistake_zh="阶段 2 仍然只切分优化器状态（梯度没有切分）",
    ),
    Mutant(
        "zero_memory_per_rank",
        "stage_three_weights_kept",
        "stage 3 forgets to shard the weights",
        [("weights /= world_size", "weights /= 1")],
        mistake_zh="阶段 3 忘了切分权重",
    ),
    Mutant(
        "zero_memory_per_rank",
        "fixed_optimizer_bytes",
        "hard-codes 12 bytes of optimizer state per parameter",
        [("optimizer_bytes * num_params", "12 * num_params")],
        mistake_zh="把每个参数的优化器状态写死为 12 字节",
    ),
    Mutant(
        "zero1",
        "no_average",
        "all-reduces the sum of the gradients without dividing by the world size",
        [
            (
                "return flat[self.start : self.start + self.shard_size].div_(self.world_size)",
                "return flat[self.start : self.start + self.shard_size]",
            )
        ],
        mistake_zh="对梯度之和做 all-reduce，却不除以进程总数",
    ),
    Mutant(
        "zero1",
        "no_padding",
        "shard size numel // world_size: with an odd number of elements the last one belongs to no shard",
        [("self.shard_size = -(-self.numel // self.world_size)", "self.shard_size = self.numel // self.world_size")],
        mistake_zh="分片大小取 numel // world_size：元素个数为奇数时最后一个不属于任何分片",
    ),
    Mutant(
        "zero1",
        "offset_without_padding",
        "starts rank r's shard at r * numel // world_size: shards overlap when the buffer is padded",
        [("self.start = self.rank * self.shard_size", "self.start = self.rank * self.numel // self.world_size")],
        mistake_zh="rank r 的分片从 r * numel // world_size 开始：缓冲区有填充时分片互相重叠",
    ),
    Mutant(
        "zero1",
        "no_all_gather",
        "copies back only its own updated shard: the other ranks' updates never arrive",
        [
            (
                "all_gather(full, self.shard.detach(), group=self.group)",
                "full = self._flat([p.detach() for p in self.params])\n"
                "        full[self.start : self.start + self.shard_size] = self.shard.detach()",
            ),
        ],
        mistake_zh="只把自己更新后的分片复制回来：其他 rank 的更新永远到不了",
    ),
    Mutant(
        "zero1",
        "optimizer_on_full_parameters",
        "creates the optimizer over the full parameters (every rank keeps all of the state) and steps them all",
        [
            (
                "self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)  # state for S elements only",
                "self.shard = nn.Parameter(flat.clone())\n"
                "        self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)\n"
                "        self.start, self.full_shard = 0, True",
            ),
            (
                "return flat[self.start : self.start + self.shard_size].div_(self.world_size)",
                "return flat.div_(self.world_size) if getattr(self, 'full_shard', False) else "
                "flat[self.start : self.start + self.shard_size].div_(self.world_size)",
            ),
            ("all_gather(full, self.shard.detach(), group=self.group)", "full = self.shard.detach()"),
        ],
        mistake_zh="在完整参数上创建优化器（每个 rank 都保存全部状态）并全部更新",
    ),
    Mutant(
        "zero1",
        "ignores_group",
        "takes the rank and world size of the whole world and runs its collectives on the default group, ignoring "
        "`group`",
        [
            (
                "self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)",
                "self.world_size, self.rank = dist.get_world_size(), dist.get_rank()",
            ),
            ("dist.all_reduce(flat, group=self.group)", "dist.all_reduce(flat)"),
            ("all_gather(full, self.shard.detach(), group=self.group)", "all_gather(full, self.shard.detach())"),
        ],
        mistake_zh="用整个 world 的 rank 和 world size，并在默认进程组上做集合通信，忽略了 `group`",
    ),
    Mutant(
        "zero1",
        "decays_frozen_params",
        "steps the whole shard, so the elements of frozen and unused parameters get zero gradients and weight decay "
        "shrinks them every step (torch.optim skips a parameter whose .grad is None)",
        [
            ("self.shard[skip] = kept_values  # no weight decay where no rank has a gradient", "pass"),
            ("v[skip] = kept.get(k, 0)  # no momentum either: a new state tensor starts at zero there", "pass"),
        ],
        mistake_zh="对整个分片做 step：冻结或未使用参数的元素被当作零梯度，权重衰减每步都让它们缩小（torch.optim 会跳过 .grad 为 None 的参数）",
    ),
    Mutant(
        "zero1",
        "local_gradient_mask",
        "skips the elements of parameters that have no gradient on this rank, although another rank has one: that "
        "rank's gradient is lost",
        [
            (
                "skip = ~self._with_gradient()",
                "skip = ~self._flat([torch.full(p.shape, float(p.grad is not None)) "
                "for p in self.params])[self.start : self.start + self.shard_size].bool()",
            )
        ],
        mistake_zh="只按本 rank 是否有梯度来跳过参数：别的 rank 有梯度时，那部分梯度被丢掉",
    ),
    Mutant(
        "zero1",
        "fresh_state_kept",
        "puts back only the state that existed before the step: the momentum SGD creates on its first step keeps "
        "weight decay * p where a parameter had no gradient, and moves it once it gets one",
        [("v[skip] = kept.get(k, 0)  # no momentum", "if k in kept: v[skip] = kept[k]  # no momentum")],
        mistake_zh="只放回 step 之前已有的状态：SGD 第一步新建的动量在没有梯度的参数处留下 权重衰减 × p，参数一旦有梯度就被它带偏",
    ),
    Mutant(
        "zero2",
        "calls_all_reduce",
        "all-reduces the full gradient and slices it, as in stage 1",
        [
            (
                "reduce_scatter(shard, flat, group=self.group)",
                "dist.all_reduce(flat, group=self.group)\n"
                "        shard = flat[self.start : self.start + self.shard_size].clone()",
            )
        ],
        mistake_zh="像阶段 1 那样对完整梯度做 all-reduce 再切片",
    ),
    Mutant(
        "zero2",
        "no_average",
        "reduce-scatters the sum and forgets to divide by the world size",
        [("return shard.div_(self.world_size)", "return shard")],
        mistake_zh="reduce-scatter 求和后忘了除以进程总数",
    ),
    Mutant(
        "zero2",
        "gradients_kept",
        "keeps the full local gradients: no memory saved over stage 1",
        [("p.grad = None  # from here on", "pass  # from here on")],
        mistake_zh="保留完整的本地梯度：比阶段 1 没有省下任何显存",
    ),
    Mutant(
        "zero2",
        "ignores_group",
        "reduce-scatters on the default group instead of `group`",
        [("reduce_scatter(shard, flat, group=self.group)", "reduce_scatter(shard, flat)")],
        mistake_zh="在默认进程组上做 reduce-scatter，而不是在 `group` 上",
    ),
]
