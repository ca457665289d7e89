"""Checks for p00.autograd. References: `torch.autograd` through `nn.functional` ops (F.linear, F.relu,
F.cross_entropy) in float64, float32 autograd as the low-precision baseline, `torch.autograd.gradcheck` run through
the learner's hand-written gradients (wrapped in an autograd.Function by the check), closed forms, `torch.softmax`
and its autograd backward, and autograd's version counter for tensors saved with `save_for_backward`."""

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor, expect_value_error
from llm_algo.check.restrictions import AUTOGRAD, CROSS_ENTROPY, LOGSUMEXP, SOFTMAX

checks = Checks("p00.autograd")
checks.restrict(
    "mlp_forward_backward",
    forbid=[*AUTOGRAD, *CROSS_ENTROPY],
    instead="write the loss and every gradient with tensor ops (autograd and F.cross_entropy are the reference)",
)
checks.restrict(
    "softmax_function",
    forbid=[*SOFTMAX, *LOGSUMEXP, *AUTOGRAD, torch._softmax_backward_data],
    instead="write exp / sum and the backward formula yourself (torch.softmax and autograd are the reference)",
)

NAMES = ("x", "w1", "b1", "w2", "b2")


# ------------------------------------------------------------------------------------------ mlp_forward_backward

HINT_BACKWARD = (
    "d_logits = (softmax - one_hot) / N; dW = d_out.T @ input; db = d_out.sum(0); d_input = d_out @ W; "
    "ReLU passes the gradient where pre > 0"
)


def random_mlp(N, d, h, V, dtype=torch.float64, logit_scale=1.0):
    x = torch.randn(N, d, dtype=torch.float64)
    w1 = torch.randn(h, d, dtype=torch.float64) / d**0.5
    b1 = 0.1 * torch.randn(h, dtype=torch.float64)
    w2 = logit_scale * torch.randn(V, h, dtype=torch.float64) / h**0.5
    b2 = 0.1 * torch.randn(V, dtype=torch.float64)
    targets = torch.randint(0, V, (N,))
    return [t.to(dtype) for t in (x, w1, b1, w2, b2)], targets


def autograd_reference(params, targets):
    """Loss and gradients from torch.autograd through F.linear / F.relu / F.cross_entropy."""
    leaves = [p.detach().clone().requires_grad_() for p in params]
    x, w1, b1, w2, b2 = leaves
    loss = F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), targets)
    grads = torch.autograd.grad(loss, leaves)
    return loss.detach(), dict(zip(NAMES, grads, strict=True))


def expect_grads_dict(grads, params, label):
    expect(
        isinstance(grads, dict) and set(grads) == set(NAMES),
        "the gradients are not a dict with keys x, w1, b1, w2, b2",
        input=label,
        expected=str(list(NAMES)),
        got=repr(sorted(grads))[:120] if isinstance(grads, dict) else type(grads).__name__,
        hint='return loss, {"x": ..., "w1": ..., "b1": ..., "w2": ..., "b2": ...}',
    )
    for name, p in zip(NAMES, params, strict=True):
        expect_tensor(
            grads[name],
            shape=p.shape,
            dtype=p.dtype,
            input=label,
            what=f"grads[{name!r}]",
            hint="a gradient has the shape of its parameter: dW = d_out.T @ input, not input.T @ d_out",
        )


def compare_mlp(ex, params, targets, label, baseline_params=None):
    loss, grads = ex.mlp_forward_backward(*params, targets)
    expect_grads_dict(grads, params, label)
    oracle_loss, oracle = autograd_reference([p.double() for p in params], targets)
    baseline_loss, baseline = (None, {}) if baseline_params is None else autograd_reference(baseline_params, targets)
    expect_close(
        loss,
        oracle_loss,
        baseline=baseline_loss,
        input=label,
        what="loss",
        hint="mean over positions of logsumexp(logits) - logits[target], with the row max subtracted first",
    )
    for name in NAMES:
        expect_close(
            grads[name],
            oracle[name],
            baseline=baseline.get(name),
            input=label,
            what=f"grads[{name!r}]",
            hint=HINT_BACKWARD,
        )


