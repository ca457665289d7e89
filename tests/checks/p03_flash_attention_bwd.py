"""Checks for p03.flash_attention_bwd. References: float64 autograd of `F.scaled_dot_product_attention` on the CPU
(`enable_gqa=True`) for dQ, dK, dV; `(out * dout).sum(-1)` in float64 for delta; closed forms (identical keys: dQ = 0
and dV a running mean of dO); NaN guard elements around every gradient. The backward's inputs (out, lse) come from
float64 SDPA and `torch.logsumexp`, not from the learner's forward. The tolerance baseline is autograd of SDPA in the
dtype under test."""

import contextlib
import math

import torch
import torch.nn.functional as F

from llm_algo.bench import baseline_rows, flops_row, sdpa_backend_name
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
)
from llm_algo.check.restrictions import ATTENTION, AUTOGRAD, SOFTMAX
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import (
    INT32_WRAP_STRIDE,
    UNIT_LAST_STRIDE,
    describe_layouts,
    distinct_layouts,
    views_past_int32,
)

checks = Checks("p03.flash_attention_bwd", triton=True)
checks.restrict(
    "attention_delta",
    kernel=True,
    instead="compute rowsum(dout * out) in your @triton.jit kernel",
)
checks.restrict(
    "flash_attention_bwd",
    kernel=True,
    forbid=[*ATTENTION, *SOFTMAX, *AUTOGRAD],
    instead="compute dq, dk and dv in your @triton.jit kernels (autograd of SDPA is the checks' reference)",
)
HINT_DS = "dS = P * (dP - delta) with P = exp2(s * sm_scale * log2e - lse * log2e); dk and dq are scaled by sm_scale"


def sixteen_bit_dtypes():
    return [dtype for dtype in triton_dtypes() if dtype != torch.float32]


def strides3(*tensors):
    """batch, head and sequence strides of each tensor, flattened, in the kernels' argument order."""
    return [s for t in tensors for s in t.stride()[:3]]


def forward64(q, k, v, causal):
    """float64 out and lse (the backward's inputs), computed independently of the learner's forward."""
    q64, k64, v64 = (t.double().cpu() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, enable_gqa=True)
    k_rep = k64.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = q64 @ k_rep.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return out, torch.logsumexp(scores, dim=-1)


def grads_of_sdpa(q, k, v, dout, causal, dtype=torch.float64):
    """dq, dk, dv by autograd of SDPA in `dtype` (float64 on the CPU: the oracle; q's dtype: the baseline)."""
    if dtype == torch.float64:
        q, k, v, dout = (t.double().cpu() for t in (q, k, v, dout))
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    return torch.autograd.grad(out, leaves, dout)


def backward_inputs(batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, dtype):
    device = triton_device()
    q = torch.randn(batch, heads, seq_q, head_dim, device=device).to(dtype)
    k = torch.randn(batch, kv_heads, seq_k, head_dim, device=device).to(dtype)
    v = torch.randn(batch, kv_heads, seq_k, head_dim, device=device).to(dtype)
    dout = torch.randn(batch, heads, seq_q, head_dim, device=device).to(dtype)
    out, lse = forward64(q, k, v, causal)
    return q, k, v, out.to(device=device, dtype=dtype), lse.to(device=device, dtype=torch.float32), dout


def expect_gradients(got, q, k, v, dout, causal, label, hint=HINT_DS):
    oracle = grads_of_sdpa(q, k, v, dout, causal)
    baseline = grads_of_sdpa(q, k, v, dout, causal, dtype=q.dtype)
    for name, mine, want, base, like in zip(("dq", "dk", "dv"), got, oracle, baseline, (q, k, v), strict=True):
        expect_tensor(mine, shape=like.shape, dtype=like.dtype, device=like.device.type, input=label, what=name)
        expect_close(mine, want, baseline=base, input=label, what=name, hint=hint)


# ---------------------------------------------------------------------------------------------- attention_delta


