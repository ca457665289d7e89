"""Checks for p02.sampling. References: transformers' `TemperatureLogitsWarper`, `TopKLogitsWarper`,
`TopPLogitsWarper`, `MinPLogitsWarper` and `RepetitionPenaltyLogitsProcessor` applied in float64; a float64 loop spec
of OpenAI's frequency/presence formula; the exact processed distribution (softmax of transformers' processors in
float64) against 20,000 seeded draws by Pearson's chi-square test at a false-alarm rate of 1e-3 (the p-value from
`torch.special.gammaincc`); `LlamaForCausalLM.generate(num_beams=..., early_stopping=True)` on a tiny local model,
token for token; an exhaustive search over every sequence of a tiny Markov model."""

import itertools
import math

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_distribution,
    expect_tensor,
    expect_value_error,
    one_thread,
    reference_only,
)
from llm_algo.references.hf import tiny_llama_config, transformers_module
from llm_algo.references.llama import causal_lm

checks = Checks("p02.sampling")
checks.restrict(
    "truncation",
    "penalties",
    "beam_search",
    forbid=["transformers.generation"],
    instead="write the processors and the search yourself (transformers' generation code is the checks' reference)",
)

NEG_INF = float("-inf")
FALSE_ALARM = 1e-3  # a correct sampler fails the chi-square test with this probability on a random seed


def hf_processor(name, *args, **kwargs):
    """A transformers logits processor, built by the checks (never inside learner code)."""
    return getattr(transformers_module(), name)(*args, **kwargs)


def reference(processor, scores, input_ids=None):
    """transformers' processor on the float64 scores (the oracle)."""
    if input_ids is None:
        input_ids = torch.zeros(scores.shape[0], 0, dtype=torch.long)
    with reference_only():
        return processor(input_ids, scores.double().clone())


def expect_same_filter(got, scores, want, label, hint):
    """got must be scores' shape and dtype, -inf exactly where the reference removed a token, the score elsewhere."""
    expect_tensor(got, shape=scores.shape, dtype=scores.dtype, input=label, what="processed scores")
    removed, want_removed = torch.isneginf(got), torch.isneginf(want)
    differ = (removed != want_removed).nonzero()
    if len(differ):
        row, token = differ[0].tolist()
        expect(
            False,
            f"{len(differ)} token(s) kept or removed differently from the reference",
            input=label,
            expected=f"row {row}: {int((~want_removed[row]).sum())} tokens kept, token {token} "
            f"{'removed' if bool(want_removed[row, token]) else 'kept'}",
            got=f"{int((~removed[row]).sum())} kept, token {token} {'removed' if bool(removed[row, token]) else 'kept'}",
            hint=hint,
        )
    expect(
        torch.equal(got[~removed], scores[~removed]),
        "kept scores changed",
        input=label,
        expected="the kept tokens' scores exactly as they came in",
        got="different values",
        hint="masked_fill the removed tokens with -inf; leave the others alone",
    )


def random_scores(batch, vocab, dtype=torch.float32, spread=3.0):
    return (torch.randn(batch, vocab, dtype=torch.float64) * spread).to(dtype)


# ------------------------------------------------------------------------------------------ truncation


@checks("truncation")
def hand_checkable_truncations(ex):
    """probabilities 0.5, 0.3, 0.15, 0.05: top-k 2, top-p 0.75 and 0.85, min-p 0.25, temperature 2"""
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    scores = probs.log()
    ids = torch.zeros(1, 0, dtype=torch.long)
    label = "scores = log[0.05, 0.5, 0.15, 0.3]"
    cases = [
        (ex.TopK(2), [False, True, False, True], "top_k=2 keeps the two largest (tokens 1 and 3)"),
        (ex.TopP(0.75), [False, True, False, True], "top_p=0.75: 0.5 < 0.75, then 0.5+0.3 reaches it: tokens 1, 3"),
        (ex.TopP(0.85), [False, True, True, True], "top_p=0.85: 0.8 < 0.85 so token 2 (0.15) is kept too"),
        (ex.MinP(0.25), [False, True, True, True], "min_p=0.25: threshold 0.25 * 0.5 = 0.125 keeps 0.15"),
    ]
    for processor, keep, why in cases:
        got = processor(ids, scores)
        expect_tensor(got, shape=(1, 4), dtype=torch.float32, input=label, what=type(processor).__name__)
        kept = (~torch.isneginf(got[0])).tolist()
        expect(
            kept == keep,
            f"{type(processor).__name__} keeps the wrong tokens",
            input=label + f", {why.split(':')[0]}",
            expected=str(keep),
            got=str(kept),
            hint=why + "; a token is kept when the mass of the more likely ones is still below top_p",
        )
    got = ex.Temperature(2.0)(ids, scores)
    expect_close(got, scores.double() / 2, input=label + ", temperature=2", hint="divide the scores by the temperature")


