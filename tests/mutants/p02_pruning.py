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
        mistake_zh="剪掉分数最高的，而不是最低的",
    ),
    Mutant(
        "masks",
        "always_per_layer",
        "ignores per_row and compares over the whole matrix",
        [("flat = scores if per_row else scores.reshape(1, -1)", "flat = scores.reshape(1, -1)")],
        mistake_zh="忽略 per_row，在整个矩阵上比较",
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
        mistake_zh="剪掉所有不超过第 k 小分数的元素（阈值法），并列时超出了稀疏度",
    ),
    Mutant(
        "masks",
        "signed_magnitude",
        "ranks by W instead of |W| (large negative weights pruned first)",
        [("return lowest_score_mask(W.abs(), sparsity, per_row)", "return lowest_score_mask(W, sparsity, per_row)")],
        mistake_zh="按 W 而不是 |W| 排序（大的负权重最先被剪）",
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
        mistake_zh="让 torch.nn.utils.prune 计算逐层的幅值掩码",
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
        mistake_zh="|W| 乘以范数的平方 ||X_j||²",
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
        mistake_zh="对每个 token 的特征求范数（dim=1），从未落到列上",
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
        mistake_zh="在整层而不是每个输出行内比较 Wanda 分数",
    ),
    Mutant(
        "wanda",
        "magnitude_only",
        "forgets the activations (Wanda degenerates to per-row magnitude)",
        [("return W.float().abs() * feature_norms[None, :]  # (N, K)", "return W.float().abs()")],
        mistake_zh="忘了激活（Wanda 退化为逐行幅值剪枝）",
    ),
    Mutant(
        "n_m",
        "groups_down_columns",
        "forms the groups from the transposed matrix (m consecutive rows of one column)",
        [
            ("groups = scores.reshape(N, K // m, m)  # (N, K/m, m)", "groups = scores.T.reshape(N, K // m, m)"),
        ],
        mistake_zh="从转置矩阵分组（同一列中相邻的 m 行）",
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
        mistake_zh="每组保留分数最低的 n 个",
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
        mistake_zh="按步长分组列（j, j + K/m, ...），而不是相邻的列",
    ),
    Mutant(
        "obs",
        "uses_H_diagonal",
        "divides by 1 / H_inv_qq (mixing up H and its inverse) in the saliency",
        [("saliency = W**2 / (2 * diag[None, :])  # (N, K)", "saliency = W**2 * diag[None, :] / 2")],
        mistake_zh="显著性里除以 1 / H_inv_qq（把 H 和它的逆搞混了）",
    ),
    Mutant(
        "obs",
        "abs_saliency",
        "ranks by |w| / H_inv_qq instead of w^2 / H_inv_qq",
        [("saliency = W**2 / (2 * diag[None, :])  # (N, K)", "saliency = W.abs() / (2 * diag[None, :])")],
        mistake_zh="按 |w| / H_inv_qq 而不是 w² / H_inv_qq 排序",
    ),
    Mutant(
        "obs",
        "zeros_chosen_again",
        "does not exclude weights that are already zero (their saliency 0 wins)",
        [("saliency = torch.where(W == 0, torch.full_like(saliency, math.inf), saliency)", "pass")],
        mistake_zh="不排除已经为零的权重（它们的显著性 0 总是胜出）",
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
        mistake_zh="按 w_q * H_inv[q, :] 移动这一行，忘了除以 H_inv_qq",
    ),
]
