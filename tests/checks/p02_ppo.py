"""Checks for p02.ppo. References: float64 loop specs written as explicit sums (GAE as sum_l (gamma lam)^l delta_{t+l}
up to the episode end; the PPO policy and value losses one token at a time, in the form of TRL's PPOTrainer and
the PPO paper); the closed forms of GAE at lam = 0 (TD error) and lam = 1 (Monte Carlo return minus V);
torch.autograd.gradcheck; and, for the KL estimators, the exact KL of categorical distributions against the means of
200,000 samples (k1 and k3 unbiased within 5 standard errors, k3 >= 0)."""

import math

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
)

checks = Checks("p02.ppo")

GAE_HINT = (
    "delta_t = r_t + gamma V_{t+1} (1 - d_t) - V_t; A_t = delta_t + gamma lam (1 - d_t) A_{t+1} from right to left; "
    "returns = A + V[..., :T]"
)


def gae_spec(rewards, values, dones, gamma, lam) -> tuple[torch.Tensor, torch.Tensor]:
    """Explicit sums over the future of each step, stopping after an episode end, float64."""
    r, v, d = rewards.double().reshape(-1, rewards.shape[-1]), values.double().reshape(-1, values.shape[-1]), dones
    d = d.reshape(-1, rewards.shape[-1])
    steps = r.shape[-1]
    adv = torch.zeros_like(r)
    for row in range(r.shape[0]):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                bootstrap = 0.0 if bool(d[row, k]) else gamma * float(v[row, k + 1])
                total += weight * (float(r[row, k]) + bootstrap - float(v[row, k]))
                if bool(d[row, k]):
                    break
                weight *= gamma * lam
            adv[row, t] = total
    adv = adv.reshape(rewards.shape)
    return adv, adv + values.double()[..., :-1]


def unpack2(got, case: str, names=("advantages", "returns")):
    expect(
        isinstance(got, tuple) and len(got) == 2,
        f"must return ({', '.join(names)})",
        input=case,
        expected="a tuple of 2 tensors",
        got=type(got).__name__,
    )
    return got


@checks("gae")
def gae_by_hand(ex):
    """T = 3, gamma = 0.5, lam = 0.5, the episode ends at step 1: worked out by hand"""
    rewards = torch.tensor([1.0, 2.0, 4.0])
    values = torch.tensor([0.5, 1.0, 2.0, 8.0])
    dones = torch.tensor([False, True, False])
    # delta = [1 + 0.5*1 - 0.5, 2 + 0 - 1, 4 + 0.5*8 - 2] = [1, 1, 6]; A2 = 6; A1 = 1 (done); A0 = 1 + 0.25*1 = 1.25
    case = "rewards [1, 2, 4], values [0.5, 1, 2, 8], dones [F, T, F], gamma 0.5, lam 0.5"
    advantages, returns = unpack2(ex.gae(rewards, values, dones, 0.5, 0.5), case)
    expect_close(
        advantages, torch.tensor([1.25, 1.0, 6.0], dtype=torch.float64), input=case, what="advantages", hint=GAE_HINT
    )
    expect_close(
        returns, torch.tensor([1.75, 2.0, 8.0], dtype=torch.float64), input=case, what="returns", hint=GAE_HINT
    )


@checks("gae")
def gae_matches_explicit_sums(ex):
    """random rewards (float32, float64) and float64 values with episode ends, shapes (7,), (3, 11), (2, 2, 5), (4, 1)"""
    for shape, dtype, gamma, lam in (
        ((7,), torch.float64, 0.99, 0.95),
        ((3, 11), torch.float32, 1.0, 0.95),
        ((2, 2, 5), torch.float64, 0.9, 0.7),
        ((4, 1), torch.float32, 0.9, 0.9),  # a single step
    ):
        rewards = torch.randn(shape, dtype=dtype)
        values = torch.randn(
            *shape[:-1], shape[-1] + 1, dtype=torch.float64
        )  # float64 values: output in rewards' dtype
        dones = torch.rand(shape) < 0.25
        case = describe(rewards=rewards, values=values) + f", {int(dones.sum())} episode ends, gamma {gamma}, lam {lam}"
        advantages, returns = unpack2(ex.gae(rewards, values, dones, gamma, lam), case)
        want_adv, want_ret = gae_spec(rewards, values, dones, gamma, lam)
        expect_tensor(advantages, shape=shape, dtype=dtype, input=case, what="advantages", hint=GAE_HINT)
        expect_close(advantages, want_adv, input=case, what="advantages", hint=GAE_HINT)
        expect_tensor(returns, shape=shape, dtype=dtype, input=case, what="returns", hint="returns in rewards' dtype")
        expect_close(returns, want_ret, input=case, what="returns", hint=GAE_HINT)


