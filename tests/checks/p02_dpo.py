"""Checks for p02.dpo. References: Hugging Face `LlamaForCausalLM` (tiny config, float64) and its own loss on labels
masked with -100, turned into per-row log-probabilities; a float64 loop spec of the completion log-probability
(max-shifted log-sum-exp, one position at a time); TRL 1.16.0's DPO, cDPO and IPO formulas (trl/trainer/dpo_trainer.py
lines 1387-1404, rewards and metrics lines 1582-1595) written as closed forms with softplus; torch.autograd.gradcheck;
and a tiny policy trained with the learner's loss on synthetic pairs, whose reward margin and accuracy must rise."""

import copy
import math

import torch
import torch.nn.functional as F

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
from llm_algo.check.restrictions import CROSS_ENTROPY
from llm_algo.references.hf import tiny_llama_config
from llm_algo.references.llama import causal_lm

checks = Checks("p02.dpo")
checks.restrict(
    "sequence_logprobs",
    forbid=CROSS_ENTROPY,
    instead="take torch.log_softmax over the vocabulary and gather the next tokens (F.cross_entropy is the reference)",
)

HINT_LOGPS = "score input_ids[:, 1:] under log_softmax(logits[:, :-1]); keep completion_mask[:, 1:]; sum per row"


def loop_logprobs(logits, input_ids, completion_mask, average=False) -> torch.Tensor:
    """The spec, one position at a time in float64: sum (or mean) over t >= 1 with mask[t] of log p(id_t | l_{t-1})."""
    batch, length, _ = logits.shape
    out = torch.zeros(batch, dtype=torch.float64)
    for b in range(batch):
        total, count = 0.0, 0
        for t in range(1, length):
            if not bool(completion_mask[b, t]):
                continue
            row = logits[b, t - 1].double()
            top = row.max()
            log_normaliser = top + torch.log(torch.exp(row - top).sum())
            total += float(row[input_ids[b, t]] - log_normaliser)
            count += 1
        out[b] = total / max(count, 1) if average else total
    return out


def straightforward_logprobs(logits, input_ids, completion_mask) -> torch.Tensor:
    """The baseline: log_softmax + gather in float32 (what the learner's upcast computes)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.where(completion_mask[:, 1:].bool(), logp, 0.0).sum(-1)


def random_batch(batch, length, vocab, generator=None):
    """ids (B, T), attention mask and completion mask: a prompt of >= 1 token, a completion, right padding; one row
    is never padded."""
    input_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    attention_mask = torch.zeros(batch, length, dtype=torch.long)
    completion_mask = torch.zeros(batch, length, dtype=torch.long)
    for b in range(batch):
        real = length if b == 0 else int(torch.randint(2, length + 1, (1,), generator=generator))
        prompt = int(torch.randint(1, real, (1,), generator=generator))
        attention_mask[b, :real] = 1
        completion_mask[b, prompt:real] = 1
    return input_ids, attention_mask, completion_mask


# ------------------------------------------------------------------------------------------ sequence_logprobs


@checks("sequence_logprobs")
def hand_checkable_sequence(ex):
    """probabilities 0.1, 0.2, 0.3, 0.4 at every position: completion tokens 3 then 1 give log 0.4 + log 0.2"""
    base = torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    logits = torch.stack([base + 5.0 * t for t in range(4)])[None]  # (1, 4, 4): a shift per row changes nothing
    input_ids = torch.tensor([[0, 3, 1, 2]])
    completion_mask = torch.tensor([[0, 1, 1, 0]])  # prompt, two completion tokens, padding
    label = "logits (1, 4, 4) = log[1, 2, 3, 4] + 5t, ids [0, 3, 1, 2], completion_mask [0, 1, 1, 0]"
    got = ex.sequence_logprobs(logits, input_ids, completion_mask)
    expect_tensor(got, shape=(1,), dtype=torch.float32, input=label, what="sum")
    expect_close(got, torch.tensor([math.log(0.08)], dtype=torch.float64), input=label, what="sum", hint=HINT_LOGPS)
    got_mean = ex.sequence_logprobs(logits, input_ids, completion_mask, average=True)
    expect_close(
        got_mean,
        torch.tensor([math.log(0.08) / 2], dtype=torch.float64),
        input=label + ", average=True",
        what="mean",
        hint="average=True divides the sum by the number of completion tokens in the row (here 2)",
    )


@checks("sequence_logprobs")
@one_thread()
def matches_hugging_face_masked_loss(ex):
    """tiny Llama (float64): minus HF's loss on labels masked with -100, times the token count, for every row"""
    model = causal_lm(tiny_llama_config()).double()
    input_ids, attention_mask, completion_mask = random_batch(4, 11, 128)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        want = []
        for b in range(4):
            labels = input_ids[b : b + 1].masked_fill(completion_mask[b : b + 1] == 0, -100)
            loss = model(input_ids=input_ids[b : b + 1], attention_mask=attention_mask[b : b + 1], labels=labels).loss
            want.append(-loss * completion_mask[b, 1:].sum())  # HF averages over the shifted, unmasked labels
    got = ex.sequence_logprobs(logits, input_ids, completion_mask)
    label = (
        f"LlamaForCausalLM float64 logits (4, 11, 128), completion tokens per row {completion_mask.sum(1).tolist()}, "
        f"prompt lengths {(completion_mask.argmax(1)).tolist()}, right padding"
    )
    expect_tensor(got, shape=(4,), dtype=torch.float64, input=label, what="log-probs")
    # HF's loss upcasts the logits to float32 (transformers' ForCausalLMLoss), so it is a float32-accurate reference
    expect_close(got, torch.stack(want), input=label, dtype=torch.float32, what="log-probs", hint=HINT_LOGPS)