@checks("attention_delta", gate=True)
def delta_kernel_stays_inside_its_output(ex):
    """launches attention_delta_kernel on strided windows (S 37, BLOCK_M 16); the guard after delta must survive"""
    batch, heads, seq, head_dim = 2, 3, 37, 32
    device = triton_device()
    out = random_window((batch, heads, seq, head_dim), (0, 0, 5, 8), device=device, dtype=torch.float16)
    dout = random_window((batch, heads, seq, head_dim), (0, 1, 0, 16), device=device, dtype=torch.float16)
    buffer, delta = guarded((batch * heads * seq,), (16,), device=device)
    ex.attention_delta_kernel[(3, batch * heads)](
        out, dout, delta, *strides3(out, dout), heads, seq, HEAD_DIM=head_dim, BLOCK_M=16
    )
    label = f"out strides {out.stride()}, dout strides {dout.stride()}, (2, 3, 37, 32) float16, grid (3, 6)"
    expect_guard_untouched(buffer, delta.shape, input=label, hint="mask the store with offs_m < seq_len_q")
    want = (out.double() * dout.double()).sum(-1).flatten()
    expect_close(delta, want, input=label, hint="address rows with their stride (stride_om), not with HEAD_DIM")


@checks("attention_delta")
def hand_checkable_rows(ex):
    """out row = [0, 1, ..., 15] / 8, dout row = 2 (then -1 on odd columns): delta = 30, then 30 - 3 * 64 / 8"""
    device = triton_device()
    row = torch.arange(16, dtype=torch.float32) / 8
    out = row.expand(1, 1, 2, 16).contiguous().half().to(device)
    dout = torch.full((1, 1, 2, 16), 2.0).half().to(device)
    dout[0, 0, 1, 1::2] = -1.0
    want = torch.tensor([[[30.0, 30.0 - 3 * 64 / 8]]], dtype=torch.float64)
    expect_close(
        ex.attention_delta(out, dout),
        want,
        input="out rows arange(16) / 8; dout 2, then -1 on odd columns",
        hint="delta is the sum over the head dim of out * dout, one number per row",
    )


@checks("attention_delta")
def random_rows_shapes_and_dtypes(ex):
    """random (B, H, S, d) with S not a multiple of the block, batch 1, d 64 and 128; fp16 (+bf16 on GPU); float32"""
    shapes = [(1, 1, 1, 64), (2, 3, 37, 64), (1, 4, 50, 128)] + ([(4, 32, 4099, 128)] if triton_compiled() else [])
    for dtype in sixteen_bit_dtypes():
        for shape in shapes:
            out, dout = (torch.randn(shape, device=triton_device()).to(dtype) for _ in range(2))
            delta = ex.attention_delta(out, dout)
            label = describe(out=out, dout=dout)
            expect_tensor(delta, shape=shape[:3], dtype=torch.float32, device=out.device.type, input=label)
            expect_close(
                delta,
                (out.double() * dout.double()).sum(-1),
                baseline=(out.float() * dout.float()).sum(-1),
                input=label,
                hint="upcast to float32 before multiplying; sum over the last axis",
            )


def expect_delta(got, out, dout, label, hint):
    """delta = rowsum(out * dout) vs float64, with the float32 rowsum as the tolerance baseline."""
    want = (out.double() * dout.double()).sum(-1)
    expect_close(got, want, baseline=(out.float() * dout.float()).sum(-1), input=label, hint=hint)


@checks("attention_delta")
def out_and_dout_through_their_own_strides(ex):
    """dout laid out (B, S, H, d) and viewed as (B, H, S, d); then out a slice of a fused tensor and dout with padded
    rows: out and dout are each read with their own strides"""
    shape = (2, 3, 20, 32)
    out = torch.randn(shape, device=triton_device()).half()
    dout = torch.randn(2, 20, 3, 32, device=triton_device()).half().transpose(1, 2)  # strides (1920, 32, 96, 1)
    label = describe(out=out, dout=dout) + f", out strides {out.stride()}, dout strides {dout.stride()}"
    expect_delta(ex.attention_delta(out, dout), out, dout, label, "pass out's strides with out and dout's with dout")
    out, dout = (torch.randn(shape, device=triton_device()).half() for _ in "od")
    lout, ldout = distinct_layouts(out, dout, order=UNIT_LAST_STRIDE)  # a fused slice and padded rows
    hint = "read out through stride_ob/oh/om and dout through stride_dob/doh/dom"
    expect_delta(ex.attention_delta(lout, ldout), out, dout, describe_layouts(out=lout, dout=ldout), hint)


