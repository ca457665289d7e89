"""Checks for p02.adamw. References: `torch.optim.AdamW` (float64 step for step, float32 against it with the
float32 run of PyTorch as the baseline, `amsgrad=True`, its `state_dict` for layout and resuming), closed forms for
the first step (bias correction makes it lr * g / (|g| + eps)) and for pure decay ((1 - lr * wd)^t)."""

import copy

import torch
import torch.nn as nn

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor
from llm_algo.check.restrictions import ADAM
from llm_algo.references.optim import expect_closure_losses, optimizer_steps

checks = Checks("p02.adamw")
checks.restrict(
    "adamw_step",
    "adamw_optimizer",
    forbid=ADAM,
    instead="write the update with tensor ops and subclass torch.optim.Optimizer (torch.optim.AdamW is the reference)",
)
checks.in_place("adamw_step", "param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")  # `grad` must come back unchanged

HP = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
HINT_UPDATE = "param *= 1 - lr*wd first; then param -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)"


def hp_label(hp) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in hp.items())


def torch_adamw(params, hp, amsgrad=False, **group_overrides):
    return torch.optim.AdamW(
        params,
        lr=hp["lr"],
        betas=(hp["beta1"], hp["beta2"]),
        eps=hp["eps"],
        weight_decay=hp["weight_decay"],
        amsgrad=amsgrad,
    )


def reference_run(init, grads, hp, amsgrad=False):
    """torch.optim.AdamW on one tensor fed the given gradients: (param, its state)."""
    p = nn.Parameter(init.clone())
    optimizer = torch_adamw([p], hp, amsgrad)
    for g in grads:
        p.grad = g.clone()
        optimizer.step()
    return p.detach(), optimizer.state[p]


def learner_run(ex, init, grads, hp, amsgrad=False):
    """The learner's adamw_step over the same gradients: (param, exp_avg, exp_avg_sq, max_exp_avg_sq)."""
    param, exp_avg, exp_avg_sq = init.clone(), torch.zeros_like(init), torch.zeros_like(init)
    max_exp_avg_sq = torch.zeros_like(init) if amsgrad else None
    for step, g in enumerate(grads, start=1):
        ex.adamw_step(param, g, exp_avg, exp_avg_sq, step, **hp, max_exp_avg_sq=max_exp_avg_sq)
    return param, exp_avg, exp_avg_sq, max_exp_avg_sq


def noisy_gradients(shape, steps, dtype, scale=1.0):
    """A drifting signal plus noise, so the moments do something interesting."""
    signal = torch.randn(shape, dtype=torch.float64)
    return [((signal + torch.randn(shape, dtype=torch.float64)) * scale).to(dtype) for _ in range(steps)]


# ------------------------------------------------------------------------------------------ adamw_step


@checks("adamw_step")
def first_step_closed_form(ex):
    """step 1: bias correction gives param * (1 - lr*wd) - lr * g / (|g| + eps)"""
    param = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    grad = torch.tensor([0.3, -1e-3, 2.0, -40.0], dtype=torch.float64)
    hp = dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.5)
    got, *_ = learner_run(ex, param, [grad], hp)
    expected = param * (1 - 0.1 * 0.5) - 0.1 * grad / (grad.abs() + 1e-8)
    expect_close(
        got,
        expected,
        input=f"param={param.tolist()}, grad={grad.tolist()}, {hp_label(hp)}",
        what="param after step 1",
        hint="divide m by 1 - beta1**step and v by 1 - beta2**step: then step 1 moves every entry by lr * sign(g)",
    )


