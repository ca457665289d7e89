"""Checks for p00.optim_and_loss. References: `nn.Linear` and `nn.Embedding` modules (weights copied in),
`F.linear`/`F.embedding` as low-precision baselines, `torch.softmax`, `F.silu`, `F.cross_entropy` (float64 oracles,
the builtins in the tested dtype as baselines), `torch.autograd.gradcheck`, and `torch.optim.SGD` step for step
(float64, float32 against float64, resuming from its state_dict)."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor, expect_value_error
from llm_algo.check.restrictions import CROSS_ENTROPY, LOGSUMEXP, SOFTMAX
from llm_algo.references.optim import expect_closure_losses, optimizer_steps

checks = Checks("p00.optim_and_loss")
checks.restrict(
    "linear_and_embedding",
    forbid=(F.linear, nn.Linear, F.embedding, nn.Embedding, torch.embedding, torch.addmm, torch.Tensor.addmm),
    instead="write x @ weight.T + bias and weight[ids] yourself (nn.Linear and nn.Embedding are the reference)",
)
checks.restrict(
    "softmax_and_silu",
    forbid=[*SOFTMAX, *LOGSUMEXP, F.silu, nn.SiLU, torch._C._nn.silu],
    instead="write exp(x - max) / sum and x * sigmoid(x) yourself (torch.softmax and F.silu are the reference)",
)
checks.restrict(
    "cross_entropy",
    forbid=[*CROSS_ENTROPY, *SOFTMAX, *LOGSUMEXP],
    instead="write the stable log-sum-exp and the masked mean yourself (F.cross_entropy is the reference)",
)
checks.restrict(
    "sgd_optimizer",
    forbid=("torch.optim.sgd",),
    instead="write the update with tensor ops in your Optimizer subclass (torch.optim.SGD is the reference)",
)

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


# ------------------------------------------------------------------------------------------ linear and embedding


@checks("linear_and_embedding")
def linear_matches_nn_linear(ex):
    """linear(x, W, b) equals nn.Linear(d_in, d_out) with the same weights, for 2-D to 4-D x and four dtypes"""
    for shape, d_out, bias in [((3, 5), 7, True), ((2, 4, 6), 6, True), ((1, 1, 3, 9), 2, False), ((4, 33), 17, True)]:
        layer = nn.Linear(shape[-1], d_out, bias=bias).double()
        x64 = torch.randn(shape, dtype=torch.float64)
        with torch.no_grad():
            oracle = layer(x64)
        for dtype in DTYPES:
            x, w = x64.to(dtype), layer.weight.detach().to(dtype)
            b = None if layer.bias is None else layer.bias.detach().to(dtype)
            got = ex.linear(x, w, b)
            label = describe(x=x, weight=w) + f", bias={'yes' if bias else 'None'}"
            expect_tensor(got, shape=(*shape[:-1], d_out), dtype=dtype, input=label, hint="keep x's dtype")
            expect_close(
                got,
                oracle,
                baseline=F.linear(x, w, b),
                input=label,
                hint="y = x @ weight.T + bias: the weight is (d_out, d_in), as nn.Linear stores it",
            )


@checks("linear_and_embedding")
def embedding_matches_nn_embedding(ex):
    """embedding(ids, W) equals nn.Embedding(V, d) with the same table for 1-D, 2-D and 3-D ids"""
    table = nn.Embedding(50, 12).double()
    for shape in [(7,), (3, 5), (2, 2, 4)]:
        ids = torch.randint(0, 50, shape)
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            w = table.weight.detach().to(dtype)
            got = ex.embedding(ids, w)
            label = describe(ids=ids, weight=w)
            expect_tensor(got, shape=(*shape, 12), dtype=dtype, input=label)
            expect_close(got, table(ids).detach(), baseline=F.embedding(ids, w), input=label, hint="weight[ids]")


@checks("linear_and_embedding")
def gradients_through_both(ex):
    """gradcheck (float64) through linear's x, weight and bias, and through the embedding table with repeated ids"""
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    expect_gradcheck(ex.linear, (x, w, b), input=describe(x=x, weight=w, bias=b), hint="use tensor ops end to end")
    ids = torch.tensor([[1, 4, 1], [0, 1, 3]])  # token 1 appears three times: its row gets the sum
    table = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    expect_gradcheck(
        lambda t: ex.embedding(ids, t),
        (table,),
        input=describe(ids=ids, weight=table) + ", token 1 three times",
        hint="index the table (weight[ids]); do not detach or copy rows through Python",
    )


