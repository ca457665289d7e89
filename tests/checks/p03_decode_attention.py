"""Checks for p03.decode_attention. References: float64 partial softmax states computed slice by slice with torch
(written as a padded reshape, not a loop over blocks), `F.scaled_dot_product_attention` in float64 per sequence
(with `enable_gqa=True`) and `torch.logsumexp` of the float64 scores, a closed form for the combine (the
log-sum-exp mixture of normalised slice outputs), an independent statement of the split rule, and NaN guards around
every output and in every cache slot past a sequence's length."""

import math

import torch
import torch.nn.functional as F

from llm_algo.bench import BenchRow, bandwidth_row, baseline_rows, copy_row, graph_bandwidth_row
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused_or_correct,
    expect_tensor,
    expect_value_error,
)
from llm_algo.check.restrictions import ATTENTION, LOGSUMEXP, MATMUL, SOFTMAX
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.decode import sdpa_per_sequence, slice_states
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import UNIT_LAST_STRIDE, describe_layouts, distinct_layouts, with_layout

checks = Checks("p03.decode_attention", triton=True)
checks.in_place("combine_splits", "out")  # the caller's output buffer
checks.restrict(
    "decode_partials",
    "combine_splits",
    "decode_attention",
    kernel=True,
    forbid=[*ATTENTION, *SOFTMAX, *LOGSUMEXP, *MATMUL],
    instead="compute the partial states and their combination in your @triton.jit kernels (SDPA, softmax and "
    "logsumexp are the checks' references)",
)
HINT_ONLINE = "rescale both l_i and acc by alpha = exp2(m_old - m_new) before adding the block"
HINT_LENS = "stop each split at min(start + split_size, seq_lens[b]) and mask keys >= that end"
HINT_COMBINE = "M = max_s m_s, w_s = exp(m_s - M), out = sum(w acc) / sum(w l), lse = M + log(sum(w l))"
HINT_SEQ_LENS_STRIDE = (
    "the kernel reads seq_lens_ptr + b: pass seq_lens.contiguous() (or its stride), or refuse a strided seq_lens with "
    "a ValueError"
)


def sixteen_bit_dtypes():
    return [dtype for dtype in triton_dtypes() if dtype != torch.float32]


def random_cache(batch, heads, kv_heads, cache_len, head_dim, dtype, lens, scale=1.0):
    """q (B, H, d), caches (B, H_kv, S, d) with NaN in every slot at or past seq_lens[b], seq_lens int32."""
    device = triton_device()
    q = (torch.randn(batch, heads, head_dim, device=device) * scale).to(dtype)
    k = (torch.randn(batch, kv_heads, cache_len, head_dim, device=device) * scale).to(dtype)
    v = torch.randn(batch, kv_heads, cache_len, head_dim, device=device).to(dtype)
    for b, n in enumerate(lens):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    return q, k, v, torch.tensor(lens, device=device, dtype=torch.int32)


