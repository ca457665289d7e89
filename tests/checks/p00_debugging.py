"""Checks for p00.debugging. References are known by construction: a tiny Hugging Face Llama with one poisoned
weight (the module that must report it is the one poisoned), the same Llama in fp16 with an outlier projection
that overflows (and stays finite in float32), hand-made modules, and the classic NaN gradients of
`where(x > 0, sqrt(x), 0)` and of normalising a zero vector."""

import torch
import torch.nn as nn

from llm_algo.check import Checks, expect, expect_refused, one_thread, reference_only
from llm_algo.references.llama import causal_lm

checks = Checks("p00.debugging")


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)  # nan for x < 0, -inf for 0


class Pair(nn.Module):
    """Returns a tuple, as Hugging Face's rotary embedding does; the second tensor overflows."""

    def forward(self, x):
        return x, torch.exp(x * 100.0)


class Boom(nn.Module):
    def forward(self, x):
        raise ValueError("boom")


def hooks_left(model):
    return [name or "(root)" for name, module in model.named_modules() if module._forward_hooks]


def expect_no_hooks_left(model) -> None:
    expect(
        not hooks_left(model),
        "hooks left on the model",
        input="after the call",
        expected="no forward hooks",
        got=str(hooks_left(model)),
        hint="remove every handle (handle.remove()) in a finally block",
    )


def expect_name(got, expected, label, hint):
    expect(got == expected, "wrong module", input=label, expected=repr(expected), got=repr(got), hint=hint)


HINT_ORDER = (
    "hook every module of named_modules(); the first hook to see a non-finite output is the innermost source "
    "(children return before their parents); torch.isfinite catches nan and inf"
)


@checks("first_nonfinite_module")
def hand_made_modules(ex):
    """a Log after a Linear (nan), a tuple output whose second tensor overflows, and a model that stays finite"""
    x = torch.randn(4, 6)
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), Log(), nn.Linear(6, 2))  # tanh < 0 somewhere: log -> nan
    expect_name(
        ex.first_nonfinite_module(model, x), "2", "Sequential(Linear, Tanh, Log, Linear) on x (4, 6)", HINT_ORDER
    )
    model = nn.Sequential(nn.Linear(6, 6), Pair())
    with torch.no_grad():
        model[0].weight.mul_(10.0)
    expect_name(
        ex.first_nonfinite_module(model, x),
        "1",
        "Sequential(Linear, Pair) where Pair returns (x, exp(100 x)): a tuple, its second tensor inf",
        "check every tensor of a tuple output, not only the first",
    )
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 2))
    expect_name(
        ex.first_nonfinite_module(model, x),
        None,
        "Sequential(Linear, Tanh, Linear), all finite",
        "return None when no output is non-finite",
    )
    expect_no_hooks_left(model)


@checks("first_nonfinite_module")
@one_thread()
def poisoned_llama_weight(ex):
    """a tiny Llama with a NaN in layer 0's post_attention_layernorm weight, then in layer 1's q_proj"""
    ids = torch.randint(0, 128, (2, 8))
    for poisoned in ("model.layers.0.post_attention_layernorm", "model.layers.1.self_attn.q_proj"):
        with reference_only():
            model = causal_lm()
            with torch.no_grad():
                model.get_submodule(poisoned).weight[3] = float("nan")
        expect_name(
            ex.first_nonfinite_module(model, ids), poisoned, f"tiny Llama, NaN in {poisoned}.weight", HINT_ORDER
        )
        expect_no_hooks_left(model)


@checks("first_nonfinite_module")
@one_thread()
def fp16_overflow_in_a_real_layer(ex):
    """layer 1's down_proj with outlier weights: fp16 overflows to inf there, float32 stays finite"""
    with reference_only():
        model = causal_lm()
        with torch.no_grad():
            model.model.layers[1].mlp.down_proj.weight.mul_(1e5)
    ids = torch.randint(0, 128, (2, 8))
    expect_name(
        ex.first_nonfinite_module(model, ids),
        None,
        "tiny Llama in float32, down_proj of layer 1 x 1e5",
        "float32 reaches 3.4e38: nothing overflows here",
    )
    expect_name(
        ex.first_nonfinite_module(model.half(), ids),
        "model.layers.1.mlp.down_proj",
        "the same tiny Llama in float16 (max 65504)",
        "an fp16 overflow is inf, not nan: use torch.isfinite, not torch.isnan",
    )