@checks("mlp_forward_backward")
def zero_output_layer_closed_form(ex):
    """w2 = 0, b2 = 0: loss = log V, d_b2 = 1/V - (share of each token among the targets), d_w1 = d_x = 0"""
    (x, w1, b1, w2, b2), _ = random_mlp(5, 4, 6, 3)
    w2, b2 = torch.zeros_like(w2), torch.zeros_like(b2)
    targets = torch.tensor([0, 2, 2, 1, 2])
    loss, grads = ex.mlp_forward_backward(x, w1, b1, w2, b2, targets)
    label = "N=5, d=4, h=6, V=3, w2 = 0, b2 = 0, targets=[0, 2, 2, 1, 2]"
    expect_grads_dict(grads, (x, w1, b1, w2, b2), label)
    expect_close(
        loss,
        torch.tensor(3.0, dtype=torch.float64).log(),
        input=label,
        what="loss",
        hint="all logits equal: the loss of a uniform guess is log V",
    )
    expect_close(
        grads["b2"],
        torch.tensor([1 / 3 - 1 / 5, 1 / 3 - 1 / 5, 1 / 3 - 3 / 5], dtype=torch.float64),
        input=label,
        what="grads['b2']",
        hint="d_b2 = sum over rows of (softmax - one_hot) / N: divide by N, sum over the batch axis",
    )
    for name in ("x", "w1", "b1"):
        expect_close(
            grads[name],
            torch.zeros_like(grads[name], dtype=torch.float64),
            input=label,
            what=f"grads[{name!r}]",
            hint="with w2 = 0 nothing flows back into the first layer: d_act = d_logits @ w2",
        )


@checks("mlp_forward_backward")
def matches_autograd_float64(ex):
    """random float64 MLPs (a single position, odd sizes, a 50-token vocabulary) match torch.autograd"""
    for N, d, h, V in [(1, 3, 5, 7), (6, 16, 32, 11), (13, 8, 4, 50)]:
        params, targets = random_mlp(N, d, h, V)
        compare_mlp(ex, params, targets, describe(x=params[0], w1=params[1], w2=params[3]) + f", V={V}")


@checks("mlp_forward_backward")
def gradcheck_through_your_gradients(ex):
    """torch.autograd.gradcheck (finite differences, float64) through your loss and hand-written gradients"""

    class HandWritten(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w1, b1, w2, b2, targets):
            loss, grads = ex.mlp_forward_backward(x, w1, b1, w2, b2, targets)
            ctx.grads = [grads[name] for name in NAMES]
            return loss.clone()

        @staticmethod
        def backward(ctx, grad_loss):
            return (*[grad_loss * g for g in ctx.grads], None)

    params, targets = random_mlp(3, 2, 4, 5)
    inputs = tuple(p.clone().requires_grad_() for p in params)
    expect_gradcheck(
        lambda *p: HandWritten.apply(*p, targets),
        inputs,
        input=describe(x=params[0], w1=params[1], w2=params[3]) + ", your gradients against finite differences",
        hint=HINT_BACKWARD,
    )


@checks("mlp_forward_backward")
def zero_unit_gets_no_gradient(ex):
    """a hidden unit with zero weights and bias (pre-activation exactly 0) gets no gradient, as with PyTorch's ReLU"""
    params, targets = random_mlp(5, 4, 6, 7)
    params[1][2] = 0.0  # unit 2: zero weights and zero bias, so pre[:, 2] == 0 for every token
    params[2][2] = 0.0
    label = describe(x=params[0], w1=params[1]) + ", w1[2] = 0 and b1[2] = 0 (pre-activation of unit 2 exactly 0)"
    compare_mlp(ex, params, targets, label)
    _, grads = ex.mlp_forward_backward(*params, targets)
    expect(
        bool((grads["w1"][2] == 0).all() and grads["b1"][2] == 0),
        "the unit whose pre-activation is exactly 0 received a gradient",
        input=label,
        expected="grads['w1'][2] == 0 and grads['b1'][2] == 0",
        got=f"grads['b1'][2] = {float(grads['b1'][2]):.3g}",
        hint="ReLU's derivative at 0 is taken as 0 (PyTorch's convention): mask with pre > 0, not pre >= 0",
    )