@checks("linear_and_embedding")
def square_weight_is_not_transposed(ex):
    """a square (d, d) weight: x @ W would run without error but give x @ W instead of x @ W.T"""
    w = torch.randn(6, 6, dtype=torch.float64)
    x = torch.randn(3, 6, dtype=torch.float64)
    expect_close(
        ex.linear(x, w),
        x @ w.T,
        input=describe(x=x, weight=w) + " (square: a transposed weight raises no error)",
        hint="nn.Linear's weight is (d_out, d_in): multiply by its transpose",
    )


@checks("linear_and_embedding")
def bad_shapes_and_ids_refused(ex):
    """a (d_in, d_out) weight, a bias of the wrong size, ids out of range or float ids: ValueError"""
    x = torch.randn(2, 4)
    cases = [
        (lambda: ex.linear(x, torch.randn(4, 3)), "x (2, 4), weight (4, 3) stored as (d_in, d_out)"),
        (lambda: ex.linear(x, torch.randn(3, 4), torch.randn(4)), "x (2, 4), weight (3, 4), bias (4,)"),
        (lambda: ex.embedding(torch.tensor([0, 8]), torch.randn(8, 2)), "ids [0, 8] for V = 8"),
        (lambda: ex.embedding(torch.tensor([-1, 2]), torch.randn(8, 2)), "ids [-1, 2]"),
        (lambda: ex.embedding(torch.tensor([0.0, 1.0]), torch.randn(8, 2)), "float ids"),
    ]
    for call, label in cases:
        expect_value_error(call, label, "check shapes and ids before computing, and say what was expected")


# ------------------------------------------------------------------------------------------ softmax and silu


@checks("softmax_and_silu")
def softmax_matches_torch_on_every_dim(ex):
    """softmax along dim -1, 0 and 1 of attention-score tensors, fp32/fp64/fp16/bf16, a causal mask"""
    for shape, dim in [((2, 3, 5, 5), -1), ((4, 7), 0), ((3, 6, 2), 1), ((1, 1), -1)]:
        for dtype in DTYPES:
            x = (3 * torch.randn(shape, dtype=torch.float64)).to(dtype)
            if len(shape) == 4:
                x = x.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
            got = ex.softmax(x, dim=dim)
            label = describe(x=x) + f", dim={dim}"
            expect_tensor(got, shape=x.shape, dtype=dtype, input=label, hint="return x's dtype")
            expect_close(
                got,
                torch.softmax(x.double(), dim=dim),
                baseline=torch.softmax(x, dim=dim),
                input=label,
                hint="max and sum along `dim` only, keepdim=True; compute in float32 for fp16/bf16",
            )


@checks("softmax_and_silu")
def softmax_large_and_far_apart_rows(ex):
    """scores of 1e4 stay finite; a row 200 below another keeps its own distribution (the max is per row)"""
    x = torch.randn(3, 8) * 1e4
    x[1] = torch.randn(8) - 200.0  # a row far below the others
    got = ex.softmax(x, dim=-1)
    label = "x (3, 8) float32: rows ~ 1e4 and one row ~ -200"
    expect(
        bool(torch.isfinite(got).all()),
        "the output has nan or inf",
        input=label,
        expected="finite",
        got=str(got[1].tolist()),
        hint="subtract the max of each row (amax(dim, keepdim=True)), not of the whole tensor",
    )
    expect_close(got, torch.softmax(x.double(), -1), baseline=torch.softmax(x, -1), input=label)


@checks("softmax_and_silu")
def silu_matches_f_silu(ex):
    """silu equals F.silu over [-30, 30] in fp32/fp64/fp16/bf16, including large negative inputs"""
    base = torch.cat([torch.linspace(-30, 30, 241, dtype=torch.float64), 4 * torch.randn(100, dtype=torch.float64)])
    for dtype in DTYPES:
        x = base.to(dtype)
        got = ex.silu(x)
        label = describe(x=x) + ", values in [-30, 30]"
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label, hint="return x's dtype")
        expect_close(got, F.silu(x.double()), baseline=F.silu(x), input=label, hint="silu(x) = x * sigmoid(x)")


@checks("softmax_and_silu")
def gradcheck_both(ex):
    """gradcheck in float64 through softmax (dim 0 and -1) and silu"""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    for dim in (-1, 0):
        expect_gradcheck(lambda t, d=dim: ex.softmax(t, dim=d), (x,), input=describe(x=x) + f", softmax dim={dim}")
    expect_gradcheck(ex.silu, (x,), input=describe(x=x) + ", silu", hint="no .item(), .detach() or in-place writes")


# ------------------------------------------------------------------------------------------ cross_entropy

