"""Checks for p02.moe_balance. References: Hugging Face `load_balancing_loss_func` (Mixtral module; it normalises f
by T instead of T*k, so the checks divide it by k), `DeepseekV3TopkRouter` and `DeepseekV3MoE` built locally from
tiny configs (one expert group, routed_scaling_factor 1), closed forms (the balanced loss is 1, the z-loss and its
gradient), and loop specs written here and in `llm_algo.references.moe`, with float64 autograd for the gradients."""

import math

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor
from llm_algo.references.hf import transformers_module
from llm_algo.references.moe import hf_deepseek_v3_moe, moe_loop_spec, random_experts, route_one_token

checks = Checks("p02.moe_balance")


def spec_balance_loss(logits: torch.Tensor, top_k: int, token_mask=None) -> torch.Tensor:
    """N * sum_i f_i P_i token by token, float64: f from counted top-k choices (constants), P the mean probability."""
    T, N = logits.shape
    rows = [t for t in range(T) if token_mask is None or bool(token_mask[t])]
    counts = [0] * N
    prob_sum = torch.zeros(N, dtype=torch.float64)
    for t in rows:
        probs = torch.softmax(logits[t].to(torch.float64), dim=-1)
        for e in torch.topk(probs.detach(), top_k).indices.tolist():
            counts[e] += 1
        prob_sum = prob_sum + probs
    f = torch.tensor(counts, dtype=torch.float64) / (len(rows) * top_k)
    return N * (f * prob_sum / len(rows)).sum()


def hf_balance_loss(logits: torch.Tensor, top_k: int, token_mask=None) -> torch.Tensor:
    """Hugging Face's Mixtral loss for one layer, divided by k (it divides the counts by T, not T * k)."""
    transformers_module()
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    mask = None if token_mask is None else token_mask[None].long()  # (batch 1, T)
    return load_balancing_loss_func((logits,), logits.shape[-1], top_k, mask) / top_k


def separated_logits(T: int, N: int, dtype=torch.float32, scale: float = 2.0) -> torch.Tensor:
    """Random logits with a clear ranking in every row (levels a permutation apart, small noise): no near ties."""
    levels = torch.linspace(-scale, scale, N, dtype=torch.float64)
    order = torch.argsort(torch.rand(T, N), dim=-1)
    noise = torch.rand(T, N, dtype=torch.float64) * (levels[1] - levels[0]) * 0.2
    return (levels[order] + noise).to(dtype)


def skewed_logits(T: int, N: int, dtype=torch.float32) -> torch.Tensor:
    """Separated logits plus a per-expert preference, so the routing is visibly unbalanced."""
    return (separated_logits(T, N, torch.float64) + torch.linspace(2.0, -2.0, N, dtype=torch.float64)).to(dtype)


# ------------------------------------------------------------------------------------------ load_balancing_loss


@checks("load_balancing_loss")
def hand_checkable_values(ex):
    """closed forms: 17/12 for a 2-token case; exactly 1 for a balanced router (N = 4, 8, 16; k = 1, 2)"""
    logits = torch.log(torch.tensor([[3.0, 1.0], [2.0, 1.0]]))  # probs [3/4, 1/4] and [2/3, 1/3], both pick expert 0
    label = "router_logits = log([[3, 1], [2, 1]]), top_k=1: f = [1, 0], P = [17/24, 7/24]"
    got = ex.load_balancing_loss(logits, 1)
    expect_tensor(got, shape=(), dtype=torch.float32, input=label, hint="return a 0-dim float32 tensor")
    expect_close(
        got,
        torch.tensor(17 / 12, dtype=torch.float64),
        input=label,
        hint="N * sum_i f_i * P_i with f the fraction of choices and P the mean softmax probability per expert",
    )
    for N in (4, 8, 16):
        for k in (1, 2):
            pattern = sum(torch.eye(N).roll(j, dims=1) for j in range(k))  # token t prefers experts t .. t+k-1
            balanced = (3.0 * pattern).repeat(5, 1)  # (5N, N): every expert chosen 5k times, mean probability 1/N
            label = f"balanced router: (T={5 * N}, N={N}) logits 3 on experts t..t+{k - 1} (mod N), top_k={k}"
            expect_close(
                ex.load_balancing_loss(balanced, k),
                torch.tensor(1.0, dtype=torch.float64),
                input=label,
                hint="uniform routing gives exactly 1: divide the counts by T * k (so f sums to 1) and multiply "
                "by the number of experts N",
            )


