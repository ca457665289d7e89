"""Realistic wrong versions of the p05.lora_dpo_pipeline solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sft_stage",
        "base_not_copied",
        "wraps the base model itself: apply_lora changes it in place",
        [("apply_lora(copy.deepcopy(base), TARGETS", "apply_lora(base, TARGETS")],
        mistake_zh="直接包装基座模型本身：apply_lora 原地改了它",
    ),
    Mutant(
        "sft_stage",
        "everything_trainable",
        "turns gradients back on for every parameter and trains the base weights too",
        [
            (
                "params = [p for p in model.parameters() if p.requires_grad]",
                "params = list(model.requires_grad_(True).parameters())",
            )
        ],
        mistake_zh="给每个参数都重新打开梯度，基座权重也被训练了",
    ),
    Mutant(
        "sft_stage",
        "prompt_as_labels",
        "trains on the input ids as labels: the loss also scores the random prompt tokens",
        [("loss = sft_loss(logits, labels[rows])", "loss = sft_loss(logits, input_ids[rows])")],
        mistake_zh="把输入 ids 当作标签训练：损失也给随机的提示 token 打分",
    ),
    Mutant(
        "sft_stage",
        "no_step",
        "forgets optimizer.step(): nothing trains",
        [("optimizer.step()", "pass  # optimizer.step() forgotten")],
        mistake_zh="忘了 optimizer.step()：什么都没训练",
    ),
    Mutant(
        "dpo_stage",
        "reference_is_policy",
        "uses the policy as its own reference (not a frozen copy): every reward is 0, nothing anchors the policy",
        [
            (
                "loss, metrics = dpo_batch_loss(policy, reference, input_ids",
                "loss, metrics = dpo_batch_loss(policy, policy, input_ids",
            )
        ],
        mistake_zh="把策略自己当作参考（不是冻结的副本）：每个奖励都是 0，没有东西约束策略",
    ),
    Mutant(
        "dpo_stage",
        "chosen_rejected_swapped",
        "stacks [rejected; chosen]: the same as flipping the sign of beta, DPO learns the dispreferred answer",
        [("torch.cat([chosen[pairs], rejected[pairs]])", "torch.cat([rejected[pairs], chosen[pairs]])")],
        mistake_zh="按 [rejected; chosen] 堆叠：等于把 beta 取反，DPO 学的是不被偏好的答案",
    ),
    Mutant(
        "dpo_stage",
        "sft_model_trained_in_place",
        "trains the SFT model itself as the policy: the reference's source is destroyed",
        [("policy = copy.deepcopy(sft_model).train()", "policy = sft_model.train()")],
        mistake_zh="直接把 SFT 模型当作策略训练：参考模型的来源被破坏了",
    ),
    Mutant(
        "merge_adapters",
        "no_scaling",
        "merges B @ A without the scale alpha / r",
        [
            (
                "delta = module.scaling * (module.lora_B.weight @ module.lora_A.weight)",
                "delta = module.lora_B.weight @ module.lora_A.weight",
            )
        ],
        mistake_zh="合并 B @ A 时没有乘缩放 alpha / r",
    ),
    Mutant(
        "merge_adapters",
        "adapter_dropped",
        "keeps only the base weight: the adapter's training is thrown away",
        [("weight = weight + delta.to(weight.dtype)", "weight = weight")],
        mistake_zh="只保留基座权重：适配器的训练白费了",
    ),
    Mutant(
        "merge_adapters",
        "input_changed",
        "merges the input model itself instead of a copy",
        [("merged = copy.deepcopy(model)", "merged = model")],
        mistake_zh="合并到输入模型本身，而不是副本",
    ),
]