@checks("gae")
def gae_limits_and_no_gradient(ex):
    """lam = 0 gives the TD errors, lam = 1 the discounted return minus V; the outputs carry no gradient"""
    rewards = torch.randn(2, 9, dtype=torch.float64)
    values = torch.randn(2, 10, dtype=torch.float64, requires_grad=True)
    dones = torch.zeros(2, 9, dtype=torch.bool)
    v = values.detach()
    td = rewards + 0.9 * v[:, 1:] - v[:, :-1]
    discounted = torch.zeros_like(rewards)
    for t in range(9):
        discounted[:, t] = sum(0.9 ** (k - t) * rewards[:, k] for k in range(t, 9)) + 0.9 ** (9 - t) * v[:, 9]
    advantages, _ = unpack2(ex.gae(rewards, values, dones, 0.9, 0.0), "lam = 0")
    expect_close(
        advantages, td, input="gamma 0.9, lam 0 (no episode end)", what="advantages", hint="lam = 0: A_t = delta_t"
    )
    advantages, returns = unpack2(ex.gae(rewards, values, dones, 0.9, 1.0), "lam = 1")
    expect_close(
        advantages,
        discounted - v[:, :-1],
        input="gamma 0.9, lam 1 (no episode end)",
        what="advantages",
        hint="lam = 1: A_t = sum_k gamma^(k-t) r_k + gamma^(T-t) V_T - V_t",
    )
    advantages0, _ = unpack2(ex.gae(rewards, values, dones, 0.0, 0.5), "gamma = 0")
    expect_close(
        advantages0, rewards - v[:, :-1], input="gamma 0, lam 0.5", what="advantages", hint="gamma = 0: A_t = r_t - V_t"
    )
    expect(
        not advantages.requires_grad and not returns.requires_grad,
        "the advantages or returns carry a gradient",
        input="values with requires_grad=True",
        expected="detached outputs (they are targets)",
        got=f"requires_grad: advantages {advantages.requires_grad}, returns {returns.requires_grad}",
        hint="detach the values (and rewards) before computing GAE",
    )


@checks("gae")
def gae_refuses_bad_input(ex):
    """values without the bootstrap entry, dones of another shape, gamma or lam outside [0, 1]: ValueError"""
    rewards, values, dones = torch.randn(5), torch.randn(6), torch.zeros(5, dtype=torch.bool)
    cases = [
        ((rewards, values[:5], dones, 0.9, 0.9), "values (5,) for 5 steps (needs T + 1)"),
        ((rewards, values, dones[:4], 0.9, 0.9), "dones (4,)"),
        ((rewards, values, dones, 1.1, 0.9), "gamma 1.1"),
        ((rewards, values, dones, 0.9, -0.1), "lam -0.1"),
        ((rewards, values, dones, 0.9, 1.5), "lam 1.5"),
    ]
    for args, why in cases:
        expect_value_error(
            lambda args=args: ex.gae(*args), input=f"gae with {why}", hint="validate shapes and coefficients"
        )


# ------------------------------------------------------------------------------------------ ppo_policy_loss

PG_HINT = (
    "ratio = exp(logp - old); per token -min(ratio * A, clamp(ratio, 1 - eps, 1 + eps) * A); masked mean over "
    "tokens, or per row then over rows"
)


def policy_spec(logp, old, adv, mask, eps, reduction):
    rows, total, count = [], 0.0, 0
    for b in range(logp.shape[0]):
        row_total, row_count = 0.0, 0
        for t in range(logp.shape[1]):
            if not bool(mask[b, t]):
                continue
            ratio = math.exp(float(logp[b, t]) - float(old[b, t]))
            a = float(adv[b, t])
            loss = -min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
            row_total += loss
            row_count += 1
        total, count = total + row_total, count + row_count
        if row_count:
            rows.append(row_total / row_count)
    value = total / count if reduction == "token" else sum(rows) / len(rows)
    return torch.tensor(value, dtype=torch.float64)


