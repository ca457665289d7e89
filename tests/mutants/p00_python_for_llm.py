"""Realistic wrong versions of the p00.python_for_llm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "pad_batch",
        "mask_from_pad_id",
        "builds the attention mask as input_ids != pad_id, so a real eos used as padding is masked out",
        [("    return input_ids, attention_mask", "    return input_ids, (input_ids != pad_id).long()")],
        mistake_zh="用 input_ids != pad_id 构造注意力掩码，被当作 padding 的真实 eos 也被屏蔽了",
    ),
    Mutant(
        "pad_batch",
        "always_right",
        "ignores padding_side and always pads on the right",
        [('start = width - len(row) if padding_side == "left" else 0', "start = 0")],
        mistake_zh="忽略 padding_side，总是在右侧填充",
    ),
    Mutant(
        "pad_batch",
        "truncates_from_the_end",
        "truncation keeps the last max_length tokens instead of the first",
        [("list(seq)[:max_length] if", "list(seq)[-max_length:] if")],
        mistake_zh="截断时保留最后 max_length 个 token，而不是最前面的",
    ),
    Mutant(
        "pad_batch",
        "positions_count_padding",
        "position ids from arange(T), which shifts every left-padded row",
        [
            (
                "positions = mask.cumsum(dim=-1) - 1 ",
                "positions = torch.arange(mask.shape[-1]).expand_as(mask) ",
            )
        ],
        mistake_zh="位置编号取 arange(T)，左填充的每一行都错位了",
    ),
    Mutant(
        "pad_batch",
        "calls_pad_sequence",
        "pads with torch.nn.utils.rnn.pad_sequence (the reference)",
        [
            (
                "    return input_ids, attention_mask",
                "    input_ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(r, dtype=torch.int64) for r in rows], "
                "batch_first=True, padding_value=pad_id, padding_side=padding_side)\n"
                "    return input_ids, attention_mask",
            )
        ],
        mistake_zh="用 torch.nn.utils.rnn.pad_sequence（即参考实现）填充",
    ),
    Mutant(
        "model_config",
        "head_dim_from_kv_heads",
        "head_dim = hidden_size // num_kv_heads",
        [("return self.hidden_size // self.num_heads", "return self.hidden_size // self.num_kv_heads")],
        mistake_zh="head_dim = hidden_size // num_kv_heads",
    ),
    Mutant(
        "model_config",
        "kv_counted_as_square",
        "counts W_k and W_v as d x d, true only without GQA",
        [("attention = d * d + 2 * d * kv_width + d * d", "attention = d * d + 2 * d * d + d * d")],
        mistake_zh="把 W_k 和 W_v 算成 d × d，只有没有 GQA 时才对",
    ),
    Mutant(
        "model_config",
        "tied_head_counted",
        "counts the output head even when it is tied to the embedding",
        [("head = 0 if self.tie_embeddings else self.vocab_size * d", "head = self.vocab_size * d")],
        mistake_zh="输出头与嵌入绑定时仍然计入输出头",
    ),
    Mutant(
        "model_config",
        "no_gqa_check",
        "forgets that num_heads must be divisible by num_kv_heads",
        [("if self.num_heads % self.num_kv_heads:", "if False:")],
        mistake_zh="忘了 num_heads 必须能被 num_kv_heads 整除",
    ),
    Mutant(
        "model_config",
        "unknown_keys_dropped",
        "filters the dict to the known keys instead of refusing the others",
        [
            ("return cls(**fields)", "return cls(**{k: v for k, v in fields.items() if k in known})"),
            ("if unknown:", "if False:"),
        ],
        mistake_zh="把字典过滤成已知的键，而不是拒绝其他键",
    ),
    Mutant(
        "token_blocks",
        "disjoint_blocks",
        "cuts disjoint blocks of block_size + 1 tokens, losing one target per block",
        [("buffer = buffer[block_size:]", "buffer = buffer[block_size + 1:]")],
        mistake_zh="切出互不重叠的 block_size + 1 个 token 的块，每块丢掉一个目标",
    ),
    Mutant(
        "token_blocks",
        "reads_everything_first",
        "materialises the whole corpus before yielding anything",
        [("for document in documents:", "for document in list(documents):")],
        mistake_zh="产出任何东西之前先把整个语料读进内存",
    ),
    Mutant(
        "token_blocks",
        "eos_before_document",
        "puts eos in front of each document instead of after it",
        [
            (
                "buffer.extend(document)\n        buffer.append(eos_id)",
                "buffer.append(eos_id)\n        buffer.extend(document)",
            )
        ],
        mistake_zh="把 eos 放在每个文档前面而不是后面",
    ),
    Mutant(
        "token_blocks",
        "x_equals_y",
        "yields the same window as input and target (no shift)",
        [("yield block[:-1], block[1:]", "yield block[:-1], block[:-1]")],
        mistake_zh="输入和目标是同一个窗口（没有错位）",
    ),
]