@checks("load_balancing_loss")
def matches_hugging_face_load_balancing_loss_func(ex):
    """equals HF's load_balancing_loss_func / k for one layer, skewed and random routers, with and without padding"""
    cases = [(37, 8, 2, False), (64, 16, 4, True), (1, 4, 1, False), (20, 6, 3, True), (50, 8, 1, True)]
    for T, N, k, padded in cases:
        logits = skewed_logits(T, N) if T % 2 else separated_logits(T, N)
        mask = (torch.rand(T) > 0.3) | (torch.arange(T) == 0) if padded else None
        label = (
            describe(router_logits=logits)
            + f", top_k={k}"
            + (f", {int(mask.sum())} of {T} tokens real" if padded else "")
        )
        got = ex.load_balancing_loss(logits.clone(), k, mask)
        expect_tensor(got, shape=(), dtype=torch.float32, input=label)
        expect_close(
            got,
            spec_balance_loss(logits, k, mask),
            baseline=hf_balance_loss(logits, k, mask),
            input=label + " (vs HF load_balancing_loss_func / k)",
            hint="f_i = (top-k choices of expert i) / (real tokens * k), P_i = mean softmax probability of expert i "
            "over the real tokens; padding is left out of both",
        )


@checks("load_balancing_loss")
def gradient_flows_only_through_P(ex):
    """float64 autograd: d loss / d logits equals the spec's, where f is a constant (counts) and P carries the gradient"""
    for T, N, k, padded in [(24, 8, 2, False), (15, 5, 3, True)]:
        logits = skewed_logits(T, N, torch.float64).requires_grad_()
        spec_logits = logits.detach().clone().requires_grad_()
        mask = (torch.arange(T) % 4 != 3) if padded else None
        label = describe(router_logits=logits) + f", top_k={k}" + (", every 4th token padding" if padded else "")
        got = ex.load_balancing_loss(logits, k, mask)
        expect_tensor(got, shape=(), dtype=torch.float64, input=label, hint="float64 logits stay float64")
        expect(
            got.requires_grad,
            "the loss has no gradient",
            input=label,
            expected="a loss connected to the logits through P",
            got="no grad_fn",
            hint="P is the mean of the softmax: keep it differentiable (no .detach() or .item())",
        )
        got.backward()
        spec_balance_loss(spec_logits, k, mask).backward()
        expect_close(
            logits.grad,
            spec_logits.grad,
            input=label,
            what="d loss / d router_logits",
            hint="the gradient is N * f_i * dP_i/dlogits: P must be the mean of the FULL softmax (all N experts), "
            "not of the k chosen gates",
        )


@checks("load_balancing_loss")
def low_precision_logits_give_a_float32_loss(ex):
    """bf16 and fp16 router logits: softmax and loss in float32, a 0-dim float32 result (the docstring's dtype)"""
    for dtype in (torch.bfloat16, torch.float16):
        logits = skewed_logits(33, 8, dtype)
        label = describe(router_logits=logits) + ", top_k=2"
        got = ex.load_balancing_loss(logits.clone(), 2)
        expect_tensor(got, shape=(), dtype=torch.float32, input=label, hint="compute in promote_types(dtype, float32)")
        expect_close(
            got,
            spec_balance_loss(logits, 2),
            input=label,
            hint="upcast the logits to float32 before the softmax: P in bf16 is rounded to 3 significant digits",
        )


# ------------------------------------------------------------------------------------------ router_z_loss


@checks("router_z_loss")
def hand_checkable_z_loss(ex):
    """logits [[0, 0], [0, log 3]]: logsumexp = log 2 and log 4, so the loss is 2.5 (log 2)^2"""
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    label = "router_logits = [[0, 0], [0, log 3]]"
    got = ex.router_z_loss(logits)
    expect_tensor(got, shape=(), dtype=torch.float32, input=label, hint="return a 0-dim float32 tensor")
    expect_close(
        got,
        torch.tensor(2.5 * math.log(2.0) ** 2, dtype=torch.float64),
        input=label,
        hint="mean over tokens of (log sum_i exp(logit_i))^2: square each token's logsumexp, then average",
    )


