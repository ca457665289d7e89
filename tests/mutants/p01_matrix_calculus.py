"""Realistic wrong versions of the p01.matrix_calculus solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "unbroadcast",
        "leading_dims_kept",
        "forgets to sum over the leading dims the input does not have",
        [("grad = grad.sum(dim=tuple(range(extra)))", "pass")],
    ),
    Mutant(
        "unbroadcast",
        "keepdim_lost",
        "sums the stretched size-1 dims without keepdim (shape (3,) instead of (3, 1))",
        [("grad = grad.sum(dim=stretched, keepdim=True)", "grad = grad.sum(dim=stretched)")],
    ),
    Mutant(
        "unbroadcast",
        "empty_dim_sums_everything",
        "calls grad.sum(dim=()) when there are no leading dims, which sums over every dim",
        [("if extra:  # careful", "if True:  # careful")],
    ),
    Mutant(
        "reduction_vjp",
        "mean_without_count",
        "gives mean the backward of sum (no division by the number of elements)",
        [("return grad_out.expand_as(x) / count", "return grad_out.expand_as(x)")],
    ),
    Mutant(
        "reduction_vjp",
        "ties_get_everything",
        "every tied maximum receives the full gradient",
        [("return winners * grad_out / winners.sum(dim=dims, keepdim=True)", "return winners * grad_out")],
    ),
    Mutant(
        "reduction_vjp",
        "reduced_dims_not_restored",
        "broadcasts grad_out without putting the reduced dims back when keepdim=False",
        [("if not keepdim:", "if False:")],
    ),
    Mutant(
        "matmul_vjp",
        "batch_not_reduced",
        "returns the gradients in the broadcast batch shape (a shared weight gets one gradient per batch element)",
        [("return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)", "return grad_a, grad_b")],
    ),
    Mutant(
        "matmul_vjp",
        "operands_swapped",
        "grad_b = grad_out^T @ a: the transpose of the right answer, which has the right shape when K == N",
        [("grad_b = a.transpose(-1, -2) @ grad_out", "grad_b = grad_out.transpose(-1, -2) @ a")],
    ),
    Mutant(
        "matmul_vjp",
        "no_transpose",
        "grad_b = a @ grad_out without transposing a (only square shapes line up)",
        [("grad_b = a.transpose(-1, -2) @ grad_out", "grad_b = a @ grad_out")],
    ),
    Mutant(
        "softmax_vjp",
        "no_y_factor",
        "forgets the factor y outside the bracket",
        [("return y * (grad_out - inner)", "return grad_out - inner")],
    ),
    Mutant(
        "softmax_vjp",
        "no_inner_product",
        "uses the diagonal of the Jacobian only: y * grad_out",
        [("return y * (grad_out - inner)", "return y * grad_out")],
    ),
    Mutant(
        "softmax_vjp",
        "inner_over_all",
        "takes the inner product over the whole tensor instead of per softmax row",
        [("inner = (grad_out * y).sum(dim=dim, keepdim=True)", "inner = (grad_out * y).sum()")],
    ),
    Mutant(
        "jacobian",
        "forward_transposed",
        "stacks the JVP columns as rows",
        [("return torch.stack(columns, dim=1)", "return torch.stack(columns, dim=0)")],
    ),
    Mutant(
        "jacobian",
        "reverse_transposed",
        "stacks the VJP rows as columns",
        [("return torch.stack(rows, dim=0)", "return torch.stack(rows, dim=1)")],
    ),
    Mutant(
        "unbroadcast",
        "calls_sum_to_size",
        "hands the work to Tensor.sum_to_size, the builtin this exercise asks you to write",
        [
            ("if extra:  # careful", "if True:  # careful"),
            ("grad = grad.sum(dim=tuple(range(extra)))", "return grad.sum_to_size(shape)"),
        ],
    ),
    Mutant(
        "softmax_vjp",
        "calls_softmax_backward",
        "calls PyTorch's fused softmax backward instead of writing the formula",
        [("return y * (grad_out - inner)", "return torch._softmax_backward_data(grad_out, y, dim, y.dtype)")],
    ),
    Mutant(
        "jacobian",
        "calls_jacrev",
        "calls torch.func.jacrev for the reverse mode instead of looping over VJPs",
        [("y, vjp_fn = torch.func.vjp(f, x)", "return torch.func.jacrev(f)(x)")],
    ),
]
