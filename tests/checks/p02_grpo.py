"""Checks for p02.grpo. References: float64 loop specs written from the papers (DeepSeekMath's group-normalised
advantages, PPO's clipped surrogate with DAPO's asymmetric clip, Schulman's k3 estimator, the GRPO / DAPO / Dr. GRPO
averages) and TRL 1.16.0's formulas (trl/trainer/grpo_trainer.py lines 2765-2787 for the advantages, 3095-3119 for the
clipped loss, 3100-3102 for k3, 3153-3170 for the averages); `statistics.stdev` for the unbiased std;
torch.autograd.gradcheck; k3's mean over samples of a categorical policy against the exact KL; and a constructed
batch on which GRPO and Dr. GRPO move one token's logit in opposite directions."""

import math
import statistics

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    one_thread,
)

checks = Checks("p02.grpo")


# ------------------------------------------------------------------------------------------ group_advantages


def loop_advantages(rewards, group_size, scale) -> torch.Tensor:
    """The spec in plain Python floats: contiguous groups, unbiased std (statistics.stdev), 1e-4 in the denominator."""
    values = [float(v) for v in rewards]
    batch_std = statistics.stdev(values)
    out = []
    for start in range(0, len(values), group_size):
        group = values[start : start + group_size]
        mean = sum(group) / len(group)
        denominator = {"group": statistics.stdev(group) + 1e-4, "batch": batch_std + 1e-4, "none": 1.0}[scale]
        out.extend((v - mean) / denominator for v in group)
    return torch.tensor(out, dtype=torch.float64)


@checks("group_advantages")
def hand_checkable_groups(ex):
    """rewards [1, 0, 0 | 1, 1, 1], G = 3: the first group gets (2/3, -1/3, -1/3) / (std + 1e-4), the second 0"""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    std = math.sqrt(1 / 3)  # unbiased: ((2/3)^2 + 2 (1/3)^2) / 2 = 1/3
    want = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0, 0], dtype=torch.float64)
    label = "rewards [1, 0, 0, 1, 1, 1], group_size=3"
    got = ex.group_advantages(rewards, 3)
    expect_tensor(got, shape=(6,), dtype=torch.float64, input=label, what="advantages")
    expect(
        bool(torch.isfinite(got).all()),
        "an all-equal group gives non-finite advantages",
        input=label,
        expected="0 for the second group",
        got=str(got.tolist()),
        hint="add 1e-4 to the std: a group whose rewards are all equal has std 0",
    )
    expect_close(
        got,
        want / (std + 1e-4),
        input=label,
        what="advantages",
        hint="(r - group mean) / (unbiased group std + 1e-4); the std divides by G - 1",
    )
    expect_close(
        ex.group_advantages(rewards, 3, scale="none"),
        want,
        input=label + ', scale="none"',
        what="advantages",
        hint="Dr. GRPO: subtract the group mean, do not divide",
    )


