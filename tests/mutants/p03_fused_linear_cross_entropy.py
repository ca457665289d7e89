"""Realistic wrong versions of the p03.fused_linear_cross_entropy solutions; every one must be rejected by a check
(on the CPU through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "per_chunk_normaliser",
        "divides each chunk's gradient by the chunk's own count of valid rows (what calling the "
        "p03.cross_entropy wrapper per chunk does)",
        [
            (
                "vocab_size, max(normaliser, 1), ignore_index,",
                "vocab_size, max(int((targets[start:end] != ignore_index).sum()), 1) if reduction == 'mean' else 1,"
                " ignore_index,",
            ),
        ],
        mistake_zh="每个块的梯度除以块内自己的有效行数（逐块调用 p03.cross_entropy 的包装函数就会这样）",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "weight_grad_overwritten",
        "copies each chunk's weight gradient instead of adding it: only the last chunk survives",
        [("grad_weight.add_(logits.T @ h_chunk)", "grad_weight.copy_(logits.T @ h_chunk)")],
        mistake_zh="复制而不是累加每个块的权重梯度：只剩最后一个块",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "sum_divides_by_n",
        "divides by the number of valid rows for reduction='sum' too",
        [('normaliser = n_valid if reduction == "mean" else 1', "normaliser = n_valid")],
        mistake_zh="reduction='sum' 时也除以有效行数",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "mean_over_all_rows",
        "counts every row, ignored ones included, in the mean",
        [('normaliser = n_valid if reduction == "mean" else 1', 'normaliser = n_rows if reduction == "mean" else 1')],
        mistake_zh="平均时计入每一行，包括被忽略的行",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "materialises_the_logits",
        "computes hidden @ weight.T once and slices it: the right numbers, and the (N, V) tensor the lesson removes",
        [
            (
                "    for start in range(0, n_rows, chunk_size):\n",
                "    all_logits = hidden @ weight.T\n    for start in range(0, n_rows, chunk_size):\n",
            ),
            ("logits = h_chunk @ weight.T ", "logits = all_logits[start:end] "),
        ],
        mistake_zh="一次算出 hidden @ weight.T 再切片：数值对，但那正是本课要去掉的 (N, V) 张量",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "no_target_range_check",
        "trusts the targets: a target outside [0, V) becomes an out-of-bounds read in the kernel",
        [("if n_bad:", "if False:")],
        mistake_zh="信任 targets：[0, V) 之外的目标在内核里变成越界读取",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "last_chunk_not_clamped",
        "ends every chunk at start + chunk_size: the last launch runs programs for rows past N",
        [("end = min(start + chunk_size, n_rows)", "end = start + chunk_size")],
        mistake_zh="每个块都结束在 start + chunk_size：最后一次启动为 N 之后的行运行了程序",
    ),
    Mutant(
        "linear_cross_entropy_fwd_bwd",
        "loss_in_torch",
        "computes the chunk's loss and gradient with a log-softmax in PyTorch instead of the kernel",
        [
            (
                "cross_entropy_kernel[(end - start,)](",
                "lp = torch.log_softmax(logits.float(), dim=-1)\n"
                "        if False: cross_entropy_kernel[(end - start,)](",
            ),
        ],
        mistake_zh="块的损失和梯度用 PyTorch 的 log-softmax 计算，而不是内核",
    ),
    Mutant(
        "fused_linear_cross_entropy",
        "ignores_grad_output",
        "returns the saved gradients without multiplying by grad_output",
        [
            ("grad_hidden.mul_(grad_output)", "pass"),
            ("grad_weight.mul_(grad_output)", "pass"),
        ],
        mistake_zh="返回保存的梯度，没有乘 grad_output",
    ),
    Mutant(
        "fused_linear_cross_entropy",
        "no_weight_gradient",
        "returns None for the weight, as if the head were frozen",
        [
            (
                "return grad_hidden, grad_weight, None, None, None, None",
                "return grad_hidden, None, None, None, None, None",
            )
        ],
        mistake_zh="权重梯度返回 None，好像输出头是冻结的",
    ),
]
