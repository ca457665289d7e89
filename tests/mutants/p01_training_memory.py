"""Realistic wrong versions of the p01.training_memory solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "model_state_bytes",
        "no_master_weights",
        "counts Adam's m and v but forgets the fp32 master copy of the weights (8 optimizer bytes, not 12)",
        [("(4 + 4 + 4) * (shard", "(4 + 4) * (shard")],
    ),
    Mutant(
        "model_state_bytes",
        "floor_shard",
        "divides the parameters by dp_size rounding down (the padded flat buffer rounds up)",
        [("shard = -(-num_params // dp_size)", "shard = num_params // dp_size")],
    ),
    Mutant(
        "model_state_bytes",
        "grads_sharded_by_zero1",
        "shards the gradients from ZeRO-1 on (stage off by one)",
        [('"grads": 2 * (shard if zero_stage >= 2', '"grads": 2 * (shard if zero_stage >= 1')],
    ),
    Mutant(
        "model_state_bytes",
        "params_sharded_by_zero2",
        "shards the weights from ZeRO-2 on (stage off by one)",
        [('"params": 2 * (shard if zero_stage >= 3', '"params": 2 * (shard if zero_stage >= 2')],
    ),
    Mutant(
        "layer_activation_bytes",
        "kv_heads",
        "saves the keys and values with the K key/value heads of GQA (eager attention repeats them to H)",
        [
            (
                "k_and_v = 2 * size * tokens * heads * head_dim",
                "k_and_v = 2 * size * tokens * config.num_key_value_heads * head_dim",
            )
        ],
    ),
    Mutant(
        "layer_activation_bytes",
        "softmax_in_model_dtype",
        "assumes the probabilities are saved once, in the model dtype (no fp32 softmax)",
        [("probs_bytes = 4 + (0 if dtype == torch.float32 else size)", "probs_bytes = size")],
    ),
    Mutant(
        "layer_activation_bytes",
        "norm_without_upcast",
        "counts the RMSNorm's three (B, T, d) tensors in the model dtype (no fp32 input copy)",
        [("(4 + 2 * size) + 4 * tokens", "(3 * size) + 4 * tokens")],
    ),
    Mutant(
        "layer_activation_bytes",
        "no_attention_matrix",
        "leaves the (B, H, T, T) probabilities out",
        [("return 2 * norm + q_and_o + k_and_v + probs + mlp", "return 2 * norm + q_and_o + k_and_v + mlp")],
    ),
    Mutant(
        "activation_memory",
        "no_recomputed_layer",
        "with checkpointing counts only the saved layer inputs, not the layer recomputed in the backward pass",
        [("return inputs + per_layer", "return inputs")],
    ),
    Mutant(
        "activation_memory",
        "fp32_inputs",
        "keeps the checkpointed layer inputs at 4 bytes whatever the dtype",
        [("batch * seq_len * config.hidden_size * size", "batch * seq_len * config.hidden_size * 4")],
    ),
    Mutant(
        "activation_memory",
        "checkpointing_ignored",
        "returns L layers of activations whether or not the layers are checkpointed",
        [("if not checkpointing:", "if True:")],
    ),
]