@checks("group_advantages")
def advantages_match_loop_spec(ex):
    """random rewards, G in 2, 4, 8, 16, scale group / batch / none, float64 and float32: equal to the loop spec"""
    cases = [(2, 5, "group"), (4, 3, "batch"), (8, 2, "none"), (16, 1, "group"), (4, 6, "batch")]
    for group_size, num_prompts, scale in cases:
        for dtype in (torch.float64, torch.float32):
            rewards = (torch.randn(num_prompts * group_size, dtype=torch.float64) * 2 + 1).to(dtype)
            rewards[: group_size // 2] = rewards[0]  # ties inside a group
            label = describe(rewards=rewards) + f", group_size={group_size}, scale={scale!r}"
            got = ex.group_advantages(rewards, group_size, scale=scale)
            expect_tensor(got, shape=rewards.shape, dtype=dtype, input=label, what="advantages")
            oracle = loop_advantages(rewards, group_size, scale)
            grouped = rewards.view(-1, group_size)
            centred = grouped - grouped.mean(1, keepdim=True)
            denominator = {"group": grouped.std(1, keepdim=True) + 1e-4, "batch": rewards.std() + 1e-4, "none": 1.0}
            expect_close(
                got,
                oracle,
                baseline=(centred / denominator[scale]).reshape(-1),
                input=label,
                what="advantages",
                hint="groups are contiguous: rewards.view(-1, group_size); 'batch' divides by the whole batch's std",
            )


@checks("group_advantages")
def group_properties(ex):
    """per group: sums to 0, unchanged by a constant shift of that group, scale-free with std scaling"""
    group_size, num_prompts = 5, 4
    rewards = torch.rand(num_prompts * group_size, dtype=torch.float64)
    label = describe(rewards=rewards) + f", group_size={group_size}"
    got = ex.group_advantages(rewards, group_size)
    sums = got.view(num_prompts, group_size).sum(1)
    expect(
        bool(sums.abs().max() < 1e-9),
        "the advantages of a group do not sum to 0",
        input=label,
        expected="each group's advantages sum to 0",
        got=f"group sums {[round(v, 4) for v in sums.tolist()]}",
        hint="subtract each group's own mean (a row of rewards.view(-1, group_size)), not the batch mean",
    )
    shifted = rewards.clone()
    shifted[group_size : 2 * group_size] += 7.0  # the second prompt's rewards, all shifted
    expect_close(
        ex.group_advantages(shifted, group_size),
        got,
        input=label + ", second group's rewards + 7",
        what="advantages",
        hint="a group's advantages depend only on that group's rewards, relative to each other",
    )


@checks("group_advantages")
def refuses_bad_groups(ex):
    """group_size < 2, a length that is not a multiple of it, or an unknown scale: ValueError"""
    for rewards, group_size, scale, what in (
        (torch.rand(6), 1, "group", "group_size=1: no group to compare with"),
        (torch.rand(7), 2, "group", "7 rewards in groups of 2"),
        (torch.rand(8), 4, "std", "scale='std'"),
    ):
        expect_value_error(
            lambda rewards=rewards, group_size=group_size, scale=scale: ex.group_advantages(rewards, group_size, scale),
            input=what,
            hint="validate group_size >= 2, N % group_size == 0 and scale in ('group', 'batch', 'none')",
        )


# ------------------------------------------------------------------------------------------ clipped_token_loss


def loop_token_loss(logps, old, adv, eps_low, eps_high, ref=None, beta=0.0) -> torch.Tensor:
    """PPO/GRPO's per-token loss, element by element in Python floats."""
    eps_high = eps_low if eps_high is None else eps_high
    out = torch.empty(logps.shape, dtype=torch.float64)
    for i in range(logps.shape[0]):
        a = float(adv[i])
        for t in range(logps.shape[1]):
            rho = math.exp(float(logps[i, t]) - float(old[i, t]))
            clipped_rho = min(max(rho, 1 - eps_low), 1 + eps_high)
            value = -min(rho * a, clipped_rho * a)
            if beta > 0:
                u = math.exp(float(ref[i, t]) - float(logps[i, t]))
                value += beta * (u - math.log(u) - 1)
            out[i, t] = value
    return out


def straightforward_token_loss(logps, old, adv, eps_low, eps_high, ref=None, beta=0.0):
    eps_high = eps_low if eps_high is None else eps_high
    rho = torch.exp(logps - old)
    loss = -torch.minimum(rho * adv[:, None], rho.clamp(1 - eps_low, 1 + eps_high) * adv[:, None])
    if beta > 0:
        loss = loss + beta * (torch.exp(ref - logps) - (ref - logps) - 1)
    return loss


def random_logps(shape, dtype=torch.float64, spread=0.4):
    """old log-probs and current ones with ratios spread over about exp(+-3 spread)."""
    old = -torch.rand(shape, dtype=torch.float64) * 4 - 0.05
    return (old + torch.randn(shape, dtype=torch.float64) * spread).to(dtype), old.to(dtype)


@checks("clipped_token_loss")
def hand_checkable_tokens(ex):
    """ratios 1, 1.5, 0.5, 1.1 with A = +2 and -2, eps 0.2: the per-token values of the clipped objective"""
    ratios = torch.tensor([[1.0, 1.5, 0.5, 1.1], [1.0, 1.5, 0.5, 1.1]], dtype=torch.float64)
    old = torch.full_like(ratios, -1.0)
    logps = old + ratios.log()
    adv = torch.tensor([2.0, -2.0], dtype=torch.float64)
    # A = +2: -min(2 rho, 2 clip(rho)) = -2 * min(rho, clip(rho)) = [-2, -2.4, -1, -2.2]
    # A = -2: -min(-2 rho, -2 clip(rho)) = 2 * max(rho, clip(rho)) = [2, 3, 1.6, 2.2]
    want = torch.tensor([[-2.0, -2.4, -1.0, -2.2], [2.0, 3.0, 1.6, 2.2]], dtype=torch.float64)
    label = "ratios [1, 1.5, 0.5, 1.1] for A = +2 and for A = -2, epsilon 0.2"
    got = ex.clipped_token_loss(logps, old, adv)
    expect_tensor(got, shape=(2, 4), dtype=torch.float64, input=label, what="per-token loss")
    expect_close(
        got,
        want,
        input=label,
        what="per-token loss",
        hint="-min(rho A, clip(rho, 1 - eps, 1 + eps) A): the pessimistic branch, per token",
    )
    got_zero = ex.clipped_token_loss(logps, old, adv, 0.0, 0.0)
    expect_close(
        got_zero,
        -torch.minimum(ratios * adv[:, None], adv[:, None].expand(2, 4)),
        input=label.replace("epsilon 0.2", "epsilon_low = epsilon_high = 0"),
        what="per-token loss",
        hint="epsilon 0 is a valid (if extreme) clip range [1, 1]: refuse only negative epsilons",
    )
    got_high = ex.clipped_token_loss(logps, old, adv, 0.2, 0.28)
    want_high = want.clone()
    want_high[0, 1] = -2.0 * 1.28
    expect_close(
        got_high,
        want_high,
        input=label + ", epsilon_high=0.28 (clip-higher)",
        what="per-token loss",
        hint="clip to [1 - epsilon_low, 1 + epsilon_high]; epsilon_high=None means epsilon_low",
    )


@checks("clipped_token_loss")
def token_loss_matches_loop_spec(ex):
    """random ratios and advantages, symmetric and clip-higher, with and without k3: equal to the loop spec"""
    cases = [((3, 7), 0.2, None, 0.0), ((5, 4), 0.2, 0.28, 0.0), ((1, 9), 0.1, 0.3, 0.04), ((4, 13), 0.2, None, 0.5)]
    for shape, eps_low, eps_high, beta in cases:
        for dtype in (torch.float64, torch.float32):
            logps, old = random_logps(shape, dtype)
            ref = (old.double() + torch.randn(shape, dtype=torch.float64) * 0.3).to(dtype)
            adv = torch.randn(shape[0], dtype=torch.float64).to(dtype)
            label = (describe(logps=logps) + f", eps=({eps_low}, {eps_high}), beta={beta}, advantages {adv.tolist()}")[
                :300
            ]
            got = ex.clipped_token_loss(logps, old, adv, eps_low, eps_high, ref if beta else None, beta)
            expect_tensor(got, shape=shape, dtype=dtype, input=label, what="per-token loss")
            expect_close(
                got,
                loop_token_loss(logps, old, adv, eps_low, eps_high, ref, beta),
                baseline=straightforward_token_loss(logps, old, adv, eps_low, eps_high, ref, beta),
                input=label,
                what="per-token loss",
                hint="-min(rho A, clip(rho) A) + beta * (exp(ref - logp) - (ref - logp) - 1)",
            )


@checks("clipped_token_loss")
def extreme_log_probs(ex):
    """float32 log-probs near -120 (exp underflows to 0 there), ratios in the usual range: finite, equal to the spec"""
    for shape, beta in (((3, 6), 0.0), ((2, 9), 0.04)):
        old = -90 - torch.rand(shape, dtype=torch.float64) * 40  # [-130, -90]: rare tokens of a long completion
        logps = old + torch.randn(shape, dtype=torch.float64) * 0.3
        ref = old + torch.randn(shape, dtype=torch.float64) * 0.3
        adv = torch.randn(shape[0], dtype=torch.float64)
        low = [t.float() for t in (logps, old, adv, ref)]
        label = f"{describe(logps=low[0])}, log-probs in [-130, -90], eps (0.2, 0.28), beta={beta}"
        got = ex.clipped_token_loss(low[0], low[1], low[2], 0.2, 0.28, low[3] if beta else None, beta)
        expect_close(
            got,
            loop_token_loss(*low[:3], 0.2, 0.28, low[3], beta),
            baseline=straightforward_token_loss(*low[:3], 0.2, 0.28, low[3], beta),
            input=label,
            what="per-token loss",
            hint="exponentiate the difference, exp(logps - old_logps) (and exp(ref - logps) in k3): exp(logps) and "
            "exp(old_logps) are both 0 in float32 below about -104, and 0/0 is NaN",
        )


@checks("clipped_token_loss")
@one_thread()
def gradients_vanish_only_where_clipped(ex):
    """gradcheck in float64; d loss / d logp is 0 exactly where the clipped branch is the smaller one"""
    logps, old = random_logps((3, 6))
    adv = torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64)
    ref = old + torch.randn_like(old) * 0.3
    expect_gradcheck(
        lambda lp, a, r: ex.clipped_token_loss(lp, old, a, 0.2, 0.28, r, 0.1),
        (logps.clone().requires_grad_(True), adv.clone().requires_grad_(True), ref.clone().requires_grad_(True)),
        input=describe(logps=logps) + ", eps (0.2, 0.28), beta 0.1",
        hint="build the loss from differentiable torch ops (exp, clamp, min)",
    )
    lp = logps.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(ex.clipped_token_loss(lp, old, adv, 0.2, 0.28).sum(), lp)
    rho = torch.exp(logps - old)
    a = adv[:, None]
    flat = ((a > 0) & (rho > 1.28)) | ((a < 0) & (rho < 0.8))
    want = torch.where(flat, torch.zeros_like(rho), -rho * a)
    expect_close(
        grad,
        want,
        input=describe(logps=logps) + f", ratios {[round(v, 2) for v in rho.flatten().tolist()]}",
        what="d loss / d logps",
        hint="keep the min: where the ratio left [1 - eps_low, 1 + eps_high] in the advantage's direction the gradient "
        "is 0, elsewhere it is -rho * A (clamping alone also zeroes the side that must keep learning)",
    )


