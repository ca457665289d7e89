"""Checks for p01.moe_math. References: the expert indices that the experts of a small `transformers` Mixtral
actually receive (a forward hook on its router); a loop over tokens that picks each token's experts one at a time;
an exact rational enumeration of the binomial load (`fractions.Fraction`); a Monte Carlo routing simulation with a
stated error; and the parameters of Mixtral and DeepSeek-V3 models built on the `meta` device."""

import math
import warnings
from fractions import Fraction
from functools import cache

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_exact_int,
    expect_tensor,
    expect_value_error,
    one_thread,
    reference_only,
)
from llm_algo.references.hf import transformers_module

checks = Checks("p01.moe_math")
checks.restrict(
    "decode_weight_bytes",
    forbid=("transformers",),
    instead="compute the bytes from the counts you are given (the meta-device models are the checks' reference)",
)


def float64(value) -> torch.Tensor:
    return torch.tensor(float(value), dtype=torch.float64)


# ------------------------------------------------------------------------------------------ route_with_capacity


def route_by_loop(logits: torch.Tensor, top_k: int, capacity_factor: float) -> tuple[list, int, int]:
    """The spec, one token and one pick at a time: the best remaining expert k times; capacity in exact rationals."""
    num_tokens, num_experts = logits.shape
    counts = [0] * num_experts
    for row in logits.tolist():
        remaining = list(range(num_experts))
        for _ in range(top_k):
            best = max(remaining, key=lambda e: row[e])
            counts[best] += 1
            remaining.remove(best)
    capacity = math.ceil(Fraction(capacity_factor) * num_tokens * top_k / num_experts)
    return counts, capacity, sum(max(0, n - capacity) for n in counts)


def distinct_logits(num_tokens: int, num_experts: int, dtype: torch.dtype) -> torch.Tensor:
    """Random logits without ties in any dtype: a random permutation of small integers per token, scaled."""
    ranks = torch.stack([torch.randperm(num_experts) for _ in range(num_tokens)]).to(torch.float64)
    return ((ranks - num_experts / 2) / 4).to(dtype)  # multiples of 1/4 below 64: exact in bf16 and fp16


HINT_ROUTE = (
    "topk(top_k) of each row, bincount(..., minlength=E) of all picks; capacity = ceil(c * T * k / E); "
    "dropped = sum of max(0, n_e - capacity)"
)


def expect_routing(got, want: tuple, num_experts: int, label: str, hint: str = HINT_ROUTE) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "expected (tokens_per_expert, capacity, dropped)",
        input=label,
        expected="a tuple of three",
        got=repr(got)[:120],
        hint="return tokens_per_expert, capacity, dropped",
    )
    counts, capacity, dropped = got
    expect_tensor(counts, shape=(num_experts,), dtype=torch.int64, input=label, hint="one int64 count per expert")
    expect(
        counts.tolist() == list(want[0]),
        "wrong tokens per expert",
        input=label,
        expected=str(list(want[0])),
        got=str(counts.tolist()),
        hint=hint,
    )
    expect_exact_int(capacity, want[1], label, hint, "capacity")
    expect_exact_int(dropped, want[2], label, hint, "number of dropped assignments")


@checks("route_with_capacity")
def matches_a_loop_over_tokens(ex):
    """random logits (fp32, bf16, fp16; 1 to 200 tokens, 3 to 16 experts, top-1 to top-4): equal to a loop"""
    cases = [
        (1, 4, 1, 1.0, torch.float32),
        (37, 8, 2, 1.25, torch.float32),
        (64, 8, 2, 1.0, torch.bfloat16),
        (200, 16, 4, 0.5, torch.float16),
        (13, 3, 2, 2.0, torch.float32),
        (50, 5, 5, 1.0, torch.float32),
        (120, 6, 1, 1.5, torch.bfloat16),
    ]
    for num_tokens, num_experts, top_k, factor, dtype in cases:
        logits = distinct_logits(num_tokens, num_experts, dtype)
        want = route_by_loop(logits, top_k, factor)
        got = ex.route_with_capacity(logits.clone(), top_k, factor)
        expect_routing(got, want, num_experts, describe(router_logits=logits, top_k=top_k, capacity_factor=factor))


