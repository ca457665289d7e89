"""Checks for p00.attention_intro. References: `F.scaled_dot_product_attention` (float64 oracle, the builtin in the
tested dtype as the baseline) given masks built here by the index rule (bottom-right causal: j <= Tk - Tq + i;
padding: j < length), hand-checkable cases, each sequence of a padded batch attended alone, and `gradcheck`."""

import torch
import torch.nn.functional as F

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    one_thread,
)
from llm_algo.check.restrictions import ATTENTION, LOGSUMEXP, SOFTMAX

checks = Checks("p00.attention_intro")
checks.restrict(
    "attention_loops",
    "attention",
    forbid=[*ATTENTION, *SOFTMAX, *LOGSUMEXP],
    instead="write the scores, the max-subtracted exponentials and the weighted sum yourself "
    "(F.scaled_dot_product_attention is the reference)",
)

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
HINT = "scores = q @ k^T / sqrt(d), masked to -inf, softmax over the keys (last dim), then @ v"


def sdpa(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def causal_rule(Tq, Tk):
    """Bottom-right causal mask from its index rule: query i sits at position Tk - Tq + i."""
    i = torch.arange(Tq)[:, None]
    j = torch.arange(Tk)[None, :]
    return j <= Tk - Tq + i  # (Tq, Tk)


def qkv(lead, Tq, Tk, d, dv, dtype=torch.float64, scale=1.0):
    q = scale * torch.randn(*lead, Tq, d, dtype=torch.float64)
    k = scale * torch.randn(*lead, Tk, d, dtype=torch.float64)
    v = torch.randn(*lead, Tk, dv, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


# ------------------------------------------------------------------------------------------ attention_loops


@checks("attention_loops")
@one_thread()
def loops_hand_checkable(ex):
    """equal scores give the mean of the values; a key with a far larger score takes all the weight"""
    q = torch.zeros(2, 4, dtype=torch.float64)
    q[1, 2] = 40.0  # query 1 points at key 2 only
    k = torch.eye(4, dtype=torch.float64)[[0, 1, 2]]  # (3, 4): key j = e_j
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 7.0]], dtype=torch.float64)
    got = ex.attention_loops(q, k, v)
    expected = torch.stack([v.mean(0), v[2]])
    label = "q (2, 4): row 0 zeros, row 1 = 40 e_2; k = e_0, e_1, e_2; v (3, 2)"
    expect_tensor(got, shape=(2, 2), dtype=torch.float64, input=label)
    expect(
        torch.allclose(got, expected, atol=1e-6),
        "wrong outputs on a hand-checkable case",
        input=label,
        expected=str(expected.tolist()),
        got=str(got.tolist()),
        hint="query 0 scores every key 0: weights 1/3 each; query 1 scores key 2 at 40/sqrt(4) = 20: weight ~1",
    )


@checks("attention_loops")
@one_thread()
def loops_match_sdpa(ex):
    """random q, k, v (Tq != Tk, odd sizes), with and without a random mask, float32 and float64"""
    for Tq, Tk, d, dv in [(3, 5, 4, 6), (1, 7, 8, 3), (6, 6, 5, 5)]:
        for dtype in (torch.float64, torch.float32):
            q, k, v = qkv((), Tq, Tk, d, dv, dtype)
            mask = torch.rand(Tq, Tk) < 0.6
            mask[torch.arange(Tq), torch.randint(0, Tk, (Tq,))] = True  # every query keeps a key
            for m in (None, mask):
                label = describe(q=q, k=k, v=v) + (", random bool mask" if m is not None else ", no mask")
                got = ex.attention_loops(q, k, v, m)
                expect_tensor(got, shape=(Tq, dv), dtype=dtype, input=label, hint="return q's dtype")
                expect_close(
                    got,
                    sdpa(q.double(), k.double(), v.double(), m),
                    baseline=sdpa(q, k, v, m),
                    input=label,
                    hint=HINT + "; masked keys (mask False) are skipped",
                )


@checks("attention_loops")
@one_thread()
def loops_large_scores_and_gradients(ex):
    """scores around 1e3 in float32 stay finite (max subtraction); gradcheck through q, k and v"""
    q, k, v = qkv((), 3, 4, 4, 2, torch.float32, scale=40.0)
    got = ex.attention_loops(q, k, v)
    label = describe(q=q, k=k, v=v) + ", scores ~ 1e3"
    expect(
        bool(torch.isfinite(got).all()),
        "the output has nan or inf",
        input=label,
        expected="finite",
        got=str(got.tolist()),
        hint="subtract the row's max score before exp",
    )
    expect_close(got, sdpa(q.double(), k.double(), v.double()), baseline=sdpa(q, k, v), input=label, hint=HINT)
    q, k, v = (t.requires_grad_() for t in qkv((), 2, 3, 2, 2))
    mask = torch.tensor([[True, False, True], [True, True, False]])
    expect_gradcheck(
        lambda a, b, c: ex.attention_loops(a, b, c, mask),
        (q, k, v),
        input=describe(q=q, k=k, v=v),
        hint="keep the computation in tensors (no float() of a score that is then used)",
    )


