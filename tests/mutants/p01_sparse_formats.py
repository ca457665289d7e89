"""Realistic wrong versions of the p01.sparse_formats solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "coalesce",
        "column_major_keys",
        "builds the key as col * rows + row, so the entries come back sorted by column",
        [
            ("keys = rows * shape[1] + cols", "keys = cols * shape[0] + rows"),
            (
                "torch.stack([unique_keys // shape[1], unique_keys % shape[1]])",
                "torch.stack([unique_keys % shape[0], unique_keys // shape[0]])",
            ),
        ],
        mistake_zh="键取 col * rows + row，结果按列排序",
    ),
    Mutant(
        "coalesce",
        "keeps_last_duplicate",
        "writes each repeated coordinate's value instead of adding them (the last one wins)",
        [("dtype=values.dtype).index_add_(0, run, values)", "dtype=values.dtype).index_copy_(0, run, values)")],
        mistake_zh="重复坐标的值直接覆盖而不是相加（最后一个胜出）",
    ),
    Mutant(
        "coalesce",
        "stride_is_rows",
        "builds the row-major key with the number of rows as the stride (right only for square matrices)",
        [
            ("keys = rows * shape[1] + cols", "keys = rows * shape[0] + cols"),
            (
                "torch.stack([unique_keys // shape[1], unique_keys % shape[1]])",
                "torch.stack([unique_keys // shape[0], unique_keys % shape[0]])",
            ),
        ],
        mistake_zh="行主序的键用行数作步长（只有方阵才对）",
    ),
    Mutant(
        "dense_to_csr",
        "no_leading_zero",
        "returns the cumulative counts without the leading 0 (M entries instead of M + 1)",
        [("crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])", "crow = counts.cumsum(0)")],
        mistake_zh="返回的累计计数没有开头的 0（M 项而不是 M + 1 项）",
    ),
    Mutant(
        "dense_to_csr",
        "counts_not_cumulative",
        "stores each row's count instead of the running total",
        [
            (
                "crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])",
                "crow = torch.cat([counts.new_zeros(1), counts])",
            )
        ],
        mistake_zh="存的是每行的计数，而不是累计和",
    ),
    Mutant(
        "dense_to_csr",
        "empty_rows_dropped",
        "counts rows with bincount without minlength, losing empty rows at the end",
        [("counts = torch.bincount(rows, minlength=dense.shape[0])", "counts = torch.bincount(rows)")],
        mistake_zh="bincount 统计行时不带 minlength，丢了末尾的空行",
    ),
    Mutant(
        "csr_matmul",
        "no_fp32_accumulation",
        "sums the products in the input dtype (bf16/fp16 rows of hundreds of entries lose digits)",
        [("accumulate = torch.promote_types(values.dtype, torch.float32)", "accumulate = values.dtype")],
        mistake_zh="在输入的数据类型下累加乘积（几百个元素的 bf16/fp16 行丢精度）",
    ),
    Mutant(
        "csr_matmul",
        "gathers_by_row",
        "multiplies each value by the row of rhs at the entry's row instead of its column",
        [("* x[col].to(accumulate)", "* x[row_of].to(accumulate)")],
        mistake_zh="每个值乘的是 rhs 中该元素所在行号的那一行，而不是列号的那一行",
    ),
    Mutant(
        "csr_matmul",
        "row_of_from_pointers",
        "repeats each row by crow[i + 1] instead of crow[i + 1] - crow[i]",
        [
            (
                "row_of = torch.repeat_interleave(torch.arange(rows), counts)",
                "row_of = torch.repeat_interleave(torch.arange(rows), crow[1:])[:len(values)]",
            )
        ],
        mistake_zh="每行重复 crow[i + 1] 次，而不是 crow[i + 1] - crow[i] 次",
    ),
    Mutant(
        "mask_2_4",
        "groups_along_output_dim",
        "groups 4 consecutive rows (the output dimension) instead of 4 consecutive inputs",
        [
            (
                "groups = weight.abs().reshape(rows, cols // 4, 4)  # (out, in/4, 4)",
                "groups = weight.abs().T.reshape(cols, rows // 4, 4)  # (out, in/4, 4)",
            ),
            ("return keep.reshape(rows, cols)", "return keep.reshape(cols, rows).T"),
        ],
        mistake_zh="按相邻 4 行（输出维）分组，而不是相邻 4 个输入",
    ),
    Mutant(
        "mask_2_4",
        "signed_values",
        "ranks the signed weights instead of their magnitudes (drops large negative weights)",
        [("groups = weight.abs().reshape(", "groups = weight.reshape(")],
        mistake_zh="按带符号的权重而不是绝对值排序（丢掉了大的负权重）",
    ),
    Mutant(
        "mask_2_4",
        "keeps_smallest",
        "keeps the two smallest magnitudes of each group",
        [
            (
                "order = torch.argsort(groups, dim=-1, descending=True, stable=True)",
                "order = torch.argsort(groups, dim=-1, stable=True)",
            )
        ],
        mistake_zh="每组保留绝对值最小的两个",
    ),
    Mutant(
        "storage_bytes",
        "m_row_pointers",
        "counts M row pointers instead of M + 1",
        [("return (rows + 1) * index_bytes", "return rows * index_bytes")],
        mistake_zh="行指针算了 M 个而不是 M + 1 个",
    ),
    Mutant(
        "storage_bytes",
        "coo_one_index",
        "stores one index per COO value",
        [("return nnz * (2 * index_bytes + value_bytes)", "return nnz * (index_bytes + value_bytes)")],
        mistake_zh="COO 的每个值只存一个下标",
    ),
    Mutant(
        "storage_bytes",
        "two_four_without_metadata",
        "counts the kept values of 2:4 but not their 2-bit positions",
        [("return nnz * value_bytes + nnz * 2 / 8", "return nnz * value_bytes")],
        mistake_zh="2:4 只算保留的值，没算它们 2 比特的位置",
    ),
    Mutant(
        "coalesce",
        "calls_the_builtin",
        "hands the work to torch.sparse_coo_tensor(...).coalesce(), the checks' reference",
        [
            (
                "keys = rows * shape[1] + cols  # row-major position",
                "coalesced = torch.sparse_coo_tensor(indices, values, shape).coalesce()\n"
                "    return coalesced.indices(), coalesced.values()\n"
                "    keys = rows * shape[1] + cols  # row-major position",
            )
        ],
        mistake_zh="把工作交给 torch.sparse_coo_tensor(...).coalesce()，即检查用的参考实现",
    ),
    Mutant(
        "dense_to_csr",
        "calls_the_builtin",
        "hands the work to Tensor.to_sparse_csr(), the checks' reference",
        [
            (
                "return crow, cols, dense[rows, cols]",
                "csr = dense.to_sparse_csr()\n    return csr.crow_indices(), csr.col_indices(), csr.values()",
            )
        ],
        mistake_zh="把工作交给 Tensor.to_sparse_csr()，即检查用的参考实现",
    ),
]
