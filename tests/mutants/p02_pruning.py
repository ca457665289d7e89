"""Realistic wrong versions of the p02.pruning solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "masks",
        "prunes_largest",
        "removes the highest scores instead of the lowest",
        [
            (
                "lowest = torch.argsort(flat, dim=1)[:, :num_pruned]  # (rows, num_pruned)",
                "lowest = torch.argsort(flat, dim=1, descending=True)[:, :num_pruned]",
            )
        ],
    ),
    Mutant(
        "masks",
        "always_per_layer",
        "ignores per_row and compares over the whole matrix",
        [("flat = scores if per_row else scores.reshape(1, -1)", "flat = scores.reshape(1, -1)")],
    ),
    Mutant(
        "masks",
        "threshold_prunes_ties",
        "prunes every score up to the k-th smallest (a threshold), so ties overshoot the sparsity",
        [
            (
                "keep.scatter_(1, lowest, False)",
                "keep = flat > flat.gather(1, lowest).amax(dim=1, keepdim=True) if num_pruned else keep",
            )
        ],
    ),
    Mutant(
        "masks",
        "signed_magnitude",
        "ranks by W instead of |W| (large negative weights pruned first)",
        [("return lowest_score_mask(W.abs(), sparsity, per_row)", "return lowest_score_mask(W, sparsity, per_row)")],
    ),
    Mutant(
        "masks",
        "calls_the_builtin",
        "lets torch.nn.utils.prune compute the per-layer magnitude mask",
        [
            (
                "return lowest_score_mask(W.abs(), sparsity, per_row)",
                "if per_row:\n        return lowest_score_mask(W.abs(), sparsity, per_row)\n"
                "    import torch.nn.utils.prune as torch_prune\n"
                "    return torch_prune.L1Unstructured(sparsity).compute_mask(W, torch.ones_like(W)).bool()",
            )
        ],
    ),
    Mutant(
        "wanda",
        "squared_norm",
        "multiplies |W| by the squared norm ||X_j||^2",
        [
            (
                "return W.float().abs() * feature_norms[None, :]  # (N, K)",
                "return W.float().abs() * feature_norms[None, :] ** 2",
            )
        ],
    ),
    Mutant(
        "wanda",
        "norm_over_features",
        "takes the norm over the features of each token (dim=1) and never reaches the columns",
        [
            (
                "feature_norms = X.reshape(-1, X.shape[-1]).float().norm(dim=0)  # (K,)",
                "feature_norms = X.reshape(-1, X.shape[-1]).float().norm(dim=1)[: X.shape[-1]]",
            )
        ],
    ),
    Mutant(
        "wanda",
        "per_layer",
        "compares the Wanda scores over the whole layer instead of per output row",
        [
            (
                "return lowest_score_mask(wanda_scores(W, X), sparsity, per_row=True)",
                "return lowest_score_mask(wanda_scores(W, X), sparsity, per_row=False)",
            )
        ],
    ),
    Mutant(
        "wanda",
        "magnitude_only",
        "forgets the activations (Wanda degenerates to per-row magnitude)",
        [("return W.float().abs() * feature_norms[None, :]  # (N, K)", "return W.float().abs()")],
    ),
    Mutant(
        "n_m",
        "groups_down_columns",
        "forms the groups from the transposed matrix (m consecutive rows of one column)",
        [
            ("groups = scores.reshape(N, K // m, m)  # (N, K/m, m)", "groups = scores.T.reshape(N, K // m, m)"),
        ],
    ),
    Mutant(
        "n_m",
        "keeps_lowest",
        "keeps the n lowest scores of each group",
        [
            (
                "top = torch.topk(groups, n, dim=-1).indices  # (N, K/m, n)",
                "top = torch.topk(groups, n, dim=-1, largest=False).indices",
            )
        ],
    ),
    Mutant(
        "n_m",
        "strided_groups",
        "groups columns with a stride (j, j + K/m, ...) instead of consecutive columns",
        [
            (
                "groups = scores.reshape(N, K // m, m)  # (N, K/m, m)",
                "groups = scores.reshape(N, m, K // m).transpose(1, 2)",
            ),
            ("return keep.reshape(N, K)", "return keep.transpose(1, 2).reshape(N, K)"),
        ],
    ),
    Mutant(
        "obs",
        "uses_H_diagonal",
        "divides by 1 / H_inv_qq (mixing up H and its inverse) in the saliency",
        [("saliency = W**2 / (2 * diag[None, :])  # (N, K)", "saliency = W**2 * diag[None, :] / 2")],
    ),
    Mutant(
        "obs",
        "abs_saliency",
        "ranks by |w| / H_inv_qq instead of w^2 / H_inv_qq",
        [("saliency = W**2 / (2 * diag[None, :])  # (N, K)", "saliency = W.abs() / (2 * diag[None, :])")],
    ),
    Mutant(
        "obs",
        "zeros_chosen_again",
        "does not exclude weights that are already zero (their saliency 0 wins)",
        [("saliency = torch.where(W == 0, torch.full_like(saliency, math.inf), saliency)", "pass")],
    ),
    Mutant(
        "obs",
        "no_scaling",
        "moves the row by w_q * H_inv[q, :], forgetting the division by H_inv_qq",
        [
            (
                "W_new = W - (w_q / diag[pruned][:, None]) * H_inv[pruned]  # (N, K): row r moves along H_inv[q_r, :]",
                "W_new = W - w_q * H_inv[pruned]",
            )
        ],
    ),
]
