"""Realistic wrong versions of the p03.cross_entropy solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "cross_entropy_fwd_bwd",
        "no_rescale",
        "adds each chunk's exponentials without rescaling the running sum when the max grows",
        [("d = d * tl.exp(m - m_safe) + tl.sum(", "d = d + tl.sum(")],
        mistake_zh="最大值变大时没有重新缩放累计和，就直接加上每个数据块的指数",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "pads_with_zero",
        "pads the tail of the last chunk with 0 in pass 1, adding exp(0 - m) per padded lane",
        [
            (
                'x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)\n        m_new',
                "x = tl.load(row_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)\n        m_new",
            )
        ],
        mistake_zh="第一遍中最后一个数据块的尾部用 0 填充，每个填充通道都多加了 exp(0 - m)",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "no_inf_guard",
        "subtracts a -inf running max: a row whose first chunk is masked with -inf gives nan",
        [('m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_safe = m_new")],
        mistake_zh="减去值为 -inf 的累计最大值：第一个数据块被 -inf 掩盖的行得到 nan",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "probabilities_from_rounded_lse",
        "forms lse = M + log(S) in float32 and computes exp(x - lse): off by the rounding of lse on huge logits",
        [("probs = tl.exp(x - row_max) * inv_sum", "probs = tl.exp(x - (row_max + tl.log(row_sum)))")],
        mistake_zh="在 float32 中算出 lse = M + log(S) 再计算 exp(x - lse)：logits 很大时会差一个 lse 的舍入误差",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "no_store_mask",
        "stores whole chunks of the gradient, past the end of the row",
        [
            (
                "tl.store(row_ptr + start + cols, grad.to(logits_ptr.dtype.element_ty), mask=mask)",
                "tl.store(row_ptr + start + cols, grad.to(logits_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="按整个数据块存储梯度，写越过了行尾",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "ignored_rows_untouched",
        "returns early for an ignored row without zeroing it, so its logits come back as a gradient",
        [
            (
                "tl.store(row_ptr + start + cols, zeros, mask=start + cols < n_cols)",
                "pass",
            )
        ],
        mistake_zh="遇到被忽略的行直接返回而没有清零，于是它的 logits 被当作梯度返回",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "gradient_of_the_sum",
        "forgets the 1 / n_valid of the mean in the gradient",
        [("inv_sum, inv_n_valid = 1.0 / row_sum, 1.0 / n_valid", "inv_sum, inv_n_valid = 1.0 / row_sum, 1.0")],
        mistake_zh="梯度中忘了均值的系数 1 / n_valid",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "divides_by_all_rows",
        "passes the number of rows, ignored ones included, as n_valid",
        [
            (
                "n_cols, max(n_valid, 1), ignore_index,",
                "n_cols, n_rows, ignore_index,",
            )
        ],
        mistake_zh="把包括被忽略行在内的总行数当作 n_valid 传入",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "no_target_range_check",
        "trusts the targets: a target outside [0, V) becomes an out-of-bounds read",
        [("if n_bad:", "if False:")],
        mistake_zh="不校验目标：超出 [0, V) 的目标变成越界读",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "one_hot_in_chunk_coordinates",
        "compares the chunk-local lane index with the target (cols == target): the -1 lands in the first chunk only, "
        "and in every chunk at lane target when the target is below BLOCK_SIZE",
        [
            (
                "tl.where(start + cols == target, 1.0, 0.0)",
                "tl.where(cols == target, 1.0, 0.0)",
            )
        ],
        mistake_zh="用数据块内的局部下标与目标比较（cols == target，漏了 start）：目标小于 BLOCK_SIZE 时每个数据块的第 target 个位置都被减 1，否则哪里都没有减",
    ),
    Mutant(
        "fused_cross_entropy",
        "ignores_grad_output",
        "returns the saved gradient without multiplying by grad_output",
        [("grad_logits.mul_(grad_output)", "pass")],
        mistake_zh="返回保存的梯度，没有乘以 grad_output",
    ),
    Mutant(
        "fused_cross_entropy",
        "backward_allocates",
        "returns saved * grad_output: the right numbers in a new (N, V) tensor",
        [
            (
                "grad_logits.mul_(grad_output)  # in place: still nothing new of size (N, V)\n"
                "        return grad_logits, None, None",
                "return grad_logits * grad_output.to(grad_logits.dtype), None, None",
            )
        ],
        mistake_zh="返回 saved * grad_output：数值正确，但分配了一个新的 (N, V) 张量",
    ),
    Mutant(
        "fused_cross_entropy",
        "saves_logits_copy",
        "saves a copy of the logits made before the kernel overwrote them, so the backward returns logits",
        [
            (
                "loss = cross_entropy_fwd_bwd(logits, targets, ignore_index)",
                "saved = logits.clone()\n        loss = cross_entropy_fwd_bwd(logits, targets, ignore_index)",
            ),
            ("ctx.save_for_backward(logits)", "ctx.save_for_backward(saved)"),
        ],
        mistake_zh="保存的是内核覆盖 logits 之前的副本，于是反向传播返回的是 logits",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "first_pass_load_unmasked",
        "loads the chunks of pass 1 unmasked, reading past the end of the row in the last chunk",
        [
            (
                'x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)\n        m_new',
                "x = tl.load(row_ptr + start + cols).to(tl.float32)\n        m_new",
            )
        ],
        mistake_zh="第一遍加载数据块时没有掩码，最后一个数据块读越过了行尾",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "second_pass_load_unmasked",
        "reloads the chunks of pass 2 unmasked, since the store is masked anyway",
        [
            (
                'x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)\n        probs',
                "x = tl.load(row_ptr + start + cols).to(tl.float32)\n        probs",
            )
        ],
        mistake_zh="第二遍重新加载数据块时没有掩码，理由是反正 store 有掩码",
    ),
    Mutant(
        "cross_entropy_fwd_bwd",
        "strided_targets_read_as_contiguous",
        "hands a strided targets tensor to a kernel that reads targets_ptr + row",
        [("logits, targets.contiguous(), loss,", "logits, targets, loss,")],
        mistake_zh="把带 stride 的 targets 直接交给按 targets_ptr + row 读取的内核",
    ),
]