@checks("adamw_step")
def zero_gradients_pure_decay(ex):
    """ten steps with zero gradients: the parameter shrinks by exactly (1 - lr * wd)^10, the moments stay 0"""
    param = torch.randn(3, 4, dtype=torch.float64)
    hp = dict(lr=0.05, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.2)
    got, exp_avg, exp_avg_sq, _ = learner_run(ex, param, [torch.zeros_like(param)] * 10, hp)
    label = describe(param=param) + f", grad = 0 for 10 steps, {hp_label(hp)}"
    expect_close(
        got,
        param * (1 - 0.05 * 0.2) ** 10,
        input=label,
        what="param after 10 steps",
        hint="decoupled decay is param *= 1 - lr * weight_decay, outside m and v (not wd * param added to grad)",
    )
    expect(
        bool((exp_avg == 0).all() and (exp_avg_sq == 0).all()),
        "the moments changed although every gradient was zero",
        input=label,
        expected="exp_avg and exp_avg_sq all zero",
        got=f"max |exp_avg| = {float(exp_avg.abs().max()):.3g}",
        hint="the weight decay must not enter exp_avg or exp_avg_sq",
    )


@checks("adamw_step")
def matches_torch_adamw_50_steps(ex):
    """50 steps of noisy gradients, several shapes and hyper-parameters: float64 equal to torch.optim.AdamW"""
    settings = [
        ((7,), HP),
        ((3, 5), dict(lr=3e-3, beta1=0.8, beta2=0.999, eps=1e-6, weight_decay=0.0)),
        ((2, 3, 4), dict(lr=1e-1, beta1=0.95, beta2=0.9, eps=1e-8, weight_decay=0.5)),
    ]
    for shape, hp in settings:
        init = torch.randn(shape, dtype=torch.float64)
        grads = noisy_gradients(shape, 50, torch.float64)
        got, exp_avg, exp_avg_sq, _ = learner_run(ex, init, grads, hp)
        want, state = reference_run(init, grads, hp)
        label = describe(param=init) + f", 50 steps, {hp_label(hp)}"
        expect_close(exp_avg, state["exp_avg"], input=label, what="exp_avg", hint="m = beta1 * m + (1 - beta1) * g")
        expect_close(
            exp_avg_sq, state["exp_avg_sq"], input=label, what="exp_avg_sq", hint="v = beta2 * v + (1 - beta2) * g*g"
        )
        expect_close(got, want, input=label, what="param after 50 steps", hint=HINT_UPDATE)


@checks("adamw_step")
def float32_against_float64(ex):
    """a float32 run stays as close to float64 torch.optim.AdamW as torch's own float32 run"""
    init = torch.randn(4, 33)
    grads = noisy_gradients((4, 33), 30, torch.float32)
    got, *_ = learner_run(ex, init, grads, HP)
    oracle, _ = reference_run(init.double(), [g.double() for g in grads], HP)
    baseline, _ = reference_run(init, grads, HP)
    label = describe(param=init) + f", 30 steps, {hp_label(HP)}"
    expect_tensor(got, shape=init.shape, dtype=torch.float32, input=label, what="param")
    expect_close(got, oracle, baseline=baseline, input=label, what="param after 30 steps", hint=HINT_UPDATE)


@checks("adamw_step")
def small_gradients_eps_placement(ex):
    """gradients of ~1e-8, the size of eps: eps is added after sqrt(v) / sqrt(1 - beta2^t), as torch does"""
    init = torch.randn(6, 5, dtype=torch.float64)
    grads = noisy_gradients((6, 5), 20, torch.float64, scale=1e-8)
    hp = dict(HP, beta2=0.999)
    got, *_ = learner_run(ex, init, grads, hp)
    want, _ = reference_run(init, grads, hp)
    expect_close(
        got,
        want,
        input=describe(param=init) + f", |grad| ~ 1e-8, 20 steps, {hp_label(hp)}",
        what="param after 20 steps",
        hint="denominator = sqrt(v) / sqrt(1 - beta2**step) + eps: eps outside the sqrt, after the bias correction",
    )


@checks("adamw_step")
def amsgrad_matches_torch(ex):
    """AMSGrad: large then small gradients; max_exp_avg_sq and the parameter match torch.optim.AdamW(amsgrad=True)"""
    init = torch.randn(9, dtype=torch.float64)
    grads = noisy_gradients((9,), 10, torch.float64, scale=10.0) + noisy_gradients((9,), 20, torch.float64, 0.1)
    got, _, _, max_exp_avg_sq = learner_run(ex, init, grads, HP, amsgrad=True)
    want, state = reference_run(init, grads, HP, amsgrad=True)
    label = describe(param=init) + ", 10 steps of |g| ~ 10 then 20 of |g| ~ 0.1, amsgrad=True"
    expect_close(
        max_exp_avg_sq,
        state["max_exp_avg_sq"],
        input=label,
        what="max_exp_avg_sq",
        hint="update it in place: torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)",
    )
    expect_close(got, want, input=label, what="param", hint="with AMSGrad, divide by sqrt(max_exp_avg_sq), not sqrt(v)")