HINT_CE = "mean over kept rows of logsumexp(z) - z[target]; divide by the number of kept rows, not N"


def ce_case(N, V, dtype, ignored=0, scale=2.0):
    logits = (scale * torch.randn(N, V, dtype=torch.float64)).to(dtype)
    targets = torch.randint(0, V, (N,))
    if ignored:
        targets[torch.randperm(N)[:ignored]] = -100
    return logits, targets


@checks("cross_entropy")
def hand_checkable(ex):
    """uniform logits over V = 4: loss log 4 whatever the targets; an ignored row changes nothing"""
    logits = torch.zeros(3, 4, dtype=torch.float64)
    targets = torch.tensor([0, -100, 3])
    got = ex.cross_entropy(logits, targets)
    expect_close(
        got,
        torch.tensor(4.0, dtype=torch.float64).log(),
        input="logits zeros (3, 4), targets [0, -100, 3]",
        hint="the loss of a uniform guess is log V; the ignored row must not count in the mean",
    )


@checks("cross_entropy")
def matches_f_cross_entropy(ex):
    """random batches with padding (ignore_index -100 and a custom one), fp32/fp64/fp16/bf16: equal F.cross_entropy"""
    for N, V, ignored, dtype in [
        (1, 5, 0, torch.float32),
        (16, 37, 5, torch.float32),
        (9, 11, 4, torch.float64),
        (32, 100, 10, torch.float16),
        (20, 64, 3, torch.bfloat16),
    ]:
        logits, targets = ce_case(N, V, dtype, ignored)
        label = describe(logits=logits) + f", {ignored} of {N} targets ignored"
        got = ex.cross_entropy(logits, targets)
        expect_tensor(got, shape=(), input=label, hint="return a 0-d tensor")
        expect_close(
            got,
            F.cross_entropy(logits.double(), targets),
            baseline=F.cross_entropy(logits.float(), targets),
            input=label,
            dtype=torch.float32 if dtype != torch.float64 else torch.float64,
            hint=HINT_CE,
        )
    logits, targets = ce_case(10, 7, torch.float64)
    targets[:4] = 3  # ignore_index=3: every target 3 is padding
    expect_close(
        ex.cross_entropy(logits, targets, ignore_index=3),
        F.cross_entropy(logits, targets, ignore_index=3),
        input=describe(logits=logits) + ", ignore_index=3",
        hint="use the ignore_index argument, not the constant -100",
    )


@checks("cross_entropy")
def large_logits_gradients_and_all_ignored(ex):
    """logits of 1e4 stay finite; gradients match autograd of F.cross_entropy; all targets ignored gives nan"""
    logits, targets = ce_case(6, 9, torch.float32, ignored=2, scale=1e4)
    got = ex.cross_entropy(logits, targets)
    label = describe(logits=logits) + ", |logits| ~ 1e4"
    expect(
        bool(torch.isfinite(got)),
        "the loss is not finite",
        input=label,
        expected="finite",
        got=str(got),
        hint="log-sum-exp = max + log(sum(exp(z - max)))",
    )
    expect_close(got, F.cross_entropy(logits.double(), targets), input=label, hint=HINT_CE)
    logits, targets = ce_case(7, 5, torch.float64, ignored=3)
    leaf = logits.clone().requires_grad_()
    ex.cross_entropy(leaf, targets).backward()
    oracle = logits.clone().requires_grad_()
    F.cross_entropy(oracle, targets).backward()
    expect_close(
        leaf.grad,
        oracle.grad,
        input=describe(logits=logits) + ", backward",
        what="logits.grad",
        hint="ignored rows must get zero gradient; the mean divides by the kept rows",
    )
    all_ignored = ex.cross_entropy(torch.randn(3, 4), torch.full((3,), -100))
    expect(
        isinstance(all_ignored, torch.Tensor) and bool(torch.isnan(all_ignored)),
        "with every target ignored the loss must be nan (0/0), as F.cross_entropy gives",
        input="logits (3, 4), targets all -100",
        expected="nan",
        got=str(all_ignored),
        hint="sum of kept losses / number of kept rows, without a guard that returns 0",
    )


@checks("cross_entropy")
def bad_targets_refused(ex):
    """a target = V, a negative target that is not ignore_index, or mismatched shapes: ValueError"""
    logits = torch.randn(4, 6)
    for targets, label in [
        (torch.tensor([0, 6, 1, 2]), "a target = V = 6"),
        (torch.tensor([0, -1, 1, 2]), "a target -1 (ignore_index is -100)"),
        (torch.tensor([0, 1, 2]), "targets (3,) for N = 4"),
    ]:
        expect_value_error(
            lambda t=targets: ex.cross_entropy(logits, t),
            f"logits (4, 6), {label}",
            "targets must be (N,) and in [0, V) unless equal to ignore_index",
        )


