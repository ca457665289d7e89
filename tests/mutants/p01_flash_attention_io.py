"""Realistic wrong versions of the p01.flash_attention_io solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "standard_attention_bytes",
        "softmax_fused",
        "counts S but not P: as if the softmax were fused into the first matmul (2N^2 instead of 4N^2)",
        [("(n * n + n * n)", "(0)")],
        mistake_zh="只计了 S 没计 P：好像 softmax 融合进了第一个矩阵乘（2N^2 而不是 4N^2）",
    ),
    Mutant(
        "standard_attention_bytes",
        "output_forgotten",
        "forgets to count the write of O",
        [("(n * n + n * d + n * d)", "(n * n + n * d)")],
        mistake_zh="忘了计入写回 O 的字节",
    ),
    Mutant(
        "standard_attention_bytes",
        "heads_ignored",
        "returns the bytes of one head whatever batch_heads is",
        [("return batch_heads * per_head * element_size", "return per_head * element_size")],
        mistake_zh="不管 batch_heads 是多少，都只返回一个头的字节数",
    ),
    Mutant(
        "tiled_attention",
        "accumulator_not_rescaled",
        "rescales the denominator but not the accumulated output when the maximum grows",
        [("acc = rescale * acc + probs @ v", "acc = acc + probs @ v")],
        mistake_zh="最大值变大时只重新缩放了分母，没有重新缩放累加的输出",
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
        mistake_zh="只重新缩放了输出，没有重新缩放累积的分母",
    ),
    Mutant(
        "tiled_attention",
        "no_final_division",
        "stores the unnormalised accumulator",
        [('hbm.store("o", q_start, (acc / row_sum).to(dtype))', 'hbm.store("o", q_start, acc.to(dtype))')],
        mistake_zh="写回的是未归一化的累加器",
    ),
    Mutant(
        "tiled_attention",
        "no_scale",
        "forgets the 1/sqrt(d) scale of the scores",
        [("scores = (q @ k.T) * scale", "scores = q @ k.T")],
        mistake_zh="忘了分数的 1/sqrt(d) 缩放",
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
        mistake_zh="内层循环的每一步都读入全部 K 和 V（数值正确，但流量是 N/Bk 倍）",
    ),
    Mutant(
        "tiled_attention",
        "whole_kv_plain_softmax",
        "loads all of K and V once per Q block and takes a plain softmax over the whole row (no K/V tiling, no online "
        "rescaling: right values and exactly the formula's bytes, but an N-row tile in SRAM)",
        [
            ("for kv_start in range(0, n, block_kv):", "for kv_start in range(1):"),
            ('k = hbm.load("k", kv_start, kv_start + block_kv)', 'k = hbm.load("k", 0, n)'),
            ('v = hbm.load("v", kv_start, kv_start + block_kv)', 'v = hbm.load("v", 0, n)'),
        ],
        mistake_zh="每个 Q 块一次读入全部 K 和 V，对整行做普通 softmax（K/V 不分块、没有在线重缩放：数值正确、字节数也等于公式，"
        "但 SRAM 里放了 N 行的块）",
    ),
    Mutant(
        "tiled_attention",
        "last_block_dropped",
        "stops the Q loop before the last, shorter block (its rows of O are never written)",
        [("for q_start in range(0, n, block_q):", "for q_start in range(0, n - block_q + 1, block_q):")],
        mistake_zh="Q 循环在最后一个较短的块之前就停了（O 的这些行从未写入）",
    ),
    Mutant(
        "tiled_attention",
        "accumulates_in_input_dtype",
        "accumulates the scores, the denominator and the output in the input dtype (bf16, fp16) instead of float32",
        [("acc_dtype = torch.promote_types(dtype, torch.float32)", "acc_dtype = dtype")],
        mistake_zh="在输入精度（bf16、fp16）而不是 float32 中累加分数、分母和输出",
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
        mistake_zh="用 torch.softmax 归一化每个块，而这正是本课要替代的内置函数",
    ),
    Mutant(
        "tiled_attention_bytes",
        "floor_blocks",
        "counts the Q blocks with floor division (the last, shorter block is forgotten)",
        [("q_blocks = -(-seq_len // block_q)", "q_blocks = seq_len // block_q")],
        mistake_zh="用向下取整计算 Q 块数（漏掉最后一个较短的块）",
    ),
    Mutant(
        "tiled_attention_bytes",
        "kv_once",
        "counts K and V once, as if a single Q block held the whole sequence",
        [("+ q_blocks * 2 * seq_len * head_dim", "+ 2 * seq_len * head_dim")],
        mistake_zh="K 和 V 只计一次，好像一个 Q 块装下了整个序列",
    ),
]
