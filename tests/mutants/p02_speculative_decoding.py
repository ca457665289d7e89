"""Realistic wrong versions of the p02.speculative_decoding solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "verify",
        "ratio_inverted",
        "accepts with probability min(1, q/p) instead of min(1, p/q)",
        [("(p_x / q_x.clamp_min(1e-30)).clamp(max=1.0)", "(q_x / p_x.clamp_min(1e-30)).clamp(max=1.0)")],
        mistake_zh="按 min(1, q/p) 而不是 min(1, p/q) 的概率接受",
    ),
    Mutant(
        "verify",
        "ratio_not_capped",
        "returns p/q without capping it at 1",
        [("(p_x / q_x.clamp_min(1e-30)).clamp(max=1.0)", "(p_x / q_x.clamp_min(1e-30))")],
        mistake_zh="返回 p/q 而没有截断到 1",
    ),
    Mutant(
        "verify",
        "resample_from_target",
        "after a rejection samples from p instead of the residual max(0, p - q)",
        [
            (
                "residual = residual_distribution(target_probs[i : i + 1], draft_probs[i : i + 1])  # (1, V)",
                "residual = target_probs[i : i + 1]",
            )
        ],
        mistake_zh="拒绝后从 p 而不是残差 max(0, p - q) 采样",
    ),
    Mutant(
        "verify",
        "residual_not_clamped",
        "takes p - q without its positive part (negative weights)",
        [("excess = (p - q).clamp_min(0.0)", "excess = (p - q).abs()")],
        mistake_zh="取 p - q 却没取正部（出现负权重）",
    ),
    Mutant(
        "verify",
        "no_bonus",
        "emits no bonus token when every draft is accepted",
        [
            (
                "emitted.append(int(torch.multinomial(target_probs[k : k + 1], 1, generator=generator)))  # bonus",
                "pass",
            )
        ],
        mistake_zh="所有草稿都被接受时不输出额外的 token",
    ),
    Mutant(
        "verify",
        "continues_after_rejection",
        "keeps verifying the later drafts after a rejection",
        [
            (
                "return torch.tensor(emitted, dtype=torch.long), i",
                "continue",
            )
        ],
        mistake_zh="拒绝之后还继续验证后面的草稿",
    ),
    Mutant(
        "verify",
        "uniforms_from_global_rng",
        "draws the acceptance uniforms from the global random number generator instead of `generator`",
        [
            (
                "torch.rand((), generator=generator, dtype=torch.float64)",
                "torch.rand((), dtype=torch.float64)",
            )
        ],
        mistake_zh="接受判定用的均匀随机数取自全局随机数生成器，而不是 `generator`",
    ),
    Mutant(
        "speculative_generate",
        "target_off_by_one",
        "reads the target's probabilities one position late (columns T .. T+k)",
        [
            (
                "p = torch.softmax(target(drafted)[0, -k - 1 :].float(), dim=-1)             # (k + 1, V)",
                "p = torch.softmax(torch.cat((target(drafted)[0, -k:], target(drafted)[0, -1:])).float(), dim=-1)",
            )
        ],
        mistake_zh="读目标模型的概率晚了一个位置（第 T .. T+k 列）",
    ),
    Mutant(
        "speculative_generate",
        "drafts_from_global_rng",
        "samples the draft tokens from the global random number generator instead of `generator`",
        [
            (
                "torch.multinomial(q, 1, generator=generator)[0]",
                "torch.multinomial(q, 1)[0]",
            )
        ],
        mistake_zh="草稿 token 从全局随机数生成器采样，而不是 `generator`",
    ),
    Mutant(
        "speculative_generate",
        "greedy_accepts_all",
        "greedy mode accepts the whole block without comparing",
        [("accepted = int(matches.cumprod(0).sum())", "accepted = k")],
        mistake_zh="贪心模式不比较就接受整个块",
    ),
    Mutant(
        "speculative_generate",
        "greedy_emits_draft_at_mismatch",
        "in greedy mode emits the draft's token at the first mismatch instead of the target's argmax",
        [
            (
                "emitted = torch.cat((draft_tokens[:accepted], best[accepted : accepted + 1]))",
                "emitted = torch.cat((draft_tokens[:accepted], draft_tokens[accepted : accepted + 1]))",
            )
        ],
        mistake_zh="贪心模式下在第一个不匹配处输出草稿的 token，而不是目标模型的 argmax",
    ),
    Mutant(
        "speculative_generate",
        "greedy_any_match",
        "greedy mode counts all matches instead of the leading ones",
        [("accepted = int(matches.cumprod(0).sum())", "accepted = int(matches.sum())")],
        mistake_zh="贪心模式统计所有匹配，而不是开头连续的匹配",
    ),
    Mutant(
        "speculative_generate",
        "draft_greedy_when_sampling",
        "the draft always proposes its argmax, but verify_block is told the draft sampled from q",
        [
            (
                "token = q.argmax() if greedy else torch.multinomial(q, 1, generator=generator)[0]",
                "token = q.argmax()",
            )
        ],
        mistake_zh="草稿模型总是提议 argmax，却告诉 verify_block 草稿是从 q 采样的",
    ),
    Mutant(
        "speedup",
        "expected_tokens_k",
        "sums alpha^i for i < k instead of i <= k (forgets the bonus token)",
        [("return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)", "return (1.0 - alpha ** k) / (1.0 - alpha)")],
        mistake_zh="对 i < k 而不是 i <= k 累加 alpha^i（忘了额外的 token）",
    ),
    Mutant(
        "speedup",
        "acceptance_max",
        "uses max(p, q) instead of min",
        [("return torch.minimum(p, q).sum(dim=-1)", "return torch.maximum(p, q).sum(dim=-1)")],
        mistake_zh="用 max(p, q) 而不是 min",
    ),
    Mutant(
        "speedup",
        "cost_without_target",
        "divides by k * c only, forgetting the target call",
        [
            (
                "return expected_tokens(alpha, k) / (k * cost_ratio + 1.0)",
                "return expected_tokens(alpha, k) / max(k * cost_ratio, 1.0)",
            )
        ],
        mistake_zh="只除以 k * c，忘了目标模型的那次调用",
    ),
]