@checks("mlp_forward_backward")
def float32_against_float64(ex):
    """float32 inputs: loss and gradients as close to float64 autograd as float32 autograd is, in float32"""
    params, targets = random_mlp(16, 24, 40, 33, dtype=torch.float32)
    compare_mlp(ex, params, targets, describe(x=params[0], w1=params[1], w2=params[3]), baseline_params=params)


@checks("mlp_forward_backward")
def large_logits_stay_finite(ex):
    """logits of size ~500 in float32: the loss and gradients stay finite and correct (subtract the row max)"""
    params, targets = random_mlp(6, 8, 16, 20, dtype=torch.float32, logit_scale=300.0)
    label = describe(x=params[0], w2=params[3]) + ", w2 scaled so |logits| reach ~500"
    loss, _ = ex.mlp_forward_backward(*params, targets)
    expect(
        bool(torch.isfinite(loss)),
        "the loss is not finite",
        input=label,
        expected="a finite loss",
        got=str(loss.item()) if isinstance(loss, torch.Tensor) else repr(loss),
        hint="exp(z) overflows float32 above 88: compute log-sum-exp as m + log(sum(exp(z - m))), m = row max",
    )
    compare_mlp(ex, params, targets, label, baseline_params=params)


@checks("mlp_forward_backward")
def bad_inputs_refused(ex):
    """targets outside [0, V), of the wrong shape, and a w2 that does not fit are refused with ValueError"""
    (x, w1, b1, w2, b2), targets = random_mlp(4, 3, 5, 6)
    cases = [
        ((x, w1, b1, w2, b2, torch.tensor([0, 1, 6, 2])), "a target = V = 6"),
        ((x, w1, b1, w2, b2, torch.tensor([0, -1, 2, 2])), "a target = -1"),
        ((x, w1, b1, w2, b2, torch.tensor([0, 1, 2])), "targets (3,) for N = 4"),
        ((x, w1, b1, w2[:, :4], b2, targets), "w2 (6, 4) for h = 5"),
        ((x, w1, b1[:4], w2, b2, targets), "b1 (4,) for h = 5"),
    ]
    for args, label in cases:
        expect_value_error(
            lambda a=args: ex.mlp_forward_backward(*a),
            "x (4, 3), w1 (5, 3), w2 (6, 5), " + label,
            "check targets.shape == (N,) and 0 <= targets < V before indexing with them",
        )


# ------------------------------------------------------------------------------------------ softmax_function

HINT_SOFTMAX_BWD = "d_scores = y * (d_y - sum(d_y * y, dim=-1, keepdim=True)), with y the saved output"


def random_scores(shape, dtype, scale=3.0):
    return (scale * torch.randn(shape, dtype=torch.float64)).to(dtype)


@checks("softmax_function")
def hand_checkable_row(ex):
    """scores [0, ln 2, ln 3, -inf]: probabilities [1/6, 2/6, 3/6, 0]"""
    scores = torch.tensor([[0.0, 0.6931471805599453, 1.0986122886681098, float("-inf")]], dtype=torch.float64)
    expect_close(
        ex.softmax(scores),
        torch.tensor([[1 / 6, 2 / 6, 3 / 6, 0.0]], dtype=torch.float64),
        input="scores=[[0, ln 2, ln 3, -inf]] float64",
        hint="exp(s - max) / sum over the last dimension; exp(-inf) = 0 (a masked key)",
    )


