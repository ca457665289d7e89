"""Realistic wrong versions of the p02.hyper_connections solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "residual_stack",
        "post_norm_is_pre_norm",
        "post-norm written as norm(h) + f(h): the norm moved onto the residual input instead of the sum",
        [("h = norm(alpha * h + layer(h))                   #", "h = alpha * norm(h) + layer(h)  #")],
    ),
    Mutant(
        "residual_stack",
        "alpha_on_the_block",
        "scales the block's output by alpha instead of the residual",
        [("h = alpha * h + layer(norm(h))                   #", "h = h + alpha * layer(norm(h))  #")],
    ),
    Mutant(
        "residual_stack",
        "pre_norm_normalises_the_residual",
        "adds the normalised stream back instead of the stream itself",
        [("h = alpha * h + layer(norm(h))                   #", "h = alpha * norm(h) + layer(norm(h))  #")],
    ),
    Mutant(
        "hyper_connection",
        "stream_mix_not_transposed",
        "computes A_r H instead of A_r^T H (same at the identity, wrong once A_r is not symmetric)",
        [('torch.einsum("...ij,...id->...jd", A_r, H)', 'torch.einsum("...ij,...jd->...id", A_r, H)')],
    ),
    Mutant(
        "hyper_connection",
        "block_reads_the_plain_sum",
        "feeds the block the plain sum of the streams, ignoring A_m",
        [('h_in = torch.einsum("...n,...nd->...d", A_m, H)', "h_in = H.sum(dim=-2)")],
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
    ),
    Mutant(
        "hyper_connection_module",
        "dynamic_without_norm",
        "computes the dynamic weights from the raw streams instead of norm(H)",
        [("H_bar = self.norm(H)", "H_bar = H")],
    ),
    Mutant(
        "hyper_connection_module",
        "s_alpha_for_b",
        "scales the dynamic part of B by s_alpha instead of s_beta",
        [("B = self.B + self.s_beta * torch.tanh", "B = self.B + self.s_alpha * torch.tanh")],
    ),
    Mutant(
        "hyper_connection_stack",
        "streams_averaged",
        "averages the streams at the end instead of summing them",
        [("return H.sum(dim=-2)", "return H.mean(dim=-2)")],
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
    ),
    Mutant(
        "sinkhorn",
        "rows_only",
        "normalises only the rows: row-stochastic, not doubly stochastic",
        [("        log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)        # columns sum to 1\n", "")],
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
    ),
    Mutant(
        "hyper_connection_module",
        "dynamic_A_r_transposed",
        "transposes the dynamic correction of A_r: column i from stream i instead of row i",
        [("torch.tanh(H_bar @ self.W_r)", "torch.tanh(H_bar @ self.W_r).transpose(-1, -2)")],
    ),
    Mutant(
        "sinkhorn",
        "columns_first",
        "normalises the columns first, then the rows (the rows then sum to 1, the columns only approximately)",
        [
            ("dim=-1, keepdim=True)        # rows sum to 1", "dim=-2, keepdim=True)        # rows sum to 1"),
            ("dim=-2, keepdim=True)        # columns sum to 1", "dim=-1, keepdim=True)        # columns sum to 1"),
        ],
    ),
]