@cache
def mixtral_routing(seed: int) -> tuple:
    """Router logits and the expert indices the experts module of a small random Mixtral receives, per layer."""
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers_module()
        torch.manual_seed(seed)
        config = hf.MixtralConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_local_experts=6,
            num_experts_per_tok=2,
        )
        model = hf.AutoModelForCausalLM.from_config(config)
        seen = []
        hooks = [
            layer.mlp.gate.register_forward_hook(lambda module, args, out: seen.append(out[0].detach().clone()))
            for layer in model.model.layers
        ]
        hooks += [
            layer.mlp.experts.register_forward_hook(lambda module, args, out: seen.append(args[1].detach().clone()))
            for layer in model.model.layers
        ]
        with torch.no_grad():
            model(torch.randint(0, 64, (3, 43)))
        for hook in hooks:
            hook.remove()
    logits = [t for t in seen if t.is_floating_point()]
    indices = [t for t in seen if not t.is_floating_point()]
    return tuple(zip(logits, indices, strict=True))


@checks("route_with_capacity")
@one_thread()
def matches_a_real_mixtral_router(ex):
    """a small random Mixtral (6 experts, top-2, 129 tokens): the counts its experts actually receive"""
    for layer, (logits, indices) in enumerate(mixtral_routing(0)):
        counts = torch.bincount(indices.reshape(-1), minlength=6)
        for factor in (1.0, 1.25):
            capacity = math.ceil(Fraction(factor) * 129 * 2 / 6)
            want = (counts.tolist(), capacity, int((counts - capacity).clamp(min=0).sum()))
            got = ex.route_with_capacity(logits.clone(), 2, factor)
            expect_routing(
                got,
                want,
                6,
                f"router logits of layer {layer} of a random Mixtral (129 tokens, 6 experts, top-2), c={factor}",
            )


@checks("route_with_capacity")
def hand_checkable_cases(ex):
    """every token on expert 0 (8 tokens, 4 experts: capacity 2, 6 dropped); top-k = E; idle last experts"""
    all_on_zero = torch.tensor([[3.0, 1.0, 0.0, -1.0]] * 8)
    expect_routing(ex.route_with_capacity(all_on_zero, 1, 1.0), ([8, 0, 0, 0], 2, 6), 4, "8 tokens all on expert 0")
    top2 = torch.tensor([[3.0, 1.0, 0.0, -1.0]] * 8)
    expect_routing(
        ex.route_with_capacity(top2, 2, 1.0),
        ([8, 8, 0, 0], 4, 8),
        4,
        "8 tokens, top-2 of 4, all on experts 0 and 1: capacity ceil(8*2/4) = 4",
    )
    expect_routing(
        ex.route_with_capacity(torch.randn(5, 3), 3, 1.0), ([5, 5, 5], 5, 0), 3, "top-3 of 3: every expert gets all"
    )
    fractional = torch.tensor([[0.0, 2.0, 1.0, -3.0, -4.0]] * 3)
    expect_routing(
        ex.route_with_capacity(fractional, 2, 1.25),
        ([0, 3, 3, 0, 0], 2, 2),
        5,
        "3 tokens, top-2 of 5, c=1.25: capacity ceil(1.5) = 2, experts 3 and 4 idle",
        hint="round the capacity up; keep idle experts (bincount minlength)",
    )


@checks("route_with_capacity")
def refuses_bad_routing(ex):
    """1-D or 3-D logits, top_k of 0 or above E, a capacity factor <= 0: ValueError"""
    ex.route_with_capacity(torch.randn(4, 3), 1, 1.0)  # first: it works at all
    bad = [
        ((torch.randn(8), 1, 1.0), "1-D logits"),
        ((torch.randn(2, 4, 3), 1, 1.0), "3-D logits"),
        ((torch.randn(4, 3), 0, 1.0), "top_k=0"),
        ((torch.randn(4, 3), 4, 1.0), "top_k=4 > 3 experts"),
        ((torch.randn(4, 3), 1, 0.0), "capacity_factor=0"),
        ((torch.randn(4, 3), 1, -1.0), "capacity_factor=-1"),
    ]
    for args, label in bad:
        expect_value_error(
            lambda args=args: ex.route_with_capacity(*args),
            label,
            "validate the shape, top_k and capacity_factor first and raise ValueError",
        )


# ------------------------------------------------------------------------------------------ expected_drop_fraction


