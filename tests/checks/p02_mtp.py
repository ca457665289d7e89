"""Checks for p02.mtp. References, all written here in float64 and independent of the solutions: a loop spec of
the MTP module per position (RMSNorm by hand, the projection split into its hidden and embedding halves, the causal
block run on each prefix), a loop spec of the sequential forward per depth and per position, cross-entropy as
logsumexp minus the target logit in an explicit loop, greedy drafting token by token on a growing list, and float64
gradcheck."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_refused,
    expect_tensor,
    one_thread,
)

checks = Checks("p02.mtp")

F64 = torch.float64
EPS = 1e-5  # not MTPModule's default 1e-6: an eps the module ignores is caught


# ----------------------------------------------------------------------------------------------- helpers


class CumMeanBlock(nn.Module):
    """A causal block: x + tanh(cummean(x) @ W1) @ W2 (position i sees positions 0..i only)."""

    def __init__(self, dim: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(dim, 2 * dim) / math.sqrt(dim))
        self.w2 = nn.Parameter(torch.randn(2 * dim, dim) / math.sqrt(2 * dim))

    def forward(self, x):
        count = torch.arange(1, x.shape[-2] + 1, dtype=x.dtype).unsqueeze(-1)
        return x + torch.tanh((x.cumsum(dim=-2) / count) @ self.w1) @ self.w2


def spec_block(block, x):
    """The block at each position, computed on that position's prefix only: (B, L, d)."""
    w1, w2 = block.w1.detach().double(), block.w2.detach().double()
    rows = []
    for i in range(x.shape[1]):
        mean = x[:, : i + 1].sum(dim=1) / (i + 1)
        rows.append(x[:, i] + torch.tanh(mean @ w1) @ w2)
    return torch.stack(rows, dim=1)


def rms(x, g):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + EPS) * g


def spec_module(module, h, e):
    """Per position: M[:, :d] rms(h) + M[:, d:] rms(e), then the block on prefixes."""
    d = h.shape[-1]
    M = module.proj.weight.detach().double()
    gh, ge = module.norm_h.weight.detach().double(), module.norm_e.weight.detach().double()
    h, e = h.double(), e.double()
    mixed = torch.zeros_like(h)
    for b in range(h.shape[0]):
        for i in range(h.shape[1]):
            mixed[b, i] = M[:, :d] @ rms(h[b, i], gh) + M[:, d:] @ rms(e[b, i], ge)
    return spec_block(module.block, mixed)


def make_module(ex, d, dtype=F64):
    """The learner's MTPModule with random norm gains and projection, a CumMeanBlock inside."""
    module = ex.MTPModule(d, CumMeanBlock(d), eps=EPS)
    with torch.no_grad():
        module.norm_h.weight.copy_(1 + 0.5 * torch.randn(d))
        module.norm_e.weight.copy_(0.5 + 0.3 * torch.randn(d))
        module.proj.weight.copy_(torch.randn(d, 2 * d) / math.sqrt(2 * d))
    return module.to(dtype)


class Shared:
    """A shared embedding and head in float64 (or dtype): embed (B, L) -> (B, L, d), head (..., d) -> (..., V)."""

    def __init__(self, V, d, dtype=F64):
        self.E = torch.randn(V, d, dtype=F64).to(dtype)
        self.W = (torch.randn(V, d, dtype=F64) / math.sqrt(d)).to(dtype)

    def embed(self, t):
        return self.E[t]

    def head(self, h):
        return h @ self.W.T


def spec_logits(modules, h_main, tokens, shared):
    """Depth by depth, position by position: depth k at position i reads h^{k-1}_i and Emb(t_{i+k})."""
    T = tokens.shape[1]
    h_prev = h_main.double()
    out = []
    for k in range(1, len(modules) + 1):
        L = T - k
        e = torch.stack([shared.E.double()[tokens[:, i + k]] for i in range(L)], dim=1)
        h_prev = spec_module(modules[k - 1], h_prev[:, :L], e)
        out.append(h_prev @ shared.W.double().T)
    return out