@checks("router_z_loss")
def random_and_huge_logits(ex):
    """random logits in fp32/bf16/fp16/fp64 and logits of size 1e4 (exp overflows) match float64 logsumexp"""
    cases = [
        (torch.randn(33, 8) * 3, "random"),
        ((torch.randn(5, 64) * 3).to(torch.bfloat16), "random bf16"),
        ((torch.randn(7, 16) * 3).to(torch.float16), "random fp16"),
        (torch.randn(1, 3, dtype=torch.float64), "one token"),
        (torch.randn(9, 8) * 100 + 1e4, "huge: around 1e4"),
        ((torch.randn(4, 8) * 10 + 6e4).to(torch.float16), "huge fp16: around 6e4"),
    ]
    for logits, what in cases:
        label = describe(router_logits=logits) + f" ({what})"
        got = ex.router_z_loss(logits.clone())
        expect_tensor(
            got,
            shape=(),
            dtype=torch.promote_types(logits.dtype, torch.float32),
            input=label,
            hint="compute in promote_types(dtype, float32) and return a 0-dim tensor",
        )
        expect_close(
            got,
            torch.logsumexp(logits.double(), dim=-1).pow(2).mean(),
            input=label,
            hint="use torch.logsumexp (it subtracts the row max): log(exp(l).sum()) overflows to inf for large "
            "logits; square per token, then take the mean over tokens",
        )


@checks("router_z_loss")
def gradient_closed_form(ex):
    """float64: d L_z / d logits = (2 / T) * logsumexp_t * softmax_t"""
    logits = (torch.randn(11, 6, dtype=torch.float64) * 2).requires_grad_()
    label = describe(router_logits=logits)
    ex.router_z_loss(logits).backward()
    with torch.no_grad():
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        expected = 2.0 / logits.shape[0] * lse * torch.softmax(logits, dim=-1)
    expect_close(
        logits.grad,
        expected,
        input=label,
        what="d loss / d router_logits",
        hint="the loss is the MEAN over tokens of logsumexp squared; the gradient of each term is 2 * lse * softmax",
    )


# ------------------------------------------------------------------------------------------ biased_routing


def spec_biased(logits: torch.Tensor, bias: torch.Tensor, top_k: int):
    rows = [route_one_token(row, top_k, "sigmoid", True, bias.to(torch.float64)) for row in logits.to(torch.float64)]
    gates = torch.stack([torch.stack(g) for g, _ in rows])
    experts = torch.tensor([e for _, e in rows], dtype=torch.long)
    return gates, experts


@checks("biased_routing")
def hand_checkable_selection(ex):
    """scores [0.9, 0.6, 0.5, 0.2] with bias [-0.5, 0, 0, 0.5], k = 2: experts [3, 1], gates [0.25, 0.75]"""
    scores = torch.tensor([[0.9, 0.6, 0.5, 0.2]], dtype=torch.float64)
    logits = torch.log(scores / (1 - scores)).float()  # sigmoid(logits) = scores
    bias = torch.tensor([-0.5, 0.0, 0.0, 0.5])
    label = "sigmoid scores [0.9, 0.6, 0.5, 0.2], bias [-0.5, 0, 0, 0.5], top_k=2 (biased: [0.4, 0.6, 0.5, 0.7])"
    gates, experts = ex.biased_routing(logits, bias.clone(), 2)
    expect(
        torch.is_tensor(experts) and experts.tolist() == [[3, 1]],
        "wrong experts chosen",
        input=label,
        expected="[[3, 1]] (by biased score, best first)",
        got=str(experts.tolist() if torch.is_tensor(experts) else experts),
        hint="choose by sigmoid(logits) + bias (the bias is added to the scores, not to the logits)",
    )
    expect_close(
        gates,
        torch.tensor([[0.25, 0.75]], dtype=torch.float64),
        input=label,
        what="gates",
        hint="the gates are the UNBIASED scores of the chosen experts (0.2 and 0.6), divided by their sum",
    )


