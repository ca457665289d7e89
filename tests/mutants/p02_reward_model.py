"""Realistic wrong versions of the p02.reward_model solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "last_token_rewards",
        "last_column",
        "reads the last column whatever the padding (a pad token on right-padded rows)",
        [("return values.gather(1, last.unsqueeze(1)).squeeze(1)", "return values[:, -1]")],
    ),
    Mutant(
        "last_token_rewards",
        "right_padding_only",
        "takes mask.sum() - 1, which is right only for right padding",
        [("last = (positions * real).argmax(dim=1)", "last = real.sum(dim=1) - 1")],
    ),
    Mutant(
        "last_token_rewards",
        "first_real_token",
        "takes the first real token (argmax of the mask)",
        [("last = (positions * real).argmax(dim=1)", "last = real.int().argmax(dim=1)")],
    ),
    Mutant(
        "bradley_terry_loss",
        "log_of_sigmoid",
        "writes -log(sigmoid(gap)): infinite once sigmoid underflows",
        [("loss = F.softplus(-gap).mean()", "loss = -torch.log(torch.sigmoid(gap)).mean()")],
    ),
    Mutant(
        "bradley_terry_loss",
        "pair_swapped",
        "computes the gap as rejected - chosen",
        [("gap = chosen_rewards - rejected_rewards  # (B,)", "gap = rejected_rewards - chosen_rewards  # (B,)")],
    ),
    Mutant(
        "bradley_terry_loss",
        "margin_added",
        "adds the margin instead of subtracting it",
        [("gap = gap - margin", "gap = gap + margin")],
    ),
    Mutant(
        "bradley_terry_loss",
        "ties_count_as_correct",
        "counts a tie as a correct ranking",
        [("accuracy = (chosen_rewards > rejected_rewards)", "accuracy = (chosen_rewards >= rejected_rewards)")],
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
    ),
    Mutant(
        "RewardModel",
        "mean_pooling",
        "averages the values over all positions instead of reading the last real token",
        [("return last_token_rewards(values, attention_mask)  # (B,)", "return values.mean(dim=1)")],
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
    ),
    Mutant(
        "RewardModel",
        "head_with_bias",
        "gives the score head a bias (HF checkpoints have none)",
        [("self.score = nn.Linear(hidden_size, 1, bias=False)", "self.score = nn.Linear(hidden_size, 1)")],
    ),
]
