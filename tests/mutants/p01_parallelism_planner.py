"""Realistic wrong versions of the p01.parallelism_planner solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "params_per_gpu",
        "kv_heads_as_heads",
        "counts k_proj and v_proj with the H query heads (GQA's K key/value heads are what TP splits)",
        [
            (
                "attention = 2 * d * (heads + kv_heads) * head_dim // tp",
                "attention = 4 * d * heads * head_dim // tp",
            )
        ],
    ),
    Mutant(
        "params_per_gpu",
        "norms_split_by_tp",
        "splits the RMSNorm gains over the TP ranks (each rank needs the whole gain: they are replicated)",
        [
            (
                "dense_layer, expert_layer = attention + 2 * d + 3 * d * width // tp, 0",
                "dense_layer, expert_layer = attention + 2 * d // tp + 3 * d * width // tp, 0",
            )
        ],
    ),
    Mutant(
        "params_per_gpu",
        "experts_not_split_by_ep",
        "keeps all E experts on every GPU (expert parallelism divides them by ep)",
        [("experts // ep * 3 * d * width // tp", "experts * 3 * d * width // tp")],
    ),
    Mutant(
        "params_per_gpu",
        "no_head_on_last_stage",
        "forgets the output head on the last stage (only the final norm)",
        [("dense += vocab * d // tp + d  # output head", "dense += d  # output head")],
    ),
    Mutant(
        "params_per_gpu",
        "floor_layers_per_stage",
        "gives every stage L // pp layers, losing the remainder when pp does not divide L",
        [("per_stage = -(-layers // pp)", "per_stage = layers // pp")],
    ),
    Mutant(
        "params_per_gpu",
        "deficit_from_the_last_stages",
        "takes the missing layers from the last stages only (Llama 3 takes them from both ends)",
        [("counts[i // 2 if i % 2 == 0 else pp - 1 - i // 2] -= 1", "counts[pp - 1 - i] -= 1")],
    ),
    Mutant(
        "memory_per_gpu",
        "experts_sharded_over_dp",
        "ZeRO-shards the expert states over all dp replicas (each expert only has dp // ep replicas)",
        [('(held["expert"], plan.dp // plan.ep)', '(held["expert"], plan.dp)')],
    ),
    Mutant(
        "memory_per_gpu",
        "pp_in_flight_on_every_stage",
        "lets every stage hold pp micro-batches (1F1B: stage s holds pp - s)",
        [("in_flight = min(plan.pp - stage, m)", "in_flight = min(plan.pp, m)")],
    ),
    Mutant(
        "memory_per_gpu",
        "in_flight_ignores_micro_batches",
        "holds pp - s micro-batches even when the step has fewer",
        [("in_flight = min(plan.pp - stage, m)", "in_flight = plan.pp - stage")],
    ),
    Mutant(
        "memory_per_gpu",
        "activations_not_split_by_tp",
        "keeps whole activations on every TP rank (sequence parallelism splits all of them)",
        [("layer = -(-workload.layer_activation_bytes // plan.tp)", "layer = workload.layer_activation_bytes")],
    ),
    Mutant(
        "memory_per_gpu",
        "no_recomputed_layer",
        "with checkpointing counts the saved inputs only, not the layer recomputed in the backward pass",
        [
            (
                'activations = in_flight * held["layers"] * layer_input + layer',
                'activations = in_flight * held["layers"] * layer_input',
            )
        ],
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "all_reduce_without_factor_2",
        "prices a ring all-reduce like a reduce-scatter: (p-1)/p instead of 2(p-1)/p",
        [
            (
                "tp = calls * 2 * (plan.tp - 1) / plan.tp * activation",
                "tp = calls * (plan.tp - 1) / plan.tp * activation",
            )
        ],
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "zero3_like_zero2",
        "prices ZeRO-3 like ZeRO-2 (it all-gathers the weights twice: 1.5x the traffic)",
        [("grad_factor = 3 if plan.zero_stage == 3 else 2", "grad_factor = 2")],
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "recompute_forgotten",
        "forgets that checkpointing runs the forward pass, and its all-reduces, again",
        [("passes = 3 if plan.checkpointing else 2", "passes = 2")],
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "ep_over_dp",
        "spreads the all-to-all over the dp ranks instead of the ep ranks",
        [("ep = calls * (plan.ep - 1) / plan.ep", "ep = calls * (plan.dp - 1) / plan.dp")],
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "pp_not_split_by_tp",
        "sends the whole activation from every TP rank between stages",
        [
            (
                "pp = m * activation / plan.tp * ((stage > 0)",
                "pp = m * activation * ((stage > 0)",
            )
        ],
    ),
    Mutant(
        "best_plan",
        "pp_from_all_divisors",
        "takes pp from the divisors of num_gpus, not of num_gpus // tp (plans that leave GPUs idle)",
        [("for pp in divisors(num_gpus // tp):", "for pp in divisors(num_gpus):")],
    ),
    Mutant(
        "best_plan",
        "first_stage_only",
        "compares only the first stage's memory with the budget (the last stage holds the head)",
        [
            (
                "if max(sum(stage.values()) for stage in stages) > memory_budget:",
                "if sum(stages[0].values()) > memory_budget:",
            )
        ],
    ),
    Mutant(
        "best_plan",
        "strict_budget",
        "rejects a plan that fills the budget exactly",
        [("for stage in stages) > memory_budget:", "for stage in stages) >= memory_budget:")],
    ),
    Mutant(
        "best_plan",
        "no_zero3",
        "never tries ZeRO-3",
        [("for zero_stage in range(4):", "for zero_stage in range(3):")],
    ),
    Mutant(
        "best_plan",
        "no_expert_parallelism",
        "never tries ep > 1",
        [("for ep in divisors(dp):", "for ep in (1,):")],
    ),
]
