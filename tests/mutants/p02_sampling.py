"""Realistic wrong versions of the p02.sampling solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "truncation",
        "top_k_removes_the_kth",
        "compares with <= and so removes the k-th largest score itself",
        [("scores.masked_fill(scores < kth_largest", "scores.masked_fill(scores <= kth_largest")],
    ),
    Mutant(
        "truncation",
        "top_p_inclusive_cumsum",
        "uses the inclusive cumulative sum: the token that crosses top_p is dropped",
        [("mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs", "mass_before = sorted_probs.cumsum(dim=-1)")],
    ),
    Mutant(
        "truncation",
        "top_p_not_scattered_back",
        "applies the decision made on sorted positions to the unsorted tokens",
        [("remove = remove_sorted.scatter(-1, order, remove_sorted)", "remove = remove_sorted")],
    ),
    Mutant(
        "truncation",
        "top_p_ascending",
        "sorts ascending, so the nucleus is built from the least likely tokens",
        [("probs.sort(dim=-1, descending=True)", "probs.sort(dim=-1, descending=False)")],
    ),
    Mutant(
        "truncation",
        "min_p_absolute",
        "compares probabilities with min_p itself, not min_p times the top probability (epsilon sampling)",
        [("threshold = self.min_p * probs.amax(dim=-1, keepdim=True)", "threshold = self.min_p + 0 * probs[..., :1]")],
    ),
    Mutant(
        "truncation",
        "top_p_accepts_zero",
        "accepts top_p = 0 (every row then keeps only min_tokens_to_keep tokens, silently)",
        [("0.0 < top_p <= 1.0", "0.0 <= top_p <= 1.0")],
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
    ),
    Mutant(
        "penalties",
        "presence_on_every_token",
        "subtracts the presence penalty from every token, seen or not (a constant shift: changes nothing, wrongly)",
        [("self.presence_penalty * (counts > 0).float()", "self.presence_penalty * torch.ones_like(counts)")],
    ),
    Mutant(
        "penalties",
        "repetition_on_unseen",
        "penalises the tokens NOT in the history",
        [("return torch.where(seen, penalised, scores)", "return torch.where(seen, scores, penalised)")],
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
    ),
    Mutant(
        "sampler",
        "reverse_order",
        "applies the processors in reverse order",
        [("for processor in processors:", "for processor in reversed(processors):")],
    ),
    Mutant(
        "sampler",
        "greedy_on_raw_logits",
        "greedy decoding takes the argmax of the raw logits, ignoring the penalties",
        [("return probs.argmax(dim=-1)", "return logits.argmax(dim=-1)")],
    ),
    Mutant(
        "sampler",
        "no_empty_row_check",
        "lets a row with every token removed through (softmax gives NaN)",
        [("if empty.any():", "if False:")],
    ),
    Mutant(
        "beam_search",
        "all_beams_at_first",
        "starts from num_beams copies of the prompt: the beams become duplicates",
        [("running = [(prompt, 0.0)]", "running = [(prompt, 0.0)] * num_beams")],
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
    ),
    Mutant(
        "beam_search",
        "finished_from_any_rank",
        "accepts a finished hypothesis from any of the 2k ranks",
        [("if rank < num_beams:", "if rank < 2 * num_beams:")],
    ),
    Mutant(
        "beam_search",
        "no_early_stopping",
        "keeps searching until max_new_tokens even when num_beams hypotheses are finished",
        [("if len(finished) == num_beams or last_step:", "if last_step:")],
    ),
]
