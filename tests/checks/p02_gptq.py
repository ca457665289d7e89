"""Checks for p02.gptq. References: the OBS closed form as a constrained least-squares (KKT) system solved with
`torch.linalg.solve` in float64 and the output error ||delta X||^2 it stands for; 2 X X^T / n computed at once in
float64; the brute-force sequential OBS algorithm (explicit inverse of the damped Hessian, rank-1 downdates after
each column, no Cholesky, no blocks) in float64; the output error of round-to-nearest on correlated inputs."""

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error

checks = Checks("p02.gptq")


# ------------------------------------------------------------------------------------------ helpers


def spec_find_params(w: torch.Tensor, bits: int):
    """float64 grid per row, written out: [min(lo, 0), max(hi, 0)] in 2**bits - 1 steps, integer zero point."""
    rows = []
    for row in w.double():
        lo, hi = min(float(row.min()), 0.0), max(float(row.max()), 0.0)
        step = (hi - lo) / (2**bits - 1) if hi > lo else 1.0
        rows.append((step, float(round(-lo / step))))
    scale = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    zero = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    return scale, zero


def spec_round(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    codes = torch.clamp(torch.round(w / scale) + zero, 0, 2**bits - 1)
    return (codes - zero) * scale


def spec_gptq(W, H, bits, group_size=None, act_order=False, damp=0.01) -> torch.Tensor:
    """Sequential OBS in float64: explicit inverse, one rank-1 downdate per quantised column."""
    W, H = W.double().clone(), H.double().clone()
    N, K = W.shape
    for k in range(K):
        if H[k, k] == 0:
            H[k, k] = 1.0
            W[:, k] = 0.0
    order = list(range(K))
    if act_order:
        order = sorted(range(K), key=lambda k: -float(H[k, k]))  # stable: ties keep the natural order
    W, H = W[:, order], H[order][:, order]
    H = H + damp * float(H.diagonal().mean()) * torch.eye(K, dtype=torch.float64)
    H_inv = torch.linalg.inv(H)
    if group_size is None:
        scale, zero = spec_find_params(W, bits)
    W_hat = torch.zeros_like(W)
    for i in range(K):
        if group_size is not None and i % group_size == 0:
            scale, zero = spec_find_params(W[:, i : i + group_size], bits)
        target = spec_round(W[:, i], scale, zero, bits)
        W_hat[:, i] = target
        W = W - ((W[:, i] - target) / H_inv[i, i])[:, None] * H_inv[i][None, :]
        H_inv = H_inv - H_inv[:, i : i + 1] @ H_inv[i : i + 1, :] / H_inv[i, i]
    out = torch.empty_like(W_hat)
    out[:, order] = W_hat
    return out


def correlated_inputs(K: int, n: int, rank: int = 4, outliers: int = 2) -> torch.Tensor:
    """(K, n) float64 activations: a low-rank part, noise, a few large features."""
    X = torch.randn(K, rank, dtype=torch.float64) @ torch.randn(rank, n, dtype=torch.float64)
    X += 0.1 * torch.randn(K, n, dtype=torch.float64)
    X[torch.randperm(K)[:outliers]] *= 5.0
    return X


def hessian_of(X: torch.Tensor) -> torch.Tensor:
    return 2 * X @ X.T / X.shape[1]


HINT_GPTQ = (
    "damp H by 0.01 * mean(diag H); U = upper Cholesky factor of H^-1; for column i: e = (w - quant(w)) / U[i, i], "
    "then the later columns -= e * U[i, later]; after each block, W[:, i2:] -= E @ U[i1:i2, i2:]"
)


def compare_with_spec(ex, W, H, label, **kwargs):
    spec_kwargs = {k: v for k, v in kwargs.items() if k != "block_size"}
    got = ex.gptq_quantize(W, H, **kwargs)
    expect_tensor(got, shape=W.shape, dtype=torch.float64, input=label, what="W_hat")
    want = spec_gptq(W, H, **spec_kwargs)
    expect_close(got, want, input=label, what="W_hat", hint=HINT_GPTQ)


# ------------------------------------------------------------------------------------------ obs_step


def kkt_step(w_row: torch.Tensor, H: torch.Tensor, index: int, target: float):
    """min 1/2 d^T H d subject to d[index] = target - w[index], by solving the KKT system."""
    K = H.shape[0]
    system = torch.zeros(K + 1, K + 1, dtype=torch.float64)
    system[:K, :K] = H
    system[:K, K] = system[K, :K] = 0.0
    system[index, K] = system[K, index] = 1.0
    rhs = torch.zeros(K + 1, dtype=torch.float64)
    rhs[K] = target - w_row[index]
    d = torch.linalg.solve(system, rhs)[:K]
    return w_row + d, 0.5 * d @ H @ d


@checks("obs_step")
def hand_checkable_diagonal(ex):
    """diagonal H^-1: OBS moves nothing but the fixed weight, and the loss is (w_q - t)^2 / (2 [H^-1]_qq)"""
    w = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    H_inv = torch.diag(torch.tensor([0.5, 2.0, 4.0], dtype=torch.float64))
    w_new, loss = ex.obs_step(w, H_inv, 1, torch.tensor([1.5], dtype=torch.float64))
    label = "w=[[1, 2, 3]], H_inv=diag(0.5, 2, 4), index=1, target=[1.5]"
    expect_close(
        w_new,
        torch.tensor([[1.0, 1.5, 3.0]], dtype=torch.float64),
        input=label,
        what="w_new",
        hint="uncorrelated inputs: nothing can compensate, only w[:, q] changes",
    )
    expect_close(
        loss,
        torch.tensor([0.0625], dtype=torch.float64),
        input=label,
        what="loss",
        hint="loss = (w_q - target)^2 / (2 * H_inv[q, q]) = 0.25 / 4",
    )


@checks("obs_step")
def matches_constrained_least_squares(ex):
    """random SPD Hessians: w_new and loss equal the KKT solution of min 1/2 d^T H d with d_q fixed, all rows"""
    for N, K, index in [(1, 2, 0), (4, 7, 6), (3, 12, 5)]:
        X = correlated_inputs(K, 40, rank=3, outliers=1)
        H = hessian_of(X) + 0.01 * torch.eye(K, dtype=torch.float64)
        H_inv = torch.linalg.inv(H)
        w = torch.randn(N, K, dtype=torch.float64)
        target = torch.round(w[:, index] * 4) / 4
        w_before = w.clone()
        w_new, loss = ex.obs_step(w, H_inv, index, target)
        label = describe(w=w, H_inv=H_inv) + f", index={index}"
        expect(
            bool(torch.equal(w, w_before)),
            "obs_step modified its input w",
            input=label,
            expected="w unchanged",
            got="w changed in place",
            hint="compute w_new = w - ..., not w -= ...",
        )
        expect_tensor(w_new, shape=(N, K), dtype=torch.float64, input=label, what="w_new")
        expect_tensor(loss, shape=(N,), dtype=torch.float64, input=label, what="loss")
        want = [kkt_step(w[r], H, index, float(target[r])) for r in range(N)]
        expect_close(
            w_new,
            torch.stack([x for x, _ in want]),
            input=label,
            what="w_new",
            hint="delta = -(w_q - target) / H_inv[q, q] * H_inv[:, q] (the inverse, not H)",
        )
        expect_close(
            loss,
            torch.stack([e for _, e in want]),
            input=label,
            what="loss",
            hint="loss = (w_q - target)^2 / (2 * H_inv[q, q])",
        )
        expect(
            bool(torch.equal(w_new[:, index], target)),
            "w_new[:, index] is not exactly the target",
            input=label,
            expected=str(target.tolist()),
            got=str(w_new[:, index].tolist()),
            hint="set the column to target",
        )


@checks("obs_step")
def loss_is_the_output_error(ex):
    """with H = 2 X X^T / n, each row's loss equals the increase of its output error ||(w_new - w) X||^2 / n"""
    K, n = 9, 64
    X = correlated_inputs(K, n)
    H = hessian_of(X)
    w = torch.randn(5, K, dtype=torch.float64)
    target = torch.zeros(5, dtype=torch.float64)  # pruning weight 3 is OBS with target 0
    w_new, loss = ex.obs_step(w, torch.linalg.inv(H), 3, target)
    output_error = (((w_new - w) @ X) ** 2).sum(dim=1) / n
    expect_close(
        loss,
        output_error,
        input=describe(w=w, X=X) + ", index=3, target=0",
        what="loss",
        hint="with H = 2XX^T/n, 1/2 d^T H d = ||d X||^2 / n: loss = (w_q - t)^2 / (2 H_inv_qq)",
    )


@checks("obs_step")
def obs_refuses_bad_input(ex):
    """an H_inv that is not (K, K) and an index outside [0, K) raise a ValueError"""
    w = torch.randn(2, 5, dtype=torch.float64)
    t = torch.zeros(2, dtype=torch.float64)
    expect_value_error(
        lambda: ex.obs_step(w, torch.eye(4, dtype=torch.float64), 0, t),
        "w (2, 5), H_inv (4, 4)",
        "H_inv must be (K, K)",
    )
    for index in (5, -1):
        expect_value_error(
            lambda i=index: ex.obs_step(w, torch.eye(5, dtype=torch.float64), i, t),
            f"w (2, 5), index={index}",
            "index must lie in [0, K)",
        )


# ------------------------------------------------------------------------------------------ hessian


@checks("hessian")
def one_batch_matches_closed_form(ex):
    """one batch (n, K): H = 2 X^T X / n in float32, num_samples = n"""
    x = torch.randn(37, 6)
    acc = ex.HessianAccumulator(6)
    acc.add_batch(x)
    label = describe(x=x)
    expect_tensor(acc.H, shape=(6, 6), dtype=torch.float32, input=label, what="H")
    expect(acc.num_samples == 37, "wrong num_samples", input=label, expected="37", got=str(acc.num_samples))
    xd = x.double()
    expect_close(acc.H, 2 * xd.T @ xd / 37, input=label, what="H", hint="H = 2 / n * x^T x")


@checks("hessian")
def streaming_equals_all_at_once(ex):
    """batches of 1, 5, (2, 3, K) and (4, 7, K) tokens: the running H equals 2 X^T X / n over all 32 samples"""
    K = 10
    batches = [torch.randn(1, K), torch.randn(5, K), torch.randn(2, 3, K), torch.randn(4, 5, K) * 3.0]
    acc = ex.HessianAccumulator(K)
    for b in batches:
        acc.add_batch(b)
    X = torch.cat([b.reshape(-1, K) for b in batches]).double()  # (32, K)
    label = "batches " + ", ".join(str(tuple(b.shape)) for b in batches)
    expect(
        acc.num_samples == 32,
        "wrong num_samples",
        input=label,
        expected="32",
        got=str(acc.num_samples),
        hint="every leading index is a sample: m = x.numel() // K",
    )
    expect_close(
        acc.H,
        2 * X.T @ X / 32,
        input=label,
        what="H",
        hint="rescale the old H by n / (n + m) before adding 2 / (n + m) * x^T x",
    )


@checks("hessian")
def half_precision_inputs(ex):
    """float16 and bfloat16 activations: H accumulates in float32, as accurate as a float32 computation"""
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(3, 50, 8).to(dtype)
        acc = ex.HessianAccumulator(8)
        acc.add_batch(x[:1])
        acc.add_batch(x[1:])
        flat = x.reshape(-1, 8)
        label = describe(x=x) + ", two batches"
        expect_tensor(
            acc.H, shape=(8, 8), dtype=torch.float32, input=label, what="H", hint="cast x to float32 before x^T x"
        )
        baseline = 2 * flat.float().T @ flat.float() / 150
        expect_close(
            acc.H,
            2 * flat.double().T @ flat.double() / 150,
            baseline=baseline,
            input=label,
            what="H",
            hint="cast x to float32 first: a half-precision x^T x loses most of its digits",
        )


@checks("hessian")
def hessian_refuses_bad_input(ex):
    """an input whose last dimension is not K raises a ValueError"""
    acc = ex.HessianAccumulator(6)
    x = torch.randn(4, 5)
    expect_value_error(lambda: acc.add_batch(x), "HessianAccumulator(6).add_batch(x (4, 5))", "x must end with K")


# ------------------------------------------------------------------------------------------ gptq


@checks("gptq")
def equals_sequential_obs(ex):
    """per-channel, one block: GPTQ's Cholesky form equals sequential OBS with explicit inverses (float64)"""
    for (N, K), bits in [((1, 3), 4), ((5, 11), 3), ((8, 24), 4), ((3, 16), 8), ((4, 10), 2)]:
        W = torch.randn(N, K, dtype=torch.float64)
        H = hessian_of(correlated_inputs(K, 64))
        compare_with_spec(ex, W, H, describe(W=W, H=H) + f", bits={bits}, block_size=128", bits=bits)


@checks("gptq")
def lazy_blocks_change_nothing(ex):
    """block sizes 1, 4, 7 and K on K=20: the same W_hat as sequential OBS, block boundaries included"""
    W = torch.randn(6, 20, dtype=torch.float64)
    H = hessian_of(correlated_inputs(20, 80))
    for block_size in (1, 4, 7, 20):
        compare_with_spec(
            ex, W, H, describe(W=W, H=H) + f", bits=3, block_size={block_size}", bits=3, block_size=block_size
        )


@checks("gptq")
def groups_and_act_order(ex):
    """groups (grids from the updated weights) and act-order (by decreasing diag H), alone and together"""
    W = torch.randn(5, 24, dtype=torch.float64)
    X = correlated_inputs(24, 96, outliers=3)
    X[torch.randperm(24)[:6]] *= torch.linspace(2.0, 4.0, 6, dtype=torch.float64)[:, None]  # distinct energies
    H = hessian_of(X)
    for kwargs in [
        dict(bits=4, group_size=8, block_size=16),
        dict(bits=4, group_size=6, block_size=6),
        dict(bits=3, act_order=True, block_size=5),
        dict(bits=4, group_size=4, block_size=8, act_order=True),
        dict(bits=3, group_size=1, block_size=3),
    ]:
        compare_with_spec(
            ex, W, H, describe(W=W, H=H) + ", " + ", ".join(f"{k}={v}" for k, v in kwargs.items()), **kwargs
        )


@checks("gptq")
def damping_and_dead_features(ex):
    """damp 0.1 on Hessians of scale 1e4 and 1e-3, two features always 0 (H_ii = 1, weights 0), inputs unchanged"""
    K = 12
    for input_scale in (100.0, 0.02):
        X = correlated_inputs(K, 30) * input_scale
        X[[2, 7]] = 0.0
        H = hessian_of(X)
        W = torch.randn(4, K, dtype=torch.float64)
        W_before, H_before = W.clone(), H.clone()
        label = describe(W=W, H=H) + f", mean diag(H) {float(H.diagonal().mean()):.3g}, features 2 and 7 always 0, "
        label += "bits=4, damp=0.1, block_size=5"
        got = ex.gptq_quantize(W, H, bits=4, block_size=5, damp=0.1)
        expect(
            bool(torch.equal(W, W_before) and torch.equal(H, H_before)),
            "gptq_quantize modified W or H",
            input=label,
            expected="inputs unchanged",
            got="W or H changed in place",
            hint="work on clones",
        )
        expect(
            bool((got[:, [2, 7]] == 0).all()),
            "the weights of dead features are not 0",
            input=label,
            expected="W_hat[:, 2] == W_hat[:, 7] == 0",
            got=str(got[:, [2, 7]].tolist()),
            hint="where diag(H) == 0: set H_ii = 1 and W[:, i] = 0 before anything else",
        )
        expect_close(
            got,
            spec_gptq(W, H, 4, damp=0.1),
            input=label,
            what="W_hat",
            hint="dead features get H_ii = 1 (it enters mean(diag H)); damping is damp * mean(diag H) * I",
        )


@checks("gptq")
def half_precision_weights(ex):
    """a bfloat16 W (as models load) with a float32 H: computed and returned in float32, still far better than RTN"""
    K = 32
    X = correlated_inputs(K, 128).float()
    H = 2 * X @ X.T / X.shape[1]
    W = torch.randn(8, K).to(torch.bfloat16)
    label = describe(W=W, H=H) + ", bits=4"
    got = ex.gptq_quantize(W, H, bits=4, block_size=8)
    expect_tensor(
        got,
        shape=(8, K),
        dtype=torch.float32,
        input=label,
        what="W_hat",
        hint="compute in float32 unless W is float64: bf16 has 8 significant bits, too few for the updates",
    )
    scale, zero = spec_find_params(W, 4)
    rtn = spec_round(W.double(), scale[:, None], zero[:, None], 4)
    err_rtn = ((W.double() - rtn) @ X.double()).norm().item()
    err_gptq = ((W.double() - got.double()) @ X.double()).norm().item()
    expect(
        err_gptq * 3 <= err_rtn,
        "GPTQ is not clearly better than round-to-nearest",
        input=label,
        expected=f"<= {err_rtn / 3:.4g}",
        got=f"{err_gptq:.4g}",
        hint=HINT_GPTQ,
    )


@checks("gptq")
def beats_round_to_nearest(ex):
    """correlated inputs, float32: GPTQ's output error ||(W - W_hat) X|| is at least 3x lower than RTN's"""
    for (N, K), bits in [((16, 64), 4), ((12, 48), 3)]:
        X = correlated_inputs(K, 256).float()
        H = 2 * X @ X.T / X.shape[1]
        W = torch.randn(N, K)
        label = describe(W=W, X=X) + f", bits={bits}"
        got = ex.gptq_quantize(W, H, bits=bits, block_size=16)
        expect_tensor(
            got, shape=(N, K), dtype=torch.float32, input=label, what="W_hat", hint="compute in float32 for a float32 W"
        )
        scale, zero = spec_find_params(W, bits)
        rtn = spec_round(W.double(), scale[:, None], zero[:, None], bits)
        err_rtn = ((W.double() - rtn) @ X.double()).norm().item()
        err_gptq = ((W.double() - got.double()) @ X.double()).norm().item()
        expect(
            err_gptq * 3 <= err_rtn,
            "GPTQ is not clearly better than round-to-nearest",
            input=label,
            expected=f"||(W - W_hat) X|| <= RTN's / 3 = {err_rtn / 3:.4g}",
            got=f"{err_gptq:.4g}",
            hint=HINT_GPTQ,
        )
        values = (got.double() - 0).unsqueeze(-1)
        grid_ok = (
            (values - ((torch.arange(2**bits, dtype=torch.float64) - zero[:, None]) * scale[:, None]).unsqueeze(1))
            .abs()
            .amin(-1)
            < 1e-5 * scale[:, None]
        ).all()
        expect(
            bool(grid_ok),
            "W_hat has values that are not on each row's grid",
            input=label,
            expected="every W_hat[r, k] = scale_r * (code - zero_r)",
            got="off-grid values",
            hint="per-channel: one grid per row from the whole (dead-zeroed) row, before the loop",
        )


@checks("gptq")
def gptq_refuses_bad_input(ex):
    """bad shapes, bits, block and group sizes, and an H that is not positive definite raise a ValueError"""
    W = torch.randn(3, 8, dtype=torch.float64)
    H = hessian_of(correlated_inputs(8, 32))
    label = describe(W=W, H=H)
    expect_value_error(lambda: ex.gptq_quantize(W, H[:6, :6]), describe(W=W) + ", H (6, 6)", "H must be (K, K)")
    expect_value_error(lambda: ex.gptq_quantize(W, H, bits=1), label + ", bits=1", "bits must lie in 2..8")
    expect_value_error(lambda: ex.gptq_quantize(W, H, bits=9), label + ", bits=9", "bits must lie in 2..8")
    for block_size in (0, -4):
        expect_value_error(
            lambda b=block_size: ex.gptq_quantize(W, H, block_size=b),
            label + f", block_size={block_size}",
            "block_size must be positive",
        )
    expect_value_error(lambda: ex.gptq_quantize(W, H, group_size=0), label + ", group_size=0", "group_size must be > 0")
    expect_value_error(
        lambda: ex.gptq_quantize(W, H, group_size=3, block_size=6), label + ", group_size=3", "group_size must divide K"
    )
    expect_value_error(
        lambda: ex.gptq_quantize(W, H, group_size=4, block_size=6),
        label + ", group 4, block 6",
        "group_size must divide block_size",
    )
    negative = -torch.eye(8, dtype=torch.float64) - hessian_of(correlated_inputs(8, 32))
    expect_value_error(
        lambda: ex.gptq_quantize(W, negative),
        label + ", H negative definite",
        "check torch.linalg.cholesky_ex's info and raise a ValueError",
    )