@checks("truncation")
def matches_transformers_warpers(ex):
    """random rows, float32/bfloat16/float16, several sizes: the same kept set as transformers' warpers"""
    for (batch, vocab), dtype in (
        ((1, 1), torch.float32),
        ((3, 37), torch.float32),
        ((4, 50), torch.bfloat16),
        ((2, 101), torch.float16),
        ((5, 7), torch.float32),
    ):
        scores = random_scores(batch, vocab, dtype)
        ids = torch.randint(0, vocab, (batch, 3))
        for name, ours, theirs in (
            ("Temperature(0.7)", ex.Temperature(0.7), None),
            ("TopK(5)", ex.TopK(5), hf_processor("TopKLogitsWarper", 5)),
            (
                "TopK(3, min_tokens_to_keep=4)",
                ex.TopK(3, min_tokens_to_keep=4),
                hf_processor("TopKLogitsWarper", 3, min_tokens_to_keep=4),
            ),
            ("TopP(0.63)", ex.TopP(0.63), hf_processor("TopPLogitsWarper", 0.63)),
            (
                "TopP(0.2, min_tokens_to_keep=3)",
                ex.TopP(0.2, min_tokens_to_keep=3),
                hf_processor("TopPLogitsWarper", 0.2, min_tokens_to_keep=3),
            ),
            ("MinP(0.07)", ex.MinP(0.07), hf_processor("MinPLogitsWarper", 0.07)),
            (
                "MinP(0.6, min_tokens_to_keep=2)",
                ex.MinP(0.6, min_tokens_to_keep=2),
                hf_processor("MinPLogitsWarper", 0.6, min_tokens_to_keep=2),
            ),
        ):
            label = describe(scores=scores) + f", {name}"
            before = scores.clone()
            got = ours(ids, scores)
            expect(
                torch.equal(scores, before),
                f"{name} modified its input scores",
                input=label,
                expected="the input untouched",
                got="changed in place",
                hint="return scores.masked_fill(...) (a new tensor), not masked_fill_",
            )
            if theirs is None:
                want = hf_processor("TemperatureLogitsWarper", 0.7)
                expect_tensor(got, shape=scores.shape, dtype=dtype, input=label, what="scaled scores")
                expect_close(got, reference(want, scores), input=label, hint="scores / temperature, same dtype")
                continue
            expect_same_filter(
                got,
                scores,
                reference(theirs, scores),
                label,
                hint=f"compare your rule for {name.split('(')[0]} with section 2 (ties, the crossing token, "
                "min_tokens_to_keep)",
            )