def unpack3(got, case: str):
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "ppo_policy_loss must return (loss, clip_fraction, approx_kl)",
        input=case,
        expected="a tuple of 3 tensors",
        got=type(got).__name__,
    )
    return got


def policy_inputs(batch, length, dtype=torch.float64):
    logp = -torch.rand(batch, length, dtype=dtype) * 3
    old = logp + torch.randn(batch, length, dtype=dtype) * 0.3  # ratios from about 0.4 to 2.5
    adv = torch.randn(batch, length, dtype=dtype)
    mask = torch.rand(batch, length) < 0.75
    mask[:, 0] = True
    return logp, old, adv, mask


@checks("ppo_policy_loss")
def policy_loss_by_hand(ex):
    """four tokens: ratio 1.5 and 0.5 with A = +1 and -1 (each clipped or not), eps 0.2"""
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.5, 0.5]]))
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    # per token: -min(1.5, 1.2) = -1.2; -min(0.5, 0.8) = -0.5; -min(-1.5, -1.2) = 1.5; -min(-0.5, -0.8) = 0.8
    case = "ratios [1.5, 0.5, 1.5, 0.5], advantages [1, 1, -1, -1], eps 0.2"
    loss, clip_fraction, approx_kl = unpack3(ex.ppo_policy_loss(logp, old, adv, mask, 0.2), case)
    expect_close(loss, torch.tensor(0.15, dtype=torch.float64), input=case, what="loss", hint=PG_HINT)
    expect_close(
        clip_fraction,
        torch.tensor(1.0, dtype=torch.float64),
        input=case,
        what="clip_fraction",
        hint="|ratio - 1| > eps",
    )
    want_kl = 0.5 * (2 * math.log(1.5) ** 2 + 2 * math.log(0.5) ** 2) / 4  # 0.5 * mean of the squared log-ratios
    expect_close(
        approx_kl,
        torch.tensor(want_kl, dtype=torch.float64),
        input=case,
        what="approx_kl",
        hint="0.5 * mean of (logp - old)^2",
    )


@checks("ppo_policy_loss")
def policy_loss_matches_loop_spec(ex):
    """random batches with padding, both reductions, float32 and float64; the metrics over valid tokens only"""
    for batch, length, dtype in ((3, 8, torch.float64), (1, 5, torch.float32), (5, 13, torch.float32)):
        logp, old, adv, mask = policy_inputs(batch, length, dtype)
        if batch == 1:
            mask[:] = False
            mask[0, 2] = True  # a single valid token
        if batch == 5:
            mask[1] = False  # a row whose completion was cut away entirely
            mask[2] = False
            mask[2, 4] = True  # a row with one valid token
        for reduction in ("token", "sequence"):
            case = describe(logprobs=logp, mask=mask) + f", eps 0.2, reduction {reduction!r}"
            loss, clip_fraction, approx_kl = unpack3(ex.ppo_policy_loss(logp, old, adv, mask, 0.2, reduction), case)
            expect_tensor(loss, shape=(), dtype=dtype, input=case, what="loss")
            expect_close(loss, policy_spec(logp, old, adv, mask, 0.2, reduction), input=case, what="loss", hint=PG_HINT)
        log_ratio = (logp - old).double()[mask]
        want_fraction = ((log_ratio.exp() - 1).abs() > 0.2).double().mean()
        expect_close(clip_fraction, want_fraction, input=case, what="clip_fraction", hint="over valid tokens only")
        expect_close(
            approx_kl, 0.5 * (log_ratio**2).mean(), input=case, what="approx_kl", hint="over valid tokens only"
        )


