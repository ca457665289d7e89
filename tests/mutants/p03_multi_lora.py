"""Realistic wrong versions of the p03.multi_lora solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "lora_segments",
        "minus_one_is_a_segment",
        "keeps the -1 tokens as a segment of adapter -1 (the kernels would read adapter -1, before A's start)",
        [("first = int((sorted_ids < 0).sum())", "first = 0")],
        mistake_zh="把 -1 的 token 保留为适配器 -1 的一段（内核会读适配器 -1，在 A 的起点之前）",
    ),
    Mutant(
        "lora_segments",
        "unstable_order_by_adapter_then_reverse",
        "sorts with descending ids, so the -1 tokens come last and the adapters in decreasing order",
        [("order = torch.argsort(ids, stable=True)", "order = torch.argsort(ids, stable=True, descending=True)")],
        mistake_zh="按 id 降序排序，-1 的 token 排在最后，适配器也成了递减顺序",
    ),
    Mutant(
        "lora_segments",
        "offsets_from_zero",
        "starts the offsets at 0 instead of after the -1 tokens",
        [
            (
                "seg_offsets[0] = first\n    seg_offsets[1:] = first + torch.cumsum(lengths, dim=0)",
                "seg_offsets[0] = 0\n    seg_offsets[1:] = torch.cumsum(lengths, dim=0)",
            )
        ],
        mistake_zh="偏移从 0 开始，而不是从 -1 的 token 之后开始",
    ),
    Mutant(
        "lora_segments",
        "no_range_check",
        "accepts ids outside [-1, L)",
        [("if ids.numel() and (int(ids.min()) < -1 or int(ids.max()) >= num_adapters):", "if False:")],
        mistake_zh="接受 [-1, L) 之外的 id",
    ),
    Mutant(
        "lora_shrink",
        "writes_at_sorted_rows",
        "stores v at the sorted positions instead of at the token ids",
        [("v_ptrs = v_ptr + tok[:, None] * stride_vm", "v_ptrs = v_ptr + rows[:, None] * stride_vm")],
        mistake_zh="把 v 存在排序后的位置，而不是 token id 处",
    ),
    Mutant(
        "lora_shrink",
        "no_scale",
        "forgets the adapter's scale",
        [("tl.store(v_ptrs, acc * scale,", "tl.store(v_ptrs, acc,")],
        mistake_zh="忘了适配器的缩放",
    ),
    Mutant(
        "lora_shrink",
        "segment_end_off_by_one",
        "lets a tile run one row past its segment (into the next adapter's first token)",
        [
            (
                "row_ok = rows < end\n    tok = tl.load(order_ptr + rows, mask=row_ok, other=0).to(tl.int64)   # (BLOCK_M,)",
                "row_ok = rows <= end\n    tok = tl.load(order_ptr + rows, mask=row_ok, other=0).to(tl.int64)   # (BLOCK_M,)",
            )
        ],
        mistake_zh="让分块越过自己的段多跑一行（进入下一个适配器的第一个 token）",
    ),
    Mutant(
        "lora_shrink",
        "no_k_mask",
        "loads A without the K mask: the last K step multiplies what lies past K",
        [
            (
                "at = tl.load(a_ptrs, mask=(offs_k[:, None] < k_left) & r_ok[None, :], other=0.0)",
                "at = tl.load(a_ptrs, mask=r_ok[None, :], other=0.0)",
            )
        ],
        mistake_zh="加载 A 时没有 K 掩码：最后一个 K 步乘进了 K 之外的内容",
    ),
    Mutant(
        "lora_shrink",
        "adapter_offset_wrong_stride",
        "moves to adapter a with stride_ar instead of stride_al",
        [("a_ptr + adapter * stride_al +", "a_ptr + adapter * stride_ar +")],
        mistake_zh="移到适配器 a 时用 stride_ar 而不是 stride_al",
    ),
    Mutant(
        "lora_expand",
        "store_replaces_y",
        "stores v @ B[a].T without reading y: the base output is lost",
        [
            (
                "tl.store(y_ptrs, (y_old + acc).to(y_ptr.dtype.element_ty), mask=mask)",
                "tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)",
            )
        ],
        mistake_zh="不读 y 就存储 v @ B[a].T：基座输出丢了",
    ),
    Mutant(
        "lora_expand",
        "reads_v_at_sorted_rows",
        "reads v at the sorted positions instead of the token ids",
        [("v_ptrs = v_ptr + tok[:, None] * stride_vm", "v_ptrs = v_ptr + rows[:, None] * stride_vm")],
        mistake_zh="在排序后的位置而不是 token id 处读 v",
    ),
    Mutant(
        "lora_expand",
        "no_rank_mask_on_b",
        "loads B's rank columns without the r < R mask: BLOCK_R - R columns of the next rows are multiplied in",
        [
            (
                "bt = tl.load(b_ptrs, mask=r_ok[:, None] & n_ok[None, :], other=0.0)",
                "bt = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)",
            ),
            (
                "vt = tl.load(v_ptrs, mask=row_ok[:, None] & r_ok[None, :], other=0.0)",
                "vt = tl.load(v_ptrs, mask=row_ok[:, None], other=0.0)",
            ),
        ],
        mistake_zh="加载 B 的秩列时没有 r < R 掩码：下一行的 BLOCK_R - R 列被乘了进来",
    ),
    Mutant(
        "lora_expand",
        "no_column_mask",
        "stores every column of the tile past N",
        [("mask = row_ok[:, None] & n_ok[None, :]", "mask = row_ok[:, None] & (offs_n[None, :] >= 0)")],
        mistake_zh="存储分块越过 N 的每一列",
    ),
    Mutant(
        "lora_expand",
        "add_lora_without_shape_check",
        "does not check that A and B agree",
        [
            (
                "if A.dim() != 3 or B.dim() != 3 or B.shape[0] != A.shape[0] or B.shape[2] != A.shape[1]:",
                "if A.dim() != 3 or B.dim() != 3:",
            )
        ],
        mistake_zh="不检查 A 和 B 是否匹配",
    ),
]