# ------------------------------------------------------------------------------------------ AdamW optimizer


class PartlyUsed(nn.Module):
    """A body always used, a branch used on even steps only, and a parameter never used."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3))
        self.branch = nn.Linear(3, 3)
        self.unused = nn.Parameter(torch.randn(3))

    def forward(self, x, use_branch=True):
        h = self.body(x)
        return h + self.branch(h) if use_branch else h


def two_groups(model, lr_no_decay=3e-3):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0, "lr": lr_no_decay}]


def make_batches(steps, dtype):
    return [(torch.randn(8, 6, dtype=dtype), torch.randn(8, 3, dtype=dtype)) for _ in range(steps)]


def train(model, optimizer, batches, branch_every=1, closure=False):
    """The losses per step (llm_algo.references.optim: with `closure`, what step(closure) returns); the branch runs
    on every `branch_every`-th step."""
    return optimizer_steps(
        optimizer,
        [
            lambda x=x, y=y, step=step: (model(x, use_branch=step % branch_every == 0) - y).pow(2).mean()
            for step, (x, y) in enumerate(batches)
        ],
        closure=closure,
    )


def make_optimizer(factory, model, amsgrad=False):
    # eps 1e-7, not the default 1e-8: a constructor that ignores its eps argument is caught
    return factory(two_groups(model), lr=1e-2, betas=(0.9, 0.95), eps=1e-7, weight_decay=0.05, amsgrad=amsgrad)


def compare_models(got_model, want_model, *, input, hint, baseline_model=None):
    baseline = dict(baseline_model.named_parameters()) if baseline_model is not None else {}
    for (name, got), (_, want) in zip(got_model.named_parameters(), want_model.named_parameters(), strict=True):
        expect_close(
            got.detach(),
            want.detach(),
            baseline=baseline[name].detach() if name in baseline else None,
            input=input,
            what=name,
            hint=hint,
        )


@checks("adamw_optimizer")
def matches_torch_adamw_on_a_model(ex):
    """50 steps on a small MLP, two param groups (decay 0.1; no decay with its own lr), yours stepped with a closure:
    float64 equal to torch, and step(closure) returns the closure's loss"""
    model = PartlyUsed().double()
    twin = copy.deepcopy(model)
    batches = make_batches(50, torch.float64)
    got_losses = train(model, make_optimizer(ex.AdamW, model), batches, closure=True)
    want_losses = train(twin, make_optimizer(torch.optim.AdamW, twin), batches)
    label = "PartlyUsed MLP float64, 50 steps, groups [wd=0.1] and [wd=0, lr=3e-3], defaults lr=1e-2 wd=0.05 eps=1e-7"
    expect_closure_losses(got_losses, want_losses, input=label + ", optimizer.step(closure)")
    compare_models(
        model,
        twin,
        input=label,
        hint="read lr and weight_decay from each group (group['lr']), not from self.defaults",
    )


@checks("adamw_optimizer")
def skips_parameters_without_gradient(ex):
    """a branch used every other step and a parameter never used: skipped when .grad is None, as torch does"""
    model = PartlyUsed().double()
    twin = copy.deepcopy(model)
    unused_before = model.unused.detach().clone()
    batches = make_batches(20, torch.float64)
    optimizer = make_optimizer(ex.AdamW, model)
    train(model, optimizer, batches, branch_every=2)
    train(twin, make_optimizer(torch.optim.AdamW, twin), batches, branch_every=2)
    label = "PartlyUsed MLP float64, 20 steps, branch used on even steps, `unused` never used"
    expect(
        torch.equal(model.unused.detach(), unused_before) and len(optimizer.state.get(model.unused, {})) == 0,
        "a parameter that never had a gradient was changed (or got state)",
        input=label,
        expected="`unused` unchanged, no state",
        got=f"changed by {float((model.unused.detach() - unused_before).abs().max()):.3g}",
        hint="`if p.grad is None: continue` before anything else, weight decay included",
    )
    compare_models(
        model,
        twin,
        input=label,
        hint="a parameter's step count is its own: it only advances on steps where it had a gradient",
    )