@checks("truncation")
def edge_cases_of_truncation(ex):
    """ties, k larger than V, top_p = 1, min_p = 0 and 1, a dominant token, large logits"""
    ids = torch.zeros(2, 0, dtype=torch.long)
    tied = torch.tensor([[2.0, 1.0, 2.0, 2.0, -1.0], [0.5, 0.5, 0.5, 0.5, 0.5]])
    scores = random_scores(2, 9)
    dominant = torch.tensor([[8.0, 0.0, -1.0, 0.5], [3.0, 3.0, -20.0, 0.0]])
    large = torch.tensor([[1000.0, 999.0, 990.0, -1000.0], [-500.0, -501.0, -499.5, -520.0]])
    for label, processor, inputs, theirs in (
        ("ties, TopK(2)", ex.TopK(2), tied, hf_processor("TopKLogitsWarper", 2)),
        ("TopK(50) on V=9", ex.TopK(50), scores, hf_processor("TopKLogitsWarper", 50)),
        ("TopP(1.0)", ex.TopP(1.0), scores, hf_processor("TopPLogitsWarper", 1.0)),
        ("dominant token, TopP(0.9)", ex.TopP(0.9), dominant, hf_processor("TopPLogitsWarper", 0.9)),
        (
            "one row, MinP(0.9, min_tokens_to_keep=3)",
            ex.MinP(0.9, min_tokens_to_keep=3),
            dominant[:1],
            hf_processor("MinPLogitsWarper", 0.9, min_tokens_to_keep=3),
        ),
        ("MinP(0.0)", ex.MinP(0.0), scores, hf_processor("MinPLogitsWarper", 0.0)),
        ("MinP(1.0) with ties", ex.MinP(1.0), tied, hf_processor("MinPLogitsWarper", 1.0)),
        ("logits near +-1000, TopP(0.8)", ex.TopP(0.8), large, hf_processor("TopPLogitsWarper", 0.8)),
        ("logits near +-1000, MinP(0.3)", ex.MinP(0.3), large, hf_processor("MinPLogitsWarper", 0.3)),
    ):
        got = processor(ids[: inputs.shape[0]], inputs)
        expect_same_filter(
            got,
            inputs,
            reference(theirs, inputs),
            describe(scores=inputs) + f", {label}",
            hint="keep ties with the k-th score; keep the token that crosses top_p; subtract the max before exp "
            "(softmax does)",
        )
    # probabilities exactly 0.5, 0.5, 0, 0: the mass before the second token is exactly top_p, so it goes
    halves = torch.tensor([[0.0, NEG_INF, 0.0, NEG_INF]])
    kept = int((~torch.isneginf(ex.TopP(0.5)(ids[:1], halves))).sum())
    expect(
        kept == 1,
        "TopP keeps a token whose predecessors already hold top_p of the mass",
        input="probabilities [0.5, 0, 0.5, 0] (exact), TopP(0.5)",
        expected="1 token kept (the first one already reaches 0.5)",
        got=f"{kept} kept",
        hint="remove a token when the mass before it is >= top_p (the nucleus is the smallest set reaching top_p)",
    )
    # bfloat16 over a wide vocabulary: a bfloat16 cumulative sum or softmax loses mass (8-bit mantissa)
    wide = (torch.randn(2, 4000) * 0.5).to(torch.bfloat16)
    label = describe(scores=wide) + ", near-equal scores"
    for name, processor, theirs in (
        ("TopP(0.9)", ex.TopP(0.9), hf_processor("TopPLogitsWarper", 0.9)),
        ("MinP(0.5)", ex.MinP(0.5), hf_processor("MinPLogitsWarper", 0.5)),
    ):
        got = processor(ids, wide)
        expect_tensor(got, shape=wide.shape, dtype=torch.bfloat16, input=label + f", {name}", what="scores")
        want = reference(theirs, wide)
        kept, want_kept = (~torch.isneginf(got)).sum(-1), (~torch.isneginf(want)).sum(-1)
        expect(
            torch.equal(kept, want_kept),
            f"{name} keeps a different number of tokens than the float64 reference",
            input=label + f", {name}",
            expected=f"{want_kept.tolist()} tokens kept per row",
            got=f"{kept.tolist()}",
            hint="compute the probabilities and their cumulative sum in float32, not in bfloat16",
        )


@checks("truncation")
def refuses_bad_parameters(ex):
    """top_p outside (0, 1], top_k < 1, temperature <= 0, min_p outside [0, 1], min_tokens_to_keep < 1: ValueError"""
    for label, make in (
        ("TopP(0.0)", lambda: ex.TopP(0.0)),
        ("TopP(1.5)", lambda: ex.TopP(1.5)),
        ("TopP(-0.1)", lambda: ex.TopP(-0.1)),
        ("TopP(0.9, min_tokens_to_keep=0)", lambda: ex.TopP(0.9, min_tokens_to_keep=0)),
        ("TopK(0)", lambda: ex.TopK(0)),
        ("TopK(2.5)", lambda: ex.TopK(2.5)),
        ("TopK(3, min_tokens_to_keep=0)", lambda: ex.TopK(3, min_tokens_to_keep=0)),
        ("Temperature(0.0)", lambda: ex.Temperature(0.0)),
        ("Temperature(-1.0)", lambda: ex.Temperature(-1.0)),
        ("Temperature(inf)", lambda: ex.Temperature(math.inf)),
        ("MinP(1.2)", lambda: ex.MinP(1.2)),
        ("MinP(-0.1)", lambda: ex.MinP(-0.1)),
        ("MinP(0.1, min_tokens_to_keep=0)", lambda: ex.MinP(0.1, min_tokens_to_keep=0)),
    ):
        expect_value_error(make, input=label, hint="validate the parameter in __init__ and raise ValueError naming it")


