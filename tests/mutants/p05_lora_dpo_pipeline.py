"""Realistic wrong versions of the p05.lora_dpo_pipeline solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sft_stage",
        "base_not_copied",
        "wraps the base model itself: apply_lora changes it in place",
        [("apply_lora(copy.deepcopy(base), TARGETS", "apply_lora(base, TARGETS")],
        mistake_zh="直接包装基座模型本身：apply_lora 会就地修改它",
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
        mistake_zh="重新为所有参数打开梯度，连基座权重也一起训练",
    ),
    Mutant(
        "sft_stage",
        "prompt_as_labels",
        "trains on the input ids as labels: the loss also scores the random prompt tokens",
        [("loss = sft_loss(logits, labels[rows])", "loss = sft_loss(logits, input_ids[rows])")],
        mistake_zh="把输入 id 直接当作标签训练：损失也会为随机的提示词 token 打分",
    ),
    Mutant(
        "sft_stage",
        "no_step",
        "forgets optimizer.step(): nothing trains",
        [("optimizer.step()", "pass  # optimizer.step() forgotten")],
        mistake_zh="忘了调用 optimizer.step()：什么都没有训练",
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
        mistake_zh="用策略模型本身作参考模型（而不是冻结的副本）：每个奖励都是 0，没有东西约束策略",
    ),
    Mutant(
        "dpo_stage",
        "chosen_rejected_swapped",
        "stacks [rejected; chosen]: the same as flipping the sign of beta, DPO learns the dispreferred answer",
        [("torch.cat([chosen[pairs], rejected[pairs]])", "torch.cat([rejected[pairs], chosen[pairs]])")],
        mistake_zh="按 [rejected; chosen] 堆叠：等同于把 beta 取反，DPO 学到的是不被偏好的回答",
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
        mistake_zh="合并 B @ A 时没有乘缩放系数 alpha / r",
    ),
    Mutant(
        "merge_adapters",
        "adapter_dropped",
        "keeps only the base weight: the adapter's training is thrown away",
        [("weight = weight + delta.to(weight.dtype)", "weight = weight")],
        mistake_zh="只保留基座权重：适配器训练的结果被丢弃了",
    ),
    Mutant(
        "merge_adapters",
        "input_changed",
        "merges the input model itself instead of a copy",
        [("merged = copy.deepcopy(model)", "merged = model")],
        mistake_zh="直接合并进输入模型本身，而不是它的副本",
    ),
    Mutant(
        "sft_stage",
        "sft_ignores_lr",
        "builds AdamW with the default learning rate 3e-2 whatever `lr` says",
        [
            (
                "torch.optim.AdamW(params, lr=lr, weight_decay=0.0)",
                "torch.optim.AdamW(params, lr=3e-2, weight_decay=0.0)",
            )
        ],
        mistake_zh="无论 lr 是多少都用默认学习率 3e-2 构造 AdamW",
    ),
    Mutant(
        "sft_stage",
        "sft_ignores_rank",
        "makes the adapters of the default rank 8 whatever `r` says",
        [
            (
                "apply_lora(copy.deepcopy(base), TARGETS, r=r, alpha=alpha)",
                "apply_lora(copy.deepcopy(base), TARGETS, r=8, alpha=alpha)",
            )
        ],
        mistake_zh="无论 r 是多少，适配器的秩都取默认的 8",
    ),
    Mutant(
        "sft_stage",
        "sft_ignores_alpha",
        "scales the adapters with the default alpha 16 whatever `alpha` says",
        [
            (
                "apply_lora(copy.deepcopy(base), TARGETS, r=r, alpha=alpha)",
                "apply_lora(copy.deepcopy(base), TARGETS, r=r, alpha=16.0)",
            )
        ],
        mistake_zh="无论 alpha 是多少，适配器都按默认的 alpha=16 缩放",
    ),
    Mutant(
        "sft_stage",
        "sft_ignores_seed",
        "seeds the row sampler with 0 whatever `seed` says",
        [("generator = torch.Generator().manual_seed(seed)", "generator = torch.Generator().manual_seed(0)")],
        mistake_zh="无论 seed 是多少，抽样生成器都用 0 做种子",
    ),
    Mutant(
        "sft_stage",
        "sft_global_rng_rows",
        "draws the rows from the global random state instead of a generator seeded with `seed`",
        [
            (
                "rows = torch.randint(0, input_ids.shape[0], (batch_size,), generator=generator)",
                "rows = torch.randint(0, input_ids.shape[0], (batch_size,))",
            )
        ],
        mistake_zh="从全局随机状态而不是用 seed 做种子的生成器里抽样本行",
    ),
    Mutant(
        "dpo_stage",
        "dpo_ignores_lr",
        "builds AdamW with the default learning rate 2e-2 whatever `lr` says",
        [("if p.requires_grad], lr=lr, weight_decay=0.0)", "if p.requires_grad], lr=2e-2, weight_decay=0.0)")],
        mistake_zh="无论 lr 是多少都用默认学习率 2e-2 构造 AdamW",
    ),
    Mutant(
        "dpo_stage",
        "dpo_ignores_prompt_len",
        "masks the completion from the module's PROMPT_LEN whatever `prompt_len` says",
        [("completion_mask[:, prompt_len:] = 1", "completion_mask[:, PROMPT_LEN:] = 1")],
        mistake_zh="无论 prompt_len 是多少，completion 掩码都从模块常量 PROMPT_LEN 开始",
    ),
    Mutant(
        "dpo_stage",
        "dpo_ignores_seed",
        "seeds the pair sampler with 0 whatever `seed` says",
        [("generator = torch.Generator().manual_seed(seed)", "generator = torch.Generator().manual_seed(0)")],
        mistake_zh="无论 seed 是多少，抽样生成器都用 0 做种子",
    ),
]