@checks("first_nonfinite_module")
def hooks_removed_when_forward_raises(ex):
    """a forward that raises: the error comes through and no hook is left behind"""
    model = nn.Sequential(nn.Linear(3, 3), Boom())
    expect_refused(
        lambda: ex.first_nonfinite_module(model, torch.randn(2, 3)),
        "Sequential(Linear, Boom) raising ValueError",
        "let the model's exception propagate",
        errors=(ValueError,),
    )
    expect(
        not hooks_left(model),
        "hooks left after the forward raised",
        input="Sequential(Linear, Boom)",
        expected="no forward hooks",
        got=str(hooks_left(model)),
        hint="remove the handles in a finally block so they go even when the forward raises",
    )


# ------------------------------------------------------------------------------------------ first_nan_backward


def where_sqrt(x):
    return torch.where(x > 0, x.sqrt(), torch.zeros_like(x)).sum()


def normalise_rows(a):
    return (a / a.norm(dim=-1, keepdim=True)).sum()


def expect_node(got, must_contain, label, hint):
    expect(
        isinstance(got, str) and must_contain in got and " " not in got,
        "wrong backward function",
        input=label,
        expected=f"the node's name, containing {must_contain!r} (e.g. '{must_contain}Backward0')",
        got=repr(got)[:200],
        hint=hint,
    )


@checks("first_nan_backward")
def classic_nan_gradients(ex):
    """where(x > 0, sqrt(x), 0) with negative x: SqrtBackward0; a zero row normalised: DivBackward0"""
    x = torch.tensor([1.0, -2.0, 3.0, 0.5], requires_grad=True)
    expect_node(
        ex.first_nan_backward(where_sqrt, x),
        "Sqrt",
        "where(x > 0, x.sqrt(), 0).sum(), x = [1, -2, 3, 0.5]",
        "run forward and backward inside detect_anomaly; read the name from \"Function '...' returned nan\"",
    )
    a = torch.randn(3, 4)
    a[1] = 0.0
    a.requires_grad_()
    expect_node(
        ex.first_nan_backward(normalise_rows, a),
        "Div",
        "a / a.norm(dim=-1, keepdim=True), row 1 of a zero",
        "return only the function's name, e.g. 'DivBackward0', not the whole message",
    )


@checks("first_nan_backward")
def clean_backward_returns_none(ex):
    """finite gradients (a safe sqrt, a softmax cross-entropy): None, and the gradients are computed"""
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    got = ex.first_nan_backward(lambda t: torch.where(t > 0, t.clamp(min=1e-6).sqrt(), 0.0).sum(), x)
    expect(
        got is None,
        "a clean backward was reported",
        input="where(x > 0, x.clamp(min=1e-6).sqrt(), 0)",
        expected="None",
        got=repr(got),
        hint="return None when backward() succeeds",
    )
    expect(
        x.grad is not None and bool(torch.isfinite(x.grad).all()),
        "no gradient was computed",
        input="where(x > 0, x.clamp(min=1e-6).sqrt(), 0)",
        expected="x.grad set and finite",
        got=repr(x.grad),
        hint="call loss_fn(*inputs).backward()",
    )
    logits = torch.randn(4, 7, requires_grad=True)
    targets = torch.randint(0, 7, (4,))
    got = ex.first_nan_backward(lambda z: nn.functional.cross_entropy(z, targets), logits)
    expect(
        got is None,
        "a clean backward was reported",
        input="cross_entropy(logits (4, 7), targets)",
        expected="None",
        got=repr(got),
    )


@checks("first_nan_backward")
def other_errors_propagate_and_mode_is_reset(ex):
    """a shape error in the forward propagates unchanged; anomaly mode is off afterwards"""
    w = torch.randn(3, 5, requires_grad=True)
    expect_refused(
        lambda: ex.first_nan_backward(lambda m: (m @ m).sum(), w),
        "(w @ w) with w (3, 5): a shape error",
        "re-raise any RuntimeError that is not anomaly mode's NaN report",
        errors=(RuntimeError,),
    )
    x = torch.tensor([-1.0, 4.0], requires_grad=True)
    ex.first_nan_backward(where_sqrt, x)
    expect(
        not torch.is_anomaly_enabled(),
        "anomaly mode is still on",
        input="after first_nan_backward",
        expected="torch.is_anomaly_enabled() == False",
        got="True",
        hint="use the context manager `with torch.autograd.detect_anomaly():`, which switches it off on exit",
    )