# ------------------------------------------------------------------------------------------ penalties


def loop_frequency_presence(input_ids, scores, frequency, presence):
    """OpenAI's formula, one token at a time in float64."""
    out = scores.double().clone()
    for b in range(scores.shape[0]):
        counts = {}
        for token in input_ids[b].tolist():
            counts[token] = counts.get(token, 0) + 1
        for token, count in counts.items():
            out[b, token] -= frequency * count + presence
    return out


@checks("penalties")
def hand_checkable_penalties(ex):
    """history [1, 1, 1, 3], scores [2, 2, -2, 0.5]: repetition 2 and frequency 0.5 / presence 1 by hand"""
    ids = torch.tensor([[1, 1, 1, 3]])
    scores = torch.tensor([[2.0, 2.0, -2.0, 0.5]])
    label = "history [1, 1, 1, 3], scores [2, 2, -2, 0.5]"
    got = ex.RepetitionPenalty(2.0)(ids, scores)
    expect_close(
        got,
        torch.tensor([[2.0, 1.0, -2.0, 0.25]], dtype=torch.float64),
        input=label + ", penalty 2",
        hint="seen tokens only (1 and 3), once each however often they occurred: positive / penalty",
    )
    negative = torch.tensor([[0.0, -3.0, 1.0, -0.5]])
    got = ex.RepetitionPenalty(2.0)(ids, negative)
    expect_close(
        got,
        torch.tensor([[0.0, -6.0, 1.0, -1.0]], dtype=torch.float64),
        input="history [1, 1, 1, 3], scores [0, -3, 1, -0.5], penalty 2",
        hint="a negative score is multiplied by the penalty (dividing it would make the token MORE likely)",
    )
    got = ex.FrequencyPresencePenalty(0.5, 1.0)(ids, scores)
    expect_close(
        got,
        torch.tensor([[2.0, 2.0 - 1.5 - 1.0, -2.0, 0.5 - 0.5 - 1.0]], dtype=torch.float64),
        input=label + ", frequency 0.5, presence 1",
        hint="token 1 occurred 3 times: 3 * 0.5 + 1; count with scatter_add_, not with an indexed assignment",
    )


