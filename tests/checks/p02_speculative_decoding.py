"""Checks for p02.speculative_decoding. References: the exactness identity of modified rejection sampling evaluated
exhaustively in float64 on small vocabularies; Pearson chi-square tests (p-value from `torch.special.gammaincc`,
false-alarm rate 1e-3 per test) of seeded samples against the exact target distribution; greedy decoding of a tiny
Hugging Face `LlamaForCausalLM` alone (`generate(do_sample=False)`), token for token; Leviathan et al. (2023)'s closed
forms for the expected tokens per step and the walltime improvement, and 1 - total variation for the acceptance rate."""

import math
import warnings

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
from llm_algo.references.hf import tiny_llama_config
from llm_algo.references.llama import causal_lm

checks = Checks("p02.speculative_decoding")

FALSE_ALARM = 1e-3


def random_distributions(n, vocab, zeros=0):
    """(n, vocab) float64 rows summing to 1, with `zeros` random entries per row set to 0."""
    probs = torch.rand(n, vocab, dtype=torch.float64) ** 2
    for row in range(n):
        if zeros:
            probs[row, torch.randperm(vocab)[:zeros]] = 0.0
    return probs / probs.sum(-1, keepdim=True)


def expect_target_distribution(counts, probs, label, what, hint):
    expect_distribution(counts, probs, input=label, hint=hint, what=what, false_alarm=FALSE_ALARM)


def expect_generator_only(run, label: str, hint: str) -> None:
    """run(generator) twice with generators seeded alike and the global RNG seeded differently: the results must be
    equal and the global RNG state (torch.get_rng_state) unchanged by each run."""
    results = []
    for global_seed in (1234, 98765):
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        results.append(run(torch.Generator().manual_seed(5)))
        expect(
            torch.equal(torch.get_rng_state(), before),
            "the global random number generator was used",
            input=label,
            expected="torch.get_rng_state() unchanged: every random number from `generator`",
            got="the global RNG state moved during the call",
            hint=hint,
        )
    expect(
        results[0] == results[1],
        "the same generator seed gave different outputs",
        input=label + " (global RNG seeded 1234, then 98765)",
        expected=str(results[0])[:160],
        got=str(results[1])[:160],
        hint=hint,
    )


# ------------------------------------------------------------------------------------------ verify


@checks("verify")
@one_thread()
def exactness_identity_exhaustive(ex):
    """sum over drafts x of q(x)[a(x) 1{y=x} + (1 - a(x)) r(y)] equals p(y), float64, every (p, q) case"""
    cases = {
        "random (6, 5)": (random_distributions(6, 5), random_distributions(6, 5)),
        "draft with zeros": (random_distributions(4, 6), random_distributions(4, 6, zeros=2)),
        "target with zeros": (random_distributions(4, 6, zeros=3), random_distributions(4, 6)),
        "p == q": (random_distributions(3, 4),) * 2,
        "shared zeros": (
            torch.tensor([[0.0, 0.6, 0.4, 0.0], [0.3, 0.0, 0.0, 0.7]], dtype=torch.float64),
            torch.tensor([[0.0, 0.2, 0.5, 0.3], [0.5, 0.0, 0.5, 0.0]], dtype=torch.float64),
        ),
        "disjoint supports": (
            torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64),
            torch.tensor([[0.0, 0.0, 0.25, 0.75]], dtype=torch.float64),
        ),
    }
    for name, (p, q) in cases.items():
        n, vocab = p.shape
        label = f"{name}: p, q {tuple(p.shape)} float64"
        residual = ex.residual_distribution(p, q)
        expect_tensor(residual, shape=(n, vocab), dtype=torch.float64, input=label, what="residual")
        emitted = torch.zeros(n, vocab, dtype=torch.float64)
        for x in range(vocab):
            tokens = torch.full((n,), x, dtype=torch.long)
            accept = ex.acceptance_probability(p, q, tokens)
            expect_tensor(accept, shape=(n,), dtype=torch.float64, input=label, what="acceptance probability")
            drafted = q[:, x]
            proposed = torch.nn.functional.one_hot(tokens, vocab).double()
            emitted += drafted[:, None] * (accept[:, None] * proposed + (1 - accept[:, None]) * residual)
            want = torch.where(
                drafted > 0, torch.minimum(p[:, x] / drafted.clamp_min(1e-300), torch.ones(n, dtype=torch.float64)), 1.0
            )
            expect_close(
                accept,
                want,
                input=label + f", token {x}",
                what="acceptance probability",
                hint="min(1, p(x) / q(x)); 1 where q(x) = 0 (never drafted)",
            )
        if name == "p == q":
            expect(
                torch.equal(residual, p),
                "the residual of identical distributions must be p itself",
                input=label,
                expected="p (max(0, p - q) is all zeros: nothing to normalise)",
                got=str(residual[0].tolist()),
                hint="where the positive part has no mass, return p (never sampled, but no zeros or NaN)",
            )
        expect_close(
            emitted,
            p,
            input=label,
            what="distribution of the emitted token",
            hint="the residual must be max(0, p - q) normalised: then q*min(1, p/q) + (1 - beta) * residual = p",
        )


