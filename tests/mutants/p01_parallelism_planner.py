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
        mistake_zh="k_proj 和 v_proj 按 H 个 query 头计算（TP 切分的是 GQA 的 K 个 key/value 头）",
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
        mistake_zh="把 RMSNorm 的增益按 TP rank 切分（每个 rank 都需要完整的增益：它们是复制的）",
    ),
    Mutant(
        "params_per_gpu",
        "experts_not_split_by_ep",
        "keeps all E experts on every GPU (expert parallelism divides them by ep)",
        [("experts // ep * 3 * d * width // tp", "experts * 3 * d * width // tp")],
        mistake_zh="每张 GPU 上保留全部 E 个专家（专家并行会把它们除以 ep）",
    ),
    Mutant(
        "params_per_gpu",
        "no_head_on_last_stage",
        "forgets the output head on the last stage (only the final norm)",
        [("dense += vocab * d // tp + d  # output head", "dense += d  # output head")],
        mistake_zh="忘了最后一个阶段上的输出头（只算了最终的 norm）",
    ),
    Mutant(
        "params_per_gpu",
        "floor_layers_per_stage",
        "gives every stage L // pp layers, losing the remainder when pp does not divide L",
        [("per_stage = -(-layers // pp)", "per_stage = layers // pp")],
        mistake_zh="每个阶段分 L // pp 层，pp 不整除 L 时丢了余数",
    ),
    Mutant(
        "params_per_gpu",
        "deficit_from_the_last_stages",
        "takes the missing layers from the last stages only (Llama 3 takes them from both ends)",
        [("counts[i // 2 if i % 2 == 0 else pp - 1 - i // 2] -= 1", "counts[pp - 1 - i] -= 1")],
        mistake_zh="缺的层只从最后几个阶段扣（Llama 3 从两端扣）",
    ),
    Mutant(
        "memory_per_gpu",
        "experts_sharded_over_dp",
        "ZeRO-shards the expert states over all dp replicas (each expert only has dp // ep replicas)",
        [('(held["expert"], plan.dp // plan.ep)', '(held["expert"], plan.dp)')],
        mistake_zh="把专家的状态按全部 dp 副本做 ZeRO 分片（每个专家只有 dp // ep 个副本）",
    ),
    Mutant(
        "memory_per_gpu",
        "pp_in_flight_on_every_stage",
        "lets every stage hold pp micro-batches (1F1B: stage s holds pp - s)",
        [("in_flight = min(plan.pp - stage, m)", "in_flight = min(plan.pp, m)")],
        mistake_zh="每个阶段都持有 pp 个微批次（1F1B：阶段 s 持有 pp - s 个）",
    ),
    Mutant(
        "memory_per_gpu",
        "in_flight_ignores_micro_batches",
        "holds pp - s micro-batches even when the step has fewer",
        [("in_flight = min(plan.pp - stage, m)", "in_flight = plan.pp - stage")],
        mistake_zh="即使一步的微批次更少，也持有 pp - s 个",
    ),
    Mutant(
        "memory_per_gpu",
        "activations_not_split_by_tp",
        "keeps whole activations on every TP rank (sequence parallelism splits all of them)",
        [("layer = -(-workload.layer_activation_bytes // plan.tp)", "layer = workload.layer_activation_bytes")],
        mistake_zh="每个 TP rank 都保留完整的激活（序列并行会把它们全部切分）",
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
        mistake_zh="开启重计算时只算了保存的输入，没算反向中被重算的那一层",
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
        mistake_zh="把环形 all-reduce 按 reduce-scatter 计价：(p-1)/p 而不是 2(p-1)/p",
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "zero3_like_zero2",
        "prices ZeRO-3 like ZeRO-2 (it all-gathers the weights twice: 1.5x the traffic)",
        [("grad_factor = 3 if plan.zero_stage == 3 else 2", "grad_factor = 2")],
        mistake_zh="把 ZeRO-3 按 ZeRO-2 计价（它要 all-gather 权重两次：通信量是 1.5 倍）",
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "recompute_forgotten",
        "forgets that checkpointing runs the forward pass, and its all-reduces, again",
        [("passes = 3 if plan.checkpointing else 2", "passes = 2")],
        mistake_zh="忘了重计算会再跑一遍前向，连同其中的 all-reduce",
    ),
    Mutant(
        "comm_bytes_per_gpu",
        "ep_over_dp",
        "spreads the all-to-all over the dp ranks instead of the ep ranks",
        [("ep = calls * (plan.ep - 1) / plan.ep", "ep = calls * (plan.dp - 1) / plan.dp")],
        mistake_zh="把 all-to-all 摊到 dp rank 上，而不是 ep rank 上",
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
        mistake_zh="阶段之间每个 TP rank 都发送完整的激活",
    ),
    Mutant(
        "best_plan",
        "pp_from_all_divisors",
        "takes pp from the divisors of num_gpus, not of num_gpus // tp (plans that leave GPUs idle)",
        [("for pp in divisors(num_gpus // tp):", "for pp in divisors(num_gpus):")],
        mistake_zh="pp 取 num_gpus 的因数，而不是 num_gpus // tp 的因数（会让 GPU 闲置的方案）",
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
        mistake_zh="只拿第一个阶段的显存与预算比较（输出头在最后一个阶段）",
    ),
    Mutant(
        "best_plan",
        "strict_budget",
        "rejects a plan that fills the budget exactly",
        [("for stage in stages) > memory_budget:", "for stage in stages) >= memory_budget:")],
        mistake_zh="拒绝恰好用满预算的方案",
    ),
    Mutant(
        "best_plan",
        "no_zero3",
        "never tries ZeRO-3",
        [("for zero_stage in range(4):", "for zero_stage in range(3):")],
        mistake_zh="从不尝试 ZeRO-3",
    ),
    Mutant(
        "best_plan",
        "no_expert_parallelism",
        "never tries ep > 1",
        [("for ep in divisors(dp):", "for ep in (1,):")],
        mistake_zh="从不尝试 ep > 1",
    ),
]