@checks("adamw_optimizer")
def float32_model_against_float64(ex):
    """float32 training stays as close to float64 torch.optim.AdamW as torch's own float32 run"""
    model = PartlyUsed()
    oracle_model, baseline_model = copy.deepcopy(model).double(), copy.deepcopy(model)
    batches = make_batches(30, torch.float32)
    train(model, make_optimizer(ex.AdamW, model), batches)
    train(oracle_model, make_optimizer(torch.optim.AdamW, oracle_model), [(x.double(), y.double()) for x, y in batches])
    train(baseline_model, make_optimizer(torch.optim.AdamW, baseline_model), batches)
    compare_models(
        model,
        oracle_model,
        baseline_model=baseline_model,
        input="PartlyUsed MLP float32, 30 steps",
        hint=HINT_UPDATE,
    )


@checks("adamw_optimizer")
def amsgrad_and_state_layout(ex):
    """amsgrad=True matches torch; the state has torch's keys, shapes and a float32 tensor 'step'"""
    model = PartlyUsed().double()
    twin = copy.deepcopy(model)
    batches = make_batches(12, torch.float64)
    mine = make_optimizer(ex.AdamW, model, amsgrad=True)
    theirs = make_optimizer(torch.optim.AdamW, twin, amsgrad=True)
    train(model, mine, batches)
    train(twin, theirs, batches)
    label = "PartlyUsed MLP float64, 12 steps, amsgrad=True"
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        state, want = mine.state.get(p, {}), theirs.state[q]
        if name == "unused":
            continue
        expect(
            set(state) == set(want),
            f"the state of {name} has different keys from torch.optim.AdamW's",
            input=label,
            expected=str(sorted(want)),
            got=str(sorted(state)),
            hint="keys step, exp_avg, exp_avg_sq, and max_exp_avg_sq only with amsgrad",
        )
        step = state["step"]
        expect(
            isinstance(step, torch.Tensor) and step.dtype == torch.float32 and step.dim() == 0 and float(step) == 12,
            f"state['step'] of {name} is not a float32 scalar tensor equal to 12",
            input=label,
            expected="tensor(12.)",
            got=repr(step),
            hint="state['step'] = torch.tensor(0.0) at creation, then state['step'] += 1 on every step",
        )
        for key in ("exp_avg", "max_exp_avg_sq"):
            expect_tensor(state[key], shape=p.shape, dtype=p.dtype, input=label, what=f"{name} {key}")
            expect_close(state[key], want[key], input=label, what=f"{name} {key}", hint=HINT_UPDATE)
    compare_models(model, twin, input=label, hint="pass the group's amsgrad state (max_exp_avg_sq) to adamw_step")


@checks("adamw_optimizer")
def resumes_from_a_torch_checkpoint(ex):
    """15 steps of torch.optim.AdamW, load its state_dict into yours, 15 more steps: equal to torch continuing"""
    model = PartlyUsed().double()
    batches = make_batches(30, torch.float64)
    theirs = make_optimizer(torch.optim.AdamW, model)
    train(model, theirs, batches[:15])
    twin = copy.deepcopy(model)
    mine = make_optimizer(ex.AdamW, twin)
    mine.load_state_dict(copy.deepcopy(theirs.state_dict()))
    train(model, theirs, batches[15:])
    train(twin, mine, batches[15:])
    compare_models(
        twin,
        model,
        input="PartlyUsed MLP float64: 15 steps of torch.optim.AdamW, its state_dict loaded into yours, 15 more",
        hint="keep torch's state keys (step, exp_avg, exp_avg_sq) and continue from state['step']",
    )