@checks("biased_routing")
def matches_hugging_face_deepseek_v3_router(ex):
    """random logits and biases: the spec in fp32/bf16/fp64, and DeepseekV3TopkRouter (one group, scaling 1)"""
    transformers = transformers_module()
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    for T, N, H, k in [(13, 8, 16, 2), (1, 4, 8, 1), (21, 16, 8, 4)]:
        config = transformers.DeepseekV3Config(
            hidden_size=H,
            n_routed_experts=N,
            num_experts_per_tok=k,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=1.0,
            norm_topk_prob=True,
        )
        router = DeepseekV3TopkRouter(config)
        hidden = torch.randn(T, H)
        bias = torch.randn(N) * 0.3
        with torch.no_grad():
            router.weight.copy_(torch.randn(N, H) / H**0.5)
            router.e_score_correction_bias.copy_(bias)
            logits, hf_gates, hf_experts = router(hidden)
        label = describe(router_logits=logits, bias=bias) + f", top_k={k} (DeepseekV3TopkRouter)"
        gates, experts = ex.biased_routing(logits.clone(), bias.clone(), k)
        expect_tensor(experts, shape=(T, k), dtype=torch.long, input=label, what="experts")
        expect_tensor(gates, shape=(T, k), dtype=torch.float32, input=label, what="gates")
        # HF returns the k experts unsorted: compare after sorting both by expert id.
        order, hf_order = experts.argsort(dim=-1), hf_experts.argsort(dim=-1)
        expect(
            torch.equal(experts.gather(-1, order), hf_experts.gather(-1, hf_order)),
            "chosen experts differ from DeepseekV3TopkRouter",
            input=label,
            expected=str(hf_experts.sort(dim=-1).values.tolist()[:3]),
            got=str(experts.sort(dim=-1).values.tolist()[:3]),
            hint="top-k of sigmoid(logits) + bias",
        )
        expect_close(
            gates.gather(-1, order),
            spec_biased(logits, bias, k)[0].gather(-1, spec_biased(logits, bias, k)[1].argsort(dim=-1)),
            baseline=hf_gates.gather(-1, hf_order),
            input=label,
            what="gates",
            hint="gates: the unbiased sigmoid scores of the chosen experts divided by their sum",
        )
    for dtype in (torch.bfloat16, torch.float64):
        logits, bias = separated_logits(9, 8, dtype), torch.randn(8) * 0.05
        gates, experts = ex.biased_routing(logits.clone(), bias.clone(), 3)
        want_gates, want_experts = spec_biased(logits, bias, 3)
        label = describe(router_logits=logits, bias=bias) + ", top_k=3"
        expect(
            torch.equal(experts, want_experts),
            "chosen experts differ from the spec",
            input=label,
            expected=str(want_experts.tolist()[:2]),
            got=str(experts.tolist()[:2]),
            hint="top-k of sigmoid(logits) + bias, best first",
        )
        expect_tensor(gates, shape=(9, 3), dtype=torch.promote_types(dtype, torch.float32), input=label, what="gates")
        expect_close(gates, want_gates, input=label, what="gates", hint="scores in at least float32")


@checks("biased_routing")
def bias_only_selects(ex):
    """the bias never changes gate values: shifting every bias by 0.3 changes nothing, and no gradient reaches it"""
    logits = separated_logits(17, 8, torch.float64).requires_grad_()
    bias = (torch.randn(8, dtype=torch.float64) * 0.2).requires_grad_()
    label = describe(router_logits=logits, bias=bias) + ", top_k=2"
    gates, experts = ex.biased_routing(logits, bias, 2)
    shifted_gates, shifted_experts = ex.biased_routing(logits, bias + 0.3, 2)
    expect(
        torch.equal(experts, shifted_experts),
        "the selection changed when every bias moved by the same amount",
        input=label + ", bias vs bias + 0.3",
        expected=str(experts.tolist()[:2]),
        got=str(shifted_experts.tolist()[:2]),
        hint="compare scores + bias per token: a common shift cannot change the ranking",
    )
    expect_close(
        shifted_gates,
        gates.detach(),
        input=label + ", bias vs bias + 0.3",
        what="gates",
        hint="the gates must come from the unbiased scores: the bias only decides which experts are chosen",
    )
    grad_bias = torch.autograd.grad(gates.sum() + (gates * gates).sum(), bias, allow_unused=True)[0]
    expect(
        grad_bias is None or not bool(grad_bias.any()),
        "the bias receives a gradient through the gates",
        input=label,
        expected="no gradient to the bias (it is updated by update_bias, not by the optimizer)",
        got=f"|grad| up to {float(grad_bias.abs().max()):.3g}" if grad_bias is not None else "",
        hint="gather the gates from the unbiased scores",
    )
    weights = torch.randn(17, 2, dtype=torch.float64)
    spec_logits = logits.detach().clone().requires_grad_()
    (ex.biased_routing(logits, bias.detach(), 2)[0] * weights).sum().backward()
    (spec_biased(spec_logits, bias.detach(), 2)[0] * weights).sum().backward()
    expect_close(
        logits.grad,
        spec_logits.grad,
        input=label,
        what="d loss / d router_logits",
        hint="gates = sigmoid scores of the chosen experts / their sum, differentiable in the logits",
    )


