"""Realistic wrong versions of the p05.speculative_engine solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "CachedLM",
        "rollback_length_only",
        "resets the caches' length but not their per-row lengths: the next write lands after the stale keys",
        [("cache.lengths.fill_(length)", "pass")],
        mistake_zh="回滚时只重置缓存的 length，没有重置每行的 lengths：下一次写入落在过期的 key 之后",
    ),
    Mutant(
        "CachedLM",
        "rollback_does_nothing",
        "only checks the length and never truncates the caches",
        [("cache.length = length", "pass")],
        mistake_zh="只检查长度，从不截断缓存",
    ),
    Mutant(
        "CachedLM",
        "last_row_only",
        "returns the logits of the last fed token only, (1, V), instead of one row per token",
        [("return logits[0].float()", "return logits[0, -1:].float()")],
        mistake_zh="只返回最后一个输入 token 的 logits，形状 (1, V)，而不是每个 token 一行",
    ),
    Mutant(
        "speculative_decode",
        "accept_without_test",
        "accepts every draft without the min(1, p/q) test: the output follows the draft's distribution",
        [
            (
                "ok = bool(torch.rand((), generator=generator, dtype=torch.float64) < min(1.0, float(p[x] / q[x])))",
                "ok = True",
            )
        ],
        mistake_zh="不做 min(1, p/q) 检验就接受所有草稿：输出服从草稿模型的分布",
    ),
    Mutant(
        "speculative_decode",
        "resample_from_target",
        "resamples a rejected position from the target's p instead of the residual max(0, p - q)",
        [("residual = (p - q).clamp_min(0.0)", "residual = p.clone()")],
        mistake_zh="被拒绝的位置从目标模型的 p 重新采样，而不是从残差分布 max(0, p - q)",
    ),
    Mutant(
        "speculative_decode",
        "residual_q_minus_p",
        "takes the residual of q - p instead of p - q",
        [("residual = (p - q).clamp_min(0.0)", "residual = (q - p).clamp_min(0.0)")],
        mistake_zh="残差取 q - p 而不是 p - q",
    ),
    Mutant(
        "speculative_decode",
        "target_not_rolled_back",
        "never rolls the target back: its cache keeps the rejected drafts",
        [("target.rollback(start + accepted)", "pass")],
        mistake_zh="从不回滚目标模型：它的缓存里留着被拒绝的草稿",
    ),
    Mutant(
        "speculative_decode",
        "no_bonus_token",
        "emits nothing more when every draft is accepted (no bonus token from p_{k+1})",
        [
            (
                "emitted = int(bonus.argmax()) if greedy else int(torch.multinomial(bonus, 1, generator=generator))",
                "emitted = None",
            ),
            ("new = drafts[:accepted] + [emitted]", "new = drafts[:accepted] + ([] if emitted is None else [emitted])"),
        ],
        mistake_zh="所有草稿都被接受时不再多输出一个 token（没有来自 p_{k+1} 的奖励 token）",
    ),
    Mutant(
        "speculative_decode",
        "greedy_emits_draft",
        "in greedy mode emits the draft's token at the first mismatch instead of the target's argmax",
        [("emitted = int(p.argmax()) if greedy else", "emitted = x if greedy else")],
        mistake_zh="贪心模式下在第一个不一致处输出草稿的 token，而不是目标模型的 argmax",
    ),
    Mutant(
        "CachedLM",
        "ignores_max_len",
        "builds every layer's cache with the default room of 256 positions whatever max_len says",
        [
            (
                "self.caches = [KVCache(max_len) for _ in model.layers]",
                "self.caches = [KVCache(256) for _ in model.layers]",
            )
        ],
        mistake_zh="无论 max_len 是多少，每层的缓存都按默认的 256 个位置构造",
    ),
]
