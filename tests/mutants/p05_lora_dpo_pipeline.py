"""Realistic wrong versions of the p05.lora_dpo_pipeline solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sft_stage",
        "base_not_copied",
        "wraps the base model itself: apply_lora changes it in place",
        [("apply_lora(copy.deepcopy(base), TARGETS", "apply_lora(base, TARGETS")],
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
    ),
    Mutant(
        "sft_stage",
        "prompt_as_labels",
        "trains on the input ids as labels: the loss also scores the random prompt tokens",
        [("loss = sft_loss(logits, labels[rows])", "loss = sft_loss(logits, input_ids[rows])")],
    ),
    Mutant(
        "sft_stage",
        "no_step",
        "forgets optimizer.step(): nothing trains",
        [("optimizer.step()", "pass  # optimizer.step() forgotten")],
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
    ),
    Mutant(
        "dpo_stage",
        "chosen_rejected_swapped",
        "stacks [rejected; chosen]: the same as flipping the sign of beta, DPO learns the dispreferred answer",
        [("torch.cat([chosen[pairs], rejected[pairs]])", "torch.cat([rejected[pairs], chosen[pairs]])")],
    ),
    Mutant(
        "dpo_stage",
        "sft_model_trained_in_place",
        "trains the SFT model itself as the policy: the reference's source is destroyed",
        [("policy = copy.deepcopy(sft_model).train()", "policy = sft_model.train()")],
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
    ),
    Mutant(
        "merge_adapters",
        "adapter_dropped",
        "keeps only the base weight: the adapter's training is thrown away",
        [("weight = weight + delta.to(weight.dtype)", "weight = weight")],
    ),
    Mutant(
        "merge_adapters",
        "input_changed",
        "merges the input model itself instead of a copy",
        [("merged = copy.deepcopy(model)", "merged = model")],
    ),
]