@checks("ppo_policy_loss")
def policy_loss_extreme_log_probs(ex):
    """float32 log-probs near -120 (exp underflows to 0 there), ratios in the usual range: finite, equal to the spec"""
    logp = -90 - torch.rand(4, 7, dtype=torch.float64) * 40  # [-130, -90]: rare tokens of a long completion
    old = logp + torch.randn(4, 7, dtype=torch.float64) * 0.3
    adv = torch.randn(4, 7, dtype=torch.float64)
    mask = torch.rand(4, 7) < 0.8
    mask[:, 0] = True
    low = [t.float() for t in (logp, old, adv)]
    for reduction in ("token", "sequence"):
        case = describe(logprobs=low[0], mask=mask) + f", log-probs in [-130, -90], eps 0.2, reduction {reduction!r}"
        loss, clip_fraction, approx_kl = unpack3(ex.ppo_policy_loss(*low, mask, 0.2, reduction), case)
        expect_close(
            loss,
            policy_spec(*low, mask, 0.2, reduction),
            input=case,
            what="loss",
            hint="exponentiate the difference, exp(logprobs - old_logprobs): exp(logprobs) and exp(old_logprobs) are "
            "both 0 in float32 below about -104, and 0/0 is NaN",
        )
    log_ratio = (low[0] - low[1]).double()[mask]
    want_fraction = ((log_ratio.exp() - 1).abs() > 0.2).double().mean()
    expect_close(clip_fraction, want_fraction, input=case, what="clip_fraction", hint="|exp(logp - old) - 1| > eps")


@checks("ppo_policy_loss")
def policy_loss_gradients(ex):
    """gradcheck in float64 (both reductions); no gradient reaches the metrics"""
    logp, old, adv, mask = policy_inputs(2, 4)
    old = logp + torch.tensor([[0.05, -0.6, 0.4, 0.1], [-0.3, 0.02, 0.7, -0.05]], dtype=torch.float64)
    for reduction in ("token", "sequence"):
        expect_gradcheck(
            lambda x, reduction=reduction: ex.ppo_policy_loss(x, old, adv, mask, 0.2, reduction)[0],
            (logp.clone().requires_grad_(),),
            input=describe(logprobs=logp) + f", ratios away from the clip edges, reduction {reduction!r}",
            hint="build the loss from differentiable ops (exp, clamp, min)",
        )
    _, clip_fraction, approx_kl = ex.ppo_policy_loss(logp.clone().requires_grad_(), old, adv, mask)
    expect(
        not clip_fraction.requires_grad and not approx_kl.requires_grad,
        "the metrics carry a gradient",
        input="logprobs with requires_grad=True",
        expected="detached clip_fraction and approx_kl",
        got=f"requires_grad {clip_fraction.requires_grad}, {approx_kl.requires_grad}",
        hint="compute the metrics under torch.no_grad()",
    )


@checks("ppo_policy_loss")
def policy_loss_refuses_bad_input(ex):
    """mismatched shapes, an empty mask, eps 0, an unknown reduction: ValueError"""
    logp, old, adv, mask = policy_inputs(2, 3)
    cases = [
        ((logp, old[:, :2], adv, mask), {}, "old_logprobs (2, 2)"),
        ((logp, old, adv, torch.zeros(2, 3, dtype=torch.bool)), {}, "an all-False mask"),
        ((logp, old, adv, mask), {"clip_eps": 0.0}, "clip_eps 0"),
        ((logp, old, adv, mask), {"reduction": "sum"}, "reduction 'sum'"),
    ]
    for args, kwargs, why in cases:
        expect_value_error(
            lambda args=args, kwargs=kwargs: ex.ppo_policy_loss(*args, **kwargs),
            input=f"ppo_policy_loss with {why}",
            hint="validate the shapes, the mask, clip_eps and the reduction",
        )


# ------------------------------------------------------------------------------------------ ppo_value_loss

VF_HINT = "0.5 * masked mean of max((V - G)^2, (V_old + clamp(V - V_old, -eps, eps) - G)^2)"


def value_spec(values, old, returns, mask, eps):
    total, count = 0.0, 0
    for b in range(values.shape[0]):
        for t in range(values.shape[1]):
            if not bool(mask[b, t]):
                continue
            v, o, g = float(values[b, t]), float(old[b, t]), float(returns[b, t])
            clipped = min(max(v, o - eps), o + eps)
            total += 0.5 * max((v - g) ** 2, (clipped - g) ** 2)
            count += 1
    return torch.tensor(total / count, dtype=torch.float64)


@checks("ppo_value_loss")
def value_loss_by_hand(ex):
    """V = 1.0, V_old = 0.5, G = 1.1, eps 0.2: the clipped value 0.7 is further from G, so it sets the loss"""
    values, old, returns = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.0]]), torch.tensor([[1.1, 0.3]])
    mask = torch.tensor([[True, False]])
    case = "V 1.0, V_old 0.5, G 1.1 (second token masked), eps 0.2"
    expect_close(
        ex.ppo_value_loss(values, old, returns, mask, 0.2),
        torch.tensor(0.5 * 0.4**2, dtype=torch.float64),
        input=case,
        hint=VF_HINT + " (here: 0.5 * (0.7 - 1.1)^2 = 0.08)",
    )


