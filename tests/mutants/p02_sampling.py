"""Realistic wrong versions of the p02.sampling solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "truncation",
        "top_k_removes_the_kth",
        "compares with <= and so removes the k-th largest score itself",
        [("scores.masked_fill(scores < kth_largest", "scores.masked_fill(scores <= kth_largest")],
        mistake_zh="用 <= 比较，把第 k 大的分数本身也去掉了",
    ),
    Mutant(
        "truncation",
        "top_p_inclusive_cumsum",
        "uses the inclusive cumulative sum: the token that crosses top_p is dropped",
        [("mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs", "mass_before = sorted_probs.cumsum(dim=-1)")],
        mistake_zh="用包含自身的累计和：越过 top_p 的那个 token 被丢掉了",
    ),
    Mutant(
        "truncation",
        "top_p_not_scattered_back",
        "applies the decision made on sorted positions to the unsorted tokens",
        [("remove = remove_sorted.scatter(-1, order, remove_sorted)", "remove = remove_sorted")],
        mistake_zh="在排序后位置上做的决定直接套用到未排序的 token 上",
    ),
    Mutant(
        "truncation",
        "top_p_ascending",
        "sorts ascending, so the nucleus is built from the least likely tokens",
        [("probs.sort(dim=-1, descending=True)", "probs.sort(dim=-1, descending=False)")],
        mistake_zh="升序排序，nucleus 由最不可能的 token 组成",
    ),
    Mutant(
        "truncation",
        "min_p_absolute",
        "compares probabilities with min_p itself, not min_p times the top probability (epsilon sampling)",
        [("threshold = self.min_p * probs.amax(dim=-1, keepdim=True)", "threshold = self.min_p + 0 * probs[..., :1]")],
        mistake_zh="概率直接与 min_p 比较，而不是与 min_p 乘以最大概率比较（成了 epsilon 采样）",
    ),
    Mutant(
        "truncation",
        "top_p_accepts_zero",
        "accepts top_p = 0 (every row then keeps only min_tokens_to_keep tokens, silently)",
        [("0.0 < top_p <= 1.0", "0.0 <= top_p <= 1.0")],
        mistake_zh="接受 top_p = 0（每一行都默默只保留 min_tokens_to_keep 个 token）",
    ),
    Mutant(
        "truncation",
        "in_place_top_k",
        "masks the caller's scores in place",
        [
            (
                'return scores.masked_fill(scores < kth_largest, float("-inf"))',
                'return scores.masked_fill_(scores < kth_largest, float("-inf"))',
            )
        ],
        mistake_zh="原地屏蔽了调用者的分数",
    ),
    Mutant(
        "penalties",
        "repetition_divides_negatives",
        "divides every seen score by the penalty: negative scores move towards 0, the repeat gets MORE likely",
        [
            (
                "penalised = torch.where(scores > 0, scores / self.penalty, scores * self.penalty)",
                "penalised = scores / self.penalty",
            )
        ],
        mistake_zh="每个出现过的分数都除以惩罚：负分向 0 靠近，重复反而更可能",
    ),
    Mutant(
        "penalties",
        "frequency_counts_once",
        "counts with an indexed assignment, so a token repeated n times is penalised as if it occurred once",
        [
            (
                "counts.scatter_add_(-1, input_ids, torch.ones(input_ids.shape, device=scores.device))",
                "counts.scatter_(-1, input_ids, 1.0)",
            )
        ],
        mistake_zh="用索引赋值计数，重复 n 次的 token 只按出现一次惩罚",
    ),
    Mutant(
        "penalties",
        "presence_on_every_token",
        "subtracts the presence penalty from every token, seen or not (a constant shift: changes nothing, wrongly)",
        [("self.presence_penalty * (counts > 0).float()", "self.presence_penalty * torch.ones_like(counts)")],
        mistake_zh="不管是否出现过，每个 token 都减去存在惩罚（常数平移：什么都没改变，错了）",
    ),
    Mutant(
        "penalties",
        "repetition_on_unseen",
        "penalises the tokens NOT in the history",
        [("return torch.where(seen, penalised, scores)", "return torch.where(seen, scores, penalised)")],
        mistake_zh="惩罚的是历史中没有出现的 token",
    ),
    Mutant(
        "sampler",
        "draws_from_raw_logits",
        "computes the processed probabilities but draws from the raw logits' softmax",
        [
            (
                "return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)",
                "return torch.multinomial(logits.float().softmax(-1), num_samples=1, generator=generator).squeeze(-1)",
            )
        ],
        mistake_zh="算出了处理后的概率，却从原始 logits 的 softmax 中抽样",
    ),
    Mutant(
        "sampler",
        "reverse_order",
        "applies the processors in reverse order",
        [("for processor in processors:", "for processor in reversed(processors):")],
        mistake_zh="按相反的顺序应用各处理器",
    ),
    Mutant(
        "sampler",
        "greedy_on_raw_logits",
        "greedy decoding takes the argmax of the raw logits, ignoring the penalties",
        [("return probs.argmax(dim=-1)", "return logits.argmax(dim=-1)")],
        mistake_zh="贪心解码取原始 logits 的 argmax，忽略了惩罚",
    ),
    Mutant(
        "sampler",
        "no_empty_row_check",
        "lets a row with every token removed through (softmax gives NaN)",
        [("if empty.any():", "if False:")],
        mistake_zh="放过了所有 token 都被移除的行（softmax 得到 NaN）",
    ),
    Mutant(
        "beam_search",
        "all_beams_at_first",
        "starts from num_beams copies of the prompt: the beams become duplicates",
        [("running = [(prompt, 0.0)]", "running = [(prompt, 0.0)] * num_beams")],
        mistake_zh="从 num_beams 份提示的副本开始：各个 beam 变成了重复的",
    ),
    Mutant(
        "beam_search",
        "only_k_candidates",
        "takes num_beams candidates instead of 2 * num_beams, so EOS candidates starve the running beams",
        [
            (
                "candidates.topk(min(2 * num_beams, candidates.numel()))",
                "candidates.topk(min(num_beams, candidates.numel()))",
            )
        ],
        mistake_zh="只取 num_beams 个而不是 2 * num_beams 个候选，EOS 候选挤掉了运行中的 beam",
    ),
    Mutant(
        "beam_search",
        "length_penalty_on_full_length",
        "normalises by the full length, prompt included",
        [
            (
                "finished.append((score / (step + 1) ** length_penalty, tokens))",
                "finished.append((score / len(tokens) ** length_penalty, tokens))",
            )
        ],
        mistake_zh="按包含提示的完整长度归一化",
    ),
    Mutant(
        "beam_search",
        "finished_from_any_rank",
        "accepts a finished hypothesis from any of the 2k ranks",
        [("if rank < num_beams:", "if rank < 2 * num_beams:")],
        mistake_zh="从 2k 个排名中的任何一个接受已完成的假设",
    ),
    Mutant(
        "beam_search",
        "no_early_stopping",
        "keeps searching until max_new_tokens even when num_beams hypotheses are finished",
        [("if len(finished) == num_beams or last_step:", "if last_step:")],
        mistake_zh="即使已有 num_beams 个假设完成，仍一直搜索到 max_new_tokens",
    ),
]
