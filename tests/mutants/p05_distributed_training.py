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
    ),
    Mutant(
        "grid_groups",
        "no_divisibility_check",
        "does not refuse a tp that does not divide the world",
        [("    if world_size % tp:\n", "    if False:\n")],
    ),
    Mutant(
        "TinyLlama2D",
        "no_final_norm",
        "forgets the final RMSNorm before the head",
        [("return self.head(self.norm(x))", "return self.head(x)")],
    ),
    Mutant(
        "TinyLlama2D",
        "mlp_without_residual",
        "replaces the residual stream with the MLP's output",
        [('x = x + layer["mlp"](layer["norm2"](x))', 'x = layer["mlp"](layer["norm2"](x))')],
    ),
    Mutant(
        "TinyLlama2D",
        "split_over_the_world",
        "builds the MLP on the default group (the whole world) instead of the TP group",
        [('weight(p + "mlp.down_proj.weight"), group=tp_group,', 'weight(p + "mlp.down_proj.weight"), group=None,')],
    ),
    Mutant(
        "TinyLlama2D",
        "fresh_head",
        "leaves the output head at its random initialisation instead of copying lm_head.weight",
        [("self.head.weight.copy_(head)", "self.head.weight.mul_(1.0)")],
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
    ),
    Mutant(
        "train_2d",
        "whole_batch_everywhere",
        "every replica trains on the whole batch: right curve, d times the work",
        [("local = batch[rows[0] : rows[1]]", "local = batch")],
    ),
    Mutant(
        "train_2d",
        "local_loss",
        "records this replica's loss instead of the mean over the DP group",
        [("losses.append(total.item() / dp_size)", "losses.append(loss.item())")],
    ),
    Mutant(
        "train_2d",
        "replica_index_from_tp_rank",
        "takes the replica index from the TP rank (rank % tp): the two ranks of a TP group read different rows",
        [("dp_size, dp_index = len(dp_groups[0]), rank // tp", "dp_size, dp_index = len(dp_groups[0]), rank % tp")],
    ),
    Mutant(
        "train_2d",
        "no_zero_grad",
        "never zeroes the gradients: each step adds the previous steps' gradients",
        [("optimizer.zero_grad(set_to_none=True)", "pass")],
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
