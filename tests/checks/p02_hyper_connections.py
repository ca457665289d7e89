"""Checks for p02.hyper_connections. References, all written here in float64 and independent of the solutions:
loop specs of the pre-/post-norm stack and of the hyper-connection step (explicit sums over streams), the closed
form of the initialisation (a hyper-connected stack at init is n times a plain pre-norm residual stack), Sinkhorn by
repeated division (exp, then row and column sums), the closed-form 2x2 Sinkhorn limit, and float64 gradcheck."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_refused, expect_tensor

checks = Checks("p02.hyper_connections")

F64 = torch.float64


# ----------------------------------------------------------------------------------------------- inputs


def block_weights(num_layers: int, d: int):
    """float64 weights of random MLP blocks and the gains of their RMSNorms."""
    return [
        (
            torch.randn(d, 2 * d, dtype=F64) / math.sqrt(d),
            torch.randn(2 * d, d, dtype=F64) / math.sqrt(2 * d),
            1 + 0.3 * torch.randn(d, dtype=F64),
        )
        for _ in range(num_layers)
    ]


def blocks_from(weights, dtype=F64):
    """(layers, norms): callables (..., d) -> (..., d) computing in `dtype`."""
    layers, norms = [], []
    for w1, w2, g in weights:
        w1, w2, g = w1.to(dtype), w2.to(dtype), g.to(dtype)
        layers.append(lambda h, w1=w1, w2=w2: torch.tanh(h @ w1) @ w2)
        norms.append(lambda h, g=g: F.rms_norm(h, (h.shape[-1],), g, 1e-6))
    return layers, norms


def make_blocks(num_layers: int, d: int, dtype=F64):
    return blocks_from(block_weights(num_layers, d), dtype)


def pre_normed(layers, norms):
    return [lambda h, f=f, n=n: f(n(h)) for f, n in zip(layers, norms, strict=True)]


def spec_residual(x, layers, norms, placement, alpha):
    h = x
    for i in range(len(layers)):
        if placement == "pre":
            update = layers[i](norms[i](h))
            h = alpha * h + update
        else:
            total = alpha * h + layers[i](h)
            h = norms[i](total)
    return h


def spec_hyper_step(H, layer, A_m, A_r, B):
    """Explicit sums over streams. H (..., n, d); weights (n,)... or with H's leading dimensions."""
    n = H.shape[-2]  # w[..., i, None] broadcasts static (n,) and per-token (..., n) weights alike
    h_in = sum(A_m[..., i, None] * H[..., i, :] for i in range(n))
    out = layer(h_in)
    streams = []
    for j in range(n):
        streams.append(B[..., j, None] * out + sum(A_r[..., i, j, None] * H[..., i, :] for i in range(n)))
    return torch.stack(streams, dim=-2)


def init_weights(n: int, k: int, dtype=F64):
    A_m = torch.zeros(n, dtype=dtype)
    A_m[k % n] = 1
    return A_m, torch.eye(n, dtype=dtype), torch.ones(n, dtype=dtype)


def spec_static_connection(A_m, A_r, B):
    return lambda H, layer: spec_hyper_step(H, layer, A_m, A_r, B)


def spec_hyper_stack(x, layers, connections, n):
    H = torch.stack([x] * n, dim=-2)
    for layer, connection in zip(layers, connections, strict=True):
        H = connection(H, layer)
    return H.sum(dim=-2)


def random_static(n: int, dtype=F64):
    """Random, non-symmetric weights away from the initialisation."""
    return (
        torch.rand(n, dtype=F64).to(dtype),
        (torch.eye(n, dtype=F64) + 0.5 * torch.randn(n, n, dtype=F64)).to(dtype),
        (1 + 0.5 * torch.randn(n, dtype=F64)).to(dtype),
    )


# ------------------------------------------------------------------------------------------ residual_stack


