"""Realistic wrong versions of the p00.tensor_layout solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "contiguous_strides",
        "own_size_included",
        "multiplies by a dimension's own size before recording its stride (every stride one dimension too large)",
        [
            (
                "        strides.append(elements_after)\n        elements_after *= max(size, 1)",
                "        elements_after *= max(size, 1)\n        strides.append(elements_after)",
            )
        ],
        mistake_zh="记录某一维的步长之前先乘了它自己的尺寸（每个步长都大了一维）",
    ),
    Mutant(
        "contiguous_strides",
        "column_major",
        "returns the strides in the wrong order: column-major (Fortran) layout",
        [("return tuple(reversed(strides))", "return tuple(strides)")],
        mistake_zh="步长顺序反了：列主序（Fortran）布局",
    ),
    Mutant(
        "contiguous_strides",
        "empty_dims_zero",
        "multiplies by a size-0 dimension as it is, making strides 0 (PyTorch counts it as 1)",
        [("elements_after *= max(size, 1)", "elements_after *= size")],
        mistake_zh="直接乘上尺寸为 0 的维，步长变成 0（PyTorch 把它当作 1）",
    ),
    Mutant(
        "contiguous_strides",
        "asks_torch",
        "allocates a tensor and reads its strides instead of computing them",
        [
            (
                "    strides = []\n",
                "    return tuple(torch.empty(shape).stride())\n    strides = []\n",
            )
        ],
        mistake_zh="分配一个张量读它的步长，而不是自己计算",
    ),
    Mutant(
        "view_strides",
        "contiguous_or_nothing",
        "believes any non-contiguous tensor needs a copy, so only contiguous tensors can be viewed",
        [
            (
                "    if numel == 0:\n",
                "    if tuple(strides) != contiguous_strides(tuple(shape)):\n        return None\n    if numel == 0:\n",
            )
        ],
        mistake_zh="认为任何非连续张量都需要拷贝，于是只有连续张量能 view",
    ),
    Mutant(
        "view_strides",
        "size_one_breaks_chunks",
        "does not skip size-1 dimensions, so they break chunks (the T = 1 decode merge is reported as a copy)",
        [
            (
                "        if size == 1:\n            continue  # never moves",
                "        if False:\n            continue  # never moves",
            )
        ],
        mistake_zh="不跳过尺寸为 1 的维，它们把块切断了（T = 1 的解码合并被报告成拷贝）",
    ),
    Mutant(
        "view_strides",
        "chain_without_base",
        "chains dimensions by comparing the stride with the chunk's element count, forgetting the base stride",
        [("stride == chunks[-1][0] * chunks[-1][1]", "stride == chunks[-1][0]")],
        mistake_zh="比较步长与块的元素个数来串联维度，忘了基础步长",
    ),
    Mutant(
        "view_strides",
        "new_strides_unscaled",
        "gives the new dimensions contiguous strides without the chunk's base stride",
        [("new_strides[d] = filled * base", "new_strides[d] = filled")],
        mistake_zh="给新维度连续的步长，却没乘上块的基础步长",
    ),
    Mutant(
        "view_strides",
        "asks_torch",
        "builds a strided tensor and calls view on it instead of predicting",
        [
            (
                "    chunks = []  # [elements, base stride]",
                "    try:\n"
                "        return tuple(torch.empty_strided(shape, strides).view(new_shape).stride())\n"
                "    except RuntimeError:\n"
                "        return None\n"
                "    chunks = []  # [elements, base stride]",
            )
        ],
        mistake_zh="构造一个带步长的张量去调用 view，而不是预测",
    ),
    Mutant(
        "sliding_windows",
        "last_stride_assumed_one",
        "assumes the last stride is 1 (true for a fresh tensor, false for a transpose or a strided slice)",
        [("last_stride = x.stride(-1)", "last_stride = 1")],
        mistake_zh="假定最后一维步长为 1（新张量成立，转置或带步长的切片则不成立）",
    ),
    Mutant(
        "sliding_windows",
        "storage_offset_zero",
        "passes storage offset 0, so the windows of a slice start at the beginning of its storage",
        [
            (
                "return torch.as_strided(x, size, stride, x.storage_offset())",
                "return torch.as_strided(x, size, stride, 0)",
            )
        ],
        mistake_zh="传入存储偏移 0，切片的窗口从其存储的开头开始",
    ),
    Mutant(
        "sliding_windows",
        "one_window_too_few",
        "counts (T - W) // S windows, forgetting the first one",
        [("n_windows = (length - window) // step + 1", "n_windows = (length - window) // step")],
        mistake_zh="窗口数算成 (T - W) // S，漏了第一个",
    ),
    Mutant(
        "sliding_windows",
        "copies_with_stack",
        "builds the windows by slicing and stacking: right values, but a copy",
        [
            (
                "    return torch.as_strided(x, size, stride, x.storage_offset())",
                "    return torch.stack([x[..., j * step : j * step + window] for j in range(n_windows)], dim=-2)",
            )
        ],
        mistake_zh="用切片再 stack 构造窗口：数值对，但是一份拷贝",
    ),
    Mutant(
        "sliding_windows",
        "calls_unfold",
        "calls the builtin Tensor.unfold",
        [("    return torch.as_strided(x, size, stride, x.storage_offset())", "    return x.unfold(-1, window, step)")],
        mistake_zh="调用内置的 Tensor.unfold",
    ),
    Mutant(
        "sliding_windows",
        "no_validation",
        "does not validate window and step (as_strided then reads past the end of x)",
        [("    if not 1 <= window <= length or step < 1:\n", "    if False:\n")],
        mistake_zh="不检查 window 和 step（as_strided 随后读到 x 的末尾之外）",
    ),
]
