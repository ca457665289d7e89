"""Checks for p03.flash_attention_fwd. References: `F.scaled_dot_product_attention` in float64 on the CPU (with
`enable_gqa=True`), `torch.logsumexp` of the float64 scores for the saved LSE, a closed form (identical keys make
attention a running mean of the values), and NaN guard elements around the output and the LSE. The tolerance
baseline is SDPA itself in the dtype under test."""

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
from llm_algo.check.restrictions import ATTENTION, LOGSUMEXP, SOFTMAX
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import (
    INT32_WRAP_STRIDE,
    UNIT_LAST_STRIDE,
    describe_layouts,
    distinct_layouts,
    views_past_int32,
)

checks = Checks("p03.flash_attention_fwd", triton=True)
checks.restrict(
    "flash_attention_fwd",
    kernel=True,
    forbid=[*ATTENTION, *LOGSUMEXP, *SOFTMAX],
    instead="compute out and lse in your @triton.jit kernel (SDPA and torch.logsumexp are the checks' references)",
)
HINT_ONLINE = "rescale both l_i and acc by alpha = exp2(m_old - m_new) before adding the new block"
HINT_MASK = "when MASKED, set s = -inf for keys >= seq_len_k and (causal) keys after the query"
LN2 = math.log(2.0)


def base2_scale(head_dim):
    """qk_scale as the kernel takes it: 1/sqrt(d) times log2(e)."""
    return 1.0 / math.sqrt(head_dim) * math.log2(math.e)


def sixteen_bit_dtypes():
    return [dtype for dtype in triton_dtypes() if dtype != torch.float32]


def scores64(q, k, causal, sm_scale=None, dtype=torch.float64):
    """Masked scores (B, H, S_q, S_k) on the CPU in `dtype` (float64: the oracle), K/V heads repeated for GQA."""
    q, k = q.cpu().to(dtype), k.cpu().to(dtype)
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return s


def sdpa64(q, k, v, causal, sm_scale=None):
    args = [t.double().cpu() for t in (q, k, v)]
    return F.scaled_dot_product_attention(*args, is_causal=causal, scale=sm_scale, enable_gqa=True)


def sdpa_same_dtype(q, k, v, causal, sm_scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale, enable_gqa=True)


def random_qkv(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, scale=1.0):
    device = triton_device()
    q = (torch.randn(batch, heads, seq_q, head_dim, device=device) * scale).to(dtype)
    k = (torch.randn(batch, kv_heads, seq_k, head_dim, device=device) * scale).to(dtype)
    v = torch.randn(batch, kv_heads, seq_k, head_dim, device=device).to(dtype)
    return q, k, v


def expect_attention(ex, q, k, v, causal, label, sm_scale=None, **blocks):
    """Run the learner's wrapper and compare out and lse with float64 references."""
    result = ex.flash_attention_fwd(q, k, v, causal=causal, sm_scale=sm_scale, **blocks)
    expect_attention_result(result, q, k, v, causal, label, sm_scale)


def expect_attention_result(result, q, k, v, causal, label, sm_scale=None, hint=None):
    """Compare (out, lse) from the learner's wrapper with float64 references (SDPA, top-left causal)."""
    out, lse = result
    batch, heads, seq_q, head_dim = q.shape
    expect_tensor(out, shape=q.shape, dtype=q.dtype, device=q.device.type, input=label, what="out")
    expect_tensor(lse, shape=(batch, heads, seq_q), dtype=torch.float32, input=label, what="lse")
    hint = hint or f"{HINT_ONLINE}; {HINT_MASK}; scale scores by 1/sqrt(d)"
    expect_close(
        out,
        sdpa64(q, k, v, causal, sm_scale),
        baseline=sdpa_same_dtype(q, k, v, causal, sm_scale),
        input=label,
        what="out",
        hint=hint,
    )
    s = scores64(q, k, causal, sm_scale)
    expect_close(
        lse,
        torch.logsumexp(s, dim=-1),
        baseline=torch.logsumexp(scores64(q, k, causal, sm_scale, torch.float32), dim=-1),
        input=label,
        what="lse",
        hint="lse = (m_i + log2(l_i)) * ln 2: natural log, per query row",
    )


# ------------------------------------------------------------------------------------------ flash_attention_fwd


