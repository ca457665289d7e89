"""Realistic wrong versions of the p03.matmul_epilogue solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "activation",
        "textbook_tanh",
        "tanh(u) = (e^2u - 1) / (e^2u + 1): inf / inf = nan for large inputs",
        [
            (
                "z = 0.5 * z * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))",
                "z = 0.5 * z * (1.0 + (tl.exp(2.0 * inner) - 1.0) / (tl.exp(2.0 * inner) + 1.0))",
            )
        ],
        mistake_zh="tanh(u) = (e^2u - 1) / (e^2u + 1)：输入大时 inf / inf = nan",
    ),
    Mutant(
        "activation",
        "gelu_without_cubic",
        "drops the 0.044715 z^3 term of the tanh approximation",
        [("inner = SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)", "inner = SQRT_2_OVER_PI * z")],
        mistake_zh="丢了 tanh 近似中的 0.044715 z³ 项",
    ),
    Mutant(
        "activation",
        "silu_wrong_sign",
        "uses sigmoid(-z), i.e. z / (1 + e^z)",
        [("z = z * tl.sigmoid(z)", "z = z * tl.sigmoid(-z)")],
        mistake_zh="用 sigmoid(-z)，即 z / (1 + e^z)",
    ),
    Mutant(
        "linear_act",
        "bias_over_rows",
        "indexes the bias by the tile's rows (offs_m) instead of its columns",
        [
            (
                "bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)  # (BLOCK_N,)\n"
                "        acc += bias[None, :]",
                "bias = tl.load(bias_ptr + offs_m, mask=offs_m < N, other=0.0).to(tl.float32)\n"
                "        acc += bias[:, None]",
            )
        ],
        mistake_zh="按分块的行（offs_m）而不是列索引 bias",
    ),
    Mutant(
        "linear_act",
        "activation_before_bias",
        "applies the activation to x @ W.T and adds the bias afterwards",
        [
            ("    acc = apply_activation(acc, ACTIVATION)\n", ""),
            ("    if HAS_BIAS:\n", "    acc = apply_activation(acc, ACTIVATION)\n    if HAS_BIAS:\n"),
        ],
        mistake_zh="对 x @ W.T 施加激活后才加 bias",
    ),
    Mutant(
        "linear_act",
        "residual_inside_activation",
        "adds the residual before the activation: act(x @ W.T + b + r)",
        [
            ("    acc = apply_activation(acc, ACTIVATION)\n", ""),
            (
                "    out_ptrs = out_ptr + offs_m[:, None] * stride_om",
                "    acc = apply_activation(acc, ACTIVATION)\n    out_ptrs = out_ptr + offs_m[:, None] * stride_om",
            ),
        ],
        mistake_zh="在激活之前加残差：act(x @ W.T + b + r)",
    ),
    Mutant(
        "linear_act",
        "no_store_mask",
        "stores the whole tile, past the edges of the output",
        [
            (
                "tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)",
                "tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="存储整个分块，越过了输出的边界",
    ),
    Mutant(
        "linear_act",
        "rows_not_wrapped",
        "indexes x's rows with offs_m unwrapped (no % M, no mask): the last row tile reads past the end of x",
        [("(offs_m % M)[:, None] * stride_xm", "offs_m[:, None] * stride_xm")],
        mistake_zh="x 的行用未取模的 offs_m 索引（没有 % M，也没有掩码）：最后一个行分块读到 x 的末尾之外",
    ),
    Mutant(
        "linear_act",
        "no_k_mask",
        "loads x without the K mask, so the last K step reads past the end of each row of x",
        [("x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)", "x = tl.load(x_ptrs)")],
        mistake_zh="加载 x 时没有 K 掩码，最后一个 K 步读到 x 每一行末尾之外",
    ),
    Mutant(
        "linear_act",
        "no_bias_mask",
        "loads the bias without the mask, reading past the end of the (N,) bias in the last column tile",
        [("bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)", "bias = tl.load(bias_ptr + offs_n)")],
        mistake_zh="加载 bias 时没有掩码，最后一个列分块读到 (N,) 的 bias 末尾之外",
    ),
    Mutant(
        "linear_act",
        "residual_unmasked",
        "loads the residual tile unmasked (only the store is masked), reading past both edges of the residual",
        [("acc += tl.load(res_ptrs, mask=mask, other=0.0)", "acc += tl.load(res_ptrs)")],
        mistake_zh="不带掩码加载残差分块（只有存储有掩码），读到残差两个方向的边界之外",
    ),
]
