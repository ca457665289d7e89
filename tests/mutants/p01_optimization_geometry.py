"""Realistic wrong versions of the p01.optimization_geometry solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "gradient_descent",
        "ascent",
        "takes the gradient with the wrong sign (b - A x): gradient ascent",
        [("x = x - lr * (A @ x - b)", "x = x - lr * (b - A @ x)")],
        mistake_zh="梯度符号取反（b - A x）：成了梯度上升",
    ),
    Mutant(
        "gradient_descent",
        "gradient_without_b",
        "uses A x as the gradient, forgetting -b (converges to 0 instead of x*)",
        [("x = x - lr * (A @ x - b)", "x = x - lr * (A @ x)")],
        mistake_zh="把 A x 当梯度，忘了 -b（收敛到 0 而不是 x*）",
    ),
    Mutant(
        "gradient_descent",
        "x0_missing",
        "returns the iterates after x0 only",
        [("iterates = [x0.clone()]", "iterates = []")],
        mistake_zh="只返回 x0 之后的迭代点",
    ),
    Mutant(
        "step_size_limits",
        "limit_from_smallest",
        "takes 2 / smallest eigenvalue as the stability limit",
        [('"lr_max": 2 / largest', '"lr_max": 2 / smallest')],
        mistake_zh="把 2 / 最小特征值当作稳定上限",
    ),
    Mutant(
        "step_size_limits",
        "limit_one_over",
        "takes 1 / largest eigenvalue as the limit (safe, but not where divergence starts)",
        [('"lr_max": 2 / largest', '"lr_max": 1 / largest')],
        mistake_zh="把 1 / 最大特征值当作上限（安全，但不是开始发散的地方）",
    ),
    Mutant(
        "step_size_limits",
        "rate_at_one_over_lmax",
        "gives the rate 1 - 1/kappa of the step 1/l_max instead of the rate at lr_best",
        [('"rate": (kappa - 1) / (kappa + 1)', '"rate": 1 - 1 / kappa')],
        mistake_zh="给出步长 1/l_max 的收敛率 1 - 1/kappa，而不是 lr_best 下的收敛率",
    ),
    Mutant(
        "constrained_minimum",
        "lambda_sign",
        "solves with -C^T in the upper right block: the multipliers come out with the wrong sign",
        [("kkt[:n, n:] = C.T", "kkt[:n, n:] = -C.T")],
        mistake_zh="右上块用 -C^T 求解：乘子的符号反了",
    ),
    Mutant(
        "constrained_minimum",
        "rhs_sign",
        "puts -b in the right-hand side",
        [("torch.cat([b, d])", "torch.cat([-b, d])")],
        mistake_zh="右端项放了 -b",
    ),
    Mutant(
        "constrained_minimum",
        "constraints_ignored",
        "drops the constraint rows: the unconstrained minimum with lam = 0",
        [("kkt[n:, :n] = C", "kkt[n:, n:] = torch.eye(m, dtype=A.dtype)")],
        mistake_zh="丢掉约束行：得到无约束极小值且 lam = 0",
    ),
]