@checks("flash_attention_fwd", gate=True)
def kernel_stays_inside_its_output(ex):
    """launches flash_attention_fwd_kernel on strided windows (S_q 37, S_k 45, 16x16 blocks); guards must survive"""
    batch, heads, seq_q, seq_k, head_dim = 1, 2, 37, 45, 32
    device = triton_device()
    q = random_window((batch, heads, seq_q, head_dim), (0, 0, 5, 8), device=device, dtype=torch.float16)
    k = random_window((batch, 1, seq_k, head_dim), (0, 0, 3, 8), device=device, dtype=torch.float16)
    v = random_window((batch, 1, seq_k, head_dim), (0, 0, 3, 8), device=device, dtype=torch.float16)
    out_buffer, out = guarded((batch, heads, seq_q, head_dim), (0, 1, 11, 8), device=device, dtype=torch.float16)
    lse_buffer, lse = guarded((batch * heads * seq_q,), (16,), device=device)
    ex.flash_attention_fwd_kernel[(3, batch * heads)](
        q, k, v, out, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        heads, 1, seq_q, seq_k, base2_scale(head_dim),
        HEAD_DIM=head_dim, BLOCK_M=16, BLOCK_N=16, IS_CAUSAL=False,
    )  # fmt: skip
    label = (
        f"q {tuple(q.shape)} strides {q.stride()}, k/v (1, 1, 45, 32), out a window with strides {out.stride()}, "
        "grid (3, 2), BLOCK_M=BLOCK_N=16, 2 query heads on 1 KV head"
    )
    expect_guard_untouched(out_buffer, out.shape, input=label, hint="mask the output store with offs_m < seq_len_q")
    expect_guard_untouched(lse_buffer, lse.shape, input=label, hint="mask the lse store with offs_m < seq_len_q")
    expect_close(
        out,
        sdpa64(q, k, v, False),
        baseline=sdpa_same_dtype(q, k, v, False),
        input=label,
        what="out",
        hint="address rows with the strides you are given; " + HINT_MASK,
    )


@checks("flash_attention_fwd")
def each_operand_in_its_own_layout(ex):
    """q a slice of a fused QKV, k with padded rows, v a window of a bigger buffer (every operand its own batch, head
    and row strides; head dim contiguous): causal, GQA 4:2, batch 2, S 37, 16x16 blocks, vs SDPA on the same values"""
    q, k, v = random_qkv(2, 4, 2, 37, 37, 32, torch.float16)
    lq, lk, lv = distinct_layouts(q, k, v, order=UNIT_LAST_STRIDE)
    label = describe_layouts(q=lq, k=lk, v=lv) + ", causal, 16x16 blocks"
    result = ex.flash_attention_fwd(lq, lk, lv, causal=True, block_m=16, block_n=16)
    expect_attention_result(result, q, k, v, True, label)


@checks("flash_attention_fwd")
def identical_keys_give_running_means(ex):
    """all keys equal: out is the mean of the values (causal: of values 0..i), lse = log(#keys seen) + q.k / sqrt(d)"""
    seq, head_dim = 40, 64
    device = triton_device()
    q = torch.randn(1, 2, seq, head_dim, device=device).half()
    key = torch.randn(head_dim, device=device).half()
    k = key.expand(1, 1, seq, head_dim).contiguous()
    v = torch.randn(1, 1, seq, head_dim, device=device).half()
    v64 = v.double().cpu()[0, 0]
    score = (q.double().cpu()[0] @ key.double().cpu()) / math.sqrt(head_dim)  # (2, seq)
    for causal in (False, True):
        counts = torch.arange(1, seq + 1, dtype=torch.float64) if causal else torch.full((seq,), float(seq))
        means = v64.cumsum(0) / counts[:, None] if causal else v64.mean(0).expand(seq, head_dim)
        out, lse = ex.flash_attention_fwd(q, k, v, causal=causal, block_m=16, block_n=16)
        label = f"q (1, 2, 40, 64) float16, one key repeated 40 times (1 KV head), causal={causal}, 16x16 blocks"
        expect_close(
            out,
            means.expand(1, 2, seq, head_dim),
            baseline=sdpa_same_dtype(q, k, v, causal),
            input=label,
            what="out",
            hint="every visible key gets the same weight; " + HINT_MASK,
        )
        expect_close(
            lse,
            (counts.log() + score)[None],
            input=label,
            what="lse",
            hint="lse = log(number of visible keys) + q.k / sqrt(d) here; store it in natural log",
        )


def random_cases():
    """(batch, heads, kv_heads, S_q, S_k, d, causal, blocks): odd lengths, batch of one, GQA, d 64 and 128, and
    BLOCK_N both smaller and larger than BLOCK_M under the causal mask."""
    cases = [
        (1, 2, 2, 37, 37, 64, False, {"block_m": 16, "block_n": 16}),
        (2, 4, 2, 50, 70, 64, False, {"block_m": 16, "block_n": 32}),
        (1, 4, 1, 45, 45, 64, True, {"block_m": 16, "block_n": 16}),
        (1, 2, 1, 33, 33, 128, True, {"block_m": 32, "block_n": 16}),
        (1, 2, 1, 41, 41, 64, True, {"block_m": 16, "block_n": 32}),  # a key block wider than the query block
        (1, 2, 2, 1, 1, 64, True, {}),
        (2, 3, 3, 20, 29, 32, False, {}),
    ]
    return cases


