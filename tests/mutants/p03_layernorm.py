"""Realistic wrong versions of the p03.layernorm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "welford_stats",
        "no_between_block_term",
        "adds the blocks' M2 but forgets the delta^2 * n_a * n_b / n term",
        [("m2 = m2 + block_m2 + delta.pow(2) * (count * n_b / total)", "m2 = m2 + block_m2")],
        mistake_zh="加了各块的 M2，却忘了 delta² * n_a * n_b / n 项",
    ),
    Mutant(
        "welford_stats",
        "block_means_averaged",
        "averages the running mean with the block mean, ignoring the counts",
        [("mean = mean + delta * (n_b / total)", "mean = mean + delta * (0.5 if count else 1.0)")],
        mistake_zh="运行均值与块均值直接平均，忽略了计数",
    ),
    Mutant(
        "welford_stats",
        "sum_of_squares_in_blocks",
        "computes the block's M2 as sum(x^2) - n * mean^2 (cancellation)",
        [
            (
                "block_m2 = (block - block_mean[:, None]).pow(2).sum(dim=1)",
                "block_m2 = block.pow(2).sum(dim=1) - n_b * block_mean.pow(2)",
            )
        ],
        mistake_zh="块的 M2 用 sum(x²) - n * mean² 计算（抵消）",
    ),
    Mutant(
        "welford_stats",
        "unbiased_variance",
        "returns M2 / (N - 1)",
        [("return mean, m2 / count", "return mean, m2 / max(count - 1, 1)")],
        mistake_zh="返回 M2 / (N - 1)",
    ),
    Mutant(
        "layer_norm_forward",
        "e_x2_minus_mean2",
        "variance as E[x^2] - mean^2: catastrophic cancellation at a large mean",
        [
            (
                "var = tl.sum(xc * xc, axis=0) / n_cols",
                "var = tl.sum(x * x, axis=0) / n_cols - mean * mean",
            )
        ],
        mistake_zh="方差用 E[x²] - mean²：均值大时发生灾难性抵消",
    ),
    Mutant(
        "layer_norm_forward",
        "padded_lanes_in_variance",
        "centres the padded lanes too, so each adds mean^2 to the variance",
        [("xc = tl.where(mask, x - mean, 0.0)", "xc = x - mean")],
        mistake_zh="填充通道也做了中心化，每个都给方差加了 mean²",
    ),
    Mutant(
        "layer_norm_forward",
        "unbiased_variance",
        "divides the sum of squares by N - 1",
        [("var = tl.sum(xc * xc, axis=0) / n_cols", "var = tl.sum(xc * xc, axis=0) / (n_cols - 1)")],
        mistake_zh="平方和除以 N - 1",
    ),
    Mutant(
        "layer_norm_forward",
        "no_store_mask",
        "stores the whole block of y, past the end of the row",
        [
            (
                "tl.store(Y + row * y_row_stride + cols, y.to(Y.dtype.element_ty), mask=mask)",
                "tl.store(Y + row * y_row_stride + cols, y.to(Y.dtype.element_ty))",
            )
        ],
        mistake_zh="y 按整块存储，越过了行的末尾",
    ),
    Mutant(
        "layer_norm_forward",
        "saves_std",
        "saves sqrt(var + eps) instead of its inverse",
        [("tl.store(Rstd + row, rstd)", "tl.store(Rstd + row, 1.0 / rstd)")],
        mistake_zh="保存 sqrt(var + eps) 而不是它的倒数",
    ),
    Mutant(
        "layer_norm_backward",
        "rmsnorm_backward",
        "drops the mean term of dx (RMSNorm's formula)",
        [("dx = rstd * (g - tl.sum(g, axis=0) / n_cols - x_hat", "dx = rstd * (g - x_hat")],
        mistake_zh="丢了 dx 的均值项（RMSNorm 的公式）",
    ),
    Mutant(
        "layer_norm_backward",
        "partials_overwritten",
        "assigns the weight gradient of the current row instead of accumulating",
        [("dw_acc += dy * x_hat", "dw_acc = dy * x_hat")],
        mistake_zh="赋值当前行的权重梯度，而不是累加",
    ),
    Mutant(
        "layer_norm_backward",
        "bias_grad_with_x_hat",
        "accumulates dy * x_hat into the bias gradient",
        [("db_acc += dy\n", "db_acc += dy * x_hat\n")],
        mistake_zh="把 dy * x_hat 累加进 bias 的梯度",
    ),
    Mutant(
        "layer_norm_backward",
        "stage_two_first_block_only",
        "the second stage sums only the first BLOCK_P partial rows",
        [("for start in range(0, n_partials, BLOCK_P):", "for start in range(0, 1):")],
        mistake_zh="第二阶段只对前 BLOCK_P 个部分和行求和",
    ),
    Mutant(
        "layer_norm",
        "weight_and_bias_grads_swapped",
        "returns the gradients as (dx, db, dw, None)",
        [("return dx.view(grad_y.shape), dw, db, None", "return dx.view(grad_y.shape), db, dw, None")],
        mistake_zh="按 (dx, db, dw, None) 返回梯度",
    ),
    Mutant(
        "layer_norm",
        "strided_grad_passed_through",
        "passes autograd's gradient to the kernels as it comes, without making its rows contiguous",
        [("dy = grad_y.reshape(rows.shape).contiguous()", "dy = grad_y.reshape(rows.shape)")],
        mistake_zh="autograd 传来的梯度原样交给内核，没有让它的行连续",
    ),
    Mutant(
        "layer_norm_forward",
        "no_load_mask",
        "loads the row unmasked (only the store is masked), reading past the end of the row",
        [
            (
                "x = tl.load(X + row * x_row_stride + cols, mask=mask, other=0.0)",
                "x = tl.load(X + row * x_row_stride + cols)",
            )
        ],
        mistake_zh="不带掩码加载这一行（只有存储有掩码），读到行的末尾之外",
    ),
    Mutant(
        "layer_norm_forward",
        "no_weight_mask",
        "loads the weight without the mask, reading past the end of the (N,) weight",
        [
            (
                "w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)\n    b =",
                "w = tl.load(W + cols).to(tl.float32)\n    b =",
            )
        ],
        mistake_zh="加载权重时没有掩码，读到 (N,) 的权重末尾之外",
    ),
    Mutant(
        "layer_norm_backward",
        "partial_rows_unmasked",
        "masks the columns but not the partial rows in stage 2, reading past the last partial row",
        [("mask = (rows[:, None] < n_partials) & col_mask[None, :]", "mask = col_mask[None, :]")],
        mistake_zh="第二阶段屏蔽了列却没有屏蔽部分和行，读到最后一个部分和行之外",
    ),
    Mutant(
        "layer_norm_forward",
        "calls_the_builtin",
        "returns F.layer_norm's output instead of the kernel's",
        [
            (
                "return y, mean, rstd",
                "return F.layer_norm(x.float(), (n_cols,), weight.float(), bias.float(), eps).to(x.dtype), mean, rstd",
            )
        ],
        mistake_zh="返回 F.layer_norm 的输出而不是内核的",
    ),
]