@checks("sequence_logprobs")
def random_shapes_and_dtypes(ex):
    """random logits over several shapes, float32, bfloat16 and float16: float32 sums as close as log_softmax's"""
    for (batch, length, vocab), dtype in (
        ((1, 2, 5), torch.float32),
        ((3, 9, 17), torch.bfloat16),
        ((2, 33, 50), torch.float16),
    ):
        logits = (torch.randn(batch, length, vocab) * 3).to(dtype)
        input_ids, _, completion_mask = random_batch(batch, length, vocab)
        label = describe(logits=logits) + f", completion tokens {completion_mask.sum(1).tolist()}"
        got = ex.sequence_logprobs(logits, input_ids, completion_mask)
        expect_tensor(
            got,
            shape=(batch,),
            dtype=torch.float32,
            input=label,
            what="log-probs",
            hint="compute in float32 (torch.promote_types(logits.dtype, torch.float32)) and return that dtype",
        )
        expect_close(
            got,
            loop_logprobs(logits, input_ids, completion_mask),
            baseline=straightforward_logprobs(logits, input_ids, completion_mask),
            input=label,
            what="log-probs",
            hint=HINT_LOGPS + "; upcast the logits before log_softmax",
        )
        for b in range(batch):
            mask = completion_mask.clone()
            mask[b] = 0
            only_others = ex.sequence_logprobs(logits, input_ids, mask)
            expect(
                float(only_others[b]) == 0.0,
                "a row with an all-zero completion mask does not sum to 0",
                input=label + f", row {b}'s mask cleared",
                expected="0.0",
                got=f"{float(only_others[b]):.4g}",
                hint="only tokens where completion_mask[:, 1:] is set count",
            )


@checks("sequence_logprobs")
def large_logits_and_nan_padding(ex):
    """logits of size ~1000 (tiny probabilities stay finite) and NaN logits at padded positions: finite, exact sums"""
    batch, length, vocab = 3, 8, 11
    logits = torch.randn(batch, length, vocab) * 1000
    input_ids, _, completion_mask = random_batch(batch, length, vocab)
    oracle = loop_logprobs(logits, input_ids, completion_mask)
    poisoned = logits.clone()
    unused = torch.ones(batch, length, dtype=torch.bool)  # positions whose logits no completion token reads
    unused[:, :-1] = completion_mask[:, 1:] == 0
    poisoned[unused] = float("nan")
    label = describe(logits=logits) + " * 1000; NaN logits at every position that predicts a prompt or padding token"
    got = ex.sequence_logprobs(poisoned, input_ids, completion_mask)
    expect(
        isinstance(got, torch.Tensor) and bool(torch.isfinite(got).all()),
        "the result is not finite",
        input=label,
        expected=str([round(v, 1) for v in oracle.tolist()]),
        got=str(got.tolist()) if isinstance(got, torch.Tensor) else repr(got),
        hint="use log_softmax (never log(softmax)), and torch.where(mask, logp, 0): 0 * NaN is NaN",
    )
    expect_close(
        got,
        oracle,
        baseline=straightforward_logprobs(logits, input_ids, completion_mask),
        input=label,
        what="log-probs",
        hint=HINT_LOGPS,
    )


