"""Realistic wrong versions of the p02.gptq solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "obs_step",
        "uses_H_not_inverse_diagonal",
        "divides by 1 / H_inv[q, q] (mixing up H and its inverse) for the scaled error",
        [("d = H_inv[index, index]", "d = 1 / H_inv[index, index]")],
        mistake_zh="缩放误差时除以 1 / H_inv[q, q]（把 H 和它的逆搞混了）",
    ),
    Mutant(
        "obs_step",
        "no_scaling",
        "moves the row by (w_q - t) * H_inv[:, q], forgetting the division by [H^-1]_qq",
        [("scaled_error = (w[:, index] - target) / d  # (N,)", "scaled_error = w[:, index] - target")],
        mistake_zh="按 (w_q - t) * H_inv[:, q] 移动这一行，忘了除以 [H^-1]_qq",
    ),
    Mutant(
        "obs_step",
        "loss_without_half",
        "reports (w_q - t)^2 / [H^-1]_qq, twice the OBS loss",
        [("loss = (w[:, index] - target) ** 2 / (2 * d)  # (N,)", "loss = (w[:, index] - target) ** 2 / d")],
        mistake_zh="报告 (w_q - t)² / [H^-1]_qq，是 OBS 损失的两倍",
    ),
    Mutant(
        "obs_step",
        "in_place",
        "updates w in place instead of returning a new tensor",
        [
            (
                "w_new = w - scaled_error[:, None] * H_inv[index][None, :]  # (N, K); H_inv symmetric: row = column",
                "w_new = w.sub_(scaled_error[:, None] * H_inv[index][None, :])",
            )
        ],
        mistake_zh="原地更新 w，而不是返回新张量",
    ),
    Mutant(
        "hessian",
        "sum_not_mean",
        "accumulates 2 * sum x x^T without dividing by the number of samples",
        [
            ("self.H *= self.num_samples / total", "pass"),
            ("self.H += (2.0 / total) * (x.T @ x)  # (K, K)", "self.H += 2.0 * (x.T @ x)"),
        ],
        mistake_zh="累加 2 * Σ x x^T，却不除以样本数",
    ),
    Mutant(
        "hessian",
        "no_rescale",
        "adds the new batch's 2/(n+m) x^T x without rescaling the old H by n/(n+m)",
        [("self.H *= self.num_samples / total", "pass")],
        mistake_zh="加上新批次的 2/(n+m) x^T x，却没有把旧的 H 乘以 n/(n+m)",
    ),
    Mutant(
        "hessian",
        "counts_batches",
        "counts the first dimension only, so a (B, T, K) batch is B samples",
        [
            (
                "x = x.reshape(-1, self.in_features).float()  # (m, K)",
                "samples = x.shape[0]\n        x = x.reshape(-1, self.in_features).float()",
            ),
            ("m = x.shape[0]", "m = samples"),
        ],
        mistake_zh="只数第一维，(B, T, K) 的批被当作 B 个样本",
    ),
    Mutant(
        "hessian",
        "half_precision_product",
        "computes x^T x in the input's dtype and only then casts to float32",
        [
            (
                "x = x.reshape(-1, self.in_features).float()  # (m, K)",
                "x = x.reshape(-1, self.in_features)",
            ),
            ("self.H += (2.0 / total) * (x.T @ x)  # (K, K)", "self.H += (2.0 / total) * (x.T @ x).float()"),
        ],
        mistake_zh="在输入的数据类型下计算 x^T x，之后才转成 float32",
    ),
    Mutant(
        "gptq",
        "no_error_feedback",
        "quantises every column without compensating (round to nearest)",
        [
            ("block[:, j + 1 :] -= e[:, None] * U[i, i + 1 : i2][None, :]  # OBS compensation in the block", "pass"),
            ("W[:, i2:] -= errors @ U[i1:i2, i2:]  # lazy: the whole block's compensation at once", "pass"),
        ],
        mistake_zh="量化每一列都不做补偿（就近舍入）",
    ),
    Mutant(
        "gptq",
        "error_not_scaled",
        "feeds back w - quant(w) without dividing by U[i, i]",
        [("e = (w - w_hat) / U[i, i]  # (N,)", "e = w - w_hat")],
        mistake_zh="回传 w - quant(w) 时没有除以 U[i, i]",
    ),
    Mutant(
        "gptq",
        "inverse_not_cholesky",
        "uses H^-1 itself instead of its upper Cholesky factor",
        [
            (
                "U = torch.linalg.cholesky(torch.cholesky_inverse(L), upper=True)  # (K, K), H^-1 = U^T U",
                "U = torch.cholesky_inverse(L)",
            )
        ],
        mistake_zh="直接用 H^-1，而不是它的上三角 Cholesky 因子",
    ),
    Mutant(
        "gptq",
        "lower_cholesky",
        "takes the lower Cholesky factor of H^-1",
        [
            (
                "U = torch.linalg.cholesky(torch.cholesky_inverse(L), upper=True)  # (K, K), H^-1 = U^T U",
                "U = torch.linalg.cholesky(torch.cholesky_inverse(L))",
            )
        ],
        mistake_zh="取了 H^-1 的下三角 Cholesky 因子",
    ),
    Mutant(
        "gptq",
        "no_lazy_update",
        "forgets to apply a block's errors to the columns after it",
        [("W[:, i2:] -= errors @ U[i1:i2, i2:]  # lazy: the whole block's compensation at once", "pass")],
        mistake_zh="忘了把一个块的误差施加到它之后的列上",
    ),
    Mutant(
        "gptq",
        "absolute_damping",
        "damps with damp * I instead of damp * mean(diag H) * I",
        [
            (
                "H += damp * torch.diagonal(H).mean() * torch.eye(K, dtype=dtype)",
                "H += damp * torch.eye(K, dtype=dtype)",
            )
        ],
        mistake_zh="阻尼用 damp * I，而不是 damp * mean(diag H) * I",
    ),
    Mutant(
        "gptq",
        "group_grid_from_original",
        "computes each group's grid from the original weights, not the updated ones",
        [
            (
                "scale, zero = find_params(block[:, j : j + group_size], bits)  # from the updated weights",
                "scale, zero = find_params(original[:, i : i + group_size], bits)",
            ),
            ("W_hat = torch.zeros_like(W)", "W_hat = torch.zeros_like(W)\n    original = W.clone()"),
        ],
        mistake_zh="每组的量化网格按原始权重而不是更新后的权重计算",
    ),
    Mutant(
        "gptq",
        "act_order_not_undone",
        "returns W_hat in the permuted column order",
        [("W_hat = W_hat[:, torch.argsort(perm)]", "W_hat = W_hat")],
        mistake_zh="按置换后的列顺序返回 W_hat",
    ),
    Mutant(
        "gptq",
        "dead_weights_kept",
        "keeps the weights of features that are always 0 (sets only H_ii = 1)",
        [("W[:, dead] = 0.0", "pass")],
        mistake_zh="保留恒为 0 的特征对应的权重（只设了 H_ii = 1）",
    ),
]
