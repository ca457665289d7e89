"""Checks for p02.activation_checkpointing. References: the same functions without checkpointing, and
torch.utils.checkpoint.checkpoint(..., use_reentrant=False), in float64 and float32, with dropout (same seed, same
masks); torch.autograd.gradcheck; the tensors autograd saves during the forward pass, recorded with
torch.autograd.graph.saved_tensors_hooks."""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_refused

checks = Checks("p02.activation_checkpointing")
checks.restrict(
    "checkpoint",
    "checkpointed_stack",
    forbid=["torch.utils.checkpoint"],
    instead="write the recomputation with torch.autograd.Function (torch.utils.checkpoint is the reference)",
)


def saved_shapes(fn):
    """fn() under saved_tensors_hooks: (result, shapes of the floating-point tensors autograd saved, their bytes).
    Integer tensors (an RNG state a learner chose to save with save_for_backward) are not activations."""
    shapes, total = [], 0

    def pack(t):
        nonlocal total
        if t.is_floating_point():
            shapes.append(tuple(t.shape))
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    return result, shapes, total


def grads_of(params):
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


def compare_grads(got, want, names, *, input, hint, baseline=None):
    for i, (g, w, name) in enumerate(zip(got, want, names, strict=True)):
        expect(
            (g is None) == (w is None),
            f"{name}: gradient {'missing' if g is None else 'present but should be None'}",
            input=input,
            expected="None" if w is None else f"a gradient {tuple(w.shape)}",
            got="None" if g is None else f"a gradient {tuple(g.shape)}",
            hint="backward through the re-run fills the function's parameters' .grad; return None for inputs that "
            "do not require grad",
        )
        if w is not None:
            base = None if baseline is None else baseline[i]
            expect_close(g, w.double(), baseline=base, input=input, what=f"{name}.grad", hint=hint)


class Mlp(nn.Module):
    def __init__(self, dim=6, hidden=10, dropout=0.0):
        super().__init__()
        self.fc1, self.fc2, self.dropout = nn.Linear(dim, hidden), nn.Linear(hidden, dim), dropout

    def forward(self, x, scale):
        h = F.dropout(torch.tanh(self.fc1(x)), self.dropout, self.training)
        return self.fc2(h) * scale


# ------------------------------------------------------------------------------------------ checkpoint

CKPT_HINT = (
    "backward: fresh leaves x.detach().requires_grad_(x.requires_grad), re-run under enable_grad, "
    "torch.autograd.backward(output, grad_output), return (None, *grads)"
)


def run_mlp(make_output, model, x, scale, upstream):
    model.zero_grad(set_to_none=True)
    x.grad = scale.grad = None
    out = make_output(model, x, scale)
    (out * upstream).sum().backward()
    return out.detach(), grads_of([x, scale, *model.parameters()])


