"""Realistic wrong versions of the p03.moe_grouped_gemm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "expert_groups",
        "bincount_without_minlength",
        "counts rows with bincount(flat): the offsets lose the trailing empty experts",
        [("counts = torch.bincount(flat, minlength=num_experts)", "counts = torch.bincount(flat)")],
        mistake_zh="用 bincount(flat) 统计行数：偏移量丢掉了末尾没有 token 的专家",
    ),
    Mutant(
        "expert_groups",
        "choice_major_flatten",
        "flattens the routes choice-major (experts.T), so order holds j*T + t instead of t*k + j",
        [("flat = experts.reshape(-1).long()", "flat = experts.T.reshape(-1).long()")],
        mistake_zh="按选择优先的顺序展平路由（experts.T），于是 order 存的是 j*T + t 而不是 t*k + j",
    ),
    Mutant(
        "expert_groups",
        "no_range_check",
        "sorts ids outside [0, E) without complaint",
        [("if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):", "if False:")],
        mistake_zh="对超出 [0, E) 的 id 照常排序，不报错",
    ),
    Mutant(
        "expert_groups",
        "floor_tiles",
        "counts tiles per expert with a floor division, dropping each group's ragged last tile",
        [("tiles = (sizes + block_m - 1) // block_m", "tiles = sizes // block_m")],
        mistake_zh="用向下取整的除法计算每个专家的分块数，丢掉了每组最后一个不完整的分块",
    ),
    Mutant(
        "expert_groups",
        "tile_row_ignores_group_start",
        "places each tile at block_m * (its index in the group), forgetting the group's first row",
        [("tile_row = offsets[tile_expert] + local * block_m", "tile_row = local * block_m")],
        mistake_zh="把每个分块放在 block_m * (它在组内的序号) 处，忘了加上组的起始行",
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
        mistake_zh="用分块的全局序号而不是它在组内的序号",
    ),
    Mutant(
        "grouped_gemm",
        "no_row_mask",
        "masks nothing along the rows: a ragged tile reads the next expert's rows (or past x) and writes them",
        [("row_ok = offs_m < row_end", "row_ok = offs_m >= row_start")],
        mistake_zh="行方向上没有任何掩码：不完整的分块读到了下一个专家的行（或越过 x）并写入它们",
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
        mistake_zh="用 stride_wn 而不是 stride_we 定位到专家 e 的权重",
    ),
    Mutant(
        "grouped_gemm",
        "always_expert_zero",
        "never offsets the weight pointer by the expert: every group multiplies by w[0]",
        [("w_ptr + expert * stride_we +", "w_ptr +")],
        mistake_zh="从不按专家偏移权重指针：每一组都乘以 w[0]",
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
        mistake_zh="加载 w 时没有 K 掩码，于是最后一个 K 步把 K 之外的数据也加了进来",
    ),
    Mutant(
        "grouped_gemm",
        "store_without_row_mask",
        "stores every row of the tile: a ragged tile overwrites the next expert's rows",
        [("mask=row_ok[:, None] & (offs_n[None, :] < N))", "mask=offs_n[None, :] < N)")],
        mistake_zh="存储分块的每一行：不完整的分块覆盖了下一个专家的行",
    ),
    Mutant(
        "grouped_gemm",
        "assumes_contiguous_weights",
        "builds w's pointers as if each expert were a contiguous (N, K) row-major matrix",
        [
            ("offs_k[:, None] * stride_wk + cols_w[None, :] * stride_wn", "offs_k[:, None] + cols_w[None, :] * K"),
            ("w_ptrs += BLOCK_K * stride_wk", "w_ptrs += BLOCK_K"),
        ],
        mistake_zh="按每个专家都是连续的 (N, K) 行主序矩阵来构造 w 的指针",
    ),
    Mutant(
        "grouped_gemm",
        "no_offsets_validation",
        "launches with offsets that do not end at M",
        [("if group_offsets.shape != (E + 1,) or int(group_offsets[-1]) != M:", "if group_offsets.shape != (E + 1,):")],
        mistake_zh="offsets 不以 M 结尾也照样启动",
    ),
    Mutant(
        "moe_ffn",
        "token_from_modulo",
        "takes order % k (the choice rank) as the token of a sorted row",
        [("token = order // k", "token = order % k")],
        mistake_zh="取 order % k（选择的名次）作为排序后某一行对应的 token",
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
        mistake_zh="用 index_copy_ 写入加权后的行：一个 token 的 k 份贡献只留下一份",
    ),
    Mutant(
        "moe_ffn",
        "gates_not_permuted",
        "scales sorted row i by gates.reshape(-1)[i], the gate of an unrelated pair",
        [("weight = gates.reshape(-1)[order].float()", "weight = gates.reshape(-1).float()")],
        mistake_zh="用 gates.reshape(-1)[i] 缩放排序后的第 i 行，那是一个不相干的 (token, 专家) 对的门控值",
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
        mistake_zh="对 up 投影而不是 gate 投影施加 SiLU",
    ),
    Mutant(
        "grouped_gemm",
        "offsets_assumed_contiguous",
        "hands strided group offsets to the kernel, which reads them at group_offsets_ptr + expert (unit stride)",
        [
            (
                "offsets = group_offsets.to(device=x.device, dtype=torch.int64).contiguous()",
                "offsets = group_offsets.to(device=x.device, dtype=torch.int64)",
            )
        ],
        mistake_zh="把带步长的组偏移直接交给 kernel，而 kernel 按单位步长在 group_offsets_ptr + expert 处读取",
    ),
]
