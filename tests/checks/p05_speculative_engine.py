"""Checks for p05.speculative_engine, graded on outcomes. References written here, independently of the solutions:
full forwards of the model without any cache (a float64 copy as the oracle, float32 as the baseline of the tolerance
policy); a cache-free wrapper with CachedLM's interface that recomputes its whole kept sequence at every `extend`
(so a model that is not rolled back sees the rejected drafts); the learner's own `generate_greedy` on the target;
bigram-table language models with the same interface, whose exact joint distribution of two tokens is computed here,
for Pearson's chi-square test (`expect_distribution`, false-alarm rate 1e-3 per test, fixed seeds); the target's
calls counted by a wrapper, not by the decoder's own statistics.

Threshold (stated in the lesson): at most 0.6 target calls per token for 48 greedy tokens with k = 4 on the tiny
pair of `make_pair()` (the reference solution measures 0.21: every draft is accepted on that prompt)."""

import copy

import torch

from llm_algo.check import Checks, expect, expect_close, expect_distribution, expect_value_error, one_thread

checks = Checks("p05.speculative_engine")

FALSE_ALARM = 1e-3
SAMPLES = 3000
CALLS_PER_TOKEN = 0.6


def full_logits(model, tokens) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([list(tokens)]))[0]


def expect_rows(got, model, tokens, rows, input, hint):
    oracle = full_logits(copy.deepcopy(model).double(), tokens)[rows]
    baseline = full_logits(model, tokens)[rows]
    expect_close(got, oracle, input=input, baseline=baseline, hint=hint)


class RecomputeLM:
    """CachedLM's interface without a cache: `extend` runs the model on everything kept so far."""

    def __init__(self, model):
        self.model, self.kept, self.calls, self.fed = model, [], 0, 0

    @property
    def length(self):
        return len(self.kept)

    def extend(self, tokens):
        self.calls += 1
        self.fed += len(tokens)
        self.kept += list(tokens)
        return full_logits(self.model, self.kept)[-len(tokens) :].float()

    def rollback(self, length):
        assert 0 <= length <= len(self.kept), f"rollback to {length} with {len(self.kept)} kept"
        del self.kept[length:]


class TableLM:
    """A bigram language model with CachedLM's interface: the logits after token t are table[t]."""

    def __init__(self, table):
        self.table, self.kept, self.calls = table, [], 0

    @property
    def length(self):
        return len(self.kept)

    def extend(self, tokens):
        self.calls += 1
        self.kept += list(tokens)
        return self.table[torch.tensor(list(tokens))]

    def rollback(self, length):
        assert 0 <= length <= len(self.kept), f"rollback to {length} with {len(self.kept)} kept"
        del self.kept[length:]


class Counted:
    """Counts the extend calls of a CachedLM (the learner's), passing everything through."""

    def __init__(self, lm):
        self.lm, self.calls = lm, 0

    @property
    def length(self):
        return self.lm.length

    def extend(self, tokens):
        self.calls += 1
        return self.lm.extend(tokens)

    def rollback(self, length):
        return self.lm.rollback(length)


# ------------------------------------------------------------------------------------------------------ CachedLM


@checks("CachedLM")
@one_thread()
def extend_in_pieces(ex):
    """feeding 5, 1, 3 and 1 tokens: every row equals a full forward of the sequence so far"""
    target, _ = ex.make_pair(seed=1)
    lm = ex.CachedLM(target)
    tokens = []
    for piece in (5, 1, 3, 1):
        new = torch.randint(0, ex.VOCAB, (piece,)).tolist()
        got = lm.extend(new)
        tokens += new
        expect(
            tuple(got.shape) == (piece, ex.VOCAB) and got.dtype == torch.float32,
            "extend returned the wrong shape or dtype",
            input=f"extend of {piece} tokens",
            expected=f"({piece}, {ex.VOCAB}) float32",
            got=f"{tuple(got.shape)} {got.dtype}",
            hint="return the logits of every fed token, (n, V), as float32",
        )
        expect_rows(
            got,
            target,
            tokens,
            slice(len(tokens) - piece, None),
            input=f"{len(tokens) - piece} cached + {piece} new tokens, 4-layer target",
            hint="feed the tokens as (1, n) through the caches: positions continue after the cached ones",
        )
        expect(
            lm.length == len(tokens),
            "length does not count the cached positions",
            input=f"after {tokens}",
            expected=str(len(tokens)),
            got=str(lm.length),
            hint="length is the caches' length",
        )

    half = ex.CachedLM(copy.deepcopy(target).to(torch.bfloat16))
    rows = half.extend([4, 2, 7])
    expect(
        rows.dtype == torch.float32 and tuple(rows.shape) == (3, ex.VOCAB),
        "extend of a bfloat16 model did not return float32 logits",
        input="the target in bfloat16, extend of 3 tokens",
        expected=f"(3, {ex.VOCAB}) float32",
        got=f"{tuple(rows.shape)} {rows.dtype}",
        hint="return the logits as float32 whatever the model's dtype (softmax and ratios need it)",
    )