@checks("attention_loops")
@one_thread()
def loops_refuse_bad_input(ex):
    """mismatched d or Tk, a non-bool or misshapen mask, a query with no allowed key: ValueError"""
    q, k, v = qkv((), 2, 3, 4, 5)
    no_key = torch.tensor([[True, True, False], [False, False, False]])
    cases = [
        (lambda: ex.attention_loops(q, k[:, :3], v), "q (2, 4), k (3, 3)"),
        (lambda: ex.attention_loops(q, k, v[:2]), "k (3, 4), v (2, 5)"),
        (lambda: ex.attention_loops(q, k, v, torch.ones(2, 3)), "mask (2, 3) float32"),
        (lambda: ex.attention_loops(q, k, v, torch.ones(3, 2, dtype=torch.bool)), "mask (3, 2) for Tq=2, Tk=3"),
        (lambda: ex.attention_loops(q, k, v, no_key), "mask row 1 all False"),
    ]
    for call, label in cases:
        expect_value_error(call, label, "validate shapes, the mask's dtype and shape, and that each row allows a key")


# ------------------------------------------------------------------------------------------ attention


@checks("attention")
@one_thread()
def attention_matches_sdpa(ex):
    """(B, H, T, d) and (T, d) inputs, four dtypes, no mask and a (B, 1, 1, Tk) padding mask"""
    for lead, Tq, Tk, d, dv in [((2, 3), 4, 9, 16, 6), ((), 7, 3, 5, 4)]:
        pad = torch.ones(*lead[:1], *([1] * (len(lead) - 1)), 1, Tk, dtype=torch.bool)
        pad[..., -2:] = False  # the last two keys are padding
        for dtype in DTYPES:
            q, k, v = qkv(lead, Tq, Tk, d, dv, dtype, scale=1.5)
            for mask in (None, pad):
                label = describe(q=q, k=k, v=v) + ("" if mask is None else f", padding mask {tuple(mask.shape)}")
                got = ex.attention(q, k, v, mask=mask)
                expect_tensor(got, shape=(*lead, Tq, dv), dtype=dtype, input=label, hint="return q's dtype")
                expect_close(
                    got,
                    sdpa(q.double(), k.double(), v.double(), mask),
                    baseline=sdpa(q, k, v, mask),
                    input=label,
                    hint=HINT + "; compute in float32 for fp16/bf16",
                )


@checks("attention")
@one_thread()
def attention_causal_bottom_right(ex):
    """is_causal for Tq = Tk (prefill), Tq < Tk (decoding with a cache, Tq = 1 and 3), and with a padding mask too"""
    for Tq, Tk in [(6, 6), (1, 6), (3, 8)]:
        for dtype in (torch.float64, torch.bfloat16):
            q, k, v = qkv((2, 2), Tq, Tk, 8, 4, dtype)
            rule = causal_rule(Tq, Tk)
            label = describe(q=q, k=k, v=v) + ", is_causal=True"
            got = ex.attention(q, k, v, is_causal=True)
            expect_close(
                got,
                sdpa(q.double(), k.double(), v.double(), rule),
                baseline=sdpa(q, k, v, rule),
                input=label,
                hint="query i sits at position Tk - Tq + i and reads keys j <= Tk - Tq + i: "
                "tril(diagonal=Tk - Tq), not tril() (SDPA's top-left is_causal)",
            )
            pad = torch.ones(2, 1, 1, Tk, dtype=torch.bool)
            pad[1, ..., -1] = False  # sequence 1's last key is padding (every query keeps a key)
            both = rule & pad
            got = ex.attention(q, k, v, mask=pad, is_causal=True)
            expect_close(
                got,
                sdpa(q.double(), k.double(), v.double(), both),
                baseline=sdpa(q, k, v, both),
                input=label + ", and a padding mask",
                hint="a key must pass both the mask and the causal rule",
            )


