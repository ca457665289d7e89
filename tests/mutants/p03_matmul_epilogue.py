"""Realistic wrong versions of the p03.matmul_epilogue solutions; every one must be rejected by a check."""

from llm_algo.mutants import Mutant

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
    ),
    Mutant(
        "activation",
        "gelu_without_cubic",
        "drops the 0.044715 z^3 term of the tanh approximation",
        [("inner = SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)", "inner = SQRT_2_OVER_PI * z")],
    ),
    Mutant(
        "activation",
        "silu_wrong_sign",
        "uses sigmoid(-z), i.e. z / (1 + e^z)",
        [("z = z * tl.sigmoid(z)", "z = z * tl.sigmoid(-z)")],
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
    ),
    Mutant(
        "linear_act",
        "activation_before_bias",
        "applies the activation to x @ W.T and adds the bias afterwards",
        [
            ("    acc = apply_activation(acc, ACTIVATION)\n", ""),
            ("    if HAS_BIAS:\n", "    acc = apply_activation(acc, ACTIVATION)\n    if HAS_BIAS:\n"),
        ],
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
    ),
]