@checks("sequence_logprobs")
def average_and_empty_rows(ex):
    """average=True: per-token means in float64, and 0 (not NaN) for a row without completion tokens"""
    logits = torch.randn(4, 10, 23, dtype=torch.float64)
    input_ids, _, completion_mask = random_batch(4, 10, 23)
    completion_mask[2] = 0
    completion_mask[3, 1:] = 0
    completion_mask[3, 0] = 1  # position 0 is never predicted: still no token to score
    completion_mask[1] = 0
    completion_mask[1, 4] = 1  # exactly one completion token: its mean is itself
    label = describe(logits=logits) + f", average=True, completion tokens {completion_mask[:, 1:].sum(1).tolist()}"
    got = ex.sequence_logprobs(logits, input_ids, completion_mask.bool(), average=True)
    expect_tensor(got, shape=(4,), dtype=torch.float64, input=label, what="means")
    expect_close(
        got,
        loop_logprobs(logits, input_ids, completion_mask, average=True),
        input=label,
        what="means",
        hint="divide by the number of completion tokens in completion_mask[:, 1:], clamped to at least 1",
    )


@checks("sequence_logprobs")
def refuses_mismatched_shapes(ex):
    """logits without a vocabulary axis, or masks of another length, are refused with a ValueError"""
    ids = torch.randint(0, 7, (2, 5))
    for logits, mask, what in (
        (torch.randn(2, 5), torch.ones(2, 5), "logits (2, 5) without a vocabulary axis"),
        (torch.randn(2, 5, 7), torch.ones(2, 4), "completion_mask (2, 4) for input_ids (2, 5)"),
        (torch.randn(2, 6, 7), torch.ones(2, 5), "logits (2, 6, 7) for input_ids (2, 5)"),
    ):
        expect_value_error(
            lambda logits=logits, mask=mask: ex.sequence_logprobs(logits, ids, mask),
            input=what,
            hint="check logits.dim() == 3 and that input_ids and completion_mask have shape logits.shape[:2]",
        )


# ------------------------------------------------------------------------------------------ preference_loss


def closed_form_losses(pc, pr, rc, rr, beta, loss_type, eps):
    """TRL 1.16.0's formulas, written with softplus: -log sigmoid(z) = softplus(-z)."""
    delta = (pc - rc) - (pr - rr)
    if loss_type == "ipo":
        return (delta - 0.5 / beta).pow(2)
    return (1 - eps) * F.softplus(-beta * delta) + eps * F.softplus(beta * delta)


def four_logps(batch, dtype=torch.float64, scale=5.0):
    return [(torch.randn(batch, dtype=torch.float64) * scale - 20).to(dtype) for _ in range(4)]


VARIANTS = [  # (beta, loss_type, label_smoothing)
    (0.1, "sigmoid", 0.0),
    (0.5, "sigmoid", 0.2),
    (0.05, "ipo", 0.0),
    (1.0, "ipo", 0.0),
]