@checks("softmax_function")
def forward_matches_torch_softmax(ex):
    """attention scores (B, H, T, T) in fp32/fp16/bf16/fp64, odd lengths, a causal mask: equal to torch.softmax"""
    for shape in [(1, 1, 1, 1), (2, 3, 5, 5), (1, 4, 17, 17), (3, 33)]:
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            scores = random_scores(shape, dtype)
            if len(shape) == 4:
                causal = torch.ones(shape[-2:], dtype=torch.bool).triu(1)
                scores = scores.masked_fill(causal, float("-inf"))
            got = ex.softmax(scores)
            label = describe(scores=scores) + (", causal mask" if len(shape) == 4 else "")
            expect_tensor(got, shape=scores.shape, dtype=dtype, input=label, hint="cast the result back to the input")
            expect_close(
                got,
                torch.softmax(scores.double(), dim=-1),
                baseline=torch.softmax(scores, dim=-1),
                input=label,
                hint="normalise over the last dimension; compute in float32 for fp16/bf16",
            )


@checks("softmax_function")
def large_scores_do_not_overflow(ex):
    """scores of size ~1e4 (float32) stay finite: subtract the row max before exp"""
    scores = random_scores((4, 9), torch.float32, scale=1e4)
    got = ex.softmax(scores)
    expect(
        bool(torch.isfinite(got).all()),
        "the output has nan or inf",
        input=describe(scores=scores) + ", |scores| ~ 1e4",
        expected="finite probabilities",
        got=str(got[0].tolist()),
        hint="exp(1e4) overflows: subtract the row max first (softmax is unchanged by a constant shift)",
    )
    expect_close(got, torch.softmax(scores.double(), dim=-1), baseline=torch.softmax(scores, -1), input="|s| ~ 1e4")


@checks("softmax_function")
def gradcheck_float64(ex):
    """torch.autograd.gradcheck in float64 through your forward and backward"""
    scores = random_scores((2, 3, 5), torch.float64, scale=1.0).requires_grad_()
    expect_gradcheck(ex.softmax, (scores,), input=describe(scores=scores), hint=HINT_SOFTMAX_BWD)


@checks("softmax_function")
def backward_matches_autograd(ex):
    """upstream gradients through masked attention rows, fp32/fp64/fp16/bf16: equal to autograd of torch.softmax"""
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        scores = random_scores((2, 2, 7, 7), dtype).masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), -torch.inf)
        upstream = torch.randn(2, 2, 7, 7, dtype=dtype)
        leaf = scores.clone().requires_grad_()
        ex.softmax(leaf).backward(upstream)
        oracle_leaf = scores.detach().double().clone().requires_grad_()
        torch.softmax(oracle_leaf, -1).backward(upstream.double())
        baseline_leaf = scores.detach().clone().requires_grad_()
        torch.softmax(baseline_leaf, -1).backward(upstream)
        label = describe(scores=scores, upstream=upstream) + ", causal mask"
        expect(
            leaf.grad is not None,
            "no gradient reached the scores",
            input=label,
            expected="scores.grad set by backward",
            got="None",
            hint="forward must return the output of your computation; softmax() calls SoftmaxFunction.apply",
        )
        expect_close(leaf.grad, oracle_leaf.grad, baseline=baseline_leaf.grad, input=label, hint=HINT_SOFTMAX_BWD)
        expect(
            bool((leaf.grad[..., torch.ones(7, 7, dtype=torch.bool).triu(1)] == 0).all()),
            "masked (-inf) scores received a non-zero gradient",
            input=label,
            expected="0 where the score is -inf",
            got="non-zero",
            hint="y is exactly 0 there, so y * (...) is 0: compute the backward from the saved output",
        )


