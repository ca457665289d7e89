"""Checks for p02.tensor_parallel. The learner's code runs in a real 2-process gloo world (`llm_algo.distributed`).
References, computed in the grader on the unsplit model with the same weights: `nn.Linear` + `F.gelu`; Llama's SwiGLU
MLP and causal GQA attention with rotate-half RoPE, written unsplit here with `nn.Linear`, explicit key/value head
repetition and `F.scaled_dot_product_attention` in Hugging Face's `LlamaMLP`/`LlamaAttention` layout (these agreed with
the Hugging Face modules in float64 when the lesson was written; importing transformers would cost each grading
seconds); `F.cross_entropy`; closed forms. Every rank's outputs, input gradients and parameter gradients (directly as
the slices of the full gradients, or through one SGD step) are compared; collectives are counted inside the ranks."""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, expect, expect_close, one_thread
from llm_algo.distributed import expect_ranks_ok, expect_ranks_refuse, run_ranks, run_subgroup

checks = Checks("p02.tensor_parallel")

WORLD = 2
DEADLINE = 15.0  # seconds for one call in all ranks: a mismatched collective hangs, and must fail fast
COUNTED = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "send", "recv")
GATHERS = (
    "torch.distributed.all_gather",
    "torch.distributed.all_gather_into_tensor",
    "torch.distributed.all_gather_object",
)
NO_GATHER = "split the work over the ranks instead: two all-reduces per block are all tensor parallelism needs"
CE_FORBID = ("torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss", *GATHERS)
CE_INSTEAD = "reduce the row max, the sum of exponentials and the target logit (F.cross_entropy is the reference)"


# ----------------------------------------------------------------------------- helpers (candidates for the package)


class Collectives:
    """Inside a rank: records the learner's collectives, [(name, elements)] in call order, while the block runs."""

    def __enter__(self):
        self.calls, self._saved = [], []
        for name in COUNTED:
            original = getattr(dist, name)
            self._saved.append((name, original))
            setattr(dist, name, self._counted(name, original))
        return self

    def _counted(self, name, original):
        calls = self.calls

        def counted(tensor, *args, **kwargs):
            calls.append((name, tensor.numel() if isinstance(tensor, torch.Tensor) else 0))
            return original(tensor, *args, **kwargs)

        return counted

    def __exit__(self, *exc):
        for name, original in self._saved:
            setattr(dist, name, original)

    def since(self, start: int) -> list:
        return list(self.calls[start:])


def ranks_ok(ex, results, *, input: str, hint: str = "") -> list:
    return expect_ranks_ok(results, input=input, hint=hint)


def ranks_refuse(ex, results, errors=(ValueError,), *, input: str, hint: str = "") -> None:
    expect_ranks_refuse(results, errors, input=input, hint=hint)


# In the ranks, backward() of a loss written as sum(y * upstream) rather than y.backward(upstream): with an explicit
# gradient, torch's autograd imports torch.fx.experimental.symbolic_shapes (and sympy) on first use, seconds per rank.


def run(fn, *args, forbid=GATHERS, instead=NO_GATHER):
    return run_ranks(fn, WORLD, args=args, forbid=forbid, instead=instead, deadline=DEADLINE)


ON_GROUP = "ranks [1, 2] of a world of 3 (rank 0 stands by and must receive nothing)"
GROUP_HINT = "pass the group to every collective and to the layers you build (group=group)"


def run_on_group(fn, *args, input: str, forbid=GATHERS, instead=NO_GATHER):
    """fn(*args, group=group) in the WORLD = 2 members of a sub-group of a world of 3, the other rank standing by."""
    return run_subgroup(fn, args=args, input=input, hint=GROUP_HINT, forbid=forbid, instead=instead, deadline=DEADLINE)


def expect_no_gradients(grads: dict, names, where: str) -> None:
    """A frozen parameter (requires_grad=False) and one the forward never uses end the backward without a gradient."""
    for name in names:
        got = grads[name]
        expect(
            got is None,
            f"the {name} parameter got a gradient",
            input=where,
            expected="None: it is frozen (requires_grad=False) or the forward never uses it",
            got=f"a gradient of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else repr(got),
            hint="let autograd decide which parameters get gradients; never set requires_grad on the caller's",
        )


def rank_slice(size: int, rank: int, world: int = WORLD) -> slice:
    block = size // world
    return slice(rank * block, (rank + 1) * block)


def expect_counts(calls, forward: int, backward: int, *, input: str, hint: str) -> None:
    got_forward = [name for name, _ in calls["forward"]]
    got_backward = [name for name, _ in calls["backward"]]
    expect(
        got_forward == ["all_reduce"] * forward and got_backward == ["all_reduce"] * backward,
        "wrong number of collectives",
        input=input,
        expected=f"{forward} all-reduce(s) in the forward, {backward} in the backward",
        got=f"forward {got_forward or 'none'}, backward {got_backward or 'none'}",
        hint=hint,
    )


def refusal(cls, *args, **kwargs):
    """In a rank: construct (or call) with bad arguments; the exception must come out of every rank."""
    return cls(*args, **kwargs)


# ----------------------------------------------------------------------------------------------------- f_and_g