@checks("checkpoint")
def same_gradients_as_no_checkpoint(ex):
    """an MLP with a second input: output and gradients (input, parameters) equal plain autograd and torch's checkpoint"""
    names = ["x", "scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    for shape, scale_grad in (((4, 6), True), ((2, 3, 6), False), ((1, 6), True)):
        model = Mlp().double()
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        scale = torch.randn(6, dtype=torch.float64, requires_grad=scale_grad)
        upstream = torch.randn(shape, dtype=torch.float64)
        label = describe(x=x, scale=scale) + f", scale.requires_grad={scale_grad}, MLP 6-10-6 float64"
        got_out, got = run_mlp(lambda m, a, b: ex.checkpoint(m, a, b), model, x, scale, upstream)
        want_out, want = run_mlp(lambda m, a, b: m(a, b), model, x, scale, upstream)
        torch_out, theirs = run_mlp(
            lambda m, a, b: torch.utils.checkpoint.checkpoint(m, a, b, use_reentrant=False), model, x, scale, upstream
        )
        expect_close(got_out, want_out, input=label, what="output", hint="forward returns function(*inputs)")
        compare_grads(got, want, names, input=label, hint=CKPT_HINT)
        compare_grads(got, theirs, names, input=label + " (against torch.utils.checkpoint)", hint=CKPT_HINT)


class TwoMlps(nn.Module):
    """Two dropout MLPs applied one after the other, each a separate unit to checkpoint."""

    def __init__(self):
        super().__init__()
        self.first, self.second = Mlp(8, 32, 0.5), Mlp(8, 32, 0.5)

    def forward(self, x, scale, wrap=None):
        wrap = wrap or (lambda f, *args: f(*args))
        return wrap(self.second, wrap(self.first, x, scale), scale)


@checks("checkpoint")
def dropout_masks_recomputed_identically(ex):
    """two dropout MLPs in a row: same seed, same masks in the re-runs, same grads; the global RNG ends where it would"""
    model = TwoMlps().double().train()
    names = ["x", "scale"] + [name for name, _ in model.named_parameters()]
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(8, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(5, 8, dtype=torch.float64)
    torch.manual_seed(1234)
    want_out, want = run_mlp(lambda m, a, b: m(a, b), model, x, scale, upstream)
    after_plain = torch.rand(4)
    torch.manual_seed(1234)
    got_out, got = run_mlp(lambda m, a, b: m(a, b, wrap=ex.checkpoint), model, x, scale, upstream)
    after_checkpoint = torch.rand(4)
    label = "two MLPs 8-32-8 float64 with dropout 0.5 (training), each checkpointed, seed 1234 for both runs"
    expect_close(got_out, want_out, input=label, what="output", hint="run the function once in forward, as is")
    compare_grads(
        got,
        want,
        names,
        input=label,
        hint="save torch.get_rng_state() in forward and restore it for the re-run, so dropout draws the same masks",
    )
    expect(
        torch.equal(after_plain, after_checkpoint),
        "the random numbers drawn after the backward differ from a run without checkpointing",
        input=label + ", then torch.rand(4)",
        expected=str(after_plain.tolist()),
        got=str(after_checkpoint.tolist()),
        hint="restore the RNG state inside torch.random.fork_rng(devices=[]) so the global state is put back after",
    )


@checks("checkpoint")
def saves_only_the_inputs(ex):
    """during the forward only the inputs are saved (saved_tensors_hooks), and the function runs once more in backward"""
    model = Mlp(dim=16, hidden=64).double()
    x = torch.randn(8, 16, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(16, dtype=torch.float64)
    calls = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(torch.is_grad_enabled()))
    try:
        out, shapes, _ = saved_shapes(lambda: ex.checkpoint(model, x, scale))
        _, plain_shapes, _ = saved_shapes(lambda: model(x, scale))
        expect(
            len(shapes) <= 2 and set(shapes) <= {(8, 16), (16,)},  # the inputs (or nothing, if kept on ctx)
            "the checkpointed forward saved more than its inputs",
            input="MLP 16-64-16, x (8, 16), scale (16,)",
            expected="at most the inputs: x (8, 16) and scale (16,)",
            got=f"{len(shapes)} saved tensors: {shapes[:6]}{' ...' if len(shapes) > 6 else ''} (plain forward: "
            f"{len(plain_shapes)})",
            hint="run the function under torch.no_grad() in forward and keep only ctx.save_for_backward(*inputs) "
            "(floating-point tensors are counted)",
        )
        out.sum().backward()
    finally:
        handle.remove()
    expect(
        calls == [False, True, True],
        "the function did not run once without grad in forward and once with grad in backward",
        input="forward pre-hook on the MLP recording torch.is_grad_enabled()",
        expected="[False (checkpointed forward), True (plain forward for comparison), True (re-run in backward)]",
        got=str(calls),
        hint="forward: no_grad; backward: re-run under torch.enable_grad()",
    )


@checks("checkpoint")
def gradcheck_float64(ex):
    """torch.autograd.gradcheck through checkpoint(f, a, b) for a smooth f of two inputs"""
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    expect_gradcheck(
        lambda a, b: ex.checkpoint(lambda u, v: torch.tanh(u @ v) * u.sum(), a, b),
        (a, b),
        input=describe(a=a, b=b) + ", f(u, v) = tanh(u @ v) * u.sum()",
        hint=CKPT_HINT,
    )


@checks("checkpoint")
def refuses_inputs_without_grad(ex):
    """grad mode on and no input requiring grad: ValueError; under torch.no_grad(): the plain result"""
    model = Mlp().double()
    x = torch.randn(3, 6, dtype=torch.float64)
    scale = torch.randn(6, dtype=torch.float64)
    expect_refused(
        lambda: ex.checkpoint(model, x, scale),
        input=describe(x=x, scale=scale) + ", neither requires grad, grad mode on",
        hint="raise ValueError: the output would not require grad and the parameters would silently get no gradient",
    )
    with torch.no_grad():
        out = ex.checkpoint(model, x, scale)
        want = model(x, scale)
    expect_close(
        out,
        want,
        input=describe(x=x, scale=scale) + " under torch.no_grad()",
        what="output",
        hint="under torch.no_grad() there is nothing to save or recompute: return function(*inputs)",
    )


# ------------------------------------------------------------------------------------------ checkpointed_stack


class Block(nn.Module):
    """The checks' own pre-norm block with an explicit attention core (the reference for TinyBlock's interface)."""

    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention_core(self, q, k, v):
        length, head_dim = q.shape[-2], q.shape[-1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        probs = F.dropout(scores.masked_fill(~causal, float("-inf")).softmax(-1), self.dropout, self.training)
        return probs @ v

    def forward(self, x, attention_core=None):
        core = attention_core or self.attention_core
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(core(q, k, v).transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def make_blocks(n, dim, heads, dropout, dtype):
    return [Block(dim, heads, dropout).to(dtype).train() for _ in range(n)]


def stack_run(forward, blocks, x, upstream, seed):
    for block in blocks:
        block.zero_grad(set_to_none=True)
    x.grad = None
    torch.manual_seed(seed)
    out = forward(blocks, x)
    (out * upstream).sum().backward()
    params = [p for block in blocks for p in block.parameters()]
    return out.detach(), grads_of([x, *params])


def param_names(blocks):
    return ["x"] + [f"blocks[{i}].{name}" for i, block in enumerate(blocks) for name, _ in block.named_parameters()]


def plain(blocks, x):
    for block in blocks:
        x = block(x)
    return x


@checks("checkpointed_stack")
def every_policy_same_gradients(ex):
    """3 blocks with attention dropout: "full" and "attention" give the gradients of "none" and of plain autograd"""
    blocks = make_blocks(3, 8, 2, 0.2, torch.float64)
    x = torch.randn(2, 7, 8, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 7, 8, dtype=torch.float64)
    want_out, want = stack_run(plain, blocks, x, upstream, seed=7)
    names = param_names(blocks)
    for policy in ("none", "full", "attention"):
        got_out, got = stack_run(
            lambda bs, v, policy=policy: ex.checkpointed_stack(bs, v, policy), blocks, x, upstream, 7
        )
        label = f"3 blocks (dim 8, 2 heads, attention dropout 0.2, training), x (2, 7, 8) float64, policy={policy!r}"
        expect_close(got_out, want_out, input=label, what="output", hint="apply every block in order")
        compare_grads(
            got,
            want,
            names,
            input=label,
            hint="checkpoint(block, x) for 'full'; block(x, attention_core=<checkpointed core of THIS block>) for "
            "'attention'",
        )


@checks("checkpointed_stack")
def full_policy_matches_torch_checkpoint_float32(ex):
    """float32, 4 blocks: "full" matches torch.utils.checkpoint per block (use_reentrant=False) within its own error"""
    blocks = make_blocks(4, 16, 4, 0.0, torch.float32)
    reference = [copy.deepcopy(b).double() for b in blocks]
    x = torch.randn(3, 9, 16, requires_grad=True)
    x64 = x.detach().double().requires_grad_()
    upstream = torch.randn(3, 9, 16)

    def torch_full(bs, v):
        for block in bs:
            v = torch.utils.checkpoint.checkpoint(block, v, use_reentrant=False)
        return v

    _, got = stack_run(lambda bs, v: ex.checkpointed_stack(bs, v, "full"), blocks, x, upstream, seed=3)
    _, baseline = stack_run(torch_full, blocks, x, upstream, seed=3)
    _, oracle = stack_run(torch_full, reference, x64, upstream.double(), seed=3)
    compare_grads(
        got,
        oracle,
        param_names(blocks),
        baseline=baseline,
        input="4 blocks (dim 16, 4 heads), x (3, 9, 16) float32, policy='full'",
        hint="checkpoint every block, not only the first",
    )


@checks("checkpointed_stack")
def saved_tensors_per_policy(ex):
    """saved_tensors_hooks: "full" keeps one (B, T, C) input per block; "attention" keeps no (B, H, T, T) tensor"""
    blocks = make_blocks(3, 8, 2, 0.1, torch.float64)
    x = torch.randn(2, 11, 8, dtype=torch.float64, requires_grad=True)
    _, none_shapes, none_bytes = saved_shapes(lambda: ex.checkpointed_stack(blocks, x, "none"))
    _, full_shapes, full_bytes = saved_shapes(lambda: ex.checkpointed_stack(blocks, x, "full"))
    _, attn_shapes, attn_bytes = saved_shapes(lambda: ex.checkpointed_stack(blocks, x, "attention"))
    square = [s for s in attn_shapes if len(s) == 4 and s[-1] == s[-2] == 11]
    label = "3 blocks (dim 8, 2 heads, dropout 0.1), x (2, 11, 8): T x T tensors are (2, 2, 11, 11)"
    expect(
        len(full_shapes) <= 3 and set(full_shapes) <= {(2, 11, 8)},
        "the 'full' policy saved more than each block's input",
        input=label,
        expected="at most 3 saved tensors, each a block input (2, 11, 8)",
        got=f"{len(full_shapes)} saved tensors: {full_shapes[:5]}",
        hint="checkpoint(block, x) for every block",
    )
    expect(
        not square and attn_bytes < none_bytes,
        "the 'attention' policy still saves attention scores or probabilities",
        input=label,
        expected=f"no (2, 2, 11, 11) tensor; fewer than the {none_bytes} bytes of 'none'",
        got=f"{len(square)} (B, H, T, T) tensors, {attn_bytes} bytes",
        hint="route block.attention_core(q, k, v) through checkpoint, and leave the rest of the block alone",
    )
    expect(
        full_bytes < attn_bytes,
        "the 'attention' policy saves less than the 'full' policy",
        input=label,
        expected=f"full ({full_bytes} B) < attention < none ({none_bytes} B)",
        got=f"attention: {attn_bytes} B",
        hint="'attention' checkpoints only the core: the linear layers and the MLP keep their activations",
    )


@checks("checkpointed_stack")
def refuses_unknown_policy(ex):
    """an unknown policy (or a typo) raises ValueError"""
    blocks = make_blocks(1, 8, 2, 0.0, torch.float64)
    x = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    for policy in ("selective", "Full", ""):
        expect_refused(
            lambda policy=policy: ex.checkpointed_stack(blocks, x, policy),
            input=f"policy={policy!r}",
            hint="raise ValueError unless policy is 'none', 'full' or 'attention' (a typo must not silently disable "
            "checkpointing)",
        )
