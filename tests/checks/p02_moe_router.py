"""Checks for p02.moe_router. References: Hugging Face `MixtralTopKRouter` and `MixtralSparseMoeBlock` built
locally from a tiny `MixtralConfig` (dropless), and the per-token loop specs in `llm_algo.references.moe` and below
(routing, the capacity formula, the dropping rule "choice rank first, then token order"), with float64 autograd
of the loop spec for the gradients."""

import math

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor
from llm_algo.references.hf import transformers_module
from llm_algo.references.moe import hf_mixtral_block, moe_loop_spec, random_experts, route_one_token

checks = Checks("p02.moe_router")

ROUTING_MODES = [("softmax", True), ("softmax", False), ("sigmoid", True), ("sigmoid", False)]


def spec_routing(logits: torch.Tensor, top_k: int, score_fn: str, normalize: bool):
    """route_one_token for every row, in float64: gates (T, k) float64 and experts (T, k) int64."""
    rows = [route_one_token(row, top_k, score_fn, normalize) for row in logits.to(torch.float64)]
    gates = torch.stack([torch.stack(g) for g, _ in rows]) if rows else torch.zeros(0, top_k, dtype=torch.float64)
    experts = torch.tensor([e for _, e in rows], dtype=torch.long).reshape(-1, top_k)
    return gates, experts


def spec_slots(experts: torch.Tensor, num_experts: int, capacity: int) -> torch.Tensor:
    """The dropping rule, one choice at a time: choice rank first, then token order; -1 when the expert is full."""
    T, k = experts.shape
    load = [0] * num_experts
    slots = torch.full((T, k), -1, dtype=torch.long)
    for j in range(k):
        for t in range(T):
            e = int(experts[t, j])
            if load[e] < capacity:
                slots[t, j] = load[e]
                load[e] += 1
    return slots


def call_layer(ex, x, weights, top_k, capacity_factor):
    """The learner's layer on clones of the inputs (so an in-place write cannot corrupt the references)."""
    names = ("router_weight", "w_gate", "w_up", "w_down")
    return ex.moe_layer(x.clone(), *(weights[n].to(x.dtype).clone() for n in names), top_k, capacity_factor)


def distinct_logits(T: int, E: int, dtype=torch.float32, scale: float = 2.0) -> torch.Tensor:
    """Random logits whose top-k is unambiguous in every dtype: a random permutation of well-separated levels per
    row plus small noise, so the checks never depend on how a tie or a near tie is broken."""
    levels = torch.linspace(-scale, scale, E, dtype=torch.float64)
    order = torch.argsort(torch.rand(T, E), dim=-1)
    noise = torch.rand(T, E, dtype=torch.float64) * (levels[1] - levels[0]) * 0.2 if E > 1 else 0
    return (levels[order] + noise).to(dtype)


def random_routing(T: int, E: int, k: int) -> torch.Tensor:
    """Random (T, k) expert ids, distinct within a token, skewed so some experts overflow."""
    logits = torch.randn(T, E) + torch.linspace(1.0, -1.0, E)
    return torch.topk(logits, k, dim=-1).indices


# ------------------------------------------------------------------------------------------ route_topk


@checks("route_topk")
def hand_checkable_softmax_top2(ex):
    """logits [0, log 2, log 3, log 4] over 4 experts, k = 2: experts [3, 2], gates [4/7, 3/7] (or [0.4, 0.3] raw)"""
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    label = "router_logits = log([1, 2, 3, 4]) (softmax [0.1, 0.2, 0.3, 0.4]), top_k=2"
    gates, experts = ex.route_topk(logits, 2, "softmax", True)
    expect_tensor(experts, shape=(1, 2), dtype=torch.long, input=label, what="experts")
    expect(
        experts.tolist() == [[3, 2]],
        "wrong experts chosen",
        input=label,
        expected="[[3, 2]] (highest score first)",
        got=str(experts.tolist()),
        hint="torch.topk over the experts (the last dimension) of each token; it sorts best first",
    )
    expect_close(
        gates,
        torch.tensor([[4 / 7, 3 / 7]], dtype=torch.float64),
        input=label + ", normalize=True",
        what="gates",
        hint="softmax over the experts of each token (dim=-1), then divide the two kept gates by their sum",
    )
    raw, _ = ex.route_topk(logits, 2, "softmax", False)
    expect_close(
        raw,
        torch.tensor([[0.4, 0.3]], dtype=torch.float64),
        input=label + ", normalize=False",
        what="gates",
        hint="normalize=False keeps the raw softmax probabilities of the chosen experts",
    )


