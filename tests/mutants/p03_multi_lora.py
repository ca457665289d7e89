"""Realistic wrong versions of the p03.multi_lora solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "lora_segments",
        "minus_one_is_a_segment",
        "keeps the -1 tokens as a segment of adapter -1 (the kernels would read adapter -1, before A's start)",
        [("first = int((sorted_ids < 0).sum())", "first = 0")],
        mistake_zh="把 -1 的 token 当作适配器 -1 的一段保留（内核会读取适配器 -1，即 A 的起点之前）",
    ),
    Mutant(
        "lora_segments",
        "unstable_order_by_adapter_then_reverse",
        "sorts with descending ids, so the -1 tokens come last and the adapters in decreasing order",
        [("order = torch.argsort(ids, stable=True)", "order = torch.argsort(ids, stable=True, descending=True)")],
        mistake_zh="按 id 降序排序，于是 -1 的 token 排在最后，适配器也按递减顺序排列",
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
        mistake_zh="偏移量从 0 开始，而不是从 -1 的 token 之后开始",
    ),
    Mutant(
        "lora_segments",
        "no_range_check",
        "accepts ids outside [-1, L)",
        [("if ids.numel() and (int(ids.min()) < -1 or int(ids.max()) >= num_adapters):", "if False:")],
        mistake_zh="接受超出 [-1, L) 的 id",
    ),
    Mutant(
        "lora_shrink",
        "writes_at_sorted_rows",
        "stores v at the sorted positions instead of at the token ids",
        [("v_ptrs = v_ptr + tok[:, None] * stride_vm", "v_ptrs = v_ptr + rows[:, None] * stride_vm")],
        mistake_zh="把 v 存到排序后的位置，而不是 token id 对应的位置",
    ),
    Mutant(
        "lora_shrink",
        "no_scale",
        "forgets the adapter's scale",
        [("tl.store(v_ptrs, acc * scale,", "tl.store(v_ptrs, acc,")],
        mistake_zh="忘了适配器的缩放系数",
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
        mistake_zh="让分块越过所在段多跑一行（进入下一个适配器的第一个 token）",
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
        mistake_zh="加载 A 时没有 K 掩码：最后一个 K 步乘上了 K 之外的数据",
    ),
    Mutant(
        "lora_shrink",
        "adapter_offset_wrong_stride",
        "moves to adapter a with stride_ar instead of stride_al",
        [("a_ptr + adapter * stride_al +", "a_ptr + adapter * stride_ar +")],
        mistake_zh="用 stride_ar 而不是 stride_al 定位到适配器 a",
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
        mistake_zh="不读 y 就直接存储 v @ B[a].T：基座的输出丢失了",
    ),
    Mutant(
        "lora_expand",
        "reads_v_at_sorted_rows",
        "reads v at the sorted positions instead of the token ids",
        [("v_ptrs = v_ptr + tok[:, None] * stride_vm", "v_ptrs = v_ptr + rows[:, None] * stride_vm")],
        mistake_zh="在排序后的位置而不是 token id 处读取 v",
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
        mistake_zh="加载 B 的秩维度列时没有 r < R 掩码：下一行的 BLOCK_R - R 列被乘了进来",
    ),
    Mutant(
        "lora_expand",
        "no_column_mask",
        "stores every column of the tile past N",
        [("mask = row_ok[:, None] & n_ok[None, :]", "mask = row_ok[:, None] & (offs_n[None, :] >= 0)")],
        mistake_zh="存储分块的每一列，越过了 N",
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
        mistake_zh="不检查 A 与 B 的形状是否匹配",
    ),
    Mutant(
        "lora_shrink",
        "index_tensors_assumed_contiguous",
        "hands strided scales and segment tensors to the kernel, which reads them with unit stride",
        [
            (
                "scales, order, seg_offsets, seg_adapter = (t.contiguous() for t in (scales, order, seg_offsets, seg_adapter))",
                "pass",
            )
        ],
        mistake_zh="把带步长的 scales 和段张量直接交给按单位步长读取它们的 kernel",
    ),
    Mutant(
        "lora_expand",
        "segments_assumed_contiguous",
        "hands strided segment tensors to the expand kernel, which reads them with unit stride",
        [("order, seg_offsets, seg_adapter = (t.contiguous() for t in (order, seg_offsets, seg_adapter))", "pass")],
        mistake_zh="把带步长的段张量直接交给按单位步长读取它们的 expand kernel",
    ),
]