@checks("preference_loss")
def hand_checkable_values(ex):
    """equal log-ratios give log 2 (DPO, cDPO) and 1/(4 beta^2) (IPO); beta=0.5, delta=2 gives log(1 + e^-1)"""
    zero = torch.zeros(3, dtype=torch.float64)
    logps = torch.tensor([-3.0, -7.5, -1.0], dtype=torch.float64)
    cases = [
        ((logps, logps, logps, logps), dict(beta=0.1), math.log(2), "delta = 0, DPO"),
        ((logps, logps, logps, logps), dict(beta=0.3, label_smoothing=0.25), math.log(2), "delta = 0, cDPO eps=0.25"),
        ((logps, logps, logps, logps), dict(beta=0.2, loss_type="ipo"), 1 / (4 * 0.2**2), "delta = 0, IPO beta=0.2"),
        ((logps + 1.5, logps, zero + 0.5, zero + 1.0), dict(beta=0.5), math.log(1 + math.exp(-1.0)), "delta = 2"),
    ]
    for inputs, kwargs, want, what in cases:
        label = f"{what}: policy chosen/rejected, ref chosen/rejected of 3 pairs, {kwargs}"
        losses, _, _ = ex.preference_loss(*inputs, **kwargs)
        expect_close(
            losses,
            torch.full((3,), want, dtype=torch.float64),
            input=label,
            what="losses",
            hint="delta = (pi_c - ref_c) - (pi_r - ref_r); DPO -log sigmoid(beta delta); IPO (delta - 1/(2 beta))^2",
        )


@checks("preference_loss")
def matches_trl_formulas(ex):
    """random log-probs, DPO / cDPO / IPO, several beta: float64 equal to TRL's formulas; float32 as close as theirs"""
    for batch, (beta, loss_type, eps) in zip((1, 7, 16, 5), VARIANTS, strict=True):
        for dtype in (torch.float64, torch.float32):
            inputs = four_logps(batch, dtype)
            label = f"4 log-prob vectors ({batch},) {dtype}, beta={beta}, loss_type={loss_type}, label_smoothing={eps}"
            losses, _, _ = ex.preference_loss(*inputs, beta=beta, loss_type=loss_type, label_smoothing=eps)
            expect_tensor(losses, shape=(batch,), dtype=dtype, input=label, what="losses")
            expect_close(
                losses,
                closed_form_losses(*(t.double() for t in inputs), beta, loss_type, eps),
                baseline=closed_form_losses(*inputs, beta, loss_type, eps),
                input=label,
                what="losses",
                hint="cDPO: -(1 - eps) log sigmoid(beta delta) - eps log sigmoid(-beta delta); IPO (delta - 1/(2 beta))^2",
            )


@checks("preference_loss")
def implicit_rewards_are_detached(ex):
    """the rewards are beta * (policy - reference) log-ratios, detached even when the inputs need gradients"""
    pc, pr, rc, rr = four_logps(6)
    beta = 0.25
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    label = describe(policy_chosen_logps=pc) + " (requires grad), beta=0.25"
    _, chosen_rewards, rejected_rewards = ex.preference_loss(pc, pr, rc, rr, beta=beta)
    for what, got, want in (
        ("chosen_rewards", chosen_rewards, beta * (pc - rc)),
        ("rejected_rewards", rejected_rewards, beta * (pr - rr)),
    ):
        expect_close(got.detach(), want.detach(), input=label, what=what, hint="reward = beta * (log pi - log pi_ref)")
        expect(
            not got.requires_grad,
            f"{what} carries a graph",
            input=label,
            expected="requires_grad False (a metric, detached as TRL does)",
            got="requires_grad True",
            hint="beta * log_ratio.detach()",
        )


@checks("preference_loss")
def gradients(ex):
    """gradcheck in float64 for the three losses; DPO's gradient weight is beta * sigmoid(-beta * delta)"""
    for beta, loss_type, eps in VARIANTS:
        inputs = [t.requires_grad_(True) for t in four_logps(4, scale=1.0)]
        expect_gradcheck(
            lambda *xs, beta=beta, loss_type=loss_type, eps=eps: ex.preference_loss(
                *xs, beta=beta, loss_type=loss_type, label_smoothing=eps
            )[0],
            tuple(inputs),
            input=f"4 log-prob vectors (4,) float64 requiring grad, beta={beta}, {loss_type}, eps={eps}",
            hint="build the loss from the inputs with differentiable torch ops",
        )
    pc, pr, rc, rr = four_logps(5)
    pc.requires_grad_(True)
    beta = 0.1
    losses, _, _ = ex.preference_loss(pc, pr, rc, rr, beta=beta)
    (grad,) = torch.autograd.grad(losses.sum(), pc)
    delta = ((pc - rc) - (pr - rr)).detach()
    expect_close(
        grad,
        -beta * torch.sigmoid(-beta * delta),
        input=describe(policy_chosen_logps=pc) + ", beta=0.1, DPO",
        what="d loss / d policy_chosen_logps",
        hint="the gradient of -log sigmoid(beta delta) is -beta sigmoid(-beta delta)",
    )