@checks("clipped_token_loss")
@one_thread()
def k3_is_an_unbiased_nonnegative_kl(ex):
    """k3 per sample is >= 0 and its mean over 200k samples from pi is KL(pi || pi_ref) (categorical over 12 ids)"""
    logits = torch.randn(12, dtype=torch.float64) * 1.5
    ref_logits = logits + torch.randn(12, dtype=torch.float64) * 0.8
    log_pi, log_ref = torch.log_softmax(logits, 0), torch.log_softmax(ref_logits, 0)
    exact = float((log_pi.exp() * (log_pi - log_ref)).sum())
    samples = torch.multinomial(log_pi.exp(), 200_000, replacement=True)
    lp = log_pi[samples][None]  # (1, S): one "completion" of S tokens
    k3 = ex.clipped_token_loss(lp, lp, torch.zeros(1, dtype=torch.float64), ref_logps=log_ref[samples][None], beta=1.0)
    label = f"categorical over 12 ids, KL(pi || pi_ref) = {exact:.4f}, 200,000 samples, advantages 0, beta 1"
    expect(
        bool((k3 >= -1e-12).all()),
        "k3 is negative for some samples",
        input=label,
        expected="every k3 >= 0 (u - 1 >= log u)",
        got=f"min {float(k3.min()):.3g}",
        hint="k3 = exp(log_ref - logp) - (log_ref - logp) - 1",
    )
    mean = float(k3.mean())
    standard_error = float(k3.std()) / math.sqrt(k3.numel())
    expect(
        abs(mean - exact) < 5 * standard_error,
        "the mean of k3 is not the KL divergence",
        input=label,
        expected=f"{exact:.4f} ± {5 * standard_error:.4f}",
        got=f"{mean:.4f}",
        hint="u = pi_ref / pi_theta (not the inverse); k3 = u - log u - 1, added as + beta * k3",
    )


