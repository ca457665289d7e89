"""Checks for p02.pruning. References: loop specifications over sorted scores (Python's `sorted`, per row or per
matrix), the exact N:M pattern checked group by group, `torch.linalg.vector_norm` for the activation norms, the
brute-force best single OBS removal (every nonzero weight tried, each followed by the least-squares compensation of
the other weights solved with `torch.linalg.lstsq` on X in float64), and a layer with activation outliers where
Wanda's output error must be at least 2 times lower than magnitude pruning's. `torch.nn.utils.prune` is forbidden."""

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error

checks = Checks("p02.pruning")
checks.restrict(
    "masks",
    "wanda",
    "n_m",
    forbid=["torch.nn.utils.prune"],
    instead="rank the scores yourself (argsort/topk) and build the boolean mask",
)


def spec_lowest_mask(scores: torch.Tensor, sparsity: float, per_row: bool) -> torch.Tensor:
    """False on the int(sparsity * n) lowest scores of each comparison group, by Python's sorted()."""
    N, K = scores.shape
    keep = torch.ones(N, K, dtype=torch.bool)
    groups = (
        [[(r, c) for c in range(K)] for r in range(N)] if per_row else [[(r, c) for r in range(N) for c in range(K)]]
    )
    for group in groups:
        ranked = sorted(group, key=lambda rc: float(scores[rc]))
        for r, c in ranked[: int(sparsity * len(group))]:
            keep[r, c] = False
    return keep


def expect_same_mask(got, want, label, hint):
    expect_tensor(got, shape=tuple(want.shape), dtype=torch.bool, input=label, what="mask")
    wrong = got != want
    where = wrong.nonzero()[:4].tolist()
    expect(
        not bool(wrong.any()),
        f"{int(wrong.sum())} of {want.numel()} mask entries differ",
        input=label,
        expected=f"{int((~want).sum())} pruned; keep={[bool(want[r, c]) for r, c in where]} at {where}",
        got=f"{int((~got).sum())} pruned; keep={[bool(got[r, c]) for r, c in where]}",
        hint=hint,
    )


def outlier_inputs(T: int, K: int, count: int = 4, factor: float = 20.0) -> torch.Tensor:
    X = torch.randn(T, K)
    X[:, torch.randperm(K)[:count]] *= factor
    return X


# ------------------------------------------------------------------------------------------ masks


@checks("masks")
def hand_checkable(ex):
    """W = [[4, -1, 3, -2], [0.5, -8, 6, 7]] at 50%: per layer keeps the 4 largest |W|, per row 2 per row"""
    W = torch.tensor([[4.0, -1.0, 3.0, -2.0], [0.5, -8.0, 6.0, 7.0]])
    label = "W=[[4, -1, 3, -2], [0.5, -8, 6, 7]], sparsity=0.5"
    got = ex.magnitude_mask(W, 0.5)
    want = torch.tensor([[False, False, False, False], [False, True, True, True]]) | (W.abs() >= 4)
    expect_same_mask(got, want, label + ", per layer", "per layer: remove the 4 smallest |W| of the whole matrix")
    got = ex.magnitude_mask(W, 0.5, per_row=True)
    want = torch.tensor([[True, False, True, False], [False, True, False, True]])
    expect_same_mask(got, want, label + ", per row", "per row: remove the 2 smallest |W| of each row")


@checks("masks")
def random_against_sorted_spec(ex):
    """random scores, several shapes and sparsities, per row and per layer: the mask equals the sorted-order spec"""
    for (N, K), sparsity, per_row in [
        ((5, 8), 0.5, True),
        ((3, 20), 0.25, False),
        ((7, 12), 0.75, True),
        ((1, 9), 1 / 3, False),
        ((4, 6), 0.0, True),
        ((2, 5), 1.0, False),
    ]:
        scores = torch.rand(N, K)
        label = describe(scores=scores) + f", sparsity={sparsity:.3g}, per_row={per_row}"
        expect_same_mask(
            ex.lowest_score_mask(scores, sparsity, per_row),
            spec_lowest_mask(scores, sparsity, per_row),
            label,
            "remove exactly int(sparsity * n) lowest scores (n = K per row, or N*K per layer)",
        )