# ------------------------------------------------------------------------------------------ SGD

SETTINGS = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.02, momentum=0.8, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.5, nesterov=True, weight_decay=0.1),
    dict(lr=0.1, weight_decay=0.2),
    dict(lr=0.01, momentum=0.9, weight_decay=1.0),  # a strong decay: 1% of the weights per step
]


class PartlyUsed(nn.Module):
    """A tiny MLP with one parameter the forward never uses (its .grad stays None)."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(5, 8)
        self.down = nn.Linear(8, 3)
        self.unused = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


def batches(n, dtype):
    return [(torch.randn(6, 5, dtype=dtype), torch.randn(6, 3, dtype=dtype)) for _ in range(n)]


def train(model, optimizer, data, closure=False):
    """The loss of every step (llm_algo.references.optim: with `closure`, what step(closure) returns)."""
    return optimizer_steps(optimizer, [lambda x=x, y=y: F.mse_loss(model(x), y) for x, y in data], closure=closure)


def compare_models(got, want, label, baseline=None, hint=""):
    base = dict(baseline.named_parameters()) if baseline is not None else {}
    for (name, p), q in zip(got.named_parameters(), want.parameters(), strict=True):
        expect_close(
            p.detach(),
            q.detach().double(),
            baseline=base[name].detach() if base else None,
            input=label,
            what=name,
            hint=hint or "g += wd*p; buf = g on the first step, then mu*buf + (1-dampening)*g; g = buf or g + mu*buf",
        )


def describe_hp(hp):
    return ", ".join(f"{k}={v}" for k, v in hp.items())


@checks("sgd_optimizer")
def first_step_closed_form(ex):
    """step 1 with momentum 0.9 and dampening 0.5: p - lr*g (no dampening on the first step); Nesterov: p - lr*1.9g"""
    for nesterov, dampening, factor in ((False, 0.5, 1.0), (True, 0.0, 1.9)):
        p = nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
        g = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
        optimizer = ex.SGD([p], lr=0.1, momentum=0.9, dampening=dampening, nesterov=nesterov)
        p.grad = g.clone()
        optimizer.step()
        expect_close(
            p.detach(),
            torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) - 0.1 * factor * g,
            input=f"p=[1, -2, 0.5], g=[0.3, -1, 2], lr=0.1, momentum=0.9, dampening={dampening}, nesterov={nesterov}",
            hint="the first step copies g into the buffer (no dampening); Nesterov uses g + momentum * buf",
        )


@checks("sgd_optimizer")
def matches_torch_sgd_step_for_step(ex):
    """30 steps of an MLP in float64 for seven hyper-parameter settings, every other one stepped with a closure:
    equal to torch.optim.SGD, and step(closure) returns the closure's loss"""
    for index, hp in enumerate(SETTINGS):
        model = PartlyUsed().double()
        twin = copy.deepcopy(model)
        data = batches(30, torch.float64)
        closure = index % 2 == 1  # every other setting steps yours with a closure: step(closure) returns its loss
        got_losses = train(model, ex.SGD(model.parameters(), **hp), data, closure=closure)
        want_losses = train(twin, torch.optim.SGD(twin.parameters(), **hp), data)
        label = f"PartlyUsed MLP float64, 30 steps, {describe_hp(hp)}" + (
            ", optimizer.step(closure)" if closure else ""
        )
        if closure:
            expect_closure_losses(got_losses, want_losses, input=label)
        compare_models(model, twin, label)


@checks("sgd_optimizer")
def float32_against_float64(ex):
    """float32 training stays as close to float64 torch.optim.SGD as torch's own float32 run"""
    hp = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    model = PartlyUsed()
    oracle, baseline = copy.deepcopy(model).double(), copy.deepcopy(model)
    data = batches(20, torch.float32)
    train(model, ex.SGD(model.parameters(), **hp), data)
    train(oracle, torch.optim.SGD(oracle.parameters(), **hp), [(x.double(), y.double()) for x, y in data])
    train(baseline, torch.optim.SGD(baseline.parameters(), **hp), data)
    compare_models(model, oracle, f"PartlyUsed MLP float32, 20 steps, {describe_hp(hp)}", baseline=baseline)


