"""Source of 01_Hardware_Math_Systems/02_Optimization_Geometry.ipynb (build with
`python -m llm_algo build p01.optimization_geometry`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.optimization_geometry",
        path="01_Hardware_Math_Systems/02_Optimization_Geometry.ipynb",
        title_en="Taylor, gradient descent, Lagrange",
        title_zh="泰勒展开、梯度下降与拉格朗日乘子",
        difficulty="medium",
        device="cpu",
        minutes=55,
        prerequisites=["p01.matrix_calculus"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 在极小值附近，损失的二阶泰勒展开 (Taylor expansion) 是二次函数 $f(x) \approx \tfrac12 x^\top A x - b^\top x$，
          $A$ 是 Hessian（海森矩阵）：梯度下降在这里的行为就是它在真实网络局部的行为。
        - 梯度下降 $x_{k+1} = x_k - \eta (A x_k - b)$：误差按 $(I - \eta A)^k$ 衰减，沿每个特征方向乘以 $1 - \eta\lambda_i$。
        - 稳定的条件 $\eta < 2/\lambda_{\max}$；最优固定步长 $\eta^* = 2/(\lambda_{\min} + \lambda_{\max})$，
          每步收缩 $(\kappa - 1)/(\kappa + 1)$，$\kappa = \lambda_{\max}/\lambda_{\min}$ 是条件数 (condition number)。
        - 条件数大 ⇒ 步长被最陡的方向限制，平缓方向几乎不动：这就是 Adam、归一化、预条件 (preconditioning) 要解决的问题。
        - 等式约束 $Cx = d$：拉格朗日乘子 (Lagrange multiplier) 把问题变成 KKT 线性方程组，$\nabla f = -C^\top \lambda$。
        {易错点}

        Training diverges when the learning rate is too large, and crawls when it is too small, and the boundary is
        not a matter of taste: Cohen et al. (2021, *Gradient Descent on Neural Networks Typically Occurs at the Edge of
        Stability*, arXiv:2103.00065) measured that full-batch gradient descent drives the largest Hessian eigenvalue of
        the loss up to $2/\eta$ and keeps it there, exactly the stability limit of a quadratic that this lesson derives.
        The quadratic is the local picture of every loss: what holds for it (step size against curvature, speed against
        condition number) is what learning-rate warmup, Adam's per-coordinate scaling and normalisation layers are about.

        **You will implement** gradient descent on a quadratic, the step-size limits and convergence rate from its
        Hessian's spectrum, and the minimum of a quadratic under linear equality constraints from the KKT system.
        **Graded against** the closed form $(I - \eta A)^k$ through an eigendecomposition, runs of gradient descent
        that must diverge or converge where your limits say, the measured contraction per step, and a null-space
        solution of the constrained problem, with the KKT conditions checked on your answer.
    """
    )
    lesson.md(r"""
        ## 1. Taylor: every minimum looks like a quadratic

        Around a point $x_0$, with gradient $g = \nabla f(x_0)$ and Hessian $H = \nabla^2 f(x_0)$ (symmetric,
        $n \times n$):

        $$
        f(x_0 + \delta) = f(x_0) + g^\top \delta + \tfrac12 \delta^\top H \delta + O(\|\delta\|^3).
        $$

        Near a minimum, $g \approx 0$ and $H$ is positive semi-definite, so the loss *is* a quadratic bowl up to third
        order. We study $f(x) = \tfrac12 x^\top A x - b^\top x$ with $A$ symmetric positive definite: $\nabla f(x) = Ax - b$,
        the minimum $x^* = A^{-1} b$, and $\nabla^2 f = A$ everywhere.

        ## 2. Gradient descent on the quadratic

        $x_{k+1} = x_k - \eta (A x_k - b)$. Subtract $x^*$ (using $A x^* = b$): the error $e_k = x_k - x^*$ obeys

        $$
        e_{k+1} = (I - \eta A)\, e_k \qquad\Rightarrow\qquad e_k = (I - \eta A)^k e_0 .
        $$

        Write $A = Q \Lambda Q^\top$ (eigenvalues $\lambda_1 \le \dots \le \lambda_n$, orthonormal eigenvectors in
        $Q$). In the eigenbasis each coordinate of the error is multiplied by $1 - \eta\lambda_i$ at every step,
        independently of the others.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.exercise(
        "gradient_descent",
        r'''
        def gradient_descent(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
            """Iterates of x <- x - lr * grad f(x) for f(x) = 0.5 x^T A x - b^T x.

            A: (n, n) symmetric, b and x0: (n,). Returns (steps + 1, n): x0 first. ValueError for a non-square A,
            mismatched sizes, lr <= 0 or steps < 0."""
            # TODO: validate the arguments
            # TODO: the gradient of the quadratic, by its formula (no autograd)
            ### BEGIN SOLUTION
            n = x0.shape[0]
            if A.shape != (n, n) or b.shape != (n,) or lr <= 0 or steps < 0:
                raise ValueError(f"need A (n, n), b and x0 (n,), lr > 0, steps >= 0; got {tuple(A.shape)}, "
                                 f"{tuple(b.shape)}, {tuple(x0.shape)}, lr={lr}, steps={steps}")
            iterates = [x0.clone()]
            x = x0.clone()
            for _ in range(steps):
                x = x - lr * (A @ x - b)  # grad f(x) = A x - b
                iterates.append(x)
            return torch.stack(iterates)  # (steps + 1, n)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Step size and condition number

        Every factor must be below 1 in absolute value for the error to shrink: $|1 - \eta \lambda_i| < 1$ for all $i$,
        that is

        $$
        0 < \eta < \frac{2}{\lambda_{\max}} .
        $$

        The *largest* curvature sets the limit. The slowest direction then decides the speed: the error shrinks per
        step by $\rho(\eta) = \max_i |1 - \eta\lambda_i| = \max(|1 - \eta\lambda_{\min}|, |1 - \eta\lambda_{\max}|)$,
        smallest when the two balance, $1 - \eta\lambda_{\min} = \eta\lambda_{\max} - 1$:

        $$
        \eta^* = \frac{2}{\lambda_{\min} + \lambda_{\max}}, \qquad
        \rho^* = \frac{\lambda_{\max} - \lambda_{\min}}{\lambda_{\max} + \lambda_{\min}} = \frac{\kappa - 1}{\kappa + 1},
        \qquad \kappa = \frac{\lambda_{\max}}{\lambda_{\min}}.
        $$

        With $\kappa = 100$, $\rho^* = 0.980$: about 115 steps per decimal digit of accuracy ($\ln 10 / -\ln\rho^*$); with
        $\kappa = 10^4$, 11 500. Hessians of neural networks have $\kappa$ in the thousands and beyond (their spectra
        have a few large outliers, Ghorbani et al., 2019, arXiv:1901.10159), which is why plain gradient descent is
        slow and why preconditioners (Adam's per-coordinate $1/\sqrt{v}$, Shampoo, K-FAC) try to make $\kappa$ small.
    """)
    lesson.exercise(
        "step_size_limits",
        r'''
        def step_size_limits(A: torch.Tensor) -> dict[str, float]:
            """For f(x) = 0.5 x^T A x - b^T x with A symmetric positive definite (n, n), Python floats:
            "condition_number" kappa, "lr_max" (gradient descent diverges at and above it), "lr_best" (the fastest
            fixed step), "rate" (the error's contraction per step at lr_best), computed in float64 whatever A's
            dtype. ValueError if A is not square and symmetric, or not positive definite."""
            # TODO: refuse what is not symmetric positive definite
            # TODO: the extreme eigenvalues, then section 3's formulas
            ### BEGIN SOLUTION
            if A.dim() != 2 or A.shape[0] != A.shape[1] or not torch.allclose(A, A.T):
                raise ValueError(f"A must be a symmetric square matrix, got shape {tuple(A.shape)}")
            eigenvalues = torch.linalg.eigvalsh(A.double())  # ascending
            smallest, largest = eigenvalues[0].item(), eigenvalues[-1].item()
            if smallest <= 0:
                raise ValueError(f"A must be positive definite; its smallest eigenvalue is {smallest:.3g}")
            kappa = largest / smallest
            return {
                "condition_number": kappa,
                "lr_max": 2 / largest,
                "lr_best": 2 / (smallest + largest),
                "rate": (kappa - 1) / (kappa + 1),
            }
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What the condition number does to a trajectory

        $A = \operatorname{diag}(1, \kappa)$ with $\kappa = 20$, from the same start: a small step crawls along the flat
        direction, $\eta^*$ is the best compromise (with $\kappa = 20$ it is already 95% of the limit), a step just
        under $2/\lambda_{\max}$ zig-zags across the steep direction and barely shrinks there, and just over it diverges.
    """)
    lesson.code(r"""
        kappa = 20.0
        A = torch.diag(torch.tensor([1.0, kappa], dtype=torch.float64))
        b = torch.zeros(2, dtype=torch.float64)
        x0 = torch.tensor([-4.0, 1.0], dtype=torch.float64)
        best, limit = 2 / (1 + kappa), 2 / kappa
        runs = {"0.2 lr*": 0.2 * best, "lr* = 2/(l_min + l_max)": best, "0.99 * 2/l_max": 0.99 * limit,
                "1.05 * 2/l_max": 1.05 * limit}
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        grid = torch.linspace(-4.5, 4.5, 200, dtype=torch.float64)
        X, Y = torch.meshgrid(grid, grid * 0.4, indexing="xy")
        left.contour(X, Y, 0.5 * (X**2 + kappa * Y**2), levels=12, colors="lightgray")
        for name, lr in runs.items():
            try:
                path, who = gradient_descent(A, b, x0, lr, 40), "yours"
            except NotImplementedError:
                path, who = torch.stack([(1 - lr * torch.diag(A)) ** k * x0 for k in range(41)]), "closed form"
            shown = path[: 15 if "1.05" in name else 41]
            left.plot(shown[:, 0], shown[:, 1].clamp(-1.8, 1.8), ".-", ms=3, label=name)
            right.semilogy((path.norm(dim=1) + 1e-300).tolist(), label=name)
        left.set_title(f"gradient descent on diag(1, {kappa:g}) ({who})"); left.legend(fontsize=7)
        right.set_xlabel("step"); right.set_ylabel("|x_k - x*|"); right.set_title("error per step"); right.legend(fontsize=7)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Constraints: Lagrange multipliers and the KKT system

        Minimise $f(x) = \tfrac12 x^\top A x - b^\top x$ subject to $m$ linear equations $Cx = d$, $C: (m, n)$ of
        full row rank $m < n$. At the constrained minimum the gradient cannot have a component along the feasible
        directions (the null space of $C$), so it is a combination of the constraint normals, the rows of $C$:
        $\nabla f(x) = -C^\top \lambda$ for some $\lambda \in \mathbb{R}^m$, the Lagrange multipliers. These are the
        stationarity conditions of the Lagrangian $L(x, \lambda) = f(x) + \lambda^\top (Cx - d)$; with the constraints
        themselves, one linear system (the KKT system, after Karush, Kuhn and Tucker):

        $$
        \begin{bmatrix} A & C^\top \\ C & 0 \end{bmatrix}
        \begin{bmatrix} x \\ \lambda \end{bmatrix}
        =
        \begin{bmatrix} b \\ d \end{bmatrix},
        \qquad (n + m) \times (n + m).
        $$

        $\lambda_j$ is also a price: how fast the optimal value changes when $d_j$ moves ($\partial f^*/\partial d_j =
        -\lambda_j$). In LLM training the same structure appears in constrained decoding, in the dual of
        DPO-style KL-constrained objectives, and in every projection onto a constraint set.
    """)
    lesson.exercise(
        "constrained_minimum",
        r'''
        def constrained_minimum(A: torch.Tensor, b: torch.Tensor, C: torch.Tensor,
                                d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """(x, lam) minimising 0.5 x^T A x - b^T x subject to C x = d, with grad f(x) = -C^T lam.

            A: (n, n) symmetric positive definite, b: (n,), C: (m, n), d: (m,). ValueError for mismatched shapes."""
            # TODO: validate the shapes
            # TODO: build the KKT matrix and right-hand side, solve, split into x and lam
            ### BEGIN SOLUTION
            n, m = b.shape[0], d.shape[0]
            if A.shape != (n, n) or b.shape != (n,) or C.shape != (m, n) or d.shape != (m,):
                raise ValueError(f"shapes do not fit: A {tuple(A.shape)}, b {tuple(b.shape)}, C {tuple(C.shape)}, "
                                 f"d {tuple(d.shape)}")
            kkt = torch.zeros(n + m, n + m, dtype=A.dtype)
            kkt[:n, :n] = A
            kkt[:n, n:] = C.T
            kkt[n:, :n] = C
            solution = torch.linalg.solve(kkt, torch.cat([b, d]))
            return solution[:n], solution[n:]
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`gradient_descent`.** One line of algebra per step. The usual mistakes: *the gradient with the
        wrong sign* ($b - Ax$: ascent), *the gradient $Ax$ without $-b$* (converges, to 0 instead of $x^*$), and *the
        list of iterates without $x_0$*. With a fixed learning rate on a quadratic this is also what `torch.optim.SGD`
        does; momentum changes the recurrence to two terms and the optimal rate to $(\sqrt\kappa - 1)/(\sqrt\kappa + 1)$
        (heavy ball, Polyak 1964), the reason momentum matters most when $\kappa$ is large.

        **`step_size_limits`.** `eigvalsh` exploits symmetry and returns sorted eigenvalues. The mistakes: *$2/\lambda_{\min}$
        as the limit* (diverges along the steepest direction), *$1/\lambda_{\max}$* (safe, but not the limit: the
        divergence check tells), and *the rate $1 - 1/\kappa$* (the rate at $\eta = 1/\lambda_{\max}$, not at $\eta^*$).
        In practice nobody computes the spectrum of a 10⁹-parameter Hessian; $\lambda_{\max}$ is estimated by power
        iteration on Hessian-vector products (`torch.func.jvp` of a gradient, `p01.matrix_calculus`), and learning-rate
        warmup keeps $\eta$ under $2/\lambda_{\max}$ while the early, sharp curvature settles.

        **`constrained_minimum`.** The KKT matrix is symmetric but indefinite, so `torch.linalg.solve` (LU) rather
        than a Cholesky factorisation. The mistakes: *$C$ instead of $C^\top$ in the upper right block* (a shape
        error unless $m = n$), *the sign of $\lambda$ flipped* (the check tests the stationarity condition as stated),
        and *$b$ with the wrong sign in the right-hand side*. Large problems eliminate instead: the null-space method
        the check uses, or projected gradient descent, which alternates a gradient step and a projection onto $Cx = d$.
    """)
    lesson.mistakes()
    return lesson