@checks("ppo_value_loss")
def value_loss_matches_loop_spec(ex):
    """random values with padding, float32 and float64, shapes (3, 9) and (1, 4)"""
    for (batch, length), dtype in (((3, 9), torch.float64), ((1, 4), torch.float32), ((4, 6), torch.float32)):
        values = torch.randn(batch, length, dtype=dtype)
        old = values + torch.randn(batch, length, dtype=dtype) * 0.3
        returns = torch.randn(batch, length, dtype=dtype)
        mask = torch.rand(batch, length) < 0.7
        mask[:, 0] = True
        got = ex.ppo_value_loss(values, old, returns, mask, 0.2)
        case = describe(values=values, mask=mask) + ", eps 0.2"
        expect_tensor(got, shape=(), dtype=dtype, input=case, hint=VF_HINT)
        expect_close(got, value_spec(values, old, returns, mask, 0.2), input=case, hint=VF_HINT)


@checks("ppo_value_loss")
def value_loss_gradients(ex):
    """gradcheck in float64, values away from the clip edges"""
    values = torch.randn(2, 3, dtype=torch.float64)
    old = values + torch.tensor([[0.05, -0.5, 0.4], [0.1, 0.3, -0.02]], dtype=torch.float64)
    returns = torch.randn(2, 3, dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    expect_gradcheck(
        lambda v: ex.ppo_value_loss(v, old, returns, mask, 0.2),
        (values.clone().requires_grad_(),),
        input=describe(values=values),
        hint="build the loss from differentiable ops",
    )


@checks("ppo_value_loss")
def value_loss_refuses_bad_input(ex):
    """mismatched shapes, an empty mask, eps 0: ValueError"""
    v = torch.randn(2, 3)
    cases = [
        ((v, v[:, :2], v, torch.ones(2, 3, dtype=torch.bool)), {}, "old_values (2, 2)"),
        ((v, v, v, torch.zeros(2, 3, dtype=torch.bool)), {}, "an all-False mask"),
        ((v, v, v, torch.ones(2, 3, dtype=torch.bool)), {"clip_eps": 0.0}, "clip_eps 0"),
    ]
    for args, kwargs, why in cases:
        expect_value_error(
            lambda args=args, kwargs=kwargs: ex.ppo_value_loss(*args, **kwargs),
            input=f"ppo_value_loss with {why}",
            hint="validate the shapes, the mask and clip_eps",
        )


# ------------------------------------------------------------------------------------------ kl

KL_HINT = "log r = ref - logp; k1 = -log r; k2 = 0.5 (log r)^2; k3 = (r - 1) - log r"


def unpack_k(got, case):
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "kl_estimators must return (k1, k2, k3)",
        input=case,
        expected="a tuple of 3 tensors",
        got=type(got).__name__,
    )
    return got


@checks("kl")
def estimators_closed_forms(ex):
    """per-sample values against their formulas in float64, incl. log r near 0 (k3 accurate there) and k3 >= 0"""
    logp = -torch.rand(4, 7, dtype=torch.float64) * 4
    ref = logp + torch.randn(4, 7, dtype=torch.float64)
    ref[0, :3] = logp[0, :3] + torch.tensor([1e-9, -1e-7, 0.0], dtype=torch.float64)
    case = describe(logprobs=logp, ref_logprobs=ref)
    k1, k2, k3 = unpack_k(ex.kl_estimators(logp, ref), case)
    log_r = ref - logp
    expect_close(k1, -log_r, input=case, what="k1", hint=KL_HINT)
    expect_close(k2, 0.5 * log_r**2, input=case, what="k2", hint=KL_HINT)
    exact_k3 = torch.tensor(
        [[float(torch.special.expm1(x)) - float(x) for x in row] for row in log_r], dtype=torch.float64
    )
    expect_close(k3, exact_k3, input=case, what="k3", hint=KL_HINT + " (use expm1 near log r = 0)")
    expect(
        bool((k3 >= 0).all()),
        "k3 is negative somewhere",
        input=case,
        expected="k3 >= 0 everywhere (log r <= r - 1)",
        got=f"min {float(k3.min()):.3g}",
        hint=KL_HINT,
    )


