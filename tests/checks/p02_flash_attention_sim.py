"""Checks for p02.flash_attention_sim. References: `F.scaled_dot_product_attention` and its autograd in float64
(the oracle) and in the dtype under test (the baseline), `torch.logsumexp` of the float64 scores, closed forms for
uniform attention (q = 0), torch.autograd.gradcheck, and two memory watches: a TorchFunctionMode that records the
largest tensor every op creates, and torch.autograd.graph.saved_tensors_hooks for what autograd keeps."""

import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    reference_only,
)
from llm_algo.check.restrictions import ATTENTION, LOGSUMEXP, SOFTMAX

checks = Checks("p02.flash_attention_sim")
checks.restrict(
    "flash_attention_forward",
    "flash_attention_backward",
    "flash_attention",
    forbid=[*ATTENTION, *SOFTMAX, *LOGSUMEXP],
    instead="compute the tiles with matmuls, exp, amax and sum yourself (SDPA and logsumexp are the checks' reference)",
)

HINT_ONLINE = (
    "per key block: m_new = max(m, rowmax(s)); alpha = exp(m - m_new); l = alpha*l + rowsum(exp(s - m_new)); "
    "acc = alpha*acc + exp(s - m_new) @ v; at the end out = acc / l"
)
HINT_MASK = (
    "causal: query i sees keys j <= i; mask cols > rows with -inf and skip only key blocks starting after q_end - 1"
)
HINT_BACKWARD = (
    "delta = rowsum(dO * O); p = exp(scale * q k^T - lse); dv += p^T dO; ds = p * (dO v^T - delta); "
    "dq += scale * ds k; dk += scale * ds^T q"
)

# (B, H, Sq, Sk, D, Dv, block_q, block_k): blocks that divide, that do not, larger than S, and 1
CASES = [
    (1, 1, 5, 5, 4, 4, 2, 2),
    (2, 3, 17, 17, 8, 5, 4, 6),
    (1, 2, 33, 33, 16, 16, 64, 8),
    (2, 1, 12, 12, 8, 8, 1, 1),
    (1, 2, 29, 29, 8, 12, 7, 32),
]
CROSS = [(1, 2, 7, 19, 8, 6, 3, 5), (2, 1, 20, 9, 4, 4, 8, 4)]  # Sq != Sk, non-causal only


