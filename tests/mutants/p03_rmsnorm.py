"""Realistic wrong versions of the p03.rmsnorm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "rmsnorm_forward",
        "mean_over_block",
        "divides the sum of squares by BLOCK_SIZE, counting the padded lanes",
        [("tl.sum(x * x, axis=0) / n_cols + eps", "tl.sum(x * x, axis=0) / BLOCK_SIZE + eps")],
        mistake_zh="平方和除以 BLOCK_SIZE，把填充通道也算进去了",
    ),
    Mutant(
        "rmsnorm_forward",
        "eps_outside_root",
        "adds eps after the square root: 1 / (sqrt(ms) + eps)",
        [
            (
                "rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)",
                "rstd = 1.0 / (tl.sqrt(tl.sum(x * x, axis=0) / n_cols) + eps)",
            )
        ],
        mistake_zh="在开方之后加 eps：1 / (sqrt(ms) + eps)",
    ),
    Mutant(
        "rmsnorm_forward",
        "no_store_mask",
        "stores y for the whole block",
        [
            (
                "(x * rstd * weight).to(y_ptr.dtype.element_ty), mask=mask)",
                "(x * rstd * weight).to(y_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="y 按整块存储",
    ),
    Mutant(
        "rmsnorm_forward",
        "rows_by_n_cols",
        "addresses rows as row * n_cols, assuming a contiguous input",
        [("x_ptr + row * x_row_stride + cols", "x_ptr + row * n_cols + cols")],
        mistake_zh="按 row * n_cols 寻址行，假定输入连续",
    ),
    Mutant(
        "rmsnorm_forward",
        "saves_rms",
        "stores the rms instead of its reciprocal for the backward",
        [("tl.store(rstd_ptr + row, rstd)", "tl.store(rstd_ptr + row, 1.0 / rstd)")],
        mistake_zh="为反向存下 rms 而不是它的倒数",
    ),
    Mutant(
        "rmsnorm_backward",
        "no_projection_term",
        "dx = rstd * dy * weight: treats rstd as a constant, forgetting that it depends on x",
        [("(rstd * (u - x_hat * c))", "(rstd * u)")],
        mistake_zh="dx = rstd * dy * weight：把 rstd 当成常数，忘了它依赖于 x",
    ),
    Mutant(
        "rmsnorm_backward",
        "dweight_from_u",
        "accumulates u * x_hat (which contains the weight) instead of dy * x_hat",
        [("dweight_acc += dy * x_hat", "dweight_acc += u * x_hat")],
        mistake_zh="累加 u * x_hat（其中含有权重），而不是 dy * x_hat",
    ),
    Mutant(
        "rmsnorm_backward",
        "every_program_writes_row_zero",
        "stores each program's partial into row 0 of the buffer (a race) instead of its own row",
        [("dweight_partial_ptr + program * partial_row_stride + cols", "dweight_partial_ptr + cols")],
        mistake_zh="每个程序都把部分和存进缓冲区的第 0 行（竞争），而不是自己的行",
    ),
    Mutant(
        "rmsnorm_backward",
        "row_loop_not_clamped",
        "runs every program's loop for rows_per_program rows, past the last row",
        [("row_end = tl.minimum(row_start + rows_per_program, n_rows)", "row_end = row_start + rows_per_program")],
        mistake_zh="每个程序的循环都跑满 rows_per_program 行，越过了最后一行",
    ),
    Mutant(
        "rmsnorm_backward",
        "mean_over_block",
        "takes c as the mean over BLOCK_SIZE lanes",
        [("c = tl.sum(u * x_hat, axis=0) / n_cols", "c = tl.sum(u * x_hat, axis=0) / BLOCK_SIZE")],
        mistake_zh="c 取 BLOCK_SIZE 个通道上的平均",
    ),
    Mutant(
        "rms_norm",
        "view_not_reshape",
        "flattens with view, which fails on activations whose rows are not laid out contiguously",
        [("rows = x.reshape(-1, x.shape[-1])", "rows = x.view(-1, x.shape[-1])")],
        mistake_zh="用 view 展平，行在内存中不连续的激活会失败",
    ),
    Mutant(
        "rms_norm",
        "no_gradient_for_eps",
        "backward returns two gradients for three inputs of forward",
        [("return dx.reshape(dy.shape), dweight, None", "return dx.reshape(dy.shape), dweight")],
        mistake_zh="forward 有三个输入，backward 却只返回两个梯度",
    ),
    Mutant(
        "rms_norm",
        "gradients_swapped",
        "returns (dweight, dx, None)",
        [("return dx.reshape(dy.shape), dweight, None", "return dweight, dx.reshape(dy.shape), None")],
        mistake_zh="返回 (dweight, dx, None)",
    ),
    Mutant(
        "rms_norm",
        "strided_grad_passed_through",
        "passes autograd's gradient to the kernel as it comes, without making its rows contiguous",
        [("dy_rows = dy.reshape(rows.shape).contiguous()", "dy_rows = dy.reshape(rows.shape)")],
        mistake_zh="autograd 传来的梯度原样交给内核，没有让它的行连续",
    ),
    Mutant(
        "rmsnorm_forward",
        "no_load_mask",
        "loads the row unmasked (only the store is masked), reading past the end of the row",
        [
            (
                "x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)",
                "x = tl.load(x_ptr + row * x_row_stride + cols)",
            )
        ],
        mistake_zh="不带掩码加载这一行（只有存储有掩码），读到行的末尾之外",
    ),
    Mutant(
        "rmsnorm_forward",
        "no_weight_mask",
        "loads the weight without the mask, reading past the end of the (N,) weight",
        [
            (
                "weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)",
                "weight = tl.load(weight_ptr + cols)",
            )
        ],
        mistake_zh="加载权重时没有掩码，读到 (N,) 的权重末尾之外",
    ),
    Mutant(
        "rmsnorm_backward",
        "no_load_mask",
        "loads dy unmasked, reading past the end of each row",
        [
            (
                "dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)",
                "dy = tl.load(dy_ptr + row * dy_row_stride + cols)",
            )
        ],
        mistake_zh="不带掩码加载 dy，读到每一行末尾之外",
    ),
    Mutant(
        "rmsnorm_forward",
        "calls_the_builtin",
        "returns F.rms_norm's output instead of the kernel's",
        [("return y, rstd", "return F.rms_norm(x.float(), (n_cols,), weight.float(), eps).to(x.dtype), rstd")],
        mistake_zh="返回 F.rms_norm 的输出而不是内核的",
    ),
]