@checks("attention")
@one_thread()
def attention_stable_and_differentiable(ex):
    """float32 scores ~ 1e4 stay finite; gradcheck through q, k, v with a causal mask"""
    q, k, v = qkv((2,), 4, 4, 8, 3, torch.float32, scale=40.0)
    got = ex.attention(q, k, v, is_causal=True)
    label = describe(q=q, k=k, v=v) + ", scores ~ 1e4, is_causal"
    expect(
        bool(torch.isfinite(got).all()),
        "the output has nan or inf",
        input=label,
        expected="finite",
        got=f"{int((~torch.isfinite(got)).sum())} non-finite values",
        hint="subtract the row max before exp",
    )
    rule = causal_rule(4, 4)
    expect_close(got, sdpa(q.double(), k.double(), v.double(), rule), baseline=sdpa(q, k, v, rule), input=label)
    q, k, v = (t.requires_grad_() for t in qkv((), 2, 3, 3, 2))
    expect_gradcheck(
        lambda a, b, c: ex.attention(a, b, c, is_causal=True),
        (q, k, v),
        input=describe(q=q, k=k, v=v) + ", is_causal",
        hint="tensor ops end to end; mask with masked_fill(-inf), not in-place writes",
    )


@checks("attention")
@one_thread()
def attention_refuses_bad_input(ex):
    """mismatched d or Tk, a float mask, is_causal with Tq > Tk: ValueError"""
    q, k, v = qkv((2,), 4, 3, 8, 5)
    cases = [
        (lambda: ex.attention(q, k[..., :6], v), "q (2, 4, 8), k (2, 3, 6)"),
        (lambda: ex.attention(q, k, v[:, :2]), "k (2, 3, 8), v (2, 2, 5)"),
        (lambda: ex.attention(q, k, v, mask=torch.zeros(4, 3)), "float mask (4, 3)"),
        (lambda: ex.attention(q, k, v, is_causal=True), "is_causal with Tq=4 > Tk=3"),
    ]
    for call, label in cases:
        expect_value_error(call, label, "validate shapes and the mask's dtype; is_causal needs Tq <= Tk")


# ------------------------------------------------------------------------------------------ padded_causal_mask


def mask_spec(lengths, T):
    """Loop spec: [b, 0, i, j] = j <= i and j < lengths[b]."""
    out = torch.zeros(len(lengths), 1, T, T, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        for i in range(T):
            for j in range(T):
                out[b, 0, i, j] = j <= i and j < length
    return out


@checks("padded_causal_mask")
@one_thread()
def mask_matches_spec(ex):
    """lengths [5, 3, 1] for T = 5, [7] for T = 7, and [2, 6, 4, 6] for T = 6: shape (B, 1, T, T), bool, entries"""
    for lengths, T in [([5, 3, 1], 5), ([7], 7), ([2, 6, 4, 6], 6)]:
        lengths = torch.tensor(lengths)
        got = ex.padded_causal_mask(lengths, T)
        label = f"lengths {lengths.tolist()}, T={T}"
        expect_tensor(
            got,
            shape=(len(lengths), 1, T, T),
            dtype=torch.bool,
            input=label,
            hint="(B, 1, T, T): the axis of size 1 broadcasts over the heads",
        )
        expected = mask_spec(lengths, T)
        wrong = (got != expected).nonzero().tolist()
        expect(
            not wrong,
            f"{len(wrong)} wrong entries",
            input=label,
            expected="[b, 0, i, j] = (j <= i) and (j < lengths[b])",
            got=f"first wrong [b, 0, i, j] = {wrong[0] if wrong else None}: {not expected[tuple(wrong[0])] if wrong else ''}",
            hint="key index <= query index (a token reads itself), and the padding applies to the keys (columns)",
        )


@checks("padded_causal_mask")
@one_thread()
def mask_makes_padding_invisible(ex):
    """with the mask, SDPA on a right-padded (B, H, T, d) batch equals each sequence attended alone (causal)"""
    lengths, T, H, d = torch.tensor([6, 2, 4]), 6, 2, 8
    q, k, v = qkv((3, H), T, T, d, d)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=ex.padded_causal_mask(lengths, T))
    for b, length in enumerate(lengths.tolist()):
        alone = F.scaled_dot_product_attention(
            q[b, :, :length], k[b, :, :length], v[b, :, :length], is_causal=True
        )  # (H, length, d)
        expect_close(
            got[b, :, :length],
            alone,
            input=f"batch lengths {lengths.tolist()} padded to T={T}: sequence {b}, its {length} real positions",
            hint="padding keys (j >= length) must be masked for every query; real keys follow the causal rule",
        )


@checks("padded_causal_mask")
@one_thread()
def mask_refuses_bad_lengths(ex):
    """a length of 0, a length above T, a 2-D lengths tensor: ValueError"""
    cases = [
        (lambda: ex.padded_causal_mask(torch.tensor([3, 0]), 4), "lengths [3, 0], T=4"),
        (lambda: ex.padded_causal_mask(torch.tensor([3, 5]), 4), "lengths [3, 5], T=4"),
        (lambda: ex.padded_causal_mask(torch.tensor([[3], [2]]), 4), "lengths (2, 1), T=4"),
    ]
    for call, label in cases:
        expect_value_error(call, label, "every length must lie in [1, T] and lengths must be 1-D (B,)")
