"""Realistic wrong versions of the p00.numpy_einsum solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "broadcast_shape",
        "max_without_check",
        "takes the largest size at each position without checking that the others are 1 or equal",
        [
            (
                "if size != 1 and size != other:\n",
                "if False:\n",
            ),
            ("size = other\n", "size = max(size, other)\n"),
        ],
        mistake_zh="每个位置取最大的尺寸，却不检查其余的是否为 1 或相等",
    ),
    Mutant(
        "broadcast_shape",
        "aligned_on_the_left",
        "aligns the shapes on the left (pads the shorter one on the right)",
        [
            (
                "other = shape[position] if len(shape) >= -position else 1",
                "other = shape[ndim + position] if len(shape) > ndim + position else 1",
            )
        ],
        mistake_zh="形状左对齐（在较短形状的右侧补齐）",
    ),
    Mutant(
        "broadcast_shape",
        "zero_treated_as_one",
        "lets a size 0 broadcast like a size 1",
        [("if other == 1:\n", "if other in (0, 1):\n")],
        mistake_zh="让尺寸 0 像尺寸 1 一样广播",
    ),
    Mutant(
        "broadcast_shape",
        "asks_numpy",
        "calls np.broadcast_shapes",
        [("    ndim = max(", "    return tuple(np.broadcast_shapes(*shapes))\n    ndim = max(")],
        mistake_zh="调用 np.broadcast_shapes",
    ),
    Mutant(
        "einsum_specs",
        "output_in_head_major_layout",
        "writes the attention output in (B, H, T, D) order instead of the (B, T, H, D) the table asks for",
        [('"bhts,bhsd->bthd"', '"bhts,bhsd->bhtd"')],
        mistake_zh="注意力输出按 (B, H, T, D) 而不是表中要求的 (B, T, H, D) 排列",
    ),
    Mutant(
        "einsum_specs",
        "linear_weight_as_in_out",
        "indexes the nn.Linear weight as (d_in, d_out)",
        [('"bti,oi->bto"', '"bti,io->bto"')],
        mistake_zh="把 nn.Linear 的权重按 (d_in, d_out) 索引",
    ),
    Mutant(
        "einsum_specs",
        "trace_as_diagonal",
        "keeps the repeated letter in the output: the diagonal, not its sum",
        [('"ii->"', '"ii->i"')],
        mistake_zh="输出里保留了重复的字母：得到对角线，而不是它的和",
    ),
    Mutant(
        "einsum_specs",
        "scores_transposed",
        "writes the score output letters as (B, H, S, T)",
        [('"bhtd,bhsd->bhts"', '"bhtd,bhsd->bhst"')],
        mistake_zh="分数的输出字母写成 (B, H, S, T)",
    ),
    Mutant(
        "einsum_specs",
        "gqa_without_groups",
        "contracts the group letter away, summing the scores of all KV groups",
        [('"bgrtd,bgsd->bgrts"', '"bgrtd,bgsd->brts"')],
        mistake_zh="把组字母缩并掉了，所有 KV 组的分数被加在一起",
    ),
    Mutant(
        "einsum_specs",
        "row_dot_full_matrix",
        "computes the whole (T, T) matrix a @ b.T instead of its diagonal",
        [('"td,td->t"', '"td,sd->ts"')],
        mistake_zh="算出整个 (T, T) 矩阵 a @ b.T，而不是只取它的对角线",
    ),
    Mutant(
        "einsum_specs",
        "implicit_output",
        "leaves out '->' and the output (implicit mode), which happens to give the right batched matmul",
        [('"bmk,bkn->bmn"', '"bmk,bkn"')],
        mistake_zh="省略 '->' 和输出（隐式模式），恰好得到正确的批量矩阵乘",
    ),
    Mutant(
        "attention_numpy",
        "no_scale",
        "forgets the 1/sqrt(D) scale",
        [(" / np.sqrt(D).astype(q.dtype)", "")],
        mistake_zh="忘记 1/√D 缩放",
    ),
    Mutant(
        "attention_numpy",
        "softmax_over_queries",
        "normalises over the query axis instead of the keys",
        [
            ("scores - scores.max(axis=-1, keepdims=True)", "scores - scores.max(axis=-2, keepdims=True)"),
            ("weights /= weights.sum(axis=-1, keepdims=True)", "weights /= weights.sum(axis=-2, keepdims=True)"),
        ],
        mistake_zh="沿 query 轴而不是 key 轴归一化",
    ),
    Mutant(
        "attention_numpy",
        "mask_multiplied",
        "multiplies the scores by the mask (a masked score becomes 0, which still gets weight exp(0))",
        [("scores = np.where(mask, scores, -np.inf)", "scores = scores * mask")],
        mistake_zh="把分数乘以掩码（被屏蔽的分数变成 0，仍然得到 exp(0) 的权重）",
    ),
    Mutant(
        "attention_numpy",
        "mask_inverted",
        "reads True as 'masked out'",
        [("scores = np.where(mask, scores, -np.inf)", "scores = np.where(mask, -np.inf, scores)")],
        mistake_zh="把 True 理解为“屏蔽掉”",
    ),
    Mutant(
        "attention_numpy",
        "float64_output",
        "returns float64 for float32 inputs (a NumPy float64 scalar promoted the array)",
        [(".astype(q.dtype)  # (B, H, T, D)", "  # (B, H, T, D)"), ("np.sqrt(D).astype(q.dtype)", "np.sqrt(D)")],
        mistake_zh="float32 输入却返回 float64（一个 NumPy float64 标量把数组提升了类型）",
    ),
    Mutant(
        "attention_numpy",
        "no_shape_validation",
        "does not check k and v against q",
        [("    if k.shape != (B, H, S, D) or v.shape != (B, H, S, D):\n", "    if False:\n")],
        mistake_zh="不检查 k 和 v 与 q 是否匹配",
    ),
]
