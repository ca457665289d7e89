"""Realistic wrong versions of the p00.python_for_llm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "pad_batch",
        "mask_from_pad_id",
        "builds the attention mask as input_ids != pad_id, so a real eos used as padding is masked out",
        [("    return input_ids, attention_mask", "    return input_ids, (input_ids != pad_id).long()")],
    ),
    Mutant(
        "pad_batch",
        "always_right",
        "ignores padding_side and always pads on the right",
        [('start = width - len(row) if padding_side == "left" else 0', "start = 0")],
    ),
    Mutant(
        "pad_batch",
        "truncates_from_the_end",
        "truncation keeps the last max_length tokens instead of the first",
        [("list(seq)[:max_length] if", "list(seq)[-max_length:] if")],
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
    ),
    Mutant(
        "model_config",
        "head_dim_from_kv_heads",
        "head_dim = hidden_size // num_kv_heads",
        [("return self.hidden_size // self.num_heads", "return self.hidden_size // self.num_kv_heads")],
    ),
    Mutant(
        "model_config",
        "kv_counted_as_square",
        "counts W_k and W_v as d x d, true only without GQA",
        [("attention = d * d + 2 * d * kv_width + d * d", "attention = d * d + 2 * d * d + d * d")],
    ),
    Mutant(
        "model_config",
        "tied_head_counted",
        "counts the output head even when it is tied to the embedding",
        [("head = 0 if self.tie_embeddings else self.vocab_size * d", "head = self.vocab_size * d")],
    ),
    Mutant(
        "model_config",
        "no_gqa_check",
        "forgets that num_heads must be divisible by num_kv_heads",
        [("if self.num_heads % self.num_kv_heads:", "if False:")],
    ),
    Mutant(
        "model_config",
        "unknown_keys_dropped",
        "filters the dict to the known keys instead of refusing the others",
        [
            ("return cls(**fields)", "return cls(**{k: v for k, v in fields.items() if k in known})"),
            ("if unknown:", "if False:"),
        ],
    ),
    Mutant(
        "token_blocks",
        "disjoint_blocks",
        "cuts disjoint blocks of block_size + 1 tokens, losing one target per block",
        [("buffer = buffer[block_size:]", "buffer = buffer[block_size + 1:]")],
    ),
    Mutant(
        "token_blocks",
        "reads_everything_first",
        "materialises the whole corpus before yielding anything",
        [("for document in documents:", "for document in list(documents):")],
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
    ),
    Mutant(
        "token_blocks",
        "x_equals_y",
        "yields the same window as input and target (no shift)",
        [("yield block[:-1], block[1:]", "yield block[:-1], block[:-1]")],
    ),
]