def random_qkv(B, H, Sq, Sk, D, Dv, dtype=torch.float64, scale=1.0):
    q = torch.randn(B, H, Sq, D, dtype=torch.float64) * scale
    k = torch.randn(B, H, Sk, D, dtype=torch.float64) * scale
    v = torch.randn(B, H, Sk, Dv, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def sdpa(q, k, v, causal, scale=None):
    with reference_only():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def reference_lse(q, k, causal, scale=None):
    """log sum_j exp(scale * q_i . k_j) over the keys query i sees, float64: (B, H, Sq)."""
    q64, k64 = q.double(), k.double()
    s = (q64 @ k64.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    with reference_only():
        return torch.logsumexp(s, dim=-1)


def reference_grads(q, k, v, grad_out, causal, scale=None):
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    with reference_only():
        F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale).backward(grad_out.double())
    return [t.grad for t in leaves]


def baseline_grads(q, k, v, out, lse, grad_out, causal):
    """The baseline of the tolerance policy: the untiled formulas in float32 from the same rounded out and lse that
    a low-precision forward hands to the backward (delta from the stored out, as FlashAttention does), cast back."""
    q32, k32, v32, do = q.float(), k.float(), v.float(), grad_out.float()
    scale = q.shape[-1] ** -0.5
    s = (q32 @ k32.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(s - lse.float()[..., None])
    dp = do @ v32.transpose(-1, -2)
    ds = p * (dp - (do * out.float()).sum(-1, keepdim=True))
    return [
        (ds @ k32 * scale).to(q.dtype),
        (ds.transpose(-1, -2) @ q32 * scale).to(k.dtype),
        (p.transpose(-1, -2) @ do).to(v.dtype),
    ]


class LargestTensor(TorchFunctionMode):
    """Records the largest number of elements of any tensor an op returns (views included)."""

    def __init__(self):
        super().__init__()
        self.largest, self.op = 0, ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else [result]:
            if isinstance(t, torch.Tensor) and t.numel() > self.largest:
                self.largest, self.op = t.numel(), getattr(func, "__name__", str(func))
        return result


# ------------------------------------------------------------------------------------------ forward


@checks("flash_attention_forward")
def uniform_attention_closed_form(ex):
    """q = 0: every visible key scores 0, so out = mean of the visible values and lse = log(number visible)"""
    for causal in (False, True):
        _, k, v = random_qkv(1, 2, 6, 6, 4, 3)
        q = torch.zeros(1, 2, 6, 4, dtype=torch.float64)
        out, lse = ex.flash_attention_forward(q, k, v, causal=causal, block_q=4, block_k=4)
        counts = torch.arange(1, 7, dtype=torch.float64) if causal else torch.full((6,), 6.0, dtype=torch.float64)
        want_out = v.cumsum(dim=2) / counts[:, None] if causal else v.mean(dim=2, keepdim=True).expand(1, 2, 6, 3)
        label = describe(q=q, k=k, v=v) + f", q = 0, causal={causal}, blocks 4x4"
        expect_close(out, want_out, input=label, hint="uniform weights: " + (HINT_MASK if causal else HINT_ONLINE))
        expect_close(
            lse, counts.log().expand(1, 2, 6), input=label, what="lse", hint="lse = m + log(l): here log(#keys seen)"
        )


@checks("flash_attention_forward")
def matches_sdpa_over_shapes_and_blocks(ex):
    """float64 vs SDPA: odd sizes, blocks that do not divide S, blocks of 1 and larger than S, causal and not"""
    for B, H, Sq, Sk, D, Dv, bq, bk in CASES + CROSS:
        for causal in (False, True) if Sq == Sk else (False,):
            q, k, v = random_qkv(B, H, Sq, Sk, D, Dv, scale=1.5)
            out, _ = ex.flash_attention_forward(q, k, v, causal=causal, block_q=bq, block_k=bk)
            label = describe(q=q, k=k, v=v) + f", causal={causal}, block_q={bq}, block_k={bk}"
            expect_tensor(out, shape=(B, H, Sq, Dv), dtype=torch.float64, input=label)
            expect_close(out, sdpa(q, k, v, causal), input=label, hint=HINT_MASK if causal else HINT_ONLINE)


@checks("flash_attention_forward")
def lse_matches_logsumexp(ex):
    """the returned lse equals torch.logsumexp of the float64 scores (custom scale included)"""
    for B, H, Sq, Sk, D, Dv, bq, bk in CASES[1:4] + CROSS[:1]:
        for causal in (False, True) if Sq == Sk else (False,):
            scale = 0.3 if causal else None
            q, k, v = random_qkv(B, H, Sq, Sk, D, Dv, scale=2.0)
            out, lse = ex.flash_attention_forward(q, k, v, causal=causal, block_q=bq, block_k=bk, scale=scale)
            label = describe(q=q, k=k) + f", causal={causal}, scale={scale}, block_q={bq}, block_k={bk}"
            expect_tensor(lse, shape=(B, H, Sq), dtype=torch.float64, input=label, what="lse")
            expect_close(
                lse, reference_lse(q, k, causal, scale), input=label, what="lse", hint="lse = m + log(l), per query row"
            )
            expect_close(out, sdpa(q, k, v, causal, scale), input=label, hint="use the scale argument when given")


@checks("flash_attention_forward")
def large_logits_do_not_overflow(ex):
    """scores of size ~1e4 in float32 (exp(s) alone overflows): still equal to SDPA, no inf or NaN"""
    for causal in (False, True):
        q, k, v = random_qkv(1, 2, 24, 24, 8, 8, dtype=torch.float32, scale=60.0)
        out, lse = ex.flash_attention_forward(q, k, v, causal=causal, block_q=8, block_k=5)
        label = describe(q=q, k=k, v=v) + f", |scores| ~ 1e4, causal={causal}"
        expect(
            bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all()),
            "inf or NaN in the output",
            input=label,
            expected="finite values",
            got=f"{int((~torch.isfinite(out)).sum())} non-finite outputs",
            hint="subtract the running max before exp; rescale by exp(m_old - m_new), never exp(s) alone",
        )
        expect_close(
            out,
            sdpa(q.double(), k.double(), v.double(), causal),
            baseline=sdpa(q, k, v, causal),
            input=label,
            hint=HINT_ONLINE,
        )
        expect_close(
            lse, reference_lse(q, k, causal), input=label, what="lse", hint="lse = m + log(l) with the running max"
        )


@checks("flash_attention_forward")
def low_precision_dtypes(ex):
    """fp16 and bf16 inputs: computed in float32, out in the input dtype, lse in float32"""
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            q, k, v = random_qkv(2, 2, 21, 21, 16, 8, dtype=dtype, scale=2.0)
            out, lse = ex.flash_attention_forward(q, k, v, causal=causal, block_q=8, block_k=6)
            label = describe(q=q, k=k, v=v) + f", causal={causal}"
            expect_tensor(out, shape=(2, 2, 21, 8), dtype=dtype, input=label)
            expect_tensor(
                lse, shape=(2, 2, 21), dtype=torch.float32, input=label, what="lse", hint="keep lse in float32"
            )
            expect_close(
                out,
                sdpa(q.double(), k.double(), v.double(), causal),
                baseline=sdpa(q, k, v, causal),
                input=label,
                hint="upcast q, k, v to float32 before the matmuls; cast out back at the end",
            )


@checks("flash_attention_forward")
def never_materialises_the_score_matrix(ex):
    """a TorchFunctionMode watches every tensor a torch call returns: none has Sq*Sk elements per head (S = 160, 32x32 tiles)"""
    S, D = 160, 8
    for causal in (False, True):
        q, k, v = random_qkv(1, 2, S, S, D, D, dtype=torch.float32)
        with LargestTensor() as watch:
            out, _ = ex.flash_attention_forward(q, k, v, causal=causal, block_q=32, block_k=32)
        label = describe(q=q, k=k, v=v) + f", causal={causal}, block_q=block_k=32"
        limit = 2 * S * S // 2  # B*H*S*S/2: far above a tile (2*32*32) and the inputs (2*S*D), below the scores
        expect(
            watch.largest < limit,
            "a tensor as large as the score matrix was created",
            input=label,
            expected=f"every tensor < {limit} elements (tiles of 2x32x32 = 2048)",
            got=f"{watch.largest} elements from {watch.op}",
            hint="compute scores one (block_q, block_k) tile at a time; never q @ k^T over the whole sequence",
        )
        expect_close(out, sdpa(q.double(), k.double(), v.double(), causal), baseline=sdpa(q, k, v, causal), input=label)


@checks("flash_attention_forward")
def refuses_bad_input(ex):
    """ValueError for mismatched shapes, block sizes < 1, no keys, and causal with Sq != Sk"""
    q, k, v = random_qkv(1, 2, 6, 6, 4, 4)
    f = ex.flash_attention_forward
    expect_value_error(lambda: f(q, k[..., :3], v), describe(q=q, k=k[..., :3]), "q and k need the same head size")
    expect_value_error(lambda: f(q, k, v[:, :, :5]), describe(k=k, v=v[:, :, :5]), "k and v need the same length")
    expect_value_error(lambda: f(q, k[:, :1], v[:, :1]), describe(q=q, k=k[:, :1]), "batch and heads must match")
    expect_value_error(lambda: f(q[0], k[0], v[0]), describe(q=q[0]), "inputs are 4-D (B, H, S, D)")
    expect_value_error(lambda: f(q, k, v, block_q=0), "block_q=0", "block sizes must be >= 1")
    expect_value_error(lambda: f(q, k, v, block_k=0), "block_k=0", "block sizes must be >= 1")
    expect_value_error(lambda: f(q, k, v, block_q=-2), "block_q=-2", "block sizes must be >= 1")
    expect_value_error(lambda: f(q, k, v, block_k=-1), "block_k=-1", "block sizes must be >= 1")
    expect_value_error(lambda: f(q, k[:, :, :0], v[:, :, :0]), "Sk = 0", "attention over zero keys is undefined")
    expect_value_error(
        lambda: f(q, k[:, :, :4], v[:, :, :4], causal=True), "causal, Sq=6, Sk=4", "causal needs Sq == Sk here"
    )


# ------------------------------------------------------------------------------------------ backward


def forward_for(q, k, v, causal, scale=None):
    """out and lse from the references (the backward is graded on its own)."""
    out = sdpa(q.double(), k.double(), v.double(), causal, scale).to(q.dtype)
    lse = reference_lse(q, k, causal, scale).to(torch.promote_types(q.dtype, torch.float32))
    return out, lse


@checks("flash_attention_backward")
def uniform_attention_gradients(ex):
    """q = 0 (uniform weights, non-causal): dk = 0 and dv_j = (sum_i dO_i) / Sk for every key"""
    _, k, v = random_qkv(1, 1, 5, 7, 4, 3)
    q = torch.zeros(1, 1, 5, 4, dtype=torch.float64)
    grad_out = torch.randn(1, 1, 5, 3, dtype=torch.float64)
    out, lse = forward_for(q, k, v, False)
    dq, dk, dv = ex.flash_attention_backward(q, k, v, out, lse, grad_out, block_q=2, block_k=3)
    label = describe(q=q, k=k, v=v) + ", q = 0, blocks 2x3"
    expect_close(dk, torch.zeros_like(k), input=label, what="dk", hint="dk = scale * ds^T q, and q = 0 here")
    expect_close(
        dv,
        (grad_out.sum(dim=2, keepdim=True) / 7).expand(1, 1, 7, 3),
        input=label,
        what="dv",
        hint="dv = p^T dO with p = exp(s - lse); with equal scores p = 1/Sk",
    )
    expect_close(dq, reference_grads(q, k, v, grad_out, False)[0], input=label, what="dq", hint=HINT_BACKWARD)


@checks("flash_attention_backward")
def matches_autograd_over_shapes_and_blocks(ex):
    """float64 vs SDPA's autograd: odd sizes, uneven blocks, causal and not, Sq != Sk, a custom scale"""
    for i, (B, H, Sq, Sk, D, Dv, bq, bk) in enumerate(CASES + CROSS):
        for causal in (False, True) if Sq == Sk else (False,):
            scale = 0.4 if i == 1 else None
            q, k, v = random_qkv(B, H, Sq, Sk, D, Dv, scale=1.5)
            grad_out = torch.randn(B, H, Sq, Dv, dtype=torch.float64)
            out, lse = forward_for(q, k, v, causal, scale)
            got = ex.flash_attention_backward(q, k, v, out, lse, grad_out, causal, bq, bk, scale)
            want = reference_grads(q, k, v, grad_out, causal, scale)
            label = describe(q=q, k=k, v=v) + f", causal={causal}, block_q={bq}, block_k={bk}, scale={scale}"
            for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
                expect_tensor(g, shape=w.shape, dtype=torch.float64, input=label, what=name)
                expect_close(g, w, input=label, what=name, hint=HINT_MASK if causal else HINT_BACKWARD)


@checks("flash_attention_backward")
def backward_low_precision_dtypes(ex):
    """fp16 and bf16: gradients in the inputs' dtypes, as accurate as SDPA's own in that dtype"""
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = random_qkv(1, 2, 19, 19, 8, 8, dtype=dtype)
        grad_out = torch.randn(1, 2, 19, 8).to(dtype)
        out, lse = forward_for(q, k, v, True)
        got = ex.flash_attention_backward(q, k, v, out, lse, grad_out, True, 8, 4)
        want = reference_grads(q, k, v, grad_out, True)
        base = baseline_grads(q, k, v, out, lse, grad_out, True)
        label = describe(q=q, k=k, v=v) + ", causal, lse float32"
        for name, g, w, b in zip(("dq", "dk", "dv"), got, want, base, strict=True):
            expect_tensor(g, shape=w.shape, dtype=dtype, input=label, what=name)
            expect_close(g, w, baseline=b, input=label, what=name, hint="compute in float32, cast each gradient back")


@checks("flash_attention_backward")
def never_materialises_the_score_matrix_backward(ex):
    """the size watch again, during the backward (S = 160, 32x32 tiles)"""
    S = 160
    q, k, v = random_qkv(1, 2, S, S, 8, 8, dtype=torch.float32)
    grad_out = torch.randn(1, 2, S, 8)
    out, lse = forward_for(q, k, v, True)
    with LargestTensor() as watch:
        got = ex.flash_attention_backward(q, k, v, out, lse, grad_out, True, 32, 32)
    label = describe(q=q, k=k, v=v) + ", causal, block_q=block_k=32"
    expect(
        watch.largest < S * S,
        "a tensor as large as the score matrix was created",
        input=label,
        expected=f"every tensor < {S * S} elements",
        got=f"{watch.largest} elements from {watch.op}",
        hint="recompute p one tile at a time from lse; never the whole (S, S) matrix",
    )
    want = reference_grads(q, k, v, grad_out, True)
    base = baseline_grads(q, k, v, out, lse, grad_out, True)
    for name, g, w, b in zip(("dq", "dk", "dv"), got, want, base, strict=True):
        expect_close(g, w, baseline=b, input=label, what=name, hint=HINT_BACKWARD)


@checks("flash_attention_backward")
def backward_refuses_bad_input(ex):
    """ValueError for an lse, out or grad_out of the wrong shape, and for block sizes < 1"""
    q, k, v = random_qkv(1, 2, 6, 6, 4, 4)
    grad_out = torch.randn(1, 2, 6, 4, dtype=torch.float64)
    out, lse = forward_for(q, k, v, False)
    f = ex.flash_attention_backward
    expect_value_error(lambda: f(q, k, v, out, lse[..., None], grad_out), "lse (1, 2, 6, 1)", "lse is (B, H, Sq)")
    expect_value_error(lambda: f(q, k, v, out, lse[:, :, :5], grad_out), "lse (1, 2, 5)", "one lse per query row")
    expect_value_error(lambda: f(q, k, v, out, lse, grad_out[:, :, :5]), "grad_out (1, 2, 5, 4)", "dO matches out")
    expect_value_error(lambda: f(q, k, v, out[..., :3], lse, grad_out), "out (1, 2, 6, 3)", "out is (B, H, Sq, Dv)")
    expect_value_error(lambda: f(q, k, v, out, lse, grad_out, block_k=0), "block_k=0", "block sizes must be >= 1")
    expect_value_error(lambda: f(q, k, v, out, lse, grad_out, block_q=-1), "block_q=-1", "block sizes must be >= 1")
    expect_value_error(
        lambda: f(q, k[:, :, :4], v[:, :, :4], out, lse, grad_out, causal=True),
        "causal, Sq=6, Sk=4",
        "causal: Sq == Sk",
    )


# ------------------------------------------------------------------------------------------ autograd function


@checks("flash_attention")
def gradcheck_float64(ex):
    """torch.autograd.gradcheck in float64, causal and not, uneven blocks"""
    for causal in (False, True):
        q, k, v = (t.requires_grad_(True) for t in random_qkv(1, 1, 6, 6, 3, 2))
        expect_gradcheck(
            lambda a, b, c, causal=causal: ex.flash_attention(a, b, c, causal, 4, 2),
            (q, k, v),
            input=describe(q=q, k=k, v=v) + f", causal={causal}, block_q=4, block_k=2",
            hint="backward returns (dq, dk, dv, None, None, None, None): one value per forward input",
        )


@checks("flash_attention")
def matches_sdpa_forward_and_gradients(ex):
    """float32 forward and .grad of q, k, v equal SDPA's (float64 oracle), causal and not, with a custom scale"""
    for B, H, Sq, Sk, D, Dv, bq, bk in CASES[1:3] + CROSS[:1]:
        for causal in (False, True) if Sq == Sk else (False,):
            scale = None if causal else 0.25
            q, k, v = (t.requires_grad_(True) for t in random_qkv(B, H, Sq, Sk, D, Dv, dtype=torch.float32))
            grad_out = torch.randn(B, H, Sq, Dv)
            out = ex.flash_attention(q, k, v, causal, bq, bk, scale)
            label = describe(q=q, k=k, v=v) + f", causal={causal}, scale={scale}"
            expect_close(
                out.detach(),
                sdpa(q.detach().double(), k.detach().double(), v.detach().double(), causal, scale),
                baseline=sdpa(q.detach(), k.detach(), v.detach(), causal, scale),
                input=label,
            )
            out.backward(grad_out)
            want = reference_grads(q, k, v, grad_out, causal, scale)
            for name, t, w in zip(("q", "k", "v"), (q, k, v), want, strict=True):
                expect(t.grad is not None, f"{name}.grad is None", input=label, expected="a gradient", got="None")
                expect_close(
                    t.grad,
                    w,
                    dtype=torch.float32,
                    input=label,
                    what=f"{name}.grad",
                    hint="pass causal, the block sizes and the scale saved on ctx to flash_attention_backward",
                )


@checks("flash_attention")
def saves_no_score_matrix(ex):
    """saved_tensors_hooks: autograd keeps only (S, D)-sized tensors and the lse, never an (S, S) one"""
    S = 96
    q, k, v = (t.requires_grad_(True) for t in random_qkv(1, 2, S, S, 8, 8, dtype=torch.float32))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out = ex.flash_attention(q, k, v, True, 32, 32)
    label = describe(q=q, k=k, v=v) + ", causal, 32x32 tiles"
    too_big = [s for s in saved if math.prod(s) >= 2 * S * S]
    expect(
        not too_big and len(saved) >= 4,
        "autograd saved a score-sized tensor" if too_big else "autograd saved too little for a backward",
        input=label,
        expected="q, k, v, out (1, 2, 96, 8) and lse (1, 2, 96)",
        got=str(saved),
        hint="ctx.save_for_backward(q, k, v, out, lse) and nothing of size (S, S); recompute p in backward",
    )
    out.sum().backward()
    expect(q.grad is not None and k.grad is not None and v.grad is not None, "a gradient is missing", input=label)
