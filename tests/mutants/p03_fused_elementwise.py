"""Realistic wrong versions of the p03.fused_elementwise solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "traffic",
        "forgets_intermediate_write",
        "counts eager silu as a read of g only, forgetting that it writes s back to HBM",
        [("(1 + 1) * tensor + (2 + 1) * tensor,", "1 * tensor + (2 + 1) * tensor,")],
        mistake_zh="eager 的 silu 只算了读 g，忘了它要把 s 写回 HBM",
    ),
    Mutant(
        "traffic",
        "backward_as_two_kernels",
        "counts the eager backward as two kernels (d_up and d_gate), missing the separate d_s = δ·u product",
        [('"eager_swiglu_backward": 3 * (2 + 1) * tensor,', '"eager_swiglu_backward": 2 * (2 + 1) * tensor,')],
        mistake_zh="eager 的反向按两个内核（d_up 和 d_gate）计算，漏了单独的 d_s = δ·u 乘积",
    ),
    Mutant(
        "traffic",
        "fused_backward_one_output",
        "counts the fused backward as if it wrote one gradient",
        [('"fused_swiglu_backward": (3 + 2) * tensor,', '"fused_swiglu_backward": (3 + 1) * tensor,')],
        mistake_zh="融合的反向按只写一个梯度计算",
    ),
    Mutant(
        "swiglu",
        "rows_by_n_cols",
        "addresses rows as row * n_cols, assuming contiguous inputs (wrong on the halves of a gate_up projection)",
        [("gate_ptr + row * gate_row_stride + cols", "gate_ptr + row * n_cols + cols")],
        mistake_zh="按 row * n_cols 寻址行，假定输入连续（对 gate_up 投影切出的两半是错的）",
    ),
    Mutant(
        "swiglu",
        "sigmoid_not_silu",
        "uses sigmoid(gate) as the activation, forgetting the factor gate",
        [("out = gate * tl.sigmoid(gate) * up", "out = tl.sigmoid(gate) * up")],
        mistake_zh="用 sigmoid(gate) 作为激活，忘了乘 gate",
    ),
    Mutant(
        "swiglu",
        "gate_and_up_swapped",
        "applies silu to up instead of gate",
        [("out = gate * tl.sigmoid(gate) * up", "out = up * tl.sigmoid(up) * gate")],
        mistake_zh="silu 作用在 up 上而不是 gate 上",
    ),
    Mutant(
        "swiglu",
        "no_store_mask",
        "stores the whole block past the end of the row",
        [
            (
                "tl.store(out_ptr + row * out_row_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)",
                "tl.store(out_ptr + row * out_row_stride + cols, out.to(out_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="存储整个块，越过了行的末尾",
    ),
    Mutant(
        "swiglu_backward",
        "silu_derivative_is_sigmoid",
        "differentiates silu as if it were sigmoid(g) * const: drops the g * (1 - sigmoid) term",
        [("d_gate = d_out * up * sigmoid * (1.0 + gate * (1.0 - sigmoid))", "d_gate = d_out * up * sigmoid")],
        mistake_zh="把 silu 当作 sigmoid(g) * 常数求导：丢了 g * (1 - sigmoid) 项",
    ),
    Mutant(
        "swiglu_backward",
        "d_up_is_d_out_times_gate",
        "d_up = d_out * gate: forgets the activation on the gate",
        [("d_up = d_out * gate * sigmoid", "d_up = d_out * gate")],
        mistake_zh="d_up = d_out * gate：忘了门控上的激活函数",
    ),
    Mutant(
        "swiglu_backward",
        "function_returns_swapped",
        "the autograd Function returns (d_up, d_gate), the gradients in the wrong order",
        [
            (
                "return swiglu_backward(d_out.contiguous(), gate, up)",
                "return swiglu_backward(d_out.contiguous(), gate, up)[::-1]",
            )
        ],
        mistake_zh="autograd Function 返回 (d_up, d_gate)，梯度顺序反了",
    ),
    Mutant(
        "swiglu_backward",
        "no_d_gate_store_mask",
        "stores d_gate for the whole block",
        [
            (
                "d_gate.to(d_gate_ptr.dtype.element_ty), mask=mask)",
                "d_gate.to(d_gate_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="d_gate 按整块存储",
    ),
    Mutant(
        "bias_gelu",
        "erf_without_sqrt2",
        "exact GeLU as 0.5 x (1 + erf(x)): forgets to divide by sqrt(2)",
        [("tl.math.erf(x * 0.7071067811865476)", "tl.math.erf(x)")],
        mistake_zh="精确 GeLU 写成 0.5 x (1 + erf(x))：忘了除以 √2",
    ),
    Mutant(
        "bias_gelu",
        "tanh_without_cubic",
        "tanh GeLU without the 0.044715 x^3 term",
        [("u = 0.7978845608028654 * (x + 0.044715 * x * x * x)", "u = 0.7978845608028654 * x")],
        mistake_zh="tanh GeLU 没有 0.044715 x³ 项",
    ),
    Mutant(
        "bias_gelu",
        "bias_by_row",
        "indexes the bias by the row instead of the column",
        [
            (
                "x += tl.load(bias_ptr + cols, mask=mask, other=0.0)",
                "x += tl.load(bias_ptr + row + cols * 0, mask=mask, other=0.0)",
            )
        ],
        mistake_zh="按行而不是按列索引 bias",
    ),
    Mutant(
        "bias_gelu",
        "tanh_through_exp",
        "writes tanh u = (e^2u - 1) / (e^2u + 1), which is inf / inf = nan once e^2u overflows",
        [
            (
                "out = x * tl.sigmoid(2.0 * u)",
                "e2u = tl.exp(2.0 * u)\n        out = 0.5 * x * (1.0 + (e2u - 1.0) / (e2u + 1.0))",
            )
        ],
        mistake_zh="写成 tanh u = (e^2u - 1) / (e^2u + 1)，e^2u 溢出后就是 inf / inf = nan",
    ),
    Mutant(
        "bias_gelu",
        "ignores_approximate",
        "always launches the exact kernel, whatever approximate says",
        [('APPROXIMATE_TANH=approximate == "tanh"', "APPROXIMATE_TANH=False")],
        mistake_zh="不管 approximate 是什么，总是启动精确版内核",
    ),
    Mutant(
        "swiglu",
        "no_load_mask",
        "loads gate unmasked (only the store is masked), reading past the end of each row",
        [
            (
                "gate = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0)",
                "gate = tl.load(gate_ptr + row * gate_row_stride + cols)",
            )
        ],
        mistake_zh="不带掩码加载 gate（只有存储有掩码），读到每一行末尾之外",
    ),
    Mutant(
        "swiglu_backward",
        "no_load_mask",
        "loads d_out unmasked, reading past the end of each row",
        [
            (
                "d_out = tl.load(d_out_ptr + row * d_out_row_stride + cols, mask=mask, other=0.0)",
                "d_out = tl.load(d_out_ptr + row * d_out_row_stride + cols)",
            )
        ],
        mistake_zh="不带掩码加载 d_out，读到每一行末尾之外",
    ),
    Mutant(
        "bias_gelu",
        "no_bias_mask",
        "loads the bias without the column mask, reading past the end of the (N,) bias",
        [("x += tl.load(bias_ptr + cols, mask=mask, other=0.0)", "x += tl.load(bias_ptr + cols)")],
        mistake_zh="加载 bias 时没有列掩码，读到 (N,) 的 bias 末尾之外",
    ),
]
