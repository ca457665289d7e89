"""Checks for p01.information_theory. References: `torch.distributions` (`Categorical` entropy, `kl_divergence` of
categoricals and of `Independent(Normal)`) in float64; `F.cross_entropy` with soft targets (cross-entropy minus
entropy is KL); a Hugging Face `LlamaForCausalLM` built from a tiny config, whose own `loss` with `labels` gives the
perplexity; a float64 loop over tokens; a Monte Carlo estimate within five standard errors; closed forms (uniform
distributions, the gradient of the Gaussian KL) and `torch.autograd.gradcheck`."""

import math
import warnings

import torch
import torch.nn.functional as F
from torch.distributions import Categorical, Independent, Normal, kl_divergence

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor
from llm_algo.check.restrictions import CROSS_ENTROPY
from llm_algo.references.hf import tiny_llama_config, transformers_module

checks = Checks("p01.information_theory")
checks.restrict(
    "entropy",
    "kl_divergence",
    "gaussian_kl",
    forbid=("torch.distributions", torch.special.entr, F.kl_div, *CROSS_ENTROPY),
    instead="write the sums from log-probabilities yourself (torch.distributions and F.kl_div are the references)",
)
checks.restrict(
    "perplexity",
    forbid=CROSS_ENTROPY,
    instead="gather the label's log-probability and average yourself (the model's own cross-entropy loss is the "
    "reference)",
)

LOW_PRECISION = (torch.float16, torch.bfloat16)