LARGE_CASES = [
    (2, 8, 2, 1000, 1000, 128, True, {}),
    (1, 4, 4, 777, 1234, 64, False, {}),
    (1, 8, 1, 2048, 2048, 128, True, {}),
]


@checks("flash_attention_fwd")
def matches_sdpa_causal_gqa_odd_lengths(ex):
    """vs SDPA (float64): causal and not, GQA, S not a multiple of the block, batch 1, d 64/128, fp16 (+bf16 on GPU)"""
    check_against_sdpa(ex, random_cases())


@checks("flash_attention_fwd", requires_compiled=True)
def offsets_past_2_31_elements(ex):
    """q (3, 3, 3, 64) in three views whose batch, then head, then row stride is 2**30 + 4096 elements (4.3 GB of
    fp16 each, one at a time): index 2 starts past 2**31 elements, where an int32 batch * stride_qb, head * stride_qh
    or row * stride_qm wraps; 50 keys, GQA 3:1, non-causal"""
    q, k, v = random_qkv(3, 3, 1, 3, 50, 64, torch.float16)
    for name, huge_q in views_past_int32(q, {0: "batch", 1: "head", 2: "row"}):
        label = describe_layouts(q=huge_q, k=k, v=v) + f" ({name} 2 of q at element {2 * INT32_WRAP_STRIDE})"
        hint = f"cast the {name} index (or its stride) to int64 before the product: 2 * stride passes 2**31 here"
        result = ex.flash_attention_fwd(huge_q, k, v)
        expect_attention_result(result, q, k, v, False, label + ", non-causal", hint=hint)


@checks("flash_attention_fwd", requires_compiled=True)
def matches_sdpa_at_scale(ex):
    """the same at sizes only a GPU grades in time: S = 1000, 777 x 1234 and 2048, GQA 4:1 and 8:1, d 64/128"""
    check_against_sdpa(ex, LARGE_CASES)


def check_against_sdpa(ex, cases):
    for dtype in sixteen_bit_dtypes():
        for batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, blocks in cases:
            q, k, v = random_qkv(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype)
            label = describe(q=q, k=k) + f", causal={causal}" + (f", {blocks}" if blocks else ", default blocks")
            expect_attention(ex, q, k, v, causal, label, **blocks)


@checks("flash_attention_fwd")
def each_query_head_reads_its_group(ex):
    """6 query heads on 2 and on 3 KV heads: head h must use KV head h // (H / H_kv), as SDPA's enable_gqa does"""
    for kv_heads in (2, 3):
        q, k, v = random_qkv(1, 6, kv_heads, 24, 24, 32, torch.float16)
        out, _ = ex.flash_attention_fwd(q, k, v, causal=False, block_m=16, block_n=16)
        group = 6 // kv_heads
        for head in range(6):
            per_kv = [sdpa64(q[:, head : head + 1], k[:, j : j + 1], v[:, j : j + 1], False) for j in range(kv_heads)]
            errors = [float((out[:, head : head + 1].double().cpu() - ref).abs().max()) for ref in per_kv]
            used = min(range(kv_heads), key=lambda j: errors[j])
            expect(
                used == head // group,
                f"query head {head} attends to the wrong KV head",
                input=describe(q=q, k=k) + f", group size {group}",
                expected=f"KV head {head // group} (= {head} // {group})",
                got=f"closest to KV head {used}",
                hint="kv_head = head // (num_heads // num_kv_heads): consecutive query heads share a KV head",
            )


@checks("flash_attention_fwd")
def large_scores_and_explicit_scale(ex):
    """scores in the hundreds (q, k scaled by 6) stay finite; an explicit sm_scale=0.3 replaces 1/sqrt(d)"""
    q, k, v = random_qkv(1, 2, 1, 50, 50, 64, torch.float16, scale=6.0)
    for causal, sm_scale in ((True, None), (False, 0.3)):
        label = describe(q=q, k=k) + f" with |scores| up to ~{float(scores64(q, k, False).abs().max()):.0f}"
        label += f", causal={causal}, sm_scale={sm_scale}"
        out, _ = ex.flash_attention_fwd(q, k, v, causal=causal, sm_scale=sm_scale, block_m=16, block_n=16)
        expect(
            bool(torch.isfinite(out).all()),
            "inf or nan in the output",
            input=label,
            expected="finite values",
            got=f"{int((~torch.isfinite(out)).sum())} non-finite values",
            hint="subtract the running max inside exp2; start m_i at -inf and l_i at 0",
        )
        expect_attention(ex, q, k, v, causal, label, sm_scale=sm_scale, block_m=16, block_n=16)