def spec_loss(logits, tokens, lam):
    """Explicit loop: -(logit[target] - logsumexp) per (b, i), mean per depth, mean over depths, times lam."""
    B, T = tokens.shape
    per = []
    for k, lg in enumerate(logits, start=1):
        lg = lg.double()
        total, count = 0.0, 0
        for b in range(B):
            for i in range(T - k - 1):
                row = lg[b, i]
                total = total + (torch.logsumexp(row, dim=0) - row[tokens[b, i + k + 1]])
                count += 1
        per.append(total / count)
    per = torch.stack(per)
    return lam * per.sum() / len(logits), per


def spec_draft(modules, h_main, tokens, next_token, shared):
    """One sequence at a time, on a Python list that grows by one token per depth."""
    out = []
    for b in range(tokens.shape[0]):
        seq = tokens[b].tolist() + [int(next_token[b])]
        n = tokens.shape[1]
        h = h_main[b : b + 1].double()
        drafts = []
        for k, module in enumerate(modules, start=1):
            e = shared.E.double()[torch.tensor(seq[k : k + n])].unsqueeze(0)
            h = spec_module(module, h, e)
            drafts.append(int((h[0, -1] @ shared.W.double().T).argmax()))
            seq.append(drafts[-1])
        out.append(drafts)
    return torch.tensor(out, dtype=torch.long)


# -------------------------------------------------------------------------------------------- MTPModule


@checks("mtp_module")
def module_parameters(ex):
    """named norm_h, norm_e (RMSNorm, weight (d,)), proj (2d -> d, no bias), block kept as given"""
    block = CumMeanBlock(8)
    module = ex.MTPModule(8, block)
    names = dict(module.named_parameters())
    for name, shape in (("norm_h.weight", (8,)), ("norm_e.weight", (8,)), ("proj.weight", (8, 16))):
        expect(
            name in names and tuple(names[name].shape) == shape,
            f"parameter {name} of shape {shape}",
            input="MTPModule(8, block)",
            expected=f"{name}: {shape}",
            got=str({k: tuple(v.shape) for k, v in names.items()}),
            hint="norm_h = nn.RMSNorm(dim), norm_e = nn.RMSNorm(dim), proj = nn.Linear(2 * dim, dim, bias=False)",
        )
    expect("proj.bias" not in names, "no bias in proj", input="MTPModule(8, block)", hint="bias=False")
    expect(module.block is block, "the block is the one given", input="MTPModule(8, block)", hint="self.block = block")


@checks("mtp_module")
def module_matches_the_loop_spec(ex):
    """random norm gains and projection, a causal block, several (B, L, d), float32 and float64"""
    for B, L, d in ((1, 1, 4), (2, 5, 8), (3, 7, 6)):
        module = make_module(ex, d)
        h64, e64 = 3 * torch.randn(B, L, d, dtype=F64), torch.randn(B, L, d, dtype=F64)
        want = spec_module(module, h64, e64)
        for dtype in (torch.float32, F64):
            m = module.to(dtype)
            got = m(h64.to(dtype), e64.to(dtype))
            label = describe(h=h64.to(dtype), e=e64.to(dtype))
            expect_tensor(got, shape=(B, L, d), dtype=dtype, input=label)
            expect_close(
                got,
                want,
                dtype=dtype,
                input=label,
                hint="block(proj(cat([norm_h(h), norm_e(e)], -1))): hidden first, each with its own norm, no extra residual",
            )


@checks("mtp_module")
def module_gradients_and_refusal(ex):
    """gradcheck through h and e in float64; mismatched shapes refused"""
    module = make_module(ex, 5)
    h = torch.randn(2, 3, 5, dtype=F64, requires_grad=True)
    e = torch.randn(2, 3, 5, dtype=F64, requires_grad=True)
    expect_gradcheck(lambda a, b: module(a, b), (h, e), input=describe(h=h, e=e))
    expect_refused(
        lambda: module(torch.randn(2, 3, 5, dtype=F64), torch.randn(2, 4, 5, dtype=F64)),
        input="h (2, 3, 5), e (2, 4, 5)",
        hint="raise ValueError when h and e differ in shape",
        errors=(ValueError,),
    )