@checks("verify")
@one_thread()
def verify_block_samples_the_target(ex):
    """3,000 seeded blocks (k = 2, V = 4): first token ~ p1, second (after acceptance) ~ p2, mean acceptances exact"""
    vocab, k, runs = 4, 2, 3000
    p = random_distributions(k + 1, vocab).float()
    q = random_distributions(k, vocab).float()
    draft_gen, verify_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)
    first, second = torch.zeros(vocab), torch.zeros(vocab)
    accepted_total = 0
    for _ in range(runs):
        tokens = torch.multinomial(q, 1, generator=draft_gen)[:, 0]  # (k,): drafts from q (independent rows here)
        emitted, accepted = ex.verify_block(tokens, q, p, verify_gen)
        if not (isinstance(emitted, torch.Tensor) and emitted.dtype == torch.int64 and 1 <= len(emitted) <= k + 1):
            expect(
                False,
                "verify_block returned a bad result",
                input="k = 2",
                expected="(n,) int64, 1 <= n <= 3",
                got=repr(emitted)[:80],
            )
        expect(
            len(emitted) == accepted + 1 and torch.equal(emitted[:accepted], tokens[:accepted]),
            "emitted tokens inconsistent with the accepted count",
            input=f"drafts {tokens.tolist()}",
            expected=f"the {accepted} accepted drafts followed by exactly one more token",
            got=f"{emitted.tolist()}",
            hint="emit the accepted prefix, then one replacement (or the bonus token)",
        )
        first[emitted[0]] += 1
        if accepted >= 1:
            second[emitted[1]] += 1
        accepted_total += accepted
    label = f"p {describe(p=p)}, q {describe(q=q)}, {runs} blocks"
    hint = "accept with probability min(1, p/q); on rejection sample the residual max(0, p - q), not p"
    expect_target_distribution(first, p[0].double(), label, "first emitted tokens", hint)
    expect_target_distribution(
        second, p[1].double(), label + " (blocks whose first draft was accepted)", "second emitted tokens", hint
    )
    beta = torch.minimum(p[:k].double(), q.double()).sum(-1)
    mean = beta[0] + beta[0] * beta[1]  # E[accepted] = P(first) + P(first and second)
    variance_bound = 4.0 / runs  # accepted is in [0, 2]: its variance is at most 1
    got_mean = accepted_total / runs
    expect(
        abs(got_mean - float(mean)) < 4 * math.sqrt(variance_bound),
        "mean number of accepted drafts is off",
        input=label,
        expected=f"{float(mean):.3f} (= beta1 + beta1 * beta2)",
        got=f"{got_mean:.3f}",
        hint="stop at the first rejection; each draft is accepted with probability min(1, p/q)",
    )


