"""Realistic wrong versions of the p03.moe_grouped_gemm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "expert_groups",
        "bincount_without_minlength",
        "counts rows with bincount(flat): the offsets lose the trailing empty experts",
        [("counts = torch.bincount(flat, minlength=num_experts)", "counts = torch.bincount(flat)")],
        mistake_zh="用 bincount(flat) 统计行数：偏移里丢了末尾空的专家",
    ),
    Mutant(
        "expert_groups",
        "choice_major_flatten",
        "flattens the routes choice-major (experts.T), so order holds j*T + t instead of t*k + j",
        [("flat = experts.reshape(-1).long()", "flat = experts.T.reshape(-1).long()")],
        mistake_zh="按选择优先（experts.T）展平路由，order 存的是 j*T + t 而不是 t*k + j",
    ),
    Mutant(
        "expert_groups",
        "no_range_check",
        "sorts ids outside [0, E) without complaint",
        [("if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):", "if False:")],
        mistake_zh="对 [0, E) 之外的 id 照样排序，不报错",
    ),
    Mutant(
        "expert_groups",
        "floor_tiles",
        "counts tiles per expert with a floor division, dropping each group's ragged last tile",
        [("tiles = (sizes + block_m - 1) // block_m", "tiles = sizes // block_m")],
        mistake_zh="每个专家的分块数用向下取整，丢了每组最后那个不整齐的分块",
    ),
    Mutant(
        "expert_groups",
        "tile_row_ignores_group_start",
        "places each tile at block_m * (its index in the group), forgetting the group's first row",
        [("tile_row = offsets[tile_expert] + local * block_m", "tile_row = local * block_m")],
        mistake_zh="把每个分块放在 block_m * (组内序号) 处，忘了组的起始行",
    ),
    Mutant(
        "expert_groups",
        "tile_row_global_index",
        "uses the tile's global index instead of its index inside the group",
        [
            (
                "tile_row = offsets[tile_expert] + local * block_m",
                "tile_row = offsets[tile_expert] + torch.arange(tile_expert.numel()) * block_m",
            )
        ],
        mistake_zh="用分块的全局序号而不是组内序号",
    ),
    Mutant(
        "grouped_gemm",
        "no_row_mask",
        "masks nothing along the rows: a ragged tile reads the next expert's rows (or past x) and writes them",
        [("row_ok = offs_m < row_end", "row_ok = offs_m >= row_start")],
        mistake_zh="沿行什么都不屏蔽：不整齐的分块读到（并写入）下一个专家的行（或 x 之外）",
    ),
    Mutant(
        "grouped_gemm",
        "group_end_off_by_one",
        "reads the end of the group from offsets[expert] (its start)",
        [
            (
                "row_end = tl.load(group_offsets_ptr + expert + 1).to(tl.int64)",
                "row_end = tl.load(group_offsets_ptr + expert).to(tl.int64)",
            )
        ],
        mistake_zh="从 offsets[expert]（组的起点）读取组的终点",
    ),
    Mutant(
        "grouped_gemm",
        "expert_offset_wrong_stride",
        "moves to expert e's weights with stride_wn instead of stride_we",
        [("w_ptr + expert * stride_we +", "w_ptr + expert * stride_wn +")],
        mistake_zh="移到专家 e 的权重时用 stride_wn 而不是 stride_we",
    ),
    Mutant(
        "grouped_gemm",
        "always_expert_zero",
        "never offsets the weight pointer by the expert: every group multiplies by w[0]",
        [("w_ptr + expert * stride_we +", "w_ptr +")],
        mistake_zh="权重指针从不按专家偏移：每个组都乘 w[0]",
    ),
    Mutant(
        "grouped_gemm",
        "no_k_mask",
        "loads w without the K mask, so the last K step sums whatever lies past K",
        [
            ("w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)", "w = tl.load(w_ptrs)"),
            (
                "x = tl.load(x_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < k_left), other=0.0)",
                "x = tl.load(x_ptrs, mask=row_ok[:, None], other=0.0)",
            ),
        ],
        mistake_zh="加载 w 时没有 K 掩码，最后一个 K 步把 K 之外的内容也加了进去",
    ),
    Mutant(
        "grouped_gemm",
        "store_without_row_mask",
        "stores every row of the tile: a ragged tile overwrites the next expert's rows",
        [("mask=row_ok[:, None] & (offs_n[None, :] < N))", "mask=offs_n[None, :] < N)")],
        mistake_zh="存储分块的每一行：不整齐的分块覆盖了下一个专家的行",
    ),
    Mutant(
        "grouped_gemm",
        "assumes_contiguous_weights",
        "builds w's pointers as if each expert were a contiguous (N, K) row-major matrix",
        [
            ("offs_k[:, None] * stride_wk + cols_w[None, :] * stride_wn", "offs_k[:, None] + cols_w[None, :] * K"),
            ("w_ptrs += BLOCK_K * stride_wk", "w_ptrs += BLOCK_K"),
        ],
        mistake_zh="按每个专家都是连续的 (N, K) 行主序矩阵构造 w 的指针",
    ),
    Mutant(
        "grouped_gemm",
        "no_offsets_validation",
        "launches with offsets that do not end at M",
        [("if group_offsets.shape != (E + 1,) or int(group_offsets[-1]) != M:", "if group_offsets.shape != (E + 1,):")],
        mistake_zh="offsets 没有结束在 M 也照样启动",
    ),
    Mutant(
        "moe_ffn",
        "token_from_modulo",
        "takes order % k (the choice rank) as the token of a sorted row",
        [("token = order // k", "token = order % k")],
        mistake_zh="把 order % k（选择序号）当作排序后那一行的 token",
    ),
    Mutant(
        "moe_ffn",
        "assign_instead_of_add",
        "writes the weighted rows with index_copy_: only one of a token's k contributions survives",
        [
            (
                "out.index_add_(0, token, y_sorted.float() * weight[:, None])",
                "out.index_copy_(0, token, y_sorted.float() * weight[:, None])",
            )
        ],
        mistake_zh="用 index_copy_ 写入加权后的行：一个 token 的 k 份贡献只剩一份",
    ),
    Mutant(
        "moe_ffn",
        "gates_not_permuted",
        "scales sorted row i by gates.reshape(-1)[i], the gate of an unrelated pair",
        [("weight = gates.reshape(-1)[order].float()", "weight = gates.reshape(-1).float()")],
        mistake_zh="排序后的第 i 行乘以 gates.reshape(-1)[i]，那是一个无关的（token, 专家）对的门控",
    ),
    Mutant(
        "moe_ffn",
        "silu_on_up",
        "applies SiLU to the up projection instead of the gate projection",
        [
            (
                "hidden = F.silu(grouped_gemm(x_sorted, w_gate, group_offsets)) * grouped_gemm(x_sorted, w_up, group_offsets)",
                "hidden = grouped_gemm(x_sorted, w_gate, group_offsets) * F.silu(grouped_gemm(x_sorted, w_up, group_offsets))",
            )
        ],
        mistake_zh="SiLU 作用在 up 投影而不是 gate 投影上",
    ),
]