def expect_partials(result, q, k, v, seq_lens, split_size, label, sm_scale=None):
    m, lsum, acc = result
    batch, heads, head_dim = q.shape
    n_splits = -(-k.shape[2] // split_size)
    expect_tensor(m, shape=(batch, heads, n_splits), dtype=torch.float32, input=label, what="m")
    expect_tensor(lsum, shape=(batch, heads, n_splits), dtype=torch.float32, input=label, what="l")
    expect_tensor(acc, shape=(batch, heads, n_splits, head_dim), dtype=torch.float32, input=label, what="acc")
    m64, l64, acc64 = slice_states(q, k, v, seq_lens, split_size, sm_scale)
    m32, l32, acc16 = slice_states(q, k, v, seq_lens, split_size, sm_scale, torch.float32, p_dtype=q.dtype)
    expect_close(
        m,
        m64,
        baseline=m32,
        input=label,
        what="m (max score of each slice, natural log units)",
        hint="store m_i * ln 2 when the loop works in base 2; empty slices keep -inf; " + HINT_LENS,
    )
    expect_close(lsum, l64, baseline=l32, input=label, what="l (sum of exp(x - m) per slice)", hint=HINT_ONLINE)
    expect_close(
        acc,
        acc64,
        baseline=acc16,
        dtype=q.dtype,
        input=label,
        what="acc (unnormalised sum of p v per slice)",
        hint=HINT_ONLINE + "; query head h reads KV head h // (H_q // H_kv)",
    )


def expect_decode(result, q, k, v, seq_lens, label, sm_scale=None):
    out, lse = result
    expect_tensor(out, shape=q.shape, dtype=q.dtype, device=q.device.type, input=label, what="out")
    expect_tensor(lse, shape=q.shape[:2], dtype=torch.float32, input=label, what="lse")
    out64, lse64 = sdpa_per_sequence(q, k, v, seq_lens, sm_scale)
    out_same, _ = sdpa_per_sequence(q, k, v, seq_lens, sm_scale, dtype=q.dtype)
    _, lse32 = sdpa_per_sequence(q, k, v, seq_lens, sm_scale, dtype=torch.float32)
    expect_close(out, out64, baseline=out_same, input=label, what="out", hint=f"{HINT_LENS}; {HINT_COMBINE}")
    expect_close(lse, lse64, baseline=lse32, input=label, what="lse", hint="lse = M + log(sum_s w_s l_s), natural log")


# ------------------------------------------------------------------------------------------------ decode_partials


@checks("decode_partials", gate=True)
def split_kernel_stays_inside_its_outputs(ex):
    """launches decode_split_kernel on strided cache windows (S 45, lengths 45 and 13, 6 query heads on 2 KV heads,
    2 splits of 32 keys, BLOCK_N 16); the guards after m, l, acc must survive and the values be right"""
    batch, heads, kv_heads, cache_len, head_dim, split = 2, 6, 2, 45, 32, 32
    device = triton_device()
    q = random_window((batch, heads, head_dim), (0, 1, 8), device=device, dtype=torch.float16)
    k = random_window((batch, kv_heads, cache_len, head_dim), (0, 0, 3, 8), device=device, dtype=torch.float16)
    v = random_window((batch, kv_heads, cache_len, head_dim), (0, 0, 3, 8), device=device, dtype=torch.float16)
    k[1, :, 13:] = float("nan")
    v[1, :, 13:] = float("nan")
    seq_lens = torch.tensor([45, 13], device=device, dtype=torch.int32)
    n_splits = 2
    rows = batch * heads * n_splits
    m_buffer, m = guarded((rows,), (16,), device=device)
    l_buffer, lsum = guarded((rows,), (16,), device=device)
    acc_buffer, acc = guarded((rows * head_dim,), (64,), device=device)
    ex.decode_split_kernel[(n_splits, batch, kv_heads)](
        q, k, v, seq_lens, m, lsum, acc,
        q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        heads, kv_heads, n_splits, split, 1.0 / math.sqrt(head_dim) * math.log2(math.e),
        HEAD_DIM=head_dim, BLOCK_G=16, BLOCK_N=16,
    )  # fmt: skip
    label = (
        f"q {tuple(q.shape)} strides {q.stride()}, k/v {tuple(k.shape)} strides {k.stride()}, seq_lens [45, 13] "
        "(NaN past 13 in sequence 1), grid (2, 2, 2), split_size 32, BLOCK_G 16, BLOCK_N 16"
    )
    hint = "mask the stores with the group's real heads (offs_g < H_q // H_kv)"
    expect_guard_untouched(m_buffer, m.shape, input=label, hint=hint)
    expect_guard_untouched(l_buffer, lsum.shape, input=label, hint=hint)
    expect_guard_untouched(acc_buffer, acc.shape, input=label, hint=hint)
    shaped = (m.view(batch, heads, n_splits), lsum.view(batch, heads, n_splits), acc.view(batch, heads, n_splits, -1))
    expect_partials(shaped, q, k, v, seq_lens, split, label)


PARTIAL_CASES = [
    # (batch, H_q, H_kv, S, d, lengths, split_size, block_n)
    (2, 8, 2, 100, 32, [100, 37], 32, 16),  # GQA 4:1, S not a multiple of the split, one sequence shorter
    (2, 8, 2, 100, 32, [100, 70], 64, None),  # the default block_n (16 here, 64 on a GPU)
    (3, 3, 3, 50, 64, [1, 50, 17], 16, 16),  # MHA (g = 1), a sequence of one token, slices of one block
    (1, 6, 2, 70, 128, [70], 48, 16),  # g = 3 (not a power of two), d 128, a split of 3 blocks
    (2, 4, 1, 64, 16, [5, 64], 32, 32),  # g = 4 on 1 KV head, d 16, the second split of sequence 0 empty
]


@checks("decode_partials")
def each_operand_in_its_own_layout(ex):
    """q a slice of a fused QKV, k with padded rows, v a window of a bigger cache (every operand its own strides, head
    dim contiguous), vs the float64 slices of the same values; then seq_lens every 3rd element of a buffer: refused or
    right"""
    q, k, v, seq_lens = random_cache(2, 6, 2, 45, 32, torch.float16, [45, 20])
    lq, lk, lv = distinct_layouts(q, k, v, order=UNIT_LAST_STRIDE)
    label = describe_layouts(q=lq, k=lk, v=lv) + ", seq_lens [45, 20] (NaN past 20), split_size 32, block_n 16"
    result = ex.decode_partials(lq, lk, lv, seq_lens, 32, block_n=16)
    expect_partials(result, q, k, v, seq_lens, 32, label)
    strided_lens = with_layout(seq_lens, "fused_slice")
    label = (
        f"seq_lens [45, 20] with stride {strided_lens.stride(0)} (a column of a (2, 3) int32 tensor), contiguous q/k/v"
    )
    expect_refused_or_correct(
        lambda: ex.decode_partials(q, k, v, strided_lens, 32, block_n=16),
        lambda result: expect_partials(result, q, k, v, seq_lens, 32, label + " (accepted, so it must be right)"),
        input=label,
        hint=HINT_SEQ_LENS_STRIDE,
    )


@checks("decode_partials")
def partials_match_float64_slices(ex):
    """(m, l, acc) of every slice vs float64: GQA 4:1, 1:1 and 3:1, d 16 to 128, lengths 1 to S, empty slices,
    NaN in every slot past a sequence's length; fp16 (+bf16 on a GPU)"""
    for dtype in sixteen_bit_dtypes():
        for batch, heads, kv_heads, cache_len, head_dim, lens, split, block_n in PARTIAL_CASES:
            q, k, v, seq_lens = random_cache(batch, heads, kv_heads, cache_len, head_dim, dtype, lens)
            label = describe(q=q, k=k) + f", seq_lens {lens}, split_size {split}, block_n {block_n}"
            result = ex.decode_partials(q, k, v, seq_lens, split, block_n=block_n)
            expect_partials(result, q, k, v, seq_lens, split, label)


@checks("decode_partials")
def large_scores_and_explicit_scale(ex):
    """scores in the hundreds (q, k scaled by 6) stay finite and right; an explicit sm_scale=0.3 replaces 1/sqrt(d)"""
    q, k, v, seq_lens = random_cache(2, 4, 2, 60, 64, torch.float16, [60, 29], scale=6.0)
    for sm_scale in (None, 0.3):
        label = describe(q=q, k=k) + f", |q k| up to ~{6 * 6 * 8 * 3:.0f}, seq_lens [60, 29], sm_scale={sm_scale}"
        m, lsum, acc = ex.decode_partials(q, k, v, seq_lens, 32, sm_scale=sm_scale, block_n=16)
        expect(
            bool(torch.isfinite(lsum).all() and torch.isfinite(acc).all()),
            "inf or nan in l or acc",
            input=label,
            expected="finite values",
            got=f"{int((~torch.isfinite(acc)).sum())} non-finite values in acc",
            hint="subtract the running max inside exp2; start m_i at -inf and l_i at 0",
        )
        expect_partials((m, lsum, acc), q, k, v, seq_lens, 32, label, sm_scale=sm_scale)


@checks("decode_partials")
def refuses_inputs_it_cannot_handle(ex):
    """split_size not a multiple of block_n or 0, a length of 0 (also in a batch of one) or past the cache, 5 heads
    on 2 KV heads, mixed dtypes, float seq_lens, a 4-D q, v longer than k, a strided head dim (on a GPU: seq_lens on
    the CPU): ValueError"""
    q, k, v, seq_lens = random_cache(2, 4, 2, 32, 32, torch.float16, [32, 20])
    device = triton_device()
    bad = [
        ("split_size 24 with block_n 16", (q, k, v, seq_lens), 24),
        ("seq_lens [0, 20]", (q, k, v, torch.tensor([0, 20], device=device, dtype=torch.int32)), 16),
        ("seq_lens [33, 20] with a 32-slot cache", (q, k, v, torch.tensor([33, 20], device=device, dtype=torch.int32)), 16),
        ("5 query heads on 2 KV heads", (torch.randn(2, 5, 32, device=device).half(), k, v, seq_lens), 16),
        ("q float16, caches float32", (q, k.float(), v.float(), seq_lens), 16),
        ("seq_lens float32", (q, k, v, seq_lens.float()), 16),
        ("q (2, 4, 1, 32)", (q[:, :, None], k, v, seq_lens), 16),
        ("v with 8 more slots than k", (q, k, torch.randn(2, 2, 40, 32, device=device).half(), seq_lens), 16),
        ("q with a strided head dim", (torch.randn(2, 4, 64, device=device).half()[..., ::2], k, v, seq_lens), 16),
        ("batch 1, seq_lens [0]", (q[:1], k[:1], v[:1], torch.tensor([0], device=device, dtype=torch.int32)), 16),
        ("split_size 0", (q, k, v, seq_lens), 0),
    ]  # fmt: skip
    if device == "cuda":
        bad.append(("seq_lens on the CPU, q on the GPU", (q, k, v, seq_lens.cpu()), 16))
    for label, (bq, bk, bv, blens), split in bad:
        expect_value_error(
            lambda bq=bq, bk=bk, bv=bv, blens=blens, split=split: ex.decode_partials(
                bq, bk, bv, blens, split, block_n=16
            ),
            input=label,
            hint="check split_size % block_n, 1 <= seq_lens <= S, H_q % H_kv, one 16-bit dtype, integer seq_lens, "
            "the number of dimensions",
        )


@checks("decode_partials")
def refuses_or_computes_what_it_may_not_support(ex):
    """float32 q and caches, head_dim 80: refuse with a clear ValueError/TypeError, or be correct"""
    may_support = [
        ("float32 q and caches", random_cache(1, 4, 2, 40, 32, torch.float32, [40])),
        ("head_dim 80", random_cache(1, 4, 2, 40, 80, torch.float16, [33])),
    ]
    for label, (q, k, v, seq_lens) in may_support:
        expect_refused_or_correct(
            lambda q=q, k=k, v=v, seq_lens=seq_lens: ex.decode_partials(q, k, v, seq_lens, 32, block_n=16),
            lambda result, q=q, k=k, v=v, seq_lens=seq_lens, label=label: expect_partials(
                result, q, k, v, seq_lens, 32, label + " (accepted, so it must be right)"
            ),
            input=label,
            hint="either raise ValueError with a message before launching, or compute it correctly",
        )


def huge_cache(batch, heads, kv_heads, cache_len, head_dim, lens, dtype=torch.float16):
    """A (B, H_kv, S, d) cache pair on the GPU that is NaN everywhere but the first lens[b] slots of each sequence, q
    (B, H, d): built without a float32 temporary of the cache's size."""
    q = torch.randn(batch, heads, head_dim, device=triton_device()).to(dtype)
    k = torch.full((batch, kv_heads, cache_len, head_dim), float("nan"), device=triton_device(), dtype=dtype)
    v = torch.full_like(k, float("nan"))
    for b, n in enumerate(lens):
        k[b, :, :n] = torch.randn(kv_heads, n, head_dim, device=triton_device()).to(dtype)
        v[b, :, :n] = torch.randn(kv_heads, n, head_dim, device=triton_device()).to(dtype)
    return q, k, v, torch.tensor(lens, device=triton_device(), dtype=torch.int32)


@checks("decode_partials", requires_compiled=True)
def batch_offsets_past_2_31_elements(ex):
    """a cache of 3 x (2**30 + 2**23) elements per tensor (3 sequences of 8.45M slots, 1 KV head, d 128, fp16, 6.5 GB
    each): sequence 2 starts past 2**31 elements, where an int32 batch * stride_kb wraps; short lengths, splits of
    2**21 keys, the partial states merged in float64 vs SDPA per sequence"""
    cache_len = 2**23 + 2**16  # stride_kb = 2**30 + 2**23 < 2**31 (an int32 argument); 2 * stride_kb > 2**31
    lens = [200, 77, 300]
    q, k, v, seq_lens = huge_cache(3, 4, 1, cache_len, 128, lens)
    label = (
        f"q {tuple(q.shape)}, k/v {tuple(k.shape)} float16 (stride_kb {k.stride(0)}: sequence 2 starts at element "
        f"{2 * k.stride(0)} > 2**31), seq_lens {lens}, split_size 2**21"
    )
    try:
        m, lsum, acc = ex.decode_partials(q, k, v, seq_lens, 2**21)
        out, lse = combined64(m, lsum, acc)
        out64, lse64 = sdpa_per_sequence(q, k, v, seq_lens)
        out_same, _ = sdpa_per_sequence(q, k, v, seq_lens, dtype=q.dtype)
        _, lse32 = sdpa_per_sequence(q, k, v, seq_lens, dtype=torch.float32)
        hint = "cast the batch index to int64 before batch * stride_kb (2 * stride_kb passes 2**31 here)"
        what = "softmax(q k^T) v from the merged partial states"
        expect_close(out, out64, baseline=out_same, dtype=q.dtype, input=label, what=what, hint=hint)
        expect_close(
            lse, lse64, baseline=lse32, dtype=torch.float32, input=label, what="lse of the merged states", hint=hint
        )
    finally:
        del k, v
        torch.cuda.empty_cache()


@checks("decode_partials", requires_compiled=True)
def partials_at_scale(ex):
    """Llama-3-8B heads (32 on 8, d 128), a 5000-slot cache, lengths 5000, 1 and 4097, splits of 1024, default
    block_n, bf16 and fp16"""
    for dtype in sixteen_bit_dtypes():
        q, k, v, seq_lens = random_cache(3, 32, 8, 5000, 128, dtype, [5000, 1, 4097])
        label = describe(q=q, k=k) + ", seq_lens [5000, 1, 4097], split_size 1024"
        expect_partials(ex.decode_partials(q, k, v, seq_lens, 1024), q, k, v, seq_lens, 1024, label)


# ------------------------------------------------------------------------------------------------- combine_splits


def random_states(batch, heads, n_splits, head_dim, empty=(), spread=5.0):
    """Partial states on the Triton device: m in [-spread, spread], l > 0, acc random; (b, h, s) in `empty` get the
    empty-slice state (-inf, 0, 0). Never all of a row."""
    device = triton_device()
    m = (torch.rand(batch, heads, n_splits) * 2 - 1) * spread
    lsum = torch.rand(batch, heads, n_splits) * 3 + 0.5
    acc = torch.randn(batch, heads, n_splits, head_dim) * lsum[..., None]
    for index in empty:
        m[index], lsum[index], acc[index] = float("-inf"), 0.0, 0.0
    return m.to(device), lsum.to(device), acc.to(device)


def combined64(m, lsum, acc):
    """Closed form, written as a mixture: each non-empty slice's normalised output acc/l weighs exp(m + log l - lse),
    lse = log sum_s exp(m_s + log l_s) (computed with max subtraction in float64)."""
    m, lsum, acc = (t.cpu().double() for t in (m, lsum, acc))
    log_mass = m + lsum.log()  # -inf for empty slices
    top = log_mass.amax(-1, keepdim=True)
    lse = top[..., 0] + (log_mass - top).exp().sum(-1).log()
    weights = (log_mass - lse[..., None]).exp()  # (B, H, n), sums to 1
    normalised = torch.where(lsum[..., None] > 0, acc / lsum.clamp_min(1e-300)[..., None], torch.zeros_like(acc))
    return (weights[..., None] * normalised).sum(-2), lse


def combined32(m, lsum, acc):
    """The tolerance baseline: the merge rule evaluated by torch in float32 on the CPU."""
    m, lsum, acc = (t.cpu().float() for t in (m, lsum, acc))
    top = m.amax(-1, keepdim=True)
    w = (m - top).exp()
    total = (w * lsum).sum(-1)
    return (w[..., None] * acc).sum(-2) / total[..., None], top[..., 0] + total.log()


def expect_combined(result, m, lsum, acc, out_dtype, label):
    out, lse = result
    batch, heads, _, head_dim = acc.shape
    expect_tensor(out, shape=(batch, heads, head_dim), dtype=out_dtype, input=label, what="out")
    expect_tensor(lse, shape=(batch, heads), dtype=torch.float32, input=label, what="lse")
    out64, lse64 = combined64(m, lsum, acc)
    out32, lse32 = combined32(m, lsum, acc)
    expect_close(out, out64, baseline=out32.to(out_dtype), input=label, what="out", hint=HINT_COMBINE)
    expect_close(lse, lse64, baseline=lse32, input=label, what="lse", hint=HINT_COMBINE)


@checks("combine_splits", gate=True)
def combine_stays_inside_its_output(ex):
    """writes into a strided out window (2, 3, 32) of a (2, 4, 40) NaN buffer, 5 splits; the guards must survive"""
    m, lsum, acc = random_states(2, 3, 5, 32, empty=[(0, 1, 4), (1, 2, 0)])
    buffer, out = guarded((2, 3, 32), (0, 1, 8), device=triton_device())
    label = f"m, l (2, 3, 5), acc (2, 3, 5, 32), out a float32 window with strides {out.stride()}, 2 empty slices"
    result = ex.combine_splits(m, lsum, acc, out=out)
    expect_guard_untouched(buffer, out.shape, input=label, hint="write out[b, h, :] through stride_ob and stride_oh")
    expect(
        result[0].data_ptr() == out.data_ptr(),
        "did not return the out tensor it was given",
        input=label,
        expected="the same tensor",
        got="another tensor",
        hint="when out is given, write into it and return it",
    )
    expect_combined(result, m, lsum, acc, torch.float32, label)


@checks("combine_splits")
def partial_states_in_their_own_layouts(ex):
    """out a slice of a fused float16 tensor (written through its own strides); then m, l and acc each in a layout of
    their own (a fused slice, padded rows, transposed storage), which combine_splits documents as contiguous: refused
    or right"""
    m, lsum, acc = random_states(2, 3, 5, 32, empty=[(1, 0, 2)])
    out = with_layout(torch.zeros(2, 3, 32, device=triton_device(), dtype=torch.float16), "fused_slice")
    label = f"m, l (2, 3, 5), acc (2, 3, 5, 32) contiguous; out float16 with strides {out.stride()}"
    expect_combined(ex.combine_splits(m, lsum, acc, out=out), m, lsum, acc, torch.float16, label)
    views = distinct_layouts(m, lsum, acc)
    label = describe_layouts(m=views[0], l=views[1], acc=views[2])
    expect_refused_or_correct(
        lambda: ex.combine_splits(*views, out_dtype=torch.float16),
        lambda result: expect_combined(result, m, lsum, acc, torch.float16, label + " (accepted, so it must be right)"),
        input=label,
        hint="the kernel addresses m, l and acc as contiguous: refuse other layouts with a ValueError (or copy them)",
    )


@checks("combine_splits")
def combine_matches_closed_form(ex):
    """random states, 1, 3, 5 and 16 splits, empty slices (m = -inf, l = 0), out in float32, float16 (+bfloat16)"""
    cases = [(2, 3, 1, 32, []), (1, 4, 3, 64, [(0, 0, 0), (0, 3, 2)]), (2, 2, 5, 16, [(1, 1, 4)]), (1, 2, 16, 128, [])]
    for out_dtype in triton_dtypes():
        for batch, heads, n_splits, head_dim, empty in cases:
            m, lsum, acc = random_states(batch, heads, n_splits, head_dim, empty)
            label = f"m, l ({batch}, {heads}, {n_splits}), acc (..., {head_dim}), empty slices {empty}, out {out_dtype}"
            expect_combined(ex.combine_splits(m, lsum, acc, out_dtype=out_dtype), m, lsum, acc, out_dtype, label)


@checks("combine_splits")
def combine_of_true_slices_is_attention(ex):
    """the float64 slice states of a real decode (checks' own), in float32, combined: SDPA's output and lse"""
    for dtype in sixteen_bit_dtypes():
        q, k, v, seq_lens = random_cache(2, 4, 2, 90, 32, dtype, [90, 41])
        m, lsum, acc = (t.float().to(q.device) for t in slice_states(q, k, v, seq_lens, 32))
        label = describe(q=q, k=k) + ", seq_lens [90, 41], the checks' states of 3 slices of 32 keys"
        out, lse = ex.combine_splits(m, lsum, acc, out_dtype=dtype)
        out64, lse64 = sdpa_per_sequence(q, k, v, seq_lens)
        out_same, _ = sdpa_per_sequence(q, k, v, seq_lens, dtype=dtype)
        expect_close(out, out64, baseline=out_same, input=label, what="out", hint=HINT_COMBINE)
        expect_close(lse, lse64, input=label, what="lse", hint=HINT_COMBINE)


@checks("combine_splits")
def large_maxima_do_not_overflow(ex):
    """slice maxima spread over [-120, 120] (exp(120) overflows float32), then all in [-180, -140] (exp underflows):
    the max must be subtracted first, and padded lanes must not take part in it"""
    m, lsum, acc = random_states(2, 2, 6, 32, empty=[(0, 0, 1)], spread=120.0)
    label = "m in [-120, 120], l in [0.5, 3.5], 6 splits, one empty"
    out, lse = ex.combine_splits(m, lsum, acc, out_dtype=torch.float32)
    expect(
        bool(torch.isfinite(out).all() and torch.isfinite(lse).all()),
        "inf or nan in the combined output",
        input=label,
        expected="finite values",
        got=f"{int((~torch.isfinite(out)).sum())} non-finite values in out",
        hint="subtract M = max_s m_s before exp",
    )
    expect_combined((out, lse), m, lsum, acc, torch.float32, label)
    m, lsum, acc = random_states(1, 3, 5, 32, spread=20.0)
    m = m - 160.0  # every maximum in [-180, -140]: exp(m) underflows float32 unless M = max m is subtracted
    label = "m in [-180, -140] (all very negative), 5 splits"
    expect_combined(ex.combine_splits(m, lsum, acc, out_dtype=torch.float32), m, lsum, acc, torch.float32, label)


@checks("combine_splits")
def combine_refuses_bad_states(ex):
    """l with another number of splits than m, 0 splits, float64 states, a non-contiguous acc, an out of the wrong
    shape"""
    m, lsum, acc = random_states(1, 2, 4, 32)
    wide = torch.zeros(1, 2, 4, 64, device=acc.device)
    bad = [
        ("l (1, 2, 3), m (1, 2, 4)", (m, lsum[..., :3].contiguous(), acc, None)),
        ("0 splits", (m[..., :0].contiguous(), lsum[..., :0].contiguous(), acc[..., :0, :].contiguous(), None)),
        ("float64 m, l, acc", (m.double(), lsum.double(), acc.double(), None)),
        ("acc a strided view (every 2nd element of d = 64)", (m, lsum, wide[..., ::2], None)),
        ("out (1, 2, 16) for d = 32", (m, lsum, acc, torch.empty(1, 2, 16, device=acc.device))),
    ]
    for label, (bm, bl, bacc, bout) in bad:
        expect_value_error(
            lambda bm=bm, bl=bl, bacc=bacc, bout=bout: ex.combine_splits(bm, bl, bacc, out=bout),
            input=label,
            hint="check shapes, float32 and contiguity of m, l, acc, and out's shape",
        )


# ------------------------------------------------------------------------------------------------ decode_attention


def splits_by_definition(batch, kv_heads, cache_len, num_sms, min_keys=256, waves=4):
    """min(the smallest power of two that gives waves * num_sms programs, the largest power of two whose slices keep
    >= min_keys keys), at least 1."""
    powers = [2**i for i in range(31)]
    occupancy = next(n for n in powers if batch * kv_heads * n >= waves * num_sms)
    long_enough = max([n for n in powers if -(-cache_len // n) >= min_keys], default=1)
    return max(1, min(occupancy, long_enough))


@checks("decode_attention")
def split_rule_closed_form(ex):
    """choose_num_splits: Llama-3-8B on an H200 (1, 8 and 128 sequences of 32k), short caches, other SM counts and
    min_keys, against the rule stated independently"""
    cases = [
        (1, 8, 32768, 132, {}),
        (8, 8, 32768, 132, {}),
        (128, 8, 32768, 132, {}),
        (4, 8, 300, 132, {}),
        (1, 8, 2048, 132, {}),
        (2, 4, 100000, 108, {}),
        (3, 1, 5000, 132, {"min_keys": 512}),
        (1, 32, 65536, 80, {"waves": 2}),
        (16, 8, 1, 132, {}),
        (4, 8, 32768, 8, {}),  # 32 programs are exactly 4 waves of 8 SMs: no split
        (1, 1, 511, 132, {}),  # ceil(511 / 2) = 256 keys still fill a split
    ]
    for batch, kv_heads, cache_len, sms, kwargs in cases:
        got = ex.choose_num_splits(batch, kv_heads, cache_len, sms, **kwargs)
        want = splits_by_definition(batch, kv_heads, cache_len, sms, **kwargs)
        expect(
            got == want,
            "wrong number of splits",
            input=f"batch {batch}, {kv_heads} KV heads, cache {cache_len}, {sms} SMs {kwargs or ''}",
            expected=f"{want} (grid {batch * kv_heads * want} programs, slices of {-(-cache_len // want)} keys)",
            got=repr(got),
            hint="double while B * H_kv * n < waves * SMs and ceil(S / (2n)) >= min_keys",
        )


DECODE_CASES = [
    # (batch, H_q, H_kv, S, d, lengths, num_splits)
    (3, 8, 2, 80, 32, [80, 1, 45], None),
    (3, 8, 2, 80, 32, [80, 1, 45], 1),
    (3, 8, 2, 80, 32, [80, 1, 45], 3),  # slices of 32 keys: the last one partial
    (2, 4, 4, 50, 64, [17, 50], 7),  # more splits than key blocks of sequence 0: empty slices
    (1, 6, 2, 100, 128, [99], 2),
    (2, 4, 1, 40, 16, [40, 3], 64),  # more splits asked than blocks: capped by split_size rounding
]


@checks("decode_attention")
def matches_sdpa_per_sequence(ex):
    """vs SDPA per sequence (float64): lengths 1 to S in one batch, 1 to 64 splits, GQA 4:1, 3:1, 1:1, d 16 to 128,
    NaN past every length; fp16 (+bf16 on a GPU)"""
    for dtype in sixteen_bit_dtypes():
        for batch, heads, kv_heads, cache_len, head_dim, lens, num_splits in DECODE_CASES:
            q, k, v, seq_lens = random_cache(batch, heads, kv_heads, cache_len, head_dim, dtype, lens)
            label = describe(q=q, k=k) + f", seq_lens {lens}, num_splits={num_splits}"
            result = ex.decode_attention(q, k, v, seq_lens, num_splits=num_splits)
            expect_decode(result, q, k, v, seq_lens, label)


@checks("decode_attention")
def each_query_head_reads_its_group(ex):
    """6 query heads on 2 and on 3 KV heads: head h must use KV head h // (H_q / H_kv), as SDPA's enable_gqa does"""
    for kv_heads in (2, 3):
        q, k, v, seq_lens = random_cache(1, 6, kv_heads, 40, 32, torch.float16, [40])
        out, _ = ex.decode_attention(q, k, v, seq_lens, num_splits=2)
        group = 6 // kv_heads
        for head in range(6):
            per_kv = [
                sdpa_per_sequence(q[:, head : head + 1], k[:, j : j + 1], v[:, j : j + 1], seq_lens)[0]
                for j in range(kv_heads)
            ]
            errors = [float((out[:, head : head + 1].double().cpu() - ref).abs().max()) for ref in per_kv]
            used = min(range(kv_heads), key=lambda j: errors[j])
            expect(
                used == head // group,
                f"query head {head} attends to the wrong KV head",
                input=describe(q=q, k=k) + f", group size {group}",
                expected=f"KV head {head // group} (= {head} // {group})",
                got=f"closest to KV head {used}",
                hint="the group of KV head j is query heads j*g .. j*g + g - 1",
            )


@checks("decode_attention")
def explicit_scale_and_bad_inputs(ex):
    """sm_scale=0.25 replaces 1/sqrt(d); num_splits 0, a length past the cache, a length 0, a 2-D q are refused"""
    q, k, v, seq_lens = random_cache(2, 4, 2, 48, 32, torch.float16, [48, 30])
    label = describe(q=q, k=k) + ", seq_lens [48, 30], sm_scale=0.25, num_splits=3"
    expect_decode(ex.decode_attention(q, k, v, seq_lens, sm_scale=0.25, num_splits=3), q, k, v, seq_lens, label, 0.25)
    device = triton_device()
    bad = [
        ("num_splits=0", (q, k, v, seq_lens), 0),
        ("seq_lens [49, 30] with a 48-slot cache", (q, k, v, torch.tensor([49, 30], device=device, dtype=torch.int32)), 2),
        ("seq_lens [48, 0]", (q, k, v, torch.tensor([48, 0], device=device, dtype=torch.int32)), 2),
        ("q (2, 128)", (q.flatten(1), k, v, seq_lens), 2),
    ]  # fmt: skip
    for blabel, (bq, bk, bv, blens), splits in bad:
        expect_value_error(
            lambda bq=bq, bk=bk, bv=bv, blens=blens, splits=splits: ex.decode_attention(
                bq, bk, bv, blens, num_splits=splits
            ),
            input=blabel,
            hint="check num_splits >= 1 and 1 <= seq_lens <= S before launching",
        )


@checks("decode_attention", requires_compiled=True)
def matches_sdpa_at_scale(ex):
    """Llama-3-8B heads (32 on 8, d 128), a 8192-slot cache with lengths 8192, 3000 and 1, default splits and 1"""
    for dtype in sixteen_bit_dtypes():
        q, k, v, seq_lens = random_cache(3, 32, 8, 8192, 128, dtype, [8192, 3000, 1])
        for num_splits in (None, 1):
            label = describe(q=q, k=k) + f", seq_lens [8192, 3000, 1], num_splits={num_splits}"
            expect_decode(ex.decode_attention(q, k, v, seq_lens, num_splits=num_splits), q, k, v, seq_lens, label)


@checks("decode_attention")
def each_operand_in_its_own_layout_end_to_end(ex):
    """q a slice of a fused QKV, k with padded rows, v a window of a bigger cache (head dim contiguous), 3 splits, vs
    SDPA per sequence on the same values"""
    q, k, v, seq_lens = random_cache(3, 8, 2, 50, 32, torch.float16, [50, 1, 33])
    lq, lk, lv = distinct_layouts(q, k, v, order=UNIT_LAST_STRIDE)
    label = describe_layouts(q=lq, k=lk, v=lv) + ", seq_lens [50, 1, 33], num_splits=3"
    out, lse = ex.decode_attention(lq, lk, lv, seq_lens, num_splits=3)
    expect_decode((out, lse), q, k, v, seq_lens, label)


# ------------------------------------------------------------------------------------------------------ benchmark


def naive_decode(q, k, v):
    """What one writes in PyTorch: repeat the KV heads, scores, softmax in float32, weighted sum."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q[:, :, None] @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])  # (B, H, 1, S)
    return (torch.softmax(scores, dim=-1).to(q.dtype) @ v)[:, :, 0]


def sdpa_default(q, k, v):
    """F.scaled_dot_product_attention as a user calls it: no backend forced, GQA through enable_gqa."""
    return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]


def decode_rows(ex, batch: int) -> list[BenchRow]:
    cache_len, heads, kv_heads, head_dim = 32768, 32, 8, 128
    q = torch.randn(batch, heads, head_dim, device=triton_device(), dtype=torch.bfloat16)
    k, v = (
        torch.randn(batch, kv_heads, cache_len, head_dim, device=triton_device(), dtype=torch.bfloat16) for _ in "kv"
    )
    seq_lens = torch.full((batch,), cache_len, device=triton_device(), dtype=torch.int32)
    kv_bytes = 2 * k.numel() * k.element_size()
    shape = f"B{batch} Hq32 Hkv8 S32768 d128 bf16"

    def yours(splits=None):
        return ex.decode_attention(q, k, v, seq_lens, num_splits=splits, validate=False)

    rows = [
        bandwidth_row("decode_attention (split-K)", shape, yours, kv_bytes),
        graph_bandwidth_row("decode_attention (split-K, CUDA graph)", shape, yours, kv_bytes),
        bandwidth_row("decode_attention, num_splits=1", shape, lambda: yours(1), kv_bytes),
        bandwidth_row("SDPA default backend (enable_gqa)", shape, lambda: sdpa_default(q, k, v), kv_bytes),
    ]
    rows += baseline_rows("softmax(q k^T) v", shape, naive_decode, (q, k, v), bytes_moved=kv_bytes)
    rows.append(copy_row(kv_bytes // 2))  # reads kv_bytes / 2 and writes as much: kv_bytes of traffic
    return rows


def benchmark(ex):
    """Llama-3-8B decode (32 query heads, 8 KV heads, d 128, bf16) over a 32768-token cache, batch 8 and 1: yours
    (split-K, and forced to 1 split), SDPA's default backend, plain PyTorch eager and compiled, and the copy roofline,
    all in GB/s of K+V bytes."""
    return decode_rows(ex, 8) + decode_rows(ex, 1)