# ------------------------------------------------------------------------------------------ update_bias


def spec_update(bias: torch.Tensor, experts: torch.Tensor, gamma: float) -> torch.Tensor:
    N = bias.shape[0]
    load = [0] * N
    for e in experts.flatten().tolist():
        load[e] += 1
    mean_load = experts.numel() / N
    step = [gamma * ((mean_load > c) - (mean_load < c)) for c in load]  # gamma * sign(mean - load)
    return bias.to(torch.float64) + torch.tensor(step, dtype=torch.float64)


@checks("update_bias")
def hand_checkable_update(ex):
    """loads [4, 2, 1, 1] against a mean of 2: bias moves by gamma * [-1, 0, +1, +1]"""
    experts = torch.tensor([[0, 1], [0, 2], [0, 1], [3, 0]])
    bias = torch.tensor([0.1, -0.2, 0.0, 0.3])
    label = (
        "experts [[0,1],[0,2],[0,1],[3,0]] (loads [4, 2, 1, 1], mean k*T/N = 2), bias [0.1, -0.2, 0, 0.3], gamma=0.01"
    )
    got = ex.update_bias(bias.clone(), experts.clone(), 0.01)
    expect_tensor(got, shape=(4,), dtype=torch.float32, input=label, hint="return the bias's dtype")
    expect_close(
        got,
        torch.tensor([0.09, -0.2, 0.01, 0.31], dtype=torch.float64),
        input=label,
        hint="b + gamma * sign(mean_load - load): overloaded experts go DOWN, an expert at the mean stays, and "
        "all k choices of a token count",
    )


@checks("update_bias")
def matches_the_loop_spec(ex):
    """random batches over shapes, gammas and float32/float64 biases: the loop spec"""
    for T, N, k, gamma, dtype in [
        (64, 8, 2, 1e-3, torch.float32),
        (33, 16, 4, 0.05, torch.float64),
        (10, 6, 1, 0.1, torch.float32),
        (7, 12, 3, 0.01, torch.float64),
    ]:
        experts = torch.topk(skewed_logits(T, N), k, dim=-1).indices
        bias = (torch.randn(N) * 0.1).to(dtype)
        label = describe(experts=experts, bias=bias) + f", gamma={gamma}"
        got = ex.update_bias(bias.clone(), experts.clone(), gamma)
        expect_tensor(got, shape=(N,), dtype=dtype, input=label, hint="return a new bias in the bias's dtype")
        expect_close(
            got,
            spec_update(bias, experts, gamma),
            input=label,
            hint="load = choices per expert over all T * k choices; mean = k * T / N; "
            "b + gamma * sign(mean - load): a fixed step, not one proportional to the load error",
        )


@checks("update_bias")
def edge_cases_and_no_side_effects(ex):
    """unused experts rise by gamma, exactly balanced loads keep the bias, the input bias is not modified"""
    bias = torch.randn(6) * 0.1
    before = bias.clone()
    experts = torch.tensor([[0, 1, 2]])  # one token, k = 3: experts 3..5 got nothing; mean 0.5
    got = ex.update_bias(bias, experts, 0.25)
    label = "one token, experts [[0, 1, 2]] over N=6, gamma=0.25"
    expect(
        torch.equal(bias, before),
        "the bias argument was modified in place",
        input=label,
        expected="bias unchanged; a new tensor returned",
        got="the caller's bias changed",
        hint="return bias + step instead of bias += step",
    )
    expect_close(
        got,
        before.double() + torch.tensor([-0.25, -0.25, -0.25, 0.25, 0.25, 0.25], dtype=torch.float64),
        input=label,
        hint="experts that received nothing are underloaded: their bias goes up by gamma",
    )
    balanced = torch.arange(8).reshape(4, 2)  # every expert exactly once
    got = ex.update_bias(before.clone()[:4].repeat(2), balanced, 0.5)
    expect_close(
        got,
        before[:4].repeat(2).double(),
        input="experts [[0,1],[2,3],[4,5],[6,7]]: every load equals the mean",
        hint="sign(0) = 0: an expert exactly at the mean load keeps its bias",
    )


# ------------------------------------------------------------------------------------------ moe_with_shared_experts

NAMES = ("router_weight", "w_gate", "w_up", "w_down", "shared_gate", "shared_up", "shared_down")


