"""Realistic wrong versions of the p02.hyper_connections solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "residual_stack",
        "post_norm_is_pre_norm",
        "post-norm written as norm(h) + f(h): the norm moved onto the residual input instead of the sum",
        [("h = norm(alpha * h + layer(h))                   #", "h = alpha * norm(h) + layer(h)  #")],
        mistake_zh="post-norm 写成 norm(h) + f(h)：norm 作用到了残差输入上，而不是和上",
    ),
    Mutant(
        "residual_stack",
        "alpha_on_the_block",
        "scales the block's output by alpha instead of the residual",
        [("h = alpha * h + layer(norm(h))                   #", "h = h + alpha * layer(norm(h))  #")],
        mistake_zh="alpha 乘在块的输出上，而不是残差上",
    ),
    Mutant(
        "residual_stack",
        "pre_norm_normalises_the_residual",
        "adds the normalised stream back instead of the stream itself",
        [("h = alpha * h + layer(norm(h))                   #", "h = alpha * norm(h) + layer(norm(h))  #")],
        mistake_zh="加回的是归一化后的流，而不是流本身",
    ),
    Mutant(
        "hyper_connection",
        "stream_mix_not_transposed",
        "computes A_r H instead of A_r^T H (same at the identity, wrong once A_r is not symmetric)",
        [('torch.einsum("...ij,...id->...jd", A_r, H)', 'torch.einsum("...ij,...jd->...id", A_r, H)')],
        mistake_zh="计算 A_r H 而不是 A_r^T H（在单位阵处相同，A_r 不对称时就错）",
    ),
    Mutant(
        "hyper_connection",
        "block_reads_the_plain_sum",
        "feeds the block the plain sum of the streams, ignoring A_m",
        [('h_in = torch.einsum("...n,...nd->...d", A_m, H)', "h_in = H.sum(dim=-2)")],
        mistake_zh="喂给块的是各流的简单和，忽略了 A_m",
    ),
    Mutant(
        "hyper_connection",
        "block_per_stream",
        "runs the block on every stream separately and weighs the outputs by A_m",
        [
            (
                'h_in = torch.einsum("...n,...nd->...d", A_m, H)                   # (..., d)\n    out = layer(h_in)',
                'out = torch.einsum("...n,...nd->...d", A_m, layer(H))',
            )
        ],
        mistake_zh="对每条流分别运行块，再按 A_m 加权输出",
    ),
    Mutant(
        "hyper_connection_module",
        "reads_all_streams_at_init",
        "initialises A_m to ones, so the block reads n times the stream",
        [
            (
                "self.A_m = nn.Parameter(F.one_hot(torch.tensor(layer_index % num_streams), num_streams).float())",
                "self.A_m = nn.Parameter(torch.ones(num_streams))",
            )
        ],
        mistake_zh="A_m 初始化为全 1，块读到的是流的 n 倍",
    ),
    Mutant(
        "hyper_connection_module",
        "writes_one_stream_at_init",
        "initialises B one-hot, so only one stream receives the block's output",
        [
            (
                "self.B = nn.Parameter(torch.ones(num_streams))",
                "self.B = nn.Parameter(F.one_hot(torch.tensor(layer_index % num_streams), num_streams).float())",
            )
        ],
        mistake_zh="B 初始化为 one-hot，只有一条流收到块的输出",
    ),
    Mutant(
        "hyper_connection_module",
        "dynamic_without_norm",
        "computes the dynamic weights from the raw streams instead of norm(H)",
        [("H_bar = self.norm(H)", "H_bar = H")],
        mistake_zh="动态权重由原始的流而不是 norm(H) 计算",
    ),
    Mutant(
        "hyper_connection_module",
        "s_alpha_for_b",
        "scales the dynamic part of B by s_alpha instead of s_beta",
        [("B = self.B + self.s_beta * torch.tanh", "B = self.B + self.s_alpha * torch.tanh")],
        mistake_zh="B 的动态部分乘的是 s_alpha 而不是 s_beta",
    ),
    Mutant(
        "hyper_connection_stack",
        "streams_averaged",
        "averages the streams at the end instead of summing them",
        [("return H.sum(dim=-2)", "return H.mean(dim=-2)")],
        mistake_zh="结尾对各流取平均而不是求和",
    ),
    Mutant(
        "hyper_connection_stack",
        "x_in_one_stream",
        "puts x into the first stream and zeros into the others",
        [
            (
                "H = x.unsqueeze(-2).expand(*x.shape[:-1], num_streams, x.shape[-1])",
                "H = torch.cat([x.unsqueeze(-2), x.new_zeros(*x.shape[:-1], num_streams - 1, x.shape[-1])], dim=-2)",
            )
        ],
        mistake_zh="把 x 放进第一条流，其余流填零",
    ),
    Mutant(
        "sinkhorn",
        "rows_only",
        "normalises only the rows: row-stochastic, not doubly stochastic",
        [("        log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)        # columns sum to 1\n", "")],
        mistake_zh="只归一化行：行随机，而不是双随机",
    ),
    Mutant(
        "sinkhorn",
        "rows_twice",
        "normalises over the same axis twice",
        [
            (
                "log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)",
                "log_m = log_m - torch.logsumexp(log_m, dim=-1, keepdim=True)",
            )
        ],
        mistake_zh="沿同一个轴归一化了两次",
    ),
    Mutant(
        "sinkhorn",
        "exp_first",
        "exponentiates first and divides by sums: overflows on large logits",
        [
            (
                "log_m = logits                                                          # (..., n, n)",
                "m = logits.exp()\n    log_m = (m / m.sum(dim=-1, keepdim=True)).log()",
            )
        ],
        mistake_zh="先取 exp 再除以和：logits 大时溢出",
    ),
    Mutant(
        "hyper_connection_module",
        "dynamic_A_r_transposed",
        "transposes the dynamic correction of A_r: column i from stream i instead of row i",
        [("torch.tanh(H_bar @ self.W_r)", "torch.tanh(H_bar @ self.W_r).transpose(-1, -2)")],
        mistake_zh="A_r 的动态修正被转置：第 i 列来自流 i，而不是第 i 行",
    ),
    Mutant(
        "sinkhorn",
        "columns_first",
        "normalises the columns first, then the rows (the rows then sum to 1, the columns only approximately)",
        [
            ("dim=-1, keepdim=True)        # rows sum to 1", "dim=-2, keepdim=True)        # rows sum to 1"),
            ("dim=-2, keepdim=True)        # columns sum to 1", "dim=-1, keepdim=True)        # columns sum to 1"),
        ],
        mistake_zh="先归一化列再归一化行（于是行和为 1，列和只是近似为 1）",
    ),
]