@checks("residual_stack")
def hand_checkable_placements(ex):
    """x=[3,4], f(h)=h+[1,0], norm(h)=h/|h|: pre gives x+f(x/5), post gives normalize(alpha*x+f(x))"""
    x = torch.tensor([3.0, 4.0], dtype=F64)
    layers = [lambda h: h + torch.tensor([1.0, 0.0], dtype=F64)]
    norms = [lambda h: h / h.norm(dim=-1, keepdim=True)]
    cases = {
        ("pre", 1.0): torch.tensor([4.6, 4.8], dtype=F64),
        ("pre", 2.0): torch.tensor([7.6, 8.8], dtype=F64),
        ("post", 1.0): torch.tensor([7.0, 8.0], dtype=F64) / math.sqrt(113.0),
        ("post", 2.0): torch.tensor([10.0, 12.0], dtype=F64) / math.sqrt(244.0),
    }
    for (placement, alpha), want in cases.items():
        expect_close(
            ex.residual_stack(x, layers, norms, placement, alpha),
            want,
            input=f"x=[3, 4], f(h)=h+[1, 0], norm(h)=h/|h|, placement={placement!r}, alpha={alpha}",
            hint="pre: alpha*h + f(norm(h)); post: norm(alpha*h + f(h)); alpha weighs the residual, not the block",
        )


@checks("residual_stack")
def matches_the_loop_spec(ex):
    """random MLP blocks with RMSNorms, 1-5 layers, batch shapes, fp32 and fp64, both placements, alpha 1 and (2L)^0.25"""
    for shape, num_layers in (((1, 8), 1), ((2, 3, 16), 3), ((5, 12), 5)):
        weights = block_weights(num_layers, shape[-1])
        x64 = torch.randn(shape, dtype=F64)
        for dtype in (torch.float32, F64):
            layers, norms = blocks_from(weights, dtype)
            x = x64.to(dtype)
            for placement in ("pre", "post"):
                for alpha in (1.0, (2 * num_layers) ** 0.25):
                    got = ex.residual_stack(x, layers, norms, placement, alpha)
                    label = describe(x=x) + f", {num_layers} layers, placement={placement!r}, alpha={alpha:.3g}"
                    expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
                    expect_close(
                        got,
                        spec_residual(x.double(), *blocks_from(weights), placement, alpha),
                        baseline=spec_residual(x, layers, norms, placement, alpha),
                        input=label,
                        hint="use layer i with norm i, in order; pre keeps the norm off the residual path",
                    )


@checks("residual_stack")
def identities_and_refusals(ex):
    """pre-norm with blocks that output 0 is the identity; post-norm rows have unit RMS; a bad placement is refused"""
    x = torch.randn(4, 10, dtype=F64) * 3 + 1
    zero = [lambda h: torch.zeros_like(h)] * 3
    norms = [lambda h: F.rms_norm(h, (10,), eps=0.0)] * 3
    expect_close(
        ex.residual_stack(x, zero, norms, "pre"),
        x,
        input=describe(x=x) + ", 3 blocks that return zeros, pre",
        hint="the pre-norm residual path is the identity: h = alpha * h + f(norm(h))",
    )
    post = ex.residual_stack(x, zero, norms, "post")
    expect_close(
        post.pow(2).mean(dim=-1),
        torch.ones(4, dtype=F64),
        input=describe(x=x) + ", 3 blocks that return zeros, post",
        what="mean square of each output row",
        hint="post-norm ends with the norm: every row of the output is normalised",
    )
    expect_refused(
        lambda: ex.residual_stack(x, zero, norms, "sandwich"),
        input="placement='sandwich'",
        hint="raise ValueError for a placement other than 'pre' or 'post'",
    )


@checks("residual_stack")
def gradients_through_both_placements(ex):
    """torch.autograd.gradcheck in float64 through x, pre and post"""
    layers, norms = make_blocks(2, 6)
    x = torch.randn(3, 6, dtype=F64, requires_grad=True)
    for placement in ("pre", "post"):
        expect_gradcheck(
            lambda t, p=placement: ex.residual_stack(t, layers, norms, p, 1.5),
            (x,),
            input=describe(x=x) + f", {placement}",
        )


# ------------------------------------------------------------------------------------------ hyper_connection


@checks("hyper_connection")
def one_stream_is_the_residual_connection(ex):
    """n = 1, A_m = A_r = B = 1: H' = H + f(H), the residual connection"""
    layers, norms = make_blocks(1, 8)
    block = pre_normed(layers, norms)[0]
    H = torch.randn(2, 5, 1, 8, dtype=F64)
    one = torch.ones(1, dtype=F64)
    got = ex.hyper_connection(H, block, one, torch.ones(1, 1, dtype=F64), one)
    expect_close(
        got,
        H + block(H),
        input=describe(H=H) + ", n=1, all weights 1",
        hint="H' = B^T f(A_m^T H) + A_r^T H; with n = 1 that is h + f(h)",
    )


