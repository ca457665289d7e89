"""Realistic wrong versions of the p02.reward_model solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "last_token_rewards",
        "last_column",
        "reads the last column whatever the padding (a pad token on right-padded rows)",
        [("return values.gather(1, last.unsqueeze(1)).squeeze(1)", "return values[:, -1]")],
        mistake_zh="不管 padding，读最后一列（右填充的行读到的是 pad token）",
    ),
    Mutant(
        "last_token_rewards",
        "right_padding_only",
        "takes mask.sum() - 1, which is right only for right padding",
        [("last = (positions * real).argmax(dim=1)", "last = real.sum(dim=1) - 1")],
        mistake_zh="取 mask.sum() - 1，只对右填充成立",
    ),
    Mutant(
        "last_token_rewards",
        "first_real_token",
        "takes the first real token (argmax of the mask)",
        [("last = (positions * real).argmax(dim=1)", "last = real.int().argmax(dim=1)")],
        mistake_zh="取第一个真实 token（掩码的 argmax）",
    ),
    Mutant(
        "bradley_terry_loss",
        "log_of_sigmoid",
        "writes -log(sigmoid(gap)): infinite once sigmoid underflows",
        [("loss = F.softplus(-gap).mean()", "loss = -torch.log(torch.sigmoid(gap)).mean()")],
        mistake_zh="写成 -log(sigmoid(gap))：sigmoid 下溢后就是无穷大",
    ),
    Mutant(
        "bradley_terry_loss",
        "pair_swapped",
        "computes the gap as rejected - chosen",
        [("gap = chosen_rewards - rejected_rewards  # (B,)", "gap = rejected_rewards - chosen_rewards  # (B,)")],
        mistake_zh="差值算成 rejected - chosen",
    ),
    Mutant(
        "bradley_terry_loss",
        "margin_added",
        "adds the margin instead of subtracting it",
        [("gap = gap - margin", "gap = gap + margin")],
        mistake_zh="加上 margin 而不是减去",
    ),
    Mutant(
        "bradley_terry_loss",
        "ties_count_as_correct",
        "counts a tie as a correct ranking",
        [("accuracy = (chosen_rewards > rejected_rewards)", "accuracy = (chosen_rewards >= rejected_rewards)")],
        mistake_zh="把平局算作排序正确",
    ),
    Mutant(
        "bradley_terry_loss",
        "centring_the_difference",
        "centres the difference instead of the sum",
        [
            (
                "center_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()",
                "center_coefficient * ((chosen_rewards - rejected_rewards) ** 2).mean()",
            )
        ],
        mistake_zh="对差值而不是和做中心化",
    ),
    Mutant(
        "RewardModel",
        "mean_pooling",
        "averages the values over all positions instead of reading the last real token",
        [("return last_token_rewards(values, attention_mask)  # (B,)", "return values.mean(dim=1)")],
        mistake_zh="对所有位置的值取平均，而不是读最后一个真实 token",
    ),
    Mutant(
        "RewardModel",
        "mask_not_passed",
        "calls the backbone without the attention mask",
        [
            (
                "hidden = self.backbone(input_ids, attention_mask)",
                "hidden = self.backbone(input_ids, torch.ones_like(attention_mask))",
            )
        ],
        mistake_zh="调用主干网络时没有传注意力掩码",
    ),
    Mutant(
        "RewardModel",
        "head_with_bias",
        "gives the score head a bias (HF checkpoints have none)",
        [("self.score = nn.Linear(hidden_size, 1, bias=False)", "self.score = nn.Linear(hidden_size, 1)")],
        mistake_zh="给打分头加了 bias（HF 的检查点没有）",
    ),
]
