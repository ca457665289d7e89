"""Checks for p00.grad_hygiene. References: the same model called in `eval()` mode under `torch.no_grad()`,
`Tensor.is_inference()`, `named_parameters` with an explicit module-boundary rule, a full-batch forward/backward and
one step of the same `torch.optim` optimizer on a deep copy of the model, and
`torch.optim.swa_utils.AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(decay))` for the EMA."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from llm_algo.check import Checks, expect, expect_close, expect_value_error, one_thread

checks = Checks("p00.grad_hygiene")


class LayeredModel(nn.Module):
    """12 layers (so that names layers.1 and layers.10 both exist), dropout, a buffer; ids (B, T) -> (B, T, V)."""

    def __init__(self, vocab_size=11, dim=6, num_layers=12, dropout=0.5):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(nn.ModuleDict({"fc": nn.Linear(dim, dim)}) for _ in range(num_layers))
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.BatchNorm1d(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, ids):
        if ids.dtype != torch.int64:
            raise ValueError("ids must be int64")
        h = self.embed(ids)
        for layer in self.layers:
            h = h + self.dropout(torch.tanh(layer["fc"](h)))
        h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        return self.lm_head(h)


# ------------------------------------------------------------------------------------------ freeze_and_predict


@checks("freeze_and_predict")
@one_thread()
def predict_is_eval_and_inference(ex):
    """predict equals the model in eval mode (dropout off, BatchNorm running stats), output is an inference tensor"""
    model = LayeredModel().double()
    ids = torch.randint(0, 11, (3, 5))
    model.train()
    model(ids)  # give BatchNorm running statistics that differ from the batch's
    for was_training in (True, False):
        model.train(was_training)
        out = ex.predict(model, ids)
        reference = copy.deepcopy(model).eval()
        with torch.no_grad():
            expected = reference(ids)
        label = f"LayeredModel (dropout 0.5, BatchNorm), ids (3, 5), model.training={was_training}"
        expect(
            isinstance(out, torch.Tensor), "predict must return the model's output", input=label, got=type(out).__name__
        )
        expect_close(
            out, expected, input=label, hint="call model.eval() before the forward: dropout off, running stats"
        )
        expect(
            out.is_inference() and not out.requires_grad,
            "the output is not an inference tensor",
            input=label,
            expected="out.is_inference() == True",
            got=f"is_inference={out.is_inference()}, requires_grad={out.requires_grad}",
            hint="run the forward inside `with torch.inference_mode():`",
        )
        expect(
            model.training == was_training,
            "model.training was not restored",
            input=label,
            expected=str(was_training),
            got=str(model.training),
            hint="model.train(was_training) in a finally block",
        )


@checks("freeze_and_predict")
@one_thread()
def predict_restores_mode_on_error(ex):
    """a model that raises: the error comes through and model.training is still True"""
    model = LayeredModel()
    model.train()
    try:
        ex.predict(model, torch.zeros(2, 3))  # float ids: the model raises ValueError
        raised = None
    except ValueError as error:
        raised = error
    expect(
        raised is not None,
        "the model's ValueError did not come through",
        input="float ids",
        hint="do not swallow the model's exceptions",
    )
    expect(
        model.training,
        "after an error the model stayed in eval mode",
        input="float ids, model.training=True",
        expected="True",
        got=str(model.training),
        hint="restore the flag in a finally block, not after the call",
    )


def boundary_reference(model, prefixes):
    """Names whose dotted components begin with all of a prefix's components."""
    wanted = [p.split(".") for p in prefixes]
    return [n for n, _ in model.named_parameters() if any(n.split(".")[: len(w)] == w for w in wanted)]


@checks("freeze_and_predict")
@one_thread()
def freeze_selects_module_boundaries(ex):
    """prefixes ['layers.1', 'lm_head'] select layers.1.* and lm_head.*, never layers.10/11; only those get gradients"""
    model = LayeredModel()
    for prefixes in (["layers.1", "lm_head"], ["embed", "layers.11.fc.bias"], ["layers"]):
        got = ex.freeze_for_finetuning(model, prefixes)
        expected = boundary_reference(model, prefixes)
        label = f"LayeredModel (layers.0 to layers.11), train_prefixes={prefixes}"
        expect(
            list(got) == expected,
            "the trainable names differ",
            input=label,
            expected=str(expected),
            got=str(got),
            hint="a prefix selects name == prefix or name.startswith(prefix + '.'): layers.1 is not layers.10",
        )
        flags = {n: p.requires_grad for n, p in model.named_parameters()}
        wrong = [n for n, flag in flags.items() if flag != (n in expected)]
        expect(
            not wrong,
            "requires_grad is wrong on some parameters",
            input=label,
            expected="True exactly on the trainable",
            got=f"wrong on {wrong[:4]}",
            hint="set requires_grad on every parameter, True as well as False",
        )
        model.zero_grad(set_to_none=True)
        model(torch.randint(0, 11, (2, 4))).sum().backward()
        graded = [n for n, p in model.named_parameters() if p.grad is not None]
        expect(
            graded == expected,
            "the parameters that received gradients differ",
            input=label,
            expected=str(expected),
            got=str(graded),
        )