def f_and_g_by_hand(copy_to, reduce_from):
    rank = dist.get_rank()
    with Collectives() as seen:
        # g: rank r holds the partial result (r + 1) * [1, 2, 3]; the output is the sum on every rank
        partial = (torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) * (rank + 1)).requires_grad_()
        before = partial.detach().clone()
        total = reduce_from(partial)
        g_forward = seen.since(0)
        (total * torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)).sum().backward()  # the same on every rank
        g_backward = seen.since(len(g_forward))
        # f: the replicated input x; rank r's branch weighs it by c_r
        x = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64, requires_grad=True)
        start = len(seen.calls)
        same = copy_to(x)
        f_forward = seen.since(start)
        c = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) * (10.0 if rank else 1.0)
        (same * c).sum().backward()
        f_backward = seen.since(start + len(f_forward))
    return dict(
        total=total.detach(),
        partial_grad=partial.grad,
        partial_after=partial.detach(),
        partial_before=before,
        same=same.detach(),
        x_grad=x.grad,
        g_calls=dict(forward=g_forward, backward=g_backward),
        f_calls=dict(forward=f_forward, backward=f_backward),
    )


@checks("f_and_g")
@one_thread()
def f_and_g_hand_checkable(ex):
    """2 ranks: g sums [1,2,3] and [2,4,6] and leaves both untouched; f is the identity and sums the gradients"""
    results = run(f_and_g_by_hand, ex.copy_to_tensor_parallel, ex.reduce_from_tensor_parallel)
    values = ranks_ok(ex, results, input="2 ranks, hand-checkable tensors")
    label = "rank r: partial (r+1)*[1,2,3] for g; x = [1,-2,4] and loss sum(c_r * f(x)), c_0 = [1,2,3], c_1 = 10 c_0"
    for rank, v in enumerate(values):
        where = f"{label}; rank {rank}"
        expect_close(
            v["total"],
            torch.tensor([3.0, 6.0, 9.0], dtype=torch.float64),
            input=where,
            what="g(partial)",
            hint="g's forward is an all-reduce SUM of the partial results",
        )
        expect(
            torch.equal(v["partial_after"], v["partial_before"]),
            "g changed its input",
            input=where,
            expected=f"partial still {v['partial_before'].tolist()}",
            got=str(v["partial_after"].tolist()),
            hint="dist.all_reduce works in place: reduce a clone, never the caller's tensor",
        )
        expect_close(
            v["partial_grad"],
            torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64),
            input=where,
            what="gradient of the partial result",
            hint="g's backward is the identity (no all-reduce)",
        )
        expect_close(
            v["same"],
            torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64),
            input=where,
            what="f(x)",
            hint="f's forward is the identity",
        )
        expect_close(
            v["x_grad"],
            torch.tensor([11.0, 22.0, 33.0], dtype=torch.float64),
            input=where,
            what="gradient of x through f",
            hint="f's backward all-reduces (sums) the gradient: c_0 + c_1",
        )
        expect_counts(v["g_calls"], 1, 0, input=where + " (g)", hint="g: one all-reduce forward, none backward")
        expect_counts(
            v["f_calls"], 0, 1, input=where + " (f)", hint="f: no communication forward, one all-reduce backward"
        )
    refused = run(refusal, ex.reduce_from_tensor_parallel, torch.arange(4))
    ranks_refuse(ex, refused, (TypeError,), input="g of an int64 tensor", hint="keep the given input validation")


def block_gradcheck(copy_to, reduce_from, a, b):
    """In rank r: h(x) = g(A_r tanh(B_r f(x))), a two-layer block whose middle is split over the ranks."""
    rank = dist.get_rank()
    a_r, b_r = a[:, rank_slice(a.shape[1], rank)], b[rank_slice(b.shape[0], rank)]
    x = torch.randn(3, b.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(7)).requires_grad_()

    def block(inp):
        return reduce_from(torch.tanh(copy_to(inp) @ b_r.T) @ a_r.T)

    value = block(x).detach()
    passed = torch.autograd.gradcheck(block, (x,), raise_exception=False)
    return value, passed, x.detach()


@checks("f_and_g")
@one_thread()
def f_and_g_gradcheck_of_a_split_block(ex):
    """h(x) = g(A_r tanh(B_r f(x))) on 2 ranks: equals the unsplit A tanh(B x), and gradcheck passes in every rank"""
    a = torch.randn(5, 6, dtype=torch.float64)
    b = torch.randn(6, 4, dtype=torch.float64)
    results = run(block_gradcheck, ex.copy_to_tensor_parallel, ex.reduce_from_tensor_parallel, a, b)
    values = ranks_ok(ex, results, input="2 ranks, float64 block (4 -> 6 -> 5), middle split 3 + 3")
    for rank, (value, passed, x) in enumerate(values):
        where = f"A (5, 6), B (6, 4), x (3, 4) float64; rank {rank}"
        expect_close(
            value,
            torch.tanh(x @ b.T) @ a.T,
            input=where,
            what="h(x)",
            hint="g sums the ranks' partial products A_r tanh(B_r x)",
        )
        expect(
            passed,
            "torch.autograd.gradcheck fails on h(x) = g(A_r tanh(B_r f(x)))",
            input=where,
            expected="analytic gradients equal to finite differences of the whole (all ranks) function",
            got="a mismatch",
            hint="f's backward sums the ranks' input gradients; g's backward passes it through",
        )


def g_of_f_in_float32(copy_to, reduce_from, w, x, upstream, group=None):
    rank = dist.get_rank(group)
    x = x.clone().requires_grad_()
    y = reduce_from(copy_to(x, group) @ w[rank_slice(w.shape[0], rank)].T @ w[rank_slice(w.shape[0], rank)], group)
    (y * upstream).sum().backward()
    return y.detach(), x.grad


