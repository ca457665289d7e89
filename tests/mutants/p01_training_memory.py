"""Realistic wrong versions of the p01.training_memory solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "model_state_bytes",
        "no_master_weights",
        "counts Adam's m and v but forgets the fp32 master copy of the weights (8 optimizer bytes, not 12)",
        [("(4 + 4 + 4) * (shard", "(4 + 4) * (shard")],
        mistake_zh="算了 Adam 的 m 和 v，却忘了权重的 fp32 主副本（优化器 8 字节而不是 12 字节）",
    ),
    Mutant(
        "model_state_bytes",
        "floor_shard",
        "divides the parameters by dp_size rounding down (the padded flat buffer rounds up)",
        [("shard = -(-num_params // dp_size)", "shard = num_params // dp_size")],
        mistake_zh="参数除以 dp_size 时向下取整（填充后的扁平缓冲区是向上取整的）",
    ),
    Mutant(
        "model_state_bytes",
        "grads_sharded_by_zero1",
        "shards the gradients from ZeRO-1 on (stage off by one)",
        [('"grads": 2 * (shard if zero_stage >= 2', '"grads": 2 * (shard if zero_stage >= 1')],
        mistake_zh="从 ZeRO-1 起就切分梯度（阶段差一）",
    ),
    Mutant(
        "model_state_bytes",
        "params_sharded_by_zero2",
        "shards the weights from ZeRO-2 on (stage off by one)",
        [('"params": 2 * (shard if zero_stage >= 3', '"params": 2 * (shard if zero_stage >= 2')],
        mistake_zh="从 ZeRO-2 起就切分权重（阶段差一）",
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
        mistake_zh="按 GQA 的 K 个 key/value 头保存 key 和 value（eager 注意力会把它们重复到 H 个）",
    ),
    Mutant(
        "layer_activation_bytes",
        "softmax_in_model_dtype",
        "assumes the probabilities are saved once, in the model dtype (no fp32 softmax)",
        [("probs_bytes = 4 + (0 if dtype == torch.float32 else size)", "probs_bytes = size")],
        mistake_zh="假定概率只以模型数据类型保存一次（没有 fp32 的 softmax）",
    ),
    Mutant(
        "layer_activation_bytes",
        "norm_without_upcast",
        "counts the RMSNorm's three (B, T, d) tensors in the model dtype (no fp32 input copy)",
        [("(4 + 2 * size) + 4 * tokens", "(3 * size) + 4 * tokens")],
        mistake_zh="RMSNorm 的三个 (B, T, d) 张量都按模型数据类型计（没有 fp32 的输入副本）",
    ),
    Mutant(
        "layer_activation_bytes",
        "no_attention_matrix",
        "leaves the (B, H, T, T) probabilities out",
        [("return 2 * norm + q_and_o + k_and_v + probs + mlp", "return 2 * norm + q_and_o + k_and_v + mlp")],
        mistake_zh="漏掉 (B, H, T, T) 的概率矩阵",
    ),
    Mutant(
        "activation_memory",
        "no_recomputed_layer",
        "with checkpointing counts only the saved layer inputs, not the layer recomputed in the backward pass",
        [("return inputs + per_layer", "return inputs")],
        mistake_zh="开启重计算时只算保存的层输入，没算反向中被重算的那一层",
    ),
    Mutant(
        "activation_memory",
        "fp32_inputs",
        "keeps the checkpointed layer inputs at 4 bytes whatever the dtype",
        [("batch * seq_len * config.hidden_size * size", "batch * seq_len * config.hidden_size * 4")],
        mistake_zh="不管数据类型，被检查点保存的层输入都按 4 字节计",
    ),
    Mutant(
        "activation_memory",
        "checkpointing_ignored",
        "returns L layers of activations whether or not the layers are checkpointed",
        [("if not checkpointing:", "if True:")],
        mistake_zh="不论是否做了检查点，都返回 L 层的激活",
    ),
]