@checks("route_topk")
def matches_hugging_face_mixtral_router(ex):
    """softmax + renormalise matches MixtralTopKRouter on random hidden states, k = 1, 2, 3 over 4..8 experts"""
    transformers = transformers_module()
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    for T, E, H, k in [(1, 4, 8, 2), (13, 8, 16, 2), (7, 5, 8, 3), (9, 6, 8, 1)]:
        config = transformers.MixtralConfig(hidden_size=H, num_local_experts=E, num_experts_per_tok=k)
        router = MixtralTopKRouter(config)
        hidden = torch.randn(T, H)
        with torch.no_grad():
            router.weight.copy_(torch.randn(E, H))
            logits, hf_gates, hf_experts = router(hidden)
        label = describe(router_logits=logits) + f", top_k={k}, softmax, normalize=True (MixtralTopKRouter)"
        gates, experts = ex.route_topk(logits.clone(), k, "softmax", True)
        expect_tensor(experts, shape=(T, k), dtype=torch.long, input=label, what="experts")
        expect(
            torch.equal(experts, hf_experts),
            "chosen experts differ from MixtralTopKRouter",
            input=label,
            expected=str(hf_experts.tolist()[:3]),
            got=str(experts.tolist()[:3]),
            hint="softmax over dim=-1 (the experts of a token), then torch.topk(scores, k, dim=-1)",
        )
        expect_tensor(gates, shape=(T, k), dtype=torch.float32, input=label, what="gates")
        expect_close(
            gates,
            spec_routing(logits, k, "softmax", True)[0],
            baseline=hf_gates,
            input=label,
            what="gates",
            hint="renormalise over the k chosen gates of each token (they must sum to 1)",
        )


@checks("route_topk")
def every_score_function_and_dtype(ex):
    """softmax/sigmoid, with and without renormalisation, fp32/bf16/fp16/fp64 logits: the per-token spec"""
    for score_fn, normalize in ROUTING_MODES:
        for dtype, (T, E, k) in zip(
            (torch.float32, torch.bfloat16, torch.float16, torch.float64),
            ((11, 8, 2), (6, 16, 4), (1, 3, 1), (5, 7, 3)),
            strict=True,
        ):
            logits = distinct_logits(T, E, dtype)
            label = describe(router_logits=logits) + f", top_k={k}, score_fn={score_fn!r}, normalize={normalize}"
            gates, experts = ex.route_topk(logits.clone(), k, score_fn, normalize)
            want_gates, want_experts = spec_routing(logits, k, score_fn, normalize)
            compute_dtype = torch.promote_types(dtype, torch.float32)
            expect_tensor(
                gates,
                shape=(T, k),
                dtype=compute_dtype,
                input=label,
                what="gates",
                hint="compute the scores in promote_types(logits.dtype, float32): bf16/fp16 -> float32, float64 stays",
            )
            expect(
                torch.equal(experts, want_experts),
                "chosen experts differ from the spec",
                input=label,
                expected=str(want_experts.tolist()[:3]),
                got=str(experts.tolist()[:3]),
                hint="the k highest scores of each token, best first",
            )
            expect_close(
                gates,
                want_gates,
                input=label,
                what="gates",
                hint="softmax over the experts (dim=-1) or an elementwise sigmoid; renormalise over the k chosen "
                "gates only when normalize=True (never by the sum of all E scores)",
            )


@checks("route_topk")
def gradient_reaches_the_logits(ex):
    """float64: d(sum of weighted gates)/d(logits) equals autograd of the spec, in all four modes"""
    for score_fn, normalize in ROUTING_MODES:
        logits = distinct_logits(6, 5, torch.float64).requires_grad_()
        spec_logits = logits.detach().clone().requires_grad_()
        weights = torch.randn(6, 2, dtype=torch.float64)
        gates, _ = ex.route_topk(logits, 2, score_fn, normalize)
        expect(
            gates.requires_grad,
            "the gates are not connected to the logits",
            input=describe(router_logits=logits) + f", {score_fn}, normalize={normalize}",
            expected="gates with a grad_fn",
            got="no gradient path",
            hint="do not detach the scores or call .item(); the router learns only through the gate values",
        )
        (gates * weights).sum().backward()
        (spec_routing(spec_logits, 2, score_fn, normalize)[0] * weights).sum().backward()
        expect_close(
            logits.grad,
            spec_logits.grad,
            input=describe(router_logits=logits) + f", top_k=2, {score_fn}, normalize={normalize}",
            what="d loss / d router_logits",
            hint="gates = topk(scores).values (divided by their sum if normalize): keep every step differentiable",
        )