@checks("freeze_and_predict")
def freeze_refuses_unknown_prefix(ex):
    """a prefix that selects nothing ('layer.1', 'layers.12') is refused before anything is frozen"""
    model = LayeredModel()
    for prefixes in (["layer.1"], ["lm_head", "layers.12"], ["layers.1.f"]):
        expect_value_error(
            lambda p=prefixes: ex.freeze_for_finetuning(model, p),
            f"train_prefixes={prefixes}",
            "a typo would freeze the whole model: refuse prefixes that select no parameter",
        )
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
        expect(
            not frozen,
            "a refused call changed requires_grad",
            input=f"train_prefixes={prefixes}",
            expected="nothing frozen",
            got=f"frozen: {frozen[:3]}",
            hint="validate every prefix before changing anything",
        )


# ------------------------------------------------------------------------------------------ accumulate_and_step


def classifier():
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 4)).double()


def reference_step(model, optimizer_class, hyper, micro_batches, loss_fn):
    model = copy.deepcopy(model)
    optimizer = optimizer_class(model.parameters(), **hyper)
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    optimizer.zero_grad()
    loss_fn(model(inputs), targets).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    return model, grads


@checks("accumulate_and_step")
@one_thread()
def equals_one_full_batch_step(ex):
    """k = 1, 2, 4 micro-batches, SGD with momentum and AdamW: parameters and .grad equal one full-batch step"""
    for k, (optimizer_class, hyper) in [
        (1, (torch.optim.SGD, dict(lr=0.1, momentum=0.9))),
        (2, (torch.optim.SGD, dict(lr=0.1))),
        (4, (torch.optim.AdamW, dict(lr=0.01))),
    ]:
        model = classifier()
        micro = [(torch.randn(3, 5, dtype=torch.float64), torch.randint(0, 4, (3,))) for _ in range(k)]
        ref_model, ref_grads = reference_step(model, optimizer_class, hyper, micro, F.cross_entropy)
        optimizer = optimizer_class(model.parameters(), **hyper)
        ex.accumulate_and_step(model, optimizer, micro, F.cross_entropy)
        label = f"{k} micro-batches of 3 rows, {optimizer_class.__name__}({hyper}), cross-entropy"
        for (name, p), ref_p, ref_g in zip(model.named_parameters(), ref_model.parameters(), ref_grads, strict=True):
            expect(p.grad is not None, f"{name}.grad is None", input=label, hint="backward on every micro-batch")
            expect_close(
                p.grad,
                ref_g,
                input=f"{label}: {name}.grad",
                hint="divide each micro-batch's mean loss by k; zero the gradients once, before the loop",
            )
            expect_close(
                p.detach(),
                ref_p.detach(),
                input=f"{label}: {name} after the step",
                hint="one optimizer.step() after the loop, on the accumulated gradient",
            )


@checks("accumulate_and_step")
@one_thread()
def stale_gradients_and_logged_losses(ex):
    """gradients left over from before do not count; the returned losses are the micro-batches' mean losses as floats"""
    model = classifier()
    micro = [(torch.randn(4, 5, dtype=torch.float64), torch.randint(0, 4, (4,))) for _ in range(3)]
    for p in model.parameters():
        p.grad = torch.randn_like(p)  # a previous step's leftovers
    ref_model, ref_grads = reference_step(model, torch.optim.SGD, dict(lr=0.5), micro, F.cross_entropy)
    with torch.no_grad():
        expected_losses = [float(F.cross_entropy(model(x), y)) for x, y in micro]
    losses = ex.accumulate_and_step(model, torch.optim.SGD(model.parameters(), lr=0.5), micro, F.cross_entropy)
    label = "3 micro-batches of 4 rows, SGD(lr=0.5), .grad pre-filled with noise"
    for (name, p), ref_p in zip(model.named_parameters(), ref_model.parameters(), strict=True):
        expect_close(
            p.detach(),
            ref_p.detach(),
            input=f"{label}: {name}",
            hint="clear the gradients (optimizer.zero_grad()) before the first backward",
        )
    expect(
        isinstance(losses, list) and len(losses) == 3 and all(type(v) is float for v in losses),
        "the losses must be a list of Python floats",
        input=label,
        expected="[float, float, float]",
        got=repr([type(v).__name__ for v in losses]) if isinstance(losses, list) else type(losses).__name__,
        hint="log loss.item(): a tensor keeps its micro-batch's graph alive",
    )
    close = all(abs(a - b) < 1e-9 for a, b in zip(losses, expected_losses, strict=True))
    expect(
        close,
        "the logged losses differ",
        input=label,
        expected=str(expected_losses),
        got=str(losses),
        hint="log each micro-batch's mean loss, before dividing by k",
    )