@checks("CachedLM")
@one_thread()
def rollback_forgets(ex):
    """roll back to 6 of 9, to 0: feeding different tokens gives the logits of the new sequence, not the old one"""
    _, draft = ex.make_pair(seed=2)
    target, _ = ex.make_pair(seed=2)
    for model, name in ((target, "4-layer target"), (draft, "1-layer draft")):
        lm = ex.CachedLM(model)
        first = torch.randint(0, ex.VOCAB, (9,)).tolist()
        lm.extend(first)
        lm.rollback(6)
        expect(
            lm.length == 6,
            "length after rollback(6) is wrong",
            input=f"{name}: 9 cached, rollback(6)",
            expected="6",
            got=str(lm.length),
            hint="set every layer's lengths and length",
        )
        other = [(t + 1) % ex.VOCAB for t in first[6:8]]
        got = lm.extend(other)
        expect_rows(
            got,
            model,
            first[:6] + other,
            slice(6, 8),
            input=f"{name}: 9 cached, rollback(6), then 2 different tokens",
            hint="after rollback the next update must write at position 6 and attend to positions < 8 only: "
            "reset every layer's per-row lengths as well as length",
        )
        lm.rollback(0)
        fresh = torch.randint(0, ex.VOCAB, (3,)).tolist()
        expect_rows(
            lm.extend(fresh),
            model,
            fresh,
            slice(0, 3),
            input=f"{name}: rollback(0), then 3 tokens",
            hint="rollback(0) empties the caches",
        )


@checks("CachedLM")
def bad_cache_arguments_refused(ex):
    """rollback past the cached length or below 0, extend of no token: ValueError"""
    target, _ = ex.make_pair(seed=3)
    lm = ex.CachedLM(target)
    lm.extend([1, 2, 3])
    expect_value_error(
        lambda: lm.rollback(4), input="3 cached, rollback(4)", hint="refuse a length above the cached length"
    )
    expect_value_error(lambda: lm.rollback(-1), input="3 cached, rollback(-1)", hint="refuse a negative length")
    expect_value_error(lambda: lm.extend([]), input="extend([])", hint="refuse an empty list of tokens")
    try:
        lm.rollback(3)
    except ValueError as error:
        expect(
            False,
            "rollback to the current length was refused",
            input="3 cached, rollback(3)",
            expected="accepted (nothing to forget)",
            got=f"ValueError: {error}",
            hint="0 <= length <= self.length is allowed",
        )
    expect(
        lm.length == 3,
        "a refused call changed the cache",
        input="3 cached, refused calls",
        expected="length 3",
        got=f"length {lm.length}",
        hint="validate before changing anything",
    )


@checks("CachedLM")
@one_thread()
def max_len_bounds_the_caches(ex):
    """CachedLM(model, max_len=6): 4 + 2 tokens fill it (right logits), a 7th is refused (ValueError, nothing kept),
    and after rollback(3) there is room for 3 again"""
    target, _ = ex.make_pair(seed=4)
    lm = ex.CachedLM(target, max_len=6)
    tokens = torch.randint(0, ex.VOCAB, (9,)).tolist()
    lm.extend(tokens[:4])
    expect_rows(
        lm.extend(tokens[4:6]),
        target,
        tokens[:6],
        slice(4, 6),
        input="CachedLM(target, max_len=6): 4 then 2 tokens (exactly max_len)",
        hint="max_len positions fit: KVCache(max_len) for every layer",
    )
    expect_value_error(
        lambda: lm.extend(tokens[6:7]),
        input="CachedLM(target, max_len=6) holding 6 positions, extend of a 7th token",
        hint="build every layer's KVCache with the max_len given (KVCache(max_len)): its update refuses a 7th position",
    )
    expect(
        lm.length == 6,
        "a refused extend changed the cache",
        input="CachedLM(target, max_len=6) holding 6 positions, a refused 7th token",
        expected="length 6",
        got=f"length {lm.length}",
        hint="KVCache.update refuses before writing anything",
    )
    lm.rollback(3)
    expect_rows(
        lm.extend(tokens[6:9]),
        target,
        tokens[:3] + tokens[6:9],
        slice(3, 6),
        input="CachedLM(target, max_len=6): 6 cached, rollback(3), then 3 different tokens",
        hint="rollback frees the positions from `length` on",
    )


