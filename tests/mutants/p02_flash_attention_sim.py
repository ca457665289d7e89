"""Realistic wrong versions of the p02.flash_attention_sim solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "flash_attention_forward",
        "accumulator_not_rescaled",
        "forgets to rescale the output accumulator when the running max grows",
        [("acc = alpha * acc + p @ vc", "acc = acc + p @ vc")],
        mistake_zh="运行最大值变大时忘了重新缩放输出累加器",
    ),
    Mutant(
        "flash_attention_forward",
        "denominator_not_rescaled",
        "rescales the accumulator but not the running denominator",
        [("l = alpha * l + p.sum(dim=-1, keepdim=True)", "l = l + p.sum(dim=-1, keepdim=True)")],
        mistake_zh="重新缩放了累加器，却没有缩放运行中的分母",
    ),
    Mutant(
        "flash_attention_forward",
        "block_max_only",
        "normalises each block by its own max instead of the running max",
        [("m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))", "m_new = s.amax(dim=-1, keepdim=True)")],
        mistake_zh="每个块用自己的最大值而不是运行最大值归一化",
    ),
    Mutant(
        "flash_attention_forward",
        "lse_without_log_l",
        "returns the running max as the log-sum-exp",
        [("(m + torch.log(l)).squeeze(-1)", "m.squeeze(-1)")],
        mistake_zh="把运行最大值当作 log-sum-exp 返回",
    ),
    Mutant(
        "flash_attention_forward",
        "causal_mask_diagonal",
        "masks the diagonal too (cols >= rows): each query no longer sees itself",
        [('s = s.masked_fill(cols > rows, float("-inf"))', 's = s.masked_fill(cols >= rows, float("-inf"))')],
        mistake_zh="连对角线也屏蔽了（cols >= rows）：每个 query 看不到自己",
    ),
    Mutant(
        "flash_attention_forward",
        "skips_diagonal_blocks",
        "stops the key loop at the query block's start, skipping the tiles on the diagonal",
        [("k_stop = q_end if causal else Sk", "k_stop = max(q_start, 1) if causal else Sk")],
        mistake_zh="key 循环停在 query 块的起点，跳过了对角线上的分块",
    ),
    Mutant(
        "flash_attention_forward",
        "no_upcast",
        "computes in the input dtype (fp16 accumulators)",
        [("compute_dtype = torch.promote_types(q.dtype, torch.float32)", "compute_dtype = q.dtype")],
        mistake_zh="在输入的数据类型下计算（fp16 累加器）",
    ),
    Mutant(
        "flash_attention_forward",
        "full_score_matrix",
        "computes the whole score matrix once and slices tiles out of it",
        [
            (
                "q_blk = qc[:, :, q_start:q_end] * scale ",
                "all_s = (qc * scale) @ kc.transpose(-1, -2); q_blk = qc[:, :, q_start:q_end] * scale ",
            ),
        ],
        mistake_zh="一次算出整个分数矩阵，再从中切出分块",
    ),
    Mutant(
        "flash_attention_forward",
        "calls_the_builtin",
        "hands the work to SDPA, the builtin the lesson teaches",
        [
            (
                "return out.to(q.dtype), lse",
                "return F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal, scale=scale).to(q.dtype), lse",
            )
        ],
        mistake_zh="把工作交给本课要讲解的内置函数 SDPA",
    ),
    Mutant(
        "flash_attention_backward",
        "delta_from_dp",
        "takes delta as the row sum of dP instead of sum(P * dP) = rowsum(dO * O)",
        [("ds = p * (dp - delta[:, :, q_start:q_end])", "ds = p * (dp - dp.sum(dim=-1, keepdim=True))")],
        mistake_zh="delta 取 dP 的行和，而不是 sum(P * dP) = rowsum(dO * O)",
    ),
    Mutant(
        "flash_attention_backward",
        "dq_unscaled",
        "forgets the softmax scale in dq",
        [("dq[:, :, q_start:q_end] += (ds @ k_blk) * scale", "dq[:, :, q_start:q_end] += ds @ k_blk")],
        mistake_zh="dq 里忘了 softmax 的缩放因子",
    ),
    Mutant(
        "flash_attention_backward",
        "p_without_lse",
        "recomputes p as exp(s) without subtracting the log-sum-exp",
        [("p = torch.exp(s - lse_c[:, :, q_start:q_end])", "p = torch.exp(s)")],
        mistake_zh="重算 p 时用 exp(s)，没有减去 log-sum-exp",
    ),
    Mutant(
        "flash_attention_backward",
        "dk_not_transposed",
        "uses q^T-side product for dk: dk from ds @ ... in the wrong orientation (sum over keys)",
        [
            (
                "dk[:, :, k_start:k_end] += (ds.transpose(-1, -2) @ q_blk) * scale",
                "dk[:, :, k_start:k_end] += (ds.sum(dim=-2, keepdim=True).transpose(-1, -2) * q_blk.mean(dim=-2, keepdim=True)) * scale",
            )
        ],
        mistake_zh="dk 用了 q^T 一侧的乘积：方向错了（对 key 求和）",
    ),
    Mutant(
        "flash_attention_backward",
        "causal_queries_skipped",
        "starts the query loop at the key block's index rounded up, missing the diagonal's first rows",
        [("range(first_q - first_q % block_q, Sq, block_q)", "range(first_q + (-first_q) % block_q, Sq, block_q)")],
        mistake_zh="query 循环从 key 块下标向上取整处开始，漏了对角线块的前几行",
    ),
    Mutant(
        "flash_attention",
        "saves_the_scores",
        "saves the probabilities for the backward 'to be faster': an (S, S) tensor per head",
        [
            (
                "ctx.save_for_backward(q, k, v, out, lse)",
                "ctx.save_for_backward(q, k, v, out, lse, torch.exp(q @ k.transpose(-1, -2) - lse[..., None]))",
            )
        ],
        mistake_zh="为了“更快”把概率保存给反向：每个头一个 (S, S) 张量",
    ),
    Mutant(
        "flash_attention",
        "backward_ignores_causal",
        "calls the backward without the causal flag",
        [
            (
                "flash_attention_backward(q, k, v, out, lse, grad_out, causal, block_q, block_k, scale)",
                "flash_attention_backward(q, k, v, out, lse, grad_out, False, block_q, block_k, scale)",
            )
        ],
        mistake_zh="调用反向时没有传 causal 标志",
    ),
    Mutant(
        "flash_attention",
        "gradients_swapped",
        "returns dk and dv in the wrong order",
        [("return dq, dk, dv, None, None, None, None", "return dq, dv, dk, None, None, None, None")],
        mistake_zh="dk 和 dv 的返回顺序反了",
    ),
]