@checks("verify")
@one_thread()
def deterministic_cases_and_bad_input(ex):
    """p == q accepts everything (k drafts + bonus); disjoint supports reject at once; bad shapes or rows refused"""
    p = random_distributions(4, 6).float()
    tokens = torch.tensor([1, 4, 2])
    emitted, accepted = ex.verify_block(tokens, p[:3], p, torch.Generator().manual_seed(0))
    expect(
        accepted == 3 and len(emitted) == 4 and torch.equal(emitted[:3], tokens),
        "identical draft and target must accept every draft and add a bonus token",
        input="q = p, k = 3",
        expected="accepted 3, emitted the 3 drafts + 1 bonus token",
        got=f"accepted {accepted}, emitted {emitted.tolist()}",
        hint="acceptance probability min(1, p/q) = 1; after k acceptances sample the bonus from target_probs[k]",
    )
    target = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    draft = torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    for seed in range(20):
        emitted, accepted = ex.verify_block(torch.tensor([2]), draft, target, torch.Generator().manual_seed(seed))
        expect(
            accepted == 0 and len(emitted) == 1 and int(emitted[0]) in (0, 1),
            "a draft token the target gives probability 0 must be rejected and replaced from the residual",
            input="p1 = [.5, .5, 0, 0], q1 = [0, 0, .5, .5], draft token 2",
            expected="accepted 0, emitted one of tokens 0, 1",
            got=f"accepted {accepted}, emitted {emitted.tolist()}",
            hint="p(x)/q(x) = 0: always rejected; the residual max(0, p - q) is p's support",
        )
    loose = p * (1 + 5e-5)  # rows summing to 1 + 5e-5: within the stated 1e-4
    emitted, accepted = ex.verify_block(tokens, loose[:3], loose, torch.Generator().manual_seed(0))
    expect(
        accepted == 3,
        "rows summing to 1 within 1e-4 must be accepted as distributions",
        input="q = p scaled by 1 + 5e-5",
        expected="no error, 3 drafts accepted",
        got=f"accepted {accepted}",
        hint="compare the row sums with 1 with an absolute tolerance of 1e-4",
    )
    for label, call in (
        ("target_probs with k rows", lambda: ex.verify_block(tokens, p[:3], p[:3])),
        ("draft_probs with 2 rows for 3 drafts", lambda: ex.verify_block(tokens, p[:2], p)),
        ("target rows summing to 2", lambda: ex.verify_block(tokens, p[:3], p * 2)),
        ("a negative draft probability", lambda: ex.verify_block(tokens, p[:3] - 0.5, p)),
    ):
        expect_value_error(call, input=label, hint="validate shapes and that rows are probability distributions")


@checks("verify")
@one_thread()
def verify_block_draws_only_from_the_generator(ex):
    """100 blocks (k = 3, V = 5) twice with generators seeded alike: equal outputs; the global RNG is never touched"""
    p = random_distributions(4, 5).float()
    q = random_distributions(3, 5).float()
    blocks = [torch.multinomial(q, 1)[:, 0] for _ in range(100)]  # (k,) drafts per block

    def run(generator):
        return [tuple(x.tolist() if isinstance(x, torch.Tensor) else x for x in ex.verify_block(t, q, p, generator))
                for t in blocks]  # fmt: skip

    expect_generator_only(
        run,
        f"p {describe(p=p)}, q {describe(q=q)}, 100 blocks of 3 drafts",
        "pass generator= to every torch.rand and torch.multinomial: the acceptance uniforms too",
    )


# ------------------------------------------------------------------------------------------ speculative_generate


def markov(table):
    """A causal 'model' over a bigram table (V, V): logits for every position of a (1, T) sequence."""

    def forward(tokens):
        return table[tokens]  # (1, T, V)

    return forward