@checks("f_and_g")
@one_thread()
def f_and_g_float32_random(ex):
    """float32, random (7, 12) input, on ranks [1, 2] of a world of 3: g(f(x) W_r^T W_r, group) equals x W^T W and
    its input gradient, on both members; the rank standing by receives nothing"""
    w = torch.randn(10, 12)
    x = torch.randn(7, 12)
    upstream = torch.randn(7, 12)
    label = f"{ON_GROUP}, float32 x (7, 12), W (10, 12) split 5 + 5"
    results = run_on_group(
        g_of_f_in_float32, ex.copy_to_tensor_parallel, ex.reduce_from_tensor_parallel, w, x, upstream, input=label
    )
    values = ranks_ok(ex, results, input=label, hint=GROUP_HINT)
    w64, x64, up64 = w.double(), x.double().requires_grad_(), upstream.double()
    (x64 @ w64.T @ w64).backward(up64)
    base = x.clone().requires_grad_()
    (base @ w.T @ w).backward(upstream)
    for rank, (y, grad) in enumerate(values):
        where = f"x (7, 12) float32; rank {rank}"
        expect_close(y, (x64 @ w64.T @ w64).detach(), input=where, baseline=(x @ w.T @ w), what="output")
        expect_close(
            grad,
            x64.grad,
            input=where,
            baseline=base.grad,
            what="input gradient",
            hint="f's backward all-reduces the gradient (both ranks' branches use x)",
        )


# --------------------------------------------------------------------------------------------- parallel_linear


def linear_pair(column_cls, row_cls, w1, b1, w2, b2, x, upstream, group=None):
    """x -> ColumnParallel(w1, b1) -> gelu -> RowParallel(w2, b2), then backward of sum(y * upstream). On a group,
    the column layer's bias is frozen and the row layer gets a parameter its forward never uses."""
    on_group = {} if group is None else {"group": group}
    column, row = column_cls(w1, b1, **on_group), row_cls(w2, b2, **on_group)
    if group is not None:
        column.bias.requires_grad_(False)
        row.register_parameter("unused", nn.Parameter(torch.zeros(3, dtype=w2.dtype)))
    x = x.clone().requires_grad_()
    with Collectives() as seen:
        hidden = column(x)
        y = row(F.gelu(hidden))
        forward = seen.since(0)
        (y * upstream).sum().backward()
        backward = seen.since(len(forward))
    grads = dict(w1=column.weight.grad, b1=column.bias.grad, w2=row.weight.grad, b2=row.bias.grad, x=x.grad)
    if group is not None:
        grads["unused"] = row.unused.grad
    return dict(hidden=hidden.detach(), y=y.detach(), grads=grads, calls=dict(forward=forward, backward=backward))


def linear_alone(cls, row, weight, bias, x, upstream):
    rank = dist.get_rank()
    layer = cls(weight, bias)
    if row:  # the row-parallel layer gets this rank's slice of the input features
        x = x[..., rank_slice(x.shape[-1], rank)]
    x = x.clone().requires_grad_()
    with Collectives() as seen:
        y = layer(x)
        forward = seen.since(0)
        mine = upstream[..., rank_slice(upstream.shape[-1], rank)] if y.shape != upstream.shape else upstream
        (y * mine).sum().backward()
        backward = seen.since(len(forward))
    return y.detach(), x.grad, layer.weight.grad, dict(forward=forward, backward=backward)


@checks("parallel_linear")
@one_thread()
def each_layer_alone_float32(ex):
    """float32, no bias, odd token count: column-parallel alone (slice of x W^T) and row-parallel alone (x W^T)"""
    out_features, in_features = 10, 6
    w = torch.randn(out_features, in_features) / 3
    x = torch.randn(1, 7, in_features)
    upstream = torch.randn(1, 7, out_features)
    w64, x64 = w.double().requires_grad_(), x.double().requires_grad_()
    (x64 @ w64.T).backward(upstream.double())
    base_w, base_x = w.clone().requires_grad_(), x.clone().requires_grad_()
    base = base_x @ base_w.T
    base.backward(upstream)
    values = ranks_ok(
        ex,
        run(linear_alone, ex.ColumnParallelLinear, False, w, None, x, upstream),
        input="2 ranks, ColumnParallelLinear(W (10, 6), bias=None), x (1, 7, 6) float32",
    )
    for rank, (y, x_grad, w_grad, calls) in enumerate(values):
        rows = rank_slice(out_features, rank)
        where = f"column-parallel, W (10, 6), x (1, 7, 6) float32, rank {rank} (rows {rows.start}:{rows.stop})"
        expect_close(
            y,
            (x64 @ w64.T)[..., rows].detach(),
            baseline=base[..., rows].detach(),
            input=where,
            hint="rank r's output is columns [r M/p, (r+1) M/p) of x W^T",
        )
        expect_close(
            x_grad,
            x64.grad,
            baseline=base_x.grad,
            input=where,
            what="input gradient",
            hint="f's backward all-reduces: each rank only sees its own rows' contribution",
        )
        expect_close(w_grad, w64.grad[rows], baseline=base_w.grad[rows], input=where, what="weight gradient")
        expect_counts(calls, 0, 1, input=where, hint="a column-parallel layer communicates only in the backward (f)")
    w = torch.randn(out_features, in_features * 2) / 3  # in_features 12: 6 per rank
    x = torch.randn(3, in_features * 2)
    upstream = torch.randn(3, out_features)
    w64, x64 = w.double().requires_grad_(), x.double().requires_grad_()
    (x64 @ w64.T).backward(upstream.double())
    base = x @ w.T
    values = ranks_ok(
        ex,
        run(linear_alone, ex.RowParallelLinear, True, w, None, x, upstream),
        input="2 ranks, RowParallelLinear(W (10, 12), bias=None), x (3, 12) float32 split 6 + 6",
    )
    for rank, (y, x_grad, w_grad, calls) in enumerate(values):
        cols = rank_slice(in_features * 2, rank)
        where = f"row-parallel, W (10, 12), x (3, 12) float32, rank {rank} (columns {cols.start}:{cols.stop})"
        expect_close(
            y,
            (x64 @ w64.T).detach(),
            baseline=base,
            input=where,
            hint="the row-parallel output is the sum over ranks of x_r W_{:,r}^T (g), whole on every rank",
        )
        expect_close(x_grad, x64.grad[:, cols], input=where, what="input-slice gradient")
        expect_close(w_grad, w64.grad[:, cols], input=where, what="weight gradient", hint="rank r keeps columns of W")
        expect_counts(calls, 1, 0, input=where, hint="a row-parallel layer communicates only in the forward (g)")