@checks("preference_loss")
def stable_for_huge_margins(ex):
    """|beta * delta| up to 1000 in float32: finite losses, equal to softplus's"""
    pc = torch.tensor([0.0, -5000.0, 5000.0, -20000.0, 300.0])
    zeros = torch.zeros(5)
    for beta, eps in ((0.2, 0.0), (0.05, 0.1)):
        label = f"policy_chosen_logps {pc.tolist()}, all others 0, float32, beta={beta}, label_smoothing={eps}"
        losses, _, _ = ex.preference_loss(pc, zeros, zeros, zeros, beta=beta, label_smoothing=eps)
        expect(
            bool(torch.isfinite(losses).all()),
            "the loss overflows for a large margin",
            input=label,
            expected=str(closed_form_losses(pc.double(), zeros, zeros, zeros, beta, "sigmoid", eps).tolist()),
            got=str(losses.tolist()),
            hint="-F.logsigmoid(z) (or softplus(-z)) is finite for every z; -log(sigmoid(z)) is inf once sigmoid underflows",
        )
        expect_close(
            losses,
            closed_form_losses(pc.double(), zeros.double(), zeros.double(), zeros.double(), beta, "sigmoid", eps),
            baseline=closed_form_losses(pc, zeros, zeros, zeros, beta, "sigmoid", eps),
            input=label,
            what="losses",
            hint="use F.logsigmoid",
        )


@checks("preference_loss")
def refuses_bad_arguments(ex):
    """unknown loss_type, beta <= 0, label_smoothing outside [0, 0.5), smoothing with IPO, mismatched shapes"""
    a, b = torch.randn(3), torch.randn(3)
    cases = [
        (dict(loss_type="hinge_typo"), (a, b, a, b), "loss_type='hinge_typo'"),
        (dict(beta=0.0), (a, b, a, b), "beta=0"),
        (dict(label_smoothing=0.5), (a, b, a, b), "label_smoothing=0.5"),
        (dict(label_smoothing=-0.1), (a, b, a, b), "label_smoothing=-0.1"),
        (dict(loss_type="ipo", label_smoothing=0.1), (a, b, a, b), "IPO with label_smoothing=0.1"),
        ({}, (a, b, a, torch.randn(4)), "ref_rejected_logps (4,) with the others (3,)"),
        ({}, (a, b, torch.randn(1), b), "ref_chosen_logps (1,) with the others (3,): would broadcast silently"),
    ]
    for kwargs, inputs, what in cases:
        expect_value_error(
            lambda kwargs=kwargs, inputs=inputs: ex.preference_loss(*inputs, **kwargs),
            input=what,
            hint="validate loss_type, beta > 0, 0 <= label_smoothing < 0.5 (sigmoid only) and equal shapes first",
        )


# ------------------------------------------------------------------------------------------ dpo_batch_loss


def tiny_pair(seed_shift=0.02):
    """A float64 tiny Llama reference and a policy near it (different weights, so rewards are not zero)."""
    reference = causal_lm(tiny_llama_config(num_hidden_layers=1)).double()
    policy = copy.deepcopy(reference)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * seed_shift)
    return policy.train(), reference.eval()


def reference_logps(model, input_ids, attention_mask, completion_mask, average):
    """Per row, F.cross_entropy (float64) of the model's logits against labels masked with -100, as HF builds them."""
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.double()
    labels = input_ids.masked_fill(completion_mask == 0, -100)
    out = []
    for b in range(input_ids.shape[0]):
        total = -F.cross_entropy(logits[b, :-1], labels[b, 1:], ignore_index=-100, reduction="sum")
        out.append(total / completion_mask[b, 1:].sum().clamp(min=1) if average else total)
    return torch.stack(out)