def call_layer(ex, x, weights, bias, top_k):
    return ex.moe_with_shared_experts(x.clone(), *(weights[n].to(x.dtype).clone() for n in NAMES), bias.clone(), top_k)


@checks("moe_with_shared_experts")
def matches_hugging_face_deepseek_v3_moe(ex):
    """DeepseekV3MoE (sigmoid, bias, renormalised gates, shared experts) and the float64 loop spec"""
    for (B, S, H, F_, N, num_shared, k), dtype in [
        ((2, 5, 16, 8, 8, 1, 2), torch.float64),
        ((1, 7, 8, 12, 6, 2, 3), torch.float32),
        ((1, 1, 8, 8, 4, 3, 1), torch.float32),
    ]:
        weights = random_experts(N, H, F_, num_shared=num_shared)
        bias = torch.randn(N) * 0.3
        x = torch.randn(B, S, H, dtype=torch.float64).to(dtype)
        label = describe(x=x, bias=bias) + f", N={N} routed + {num_shared} shared, F={F_}, top_k={k}"
        got = call_layer(ex, x, weights, bias, k)
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
        with torch.no_grad():
            hugging_face = hf_deepseek_v3_moe(weights, k, bias, dtype)(x)
        hint = (
            "y = sum of the shared experts (weight 1) + sum over the k chosen experts of gate * FFN; choose by "
            "sigmoid + bias, weight by the unbiased sigmoid renormalised"
        )
        # DeepseekV3TopkRouter computes the router in float32 even in a float64 model: compare at float32 precision.
        expect_close(got, hugging_face, dtype=torch.float32, input=label + ", vs DeepseekV3MoE", hint=hint)
        expect_close(
            got,
            moe_loop_spec(x.double(), weights, k, score_fn="sigmoid", bias=bias.double()),
            baseline=hugging_face if dtype == torch.float32 else None,
            input=label + ", vs the float64 loop spec",
            hint=hint,
        )


@checks("moe_with_shared_experts")
def shared_experts_are_summed_and_bias_selects(ex):
    """float64 loop spec: 2 and 3 shared experts add up (weight 1 each); a strong bias moves tokens to other experts"""
    for num_shared, bias_scale in [(2, 0.0), (3, 0.5), (2, 2.0)]:
        weights = random_experts(6, 8, 8, num_shared=num_shared)
        bias = torch.linspace(-bias_scale, bias_scale, 6, dtype=torch.float64)
        x = torch.randn(2, 6, 8, dtype=torch.float64)
        label = (
            describe(x=x) + f", N=6 routed + {num_shared} shared, top_k=2, bias {[round(b, 2) for b in bias.tolist()]}"
        )
        expect_close(
            call_layer(ex, x, weights, bias, 2),
            moe_loop_spec(x, weights, 2, score_fn="sigmoid", bias=bias),
            input=label,
            hint="every shared expert adds its full SwiGLU output (a sum, not a mean); the routed experts are "
            "chosen by sigmoid + bias",
        )


@checks("moe_with_shared_experts")
def gradients_match_the_loop_spec(ex):
    """float64 autograd: d loss / d x, the router and every routed and shared weight equal the loop spec's"""
    weights = random_experts(5, 8, 6, num_shared=2)
    bias = torch.randn(5, dtype=torch.float64) * 0.3
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    mine = {n: weights[n].clone().requires_grad_() for n in NAMES}
    spec = {n: weights[n].clone().requires_grad_() for n in NAMES}
    x_mine, x_spec = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(x.shape, dtype=torch.float64)
    label = describe(x=x) + ", N=5 routed + 2 shared, top_k=2, loss = sum(y * random)"
    (ex.moe_with_shared_experts(x_mine, *(mine[n] for n in NAMES), bias.clone(), 2) * upstream).sum().backward()
    (moe_loop_spec(x_spec, spec, 2, score_fn="sigmoid", bias=bias) * upstream).sum().backward()
    for name, got, want in [("x", x_mine.grad, x_spec.grad)] + [(n, mine[n].grad, spec[n].grad) for n in NAMES]:
        expect(
            got is not None,
            f"no gradient reaches {name}",
            input=label,
            expected=f"d loss / d {name}",
            got="None",
            hint="keep the gates attached: the router learns through them",
        )
        expect_close(got, want, input=label, what=f"d loss / d {name}", hint="gates multiply the routed outputs")