@checks("attention_delta", requires_compiled=True)
def delta_offsets_past_2_31_elements(ex):
    """out (3, 3, 3, 64) in three views whose batch, then head, then row stride is 2**30 + 4096 elements (4.3 GB of
    fp16 each, one at a time): index 2 starts past 2**31 elements, where an int32 index * stride wraps"""
    out, dout = (torch.randn(3, 3, 3, 64, device=triton_device()).half() for _ in "od")
    for name, huge_out in views_past_int32(out, {0: "batch", 1: "head", 2: "row"}):
        label = describe_layouts(out=huge_out, dout=dout) + f" ({name} 2 of out at element {2 * INT32_WRAP_STRIDE})"
        hint = f"cast the {name} index (or its stride) to int64 before the product: 2 * stride passes 2**31 here"
        expect_delta(ex.attention_delta(huge_out, dout), out, dout, label, hint)


@checks("attention_delta")
def refuses_mismatched_shapes(ex):
    """out and dout of different shapes, a 3-D input, a strided head dim raise an error"""
    device = triton_device()
    a = torch.randn(1, 2, 8, 32, device=device).half()
    for label, pair in (
        ("out (1, 2, 8, 32), dout (1, 2, 9, 32)", (a, torch.randn(1, 2, 9, 32, device=device).half())),
        ("3-D out and dout", (a[0], a[0])),
        ("a head dim with stride 2", (torch.randn(1, 2, 8, 64, device=device).half()[..., ::2], a)),
    ):
        expect_refused(
            lambda pair=pair: ex.attention_delta(*pair),
            input=label,
            hint="check 4-D, equal shapes and stride(3) == 1 first",
        )


# ------------------------------------------------------------------------------------------ flash_attention_bwd


@checks("flash_attention_bwd", gate=True)
def kernels_stay_inside_their_gradients(ex):
    """launches both kernels on strided NaN-guarded dq/dk/dv windows (S_q 37, S_k 45, 16x16 blocks, GQA 2:1)"""
    batch, heads, kv_heads, seq_q, seq_k, head_dim = 1, 2, 1, 37, 45, 32
    device, half = triton_device(), torch.float16
    q = random_window((batch, heads, seq_q, head_dim), (0, 0, 3, 8), device=device, dtype=half)
    k = random_window((batch, kv_heads, seq_k, head_dim), (0, 0, 5, 8), device=device, dtype=half)
    v = random_window((batch, kv_heads, seq_k, head_dim), (0, 0, 5, 8), device=device, dtype=half)
    dout = torch.randn(batch, heads, seq_q, head_dim, device=device).half()
    out, lse = forward64(q, k, v, False)
    lse = lse.float().to(device)
    delta = (out * dout.double().cpu()).sum(-1).float().to(device)
    dq_buffer, dq = guarded(tuple(q.shape), (0, 1, 7, 8), device=device, dtype=half)
    dk_buffer, dk = guarded(tuple(k.shape), (0, 1, 9, 8), device=device, dtype=half)
    dv_buffer, dv = guarded(tuple(k.shape), (0, 0, 9, 16), device=device, dtype=half)
    scale = 1.0 / math.sqrt(head_dim)
    meta = {"HEAD_DIM": head_dim, "BLOCK_M": 16, "BLOCK_N": 16, "IS_CAUSAL": False}
    ex.flash_attention_bwd_dkdv_kernel[(3, batch * kv_heads)](
        q, k, v, dout, lse, delta, dk, dv, *strides3(q, k, v, dout, dk, dv),
        heads, kv_heads, seq_q, seq_k, scale, **meta,
    )  # fmt: skip
    ex.flash_attention_bwd_dq_kernel[(3, batch * heads)](
        q, k, v, dout, lse, delta, dq, *strides3(q, k, v, dout, dq), heads, kv_heads, seq_q, seq_k, scale, **meta
    )
    label = (
        "q (1, 2, 37, 32), k/v (1, 1, 45, 32) float16 strided windows; dq/dk/dv windows of NaN buffers; 16x16 blocks"
    )
    for name, buffer, window in (("dq", dq_buffer, dq), ("dk", dk_buffer, dk), ("dv", dv_buffer, dv)):
        expect_guard_untouched(
            buffer,
            window.shape,
            input=label + f" ({name})",
            hint=f"mask the {name} store: rows < seq_len_q for dq, keys < seq_len_k for dk and dv",
        )
    expect_gradients((dq, dk, dv), q, k, v, dout, False, label, hint=HINT_DS + "; use the strides you are given")