@checks("accumulate_and_step")
@one_thread()
def frozen_parameters_untouched(ex):
    """a frozen first layer keeps its values and its .grad stays None; AdamW creates no state for it"""
    model = classifier()
    model[0].requires_grad_(False)
    before = model[0].weight.detach().clone()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    micro = [(torch.randn(2, 5, dtype=torch.float64), torch.randint(0, 4, (2,))) for _ in range(2)]
    ex.accumulate_and_step(model, optimizer, micro, F.cross_entropy)
    label = "first Linear frozen (requires_grad=False), AdamW on the trainable ones"
    expect(
        model[0].weight.grad is None and torch.equal(model[0].weight, before),
        "the frozen layer changed",
        input=label,
        hint="gradients only flow into parameters that require them",
    )
    expect(model[2].weight.grad is not None, "the trainable layer got no gradient", input=label)


@checks("accumulate_and_step")
def bad_micro_batches_refused(ex):
    """no micro-batch, or micro-batches of 3 and 2 rows: ValueError"""
    model = classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x3, x2 = torch.randn(3, 5, dtype=torch.float64), torch.randn(2, 5, dtype=torch.float64)
    for micro, label in [
        ([], "micro_batches=[]"),
        ([(x3, torch.zeros(3, dtype=torch.int64)), (x2, torch.zeros(2, dtype=torch.int64))], "sizes 3 and 2"),
    ]:
        expect_value_error(
            lambda m=micro: ex.accumulate_and_step(model, optimizer, m, F.cross_entropy),
            label,
            "equal sizes only: unequal ones need token weighting (p02.grad_accum_clip)",
        )


# ------------------------------------------------------------------------------------------ ema_update


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.out = nn.Linear(3, 2)
        self.register_buffer("step_count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("running_scale", torch.ones(3))

    def forward(self, x):
        return self.out(torch.tanh(self.fc(x)) * self.running_scale)


def perturb(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        model.step_count += 1
        model.running_scale.mul_(torch.rand(3) + 0.5)


@checks("ema_update")
@one_thread()
def matches_averaged_model(ex):
    """20 updates with decay 0.9 (and 0.0, 1.0) equal AveragedModel(get_ema_multi_avg_fn); buffers copied"""
    for decay in (0.9, 0.0, 1.0, 0.37):
        model = Net().double()
        ema = copy.deepcopy(model)
        averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))
        averaged.update_parameters(model)  # the first call copies
        for _ in range(20 if decay == 0.9 else 3):
            perturb(model)
            ex.ema_update(ema, model, decay)
            averaged.update_parameters(model)
        label = f"Net (2 Linear, 2 buffers) float64, decay={decay}, {20 if decay == 0.9 else 3} updates"
        for (name, got), want in zip(ema.named_parameters(), averaged.module.parameters(), strict=True):
            expect_close(
                got.detach(),
                want.detach(),
                input=f"{label}: {name}",
                hint="ema = decay * ema + (1 - decay) * param (lerp_ with weight 1 - decay)",
            )
        for name, buffer in model.named_buffers():
            got = dict(ema.named_buffers())[name]
            expect(
                torch.equal(got, buffer),
                f"buffer {name} was not copied",
                input=label,
                expected=str(buffer.tolist()),
                got=str(got.tolist()),
                hint="copy_ every buffer from model into ema_model",
            )


@checks("ema_update")
def in_place_and_outside_autograd(ex):
    """EMA parameters that require grad: updated in place (same tensors), still leaves, no graph recorded"""
    model, ema = Net(), Net()
    tensors = {name: p for name, p in ema.named_parameters()}
    pointers = {name: p.data_ptr() for name, p in ema.named_parameters()}
    perturb(model)
    ex.ema_update(ema, model, 0.5)
    label = "Net float32, EMA parameters with requires_grad=True, decay=0.5"
    for name, p in ema.named_parameters():
        expect(
            p is tensors[name] and p.data_ptr() == pointers[name],
            f"{name} was replaced, not updated in place",
            input=label,
            hint="update the existing tensors (lerp_, mul_/add_, copy_) instead of assigning new ones",
        )
        expect(
            p.is_leaf and p.grad_fn is None and p.requires_grad,
            f"{name} is no longer a trainable leaf",
            input=label,
            got=f"is_leaf={p.is_leaf}, grad_fn={p.grad_fn}",
            hint="do the update under torch.no_grad()",
        )


@checks("ema_update")
def bad_arguments_refused(ex):
    """decay 1.5 or -0.1, or models with different parameter names: ValueError"""
    model, ema = Net(), Net()
    for decay in (1.5, -0.1):
        expect_value_error(lambda d=decay: ex.ema_update(ema, model, d), f"decay={decay}", "decay must lie in [0, 1]")
    other = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    expect_value_error(
        lambda: ex.ema_update(other, model, 0.9),
        "ema_model nn.Sequential (names 0.weight, ...), model Net",
        "compare named_parameters() keys instead of zipping the lists by position",
    )