@checks("sgd_optimizer")
def groups_state_and_resume(ex):
    """per-group lr/momentum, no state without grad or momentum, and resuming from a torch.optim.SGD state_dict"""
    model = PartlyUsed().double()
    twin = copy.deepcopy(model)
    groups = lambda m: [  # noqa: E731
        {"params": m.up.parameters(), "lr": 0.1, "momentum": 0.9},
        {"params": m.down.parameters(), "lr": 0.02, "momentum": 0.0, "weight_decay": 0.1},
        {"params": [m.unused]},
    ]
    mine, theirs = ex.SGD(groups(model), lr=0.05), torch.optim.SGD(groups(twin), lr=0.05)
    data = batches(24, torch.float64)
    train(model, mine, data[:12])
    train(twin, theirs, data[:12])
    label = "three param groups (lr 0.1 momentum 0.9 / lr 0.02 no momentum, wd 0.1 / a parameter without grad)"
    compare_models(model, twin, label, hint="read lr, momentum, dampening, weight_decay from each group")
    with_state = sorted(name for name, p in model.named_parameters() if mine.state.get(p))
    expect(
        with_state == ["up.bias", "up.weight"],
        "optimizer state exists for the wrong parameters",
        input=label,
        expected="['up.bias', 'up.weight'] (momentum_buffer only where momentum != 0 and a grad existed)",
        got=str(with_state),
        hint='state[p]["momentum_buffer"] only when momentum != 0; skip p.grad is None entirely',
    )
    resumed = copy.deepcopy(twin)
    mine_resumed = ex.SGD(groups(resumed), lr=0.05)
    mine_resumed.load_state_dict(copy.deepcopy(theirs.state_dict()))
    train(twin, theirs, data[12:])
    train(resumed, mine_resumed, data[12:])
    compare_models(
        resumed,
        twin,
        label + ": 12 steps of torch.optim.SGD, its state_dict loaded into yours, 12 more",
        hint='keep the buffer in self.state[p]["momentum_buffer"], as torch.optim.SGD does',
    )


@checks("sgd_optimizer")
def gradients_left_alone_with_zero_grad_in_place(ex):
    """zero_grad(set_to_none=False), as gradient accumulation loops do: step() leaves every p.grad as it found it"""
    for hp in (dict(lr=0.05, momentum=0.9), dict(lr=0.02, momentum=0.8, dampening=0.3, weight_decay=0.1)):
        model = PartlyUsed().double()
        twin = copy.deepcopy(model)
        mine, theirs = ex.SGD(model.parameters(), **hp), torch.optim.SGD(twin.parameters(), **hp)
        label = f"PartlyUsed MLP float64, {describe_hp(hp)}, zero_grad(set_to_none=False) before each backward"
        for step, (x, y) in enumerate(batches(6, torch.float64)):
            for m, optimizer in ((model, mine), (twin, theirs)):
                optimizer.zero_grad(set_to_none=False)
                F.mse_loss(m(x), y).backward()
            grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
            mine.step()
            theirs.step()
            for name, p in model.named_parameters():
                if name not in grads:
                    continue
                changed = (p.grad - grads[name]).abs().max().item()
                expect(
                    changed == 0,
                    f"step() changed {name}.grad",
                    input=f"{label}, step {step + 1}",
                    expected=f"{name}.grad unchanged by step()",
                    got=f"changed by up to {changed:.3g}",
                    hint="never write into p.grad: add the weight decay out of place (g = g.add(p, alpha=wd)) and "
                    "start the momentum buffer as a copy (g.clone()), not as p.grad itself",
                )
        compare_models(model, twin, label + ", 6 steps")


@checks("sgd_optimizer")
def bad_hyper_parameters_refused(ex):
    """negative lr, momentum or weight decay, Nesterov without momentum or with dampening: ValueError; lr=0 is fine"""
    p = [nn.Parameter(torch.randn(3))]
    for hp in [
        dict(lr=-0.1),
        dict(lr=0.1, momentum=-0.5),
        dict(lr=0.1, weight_decay=-1e-3),
        dict(lr=0.1, nesterov=True),
        dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
    ]:
        expect_value_error(
            lambda h=hp: ex.SGD(p, **h),
            f"SGD(params, {describe_hp(hp)})",
            "validate in __init__ like torch.optim.SGD: Nesterov needs momentum > 0 and dampening 0",
        )
    try:
        ex.SGD(p, lr=0.0, momentum=0.0)
    except ValueError as exc:
        expect(
            False,
            "lr=0 was refused",
            input="SGD(params, lr=0.0)",
            expected="accepted (a warm-up schedule starts at 0)",
            got=str(exc)[:120],
            hint="refuse lr < 0, not lr <= 0",
        )