def layer_parameters(column_cls, row_cls, w, b):
    column, row = column_cls(w, b), row_cls(w, b)

    def own_storage(p):
        return p.untyped_storage().nbytes() == p.numel() * p.element_size()

    return [
        [(tuple(p.shape), p.detach().clone(), own_storage(p)) for p in layer.parameters()] for layer in (column, row)
    ]


@checks("parallel_linear")
@one_thread()
def each_rank_stores_only_its_shard(ex):
    """each rank's parameters are its own copies of its slice (1/p of W); sizes that do not split are refused"""
    w, b = torch.randn(8, 6), torch.randn(8)
    values = ranks_ok(
        ex,
        run(layer_parameters, ex.ColumnParallelLinear, ex.RowParallelLinear, w, b),
        input="2 ranks, W (8, 6), b (8,)",
    )
    for rank, (column, row) in enumerate(values):
        rows, cols = rank_slice(8, rank), rank_slice(6, rank)
        where = f"W (8, 6), b (8,), rank {rank}"
        want = [("column", column, [w[rows], b[rows]]), ("row", row, [w[:, cols], b])]
        for kind, params, expected in want:
            expect(
                [shape for shape, _, _ in params] == [tuple(t.shape) for t in expected]
                and all(torch.equal(value, t) for (_, value, _), t in zip(params, expected, strict=False)),
                f"the {kind}-parallel layer's parameters are not this rank's slice",
                input=where,
                expected=f"{[tuple(t.shape) for t in expected]} (weight, bias), values W[{rows.start}:{rows.stop}] "
                if kind == "column"
                else f"{[tuple(t.shape) for t in expected]}, values W[:, {cols.start}:{cols.stop}] and the whole b",
                got=str([shape for shape, _, _ in params]),
                hint="keep only this rank's block of the weight (rows for column, columns for row) as nn.Parameters",
            )
            expect(
                all(own for _, _, own in params),
                f"a {kind}-parallel parameter is a view of the full tensor",
                input=where,
                expected="contiguous copies (the full matrix can then be freed)",
                got="a view that keeps the whole weight's storage alive",
                hint="use .clone() on the slice",
            )
    for cls, shape, what in (
        (ex.ColumnParallelLinear, (7, 4), "7 output features"),
        (ex.RowParallelLinear, (4, 7), "7 input features"),
    ):
        ranks_refuse(
            ex,
            run(refusal, cls, torch.randn(shape)),
            input=f"2 ranks, {cls.__name__} with {what}",
            hint="keep the given size check: it raises on every rank before any collective",
        )


@checks("parallel_linear")
@one_thread()
def column_then_row_equals_unsplit(ex):
    """float64 MLP 16 -> 24 -> 16 with biases on ranks [1, 2] of a world of 3, the first bias frozen and an unused
    parameter: output, input gradient and each rank's weight/bias slices; the rank standing by receives nothing"""
    hidden_size, ffn = 16, 24
    w1, b1 = torch.randn(ffn, hidden_size, dtype=torch.float64) / 4, torch.randn(ffn, dtype=torch.float64)
    w2, b2 = torch.randn(hidden_size, ffn, dtype=torch.float64) / 5, torch.randn(hidden_size, dtype=torch.float64)
    x, upstream = (
        torch.randn(2, 5, hidden_size, dtype=torch.float64),
        torch.randn(2, 5, hidden_size, dtype=torch.float64),
    )
    label = f"{ON_GROUP}, x (2, 5, 16) float64, W1 (24, 16), W2 (16, 24), b1 frozen"
    results = run_on_group(
        linear_pair, ex.ColumnParallelLinear, ex.RowParallelLinear, w1, b1, w2, b2, x, upstream, input=label
    )
    values = ranks_ok(ex, results, input=label, hint=GROUP_HINT)
    l1, l2 = nn.Linear(hidden_size, ffn).double(), nn.Linear(ffn, hidden_size).double()
    with torch.no_grad():
        l1.weight.copy_(w1), l1.bias.copy_(b1), l2.weight.copy_(w2), l2.bias.copy_(b2)
    xr = x.clone().requires_grad_()
    hidden_ref = l1(xr)
    y_ref = l2(F.gelu(hidden_ref))
    (y_ref * upstream).sum().backward()
    for rank, v in enumerate(values):
        cols = rank_slice(ffn, rank)
        where = f"{label}, unsplit nn.Linear(16, 24) -> gelu -> nn.Linear(24, 16); group rank {rank}"
        expect_close(
            v["hidden"],
            hidden_ref[..., cols].detach(),
            input=where,
            what="column-parallel output",
            hint=f"rank {rank} keeps rows {cols.start}:{cols.stop} of W1 and of b1: its block of the output",
        )
        expect_close(
            v["y"],
            y_ref.detach(),
            input=where,
            what="row-parallel output",
            hint="sum the partial products over the ranks (g), then add the bias once",
        )
        expect_close(
            v["grads"]["x"],
            xr.grad,
            input=where,
            what="input gradient",
            hint="the column-parallel layer applies f: its backward sums the ranks' input gradients",
        )
        for name, got, want, hint in (
            ("W1 gradient", v["grads"]["w1"], l1.weight.grad[cols], "rows of W1"),
            ("W2 gradient", v["grads"]["w2"], l2.weight.grad[:, cols], "columns of W2"),
            ("b2 gradient", v["grads"]["b2"], l2.bias.grad, "the whole bias of the row-parallel layer"),
        ):
            expect_close(got, want, input=where, what=name, hint=f"rank {rank} keeps {hint} [{cols.start}:{cols.stop}]")
        expect_no_gradients(v["grads"], ("b1", "unused"), where)
        expect_counts(v["calls"], 1, 1, input=where, hint="column: f (one all-reduce backward); row: g (one forward)")


