"""Realistic wrong versions of the p05.distributed_training solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "grid_groups",
        "dp_groups_consecutive",
        "builds the DP groups from consecutive ranks too, so they repeat the TP groups' pattern",
        [
            (
                "dp_groups = [list(range(t, world_size, tp)) for t in range(tp)]",
                "dp_groups = [list(range(t * dp, (t + 1) * dp)) for t in range(tp)]",
            )
        ],
        mistake_zh="DP 组也由连续的 rank 组成，与 TP 组的划分方式重复",
    ),
    Mutant(
        "grid_groups",
        "tp_groups_strided",
        "makes the TP groups strided (across nodes) and the DP groups consecutive: the grid transposed",
        [
            (
                "tp_groups = [list(range(d * tp, (d + 1) * tp)) for d in range(dp)]",
                "tp_groups = [list(range(d, world_size, dp)) for d in range(dp)]",
            ),
            (
                "dp_groups = [list(range(t, world_size, tp)) for t in range(tp)]",
                "dp_groups = [list(range(t * dp, (t + 1) * dp)) for t in range(tp)]",
            ),
        ],
        mistake_zh="让 TP 组按步长取 rank（跨节点）、DP 组取连续 rank：整个网格被转置了",
    ),
    Mutant(
        "grid_groups",
        "no_divisibility_check",
        "does not refuse a tp that does not divide the world",
        [("    if world_size % tp:\n", "    if False:\n")],
        mistake_zh="当 tp 不能整除 world size 时没有报错拒绝",
    ),
    Mutant(
        "TinyLlama2D",
        "no_final_norm",
        "forgets the final RMSNorm before the head",
        [("return self.head(self.norm(x))", "return self.head(x)")],
        mistake_zh="在输出头之前漏掉了最后的 RMSNorm",
    ),
    Mutant(
        "TinyLlama2D",
        "mlp_without_residual",
        "replaces the residual stream with the MLP's output",
        [('x = x + layer["mlp"](layer["norm2"](x))', 'x = layer["mlp"](layer["norm2"](x))')],
        mistake_zh="用 MLP 的输出替换了残差流，而不是加到残差上",
    ),
    Mutant(
        "TinyLlama2D",
        "split_over_the_world",
        "builds the MLP on the default group (the whole world) instead of the TP group",
        [('weight(p + "mlp.down_proj.weight"), group=tp_group,', 'weight(p + "mlp.down_proj.weight"), group=None,')],
        mistake_zh="在默认进程组（整个 world）上构建 MLP，而不是在 TP 组上",
    ),
    Mutant(
        "TinyLlama2D",
        "fresh_head",
        "leaves the output head at its random initialisation instead of copying lm_head.weight",
        [("self.head.weight.copy_(head)", "self.head.weight.mul_(1.0)")],
        mistake_zh="输出头保持随机初始化，没有拷贝 lm_head.weight",
    ),
    Mutant(
        "train_2d",
        "ddp_over_the_world",
        "averages the gradients over the whole world: different TP shards get mixed",
        [
            (
                "model = DDP(TinyLlama2D(state_dict, config, tp_group), group=dp_group)",
                "model = DDP(TinyLlama2D(state_dict, config, tp_group), group=None)",
            )
        ],
        mistake_zh="在整个 world 上平均梯度：不同 TP 分片的梯度被混在一起",
    ),
    Mutant(
        "train_2d",
        "whole_batch_everywhere",
        "every replica trains on the whole batch: right curve, d times the work",
        [("local = batch[rows[0] : rows[1]]", "local = batch")],
        mistake_zh="每个副本都在整个 batch 上训练：损失曲线没错，但工作量是 d 倍",
    ),
    Mutant(
        "train_2d",
        "local_loss",
        "records this replica's loss instead of the mean over the DP group",
        [("losses.append(total.item() / dp_size)", "losses.append(loss.item())")],
        mistake_zh="记录的是本副本的损失，而不是 DP 组内的平均损失",
    ),
    Mutant(
        "train_2d",
        "replica_index_from_tp_rank",
        "takes the replica index from the TP rank (rank % tp): the two ranks of a TP group read different rows",
        [("dp_size, dp_index = len(dp_groups[0]), rank // tp", "dp_size, dp_index = len(dp_groups[0]), rank % tp")],
        mistake_zh="用 TP rank（rank % tp）作为副本编号：同一 TP 组的两个 rank 读到了不同的数据行",
    ),
    Mutant(
        "train_2d",
        "no_zero_grad",
        "never zeroes the gradients: each step adds the previous steps' gradients",
        [("optimizer.zero_grad(set_to_none=True)", "pass")],
        mistake_zh="从不清零梯度：每一步都叠加了之前所有步的梯度",
    ),
    Mutant(
        "train_2d",
        "ignores_lr",
        "builds AdamW with the default learning rate 3e-3 whatever `lr` says",
        [
            (
                "torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)",
                "torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)",
            )
        ],
        mistake_zh="无论 lr 是多少都用默认学习率 3e-3 构造 AdamW",
    ),
]
