"""Realistic wrong versions of the p02.tensor_parallel solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "f_and_g",
        "f_backward_without_all_reduce",
        "f's backward returns the local gradient: each rank keeps only its branch's share of dL/dx",
        [("dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)", "pass")],
        mistake_zh="f 的反向返回本地梯度：每个 rank 只保留自己分支那一份 dL/dx",
    ),
    Mutant(
        "f_and_g",
        "g_backward_all_reduces_too",
        "g's backward all-reduces the already replicated gradient: p times too large",
        [
            (
                "        return grad_output, None\n",
                "        grad = grad_output.clone()\n"
                "        dist.all_reduce(grad, group=None)\n"
                "        return grad, None\n",
            )
        ],
        mistake_zh="g 的反向对已经复制的梯度又做 all-reduce：大了 p 倍",
    ),
    Mutant(
        "f_and_g",
        "g_reduces_the_input_in_place",
        "g all-reduces the caller's tensor in place: the right sum, a corrupted input",
        [("total = x.clone()  # the caller's partial sum stays intact", "total = x.detach()")],
        mistake_zh="g 原地对调用者的张量做 all-reduce：和是对的，输入却被破坏了",
    ),
    Mutant(
        "f_and_g",
        "g_averages",
        "g averages the partial results (DDP's habit) instead of summing them",
        [("        return total\n", "        return total / dist.get_world_size(group)\n")],
        mistake_zh="g 对部分结果取平均（DDP 的习惯）而不是求和",
    ),
    Mutant(
        "parallel_linear",
        "every_rank_takes_block_zero",
        "the column-parallel slice forgets the rank offset: every rank keeps rows [0, M/p)",
        [("start = rank * rows", "start = 0")],
        mistake_zh="列并行的切片忘了 rank 偏移：每个 rank 都保留 [0, M/p) 行",
    ),
    Mutant(
        "parallel_linear",
        "row_bias_before_the_sum",
        "the row-parallel layer adds its bias to the partial product, so the sum counts it p times",
        [
            (
                "partial = F.linear(x, self.weight)  # (..., M): this rank's share of the sum over K",
                "partial = F.linear(x, self.weight, self.bias)",
            ),
            (
                "return out if self.bias is None else out + self.bias  # after the sum: the bias counts once",
                "return out",
            ),
        ],
        mistake_zh="行并行层把 bias 加到部分乘积上，求和后 bias 被算了 p 次",
    ),
    Mutant(
        "parallel_linear",
        "column_without_f",
        "the column-parallel layer forgets f: the input gradient is never summed over the ranks",
        [("x = copy_to_tensor_parallel(x, self.group)  # backward: the input gradient summed over the ranks", "pass")],
        mistake_zh="列并行层忘了 f：输入梯度从未在各 rank 间求和",
    ),
    Mutant(
        "parallel_linear",
        "row_slice_is_a_view",
        "the row-parallel weight keeps a view of the full matrix (no copy): 1/p of the compute, all of the memory",
        [
            (
                "self.weight = nn.Parameter(weight[:, start : start + cols].detach().clone())  # (M, K/p)",
                "self.weight = nn.Parameter(weight.detach()[:, start : start + cols])",
            )
        ],
        mistake_zh="行并行的权重保留完整矩阵的视图（没有复制）：计算只有 1/p，显存却是全部",
    ),
    Mutant(
        "parallel_mlp",
        "naive_fused_layout",
        "fuses gate and up as torch.cat([w_gate, w_up]): rank 0 gets only gate rows, rank 1 only up rows",
        [
            (
                "self.gate_up = ColumnParallelLinear(torch.cat(pairs), group=group)  # rank r: (2F/p, H)",
                "self.gate_up = ColumnParallelLinear(torch.cat([w_gate, w_up]), group=group)",
            )
        ],
        mistake_zh="按 torch.cat([w_gate, w_up]) 融合 gate 和 up：rank 0 只拿到 gate 行，rank 1 只拿到 up 行",
    ),
    Mutant(
        "parallel_mlp",
        "two_column_layers",
        "separate column-parallel layers for gate and up: right numbers, but f all-reduces two gradients",
        [
            (
                "self.gate_up = ColumnParallelLinear(torch.cat(pairs), group=group)  # rank r: (2F/p, H)",
                "self.gate = ColumnParallelLinear(w_gate, group=group)\n"
                "        self.up = ColumnParallelLinear(w_up, group=group)",
            ),
            (
                "gate, up = self.gate_up(x).chunk(2, dim=-1)  # (..., F/p) each: this rank's pair",
                "gate, up = self.gate(x), self.up(x)",
            ),
        ],
        mistake_zh="gate 和 up 用两个独立的列并行层：数值对，但 f 要 all-reduce 两份梯度",
    ),
    Mutant(
        "parallel_mlp",
        "silu_on_up",
        "applies silu to the up projection instead of the gate",
        [("return self.down(F.silu(gate) * up)", "return self.down(gate * F.silu(up))")],
        mistake_zh="silu 作用在 up 投影上而不是门控上",
    ),
    Mutant(
        "parallel_attention",
        "kv_heads_not_split",
        "splits the query heads but gives every rank the first KV heads (the offset of rank 0)",
        [
            (
                "blocks = zip(w_q.chunk(world), w_k.chunk(world), w_v.chunk(world))  # whole heads per rank",
                "blocks = zip(w_q.chunk(world), [w_k.chunk(world)[0]] * world, [w_v.chunk(world)[0]] * world)",
            )
        ],
        mistake_zh="切分了 query 头，却给每个 rank 最前面的 KV 头（rank 0 的偏移）",
    ),
    Mutant(
        "parallel_attention",
        "not_causal",
        "forgets the causal mask in the local attention",
        [("is_causal=True, enable_gqa=True", "is_causal=False, enable_gqa=True")],
        mistake_zh="本地注意力里忘了因果掩码",
    ),
    Mutant(
        "parallel_attention",
        "heads_merged_in_the_wrong_order",
        "merges the heads back with (B, h*D, T) -> (B, T, h*D) by reshape, without the transpose",
        [("return self.o(out.transpose(1, 2).reshape(B, T, h * D))", "return self.o(out.reshape(B, T, h * D))")],
        mistake_zh="用 reshape 把 (B, h*D, T) 合并回 (B, T, h*D)，没有转置",
    ),
    Mutant(
        "vocab_parallel_cross_entropy",
        "every_rank_adds_the_target_logit",
        "no ownership mask: every rank contributes its (clamped) guess of the target logit to the sum",
        [("target_logit = torch.where(owned, picked, torch.zeros_like(picked))", "target_logit = picked")],
        mistake_zh="没有归属掩码：每个 rank 都把自己（截断后）猜的目标 logit 加进和里",
    ),
    Mutant(
        "vocab_parallel_cross_entropy",
        "max_summed",
        "all-reduces the row max with SUM: the shift differs between ranks' view of the global max",
        [("dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)", "dist.all_reduce(row_max, group=group)")],
        mistake_zh="用 SUM 对行最大值做 all-reduce：各 rank 看到的平移量不是全局最大值",
    ),
    Mutant(
        "vocab_parallel_cross_entropy",
        "local_sum_of_exp",
        "forgets to all-reduce the sum of exponentials: each rank's softmax over its own block",
        [("dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)", "pass")],
        mistake_zh="忘了对指数和做 all-reduce：每个 rank 只在自己的块上做 softmax",
    ),
    Mutant(
        "vocab_parallel_cross_entropy",
        "one_hot_on_every_rank",
        "subtracts the one-hot in the backward on every rank, not only on the owner of the target id",
        [("grad[rows, local_target] -= owned.to(grad.dtype)", "grad[rows, local_target] -= 1")],
        mistake_zh="反向时每个 rank 都减去 one-hot，而不只是目标 id 的归属 rank",
    ),
    Mutant(
        "f_and_g",
        "ignores_group",
        "all-reduces on the default group, not on the group it is given: right on a world of its own, but on a "
        "sub-group it waits for ranks outside it",
        [
            (
                "dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)",
                "dist.all_reduce(grad, op=dist.ReduceOp.SUM)",
            ),
            (
                "dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)",
                "dist.all_reduce(total, op=dist.ReduceOp.SUM)",
            ),
        ],
        mistake_zh="在默认进程组上做 all-reduce，而不是在传入的 group 上：单独成一个 world 时正确，在子进程组上会等待组外的 rank",
    ),
    Mutant(
        "parallel_linear",
        "ignores_group",
        "applies f and g without the layer's group (the default group): the slices are right, but on a sub-group the "
        "all-reduces wait for ranks outside it",
        [
            ("x = copy_to_tensor_parallel(x, self.group)", "x = copy_to_tensor_parallel(x)"),
            ("out = reduce_from_tensor_parallel(partial, self.group)", "out = reduce_from_tensor_parallel(partial)"),
        ],
        mistake_zh="调用 f 和 g 时没有传入层的 group（用了默认进程组）：切片正确，但在子进程组上 all-reduce 会等待组外的 rank",
    ),
    Mutant(
        "parallel_mlp",
        "ignores_group",
        "builds its column- and row-parallel layers without the group: they split over the whole world",
        [
            ("ColumnParallelLinear(torch.cat(pairs), group=group)", "ColumnParallelLinear(torch.cat(pairs))"),
            ("RowParallelLinear(w_down, group=group)", "RowParallelLinear(w_down)"),
        ],
        mistake_zh="构造列并行和行并行层时没有传入 group：它们按整个 world 切分",
    ),
    Mutant(
        "parallel_attention",
        "ignores_group",
        "builds its qkv and output layers without the group: they split over the whole world",
        [
            (
                "ColumnParallelLinear(torch.cat([torch.cat(b) for b in blocks]), group=group)",
                "ColumnParallelLinear(torch.cat([torch.cat(b) for b in blocks]))",
            ),
            ("RowParallelLinear(w_o, group=group)", "RowParallelLinear(w_o)"),
        ],
        mistake_zh="构造 qkv 层和输出层时没有传入 group：它们按整个 world 切分",
    ),
    Mutant(
        "vocab_parallel_cross_entropy",
        "ignores_group",
        "all-reduces the max, the sum of exponentials and the target logit on the default group, not on the group",
        [
            (
                "dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)",
                "dist.all_reduce(row_max, op=dist.ReduceOp.MAX)",
            ),
            (
                "dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)",
                "dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM)",
            ),
            (
                "dist.all_reduce(target_logit, op=dist.ReduceOp.SUM, group=group)",
                "dist.all_reduce(target_logit, op=dist.ReduceOp.SUM)",
            ),
        ],
        mistake_zh="在默认进程组上 all-reduce 最大值、指数和与目标 logit，而不是在传入的 group 上",
    ),
]
