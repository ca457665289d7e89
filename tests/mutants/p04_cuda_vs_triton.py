"""Realistic wrong versions of the p04.cuda_vs_triton solutions; every one must be rejected by a check.

The mutants of `rmsnorm_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # rmsnorm_torch
    Mutant(
        "rmsnorm_torch",
        "no_upcast",
        "squares and averages in the input dtype: float16 squares overflow above 256",
        [("x32 = x.float()", "x32 = x")],
        mistake_zh="在输入的数据类型下求平方和平均：float16 的平方超过 256 就溢出",
    ),
    Mutant(
        "rmsnorm_torch",
        "no_cast_back",
        "returns the float32 result without casting it back to x's dtype",
        [("return (x32 * inv_rms * weight.float()).to(x.dtype)", "return x32 * inv_rms * weight.float()")],
        mistake_zh="返回 float32 的结果，没有转回 x 的数据类型",
    ),
    Mutant(
        "rmsnorm_torch",
        "eps_outside_root",
        "adds eps after the square root: 1 / (sqrt(mean) + eps)",
        [("inv_rms = torch.rsqrt(mean_square + eps)", "inv_rms = 1.0 / (torch.sqrt(mean_square) + eps)")],
        mistake_zh="在开方之后加 eps：1 / (sqrt(mean) + eps)",
    ),
    Mutant(
        "rmsnorm_torch",
        "sum_not_mean",
        "sums the squares instead of averaging them (forgets to divide by H)",
        [("x32.pow(2).mean(dim=-1, keepdim=True)", "x32.pow(2).sum(dim=-1, keepdim=True)")],
        mistake_zh="对平方求和而不是求平均（忘了除以 H）",
    ),
    Mutant(
        "rmsnorm_torch",
        "calls_the_builtin",
        "returns F.rms_norm's result instead of computing it",
        [
            (
                "return (x32 * inv_rms * weight.float()).to(x.dtype)",
                "return F.rms_norm(x32, (x.shape[-1],), weight.float(), eps).to(x.dtype)",
            )
        ],
        mistake_zh="返回 F.rms_norm 的结果，而不是自己计算",
    ),
    # rmsnorm_triton
    Mutant(
        "rmsnorm_triton",
        "mean_over_block",
        "divides the sum of squares by BLOCK_SIZE, counting the padded lanes",
        [("tl.sum(x * x, axis=0) / n_cols + eps", "tl.sum(x * x, axis=0) / BLOCK_SIZE + eps")],
        mistake_zh="平方和除以 BLOCK_SIZE，把填充通道也算进去了",
    ),
    Mutant(
        "rmsnorm_triton",
        "no_load_mask",
        "loads the row unmasked, reading past its end",
        [
            (
                "x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)",
                "x = tl.load(x_ptr + row * x_row_stride + cols)",
            )
        ],
        mistake_zh="不带掩码加载这一行，读到它的末尾之外",
    ),
    Mutant(
        "rmsnorm_triton",
        "rows_by_n_cols",
        "addresses row i at x_ptr + i * n_cols, assuming contiguous rows",
        [("x_ptr + row * x_row_stride + cols", "x_ptr + row * n_cols + cols")],
        mistake_zh="第 i 行在 x_ptr + i * n_cols 处寻址，假定各行连续",
    ),
    Mutant(
        "rmsnorm_triton",
        "no_upcast",
        "squares the loaded row in its own dtype: float16 squares overflow above 256",
        [
            (
                "x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)",
                "x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)",
            )
        ],
        mistake_zh="在加载的行自己的数据类型下求平方：float16 的平方超过 256 就溢出",
    ),
    Mutant(
        "rmsnorm_triton",
        "calls_the_builtin",
        "returns F.rms_norm's result instead of the kernel's",
        [("return y.reshape(x.shape)", "return F.rms_norm(x, (hidden,), weight, eps)")],
        mistake_zh="返回 F.rms_norm 的结果而不是内核的",
    ),
    Mutant(
        "rmsnorm_triton",
        "assumes_contiguous",
        "makes the rows contiguous only when reshape had to copy, passing H as the row stride",
        [("rows.stride(0), y.stride(0), hidden, eps,", "hidden, y.stride(0), hidden, eps,")],
        mistake_zh="只有 reshape 不得不复制时才让行连续，并把 H 当作行步长传入",
    ),
    # rmsnorm_block_model
    Mutant(
        "rmsnorm_block_model",
        "no_cross_warp_step",
        "skips the step across warps: warp 0's own sum stands for the whole row",
        [("lanes[:, :WARPS] = shared", "lanes[:, :1] = shared[:, :1]")],
        mistake_zh="跳过跨 warp 的那一步：warp 0 自己的和代表整行",
    ),
    Mutant(
        "rmsnorm_block_model",
        "divides_by_padded_size",
        "divides the sum of squares by the padded length (passes x THREADS) instead of H",
        [
            (
                "inv_rms = torch.rsqrt(total / hidden + eps)",
                "inv_rms = torch.rsqrt(total / (-(-hidden // THREADS) * THREADS) + eps)",
            )
        ],
        mistake_zh="平方和除以填充后的长度（遍数 × THREADS）而不是 H",
    ),
    Mutant(
        "rmsnorm_block_model",
        "pads_with_ones",
        "pads the last pass with ones: the idle threads add 1 each to the sum of squares",
        [
            (
                "torch.cat([chunk, torch.zeros(rows, THREADS - chunk.shape[1])], dim=1)",
                "torch.cat([chunk, torch.ones(rows, THREADS - chunk.shape[1])], dim=1)",
            )
        ],
        mistake_zh="最后一遍用 1 填充：空闲线程各给平方和加了 1",
    ),
    Mutant(
        "rmsnorm_block_model",
        "first_pass_only",
        "each thread reads only its first column: the strided loop stops after one pass",
        [("for c0 in range(0, hidden, THREADS):", "for c0 in range(0, min(hidden, THREADS), THREADS):")],
        mistake_zh="每个线程只读第一列：带步长的循环一遍就停了",
    ),
    # rmsnorm_cuda (C++; each still compiles)
    Mutant(
        "rmsnorm_cuda",
        "no_cross_warp_step",
        "skips the step across warps: warp 0's partial sum stands for the whole row",
        [
            (
                "float total = lane < WARPS ? warp_partials[lane] : 0.0f;",
                "float total = lane == 0 ? warp_partials[0] : 0.0f;",
            )
        ],
        mistake_zh="跳过跨 warp 的那一步：warp 0 的部分和代表整行",
    ),
    Mutant(
        "rmsnorm_cuda",
        "divides_by_padded_size",
        "divides the sum of squares by cols rounded up to a multiple of the block's elements per pass",
        [
            (
                "rsqrtf(total / static_cast<float>(cols) + eps)",
                "rsqrtf(total / static_cast<float>((cols + THREADS * VEC - 1) / (THREADS * VEC) * (THREADS * VEC)) + eps)",
            )
        ],
        mistake_zh="平方和除以向上取整到每遍元素数倍数的 cols",
    ),
    Mutant(
        "rmsnorm_cuda",
        "accumulates_in_input_dtype",
        "accumulates the sum of squares in the input dtype T (bf16/fp16) instead of float",
        [
            ("float sum_sq = 0.0f;", "T sum_sq = static_cast<T>(0.0f);"),
            ("sum_sq += v * v;", "sum_sq = static_cast<T>(static_cast<float>(sum_sq) + v * v);"),
            ("sum_sq = warp_sum(sum_sq);", "const float warp_total = warp_sum(static_cast<float>(sum_sq));"),
            ("if (lane == 0) warp_partials[warp] = sum_sq;", "if (lane == 0) warp_partials[warp] = warp_total;"),
        ],
        mistake_zh="在输入的数据类型 T（bf16/fp16）而不是 float 下累加平方和",
    ),
    Mutant(
        "rmsnorm_cuda",
        "eps_outside_root",
        "adds eps after the square root",
        [
            (
                "rsqrtf(total / static_cast<float>(cols) + eps)",
                "1.0f / (sqrtf(total / static_cast<float>(cols)) + eps)",
            )
        ],
        mistake_zh="在开方之后加 eps",
    ),
    Mutant(
        "rmsnorm_cuda",
        "no_contiguity_check",
        "no contiguity check: a transposed input is read as if it were row-major",
        [('TORCH_CHECK(x.is_contiguous(), "rmsnorm_cuda: x must be contiguous (call .contiguous() first)");', "")],
        mistake_zh="不检查连续性：转置的输入被当作行主序的来读",
    ),
]