@checks("masks")
def exact_count_with_ties(ex):
    """many tied scores: exactly int(sparsity * n) entries are removed, never more, and no kept score is below a pruned one"""
    scores = torch.randint(0, 3, (6, 10)).float()
    for per_row in (True, False):
        keep = ex.lowest_score_mask(scores, 0.5, per_row)
        label = describe(scores=scores) + f" with values in {{0, 1, 2}}, sparsity=0.5, per_row={per_row}"
        rows = keep if per_row else keep.reshape(1, -1)
        vals = scores if per_row else scores.reshape(1, -1)
        counts = (~rows).sum(dim=1)
        expect(
            bool((counts == rows.shape[1] // 2).all()),
            "wrong number of pruned entries",
            input=label,
            expected=f"{rows.shape[1] // 2} per group",
            got=str(counts.tolist()),
            hint="rank and take exactly k (argsort + scatter); a threshold prunes every tie",
        )
        ok = all(float(vals[r][rows[r]].min()) >= float(vals[r][~rows[r]].max()) for r in range(rows.shape[0]))
        expect(
            ok,
            "a kept score is lower than a pruned one",
            input=label,
            expected="pruned <= kept in every group",
            got="an inversion",
            hint="prune the lowest scores, not the highest",
        )


@checks("masks")
def masks_refuse_bad_input(ex):
    """sparsity outside [0, 1] and 1-D scores raise a ValueError"""
    W = torch.randn(3, 4)
    for sparsity in (-0.1, 1.2):
        expect_value_error(
            lambda s=sparsity: ex.magnitude_mask(W, s), f"W (3, 4), sparsity={sparsity}", "sparsity must lie in [0, 1]"
        )
    expect_value_error(lambda: ex.lowest_score_mask(torch.rand(12), 0.5, True), "scores (12,)", "scores must be 2-D")


# ------------------------------------------------------------------------------------------ wanda


@checks("wanda")
def scores_against_norms(ex):
    """S = |W| * ||X[:, j]||_2 over tokens of (B, T, K) activations, float32 and bfloat16 inputs"""
    for X, W in [
        (torch.randn(2, 9, 6), torch.randn(4, 6)),
        (torch.randn(33, 10).bfloat16() * 5, torch.randn(3, 10)),
        (torch.randn(12, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)),
    ]:
        label = describe(W=W, X=X)
        got = ex.wanda_scores(W, X)
        expect_tensor(got, shape=tuple(W.shape), dtype=torch.float32, input=label, what="scores")
        norms = torch.linalg.vector_norm(X.double().reshape(-1, X.shape[-1]), dim=0)
        want = W.double().abs() * norms
        baseline = W.float().abs() * torch.linalg.vector_norm(X.float().reshape(-1, X.shape[-1]), dim=0)
        expect_close(
            got,
            want,
            baseline=baseline,
            input=label,
            what="scores",
            hint="||X[:, j]|| over every token (flatten the leading axes), in float32; times |W[:, j]|",
        )


@checks("wanda")
def mask_is_per_row(ex):
    """wanda_mask removes int(p*K) per row by the spec, at sparsities 0.5 and 0.25"""
    W = torch.randn(6, 16)
    X = outlier_inputs(40, 16)
    for sparsity in (0.5, 0.25):
        scores = W.double().abs() * X.double().norm(dim=0)
        label = describe(W=W, X=X) + f", sparsity={sparsity}"
        expect_same_mask(
            ex.wanda_mask(W, X, sparsity),
            spec_lowest_mask(scores, sparsity, True),
            label,
            "Wanda compares within each output row: lowest_score_mask(scores, p, per_row=True)",
        )


@checks("wanda")
def beats_magnitude_with_outliers(ex):
    """inputs with 4 features 20x larger: at 50% Wanda's output error is at least 2x lower than magnitude's"""
    W = torch.randn(32, 64, dtype=torch.float64)
    X = outlier_inputs(256, 64).double()
    Y = X @ W.T
    keep_wanda = ex.wanda_mask(W, X, 0.5)
    keep_mag = spec_lowest_mask(W.abs(), 0.5, True)
    err_wanda = (X @ (W * keep_wanda).T - Y).norm().item()
    err_mag = (X @ (W * keep_mag).T - Y).norm().item()
    expect(
        err_wanda * 2 <= err_mag,
        "Wanda is not clearly better than magnitude pruning",
        input=describe(W=W, X=X),
        expected=f"error <= {err_mag / 2:.4g} (half of magnitude's {err_mag:.4g})",
        got=f"{err_wanda:.4g}",
        hint="multiply |W| by the norm of each input feature (a column of W meets feature j)",
    )


@checks("wanda")
def wanda_refuses_bad_input(ex):
    """X whose feature count differs from W's raises a ValueError"""
    expect_value_error(
        lambda: ex.wanda_scores(torch.randn(3, 8), torch.randn(5, 7)),
        "W (3, 8), X (5, 7)",
        "X must end with K features",
    )


# ------------------------------------------------------------------------------------------ n_m


@checks("n_m")
def hand_checkable_2_4(ex):
    """[[1, 5, 3, 2, 8, 0, 7, 6]]: 2:4 keeps [5, 3] and [8, 7]"""
    scores = torch.tensor([[1.0, 5.0, 3.0, 2.0, 8.0, 0.0, 7.0, 6.0]])
    want = torch.tensor([[False, True, True, False, True, False, True, False]])
    expect_same_mask(
        ex.n_m_mask(scores),
        want,
        "scores=[[1, 5, 3, 2, 8, 0, 7, 6]], 2:4",
        "keep the 2 highest of each group of 4 consecutive columns",
    )


@checks("n_m")
def valid_pattern_random(ex):
    """2:4, 1:4, 4:8 and 3:3 on random scores: exactly n kept per group, and they are the n highest"""
    for (N, K), n, m in [
        ((5, 16), 2, 4),
        ((3, 12), 1, 4),
        ((2, 24), 4, 8),
        ((4, 9), 3, 3),
        ((2, 8), 0, 4),
        ((2, 3), 1, 1),
    ]:
        scores = torch.randn(N, K)
        label = describe(scores=scores) + f", {n}:{m}"
        keep = ex.n_m_mask(scores, n, m)
        expect_tensor(keep, shape=(N, K), dtype=torch.bool, input=label, what="mask")
        for r in range(N):
            for g in range(K // m):
                cols = list(range(g * m, (g + 1) * m))
                kept = [c for c in cols if keep[r, c]]
                best = sorted(cols, key=lambda c: -float(scores[r, c]))[:n]
                expect(
                    sorted(kept) == sorted(best),
                    f"row {r}, group {g} (columns {cols[0]}..{cols[-1]}) is wrong",
                    input=label,
                    expected=f"keep columns {sorted(best)}",
                    got=f"kept {sorted(kept)}",
                    hint="groups are m consecutive columns of one row; keep the n highest scores of each",
                )


@checks("n_m")
def n_m_refuses_bad_input(ex):
    """K not a multiple of m, and n > m, raise a ValueError"""
    expect_value_error(lambda: ex.n_m_mask(torch.randn(2, 10), 2, 4), "scores (2, 10), 2:4", "K % m must be 0")
    expect_value_error(lambda: ex.n_m_mask(torch.randn(2, 8), 5, 4), "scores (2, 8), 5:4", "n must lie in [0, m]")
    expect_value_error(lambda: ex.n_m_mask(torch.randn(2, 8), -1, 4), "scores (2, 8), -1:4", "n must lie in [0, m]")
    expect_value_error(lambda: ex.n_m_mask(torch.randn(2, 8), 0, 0), "scores (2, 8), 0:0", "m must be positive")


# ------------------------------------------------------------------------------------------ obs


def brute_force_removal(w: torch.Tensor, X: torch.Tensor):
    """Try every nonzero weight: remove it, refit the others by least squares on X; the best (error, q, w_new)."""
    K = w.shape[0]
    y = X @ w
    best = None
    for q in range(K):
        if w[q] == 0:
            continue
        others = [j for j in range(K) if j != q]  # every other weight may move: H_inv covers all K of them
        w_new = torch.zeros_like(w)
        if others:
            sol = torch.linalg.lstsq(X[:, others], y[:, None]).solution[:, 0]
            w_new[others] = sol
        err = ((X @ w_new - y) ** 2).sum().item() / X.shape[0]
        if best is None or err < best[0]:
            best = (err, q, w_new)
    return best


@checks("obs")
def matches_brute_force(ex):
    """each row removes the nonzero weight whose removal, with the best refit of all others, costs least"""
    for N, K in [(3, 6), (4, 9)]:
        X = torch.randn(200, 3, dtype=torch.float64) @ torch.randn(3, K, dtype=torch.float64)
        X += 0.3 * torch.randn(200, K, dtype=torch.float64)
        H = 2 * X.T @ X / X.shape[0]
        W = torch.randn(N, K, dtype=torch.float64)
        W[0, 2] = 0.0  # already pruned: never chosen again, stays 0
        W_before = W.clone()
        label = describe(W=W, X=X) + ", W[0, 2] already 0 (not a candidate), H = 2 X^T X / T"
        W_new, pruned, loss = ex.obs_prune_one(W, torch.linalg.inv(H))
        expect(
            bool(torch.equal(W, W_before)),
            "obs_prune_one modified W",
            input=label,
            expected="W unchanged",
            got="changed in place",
            hint="W_new = W - ..., not W -= ...",
        )
        expect_tensor(pruned, shape=(N,), dtype=torch.int64, input=label, what="pruned")
        for r in range(N):
            err, q, w_new = brute_force_removal(W[r], X)
            expect(
                int(pruned[r]) == q,
                f"row {r} removed the wrong weight",
                input=label,
                expected=f"column {q} (least output error after refitting the others)",
                got=f"column {int(pruned[r])}",
                hint="saliency = w_q**2 / (2 * H_inv[q, q]) (w squared, the inverse's diagonal); skip zeros",
            )
            expect_close(
                W_new[r],
                w_new,
                input=label + f", row {r}",
                what="W_new row",
                hint="delta = -w_q / H_inv[q, q] * H_inv[q, :]; then W_new[r, q] = 0",
            )
            expect_close(
                loss[r : r + 1],
                torch.tensor([err], dtype=torch.float64),
                input=label + f", row {r}",
                what="loss",
                hint="loss = w_q**2 / (2 * H_inv[q, q]) = the output error increase",
            )
        expect(
            bool((W_new.gather(1, pruned[:, None]) == 0).all()),
            "pruned weights are not exactly 0",
            input=label,
            expected="0 at every pruned position",
            got=str(W_new.gather(1, pruned[:, None]).flatten().tolist()),
            hint="set them to 0 after the update",
        )


@checks("obs")
def diagonal_hessian_is_wanda(ex):
    """uncorrelated features (diagonal H): OBS removes the lowest |w| * ||X_j|| and moves nothing else"""
    K = 10
    col_norms = torch.rand(K, dtype=torch.float64) * 3 + 0.1
    H = torch.diag(2 * col_norms**2)
    W = torch.randn(24, K, dtype=torch.float64)
    W_new, pruned, loss = ex.obs_prune_one(W, torch.diag(1 / torch.diagonal(H)))
    want_q = (W.abs() * col_norms).argmin(dim=1)
    label = describe(W=W) + ", H = diag(2 * ||X_j||^2)"
    expect(
        bool((pruned == want_q).all()),
        "with a diagonal H the choice must be Wanda's",
        input=label,
        expected=str(want_q.tolist()),
        got=str(pruned.tolist()),
        hint="saliency = w^2 / (2 * H_inv_qq)",
    )
    want = W.clone()
    want.scatter_(1, want_q[:, None], 0.0)
    expect_close(W_new, want, input=label, what="W_new", hint="H_inv diagonal: only the removed weight changes")
    removed = W_new.gather(1, want_q[:, None])
    expect(
        bool((removed == 0).all()),
        "removed weights are not exactly 0",
        input=label,
        expected="exactly 0.0",
        got=str(removed[removed != 0][:3].tolist()),
        hint="w - (w / d) * d is not always 0 in floating point: set the removed weight to 0 explicitly",
    )
    expect_close(
        loss,
        (W.gather(1, want_q[:, None])[:, 0] * col_norms[want_q]) ** 2,
        input=label,
        what="loss",
        hint="loss = w_q^2 / (2 * H_inv_qq) = w_q^2 * ||X_q||^2 here",
    )


@checks("obs")
def obs_refuses_bad_input(ex):
    """an H_inv that is not (K, K) raises a ValueError"""
    expect_value_error(
        lambda: ex.obs_prune_one(torch.randn(2, 5), torch.eye(4)), "W (2, 5), H_inv (4, 4)", "H_inv must be (K, K)"
    )