def exact_drop_fraction(num_tokens: int, num_experts: int, top_k: int, factor: float) -> Fraction:
    """E * E[max(0, load - C)] / (T k) with the binomial load in exact rationals."""
    p = Fraction(top_k, num_experts)
    capacity = math.ceil(Fraction(factor) * num_tokens * top_k / num_experts)
    excess = sum(
        (n - capacity) * math.comb(num_tokens, n) * p**n * (1 - p) ** (num_tokens - n)
        for n in range(capacity + 1, num_tokens + 1)
    )
    return num_experts * excess / (num_tokens * top_k)


def simulate_drops(num_tokens: int, num_experts: int, top_k: int, factor: float, batches: int) -> tuple:
    """Monte Carlo: each token picks top_k distinct experts (the top_k of uniform noise); the mean dropped fraction
    over `batches` batches and its standard error."""
    capacity = math.ceil(Fraction(factor) * num_tokens * top_k / num_experts)
    picks = torch.rand(batches, num_tokens, num_experts).topk(top_k, dim=-1).indices.reshape(batches, -1)
    offsets = torch.arange(batches).unsqueeze(1) * num_experts
    loads = torch.bincount((picks + offsets).reshape(-1), minlength=batches * num_experts).view(batches, -1)
    fractions = (loads - capacity).clamp(min=0).sum(dim=1).double() / (num_tokens * top_k)
    return float(fractions.mean()), float(fractions.std() / math.sqrt(batches))


HINT_DROP = (
    "the load of one expert is Binomial(T, k/E) (k distinct picks per token); "
    "fraction = E * sum_{n > C} (n - C) P(load = n) / (T * k)"
)


@checks("expected_drop_fraction")
def matches_exact_enumeration(ex):
    """small batches (T up to 64; top-1, top-2 of 8, top-3 of 4, top-4 of 6): equal to an exact rational sum"""
    cases = [(1, 4, 1, 1.0), (16, 8, 2, 1.0), (64, 8, 2, 1.25), (30, 4, 3, 1.0), (40, 6, 4, 1.25), (50, 10, 1, 0.5)]
    for num_tokens, num_experts, top_k, factor in cases:
        want = exact_drop_fraction(num_tokens, num_experts, top_k, factor)
        got = ex.expected_drop_fraction(num_tokens, num_experts, top_k, factor)
        expect(
            isinstance(got, float),
            "the fraction is not a Python float",
            input=f"T={num_tokens}, E={num_experts}, k={top_k}, c={factor}",
            expected="float",
            got=type(got).__name__,
            hint="return a float",
        )
        expect_close(
            float64(got),
            float64(want),
            input=f"T={num_tokens}, E={num_experts}, k={top_k}, c={factor} (exact: {float(want):.6g})",
            what="expected dropped fraction",
            hint=HINT_DROP,
        )


@checks("expected_drop_fraction")
def matches_a_drop_simulation(ex):
    """T = 256 tokens, 1000 simulated batches per case: within 4 standard errors of the Monte Carlo mean"""
    for num_tokens, num_experts, top_k, factor in ((256, 8, 2, 1.0), (256, 16, 8, 1.0), (256, 32, 4, 1.25)):
        mean, error = simulate_drops(num_tokens, num_experts, top_k, factor, 1000)
        got = ex.expected_drop_fraction(num_tokens, num_experts, top_k, factor)
        expect(
            abs(got - mean) <= 4 * error + 1e-12,
            "the expected fraction disagrees with the routing simulation",
            input=f"T={num_tokens}, E={num_experts}, k={top_k}, c={factor}; 1000 random batches",
            expected=f"{mean:.5f} ± {4 * error:.5f} (4 standard errors)",
            got=f"{got:.5f}",
            hint=HINT_DROP,
        )