def expected_batch(policy, reference, batch, beta, loss_type, eps):
    average = loss_type == "ipo"
    pol = reference_logps(policy, *batch, average)
    ref = reference_logps(reference, *batch, average)
    pc, pr = pol.chunk(2)
    rc, rr = ref.chunk(2)
    loss = closed_form_losses(pc, pr, rc, rr, beta, loss_type, eps).mean()
    cr, rj = beta * (pc - rc), beta * (pr - rr)
    metrics = {
        "rewards/chosen": cr.mean().item(),
        "rewards/rejected": rj.mean().item(),
        "rewards/margins": (cr - rj).mean().item(),
        "rewards/accuracies": (cr > rj).double().mean().item(),
    }
    return loss, metrics


def compare_metrics(got, want, label):
    expect(
        isinstance(got, dict) and set(got) == set(want),
        "the metrics have the wrong keys",
        input=label,
        expected=str(sorted(want)),
        got=str(sorted(got)) if isinstance(got, dict) else repr(got),
        hint="return TRL's four keys rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies",
    )
    for key, value in want.items():
        expect(
            isinstance(got[key], float),
            f"{key} is not a Python float",
            input=label,
            expected="float (tensor.item())",
            got=type(got[key]).__name__,
            hint="metrics are logged numbers: .item()",
        )
        expect_close(
            torch.tensor([got[key]], dtype=torch.float64),
            torch.tensor([value], dtype=torch.float64),
            input=label,
            what=key,
            hint="means over the B pairs; accuracy counts chosen reward > rejected reward, strictly",
        )


@checks("dpo_batch_loss")
@one_thread()
def matches_closed_form_on_a_tiny_llama(ex):
    """tiny Llama policy and reference (float64), [chosen; rejected] batch of 3 pairs: TRL's loss and metrics"""
    policy, reference = tiny_pair()
    for beta, loss_type, eps in VARIANTS:
        batch = random_batch(6, 9, 128)
        label = f"tiny Llama float64, input_ids (6, 9) = 3 chosen then 3 rejected, beta={beta}, {loss_type}, eps={eps}"
        loss, metrics = ex.dpo_batch_loss(
            policy, reference, *batch, beta=beta, loss_type=loss_type, label_smoothing=eps
        )
        want_loss, want_metrics = expected_batch(policy, reference, batch, beta, loss_type, eps)
        expect_tensor(loss, shape=(), dtype=torch.float64, input=label, what="loss")
        expect_close(
            loss.detach(),
            want_loss,
            input=label,
            what="loss",
            hint="rows [:B] are chosen, [B:] rejected; sums of log-probs (per-token means for IPO); mean over pairs",
        )
        compare_metrics(metrics, want_metrics, label)