def random_cases():
    """(batch, heads, kv_heads, S_q, S_k, d, causal): odd lengths, batch of one, GQA, d 64 and 128, S_q != S_k."""
    cases = [
        (1, 2, 2, 37, 37, 64, False),
        (1, 4, 2, 45, 45, 64, True),
        (2, 2, 1, 30, 51, 64, False),
        (1, 2, 1, 33, 33, 128, True),
        (1, 1, 1, 1, 1, 64, True),
    ]
    return cases


LARGE_CASES = [(2, 8, 2, 1000, 1000, 128, True), (1, 4, 4, 777, 1234, 64, False), (1, 8, 1, 2048, 2048, 128, True)]


@checks("flash_attention_bwd")
def each_operand_in_its_own_layout(ex):
    """q, k, v, out, lse and the incoming gradient dout each in a layout of its own (fused-QKV slices, padded rows,
    windows of bigger buffers; head dim contiguous): causal, GQA 2:1, batch 2, S 21, vs float64 autograd of SDPA on
    the same values"""
    q, k, v, out, lse, dout = backward_inputs(2, 2, 1, 21, 21, 32, True, torch.float16)
    views = distinct_layouts(q, k, v, out, lse, dout, order=UNIT_LAST_STRIDE)
    label = describe_layouts(**dict(zip(("q", "k", "v", "out", "lse", "dout"), views, strict=True))) + ", causal"
    got = ex.flash_attention_bwd(*views, causal=True)
    hint = "address q, k, v, out and dout each with its own strides (dout is not laid out like q or out)"
    expect_gradients(got, q, k, v, dout, True, label, hint=hint)


@checks("flash_attention_bwd")
def matches_autograd_of_sdpa(ex):
    """dq, dk, dv vs float64 autograd of SDPA: causal and not, GQA, odd lengths, batch 1, d 64/128, fp16"""
    check_against_autograd(ex, random_cases(), torch.float16)


@checks("flash_attention_bwd", requires_compiled=True)
def offsets_past_2_31_elements(ex):
    """q (3, 3, 3, 64) in three views whose batch, then head, then row stride is 2**30 + 4096 elements (4.3 GB of
    fp16 each, one at a time): index 2 starts past 2**31 elements, where an int32 index * stride wraps (in the dQ
    kernel, and in the dK/dV kernel's loads of q); 50 keys, GQA 3:1, non-causal"""
    q, k, v, out, lse, dout = backward_inputs(3, 3, 1, 3, 50, 64, False, torch.float16)
    for name, huge_q in views_past_int32(q, {0: "batch", 1: "head", 2: "row"}):
        label = describe_layouts(q=huge_q, k=k, v=v) + f" ({name} 2 of q at element {2 * INT32_WRAP_STRIDE})"
        hint = f"cast the {name} index (or its stride) to int64 before the product: 2 * stride passes 2**31 here"
        got = ex.flash_attention_bwd(huge_q, k, v, out, lse, dout, causal=False)
        expect_gradients(got, q, k, v, dout, False, label + ", non-causal", hint=hint)


@checks("flash_attention_bwd", requires_compiled=True)
def matches_autograd_of_sdpa_bf16(ex):
    """the same cases in bfloat16 (Triton's interpreter has no bfloat16; each dtype compiles its own kernels)"""
    check_against_autograd(ex, random_cases(), torch.bfloat16)