@checks("softmax_function")
def saves_the_output_with_save_for_backward(ex):
    """your Function is in the graph, saves its output with save_for_backward, and autograd catches an in-place edit"""
    scores = random_scores((3, 6), torch.float64).requires_grad_()
    probs = ex.softmax(scores)
    node = probs.grad_fn
    expect(
        node is not None and type(node).__name__ == "SoftmaxFunctionBackward",
        "the output's grad_fn is not your SoftmaxFunction",
        input=describe(scores=scores),
        expected="SoftmaxFunctionBackward",
        got=type(node).__name__,
        hint="softmax must return SoftmaxFunction.apply(scores) (never call forward directly)",
    )
    saved = node.saved_tensors
    expect(
        len(saved) == 1 and saved[0].shape == scores.shape and torch.equal(saved[0], probs.detach()),
        "the backward does not keep exactly the output, saved with ctx.save_for_backward",
        input=describe(scores=scores),
        expected="ctx.saved_tensors == (probs,)",
        got=f"{len(saved)} saved tensor(s)",
        hint="ctx.save_for_backward(probs): the output is all the backward needs (the scores would be extra memory)",
    )
    with torch.no_grad():
        probs.mul_(2.0)  # someone edits the attention weights in place after the forward
    try:
        probs.sum().backward()
    except RuntimeError as exc:
        if isinstance(exc, NotImplementedError):
            raise
        if "modified by an inplace operation" in str(exc):
            return
        raise
    expect(
        False,
        "an in-place edit of the saved output went unnoticed (the gradient is silently wrong)",
        input=describe(scores=scores) + ", then probs.mul_(2) before backward",
        expected="RuntimeError: ... modified by an inplace operation",
        got="backward ran",
        hint="save tensors with ctx.save_for_backward, not as ctx attributes: autograd then checks their version",
    )


# ------------------------------------------------------------------------------------------ per_loss_grad_norms

HINT_NORMS = (
    "torch.autograd.grad(loss, params, retain_graph=<not the last loss>, allow_unused=True); "
    "norm = sqrt(sum over params of (g**2).sum()), None counting as 0"
)


class RoutedMLP(torch.nn.Module):
    """A tiny MoE-like layer: a router (whose logits feed an auxiliary loss), an MLP and an output head."""

    def __init__(self, d=6, experts=3, vocab=7, dtype=torch.float64):
        super().__init__()
        self.router = torch.nn.Linear(d, experts, dtype=dtype)
        self.mlp = torch.nn.Linear(d, d, dtype=dtype)
        self.head = torch.nn.Linear(d, vocab, dtype=dtype)

    def losses(self, x, targets):
        router_logits = self.router(x)  # (N, E): shared by all three losses
        probs = torch.softmax(router_logits, dim=-1)  # (N, E)
        hidden = torch.tanh(self.mlp(x)) * probs.max(dim=-1, keepdim=True).values  # (N, d): the router gates
        lm = F.cross_entropy(self.head(hidden), targets)
        balance = probs.shape[-1] * (probs.mean(0) ** 2).sum()  # a load-balancing-style auxiliary loss
        z_loss = torch.logsumexp(router_logits, dim=-1).pow(2).mean()
        return [lm, 1e-2 * balance, 1e-3 * z_loss]


def reference_norms(model, x, targets):
    """Each loss from a fresh forward pass, its gradient from torch.autograd.grad: no shared graph at all."""
    norms = []
    for k in range(3):
        loss = model.losses(x, targets)[k]
        grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        norms.append(torch.sqrt(sum((g.double() ** 2).sum() for g in grads if g is not None)))
    return norms


@checks("per_loss_grad_norms")
def shared_intermediate_by_hand(ex):
    """h = w * x shared by L1 = sum(h) and L2 = sum(h^2): norms |x| and 2|w * x * x|"""
    w = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([0.5, 4.0, -1.0], dtype=torch.float64)
    h = w * x
    got = ex.per_loss_grad_norms([h.sum(), (h**2).sum()], [w])
    want = [x.norm(), (2 * w.detach() * x * x).norm()]
    expect(
        isinstance(got, list) and len(got) == 2,
        "expected one norm per loss, in a list",
        input="two losses from h = w * x",
        expected="[norm_1, norm_2]",
        got=repr(got)[:120],
    )
    for k in range(2):
        expect_close(got[k], want[k], input=f"w={w.tolist()}, x={x.tolist()}, loss {k + 1}", hint=HINT_NORMS)


