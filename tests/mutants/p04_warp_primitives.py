"""Realistic wrong versions of the p04.warp_primitives solutions; every one must be rejected by a check.

The mutants of `warp_softmax_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # warp_reduce
    Mutant(
        "warp_reduce",
        "offsets_start_at_width",
        "starts the butterfly at offset width instead of width // 2: crosses into the next group (or past the warp)",
        [("offset = width // 2\n", "offset = width % 32\n")],
        mistake_zh="蝶形从偏移 width 而不是 width // 2 开始：越进了下一组（或 warp 之外）",
    ),
    Mutant(
        "warp_reduce",
        "stops_at_two",
        "stops the butterfly before offset 1: each lane has only half of its group",
        [("while offset >= 1:", "while offset >= 2:")],
        mistake_zh="蝶形在偏移 1 之前就停了：每个 lane 只有本组的一半",
    ),
    Mutant(
        "warp_reduce",
        "always_sum",
        "combines with + whatever the op: the max comes out as a sum",
        [
            (
                'values = values + other if op == "sum" else torch.maximum(values, other)',
                "values = values + other",
            )
        ],
        mistake_zh="不管 op 是什么都用 + 合并：最大值变成了和",
    ),
    Mutant(
        "warp_reduce",
        "fixed_offsets",
        "always uses the offsets of a whole warp (16 .. 1), whatever the width",
        [("offset = width // 2\n", "offset = 16\n")],
        mistake_zh="不管 width 多少，总用整个 warp 的偏移（16 .. 1）",
    ),
    # warp_softmax
    Mutant(
        "warp_softmax",
        "zero_padding_for_max",
        "pads the lanes past the row's end with 0: wrong maxima for negative rows, and exp(0 - m) added to the sum",
        [
            (
                'pad = torch.full((rows, WARP - chunk.shape[1]), float("-inf"), dtype=x.dtype)',
                "pad = torch.full((rows, WARP - chunk.shape[1]), 0.0, dtype=x.dtype)",
            )
        ],
        mistake_zh="超过行尾的 lane 填 0：全为负数的行最大值错了，和里还多加了 exp(0 - m)",
    ),
    Mutant(
        "warp_softmax",
        "no_max_subtraction",
        "exponentiates x without subtracting the row max: exp(1000) overflows to inf",
        [
            ("lane_sum = lane_sum + torch.exp(chunk - row_max)", "lane_sum = lane_sum + torch.exp(chunk)"),
            ("torch.exp(chunk - row_max) / row_sum", "torch.exp(chunk) / row_sum"),
        ],
        mistake_zh="不减行最大值就对 x 取 exp：exp(1000) 溢出为 inf",
    ),
    Mutant(
        "warp_softmax",
        "partial_mask_for_short_rows",
        "shuffles with a mask of the lanes that hold data, (1 << L) - 1: the butterfly reads lanes outside the mask",
        [
            (
                'row_max = warp_allreduce(lane_max, "max")',
                "row_max = lane_max\n"
                "    active = (1 << min(length, WARP)) - 1\n"
                "    for offset in (16, 8, 4, 2, 1):\n"
                "        row_max = torch.maximum(row_max, shfl_xor(row_max, offset, active))",
            )
        ],
        mistake_zh="shuffle 用持有数据的 lane 的掩码 (1 << L) - 1：蝶形读到了掩码之外的 lane",
    ),
    Mutant(
        "warp_softmax",
        "first_chunk_only",
        "takes the max over the first 32 columns only: the strided loop stops after one pass",
        [
            (
                "for chunk in chunks:\n        lane_max = torch.maximum(lane_max, chunk)",
                "for chunk in chunks[:1]:\n        lane_max = torch.maximum(lane_max, chunk)",
            )
        ],
        mistake_zh="只在前 32 列上取最大值：带步长的循环一遍就停了",
    ),
    # warp_softmax_cuda (C++; each still compiles)
    Mutant(
        "warp_softmax_cuda",
        "half_warp_max",
        "the max butterfly starts at offset 8: each half-warp has its own max",
        [
            (
                "for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));",
                "for (int offset = 8; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));",
            )
        ],
        mistake_zh="最大值的蝶形从偏移 8 开始：每半个 warp 各有自己的最大值",
    ),
    Mutant(
        "warp_softmax_cuda",
        "max_starts_at_zero",
        "starts each lane's max at 0 instead of -INFINITY: a row of values around -1000 underflows to 0 / 0",
        [("float m = -INFINITY;", "float m = 0.0f;")],
        mistake_zh="每个 lane 的最大值从 0 而不是 -INFINITY 开始：一行 -1000 左右的值下溢成 0 / 0",
    ),
    Mutant(
        "warp_softmax_cuda",
        "no_max_subtraction",
        "no max subtraction: expf overflows for large logits",
        [
            ("s += expf(xr[c] - m);", "s += expf(xr[c]);"),
            ("yr[c] = expf(xr[c] - m) * inv;", "yr[c] = expf(xr[c]) * inv;"),
        ],
        mistake_zh="不减最大值：logits 大时 expf 溢出",
    ),
    Mutant(
        "warp_softmax_cuda",
        "no_contiguity_check",
        "no contiguity check: a transposed input is read as if it were row-major",
        [('TORCH_CHECK(x.is_contiguous(), "warp_softmax_cuda: x must be contiguous (call .contiguous() first)");', "")],
        mistake_zh="不检查连续性：转置的输入被当作行主序的来读",
    ),
]