@checks("flash_attention_bwd", requires_compiled=True)
def matches_autograd_of_sdpa_at_scale(ex):
    """fp16 at sizes only a GPU grades in time: S = 1000, 777 x 1234 and 2048, GQA 4:1 and 8:1, d 64/128"""
    check_against_autograd(ex, LARGE_CASES, torch.float16)


@checks("flash_attention_bwd", requires_compiled=True)
def matches_autograd_of_sdpa_at_scale_bf16(ex):
    """the same large cases in bfloat16"""
    check_against_autograd(ex, LARGE_CASES, torch.bfloat16)


def check_against_autograd(ex, cases, dtype):
    """One dtype per check: on an H200 both dtypes in one check took 35 s of its 60 s limit (compiling)."""
    for batch, heads, kv_heads, seq_q, seq_k, head_dim, causal in cases:
        q, k, v, out, lse, dout = backward_inputs(batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, dtype)
        label = describe(q=q, k=k) + f", causal={causal}"
        got = ex.flash_attention_bwd(q, k, v, out, lse, dout, causal=causal)
        expect(
            isinstance(got, tuple) and len(got) == 3,
            "flash_attention_bwd must return (dq, dk, dv)",
            input=label,
            expected="a tuple of 3 tensors",
            got=type(got).__name__,
        )
        expect_gradients(got, q, k, v, dout, causal, label)


