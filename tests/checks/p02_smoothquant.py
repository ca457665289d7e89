"""Checks for p02.smoothquant. References: `torch.amax` over the concatenated batches; the paper's smoothing
formula s = max|X|^alpha / max|W|^(1-alpha) in float64 and its closed forms at alpha = 0, 1/2, 1; the exact
equivalence of a smoothed `nn.LayerNorm` -> `nn.Linear` block (float64) and `nn.RMSNorm`; a float64 W8A8 spec
(per-token and per-channel symmetric int8, exact integer sums); an outlier-heavy block where smoothing must cut the
W8A8 error at least in half."""

import torch
import torch.nn as nn

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error

checks = Checks("p02.smoothquant")
checks.restrict(
    "w8a8",
    forbid=["torch.ao", torch._int_mm, torch.quantize_per_tensor, torch.quantize_per_channel],
    instead="quantise with round/clamp and multiply int32 codes with @ (torch.ao's quantised ops are the reference's job)",
)


def spec_smoothing(a: torch.Tensor, weights, alpha: float) -> torch.Tensor:
    """The paper's formula in float64, channel by channel."""
    K = a.shape[0]
    s = torch.empty(K, dtype=torch.float64)
    for j in range(K):
        a_j = max(float(a[j]), 1e-5)
        b_j = max(max(float(w[:, j].abs().max()) for w in weights), 1e-5)
        s[j] = a_j**alpha / b_j ** (1 - alpha)
    return s


def spec_w8a8(x: torch.Tensor, q_w: torch.Tensor, w_scale: torch.Tensor, bias) -> torch.Tensor:
    """float64: per-token symmetric int8 codes, exact integer products, both scales, the bias."""
    x = x.double()
    x_scale = x.abs().amax(dim=-1, keepdim=True) / 127
    x_scale = torch.where(x_scale > 0, x_scale, torch.ones_like(x_scale))
    q_x = torch.clamp(torch.round(x / x_scale), -127, 127)
    y = (q_x @ q_w.double().T) * x_scale * w_scale.double().reshape(-1)
    return y if bias is None else y + bias.double()


def weight_codes(w: torch.Tensor):
    scale = w.double().abs().amax(dim=1, keepdim=True) / 127
    return torch.clamp(torch.round(w.double() / scale), -127, 127).to(torch.int8), scale.float()