def random_logits(*shape, dtype=torch.float32, scale=3.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


def baseline_in(dtype, oracle_fn, *tensors):
    """A straightforward PyTorch computation for a low-precision dtype: float32, rounded to the dtype."""
    if dtype not in LOW_PRECISION:
        return None
    return oracle_fn(*(t.float() for t in tensors)).to(dtype)


# ------------------------------------------------------------------------------------------ entropy


def torch_entropy(logits):
    return Categorical(logits=logits).entropy()


HINT_ENTROPY = "log_p = log_softmax(logits.float()); -(p * log_p).sum(-1) with 0 * log 0 = 0; cast back to the dtype"


@checks("entropy")
def matches_categorical_entropy(ex):
    """several shapes (32000-token vocabularies, near-uniform in bf16, odd sizes), four dtypes: Categorical"""
    for shape, dtype, scale in (
        ((7,), torch.float64, 3.0),
        ((3, 5, 11), torch.float32, 3.0),
        ((2, 32000), torch.float32, 3.0),
        ((4, 129), torch.bfloat16, 3.0),
        ((4, 65536), torch.bfloat16, 0.5),
        ((1, 3, 257), torch.float16, 3.0),
    ):
        logits = random_logits(*shape, dtype=dtype, scale=scale)
        got = ex.entropy(logits)
        label = describe(logits=logits)
        expect_tensor(got, shape=shape[:-1], dtype=dtype, input=label, hint="reduce over the last dim; keep the dtype")
        expect_close(
            got,
            torch_entropy(logits.double()),
            input=label,
            baseline=baseline_in(dtype, torch_entropy, logits),
            hint=HINT_ENTROPY,
        )


@checks("entropy")
def masked_tokens_and_closed_forms(ex):
    """-inf logits (masked tokens) give no NaN: one allowed token has entropy 0, k equal allowed tokens log k"""
    V = 50
    logits = torch.full((4, V), -math.inf, dtype=torch.float64)
    logits[0, 7] = 2.5  # one allowed token
    logits[1, :5] = 0.0  # five equal ones
    logits[2, ::2] = 1.0  # 25 equal ones
    logits[3] = random_logits(V, dtype=torch.float64)
    logits[3, 10:] = -math.inf  # top-10 filtering
    want = torch.tensor([0.0, math.log(5), math.log(25), float(torch_entropy(logits[3, :10]))], dtype=torch.float64)
    got = ex.entropy(logits)
    expect(
        not bool(got.isnan().any()),
        "masked tokens produced NaN",
        input="logits (4, 50) float64 with -inf entries",
        expected=str(want.tolist()),
        got=str(got.tolist()),
        hint="0 * log 0 is NaN in floating point: drop the terms with p = 0 (torch.where(p > 0, ...))",
    )
    expect_close(
        got,
        want,
        input="rows: one allowed token, 5 equal, 25 equal, top-10 of random logits",
        hint="a uniform distribution over k tokens has entropy log k",
    )


@checks("entropy")
def peaked_logits_stay_finite_and_exact(ex):
    """logits up to 1e4 apart (near one-hot) and shifted by 1e4: stable, equal to Categorical in float64"""
    for scale in (2000.0, 3.0):
        logits = random_logits(3, 40, dtype=torch.float32, scale=scale) + 1e4
        expect_close(
            ex.entropy(logits),
            torch_entropy(logits.double()),
            input=describe(logits=logits) + f" scaled by {scale}, + 1e4",
            hint="use log_softmax (subtracts the max), not exp(logits) / sum: exp(1e4) is inf",
        )


@checks("entropy")
def gradients_flow(ex):
    """torch.autograd.gradcheck of the entropy in float64 (with one masked token), and a bad input refused"""
    logits = random_logits(3, 6, dtype=torch.float64).requires_grad_(True)
    expect_gradcheck(
        lambda z: ex.entropy(z),
        (logits,),
        input=describe(logits=logits),
        hint="keep the computation in torch ops on the input: no .item(), .detach() or numpy",
    )
    for bad in (torch.tensor(1.0), torch.arange(5)):
        try:
            ex.entropy(bad)
        except (ValueError, TypeError):
            continue
        expect(
            False,
            "a tensor that is not a (..., V) float tensor was accepted",
            input=describe(logits=bad),
            expected="ValueError",
            got="no error",
            hint="check logits.dim() >= 1 and logits.is_floating_point()",
        )


# ------------------------------------------------------------------------------------------ kl_divergence


def torch_kl(p_logits, q_logits):
    p_logits, q_logits = torch.broadcast_tensors(p_logits, q_logits)
    return kl_divergence(Categorical(logits=p_logits), Categorical(logits=q_logits))


HINT_KL = "sum p * (log p - log q) with log p, log q from log_softmax; KL(p || q): the first argument is p"


@checks("kl_divergence")
def matches_torch_kl(ex):
    """random pairs, broadcast shapes, float64/float32/bfloat16: kl_divergence(Categorical, Categorical)"""
    cases = [
        ((5,), (5,), torch.float64),
        ((3, 7, 13), (3, 7, 13), torch.float32),
        ((4, 1, 33), (1, 3, 33), torch.float32),
        ((2, 300), (2, 300), torch.bfloat16),
        ((2, 32000), (2, 32000), torch.bfloat16),
    ]
    for p_shape, q_shape, dtype in cases:
        scale = 0.3 if p_shape[-1] > 1000 else 3.0  # near-uniform over a large vocabulary: precision shows
        p, q = random_logits(*p_shape, dtype=dtype, scale=scale), random_logits(*q_shape, dtype=dtype, scale=scale)
        got = ex.kl_divergence(p, q)
        label = describe(p_logits=p, q_logits=q)
        out_shape = torch.broadcast_shapes(p_shape, q_shape)[:-1]
        expect_tensor(got, shape=out_shape, dtype=dtype, input=label, hint="reduce over the last dim only")
        expect_close(
            got,
            torch_kl(p.double(), q.double()),
            input=label,
            baseline=baseline_in(dtype, torch_kl, p, q),
            hint=HINT_KL,
        )
    p, q = random_logits(3, 17, dtype=torch.float32), random_logits(3, 17, dtype=torch.float64)
    expect_tensor(
        ex.kl_divergence(p, q),
        shape=(3,),
        dtype=torch.float64,
        input=describe(p_logits=p, q_logits=q),
        hint="return the promoted dtype of the two inputs: torch.promote_types(p.dtype, q.dtype)",
    )


@checks("kl_divergence")
def direction_zeros_and_infinity(ex):
    """KL(p||q) != KL(q||p); masked tokens of p add 0; q = 0 where p > 0 gives +inf; KL(p||p) = 0"""
    p = torch.tensor([[0.0, 0.0, 0.0, -math.inf], [2.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    q = torch.tensor([[3.0, 0.0, -2.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    for a, b, what in ((p, q, "KL(p||q)"), (q, p, "KL(q||p)")):
        got = ex.kl_divergence(a, b)
        want = torch_kl(a, b)
        expect_close(
            got,
            want,
            input=f"{what} with p = {p.tolist()}, q = {q.tolist()}",
            hint="KL is not symmetric: the first argument is the distribution the expectation is over; "
            "terms with p_i = 0 are 0, and p_i > 0 with q_i = 0 is +inf",
        )
    same = random_logits(3, 9, dtype=torch.float64)
    expect_close(
        ex.kl_divergence(same, same + 5.0),
        torch.zeros(3, dtype=torch.float64),
        input="q_logits = p_logits + 5 (the same distribution)",
        hint="log_softmax removes a constant shift",
    )


@checks("kl_divergence")
def cross_entropy_minus_entropy(ex):
    """KL(p||q) = H(p, q) - H(p), with H(p, q) from F.cross_entropy on soft targets, over a 1000-token vocabulary"""
    p, q = random_logits(6, 1000, dtype=torch.float64), random_logits(6, 1000, dtype=torch.float64)
    want = F.cross_entropy(q, p.softmax(-1), reduction="none") - torch_entropy(p)
    expect_close(
        ex.kl_divergence(p, q),
        want,
        input=describe(p_logits=p, q_logits=q),
        hint="KL(p||q) = sum p log p - sum p log q: expectations under p, the first argument",
    )


@checks("kl_divergence")
def refuses_different_vocabularies(ex):
    """logits over 10 and 11 tokens raise ValueError instead of broadcasting or crashing"""
    ex.kl_divergence(random_logits(2, 10), random_logits(2, 10))  # first: it works at all
    for a, b in ((random_logits(2, 10), random_logits(2, 11)), (random_logits(10), random_logits(3, 1))):
        try:
            ex.kl_divergence(a, b)
        except ValueError:
            continue
        except RuntimeError as error:
            if isinstance(error, NotImplementedError):
                raise
            expect(
                False,
                "different vocabulary sizes crashed with a RuntimeError instead of a ValueError",
                input=describe(p_logits=a, q_logits=b),
                expected="ValueError",
                got=str(error)[:100],
                hint="compare p_logits.shape[-1] with q_logits.shape[-1] first",
            )
        expect(
            False,
            "different vocabulary sizes were accepted",
            input=describe(p_logits=a, q_logits=b),
            expected="ValueError",
            got="no error",
            hint="compare p_logits.shape[-1] with q_logits.shape[-1] first",
        )


# ------------------------------------------------------------------------------------------ perplexity


def nll_by_loop(logits, labels, ignore_index=-100):
    """float64 spec: one token at a time."""
    total, count = 0.0, 0
    B, T, _ = logits.shape
    for b in range(B):
        for t in range(T - 1):
            target = int(labels[b, t + 1])
            if target == ignore_index:
                continue
            row = logits[b, t].double()
            total += float(torch.logsumexp(row, 0) - row[target])
            count += 1
    return total / count


HINT_PPL = (
    "logits[:, :-1] predict labels[:, 1:]; drop labels == ignore_index from the sum and the count; "
    "exp(total NLL / number of valid tokens)"
)


@checks("perplexity")
def matches_hugging_face_llama_loss(ex):
    """a tiny Llama's logits for 2 x 9 tokens with ignored labels: exp of LlamaForCausalLM(..., labels=labels).loss"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers_module().LlamaForCausalLM(tiny_llama_config()).eval()
    ids = torch.randint(0, 128, (2, 9))
    labels = ids.clone()
    labels[0, :3] = -100  # a prompt that is not scored
    labels[1, 6:] = -100  # padding
    with torch.no_grad():
        output = model(ids, labels=labels)
    want = output.loss.double().exp()
    got = ex.perplexity(output.logits, labels)
    label = "tiny LlamaForCausalLM, ids (2, 9), labels with -100 on a prompt and on padding"
    expect_tensor(got, shape=(), dtype=torch.float32, input=label, hint="return a 0-d float32 tensor")
    expect_close(got, want, input=label, hint=HINT_PPL)


@checks("perplexity")
def uniform_model_has_perplexity_vocab(ex):
    """equal logits over V = 37 tokens give perplexity 37 whatever the labels; bf16 logits too"""
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.full((3, 6, 37), 1.25, dtype=dtype)
        labels = torch.randint(0, 37, (3, 6))
        labels[2, 2] = -100
        got = ex.perplexity(logits, labels)
        expect_tensor(
            got,
            shape=(),
            dtype=torch.float32,
            input=f"equal logits (3, 6, 37) {dtype}",
            hint="compute in float32 (logits.float()) and return a 0-d float32 tensor",
        )
        expect_close(
            got,
            torch.tensor(37.0, dtype=torch.float64),
            input=f"equal logits (3, 6, 37) {dtype}",
            hint="exp(mean NLL) of a uniform guess over V tokens is V",
        )


@checks("perplexity")
def token_average_with_uneven_sequences(ex):
    """one long and one short sequence, a custom ignore_index: the token-weighted mean of a float64 loop"""
    logits = random_logits(2, 40, 23, dtype=torch.float32)
    logits[1] *= 4  # a second sequence with a very different loss
    labels = torch.randint(0, 23, (2, 40))
    labels[1, 5:] = 7  # ignore_index below: the second sequence has only 4 predicted tokens
    labels[0][labels[0] == 7] = 8
    labels[0, 3], labels[0, 9] = 0, 22  # the first and the last token ids
    got = ex.perplexity(logits, labels, ignore_index=7)
    want = torch.tensor(math.exp(nll_by_loop(logits, labels, ignore_index=7)), dtype=torch.float64)
    expect_close(
        got,
        want,
        input="logits (2, 40, 23): 39 predicted tokens and 4 predicted tokens, ignore_index=7",
        hint="average over all valid tokens of the batch, not per sequence and then over sequences; "
        "use the ignore_index argument",
    )


@checks("perplexity")
def refuses_mismatched_shapes(ex):
    """labels whose shape is not logits.shape[:2], or 2-d logits, raise ValueError"""
    ex.perplexity(random_logits(1, 4, 5), torch.randint(0, 5, (1, 4)))  # first: it works at all
    for logits, labels in (
        (random_logits(2, 4, 5), torch.randint(0, 5, (2, 5))),
        (random_logits(4, 5), torch.randint(0, 5, (4,))),
    ):
        try:
            ex.perplexity(logits, labels)
        except ValueError:
            continue
        except (RuntimeError, IndexError) as error:
            if isinstance(error, NotImplementedError):
                raise
        expect(
            False,
            "mismatched shapes were not refused with a ValueError",
            input=describe(logits=logits, labels=labels),
            expected="ValueError",
            got="no error or another exception",
            hint="check logits.dim() == 3 and labels.shape == logits.shape[:2]",
        )


# ------------------------------------------------------------------------------------------ gaussian_kl


def torch_gaussian_kl(mu_p, sigma_p, mu_q, sigma_q):
    mu_p, sigma_p, mu_q, sigma_q = torch.broadcast_tensors(mu_p, sigma_p, mu_q, sigma_q)
    return kl_divergence(Independent(Normal(mu_p, sigma_p), 1), Independent(Normal(mu_q, sigma_q), 1))


def random_gaussians(*shape, dtype=torch.float64):
    mu_p, mu_q = torch.randn(*shape, dtype=dtype), torch.randn(*shape, dtype=dtype)
    sigma_p, sigma_q = (torch.rand(*shape, dtype=dtype) + 0.3), (torch.rand(*shape, dtype=dtype) * 2 + 0.2)
    return mu_p, sigma_p, mu_q, sigma_q


HINT_GAUSS = "sum over the last dim of log(sigma_q / sigma_p) + (sigma_p^2 + (mu_p - mu_q)^2) / (2 sigma_q^2) - 1/2"


@checks("gaussian_kl")
def matches_torch_distributions(ex):
    """diagonal Gaussians of several shapes (broadcast q, float32 and float64): Independent(Normal) KL"""
    for shape, dtype in (((1,), torch.float64), ((8,), torch.float64), ((4, 3, 16), torch.float32)):
        mu_p, sigma_p, mu_q, sigma_q = random_gaussians(*shape, dtype=dtype)
        if len(shape) > 1:  # a prior shared by every row, as in a VAE
            mu_q, sigma_q = mu_q[0, 0], sigma_q[0, 0]
        got = ex.gaussian_kl(mu_p, sigma_p, mu_q, sigma_q)
        label = describe(mu_p=mu_p, sigma_p=sigma_p, mu_q=mu_q, sigma_q=sigma_q)
        expect_tensor(got, shape=shape[:-1], dtype=dtype, input=label, hint="sum over the last dim only")
        want = torch_gaussian_kl(*(t.double() for t in (mu_p, sigma_p, mu_q, sigma_q)))
        expect_close(got, want, input=label, hint=HINT_GAUSS)


@checks("gaussian_kl")
def monte_carlo_within_five_standard_errors(ex):
    """E_p[log p(x) - log q(x)] from 200k samples in 3-d lands within 5 standard errors of your closed form"""
    mu_p, sigma_p, mu_q, sigma_q = random_gaussians(3)
    closed = float(ex.gaussian_kl(mu_p, sigma_p, mu_q, sigma_q))
    p, q = Independent(Normal(mu_p, sigma_p), 1), Independent(Normal(mu_q, sigma_q), 1)
    x = p.sample((200_000,))
    log_ratio = p.log_prob(x) - q.log_prob(x)
    estimate, standard_error = float(log_ratio.mean()), float(log_ratio.std() / math.sqrt(len(log_ratio)))
    expect(
        abs(closed - estimate) <= 5 * standard_error,
        "the closed form disagrees with sampling",
        input=describe(mu_p=mu_p, sigma_p=sigma_p, mu_q=mu_q, sigma_q=sigma_q),
        expected=f"{estimate:.5f} +- {standard_error:.5f} (Monte Carlo, 200000 samples)",
        got=f"{closed:.5f} ({abs(closed - estimate) / standard_error:.1f} standard errors away)",
        hint=HINT_GAUSS,
    )


@checks("gaussian_kl")
def gradient_closed_form_and_gradcheck(ex):
    """d KL / d mu_p = (mu_p - mu_q) / sigma_q^2; gradcheck in float64 over all four arguments"""
    mu_p, sigma_p, mu_q, sigma_q = random_gaussians(2, 5)
    mu = mu_p.clone().requires_grad_(True)
    ex.gaussian_kl(mu, sigma_p, mu_q, sigma_q).sum().backward()
    expect(
        mu.grad is not None,
        "no gradient reached mu_p",
        input=describe(mu_p=mu_p),
        expected="a gradient",
        got="None",
        hint="keep the computation in torch ops: no .item(), .detach() or numpy",
    )
    expect_close(
        mu.grad,
        (mu_p - mu_q) / sigma_q**2,
        input=describe(mu_p=mu_p, sigma_q=sigma_q),
        what="d KL / d mu_p",
        hint="(mu_p - mu_q)^2 / (2 sigma_q^2) differentiates to (mu_p - mu_q) / sigma_q^2",
    )
    inputs = tuple(t[0].clone().requires_grad_(True) for t in (mu_p, sigma_p, mu_q, sigma_q))
    expect_gradcheck(
        lambda *args: ex.gaussian_kl(*args),
        inputs,
        input="mu_p, sigma_p, mu_q, sigma_q (5,) float64",
        hint="every argument must stay in the autograd graph",
    )


@checks("gaussian_kl")
def refuses_non_positive_sigma(ex):
    """a zero or negative standard deviation raises ValueError"""
    mu_p, sigma_p, mu_q, sigma_q = random_gaussians(4)
    ex.gaussian_kl(mu_p, sigma_p, mu_q, sigma_q)  # first: it works at all
    for bad_p, bad_q in ((sigma_p * 0, sigma_q), (sigma_p, -sigma_q), (sigma_p, sigma_q * 0)):
        try:
            result = ex.gaussian_kl(mu_p, bad_p, mu_q, bad_q)
        except ValueError:
            continue
        expect(
            False,
            "a non-positive standard deviation was accepted",
            input=f"sigma_p={bad_p.tolist()}, sigma_q={bad_q.tolist()}",
            expected="ValueError",
            got=str(result.tolist()),
            hint="check (sigma > 0).all() for both",
        )