@checks("hyper_connection")
def static_weights_match_the_stream_sums(ex):
    """random non-symmetric static A_m, A_r, B (n = 2, 3, 4) on (n, d), (1, n, d) and (2, 3, n, d) streams"""
    for shape in ((3, 7), (1, 4, 16), (2, 3, 2, 8)):
        n, d = shape[-2:]
        block = pre_normed(*make_blocks(1, d))[0]
        H = torch.randn(shape, dtype=F64)
        A_m, A_r, B = random_static(n)
        label = describe(H=H) + f", random A_m {tuple(A_m.shape)}, A_r {tuple(A_r.shape)} (not symmetric), B"
        got = ex.hyper_connection(H, block, A_m, A_r, B)
        expect_tensor(got, shape=H.shape, dtype=F64, input=label)
        expect_close(
            got,
            spec_hyper_step(H, block, A_m, A_r, B),
            input=label,
            hint="output stream j = B[j] f(h_in) + sum_i A_r[i, j] H_i: A_r transposed, summed over the input stream i",
        )


@checks("hyper_connection")
def per_token_weights_and_one_layer_call(ex):
    """dynamic weights with H's leading dimensions; the layer runs once, on A_m^T H of shape (..., d)"""
    batch, seq, n, d = 2, 3, 4, 6
    H = torch.randn(batch, seq, n, d, dtype=F64)
    A_m = torch.randn(batch, seq, n, dtype=F64)
    A_r = torch.randn(batch, seq, n, n, dtype=F64)
    B = torch.randn(batch, seq, n, dtype=F64)
    block = pre_normed(*make_blocks(1, d))[0]
    seen = []

    def recording(h):
        seen.append(h.detach().clone())
        return block(h)

    got = ex.hyper_connection(H, recording, A_m, A_r, B)
    label = describe(H=H, A_m=A_m, A_r=A_r, B=B)
    want_in = (A_m[..., None] * H).sum(dim=-2)
    expect(
        len(seen) == 1 and tuple(seen[0].shape) == (batch, seq, d),
        "the layer must be called once, on the (..., d) mix of the streams",
        input=label,
        expected=f"1 call with shape {(batch, seq, d)}",
        got=f"{len(seen)} calls with shapes {[tuple(s.shape) for s in seen]}",
        hint="h_in = einsum('...n,...nd->...d', A_m, H); call layer(h_in) once",
    )
    expect_close(seen[0], want_in, input=label, what="the layer's input", hint="weigh stream i by A_m[..., i]")
    expect_close(got, spec_hyper_step(H, block, A_m, A_r, B), input=label, hint="per-token weights broadcast over d")


# ------------------------------------------------------------------------------------------ HyperConnection


def spec_dynamic_weights(module_params: dict, H: torch.Tensor):
    p = module_params
    H_bar = F.rms_norm(H, (H.shape[-1],), p["norm.weight"], 1e-6)
    n = H.shape[-2]
    A_m = p["A_m"] + p["s_alpha"] * torch.tanh(torch.stack([H_bar[..., i, :] @ p["W_m"] for i in range(n)], -1))
    A_r = p["A_r"] + p["s_alpha"] * torch.tanh(torch.stack([H_bar[..., i, :] @ p["W_r"] for i in range(n)], -2))
    B = p["B"] + p["s_beta"] * torch.tanh(torch.stack([H_bar[..., i, :] @ p["W_b"] for i in range(n)], -1))
    return A_m, A_r, B


