"""Realistic wrong versions of the p01.flash_attention_io solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "standard_attention_bytes",
        "softmax_fused",
        "counts S but not P: as if the softmax were fused into the first matmul (2N^2 instead of 4N^2)",
        [("(n * n + n * n)", "(0)")],
        mistake_zh="算了 S 却没算 P：好像 softmax 融合进了第一个矩阵乘（2N² 而不是 4N²）",
    ),
    Mutant(
        "standard_attention_bytes",
        "output_forgotten",
        "forgets to count the write of O",
        [("(n * n + n * d + n * d)", "(n * n + n * d)")],
        mistake_zh="忘了计入 O 的写回",
    ),
    Mutant(
        "standard_attention_bytes",
        "heads_ignored",
        "returns the bytes of one head whatever batch_heads is",
        [("return batch_heads * per_head * element_size", "return per_head * element_size")],
        mistake_zh="不管 batch_heads 是多少，都返回一个头的字节数",
    ),
    Mutant(
        "tiled_attention",
        "accumulator_not_rescaled",
        "rescales the denominator but not the accumulated output when the maximum grows",
        [("acc = rescale * acc + probs @ v", "acc = acc + probs @ v")],
        mistake_zh="最大值变大时只重新缩放了分母，没有缩放累加的输出",
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
        mistake_zh="重新缩放了输出，却没有缩放运行中的分母",
    ),
    Mutant(
        "tiled_attention",
        "no_final_division",
        "stores the unnormalised accumulator",
        [('hbm.store("o", q_start, (acc / row_sum).to(dtype))', 'hbm.store("o", q_start, acc.to(dtype))')],
        mistake_zh="存下未归一化的累加器",
    ),
    Mutant(
        "tiled_attention",
        "no_scale",
        "forgets the 1/sqrt(d) scale of the scores",
        [("scores = (q @ k.T) * scale", "scores = q @ k.T")],
        mistake_zh="忘了分数的 1/√d 缩放",
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
        mistake_zh="内层循环每一步都加载全部 K 和 V（数值对，但流量是 N/Bk 倍）",
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
        mistake_zh="每个块用 torch.softmax 归一化，而本课要替换的正是这个内置函数",
    ),
    Mutant(
        "tiled_attention_bytes",
        "floor_blocks",
        "counts the Q blocks with floor division (the last, shorter block is forgotten)",
        [("q_blocks = -(-seq_len // block_q)", "q_blocks = seq_len // block_q")],
        mistake_zh="Q 块数用向下取整计算（漏了最后那个较短的块）",
    ),
    Mutant(
        "tiled_attention_bytes",
        "kv_once",
        "counts K and V once, as if a single Q block held the whole sequence",
        [("+ q_blocks * 2 * seq_len * head_dim", "+ 2 * seq_len * head_dim")],
        mistake_zh="K 和 V 只算一次，好像一个 Q 块就装下了整个序列",
    ),
]