@checks("expected_drop_fraction")
def edge_cases_and_large_batches(ex):
    """k = E (every load is T), a capacity of every token (0 dropped), T = 8192 (no overflow), falls as c grows"""
    for num_tokens, factor in ((10, 0.5), (10, 1.0), (7, 0.3)):
        want = max(0, num_tokens - math.ceil(Fraction(factor) * num_tokens)) / num_tokens
        got = ex.expected_drop_fraction(num_tokens, 4, 4, factor)
        expect_close(
            float64(got),
            float64(want),
            input=f"T={num_tokens}, top-4 of 4 experts, c={factor}: every load is exactly T",
            what="dropped fraction",
            hint="with k = E every token picks every expert (p = 1): handle it without log(0)",
        )
    got = ex.expected_drop_fraction(20, 8, 2, 4.0)  # capacity 20 = T: an expert can never overflow
    expect_close(float64(got), float64(0.0), input="T=20, E=8, k=2, c=4 (capacity = T)", what="dropped fraction")
    previous = 1.0
    for factor in (0.5, 1.0, 1.25, 1.5, 2.0):
        got = ex.expected_drop_fraction(8192, 64, 8, factor)
        expect(
            isinstance(got, float) and math.isfinite(got) and 0 <= got <= previous,
            "the fraction is not finite, not in [0, 1] or does not fall as the capacity grows",
            input=f"T=8192, E=64, k=8, c={factor}",
            expected=f"finite, between 0 and {previous:.6g}",
            got=repr(got),
            hint="math.comb overflows a float at thousands of tokens: sum in log space (math.lgamma)",
        )
        previous = got
    want = exact_drop_fraction(1024, 8, 2, 1.0)
    got = ex.expected_drop_fraction(1024, 8, 2, 1.0)
    expect_close(float64(got), float64(want), input="T=1024, E=8, k=2, c=1.0", what="dropped fraction", hint=HINT_DROP)


@checks("expected_drop_fraction")
def refuses_bad_sizes(ex):
    """no tokens, top_k of 0 or above E, a capacity factor <= 0: ValueError"""
    ex.expected_drop_fraction(8, 4, 2, 1.0)  # first: it works at all
    for args in ((0, 4, 2, 1.0), (8, 4, 0, 1.0), (8, 4, 5, 1.0), (8, 4, 2, 0.0), (8, 4, 2, -0.5)):
        expect_value_error(
            lambda args=args: ex.expected_drop_fraction(*args),
            f"expected_drop_fraction{args}",
            "validate num_tokens, top_k and capacity_factor first",
        )


# ------------------------------------------------------------------------------------------ decode_weight_bytes

TINY_MIXTRAL = dict(
    vocab_size=96,
    hidden_size=40,
    intermediate_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_local_experts=6,
    num_experts_per_tok=2,
)
TINY_DEEPSEEK = dict(
    vocab_size=80,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=16,
    num_hidden_layers=4,
    first_k_dense_replace=1,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=12,
    kv_lora_rank=8,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=6,
    n_routed_experts=12,
    n_shared_experts=1,
    num_experts_per_tok=3,
    n_group=1,
    topk_group=1,
)


@cache
def meta_model_counts(kind: str, fields: tuple) -> tuple[int, int, int, int, int]:
    """(total, active, routed, experts, top_k) from a model built on the meta device; routed = the `.experts.`
    parameters, active = total - routed + routed * k / E."""
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers_module()
        config = getattr(hf, kind)(**dict(fields))
        with torch.device("meta"):
            model = hf.AutoModelForCausalLM.from_config(config)
        total = sum(p.numel() for p in model.parameters())
        routed = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    experts = getattr(config, "num_local_experts", None) or config.n_routed_experts
    top_k = config.num_experts_per_tok
    assert routed % experts == 0
    return total, total - routed + routed // experts * top_k, routed, experts, top_k


def experts_read_by_enumeration(num_experts: int, top_k: int, num_tokens: int) -> Fraction:
    """E * P(an expert is picked by some token), with P(one token misses it) = C(E-1, k) / C(E, k)."""
    miss = Fraction(math.comb(num_experts - 1, top_k), math.comb(num_experts, top_k))
    return num_experts * (1 - miss**num_tokens)


HINT_DECODE = (
    "routed R = (total - active) * E / (E - k); bytes = s * (total - R + R * (1 - (1 - k/E)**B)); "
    "at B = 1 that is the active size"
)

MODELS = [("MixtralConfig", TINY_MIXTRAL), ("DeepseekV3Config", TINY_DEEPSEEK)]


@checks("decode_weight_bytes")
@one_thread()
def matches_meta_models(ex):
    """small Mixtral and DeepSeek-V3 built on meta: expected bytes for batches 1 to 64, fp32/bf16/fp8 weights"""
    for kind, fields in MODELS:
        total, active, routed, experts, top_k = meta_model_counts(kind, tuple(sorted(fields.items())))
        for num_tokens, size in ((1, 2), (2, 4), (3, 1), (7, 2), (64, 2)):
            read = experts_read_by_enumeration(experts, top_k, num_tokens)
            want = size * (total - routed + routed * read / experts)
            got = ex.decode_weight_bytes(total, active, experts, top_k, num_tokens, size)
            expect_close(
                float64(got),
                float64(want),
                input=f"{kind} on meta: total={total}, active={active}, E={experts}, k={top_k}, B={num_tokens}, "
                f"{size} B/param",
                what="weight bytes per step",
                hint=HINT_DECODE,
            )