def outlier_block(K=64, N=32, T=96, factor=60.0, dtype=torch.float64):
    """(hidden (2, T, K), LayerNorm, Linear) where a few channels of the norm's output are `factor` times larger."""
    norm, linear = nn.LayerNorm(K, dtype=dtype), nn.Linear(K, N, dtype=dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.weight[torch.randperm(K)[:4]] *= factor
        norm.bias.normal_(0.0, 0.1)
    return torch.randn(2, T, K, dtype=dtype), norm, linear


# ------------------------------------------------------------------------------------------ act_stats


@checks("act_stats")
def hand_checkable(ex):
    """two batches [[1, -5], [2, 0]] and [[-3, 4]]: maxima [3, 5]"""
    batches = [torch.tensor([[1.0, -5.0], [2.0, 0.0]]), torch.tensor([[-3.0, 4.0]])]
    got = ex.channel_absmax(batches)
    expect_tensor(got, shape=(2,), dtype=torch.float32, input="[[1, -5], [2, 0]], [[-3, 4]]", what="absmax")
    expect(
        got.tolist() == [3.0, 5.0],
        "wrong maxima",
        input="[[1, -5], [2, 0]], [[-3, 4]]",
        expected="[3.0, 5.0]",
        got=str(got.tolist()),
        hint="max of |x| per channel (last axis), over every token of every batch",
    )


@checks("act_stats")
def random_batches_any_shape(ex):
    """batches (3, 7, K), (1, K), (2, 2, 5, K) in float32, float16, bfloat16 and a generator: equal to torch.amax"""
    K = 12
    batches = [torch.randn(3, 7, K), torch.randn(1, K).half() * 10, torch.randn(2, 2, 5, K).bfloat16()]
    batches[0][:, :, 4] *= 30.0
    want = torch.cat([b.double().reshape(-1, K) for b in batches]).abs().amax(dim=0)
    label = "batches " + ", ".join(f"{tuple(b.shape)} {b.dtype}" for b in batches)
    got = ex.channel_absmax(iter(batches))
    expect_tensor(got, shape=(K,), dtype=torch.float32, input=label + " (as a generator)", what="absmax")
    expect_close(
        got,
        want,
        input=label,
        what="absmax",
        hint="reshape each batch to (-1, K), take |x|.amax(0) and a running maximum over batches",
    )
    halves = [torch.randn(4, K).bfloat16(), torch.randn(2, 3, K).bfloat16()]
    got = ex.channel_absmax(halves)
    expect_tensor(
        got,
        shape=(K,),
        dtype=torch.float32,
        input="batches (4, K), (2, 3, K) bfloat16",
        what="absmax",
        hint="return float32 whatever the activations' dtype",
    )


@checks("act_stats")
def stats_refuse_bad_input(ex):
    """no batches, or batches with different channel counts, raise a ValueError"""
    expect_value_error(lambda: ex.channel_absmax([]), "batches=[]", "there is nothing to take the maximum of")
    expect_value_error(
        lambda: ex.channel_absmax([torch.randn(2, 4), torch.randn(2, 5)]),
        "batches (2, 4), (2, 5)",
        "every batch must have the same last dimension",
    )


# ------------------------------------------------------------------------------------------ smoothing


@checks("smoothing")
def matches_paper_formula(ex):
    """random statistics, one and three weight matrices, alpha in {0.2, 0.5, 0.85}: s equals the paper's formula"""
    K = 16
    a = torch.rand(K) * 10
    a[3] = 0.0  # a dead channel: the clamp keeps s finite
    for weights, alpha in [
        ([torch.randn(8, K)], 0.5),
        ([torch.randn(4, K), torch.randn(6, K) * 3, torch.randn(2, K)], 0.2),
        ([torch.randn(5, K).double()], 0.85),
        ([torch.randn(3, K) * (torch.arange(K) != 7)], 0.5),  # weight column 7 all zero: clamp b too
    ]:
        label = describe(act_absmax=a) + ", weights " + ", ".join(str(tuple(w.shape)) for w in weights)
        label += f", alpha={alpha}"
        if len(weights) == 1 and weights[0].dtype == torch.float64:
            a = a.double()  # statistics may arrive in float64: s stays float32
            label += ", act_absmax float64"
        got = ex.smoothing_factors(a, weights, alpha)
        expect_tensor(got, shape=(K,), dtype=torch.float32, input=label, what="s")
        expect(
            bool(torch.isfinite(got).all() and (got > 0).all()),
            "s has zeros or infinities",
            input=label,
            expected="finite positive s",
            got=str(got[~torch.isfinite(got) | (got <= 0)].tolist()),
            hint="clamp both a and b at 1e-5 before the powers",
        )
        expect_close(
            got,
            spec_smoothing(a, weights, alpha),
            input=label,
            what="s",
            hint="s = clamp(a, 1e-5)**alpha / clamp(b, 1e-5)**(1 - alpha), b_j = max over all weights of "
            "|W[:, j]| (a column: over the output channels)",
        )


@checks("smoothing")
def closed_forms_of_alpha(ex):
    """after smoothing, channel j peaks at a^(1-alpha) b^(1-alpha) (activations) and a^alpha b^alpha (weights)"""
    hidden, norm, linear = outlier_block()
    a = norm(hidden).detach().abs().reshape(-1, hidden.shape[-1]).amax(0)  # (K,) float64
    b = linear.weight.detach().abs().amax(0)
    for alpha in (0.0, 0.5, 1.0):
        n2, l2 = nn.LayerNorm(a.shape[0], dtype=torch.float64), nn.Linear(a.shape[0], 32, dtype=torch.float64)
        n2.load_state_dict(norm.state_dict())
        l2.load_state_dict(linear.state_dict())
        s = ex.smoothing_factors(a, [l2.weight], alpha)
        ex.apply_smoothing(n2, [l2], s.double())
        label = f"LayerNorm(64) -> Linear(64, 32) with 4 outlier channels, alpha={alpha}"
        a_after = n2(hidden).detach().abs().reshape(-1, a.shape[0]).amax(0)
        b_after = l2.weight.detach().abs().amax(0)
        expect_close(
            a_after,
            (a * b) ** (1 - alpha) if alpha < 1 else torch.ones_like(a),
            input=label,
            what="activation maxima after smoothing",
            dtype=torch.float32,
            hint="divide the norm's weight and bias by s; s = a**alpha / b**(1 - alpha)",
        )
        expect_close(
            b_after,
            (a * b) ** alpha if alpha > 0 else torch.ones_like(b),
            input=label,
            what="weight column maxima after smoothing",
            dtype=torch.float32,
            hint="multiply each weight column j by s_j",
        )


@checks("smoothing")
def block_function_unchanged(ex):
    """LayerNorm -> (q, k, v) and RMSNorm -> Linear in float64: the block computes the same outputs after folding"""
    K = 24
    x = torch.randn(3, 5, K, dtype=torch.float64) * 2
    norm = nn.LayerNorm(K, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
        norm.bias.normal_()
    linears = [nn.Linear(K, n, dtype=torch.float64) for n in (8, 4, 4)]
    before = [lin(norm(x)).detach() for lin in linears]
    a = norm(x).detach().abs().reshape(-1, K).amax(0)
    s = ex.smoothing_factors(a, [lin.weight for lin in linears], 0.5)
    ex.apply_smoothing(norm, linears, s.double())
    label = describe(x=x) + ", LayerNorm(24) -> q (8), k (4), v (4), alpha=0.5"
    for name, lin, want in zip("qkv", linears, before, strict=True):
        expect_close(
            lin(norm(x)).detach(),
            want,
            input=label,
            what=f"{name} output after smoothing",
            hint="norm.weight /= s AND norm.bias /= s; linear.weight[:, j] *= s_j (columns, not rows)",
        )
    expect_close(
        s,
        spec_smoothing(a, [lin.weight.detach() / s.double() for lin in linears], 0.5),
        input=label,
        what="s (shared by q, k, v)",
        hint="b_j = max over q, k and v of their column maxima",
    )
    rms, lin = nn.RMSNorm(K, dtype=torch.float64), nn.Linear(K, 6, bias=False, dtype=torch.float64)
    with torch.no_grad():
        rms.weight.uniform_(0.5, 2.0)
    before = lin(rms(x)).detach()
    s = ex.smoothing_factors(rms(x).detach().abs().reshape(-1, K).amax(0), [lin.weight], 0.7)
    ex.apply_smoothing(rms, [lin], s.double())
    expect_close(
        lin(rms(x)).detach(),
        before,
        input=describe(x=x) + ", RMSNorm(24) -> Linear(24, 6), alpha=0.7",
        what="output after smoothing",
        hint="an RMSNorm has no bias: only its weight is divided",
    )


@checks("smoothing")
def smoothing_refuses_bad_input(ex):
    """alpha outside [0, 1] and a weight whose K differs raise a ValueError"""
    a = torch.rand(8)
    for alpha in (-0.1, 1.5):
        expect_value_error(
            lambda al=alpha: ex.smoothing_factors(a, [torch.randn(4, 8)], al),
            f"alpha={alpha}",
            "alpha must lie in [0, 1]",
        )
    expect_value_error(
        lambda: ex.smoothing_factors(a, [torch.randn(4, 8), torch.randn(3, 7)], 0.5),
        "act_absmax (8,), weights (4, 8), (3, 7)",
        "every weight must be (N, K)",
    )


# ------------------------------------------------------------------------------------------ w8a8


@checks("w8a8")
def per_token_codes(ex):
    """quantize_per_token: codes and scales equal the float64 spec, a zero token gets scale 1 and codes 0"""
    x = torch.randn(2, 5, 16) * torch.rand(2, 5, 1) * 4
    x[1, 2] = 0.0
    q, scale = ex.quantize_per_token(x)
    label = describe(x=x) + ", token [1, 2] all zeros"
    expect_tensor(q, shape=(2, 5, 16), dtype=torch.int8, input=label, what="q")
    expect_tensor(scale, shape=(2, 5, 1), dtype=torch.float32, input=label, what="scale")
    want_scale = x.double().abs().amax(-1, keepdim=True) / 127
    want_scale[1, 2] = 1.0
    expect_close(scale, want_scale, input=label, what="scale", hint="scale = max |x| over the token / 127")
    want_q = torch.clamp(torch.round(x.double() / scale.double()), -127, 127)
    expect(
        bool((q.double() == want_q).all()),
        "codes differ from round(x / scale)",
        input=label,
        expected=str(want_q[0, 0, :6].tolist()),
        got=str(q[0, 0, :6].tolist()),
        hint="torch.round, then clamp",
    )


@checks("w8a8")
def matches_float64_spec(ex):
    """float32 and bfloat16 activations, with and without bias: the W8A8 output equals the float64 spec"""
    for lead, K, N, dtype, bias in [
        ((7,), 32, 12, torch.float32, True),
        ((2, 3), 48, 5, torch.bfloat16, False),
        ((1,), 16, 20, torch.float32, False),
    ]:
        x = (torch.randn(*lead, K) * 3).to(dtype)
        q_w, w_scale = weight_codes(torch.randn(N, K))
        b = torch.randn(N) if bias else None
        label = describe(x=x, q_w=q_w, w_scale=w_scale) + f", bias={bias}"
        got = ex.w8a8_linear(x, q_w, w_scale, b)
        expect_tensor(got, shape=(*lead, N), dtype=dtype, input=label, hint="return x.dtype")
        want = spec_w8a8(x, q_w, w_scale, b)
        expect_close(
            got,
            want,
            baseline=want.to(dtype),
            input=label,
            dtype=dtype,
            hint="acc = q_x.int32 @ q_w.int32.T; y = acc * x_scale (per token) * w_scale (per output channel) + bias",
        )


@checks("w8a8")
def exact_integer_accumulation_at_k_2048(ex):
    """K = 2048 with codes near +-127 (sums ~3e7, past float32's 2**24): equal to the int64 sum, rounded once"""
    tokens, K, N = 6, 2048, 16
    sign = torch.randint(0, 2, (K,)) * 2 - 1  # products all positive: the sums grow past 2**24
    q_x = torch.randint(120, 128, (tokens, K)) * sign
    q_x[:, 0] = 127 * sign[0]  # max |x| = 127 in every token: its scale is exactly 1 and its codes are x itself
    q_w = (torch.randint(120, 128, (N, K)) * sign).to(torch.int8)
    exact = q_x.long() @ q_w.long().T  # (6, 16) int64
    label = f"x (6, {K}) float32 of integer codes in +-[120, 127] (token scales 1), q_w (16, {K}) int8, w_scale 1"
    got = ex.w8a8_linear(q_x.float(), q_w, torch.ones(N, 1), None)
    want = exact.float()  # the exact integer sum, rounded to float32 once
    wrong = got != want
    expect(
        not bool(wrong.any()),
        "the integer products were not summed exactly",
        input=label,
        expected=f"the int64 sums rounded to float32 once, e.g. {int(exact.flatten()[0]):,} -> {want.flatten()[0]:.0f}",
        got=f"{int(wrong.sum())} of {wrong.numel()} outputs off, by up to {float((got - want).abs().max()):.0f}",
        hint="accumulate the codes in integers: q_x.to(torch.int32) @ q_w.to(torch.int32).T (exact up to K * 127**2 "
        "< 2**31); float32 is exact only up to 2**24 = 16,777,216, which K = 1041 codes of 127 already pass",
    )


@checks("w8a8")
def smoothing_cuts_the_error(ex):
    """an outlier-heavy LayerNorm -> Linear: with smoothing (alpha 0.5, spec) the W8A8 error is at least 2x lower"""
    hidden, norm, linear = outlier_block(dtype=torch.float32)
    x = norm(hidden).detach()
    y = linear(x).detach().double()
    q_w, w_scale = weight_codes(linear.weight.detach())
    err_plain = (ex.w8a8_linear(x, q_w, w_scale, linear.bias.detach()).double() - y).norm().item()
    s = spec_smoothing(x.reshape(-1, x.shape[-1]).abs().amax(0), [linear.weight.detach()], 0.5).float()
    q_ws, w_scale_s = weight_codes(linear.weight.detach() * s)
    err_smooth = (ex.w8a8_linear(x / s, q_ws, w_scale_s, linear.bias.detach()).double() - y).norm().item()
    label = describe(x=x) + " with 4 channels 60x larger, Linear(64, 32)"
    expect(
        err_smooth * 2 <= err_plain,
        "smoothing did not cut the W8A8 error in half",
        input=label,
        expected=f"error with smoothing <= {err_plain / 2:.4g} (half the error without)",
        got=f"{err_smooth:.4g}",
        hint="quantise each token with its own scale (max over the token, not over the whole tensor)",
    )


@checks("w8a8")
def w8a8_refuses_bad_input(ex):
    """a q_w whose K differs from x's raises a ValueError"""
    q_w, w_scale = weight_codes(torch.randn(4, 10))
    x = torch.randn(3, 12)
    expect_value_error(lambda: ex.w8a8_linear(x, q_w, w_scale), "x (3, 12), q_w (4, 10)", "check K")