# ----------------------------------------------------------------------------------------------- parallel_mlp


def randomize_(module: nn.Module) -> nn.Module:
    """Weights ~ N(0, 1/fan_in), as a freshly initialised transformer roughly has them."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, param.shape[1] ** -0.5)
    return module


class UnsplitSwiGLU(nn.Module):
    """Llama's MLP on one process, laid out as Hugging Face's LlamaMLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def unsplit_mlp(hidden, ffn):
    return randomize_(UnsplitSwiGLU(hidden, ffn)).double()


def train_step(module, x, upstream, *rest, lr=0.5):
    """Forward, backward of sum(y * upstream), one SGD step on the module's own parameters, forward again."""
    x = x.clone().requires_grad_()
    with Collectives() as seen:
        y = module(x, *rest)
        forward = seen.since(0)
        (y * upstream).sum().backward()
        backward = seen.since(len(forward))
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:  # frozen and unused parameters have none
                p -= lr * p.grad
        y_after = module(x.detach(), *rest)
    local = sum(p.numel() for p in module.parameters())
    return dict(
        y=y.detach(), x_grad=x.grad, y_after=y_after, calls=dict(forward=forward, backward=backward), params=local
    )


def mlp_in_rank(cls, w_gate, w_up, w_down, x, upstream, group=None):
    """On a group, the down projection's shard is frozen and the module gets a parameter its forward never uses."""
    if group is None:
        return train_step(cls(w_gate, w_up, w_down), x, upstream)
    module = cls(w_gate, w_up, w_down, group=group)
    module.down.weight.requires_grad_(False)
    module.register_parameter("unused", nn.Parameter(torch.zeros(3, dtype=x.dtype)))
    out = train_step(module, x, upstream)
    out["grads"] = dict(down=module.down.weight.grad, unused=module.unused.grad)
    return out


def reference_step(module, x, upstream, *rest, lr=0.5):
    """The same step as `train_step`, on the unsplit module in this process."""
    x = x.clone().requires_grad_()
    y = module(x, *rest)
    (y * upstream).sum().backward()
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p -= lr * p.grad
        y_after = module(x.detach(), *rest)
    return y.detach(), x.grad, y_after


def check_mlp(ex, hidden, ffn, shape, dtype, on_group=False):
    """With `on_group`: on ranks [1, 2] of a world of 3, the down projection frozen (here too) and an unused
    parameter."""
    ref = unsplit_mlp(hidden, ffn)
    weights = [ref.gate_proj.weight, ref.up_proj.weight, ref.down_proj.weight]
    x, upstream = torch.randn(*shape, hidden, dtype=torch.float64), torch.randn(*shape, hidden, dtype=torch.float64)
    label = f"Llama MLP hidden {hidden}, intermediate {ffn}, x {(*shape, hidden)} {str(dtype)[6:]}"
    args = [w.detach().to(dtype) for w in weights] + [x.to(dtype), upstream.to(dtype)]
    if on_group:
        label = f"{ON_GROUP}, {label}, down_proj frozen, an unused parameter"
        ref.down_proj.weight.requires_grad_(False)
        values = ranks_ok(ex, run_on_group(mlp_in_rank, ex.ParallelSwiGLU, *args, input=label), input=label)
    else:
        label = f"2 ranks, {label}"
        values = ranks_ok(ex, run(mlp_in_rank, ex.ParallelSwiGLU, *args), input=label)
    baseline = None
    if dtype != torch.float64:  # the unsplit module in the dtype under test: the error PyTorch itself makes
        low = UnsplitSwiGLU(hidden, ffn).to(dtype)
        low.load_state_dict({k: v.to(dtype) for k, v in ref.state_dict().items()})
        baseline = reference_step(low, x.to(dtype), upstream.to(dtype))
    return values, reference_step(ref, x, upstream), baseline, label


MLP_HINT = "rank r's fused block is [gate rows of r; up rows of r]: interleave the chunks before concatenating"


@checks("parallel_mlp")
@one_thread()
def one_all_reduce_each_way_float32(ex):
    """float32, MLP 32 -> 96, a batch of one: right numbers, 1/p of the weights, one all-reduce each way"""
    values, (y, x_grad, y_after), (by, bgrad, bafter), label = check_mlp(ex, 32, 96, (1, 7), torch.float32)
    for rank, v in enumerate(values):
        where = f"{label}; rank {rank}"
        expect_close(v["y"], y, baseline=by, input=where, hint=MLP_HINT)
        expect_close(v["x_grad"], x_grad, baseline=bgrad, input=where, what="input gradient")
        expect_close(v["y_after"], y_after, baseline=bafter, input=where, what="output after one SGD step")
        expect(
            v["params"] == 3 * 32 * 96 // WORLD,
            "each rank should store 1/p of the MLP's weights",
            input=where,
            expected=f"{3 * 32 * 96 // WORLD} parameters",
            got=str(v["params"]),
            hint="gate, up and down are each split over the ranks, nothing is replicated",
        )
        expect_counts(
            v["calls"],
            1,
            1,
            input=where,
            hint="fuse gate and up into ONE column-parallel layer: two would all-reduce two gradients",
        )