# ------------------------------------------------------------------------------------------ assign_capacity_slots


@checks("assign_capacity_slots")
def hand_checkable_priority(ex):
    """4 tokens, k = 2, capacity 2: every first choice is served before any second choice"""
    experts = torch.tensor([[0, 1], [0, 2], [1, 0], [0, 1]])
    expected = torch.tensor([[0, 1], [1, 0], [0, -1], [-1, -1]])
    got = ex.assign_capacity_slots(experts.clone(), 3, 2)
    label = "experts [[0,1],[0,2],[1,0],[0,1]], E=3, capacity=2"
    expect_tensor(got, shape=(4, 2), dtype=torch.long, input=label, what="slots")
    expect(
        torch.equal(got, expected),
        "wrong slots",
        input=label,
        expected=str(expected.tolist()),
        got=str(got.tolist()),
        hint="first choices in token order fill expert 0 with tokens 0 and 1 (token 3's first choice is dropped), "
        "then second choices: token 0 -> expert 1 slot 1 (token 2's first choice took slot 0); slots start at 0, "
        "and a full expert gives -1",
    )


@checks("assign_capacity_slots")
def matches_the_loop_spec(ex):
    """random routings over shapes and capacities (none, some and most choices dropped) equal the loop spec"""
    for T, E, k, capacity in [(1, 4, 2, 1), (17, 4, 2, 3), (33, 8, 2, 9), (40, 6, 3, 5), (12, 5, 1, 2), (9, 3, 3, 0)]:
        experts = random_routing(T, E, k)
        got = ex.assign_capacity_slots(experts.clone(), E, capacity)
        want = spec_slots(experts, E, capacity)
        label = f"experts (T={T}, k={k}) random over E={E}, capacity={capacity}"
        expect_tensor(got, shape=(T, k), dtype=torch.long, input=label, what="slots")
        wrong = (got != want).nonzero()
        expect(
            wrong.numel() == 0,
            f"{len(wrong)} of {T * k} slots differ from the loop spec",
            input=label,
            expected=f"slot {int(want[tuple(wrong[0])])} at (token, choice) {wrong[0].tolist()}" if len(wrong) else "",
            got=f"{int(got[tuple(wrong[0])])}" if len(wrong) else "",
            hint="priority: all first choices in token order, then all second choices (experts.T flattened); "
            "a slot is the number of earlier choices for the same expert; -1 once that reaches capacity",
        )


@checks("assign_capacity_slots")
def capacity_is_respected_and_nothing_lost(ex):
    """each expert fills slots 0..min(load, C)-1 exactly once; with C >= T*k nothing is dropped"""
    for T, E, k in [(64, 8, 2), (25, 4, 3)]:
        experts = random_routing(T, E, k)
        load = torch.bincount(experts.flatten(), minlength=E)
        for capacity in (int(load.max()), int(load.max()) - 1, T * k, 1):
            slots = ex.assign_capacity_slots(experts.clone(), E, capacity)
            label = f"experts (T={T}, k={k}) over E={E}, loads {load.tolist()}, capacity={capacity}"
            for e in range(E):
                used = sorted(slots[(experts == e) & (slots >= 0)].tolist())
                expect(
                    used == list(range(min(int(load[e]), capacity))),
                    f"expert {e} has the wrong set of slots",
                    input=label,
                    expected=f"slots 0..{min(int(load[e]), capacity) - 1}, each once",
                    got=str(used),
                    hint="slots are 0-based, unique per expert, and an expert keeps at most `capacity` tokens",
                )


# ------------------------------------------------------------------------------------------ moe_layer


def layer_case(B, S, H, F_, E, dtype):
    weights = random_experts(E, H, F_)
    x = torch.randn(B, S, H, dtype=torch.float64).to(dtype)
    return x, weights


