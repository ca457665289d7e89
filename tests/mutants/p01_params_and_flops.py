"""Realistic wrong versions of the p01.params_and_flops solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "dense_param_count",
        "head_dim_from_hidden",
        "always takes head_dim = hidden_size // num_attention_heads, ignoring config.head_dim",
        [('head_dim = getattr(config, "head_dim", None) or d // H', "head_dim = d // H")],
        mistake_zh="总是取 head_dim = hidden_size // num_attention_heads，忽略 config.head_dim",
    ),
    Mutant(
        "dense_param_count",
        "kv_full_width",
        "gives k_proj and v_proj the width of q_proj (forgets grouped-query attention)",
        [
            (
                "attention = 2 * d * H * head_dim + 2 * d * K * head_dim  # q, o",
                "attention = 4 * d * H * head_dim  # q, o",
            )
        ],
        mistake_zh="给 k_proj 和 v_proj 与 q_proj 相同的宽度（忘了分组查询注意力）",
    ),
    Mutant(
        "dense_param_count",
        "head_counted_when_tied",
        "counts the lm_head even when it is tied to the embedding",
        [("(1 if config.tie_word_embeddings else 2)", "2")],
        mistake_zh="lm_head 与嵌入绑定时仍然计入它",
    ),
    Mutant(
        "dense_param_count",
        "no_o_proj_bias",
        "adds biases to q, k and v only (Llama's attention_bias also gives o_proj one)",
        [("attention += H * head_dim + 2 * K * head_dim + d", "attention += H * head_dim + 2 * K * head_dim")],
        mistake_zh="只给 q、k、v 加 bias（Llama 的 attention_bias 也给 o_proj 一个）",
    ),
    Mutant(
        "dense_param_count",
        "qk_norm_per_head",
        "counts Qwen3's q_norm/k_norm gains once per head (2*H*head_dim) instead of once (2*head_dim)",
        [("attention += 2 * head_dim  # QK-norm", "attention += 2 * H * head_dim  # QK-norm")],
        mistake_zh="Qwen3 的 q_norm/k_norm 增益按每个头算一次（2·H·head_dim），而不是只算一次（2·head_dim）",
    ),
    Mutant(
        "dense_param_count",
        "no_final_norm",
        "forgets the final RMSNorm before the head",
        [
            (
                "return embeddings + config.num_hidden_layers * layer + d",
                "return embeddings + config.num_hidden_layers * layer",
            )
        ],
        mistake_zh="忘了输出头之前的最后一个 RMSNorm",
    ),
    Mutant(
        "moe_param_count",
        "router_forgotten",
        "leaves out the router (E x d per MoE layer)",
        [
            ("shared = experts * d + attention + norms  # router", "shared = attention + norms  # router"),
            ("shared = experts * d + config.n_shared_experts * expert", "shared = config.n_shared_experts * expert"),
        ],
        mistake_zh="漏掉路由器（每个 MoE 层 E × d）",
    ),
    Mutant(
        "moe_param_count",
        "shared_experts_routed",
        "treats DeepSeek's shared experts like routed ones: only in the total, not in the active count",
        [
            ("shared = experts * d + config.n_shared_experts * expert + attention", "shared = experts * d + attention"),
            (
                "total = dense + (L - dense_layers) * (shared + experts * expert)",
                "total = dense + (L - dense_layers) * (shared + (experts + config.n_shared_experts) * expert)",
            ),
        ],
        mistake_zh="把 DeepSeek 的共享专家当作路由专家：只计入总数，不计入激活参数",
    ),
    Mutant(
        "moe_param_count",
        "every_layer_moe",
        "ignores first_k_dense_replace: every DeepSeek layer has experts",
        [("dense_layers = config.first_k_dense_replace", "dense_layers = 0")],
        mistake_zh="忽略 first_k_dense_replace：DeepSeek 的每一层都有专家",
    ),
    Mutant(
        "moe_param_count",
        "no_shared_rope_key",
        "forgets the rotary key columns of kv_a_proj_with_mqa (r_kv instead of r_kv + rope)",
        [("d * (latent + config.qk_rope_head_dim)", "d * latent")],
        mistake_zh="忘了 kv_a_proj_with_mqa 中旋转位置 key 的那些列（r_kv 而不是 r_kv + rope）",
    ),
    Mutant(
        "moe_param_count",
        "active_all_experts",
        "counts every routed expert as active in Mixtral (active = total)",
        [("active = L * (shared + top_k * expert)", "active = L * (shared + experts * expert)")],
        mistake_zh="Mixtral 中把每个路由专家都算作激活（active = total）",
    ),
    Mutant(
        "forward_flops",
        "no_lm_head",
        "leaves the output head out of the matmuls",
        [("config.num_hidden_layers * per_layer + config.vocab_size * d", "config.num_hidden_layers * per_layer")],
        mistake_zh="矩阵乘里漏掉输出头",
    ),
    Mutant(
        "forward_flops",
        "attention_with_kv_heads",
        "counts the attention matmuls with the K key/value heads instead of the H query heads",
        [("attention = 4 * batch * H * seq_len", "attention = 4 * batch * K * seq_len")],
        mistake_zh="注意力的矩阵乘按 K 个 key/value 头而不是 H 个 query 头计算",
    ),
    Mutant(
        "forward_flops",
        "causal_half",
        "counts only the causal half of the score matrix",
        [("attention = 4 * batch * H", "attention = 2 * batch * H")],
        mistake_zh="只算分数矩阵的因果那一半",
    ),
    Mutant(
        "forward_flops",
        "macs_not_flops",
        "counts multiply-adds (1 per) instead of FLOPs (2 per) for the weights",
        [("return 2 * tokens * matmul_weights", "return tokens * matmul_weights")],
        mistake_zh="权重部分按乘加次数（每次 1）而不是 FLOPs（每次 2）计算",
    ),
    Mutant(
        "training_flops_and_mfu",
        "forward_only",
        "uses the forward cost 2N + 4LHdT instead of forward plus backward",
        [
            (
                "return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len",
                "return 2 * n_params + 4 * n_layers * n_heads * head_dim * seq_len",
            )
        ],
        mistake_zh="用前向成本 2N + 4LHdT，而不是前向加反向",
    ),
    Mutant(
        "training_flops_and_mfu",
        "no_attention_term",
        "uses 6N alone",
        [("return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len", "return 6 * n_params")],
        mistake_zh="只用 6N",
    ),
    Mutant(
        "training_flops_and_mfu",
        "mfu_not_per_chip",
        "divides by the peak of one chip, not of all chips",
        [("/ (num_chips * peak_flops_per_chip)", "/ peak_flops_per_chip")],
        mistake_zh="除以一张芯片的峰值，而不是全部芯片的",
    ),
    Mutant(
        "training_flops_and_mfu",
        "mfu_in_percent",
        "returns a percentage instead of a fraction",
        [("return flops_per_token * tokens_per_second", "return 100 * flops_per_token * tokens_per_second")],
        mistake_zh="返回百分数而不是比例",
    ),
]