@checks("speculative_generate")
@one_thread()
def greedy_equals_target_greedy(ex):
    """greedy: a 2-layer tiny Llama target with a 1-layer draft equals the target's generate(do_sample=False)"""
    torch.manual_seed(0)
    with reference_only():
        target_model = causal_lm(tiny_llama_config()).eval()
        draft_model = causal_lm(tiny_llama_config(num_hidden_layers=1)).eval()
        with torch.no_grad():
            target_model.lm_head.weight.mul_(3.0)
            draft_model.load_state_dict(target_model.state_dict(), strict=False)  # a shallower copy: often agrees

    def target(tokens):
        with reference_only():
            return target_model(tokens).logits

    def draft(tokens):
        with reference_only():
            return draft_model(tokens).logits

    for num_draft, length in ((3, 12), (1, 5), (5, 9)):
        prompt = torch.randint(0, 128, (6,))
        with reference_only(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = target_model.generate(
                prompt[None],
                attention_mask=torch.ones(1, 6, dtype=torch.long),
                do_sample=False,
                max_new_tokens=length,
                pad_token_id=0,
            )[0, 6:]
        label = (
            f"tiny Llama target (2 layers), draft (its first layer), prompt (6,), k = {num_draft}, {length} new tokens"
        )
        tokens, stats = ex.speculative_generate(target, draft, prompt, num_draft, length, greedy=True)
        expect_tensor(tokens, shape=(length,), dtype=torch.int64, input=label, what="tokens")
        expect(
            torch.equal(tokens, want),
            "greedy speculative decoding differs from the target's greedy decoding",
            input=label,
            expected=str(want.tolist()),
            got=str(tokens.tolist()),
            hint="accept a draft only while it equals the target's argmax at that position (target logits at "
            "positions T-1 .. T+k-1), then emit the target's argmax",
        )
        expect(
            stats["target_calls"] <= length and stats["accepted"] <= stats["drafted"],
            "implausible stats",
            input=label,
            expected="target_calls <= new tokens, accepted <= drafted",
            got=str(stats),
            hint="count one target call per block",
        )


@checks("speculative_generate")
@one_thread()
def identical_draft_accepts_everything(ex):
    """draft == target (sampled and greedy): every draft accepted, ceil(n / (k + 1)) target calls"""
    table = torch.randn(8, 8) * 2
    for greedy in (False, True):
        for num_draft, length in ((3, 12), (4, 7), (1, 1)):
            label = f"bigram model V=8 as both draft and target, k = {num_draft}, {length} tokens, greedy={greedy}"
            tokens, stats = ex.speculative_generate(
                markov(table),
                markov(table),
                torch.tensor([3]),
                num_draft,
                length,
                generator=torch.Generator().manual_seed(0),
                greedy=greedy,
            )
            calls = math.ceil(length / (num_draft + 1))
            drafted, remaining = 0, length
            while remaining > 0:
                drafted += min(num_draft, remaining)
                remaining -= min(num_draft, remaining) + 1
            expect(
                stats["accepted"] == stats["drafted"] == drafted
                and stats["target_calls"] == calls
                and len(tokens) == length,
                "identical models must accept every draft",
                input=label,
                expected=f"accepted == drafted == {drafted}, {calls} target calls, {length} tokens",
                got=f"{stats}, {len(tokens)} tokens",
                hint="each block yields k accepted drafts + 1 bonus token; draft only as many as still needed",
            )
    wide = (torch.randn(50, 50) * 3).to(torch.bfloat16)  # bfloat16 logits: probabilities must be float32
    tokens, stats = ex.speculative_generate(
        markov(wide), markov(wide), torch.tensor([7]), 3, 6, generator=torch.Generator().manual_seed(0)
    )
    expect(
        len(tokens) == 6 and stats["accepted"] == stats["drafted"],
        "bfloat16 logits: identical models must still accept everything",
        input="bfloat16 bigram model V = 50 as draft and target, k = 3, 6 tokens",
        expected="6 tokens, every draft accepted",
        got=f"{tokens.tolist()}, {stats}",
        hint="softmax the logits in float32 (a bfloat16 softmax does not sum to 1 within 1e-4)",
    )
    for bad in ((0, 5), (3, 0)):
        expect_value_error(
            lambda b=bad: ex.speculative_generate(markov(table), markov(table), torch.tensor([3]), *b),
            input=f"num_draft {bad[0]}, max_new_tokens {bad[1]}",
            hint="refuse num_draft < 1 and max_new_tokens < 1",
        )


@checks("speculative_generate")
@one_thread()
def sampled_sequences_follow_the_target(ex):
    """1,500 sampled 2-token continuations (bigram V = 3, k = 3, different draft): chi-square on all 9 outcomes"""
    vocab, runs = 3, 1500
    target_table = torch.randn(vocab, vocab) * 1.5
    draft_table = target_table + torch.randn(vocab, vocab) * 1.5  # a different but related draft
    prompt = torch.tensor([2])
    p = torch.softmax(target_table.double(), dim=-1)
    joint = (p[2][:, None] * p).flatten()  # P(a, b) = p(a | 2) p(b | a)
    counts = torch.zeros(vocab * vocab)
    generator = torch.Generator().manual_seed(11)
    accepted = drafted = 0
    for _ in range(runs):
        tokens, stats = ex.speculative_generate(
            markov(target_table), markov(draft_table), prompt, 3, 2, generator=generator
        )
        counts[int(tokens[0]) * vocab + int(tokens[1])] += 1
        accepted += stats["accepted"]
        drafted += stats["drafted"]
    label = f"bigram target and draft over V = 3, prompt [2], k = 3, {runs} runs of 2 tokens"
    expect_target_distribution(
        counts,
        joint,
        label,
        "pairs of generated tokens",
        "draft from q, score with one target call, verify_block on the k + 1 target rows at positions T-1 .. T+k-1",
    )
    expect(
        0 < accepted < drafted,
        "this draft differs from the target: some drafts must be accepted and some rejected",
        input=label,
        expected="0 < accepted < drafted",
        got=f"accepted {accepted} of {drafted}",
        hint="sampled mode uses verify_block",
    )


@checks("speculative_generate")
@one_thread()
def sampling_draws_only_from_the_generator(ex):
    """sampled mode, 4 runs of 10 tokens twice with generators seeded alike: equal tokens; global RNG untouched"""
    target_table = torch.randn(6, 6) * 1.5
    draft_table = target_table + torch.randn(6, 6)

    def run(generator):
        return [ex.speculative_generate(markov(target_table), markov(draft_table), torch.tensor([1]), 3, 10,
                                        generator=generator)[0].tolist() for _ in range(4)]  # fmt: skip

    expect_generator_only(
        run,
        "bigram target and a different draft over V = 6, prompt [1], k = 3, 4 runs of 10 tokens",
        "sample the drafts with torch.multinomial(q, 1, generator=generator) and pass the generator to verify_block",
    )


# ------------------------------------------------------------------------------------------ speedup


@checks("speedup")
def acceptance_rate_is_one_minus_total_variation(ex):
    """random (p, q) rows: sum min(p, q) equals 1 - |p - q|_1 / 2; identical rows give 1, disjoint give 0"""
    p, q = random_distributions(7, 9), random_distributions(7, 9, zeros=3)
    got = ex.acceptance_rate(p, q)
    expect_close(got, 1 - 0.5 * (p - q).abs().sum(-1), input=describe(p=p, q=q), hint="sum over tokens of min(p, q)")
    edge = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    other = torch.tensor([[0.0, 0.0, 1.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    expect_close(
        ex.acceptance_rate(edge, other),
        torch.tensor([0.0, 1.0], dtype=torch.float64),
        input="disjoint and identical rows",
    )


@checks("speedup")
def expected_tokens_geometric_sum(ex):
    """expected tokens per call = sum_{i <= k} alpha^i for alpha in [0, 1], k in 0..8"""
    for alpha in (0.0, 0.3, 0.8, 0.95, 1.0):
        for k in (0, 1, 4, 8):
            want = sum(alpha**i for i in range(k + 1))
            got = ex.expected_tokens(alpha, k)
            expect(
                isinstance(got, float) and abs(got - want) <= 1e-9 * max(1.0, want),
                "expected tokens per target call wrong",
                input=f"alpha {alpha}, k {k}",
                expected=f"{want:.6f}",
                got=repr(got),
                hint="(1 - alpha^(k+1)) / (1 - alpha), and k + 1 at alpha = 1 (return a float)",
            )
    for label, call in (
        ("alpha 1.2", lambda: ex.expected_tokens(1.2, 3)),
        ("alpha -0.1", lambda: ex.expected_tokens(-0.1, 3)),
        ("k = -1", lambda: ex.expected_tokens(0.5, -1)),
        ("k = 2.5", lambda: ex.expected_tokens(0.5, 2.5)),
    ):
        expect_value_error(call, input=label, hint="refuse alpha outside [0, 1] and k that is not an int >= 0")


@checks("speedup")
def speedup_by_hand(ex):
    """Leviathan et al.'s improvement factor: alpha 0.8, k 4, c 0.05 -> 2.80; alpha 0.5 -> 1.61; c = 0, k = 0 -> 1"""
    for alpha, k, cost, want in (
        (0.8, 4, 0.05, (1 - 0.8**5) / (0.2 * 1.2)),
        (0.5, 4, 0.05, (1 - 0.5**5) / (0.5 * 1.2)),
        (0.9, 0, 0.3, 1.0),
        (1.0, 3, 0.0, 4.0),
        (0.7, 6, 1.0, (1 - 0.7**7) / (0.3 * 7)),
    ):
        got = ex.speedup(alpha, k, cost)
        expect(
            abs(got - want) <= 1e-9 * want,
            "speed-up wrong",
            input=f"alpha {alpha}, k {k}, cost_ratio {cost}",
            expected=f"{want:.6f}",
            got=repr(got),
            hint="expected tokens per step divided by the step's cost in target forwards, k * c + 1",
        )
    expect_value_error(lambda: ex.speedup(0.5, 2, -0.1), input="cost_ratio -0.1", hint="refuse cost_ratio < 0")