@checks("clipped_token_loss")
def refuses_bad_token_arguments(ex):
    """mismatched shapes, a negative epsilon, or beta > 0 without ref_logps: ValueError"""
    logps, old = random_logps((2, 5))
    adv = torch.randn(2, dtype=torch.float64)
    for call, what in (
        (lambda: ex.clipped_token_loss(logps, old[:, :4], adv), "old_logps (2, 4) for logps (2, 5)"),
        (lambda: ex.clipped_token_loss(logps, old, torch.randn(5)), "advantages (5,) for 2 completions"),
        (lambda: ex.clipped_token_loss(logps, old, adv, -0.2), "epsilon_low=-0.2"),
        (lambda: ex.clipped_token_loss(logps, old, adv, beta=0.1), "beta=0.1 without ref_logps"),
    ):
        expect_value_error(call, input=what, hint="validate shapes, epsilons >= 0 and ref_logps for beta > 0 first")


# ------------------------------------------------------------------------------------------ aggregate_loss


def loop_aggregate(per_token, mask, loss_type, max_len=None) -> torch.Tensor:
    """TRL 1.16.0 lines 3153-3170, in Python floats over the real tokens only."""
    rows = [
        [float(per_token[i, t]) for t in range(per_token.shape[1]) if bool(mask[i, t])] for i in range(mask.shape[0])
    ]
    if loss_type == "grpo":
        value = sum(sum(r) / max(len(r), 1) for r in rows) / len(rows)
    elif loss_type == "dapo":
        value = sum(sum(r) for r in rows) / max(sum(len(r) for r in rows), 1)
    else:
        value = sum(sum(r) for r in rows) / (len(rows) * max_len)
    return torch.tensor(value, dtype=torch.float64)


