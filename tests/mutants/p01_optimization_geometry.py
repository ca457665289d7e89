"""Realistic wrong versions of the p01.optimization_geometry solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "gradient_descent",
        "ascent",
        "takes the gradient with the wrong sign (b - A x): gradient ascent",
        [("x = x - lr * (A @ x - b)", "x = x - lr * (b - A @ x)")],
    ),
    Mutant(
        "gradient_descent",
        "gradient_without_b",
        "uses A x as the gradient, forgetting -b (converges to 0 instead of x*)",
        [("x = x - lr * (A @ x - b)", "x = x - lr * (A @ x)")],
    ),
    Mutant(
        "gradient_descent",
        "x0_missing",
        "returns the iterates after x0 only",
        [("iterates = [x0.clone()]", "iterates = []")],
    ),
    Mutant(
        "step_size_limits",
        "limit_from_smallest",
        "takes 2 / smallest eigenvalue as the stability limit",
        [('"lr_max": 2 / largest', '"lr_max": 2 / smallest')],
    ),
    Mutant(
        "step_size_limits",
        "limit_one_over",
        "takes 1 / largest eigenvalue as the limit (safe, but not where divergence starts)",
        [('"lr_max": 2 / largest', '"lr_max": 1 / largest')],
    ),
    Mutant(
        "step_size_limits",
        "rate_at_one_over_lmax",
        "gives the rate 1 - 1/kappa of the step 1/l_max instead of the rate at lr_best",
        [('"rate": (kappa - 1) / (kappa + 1)', '"rate": 1 - 1 / kappa')],
    ),
    Mutant(
        "constrained_minimum",
        "lambda_sign",
        "solves with -C^T in the upper right block: the multipliers come out with the wrong sign",
        [("kkt[:n, n:] = C.T", "kkt[:n, n:] = -C.T")],
    ),
    Mutant(
        "constrained_minimum",
        "rhs_sign",
        "puts -b in the right-hand side",
        [("torch.cat([b, d])", "torch.cat([-b, d])")],
    ),
    Mutant(
        "constrained_minimum",
        "constraints_ignored",
        "drops the constraint rows: the unconstrained minimum with lam = 0",
        [("kkt[n:, :n] = C", "kkt[n:, n:] = torch.eye(m, dtype=A.dtype)")],
    ),
]