# -------------------------------------------------------------------------------------------- speculative_decode


@checks("speculative_decode")
@one_thread()
def greedy_equals_target_greedy(ex):
    """greedy, k = 1, 3, 4, its own draft and a poor one: tokens equal your generate_greedy on the target alone"""
    target, draft = ex.make_pair(seed=0)
    _, poor = ex.make_pair(seed=9)  # the early exit of another model: most drafts are rejected
    for k, prompt, drafter, name in (
        (4, [3, 1, 4], draft, "its own early exit"),
        (3, [2, 7, 1, 8, 2], poor, "a poor draft"),
        (1, [5], poor, "a poor draft"),
    ):
        want = ex.generate_greedy(target, torch.tensor([prompt]), max_new_tokens=24)[0, len(prompt) :].tolist()
        got, stats = ex.speculative_decode(RecomputeLM(target), RecomputeLM(drafter), prompt, k, 24, greedy=True)
        expect(
            list(got) == want,
            "greedy speculative decoding differs from the target's greedy decoding",
            input=f"prompt {prompt}, k = {k}, 24 tokens, the tiny target with {name}",
            expected=str(want),
            got=f"{list(got)} (stats {stats})",
            hint="accept drafts while they equal the target's argmax, then emit the target's argmax; roll the "
            "target back to the confirmed tokens (it cached every draft)",
        )


@checks("speculative_decode")
@one_thread()
def identical_draft_accepts_everything(ex):
    """draft = target: every draft accepted; calls, drafts and tokens fed to each model as the round structure says"""
    target, _ = ex.make_pair(seed=0)
    prompt = [1, 2, 3]
    for k, n in ((3, 20), (4, 7), (2, 1)):
        target_lm, draft_lm = RecomputeLM(target), RecomputeLM(target)
        gen = torch.Generator().manual_seed(5)
        got, stats = ex.speculative_decode(target_lm, draft_lm, prompt, k, n, generator=gen)
        drafts_per_round, left = [], n
        while left > 0:
            drafts_per_round.append(min(k, left))  # min(k, tokens still needed) drafts, all accepted, + the bonus
            left -= drafts_per_round[-1] + 1
        rounds, drafted = len(drafts_per_round), sum(drafts_per_round)
        want = {"target_calls": rounds, "draft_calls": drafted, "drafted": drafted, "accepted": drafted}
        # each model is fed every confirmed token once: the prompt, then per round its pending tokens + the drafts
        want_fed = (len(prompt) + rounds - 1 + drafted, len(prompt) + drafted + rounds - 2)
        expect(
            len(got) == n
            and (target_lm.calls, draft_lm.calls) == (rounds, drafted)
            and {key: stats.get(key) for key in want} == want
            and (target_lm.fed, draft_lm.fed) == want_fed,
            "with the draft equal to the target, the rounds are not what every-draft-accepted gives",
            input=f"draft = target, prompt {prompt}, k = {k}, {n} sampled tokens",
            expected=f"{n} tokens; calls seen (target, draft) = ({rounds}, {drafted}); stats {want}; tokens fed "
            f"(target, draft) = {want_fed}",
            got=f"{len(got)} tokens; calls seen ({target_lm.calls}, {draft_lm.calls}); stats {stats}; tokens fed "
            f"({target_lm.fed}, {draft_lm.fed})",
            hint="p = q gives min(1, p/q) = 1; draft min(k, tokens still needed); after all acceptances emit the "
            "bonus token; roll back to the confirmed tokens only (start + accepted), so nothing is fed twice",
        )


def bigram_tables(seed):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(4, 4, generator=g, dtype=torch.float64)
    draft = target + torch.randn(4, 4, generator=g, dtype=torch.float64) * 1.5
    return target.float(), draft.float()