@checks("hyper_connection_module")
def initialisation_and_parameters(ex):
    """A_m one-hot at layer_index % n, A_r = I, B = 1; dynamic: W_m, W_r, W_b zero, s_alpha = s_beta = 0.01"""
    for n, k in ((4, 0), (4, 6), (3, 2), (1, 5)):
        module = ex.HyperConnection(8, n, k, dynamic=True)
        params = dict(module.named_parameters())
        want_names = {"A_m", "A_r", "B", "norm.weight", "W_m", "W_r", "W_b", "s_alpha", "s_beta"}
        expect(
            set(params) == want_names,
            "the parameters are not the lesson's",
            input=f"HyperConnection(8, {n}, {k}, dynamic=True)",
            expected=str(sorted(want_names)),
            got=str(sorted(params)),
            hint="nn.Parameter for A_m, A_r, B, W_m, W_r, W_b, s_alpha, s_beta; norm = nn.RMSNorm(dim, eps=1e-6)",
        )
        A_m, A_r, B = init_weights(n, k, torch.float32)
        for name, want in (("A_m", A_m), ("A_r", A_r), ("B", B)):
            expect(
                params[name].shape == want.shape and torch.equal(params[name].detach(), want),
                f"{name} is not initialised as in the paper",
                input=f"HyperConnection(8, {n}, layer_index={k})",
                expected=str(want.tolist()),
                got=str(params[name].detach().tolist()),
                hint="A_m one-hot at layer_index % n, A_r the identity, B all ones",
            )
        for name, shape in (("W_m", (8,)), ("W_r", (8, n)), ("W_b", (8,))):
            expect(
                tuple(params[name].shape) == shape and not bool(params[name].detach().any()),
                f"{name} must start at zeros of shape {shape}",
                input=f"HyperConnection(8, {n}, {k})",
                expected=f"zeros {shape}",
                got=f"{tuple(params[name].shape)}, max |w| {params[name].detach().abs().max().item():.3g}",
                hint="zero W: the dynamic model starts as the static one",
            )
        for name in ("s_alpha", "s_beta"):
            expect(
                params[name].numel() == 1 and abs(params[name].item() - 0.01) < 1e-9,
                f"{name} must start at 0.01",
                input=f"HyperConnection(8, {n}, {k})",
                expected="0.01",
                got=str(params[name].detach().tolist()),
            )
    static = dict(ex.HyperConnection(8, 4, 1, dynamic=False).named_parameters())
    expect(
        set(static) == {"A_m", "A_r", "B"},
        "a static module has only A_m, A_r and B",
        input="HyperConnection(8, 4, 1, dynamic=False)",
        expected="['A_m', 'A_r', 'B']",
        got=str(sorted(static)),
    )


@checks("hyper_connection_module")
def dynamic_weights_and_forward_match_the_spec(ex):
    """random dynamic parameters: weights(H) and forward(H, layer) match the formulas of section 3 (float64)"""
    for n, d, shape in ((4, 8, (2, 3)), (3, 5, (1,)), (2, 16, ())):
        module = ex.HyperConnection(d, n, 1, dynamic=True).double()
        with torch.no_grad():
            for param in module.parameters():
                param.copy_(torch.randn_like(param) * 0.5 + (1.0 if param.dim() == 0 else 0.0))
        params = {name: p.detach() for name, p in module.named_parameters()}
        H = torch.randn(*shape, n, d, dtype=F64) * 2
        label = describe(H=H) + f", HyperConnection({d}, {n}, 1) with random parameters"
        want = spec_dynamic_weights(params, H)
        got = module.weights(H)
        for name, g, w in zip(("A_m", "A_r", "B"), got, want, strict=True):
            expect_close(
                g,
                w,
                input=label,
                what=f"weights(H): {name}",
                hint="H_bar = norm(H); A_m, A_r use s_alpha, B uses s_beta; row i of A_r comes from stream i",
            )
        block = pre_normed(*make_blocks(1, d))[0]
        expect_close(
            module(H, block),
            spec_hyper_step(H, block, *want),
            input=label,
            hint="forward = hyper_connection(H, layer, *self.weights(H))",
        )


@checks("hyper_connection_module")
def at_init_the_stack_is_n_times_pre_norm(ex):
    """4 blocks, n = 4, static and dynamic at init: summed streams = 4 x the plain pre-norm residual stack"""
    d, n, num_layers = 12, 4, 4
    layers, norms = make_blocks(num_layers, d)
    x = torch.randn(3, 5, d, dtype=F64)
    plain = spec_residual(x, layers, norms, "pre", 1.0)
    for dynamic in (False, True):
        modules = [ex.HyperConnection(d, n, k, dynamic=dynamic).double() for k in range(num_layers)]
        got = spec_hyper_stack(x, pre_normed(layers, norms), modules, n)
        expect_close(
            got,
            n * plain,
            input=describe(x=x) + f", {num_layers} blocks, n={n}, dynamic={dynamic}, at initialisation",
            hint="at init every stream equals the residual stream: one-hot A_m, identity A_r, B of ones, zero W",
        )