@checks("moe_layer")
def dropless_matches_hugging_face_mixtral(ex):
    """capacity_factor=None equals MixtralSparseMoeBlock and the loop spec (float64, float32), batch of one, one token"""
    for (B, S, H, F_, E, k), dtype in [
        ((2, 7, 16, 24, 8, 2), torch.float64),
        ((1, 1, 8, 12, 4, 2), torch.float32),
        ((3, 5, 16, 8, 6, 3), torch.float32),
        ((2, 9, 8, 16, 4, 1), torch.float64),
    ]:
        x, weights = layer_case(B, S, H, F_, E, dtype)
        label = describe(x=x) + f", E={E}, F={F_}, top_k={k}, capacity_factor=None (dropless)"
        got = call_layer(ex, x, weights, k, None)
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
        with torch.no_grad():
            hugging_face = hf_mixtral_block(weights, k, dtype)(x)
        hint = (
            "dropless: capacity = the largest number of choices any expert got; y_t = sum_j gate_j * FFN_{e_j}(x_t) "
            "with Mixtral's softmax -> top-k -> renormalised gates"
        )
        # Hugging Face computes the router softmax in float32 even in a float64 model: compare at float32 precision.
        expect_close(got, hugging_face, dtype=torch.float32, input=label + ", vs MixtralSparseMoeBlock", hint=hint)
        expect_close(
            got,
            moe_loop_spec(x.double(), weights, k),
            baseline=hugging_face if dtype == torch.float32 else None,
            input=label + ", vs the float64 loop spec",
            hint=hint,
        )


@checks("moe_layer")
def capacity_and_dropping_match_the_loop_spec(ex):
    """capacity factors 0.5..2 with C = ceil(c * T * k / E), drops by choice rank then token order: the loop spec"""
    for (B, S, E, k), factor in [
        ((2, 13, 4, 2), 1.0),  # 6.5 -> 7 slots
        ((1, 10, 8, 2), 1.25),  # 3.125 -> 4 slots
        ((3, 6, 5, 2), 0.5),  # 3.6 -> 4 slots
        ((2, 11, 6, 3), 2.0),  # 11 slots
        ((1, 9, 4, 1), 1.0),  # 2.25 -> 3 slots
    ]:
        x, weights = layer_case(B, S, 8, 12, E, torch.float64)
        weights["router_weight"] = weights["router_weight"] + torch.linspace(1.5, -1.5, E)[:, None] / 8**0.5
        capacity = math.ceil(factor * B * S * k / E)
        label = describe(x=x) + f", E={E}, top_k={k}, capacity_factor={factor} (C = {capacity})"
        got = call_layer(ex, x, weights, k, factor)
        expect_tensor(got, shape=x.shape, dtype=torch.float64, input=label)
        expect_close(
            got,
            moe_loop_spec(x, weights, k, capacity=capacity),
            input=label,
            hint="C = ceil(capacity_factor * T * k / E) with T = B*S tokens; a dropped choice (slot -1) must be "
            "left out of both dispatch and combine (index -1 would overwrite the last slot)",
        )


@checks("moe_layer")
def gradients_reach_router_and_experts(ex):
    """float64 autograd: d loss/d x, router_weight, w_gate, w_up, w_down equal the loop spec's, with drops"""
    x, weights = layer_case(2, 6, 8, 12, 4, torch.float64)
    names = ("router_weight", "w_gate", "w_up", "w_down")
    mine = {n: weights[n].clone().requires_grad_() for n in names}
    spec = {n: weights[n].clone().requires_grad_() for n in names}
    x_mine, x_spec = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(x.shape, dtype=torch.float64)
    label = describe(x=x) + ", E=4, top_k=2, capacity_factor=1.0 (C = 6), loss = sum(y * random)"
    out = ex.moe_layer(x_mine, *(mine[n] for n in names), 2, 1.0)
    (out * upstream).sum().backward()
    (moe_loop_spec(x_spec, spec, 2, capacity=6) * upstream).sum().backward()
    for name, got, want in [("x", x_mine.grad, x_spec.grad)] + [(n, mine[n].grad, spec[n].grad) for n in names]:
        expect(
            got is not None,
            f"no gradient reaches {name}",
            input=label,
            expected=f"d loss / d {name}",
            got="None",
            hint="the router learns only through the gates: keep them attached (no .detach(), no torch.no_grad())",
        )
        expect_close(
            got,
            want,
            input=label,
            what=f"d loss / d {name}",
            hint="the gates multiply the expert outputs in the combine step, so d loss/d router_weight flows "
            "through them; do not detach the gates",
        )