@checks("per_loss_grad_norms")
def moe_losses_match_separate_passes(ex):
    """LM loss, balance loss and z-loss of one forward (the head unused by two of them): norms of separate passes"""
    for dtype in (torch.float64, torch.float32):
        model = RoutedMLP(dtype=dtype)
        x = torch.randn(9, 6, dtype=dtype)
        targets = torch.randint(0, 7, (9,))
        got = ex.per_loss_grad_norms(model.losses(x, targets), list(model.parameters()))
        want = reference_norms(model, x, targets)
        label = f"RoutedMLP {dtype}, x (9, 6): [lm, 1e-2 * balance, 1e-3 * z-loss]; the head reaches only lm"
        for k, name in enumerate(("lm", "balance", "z-loss")):
            expect_tensor(got[k], shape=(), dtype=dtype, input=label, what=f"norm of {name}")
            expect_close(got[k], want[k], input=label, what=f"norm of {name}", hint=HINT_NORMS)
    model = RoutedMLP()
    x, targets = torch.randn(4, 6, dtype=torch.float64), torch.randint(0, 7, (4,))
    lm, balance, _ = model.losses(x, targets)
    got = ex.per_loss_grad_norms([balance, lm], [model.head.weight])
    label = "RoutedMLP: losses [balance, lm], params [head.weight] only (the balance loss never reaches the head)"
    expect_tensor(got[0], shape=(), dtype=torch.float64, input=label, what="norm of balance")
    expect_close(got[0], torch.zeros((), dtype=torch.float64), input=label, what="norm of balance", hint=HINT_NORMS)
    want = torch.autograd.grad(model.losses(x, targets)[0], [model.head.weight])[0].norm()
    expect_close(got[1], want, input=label, what="norm of lm", hint=HINT_NORMS)


@checks("per_loss_grad_norms")
def leaves_grad_untouched(ex):
    """the parameters' .grad (None or an accumulated gradient) is exactly as before"""
    model = RoutedMLP()
    x, targets = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 7, (5,))
    sentinel = torch.randn(7, 6, dtype=torch.float64)
    model.head.weight.grad = sentinel.clone()  # a gradient accumulated by the training step
    ex.per_loss_grad_norms(model.losses(x, targets), list(model.parameters()))
    changed = [n for n, p in model.named_parameters() if n != "head.weight" and p.grad is not None]
    expect(
        torch.equal(model.head.weight.grad, sentinel) and not changed,
        "the leaves' .grad changed",
        input="RoutedMLP with head.weight.grad preset, every other .grad None",
        expected="head.weight.grad unchanged, the others still None",
        got=f"head.weight.grad changed: {not torch.equal(model.head.weight.grad, sentinel)}, set: {changed}",
        hint="loss.backward() accumulates into .grad; torch.autograd.grad returns the gradients instead",
    )


@checks("per_loss_grad_norms")
def graph_freed_after_the_last_loss(ex):
    """after the call the shared part of the graph (the router) is freed: a further backward raises"""
    model = RoutedMLP()
    x, targets = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 7, (5,))
    losses = model.losses(x, targets)
    ex.per_loss_grad_norms(losses, list(model.parameters()))
    try:
        losses[0].backward()
    except RuntimeError as exc:
        if isinstance(exc, NotImplementedError):
            raise
        if "second time" in str(exc) or "freed" in str(exc):
            return
        raise
    expect(
        False,
        "the graph is still alive after the last loss (its activations stay in memory)",
        input="RoutedMLP: three losses, per_loss_grad_norms, then losses[0].backward()",
        expected="RuntimeError: Trying to backward through the graph a second time",
        got="backward ran",
        hint="retain_graph=True for every loss but the last; the last call frees the graph",
    )