# ------------------------------------------------------------------------------------------- mtp_logits


@checks("mtp_logits")
def logits_match_the_loop_spec(ex):
    """D = 1, 2, 3 sequential modules, several (B, T), float32 and float64; depth k is (B, T-k, V)"""
    for B, T, d, V, D in ((1, 3, 4, 5, 1), (2, 6, 6, 7, 2), (2, 7, 5, 9, 3)):
        modules = [make_module(ex, d) for _ in range(D)]
        shared = Shared(V, d)
        tokens = torch.randint(0, V, (B, T))
        h64 = 2 * torch.randn(B, T, d, dtype=F64)
        want = spec_logits(modules, h64, tokens, shared)
        for dtype in (torch.float32, F64):
            ms = [m.to(dtype) for m in modules]
            sh = Shared.__new__(Shared)
            sh.E, sh.W = shared.E.to(dtype), shared.W.to(dtype)
            got = ex.mtp_logits(h64.to(dtype), tokens, sh.embed, sh.head, ms)
            label = describe(h_main=h64.to(dtype), tokens=tokens) + f", D={D}, V={V}"
            expect(
                isinstance(got, (list, tuple)) and len(got) == D,
                "one logits tensor per depth",
                input=label,
                expected=f"a list of {D}",
                got=f"{type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}",
            )
            for k in range(1, D + 1):
                expect_tensor(got[k - 1], shape=(B, T - k, V), dtype=dtype, input=label, what=f"depth {k} logits")
                expect_close(
                    got[k - 1],
                    want[k - 1],
                    dtype=dtype,
                    input=label,
                    what=f"depth {k} logits",
                    hint="depth k: module_k(h^{k-1}[:, :T-k], embed(tokens[:, k:])), h^{k-1} from the previous depth",
                )


@checks("mtp_logits")
def logits_gradient_reaches_h_main(ex):
    """gradcheck through h_main in float64, D = 2"""
    modules = [make_module(ex, 4) for _ in range(2)]
    shared = Shared(6, 4)
    tokens = torch.randint(0, 6, (2, 5))
    h = torch.randn(2, 5, 4, dtype=F64, requires_grad=True)
    expect_gradcheck(
        lambda x: tuple(ex.mtp_logits(x, tokens, shared.embed, shared.head, modules)),
        (h,),
        input=describe(h_main=h, tokens=tokens) + ", D=2",
    )


@checks("mtp_logits")
def logits_refuse_bad_input(ex):
    """no module, T < D + 2, h_main not matching tokens: ValueError"""
    modules = [make_module(ex, 4) for _ in range(3)]
    shared = Shared(6, 4)
    h, tokens = torch.randn(2, 5, 4, dtype=F64), torch.randint(0, 6, (2, 5))
    cases = (
        (lambda: ex.mtp_logits(h, tokens, shared.embed, shared.head, []), "modules=[] (depth 0)"),
        (lambda: ex.mtp_logits(h[:, :4], tokens[:, :4], shared.embed, shared.head, modules), "T=4, D=3"),
        (
            lambda: ex.mtp_logits(h[:, :4], tokens, shared.embed, shared.head, modules[:1]),
            "h_main (2, 4, 4), tokens (2, 5)",
        ),
    )
    for call, label in cases:
        expect_refused(
            call, input=label, hint="validate depth >= 1, T >= D + 2 and matching shapes", errors=(ValueError,)
        )


# --------------------------------------------------------------------------------------------- mtp_loss


