"""Realistic wrong versions of the p01.params_and_flops solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "dense_param_count",
        "head_dim_from_hidden",
        "always takes head_dim = hidden_size // num_attention_heads, ignoring config.head_dim",
        [('head_dim = getattr(config, "head_dim", None) or d // H', "head_dim = d // H")],
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
    ),
    Mutant(
        "dense_param_count",
        "head_counted_when_tied",
        "counts the lm_head even when it is tied to the embedding",
        [("(1 if config.tie_word_embeddings else 2)", "2")],
    ),
    Mutant(
        "dense_param_count",
        "no_o_proj_bias",
        "adds biases to q, k and v only (Llama's attention_bias also gives o_proj one)",
        [("attention += H * head_dim + 2 * K * head_dim + d", "attention += H * head_dim + 2 * K * head_dim")],
    ),
    Mutant(
        "dense_param_count",
        "qk_norm_per_head",
        "counts Qwen3's q_norm/k_norm gains once per head (2*H*head_dim) instead of once (2*head_dim)",
        [("attention += 2 * head_dim  # QK-norm", "attention += 2 * H * head_dim  # QK-norm")],
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
    ),
    Mutant(
        "moe_param_count",
        "router_forgotten",
        "leaves out the router (E x d per MoE layer)",
        [
            ("shared = experts * d + attention + norms  # router", "shared = attention + norms  # router"),
            ("shared = experts * d + config.n_shared_experts * expert", "shared = config.n_shared_experts * expert"),
        ],
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
    ),
    Mutant(
        "moe_param_count",
        "every_layer_moe",
        "ignores first_k_dense_replace: every DeepSeek layer has experts",
        [("dense_layers = config.first_k_dense_replace", "dense_layers = 0")],
    ),
    Mutant(
        "moe_param_count",
        "no_shared_rope_key",
        "forgets the rotary key columns of kv_a_proj_with_mqa (r_kv instead of r_kv + rope)",
        [("d * (latent + config.qk_rope_head_dim)", "d * latent")],
    ),
    Mutant(
        "moe_param_count",
        "active_all_experts",
        "counts every routed expert as active in Mixtral (active = total)",
        [("active = L * (shared + top_k * expert)", "active = L * (shared + experts * expert)")],
    ),
    Mutant(
        "forward_flops",
        "no_lm_head",
        "leaves the output head out of the matmuls",
        [("config.num_hidden_layers * per_layer + config.vocab_size * d", "config.num_hidden_layers * per_layer")],
    ),
    Mutant(
        "forward_flops",
        "attention_with_kv_heads",
        "counts the attention matmuls with the K key/value heads instead of the H query heads",
        [("attention = 4 * batch * H * seq_len", "attention = 4 * batch * K * seq_len")],
    ),
    Mutant(
        "forward_flops",
        "causal_half",
        "counts only the causal half of the score matrix",
        [("attention = 4 * batch * H", "attention = 2 * batch * H")],
    ),
    Mutant(
        "forward_flops",
        "macs_not_flops",
        "counts multiply-adds (1 per) instead of FLOPs (2 per) for the weights",
        [("return 2 * tokens * matmul_weights", "return tokens * matmul_weights")],
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
    ),
    Mutant(
        "training_flops_and_mfu",
        "no_attention_term",
        "uses 6N alone",
        [("return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len", "return 6 * n_params")],
    ),
    Mutant(
        "training_flops_and_mfu",
        "mfu_not_per_chip",
        "divides by the peak of one chip, not of all chips",
        [("/ (num_chips * peak_flops_per_chip)", "/ peak_flops_per_chip")],
    ),
    Mutant(
        "training_flops_and_mfu",
        "mfu_in_percent",
        "returns a percentage instead of a fraction",
        [("return flops_per_token * tokens_per_second", "return 100 * flops_per_token * tokens_per_second")],
    ),
]