@checks("parallel_mlp")
@one_thread()
def mlp_refuses_sizes_that_do_not_split(ex):
    """an intermediate size of 15 on 2 ranks, or mismatched weight shapes, is refused on every rank"""
    check_mlp(ex, 16, 24, (3,), torch.float64)  # attempted at all?
    for args, what in (
        ((torch.randn(15, 8), torch.randn(15, 8), torch.randn(8, 15)), "intermediate 15"),
        ((torch.randn(16, 8), torch.randn(16, 8), torch.randn(16, 8)), "w_down (16, 8) instead of (8, 16)"),
    ):
        ranks_refuse(
            ex,
            run(refusal, ex.ParallelSwiGLU, *args),
            input=f"2 ranks, ParallelSwiGLU with {what}",
            hint="keep the given checks: they raise ValueError on every rank before any collective",
        )


@checks("parallel_mlp")
@one_thread()
def matches_llama_mlp_float64(ex):
    """float64, unsplit Llama MLP (64 -> 160 -> 64) on ranks [1, 2] of a world of 3, down_proj frozen, an unused
    parameter: output, input gradient, output after one SGD step; the rank standing by receives nothing"""
    values, (y, x_grad, y_after), _, label = check_mlp(ex, 64, 160, (2, 5), torch.float64, on_group=True)
    for rank, v in enumerate(values):
        where = f"{label}; group rank {rank}"
        expect_no_gradients(v["grads"], ("down", "unused"), where)
        expect_close(v["y"], y, input=where, hint=MLP_HINT)
        expect_close(
            v["x_grad"],
            x_grad,
            input=where,
            what="input gradient",
            hint="f once at the entry (inside the fused column-parallel layer) sums the input gradients",
        )
        expect_close(
            v["y_after"],
            y_after,
            input=where,
            what="output after one SGD step (lr 0.5) on every rank",
            hint="each rank's weight gradients must be the slices of the unsplit ones: " + MLP_HINT,
        )


# ------------------------------------------------------------------------------------------ parallel_attention


class UnsplitAttention(nn.Module):
    """Causal GQA self-attention with rotate-half RoPE on one process, laid out as Hugging Face's LlamaAttention
    (q/k/v/o_proj without bias); the key/value heads are repeated explicitly for the query heads they serve."""

    def __init__(self, hidden, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, G, D = self.heads, self.kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, G, D).transpose(1, 2)  # (B, G, T, D)
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)

        def rotate(t):  # rotate-half RoPE: pairs (i, i + D/2)
            first, second = t[..., : D // 2], t[..., D // 2 :]
            return t * cos[:, None] + torch.cat((-second, first), dim=-1) * sin[:, None]

        q, k = rotate(q), rotate(k)
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)  # (B, H, T, D)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))