@checks("kl")
def k1_and_k3_are_unbiased(ex):
    """200,000 tokens sampled from pi over 6 categories: the means of k1 and k3 equal KL(pi || ref) within 5 SE"""
    for spread in (0.3, 1.5):
        log_pi = torch.log_softmax(torch.randn(6, dtype=torch.float64) * spread, 0)
        log_ref = torch.log_softmax(torch.randn(6, dtype=torch.float64) * spread, 0)
        exact = float((log_pi.exp() * (log_pi - log_ref)).sum())
        samples = torch.multinomial(log_pi.exp(), 200_000, replacement=True)
        k1, k2, k3 = unpack_k(ex.kl_estimators(log_pi[samples], log_ref[samples]), "200,000 samples")
        for name, estimate in (("k1", k1), ("k3", k3)):
            mean, standard_error = float(estimate.mean()), float(estimate.std()) / math.sqrt(estimate.numel())
            expect(
                abs(mean - exact) <= 5 * standard_error + 1e-12,
                f"the mean of {name} is not the KL divergence",
                input=f"categorical pi and ref over 6 tokens (logit scale {spread}), 200,000 samples from pi",
                expected=f"KL(pi || ref) = {exact:.5f} (within 5 standard errors = {5 * standard_error:.5f})",
                got=f"mean {mean:.5f}",
                hint=KL_HINT + "; the samples come from pi, so log r = log ref(y) - log pi(y)",
            )


@checks("kl")
def penalized_rewards_by_spec(ex):
    """-beta * k1 on real tokens, the score added at the last real token (left and right padding), 0 on padding"""
    logp = -torch.rand(3, 6, dtype=torch.float64) * 3
    ref = logp + torch.randn(3, 6, dtype=torch.float64) * 0.5
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    scores = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    want = torch.zeros(3, 6, dtype=torch.float64)
    for b in range(3):
        for t in range(6):
            if mask[b, t]:
                want[b, t] = -0.1 * float(logp[b, t] - ref[b, t])
    for b, last in enumerate((3, 5, 0)):
        want[b, last] += float(scores[b])
    case = f"beta 0.1, masks {mask.int().tolist()}, scores {scores.tolist()}"
    no_penalty = ex.kl_penalized_rewards(scores, logp, ref, mask, 0.0)
    only_scores = torch.zeros(3, 6, dtype=torch.float64)
    only_scores[[0, 1, 2], [3, 5, 0]] = scores
    expect_close(
        no_penalty, only_scores, input=case.replace("beta 0.1", "beta 0"), hint="beta = 0 is valid: the scores only"
    )
    got = ex.kl_penalized_rewards(scores, logp.clone().requires_grad_(), ref, mask, 0.1)
    expect_tensor(got, shape=(3, 6), dtype=torch.float64, input=case, hint="(B, T) rewards")
    expect_close(
        got, want, input=case, hint="reward = -beta * (logp - ref) on real tokens; + score at the last real token"
    )
    expect(
        not got.requires_grad,
        "the rewards carry a gradient",
        input=case + ", logprobs with requires_grad",
        expected="detached rewards",
        got="requires_grad=True",
        hint="rewards are constants of the rollout: detach the log-probabilities",
    )


@checks("kl")
def kl_refuses_bad_input(ex):
    """mismatched shapes, an empty row, a negative beta: ValueError"""
    logp, ref = torch.randn(2, 4), torch.randn(2, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    cases = [
        (lambda: ex.kl_estimators(logp, ref[:, :3]), "kl_estimators of (2, 4) and (2, 3)"),
        (lambda: ex.kl_penalized_rewards(torch.ones(3), logp, ref, mask, 0.1), "3 scores for 2 rows"),
        (lambda: ex.kl_penalized_rewards(torch.ones(2), logp, ref, mask.clone().fill_(False), 0.1), "an empty mask"),
        (
            lambda: ex.kl_penalized_rewards(torch.ones(2), logp, ref, torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]), 0.1),
            "row 1 without a real token",
        ),
        (lambda: ex.kl_penalized_rewards(torch.ones(2), logp, ref, mask, -0.1), "beta -0.1"),
    ]
    for call, why in cases:
        expect_value_error(call, input=why, hint="validate the shapes, that every row has a real token, and beta")