def random_mask(num, length, generator=None):
    lengths = torch.randint(1, length + 1, (num,), generator=generator)
    lengths[0] = length
    return torch.arange(length)[None] < lengths[:, None]


@checks("aggregate_loss")
def hand_checkable_average(ex):
    """per-token losses [[1, 2, 3, 4], [10, x, x, x]] (x = padding): grpo 6.25, dapo 4, dr_grpo 20 / (2 * 5)"""
    per_token = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 55.0, -7.0, 99.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    label = "per_token_loss [[1, 2, 3, 4], [10, 55, -7, 99]], completion_mask [[1, 1, 1, 1], [1, 0, 0, 0]]"
    for loss_type, want, hint in (
        ("grpo", (2.5 + 10.0) / 2, "mean over completions of each completion's mean over its own tokens"),
        ("dapo", 20.0 / 5, "sum over all real tokens divided by their number (5)"),
        ("dr_grpo", 20.0 / (2 * 5), "sum over real tokens divided by N * max_completion_length = 2 * 5"),
    ):
        got = ex.aggregate_loss(per_token, mask, loss_type, max_completion_length=5)
        expect_tensor(got, shape=(), dtype=torch.float64, input=label + f", {loss_type}", what="loss")
        expect_close(
            got.reshape(1),
            torch.tensor([want], dtype=torch.float64),
            input=label + f", {loss_type}",
            what="loss",
            hint=hint,
        )


@checks("aggregate_loss")
def empty_completions(ex):
    """a completion without tokens counts 0 over length 1 (grpo); one real token in the batch is the loss; none is 0"""
    per_token = torch.tensor([[1.5, 2.5, -3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=torch.float64)
    cases = [
        (torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]]), "grpo", (2.0 + 0.0 + 7.0) / 3, "row 1 has no tokens"),
        (torch.tensor([[0, 0, 0], [0, 1, 0], [0, 0, 0]]), "dapo", 5.0, "a single real token in the batch"),
        (torch.tensor([[0, 0, 0], [0, 0, 0], [0, 0, 0]]), "dapo", 0.0, "no real token at all"),
        (torch.tensor([[0, 0, 0], [0, 0, 0], [0, 0, 0]]), "grpo", 0.0, "no real token at all"),
    ]
    for mask, loss_type, want, what in cases:
        label = f"per_token_loss {per_token.tolist()}, completion_mask {mask.tolist()} ({what}), {loss_type}"
        got = ex.aggregate_loss(per_token, mask, loss_type)
        expect_close(
            got.reshape(1),
            torch.tensor([want], dtype=torch.float64),
            input=label,
            what="loss",
            hint="clamp the token counts to at least 1 (as TRL does): an empty completion or batch gives 0, not NaN",
        )


@checks("aggregate_loss")
def matches_loop_spec_with_padding(ex):
    """random per-token losses with right padding (inf and NaN in the padding): the three averages, float32 and 64"""
    for (num, length), max_len in (((3, 8), 8), ((6, 5), 11), ((1, 9), 9)):
        for dtype in (torch.float64, torch.float32):
            per_token = torch.randn(num, length, dtype=torch.float64).to(dtype)
            mask = random_mask(num, length)
            poisoned = per_token.clone()
            if not bool(mask.all()):
                poisoned[~mask] = float("nan")
                poisoned[~mask & (torch.arange(length)[None] % 2 == 0)] = float("inf")
            label = describe(per_token_loss=per_token) + f", completion lengths {mask.sum(1).tolist()}, NaN/inf padding"
            for loss_type in ("grpo", "dapo", "dr_grpo"):
                got = ex.aggregate_loss(poisoned, mask, loss_type, max_completion_length=max_len)
                expect_tensor(got, shape=(), dtype=dtype, input=label, what=f"{loss_type} loss")
                expect_close(
                    got.reshape(1),
                    loop_aggregate(per_token, mask, loss_type, max_len).reshape(1),
                    baseline=loop_aggregate(per_token, mask, loss_type, max_len).to(dtype).reshape(1),
                    input=label + f", {loss_type}, max_completion_length={max_len}",
                    what="loss",
                    hint="select the real tokens with torch.where(mask, loss, 0) (0 * NaN is NaN), then the "
                    f"{loss_type} denominator",
                )


