"""Realistic wrong versions of the p02.mtp solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "mtp_module",
        "embedding_first",
        "concatenates the embedding before the hidden state (vLLM's checkpoint order, not the report's equation)",
        [
            (
                "torch.cat([self.norm_h(h), self.norm_e(e)], dim=-1)",
                "torch.cat([self.norm_e(e), self.norm_h(h)], dim=-1)",
            )
        ],
        mistake_zh="把嵌入拼接在隐状态之前（vLLM 检查点的顺序，不是报告里的公式）",
    ),
    Mutant(
        "mtp_module",
        "one_norm_for_both",
        "normalises the embedding with the hidden state's norm",
        [
            (
                "torch.cat([self.norm_h(h), self.norm_e(e)], dim=-1)",
                "torch.cat([self.norm_h(h), self.norm_h(e)], dim=-1)",
            )
        ],
        mistake_zh="用隐状态的 norm 去归一化嵌入",
    ),
    Mutant(
        "mtp_module",
        "extra_residual",
        "adds the previous hidden state around the module",
        [("return self.block(self.proj(x))", "return h + self.block(self.proj(x))")],
        mistake_zh="在模块外面又加了一条前一个隐状态的残差",
    ),
    Mutant(
        "mtp_logits",
        "embedding_off_by_one",
        "depth k embeds t_{i+k-1} instead of t_{i+k}",
        [
            (
                "h = module(h[:, : T - k], embed(tokens[:, k:]))",
                "h = module(h[:, : T - k], embed(tokens[:, k - 1 : T - 1]))",
            )
        ],
        mistake_zh="深度 k 嵌入的是 t_{i+k-1} 而不是 t_{i+k}",
    ),
    Mutant(
        "mtp_logits",
        "parallel_heads",
        "every depth reads the main model's h^0 instead of the previous depth's output",
        [("h = module(h[:, : T - k], embed(tokens[:, k:]))", "h = module(h_main[:, : T - k], embed(tokens[:, k:]))")],
        mistake_zh="每个深度都读主模型的 h^0，而不是前一个深度的输出",
    ),
    Mutant(
        "mtp_logits",
        "short_sequences_allowed",
        "accepts T = D + 1 (the last depth has no target)",
        [("if T < depth + 2:", "if T < depth + 1:")],
        mistake_zh="接受 T = D + 1（最后一个深度没有目标）",
    ),
    Mutant(
        "mtp_loss",
        "targets_shifted_by_k",
        "scores depth k on tokens[:, k:T-1]: targets shifted by k instead of k + 1 (one step too close)",
        [
            (
                "lg[:, :n].flatten(0, 1), tokens[:, k + 1 :].flatten()",
                "lg[:, :n].flatten(0, 1), tokens[:, k : T - 1].flatten()",
            )
        ],
        mistake_zh="深度 k 用 tokens[:, k:T-1] 打分：目标错开 k 而不是 k + 1（近了一步）",
    ),
    Mutant(
        "mtp_loss",
        "depths_summed",
        "sums the depths instead of averaging them",
        [("return lam * per_depth.mean(), per_depth", "return lam * per_depth.sum(), per_depth")],
        mistake_zh="对各深度求和而不是求平均",
    ),
    Mutant(
        "mtp_loss",
        "lambda_forgotten",
        "returns the mean over depths without the weight lam",
        [("return lam * per_depth.mean(), per_depth", "return per_depth.mean(), per_depth")],
        mistake_zh="返回各深度的平均，没有乘权重 lam",
    ),
    Mutant(
        "mtp_loss",
        "log_of_softmax",
        "computes the cross-entropy as -log(softmax) gathered at the target: -inf once logits are large in float32",
        [
            (
                "F.cross_entropy(lg[:, :n].flatten(0, 1), tokens[:, k + 1 :].flatten())",
                "F.nll_loss(lg[:, :n].flatten(0, 1).softmax(-1).log(), tokens[:, k + 1 :].flatten())",
            )
        ],
        mistake_zh="交叉熵用 -log(softmax) 在目标处取值：float32 下 logits 一大就是 -inf",
    ),
    Mutant(
        "mtp_draft",
        "same_token_every_depth",
        "feeds next_token to every depth instead of the draft decided just before",
        [("seq = torch.cat([seq, d_k[:, None]], dim=1)", "seq = torch.cat([seq, next_token[:, None]], dim=1)")],
        mistake_zh="每个深度都喂 next_token，而不是前一步刚决定的草稿",
    ),
    Mutant(
        "mtp_draft",
        "h0_every_depth",
        "drafts every depth from the main model's h^0",
        [("h = module(h, embed(seq[:, k : k + n]))", "h = module(h_main, embed(seq[:, k : k + n]))")],
        mistake_zh="每个深度都从主模型的 h^0 起草",
    ),
    Mutant(
        "mtp_draft",
        "embedding_window_off_by_one",
        "depth k embeds seq[:, k-1:k-1+n], one token behind",
        [("h = module(h, embed(seq[:, k : k + n]))", "h = module(h, embed(seq[:, k - 1 : k - 1 + n]))")],
        mistake_zh="深度 k 嵌入 seq[:, k-1:k-1+n]，落后一个 token",
    ),
]
