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
    ),
    Mutant(
        "rmsnorm_torch",
        "no_cast_back",
        "returns the float32 result without casting it back to x's dtype",
        [("return (x32 * inv_rms * weight.float()).to(x.dtype)", "return x32 * inv_rms * weight.float()")],
    ),
    Mutant(
        "rmsnorm_torch",
        "eps_outside_root",
        "adds eps after the square root: 1 / (sqrt(mean) + eps)",
        [("inv_rms = torch.rsqrt(mean_square + eps)", "inv_rms = 1.0 / (torch.sqrt(mean_square) + eps)")],
    ),
    Mutant(
        "rmsnorm_torch",
        "sum_not_mean",
        "sums the squares instead of averaging them (forgets to divide by H)",
        [("x32.pow(2).mean(dim=-1, keepdim=True)", "x32.pow(2).sum(dim=-1, keepdim=True)")],
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
    ),
    # rmsnorm_triton
    Mutant(
        "rmsnorm_triton",
        "mean_over_block",
        "divides the sum of squares by BLOCK_SIZE, counting the padded lanes",
        [("tl.sum(x * x, axis=0) / n_cols + eps", "tl.sum(x * x, axis=0) / BLOCK_SIZE + eps")],
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
    ),
    Mutant(
        "rmsnorm_triton",
        "rows_by_n_cols",
        "addresses row i at x_ptr + i * n_cols, assuming contiguous rows",
        [("x_ptr + row * x_row_stride + cols", "x_ptr + row * n_cols + cols")],
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
    ),
    Mutant(
        "rmsnorm_triton",
        "calls_the_builtin",
        "returns F.rms_norm's result instead of the kernel's",
        [("return y.reshape(x.shape)", "return F.rms_norm(x, (hidden,), weight, eps)")],
    ),
    Mutant(
        "rmsnorm_triton",
        "assumes_contiguous",
        "makes the rows contiguous only when reshape had to copy, passing H as the row stride",
        [("rows.stride(0), y.stride(0), hidden, eps,", "hidden, y.stride(0), hidden, eps,")],
    ),
    # rmsnorm_block_model
    Mutant(
        "rmsnorm_block_model",
        "no_cross_warp_step",
        "skips the step across warps: warp 0's own sum stands for the whole row",
        [("lanes[:, :WARPS] = shared", "lanes[:, :1] = shared[:, :1]")],
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
    ),
    Mutant(
        "rmsnorm_block_model",
        "first_pass_only",
        "each thread reads only its first column: the strided loop stops after one pass",
        [("for c0 in range(0, hidden, THREADS):", "for c0 in range(0, min(hidden, THREADS), THREADS):")],
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
    ),
    Mutant(
        "rmsnorm_cuda",
        "no_contiguity_check",
        "no contiguity check: a transposed input is read as if it were row-major",
        [('TORCH_CHECK(x.is_contiguous(), "rmsnorm_cuda: x must be contiguous (call .contiguous() first)");', "")],
    ),
    Mutant(
        "rmsnorm_cuda",
        "no_barrier_before_inv_rms",
        "no __syncthreads() between warp 0's store of inv_rms and the other warps' read of it: they scale by a "
        "stale value",
        [
            (
                "    __syncthreads();\n    const float inv_rms = inv_rms_shared;",
                "    const float inv_rms = inv_rms_shared;",
            )
        ],
        mistake_zh="warp 0 写入 inv_rms 与其他 warp 读取它之间没有 __syncthreads()：它们用旧值做缩放",
    ),
]