@checks("speculative_decode")
@one_thread()
def samples_follow_the_target(ex):
    """3,000 sampled 2-token continuations, k = 1 and 2, bigram V = 4: chi-square on the 16 outcomes (alarm 1e-3)"""
    target_table, draft_table = bigram_tables(11)
    prompt = [2, 0]
    p1 = torch.softmax(target_table[0].double(), -1)  # after the prompt's last token
    joint = (p1[:, None] * torch.softmax(target_table.double(), -1)).reshape(-1)  # (16,) p(x1) p(x2 | x1)
    for k in (1, 2):
        gen = torch.Generator().manual_seed(100 + k)
        counts = torch.zeros(16)
        accepted = drafted = 0
        for _ in range(SAMPLES):
            got, stats = ex.speculative_decode(TableLM(target_table), TableLM(draft_table), prompt, k, 2, generator=gen)
            counts[got[0] * 4 + got[1]] += 1
            accepted += stats["accepted"]
            drafted += stats["drafted"]
        expect_distribution(
            counts,
            joint,
            input=f"bigram target and draft over 4 tokens (acceptance about {accepted / drafted:.2f}), k = {k}, "
            f"prompt {prompt}, 3,000 samples of 2 tokens",
            hint="accept with probability min(1, p(x)/q(x)); at a rejection sample from max(0, p - q) normalised; "
            "roll the target back so that the second token is conditioned on the first",
            what="the sampled pairs",
            false_alarm=FALSE_ALARM,
        )


@checks("speculative_decode")
@one_thread()
def target_calls_per_token(ex):
    """your CachedLM on the tiny pair, 48 greedy tokens, k = 4: at most 0.6 target calls per token"""
    target, draft = ex.make_pair(seed=0)
    counted = Counted(ex.CachedLM(target))
    got, stats = ex.speculative_decode(counted, ex.CachedLM(draft), [3, 1, 4], 4, 48, greedy=True)
    want = ex.generate_greedy(target, torch.tensor([[3, 1, 4]]), max_new_tokens=48)[0, 3:].tolist()
    expect(
        list(got) == want,
        "with your CachedLM the greedy tokens differ from the target's greedy decoding",
        input="prompt [3, 1, 4], k = 4, 48 tokens, CachedLM on both models",
        expected=str(want),
        got=str(list(got)),
        hint="roll both models back to the confirmed tokens after each round",
    )
    expect(
        counted.calls / 48 <= CALLS_PER_TOKEN and stats.get("target_calls") == counted.calls,
        "too many target calls per token",
        input="prompt [3, 1, 4], k = 4, 48 greedy tokens, the tiny pair",
        expected=f"<= {CALLS_PER_TOKEN} target calls per token, and stats['target_calls'] equal to the calls seen",
        got=f"{counted.calls} calls seen ({counted.calls / 48:.2f} per token), stats {stats}",
        hint="one target extend per round, with all k drafts; a round emits the accepted drafts plus one token",
    )


@checks("speculative_decode")
def bad_decode_arguments_refused(ex):
    """k < 1, max_new_tokens < 1, an empty prompt, a model that is not empty: ValueError"""
    table, other = bigram_tables(3)
    expect_value_error(
        lambda: ex.speculative_decode(TableLM(table), TableLM(other), [1], 0, 4), input="k = 0", hint="refuse k < 1"
    )
    expect_value_error(
        lambda: ex.speculative_decode(TableLM(table), TableLM(other), [1], 2, 0),
        input="max_new_tokens = 0",
        hint="refuse max_new_tokens < 1",
    )
    expect_value_error(
        lambda: ex.speculative_decode(TableLM(table), TableLM(other), [], 2, 4),
        input="empty prompt",
        hint="refuse an empty prompt",
    )
    got, _ = ex.speculative_decode(
        TableLM(table), TableLM(other), [1], 2, 1, generator=torch.Generator().manual_seed(0)
    )
    expect(
        len(got) == 1,
        "max_new_tokens = 1 did not give one token",
        input="k = 2, max_new_tokens = 1",
        expected="1 token",
        got=str(got),
        hint="refuse only max_new_tokens < 1",
    )
    used = TableLM(table)
    used.extend([1, 2])
    expect_value_error(
        lambda: ex.speculative_decode(used, TableLM(other), [1], 2, 4),
        input="a target that already holds 2 tokens",
        hint="both models must start empty",
    )