@checks("decode_weight_bytes")
def matches_a_batch_simulation(ex):
    """Mixtral-like counts, top-2 of 8 and top-4 of 32: the experts a simulated batch reads (4000 batches)"""
    for experts, top_k, num_tokens in ((8, 2, 3), (32, 4, 5), (32, 4, 20)):
        expert_params, other = 1000, 5000
        total, active = other + experts * expert_params, other + top_k * expert_params
        picks = torch.rand(4000, num_tokens, experts).topk(top_k, dim=-1).indices.reshape(4000, -1)
        read = torch.zeros(4000, experts, dtype=torch.bool).scatter_(1, picks, True).sum(dim=1).double()
        mean, error = float(read.mean()), float(read.std() / math.sqrt(4000))
        got = ex.decode_weight_bytes(total, active, experts, top_k, num_tokens, 1)
        got_read = (got - other) / expert_params
        expect(
            abs(got_read - mean) <= 4 * error,
            "the experts read per step disagree with the routing simulation",
            input=f"E={experts}, k={top_k}, B={num_tokens}; experts of {expert_params} params, {other} others",
            expected=f"{mean:.3f} ± {4 * error:.3f} experts read (4 standard errors)",
            got=f"{got_read:.3f} experts ({got} bytes)",
            hint="a token picks k distinct experts: an expert is missed by all B tokens with probability (1-k/E)^B",
        )


@checks("decode_weight_bytes")
def limits(ex):
    """batch 1 reads the active size, a huge batch the total, k = E the total; published Mixtral and DeepSeek-V3"""
    # sum(p.numel()) of the published configs built on meta (the lesson's first demo cell)
    for total, active, experts, top_k in (
        (46_702_792_704, 12_879_925_248, 8, 2),
        (671_026_404_352, 37_552_282_624, 256, 8),
    ):
        one = ex.decode_weight_bytes(total, active, experts, top_k, 1, 2)
        expect_close(float64(one), float64(2 * active), input=f"total={total}, active={active}, B=1", what="bytes")
        many = ex.decode_weight_bytes(total, active, experts, top_k, 100_000, 2)
        expect_close(float64(many), float64(2 * total), input=f"total={total}, B=100000", what="bytes")
    dense = ex.decode_weight_bytes(1000, 1000, 4, 4, 3, 2)
    expect_close(float64(dense), float64(2000), input="top-4 of 4 (total = active = 1000), B=3", what="bytes")
    smallest = ex.decode_weight_bytes(1, 1, 2, 2, 1, 2)  # one parameter is a valid model
    expect_close(float64(smallest), float64(2), input="total = active = 1, top-2 of 2, B=1", what="bytes")
    got = ex.decode_weight_bytes(2600, 800, 10, 1, 2, 1)  # others 600, experts 200 each: 600 + 200 * 10 * 0.19
    expect_close(
        float64(got),
        float64(600 + 200 * 10 * (1 - Fraction(9, 10) ** 2)),
        input="total=2600, active=800, top-1 of 10, B=2",
        what="bytes",
        hint=HINT_DECODE,
    )


@checks("decode_weight_bytes")
def refuses_bad_counts(ex):
    """no tokens, top_k out of range, active > total, non-positive counts or bytes per parameter: ValueError"""
    ex.decode_weight_bytes(100, 40, 4, 1, 2, 2)  # first: it works at all
    bad = [
        (100, 40, 4, 1, 0, 2),
        (100, 40, 4, 0, 2, 2),
        (100, 40, 4, 5, 2, 2),
        (100, 140, 4, 1, 2, 2),
        (100, 0, 4, 1, 2, 2),
        (100, 40, 4, 1, 2, 0),
    ]
    for args in bad:
        expect_value_error(
            lambda args=args: ex.decode_weight_bytes(*args),
            f"decode_weight_bytes{args}",
            "validate the counts, top_k and the batch first",
        )