@checks("mtp_loss")
def loss_matches_the_loop_spec(ex):
    """random logits of D = 1..3 depths, several lam, float32 and float64; per-depth values and the total"""
    for B, T, V, D, lam in ((1, 3, 4, 1, 1.0), (2, 6, 7, 2, 0.3), (3, 8, 5, 3, 0.1)):
        tokens = torch.randint(0, V, (B, T))
        logits64 = [3 * torch.randn(B, T - k, V, dtype=F64) for k in range(1, D + 1)]
        want_loss, want_per = spec_loss(logits64, tokens, lam)
        for dtype in (torch.float32, F64):
            label = describe(tokens=tokens) + f", D={D}, V={V}, lam={lam}, {dtype}"
            loss, per = ex.mtp_loss([lg.to(dtype) for lg in logits64], tokens, lam)
            expect_tensor(per, shape=(D,), dtype=dtype, input=label, what="per_depth")
            expect_close(
                per,
                want_per,
                dtype=dtype,
                input=label,
                what="per_depth",
                hint="depth k is scored on tokens[:, k+1:] with logits[:, :T-k-1]",
            )
            expect_tensor(loss, shape=(), input=label, what="loss")
            expect_close(
                loss,
                want_loss,
                dtype=dtype,
                input=label,
                what="loss",
                hint="lam times the MEAN over depths (not the sum)",
            )


@checks("mtp_loss")
def loss_hand_checkable(ex):
    """uniform logits: every depth's loss is log V, the total lam * log V"""
    tokens = torch.randint(0, 5, (2, 6))
    logits = [torch.zeros(2, 6 - k, 5, dtype=F64) for k in (1, 2, 3)]
    loss, per = ex.mtp_loss(logits, tokens, 0.5)
    expect_close(
        per,
        torch.full((3,), math.log(5), dtype=F64),
        input="zero logits, V=5, D=3",
        what="per_depth",
        hint="cross-entropy of uniform logits is log V",
    )
    expect_close(loss, torch.tensor(0.5 * math.log(5), dtype=F64), input="zero logits, V=5, D=3, lam=0.5", what="loss")


@checks("mtp_loss")
def loss_stable_for_large_logits(ex):
    """float32 logits of scale 300 (gaps far beyond exp's range): finite and equal to the float64 spec"""
    tokens = torch.randint(0, 6, (2, 7))
    logits64 = [300 * torch.randn(2, 7 - k, 6, dtype=F64) for k in (1, 2)]
    want_loss, want_per = spec_loss(logits64, tokens, 0.3)
    loss, per = ex.mtp_loss([lg.float() for lg in logits64], tokens, 0.3)
    label = "float32 logits ~ 300 * N(0, 1), D=2, T=7, V=6"
    expect(
        bool(torch.isfinite(per).all()),
        "finite per-depth losses",
        input=label,
        expected=str([round(v, 2) for v in want_per.tolist()]),
        got=str(per.tolist()),
        hint="use a logsumexp-based cross-entropy, not log(softmax(...))",
    )
    expect_close(per, want_per, dtype=torch.float32, input=label, what="per_depth")
    expect_close(loss, want_loss, dtype=torch.float32, input=label, what="loss")


@checks("mtp_loss")
def loss_gradients_and_refusals(ex):
    """gradcheck through the logits in float64; no depth, T < D + 2, wrong logits length refused"""
    tokens = torch.randint(0, 4, (2, 5))
    logits = [torch.randn(2, 5 - k, 4, dtype=F64, requires_grad=True) for k in (1, 2)]
    expect_gradcheck(lambda a, b: ex.mtp_loss([a, b], tokens, 0.3)[0], tuple(logits), input="D=2, T=5, V=4")
    bad = (
        (lambda: ex.mtp_loss([], tokens, 0.3), "logits=[] (depth 0)"),
        (lambda: ex.mtp_loss([torch.randn(2, 3 - k, 4) for k in (1, 2)], tokens[:, :3], 0.3), "T=3, D=2"),
        (lambda: ex.mtp_loss([torch.randn(2, 5, 4)], tokens, 0.3), "depth 1 logits (2, 5, 4) for T=5"),
    )
    for call, label in bad:
        expect_refused(
            call, input=label, hint="validate depth >= 1, T >= D + 2, logits (B, T-k, V)", errors=(ValueError,)
        )


