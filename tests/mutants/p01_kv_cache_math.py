"""Realistic wrong versions of the p01.kv_cache_math solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "kv_bytes_per_token",
        "query_heads",
        "caches num_attention_heads heads instead of the num_key_value_heads KV heads (GQA ignored)",
        [
            (
                "per_layer = 2 * config.num_key_value_heads * head_dim",
                "per_layer = 2 * config.num_attention_heads * head_dim",
            )
        ],
        mistake_zh="缓存 num_attention_heads 个头，而不是 num_key_value_heads 个 KV 头（忽略了 GQA）",
    ),
    Mutant(
        "kv_bytes_per_token",
        "keys_only",
        "counts the keys and forgets the values",
        [
            (
                "per_layer = 2 * config.num_key_value_heads * head_dim",
                "per_layer = config.num_key_value_heads * head_dim",
            )
        ],
        mistake_zh="只算了 key，忘了 value",
    ),
    Mutant(
        "kv_bytes_per_token",
        "head_dim_from_hidden",
        "always takes head_dim = hidden_size // num_attention_heads, ignoring config.head_dim",
        [
            (
                'head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads',
                "head_dim = config.hidden_size // config.num_attention_heads",
            )
        ],
        mistake_zh="总是取 head_dim = hidden_size // num_attention_heads，忽略 config.head_dim",
    ),
    Mutant(
        "kv_bytes_per_token",
        "mla_decompressed",
        "caches MLA's decompressed per-head keys and values instead of the latent",
        [
            (
                "per_layer = config.kv_lora_rank + config.qk_rope_head_dim",
                "per_layer = config.num_attention_heads * (config.qk_nope_head_dim + config.qk_rope_head_dim + config.v_head_dim)",
            )
        ],
        mistake_zh="缓存 MLA 解压后的逐头 key 和 value，而不是潜在向量",
    ),
    Mutant(
        "kv_bytes_per_token",
        "mla_without_rope_key",
        "caches the MLA latent but forgets the shared rotary key",
        [("per_layer = config.kv_lora_rank + config.qk_rope_head_dim", "per_layer = config.kv_lora_rank")],
        mistake_zh="缓存了 MLA 的潜在向量，却忘了共享的旋转位置 key",
    ),
    Mutant(
        "kv_bytes_per_token",
        "always_two_bytes",
        "assumes two bytes per element whatever the dtype",
        [("element = torch.empty((), dtype=dtype).element_size()", "element = 2")],
        mistake_zh="不管数据类型，都假定每个元素 2 字节",
    ),
    Mutant(
        "max_concurrent_sequences",
        "no_block_rounding",
        "divides by seq_len * bytes_per_token: the partly filled last block is not counted",
        [("return free // (blocks * block_size * bytes_per_token)", "return free // (seq_len * bytes_per_token)")],
        mistake_zh="除以 seq_len * bytes_per_token：没算最后那个不满的块",
    ),
    Mutant(
        "max_concurrent_sequences",
        "weights_ignored",
        "gives the whole budget to the KV cache",
        [("free = budget_bytes - weight_bytes", "free = budget_bytes")],
        mistake_zh="把全部预算都给了 KV 缓存",
    ),
    Mutant(
        "max_concurrent_sequences",
        "negative_when_full",
        "returns a negative count when the weights exceed the budget",
        [("if free <= 0:\n        return 0", "if free == 0:\n        return 0")],
        mistake_zh="权重超出预算时返回负数",
    ),
    Mutant(
        "decode_step_bound",
        "weights_per_sequence",
        "reads the weights once per sequence instead of once per step",
        [
            (
                "step_bytes = weight_bytes + bytes_per_token * sum(context_lens)",
                "step_bytes = len(context_lens) * weight_bytes + bytes_per_token * sum(context_lens)",
            )
        ],
        mistake_zh="每个序列读一次权重，而不是每步读一次",
    ),
    Mutant(
        "decode_step_bound",
        "one_cache_only",
        "reads the cache of the longest sequence only",
        [("bytes_per_token * sum(context_lens)", "bytes_per_token * max(context_lens)")],
        mistake_zh="只读最长序列的缓存",
    ),
    Mutant(
        "decode_step_bound",
        "tokens_per_sequence",
        "returns the bound per sequence instead of for the whole batch",
        [
            (
                "return step_bytes, len(context_lens) * bandwidth_bytes_per_s / step_bytes",
                "return step_bytes, bandwidth_bytes_per_s / step_bytes",
            )
        ],
        mistake_zh="返回每个序列的上界，而不是整个批的",
    ),
]