@checks("aggregate_loss")
def length_bias_changes_the_sign(ex):
    """a short right answer and a long wrong one: GRPO raises the logit of "wait", DAPO and Dr. GRPO lower it"""
    wait, vocab = 0, 7
    correct = torch.tensor([wait, 3, 4, 5])  # reward 1: 4 tokens, "wait" once
    wrong = torch.tensor([wait, 1, 2, 1, wait, 2, 1, 2, wait, 1, 2, 1, wait, 1, 2, 1, 3, 4, 6, 2])  # reward 0: 4 in 20
    length = len(wrong)
    tokens = torch.stack([torch.cat([correct, torch.full((length - 4,), 6)]), wrong])
    mask = torch.stack([torch.arange(length) < 4, torch.ones(length, dtype=torch.bool)])
    advantages = torch.tensor([0.5, -0.5], dtype=torch.float64)
    label = (
        'unigram policy over 7 ids, uniform; answer A (reward 1): 4 tokens with "wait" once; answer B (reward 0): '
        '20 tokens with "wait" 4 times; advantages +-0.5; first step (ratio 1)'
    )
    p_wait = 1 / vocab
    # -dL/dlogit_wait = sum_i A_i * w_i * (count_i(wait) - |o_i| p_wait), with w_i the weight of one token of answer i
    closed_form = {
        "grpo": (0.5 * (1 - 4 * p_wait) / 4 - 0.5 * (4 - 20 * p_wait) / 20) / 2,
        "dapo": (0.5 * (1 - 4 * p_wait) - 0.5 * (4 - 20 * p_wait)) / 24,
        "dr_grpo": (0.5 * (1 - 4 * p_wait) - 0.5 * (4 - 20 * p_wait)) / (2 * length),
    }
    for loss_type, want in closed_form.items():
        logits = torch.zeros(vocab, dtype=torch.float64, requires_grad=True)
        logps = torch.log_softmax(logits, 0)[tokens]
        per_token = ex.clipped_token_loss(logps, logps.detach(), advantages)
        loss = ex.aggregate_loss(per_token, mask, loss_type, max_completion_length=length)
        (grad,) = torch.autograd.grad(loss, logits)
        step = -float(grad[wait])
        expect(
            (step > 0) == (want > 0) and abs(step - want) < 1e-9,
            f"{loss_type}: the step on the logit of 'wait' is wrong",
            input=label,
            expected=f"-dL/dlogit(wait) = {want:+.5f} ({'up' if want > 0 else 'down'})",
            got=f"{step:+.5f}",
            hint="grpo weighs each token of answer i by 1/(N |o_i|) (density decides); dapo and dr_grpo weigh all "
            "tokens alike (counts decide)",
        )


@checks("aggregate_loss")
def refuses_bad_aggregate_arguments(ex):
    """unknown loss_type, a mask of another shape, dr_grpo without (or below) max_completion_length: ValueError"""
    per_token = torch.randn(2, 6, dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    for call, what in (
        (lambda: ex.aggregate_loss(per_token, mask, "bnpo_typo"), "loss_type='bnpo_typo'"),
        (lambda: ex.aggregate_loss(per_token, mask[:, :5], "grpo"), "completion_mask (2, 5) for losses (2, 6)"),
        (lambda: ex.aggregate_loss(per_token, mask, "dr_grpo"), "dr_grpo without max_completion_length"),
        (lambda: ex.aggregate_loss(per_token, mask, "dr_grpo", 4), "dr_grpo, max_completion_length=4 < length 6"),
        (
            lambda: ex.aggregate_loss(per_token, torch.arange(6)[None] < torch.tensor([[6], [2]]), "dr_grpo", 4),
            "dr_grpo, completion lengths [6, 2], max_completion_length=4 (below the longest)",
        ),
    ):
        expect_value_error(call, input=what, hint="validate loss_type, the mask's shape and max_completion_length")
    got = ex.aggregate_loss(per_token, mask, "dr_grpo", 6)
    expect_close(
        got.reshape(1),
        (per_token.sum() / 12).reshape(1),
        input="dr_grpo with max_completion_length=6 = the longest completion",
        what="loss",
        hint="max_completion_length equal to the longest completion is valid",
    )