@checks("hyper_connection_module")
def gradients_reach_the_dynamic_parameters(ex):
    """gradcheck through H in float64 with random parameters; at init W_r, W_m, W_b already receive gradient"""
    d, n = 5, 3
    module = ex.HyperConnection(d, n, 2, dynamic=True).double()
    block = pre_normed(*make_blocks(1, d))[0]
    H = torch.randn(2, n, d, dtype=F64, requires_grad=True)
    module(H, block).pow(2).sum().backward()
    for name in ("W_m", "W_r", "W_b"):
        grad = getattr(module, name).grad
        expect(
            grad is not None and bool(grad.abs().sum() > 0),
            f"{name} gets no gradient at initialisation",
            input=describe(H=H) + f", HyperConnection({d}, {n}, 2)",
            expected="a non-zero gradient",
            got="None" if grad is None else "all zeros",
            hint="the dynamic terms are s * tanh(norm(H) @ W): with s = 0.01 and W = 0 the gradient to W is non-zero",
        )
    with torch.no_grad():
        for param in module.parameters():
            param.add_(0.3 * torch.randn_like(param))
    H2 = torch.randn(2, n, d, dtype=F64, requires_grad=True)
    expect_gradcheck(lambda t: module(t, block), (H2,), input=describe(H=H2))


# ------------------------------------------------------------------------------------------ hyper_connection_stack


@checks("hyper_connection_stack")
def identity_initialised_stack_is_n_times_pre_norm(ex):
    """connections at the paper's init (n = 1, 2, 4): the summed output is n x the pre-norm residual stack"""
    d, num_layers = 10, 5
    layers, norms = make_blocks(num_layers, d)
    x = torch.randn(2, 7, d, dtype=F64)
    plain = spec_residual(x, layers, norms, "pre", 1.0)
    for n in (1, 2, 4):
        connections = [spec_static_connection(*init_weights(n, k)) for k in range(num_layers)]
        got = ex.hyper_connection_stack(x, pre_normed(layers, norms), connections, n)
        label = describe(x=x) + f", {num_layers} blocks, n={n}, init weights"
        expect_tensor(got, shape=x.shape, dtype=F64, input=label)
        expect_close(
            got, n * plain, input=label, hint="copy x into every stream; sum (not average) the streams at the end"
        )


@checks("hyper_connection_stack")
def random_connections_match_the_spec(ex):
    """random static connections per block, batch shapes (1, d) and (2, 3, d), n = 3"""
    n = 3
    for shape in ((1, 6), (2, 3, 9)):
        d = shape[-1]
        blocks = pre_normed(*make_blocks(3, d))
        connections = [spec_static_connection(*random_static(n)) for _ in range(3)]
        x = torch.randn(shape, dtype=F64)
        expect_close(
            ex.hyper_connection_stack(x, blocks, connections, n),
            spec_hyper_stack(x, blocks, connections, n),
            input=describe(x=x) + ", 3 blocks, random static connections, n=3",
            hint="H = n copies of x; H = connection(H, layer) per block, in order; sum over the stream axis",
        )


@checks("hyper_connection_stack")
def input_untouched_and_gradient(ex):
    """x is not modified; gradcheck through x with random connections"""
    n, d = 2, 4
    blocks = pre_normed(*make_blocks(2, d))
    connections = [spec_static_connection(*random_static(n)) for _ in range(2)]
    x = torch.randn(3, d, dtype=F64)
    before = x.clone()
    ex.hyper_connection_stack(x, blocks, connections, n)
    expect(
        torch.equal(x, before), "the input was modified", input=describe(x=x), expected="x unchanged", got="x changed"
    )
    xg = x.clone().requires_grad_(True)
    expect_gradcheck(lambda t: ex.hyper_connection_stack(t, blocks, connections, n), (xg,), input=describe(x=x))


# ------------------------------------------------------------------------------------------ sinkhorn


def spec_sinkhorn(logits: torch.Tensor, num_iters: int) -> torch.Tensor:
    """Sinkhorn-Knopp by its definition: M = exp(logits) (shifted by the max), then row sums, column sums."""
    logits = logits.double()
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(num_iters):
        m = m / m.sum(dim=-1, keepdim=True)
        m = m / m.sum(dim=-2, keepdim=True)
    return m