def rope_tables(batch, seq, head_dim, base=10000.0):
    """cos, sin (B, T, D) in float64: angle t / base^(2i/D) for pair i, each angle twice (rotate-half layout)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq  # (T, D/2)
    angles = torch.cat((angles, angles), dim=-1).expand(batch, seq, head_dim)  # (B, T, D)
    return angles.cos(), angles.sin()


def attention_in_rank(cls, weights, heads, kv_heads, x, upstream, cos, sin, group=None):
    on_group = {} if group is None else {"group": group}
    return train_step(cls(*weights, heads, kv_heads, **on_group), x, upstream, cos, sin)


def check_attention(ex, heads, kv_heads, head_dim, hidden, batch, seq, dtype, on_group=False):
    ref = randomize_(UnsplitAttention(hidden, heads, kv_heads, head_dim)).double()
    weights = [ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight, ref.o_proj.weight]
    x = torch.randn(batch, seq, hidden, dtype=torch.float64)
    upstream = torch.randn(batch, seq, hidden, dtype=torch.float64)
    cos, sin = rope_tables(batch, seq, head_dim)
    label = (
        f"{ON_GROUP if on_group else '2 ranks'}, causal attention {heads} query heads / {kv_heads} KV heads of "
        f"{head_dim}, RoPE, hidden {hidden}, x {(batch, seq, hidden)} {str(dtype)[6:]}"
    )
    args = (
        [w.detach().to(dtype) for w in weights],
        heads,
        kv_heads,
        x.to(dtype),
        upstream.to(dtype),
        cos.to(dtype),
        sin.to(dtype),
    )
    if on_group:
        results = run_on_group(attention_in_rank, ex.ParallelAttention, *args, input=label)
    else:
        results = run(attention_in_rank, ex.ParallelAttention, *args)
    values = ranks_ok(ex, results, input=label)
    baseline = None
    if dtype != torch.float64:
        low = UnsplitAttention(hidden, heads, kv_heads, head_dim).to(dtype)
        low.load_state_dict({k: v.to(dtype) for k, v in ref.state_dict().items()})
        baseline = reference_step(low, x.to(dtype), upstream.to(dtype), cos.to(dtype), sin.to(dtype))
    return values, reference_step(ref, x, upstream, cos, sin), baseline, label


ATTN_HINT = (
    "rank r keeps query heads [r Hq/p, (r+1) Hq/p) and KV heads [r Hkv/p, (r+1) Hkv/p): the fused block of rank r "
    "is [its q rows; its k rows; its v rows]"
)


@checks("parallel_attention")
@one_thread()
def mha_float32_one_all_reduce_each_way(ex):
    """float32 multi-head (6 / 6 heads of 8), 1 sequence of 5: right numbers, 1/p of the weights, 1 all-reduce each way"""
    values, (y, x_grad, y_after), (by, bgrad, bafter), label = check_attention(ex, 6, 6, 8, 24, 1, 5, torch.float32)
    for rank, v in enumerate(values):
        where = f"{label}; rank {rank}"
        expect_close(v["y"], y, baseline=by, input=where, hint=ATTN_HINT)
        expect_close(v["x_grad"], x_grad, baseline=bgrad, input=where, what="input gradient")
        expect_close(v["y_after"], y_after, baseline=bafter, input=where, what="output after one SGD step")
        full = 4 * 24 * 48
        expect(
            v["params"] == full // WORLD,
            "each rank should store 1/p of the attention weights",
            input=where,
            expected=f"{full // WORLD} parameters",
            got=str(v["params"]),
            hint=ATTN_HINT,
        )
        expect_counts(
            v["calls"],
            1,
            1,
            input=where,
            hint="fuse q, k and v into ONE column-parallel layer, so that f's all-reduce runs once",
        )


@checks("parallel_attention")
@one_thread()
def attention_refuses_heads_that_do_not_split(ex):
    """2 ranks: 1 KV head, or 6 query heads over 3 KV heads, is refused on every rank (we do not replicate KV heads)"""
    check_attention(ex, 2, 2, 4, 8, 1, 3, torch.float64)  # attempted at all?
    for heads, kv_heads in ((4, 1), (6, 3)):
        d = 4
        weights = (
            torch.randn(heads * d, 16),
            torch.randn(kv_heads * d, 16),
            torch.randn(kv_heads * d, 16),
            torch.randn(16, heads * d),
        )
        ranks_refuse(
            ex,
            run(refusal, ex.ParallelAttention, *weights, heads, kv_heads),
            input=f"2 ranks, {heads} query heads, {kv_heads} KV heads",
            hint="p must divide both head counts: raise ValueError before any collective",
        )


@checks("parallel_attention")
@one_thread()
def matches_llama_attention_gqa_float64(ex):
    """float64, GQA 4 query / 2 KV heads, causal, RoPE, on ranks [1, 2] of a world of 3: output, input gradient,
    output after one SGD step; the rank standing by receives nothing"""
    values, (y, x_grad, y_after), _, label = check_attention(ex, 4, 2, 16, 64, 2, 7, torch.float64, on_group=True)
    for rank, v in enumerate(values):
        where = f"{label}; rank {rank}"
        expect_close(v["y"], y, input=where, hint=ATTN_HINT)
        expect_close(v["x_grad"], x_grad, input=where, what="input gradient", hint="apply f once, on x")
        expect_close(
            v["y_after"],
            y_after,
            input=where,
            what="output after one SGD step (lr 0.5) on every rank",
            hint="each rank's q/k/v/o gradients must be the slices of the unsplit ones: " + ATTN_HINT,
        )


# -------------------------------------------------------------------------------- vocab_parallel_cross_entropy


def vocab_ce_in_rank(fn, logits, target, upstream, group=None):
    rank = dist.get_rank(group)
    shard = logits[:, rank_slice(logits.shape[1], rank)].clone().requires_grad_()
    with Collectives() as seen:
        loss = fn(shard, target) if group is None else fn(shard, target, group)
        forward = seen.since(0)
        (loss * upstream).sum().backward()
        backward = seen.since(len(forward))
    return loss.detach(), shard.grad, dict(forward=forward, backward=backward)


def reference_ce(logits, target, upstream):
    logits = logits.clone().requires_grad_()
    loss = F.cross_entropy(logits, target, reduction="none")
    loss.backward(upstream)
    return loss.detach(), logits.grad


CE_HINT = "loss = log(sum over ALL ranks of exp(z - max)) - (z_target - max), with the max over all ranks too"


@checks("vocab_parallel_cross_entropy")
@one_thread()
def vocab_ce_hand_checkable(ex):
    """V = 4 split 2 + 2, targets 0 (rank 0 owns it) and 3 (rank 1): loss = logsumexp(z) - z_t by hand"""
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 3.0, 1.0, 2.0]], dtype=torch.float64)
    target = torch.tensor([0, 3])
    results = run(
        vocab_ce_in_rank,
        ex.vocab_parallel_cross_entropy,
        logits,
        target,
        torch.ones(2, dtype=torch.float64),
        forbid=CE_FORBID,
        instead=CE_INSTEAD,
    )
    values = ranks_ok(ex, results, input="logits [[1, 2, .5, -1], [0, 3, 1, 2]], target [0, 3], 2 ranks")
    by_hand = torch.stack([torch.log(torch.exp(row).sum()) - row[t] for row, t in zip(logits, target, strict=True)])
    for rank, (loss, _, _) in enumerate(values):
        expect_close(
            loss,
            by_hand,
            input=f"logits (2, 4) float64 split 2 + 2, target [0, 3]; rank {rank}",
            what="per-token loss",
            hint=CE_HINT + "; only the owner of the target id contributes z_target",
        )


@checks("vocab_parallel_cross_entropy")
@one_thread()
def vocab_ce_matches_cross_entropy(ex):
    """float64; float32 near 1e4 with a row spread over +-100; bfloat16: loss (float32 at least) and logit gradients"""
    for dtype, offset in ((torch.float64, 0.0), (torch.float32, 1e4), (torch.bfloat16, 0.0)):
        logits = torch.randn(9, 10, dtype=torch.float64) * 3
        logits[4] *= 30  # exp(z - min) of this row overflows float32: only the max is a safe shift
        logits = (logits + offset).to(dtype)
        target = torch.tensor([0, 4, 5, 9, 2, 7, 7, 1, 6])  # ids on both ranks, at both ends of each block
        upstream = torch.rand(9, dtype=torch.float64) + 0.5
        results = run(
            vocab_ce_in_rank,
            ex.vocab_parallel_cross_entropy,
            logits,
            target,
            upstream.to(dtype),
            forbid=CE_FORBID,
            instead=CE_INSTEAD,
        )
        label = f"logits (9, 10) {str(dtype)[6:]} around {offset:g}, one row spread over +-100, split 5 + 5"
        values = ranks_ok(ex, results, input=label)
        loss, grad = reference_ce(logits.double(), target, upstream)
        base_loss, base_grad = reference_ce(logits, target, upstream.to(dtype))
        loss_dtype = torch.promote_types(dtype, torch.float32)
        for rank, (got_loss, got_grad, _) in enumerate(values):
            where = f"{label}; rank {rank}"
            cols = rank_slice(10, rank)
            expect(
                got_loss.dtype == loss_dtype and got_grad.dtype == dtype,
                "wrong dtypes",
                input=where,
                expected=f"loss {str(loss_dtype)[6:]}, gradient {str(dtype)[6:]}",
                got=f"loss {str(got_loss.dtype)[6:]}, gradient {str(got_grad.dtype)[6:]}",
                hint="compute (and return the loss) in at least float32; cast the gradient back to the logits' dtype",
            )
            expect_close(
                got_loss,
                loss,
                baseline=base_loss.to(loss_dtype),
                input=where,
                what="per-token loss",
                hint=CE_HINT + " (subtract the max before exp: exp(1e4) overflows)",
            )
            expect_close(
                got_grad,
                grad[:, cols],
                baseline=base_grad[:, cols],
                input=where,
                what="gradient of this rank's logits",
                hint="(softmax - one-hot of the target, only on its owner) * upstream gradient",
            )


@checks("vocab_parallel_cross_entropy")
@one_thread()
def vocab_ce_communicates_three_numbers_per_token(ex):
    """16 tokens, V 24, on ranks [1, 2] of a world of 3: the loss; the forward all-reduces at most 3 x 16 numbers on
    the group, the backward communicates nothing; the rank standing by receives nothing"""
    logits, target = torch.randn(16, 24), torch.randint(0, 24, (16,))
    label = f"logits (16, 24) float32 split 12 + 12 over {ON_GROUP}"
    results = run_on_group(
        vocab_ce_in_rank,
        ex.vocab_parallel_cross_entropy,
        logits,
        target,
        torch.ones(16),
        input=label,
        forbid=CE_FORBID,
        instead=CE_INSTEAD,
    )
    values = ranks_ok(ex, results, input=label, hint=GROUP_HINT)
    loss, _ = reference_ce(logits.double(), target, torch.ones(16, dtype=torch.float64))
    for rank, (got, _, calls) in enumerate(values):
        where = f"{label}; group rank {rank}"
        expect_close(got, loss, input=where, baseline=F.cross_entropy(logits, target, reduction="none"), hint=CE_HINT)
        names = {name for name, _ in calls["forward"]}
        elements = sum(n for _, n in calls["forward"])
        expect(
            names <= {"all_reduce"} and len(calls["forward"]) <= 3 and elements <= 3 * 16,
            "the forward communicates more than three numbers per token",
            input=where,
            expected="at most 3 all-reduces of 16 elements (max, sum of exp, target logit)",
            got=f"{[(name, n) for name, n in calls['forward']]}",
            hint="never move the logits: reduce per-token statistics",
        )
        expect(
            not calls["backward"],
            "the backward communicates",
            input=where,
            expected="no collective",
            got=str(calls["backward"]),
            hint="the gradient softmax - one-hot is local to each rank's block",
        )


@checks("vocab_parallel_cross_entropy")
@one_thread()
def vocab_ce_refuses_bad_targets(ex):
    """int32 targets, ids outside [0, V) or a target of the wrong length are refused on every rank"""
    logits = torch.randn(3, 8)
    values = ranks_ok(
        ex,
        run(
            vocab_ce_in_rank,
            ex.vocab_parallel_cross_entropy,
            logits,
            torch.tensor([0, 7, 4]),
            torch.ones(3),
            forbid=CE_FORBID,
            instead=CE_INSTEAD,
        ),
        input="logits (3, 8), 2 ranks",
    )
    loss, _ = reference_ce(logits.double(), torch.tensor([0, 7, 4]), torch.ones(3, dtype=torch.float64))
    expect_close(values[0][0], loss, input="logits (3, 8) float32, target [0, 7, 4]", hint=CE_HINT)
    for target, errors, what in (
        (torch.tensor([0, 7, 4], dtype=torch.int32), (TypeError,), "int32 target"),
        (torch.tensor([0, 8, 4]), (ValueError,), "target id 8 with V = 8"),
        (torch.tensor([0, 7]), (ValueError,), "2 targets for 3 tokens"),
    ):
        ranks_refuse(
            ex,
            run(refusal, ex.vocab_parallel_cross_entropy, logits[:, :4], target),
            errors,
            input=f"logits (3, 4) per rank, {what}",
            hint="keep the given input validation",
        )
