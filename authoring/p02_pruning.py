"""Source of 02_PyTorch_Algorithms/39_Pruning.ipynb (build with `python -m llm_algo build p02.pruning`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.pruning",
        path="02_PyTorch_Algorithms/39_Pruning.ipynb",
        title_en="Pruning: magnitude, Wanda, 2:4 sparsity and the OBS update",
        title_zh="剪枝：幅值、Wanda、2:4 稀疏与 OBS 更新",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p02.gptq"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 剪枝 (pruning) 把部分权重置零；问题是"剪哪些"。判据 (criterion) 决定一切。
        - 幅值剪枝 (magnitude)：剪掉 $|W_{ij}|$ 最小的权重。在 LLM 上效果很差，因为它忽略了激活的大小。
        - Wanda：得分 $S_{ij} = |W_{ij}| \cdot \|X_j\|_2$，在每个输出行内比较；不需要权重更新，也不需要反向传播。
        - 2:4 半结构化稀疏 (semi-structured sparsity)：每 4 个连续权重保留 2 个，Ampere 及之后的稀疏张量核心可加速。
        - OBS 剪枝：去掉一个权重后用 $\delta = -\frac{w_q}{[H^{-1}]_{qq}} H^{-1}_{:,q}$ 补偿其余权重，
          显著性 (saliency) $\frac{w_q^2}{2[H^{-1}]_{qq}}$ 最小的先剪。
        - Wanda 的 $|W|\cdot\|X\|$ 正是 OBS 显著性在 $H$ 取对角近似时的平方根。
        {易错点}

        Half the weights of an LLM can be set to zero at little cost, if you choose the right half. On LLaMA-7B at
        50% unstructured sparsity, WikiText-2 perplexity goes from 5.68 (dense) to 17.29 with magnitude pruning,
        7.22 with SparseGPT and 7.26 with Wanda (Sun et al., 2023, *A Simple and Effective Pruning Approach for Large
        Language Models*, arXiv:2306.11695, Table 3). Wanda needs no weight update at all: only a better criterion,
        which multiplies each weight's magnitude by the size of the input feature it meets. The zeros pay off in
        hardware when they follow a pattern: NVIDIA's sparse tensor cores (A100 and later) run a matrix with two zeros
        in every four consecutive weights at up to twice the dense math rate (NVIDIA A100 Tensor Core GPU
        Architecture whitepaper, 2020).

        **You will implement** the mask that removes the lowest-scored weights (per layer or per output row),
        magnitude and Wanda scores, N:M (2:4) semi-structured masks, and the Optimal Brain Surgeon removal of one
        weight per row with the update of the others. **Graded against** sorted-order loop specifications, the
        exact N:M pattern, the brute-force best single removal (every candidate weight tried, each followed by the
        least-squares compensation solved in float64), and a layer with activation outliers where Wanda's output
        error must be at least 2 times lower than magnitude pruning's. `torch.nn.utils.prune` is off limits.
    """
    )
    lesson.md(r"""
        ## 1. Which weights matter: the output, again

        As in `p02.gptq`, a linear layer $W \in \mathbb{R}^{N \times K}$ is judged by its outputs on calibration
        inputs $X \in \mathbb{R}^{T \times K}$ ($T$ tokens). Zeroing weight $W_{ij}$ alone changes output $i$ of
        token $t$ by $-W_{ij} X_{tj}$, so the squared output error summed over tokens is

        $$
        \sum_t (W_{ij} X_{tj})^2 = W_{ij}^2 \, \|X_{:,j}\|_2^2 .
        $$

        Magnitude pruning ranks by $|W_{ij}|$ and ignores the second factor. In an LLM, a few input features
        ($j$) carry activations 20-100 times larger than the rest (`p02.smoothquant`), so a small weight on such a
        feature can matter more than a large weight elsewhere. **Wanda** ranks by the square root of that error,

        $$
        S_{ij} = |W_{ij}| \cdot \|X_{:,j}\|_2 \qquad (N \times K, \text{ with } \|X_{:,j}\|_2 \text{ a } (K) \text{ vector broadcast over rows}),
        $$

        and removes, **in each output row separately**, the fraction $p$ of weights with the lowest scores. Comparing
        within a row matters: rows have different scales, and a per-layer comparison can empty whole rows (the
        Wanda paper's ablation shows per-output comparison is clearly better for LLMs).

        **Masks.** A mask $M \in \{0, 1\}^{N \times K}$ (here a `torch.bool` tensor, `True` = keep) and the pruned
        weight $W \odot M$. With $n$ candidates in a comparison group and sparsity $p$, remove
        $k = \lfloor p\,n \rfloor$ of them (`int(p * n)`, as the Wanda code does).

        ## 2. N:M semi-structured sparsity

        Unstructured zeros save nothing on a GPU: the dense kernel multiplies them anyway. **2:4 sparsity** keeps
        exactly 2 nonzeros in every group of 4 consecutive weights along the input dimension $K$ (the reduction
        axis of the matmul). The hardware stores the 2 values plus 2-bit indices per group, half the values and a
        small metadata overhead, and the sparse tensor core skips the zeros. For each group of $m = 4$ entries of a
        row, keep the $n = 2$ with the highest scores (magnitude or Wanda), regardless of the other groups: this is a
        stricter constraint than 50% unstructured, hence a bit more error.

        ## 3. Optimal Brain Surgeon: remove one weight, fix the others

        With $H = \frac{2}{T} X^\top X$ ($K \times K$) and the OBS closed form of `p02.gptq` with target value 0,
        removing weight $q$ of a row $w$ and compensating optimally with the others costs

        $$
        \Delta E_q = \frac{w_q^2}{2\,[H^{-1}]_{qq}}, \qquad
        \delta = -\frac{w_q}{[H^{-1}]_{qq}} \, H^{-1}_{:,q} .
        $$

        OBS (Hassibi & Stork, 1993) removes, in each row, the weight with the smallest *saliency* $\Delta E_q$ and
        applies $\delta$. When $H$ is diagonal, $[H^{-1}]_{qq} = 1/H_{qq} = T / (2 \|X_{:,q}\|^2)$ and
        $\Delta E_q = w_q^2 \|X_{:,q}\|^2 / T$: Wanda's score squared, up to a constant. Wanda is OBS with the
        correlations between features ignored and no compensation; SparseGPT (Frantar & Alistarh, 2023) is GPTQ's
        column-by-column algorithm with "round to zero" in place of "round to the grid".
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
    """)
    lesson.md(r"""
        ## 4. Exercise `masks`: remove the lowest scores

        `lowest_score_mask(scores, sparsity, per_row)` returns the keep-mask `(N, K)` `torch.bool` that removes
        `int(sparsity * n)` entries with the lowest scores: $n = K$ in every row when `per_row`, $n = NK$ over the
        whole matrix otherwise. `magnitude_mask(W, sparsity, per_row=False)` is that mask for the scores $|W|$.
        Refuse (`ValueError`) a `sparsity` outside $[0, 1]$ and scores that are not 2-D.
    """)
    lesson.exercise(
        "masks",
        r'''
        def lowest_score_mask(scores: torch.Tensor, sparsity: float, per_row: bool) -> torch.Tensor:
            """Keep-mask (N, K) bool: False on the int(sparsity * n) lowest scores of each row (per_row) or overall."""
            # TODO: validate; find the indices of the lowest scores (per row, or of the flattened matrix); mask them
            ### BEGIN SOLUTION
            if scores.dim() != 2:
                raise ValueError(f"scores must be 2-D (N, K), got shape {tuple(scores.shape)}")
            if not 0.0 <= sparsity <= 1.0:
                raise ValueError(f"sparsity must lie in [0, 1], got {sparsity}")
            flat = scores if per_row else scores.reshape(1, -1)  # (rows, n): one comparison group per row
            num_pruned = int(sparsity * flat.shape[1])
            lowest = torch.argsort(flat, dim=1)[:, :num_pruned]  # (rows, num_pruned)
            keep = torch.ones_like(flat, dtype=torch.bool)
            keep.scatter_(1, lowest, False)
            return keep.reshape(scores.shape)
            ### END SOLUTION


        def magnitude_mask(W: torch.Tensor, sparsity: float, per_row: bool = False) -> torch.Tensor:
            """Keep-mask that removes the smallest |W|."""
            # TODO: one line
            ### BEGIN SOLUTION
            return lowest_score_mask(W.abs(), sparsity, per_row)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `wanda`: weights times activation norms

        `wanda_scores(W, X)` takes calibration activations `X` of shape `(..., K)` (every leading index a token) and
        returns $S = |W| \cdot \|X_{:,j}\|_2$ `(N, K)` float32, the norms accumulated in float32 even for
        half-precision `X`. `wanda_mask(W, X, sparsity)` is the per-row mask of those scores. Refuse (`ValueError`) an
        `X` whose last dimension is not `K`.
    """)
    lesson.exercise(
        "wanda",
        r'''
        def wanda_scores(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
            """|W| * ||X[:, j]||_2 over all tokens: (N, K) float32."""
            # TODO: refuse a mismatched K; the column norms of X (tokens flattened, float32); broadcast over rows
            ### BEGIN SOLUTION
            if X.shape[-1] != W.shape[1]:
                raise ValueError(f"X has {X.shape[-1]} features, W expects {W.shape[1]}")
            feature_norms = X.reshape(-1, X.shape[-1]).float().norm(dim=0)  # (K,)
            return W.float().abs() * feature_norms[None, :]  # (N, K)
            ### END SOLUTION


        def wanda_mask(W: torch.Tensor, X: torch.Tensor, sparsity: float) -> torch.Tensor:
            """Keep-mask removing the lowest Wanda scores of each output row."""
            # TODO: one line, with your lowest_score_mask
            ### BEGIN SOLUTION
            return lowest_score_mask(wanda_scores(W, X), sparsity, per_row=True)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `n_m`: 2:4 masks

        `n_m_mask(scores, n=2, m=4)` returns the keep-mask `(N, K)` bool that keeps, in every row and every group of
        `m` consecutive columns `[g*m, (g+1)*m)`, the `n` highest scores. Refuse (`ValueError`) a `K` that is not a
        multiple of `m`, and `n` outside $[0, m]$.
    """)
    lesson.exercise(
        "n_m",
        r'''
        def n_m_mask(scores: torch.Tensor, n: int = 2, m: int = 4) -> torch.Tensor:
            """Keep the n highest scores of every m consecutive entries of each row: (N, K) bool."""
            # TODO: validate; view the groups as (N, K // m, m); keep the top n of each group
            ### BEGIN SOLUTION
            N, K = scores.shape
            if m <= 0 or K % m != 0:
                raise ValueError(f"K={K} must be a multiple of the group size m={m}")
            if not 0 <= n <= m:
                raise ValueError(f"n must lie in [0, m={m}], got {n}")
            groups = scores.reshape(N, K // m, m)  # (N, K/m, m)
            top = torch.topk(groups, n, dim=-1).indices  # (N, K/m, n)
            keep = torch.zeros_like(groups, dtype=torch.bool)
            keep.scatter_(-1, top, True)
            return keep.reshape(N, K)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `obs`: one OBS removal per row

        `obs_prune_one(W, H_inv)` removes, in every row of `W` `(N, K)`, the weight with the smallest saliency
        $w_q^2 / (2 [H^{-1}]_{qq})$ among the weights that are still nonzero, sets it to exactly 0 and compensates
        the row with $\delta$. It returns `(W_new, pruned, loss)`: `W_new` `(N, K)` (the input is not modified),
        `pruned` `(N,)` int64 (the column removed in each row), `loss` `(N,)` (its saliency). Already-zero weights
        are never chosen (their saliency would be 0). `H_inv` is the inverse Hessian of the weights you pass, so the
        compensation may move every other weight of the row; to keep earlier removals at 0, pass only a row's
        remaining weights and the inverse of their Hessian, as the second figure below does. Refuse (`ValueError`) an
        `H_inv` that is not `(K, K)`.
    """)
    lesson.exercise(
        "obs",
        r'''
        def obs_prune_one(W: torch.Tensor, H_inv: torch.Tensor):
            """Remove the least salient nonzero weight of each row with the OBS update; returns W_new, pruned, loss."""
            # TODO: validate H_inv; saliency w^2 / (2 diag(H_inv)) per weight, +inf where w is already 0
            # TODO: per row, the argmin q; delta = -w_q / H_inv[q, q] * H_inv[q, :]; set W_new[r, q] = 0 exactly
            ### BEGIN SOLUTION
            N, K = W.shape
            if tuple(H_inv.shape) != (K, K):
                raise ValueError(f"H_inv must be ({K}, {K}) for W of shape {tuple(W.shape)}, got {tuple(H_inv.shape)}")
            diag = torch.diagonal(H_inv)  # (K,)
            saliency = W**2 / (2 * diag[None, :])  # (N, K)
            saliency = torch.where(W == 0, torch.full_like(saliency, math.inf), saliency)
            loss, pruned = saliency.min(dim=1)  # (N,), (N,)
            w_q = W.gather(1, pruned[:, None])  # (N, 1)
            W_new = W - (w_q / diag[pruned][:, None]) * H_inv[pruned]  # (N, K): row r moves along H_inv[q_r, :]
            W_new.scatter_(1, pruned[:, None], 0.0)  # exactly zero
            return W_new, pruned, loss
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Magnitude, Wanda and 2:4 on a layer with outlier features

        A 128×256 layer whose inputs have 6 feature dimensions 30 times larger than the rest. Output error
        $\|X (W - W\odot M)^\top\| / \|X W^\top\|$ against sparsity, for magnitude (per layer and per row), Wanda,
        and the 2:4 pattern scored by magnitude and by Wanda.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        N, K, T = 128, 256, 512
        X_demo = torch.randn(T, K)
        X_demo[:, torch.randperm(K)[:6]] *= 30.0
        W_demo = torch.randn(N, K) * (1 + torch.rand(N, 1))  # rows of different scale
        Y_demo = X_demo @ W_demo.T

        def output_error(keep):
            return ((X_demo @ (W_demo * keep).T) - Y_demo).norm().item() / Y_demo.norm().item()

        try:
            sparsities = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
            curves = {
                "magnitude, per layer": [output_error(magnitude_mask(W_demo, p)) for p in sparsities],
                "magnitude, per row": [output_error(magnitude_mask(W_demo, p, per_row=True)) for p in sparsities],
                "Wanda (per row)": [output_error(wanda_mask(W_demo, X_demo, p)) for p in sparsities],
            }
            plt.figure(figsize=(6.5, 3.6))
            for label, errors in curves.items():
                plt.plot(sparsities, errors, marker="o", label=label)
            two_four = {
                "2:4 by magnitude": output_error(n_m_mask(W_demo.abs())),
                "2:4 by Wanda score": output_error(n_m_mask(wanda_scores(W_demo, X_demo))),
            }
            for (label, err), marker in zip(two_four.items(), ("x", "*")):
                plt.scatter([0.5], [err], marker=marker, s=80, zorder=3, label=label)
            plt.yscale("log"); plt.xlabel("sparsity"); plt.ylabel("‖Y − Ŷ‖ / ‖Y‖"); plt.grid(alpha=0.3)
            plt.title("Pruning a layer with 6 outlier features"); plt.legend(fontsize=7); plt.tight_layout(); plt.show()
            for label, errors in curves.items():
                print(f"{label:22s} error at 50%: {errors[4]:.3f}")
            for label, err in two_four.items():
                print(f"{label:22s} error:        {err:.3f}")
        except NotImplementedError:
            print("write the masks, wanda and n_m exercises to see the figure")
    """)
    lesson.md(r"""
        Read the figure at 50% (the printed numbers): magnitude pruning leaves about 26% output error and Wanda about
        6%, 4 to 5 times less. Magnitude removes many weights of the outlier features (they are no larger than the
        others), and each such removal costs 30 times more output error; Wanda protects them. Per-layer and per-row
        magnitude are close here because the rows differ in scale by at most 2 times. The 2:4
        pattern costs a little more than unstructured Wanda at the same 50%, the price of a pattern the hardware can
        use, and scoring the 2:4 groups by Wanda's score instead of magnitude matters just as much as it does
        unstructured.

        ### OBS: removal with compensation

        Removing weights one at a time with OBS, each followed by its compensation, against removing the same number
        by Wanda's score without compensation (on a small layer: OBS recomputes the inverse Hessian of the remaining
        weights of each row, which is what SparseGPT organises efficiently). On these correlated inputs the
        compensation is worth about a factor 5 in output error at 50% sparsity (the printed numbers): the remaining
        weights take over the work of the removed ones through the correlated features.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        N_s, K_s, T_s = 16, 32, 256
        X_s = torch.randn(T_s, 4) @ torch.randn(4, K_s) + 0.3 * torch.randn(T_s, K_s)  # correlated features
        W_s = torch.randn(N_s, K_s, dtype=torch.float64)
        X_s = X_s.double()
        H_s = 2 * X_s.T @ X_s / T_s + 1e-3 * torch.eye(K_s, dtype=torch.float64)
        Y_s = X_s @ W_s.T

        def rel_error(W):
            return ((X_s @ W.T) - Y_s).norm().item() / Y_s.norm().item()

        try:
            W_obs, obs_errors = W_s.clone(), []
            for removed in range(1, K_s // 2 + 1):
                # one row at a time: the inverse Hessian restricted to the row's remaining weights
                W_next = W_obs.clone()
                for r in range(N_s):
                    alive = (W_obs[r] != 0).nonzero().flatten()
                    H_inv_alive = torch.linalg.inv(H_s[alive][:, alive])
                    w_new, _, _ = obs_prune_one(W_obs[r : r + 1, alive], H_inv_alive)
                    W_next[r] = 0.0
                    W_next[r, alive] = w_new[0]
                W_obs = W_next
                obs_errors.append(rel_error(W_obs))
            wanda_errors = [rel_error(W_s * wanda_mask(W_s, X_s, k / K_s)) for k in range(1, K_s // 2 + 1)]
            fractions = [k / K_s for k in range(1, K_s // 2 + 1)]
            plt.figure(figsize=(6.5, 3.4))
            plt.plot(fractions, wanda_errors, marker=".", label="Wanda (no update)")
            plt.plot(fractions, obs_errors, marker=".", label="OBS, one weight per row per step")
            plt.yscale("log"); plt.xlabel("sparsity"); plt.ylabel("‖Y − Ŷ‖ / ‖Y‖"); plt.legend(); plt.grid(alpha=0.3)
            plt.title("Correlated inputs: compensation pays"); plt.tight_layout(); plt.show()
            print(f"at 50%: Wanda {wanda_errors[-1]:.3f}, OBS {obs_errors[-1]:.3f}")
        except NotImplementedError:
            print("write obs_prune_one (and wanda) to see the figure")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`lowest_score_mask`.** One code path for both granularities: per layer is per row of the flattened
        `(1, NK)` view. `argsort` then `scatter_` writes `False` at exactly `int(p * n)` positions, so the sparsity is
        exact even with tied scores (a threshold `scores > kth_value` would prune every tie and overshoot).

        **`wanda_scores`.** The norms are taken over every token (`reshape(-1, K)`), in float32: the squares of
        half-precision activations overflow float16 beyond 256 and lose digits in bfloat16. Broadcasting `[None, :]`
        multiplies column $j$ of every row by the norm of feature $j$. Wanda's reference code accumulates the squared
        norms over calibration batches with a forward hook, as `p02.gptq` accumulates $H$.

        **`n_m_mask`.** The `(N, K/m, m)` view makes each group a last axis; `topk` picks its `n` survivors. Groups run
        along $K$, the reduction dimension, because that is what the sparse tensor core compresses (a 2:4 weight is
        stored as `(N, K/2)` values plus indices).

        **`obs_prune_one`.** The saliency of an already-pruned weight is set to $+\infty$ so it is never chosen again.
        Row $r$ moves along row $q_r$ of $H^{-1}$ (symmetric: the same as the column), all rows in one gather
        (`H_inv[pruned]`, `(N, K)`). The removed weight is then set to exactly 0.

        **The usual mistakes, and why they are wrong**:
        - Removing the *largest* scores; a per-layer comparison where per-row was asked (or the reverse); a
          threshold that prunes all ties.
        - Wanda with $\|X\|^2$ or the norm over the wrong axis (per token instead of per feature), or activations
          multiplied along rows.
        - 2:4 groups taken down the columns, or the `n` lowest kept.
        - OBS with $H$ instead of $H^{-1}$, $|w|$ instead of $w^2$ in the saliency (a different order), an
          already-zero weight chosen again, the compensation without the division by $[H^{-1}]_{qq}$.

        **Cost.** Magnitude and Wanda: a sort per row, $O(NK \log K)$, once; Wanda also needs one calibration pass for
        the norms. OBS as written here needs $H^{-1}$ of each row's remaining weights; SparseGPT gets all rows at once
        in $O(K^3 + NK^2)$ with GPTQ's Cholesky trick, where all rows share the column order.

        **In production.** Wanda and SparseGPT are the standard one-shot LLM pruners (`llm-compressor` ships both,
        with 2:4 masks); PyTorch has `torch.sparse.to_sparse_semi_structured` to turn a 2:4-masked weight into the
        compressed format that runs on sparse tensor cores (cuSPARSELt or CUTLASS), and `torch.nn.utils.prune` for
        masks on modules during training. Pruned LLMs are usually fine-tuned or distilled briefly afterwards to
        recover accuracy (`p02.distillation`).
    """)
    lesson.mistakes()
    return lesson