@checks("penalties")
def matches_transformers_and_openai(ex):
    """random histories with repeats: RepetitionPenaltyLogitsProcessor and the frequency/presence loop spec"""
    for (batch, vocab, length), dtype in (
        ((1, 5, 12), torch.float32),
        ((3, 40, 25), torch.float32),
        ((2, 17, 9), torch.bfloat16),
        ((4, 64, 1), torch.float32),
    ):
        scores = random_scores(batch, vocab, dtype)
        ids = torch.randint(0, max(vocab // 2, 1), (batch, length))  # half the vocabulary: many repeats
        label = describe(scores=scores, input_ids=ids)
        for penalty in (1.3, 0.7):
            got = ex.RepetitionPenalty(penalty)(ids, scores)
            expect_tensor(got, shape=scores.shape, dtype=dtype, input=label, what="penalised scores")
            want = reference(hf_processor("RepetitionPenaltyLogitsProcessor", penalty), scores, ids)
            expect_close(
                got,
                want,
                input=label + f", penalty {penalty}",
                hint="seen tokens: score / penalty where score > 0, score * penalty otherwise; unseen unchanged",
            )
        for frequency, presence in ((0.4, 0.0), (0.0, 1.5), (0.3, -0.8), (-2.0, 2.0)):
            got = ex.FrequencyPresencePenalty(frequency, presence)(ids, scores)
            expect_tensor(got, shape=scores.shape, dtype=dtype, input=label, what="penalised scores")
            want = loop_frequency_presence(ids, scores, frequency, presence)
            expect_close(
                got,
                want,
                input=label + f", frequency {frequency}, presence {presence}",
                hint="subtract frequency * count (every occurrence) and presence once per token that occurred",
            )


@checks("penalties")
def empty_history_and_bad_input(ex):
    """an empty history changes nothing; ids outside [0, V), a bad penalty or a penalty outside [-2, 2]: ValueError"""
    scores = random_scores(2, 11)
    empty = torch.zeros(2, 0, dtype=torch.long)
    for processor in (ex.RepetitionPenalty(1.5), ex.FrequencyPresencePenalty(0.5, 0.5)):
        got = processor(empty, scores)
        expect(
            torch.equal(got, scores),
            f"{type(processor).__name__} changed scores with an empty history",
            input=describe(scores=scores, input_ids=empty),
            expected="the scores unchanged",
            got="different scores",
            hint="only tokens in the history are penalised",
        )
        before = scores.clone()
        processor(torch.randint(0, 11, (2, 6)), scores)
        expect(
            torch.equal(scores, before),
            f"{type(processor).__name__} modified its input scores",
            input=describe(scores=scores),
            expected="the input untouched",
            got="changed in place",
            hint="build and return a new tensor",
        )
        expect_value_error(
            lambda p=processor: p(torch.tensor([[1, 11]]).expand(2, 2), scores),
            input="input_ids containing 11 with V = 11",
            hint="refuse ids outside [0, V) with a ValueError",
        )
        expect_value_error(
            lambda p=processor: p(torch.tensor([[1, -1], [0, 2]]), scores),
            input="input_ids containing -1",
            hint="refuse ids outside [0, V) with a ValueError",
        )
    for label, make in (
        ("RepetitionPenalty(0.0)", lambda: ex.RepetitionPenalty(0.0)),
        ("RepetitionPenalty(-1.2)", lambda: ex.RepetitionPenalty(-1.2)),
        ("FrequencyPresencePenalty(2.5, 0)", lambda: ex.FrequencyPresencePenalty(2.5, 0.0)),
        ("FrequencyPresencePenalty(0, -3)", lambda: ex.FrequencyPresencePenalty(0.0, -3.0)),
    ):
        expect_value_error(make, input=label, hint="validate the parameters in __init__")


# ------------------------------------------------------------------------------------------ sampler


def shift(amount, token):
    """A processor of the checks' own: adds `amount` to one token's score (does not commute with truncations)."""

    def add(input_ids, scores):
        out = scores.clone()
        out[:, token] += amount
        return out

    return add


def reference_probs(chain, input_ids, logits):
    with reference_only():
        scores = logits.double()
        for processor in chain:
            scores = processor(input_ids, scores)
        return torch.softmax(scores, dim=-1)


@checks("sampler")
def probabilities_follow_the_chain(ex):
    """next_token_probs: transformers' processors in list order (penalty, temperature, top-k, top-p, min-p)"""
    batch, vocab = 3, 29
    logits = random_scores(batch, vocab, torch.bfloat16)
    ids = torch.randint(0, vocab, (batch, 7))
    chains = {
        "[]": [],
        "[RepetitionPenalty(1.3), Temperature(0.6), TopK(12), TopP(0.9), MinP(0.05)]": [
            hf_processor("RepetitionPenaltyLogitsProcessor", 1.3),
            hf_processor("TemperatureLogitsWarper", 0.6),
            hf_processor("TopKLogitsWarper", 12),
            hf_processor("TopPLogitsWarper", 0.9),
            hf_processor("MinPLogitsWarper", 0.05),
        ],
        "[shift token 0 by +4, TopP(0.5)]": [shift(4.0, 0), hf_processor("TopPLogitsWarper", 0.5)],
        "[TopP(0.5), shift token 0 by +4]": [hf_processor("TopPLogitsWarper", 0.5), shift(4.0, 0)],
    }
    for name, chain in chains.items():
        label = describe(logits=logits, input_ids=ids) + f", processors {name}"
        got = ex.next_token_probs(ids, logits, chain)
        expect_tensor(got, shape=(batch, vocab), dtype=torch.float32, input=label, what="probabilities")
        want = reference_probs(chain, ids, logits.float())
        expect_close(
            got,
            want,
            input=label,
            baseline=want.float(),
            hint="run every processor in the order of the list on float32 scores, then softmax",
        )


@checks("sampler")
def draws_follow_the_distribution(ex):
    """20,000 seeded draws from one row: chi-square against the exact processed distribution (alarm rate 1e-3)"""
    vocab, draws = 12, 20_000
    row = random_scores(1, vocab, spread=1.0)
    logits = row.expand(draws, vocab)
    ids = torch.randint(0, vocab, (draws, 4))
    chain = [
        hf_processor("TemperatureLogitsWarper", 1.4),
        hf_processor("TopKLogitsWarper", 7),
        shift(1.5, int(row.argmin())),
    ]
    label = describe(logits=logits) + ", processors [Temperature(1.4), TopK(7), shift the least likely token by +1.5]"
    probs = reference_probs(chain, ids[:1], row)[0]
    generator = torch.Generator().manual_seed(1234)
    tokens = ex.sample_next_token(ids, logits, chain, generator=generator)
    expect_tensor(tokens, shape=(draws,), dtype=torch.int64, input=label, what="tokens")
    counts = torch.bincount(tokens, minlength=vocab).double()
    expect_distribution(
        counts,
        probs,
        input=label,
        what="the draws",
        false_alarm=FALSE_ALARM,
        hint="torch.multinomial(next_token_probs(...), 1, generator=generator): the processors' output, softmaxed",
    )
    again = ex.sample_next_token(ids[:50], logits[:50], chain, generator=torch.Generator().manual_seed(1234))
    expect(
        torch.equal(again, tokens[:50]),
        "draws are not reproducible with a seeded generator",
        input=label,
        expected="the same tokens for the same generator seed",
        got="different tokens",
        hint="pass generator=generator to torch.multinomial",
    )


@checks("sampler")
def greedy_and_bad_input(ex):
    """do_sample=False takes the argmax after the processors; a row with no token left or 3-D logits: ValueError"""
    logits = torch.tensor([[3.0, 2.9, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    ids = torch.tensor([[0, 0], [3, 3]])
    chain = [hf_processor("RepetitionPenaltyLogitsProcessor", 1.5)]
    got = ex.sample_next_token(ids, logits, chain, do_sample=False)
    expect_tensor(got, shape=(2,), dtype=torch.int64, input="greedy", what="tokens")
    expect(
        got.tolist() == [1, 2],
        "greedy picks the wrong tokens",
        input="logits [[3, 2.9, -1, 0], [.1, .2, .3, .4]], history [[0, 0], [3, 3]], RepetitionPenalty(1.5)",
        expected="[1, 2] (the penalty demotes tokens 0 and 3)",
        got=str(got.tolist()),
        hint="argmax of the processed scores, not of the raw logits",
    )

    def remove_all(input_ids, scores):
        out = scores.clone()
        out[1] = NEG_INF
        return out

    expect_value_error(
        lambda: ex.next_token_probs(ids, logits, [remove_all]),
        input="a processor that removes every token of row 1",
        hint="check that every row keeps at least one finite score before softmax",
    )
    expect_value_error(
        lambda: ex.sample_next_token(ids, logits, [remove_all]),
        input="sample_next_token with every token of row 1 removed",
        hint="sample_next_token should go through next_token_probs",
    )
    expect_value_error(
        lambda: ex.next_token_probs(ids, logits[:, None], []),
        input="logits (2, 1, 4)",
        hint="refuse logits that are not (B, V)",
    )


# ------------------------------------------------------------------------------------------ beam_search


def markov_logits(table):
    """A model whose next-token logits depend only on the last token: table (V, V)."""

    def next_token_logits(tokens):
        return table[tokens[:, -1]]

    return next_token_logits


@checks("beam_search")
def exhaustive_on_a_tiny_model(ex):
    """V = 3, 3 new tokens, 9 beams (every prefix kept): the best sequence of an exhaustive search"""
    prompt = torch.tensor([[0]])
    for length_penalty, dtype in ((1.0, torch.float32), (0.0, torch.bfloat16)):
        table = torch.tensor([[0.0, 2.0, 1.9], [3.0, -1.0, 0.0], [0.0, 0.1, 4.0]]).to(dtype)
        logprobs = torch.log_softmax(table.double(), dim=-1)
        best, best_score = None, -math.inf
        for tail in itertools.product(range(3), repeat=3):
            path = (0, *tail)
            score = sum(float(logprobs[a, b]) for a, b in itertools.pairwise(path))
            if score > best_score:
                best, best_score = list(path), score
        sequences, scores = ex.beam_search(markov_logits(table), prompt, 9, 3, None, length_penalty)
        label = f"Markov table (3, 3) {dtype}, prompt [0], num_beams 9, 3 new tokens, length_penalty {length_penalty}"
        expect_tensor(sequences, shape=(1, 4), dtype=torch.int64, input=label, what="sequences")
        expect(
            sequences[0].tolist() == best,
            "not the most likely sequence",
            input=label,
            expected=f"{best} (greedy would take 0 -> 1 -> 0 -> 1)",
            got=str(sequences[0].tolist()),
            hint="with as many beams as prefixes beam search is exhaustive: keep the best num_beams candidates over "
            "all beams and tokens, scored by their summed log-probabilities",
        )
        expect_close(
            scores,
            torch.tensor([best_score / 3**length_penalty], dtype=torch.float64),
            input=label,
            what="scores",
            dtype=torch.float32,
            hint="score = summed log-probs of the generated tokens / (number generated) ** length_penalty; "
            "log_softmax in float32 even for bfloat16 logits",
        )


@checks("beam_search")
@one_thread()
def matches_transformers_generate(ex):
    """tiny LlamaForCausalLM: generate(num_beams, eos, length_penalty, early_stopping=True), token for token"""
    torch.manual_seed(0)
    eos = 5
    with reference_only():
        model = causal_lm(tiny_llama_config()).eval()
        with torch.no_grad():
            model.lm_head.weight.mul_(3.0)  # sharper distributions, as a trained model's

    def next_token_logits(tokens):
        with reference_only(), torch.no_grad():
            return model(tokens).logits[:, -1]

    finished_early = 0
    for num_beams, length_penalty in ((2, 1.0), (3, 0.0), (4, 2.0), (3, -1.0)):
        prompts = torch.randint(0, 128, (2, 5))
        with reference_only(), torch.no_grad():
            # point EOS's row of the head at these prompts' states, so that some hypotheses end early
            state = model.model.norm(model.model(prompts).last_hidden_state)[:, -1].mean(0)
            model.lm_head.weight[eos] = 0.2 * model.lm_head.weight[eos] + 1.5 * state / state.norm()
            want = model.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                do_sample=False,
                num_beams=num_beams,
                max_new_tokens=8,
                eos_token_id=eos,
                pad_token_id=eos,
                length_penalty=length_penalty,
                early_stopping=True,
                output_scores=True,
                return_dict_in_generate=True,
            )
        finished_early += int((want.sequences[:, 5:-1] == eos).any())
        label = f"tiny Llama (V=128), prompts (2, 5), num_beams {num_beams}, length_penalty {length_penalty}, eos {eos}"
        sequences, scores = ex.beam_search(next_token_logits, prompts, num_beams, 8, eos, length_penalty)
        expect_tensor(sequences, shape=want.sequences.shape, dtype=torch.int64, input=label, what="sequences")
        expect(
            torch.equal(sequences, want.sequences),
            "beam search picks different sequences than transformers' generate",
            input=label,
            expected=str(want.sequences[:, 5:].tolist()),
            got=str(sequences[:, 5:].tolist()),
            hint="expand only one beam at the first step; take 2 * num_beams candidates; finished only from the top "
            "num_beams ranks; length penalty on the generated length when a hypothesis finishes",
        )
        expect_close(
            scores,
            want.sequences_scores.double(),
            input=label,
            what="scores",
            dtype=torch.float32,
            hint="score = summed log-probs / (generated tokens, EOS included) ** length_penalty",
        )
    expect(finished_early > 0, "the check's own setup never produced an early EOS", expected="some", got="none")


@checks("beam_search")
def one_beam_is_greedy_and_bad_input(ex):
    """num_beams = 1 is greedy decoding on a random Markov model; num_beams 0 or max_new_tokens 0: ValueError"""
    table = random_scores(16, 16, torch.float32)
    prompts = torch.randint(0, 16, (3, 2))
    greedy = prompts.clone()
    total = torch.zeros(3, dtype=torch.float64)
    for _ in range(6):
        logprobs = torch.log_softmax(table[greedy[:, -1]].double(), dim=-1)
        token = logprobs.argmax(-1)
        total += logprobs.gather(-1, token[:, None])[:, 0]
        greedy = torch.cat((greedy, token[:, None]), dim=1)
    first, _ = ex.beam_search(markov_logits(table), prompts, 1, 1)
    expect(
        torch.equal(first, greedy[:, :3]),
        "one new token is not the argmax",
        input="random Markov table (16, 16), prompts (3, 2), num_beams 1, max_new_tokens 1",
        expected=str(greedy[:, :3].tolist()),
        got=str(first.tolist()),
        hint="max_new_tokens = 1 is valid: one step, the argmax",
    )
    sequences, scores = ex.beam_search(markov_logits(table), prompts, 1, 6)
    label = "random Markov table (16, 16), prompts (3, 2), num_beams 1, 6 new tokens, no EOS"
    expect(
        torch.equal(sequences, greedy),
        "one beam is not greedy decoding",
        input=label,
        expected=str(greedy.tolist()),
        got=str(sequences.tolist()),
        hint="with one beam, the best candidate at every step is the argmax",
    )
    expect_close(scores, total / 6, input=label, what="scores", dtype=torch.float32, hint="mean log-prob (penalty 1)")
    for bad in ((0, 4), (2, 0)):
        expect_value_error(
            lambda b=bad: ex.beam_search(markov_logits(table), prompts, *b),
            input=f"num_beams {bad[0]}, max_new_tokens {bad[1]}",
            hint="refuse num_beams < 1 and max_new_tokens < 1",
        )


@checks("beam_search")
@one_thread()
def matches_generate_on_many_markov_models(ex):
    """24 random bigram models (a 0-layer LlamaForCausalLM, V = 8, EOS likely): generate(num_beams=2..4), exactly"""
    eos, vocab, steps = 7, 8, 6
    with reference_only():
        config = tiny_llama_config(
            num_hidden_layers=0,
            vocab_size=vocab,
            hidden_size=16,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            intermediate_size=32,
        )
        model = causal_lm(config).eval()  # no layers: logits = head(norm(embed(last token))), a bigram model

    def next_token_logits(tokens):
        with reference_only(), torch.no_grad():
            return model(tokens).logits[:, -1]

    for trial in range(24):
        num_beams = 2 + trial % 3
        length_penalty = (1.0, 0.0, 2.0, -0.5)[trial % 4]
        sharpness = 0.3 + 0.9 * float(torch.rand(()))
        prompts = torch.randint(0, eos, (2, 2))
        with reference_only(), torch.no_grad():
            model.model.embed_tokens.weight.normal_()
            model.lm_head.weight.normal_(std=sharpness)
            want = model.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                do_sample=False,
                num_beams=num_beams,
                max_new_tokens=steps,
                eos_token_id=eos,
                pad_token_id=eos,
                length_penalty=length_penalty,
                early_stopping=True,
                output_scores=True,
                return_dict_in_generate=True,
            )
        label = (
            f"random bigram model {trial} (V={vocab}, EOS {eos}, head std {sharpness:.2f}), prompts "
            f"{prompts.tolist()}, num_beams {num_beams}, {steps} new tokens, length_penalty {length_penalty}"
        )
        sequences, scores = ex.beam_search(next_token_logits, prompts, num_beams, steps, eos, length_penalty)
        expect(
            isinstance(sequences, torch.Tensor) and torch.equal(sequences, want.sequences),
            "beam search picks different sequences than transformers' generate",
            input=label,
            expected=str(want.sequences.tolist()),
            got=str(sequences.tolist() if isinstance(sequences, torch.Tensor) else sequences),
            hint="2 * num_beams candidates; a finished hypothesis only from the top num_beams ranks; the first "
            "num_beams unfinished ones continue; stop once num_beams hypotheses are finished",
        )
        expect_close(scores, want.sequences_scores.double(), input=label, what="scores", dtype=torch.float32)
