"""Realistic wrong versions of the p01.flash_attention_io solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "standard_attention_bytes",
        "softmax_fused",
        "counts S but not P: as if the softmax were fused into the first matmul (2N^2 instead of 4N^2)",
        [("(n * n + n * n)", "(0)")],
    ),
    Mutant(
        "standard_attention_bytes",
        "output_forgotten",
        "forgets to count the write of O",
        [("(n * n + n * d + n * d)", "(n * n + n * d)")],
    ),
    Mutant(
        "standard_attention_bytes",
        "heads_ignored",
        "returns the bytes of one head whatever batch_heads is",
        [("return batch_heads * per_head * element_size", "return per_head * element_size")],
    ),
    Mutant(
        "tiled_attention",
        "accumulator_not_rescaled",
        "rescales the denominator but not the accumulated output when the maximum grows",
        [("acc = rescale * acc + probs @ v", "acc = acc + probs @ v")],
    ),
    Mutant(
        "tiled_attention",
        "denominator_not_rescaled",
        "rescales the output but not the running denominator",
        [
            (
                "row_sum = rescale * row_sum + probs.sum(dim=1, keepdim=True)",
                "row_sum = row_sum + probs.sum(dim=1, keepdim=True)",
            )
        ],
    ),
    Mutant(
        "tiled_attention",
        "no_final_division",
        "stores the unnormalised accumulator",
        [('hbm.store("o", q_start, (acc / row_sum).to(dtype))', 'hbm.store("o", q_start, acc.to(dtype))')],
    ),
    Mutant(
        "tiled_attention",
        "no_scale",
        "forgets the 1/sqrt(d) scale of the scores",
        [("scores = (q @ k.T) * scale", "scores = q @ k.T")],
    ),
    Mutant(
        "tiled_attention",
        "whole_kv_each_step",
        "loads all of K and V at every step of the inner loop (right values, N/Bk times the traffic)",
        [
            (
                'k = hbm.load("k", kv_start, kv_start + block_kv)',
                'k = hbm.load("k", 0, n)[kv_start : kv_start + block_kv]',
            ),
        ],
    ),
    Mutant(
        "tiled_attention",
        "calls_softmax",
        "normalises each block with torch.softmax, the builtin the lesson replaces",
        [
            (
                "probs = torch.exp(scores - new_max)",
                "probs = torch.softmax(scores, dim=1) * 0 + torch.exp(scores - new_max)",
            )
        ],
    ),
    Mutant(
        "tiled_attention_bytes",
        "floor_blocks",
        "counts the Q blocks with floor division (the last, shorter block is forgotten)",
        [("q_blocks = -(-seq_len // block_q)", "q_blocks = seq_len // block_q")],
    ),
    Mutant(
        "tiled_attention_bytes",
        "kv_once",
        "counts K and V once, as if a single Q block held the whole sequence",
        [("+ q_blocks * 2 * seq_len * head_dim", "+ 2 * seq_len * head_dim")],
    ),
]