# -------------------------------------------------------------------------------------------- mtp_draft


@checks("mtp_draft")
@one_thread()
def draft_matches_the_token_by_token_spec(ex):
    """D = 1..3, several prefixes; drafts (B, D) int64 equal to the spec's greedy tokens"""
    for B, n, d, V, D in ((1, 1, 4, 5, 1), (3, 4, 6, 7, 2), (4, 5, 5, 6, 3)):
        modules = [make_module(ex, d) for _ in range(D)]
        shared = Shared(V, d)
        tokens = torch.randint(0, V, (B, n))
        next_token = torch.randint(0, V, (B,))
        h = 2 * torch.randn(B, n, d, dtype=F64)
        want = spec_draft(modules, h, tokens, next_token, shared)
        with torch.no_grad():
            got = ex.mtp_draft(h, tokens, next_token, shared.embed, shared.head, modules)
        label = describe(h_main=h, tokens=tokens, next_token=next_token) + f", D={D}"
        expect_tensor(got, shape=(B, D), dtype=torch.long, input=label, what="drafts")
        expect(
            torch.equal(got, want),
            "greedy drafts",
            input=label,
            expected=str(want.tolist()),
            got=str(got.tolist()),
            hint="depth k embeds seq[:, k:k+n] where seq grows by next_token, then d_1, ...; h comes from depth k-1",
        )


@checks("mtp_draft")
@one_thread()
def draft_agrees_with_the_training_forward(ex):
    """on a sequence whose tail equals the drafts, the training forward's logits give the same argmax"""
    d, V, D, n = 6, 8, 3, 4
    modules = [make_module(ex, d) for _ in range(D)]
    shared = Shared(V, d)
    tokens = torch.randint(0, V, (2, n))
    nxt = torch.randint(0, V, (2,))
    h = torch.randn(2, n, d, dtype=F64)
    with torch.no_grad():
        drafts = ex.mtp_draft(h, tokens, nxt, shared.embed, shared.head, modules)
    full = torch.cat([tokens, nxt[:, None], drafts], dim=1)  # (2, n + 1 + D)
    h_full = torch.cat([h, torch.zeros(2, 1 + D, d, dtype=F64)], dim=1)  # only positions < n are read at the end
    logits = spec_logits(modules, h_full, full, shared)
    for k in range(1, D + 1):
        want = logits[k - 1][:, n - 1].argmax(-1)
        expect(
            torch.equal(drafts[:, k - 1], want),
            f"draft {k} equals the depth-{k} prediction at position n-1 of the full sequence",
            input=f"n={n}, D={D}",
            expected=str(want.tolist()),
            got=str(drafts[:, k - 1].tolist()),
            hint="drafting is the training forward at the last prefix position, fed its own drafts",
        )


@checks("mtp_draft")
def draft_refuses_bad_input(ex):
    """no module; next_token of the wrong shape; h_main not matching tokens: ValueError"""
    modules = [make_module(ex, 4)]
    shared = Shared(5, 4)
    h, tokens, nxt = torch.randn(2, 3, 4, dtype=F64), torch.randint(0, 5, (2, 3)), torch.randint(0, 5, (2,))
    cases = (
        (lambda: ex.mtp_draft(h, tokens, nxt, shared.embed, shared.head, []), "modules=[] (depth 0)"),
        (lambda: ex.mtp_draft(h, tokens, nxt[:1], shared.embed, shared.head, modules), "next_token (1,) for B=2"),
        (
            lambda: ex.mtp_draft(h[:, :2], tokens, nxt, shared.embed, shared.head, modules),
            "h_main (2, 2, 4), tokens (2, 3)",
        ),
    )
    for call, label in cases:
        expect_refused(call, input=label, hint="validate depth >= 1 and the shapes", errors=(ValueError,))