# ------------------------------------------------------------------------------------------ param groups


class TinyLM(nn.Module):
    """Every kind of parameter an LLM has: embedding (tied to the head), norms with and without bias, a linear layer
    with bias, a 0-d gate, and a frozen layer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 8)
        self.gate = nn.Parameter(torch.tensor(0.5))
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)
        self.final_norm = nn.RMSNorm(8)
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.embed.weight  # tied weights


def parameter_names(model, params):
    names = {id(p): name for name, p in model.named_parameters()}
    return [names.get(id(p), "<not a parameter of the model>") for p in params]


@checks("weight_decay_param_groups")
def splits_a_tiny_language_model(ex):
    """TinyLM: embedding and linear weights decay; biases, norm gains and the 0-d gate do not; in model order"""
    model = TinyLM()
    groups = ex.weight_decay_param_groups(model, 0.1)
    expect(
        isinstance(groups, list) and len(groups) == 2 and all(isinstance(g, dict) and "params" in g for g in groups),
        "expected a list of two group dicts",
        input="TinyLM, weight_decay=0.1",
        expected='[{"params": [...], "weight_decay": 0.1}, {"params": [...], "weight_decay": 0.0}]',
        got=repr(groups)[:200],
        hint="return the decay group first, then the no-decay group",
    )
    decay, no_decay = (parameter_names(model, list(g["params"])) for g in groups)
    want_decay = ["embed.weight", "proj.weight"]  # the head's weight is the embedding's: listed once
    want_no_decay = ["gate", "norm.weight", "norm.bias", "proj.bias", "final_norm.weight"]  # a module's own first
    for got, want, which in ((decay, want_decay, "decay"), (no_decay, want_no_decay, "no-decay")):
        expect(
            got == want,
            f"the {which} group holds the wrong parameters",
            input="TinyLM (embedding tied to the head, LayerNorm, Linear, 0-d gate, frozen Linear, RMSNorm)",
            expected=str(want),
            got=str(got),
            hint="decay p.dim() >= 2, not the rest; skip requires_grad=False; keep named_parameters() order",
        )


@checks("weight_decay_param_groups")
def weight_decay_values_and_coverage(ex):
    """the group weight decays are (wd, 0.0); every trainable parameter exactly once, no frozen one"""
    model = TinyLM()
    groups = ex.weight_decay_param_groups(model, 0.25)
    decays = [g.get("weight_decay") for g in groups]
    expect(
        decays == [0.25, 0.0],
        "the groups' weight_decay values are wrong",
        input="TinyLM, weight_decay=0.25",
        expected="[0.25, 0.0]",
        got=str(decays),
        hint='set "weight_decay" in both groups: the no-decay group must say 0.0, or it inherits the default',
    )
    seen = [id(p) for g in groups for p in g["params"]]
    trainable = [id(p) for p in model.parameters() if p.requires_grad]
    expect(
        sorted(seen) == sorted(trainable),
        "not every trainable parameter is in exactly one group",
        input="TinyLM (a frozen Linear, a tied embedding/head)",
        expected=f"{len(trainable)} trainable parameters, each once",
        got=f"{len(seen)} entries, {len(set(seen))} distinct, frozen included: "
        f"{any(i == id(model.frozen.weight) for i in seen)}",
        hint="iterate model.named_parameters() once (it lists tied weights once) and skip requires_grad=False",
    )


@checks("weight_decay_param_groups")
def drives_torch_adamw(ex):
    """torch.optim.AdamW on your groups, zero gradients, lr 0.1, wd 0.5: matrices shrink by 0.95, the rest do not"""
    model = TinyLM()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(ex.weight_decay_param_groups(model, 0.5), lr=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, p in model.named_parameters():
        factor = 0.95 if p.requires_grad and p.dim() >= 2 else 1.0
        expect_close(
            p.detach(),
            before[name] * factor,
            input="TinyLM, torch.optim.AdamW(your groups, lr=0.1), weight_decay=0.5, all gradients zero",
            what=name,
            hint="matrices and embeddings decay by 1 - lr * wd; biases, norm gains and frozen weights stay put",
        )