def baseline_sinkhorn(logits: torch.Tensor, num_iters: int) -> torch.Tensor:
    """The straightforward log-space iteration in the dtype under test: the error a float32 Sinkhorn makes anyway."""
    log_m = logits
    for _ in range(num_iters):
        log_m = log_m - log_m.logsumexp(dim=-1, keepdim=True)
        log_m = log_m - log_m.logsumexp(dim=-2, keepdim=True)
    return log_m.exp()


@checks("sinkhorn")
def two_by_two_closed_form(ex):
    """n = 2: the limit is [[p, 1-p], [1-p, p]] with p^2/(1-p)^2 = M00 M11 / (M01 M10)"""
    logits = torch.tensor([[1.0, -0.5], [0.3, 2.0]], dtype=F64)
    k = math.exp(1.0 + 2.0 - (-0.5) - 0.3)
    p = math.sqrt(k) / (1 + math.sqrt(k))
    expect_close(
        ex.sinkhorn(logits, 200),
        torch.tensor([[p, 1 - p], [1 - p, p]], dtype=F64),
        input="logits=[[1, -0.5], [0.3, 2]], num_iters=200",
        hint="exponentiate the logits, then alternate: divide rows by their sums, then columns by theirs",
    )


@checks("sinkhorn")
def matches_the_iteration_count_by_count(ex):
    """random logits (n = 1, 3, 4; batch shapes), 1, 3 and 20 iterations, fp32 and fp64, vs the plain iteration"""
    for shape in ((1, 1), (3, 3), (2, 5, 4, 4)):
        for num_iters in (1, 3, 20):
            for dtype in (torch.float32, F64):
                logits = (torch.randn(shape, dtype=F64) * 2).to(dtype)
                got = ex.sinkhorn(logits, num_iters)
                label = describe(logits=logits) + f", num_iters={num_iters}"
                expect_tensor(got, shape=logits.shape, dtype=dtype, input=label)
                expect_close(
                    got,
                    spec_sinkhorn(logits, num_iters),
                    baseline=baseline_sinkhorn(logits, num_iters),
                    input=label,
                    hint="each iteration: rows first (dim=-1), then columns (dim=-2); exactly num_iters iterations",
                )


@checks("sinkhorn")
def doubly_stochastic_and_shift_invariant(ex):
    """after 60 iterations rows and columns sum to 1; adding constants to rows and columns of the logits changes nothing"""
    logits = torch.randn(3, 4, 4, dtype=F64)
    got = ex.sinkhorn(logits, 60)
    label = describe(logits=logits) + ", num_iters=60"
    expect(
        bool((got >= 0).all()),
        "negative entries",
        input=label,
        expected="all entries >= 0",
        got=f"min {got.min().item():.3g}",
    )
    expect_close(
        got.sum(dim=-1), torch.ones(3, 4, dtype=F64), input=label, what="row sums", hint="normalise the rows too"
    )
    expect_close(
        got.sum(dim=-2), torch.ones(3, 4, dtype=F64), input=label, what="column sums", hint="normalise the columns"
    )
    shifted = logits + 5 * torch.randn(3, 4, 1, dtype=F64) + 5 * torch.randn(3, 1, 4, dtype=F64)
    expect_close(
        ex.sinkhorn(shifted, 60),
        got,
        input=label + ", logits + row constants + column constants",
        hint="the limit is D1 exp(logits) D2: row and column shifts of the logits are absorbed by D1 and D2",
    )


@checks("sinkhorn")
def extreme_logits_stay_finite(ex):
    """logits of size ~500 and a row 300 below the others: finite, and equal to the float64 iteration"""
    logits = torch.randn(2, 4, 4, dtype=F64) * 60
    logits[0, 1] -= 300.0
    for dtype in (torch.float32, F64):
        x = logits.to(dtype)
        got = ex.sinkhorn(x, 5)
        label = describe(logits=x) + " with |logits| up to ~500, one row 300 below the rest, num_iters=5"
        expect(
            bool(torch.isfinite(got).all()),
            "inf or nan in the output",
            input=label,
            expected="finite entries",
            got=f"{int((~torch.isfinite(got)).sum())} non-finite entries",
            hint="work in log space: subtract logsumexp over rows, then over columns; exp only at the end",
        )
        expect_close(
            got,
            spec_sinkhorn(x, 5),
            baseline=baseline_sinkhorn(x, 5),
            input=label,
            hint="subtract logsumexp, do not exponentiate first",
        )
