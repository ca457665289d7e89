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
    ),
    Mutant(
        "broadcast_shape",
        "zero_treated_as_one",
        "lets a size 0 broadcast like a size 1",
        [("if other == 1:\n", "if other in (0, 1):\n")],
    ),
    Mutant(
        "broadcast_shape",
        "asks_numpy",
        "calls np.broadcast_shapes",
        [("    ndim = max(", "    return tuple(np.broadcast_shapes(*shapes))\n    ndim = max(")],
    ),
    Mutant(
        "einsum_specs",
        "output_in_head_major_layout",
        "writes the attention output in (B, H, T, D) order instead of the (B, T, H, D) the table asks for",
        [('"bhts,bhsd->bthd"', '"bhts,bhsd->bhtd"')],
    ),
    Mutant(
        "einsum_specs",
        "linear_weight_as_in_out",
        "indexes the nn.Linear weight as (d_in, d_out)",
        [('"bti,oi->bto"', '"bti,io->bto"')],
    ),
    Mutant(
        "einsum_specs",
        "trace_as_diagonal",
        "keeps the repeated letter in the output: the diagonal, not its sum",
        [('"ii->"', '"ii->i"')],
    ),
    Mutant(
        "einsum_specs",
        "scores_transposed",
        "writes the score output letters as (B, H, S, T)",
        [('"bhtd,bhsd->bhts"', '"bhtd,bhsd->bhst"')],
    ),
    Mutant(
        "einsum_specs",
        "gqa_without_groups",
        "contracts the group letter away, summing the scores of all KV groups",
        [('"bgrtd,bgsd->bgrts"', '"bgrtd,bgsd->brts"')],
    ),
    Mutant(
        "einsum_specs",
        "row_dot_full_matrix",
        "computes the whole (T, T) matrix a @ b.T instead of its diagonal",
        [('"td,td->t"', '"td,sd->ts"')],
    ),
    Mutant(
        "einsum_specs",
        "implicit_output",
        "leaves out '->' and the output (implicit mode), which happens to give the right batched matmul",
        [('"bmk,bkn->bmn"', '"bmk,bkn"')],
    ),
    Mutant(
        "attention_numpy",
        "no_scale",
        "forgets the 1/sqrt(D) scale",
        [(" / np.sqrt(D).astype(q.dtype)", "")],
    ),
    Mutant(
        "attention_numpy",
        "softmax_over_queries",
        "normalises over the query axis instead of the keys",
        [
            ("scores - scores.max(axis=-1, keepdims=True)", "scores - scores.max(axis=-2, keepdims=True)"),
            ("weights /= weights.sum(axis=-1, keepdims=True)", "weights /= weights.sum(axis=-2, keepdims=True)"),
        ],
    ),
    Mutant(
        "attention_numpy",
        "mask_multiplied",
        "multiplies the scores by the mask (a masked score becomes 0, which still gets weight exp(0))",
        [("scores = np.where(mask, scores, -np.inf)", "scores = scores * mask")],
    ),
    Mutant(
        "attention_numpy",
        "mask_inverted",
        "reads True as 'masked out'",
        [("scores = np.where(mask, scores, -np.inf)", "scores = np.where(mask, -np.inf, scores)")],
    ),
    Mutant(
        "attention_numpy",
        "float64_output",
        "returns float64 for float32 inputs (a NumPy float64 scalar promoted the array)",
        [(".astype(q.dtype)  # (B, H, T, D)", "  # (B, H, T, D)"), ("np.sqrt(D).astype(q.dtype)", "np.sqrt(D)")],
    ),
    Mutant(
        "attention_numpy",
        "no_shape_validation",
        "does not check k and v against q",
        [("    if k.shape != (B, H, S, D) or v.shape != (B, H, S, D):\n", "    if False:\n")],
    ),
]