@checks("flash_attention_bwd")
def kernels_with_unequal_blocks(ex):
    """both kernels launched directly with the GPU's block shapes scaled down (dK/dV 16 x 32, dQ 32 x 16): causal,
    GQA 4:2, S = 45 (the wrapper uses equal 16 x 16 blocks on the interpreter, which would hide a loop bound written
    with the wrong block size)"""
    batch, heads, kv_heads, seq, head_dim = 1, 4, 2, 45, 32
    q, k, v, out, lse, dout = backward_inputs(batch, heads, kv_heads, seq, seq, head_dim, True, torch.float16)
    delta = (out.double() * dout.double()).sum(-1).float()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    scale = 1.0 / math.sqrt(head_dim)
    shapes = dict(HEAD_DIM=head_dim, IS_CAUSAL=True)
    ex.flash_attention_bwd_dkdv_kernel[(-(-seq // 32), batch * kv_heads)](
        q, k, v, dout, lse, delta, dk, dv, *strides3(q, k, v, dout, dk, dv),
        heads, kv_heads, seq, seq, scale, BLOCK_M=16, BLOCK_N=32, **shapes,
    )  # fmt: skip
    ex.flash_attention_bwd_dq_kernel[(-(-seq // 32), batch * heads)](
        q, k, v, dout, lse, delta, dq, *strides3(q, k, v, dout, dq),
        heads, kv_heads, seq, seq, scale, BLOCK_M=32, BLOCK_N=16, **shapes,
    )  # fmt: skip
    label = describe(q=q, k=k) + ", causal, dK/dV kernel BLOCK_M=16 BLOCK_N=32, dQ kernel BLOCK_M=32 BLOCK_N=16"
    expect_gradients(
        (dq, dk, dv),
        q,
        k,
        v,
        dout,
        True,
        label,
        hint="causal loop bounds: the dQ loop runs to min(start_m + BLOCK_M, S_k) (the block's last row), the dK/dV "
        "loop starts at start_n rounded down to BLOCK_M",
    )


@checks("flash_attention_bwd")
def identical_keys_closed_form(ex):
    """all keys equal: softmax is flat, so dQ = 0 exactly, and dV_j is the mean of dO over the queries that see key j"""
    seq, head_dim = 40, 64
    device = triton_device()
    q = torch.randn(1, 2, seq, head_dim, device=device).half()
    k = torch.randn(head_dim, device=device).half().expand(1, 1, seq, head_dim).contiguous()
    v = torch.randn(1, 1, seq, head_dim, device=device).half()
    dout = torch.randn(1, 2, seq, head_dim, device=device).half()
    do64 = dout.double().cpu()
    for causal in (False, True):
        out, lse = forward64(q, k, v, causal)
        dq, _, dv = ex.flash_attention_bwd(q, k, v, out.half().to(device), lse.float().to(device), dout, causal=causal)
        if causal:  # query i spreads 1/(i+1) over keys 0..i: dV_j = sum_{i >= j} dO_i / (i + 1), summed over heads
            weighted = do64 / torch.arange(1, seq + 1, dtype=torch.float64)[:, None]
            want_dv = weighted.flip(2).cumsum(2).flip(2).sum(1, keepdim=True)
        else:
            want_dv = (do64.sum(2, keepdim=True) / seq).sum(1, keepdim=True).expand(1, 1, seq, head_dim)
        label = f"q (1, 2, 40, 64) float16, one key repeated 40 times (1 KV head), causal={causal}"
        base_dq, _, base_dv = grads_of_sdpa(q, k, v, dout, causal, dtype=q.dtype)
        expect_close(
            dq,
            torch.zeros(q.shape, dtype=torch.float64),
            baseline=base_dq,
            input=label,
            what="dq",
            hint="dS = P * (dP - delta): each row of dS sums to zero, so with equal keys dQ = dS K = 0",
        )
        expect_close(
            dv,
            want_dv,
            baseline=base_dv,
            input=label,
            what="dv",
            hint="dV = P^T dO summed over the query heads of the group; causal: key j is seen by queries >= j",
        )


@checks("flash_attention_bwd")
def gqa_gradients_sum_over_the_group(ex):
    """6 query heads on 2 KV heads: dK and dV of each KV head are the sums over its 3 query heads"""
    q, k, v, out, lse, dout = backward_inputs(1, 6, 2, 24, 24, 32, False, torch.float16)
    _, dk, dv = ex.flash_attention_bwd(q, k, v, out, lse, dout)
    _, want_dk, want_dv = grads_of_sdpa(q, k, v, dout, False)
    _, base_dk, base_dv = grads_of_sdpa(q, k, v, dout, False, dtype=q.dtype)
    for name, mine, want, base in (("dk", dk, want_dk, base_dk), ("dv", dv, want_dv, base_dv)):
        for kv_head in range(2):
            expect_close(
                mine[:, kv_head],
                want[:, kv_head],
                baseline=base[:, kv_head],
                input=describe(q=q, k=k) + ", group size 3",
                what=f"{name} of KV head {kv_head} (the sum over query heads {3 * kv_head}..{3 * kv_head + 2})",
                hint="loop over every query head of the group (head = kv_head * group + i) and accumulate into dk, dv",
            )


@checks("flash_attention_bwd")
def non_contiguous_lse(ex):
    """lse laid out (B, S_q, H) and viewed as (B, H, S_q): made contiguous before the kernels index it"""
    q, k, v, out, lse, dout = backward_inputs(1, 2, 1, 24, 24, 32, True, torch.float16)
    lse = lse.transpose(1, 2).contiguous().transpose(1, 2)  # same values, strides (48, 1, 2)
    got = ex.flash_attention_bwd(q, k, v, out, lse, dout, causal=True)
    expect_gradients(
        got,
        q,
        k,
        v,
        dout,
        True,
        describe(q=q) + f", causal, lse strides {lse.stride()}",
        hint="the kernels index lse as (B * H, S_q) rows: pass lse.contiguous()",
    )


@checks("flash_attention_bwd")
def refuses_or_computes_what_it_may_not_support(ex):
    """float32 inputs and causal with S_q 16, S_k 24 (consistent out and lse, top-left causal as SDPA's is_causal):
    refuse with a clear ValueError/TypeError, or return the gradients of SDPA"""
    for label, args, causal in (
        ("float32 inputs", backward_inputs(1, 2, 1, 16, 16, 32, False, torch.float32), False),
        ("causal with S_q 16, S_k 24", backward_inputs(1, 2, 1, 16, 24, 32, True, torch.float16), True),
    ):
        q, k, v, _, _, dout = args
        expect_refused_or_correct(
            lambda args=args, causal=causal: ex.flash_attention_bwd(*args, causal=causal),
            lambda got, q=q, k=k, v=v, dout=dout, causal=causal, label=label: expect_gradients(
                got, q, k, v, dout, causal, label + " (accepted, so it must be right)"
            ),
            input=label,
            hint="either raise ValueError with a message before launching, or compute the gradients correctly",
        )


@checks("flash_attention_bwd")
def refuses_inputs_it_cannot_handle(ex):
    """dout of the wrong shape, lse of the wrong length, 5 query heads on 2 KV heads and a strided head dim in q
    raise an error"""
    q, k, v, out, lse, dout = backward_inputs(1, 2, 1, 16, 16, 32, False, torch.float16)
    q5, k2, v2, out5, lse5, dout5 = backward_inputs(1, 4, 2, 16, 16, 32, False, torch.float16)
    q5, out5, dout5 = (torch.cat((t, t[:, :1]), dim=1) for t in (q5, out5, dout5))  # 5 heads: no GQA grouping
    lse5 = torch.cat((lse5, lse5[:, :1]), dim=1)
    q_strided = torch.randn(1, 2, 16, 64, device=q.device).half()[..., ::2]
    bad = [
        ("5 query heads, 2 KV heads", (q5, k2, v2, out5, lse5, dout5), False),
        ("dout (1, 2, 15, 32)", (q, k, v, out, lse, dout[:, :, :15]), False),
        ("lse (1, 2, 19) for S_q 16", (q, k, v, out, torch.cat((lse, lse[..., :3]), dim=-1), dout), False),
        ("q with a head dim of stride 2", (q_strided, k, v, out, lse, dout), False),
    ]
    for label, args, causal in bad:
        expect_refused(
            lambda args=args, causal=causal: ex.flash_attention_bwd(*args, causal=causal),
            input=label,
            hint="check shapes, H % H_kv, lse length and stride(3) == 1 before launching",
        )


def naive_forward_backward(q, k, v, dout, causal: bool):
    """The PyTorch baseline: materialised scores, float32 softmax, autograd for the gradients."""
    scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1), -math.inf)
    out = torch.softmax(scores, dim=-1).to(q.dtype) @ v
    return torch.autograd.grad(out, (q, k, v), dout)


def benchmark(ex):
    """B4 H32 S4096 d128 bf16, causal and not: your backward vs SDPA's default backend's (named) and its flash
    backend's; forward + backward of yours and of plain PyTorch attention (eager and torch.compile)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, heads, seq, head_dim = 4, 32, 4096, 128
    q, k, v, dout = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    rows = []
    for causal in (False, True):
        fwd_flops = 4 * batch * heads * seq * seq * head_dim // (2 if causal else 1)
        shape = f"B4 H32 S4096 d128 bf16{' causal' if causal else ''}"
        out, lse = ex.flash_attention_fwd(q.detach(), k.detach(), v.detach(), causal=causal)
        rows.append(
            flops_row(
                "flash_attention_bwd",
                shape,
                lambda o=out, s=lse, c=causal: ex.flash_attention_bwd(q, k, v, o, s, dout, causal=c),
                fwd_flops * 5 // 2,
            )
        )
        default = sdpa_backend_name(q, k, v, causal=causal)
        for label, forced in (
            (f"SDPA default backend ({default}) backward", contextlib.nullcontext()),
            ("SDPA (flash) backward", sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
        ):
            with forced:
                sdpa_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                rows.append(
                    flops_row(
                        label,
                        shape,
                        lambda o=sdpa_out: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True),
                        fwd_flops * 5 // 2,
                    )
                )
            del sdpa_out

        def yours_fwd_bwd(c=causal):
            o, s = ex.flash_attention_fwd(q.detach(), k.detach(), v.detach(), causal=c)
            return ex.flash_attention_bwd(q, k, v, o, s, dout, causal=c)

        rows.append(flops_row("yours fwd + bwd", shape, yours_fwd_bwd, fwd_flops * 7 // 2))
        rows += baseline_rows(
            "softmax(q k^T) v fwd + bwd",
            shape,
            naive_forward_backward,
            (q, k, v, dout, causal),
            flops=fwd_flops * 7 // 2,
        )
    return rows