@checks("dpo_batch_loss")
@one_thread()
def gradients_reach_the_policy_only(ex):
    """the reference runs with autograd off (measured in its forward); backward reaches every policy parameter and no
    reference parameter; policy == reference gives log 2, zeros"""
    policy, reference = tiny_pair()
    batch = random_batch(4, 7, 128)
    label = "tiny Llama float64 policy and reference, input_ids (4, 7)"
    grad_modes = []  # torch.is_grad_enabled() at each call of the reference, recorded by the model itself
    hook = reference.register_forward_pre_hook(lambda module, args: grad_modes.append(torch.is_grad_enabled()))
    try:
        loss, _ = ex.dpo_batch_loss(policy, reference, *batch, beta=0.1)
    finally:
        hook.remove()
    expect(
        bool(grad_modes) and not any(grad_modes),
        "the reference model ran with autograd on" if grad_modes else "the reference model was never called",
        input=label,
        expected="every reference forward under torch.no_grad() (torch.is_grad_enabled() False)",
        got=f"{len(grad_modes)} reference forward(s), autograd on in {sum(grad_modes)}",
        hint="call the reference inside torch.no_grad(): detaching its output afterwards gives the same numbers but "
        "builds and keeps the reference's whole graph (its activations) for nothing",
    )
    loss.backward()
    ref_grads = [n for n, p in reference.named_parameters() if p.grad is not None]
    expect(
        not ref_grads,
        "the reference model received gradients",
        input=label,
        expected="no .grad on any reference parameter",
        got=f"{len(ref_grads)} parameters with .grad, e.g. {ref_grads[:2]}",
        hint="run the reference under torch.no_grad(): it is frozen, and its graph costs activation memory",
    )
    missing = [n for n, p in policy.named_parameters() if p.grad is None]
    expect(
        not missing,
        "some policy parameters received no gradient",
        input=label,
        expected="every policy parameter has .grad",
        got=f"missing on {missing[:3]}",
        hint="do not detach the policy's log-probabilities",
    )
    same = copy.deepcopy(reference)
    loss, metrics = ex.dpo_batch_loss(same, reference, *batch, beta=0.1)
    label = "policy = reference (a fresh copy), tiny Llama float64, input_ids (4, 7), beta=0.1"
    expect_close(
        loss.detach().reshape(1),
        torch.tensor([math.log(2)], dtype=torch.float64),
        input=label,
        what="loss",
        hint="equal models give delta = 0 and loss log 2",
    )
    compare_metrics(
        metrics,
        {"rewards/chosen": 0.0, "rewards/rejected": 0.0, "rewards/margins": 0.0, "rewards/accuracies": 0.0},
        label + " (every reward 0: no pair is strictly ahead)",
    )


def synthetic_pairs(num_pairs, prompt_len, vocab):
    prompts = torch.randint(4, vocab - 1, (num_pairs, prompt_len))
    chosen = prompts + 1
    rejected = torch.randint(4, vocab, (num_pairs, prompt_len))
    input_ids = torch.cat([torch.cat([prompts, chosen], 1), torch.cat([prompts, rejected], 1)])
    completion_mask = torch.zeros_like(input_ids)
    completion_mask[:, prompt_len:] = 1
    return input_ids, torch.ones_like(input_ids), completion_mask


@checks("dpo_batch_loss")
@one_thread()
def training_raises_the_margin(ex):
    """40 AdamW steps of your DPO loss on 12 synthetic pairs: loss falls, margin > 0.5, accuracy >= 0.9"""
    config = tiny_llama_config(
        vocab_size=24, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16,
    )  # fmt: skip
    reference = causal_lm(config)
    policy = copy.deepcopy(reference).train()
    batch = synthetic_pairs(12, 3, 24)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3, weight_decay=0.0)
    first = last = None
    for _ in range(40):
        loss, metrics = ex.dpo_batch_loss(policy, reference, *batch, beta=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = first or (float(loss), metrics)
        last = (float(loss), metrics)
    label = (
        "1-layer Llama (vocab 24, hidden 32), 12 pairs: chosen = prompt + 1, rejected random; AdamW lr 3e-3, beta 0.1"
    )
    expect(
        last[0] < first[0] - 0.2 and last[1]["rewards/margins"] > 0.5 and last[1]["rewards/accuracies"] >= 0.9,
        "training with your loss does not separate chosen from rejected",
        input=label,
        expected="loss down by > 0.2 from log 2, margin > 0.5, accuracy >= 0.9 after 40 steps",
        got=f"loss {first[0]:.3f} -> {last[0]:.3f}, margin {last[1]['rewards/margins']:.3f}, "
        f"accuracy {last[1]['rewards/accuracies']:.2f}",
        hint="the policy's log-probs must carry gradients; chosen rows first; loss = mean of -log sigmoid(beta delta)",
    )


@checks("dpo_batch_loss")
@one_thread()
def refuses_an_odd_batch(ex):
    """a batch with an odd number of rows cannot be [chosen; rejected] and is refused"""
    policy, reference = tiny_pair()
    batch = random_batch(5, 6, 128)
    expect_value_error(
        lambda: ex.dpo_batch_loss(policy, reference, *batch),
        input="input_ids (5, 6)",
        hint="raise ValueError when input_ids.shape[0] is odd",
    )