@checks("flash_attention_fwd")
def smallest_head_dim_and_separate_kv_strides(ex):
    """d = 16 (the smallest supported); k and v with different sequence strides (v's rows overlap: stride 8 < d = 16),
    so each is read with its own stride"""
    q, k, v = random_qkv(1, 2, 1, 50, 50, 16, torch.float16)  # 3 full key blocks of 16, then a partial one
    expect_attention(ex, q, k, v, False, describe(q=q, k=k) + ", d = 16", block_m=16, block_n=16)
    v = torch.randn(50 * 16, device=triton_device()).half().as_strided((1, 1, 50, 16), (800, 800, 8, 1))
    for causal in (False, True):
        label = describe(q=q, k=k) + f", k strides {k.stride()}, v strides {v.stride()}, causal={causal}"
        expect_attention(ex, q, k, v, causal, label, block_m=16, block_n=16)


@checks("flash_attention_fwd")
def refuses_or_computes_what_it_may_not_support(ex):
    """float32 inputs, causal with S_q != S_k, d = 80: refuse with a clear ValueError/TypeError, or be correct
    (SDPA in float64; causal top-left aligned, as SDPA's is_causal)"""
    may_support = [
        ("float32 q, k, v", random_qkv(1, 4, 2, 16, 16, 64, torch.float32), False),
        ("causal with S_q 16, S_k 24", random_qkv(1, 4, 2, 16, 24, 64, torch.float16), True),
        ("head_dim 80", random_qkv(1, 4, 2, 16, 16, 80, torch.float16), False),
    ]
    for label, (q, k, v), causal in may_support:
        expect_refused_or_correct(
            lambda q=q, k=k, v=v, causal=causal: ex.flash_attention_fwd(q, k, v, causal=causal),
            lambda result, q=q, k=k, v=v, causal=causal, label=label: expect_attention_result(
                result, q, k, v, causal, label + " (accepted, so it must be right)"
            ),
            input=label,
            hint="either raise ValueError with a message before launching, or compute it correctly",
        )


@checks("flash_attention_fwd")
def refuses_inputs_it_cannot_handle(ex):
    """5 heads on 2 KV heads, v longer than k, fp16 q with fp32 k and v (SDPA refuses mixed dtypes too), a
    non-contiguous head dim raise"""
    device = triton_device()
    q, k, v = random_qkv(1, 4, 2, 16, 16, 64, torch.float16)
    bad = [
        ("q float16, k and v float32", (q, k.float(), v.float()), False),
        ("5 query heads, 2 KV heads", (torch.randn(1, 5, 16, 64, device=device).half(), k, v), False),
        ("v with 8 more keys than k", (q, k, random_qkv(1, 4, 2, 16, 24, 64, torch.float16)[2]), False),
        ("q with a strided head dim", (torch.randn(1, 4, 16, 128, device=device).half()[..., ::2], k, v), False),
    ]
    for label, (bq, bk, bv), causal in bad:
        expect_refused(
            lambda bq=bq, bk=bk, bv=bv, causal=causal: ex.flash_attention_fwd(bq, bk, bv, causal=causal),
            input=label,
            hint="check H % H_kv, k.shape == v.shape, one dtype for q, k, v and stride(3) == 1 first",
        )


def naive_attention(q, k, v, causal: bool):
    """The PyTorch baseline: materialise the scores, mask, softmax in float32, multiply."""
    scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])  # (B, H, S, S)
    if causal:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1).to(q.dtype) @ v


def sdpa_flash(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def benchmark(ex):
    """B4 H32 S4096 d128 bf16, causal and not: yours vs SDPA as a user calls it (the default backend, named: cuDNN on an
    H200 with torch 2.11), SDPA forced to its FlashAttention-2 backend, and plain PyTorch attention."""
    batch, heads, seq, head_dim = 4, 32, 4096, 128
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    rows = []
    for causal in (False, True):
        flops = 4 * batch * heads * seq * seq * head_dim // (2 if causal else 1)
        shape = f"B4 H32 S4096 d128 bf16{' causal' if causal else ''}"
        rows.append(flops_row("flash_attention_fwd", shape, lambda c=causal: ex.flash_attention_fwd(q, k, v, c), flops))
        backend = sdpa_backend_name(q, k, v, causal=causal)
        rows.append(
            flops_row(
                f"SDPA default backend ({backend})",
                shape,
                lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
                flops,
            )
        )
        rows.append(flops_row("SDPA (flash backend)", shape, lambda c=causal: sdpa_flash(q, k, v, c), flops))
        rows += baseline_rows("softmax(q k^T) v", shape, naive_attention, (q, k, v, causal), flops=flops)
    return rows
